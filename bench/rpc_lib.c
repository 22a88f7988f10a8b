/* RPC measurements shared by rpc_perf and the benchmarks built on it. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "erma/clock.h"
#include "erma/endpoint.h"
#include "erma/sim.h"
#include "erma/log.h"
#include "erma/sdk/rand.h"
#include "erma/rpc.h"



static void echo(struct erma_req *req, void *ctx)
{
    (void)ctx;
    uint32_t resp_size = 32;
    if (erma_req_size(req) >= 4)
        memcpy(&resp_size, erma_req_data(req), 4);
    struct erma_msgbuf *resp = erma_req_resp_buf(req), own;
    if (resp_size > resp->max_size) {
        if (erma_msgbuf_alloc(erma_req_rpc(req), resp_size, &own) != ERMA_OK)
            resp_size = resp->max_size;
        else
            resp = &own;
    }
    erma_msgbuf_resize(resp, resp_size);
    if (erma_req_size(req) >= 12 && resp_size >= 8) /* the request's tag */
        memcpy(resp->data, erma_req_data(req) + 4, 8);
    erma_req_respond(req, resp);
}

static const uint8_t *bench_psk;
static unsigned bench_workers;

void bench_rpc_set_psk(const uint8_t *psk)
{
    bench_psk = psk;
}

void bench_rpc_set_workers(unsigned n)
{
    bench_workers = n;
}

/* A nexus with the psk set, and `workers` worker threads. */
static int nexus_create(struct erma_nexus **out, unsigned workers)
{
    const struct erma_nexus_cfg cfg = {.psk = bench_psk, .workers = workers};
    return erma_nexus_create(&cfg, out);
}

int bench_rpc_echo_nexus(struct erma_nexus **out)
{
    int rc = nexus_create(out, bench_workers);
    if (rc == ERMA_OK &&
        (rc = erma_handler_register(*out, BENCH_ECHO, echo,
                                    bench_workers ? ERMA_WORKER : ERMA_DISPATCH, NULL)) != ERMA_OK)
        erma_nexus_destroy(*out);
    return rc;
}

int bench_rpc_server_ext(const char *uri, const struct erma_rpc_cfg *cfg,
                         const struct erma_endpoint_cfg *ep_cfg, uint64_t max_ns,
                         const struct bench_server_ext *ext)
{
    struct erma_nexus *nx;
    struct erma_endpoint *ep = NULL;
    struct erma_rpc *rpc = NULL;
    int rc = bench_rpc_echo_nexus(&nx);
    if (rc != ERMA_OK) {
        ERMA_ERROR("rpc server on %s: %s", uri, erma_strerror(rc));
        return rc;
    }
    if (ext)
        rc = ext->before(nx, ext->ctx);
    if (rc == ERMA_OK)
        rc = erma_endpoint_create(uri, 0, ep_cfg, &ep);
    if (rc == ERMA_OK)
        rc = erma_rpc_create(nx, ep, cfg, &rpc);
    if (rc == ERMA_OK && ext)
        rc = ext->after(ep, ext->ctx);
    const uint64_t end = erma_now_ns() + max_ns;
    while (rc == ERMA_OK && erma_now_ns() < end && getppid() != 1)
        erma_endpoint_run(ep, 10000000);
    if (rc != ERMA_OK)
        ERMA_ERROR("rpc server on %s: %s", uri, erma_strerror(rc));
    if (ext)
        ext->fini(ext->ctx);
    if (rpc)
        erma_rpc_destroy(rpc);
    erma_endpoint_destroy(ep);
    erma_nexus_destroy(nx);
    return rc;
}

int bench_rpc_server(const char *uri, const struct erma_rpc_cfg *cfg,
                     const struct erma_endpoint_cfg *ep_cfg, uint64_t max_ns)
{
    return bench_rpc_server_ext(uri, cfg, ep_cfg, max_ns, NULL);
}

pid_t bench_rpc_server_fork_ext(const char *uri, const struct erma_rpc_cfg *cfg,
                                const struct erma_endpoint_cfg *ep_cfg, int cpu, uint64_t max_ns,
                                const struct bench_server_ext *ext)
{
    const pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the benchmark */
        bench_pin(cpu);
        _exit(bench_rpc_server_ext(uri, cfg, ep_cfg, max_ns, ext) == ERMA_OK ? 0 : 1);
    }
    return pid;
}

pid_t bench_rpc_server_fork(const char *uri, const struct erma_rpc_cfg *cfg,
                            const struct erma_endpoint_cfg *ep_cfg, int cpu, uint64_t max_ns)
{
    return bench_rpc_server_fork_ext(uri, cfg, ep_cfg, cpu, max_ns, NULL);
}

void bench_rpc_server_stop(pid_t child)
{
    if (child <= 0)
        return;
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
}

struct client {
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    struct erma_rpc *rpc;
    int *sess;
    uint32_t nsess;
};

/* With ERMA_BENCH_CC set, prints each session's congestion-control state. */
static void print_cc(const struct client *c)
{
    if (!getenv("ERMA_BENCH_CC"))
        return;
    for (uint32_t i = 0; i < c->nsess; i++) {
        struct erma_session_cc cc;
        if (erma_session_cc_stats(c->rpc, c->sess[i], &cc) == ERMA_OK)
            fprintf(stderr, "session %u: rate %.2f Gb/s, avg RTT %.1f us, min %.1f us, "
                    "%llu samples, %llu bypassed, %llu paced, %llu direct\n", i,
                    cc.rate_bps / 1e9, cc.avg_rtt_ns / 1e3, cc.min_rtt_ns / 1e3,
                    (unsigned long long)cc.rtt_samples, (unsigned long long)cc.timely_bypasses,
                    (unsigned long long)cc.paced_pkts, (unsigned long long)cc.direct_pkts);
    }
}

static void client_close(struct client *c)
{
    print_cc(c);
    erma_rpc_destroy(c->rpc);
    erma_endpoint_destroy(c->ep);
    erma_nexus_destroy(c->nx);
    free(c->sess);
}

/* Opens client endpoint o->thread_id and connects o->sessions sessions (at
 * least 1) to server endpoint o->thread_id. */
static int client_open(struct client *c, const struct bench_rpc_opts *o)
{
    memset(c, 0, sizeof *c);
    int rc = nexus_create(&c->nx, 0);
    if (rc == ERMA_OK && o->symmetric) /* this side serves the peer's load too */
        rc = erma_handler_register(c->nx, BENCH_ECHO, echo, ERMA_DISPATCH, NULL);
    if (rc == ERMA_OK)
        rc = erma_endpoint_create(o->uri, o->thread_id, o->ep_cfg, &c->ep);
    if (rc == ERMA_OK && (rc = erma_rpc_create(c->nx, c->ep, o->cfg, &c->rpc)) != ERMA_OK)
        erma_endpoint_destroy(c->ep);
    if (rc != ERMA_OK) {
        erma_nexus_destroy(c->nx);
        return rc;
    }
    c->nsess = o->sessions ? o->sessions : 1;
    c->sess = calloc(c->nsess, sizeof *c->sess);
    rc = c->sess ? ERMA_OK : ERMA_ENOMEM;
    for (uint32_t i = 0; rc == ERMA_OK && i < c->nsess; i++) {
        const int s = erma_session_create(c->rpc, o->server, o->thread_id);
        if (s < 0)
            rc = s;
        c->sess[i] = s;
    }
    /* The server may still be starting: wait up to 10 s for every session. */
    const uint64_t end = erma_now_ns() + 10000000000ull;
    for (uint32_t i = 0; rc == ERMA_OK && i < c->nsess; i++) {
        while (!erma_session_connected(c->rpc, c->sess[i]) && erma_now_ns() < end)
            erma_endpoint_run_once(c->ep);
        if (!erma_session_connected(c->rpc, c->sess[i]))
            rc = ERMA_ETIMEDOUT;
    }
    if (rc != ERMA_OK)
        client_close(c);
    return rc;
}

struct call {
    struct erma_msgbuf req, resp;
    uint64_t t0, tag;
    int done, status;
    struct rate_state *rate; /* the rate load it belongs to */
};

static int call_alloc(struct client *c, struct call *k, const struct bench_rpc_opts *o)
{
    const uint32_t size = o->size < 4 ? 4 : o->size;
    int rc = erma_msgbuf_alloc(c->rpc, size, &k->req);
    if (rc == ERMA_OK)
        rc = erma_msgbuf_alloc(c->rpc, o->resp_size, &k->resp);
    if (rc == ERMA_OK) {
        memset(k->req.data, 0x5a, size);
        memcpy(k->req.data, &o->resp_size, 4);
    }
    return rc;
}

static void call_free(struct client *c, struct call *k)
{
    erma_msgbuf_free(c->rpc, &k->req);
    erma_msgbuf_free(c->rpc, &k->resp);
}

static void on_done(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    (void)resp;
    struct call *k = tag;
    k->status = status;
    k->done = 1;
}

static bool call_done(void *ctx)
{
    return ((const struct call *)ctx)->done;
}

/* Runs one request to completion; returns its status. The loop polls or
 * sleeps while waiting as the endpoint's cfg.busy_poll says. */
static int call_sync(struct client *c, struct call *k, int sess)
{
    k->done = 0;
    int rc = erma_rpc_call(c->rpc, sess, BENCH_ECHO, &k->req, &k->resp, on_done, k);
    if (rc != ERMA_OK)
        return rc;
    if (erma_endpoint_run_until(c->ep, call_done, k, 10000000000ull) != ERMA_OK)
        return ERMA_ETIMEDOUT;
    return k->status;
}

int bench_rpc_lat(const struct bench_rpc_opts *o, struct bench_lat *out)
{
    struct client c;
    struct call k = {0};
    int rc = client_open(&c, o);
    if (rc != ERMA_OK)
        return rc;
    const uint64_t warmup = o->iters / 10 + 1;
    uint64_t *rtt = malloc(o->iters * sizeof *rtt), n = 0;
    rc = rtt ? call_alloc(&c, &k, o) : ERMA_ENOMEM;
    for (uint64_t i = 0; rc == ERMA_OK && i < o->iters + warmup; i++) {
        const uint64_t t0 = erma_now_ns();
        rc = call_sync(&c, &k, c.sess[0]);
        if (i >= warmup)
            rtt[n++] = erma_now_ns() - t0;
    }
    if (rc == ERMA_OK)
        bench_lat_from_ns(rtt, n, out);
    free(rtt);
    call_free(&c, &k);
    client_close(&c);
    return rc;
}

struct rate_state {
    struct client *c;
    const struct bench_rpc_opts *o;
    struct erma_rand rng;
    uint64_t completed, failed, wrong, issued, tag;
    uint32_t inflight;
    bool check; /* requests carry a tag (12 bytes) the answer returns (8) */
    struct call *free_list[4096];
    uint32_t nfree;
};

static void on_rate(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    struct call *k = tag;
    struct rate_state *r = k->rate;
    if (status != ERMA_OK)
        r->failed++;
    else if (r->check && (resp->size < 8 || memcmp(resp->data, &k->tag, 8) != 0))
        r->wrong++;
    else
        r->completed++;
    r->inflight--;
    r->free_list[r->nfree++] = k;
}

/* Issues batches of o->batch requests to random sessions while under the
 * window (and under o->max_calls). */
static void rate_issue(struct rate_state *r)
{
    const uint64_t max = r->o->max_calls ? r->o->max_calls : UINT64_MAX;
    while (r->inflight + r->o->batch <= r->o->window && r->nfree >= r->o->batch &&
           r->issued < max) {
        for (uint32_t b = 0; b < r->o->batch && r->issued < max; b++) {
            struct call *k = r->free_list[--r->nfree];
            const int s = r->c->sess[erma_rand_below(&r->rng, r->c->nsess)];
            k->tag = ++r->tag;
            if (r->check)
                memcpy(k->req.data + 4, &k->tag, 8);
            if (erma_rpc_call(r->c->rpc, s, BENCH_ECHO, &k->req, &k->resp, on_rate, k) !=
                ERMA_OK) {
                r->free_list[r->nfree++] = k;
                return;
            }
            r->inflight++;
            r->issued++;
        }
    }
}

/* Runs the load until o->seconds pass, or with o->max_calls until every
 * call has its answer (or o->seconds pass); out gets the counts. */
static void rate_loop(struct rate_state *r, struct bench_raw_rate *out)
{
    const uint64_t start = erma_now_ns(), end = start + (uint64_t)(r->o->seconds * 1e9);
    uint64_t now = start;
    while (now < end && !(r->o->max_calls && r->issued == r->o->max_calls && !r->inflight)) {
        rate_issue(r);
        erma_endpoint_run_once(r->c->ep);
        now = erma_now_ns();
    }
    *out = (struct bench_raw_rate){.echoes = r->completed, .lost = r->failed, .wrong = r->wrong,
                                   .seconds = (double)(now - start) / 1e9};
    out->mpps = (double)r->completed / out->seconds / 1e6;
}

/* Allocates the window's calls; NULL when out of memory. */
static struct rate_state *rate_open(struct client *c, const struct bench_rpc_opts *o,
                                    struct call *calls)
{
    struct rate_state *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    *r = (struct rate_state){.c = c, .o = o, .check = o->size >= 12 && o->resp_size >= 8,
                             .tag = (uint64_t)o->thread_id << 56};
    erma_rand_seed(&r->rng, 1 + o->thread_id);
    int rc = ERMA_OK;
    for (uint32_t i = 0; rc == ERMA_OK && i < o->window; i++) {
        rc = call_alloc(c, &calls[i], o);
        calls[i].rate = r;
        r->free_list[r->nfree++] = &calls[i];
    }
    if (rc != ERMA_OK) {
        free(r);
        return NULL;
    }
    return r;
}

/* The rate load from one endpoint; with linger > 0 it serves on that long. */
static int rate_side(const struct bench_rpc_opts *o, double linger, struct bench_raw_rate *out)
{
    struct client c;
    int rc = client_open(&c, o);
    bench_gate_wait(o->start);
    if (rc != ERMA_OK)
        return rc;
    struct call *calls = calloc(o->window, sizeof *calls);
    struct rate_state *r = calls ? rate_open(&c, o, calls) : NULL;
    rc = r ? ERMA_OK : ERMA_ENOMEM;
    if (rc == ERMA_OK) {
        rate_loop(r, out);
        rc = r->completed ? ERMA_OK : ERMA_ETIMEDOUT;
        if (linger > 0)
            erma_endpoint_run(c.ep, (uint64_t)(linger * 1e9));
    }
    client_close(&c); /* fails what is in flight; the pool takes the buffers with it */
    free(calls);
    free(r);
    return rc;
}

/* One side of the symmetric rate; the peer sends the same load back. */
static int rate_both(void *ctx, bool peer, struct bench_raw_rate *out)
{
    struct bench_rpc_opts o = *(const struct bench_rpc_opts *)ctx;
    if (peer) {
        o.uri = o.server;
        o.server = ((const struct bench_rpc_opts *)ctx)->uri;
    }
    return rate_side(&o, 0.3, out);
}

int bench_rpc_rate(const struct bench_rpc_opts *o, struct bench_raw_rate *out)
{
    if (o->window == 0 || o->batch == 0 || o->window > 4096 || (o->symmetric && o->start)) {
        bench_gate_wait(o->start);
        return ERMA_EINVAL;
    }
    if (!o->symmetric)
        return rate_side(o, 0, out);
    return bench_both_sides(rate_both, (void *)o, o->seconds, o->peer_cpu, out);
}

int bench_rpc_bw(const struct bench_rpc_opts *o, double *gbps)
{
    struct client c;
    struct call k = {0};
    int rc = client_open(&c, o);
    if (rc != ERMA_OK)
        return rc;
    rc = call_alloc(&c, &k, o);
    uint64_t bytes = 0;
    const uint64_t start = erma_now_ns(), end = start + (uint64_t)(o->seconds * 1e9);
    uint64_t now = start;
    while (rc == ERMA_OK && now < end) {
        rc = call_sync(&c, &k, c.sess[0]);
        bytes += o->size > o->resp_size ? o->size : o->resp_size;
        now = erma_now_ns();
    }
    *gbps = rc == ERMA_OK ? (double)bytes * 8 / (double)(now - start) : 0;
    if (getenv("ERMA_BENCH_STATS")) {
        struct erma_rpc_stats st;
        erma_rpc_get_stats(c.rpc, &st);
        fprintf(stderr, "# bw: %llu packets sent again (%llu fast, %llu spurious) in %llu timeouts "
                        "(%llu spurious), %llu paths pruned\n",
                (unsigned long long)st.retransmitted_pkts, (unsigned long long)st.fast_retransmits,
                (unsigned long long)st.spurious_retransmits, (unsigned long long)st.retransmits,
                (unsigned long long)st.spurious_timeouts, (unsigned long long)st.paths_pruned);
        struct erma_endpoint_stats es;
        erma_endpoint_get_stats(c.ep, &es);
        fprintf(stderr, "# bw: client endpoint %llu packets out, %llu in, %llu dropped at tx, "
                        "%llu malformed\n",
                (unsigned long long)es.tx_pkts, (unsigned long long)es.rx_pkts,
                (unsigned long long)es.tx_dropped, (unsigned long long)es.rx_bad);
    }
    call_free(&c, &k);
    client_close(&c);
    return rc;
}

void bench_respond_32(struct erma_req *req, void *ctx)
{
    (void)ctx;
    struct erma_msgbuf *r = erma_req_resp_buf(req);
    erma_msgbuf_resize(r, 32);
    erma_req_respond(req, r);
}

uint16_t bench_sim_spread_port(const struct erma_sim *sim, unsigned paths, uint16_t server_port)
{
    for (uint16_t base = 40000; base < 60000; base = (uint16_t)(base + paths)) {
        unsigned seen = 0, back = 0;
        for (uint16_t k = 0; k < paths; k++) {
            const uint16_t c = (uint16_t)(base + k), sv = (uint16_t)(server_port + k);
            seen |= 1u << erma_sim_flow_path(sim, 0, c, 1, server_port);
            back |= 1u << erma_sim_flow_path(sim, 1, sv, 0, c);
        }
        if (seen == (1u << paths) - 1 && back == seen)
            return base;
    }
    return 0;
}
