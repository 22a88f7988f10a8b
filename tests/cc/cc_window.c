/* test_cc (the congestion-control units, cc/): 1RMA's dual-window CC. */
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


void test_window_cfg_for(void **state)
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

void test_window_ai(void **state)
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

void test_window_md(void **state)
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

void test_window_cuts(void **state)
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
void test_window_cut_once_per_rtt(void **state)
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
void test_window_local_remote_split(void **state)
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
void test_window_shared_delay(void **state)
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

void test_window_merged(void **state)
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

void test_window_issue_gate(void **state)
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

void test_window_table_bound(void **state)
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
