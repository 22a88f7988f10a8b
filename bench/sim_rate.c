/*
 * sim_rate - small-RPC rate between two endpoints on the sim fabric (one
 * thread, no system calls), for counting instructions per RPC with callgrind:
 *
 *   valgrind --tool=callgrind bench/sim_rate --rpcs 200000 [--cc off|on|...]
 *   sim_rate [--rpcs N] [--cc MODE] [--op rpc|secure|read] [--window W] [--sizes LIST]
 *            [--cpu C] [--csv]
 *
 * --op secure: the RPCs over authenticated, encrypted sessions (a psk);
 * read: one-sided READs of --size bytes from a region of the other
 * endpoint instead (sealed as always, 60 in flight), to count the target's
 * serving path beside an RPC's dispatch.
 * --cc: on (default), off, no_timely_bypass, no_wheel_bypass, no_batch_clock.
 * 8 sessions, --window requests in flight (60; 1 counts a ping-pong's
 * path), each of --size bytes (default 32)
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
#include "erma/rma.h"
#include "erma/rpc.h"
#include "erma/sim.h"

static const char usage[] =
    "usage: sim_rate [options]\n"
    "  RPC rate between two endpoints on the sim fabric, in one thread\n"
    "  --rpcs N       RPCs per size (default 200000)\n"
    "  --cc MODE      on (default), off, no_timely_bypass, no_wheel_bypass, no_batch_clock\n"
    "  --op OP        rpc (default), secure (sealed sessions) or read (one-sided READs)\n"
    "  --window W     requests (or READs) in flight, 1..60 (default 60)\n"
    "  --sizes LIST   request and response bytes, e.g. 32,1K,4K (--size B: one; default 32)\n"
    "  --cpu C        pin this process to CPU C (default: none)\n"
    "  --csv          CSV instead of the table\n"
    "  -h, --help     this text\n";

#define ECHO 1
#define WINDOW 60 /* the most in flight */
#define SESSIONS 8

enum op { OP_RPC, OP_SECURE, OP_READ };

static struct erma_endpoint *ep[2];
static struct erma_rpc *rpc[2];
static struct erma_rma *rma[2];
static struct erma_rma_cmd cmd; /* READ: the command, tag and local set per op */
static uint8_t *region_mem, *local_mem;
static int sess[SESSIONS];
static struct erma_msgbuf req[WINDOW], resp[WINDOW];
static unsigned long done_count, failed, target;
static unsigned next_sess, window = WINDOW;

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
    if (status == ERMA_OK && done_count + window <= target)
        erma_rpc_call(c, sess[next_sess++ % SESSIONS], ECHO, &req[k], &resp[k], on_done, tag);
}

static int submit_read(size_t k)
{
    cmd.tag = k;
    cmd.local = local_mem + k * cmd.len;
    cmd.offset = (uint64_t)k * cmd.len;
    const int rc = erma_rma_submit(rma[0], &cmd);
    return rc < 0 ? rc : ERMA_OK;
}

/* Called by erma_sim_run after each step: READ completions are taken here. */
static bool finished(void *ctx)
{
    (void)ctx;
    struct erma_rma_completion c[64];
    for (int n; rma[0] && (n = erma_rma_poll(rma[0], c, 64)) > 0;)
        for (int i = 0; i < n; i++) {
            failed += c[i].status != ERMA_OK;
            done_count++;
            if (c[i].status == ERMA_OK && done_count + window <= target)
                failed += submit_read((size_t)c[i].tag) != ERMA_OK;
        }
    return done_count >= target || failed;
}

/* The READ side: an engine on each endpoint, a region of WINDOW x size
 * bytes on endpoint 1, its key for endpoint 0, window READs started. */
static int reads_up(uint32_t size)
{
    const size_t len = (size_t)WINDOW * size;
    region_mem = calloc(1, len);
    local_mem = calloc(1, len);
    if (!region_mem || !local_mem)
        return ERMA_ENOMEM;
    int rc = ERMA_OK;
    for (int h = 0; h < 2 && rc == ERMA_OK; h++) {
        const struct erma_rma_cfg cfg = {.identity = 10 + (uint64_t)h, .slots = 2 * WINDOW,
                                         .cc_off = true};
        rc = erma_rma_create(ep[h], &cfg, &rma[h]);
    }
    uint32_t region;
    if (rc == ERMA_OK)
        rc = erma_region_register(rma[1], region_mem, len, ERMA_RMA_PERM_READ, &region);
    if (rc == ERMA_OK)
        rc = erma_region_export_uri(rma[1], region, erma_rma_identity(rma[0]), "sim://rate/0:100",
                                    &cmd.rkey);
    const int peer = rc == ERMA_OK ? erma_rma_peer(rma[0], "sim://rate/1:100", 0) : rc;
    if (peer < 0)
        return peer;
    cmd.op = ERMA_RMA_READ;
    cmd.peer = peer;
    cmd.len = size;
    for (size_t k = 0; k < window && rc == ERMA_OK; k++)
        rc = submit_read(k);
    return rc;
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Sets up both endpoints on a fresh fabric and runs target RPCs (or
 * READs) of size bytes. */
static int run_size(const struct erma_cc_switches *cc, enum op op, uint32_t size, double *vmrps)
{
    static const uint8_t psk[ERMA_PSK_BYTES] = "sim_rate: a key for the test";
    const struct erma_nexus_cfg ncfg = {.psk = op == OP_SECURE ? psk : NULL};
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
        rc = erma_nexus_create(&ncfg, &nx[h]);
        if (rc == ERMA_OK && h == 1)
            rc = erma_handler_register(nx[h], ECHO, echo, ERMA_DISPATCH, NULL);
        if (rc == ERMA_OK)
            rc = erma_endpoint_create(uri, 0, NULL, &ep[h]);
        /* READs: no RPC engine, whose idle loop passes were counted
         * against them, as the RPC runs carry no one-sided engine */
        if (rc == ERMA_OK && op != OP_READ)
            rc = erma_rpc_create(nx[h], ep[h], &cfg, &rpc[h]);
    }
    if (rc == ERMA_OK && op == OP_READ)
        rc = reads_up(size);
    for (int s = 0; s < SESSIONS && rc == ERMA_OK && op != OP_READ; s++)
        if ((sess[s] = erma_session_create(rpc[0], "sim://rate/1:100", 0)) < 0)
            rc = sess[s];
    for (size_t k = 0; k < window && rc == ERMA_OK && op != OP_READ; k++) {
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
        if (rma[h])
            erma_rma_destroy(rma[h]);
        rma[h] = NULL;
        if (rpc[h])
            erma_rpc_destroy(rpc[h]);
        rpc[h] = NULL;
        erma_endpoint_destroy(ep[h]);
        ep[h] = NULL;
        if (nx[h])
            erma_nexus_destroy(nx[h]);
    }
    erma_sim_destroy(sim);
    free(region_mem);
    free(local_mem);
    region_mem = local_mem = NULL;
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

static enum op parse_op(const struct bench_cli *cli, const char *arg, const char *const *ops)
{
    for (int i = OP_RPC; i <= OP_READ; i++)
        if (strcmp(arg, ops[i]) == 0)
            return (enum op)i;
    bench_cli_fail(cli, "unknown --op '%s'", arg);
}

int main(int argc, char **argv)
{
    target = 200000;
    struct erma_cc_switches cc = {0};
    const char *ccname = "on";
    static const struct option lo[] = {BENCH_COMMON_OPTIONS, {"rpcs", 1, 0, 'n'},
                                       {"cc", 1, 0, 'c'}, {"op", 1, 0, 'o'}, {"window", 1, 0, 'w'},
                                       {0, 0, 0, 0}};
    static const char *const ops[] = {"rpc", "secure", "read"};
    enum op op = OP_RPC;
    struct bench_cli cli;
    bench_cli_init(&cli, "sim_rate", usage, lo);
    for (int c; (c = bench_cli_next(&cli, argc, argv)) != -1;) {
        if (c == 'n')
            target = (unsigned long)bench_cli_u64(&cli, optarg);
        else if (c == 'c')
            parse_cc(&cli, ccname = optarg, &cc);
        else if (c == 'o')
            op = parse_op(&cli, optarg, ops);
        else if (c == 'w')
            window = (unsigned)bench_cli_u64(&cli, optarg);
        else
            bench_cli_fail(&cli, NULL);
    }
    if (window < 1 || window > WINDOW)
        bench_cli_fail(&cli, "--window must be 1..%d", WINDOW);
    if (target < window)
        bench_cli_fail(&cli, "--rpcs must be at least --window (%u)", window);
    if (cli.nsizes == 0)
        cli.sizes[cli.nsizes++] = 32;
    bench_pin(bench_cli_cpu(&cli, 0));
    struct bench_table t;
    for (unsigned i = 0; i < cli.nsizes; i++)
        if (op == OP_READ && (cli.sizes[i] < 1 || cli.sizes[i] > ERMA_RMA_MAX_OP))
            bench_cli_fail(&cli, "--op read: sizes of 1..%d bytes", ERMA_RMA_MAX_OP);
    bench_table_start(&t, cli.csv, "bench,op,size,cc:16,ops,virtual_mops:12,wall_s");
    for (unsigned i = 0; i < cli.nsizes; i++) {
        double vmrps = 0;
        const double w0 = wall_s();
        const int rc = run_size(&cc, op, cli.sizes[i], &vmrps);
        if (rc != ERMA_OK) {
            fprintf(stderr, "sim_rate: %u B, cc %s: %lu of %lu RPCs done, %lu failed: %s\n",
                    cli.sizes[i], ccname, done_count, target, failed, erma_strerror(rc));
            return 1;
        }
        bench_table_row(&t, "sim_rate,%s,%u,%s,%lu,%.3f,%.2f", ops[op], cli.sizes[i], ccname,
                        done_count, vmrps, wall_s() - w0);
    }
    return 0;
}
