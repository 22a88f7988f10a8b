/*
 * Tests of the congestion-control units (cc/): the Carousel timing wheel and
 * pacer, Timely, and 1RMA's dual-window CC, ending with a small fluid
 * simulation of window-CC flows at one bottleneck. Figures the simulations
 * measure are printed (ctest --output-on-failure -V shows them).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#include "erma/cc.h"
#include "erma/errors.h"
#include "erma/rand.h"

/* a == b to 1e-9 relative (exact formulas, computed in another order). */
#define assert_near(a, b) assert_near_at((a), (b), __FILE__, __LINE__)
static void assert_near_at(double a, double b, const char *file, int line)
{
    if (fabs(a - b) > 1e-9 * fabs(b) + 1e-9) {
        print_error("%s:%d: %.12g != %.12g\n", file, line, a, b);
        fail();
    }
}

/* ============================================================ wheel */

static void test_wheel_cfg_for(void **state)
{
    (void)state;
    struct erma_wheel_cfg c = erma_wheel_cfg_for(1500, 120e6); /* eRPC's floor */
    assert_int_equal(c.slot_ns, 500);
    assert_int_equal(c.horizon_ns, 100000); /* 12000 bits at 120 Mb/s */
    assert_int_equal(c.capacity, 4096);

    c = erma_wheel_cfg_for(9000, 1e5); /* 720 ms: the slot widens */
    assert_int_equal(c.horizon_ns, 720000000);
    assert_true(c.slot_ns > 500);
    assert_true(c.horizon_ns / c.slot_ns <= 65536);
    struct erma_wheel w;
    assert_int_equal(erma_wheel_init(&w, &c, 0), ERMA_OK);
    assert_true(w.nslots <= 65537);
    assert_true((uint64_t)(w.nslots - 1) * w.slot_ns >= c.horizon_ns);
    erma_wheel_destroy(&w);

    c = erma_wheel_cfg_for(0, 0); /* defaults: 1500 B at 1 Mb/s */
    assert_int_equal(c.horizon_ns, 12000000);
}

static void test_wheel_bad_cfg(void **state)
{
    (void)state;
    struct erma_wheel w;
    struct erma_wheel_cfg c = {.slot_ns = 0, .horizon_ns = 1000, .capacity = 8};
    assert_int_equal(erma_wheel_init(&w, &c, 0), ERMA_EINVAL);
    c = (struct erma_wheel_cfg){.slot_ns = 100, .horizon_ns = 0, .capacity = 8};
    assert_int_equal(erma_wheel_init(&w, &c, 0), ERMA_EINVAL);
    c = (struct erma_wheel_cfg){.slot_ns = 100, .horizon_ns = 1000, .capacity = 0};
    assert_int_equal(erma_wheel_init(&w, &c, 0), ERMA_EINVAL);
    c = (struct erma_wheel_cfg){.slot_ns = 1, .horizon_ns = 1ull << 30, .capacity = 8};
    assert_int_equal(erma_wheel_init(&w, &c, 0), ERMA_EINVAL); /* 2^30 slots */
}

struct released {
    uint64_t key;  /* slot number the entry belongs to: max(due, slot start at insert) */
    uint64_t seq;  /* insertion order */
    bool done;
};

/* Random due times across the whole horizon, the wheel turning ~20 times:
 * every entry leaves at or after its due time and less than one slot plus
 * one reap step after it, in slot order, FIFO within a slot. */
static void test_wheel_release_times(void **state)
{
    (void)state;
    enum { N = 60000, MAXSTEP = 125 };
    const struct erma_wheel_cfg cfg = {.slot_ns = 500, .horizon_ns = 100000, .capacity = 4096};
    static struct released rec[N];
    memset(rec, 0, sizeof rec);
    struct erma_wheel w;
    uint64_t now = 1234567;
    assert_int_equal(erma_wheel_init(&w, &cfg, now), ERMA_OK);
    struct erma_rand r;
    erma_rand_seed(&r, 42);
    struct erma_wheel_entry out[64];
    uint64_t inserted = 0, released = 0, last_key = 0, last_seq = 0, max_late = 0;
    bool any = false;

    while (released < N) {
        const uint64_t step = 1 + erma_rand_below(&r, MAXSTEP);
        now += step;
        size_t n;
        while ((n = erma_wheel_reap(&w, now, out, 64)) > 0) {
            for (size_t i = 0; i < n; i++) {
                struct released *e = &rec[out[i].cookie];
                assert_ptr_equal(out[i].ptr, e);
                assert_false(e->done);
                e->done = true;
                assert_true(now >= out[i].due_ns);                /* never early */
                assert_true(now - out[i].due_ns < cfg.slot_ns + step); /* within a slot */
                if (now - out[i].due_ns > max_late)
                    max_late = now - out[i].due_ns;
                if (any) {
                    assert_true(e->key >= last_key);
                    if (e->key == last_key)
                        assert_true(e->seq > last_seq);
                }
                any = true;
                last_key = e->key;
                last_seq = e->seq;
                released++;
            }
        }
        /* Insert 0-3 entries due anywhere in [now, now + horizon]. */
        for (uint64_t k = erma_rand_below(&r, 4); k > 0 && inserted < N; k--) {
            const uint64_t due = now + erma_rand_below(&r, cfg.horizon_ns + 1);
            const uint64_t slot_start = now - now % cfg.slot_ns;
            rec[inserted] = (struct released){
                .key = (due > slot_start ? due : slot_start) / cfg.slot_ns, .seq = inserted};
            assert_int_equal(erma_wheel_insert(&w, due, &rec[inserted], inserted), ERMA_OK);
            inserted++;
        }
        assert_int_equal(erma_wheel_count(&w), inserted - released);
    }
    assert_int_equal(inserted, N);
    print_message("wheel: %d entries, latest release %llu ns after due (slot %llu ns)\n", N,
                  (unsigned long long)max_late, (unsigned long long)cfg.slot_ns);
    erma_wheel_destroy(&w);
}

static void test_wheel_capacity(void **state)
{
    (void)state;
    const struct erma_wheel_cfg cfg = {.slot_ns = 100, .horizon_ns = 1000, .capacity = 4};
    struct erma_wheel w;
    assert_int_equal(erma_wheel_init(&w, &cfg, 0), ERMA_OK);
    for (uint64_t i = 0; i < 4; i++)
        assert_int_equal(erma_wheel_insert(&w, 10 + i * 100, NULL, i), ERMA_OK);
    assert_int_equal(erma_wheel_insert(&w, 50, NULL, 99), ERMA_ENOSLOTS);
    assert_int_equal(erma_wheel_count(&w), 4);
    struct erma_wheel_entry out[4];
    assert_int_equal(erma_wheel_reap(&w, 100, out, 4), 1); /* slot [0,100) ended */
    assert_int_equal(out[0].cookie, 0);
    assert_int_equal(erma_wheel_insert(&w, 150, NULL, 4), ERMA_OK);
    assert_int_equal(erma_wheel_insert(&w, 150, NULL, 5), ERMA_ENOSLOTS);
    erma_wheel_destroy(&w);
}

static void test_wheel_clamping(void **state)
{
    (void)state;
    const struct erma_wheel_cfg cfg = {.slot_ns = 100, .horizon_ns = 1000, .capacity = 8};
    struct erma_wheel w;
    assert_int_equal(erma_wheel_init(&w, &cfg, 5050), ERMA_OK); /* slot [5000, 5100) */
    assert_int_equal(w.nslots, 11);
    struct erma_wheel_entry out[8];
    /* Past: the current slot, released when it ends. */
    assert_int_equal(erma_wheel_insert(&w, 10, NULL, 1), ERMA_OK);
    /* Far future, and just past the last slot: the last slot, [6000, 6100). */
    assert_int_equal(erma_wheel_insert(&w, 1000000, NULL, 2), ERMA_OK);
    assert_int_equal(erma_wheel_insert(&w, 5000 + 11 * 100, NULL, 3), ERMA_OK);
    assert_int_equal(erma_wheel_reap(&w, 5099, out, 8), 0);
    assert_int_equal(erma_wheel_reap(&w, 5100, out, 8), 1);
    assert_int_equal(out[0].cookie, 1);
    assert_int_equal(out[0].due_ns, 10);
    assert_int_equal(erma_wheel_reap(&w, 6099, out, 8), 0);
    assert_int_equal(erma_wheel_reap(&w, 6100, out, 8), 2);
    assert_int_equal(out[0].cookie, 2);
    assert_int_equal(out[1].cookie, 3);
    assert_int_equal(erma_wheel_count(&w), 0);
    /* A long idle gap, then the wheel is used again at the new time. */
    assert_int_equal(erma_wheel_reap(&w, 987654321, out, 8), 0);
    assert_int_equal(erma_wheel_insert(&w, 987654321 + 250, NULL, 3), ERMA_OK);
    assert_int_equal(erma_wheel_reap(&w, 987654321 + 278, out, 8), 0); /* slot ends at ..400 */
    assert_int_equal(erma_wheel_reap(&w, 987654400, out, 8), 0);
    assert_int_equal(erma_wheel_reap(&w, 987654600, out, 8), 1);
    /* Entries left on the wheel across a gap of many turns all come out, in order. */
    for (uint64_t i = 0; i < 5; i++)
        assert_int_equal(erma_wheel_insert(&w, 987654600 + 900 - i * 200, NULL, i), ERMA_OK);
    assert_int_equal(erma_wheel_reap(&w, 987654600 + 50 * 1000, out, 8), 5);
    for (uint64_t i = 0; i < 5; i++)
        assert_int_equal(out[i].cookie, 4 - i);
    erma_wheel_destroy(&w);
}

static void test_wheel_reap_max(void **state)
{
    (void)state;
    const struct erma_wheel_cfg cfg = {.slot_ns = 100, .horizon_ns = 1000, .capacity = 16};
    struct erma_wheel w;
    assert_int_equal(erma_wheel_init(&w, &cfg, 0), ERMA_OK);
    for (uint64_t i = 0; i < 10; i++) /* 5 in slot [100,200), then 5 in [300,400) */
        assert_int_equal(erma_wheel_insert(&w, i < 5 ? 150 : 350, NULL, i), ERMA_OK);
    struct erma_wheel_entry out[3];
    uint64_t next = 0;
    size_t n;
    while ((n = erma_wheel_reap(&w, 10000, out, 3)) > 0) {
        assert_true(n <= 3);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(out[i].cookie, next++);
    }
    assert_int_equal(next, 10);
    erma_wheel_destroy(&w);
}

static void test_pacer(void **state)
{
    (void)state;
    /* 1250 B at 1 Gb/s = 10 us. */
    assert_int_equal(erma_pacer_next_tx(1e9, 1250, 5000, 0), 15000);
    assert_int_equal(erma_pacer_next_tx(1e9, 1250, 5000, 14999), 15000);
    assert_int_equal(erma_pacer_next_tx(1e9, 1250, 5000, 20000), 20000); /* no burst */
    assert_int_equal(erma_pacer_next_tx(3e9, 1, 0, 0), 3); /* 2.67 ns rounds up */
    assert_int_equal(erma_pacer_next_tx(0, 1500, 0, 7), UINT64_MAX);
    assert_int_equal(erma_pacer_next_tx(1, 1500, UINT64_MAX - 10, 0), UINT64_MAX);
    /* A session paced at 120 Mb/s through the wheel: each packet is due one
     * MTU gap after the previous and leaves within a slot of it. */
    const struct erma_wheel_cfg cfg = erma_wheel_cfg_for(1500, 120e6);
    struct erma_wheel w;
    assert_int_equal(erma_wheel_init(&w, &cfg, 0), ERMA_OK);
    uint64_t now = 0, last_tx = 0, last_out = 0;
    struct erma_wheel_entry out[4];
    for (int pkt = 0; pkt < 100; now += 50) {
        const size_t n = erma_wheel_reap(&w, now, out, 4);
        if (n) {
            assert_int_equal(n, 1);
            if (pkt > 1)
                assert_in_range(now - last_out, 100000 - 500, 100000 + 500);
            last_out = now;
        }
        if (erma_wheel_count(&w) == 0) {
            last_tx = erma_pacer_next_tx(120e6, 1500, last_tx, now);
            assert_int_equal(erma_wheel_insert(&w, last_tx, NULL, (uint64_t)pkt), ERMA_OK);
            pkt++;
        }
    }
    erma_wheel_destroy(&w);
}

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

static void test_timely_cfgs(void **state)
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

static void test_timely_low_rtt_increases(void **state)
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

static void test_timely_high_rtt_decreases(void **state)
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

static void test_timely_gradient(void **state)
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

static void test_timely_hai(void **state)
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

static void test_timely_floor_and_ceiling(void **state)
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

static void test_timely_bypass(void **state)
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

static void test_timely_uncongested_stays_at_link(void **state)
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
static void test_timely_real_cfg_on_slow_path(void **state)
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

static void test_timely_recovers(void **state)
{
    (void)state;
    assert_true(recovery(erma_timely_cfg_for(25e9, 10000), 10000) <= 1000);
    assert_true(recovery(erma_timely_cfg_real(), 10000) <= 622);
    struct erma_timely_cfg nobypass = erma_timely_cfg_for(10e9, 20000);
    nobypass.bypass = false;
    recovery(nobypass, 20000);
}

/* ======================================================== window CC */

static const struct erma_window_cfg hand_wcfg = {
    .ai = 0.25,
    .beta = 0.8,
    .md = 0.5,
    .cut = 10,
    .min_cwnd = 1.0 / 64,
    .max_cwnd = 100,
    .init_cwnd = 0.5,
    .local_target_ns = 5000,
    .remote_target_ns = 20000,
    .base_rtt_ns = 10000,
    .op_bytes = 4096,
    .max_remotes = 4,
    .merged = false,
};

#define IN ERMA_WINDOW_IN
#define OUT ERMA_WINDOW_OUT

/* Issues one op to dst and completes it with status and delays at now. */
static void op(struct erma_window_cc *cc, uint64_t dst, int status, uint64_t issue_delay,
               uint64_t total_delay, uint64_t now)
{
    assert_int_equal(erma_window_on_issue(cc, dst, IN, 4096, now - total_delay), ERMA_OK);
    assert_int_equal(erma_window_on_complete(cc, dst, IN, status, issue_delay, total_delay, now),
                     ERMA_OK);
}

static void test_window_cfg_for(void **state)
{
    (void)state;
    const struct erma_window_cfg c = erma_window_cfg_for(25e9, 10000);
    assert_near(c.ai, 0.25);
    assert_near(c.beta, 0.8);
    assert_near(c.md, 0.5);
    assert_near(c.cut, 10);
    assert_near(c.min_cwnd, 1.0 / 64);
    assert_near(c.init_cwnd, 25e9 * 10e-6 / 8 / 4096); /* BDP: 7.63 ops */
    assert_near(c.max_cwnd, 256);
    assert_int_equal(c.remote_target_ns, 12500);
    assert_int_equal(c.local_target_ns, 5000);
    struct erma_window_cc cc;
    assert_int_equal(erma_window_init(&cc, &c), ERMA_OK);
    erma_window_destroy(&cc);
    const struct erma_window_cfg big = erma_window_cfg_for(400e9, 100000); /* 1221 ops BDP */
    assert_near(big.max_cwnd, ceil(4 * 400e9 * 100e-6 / 8 / 4096));
    assert_near(erma_window_cfg_for(1e6, 1000).init_cwnd, 1);
    struct erma_window_cfg bad = c;
    bad.init_cwnd = 1000;
    assert_int_equal(erma_window_init(&cc, &bad), ERMA_EINVAL);
    bad = c;
    bad.md = 0;
    assert_int_equal(erma_window_init(&cc, &bad), ERMA_EINVAL);
}

static void test_window_ai(void **state)
{
    (void)state;
    struct erma_window_cc cc;
    assert_int_equal(erma_window_init(&cc, &hand_wcfg), ERMA_OK);
    /* Both delays below target: both windows increase, 0.25 per op below 1. */
    const double expect[] = {0.75, 1.0, 1.25, 1.25 + 0.25 / 1.25, 1.45 + 0.25 / 1.45};
    uint64_t now = 100000;
    for (int i = 0; i < 5; i++) {
        op(&cc, 1, ERMA_OK, 1000, 15000, now += 10000);
        assert_near(cc.local.cwnd, expect[i]);
        assert_near(erma_window_find(&cc, 1, IN)->cwnd, expect[i]);
    }
    /* Delay exactly at target counts as below. */
    op(&cc, 1, ERMA_OK, 5000, 25000, now += 10000);
    assert_near(erma_window_find(&cc, 1, IN)->cwnd, expect[4] + 0.25 / expect[4]);
    /* max_cwnd caps it. */
    for (int i = 0; i < 100000; i++)
        op(&cc, 1, ERMA_OK, 0, 10000, now += 10000);
    assert_near(cc.local.cwnd, 100);
    erma_window_destroy(&cc);
}

static void test_window_md(void **state)
{
    (void)state;
    struct erma_window_cfg cfg = hand_wcfg;
    cfg.init_cwnd = 10;
    struct erma_window_cc cc;
    assert_int_equal(erma_window_init(&cc, &cfg), ERMA_OK);
    uint64_t now = 1000000;
    /* remote_delay 40 us, target 20: cwnd *= 1 - 0.8 * 20 / 40 = 0.6. */
    op(&cc, 1, ERMA_OK, 1000, 41000, now);
    struct erma_window *r = erma_window_find(&cc, 1, IN);
    assert_near(r->cwnd, 6.0);
    assert_int_equal(r->decreases, 1);
    assert_near(cc.local.cwnd, 10 + 0.025); /* issue_delay 1 us: local AI */
    /* srtt = 10 + (41 - 10) / 8 us; no second decrease before it has passed. */
    assert_int_equal(r->srtt_ns, 13875);
    assert_int_equal(r->next_decrease_ns, now + 13875);
    op(&cc, 1, ERMA_OK, 1000, 41000, now + 13874);
    assert_near(r->cwnd, 6.0);
    assert_int_equal(r->decreases, 1);
    op(&cc, 1, ERMA_OK, 1000, 41000, now + 13875);
    assert_near(r->cwnd, 3.6);
    assert_int_equal(r->decreases, 2);
    /* A huge delay is cut by at most md: 1 - 0.8 * 980 / 1000 < 0.5. */
    op(&cc, 1, ERMA_OK, 1000, 1001000, now += 10000000);
    assert_near(r->cwnd, 1.8);
    /* The local window follows the same rules on issue_delay (target 5 us):
     * 1 - 0.8 * (8 - 5) / 8 = 0.7. */
    const double local = cc.local.cwnd;
    op(&cc, 1, ERMA_OK, 8000, 18000, now += 10000000);
    assert_near(cc.local.cwnd, local * 0.7);
    assert_near(r->cwnd, 1.8 + 0.25 / 1.8); /* remote_delay 10 us: AI */
    /* Never below min_cwnd. */
    for (int i = 0; i < 100; i++)
        op(&cc, 1, ERMA_OK, 0, 10000000, now += 100000000);
    assert_near(r->cwnd, 1.0 / 64);
    erma_window_destroy(&cc);
}

static void test_window_cuts(void **state)
{
    (void)state;
    struct erma_window_cfg cfg = hand_wcfg;
    cfg.init_cwnd = 50;
    struct erma_window_cc cc;
    assert_int_equal(erma_window_init(&cc, &cfg), ERMA_OK);
    uint64_t now = 1000000;
    op(&cc, 1, ERMA_EDISPATCH, 0, 0, now += 1000);
    struct erma_window *r = erma_window_find(&cc, 1, IN);
    assert_near(cc.local.cwnd, 5);
    assert_near(r->cwnd, 50);
    /* The remote window keeps its own time: the local cut 1 us ago does
     * not hold off its cut. */
    op(&cc, 1, ERMA_ETIMEDOUT, 0, 0, now += 1000);
    assert_near(cc.local.cwnd, 5);
    assert_near(r->cwnd, 5);
    /* srtt is 10 us (base_rtt_ns): a NACK 11 us later cuts again. */
    op(&cc, 1, ERMA_ENACK, 0, 0, now += 11000);
    assert_near(cc.local.cwnd, 5);
    assert_near(r->cwnd, 0.5);
    /* Errors that say nothing about congestion change nothing. */
    op(&cc, 1, ERMA_EAUTH, 0, 0, now += 20000);
    op(&cc, 1, ERMA_EBOUNDS, 0, 0, now += 1000);
    assert_near(cc.local.cwnd, 5);
    assert_near(r->cwnd, 0.5);
    assert_int_equal(r->cuts, 2);
    assert_int_equal(cc.local.cuts, 1);
    assert_int_equal(r->cuts_skipped, 0);
    assert_int_equal(r->inflight, 0);
    assert_int_equal(cc.local.inflight, 0);
    /* Cuts spaced more than an srtt apart stop at min_cwnd. */
    for (int i = 0; i < 3; i++) {
        op(&cc, 1, ERMA_ENACK, 0, 0, now += 10000);
        op(&cc, 1, ERMA_EDISPATCH, 0, 0, now);
    }
    assert_near(r->cwnd, 1.0 / 64);
    assert_near(cc.local.cwnd, 1.0 / 64);
    /* A cut also holds off the next delay-based decrease for an srtt. */
    struct erma_window_cc c2;
    assert_int_equal(erma_window_init(&c2, &cfg), ERMA_OK);
    op(&c2, 2, ERMA_ENACK, 0, 0, 5000000);
    op(&c2, 2, ERMA_OK, 0, 100000, 5000000 + 9999);
    assert_near(erma_window_find(&c2, 2, IN)->cwnd, 5);
    op(&c2, 2, ERMA_OK, 0, 100000, 5000000 + 10000);
    assert_true(erma_window_find(&c2, 2, IN)->cwnd < 5);
    /* ... and a delay-based decrease holds off the next cut. */
    const double w = erma_window_find(&c2, 2, IN)->cwnd;
    op(&c2, 2, ERMA_ETIMEDOUT, 0, 0, 5000000 + 10001);
    assert_near(erma_window_find(&c2, 2, IN)->cwnd, w);
    erma_window_destroy(&c2);
    erma_window_destroy(&cc);
}

/* Algorithm 1: k failures of one window within an RTT cut it once (not
 * cut^k); the same failures spaced more than an RTT apart cut each time. */
static void test_window_cut_once_per_rtt(void **state)
{
    (void)state;
    struct erma_window_cfg cfg = hand_wcfg; /* srtt 10 us, cut 10 */
    cfg.init_cwnd = 100;
    static const int fails[] = {ERMA_ENACK, ERMA_ETIMEDOUT, ERMA_EDISPATCH};
    for (size_t f = 0; f < sizeof fails / sizeof fails[0]; f++) {
        struct erma_window_cc cc;
        assert_int_equal(erma_window_init(&cc, &cfg), ERMA_OK);
        const bool local = fails[f] == ERMA_EDISPATCH;
        uint64_t now = 1000000;
        /* A burst of 8 failures within 9 us (< srtt): one cut. */
        for (int i = 0; i < 8; i++)
            op(&cc, 1, fails[f], 0, 0, now + (uint64_t)i * 1250);
        const struct erma_window *w = local ? &cc.local : erma_window_find(&cc, 1, IN);
        const struct erma_window *other = local ? erma_window_find(&cc, 1, IN) : &cc.local;
        assert_near(w->cwnd, 10);
        assert_int_equal(w->cuts, 1);
        assert_int_equal(w->cuts_skipped, 7);
        assert_near(other->cwnd, 100);
        /* Exactly one srtt after the cut the window may be cut again. */
        op(&cc, 1, fails[f], 0, 0, now + 9999);
        assert_near(w->cwnd, 10);
        op(&cc, 1, fails[f], 0, 0, now + 10000);
        assert_near(w->cwnd, 1);
        /* Failures spaced 11 us apart (> srtt): each one cuts. */
        erma_window_destroy(&cc);
        assert_int_equal(erma_window_init(&cc, &cfg), ERMA_OK);
        for (int i = 0; i < 3; i++)
            op(&cc, 1, fails[f], 0, 0, now + (uint64_t)i * 11000);
        w = local ? &cc.local : erma_window_find(&cc, 1, IN);
        assert_near(w->cwnd, 0.1);
        assert_int_equal(w->cuts, 3);
        assert_int_equal(w->cuts_skipped, 0);
        erma_window_destroy(&cc);
    }
}

/* A local signal does not shrink a remote window, nor a remote one the
 * local window; remote windows of different destinations are independent. */
static void test_window_local_remote_split(void **state)
{
    (void)state;
    struct erma_window_cfg cfg = hand_wcfg;
    cfg.init_cwnd = 8;
    struct erma_window_cc cc;
    assert_int_equal(erma_window_init(&cc, &cfg), ERMA_OK);
    uint64_t now = 1000000;
    /* Local congestion only: issue_delay 50 us, remote_delay 10 us. */
    for (int i = 0; i < 20; i++)
        op(&cc, 1, ERMA_OK, 50000, 60000, now += 100000);
    struct erma_window *r1 = erma_window_find(&cc, 1, IN);
    assert_true(cc.local.cwnd < 1);
    assert_true(r1->cwnd > 8);
    assert_int_equal(r1->decreases, 0);
    assert_near(erma_window_limit(&cc, 1, IN), cc.local.cwnd);
    /* Remote congestion only, at destination 2: issue_delay 1 us, remote 200 us. */
    const double local = cc.local.cwnd, w1 = r1->cwnd;
    for (int i = 0; i < 20; i++)
        op(&cc, 2, ERMA_OK, 1000, 201000, now += 1000000);
    struct erma_window *r2 = erma_window_find(&cc, 2, IN);
    assert_true(r2->cwnd < 1);
    assert_true(cc.local.cwnd > local);
    assert_int_equal(cc.local.decreases, 20);  /* only the first phase */
    assert_near(r1->cwnd, w1); /* destination 1 untouched */
    assert_near(erma_window_limit(&cc, 2, IN), r2->cwnd);
    /* The other direction of destination 2 is a window of its own. */
    assert_null(erma_window_find(&cc, 2, OUT));
    assert_near(erma_window_limit(&cc, 2, OUT), fmin(cc.local.cwnd, cfg.init_cwnd));
    erma_window_destroy(&cc);
}

/* The delay every active flow of a direction shares goes to the local
 * window, not the remote ones (cc.h SHARED DELAY). */
static void test_window_shared_delay(void **state)
{
    (void)state;
    struct erma_window_cfg cfg = hand_wcfg;
    cfg.init_cwnd = 8;
    struct erma_window_cc cc;
    assert_int_equal(erma_window_init(&cc, &cfg), ERMA_OK);
    uint64_t now = 1000000;
    /* One flow, 10 us at first and then 18: its queue may be its target's,
     * so nothing is shared and the local window sees no delay. */
    op(&cc, 1, ERMA_OK, 0, 10000, now += 2000);
    for (int i = 0; i < 50; i++)
        op(&cc, 1, ERMA_OK, 0, 18000, now += 2000);
    assert_int_equal(cc.shared_ns[IN], 0);
    assert_int_equal(cc.local.decreases, 0);
    /* A second flow, the same 10 us then 18 us: both read 8 us over their
     * smallest, which is shared: the local window decreases (8 us > its 5
     * us target) and no remote window sees more than 10 us. */
    op(&cc, 2, ERMA_OK, 0, 10000, now += 2000);
    for (int i = 0; i < 100; i++)
        op(&cc, 1 + (uint64_t)(i & 1), ERMA_OK, 0, 18000, now += 2000);
    assert_in_range(cc.shared_ns[IN], 6000, 8000);
    assert_true(cc.local.decreases > 0);
    const struct erma_window *r1 = erma_window_find(&cc, 1, IN), *r2 = erma_window_find(&cc, 2, IN);
    assert_int_equal(r1->decreases + r2->decreases, 0);
    /* Flow 2's excess falls to 3 us, flow 1's rises to 12: the least is
     * shared, and flow 1's remote signal, 12 - 3 + 10 = 19 us, is still
     * below its 20 us target. */
    for (int i = 0; i < 200; i++)
        op(&cc, 1 + (uint64_t)(i & 1), ERMA_OK, 0, i & 1 ? 13000 : 22000, now += 2000);
    assert_in_range(cc.shared_ns[IN], 2500, 3500);
    assert_int_equal(r1->decreases + r2->decreases, 0);
    /* The other direction shares nothing. */
    assert_int_equal(cc.shared_ns[OUT], 0);
    erma_window_destroy(&cc);
}

static void test_window_merged(void **state)
{
    (void)state;
    struct erma_window_cfg cfg = hand_wcfg;
    cfg.init_cwnd = 8;
    cfg.merged = true;
    struct erma_window_cc cc;
    assert_int_equal(erma_window_init(&cc, &cfg), ERMA_OK);
    uint64_t now = 1000000;
    /* Total 35 us against 5 + 20: 1 - 0.8 * 10 / 35. Split mode would have
     * cut only the local window (issue 30 us) and grown the remote one. */
    op(&cc, 1, ERMA_OK, 30000, 35000, now);
    struct erma_window *r = erma_window_find(&cc, 1, IN);
    assert_near(r->cwnd, 8 * (1 - 0.8 * 10000 / 35000.0));
    assert_near(cc.local.cwnd, 8); /* unused */
    assert_int_equal(cc.local.inflight, 0);
    /* One in-flight count: two issued, one completed, one left. */
    erma_window_on_issue(&cc, 1, IN, 4096, now);
    erma_window_on_issue(&cc, 1, IN, 4096, now);
    erma_window_on_complete(&cc, 1, IN, ERMA_EAUTH, 0, 0, now);
    assert_int_equal(r->inflight, 1);
    assert_int_equal(cc.local.inflight, 0);
    erma_window_on_complete(&cc, 1, IN, ERMA_EAUTH, 0, 0, now);
    assert_int_equal(r->inflight, 0);
    assert_near(erma_window_limit(&cc, 1, IN), r->cwnd);
    /* Below the summed target: AI. */
    const double w = r->cwnd;
    op(&cc, 1, ERMA_OK, 4000, 24000, now += 1000000);
    assert_near(r->cwnd, w + 0.25 / w);
    /* Every failure cuts the one window. */
    const double w2 = r->cwnd;
    op(&cc, 1, ERMA_EDISPATCH, 0, 0, now += 1000);
    assert_near(r->cwnd, w2 / 10);
    assert_near(cc.local.cwnd, 8);
    /* Split mode, same completion as the first: the remote window grows. */
    cfg.merged = false;
    struct erma_window_cc split;
    assert_int_equal(erma_window_init(&split, &cfg), ERMA_OK);
    op(&split, 1, ERMA_OK, 30000, 35000, now);
    assert_near(erma_window_find(&split, 1, IN)->cwnd, 8 + 0.25 / 8);
    assert_near(split.local.cwnd, 8 * 0.5); /* 1 - 0.8 * 25 / 30 < md */
    erma_window_destroy(&split);
    erma_window_destroy(&cc);
}

static void test_window_issue_gate(void **state)
{
    (void)state;
    struct erma_window_cfg cfg = hand_wcfg;
    cfg.init_cwnd = 2;
    struct erma_window_cc cc;
    assert_int_equal(erma_window_init(&cc, &cfg), ERMA_OK);
    uint64_t at;
    /* A window of 2 ops: 2 in flight, then wait for a completion. */
    assert_int_equal(erma_window_next_issue(&cc, 1, IN, 4096, 1000, &at), ERMA_OK);
    assert_int_equal(at, 1000); /* first op: now */
    erma_window_on_issue(&cc, 1, IN, 4096, 1000);
    assert_int_equal(erma_window_next_issue(&cc, 1, IN, 4096, 1000, &at), ERMA_OK);
    assert_int_equal(at, 1000 + 5000); /* paced: srtt / cwnd = 10 us / 2 */
    erma_window_on_issue(&cc, 1, IN, 4096, 6000);
    assert_int_equal(erma_window_next_issue(&cc, 1, IN, 4096, 6000, &at), ERMA_OK);
    assert_int_equal(at, UINT64_MAX);
    erma_window_on_complete(&cc, 1, IN, ERMA_OK, 0, 10000, 11000);
    assert_int_equal(erma_window_next_issue(&cc, 1, IN, 4096, 11000, &at), ERMA_OK);
    assert_int_equal(at, 11000); /* 6 us + 10 us / 2.125 ago */
    /* Half a window: one op at a time, srtt / cwnd = 20 us apart. */
    cfg.init_cwnd = 0.25;
    struct erma_window_cc f;
    assert_int_equal(erma_window_init(&f, &cfg), ERMA_OK);
    erma_window_on_issue(&f, 1, IN, 4096, 0);
    assert_int_equal(erma_window_next_issue(&f, 1, IN, 4096, 0, &at), ERMA_OK);
    assert_int_equal(at, UINT64_MAX);
    erma_window_on_complete(&f, 1, IN, ERMA_OK, 0, 10000, 10000); /* cwnd 0.5 */
    assert_int_equal(erma_window_next_issue(&f, 1, IN, 4096, 10000, &at), ERMA_OK);
    assert_int_equal(at, 20000);
    /* A smaller op may follow sooner: the gap is counted in op_bytes. */
    assert_int_equal(erma_window_next_issue(&f, 1, IN, 1024, 10000, &at), ERMA_OK);
    assert_int_equal(at, 10000);
    assert_int_equal(erma_window_next_issue(&f, 1, IN, 1024, 0, &at), ERMA_OK);
    assert_int_equal(at, 5000);
    /* The local window gates every destination. */
    f.local.inflight = 5;
    f.local.cwnd = 5;
    assert_int_equal(erma_window_next_issue(&f, 9, IN, 4096, 10000, &at), ERMA_OK);
    assert_int_equal(at, UINT64_MAX);
    erma_window_destroy(&f);
    erma_window_destroy(&cc);
}

static void test_window_table_bound(void **state)
{
    (void)state;
    struct erma_window_cc cc;
    assert_int_equal(erma_window_init(&cc, &hand_wcfg), ERMA_OK); /* 4 remotes */
    uint64_t at, now = 1000;
    /* Four windows, two with an op in flight. */
    for (uint64_t d = 1; d <= 4; d++)
        assert_int_equal(erma_window_on_issue(&cc, d, IN, 4096, now++), ERMA_OK);
    erma_window_on_complete(&cc, 2, IN, ERMA_OK, 0, 10000, now++);
    erma_window_on_complete(&cc, 2, IN, ERMA_OK, 0, 10000, now++); /* unmatched */
    assert_int_equal(erma_window_find(&cc, 2, IN)->inflight, 0);  /* no underflow */
    erma_window_on_complete(&cc, 3, IN, ERMA_OK, 0, 10000, now++);
    assert_int_equal(cc.used, 4);
    /* A fifth takes the least recently used idle window (2). */
    assert_int_equal(erma_window_next_issue(&cc, 5, IN, 4096, now, &at), ERMA_OK);
    assert_int_equal(cc.evictions, 1);
    assert_null(erma_window_find(&cc, 2, IN));
    assert_non_null(erma_window_find(&cc, 3, IN));
    assert_non_null(erma_window_find(&cc, 5, IN));
    assert_int_equal(erma_window_on_complete(&cc, 2, IN, ERMA_OK, 0, 1, now), ERMA_ENOENT);
    /* Busy windows are never evicted: with all four busy, a new one fails. */
    erma_window_on_issue(&cc, 3, IN, 4096, now);
    erma_window_on_issue(&cc, 5, IN, 4096, now);
    assert_int_equal(erma_window_next_issue(&cc, 6, IN, 4096, now, &at), ERMA_ENOSLOTS);
    assert_int_equal(erma_window_on_issue(&cc, 6, OUT, 4096, now), ERMA_ENOSLOTS);
    assert_int_equal(cc.used, 4);
    /* Many destinations through a small table: every lookup stays right. */
    struct erma_window_cfg cfg = hand_wcfg;
    cfg.max_remotes = 64;
    struct erma_window_cc big;
    assert_int_equal(erma_window_init(&big, &cfg), ERMA_OK);
    for (uint64_t d = 0; d < 1000; d++) {
        erma_window_on_issue(&big, d * 7919, (enum erma_window_dir)(d & 1), 4096, d);
        erma_window_on_complete(&big, d * 7919, (enum erma_window_dir)(d & 1), ERMA_OK, 0,
                                10000, d);
        assert_near(erma_window_find(&big, d * 7919, (enum erma_window_dir)(d & 1))->cwnd,
                    0.75);
    }
    assert_int_equal(big.used, 64);
    assert_int_equal(big.evictions, 1000 - 64);
    for (uint64_t d = 1000 - 64; d < 1000; d++)
        assert_non_null(erma_window_find(&big, d * 7919, (enum erma_window_dir)(d & 1)));
    erma_window_destroy(&big);
    erma_window_destroy(&cc);
}

/* ============================================ fluid simulation of window CC
 *
 * Two initiators, each with its own erma_window_cc, send 4 KB ops to one
 * target through one FIFO bottleneck that serves C ops per base RTT R. An op
 * issued at t waits for the server, is served in R / C, and completes R - R/C
 * after that: total_delay = R + queueing, issue_delay = 0. Event-driven, no
 * randomness. Throughput and windows are recorded per RTT.
 */
#define SIM_R 12800ull /* divisible by every C used */
#define SIM_RTTS 600

struct sim {
    int C;
    uint64_t join_rtt;         /* flow 1 starts then */
    int done[2][SIM_RTTS];     /* completions per RTT */
    double cwnd[2][SIM_RTTS];  /* limit at the end of each RTT */
};

struct sim_op {
    int flow;
    uint64_t issued, completes;
};

static void sim_run(struct sim *s, struct erma_window_cfg cfg[2])
{
    static struct sim_op q[4096]; /* completions come in issue order */
    size_t qh = 0, qt = 0;
    const uint64_t service = SIM_R / (uint64_t)s->C, end = SIM_RTTS * SIM_R;
    uint64_t server_free = 0, now = 0;
    const uint64_t start[2] = {0, s->join_rtt * SIM_R};
    struct erma_window_cc cc[2];
    for (int f = 0; f < 2; f++)
        assert_int_equal(erma_window_init(&cc[f], &cfg[f]), ERMA_OK);
    memset(s->done, 0, sizeof s->done);
    while (now < end) {
        uint64_t at[2];
        for (int f = 0; f < 2; f++) {
            const uint64_t t = now > start[f] ? now : start[f];
            assert_int_equal(erma_window_next_issue(&cc[f], 1, IN, 4096, t, &at[f]), ERMA_OK);
        }
        const int f = at[1] < at[0];
        const uint64_t completion = qh != qt ? q[qh % 4096].completes : UINT64_MAX;
        const uint64_t next = completion <= at[f] ? completion : at[f];
        for (uint64_t k = now / SIM_R; k < next / SIM_R && k < SIM_RTTS; k++)
            for (int g = 0; g < 2; g++)
                s->cwnd[g][k] = erma_window_limit(&cc[g], 1, IN);
        now = next;
        if (now >= end)
            break;
        if (completion <= at[f]) {
            const struct sim_op o = q[qh++ % 4096];
            assert_int_equal(erma_window_on_complete(&cc[o.flow], 1, IN, ERMA_OK, 0,
                                                     now - o.issued, now),
                             ERMA_OK);
            s->done[o.flow][now / SIM_R]++;
        } else {
            assert_int_equal(erma_window_on_issue(&cc[f], 1, IN, 4096, now), ERMA_OK);
            server_free = (now > server_free ? now : server_free) + service;
            assert_true(qt - qh < 4096);
            q[qt++ % 4096] = (struct sim_op){f, now, server_free + SIM_R - service};
        }
    }
    for (int f = 0; f < 2; f++)
        erma_window_destroy(&cc[f]);
}

/* RTTs until flow 0 alone completes C ops in one RTT (the path is full). */
static int sim_rtts_to_capacity(const struct sim *s)
{
    for (uint64_t k = 0; k < s->join_rtt; k++)
        if (s->done[0][k] >= s->C)
            return (int)k + 1;
    return -1;
}

/* RTTs after the join until both flows complete within 20% of C / 2 per RTT
 * (counted over 4 RTTs) and stay so to the end; -1 if never. */
static int sim_rtts_to_fair(const struct sim *s)
{
    int since = -1;
    for (uint64_t k = s->join_rtt; k + 4 <= SIM_RTTS; k++) {
        bool fair = true;
        for (int f = 0; f < 2; f++) {
            int n = 0;
            for (uint64_t j = k; j < k + 4; j++)
                n += s->done[f][j];
            fair = fair && n >= 0.8 * 2 * s->C && n <= 1.2 * 2 * s->C;
        }
        if (!fair)
            since = -1;
        else if (since < 0)
            since = (int)(k + 4 - s->join_rtt); /* the end of the 4 RTTs */
    }
    return since;
}

/* RTTs after the join until both windows hold 40-60% of their sum and stay
 * so to the end; -1 if never. */
static int sim_rtts_to_fair_cwnd(const struct sim *s)
{
    int since = -1;
    for (uint64_t k = s->join_rtt; k < SIM_RTTS - 1; k++) {
        const double share = s->cwnd[0][k] / (s->cwnd[0][k] + s->cwnd[1][k]);
        if (share < 0.4 || share > 0.6)
            since = -1;
        else if (since < 0)
            since = (int)(k + 1 - s->join_rtt);
    }
    return since;
}

static struct erma_window_cfg sim_cfg(int C, bool pure)
{
    const double link = C * 4096 * 8 * 1e9 / SIM_R; /* BDP = C ops */
    struct erma_window_cfg cfg = erma_window_cfg_for(link, SIM_R);
    if (pure)
        cfg.init_cwnd = 1;
    return cfg;
}

static void test_window_sim_one_flow(void **state)
{
    (void)state;
    static struct sim s;
    for (int C = 4; C <= 32; C *= 2) {
        struct erma_window_cfg pure[2] = {sim_cfg(C, true), sim_cfg(C, true)};
        struct erma_window_cfg bdp[2] = {sim_cfg(C, false), sim_cfg(C, false)};
        s = (struct sim){.C = C, .join_rtt = SIM_RTTS};
        sim_run(&s, pure);
        const int t_pure = sim_rtts_to_capacity(&s);
        sim_run(&s, bdp);
        const int t_bdp = sim_rtts_to_capacity(&s);
        print_message("window sim: C=%2d ops/RTT, one flow to capacity: from cwnd 1 %3d RTTs "
                      "(4(C-1)+1 = %d), from cwnd = BDP %d RTTs\n",
                      C, t_pure, 4 * (C - 1) + 1, t_bdp);
        /* As specified (AI 0.25/op from cwnd 1) it cannot fill the path in 8
         * RTTs: it grows by ~0.25 ops per RTT, as predicted. */
        assert_in_range(t_pure, 4 * (C - 1) - 2, 4 * (C - 1) + 4);
        assert_true(t_pure > 8);
        /* Started at the BDP (erma_window_cfg_for) it does. */
        assert_in_range(t_bdp, 1, 8);
        /* And then holds the path full. */
        for (uint64_t k = (uint64_t)t_bdp; k < SIM_RTTS - 1; k++)
            assert_true(s.done[0][k] >= s.C);
    }
}

static void test_window_sim_two_flows(void **state)
{
    (void)state;
    static struct sim s;
    for (int C = 4; C <= 32; C *= 2) {
        struct erma_window_cfg pure[2] = {sim_cfg(C, true), sim_cfg(C, true)};
        struct erma_window_cfg bdp[2] = {sim_cfg(C, false), sim_cfg(C, false)};
        /* Flow 1 joins once flow 0 is settled. */
        s = (struct sim){.C = C, .join_rtt = (uint64_t)(4 * C + 40)};
        sim_run(&s, pure);
        const int t_pure = sim_rtts_to_fair(&s), w_pure = sim_rtts_to_fair_cwnd(&s);
        sim_run(&s, bdp);
        const int t_bdp = sim_rtts_to_fair(&s), w_bdp = sim_rtts_to_fair_cwnd(&s);
        int tot = 0;
        for (int f = 0; f < 2; f++)
            for (uint64_t k = SIM_RTTS - 50; k < SIM_RTTS; k++)
                tot += s.done[f][k];
        print_message("window sim: C=%2d, 2nd flow joins at RTT %3llu; RTTs until both stay "
                      "within 20%% of fair share: throughput (per 4 RTTs vs C/2) %3d from "
                      "cwnd 1, %2d from cwnd = BDP; window share %3d from cwnd 1, %2d from "
                      "BDP; final cwnd %.2f / %.2f, link use %.1f%%\n",
                      C, (unsigned long long)s.join_rtt, t_pure, t_bdp, w_pure, w_bdp,
                      s.cwnd[0][SIM_RTTS - 2], s.cwnd[1][SIM_RTTS - 2],
                      100.0 * tot / (50.0 * C));
        /* Every variant converges; from cwnd 1 slowly (the newcomer grows by
         * ~0.25 ops per RTT). */
        assert_true(t_pure > 8 && w_pure > 8);
        assert_true(t_bdp > 0 && w_bdp > 0);
        /* The bottleneck stays busy (>= 97%: with a target of 1.25 base RTTs
         * a decrease of both flows at once can dip below the BDP). */
        assert_true(tot >= 0.97 * 50 * C);
        if (C == 4) /* windows of 2-3 ops: shares flicker (see report) */
            continue;
        /* DESIGN.md section 8 asks <= 8 RTTs. Started at the BDP the windows
         * get there; the throughput takes a few RTTs more (see report). */
        assert_true(w_bdp <= 8);
        assert_true(t_bdp <= 16);
    }
}

/* ---- virtual paths ---- */

static void test_paths(void **state)
{
    (void)state;
    struct erma_paths ps;
    erma_paths_init(&ps, 1);
    assert_true(erma_paths_free(&ps, 0));
    assert_int_equal(erma_paths_pick(&ps, 0), 0);
    erma_paths_init(&ps, 99);
    assert_int_equal(ps.n, ERMA_MAX_PATHS); /* clamped */

    /* probes: one packet per path, then nothing until a reply */
    erma_paths_init(&ps, 4);
    unsigned seen = 0;
    for (int k = 0; k < 4; k++) {
        assert_true(erma_paths_free(&ps, 0));
        seen |= 1u << erma_paths_pick(&ps, 0);
    }
    assert_int_equal(seen, 0xf);
    assert_false(erma_paths_free(&ps, 0));
    for (uint8_t p = 0; p < 4; p++)
        assert_false(erma_paths_sample(&ps, p, 10000, 0, 0, 1000000));
    /* fewest out first; among equals the path whose reply just came */
    for (uint8_t p = 0; p < 4; p++)
        erma_paths_done(&ps, p);
    ps.clock = 2;
    assert_int_equal(erma_paths_pick(&ps, 0), 2);
    const uint8_t next = erma_paths_pick(&ps, 0);
    assert_true(next != 2);
    erma_paths_done(&ps, 2);
    erma_paths_done(&ps, next);

    /* losses on path 1 alone prune it (the others keep carrying); it rests
     * rest_ns, then comes back with one probe */
    bool pruned = false;
    for (int k = 0; k < 8 && !pruned; k++) {
        (void)erma_paths_pick(&ps, 0);
        pruned = erma_paths_lost(&ps, 1, 100, 5000);
    }
    assert_true(pruned);
    assert_int_equal(ps.p[1].pruned_until, 100 + 5000);
    for (int k = 0; k < 6; k++) {
        const uint8_t p = erma_paths_pick(&ps, 200);
        assert_true(p != 1);
        erma_paths_done(&ps, p);
    }
    ps.p[1].inflight = 0;
    bool probed = false;
    for (int k = 0; k < 4; k++) {
        const uint8_t p = erma_paths_pick(&ps, 5100);
        probed |= p == 1;
    }
    assert_true(probed);
    assert_int_equal(ps.p[1].probe, ERMA_PROBE_OUT);
    assert_int_equal(ps.p[1].prunes, 1);
    /* the next prune rests twice as long */
    ps.p[1].loss = UINT16_MAX / 2;
    assert_true(erma_paths_lost(&ps, 1, 6000, 5000));
    assert_int_equal(ps.p[1].pruned_until, 6000 + 2 * 5000);

    /* a reply more than 16 behind the newest, or 16 times slower than the
     * best, prunes its path; the last path in use is never pruned */
    erma_paths_init(&ps, 2);
    assert_false(erma_paths_sample(&ps, 0, 1000, 0, 0, 5000));
    assert_true(erma_paths_sample(&ps, 1, 1000, 17, 0, 5000));
    assert_false(erma_paths_sample(&ps, 0, 1000, 40, 0, 5000));
    erma_paths_init(&ps, 2);
    assert_false(erma_paths_sample(&ps, 0, 1000, 0, 0, 5000));
    assert_true(erma_paths_sample(&ps, 1, 100000, 0, 0, 5000));
    assert_false(erma_paths_lost(&ps, 7, 0, 5000)); /* no such path: ignored */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wheel_cfg_for),
        cmocka_unit_test(test_wheel_bad_cfg),
        cmocka_unit_test(test_wheel_release_times),
        cmocka_unit_test(test_wheel_capacity),
        cmocka_unit_test(test_wheel_clamping),
        cmocka_unit_test(test_wheel_reap_max),
        cmocka_unit_test(test_pacer),
        cmocka_unit_test(test_timely_cfgs),
        cmocka_unit_test(test_timely_low_rtt_increases),
        cmocka_unit_test(test_timely_high_rtt_decreases),
        cmocka_unit_test(test_timely_gradient),
        cmocka_unit_test(test_timely_hai),
        cmocka_unit_test(test_timely_floor_and_ceiling),
        cmocka_unit_test(test_timely_bypass),
        cmocka_unit_test(test_timely_uncongested_stays_at_link),
        cmocka_unit_test(test_timely_real_cfg_on_slow_path),
        cmocka_unit_test(test_timely_recovers),
        cmocka_unit_test(test_window_cfg_for),
        cmocka_unit_test(test_window_ai),
        cmocka_unit_test(test_window_md),
        cmocka_unit_test(test_window_cuts),
        cmocka_unit_test(test_window_cut_once_per_rtt),
        cmocka_unit_test(test_window_local_remote_split),
        cmocka_unit_test(test_window_shared_delay),
        cmocka_unit_test(test_window_merged),
        cmocka_unit_test(test_window_issue_gate),
        cmocka_unit_test(test_window_table_bound),
        cmocka_unit_test(test_window_sim_one_flow),
        cmocka_unit_test(test_window_sim_two_flows),
        cmocka_unit_test(test_paths),
    };
    return cmocka_run_group_tests_name("cc", tests, NULL, NULL);
}
