/* rma/internal.h - what every file of the one-sided engine shares: the
 * wire format, the AEAD (crypto.c), packets (packet.c), the completion
 * queue (cq.c) and the engine core, struct erma_rma. Each part of the
 * engine keeps its state behind a pointer here, declared in its own
 * header, and is reached from another part only through its functions:
 *   regions   region.h    registered regions, keys, derived keys (region.c)
 *   target    serve.h     the serving engine: request queue, solicitations
 *   portal    portal.h    the initiator: peers, command slots, issue, answers
 *   exec      executor.h  transfers cut into chunks under the window CC */
#ifndef ERMA_RMA_INTERNAL_H
#define ERMA_RMA_INTERNAL_H

#include "crypto/aead.h"
#include "endpoint/proto.h"
#include "erma/sdk/cc.h"
#include "erma/rma.h"

/* ---- wire: erma header (16) | op header (72) | payload | AEAD tag (16) ---- */

#define RMA_OPHDR 72
#define RMA_TAG 16
#define RMA_OVERHEAD (ERMA_HDR_SIZE + RMA_OPHDR + RMA_TAG)
#define RMA_REKEY_DATA (ERMA_RMA_KEY_BYTES + 8) /* new key, grace_ns */
/* The furthest ahead a request's deadline may lie (the longest op timeout
 * a configuration may ask); the target drops requests beyond it. */
#define RMA_MAX_TTL_NS 60000000000ull

enum rma_type {
    RMA_READ_REQ = 1,
    RMA_READ_RESP = 2,
    RMA_WRITE_REQ = 3,
    RMA_REKEY_REQ = 4,
    RMA_SOLICIT = 5,  /* target -> initiator: send the data of op init_ctr */
    RMA_DATA = 6,     /* initiator -> target: solicited data */
    RMA_DONE = 7,     /* target -> initiator: WRITE or REKEY applied */
    RMA_ERROR = 8,    /* target -> initiator: status */
    RMA_TYPE_MAX = 8,
};

#define RMA_FLAG_PLAIN 1    /* RMA_ERROR not sealed: tag is zero */
/* WRITE_REQ of a fenced WRITE. Informational: the initiator enforces the
 * fence (fence.c), the target only counts it (stats.fenced). Authenticated
 * like the rest of the header. */
#define RMA_FLAG_FENCE 2
/* Requests and data: the virtual path (erma/rma.h, Virtual paths) they were
 * sent on, bits 2-4: the initiator's port is its base port plus it. */
#define RMA_FLAG_PATH(k) ((uint8_t)((k) << 2))
#define RMA_PATH_OF(flags) ((uint8_t)((flags) >> 2 & 7u))

struct rma_ophdr {
    uint8_t type, status, flags, pkt_idx; /* status: -erma_err */
    uint16_t slot, pkt_off;               /* pkt_off: payload's byte offset in the op */
    uint32_t region, key_gen;
    uint64_t offset, identity;
    uint64_t init_ctr;                    /* the initiator's counter of the op's request */
    uint32_t len, sol;                    /* sol: the target's solicitation index */
    uint64_t token;                       /* sol's random token */
    uint64_t deadline;                    /* the op's deadline, wire clock */
    uint64_t nonce_ctr;                   /* the sender's counter for this packet */
};

/* The work a request queues at the target, in bytes on the wire: its data
 * (READ response or solicited WRITE/REKEY data) and one packet's overhead.
 * len is not yet verified: a forged one counts as one largest op at most. */
static inline uint64_t erma__rma_work(const struct rma_ophdr *h)
{
    return (h->len < ERMA_RMA_MAX_OP ? h->len : ERMA_RMA_MAX_OP) + RMA_OVERHEAD;
}

/* ---- crypto.c ---- */

/* (libsodium's initialisation and the AES-NI test are crypto/aead.h's.) */
/* Kd for identity at addr. */
void erma__rma_kdf(const uint8_t kr[ERMA_RMA_KEY_BYTES], uint64_t identity,
                   const struct erma_addr *addr, uint8_t kd[ERMA_RMA_KEY_BYTES]);
/* pkt holds both headers; seals payload (plen bytes from m) after them
 * with cipher (enum erma_rma_cipher) and appends the tag. dir 0: initiator
 * to target, 1: back. */
void erma__rma_seal_as(const uint8_t kd[ERMA_RMA_KEY_BYTES], uint8_t cipher, uint8_t dir,
                       uint64_t nonce_ctr, uint8_t *pkt, const void *m, uint32_t plen);
/* Opens a sealed packet of len bytes into m (len - RMA_OVERHEAD bytes);
 * 0 when authentic, -1 otherwise (m may then hold garbage: pass scratch). */
int erma__rma_open_as(const uint8_t kd[ERMA_RMA_KEY_BYTES], uint8_t cipher, uint8_t dir,
                      uint64_t nonce_ctr, const uint8_t *pkt, uint32_t len, uint8_t *m);
uint64_t erma__rma_wallclock_ns(void);

/* The engine's cache of expanded AES-256-GCM keys (key schedules) by Kd,
 * so that the packets of a peer's ops do not expand their key each. */
#define RMA_KEYS 4
struct rma_keys {
    struct erma__aead k[RMA_KEYS]; /* key: a Kd; expanded: its schedule (NULL: empty) */
    uint32_t next;                 /* the entry a miss replaces */
    uint32_t last;                 /* the entry hit last */
};

/* ---- the engine core (engine.c) ---- */

struct rma_regions; /* region.h */
struct rma_target;  /* serve.h */
struct rma_portal;  /* portal.h */
struct rma_exec;    /* executor.h */

/* A completion queued: for erma_rma_poll() (cb NULL) or for its callback. */
struct rma_done {
    struct erma_rma_completion c;
    erma_rma_cb cb;
    void *ctx;
};

/* A completion queue (cq.c): completions in the order they completed,
 * until erma_rma_poll() takes them or their callbacks run (wait.c). */
struct rma_cq {
    struct rma_done *ring;
    uint32_t head, len, cap;
};

/* What erma_rma_wait() waits for (wait.c): every op (all), or op (transfer,
 * id), whose completion comes to c (polled: it had no callback). */
struct rma_wait {
    bool active, all, done, polled, transfer;
    uint32_t id;
    struct erma_rma_completion c;
};

struct erma_rma {
    struct erma_endpoint *ep;  /* its transport queue, TX batch and clock */
    struct erma_transport *tr; /* ep->tr */
    struct erma_rma_cfg cfg;
    uint32_t pkt_data;         /* payload bytes per packet */
    uint64_t ctr;              /* this engine's nonce counter (packet.c) */
    /* The host delay (erma_delay_encode) the answers sent now carry: the
     * target sets it while it answers one request, else 0 (packet.c). */
    uint16_t tx_delay;
    int64_t wire_off;          /* wire clock - engine clock (0 on the sim) */
    uint64_t wire_sync_ns;     /* next time wire_off is measured again */
    bool aes;                  /* AES-256-GCM usable here */
    uint32_t rx_pass;          /* RMA packets received in this loop pass */
    struct erma_rma_stats stats; /* each part counts its own */
    struct rma_cq cq;          /* for erma_rma_poll() */
    struct rma_cq cbq;         /* for callbacks, run after the pass's flush */
    uint32_t open;             /* commands and transfers whose completion is
                                  not yet queued or whose callback not yet run */
    bool in_cb;                /* a callback runs */
    struct rma_wait wait;
    struct rma_keys keys;      /* crypto.c */
    struct rma_regions *regions;
    struct rma_target *target;
    struct rma_portal *portal;
    struct rma_exec *exec;
    /* Payloads are opened here, and copied on only when authentic. */
    uint8_t scratch[ERMA_RMA_MAX_OP];
};

/* The clock deadlines travel in: wall-clock ns (the sim's time on the sim),
 * so that hosts whose clocks agree within cfg.clock_skew_ns share it. */
static inline uint64_t erma__rma_wire_now(const struct erma_rma *rma)
{
    return rma->ep->now + (uint64_t)rma->wire_off;
}

/* erma__rma_seal_as and erma__rma_open_as with AES-256-GCM keys expanded
 * once, in rma->keys. */
void erma__rma_seal(struct erma_rma *rma, const uint8_t kd[ERMA_RMA_KEY_BYTES], uint8_t cipher,
                    uint8_t dir, uint64_t nonce_ctr, uint8_t *pkt, const void *m, uint32_t plen);
int erma__rma_open(struct erma_rma *rma, const uint8_t kd[ERMA_RMA_KEY_BYTES], uint8_t cipher,
                   uint8_t dir, uint64_t nonce_ctr, const uint8_t *pkt, uint32_t len, uint8_t *m);
/* Wipes and frees the expanded keys. */
void erma__rma_keys_forget(struct erma_rma *rma);

/* Where a flow that pacing held back since due (< now) counts from: its
 * due time, but no more than a burst of link time before now, so that a
 * long loop pass issues what came due in it without building up credit
 * (issue.c's answer pacer and the executor's windows). */
static inline uint64_t erma__rma_catch_up(uint64_t due, uint64_t now, uint64_t burst)
{
    return now - due < burst ? due : now - burst;
}

/* ---- packet.c ---- */

void erma__rma_ophdr_encode(const struct rma_ophdr *o, uint8_t *p);
void erma__rma_ophdr_decode(const uint8_t *p, struct rma_ophdr *o);
/* Queues a packet to dst in the endpoint's TX batch: the erma header, h
 * (its nonce_ctr set here) and plen payload bytes of m sealed under kd with
 * cipher (kd NULL: an unsealed status, no payload). dir 0: initiator to
 * target, 1: back. */
void erma__rma_send(struct erma_rma *rma, const struct erma_addr *dst, struct rma_ophdr *h,
                    const uint8_t *kd, uint8_t cipher, uint8_t dir, const void *m, uint32_t plen);

/* ---- cq.c ---- */

/* Room for every slot and every transfer in each queue: a slot or a
 * transfer is reused only after its completion is taken or its callback
 * called, so neither queue can overflow. */
int erma__cq_init(struct erma_rma *rma);
void erma__cq_fini(struct erma_rma *rma);
/* A command or transfer completed with c: to erma_rma_wait() when it waits
 * for this op without a callback, else onto the queue for erma_rma_poll()
 * (cb NULL) or for its callback. */
void erma__cq_complete(struct erma_rma *rma, const struct erma_rma_completion *c, erma_rma_cb cb,
                       void *ctx);
/* The oldest entry of q into *out; false when none. */
bool erma__cq_pop(struct rma_cq *q, struct rma_done *out);
/* Takes the completion of op (transfer, id) out of the poll queue into
 * *out; false when it is not there. */
bool erma__cq_take(struct erma_rma *rma, bool transfer, uint32_t id,
                   struct erma_rma_completion *out);

/* ---- wait.c ---- */

/* erma_rma_wait() waits for the op that completed with c, and has not
 * seen its completion yet. */
static inline bool erma__rma_waits_for(const struct erma_rma *rma,
                                       const struct erma_rma_completion *c)
{
    const struct rma_wait *w = &rma->wait;
    return w->active && !w->all && !w->done && w->transfer == c->transfer && w->id == c->id;
}

/* A completion's slot or transfer id is free again. */
void erma__rma_release(struct erma_rma *rma, const struct erma_rma_completion *c);
/* Runs the callbacks queued before this call (the endpoint's after_flush). */
void erma__rma_run_callbacks(struct erma_rma *rma);

#endif
