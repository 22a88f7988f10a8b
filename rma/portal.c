/* rma/portal.c - the initiator's portal: its lifetime, the executor's
 * hooks, and commands submitted into a slot and their priority's queue (or
 * held by a fence), issued at once into the TX batch when they may. */
#include <stdlib.h>

#include "portal.h"

int erma__portal_init(struct erma_rma *rma)
{
    rma->portal = calloc(1, sizeof *rma->portal);
    if (!rma->portal)
        return ERMA_ENOMEM;
    rma->portal->last_poll_ns = rma->ep->now; /* read at creation */
    return erma__slots_init(rma);
}

void erma__portal_fini(struct erma_rma *rma)
{
    if (!rma->portal)
        return;
    erma__slots_fini(rma);
    free(rma->portal->peers);
    free(rma->portal);
    rma->portal = NULL;
}

void erma__portal_set_hooks(struct erma_rma *rma, const struct rma_portal_hooks *h)
{
    rma->portal->hooks = *h;
}

int erma__rkey_usable(const struct erma_rma *rma, const struct erma_rkey *k)
{
    if (k->cipher != ERMA_RMA_CHACHA20_POLY1305 && k->cipher != ERMA_RMA_AES256_GCM)
        return ERMA_EINVAL;
    return k->cipher == ERMA_RMA_AES256_GCM && !rma->aes ? ERMA_ENOTSUP : ERMA_OK;
}

static int cmd_valid(const struct erma_rma *rma, const struct erma_rma_cmd *c)
{
    if (!rma || !c || !erma__peer_known(rma, c->peer) || !c->local ||
        c->priority >= ERMA_RMA_PRIORITIES ||
        (c->op != ERMA_RMA_READ && c->op != ERMA_RMA_WRITE && c->op != ERMA_RMA_REKEY) ||
        (c->op != ERMA_RMA_REKEY && c->len == 0))
        return ERMA_EINVAL;
    if (c->fence && c->op != ERMA_RMA_WRITE)
        return ERMA_EINVAL; /* a fence orders WRITEs only */
    if (c->op != ERMA_RMA_REKEY && c->len > ERMA_RMA_MAX_OP)
        return ERMA_E2BIG;
    return erma__rkey_usable(rma, &c->rkey);
}

static int submit(struct erma_rma *rma, const struct erma_rma_cmd *c, bool chunk, uint64_t due)
{
    const int valid = cmd_valid(rma, c);
    if (valid != ERMA_OK)
        return valid;
    if (!erma__slot_free_for(rma, c->priority, chunk))
        return ERMA_ENOSLOTS;
    /* A chunk of a fenced transfer: the executor held it back already; the
     * flag only marks its request. */
    const uint32_t wait = c->fence && !chunk ? erma__fence_count(rma, c->peer, c->rkey.region)
                                             : 0;
    if (wait && erma__fence_held(rma) + 1 >= rma->cfg.slots)
        return ERMA_ENOSLOTS; /* keep a slot that no fenced write waits in (fence.c) */
    struct rma_portal *p = rma->portal;
    const int32_t i = erma__slot_alloc(rma);
    struct slot *s = &p->slots[i];
    const uint64_t now = erma__ep_clock(rma->ep);
    *s = (struct slot){.state = wait ? SLOT_FENCED : SLOT_QUEUED, .op = (uint8_t)c->op,
                       .prio = c->priority, .chunk = chunk, .peer = c->peer, .rkey = c->rkey,
                       .offset = c->offset, .local = c->local,
                       .len = c->op == ERMA_RMA_REKEY ? RMA_REKEY_DATA : c->len,
                       .grace_ns = c->grace_ns, .tag = c->tag,
                       .cb = chunk ? NULL : c->cb, .cb_ctx = c->cb_ctx,
                       .submit_ns = now, .queued_ns = now, .due_ns = due, .fence = c->fence,
                       .fence_wait = wait,
                       .wseq = c->op == ERMA_RMA_WRITE && !chunk ? erma__fence_number(rma) : 0};
    if (wait) {
        erma__fence_hold(rma, i);
    } else {
        erma__list_push(&p->queued[c->priority], p->slots, i);
        p->nqueued++;
    }
    if (s->op == ERMA_RMA_READ)
        p->queued_in += s->len;
    rma->stats.submitted++;
    rma->open += !chunk;
    /* Into the TX batch now: the next loop pass sends it before its RX burst
     * (or a lone erma_rpc_call before then, which sends the whole batch). */
    erma__portal_issue(rma, 0);
    return i;
}

int erma__portal_submit_chunk(struct erma_rma *rma, const struct erma_rma_cmd *cmd,
                              uint64_t due_ns)
{
    return submit(rma, cmd, true, due_ns);
}

int erma_rma_submit(struct erma_rma *rma, const struct erma_rma_cmd *cmd)
{
    return submit(rma, cmd, false, 0);
}
