/*
 * sim_rate - small-RPC rate between two endpoints on the sim fabric (one
 * thread, no syscalls), for counting instructions per RPC with callgrind:
 *
 *   valgrind --tool=callgrind bench/sim_rate --rpcs 200000 [--cc off|on|...]
 *
 * --cc: on (default), off, no_timely_bypass, no_wheel_bypass, no_batch_clock.
 * 8 sessions, 60 requests of 32 B in flight, issued in batches of 3.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "erma/clock.h"
#include "erma/rpc.h"
#include "erma/sim.h"

#define ECHO 1
#define WINDOW 60
#define SESSIONS 8

static struct erma_rpc *rpc[2];
static int sess[SESSIONS];
static struct erma_msgbuf req[WINDOW], resp[WINDOW];
static unsigned long done_count, target;
static unsigned next_sess;

static void echo(struct erma_req *r, void *ctx)
{
    (void)ctx;
    struct erma_msgbuf *m = erma_req_resp_buf(r);
    erma_resize_msgbuf(m, 32);
    erma_enqueue_response(r, m);
}

static void on_done(struct erma_rpc *c, void *tag, int status, struct erma_msgbuf *m)
{
    (void)m;
    if (status != ERMA_OK)
        exit(1);
    done_count++;
    const size_t k = (size_t)(uintptr_t)tag;
    if (done_count + WINDOW <= target)
        erma_enqueue_request(c, sess[next_sess++ % SESSIONS], ECHO, &req[k], &resp[k], on_done, tag);
}

static bool finished(void *ctx)
{
    (void)ctx;
    return done_count >= target;
}

int main(int argc, char **argv)
{
    target = 200000;
    struct erma_cc_switches cc = {0};
    static const struct option lo[] = {{"rpcs", 1, 0, 'n'}, {"cc", 1, 0, 'c'}, {0, 0, 0, 0}};
    for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        if (c == 'n')
            target = strtoul(optarg, NULL, 10);
        else if (c == 'c' && strcmp(optarg, "off") == 0)
            cc.off = true;
        else if (c == 'c' && strcmp(optarg, "no_timely_bypass") == 0)
            cc.no_timely_bypass = true;
        else if (c == 'c' && strcmp(optarg, "no_wheel_bypass") == 0)
            cc.no_wheel_bypass = true;
        else if (c == 'c' && strcmp(optarg, "no_batch_clock") == 0)
            cc.no_batch_clock = true;
        else if (c != 'c' || strcmp(optarg, "on") != 0)
            return 2;
    }
    struct erma_sim_cfg sc;
    erma_sim_cfg_default(&sc);
    struct erma_sim *sim;
    struct erma_nexus *nx[2];
    if (erma_sim_create("rate", &sc, &sim) != ERMA_OK)
        return 1;
    erma_sim_use_clock(sim);
    for (int h = 0; h < 2; h++) {
        char uri[64];
        snprintf(uri, sizeof uri, "sim://rate/%d:100", h);
        const struct erma_rpc_cfg cfg = {.cc = cc, .seed = 1};
        if (erma_nexus_create(uri, NULL, &nx[h]) != ERMA_OK ||
            (h == 1 && erma_register_handler(nx[h], ECHO, echo, ERMA_DISPATCH, NULL)) ||
            erma_rpc_create(nx[h], 0, &cfg, &rpc[h]) != ERMA_OK)
            return 1;
    }
    for (int s = 0; s < SESSIONS; s++)
        sess[s] = erma_create_session(rpc[0], "sim://rate/1:100", 0);
    for (size_t k = 0; k < WINDOW; k++) {
        erma_alloc_msgbuf(rpc[0], 32, &req[k]);
        erma_alloc_msgbuf(rpc[0], 32, &resp[k]);
        erma_enqueue_request(rpc[0], sess[next_sess++ % SESSIONS], ECHO, &req[k], &resp[k], on_done,
                             (void *)(uintptr_t)k);
    }
    const int rc = erma_sim_run_rpcs(sim, rpc, 2, 60000000000ull, finished, NULL);
    printf("sim_rate,%lu rpcs,%s\n", done_count, rc == ERMA_OK ? "ok" : "timed out");
    for (int h = 0; h < 2; h++) {
        erma_rpc_destroy(rpc[h]);
        erma_nexus_destroy(nx[h]);
    }
    erma_sim_destroy(sim);
    return rc == ERMA_OK ? 0 : 1;
}
