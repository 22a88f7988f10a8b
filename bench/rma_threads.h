/* rma_perf --threads: the one-sided rate from endpoint threads beside the
 * RPC's (rma_threads.c). */
#ifndef ERMA_BENCH_RMA_THREADS_H
#define ERMA_BENCH_RMA_THREADS_H

#include "rma_side.h"

/* The table's header into buf. */
void rma_threads_header(char *buf, size_t len);

/* Runs o->rounds rounds at o->rpc.size (rate mode, o->threads threads),
 * the RPC r of the same size beside (rma_perf.c's rpc_like), and prints
 * their rows and the median rows; returns 0, or 1 after a measurement
 * failed (said on stderr). */
int rma_threads_run(const struct rma_opts *o, const struct rma_opts *r,
                    const struct bench_table *t);

#endif
