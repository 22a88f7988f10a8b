/*
 * tests/lib/rpc_world.h - a world of sim hosts, each with a nexus (an ECHO
 * handler), an endpoint and its RPCs, for the RPC tests on the sim fabric
 * (virtual time). Include after cmocka.h.
 */
#ifndef ERMA_TESTS_RPC_WORLD_H
#define ERMA_TESTS_RPC_WORLD_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "endpoint/proto.h"
#include "erma/sim.h"
#include "rpc_util.h"

#define ECHO 1
#define PROXY 2
#define MAX_HOSTS 3

struct world {
    struct erma_sim *sim;
    struct erma_nexus *nx[MAX_HOSTS];
    struct erma_endpoint *ep[MAX_HOSTS];
    struct erma_rpc *rpc[MAX_HOSTS];
    struct echo_stats echo[MAX_HOSTS];
    unsigned hosts;
    char uri[MAX_HOSTS][64];
    int sm_events[8], sm_last_err;
    int order[64]; /* sm events (ORDER_EVENT + ev) and what else a test logs, in order */
    unsigned norder;
};

#define ORDER_EVENT 100

static inline void world_log(struct world *w, int what)
{
    if (w->norder < sizeof w->order / sizeof w->order[0])
        w->order[w->norder++] = what;
}

static inline struct erma_rpc_cfg sim_cfg(struct world *w)
{
    (void)w;
    return (struct erma_rpc_cfg){.rto_ns = 200000, .failure_ns = 50000000,
                                 .keepalive_ns = 5000000, .connect_retry_ns = 1000000,
                                 .seed = 42};
}

static inline void on_sm(struct erma_rpc *rpc, int session, enum erma_sm_event ev, int err,
                         void *ctx)
{
    (void)rpc;
    (void)session;
    struct world *w = ctx;
    w->sm_events[ev]++;
    w->sm_last_err = err;
    world_log(w, ORDER_EVENT + (int)ev);
}

/* Opens host h's endpoint (ecfg may be NULL) and its RPCs (cfg NULL: sim_cfg). */
static inline void world_rpc(struct world *w, unsigned h, const struct erma_rpc_cfg *cfg,
                             const struct erma_endpoint_cfg *ecfg)
{
    struct erma_rpc_cfg c = cfg ? *cfg : sim_cfg(w);
    c.sm_handler = on_sm;
    c.sm_ctx = w;
    assert_int_equal(erma_endpoint_create(w->uri[h], 0, ecfg, &w->ep[h]), ERMA_OK);
    assert_int_equal(erma_rpc_create(w->nx[h], w->ep[h], &c, &w->rpc[h]), ERMA_OK);
}

/* Takes host h's RPCs and endpoint down (its nexus stays). */
static inline void world_rpc_down(struct world *w, unsigned h)
{
    erma_rpc_destroy(w->rpc[h]);
    erma_endpoint_destroy(w->ep[h]);
    w->rpc[h] = NULL;
    w->ep[h] = NULL;
}

static inline void world_up_cfg(struct world *w, const char *name, const struct erma_sim_cfg *sc)
{
    const unsigned hosts = sc->hosts;
    memset(w, 0, sizeof *w);
    assert_int_equal(erma_sim_create(name, sc, &w->sim), ERMA_OK);
    erma_sim_use_clock(w->sim);
    w->hosts = hosts;
    for (unsigned h = 0; h < hosts; h++) {
        snprintf(w->uri[h], sizeof w->uri[h], "sim://%s/%u:31850", name, h);
        assert_int_equal(erma_nexus_create(NULL, &w->nx[h]), ERMA_OK);
        assert_int_equal(erma_handler_register(w->nx[h], ECHO, echo_handler, ERMA_DISPATCH,
                                               &w->echo[h]),
                         ERMA_OK);
    }
}

static inline void world_up(struct world *w, const char *name, unsigned hosts, double loss,
                            double reorder)
{
    struct erma_sim_cfg sc;
    erma_sim_cfg_default(&sc);
    sc.hosts = hosts;
    sc.loss = loss;
    sc.reorder = reorder;
    sc.reorder_delay_ns = 3000;
    world_up_cfg(w, name, &sc);
}

static inline void world_start(struct world *w)
{
    for (unsigned h = 0; h < w->hosts; h++)
        world_rpc(w, h, NULL, NULL);
}

static inline void world_down(struct world *w)
{
    for (unsigned h = 0; h < w->hosts; h++) {
        world_rpc_down(w, h);
        erma_nexus_destroy(w->nx[h]);
        free(w->echo[h].per_id);
    }
    erma_sim_destroy(w->sim);
}

static inline bool flag_set(void *ctx)
{
    return *(int *)ctx != 0;
}

static inline int run_until(struct world *w, int *flag, uint64_t ns)
{
    struct erma_endpoint *live[MAX_HOSTS];
    unsigned n = 0;
    for (unsigned h = 0; h < w->hosts; h++)
        if (w->ep[h])
            live[n++] = w->ep[h];
    return erma_sim_run(w->sim, live, n, ns, flag_set, flag);
}

static inline int connect(struct world *w, unsigned from, unsigned to)
{
    const int s = erma_session_create(w->rpc[from], w->uri[to], 0);
    assert_true(s >= 0);
    for (int i = 0; i < 1000 && !erma_session_connected(w->rpc[from], s); i++) {
        int never = 0;
        run_until(w, &never, 100000);
    }
    assert_true(erma_session_connected(w->rpc[from], s));
    return s;
}

/* ---- one call at a time ---- */

struct call {
    int done, status;
    struct erma_msgbuf req, resp;
};

static inline void on_call(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    struct call *c = tag;
    assert_ptr_equal(resp, &c->resp);
    c->status = status;
    c->done++;
}

static inline void call_once(struct world *w, unsigned from, int sess, uint8_t type,
                             uint32_t req_size, uint32_t resp_size, uint32_t id, int expect)
{
    struct erma_rpc *rpc = w->rpc[from];
    struct call c = {0};
    assert_int_equal(erma_msgbuf_alloc(rpc, req_size < REQ_HDR ? REQ_HDR : req_size, &c.req),
                     ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(rpc, 16, &c.resp), ERMA_OK);
    fill_req(&c.req, id, resp_size);
    assert_int_equal(erma_rpc_call(rpc, sess, type, &c.req, &c.resp, on_call, &c),
                     ERMA_OK);
    assert_int_equal(run_until(w, &c.done, 10000000000ull), ERMA_OK);
    assert_int_equal(c.done, 1);
    assert_int_equal(c.status, expect);
    if (expect == ERMA_OK)
        assert_int_equal(check_resp(&c.resp, id, resp_size), 0);
    erma_msgbuf_free(rpc, &c.req);
    erma_msgbuf_free(rpc, &c.resp);
}

/* Queues a call of type on host 0's session sess (done and status in c);
 * end_call() frees its buffers. */
static inline void start_call(struct world *w, int sess, uint8_t type, uint32_t id, struct call *c)
{
    memset(c, 0, sizeof *c);
    assert_int_equal(erma_msgbuf_alloc(w->rpc[0], REQ_HDR, &c->req), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(w->rpc[0], 16, &c->resp), ERMA_OK);
    fill_req(&c->req, id, 8);
    assert_int_equal(erma_rpc_call(w->rpc[0], sess, type, &c->req, &c->resp, on_call, c),
                     ERMA_OK);
}

static inline void end_call(struct world *w, struct call *c)
{
    erma_msgbuf_free(w->rpc[0], &c->req);
    erma_msgbuf_free(w->rpc[0], &c->resp);
}

#endif
