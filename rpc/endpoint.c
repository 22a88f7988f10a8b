/* The endpoint: creation, the event loop, TX batching, deferred continuations. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "erma/clock.h"
#include "erma/log.h"
#include "erma/sim.h"
#include "internal.h"

#define WORKER_DONE_QUEUE 65536

static void cfg_defaults(struct erma_rpc_cfg *c)
{
    if (!c->credits)
        c->credits = 32;
    if (!c->rx_ring)
        c->rx_ring = 4096;
    if (!c->mtu)
        c->mtu = 1500;
    if (!c->rto_ns)
        c->rto_ns = 5000000;
    if (!c->failure_ns)
        c->failure_ns = 500000000;
    if (!c->keepalive_ns)
        c->keepalive_ns = c->failure_ns / 5;
    if (!c->connect_retry_ns)
        c->connect_retry_ns = 20000000;
    if (!c->connect_timeout_ns)
        c->connect_timeout_ns = 3000000000ull;
    if (!c->max_sessions_per_peer)
        c->max_sessions_per_peer = 64;
    if (!c->idle_wait_ns)
        c->idle_wait_ns = 50000;
}

static int reg_chunk(void *ctx, void *addr, size_t len)
{
    return erma_transport_reg_mem(ctx, addr, len);
}

/* Timely and the wheel, with defaults from the transport's hints. */
static int cc_setup(struct erma_rpc *rpc)
{
    /* The endpoint's settings, else the transport's hints, else 25 Gb/s and 10 us. */
    double link = rpc->cfg.link_bps > 0 ? rpc->cfg.link_bps : (double)rpc->tr->link_bps;
    uint64_t base = rpc->cfg.base_rtt_ns ? rpc->cfg.base_rtt_ns : rpc->tr->base_rtt_ns;
    link = link > 0 ? link : 25e9;
    base = base ? base : 10000;
    rpc->timely_cfg = rpc->cfg.timely ? *rpc->cfg.timely : erma_timely_cfg_for(link, base);
    rpc->cfg.timely = NULL; /* the copy above is the endpoint's own */
    rpc->timely_cfg.bypass = !rpc->cfg.cc.no_timely_bypass;
    if (erma_timely_cfg_check(&rpc->timely_cfg) != ERMA_OK)
        return ERMA_EINVAL;
    struct erma_wheel_cfg wc = erma_wheel_cfg_for(rpc->tr->max_pkt, rpc->timely_cfg.floor_bps);
    /* A session may queue all its credits in the wheel at the floor rate. */
    wc.horizon_ns *= ERMA_MAX_CREDITS;
    wc.capacity = 1u << 16;
    return erma_wheel_init(&rpc->wheel, &wc, erma_now_ns());
}

int erma_rpc_set_cc(struct erma_rpc *rpc, const struct erma_cc_switches *sw)
{
    if (!rpc || !sw)
        return ERMA_EINVAL;
    rpc->cfg.cc = *sw;
    rpc->timely_cfg.bypass = !sw->no_timely_bypass;
    if (sw->off) /* back to line rate: nothing stays paced */
        for (uint32_t i = 0; i < rpc->nsessions; i++)
            if (rpc->sessions[i])
                rpc->sessions[i]->timely.rate_bps = rpc->timely_cfg.link_bps;
    return ERMA_OK;
}

int erma_rpc_create(struct erma_nexus *nx, uint8_t tid, const struct erma_rpc_cfg *cfg,
                    struct erma_rpc **out)
{
    if (!nx || !out || tid >= ERMA_MAX_THREADS || sodium_init() < 0)
        return ERMA_EINVAL;
    struct erma_rpc *rpc = calloc(1, sizeof *rpc);
    if (!rpc)
        return ERMA_ENOMEM;
    rpc->nx = nx;
    rpc->tid = tid;
    if (cfg)
        rpc->cfg = *cfg;
    cfg_defaults(&rpc->cfg);
    char uri[512], base[512];
    snprintf(base, sizeof base, "%s:%u%s", nx->scheme_host, nx->base_port, nx->query);
    int rc = erma_endpoint_uri(base, tid, uri, sizeof uri);
    if (rc == ERMA_OK && (rpc->cfg.credits > rpc->cfg.rx_ring ||
                          rpc->cfg.credits > ERMA_MAX_CREDITS))
        rc = ERMA_EINVAL;
    const struct erma_transport_cfg tcfg = {.mtu = rpc->cfg.mtu, .rx_ring = rpc->cfg.rx_ring,
                                            .rx_drop = rpc->cfg.fault_drop,
                                            .drop_seed = rpc->cfg.seed + tid};
    if (rc == ERMA_OK)
        rc = erma_transport_open(uri, &tcfg, &rpc->tr);
    if (rc == ERMA_OK) {
        const struct erma_pool_cfg pcfg = {.reg = reg_chunk, .reg_ctx = rpc->tr};
        rc = erma_pool_create(&pcfg, &rpc->pool);
    }
    if (rc == ERMA_OK)
        rc = erma_mpsc_init(&rpc->worker_done, nx->nworkers ? WORKER_DONE_QUEUE : 1);
    if (rc == ERMA_OK)
        rc = cc_setup(rpc);
    if (rc == ERMA_OK && nx->secure && /* sealed copies of a TX batch */
        !(rpc->sealed = malloc((size_t)ERMA_MAX_BURST * rpc->tr->max_pkt)))
        rc = ERMA_ENOMEM;
    if (rc != ERMA_OK) {
        free(rpc->sealed);
        erma_mpsc_destroy(&rpc->worker_done);
        erma_pool_destroy(rpc->pool);
        erma_transport_close(rpc->tr);
        free(rpc);
        return rc;
    }
    rpc->pkt_data = rpc->tr->max_pkt - ERMA_HDR_SIZE - (nx->secure ? ERMA_SEAL_OVERHEAD : 0);
    rpc->pool_locked = nx->nworkers > 0;
    pthread_mutex_init(&rpc->pool_lock, NULL);
    const uint64_t seed = rpc->cfg.seed ? rpc->cfg.seed
                                        : erma_mono_ns() ^ (uint64_t)getpid() << 32;
    erma_rand_seed(&rpc->rng, seed ^ (uint64_t)tid << 56);
    randombytes_buf(rpc->cookie_key, sizeof rpc->cookie_key);
    rpc->scan_ns = rpc->cfg.rto_ns / 4 < 1000000 ? rpc->cfg.rto_ns / 4 : 1000000;
    if (rpc->scan_ns == 0)
        rpc->scan_ns = 1;
    const struct erma_rpc_cfg *c = &rpc->cfg;
    uint64_t sm = c->keepalive_ns < c->connect_retry_ns ? c->keepalive_ns : c->connect_retry_ns;
    sm = sm < c->failure_ns / 4 ? sm : c->failure_ns / 4;
    rpc->sm_scan_ns = sm / 2 ? sm / 2 : 1;
    refresh_clock(rpc);
    rpc->next_scan_ns = rpc->loop_now + rpc->scan_ns;
    rpc->next_sm_scan_ns = rpc->loop_now + rpc->sm_scan_ns;
    rpc->idle_since = rpc->loop_now;
    *out = rpc;
    return ERMA_OK;
}

void erma_rpc_destroy(struct erma_rpc *rpc)
{
    if (!rpc)
        return;
    rpc->destroying = true; /* continuations cannot enqueue more */
    for (uint32_t i = 0; i < rpc->nsessions; i++)
        if (rpc->sessions[i] && rpc->sessions[i]->state != FREE)
            erma_session_fail(rpc, rpc->sessions[i], ERMA_ESESSRESET);
    erma_run_completions(rpc);
    erma_tx_flush(rpc); /* before the sessions and buffers it may point at go */
    /* Requests still on worker threads refer to their sessions: wait for them. */
    for (unsigned spins = 0; rpc->in_workers && spins < 5000000; spins++) {
        struct erma_req *rq = erma_mpsc_pop(&rpc->worker_done);
        if (rq)
            erma_worker_response(rpc, rq);
        else
            sched_yield();
    }
    if (rpc->in_workers) /* their requests stay allocated: the workers still use them */
        ERMA_ERROR("rpc: %u worker handlers did not return", rpc->in_workers);
    for (struct erma_req *rq = rpc->all_reqs, *next; rq && !rpc->in_workers; rq = next) {
        next = rq->all;
        free(rq);
    }
    for (uint32_t i = 0; i < rpc->nsessions; i++) {
        if (rpc->sessions[i])
            erma_seal_end(&rpc->sessions[i]->seal);
        free(rpc->sessions[i]);
    }
    for (struct backlog *b = rpc->free_backlog, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(rpc->sessions);
    free(rpc->free_nums);
    free(rpc->busy);
    free(rpc->by_token);
    free(rpc->by_peer);
    free(rpc->sealed);
    free(rpc->done);
    erma_mpsc_destroy(&rpc->worker_done);
    erma_wheel_destroy(&rpc->wheel);
    erma_pool_destroy(rpc->pool);
    pthread_mutex_destroy(&rpc->pool_lock);
    erma_transport_close(rpc->tr);
    free(rpc);
}

/* ---- TX batch ---- */

/* Replaces tx[i] by its sealed copy in sealed[i] (header and data in one
 * segment, the data encrypted, counter and tag after it). */
static void tx_seal(struct erma_rpc *rpc, unsigned i)
{
    struct erma_tx_pkt *p = &rpc->tx[i];
    struct session *s = rpc->tx_sess[i];
    uint8_t *out = rpc->sealed + (size_t)i * rpc->tr->max_pkt;
    const uint8_t *hdr = p->hdr;
    const uint8_t *data = p->data_len ? p->data : hdr + ERMA_HDR_SIZE;
    const uint32_t len = p->data_len ? p->data_len : p->hdr_len - ERMA_HDR_SIZE;
    p->hdr_len = erma_seal(&s->seal, hdr, data, len, out);
    p->hdr = out;
    p->data = NULL;
    p->data_len = 0;
}

void erma_tx_flush(struct erma_rpc *rpc)
{
    if (rpc->ntx == 0)
        return;
    for (unsigned i = 0; i < rpc->ntx; i++)
        if (rpc->tx_sess[i] && rpc->tx_sess[i]->seal.on)
            tx_seal(rpc, i);
    const int n = erma_tx_burst(rpc->tr, rpc->tx, rpc->ntx);
    if (n < 0)
        ERMA_WARN("rpc: tx_burst failed: %s", erma_strerror(n));
    const unsigned sent = n < 0 ? 0 : (unsigned)n;
    rpc->stats.tx_pkts += sent;
    rpc->stats.tx_dropped += rpc->ntx - sent;
    rpc->ntx = 0;
}

static struct erma_tx_pkt *tx_next(struct erma_rpc *rpc, struct session *s)
{
    if (rpc->ntx == ERMA_MAX_BURST)
        erma_tx_flush(rpc);
    rpc->tx_sess[rpc->ntx] = s;
    return &rpc->tx[rpc->ntx++];
}

uint8_t *erma_tx_ctrl(struct erma_rpc *rpc, struct session *s, const struct erma_addr *dst,
                      uint32_t len)
{
    struct erma_tx_pkt *p = tx_next(rpc, s);
    uint8_t *buf = rpc->ctrl[p - rpc->tx];
    *p = (struct erma_tx_pkt){.dst = dst, .hdr = buf, .hdr_len = len};
    return buf;
}

void erma_tx_data(struct erma_rpc *rpc, struct session *s, const struct erma_addr *dst,
                  const uint8_t *hdr, const uint8_t *data, uint32_t data_len)
{
    struct erma_tx_pkt *p = tx_next(rpc, s);
    if (data == hdr + ERMA_HDR_SIZE) /* header sits before the data: one segment */
        *p = (struct erma_tx_pkt){.dst = dst, .hdr = hdr, .hdr_len = ERMA_HDR_SIZE + data_len};
    else
        *p = (struct erma_tx_pkt){.dst = dst, .hdr = hdr, .hdr_len = ERMA_HDR_SIZE,
                                  .data = data, .data_len = data_len};
}

/* ---- continuations ---- */

void erma_complete(struct erma_rpc *rpc, erma_cont_fn cont, void *tag, int status,
                   struct erma_msgbuf *resp)
{
    if (status == ERMA_OK)
        rpc->stats.rpcs_done++;
    else
        rpc->stats.rpcs_failed++;
    if (status != ERMA_OK && resp)
        resp->size = 0;
    if (rpc->ndone == rpc->done_cap) {
        const unsigned cap = rpc->done_cap ? 2 * rpc->done_cap : 64;
        struct completion *d = realloc(rpc->done, cap * sizeof *d);
        if (!d) { /* no memory to defer: flush so no packet refers to the buffers */
            erma_tx_flush(rpc);
            cont(rpc, tag, status, resp);
            return;
        }
        rpc->done = d;
        rpc->done_cap = cap;
    }
    rpc->done[rpc->ndone++] = (struct completion){cont, tag, status, resp};
}

void erma_run_completions(struct erma_rpc *rpc)
{
    if (rpc->ndone == 0)
        return;
    erma_tx_flush(rpc); /* a retransmitted request may still sit in the batch */
    for (unsigned i = 0; i < rpc->ndone; i++) {
        const struct completion c = rpc->done[i];
        c.cont(rpc, c.tag, c.status, c.resp);
    }
    rpc->ndone = 0;
}

/* ---- event loop ---- */

int erma_rpc_run_once(struct erma_rpc *rpc)
{
    struct erma_rx_pkt rx[ERMA_MAX_BURST];
    erma_tx_flush(rpc); /* what the application queued since the last pass goes first */
    if (rpc->rma_hook.flush)
        rpc->rma_hook.flush(rpc->rma_hook.ctx);
    const int n = erma_rx_burst(rpc->tr, rx, ERMA_MAX_BURST);
    refresh_clock(rpc);
    rpc->stats.rx_pkts += (uint64_t)(n > 0 ? n : 0);
    for (int i = 0; i < n; i++) {
        struct erma_hdr h;
        if (erma_hdr_check(rx[i].data, rx[i].len, &h) != ERMA_OK) {
            rpc->stats.rx_bad++;
        } else if (h.proto == ERMA_PROTO_RPC) {
            erma_rpc_rx(rpc, &h, &rx[i]);
        } else if (h.proto == ERMA_PROTO_SM) {
            erma_sm_rx(rpc, &h, &rx[i]);
        } else if (rpc->rma_hook.rx) {
            rpc->rma_hook.rx(rpc->rma_hook.ctx, &h, &rx[i]);
        } else {
            rpc->stats.rx_bad++;
        }
    }
    for (struct erma_req *rq; (rq = erma_mpsc_pop(&rpc->worker_done));)
        erma_worker_response(rpc, rq);
    const uint64_t now = rpc->loop_now; /* one clock reading per pass */
    int work = n;
    if (erma_wheel_count(&rpc->wheel)) {
        const uint32_t before = erma_wheel_count(&rpc->wheel);
        erma_wheel_release(rpc, now);
        work += (int)(before - erma_wheel_count(&rpc->wheel));
    }
    if (rpc->rma_hook.poll)
        work += rpc->rma_hook.poll(rpc->rma_hook.ctx, now);
    if (now >= rpc->next_scan_ns) {
        erma_busy_scan(rpc, now);
        rpc->next_scan_ns = now + rpc->scan_ns;
    }
    if (now >= rpc->next_sm_scan_ns) {
        erma_sessions_scan(rpc, now);
        rpc->next_sm_scan_ns = now + rpc->sm_scan_ns;
    }
    erma_run_completions(rpc);
    erma_tx_flush(rpc);
    if (rpc->rma_hook.flush) /* one-sided ops continuations submitted: before any sleep */
        rpc->rma_hook.flush(rpc->rma_hook.ctx);
    return work;
}

/* Once nothing happened for idle_wait_ns (no packet, no request at a
 * worker, whose answer would not wake us; a pass leaves nothing unsent),
 * sleeps until a packet, the next timer or end, at most
 * ERMA_IDLE_SLEEP_MAX_NS. Idleness carries over from one run call to the
 * next, so a loop of short erma_rpc_run() calls sleeps as one long one. */
static void idle_wait(struct erma_rpc *rpc, int work, uint64_t end)
{
    const uint64_t now = rpc->loop_now;
    if (work > 0 || rpc->in_workers) {
        rpc->idle_since = now;
        return;
    }
    if (now - rpc->idle_since < rpc->cfg.idle_wait_ns)
        return;
    uint64_t until = erma_rpc_next_timer(rpc);
    until = until < end ? until : end;
    if (until > now + ERMA_IDLE_SLEEP_MAX_NS)
        until = now + ERMA_IDLE_SLEEP_MAX_NS;
    if (until > now)
        erma_transport_wait(rpc->tr, until - now);
}

int erma_rpc_run_until(struct erma_rpc *rpc, bool (*done)(void *ctx), void *ctx,
                       uint64_t timeout_ns)
{
    const uint64_t start = erma_now_ns();
    const uint64_t end = timeout_ns > UINT64_MAX - start ? UINT64_MAX : start + timeout_ns;
    for (;;) {
        const int work = erma_rpc_run_once(rpc);
        if (done && done(ctx))
            return ERMA_OK;
        if (rpc->loop_now >= end)
            return ERMA_ETIMEDOUT;
        if (!rpc->cfg.busy_poll)
            idle_wait(rpc, work, end);
    }
}

void erma_rpc_run(struct erma_rpc *rpc, uint64_t ns)
{
    erma_rpc_run_until(rpc, NULL, NULL, ns);
}

uint64_t erma_rpc_next_timer(const struct erma_rpc *rpc)
{
    /* Session management has nothing to time without sessions. */
    const uint64_t sm = rpc->active_sessions ? rpc->next_sm_scan_ns : UINT64_MAX;
    uint64_t t = rpc->nbusy && rpc->next_scan_ns < sm ? rpc->next_scan_ns : sm;
    if (erma_wheel_count(&rpc->wheel)) { /* the next slot may hold due packets */
        const uint64_t w = rpc->wheel.cur_start_ns + rpc->wheel.slot_ns;
        t = w < t ? w : t;
    }
    if (rpc->rma_hook.next_timer) {
        const uint64_t h = rpc->rma_hook.next_timer(rpc->rma_hook.ctx);
        t = h < t ? h : t;
    }
    return t;
}

int erma_rpc_attach(struct erma_rpc *rpc, uint8_t proto, const struct erma_proto_hook *hook)
{
    if (!rpc || proto != ERMA_PROTO_RMA || (hook && !hook->rx))
        return ERMA_EINVAL;
    if (hook && rpc->rma_hook.rx)
        return ERMA_EAGAIN;
    rpc->rma_hook = hook ? *hook : (struct erma_proto_hook){0};
    return ERMA_OK;
}

struct erma_transport *erma_rpc_transport(struct erma_rpc *rpc)
{
    return rpc->tr;
}

int erma_rpc_uri(const struct erma_rpc *rpc, char *out, size_t len)
{
    return erma_transport_addr_str(rpc->tr, &rpc->tr->local, out, len);
}

uint8_t erma_rpc_thread_id(const struct erma_rpc *rpc)
{
    return rpc->tid;
}

void erma_rpc_get_stats(const struct erma_rpc *rpc, struct erma_rpc_stats *out)
{
    *out = rpc->stats;
}

int erma_sim_run_rpcs(struct erma_sim *sim, struct erma_rpc **rpcs, unsigned n,
                      uint64_t duration_ns, bool (*done)(void *ctx), void *ctx)
{
    erma_sim_use_clock(sim);
    const uint64_t end = erma_sim_now(sim) + duration_ns;
    if (done && done(ctx))
        return ERMA_OK;
    for (;;) {
        int work = 0;
        for (unsigned i = 0; i < n; i++)
            work += erma_rpc_run_once(rpcs[i]);
        if (done && done(ctx))
            return ERMA_OK; /* before time moves on: a completion need not count as work */
        if (work)
            continue;
        uint64_t t = erma_sim_next_event(sim);
        for (unsigned i = 0; i < n; i++) {
            const uint64_t timer = erma_rpc_next_timer(rpcs[i]);
            t = timer < t ? timer : t;
        }
        if (t <= erma_sim_now(sim))
            t = erma_sim_now(sim) + 1;
        if (t > end) {
            erma_sim_advance_to(sim, end);
            return done && done(ctx) ? ERMA_OK : ERMA_ETIMEDOUT;
        }
        erma_sim_advance_to(sim, t);
    }
}
