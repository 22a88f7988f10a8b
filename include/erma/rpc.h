/*
 * erma/rpc.h - eRPC-style remote procedure calls.
 *
 * For applications (included by erma/erma.h).
 *
 * Quick start (check each int returned; apps/hello/hello.c runs this):
 *   server:  erma_nexus_create(NULL, &nx);
 *            erma_handler_register(nx, 1, on_req, ERMA_DISPATCH, NULL);
 *            erma_endpoint_create("udp://127.0.0.1:31850", 0, NULL, &ep);
 *            erma_rpc_create(nx, ep, NULL, &rpc);
 *            erma_endpoint_run_until(ep, stopped, NULL, UINT64_MAX);
 *   on_req(req, ctx): write erma_req_resp_buf(req), erma_req_respond() it
 *   client:  its own nexus, endpoint ("udp://127.0.0.1:0": any port), rpc;
 *            int s = erma_session_create(rpc, "udp://127.0.0.1:31850", 0);
 *            erma_msgbuf_alloc(rpc, 64, &req); erma_msgbuf_alloc(rpc, 64, &resp);
 *            erma_rpc_call(rpc, s, 1, &req, &resp, on_resp, &done);
 *            erma_endpoint_run_until(ep, is_done, &done, 1000000000);
 *   on_resp(rpc, tag, status, resp): status ERMA_OK or why not; set done
 *   end:     erma_msgbuf_free() both, erma_rpc_destroy, erma_endpoint_destroy,
 *            erma_nexus_destroy (the protocol before its endpoint).
 *
 * Objects
 *   erma_nexus   one per process (or per simulated host): the request-handler
 *                registry, the worker threads that run worker-mode handlers
 *                and, optionally, the key that authenticates every session.
 *   erma_rpc     the RPC protocol on an endpoint (erma/endpoint.h): one per
 *                user thread, with its sessions, running in the endpoint's
 *                loop. Not thread-safe: only the endpoint's thread calls it
 *                (worker handlers excepted, see erma_req_respond).
 *   session      a client/server pair of endpoints, named by a small integer
 *                on each side. ERMA_SESSION_SLOTS requests are in flight per
 *                session; more queue transparently and start as slots free.
 *                Requests complete in any order.
 *   erma_msgbuf  a message buffer from erma_msgbuf_alloc(), up to
 *                ERMA_MAX_MSG_SIZE (8 MiB). Its data is contiguous; erma keeps
 *                the packet headers around it, so messages go out without
 *                copying.
 *
 * A client calls erma_rpc_call() on a session and gets the response in a
 * continuation; a server registers handlers on its nexus and answers each
 * request with erma_req_respond(). The concepts that many calls share are
 * described once, beside the declarations they concern:
 *   Wire protocol, Virtual paths    above struct erma_rpc_cfg
 *   Budgets                         above erma_rpc_recv_held()
 *   Session management              at the head of the session calls
 *   Calls: client                   on erma_rpc_call()
 *   Calls: server                   at the head of the erma_req_ calls
 *
 * All functions return ERMA_OK or a negative erma_err code unless noted.
 */
#ifndef ERMA_RPC_H
#define ERMA_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "erma/api.h"
#include "erma/endpoint.h"
#include "erma/errors.h"

ERMA_BEGIN_DECLS

#define ERMA_SESSION_SLOTS 8
#define ERMA_MAX_CREDITS 32

struct erma_nexus;
struct erma_rpc;
struct erma_timely_cfg;
struct erma_req;

struct erma_msgbuf {
    uint8_t *data;     /* the message bytes */
    uint32_t size;     /* bytes of the message */
    uint32_t max_size; /* capacity; erma_msgbuf_resize() moves size within it */
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
    /* err: ERMA_EREFUSED (no room at the server), ERMA_ETIMEDOUT (no
     * answer within cfg.connect_timeout_ns), ERMA_ENOENT (no endpoint
     * remote_tid there), ERMA_EAUTH (not the same key, erma_nexus_cfg.psk),
     * ERMA_ENOMEM (the server had no memory for a secure session) */
    ERMA_SM_CONNECT_FAILED,
    ERMA_SM_DISCONNECTED,   /* erma_session_destroy() completed */
    ERMA_SM_PEER_FAILED,    /* the peer stopped answering or restarted; the session ended */
    /* cfg.reconnect: the peer was lost (err ERMA_EPEERFAILED), the session
     * connects again under the same number */
    ERMA_SM_RECONNECTING,
    ERMA_SM_RECONNECTED,    /* cfg.reconnect: the session is connected again */
};

/* What a client session does when its server is lost (cfg.reconnect;
 * Session lifecycle below). */
enum erma_reconnect {
    ERMA_RECONNECT_OFF,   /* the session ends (default) */
    ERMA_RECONNECT_FAIL,  /* it reconnects; calls meanwhile return ERMA_EAGAIN */
    ERMA_RECONNECT_QUEUE, /* it reconnects; calls meanwhile wait for it, up to
                             cfg.reconnect_queue, then ERMA_EAGAIN */
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
     * or neither: else a connect fails with ERMA_EAUTH, in about one
     * connect_retry_ns (not connect_timeout_ns), and the server counts it
     * (stats.rx_auth_failed) and warns once. The server's "auth failed" is
     * unauthenticated, so the client believes it only once two of its
     * connect requests drew one and a retry interval passed with no proven
     * accept: a forger racing the server cannot fail a good connect
     * (docs/PROTOCOL.md, Secure sessions). It is a group key: any holder
     * can read sessions it recorded (docs/PROTOCOL.md, limits). */
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

/*
 * Wire protocol (docs/PROTOCOL.md): client-driven, with at most `credits`
 * unacknowledged packets per session; the server answers each non-last
 * request packet with a credit return and the last with the first response
 * packet; the client pulls further response packets with
 * request-for-response packets; packets that come out of order are kept
 * (selective acknowledgement: each reply acknowledges its own packet);
 * only the packets without a reply are sent again, once replies to three
 * later packets came (fast retransmit), else after the session's
 * retransmission timeout (below; cfg.go_back_n brings back eRPC's
 * go-back-N, for comparisons).
 *
 * Busy hosts: a server puts in each credit return and response how long
 * the packet it answers spent inside its host (from the kernel's receive
 * stamp on udp to the answer: queued behind a busy or descheduled loop,
 * and the handler; without a stamp, from when the loop last looked at its
 * socket, so that a loop an application blocks between passes, with a disk
 * sync say, counts that time too). The client takes that and its own such delay out of
 * each round trip: Timely and the virtual paths see only what is left,
 * the network's part, so a busy host is not taken for a congested network
 * (its load is bounded by credits instead). A loop descheduled where no
 * stamp sees it still delays packets by a time slice: while a host on the
 * path queues packets for more than Timely's t_low (the client's own wait,
 * a credit return's host delay), and for 20 ms after, samples at or above
 * t_low stay out of Timely (erma_session_cc.busy_samples counts them). The
 * retransmission timeout comes from the whole round trips, host delays
 * in: the larger of cfg.rto_ns (the floor), srtt + 4 x rttvar (RFC 6298)
 * and twice the longest round trip lately (halved every 100 ms), at most
 * 32 x cfg.rto_ns, doubled per timeout in a row up to 64 x cfg.rto_ns.
 * A timeout whose packet turns out to have
 * been answered the first time (its answer says it waited in the server
 * since before the copy was sent) counts in stats.spurious_timeouts, and
 * its round trip raises the timeout; no timeout slows the session down.
 *
 * Virtual paths: on endpoints opened with erma_endpoint_cfg.paths = K > 1
 * (both ends; a session takes the smaller K), a session spreads its
 * packets over K UDP port pairs, which ECMP routers hash onto different
 * routes. Each packet goes on the path with the fewest packets out (the
 * one whose reply just came among equals); a path whose loss or delay
 * stands out is pruned and probed again later
 * (stats.paths_pruned); details in docs/PROTOCOL.md.
 */
struct erma_rpc_cfg {
    uint32_t credits;          /* per session, default and most ERMA_MAX_CREDITS (32);
                                  sessions x credits fit the endpoint's RX ring */
    uint64_t rto_ns;           /* resend timeout's floor, default 5 ms (Busy hosts above) */
    uint64_t failure_ns;       /* peer declared dead after this silence, default 500 ms */
    uint64_t keepalive_ns;     /* ping an idle peer this often, default failure_ns / 5 */
    uint64_t connect_retry_ns; /* first resend of a connect request, default 20 ms;
                                  each later one waits twice as long, at most 32x */
    uint64_t connect_timeout_ns; /* give up connecting after this, default 3 s */
    uint32_t max_sessions_per_peer; /* server sessions one address may hold, default 64 */
    uint64_t req_timeout_ns;   /* fail a request after this long, 0 (default) = never */
    /* Session tokens; 0 = from the clock. A fixed seed repeats the tokens
     * of the last life of a restarted endpoint at the same address, which a
     * server still holding those sessions takes for the old client: its
     * requests are dropped as stale. Fix seeds only where runs must repeat
     * (the sim), and never across a restart. */
    uint64_t seed;
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
    /* Budgets for messages being received (Budgets below), in bytes: per
     * session (default 64 MiB: every slot one largest message), per client
     * address (default 64 MiB) and for the endpoint (default 512 MiB). */
    uint64_t recv_budget_session, recv_budget_peer, recv_budget;
    /* A partly received request with no new packet for this long is
     * dropped; default the larger of 2 x failure_ns and 128 x rto_ns (a
     * live client resends within 64 x rto_ns). */
    uint64_t recv_timeout_ns;
    /* eRPC's loss recovery, for comparisons (benchmarks, tests): each end
     * drops packets that arrive out of order (a server request packets, a
     * client replies past the first one missing), so a loss is found only
     * by the timeout and everything after it goes again; no fast
     * retransmit. Set it on both ends. Default off: selective
     * acknowledgement and fast retransmit (Wire protocol above). */
    bool go_back_n;
    /* Automatic reconnect of client sessions whose server is lost (Session
     * lifecycle below): default ERMA_RECONNECT_OFF. A reconnect gives up
     * after reconnect_timeout_ns (default 30 s); in ERMA_RECONNECT_QUEUE
     * at most reconnect_queue requests (default 1024) wait meanwhile. */
    enum erma_reconnect reconnect;
    uint64_t reconnect_timeout_ns;
    uint32_t reconnect_queue;
};

struct erma_rpc_stats {
    uint64_t rx_bad;        /* malformed or truncated, dropped (the endpoint
                               counts packets, erma_endpoint_get_stats) */
    uint64_t rx_no_session; /* for no session of ours, dropped */
    uint64_t rx_stale;      /* for an old request, dropped */
    uint64_t rx_other_session; /* request number outside the session's: a late packet of
                                  an earlier session with the same number, dropped */
    uint64_t rx_dup;        /* duplicates (answered again where idempotent) */
    uint64_t rx_reordered;  /* taken out of order (kept: selective acknowledgement) */
    uint64_t retransmits;   /* timeouts that sent packets again */
    uint64_t retransmitted_pkts; /* packets sent again: only those without a reply */
    uint64_t fast_retransmits;  /* packets sent again before the timeout: replies to
                                   later ones came */
    uint64_t spurious_retransmits; /* of those, ones whose first reply came after all */
    uint64_t spurious_timeouts; /* timeouts whose first packet had been answered after all:
                                   the peer or this host was slow, nothing was lost */
    uint64_t paths_pruned;      /* virtual paths taken out of use for loss or delay */
    uint64_t handler_calls, rpcs_done, rpcs_failed;
    uint64_t sessions_refused;
    uint64_t cookies_sent;  /* connect requests answered with a cookie, no state kept */
    uint64_t bad_cookies;   /* connect requests with a wrong or stale cookie */
    uint64_t rx_auth_failed; /* secure: packets or handshakes that did not verify (a
                                server: connects refused ERMA_EAUTH among them) */
    uint64_t rx_replayed;    /* secure: packets whose counter was seen (or too old) */
    uint64_t recv_refused;   /* messages refused: a budget had no room (ERMA_ENOBUFS) */
    uint64_t recv_expired;   /* partly received requests dropped after recv_timeout_ns */
};

/*
 * Budgets: what a peer can make an endpoint hold. A request of more than
 * one packet needs a buffer for its bytes; the server reserves the size
 * its first packet declares and counts it against three budgets until the
 * handler runs (or the request is dropped): the session's
 * (cfg.recv_budget_session), the client address's over all its sessions
 * (cfg.recv_budget_peer) and the endpoint's (cfg.recv_budget). A request
 * that would exceed one is refused at once: its client gets ERMA_ENOBUFS
 * (stats.recv_refused), and nothing is kept. A request none of whose
 * packets came for cfg.recv_timeout_ns is dropped and its buffer freed; its
 * client, if it is still there, gets ERMA_ETIMEDOUT (stats.recv_expired).
 * A client counts the response buffers it must grow against the session's
 * and the endpoint's budgets too (ERMA_ENOBUFS for the call), so partial
 * requests that fill the endpoint's budget also refuse this endpoint's own
 * large responses until they go. One-packet requests are taken in the
 * receive buffer and need no budget. erma_rpc_recv_held() tells what is
 * held now. An address is the transport's (IP and port on udp): a host
 * with many ports has a budget per port, bounded by the endpoint's. The
 * budgets count message bytes; the buffer behind a message is its size
 * and 16 bytes per packet rounded up to a power of two (an 8 MiB message
 * takes a 16 MiB buffer), of which only the pages written become resident
 * (2 MiB at a time with transparent hugepages), unless hugepages are
 * reserved (/proc/sys/vm/nr_hugepages): then all of it is, up to twice
 * the budgets.
 */

/* Returns the bytes of messages being received that the endpoint holds
 * now (Budgets); 0 for a NULL rpc. */
uint64_t erma_rpc_recv_held(const struct erma_rpc *rpc);

/* ---- nexus ---- */

/* Creates a nexus with cfg.workers worker threads and, with cfg.psk, secure
 * sessions; cfg may be NULL: no workers, plaintext sessions. ERMA_OK;
 * ERMA_EINVAL for a NULL out; ERMA_ENOMEM, also when a worker thread cannot
 * start. */
int erma_nexus_create(const struct erma_nexus_cfg *cfg, struct erma_nexus **out);
/* Stops worker threads, wipes the key and frees nx (NULL is ignored).
 * Destroy every erma_rpc of the nexus first. Returns nothing. */
void erma_nexus_destroy(struct erma_nexus *nx);
/* Registers fn for req_type; fn gets ctx with every request (Calls,
 * server). mode says where it runs: ERMA_DISPATCH in the event loop,
 * ERMA_WORKER on a worker thread. Any time, from any thread, also while
 * the nexus's rpcs run on other threads: a request of the type that
 * arrives after the call returned gets fn; one before it got
 * ERMA_ENOHANDLER. A type is registered once, for the nexus's life;
 * registering the same fn, mode and ctx for it again changes nothing.
 * Returns ERMA_OK; ERMA_EINVAL if the type is taken (by another fn, mode
 * or ctx), nx or fn is NULL,
 * mode is unknown, or workers are needed and cfg.workers is 0. */
int erma_handler_register(struct erma_nexus *nx, uint8_t req_type, erma_handler_fn fn,
                          enum erma_handler_mode mode, void *ctx);

/* ---- the RPC protocol on an endpoint ---- */

/* Puts RPCs on ep, serving nx's handlers; cfg may be NULL for defaults.
 * Returns ERMA_OK; ERMA_EAGAIN when ep has an erma_rpc already;
 * ERMA_EINVAL for a NULL argument, more credits than ERMA_MAX_CREDITS or
 * the endpoint's RX ring, a cfg.timely that does not check out, or a
 * libsodium that cannot start; ERMA_ENOMEM. */
int erma_rpc_create(struct erma_nexus *nx, struct erma_endpoint *ep,
                    const struct erma_rpc_cfg *cfg, struct erma_rpc **out);
/* Fails every pending request with ERMA_ESESSRESET (their continuations
 * run now; an erma_rpc_call() from one returns ERMA_ESESSRESET), waits for
 * the requests still in worker handlers, then frees everything and
 * detaches from the endpoint. rpc may be NULL. Returns nothing. */
void erma_rpc_destroy(struct erma_rpc *rpc);
/* Returns the endpoint rpc runs on. */
struct erma_endpoint *erma_rpc_endpoint(const struct erma_rpc *rpc);
/* Returns the nexus rpc serves the handlers of (erma_rpc_create()). */
struct erma_nexus *erma_rpc_nexus(const struct erma_rpc *rpc);
/* Copies the protocol's counters (struct erma_rpc_stats) into *out.
 * Returns nothing. */
void erma_rpc_get_stats(const struct erma_rpc *rpc, struct erma_rpc_stats *out);
/* Returns the sessions x credits budget still free in the RX ring, in
 * sessions of cfg.credits each. */
uint32_t erma_rpc_free_sessions(const struct erma_rpc *rpc);

/* ---- sessions ---- */

/*
 * Session management (connect
 * with a credit grant, disconnect, keepalive, failure detection) travels
 * in-band over the same transport; its outcomes reach cfg.sm_handler as
 * enum erma_sm_event. Each session numbers its requests from
 * a start both ends derive from its token: a late packet of an earlier
 * session that had the same number is dropped (stats.rx_other_session),
 * never taken for a request or a response of the new one. A server takes
 * a slot's requests at most 2^16 ahead of the last it saw, so a session
 * one of whose slots gives up on 65,535 requests in a row without any
 * reply (cfg.req_timeout_ns, the server hearing none of them while it
 * answers keepalives) fails with ERMA_SM_PEER_FAILED.
 *
 * Session lifecycle (a client session; server sessions have no events):
 *
 *   erma_session_create -> CONNECTING --CONNECTED--> CONNECTED
 *   CONNECTING --CONNECT_FAILED--> ended
 *   CONNECTED --PEER_FAILED--> ended                   (cfg.reconnect off)
 *   CONNECTED --RECONNECTING--> CONNECTING again       (cfg.reconnect on)
 *             --RECONNECTED--> CONNECTED, or --CONNECT_FAILED--> ended
 *   erma_session_destroy: CONNECTED -> DISCONNECTING --DISCONNECTED--> ended;
 *                         CONNECTING -> ended, DISCONNECTED from inside the call
 *
 * An ended session's number is free from its event on: erma_rpc_call()
 * and erma_session_destroy() on it return ERMA_ENOENT (there is nothing
 * to destroy), and the next erma_session_create(), even one from the
 * event's handler, may be given the number again: forget it at the event.
 * Across RECONNECTING the number stays the session's, and
 * erma_session_destroy() on it ends the reconnect (DISCONNECTED at once).
 *
 * Failures (defaults: connect_retry_ns 20 ms, connect_timeout_ns 3 s,
 * failure_ns 500 ms, keepalive_ns 100 ms, reconnect_timeout_ns 30 s):
 *   what                     event, err                after
 *   server refuses           CONNECT_FAILED, ERMA_EREFUSED / ERMA_ENOENT /
 *                            ERMA_ENOMEM               a round trip
 *   no answer to connects    CONNECT_FAILED, ERMA_ETIMEDOUT
 *                                                      connect_timeout_ns
 *   one end has another psk  CONNECT_FAILED, ERMA_EAUTH
 *     (or none)                                        ~ connect_retry_ns
 *   server silent (dead)     PEER_FAILED or RECONNECTING, ERMA_EPEERFAILED
 *                                                      failure_ns of silence
 *   server restarted         the same; without a psk once it answers the
 *                            keepalive ping that follows keepalive_ns of
 *                            silence with a reset (~ keepalive_ns); with
 *                            one only after failure_ns (a reset is
 *                            unauthenticated, so only silence counts)
 *   reconnect gives up       CONNECT_FAILED, ERMA_ETIMEDOUT after
 *                            reconnect_timeout_ns; a refusal at once
 *   erma_session_destroy     DISCONNECTED, ERMA_OK (ERMA_ETIMEDOUT: the
 *                            server did not confirm within failure_ns)
 * A secure client that a server refused without proof for another reason
 * than the key (ERMA_EREFUSED, say: unproven, so only a hint) reports that
 * refusal only at connect_timeout_ns (erma_nexus_cfg.psk).
 *
 * Order: the event comes first, then, later in the same loop pass, the
 * continuations of the requests it failed, with the event's err
 * (ERMA_EPEERFAILED, or the connect's code: an ERMA_ETIMEDOUT that
 * follows CONNECT_FAILED on its session is the connect's, not
 * cfg.req_timeout_ns). erma_session_destroy() of a connected session
 * fails its requests (ERMA_ECANCELLED) in the next loop pass and
 * DISCONNECTED comes once the server confirmed.
 *
 * What next. Reconnect off: the application creates a new session when it
 * wants one, and calls again what it may repeat. On (cfg.reconnect): it
 * need do nothing; erma connects again under a new token, sending connect
 * requests at connect_retry_ns doubling to 32 x connect_retry_ns (640 ms)
 * until reconnect_timeout_ns, so a server that is back is found within
 * about 32 x connect_retry_ns. No request goes again on the new session: those
 * on the session's slots when it was lost may have run and fail with
 * ERMA_EPEERFAILED (call again what may be repeated). With
 * ERMA_RECONNECT_QUEUE the requests not yet sent (waiting for a slot)
 * wait for the new session, and erma_rpc_call() adds more while the
 * session has fewer than cfg.reconnect_queue waiting (else ERMA_EAGAIN);
 * they go once RECONNECTED, or fail with CONNECT_FAILED's code. With
 * ERMA_RECONNECT_FAIL every pending request fails with ERMA_EPEERFAILED
 * and erma_rpc_call() returns ERMA_EAGAIN until RECONNECTED. A session
 * whose first connect fails is not reconnected: CONNECT_FAILED ends it.
 */

/* Starts connecting to endpoint remote_tid of the base URI remote_uri.
 * Returns the session number (>= 0) at once, or an error code; ERMA_SM_CONNECTED or
 * ERMA_SM_CONNECT_FAILED follows. Requests may be enqueued immediately: they
 * wait for the connection (and fail with it). ERMA_ENOSLOTS when this
 * endpoint's RX ring cannot take another session's credits; ERMA_EADDR
 * when remote_uri is malformed or does not resolve; ERMA_EINVAL for a NULL
 * argument or remote_tid >= ERMA_MAX_THREADS; ERMA_ENOMEM when no session
 * can be allocated. */
int erma_session_create(struct erma_rpc *rpc, const char *remote_uri, uint8_t remote_tid);
/* The same, with the session's own credits: the packets it may have in
 * flight, from 1 to the endpoint's cfg.credits (0: those). A session that
 * carries bulk messages (a long scan's response, say) with few credits
 * keeps few of its packets queued ahead of other sessions' small requests
 * in both event loops, at some cost to its own throughput (bench/kv_scan:
 * 2 credits took point-GET p99 beside 10^4-key scans from 10x to 1.3x of
 * quiet). ERMA_EINVAL past cfg.credits. */
int erma_session_create_credits(struct erma_rpc *rpc, const char *remote_uri,
                                uint8_t remote_tid, uint32_t credits);
/* Disconnects a client session; pending requests complete with
 * ERMA_ECANCELLED, and ERMA_SM_DISCONNECTED follows (at once for a
 * session still connecting or reconnecting). Returns ERMA_OK; ERMA_ENOENT
 * for no such client session (one that ended: Session lifecycle), or one
 * already disconnecting. */
int erma_session_destroy(struct erma_rpc *rpc, int session);
/* Returns true while session is connected (false while it connects or
 * reconnects, after it ended, or for no such session). */
bool erma_session_connected(const struct erma_rpc *rpc, int session);

/* ---- messages ---- */

/* Allocates a message buffer of max_size bytes (size starts at max_size)
 * from the endpoint's pool. Returns ERMA_OK; ERMA_E2BIG past
 * ERMA_MAX_MSG_SIZE; ERMA_ENOMEM; ERMA_EINVAL for a NULL argument. On
 * failure *out is cleared (when out is not NULL). */
int erma_msgbuf_alloc(struct erma_rpc *rpc, size_t max_size, struct erma_msgbuf *out);
/* Gives mb's memory back and clears *mb; a cleared or NULL mb is ignored.
 * Not for a buffer erma holds (a request or response in flight). Returns
 * nothing. */
void erma_msgbuf_free(struct erma_rpc *rpc, struct erma_msgbuf *mb);
/* Sets mb->size. Returns ERMA_OK; ERMA_E2BIG past max_size (size
 * unchanged); ERMA_EINVAL for a NULL or unallocated buffer. */
int erma_msgbuf_resize(struct erma_msgbuf *mb, size_t size);

/*
 * Calls, client. Queues a request of type req_type with req's bytes on
 * session (a connecting one too: it waits for the connection); at most
 * ERMA_SESSION_SLOTS are in flight per session, the rest wait their turn.
 * cont(rpc, tag, status, resp) runs later in the event loop,
 * exactly once, with status ERMA_OK and the response in resp, or a
 * negative code and resp->size == 0:
 *   ERMA_EPEERFAILED  the server stopped answering (failure timeout) or
 *                     restarted; the request may have run (Session
 *                     lifecycle: never sent again, also with cfg.reconnect)
 *   ERMA_ESESSRESET   the session was disconnected or reset locally
 *   ERMA_ECANCELLED   erma_session_destroy() while the request was pending
 *   ERMA_ETIMEDOUT    cfg.req_timeout_ns passed without a response, the
 *                     server dropped the partly received request (Budgets),
 *                     or the session's connect (or reconnect) timed out:
 *                     then ERMA_SM_CONNECT_FAILED came first
 *   ERMA_E2BIG        the response did not fit in ERMA_MAX_MSG_SIZE
 *   ERMA_ENOMEM       no buffer memory for the response (or, at the
 *                     server, for the request)
 *   ERMA_ENOBUFS      the server (or this endpoint, for a large response)
 *                     had no room for the message in its budget; try later
 *   ERMA_ENOHANDLER   the server has no handler for the type (it logs the
 *                     first such request of each type)
 *   ERMA_EREFUSED, ERMA_ENOENT, ERMA_EAUTH
 *                     the session's connect failed so (ERMA_SM_CONNECT_FAILED)
 * resp is grown (reallocated) when the response is larger than its
 * capacity. req and resp belong to erma until cont runs: do not free,
 * resize or reuse them for another request meanwhile. From cont on they
 * are the caller's again: no packet refers to them any more (continuations
 * run after the loop pass's send), so cont may free them, or re-issue a
 * call with the same req and resp (resp may have grown), on this or
 * another session of this rpc: a closed loop needs no new buffers.
 * When its request leaves: while the application calls one at a time from
 * outside the loop (the last pass that followed calls followed one), the
 * first call after a pass sends at once (a closed-loop client waits for no
 * pass); later calls before the next pass, calls of an application that
 * calls in bursts, and calls from continuations and handlers go in the
 * pass's batch (one system call for a burst).
 * Returns ERMA_OK once queued; otherwise cont never runs: ERMA_ENOENT for
 * no such client session (a server session's number, or one that ended or
 * is disconnecting); ERMA_EAGAIN while the session reconnects and
 * cfg.reconnect does not let it wait (Session lifecycle);
 * ERMA_EINVAL for a NULL argument or cont, a buffer not
 * allocated (or freed), req and resp the same buffer, req->size past its
 * max_size, or a req from an rpc of another packet size (pass buffers of
 * this rpc's erma_msgbuf_alloc()); ERMA_ESESSRESET while
 * erma_rpc_destroy() runs (from a continuation it runs); ERMA_ENOMEM.
 */
int erma_rpc_call(struct erma_rpc *rpc, int session, uint8_t req_type,
                         struct erma_msgbuf *req, struct erma_msgbuf *resp, erma_cont_fn cont,
                         void *tag);

/*
 * Calls, server. A handler registered for a request type gets an erma_req. It
 * answers with erma_req_respond(req, resp), now or later (e.g. from the
 * continuation of a nested RPC), where resp is erma_req_resp_buf(req)
 * (preallocated, one packet of data) or a msgbuf of its own, which erma
 * frees once the response has been delivered. req and its data stay valid
 * until then. A one-packet request reaches a dispatch handler in the
 * receive buffer (no copy): a handler that returns without answering must
 * call erma_req_data() again afterwards (erma has moved the bytes into a
 * buffer of its own; NULL if it had no memory for them). A request a
 * handler holds does not hold its slot: when the client gives up on it
 * and sends another on that slot, or the session ends, the held request's
 * answer is dropped, never delivered to another request.
 * Dispatch-mode handlers run in the event loop and must not block;
 * worker-mode handlers run on the nexus's worker threads. A request is
 * executed at most once, whatever the network does. The erma_req_ calls
 * are made from the thread the handler runs on.
 */

/* Returns the request's bytes (see above: call it again after the handler
 * returned without answering; NULL then if erma had no memory for them). */
const uint8_t *erma_req_data(const struct erma_req *req);
/* Returns the request's size in bytes. */
size_t erma_req_size(const struct erma_req *req);
/* Returns the request type the client gave erma_rpc_call(). */
uint8_t erma_req_type(const struct erma_req *req);
/* Returns the erma_rpc that received req. */
struct erma_rpc *erma_req_rpc(const struct erma_req *req);
/* Writes the URI of the endpoint that sent req (its address as this
 * endpoint's transport sees it: what a one-sided key is bound to,
 * erma_region_export_uri()) into out. Returns ERMA_OK; ERMA_EINVAL for a
 * NULL req or when out is too short. Like the other erma_req_ calls, from
 * the thread the handler runs on. */
int erma_req_peer_uri(const struct erma_req *req, char *out, size_t len);
/* Returns the preallocated response buffer: max_size is one packet of
 * data. */
struct erma_msgbuf *erma_req_resp_buf(struct erma_req *req);
/* Sends resp as the response to req; from the event loop's thread, or from
 * the worker thread that runs a worker-mode handler. resp is
 * erma_req_resp_buf(req) or a msgbuf of this rpc's: erma takes the latter
 * (*resp is cleared) and frees it once delivered. Returns ERMA_OK (the
 * response is on its way: a lost client simply never gets it); ERMA_EINVAL
 * for a NULL argument, when req was answered already, or resp is not
 * allocated, from an rpc of another packet size or its size past its
 * max_size. */
int erma_req_respond(struct erma_req *req, struct erma_msgbuf *resp);

/* ---- congestion control ---- */

/* Per client session: Timely's rate from per-packet RTTs (the time from
 * sending a packet to its credit return or response), and packets paced
 * through the endpoint's Carousel timing wheel while below line rate. */
struct erma_session_cc {
    double rate_bps, avg_rtt_ns;
    uint64_t last_rtt_ns, min_rtt_ns;
    uint64_t rtt_samples, timely_updates, timely_bypasses;
    uint64_t paced_pkts, direct_pkts;
    uint64_t busy_samples; /* samples left out of Timely: a host was busy (Busy hosts) */
};

/* Fills *out with client session's congestion-control state. Returns
 * ERMA_OK; ERMA_ENOENT for no such client session. */
int erma_session_cc_stats(const struct erma_rpc *rpc, int session, struct erma_session_cc *out);
/* Switches congestion control at run time (struct erma_cc_switches); with
 * sw->off every session is back at line rate at once. Returns ERMA_OK;
 * ERMA_EINVAL for a NULL argument. */
int erma_rpc_set_cc(struct erma_rpc *rpc, const struct erma_cc_switches *sw);

ERMA_END_DECLS

#endif
