/*
 * rpc_perf - erma RPC performance beside the raw transport, in one run.
 *
 *   rpc_perf --mode lat|rate|bw|sessions [--uri CLIENT] [--server SERVER]
 *            [--raw-server RAW_SERVER] [--size B] [--resp-size B] [--iters N]
 *            [--window W] [--batch B] [--sessions N] [--credits C]
 *            [--seconds S] [--rounds R] [--factors] [--symmetric]
 *            [--spawn PREFIX --listen-server URI --listen-raw URI]
 *   rpc_perf --role rpc-server|raw-server --server URI   (a server alone)
 *
 * lat: one 32 B request at a time. rate: `window` requests in flight in
 * batches of `batch` to random sessions of `sessions`. bw: one --size
 * request at a time with a small response. sessions: rate's load spread over
 * --sessions sessions (use a small --credits so they fit the RX ring).
 *
 * Each round measures the raw baseline and then erma over the same transport,
 * each against a server process it forks (pinned to CPU 1, client on CPU 0);
 * rounds alternate so that both see the same machine. CSV: one line per round
 * and a median line: the medians of the values and the median of the
 * per-round ratios erma / raw (for latency, lower is better; for rate and
 * bandwidth, higher is better).
 *
 * Servers are forked by default. With --spawn, each is started as this
 * program with --role, behind the blank-separated command PREFIX, e.g.
 * "ip netns exec NS taskset -c 1" for a transport that cannot loop back
 * (dpdk between namespaces); the servers then listen on --listen-server and
 * --listen-raw (default: --server and --raw-server) while the client sends
 * to --server and --raw-server. bench/rpc_perf_dpdk.sh does this.
 *
 * --symmetric (rate mode): as eRPC's benchmark, every endpoint is client and
 * server at once: this process and a forked peer (at --server, or
 * --raw-server for the raw rounds) each keep the window in flight to the
 * other and answer the other's requests; the rate counts both directions.
 *
 * --factors (rate mode): also measures erma with congestion control off and
 * with each common-case bypass off (Timely bypass, wheel bypass, batch
 * clock), in the same alternating rounds; the ratio column of those lines
 * is against erma with everything on, so 1 - ratio(cc_off) is the CC cost.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "erma/errors.h"
#include "erma/rpc.h"

struct opts {
    const char *mode, *raw_server;
    struct bench_rpc_opts rpc;
    struct erma_rpc_cfg cfg;
    unsigned rounds;
    bool factors;
    const char *spawn, *listen_server, *listen_raw;
};

/* Starts "PREFIX... /proc/self/exe --role ROLE --server URI" as a child. */
static pid_t spawn_server(const struct opts *o, const char *role, const char *uri)
{
    char prefix[512], self[512];
    snprintf(prefix, sizeof prefix, "%s", o->spawn);
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return -1;
    self[n] = 0;
    char *argv[40];
    int argc = 0;
    for (char *t = strtok(prefix, " "); t && argc < 32; t = strtok(NULL, " "))
        argv[argc++] = t;
    char *tail[] = {self, "--role", (char *)role, "--server", (char *)uri, NULL};
    memcpy(argv + argc, tail, sizeof tail);
    const pid_t pid = fork();
    if (pid == 0) {
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* The variants measured in each round, raw first. */
static const struct {
    const char *name;
    struct erma_cc_switches cc;
} variants[] = {
    {"raw", {0}},
    {"erma", {0}},
    {"cc_off", {.off = true}},
    {"no_timely_bypass", {.no_timely_bypass = true}},
    {"no_wheel_bypass", {.no_wheel_bypass = true}},
    {"no_batch_clock", {.no_batch_clock = true}},
};

/* Measures erma (rpc = true) or raw once; returns the metric or < 0. */
static double measure(const struct opts *o, bool rpc, struct bench_lat *lat)
{
    const struct bench_rpc_opts *r = &o->rpc;
    const uint64_t max_ns = (uint64_t)(r->seconds * 1e9) * 4 + 60000000000ull;
    pid_t child;
    if (r->symmetric)
        child = 0; /* the rate functions fork their own peer */
    else if (o->spawn)
        child = spawn_server(o, rpc ? "rpc-server" : "raw-server",
                             rpc ? o->listen_server : o->listen_raw);
    else
        child = rpc ? bench_rpc_server_fork(r->server, &o->cfg, 1, max_ns)
                    : bench_raw_server_fork(o->raw_server, 1, max_ns);
    struct bench_raw_rate rate = {0};
    double v = -1;
    int rc;
    if (strcmp(o->mode, "lat") == 0) {
        rc = rpc ? bench_rpc_lat(r, lat)
                 : bench_raw_pingpong(r->uri, o->raw_server, r->size, r->iters, lat);
        v = lat->median_us;
    } else if (strcmp(o->mode, "bw") == 0) {
        rc = rpc ? bench_rpc_bw(r, &v) : bench_raw_stream(r->uri, o->raw_server, 32, r->seconds, &v);
    } else {
        rc = rpc ? bench_rpc_rate(r, &rate)
             : r->symmetric ? bench_raw_rate_sym(r->uri, o->raw_server, r->size, r->window,
                                                 r->batch, r->seconds, &rate)
                            : bench_raw_rate(r->uri, o->raw_server, r->size, r->window, r->batch,
                                             r->seconds, &rate);
        v = rate.mpps;
    }
    if (rpc || o->spawn) /* a spawned raw server dies by signal too */
        bench_rpc_server_stop(child);
    else if (!r->symmetric)
        bench_raw_server_stop(r->uri, o->raw_server, child);
    if (rc != ERMA_OK) {
        fprintf(stderr, "rpc_perf: %s %s: %s\n", o->mode, rpc ? "erma" : "raw", erma_strerror(rc));
        return -1;
    }
    return v;
}

int main(int argc, char **argv)
{
    struct opts o = {.mode = "lat", .raw_server = "udp://127.0.0.1:31860", .rounds = 3};
    o.rpc = (struct bench_rpc_opts){.uri = "udp://127.0.0.1:31870",
                                    .server = "udp://127.0.0.1:31850", .size = 32,
                                    .resp_size = 32, .window = 60, .batch = 3, .sessions = 8,
                                    .iters = 50000, .seconds = 2, .cfg = &o.cfg};
    bool size_set = false, resp_set = false;
    static const struct option lo[] = {
        {"mode", 1, 0, 'm'},     {"uri", 1, 0, 'u'},     {"server", 1, 0, 's'},
        {"raw-server", 1, 0, 'R'}, {"size", 1, 0, 'z'},  {"resp-size", 1, 0, 'Z'},
        {"iters", 1, 0, 'i'},    {"window", 1, 0, 'w'},  {"batch", 1, 0, 'b'},
        {"sessions", 1, 0, 'n'}, {"credits", 1, 0, 'c'}, {"seconds", 1, 0, 't'},
        {"rounds", 1, 0, 'r'},   {"factors", 0, 0, 'f'},  {"role", 1, 0, 'o'},
        {"spawn", 1, 0, 'p'},    {"listen-server", 1, 0, 'L'}, {"listen-raw", 1, 0, 'W'},
        {"symmetric", 0, 0, 'y'},
        {0, 0, 0, 0}};
    const char *role = NULL;
    for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        switch (c) {
        case 'm': o.mode = optarg; break;
        case 'u': o.rpc.uri = optarg; break;
        case 's': o.rpc.server = optarg; break;
        case 'R': o.raw_server = optarg; break;
        case 'z': o.rpc.size = (uint32_t)atoi(optarg); size_set = true; break;
        case 'Z': o.rpc.resp_size = (uint32_t)atoi(optarg); resp_set = true; break;
        case 'i': o.rpc.iters = strtoull(optarg, NULL, 10); break;
        case 'w': o.rpc.window = (uint32_t)atoi(optarg); break;
        case 'b': o.rpc.batch = (uint32_t)atoi(optarg); break;
        case 'n': o.rpc.sessions = (uint32_t)atoi(optarg); break;
        case 'c': o.cfg.credits = (uint32_t)atoi(optarg); break;
        case 't': o.rpc.seconds = atof(optarg); break;
        case 'r': o.rounds = (unsigned)atoi(optarg); break;
        case 'f': o.factors = true; break;
        case 'o': role = optarg; break;
        case 'p': o.spawn = optarg; break;
        case 'y': o.rpc.symmetric = true; break;
        case 'L': o.listen_server = optarg; break;
        case 'W': o.listen_raw = optarg; break;
        default: fprintf(stderr, "usage: see the comment at the top of bench/rpc_perf.c\n"); return 2;
        }
    }
    if (role && strcmp(role, "raw-server") == 0)
        return bench_raw_server(o.rpc.server, 600000000000ull) == ERMA_OK ? 0 : 1;
    if (role && strcmp(role, "rpc-server") == 0)
        return bench_rpc_server(o.rpc.server, &o.cfg, 600000000000ull) == ERMA_OK ? 0 : 1;
    if (role) {
        fprintf(stderr, "rpc_perf: unknown role %s\n", role);
        return 2;
    }
    o.listen_server = o.listen_server ? o.listen_server : o.rpc.server;
    o.listen_raw = o.listen_raw ? o.listen_raw : o.raw_server;
    bench_pin(0);
    const bool lat = strcmp(o.mode, "lat") == 0, bw = strcmp(o.mode, "bw") == 0;
    if (!lat && !bw && strcmp(o.mode, "rate") && strcmp(o.mode, "sessions")) {
        fprintf(stderr, "rpc_perf: unknown mode %s\n", o.mode);
        return 2;
    }
    if (lat)
        o.rpc.sessions = 1;
    if (bw) {
        o.rpc.sessions = 1;
        if (!size_set)
            o.rpc.size = 8u << 20;
        if (!resp_set)
            o.rpc.resp_size = 32;
    }
    if (strcmp(o.mode, "sessions") == 0) /* the rate load spread over many sessions */
        o.cfg.rx_ring = o.rpc.sessions * (o.cfg.credits ? o.cfg.credits : 32) + 64;
    if (o.rounds == 0 || o.rounds > 50)
        return 2;
    const char *metric = lat ? "median_us" : bw ? "gbps" : "mrps";
    const int tlen = (int)(strstr(o.rpc.server, "://") ? strstr(o.rpc.server, "://") - o.rpc.server : 0);
    const unsigned nvar = o.factors ? sizeof variants / sizeof *variants : 2;
    double v[6][50], ratio[6][50];
    printf("bench,mode,transport,size,resp_size,sessions,round,metric,variant,value,baseline,"
           "ratio,p99_us,raw_p99_us\n");
    for (unsigned i = 0; i < o.rounds; i++) {
        struct bench_lat lr = {0};
        v[0][i] = measure(&o, false, &lr);
        if (v[0][i] < 0)
            return 1;
        for (unsigned k = 1; k < nvar; k++) {
            struct bench_lat le = {0};
            o.cfg.cc = variants[k].cc;
            v[k][i] = measure(&o, true, &le);
            if (v[k][i] < 0)
                return 1;
            const double base = k == 1 ? v[0][i] : v[1][i];
            ratio[k][i] = v[k][i] / base;
            printf("rpc_perf,%s,%.*s,%u,%u,%u,%u,%s,%s,%.3f,%.3f,%.3f,%.2f,%.2f\n", o.mode, tlen,
                   o.rpc.server, o.rpc.size, o.rpc.resp_size, o.rpc.sessions, i, metric,
                   variants[k].name, v[k][i], base, v[k][i] / base, le.p99_us, lr.p99_us);
            fflush(stdout);
        }
    }
    const double mr = bench_median(v[0], o.rounds), me = bench_median(v[1], o.rounds);
    for (unsigned k = 1; k < nvar; k++) {
        const double m = bench_median(v[k], o.rounds), base = k == 1 ? mr : me;
        printf("rpc_perf,%s,%.*s,%u,%u,%u,median,%s,%s,%.3f,%.3f,%.3f,,\n", o.mode, tlen,
               o.rpc.server, o.rpc.size, o.rpc.resp_size, o.rpc.sessions, metric,
               variants[k].name, m, base, bench_median(ratio[k], o.rounds));
    }
    return 0;
}
