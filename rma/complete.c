/* rma/complete.c - how the initiator's ops end: out of their queue or the
 * deadline heap, the inbound window and the path given back, then a
 * completion on the queue, or, for a transfer's chunk, the executor's
 * hook; and the fenced writes an ending WRITE releases or cancels. */
#include "portal.h"

static void chunk_end(struct erma_rma *rma, struct slot *s)
{
    const struct rma_chunk_end e = {.tag = s->tag, .local = s->local, .status = s->status,
                                    .submit_ns = s->submit_ns, .issue_ns = s->issue_ns,
                                    .host_ns = s->host_ns,
                                    .path_out = s->path_out};
    rma->portal->hooks.chunk_done(rma, &e);
    erma__slot_free(rma, s);
}

void erma__portal_finish(struct erma_rma *rma, struct slot *s, int status)
{
    struct rma_portal *p = rma->portal;
    const int32_t i = (int32_t)(s - p->slots);
    const bool unsent = s->state == SLOT_QUEUED || s->state == SLOT_FENCED;
    if (s->state == SLOT_QUEUED) {
        erma__list_remove(&p->queued[s->prio], p->slots, i);
        p->nqueued--;
    }
    else if (s->state == SLOT_FENCED)
        erma__list_remove(&p->fenced, p->slots, i);
    else
        erma__heap_remove(rma, i);
    if (!unsent && rma->ep->npaths > 1)
        s->path_out = erma__path_end(rma, s->peer, s->path, status);
    if (s->op == ERMA_RMA_READ && !unsent) {
        p->inbound -= s->len;
        p->hooks.room(rma); /* the inbound window opened */
    } else if (s->op == ERMA_RMA_READ) {
        p->queued_in -= s->len;
    }
    if (unsent)
        s->issue_ns = rma->ep->now;
    s->status = status;
    rma->stats.completed++;
    if (s->chunk) {
        chunk_end(rma, s);
        return;
    }
    s->state = SLOT_DONE;
    const struct erma_rma_completion c = {.tag = s->tag, .status = status, .id = (uint32_t)i,
                                          .issue_delay_ns = s->issue_ns - s->submit_ns,
                                          .total_delay_ns = rma->ep->now - s->submit_ns};
    erma__cq_complete(rma, &c, s->cb, s->cb_ctx);
    /* after its completion is queued: a fenced write it cancels completes later */
    if (s->op == ERMA_RMA_WRITE)
        erma__portal_write_done(rma, s->peer, s->rkey.region, s->wseq, status);
}

/* Settles the fenced slots that wait no more (fence.c): into their queues,
 * or cancelled, which may release or cancel later ones, until none is left
 * to settle. Not again from inside: a cancel ends a WRITE too. */
void erma__portal_write_done(struct erma_rma *rma, int peer, uint32_t region, uint64_t wseq,
                             int status)
{
    struct rma_portal *p = rma->portal;
    if (!erma__fence_mark(rma, peer, region, wseq, status) || p->fence_settling)
        return;
    p->fence_settling = true;
    for (struct slot *s; (s = erma__fence_settle(rma));) {
        rma->stats.fence_cancelled++;
        erma__portal_finish(rma, s, s->fence_status);
    }
    p->fence_settling = false;
}
