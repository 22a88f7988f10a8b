/* One completion model (issue 33): one-sided commands and transfers with
 * a callback (cmd.cb, xfer.cb) complete exactly once into it, from the
 * endpoint's loop and never from a submit, with the status and tag
 * erma_rma_poll() would have given (successes and failures from a real
 * cause: missing region, permissions, bounds, a wrong key, a dead target);
 * a callback may submit again into the slot it just left; callback and
 * polled ops share an engine without one's completion going to the other.
 * erma_rma_wait() returns one op's completion (polled ops: not to poll as
 * well), waits for every op, keeps others' completions, and times out on
 * its own. The callback tests run on the sim fabric and on udp loopback;
 * the wait tests on udp, with the target's loop on a thread of its own
 * (the sim's time moves only under erma_sim_run(): there the wait says
 * ERMA_ENOTSUP). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>

#include "loop_thread.h"
#include "ports.h"
#include "rma_util.h"

static bool SIM = true, UDP = false;
#define ON_SIM(state) (*(bool *)*(state))

#define REGION_LEN (256 * 1024)
#define MAXREC 64
#define SEC 1000000000ull
#define MS 1000000ull

/* ---- a target (host 0) and an initiator (host 1) ---- */

struct fx {
    struct world w;
    uint8_t *mem;            /* rw's memory, then ro's */
    uint32_t rw, ro, rk;     /* read-write, read-only, rekeyable */
    struct erma_rkey k, kro, krk;
    int p;                   /* host 1's peer id of host 0 */
};

static struct erma_rkey key_for(struct fx *f, uint32_t region)
{
    struct erma_rkey k;
    assert_int_equal(erma_region_export_uri(f->w.rma[0], region, erma_rma_identity(f->w.rma[1]),
                                            f->w.uri[1], &k),
                     ERMA_OK);
    return k;
}

/* cfg1: host 1's engine configuration, or NULL. */
static void fx_up(struct fx *f, bool on_sim, const struct erma_rma_cfg *cfg1)
{
    struct erma_rma_cfg cfg[2] = {{0}, {0}};
    if (cfg1)
        cfg[1] = *cfg1;
    world_up_cfg(&f->w, on_sim, 2, NULL, cfg);
    f->mem = malloc(3 * REGION_LEN);
    assert_non_null(f->mem);
    for (size_t i = 0; i < 3 * REGION_LEN; i++)
        f->mem[i] = (uint8_t)(i * 7 + 3);
    struct erma_rma *t = f->w.rma[0];
    const unsigned rw = ERMA_RMA_PERM_READ | ERMA_RMA_PERM_WRITE;
    assert_int_equal(erma_region_register(t, f->mem, REGION_LEN, rw, &f->rw), ERMA_OK);
    assert_int_equal(erma_region_register(t, f->mem + REGION_LEN, REGION_LEN, ERMA_RMA_PERM_READ,
                                          &f->ro),
                     ERMA_OK);
    assert_int_equal(erma_region_register(t, f->mem + 2 * REGION_LEN, REGION_LEN,
                                          rw | ERMA_RMA_PERM_REKEY, &f->rk),
                     ERMA_OK);
    f->k = key_for(f, f->rw);
    f->kro = key_for(f, f->ro);
    f->krk = key_for(f, f->rk);
    f->p = erma_rma_peer(f->w.rma[1], f->w.uri[0], 0);
    assert_true(f->p >= 0);
}

static void fx_down(struct fx *f)
{
    world_down(&f->w);
    free(f->mem);
}

/* ---- callbacks that record ---- */

struct rec {
    struct erma_rma_completion c[MAXREC];
    int n, want;
    bool submitting; /* inside a submit: no callback may run now */
    int in_submit;   /* callbacks that ran inside a submit */
};

static void record(struct erma_rma *rma, const struct erma_rma_completion *c, void *ctx)
{
    struct rec *r = ctx;
    (void)rma;
    r->in_submit += r->submitting;
    if (r->n < MAXREC)
        r->c[r->n] = *c;
    r->n++;
}

static bool rec_done(void *ctx)
{
    const struct rec *r = ctx;
    return r->n >= r->want;
}

static int submit_cb(struct erma_rma *rma, struct rec *r, struct erma_rma_cmd c)
{
    c.cb = record;
    c.cb_ctx = r;
    r->submitting = true;
    const int id = erma_rma_submit(rma, &c);
    r->submitting = false;
    assert_true(id >= 0);
    return id;
}

static int transfer_cb(struct erma_rma *rma, struct rec *r, struct erma_rma_xfer x)
{
    x.cb = record;
    x.cb_ctx = r;
    r->submitting = true;
    const int id = erma_rma_transfer(rma, &x);
    r->submitting = false;
    assert_true(id >= 0);
    return id;
}

/* The one completion of r with tag (it fails on none or several). */
static const struct erma_rma_completion *by_tag(const struct rec *r, uint64_t tag)
{
    const struct erma_rma_completion *found = NULL;
    for (int i = 0; i < r->n && i < MAXREC; i++)
        if (r->c[i].tag == tag) {
            assert_null(found);
            found = &r->c[i];
        }
    assert_non_null(found);
    return found;
}

/* Runs the world until r has its completions, then some more: none may
 * come twice or late. */
static void run_rec(struct fx *f, struct rec *r)
{
    assert_true(world_run(&f->w, 2 * SEC, rec_done, r));
    world_run(&f->w, 50 * MS, NULL, NULL);
    assert_int_equal(r->n, r->want);
    assert_int_equal(r->in_submit, 0);
}

/* ---- each op's callback, once, with its status and tag ---- */

static void test_cb_statuses(void **state)
{
    struct fx f;
    fx_up(&f, ON_SIM(state), NULL);
    struct erma_rma *rma = f.w.rma[1];
    uint8_t rd[3000] = {0}, wr[1500], key[ERMA_RMA_KEY_BYTES] = {9}, junk[64];
    for (size_t i = 0; i < sizeof wr; i++)
        wr[i] = (uint8_t)(i * 13 + 1);
    struct erma_rkey unknown = f.k, wrong = f.k;
    unknown.region = 0x7777;
    wrong.kd[3] ^= 1;
    struct erma_rma_cmd rekey = cmd_of(ERMA_RMA_REKEY, f.p, &f.krk, 0, key, 0, 3);
    rekey.grace_ns = SEC;
    const struct erma_rma_cmd cmds[] = {
        cmd_of(ERMA_RMA_READ, f.p, &f.k, 100, rd, sizeof rd, 1),
        cmd_of(ERMA_RMA_WRITE, f.p, &f.k, 20000, wr, sizeof wr, 2),
        rekey,
        cmd_of(ERMA_RMA_READ, f.p, &unknown, 0, junk, 8, 4),
        cmd_of(ERMA_RMA_WRITE, f.p, &f.kro, 0, junk, 8, 5),
        cmd_of(ERMA_RMA_READ, f.p, &f.k, REGION_LEN - 4, junk, 8, 6),
        cmd_of(ERMA_RMA_READ, f.p, &wrong, 0, junk, 8, 7),
    };
    static const int want[] = {ERMA_OK, ERMA_OK, ERMA_OK, ERMA_ENOREGION,
                               ERMA_EPERM, ERMA_EBOUNDS, ERMA_EAUTH};
    enum { N = sizeof cmds / sizeof *cmds };
    struct rec r = {.want = N};
    int id[N];
    for (int i = 0; i < N; i++)
        id[i] = submit_cb(rma, &r, cmds[i]);
    assert_int_equal(r.n, 0); /* never from inside the submit */
    run_rec(&f, &r);
    for (int i = 0; i < N; i++) {
        const struct erma_rma_completion *c = by_tag(&r, (uint64_t)i + 1);
        assert_int_equal(c->status, want[i]);
        assert_int_equal(c->id, (uint32_t)id[i]);
        assert_false(c->transfer);
    }
    assert_memory_equal(rd, f.mem + 100, sizeof rd);
    assert_memory_equal(f.mem + 20000, wr, sizeof wr);
    struct erma_rma_completion none;
    assert_int_equal(erma_rma_poll(rma, &none, 1), 0); /* nothing for poll */
    struct erma_rma_stats st;
    erma_rma_get_stats(rma, &st);
    assert_int_equal(st.completed, N);
    fx_down(&f);
}

/* A dead target: both ops' callbacks say ERMA_ETIMEDOUT, once each. */
static void test_cb_dead_peer(void **state)
{
    struct fx f;
    fx_up(&f, ON_SIM(state), NULL);
    world_kill(&f.w, 0);
    uint8_t a[64], b[64] = {1};
    struct rec r = {.want = 2};
    submit_cb(f.w.rma[1], &r, cmd_of(ERMA_RMA_READ, f.p, &f.k, 0, a, sizeof a, 11));
    submit_cb(f.w.rma[1], &r, cmd_of(ERMA_RMA_WRITE, f.p, &f.k, 0, b, sizeof b, 12));
    assert_int_equal(r.n, 0);
    run_rec(&f, &r);
    assert_int_equal(by_tag(&r, 11)->status, ERMA_ETIMEDOUT);
    assert_int_equal(by_tag(&r, 12)->status, ERMA_ETIMEDOUT);
    fx_down(&f);
}

/* ---- a callback that submits again ---- */

enum { CHAIN = 20, PIECE = 512 };

struct chain {
    struct fx *f;
    uint8_t buf[PIECE];
    int calls, stop;
    int ids[CHAIN];          /* the slot each resubmit got */
    int bad_data, bad_status;
    int wait_rc;             /* erma_rma_wait() from inside the callback */
};

static void chain_next(struct erma_rma *rma, const struct erma_rma_completion *c, void *ctx)
{
    struct chain *ch = ctx;
    const uint64_t off = (uint64_t)ch->calls * PIECE;
    ch->bad_status += c->status != ERMA_OK || c->tag != (uint64_t)ch->calls;
    ch->bad_data += memcmp(ch->buf, ch->f->mem + off, PIECE) != 0;
    struct erma_rma_completion w;
    ch->wait_rc = erma_rma_wait(rma, (int)c->id, false, SEC, &w);
    if (++ch->calls >= ch->stop)
        return;
    memset(ch->buf, 0, PIECE); /* the same buffer again */
    struct erma_rma_cmd next = cmd_of(ERMA_RMA_READ, ch->f->p, &ch->f->k, off + PIECE, ch->buf,
                                      PIECE, (uint64_t)ch->calls);
    next.cb = chain_next;
    next.cb_ctx = ch;
    ch->ids[ch->calls] = erma_rma_submit(rma, &next);
}

static bool chain_done(void *ctx)
{
    const struct chain *ch = ctx;
    return ch->calls >= ch->stop;
}

static void chain_start(struct chain *ch, struct fx *f, int stop)
{
    *ch = (struct chain){.f = f, .stop = stop, .wait_rc = 1};
    struct erma_rma_cmd c = cmd_of(ERMA_RMA_READ, f->p, &f->k, 0, ch->buf, PIECE, 0);
    c.cb = chain_next;
    c.cb_ctx = ch;
    ch->ids[0] = erma_rma_submit(f->w.rma[1], &c);
    assert_true(ch->ids[0] >= 0);
}

/* One slot only: each resubmit gets the slot its callback's op just left. */
static void test_cb_resubmit(void **state)
{
    struct fx f;
    const struct erma_rma_cfg one = {.slots = 1};
    fx_up(&f, ON_SIM(state), &one);
    struct chain ch;
    chain_start(&ch, &f, CHAIN);
    assert_true(world_run(&f.w, 5 * SEC, chain_done, &ch));
    world_run(&f.w, 50 * MS, NULL, NULL);
    assert_int_equal(ch.calls, CHAIN);
    assert_int_equal(ch.bad_status, 0);
    assert_int_equal(ch.bad_data, 0);
    for (int i = 0; i < CHAIN; i++)
        assert_int_equal(ch.ids[i], 0);
    assert_int_equal(ch.wait_rc, ERMA_EAGAIN);
    fx_down(&f);
}

/* ---- callback and polled ops on one engine ---- */

struct mixed {
    struct rec r;
    struct erma_rma *rma;
    struct erma_rma_completion polled[MAXREC];
    int npolled, want_polled;
};

static bool mixed_done(void *ctx)
{
    struct mixed *m = ctx;
    const int n = erma_rma_poll(m->rma, m->polled + m->npolled, MAXREC - m->npolled);
    m->npolled += n > 0 ? n : 0;
    return m->npolled >= m->want_polled && m->r.n >= m->r.want;
}

static void test_mixed(void **state)
{
    enum { N = 12 };
    struct fx f;
    fx_up(&f, ON_SIM(state), NULL);
    struct mixed m = {.r = {.want = N / 2}, .rma = f.w.rma[1], .want_polled = N / 2};
    static uint8_t buf[N][PIECE];
    for (int i = 0; i < N; i++) {
        const struct erma_rma_cmd c =
            cmd_of(ERMA_RMA_READ, f.p, &f.k, (uint64_t)i * PIECE, buf[i], PIECE, (uint64_t)i);
        if (i % 2)
            assert_true(erma_rma_submit(m.rma, &c) >= 0);
        else
            submit_cb(m.rma, &m.r, c);
    }
    assert_true(world_run(&f.w, 2 * SEC, mixed_done, &m));
    world_run(&f.w, 50 * MS, NULL, NULL);
    mixed_done(&m);
    assert_int_equal(m.npolled, N / 2);
    assert_int_equal(m.r.n, N / 2);
    bool seen[N] = {false};
    for (int i = 0; i < N / 2; i++) {
        assert_int_equal(m.polled[i].tag % 2, 1); /* polled ops only */
        assert_int_equal(m.r.c[i].tag % 2, 0);    /* callback ops only */
        assert_int_equal(m.polled[i].status, ERMA_OK);
        assert_int_equal(m.r.c[i].status, ERMA_OK);
        seen[m.polled[i].tag] = seen[m.r.c[i].tag] = true;
    }
    for (int i = 0; i < N; i++) {
        assert_true(seen[i]);
        assert_memory_equal(buf[i], f.mem + i * PIECE, PIECE);
    }
    fx_down(&f);
}

/* ---- transfers ---- */

static struct erma_rma_xfer xfer_of(enum erma_rma_op op, const struct fx *f,
                                    const struct erma_rkey *k, uint64_t off, void *local,
                                    uint32_t len, uint64_t tag)
{
    return (struct erma_rma_xfer){.op = op, .peer = f->p, .rkey = *k, .offset = off,
                                  .local = local, .len = len, .max_retries = 3, .tag = tag};
}

static void test_xfer_cb(void **state)
{
    enum { RD = 100000, WR = 90000, POLLED = 50000 };
    struct fx f;
    fx_up(&f, ON_SIM(state), NULL);
    struct mixed m = {.r = {.want = 3}, .rma = f.w.rma[1], .want_polled = 1};
    uint8_t *rd = calloc(1, RD), *wr = malloc(WR), *pl = calloc(1, POLLED), junk[64];
    assert_true(rd && wr && pl);
    for (size_t i = 0; i < WR; i++)
        wr[i] = (uint8_t)(i * 11 + 5);
    struct erma_rkey unknown = f.k;
    unknown.region = 0x7777;
    const int ids[3] = {
        transfer_cb(m.rma, &m.r, xfer_of(ERMA_RMA_READ, &f, &f.k, 0, rd, RD, 21)),
        transfer_cb(m.rma, &m.r, xfer_of(ERMA_RMA_WRITE, &f, &f.k, 128 * 1024, wr, WR, 22)),
        transfer_cb(m.rma, &m.r, xfer_of(ERMA_RMA_READ, &f, &unknown, 0, junk, 64, 23)),
    };
    const struct erma_rma_xfer px = xfer_of(ERMA_RMA_READ, &f, &f.kro, 0, pl, POLLED, 24);
    const int pid = erma_rma_transfer(m.rma, &px);
    assert_true(pid >= 0);
    assert_int_equal(m.r.n, 0);
    assert_true(world_run(&f.w, 5 * SEC, mixed_done, &m));
    world_run(&f.w, 50 * MS, NULL, NULL);
    mixed_done(&m);
    assert_int_equal(m.r.n, 3);
    assert_int_equal(m.r.in_submit, 0);
    static const int want[3] = {ERMA_OK, ERMA_OK, ERMA_ENOREGION};
    for (int i = 0; i < 3; i++) {
        const struct erma_rma_completion *c = by_tag(&m.r, 21 + (uint64_t)i);
        assert_true(c->transfer);
        assert_int_equal(c->id, (uint32_t)ids[i]);
        assert_int_equal(c->status, want[i]);
    }
    assert_int_equal(m.npolled, 1);
    assert_int_equal(m.polled[0].tag, 24);
    assert_true(m.polled[0].transfer);
    assert_int_equal(m.polled[0].id, (uint32_t)pid);
    assert_int_equal(m.polled[0].status, ERMA_OK);
    assert_memory_equal(rd, f.mem, RD);
    assert_memory_equal(f.mem + 128 * 1024, wr, WR);
    assert_memory_equal(pl, f.mem + REGION_LEN, POLLED);
    free(rd);
    free(wr);
    free(pl);
    fx_down(&f);
}

/* ---- erma_rma_wait() ---- */

/* The target's loop runs on a thread of its own (loop_thread.h), so that
 * a wait, which runs only the initiator's loop, gets answers. */

static int submit(struct erma_rma *rma, struct erma_rma_cmd c)
{
    const int id = erma_rma_submit(rma, &c);
    assert_true(id >= 0);
    return id;
}

/* One polled op out of three: its completion, and only the others' for
 * poll; then every op. */
static void wait_polled(struct fx *f)
{
    struct erma_rma *rma = f->w.rma[1];
    static uint8_t buf[3][PIECE];
    memset(buf, 0, sizeof buf);
    int id[3];
    for (int i = 0; i < 3; i++)
        id[i] = submit(rma, cmd_of(ERMA_RMA_READ, f->p, &f->k, (uint64_t)i * PIECE, buf[i],
                                   PIECE, 31 + (uint64_t)i));
    struct erma_rma_completion c;
    assert_int_equal(erma_rma_wait(rma, id[1], false, 2 * SEC, &c), ERMA_OK);
    assert_int_equal(c.tag, 32);
    assert_int_equal(c.id, (uint32_t)id[1]);
    assert_int_equal(c.status, ERMA_OK);
    assert_memory_equal(buf[1], f->mem + PIECE, PIECE);
    assert_int_equal(erma_rma_wait(rma, ERMA_RMA_WAIT_ALL, false, 2 * SEC, NULL), ERMA_OK);
    struct erma_rma_completion rest[4];
    assert_int_equal(erma_rma_poll(rma, rest, 4), 2);
    assert_true((rest[0].tag == 31 && rest[1].tag == 33) ||
                (rest[0].tag == 33 && rest[1].tag == 31));
    assert_memory_equal(buf[0], f->mem, PIECE);
    assert_memory_equal(buf[2], f->mem + 2 * PIECE, PIECE);
    /* taken: the id names no op now */
    assert_int_equal(erma_rma_wait(rma, id[1], false, SEC, &c), ERMA_EINVAL);
}

/* A callback op: the wait returns once its callback ran, with the same
 * completion; poll sees nothing. */
static void wait_callback(struct fx *f)
{
    struct erma_rma *rma = f->w.rma[1];
    uint8_t buf[PIECE] = {0};
    struct rec r = {.want = 1};
    const int id = submit_cb(rma, &r, cmd_of(ERMA_RMA_READ, f->p, &f->k, 7, buf, PIECE, 41));
    struct erma_rma_completion c;
    assert_int_equal(erma_rma_wait(rma, id, false, 2 * SEC, &c), ERMA_OK);
    assert_int_equal(r.n, 1);
    assert_int_equal(c.tag, 41);
    assert_int_equal(r.c[0].tag, 41);
    assert_int_equal(c.status, ERMA_OK);
    assert_memory_equal(buf, f->mem + 7, PIECE);
    assert_int_equal(erma_rma_poll(rma, &c, 1), 0);
}

static void wait_transfers(struct fx *f)
{
    enum { LEN = 40000 };
    struct erma_rma *rma = f->w.rma[1];
    uint8_t *a = calloc(1, LEN), *b = calloc(1, LEN);
    assert_true(a && b);
    struct rec r = {.want = 1};
    const struct erma_rma_xfer x = xfer_of(ERMA_RMA_READ, f, &f->k, 1000, a, LEN, 51);
    const int polled = erma_rma_transfer(rma, &x);
    assert_true(polled >= 0);
    const int called = transfer_cb(rma, &r, xfer_of(ERMA_RMA_READ, f, &f->kro, 0, b, LEN, 52));
    /* the callback one first: the polled one, done or not by then, waits
     * for its wait (the callback one's id is free once its callback ran) */
    struct erma_rma_completion c;
    assert_int_equal(erma_rma_wait(rma, called, true, 2 * SEC, &c), ERMA_OK);
    assert_true(c.transfer);
    assert_int_equal(c.tag, 52);
    assert_int_equal(c.status, ERMA_OK);
    assert_int_equal(r.n, 1);
    assert_memory_equal(b, f->mem + REGION_LEN, LEN);
    assert_int_equal(erma_rma_wait(rma, called, true, SEC, &c), ERMA_EINVAL);
    assert_int_equal(erma_rma_wait(rma, polled, true, 2 * SEC, &c), ERMA_OK);
    assert_true(c.transfer);
    assert_int_equal(c.tag, 51);
    assert_int_equal(c.status, ERMA_OK);
    assert_memory_equal(a, f->mem + 1000, LEN);
    assert_int_equal(erma_rma_poll(rma, &c, 1), 0);
    assert_int_equal(r.n, 1);
    free(a);
    free(b);
}

/* Every op: a callback chain that submits again keeps the wait going
 * until its last op; a polled op's completion stays for poll. */
static void wait_all(struct fx *f)
{
    struct erma_rma *rma = f->w.rma[1];
    uint8_t buf[PIECE];
    struct chain ch;
    chain_start(&ch, f, 4);
    submit(rma, cmd_of(ERMA_RMA_READ, f->p, &f->k, 0, buf, PIECE, 61));
    assert_int_equal(erma_rma_wait(rma, ERMA_RMA_WAIT_ALL, false, 2 * SEC, NULL), ERMA_OK);
    assert_int_equal(ch.calls, 4);
    assert_int_equal(ch.bad_status + ch.bad_data, 0);
    struct erma_rma_completion c[2];
    assert_int_equal(erma_rma_poll(rma, c, 2), 1);
    assert_int_equal(c[0].tag, 61);
}

static void wait_bad_ids(struct fx *f)
{
    struct erma_rma *rma = f->w.rma[1];
    struct erma_rma_completion c;
    assert_int_equal(erma_rma_wait(rma, 5, false, SEC, &c), ERMA_EINVAL);  /* free slot */
    assert_int_equal(erma_rma_wait(rma, 5, true, SEC, &c), ERMA_EINVAL);   /* free transfer */
    assert_int_equal(erma_rma_wait(rma, 1 << 20, false, SEC, &c), ERMA_EINVAL);
    assert_int_equal(erma_rma_wait(rma, 1 << 20, true, SEC, &c), ERMA_EINVAL);
    assert_int_equal(erma_rma_wait(rma, -7, false, SEC, &c), ERMA_EINVAL);
    assert_int_equal(erma_rma_wait(NULL, ERMA_RMA_WAIT_ALL, false, SEC, NULL), ERMA_EINVAL);
    uint8_t buf[8];
    const int id = submit(rma, cmd_of(ERMA_RMA_READ, f->p, &f->k, 0, buf, 8, 71));
    assert_int_equal(erma_rma_wait(rma, id, false, SEC, NULL), ERMA_EINVAL); /* no out */
    assert_int_equal(erma_rma_wait(rma, id, false, 2 * SEC, &c), ERMA_OK);
}

static void test_wait(void **state)
{
    (void)state;
    struct fx f;
    fx_up(&f, false, NULL);
    struct loop_thread s;
    loop_thread_start(&s, f.w.ep[0]);
    wait_polled(&f);
    wait_callback(&f);
    wait_transfers(&f);
    wait_all(&f);
    wait_bad_ids(&f);
    loop_thread_stop(&s);
    fx_down(&f);
}

/* The wait's own timeout against the op's: ops to a port nobody listens
 * on time out after 300 ms; waits of 30 ms end first and lose nothing. */
static void test_wait_timeout(void **state)
{
    (void)state;
    struct world w;
    const struct erma_rma_cfg cfg = {.op_timeout_ns = 300 * MS};
    world_up_cfg(&w, false, 1, NULL, &cfg);
    struct erma_rma *rma = w.rma[0];
    char uri[64];
    snprintf(uri, sizeof uri, "udp://127.0.0.1:%d", test_port_base(4));
    const int p = erma_rma_peer(rma, uri, 0);
    assert_true(p >= 0);
    const struct erma_rkey k = {.region = 1, .cipher = ERMA_RMA_CHACHA20_POLY1305};
    uint8_t buf[64];
    struct erma_rma_completion c;

    /* before the submit: the op's 300 ms run from the clock reading in it */
    const uint64_t submitted = erma_now_ns();
    const int a = submit(rma, cmd_of(ERMA_RMA_READ, p, &k, 0, buf, 8, 81));
    uint64_t t0 = erma_now_ns();
    assert_int_equal(erma_rma_wait(rma, a, false, 30 * MS, &c), ERMA_ETIMEDOUT);
    const uint64_t waited = erma_now_ns() - t0;
    assert_true(waited >= 30 * MS && waited < 300 * MS);
    assert_int_equal(erma_rma_wait(rma, a, false, 3 * SEC, &c), ERMA_OK);
    assert_int_equal(c.tag, 81);
    assert_int_equal(c.status, ERMA_ETIMEDOUT); /* the op's, not the wait's */
    assert_true(erma_now_ns() - submitted >= 300 * MS);

    /* a polled op whose wait gave up completes through poll */
    submit(rma, cmd_of(ERMA_RMA_READ, p, &k, 0, buf, 8, 82));
    assert_int_equal(erma_rma_wait(rma, ERMA_RMA_WAIT_ALL, false, 30 * MS, NULL),
                     ERMA_ETIMEDOUT);
    t0 = erma_now_ns();
    int n = 0;
    while (n == 0 && erma_now_ns() - t0 < 3 * SEC) {
        erma_endpoint_run_once(w.ep[0]);
        n = erma_rma_poll(rma, &c, 1);
    }
    assert_int_equal(n, 1);
    assert_int_equal(c.tag, 82);
    assert_int_equal(c.status, ERMA_ETIMEDOUT);

    /* a callback op: not called while the wait times out, called after */
    struct rec r = {.want = 1};
    submit_cb(rma, &r, cmd_of(ERMA_RMA_READ, p, &k, 0, buf, 8, 83));
    assert_int_equal(erma_rma_wait(rma, ERMA_RMA_WAIT_ALL, false, 30 * MS, NULL),
                     ERMA_ETIMEDOUT);
    assert_int_equal(r.n, 0);
    assert_int_equal(erma_rma_wait(rma, ERMA_RMA_WAIT_ALL, false, 3 * SEC, NULL), ERMA_OK);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.c[0].tag, 83);
    assert_int_equal(r.c[0].status, ERMA_ETIMEDOUT);
    world_down(&w);
}

/* On the sim, time moves only under erma_sim_run(): the wait refuses, and
 * the op completes through poll as ever. */
static void test_wait_sim(void **state)
{
    (void)state;
    struct fx f;
    fx_up(&f, true, NULL);
    uint8_t buf[64];
    const int id = submit(f.w.rma[1], cmd_of(ERMA_RMA_READ, f.p, &f.k, 0, buf, 64, 91));
    struct erma_rma_completion c;
    assert_int_equal(erma_rma_wait(f.w.rma[1], id, false, SEC, &c), ERMA_ENOTSUP);
    assert_int_equal(world_wait(&f.w, 1, &c, 1, SEC), 1);
    assert_int_equal(c.tag, 91);
    assert_int_equal(c.status, ERMA_OK);
    assert_memory_equal(buf, f.mem, 64);
    fx_down(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_cb_statuses, &SIM),
        cmocka_unit_test_prestate(test_cb_statuses, &UDP),
        cmocka_unit_test_prestate(test_cb_dead_peer, &SIM),
        cmocka_unit_test_prestate(test_cb_dead_peer, &UDP),
        cmocka_unit_test_prestate(test_cb_resubmit, &SIM),
        cmocka_unit_test_prestate(test_cb_resubmit, &UDP),
        cmocka_unit_test_prestate(test_mixed, &SIM),
        cmocka_unit_test_prestate(test_mixed, &UDP),
        cmocka_unit_test_prestate(test_xfer_cb, &SIM),
        cmocka_unit_test_prestate(test_xfer_cb, &UDP),
        cmocka_unit_test(test_wait),
        cmocka_unit_test(test_wait_timeout),
        cmocka_unit_test(test_wait_sim),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
