/*
 * sim_rate - small-RPC rate between two endpoints on the sim fabric (one
 * thread, no system calls), for counting instructions per RPC with callgrind:
 *
 *   valgrind --tool=callgrind bench/sim_rate --rpcs 200000 [--cc off|on|...]
 *   sim_rate [--rpcs N] [--cc MODE] [--sizes LIST] [--cpu C] [--csv]
 *
 * --cc: on (default), off, no_timely_bypass, no_wheel_bypass, no_batch_clock.
 * 8 sessions, 60 requests in flight, each of --size bytes (default 32)
 * answered by as many. Prints the RPCs done, the rate in the fabric's
 * virtual time and the wall-clock seconds; exits 1 if an RPC failed or the
 * run did not finish in 60 s of virtual time. One process, no server side:
 * --cpu pins it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "erma/clock.h"
#include "erma/endpoint.h"
#include "erma/rpc.h"
#include "erma/sim.h"

static const char usage[] =
    "usage: sim_rate [options]\n"
    "  RPC rate between two endpoints on the sim fabric, in one thread\n"
    "  --rpcs N       RPCs per size (default 200000)\n"
    "  --cc MODE      on (default), off, no_timely_bypass, no_wheel_bypass, no_batch_clock\n"
    "  --sizes LIST   request and response bytes, e.g. 32,1K,4K (--size B: one; default 32)\n"
    "  --cpu C        pin this process to CPU C (default: none)\n"
    "  --csv          CSV instead of the table\n"
    "  -h, --help     this text\n";

#define ECHO 1
#define WINDOW 60
#define SESSIONS 8

static struct erma_endpoint *ep[2];
static struct erma_rpc *rpc[2];
static int sess[SESSIONS];
static struct erma_msgbuf req[WINDOW], resp[WINDOW];
static unsigned long done_count, failed, target;
static unsigned next_sess;

/* Answers with as many bytes as the request had. */
static void echo(struct erma_req *r, void *ctx)
{
    (void)ctx;
    struct erma_msgbuf *m = erma_req_resp_buf(r), own;
    const size_t size = erma_req_size(r);
    if (size > m->max_size && erma_msgbuf_alloc(erma_req_rpc(r), size, &own) == ERMA_OK)
        m = &own;
    erma_msgbuf_resize(m, size < m->max_size ? size : m->max_size);
    erma_req_respond(r, m);
}

static void on_done(struct erma_rpc *c, void *tag, int status, struct erma_msgbuf *m)
{
    (void)m;
    failed += status != ERMA_OK;
    done_count++;
    const size_t k = (size_t)(uintptr_t)tag;
    if (status == ERMA_OK && done_count + WINDOW <= target)
        erma_rpc_call(c, sess[next_sess++ % SESSIONS], ECHO, &req[k], &resp[k], on_done, tag);
}

static bool finished(void *ctx)
{
    (void)ctx;
    return done_count >= target || failed;
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Sets up both endpoints on a fresh fabric and runs target RPCs of size bytes. */
static int run_size(const struct erma_cc_switches *cc, uint32_t size, double *vmrps)
{
    struct erma_sim_cfg sc;
    erma_sim_cfg_default(&sc);
    struct erma_sim *sim;
    struct erma_nexus *nx[2] = {0};
    if (erma_sim_create("rate", &sc, &sim) != ERMA_OK)
        return ERMA_ENOMEM;
    erma_sim_use_clock(sim);
    done_count = failed = next_sess = 0;
    int rc = ERMA_OK;
    for (int h = 0; h < 2 && rc == ERMA_OK; h++) {
        char uri[64];
        snprintf(uri, sizeof uri, "sim://rate/%d:100", h);
        const struct erma_rpc_cfg cfg = {.cc = *cc, .seed = 1};
        rc = erma_nexus_create(NULL, &nx[h]);
        if (rc == ERMA_OK && h == 1)
            rc = erma_handler_register(nx[h], ECHO, echo, ERMA_DISPATCH, NULL);
        if (rc == ERMA_OK)
            rc = erma_endpoint_create(uri, 0, NULL, &ep[h]);
        if (rc == ERMA_OK)
            rc = erma_rpc_create(nx[h], ep[h], &cfg, &rpc[h]);
    }
    for (int s = 0; s < SESSIONS && rc == ERMA_OK; s++)
        if ((sess[s] = erma_session_create(rpc[0], "sim://rate/1:100", 0)) < 0)
            rc = sess[s];
    for (size_t k = 0; k < WINDOW && rc == ERMA_OK; k++) {
        rc = erma_msgbuf_alloc(rpc[0], size, &req[k]);
        if (rc == ERMA_OK)
            rc = erma_msgbuf_alloc(rpc[0], size, &resp[k]);
        if (rc == ERMA_OK)
            rc = erma_rpc_call(rpc[0], sess[next_sess++ % SESSIONS], ECHO, &req[k], &resp[k],
                               on_done, (void *)(uintptr_t)k);
    }
    const uint64_t t0 = erma_now_ns();
    if (rc == ERMA_OK)
        rc = erma_sim_run(sim, ep, 2, 60000000000ull, finished, NULL);
    *vmrps = (double)done_count / (double)(erma_now_ns() - t0 + 1) * 1e3;
    for (int h = 0; h < 2; h++) {
        if (rpc[h])
            erma_rpc_destroy(rpc[h]);
        rpc[h] = NULL;
        erma_endpoint_destroy(ep[h]);
        ep[h] = NULL;
        if (nx[h])
            erma_nexus_destroy(nx[h]);
    }
    erma_sim_destroy(sim);
    return rc == ERMA_OK && failed ? ERMA_EPEERFAILED : rc;
}

static void parse_cc(const struct bench_cli *cli, const char *arg, struct erma_cc_switches *cc)
{
    if (strcmp(arg, "off") == 0)
        cc->off = true;
    else if (strcmp(arg, "no_timely_bypass") == 0)
        cc->no_timely_bypass = true;
    else if (strcmp(arg, "no_wheel_bypass") == 0)
        cc->no_wheel_bypass = true;
    else if (strcmp(arg, "no_batch_clock") == 0)
        cc->no_batch_clock = true;
    else if (strcmp(arg, "on") != 0)
        bench_cli_fail(cli, "unknown --cc mode '%s'", arg);
}

int main(int argc, char **argv)
{
    target = 200000;
    struct erma_cc_switches cc = {0};
    const char *ccname = "on";
    static const struct option lo[] = {BENCH_COMMON_OPTIONS, {"rpcs", 1, 0, 'n'},
                                       {"cc", 1, 0, 'c'}, {0, 0, 0, 0}};
    struct bench_cli cli;
    bench_cli_init(&cli, "sim_rate", usage, lo);
    for (int c; (c = bench_cli_next(&cli, argc, argv)) != -1;) {
        if (c == 'n')
            target = (unsigned long)bench_cli_u64(&cli, optarg);
        else if (c == 'c')
            parse_cc(&cli, ccname = optarg, &cc);
        else
            bench_cli_fail(&cli, NULL);
    }
    if (target < WINDOW)
        bench_cli_fail(&cli, "--rpcs must be at least %d", WINDOW);
    if (cli.nsizes == 0)
        cli.sizes[cli.nsizes++] = 32;
    bench_pin(bench_cli_cpu(&cli, 0));
    struct bench_table t;
    bench_table_start(&t, cli.csv, "bench,size,cc:16,rpcs,virtual_mrps:12,wall_s");
    for (unsigned i = 0; i < cli.nsizes; i++) {
        double vmrps = 0;
        const double w0 = wall_s();
        const int rc = run_size(&cc, cli.sizes[i], &vmrps);
        if (rc != ERMA_OK) {
            fprintf(stderr, "sim_rate: %u B, cc %s: %lu of %lu RPCs done, %lu failed: %s\n",
                    cli.sizes[i], ccname, done_count, target, failed, erma_strerror(rc));
            return 1;
        }
        bench_table_row(&t, "sim_rate,%u,%s,%lu,%.3f,%.2f", cli.sizes[i], ccname, done_count,
                        vmrps, wall_s() - w0);
    }
    return 0;
}
