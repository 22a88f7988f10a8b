/* test_rpc_sim (the RPC layer over the sim fabric, virtual time): one
 * session over 4 ECMP paths, run alone as `test_rpc_sim multipath`. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "endpoint/proto.h"
#include "erma/clock.h"
#include "erma/sdk/rand.h"
#include "erma/sim.h"
#include "erma/sdk/transport_driver.h"
#include "erma/sdk/wire.h"
#include "rpc/internal.h"
#include "../bench/bench.h"
#include "rpc_util.h"
#include "rpc_world.h"
#include "test_rpc_sim.h"

/* ---- virtual paths: one session over 4 ECMP paths (label multipath) ----
 * A 2-host fabric whose 4 core paths run at half the host link (12.5 of
 * 25 Gb/s): one path carries half of what a host can send, two fill it.
 * The client's 4 ports are chosen so that their flows (and the server's
 * answers) hash onto the 4 paths, and its first port onto path `first`,
 * the one a single-path session uses. Each run moves 2 x 8 MiB requests
 * and 2 x 8 MiB responses, byte-exact, with 1 path and with 4; virtual
 * time, the same figures on every machine. */

#define MP_PATHS 4
#define MP_SERVER_PORT 31850

struct mp_run {
    double gbps;
    struct erma_rpc_stats cs;
    struct erma_sim_stats fs;
};

/* lossy_path / slow_path: degrade the single-path session's path; paths
 * 0: one path with go-back-N (eRPC's recovery: cfg.go_back_n). */
static void mp_run(const char *name, unsigned paths, double loss, bool lossy_path,
                   bool slow_path, struct mp_run *r)
{
    const bool gbn = paths == 0;
    paths += gbn;
    struct erma_sim_cfg sc;
    erma_sim_cfg_default(&sc);
    sc.paths = MP_PATHS;
    sc.path_bps = sc.link_bps / 2;
    sc.loss = loss;
    struct world w;
    world_up_cfg(&w, name, &sc);
    const uint16_t base = bench_sim_spread_port(w.sim, MP_PATHS, MP_SERVER_PORT);
    assert_true(base > 0);
    const int first = erma_sim_flow_path(w.sim, 0, base, 1, MP_SERVER_PORT);
    snprintf(w.uri[0], sizeof w.uri[0], "sim://%s/0:%u", name, base);
    if (lossy_path)
        assert_int_equal(erma_sim_set_path(w.sim, (uint32_t)first,
                                           &(struct erma_sim_path){.loss = 0.01}),
                         ERMA_OK);
    if (slow_path)
        assert_int_equal(erma_sim_set_path(w.sim, (uint32_t)first,
                                           &(struct erma_sim_path){.bps = sc.path_bps / 40}),
                         ERMA_OK);
    const struct erma_endpoint_cfg ec = {.paths = paths};
    struct erma_rpc_cfg rc = sim_cfg(&w);
    rc.go_back_n = gbn;
    for (unsigned h = 0; h < 2; h++)
        world_rpc(&w, h, &rc, &ec);
    const int s = connect(&w, 0, 1);
    const uint64_t t0 = erma_sim_now(w.sim);
    for (uint32_t id = 0; id < 2; id++) {
        call_once(&w, 0, s, ECHO, ERMA_MAX_MSG_SIZE, REQ_HDR, id, ERMA_OK);
        call_once(&w, 0, s, ECHO, REQ_HDR, ERMA_MAX_MSG_SIZE, 100 + id, ERMA_OK);
    }
    r->gbps = 4.0 * ERMA_MAX_MSG_SIZE * 8 / (double)(erma_sim_now(w.sim) - t0);
    assert_int_equal(atomic_load(&w.echo[1].bad), 0);
    erma_rpc_get_stats(w.rpc[0], &r->cs);
    erma_sim_get_stats(w.sim, &r->fs);
    world_down(&w);
}

static void mp_print(const char *what, const struct mp_run *gbn, const struct mp_run *one,
                     const struct mp_run *four, const struct mp_run *clean)
{
    print_message("  %-26s 1 path go-back-N %6.2f Gb/s, 1 path %6.2f Gb/s, 4 paths %6.2f Gb/s "
                  "(%3.0f%% of lossless; %llu lost, %llu sent again, %llu fast, %llu paths "
                  "pruned)\n",
                  what, gbn->gbps, one->gbps, four->gbps, 100 * four->gbps / clean->gbps,
                  (unsigned long long)four->fs.drop_loss,
                  (unsigned long long)four->cs.retransmitted_pkts,
                  (unsigned long long)four->cs.fast_retransmits,
                  (unsigned long long)four->cs.paths_pruned);
}

void test_multipath(void **state)
{
    (void)state;
    struct mp_run clean1, clean4, lossy1, lossy4, all1, all4, slow1, slow4;
    struct mp_run clean0, lossy0, all0, slow0;
    mp_run("mpg0", 0, 0, false, false, &clean0);
    mp_run("mpg1", 0, 0, true, false, &lossy0);
    mp_run("mpg2", 0, 1e-3, false, false, &all0);
    mp_run("mpg3", 0, 0, false, true, &slow0);
    mp_run("mp0", 1, 0, false, false, &clean1);
    mp_run("mp1", MP_PATHS, 0, false, false, &clean4);
    mp_run("mp2", 1, 0, true, false, &lossy1);
    mp_run("mp3", MP_PATHS, 0, true, false, &lossy4);
    mp_run("mp4", 1, 1e-3, false, false, &all1);
    mp_run("mp5", MP_PATHS, 1e-3, false, false, &all4);
    mp_run("mp6", 1, 0, false, true, &slow1);
    mp_run("mp7", MP_PATHS, 0, false, true, &slow4);
    mp_print("lossless", &clean0, &clean1, &clean4, &clean4);
    mp_print("1 of 4 paths drops 1%", &lossy0, &lossy1, &lossy4, &clean4);
    mp_print("1e-3 loss on every path", &all0, &all1, &all4, &clean4);
    mp_print("1 of 4 paths at 1/40 rate", &slow0, &slow1, &slow4, &clean4);
    /* go-back-N: the same lossless, and loss costs it more than the
     * selective acknowledgement */
    assert_int_equal(clean0.cs.retransmitted_pkts, 0);
    assert_true(clean0.gbps >= 0.9 * clean1.gbps);
    assert_true(lossy0.cs.fast_retransmits == 0 && lossy0.cs.retransmitted_pkts > 0);
    assert_true(lossy0.gbps < lossy1.gbps);
    assert_true(all0.gbps < all1.gbps);
    /* one path carries half the host link; four fill it */
    assert_true(clean4.gbps > 1.5 * clean1.gbps);
    assert_int_equal(clean4.cs.retransmitted_pkts, 0);
    assert_true(lossy4.fs.drop_loss > 0);
    assert_true(lossy4.gbps >= 0.8 * clean4.gbps);
    assert_true(all4.gbps >= 0.5 * clean4.gbps);
    /* the slow path is pruned; the other three can carry what four did */
    assert_true(slow4.cs.paths_pruned > 0);
    assert_true(slow4.gbps >= 0.9 * clean4.gbps);
    assert_true(slow4.gbps >= 10 * slow1.gbps);
}

/* A new 4-path session sends one probe packet per path; requests the
 * server fails (REQ_ERROR: no handler) end those probes too, so the
 * session sends on (a path left waiting for its probe's reply once
 * stopped the session for good). */
void test_multipath_errors(void **state)
{
    (void)state;
    struct erma_sim_cfg sc;
    erma_sim_cfg_default(&sc);
    sc.paths = MP_PATHS;
    struct world w;
    world_up_cfg(&w, "mperr", &sc);
    const struct erma_endpoint_cfg ec = {.paths = MP_PATHS};
    for (unsigned h = 0; h < 2; h++)
        world_rpc(&w, h, NULL, &ec);
    const int s = connect(&w, 0, 1);
    struct call c[MP_PATHS] = {0};
    for (int k = 0; k < MP_PATHS; k++) {
        assert_int_equal(erma_msgbuf_alloc(w.rpc[0], REQ_HDR, &c[k].req), ERMA_OK);
        assert_int_equal(erma_msgbuf_alloc(w.rpc[0], 16, &c[k].resp), ERMA_OK);
        fill_req(&c[k].req, (uint32_t)k, 8);
        assert_int_equal(erma_rpc_call(w.rpc[0], s, 77, &c[k].req, &c[k].resp, on_call, &c[k]),
                         ERMA_OK);
    }
    for (int k = 0; k < MP_PATHS; k++) {
        assert_int_equal(run_until(&w, &c[k].done, 1000000000ull), ERMA_OK);
        assert_int_equal(c[k].status, ERMA_ENOHANDLER);
        erma_msgbuf_free(w.rpc[0], &c[k].req);
        erma_msgbuf_free(w.rpc[0], &c[k].resp);
    }
    for (uint32_t id = 0; id < 8; id++) /* within call_once's 10 s bound, not a hang */
        call_once(&w, 0, s, ECHO, 64 << 10, 64 << 10, id, ERMA_OK);
    world_down(&w);
}
