/* The RPC layer over kernel UDP on loopback, client and server in separate processes. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <pthread.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "../bench/bench.h"
#include "endpoint/proto.h"
#include "erma/clock.h"
#include "erma/sdk/pool.h"
#include "erma/sdk/rand.h"
#include "erma/sdk/transport_driver.h"
#include "erma/sdk/wire.h"
#include "rpc_attack.h"
#include "rpc_util.h"
#include "ports.h"
#include "rss.h"

#define ECHO 1
#define ECHO_WORKER 2
#define STATS 3
#define PROXY 4
#define SLOW_WORKER 5 /* an echo on a worker after 1 ms */
#define MANY 100000

static char server_uri[64], client_uri[64];
static pid_t server_pid;
static bool server_polls; /* the server's cfg.busy_poll */

static struct echo_stats st;
static uint64_t server_recv_timeout_ns; /* 0: the default */
static struct proxy px = {.type = ECHO};
/* Set by a test: executions per id shared by every server it starts (MANY
 * ids, MAP_SHARED), and the servers' psk. */
static _Atomic uint32_t *shared_per_id;
static const uint8_t *server_psk;

/* Answers [echo calls, ids executed more than once, malformed packets,
 * packets for no session, failed proxied calls, bytes of messages being
 * received, messages refused for the budgets, partial requests expired]
 * of the server. Malformed packets are those its endpoint dropped (a bad
 * header, no protocol for it) and those the RPC layer did. */
#define NSTATS 8
static void stats_handler(struct erma_req *req, void *ctx)
{
    (void)ctx;
    struct erma_rpc_stats rs;
    struct erma_endpoint_stats es;
    erma_rpc_get_stats(erma_req_rpc(req), &rs);
    erma_endpoint_get_stats(erma_rpc_endpoint(erma_req_rpc(req)), &es);
    struct erma_msgbuf *r = erma_req_resp_buf(req);
    const uint64_t v[NSTATS] = {atomic_load(&st.calls), echo_dups(&st),
                                rs.rx_bad + es.rx_bad + es.rx_no_proto, rs.rx_no_session,
                                atomic_load(&px.failed), erma_rpc_recv_held(erma_req_rpc(req)),
                                rs.recv_refused, rs.recv_expired};
    erma_msgbuf_resize(r, sizeof v);
    memcpy(r->data, v, sizeof v);
    erma_req_respond(req, r);
}

static void slow_echo(struct erma_req *req, void *ctx)
{
    nanosleep(&(struct timespec){0, 1000000}, NULL);
    echo_handler(req, ctx);
}

/* The server: echo (dispatch and worker), stats, and a proxy that forwards
 * to its own echo handler over a session to itself (nested RPCs). */
static void server_main(double drop, uint32_t rx_ring)
{
    st.per_id = shared_per_id ? shared_per_id : calloc(MANY, sizeof *st.per_id);
    st.max_id = MANY;
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    struct erma_rpc *rpc;
    const struct erma_nexus_cfg ncfg = {.workers = 2, .psk = server_psk};
    const struct erma_endpoint_cfg ecfg = {.fault_drop = drop, .fault_seed = 99,
                                           .rx_ring = rx_ring, .busy_poll = server_polls};
    /* clients may spend a while outside their loop checking 8 MiB under a
     * sanitizer: a failure timeout of 5 s keeps their sessions */
    const struct erma_rpc_cfg cfg = {.rto_ns = 1000000, .seed = 99,
                                     .failure_ns = 5000000000ull, .max_sessions_per_peer = 256,
                                     .recv_timeout_ns = server_recv_timeout_ns};
    if (erma_nexus_create(&ncfg, &nx) != ERMA_OK ||
        erma_handler_register(nx, ECHO, echo_handler, ERMA_DISPATCH, &st) != ERMA_OK ||
        erma_handler_register(nx, ECHO_WORKER, echo_handler, ERMA_WORKER, &st) != ERMA_OK ||
        erma_handler_register(nx, STATS, stats_handler, ERMA_DISPATCH, NULL) != ERMA_OK ||
        erma_handler_register(nx, SLOW_WORKER, slow_echo, ERMA_WORKER, &st) != ERMA_OK ||
        erma_handler_register(nx, PROXY, proxy_handler, ERMA_DISPATCH, &px) != ERMA_OK ||
        erma_endpoint_create(server_uri, 0, &ecfg, &ep) != ERMA_OK ||
        erma_rpc_create(nx, ep, &cfg, &rpc) != ERMA_OK)
        _exit(2);
    if (!rx_ring && (px.sess = erma_session_create(rpc, server_uri, 0)) < 0)
        _exit(2);
    const uint64_t end = erma_now_ns() + 120000000000ull;
    while (erma_now_ns() < end && getppid() != 1)
        erma_endpoint_run(ep, 10000000);
    erma_rpc_destroy(rpc);
    erma_endpoint_destroy(ep);
    erma_nexus_destroy(nx);
    _exit(st.bad ? 3 : 0);
}

static void kill_server(void);

static void start_server_ring(double drop, uint32_t rx_ring)
{
    if (server_pid > 0) /* an earlier test failed before it could */
        kill_server();
    server_pid = fork();
    assert_true(server_pid >= 0);
    if (server_pid == 0)
        server_main(drop, rx_ring);
}

static void start_server(double drop)
{
    start_server_ring(drop, 0);
}

static void kill_server(void)
{
    kill(server_pid, SIGKILL);
    waitpid(server_pid, NULL, 0);
    server_pid = 0;
}

struct client {
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    struct erma_rpc *rpc;
    int sess;
};

/* cfg NULL: defaults, but a failure timeout of 5 s, 10x what an 8 MiB echo
 * handler may hold the server's loop under a sanitizer (ThreadSanitizer
 * slows it 5-15x). ecfg NULL: the endpoint's defaults. */
static void client_up(struct client *c, const struct erma_rpc_cfg *cfg,
                      const struct erma_endpoint_cfg *ecfg)
{
    const struct erma_rpc_cfg patient = {.failure_ns = 5000000000ull};
    assert_int_equal(erma_nexus_create(NULL, &c->nx), ERMA_OK);
    assert_int_equal(erma_endpoint_create(client_uri, 0, ecfg, &c->ep), ERMA_OK);
    assert_int_equal(erma_rpc_create(c->nx, c->ep, cfg ? cfg : &patient, &c->rpc), ERMA_OK);
}

static int client_connect(struct client *c)
{
    const int s = erma_session_create(c->rpc, server_uri, 0);
    assert_true(s >= 0);
    for (int i = 0; i < 3000 && !erma_session_connected(c->rpc, s); i++)
        erma_endpoint_run(c->ep, 1000000);
    assert_true(erma_session_connected(c->rpc, s));
    return s;
}

static void client_down(struct client *c)
{
    erma_rpc_destroy(c->rpc);
    erma_endpoint_destroy(c->ep);
    erma_nexus_destroy(c->nx);
}

struct call {
    int done, status;
    uint32_t id;
    struct erma_msgbuf req, resp;
};

static void on_call(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    (void)resp;
    struct call *c = tag;
    c->status = status;
    c->done++;
}

static void wait_done(struct erma_endpoint *ep, const int *flag, uint64_t ns)
{
    const uint64_t end = erma_now_ns() + ns;
    while (!*flag && erma_now_ns() < end)
        erma_endpoint_run_once(ep);
}

static void call_once(struct client *c, uint8_t type, uint32_t req_size, uint32_t resp_size,
                      uint32_t id)
{
    struct call k = {0};
    assert_int_equal(erma_msgbuf_alloc(c->rpc, req_size, &k.req), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(c->rpc, 64, &k.resp), ERMA_OK);
    fill_req(&k.req, id, resp_size);
    assert_int_equal(erma_rpc_call(c->rpc, c->sess, type, &k.req, &k.resp, on_call, &k),
                     ERMA_OK);
    wait_done(c->ep, &k.done, 30000000000ull);
    if (k.done != 1 || k.status != ERMA_OK)
        print_message("  call of type %u, %u B, for %u B: done %d, %s\n", type, req_size,
                      resp_size, k.done, erma_strerror(k.status));
    assert_int_equal(k.done, 1);
    assert_int_equal(k.status, ERMA_OK);
    assert_int_equal(check_resp(&k.resp, id, resp_size), 0);
    erma_msgbuf_free(c->rpc, &k.req);
    erma_msgbuf_free(c->rpc, &k.resp);
}

/* Dispatch and worker echoes of every size class, each checked; ids from
 * first_id (28 of them). */
static void call_sizes(struct client *c, uint32_t first_id)
{
    const uint32_t sizes[] = {REQ_HDR, 1000, 1456, 1457, 70000, 1 << 20, 8u << 20};
    uint32_t id = first_id;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        for (uint8_t type = ECHO; type <= ECHO_WORKER; type++) {
            call_once(c, type, sizes[i], sizes[i], id++);
            call_once(c, type, REQ_HDR, sizes[i] - 1, id++);
        }
}

static void test_sizes_dispatch_and_worker(void **state)
{
    (void)state;
    start_server(0);
    struct client c;
    client_up(&c, NULL, NULL);
    c.sess = client_connect(&c);
    for (uint32_t n = 1; n < REQ_HDR; n++) { /* 1 B .. 7 B requests */
        struct call k = {0};
        assert_int_equal(erma_msgbuf_alloc(c.rpc, n, &k.req), ERMA_OK);
        assert_int_equal(erma_msgbuf_alloc(c.rpc, 8, &k.resp), ERMA_OK);
        for (size_t b = 0; b < n; b++)
            k.req.data[b] = tiny_byte(b);
        assert_int_equal(erma_rpc_call(c.rpc, c.sess, n % 2 ? ECHO : ECHO_WORKER, &k.req,
                                       &k.resp, on_call, &k),
                         ERMA_OK);
        wait_done(c.ep, &k.done, 5000000000ull);
        assert_int_equal(k.status, ERMA_OK);
        assert_int_equal(k.resp.size, n);
        for (size_t b = 0; b < n; b++)
            assert_int_equal(k.resp.data[b], tiny_byte(b) ^ 0x5a);
        erma_msgbuf_free(c.rpc, &k.req);
        erma_msgbuf_free(c.rpc, &k.resp);
    }
    call_sizes(&c, 0);
    client_down(&c);
    kill_server();
}

/* CPU time the server's event loop (its main thread) has used, in ms. */
static double server_cpu_ms(void)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/schedstat", (int)server_pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    unsigned long long ns = 0;
    const int n = fscanf(f, "%llu", &ns);
    fclose(f);
    assert_int_equal(n, 1);
    return (double)ns / 1e6;
}

/* The median time of 21 small worker echoes that take 1 ms, each after 2 ms
 * of quiet (long enough for the server to fall asleep), in ms. */
static double worker_after_quiet_ms(struct client *c, uint32_t first_id)
{
    double t[21];
    for (int i = 0; i < 21; i++) {
        const uint64_t quiet = erma_now_ns() + 2000000;
        while (erma_now_ns() < quiet)
            erma_endpoint_run_once(c->ep);
        const uint64_t t0 = erma_now_ns();
        call_once(c, SLOW_WORKER, REQ_HDR, 32, first_id + (uint32_t)i);
        t[i] = (double)(erma_now_ns() - t0) / 1e6;
    }
    return bench_median(t, 21);
}

/* The server's CPU over 300 ms while its client, connected, sends nothing. */
static double idle_cpu_ms(struct client *c)
{
    /* first the pool gives back what call_sizes' 8 MiB messages left (chunks
     * empty for ERMA_POOL_IDLE_NS, trimmed every 100 ms): tens of ms of
     * unmapping, once, that would otherwise fall in the idle window */
    const uint64_t settle = erma_now_ns() + ERMA_POOL_IDLE_NS + 500000000ull;
    while (erma_now_ns() < settle)
        erma_endpoint_run_once(c->ep);
    const double before = server_cpu_ms();
    const uint64_t end = erma_now_ns() + 300000000ull;
    while (erma_now_ns() < end)
        erma_endpoint_run_once(c->ep);
    return server_cpu_ms() - before;
}

/* A server with default settings answers every size, dispatch and worker,
 * and sleeps when idle, but not while a worker holds a request (its
 * answer wakes nothing: the loop would sleep until its next timer). */
static void test_idle_server_sleeps(void **state)
{
    (void)state;
    double cpu[2], worker_ms[2];
    for (int sleeps = 0; sleeps < 2; sleeps++) {
        server_polls = !sleeps;
        start_server(0);
        struct client c;
        client_up(&c, NULL, NULL);
        c.sess = client_connect(&c);
        call_sizes(&c, 0);
        cpu[sleeps] = idle_cpu_ms(&c);
        call_sizes(&c, 100); /* woken by packets again */
        worker_ms[sleeps] = worker_after_quiet_ms(&c, 200);
        client_down(&c);
        kill_server();
    }
    server_polls = false;
    print_message("  an idle server's loop used %.1f ms of CPU in 300 ms polling, %.1f ms "
                  "sleeping; a worker echo after quiet took %.3f and %.3f ms (medians)\n",
                  cpu[0], cpu[1], worker_ms[0], worker_ms[1]);
    assert_true(cpu[1] <= 30); /* 10x the goal of 1% of a core */
    /* the measure works: a polling loop takes what the machine gives it
     * (a third of a core or less beside hogs), a sleeping one next to none */
    assert_true(cpu[1] < cpu[0]);
    /* worker_ms is a figure (1.2 ms with the guard, ~5-10 ms without), not a
     * verdict: a loaded machine delays the worker thread as much. */
}

static bool call_done(void *ctx);

/* One call of type on c's session, by erma_endpoint_run_until (whose idle
 * wait is what the guard below changes); the answer checked. */
static void call_run_until(struct client *c, uint8_t type, uint32_t id)
{
    struct call k = {0};
    assert_int_equal(erma_msgbuf_alloc(c->rpc, REQ_HDR, &k.req), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(c->rpc, 64, &k.resp), ERMA_OK);
    fill_req(&k.req, id, 32);
    assert_int_equal(erma_rpc_call(c->rpc, c->sess, type, &k.req, &k.resp, on_call, &k), ERMA_OK);
    assert_int_equal(erma_endpoint_run_until(c->ep, call_done, &k, 5000000000ull), ERMA_OK);
    assert_int_equal(k.status, ERMA_OK);
    assert_int_equal(check_resp(&k.resp, id, 32), 0);
    erma_msgbuf_free(c->rpc, &k.req);
    erma_msgbuf_free(c->rpc, &k.resp);
}

/* An endpoint with the default idle sleep keeps spinning while it awaits
 * an answer and just after it, and sleeps once idle_wait_ns passed: a call made after a quiet spell counts as
 * work, and so does the answer that ends run_until on done(). (Both were
 * missed once: every round trip of a default endpoint slept, 28-36 us
 * against 5.7 on loopback.) idle_wait_ns is 100 ms here, 10x what a call
 * takes on a loaded machine. */
static void test_no_sleep_while_awaiting(void **state)
{
    (void)state;
    start_server(0);
    struct client c;
    const struct erma_endpoint_cfg ecfg = {.idle_wait_ns = 100000000};
    client_up(&c, NULL, &ecfg);
    c.sess = client_connect(&c);
    for (int i = 0; i < 3; i++) {
        usleep(150000); /* a quiet spell longer than idle_wait_ns */
        struct erma_endpoint_stats before, after;
        erma_endpoint_get_stats(c.ep, &before);
        call_run_until(&c, ECHO, (uint32_t)i);
        assert_int_equal(erma_endpoint_run_until(c.ep, NULL, NULL, 2000000), ERMA_ETIMEDOUT);
        erma_endpoint_get_stats(c.ep, &after);
        /* (beside CPU hogs the shared-core guard may sleep early: those
         * sleeps are counted apart) */
        assert_int_equal(after.sleeps - after.shared_sleeps, before.sleeps - before.shared_sleeps);
    }
    struct erma_endpoint_stats before, after; /* and it still sleeps once idle */
    erma_endpoint_get_stats(c.ep, &before);
    assert_int_equal(erma_endpoint_run_until(c.ep, NULL, NULL, 300000000), ERMA_ETIMEDOUT);
    erma_endpoint_get_stats(c.ep, &after);
    assert_true(after.sleeps > before.sleeps);
    client_down(&c);
    kill_server();
}

/* test_shared_core_sleeps_sooner's hog and pinning, undone by its
 * teardown even when an assertion ends the test early. */
static pid_t hog_pid = -1;
static cpu_set_t hog_all;
static bool hog_pinned;
static struct rlimit fds_saved;
static bool fds_starved;

/* No new file descriptor for this process (the soft limit at the lowest
 * free one) until fds_restore(); false where that cannot be done. */
static bool fds_starve(void)
{
    const int lowest = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (lowest < 0 || getrlimit(RLIMIT_NOFILE, &fds_saved) != 0) {
        if (lowest >= 0)
            close(lowest);
        return false;
    }
    close(lowest);
    const struct rlimit starved = {(rlim_t)lowest, fds_saved.rlim_max};
    fds_starved = setrlimit(RLIMIT_NOFILE, &starved) == 0;
    return fds_starved;
}

/* 0, or -1 when the limit could not be put back. */
static int fds_restore(void)
{
    const int rc = fds_starved && setrlimit(RLIMIT_NOFILE, &fds_saved) != 0 ? -1 : 0;
    if (rc)
        fprintf(stderr, "  could not restore the file descriptor limit\n");
    fds_starved = false;
    return rc;
}

/* Fails the test (non-zero) when the thread cannot be unpinned or the
 * limit put back, as the test's own assertions did before it had one. */
static int shared_core_teardown(void **state)
{
    (void)state;
    int rc = 0;
    if (hog_pid > 0) {
        kill(hog_pid, SIGKILL);
        waitpid(hog_pid, NULL, 0);
        hog_pid = -1;
    }
    if (hog_pinned && sched_setaffinity(0, sizeof hog_all, &hog_all) != 0) {
        fprintf(stderr, "  teardown: could not unpin this thread\n");
        rc = -1;
    }
    hog_pinned = false;
    rc |= fds_restore();
    if (server_pid > 0)
        kill_server();
    return rc;
}

/* A process that spins on the caller's CPU for 15 s at most, and dies with
 * the test process should anything else leave it behind. */
static void start_hog(void)
{
    const pid_t parent = getpid();
    hog_pid = fork(); /* pinned to the same CPU, as its parent */
    assert_true(hog_pid >= 0);
    if (hog_pid == 0) {
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(0);
        const uint64_t stop = erma_now_ns() + 15000000000ull;
        while (erma_now_ns() < stop)
            ;
        _exit(0);
    }
}

/* A default client whose thread shares its core with a spinning process
 * finds it (the run-queue wait, while it spins through back-to-back
 * echoes, for up to 10 s) and for the next second sleeps 10 us after its
 * last work instead of 50: woken by the answer it gets the core back at
 * once, where spinning it would wait out the other's time slice. Then 20
 * calls of a 1 ms worker echo each sleep early (half of them, at least).
 * For its first 50 ms the process can open no file, so that its looks at
 * schedstat fail: they are tried again, and find the core shared later. */
static void test_shared_core_sleeps_sooner(void **state)
{
    (void)state;
    start_server(0); /* before the pinning: the server must not inherit it */
    cpu_set_t one;
    const int cpu = sched_getcpu();
    assert_int_equal(sched_getaffinity(0, sizeof hog_all, &hog_all), 0);
    CPU_ZERO(&one);
    CPU_SET(cpu < 0 ? 0 : cpu, &one);
    if (cpu < 0 || sched_setaffinity(0, sizeof one, &one) != 0) {
        print_message("  skipped: cannot pin this thread to a CPU here\n");
        skip(); /* the teardown stops the server */
    }
    hog_pinned = true;
    start_hog();
    struct client c;
    client_up(&c, NULL, NULL);
    c.sess = client_connect(&c);
    struct erma_endpoint_stats found = {0}, after;
    uint32_t calls = 0;
    if (fds_starve()) {
        const uint64_t starved_until = erma_now_ns() + 50000000ull;
        while (erma_now_ns() < starved_until)
            call_run_until(&c, ECHO, calls++);
        assert_int_equal(fds_restore(), 0);
        erma_endpoint_get_stats(c.ep, &found);
        assert_int_equal(found.shared_core, 0); /* no look could read schedstat */
    } else {
        print_message("  (cannot lower the file descriptor limit here: no failed looks)\n");
    }
    const uint64_t end = erma_now_ns() + 10000000000ull;
    while (found.shared_core == 0 && erma_now_ns() < end) {
        call_run_until(&c, ECHO, calls++);
        erma_endpoint_get_stats(c.ep, &found);
    }
    for (uint32_t i = 0; i < 20; i++)
        call_run_until(&c, SLOW_WORKER, calls + i);
    erma_endpoint_get_stats(c.ep, &after);
    client_down(&c);
    print_message("  beside a spinning process on CPU %d the core was found shared after %u "
                  "echoes; then 20 worker echoes slept early %llu times\n",
                  cpu, calls, (unsigned long long)(after.shared_sleeps - found.shared_sleeps));
    assert_true(found.shared_core > 0);
    assert_true(after.shared_sleeps - found.shared_sleeps >= 10);
}

#define WINDOW 32

struct many {
    struct client *c;
    struct erma_rand rng;
    uint32_t next, done, errors, wrong;
    uint8_t *seen;
    uint32_t *resp_size;
    struct call calls[WINDOW];
};

static struct many *g_many;
static void on_many(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp);

static void issue(struct many *m, struct call *k)
{
    const uint32_t id = m->next++;
    const uint32_t pick = (uint32_t)erma_rand_below(&m->rng, 100);
    const uint32_t req = REQ_HDR + (uint32_t)erma_rand_below(&m->rng, pick < 95 ? 300 : 6000);
    const uint32_t resp = (uint32_t)erma_rand_below(&m->rng, pick % 20 == 7 ? 6000 : 300);
    m->resp_size[id] = resp;
    k->id = id;
    erma_msgbuf_free(m->c->rpc, &k->req);
    assert_int_equal(erma_msgbuf_alloc(m->c->rpc, req, &k->req), ERMA_OK);
    fill_req(&k->req, id, resp);
    const uint8_t type = id % 10 == 0 ? ECHO_WORKER : ECHO;
    assert_int_equal(erma_rpc_call(m->c->rpc, m->c->sess, type, &k->req, &k->resp,
                                   on_many, k),
                     ERMA_OK);
}

static void on_many(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    struct many *m = g_many;
    struct call *k = tag;
    m->seen[k->id]++;
    m->done++;
    if (status != ERMA_OK)
        m->errors++;
    else if (check_resp(resp, k->id, m->resp_size[k->id]) != 0)
        m->wrong++;
    if (m->next < MANY)
        issue(m, k);
}

static void test_many_with_loss(void **state)
{
    (void)state;
    start_server(0.005); /* with the client's 0.5%: about 1% of round trips lose a packet */
    struct client c;
    const struct erma_rpc_cfg cfg = {.rto_ns = 1000000, .seed = 5,
                                     .failure_ns = 5000000000ull}; /* 10x a stall */
    const struct erma_endpoint_cfg ecfg = {.fault_drop = 0.005, .fault_seed = 5};
    client_up(&c, &cfg, &ecfg);
    c.sess = client_connect(&c);
    struct many *m = calloc(1, sizeof *m);
    g_many = m;
    m->c = &c;
    m->seen = calloc(MANY, 1);
    m->resp_size = calloc(MANY, sizeof *m->resp_size);
    erma_rand_seed(&m->rng, 11);
    for (int i = 0; i < WINDOW; i++) {
        assert_int_equal(erma_msgbuf_alloc(c.rpc, 64, &m->calls[i].resp), ERMA_OK);
        issue(m, &m->calls[i]);
    }
    const uint64_t end = erma_now_ns() + 120000000000ull;
    while (m->done < MANY && erma_now_ns() < end)
        erma_endpoint_run_once(c.ep);
    assert_int_equal(m->done, MANY);
    assert_int_equal(m->errors, 0);
    assert_int_equal(m->wrong, 0);
    for (uint32_t id = 0; id < MANY; id++)
        assert_int_equal(m->seen[id], 1);
    struct erma_rpc_stats rs;
    erma_rpc_get_stats(c.rpc, &rs);
    assert_true(rs.retransmits > 0);
    /* at most once: the server's own count of executions per id */
    struct call k = {0};
    assert_int_equal(erma_msgbuf_alloc(c.rpc, 8, &k.req), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(c.rpc, 16, &k.resp), ERMA_OK);
    assert_int_equal(erma_rpc_call(c.rpc, c.sess, STATS, &k.req, &k.resp, on_call, &k),
                     ERMA_OK);
    wait_done(c.ep, &k.done, 5000000000ull);
    assert_int_equal(k.status, ERMA_OK);
    uint64_t v[5];
    memcpy(v, k.resp.data, sizeof v);
    assert_int_equal(v[0], MANY); /* every request executed ... */
    assert_int_equal(v[1], 0);    /* ... and none twice */
    erma_msgbuf_free(c.rpc, &k.req);
    erma_msgbuf_free(c.rpc, &k.resp);
    print_message("  %u RPCs over udp with injected loss: %llu retransmissions, %llu "
                  "executions, 0 twice\n", MANY, (unsigned long long)rs.retransmits,
                  (unsigned long long)v[0]);
    for (int i = 0; i < WINDOW; i++) {
        erma_msgbuf_free(c.rpc, &m->calls[i].req);
        erma_msgbuf_free(c.rpc, &m->calls[i].resp);
    }
    client_down(&c);
    kill_server();
    free(m->seen);
    free(m->resp_size);
    free(m);
}

static void test_server_killed_and_restarted(void **state)
{
    (void)state;
    start_server(0);
    struct client c;
    const struct erma_rpc_cfg cfg = {.failure_ns = 300000000, .keepalive_ns = 50000000,
                                     .rto_ns = 2000000};
    client_up(&c, &cfg, NULL);
    c.sess = client_connect(&c);
    call_once(&c, ECHO, 100, 100, 1);
    struct call k[8] = {0};
    int failed = 0;
    for (int i = 0; i < 8; i++) {
        assert_int_equal(erma_msgbuf_alloc(c.rpc, 4u << 20, &k[i].req), ERMA_OK);
        assert_int_equal(erma_msgbuf_alloc(c.rpc, 64, &k[i].resp), ERMA_OK);
        fill_req(&k[i].req, (uint32_t)i, 4u << 20);
        assert_int_equal(erma_rpc_call(c.rpc, c.sess, ECHO, &k[i].req, &k[i].resp,
                                       on_call, &k[i]),
                         ERMA_OK);
    }
    erma_endpoint_run(c.ep, 2000000); /* mid-stream */
    kill_server();
    const uint64_t killed = erma_now_ns();
    uint64_t last = killed;
    while (failed < 8 && erma_now_ns() - killed < 5000000000ull) {
        erma_endpoint_run_once(c.ep);
        failed = 0;
        for (int i = 0; i < 8; i++)
            failed += k[i].done;
        last = erma_now_ns();
    }
    for (int i = 0; i < 8; i++) {
        assert_int_equal(k[i].done, 1);
        assert_int_equal(k[i].status, ERMA_EPEERFAILED);
        erma_msgbuf_free(c.rpc, &k[i].req);
        erma_msgbuf_free(c.rpc, &k[i].resp);
    }
    print_message("  pending calls failed %.0f ms after the kill (failure timeout 300 ms)\n",
                  (last - killed) / 1e6);
    assert_true(last - killed < 3000000000ull); /* 10x the 300 ms failure timeout */
    start_server(0);
    c.sess = client_connect(&c);
    call_once(&c, ECHO_WORKER, 3000, 3000, 2);
    client_down(&c);
    kill_server();
}

static void test_many_sessions(void **state)
{
    (void)state;
    start_server(0);
    struct client c;
    const struct erma_rpc_cfg cfg = {.credits = 8};
    client_up(&c, &cfg, NULL);
    enum { N = 200 };
    int sess[N];
    for (int i = 0; i < N; i++)
        assert_true((sess[i] = erma_session_create(c.rpc, server_uri, 0)) >= 0);
    for (int i = 0; i < N; i++) {
        for (int t = 0; t < 2000 && !erma_session_connected(c.rpc, sess[i]); t++)
            erma_endpoint_run(c.ep, 1000000);
        assert_true(erma_session_connected(c.rpc, sess[i]));
    }
    for (int i = 0; i < N; i++) {
        c.sess = sess[i];
        call_once(&c, ECHO, 200, 200, (uint32_t)i);
    }
    client_down(&c);
    kill_server();
}

/* The server's counters: see stats_handler. */
static void server_stats(struct client *c, uint64_t v[NSTATS])
{
    struct call k = {0};
    assert_int_equal(erma_msgbuf_alloc(c->rpc, 8, &k.req), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(c->rpc, 64, &k.resp), ERMA_OK);
    assert_int_equal(erma_rpc_call(c->rpc, c->sess, STATS, &k.req, &k.resp, on_call, &k),
                     ERMA_OK);
    wait_done(c->ep, &k.done, 5000000000ull);
    assert_int_equal(k.status, ERMA_OK);
    assert_int_equal(k.resp.size, NSTATS * sizeof(uint64_t));
    memcpy(v, k.resp.data, NSTATS * sizeof(uint64_t));
    erma_msgbuf_free(c->rpc, &k.req);
    erma_msgbuf_free(c->rpc, &k.resp);
}

static void test_nested_malformed(void **state)
{
    (void)state;
    start_server(0);
    struct client c;
    client_up(&c, NULL, NULL);
    c.sess = client_connect(&c);
    /* nested: the server's handler calls its own echo handler and answers later */
    for (uint32_t id = 0; id < 100; id++)
        call_once(&c, PROXY, REQ_HDR + id * 301, id * 211, id);
    /* garbage from another socket: random bytes, and valid headers with random fields */
    struct erma_transport *evil;
    struct erma_addr dst;
    assert_int_equal(erma_transport_open("udp://127.0.0.1:0", NULL, &evil), ERMA_OK);
    assert_int_equal(erma_transport_resolve(evil, server_uri, &dst), ERMA_OK);
    struct erma_rand r;
    erma_rand_seed(&r, 17);
    static uint8_t buf[1472];
    for (int i = 0; i < 20000; i++) {
        const uint32_t len = garbage_packet(&r, buf, sizeof buf, i, ECHO);
        const struct erma_tx_pkt p = {.dst = &dst, .hdr = buf, .hdr_len = len};
        erma_tx_burst(evil, &p, 1);
        if (i % 256 == 0)
            erma_endpoint_run(c.ep, 200000); /* let the server keep up */
    }
    erma_transport_close(evil);
    call_once(&c, ECHO, 3000, 3000, 7); /* still serving */
    uint64_t v[NSTATS];
    server_stats(&c, v);
    print_message("  server after 20000 garbage packets: %llu malformed, %llu for no session, "
                  "%llu proxied calls failed\n", (unsigned long long)v[2],
                  (unsigned long long)v[3], (unsigned long long)v[4]);
    assert_true(v[2] > 10000);
    assert_true(v[2] + v[3] > 18000); /* a few random SM messages are legitimate */
    assert_int_equal(v[4], 0);
    client_down(&c);
    kill_server();
}

/* Sessions x credits must fit the server's RX ring, and the client's own. */
static void sm_count(struct erma_rpc *rpc, int session, enum erma_sm_event ev, int err, void *ctx)
{
    (void)rpc;
    (void)session;
    int *counts = ctx;
    counts[ev]++;
    counts[4] = err;
}

static void test_refusal(void **state)
{
    (void)state;
    start_server_ring(0, 64); /* room for 2 sessions of 32 credits */
    struct client c;
    int counts[5] = {0};
    const struct erma_rpc_cfg cfg = {.sm_handler = sm_count, .sm_ctx = counts};
    client_up(&c, &cfg, NULL);
    int s[3];
    for (int i = 0; i < 3; i++)
        assert_true((s[i] = erma_session_create(c.rpc, server_uri, 0)) >= 0);
    const uint64_t end = erma_now_ns() + 3000000000ull;
    while (counts[ERMA_SM_CONNECTED] + counts[ERMA_SM_CONNECT_FAILED] < 3 && erma_now_ns() < end)
        erma_endpoint_run_once(c.ep);
    assert_int_equal(counts[ERMA_SM_CONNECTED], 2);
    assert_int_equal(counts[ERMA_SM_CONNECT_FAILED], 1);
    assert_int_equal(counts[4], ERMA_EREFUSED);
    client_down(&c);
    kill_server();
    /* the client's own ring */
    const struct erma_endpoint_cfg small = {.rx_ring = 64};
    client_up(&c, NULL, &small);
    assert_true(erma_session_create(c.rpc, server_uri, 0) >= 0);
    assert_true(erma_session_create(c.rpc, server_uri, 0) >= 0);
    assert_int_equal(erma_session_create(c.rpc, server_uri, 0), ERMA_ENOSLOTS);
    client_down(&c);
}

static bool call_done(void *ctx)
{
    return ((struct call *)ctx)->done;
}

/* Endpoints of a base URI on port 0 take free ports of their own (endpoint 1
 * once bound port 1); a client on one calls the server and waits for the
 * answer with erma_endpoint_run_until(), which times out when nothing comes. */
static void test_port_zero_and_run_until(void **state)
{
    (void)state;
    start_server(0);
    struct erma_nexus *nx;
    struct erma_endpoint *ep[2];
    struct erma_rpc *rpc[2];
    char uri[2][64];
    assert_int_equal(erma_nexus_create(NULL, &nx), ERMA_OK);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(erma_endpoint_create("udp://127.0.0.1:0", (uint8_t)i, NULL, &ep[i]),
                         ERMA_OK);
        assert_int_equal(erma_rpc_create(nx, ep[i], NULL, &rpc[i]), ERMA_OK);
        assert_int_equal(erma_endpoint_uri(ep[i], uri[i], sizeof uri[i]), ERMA_OK);
        const char *colon = strrchr(uri[i], ':');
        assert_non_null(colon);
        assert_true(atoi(colon + 1) >= 1024); /* a free port, not 0 + i */
    }
    assert_string_not_equal(uri[0], uri[1]);
    assert_int_equal(erma_endpoint_uri(ep[0], uri[0], 8), ERMA_EINVAL);

    struct call k = {0};
    const int sess = erma_session_create(rpc[1], server_uri, 0);
    assert_true(sess >= 0);
    assert_int_equal(erma_msgbuf_alloc(rpc[1], REQ_HDR, &k.req), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(rpc[1], 64, &k.resp), ERMA_OK);
    fill_req(&k.req, 7, 40);
    assert_int_equal(erma_rpc_call(rpc[1], sess, ECHO, &k.req, &k.resp, on_call, &k),
                     ERMA_OK);
    assert_int_equal(erma_endpoint_run_until(ep[1], call_done, &k, 30000000000ull), ERMA_OK);
    assert_int_equal(k.status, ERMA_OK);
    assert_int_equal(check_resp(&k.resp, 7, 40), 0);
    k.done = 0; /* nothing more will come: the call times out, near its timeout */
    const uint64_t t0 = erma_now_ns();
    assert_int_equal(erma_endpoint_run_until(ep[1], call_done, &k, 20000000), ERMA_ETIMEDOUT);
    assert_true(erma_now_ns() - t0 >= 20000000);
    erma_msgbuf_free(rpc[1], &k.req);
    erma_msgbuf_free(rpc[1], &k.resp);
    for (int i = 0; i < 2; i++) {
        erma_rpc_destroy(rpc[i]);
        erma_endpoint_destroy(ep[i]);
    }
    erma_nexus_destroy(nx);
    kill_server();
}

/* Virtual paths on loopback: a 4-path client and server (ports 0: the
 * kernel's free port and the 3 after it) move 1 MiB each way on all four
 * client ports; a 1-path client gets a 1-path session from the same
 * server. One thread runs both endpoints. */
static bool vp_step(struct erma_endpoint *ep[2], struct call *k)
{
    const uint64_t end = erma_now_ns() + 30000000000ull;
    while (!k->done && erma_now_ns() < end)
        for (int i = 0; i < 2; i++)
            erma_endpoint_run_once(ep[i]);
    return k->done;
}

static void vp_call(struct erma_rpc *rpc, struct erma_endpoint *ep[2], int sess, uint32_t id,
                    uint32_t req_size, uint32_t resp_size)
{
    struct call k = {0};
    assert_int_equal(erma_msgbuf_alloc(rpc, req_size, &k.req), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(rpc, 64, &k.resp), ERMA_OK);
    fill_req(&k.req, id, resp_size);
    assert_int_equal(erma_rpc_call(rpc, sess, ECHO, &k.req, &k.resp, on_call, &k), ERMA_OK);
    assert_true(vp_step(ep, &k));
    assert_int_equal(k.status, ERMA_OK);
    assert_int_equal(check_resp(&k.resp, id, resp_size), 0);
    erma_msgbuf_free(rpc, &k.req);
    erma_msgbuf_free(rpc, &k.resp);
}

static void test_virtual_paths(void **state)
{
    (void)state;
    struct erma_nexus *nx;
    struct echo_stats st = {0};
    struct erma_endpoint *ep[2];
    struct erma_rpc *rpc[2];
    char uri[64];
    const struct erma_endpoint_cfg four = {.paths = 4};
    assert_int_equal(erma_nexus_create(NULL, &nx), ERMA_OK);
    assert_int_equal(erma_handler_register(nx, ECHO, echo_handler, ERMA_DISPATCH, &st), ERMA_OK);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(erma_endpoint_create("udp://127.0.0.1:0", 0, &four, &ep[i]), ERMA_OK);
        assert_int_equal(erma_rpc_create(nx, ep[i], NULL, &rpc[i]), ERMA_OK);
    }
    assert_int_equal(erma_endpoint_uri(ep[0], uri, sizeof uri), ERMA_OK);
    const int sess = erma_session_create(rpc[1], uri, 0);
    assert_true(sess >= 0);
    vp_call(rpc[1], ep, sess, 1, 1u << 20, REQ_HDR);
    vp_call(rpc[1], ep, sess, 2, REQ_HDR, 1u << 20);
    for (unsigned p = 0; p < 4; p++) { /* every port of both ends carried packets */
        assert_true(ep[1]->path[p]->stats.tx_pkts > 0);
        assert_true(ep[0]->path[p]->stats.tx_pkts > 0);
    }
    /* a client with one port gets a one-path session from the same server */
    struct erma_endpoint *one[2] = {ep[0], NULL};
    struct erma_rpc *rpc1;
    assert_int_equal(erma_endpoint_create("udp://127.0.0.1:0", 0, NULL, &one[1]), ERMA_OK);
    assert_int_equal(erma_rpc_create(nx, one[1], NULL, &rpc1), ERMA_OK);
    const int s1 = erma_session_create(rpc1, uri, 0);
    assert_true(s1 >= 0);
    vp_call(rpc1, one, s1, 3, 1u << 20, REQ_HDR);
    assert_int_equal(atomic_load(&st.bad), 0);
    /* more paths than an endpoint may have is a precise error */
    struct erma_endpoint *bad;
    const struct erma_endpoint_cfg many = {.paths = ERMA_MAX_PATHS + 1};
    assert_int_equal(erma_endpoint_create("udp://127.0.0.1:0", 0, &many, &bad), ERMA_EINVAL);
    erma_rpc_destroy(rpc1);
    erma_endpoint_destroy(one[1]);
    for (int i = 0; i < 2; i++) {
        erma_rpc_destroy(rpc[i]);
        erma_endpoint_destroy(ep[i]);
    }
    erma_nexus_destroy(nx);
}

/* ---- a handler registered while the server's loop runs ---- */

#define LATE 6

/* The server's loop on a thread of its own, which pauses while hold is
 * set. hold and held are relaxed: they give ThreadSanitizer no
 * happens-before to hide a race with. */
struct loop_thread {
    struct erma_endpoint *ep;
    _Atomic bool stop, hold, held;
};

static void *run_loop(void *arg)
{
    struct loop_thread *t = arg;
    while (!atomic_load(&t->stop)) {
        atomic_store_explicit(&t->held, atomic_load_explicit(&t->hold, memory_order_relaxed),
                              memory_order_relaxed);
        if (!atomic_load_explicit(&t->held, memory_order_relaxed))
            erma_endpoint_run(t->ep, 1000000);
    }
    return NULL;
}

static void start_late(struct client *c, uint8_t type, uint32_t id, struct call *k)
{
    memset(k, 0, sizeof *k);
    assert_int_equal(erma_msgbuf_alloc(c->rpc, REQ_HDR, &k->req), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(c->rpc, 64, &k->resp), ERMA_OK);
    fill_req(&k->req, id, 8);
    assert_int_equal(erma_rpc_call(c->rpc, c->sess, type, &k->req, &k->resp, on_call, k),
                     ERMA_OK);
}

/* Runs the client's loop until k completes; its status. */
static int end_late(struct client *c, struct call *k)
{
    wait_done(c->ep, &k->done, 30000000000ull);
    assert_int_equal(k->done, 1);
    erma_msgbuf_free(c->rpc, &k->req);
    erma_msgbuf_free(c->rpc, &k->resp);
    return k->status;
}

/* erma_handler_register() while another thread runs the loop of the
 * nexus's rpc: a request before it gets ERMA_ENOHANDLER, those after it
 * the handlers, dispatch and worker. Two requests leave before the
 * registrations and reach the server's loop after them, so that nothing
 * but the handler table orders the registration before its use (the
 * sockets would: ThreadSanitizer takes a send and a later receive for a
 * synchronisation); label threads runs it under ThreadSanitizer. */
static void test_register_while_running(void **state)
{
    (void)state;
    struct erma_nexus *nx;
    struct erma_rpc *rpc;
    struct loop_thread t = {0};
    struct echo_stats late = {0};
    char uri[64];
    const struct erma_nexus_cfg ncfg = {.workers = 1};
    assert_int_equal(erma_nexus_create(&ncfg, &nx), ERMA_OK);
    assert_int_equal(erma_endpoint_create("udp://127.0.0.1:0", 0, NULL, &t.ep), ERMA_OK);
    assert_int_equal(erma_rpc_create(nx, t.ep, NULL, &rpc), ERMA_OK);
    assert_int_equal(erma_endpoint_uri(t.ep, uri, sizeof uri), ERMA_OK);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, run_loop, &t), 0);
    struct client c;
    client_up(&c, NULL, NULL);
    c.sess = erma_session_create(c.rpc, uri, 0);
    assert_true(c.sess >= 0);
    struct call k[2];
    start_late(&c, LATE, 1, &k[0]);
    assert_int_equal(end_late(&c, &k[0]), ERMA_ENOHANDLER);
    atomic_store_explicit(&t.hold, true, memory_order_relaxed);
    while (!atomic_load_explicit(&t.held, memory_order_relaxed))
        sched_yield();
    for (int i = 0; i < 2; i++) /* sent now, served after the registrations */
        start_late(&c, (uint8_t)(LATE + i), (uint32_t)(2 + i), &k[i]);
    erma_endpoint_run_once(c.ep);
    assert_int_equal(erma_handler_register(nx, LATE, echo_handler, ERMA_DISPATCH, &late),
                     ERMA_OK);
    assert_int_equal(erma_handler_register(nx, LATE + 1, echo_handler, ERMA_WORKER, &late),
                     ERMA_OK);
    atomic_store_explicit(&t.hold, false, memory_order_relaxed);
    for (int i = 0; i < 1000 && atomic_load(&late.calls) < 2; i++) /* no client packet meanwhile */
        usleep(1000);
    for (int i = 0; i < 2; i++)
        assert_int_equal(end_late(&c, &k[i]), ERMA_OK);
    for (uint32_t id = 4; id < 10; id++) {
        start_late(&c, (uint8_t)(LATE + id % 2), id, &k[0]);
        assert_int_equal(end_late(&c, &k[0]), ERMA_OK);
    }
    assert_int_equal(atomic_load(&late.calls), 8);
    client_down(&c);
    atomic_store(&t.stop, true);
    pthread_join(th, NULL);
    erma_rpc_destroy(rpc);
    erma_endpoint_destroy(t.ep);
    erma_nexus_destroy(nx);
}

/* ---- a wrong key ---- */

/* A client whose psk is not the server's: its connect, and the call
 * waiting on it, fail with ERMA_EAUTH well within the connect timeout
 * (about one 20 ms retry interval), and the server counts the refusals.
 * One thread runs both endpoints. */
static void test_wrong_psk(void **state)
{
    (void)state;
    static const uint8_t key[2][ERMA_PSK_BYTES] = {"the server's key, 32 bytes long",
                                                   "the client's key, 32 bytes long"};
    struct erma_nexus *nx[2];
    struct erma_endpoint *ep[2];
    struct erma_rpc *rpc[2];
    struct echo_stats es = {0};
    const struct erma_rpc_cfg cfg = {0}; /* the defaults: connect_timeout_ns 3 s */
    for (int i = 0; i < 2; i++) {
        const struct erma_nexus_cfg nc = {.psk = key[i]};
        assert_int_equal(erma_nexus_create(&nc, &nx[i]), ERMA_OK);
        assert_int_equal(erma_endpoint_create("udp://127.0.0.1:0", 0, NULL, &ep[i]), ERMA_OK);
        assert_int_equal(erma_rpc_create(nx[i], ep[i], &cfg, &rpc[i]), ERMA_OK);
    }
    assert_int_equal(erma_handler_register(nx[0], ECHO, echo_handler, ERMA_DISPATCH, &es),
                     ERMA_OK);
    char uri[64];
    assert_int_equal(erma_endpoint_uri(ep[0], uri, sizeof uri), ERMA_OK);
    const uint64_t t0 = erma_now_ns();
    const int sess = erma_session_create(rpc[1], uri, 0);
    assert_true(sess >= 0);
    struct call k = {0};
    assert_int_equal(erma_msgbuf_alloc(rpc[1], REQ_HDR, &k.req), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(rpc[1], 64, &k.resp), ERMA_OK);
    fill_req(&k.req, 1, 8);
    assert_int_equal(erma_rpc_call(rpc[1], sess, ECHO, &k.req, &k.resp, on_call, &k), ERMA_OK);
    assert_true(vp_step(ep, &k));
    const uint64_t took = erma_now_ns() - t0;
    print_message("  wrong key: %s after %.1f ms\n", erma_strerror(k.status), (double)took / 1e6);
    assert_int_equal(k.status, ERMA_EAUTH);
    assert_true(took < 3000000000ull / 2);
    struct erma_rpc_stats st;
    erma_rpc_get_stats(rpc[0], &st);
    assert_true(st.rx_auth_failed >= 2);
    assert_int_equal(atomic_load(&es.calls), 0);
    erma_msgbuf_free(rpc[1], &k.req);
    erma_msgbuf_free(rpc[1], &k.resp);
    for (int i = 0; i < 2; i++) {
        erma_rpc_destroy(rpc[i]);
        erma_endpoint_destroy(ep[i]);
        erma_nexus_destroy(nx[i]);
    }
}

/* ---- what a peer can make the server hold ---- */

/* First packets of size-byte requests on every slot of each session. */
static void attack(struct client *a, const int *sess, unsigned n, uint32_t size)
{
    for (unsigned i = 0; i < n; i++) {
        send_first_packets(a->ep->tr, a->rpc, sess[i], ECHO, size);
        erma_endpoint_run(a->ep, 200000); /* a pace the server's socket takes */
    }
}

#define ATTACK_SESSIONS 64 /* the default max_sessions_per_peer */

/* The udp twin of test_rpc_budget's test_one_peer_first_packets: a peer
 * with 64 sessions sends only first packets of 8 MiB requests on their 512
 * slots. The server's resident memory grows by at most its 64 MiB budget
 * for the address, another client's 1 MiB echoes go through meanwhile, and
 * the partial requests are freed after recv_timeout_ns (1 s here). Sent
 * again until the server has seen them all (the kernel may drop a few on a
 * busy machine), which changes nothing: a request packet seen is a
 * duplicate. */
static void test_first_packets_udp(void **state)
{
    (void)state;
    server_recv_timeout_ns = 1000000000ull;
    start_server(0);
    server_recv_timeout_ns = 0;
    struct client a, c;
    client_up(&a, NULL, NULL);
    client_up(&c, NULL, NULL);
    c.sess = client_connect(&c);
    call_once(&c, ECHO, 100, 100, 1);
    static int sess[ATTACK_SESSIONS];
    for (unsigned i = 0; i < ATTACK_SESSIONS; i++)
        sess[i] = client_connect(&a);
    const uint64_t rss0 = rss_of(server_pid);
    uint64_t v[NSTATS] = {0};
    for (int round = 0; round < 20 && v[6] < 512 - 8; round++) {
        attack(&a, sess, ATTACK_SESSIONS, ERMA_MAX_MSG_SIZE);
        server_stats(&c, v);
    }
    const uint64_t rss1 = rss_of(server_pid);
    print_message("  512 first packets of 8 MiB requests: %llu MiB held, %llu refused, "
                  "server resident memory +%.1f MiB\n", (unsigned long long)(v[5] >> 20),
                  (unsigned long long)v[6], (double)(rss1 - rss0) / (1 << 20));
    assert_int_equal(v[5], 8 * (uint64_t)ERMA_MAX_MSG_SIZE);
    assert_int_equal(v[6], 512 - 8);
    assert_true(rss1 < rss0 + (96u << 20)); /* its 64 MiB, and slack for the rest */
    call_once(&c, ECHO, 1 << 20, 1 << 20, 2);
    /* freed after 1 s; waited for up to 10 s (a busy machine), keepalives flowing */
    const uint64_t end = erma_now_ns() + 10000000000ull;
    while (v[7] < 8 && erma_now_ns() < end) {
        erma_endpoint_run(a.ep, 100000000);
        server_stats(&c, v);
    }
    assert_int_equal(v[7], 8);
    assert_int_equal(v[5], 0);
    call_once(&c, ECHO, ERMA_MAX_MSG_SIZE, 64, 3);
    client_down(&a);
    client_down(&c);
    kill_server();
}

/* ---- a server killed and restarted under a session with cfg.reconnect ---- */

#define RC_CALLS 4000
#define RC_WINDOW 16

struct reconnect_run {
    struct client c;
    uint32_t next_id, done, ok, peer_failed, other, wrong;
    int events[8], order_bad;
    struct call calls[RC_WINDOW];
};
static struct reconnect_run *g_rc;

static void rc_issue(struct reconnect_run *r, struct call *k);

static void on_rc(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    struct call *k = tag;
    struct reconnect_run *r = g_rc;
    r->done++;
    if (status == ERMA_OK)
        r->wrong += check_resp(resp, k->id, 32) != 0;
    r->ok += status == ERMA_OK;
    r->peer_failed += status == ERMA_EPEERFAILED;
    r->other += status != ERMA_OK && status != ERMA_EPEERFAILED;
    /* a failure comes after RECONNECTING, never before it */
    r->order_bad += status == ERMA_EPEERFAILED && !r->events[ERMA_SM_RECONNECTING];
    rc_issue(r, k);
}

static void rc_issue(struct reconnect_run *r, struct call *k)
{
    if (r->next_id >= RC_CALLS)
        return;
    k->id = r->next_id++;
    fill_req(&k->req, k->id, 32);
    assert_int_equal(erma_rpc_call(r->c.rpc, r->c.sess, ECHO, &k->req, &k->resp, on_rc, k),
                     ERMA_OK);
}

static void on_rc_sm(struct erma_rpc *rpc, int session, enum erma_sm_event ev, int err,
                     void *ctx)
{
    (void)rpc;
    (void)err;
    struct reconnect_run *r = ctx;
    if (session == r->c.sess)
        r->events[ev]++;
}

static void rc_run(struct reconnect_run *r, uint32_t until, uint64_t ns)
{
    const uint64_t end = erma_now_ns() + ns;
    while (r->done < until && erma_now_ns() < end)
        erma_endpoint_run_once(r->c.ep);
}

/* RC_CALLS calls, RC_WINDOW at a time, across a server's kill and
 * restart: the session number works on, the calls the server may have
 * run fail with ERMA_EPEERFAILED after ERMA_SM_RECONNECTING, every other
 * one completes right, and no id runs twice (the servers' shared count). */
static void reconnect_across_restart(const uint8_t *key)
{
    shared_per_id = mmap(NULL, MANY * sizeof *shared_per_id, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(shared_per_id != MAP_FAILED);
    server_psk = key;
    start_server(0);
    struct reconnect_run *r = calloc(1, sizeof *r);
    g_rc = r;
    const struct erma_nexus_cfg ncfg = {.psk = key};
    const struct erma_rpc_cfg cfg = {.failure_ns = 300000000, .keepalive_ns = 50000000,
                                     .rto_ns = 2000000, .reconnect = ERMA_RECONNECT_QUEUE,
                                     .sm_handler = on_rc_sm, .sm_ctx = r};
    assert_int_equal(erma_nexus_create(&ncfg, &r->c.nx), ERMA_OK);
    assert_int_equal(erma_endpoint_create(client_uri, 0, NULL, &r->c.ep), ERMA_OK);
    assert_int_equal(erma_rpc_create(r->c.nx, r->c.ep, &cfg, &r->c.rpc), ERMA_OK);
    const int s = r->c.sess = client_connect(&r->c);
    for (int i = 0; i < RC_WINDOW; i++) {
        assert_int_equal(erma_msgbuf_alloc(r->c.rpc, 32, &r->calls[i].req), ERMA_OK);
        assert_int_equal(erma_msgbuf_alloc(r->c.rpc, 64, &r->calls[i].resp), ERMA_OK);
        rc_issue(r, &r->calls[i]);
    }
    rc_run(r, RC_CALLS / 2, 10000000000ull);
    kill_server();
    start_server(0);
    const uint64_t t0 = erma_now_ns();
    rc_run(r, RC_CALLS, 10000000000ull);
    print_message("  %s: %u calls, %u failed (sent before the kill), reconnected and done "
                  "%.0f ms after the restart\n", key ? "psk" : "no psk", r->done,
                  r->peer_failed, (erma_now_ns() - t0) / 1e6);
    assert_int_equal(r->done, RC_CALLS);
    assert_int_equal(r->wrong, 0);
    assert_int_equal(r->other, 0);
    assert_int_equal(r->order_bad, 0);
    assert_true(r->peer_failed <= RC_WINDOW);
    assert_int_equal(r->events[ERMA_SM_RECONNECTING], 1);
    assert_int_equal(r->events[ERMA_SM_RECONNECTED], 1);
    assert_int_equal(r->events[ERMA_SM_PEER_FAILED], 0);
    assert_true(erma_session_connected(r->c.rpc, s));
    uint32_t ran = 0;
    for (uint32_t id = 0; id < RC_CALLS; id++) {
        assert_true(atomic_load(&shared_per_id[id]) <= 1);
        ran += atomic_load(&shared_per_id[id]);
    }
    assert_true(ran >= r->ok && ran <= r->ok + r->peer_failed);
    call_once(&r->c, ECHO, 100, 100, RC_CALLS + 1);
    for (int i = 0; i < RC_WINDOW; i++) {
        erma_msgbuf_free(r->c.rpc, &r->calls[i].req);
        erma_msgbuf_free(r->c.rpc, &r->calls[i].resp);
    }
    client_down(&r->c);
    kill_server();
    munmap((void *)shared_per_id, MANY * sizeof *shared_per_id);
    shared_per_id = NULL;
    server_psk = NULL;
    free(r);
}

static const uint8_t reconnect_psk[ERMA_PSK_BYTES] = "erma test key: 32 bytes long...";

static void test_reconnect_across_restart(void **state)
{
    (void)state;
    reconnect_across_restart(NULL);
    reconnect_across_restart(reconnect_psk);
}

int main(void)
{
    const int base = test_port_base(8);
    snprintf(server_uri, sizeof server_uri, "udp://127.0.0.1:%d", base);
    snprintf(client_uri, sizeof client_uri, "udp://127.0.0.1:0"); /* any free port */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes_dispatch_and_worker),
        cmocka_unit_test(test_idle_server_sleeps),
        cmocka_unit_test(test_no_sleep_while_awaiting),
        cmocka_unit_test_teardown(test_shared_core_sleeps_sooner, shared_core_teardown),
        cmocka_unit_test(test_many_with_loss),
        cmocka_unit_test(test_server_killed_and_restarted),
        cmocka_unit_test(test_reconnect_across_restart),
        cmocka_unit_test(test_many_sessions),
        cmocka_unit_test(test_nested_malformed),
        cmocka_unit_test(test_refusal),
        cmocka_unit_test(test_port_zero_and_run_until),
        cmocka_unit_test(test_virtual_paths),
        cmocka_unit_test(test_register_while_running),
        cmocka_unit_test(test_wrong_psk),
        cmocka_unit_test(test_first_packets_udp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
