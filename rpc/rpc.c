/* The RPC protocol on an endpoint: creation, destruction, its hooks in the
 * endpoint's loop. */
#include <sched.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


#include "client.h"
#include "erma/clock.h"
#include "erma/log.h"
#include "server.h"

#define WORKER_DONE_QUEUE 65536

/* The defaults, where cfg has 0 (keepalive_ns: failure_ns / 5). */
static const struct erma_rpc_cfg defaults = {
    .credits = ERMA_MAX_CREDITS,
    .rto_ns = 5000000,
    .failure_ns = 500000000,
    .connect_retry_ns = 20000000,
    .connect_timeout_ns = 3000000000ull,
    .max_sessions_per_peer = 64,
    .recv_budget_session = (uint64_t)ERMA_SESSION_SLOTS * ERMA_MAX_MSG_SIZE,
    .recv_budget_peer = (uint64_t)64 << 20,
    .recv_budget = (uint64_t)512 << 20,
    .reconnect_timeout_ns = 30000000000ull,
    .reconnect_queue = 1024,
};

static uint64_t or_default(uint64_t v, uint64_t d)
{
    return v ? v : d;
}

static uint64_t times(uint64_t v, uint64_t k) /* saturating */
{
    return v > UINT64_MAX / k ? UINT64_MAX : v * k;
}

static void cfg_defaults(struct erma_rpc_cfg *c)
{
    c->credits = c->credits ? c->credits : defaults.credits;
    c->rto_ns = c->rto_ns ? c->rto_ns : defaults.rto_ns;
    c->failure_ns = c->failure_ns ? c->failure_ns : defaults.failure_ns;
    c->keepalive_ns = c->keepalive_ns ? c->keepalive_ns : c->failure_ns / 5;
    c->connect_retry_ns = c->connect_retry_ns ? c->connect_retry_ns : defaults.connect_retry_ns;
    c->connect_timeout_ns =
        c->connect_timeout_ns ? c->connect_timeout_ns : defaults.connect_timeout_ns;
    c->max_sessions_per_peer =
        c->max_sessions_per_peer ? c->max_sessions_per_peer : defaults.max_sessions_per_peer;
    c->recv_budget_session = or_default(c->recv_budget_session, defaults.recv_budget_session);
    c->recv_budget_peer = or_default(c->recv_budget_peer, defaults.recv_budget_peer);
    c->recv_budget = or_default(c->recv_budget, defaults.recv_budget);
    c->reconnect_timeout_ns = or_default(c->reconnect_timeout_ns, defaults.reconnect_timeout_ns);
    c->reconnect_queue = c->reconnect_queue ? c->reconnect_queue : defaults.reconnect_queue;
    /* a live client resends within 64 timeouts (its backoff's cap) */
    const uint64_t resend = times(c->rto_ns, 128), fail = times(c->failure_ns, 2);
    c->recv_timeout_ns = or_default(c->recv_timeout_ns, resend > fail ? resend : fail);
}

/* Timely and the wheel, with defaults from the transport's hints. */
static int cc_setup(struct erma_rpc *rpc)
{
    /* The endpoint's settings, else the transport's hints, else 25 Gb/s and 10 us. */
    double link = rpc->cfg.link_bps > 0 ? rpc->cfg.link_bps : (double)rpc->ep->tr->hints.link_bps;
    uint64_t base = rpc->cfg.base_rtt_ns ? rpc->cfg.base_rtt_ns : rpc->ep->tr->hints.base_rtt_ns;
    link = link > 0 ? link : 25e9;
    base = base ? base : 10000;
    struct rpc_cc *cc = &rpc->cc;
    cc->timely_cfg = rpc->cfg.timely ? *rpc->cfg.timely : erma_timely_cfg_for(link, base);
    rpc->cfg.timely = NULL; /* the copy above is the endpoint's own */
    cc->timely_cfg.bypass = !rpc->cfg.cc.no_timely_bypass;
    if (erma_timely_cfg_check(&cc->timely_cfg) != ERMA_OK)
        return ERMA_EINVAL;
    struct erma_wheel_cfg wc = erma_wheel_cfg_for(rpc->ep->tr->max_pkt, cc->timely_cfg.floor_bps);
    /* A session may queue all its credits in the wheel at the floor rate. */
    wc.horizon_ns *= ERMA_MAX_CREDITS;
    wc.capacity = 1u << 16;
    return erma_wheel_init(&cc->wheel, &wc, erma_now_ns());
}

int erma_rpc_set_cc(struct erma_rpc *rpc, const struct erma_cc_switches *sw)
{
    if (!rpc || !sw)
        return ERMA_EINVAL;
    rpc->cfg.cc = *sw;
    rpc->cc.timely_cfg.bypass = !sw->no_timely_bypass;
    if (sw->off) /* back to line rate: nothing stays paced */
        for (uint32_t i = 0; i < rpc->table.n; i++)
            if (rpc->table.sessions[i])
                rpc->table.sessions[i]->cc.timely.rate_bps = rpc->cc.timely_cfg.link_bps;
    return ERMA_OK;
}

/* ---- the protocol's hooks on its endpoint ---- */

/* Apart from rpc_poll, so that its quiet passes save no registers. */
__attribute__((noinline)) static int poll_due(struct erma_rpc *rpc, uint64_t now)
{
    struct rpc_timers *t = &rpc->timers;
    int work = 0;
    /* in_workers is the loop's own count: no atomic read while it is 0 */
    struct erma_mpsc *done = &rpc->server.worker_done;
    for (struct erma_req *rq; rpc->server.in_workers && (rq = erma__mpsc_pop(done)); work++)
        erma__worker_response(rpc, rq);
    if (rpc->cc.wheel.count) {
        const uint32_t before = rpc->cc.wheel.count;
        erma__rpc_wheel_release(rpc, now);
        work += (int)(before - rpc->cc.wheel.count);
    }
    if (now >= t->next_scan_ns) {
        erma__busy_scan(rpc, now);
        t->next_scan_ns = now + t->scan_ns;
    }
    if (now >= t->next_sm_scan_ns) {
        erma__partial_expire(rpc, now);
        if (t->pending || now >= t->next_live_scan_ns) { /* every session's state */
            t->pending = erma__sessions_scan(rpc, now);
            t->next_live_scan_ns = now + t->live_scan_ns;
        }
        t->next_sm_scan_ns = now + t->sm_scan_ns;
    }
    return work;
}

static int rpc_poll(void *ctx, uint64_t now)
{
    struct erma_rpc *rpc = ctx;
    const struct rpc_timers *t = &rpc->timers;
    if (!rpc->server.in_workers && !rpc->cc.wheel.count && now < t->next_scan_ns &&
        now < t->next_sm_scan_ns)
        return 0; /* most passes: nothing is due */
    return poll_due(rpc, now);
}

static void rpc_after_flush(void *ctx)
{
    erma__run_completions(ctx);
}

static uint64_t rpc_next_timer(const void *ctx)
{
    const struct erma_rpc *rpc = ctx;
    /* Session management has nothing to time without sessions. */
    const struct rpc_timers *tm = &rpc->timers;
    const uint64_t sm = rpc->table.active ? tm->next_sm_scan_ns : UINT64_MAX;
    uint64_t t = rpc->client.nbusy && tm->next_scan_ns < sm ? tm->next_scan_ns : sm;
    if (rpc->cc.wheel.count) { /* the next slot may hold due packets */
        const uint64_t w = rpc->cc.wheel.cur_start_ns + rpc->cc.wheel.slot_ns;
        t = w < t ? w : t;
    }
    return t;
}

/* Worker threads' answers do not wake the loop: it keeps polling. */
static bool rpc_awaits(const void *ctx)
{
    return ((const struct erma_rpc *)ctx)->server.in_workers > 0;
}

/* The retransmission scan's period (a quarter timeout, at most 1 ms) and
 * session management's: half its shortest interval while sessions connect
 * or disconnect, else half the shortest of the liveness ones. With
 * thousands of sessions a scan of them all costs (issue 31: 6% of both
 * sides' time at 20,000 sessions when every scan walked them). */
static void timers_setup(struct erma_rpc *rpc)
{
    struct rpc_timers *t = &rpc->timers;
    const struct erma_rpc_cfg *c = &rpc->cfg;
    t->scan_ns = c->rto_ns / 4 < 1000000 ? c->rto_ns / 4 : 1000000;
    if (t->scan_ns == 0)
        t->scan_ns = 1;
    uint64_t sm = c->keepalive_ns < c->connect_retry_ns ? c->keepalive_ns : c->connect_retry_ns;
    sm = sm < c->failure_ns / 4 ? sm : c->failure_ns / 4;
    t->sm_scan_ns = sm / 2 ? sm / 2 : 1;
    uint64_t live = c->keepalive_ns < c->failure_ns / 4 ? c->keepalive_ns : c->failure_ns / 4;
    live /= 2;
    t->live_scan_ns = live > t->sm_scan_ns ? live : t->sm_scan_ns;
    const uint64_t now = erma__ep_clock(rpc->ep);
    t->next_scan_ns = now + t->scan_ns;
    t->next_sm_scan_ns = now + t->sm_scan_ns;
    t->next_live_scan_ns = now + t->live_scan_ns;
}

static void rpc_free(struct erma_rpc *rpc)
{
    free(rpc->done.list);
    erma__mpsc_destroy(&rpc->server.worker_done);
    erma_wheel_destroy(&rpc->cc.wheel);
    free(rpc);
}

int erma_rpc_create(struct erma_nexus *nx, struct erma_endpoint *ep,
                    const struct erma_rpc_cfg *cfg, struct erma_rpc **out)
{
    if (!nx || !ep || !out || !erma__crypto_init())
        return ERMA_EINVAL;
    /* aligned: its worker_done queue's indices have cache lines of their own
     * (a size is a multiple of its type's alignment) */
    struct erma_rpc *rpc = aligned_alloc(alignof(struct erma_rpc), sizeof *rpc);
    if (!rpc)
        return ERMA_ENOMEM;
    memset(rpc, 0, sizeof *rpc);
    rpc->nx = nx;
    rpc->ep = ep;
    if (cfg)
        rpc->cfg = *cfg;
    cfg_defaults(&rpc->cfg);
    int rc = ERMA_OK;
    if (rpc->cfg.credits > ep->tr->rx_ring || rpc->cfg.credits > ERMA_MAX_CREDITS) {
        ERMA_ERROR("rpc: %u credits per session: at most %u (ERMA_MAX_CREDITS) and the RX "
                   "ring (%u)", rpc->cfg.credits, ERMA_MAX_CREDITS, ep->tr->rx_ring);
        rc = ERMA_EINVAL;
    }
    if ((unsigned)rpc->cfg.reconnect > ERMA_RECONNECT_QUEUE)
        rc = ERMA_EINVAL;
    if (rc == ERMA_OK)
        rc = erma__mpsc_init(&rpc->server.worker_done, nx->nworkers ? WORKER_DONE_QUEUE : 1);
    if (rc == ERMA_OK)
        rc = cc_setup(rpc);
    const struct erma_ep_proto hooks = {erma__rx, rpc_poll, rpc_after_flush, rpc_next_timer, rpc,
                                        rpc_awaits};
    const uint8_t ids[] = {ERMA_PROTO_RPC, ERMA_PROTO_SM};
    if (rc == ERMA_OK)
        rc = erma__ep_register(ep, &hooks, ids, 2);
    if (rc != ERMA_OK) {
        rpc_free(rpc);
        return rc;
    }
    rpc->secure = nx->secure;
    rpc->pkt_data = ep->tr->max_pkt - ERMA_HDR_SIZE - (nx->secure ? ERMA_SEAL_OVERHEAD : 0);
    rpc->server.next_worker = ep->tid;
    if (nx->nworkers > 0) /* worker handlers allocate responses */
        erma_pool_share(ep->pool);
    const uint64_t seed = rpc->cfg.seed ? rpc->cfg.seed
                                        : erma_mono_ns() ^ (uint64_t)getpid() << 32;
    erma_rand_seed(&rpc->rng, seed ^ (uint64_t)ep->tid << 56);
    randombytes_buf(rpc->sm.cookie_key, sizeof rpc->sm.cookie_key);
    timers_setup(rpc);
    *out = rpc;
    return ERMA_OK;
}

/* Waits for the requests still on worker threads (they refer to their
 * sessions); false if some never come back. */
static bool workers_wait(struct erma_rpc *rpc)
{
    for (unsigned spins = 0; rpc->server.in_workers && spins < 5000000; spins++) {
        struct erma_req *rq = erma__mpsc_pop(&rpc->server.worker_done);
        if (rq)
            erma__worker_response(rpc, rq);
        else
            sched_yield();
    }
    if (rpc->server.in_workers) /* their requests stay allocated: the workers still use them */
        ERMA_ERROR("rpc: %u worker handlers did not return", rpc->server.in_workers);
    return rpc->server.in_workers == 0;
}

static void reqs_free(struct erma_rpc *rpc)
{
    for (struct erma_req *rq = rpc->server.all_reqs, *next; rq; rq = next) {
        next = rq->all;
        if (rq->pre_resp.mem) /* the endpoint's pool outlives us */
            erma_msgbuf_free(rpc, &rq->pre_resp);
        if (rq->owns_req && rq->req_buf.mem)
            erma_msgbuf_free(rpc, &rq->req_buf);
        free(rq);
    }
}

static void sessions_free(struct erma_rpc *rpc)
{
    struct rpc_table *t = &rpc->table;
    for (uint32_t i = 0; i < t->n; i++) {
        if (t->sessions[i])
            erma__seal_end(&t->sessions[i]->seal);
        free(t->sessions[i]);
    }
    for (struct backlog *b = rpc->client.free_backlog, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(t->sessions);
    free(t->free_nums);
    free(rpc->client.busy);
    free(t->by_token);
    free(t->by_peer);
}

void erma_rpc_destroy(struct erma_rpc *rpc)
{
    if (!rpc)
        return;
    rpc->destroying = true; /* continuations cannot enqueue more */
    for (uint32_t i = 0; i < rpc->table.n; i++)
        if (rpc->table.sessions[i] && rpc->table.sessions[i]->state != FREE)
            erma__session_fail(rpc, rpc->table.sessions[i], ERMA_ESESSRESET);
    erma__run_completions(rpc);
    erma__ep_tx_flush(rpc->ep); /* before the sessions and buffers it may point at go */
    if (workers_wait(rpc))
        reqs_free(rpc);
    sessions_free(rpc);
    erma__ep_unregister(rpc->ep, rpc);
    rpc_free(rpc);
}

void erma_rpc_get_stats(const struct erma_rpc *rpc, struct erma_rpc_stats *out)
{
    *out = rpc->stats;
}

struct erma_endpoint *erma_rpc_endpoint(const struct erma_rpc *rpc)
{
    return rpc->ep;
}

struct erma_nexus *erma_rpc_nexus(const struct erma_rpc *rpc)
{
    return rpc->nx;
}
