/* One-sided ops: every completion status from a real cause, tampering and
 * replay, the executor byte-exact from 1 B to 16 MiB (also under loss), and
 * REKEY under load. Each test runs on the sim fabric and on udp loopback,
 * except those that need the sim's tap to tamper with or replay packets. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "erma/sdk/rand.h"
#include "erma/sdk/transport_driver.h"
#include "endpoint/proto.h"
#include "erma/sdk/wire.h"
#include "rma_util.h"

static bool SIM = true, UDP = false;
#define ON_SIM(state) (*(bool *)*(state))

#define REGION_LEN (64 * 1024)

struct target {
    uint8_t *mem;
    uint32_t rw, ro, wo; /* regions: read-write, read-only, write-only */
};

static void target_up(struct world *w, struct target *t)
{
    t->mem = malloc(3 * REGION_LEN);
    assert_non_null(t->mem);
    for (size_t i = 0; i < 3 * REGION_LEN; i++)
        t->mem[i] = (uint8_t)(i * 7 + 3);
    assert_int_equal(erma_region_register(w->rma[0], t->mem, REGION_LEN,
                                          ERMA_RMA_PERM_READ | ERMA_RMA_PERM_WRITE, &t->rw),
                     ERMA_OK);
    assert_int_equal(erma_region_register(w->rma[0], t->mem + REGION_LEN, REGION_LEN,
                                          ERMA_RMA_PERM_READ, &t->ro),
                     ERMA_OK);
    assert_int_equal(erma_region_register(w->rma[0], t->mem + 2 * REGION_LEN, REGION_LEN,
                                          ERMA_RMA_PERM_WRITE, &t->wo),
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

/* ---- basics ---- */

static void test_read_write(void **state)
{
    struct world w;
    struct target t;
    world_up(&w, ON_SIM(state), 2);
    target_up(&w, &t);
    const struct erma_rkey k = rkey_for(&w, 1, t.rw);
    const int p = peer0(&w, 1);
    static const uint32_t sizes[] = {1, 7, 100, 1367, 1368, 1369, 2737, 4095, 4096};
    uint8_t buf[ERMA_RMA_MAX_OP], src[ERMA_RMA_MAX_OP];
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        const uint32_t n = sizes[i], off = (uint32_t)(i * 3001) % (REGION_LEN - n);
        struct erma_rma_completion c;
        memset(buf, 0, sizeof buf);
        assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_READ, p, &k, off, buf, n, i), &c),
                         ERMA_OK);
        assert_memory_equal(buf, t.mem + off, n);
        assert_int_equal(c.tag, i);
        assert_true(c.total_delay_ns > 0 && c.issue_delay_ns <= c.total_delay_ns);
        for (uint32_t j = 0; j < n; j++)
            src[j] = (uint8_t)(j * 31 + i);
        assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_WRITE, p, &k, off, src, n, i), NULL),
                         ERMA_OK);
        assert_memory_equal(t.mem + off, src, n);
    }
    /* bad arguments are refused at submit, nothing queued */
    struct erma_rma_cmd c = cmd_of(ERMA_RMA_READ, p, &k, 0, buf, ERMA_RMA_MAX_OP + 1, 0);
    assert_int_equal(erma_rma_submit(w.rma[1], &c), ERMA_E2BIG);
    c.len = 0;
    assert_int_equal(erma_rma_submit(w.rma[1], &c), ERMA_EINVAL);
    c = cmd_of(ERMA_RMA_READ, 9, &k, 0, buf, 8, 0);
    assert_int_equal(erma_rma_submit(w.rma[1], &c), ERMA_EINVAL);
    world_down(&w);
    free(t.mem);
}

/* Answers under more keys than the engines keep expanded (crypto.c), in
 * flight together so that one target pass seals under all of them (and
 * sends their short last packets after the full ones, serve.c): every byte
 * arrives; after a deregistration, which drops the expanded keys, the
 * region is gone and the others still read. */
static void test_many_keys(void **state)
{
    enum { REGIONS = 6, PER = 8, N = REGIONS * PER };
    struct world w;
    world_up(&w, ON_SIM(state), 2);
    uint8_t *mem = malloc(REGIONS * REGION_LEN), *buf = calloc(N, ERMA_RMA_MAX_OP);
    assert_true(mem && buf);
    for (size_t i = 0; i < REGIONS * REGION_LEN; i++)
        mem[i] = (uint8_t)(i * 13 + 5);
    uint32_t id[REGIONS];
    struct erma_rkey k[REGIONS];
    for (unsigned r = 0; r < REGIONS; r++) {
        assert_int_equal(erma_region_register(w.rma[0], mem + r * REGION_LEN, REGION_LEN,
                                              ERMA_RMA_PERM_READ, &id[r]),
                         ERMA_OK);
        k[r] = rkey_for(&w, 1, id[r]);
    }
    const int p = peer0(&w, 1);
    for (unsigned i = 0; i < N; i++) {
        const struct erma_rma_cmd c = cmd_of(ERMA_RMA_READ, p, &k[i % REGIONS],
                                             (i / REGIONS) * ERMA_RMA_MAX_OP,
                                             buf + i * ERMA_RMA_MAX_OP, ERMA_RMA_MAX_OP, i);
        assert_true(erma_rma_submit(w.rma[1], &c) >= 0);
    }
    struct erma_rma_completion done[N];
    assert_int_equal(world_wait(&w, 1, done, N, 2000000000ull), N);
    for (unsigned i = 0; i < N; i++) {
        assert_int_equal(done[i].status, ERMA_OK);
        const unsigned j = (unsigned)done[i].tag;
        assert_memory_equal(buf + j * ERMA_RMA_MAX_OP,
                            mem + (j % REGIONS) * REGION_LEN + (j / REGIONS) * ERMA_RMA_MAX_OP,
                            ERMA_RMA_MAX_OP);
    }
    assert_int_equal(erma_region_deregister(w.rma[0], id[0]), ERMA_OK);
    for (unsigned r = 0; r < REGIONS; r++) {
        const struct erma_rma_cmd c = cmd_of(ERMA_RMA_READ, p, &k[r], 0, buf, ERMA_RMA_MAX_OP, r);
        assert_int_equal(world_op(&w, 1, c, NULL), r ? ERMA_OK : ERMA_ENOREGION);
        if (r)
            assert_memory_equal(buf, mem + r * REGION_LEN, ERMA_RMA_MAX_OP);
    }
    world_down(&w);
    free(mem);
    free(buf);
}

/* ---- every status from a real cause ---- */

static void test_statuses(void **state)
{
    struct world w;
    struct target t;
    world_up(&w, ON_SIM(state), 2);
    target_up(&w, &t);
    const int p = peer0(&w, 1);
    uint8_t buf[64] = {0};
    struct erma_rkey k = rkey_for(&w, 1, t.rw);

    struct erma_rkey wrong = k; /* wrong key */
    wrong.kd[5] ^= 1;
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_READ, p, &wrong, 0, buf, 8, 0), NULL),
                     ERMA_EAUTH);
    struct erma_rkey other = rkey_for(&w, 0, t.rw); /* another identity's key */
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_READ, p, &other, 0, buf, 8, 0), NULL),
                     ERMA_EAUTH);
    struct erma_rkey unknown = k; /* unknown region */
    unknown.region = 0x7777;
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_READ, p, &unknown, 0, buf, 8, 0), NULL),
                     ERMA_ENOREGION);
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_READ, p, &k, REGION_LEN - 4, buf, 8, 0),
                              NULL),
                     ERMA_EBOUNDS);
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_READ, p, &k, UINT64_MAX - 2, buf, 8, 0),
                              NULL),
                     ERMA_EBOUNDS);
    const struct erma_rkey ro = rkey_for(&w, 1, t.ro), wo = rkey_for(&w, 1, t.wo);
    const uint8_t before = t.mem[REGION_LEN + 10];
    memset(buf, 0xee, sizeof buf);
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_WRITE, p, &ro, 10, buf, 8, 0), NULL),
                     ERMA_EPERM);
    assert_int_equal(t.mem[REGION_LEN + 10], before);
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_READ, p, &wo, 10, buf, 8, 0), NULL),
                     ERMA_EPERM);
    uint8_t key[ERMA_RMA_KEY_BYTES] = {1};
    struct erma_rma_cmd rk = cmd_of(ERMA_RMA_REKEY, p, &k, 0, key, 0, 0);
    assert_int_equal(world_op(&w, 1, rk, NULL), ERMA_EPERM); /* no REKEY permission */

    /* rotated-away key: the target rekeys without grace (test_rma_rekey) */
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_READ, p, &k, 0, buf, 8, 0), NULL),
                     ERMA_OK);
    assert_int_equal(erma_region_rekey(w.rma[0], t.rw, NULL, 0), ERMA_OK);
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_READ, p, &k, 0, buf, 8, 0), NULL),
                     ERMA_ESUPERSEDED);
    k = rkey_for(&w, 1, t.rw);
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_READ, p, &k, 0, buf, 8, 0), NULL),
                     ERMA_OK);
    /* deregistered region */
    assert_int_equal(erma_region_deregister(w.rma[0], t.ro), ERMA_OK);
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_READ, p, &ro, 0, buf, 8, 0), NULL),
                     ERMA_ENOREGION);
    struct erma_rma_stats st;
    erma_rma_get_stats(w.rma[0], &st);
    assert_int_equal(st.auth_failed, 2);
    assert_int_equal(st.superseded_sent, 1);

    /* a target that is down */
    world_kill(&w, 0);
    struct erma_rma_completion c;
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_READ, p, &k, 0, buf, 8, 0), &c),
                     ERMA_ETIMEDOUT);
    assert_true(c.total_delay_ns >= (w.on_sim ? 1000u : 5000000u)); /* the RTO's floor */
    world_down(&w);
    free(t.mem);
}

/* A target serving one request per pass with a queue of 4, flooded by three
 * initiators at once: the excess is NACKed, the rest served, nothing else. */
static void test_nack(void **state)
{
    /* on the sim the target needs a service time: it is otherwise infinitely fast */
    struct erma_rma_cfg cfg[4] = {{.serve_batch = 1, .nack_threshold = 4,
                                   .serve_ns = ON_SIM(state) ? 1000 : 0}};
    struct world w;
    struct target t;
    world_up_cfg(&w, ON_SIM(state), 4, NULL, cfg);
    target_up(&w, &t);
    enum { OPS = 32 };
    static uint8_t bufs[4][OPS][64];
    for (unsigned h = 1; h < 4; h++) {
        const struct erma_rkey k = rkey_for(&w, h, t.rw);
        const int p = peer0(&w, h);
        for (int i = 0; i < OPS; i++) {
            const struct erma_rma_cmd c = cmd_of(ERMA_RMA_READ, p, &k, 64 * i, bufs[h][i], 64, i);
            assert_true(erma_rma_submit(w.rma[h], &c) >= 0);
        }
    }
    unsigned ok = 0, nack = 0;
    for (unsigned h = 1; h < 4; h++) {
        struct erma_rma_completion c[OPS];
        assert_int_equal(world_wait(&w, h, c, OPS, 2000000000ull), OPS);
        for (int i = 0; i < OPS; i++) {
            assert_true(c[i].status == ERMA_OK || c[i].status == ERMA_ENACK);
            if (c[i].status == ERMA_OK) {
                assert_memory_equal(bufs[h][c[i].tag], t.mem + 64 * c[i].tag, 64);
                ok++;
            } else {
                nack++;
            }
        }
    }
    struct erma_rma_stats st;
    erma_rma_get_stats(w.rma[0], &st);
    print_message("  NACK: %u of %u ops, %u served, target queue at most %lu\n", nack,
                  3 * OPS, ok, (unsigned long)st.max_queue);
    assert_true(nack > 0 && ok >= 4);
    assert_int_equal(st.nacks_sent, nack);
    assert_true(st.max_queue <= 4);
    world_down(&w);
    free(t.mem);
}

/* A local queue that cannot drain: the inbound window takes one 4 KB READ,
 * the others wait past the dispatch timeout. Only the initiator runs at
 * first, so the target does not answer that READ before the others expire
 * (on udp a loop pass may take longer than 10 us: the timeout is longer). */
static void test_dispatch_timeout(void **state)
{
    const uint64_t dt = ON_SIM(state) ? 10000 : 5000000;
    struct erma_rma_cfg cfg[2] = {{0}, {.inbound_window = ERMA_RMA_MAX_OP,
                                        .dispatch_timeout_ns = dt,
                                        .op_timeout_ns = 1000000000}};
    struct world w;
    struct target t;
    world_up_cfg(&w, ON_SIM(state), 2, NULL, cfg);
    target_up(&w, &t);
    const struct erma_rkey k = rkey_for(&w, 1, t.rw);
    const int p = peer0(&w, 1);
    enum { OPS = 16 };
    static uint8_t bufs[OPS][ERMA_RMA_MAX_OP];
    for (int i = 0; i < OPS; i++) {
        const struct erma_rma_cmd c =
            cmd_of(ERMA_RMA_READ, p, &k, 4096 * i, bufs[i], ERMA_RMA_MAX_OP, i);
        assert_true(erma_rma_submit(w.rma[1], &c) >= 0);
    }
    struct erma_rma_completion c[OPS];
    struct gather g = {w.rma[1], c, OPS, 0};
    struct erma_endpoint *initiator = w.ep[1];
    if (w.on_sim) {
        erma_sim_run(w.sim, &initiator, 1, 3 * dt, gather_done, &g);
    } else { /* until 15 expired: a loaded machine may stall this loop past 3 dt */
        for (const uint64_t end = erma_now_ns() + 2000000000ull;
             g.got < OPS - 1 && erma_now_ns() < end;) {
            erma_endpoint_run_once(initiator);
            gather_done(&g);
        }
    }
    assert_int_equal(g.got, OPS - 1);
    world_run(&w, 2000000000ull, gather_done, &g);
    assert_int_equal(g.got, OPS);
    unsigned ok = 0, late = 0;
    for (int i = 0; i < OPS; i++) {
        if (c[i].status == ERMA_OK) {
            ok++;
            assert_memory_equal(bufs[c[i].tag], t.mem + 4096 * c[i].tag, 4096);
        } else {
            assert_int_equal(c[i].status, ERMA_EDISPATCH);
            assert_true(c[i].issue_delay_ns >= dt);
            late++;
        }
    }
    print_message("  DISPATCH_TIMEOUT: %u of %u, %u OK\n", late, OPS, ok);
    assert_true(ok == 1 && late == OPS - 1);
    world_down(&w);
    free(t.mem);
}

/* ---- the NACK threshold in bytes, and expired requests (sim) ---- */

/* Counts the target's packets sent after the deadline of the request they
 * answer (the deadline travels in the clear, as authenticated data). */
struct late_tap {
    uint64_t sent, late;
};

static bool late_tap_fn(void *ctx, const struct erma_sim_event *ev, uint8_t *data)
{
    struct late_tap *t = ctx;
    if (ev->src_host != 0 || ev->len < ERMA_HDR_SIZE + 72 ||
        (data[14] & 0xf) != ERMA_PROTO_RMA)
        return true;
    t->sent++;
    if (ev->time > erma_get_le(data + ERMA_HDR_SIZE + 56, 8))
        t->late++;
    return true;
}

enum { FLOOD_HOSTS = 4, FLOOD_OPS = 64 };

/* Three initiators each submit 64 READs of 4 KB at once to a target that
 * serves one request per 2 us (a 4 KB op per 2 us: 16 Gb/s, and 806 KB of
 * work in all). Returns the completions' counts in ok/nack/timeout. */
static void flood(struct erma_rma_cfg *cfg, struct erma_rma_stats *ts, struct late_tap *tap,
                  unsigned *ok, unsigned *nack, unsigned *timeout)
{
    struct world w;
    struct target t;
    world_up_cfg(&w, true, FLOOD_HOSTS, NULL, cfg);
    target_up(&w, &t);
    erma_sim_set_tap(w.sim, late_tap_fn, tap);
    static uint8_t bufs[FLOOD_HOSTS][FLOOD_OPS][ERMA_RMA_MAX_OP];
    for (unsigned h = 1; h < FLOOD_HOSTS; h++) {
        const struct erma_rkey k = rkey_for(&w, h, t.rw);
        const int p = peer0(&w, h);
        for (int i = 0; i < FLOOD_OPS; i++) {
            const struct erma_rma_cmd c = cmd_of(ERMA_RMA_READ, p, &k, 4096 * (i % 16),
                                                 bufs[h][i], ERMA_RMA_MAX_OP, i);
            assert_true(erma_rma_submit(w.rma[h], &c) >= 0);
        }
    }
    *ok = *nack = *timeout = 0;
    for (unsigned h = 1; h < FLOOD_HOSTS; h++) {
        struct erma_rma_completion c[FLOOD_OPS];
        assert_int_equal(world_wait(&w, h, c, FLOOD_OPS, 1000000000ull), FLOOD_OPS);
        for (int i = 0; i < FLOOD_OPS; i++) {
            if (c[i].status == ERMA_OK) {
                assert_memory_equal(bufs[h][c[i].tag], t.mem + 4096 * (c[i].tag % 16), 4096);
                (*ok)++;
            } else if (c[i].status == ERMA_ENACK) {
                (*nack)++;
            } else {
                assert_int_equal(c[i].status, ERMA_ETIMEDOUT);
                (*timeout)++;
            }
        }
    }
    /* let the target drain what it still holds */
    int never = 0;
    world_run(&w, 2000000, NULL, &never);
    erma_rma_get_stats(w.rma[0], ts);
    erma_rma_get_cfg(w.rma[0], &cfg[0]);
    erma_sim_set_tap(w.sim, NULL, NULL);
    world_down(&w);
    free(t.mem);
}

/* The default threshold is 1RMA's (TIMEOUT - RTT - DISPATCH_TIMEOUT) x
 * bandwidth; a target past it NACKs and its queued work never exceeds it;
 * nothing is sent after the deadline of the request it answers. */
static void test_nack_bytes(void **state)
{
    (void)state;
    struct erma_rma_cfg cfg[FLOOD_HOSTS] = {{.serve_batch = 1, .serve_ns = 2000}};
    struct erma_rma_stats ts;
    struct late_tap tap = {0};
    unsigned ok, nack, timeout;
    flood(cfg, &ts, &tap, &ok, &nack, &timeout);
    /* TIMEOUT = base + op_timeout_min, RTT = base: base cancels out. */
    const uint64_t want =
        (uint64_t)((double)(cfg[0].op_timeout_min_ns - cfg[0].dispatch_timeout_ns) * 25e9 / 8e9);
    print_message("  NACK threshold %lu bytes (TIMEOUT - RTT = %lu ns, dispatch %lu ns): "
                  "%u OK, %u NACK, %u TIMEOUT; queue at most %lu bytes (%lu requests), "
                  "%lu expired, %lu of %lu packets sent after their deadline\n",
                  (unsigned long)cfg[0].nack_bytes, (unsigned long)cfg[0].op_timeout_min_ns,
                  (unsigned long)cfg[0].dispatch_timeout_ns, ok, nack, timeout,
                  (unsigned long)ts.max_queue_bytes, (unsigned long)ts.max_queue,
                  (unsigned long)ts.expired, (unsigned long)tap.late, (unsigned long)tap.sent);
    assert_int_equal(cfg[0].nack_bytes, want);
    assert_true(nack > 0 && ok > 0);
    assert_int_equal(ts.nacks_sent, nack);
    assert_true(ts.max_queue_bytes <= cfg[0].nack_bytes);
    assert_true(ts.max_queue_bytes + 4096 + 104 > cfg[0].nack_bytes); /* it filled */
    assert_int_equal(tap.late, 0);
    assert_true(tap.sent > 0);

    /* The override, with a threshold above all the work and a fixed 100 us
     * timeout: requests wait longer than their initiators do, and those
     * that reach the head of the queue expired are dropped, not served. */
    struct erma_rma_cfg big[FLOOD_HOSTS];
    for (unsigned h = 0; h < FLOOD_HOSTS; h++)
        big[h] = (struct erma_rma_cfg){.serve_batch = 1, .serve_ns = h ? 0 : 2000,
                                       .nack_bytes = 64u << 20, .op_timeout_ns = 100000};
    struct late_tap tap2 = {0};
    flood(big, &ts, &tap2, &ok, &nack, &timeout);
    print_message("  NACK threshold %lu bytes, 100 us timeout: %u OK, %u NACK, %u TIMEOUT, "
                  "%lu expired, %lu served, %lu of %lu packets sent after their deadline\n",
                  (unsigned long)big[0].nack_bytes, ok, nack, timeout,
                  (unsigned long)ts.expired, (unsigned long)ts.served, (unsigned long)tap2.late,
                  (unsigned long)tap2.sent);
    assert_int_equal(nack, 0);
    assert_true(timeout > 0 && ts.expired > 0);
    assert_int_equal(ts.served + ts.expired, 3 * FLOOD_OPS);
    assert_int_equal(tap2.late, 0);
}

/* ---- tampering and replay (sim tap) ---- */

struct tap {
    int mode;        /* 1: flip a bit in the first packet of type `type` */
    uint8_t type;
    bool done;
    uint8_t saved[2048];
    uint32_t saved_len;
    struct erma_sim_event ev;
};

static bool tap_fn(void *ctx, const struct erma_sim_event *ev, uint8_t *data)
{
    struct tap *t = ctx;
    if (ev->len < 72 || (data[14] & 0xf) != ERMA_PROTO_RMA || data[16] != t->type || t->done)
        return true;
    t->done = true;
    if (t->mode == 1) {
        data[ev->len - 20] ^= 0x10; /* last payload byte, or an op header byte */
    } else {
        memcpy(t->saved, data, ev->len);
        t->saved_len = ev->len;
        t->ev = *ev;
    }
    return true;
}

static void test_tamper(void **state)
{
    (void)state;
    struct world w;
    struct target t;
    world_up(&w, true, 2);
    target_up(&w, &t);
    const struct erma_rkey k = rkey_for(&w, 1, t.rw);
    const int p = peer0(&w, 1);
    uint8_t buf[4096];
    struct tap tap = {.mode = 1, .type = 1 /* READ_REQ */};
    erma_sim_set_tap(w.sim, tap_fn, &tap);
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_READ, p, &k, 0, buf, 64, 0), NULL),
                     ERMA_EAUTH);
    /* a tampered response is dropped; the op times out, buf stays clean */
    tap = (struct tap){.mode = 1, .type = 2 /* READ_RESP */};
    memset(buf, 0, sizeof buf);
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_READ, p, &k, 0, buf, 64, 0), NULL),
                     ERMA_ETIMEDOUT);
    const uint8_t zero[64] = {0};
    assert_memory_equal(buf, zero, 64);
    struct erma_rma_stats st;
    erma_rma_get_stats(w.rma[1], &st);
    assert_int_equal(st.rx_unsealed_bad, 1);
    /* tampered WRITE data is rejected and writes nothing */
    tap = (struct tap){.mode = 1, .type = 6 /* DATA */};
    memset(buf, 0xab, sizeof buf);
    uint8_t before[64];
    memcpy(before, t.mem + 256, 64);
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_WRITE, p, &k, 256, buf, 64, 0), NULL),
                     ERMA_ETIMEDOUT);
    assert_memory_equal(t.mem + 256, before, 64);
    erma_rma_get_stats(w.rma[0], &st);
    assert_int_equal(st.data_rejected, 1);
    erma_sim_set_tap(w.sim, NULL, NULL);
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_WRITE, p, &k, 256, buf, 64, 0), NULL),
                     ERMA_OK);
    assert_memory_equal(t.mem + 256, buf, 64);
    world_down(&w);
    free(t.mem);
}

static void replay(struct world *w, const struct tap *tap)
{
    assert_int_equal(erma_sim_inject(w->sim, tap->ev.src_host, tap->ev.src_port,
                                     tap->ev.dst_host, tap->ev.dst_port, tap->saved,
                                     tap->saved_len),
                     ERMA_OK);
    int never = 0;
    world_run(w, 10000000, NULL, &never);
}

static void test_replay(void **state)
{
    (void)state;
    struct world w;
    struct target t;
    world_up(&w, true, 2);
    target_up(&w, &t);
    const struct erma_rkey k = rkey_for(&w, 1, t.rw);
    const int p = peer0(&w, 1);
    uint8_t old[128], cur[128];
    memset(old, 0x11, sizeof old);
    memset(cur, 0x22, sizeof cur);
    struct tap req = {.mode = 2, .type = 3 /* WRITE_REQ */};
    erma_sim_set_tap(w.sim, tap_fn, &req);
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_WRITE, p, &k, 512, old, 128, 0), NULL),
                     ERMA_OK);
    struct tap data = {.mode = 2, .type = 6 /* DATA */};
    erma_sim_set_tap(w.sim, tap_fn, &data);
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_WRITE, p, &k, 512, cur, 128, 0), NULL),
                     ERMA_OK);
    erma_sim_set_tap(w.sim, NULL, NULL);
    assert_true(req.saved_len && data.saved_len);
    replay(&w, &req);  /* the target solicits; no live slot answers */
    replay(&w, &data); /* no live solicitation takes it */
    assert_memory_equal(t.mem + 512, cur, 128);
    struct erma_rma_stats ts, is;
    erma_rma_get_stats(w.rma[0], &ts);
    erma_rma_get_stats(w.rma[1], &is);
    assert_int_equal(is.rx_unmatched, 1);     /* the replay's solicitation */
    assert_int_equal(ts.solicit_expired, 1);
    assert_int_equal(ts.data_rejected, 1);
    /* and the same write request replayed while a new op sits in the slot */
    uint8_t buf[64];
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_READ, p, &k, 512, buf, 64, 0), NULL),
                     ERMA_OK);
    assert_memory_equal(buf, cur, 64);
    world_down(&w);
    free(t.mem);
}

/* ---- executor ---- */

/* A transfer that found every command slot taken by the application's own
 * ops goes on once those complete and are polled. */
static void test_executor_waits_for_slots(void **state)
{
    struct erma_rma_cfg cfg[2] = {{0}, {.slots = 4}};
    struct world w;
    struct target t;
    world_up_cfg(&w, ON_SIM(state), 2, NULL, cfg);
    target_up(&w, &t);
    const struct erma_rkey k = rkey_for(&w, 1, t.rw);
    const int p = peer0(&w, 1);
    static uint8_t bufs[4][64], big[16384];
    for (int i = 0; i < 4; i++)
        assert_true(erma_rma_submit(w.rma[1], &(struct erma_rma_cmd){
                        .op = ERMA_RMA_READ, .peer = p, .rkey = k, .offset = 64 * i,
                        .local = bufs[i], .len = 64, .tag = i}) >= 0);
    const struct erma_rma_xfer x = {.op = ERMA_RMA_READ, .peer = p, .rkey = k,
                                    .offset = 1024, .local = big, .len = sizeof big};
    assert_true(erma_rma_transfer(w.rma[1], &x) >= 0);
    struct erma_rma_completion c[5];
    assert_int_equal(world_wait(&w, 1, c, 5, 2000000000ull), 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(c[i].status, ERMA_OK);
    assert_true(c[4].transfer);
    assert_memory_equal(big, t.mem + 1024, sizeof big);
    world_down(&w);
    free(t.mem);
}

static void executor_run(bool on_sim, double loss)
{
    struct erma_sim_cfg sc;
    erma_sim_cfg_default(&sc);
    sc.loss = loss;
    sc.switch_buffer = 4 << 20;
    struct erma_rma_cfg cfg[2] = {{0}};
    if (!on_sim && loss > 0) {
        cfg[0].op_timeout_ns = cfg[1].op_timeout_ns = 1000000;
        /* a 1 ms timeout makes 1RMA's NACK threshold one op (4,200 bytes): on
         * a loaded machine a stalled target NACKed every retry of an op (30)
         * and failed it; this test is of loss, not of overload */
        cfg[0].nack_bytes = cfg[1].nack_bytes = 64u << 20;
    }
    struct world w;
    world_up_cfg(&w, on_sim, 2, &sc, cfg);
    static const uint32_t sizes[] = {1, 4095, 4097, 65536 + 3, 1 << 20, 16 << 20};
    enum { N = sizeof sizes / sizeof *sizes };
    const size_t region = 2u * (18u << 20);
    uint8_t *mem = malloc(region), *local = malloc(region), *expect = malloc(region);
    assert_non_null(mem);
    assert_non_null(local);
    assert_non_null(expect);
    struct erma_rand r;
    erma_rand_seed(&r, 5);
    for (size_t i = 0; i < region; i++)
        mem[i] = (uint8_t)erma_rand_u64(&r);
    memcpy(expect, mem, region);
    uint32_t reg;
    assert_int_equal(erma_region_register(w.rma[0], mem, region,
                                          ERMA_RMA_PERM_READ | ERMA_RMA_PERM_WRITE, &reg),
                     ERMA_OK);
    const struct erma_rkey k = rkey_for(&w, 1, reg);
    const int p = peer0(&w, 1);
    /* READs of the first half, WRITEs into the second, all at once */
    size_t off = 0;
    for (int i = 0; i < N; i++) {
        const struct erma_rma_xfer rd = {.op = ERMA_RMA_READ, .peer = p, .rkey = k,
                                         .offset = off, .local = local + off,
                                         .len = sizes[i], .max_retries = 30, .tag = i};
        const size_t woff = region / 2 + off;
        for (uint32_t j = 0; j < sizes[i]; j++)
            local[woff + j] = (uint8_t)(j * 13 + i);
        memcpy(expect + woff, local + woff, sizes[i]);
        const struct erma_rma_xfer wr = {.op = ERMA_RMA_WRITE, .peer = p, .rkey = k,
                                         .offset = woff, .local = local + woff,
                                         .len = sizes[i], .max_retries = 30, .tag = 100 + i};
        assert_true(erma_rma_transfer(w.rma[1], &rd) >= 0);
        assert_true(erma_rma_transfer(w.rma[1], &wr) >= 0);
        off += sizes[i];
    }
    struct erma_rma_completion c[2 * N];
    const int got = world_wait(&w, 1, c, 2 * N, on_sim ? 2000000000ull : 60000000000ull);
    if (got != 2 * N) {
        struct erma_rma_stats st;
        erma_rma_get_stats(w.rma[1], &st);
        print_message("  stuck: %d of %d; submitted %lu issued %lu completed %lu retries %lu\n",
                      got, 2 * N, (unsigned long)st.submitted, (unsigned long)st.issued,
                      (unsigned long)st.completed, (unsigned long)st.retries);
    }
    assert_int_equal(got, 2 * N);
    uint32_t retries = 0;
    for (int i = 0; i < 2 * N; i++) {
        assert_true(c[i].transfer);
        assert_int_equal(c[i].status, ERMA_OK);
        retries += c[i].retries;
    }
    assert_memory_equal(local, mem, off); /* READs */
    assert_memory_equal(mem + region / 2, expect + region / 2, off); /* WRITEs */
    struct erma_rma_stats st;
    erma_rma_get_stats(w.rma[1], &st);
    print_message("  %s loss %.2f: %u chunk retries, %lu ops\n", on_sim ? "sim" : "udp", loss,
                  retries, (unsigned long)st.completed);
    if (loss > 0)
        assert_true(retries > 0);
    world_down(&w);
    free(mem);
    free(local);
    free(expect);
}

static void test_executor(void **state)
{
    executor_run(ON_SIM(state), 0);
}

static void test_executor_loss(void **state)
{
    executor_run(ON_SIM(state), 0.01);
}

/* ---- REKEY under continuous load ---- */

/* Two clients keep DEPTH ops each in flight on a region while host 1
 * rekeys it. They use the old key until the key manager hands out the new
 * one, SPREAD_AFTER completions after the rekey completed, and stop once
 * OPS ops succeeded under it. One probe per client is in flight across the
 * rekey for certain: a READ under the old key submitted with the REKEY and
 * held in its client, whose endpoint does not run until the rekey has
 * completed (so the target has the new key before the probe comes). */
enum { CLIENTS = 2, DEPTH = 8, OPS = 200, SPREAD_AFTER = 4 * CLIENTS * DEPTH };

#define LATE (1ull << 31) /* tag: submitted after the rekey completed */

struct load {
    struct world *w;
    uint32_t region;
    int peer[MAX_HOSTS];
    struct erma_rkey key[MAX_HOSTS];      /* what each client uses now */
    uint8_t buf[MAX_HOSTS][DEPTH + 1][64]; /* [DEPTH]: the probe's */
    uint8_t new_kr[ERMA_RMA_KEY_BYTES];
    bool rekey_done, spread, stopping;
    int rekey_status, probe_status[MAX_HOSTS];
    unsigned outstanding, since_rekey;
    uint64_t ok[2], failed[2]; /* by key generation: [0] old, [1] new; failed:
                                  ERMA_ESUPERSEDED */
    uint64_t late_old, late_old_ok; /* old-key ops submitted after the rekey */
    int other_status;
};

static void load_submit(struct load *l, unsigned h, unsigned i)
{
    const bool write = (i & 1) != 0;
    struct erma_rma_cmd c = cmd_of(write ? ERMA_RMA_WRITE : ERMA_RMA_READ, l->peer[h],
                                   &l->key[h], 64 * (h * (DEPTH + 1) + i), l->buf[h][i], 64,
                                   (uint64_t)l->key[h].key_gen << 32 |
                                       (l->rekey_done ? LATE : 0) | i);
    assert_true(erma_rma_submit(l->w->rma[h], &c) >= 0);
    l->outstanding++;
}

static void load_count(struct load *l, unsigned h, const struct erma_rma_completion *c)
{
    const unsigned gen = (unsigned)(c->tag >> 32) - 1, i = (unsigned)(c->tag & 0xffff);
    l->outstanding--;
    if (i == DEPTH) {
        l->probe_status[h] = c->status;
        return;
    }
    if (c->status == ERMA_OK)
        l->ok[gen]++;
    else if (c->status == ERMA_ESUPERSEDED)
        l->failed[gen]++;
    else
        l->other_status = c->status;
    if (gen == 0 && (c->tag & LATE)) {
        l->late_old++;
        l->late_old_ok += c->status == ERMA_OK;
    }
    l->since_rekey += l->rekey_done;
    if (!l->stopping)
        load_submit(l, h, i);
}

static void load_step(struct load *l)
{
    struct erma_rma_completion c[DEPTH + 1];
    for (unsigned h = 2; h < 2 + CLIENTS; h++) {
        const int n = erma_rma_poll(l->w->rma[h], c, DEPTH + 1);
        for (int j = 0; j < n; j++)
            load_count(l, h, &c[j]);
    }
    if (l->rekey_done && !l->spread && l->since_rekey >= SPREAD_AFTER) {
        for (unsigned h = 2; h < 2 + CLIENTS; h++) { /* the key manager hands out new keys */
            struct erma_addr a;
            assert_int_equal(erma_transport_resolve(l->w->ep[0]->tr, l->w->uri[h], &a), ERMA_OK);
            erma_rma_derive(l->new_kr, l->region, 2, (enum erma_rma_cipher)l->key[h].cipher,
                            erma_rma_identity(l->w->rma[h]), &a, &l->key[h]);
        }
        l->spread = true;
    }
    l->stopping = l->stopping || l->ok[1] >= OPS;
}

static bool old_key_done(void *ctx)
{
    struct load *l = ctx;
    load_step(l);
    return l->ok[0] >= OPS;
}

static bool load_drained(void *ctx)
{
    struct load *l = ctx;
    load_step(l);
    return l->stopping && l->outstanding == 0;
}

static bool rekey_polled(void *ctx)
{
    struct load *l = ctx;
    struct erma_rma_completion c;
    if (!l->rekey_done && erma_rma_poll(l->w->rma[1], &c, 1) == 1) {
        l->rekey_done = true;
        l->rekey_status = c.status;
    }
    return l->rekey_done;
}

/* Runs only the target and host 1 until the rekey has completed: the
 * clients, and what they have submitted, are held. */
static bool rekey_held(struct world *w, struct load *l, uint64_t ns)
{
    struct erma_endpoint *two[2] = {w->ep[0], w->ep[1]};
    if (w->on_sim)
        return erma_sim_run(w->sim, two, 2, ns, rekey_polled, l) == ERMA_OK;
    for (const uint64_t end = erma_now_ns() + ns; erma_now_ns() < end;) {
        if (rekey_polled(l))
            return true;
        erma_endpoint_run_once(two[0]);
        erma_endpoint_run_once(two[1]);
    }
    return rekey_polled(l);
}

static void rekey_run(bool on_sim, bool grace, struct load *l)
{
    struct world w;
    struct target t;
    /* generous timeouts: a probe waits in its held client, and on udp a
     * loaded 2-core machine (ASan, parallel tests) must not turn
     * scheduling delays into failed ops */
    const uint64_t timeout = on_sim ? 1000000 : 500000000;
    struct erma_rma_cfg cfg[2 + CLIENTS];
    for (unsigned h = 0; h < 2 + CLIENTS; h++)
        cfg[h] = (struct erma_rma_cfg){.op_timeout_ns = timeout, .dispatch_timeout_ns = timeout};
    world_up_cfg(&w, on_sim, 2 + CLIENTS, NULL, cfg);
    target_up(&w, &t);
    uint32_t reg;
    assert_int_equal(erma_region_register(w.rma[0], t.mem, REGION_LEN,
                                          ERMA_RMA_PERM_READ | ERMA_RMA_PERM_WRITE |
                                              ERMA_RMA_PERM_REKEY,
                                          &reg),
                     ERMA_OK);
    memset(l, 0, sizeof *l);
    l->w = &w;
    l->region = reg;
    for (unsigned h = 1; h < 2 + CLIENTS; h++) {
        l->peer[h] = peer0(&w, h);
        l->key[h] = rkey_for(&w, h, reg);
    }
    memset(l->new_kr, 0x5c, sizeof l->new_kr);
    /* bounds only (virtual time on the sim): each phase takes about 1 ms */
    const uint64_t bound = on_sim ? 100000000 : 10000000000ull;
    for (unsigned h = 2; h < 2 + CLIENTS; h++)
        for (unsigned i = 0; i < DEPTH; i++)
            load_submit(l, h, i);
    assert_true(world_run(&w, bound, old_key_done, l));
    for (unsigned h = 2; h < 2 + CLIENTS; h++)
        load_submit(l, h, DEPTH); /* the probes */
    struct erma_rma_cmd rk = cmd_of(ERMA_RMA_REKEY, l->peer[1], &l->key[1], 0, l->new_kr, 0, 0);
    rk.grace_ns = !grace ? 0 : on_sim ? 1000000 : 1000000000; /* 1 ms, 1 s */
    assert_true(erma_rma_submit(w.rma[1], &rk) >= 0);
    assert_true(rekey_held(&w, l, bound));
    assert_true(world_run(&w, bound, load_drained, l));
    world_down(&w);
    free(t.mem);
    print_message("  %s grace %s: rekey %d, probes %d %d; old key %lu ok %lu failed (%lu "
                  "submitted after the rekey: %lu ok), new key %lu ok %lu failed\n",
                  on_sim ? "sim" : "udp", grace ? "on" : "off", l->rekey_status,
                  l->probe_status[2], l->probe_status[3], (unsigned long)l->ok[0],
                  (unsigned long)l->failed[0], (unsigned long)l->late_old,
                  (unsigned long)l->late_old_ok, (unsigned long)l->ok[1],
                  (unsigned long)l->failed[1]);
    assert_int_equal(l->rekey_status, ERMA_OK);
    assert_int_equal(l->other_status, 0);
    assert_true(l->ok[0] >= OPS && l->ok[1] >= OPS);
    assert_true(l->late_old > 0);
    assert_int_equal(l->failed[1], 0); /* the new key never fails */
}

static void test_rekey_grace(void **state)
{
    struct load l;
    rekey_run(ON_SIM(state), true, &l);
    for (unsigned h = 2; h < 2 + CLIENTS; h++)
        assert_int_equal(l.probe_status[h], ERMA_OK);
    assert_int_equal(l.failed[0], 0);
}

/* The old key fails at once, told it was superseded: the probes, and
 * every old-key op submitted after the rekey. */
static void test_rekey_no_grace(void **state)
{
    struct load l;
    rekey_run(ON_SIM(state), false, &l);
    for (unsigned h = 2; h < 2 + CLIENTS; h++)
        assert_int_equal(l.probe_status[h], ERMA_ESUPERSEDED);
    assert_int_equal(l.late_old_ok, 0);
}

/* ---- garbage ---- */

/* 20000 forged one-sided packets (valid erma header, random op header and
 * payload, random lengths, some with plausible types and fields) at the
 * target and the initiator, between real ops: all dropped and counted,
 * nothing written, the real ops unaffected. */
static void test_garbage(void **state)
{
    (void)state;
    struct world w;
    struct target t;
    world_up(&w, true, 2);
    target_up(&w, &t);
    const struct erma_rkey k = rkey_for(&w, 1, t.rw);
    const int p = peer0(&w, 1);
    uint8_t *copy = malloc(3 * REGION_LEN);
    assert_non_null(copy);
    memcpy(copy, t.mem, 3 * REGION_LEN);
    struct erma_rand r;
    erma_rand_seed(&r, 99);
    uint8_t pkt[1472], buf[4096];
    for (int i = 0; i < 20000; i++) {
        const uint32_t len = 16 + (uint32_t)erma_rand_below(&r, sizeof pkt - 15);
        for (uint32_t j = 0; j < len; j++)
            pkt[j] = (uint8_t)erma_rand_u64(&r);
        const struct erma_hdr h = {.proto = ERMA_PROTO_RMA};
        erma_hdr_encode(&h, pkt);
        if (len > 72 && (i & 2)) { /* plausible: a known type, the real region */
            pkt[16] = (uint8_t)(1 + erma_rand_below(&r, 8));
            erma_put_le(pkt + 16 + 8, t.rw, 4);
            erma_put_le(pkt + 16 + 12, 1, 4);
            erma_put_le(pkt + 16 + 40, 1 + erma_rand_below(&r, 4096), 4);
            pkt[16 + 2] = (uint8_t)erma_rand_below(&r, 2);
        }
        const uint16_t dst = (uint16_t)(i % 2), src_port = (uint16_t)(40000 + i % 7);
        assert_int_equal(erma_sim_inject(w.sim, 1 - dst, src_port, dst, 31850, pkt, len),
                         ERMA_OK);
        if (i % 100 == 0) {
            const uint32_t off = (uint32_t)erma_rand_below(&r, REGION_LEN - 4096);
            assert_int_equal(
                world_op(&w, 1, cmd_of(ERMA_RMA_READ, p, &k, off, buf, 4096, 0), NULL),
                ERMA_OK);
            assert_memory_equal(buf, copy + off, 4096);
        }
    }
    int never = 0;
    world_run(&w, 1000000, NULL, &never);
    assert_memory_equal(t.mem, copy, 3 * REGION_LEN);
    struct erma_rma_stats ts, is;
    erma_rma_get_stats(w.rma[0], &ts);
    erma_rma_get_stats(w.rma[1], &is);
    /* each one dropped and counted, or refused by an error answer (served,
     * NACKed); the 200 real ops were served too */
    uint64_t dropped = 0;
    const struct erma_rma_stats *both[2] = {&ts, &is};
    for (int i = 0; i < 2; i++)
        dropped += both[i]->rx_bad + both[i]->served + both[i]->nacks_sent +
                   both[i]->data_rejected + both[i]->rx_unmatched + both[i]->rx_unsealed_bad +
                   both[i]->expired + both[i]->duplicates;
    print_message("  garbage: target bad %lu unmatched %lu served %lu (auth failed %lu) "
                  "data %lu; initiator bad %lu unmatched %lu served %lu\n",
                  (unsigned long)ts.rx_bad, (unsigned long)ts.rx_unmatched,
                  (unsigned long)ts.served, (unsigned long)ts.auth_failed,
                  (unsigned long)ts.data_rejected, (unsigned long)is.rx_bad,
                  (unsigned long)is.rx_unmatched, (unsigned long)is.served);
    assert_int_equal(dropped, 20000 + 200);
    free(copy);
    world_down(&w);
    free(t.mem);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_read_write, &SIM),
        cmocka_unit_test_prestate(test_read_write, &UDP),
        cmocka_unit_test_prestate(test_many_keys, &SIM),
        cmocka_unit_test_prestate(test_many_keys, &UDP),
        cmocka_unit_test_prestate(test_statuses, &SIM),
        cmocka_unit_test_prestate(test_statuses, &UDP),
        cmocka_unit_test_prestate(test_nack, &SIM),
        cmocka_unit_test_prestate(test_nack, &UDP),
        cmocka_unit_test_prestate(test_dispatch_timeout, &SIM),
        cmocka_unit_test_prestate(test_dispatch_timeout, &UDP),
        cmocka_unit_test(test_nack_bytes),
        cmocka_unit_test_prestate(test_tamper, &SIM),
        cmocka_unit_test_prestate(test_replay, &SIM),
        cmocka_unit_test_prestate(test_garbage, &SIM),
        cmocka_unit_test_prestate(test_executor_waits_for_slots, &SIM),
        cmocka_unit_test_prestate(test_executor_waits_for_slots, &UDP),
        cmocka_unit_test_prestate(test_executor, &SIM),
        cmocka_unit_test_prestate(test_executor, &UDP),
        cmocka_unit_test_prestate(test_executor_loss, &SIM),
        cmocka_unit_test_prestate(test_executor_loss, &UDP),
        cmocka_unit_test_prestate(test_rekey_grace, &SIM),
        cmocka_unit_test_prestate(test_rekey_grace, &UDP),
        cmocka_unit_test_prestate(test_rekey_no_grace, &SIM),
        cmocka_unit_test_prestate(test_rekey_no_grace, &UDP),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
