/*
 * bench/bench.h - helpers shared by erma's benchmark programs: percentiles,
 * CSV, process pinning, and the raw-transport baseline that every benchmark
 * measures beside itself in the same run.
 */
#ifndef ERMA_BENCH_H
#define ERMA_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct bench_lat {
    uint64_t samples;
    double median_us, p99_us, p999_us;
};

/* Sorts v[0..n) and fills out with its median, p99 and p99.9 in us. */
void bench_lat_from_ns(uint64_t *v, size_t n, struct bench_lat *out);

/* Sorts v[0..n) (n >= 1) and returns its median. */
double bench_median(double *v, unsigned n);

/* Pins the calling thread to cpu (ignored when cpu < 0 or not possible). */
void bench_pin(int cpu);

/* Raw baseline: an echo server and clients over any transport URI. Packets
 * carry a 16-byte erma header and `size` bytes of data, the same bytes a
 * `size`-byte RPC request puts on the wire. */
struct bench_raw_rate {
    uint64_t echoes, lost;
    double seconds, mpps;
};

/* Runs side(ctx, true, ...) in a forked child pinned to CPU 1 and
 * side(ctx, false, ...) here, then adds the child's counts to *out; the
 * rate is over `seconds`. For the symmetric benchmarks. */
int bench_both_sides(int (*side)(void *ctx, bool peer, struct bench_raw_rate *out), void *ctx,
                     double seconds, struct bench_raw_rate *out);

/* Echoes every packet to its sender until a stop packet or max_ns passes. */
int bench_raw_server(const char *uri, uint64_t max_ns);
/* Starts bench_raw_server(uri) in a child process pinned to cpu. */
pid_t bench_raw_server_fork(const char *uri, int cpu, uint64_t max_ns);
/* Tells the server at peer to exit and reaps child (if > 0). */
void bench_raw_server_stop(const char *uri, const char *peer, pid_t child);

int bench_raw_pingpong(const char *uri, const char *peer, uint32_t size, uint64_t iters,
                       struct bench_lat *out);
/* Keeps `window` packets in flight, sent in batches of `batch`, for seconds. */
int bench_raw_rate(const char *uri, const char *peer, uint32_t size, uint32_t window,
                   uint32_t batch, double seconds, struct bench_raw_rate *out);

/* Symmetric rate: this process and a forked peer each keep `window` packets
 * in flight to the other and echo the other's, for seconds; out counts
 * both sides' echoes. uri is this side's address, peer the forked side's. */
int bench_raw_rate_sym(const char *uri, const char *peer, uint32_t size, uint32_t window,
                       uint32_t batch, double seconds, struct bench_raw_rate *out);

/* Streams full packets (each acknowledged by a bare header, like a credit
 * return) with `window` in flight; *gbps counts data bytes only. */
int bench_raw_stream(const char *uri, const char *peer, uint32_t window, double seconds,
                     double *gbps);

/* RPC measurements, client side; the server runs bench_rpc_server(). */
struct erma_rpc_cfg;
struct bench_rpc_opts {
    const char *uri;    /* client nexus URI */
    const char *server; /* server nexus URI */
    uint32_t size, resp_size;
    uint32_t window, batch, sessions;
    uint64_t iters;
    double seconds;
    const struct erma_rpc_cfg *cfg; /* client endpoint configuration, may be NULL */
    bool symmetric; /* rate: both processes send and serve (the peer is forked) */
};

/* Serves echo requests (response size in the request's first 4 bytes). */
int bench_rpc_server(const char *uri, const struct erma_rpc_cfg *cfg, uint64_t max_ns);
pid_t bench_rpc_server_fork(const char *uri, const struct erma_rpc_cfg *cfg, int cpu,
                            uint64_t max_ns);

/* More for a bench server to serve: before() registers handlers on the
 * nexus, after() attaches to the endpoint (an RMA engine, say), fini()
 * releases both before the endpoint goes; each gets ctx. */
struct erma_nexus;
struct erma_rpc;
struct bench_server_ext {
    int (*before)(struct erma_nexus *nx, void *ctx);
    int (*after)(struct erma_rpc *rpc, void *ctx);
    void (*fini)(void *ctx);
    void *ctx;
};
int bench_rpc_server_ext(const char *uri, const struct erma_rpc_cfg *cfg, uint64_t max_ns,
                         const struct bench_server_ext *ext);
pid_t bench_rpc_server_fork_ext(const char *uri, const struct erma_rpc_cfg *cfg, int cpu,
                                uint64_t max_ns, const struct bench_server_ext *ext);
void bench_rpc_server_stop(pid_t child);

/* One outstanding request at a time; RTT percentiles. */
int bench_rpc_lat(const struct bench_rpc_opts *o, struct bench_lat *out);
/* window requests in flight over o->sessions sessions, issued in batches.
 * With o->symmetric, o->server is not a separate server: a forked peer
 * there runs the same load back, and out counts both sides. */
int bench_rpc_rate(const struct bench_rpc_opts *o, struct bench_raw_rate *out);
/* One outstanding o->size request, o->resp_size response: Gb/s of the
 * larger of the two (request for a PUT-like, response for a GET-like call). */
int bench_rpc_bw(const struct bench_rpc_opts *o, double *gbps);

/* Incast on the sim fabric, in virtual time: `clients` hosts each stream
 * `size`-byte requests (one at a time, 32 B responses) to one server host
 * through its switch egress port. Goodput counts request data delivered to
 * the server during the measured interval (after a warm-up). */
struct bench_incast_cfg {
    unsigned clients;
    uint32_t size;
    bool cc;               /* congestion control on */
    uint64_t link_bps;     /* every link */
    uint64_t buffer;       /* switch buffer per port, bytes */
    uint64_t warmup_ns, measure_ns; /* from the first client's start */
    uint64_t stagger_ns;            /* client c starts (c - 1) * stagger_ns late */
    double step_div, ai_span;       /* Timely: step = link / step_div (0: default), ai_span */
    uint64_t seed;
};

struct bench_incast_result {
    double goodput_gbps;   /* request data bytes per second at the server */
    double link_share;     /* goodput / link rate */
    double payload_share;  /* goodput / the most a link carries in full packets */
    double p50_rtt_us, p99_rtt_us;
    uint64_t drops, samples, retransmits;
    uint64_t max_queue_bytes;
    double min_client_share; /* the slowest client's share of goodput, x clients */
};

int bench_incast(const struct bench_incast_cfg *cfg, struct bench_incast_result *out);

/* Point GETs beside SCANs on the kv service (erma/kv.h). The server (a
 * nexus with one worker thread, SCAN on the worker) runs in another
 * process; the client loads `keys` keys of value_size bytes, then runs
 * `rounds` rounds of round_seconds, alternately quiet (closed-loop GETs,
 * one at a time) and scanning (the same GETs, with a SCAN of scan_count
 * keys always in flight on a second session, of scan_credits credits, 0:
 * the endpoint's). Every value is checked. */
struct bench_kv_scan_opts {
    const char *uri, *server;
    uint32_t keys, value_size, scan_count, rounds, scan_credits;
    double round_seconds;
};
struct bench_kv_scan_result {
    struct bench_lat quiet, scanning; /* GET latency */
    uint64_t scans, wrong, failed;
};
int bench_kv_scan_server(const char *uri, uint64_t max_ns);
pid_t bench_kv_scan_server_fork(const char *uri, int cpu, uint64_t max_ns);
int bench_kv_scan(const struct bench_kv_scan_opts *o, struct bench_kv_scan_result *out);

#endif
