/*
 * common/ring.h - bounded lock-free rings of pointers (internal: not installed).
 *
 * erma_spsc: one producer thread, one consumer thread.
 * erma_mpsc: any number of producer threads, one consumer thread (the
 *            bounded queue of D. Vyukov, one sequence number per cell).
 *
 * Capacity is rounded up to a power of two. push returns ERMA_EAGAIN when
 * the ring is full and never blocks; pop returns NULL when it is empty.
 * NULL cannot be stored.
 */
#ifndef ERMA_RING_H
#define ERMA_RING_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct erma_spsc {
    alignas(64) _Atomic size_t head; /* next to pop, written by consumer */
    alignas(64) _Atomic size_t tail; /* next to push, written by producer */
    alignas(64) size_t mask;
    void **slots;
};

int erma__spsc_init(struct erma_spsc *r, size_t capacity);
void erma__spsc_destroy(struct erma_spsc *r);
int erma__spsc_push(struct erma_spsc *r, void *item);
void *erma__spsc_pop(struct erma_spsc *r);
size_t erma__spsc_count(struct erma_spsc *r);

struct erma_mpsc_cell {
    _Atomic size_t seq;
    void *item;
};

struct erma_mpsc {
    alignas(64) _Atomic size_t tail; /* producers claim here */
    alignas(64) size_t head;         /* consumer only */
    alignas(64) size_t mask;
    struct erma_mpsc_cell *cells;
};

int erma__mpsc_init(struct erma_mpsc *r, size_t capacity);
void erma__mpsc_destroy(struct erma_mpsc *r);
int erma__mpsc_push(struct erma_mpsc *r, void *item);
void *erma__mpsc_pop(struct erma_mpsc *r);

#endif
