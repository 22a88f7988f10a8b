/*
 * raw - the physical-limit baseline: a ping-pong and a batched echo rate of
 * bare erma-headed packets over one transport, client and server in two
 * processes, both busy-polling the transport (no erma endpoint).
 *
 *   raw [--sizes LIST] [--iters N] [--window W] [--batch B] [--seconds S]
 *       [--cpu LIST] [--csv] [--uri URI] [--server URI]
 *   raw --role server --server URI           (on one host: serves until killed)
 *   raw --role client --server URI [...]     (on another)
 *
 * By default (--role both) the server is forked here. The ping-pong sends
 * --size bytes each way: one echoed packet when it fits one, else the
 * windowed messages of bench_raw_pingpong (bench.h). The rate keeps
 * --window packets in flight, sent in batches of --batch; it needs a
 * one-packet size and is left empty above. `raw --help` lists the options.
 *
 * --threads N: the echo rate only, from N client threads (each its own
 * port) against N server threads in the forked server (ports of --server
 * plus t), as rpc_perf --threads measures it beside erma; a row per size
 * with the total and each thread's rate.
 *
 * --gap-us G polls G us before each ping, and --server-sleeps has the
 * server sleep in the transport whenever it finds no packet: together they
 * measure a lone round trip to a sleeping host, as a lightly loaded
 * service sees it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "bench.h"
#include "erma/errors.h"

static const char usage[] =
    "usage: raw [options]\n"
    "  bare packets over one transport: ping-pong RTT and echo rate, busy-polling\n"
    "  --sizes LIST     data bytes per message, e.g. 32,1K,4K (--size B: one; default 32);\n"
    "                   the rate is measured only for one-packet sizes (<= 1456 B)\n"
    "  --iters N        ping-pongs per size (default 100000, fewer above 4 KB)\n"
    "  --window W       rate: packets in flight (default 60)\n"
    "  --batch B        rate: packets per send call (default 3)\n"
    "  --seconds S      rate: seconds per size (default 2)\n"
    "  --gap-us G       ping-pong: poll G us before each request (default 0): lone\n"
    "                   round trips after an idle spell\n"
    "  --server-sleeps  the server sleeps in the transport whenever it finds no\n"
    "                   packet, instead of busy-polling (as an idle erma endpoint)\n"
    "  --threads N      the echo rate from N client threads against N server\n"
    "                   threads (ports of --server plus t), 1..32\n"
    "  --cpu LIST       CPUs: this process, then the forked server (default: none);\n"
    "                   with --threads N, F (client thread t on CPU F+t, server\n"
    "                   thread t on F+N+t) or 2N CPUs, the clients' then the servers'\n"
    "  --csv            CSV instead of the table\n"
    "  --role R         both (default: fork the server), server (serve --server until\n"
    "                   killed), client (the server runs elsewhere)\n"
    "  --uri URI        the client's URI (default udp://127.0.0.1:0)\n"
    "  --server URI     the server's URI (default udp://127.0.0.1:31850)\n"
    "  -h, --help       this text\n";

#define ONE_PACKET 1456

struct opts {
    const char *uri, *server, *role;
    uint32_t window, batch;
    uint64_t iters;
    bool iters_set;
    double seconds;
    double gap_us;
    bool server_sleeps;
    unsigned threads;               /* --threads; 0: one client */
    int cpus[2][BENCH_MAX_THREADS]; /* --threads: [client, server][t] */
    bool pinned;
};

/* --threads N: its range, the sizes and the threads' CPUs (--cpu F or 2N). */
static void parse_threads(const struct bench_cli *cli, struct opts *o)
{
    const unsigned n = o->threads;
    if (n == 0)
        return;
    if (n > BENCH_MAX_THREADS)
        bench_cli_fail(cli, "--threads must be 1..%d", BENCH_MAX_THREADS);
    for (unsigned i = 0; i < cli->nsizes; i++)
        if (cli->sizes[i] > ONE_PACKET)
            bench_cli_fail(cli, "--threads measures the rate: sizes of one packet (<= %d B)",
                           ONE_PACKET);
    if (cli->ncpus && cli->ncpus != 1 && cli->ncpus != 2 * n)
        bench_cli_fail(cli, "--cpu with --threads %u: one CPU F or %u CPUs", n, 2 * n);
    o->pinned = cli->ncpus > 0;
    for (unsigned t = 0; t < n && o->pinned; t++)
        for (unsigned side = 0; side < 2; side++)
            o->cpus[side][t] = cli->ncpus == 1 ? cli->cpus[0] + (int)(side * n + t)
                                               : cli->cpus[side * n + t];
}

static void parse(struct bench_cli *cli, struct opts *o, int argc, char **argv)
{
    static const struct option lo[] = {
        BENCH_COMMON_OPTIONS,   {"uri", 1, 0, 'u'},    {"server", 1, 0, 's'},
        {"role", 1, 0, 'r'},    {"iters", 1, 0, 'i'},  {"window", 1, 0, 'w'},
        {"batch", 1, 0, 'b'},   {"seconds", 1, 0, 't'}, {"threads", 1, 0, 'T'},
        {"gap-us", 1, 0, 'g'},  {"server-sleeps", 0, 0, 'S'}, {0, 0, 0, 0}};
    bench_cli_init(cli, "raw", usage, lo);
    for (int c; (c = bench_cli_next(cli, argc, argv)) != -1;) {
        switch (c) {
        case 'u': o->uri = optarg; break;
        case 's': o->server = optarg; break;
        case 'r': o->role = optarg; break;
        case 'i': o->iters = bench_cli_u64(cli, optarg); o->iters_set = true; break;
        case 'w': o->window = (uint32_t)bench_cli_u64(cli, optarg); break;
        case 'b': o->batch = (uint32_t)bench_cli_u64(cli, optarg); break;
        case 't': o->seconds = bench_cli_real(cli, optarg); break;
        case 'T': o->threads = (unsigned)bench_cli_u64(cli, optarg); break;
        case 'g': o->gap_us = bench_cli_real(cli, optarg); break;
        case 'S': o->server_sleeps = true; break;
        default: bench_cli_fail(cli, NULL);
        }
    }
    parse_threads(cli, o);
    if (strcmp(o->role, "both") && strcmp(o->role, "server") && strcmp(o->role, "client"))
        bench_cli_fail(cli, "unknown role '%s'", o->role);
    if (o->iters == 0 || o->window == 0 || o->batch == 0 || o->batch > 32 || o->seconds <= 0)
        bench_cli_fail(cli, "--iters, --window, --batch (<= 32) and --seconds must be above 0");
    if (o->gap_us < 0 || o->gap_us > 1e6 || ((o->gap_us > 0 || o->server_sleeps) && o->threads))
        bench_cli_fail(cli, "--gap-us must be 0..1000000; it and --server-sleeps go without "
                       "--threads");
    if (cli->nsizes == 0)
        cli->sizes[cli->nsizes++] = 32;
}

/* Measures one size; prints its row or says what failed. */
static int run_size(const struct opts *o, const struct bench_table *t, uint32_t size)
{
    struct bench_lat lat;
    struct bench_raw_rate rate = {0};
    const uint64_t iters = o->iters_set ? o->iters : bench_iters_for(o->iters, size);
    int rc = bench_raw_pingpong_gap(o->uri, o->server, size, size, iters,
                                    (uint64_t)(o->gap_us * 1000), &lat);
    const char *phase = "ping-pong";
    if (rc == ERMA_OK && size <= ONE_PACKET) {
        phase = "echo rate";
        rc = bench_raw_rate(o->uri, o->server, size, o->window, o->batch, o->seconds, &rate);
    }
    if (rc != ERMA_OK) {
        fprintf(stderr, "raw: %s of %u B, %s -> %s: %s\n", phase, size, o->uri, o->server,
                erma_strerror(rc));
        return 1;
    }
    const char *sep = strstr(o->server, "://");
    char mpps[32] = "", lost[32] = "";
    if (size <= ONE_PACKET) {
        snprintf(mpps, sizeof mpps, "%.3f", rate.mpps);
        snprintf(lost, sizeof lost, "%llu", (unsigned long long)rate.lost);
    }
    bench_table_row(t, "raw,%.*s,%u,%llu,%.2f,%.2f,%.2f,%u,%u,%s,%s",
                    sep ? (int)(sep - o->server) : 0, o->server, size,
                    (unsigned long long)lat.samples, lat.median_us, lat.p99_us, lat.p999_us,
                    o->window, o->batch, mpps, lost);
    return 0;
}

/* --threads: the echo rate of one size from o->threads threads. */
static int run_threads(const struct opts *o, const struct bench_table *t, uint32_t size)
{
    struct bench_raw_rate per[BENCH_MAX_THREADS], total;
    const int rc = bench_raw_rate_threads(o->uri, o->server, size, o->window, o->batch,
                                          o->seconds, o->threads, o->pinned ? o->cpus[0] : NULL,
                                          per, &total);
    if (rc != ERMA_OK) {
        fprintf(stderr, "raw: echo rate of %u B from %u threads -> %s: %s\n", size, o->threads,
                o->server, erma_strerror(rc));
        return 1;
    }
    char rates[BENCH_MAX_THREADS * 8] = "";
    double mn = per[0].mpps, mx = per[0].mpps;
    for (size_t i = 0, pos = 0; i < o->threads; i++) {
        mn = per[i].mpps < mn ? per[i].mpps : mn;
        mx = per[i].mpps > mx ? per[i].mpps : mx;
        const int w = snprintf(rates + pos, sizeof rates - pos, "%s%.3f", i ? "/" : "",
                               per[i].mpps);
        pos = w > 0 && (size_t)w < sizeof rates - pos ? pos + (size_t)w : sizeof rates - 1;
    }
    const char *sep = strstr(o->server, "://");
    bench_table_row(t, "raw,%.*s,%u,%u,%u,%u,%.3f,%.3f,%.3f,%.3f,%llu,%s",
                    sep ? (int)(sep - o->server) : 0, o->server, size, o->threads, o->window,
                    o->batch, total.mpps, total.mpps / o->threads, mn, mx,
                    (unsigned long long)total.lost, rates);
    return 0;
}

/* --threads: servers in a child, a row per size. */
static int main_threads(const struct bench_cli *cli, const struct opts *o)
{
    const uint64_t forever = 100ull * 24 * 3600 * 1000000000ull;
    const int *server_cpus = o->pinned ? o->cpus[1] : NULL;
    if (strcmp(o->role, "server") == 0) {
        const pid_t child = bench_raw_servers_fork(o->server, o->threads, server_cpus, forever);
        return child > 0 && waitpid(child, NULL, 0) == child ? 0 : 1;
    }
    const double longest = o->seconds * cli->nsizes * 2 + 60;
    const pid_t child = strcmp(o->role, "both") == 0
                            ? bench_raw_servers_fork(o->server, o->threads, server_cpus,
                                                     (uint64_t)(longest * 60e9))
                            : 0;
    bench_note(cli->csv, "raw --threads %u: %s -> %s and on, a port per thread, both sides "
               "busy-poll the transport", o->threads, o->uri, o->server);
    struct bench_table t;
    bench_table_start(&t, cli->csv, "bench,transport:9,size,threads,window,batch,mpps,"
                                    "per_thread:10,thread_min:10,thread_max:10,lost,thread_mpps");
    int rc = 0;
    for (unsigned i = 0; i < cli->nsizes && rc == 0; i++)
        rc = run_threads(o, &t, cli->sizes[i]);
    if (child > 0)
        bench_raw_servers_stop(o->uri, o->server, o->threads, child);
    return rc;
}

int main(int argc, char **argv)
{
    struct opts o = {.uri = "udp://127.0.0.1:0", .server = "udp://127.0.0.1:31850",
                     .role = "both", .window = 60, .batch = 3, .iters = 100000, .seconds = 2};
    struct bench_cli cli;
    parse(&cli, &o, argc, argv);
    if (o.threads)
        return main_threads(&cli, &o);
    bench_pin(bench_cli_cpu(&cli, 0));
    if (strcmp(o.role, "server") == 0)
        return bench_raw_server(o.server, 100ull * 24 * 3600 * 1000000000ull, o.server_sleeps) ==
                       ERMA_OK ? 0 : 1;
    const double longest = o.seconds * cli.nsizes * 2 + 60;
    const pid_t child = strcmp(o.role, "both") == 0
                            ? bench_raw_server_fork(o.server, bench_cli_cpu(&cli, 1),
                                                    (uint64_t)(longest * 60e9), o.server_sleeps)
                            : 0;
    bench_note(cli.csv, "raw: %s -> %s, the client busy-polls, the server %s; %.0f us of "
               "polling before each ping", o.uri, o.server,
               o.server_sleeps ? "sleeps when idle" : "busy-polls", o.gap_us);
    struct bench_table t;
    bench_table_start(&t, cli.csv, "bench,transport:9,size,samples,median_us,p99_us,p999_us,"
                                   "window,batch,mpps,lost");
    int rc = 0;
    for (unsigned i = 0; i < cli.nsizes && rc == 0; i++)
        rc = run_size(&o, &t, cli.sizes[i]);
    if (child > 0)
        bench_raw_server_stop(o.uri, o.server, child);
    return rc;
}
