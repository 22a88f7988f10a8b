/*
 * rma_perf - one-sided READ and WRITE beside an RPC of the same size, in one run.
 *
 *   rma_perf --mode lat|rate|bw [--op read|write] [--uri CLIENT] [--server SERVER]
 *            [--size B] [--iters N] [--window W] [--seconds S] [--rounds R]
 *            [--cc-off]
 *
 * lat: one --size op at a time (default 32 B); round-trip percentiles.
 * rate: --window ops of --size in flight (default 60 of 32 B); Mops.
 * bw: one --size transfer at a time through the executor (default 8 MiB,
 * chunks of 4 KB under the window CC, or bounded only by the command slots
 * with --cc-off); Gb/s of data. ERMA_BENCH_CC=1 prints the windows.
 *
 * The RPC of the same size is bench/rpc_perf's: for a READ of B bytes, a
 * request of 8 B answered by B bytes (a GET); for a WRITE, a request of B
 * bytes answered by 8 B (a PUT). One server process (pinned to CPU 1,
 * client on CPU 0) serves both in each round: the RPC echo handler, a
 * REGION RPC that hands the client its derived key, and a registered
 * read-write region its event loop serves one-sided. Within a round the
 * order of the two alternates, and every round starts a fresh server.
 *
 * CSV: one line per round and a median line; ratio = one-sided / RPC, the
 * median line's ratio is the median of the per-round ratios (latency:
 * lower is better; rate and bandwidth: higher is better). A READ's data is
 * checked against the region's pattern, and a WRITE writes the pattern
 * back, so a wrong byte fails the run.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "erma/clock.h"
#include "erma/errors.h"
#include "erma/rma.h"
#include "erma/rpc.h"

#define REGION_RPC 2
#define SMALL 8 /* the other direction of the comparable RPC */

struct opts {
    const char *mode;
    enum erma_rma_op op;
    struct bench_rpc_opts rpc;
    unsigned rounds;
    bool cc_off;
};

static uint8_t pattern(uint64_t i)
{
    return (uint8_t)(i * 7 + 3);
}

/* Region bytes: the largest op or transfer, and a window of ops side by side. */
static size_t region_len(const struct opts *o)
{
    const uint64_t op = o->rpc.size < ERMA_RMA_MAX_OP ? o->rpc.size : ERMA_RMA_MAX_OP;
    const uint64_t window = (uint64_t)o->rpc.window * op;
    const uint64_t len = o->rpc.size > window ? o->rpc.size : window;
    return len > (1u << 20) ? len : (1u << 20);
}

/* ---- the server's one-sided side ---- */

struct target {
    size_t len;
    uint8_t *mem;
    struct erma_rma *rma;
    uint32_t region;
};

/* REGION: [u64 identity] -> [i32 status][struct erma_rkey] (same binary). */
static void on_region(struct erma_req *req, void *ctx)
{
    struct target *t = ctx;
    struct erma_msgbuf *r = erma_req_resp_buf(req);
    struct erma_rkey k = {0};
    int32_t rc = ERMA_EBADPKT;
    uint64_t identity;
    if (erma_req_size(req) == sizeof identity) {
        memcpy(&identity, erma_req_data(req), sizeof identity);
        rc = erma_region_export(t->rma, t->region, identity, &k);
    }
    erma_resize_msgbuf(r, sizeof rc + sizeof k);
    memcpy(r->data, &rc, sizeof rc);
    memcpy(r->data + sizeof rc, &k, sizeof k);
    erma_enqueue_response(req, r);
}

static int target_before(struct erma_nexus *nx, void *ctx)
{
    return erma_register_handler(nx, REGION_RPC, on_region, ERMA_DISPATCH, ctx);
}

static int target_after(struct erma_rpc *rpc, void *ctx)
{
    struct target *t = ctx;
    if (!(t->mem = malloc(t->len)))
        return ERMA_ENOMEM;
    for (size_t i = 0; i < t->len; i++)
        t->mem[i] = pattern(i);
    int rc = erma_rma_create(rpc, NULL, &t->rma);
    if (rc == ERMA_OK)
        rc = erma_region_register(t->rma, t->mem, t->len,
                                  ERMA_RMA_PERM_READ | ERMA_RMA_PERM_WRITE, &t->region);
    return rc;
}

static void target_fini(void *ctx)
{
    struct target *t = ctx;
    if (t->rma)
        erma_rma_destroy(t->rma);
    free(t->mem);
}

/* ---- the initiator ---- */

struct initiator {
    struct erma_nexus *nx;
    struct erma_rpc *rpc;
    struct erma_rma *rma;
    int peer;
    struct erma_rkey rkey;
    uint8_t *buf;
    struct erma_rma_completion done;
    bool has_done;
};

static void on_key(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    struct initiator *c = tag;
    int32_t rc = status;
    if (status == ERMA_OK && resp->size == sizeof rc + sizeof c->rkey) {
        memcpy(&rc, resp->data, sizeof rc);
        memcpy(&c->rkey, resp->data + sizeof rc, sizeof c->rkey);
    } else if (status == ERMA_OK) {
        rc = ERMA_EBADPKT;
    }
    c->done.status = rc;
    c->has_done = true;
}

/* Runs the loop until an answer (c->has_done) or 10 s. */
static int wait_done(struct initiator *c)
{
    const uint64_t end = erma_now_ns() + 10000000000ull;
    while (!c->has_done && erma_now_ns() < end)
        erma_rpc_run_once(c->rpc);
    return c->has_done ? c->done.status : ERMA_ETIMEDOUT;
}

/* Asks the server for the region's key by RPC (waiting for it to start). */
static int fetch_key(struct initiator *c, const char *server)
{
    const int s = erma_create_session(c->rpc, server, 0);
    if (s < 0)
        return s;
    struct erma_msgbuf req, resp;
    int rc = erma_alloc_msgbuf(c->rpc, 8, &req);
    if (rc != ERMA_OK)
        return rc;
    if ((rc = erma_alloc_msgbuf(c->rpc, 64, &resp)) != ERMA_OK) {
        erma_free_msgbuf(c->rpc, &req);
        return rc;
    }
    const uint64_t identity = erma_rma_identity(c->rma);
    memcpy(req.data, &identity, sizeof identity);
    c->has_done = false;
    rc = erma_enqueue_request(c->rpc, s, REGION_RPC, &req, &resp, on_key, c);
    if (rc == ERMA_OK)
        rc = wait_done(c);
    erma_free_msgbuf(c->rpc, &req);
    erma_free_msgbuf(c->rpc, &resp);
    erma_destroy_session(c->rpc, s);
    return rc;
}

static void initiator_close(struct initiator *c)
{
    if (c->rma)
        erma_rma_destroy(c->rma);
    if (c->rpc)
        erma_rpc_destroy(c->rpc);
    if (c->nx)
        erma_nexus_destroy(c->nx);
    free(c->buf);
}

static int initiator_open(struct initiator *c, const struct opts *o)
{
    memset(c, 0, sizeof *c);
    const struct erma_rma_cfg cfg = {.slots = o->rpc.window + 16, .cc_off = o->cc_off};
    int rc = erma_nexus_create(o->rpc.uri, NULL, &c->nx);
    if (rc == ERMA_OK)
        rc = erma_rpc_create(c->nx, 0, NULL, &c->rpc);
    if (rc == ERMA_OK)
        rc = erma_rma_create(c->rpc, &cfg, &c->rma);
    if (rc == ERMA_OK)
        rc = fetch_key(c, o->rpc.server);
    if (rc == ERMA_OK && (c->peer = erma_rma_peer(c->rma, o->rpc.server, 0)) < 0)
        rc = c->peer;
    const size_t len = region_len(o);
    if (rc == ERMA_OK && !(c->buf = malloc(len)))
        rc = ERMA_ENOMEM;
    if (rc == ERMA_OK) /* what a WRITE writes back: the region's own bytes */
        for (size_t i = 0; i < len; i++)
            c->buf[i] = pattern(i);
    if (rc != ERMA_OK)
        initiator_close(c);
    return rc;
}

/* Polls one completion into c->done; false when there is none. */
static bool poll_one(struct initiator *c)
{
    erma_rpc_run_once(c->rpc);
    return erma_rma_poll(c->rma, &c->done, 1) == 1;
}

/* A READ of [off, off + len) must have brought the region's pattern. */
static int check_read(const struct opts *o, const struct initiator *c, uint64_t off, uint64_t len)
{
    if (o->op != ERMA_RMA_READ)
        return ERMA_OK;
    for (uint64_t i = off; i < off + len; i++)
        if (c->buf[i] != pattern(i))
            return ERMA_EBADPKT;
    return ERMA_OK;
}

static int op_sync(struct initiator *c, const struct erma_rma_cmd *cmd)
{
    const int slot = erma_rma_submit(c->rma, cmd);
    if (slot < 0)
        return slot;
    const uint64_t end = erma_now_ns() + 10000000000ull;
    while (!poll_one(c))
        if (erma_now_ns() > end)
            return ERMA_ETIMEDOUT;
    return c->done.status;
}

static struct erma_rma_cmd cmd_at(const struct opts *o, struct initiator *c, uint64_t off,
                                  uint32_t len)
{
    return (struct erma_rma_cmd){.op = o->op, .peer = c->peer, .rkey = c->rkey, .offset = off,
                                 .local = c->buf + off, .len = len, .tag = off};
}

/* Failed ops (a timeout when a process stalls) are counted, not timed;
 * more than 1% of them fails the run. */
static int rma_lat(const struct opts *o, struct initiator *c, struct bench_lat *out)
{
    const uint64_t warmup = o->rpc.iters / 10 + 1;
    uint64_t *rtt = malloc(o->rpc.iters * sizeof *rtt), n = 0, failed = 0;
    int rc = rtt ? ERMA_OK : ERMA_ENOMEM;
    const struct erma_rma_cmd cmd = cmd_at(o, c, 0, o->rpc.size);
    for (uint64_t i = 0; rc == ERMA_OK && i < o->rpc.iters + warmup; i++) {
        const uint64_t t0 = erma_now_ns();
        const int st = op_sync(c, &cmd);
        if (st != ERMA_OK && ++failed * 100 > o->rpc.iters)
            rc = st;
        else if (st == ERMA_OK && i >= warmup)
            rtt[n++] = erma_now_ns() - t0;
    }
    if (failed)
        fprintf(stderr, "rma_perf: lat: %llu ops failed (%s)\n", (unsigned long long)failed,
                erma_strerror(c->done.status));
    if (rc == ERMA_OK)
        rc = check_read(o, c, 0, o->rpc.size);
    if (rc == ERMA_OK)
        bench_lat_from_ns(rtt, n, out);
    free(rtt);
    return rc;
}

/* Keeps the window of ops in flight, op j on its own bytes at j * size. */
static int rma_rate(const struct opts *o, struct initiator *c, double *mops)
{
    const uint32_t w = o->rpc.window, size = o->rpc.size;
    struct erma_rma_completion done[64];
    uint64_t ok = 0, failed = 0;
    uint32_t inflight = 0, next = 0;
    const uint64_t start = erma_now_ns(), end = start + (uint64_t)(o->rpc.seconds * 1e9);
    uint64_t now = start;
    int rc = ERMA_OK;
    while (now < end && rc == ERMA_OK) {
        for (; inflight < w; inflight++, next = (next + 1) % w) {
            const struct erma_rma_cmd cmd = cmd_at(o, c, (uint64_t)next * size, size);
            if (erma_rma_submit(c->rma, &cmd) < 0)
                break;
        }
        erma_rpc_run_once(c->rpc);
        const int n = erma_rma_poll(c->rma, done, 64);
        for (int i = 0; i < n && rc == ERMA_OK; i++) {
            const bool good = done[i].status == ERMA_OK;
            ok += good;
            failed += !good;
            rc = good ? check_read(o, c, done[i].tag, size) : ERMA_OK;
        }
        inflight -= (uint32_t)(n > 0 ? n : 0);
        now = erma_now_ns();
    }
    *mops = (double)ok / ((double)(now - start) / 1e9) / 1e6;
    if (failed)
        fprintf(stderr, "rma_perf: rate: %llu of %llu ops failed\n", (unsigned long long)failed,
                (unsigned long long)(ok + failed));
    return rc == ERMA_OK && ok == 0 ? ERMA_ETIMEDOUT : rc;
}

static int rma_bw(const struct opts *o, struct initiator *c, double *gbps)
{
    const struct erma_rma_xfer x = {.op = o->op, .peer = c->peer, .rkey = c->rkey,
                                    .local = c->buf, .len = o->rpc.size, .max_retries = 8};
    uint64_t bytes = 0;
    const uint64_t start = erma_now_ns(), end = start + (uint64_t)(o->rpc.seconds * 1e9);
    uint64_t now = start;
    int rc = ERMA_OK;
    while (rc == ERMA_OK && now < end) {
        rc = erma_rma_transfer(c->rma, &x);
        const uint64_t limit = erma_now_ns() + 10000000000ull;
        while (rc >= 0 && !poll_one(c))
            if (erma_now_ns() > limit)
                rc = ERMA_ETIMEDOUT;
        rc = rc < 0 ? rc : c->done.status;
        bytes += o->rpc.size;
        now = erma_now_ns();
    }
    if (rc == ERMA_OK)
        rc = check_read(o, c, 0, o->rpc.size);
    struct erma_rma_stats st;
    erma_rma_get_stats(c->rma, &st);
    if (st.retries)
        fprintf(stderr, "rma_perf: bw: %llu chunk retries\n", (unsigned long long)st.retries);
    const struct erma_window *lw = erma_rma_local_window(c->rma),
                             *rw = erma_rma_window(c->rma, c->peer, o->op == ERMA_RMA_READ ? ERMA_WINDOW_IN : ERMA_WINDOW_OUT);
    if (getenv("ERMA_BENCH_CC") && lw && rw)
        fprintf(stderr, "rma_perf: windows local %.2f remote %.2f ops\n", lw->cwnd, rw->cwnd);
    *gbps = rc == ERMA_OK ? (double)bytes * 8 / (double)(now - start) : 0;
    return rc;
}

/* Measures one-sided (rma) or the RPC once; returns the metric or < 0. */
static double measure(const struct opts *o, bool rma, struct bench_lat *lat)
{
    double v = -1;
    int rc;
    if (!rma) {
        struct bench_raw_rate rate = {0};
        if (strcmp(o->mode, "lat") == 0)
            rc = bench_rpc_lat(&o->rpc, lat), v = lat->median_us;
        else if (strcmp(o->mode, "bw") == 0)
            rc = bench_rpc_bw(&o->rpc, &v);
        else
            rc = bench_rpc_rate(&o->rpc, &rate), v = rate.mpps;
    } else {
        struct initiator c;
        if ((rc = initiator_open(&c, o)) != ERMA_OK)
            goto out;
        if (strcmp(o->mode, "lat") == 0)
            rc = rma_lat(o, &c, lat), v = lat->median_us;
        else if (strcmp(o->mode, "bw") == 0)
            rc = rma_bw(o, &c, &v);
        else
            rc = rma_rate(o, &c, &v);
        initiator_close(&c);
    }
out:
    if (rc != ERMA_OK) {
        fprintf(stderr, "rma_perf: %s %s: %s\n", o->mode, rma ? "one-sided" : "rpc",
                erma_strerror(rc));
        return -1;
    }
    return v;
}

static int parse(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        {"mode", 1, 0, 'm'},  {"op", 1, 0, 'o'},     {"uri", 1, 0, 'u'},
        {"server", 1, 0, 's'}, {"size", 1, 0, 'z'},  {"iters", 1, 0, 'i'},
        {"window", 1, 0, 'w'}, {"seconds", 1, 0, 't'}, {"rounds", 1, 0, 'r'},
        {"cc-off", 0, 0, 'c'},
        {0, 0, 0, 0}};
    bool size_set = false;
    const char *op = "read";
    for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        switch (c) {
        case 'm': o->mode = optarg; break;
        case 'o': op = optarg; break;
        case 'u': o->rpc.uri = optarg; break;
        case 's': o->rpc.server = optarg; break;
        case 'z': o->rpc.size = (uint32_t)atoi(optarg); size_set = true; break;
        case 'i': o->rpc.iters = strtoull(optarg, NULL, 10); break;
        case 'w': o->rpc.window = (uint32_t)atoi(optarg); break;
        case 't': o->rpc.seconds = atof(optarg); break;
        case 'r': o->rounds = (unsigned)atoi(optarg); break;
        case 'c': o->cc_off = true; break;
        default: return -1;
        }
    }
    const bool bw = strcmp(o->mode, "bw") == 0, lat = strcmp(o->mode, "lat") == 0;
    if (!bw && !lat && strcmp(o->mode, "rate"))
        return -1;
    o->op = strcmp(op, "write") == 0 ? ERMA_RMA_WRITE : ERMA_RMA_READ;
    if (strcmp(op, "write") && strcmp(op, "read"))
        return -1;
    if (bw && !size_set)
        o->rpc.size = 8u << 20;
    const uint32_t max = bw ? (64u << 20) : ERMA_RMA_MAX_OP;
    if (o->rpc.size == 0 || o->rpc.size > max || o->rpc.window == 0 ||
        o->rpc.window > 4096 || o->rounds == 0 || o->rounds > 50 || o->rpc.iters == 0)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = {.mode = "lat", .rounds = 3};
    o.rpc = (struct bench_rpc_opts){.uri = "udp://127.0.0.1:31880",
                                    .server = "udp://127.0.0.1:31890", .size = 32,
                                    .window = 60, .batch = 1, .sessions = 8, .iters = 50000,
                                    .seconds = 2};
    if (parse(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: see the comment at the top of bench/rma_perf.c\n");
        return 2;
    }
    const uint32_t size = o.rpc.size;
    const bool read = o.op == ERMA_RMA_READ;
    /* The comparable RPC: B bytes back for a READ, B bytes out for a WRITE. */
    struct opts r = o;
    r.rpc.size = read ? SMALL : size;
    r.rpc.resp_size = read ? size : SMALL;
    if (strcmp(o.mode, "rate") != 0)
        r.rpc.sessions = 1;
    struct target t = {.len = region_len(&o)};
    const struct bench_server_ext ext = {target_before, target_after, target_fini, &t};
    const uint64_t max_ns = (uint64_t)(o.rpc.seconds * 1e9) * 8 + 60000000000ull;
    const char *metric = strcmp(o.mode, "lat") == 0 ? "median_us"
                         : strcmp(o.mode, "bw") == 0 ? "gbps" : "mops";
    const char *op = read ? "read" : "write";
    double vr[50], vm[50], ratio[50];
    bench_pin(0);
    printf("bench,mode,op,size,round,metric,value,rpc,ratio,p99_us,rpc_p99_us\n");
    for (unsigned i = 0; i < o.rounds; i++) {
        const pid_t child = bench_rpc_server_fork_ext(o.rpc.server, NULL, 1, max_ns, &ext);
        struct bench_lat lm = {0}, lr = {0};
        const bool rma_first = i % 2 == 0;
        vm[i] = rma_first ? measure(&o, true, &lm) : -1;
        vr[i] = measure(&r, false, &lr);
        if (!rma_first)
            vm[i] = measure(&o, true, &lm);
        bench_rpc_server_stop(child);
        if (vm[i] < 0 || vr[i] < 0)
            return 1;
        ratio[i] = vm[i] / vr[i];
        printf("rma_perf,%s,%s,%u,%u,%s,%.3f,%.3f,%.3f,%.2f,%.2f\n", o.mode, op, size, i, metric,
               vm[i], vr[i], ratio[i], lm.p99_us, lr.p99_us);
        fflush(stdout);
    }
    printf("rma_perf,%s,%s,%u,median,%s,%.3f,%.3f,%.3f,,\n", o.mode, op, size, metric,
           bench_median(vm, o.rounds), bench_median(vr, o.rounds), bench_median(ratio, o.rounds));
    return 0;
}
