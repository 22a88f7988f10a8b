/* rma_perf's one-sided side (rma_side.h): targets and initiators. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "erma/clock.h"
#include "erma/errors.h"
#include "rma_side.h"

static const char *op_name(const struct rma_opts *o)
{
    return o->op == ERMA_RMA_READ ? "read" : "write";
}

size_t rma_buf_len(const struct rma_opts *o)
{
    const uint64_t op = o->rpc.size < ERMA_RMA_MAX_OP ? o->rpc.size : ERMA_RMA_MAX_OP;
    const uint64_t window = (uint64_t)o->rpc.window * op;
    return o->rpc.size > window ? o->rpc.size : window;
}

/* ---- the targets ---- */

int rma_target_open(void *ctx, unsigned t, struct erma_endpoint *ep, struct erma_rpc *rpc)
{
    const struct rma_targets *all = ctx;
    struct rma_target *x = &((struct rma_targets *)ctx)->t[t];
    *x = (struct rma_target){0};
    if (!(x->mem = malloc(all->len)))
        return ERMA_ENOMEM;
    for (size_t i = 0; i < all->len; i++)
        x->mem[i] = rma_pattern(i);
    uint32_t region;
    int rc = erma_rma_create(ep, NULL, &x->rma);
    if (rc == ERMA_OK)
        rc = erma_region_register(x->rma, x->mem, all->len,
                                  ERMA_RMA_PERM_READ | ERMA_RMA_PERM_WRITE, &region);
    if (rc == ERMA_OK)
        rc = erma_keys_create(rpc, x->rma, ERMA_KEYS_REQ_TYPE, &x->keys);
    if (rc == ERMA_OK)
        rc = erma_keys_export(x->keys, RMA_REGION_NAME, region, NULL, 0);
    return rc;
}

void rma_target_close(void *ctx, unsigned t)
{
    struct rma_target *x = &((struct rma_targets *)ctx)->t[t];
    erma_keys_destroy(x->keys);
    if (x->rma)
        erma_rma_destroy(x->rma);
    free(x->mem);
}

/* ---- the initiator ---- */

void rma_initiator_close(struct rma_initiator *c)
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

/* The key of target tid's region, over a session of c's own (the key
 * service waits for the server to start: 10 s at most). */
static int fetch_key(struct rma_initiator *c, const char *server, uint8_t tid)
{
    const int s = erma_session_create(c->rpc, server, tid);
    if (s < 0)
        return s;
    const int rc = erma_keys_fetch_wait(c->rpc, c->rma, s, ERMA_KEYS_REQ_TYPE, RMA_REGION_NAME,
                                        10000000000ull, &c->rkey, NULL, NULL);
    erma_session_destroy(c->rpc, s);
    return rc;
}

int rma_initiator_open(struct rma_initiator *c, const struct rma_opts *o, uint8_t tid)
{
    memset(c, 0, sizeof *c);
    const struct erma_rma_cfg cfg = {.slots = o->rpc.window + 16, .cc_off = o->cc_off};
    int rc = erma_nexus_create(NULL, &c->nx);
    if (rc == ERMA_OK)
        rc = erma_endpoint_create(o->rpc.uri, tid, &o->ep, &c->ep);
    if (rc == ERMA_OK)
        rc = erma_rpc_create(c->nx, c->ep, &o->cfg, &c->rpc);
    if (rc == ERMA_OK)
        rc = erma_rma_create(c->ep, &cfg, &c->rma);
    if (rc == ERMA_OK)
        rc = fetch_key(c, o->rpc.server, tid);
    if (rc == ERMA_OK && (c->peer = erma_rma_peer(c->rma, o->rpc.server, tid)) < 0)
        rc = c->peer;
    const size_t len = rma_buf_len(o);
    if (rc == ERMA_OK && !(c->buf = malloc(len)))
        rc = ERMA_ENOMEM;
    if (rc == ERMA_OK) /* what a WRITE writes back: the region's own bytes */
        for (size_t i = 0; i < len; i++)
            c->buf[i] = rma_pattern(i);
    if (rc != ERMA_OK)
        rma_initiator_close(c);
    return rc;
}

/* A completion into c->done; for erma_endpoint_run_until. */
static bool polled(void *ctx)
{
    struct rma_initiator *c = ctx;
    return erma_rma_poll(c->rma, &c->done, 1) == 1;
}

/* Waits for the one op or transfer in flight (10 s at most). */
static int wait_one(struct rma_initiator *c)
{
    if (erma_endpoint_run_until(c->ep, polled, c, 10000000000ull) != ERMA_OK)
        return ERMA_ETIMEDOUT;
    return c->done.status;
}

/* A READ of [off, off + len) must have brought the region's pattern. */
static int check_read(const struct rma_opts *o, const struct rma_initiator *c, uint64_t off, uint64_t len)
{
    if (o->op != ERMA_RMA_READ)
        return ERMA_OK;
    for (uint64_t i = off; i < off + len; i++)
        if (c->buf[i] != rma_pattern(i))
            return ERMA_EBADPKT;
    return ERMA_OK;
}

static struct erma_rma_cmd cmd_at(const struct rma_opts *o, struct rma_initiator *c, uint64_t off,
                                  uint32_t len)
{
    return (struct erma_rma_cmd){.op = o->op, .peer = c->peer, .rkey = c->rkey, .offset = off,
                                 .local = c->buf + off, .len = len, .tag = off};
}

/* One op of o->rpc.size, or above ERMA_RMA_MAX_OP one transfer; waits for it. */
static int op_sync(const struct rma_opts *o, struct rma_initiator *c)
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

const char *rma_where(const struct rma_opts *o, const char *what, char *buf, size_t len)
{
    char thread[32] = "";
    if (o->threads)
        snprintf(thread, sizeof thread, ", thread %u", o->rpc.thread_id);
    snprintf(buf, len, "%s %s %s %u B, round %u%s, %s -> %s", o->mode, what, op_name(o),
             o->rpc.size, o->round, thread, o->rpc.uri, o->rpc.server);
    return buf;
}

/* Names the failed ops of a measurement (they are counted, not timed). */
static void report_failed(const struct rma_opts *o, uint64_t failed, uint64_t total, int last)
{
    char w[256];
    if (failed)
        fprintf(stderr, "rma_perf: %s: %llu of %llu ops failed, the last with: %s\n",
                rma_where(o, "one-sided", w, sizeof w), (unsigned long long)failed,
                (unsigned long long)total, erma_strerror(last));
}

int rma_lat(const struct rma_opts *o, struct rma_initiator *c, struct bench_lat *out)
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

/* Fills the window, at most room ops in flight, op j on its own bytes at
 * (j mod window) x size; *next counts them. */
static void rate_issue(const struct rma_opts *o, struct rma_initiator *c, uint32_t *inflight,
                       uint64_t *next, uint64_t room)
{
    for (; *inflight < o->rpc.window && *inflight < room; ++*inflight, ++*next) {
        const uint64_t off = (*next % o->rpc.window) * o->rpc.size;
        const struct erma_rma_cmd cmd = cmd_at(o, c, off, o->rpc.size);
        if (erma_rma_submit(c->rma, &cmd) < 0)
            break;
    }
}

/* With o->ops, an op that fails (timed out on a stalled host, refused) is
 * counted and another goes in its place, so that o->ops complete right. */
int rma_rate(const struct rma_opts *o, struct rma_initiator *c, struct bench_raw_rate *out)
{
    struct erma_rma_completion done[64];
    uint64_t next = 0;
    uint32_t inflight = 0;
    const uint64_t start = erma_now_ns(), end = start + (uint64_t)(o->rpc.seconds * 1e9);
    uint64_t now = start;
    int rc = ERMA_OK, last = ERMA_OK;
    *out = (struct bench_raw_rate){0};
    while (now < end && rc == ERMA_OK && !(o->ops && out->echoes == o->ops)) {
        rate_issue(o, c, &inflight, &next, o->ops ? o->ops - out->echoes : UINT64_MAX);
        erma_endpoint_run_once(c->ep);
        const int n = erma_rma_poll(c->rma, done, 64);
        for (int i = 0; i < n && rc == ERMA_OK; i++) {
            const bool good = done[i].status == ERMA_OK;
            out->lost += !good;
            last = good ? last : done[i].status;
            rc = good ? check_read(o, c, done[i].tag, o->rpc.size) : ERMA_OK;
            out->echoes += good && rc == ERMA_OK;
            out->wrong += rc == ERMA_EBADPKT;
        }
        inflight -= (uint32_t)(n > 0 ? n : 0);
        now = erma_now_ns();
    }
    out->seconds = (double)(now - start) / 1e9;
    out->mpps = (double)out->echoes / out->seconds / 1e6;
    report_failed(o, out->lost, out->echoes + out->lost, last);
    const bool short_of = o->ops ? out->echoes < o->ops : out->echoes == 0;
    return rc == ERMA_OK && short_of ? last != ERMA_OK ? last : ERMA_ETIMEDOUT : rc;
}

int rma_bw(const struct rma_opts *o, struct rma_initiator *c, double *gbps)
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
                rma_where(o, "one-sided", w, sizeof w), (unsigned long long)st.retries);
    struct erma_rma_rtt rtt;
    if (getenv("ERMA_BENCH_STATS") && erma_rma_peer_rtt(c->rma, c->peer, &rtt) == ERMA_OK)
        fprintf(stderr, "rma_perf: %llu answers for no live op (late), srtt %.0f us, rto %.0f us\n",
                (unsigned long long)st.rx_unmatched, rtt.srtt_ns / 1e3, rtt.rto_ns / 1e3);
    struct erma_rma_window_info lw, rw;
    if (getenv("ERMA_BENCH_CC") && erma_rma_local_window(c->rma, &lw) == ERMA_OK &&
        erma_rma_window(c->rma, c->peer, o->op, &rw) == ERMA_OK)
        fprintf(stderr, "rma_perf: windows local %.2f remote %.2f ops\n", lw.cwnd, rw.cwnd);
    *gbps = rc == ERMA_OK ? (double)bytes * 8 / (double)(now - start) : 0;
    return rc;
}

