/* What the files of test_cc share: test_cc.c (the wheel, the pacer and
 * main()) runs the tests of cc_*.c too. */
#ifndef ERMA_TESTS_CC_H
#define ERMA_TESTS_CC_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>

#include "erma/sdk/cc.h"
#include "erma/errors.h"

/* a == b to 1e-9 relative (exact formulas, computed in another order). */
#define assert_near(a, b) assert_near_at((a), (b), __FILE__, __LINE__)
static inline void assert_near_at(double a, double b, const char *file, int line)
{
    if (fabs(a - b) > 1e-9 * fabs(b) + 1e-9) {
        print_error("%s:%d: %.12g != %.12g\n", file, line, a, b);
        fail();
    }
}

#define IN ERMA_WINDOW_IN
#define OUT ERMA_WINDOW_OUT

/* Issues one op to dst and completes it with status and delays at now. */
static inline void op(struct erma_window_cc *cc, uint64_t dst, int status,
                      uint64_t issue_delay, uint64_t total_delay, uint64_t now)
{
    assert_int_equal(erma_window_on_issue(cc, dst, IN, 4096, now - total_delay), ERMA_OK);
    assert_int_equal(erma_window_on_complete(cc, dst, IN, status, issue_delay, total_delay, now),
                     ERMA_OK);
}

/* cc_timely.c */
void test_timely_cfgs(void **state);
void test_timely_low_rtt_increases(void **state);
void test_timely_high_rtt_decreases(void **state);
void test_timely_gradient(void **state);
void test_timely_hai(void **state);
void test_timely_floor_and_ceiling(void **state);
void test_timely_bypass(void **state);
void test_timely_uncongested_stays_at_link(void **state);
void test_timely_real_cfg_on_slow_path(void **state);
void test_timely_recovers(void **state);

/* cc_window.c */
void test_window_cfg_for(void **state);
void test_window_ai(void **state);
void test_window_md(void **state);
void test_window_cuts(void **state);
void test_window_cut_once_per_rtt(void **state);
void test_window_local_remote_split(void **state);
void test_window_shared_delay(void **state);
void test_window_merged(void **state);
void test_window_issue_gate(void **state);
void test_window_table_bound(void **state);

/* cc_window_sim.c */
void test_window_sim_one_flow(void **state);
void test_window_sim_two_flows(void **state);

/* cc_paths.c */
void test_paths(void **state);

#endif
