/*
 * rpc_perf --threads N [--scale] (rpc_threads.h): eRPC's model, an
 * endpoint per thread. In each round, for each thread count n (N; with
 * --scale 1, 2, 4, ... and N), the raw baseline and then erma run n client
 * threads here against n server threads in a forked process (or in
 * `rpc_perf --role server --threads N` elsewhere): client thread t owns
 * endpoint t of --uri, its erma_rpc and its sessions, all to server
 * endpoint t; raw thread t sends to raw server thread t. The table, its
 * efficiencies and medians are threads_table.c's; eff_ratio is erma's
 * efficiency / raw's.
 */
#include <stdio.h>
#include <string.h>

#include "erma/errors.h"
#include "rpc_threads.h"
#include "threads_table.h"

/* Measures n threads of raw (v 0) or erma (v 1) once; an erma status, or
 * ERMA_EBADPKT when an answer did not carry its request's tag. */
static int measure_once(void *ctx, unsigned v, unsigned n, struct bench_raw_rate *per,
                        struct bench_raw_rate *total)
{
    const struct rpc_threads_opts *o = ctx;
    const struct bench_rpc_opts *r = o->rpc;
    const bool rpc = v == 1;
    const uint64_t max_ns = (uint64_t)(r->seconds * 4e9) + 60000000000ull;
    pid_t child = 0;
    if (!o->remote)
        child = rpc ? bench_rpc_servers_fork(r->server, n, o->server_cpus, r->cfg, r->ep_cfg,
                                             max_ns)
                    : bench_raw_servers_fork(o->raw_server, n, o->server_cpus, max_ns);
    const int rc = rpc ? bench_rpc_rate_threads(r, n, o->client_cpus, per, total)
                       : bench_raw_rate_threads(r->uri, o->raw_server, r->size, r->window,
                                                r->batch, r->seconds, n, o->client_cpus, per,
                                                total);
    if (rpc)
        bench_rpc_server_stop(child);
    else if (!o->remote)
        bench_raw_servers_stop(r->uri, o->raw_server, n, child);
    return rc == ERMA_OK && total->wrong ? ERMA_EBADPKT : rc;
}

void rpc_threads_header(char *buf, size_t len)
{
    threads_table_header(buf, len, "bench,mode,transport:9,size,sessions", "mrps");
}

int rpc_threads_run(const struct rpc_threads_opts *o, const struct bench_table *t)
{
    const char *srv = o->rpc->server, *sep = strstr(srv, "://");
    char lead[128], what[64];
    snprintf(lead, sizeof lead, "%s,%.*s,%u,%u", o->mode, sep ? (int)(sep - srv) : 0, srv,
             o->rpc->size, o->rpc->sessions);
    snprintf(what, sizeof what, "%s, %u B request", o->mode, o->rpc->size);
    const struct threads_table tt = {
        .prog = "rpc_perf", .lead = lead, .what = what,
        .wrong = "an answer without its request's tag", .variant = {"raw", "erma"},
        .peer = {o->raw_server, o->rpc->server}, .threads = o->threads, .rounds = o->rounds,
        .scale = o->scale, .measure = measure_once, .ctx = (void *)o};
    return threads_table_run(&tt, t);
}
