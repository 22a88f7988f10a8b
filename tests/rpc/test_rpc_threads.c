/* The threaded benchmark (bench/threads_lib.c, rpc_perf --threads) as a
 * smoke test, eRPC's model: two client threads, each with its own
 * endpoint, erma_rpc and sessions, call two server threads (endpoints 0
 * and 1 of one base URI, one nexus) over udp loopback, a bounded number of
 * RPCs each; every RPC must come back with its own request's tag. Label
 * threads: scripts/test runs it under ThreadSanitizer, which checks what
 * erma shares between the threads of a process. No rate is asserted. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "../bench/bench.h"
#include "erma/clock.h"
#include "erma/endpoint.h"
#include "erma/errors.h"
#include "erma/rpc.h"
#include "ports.h"

#define CALLS 3000 /* per thread */

static int base_port;

static void uri_at(char *out, size_t len, int off)
{
    snprintf(out, len, "udp://127.0.0.1:%d", base_port + off);
}

/* Two threads against two server threads: every call answered, rightly. */
static void test_two_threads_every_call_answered(void **state)
{
    (void)state;
    char server[64];
    uri_at(server, sizeof server, 0);
    struct bench_rpc_servers *s;
    assert_int_equal(bench_rpc_servers_start(server, 2, NULL, NULL, NULL, &s), ERMA_OK);
    const struct bench_rpc_opts o = {.uri = "udp://127.0.0.1:0", .server = server, .size = 32,
                                     .resp_size = 32, .window = 16, .batch = 2, .sessions = 2,
                                     .max_calls = CALLS, .seconds = 60};
    struct bench_raw_rate per[2], total;
    const int rc = bench_rpc_rate_threads(&o, 2, NULL, per, &total);
    bench_rpc_servers_stop(s);
    assert_int_equal(rc, ERMA_OK);
    for (int t = 0; t < 2; t++) {
        assert_int_equal(per[t].echoes, CALLS);
        assert_int_equal(per[t].lost, 0);
        assert_int_equal(per[t].wrong, 0);
    }
    assert_int_equal(total.echoes, 2 * CALLS);
    print_message("  %d RPCs on each of 2 threads, every one answered with its tag\n", CALLS);
}

/* Server threads of one nexus with the test's own BENCH_ECHO handler:
 * thread t serves endpoint t of uri until stop. */
struct test_servers {
    struct erma_nexus *nx;
    unsigned n;
    struct erma_endpoint *ep[2];
    struct erma_rpc *rpc[2];
    pthread_t th[2];
    atomic_bool stop;
};

struct server_arg {
    struct test_servers *s;
    unsigned t;
};

static bool servers_stopped(void *ctx)
{
    return atomic_load(&((struct test_servers *)ctx)->stop);
}

static void *serve(void *arg)
{
    const struct server_arg *a = arg;
    struct test_servers *s = a->s;
    while (!servers_stopped(s))
        erma_endpoint_run_until(s->ep[a->t], servers_stopped, s, 1000000000);
    return NULL;
}

/* Opens the endpoints here, then hands each to its thread (pthread_create
 * orders the two). */
static void servers_start(struct test_servers *s, const char *uri, unsigned n,
                          const struct erma_nexus_cfg *ncfg, erma_handler_fn fn,
                          enum erma_handler_mode mode, struct server_arg *args)
{
    *s = (struct test_servers){.n = n};
    atomic_init(&s->stop, false);
    assert_int_equal(erma_nexus_create(ncfg, &s->nx), ERMA_OK);
    assert_int_equal(erma_handler_register(s->nx, BENCH_ECHO, fn, mode, NULL), ERMA_OK);
    for (unsigned t = 0; t < n; t++) {
        assert_int_equal(erma_endpoint_create(uri, (uint8_t)t, NULL, &s->ep[t]), ERMA_OK);
        assert_int_equal(erma_rpc_create(s->nx, s->ep[t], NULL, &s->rpc[t]), ERMA_OK);
        args[t] = (struct server_arg){s, t};
        assert_int_equal(pthread_create(&s->th[t], NULL, serve, &args[t]), 0);
    }
}

static void servers_stop(struct test_servers *s)
{
    atomic_store(&s->stop, true);
    for (unsigned t = 0; t < s->n; t++) {
        pthread_join(s->th[t], NULL);
        erma_rpc_destroy(s->rpc[t]);
        erma_endpoint_destroy(s->ep[t]);
    }
    erma_nexus_destroy(s->nx);
}

/* BENCH_ECHO answering 32 zero bytes, not the tag. */
static void answer_zeros(struct erma_req *req, void *ctx)
{
    (void)ctx;
    struct erma_msgbuf *r = erma_req_resp_buf(req);
    erma_msgbuf_resize(r, 32);
    memset(r->data, 0, 32);
    erma_req_respond(req, r);
}

/* The check is real: answers without the tag are counted wrong, none right. */
static void test_wrong_answers_counted(void **state)
{
    (void)state;
    char server[64];
    uri_at(server, sizeof server, 4);
    struct test_servers s;
    struct server_arg args[1];
    servers_start(&s, server, 1, NULL, answer_zeros, ERMA_DISPATCH, args);
    const struct bench_rpc_opts o = {.uri = "udp://127.0.0.1:0", .server = server, .size = 32,
                                     .resp_size = 32, .window = 8, .batch = 1, .sessions = 1,
                                     .max_calls = 100, .seconds = 60};
    struct bench_raw_rate per[1], total;
    const int rc = bench_rpc_rate_threads(&o, 1, NULL, per, &total);
    servers_stop(&s);
    assert_int_equal(rc, ERMA_ETIMEDOUT); /* no call came back right */
    assert_int_equal(per[0].echoes, 0);
    assert_int_equal(per[0].wrong, 100);
}

/* Which worker thread ran each request: a slot per thread, in arrival order. */
#define WORKERS 2
static _Atomic unsigned worker_slots, worker_calls[WORKERS + 1];
static _Thread_local int worker_slot = -1;

/* BENCH_ECHO on a worker: the tag back, and a count for this worker. */
static void worker_echo(struct erma_req *req, void *ctx)
{
    (void)ctx;
    if (worker_slot < 0) {
        const unsigned k = atomic_fetch_add(&worker_slots, 1);
        worker_slot = (int)(k < WORKERS ? k : WORKERS); /* WORKERS: a thread too many */
    }
    atomic_fetch_add(&worker_calls[worker_slot], 1);
    struct erma_msgbuf *r = erma_req_resp_buf(req);
    erma_msgbuf_resize(r, 32);
    memcpy(r->data, erma_req_data(req) + 4, 8);
    erma_req_respond(req, r);
}

/* Two endpoint threads of one nexus hand requests to its two workers, each
 * endpoint round robin on its own (no counter shared between the threads):
 * every call answered with its tag, both workers used. */
static void test_workers_from_two_threads(void **state)
{
    (void)state;
    char server[64];
    uri_at(server, sizeof server, 5);
    struct test_servers s;
    struct server_arg args[2];
    const struct erma_nexus_cfg ncfg = {.workers = WORKERS};
    servers_start(&s, server, 2, &ncfg, worker_echo, ERMA_WORKER, args);
    const struct bench_rpc_opts o = {.uri = "udp://127.0.0.1:0", .server = server, .size = 32,
                                     .resp_size = 32, .window = 8, .batch = 2, .sessions = 2,
                                     .max_calls = 500, .seconds = 60};
    struct bench_raw_rate per[2], total;
    const int rc = bench_rpc_rate_threads(&o, 2, NULL, per, &total);
    servers_stop(&s);
    assert_int_equal(rc, ERMA_OK);
    assert_int_equal(total.echoes, 1000);
    assert_int_equal(total.wrong + total.lost, 0);
    assert_int_equal(atomic_load(&worker_slots), WORKERS);
    assert_true(atomic_load(&worker_calls[0]) > 0 && atomic_load(&worker_calls[1]) > 0);
    assert_int_equal(atomic_load(&worker_calls[0]) + atomic_load(&worker_calls[1]), 1000);
}

/* The raw baseline the same way: two threads, each to its own server thread. */
static void test_raw_two_threads(void **state)
{
    (void)state;
    char server[64];
    uri_at(server, sizeof server, 2);
    const pid_t child = bench_raw_servers_fork(server, 2, NULL, 60000000000ull);
    assert_true(child > 0);
    struct bench_raw_rate per[2], total;
    const int rc = bench_raw_rate_threads("udp://127.0.0.1:0", server, 32, 8, 2, 0.5, 2, NULL,
                                          per, &total);
    bench_raw_servers_stop("udp://127.0.0.1:0", server, 2, child);
    assert_int_equal(rc, ERMA_OK);
    assert_true(per[0].echoes > 0);
    assert_true(per[1].echoes > 0);
}

/* Bad thread counts and a taken port fail with their codes, nothing left running. */
static void test_bad_input(void **state)
{
    (void)state;
    char server[64];
    uri_at(server, sizeof server, 0);
    const struct bench_rpc_opts o = {.uri = "udp://127.0.0.1:0", .server = server, .size = 32,
                                     .resp_size = 32, .window = 8, .batch = 1, .sessions = 1,
                                     .max_calls = 1, .seconds = 1};
    struct bench_raw_rate per[BENCH_MAX_THREADS + 1], total;
    assert_int_equal(bench_rpc_rate_threads(&o, 0, NULL, per, &total), ERMA_EINVAL);
    assert_int_equal(bench_rpc_rate_threads(&o, BENCH_MAX_THREADS + 1, NULL, per, &total),
                     ERMA_EINVAL);
    struct bench_rpc_opts bad = o;
    bad.window = 0; /* every thread fails at once, none waits for the others forever */
    assert_int_equal(bench_rpc_rate_threads(&bad, 2, NULL, per, &total), ERMA_EINVAL);
    struct bench_rpc_servers *s, *again;
    assert_int_equal(bench_rpc_servers_start(server, 0, NULL, NULL, NULL, &s), ERMA_EINVAL);
    assert_int_equal(bench_rpc_servers_start(server, 2, NULL, NULL, NULL, &s), ERMA_OK);
    /* endpoint 1 of the port below is endpoint 0 of s: taken */
    char below[64];
    uri_at(below, sizeof below, -1);
    assert_int_equal(bench_rpc_servers_start(below, 2, NULL, NULL, NULL, &again), ERMA_EADDR);
    bench_rpc_servers_stop(s);
}

int main(void)
{
    base_port = test_port_base(8) + 1; /* base_port - 1 is ours too */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_raw_two_threads), /* first: it forks, before any thread */
        cmocka_unit_test(test_two_threads_every_call_answered),
        cmocka_unit_test(test_wrong_answers_counted),
        cmocka_unit_test(test_workers_from_two_threads),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
