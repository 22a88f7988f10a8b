/* Internal state of the RPC layer: the endpoint's (struct erma_rpc) and a
 * session's (struct session), each in named parts that say which files own
 * them; and the declarations of the files below the protocol's (msgbuf.c,
 * tx.c, budget.c, sessions.c) and of rx.c. seal.h, sm.h, client.h and
 * server.h declare the rest, one header per part. */
#ifndef ERMA_RPC_INTERNAL_H
#define ERMA_RPC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "common/ring.h"
#include "endpoint/proto.h"
#include "erma/sdk/cc.h"
#include "erma/sdk/rand.h"
#include "erma/rpc.h"
#include "seal.h"
#include "sm.h"

#define NO_SESSION 0xffffu
#define MAX_SESSIONS 65535u

/* ---- the nexus (nexus.c) ---- */

/* Registered at any time, from any thread, while loops read it: the
 * registration that claims a type writes ctx and mode, then publishes fn
 * (release); a loop that reads fn (acquire) sees them. */
struct handler {
    _Atomic(erma_handler_fn) fn;
    void *ctx;
    enum erma_handler_mode mode;
    _Atomic bool claimed;
};

struct worker {
    pthread_t thread;
    struct erma_mpsc queue; /* of struct erma_req * */
    struct erma_nexus *nx;
    /* An idle worker sleeps on wake; sleeping (under lock) tells the loop to
     * signal it. */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool sleeping;
};

struct erma_nexus {
    struct handler handlers[256];
    _Atomic uint64_t unhandled_logged[4]; /* a bit per request type, logged once */
    struct worker *workers;
    unsigned nworkers;
    _Atomic bool stop;
    bool secure;                 /* psk given: every session authenticated, encrypted */
    uint8_t psk[ERMA_PSK_BYTES];
};

/* ---- a server's request (server.c) ---- */

/* The server's view of one request: also the handle handlers get. It
 * belongs to its slot until a handler holds it past a new request on that
 * slot or past its session: then it is an orphan (slot NULL), kept only
 * until the handler answers, and its answer goes nowhere. */
struct erma_req {
    struct erma_rpc *rpc;
    struct session *sess;
    struct slot *slot;      /* NULL: an orphan */
    struct erma_addr peer;  /* its sender (its session's peer when it came) */
    struct erma_req *next;  /* the endpoint's free list */
    struct erma_req *all;   /* every request object of the endpoint */
    const uint8_t *data;    /* request bytes (RX buffer or own msgbuf) */
    uint32_t size;
    uint8_t type;
    bool owns_req;          /* req_buf holds the request */
    bool in_worker;         /* at a worker thread */
    bool held;              /* a handler holds it (worker, or dispatch answering later) */
    bool responded;
    struct erma_msgbuf req_buf;
    struct erma_msgbuf pre_resp; /* preallocated, one packet of data */
    struct erma_msgbuf *resp;    /* &pre_resp or &own_resp, set by erma_req_respond */
    struct erma_msgbuf own_resp; /* the handler's own response buffer */
    uint32_t resp_pkts;
    int err;                     /* the request failed before any handler ran */
    uint32_t charged;            /* bytes counted against the budgets (budget.c) */
    uint64_t progress_ns;        /* partly received: when its last new packet came */
    uint64_t rx_ns;              /* when its last packet came (deferred responses' delay) */
    struct erma_req *part_prev, *part_next; /* rpc's partly received requests */
};

/* ---- slots: a session's ERMA_SESSION_SLOTS requests in flight ---- */

/* A client slot's request (client_tx.c, client_rx.c). Its packets have one
 * index space: 0..req_pkts-1 are request packets, req_pkts.. are RFRs for
 * response packets 1... */
struct client_slot {
    uint8_t req_type;
    struct erma_msgbuf *req, *resp;
    erma_cont_fn cont;
    void *tag;
    uint32_t req_pkts, resp_pkts; /* resp_pkts 0 until the first response packet */
    uint32_t num_tx, num_rx;      /* packets sent / replies received without a gap */
    uint64_t rx_bits;             /* bit k: the reply to packet num_rx + k came (out of order) */
    uint64_t resend;              /* bit k: packet num_rx + k is to be sent again (lost) */
    uint64_t again;               /* bit k: packet num_rx + k was sent again already */
    uint64_t timed;               /* bit k: ... by a timeout (not a fast retransmit) */
    uint8_t backoff;              /* timeouts in a row: the timeout is the RTO << backoff */
    uint64_t waited_ns;           /* how long the last timeout waited (spurious ones' samples) */
    uint32_t charged;             /* a response buffer erma grew: bytes on the budgets */
    uint32_t unheard;             /* requests in a row given up on without a reply */
    uint64_t progress_ns, start_ns;
    uint32_t tx_ns[ERMA_MAX_CREDITS]; /* send time of packet i, mod 2^32 ns, at [i % 32] */
    uint8_t tx_path[ERMA_MAX_CREDITS]; /* the virtual path packet i went on, at [i % 32] */
};

/* A server slot's request (server.c). */
struct server_slot {
    uint32_t num_rx;     /* request packets received without a gap */
    uint64_t rx_bits;    /* bit k: request packet num_rx + k came (out of order) */
    struct erma_req *rq; /* the current request, NULL before the first */
};

/* A slot of a client session uses .client, of a server session .server. */
struct slot {
    uint64_t req_num; /* the current request's (sessions.c, session_token) */
    union {
        struct client_slot client;
        struct server_slot server;
    };
};

/* ---- sessions ---- */

/* A request waiting for a free slot of its client session (client_tx.c). */
struct backlog {
    struct backlog *next;
    uint8_t req_type;
    struct erma_msgbuf *req, *resp;
    erma_cont_fn cont;
    void *tag;
};

enum sess_role { CLIENT, SERVER };
enum sess_state { FREE, CONNECTING, CONNECTED, DISCONNECTING };

/* Session management's part (sm.c, sm_api.c, sm_rx.c, timers.c). */
struct sess_sm {
    uint32_t retries;     /* connect/disconnect requests resent, for backoff */
    uint64_t cookie;      /* client: the server's cookie, echoed in connect requests */
    uint8_t nonce[16];    /* secure client: its handshake nonce */
    int hint;             /* secure client: an unproven refusal, reported at the timeout */
    uint32_t auth_rejects; /* secure client: unproven ERMA_EAUTH answers to its requests */
    uint64_t auth_reject_ns, auth_reject_tx_ns; /* the first's time; the request of the last */
    struct sm_msg accept; /* secure server: its proven accept, resent to retries */
    uint64_t idle_ns;     /* server: silence after which the client is gone */
    uint64_t last_rx_ns;  /* the peer's last packet (rx.c too) */
    uint64_t last_tx_ns, start_ns;
    bool reconnecting;    /* client: connecting again after its server was lost */
};

/* A client session's requests (client_tx.c, client_rx.c). */
_Static_assert(ERMA_SESSION_SLOTS == 8, "sess_client.busy_mask has a bit per slot");
struct sess_client {
    uint32_t busy_idx;    /* in rpc->client.busy, while busy_mask is not 0 */
    struct backlog *backlog, *backlog_tail;
    uint32_t nbacklog;    /* requests in backlog */
    uint8_t rr;           /* round robin over slots */
    uint8_t busy_mask;    /* bit k: slot k has a request */
    uint8_t dupthresh;    /* replies to later packets that make one lost (fast resend) */
};

/* A client session's congestion control (client_tx.c paces, client_rx.c samples). */
struct sess_cc {
    struct erma_timely timely;
    uint64_t next_tx_ns;  /* pacing: when the next packet may leave */
    bool in_wheel;        /* the wheel holds this session's next packet */
    uint64_t min_rtt_ns;  /* smallest network RTT sample, from packets sent once */
    uint64_t rtt_samples, paced_pkts, direct_pkts;
    /* The retransmission timeout's estimate, from whole round trips (host
     * delays in): smoothed RTT and its mean deviation, and the longest
     * round trip lately (halved every RTO_STALL_HALF_NS since stall_at_ns). */
    uint64_t srtt_ns, rttvar_ns, stall_ns, stall_at_ns;
    /* A host on the path (this one or the server's) is busy until then:
     * one of its delays lately was above Timely's t_low (client_rx.c). */
    uint64_t busy_until_ns;
#define BUSY_HOLD_NS 20000000ull /* how long a busy host counts as busy */
    uint64_t busy_samples; /* samples Timely did not take for that */
};

struct session {
    uint16_t num, remote_num;
    uint8_t role, state, remote_tid;
    uint32_t credits, credits_max;
    uint64_t token;           /* chosen by the client, names the session on both ends */
    uint64_t base;            /* its first request number (sessions.c, req_base) */
    struct erma_addr peer;
    bool peer_counted;        /* server: counted in rpc->table.by_peer */
    uint64_t recv_held;       /* bytes of messages being received (budget.c) */
    struct seal seal;         /* secure sessions: keys and replay windows */
    uint8_t tx_path;          /* the path of the packet being sent (tx.c) */
    struct erma_paths ps;     /* virtual paths: the client's ports 0..ps.n-1 */
    struct sess_sm sm;
    struct sess_client client;
    struct sess_cc cc;
    struct slot slots[ERMA_SESSION_SLOTS];
};

/* Whether client slot sl of s holds a request: its bit in busy_mask. */
static inline bool erma__slot_busy(const struct session *s, const struct slot *sl)
{
    return (s->client.busy_mask >> (sl - s->slots)) & 1u;
}

/* ---- the endpoint's RPC state ---- */

struct peer_count {
    struct erma_addr addr;
    uint32_t n;         /* its sessions; 0: an empty entry */
    uint64_t recv_held; /* bytes of its messages being received (budget.c) */
};

/* Every session by number, server sessions by token and by peer (sessions.c). */
struct rpc_table {
    struct session **sessions;
    uint32_t n, cap, active;
    uint32_t ring_credits;      /* credits of the active sessions: at most the RX ring */
    uint16_t *free_nums;        /* stack of FREE session numbers */
    uint32_t nfree_nums;
    struct session **by_token;  /* server sessions by token, open addressing */
    uint32_t token_cap, token_len;
    struct peer_count *by_peer; /* server sessions per peer address, open addressing */
    uint32_t peer_cap, peer_len;
};

/* Client requests (client_tx.c, client_rx.c). */
struct rpc_client {
    struct session **busy;      /* sessions with requests in flight (room for all: sessions.c) */
    uint32_t nbusy;
    struct backlog *free_backlog;
};

/* Server requests (server.c, nexus.c). */
struct rpc_server {
    uint32_t in_workers; /* requests at worker threads (their answers do not wake the loop) */
    /* The next worker, round robin; the endpoint's own, as no counter that
     * every endpoint thread of the nexus writes is shared (from its tid). */
    unsigned next_worker;
    struct erma_req *free_reqs, *all_reqs; /* request objects (erma_req.next, .all) */
    struct erma_mpsc worker_done; /* struct erma_req * back from workers */
};

/* Congestion control: set up by rpc.c, used by client_tx.c and client_rx.c. */
struct rpc_cc {
    struct erma_timely_cfg timely_cfg;
    struct erma_wheel wheel;
};

/* Session management (sm_rx.c). */
struct rpc_sm {
    uint8_t cookie_key[16]; /* keys the connect cookies (crypto_shorthash) */
    uint64_t serial;        /* secure server: sessions accepted so far */
    bool auth_logged;       /* server: a connect that failed authentication was logged */
};

/* The scans of the loop's poll (rpc.c). */
struct rpc_timers {
    uint64_t next_scan_ns, scan_ns;       /* retransmission scan of the busy sessions */
    /* Session management scans every session: every sm_scan_ns while a
     * client session connects or disconnects (retries), else every
     * live_scan_ns (keepalives, silent peers, idle clients). */
    uint64_t next_sm_scan_ns, sm_scan_ns, next_live_scan_ns, live_scan_ns;
    uint32_t pending; /* client sessions connecting or disconnecting at the last scan,
                         or made so since */
};

/* What peers make the endpoint hold (budget.c). */
struct rpc_budget {
    uint64_t recv_held;         /* bytes of messages being received */
    struct erma_req *partial, *partial_tail; /* partly received requests, oldest
                                               progress first */
};

struct completion {
    erma_cont_fn cont;
    void *tag;
    int status;
    struct erma_msgbuf *resp;
};

/* Continuations run after the TX batch is flushed (tx.c). */
struct rpc_done {
    struct completion *list;
    unsigned n, cap;
};

struct erma_rpc {
    struct erma_nexus *nx;
    struct erma_endpoint *ep;  /* its transport queue, TX batch, clock and pool */
    struct erma_rpc_cfg cfg;
    uint32_t pkt_data;        /* data bytes per packet */
    bool secure;              /* the nexus's: read per packet, kept off the nexus's lines */
    struct erma_rand rng;
    struct erma_rpc_stats stats;
    bool destroying; /* erma_rpc_destroy() is failing what is pending */
    struct rpc_table table;
    struct rpc_client client;
    struct rpc_server server;
    struct rpc_cc cc;
    struct rpc_sm sm;
    struct rpc_timers timers;
    struct rpc_budget budget;
    struct rpc_done done;
};

/* ---- helpers of several files ---- */

/* Time from t to now, 0 when t is later (a callback refreshed the clock
 * while a scan still holds the pass's reading). */
static inline uint64_t since(uint64_t now, uint64_t t)
{
    return now > t ? now - t : 0;
}

static inline uint64_t bit(uint32_t k)
{
    return (uint64_t)1 << k;
}

/* Request numbers past a slot's current one that its server takes: the
 * client may have given up on requests none of whose packets came. */
#define REQ_AHEAD ((uint64_t)ERMA_SESSION_SLOTS << 16)

/* A CR's data: the server's num_rx (4 bytes) and rx_bits (8), little-endian. */
#define CR_ACK_LEN 12

/* Whether req_num lies outside s's request numbers, at most `ahead` past
 * the slot's current one: a late packet of an earlier session that had
 * s's number (sessions.c, req_base). */
static inline bool foreign(const struct session *s, const struct slot *sl, uint64_t req_num,
                           uint64_t ahead)
{
    return req_num < s->base || req_num > sl->req_num + ahead;
}

/* The header of a data-protocol packet. */
static inline void hdr_put(uint8_t *buf, uint8_t type, uint32_t msg_size, uint16_t dest,
                           enum erma_pkt_type pkt_type, uint32_t pkt_num, uint64_t req_num)
{
    const struct erma_hdr h = {.req_type = type, .msg_size = msg_size, .dest_session = dest,
                               .pkt_type = (uint8_t)pkt_type, .pkt_num = (uint16_t)pkt_num,
                               .req_num = req_num, .proto = ERMA_PROTO_RPC};
    erma_hdr_encode(&h, buf);
}

/* A host on s's path (this one or the server's) queued packets for more
 * than Timely's t_low at now: slow samples stay out of Timely for a while
 * (client_rx.c, host_busy). */
static inline void erma__host_busy(struct session *s, uint64_t now)
{
    s->cc.busy_until_ns = now + BUSY_HOLD_NS;
}

/* The host delay of an answer sent now to a packet received at rx_ns
 * (erma/sdk/wire.h, host_delay). */
static inline uint16_t erma__host_delay(const struct erma_rpc *rpc, uint64_t rx_ns)
{
    return erma_delay_encode(rx_ns && rx_ns < rpc->ep->now ? rpc->ep->now - rx_ns : 0);
}

/* Which of s's virtual paths a packet from a came on (its peer's port
 * path k), or -1: not s's peer. */
static inline int erma__session_path(const struct erma_rpc *rpc, const struct session *s,
                                     const struct erma_addr *a)
{
    if (s->ps.n <= 1)
        return erma_addr_eq(&s->peer, a) ? 0 : -1;
    return erma__ep_path_of(rpc->ep, &s->peer, s->ps.n, a);
}

/* ---- message buffers: [hdr 0][data ... max_size][hdr 1][hdr 2]...[hdr n-1] ---- */
static inline uint32_t erma__msg_pkts(uint32_t size, uint32_t pkt_data)
{
    return size <= pkt_data ? 1 : (size + pkt_data - 1) / pkt_data;
}

static inline uint8_t *erma__msg_hdr(const struct erma_msgbuf *mb, uint32_t k)
{
    return k == 0 ? mb->mem : mb->data + mb->max_size + (size_t)(k - 1) * ERMA_HDR_SIZE;
}

static inline void erma__msg_pkt_span(const struct erma_msgbuf *mb, uint32_t k,
                                      const uint8_t **data, uint32_t *len)
{
    const uint32_t off = k * mb->pkt_data;
    *data = mb->data + off;
    *len = mb->size - off < mb->pkt_data ? mb->size - off : mb->pkt_data;
}

/* ---- tx.c ---- */
/* Queues a packet to dst for the next flush, sealed there under s's keys
 * when s is a secure session (s NULL: in the clear). */
uint8_t *erma__tx_ctrl(struct erma_rpc *rpc, struct session *s, const struct erma_addr *dst,
                       uint32_t len);
/* A data packet with its own header, in the batch's room: returned for
 * the caller to write (ERMA_HDR_SIZE bytes); the flush may change it for
 * this packet alone (a response's host delay). */
uint8_t *erma__tx_data_own_hdr(struct erma_rpc *rpc, struct session *s,
                               const struct erma_addr *dst, const uint8_t *data,
                               uint32_t data_len);
void erma__tx_data(struct erma_rpc *rpc, struct session *s, const struct erma_addr *dst,
                   const uint8_t *hdr, const uint8_t *data, uint32_t data_len);
void erma__complete(struct erma_rpc *rpc, erma_cont_fn cont, void *tag, int status,
                    struct erma_msgbuf *resp);
void erma__run_completions(struct erma_rpc *rpc);

/* ---- budget.c: what a peer can make the endpoint hold (rpc.h, Budgets) ---- */
/* Counts bytes of a message being received against a session's held
 * bytes, its client address's (peer; NULL for a client session) and the
 * endpoint's, each within its budget; false, and nothing counted, when one
 * has no room. */
bool erma__budget_take(struct erma_rpc *rpc, uint64_t *session, uint64_t *peer, uint64_t bytes);
void erma__budget_give(struct erma_rpc *rpc, uint64_t *session, uint64_t *peer, uint64_t bytes);
/* rq is being received: it joins (or moves to the end of) the partial list. */
void erma__partial_touch(struct erma_rpc *rpc, struct erma_req *rq);
void erma__partial_remove(struct erma_rpc *rpc, struct erma_req *rq);
/* The first partial request whose last packet came before now - timeout. */
struct erma_req *erma__partial_stalled(const struct erma_rpc *rpc, uint64_t now);

/* ---- sessions.c: the session table ---- */
/* The session numbered num, NULL when there is none (or it is FREE). */
static inline struct session *erma__session_get(const struct erma_rpc *rpc, uint16_t num)
{
    if (num >= rpc->table.n)
        return NULL;
    struct session *s = rpc->table.sessions[num];
    return s && s->state != FREE ? s : NULL;
}
/* A new session numbered from the free stack (else the next number), in
 * no state yet; NULL when none is left or no memory. */
struct session *erma__session_alloc(struct erma_rpc *rpc, enum sess_role role);
/* Names s by token, and numbers its slots' requests from it. */
void erma__session_token(struct session *s, uint64_t token);
/* The table's part of a session's end: out of the token and peer tables,
 * its credits and keys gone, its number free. */
void erma__session_free(struct erma_rpc *rpc, struct session *s);
/* Whether the RX ring has room for credits more. */
bool erma__ring_has_room(const struct erma_rpc *rpc, uint32_t credits);
void erma__set_credits(struct erma_rpc *rpc, struct session *s, uint32_t credits);
/* The server session with token, whoever its peer (NULL: none). */
struct session *erma__token_find(const struct erma_rpc *rpc, uint64_t token);
int erma__token_insert(struct erma_rpc *rpc, struct session *s);
/* Server sessions from address a. */
uint32_t erma__peer_sessions(const struct erma_rpc *rpc, const struct erma_addr *a);
int erma__peer_add(struct erma_rpc *rpc, const struct erma_addr *a);
/* The held bytes of server sessions from address a, NULL if none. */
uint64_t *erma__peer_recv_held(struct erma_rpc *rpc, const struct erma_addr *a);
/* Opens a secure session's packet in place (shortening *len); false, and
 * counted, for a forgery or a replay. */
bool erma__session_open(struct erma_rpc *rpc, struct session *s, uint8_t *pkt, uint32_t *len);

/* ---- rx.c ---- */
/* The endpoint's receive hook (ctx: the struct erma_rpc). */
void erma__rx(void *ctx, const struct erma_hdr *h, const struct erma_rx_pkt *pkt);

#endif
