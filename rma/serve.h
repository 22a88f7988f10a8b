/* rma/serve.h - the target part: the serving engine's request queue and
 * its solicitations for WRITE and REKEY data (serve.c). */
#ifndef ERMA_RMA_SERVE_H
#define ERMA_RMA_SERVE_H

#include "internal.h"

struct queued_req {    /* a request waiting for the serving engine */
    struct erma_addr src;
    struct rma_ophdr h;    /* pkt's op header, decoded */
    uint64_t rx_ns;        /* when it came (erma_rx_pkt.rx_ns) */
    uint8_t pkt[ERMA_HDR_SIZE + RMA_OPHDR + RMA_TAG];
};

struct solicit {       /* the target's own outstanding solicitation */
    uint64_t token;    /* 0: free; else random */
    uint8_t op, cipher;
    struct erma_addr src;
    struct erma_addr owner; /* the initiator's address: src less its virtual path */
    struct rma_ophdr req;
    uint8_t kd[ERMA_RMA_KEY_BYTES];
    uint32_t got, bytes;   /* bitmap of packets received; bytes received */
    uint8_t rekey[RMA_REKEY_DATA];
    uint64_t deadline_ns;
    int32_t next_free;
    int32_t next_hash;     /* chain of live solicitations by (identity, init_ctr) */
};

/* A READ answer's last packet, shorter than the others: sent after the
 * full packets of the other answers of its loop pass (serve.c), or of the
 * RMA_TAILS answers before it. */
#define RMA_TAILS 32
struct tail {
    struct erma_addr to;
    struct rma_ophdr h;        /* pkt_idx and pkt_off set */
    const uint8_t *src;        /* its bytes in the region */
    uint32_t len;
    uint8_t kd[ERMA_RMA_KEY_BYTES];
    uint8_t cipher;
    uint16_t delay;            /* its answer's host delay */
};

struct rma_target {
    struct queued_req *queue;  /* ring of nack_threshold */
    struct tail tails[RMA_TAILS]; /* this pass's, not yet sent */
    uint32_t ntails;
    uint32_t q_head, q_len;
    uint64_t q_bytes;          /* queued work: erma__rma_work() of each request */
    uint64_t busy_until_ns;    /* cfg.serve_ns: no request served before this */
    bool warned_nack;          /* the small NACK threshold warning was logged */
    struct solicit *sol;
    int32_t sol_free;
    uint32_t sol_used, sol_bytes;
    uint64_t sol_expiry_ns;    /* earliest deadline of a live solicitation */
    int32_t *sol_hash;         /* chain heads, sol_mask + 1 of them */
    uint32_t sol_mask;
    uint8_t token_key[16];     /* solicitation tokens: SipHash of a counter */
    uint64_t token_ctr;
};

int erma__serve_init(struct erma_rma *rma);
void erma__serve_fini(struct erma_rma *rma);
/* A request or solicited data (h decoded from pkt) came in. */
void erma__serve_rx(struct erma_rma *rma, const struct rma_ophdr *h,
                    const struct erma_rx_pkt *pkt);
/* Serves queued requests, sends held tails, expires solicitations; the
 * work done. Inline: most loop passes find nothing to do. */
int erma__serve_work(struct erma_rma *rma);
static inline bool erma__serve_quiet(const struct erma_rma *rma)
{
    const struct rma_target *t = rma->target;
    return !t->q_len && !t->ntails && rma->ep->now < t->sol_expiry_ns;
}

static inline int erma__serve_poll(struct erma_rma *rma)
{
    return erma__serve_quiet(rma) ? 0 : erma__serve_work(rma);
}

static inline uint64_t erma__serve_next_timer(const struct erma_rma *rma)
{
    const struct rma_target *t = rma->target;
    if (t->q_len)
        return t->busy_until_ns > rma->ep->now ? t->busy_until_ns : rma->ep->now;
    return t->sol_expiry_ns;
}

#endif
