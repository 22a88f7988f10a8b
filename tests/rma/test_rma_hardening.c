/* One-sided hardening (issue 17): replayed WRITEs and READs, forged status
 * answers, keys bound to an address, timeouts that follow the RTT and
 * survive a stalled initiator, a cipher per region, and nonces that stay
 * fresh across a restart. The sim's tap captures packets and its inject
 * replays or forges them, as someone on the path could. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <sodium.h>

#include "erma/sdk/transport_driver.h"
#include "erma/sdk/wire.h"
#include "rma_util.h"

#define REGION_LEN (64 * 1024)
#define PORT 31850
#define OPHDR 72 /* docs/PROTOCOL.md */
#define OFF_TOKEN 48
#define OFF_DEADLINE 56
#define OFF_NONCE 64
#define PKT_OVERHEAD (ERMA_HDR_SIZE + OPHDR + 16)

enum { T_READ_REQ = 1, T_READ_RESP, T_WRITE_REQ, T_REKEY_REQ, T_SOLICIT, T_DATA, T_DONE,
       T_ERROR };

static uint8_t type_of(const uint8_t *p)
{
    return p[ERMA_HDR_SIZE];
}

static uint64_t field(const uint8_t *p, unsigned off, unsigned n)
{
    return erma_get_le(p + ERMA_HDR_SIZE + off, n);
}

/* ---- a spy on the fabric: counts, captures, and a hook ---- */

#define CAPS 128

struct cap {
    uint8_t pkt[1500];
    uint32_t len;
    struct erma_sim_event ev;
};

struct spy {
    uint64_t pkts[MAX_HOSTS], bytes[MAX_HOSTS]; /* sent by host */
    uint64_t by_type[T_ERROR + 1];
    uint32_t want;          /* capture packets of these types: bit 1 << type */
    uint32_t ncaps;
    struct cap caps[CAPS];
    uint64_t *tokens;       /* SOLICIT tokens seen */
    size_t ntokens, tokens_cap;
    uint64_t max_nonce[MAX_HOSTS];
    void (*hook)(struct spy *s, const struct erma_sim_event *ev, uint8_t *data);
    void *ctx;
};

static bool spy_fn(void *ctx, const struct erma_sim_event *ev, uint8_t *data)
{
    struct spy *s = ctx;
    if (ev->len < PKT_OVERHEAD || (data[14] & 0xf) != ERMA_PROTO_RMA)
        return true;
    const uint8_t t = type_of(data);
    if (ev->src_host < MAX_HOSTS) {
        s->pkts[ev->src_host]++;
        s->bytes[ev->src_host] += ev->len;
        const uint64_t n = field(data, OFF_NONCE, 8);
        s->max_nonce[ev->src_host] = n > s->max_nonce[ev->src_host] ? n
                                                                      : s->max_nonce[ev->src_host];
    }
    if (t <= T_ERROR)
        s->by_type[t]++;
    if (t == T_SOLICIT && s->tokens && s->ntokens < s->tokens_cap)
        s->tokens[s->ntokens++] = field(data, OFF_TOKEN, 8);
    if (t <= T_ERROR && (s->want >> t & 1) && s->ncaps < CAPS) {
        struct cap *c = &s->caps[s->ncaps++];
        memcpy(c->pkt, data, ev->len);
        c->len = ev->len;
        c->ev = *ev;
    }
    if (s->hook)
        s->hook(s, ev, data);
    return true;
}

static void inject(struct world *w, const struct cap *c, uint16_t from_host)
{
    assert_int_equal(erma_sim_inject(w->sim, from_host, c->ev.src_port, c->ev.dst_host,
                                     c->ev.dst_port, c->pkt, c->len),
                     ERMA_OK);
}

static void run(struct world *w, uint64_t ns)
{
    world_run(w, ns, NULL, NULL);
}

/* ---- a target with one read-write region ---- */

struct target {
    uint8_t *mem;
    uint32_t rw;
};

static void target_up(struct world *w, struct target *t)
{
    t->mem = malloc(REGION_LEN);
    assert_non_null(t->mem);
    for (size_t i = 0; i < REGION_LEN; i++)
        t->mem[i] = (uint8_t)(i * 7 + 3);
    assert_int_equal(erma_region_register(w->rma[0], t->mem, REGION_LEN,
                                          ERMA_RMA_PERM_READ | ERMA_RMA_PERM_WRITE, &t->rw),
                     ERMA_OK);
}

static struct erma_rkey rkey_for(struct world *w, unsigned h, uint32_t region)
{
    struct erma_rkey k;
    assert_int_equal(erma_region_export_uri(w->rma[0], region, erma_rma_identity(w->rma[h]),
                                            w->uri[h], &k),
                     ERMA_OK);
    return k;
}

static int peer0(struct world *w, unsigned h)
{
    const int p = erma_rma_peer(w->rma[h], w->uri[0], 0);
    assert_true(p >= 0);
    return p;
}

static struct erma_rma_stats stats_of(struct world *w, unsigned h)
{
    struct erma_rma_stats st;
    erma_rma_get_stats(w->rma[h], &st);
    return st;
}

/* Fast links: a WRITE takes about 2 us, so 10^5 solicitations fit in
 * virtual time well within one captured request's deadline. */
static void fast_sim(struct erma_sim_cfg *sc)
{
    erma_sim_cfg_default(sc);
    sc->link_delay_ns = 100;
}

/* ---- 1. a replayed WRITE never writes ---- */

struct until {
    struct world *w;
    const uint64_t *counter;
    uint64_t above;
};

static bool counter_above(void *ctx)
{
    const struct until *u = ctx;
    return *u->counter > u->above;
}

struct stat_wait {
    struct world *w;
    size_t off;        /* offsetof(struct erma_rma_stats, field) */
    uint64_t above;
};

static bool stat_above(void *ctx)
{
    const struct stat_wait *s = ctx;
    struct erma_rma_stats st;
    erma_rma_get_stats(s->w->rma[0], &st);
    uint64_t v;
    memcpy(&v, (const uint8_t *)&st + s->off, sizeof v);
    return v > s->above;
}

/* Runs until the target's stat at off grows, or ns pass; false then. */
static bool wait_stat(struct world *w, size_t off, uint64_t ns)
{
    struct erma_rma_stats st = stats_of(w, 0);
    struct stat_wait s = {w, off, 0};
    memcpy(&s.above, (const uint8_t *)&st + off, sizeof s.above);
    return world_run(w, ns, stat_above, &s);
}

/* Someone with no key captured one WRITE (request and data). They replay
 * the request 10^5 times, each time waiting for the target's new
 * solicitation, replay the data into it, and wait for it to expire. With a
 * 16-bit solicitation generation the 65536th solicitation carried the
 * captured token again and the old bytes were written; with 64-bit random
 * tokens none matches and none repeats. Once the request's deadline has
 * passed, it draws no solicitation at all. */
static void test_write_replay(void **state)
{
    (void)state;
    enum { N = 100000 };
    struct erma_sim_cfg sc;
    fast_sim(&sc);
    /* the target: one solicitation at a time, which expires after 5 us;
     * the initiator: a long timeout, so the captured request stays valid */
    struct erma_rma_cfg cfg[2] = {{.solicits = 1, .op_timeout_ns = 5000},
                                  {.op_timeout_ns = 2000000000}};
    struct world w;
    struct target t;
    world_up_cfg(&w, true, 2, &sc, cfg);
    target_up(&w, &t);
    const struct erma_rkey k = rkey_for(&w, 1, t.rw);
    const int p = peer0(&w, 1);
    uint8_t old[128], cur[128];
    memset(old, 0x11, sizeof old);
    memset(cur, 0x22, sizeof cur);
    static struct spy cap;
    memset(&cap, 0, sizeof cap);
    cap.want = 1u << T_WRITE_REQ | 1u << T_DATA;
    erma_sim_set_tap(w.sim, spy_fn, &cap);
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_WRITE, p, &k, 512, old, 128, 0), NULL),
                     ERMA_OK);
    erma_sim_set_tap(w.sim, NULL, NULL);
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_WRITE, p, &k, 512, cur, 128, 0), NULL),
                     ERMA_OK);
    assert_int_equal(cap.ncaps, 2);
    const struct cap *rq = &cap.caps[0], *dt = &cap.caps[1]; /* the old bytes' WRITE */
    assert_int_equal(type_of(rq->pkt), T_WRITE_REQ);
    assert_int_equal(type_of(dt->pkt), T_DATA);
    assert_memory_equal(t.mem + 512, cur, 128);

    static struct spy watch;
    memset(&watch, 0, sizeof watch);
    watch.tokens = malloc(N * sizeof *watch.tokens);
    assert_non_null(watch.tokens);
    watch.tokens_cap = N;
    erma_sim_set_tap(w.sim, spy_fn, &watch);
    const struct erma_rma_stats before = stats_of(&w, 0);
    unsigned written_at = 0;
    for (unsigned i = 0; i < N && !written_at; i++) {
        struct until u = {&w, &watch.by_type[T_SOLICIT], watch.by_type[T_SOLICIT]};
        inject(&w, rq, rq->ev.src_host);
        assert_true(world_run(&w, 1000000, counter_above, &u));
        inject(&w, dt, dt->ev.src_host);
        /* rejected, or (where a token came back) written */
        wait_stat(&w, offsetof(struct erma_rma_stats, data_rejected), 100000);
        if (memcmp(t.mem + 512, cur, 128) != 0)
            written_at = i + 1;
        else
            assert_true(wait_stat(&w, offsetof(struct erma_rma_stats, solicit_expired), 1000000));
    }
    const struct erma_rma_stats after = stats_of(&w, 0);
    size_t distinct = watch.ntokens ? 1 : 0;
    qsort(watch.tokens, watch.ntokens, sizeof *watch.tokens, cmp_u64);
    for (size_t i = 1; i < watch.ntokens; i++)
        distinct += watch.tokens[i] != watch.tokens[i - 1];
    print_message("  %lu replays of a WRITE request and its data: %lu solicitations, %zu "
                  "distinct tokens, %lu data rejected, written at replay %u (0: never); "
                  "%.3f s virtual\n",
                  (unsigned long)watch.by_type[T_SOLICIT], (unsigned long)watch.by_type[T_SOLICIT],
                  distinct, (unsigned long)(after.data_rejected - before.data_rejected),
                  written_at, (double)erma_sim_now(w.sim) / 1e9);
    assert_int_equal(written_at, 0);
    assert_memory_equal(t.mem + 512, cur, 128);
    assert_int_equal(watch.by_type[T_SOLICIT], N);
    assert_int_equal(distinct, N);
    assert_int_equal(after.data_rejected - before.data_rejected, N);
    /* the initiator answered none: every request and data packet was ours */
    assert_int_equal(watch.by_type[T_WRITE_REQ], N);
    assert_int_equal(watch.by_type[T_DATA], N);

    /* past its deadline (2 s after it was sent) the request draws nothing */
    run(&w, 2000000000);
    const uint64_t sent = watch.pkts[0];
    inject(&w, rq, rq->ev.src_host);
    inject(&w, dt, dt->ev.src_host);
    run(&w, 1000000);
    assert_int_equal(watch.pkts[0], sent);
    assert_int_equal(stats_of(&w, 0).expired, after.expired + 1);
    assert_memory_equal(t.mem + 512, cur, 128);
    erma_sim_set_tap(w.sim, NULL, NULL);
    free(watch.tokens);
    world_down(&w);
    free(t.mem);
}

/* ---- 6. no amplification, no table filled, after a bounded time ---- */

/* 80 captured WRITE requests and a 4 KB READ request, replayed after their
 * deadline (the initiator's timeout, here 50 us): the target sends nothing
 * (no solicitation holds its table, no READ data goes out) and serves the
 * next genuine WRITE. Before the deadline a replay is still answered:
 * that is the bound. */
static void test_replay_after_deadline(void **state)
{
    (void)state;
    enum { WRITES = 80, READS = 100 };
    const uint64_t timeout = 50000;
    struct erma_rma_cfg cfg[2] = {{0}, {.op_timeout_ns = timeout}};
    struct world w;
    struct target t;
    world_up_cfg(&w, true, 2, NULL, cfg);
    target_up(&w, &t);
    const struct erma_rkey k = rkey_for(&w, 1, t.rw);
    const int p = peer0(&w, 1);
    static struct spy wr, rd, watch;
    memset(&wr, 0, sizeof wr);
    wr.want = 1u << T_WRITE_REQ;
    erma_sim_set_tap(w.sim, spy_fn, &wr);
    uint8_t buf[ERMA_RMA_MAX_OP];
    memset(buf, 0x5a, sizeof buf);
    for (int i = 0; i < WRITES; i++)
        assert_int_equal(
            world_op(&w, 1, cmd_of(ERMA_RMA_WRITE, p, &k, 64 * i, buf, 64, 0), NULL), ERMA_OK);
    memset(&rd, 0, sizeof rd);
    rd.want = 1u << T_READ_REQ;
    erma_sim_set_tap(w.sim, spy_fn, &rd);
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_READ, p, &k, 0, buf, 4096, 0), NULL),
                     ERMA_OK);
    const uint64_t deadline = rd.caps[0].ev.time + timeout;
    assert_int_equal(wr.ncaps, WRITES);

    /* within the deadline a replayed READ is served (its answer unmatched) */
    memset(&watch, 0, sizeof watch);
    erma_sim_set_tap(w.sim, spy_fn, &watch);
    const uint64_t now = erma_sim_now(w.sim);
    assert_true(now + 10000 < deadline);
    inject(&w, &rd.caps[0], 1);
    run(&w, 5000);
    assert_int_equal(watch.by_type[T_READ_RESP], 3);

    /* after it, nothing */
    run(&w, deadline + 1000 - erma_sim_now(w.sim));
    memset(&watch, 0, sizeof watch);
    const struct erma_rma_stats before = stats_of(&w, 0);
    for (int i = 0; i < WRITES; i++)
        inject(&w, &wr.caps[i], 1);
    for (int i = 0; i < READS; i++)
        inject(&w, &rd.caps[0], 1);
    run(&w, 1000000);
    const struct erma_rma_stats after = stats_of(&w, 0);
    print_message("  %d WRITE and %d READ requests replayed after their deadline: target sent "
                  "%lu packets (%lu bytes), %lu expired\n",
                  WRITES, READS, (unsigned long)watch.pkts[0], (unsigned long)watch.bytes[0],
                  (unsigned long)(after.expired - before.expired));
    assert_int_equal(watch.pkts[0], 0);
    assert_int_equal(after.expired - before.expired, WRITES + READS);
    assert_int_equal(after.served, before.served);
    /* the solicitation table is free: a genuine WRITE goes through */
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_WRITE, p, &k, 0, buf, 64, 0), NULL),
                     ERMA_OK);
    erma_sim_set_tap(w.sim, NULL, NULL);
    world_down(&w);
    free(t.mem);
}

/* ---- 6. keys bound to an address ---- */

/* A key works only from the address it was derived for: another engine
 * claiming the same identity from another address fails to verify, and a
 * READ request replayed from a forged source draws one 104-byte plain
 * AUTH_FAILED there, not 4 KB of data. */
static void test_key_bound_to_address(void **state)
{
    (void)state;
    struct erma_rma_cfg cfg[3] = {{0}, {.identity = 77, .op_timeout_ns = 1000000},
                                  {.identity = 77}};
    struct world w;
    struct target t;
    world_up_cfg(&w, true, 3, NULL, cfg);
    target_up(&w, &t);
    const struct erma_rkey k = rkey_for(&w, 1, t.rw);
    uint8_t buf[ERMA_RMA_MAX_OP];
    static struct spy rd;
    memset(&rd, 0, sizeof rd);
    rd.want = 1u << T_READ_REQ;
    erma_sim_set_tap(w.sim, spy_fn, &rd);
    assert_int_equal(
        world_op(&w, 1, cmd_of(ERMA_RMA_READ, peer0(&w, 1), &k, 0, buf, 4096, 0), NULL),
        ERMA_OK);
    assert_int_equal(
        world_op(&w, 2, cmd_of(ERMA_RMA_READ, peer0(&w, 2), &k, 0, buf, 4096, 0), NULL),
        ERMA_EAUTH);
    /* host 1's request, within its deadline, sent as if from host 2 */
    static struct spy watch;
    memset(&watch, 0, sizeof watch);
    erma_sim_set_tap(w.sim, spy_fn, &watch);
    inject(&w, &rd.caps[0], 2);
    run(&w, 100000);
    print_message("  a 4 KB READ request from a forged source drew %lu packets, %lu bytes\n",
                  (unsigned long)watch.pkts[0], (unsigned long)watch.bytes[0]);
    assert_int_equal(watch.by_type[T_READ_RESP], 0);
    assert_true(watch.bytes[0] <= PKT_OVERHEAD);
    erma_sim_set_tap(w.sim, NULL, NULL);
    world_down(&w);
    free(t.mem);
}

/* ---- 5. forged status answers ---- */

struct forge {
    struct world *w;
    int status;      /* the status to forge: -erma_err */
    bool sealed;     /* pretend to be sealed: random tag */
    bool done;
};

/* On the initiator's READ request, answers it at once with a forged ERROR
 * from the target's address, built from the request's clear header. */
static void forge_hook(struct spy *s, const struct erma_sim_event *ev, uint8_t *data)
{
    struct forge *f = s->ctx;
    if (f->done || type_of(data) != T_READ_REQ || ev->len != PKT_OVERHEAD)
        return;
    f->done = true;
    uint8_t pkt[PKT_OVERHEAD];
    memcpy(pkt, data, sizeof pkt);
    uint8_t *o = pkt + ERMA_HDR_SIZE;
    o[0] = T_ERROR;
    o[1] = (uint8_t)-f->status;
    o[2] = f->sealed ? 0 : 1;
    randombytes_buf(pkt + ERMA_HDR_SIZE + OPHDR, 16);
    if (!f->sealed)
        memset(pkt + ERMA_HDR_SIZE + OPHDR, 0, 16);
    assert_int_equal(erma_sim_inject(f->w->sim, ev->dst_host, ev->dst_port, ev->src_host,
                                     ev->src_port, pkt, sizeof pkt),
                     ERMA_OK);
}

/* A one-chunk transfer whose request meets a forged answer; returns the
 * transfer's status and the remote window's cuts. */
static int forged_transfer(int status, bool sealed, uint64_t *cuts, uint64_t *dropped)
{
    struct world w;
    struct target t;
    world_up(&w, true, 2);
    target_up(&w, &t);
    const struct erma_rkey k = rkey_for(&w, 1, t.rw);
    const int p = peer0(&w, 1);
    uint8_t buf[ERMA_RMA_MAX_OP];
    /* a first transfer creates the window */
    const struct erma_rma_xfer x = {.op = ERMA_RMA_READ, .peer = p, .rkey = k,
                                    .local = buf, .len = sizeof buf};
    struct erma_rma_completion c;
    struct erma_rma_window_info in;
    assert_int_equal(erma_rma_window(w.rma[1], p, ERMA_RMA_READ, &in), ERMA_ENOENT);
    assert_int_equal(erma_rma_window(w.rma[1], p, (enum erma_rma_op)9, &in), ERMA_EINVAL);
    assert_int_equal(erma_rma_window(w.rma[1], -1, ERMA_RMA_READ, &in), ERMA_EINVAL);
    assert_int_equal(erma_rma_local_window(w.rma[1], NULL), ERMA_EINVAL);
    assert_true(erma_rma_transfer(w.rma[1], &x) >= 0);
    assert_int_equal(world_wait(&w, 1, &c, 1, 1000000000), 1);
    assert_int_equal(c.status, ERMA_OK);
    assert_int_equal(erma_rma_window(w.rma[1], p, ERMA_RMA_READ, &in), ERMA_OK);
    assert_true(in.issued >= 1 && in.cwnd > 0);
    assert_int_equal(erma_rma_window(w.rma[1], p, ERMA_RMA_WRITE, &in), ERMA_ENOENT);
    static struct spy s;
    struct forge f = {&w, status, sealed, false};
    memset(&s, 0, sizeof s);
    s.hook = forge_hook;
    s.ctx = &f;
    erma_sim_set_tap(w.sim, spy_fn, &s);
    const struct erma_rma_stats st0 = stats_of(&w, 1);
    assert_true(erma_rma_transfer(w.rma[1], &x) >= 0);
    assert_int_equal(world_wait(&w, 1, &c, 1, 1000000000), 1);
    assert_true(f.done);
    const struct erma_rma_stats st1 = stats_of(&w, 1);
    *dropped = st1.rx_unmatched + st1.rx_unsealed_bad - st0.rx_unmatched - st0.rx_unsealed_bad;
    assert_int_equal(erma_rma_window(w.rma[1], p, ERMA_RMA_READ, &in), ERMA_OK);
    *cuts = in.cuts;
    erma_sim_set_tap(w.sim, NULL, NULL);
    world_down(&w);
    free(t.mem);
    return c.status;
}

/* Status answers in the clear cannot cut a window or fail an op by NACK:
 * a NACK is sealed, and a plain one is dropped. AUTH_FAILED and
 * NO_SUCH_REGION, which a target cannot seal (it has no key for the
 * request), end the op but never cut a window. A forged "sealed" answer
 * fails to open. Nor can one tell an initiator its key was superseded:
 * that answer is sealed under the op's key, so a plain one is dropped. */
static void test_forged_status(void **state)
{
    (void)state;
    uint64_t cuts, dropped;
    int st = forged_transfer(ERMA_ENACK, false, &cuts, &dropped);
    print_message("  forged plain NACK: transfer %d, window cuts %lu, dropped %lu\n", st,
                  (unsigned long)cuts, (unsigned long)dropped);
    assert_int_equal(st, ERMA_OK);
    assert_int_equal(cuts, 0);
    assert_int_equal(dropped, 1);
    st = forged_transfer(ERMA_ENACK, true, &cuts, &dropped);
    assert_int_equal(st, ERMA_OK);
    assert_int_equal(cuts, 0);
    assert_int_equal(dropped, 1);
    st = forged_transfer(ERMA_ETIMEDOUT, false, &cuts, &dropped);
    assert_int_equal(st, ERMA_OK);
    assert_int_equal(cuts, 0);
    st = forged_transfer(ERMA_EAUTH, false, &cuts, &dropped);
    print_message("  forged plain AUTH_FAILED: transfer %d, window cuts %lu\n", st,
                  (unsigned long)cuts);
    assert_int_equal(st, ERMA_EAUTH);
    assert_int_equal(cuts, 0);
    st = forged_transfer(ERMA_ENOREGION, false, &cuts, &dropped);
    assert_int_equal(st, ERMA_ENOREGION);
    assert_int_equal(cuts, 0);
    for (int sealed = 0; sealed < 2; sealed++) {
        st = forged_transfer(ERMA_ESUPERSEDED, sealed, &cuts, &dropped);
        print_message("  forged %s SUPERSEDED: transfer %d, dropped %lu\n",
                      sealed ? "sealed" : "plain", st, (unsigned long)dropped);
        assert_int_equal(st, ERMA_OK);
        assert_int_equal(cuts, 0);
        assert_int_equal(dropped, 1);
    }
}

/* ---- 7. timeouts that follow the RTT ---- */

static void reads_ok(struct world *w, unsigned h, const struct erma_rkey *k, int p, int n)
{
    uint8_t buf[32];
    for (int i = 0; i < n; i++)
        assert_int_equal(world_op(w, h, cmd_of(ERMA_RMA_READ, p, k, 32 * i, buf, 32, 0), NULL),
                         ERMA_OK);
}

/* READs that teach the initiator the RTT; on udp an op may time out when
 * this loaded machine stalls the one thread that runs both ends. */
static void warm_up(struct world *w, unsigned h, const struct erma_rkey *k, int p, int n)
{
    uint8_t buf[32];
    int ok = 0;
    for (int i = 0; i < n; i++) {
        const int st = world_op(w, h, cmd_of(ERMA_RMA_READ, p, k, 32 * i, buf, 32, 0), NULL);
        assert_true(st == ERMA_OK || (st == ERMA_ETIMEDOUT && !w->on_sim));
        ok += st == ERMA_OK;
    }
    assert_true(ok > n / 2);
}

/* 64 READs in flight when the initiator stops running (descheduled) for
 * well past its timeout while the target answers all of them: when it runs
 * again, the answers waiting in its RX queue complete the ops; none times
 * out before its loop has read what is there. */
static void stall_run(bool on_sim)
{
    enum { OPS = 64 };
    struct world w;
    struct target t;
    world_up(&w, on_sim, 2); /* on udp an RTO of srtt + 20 ms (rma_util.h) */
    target_up(&w, &t);
    const struct erma_rkey k = rkey_for(&w, 1, t.rw);
    const int p = peer0(&w, 1);
    warm_up(&w, 1, &k, p, 200); /* the RTO comes down to the measured RTT */
    static uint8_t bufs[OPS][32];
    for (int i = 0; i < OPS; i++) {
        const struct erma_rma_cmd c = cmd_of(ERMA_RMA_READ, p, &k, 32 * i, bufs[i], 32, i);
        assert_true(erma_rma_submit(w.rma[1], &c) >= 0);
    }
    erma_endpoint_run_once(w.ep[1]); /* the requests go out */
    const uint64_t stall = on_sim ? 1000000 : 100000000; /* 30x, 5x the RTO */
    if (on_sim) {
        erma_sim_run(w.sim, &w.ep[0], 1, stall, NULL, NULL);
    } else {
        for (const uint64_t end = erma_now_ns() + stall; erma_now_ns() < end;)
            erma_endpoint_run_once(w.ep[0]);
    }
    assert_int_equal(stats_of(&w, 0).served, 200 + OPS);
    struct erma_rma_completion c[OPS];
    assert_int_equal(world_wait(&w, 1, c, OPS, 1000000000), OPS);
    int ok = 0;
    for (int i = 0; i < OPS; i++)
        ok += c[i].status == ERMA_OK;
    print_message("  %s: %d of %d READs answered during a %.0f ms stall of the initiator "
                  "completed OK\n",
                  on_sim ? "sim" : "udp", ok, OPS, (double)stall / 1e6);
    assert_int_equal(ok, OPS);
    world_down(&w);
    free(t.mem);
}

static void test_stalled_initiator_sim(void **state)
{
    (void)state;
    stall_run(true);
}

static void test_stalled_initiator_udp(void **state)
{
    (void)state;
    stall_run(false);
}

/* A target that takes 20 us per request, 16 READs kept in flight: every
 * READ waits about 320 us, far past a timeout of 5 base RTTs (25 us), and
 * none times out once the RTO has followed the measured RTT up (while the
 * first 16 build the queue, each RTT is 20 us longer than the one before,
 * and a few of the next ops, issued on the early estimate, do time out). */
static void test_rto_follows_rtt(void **state)
{
    (void)state;
    enum { DEPTH = 16, OPS = 2000 };
    struct erma_rma_cfg cfg[2] = {{.serve_batch = 1, .serve_ns = 20000}};
    struct world w;
    struct target t;
    world_up_cfg(&w, true, 2, NULL, cfg);
    target_up(&w, &t);
    const struct erma_rkey k = rkey_for(&w, 1, t.rw);
    const int p = peer0(&w, 1);
    static uint8_t bufs[DEPTH][64];
    for (int i = 0; i < DEPTH; i++)
        assert_true(erma_rma_submit(w.rma[1], &(struct erma_rma_cmd){
                        .op = ERMA_RMA_READ, .peer = p, .rkey = k, .offset = 64 * i,
                        .local = bufs[i], .len = 64, .tag = (uint64_t)i}) >= 0);
    int done = 0, ok = 0, timed_out = 0, late = 0;
    uint64_t max_delay = 0;
    while (done < OPS) {
        struct erma_rma_completion c[DEPTH];
        const int n = world_wait(&w, 1, c, 1, 1000000000);
        assert_int_equal(n, 1);
        done++;
        ok += c[0].status == ERMA_OK;
        timed_out += c[0].status == ERMA_ETIMEDOUT;
        late += c[0].status == ERMA_ETIMEDOUT && done > 100;
        max_delay = c[0].total_delay_ns > max_delay ? c[0].total_delay_ns : max_delay;
        if (done + DEPTH <= OPS)
            assert_true(erma_rma_submit(w.rma[1], &(struct erma_rma_cmd){
                            .op = ERMA_RMA_READ, .peer = p, .rkey = k,
                            .offset = 64 * c[0].tag, .local = bufs[c[0].tag], .len = 64,
                            .tag = c[0].tag}) >= 0);
    }
    struct erma_rma_rtt rtt;
    assert_int_equal(erma_rma_peer_rtt(w.rma[1], p, &rtt), ERMA_OK);
    print_message("  slow target: %d of %d READs OK, %d timed out (%d after the first 100), "
                  "slowest %.0f us; srtt %.0f us, rto %.0f us\n",
                  ok, OPS, timed_out, late, (double)max_delay / 1e3, (double)rtt.srtt_ns / 1e3,
                  (double)rtt.rto_ns / 1e3);
    assert_int_equal(late, 0);
    assert_true(ok >= OPS - DEPTH);
    assert_true(rtt.srtt_ns > 200000 && rtt.rto_ns > rtt.srtt_ns);
    world_down(&w);
    free(t.mem);
}

/* On udp, a target that stops answering is noticed after the measured
 * RTT's timeout (srtt + 5 ms here, the floor this test sets), not the RTO's
 * first guess (1 s here). The bounds are 10x what they expect, for a busy
 * machine: an RTO under 50 ms once measured, the dead target noticed at
 * that RTO, before 10 of it; the figures themselves are printed. */
static void test_rto_udp_detects_loss(void **state)
{
    (void)state;
    enum { FLOOR = 5000000, FIRST_GUESS = 1000000000 };
    const struct erma_rma_cfg one = {.op_timeout_min_ns = FLOOR, .op_timeout_max_ns = FIRST_GUESS};
    struct erma_rma_cfg cfg[2] = {one, one};
    struct world w;
    struct target t;
    world_up_cfg(&w, false, 2, NULL, cfg);
    target_up(&w, &t);
    const struct erma_rkey k = rkey_for(&w, 1, t.rw);
    const int p = peer0(&w, 1);
    struct erma_rma_rtt rtt = {0};
    assert_int_equal(erma_rma_peer_rtt(w.rma[1], p, &rtt), ERMA_OK);
    assert_int_equal(rtt.rto_ns, FIRST_GUESS);
    /* a calm estimate: a stall of this loaded machine in the last few
     * samples inflates the variance for a while */
    for (int tries = 0; tries < 10; tries++) {
        warm_up(&w, 1, &k, p, 100);
        assert_int_equal(erma_rma_peer_rtt(w.rma[1], p, &rtt), ERMA_OK);
        if (rtt.rto_ns < 2 * FLOOR)
            break;
    }
    world_kill(&w, 0);
    uint8_t buf[32];
    struct erma_rma_completion c;
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_READ, p, &k, 0, buf, 32, 0), &c),
                     ERMA_ETIMEDOUT);
    print_message("  udp: srtt %.1f us, rto %.2f ms; a dead target noticed after %.2f ms\n",
                  (double)rtt.srtt_ns / 1e3, (double)rtt.rto_ns / 1e6,
                  (double)c.total_delay_ns / 1e6);
    assert_true(rtt.rto_ns >= FLOOR && rtt.rto_ns < 10 * FLOOR);
    assert_true(c.total_delay_ns >= rtt.rto_ns);
    assert_true(c.total_delay_ns < 10 * rtt.rto_ns);
    world_down(&w);
    free(t.mem);
}

/* ---- 9. a cipher per region, whatever the CPU ---- */

/* Host 1 acts as a CPU without AES-NI, host 2 has what this machine has.
 * A ChaCha20-Poly1305 region works for both; an AES-GCM region (the
 * default where this machine has AES-NI) works for host 2 and is refused
 * at submit on host 1 with ERMA_ENOTSUP; a target without AES-NI cannot
 * register one, and its default is ChaCha20-Poly1305. */
static void test_cipher_per_region(void **state)
{
    (void)state;
    struct erma_rma_cfg cfg[3] = {{0}, {.no_aes = true}, {0}};
    struct world w;
    struct target t;
    world_up_cfg(&w, true, 3, NULL, cfg);
    target_up(&w, &t);
    uint32_t chacha;
    assert_int_equal(erma_region_register_cipher(w.rma[0], t.mem, REGION_LEN,
                                                 ERMA_RMA_PERM_READ | ERMA_RMA_PERM_WRITE,
                                                 ERMA_RMA_CHACHA20_POLY1305, &chacha),
                     ERMA_OK);
    uint8_t buf[256], src[256];
    for (unsigned h = 1; h < 3; h++) {
        const struct erma_rkey k = rkey_for(&w, h, chacha);
        assert_int_equal(k.cipher, ERMA_RMA_CHACHA20_POLY1305);
        const int p = peer0(&w, h);
        memset(src, (int)h, sizeof src);
        assert_int_equal(
            world_op(&w, h, cmd_of(ERMA_RMA_WRITE, p, &k, 1000, src, sizeof src, 0), NULL),
            ERMA_OK);
        assert_int_equal(
            world_op(&w, h, cmd_of(ERMA_RMA_READ, p, &k, 1000, buf, sizeof buf, 0), NULL),
            ERMA_OK);
        assert_memory_equal(buf, src, sizeof buf);
    }
    uint32_t aes = t.rw;
    const int rc = erma_region_register_cipher(w.rma[0], t.mem, 4096, ERMA_RMA_PERM_READ,
                                               ERMA_RMA_AES256_GCM, &aes);
    if (crypto_aead_aes256gcm_is_available()) {
        assert_int_equal(rc, ERMA_OK);
        assert_int_equal(rkey_for(&w, 2, t.rw).cipher, ERMA_RMA_AES256_GCM); /* the default */
        const struct erma_rkey k1 = rkey_for(&w, 1, aes), k2 = rkey_for(&w, 2, aes);
        assert_int_equal(k2.cipher, ERMA_RMA_AES256_GCM);
        assert_int_equal(
            world_op(&w, 2, cmd_of(ERMA_RMA_READ, peer0(&w, 2), &k2, 0, buf, 64, 0), NULL),
            ERMA_OK);
        assert_memory_equal(buf, t.mem, 64);
        const struct erma_rma_cmd c = cmd_of(ERMA_RMA_READ, peer0(&w, 1), &k1, 0, buf, 64, 0);
        assert_int_equal(erma_rma_submit(w.rma[1], &c), ERMA_ENOTSUP);
        const struct erma_rma_xfer x = {.op = ERMA_RMA_READ, .peer = peer0(&w, 1), .rkey = k1,
                                        .local = buf, .len = 64};
        assert_int_equal(erma_rma_transfer(w.rma[1], &x), ERMA_ENOTSUP);
    } else {
        assert_int_equal(rc, ERMA_ENOTSUP);
    }
    assert_int_equal(erma_region_register_cipher(w.rma[1], t.mem, 4096, ERMA_RMA_PERM_READ,
                                                 ERMA_RMA_AES256_GCM, &aes),
                     ERMA_ENOTSUP);
    assert_int_equal(erma_region_register(w.rma[1], t.mem, 4096, ERMA_RMA_PERM_READ, &aes),
                     ERMA_OK);
    struct erma_rkey k1;
    assert_int_equal(erma_region_export_uri(w.rma[1], aes, 1, w.uri[0], &k1), ERMA_OK);
    assert_int_equal(k1.cipher, ERMA_RMA_CHACHA20_POLY1305);
    world_down(&w);
    free(t.mem);
}

/* docs/PROTOCOL.md by hand: a READ request sealed with ChaCha20-Poly1305 by
 * libsodium alone (as a peer without AES-NI, or another implementation,
 * seals it) is answered with data that opens the same way. */
struct probe {
    uint8_t kd[32];
    uint8_t got[64];
    bool answered, opened;
};

static void probe_hook(struct spy *s, const struct erma_sim_event *ev, uint8_t *data)
{
    struct probe *pr = s->ctx;
    if (type_of(data) != T_READ_RESP || ev->src_host != 0)
        return;
    pr->answered = true;
    uint8_t n[12] = {0};
    erma_put_le(n, field(data, OFF_NONCE, 8), 8);
    n[8] = 1;
    const uint32_t plen = ev->len - PKT_OVERHEAD;
    const uint8_t *c = data + ERMA_HDR_SIZE + OPHDR;
    pr->opened = plen <= sizeof pr->got &&
                 crypto_aead_chacha20poly1305_ietf_decrypt_detached(
                     pr->got, NULL, c, plen, c + plen, data, ERMA_HDR_SIZE + OPHDR, n,
                     pr->kd) == 0;
}

static void test_wire_chacha_by_hand(void **state)
{
    (void)state;
    struct world w;
    struct target t;
    world_up(&w, true, 2);
    target_up(&w, &t);
    uint32_t region;
    assert_int_equal(erma_region_register_cipher(w.rma[0], t.mem, REGION_LEN, ERMA_RMA_PERM_READ,
                                                 ERMA_RMA_CHACHA20_POLY1305, &region),
                     ERMA_OK);
    const struct erma_rkey k = rkey_for(&w, 1, region);
    static struct probe pr;
    memset(&pr, 0, sizeof pr);
    memcpy(pr.kd, k.kd, 32);
    uint8_t pkt[PKT_OVERHEAD] = {0};
    const struct erma_hdr eh = {.proto = ERMA_PROTO_RMA};
    erma_hdr_encode(&eh, pkt);
    uint8_t *o = pkt + ERMA_HDR_SIZE;
    const uint64_t nonce = 12345, deadline = erma_sim_now(w.sim) + 1000000;
    o[0] = T_READ_REQ;
    erma_put_le(o + 8, k.region, 4);
    erma_put_le(o + 12, k.key_gen, 4);
    erma_put_le(o + 16, 100, 8);            /* offset */
    erma_put_le(o + 24, erma_rma_identity(w.rma[1]), 8);
    erma_put_le(o + 32, nonce, 8);          /* init_ctr: the request's nonce */
    erma_put_le(o + 40, 64, 4);             /* len */
    erma_put_le(o + OFF_DEADLINE, deadline, 8);
    erma_put_le(o + OFF_NONCE, nonce, 8);
    uint8_t n[12] = {0};
    erma_put_le(n, nonce, 8);
    uint8_t *tag = pkt + ERMA_HDR_SIZE + OPHDR; /* no payload: the tag follows the headers */
    crypto_aead_chacha20poly1305_ietf_encrypt_detached(tag, tag, NULL, NULL, 0, pkt,
                                                       ERMA_HDR_SIZE + OPHDR, NULL, n, k.kd);
    static struct spy s;
    memset(&s, 0, sizeof s);
    s.hook = probe_hook;
    s.ctx = &pr;
    erma_sim_set_tap(w.sim, spy_fn, &s);
    assert_int_equal(erma_sim_inject(w.sim, 1, PORT, 0, PORT, pkt, sizeof pkt), ERMA_OK);
    run(&w, 100000);
    assert_true(pr.answered);
    assert_true(pr.opened);
    assert_memory_equal(pr.got, t.mem + 100, 64);
    erma_sim_set_tap(w.sim, NULL, NULL);
    world_down(&w);
    free(t.mem);
}

/* ---- nonces across a restart ---- */

/* An initiator restarted with the same identity at the same address has
 * the same Kd; its nonces start from the wall clock, past every nonce the
 * one before it used. */
static void test_nonces_after_restart(void **state)
{
    (void)state;
    struct world w;
    struct target t;
    world_up(&w, true, 2);
    target_up(&w, &t);
    static struct spy s;
    memset(&s, 0, sizeof s);
    erma_sim_set_tap(w.sim, spy_fn, &s);
    const struct erma_rkey k = rkey_for(&w, 1, t.rw);
    reads_ok(&w, 1, &k, peer0(&w, 1), 1000); /* on the sim */
    const uint64_t first = s.max_nonce[1];
    const uint64_t identity = erma_rma_identity(w.rma[1]);
    erma_rma_destroy(w.rma[1]);
    const struct erma_rma_cfg c = {.identity = identity};
    assert_int_equal(erma_rma_create(w.ep[1], &c, &w.rma[1]), ERMA_OK);
    const struct erma_rkey k2 = rkey_for(&w, 1, t.rw);
    assert_memory_equal(k2.kd, k.kd, sizeof k.kd);
    static struct spy low;
    memset(&low, 0, sizeof low);
    low.want = 1u << T_READ_REQ;
    erma_sim_set_tap(w.sim, spy_fn, &low);
    reads_ok(&w, 1, &k2, peer0(&w, 1), 1);
    const uint64_t second = field(low.caps[0].pkt, OFF_NONCE, 8);
    print_message("  nonces: last before the restart %lu, first after %lu\n",
                  (unsigned long)first, (unsigned long)second);
    assert_true(second > first);
    erma_sim_set_tap(w.sim, NULL, NULL);
    world_down(&w);
    free(t.mem);
}

/* ---- a TIMEOUT is final: nothing written after it (Figure 7) ---- */

enum { NEST_OPS = 10000, NEST_LEN = 2500, NEST_HOSTS = 4, NEST_INFLIGHT = 8 };

struct nest {
    struct world *w;
    uint8_t *mem, *snap;     /* the region; its bytes when a TIMEOUT was reported */
    int status[NEST_OPS];    /* 1: not yet completed */
    struct erma_rkey k[NEST_HOSTS];
    int peer[NEST_HOSTS];
    unsigned next, done;
};

static uint8_t nest_byte(unsigned op, unsigned i)
{
    return (uint8_t)(1 + (op * 131 + i) % 255); /* never 0, the region's start */
}

static void nest_submit(struct nest *n, unsigned h)
{
    static uint8_t bufs[NEST_OPS][NEST_LEN];
    const unsigned op = n->next++;
    for (unsigned i = 0; i < NEST_LEN; i++)
        bufs[op][i] = nest_byte(op, i);
    const struct erma_rma_cmd c = cmd_of(ERMA_RMA_WRITE, n->peer[h], &n->k[h],
                                         (uint64_t)op * NEST_LEN, bufs[op], NEST_LEN, op);
    assert_true(erma_rma_submit(n->w->rma[h], &c) >= 0);
}

/* Called after every pass of the sim loop: a TIMEOUT's region bytes are
 * recorded in the same virtual instant it is reported. */
static bool nest_poll(void *ctx)
{
    struct nest *n = ctx;
    for (unsigned h = 1; h < NEST_HOSTS; h++) {
        struct erma_rma_completion c[64];
        const int got = erma_rma_poll(n->w->rma[h], c, 64);
        for (int i = 0; i < got; i++) {
            const unsigned op = (unsigned)c[i].tag;
            assert_int_equal(n->status[op], 1);
            n->status[op] = c[i].status;
            if (c[i].status == ERMA_ETIMEDOUT)
                memcpy(n->snap + (size_t)op * NEST_LEN, n->mem + (size_t)op * NEST_LEN, NEST_LEN);
            n->done++;
            if (n->next < NEST_OPS)
                nest_submit(n, h);
        }
    }
    return n->done == NEST_OPS;
}

/* 10^4 WRITEs of 2500 bytes (two packets each) from three initiators under
 * 1% loss and 10% of packets delayed by up to 60 us, with a fixed 40 us op
 * timeout: many time out while their SOLICIT or DATA is on its way. No
 * WRITE whose initiator reported TIMEOUT changes the region afterwards;
 * NACKed ones never do; OK ones wrote all their bytes. */
static void test_timeout_after_side_effects(void **state)
{
    (void)state;
    struct erma_sim_cfg sc;
    erma_sim_cfg_default(&sc);
    sc.loss = 0.01;
    sc.reorder = 0.1;
    sc.reorder_delay_ns = 150000;
    struct erma_rma_cfg cfg[NEST_HOSTS];
    for (unsigned h = 0; h < NEST_HOSTS; h++)
        cfg[h] = (struct erma_rma_cfg){.op_timeout_ns = 100000};
    struct world w;
    world_up_cfg(&w, true, NEST_HOSTS, &sc, cfg);
    struct nest *n = calloc(1, sizeof *n);
    const size_t len = (size_t)NEST_OPS * NEST_LEN;
    n->w = &w;
    n->mem = calloc(len, 1);
    n->snap = calloc(len, 1);
    assert_true(n && n->mem && n->snap);
    uint32_t region;
    assert_int_equal(erma_region_register(w.rma[0], n->mem, len, ERMA_RMA_PERM_WRITE, &region),
                     ERMA_OK);
    for (unsigned op = 0; op < NEST_OPS; op++)
        n->status[op] = 1;
    for (unsigned h = 1; h < NEST_HOSTS; h++) {
        assert_int_equal(erma_region_export_uri(w.rma[0], region, erma_rma_identity(w.rma[h]),
                                                w.uri[h], &n->k[h]),
                         ERMA_OK);
        n->peer[h] = erma_rma_peer(w.rma[h], w.uri[0], 0);
        assert_true(n->peer[h] >= 0);
        for (unsigned i = 0; i < NEST_INFLIGHT; i++)
            nest_submit(n, h);
    }
    assert_true(world_run(&w, 10000000000ull, nest_poll, n));
    int never = 0;
    world_run(&w, 1000000, NULL, &never); /* past every deadline and delayed packet */
    unsigned ok = 0, nack = 0, timeout = 0, before = 0, after = 0;
    for (unsigned op = 0; op < NEST_OPS; op++) {
        const uint8_t *m = n->mem + (size_t)op * NEST_LEN;
        unsigned written = 0;
        for (unsigned i = 0; i < NEST_LEN; i++)
            written += m[i] == nest_byte(op, i);
        if (n->status[op] == ERMA_OK) {
            assert_int_equal(written, NEST_LEN);
            ok++;
        } else if (n->status[op] == ERMA_ENACK) {
            assert_int_equal(written, 0);
            nack++;
        } else {
            assert_int_equal(n->status[op], ERMA_ETIMEDOUT);
            timeout++;
            before += written > 0;
            after += memcmp(m, n->snap + (size_t)op * NEST_LEN, NEST_LEN) != 0;
        }
    }
    struct erma_rma_stats ts;
    erma_rma_get_stats(w.rma[0], &ts);
    print_message("  %u WRITEs: %u OK, %u NACK, %u TIMEOUT (%u of them had written before "
                  "the TIMEOUT, %u wrote after it); target: %lu solicitations expired, "
                  "%lu data packets rejected\n",
                  NEST_OPS, ok, nack, timeout, before, after,
                  (unsigned long)ts.solicit_expired, (unsigned long)ts.data_rejected);
    assert_int_equal(after, 0);
    assert_true(timeout > 100 && ok > NEST_OPS / 2);
    world_down(&w);
    free(n->mem);
    free(n->snap);
    free(n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_replay),
        cmocka_unit_test(test_replay_after_deadline),
        cmocka_unit_test(test_key_bound_to_address),
        cmocka_unit_test(test_forged_status),
        cmocka_unit_test(test_stalled_initiator_sim),
        cmocka_unit_test(test_stalled_initiator_udp),
        cmocka_unit_test(test_rto_follows_rtt),
        cmocka_unit_test(test_rto_udp_detects_loss),
        cmocka_unit_test(test_cipher_per_region),
        cmocka_unit_test(test_wire_chacha_by_hand),
        cmocka_unit_test(test_nonces_after_restart),
        cmocka_unit_test(test_timeout_after_side_effects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
