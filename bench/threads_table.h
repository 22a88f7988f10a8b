/* The scaling table of a threaded benchmark (threads_table.c): rpc_perf's
 * erma beside raw, rma_perf's one-sided ops beside the RPC. */
#ifndef ERMA_BENCH_THREADS_TABLE_H
#define ERMA_BENCH_THREADS_TABLE_H

#include <stddef.h>

#include "bench.h"

/* Two variants at a thread count, a baseline (0) and the one measured
 * against it (1). In each round, for each thread count n (threads; with
 * scale 1, 2, 4, ... and threads), measure() runs each variant once at n
 * threads (in turn, 0 first, or with alternate 1 first in odd rounds).
 * Efficiency at n is the total rate / (n x the one-thread rate of the same
 * round and variant); ratio is variant 1's rate / variant 0's, eff_ratio
 * their efficiencies'. The median rows take the medians of the values and
 * of the per-round ratios. */
struct threads_table {
    const char *prog;       /* the rows' first cell, and messages' */
    const char *lead;       /* the cells between prog and threads, e.g. "rate,udp,32,8" */
    const char *what;       /* messages: "rate, 32 B request" */
    const char *wrong;      /* messages: what ERMA_EBADPKT from measure means */
    const char *variant[2]; /* names: "raw", "erma" */
    const char *peer[2];    /* messages: the servers each variant uses */
    unsigned threads, rounds; /* threads 1..BENCH_MAX_THREADS, rounds 1..50 */
    bool scale, alternate;
    /* Measures variant v at n threads once into per[0..n) and total; an
     * erma status, ERMA_EBADPKT for wrong data (never tried again). */
    int (*measure)(void *ctx, unsigned v, unsigned n, struct bench_raw_rate *per,
                   struct bench_raw_rate *total);
    void *ctx;
};

/* The header: lead's columns (bench first), then the table's, the rate's
 * column named unit ("mrps"). */
void threads_table_header(char *buf, size_t len, const char *lead, const char *unit);

/* Runs the rounds, each measurement tried 3 times at most, and prints
 * their rows and the median rows; returns 0, or 1 after a measurement
 * failed (said on stderr). */
int threads_table_run(const struct threads_table *tt, const struct bench_table *t);

#endif
