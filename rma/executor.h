/* rma/executor.h - the executor part: transfers of any size cut into
 * chunks of at most ERMA_RMA_MAX_OP, issued through the portal as the 1RMA
 * window CC allows (executor.c). It registers hooks with the portal, which
 * tell it of its chunks' ends and of the writes that fence its transfers. */
#ifndef ERMA_RMA_EXECUTOR_H
#define ERMA_RMA_EXECUTOR_H

#include "internal.h"

enum xfer_state { XFER_FREE, XFER_ACTIVE, XFER_DONE };

struct xfer {
    uint8_t state;
    uint8_t op, prio;
    int peer;
    struct erma_rkey rkey;
    uint64_t offset;
    uint8_t *local;
    uint64_t len, next_off;  /* next chunk not yet issued */
    uint32_t max_retries, retries, inflight;
    uint64_t *redo;          /* chunk offsets to issue again */
    uint32_t nredo, redo_cap;
    uint16_t *tries;         /* per chunk: failures so far */
    int status;
    uint64_t tag, start_ns;
    erma_rma_cb cb;          /* NULL: polled */
    void *cb_ctx;
    uint64_t wseq;           /* WRITE: its place among writes (fence.c) */
    bool fence;              /* no chunk issued while fence_wait */
    uint32_t fence_wait;
    int fence_status;
    uint64_t tried;          /* exec->gen of the last poll that could not issue it */
    uint64_t served;         /* exec->served when it last issued a chunk */
    const struct erma_window *win; /* its flow's, found by each erma__exec_poll */
    uint64_t due_ns;         /* when its windows' pacing lets it go (0: not held back) */
};

struct rma_exec {
    struct xfer *xfers;          /* cfg.transfers */
    uint32_t used;               /* xfers[used..] are free: the loops stop there */
    struct erma_window_cc wcc;
    uint64_t wake_ns;            /* the next time a window may open */
    uint64_t gen;                /* erma__exec_poll calls, for xfer.tried */
    uint64_t served;             /* chunks issued, for xfer.served */
    uint64_t min_rtt_ns[2];      /* smallest chunk round trip (remote delay) per direction */
    uint32_t fenced;             /* transfers with fence_wait > 0 */
    bool fence_cancel;           /* a fenced transfer is to complete cancelled */
};

/* After the portal's: registers the executor's hooks with it. */
int erma__exec_init(struct erma_rma *rma);
void erma__exec_fini(struct erma_rma *rma);
/* Issues transfers' chunks as their windows allow; the work done. Inline:
 * most loop passes come before the next window opens. */
int erma__exec_work(struct erma_rma *rma);
static inline bool erma__exec_quiet(const struct erma_rma *rma)
{
    return rma->exec->wake_ns > rma->ep->now;
}

static inline int erma__exec_poll(struct erma_rma *rma)
{
    return erma__exec_quiet(rma) ? 0 : erma__exec_work(rma);
}

static inline uint64_t erma__exec_next_timer(const struct erma_rma *rma)
{
    return rma->exec->wake_ns;
}
/* Transfer id's completion was taken or its callback called: it is free
 * again. */
void erma__exec_release(struct erma_rma *rma, uint32_t id);
/* Transfer id (< cfg.transfers) is in progress or completed. */
bool erma__exec_live(const struct erma_rma *rma, uint32_t id);

#endif
