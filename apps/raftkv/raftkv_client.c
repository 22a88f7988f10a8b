/*
 * raftkv_client - talks to a raftkv cluster (raftkv/raftkv.h).
 *
 *   raftkv_client --servers URI,URI,... [--uri URI] [--stale] [--op-timeout-ms T]
 *                 [--groups G] COMMAND
 *     put KEY VALUE   prints "ok"
 *     get KEY         prints the value, or "(none)" with exit 3 when absent
 *     del KEY         prints "ok", or "(none)" with exit 3 when absent
 *     leader          prints the number (1..) of the replica that leads (group 0)
 *     load [--seconds S] [--keys K] [--inflight W] [--history FILE]
 *
 * load writes for S seconds (default 5), W writes in flight (default 8),
 * each to one of K keys (default 1000) with a value naming the write, never
 * two at once to one key; then reads every key back (linearizable GET) and
 * checks that it holds its last acknowledged value (or the value of a
 * later write whose outcome is unknown). It prints the writes acknowledged
 * and failed, their latency (median, p99), the longest time without an
 * acknowledgement (a leader's failover, a stall) and when it began, every
 * such gap of 100 ms or more (the first 16 listed) and the verdict; it
 * exits 1 when a key lost an acknowledged write, or when no write was
 * acknowledged in the run's last quarter (the cluster stopped taking
 * writes).
 *
 * load --history FILE also keeps W linearizable GETs in flight, on the keys
 * in turn, and writes every PUT and GET of the run (not the read back) to
 * FILE, one a line: KIND KEY VALUE INVOKE_NS COMPLETE_NS OUTCOME, KIND put
 * or get, VALUE "-" for none, OUTCOME ok, value, enoent or unknown (the op
 * failed or timed out: it may or may not have taken effect; COMPLETE_NS is
 * then "-"); times are CLOCK_MONOTONIC, common to clients run side by side,
 * whose values differ (they start at the client's pid times 10^6), so the
 * files of several clients, put together, are one history (for
 * tests/raftkv/lincheck.h). --op-timeout-ms T (1..10000, default 10000) fails an op
 * after T ms.
 *
 * --stale makes get ask the replica thought to lead for its own copy (fast,
 * may be stale). Exits 0, 1 on failure (the error named), 2 on bad
 * arguments, 3 when the key is absent.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "raftkv/raftkv_client_load.h"

#define SHOWN 4096 /* get prints at most this much of a value */

static const char usage_text[] =
    "usage: raftkv_client --servers URI,URI,... [--uri URI] [--stale] [--op-timeout-ms T]"
    " [--groups G] COMMAND\n"
    "  put KEY VALUE | get KEY | del KEY | leader\n"
    "  load [--seconds S] [--keys K] [--inflight W] [--history FILE]\n"
    "  --servers LIST  the replicas' URIs, as given to raftkv_server --peers\n"
    "  --uri URI       this client's endpoint (default udp://127.0.0.1:0)\n"
    "  --stale         get: the replica's own copy, no barrier (may be stale)\n"
    "  --seconds S     load: write for S seconds (default 5)\n"
    "  --keys K        load: keys written (default 1000)\n"
    "  --inflight W    load: writes in flight (default 8)\n"
    "  --history FILE  load: also W reads in flight; every op's times to FILE\n"
    "  --op-timeout-ms T  an op fails after T ms (1..10000, default 10000)\n"
    "  --groups G      the cluster's raft groups (raftkv_server --threads G; 1..8)\n";

static int usage(FILE *f, int rc)
{
    fputs(usage_text, f);
    return rc;
}

/* ---- one op ---- */

struct one {
    bool done;
    int status;
    char val[SHOWN + 1];
};

static void one_done(void *tag, int status, const uint8_t *val, uint32_t vlen)
{
    struct one *o = tag;
    o->done = true;
    o->status = status;
    if (vlen > SHOWN)
        vlen = SHOWN;
    if (val)
        memcpy(o->val, val, vlen);
    o->val[val ? vlen : 0] = 0;
}

static bool one_finished(void *ctx)
{
    return ((struct one *)ctx)->done;
}

/* A linearizable GET of a key of raft group 0, whose leader
 * raftkv_client_leader() then names. */
static int get_leader(struct raftkv_client *c, unsigned groups, struct one *o)
{
    char key[32];
    const uint32_t klen = raftkv_group_key("raftkv_client:leader:", 0, groups, key, sizeof key);
    return raftkv_get(c, key, klen, false, one_done, o);
}

static int one(struct raftkv_client *c, int argc, char **argv, bool stale, unsigned groups)
{
    const char *cmd = argv[0];
    struct one o = {0};
    int rc = ERMA_EINVAL;
    if (strcmp(cmd, "put") == 0 && argc == 3)
        rc = raftkv_put(c, argv[1], (uint32_t)strlen(argv[1]), argv[2],
                        (uint32_t)strlen(argv[2]), one_done, &o);
    else if (strcmp(cmd, "get") == 0 && argc == 2)
        rc = raftkv_get(c, argv[1], (uint32_t)strlen(argv[1]), stale, one_done, &o);
    else if (strcmp(cmd, "del") == 0 && argc == 2)
        rc = raftkv_del(c, argv[1], (uint32_t)strlen(argv[1]), one_done, &o);
    else if (strcmp(cmd, "leader") == 0 && argc == 1)
        rc = get_leader(c, groups, &o);
    else
        return usage(stderr, 2);
    const bool started = rc == ERMA_OK;
    if (started)
        raftkv_client_run(c, one_finished, &o, OP_TIMEOUT_NS + 1000000000ull);
    rc = rc != ERMA_OK ? rc : o.done ? o.status : ERMA_ETIMEDOUT;
    if (rc == ERMA_ENOENT && strcmp(cmd, "leader") != 0) {
        printf("(none)\n");
        return 3;
    }
    if (rc != ERMA_OK && rc != ERMA_ENOENT) {
        fprintf(stderr, "raftkv_client: %s %s: %s%s\n", cmd, argc > 1 ? argv[1] : "",
                erma_strerror(rc), started && rc == ERMA_EINVAL ? " (the servers split the keys"
                " into another number of raft groups: give their --threads as --groups)" : "");
        return 1;
    }
    if (strcmp(cmd, "leader") == 0)
        printf("%u\n", raftkv_client_leader(c) + 1);
    else
        printf("%s\n", strcmp(cmd, "get") == 0 ? o.val : "ok");
    return 0;
}

/* ---- main ---- */

/* --op-timeout-ms: 1..10000 ms in *ns (at most OP_TIMEOUT_NS, which bounds
 * load's waits); 0, or -1 when s is not such a number. */
static int op_timeout_ms(const char *s, uint64_t *ns)
{
    char *end;
    const unsigned long ms = strtoul(s, &end, 10);
    if (end == s || *end || ms < 1 || ms > OP_TIMEOUT_NS / 1000000)
        return -1;
    *ns = (uint64_t)ms * 1000000;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"servers", required_argument, NULL, 's'},
                                         {"uri", required_argument, NULL, 'u'},
                                         {"stale", no_argument, NULL, 'S'},
                                         {"help", no_argument, NULL, 'h'},
                                         {"op-timeout-ms", required_argument, NULL, 'T'},
                                         {"groups", required_argument, NULL, 'g'},
                                         {NULL, 0, NULL, 0}};
    const char *servers[RAFTKV_MAX_PEERS];
    struct raftkv_client_cfg cfg = {.uri = "udp://127.0.0.1:0", .servers = servers,
                                    .op_timeout_ns = OP_TIMEOUT_NS};
    bool stale = false;
    /* "+": stop at the command, whose own options follow it */
    for (int o; (o = getopt_long(argc, argv, "+", opts, NULL)) != -1;) {
        if (o == 's')
            cfg.nservers = raftkv_split(optarg, servers, RAFTKV_MAX_PEERS);
        else if (o == 'u')
            cfg.uri = optarg;
        else if (o == 'S')
            stale = true;
        else if (o == 'g' && raftkv_groups_arg(optarg, &cfg.groups))
            continue;
        else if (o == 'h')
            return usage(stdout, 0);
        else if (o == 'T' && op_timeout_ms(optarg, &cfg.op_timeout_ns) == 0)
            continue;
        else
            return usage(stderr, 2);
    }
    if (optind >= argc || cfg.nservers == 0 || cfg.nservers > RAFTKV_MAX_PEERS)
        return usage(stderr, 2);
    struct raftkv_client *c;
    int rc = raftkv_client_create(&cfg, &c);
    if (rc != ERMA_OK) {
        fprintf(stderr, "raftkv_client: cannot open %s: %s\n", cfg.uri, erma_strerror(rc));
        return 1;
    }
    argc -= optind;
    argv += optind;
    if (strcmp(argv[0], "load") == 0) {
        rc = load_command(c, argc, argv);
        if (rc == 2)
            usage(stderr, 2);
    } else {
        rc = one(c, argc, argv, stale, cfg.groups);
    }
    raftkv_client_destroy(c);
    return rc;
}
