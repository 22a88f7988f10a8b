/*
 * erma/rma.h - 1RMA-style one-sided operations on encrypted regions.
 *
 * For applications (included by erma/erma.h).
 *
 * Quick start (check each int returned; tests/install/consumer.c runs it):
 *   both:      erma_endpoint_create(uri, 0, NULL, &ep); erma_rma_create(ep, NULL, &rma);
 *              (the target's uri "udp://127.0.0.1:31860", the initiator's ...:0)
 *   target:    erma_region_register(rma, buf, len, ERMA_RMA_PERM_READ, &region);
 *              erma_region_export_uri(rma, region, id, init_uri, &rkey);
 *              (id = the initiator's erma_rma_identity(), init_uri its
 *              erma_rma_uri(); rkey goes back to it out of band: the
 *              key service, erma/keys.h, does all this by region name)
 *              erma_endpoint_run_until(ep, stopped, NULL, UINT64_MAX);
 *   initiator: int peer = erma_rma_peer(rma, "udp://127.0.0.1:31860", 0);
 *              struct erma_rma_cmd cmd = {.op = ERMA_RMA_READ, .peer = peer,
 *                  .rkey = rkey, .offset = 0, .local = dst, .len = 512, .tag = 7};
 *              int id = erma_rma_submit(rma, &cmd);  (a slot id >= 0, or an error)
 *              struct erma_rma_completion c;
 *              while (erma_rma_poll(rma, &c, 1) == 0) erma_endpoint_run_once(ep);
 *              c.tag is 7; c.status ERMA_OK: dst holds the bytes
 *              or wait for that op:  erma_rma_wait(rma, id, false, 1000000000, &c);
 *              or by callback:  cmd.cb = on_done; cmd.cb_ctx = app; submit, then
 *              keep running the loop: on_done(rma, &c, app) runs once in it
 *   end:       erma_rma_destroy, then erma_endpoint_destroy.
 *
 * An erma_rma engine sits on an endpoint (erma/endpoint.h), beside or
 * without RPCs, and is served by its event loop: each pass hands it every
 * one-sided packet, issues queued commands, serves requests and fails
 * expired ones. It plays both roles at once:
 *
 * Target. erma_region_register() exposes memory as a region with an id, a
 * random 256-bit region key Kr and a cipher. erma_region_export_addr()
 * gives an initiator the rkey (region id, key generation, cipher, Kd) for
 * its identity and its address, Kd = keyed BLAKE2b of both under Kr; hand
 * it over out of band (for example in an RPC response, for the RPC's
 * source address). The target recomputes Kd from the identity in each
 * request and the address it came from, and keeps no per-initiator state.
 * No application code runs on the target.
 *
 * Initiator. erma_rma_peer() names a target endpoint. erma_rma_submit()
 * takes a command into one of cfg.slots command slots and returns the slot
 * id. Every command completes exactly once: to its callback, if it has one
 * (Completion by callback), else through erma_rma_poll() or
 * erma_rma_wait(); its slot is free again once its completion has been
 * taken or its callback called. erma_rma_transfer() gives the executor an
 * op of any size, which completes the same ways.
 *
 * Ops (each at most ERMA_RMA_MAX_OP bytes; the executor splits larger ones):
 *   READ   2 hops: request, then data responses of at most one packet each.
 *   WRITE  4 hops: write request; the target solicits the data with a read
 *          request back, which the initiator answers only for a live slot
 *          whose op carries the nonce the target echoes; data; completion.
 *   REKEY  4 hops like WRITE, its data a new region key and a grace time:
 *          the target installs the key under the next key generation, and
 *          during the grace time requests under the old generation still
 *          verify. Needs ERMA_RMA_PERM_REKEY on the region. Afterwards an
 *          op under an old key completes with ERMA_ESUPERSEDED (Security,
 *          Superseded keys): fetch the current key from its owner.
 *
 * The concepts that many calls share are described once, each beside the
 * declarations it concerns:
 *   Security                        above enum erma_rma_cipher
 *   Timeouts, NACK threshold,
 *   Solicitation                    above struct erma_rma_cfg
 *   Priorities, Fences,
 *   Completion by callback          above struct erma_rma_cmd
 *   Completion status, Delays       above struct erma_rma_completion
 *   Virtual paths                   at the head of the initiator calls
 *   Executor                        above erma_rma_transfer()
 *
 * Threading: like its endpoint, an engine belongs to one thread. Calls
 * return ERMA_OK (or a non-negative id) or a negative erma_err code.
 */
#ifndef ERMA_RMA_H
#define ERMA_RMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "erma/api.h"
#include "erma/errors.h"

ERMA_BEGIN_DECLS

#define ERMA_RMA_MAX_OP 4096
#define ERMA_RMA_KEY_BYTES 32
#define ERMA_RMA_PRIORITIES 4

struct erma_endpoint;
struct erma_rma;
struct erma_window_cfg; /* the driver SDK's erma/sdk/cc.h */

enum erma_rma_perm {
    ERMA_RMA_PERM_READ = 1,
    ERMA_RMA_PERM_WRITE = 2,
    ERMA_RMA_PERM_REKEY = 4,
};

enum erma_rma_op {
    ERMA_RMA_READ = 1,
    ERMA_RMA_WRITE = 2,
    ERMA_RMA_REKEY = 3,
};

/*
 * Security. Every packet is sealed with AEAD under Kd: the erma and op
 * headers (region, key generation, offset, length, op, slot, nonces,
 * deadline, solicitation token) are authenticated data, payloads are
 * encrypted.
 *  - Cipher: the region's, chosen at registration (AES-256-GCM by default
 *    where the target has AES-NI, ChaCha20-Poly1305, which any CPU runs,
 *    otherwise or on request) and named by the rkey, never taken from the
 *    local CPU: peers with different CPUs agree on it. An initiator
 *    without AES-NI refuses an AES-GCM key with ERMA_ENOTSUP at submit.
 *  - Nonces: 64-bit counters, one per engine, started from the wall clock
 *    in ns and incremented per packet, plus a direction byte, so no nonce
 *    repeats under one key; an engine restarted with the same identity at
 *    the same address (so the same Kd) starts past every nonce the one
 *    before it sent, unless the wall clock went back in between. One
 *    identity belongs to one engine.
 *  - Address: Kd works only from the address it was derived for and the
 *    7 ports after it on the same host (virtual paths: a request names
 *    its path k and must come from k ports past that address, whatever
 *    paths its initiator has), so a request with a forged source fails to
 *    verify and draws at most a header-sized AUTH_FAILED there, never
 *    READ data; a holder of Kd can have answers sent to those 7 ports of
 *    its own host only.
 *  - Deadlines: each request carries its deadline, the initiator's wall
 *    clock (the sim's clock on the sim) plus its op timeout. The target
 *    drops, unanswered, a request whose deadline has passed (its initiator
 *    gave up) or lies more than 60 s ahead: a captured request, replayed,
 *    is answered until its deadline plus cfg.clock_skew_ns and never after.
 *    The target waits for a WRITE's data until the deadline less
 *    clock_skew_ns at most, so nothing is written after the initiator
 *    reported TIMEOUT, provided the two wall clocks differ by no more.
 *  - Replays: a WRITE's data is taken only for a live solicitation of the
 *    target whose 64-bit token (SipHash of a counter under a secret key:
 *    unpredictable, and never seen twice in practice) it carries; each
 *    solicitation is made afresh, so replayed data never matches one. A
 *    replayed WRITE request draws a solicitation no live slot answers (and
 *    none while one for it is live), and none after its deadline.
 *  - Status: the target verifies a request before it checks bounds and
 *    permissions, so only an authenticated initiator learns them, and
 *    seals every answer, NACK included (under overload it NACKs only
 *    requests that verify). AUTH_FAILED and NO_SUCH_REGION, for which it
 *    has no key, travel in the clear: the initiator takes them (for a live
 *    op only) as final outcomes that never cut a CC window; it drops any
 *    other status in the clear.
 *  - Superseded keys: a region keeps the keys of the 4 key generations
 *    before its current one. The previous one verifies as usual during
 *    its grace time (erma_region_rekey(), a REKEY's cmd.grace_ns); after
 *    it, and for the 3 before it, a request that verifies under the
 *    generation its rkey names is answered ERMA_ESUPERSEDED, sealed under
 *    that rkey's Kd. Only a holder of that Kd draws it, and the initiator
 *    takes it only sealed under the op's rkey (one in the clear is dropped
 *    as a forgery), so no one on the path can make a good key look
 *    superseded, and a forged or tampered key still gets ERMA_EAUTH, as
 *    does a key 5 or more generations old (its key is forgotten). The
 *    target tries only the generation the request names: a request costs
 *    it one key derivation and one AEAD open, whatever its generation.
 *    The application then fetches the current rkey from the key's owner
 *    (the target's application, or whoever ran the REKEY) and submits the
 *    op again; nothing was done. stats.superseded_sent counts the answers.
 */

/* The AEAD of a region, fixed when it is registered and named by every key
 * to it, so that peers with different CPUs agree on it. */
enum erma_rma_cipher {
    ERMA_RMA_CHACHA20_POLY1305 = 0, /* any CPU */
    ERMA_RMA_AES256_GCM = 1,        /* only where the CPU has AES-NI */
};

/* What an initiator holds for one remote region. */
struct erma_rkey {
    uint32_t region;
    uint32_t key_gen;                  /* the generation Kd was derived from */
    uint8_t kd[ERMA_RMA_KEY_BYTES];
    uint8_t cipher;                    /* enum erma_rma_cipher of the region */
};

/*
 * Rkeys on the wire. struct erma_rkey is not a wire format (its padding
 * and byte order are the compiler's): send a key between processes as the
 * ERMA_RKEY_PACKED_BYTES of erma_rkey_pack(), which are the same on every
 * host: [u8 version 1][u32 region][u32 key_gen][u8 cipher][kd 32], the
 * integers little-endian. erma/keys.h (the key service) does it for you.
 */
#define ERMA_RKEY_PACKED_BYTES 42

/* Writes key's portable encoding (above) into out. Returns ERMA_OK;
 * ERMA_EINVAL for a NULL argument or a cipher that is no enum
 * erma_rma_cipher. */
int erma_rkey_pack(const struct erma_rkey *key, uint8_t out[ERMA_RKEY_PACKED_BYTES]);
/* Reads a key packed by erma_rkey_pack() from the len bytes at in into
 * *out. Returns ERMA_OK; ERMA_EBADPKT when len is not
 * ERMA_RKEY_PACKED_BYTES, the version is unknown or the cipher is no enum
 * erma_rma_cipher (*out is then left alone); ERMA_EINVAL for a NULL in or
 * out. */
int erma_rkey_unpack(const uint8_t *in, size_t len, struct erma_rkey *out);

/*
 * Timeouts: cfg.op_timeout_ns, when set, is every op's. Otherwise each
 * peer has an RTO from its measured round trips (RFC 6298: srtt + 4
 * rttvar, at least srtt + cfg.op_timeout_min_ns, at most
 * cfg.op_timeout_max_ns, which is also the first guess; doubled after a
 * timeout until the next sample); a READ's timeout is the RTO, a WRITE's
 * or REKEY's twice it (two round trips). An op times out only on a loop
 * pass that has read what is waiting for it: a pass right after the
 * engine's loop stalled (descheduled, for instance) or whose receive burst
 * was full puts timeouts off (16 passes at most in a row).
 * erma_rma_peer_rtt() tells a peer's RTO.
 *
 * Busy hosts: a target puts in each answer how long the request it
 * answers waited inside its host (the erma header's host_delay, as an RPC
 * server does: from the transport's receive stamp, or the time its loop
 * last looked, to the answer), sealed with the rest; the initiator adds
 * its own wait to read the answer. The executor's window CC takes both
 * out of a chunk's round trip and sees the network's part, so a
 * descheduled target or initiator is not taken for a congested one. The
 * RTO also stays above twice the longest round trip lately (halved every
 * 100 ms) among those spent mostly inside the hosts, so that a peer
 * descheduled once for a time slice does not time ops out the next time.
 *
 * NACK threshold: the target queues requests for its serving engine and
 * NACKs one (sealed, for an authentic request only) that would take its
 * queued work past cfg.nack_bytes, or its queue past cfg.nack_threshold
 * entries. A request's work is its length (4096 at most: the length is
 * not verified yet) plus one packet's overhead (104 bytes). By default nack_bytes is 1RMA's
 * (TIMEOUT - RTT - DISPATCH_TIMEOUT) x bandwidth: work queued beyond it
 * would be answered after the initiator's TIMEOUT. The target takes the
 * values from its own configuration and its transport's hints, assuming
 * its initiators are configured alike: TIMEOUT is the shortest op timeout
 * such an initiator sets (cfg.op_timeout_ns, else the RTO's floor, base
 * RTT + cfg.op_timeout_min_ns), RTT the transport's base RTT,
 * DISPATCH_TIMEOUT cfg.dispatch_timeout_ns and bandwidth its link rate;
 * at least one largest op (4096 + 104 bytes). erma starts an op's timeout
 * when the request leaves, so the DISPATCH_TIMEOUT term only adds margin.
 * On the sim fabric's defaults (25 Gb/s, op_timeout_min_ns 25 us, 10 us
 * dispatch timeout) it is 47 KB; on udp (10 ms floor, 1 ms dispatch timeout) about 28 MB,
 * where the queue's 1024 entries bound it first. Requests whose deadline
 * has passed when they reach the head of the queue are dropped, not
 * served (Security, Deadlines).
 *
 * Solicitation: a READ is issued only while the initiator's outstanding
 * READ bytes plus its length fit cfg.inbound_window, so it never receives
 * data it did not ask for; a target likewise bounds the WRITE data it has
 * solicited by cfg.solicit_window and cfg.solicits, of which one initiator
 * address (its virtual paths together) holds at most
 * cfg.solicit_window_per_source and
 * cfg.solicits_per_source (a request past them is NACKed,
 * stats.nacks_share). A target's memory for one-sided ops is fixed when it
 * is created: WRITE data goes straight into the region, and a solicitation
 * whose data never comes is freed at its deadline, at most the op timeout
 * (stats.solicit_expired), so a peer that never sends its data holds no
 * more than its share, and for no longer.
 */
struct erma_rma_cfg {
    uint64_t identity;            /* this engine's initiator identity; 0: random */
    uint32_t slots;               /* command slots, default 256, most 65535 */
    uint32_t inbound_window;      /* bytes of READ data outstanding, default 1 MiB */
    uint64_t dispatch_timeout_ns; /* default 10 us (1 ms on udp) */
    uint64_t op_timeout_ns;       /* 0 (default): each peer's RTO (Timeouts above);
                                     else every op's fixed timeout */
    uint64_t op_timeout_min_ns;   /* least RTO margin over srtt: default 5 base
                                     RTTs (10 ms on udp, where a process may
                                     stall for milliseconds) */
    uint64_t op_timeout_max_ns;   /* RTO cap and first guess: default 200 base
                                     RTTs (100 ms on udp) */
    uint64_t clock_skew_ns;       /* most two hosts' wall clocks may differ:
                                     default 0 on the sim, else a quarter of
                                     the shortest op timeout, at most 1 ms */
    uint32_t max_regions;         /* default 1024 */
    uint32_t serve_batch;         /* requests served per loop pass, default 16 */
    uint64_t nack_bytes;          /* target: queued work (bytes) past which a
                                     request is NACKed; 0 (default): 1RMA's
                                     (TIMEOUT - RTT - DISPATCH_TIMEOUT) x link
                                     rate (NACK threshold above) */
    uint32_t nack_threshold;      /* target: queued requests at most (memory),
                                     default 1024; one more is NACKed too */
    uint64_t serve_ns;            /* time spent per request served, to model a
                                     slower target on the sim; default 0 */
    uint32_t solicits;            /* target: solicitations in flight, default 64 */
    uint32_t solicit_window;      /* target: solicited bytes in flight, default 1 MiB */
    uint32_t solicits_per_source; /* target: of those, from one initiator address:
                                     default three quarters */
    uint32_t solicit_window_per_source; /* target: bytes of those, from one
                                           address: default three quarters */
    uint32_t transfers;           /* executor transfers in progress, default 64 */
    bool cc_off;                  /* executor: ignore the windows (slots bound it) */
    bool no_aes;                  /* act as a CPU without AES-NI (tests) */
    /* executor windows; NULL = erma_window_cfg_for(transport hints), both
     * from erma/sdk/cc.h (the driver SDK) */
    const struct erma_window_cfg *window;
};

/*
 * Priorities (cmd.priority, xfer.priority; 0 first, ERMA_RMA_PRIORITIES - 1
 * last): queued commands issue in priority order; the executor gives
 * chunks to the transfers of the first priority first, the next priority
 * the window room they leave, and within a priority to the flow
 * (destination and direction) with the lowest rate (ops in flight per
 * round trip; flows within half an op per round trip of it in turn), the
 * transfers of one flow in turn; a command or chunk of priority p
 * finds ERMA_ENOSLOTS while no more than p x floor(cfg.slots / 16) slots
 * are free, so a bulk load at the last priority never takes the slots the
 * first one needs (a transfer's chunk takes any free slot while fenced
 * commands wait: they may wait for it). A chunk that waited past
 * DISPATCH_TIMEOUT in the local queue sent nothing and goes again without
 * using one of max_retries. The target serves requests in arrival order (the
 * priority does not travel); the window CC keeps its queues short.
 *
 * Fences (MP-RDMA's "synchronise"): a WRITE command or transfer with fence
 * set is applied only after every earlier WRITE of this engine to the same
 * region (same peer, same rkey.region) has completed. Earlier: the WRITE
 * commands submitted and WRITE transfers started before it that have not
 * completed by then (a transfer counts until its completion, all its chunks
 * and retries done). The initiator enforces it: the fenced write's request
 * is not sent before then, so it costs their round trips. A completed
 * write writes nothing more (see Deadlines for a TIMEOUT), so the target
 * never applies a fenced write's byte before theirs. If one of those writes
 * failed (any status but ERMA_OK), the fenced one completes with
 * ERMA_ECANCELLED, after that failure's completion, sending nothing. A
 * fenced transfer's chunks are not ordered among themselves, and writes
 * after a fenced one are not ordered against it unless fenced themselves.
 * Reads and non-fenced writes never wait. A fenced command that waits
 * holds its slot (outside the local queue: it blocks nothing, and its
 * DISPATCH_TIMEOUT counts from when it may go); submit answers
 * ERMA_ENOSLOTS rather than let waiting fenced commands hold every slot. A
 * waiting fenced transfer holds no slot. Completions come in the order ops
 * complete, as without fences.
 */
/*
 * Completion by callback (cmd.cb, xfer.cb): an op with a callback does not
 * complete through erma_rma_poll(); cb(rma, c, cb_ctx) is called once with
 * the completion erma_rma_poll() would have returned. It runs inside
 * erma_endpoint_run_once(), after the pass's TX batch has left (as RPC
 * continuations do), never inside a submit; callbacks run in the order
 * their ops completed. By then the op's slot or transfer id is free again:
 * the callback may submit (with the same buffers; the new op may get the
 * same id), poll, and read c only while it runs. It must not run the
 * endpoint's loop, call erma_rma_wait() (ERMA_EAGAIN) or destroy the
 * engine or its endpoint. Callbacks not yet run when the engine is
 * destroyed are dropped. Ops without a callback complete through
 * erma_rma_poll() or erma_rma_wait(); both kinds may share an engine.
 */
struct erma_rma_completion;
typedef void (*erma_rma_cb)(struct erma_rma *rma, const struct erma_rma_completion *c,
                            void *ctx);

struct erma_rma_cmd {
    enum erma_rma_op op;
    int peer;                     /* from erma_rma_peer() */
    struct erma_rkey rkey;
    uint64_t offset;              /* in the remote region */
    void *local;                  /* READ: destination; WRITE: source; REKEY: new key */
    uint32_t len;                 /* 1..ERMA_RMA_MAX_OP (REKEY: ignored) */
    uint64_t grace_ns;            /* REKEY: old key stays valid this long,
                                     then gets ERMA_ESUPERSEDED */
    uint8_t priority;             /* 0 (first) .. ERMA_RMA_PRIORITIES - 1 */
    uint64_t tag;                 /* returned in the completion */
    bool fence;                   /* WRITE only (else ERMA_EINVAL): see Fences */
    erma_rma_cb cb;               /* NULL: complete through erma_rma_poll() */
    void *cb_ctx;                 /* cb's ctx */
};

struct erma_rma_xfer {
    enum erma_rma_op op;          /* READ or WRITE */
    int peer;
    struct erma_rkey rkey;
    uint64_t offset;
    void *local;
    uint32_t len;                 /* any size >= 1 */
    uint32_t max_retries;         /* per chunk */
    uint8_t priority;
    uint64_t tag;
    bool fence;                   /* WRITE only (else ERMA_EINVAL): see Fences */
    erma_rma_cb cb;               /* NULL: complete through erma_rma_poll() */
    void *cb_ctx;
};

/*
 * Completion status (erma_rma_completion.status):
 *   ERMA_OK          done; READ data is in cmd.local
 *   ERMA_ENACK       the target's queued work was past its NACK threshold,
 *                    or its solicitation table or window was full, or this
 *                    initiator held its share of them (WRITE, REKEY): not
 *                    queued, nothing done
 *   ERMA_ETIMEDOUT   no complete answer within the op's timeout (target
 *                    down or unreachable, or packets lost); a WRITE may have
 *                    written part of its data, and writes nothing after
 *   ERMA_EDISPATCH   DISPATCH_TIMEOUT: waited more than
 *                    cfg.dispatch_timeout_ns in the local queue (the
 *                    inbound window was full); never sent
 *   ERMA_EAUTH       the target could not verify the request: wrong key,
 *                    tampered packet, or a key generation 5 or more
 *                    REKEYs old
 *   ERMA_ESUPERSEDED the rkey is authentic but its key generation was
 *                    replaced by a REKEY (or erma_region_rekey()) and its
 *                    grace time is over (Security, Superseded keys):
 *                    nothing done; fetch the current rkey and retry
 *   ERMA_ENOREGION   no region with that id (never, or deregistered)
 *   ERMA_EBOUNDS     offset + length past the region's end
 *   ERMA_EPERM       the region does not allow the op
 *   ERMA_ECANCELLED  a fenced WRITE or transfer: a write it waited for
 *                    failed (Fences); never sent, nothing written
 * Sealed packets that fail to open, or that match no live op, are dropped
 * and counted (stats); the op then completes by its own timeout.
 *
 * Delays: issue_delay_ns is from submit to the request leaving (local
 * queueing), total_delay_ns from submit to completion; total - issue is the
 * remote delay the window CC acts on.
 */
struct erma_rma_completion {
    uint64_t tag;
    int status;
    uint32_t id;                  /* slot id, or transfer id when transfer */
    bool transfer;
    uint32_t retries;             /* transfers: chunk retries made */
    uint64_t issue_delay_ns, total_delay_ns;
};

struct erma_rma_stats {
    uint64_t submitted, issued, completed, retries;
    uint64_t served;              /* target: requests answered (any outcome) */
    uint64_t nacks_sent, solicit_expired;
    uint64_t nacks_share;         /* target: of nacks_sent, WRITEs and REKEYs whose
                                     initiator held its share of solicitations */
    uint64_t auth_failed;         /* target: requests that did not verify */
    uint64_t superseded_sent;     /* target: requests under a retired key
                                     generation, answered ERMA_ESUPERSEDED */
    uint64_t rx_bad;              /* malformed one-sided packets */
    uint64_t rx_unsealed_bad;     /* packets that failed to open at the initiator */
    uint64_t rx_unmatched;        /* answers for no live op (late, replayed, forged) */
    uint64_t data_rejected;       /* target: data for no live solicitation */
    uint64_t max_queue;           /* deepest request queue seen */
    uint64_t max_queue_bytes;     /* most queued work seen, bytes */
    uint64_t expired;             /* target: requests past (or implausibly far
                                     from) their deadline, dropped unanswered */
    uint64_t duplicates;          /* target: requests for an op it already
                                     solicits (replays), dropped */
    uint64_t fence_held;          /* fenced WRITEs and transfers that waited */
    uint64_t fence_cancelled;     /* ... and completed ERMA_ECANCELLED */
    uint64_t fenced;              /* target: fenced WRITE requests served */
    uint64_t paths_pruned;        /* virtual paths taken out of use */
};

/* An initiator's view of one peer's round trips (erma_rma_peer_rtt). */
struct erma_rma_rtt {
    uint64_t srtt_ns, rttvar_ns;  /* 0 before the first sample */
    uint64_t rto_ns;              /* a READ's timeout now (a WRITE's is twice it) */
};

/* Creates the engine on ep (one per endpoint); it serves from the next
 * loop pass on. cfg may be NULL; zeros in it take the defaults. Returns
 * ERMA_OK; ERMA_EAGAIN if ep already has one; ERMA_EINVAL for a NULL ep or
 * out, a cfg out of range, or a transport whose packets are too small;
 * ERMA_ENOTSUP when libsodium cannot start; ERMA_ENOMEM. */
int erma_rma_create(struct erma_endpoint *ep, const struct erma_rma_cfg *cfg,
                    struct erma_rma **out);
/* Detaches and frees. Pending commands and transfers are dropped without a
 * completion; no buffer of theirs is referenced afterwards. rma may be
 * NULL. Returns nothing. */
void erma_rma_destroy(struct erma_rma *rma);
/* Returns this engine's initiator identity: cfg.identity, or the random
 * one drawn when that was 0. */
uint64_t erma_rma_identity(const struct erma_rma *rma);
/* Copies the engine's counters (struct erma_rma_stats) into *out. Returns
 * nothing. */
void erma_rma_get_stats(const struct erma_rma *rma, struct erma_rma_stats *out);
/* Copies the configuration in use into *out: the one given, its zeros
 * replaced by defaults. Returns nothing. */
void erma_rma_get_cfg(const struct erma_rma *rma, struct erma_rma_cfg *out);

/* ---- target: regions ---- */

struct erma_addr;

/* Registers [addr, addr + len) with perms (ERMA_RMA_PERM_*) and the AEAD
 * AES-256-GCM where this CPU has AES-NI (half the cost of ChaCha20-Poly1305
 * per packet there), else ChaCha20-Poly1305, and writes its id to *region.
 * Returns ERMA_OK; ERMA_ENOSLOTS past cfg.max_regions; ERMA_EINVAL for a
 * NULL argument, an empty range, no perms or unknown ones. Initiators without AES-NI cannot
 * use an AES-GCM region: register those they should reach with
 * erma_region_register_cipher(). */
int erma_region_register(struct erma_rma *rma, void *addr, size_t len, unsigned perms,
                         uint32_t *region);
/* The same with the region's cipher. Returns as erma_region_register(),
 * and ERMA_ENOTSUP for AES-256-GCM where this CPU has no AES-NI,
 * ERMA_EINVAL for an unknown cipher. */
int erma_region_register_cipher(struct erma_rma *rma, void *addr, size_t len, unsigned perms,
                                enum erma_rma_cipher cipher, uint32_t *region);
/* Removes region and wipes its keys. Later requests get ERMA_ENOREGION;
 * solicited data not yet written is dropped. Returns ERMA_OK, or
 * ERMA_ENOREGION when there is no such region (or rma is NULL). */
int erma_region_deregister(struct erma_rma *rma, uint32_t region);
/* The rkey for the initiator with this identity whose packets come from
 * initiator, an address as this engine's transport sees it (for example
 * the source of the RPC that asked for the key), under the region's
 * current key. It works from that address only (and its virtual paths:
 * Security, Address). Returns ERMA_OK; ERMA_ENOREGION for no such region;
 * ERMA_EINVAL for a NULL rma or out, or an empty address. */
int erma_region_export_addr(struct erma_rma *rma, uint32_t region, uint64_t identity,
                            const struct erma_addr *initiator, struct erma_rkey *out);
/* The same for the endpoint at initiator_uri (its erma_rma_uri()), resolved
 * by this engine's transport. Returns as erma_region_export_addr(), and
 * ERMA_EADDR when the URI does not resolve, ERMA_EINVAL when it is NULL. */
int erma_region_export_uri(struct erma_rma *rma, uint32_t region, uint64_t identity,
                           const char *initiator_uri, struct erma_rkey *out);
/* Installs new_key (NULL: a random one) as the next key generation of a
 * local region; the old one keeps verifying for grace_ns. After that, ops
 * under it (or under the 3 generations before it) complete with
 * ERMA_ESUPERSEDED at their initiators (Security, Superseded keys), so
 * export the new rkeys to them. Returns ERMA_OK, or ERMA_ENOREGION for no
 * such region. (A REKEY op does the same from an initiator.) */
int erma_region_rekey(struct erma_rma *rma, uint32_t region, const uint8_t *new_key,
                      uint64_t grace_ns);
/* Kd for the initiator (identity, address as the target's transport sees
 * it) under region key kr of
 * generation key_gen, for a key manager that installed kr with a REKEY;
 * cipher is the region's. Needs no engine; the rkey goes to *out. Returns
 * nothing. */
void erma_rma_derive(const uint8_t kr[ERMA_RMA_KEY_BYTES], uint32_t region, uint32_t key_gen,
                     enum erma_rma_cipher cipher, uint64_t identity,
                     const struct erma_addr *initiator, struct erma_rkey *out);

/* ---- initiator ---- */

/*
 * Virtual paths: an initiator whose endpoint has K > 1 paths
 * (erma_endpoint_cfg.paths, udp and sim) sends each op from one of its K
 * ports, so that routers hashing UDP ports (ECMP) spread the ops to one
 * destination over up to K routes; all packets of one op take the same
 * path, and the target answers to the port the op came from. Per
 * destination the initiator keeps the state of erma/sdk/cc.h's VIRTUAL PATHS
 * (200 bytes): an op goes on the path with the fewest ops out (the one
 * whose answer just came among equals), every path carries one op first
 * (ops that find every path waiting for its first answer go on the one
 * with the fewest out, not held back), and a path whose timeouts or delay
 * stand out against the others' is pruned for 4 times the peer's current
 * RTO (doubling per prune) and probed again (no out-of-order rule: ops are
 * independent, and a burst overtakes itself across paths); a TIMEOUT counts as a loss of its
 * path. Ops on a pruned path give the executor's window CC no signal
 * (bar NACKs). The path index k (0..7) travels in the
 * authenticated op header: the target derives Kd for the address k ports
 * below the source, the one the rkey was exported for, and needs no paths
 * of its own. An answer counts only when it arrives on the port its op
 * left from. stats.paths_pruned counts prunes.
 */

/* Writes the URI this engine's packets come from (its endpoint's, as
 * erma_endpoint_uri()) into out. Returns ERMA_OK; ERMA_EINVAL for a NULL
 * argument or when out is too short. */
int erma_rma_uri(const struct erma_rma *rma, char *out, size_t len);
/* Names endpoint tid of the base URI uri (erma/endpoint.h, Addresses);
 * returns a peer id (>= 0), the same one each time the same endpoint is
 * named, or an error code: ERMA_EADDR when the URI is malformed or does not
 * resolve; ERMA_EINVAL for a NULL argument; ERMA_ENOSLOTS past 65536
 * peers; ERMA_ENOMEM. */
int erma_rma_peer(struct erma_rma *rma, const char *uri, uint8_t tid);
/* Fills *out with the round-trip estimate and timeout towards peer
 * (Timeouts; rto_ns is cfg.op_timeout_ns when that is set). Returns
 * ERMA_OK, or ERMA_EINVAL for a NULL argument or an unknown peer. */
int erma_rma_peer_rtt(const struct erma_rma *rma, int peer, struct erma_rma_rtt *out);
/* Queues cmd and returns its slot id (>= 0); its completion, with
 * cmd.tag, goes to cmd.cb when set (Completion by callback), else comes
 * from erma_rma_poll() or erma_rma_wait(); cmd.local must stay valid until
 * then. Its status is one of Completion status, ERMA_ESUPERSEDED among
 * them when cmd.rkey's key generation was retired by a REKEY: fetch the
 * current rkey and submit again. Else returns an error code (and no
 * completion comes): ERMA_ENOSLOTS when every slot is busy or awaits
 * erma_rma_poll(), when too few are free for cmd.priority (Priorities), or
 * when a fenced WRITE that has to wait would take the last slot not held
 * by waiting fenced WRITEs; ERMA_EINVAL (a
 * NULL argument, an unknown peer, no local buffer, len 0, a bad op,
 * priority or cipher; also: fence on a READ or REKEY); ERMA_E2BIG (len >
 * ERMA_RMA_MAX_OP); ERMA_ENOTSUP (the key's cipher is AES-256-GCM and this
 * CPU has no AES-NI). */
int erma_rma_submit(struct erma_rma *rma, const struct erma_rma_cmd *cmd);

/*
 * Executor: erma_rma_transfer() moves any number of bytes (up to 4 GiB) as
 * chunks of at most ERMA_RMA_MAX_OP, issued as the 1RMA window CC (sdk/cc.h)
 * allows: a local window on issue_delay and a remote window per (peer,
 * direction) on remote delay. Without cfg.window the windows come from
 * erma_window_cfg_for(the transport's link rate and base RTT), the remote
 * target raised by a quarter of its jitter hint, and base RTT and target
 * follow the smallest chunk round trip measured (target 1.25 x it) when
 * that is larger. With CC on, a chunk the windows let go waits in the
 * command queue: for the solicitation window, and a READ chunk also until
 * this host's link can have brought in the answers of the READs issued
 * before it (at the transport's link rate, its frame overhead counted), so
 * that an initiator's own inbound congestion stays in its queue, as
 * issue_delay for the local window, rather than in the switch queue
 * towards it (udp's link rate is a fixed 25 Gb/s guess, so READ transfers
 * over udp go no faster than that; endpoints sharing one dpdk port each
 * pace at the port's rate). Commands are not paced, but wait behind a
 * paced chunk of their own priority; with merged windows nothing is paced.
 * A failing chunk with a transient status
 * (TIMEOUT, NACK, DISPATCH_TIMEOUT) is retried up to max_retries times;
 * the transfer completes once, after its last chunk, with ERMA_OK or the
 * first final failure. erma_rma_window() and erma_rma_local_window() show
 * the windows.
 */

/* Starts a transfer (Executor) and returns its id (>= 0); its one
 * completion, with transfer set, goes to x->cb when set, else comes from
 * erma_rma_poll() or erma_rma_wait(); x->local must stay valid until then.
 * A chunk answered ERMA_ESUPERSEDED (x->rkey's key generation retired by a
 * REKEY) is final, not retried: the transfer completes with it; fetch the
 * current rkey and start it again. Else returns an error code (and no
 * completion comes): ERMA_ENOSLOTS past cfg.transfers; ERMA_EINVAL (a NULL
 * argument, an unknown peer, no local buffer, len 0, an op other than
 * READ and WRITE, a bad priority or cipher; also: fence on a READ);
 * ERMA_ENOTSUP as for erma_rma_submit(); ERMA_ENOMEM. */
int erma_rma_transfer(struct erma_rma *rma, const struct erma_rma_xfer *x);
/* Moves up to max completions (commands and transfers without a
 * callback), in the order they completed, into out and returns how many
 * (0: none). Each frees its slot or transfer id for reuse. ERMA_EINVAL
 * for a NULL rma, or a NULL out with max > 0. */
int erma_rma_poll(struct erma_rma *rma, struct erma_rma_completion *out, int max);

#define ERMA_RMA_WAIT_ALL (-1)
/* Runs the endpoint's loop (erma_endpoint_run_until()) until the command
 * in slot id (transfer false) or transfer id (transfer true) has completed,
 * for at most timeout_ns, and copies its completion to *out. An op without
 * a callback completes into *out only: erma_rma_poll() never returns it,
 * and its id is free on return. An op with one has had its callback run
 * when the wait returns (Completion by callback); *out is a copy. Other
 * ops' completions meanwhile stay for erma_rma_poll() or run their
 * callbacks. id ERMA_RMA_WAIT_ALL waits until no command or transfer is in
 * flight (each polled one's completion is queued, each callback has run;
 * callbacks that submit again keep it waiting) and leaves *out alone (out
 * may be NULL; transfer is ignored). An id names the op submitted last
 * into it; once that op's completion has been taken or its callback
 * called, it names no op, or a later one: wait for a callback op before
 * the loop has run again since its submit.
 * Returns ERMA_OK (the op's own outcome is out->status);
 * ERMA_ETIMEDOUT when timeout_ns passed first (the op completes later as
 * usual); ERMA_EINVAL for a NULL rma or out, or an id that names no op in
 * flight or completed but not yet taken (a free id, a transfer's chunk);
 * ERMA_EAGAIN when called from a callback of this engine or inside
 * another wait; ERMA_ENOTSUP on the sim fabric, whose time moves only
 * under erma_sim_run(): poll there, or use callbacks. Call it from outside
 * the endpoint's loop, never from an RPC continuation or handler. */
int erma_rma_wait(struct erma_rma *rma, int id, bool transfer, uint64_t timeout_ns,
                  struct erma_rma_completion *out);

/* What one of the executor's congestion windows holds now. */
struct erma_rma_window_info {
    double cwnd;          /* the window, in ops */
    uint32_t inflight;    /* ops in flight under it */
    uint64_t srtt_ns;     /* smoothed round trip of its ops */
    uint64_t issued;      /* ops issued under it */
    uint64_t decreases;   /* times it was decreased on delay */
    uint64_t cuts;        /* times it was cut on a failure (NACK, timeout) */
};
/* Fills *out with the executor's remote window towards peer in the
 * direction of op's data: READ (inbound) or WRITE and REKEY (outbound).
 * Returns ERMA_OK; ERMA_ENOENT before an op of that direction went to
 * peer; ERMA_EINVAL for a bad argument. */
int erma_rma_window(const struct erma_rma *rma, int peer, enum erma_rma_op op,
                    struct erma_rma_window_info *out);
/* Fills *out with the executor's local window (issue delay). Returns
 * ERMA_OK, or ERMA_EINVAL for a NULL argument. */
int erma_rma_local_window(const struct erma_rma *rma, struct erma_rma_window_info *out);

ERMA_END_DECLS

#endif
