/* rma/slot.c - the initiator's command slots: the table, its free stack
 * (a slot is reused only after its completion is polled), and the ops in
 * flight as a min-heap by deadline (timeouts differ by peer). */
#include <stdlib.h>

#include "portal.h"

int erma__slots_init(struct erma_rma *rma)
{
    struct rma_portal *p = rma->portal;
    const uint32_t n = rma->cfg.slots;
    p->slots = calloc(n, sizeof *p->slots);
    p->heap = malloc(n * sizeof *p->heap);
    if (!p->slots || !p->heap)
        return ERMA_ENOMEM;
    p->free_slots = -1;
    for (int32_t i = (int32_t)n - 1; i >= 0; i--) {
        p->slots[i].next = p->free_slots;
        p->free_slots = i;
    }
    p->nfree = n;
    for (int q = 0; q < ERMA_RMA_PRIORITIES; q++)
        p->queued[q] = (struct list){-1, -1};
    p->fenced = (struct list){-1, -1};
    return ERMA_OK;
}

void erma__slots_fini(struct erma_rma *rma)
{
    free(rma->portal->slots);
    free(rma->portal->heap);
}

int32_t erma__slot_alloc(struct erma_rma *rma)
{
    struct rma_portal *p = rma->portal;
    const int32_t i = p->free_slots;
    if (i >= 0) {
        p->free_slots = p->slots[i].next;
        p->nfree--;
    }
    return i;
}

void erma__slot_free(struct erma_rma *rma, struct slot *s)
{
    struct rma_portal *p = rma->portal;
    s->state = SLOT_FREE;
    s->next = p->free_slots;
    p->free_slots = (int32_t)(s - p->slots);
    p->nfree++;
    p->hooks.room(rma); /* a transfer may have waited for a slot */
}

void erma__portal_release(struct erma_rma *rma, uint32_t id)
{
    erma__slot_free(rma, &rma->portal->slots[id]);
}

bool erma__portal_live(const struct erma_rma *rma, uint32_t id)
{
    const struct slot *s = &rma->portal->slots[id];
    return s->state != SLOT_FREE && !s->chunk;
}

bool erma__slot_free_for(const struct erma_rma *rma, uint8_t prio, bool chunk)
{
    const struct rma_portal *p = rma->portal;
    if (chunk && p->fenced.head >= 0) /* fenced commands may wait for it (fence.c) */
        return p->nfree > 0;
    return p->nfree > prio * (rma->cfg.slots / 16);
}

bool erma__slot_any_free(const struct erma_rma *rma)
{
    return rma->portal->free_slots >= 0;
}

/* ---- ops in flight: a min-heap by deadline ---- */

static void heap_set(struct rma_portal *p, uint32_t pos, struct heap_entry e)
{
    p->heap[pos] = e;
    p->slots[e.slot].heap_idx = (int32_t)pos;
}

static void heap_up(struct rma_portal *p, uint32_t pos)
{
    const struct heap_entry e = p->heap[pos];
    for (; pos > 0 && p->heap[(pos - 1) / 2].deadline_ns > e.deadline_ns; pos = (pos - 1) / 2)
        heap_set(p, pos, p->heap[(pos - 1) / 2]);
    heap_set(p, pos, e);
}

static void heap_down(struct rma_portal *p, uint32_t pos)
{
    const struct heap_entry e = p->heap[pos];
    for (;;) {
        uint32_t c = 2 * pos + 1;
        if (c >= p->nheap)
            break;
        if (c + 1 < p->nheap && p->heap[c + 1].deadline_ns < p->heap[c].deadline_ns)
            c++;
        if (p->heap[c].deadline_ns >= e.deadline_ns)
            break;
        heap_set(p, pos, p->heap[c]);
        pos = c;
    }
    heap_set(p, pos, e);
}

void erma__heap_push(struct erma_rma *rma, int32_t i)
{
    struct rma_portal *p = rma->portal;
    heap_set(p, p->nheap++, (struct heap_entry){p->slots[i].deadline_ns, i});
    heap_up(p, p->nheap - 1);
}

void erma__heap_remove(struct erma_rma *rma, int32_t i)
{
    struct rma_portal *p = rma->portal;
    const uint32_t pos = (uint32_t)p->slots[i].heap_idx;
    const struct heap_entry last = p->heap[--p->nheap];
    p->slots[i].heap_idx = -1;
    if (last.slot == i)
        return;
    heap_set(p, pos, last);
    heap_up(p, pos);
    heap_down(p, (uint32_t)p->slots[last.slot].heap_idx);
}

