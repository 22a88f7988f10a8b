/* test_cc (the congestion-control units, cc/): Timely, the rate CC of RPCs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#include "erma/sdk/cc.h"
#include "erma/errors.h"
#include "erma/sdk/rand.h"

#include "test_cc.h"

/* =========================================================== Timely */

static const struct erma_timely_cfg hand_cfg = {
    .link_bps = 10e9,
    .floor_bps = 1e8,
    .step_bps = 1e8,
    .t_low_ns = 50000,
    .t_high_ns = 500000,
    .min_rtt_ns = 10000,
    .alpha = 0.5,
    .beta = 0.25,
    .hai_n = 5,
    .bypass = false,
};

void test_timely_cfgs(void **state)
{
    (void)state;
    struct erma_timely_cfg c = erma_timely_cfg_real();
    assert_near(c.floor_bps, 120e6); /* 15 MB/s */
    assert_near(c.step_bps, 40e6);   /* 5 MB/s */
    assert_int_equal(c.t_low_ns, 50000);
    assert_int_equal(c.t_high_ns, 1000000);
    assert_near(c.alpha, 0.46);
    assert_near(c.beta, 0.26);
    assert_int_equal(c.hai_n, 5);
    assert_true(c.bypass);
    assert_int_equal(erma_timely_cfg_check(&c), ERMA_OK);

    c = erma_timely_cfg_for(25e9, 8000);
    assert_near(c.link_bps, 25e9);
    assert_near(c.floor_bps, 25e6);
    assert_near(c.step_bps, 25e6);
    assert_int_equal(c.t_low_ns, 40000);
    assert_int_equal(c.t_high_ns, 200000);
    assert_int_equal(c.min_rtt_ns, 8000);
    assert_int_equal(erma_timely_cfg_check(&c), ERMA_OK);

    struct erma_timely t;
    struct erma_timely_cfg bad = hand_cfg;
    bad.floor_bps = 2 * bad.link_bps;
    assert_int_equal(erma_timely_init(&t, &bad, 0), ERMA_EINVAL);
    bad = hand_cfg;
    bad.t_low_ns = bad.t_high_ns + 1;
    assert_int_equal(erma_timely_cfg_check(&bad), ERMA_EINVAL);
    bad = hand_cfg;
    bad.alpha = 0;
    assert_int_equal(erma_timely_cfg_check(&bad), ERMA_EINVAL);
    bad = hand_cfg;
    bad.beta = NAN;
    assert_int_equal(erma_timely_cfg_check(&bad), ERMA_EINVAL);
}

void test_timely_low_rtt_increases(void **state)
{
    (void)state;
    struct erma_timely t;
    assert_int_equal(erma_timely_init(&t, &hand_cfg, 0), ERMA_OK);
    assert_near(t.rate_bps, 10e9); /* starts at link rate */
    t.rate_bps = 5e9;
    /* A full min RTT (here the sample, 20 us) since the last update: one step. */
    assert_near(erma_timely_update(&t, 20000, 1000000), 5e9 + 1e8);
    /* 5 us later: a quarter of a 20 us min RTT, a quarter step. */
    assert_near(erma_timely_update(&t, 20000, 1005000), 5e9 + 1.25e8);
    assert_int_equal(t.min_rtt_ns, 20000);
    assert_int_equal(t.updates, 2);
}

void test_timely_high_rtt_decreases(void **state)
{
    (void)state;
    struct erma_timely t;
    assert_int_equal(erma_timely_init(&t, &hand_cfg, 0), ERMA_OK);
    t.rate_bps = 5e9;
    /* rate *= 1 - beta * (1 - t_high / rtt) = 1 - 0.25 * (1 - 0.5) */
    assert_near(erma_timely_update(&t, 1000000, 2000000), 5e9 * 0.875);
    /* Closer to t_high, a smaller cut: 1 - 0.25 * (1 - 500/625). */
    assert_near(erma_timely_update(&t, 625000, 4000000), 5e9 * 0.875 * 0.95);
}

void test_timely_gradient(void **state)
{
    (void)state;
    struct erma_timely t;
    assert_int_equal(erma_timely_init(&t, &hand_cfg, 0), ERMA_OK);
    t.rate_bps = 5e9;
    uint64_t now = 0;
    double rate = 5e9;
    /* First sample in the band: gradient 0, which counts as "not rising". */
    rate += 1e8;
    assert_near(erma_timely_update(&t, 100000, now += 1000000), rate);
    /* Rising by 10 us: gradient 0.5 * 10 us = 5 us, normalised by 100 us. */
    rate *= 1 - 0.25 * (5000.0 / 100000);
    assert_near(erma_timely_update(&t, 110000, now += 1000000), rate);
    assert_near(t.gradient_ns, 5000);
    /* Falling by 5 us: gradient 0.5 * 5000 + 0.5 * -5000 = 0: increase. */
    rate += 1e8;
    assert_near(erma_timely_update(&t, 105000, now += 1000000), rate);
    assert_near(t.gradient_ns, 0);
    /* Rising by 1 us: gradient 500 ns, min RTT still 100 us. */
    rate *= 1 - 0.25 * (500.0 / 100000);
    assert_near(erma_timely_update(&t, 106000, now += 1000000), rate);
    /* Falling to 95 us: gradient 250 - 5500 < 0: increase; min RTT now 95 us. */
    rate += 1e8;
    assert_near(erma_timely_update(&t, 95000, now += 1000000), rate);
    assert_near(t.gradient_ns, -5250);
    assert_int_equal(t.min_rtt_ns, 95000);
    /* avg_rtt is the alpha-EWMA of the samples. */
    double avg = 100000;
    const double s[] = {110000, 105000, 106000, 95000};
    for (int i = 0; i < 4; i++)
        avg = 0.5 * avg + 0.5 * s[i];
    assert_near(t.avg_rtt_ns, avg);
}

void test_timely_hai(void **state)
{
    (void)state;
    for (uint32_t hai = 0; hai <= 5; hai += 5) {
        struct erma_timely_cfg cfg = hand_cfg;
        cfg.hai_n = hai;
        struct erma_timely t;
        assert_int_equal(erma_timely_init(&t, &cfg, 0), ERMA_OK);
        t.rate_bps = 5e9;
        uint64_t now = 0, rtt = 200000;
        double rate = 5e9;
        erma_timely_update(&t, rtt, now += 1000000); /* first sample: +1 step */
        rate += 1e8;
        for (uint32_t falling = 1; falling <= 7; falling++) {
            const double r = erma_timely_update(&t, rtt -= 1000, now += 1000000);
            const bool boosted = hai && falling >= hai;
            rate += (boosted ? 5 : 1) * 1e8;
            assert_near(r, rate);
            assert_int_equal(t.falling, falling);
        }
        /* A rising sample ends the run of falling ones. */
        erma_timely_update(&t, rtt + 100000, now += 1000000);
        assert_int_equal(t.falling, 0);
    }
}

void test_timely_floor_and_ceiling(void **state)
{
    (void)state;
    struct erma_timely t;
    assert_int_equal(erma_timely_init(&t, &hand_cfg, 0), ERMA_OK);
    uint64_t now = 0;
    /* A steep rise: 1 - beta * g would go negative; one update at most halves. */
    erma_timely_update(&t, 60000, now += 1000000);
    assert_near(erma_timely_update(&t, 400000, now += 1000000), 5e9);
    /* Far above t_high for long: down to the floor, never below. */
    for (int i = 0; i < 1000; i++) {
        const double r = erma_timely_update(&t, 5000000, now += 10000000);
        assert_true(r >= hand_cfg.floor_bps);
    }
    assert_near(t.rate_bps, hand_cfg.floor_bps);
    /* Far below t_low for long: up to link rate, never above. */
    for (int i = 0; i < 1000; i++) {
        const double r = erma_timely_update(&t, 10000, now += 10000);
        assert_true(r <= hand_cfg.link_bps);
    }
    assert_near(t.rate_bps, hand_cfg.link_bps);
}

void test_timely_bypass(void **state)
{
    (void)state;
    struct erma_timely_cfg cfg = hand_cfg;
    cfg.bypass = true;
    struct erma_timely t;
    assert_int_equal(erma_timely_init(&t, &cfg, 0), ERMA_OK);
    /* At link rate, below t_low: bypassed, only the sample is noted. */
    assert_near(erma_timely_update(&t, 20000, 1000000), 10e9);
    assert_int_equal(t.updates, 1);
    assert_int_equal(t.bypasses, 1);
    assert_int_equal(t.last_rtt_ns, 20000);
    assert_int_equal(t.min_rtt_ns, 20000);
    assert_near(t.avg_rtt_ns, 0);             /* not computed */
    assert_int_equal(t.last_update_ns, 0);    /* not computed */
    /* Switched off at run time: the same sample is computed. */
    cfg.bypass = false;
    erma_timely_update(&t, 30000, 2000000);
    assert_int_equal(t.updates, 2);
    assert_int_equal(t.bypasses, 1);
    assert_near(t.avg_rtt_ns, 30000);
    assert_near(t.gradient_ns, 5000); /* 0.5 * (30 - 20 us): against the bypassed sample */
    /* On again, but not at link rate: computed. */
    cfg.bypass = true;
    t.rate_bps = 5e9;
    erma_timely_update(&t, 30000, 3000000);
    assert_int_equal(t.bypasses, 1);
    /* At link rate but at t_low: computed. */
    t.rate_bps = 10e9;
    erma_timely_update(&t, 50000, 4000000);
    assert_int_equal(t.bypasses, 1);
    t.rate_bps = 10e9;
    erma_timely_update(&t, 49999, 5000000);
    assert_int_equal(t.bypasses, 2);
    assert_int_equal(t.updates, 5);
}

/* The eRPC complaint: sessions on an idle path end up at 0.12 Gb/s. */
static void uncongested(struct erma_timely_cfg cfg, uint64_t base, uint64_t jitter, bool bypass)
{
    cfg.bypass = bypass;
    struct erma_timely t;
    assert_int_equal(erma_timely_init(&t, &cfg, 0), ERMA_OK);
    struct erma_rand r;
    erma_rand_seed(&r, base + jitter);
    uint64_t now = 0;
    for (int i = 0; i < 100000; i++) {
        const uint64_t rtt = base + erma_rand_below(&r, jitter + 1);
        now += rtt;
        if (erma_timely_update(&t, rtt, now) != cfg.link_bps)
            fail_msg("update %d: rate %.6g b/s, link %.6g", i, t.rate_bps, cfg.link_bps);
    }
    assert_int_equal(t.updates, 100000);
    assert_int_equal(t.bypasses, bypass ? 100000 : 0);
}

void test_timely_uncongested_stays_at_link(void **state)
{
    (void)state;
    for (int bypass = 0; bypass <= 1; bypass++) {
        uncongested(erma_timely_cfg_for(25e9, 10000), 10000, 0, bypass);     /* at base */
        uncongested(erma_timely_cfg_for(25e9, 10000), 10000, 20000, bypass); /* base..3x */
        uncongested(erma_timely_cfg_for(25e9, 60000), 60000, 120000, bypass);
        uncongested(erma_timely_cfg_real(), 20000, 10000, bypass);
    }
}

/* A 60 us path with jitter, as on kernel stacks and VMs: eRPC's fixed 50 us
 * t_low puts every sample in the gradient band and noise drags the rate
 * down; thresholds derived from the base RTT keep it at link rate. */
void test_timely_real_cfg_on_slow_path(void **state)
{
    (void)state;
    const struct erma_timely_cfg real = erma_timely_cfg_real();
    const struct erma_timely_cfg tuned = erma_timely_cfg_for(25e9, 60000);
    struct erma_timely a, b;
    assert_int_equal(erma_timely_init(&a, &real, 0), ERMA_OK);
    assert_int_equal(erma_timely_init(&b, &tuned, 0), ERMA_OK);
    struct erma_rand r;
    erma_rand_seed(&r, 7);
    uint64_t now = 0;
    double sum = 0;
    for (int i = 0; i < 100000; i++) {
        const uint64_t rtt = 60000 + erma_rand_below(&r, 30001);
        now += rtt;
        sum += erma_timely_update(&a, rtt, now);
        assert_near(erma_timely_update(&b, rtt, now), 25e9);
    }
    print_message("timely: 60-90 us path, real cfg mean %.2f Gb/s, cfg_for %.2f Gb/s\n",
                  sum / 100000 / 1e9, b.rate_bps / 1e9);
    assert_true(sum / 100000 < 0.25 * 25e9);
}

/* Congestion, then the queue drains: back at link rate within the number of
 * additive steps between floor and link (d = 1 with one sample per RTT). */
static int recovery(struct erma_timely_cfg cfg, uint64_t base)
{
    struct erma_timely t;
    assert_int_equal(erma_timely_init(&t, &cfg, 0), ERMA_OK);
    uint64_t now = 0, rtt = base;
    for (int i = 0; i < 300; i++) { /* the queue builds up, past t_high */
        rtt = rtt < 4 * cfg.t_high_ns ? rtt + cfg.t_high_ns / 50 : rtt;
        erma_timely_update(&t, rtt, now += rtt);
    }
    assert_true(t.rate_bps <= 0.05 * cfg.link_bps);
    const int bound = (int)ceil((cfg.link_bps - cfg.floor_bps) / cfg.step_bps);
    int n = 0;
    while (t.rate_bps < cfg.link_bps && n <= bound) {
        erma_timely_update(&t, base, now += base);
        n++;
    }
    print_message("timely: recovered to %.1f Gb/s in %d updates (bound %d)\n",
                  t.rate_bps / 1e9, n, bound);
    assert_near(t.rate_bps, cfg.link_bps);
    assert_true(n <= bound);
    /* and stays there */
    for (int i = 0; i < 1000; i++)
        assert_near(erma_timely_update(&t, base, now += base), cfg.link_bps);
    return n;
}

void test_timely_recovers(void **state)
{
    (void)state;
    assert_true(recovery(erma_timely_cfg_for(25e9, 10000), 10000) <= 1000);
    assert_true(recovery(erma_timely_cfg_real(), 10000) <= 622);
    struct erma_timely_cfg nobypass = erma_timely_cfg_for(10e9, 20000);
    nobypass.bypass = false;
    recovery(nobypass, 20000);
}
