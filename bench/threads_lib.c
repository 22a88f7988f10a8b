/* eRPC's model in the benchmarks: an endpoint per thread (bench.h, threads). */
#include <signal.h>
#include <stdatomic.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "bench.h"
#include "erma/clock.h"
#include "erma/endpoint.h"
#include "erma/errors.h"
#include "erma/log.h"
#include "erma/rpc.h"

/* ---- the start gate ---- */

void bench_gate_init(struct bench_gate *g, unsigned parties)
{
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->all_in, NULL);
    g->parties = parties;
    g->arrived = 0;
}

void bench_gate_parties(struct bench_gate *g, unsigned parties)
{
    pthread_mutex_lock(&g->lock);
    g->parties = parties;
    if (g->arrived >= g->parties)
        pthread_cond_broadcast(&g->all_in);
    pthread_mutex_unlock(&g->lock);
}

void bench_gate_wait(struct bench_gate *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->lock);
    if (++g->arrived >= g->parties)
        pthread_cond_broadcast(&g->all_in);
    while (g->arrived < g->parties)
        pthread_cond_wait(&g->all_in, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

void bench_gate_destroy(struct bench_gate *g)
{
    pthread_cond_destroy(&g->all_in);
    pthread_mutex_destroy(&g->lock);
}

/* ---- measuring threads ---- */

typedef int (*side_fn)(void *ctx, unsigned t, struct bench_gate *start,
                       struct bench_raw_rate *out);

struct side_thread {
    pthread_t id;
    side_fn side;
    void *ctx;
    unsigned t;
    int cpu, rc;
    struct bench_gate *start;
    struct bench_raw_rate *out;
};

static void *side_main(void *arg)
{
    struct side_thread *s = arg;
    bench_pin(s->cpu);
    s->rc = s->side(s->ctx, s->t, s->start, s->out);
    return NULL;
}

int bench_run_threads(side_fn side, void *ctx, unsigned n, const int *cpus,
                      struct bench_raw_rate *per, struct bench_raw_rate *total)
{
    if (n == 0 || n > BENCH_MAX_THREADS)
        return ERMA_EINVAL;
    struct side_thread th[BENCH_MAX_THREADS];
    struct bench_gate start;
    bench_gate_init(&start, n);
    unsigned started = 0;
    for (; started < n; started++) {
        per[started] = (struct bench_raw_rate){0};
        th[started] = (struct side_thread){.side = side, .ctx = ctx, .t = started,
                                           .cpu = cpus ? cpus[started] : -1, .start = &start,
                                           .out = &per[started]};
        if (pthread_create(&th[started].id, NULL, side_main, &th[started]) != 0)
            break;
    }
    if (started < n)
        bench_gate_parties(&start, started);
    *total = (struct bench_raw_rate){0};
    int rc = started < n ? ERMA_ESYS : ERMA_OK;
    for (unsigned t = 0; t < started; t++) {
        pthread_join(th[t].id, NULL);
        if (rc == ERMA_OK)
            rc = th[t].rc;
        total->echoes += per[t].echoes;
        total->lost += per[t].lost;
        total->wrong += per[t].wrong;
        total->mpps += per[t].mpps;
        if (per[t].seconds > total->seconds)
            total->seconds = per[t].seconds;
    }
    bench_gate_destroy(&start);
    return rc;
}

/* Thread t's bench_rpc_rate: client endpoint t calls server endpoint t. */
static int rpc_side(void *ctx, unsigned t, struct bench_gate *start, struct bench_raw_rate *out)
{
    struct bench_rpc_opts o = *(const struct bench_rpc_opts *)ctx;
    o.thread_id = (uint8_t)t;
    o.start = start;
    return bench_rpc_rate(&o, out);
}

int bench_rpc_rate_threads(const struct bench_rpc_opts *o, unsigned n, const int *cpus,
                           struct bench_raw_rate *per, struct bench_raw_rate *total)
{
    if (o->symmetric)
        return ERMA_EINVAL;
    return bench_run_threads(rpc_side, (void *)o, n, cpus, per, total);
}

struct raw_args {
    const char *uri, *peer;
    uint32_t size, window, batch;
    double seconds;
};

/* Thread t's bench_raw_rate: from port t of uri to raw server t of peer. */
static int raw_side(void *ctx, unsigned t, struct bench_gate *start, struct bench_raw_rate *out)
{
    const struct raw_args *a = ctx;
    char uri[256], peer[256];
    int rc = erma_uri_for_thread(a->uri, (uint8_t)t, uri, sizeof uri);
    if (rc == ERMA_OK)
        rc = erma_uri_for_thread(a->peer, (uint8_t)t, peer, sizeof peer);
    if (rc != ERMA_OK) {
        bench_gate_wait(start);
        return rc;
    }
    return bench_raw_rate_at(uri, peer, a->size, a->window, a->batch, a->seconds, start, out);
}

int bench_raw_rate_threads(const char *uri, const char *peer, uint32_t size, uint32_t window,
                           uint32_t batch, double seconds, unsigned n, const int *cpus,
                           struct bench_raw_rate *per, struct bench_raw_rate *total)
{
    struct raw_args a = {uri, peer, size, window, batch, seconds};
    return bench_run_threads(raw_side, &a, n, cpus, per, total);
}

/* ---- server threads ---- */

struct server_thread {
    pthread_t id;
    struct bench_rpc_servers *s;
    unsigned t;
    int cpu, rc;
};

struct bench_rpc_servers {
    alignas(64) atomic_bool stop; /* read by every loop pass: a line of its own */
    alignas(64) char uri[256];
    struct erma_rpc_cfg cfg;
    struct erma_endpoint_cfg ep_cfg;
    bool has_cfg, has_ep_cfg;
    struct bench_thread_ext ext; /* .open NULL: none */
    struct erma_nexus *nx;
    struct bench_gate ready; /* the threads with their endpoints open, and the starter */
    unsigned started;
    struct server_thread th[BENCH_MAX_THREADS];
};

static bool servers_stopped(void *ctx)
{
    const struct bench_rpc_servers *s = ctx;
    return atomic_load_explicit(&s->stop, memory_order_relaxed);
}

/* Opens endpoint t with its own erma_rpc, then serves until stop. */
static void *server_main(void *arg)
{
    struct server_thread *st = arg;
    struct bench_rpc_servers *s = st->s;
    bench_pin(st->cpu);
    struct erma_endpoint *ep = NULL;
    struct erma_rpc *rpc = NULL;
    int rc = erma_endpoint_create(s->uri, (uint8_t)st->t, s->has_ep_cfg ? &s->ep_cfg : NULL, &ep);
    if (rc == ERMA_OK)
        rc = erma_rpc_create(s->nx, ep, s->has_cfg ? &s->cfg : NULL, &rpc);
    const bool ext = rc == ERMA_OK && s->ext.open;
    if (ext)
        rc = s->ext.open(s->ext.ctx, st->t, ep, rpc);
    if (rc != ERMA_OK)
        ERMA_ERROR("rpc server thread %u on %s: %s", st->t, s->uri, erma_strerror(rc));
    st->rc = rc;
    bench_gate_wait(&s->ready);
    while (rc == ERMA_OK && !servers_stopped(s))
        erma_endpoint_run_until(ep, servers_stopped, s, 1000000000);
    if (ext)
        s->ext.close(s->ext.ctx, st->t);
    if (rpc)
        erma_rpc_destroy(rpc);
    erma_endpoint_destroy(ep);
    return NULL;
}

void bench_rpc_servers_stop(struct bench_rpc_servers *s)
{
    if (!s)
        return;
    atomic_store(&s->stop, true);
    for (unsigned t = 0; t < s->started; t++)
        pthread_join(s->th[t].id, NULL);
    bench_gate_destroy(&s->ready);
    erma_nexus_destroy(s->nx);
    free(s);
}

/* Starts the threads; returns how many started. */
static unsigned servers_spawn(struct bench_rpc_servers *s, unsigned n, const int *cpus)
{
    unsigned t = 0;
    for (; t < n; t++) {
        s->th[t] = (struct server_thread){.s = s, .t = t, .cpu = cpus ? cpus[t] : -1};
        if (pthread_create(&s->th[t].id, NULL, server_main, &s->th[t]) != 0)
            break;
    }
    return t;
}

int bench_rpc_servers_start(const char *uri, unsigned n, const int *cpus,
                            const struct erma_rpc_cfg *cfg, const struct erma_endpoint_cfg *ep_cfg,
                            struct bench_rpc_servers **out)
{
    return bench_rpc_servers_start_ext(uri, n, cpus, cfg, ep_cfg, NULL, out);
}

int bench_rpc_servers_start_ext(const char *uri, unsigned n, const int *cpus,
                                const struct erma_rpc_cfg *cfg,
                                const struct erma_endpoint_cfg *ep_cfg,
                                const struct bench_thread_ext *ext,
                                struct bench_rpc_servers **out)
{
    if (!uri || !out || n == 0 || n > BENCH_MAX_THREADS)
        return ERMA_EINVAL;
    struct bench_rpc_servers *s = aligned_alloc(64, sizeof *s);
    if (!s)
        return ERMA_ENOMEM;
    memset(s, 0, sizeof *s);
    atomic_init(&s->stop, false);
    if (snprintf(s->uri, sizeof s->uri, "%s", uri) >= (int)sizeof s->uri) {
        free(s);
        return ERMA_EADDR;
    }
    s->has_cfg = cfg != NULL;
    s->has_ep_cfg = ep_cfg != NULL;
    if (cfg)
        s->cfg = *cfg;
    if (ep_cfg)
        s->ep_cfg = *ep_cfg;
    if (ext)
        s->ext = *ext;
    int rc = bench_rpc_echo_nexus(&s->nx);
    if (rc != ERMA_OK) {
        free(s);
        return rc;
    }
    bench_gate_init(&s->ready, n + 1);
    s->started = servers_spawn(s, n, cpus);
    if (s->started < n)
        bench_gate_parties(&s->ready, s->started + 1);
    bench_gate_wait(&s->ready); /* every endpoint open, or failed */
    rc = s->started < n ? ERMA_ESYS : ERMA_OK;
    for (unsigned t = 0; t < s->started && rc == ERMA_OK; t++)
        rc = s->th[t].rc;
    if (rc != ERMA_OK) {
        bench_rpc_servers_stop(s);
        return rc;
    }
    *out = s;
    return ERMA_OK;
}

/* Waits until max_ns pass or the parent is gone. */
static void child_wait(uint64_t max_ns)
{
    const uint64_t end = erma_now_ns() + max_ns;
    while (erma_now_ns() < end && getppid() != 1)
        usleep(20000);
}

pid_t bench_rpc_servers_fork(const char *uri, unsigned n, const int *cpus,
                             const struct erma_rpc_cfg *cfg,
                             const struct erma_endpoint_cfg *ep_cfg, uint64_t max_ns)
{
    return bench_rpc_servers_fork_ext(uri, n, cpus, cfg, ep_cfg, NULL, max_ns);
}

pid_t bench_rpc_servers_fork_ext(const char *uri, unsigned n, const int *cpus,
                                 const struct erma_rpc_cfg *cfg,
                                 const struct erma_endpoint_cfg *ep_cfg,
                                 const struct bench_thread_ext *ext, uint64_t max_ns)
{
    const pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the benchmark */
        struct bench_rpc_servers *s;
        if (bench_rpc_servers_start_ext(uri, n, cpus, cfg, ep_cfg, ext, &s) != ERMA_OK)
            _exit(1);
        child_wait(max_ns);
        bench_rpc_servers_stop(s);
        _exit(0);
    }
    return pid;
}

struct raw_server_thread {
    pthread_t id;
    char uri[256];
    int cpu;
    uint64_t max_ns;
};

static void *raw_server_main(void *arg)
{
    struct raw_server_thread *r = arg;
    bench_pin(r->cpu);
    bench_raw_server(r->uri, r->max_ns, false);
    return NULL;
}

/* The raw servers' child: a thread per server, until each got its stop. */
static int raw_servers_run(const char *uri, unsigned n, const int *cpus, uint64_t max_ns)
{
    struct raw_server_thread th[BENCH_MAX_THREADS];
    unsigned t = 0;
    for (; t < n && t < BENCH_MAX_THREADS; t++) {
        th[t] = (struct raw_server_thread){.cpu = cpus ? cpus[t] : -1, .max_ns = max_ns};
        if (erma_uri_for_thread(uri, (uint8_t)t, th[t].uri, sizeof th[t].uri) != ERMA_OK ||
            pthread_create(&th[t].id, NULL, raw_server_main, &th[t]) != 0)
            break;
    }
    for (unsigned i = 0; i < t; i++)
        pthread_join(th[i].id, NULL);
    return t == n ? 0 : 1;
}

pid_t bench_raw_servers_fork(const char *uri, unsigned n, const int *cpus, uint64_t max_ns)
{
    const pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        _exit(raw_servers_run(uri, n, cpus, max_ns));
    }
    return pid;
}
