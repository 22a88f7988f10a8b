/* rma/cq.c - the engine's completion queues: rings that the initiator's
 * commands (complete.c) and transfers (executor.c) complete into, one that
 * erma_rma_poll() (engine.c) takes from and one whose callbacks wait.c
 * runs; a completion erma_rma_wait() waits for goes to it instead. Uses
 * nothing of theirs. */
#include <stdlib.h>

#include "internal.h"

int erma__cq_init(struct erma_rma *rma)
{
    const uint32_t cap = rma->cfg.slots + rma->cfg.transfers;
    rma->cq = (struct rma_cq){.ring = calloc(cap, sizeof(struct rma_done)), .cap = cap};
    rma->cbq = (struct rma_cq){.ring = calloc(cap, sizeof(struct rma_done)), .cap = cap};
    return rma->cq.ring && rma->cbq.ring ? ERMA_OK : ERMA_ENOMEM;
}

void erma__cq_fini(struct erma_rma *rma)
{
    free(rma->cq.ring);
    free(rma->cbq.ring);
    rma->cq.ring = rma->cbq.ring = NULL;
}

static void push(struct rma_cq *q, const struct rma_done *d)
{
    /* cannot overflow: a slot or transfer is reused only after its poll or callback */
    q->ring[(q->head + q->len++) % q->cap] = *d;
}

void erma__cq_complete(struct erma_rma *rma, const struct erma_rma_completion *c, erma_rma_cb cb,
                       void *ctx)
{
    if (cb) {
        push(&rma->cbq, &(struct rma_done){*c, cb, ctx});
        return;
    }
    rma->open--;
    if (erma__rma_waits_for(rma, c)) { /* erma_rma_wait() frees its id */
        rma->wait.c = *c;
        rma->wait.done = rma->wait.polled = true;
        return;
    }
    push(&rma->cq, &(struct rma_done){*c, NULL, NULL});
}

bool erma__cq_pop(struct rma_cq *q, struct rma_done *out)
{
    if (!q->len)
        return false;
    *out = q->ring[q->head];
    q->head = (q->head + 1) % q->cap;
    q->len--;
    return true;
}

bool erma__cq_take(struct erma_rma *rma, bool transfer, uint32_t id,
                   struct erma_rma_completion *out)
{
    struct rma_cq *q = &rma->cq;
    uint32_t k = 0;
    for (; k < q->len; k++) {
        const struct erma_rma_completion *c = &q->ring[(q->head + k) % q->cap].c;
        if (c->transfer == transfer && c->id == id)
            break;
    }
    if (k == q->len)
        return false;
    *out = q->ring[(q->head + k) % q->cap].c;
    for (; k + 1 < q->len; k++) /* the later ones close the gap, in order */
        q->ring[(q->head + k) % q->cap] = q->ring[(q->head + k + 1) % q->cap];
    q->len--;
    return true;
}
