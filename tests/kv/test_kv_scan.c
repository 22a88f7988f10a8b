/* Long SCANs (on the kv server's worker thread, their responses on a
 * session of 2 credits) beside point GETs: every GET and every SCAN is
 * answered, and answered correctly, while the other runs. The server is
 * another process on udp loopback. How much the SCANs slow the GETs is a
 * benchmark figure (bench/kv_scan), not asserted here. A pipelined client
 * (--window) keeps its GETs in flight on several sessions: each checked. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <unistd.h>
#include <cmocka.h>

#include "../bench/bench.h"
#include "erma/errors.h"

/* Runs o (its uri and server filled in here, port_off apart from another
 * test's) against a kv_scan server in another process: every GET and SCAN
 * answered and right. */
static void scan_run(struct bench_kv_scan_opts o, int port_off, struct bench_kv_scan_result *r)
{
    char uri[64], server[64];
    const int base = 37000 + (getpid() % 400) * 8 + port_off;
    snprintf(uri, sizeof uri, "udp://127.0.0.1:%d", base);
    snprintf(server, sizeof server, "udp://127.0.0.1:%d", base + 4);
    o.uri = uri;
    o.server = server;
    const pid_t pid = bench_kv_scan_server_fork(server, -1, 120000000000ull, false);
    assert_true(pid > 0);
    const int rc = bench_kv_scan(&o, r);
    bench_rpc_server_stop(pid);
    assert_int_equal(rc, ERMA_OK);
    assert_int_equal(r->wrong, 0);
    assert_int_equal(r->failed, 0);
}

static void test_scan_beside_gets(void **state)
{
    (void)state;
    const struct bench_kv_scan_opts o = {.keys = 20000, .value_size = 100, .scan_count = 10000,
                                         .rounds = 10, .round_seconds = 0.1, .scan_credits = 2};
    struct bench_kv_scan_result r;
    scan_run(o, 0, &r);
    /* Each round ends by checking its last GET, and each scanning round
     * its last SCAN of 10^4 keys: these hold at any speed. */
    assert_true(r.gets >= o.rounds);
    assert_true(r.scans >= o.rounds / 2);
    print_message("  %llu GETs and %llu SCANs checked; GET p50/p99 quiet %.1f/%.1f us, "
                  "scanning %.1f/%.1f us (not asserted)\n", (unsigned long long)r.gets,
                  (unsigned long long)r.scans, r.quiet.median_us, r.quiet.p99_us,
                  r.scanning.median_us, r.scanning.p99_us);
}

/* 20 GETs in flight on three sessions (8, 8 and 4 slots' worth), beside
 * SCANs: every one answered and right. */
static void test_pipelined_gets(void **state)
{
    (void)state;
    const struct bench_kv_scan_opts o = {.keys = 2000, .value_size = 10, .scan_count = 100,
                                         .rounds = 4, .round_seconds = 0.1, .scan_credits = 2,
                                         .get_window = 20};
    struct bench_kv_scan_result r;
    scan_run(o, 1, &r);
    /* each round checks its last GET on every one of the 20 calls */
    assert_true(r.gets >= (uint64_t)o.rounds * o.get_window);
    print_message("  %llu pipelined GETs checked\n", (unsigned long long)r.gets);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scan_beside_gets),
        cmocka_unit_test(test_pipelined_gets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
