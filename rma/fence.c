/* rma/fence.c - fences: fenced WRITEs held until the writes before them
 * have ended.
 *
 * A fenced WRITE (cmd.fence, xfer.fence) is applied only after every
 * earlier WRITE of this engine to the same region (same peer and region id)
 * has completed: "earlier" are the WRITE commands submitted and the WRITE
 * transfers started before it and not completed then (a transfer with all
 * its chunks and retries). The fence is enforced here, at the initiator,
 * as MP-RDMA's "stop-wait" synchronise: the fenced write's request is not
 * sent until those writes have completed. The target then needs no state
 * per initiator (1RMA's target keeps none, and could not learn of writes
 * lost on the way), and nothing else changes on the wire: the request's
 * FENCE flag is informational. It holds because a completed write writes
 * nothing more: DONE comes after its last byte is applied, and after any
 * failure (TIMEOUT included: the target stops taking its data at its
 * deadline less clock_skew_ns) none of its data is applied any more. The
 * cost is the round trips of the writes it waits for.
 *
 * If any write it waited for failed, the fenced write is not sent: it
 * completes with ERMA_ECANCELLED, after that write's completion, having
 * written nothing (a flag written after data must not land on data that
 * did not). Non-fenced writes and reads never wait for anything.
 *
 * A fenced command that has to wait holds its slot (its id is returned at
 * submit) in SLOT_FENCED, outside the priority queues, so it blocks no
 * other op, and its DISPATCH_TIMEOUT runs only from its release into the
 * queue. That is safe: what it waits for already holds its slot (commands)
 * or is a transfer, which holds none; for those, at most cfg.slots - 1
 * slots are ever SLOT_FENCED (submit refuses more with ERMA_ENOSLOTS), so
 * one slot always frees up for a transfer's next chunk (once its
 * completion is polled, as for any command). A waiting fenced transfer
 * holds no slot: the executor keeps it, told of the writes it waits for
 * through the portal's hooks. Waits are bounded: each write waited for
 * completes within its timeouts (and a transfer's retries).
 *
 * Writes are numbered in submission order (wseq), commands and transfers
 * alike, so that a write's end is counted only by the fenced writes that
 * came after it. Chunks are not writes of their own: their transfer is. */
#include "portal.h"

uint64_t erma__fence_number(struct erma_rma *rma)
{
    return ++rma->portal->wseq;
}

static bool write_in_progress(const struct slot *s)
{
    return s->op == ERMA_RMA_WRITE && !s->chunk && s->state != SLOT_FREE &&
           s->state != SLOT_DONE;
}

uint32_t erma__fence_count(const struct erma_rma *rma, int peer, uint32_t region)
{
    const struct rma_portal *p = rma->portal;
    uint32_t n = 0;
    for (uint32_t i = 0; i < rma->cfg.slots; i++) {
        const struct slot *s = &p->slots[i];
        n += write_in_progress(s) && s->peer == peer && s->rkey.region == region;
    }
    return n + p->hooks.writes(rma, peer, region);
}

uint32_t erma__fence_held(const struct erma_rma *rma)
{
    const struct rma_portal *p = rma->portal;
    uint32_t n = 0;
    for (int32_t i = p->fenced.head; i >= 0; i = p->slots[i].next)
        n++;
    return n;
}

void erma__fence_hold(struct erma_rma *rma, int32_t i)
{
    erma__list_push(&rma->portal->fenced, rma->portal->slots, i);
    rma->stats.fence_held++;
}

bool erma__fence_mark(struct erma_rma *rma, int peer, uint32_t region, uint64_t wseq,
                      int status)
{
    struct rma_portal *p = rma->portal;
    bool released = false;
    for (int32_t i = p->fenced.head; i >= 0; i = p->slots[i].next) {
        struct slot *s = &p->slots[i];
        if (s->wseq <= wseq || s->peer != peer || s->rkey.region != region || !s->fence_wait)
            continue; /* not one it waits for: it came later, or elsewhere */
        if (status != ERMA_OK)
            s->fence_status = ERMA_ECANCELLED;
        released |= --s->fence_wait == 0;
    }
    p->hooks.write_done(rma, peer, region, wseq, status);
    return released;
}

struct slot *erma__fence_settle(struct erma_rma *rma)
{
    struct rma_portal *p = rma->portal;
    for (int32_t i = p->fenced.head, next; i >= 0; i = next) {
        struct slot *s = &p->slots[i];
        next = s->next;
        if (s->fence_wait)
            continue;
        if (s->fence_status != ERMA_OK)
            return s;
        erma__list_remove(&p->fenced, p->slots, i);
        s->state = SLOT_QUEUED;
        s->queued_ns = rma->ep->now;
        erma__list_push(&p->queued[s->prio], p->slots, i);
        p->nqueued++;
    }
    return NULL;
}
