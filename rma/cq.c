/* rma/cq.c - the engine's completion queue: a ring that the initiator's
 * commands (complete.c) and transfers (executor.c) complete into, and
 * erma_rma_poll() (engine.c) takes from. Uses nothing of theirs. */
#include <stdlib.h>

#include "internal.h"

int erma__cq_init(struct erma_rma *rma)
{
    struct rma_cq *q = &rma->cq;
    q->cap = rma->cfg.slots + rma->cfg.transfers;
    q->ring = calloc(q->cap, sizeof *q->ring);
    return q->ring ? ERMA_OK : ERMA_ENOMEM;
}

void erma__cq_fini(struct erma_rma *rma)
{
    free(rma->cq.ring);
    rma->cq.ring = NULL;
}

void erma__cq_push(struct erma_rma *rma, const struct erma_rma_completion *c)
{
    struct rma_cq *q = &rma->cq;
    /* cannot overflow: a slot or transfer is reused only after its poll */
    q->ring[(q->head + q->len++) % q->cap] = *c;
}

bool erma__cq_pop(struct erma_rma *rma, struct erma_rma_completion *out)
{
    struct rma_cq *q = &rma->cq;
    if (!q->len)
        return false;
    *out = q->ring[q->head];
    q->head = (q->head + 1) % q->cap;
    q->len--;
    return true;
}
