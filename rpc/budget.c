/* What a peer can make an endpoint hold (rpc.h, Budgets): bytes of
 * messages being received, per session, per client address and per
 * endpoint, and the list of partly received requests, so that those whose
 * packets stopped coming are found without a scan of every session. */
#include "internal.h"

static bool fits(uint64_t held, uint64_t bytes, uint64_t budget)
{
    return held <= budget && bytes <= budget - held;
}

bool erma__budget_take(struct erma_rpc *rpc, uint64_t *session, uint64_t *peer, uint64_t bytes)
{
    const struct erma_rpc_cfg *c = &rpc->cfg;
    if (!fits(rpc->budget.recv_held, bytes, c->recv_budget) ||
        !fits(*session, bytes, c->recv_budget_session) ||
        (peer && !fits(*peer, bytes, c->recv_budget_peer)))
        return false;
    rpc->budget.recv_held += bytes;
    *session += bytes;
    if (peer)
        *peer += bytes;
    return true;
}

void erma__budget_give(struct erma_rpc *rpc, uint64_t *session, uint64_t *peer, uint64_t bytes)
{
    rpc->budget.recv_held -= bytes;
    *session -= bytes;
    if (peer)
        *peer -= bytes;
}

uint64_t erma_rpc_recv_held(const struct erma_rpc *rpc)
{
    return rpc ? rpc->budget.recv_held : 0;
}

/* ---- partly received requests, least recent progress first ---- */

static bool listed(const struct erma_rpc *rpc, const struct erma_req *rq)
{
    return rq->part_prev || rpc->budget.partial == rq;
}

void erma__partial_remove(struct erma_rpc *rpc, struct erma_req *rq)
{
    if (!listed(rpc, rq))
        return;
    if (rq->part_prev)
        rq->part_prev->part_next = rq->part_next;
    else
        rpc->budget.partial = rq->part_next;
    if (rq->part_next)
        rq->part_next->part_prev = rq->part_prev;
    else
        rpc->budget.partial_tail = rq->part_prev;
    rq->part_prev = rq->part_next = NULL;
}

void erma__partial_touch(struct erma_rpc *rpc, struct erma_req *rq)
{
    erma__partial_remove(rpc, rq);
    rq->progress_ns = rpc->ep->now;
    rq->part_prev = rpc->budget.partial_tail;
    if (rpc->budget.partial_tail)
        rpc->budget.partial_tail->part_next = rq;
    else
        rpc->budget.partial = rq;
    rpc->budget.partial_tail = rq;
}

struct erma_req *erma__partial_stalled(const struct erma_rpc *rpc, uint64_t now)
{
    struct erma_req *rq = rpc->budget.partial;
    return rq && since(now, rq->progress_ns) > rpc->cfg.recv_timeout_ns ? rq : NULL;
}
