/*
 * bench/bench.h - helpers shared by erma's benchmark programs: the command
 * line and output conventions, percentiles, process pinning, and the
 * raw-transport baseline that every benchmark measures beside itself in the
 * same run.
 */
#ifndef ERMA_BENCH_H
#define ERMA_BENCH_H

#include <getopt.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- command line (perftest / ucx_perftest conventions) ----
 * Every program takes --help (-h: usage on stdout, exit 0; a bad option or
 * value prints why and the usage on stderr, exit 2), --csv (CSV for scripts
 * instead of the aligned table), --cpu LIST (this process on the first CPU,
 * the processes it starts on the others in turn; default: no pinning) and
 * --sizes LIST (message sizes to sweep, e.g. 32,1K,4K,64K; --size B is a
 * list of one). Programs put BENCH_COMMON_OPTIONS first in their option
 * array and read their own options from bench_cli_next(). */
#define BENCH_MAX_SIZES 64
#define BENCH_MAX_CPUS 64
#define BENCH_MAX_COLS 32
enum { BENCH_OPT_HELP = 0x1000, BENCH_OPT_CSV, BENCH_OPT_CPU, BENCH_OPT_SIZES };
#define BENCH_COMMON_OPTIONS                                                              \
    {"help", 0, 0, BENCH_OPT_HELP}, {"csv", 0, 0, BENCH_OPT_CSV},                         \
        {"cpu", 1, 0, BENCH_OPT_CPU}, {"sizes", 1, 0, BENCH_OPT_SIZES},                   \
        {"size", 1, 0, BENCH_OPT_SIZES}

struct bench_cli {
    const char *prog, *usage;
    const struct option *opts;
    int idx; /* the long option being parsed */
    bool csv;
    unsigned ncpus, nsizes; /* nsizes 0: the program's default size */
    int cpus[BENCH_MAX_CPUS];
    uint32_t sizes[BENCH_MAX_SIZES];
};

void bench_cli_init(struct bench_cli *c, const char *prog, const char *usage,
                    const struct option *opts);
/* getopt_long over opts; handles the common options itself and returns the
 * program's next option, or -1 at the end (exit 2 on a stray argument). */
int bench_cli_next(struct bench_cli *c, int argc, char **argv);
/* Prints "PROG: why" (fmt may be NULL) and the usage on stderr; exits 2. */
void bench_cli_fail(const struct bench_cli *c, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 2, 3)));
/* Option values; a malformed one fails with the option's name. */
uint64_t bench_cli_u64(const struct bench_cli *c, const char *arg);
double bench_cli_real(const struct bench_cli *c, const char *arg);
uint32_t bench_cli_size(const struct bench_cli *c, const char *arg); /* 4096, 4K, 8M */
unsigned bench_cli_sizes(const struct bench_cli *c, const char *arg, uint32_t *out,
                         unsigned max);
/* The CPU of process `who` (0: this one, 1..: those it starts, cycling over
 * the list's later entries); -1: not pinned. */
int bench_cli_cpu(const struct bench_cli *c, unsigned who);

/* ---- output: an aligned table, or CSV with --csv ----
 * header and rows are CSV lines; a column named "bench" (the program) is
 * left out of the table, a "name:W" header entry makes its column at least
 * W wide, empty cells show as "-". Each row is flushed. */
struct bench_table {
    bool csv;
    unsigned ncols;
    unsigned width[BENCH_MAX_COLS];
    bool hidden[BENCH_MAX_COLS];
};
void bench_table_start(struct bench_table *t, bool csv, const char *header);
void bench_table_row(const struct bench_table *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void bench_table_print(const struct bench_table *t, const char *line);
/* Default iterations of a ping-pong: base up to 4 KB, fewer above
 * (base x 4 KB / size, at least 1000), so a sweep's large sizes end. */
uint64_t bench_iters_for(uint64_t base, uint32_t size);

/* "# ..." on stdout beside a table, on stderr beside CSV. */
void bench_note(bool csv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

struct bench_lat {
    uint64_t samples;
    double median_us, p99_us, p999_us;
};

/* Sorts v[0..n) and fills out with its median, p99 and p99.9 in us. */
void bench_lat_from_ns(uint64_t *v, size_t n, struct bench_lat *out);

/* Sorts v[0..n) (n >= 1) and returns its median. */
double bench_median(double *v, unsigned n);

/* Pins the calling thread to cpu (nothing when cpu < 0; a warning when
 * not possible). */
void bench_pin(int cpu);
/* Pins the calling thread to cpu, or with cpu < 0 lets it run on the CPUs
 * the process was started with (a child forked by a pinned process would
 * stay on its CPU). */
void bench_pin_or_free(int cpu);

/* Raw baseline: an echo server and clients over any transport URI. Packets
 * carry a 16-byte erma header and `size` bytes of data, the same bytes a
 * `size`-byte RPC request puts on the wire. */
struct bench_raw_rate {
    uint64_t echoes, lost;
    uint64_t wrong; /* RPC rate: answers that did not carry their request's tag */
    double seconds, mpps;
};

/* Runs side(ctx, true, ...) in a forked child pinned to peer_cpu and
 * side(ctx, false, ...) here, then adds the child's counts to *out; the
 * rate is over `seconds`. For the symmetric benchmarks. */
int bench_both_sides(int (*side)(void *ctx, bool peer, struct bench_raw_rate *out), void *ctx,
                     double seconds, int peer_cpu, struct bench_raw_rate *out);

/* Echoes every packet to its sender until a stop packet or max_ns passes,
 * busy-polling; with sleeps, it sleeps in the transport whenever a receive
 * finds nothing (an erma endpoint with no idle spin). */
int bench_raw_server(const char *uri, uint64_t max_ns, bool sleeps);
/* Starts bench_raw_server(uri) in a child process pinned to cpu. */
pid_t bench_raw_server_fork(const char *uri, int cpu, uint64_t max_ns, bool sleeps);
/* Tells the server at peer to exit and reaps child (if > 0). */
void bench_raw_server_stop(const char *uri, const char *peer, pid_t child);

/* size-byte requests answered by resp_size bytes, one at a time. When both
 * fit one packet and are equal, the server echoes the packet; otherwise
 * the request goes in packets with at most 32 unacknowledged (each but the
 * last answered by a bare header, as erma's credit returns), and the
 * server sends the response's first 32 packets at once and each later one
 * when the client asks (as erma's request-for-response packets). Both up
 * to ERMA_MAX_MSG_SIZE. */
int bench_raw_pingpong(const char *uri, const char *peer, uint32_t size, uint32_t resp_size,
                       uint64_t iters, struct bench_lat *out);
/* bench_raw_pingpong with gap_ns of polling before each request: a lone
 * round trip after an idle spell, as a lightly loaded service sees it. */
int bench_raw_pingpong_gap(const char *uri, const char *peer, uint32_t size, uint32_t resp_size,
                           uint64_t iters, uint64_t gap_ns, struct bench_lat *out);
/* Keeps `window` packets in flight, sent in batches of `batch`, for seconds. */
int bench_raw_rate(const char *uri, const char *peer, uint32_t size, uint32_t window,
                   uint32_t batch, double seconds, struct bench_raw_rate *out);
/* bench_raw_rate, waiting at start (bench_gate_wait) once the transport
 * is open, so that threads measure together; every call reaches it. */
struct bench_gate;
int bench_raw_rate_at(const char *uri, const char *peer, uint32_t size, uint32_t window,
                      uint32_t batch, double seconds, struct bench_gate *start,
                      struct bench_raw_rate *out);

/* Symmetric rate: this process and a forked peer each keep `window` packets
 * in flight to the other and echo the other's, for seconds; out counts
 * both sides' echoes. uri is this side's address, peer the forked side's. */
int bench_raw_rate_sym(const char *uri, const char *peer, uint32_t size, uint32_t window,
                       uint32_t batch, double seconds, int peer_cpu, struct bench_raw_rate *out);

/* Streams full packets (each acknowledged by a bare header, like a credit
 * return) with `window` in flight; *gbps counts data bytes only. */
int bench_raw_stream(const char *uri, const char *peer, uint32_t window, double seconds,
                     double *gbps);

/* RPC measurements, client side; the server runs bench_rpc_server(). */
struct erma_rpc_cfg;
struct erma_endpoint_cfg;
struct erma_endpoint;
struct erma_rpc;
struct bench_rpc_opts {
    const char *uri;    /* client endpoint URI */
    const char *server; /* server endpoint URI */
    uint32_t size, resp_size;
    uint32_t window, batch, sessions;
    uint64_t iters;
    double seconds;
    const struct erma_rpc_cfg *cfg;         /* client RPC configuration, may be NULL */
    const struct erma_endpoint_cfg *ep_cfg; /* client endpoint configuration, may be NULL */
    bool symmetric; /* rate: both processes send and serve (the peer is forked) */
    int peer_cpu;   /* symmetric: the forked peer's CPU, -1 none */
    /* Endpoint thread_id of uri calls endpoint thread_id of server
     * (erma/endpoint.h, Addresses); 0 by default. */
    uint8_t thread_id;
    /* rate: issue this many requests, then wait (up to o->seconds) for
     * their answers; 0: keep the window full for o->seconds. */
    uint64_t max_calls;
    /* rate: wait here once the sessions are up (threads measure together);
     * every call reaches it, also one that failed to connect. Not with
     * symmetric. */
    struct bench_gate *start;
};

/* Authenticated, encrypted sessions (erma_nexus_cfg.psk) for the RPC
 * servers and clients created from now on (NULL: plaintext). */
void bench_rpc_set_psk(const uint8_t *psk);
/* The echo servers started from now on run their handler on n worker
 * threads (erma_nexus_cfg.workers, ERMA_WORKER); 0: in the loop. */
void bench_rpc_set_workers(unsigned n);

/* A nexus (with that psk) whose BENCH_ECHO handler is the echo below. */
struct erma_nexus;
int bench_rpc_echo_nexus(struct erma_nexus **out);

/* Serves echo requests of type BENCH_ECHO (response size in the request's
 * first 4 bytes; when the request has 12 bytes and the response 8, the
 * response starts with the request's bytes 4..12, a tag the rate checks). cfg and ep_cfg (the RPC's and the endpoint's
 * configuration) may be NULL. */
#define BENCH_ECHO 1
int bench_rpc_server(const char *uri, const struct erma_rpc_cfg *cfg,
                     const struct erma_endpoint_cfg *ep_cfg, uint64_t max_ns);
pid_t bench_rpc_server_fork(const char *uri, const struct erma_rpc_cfg *cfg,
                            const struct erma_endpoint_cfg *ep_cfg, int cpu, uint64_t max_ns);

/* More for a bench server to serve: before() registers handlers on the
 * nexus, after() puts more on the endpoint (an RMA engine, say), fini()
 * releases both before the endpoint goes; each gets ctx. */
struct erma_nexus;
struct erma_endpoint;
struct bench_server_ext {
    int (*before)(struct erma_nexus *nx, void *ctx);
    int (*after)(struct erma_endpoint *ep, void *ctx);
    void (*fini)(void *ctx);
    void *ctx;
};
int bench_rpc_server_ext(const char *uri, const struct erma_rpc_cfg *cfg,
                         const struct erma_endpoint_cfg *ep_cfg, uint64_t max_ns,
                         const struct bench_server_ext *ext);
pid_t bench_rpc_server_fork_ext(const char *uri, const struct erma_rpc_cfg *cfg,
                                const struct erma_endpoint_cfg *ep_cfg, int cpu, uint64_t max_ns,
                                const struct bench_server_ext *ext);
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

/* ---- threads (threads_lib.c): eRPC's model, an endpoint per thread ----
 * Thread t of a process runs endpoint t of the base URI (its port plus t,
 * erma/endpoint.h) with its own erma_rpc and sessions; the threads of a
 * process share one nexus. cpus (NULL: none pinned) gives thread t's CPU
 * in cpus[t], -1 for none. At most BENCH_MAX_THREADS threads. */
#define BENCH_MAX_THREADS 32

/* The thread count of option `name` in arg: 1..BENCH_MAX_THREADS, else
 * fails (bench_cli_fail) naming the option. */
unsigned bench_cli_threads(const struct bench_cli *c, const char *name, const char *arg);

/* --cpu with --threads n: thread t's CPU on this side in cpus[0][t] and
 * its server's in cpus[1][t], from one CPU F (F+t and F+n+t) or a list of
 * 2n (this side's, then the servers'). Returns false (cpus untouched)
 * without --cpu; fails (bench_cli_fail) with another count of CPUs. */
bool bench_cli_thread_cpus(const struct bench_cli *c, unsigned n, int cpus[2][BENCH_MAX_THREADS]);

/* Threads that start together: bench_gate_wait() returns once `parties`
 * calls have arrived (NULL: at once); bench_gate_parties() lowers the
 * count when fewer threads started than planned. One use. */
struct bench_gate {
    pthread_mutex_t lock;
    pthread_cond_t all_in;
    unsigned parties, arrived;
};
void bench_gate_init(struct bench_gate *g, unsigned parties);
void bench_gate_parties(struct bench_gate *g, unsigned parties);
void bench_gate_wait(struct bench_gate *g);
void bench_gate_destroy(struct bench_gate *g);

/* Runs side(ctx, t, start, &per[t]) on threads t = 0..n-1, each pinned to
 * cpus[t]; side calls bench_gate_wait(start) once, when it is ready to
 * measure (or has failed). total gets the sums of the counts and of the
 * rates. Returns ERMA_OK or the first thread's error (ERMA_EINVAL for n 0
 * or above the limit, ERMA_ESYS when a thread cannot start). */
int bench_run_threads(int (*side)(void *ctx, unsigned t, struct bench_gate *start,
                                  struct bench_raw_rate *out),
                      void *ctx, unsigned n, const int *cpus, struct bench_raw_rate *per,
                      struct bench_raw_rate *total);

/* bench_rpc_rate from n threads: thread t's client endpoint t of o->uri
 * calls endpoint t of o->server (not symmetric). per[t] and total as
 * bench_run_threads. */
int bench_rpc_rate_threads(const struct bench_rpc_opts *o, unsigned n, const int *cpus,
                           struct bench_raw_rate *per, struct bench_raw_rate *total);
/* bench_raw_rate from n threads, thread t to the raw server thread t (port
 * of peer plus t) from its own port (uri's plus t; port 0: any). */
int bench_raw_rate_threads(const char *uri, const char *peer, uint32_t size, uint32_t window,
                           uint32_t batch, double seconds, unsigned n, const int *cpus,
                           struct bench_raw_rate *per, struct bench_raw_rate *total);

/* n echo server threads (bench_rpc_server's) on endpoints 0..n-1 of uri,
 * in this process, sharing a nexus: start returns once every endpoint is
 * open (ERMA_OK), or the first error with nothing left running; stop ends
 * the threads and frees s (NULL is ignored). */
struct bench_rpc_servers;
int bench_rpc_servers_start(const char *uri, unsigned n, const int *cpus,
                            const struct erma_rpc_cfg *cfg, const struct erma_endpoint_cfg *ep_cfg,
                            struct bench_rpc_servers **out);
void bench_rpc_servers_stop(struct bench_rpc_servers *s);
/* bench_rpc_servers in a forked child that ends after max_ns or with this
 * process; stop it with bench_rpc_server_stop(). */
pid_t bench_rpc_servers_fork(const char *uri, unsigned n, const int *cpus,
                             const struct erma_rpc_cfg *cfg,
                             const struct erma_endpoint_cfg *ep_cfg, uint64_t max_ns);
/* More for each server thread t to serve, on that thread: open(ctx, t,
 * ep, rpc) once its endpoint and erma_rpc are up, before it serves (an
 * RMA engine, a key service; an error fails the start), and close(ctx, t)
 * when it stops, before they go (also after a failed open). */
struct bench_thread_ext {
    int (*open)(void *ctx, unsigned t, struct erma_endpoint *ep, struct erma_rpc *rpc);
    void (*close)(void *ctx, unsigned t);
    void *ctx;
};
int bench_rpc_servers_start_ext(const char *uri, unsigned n, const int *cpus,
                                const struct erma_rpc_cfg *cfg,
                                const struct erma_endpoint_cfg *ep_cfg,
                                const struct bench_thread_ext *ext,
                                struct bench_rpc_servers **out);
pid_t bench_rpc_servers_fork_ext(const char *uri, unsigned n, const int *cpus,
                                 const struct erma_rpc_cfg *cfg,
                                 const struct erma_endpoint_cfg *ep_cfg,
                                 const struct bench_thread_ext *ext, uint64_t max_ns);
/* n bench_raw_server threads (ports of uri plus 0..n-1) in a forked child;
 * bench_raw_servers_stop() tells each of peer's n from uri to stop and
 * reaps the child. */
pid_t bench_raw_servers_fork(const char *uri, unsigned n, const int *cpus, uint64_t max_ns);
void bench_raw_servers_stop(const char *uri, const char *peer, unsigned n, pid_t child);

/* A dispatch handler that answers every request with 32 bytes (a sink
 * for bulk requests: incast, multipath_sim). */
struct erma_req;
void bench_respond_32(struct erma_req *req, void *ctx);

/* A port on sim host 0 from which `paths` consecutive ports take `paths`
 * different core paths to host 1's ports server_port.. and back (virtual
 * paths, each on its own route); 0 if none in 40000..59999. */
struct erma_sim;
uint16_t bench_sim_spread_port(const struct erma_sim *sim, unsigned paths, uint16_t server_port);

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

/* Point GETs beside SCANs on the kv service (kv/kv.h). The server (a
 * nexus with one worker thread, SCAN on the worker) runs in another
 * process; the client loads `keys` keys of value_size bytes, then runs
 * `rounds` rounds of round_seconds, alternately quiet (closed-loop GETs,
 * one at a time) and scanning (the same GETs, with a SCAN of scan_count
 * keys always in flight on a second session, of scan_credits credits, 0:
 * the endpoint's). Every value is checked; each round ends by waiting for
 * (and checking) its last GET and SCAN, so every round checks at least one
 * GET and every scanning round at least one SCAN. */
struct bench_kv_scan_opts {
    const char *uri, *server;
    uint32_t keys, value_size, scan_count, rounds, scan_credits;
    uint32_t get_window; /* GETs in flight, 0 or 1..512 on sessions of 8 (0: 1) */
    double round_seconds;
    bool busy_poll; /* the client endpoint's cfg.busy_poll */
};
struct bench_kv_scan_result {
    struct bench_lat quiet, scanning; /* GET latency, all rounds of each kind */
    uint64_t scans, gets, wrong, failed; /* checked SCANs and GETs, wrong and failed ones */
    /* The median over pairs of rounds (quiet, then scanning) of the ratio
     * scanning / quiet of each round's GET p50 and p99. */
    double p50_ratio, p99_ratio;
    unsigned pairs;
};
int bench_kv_scan_server(const char *uri, uint64_t max_ns, bool busy_poll);
pid_t bench_kv_scan_server_fork(const char *uri, int cpu, uint64_t max_ns, bool busy_poll);
int bench_kv_scan(const struct bench_kv_scan_opts *o, struct bench_kv_scan_result *out);

#endif
