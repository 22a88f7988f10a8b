/* rma_perf's one-sided side (rma_side.c): the target each server thread
 * serves, and the initiator's measurements. */
#ifndef ERMA_BENCH_RMA_SIDE_H
#define ERMA_BENCH_RMA_SIDE_H

#include "bench.h"
#include "erma/endpoint.h"
#include "erma/keys.h"
#include "erma/rma.h"
#include "erma/rpc.h"

#define RMA_REGION_NAME "rma_perf" /* the region's name in the key service */

/* rma_perf's options (rma_perf.c parses them). */
struct rma_opts {
    const char *mode, *role;
    enum erma_rma_op op;
    struct bench_rpc_opts rpc;
    struct erma_rpc_cfg cfg;
    struct erma_endpoint_cfg ep;
    unsigned rounds, round;
    unsigned threads; /* --threads; 0: one initiator, the one-endpoint benchmark */
    uint64_t ops;     /* rate: ops per initiator and measurement (0: for --seconds) */
    bool cc_off, iters_set, lat, bw, remote, secure, scale, uri_set, pinned;
    int cpus[2][BENCH_MAX_THREADS]; /* --threads --cpu: [initiators, targets][t] */
};

/* Server thread t's target: a read-write region of len bytes holding the
 * pattern, in an engine on thread t's endpoint, exported under
 * RMA_REGION_NAME by a key service on its erma_rpc. The open and close of
 * a bench_thread_ext whose ctx is a struct rma_targets. */
struct rma_target {
    uint8_t *mem;
    struct erma_rma *rma;
    struct erma_keys *keys;
};
struct rma_targets {
    size_t len;
    struct rma_target t[BENCH_MAX_THREADS];
};
int rma_target_open(void *ctx, unsigned t, struct erma_endpoint *ep, struct erma_rpc *rpc);
void rma_target_close(void *ctx, unsigned t);

/* The region's byte at offset i. */
static inline uint8_t rma_pattern(uint64_t i)
{
    return (uint8_t)(i * 7 + 3);
}

/* Initiator buffer and region bytes: the largest op or transfer, or a
 * window of ops. */
size_t rma_buf_len(const struct rma_opts *o);

/* An initiator: endpoint tid of o->rpc.uri, with its own nexus, erma_rpc
 * and engine, and the key of target tid's region (fetched from endpoint
 * tid of o->rpc.server through the key service, over a session of its
 * own, so bound to this endpoint's address). */
struct rma_initiator {
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    struct erma_rpc *rpc;
    struct erma_rma *rma;
    int peer;
    struct erma_rkey rkey;
    uint8_t *buf;
    struct erma_rma_completion done;
};
int rma_initiator_open(struct rma_initiator *c, const struct rma_opts *o, uint8_t tid);
void rma_initiator_close(struct rma_initiator *c);

/* The measurements, each an erma status (ERMA_EBADPKT: a READ brought
 * wrong data). rate counts ops into out (echoes: right ones, lost: failed,
 * wrong: wrong data); with o->ops it runs until that many completed right
 * (a failed op is replaced by another), else fails after o->rpc.seconds. */
int rma_lat(const struct rma_opts *o, struct rma_initiator *c, struct bench_lat *out);
int rma_rate(const struct rma_opts *o, struct rma_initiator *c, struct bench_raw_rate *out);
int rma_bw(const struct rma_opts *o, struct rma_initiator *c, double *gbps);

/* "lat one-sided read 32 B, round 1, U -> S" into buf, for messages. */
const char *rma_where(const struct rma_opts *o, const char *what, char *buf, size_t len);

#endif
