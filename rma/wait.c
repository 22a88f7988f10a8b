/* rma/wait.c - completions delivered to the application beyond
 * erma_rma_poll(): callbacks, run after the loop pass's TX flush, and
 * erma_rma_wait(), which runs the loop until one op (or every op) is done. */
#include "erma/endpoint.h"
#include "executor.h"
#include "portal.h"

void erma__rma_release(struct erma_rma *rma, const struct erma_rma_completion *c)
{
    if (c->transfer)
        erma__exec_release(rma, c->id);
    else
        erma__portal_release(rma, c->id);
}

/* Only those queued before: a callback's own op could complete before the
 * next pass (one that never leaves its queue), and must not loop here. */
void erma__rma_run_callbacks(struct erma_rma *rma)
{
    struct rma_wait *w = &rma->wait;
    struct rma_done d;
    rma->in_cb = true;
    for (uint32_t n = rma->cbq.len; n > 0 && erma__cq_pop(&rma->cbq, &d); n--) {
        erma__rma_release(rma, &d.c); /* first: the callback may submit into it */
        rma->open--;
        if (erma__rma_waits_for(rma, &d.c)) {
            w->c = d.c;
            w->done = true;
        }
        d.cb(rma, &d.c, d.ctx);
    }
    rma->in_cb = false;
}

static bool op_done(void *ctx)
{
    return ((const struct erma_rma *)ctx)->wait.done;
}

static bool all_done(void *ctx)
{
    return ((const struct erma_rma *)ctx)->open == 0;
}

static bool live(const struct erma_rma *rma, int id, bool transfer)
{
    if (transfer)
        return (uint32_t)id < rma->cfg.transfers && erma__exec_live(rma, (uint32_t)id);
    return (uint32_t)id < rma->cfg.slots && erma__portal_live(rma, (uint32_t)id);
}

static int wait_one(struct erma_rma *rma, int id, bool transfer, uint64_t timeout_ns,
                    struct erma_rma_completion *out)
{
    if (erma__cq_take(rma, transfer, (uint32_t)id, out)) { /* completed already */
        erma__rma_release(rma, out);
        return ERMA_OK;
    }
    if (!live(rma, id, transfer))
        return ERMA_EINVAL;
    rma->wait = (struct rma_wait){.active = true, .transfer = transfer, .id = (uint32_t)id};
    int rc = erma_endpoint_run_until(rma->ep, op_done, rma, timeout_ns);
    if (rma->wait.done) {
        *out = rma->wait.c;
        rc = ERMA_OK;
    }
    /* a polled op's completion came here, not to the queue: free its id */
    if (rc == ERMA_OK && rma->wait.polled)
        erma__rma_release(rma, out);
    rma->wait.active = false;
    return rc;
}

int erma_rma_wait(struct erma_rma *rma, int id, bool transfer, uint64_t timeout_ns,
                  struct erma_rma_completion *out)
{
    if (!rma || (id != ERMA_RMA_WAIT_ALL && (id < 0 || !out)))
        return ERMA_EINVAL;
    if (rma->in_cb || rma->wait.active)
        return ERMA_EAGAIN;
    if (rma->tr->hints.shared_clock)
        return ERMA_ENOTSUP; /* the sim: its time moves only under erma_sim_run() */
    if (id != ERMA_RMA_WAIT_ALL)
        return wait_one(rma, id, transfer, timeout_ns, out);
    if (all_done(rma))
        return ERMA_OK;
    rma->wait = (struct rma_wait){.active = true, .all = true};
    const int rc = erma_endpoint_run_until(rma->ep, all_done, rma, timeout_ns);
    rma->wait.active = false;
    return rc;
}
