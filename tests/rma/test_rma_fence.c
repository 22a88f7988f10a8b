/* Fenced one-sided WRITEs (cmd.fence, xfer.fence) on the sim fabric in
 * virtual time: bad input gets its precise error, a failed earlier write
 * cancels a fenced one, a fenced command waits for a whole transfer (also
 * when slots are few), and, under heavy reordering and loss, 10^4 random
 * write sequences on a small region in which no fenced write is ever seen
 * applied before an earlier write of the same initiator to that region
 * completed; the same sequences without the flag are seen violating it.
 *
 * Observation is at the target, from the region's memory alone: every
 * write of a sequence fills its bytes with its own number, and after every
 * round of the loop (each endpoint's pass) the test compares the region
 * with its last copy. A byte changed to w means write w was applied there
 * in this round. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "rma_util.h"

#define REG 4096 /* the region: writes of up to 3 packets overlap in it */
#define NW 8     /* writes per sequence */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

struct fixture {
    struct world w;
    uint8_t *mem; /* the target's region */
    uint32_t region;
    struct erma_rkey k;
    int peer;
};

static void fixture_up(struct fixture *f, const struct erma_sim_cfg *sc, uint32_t slots)
{
    struct erma_rma_cfg cfg[2] = {{.op_timeout_ns = 150000}, {.op_timeout_ns = 150000,
                                                               .slots = slots}};
    world_up_cfg(&f->w, true, 2, sc, cfg);
    f->mem = calloc(1, REG);
    assert_non_null(f->mem);
    assert_int_equal(erma_region_register(f->w.rma[0], f->mem, REG,
                                          ERMA_RMA_PERM_READ | ERMA_RMA_PERM_WRITE, &f->region),
                     ERMA_OK);
    assert_int_equal(erma_region_export_uri(f->w.rma[0], f->region, erma_rma_identity(f->w.rma[1]),
                                            f->w.uri[1], &f->k),
                     ERMA_OK);
    f->peer = erma_rma_peer(f->w.rma[1], f->w.uri[0], 0);
    assert_true(f->peer >= 0);
}

static void fixture_down(struct fixture *f)
{
    world_down(&f->w);
    free(f->mem);
}

static struct erma_rma_cmd write_cmd(const struct fixture *f, uint64_t off, void *src,
                                     uint32_t len, uint64_t tag, bool fence)
{
    struct erma_rma_cmd c = cmd_of(ERMA_RMA_WRITE, f->peer, &f->k, off, src, len, tag);
    c.fence = fence;
    return c;
}

/* ---- bad input and the simple cases ---- */

static void test_fence_bad_input(void **state)
{
    (void)state;
    struct fixture f;
    fixture_up(&f, NULL, 0);
    uint8_t buf[64] = {0};
    struct erma_rma_cmd c = cmd_of(ERMA_RMA_READ, f.peer, &f.k, 0, buf, 64, 0);
    c.fence = true;
    assert_int_equal(erma_rma_submit(f.w.rma[1], &c), ERMA_EINVAL);
    c.op = ERMA_RMA_REKEY;
    assert_int_equal(erma_rma_submit(f.w.rma[1], &c), ERMA_EINVAL);
    c = write_cmd(&f, 0, buf, ERMA_RMA_MAX_OP + 1, 0, true);
    assert_int_equal(erma_rma_submit(f.w.rma[1], &c), ERMA_E2BIG);
    const struct erma_rma_xfer x = {.op = ERMA_RMA_READ, .peer = f.peer, .rkey = f.k,
                                    .local = buf, .len = 64, .fence = true};
    assert_int_equal(erma_rma_transfer(f.w.rma[1], &x), ERMA_EINVAL);
    /* nothing earlier: a fenced write goes at once */
    struct erma_rma_completion cp;
    memset(buf, 0xab, sizeof buf);
    assert_int_equal(world_op(&f.w, 1, write_cmd(&f, 8, buf, 64, 0, true), &cp), ERMA_OK);
    assert_memory_equal(f.mem + 8, buf, 64);
    struct erma_rma_stats st;
    erma_rma_get_stats(f.w.rma[1], &st);
    assert_int_equal(st.fence_held, 0);
    erma_rma_get_stats(f.w.rma[0], &st);
    assert_int_equal(st.fenced, 1); /* the flag arrived, authenticated */
    fixture_down(&f);
}

/* An earlier write fails (out of bounds): the fenced one after it is
 * cancelled, completing after it; a write to another region and a later
 * non-fenced one go on. */
static void test_fence_cancel(void **state)
{
    (void)state;
    struct fixture f;
    fixture_up(&f, NULL, 0);
    uint8_t *other = calloc(1, REG);
    uint32_t region2;
    struct erma_rkey k2;
    assert_int_equal(erma_region_register(f.w.rma[0], other, REG, ERMA_RMA_PERM_WRITE, &region2),
                     ERMA_OK);
    assert_int_equal(erma_region_export_uri(f.w.rma[0], region2, erma_rma_identity(f.w.rma[1]),
                                            f.w.uri[1], &k2),
                     ERMA_OK);
    uint8_t a[64], b[64], c2[64], d[64];
    memset(a, 1, sizeof a);
    memset(b, 2, sizeof b);
    memset(c2, 3, sizeof c2);
    memset(d, 4, sizeof d);
    struct erma_rma_cmd bad = write_cmd(&f, REG - 8, a, 64, 1, false); /* past the end */
    assert_true(erma_rma_submit(f.w.rma[1], &bad) >= 0);
    struct erma_rma_cmd fenced = write_cmd(&f, 0, b, 64, 2, true);
    assert_true(erma_rma_submit(f.w.rma[1], &fenced) >= 0);
    struct erma_rma_cmd elsewhere = cmd_of(ERMA_RMA_WRITE, f.peer, &k2, 0, c2, 64, 3);
    elsewhere.fence = true; /* nothing earlier to that region */
    assert_true(erma_rma_submit(f.w.rma[1], &elsewhere) >= 0);
    struct erma_rma_cmd later = write_cmd(&f, 128, d, 64, 4, false);
    assert_true(erma_rma_submit(f.w.rma[1], &later) >= 0);
    struct erma_rma_completion cp[4];
    assert_int_equal(world_wait(&f.w, 1, cp, 4, 100000000), 4);
    int st[5] = {0}, pos[5] = {0};
    for (int i = 0; i < 4; i++) {
        st[cp[i].tag] = cp[i].status;
        pos[cp[i].tag] = i;
    }
    assert_int_equal(st[1], ERMA_EBOUNDS);
    assert_int_equal(st[2], ERMA_ECANCELLED);
    assert_true(pos[2] > pos[1]);
    assert_int_equal(st[3], ERMA_OK);
    assert_int_equal(st[4], ERMA_OK);
    assert_int_equal(f.mem[0], 0); /* the cancelled write wrote nothing */
    assert_int_equal(f.mem[128], 4);
    assert_int_equal(other[0], 3);
    struct erma_rma_stats s;
    erma_rma_get_stats(f.w.rma[1], &s);
    assert_int_equal(s.fence_held, 1);
    assert_int_equal(s.fence_cancelled, 1);
    free(other);
    fixture_down(&f);
}

/* Watches one byte: the fenced flag write must find the whole transfer
 * written when it lands. */
struct flag_watch {
    struct fixture *f;
    const uint8_t *data;
    size_t len;
    uint64_t flag_off;
    bool landed, complete_then;
    struct erma_rma_completion *c;
    int want, got;
};

static bool flag_done(void *ctx)
{
    struct flag_watch *fw = ctx;
    if (!fw->landed && fw->f->mem[fw->flag_off] == 0xee) {
        fw->landed = true;
        fw->complete_then = memcmp(fw->f->mem, fw->data, fw->len) == 0;
    }
    const int n = erma_rma_poll(fw->f->w.rma[1], fw->c + fw->got, fw->want - fw->got);
    fw->got += n > 0 ? n : 0;
    return fw->got >= fw->want;
}

/* A 256 KB transfer (64 chunks), then two fenced 1-byte flag writes after
 * it: with slots = 3 a third fenced write that would wait too is refused
 * (ENOSLOTS), so that the transfer keeps a slot to run in; the flag lands
 * only once the whole transfer is written. Then a fenced transfer waits for
 * a command. */
static void test_fence_transfer(void **state)
{
    (void)state;
    struct erma_sim_cfg sc;
    erma_sim_cfg_default(&sc);
    sc.reorder = 0.3;
    sc.reorder_delay_ns = 10000;
    struct fixture f;
    fixture_up(&f, &sc, 3);
    const size_t len = REG - 64; /* one chunk */
    uint8_t *data = malloc(REG);
    for (size_t i = 0; i < REG; i++)
        data[i] = (uint8_t)(i * 13 + 1) | 1;
    /* many chunks: a region of 256 KB */
    const size_t big = 256 * 1024;
    uint8_t *bigmem = calloc(1, big), *bigdata = malloc(big);
    for (size_t i = 0; i < big; i++)
        bigdata[i] = (uint8_t)(i * 7 + 5) | 1;
    uint32_t breg;
    struct erma_rkey bk;
    assert_int_equal(erma_region_register(f.w.rma[0], bigmem, big,
                                          ERMA_RMA_PERM_READ | ERMA_RMA_PERM_WRITE, &breg),
                     ERMA_OK);
    assert_int_equal(erma_region_export_uri(f.w.rma[0], breg, erma_rma_identity(f.w.rma[1]),
                                            f.w.uri[1], &bk),
                     ERMA_OK);
    const struct erma_rma_xfer x = {.op = ERMA_RMA_WRITE, .peer = f.peer, .rkey = bk,
                                    .local = bigdata, .len = (uint32_t)(big - 1),
                                    .max_retries = 8};
    assert_true(erma_rma_transfer(f.w.rma[1], &x) >= 0);
    uint8_t flag = 0xee;
    struct erma_rma_cmd fc = cmd_of(ERMA_RMA_WRITE, f.peer, &bk, big - 1, &flag, 1, 7);
    fc.fence = true;
    assert_true(erma_rma_submit(f.w.rma[1], &fc) >= 0);
    assert_true(erma_rma_submit(f.w.rma[1], &fc) >= 0);
    /* a third waiting fenced write would leave the transfer no slot */
    assert_int_equal(erma_rma_submit(f.w.rma[1], &fc), ERMA_ENOSLOTS);
    struct erma_rma_completion cp[3];
    struct fixture bf = f; /* the watch reads the big region */
    bf.mem = bigmem;
    struct flag_watch fw = {&bf, bigdata, big - 1, big - 1, false, false, cp, 3, 0};
    assert_true(world_run(&f.w, 500000000, flag_done, &fw));
    assert_true(fw.landed);
    assert_true(fw.complete_then);
    assert_int_equal(cp[0].status, ERMA_OK);
    assert_true(cp[0].transfer);
    for (int i = 1; i < 3; i++) {
        assert_int_equal(cp[i].status, ERMA_OK);
        assert_int_equal(cp[i].tag, 7);
    }

    /* a fenced transfer after a command to the small region */
    memset(f.mem, 0, REG);
    uint8_t first[64];
    memset(first, 0x55, sizeof first);
    assert_true(erma_rma_submit(f.w.rma[1], &(struct erma_rma_cmd){
                                                .op = ERMA_RMA_WRITE, .peer = f.peer,
                                                .rkey = f.k, .offset = 0, .local = first,
                                                .len = 64, .tag = 1}) >= 0);
    const struct erma_rma_xfer fx = {.op = ERMA_RMA_WRITE, .peer = f.peer, .rkey = f.k,
                                     .local = data, .len = (uint32_t)len, .max_retries = 8,
                                     .fence = true, .tag = 2};
    assert_true(erma_rma_transfer(f.w.rma[1], &fx) >= 0);
    assert_int_equal(world_wait(&f.w, 1, cp, 2, 500000000), 2);
    assert_int_equal(cp[0].tag, 1);
    assert_int_equal(cp[0].status, ERMA_OK);
    assert_int_equal(cp[1].tag, 2);
    assert_int_equal(cp[1].status, ERMA_OK);
    assert_memory_equal(f.mem, data, len); /* the fenced transfer's bytes last */
    struct erma_rma_stats s;
    erma_rma_get_stats(f.w.rma[1], &s);
    assert_int_equal(s.fence_held, 3);
    free(data);
    free(bigdata);
    free(bigmem);
    fixture_down(&f);
}

/* A last-priority WRITE transfer, then fenced first-priority commands that
 * wait for it until no slot is left for them: the transfer's chunks still
 * find a slot (the priorities' reserve would leave them none, and the
 * fenced commands would wait for them for ever), and everything completes. */
static void test_fence_priority(void **state)
{
    (void)state;
    struct fixture f;
    fixture_up(&f, NULL, 32); /* priority 3 leaves the last 6 slots free */
    static uint8_t data[REG];
    memset(data, 0x5a, sizeof data);
    const struct erma_rma_xfer x = {.op = ERMA_RMA_WRITE, .peer = f.peer, .rkey = f.k,
                                    .local = data, .len = REG, .max_retries = 8,
                                    .priority = ERMA_RMA_PRIORITIES - 1, .tag = 100};
    assert_true(erma_rma_transfer(f.w.rma[1], &x) >= 0);
    uint8_t flag = 0xee;
    struct erma_rma_cmd fc = cmd_of(ERMA_RMA_WRITE, f.peer, &f.k, 0, &flag, 1, 7);
    fc.fence = true;
    int n = 0;
    while (erma_rma_submit(f.w.rma[1], &fc) >= 0)
        n++;
    assert_true(n >= 24);
    struct erma_rma_completion cp[33];
    assert_int_equal(world_wait(&f.w, 1, cp, n + 1, 500000000), n + 1);
    assert_true(cp[0].transfer);
    for (int i = 0; i <= n; i++)
        assert_int_equal(cp[i].status, ERMA_OK);
    assert_int_equal(f.mem[0], 0xee); /* the fenced writes last */
    assert_int_equal(f.mem[1], 0x5a);
    fixture_down(&f);
}

/* ---- random sequences under reordering and loss ---- */

struct wr {
    uint32_t off, len;
    bool fence;    /* as drawn (the run without fences keeps the marks) */
    int status;
    bool done;     /* its completion polled */
    bool early, late; /* counted as a violation */
    int64_t done_round, first_round, last_round; /* -1: not yet */
};

struct seqrun {
    struct fixture *f;
    uint8_t shadow[REG];
    struct wr w[NW];
    uint8_t src[NW][REG];
    int nsub, ndone;
    bool wait_all;
    int64_t round;
    /* figures */
    /* violations, each a count of writes */
    uint64_t early;      /* fenced writes that landed before an earlier one completed */
    uint64_t late;       /* writes applied (in part) after a later fenced one had landed */
    uint64_t final_bad;  /* fenced writes (OK) with a byte left of an earlier write */
    uint64_t statuses[3]; /* OK, CANCELLED, other */
};

static void observe_mem(struct seqrun *r)
{
    if (memcmp(r->f->mem, r->shadow, REG) == 0)
        return;
    for (uint32_t p = 0; p < REG; p++) {
        const uint8_t v = r->f->mem[p];
        if (v == r->shadow[p])
            continue;
        r->shadow[p] = v;
        assert_true(v >= 1 && v <= r->nsub);
        struct wr *a = &r->w[v - 1];
        assert_true(p >= a->off && p < a->off + a->len); /* only its own bytes */
        if (a->first_round < 0) {
            a->first_round = r->round;
            /* a fenced write lands: every earlier write completed before */
            for (int e = 0; a->fence && !a->early && e < v - 1; e++)
                if (!r->w[e].done || r->w[e].done_round >= r->round) {
                    a->early = true;
                    r->early++;
                }
        }
        a->last_round = r->round;
        /* an earlier write lands after a fenced one did, a round before */
        for (int g = v; g < r->nsub && !a->late; g++)
            if (r->w[g].fence && r->w[g].first_round >= 0 && r->w[g].first_round < r->round) {
                a->late = true;
                r->late++;
            }
    }
}

static bool seq_observe(void *ctx)
{
    struct seqrun *r = ctx;
    r->round++;
    observe_mem(r); /* first: a landing this round is before a completion polled now */
    struct erma_rma_completion c[NW];
    const int n = erma_rma_poll(r->f->w.rma[1], c, NW);
    for (int i = 0; i < n; i++) {
        struct wr *a = &r->w[c[i].tag];
        assert_false(a->done);
        a->done = true;
        a->status = c[i].status;
        a->done_round = r->round;
        r->ndone++;
        r->statuses[c[i].status == ERMA_OK ? 0 : c[i].status == ERMA_ECANCELLED ? 1 : 2]++;
    }
    return r->wait_all && r->ndone == r->nsub;
}

/* After the sequence: a byte of a fenced write that completed OK holds it
 * or a later write's number, never an earlier one's. */
static void final_check(struct seqrun *r)
{
    for (int g = 0; g < r->nsub; g++) {
        const struct wr *a = &r->w[g];
        if (!a->fence || a->status != ERMA_OK)
            continue;
        for (uint32_t p = a->off; p < a->off + a->len; p++)
            if (r->f->mem[p] && r->f->mem[p] - 1 < g) {
                r->final_bad++;
                break;
            }
    }
}

/* Runs `seqs` sequences from seed; fences as drawn, or none at all. */
static void run_sequences(struct seqrun *r, uint64_t seed, int seqs, bool fences)
{
    uint64_t s = seed;
    for (int q = 0; q < seqs; q++) {
        memset(r->f->mem, 0, REG); /* nothing of the last sequence writes any more */
        memset(r->shadow, 0, REG);
        r->nsub = r->ndone = 0;
        r->round = 0;
        r->wait_all = false;
        for (int i = 0; i < NW; i++) {
            struct wr *a = &r->w[i];
            const uint64_t x = rng_next(&s);
            /* mostly small writes, some of 2-3 packets */
            a->len = x % 8 == 0 ? 1 + (uint32_t)(x >> 8) % 3000 : 1 + (uint32_t)(x >> 8) % 300;
            a->off = (uint32_t)(rng_next(&s) % (REG - a->len + 1));
            a->fence = rng_next(&s) % 3 == 0;
            a->done = a->early = a->late = false;
            a->done_round = a->first_round = a->last_round = -1;
            memset(r->src[i], i + 1, a->len);
            const uint64_t gap = rng_next(&s) % 4 == 0 ? rng_next(&s) % 8000 : 0;
            if (gap)
                world_run(&r->f->w, gap, seq_observe, r);
            struct erma_rma_cmd c = write_cmd(r->f, a->off, r->src[i], a->len, (uint64_t)i,
                                              fences && a->fence);
            assert_true(erma_rma_submit(r->f->w.rma[1], &c) >= 0);
            r->nsub++;
        }
        r->wait_all = true;
        /* bounded: 8 writes, each within 150 us once it may go */
        assert_true(world_run(&r->f->w, 20000000, seq_observe, r));
        final_check(r);
    }
}

static void test_fence_random(void **state)
{
    (void)state;
    struct erma_sim_cfg sc;
    erma_sim_cfg_default(&sc);
    sc.paths = 4;
    sc.path_delay_ns[0] = 0;
    sc.path_delay_ns[1] = 3000;
    sc.path_delay_ns[2] = 7000;
    sc.path_delay_ns[3] = 15000;
    sc.reorder = 0.5;
    sc.reorder_delay_ns = 20000;
    sc.loss = 0.02;
    sc.seed = 16;
    const int seqs = 10000, unfenced_seqs = 1000;

    struct seqrun *r = calloc(1, sizeof *r);
    struct fixture f;
    fixture_up(&f, &sc, 0);
    r->f = &f;
    run_sequences(r, 1616, seqs, true);
    struct erma_rma_stats st, tst;
    erma_rma_get_stats(f.w.rma[1], &st);
    erma_rma_get_stats(f.w.rma[0], &tst);
    struct erma_sim_stats ss;
    erma_sim_get_stats(f.w.sim, &ss);
    print_message("  fenced: %d sequences x %d writes, %lu fenced held, %lu cancelled; "
                  "completions OK %lu, CANCELLED %lu, other %lu; sim reordered %lu lost %lu of "
                  "%lu packets; violating writes: early %lu, late %lu, final %lu; %.1f ms "
                  "virtual\n",
                  seqs, NW, (unsigned long)st.fence_held, (unsigned long)st.fence_cancelled,
                  (unsigned long)r->statuses[0], (unsigned long)r->statuses[1],
                  (unsigned long)r->statuses[2], (unsigned long)ss.reordered,
                  (unsigned long)ss.drop_loss, (unsigned long)ss.sent, (unsigned long)r->early,
                  (unsigned long)r->late, (unsigned long)r->final_bad,
                  (double)erma_sim_now(f.w.sim) / 1e6);
    assert_int_equal(r->early, 0);
    assert_int_equal(r->late, 0);
    assert_int_equal(r->final_bad, 0);
    assert_true(st.fence_held > (uint64_t)seqs);  /* the fences did hold writes back */
    assert_true(r->statuses[2] > 0);              /* and there were failures ... */
    assert_true(st.fence_cancelled > 0);          /* ... that cancelled fenced writes */
    assert_true(tst.fenced > 0);
    fixture_down(&f);

    /* the same sequences without the flag: the checks see violations */
    memset(r, 0, sizeof *r);
    fixture_up(&f, &sc, 0);
    r->f = &f;
    run_sequences(r, 1616, unfenced_seqs, false);
    print_message("  without fences: %d sequences; violating writes: early %lu, late %lu, "
                  "final %lu\n",
                  unfenced_seqs, (unsigned long)r->early, (unsigned long)r->late,
                  (unsigned long)r->final_bad);
    assert_true(r->early > 0);
    assert_true(r->late > 0);
    assert_true(r->final_bad > 0);
    fixture_down(&f);
    free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fence_bad_input),
        cmocka_unit_test(test_fence_cancel),
        cmocka_unit_test(test_fence_transfer),
        cmocka_unit_test(test_fence_priority),
        cmocka_unit_test(test_fence_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
