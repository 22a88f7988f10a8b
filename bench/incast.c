/*
 * incast - N clients stream 8 MiB requests to one server on the sim fabric
 * (virtual time, 25 Gb/s links, 12 MiB switch buffer per port, so that
 * without CC the credits, not drops, bound the queue, as in eRPC's
 * Table 6.4), with and without congestion control. CSV to stdout.
 *
 *   incast [--clients 20,50,100] [--size BYTES] [--buffer BYTES]
 *          [--measure-ms MS] [--warmup-ms MS] [--step-div D] [--ai-span S]
 *
 * --step-div D sets Timely's additive step to link / D (default 1000),
 * --ai-span S its ai_span (default 1, as eRPC).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "erma/errors.h"

int main(int argc, char **argv)
{
    char list[256] = "20,50,100";
    struct bench_incast_cfg cfg = {.size = 8u << 20, .link_bps = 25000000000ull,
                                   .buffer = 12u << 20, .warmup_ns = 10000000,
                                   .measure_ns = 40000000, .seed = 1};
    static const struct option lo[] = {{"clients", 1, 0, 'n'}, {"size", 1, 0, 's'},
                                       {"buffer", 1, 0, 'b'},  {"measure-ms", 1, 0, 'm'},
                                       {"warmup-ms", 1, 0, 'w'}, {"step-div", 1, 0, 'd'},
                                       {"ai-span", 1, 0, 'a'},   {0, 0, 0, 0}};
    for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        switch (c) {
        case 'n': snprintf(list, sizeof list, "%s", optarg); break;
        case 's': cfg.size = (uint32_t)atoi(optarg); break;
        case 'b': cfg.buffer = strtoull(optarg, NULL, 10); break;
        case 'm': cfg.measure_ns = strtoull(optarg, NULL, 10) * 1000000; break;
        case 'w': cfg.warmup_ns = strtoull(optarg, NULL, 10) * 1000000; break;
        case 'd': cfg.step_div = atof(optarg); break;
        case 'a': cfg.ai_span = atof(optarg); break;
        default: fprintf(stderr, "usage: see bench/incast.c\n"); return 2;
        }
    }
    printf("bench,clients,cc,goodput_gbps,link_share,payload_share,p50_rtt_us,p99_rtt_us,"
           "drops,retransmits,max_queue_kb,min_client_share\n");
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        cfg.clients = (unsigned)atoi(tok);
        for (int cc = 1; cc >= 0; cc--) {
            cfg.cc = cc;
            struct bench_incast_result r;
            const int rc = bench_incast(&cfg, &r);
            if (rc != ERMA_OK) {
                fprintf(stderr, "incast %u: %s\n", cfg.clients, erma_strerror(rc));
                return 1;
            }
            printf("incast,%u,%s,%.2f,%.3f,%.3f,%.1f,%.1f,%llu,%llu,%.0f,%.2f\n", cfg.clients,
                   cc ? "on" : "off", r.goodput_gbps, r.link_share, r.payload_share,
                   r.p50_rtt_us, r.p99_rtt_us, (unsigned long long)r.drops,
                   (unsigned long long)r.retransmits, r.max_queue_bytes / 1024.0,
                   r.min_client_share);
            fflush(stdout);
        }
    }
    return 0;
}
