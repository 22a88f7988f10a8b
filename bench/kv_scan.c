/*
 * kv_scan - point GETs on the kv service with and without long SCANs beside
 * them, in one run.
 *
 *   kv_scan [--uri CLIENT] [--server SERVER] [--keys N] [--value B]
 *           [--scan N] [--scan-credits C] [--rounds R] [--round-seconds S]
 *           [--cpu C]
 *
 * The server (another process, pinned to --cpu, default none) serves GET on
 * its event loop and SCAN on a worker thread. The client loads --keys keys
 * (default 20000) of --value bytes (100), then alternates quiet rounds
 * (closed-loop GETs) and scanning rounds (the same GETs with a SCAN of
 * --scan keys, default 10000, always in flight on a session of
 * --scan-credits credits, default 2; 0: the endpoint's 32), --rounds in all
 * (20) of --round-seconds (0.1). CSV: GET latency in each mode and the ratio
 * scanning / quiet of p50 and p99. Exits 1 if any value was wrong.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "erma/errors.h"

int main(int argc, char **argv)
{
    struct bench_kv_scan_opts o = {.uri = "udp://127.0.0.1:42300",
                                   .server = "udp://127.0.0.1:42310",
                                   .keys = 20000, .value_size = 100, .scan_count = 10000,
                                   .rounds = 20, .round_seconds = 0.1, .scan_credits = 2};
    int cpu = -1;
    static const struct option lo[] = {
        {"uri", 1, 0, 'u'}, {"server", 1, 0, 's'}, {"keys", 1, 0, 'k'}, {"value", 1, 0, 'v'},
        {"scan", 1, 0, 'n'}, {"rounds", 1, 0, 'r'}, {"round-seconds", 1, 0, 't'},
        {"cpu", 1, 0, 'c'}, {"scan-credits", 1, 0, 'C'}, {0, 0, 0, 0}};
    for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        switch (c) {
        case 'u': o.uri = optarg; break;
        case 's': o.server = optarg; break;
        case 'k': o.keys = (uint32_t)atoi(optarg); break;
        case 'v': o.value_size = (uint32_t)atoi(optarg); break;
        case 'n': o.scan_count = (uint32_t)atoi(optarg); break;
        case 'r': o.rounds = (uint32_t)atoi(optarg); break;
        case 't': o.round_seconds = atof(optarg); break;
        case 'c': cpu = atoi(optarg); break;
        case 'C': o.scan_credits = (uint32_t)atoi(optarg); break;
        default:
            fprintf(stderr, "usage: see the comment at the top of bench/kv_scan.c\n");
            return 2;
        }
    }
    const pid_t server = bench_kv_scan_server_fork(o.server, cpu, 600000000000ull);
    struct bench_kv_scan_result r;
    const int rc = bench_kv_scan(&o, &r);
    bench_rpc_server_stop(server);
    if (rc != ERMA_OK) {
        fprintf(stderr, "kv_scan: %s\n", erma_strerror(rc));
        return 1;
    }
    printf("bench,mode,gets,p50_us,p99_us,p999_us,scans,wrong,failed\n");
    printf("kv_scan,quiet,%llu,%.1f,%.1f,%.1f,0,%llu,%llu\n",
           (unsigned long long)r.quiet.samples, r.quiet.median_us, r.quiet.p99_us,
           r.quiet.p999_us, (unsigned long long)r.wrong, (unsigned long long)r.failed);
    printf("kv_scan,scanning,%llu,%.1f,%.1f,%.1f,%llu,%llu,%llu\n",
           (unsigned long long)r.scanning.samples, r.scanning.median_us, r.scanning.p99_us,
           r.scanning.p999_us, (unsigned long long)r.scans, (unsigned long long)r.wrong,
           (unsigned long long)r.failed);
    printf("kv_scan,ratio,p50 %.2f,p99 %.2f\n", r.scanning.median_us / r.quiet.median_us,
           r.scanning.p99_us / r.quiet.p99_us);
    return r.wrong ? 1 : 0;
}
