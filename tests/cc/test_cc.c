/*
 * Tests of the congestion-control units (cc/): the Carousel timing wheel and
 * pacer here, Timely, 1RMA's dual-window CC with a small fluid simulation
 * of window-CC flows, and the virtual paths in cc_*.c (test_cc.h). Figures the
 * simulations measure are printed (ctest --output-on-failure -V shows them).
 */
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
