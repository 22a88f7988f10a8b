/* Incast on the sim fabric (bench.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "endpoint/proto.h" /* an endpoint's transport (max_pkt) */
#include "erma/sdk/cc.h"
#include "erma/clock.h"
#include "erma/endpoint.h"
#include "erma/rpc.h"
#include "erma/sim.h"
#include "erma/sdk/transport_driver.h"
#include "erma/sdk/wire.h"

#define SINK 1

struct incast {
    const struct bench_incast_cfg *cfg;
    struct erma_sim *sim;
    uint64_t start_ns, end_ns;
    uint64_t *rtt;
    size_t nrtt, cap_rtt;
    uint64_t delivered;        /* request data bytes at the server in the interval */
    uint64_t *client_bytes;    /* per client host */
    struct erma_endpoint **ep; /* [0] server, [1..] clients */
    struct erma_rpc **rpc;     /* on ep[] */
    struct erma_nexus **nx;
    int *sess;
    struct erma_msgbuf *req, *resp;
    struct erma_timely_cfg timely;
    bool done;
};

static void on_rtt(void *ctx, int session, uint64_t rtt_ns)
{
    (void)session;
    struct incast *x = ctx;
    const uint64_t now = erma_sim_now(x->sim);
    if (now < x->start_ns || now >= x->end_ns)
        return;
    if (x->nrtt == x->cap_rtt) {
        const size_t cap = x->cap_rtt ? 2 * x->cap_rtt : 1 << 16;
        uint64_t *v = realloc(x->rtt, cap * sizeof *v);
        if (!v)
            return;
        x->rtt = v;
        x->cap_rtt = cap;
    }
    x->rtt[x->nrtt++] = rtt_ns;
}

static void on_trace(void *ctx, const struct erma_sim_event *ev)
{
    struct incast *x = ctx;
    if (ev->kind != ERMA_SIM_DELIVER || ev->dst_host != 0 || ev->time < x->start_ns ||
        ev->time >= x->end_ns || ev->len <= ERMA_HDR_SIZE)
        return;
    x->delivered += ev->len - ERMA_HDR_SIZE;
    x->client_bytes[ev->src_host] += ev->len - ERMA_HDR_SIZE;
}

static struct incast *g_incast; /* the run in progress (one thread) */

static void issue(struct incast *x, unsigned c);

static void on_done(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    (void)resp;
    (void)status;
    struct incast *x = g_incast;
    if (!x->done)
        issue(x, (unsigned)(uintptr_t)tag);
}

static void issue(struct incast *x, unsigned c)
{
    erma_rpc_call(x->rpc[c], x->sess[c], SINK, &x->req[c], &x->resp[c], on_done,
                  (void *)(uintptr_t)c);
}

static bool past_end(void *ctx)
{
    struct incast *x = ctx;
    return erma_sim_now(x->sim) >= x->end_ns;
}

static bool all_connected(void *ctx)
{
    struct incast *x = ctx;
    for (unsigned c = 1; c <= x->cfg->clients; c++)
        if (!erma_session_connected(x->rpc[c], x->sess[c]))
            return false;
    return true;
}

static int cmp_u64(const void *a, const void *b)
{
    const uint64_t p = *(const uint64_t *)a, q = *(const uint64_t *)b;
    return (p > q) - (p < q);
}

static int setup(struct incast *x)
{
    const struct bench_incast_cfg *cfg = x->cfg;
    const unsigned hosts = cfg->clients + 1;
    char name[64], uri[96];
    snprintf(name, sizeof name, "incast%u_%d_%llu", cfg->clients, cfg->cc,
             (unsigned long long)cfg->seed);
    struct erma_sim_cfg sc;
    erma_sim_cfg_default(&sc);
    sc.hosts = hosts;
    sc.link_bps = cfg->link_bps;
    sc.switch_buffer = cfg->buffer;
    sc.seed = cfg->seed;
    int rc = erma_sim_create(name, &sc, &x->sim);
    if (rc != ERMA_OK)
        return rc;
    erma_sim_use_clock(x->sim);
    erma_sim_set_trace(x->sim, on_trace, x);
    struct erma_transport *probe; /* the fabric's hints, as endpoints will see them */
    snprintf(uri, sizeof uri, "sim://%s/0:0", name);
    if (rc == ERMA_OK && (rc = erma_transport_open(uri, NULL, &probe)) == ERMA_OK) {
        x->timely = erma_timely_cfg_for((double)probe->hints.link_bps, probe->hints.base_rtt_ns);
        erma_transport_close(probe);
    }
    if (cfg->step_div > 0)
        x->timely.step_bps = x->timely.link_bps / cfg->step_div;
    x->timely.ai_span = cfg->ai_span;
    for (unsigned h = 0; rc == ERMA_OK && h < hosts; h++) {
        const struct erma_endpoint_cfg ep_cfg = {.rx_ring = 32 * hosts + 64};
        struct erma_rpc_cfg rc_cfg = {.seed = cfg->seed + h, .cc = {.off = !cfg->cc},
                                      .rtt_hook = on_rtt, .rtt_ctx = x, .timely = &x->timely};
        snprintf(uri, sizeof uri, "sim://%s/%u:31850", name, h);
        rc = erma_nexus_create(NULL, &x->nx[h]);
        if (rc == ERMA_OK && h == 0)
            rc = erma_handler_register(x->nx[h], SINK, bench_respond_32, ERMA_DISPATCH, NULL);
        if (rc == ERMA_OK)
            rc = erma_endpoint_create(uri, 0, &ep_cfg, &x->ep[h]);
        if (rc == ERMA_OK)
            rc = erma_rpc_create(x->nx[h], x->ep[h], &rc_cfg, &x->rpc[h]);
    }
    snprintf(uri, sizeof uri, "sim://%s/0:31850", name);
    for (unsigned c = 1; rc == ERMA_OK && c < hosts; c++) {
        x->sess[c] = erma_session_create(x->rpc[c], uri, 0);
        rc = x->sess[c] < 0 ? x->sess[c] : erma_msgbuf_alloc(x->rpc[c], cfg->size, &x->req[c]);
        if (rc == ERMA_OK)
            rc = erma_msgbuf_alloc(x->rpc[c], 64, &x->resp[c]);
    }
    if (rc == ERMA_OK)
        rc = erma_sim_run(x->sim, x->ep, hosts, 1000000000ull, all_connected, x);
    return rc;
}

static void teardown(struct incast *x)
{
    x->done = true;
    for (unsigned h = 0; h <= x->cfg->clients; h++) {
        erma_rpc_destroy(x->rpc[h]); /* the pool takes the msgbufs with it */
        erma_endpoint_destroy(x->ep[h]);
        erma_nexus_destroy(x->nx[h]);
    }
    erma_sim_destroy(x->sim);
    erma_clock_set_source(NULL, NULL);
}

int bench_incast(const struct bench_incast_cfg *cfg, struct bench_incast_result *out)
{
    if (!cfg || !out || cfg->clients == 0 || cfg->clients > 1000 || cfg->size == 0)
        return ERMA_EINVAL;
    const unsigned hosts = cfg->clients + 1;
    struct incast x = {.cfg = cfg};
    x.ep = calloc(hosts, sizeof *x.ep);
    x.rpc = calloc(hosts, sizeof *x.rpc);
    x.nx = calloc(hosts, sizeof *x.nx);
    x.sess = calloc(hosts, sizeof *x.sess);
    x.req = calloc(hosts, sizeof *x.req);
    x.resp = calloc(hosts, sizeof *x.resp);
    x.client_bytes = calloc(hosts, sizeof *x.client_bytes);
    int rc = x.ep && x.rpc && x.nx && x.sess && x.req && x.resp && x.client_bytes ? ERMA_OK
                                                                                 : ERMA_ENOMEM;
    if (rc == ERMA_OK)
        rc = setup(&x);
    if (rc == ERMA_OK) {
        g_incast = &x;
        x.start_ns = erma_sim_now(x.sim) + cfg->warmup_ns;
        x.end_ns = x.start_ns + cfg->measure_ns;
        for (unsigned c = 1; c < hosts; c++) {
            if (c > 1 && cfg->stagger_ns)
                erma_sim_run(x.sim, x.ep, hosts, cfg->stagger_ns, past_end, &x);
            issue(&x, c);
        }
        rc = erma_sim_run(x.sim, x.ep, hosts, cfg->warmup_ns + cfg->measure_ns + 1, past_end,
                          &x);
    }
    if (rc == ERMA_OK) {
        struct erma_sim_stats st;
        erma_sim_get_stats(x.sim, &st);
        memset(out, 0, sizeof *out);
        const double secs = (double)cfg->measure_ns / 1e9;
        out->goodput_gbps = (double)x.delivered * 8 / secs / 1e9;
        out->link_share = out->goodput_gbps * 1e9 / (double)cfg->link_bps;
        const double pkt = x.ep[0] ? (double)x.ep[0]->tr->max_pkt : 1472;
        out->payload_share = out->link_share * (pkt + 42) / (pkt - ERMA_HDR_SIZE);
        out->drops = st.drop_buffer;
        out->max_queue_bytes = erma_sim_egress_max_bytes(x.sim, 0);
        qsort(x.rtt, x.nrtt, sizeof *x.rtt, cmp_u64);
        out->samples = x.nrtt;
        if (x.nrtt) {
            out->p50_rtt_us = (double)x.rtt[x.nrtt / 2] / 1e3;
            out->p99_rtt_us = (double)x.rtt[(size_t)(0.99 * (double)x.nrtt)] / 1e3;
        }
        uint64_t least = UINT64_MAX;
        for (unsigned c = 1; c < hosts; c++) {
            struct erma_rpc_stats rs;
            erma_rpc_get_stats(x.rpc[c], &rs);
            out->retransmits += rs.retransmits;
            least = x.client_bytes[c] < least ? x.client_bytes[c] : least;
        }
        out->min_client_share = x.delivered ? (double)least * cfg->clients / (double)x.delivered : 0;
    }
    if (x.sim)
        teardown(&x);
    free(x.rtt);
    free(x.ep);
    free(x.rpc);
    free(x.nx);
    free(x.sess);
    free(x.req);
    free(x.resp);
    free(x.client_bytes);
    return rc;
}
