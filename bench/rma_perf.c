/*
 * rma_perf - one-sided READ and WRITE beside an RPC of the same size, in one run.
 *
 *   rma_perf [--mode lat|rate|bw] [--op read|write] [--sizes LIST] [options]
 *   rma_perf --role server [--server URI]                   (on one host)
 *   rma_perf --role client --server URI [--mode ...]        (on another)
 *
 * `rma_perf --help` lists every option. lat: one op of --size at a time
 * (default 32 B; above ERMA_RMA_MAX_OP, 4 KB, one transfer through the
 * executor); round-trip percentiles. rate: --window ops in flight (default
 * 60 of 32 B, at most 4 KB each); Mops. bw: one transfer at a time through
 * the executor (default 8 MiB, chunks of 4 KB under the window CC, or
 * bounded only by the command slots with --cc-off); Gb/s of data.
 * ERMA_BENCH_CC=1 prints the windows.
 *
 * The RPC of the same size is bench/rpc_perf's: for a READ of B bytes, a
 * request of 8 B answered by B bytes (a GET); for a WRITE, a request of B
 * bytes answered by 8 B (a PUT). One server process serves both: the RPC
 * echo handler, a REGION RPC that hands the client its derived key, and a
 * registered read-write region (64 MiB with --role server, else as large as
 * the largest size needs) its event loop serves one-sided.
 * Within a round the order of the two alternates. By default (--role both)
 * every round forks a fresh server; with --role client the server is a
 * `rma_perf --role server` on another host. Every endpoint busy-polls
 * (cfg.busy_poll, the measurement condition); --no-poll measures the
 * default idle sleep on both sides.
 *
 * Output: a line per size and round and a median line per size; ratio =
 * one-sided / RPC, the median line's is the median of the per-round ratios
 * (latency: lower is better; rate and bandwidth: higher is better). A
 * READ's data is checked against the region's pattern, and a WRITE writes
 * the pattern back, so a wrong byte fails the run. Failed ops (a timeout
 * when a process stalls) are counted and named on stderr, not timed; more
 * than 1% fails the measurement, which is tried again (3 attempts).
 * --secure adds, in the same rounds, the RPC over authenticated, encrypted
 * sessions (erma_nexus_cfg.psk; a server of its own): rpc_secure, and
 * ratio_secure = one-sided / secure RPC, where both sides pay for AEAD.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "erma/clock.h"
#include "erma/endpoint.h"
#include "erma/errors.h"
#include "erma/rma.h"
#include "erma/rpc.h"

static const char usage[] =
    "usage: rma_perf [--mode lat|rate|bw] [--op read|write] [options]\n"
    "  one-sided READ/WRITE beside an RPC of the same size (see bench/rma_perf.c)\n"
    "  --mode M         lat (default): one op at a time, RTT percentiles;\n"
    "                   rate: --window ops in flight, Mops; bw: Gb/s of transfers\n"
    "  --op O           read (default) or write\n"
    "  --sizes LIST     data bytes, e.g. 32,1K,4K,64K (--size B: one); default 32\n"
    "                   (bw: 8M); rate: at most 4K; lat above 4K: executor transfers\n"
    "  --iters N        lat: ops per measurement (default 50000, fewer above 4 KB)\n"
    "  --window W       rate: ops in flight (default 60)\n"
    "  --seconds S      rate and bw: seconds per measurement (default 2)\n"
    "  --rounds R       rounds, 1..50 (default 3)\n"
    "  --cc-off         bw: no window CC in the executor\n"
    "  --no-poll        endpoints sleep when idle (default: busy-poll)\n"
    "  --secure         also the RPC over authenticated, encrypted sessions\n"
    "  --cpu LIST       CPUs: this process, then the server (default: no pinning)\n"
    "  --csv            CSV instead of the table\n"
    "  --role R         both (default: fork a server per round), server (serve\n"
    "                   --server until killed), client (the server runs elsewhere)\n"
    "  --uri URI        this client's URI (default udp://127.0.0.1:31880)\n"
    "  --server URI     the server's URI (default udp://127.0.0.1:31890)\n"
    "  -h, --help       this text\n";

#define REGION_RPC 2
#define SMALL 8 /* the other direction of the comparable RPC */
#define REGION_BYTES (64u << 20)
#define ATTEMPTS 3

struct opts {
    const char *mode, *role;
    enum erma_rma_op op;
    struct bench_rpc_opts rpc;
    struct erma_rpc_cfg cfg;
    struct erma_endpoint_cfg ep;
    unsigned rounds, round;
    bool cc_off, iters_set, lat, bw, remote, secure;
};

static const uint8_t secure_key[ERMA_PSK_BYTES] = "rma_perf --secure, a test key.."; /* 32 B */

static uint8_t pattern(uint64_t i)
{
    return (uint8_t)(i * 7 + 3);
}

/* Initiator buffer bytes: the largest op or transfer, or a window of ops. */
static size_t buf_len(const struct opts *o)
{
    const uint64_t op = o->rpc.size < ERMA_RMA_MAX_OP ? o->rpc.size : ERMA_RMA_MAX_OP;
    const uint64_t window = (uint64_t)o->rpc.window * op;
    return o->rpc.size > window ? o->rpc.size : window;
}

static const char *op_name(const struct opts *o)
{
    return o->op == ERMA_RMA_READ ? "read" : "write";
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
    char from[128];
    if (erma_req_size(req) == sizeof identity &&
        (rc = erma_req_peer_uri(req, from, sizeof from)) == ERMA_OK) {
        memcpy(&identity, erma_req_data(req), sizeof identity);
        rc = erma_region_export_uri(t->rma, t->region, identity, from, &k); /* its address only */
    }
    erma_msgbuf_resize(r, sizeof rc + sizeof k);
    memcpy(r->data, &rc, sizeof rc);
    memcpy(r->data + sizeof rc, &k, sizeof k);
    erma_req_respond(req, r);
}

static int target_before(struct erma_nexus *nx, void *ctx)
{
    return erma_handler_register(nx, REGION_RPC, on_region, ERMA_DISPATCH, ctx);
}

static int target_after(struct erma_endpoint *ep, void *ctx)
{
    struct target *t = ctx;
    if (!(t->mem = malloc(t->len)))
        return ERMA_ENOMEM;
    for (size_t i = 0; i < t->len; i++)
        t->mem[i] = pattern(i);
    int rc = erma_rma_create(ep, NULL, &t->rma);
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
    struct erma_endpoint *ep;
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

static bool key_done(void *ctx)
{
    return ((const struct initiator *)ctx)->has_done;
}

/* Asks the server for the region's key by RPC (waiting for it to start). */
static int fetch_key(struct initiator *c, const char *server)
{
    const int s = erma_session_create(c->rpc, server, 0);
    if (s < 0)
        return s;
    struct erma_msgbuf req, resp;
    int rc = erma_msgbuf_alloc(c->rpc, 8, &req);
    if (rc != ERMA_OK)
        return rc;
    if ((rc = erma_msgbuf_alloc(c->rpc, 64, &resp)) != ERMA_OK) {
        erma_msgbuf_free(c->rpc, &req);
        return rc;
    }
    const uint64_t identity = erma_rma_identity(c->rma);
    memcpy(req.data, &identity, sizeof identity);
    c->has_done = false;
    rc = erma_rpc_call(c->rpc, s, REGION_RPC, &req, &resp, on_key, c);
    if (rc == ERMA_OK)
        rc = erma_endpoint_run_until(c->ep, key_done, c, 10000000000ull);
    if (rc == ERMA_OK)
        rc = c->done.status;
    erma_msgbuf_free(c->rpc, &req);
    erma_msgbuf_free(c->rpc, &resp);
    erma_session_destroy(c->rpc, s);
    return rc;
}

static void initiator_close(struct initiator *c)
{
    if (c->rma)
        erma_rma_destroy(c->rma);
    if (c->rpc)
        erma_rpc_destroy(c->rpc);
    erma_endpoint_destroy(c->ep);
    if (c->nx)
        erma_nexus_destroy(c->nx);
    free(c->buf);
}

static int initiator_open(struct initiator *c, const struct opts *o)
{
    memset(c, 0, sizeof *c);
    const struct erma_rma_cfg cfg = {.slots = o->rpc.window + 16, .cc_off = o->cc_off};
    int rc = erma_nexus_create(NULL, &c->nx);
    if (rc == ERMA_OK)
        rc = erma_endpoint_create(o->rpc.uri, 0, &o->ep, &c->ep);
    if (rc == ERMA_OK)
        rc = erma_rpc_create(c->nx, c->ep, &o->cfg, &c->rpc);
    if (rc == ERMA_OK)
        rc = erma_rma_create(c->ep, &cfg, &c->rma);
    if (rc == ERMA_OK)
        rc = fetch_key(c, o->rpc.server);
    if (rc == ERMA_OK && (c->peer = erma_rma_peer(c->rma, o->rpc.server, 0)) < 0)
        rc = c->peer;
    const size_t len = buf_len(o);
    if (rc == ERMA_OK && !(c->buf = malloc(len)))
        rc = ERMA_ENOMEM;
    if (rc == ERMA_OK) /* what a WRITE writes back: the region's own bytes */
        for (size_t i = 0; i < len; i++)
            c->buf[i] = pattern(i);
    if (rc != ERMA_OK)
        initiator_close(c);
    return rc;
}

/* A completion into c->done; for erma_endpoint_run_until. */
static bool polled(void *ctx)
{
    struct initiator *c = ctx;
    return erma_rma_poll(c->rma, &c->done, 1) == 1;
}

/* Waits for the one op or transfer in flight (10 s at most). */
static int wait_one(struct initiator *c)
{
    if (erma_endpoint_run_until(c->ep, polled, c, 10000000000ull) != ERMA_OK)
        return ERMA_ETIMEDOUT;
    return c->done.status;
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

static struct erma_rma_cmd cmd_at(const struct opts *o, struct initiator *c, uint64_t off,
                                  uint32_t len)
{
    return (struct erma_rma_cmd){.op = o->op, .peer = c->peer, .rkey = c->rkey, .offset = off,
                                 .local = c->buf + off, .len = len, .tag = off};
}

/* One op of o->rpc.size, or above ERMA_RMA_MAX_OP one transfer; waits for it. */
static int op_sync(const struct opts *o, struct initiator *c)
{
    int rc;
    if (o->rpc.size <= ERMA_RMA_MAX_OP) {
        const struct erma_rma_cmd cmd = cmd_at(o, c, 0, o->rpc.size);
        rc = erma_rma_submit(c->rma, &cmd);
    } else {
        const struct erma_rma_xfer x = {.op = o->op, .peer = c->peer, .rkey = c->rkey,
                                        .local = c->buf, .len = o->rpc.size, .max_retries = 8};
        rc = erma_rma_transfer(c->rma, &x);
    }
    return rc < 0 ? rc : wait_one(c);
}

/* "lat read 32 B, round 1, U -> S" into buf, for messages. */
static const char *where(const struct opts *o, const char *what, char *buf, size_t len)
{
    snprintf(buf, len, "%s %s %s %u B, round %u, %s -> %s", o->mode, what, op_name(o),
             o->rpc.size, o->round, o->rpc.uri, o->rpc.server);
    return buf;
}

/* Names the failed ops of a measurement (they are counted, not timed). */
static void report_failed(const struct opts *o, uint64_t failed, uint64_t total, int last)
{
    char w[256];
    if (failed)
        fprintf(stderr, "rma_perf: %s: %llu of %llu ops failed, the last with: %s\n",
                where(o, "one-sided", w, sizeof w), (unsigned long long)failed,
                (unsigned long long)total, erma_strerror(last));
}

static int rma_lat(const struct opts *o, struct initiator *c, struct bench_lat *out)
{
    const uint64_t iters = o->rpc.iters, warmup = iters / 10 + 1;
    uint64_t *rtt = malloc(iters * sizeof *rtt), n = 0, failed = 0, i = 0;
    int rc = rtt ? ERMA_OK : ERMA_ENOMEM, last = ERMA_OK;
    for (; rc == ERMA_OK && i < iters + warmup; i++) {
        const uint64_t t0 = erma_now_ns();
        const int st = op_sync(o, c);
        if (st != ERMA_OK && ++failed * 100 > iters)
            rc = st;
        else if (st == ERMA_OK && i >= warmup)
            rtt[n++] = erma_now_ns() - t0;
        last = st != ERMA_OK ? st : last;
    }
    report_failed(o, failed, i, last);
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
    int rc = ERMA_OK, last = ERMA_OK;
    while (now < end && rc == ERMA_OK) {
        for (; inflight < w; inflight++, next = (next + 1) % w) {
            const struct erma_rma_cmd cmd = cmd_at(o, c, (uint64_t)next * size, size);
            if (erma_rma_submit(c->rma, &cmd) < 0)
                break;
        }
        erma_endpoint_run_once(c->ep);
        const int n = erma_rma_poll(c->rma, done, 64);
        for (int i = 0; i < n && rc == ERMA_OK; i++) {
            const bool good = done[i].status == ERMA_OK;
            ok += good;
            failed += !good;
            last = good ? last : done[i].status;
            rc = good ? check_read(o, c, done[i].tag, size) : ERMA_OK;
        }
        inflight -= (uint32_t)(n > 0 ? n : 0);
        now = erma_now_ns();
    }
    *mops = (double)ok / ((double)(now - start) / 1e9) / 1e6;
    report_failed(o, failed, ok + failed, last);
    return rc == ERMA_OK && ok == 0 ? last != ERMA_OK ? last : ERMA_ETIMEDOUT : rc;
}

static int rma_bw(const struct opts *o, struct initiator *c, double *gbps)
{
    uint64_t bytes = 0;
    const uint64_t start = erma_now_ns(), end = start + (uint64_t)(o->rpc.seconds * 1e9);
    uint64_t now = start;
    int rc = ERMA_OK;
    while (rc == ERMA_OK && now < end) {
        rc = op_sync(o, c);
        bytes += o->rpc.size;
        now = erma_now_ns();
    }
    if (rc == ERMA_OK)
        rc = check_read(o, c, 0, o->rpc.size);
    struct erma_rma_stats st;
    erma_rma_get_stats(c->rma, &st);
    char w[256];
    if (st.retries)
        fprintf(stderr, "rma_perf: %s: %llu chunks timed out or were refused and were retried\n",
                where(o, "one-sided", w, sizeof w), (unsigned long long)st.retries);
    struct erma_rma_window_info lw, rw;
    if (getenv("ERMA_BENCH_CC") && erma_rma_local_window(c->rma, &lw) == ERMA_OK &&
        erma_rma_window(c->rma, c->peer, o->op, &rw) == ERMA_OK)
        fprintf(stderr, "rma_perf: windows local %.2f remote %.2f ops\n", lw.cwnd, rw.cwnd);
    *gbps = rc == ERMA_OK ? (double)bytes * 8 / (double)(now - start) : 0;
    return rc;
}

/* Measures one-sided (rma) or the comparable RPC (r) once; an erma status. */
static int measure_once(const struct opts *o, const struct opts *r, bool rma,
                        struct bench_lat *lat, double *v)
{
    if (!rma) {
        struct bench_raw_rate rate = {0};
        int rc;
        if (r->lat)
            rc = bench_rpc_lat(&r->rpc, lat), *v = lat->median_us;
        else if (r->bw)
            rc = bench_rpc_bw(&r->rpc, v);
        else
            rc = bench_rpc_rate(&r->rpc, &rate), *v = rate.mpps;
        return rc;
    }
    struct initiator c;
    int rc = initiator_open(&c, o);
    if (rc != ERMA_OK)
        return rc;
    if (o->lat)
        rc = rma_lat(o, &c, lat), *v = lat->median_us;
    else if (o->bw)
        rc = rma_bw(o, &c, v);
    else
        rc = rma_rate(o, &c, v);
    initiator_close(&c);
    return rc;
}

/* measure_once, tried ATTEMPTS times; the metric or < 0. */
static double measure(const struct opts *o, const struct opts *r, bool rma, struct bench_lat *lat)
{
    for (int a = 1; a <= ATTEMPTS; a++) {
        double v = -1;
        const int rc = measure_once(o, r, rma, lat, &v);
        if (rc == ERMA_OK)
            return v;
        char w[256];
        fprintf(stderr, "rma_perf: %s: %s (attempt %d of %d%s)\n",
                where(o, rma ? "one-sided" : "rpc", w, sizeof w),
                rc == ERMA_EBADPKT ? "wrong data read" : erma_strerror(rc), a, ATTEMPTS,
                a < ATTEMPTS ? ", trying again" : ", giving up");
        if (rc == ERMA_EBADPKT)
            break;
    }
    return -1;
}

/* The comparable RPC: B bytes back for a READ, B bytes out for a WRITE. */
static struct opts rpc_like(const struct opts *o)
{
    struct opts r = *o;
    const bool read = o->op == ERMA_RMA_READ;
    r.rpc.size = read ? SMALL : o->rpc.size;
    r.rpc.resp_size = read ? o->rpc.size : SMALL;
    r.rpc.cfg = &o->cfg;
    r.rpc.ep_cfg = &o->ep;
    if (!o->lat && !o->bw)
        return r;
    r.rpc.sessions = 1;
    return r;
}

/* The RPC over authenticated, encrypted sessions, against a server of its
 * own (the one-sided server's RPCs are plaintext); < 0 when it failed. */
static double measure_secure(const struct opts *o, const struct opts *r, int server_cpu,
                             uint64_t max_ns, struct bench_lat *lat)
{
    bench_rpc_set_psk(secure_key);
    const pid_t child = bench_rpc_server_fork(o->rpc.server, &o->cfg, &o->ep, server_cpu, max_ns);
    const double v = measure(o, r, false, lat);
    bench_rpc_server_stop(child);
    bench_rpc_set_psk(NULL);
    return v;
}

static int run_size(struct opts *o, const struct bench_table *t, const struct bench_server_ext *ext,
                    int server_cpu)
{
    const struct opts r = rpc_like(o);
    const uint64_t max_ns = (uint64_t)(o->rpc.seconds * 1e9) * 8 + 60000000000ull;
    const char *metric = o->lat ? "median_us" : o->bw ? "gbps" : "mops";
    const char *poll = o->ep.busy_poll ? "busy" : "sleep";
    double vr[50], vm[50], vs[50], ratio[50], ratio_s[50];
    for (unsigned i = 0; i < o->rounds; i++) {
        o->round = i;
        const pid_t child = o->remote ? 0
                                      : bench_rpc_server_fork_ext(o->rpc.server, &o->cfg, &o->ep,
                                                                  server_cpu, max_ns, ext);
        struct bench_lat lm = {0}, lr = {0};
        const bool rma_first = i % 2 == 0;
        vm[i] = rma_first ? measure(o, &r, true, &lm) : 0;
        vr[i] = vm[i] < 0 ? -1 : measure(o, &r, false, &lr);
        if (!rma_first && vr[i] >= 0)
            vm[i] = measure(o, &r, true, &lm);
        bench_rpc_server_stop(child);
        struct bench_lat ls = {0};
        vs[i] = o->secure && vm[i] >= 0 && vr[i] >= 0
                    ? measure_secure(o, &r, server_cpu, max_ns, &ls) : 1;
        if (vm[i] < 0 || vr[i] < 0 || vs[i] < 0)
            return 1;
        ratio[i] = vm[i] / vr[i];
        ratio_s[i] = vm[i] / vs[i];
        char p99[64] = ",", sec[64] = ",";
        if (o->lat)
            snprintf(p99, sizeof p99, "%.2f,%.2f", lm.p99_us, lr.p99_us);
        if (o->secure)
            snprintf(sec, sizeof sec, "%.3f,%.3f", vs[i], ratio_s[i]);
        bench_table_row(t, "rma_perf,%s,%s,%u,%u,%s,%.3f,%.3f,%.3f,%s,%s,%s", o->mode,
                        op_name(o), o->rpc.size, i, metric, vm[i], vr[i], ratio[i], sec, p99, poll);
    }
    char sec[64] = ",";
    if (o->secure)
        snprintf(sec, sizeof sec, "%.3f,%.3f", bench_median(vs, o->rounds),
                 bench_median(ratio_s, o->rounds));
    bench_table_row(t, "rma_perf,%s,%s,%u,median,%s,%.3f,%.3f,%.3f,%s,,,%s", o->mode, op_name(o),
                    o->rpc.size, metric, bench_median(vm, o->rounds), bench_median(vr, o->rounds),
                    bench_median(ratio, o->rounds), sec, poll);
    return 0;
}

static void parse(struct bench_cli *cli, struct opts *o, int argc, char **argv)
{
    static const struct option lo[] = {
        BENCH_COMMON_OPTIONS,
        {"mode", 1, 0, 'm'},  {"op", 1, 0, 'o'},      {"uri", 1, 0, 'u'},
        {"server", 1, 0, 's'}, {"iters", 1, 0, 'i'},  {"window", 1, 0, 'w'},
        {"seconds", 1, 0, 't'}, {"rounds", 1, 0, 'r'}, {"cc-off", 0, 0, 'c'},
        {"role", 1, 0, 'R'},  {"no-poll", 0, 0, 'P'}, {"secure", 0, 0, 'S'}, {0, 0, 0, 0}};
    const char *op = "read";
    bench_cli_init(cli, "rma_perf", usage, lo);
    for (int c; (c = bench_cli_next(cli, argc, argv)) != -1;) {
        switch (c) {
        case 'm': o->mode = optarg; break;
        case 'o': op = optarg; break;
        case 'u': o->rpc.uri = optarg; break;
        case 's': o->rpc.server = optarg; break;
        case 'i': o->rpc.iters = bench_cli_u64(cli, optarg); o->iters_set = true; break;
        case 'w': o->rpc.window = (uint32_t)bench_cli_u64(cli, optarg); break;
        case 't': o->rpc.seconds = bench_cli_real(cli, optarg); break;
        case 'r': o->rounds = (unsigned)bench_cli_u64(cli, optarg); break;
        case 'c': o->cc_off = true; break;
        case 'R': o->role = optarg; break;
        case 'P': o->ep.busy_poll = false; break;
        case 'S': o->secure = true; break;
        default: bench_cli_fail(cli, NULL);
        }
    }
    o->lat = strcmp(o->mode, "lat") == 0;
    o->bw = strcmp(o->mode, "bw") == 0;
    if (!o->bw && !o->lat && strcmp(o->mode, "rate"))
        bench_cli_fail(cli, "unknown mode '%s'", o->mode);
    if (strcmp(op, "write") && strcmp(op, "read"))
        bench_cli_fail(cli, "unknown op '%s'", op);
    o->op = strcmp(op, "write") == 0 ? ERMA_RMA_WRITE : ERMA_RMA_READ;
    if (strcmp(o->role, "both") && strcmp(o->role, "server") && strcmp(o->role, "client"))
        bench_cli_fail(cli, "unknown role '%s'", o->role);
    if (o->secure && strcmp(o->role, "both") != 0)
        bench_cli_fail(cli, "--secure starts its own servers: --role both only");
    if (o->rpc.window == 0 || o->rpc.window > 4096 || o->rounds == 0 || o->rounds > 50 ||
        o->rpc.iters == 0 || o->rpc.seconds <= 0)
        bench_cli_fail(cli, "--window (1..4096), --rounds (1..50), --iters and --seconds "
                            "must be in range");
    if (cli->nsizes == 0)
        cli->sizes[cli->nsizes++] = o->bw ? 8u << 20 : 32;
    const uint32_t max = o->lat || o->bw ? REGION_BYTES : ERMA_RMA_MAX_OP;
    for (unsigned i = 0; i < cli->nsizes; i++)
        if (cli->sizes[i] == 0 || cli->sizes[i] > max)
            bench_cli_fail(cli, "size %u: %s takes 1..%u B", cli->sizes[i], o->mode, max);
    if (!o->lat && !o->bw && (uint64_t)o->rpc.window * ERMA_RMA_MAX_OP > REGION_BYTES)
        bench_cli_fail(cli, "--window too large for the region");
}

int main(int argc, char **argv)
{
    struct opts o = {.mode = "lat", .role = "both", .rounds = 3};
    o.rpc = (struct bench_rpc_opts){.uri = "udp://127.0.0.1:31880",
                                    .server = "udp://127.0.0.1:31890", .size = 32,
                                    .window = 60, .batch = 1, .sessions = 8, .iters = 50000,
                                    .seconds = 2};
    o.ep.busy_poll = true;
    struct bench_cli cli;
    parse(&cli, &o, argc, argv);
    bench_pin(bench_cli_cpu(&cli, 0));
    struct target tgt = {.len = 1u << 20}; /* for the largest size; a server for any */
    for (unsigned i = 0; i < cli.nsizes; i++) {
        o.rpc.size = cli.sizes[i];
        tgt.len = buf_len(&o) > tgt.len ? buf_len(&o) : tgt.len;
    }
    const struct bench_server_ext ext = {target_before, target_after, target_fini, &tgt};
    if (strcmp(o.role, "server") == 0) {
        tgt.len = REGION_BYTES;
        bench_note(cli.csv, "rma_perf server on %s: RPC echo and a %u MiB region, %s", o.rpc.server,
                   REGION_BYTES >> 20, o.ep.busy_poll ? "busy-polling" : "sleeping when idle");
        const uint64_t forever = 100ull * 24 * 3600 * 1000000000ull;
        return bench_rpc_server_ext(o.rpc.server, &o.cfg, &o.ep, forever, &ext) == ERMA_OK ? 0 : 1;
    }
    o.remote = strcmp(o.role, "client") == 0;
    bench_note(cli.csv, "rma_perf %s %s: %s -> %s; %s; %u rounds", o.mode, op_name(&o), o.rpc.uri,
               o.rpc.server,
               o.ep.busy_poll ? "every endpoint busy-polls (cfg.busy_poll)"
                               : "endpoints sleep when idle (--no-poll)",
               o.rounds);
    struct bench_table t;
    bench_table_start(&t, cli.csv, "bench,mode,op,size,round:6,metric:9,value,rpc,ratio,"
                                   "rpc_secure:10,ratio_secure:12,p99_us,rpc_p99_us:10,poll:5");
    const uint64_t iters = o.rpc.iters;
    for (unsigned i = 0; i < cli.nsizes; i++) {
        o.rpc.size = cli.sizes[i];
        o.rpc.iters = o.iters_set ? iters : bench_iters_for(iters, o.rpc.size);
        if (run_size(&o, &t, &ext, bench_cli_cpu(&cli, 1)) != 0)
            return 1;
    }
    return 0;
}
