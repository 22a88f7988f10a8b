/*
 * rma_perf --mode rate --threads N [--scale] (rma_threads.h): eRPC's model
 * for one-sided ops. In each round, for each thread count n (N; with
 * --scale 1, 2, 4, ... and N), the RPC of the same size and the one-sided
 * op (in turn, alternating which goes first) run n initiator threads here
 * against n target threads in a forked process (or in `rma_perf --role
 * server --threads N` elsewhere). Initiator thread t owns endpoint t of
 * --uri, its nexus, erma_rpc and engine, and a key of its own: fetched
 * through the key service over a session of that endpoint, so bound to
 * its address. Target thread t owns endpoint t of --server, its erma_rpc
 * (the RPC echo, and the key service), its engine and its region; the
 * targets share one nexus. Thread t's RPCs go to target t too. The table,
 * efficiencies and medians are threads_table.c's; ratio is one-sided /
 * RPC.
 */
#include <stdio.h>
#include <string.h>

#include "erma/errors.h"
#include "rma_threads.h"
#include "threads_table.h"

struct rma_threads {
    const struct rma_opts *o, *r; /* the one-sided op's options, the RPC's */
    struct rma_targets *targets;
};

/* Initiator thread t: its endpoint, engine and key, then the rate. */
static int initiator_side(void *ctx, unsigned t, struct bench_gate *start,
                          struct bench_raw_rate *out)
{
    struct rma_opts o = *(const struct rma_opts *)ctx;
    o.rpc.thread_id = (uint8_t)t;
    struct rma_initiator c;
    int rc = rma_initiator_open(&c, &o, (uint8_t)t);
    bench_gate_wait(start);
    if (rc != ERMA_OK) {
        char w[256];
        fprintf(stderr, "rma_perf: %s: %s\n", rma_where(&o, "one-sided", w, sizeof w),
                erma_strerror(rc));
        return rc;
    }
    rc = rma_rate(&o, &c, out);
    rma_initiator_close(&c);
    return rc;
}

/* Measures n threads of the RPC (v 0) or the one-sided op (v 1) once; an
 * erma status, ERMA_EBADPKT when a READ brought wrong data. */
static int measure_once(void *ctx, unsigned v, unsigned n, struct bench_raw_rate *per,
                        struct bench_raw_rate *total)
{
    const struct rma_threads *x = ctx;
    const struct rma_opts *o = x->o;
    const uint64_t max_ns = (uint64_t)(o->rpc.seconds * 4e9) + 60000000000ull;
    const struct bench_thread_ext ext = {rma_target_open, rma_target_close, x->targets};
    const int *client_cpus = o->pinned ? o->cpus[0] : NULL;
    const pid_t child = o->remote ? 0
                                  : bench_rpc_servers_fork_ext(o->rpc.server, n,
                                                               o->pinned ? o->cpus[1] : NULL,
                                                               &o->cfg, &o->ep, &ext, max_ns);
    int rc = v == 0 ? bench_rpc_rate_threads(&x->r->rpc, n, client_cpus, per, total)
                    : bench_run_threads(initiator_side, (void *)o, n, client_cpus, per, total);
    bench_rpc_server_stop(child);
    if (rc == ERMA_OK && total->wrong)
        rc = ERMA_EBADPKT;
    if (rc == ERMA_OK && o->ops && total->echoes != n * o->ops)
        rc = ERMA_ETIMEDOUT; /* an op or RPC failed or did not come back in time */
    return rc;
}

void rma_threads_header(char *buf, size_t len)
{
    threads_table_header(buf, len, "bench,mode,op,transport:9,size", "mops");
}

int rma_threads_run(const struct rma_opts *o, const struct rma_opts *r,
                    const struct bench_table *t)
{
    static struct rma_targets targets; /* the forked targets' (each child its own copy) */
    targets.len = rma_buf_len(o) > (1u << 20) ? rma_buf_len(o) : 1u << 20;
    const char *srv = o->rpc.server, *sep = strstr(srv, "://");
    const char *op = o->op == ERMA_RMA_READ ? "read" : "write";
    char lead[128], what[64];
    snprintf(lead, sizeof lead, "%s,%s,%.*s,%u", o->mode, op, sep ? (int)(sep - srv) : 0, srv,
             o->rpc.size);
    snprintf(what, sizeof what, "%s %s %u B", o->mode, op, o->rpc.size);
    struct rma_threads x = {o, r, &targets};
    const struct threads_table tt = {
        .prog = "rma_perf", .lead = lead, .what = what, .wrong = "a READ brought wrong data",
        .variant = {"rpc", "rma"}, .peer = {srv, srv}, .threads = o->threads,
        .rounds = o->rounds, .scale = o->scale, .alternate = true, .measure = measure_once,
        .ctx = &x};
    return threads_table_run(&tt, t);
}
