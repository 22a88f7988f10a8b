/*
 * rpc_perf - erma RPC performance beside the raw transport, in one run.
 *
 *   rpc_perf [--mode lat|rate|bw|sessions] [--sizes LIST] [--rounds R] [options]
 *   rpc_perf --role server [--server URI] [--raw-server URI]     (on one host)
 *   rpc_perf --role client --server URI --raw-server URI [...]   (on another)
 *
 * `rpc_perf --help` lists every option. lat: one request at a time (a
 * ping-pong of --size bytes each way unless --resp-size). rate: --window
 * requests in flight in batches of --batch to random sessions of
 * --sessions. bw: one --size request at a time (default 8 MiB) with a 32 B
 * response. sessions: rate's load over --sessions sessions.
 *
 * Each round measures the raw baseline (bench/raw's packets, bench.h) and
 * then erma over the same transport; rounds alternate so that both see the
 * same machine. By default (--role both) each measurement gets a freshly
 * forked server; with --role client the servers are the ones a
 * `rpc_perf --role server` runs on another host. Every endpoint busy-polls
 * (cfg.busy_poll, the measurement condition); --no-poll measures erma with
 * the default idle sleep (the raw baseline always polls). The output has
 * one line per size and round and a median line per size: the medians of
 * the values and the median of the per-round ratios erma / raw (latency:
 * lower is better; rate and bandwidth: higher is better).
 *
 * --spawn PREFIX starts each server as this program with --role
 * rpc-server|raw-server behind the blank-separated command PREFIX, e.g.
 * "ip netns exec NS taskset -c 1" for a transport that cannot loop back
 * (bench/rpc_perf_dpdk.sh); the servers then listen on --listen-server and
 * --listen-raw while the client sends to --server and --raw-server.
 *
 * --threads N (rate and sessions modes): eRPC's model, N endpoint threads
 * here, each with its own endpoint (port of --uri plus t), erma_rpc and
 * sessions, against N server threads (endpoints of --server plus t, one
 * nexus) in one forked process, the raw baseline likewise; the rows give
 * the total and per-thread rates. --scale: 1, 2, 4, ... and N threads in
 * each round, with each one's efficiency (total / (n x the one-thread rate
 * of the same round)) beside raw's (bench/rpc_threads.c).
 *
 * --symmetric (rate mode): as eRPC's benchmark, this process and a forked
 * peer each keep the window in flight to the other and answer the other's
 * requests; the rate counts both directions. --factors (rate mode): also
 * erma with congestion control off and with each common-case bypass off;
 * the ratio of those lines is against erma with everything on. --secure:
 * also erma with authenticated, encrypted sessions (erma_nexus_cfg.psk) in
 * the same rounds; the ratio of that line is against plaintext erma.
 * --workers N: erma's servers run the echo handler on N worker threads
 * (ERMA_WORKER, as eRPC's long handlers) rather than in the event loop;
 * the raw baseline is unchanged, so the ratio says what the hand-off to a
 * worker and back costs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "rpc_threads.h"
#include "erma/errors.h"
#include "erma/rpc.h"
#include "erma/sdk/wire.h"
#include "erma/transport.h"

static const char usage[] =
    "usage: rpc_perf [--mode lat|rate|bw|sessions] [options]\n"
    "  erma RPCs beside the raw transport, alternating rounds (see bench/rpc_perf.c)\n"
    "  --mode M          lat (default): one request at a time, RTT percentiles;\n"
    "                    rate: --window in flight, Mrps; bw: Gb/s of --size requests;\n"
    "                    sessions: rate's load over --sessions sessions\n"
    "  --sizes LIST      request sizes to sweep, e.g. 32,1K,4K,64K (--size B: one);\n"
    "                    default 32 B (bw: 8M); rate and sessions: at most 1456 B\n"
    "  --resp-size B     response size (default: the request's; bw: 32)\n"
    "  --iters N         lat: requests per measurement (default 50000, above 4 KB\n"
    "                    50000 x 4K / size, at least 1000)\n"
    "  --seconds S       rate and bw: seconds per measurement (default 2)\n"
    "  --rounds R        alternating rounds, 1..50 (default 3)\n"
    "  --window W --batch B --sessions N --credits C\n"
    "                    rate: in flight (60), batch (3), sessions (8), credits (32);\n"
    "                    --role server: room for N sessions of C credits\n"
    "  --factors         rate: also CC off and each bypass off\n"
    "  --secure          also erma with authenticated, encrypted sessions\n"
    "  --symmetric       rate: both processes send and serve\n"
    "  --threads N       rate, sessions: N client threads here (endpoint t of --uri\n"
    "                    each, its own sessions) against N server threads (endpoint t\n"
    "                    of --server and of --raw-server: their ports plus t, so the\n"
    "                    two servers' ports must be N apart), 1..32; --role server:\n"
    "                    serve N threads of each\n"
    "  --scale           with --threads N: 1, 2, 4, ... and N threads in each round,\n"
    "                    and each one's efficiency, total / (n x 1-thread rate)\n"
    "  --no-poll         erma endpoints sleep when idle (default: busy-poll)\n"
    "  --paths K         erma endpoints with K virtual paths (ports; default 1)\n"
    "  --mtu M           erma endpoints' Ethernet MTU, 576..9000 (default 1500;\n"
    "                    the raw baseline keeps 1500)\n"
    "  --cc-off          erma clients without congestion control\n"
    "  --workers N       erma servers answer on N worker threads, not in the loop\n"
    "  --go-back-n       erma clients and servers with eRPC's go-back-N recovery\n"
    "  --cpu LIST        CPUs: this process, then its servers (default: no pinning;\n"
    "                    docs/PERFORMANCE.md uses --cpu 0,1); with --threads N, F\n"
    "                    (client thread t on CPU F+t, server thread t on F+N+t) or\n"
    "                    2N CPUs, the client threads' then the server threads'\n"
    "                    (--role server: the erma servers' then the raw servers')\n"
    "  --csv             CSV instead of the table\n"
    "  --role R          both (default: fork the servers here), server (serve\n"
    "                    --server and --raw-server until killed), client (use\n"
    "                    servers another host runs)\n"
    "  --uri URI         this client's URI (default udp://127.0.0.1:31870; with\n"
    "                    --threads udp://127.0.0.1:0, any free port per thread)\n"
    "  --server URI      erma server (default udp://127.0.0.1:31850)\n"
    "  --raw-server URI  raw server (default udp://127.0.0.1:31860)\n"
    "  --spawn PREFIX --listen-server URI --listen-raw URI\n"
    "                    start servers behind a command prefix (rpc_perf_dpdk.sh)\n"
    "  -h, --help        this text\n";

#define ONE_PACKET 1456 /* data bytes in a 1472-byte packet, every transport */
#define ATTEMPTS 3

struct opts {
    const char *mode, *raw_server, *role;
    struct bench_rpc_opts rpc;
    struct erma_rpc_cfg cfg;
    struct erma_endpoint_cfg ep;
    unsigned rounds;
    bool factors, secure, resp_set, iters_set, lat, bw, remote, uri_set, scale;
    const char *spawn, *listen_server, *listen_raw;
    int server_cpu;
    unsigned threads; /* --threads; 0: the one-endpoint benchmark */
    int cpus[2][BENCH_MAX_THREADS]; /* --threads: [client or erma server, server or raw][t] */
    bool pinned;
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
    char *argv[48];
    int argc = 0;
    for (char *t = strtok(prefix, " "); t && argc < 32; t = strtok(NULL, " "))
        argv[argc++] = t;
    char sessions[16], credits[16], paths[16], mtu[16];
    snprintf(sessions, sizeof sessions, "%u", o->rpc.sessions);
    snprintf(credits, sizeof credits, "%u", o->cfg.credits);
    snprintf(paths, sizeof paths, "%u", o->ep.paths ? o->ep.paths : 1);
    snprintf(mtu, sizeof mtu, "%u", o->ep.mtu ? o->ep.mtu : ERMA_DEFAULT_MTU);
    char *tail[] = {self,     "--role",    (char *)role, "--server",
                    (char *)uri, "--sessions", sessions, "--credits",
                    credits,  "--paths",   paths,        "--mtu",      mtu,
                    o->ep.busy_poll ? NULL : "--no-poll",
                    NULL};
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
#define NVAR (sizeof variants / sizeof *variants)

static const uint8_t bench_key[ERMA_PSK_BYTES] = "rpc_perf --secure, a test key.."; /* 32 B */

static const char *variant_name(unsigned k)
{
    return k == NVAR ? "secure" : variants[k].name;
}

static pid_t server_start(const struct opts *o, bool rpc, uint64_t max_ns)
{
    const struct bench_rpc_opts *r = &o->rpc;
    if (r->symmetric || o->remote)
        return 0; /* the rate functions fork their own peer; or it runs elsewhere */
    if (o->spawn)
        return spawn_server(o, rpc ? "rpc-server" : "raw-server",
                            rpc ? o->listen_server : o->listen_raw);
    return rpc ? bench_rpc_server_fork(r->server, &o->cfg, &o->ep, o->server_cpu, max_ns)
               : bench_raw_server_fork(o->raw_server, o->server_cpu, max_ns, false);
}

static void server_stop(const struct opts *o, bool rpc, pid_t child)
{
    if (o->remote || o->rpc.symmetric)
        return;
    if (rpc || o->spawn) /* a spawned raw server dies by signal too */
        bench_rpc_server_stop(child);
    else
        bench_raw_server_stop(o->rpc.uri, o->raw_server, child);
}

/* Measures erma (rpc = true) or raw once; returns an erma status. */
static int measure_once(const struct opts *o, bool rpc, struct bench_lat *lat, double *v)
{
    const struct bench_rpc_opts *r = &o->rpc;
    const pid_t child = server_start(o, rpc, (uint64_t)(r->seconds * 4e9) + 60000000000ull);
    struct bench_raw_rate rate = {0};
    int rc;
    if (o->lat) {
        rc = rpc ? bench_rpc_lat(r, lat)
                 : bench_raw_pingpong(r->uri, o->raw_server, r->size, r->resp_size, r->iters, lat);
        *v = lat->median_us;
    } else if (o->bw) {
        rc = rpc ? bench_rpc_bw(r, v) : bench_raw_stream(r->uri, o->raw_server, 32, r->seconds, v);
    } else {
        rc = rpc ? bench_rpc_rate(r, &rate)
             : r->symmetric ? bench_raw_rate_sym(r->uri, o->raw_server, r->size, r->window,
                                                 r->batch, r->seconds, r->peer_cpu, &rate)
                            : bench_raw_rate(r->uri, o->raw_server, r->size, r->window, r->batch,
                                             r->seconds, &rate);
        *v = rate.mpps;
    }
    server_stop(o, rpc, child);
    return rc;
}

/* measure_once, tried again after a failure (a stalled VM, a lost server),
 * ATTEMPTS times in all; returns the metric or < 0. */
static double measure(const struct opts *o, const char *variant, unsigned round,
                      struct bench_lat *lat)
{
    const bool rpc = strcmp(variant, "raw") != 0;
    const char *peer = rpc ? o->rpc.server : o->raw_server;
    for (int a = 1; a <= ATTEMPTS; a++) {
        double v = -1;
        const int rc = measure_once(o, rpc, lat, &v);
        if (rc == ERMA_OK)
            return v;
        fprintf(stderr, "rpc_perf: %s %s, %u B request, round %u, %s -> %s: %s (attempt %d of %d%s)\n",
                o->mode, variant, o->rpc.size, round, o->rpc.uri, peer, erma_strerror(rc), a,
                ATTEMPTS, a < ATTEMPTS ? ", trying again" : ", giving up");
    }
    return -1;
}

/* Runs o->rounds rounds at o->rpc.size; prints a line per round and a median line. */
static int run_size(struct opts *o, const struct bench_table *t)
{
    const char *metric = o->lat ? "median_us" : o->bw ? "gbps" : "mrps";
    const char *srv = o->rpc.server, *sep = strstr(srv, "://");
    const int tlen = sep ? (int)(sep - srv) : 0;
    const char *poll = o->ep.busy_poll ? "busy" : "sleep";
    unsigned nvar = o->factors ? NVAR : 2;
    unsigned kind[NVAR + 1]; /* the variant each column measures; NVAR: secure */
    for (unsigned k = 0; k < nvar; k++)
        kind[k] = k;
    if (o->secure)
        kind[nvar++] = NVAR;
    double v[NVAR + 1][50], ratio[NVAR + 1][50];
    for (unsigned i = 0; i < o->rounds; i++) {
        struct bench_lat lr = {0};
        if ((v[0][i] = measure(o, "raw", i, &lr)) < 0)
            return 1;
        for (unsigned k = 1; k < nvar; k++) {
            struct bench_lat le = {0};
            const bool secure = kind[k] == NVAR;
            o->cfg.cc = secure ? variants[1].cc : variants[kind[k]].cc;
            bench_rpc_set_psk(secure ? bench_key : NULL);
            v[k][i] = measure(o, variant_name(kind[k]), i, &le);
            bench_rpc_set_psk(NULL);
            if (v[k][i] < 0)
                return 1;
            const double base = k == 1 ? v[0][i] : v[1][i];
            ratio[k][i] = v[k][i] / base;
            char p99[64] = ",";
            if (o->lat)
                snprintf(p99, sizeof p99, "%.2f,%.2f", le.p99_us, lr.p99_us);
            bench_table_row(t, "rpc_perf,%s,%.*s,%u,%u,%u,%u,%s,%s,%.3f,%.3f,%.3f,%s,%s", o->mode,
                            tlen, srv, o->rpc.size, o->rpc.resp_size, o->rpc.sessions, i, metric,
                            variant_name(kind[k]), v[k][i], base, ratio[k][i], p99, poll);
        }
    }
    const double mr = bench_median(v[0], o->rounds), me = bench_median(v[1], o->rounds);
    for (unsigned k = 1; k < nvar; k++) {
        const double m = bench_median(v[k], o->rounds), base = k == 1 ? mr : me;
        bench_table_row(t, "rpc_perf,%s,%.*s,%u,%u,%u,median,%s,%s,%.3f,%.3f,%.3f,,,%s", o->mode,
                        tlen, srv, o->rpc.size, o->rpc.resp_size, o->rpc.sessions, metric,
                        variant_name(kind[k]), m, base, bench_median(ratio[k], o->rounds), poll);
    }
    return 0;
}

static void parse(struct bench_cli *cli, struct opts *o, int argc, char **argv)
{
    static const struct option lo[] = {
        BENCH_COMMON_OPTIONS,
        {"mode", 1, 0, 'm'},     {"uri", 1, 0, 'u'},     {"server", 1, 0, 's'},
        {"raw-server", 1, 0, 'R'}, {"resp-size", 1, 0, 'Z'}, {"iters", 1, 0, 'i'},
        {"window", 1, 0, 'w'},   {"batch", 1, 0, 'b'},   {"sessions", 1, 0, 'n'},
        {"credits", 1, 0, 'c'},  {"seconds", 1, 0, 't'}, {"rounds", 1, 0, 'r'},
        {"factors", 0, 0, 'f'},  {"role", 1, 0, 'o'},    {"spawn", 1, 0, 'p'},
        {"listen-server", 1, 0, 'L'}, {"listen-raw", 1, 0, 'W'}, {"symmetric", 0, 0, 'y'},
        {"no-poll", 0, 0, 'P'},  {"secure", 0, 0, 'S'},  {"paths", 1, 0, 'k'},
        {"mtu", 1, 0, 'M'},
        {"cc-off", 0, 0, 'C'},   {"go-back-n", 0, 0, 'G'}, {"threads", 1, 0, 'T'},
        {"scale", 0, 0, 'x'},    {"workers", 1, 0, 'K'},  {0, 0, 0, 0}};
    bench_cli_init(cli, "rpc_perf", usage, lo);
    for (int c; (c = bench_cli_next(cli, argc, argv)) != -1;) {
        switch (c) {
        case 'm': o->mode = optarg; break;
        case 'u': o->rpc.uri = optarg; o->uri_set = true; break;
        case 's': o->rpc.server = optarg; break;
        case 'R': o->raw_server = optarg; break;
        case 'Z': o->rpc.resp_size = bench_cli_size(cli, optarg); o->resp_set = true; break;
        case 'i': o->rpc.iters = bench_cli_u64(cli, optarg); o->iters_set = true; break;
        case 'w': o->rpc.window = (uint32_t)bench_cli_u64(cli, optarg); break;
        case 'b': o->rpc.batch = (uint32_t)bench_cli_u64(cli, optarg); break;
        case 'n': o->rpc.sessions = (uint32_t)bench_cli_u64(cli, optarg); break;
        case 'c': o->cfg.credits = (uint32_t)bench_cli_u64(cli, optarg); break;
        case 't': o->rpc.seconds = bench_cli_real(cli, optarg); break;
        case 'r': o->rounds = (unsigned)bench_cli_u64(cli, optarg); break;
        case 'f': o->factors = true; break;
        case 'o': o->role = optarg; break;
        case 'p': o->spawn = optarg; break;
        case 'y': o->rpc.symmetric = true; break;
        case 'L': o->listen_server = optarg; break;
        case 'W': o->listen_raw = optarg; break;
        case 'P': o->ep.busy_poll = false; break;
        case 'S': o->secure = true; break;
        case 'k': o->ep.paths = (uint32_t)bench_cli_u64(cli, optarg); break;
        case 'M': o->ep.mtu = (uint32_t)bench_cli_u64(cli, optarg); break;
        case 'C': o->cfg.cc.off = true; break;
        case 'G': o->cfg.go_back_n = true; break;
        case 'T': o->threads = bench_cli_threads(cli, "--threads", optarg); break;
        case 'x': o->scale = true; break;
        case 'K': bench_rpc_set_workers(bench_cli_threads(cli, "--workers", optarg)); break;
        default: bench_cli_fail(cli, NULL);
        }
    }
}

/* The port of a URI (after its last ':'), or -1. */
static long port_of(const char *uri)
{
    const char *c = strrchr(uri, ':');
    char *end;
    const long p = c ? strtol(c + 1, &end, 10) : -1;
    return c && end != c + 1 ? p : -1;
}

static void thread_layout(const struct bench_cli *cli, struct opts *o);

/* The options --threads allows; fails with the reason. */
static void check_threads(const struct bench_cli *cli, struct opts *o)
{
    if (o->scale && !o->threads)
        bench_cli_fail(cli, "--scale goes with --threads N");
    if (!o->threads)
        return;
    if (o->lat || o->bw)
        bench_cli_fail(cli, "--threads is for --mode rate and sessions");
    if (o->rpc.symmetric || o->spawn || o->factors || o->secure)
        bench_cli_fail(cli, "--threads: no --symmetric, --spawn, --factors or --secure");
    thread_layout(cli, o);
}

/* --threads: the two servers' ports apart, and the threads' CPUs. */
static void thread_layout(const struct bench_cli *cli, struct opts *o)
{
    const long a = port_of(o->rpc.server), b = port_of(o->raw_server);
    if (a > 0 && b > 0 && (a < b ? b - a : a - b) < (long)o->threads)
        bench_cli_fail(cli, "--threads %u: the erma server's ports (%ld and on) and the raw "
                            "server's (%ld and on) overlap; give --raw-server a port %u apart",
                       o->threads, a, b, o->threads);
    o->pinned = bench_cli_thread_cpus(cli, o->threads, o->cpus);
}

/* Checks the options against the mode; fails with the reason. */
static void check(const struct bench_cli *cli, struct opts *o)
{
    o->lat = strcmp(o->mode, "lat") == 0;
    o->bw = strcmp(o->mode, "bw") == 0;
    const bool rate = !o->lat && !o->bw;
    if (rate && strcmp(o->mode, "rate") && strcmp(o->mode, "sessions"))
        bench_cli_fail(cli, "unknown mode '%s'", o->mode);
    if (o->rounds == 0 || o->rounds > 50)
        bench_cli_fail(cli, "--rounds must be 1..50");
    if (o->ep.mtu && (o->ep.mtu < 576 || o->ep.mtu > 9000))
        bench_cli_fail(cli, "--mtu %u: 576..9000", o->ep.mtu);
    if (o->rpc.iters == 0 || o->rpc.window == 0 || o->rpc.window > 4096 || o->rpc.batch == 0 ||
        o->rpc.sessions == 0 || o->rpc.seconds <= 0)
        bench_cli_fail(cli, "--iters, --window (<= 4096), --batch, --sessions and --seconds "
                            "must be above 0");
    for (unsigned i = 0; i < cli->nsizes; i++) {
        if (cli->sizes[i] > ERMA_MAX_MSG_SIZE)
            bench_cli_fail(cli, "size %u is above the 8 MiB message limit", cli->sizes[i]);
        if (rate && (cli->sizes[i] > ONE_PACKET || (o->resp_set && o->rpc.resp_size > ONE_PACKET)))
            bench_cli_fail(cli, "%s mode compares one-packet messages (at most %u B); "
                                "use --mode lat or bw above", o->mode, ONE_PACKET);
    }
    if (o->remote && (o->rpc.symmetric || o->spawn))
        bench_cli_fail(cli, "--role client runs against servers elsewhere: no --symmetric, "
                            "no --spawn");
    if (o->secure && (o->remote || o->spawn))
        bench_cli_fail(cli, "--secure starts its own servers: no --role client, no --spawn");
    if (o->rpc.symmetric && !(strcmp(o->mode, "rate") == 0))
        bench_cli_fail(cli, "--symmetric is for --mode rate");
    check_threads(cli, o);
}

/* The per-size settings: response size and iterations. */
static void set_size(struct opts *o, uint32_t size)
{
    o->rpc.size = size;
    if (!o->resp_set)
        o->rpc.resp_size = o->bw ? 32 : size;
    if (!o->iters_set)
        o->rpc.iters = bench_iters_for(50000, size);
}

/* RX ring and per-address limit for n sessions, all from one client. */
static void room_for_sessions(struct erma_rpc_cfg *cfg, struct erma_endpoint_cfg *ep,
                              uint32_t n)
{
    const uint32_t ring = n * (cfg->credits ? cfg->credits : 32) + 64;
    ep->rx_ring = ring > 4096 ? ring : 4096;
    cfg->max_sessions_per_peer = n > 64 ? n : 64;
}

/* --role server|rpc-server|raw-server: serves until killed (with room for
 * --sessions sessions of --credits from one client). */
/* --role server --threads N: N erma server threads here, N raw ones in a
 * child; until killed. */
static int serve_threads(const struct bench_cli *cli, struct opts *o, uint64_t forever)
{
    if (strcmp(o->role, "server"))
        bench_cli_fail(cli, "--threads goes with --role both, client or server");
    thread_layout(cli, o);
    const pid_t raw = bench_raw_servers_fork(o->raw_server, o->threads,
                                             o->pinned ? o->cpus[1] : NULL, forever);
    struct bench_rpc_servers *s;
    const int rc = bench_rpc_servers_start(o->rpc.server, o->threads,
                                           o->pinned ? o->cpus[0] : NULL, &o->cfg, &o->ep, &s);
    if (rc == ERMA_OK) {
        bench_note(cli->csv, "rpc_perf server: %u threads, erma RPCs on %s and on, raw packets "
                   "on %s and on, %s; Ctrl-C ends", o->threads, o->rpc.server, o->raw_server,
                   o->ep.busy_poll ? "busy-polling" : "sleeping when idle");
        for (;;)
            pause();
    }
    fprintf(stderr, "rpc_perf server: %u threads on %s: %s\n", o->threads, o->rpc.server,
            erma_strerror(rc));
    bench_rpc_server_stop(raw);
    return 1;
}

static int serve(const struct bench_cli *cli, struct opts *o)
{
    const uint64_t forever = 100ull * 24 * 3600 * 1000000000ull;
    room_for_sessions(&o->cfg, &o->ep, o->rpc.sessions);
    if (o->threads)
        return serve_threads(cli, o, forever);
    bench_pin(bench_cli_cpu(cli, 0));
    if (strcmp(o->role, "raw-server") == 0)
        return bench_raw_server(o->rpc.server, forever, false) == ERMA_OK ? 0 : 1;
    if (strcmp(o->role, "rpc-server") == 0)
        return bench_rpc_server(o->rpc.server, &o->cfg, &o->ep, forever) == ERMA_OK ? 0 : 1;
    const pid_t raw = bench_raw_server_fork(o->raw_server, bench_cli_cpu(cli, 1), forever, false);
    bench_note(cli->csv, "rpc_perf server: erma RPCs on %s, raw packets on %s, %s; Ctrl-C ends",
               o->rpc.server, o->raw_server, o->ep.busy_poll ? "busy-polling" : "sleeping when idle");
    const int rc = bench_rpc_server(o->rpc.server, &o->cfg, &o->ep, forever);
    bench_rpc_server_stop(raw);
    return rc == ERMA_OK ? 0 : 1;
}

/* --threads: the sizes' rounds from rpc_threads.c. */
static int run_threads(struct bench_cli *cli, struct opts *o)
{
    const struct rpc_threads_opts to = {
        .rpc = &o->rpc, .mode = o->mode, .raw_server = o->raw_server, .threads = o->threads,
        .rounds = o->rounds, .scale = o->scale, .remote = o->remote,
        .client_cpus = o->pinned ? o->cpus[0] : NULL, .server_cpus = o->pinned ? o->cpus[1] : NULL};
    bench_note(cli->csv, "rpc_perf %s --threads %u%s: each thread's endpoint (%s and on) "
               "calls its own server endpoint (%s and on; raw %s and on); %s; %u rounds",
               o->mode, o->threads, o->scale ? " --scale" : "", o->rpc.uri, o->rpc.server,
               o->raw_server, o->ep.busy_poll ? "every endpoint busy-polls" :
               "erma endpoints sleep when idle (--no-poll), raw polls", o->rounds);
    struct bench_table t;
    char header[256];
    rpc_threads_header(header, sizeof header);
    bench_table_start(&t, cli->csv, header);
    for (unsigned i = 0; i < cli->nsizes; i++) {
        set_size(o, cli->sizes[i]);
        if (rpc_threads_run(&to, &t) != 0)
            return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = {.mode = "lat", .raw_server = "udp://127.0.0.1:31860", .rounds = 3,
                     .role = "both"};
    o.rpc = (struct bench_rpc_opts){.uri = "udp://127.0.0.1:31870",
                                    .server = "udp://127.0.0.1:31850", .size = 32,
                                    .resp_size = 32, .window = 60, .batch = 3, .sessions = 8,
                                    .iters = 50000, .seconds = 2, .cfg = &o.cfg,
                                    .ep_cfg = &o.ep};
    o.ep.busy_poll = true;
    struct bench_cli cli;
    parse(&cli, &o, argc, argv);
    if (strcmp(o.role, "both") && strcmp(o.role, "client") && strcmp(o.role, "server") &&
        strcmp(o.role, "rpc-server") && strcmp(o.role, "raw-server"))
        bench_cli_fail(&cli, "unknown role '%s'", o.role);
    if (strcmp(o.role, "both") && strcmp(o.role, "client"))
        return serve(&cli, &o);
    o.remote = strcmp(o.role, "client") == 0;
    check(&cli, &o);
    o.listen_server = o.listen_server ? o.listen_server : o.rpc.server;
    o.listen_raw = o.listen_raw ? o.listen_raw : o.raw_server;
    o.server_cpu = o.rpc.peer_cpu = bench_cli_cpu(&cli, 1);
    if (o.threads && !o.uri_set)
        o.rpc.uri = "udp://127.0.0.1:0"; /* thread t's port: any free one */
    if (!o.threads)
        bench_pin(bench_cli_cpu(&cli, 0)); /* threads pin themselves */
    if (o.lat || o.bw)
        o.rpc.sessions = 1;
    if (strcmp(o.mode, "sessions") == 0) /* the rate load spread over many sessions */
        room_for_sessions(&o.cfg, &o.ep, o.rpc.sessions);
    if (cli.nsizes == 0)
        cli.sizes[cli.nsizes++] = o.bw ? 8u << 20 : 32;
    if (o.threads)
        return run_threads(&cli, &o);
    bench_note(cli.csv, "rpc_perf %s: erma %s -> %s, raw -> %s; %s; %u rounds", o.mode,
               o.rpc.uri, o.rpc.server, o.raw_server,
               o.ep.busy_poll ? "every endpoint busy-polls (cfg.busy_poll)"
                               : "erma endpoints sleep when idle (--no-poll), raw polls",
               o.rounds);
    struct bench_table t;
    char header[256];
    snprintf(header, sizeof header, "bench,mode,transport:9,size,resp_size,sessions,round:6,"
             "metric:9,variant:%d,value,baseline,ratio,p99_us,raw_p99_us,poll:5",
             o.factors ? 16 : 7);
    bench_table_start(&t, cli.csv, header);
    for (unsigned i = 0; i < cli.nsizes; i++) {
        set_size(&o, cli.sizes[i]);
        if (run_size(&o, &t) != 0)
            return 1;
    }
    return 0;
}
