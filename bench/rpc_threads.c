/*
 * rpc_perf --threads N [--scale] (rpc_threads.h): eRPC's model, an
 * endpoint per thread. In each round, for each thread count n (N; with
 * --scale 1, 2, 4, ... and N), the raw baseline and then erma run n client
 * threads here against n server threads in a forked process (or in
 * `rpc_perf --role server --threads N` elsewhere): client thread t owns
 * endpoint t of --uri, its erma_rpc and its sessions, all to server
 * endpoint t; raw thread t sends to raw server thread t. Efficiency at n
 * is the total rate / (n x the one-thread rate of the same round and
 * variant); eff_ratio is erma's efficiency / raw's. Medians are of the
 * values and of the per-round ratios.
 */
#include <stdio.h>
#include <string.h>

#include "erma/errors.h"
#include "rpc_threads.h"

#define ATTEMPTS 3
#define MAX_COUNTS 8 /* 1, 2, 4, 8, 16 and N <= 32 */
#define MAX_ROUNDS 50

const char rpc_threads_header[] =
    "bench,mode,transport:9,size,sessions,threads,round:6,variant:7,mrps,per_thread:10,"
    "thread_min:10,thread_max:10,efficiency:10,ratio,eff_ratio,thread_mrps";

/* One variant at one thread count over the rounds. */
struct series {
    double total[MAX_ROUNDS], min[MAX_ROUNDS], max[MAX_ROUNDS], eff[MAX_ROUNDS];
    double ratio[MAX_ROUNDS], eff_ratio[MAX_ROUNDS]; /* erma's, against raw */
};

static unsigned thread_counts(const struct rpc_threads_opts *o, unsigned *out)
{
    unsigned k = 0;
    if (o->scale)
        for (unsigned n = 1; n < o->threads; n *= 2)
            out[k++] = n;
    out[k++] = o->threads;
    return k;
}

/* Measures n threads of erma (rpc) or raw once; an erma status, or
 * ERMA_EBADPKT when an answer did not carry its request's tag. */
static int measure_once(const struct rpc_threads_opts *o, bool rpc, unsigned n,
                        struct bench_raw_rate *per, struct bench_raw_rate *total)
{
    const struct bench_rpc_opts *r = o->rpc;
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

/* measure_once, ATTEMPTS times at most; returns false after the last failure. */
static bool measure(const struct rpc_threads_opts *o, bool rpc, unsigned n, unsigned round,
                    struct bench_raw_rate *per, struct bench_raw_rate *total)
{
    for (int a = 1; a <= ATTEMPTS; a++) {
        const int rc = measure_once(o, rpc, n, per, total);
        if (rc == ERMA_OK)
            return true;
        fprintf(stderr, "rpc_perf: %s %s, %u threads, %u B request, round %u, -> %s: %s%s "
                        "(attempt %d of %d%s)\n",
                o->mode, rpc ? "erma" : "raw", n, o->rpc->size, round,
                rpc ? o->rpc->server : o->raw_server, erma_strerror(rc),
                rc == ERMA_EBADPKT ? " (an answer without its request's tag)" : "", a,
                ATTEMPTS, a < ATTEMPTS ? ", trying again" : ", giving up");
    }
    return false;
}

/* The per-thread rates "r0/r1/..." into buf; min and max into s at round i. */
static void per_thread(const struct bench_raw_rate *per, unsigned n, struct series *s,
                       unsigned i, char *buf, size_t len)
{
    size_t pos = 0;
    s->min[i] = s->max[i] = per[0].mpps;
    for (unsigned t = 0; t < n; t++) {
        s->min[i] = per[t].mpps < s->min[i] ? per[t].mpps : s->min[i];
        s->max[i] = per[t].mpps > s->max[i] ? per[t].mpps : s->max[i];
        const int w = snprintf(buf + pos, len - pos, "%s%.3f", t ? "/" : "", per[t].mpps);
        if (w < 0 || (size_t)w >= len - pos)
            break;
        pos += (size_t)w;
    }
}

/* "%.3f" of v into buf, or "" when the value does not apply. */
static const char *cell(char *buf, size_t len, bool has, double v)
{
    if (has)
        snprintf(buf, len, "%.3f", v);
    else
        buf[0] = 0;
    return buf;
}

/* Prints one row: a round's (i, with the per-thread rates) or the median's. */
static void row(const struct rpc_threads_opts *o, const struct bench_table *t, unsigned n,
                const char *round, bool rpc, double total, double mn, double mx, double eff,
                double ratio, double eff_ratio, const char *rates)
{
    const char *srv = o->rpc->server, *sep = strstr(srv, "://");
    char e[32], ra[32], er[32];
    bench_table_row(t, "rpc_perf,%s,%.*s,%u,%u,%u,%s,%s,%.3f,%.3f,%.3f,%.3f,%s,%s,%s,%s",
                    o->mode, sep ? (int)(sep - srv) : 0, srv, o->rpc->size, o->rpc->sessions, n,
                    round, rpc ? "erma" : "raw", total, total / n, mn, mx,
                    cell(e, sizeof e, o->scale, eff), cell(ra, sizeof ra, rpc, ratio),
                    cell(er, sizeof er, rpc && o->scale, eff_ratio), rates);
}

/* Round i at n threads (count k), both variants; s[k][0] raw, s[k][1] erma. */
static bool run_count(const struct rpc_threads_opts *o, const struct bench_table *t,
                      struct series (*s)[2], unsigned k, unsigned n, unsigned i)
{
    for (unsigned v = 0; v < 2; v++) {
        struct bench_raw_rate per[BENCH_MAX_THREADS], total;
        if (!measure(o, v == 1, n, i, per, &total))
            return false;
        struct series *x = &s[k][v];
        char rates[BENCH_MAX_THREADS * 8], round[16];
        per_thread(per, n, x, i, rates, sizeof rates);
        x->total[i] = total.mpps;
        x->eff[i] = total.mpps / (n * s[0][v].total[i]); /* count 0 is 1 thread with --scale */
        if (v == 1) {
            x->ratio[i] = total.mpps / s[k][0].total[i];
            x->eff_ratio[i] = x->eff[i] / s[k][0].eff[i];
        }
        snprintf(round, sizeof round, "%u", i);
        row(o, t, n, round, v == 1, x->total[i], x->min[i], x->max[i], x->eff[i], x->ratio[i],
            x->eff_ratio[i], rates);
    }
    return true;
}

int rpc_threads_run(const struct rpc_threads_opts *o, const struct bench_table *t)
{
    static struct series s[MAX_COUNTS][2]; /* [count][raw, erma] */
    unsigned counts[MAX_COUNTS];
    const unsigned nc = thread_counts(o, counts);
    for (unsigned i = 0; i < o->rounds; i++)
        for (unsigned k = 0; k < nc; k++)
            if (!run_count(o, t, s, k, counts[k], i))
                return 1;
    for (unsigned k = 0; k < nc; k++) {
        for (unsigned v = 0; v < 2; v++) {
            struct series *x = &s[k][v];
            row(o, t, counts[k], "median", v == 1, bench_median(x->total, o->rounds),
                bench_median(x->min, o->rounds), bench_median(x->max, o->rounds),
                bench_median(x->eff, o->rounds), bench_median(x->ratio, o->rounds),
                bench_median(x->eff_ratio, o->rounds), "");
        }
    }
    return 0;
}
