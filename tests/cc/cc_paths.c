/* test_cc (the congestion-control units, cc/): the virtual paths. */
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

/* ---- virtual paths ---- */

void test_paths(void **state)
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
