/*
 * Shared by the one-sided tests: a world of hosts, each a nexus, an endpoint
 * and an RMA engine, on the sim fabric (virtual time) or on udp loopback
 * (one thread polls every endpoint, wall-clock bounded). Host 0 is the
 * target unless a test says otherwise.
 */
#ifndef ERMA_TEST_RMA_UTIL_H
#define ERMA_TEST_RMA_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "erma/clock.h"
#include "erma/rma.h"
#include "erma/rpc.h"
#include "erma/sim.h"

#define MAX_HOSTS 8

struct world {
    bool on_sim;
    struct erma_sim *sim;
    unsigned hosts;
    struct erma_nexus *nx[MAX_HOSTS];
    struct erma_endpoint *ep[MAX_HOSTS];
    struct erma_rpc *rpc[MAX_HOSTS];
    struct erma_rma *rma[MAX_HOSTS];
    char uri[MAX_HOSTS][64];
};

static unsigned world_seq;

/* rcfg and ecfg may be NULL or arrays of hosts configurations (ecfg: only
 * paths is read); on the sim, port[h] is host h's port when port is not
 * NULL, else 31850. */
static inline void world_up_ep(struct world *w, bool on_sim, unsigned hosts,
                               const struct erma_sim_cfg *scfg, const struct erma_rma_cfg *rcfg,
                               const struct erma_endpoint_cfg *ecfg, const uint16_t *port)
{
    memset(w, 0, sizeof *w);
    w->on_sim = on_sim;
    w->hosts = hosts;
    char name[32];
    snprintf(name, sizeof name, "rma%u", world_seq++);
    if (on_sim) {
        struct erma_sim_cfg sc;
        if (scfg)
            sc = *scfg;
        else
            erma_sim_cfg_default(&sc);
        sc.hosts = hosts;
        assert_int_equal(erma_sim_create(name, &sc, &w->sim), ERMA_OK);
        erma_sim_use_clock(w->sim);
    } else {
        erma_clock_set_source(NULL, NULL);
    }
    for (unsigned h = 0; h < hosts; h++) {
        /* udp: a port the kernel picks, so that tests running side by side
         * (other build trees) never meet; the URI is read back */
        if (on_sim)
            snprintf(w->uri[h], sizeof w->uri[h], "sim://%s/%u:%u", name, h,
                     port ? port[h] : 31850);
        else
            snprintf(w->uri[h], sizeof w->uri[h], "udp://127.0.0.1:0");
        assert_int_equal(erma_nexus_create(NULL, &w->nx[h]), ERMA_OK);
        const struct erma_endpoint_cfg ec = {.fault_drop = !on_sim && scfg ? scfg->loss : 0,
                                             .fault_seed = 7 + h,
                                             .paths = ecfg ? ecfg[h].paths : 0};
        assert_int_equal(erma_endpoint_create(w->uri[h], 0, &ec, &w->ep[h]), ERMA_OK);
        assert_int_equal(erma_endpoint_uri(w->ep[h], w->uri[h], sizeof w->uri[h]), ERMA_OK);
        const struct erma_rpc_cfg rc = {.seed = 7 + h};
        assert_int_equal(erma_rpc_create(w->nx[h], w->ep[h], &rc, &w->rpc[h]), ERMA_OK);
        struct erma_rma_cfg c = rcfg ? rcfg[h] : (struct erma_rma_cfg){0};
        if (!c.identity)
            c.identity = 1000 + h;
        /* On udp every endpoint runs in this one thread, so a stall of this
         * loaded machine stalls the target too and a request may miss its
         * deadline: ops time out after at least 20 ms here, unless the test
         * asks otherwise (the library's floor on udp is 10 ms). */
        if (!on_sim && !c.op_timeout_ns && !c.op_timeout_min_ns)
            c.op_timeout_min_ns = 20000000;
        assert_int_equal(erma_rma_create(w->ep[h], &c, &w->rma[h]), ERMA_OK);
    }
}

static inline void world_up_cfg(struct world *w, bool on_sim, unsigned hosts,
                                const struct erma_sim_cfg *scfg,
                                const struct erma_rma_cfg *rcfg)
{
    world_up_ep(w, on_sim, hosts, scfg, rcfg, NULL, NULL);
}

static inline void world_up(struct world *w, bool on_sim, unsigned hosts)
{
    world_up_cfg(w, on_sim, hosts, NULL, NULL);
}

/* Takes host h down: its engine, endpoint and nexus are gone. */
static inline void world_kill(struct world *w, unsigned h)
{
    erma_rma_destroy(w->rma[h]);
    erma_rpc_destroy(w->rpc[h]);
    erma_endpoint_destroy(w->ep[h]);
    erma_nexus_destroy(w->nx[h]);
    w->rma[h] = NULL;
    w->rpc[h] = NULL;
    w->ep[h] = NULL;
    w->nx[h] = NULL;
}

static inline void world_down(struct world *w)
{
    for (unsigned h = 0; h < w->hosts; h++)
        if (w->ep[h])
            world_kill(w, h);
    if (w->sim)
        erma_sim_destroy(w->sim);
    erma_clock_set_source(NULL, NULL);
}

/* Runs every live endpoint until done(ctx) or ns of (virtual or wall) time. */
static inline bool world_run(struct world *w, uint64_t ns, bool (*done)(void *), void *ctx)
{
    struct erma_endpoint *live[MAX_HOSTS];
    unsigned n = 0;
    for (unsigned h = 0; h < w->hosts; h++)
        if (w->ep[h])
            live[n++] = w->ep[h];
    if (w->on_sim)
        return erma_sim_run(w->sim, live, n, ns, done, ctx) == ERMA_OK;
    const uint64_t end = erma_now_ns() + ns;
    while (erma_now_ns() < end) {
        if (done && done(ctx))
            return true;
        for (unsigned i = 0; i < n; i++)
            erma_endpoint_run_once(live[i]);
    }
    return done && done(ctx);
}

/* Completions of one host gathered by a done() predicate. */
struct gather {
    struct erma_rma *rma;
    struct erma_rma_completion *c;
    int want, got;
};

static inline bool gather_done(void *ctx)
{
    struct gather *g = ctx;
    const int n = erma_rma_poll(g->rma, g->c + g->got, g->want - g->got);
    if (n > 0)
        g->got += n;
    return g->got >= g->want;
}

/* Runs until host h has `want` completions (in out): on the sim fabric for
 * at most ns of virtual time; on udp until ns pass without a completion,
 * 5 ns in all (a loaded machine, sanitizers and a CPU hog, may stall this
 * one thread that runs every endpoint for seconds). */
static inline int world_wait(struct world *w, unsigned h, struct erma_rma_completion *out,
                             int want, uint64_t ns)
{
    struct gather g = {w->rma[h], out, want, 0};
    if (w->on_sim) {
        world_run(w, ns, gather_done, &g);
        return g.got;
    }
    const uint64_t start = erma_now_ns(), slice = ns < 100000000 ? ns : 100000000;
    uint64_t last = start;
    for (int seen = 0; g.got < want;) {
        world_run(w, slice, gather_done, &g);
        const uint64_t now = erma_now_ns();
        if (g.got != seen) {
            seen = g.got;
            last = now;
        }
        if (now - last >= ns || now - start >= 5 * ns)
            break;
    }
    return g.got;
}

/* qsort's comparison of uint64_t values. */
static inline int cmp_u64(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static inline struct erma_rma_cmd cmd_of(enum erma_rma_op op, int peer,
                                         const struct erma_rkey *k, uint64_t off,
                                         void *local, uint32_t len, uint64_t tag)
{
    return (struct erma_rma_cmd){.op = op, .peer = peer, .rkey = *k, .offset = off,
                                 .local = local, .len = len, .tag = tag};
}

/* Submits one op from host h and returns its completion status. */
static inline int world_op(struct world *w, unsigned h, struct erma_rma_cmd c,
                           struct erma_rma_completion *out)
{
    const int slot = erma_rma_submit(w->rma[h], &c);
    if (slot < 0)
        return slot;
    struct erma_rma_completion tmp;
    struct erma_rma_completion *o = out ? out : &tmp;
    if (world_wait(w, h, o, 1, 2000000000ull) != 1)
        return 1; /* no completion at all: a bug */
    assert_int_equal(o->id, (uint32_t)slot);
    return o->status;
}

#endif
