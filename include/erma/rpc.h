/*
 * erma/rpc.h - eRPC-style remote procedure calls.
 *
 * Objects
 *   erma_nexus   one per process (or per simulated host): the URI its
 *                endpoints listen on, the request-handler registry and the
 *                worker threads that run worker-mode handlers.
 *   erma_rpc     an endpoint: one per user thread, with its own transport
 *                queue, sessions, buffer pool and event loop. Not thread-safe:
 *                only its owner thread calls it (worker handlers excepted,
 *                see erma_enqueue_response). Endpoint t of a nexus at
 *                udp://H:P listens on udp://H:(P+t); likewise sim://F/H:(P+t).
 *                With P = 0 each endpoint takes a free port (erma_rpc_uri()
 *                tells which): right for clients, which nobody calls.
 *   session      a client/server pair of endpoints, named by a small integer
 *                on each side. ERMA_SESSION_SLOTS requests are in flight per
 *                session; more queue transparently and start as slots free.
 *                Requests complete in any order.
 *   erma_msgbuf  a message buffer from erma_alloc_msgbuf(), up to
 *                ERMA_MAX_MSG_SIZE (8 MiB). Its data is contiguous; erma keeps
 *                the packet headers around it, so messages go out without
 *                copying.
 *
 * Calls
 *   Client: erma_enqueue_request(rpc, session, type, req, resp, cont, tag)
 *   queues a request; cont(rpc, tag, status, resp) runs later in the event
 *   loop, exactly once, with status ERMA_OK and the response in resp, or a
 *   negative code and resp->size == 0:
 *     ERMA_EPEERFAILED  the server stopped answering (failure timeout) or
 *                       restarted
 *     ERMA_ESESSRESET   the session was disconnected or reset locally
 *     ERMA_ECANCELLED   erma_destroy_session() while the request was pending
 *     ERMA_ETIMEDOUT    cfg.req_timeout_ns passed without a response
 *     ERMA_E2BIG        the response did not fit in ERMA_MAX_MSG_SIZE
 *     ERMA_ENOMEM       no buffer memory for the response
 *   resp is grown (reallocated) when the response is larger than its
 *   capacity. req and resp belong to erma until cont runs: do not free,
 *   resize or reuse them for another request meanwhile.
 *
 *   Server: a handler registered for a request type gets an erma_req. It
 *   answers with erma_enqueue_response(req, resp), now or later (e.g. from
 *   the continuation of a nested RPC), where resp is erma_req_resp_buf(req)
 *   (preallocated, one packet of data) or a msgbuf of its own, which erma
 *   frees once the response has been delivered. req and its data stay valid
 *   until then. A one-packet request reaches a dispatch handler in the
 *   receive buffer (no copy): a handler that returns without answering must
 *   call erma_req_data() again afterwards (erma has moved the bytes into a
 *   buffer of its own; NULL if it had no memory for them). A request a
 *   handler holds does not hold its slot: when the client gives up on it
 *   and sends another on that slot, or the session ends, the held request's
 *   answer is dropped, never delivered to another request.
 *   Dispatch-mode handlers run in the event loop and must not block;
 *   worker-mode handlers run on the nexus's worker threads. A request is
 *   executed at most once, whatever the network does.
 *
 * Wire protocol (docs/PROTOCOL.md): client-driven, with at most `credits`
 * unacknowledged packets per session; the server answers each non-last
 * request packet with a credit return and the last with the first response
 * packet; the client pulls further response packets with
 * request-for-response packets; losses are repaired by go-back-N after
 * cfg.rto_ns; reordered packets are dropped. Session management (connect
 * with a credit grant, disconnect, keepalive, failure detection) travels
 * in-band over the same transport.
 *
 * All functions return ERMA_OK or a negative erma_err code unless noted.
 */
#ifndef ERMA_RPC_H
#define ERMA_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "erma/api.h"
#include "erma/errors.h"

ERMA_BEGIN_DECLS

#define ERMA_SESSION_SLOTS 8
#define ERMA_MAX_CREDITS 32
#define ERMA_MAX_THREADS 64
#define ERMA_IDLE_SLEEP_MAX_NS 100000000 /* 100 ms */

struct erma_nexus;
struct erma_rpc;
struct erma_timely_cfg;
struct erma_req;

struct erma_msgbuf {
    uint8_t *data;     /* the message bytes */
    uint32_t size;     /* bytes of the message */
    uint32_t max_size; /* capacity; erma_resize_msgbuf() moves size within it */
    /* erma's own: */
    uint8_t *mem;
    uint32_t max_pkts, pkt_data;
};

enum erma_handler_mode {
    ERMA_DISPATCH, /* runs in the event loop */
    ERMA_WORKER,   /* runs on a worker thread */
};

typedef void (*erma_handler_fn)(struct erma_req *req, void *ctx);
typedef void (*erma_cont_fn)(struct erma_rpc *rpc, void *tag, int status,
                             struct erma_msgbuf *resp);

enum erma_sm_event {
    ERMA_SM_CONNECTED,      /* client session ready */
    ERMA_SM_CONNECT_FAILED, /* err: ERMA_EREFUSED, ERMA_ETIMEDOUT, ERMA_ENOENT */
    ERMA_SM_DISCONNECTED,   /* erma_destroy_session() completed */
    ERMA_SM_PEER_FAILED,    /* the peer stopped answering or restarted */
};

typedef void (*erma_sm_fn)(struct erma_rpc *rpc, int session, enum erma_sm_event ev, int err,
                           void *ctx);

struct erma_nexus_cfg {
    unsigned workers; /* worker threads for ERMA_WORKER handlers; default 0 */
    /* Optional: a 32-byte key shared by every peer (ERMA_PSK_BYTES). With it,
     * every session of this nexus's endpoints is authenticated and
     * encrypted: a handshake proves both ends hold the key and derives fresh
     * keys per session; every packet is sealed (AES-256-GCM when both ends'
     * CPUs have AES-NI, else ChaCha20-Poly1305) with a 64-packet replay
     * window per session and direction. A replayed, forged, altered or
     * re-addressed packet is dropped and counted (stats.rx_auth_failed,
     * rx_replayed, rx_no_session), never executed. Each packet carries 24
     * bytes more, so it has 24 bytes less of data. Peers must both have it,
     * or neither (a connect fails with ERMA_EAUTH). It is a group key: any
     * holder can read sessions it recorded (docs/PROTOCOL.md, limits). */
    const uint8_t *psk;
};
#define ERMA_PSK_BYTES 32

/* Congestion-control switches, all false by default (everything on). They
 * can be changed at run time with erma_rpc_set_cc(). */
struct erma_cc_switches {
    bool off;                /* no Timely, no pacing: every session at line rate */
    bool no_timely_bypass;   /* update the rate even for fast samples at line rate */
    bool no_wheel_bypass;    /* pace every packet through the wheel, even at line rate */
    bool no_batch_clock;     /* read the clock per packet, not once per loop pass */
};

struct erma_rpc_cfg {
    uint32_t credits;          /* per session, default and most ERMA_MAX_CREDITS (32) */
    uint32_t rx_ring;          /* RX ring packets; sessions x credits must fit; default 4096 */
    uint32_t mtu;              /* Ethernet MTU, default 1500 */
    uint64_t rto_ns;           /* go-back-N timeout, default 5 ms */
    uint64_t failure_ns;       /* peer declared dead after this silence, default 500 ms */
    uint64_t keepalive_ns;     /* ping an idle peer this often, default failure_ns / 5 */
    uint64_t connect_retry_ns; /* first resend of a connect request, default 20 ms;
                                  each later one waits twice as long, at most 32x */
    uint64_t connect_timeout_ns; /* give up connecting after this, default 3 s */
    uint32_t max_sessions_per_peer; /* server sessions one address may hold, default 64 */
    uint64_t req_timeout_ns;   /* fail a request after this long, 0 (default) = never */
    /* erma_rpc_run() and erma_rpc_run_until() spin this long once the loop
     * finds nothing to do, then sleep in the transport (udp: ppoll) until a
     * packet or the next timer, as servers do; default 50 us. An idle
     * endpoint then costs well under 1% of a core. */
    uint64_t idle_wait_ns;
    /* Never sleep: poll the transport all the time (a whole core per
     * endpoint, the lowest latency; latency benchmarks use it). */
    bool busy_poll;
    uint64_t seed;             /* session tokens; 0 = from the clock */
    double fault_drop;         /* test only: drop this fraction of received packets */
    struct erma_cc_switches cc;
    double link_bps;           /* Timely ceiling; 0 = the transport's hint */
    uint64_t base_rtt_ns;      /* unloaded RTT for Timely thresholds; 0 = the transport's hint */
    /* Timely parameters; NULL = erma_timely_cfg_for(link_bps, base_rtt_ns) (cc.h). */
    const struct erma_timely_cfg *timely;
    /* Optional: every RTT sample a client session takes (benchmarks). */
    void (*rtt_hook)(void *ctx, int session, uint64_t rtt_ns);
    void *rtt_ctx;
    erma_sm_fn sm_handler;     /* optional session-management callback */
    void *sm_ctx;
};

struct erma_rpc_stats {
    uint64_t tx_pkts, rx_pkts, tx_dropped;
    uint64_t rx_bad;        /* malformed or truncated, dropped */
    uint64_t rx_no_session; /* for no session of ours, dropped */
    uint64_t rx_stale;      /* for an old request, dropped */
    uint64_t rx_dup;        /* duplicates (answered again where idempotent) */
    uint64_t rx_reordered;  /* ahead of the expected packet, dropped */
    uint64_t retransmits;   /* go-back-N rollbacks */
    uint64_t handler_calls, rpcs_done, rpcs_failed;
    uint64_t sessions_refused;
    uint64_t cookies_sent;  /* connect requests answered with a cookie, no state kept */
    uint64_t bad_cookies;   /* connect requests with a wrong or stale cookie */
    uint64_t rx_auth_failed; /* secure: packets or handshakes that did not verify */
    uint64_t rx_replayed;    /* secure: packets whose counter was seen (or too old) */
};

/* ---- nexus ---- */

/* uri: "udp://HOST:PORT" or "sim://FABRIC/HOST:PORT", the base of endpoint ports. */
int erma_nexus_create(const char *uri, const struct erma_nexus_cfg *cfg,
                      struct erma_nexus **out);
/* Stops worker threads. Destroy every endpoint of the nexus first. */
void erma_nexus_destroy(struct erma_nexus *nx);
/* Registers fn for req_type before endpoints are created. ERMA_EINVAL if the
 * type is taken or workers are needed and cfg.workers is 0. */
int erma_register_handler(struct erma_nexus *nx, uint8_t req_type, erma_handler_fn fn,
                          enum erma_handler_mode mode, void *ctx);

/* ---- endpoint ---- */

/* cfg may be NULL for defaults. thread_id < ERMA_MAX_THREADS. */
int erma_rpc_create(struct erma_nexus *nx, uint8_t thread_id, const struct erma_rpc_cfg *cfg,
                    struct erma_rpc **out);
/* Fails every pending request with ERMA_ESESSRESET, then frees everything. */
void erma_rpc_destroy(struct erma_rpc *rpc);
/* One pass of the event loop: RX, timers, TX. Returns packets handled. */
int erma_rpc_run_once(struct erma_rpc *rpc);
/* Runs the event loop until done(ctx) is true (asked after every pass) or
 * timeout_ns of erma_now_ns() have passed; ERMA_OK when done, else
 * ERMA_ETIMEDOUT. done may be NULL: run for timeout_ns. When idle the loop
 * sleeps (cfg.idle_wait_ns, cfg.busy_poll) until a packet or its next timer,
 * at most ERMA_IDLE_SLEEP_MAX_NS, so a done() that another thread makes true
 * is seen within that. Typical client use:
 *   erma_enqueue_request(rpc, sess, TYPE, &req, &resp, cont, &answered);
 *   erma_rpc_run_until(rpc, flag_set, &answered, 1000000000);  */
int erma_rpc_run_until(struct erma_rpc *rpc, bool (*done)(void *ctx), void *ctx,
                       uint64_t timeout_ns);
/* erma_rpc_run_until(rpc, NULL, NULL, ns): runs the loop for ns. */
void erma_rpc_run(struct erma_rpc *rpc, uint64_t ns);
/* The erma_now_ns() time at which this endpoint next has timer work. */
uint64_t erma_rpc_next_timer(const struct erma_rpc *rpc);
void erma_rpc_get_stats(const struct erma_rpc *rpc, struct erma_rpc_stats *out);
/* The sessions x credits budget still free in the RX ring, in sessions. */
uint32_t erma_rpc_free_sessions(const struct erma_rpc *rpc);

/* ---- sessions ---- */

/* Starts connecting to endpoint remote_tid of the nexus at remote_uri.
 * Returns the session number (>= 0) at once; ERMA_SM_CONNECTED or
 * ERMA_SM_CONNECT_FAILED follows. Requests may be enqueued immediately: they
 * wait for the connection (and fail with it). ERMA_ENOSLOTS when this
 * endpoint's RX ring cannot take another session's credits. */
int erma_create_session(struct erma_rpc *rpc, const char *remote_uri, uint8_t remote_tid);
/* The same, with the session's own credits: the packets it may have in
 * flight, from 1 to the endpoint's cfg.credits (0: those). A session that
 * carries bulk messages (a long scan's response, say) with few credits
 * keeps few of its packets queued ahead of other sessions' small requests
 * in both event loops, at some cost to its own throughput (bench/kv_scan:
 * 2 credits took point-GET p99 beside 10^4-key scans from 10x to 1.3x of
 * quiet). ERMA_EINVAL past cfg.credits. */
int erma_create_session_credits(struct erma_rpc *rpc, const char *remote_uri,
                                uint8_t remote_tid, uint32_t credits);
/* Disconnects; pending requests complete with ERMA_ECANCELLED. */
int erma_destroy_session(struct erma_rpc *rpc, int session);
bool erma_session_connected(const struct erma_rpc *rpc, int session);

/* ---- messages ---- */

int erma_alloc_msgbuf(struct erma_rpc *rpc, size_t max_size, struct erma_msgbuf *out);
void erma_free_msgbuf(struct erma_rpc *rpc, struct erma_msgbuf *mb);
/* Sets mb->size; ERMA_E2BIG past max_size. */
int erma_resize_msgbuf(struct erma_msgbuf *mb, size_t size);

int erma_enqueue_request(struct erma_rpc *rpc, int session, uint8_t req_type,
                         struct erma_msgbuf *req, struct erma_msgbuf *resp, erma_cont_fn cont,
                         void *tag);

const uint8_t *erma_req_data(const struct erma_req *req);
size_t erma_req_size(const struct erma_req *req);
uint8_t erma_req_type(const struct erma_req *req);
struct erma_rpc *erma_req_rpc(const struct erma_req *req);
/* Writes the URI of the endpoint that sent req (its address as this
 * endpoint's transport sees it: what a one-sided key is bound to,
 * erma_region_export_uri()) into out; ERMA_EINVAL when out is too short.
 * Like the other erma_req_ calls, from the thread the handler runs on. */
int erma_req_peer_uri(const struct erma_req *req, char *out, size_t len);
/* The preallocated response buffer: max_size is one packet of data. */
struct erma_msgbuf *erma_req_resp_buf(struct erma_req *req);
/* Sends resp as the response to req; from the event loop's thread, or from
 * the worker thread that runs a worker-mode handler. */
int erma_enqueue_response(struct erma_req *req, struct erma_msgbuf *resp);

/* ---- congestion control ---- */

/* Per client session: Timely's rate from per-packet RTTs (the time from
 * sending a packet to its credit return or response), and packets paced
 * through the endpoint's Carousel timing wheel while below line rate. */
struct erma_session_cc {
    double rate_bps, avg_rtt_ns;
    uint64_t last_rtt_ns, min_rtt_ns;
    uint64_t rtt_samples, timely_updates, timely_bypasses;
    uint64_t paced_pkts, direct_pkts;
};

int erma_session_cc_stats(const struct erma_rpc *rpc, int session, struct erma_session_cc *out);
int erma_rpc_set_cc(struct erma_rpc *rpc, const struct erma_cc_switches *sw);

/* ---- sibling protocols ---- */

/* Another protocol served by the endpoint's event loop (the one-sided RMA
 * engine uses this). rx gets every valid packet whose header proto matches,
 * in the RX buffer (valid until rx returns); poll runs once per event-loop
 * pass after RX and returns the work it did; next_timer gives the
 * erma_now_ns() time it next needs a poll (UINT64_MAX: none); flush (may be
 * NULL) runs at the start of each pass, before the RX burst, to send what
 * the application queued since the last pass without waiting for RX. */
struct erma_hdr;
struct erma_rx_pkt;
struct erma_proto_hook {
    void (*rx)(void *ctx, const struct erma_hdr *h, const struct erma_rx_pkt *pkt);
    int (*poll)(void *ctx, uint64_t now_ns);
    uint64_t (*next_timer)(void *ctx);
    void *ctx;
    void (*flush)(void *ctx);
};

/* Attaches hook for proto (ERMA_PROTO_RMA); NULL detaches. One per proto. */
int erma_rpc_attach(struct erma_rpc *rpc, uint8_t proto, const struct erma_proto_hook *hook);
/* The endpoint's transport (shared TX/RX queue; use from its thread only). */
struct erma_transport *erma_rpc_transport(struct erma_rpc *rpc);
/* Writes the URI of endpoint tid of the nexus at base (port + tid; port 0
 * stays 0, a free port) into out; ERMA_EADDR when base is malformed or out
 * too short. */
int erma_endpoint_uri(const char *base, uint8_t tid, char *out, size_t len);
/* Writes the URI this endpoint listens on, its real port included (for a
 * nexus on port 0), into out; ERMA_EINVAL when out is too short. */
int erma_rpc_uri(const struct erma_rpc *rpc, char *out, size_t len);
/* The endpoint's thread id within its nexus. */
uint8_t erma_rpc_thread_id(const struct erma_rpc *rpc);

/* ---- simulation ---- */

struct erma_sim;
/* Steps the endpoints round-robin on sim's virtual clock (which it installs)
 * until done(ctx) is true or duration_ns of virtual time pass, advancing
 * time to the next packet or timer event when every endpoint is idle.
 * Returns ERMA_OK when done, ERMA_ETIMEDOUT when time ran out. */
int erma_sim_run_rpcs(struct erma_sim *sim, struct erma_rpc **rpcs, unsigned n,
                      uint64_t duration_ns, bool (*done)(void *ctx), void *ctx);

ERMA_END_DECLS

#endif
