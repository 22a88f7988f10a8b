/*
 * rma_perf - one-sided READ and WRITE beside an RPC of the same size, in one run.
 *
 *   rma_perf [--mode lat|rate|bw] [--op read|write] [--sizes LIST] [options]
 *   rma_perf --role server [--server URI]                   (on one host)
 *   rma_perf --role client --server URI [--mode ...]        (on another)
 *   rma_perf --mode rate --threads N [--scale] [options]    (N endpoint threads)
 *
 * `rma_perf --help` lists every option. lat: one op of --size at a time
 * (default 32 B; above ERMA_RMA_MAX_OP, 4 KB, one transfer through the
 * executor); round-trip percentiles. rate: --window ops in flight (default
 * 60 of 32 B, at most 4 KB each); Mops. bw: one transfer at a time through
 * the executor (default 8 MiB, chunks of 4 KB under the window CC, or
 * bounded only by the command slots with --cc-off); Gb/s of data.
 * ERMA_BENCH_CC=1 prints the windows.
 *
 * The RPC of the same size is bench/rpc_perf's: for a READ of B bytes, a
 * request of 8 B answered by B bytes (a GET); for a WRITE, a request of B
 * bytes answered by 8 B (a PUT). One server process serves both: the RPC
 * echo handler, the key service (erma/keys.h) that hands the client the
 * key derived for its engine and address, and a registered read-write
 * region (64 MiB with --role server, else as large as the largest size
 * needs) its event loop serves one-sided (rma_side.c).
 * Within a round the order of the two alternates. By default (--role both)
 * every round forks a fresh server; with --role client the server is a
 * `rma_perf --role server` on another host. Every endpoint busy-polls
 * (cfg.busy_poll, the measurement condition); --no-poll measures the
 * default idle sleep on both sides.
 *
 * Output: a line per size and round and a median line per size; ratio =
 * one-sided / RPC, the median line's is the median of the per-round ratios
 * (latency: lower is better; rate and bandwidth: higher is better). A
 * READ's data is checked against the region's pattern, and a WRITE writes
 * the pattern back, so a wrong byte fails the run. Failed ops (a timeout
 * when a process stalls) are counted and named on stderr, not timed; in
 * lat mode more than 1% fails the measurement, in rate mode none done
 * right (with --ops: fewer than N in time); a failed measurement is tried
 * again (3 attempts).
 * --secure adds, in the same rounds, the RPC over authenticated, encrypted
 * sessions (erma_nexus_cfg.psk; a server of its own): rpc_secure, and
 * ratio_secure = one-sided / secure RPC, where both sides pay for AEAD.
 *
 * --threads N (rate mode): eRPC's model, N initiator threads here, each
 * with its own endpoint (port of --uri plus t), nexus, erma_rpc, engine
 * and key (fetched over a session of its own endpoint, so bound to its
 * address), against N target threads in one forked server process (the
 * endpoints of --server plus t, one nexus), each with its own erma_rpc,
 * engine, key service and region; the RPC of the same size runs the same
 * threads beside it. The rows give the total and per-thread Mops.
 * --scale: 1, 2, 4, ... and N threads in each round, with each one's
 * efficiency (total / (n x the one-thread rate of the same round)) beside
 * the RPC's (bench/rma_threads.c). --ops N (rate mode): each initiator's
 * measurement ends once N ops completed with the right data (an op that
 * failed, timed out on a stalled host, is counted and replaced) and its
 * RPCs once N calls came back; it fails when they have not within
 * --seconds: the smoke test's bound (tests/rma).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "erma/errors.h"
#include "rma_threads.h"

static const char usage[] =
    "usage: rma_perf [--mode lat|rate|bw] [--op read|write] [options]\n"
    "  one-sided READ/WRITE beside an RPC of the same size (see bench/rma_perf.c)\n"
    "  --mode M         lat (default): one op at a time, RTT percentiles;\n"
    "                   rate: --window ops in flight, Mops; bw: Gb/s of transfers\n"
    "  --op O           read (default) or write\n"
    "  --sizes LIST     data bytes, e.g. 32,1K,4K,64K (--size B: one); default 32\n"
    "                   (bw: 8M); rate: at most 4K; lat above 4K: executor transfers\n"
    "  --iters N        lat: ops per measurement (default 50000, fewer above 4 KB)\n"
    "  --window W       rate: ops in flight (default 60)\n"
    "  --seconds S      rate and bw: seconds per measurement (default 2)\n"
    "  --rounds R       rounds, 1..50 (default 3)\n"
    "  --cc-off         bw: no window CC in the executor\n"
    "  --no-poll        endpoints sleep when idle (default: busy-poll)\n"
    "  --mtu M          every endpoint's Ethernet MTU, 576..9000 (default 1500)\n"
    "  --secure         also the RPC over authenticated, encrypted sessions\n"
    "  --threads N      rate: N initiator threads here (endpoint t of --uri each,\n"
    "                   its own engine and key) against N target threads (endpoint\n"
    "                   t of --server), 1..32; --role server: serve N of them\n"
    "  --scale          with --threads N: 1, 2, 4, ... and N threads in each round,\n"
    "                   and each one's efficiency, total / (n x 1-thread rate)\n"
    "  --ops N          rate: each initiator's measurement ends once N ops (and N\n"
    "                   RPCs) completed right, a failed op replaced by another; it\n"
    "                   fails if they have not in --seconds (a smoke test's bound)\n"
    "  --cpu LIST       CPUs: this process, then the server (default: no pinning);\n"
    "                   with --threads N, F (initiator t on CPU F+t, target t on\n"
    "                   F+N+t) or 2N CPUs, the initiators' then the targets'\n"
    "                   (--role server --threads N: the targets on the first N)\n"
    "  --csv            CSV instead of the table\n"
    "  --role R         both (default: fork a server per round), server (serve\n"
    "                   --server until killed), client (the server runs elsewhere)\n"
    "  --uri URI        this client's URI (default udp://127.0.0.1:31880; with\n"
    "                   --threads udp://127.0.0.1:0, any free port per thread)\n"
    "  --server URI     the server's URI (default udp://127.0.0.1:31890)\n"
    "  -h, --help       this text\n";

#define SMALL 8 /* the other direction of the comparable RPC */
#define REGION_BYTES (64u << 20)
#define THREAD_REGION_BYTES (4096u * ERMA_RMA_MAX_OP) /* --window 4096 of 4 KB */
#define ATTEMPTS 3

static const uint8_t secure_key[ERMA_PSK_BYTES] = "rma_perf --secure, a test key.."; /* 32 B */

static const char *op_name(const struct rma_opts *o)
{
    return o->op == ERMA_RMA_READ ? "read" : "write";
}

/* Measures one-sided (rma) or the comparable RPC (r) once; an erma status. */
static int measure_once(const struct rma_opts *o, const struct rma_opts *r, bool rma,
                        struct bench_lat *lat, double *v)
{
    if (!rma) {
        struct bench_raw_rate rate = {0};
        int rc;
        if (r->lat)
            rc = bench_rpc_lat(&r->rpc, lat), *v = lat->median_us;
        else if (r->bw)
            rc = bench_rpc_bw(&r->rpc, v);
        else
            rc = bench_rpc_rate(&r->rpc, &rate), *v = rate.mpps;
        if (rc == ERMA_OK && r->ops && rate.echoes != r->ops)
            rc = ERMA_ETIMEDOUT; /* with --ops every RPC must come back */
        return rc;
    }
    struct rma_initiator c;
    struct bench_raw_rate rate;
    int rc = rma_initiator_open(&c, o, 0);
    if (rc != ERMA_OK)
        return rc;
    if (o->lat)
        rc = rma_lat(o, &c, lat), *v = lat->median_us;
    else if (o->bw)
        rc = rma_bw(o, &c, v);
    else
        rc = rma_rate(o, &c, &rate), *v = rate.mpps;
    rma_initiator_close(&c);
    return rc;
}

/* measure_once, tried ATTEMPTS times; the metric or < 0. */
static double measure(const struct rma_opts *o, const struct rma_opts *r, bool rma, struct bench_lat *lat)
{
    for (int a = 1; a <= ATTEMPTS; a++) {
        double v = -1;
        const int rc = measure_once(o, r, rma, lat, &v);
        if (rc == ERMA_OK)
            return v;
        char w[256];
        const bool last = a == ATTEMPTS || rc == ERMA_EBADPKT; /* wrong data: no retry */
        fprintf(stderr, "rma_perf: %s: %s (attempt %d of %d%s)\n",
                rma_where(o, rma ? "one-sided" : "rpc", w, sizeof w),
                rc == ERMA_EBADPKT ? "wrong data read" : erma_strerror(rc), a, ATTEMPTS,
                last ? ", giving up" : ", trying again");
        if (last)
            break;
    }
    return -1;
}

/* The comparable RPC: B bytes back for a READ, B bytes out for a WRITE. */
static struct rma_opts rpc_like(const struct rma_opts *o)
{
    struct rma_opts r = *o;
    const bool read = o->op == ERMA_RMA_READ;
    r.rpc.size = read ? SMALL : o->rpc.size;
    r.rpc.resp_size = read ? o->rpc.size : SMALL;
    r.rpc.cfg = &o->cfg;
    r.rpc.ep_cfg = &o->ep;
    r.rpc.max_calls = o->ops;
    if (!o->lat && !o->bw)
        return r;
    r.rpc.sessions = 1;
    return r;
}

/* The RPC over authenticated, encrypted sessions, against a server of its
 * own (the one-sided server's RPCs are plaintext); < 0 when it failed. */
static double measure_secure(const struct rma_opts *o, const struct rma_opts *r, int server_cpu,
                             uint64_t max_ns, struct bench_lat *lat)
{
    bench_rpc_set_psk(secure_key);
    const pid_t child = bench_rpc_server_fork(o->rpc.server, &o->cfg, &o->ep, server_cpu, max_ns);
    const double v = measure(o, r, false, lat);
    bench_rpc_server_stop(child);
    bench_rpc_set_psk(NULL);
    return v;
}

static int run_size(struct rma_opts *o, const struct bench_table *t,
                    const struct bench_thread_ext *ext, int server_cpu)
{
    const struct rma_opts r = rpc_like(o);
    const uint64_t max_ns = (uint64_t)(o->rpc.seconds * 1e9) * 8 + 60000000000ull;
    const char *metric = o->lat ? "median_us" : o->bw ? "gbps" : "mops";
    const char *poll = o->ep.busy_poll ? "busy" : "sleep";
    double vr[50], vm[50], vs[50], ratio[50], ratio_s[50];
    for (unsigned i = 0; i < o->rounds; i++) {
        o->round = i;
        const pid_t child = o->remote ? 0
                                      : bench_rpc_servers_fork_ext(o->rpc.server, 1, &server_cpu,
                                                                   &o->cfg, &o->ep, ext, max_ns);
        struct bench_lat lm = {0}, lr = {0};
        const bool rma_first = i % 2 == 0;
        vm[i] = rma_first ? measure(o, &r, true, &lm) : 0;
        vr[i] = vm[i] < 0 ? -1 : measure(o, &r, false, &lr);
        if (!rma_first && vr[i] >= 0)
            vm[i] = measure(o, &r, true, &lm);
        bench_rpc_server_stop(child);
        struct bench_lat ls = {0};
        vs[i] = o->secure && vm[i] >= 0 && vr[i] >= 0
                    ? measure_secure(o, &r, server_cpu, max_ns, &ls) : 1;
        if (vm[i] < 0 || vr[i] < 0 || vs[i] < 0)
            return 1;
        ratio[i] = vm[i] / vr[i];
        ratio_s[i] = vm[i] / vs[i];
        char p99[64] = ",", sec[64] = ",";
        if (o->lat)
            snprintf(p99, sizeof p99, "%.2f,%.2f", lm.p99_us, lr.p99_us);
        if (o->secure)
            snprintf(sec, sizeof sec, "%.3f,%.3f", vs[i], ratio_s[i]);
        bench_table_row(t, "rma_perf,%s,%s,%u,%u,%s,%.3f,%.3f,%.3f,%s,%s,%s", o->mode,
                        op_name(o), o->rpc.size, i, metric, vm[i], vr[i], ratio[i], sec, p99, poll);
    }
    char sec[64] = ",";
    if (o->secure)
        snprintf(sec, sizeof sec, "%.3f,%.3f", bench_median(vs, o->rounds),
                 bench_median(ratio_s, o->rounds));
    bench_table_row(t, "rma_perf,%s,%s,%u,median,%s,%.3f,%.3f,%.3f,%s,,,%s", o->mode, op_name(o),
                    o->rpc.size, metric, bench_median(vm, o->rounds), bench_median(vr, o->rounds),
                    bench_median(ratio, o->rounds), sec, poll);
    return 0;
}

/* --threads, --scale and --ops against the rest; fails with the reason. */
static void check_threads(const struct bench_cli *cli, struct rma_opts *o)
{
    const bool rate = !o->lat && !o->bw;
    if (o->scale && !o->threads)
        bench_cli_fail(cli, "--scale goes with --threads N");
    if ((o->threads && strcmp(o->role, "server")) || o->ops) {
        if (!rate)
            bench_cli_fail(cli, "--threads and --ops are for --mode rate");
        if (o->secure)
            bench_cli_fail(cli, "--threads and --ops: no --secure");
    }
    if (o->threads)
        o->pinned = bench_cli_thread_cpus(cli, o->threads, o->cpus);
}

static void parse(struct bench_cli *cli, struct rma_opts *o, int argc, char **argv)
{
    static const struct option lo[] = {
        BENCH_COMMON_OPTIONS,
        {"mode", 1, 0, 'm'},  {"op", 1, 0, 'o'},      {"uri", 1, 0, 'u'},
        {"server", 1, 0, 's'}, {"iters", 1, 0, 'i'},  {"window", 1, 0, 'w'},
        {"seconds", 1, 0, 't'}, {"rounds", 1, 0, 'r'}, {"cc-off", 0, 0, 'c'},
        {"role", 1, 0, 'R'},  {"no-poll", 0, 0, 'P'}, {"secure", 0, 0, 'S'},
        {"threads", 1, 0, 'T'}, {"scale", 0, 0, 'x'}, {"ops", 1, 0, 'n'}, {"mtu", 1, 0, 'M'},
        {0, 0, 0, 0}};
    const char *op = "read";
    bench_cli_init(cli, "rma_perf", usage, lo);
    for (int c; (c = bench_cli_next(cli, argc, argv)) != -1;) {
        switch (c) {
        case 'm': o->mode = optarg; break;
        case 'o': op = optarg; break;
        case 'u': o->rpc.uri = optarg; o->uri_set = true; break;
        case 's': o->rpc.server = optarg; break;
        case 'i': o->rpc.iters = bench_cli_u64(cli, optarg); o->iters_set = true; break;
        case 'w': o->rpc.window = (uint32_t)bench_cli_u64(cli, optarg); break;
        case 't': o->rpc.seconds = bench_cli_real(cli, optarg); break;
        case 'r': o->rounds = (unsigned)bench_cli_u64(cli, optarg); break;
        case 'c': o->cc_off = true; break;
        case 'R': o->role = optarg; break;
        case 'P': o->ep.busy_poll = false; break;
        case 'S': o->secure = true; break;
        case 'T': o->threads = bench_cli_threads(cli, "--threads", optarg); break;
        case 'x': o->scale = true; break;
        case 'n': o->ops = bench_cli_u64(cli, optarg); break;
        case 'M': o->ep.mtu = (uint32_t)bench_cli_u64(cli, optarg); break;
        default: bench_cli_fail(cli, NULL);
        }
    }
    if (o->ep.mtu && (o->ep.mtu < 576 || o->ep.mtu > 9000))
        bench_cli_fail(cli, "--mtu %u: 576..9000", o->ep.mtu);
    o->lat = strcmp(o->mode, "lat") == 0;
    o->bw = strcmp(o->mode, "bw") == 0;
    if (!o->bw && !o->lat && strcmp(o->mode, "rate"))
        bench_cli_fail(cli, "unknown mode '%s'", o->mode);
    if (strcmp(op, "write") && strcmp(op, "read"))
        bench_cli_fail(cli, "unknown op '%s'", op);
    o->op = strcmp(op, "write") == 0 ? ERMA_RMA_WRITE : ERMA_RMA_READ;
    if (strcmp(o->role, "both") && strcmp(o->role, "server") && strcmp(o->role, "client"))
        bench_cli_fail(cli, "unknown role '%s'", o->role);
    if (o->secure && strcmp(o->role, "both") != 0)
        bench_cli_fail(cli, "--secure starts its own servers: --role both only");
    if (o->rpc.window == 0 || o->rpc.window > 4096 || o->rounds == 0 || o->rounds > 50 ||
        o->rpc.iters == 0 || o->rpc.seconds <= 0)
        bench_cli_fail(cli, "--window (1..4096), --rounds (1..50), --iters and --seconds "
                            "must be in range");
    if (cli->nsizes == 0)
        cli->sizes[cli->nsizes++] = o->bw ? 8u << 20 : 32;
    const uint32_t max = o->lat || o->bw ? REGION_BYTES : ERMA_RMA_MAX_OP;
    for (unsigned i = 0; i < cli->nsizes; i++)
        if (cli->sizes[i] == 0 || cli->sizes[i] > max)
            bench_cli_fail(cli, "size %u: %s takes 1..%u B", cli->sizes[i], o->mode, max);
    check_threads(cli, o);
}

/* --role server: serves endpoints 0..n-1 of --server (n: --threads, or 1)
 * until killed, each with a region of REGION_BYTES (--threads: of the most
 * a rate measurement reads, THREAD_REGION_BYTES). */
static int serve(const struct bench_cli *cli, struct rma_opts *o, struct rma_targets *tgt)
{
    const unsigned n = o->threads ? o->threads : 1;
    int cpu0 = bench_cli_cpu(cli, 0);
    const int *cpus = o->pinned ? o->cpus[0] : o->threads ? NULL : &cpu0;
    tgt->len = o->threads ? THREAD_REGION_BYTES : REGION_BYTES;
    const struct bench_thread_ext ext = {rma_target_open, rma_target_close, tgt};
    struct bench_rpc_servers *s;
    const int rc = bench_rpc_servers_start_ext(o->rpc.server, n, cpus, &o->cfg, &o->ep, &ext, &s);
    if (rc != ERMA_OK) {
        fprintf(stderr, "rma_perf server: %u threads on %s: %s\n", n, o->rpc.server,
                erma_strerror(rc));
        return 1;
    }
    bench_note(cli->csv, "rma_perf server on %s (%u endpoint%s from it), each with the RPC "
               "echo, the key service and a %zu MiB region, %s; Ctrl-C ends", o->rpc.server, n,
               n > 1 ? "s" : "", tgt->len >> 20,
               o->ep.busy_poll ? "busy-polling" : "sleeping when idle");
    for (;;)
        pause();
}

/* --threads: the sizes' rounds from rma_threads.c. */
static int run_threads(const struct bench_cli *cli, struct rma_opts *o)
{
    bench_note(cli->csv, "rma_perf %s %s --threads %u%s: each initiator thread's endpoint (%s "
               "and on) to its own target endpoint (%s and on), its own key; %s; %u rounds",
               o->mode, op_name(o), o->threads, o->scale ? " --scale" : "", o->rpc.uri,
               o->rpc.server, o->ep.busy_poll ? "every endpoint busy-polls"
                                              : "endpoints sleep when idle (--no-poll)",
               o->rounds);
    struct bench_table t;
    char header[256];
    rma_threads_header(header, sizeof header);
    bench_table_start(&t, cli->csv, header);
    for (unsigned i = 0; i < cli->nsizes; i++) {
        o->rpc.size = cli->sizes[i];
        const struct rma_opts r = rpc_like(o);
        if (rma_threads_run(o, &r, &t) != 0)
            return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct rma_opts o = {.mode = "lat", .role = "both", .rounds = 3};
    o.rpc = (struct bench_rpc_opts){.uri = "udp://127.0.0.1:31880",
                                    .server = "udp://127.0.0.1:31890", .size = 32,
                                    .window = 60, .batch = 1, .sessions = 8, .iters = 50000,
                                    .seconds = 2};
    o.ep.busy_poll = true;
    struct bench_cli cli;
    parse(&cli, &o, argc, argv);
    static struct rma_targets tgt = {.len = 1u << 20}; /* for the largest size; a server for any */
    if (strcmp(o.role, "server") == 0)
        return serve(&cli, &o, &tgt);
    o.remote = strcmp(o.role, "client") == 0;
    if (o.threads && !o.uri_set)
        o.rpc.uri = "udp://127.0.0.1:0"; /* thread t's port: any free one */
    if (o.threads)
        return run_threads(&cli, &o);
    bench_pin(bench_cli_cpu(&cli, 0));
    for (unsigned i = 0; i < cli.nsizes; i++) {
        o.rpc.size = cli.sizes[i];
        tgt.len = rma_buf_len(&o) > tgt.len ? rma_buf_len(&o) : tgt.len;
    }
    const struct bench_thread_ext ext = {rma_target_open, rma_target_close, &tgt};
    bench_note(cli.csv, "rma_perf %s %s: %s -> %s; %s; %u rounds", o.mode, op_name(&o), o.rpc.uri,
               o.rpc.server,
               o.ep.busy_poll ? "every endpoint busy-polls (cfg.busy_poll)"
                               : "endpoints sleep when idle (--no-poll)",
               o.rounds);
    struct bench_table t;
    bench_table_start(&t, cli.csv, "bench,mode,op,size,round:6,metric:9,value,rpc,ratio,"
                                   "rpc_secure:10,ratio_secure:12,p99_us,rpc_p99_us:10,poll:5");
    const uint64_t iters = o.rpc.iters;
    for (unsigned i = 0; i < cli.nsizes; i++) {
        o.rpc.size = cli.sizes[i];
        o.rpc.iters = o.iters_set ? iters : bench_iters_for(iters, o.rpc.size);
        if (run_size(&o, &t, &ext, bench_cli_cpu(&cli, 1)) != 0)
            return 1;
    }
    return 0;
}
