/*
 * incast - N clients stream large requests to one server on the sim fabric
 * (virtual time, 25 Gb/s links, 12 MiB switch buffer per port, so that
 * without CC the credits, not drops, bound the queue, as in eRPC's
 * Table 6.4), with and without congestion control.
 *
 *   incast [--clients 20,50,100] [--sizes LIST] [--buffer BYTES]
 *          [--measure-ms MS] [--warmup-ms MS] [--step-div D] [--ai-span S]
 *          [--cpu C] [--csv]
 *
 * `incast --help` lists the options. --sizes: request sizes (default 8 MiB;
 * responses are 32 B). --step-div D sets Timely's additive step to link / D
 * (default 1000), --ai-span S its ai_span (default 1, as eRPC). One process
 * in virtual time: no server side, --cpu pins it. A row per size, client
 * count and CC setting: goodput, share of the link, RTT p50/p99 per packet,
 * drops, retransmissions, the deepest queue and the slowest client's share.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "erma/errors.h"

static const char usage[] =
    "usage: incast [options]\n"
    "  N clients stream requests to one server on the sim fabric, CC on and off\n"
    "  --clients LIST    client counts (default 20,50,100)\n"
    "  --sizes LIST      request sizes (--size B: one; default 8M)\n"
    "  --buffer BYTES    switch buffer per port (default 12M)\n"
    "  --measure-ms MS   measured interval, virtual (default 40)\n"
    "  --warmup-ms MS    warm-up, virtual (default 10)\n"
    "  --step-div D      Timely additive step = link / D (default 1000)\n"
    "  --ai-span S       Timely ai_span (default 1)\n"
    "  --cpu C           pin this process to CPU C (default: none)\n"
    "  --csv             CSV instead of the table\n"
    "  -h, --help        this text\n";

static int run(struct bench_incast_cfg *cfg, const struct bench_table *t, const char *clients)
{
    char list[256];
    snprintf(list, sizeof list, "%s", clients);
    for (char *save, *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        cfg->clients = (unsigned)atoi(tok);
        for (int cc = 1; cc >= 0; cc--) {
            cfg->cc = cc;
            struct bench_incast_result r;
            const int rc = bench_incast(cfg, &r);
            if (rc != ERMA_OK) {
                fprintf(stderr, "incast: %u clients, %u B requests, CC %s: %s\n", cfg->clients,
                        cfg->size, cc ? "on" : "off", erma_strerror(rc));
                return 1;
            }
            bench_table_row(t, "incast,%u,%s,%.2f,%.3f,%.3f,%.1f,%.1f,%llu,%llu,%.0f,%.2f,%u",
                            cfg->clients, cc ? "on" : "off", r.goodput_gbps, r.link_share,
                            r.payload_share, r.p50_rtt_us, r.p99_rtt_us,
                            (unsigned long long)r.drops, (unsigned long long)r.retransmits,
                            r.max_queue_bytes / 1024.0, r.min_client_share, cfg->size);
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *clients = "20,50,100";
    struct bench_incast_cfg cfg = {.link_bps = 25000000000ull, .buffer = 12u << 20,
                                   .warmup_ns = 10000000, .measure_ns = 40000000, .seed = 1};
    static const struct option lo[] = {BENCH_COMMON_OPTIONS,    {"clients", 1, 0, 'n'},
                                       {"buffer", 1, 0, 'b'},   {"measure-ms", 1, 0, 'm'},
                                       {"warmup-ms", 1, 0, 'w'}, {"step-div", 1, 0, 'd'},
                                       {"ai-span", 1, 0, 'a'},   {0, 0, 0, 0}};
    struct bench_cli cli;
    bench_cli_init(&cli, "incast", usage, lo);
    for (int c; (c = bench_cli_next(&cli, argc, argv)) != -1;) {
        switch (c) {
        case 'n': {
            uint32_t n[BENCH_MAX_SIZES];
            const unsigned k = bench_cli_sizes(&cli, clients = optarg, n, BENCH_MAX_SIZES);
            for (unsigned i = 0; i < k; i++)
                if (n[i] < 1 || n[i] > 1000)
                    bench_cli_fail(&cli, "--clients: %u is not 1..1000", n[i]);
            break;
        }
        case 'b': cfg.buffer = bench_cli_size(&cli, optarg); break;
        case 'm': cfg.measure_ns = bench_cli_u64(&cli, optarg) * 1000000; break;
        case 'w': cfg.warmup_ns = bench_cli_u64(&cli, optarg) * 1000000; break;
        case 'd': cfg.step_div = bench_cli_real(&cli, optarg); break;
        case 'a': cfg.ai_span = bench_cli_real(&cli, optarg); break;
        default: bench_cli_fail(&cli, NULL);
        }
    }
    if (cli.nsizes == 0)
        cli.sizes[cli.nsizes++] = 8u << 20;
    bench_pin(bench_cli_cpu(&cli, 0));
    struct bench_table t;
    bench_table_start(&t, cli.csv, "bench,clients,cc,goodput_gbps:12,link_share:10,"
                                   "payload_share:13,p50_rtt_us:10,p99_rtt_us:10,drops,"
                                   "retransmits:11,max_queue_kb:12,min_client_share:16,size");
    for (unsigned i = 0; i < cli.nsizes; i++) {
        cfg.size = cli.sizes[i];
        if (run(&cfg, &t, clients) != 0)
            return 1;
    }
    return 0;
}
