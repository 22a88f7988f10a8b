#include "common/ring.h"

#include <stdlib.h>

#include "erma/errors.h"

static size_t pow2_at_least(size_t n)
{
    size_t p = 2;
    while (p < n)
        p <<= 1;
    return p;
}

int erma__spsc_init(struct erma_spsc *r, size_t capacity)
{
    if (capacity == 0 || capacity > ((size_t)1 << 30))
        return ERMA_EINVAL;
    const size_t n = pow2_at_least(capacity);
    r->slots = calloc(n, sizeof *r->slots);
    if (!r->slots)
        return ERMA_ENOMEM;
    r->mask = n - 1;
    atomic_init(&r->head, 0);
    atomic_init(&r->tail, 0);
    return ERMA_OK;
}

void erma__spsc_destroy(struct erma_spsc *r)
{
    free(r->slots);
    r->slots = NULL;
}

int erma__spsc_push(struct erma_spsc *r, void *item)
{
    const size_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
    if (t - atomic_load_explicit(&r->head, memory_order_acquire) > r->mask)
        return ERMA_EAGAIN;
    r->slots[t & r->mask] = item;
    atomic_store_explicit(&r->tail, t + 1, memory_order_release);
    return ERMA_OK;
}

void *erma__spsc_pop(struct erma_spsc *r)
{
    const size_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
    if (h == atomic_load_explicit(&r->tail, memory_order_acquire))
        return NULL;
    void *item = r->slots[h & r->mask];
    atomic_store_explicit(&r->head, h + 1, memory_order_release);
    return item;
}

size_t erma__spsc_count(struct erma_spsc *r)
{
    return atomic_load_explicit(&r->tail, memory_order_acquire) -
           atomic_load_explicit(&r->head, memory_order_acquire);
}

int erma__mpsc_init(struct erma_mpsc *r, size_t capacity)
{
    if (capacity == 0 || capacity > ((size_t)1 << 30))
        return ERMA_EINVAL;
    const size_t n = pow2_at_least(capacity);
    r->cells = malloc(n * sizeof *r->cells);
    if (!r->cells)
        return ERMA_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        atomic_init(&r->cells[i].seq, i);
        r->cells[i].item = NULL;
    }
    r->mask = n - 1;
    r->head = 0;
    atomic_init(&r->tail, 0);
    return ERMA_OK;
}

void erma__mpsc_destroy(struct erma_mpsc *r)
{
    free(r->cells);
    r->cells = NULL;
}

int erma__mpsc_push(struct erma_mpsc *r, void *item)
{
    size_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
    for (;;) {
        struct erma_mpsc_cell *c = &r->cells[pos & r->mask];
        const size_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
        const intptr_t diff = (intptr_t)seq - (intptr_t)pos;
        if (diff == 0) {
            if (atomic_compare_exchange_weak_explicit(&r->tail, &pos, pos + 1,
                                                      memory_order_relaxed,
                                                      memory_order_relaxed)) {
                c->item = item;
                atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
                return ERMA_OK;
            }
        } else if (diff < 0) {
            return ERMA_EAGAIN;
        } else {
            pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
        }
    }
}

void *erma__mpsc_pop(struct erma_mpsc *r)
{
    struct erma_mpsc_cell *c = &r->cells[r->head & r->mask];
    const size_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
    if (seq != r->head + 1)
        return NULL;
    void *item = c->item;
    atomic_store_explicit(&c->seq, r->head + r->mask + 1, memory_order_release);
    r->head++;
    return item;
}
