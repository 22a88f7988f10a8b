/* rpc_perf --threads: the rate from endpoint threads, erma beside raw
 * (rpc_threads.c). */
#ifndef ERMA_BENCH_RPC_THREADS_H
#define ERMA_BENCH_RPC_THREADS_H

#include <stddef.h>

#include "bench.h"

struct rpc_threads_opts {
    const struct bench_rpc_opts *rpc; /* size, window, seconds...; uri and server are bases */
    const char *mode, *raw_server;    /* raw_server: the raw servers' base URI */
    unsigned threads, rounds;
    bool scale;  /* 1, 2, 4, ... threads up to `threads` in each round */
    bool remote; /* the servers run elsewhere (--role client) */
    const int *client_cpus, *server_cpus; /* thread t's CPU; NULL: unpinned */
};

/* The table's header into buf. */
void rpc_threads_header(char *buf, size_t len);

/* Runs o->rounds rounds at o->rpc->size and prints their rows and the
 * median rows; returns 0, or 1 after a measurement failed (said on stderr). */
int rpc_threads_run(const struct rpc_threads_opts *o, const struct bench_table *t);

#endif
