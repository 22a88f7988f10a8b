/*
 * multipath_sim - 8 MiB RPC goodput with 1 and with 4 virtual paths on the
 * sim fabric, in virtual time (the same figures on every machine), against
 * random loss on every path:
 *
 *   multipath_sim [--losses LIST] [--messages N] [--csv]
 *
 * A 2-host fabric with 25 Gb/s links and 4 ECMP core paths at 12.5 Gb/s
 * each (one path carries half a host link, two fill it), rto_ns 200 us.
 * The client's 4 ports are chosen so that its flows, and the server's
 * answers, take the 4 paths. For each loss rate (default 0, 1e-4, 1e-3,
 * 3e-3, 1e-2) a 1-path session with eRPC's go-back-N recovery
 * (erma_rpc_cfg.go_back_n, recovery "gbn"), a 1-path and a 4-path session
 * with selective acknowledgement ("sack") each send --messages
 * (default 4) 8 MiB requests, one at a time, answered with 32 bytes; the
 * goodput counts request bytes. Prints a line per run (CSV with --csv) and
 * exits 1 when an RPC fails or a run does not finish in 60 s of virtual
 * time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "erma/endpoint.h"
#include "erma/rpc.h"
#include "erma/sim.h"

static const char usage[] =
    "usage: multipath_sim [options]\n"
    "  8 MiB RPC goodput over 1 and 4 virtual paths on the sim fabric, against loss,\n"
    "  beside 1 path with go-back-N\n"
    "  --losses LIST  loss rates on every path, e.g. 0,1e-3,1e-2\n"
    "                 (default 0,1e-4,1e-3,3e-3,1e-2)\n"
    "  --messages N   8 MiB requests per run (default 4)\n"
    "  --csv          CSV instead of the table\n"
    "  -h, --help     this text\n";

#define ECHO 1
#define PATHS 4
#define SERVER_PORT 31850
#define MSG (8u << 20)

struct run {
    double gbps;
    struct erma_rpc_stats st;
    uint64_t lost;
};

static void on_done(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *m)
{
    (void)rpc;
    (void)m;
    *(int *)tag = status == ERMA_OK ? 1 : -1;
}

static bool flag_set(void *ctx)
{
    return *(int *)ctx != 0;
}

static int run_one(double loss, unsigned paths, bool gbn, unsigned messages, struct run *r)
{
    static unsigned serial;
    char name[32], uri[2][64];
    snprintf(name, sizeof name, "mp%u", serial++);
    struct erma_sim_cfg sc;
    erma_sim_cfg_default(&sc);
    sc.paths = PATHS;
    sc.path_bps = sc.link_bps / 2;
    sc.loss = loss;
    struct erma_sim *sim;
    if (erma_sim_create(name, &sc, &sim) != ERMA_OK)
        return -1;
    erma_sim_use_clock(sim);
    const uint16_t base = bench_sim_spread_port(sim, PATHS, SERVER_PORT);
    snprintf(uri[0], sizeof uri[0], "sim://%s/0:%u", name, base);
    snprintf(uri[1], sizeof uri[1], "sim://%s/1:%u", name, SERVER_PORT);
    struct erma_nexus *nx[2] = {0};
    struct erma_endpoint *ep[2] = {0};
    struct erma_rpc *rpc[2] = {0};
    const struct erma_endpoint_cfg ec = {.paths = paths};
    const struct erma_rpc_cfg rc = {.rto_ns = 200000, .seed = 42, .go_back_n = gbn};
    int ok = base ? 0 : -1;
    for (int h = 0; h < 2 && ok == 0; h++)
        if (erma_nexus_create(NULL, &nx[h]) != ERMA_OK ||
            erma_handler_register(nx[h], ECHO, bench_respond_32, ERMA_DISPATCH, NULL) != ERMA_OK ||
            erma_endpoint_create(uri[h], 0, &ec, &ep[h]) != ERMA_OK ||
            erma_rpc_create(nx[h], ep[h], &rc, &rpc[h]) != ERMA_OK)
            ok = -1;
    struct erma_msgbuf req = {0}, resp = {0};
    int sess = -1;
    if (ok == 0 && ((sess = erma_session_create(rpc[0], uri[1], 0)) < 0 ||
                    erma_msgbuf_alloc(rpc[0], MSG, &req) != ERMA_OK ||
                    erma_msgbuf_alloc(rpc[0], 64, &resp) != ERMA_OK))
        ok = -1;
    for (int i = 0; ok == 0 && i < 1000 && !erma_session_connected(rpc[0], sess); i++)
        erma_sim_run(sim, ep, 2, 100000, NULL, NULL);
    const uint64_t t0 = erma_sim_now(sim);
    for (unsigned m = 0; ok == 0 && m < messages; m++) {
        int done = 0;
        memset(req.data, (int)m, MSG);
        if (erma_rpc_call(rpc[0], sess, ECHO, &req, &resp, on_done, &done) != ERMA_OK ||
            erma_sim_run(sim, ep, 2, 60000000000ull, flag_set, &done) != ERMA_OK || done != 1)
            ok = -1;
    }
    if (ok == 0) {
        struct erma_sim_stats fs;
        erma_sim_get_stats(sim, &fs);
        r->gbps = (double)messages * MSG * 8 / (double)(erma_sim_now(sim) - t0);
        r->lost = fs.drop_loss;
        erma_rpc_get_stats(rpc[0], &r->st);
    }
    if (req.mem)
        erma_msgbuf_free(rpc[0], &req);
    if (resp.mem)
        erma_msgbuf_free(rpc[0], &resp);
    for (int h = 0; h < 2; h++) {
        erma_rpc_destroy(rpc[h]);
        erma_endpoint_destroy(ep[h]);
        erma_nexus_destroy(nx[h]);
    }
    erma_sim_destroy(sim);
    return ok;
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {BENCH_COMMON_OPTIONS,
                                       {"losses", 1, 0, 'l'},
                                       {"messages", 1, 0, 'm'},
                                       {0, 0, 0, 0}};
    struct bench_cli cli;
    const char *losses = "0,1e-4,1e-3,3e-3,1e-2";
    unsigned messages = 4;
    bench_cli_init(&cli, "multipath_sim", usage, lo);
    for (int c; (c = bench_cli_next(&cli, argc, argv)) != -1;) {
        switch (c) {
        case 'l': losses = optarg; break;
        case 'm': messages = (unsigned)bench_cli_u64(&cli, optarg); break;
        default: bench_cli_fail(&cli, NULL);
        }
    }
    if (messages == 0)
        bench_cli_fail(&cli, "--messages must be at least 1");
    struct bench_table t;
    bench_table_start(&t, cli.csv,
                      "bench,loss:8,paths:5,recovery:8,gbps,lost,sent_again,fast,pruned");
    char *list = strdup(losses);
    int status = 0;
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        char *end;
        const double loss = strtod(tok, &end);
        if (*end || loss < 0 || loss >= 1)
            bench_cli_fail(&cli, "bad loss rate '%s'", tok);
        for (unsigned v = 0; v < 3; v++) {
            const unsigned paths = v == 2 ? PATHS : 1;
            const bool gbn = v == 0;
            struct run r = {0};
            if (run_one(loss, paths, gbn, messages, &r) != 0) {
                fprintf(stderr, "multipath_sim: the run at loss %g with %u paths failed\n", loss,
                        paths);
                status = 1;
                continue;
            }
            bench_table_row(&t, "multipath_sim,%g,%u,%s,%.3f,%llu,%llu,%llu,%llu", loss, paths,
                            gbn ? "gbn" : "sack", r.gbps, (unsigned long long)r.lost,
                            (unsigned long long)r.st.retransmitted_pkts,
                            (unsigned long long)r.st.fast_retransmits,
                            (unsigned long long)r.st.paths_pruned);
        }
    }
    free(list);
    return status;
}
