/*
 * erma/kvcs.h - a key-value caching service: keys sharded and replicated
 * over several kv servers (erma/kv.h) by consistent hashing, looked up by
 * RPC or by one-sided READ, as in 1RMA's evaluation.
 *
 * Ring
 *   kvcs_ring places `vnodes` points per server on a 64-bit ring, point
 *   j of server s at SipHash-2-4 (libsodium crypto_shorthash, a fixed key) of
 *   (s, j); a key sits at the SipHash of its bytes. The key's replicas are
 *   the first r distinct servers met walking clockwise from the key, the
 *   first of them its primary. A server's points do not depend on how many
 *   servers there are, so adding server n moves only keys whose new primary
 *   is n. The ring is the same in every process.
 *
 * Server
 *   kvcs_server_create() makes, for each of cfg.threads endpoint threads
 *   t (default 1), a nexus and an endpoint of cfg.uri with thread id t
 *   (udp: PORT + t) with one RMA engine, and one kv table served with
 *   kv_serve() at request types KVCS_TYPE_BASE + kv_op and
 *   registered with kv_server_rma() for one-sided GETs (its key handed
 *   out by the key service, erma/keys.h, at KVCS_TYPE_BASE + KV_REGION).
 *   Each thread holds its share of the keys (the client picks it, as
 *   eRPC's and MICA's clients pick a core by key) in a table of
 *   1 / threads of cfg.buckets and cfg.log_bytes, and shares nothing with
 *   the others. kvcs_server_run() runs thread 0's event loop; threads 1..
 *   run their own from create to destroy. Nothing else: a server knows
 *   nothing of the ring or of the other servers.
 *
 * Client
 *   kvcs_client_create() makes a nexus at cfg.uri with one endpoint, an
 *   RMA engine and a kv_reader. With cfg.server_threads T (every server's
 *   cfg.threads), a key's replicas are the ring's servers, each at its
 *   endpoint thread given by a hash of the key (FNV-1a, then MurmurHash3's
 *   finalizer, scaled to T; the same in every client); below,
 *   "server" means one such endpoint thread, with its own sessions, key,
 *   down mark and probes. It connects sessions to every server (4 each,
 *   fewer past 32, used in turn: a session
 *   has only ERMA_SESSION_SLOTS requests in flight, and requests queued
 *   behind them timed out once a failed replica's load moved to the others)
 *   and fetches each table's region and a key derived for this client (the
 *   kv REGION fetch of the key service), blocking up to connect_timeout_ns; ERMA_ETIMEDOUT
 *   if some server cannot be reached.
 *
 *   Tries. An op's request to one replica is a try. A try has its full
 *   chance, attempt_timeout_ns (default 100 ms): requests fail after it (rpc
 *   cfg.req_timeout_ns), and so do one-sided ops (rma cfg.op_timeout_ns and
 *   dispatch_timeout_ns; a one-sided GET makes two or more READs, each so
 *   bounded); an RPC try still unanswered at its deadline, e.g. waiting
 *   behind others for one of its session's ERMA_SESSION_SLOTS, is given up
 *   as ERMA_ETIMEDOUT (its request completes later, to no op). A GET try
 *   is also hedged: once it has taken longer than the 95th percentile of
 *   the last 64 answered tries by its method at its replica (at least
 *   100 us, 1 ms before 16 answers, at most half the attempt timeout) and
 *   that replica has answered nothing for as long (it stalls or died; one
 *   busy answering others is not hedged, which would only add load), the
 *   GET tries the next replica too, and the first answer wins
 *   (stats.hedges). Hedges are budgeted: one per 20 GETs started, saved
 *   up to 64 over a quiet spell, a hedge that starts no try spending
 *   nothing; a one-sided GET is hedged within the budget only to a replica
 *   where the location cache knows the key's item (one READ; two seldom
 *   beat the try in flight, and a key's later replicas are learned only
 *   by hedges and failovers, so such GETs are seldom hedged before a
 *   stall). A replica silent for hedge_stall_ns (1 ms) is hedged beyond
 *   the budget and whatever the cost (stats.stall_hedges). Where replicas
 *   share a saturated core, each falls silent for a round trip now and
 *   then, and unbudgeted hedges added 12% to that core's load. So a
 *   replica that stalls (a descheduled or overloaded server) or dies makes
 *   a GET slower by about the hedge time and a round trip (about 1 ms
 *   more while the budget is spent), not a failure; a try at a replica
 *   that keeps answering others with gaps shorter than that, while the
 *   budget is spent, waits for its answer or its full chance. A replica
 *   is not marked down for being slow: only a try's failure marks it down
 *   (below), also a try whose op had finished without it. A GET fails
 *   only when every replica's try failed. At most
 *   32 one-sided GET tries are in flight per replica (as RPC's 4 sessions
 *   of 8 slots); more wait for one of them to end.
 *
 *   Ops start with kvcs_get/put/del and complete in
 *   kvcs_client_run_once(): cb(tag, status, val, vlen) runs exactly
 *   once per op that was started (call returned ERMA_OK), always from inside
 *   kvcs_client_run_once(), never from the call that started it. val
 *   (GET with ERMA_OK only) is valid during the callback. Callbacks may
 *   start new ops (the slot of the op whose callback runs is free again),
 *   not destroy the client.
 *
 *   GET  tries the key's replicas in ring order, one at a time unless a
 *        try is hedged (above), by the method in force when it starts:
 *        KVCS_RPC (a kv GET request) or KVCS_READ (kv_rget: bucket, then
 *        item, torn reads read again; the item alone, one round trip, where
 *        the location cache knows where the key's item was found before). A replica marked down is skipped
 *        while some untried replica is not down. A try that fails at the
 *        transport level (ERMA_ETIMEDOUT, ERMA_EPEERFAILED, ERMA_ESESSRESET,
 *        ERMA_ECANCELLED, ERMA_EREFUSED, ERMA_ENACK, ERMA_EDISPATCH, and for
 *        READs ERMA_EAUTH and ERMA_ENOREGION, a restarted server's answers,
 *        and ERMA_ESUPERSEDED, a rekeyed region's: the probe fetches the key)
 *        marks its replica down, and once no try of the GET is in flight it
 *        moves on to the next replica (a failover, as is passing over a
 *        replica marked down). ERMA_EAGAIN (too many torn reads) moves on
 *        without marking it down. ERMA_ENOENT from a replica is a final
 *        answer: a cache miss.
 *        When every replica is marked down, the GET tries them all the
 *        same, except one that cannot be tried: its sessions failed or, for
 *        a READ, its region and key are not fetched again yet (its probe
 *        has not answered). That one fails at once with ERMA_EPEERFAILED,
 *        and kvcs_op_info() gives the error that marked it down.
 *        status: ERMA_OK with the value, ERMA_ENOENT, the last replica's
 *        failure when every replica failed (its try's, or ERMA_EPEERFAILED
 *        when it could not be tried), or another failure (ERMA_ENOMEM,
 *        ERMA_EBADPKT...) at once.
 *   PUT, DEL  go to all the key's replicas at once. The op waits for those
 *        not marked down (for all, when every one is down); to a replica
 *        marked down the write goes out too if its sessions are there, but
 *        unwaited for, its status KVCS_NOT_TRIED. cb runs once every
 *        waited-for try has finished. PUT: ERMA_OK if at least one replica stored the
 *        value and every other failed at the transport level; else the
 *        first other failure (e.g. ERMA_E2BIG), or the last transport
 *        failure when no replica answered. DEL: the same, where a replica
 *        without the key (ERMA_ENOENT) is no failure; ERMA_ENOENT when no
 *        replica had the key.
 *
 *   Values are never returned wrongly: each try has its own request and
 *   response buffers and is its own tag; a late answer to a try that timed
 *   out is dropped by the RPC or RMA layer, or, for an abandoned try, comes
 *   to a try detached from its op and is dropped; one-sided GETs return
 *   only items whose stamp and check hold (kv.h). Replicas are not kept
 *   consistent with each other: a replica that missed a PUT (a try that
 *   failed) may serve the older value until it is written again, as in any
 *   cache, and so may a replica that was marked down while it was not dead
 *   and missed a write (its sessions had failed), a DEL included: the
 *   deleted key can come back from it.
 *
 *   Down marks and probes: down_ns after a replica was marked down, the
 *   client probes it in the background: it opens the sessions that failed
 *   (a server silent for failure_ns fails them) and asks for its region
 *   again, which also fetches a restarted server's new key. If the answer
 *   comes, ops use the replica again; if not, the next probe follows
 *   down_ns later. A probe of a dead server ends when its request times out
 *   (attempt_timeout_ns) or its sessions fail to connect (failure_ns), so
 *   probes come every down_ns plus that. No op waits on a probe unless
 *   every replica of its key is down.
 *
 *   Bad input is refused at once, nothing started: ERMA_EINVAL for a NULL
 *   client, key or callback, an empty key, or a NULL value of non-zero
 *   length, ERMA_E2BIG for a key over
 *   KVCS_MAX_KEY bytes or a value that does not fit a kv item
 *   (KV_MAX_ITEM), ERMA_ENOSLOTS when max_ops ops are in progress.
 *
 *   kvcs_op_info(), called from inside a callback, tells which
 *   replicas the op tried, what each answered and, for each one marked
 *   down, the error that marked it (for tests, benchmarks and error
 *   reports). kvcs_client_destroy() drops ops still in progress
 *   without calling their callbacks.
 *
 * Threading: a server and a client each belong to one thread. All functions
 * return ERMA_OK or a negative erma_err code unless noted.
 */
#ifndef KVCS_H
#define KVCS_H

#include <stdbool.h>
#include <stdint.h>

#include "erma/errors.h"

#define KVCS_TYPE_BASE 16
#define KVCS_MAX_KEY 256
#define KVCS_MAX_REPLICAS 8
#define KVCS_MAX_THREADS 8 /* endpoint threads of one server */

/* ---- consistent hashing ---- */

struct kvcs_ring;

/* nservers >= 1, vnodes >= 1 (0: 64), nservers x vnodes at most 2^24. */
int kvcs_ring_create(uint32_t nservers, uint32_t vnodes, struct kvcs_ring **out);
void kvcs_ring_destroy(struct kvcs_ring *ring);
/* Fills out[0..r) with the r distinct servers holding key, primary first
 * (walking the ring clockwise); returns how many (min(r, nservers)), or
 * ERMA_EINVAL. */
int kvcs_ring_replicas(const struct kvcs_ring *ring, const void *key, uint32_t klen,
                       uint32_t *out, uint32_t r);
uint32_t kvcs_ring_servers(const struct kvcs_ring *ring);

/* ---- server ---- */

struct kvcs_server_cfg {
    const char *uri;  /* the server's nexus URI, e.g. udp://127.0.0.1:41000 */
    uint32_t buckets; /* kv buckets, default 2^16 */
    uint64_t log_bytes; /* kv item log, default 64 MiB */
    unsigned workers; /* nexus worker threads (kv SCAN), default 1 */
    uint64_t idle_wait_ns; /* spin this long once idle, then sleep until a packet
                              (endpoint cfg.idle_wait_ns); 0: its default, 50 us */
    bool busy_poll;        /* never sleep: a core per server, the lowest latency */
    const uint8_t *psk;    /* ERMA_PSK_BYTES: secure RPC sessions (erma_nexus_cfg.psk);
                              clients need the same key. One-sided GETs are
                              sealed either way (erma/rma.h) */
    uint32_t threads;      /* endpoint threads, each with its share of the keys
                              (Server); 0 or 1: one, at most KVCS_MAX_THREADS */
};

struct kvcs_server;

int kvcs_server_create(const struct kvcs_server_cfg *cfg,
                       struct kvcs_server **out);
/* Runs endpoint thread 0's event loop ns nanoseconds in the caller (the
 * other threads run from create to destroy). */
void kvcs_server_run(struct kvcs_server *srv, uint64_t ns);
/* Stops the other threads, waits for them (up to ERMA_IDLE_SLEEP_MAX_NS
 * each) and frees everything; NULL is ignored. */
void kvcs_server_destroy(struct kvcs_server *srv);

/* ---- client ---- */

enum kvcs_method { KVCS_RPC, KVCS_READ };

struct kvcs_client_cfg {
    const char *uri;                 /* this client's own nexus URI */
    const char *const *servers;      /* server nexus URIs, index = server number in the ring */
    uint32_t nservers;
    uint32_t replicas;               /* R, default 3, capped at nservers and
                                        KVCS_MAX_REPLICAS */
    uint32_t vnodes;                 /* default 64 */
    enum kvcs_method method;         /* how GETs are done */
    uint32_t max_ops;                /* ops in progress at once, default 256 */
    uint64_t attempt_timeout_ns;     /* a try's full chance at one replica, default
                                        100 ms */
    uint64_t down_ns;                /* a replica that failed is probed after this
                                        long (and after each failed probe), default
                                        200 ms */
    uint64_t connect_timeout_ns;     /* default 5 s */
    uint64_t failure_ns;             /* a server silent this long fails its sessions
                                        (rpc cfg.failure_ns), default 500 ms */
    bool cc_off;                     /* RPC sessions unpaced (rpc cfg.cc.off): on a
                                        busy host Timely takes scheduling delays for
                                        congestion and slows RPCs several times */
    const uint8_t *psk;              /* the servers' key: secure RPC sessions */
    uint32_t loc_cache;              /* one-sided GETs: entries of the reader's
                                        location cache (kv_reader_cache), default
                                        65536; with no_loc_cache, none */
    bool no_loc_cache;
    bool no_hedge;                   /* GET tries not hedged (for comparison) */
    uint64_t hedge_stall_ns;         /* a replica silent this long is hedged beyond
                                        the budget, default 1 ms */
    uint32_t server_threads;         /* every server's cfg.threads (Client); 0: 1 */
};

typedef void (*kvcs_fn)(void *tag, int status, const uint8_t *val, uint32_t vlen);

struct kvcs_client;

int kvcs_client_create(const struct kvcs_client_cfg *cfg,
                       struct kvcs_client **out);
void kvcs_client_destroy(struct kvcs_client *c);
int kvcs_get(struct kvcs_client *c, const void *key, uint32_t klen, kvcs_fn cb,
             void *tag);
int kvcs_put(struct kvcs_client *c, const void *key, uint32_t klen, const void *val,
             uint32_t vlen, kvcs_fn cb, void *tag);
int kvcs_del(struct kvcs_client *c, const void *key, uint32_t klen, kvcs_fn cb,
             void *tag);
/* One event-loop pass; returns the ops completed in it (callbacks run). */
int kvcs_client_run_once(struct kvcs_client *c);
/* The method of GETs started from now on. */
void kvcs_client_set_method(struct kvcs_client *c, enum kvcs_method m);

/* gets, puts, dels: ops started; failovers: GET tries on a later replica,
 * because an earlier one failed in this GET or was passed over as marked
 * down; skipped: those that passed over a replica marked down; hedges: GET
 * tries on a later replica while an earlier one was still in flight,
 * slower than its replica's round trips, stall_hedges those of them past
 * hedge_stall_ns of silence (beyond the budget); failed: ops completed with a
 * status other than ERMA_OK and ERMA_ENOENT; read_gets, rpc_gets: GETs
 * started by each method. */
struct kvcs_client_stats {
    uint64_t gets, puts, dels, failovers, failed, read_gets, rpc_gets;
    uint64_t skipped, hedges, stall_hedges;
    uint64_t read_waits; /* one-sided GET tries that waited for their replica's window */
    uint64_t one_read, stale_locs; /* one-sided GETs: kv_reader_stats cache_hits,
                                      cache_stale */
};
void kvcs_client_get_stats(const struct kvcs_client *c,
                           struct kvcs_client_stats *out);

/* KVCS_NOT_TRIED in status[]: the op never tried that replica. */
#define KVCS_NOT_TRIED 1

/* The op whose callback is running: its key's replicas (server numbers,
 * primary first), each one's outcome (its last try's status; ERMA_EPEERFAILED
 * for one marked down that could not be tried), each one's down_err (0 when
 * it is not marked down, else the failure that marked it down or that its
 * last probe met: ERMA_ETIMEDOUT, ERMA_EPEERFAILED...), and for a GET the
 * server that gave the final answer (UINT32_MAX: none). */
struct kvcs_op_info {
    uint32_t nreplicas;
    uint32_t replicas[KVCS_MAX_REPLICAS];
    int status[KVCS_MAX_REPLICAS];
    int down_err[KVCS_MAX_REPLICAS];
    uint32_t answered;
};
/* Valid only inside a callback; ERMA_EINVAL elsewhere. */
int kvcs_op_info(const struct kvcs_client *c, struct kvcs_op_info *out);

#endif
