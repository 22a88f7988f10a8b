/* rma/internal.h - the one-sided engine's private state, shared by its files. */
#ifndef ERMA_RMA_INTERNAL_H
#define ERMA_RMA_INTERNAL_H

#include "endpoint/proto.h"
#include "erma/cc.h"
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
 * fence (portal.c), the target only counts it (stats.fenced). Authenticated
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

/* ---- crypto.c ---- */

int erma_rma_crypto_init(void);
bool erma_rma_aes_available(void);
/* Kd for identity at addr. */
void erma_rma_kdf(const uint8_t kr[ERMA_RMA_KEY_BYTES], uint64_t identity,
                  const struct erma_addr *addr, uint8_t kd[ERMA_RMA_KEY_BYTES]);
/* pkt holds both headers; seals payload (plen bytes from m) after them
 * with cipher (enum erma_rma_cipher) and appends the tag. dir 0: initiator
 * to target, 1: back. */
void erma_rma_seal_as(const uint8_t kd[ERMA_RMA_KEY_BYTES], uint8_t cipher, uint8_t dir,
                      uint64_t nonce_ctr, uint8_t *pkt, const void *m, uint32_t plen);
/* The same with the cipher a region registered here gets by default (for
 * tests/fuzz/fuzz_rma_serve.c). */
void erma_rma_seal(const uint8_t kd[ERMA_RMA_KEY_BYTES], uint8_t dir, uint64_t nonce_ctr,
                   uint8_t *pkt, const void *m, uint32_t plen);
/* Opens a sealed packet of len bytes into m (len - RMA_OVERHEAD bytes);
 * 0 when authentic, -1 otherwise (m may then hold garbage: pass scratch). */
int erma_rma_open_as(const uint8_t kd[ERMA_RMA_KEY_BYTES], uint8_t cipher, uint8_t dir,
                     uint64_t nonce_ctr, const uint8_t *pkt, uint32_t len, uint8_t *m);
uint64_t erma_rma_wallclock_ns(void);

/* ---- state ---- */

struct region {
    uint8_t *addr;
    uint64_t len;
    uint32_t id;        /* 0: free slot; else generation << 16 | index + 1 */
    uint16_t gen;
    uint8_t perms;
    uint8_t cipher;     /* enum erma_rma_cipher, fixed at registration */
    uint32_t key_gen;
    uint8_t kr[ERMA_RMA_KEY_BYTES];
    uint8_t old_kr[ERMA_RMA_KEY_BYTES];
    uint64_t old_until_ns; /* old key verifies before this time */
};

/* A derived key the target computed lately. Only a cache: the target could
 * derive Kd per packet as 1RMA's NIC does, but in software that BLAKE2b
 * costs as much as the AEAD itself. (region id, key_gen) names one Kr. */
#define RMA_KD_CACHE 64
struct kd_entry {
    uint32_t region, key_gen; /* region 0: empty */
    uint64_t identity;
    struct erma_addr addr;
    uint8_t kd[ERMA_RMA_KEY_BYTES];
};

struct queued_req {    /* a request waiting for the serving engine */
    struct erma_addr src;
    struct rma_ophdr h;    /* pkt's op header, decoded */
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

/* SLOT_FENCED: a fenced WRITE held back, in rma->fenced, until the earlier
 * writes it waits for have completed (see "fences" in portal.c). */
enum slot_state { SLOT_FREE, SLOT_QUEUED, SLOT_ISSUED, SLOT_SENT_DATA, SLOT_DONE, SLOT_FENCED };

struct slot {
    uint8_t state, op, prio;
    uint8_t path;           /* the virtual path of its packets */
    bool path_out;          /* completed on a path out of use (pruned) */
    /* Runs when the op completes instead of a completion on the queue (the
     * executor's chunks); the slot is freed after it. */
    void (*done)(struct erma_rma *rma, struct slot *s);
    int peer;
    struct erma_rkey rkey;
    uint64_t offset;
    uint8_t *local;
    uint32_t len;
    uint64_t grace_ns;
    uint64_t tag;
    uint64_t init_ctr;
    uint64_t submit_ns, issue_ns;
    uint64_t queued_ns;     /* entered the local queue (DISPATCH_TIMEOUT from here) */
    uint64_t wseq;          /* WRITE command (done NULL): its place among writes */
    uint32_t fence_wait;    /* SLOT_FENCED: earlier writes not yet completed */
    int fence_status;       /* ERMA_OK, or ERMA_ECANCELLED: one of them failed */
    bool fence;
    uint64_t sent_ns;       /* the last packet that asked for an answer */
    uint64_t deadline_ns;   /* TIMEOUT at this time (engine clock) */
    uint64_t wire_deadline; /* the deadline the target sees (wire clock) */
    uint32_t got, bytes;    /* READ: packets and bytes received */
    int status;
    int32_t prev, next;     /* queue or free list */
    int32_t heap_idx;       /* in flight: position in the deadline heap */
};

struct peer {
    struct erma_addr addr;
    uint64_t srtt_ns, rttvar_ns; /* smoothed round trip and its variation */
    uint64_t backoff_ns;         /* after a timeout: the least RTO until a sample */
    bool sampled;
    struct erma_paths ps;        /* its virtual paths: ops spread over our ports */
};

struct list { int32_t head, tail; };

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
    uint64_t wseq;           /* WRITE: its place among writes */
    bool fence;              /* no chunk issued while fence_wait */
    uint32_t fence_wait;
    int fence_status;
    uint64_t tried;          /* exec_gen of the last poll that could not issue it */
    uint64_t served;         /* exec_served when it last issued a chunk */
    const struct erma_window *win; /* its flow's, found by each erma_exec_poll */
};

struct erma_rma {
    struct erma_endpoint *ep;  /* its transport queue, TX batch and clock */
    struct erma_transport *tr; /* ep->tr */
    struct erma_rma_cfg cfg;
    bool warned_nack;          /* the small NACK threshold warning was logged */
    uint32_t pkt_data;         /* payload bytes per packet */
    uint64_t ctr;              /* this engine's nonce counter */
    int64_t wire_off;          /* wire clock - engine clock (0 on the sim) */
    uint64_t wire_sync_ns;     /* next time wire_off is measured again */
    bool aes;                  /* AES-256-GCM usable here */
    struct erma_rma_stats stats;
    /* target */
    struct region *regions;
    struct queued_req *queue;  /* ring of nack_threshold */
    uint32_t q_head, q_len;
    uint64_t q_bytes;          /* queued work: rma_work() of each request */
    uint64_t busy_until_ns;    /* cfg.serve_ns: no request served before this */
    struct solicit *sol;
    int32_t sol_free;
    uint32_t sol_used, sol_bytes;
    uint64_t sol_expiry_ns;    /* earliest deadline of a live solicitation */
    int32_t *sol_hash;         /* chain heads, sol_mask + 1 of them */
    uint32_t sol_mask;
    uint8_t token_key[16];     /* solicitation tokens: SipHash of a counter */
    uint64_t token_ctr;
    struct kd_entry kd_cache[RMA_KD_CACHE];
    /* initiator */
    struct peer *peers;
    uint32_t npeers, peers_cap;
    struct slot *slots;
    int32_t free_slots;
    uint32_t nfree;            /* slots on the free list */
    struct list queued[ERMA_RMA_PRIORITIES];
    struct list fenced;        /* SLOT_FENCED slots, in submission order */
    uint64_t wseq;             /* WRITE commands and transfers numbered */
    uint32_t fenced_xfers;     /* transfers with fence_wait > 0 */
    bool fence_settling;
    bool fence_cancel;         /* a fenced transfer is to complete cancelled */
    int32_t *heap;             /* slots in flight, a min-heap by deadline */
    uint32_t nheap;
    uint32_t inbound;          /* READ bytes outstanding */
    uint64_t queued_in;        /* READ bytes waiting in the local queue */
    uint64_t answers_at_ns;    /* no transfer READ issues before this (portal.c) */
    uint64_t last_poll_ns;     /* stall detection for timeouts */
    uint32_t rx_pass, deferrals;
    struct erma_rma_completion *cq;
    uint32_t cq_head, cq_len, cq_cap;
    /* executor */
    struct xfer *xfers;
    struct erma_window_cc wcc;
    uint64_t exec_wake_ns;     /* the next time a window may open */
    uint64_t exec_gen;         /* erma_exec_poll calls, for xfer.tried */
    uint64_t exec_served;      /* chunks the executor issued, for xfer.served */
    uint64_t exec_min_rtt_ns[2]; /* smallest chunk round trip (remote delay) per direction */
    uint8_t scratch[ERMA_RMA_MAX_OP];
};

/* The work a request queues at the target, in bytes on the wire: its data
 * (READ response or solicited WRITE/REKEY data) and one packet's overhead.
 * len is not yet verified: a forged one counts as one largest op at most. */
static inline uint64_t rma_work(const struct rma_ophdr *h)
{
    return (h->len < ERMA_RMA_MAX_OP ? h->len : ERMA_RMA_MAX_OP) + RMA_OVERHEAD;
}

/* engine.c */
/* The clock deadlines travel in: wall-clock ns (the sim's time on the sim),
 * so that hosts whose clocks agree within cfg.clock_skew_ns share it. */
static inline uint64_t rma_wire_now(const struct erma_rma *rma)
{
    return rma->ep->now + (uint64_t)rma->wire_off;
}

/* packet.c */
void erma_rma_ophdr_encode(const struct rma_ophdr *o, uint8_t *p);
void erma_rma_ophdr_decode(const uint8_t *p, struct rma_ophdr *o);
/* Queues a packet to dst in the endpoint's TX batch: the erma header, h
 * (its nonce_ctr set here) and plen payload bytes of m sealed under kd with
 * cipher (kd NULL: an unsealed status, no payload). dir 0: initiator to
 * target, 1: back. */
void erma_rma_send(struct erma_rma *rma, const struct erma_addr *dst, struct rma_ophdr *h,
                   const uint8_t *kd, uint8_t cipher, uint8_t dir, const void *m, uint32_t plen);

/* region.c */
struct region *erma_region_find(struct erma_rma *rma, uint32_t id);
/* The key request h verifies under: kr of its key generation, or NULL. */
const uint8_t *erma_region_key(const struct region *r, uint32_t key_gen, uint64_t now);
/* Kd for identity at addr under r's key of
 * generation key_gen (kr), from the cache. */
const uint8_t *erma_region_kd(struct erma_rma *rma, const struct region *r, const uint8_t *kr,
                              uint32_t key_gen, uint64_t identity,
                              const struct erma_addr *addr);
void erma_region_install(struct region *r, const uint8_t *key, uint64_t grace_ns, uint64_t now);

/* serve.c: the target */
void erma_serve_rx(struct erma_rma *rma, const struct rma_ophdr *h, const struct erma_rx_pkt *pkt);
int erma_serve_poll(struct erma_rma *rma);
uint64_t erma_serve_next_timer(const struct erma_rma *rma);
int erma_serve_init(struct erma_rma *rma);
void erma_serve_fini(struct erma_rma *rma);

/* portal.c: the initiator */
void erma_portal_rx(struct erma_rma *rma, const struct rma_ophdr *h, const struct erma_rx_pkt *pkt);
int erma_portal_poll(struct erma_rma *rma);
uint64_t erma_portal_next_timer(const struct erma_rma *rma);
/* A slot may go to a command (or, chunk, a transfer's chunk) of priority
 * prio: priority p leaves the last p x floor(slots / 16) free slots to the
 * priorities before it; a chunk takes any free slot while fenced commands
 * wait, since they may wait for its transfer. */
bool erma_slot_free_for(const struct erma_rma *rma, uint8_t prio, bool chunk);
int erma_portal_init(struct erma_rma *rma);
void erma_portal_fini(struct erma_rma *rma);
/* Takes cmd into a slot; done (may be NULL) as in struct slot. */
int erma_portal_submit(struct erma_rma *rma, const struct erma_rma_cmd *cmd,
                       void (*done)(struct erma_rma *rma, struct slot *s));
int erma_portal_issue(struct erma_rma *rma, int work);
void erma_cq_push(struct erma_rma *rma, const struct erma_rma_completion *c);
/* Fences (portal.c). How many WRITE commands and transfers to (peer,
 * region) are in progress: what a fenced write submitted now waits for. */
uint32_t erma_fence_count(const struct erma_rma *rma, int peer, uint32_t region);
/* A WRITE command or transfer numbered wseq to (peer, region) completed
 * with status: the fenced writes after it wait for one write less, and are
 * cancelled if it failed. */
void erma_fence_done(struct erma_rma *rma, int peer, uint32_t region, uint64_t wseq, int status);
/* ERMA_OK when this engine can use key k (its cipher), else why not. */
int erma_rkey_usable(const struct erma_rma *rma, const struct erma_rkey *k);

/* executor.c */
int erma_exec_init(struct erma_rma *rma);
void erma_exec_fini(struct erma_rma *rma);
int erma_exec_poll(struct erma_rma *rma);
uint64_t erma_exec_next_timer(const struct erma_rma *rma);
/* A slot, a window or a transfer may let a chunk go: the executor looks at
 * its transfers again in the next poll. */
static inline void erma_exec_wake(struct erma_rma *rma)
{
    rma->exec_wake_ns = 0;
}

#endif
