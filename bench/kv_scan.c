/*
 * kv_scan - point GETs on the kv service with and without long SCANs beside
 * them, in one run.
 *
 *   kv_scan [--sizes LIST] [--keys N] [--scan N] [--scan-credits C] [--window W]
 *           [--rounds R] [--round-seconds S] [--no-poll] [--cpu LIST] [--csv]
 *   kv_scan --role server [--server URI]            (on one host: until killed)
 *   kv_scan --role client --server URI [...]        (on another)
 *
 * `kv_scan --help` lists every option. The server (forked here per value
 * size unless --role client) serves GET on its event loop and SCAN on a
 * worker thread. The client loads --keys keys (default 20000) of each
 * --sizes value size (default 100 B), then alternates quiet rounds
 * (closed-loop GETs) and scanning rounds (the same GETs with a SCAN of
 * --scan keys, default 10000, always in flight on a session of
 * --scan-credits credits, default 2; 0: the endpoint's 32), --rounds in all
 * (20) of --round-seconds (0.1). Both endpoints busy-poll (cfg.busy_poll,
 * the measurement condition) unless --no-poll.
 *
 * Output per size: GET latency in each mode over all its rounds, and on
 * the scanning line the ratios scanning / quiet of p50 and p99 as the
 * median over the interleaved pairs of rounds (quiet round, then scanning
 * round), so that a machine that slows down for a while moves both rounds
 * of a pair, and each mode's GETs per second. With --window W (up to 512)
 * W GETs are in flight on W / 8 sessions (a session has ERMA_SESSION_SLOTS
 * requests in flight, the rest would wait in its backlog): a pipelined
 * client's rate, the figure set beside redis-benchmark's -P in bench/peers. Every GET and
 * SCAN is checked; exits 1 if one was wrong.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "erma/errors.h"
#include "erma/sdk/wire.h"

static const char usage[] =
    "usage: kv_scan [options]\n"
    "  point GETs with and without long SCANs beside them (bench/kv_scan.c)\n"
    "  --sizes LIST        value sizes, 1..2048 B (--size B: one; default 100)\n"
    "  --keys N            keys loaded (default 20000)\n"
    "  --scan N            keys per SCAN (default 10000)\n"
    "  --scan-credits C    credits of the SCAN session (default 2; 0: the endpoint's)\n"
    "  --window W          GETs in flight, 1..512 (default 1), on sessions of 8 (a\n"
    "                      session's slots): with more, gets_per_s is the pipelined\n"
    "                      rate (bench/peers sets it beside redis)\n"
    "  --rounds R          rounds, quiet and scanning in turn (default 20)\n"
    "  --round-seconds S   seconds per round (default 0.1)\n"
    "  --no-poll           endpoints sleep when idle (default: busy-poll)\n"
    "  --cpu LIST          CPUs: this process, then the server (default: none)\n"
    "  --csv               CSV instead of the table\n"
    "  --role R            both (default: fork the server), server (serve --server\n"
    "                      until killed), client (the server runs elsewhere)\n"
    "  --uri URI           the client's URI (default udp://127.0.0.1:42300)\n"
    "  --server URI        the server's URI (default udp://127.0.0.1:42310)\n"
    "  -h, --help          this text\n";

static void parse(struct bench_cli *cli, struct bench_kv_scan_opts *o, const char **role,
                  int argc, char **argv)
{
    static const struct option lo[] = {
        BENCH_COMMON_OPTIONS,
        {"uri", 1, 0, 'u'},    {"server", 1, 0, 's'}, {"keys", 1, 0, 'k'},
        {"value", 1, 0, 'v'},  {"scan", 1, 0, 'n'},   {"rounds", 1, 0, 'r'},
        {"round-seconds", 1, 0, 't'}, {"scan-credits", 1, 0, 'C'}, {"window", 1, 0, 'w'},
        {"role", 1, 0, 'R'},   {"no-poll", 0, 0, 'P'}, {0, 0, 0, 0}};
    bench_cli_init(cli, "kv_scan", usage, lo);
    for (int c; (c = bench_cli_next(cli, argc, argv)) != -1;) {
        switch (c) {
        case 'u': o->uri = optarg; break;
        case 's': o->server = optarg; break;
        case 'k': o->keys = (uint32_t)bench_cli_u64(cli, optarg); break;
        case 'v': cli->sizes[0] = bench_cli_size(cli, optarg); cli->nsizes = 1; break;
        case 'n': o->scan_count = (uint32_t)bench_cli_u64(cli, optarg); break;
        case 'r': o->rounds = (uint32_t)bench_cli_u64(cli, optarg); break;
        case 't': o->round_seconds = bench_cli_real(cli, optarg); break;
        case 'C': o->scan_credits = (uint32_t)bench_cli_u64(cli, optarg); break;
        case 'w': o->get_window = (uint32_t)bench_cli_u64(cli, optarg); break;
        case 'R': *role = optarg; break;
        case 'P': o->busy_poll = false; break;
        default: bench_cli_fail(cli, NULL);
        }
    }
    if (strcmp(*role, "both") && strcmp(*role, "server") && strcmp(*role, "client"))
        bench_cli_fail(cli, "unknown role '%s'", *role);
    if (o->keys == 0 || o->keys > 1000000 || o->scan_count == 0 || o->scan_count > o->keys ||
        o->rounds < 2 || o->rounds > 256 || o->round_seconds <= 0 || o->scan_credits > 32 ||
        o->get_window == 0 || o->get_window > 512)
        bench_cli_fail(cli, "--keys (1..10^6), --scan (1..keys), --rounds (2..256), "
                            "--round-seconds, --scan-credits (0..32) or --window (1..512) "
                            "out of range");
    if (cli->nsizes == 0)
        cli->sizes[cli->nsizes++] = 100;
    for (unsigned i = 0; i < cli->nsizes; i++) {
        const uint64_t resp = (uint64_t)o->scan_count * (16 + cli->sizes[i]) + 64;
        if (cli->sizes[i] == 0 || cli->sizes[i] > 2048)
            bench_cli_fail(cli, "value size %u: 1..2048 B", cli->sizes[i]);
        if (resp > ERMA_MAX_MSG_SIZE)
            bench_cli_fail(cli, "a SCAN of %u keys of %u B answers about %llu B, above the "
                                "8 MiB message limit: use a smaller --scan", o->scan_count,
                           cli->sizes[i], (unsigned long long)resp);
    }
}

/* One value size: loads, runs the rounds, prints two lines. */
static int run_size(const struct bench_kv_scan_opts *o, const struct bench_table *t,
                    bool fork_server, int server_cpu)
{
    const pid_t server =
        fork_server ? bench_kv_scan_server_fork(o->server, server_cpu, 600000000000ull,
                                                o->busy_poll)
                    : 0;
    struct bench_kv_scan_result r;
    const int rc = bench_kv_scan(o, &r);
    bench_rpc_server_stop(server);
    if (rc != ERMA_OK) {
        fprintf(stderr, "kv_scan: %u B values, %s -> %s: %s\n", o->value_size, o->uri,
                o->server, erma_strerror(rc));
        return 1;
    }
    const unsigned long long wrong = r.wrong, failed = r.failed;
    /* rounds alternate quiet, scanning: GETs timed in each kind per second */
    const double quiet_s = (o->rounds + 1) / 2 * o->round_seconds,
                 scan_s = o->rounds / 2 * o->round_seconds;
    bench_table_row(t, "kv_scan,%u,quiet,%llu,%.1f,%.1f,%.1f,0,%llu,%llu,,,%.0f", o->value_size,
                    (unsigned long long)r.quiet.samples, r.quiet.median_us, r.quiet.p99_us,
                    r.quiet.p999_us, wrong, failed, (double)r.quiet.samples / quiet_s);
    bench_table_row(t, "kv_scan,%u,scanning,%llu,%.1f,%.1f,%.1f,%llu,%llu,%llu,%.2f,%.2f,%.0f",
                    o->value_size, (unsigned long long)r.scanning.samples,
                    r.scanning.median_us, r.scanning.p99_us, r.scanning.p999_us,
                    (unsigned long long)r.scans, wrong, failed, r.p50_ratio, r.p99_ratio,
                    (double)r.scanning.samples / scan_s);
    return r.wrong ? 1 : 0;
}

int main(int argc, char **argv)
{
    struct bench_kv_scan_opts o = {.uri = "udp://127.0.0.1:42300",
                                   .server = "udp://127.0.0.1:42310",
                                   .keys = 20000, .value_size = 100, .scan_count = 10000,
                                   .rounds = 20, .round_seconds = 0.1, .scan_credits = 2,
                                   .get_window = 1, .busy_poll = true};
    const char *role = "both";
    struct bench_cli cli;
    parse(&cli, &o, &role, argc, argv);
    bench_pin(bench_cli_cpu(&cli, 0));
    if (strcmp(role, "server") == 0) {
        bench_note(cli.csv, "kv_scan server on %s, %s", o.server,
                   o.busy_poll ? "busy-polling" : "sleeping when idle");
        return bench_kv_scan_server(o.server, 100ull * 24 * 3600 * 1000000000ull, o.busy_poll) ==
                       ERMA_OK
                   ? 0
                   : 1;
    }
    bench_note(cli.csv, "kv_scan: %s -> %s, %u keys, %u GETs in flight, SCANs of %u keys on %u "
               "credits, %u rounds of %.2f s; %s; ratios: median over %u pairs of rounds", o.uri,
               o.server, o.keys, o.get_window, o.scan_count, o.scan_credits, o.rounds,
               o.round_seconds,
               o.busy_poll ? "both endpoints busy-poll (cfg.busy_poll)"
                           : "endpoints sleep when idle (--no-poll)",
               o.rounds / 2);
    struct bench_table t;
    bench_table_start(&t, cli.csv, "bench,value,mode:8,gets,p50_us,p99_us,p999_us,scans,wrong,"
                                   "failed,p50_ratio:9,p99_ratio:9,gets_per_s:10");
    for (unsigned i = 0; i < cli.nsizes; i++) {
        o.value_size = cli.sizes[i];
        if (run_size(&o, &t, strcmp(role, "both") == 0, bench_cli_cpu(&cli, 1)) != 0)
            return 1;
    }
    return 0;
}
