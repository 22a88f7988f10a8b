/* Congestion control of RPC sessions on the sim fabric, in virtual time. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <cmocka.h>

#include "../bench/bench.h"
#include "erma/clock.h"
#include "erma/rpc.h"
#include "erma/sim.h"

static struct bench_incast_cfg incast_cfg(unsigned clients, bool cc)
{
    return (struct bench_incast_cfg){.clients = clients, .size = 8u << 20, .cc = cc,
                                     .link_bps = 25000000000ull, .buffer = 12u << 20,
                                     .warmup_ns = 10000000, .measure_ns = 20000000, .seed = 3};
}

static void print_incast(const char *what, const struct bench_incast_result *r)
{
    print_message("  %s: %.2f Gb/s (%.1f%% of link), RTT p50 %.1f us p99 %.1f us, %llu drops, "
                  "slowest client %.2f of fair share\n", what, r->goodput_gbps,
                  100 * r->link_share, r->p50_rtt_us, r->p99_rtt_us,
                  (unsigned long long)r->drops, r->min_client_share);
}

/* 50 clients, 8 MiB requests, one switch port: CC keeps the queue short
 * without giving up the link. */
static void test_incast_50(void **state)
{
    (void)state;
    struct bench_incast_result on, off;
    struct bench_incast_cfg c = incast_cfg(50, true);
    assert_int_equal(bench_incast(&c, &on), ERMA_OK);
    c.cc = false;
    assert_int_equal(bench_incast(&c, &off), ERMA_OK);
    print_incast("CC on ", &on);
    print_incast("CC off", &off);
    assert_true(on.samples > 10000 && off.samples > 10000);
    assert_true(on.p99_rtt_us <= off.p99_rtt_us / 3);
    assert_true(on.link_share >= 0.90);
    assert_int_equal(on.drops, 0);
    assert_true(on.min_client_share >= 0.10); /* no client starves */
}

/* A second flow joining a busy link gets its share. */
static void test_two_flows(void **state)
{
    (void)state;
    struct bench_incast_cfg c = incast_cfg(2, true);
    c.stagger_ns = 5000000; /* the second flow starts 5 ms after the first */
    c.warmup_ns = 6000000;  /* measured from 1 ms after it joined */
    c.measure_ns = 10000000;
    struct bench_incast_result r;
    assert_int_equal(bench_incast(&c, &r), ERMA_OK);
    print_incast("two flows", &r);
    assert_true(r.min_client_share >= 0.8); /* within 20% of fair share */
    assert_true(r.link_share >= 0.9);
}

/* ---- one session on an idle path is never paced ---- */

static int done;
static void on_done(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    (void)tag;
    (void)resp;
    assert_int_equal(status, ERMA_OK);
    done++;
}

static void sink(struct erma_req *req, void *ctx)
{
    (void)ctx;
    struct erma_msgbuf *r = erma_req_resp_buf(req);
    erma_msgbuf_resize(r, 8);
    erma_req_respond(req, r);
}

static bool enough(void *ctx)
{
    return done >= *(int *)ctx;
}

struct pair {
    struct erma_sim *sim;
    struct erma_nexus *nx[2];
    struct erma_endpoint *ep[2];
    struct erma_rpc *rpc[2];
    int sess;
    struct erma_msgbuf req, resp;
};

static void pair_up_at(struct pair *p, const char *name, double link_bps)
{
    struct erma_sim_cfg sc;
    erma_sim_cfg_default(&sc);
    assert_int_equal(erma_sim_create(name, &sc, &p->sim), ERMA_OK);
    erma_sim_use_clock(p->sim);
    char uri[64];
    for (int h = 0; h < 2; h++) {
        snprintf(uri, sizeof uri, "sim://%s/%d:100", name, h);
        assert_int_equal(erma_nexus_create(NULL, &p->nx[h]), ERMA_OK);
        if (h == 1)
            assert_int_equal(erma_handler_register(p->nx[h], 1, sink, ERMA_DISPATCH, NULL), ERMA_OK);
        const struct erma_rpc_cfg cfg = {.seed = 1, .link_bps = link_bps};
        assert_int_equal(erma_endpoint_create(uri, 0, NULL, &p->ep[h]), ERMA_OK);
        assert_int_equal(erma_rpc_create(p->nx[h], p->ep[h], &cfg, &p->rpc[h]), ERMA_OK);
    }
    snprintf(uri, sizeof uri, "sim://%s/1:100", name);
    p->sess = erma_session_create(p->rpc[0], uri, 0);
    assert_true(p->sess >= 0);
    assert_int_equal(erma_msgbuf_alloc(p->rpc[0], 1 << 20, &p->req), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(p->rpc[0], 64, &p->resp), ERMA_OK);
}

static void pair_up(struct pair *p, const char *name)
{
    pair_up_at(p, name, 0);
}

static void pair_calls(struct pair *p, int n)
{
    done = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(erma_rpc_call(p->rpc[0], p->sess, 1, &p->req, &p->resp, on_done, NULL),
                         ERMA_OK);
        assert_int_equal(erma_sim_run(p->sim, p->ep, 2, 1000000000ull, enough, &(int){i + 1}),
                         ERMA_OK);
    }
}

static void pair_down(struct pair *p)
{
    for (int h = 0; h < 2; h++) {
        erma_rpc_destroy(p->rpc[h]);
        erma_endpoint_destroy(p->ep[h]);
        erma_nexus_destroy(p->nx[h]);
    }
    erma_sim_destroy(p->sim);
}

static void test_uncongested_not_paced(void **state)
{
    (void)state;
    struct pair p;
    pair_up(&p, "idle");
    pair_calls(&p, 20);
    struct erma_session_cc cc;
    assert_int_equal(erma_session_cc_stats(p.rpc[0], p.sess, &cc), ERMA_OK);
    print_message("  idle path: rate %.1f Gb/s, %llu samples, %llu bypassed, %llu paced, "
                  "min RTT %.1f us\n", cc.rate_bps / 1e9, (unsigned long long)cc.rtt_samples,
                  (unsigned long long)cc.timely_bypasses, (unsigned long long)cc.paced_pkts,
                  cc.min_rtt_ns / 1e3);
    assert_true(cc.rtt_samples >= 20 * 720);
    assert_int_equal(cc.paced_pkts, 0);
    assert_true(cc.direct_pkts >= 20 * 720);
    assert_true(cc.rate_bps >= 25e9);
    assert_int_equal(cc.timely_bypasses, cc.timely_updates); /* every sample took the bypass */
    assert_int_equal(erma_session_cc_stats(p.rpc[0], 999, &cc), ERMA_ENOENT);

    /* the switches: without the wheel bypass every packet goes through the wheel,
     * without the Timely bypass every sample updates the rate */
    const struct erma_cc_switches sw = {.no_wheel_bypass = true, .no_timely_bypass = true};
    assert_int_equal(erma_rpc_set_cc(p.rpc[0], &sw), ERMA_OK);
    struct erma_session_cc before = cc;
    pair_calls(&p, 5);
    assert_int_equal(erma_session_cc_stats(p.rpc[0], p.sess, &cc), ERMA_OK);
    assert_true(cc.paced_pkts >= 5 * 720);
    assert_int_equal(cc.direct_pkts, before.direct_pkts);
    assert_int_equal(cc.timely_bypasses, before.timely_bypasses);
    assert_true(cc.timely_updates > before.timely_updates);
    assert_true(cc.rate_bps >= 25e9); /* still uncongested */
    /* CC off: no Timely, no wheel */
    const struct erma_cc_switches off = {.off = true};
    assert_int_equal(erma_rpc_set_cc(p.rpc[0], &off), ERMA_OK);
    before = cc;
    pair_calls(&p, 5);
    assert_int_equal(erma_session_cc_stats(p.rpc[0], p.sess, &cc), ERMA_OK);
    assert_int_equal(cc.paced_pkts, before.paced_pkts);
    assert_int_equal(cc.timely_updates, before.timely_updates);
    assert_true(cc.rtt_samples > before.rtt_samples); /* still measured */
    pair_down(&p);
}

/* A paced session whose wheel stood empty for longer than the wheel's
 * horizon (2.1 s here: 64 packets at the 366 kb/s floor of a 366 Mb/s
 * ceiling, 4.2 M slots): its next request's packets keep their pace, and
 * its wheel, brought to the present before they go in, is not walked
 * slot by slot over the idle time (tens of ms of CPU per request). */
static void test_paced_after_idle(void **state)
{
    (void)state;
    struct pair p;
    pair_up_at(&p, "paced_idle", 3.66e8);
    const struct erma_cc_switches sw = {.no_wheel_bypass = true}; /* every packet paced */
    assert_int_equal(erma_rpc_set_cc(p.rpc[0], &sw), ERMA_OK);
    assert_int_equal(erma_msgbuf_resize(&p.req, 4000), ERMA_OK); /* 3 packets */
    done = 0;
    uint64_t fastest = UINT64_MAX;
    for (int i = 0; i < 5; i++) {
        assert_int_equal(erma_sim_run(p.sim, p.ep, 2, 2500000000ull, NULL, NULL),
                         ERMA_ETIMEDOUT); /* idle */
        const uint64_t t0 = erma_now_ns(), cpu0 = erma_mono_ns();
        assert_int_equal(erma_rpc_call(p.rpc[0], p.sess, 1, &p.req, &p.resp, on_done, NULL),
                         ERMA_OK);
        assert_int_equal(erma_sim_run(p.sim, p.ep, 2, 1000000000ull, enough, &(int){i + 1}),
                         ERMA_OK);
        const uint64_t took = erma_now_ns() - t0, cpu = erma_mono_ns() - cpu0;
        fastest = cpu < fastest ? cpu : fastest;
        print_message("  request %d after 2.5 s idle: %.1f us (virtual), %.0f us of real time\n",
                      i, took / 1e3, cpu / 1e3);
        assert_true(took >= 2 * 30000); /* two gaps of about 33 us between its packets */
    }
    assert_true(fastest < 2000000); /* 10x what it needs; a walk over the wheel took 8 ms */
    pair_down(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uncongested_not_paced),
        cmocka_unit_test(test_paced_after_idle),
        cmocka_unit_test(test_incast_50),
        cmocka_unit_test(test_two_flows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
