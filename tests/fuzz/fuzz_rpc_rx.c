/*
 * fuzz_rpc_rx: the RPC receive path (rpc/rx.c and the files it hands
 * packets to, the RX demultiplexer of endpoint/endpoint.c) on the sim fabric, in virtual time.
 *
 * World, rebuilt for every input (deterministic: fixed seeds, virtual time):
 * host 0 a server endpoint, host 1 a client endpoint with a session to it,
 * host 2 a stranger. Server handlers: ECHO (dispatch), DEFER (dispatch,
 * answers 40 us times the request's last byte later: 0 to 10 ms), WORKER
 * (on a worker thread, holding the request the same way; only when the
 * input asks, as a thread per input costs); type NONE has none. Then the
 * client enqueues six standard requests (small, multi-packet both ways,
 * deferred, worker, no handler, empty).
 *
 * Input: fuzz.h's format. Flags: bit 0 mutes the client's own packets to
 * the server (the input then speaks for the client), bit 1 mutes the
 * server's own packets to the client, bit 2 leaves out the standard
 * requests, bit 3 gives the server its worker thread and WORKER handler,
 * bit 4 opens the client's session with 2 credits, bit 5 has the server
 * grant at most 8. Record ctl bits 0-1, the route of the packet:
 *   0 client -> server   (as if from the client's address)
 *   1 stranger -> server
 *   2 server -> client   (as if from the server's address)
 *   3 stranger -> client
 * ctl bits 2-7: microseconds of virtual time the world runs before the
 * packet is sent. A CONNECT_REQ whose cookie is 1 gets the cookie the
 * server would give its source now (cookies come from a random key per
 * endpoint, so a captured one is stale in the next world; the length of
 * SM messages is learnt from the client's own connect request). An empty
 * record sends nothing; on routes 1-3 it has the client act instead:
 * 1 enqueue another request (ECHO, DEFER, WORKER in turn, some held past
 * the client's 3 ms timeout; past 8, they queue),
 * 2 erma_session_destroy(), 3 open a new session (later requests use it).
 * After the last record the world runs 8 ms more (RTOs, keepalives, held
 * requests, the server's 4 ms failure timeout), then releases the workers.
 *
 * Checked, besides ASan/UBSan/LSan:
 *   - at most once: within one server session's lifetime the handler of a
 *     slot runs for ever larger req_nums, never twice for one;
 *   - a held request (DEFER, WORKER) keeps its data until answered, is
 *     never handed to a handler again, and erma_req_respond() takes
 *     its answer, also once the client gave up on it (rpc.h);
 *   - every client continuation runs exactly once (the last ones from
 *     erma_rpc_destroy()), with ERMA_OK or an erma error and then size 0;
 *   - counters agree: handler_calls with the handlers' own count, the
 *     endpoint's rx_pkts with the transport's, the drop counters (the
 *     endpoint's and the RPCs') stay within rx_pkts,
 *     rpcs_done + rpcs_failed with the continuations;
 *   - a late answer never reaches another request: unless the input spoofs
 *     the client or the server (routes 0, 2, mutes), every OK response holds
 *     exactly the bytes the handler wrote for that request;
 *   - a stranger cannot disturb the session: when every packet comes from
 *     the stranger, the client does nothing more and nothing is muted, each
 *     standard request completes with its expected status;
 *   - every packet the endpoints send is well-formed (header, lengths);
 *   - no livelock or time crawl in the event loop (fuzz.h).
 * Seeds (fuzz_write_seeds) are the real conversation of the same world,
 * captured with the fabric's tap (connect, requests, credit returns,
 * responses, RFRs, REQ_ERROR, keepalives, disconnect), and a stranger
 * opening 160 sessions.
 *
 * The harness reads rpc/internal.h: the server's cookie key (it computes
 * cookies as rpc/sm_rx.c cookie_for() does), req->sess and the slot of a
 * request (for the at-most-once check; a server session's cc.rtt_samples,
 * a client counter that erma__session_alloc() zeroes, tags the session's
 * lifetime), and rpc->server's in_workers with the worker_done ring: after
 * every pass it waits until the worker has answered, or is holding a
 * request not yet due, so that runs stay deterministic.
 */
#include <pthread.h>
#include <sched.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "erma/clock.h"
#include "erma/log.h"
#include "erma/rpc.h"
#include "erma/sim.h"
#include "erma/sdk/transport_driver.h"
#include "fuzz.h"
#include "rpc/internal.h"

enum { SERVER_HOST, CLIENT_HOST, STRANGER_HOST, HOSTS };
enum { ECHO = 1, WORKER = 2, DEFER = 3, NONE = 9 };
enum { R_CLIENT_SERVER, R_STRANGER_SERVER, R_SERVER_CLIENT, R_STRANGER_CLIENT };

#define PORT 31850
#define STRANGER_PORT 4242
#define FLAG_MUTE_CLIENT 1
#define FLAG_MUTE_SERVER 2
#define FLAG_NO_REQUESTS 4
#define FLAG_WORKER 8
#define FLAG_FEW_CREDITS 16
#define FLAG_SMALL_GRANT 32
#define MAX_CALLS 48
#define MAX_HELD 64
#define MAX_RESP 6000 /* echo responses: up to 5 packets */
#define HOLD_UNIT_NS 40000ull
#define SM_COOKIE (ERMA_HDR_SIZE + 29) /* the cookie's place in an SM message */
#define COOKIE_EPOCH_SHIFT 30 /* as rpc/sm_rx.c */
#define COOKIE_FILL 1         /* a CONNECT_REQ's cookie the harness fills in */
#define FINAL_NS 8000000ull

struct call {
    uint8_t type;
    uint32_t req_size;
    int expect, status, done;
    bool content_ok;
    struct erma_msgbuf req, resp;
};

struct held { /* a request the DEFER handler holds */
    struct erma_req *req;
    uint32_t size;
    uint64_t hash;
    uint64_t due_ns; /* answered at the first pass from this virtual time */
};

struct lifetime { /* handler req_nums of one server session's slots */
    uint64_t last[ERMA_SESSION_SLOTS];
    bool ran[ERMA_SESSION_SLOTS];
};

struct captured { /* a packet the seed capture saw */
    uint64_t t;
    uint8_t route;
    uint32_t len;
    uint8_t data[FUZZ_MAX_PKT];
};

struct world {
    struct erma_sim *sim;
    struct erma_nexus *nx[2];
    struct erma_endpoint *both[2]; /* the server's, the client's */
    struct erma_rpc *server, *client;
    char server_uri[64];
    int session;
    uint8_t flags;
    bool muting, injecting, release_all;
    unsigned passes;
    struct call calls[MAX_CALLS];
    unsigned ncalls, completions, extra;
    struct held held[MAX_HELD];
    unsigned nheld;
    /* the worker thread: it may run while worker_clock (virtual time the
     * main thread publishes after each pass) is below its request's due
     * time, and says when it waits for that */
    _Atomic uint64_t worker_clock, worker_due;
    _Atomic bool worker_waits;
    /* at-most-once bookkeeping; the worker thread writes it too */
    pthread_mutex_t lock;
    struct lifetime *lifetimes;
    uint64_t nlifetimes, handler_calls;
    uint32_t sm_len; /* SM messages' length, learnt from the client's first */
    /* seed capture */
    struct captured *cap;
    unsigned ncap, cap_max;
    uint64_t t0;
};

static struct world W;

/* ---- handlers ---- */

static uint32_t resp_size_of(const uint8_t *d, size_t n)
{
    return n >= 4 ? (uint32_t)erma_get_le(d, 4) % MAX_RESP : (uint32_t)n;
}

static uint8_t resp_byte(const uint8_t *d, size_t n, size_t k)
{
    return (uint8_t)((n ? d[k % n] : 0) ^ (k * 5 + 3));
}

/* How long DEFER and WORKER hold a request: 40 us times its last byte. */
static uint64_t hold_of(const uint8_t *d, size_t n)
{
    return n ? d[n - 1] * HOLD_UNIT_NS : 0;
}

/* Fills the response the echo handlers give to request d[0..n). */
static int echo_into(struct erma_req *req, const uint8_t *d, size_t n)
{
    const uint32_t size = resp_size_of(d, n);
    struct erma_msgbuf *r = erma_req_resp_buf(req), own;
    if (size > r->max_size || (n & 1)) { /* odd sizes: a msgbuf of our own */
        FUZZ_CHECK(erma_msgbuf_alloc(erma_req_rpc(req), size, &own) == ERMA_OK, "alloc %u",
                   size);
        r = &own;
    }
    FUZZ_CHECK(erma_msgbuf_resize(r, size) == ERMA_OK, "resize");
    for (uint32_t k = 0; k < size; k++)
        r->data[k] = resp_byte(d, n, k);
    return erma_req_respond(req, r);
}

/* At most once: a slot's handler runs for ever larger req_nums within one
 * server session's lifetime. */
static void note_call(struct erma_req *req)
{
    struct session *s = req->sess;
    const struct slot *sl = req->slot;
    pthread_mutex_lock(&W.lock);
    W.handler_calls++;
    if (!sl) { /* on a worker: the session ended meanwhile (an orphan already) */
        pthread_mutex_unlock(&W.lock);
        return;
    }
    const unsigned k = (unsigned)(sl - s->slots);
    FUZZ_CHECK(s->role == SERVER && k < ERMA_SESSION_SLOTS, "a handler call on a client slot");
    if (s->cc.rtt_samples == 0) { /* a new lifetime: erma__session_alloc() zeroed it */
        struct lifetime *l = realloc(W.lifetimes, (W.nlifetimes + 1) * sizeof *l);
        FUZZ_CHECK(l != NULL, "realloc");
        W.lifetimes = l;
        memset(&l[W.nlifetimes], 0, sizeof *l);
        s->cc.rtt_samples = ++W.nlifetimes;
    }
    struct lifetime *l = &W.lifetimes[s->cc.rtt_samples - 1];
    FUZZ_CHECK(!l->ran[k] || sl->req_num > l->last[k],
               "handler ran again in session %u slot %u: req_num %llu after %llu", s->num, k,
               (unsigned long long)sl->req_num, (unsigned long long)l->last[k]);
    l->ran[k] = true;
    l->last[k] = sl->req_num;
    pthread_mutex_unlock(&W.lock);
}

static void echo_handler(struct erma_req *req, void *ctx)
{
    (void)ctx;
    note_call(req);
    FUZZ_CHECK(echo_into(req, erma_req_data(req), erma_req_size(req)) == ERMA_OK, "respond");
}

/* On the worker thread. The loop's time stands still while it runs (the
 * pass hook waits for it), so reading the fabric's clock here is safe. */
static void worker_handler(struct erma_req *req, void *ctx)
{
    (void)ctx;
    note_call(req);
    const uint8_t *d = erma_req_data(req);
    const size_t n = erma_req_size(req);
    const uint64_t due = erma_sim_now(W.sim) + hold_of(d, n);
    if (atomic_load(&W.worker_clock) < due) {
        atomic_store(&W.worker_due, due);
        atomic_store(&W.worker_waits, true);
        while (atomic_load(&W.worker_clock) < due)
            sched_yield();
        atomic_store(&W.worker_waits, false);
    }
    FUZZ_CHECK(echo_into(req, erma_req_data(req), erma_req_size(req)) == ERMA_OK, "respond");
}

static void defer_handler(struct erma_req *req, void *ctx)
{
    (void)ctx;
    note_call(req);
    for (unsigned i = 0; i < W.nheld; i++)
        FUZZ_CHECK(W.held[i].req != req, "a held request went to a handler again");
    if (W.nheld == MAX_HELD) { /* answer at once */
        FUZZ_CHECK(echo_into(req, erma_req_data(req), erma_req_size(req)) == ERMA_OK, "respond");
        return;
    }
    const uint32_t n = (uint32_t)erma_req_size(req);
    const uint8_t *d = erma_req_data(req);
    W.held[W.nheld++] = (struct held){req, n, fuzz_hash(d, n),
                                      erma_sim_now(W.sim) + hold_of(d, n)};
}

/* Answers the held requests that are due (all with force); returns how many. */
static int answer_held(bool force)
{
    int answered = 0;
    for (unsigned i = 0; i < W.nheld;) {
        struct held h = W.held[i];
        if (!force && erma_sim_now(W.sim) < h.due_ns) {
            i++;
            continue;
        }
        W.held[i] = W.held[--W.nheld];
        const uint8_t *d = erma_req_data(h.req);
        const bool intact = erma_req_size(h.req) == h.size && (d || !h.size) &&
                            fuzz_hash(d, h.size) == h.hash;
        FUZZ_CHECK(intact, "a held request's data changed before its response (%zu bytes at %p, "
                   "was %u)", erma_req_size(h.req), (const void *)d, h.size);
        const int rc = echo_into(h.req, d, h.size);
        FUZZ_CHECK(rc == ERMA_OK, "a deferred response was refused: %d", rc);
        answered++;
    }
    return answered;
}

/* Requests handed to workers whose answers are not yet in worker_done. */
static bool workers_busy(struct erma_rpc *rpc)
{
    const struct erma_mpsc *q = &rpc->server.worker_done;
    size_t pos = q->head;
    uint32_t ready = 0;
    while (ready < rpc->server.in_workers &&
           atomic_load_explicit(&q->cells[pos & q->mask].seq, memory_order_acquire) == pos + 1) {
        pos++;
        ready++;
    }
    return ready < rpc->server.in_workers;
}

/* After every pass: the worker may run up to now; wait until it has
 * answered everything or holds a request due later. */
static int pass_hook(void *ctx)
{
    (void)ctx;
    const uint64_t now = W.release_all ? UINT64_MAX : erma_sim_now(W.sim);
    atomic_store(&W.worker_clock, now);
    const uint64_t start = erma_mono_ns();
    while (workers_busy(W.server) &&
           !(atomic_load(&W.worker_waits) && atomic_load(&W.worker_due) > now)) {
        FUZZ_CHECK(erma_mono_ns() - start < 5000000000ull, "a worker handler never returned");
        sched_yield();
    }
    return answer_held(false);
}

/* ---- the client's requests ---- */

static void on_done(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    struct call *c = tag;
    FUZZ_CHECK(c->done == 0, "a continuation ran twice (type %u, status %d)", c->type, status);
    FUZZ_CHECK(resp == &c->resp, "the continuation got another response buffer");
    FUZZ_CHECK(status == ERMA_OK || (status < 0 && status > ERMA_ERR_LAST), "status %d", status);
    FUZZ_CHECK(status == ERMA_OK || resp->size == 0, "a failed call has %u bytes", resp->size);
    c->done = 1;
    c->status = status;
    c->content_ok = status == ERMA_OK && resp->size == resp_size_of(c->req.data, c->req_size);
    for (uint32_t k = 0; c->content_ok && k < resp->size; k++)
        c->content_ok = resp->data[k] == resp_byte(c->req.data, c->req_size, k);
    W.completions++;
    erma_msgbuf_free(rpc, &c->req);
    erma_msgbuf_free(rpc, &c->resp);
}

/* Enqueues a request of req_size bytes asking for resp_size; false when
 * the client refuses it (no session). */
static bool enqueue(uint8_t type, uint32_t req_size, uint32_t resp_size, int expect)
{
    if (W.ncalls == MAX_CALLS)
        return false;
    struct call *c = &W.calls[W.ncalls];
    *c = (struct call){.type = type, .req_size = req_size, .expect = expect};
    FUZZ_CHECK(erma_msgbuf_alloc(W.client, req_size, &c->req) == ERMA_OK, "alloc");
    FUZZ_CHECK(erma_msgbuf_alloc(W.client, 64, &c->resp) == ERMA_OK, "alloc");
    for (uint32_t k = 0; k < req_size; k++)
        c->req.data[k] = (uint8_t)(k * 13 + type);
    if (req_size >= 4)
        erma_put_le(c->req.data, resp_size, 4);
    if (erma_rpc_call(W.client, W.session, type, &c->req, &c->resp, on_done, c) != ERMA_OK) {
        erma_msgbuf_free(W.client, &c->req);
        erma_msgbuf_free(W.client, &c->resp);
        return false;
    }
    W.ncalls++;
    return true;
}

static void standard_requests(void)
{
    bool ok = enqueue(ECHO, 32, 32, ERMA_OK);
    ok = ok && enqueue(ECHO, 3000, 5000, ERMA_OK); /* 3 request packets, 4 response packets */
    ok = ok && enqueue(DEFER, 100, 100, ERMA_OK);  /* held 400 us */
    /* 2 packets, held 200 us */
    ok = ok && enqueue(WORKER, 2128, 40, W.flags & FLAG_WORKER ? ERMA_OK : ERMA_ENOHANDLER);
    ok = ok && enqueue(NONE, 16, 16, ERMA_ENOHANDLER); /* REQ_ERROR */
    ok = ok && enqueue(ECHO, 0, 0, ERMA_OK);
    FUZZ_CHECK(ok, "the standard requests");
}

/* An empty record on route 1-3: the client acts. */
static void client_action(unsigned route)
{
    if (route == R_STRANGER_SERVER) {
        static const uint8_t types[3] = {ECHO, DEFER, WORKER};
        const uint32_t k = ++W.extra;
        enqueue(types[k % 3], k * 733 % 4000, k * 911 % MAX_RESP, ERMA_OK);
    } else if (route == R_SERVER_CLIENT) {
        erma_session_destroy(W.client, W.session);
    } else {
        const int s = erma_session_create(W.client, W.server_uri, 0);
        W.session = s >= 0 ? s : W.session;
    }
}

/* ---- the world ---- */

/* Keeps a packet for the seeds; a connect request's cookie becomes
 * COOKIE_FILL, so that replays get this world's. */
static void capture(const struct erma_sim_event *ev, const uint8_t *data)
{
    if (W.ncap >= W.cap_max || ev->len > FUZZ_MAX_PKT)
        return;
    struct captured *c = &W.cap[W.ncap++];
    c->t = ev->time;
    c->route = ev->src_host == CLIENT_HOST ? R_CLIENT_SERVER : R_SERVER_CLIENT;
    c->len = ev->len;
    memcpy(c->data, data, ev->len);
    struct erma_hdr h;
    if (c->len == W.sm_len && erma_hdr_check(c->data, c->len, &h) == ERMA_OK &&
        h.proto == ERMA_PROTO_SM && h.req_type == CONNECT_REQ &&
        erma_get_le(c->data + SM_COOKIE, 8))
        erma_put_le(c->data + SM_COOKIE, COOKIE_FILL, 8);
}

/* Every packet an endpoint sends is well-formed (docs/PROTOCOL.md): a valid
 * header; 12 bytes in a CR (its arrival bitmap), none in an RFR; a REQ
 * carries exactly its part of the message; a RESP at most a packet and the
 * message; SM messages their length. */
static void check_sent(const struct erma_sim_event *ev, const uint8_t *data)
{
    const uint32_t pkt_data = FUZZ_MAX_PKT - ERMA_HDR_SIZE, len = ev->len - ERMA_HDR_SIZE;
    struct erma_hdr h;
    FUZZ_CHECK(erma_hdr_check(data, ev->len, &h) == ERMA_OK, "host %u sent a bad header (%u B)",
               ev->src_host, ev->len);
    if (h.proto == ERMA_PROTO_SM) {
        FUZZ_CHECK(!W.sm_len || ev->len == W.sm_len, "an SM message of %u bytes", ev->len);
        return;
    }
    FUZZ_CHECK(h.proto == ERMA_PROTO_RPC, "host %u sent proto %u", ev->src_host, h.proto);
    uint32_t want = len;
    if (h.pkt_type == ERMA_PKT_CR) {
        want = 12; /* the server's arrival bitmap */
    } else if (h.pkt_type == ERMA_PKT_RFR) {
        want = 0;
    } else if (h.pkt_type == ERMA_PKT_REQ) {
        const uint64_t off = (uint64_t)h.pkt_num * pkt_data;
        want = off < h.msg_size ? (uint32_t)(h.msg_size - off < pkt_data ? h.msg_size - off
                                                                           : pkt_data) : 0;
    }
    FUZZ_CHECK(len == want && len <= pkt_data && (h.pkt_type == ERMA_PKT_CR || len <= h.msg_size),
               "host %u sent %u data bytes in a packet of type %u, pkt_num %u, msg_size %u",
               ev->src_host, len, h.pkt_type, h.pkt_num, h.msg_size);
}

static bool tap(void *ctx, const struct erma_sim_event *ev, uint8_t *data)
{
    (void)ctx;
    if (W.injecting)
        return true;
    check_sent(ev, data);
    struct erma_hdr h;
    if (!W.sm_len && ev->src_host == CLIENT_HOST && erma_hdr_check(data, ev->len, &h) == ERMA_OK &&
        h.proto == ERMA_PROTO_SM && h.req_type == CONNECT_REQ)
        W.sm_len = ev->len;
    if (W.cap)
        capture(ev, data);
    if (W.muting && (W.flags & FLAG_MUTE_CLIENT) && ev->src_host == CLIENT_HOST)
        return false;
    return !(W.muting && (W.flags & FLAG_MUTE_SERVER) && ev->src_host == SERVER_HOST);
}

static struct erma_rpc_cfg rpc_cfg(uint64_t seed, uint32_t credits)
{
    return (struct erma_rpc_cfg){.credits = credits, .rto_ns = 200000, .failure_ns = 4000000,
                                 .keepalive_ns = 1000000, .connect_retry_ns = 500000,
                                 .req_timeout_ns = 3000000, .seed = seed};
}

static void endpoints_up(uint8_t flags)
{
    snprintf(W.server_uri, sizeof W.server_uri, "sim://fzrpc/%d:%d", SERVER_HOST, PORT);
    const struct erma_nexus_cfg ncfg = {.workers = flags & FLAG_WORKER ? 1 : 0};
    FUZZ_CHECK(erma_nexus_create(&ncfg, &W.nx[0]) == ERMA_OK, "nexus");
    FUZZ_CHECK(erma_nexus_create(NULL, &W.nx[1]) == ERMA_OK, "nexus");
    erma_handler_register(W.nx[0], ECHO, echo_handler, ERMA_DISPATCH, NULL);
    if (flags & FLAG_WORKER)
        erma_handler_register(W.nx[0], WORKER, worker_handler, ERMA_WORKER, NULL);
    erma_handler_register(W.nx[0], DEFER, defer_handler, ERMA_DISPATCH, NULL);
    const struct erma_rpc_cfg sc = rpc_cfg(42, flags & FLAG_SMALL_GRANT ? 8 : 0);
    const struct erma_rpc_cfg cc = rpc_cfg(43, 0);
    FUZZ_CHECK(erma_endpoint_create(W.server_uri, 0, NULL, &W.both[0]) == ERMA_OK,
               "server endpoint");
    FUZZ_CHECK(erma_endpoint_create("sim://fzrpc/1:31850", 0, NULL, &W.both[1]) == ERMA_OK,
               "client endpoint");
    FUZZ_CHECK(erma_rpc_create(W.nx[0], W.both[0], &sc, &W.server) == ERMA_OK, "server");
    FUZZ_CHECK(erma_rpc_create(W.nx[1], W.both[1], &cc, &W.client) == ERMA_OK, "client");
}

static void world_up(uint8_t flags)
{
    W.flags = flags;
    W.ncalls = W.completions = W.extra = W.nheld = W.passes = 0;
    W.nlifetimes = W.handler_calls = 0;
    W.muting = W.injecting = W.release_all = false;
    W.sm_len = 0;
    atomic_store(&W.worker_clock, 0);
    atomic_store(&W.worker_waits, false);
    struct erma_sim_cfg sc;
    erma_sim_cfg_default(&sc);
    sc.hosts = HOSTS;
    FUZZ_CHECK(erma_sim_create("fzrpc", &sc, &W.sim) == ERMA_OK, "sim");
    erma_sim_use_clock(W.sim);
    erma_sim_set_tap(W.sim, tap, NULL);
    endpoints_up(flags);
    W.session = erma_session_create_credits(W.client, W.server_uri, 0,
                                            flags & FLAG_FEW_CREDITS ? 2 : 0);
    for (int i = 0; i < 100 && !erma_session_connected(W.client, W.session); i++)
        fuzz_run(W.sim, W.both, 2, 10000, pass_hook, NULL, &W.passes);
    FUZZ_CHECK(erma_session_connected(W.client, W.session) && W.sm_len, "no session");
    W.muting = true;
    W.t0 = erma_sim_now(W.sim);
    if (!(flags & FLAG_NO_REQUESTS))
        standard_requests();
}

/* Runs the world out: held requests answered, workers released. */
static void world_finish(void)
{
    fuzz_run(W.sim, W.both, 2, FINAL_NS, pass_hook, NULL, &W.passes);
    answer_held(true);
    W.release_all = true;
    fuzz_run(W.sim, W.both, 2, 1000000, pass_hook, NULL, &W.passes);
}

static void world_down(void)
{
    erma_rpc_destroy(W.client); /* fails what is pending: continuations run */
    for (unsigned i = 0; i < W.ncalls; i++)
        FUZZ_CHECK(W.calls[i].done == 1, "call %u never completed", i);
    W.nheld = 0; /* their sessions go with the server */
    erma_rpc_destroy(W.server);
    erma_endpoint_destroy(W.both[0]);
    erma_endpoint_destroy(W.both[1]);
    erma_nexus_destroy(W.nx[0]);
    erma_nexus_destroy(W.nx[1]);
    erma_sim_destroy(W.sim);
    free(W.lifetimes);
    W.lifetimes = NULL;
}

/* The cookie the server gives a connect request of token from src now
 * (rpc/sm_rx.c cookie_for()). */
static uint64_t cookie_for(uint16_t src_host, uint16_t src_port, uint64_t token)
{
    char uri[64];
    struct erma_addr a;
    snprintf(uri, sizeof uri, "sim://fzrpc/%u:%u", src_host, src_port);
    FUZZ_CHECK(erma_transport_resolve(W.both[0]->tr, uri, &a) == ERMA_OK, "%s", uri);
    uint8_t in[ERMA_ADDR_MAX + 16], out[crypto_shorthash_BYTES];
    memcpy(in, a.raw, a.len);
    erma_put_le(in + a.len, token, 8);
    erma_put_le(in + a.len + 8, erma_sim_now(W.sim) >> COOKIE_EPOCH_SHIFT, 8);
    crypto_shorthash(out, in, a.len + 16u, W.server->sm.cookie_key);
    return erma_get_le(out, 8) | 1;
}

/* Fills in the cookie of a CONNECT_REQ that asks for it. */
static void fill_cookie(struct fuzz_rec *r, uint16_t src_host, uint16_t src_port)
{
    struct erma_hdr h;
    if (r->len != W.sm_len || erma_hdr_check(r->pkt, r->len, &h) != ERMA_OK ||
        h.proto != ERMA_PROTO_SM || h.req_type != CONNECT_REQ ||
        erma_get_le(r->pkt + SM_COOKIE, 8) != COOKIE_FILL)
        return;
    const uint64_t token = erma_get_le(r->pkt + ERMA_HDR_SIZE, 8);
    erma_put_le(r->pkt + SM_COOKIE, cookie_for(src_host, src_port, token), 8);
}

/* What the records of an input did. */
struct seen {
    bool stranger_only, genuine;
};

/* Runs the record's wait, then sends its packet or has the client act. */
static void inject(struct fuzz_rec *r, struct seen *seen)
{
    static const uint16_t src[4] = {CLIENT_HOST, STRANGER_HOST, SERVER_HOST, STRANGER_HOST};
    static const uint16_t dst[4] = {SERVER_HOST, SERVER_HOST, CLIENT_HOST, CLIENT_HOST};
    const unsigned route = r->ctl & 3;
    fuzz_run(W.sim, W.both, 2, (uint64_t)(r->ctl >> 2) * 1000, pass_hook, NULL, &W.passes);
    if (r->len == 0) {
        if (route != R_CLIENT_SERVER)
            client_action(route);
        seen->stranger_only = seen->stranger_only && route == R_CLIENT_SERVER;
        return;
    }
    seen->stranger_only = seen->stranger_only && src[route] == STRANGER_HOST;
    seen->genuine = seen->genuine && src[route] == STRANGER_HOST;
    const uint16_t sport = src[route] == STRANGER_HOST ? STRANGER_PORT : PORT;
    if (dst[route] == SERVER_HOST)
        fill_cookie(r, src[route], sport);
    W.injecting = true;
    FUZZ_CHECK(erma_sim_inject(W.sim, src[route], sport, dst[route], PORT, r->pkt, r->len) ==
                   ERMA_OK,
               "inject");
    W.injecting = false;
}

/* ---- checks ---- */

static void check_stats(struct erma_rpc *rpc, const char *who)
{
    struct erma_rpc_stats st;
    struct erma_endpoint_stats es;
    const struct erma_endpoint *ep = erma_rpc_endpoint(rpc);
    erma_rpc_get_stats(rpc, &st);
    erma_endpoint_get_stats(ep, &es);
    const struct erma_transport *tr = ep->tr;
    FUZZ_CHECK(es.rx_pkts == tr->stats.rx_pkts, "%s: rx_pkts %llu, transport %llu", who,
               (unsigned long long)es.rx_pkts, (unsigned long long)tr->stats.rx_pkts);
    const uint64_t dropped = es.rx_bad + es.rx_no_proto + st.rx_bad + st.rx_no_session +
                             st.rx_other_session + st.rx_stale + st.rx_dup + st.rx_reordered;
    FUZZ_CHECK(dropped <= es.rx_pkts, "%s: %llu dropped of %llu received", who,
               (unsigned long long)dropped, (unsigned long long)es.rx_pkts);
}

/* With FUZZ_VERBOSE set: what became of the calls, and the counters (bad:
 * the endpoint's and the RPCs'). */
static void report(const struct erma_rpc_stats *s, const struct erma_rpc_stats *c)
{
    if (!getenv("FUZZ_VERBOSE"))
        return;
    for (unsigned i = 0; i < W.ncalls; i++)
        fprintf(stderr, "  call %u type %u: done %d status %d content %s\n", i, W.calls[i].type,
                W.calls[i].done, W.calls[i].status, W.calls[i].content_ok ? "ok" : "-");
    const struct erma_rpc_stats *both[2] = {s, c};
    for (int k = 0; k < 2; k++) {
        struct erma_endpoint_stats es;
        erma_endpoint_get_stats(W.both[k], &es);
        fprintf(stderr, "  %s: rx %llu bad %llu no_session %llu stale %llu dup %llu reordered "
                "%llu handler_calls %llu done %llu failed %llu refused %llu\n",
                k ? "client" : "server", (unsigned long long)es.rx_pkts,
                (unsigned long long)(es.rx_bad + both[k]->rx_bad),
                (unsigned long long)both[k]->rx_no_session,
                (unsigned long long)both[k]->rx_stale, (unsigned long long)both[k]->rx_dup,
                (unsigned long long)both[k]->rx_reordered,
                (unsigned long long)both[k]->handler_calls, (unsigned long long)both[k]->rpcs_done,
                (unsigned long long)both[k]->rpcs_failed,
                (unsigned long long)both[k]->sessions_refused);
    }
    fprintf(stderr, "  passes %u\n", W.passes);
}

/* stranger_only: only the stranger's packets, no client action, no mute;
 * genuine: nothing spoofs the client or the server. */
static void check_world(bool stranger_only, bool genuine)
{
    struct erma_rpc_stats s, c;
    erma_rpc_get_stats(W.server, &s);
    erma_rpc_get_stats(W.client, &c);
    report(&s, &c);
    check_stats(W.server, "server");
    check_stats(W.client, "client");
    FUZZ_CHECK(s.handler_calls == W.handler_calls, "handler_calls %llu, handlers ran %llu",
               (unsigned long long)s.handler_calls, (unsigned long long)W.handler_calls);
    FUZZ_CHECK(c.rpcs_done + c.rpcs_failed == W.completions, "client: %llu + %llu vs %u",
               (unsigned long long)c.rpcs_done, (unsigned long long)c.rpcs_failed,
               W.completions);
    for (unsigned i = 0; i < W.ncalls; i++) {
        const struct call *k = &W.calls[i];
        FUZZ_CHECK(!k->done || k->status != ERMA_OK || !genuine || k->content_ok,
                   "call %u (type %u): another request's response", i, k->type);
        FUZZ_CHECK(!stranger_only || (k->done && k->status == k->expect),
                   "call %u (type %u): a stranger changed its outcome: done %d status %d", i,
                   k->type, k->done, k->status);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool once;
    if (!once) {
        once = true;
        erma_log_set_level(ERMA_LOG_ERROR);
        pthread_mutex_init(&W.lock, NULL);
    }
    struct fuzz_in in = {data, size};
    const uint8_t flags = fuzz_flags(&in);
    world_up(flags);
    const bool mute = flags & (FLAG_MUTE_CLIENT | FLAG_MUTE_SERVER);
    struct seen seen = {!mute, !mute};
    static struct fuzz_rec r;
    while (fuzz_next(&in, &r))
        inject(&r, &seen);
    world_finish();
    check_world(seen.stranger_only, seen.genuine);
    world_down();
    return 0;
}

/* ---- seeds: the world's real conversation ---- */

static bool is_sm(const struct captured *c)
{
    struct erma_hdr h;
    return erma_hdr_check(c->data, c->len, &h) == ERMA_OK && h.proto == ERMA_PROTO_SM;
}

static bool rpc_hdr(const struct captured *c, struct erma_hdr *h)
{
    return erma_hdr_check(c->data, c->len, h) == ERMA_OK && h->proto == ERMA_PROTO_RPC;
}

/* Adds an empty record that waits until t (from *sched, which it moves). */
static unsigned wait_until(struct fuzz_out *o, uint64_t *sched, uint64_t t)
{
    uint64_t wait = t > *sched ? (t - *sched + 999) / 1000 : 0;
    *sched += wait * 1000;
    for (; wait > 63; wait -= 63)
        fuzz_out_rec(o, 63 << 2, NULL, 0);
    return (unsigned)wait;
}

/* Adds the captured packets [from, to) with route keep (-1: all; -2: the
 * session-management ones) to o, as route (or their own when route < 0),
 * each with the wait that sends it when it was captured (never earlier). */
static void seed_recs(struct fuzz_out *o, unsigned from, unsigned to, int keep, int route)
{
    uint64_t sched = W.t0;
    for (unsigned i = from; i < to; i++) {
        const struct captured *c = &W.cap[i];
        if ((keep >= 0 && c->route != keep) || (keep == -2 && !is_sm(c)))
            continue;
        const unsigned wait = wait_until(o, &sched, c->t);
        const uint8_t r = (uint8_t)(route >= 0 ? route : c->route);
        fuzz_out_rec(o, (uint8_t)(wait << 2 | r), c->data, c->len);
    }
}

/* One seed per request: the client's packets of that request number. */
static int seed_per_request(const char *dir, unsigned first, struct fuzz_out *o)
{
    int n = 0;
    for (unsigned i = first; i < W.ncap; i++) {
        struct erma_hdr h, h2;
        if (W.cap[i].route != R_CLIENT_SERVER || !rpc_hdr(&W.cap[i], &h) || h.pkt_num != 0 ||
            h.pkt_type != ERMA_PKT_REQ)
            continue;
        fuzz_out_start(o, FLAG_MUTE_CLIENT | FLAG_NO_REQUESTS | FLAG_WORKER);
        for (unsigned j = first; j < W.ncap; j++)
            if (W.cap[j].route == R_CLIENT_SERVER && rpc_hdr(&W.cap[j], &h2) &&
                h2.req_num == h.req_num)
                fuzz_out_rec(o, 2 << 2 | R_CLIENT_SERVER, W.cap[j].data, W.cap[j].len);
        char name[64];
        snprintf(name, sizeof name, "request_%d_type%u", n, h.req_type);
        n += fuzz_save(dir, name, o->buf, o->n);
    }
    return n;
}

/* The worker request's packets with the client's DISCONNECT_REQ 100 us
 * after them, while the worker holds the request (200 us). */
static int seed_worker_disconnect(const char *dir, unsigned first, struct fuzz_out *o)
{
    fuzz_out_start(o, FLAG_MUTE_CLIENT | FLAG_WORKER | FLAG_NO_REQUESTS);
    for (unsigned i = first; i < W.ncap; i++) {
        struct erma_hdr h;
        if (W.cap[i].route == R_CLIENT_SERVER && rpc_hdr(&W.cap[i], &h) &&
            h.req_type == WORKER && h.pkt_type == ERMA_PKT_REQ)
            fuzz_out_rec(o, R_CLIENT_SERVER, W.cap[i].data, W.cap[i].len);
    }
    for (unsigned i = W.ncap; i-- > first;) /* the last SM packet: the disconnect */
        if (W.cap[i].route == R_CLIENT_SERVER && is_sm(&W.cap[i])) {
            fuzz_out_rec(o, 63 << 2, NULL, 0);
            fuzz_out_rec(o, 37 << 2 | R_CLIENT_SERVER, W.cap[i].data, W.cap[i].len);
            break;
        }
    return fuzz_save(dir, "worker_disconnect", o->buf, o->n);
}

/* A stranger's own session: the client's CONNECT_REQ (the one with the
 * cookie, filled in for the stranger) with another token,
 * then the client's first request aimed at the server session the stranger
 * will get (the next number, 1). */
static int seed_stranger_session(const char *dir, unsigned first, struct fuzz_out *o)
{
    fuzz_out_start(o, 0);
    for (unsigned i = 0; i < W.ncap; i++)
        if (W.cap[i].route == R_CLIENT_SERVER && is_sm(&W.cap[i]) &&
            erma_get_le(W.cap[i].data + SM_COOKIE, 8) == COOKIE_FILL) {
            struct captured c = W.cap[i];
            c.data[ERMA_HDR_SIZE] ^= 0x10; /* a token of its own */
            fuzz_out_rec(o, R_STRANGER_SERVER, c.data, c.len);
            break;
        }
    for (unsigned i = first; i < W.ncap; i++) {
        struct captured c = W.cap[i];
        struct erma_hdr h;
        if (c.route != R_CLIENT_SERVER || !rpc_hdr(&c, &h))
            continue;
        h.dest_session = 1;
        erma_hdr_encode(&h, c.data);
        fuzz_out_rec(o, 10 << 2 | R_STRANGER_SERVER, c.data, c.len);
        if (h.pkt_num == 0)
            break;
    }
    return fuzz_save(dir, "stranger_session", o->buf, o->n);
}

/* A session-management message (docs/PROTOCOL.md) into o as one record. */
static void sm_rec(struct fuzz_out *o, uint8_t ctl, uint8_t type, uint16_t dest, uint64_t token,
                   uint16_t client_session)
{
    uint8_t p[FUZZ_MAX_PKT] = {0};
    const struct erma_hdr h = {.req_type = type, .dest_session = dest, .proto = ERMA_PROTO_SM};
    erma_hdr_encode(&h, p);
    erma_put_le(p + ERMA_HDR_SIZE, token, 8);
    erma_put_le(p + ERMA_HDR_SIZE + 8, client_session, 2);
    erma_put_le(p + ERMA_HDR_SIZE + 12, ERMA_MAX_CREDITS, 4);
    if (type == CONNECT_REQ)
        erma_put_le(p + SM_COOKIE, COOKIE_FILL, 8);
    fuzz_out_rec(o, ctl, p, W.sm_len);
}

/* A stranger opens 160 sessions (the server admits 64 from one address),
 * closes 20 and opens 20 more (numbers reused). */
static int seed_many_sessions(const char *dir, struct fuzz_out *o)
{
    fuzz_out_start(o, FLAG_NO_REQUESTS);
    for (uint16_t i = 0; i < 160; i++)
        sm_rec(o, 1 << 2 | R_STRANGER_SERVER, CONNECT_REQ, NO_SESSION, 1000 + i, i);
    for (uint16_t i = 0; i < 20; i++)
        sm_rec(o, R_STRANGER_SERVER, DISCONNECT_REQ, (uint16_t)(i + 1), 1000 + i, i);
    for (uint16_t i = 0; i < 20; i++)
        sm_rec(o, 1 << 2 | R_STRANGER_SERVER, CONNECT_REQ, NO_SESSION, 5000 + i, i);
    return fuzz_save(dir, "many_sessions", o->buf, o->n);
}

/* The standard requests with the client acting: 10 more requests (past
 * the 8 slots), a new session, 2 more, then a disconnect. */
static int seed_client_actions(const char *dir, struct fuzz_out *o)
{
    fuzz_out_start(o, FLAG_FEW_CREDITS | FLAG_SMALL_GRANT);
    for (int i = 0; i < 10; i++)
        fuzz_out_rec(o, R_STRANGER_SERVER, NULL, 0);
    fuzz_out_rec(o, 20 << 2 | R_STRANGER_CLIENT, NULL, 0);
    fuzz_out_rec(o, 60 << 2 | R_STRANGER_SERVER, NULL, 0);
    fuzz_out_rec(o, R_STRANGER_SERVER, NULL, 0);
    fuzz_out_rec(o, 63 << 2 | R_SERVER_CLIENT, NULL, 0);
    return fuzz_save(dir, "client_actions", o->buf, o->n);
}

int fuzz_write_seeds(const char *dir)
{
    static struct fuzz_out o;
    erma_log_set_level(ERMA_LOG_ERROR);
    pthread_mutex_init(&W.lock, NULL);
    W.cap_max = 4096;
    W.cap = calloc(W.cap_max, sizeof *W.cap);
    if (!W.cap)
        return -1;
    W.ncap = 0;
    world_up(FLAG_WORKER);
    unsigned first = 0; /* the first packet after the world is up */
    while (first < W.ncap && W.cap[first].t < W.t0)
        first++;
    fuzz_run(W.sim, W.both, 2, 3000000, pass_hook, NULL, &W.passes);
    erma_session_destroy(W.client, W.session);
    world_finish();
    for (unsigned i = 0; i < W.ncalls; i++)
        FUZZ_CHECK(W.calls[i].done && W.calls[i].status == W.calls[i].expect &&
                       (W.calls[i].status != ERMA_OK || W.calls[i].content_ok),
                   "seed call %u: status %d", i, W.calls[i].status);
    world_down();
    W.cap_max = 0; /* stop capturing */
    int n = 0;
    const struct { const char *name; uint8_t flags; int keep, route; } full[] = {
        {"conv_client", FLAG_MUTE_CLIENT | FLAG_WORKER, R_CLIENT_SERVER, -1},
        {"conv_server", FLAG_MUTE_SERVER, R_SERVER_CLIENT, -1},
        {"conv_both", FLAG_MUTE_CLIENT | FLAG_MUTE_SERVER | FLAG_WORKER, -1, -1},
        {"dup_all", FLAG_WORKER, -1, -1},
        {"stranger_replay", 0, R_CLIENT_SERVER, R_STRANGER_SERVER},
        {"stranger_to_client", 0, R_SERVER_CLIENT, R_STRANGER_CLIENT},
    };
    for (size_t k = 0; k < sizeof full / sizeof full[0]; k++) {
        fuzz_out_start(&o, full[k].flags);
        seed_recs(&o, first, W.ncap, full[k].keep, full[k].route);
        n += fuzz_save(dir, full[k].name, o.buf, o.n);
    }
    fuzz_out_start(&o, 0); /* session management only: connect, pings, disconnect */
    seed_recs(&o, 0, W.ncap, -2, -1);
    n += fuzz_save(dir, "session_mgmt", o.buf, o.n);
    n += seed_per_request(dir, first, &o);
    n += seed_worker_disconnect(dir, first, &o);
    n += seed_stranger_session(dir, first, &o);
    n += seed_many_sessions(dir, &o);
    n += seed_client_actions(dir, &o);
    free(W.cap);
    W.cap = NULL;
    return n;
}
