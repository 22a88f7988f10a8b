/* Internal state of the RPC layer, shared by the files of rpc/. */
#ifndef ERMA_RPC_INTERNAL_H
#define ERMA_RPC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include <sodium.h>

#include "common/ring.h"
#include "endpoint/proto.h"
#include "erma/cc.h"
#include "erma/rand.h"
#include "erma/rpc.h"

#define NO_SESSION 0xffffu
#define MAX_SESSIONS 65535u

struct handler {
    erma_handler_fn fn;
    void *ctx;
    enum erma_handler_mode mode;
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

/* Authenticated, encrypted sessions (seal.c). */
#define ERMA_PROOF_BYTES 16
#define ERMA_SEAL_OVERHEAD 24 /* counter (8) and tag (16) after the data */

/* One session's keys and windows, one per direction. */
struct seal {
    uint8_t tx[32], rx[32];
    crypto_aead_aes256gcm_state *tx_st, *rx_st; /* AES-GCM's expanded keys */
    uint64_t tx_ctr;         /* the last counter sent */
    uint64_t rx_top, rx_seen; /* highest counter opened; bit i: rx_top - i was */
    bool aes;                /* AES-256-GCM, else ChaCha20-Poly1305 */
    bool on;
};

bool erma_seal_aes_available(void);
/* The proof under label (below) of a session-management payload whose
 * proof field is zero: BLAKE2b keyed with the pre-shared key, 16 bytes. */
void erma_seal_proof(const uint8_t psk[ERMA_PSK_BYTES], const char *label, const uint8_t *payload,
                     size_t len, uint8_t out[ERMA_PROOF_BYTES]);
bool erma_seal_proof_ok(const uint8_t psk[ERMA_PSK_BYTES], const char *label,
                        const uint8_t *payload, size_t len, const uint8_t proof[ERMA_PROOF_BYTES]);
#define SEAL_CONNECT "erma connect" /* the client's connect request */
#define SEAL_ACCEPT "erma accept"   /* the server's CONNECT_RESP granting a session */
#define SEAL_REFUSE "erma refuse"   /* its CONNECT_RESP refusing one, to a proven client */
/* The session's keys from the accept payload (proof zeroed) both ends saw. */
int erma_seal_start(struct seal *k, const uint8_t psk[ERMA_PSK_BYTES], const uint8_t *accept,
                    size_t len, bool client, bool aes);
void erma_seal_end(struct seal *k);
/* Writes hdr, data encrypted, counter and tag to out; returns its length.
 * out may be hdr, with the data right after it: sealed in place. */
uint32_t erma_seal(struct seal *k, const uint8_t *hdr, const uint8_t *data, uint32_t len,
                   uint8_t *out);
/* Opens a sealed packet in place and shortens *len to header and data:
 * ERMA_EAGAIN for a counter the window has seen (a replay) or left behind,
 * ERMA_EAUTH for a forgery, ERMA_EBADPKT when too short. */
int erma_open(struct seal *k, uint8_t *pkt, uint32_t *len);

struct erma_nexus {
    struct handler handlers[256];
    struct worker *workers;
    unsigned nworkers;
    _Atomic unsigned next_worker;
    _Atomic bool stop;
    bool secure;                 /* psk given: every session authenticated, encrypted */
    uint8_t psk[ERMA_PSK_BYTES];
};

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
    struct erma_req *part_prev, *part_next; /* rpc's partly received requests */
};

struct slot {
    uint64_t req_num;
    bool busy;
    /* client */
    uint8_t req_type;
    struct erma_msgbuf *req, *resp;
    erma_cont_fn cont;
    void *tag;
    uint32_t req_pkts, resp_pkts; /* resp_pkts 0 until the first response packet */
    uint32_t num_tx, num_rx;      /* packets sent / replies received without a gap, in the
                                     slot's index space */
    uint64_t rx_bits;             /* bit k: the reply to packet num_rx + k came (out of order) */
    uint64_t resend;              /* bit k: packet num_rx + k is to be sent again (lost) */
    uint64_t again;               /* bit k: packet num_rx + k was sent again already */
    uint8_t backoff;              /* timeouts in a row: the timeout is rto_ns << backoff */
    uint32_t charged;             /* a response buffer erma grew: bytes on the budgets */
    uint32_t unheard;             /* requests in a row given up on without a reply */
    uint64_t progress_ns, start_ns;
    uint32_t tx_ns[ERMA_MAX_CREDITS]; /* send time of packet i, mod 2^32 ns, at [i % 32] */
    uint8_t tx_path[ERMA_MAX_CREDITS]; /* the virtual path packet i went on, at [i % 32] */
    /* server */
    uint32_t srv_rx;              /* request packets received without a gap */
    uint64_t srv_bits;            /* bit k: request packet srv_rx + k came (out of order) */
    struct erma_req *rq;          /* the current request, NULL before the first */
};

struct backlog {
    struct backlog *next;
    uint8_t req_type;
    struct erma_msgbuf *req, *resp;
    erma_cont_fn cont;
    void *tag;
};

enum sess_role { CLIENT, SERVER };
enum sess_state { FREE, CONNECTING, CONNECTED, DISCONNECTING };

/* Session management (session.c). */
enum sm_type {
    CONNECT_REQ = 1, CONNECT_RESP, DISCONNECT_REQ, DISCONNECT_RESP, PING, PONG, RESET,
    REQ_ERROR, /* server to client: the request in req_num failed with err */
    COOKIE,    /* server to client: send the connect request again with this cookie */
};

/* A session-management message: the payload after the header (docs/PROTOCOL.md). */
struct sm_msg {
    uint64_t token;
    uint16_t client_session, server_session;
    uint32_t credits;
    int32_t err;
    uint8_t server_tid;
    uint64_t req_num; /* REQ_ERROR: the request; CONNECT_REQ: the client's keepalive;
                         secure CONNECT_RESP: the server's session serial */
    uint64_t cookie; /* CONNECT_REQ: the server's cookie echoed (0: none yet) */
    uint8_t nonce[16]; /* secure CONNECT_REQ: the client's nonce */
    uint8_t proof[ERMA_PROOF_BYTES]; /* secure CONNECT_REQ (with a cookie), CONNECT_RESP */
    uint8_t flags;     /* SM_SECURE, SM_AES */
};

#define SM_SECURE 1 /* the sender's nexus has a pre-shared key */
#define SM_AES 2    /* CONNECT_REQ: the client can do AES-256-GCM; CONNECT_RESP: use it */
/* bits 4-6: virtual paths - 1; CONNECT_REQ: the client's, CONNECT_RESP: the session's */
#define SM_PATHS(n) ((uint8_t)(((n) - 1) << 4))
#define SM_PATHS_OF(flags) (1u + ((flags) >> 4 & 7u))

struct session {
    uint16_t num, remote_num;
    uint8_t role, state, remote_tid;
    uint32_t credits, credits_max;
    uint32_t busy_slots;      /* client: slots with a request; listed in rpc->busy if > 0 */
    uint32_t busy_idx;
    uint32_t sm_retries;      /* connect/disconnect requests resent, for backoff */
    uint64_t token;           /* chosen by the client, names the session on both ends */
    uint64_t base;            /* its first request number (erma_req_base of the token) */
    uint64_t recv_held;       /* bytes of messages being received (budget.c) */
    uint64_t cookie;          /* client: the server's cookie, echoed in connect requests */
    struct seal seal;         /* secure sessions: keys and replay windows */
    uint8_t nonce[16];        /* secure client: its handshake nonce */
    int hint;                 /* secure client: an unproven refusal, reported at the timeout */
    struct sm_msg accept;     /* secure server: its proven accept, resent to retries */
    bool peer_counted;        /* server: counted in rpc->by_peer */
    uint64_t idle_ns;         /* server: silence after which the client is gone */
    struct erma_addr peer;
    uint64_t last_rx_ns, last_tx_sm_ns, start_ns;
    struct backlog *backlog, *backlog_tail;
    struct erma_timely timely;
    uint64_t next_tx_ns;      /* pacing: when the next packet may leave */
    bool in_wheel;            /* the wheel holds this session's next packet */
    uint8_t rr;               /* round robin over slots */
    uint8_t dupthresh;        /* replies to later packets that make one lost (fast resend) */
    uint8_t tx_path;          /* the path of the packet being sent */
    struct erma_paths ps;     /* virtual paths: the client's ports 0..ps.n-1 */
    uint64_t min_rtt_ns;      /* smallest RTT sample, from packets sent once */
    uint64_t rtt_samples, paced_pkts, direct_pkts;
    struct slot slots[ERMA_SESSION_SLOTS];
};

struct peer_count {
    struct erma_addr addr;
    uint32_t n;         /* its sessions; 0: an empty entry */
    uint64_t recv_held; /* bytes of its messages being received (budget.c) */
};

struct completion {
    erma_cont_fn cont;
    void *tag;
    int status;
    struct erma_msgbuf *resp;
};

struct erma_rpc {
    struct erma_nexus *nx;
    struct erma_endpoint *ep;  /* its transport queue, TX batch, clock and pool */
    struct erma_rpc_cfg cfg;
    uint32_t pkt_data;        /* data bytes per packet */
    struct erma_rand rng;
    struct session **sessions;
    uint32_t nsessions, sessions_cap, active_sessions;
    uint32_t ring_credits; /* credits of the active sessions: at most the RX ring */
    uint16_t *free_nums;        /* stack of FREE session numbers */
    struct session **busy;      /* client sessions with requests in flight */
    uint32_t nbusy;
    uint32_t nfree_nums;
    struct session **by_token;  /* server sessions by token, open addressing */
    uint32_t token_cap, token_len;
    struct peer_count *by_peer; /* server sessions per peer address, open addressing */
    uint32_t peer_cap, peer_len;
    uint8_t cookie_key[16];     /* keys the connect cookies (crypto_shorthash) */
    uint64_t next_scan_ns, scan_ns;       /* retransmission scan of rpc->busy */
    uint64_t next_sm_scan_ns, sm_scan_ns; /* session-management scan of all sessions */
    uint64_t serial;          /* secure server: sessions accepted so far */
    uint32_t in_workers; /* requests at worker threads (their answers do not wake the loop) */
    struct erma_req *free_reqs, *all_reqs; /* request objects (erma_req.next, .all) */
    uint64_t recv_held;         /* bytes of messages being received (budget.c) */
    struct erma_req *partial, *partial_tail; /* partly received requests, oldest
                                               progress first (budget.c) */
    /* continuations run after the TX batch is flushed */
    struct completion *done;
    unsigned ndone, done_cap;
    struct backlog *free_backlog;
    struct erma_mpsc worker_done; /* struct erma_req * back from workers */
    struct erma_rpc_stats stats;
    /* congestion control */
    struct erma_timely_cfg timely_cfg;
    struct erma_wheel wheel;
    bool destroying; /* erma_rpc_destroy() is failing what is pending */
};

/* Time from t to now, 0 when t is later (a callback refreshed the clock
 * while a scan still holds the pass's reading). */
static inline uint64_t since(uint64_t now, uint64_t t)
{
    return now > t ? now - t : 0;
}

/* Which of s's virtual paths a packet from a came on (its peer's port
 * path k), or -1: not s's peer. */
static inline int erma_session_path(const struct erma_rpc *rpc, const struct session *s,
                                    const struct erma_addr *a)
{
    if (s->ps.n <= 1)
        return erma_addr_eq(&s->peer, a) ? 0 : -1;
    return erma_ep_path_of(rpc->ep, &s->peer, s->ps.n, a);
}

/* tx.c */
/* Queues a packet to dst for the next flush, sealed there under s's keys
 * when s is a secure session (s NULL: in the clear). */
uint8_t *erma_tx_ctrl(struct erma_rpc *rpc, struct session *s, const struct erma_addr *dst,
                      uint32_t len);
void erma_tx_data(struct erma_rpc *rpc, struct session *s, const struct erma_addr *dst,
                  const uint8_t *hdr, const uint8_t *data, uint32_t data_len);
void erma_complete(struct erma_rpc *rpc, erma_cont_fn cont, void *tag, int status,
                   struct erma_msgbuf *resp);
void erma_run_completions(struct erma_rpc *rpc);

/* msgbuf.c */
uint32_t erma_msg_pkts(uint32_t size, uint32_t pkt_data);
uint8_t *erma_msg_hdr(const struct erma_msgbuf *mb, uint32_t k);
void erma_msg_pkt_span(const struct erma_msgbuf *mb, uint32_t k, const uint8_t **data,
                  uint32_t *len);

/* session.c */

void erma_sm_send(struct erma_rpc *rpc, struct session *s, const struct erma_addr *dst,
                  enum sm_type type, uint16_t dest_session, const struct sm_msg *m);
struct sm_msg erma_sess_msg(const struct session *s);
struct session *erma_session_get(struct erma_rpc *rpc, uint16_t num);
/* The held bytes of server sessions from address a, NULL if none. */
uint64_t *erma_peer_recv_held(struct erma_rpc *rpc, const struct erma_addr *a);
void erma_sm_rx(struct erma_rpc *rpc, const struct erma_hdr *h, const struct erma_rx_pkt *pkt);
void erma_sessions_scan(struct erma_rpc *rpc, uint64_t now);
void erma_busy_scan(struct erma_rpc *rpc, uint64_t now);
void erma_session_fail(struct erma_rpc *rpc, struct session *s, int status);
void erma_session_release(struct erma_rpc *rpc, struct session *s);
/* A client session whose server is gone: fails what is pending with
 * ERMA_EPEERFAILED, releases it, then ERMA_SM_PEER_FAILED. */
void erma_session_lost(struct erma_rpc *rpc, struct session *s);

/* proto.c */
void erma_wheel_release(struct erma_rpc *rpc, uint64_t now);
void erma_rpc_rx(struct erma_rpc *rpc, const struct erma_hdr *h, const struct erma_rx_pkt *pkt);
bool erma_rx_open(struct erma_rpc *rpc, struct session *s, uint8_t *pkt, uint32_t *len);
void erma_client_kick(struct erma_rpc *rpc, struct session *s);
void erma_client_scan(struct erma_rpc *rpc, struct session *s, uint64_t now);
void erma_worker_response(struct erma_rpc *rpc, struct erma_req *rq);
void erma_fail_client_slots(struct erma_rpc *rpc, struct session *s, int status);
void erma_client_req_error(struct erma_rpc *rpc, struct session *s, uint64_t req_num, int err);
void erma_server_slot_free(struct erma_rpc *rpc, struct slot *sl);
/* Drops the partly received requests that stalled past cfg.recv_timeout_ns. */
void erma_partial_expire(struct erma_rpc *rpc, uint64_t now);

/* budget.c: what a peer can make the endpoint hold (rpc.h, Budgets) */
/* Counts bytes of a message being received against a session's held
 * bytes, its client address's (peer; NULL for a client session) and the
 * endpoint's, each within its budget; false, and nothing counted, when one
 * has no room. */
bool erma_budget_take(struct erma_rpc *rpc, uint64_t *session, uint64_t *peer, uint64_t bytes);
void erma_budget_give(struct erma_rpc *rpc, uint64_t *session, uint64_t *peer, uint64_t bytes);
/* rq is being received: it joins (or moves to the end of) the partial list. */
void erma_partial_touch(struct erma_rpc *rpc, struct erma_req *rq);
void erma_partial_remove(struct erma_rpc *rpc, struct erma_req *rq);
/* The first partial request whose last packet came before now - timeout. */
struct erma_req *erma_partial_stalled(const struct erma_rpc *rpc, uint64_t now);

/* nexus.c */
/* Hands rq to a worker thread (round robin). */
void erma_nexus_to_worker(struct erma_nexus *nx, struct erma_req *rq);

#endif
