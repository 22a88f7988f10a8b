/* common/: clock, errors, log, PRNG, pool, rings. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "erma/clock.h"
#include "erma/errors.h"
#include "erma/log.h"
#include "erma/sdk/pool.h"
#include "erma/sdk/rand.h"
#include "common/ring.h"

/* ---- clock ---- */

/* erma's clock and CLOCK_MONOTONIC at one instant: an erma reading between
 * two monotonic ones less than 20 us apart (a thread preempted between
 * two readings, as beside CPU hogs, made them 1.7 ms apart). */
static void clocks_at_once(uint64_t *c, uint64_t *m)
{
    for (int i = 0; i < 1000; i++) {
        const uint64_t a = erma_mono_ns(), t = erma_now_ns(), b = erma_mono_ns();
        if (b - a < 20000) {
            *c = t;
            *m = a + (b - a) / 2;
            return;
        }
    }
    fail_msg("no two monotonic readings within 20 us in 1,000 tries");
}

static void test_clock_tracks_monotonic(void **state)
{
    (void)state;
    (void)erma_now_ns(); /* its calibration (5 ms) before the first pair */
    uint64_t c0, m0;
    clocks_at_once(&c0, &m0);
    uint64_t prev = c0;
    for (int i = 0; i < 100000; i++) { /* never goes back */
        const uint64_t t = erma_now_ns();
        assert_true(t >= prev);
        prev = t;
    }
    nanosleep(&(struct timespec){0, 50000000}, NULL);
    uint64_t c1, m1;
    clocks_at_once(&c1, &m1);
    const uint64_t dc = c1 - c0, dm = m1 - m0;
    print_message("  clock source: %s; 50 ms: %llu ns by erma, %llu by CLOCK_MONOTONIC\n",
                  erma_clock_uses_tsc() ? "TSC" : "CLOCK_MONOTONIC", (unsigned long long)dc,
                  (unsigned long long)dm);
    assert_true(dm >= 50000000);
    assert_true(dc > dm * 99 / 100 && dc < dm * 101 / 100);
}

static uint64_t fake_time(void *ctx)
{
    return *(uint64_t *)ctx;
}

static void test_clock_substitution(void **state)
{
    (void)state;
    uint64_t t = 42;
    erma_clock_set_source(fake_time, &t);
    assert_int_equal(erma_now_ns(), 42);
    t = 1000;
    assert_int_equal(erma_now_ns(), 1000);
    erma_clock_set_source(NULL, NULL);
    const uint64_t real = erma_now_ns();
    assert_true(real > 1000000); /* back on the real clock */
    assert_true(real - erma_mono_ns() + 1000000000ull < 2000000000ull); /* within 1 s */
}

/* ---- errors and log ---- */

static void test_strerror(void **state)
{
    (void)state;
    for (int e = 0; e > ERMA_ERR_LAST; e--) {
        const char *s = erma_strerror(e);
        assert_non_null(s);
        assert_string_not_equal(s, "unknown error");
        for (int f = 0; f > e; f--)
            assert_string_not_equal(s, erma_strerror(f)); /* distinct */
    }
    assert_string_equal(erma_strerror(ERMA_ERR_LAST), "unknown error");
    assert_string_equal(erma_strerror(1), "unknown error");
    assert_string_equal(erma_strerror(-1000), "unknown error");
    assert_string_equal(erma_strerror(ERMA_E2BIG), "message too large");
}

static void test_log_level(void **state)
{
    (void)state;
    erma_log_set_level(ERMA_LOG_ERROR);
    assert_int_equal(erma_log_level, ERMA_LOG_ERROR);
    ERMA_DEBUG("not printed: %d", 1); /* below the level: must not crash or print */
    erma_log_set_level(ERMA_LOG_NOTICE);
    assert_int_equal(erma_log_level, ERMA_LOG_NOTICE);
}

/* ---- PRNG ---- */

static void test_rand(void **state)
{
    (void)state;
    struct erma_rand a, b, c;
    erma_rand_seed(&a, 7);
    erma_rand_seed(&b, 7);
    erma_rand_seed(&c, 8);
    int differ = 0;
    for (int i = 0; i < 1000; i++) {
        const uint64_t x = erma_rand_u64(&a);
        assert_int_equal(x, erma_rand_u64(&b));
        differ += x != erma_rand_u64(&c);
    }
    assert_true(differ > 990);
    unsigned buckets[10] = {0};
    for (int i = 0; i < 100000; i++) {
        const uint64_t k = erma_rand_below(&a, 10);
        assert_true(k < 10);
        buckets[k]++;
        const double d = erma_rand_double(&a);
        assert_true(d >= 0 && d < 1);
    }
    for (int k = 0; k < 10; k++) /* expected 10000, sigma ~95 */
        assert_true(buckets[k] > 9500 && buckets[k] < 10500);
}

/* ---- pool ---- */

static int reg_calls, reg_fail;
static int count_reg(void *ctx, void *addr, size_t len)
{
    (void)ctx;
    assert_non_null(addr);
    assert_true(len >= ERMA_POOL_CHUNK);
    reg_calls++;
    return reg_fail ? ERMA_ENOMEM : ERMA_OK;
}

static void test_pool(void **state)
{
    (void)state;
    struct erma_pool *p;
    const struct erma_pool_cfg cfg = {.reg = count_reg};
    assert_int_equal(erma_pool_create(&cfg, &p), ERMA_OK);
    assert_null(erma_pool_alloc(p, 0));
    assert_null(erma_pool_alloc(p, ERMA_POOL_MAX_BUF + 1));
    assert_int_equal(erma_pool_capacity(1), 64);
    assert_int_equal(erma_pool_capacity(65), 128);
    assert_int_equal(erma_pool_capacity(ERMA_POOL_MAX_BUF), ERMA_POOL_MAX_BUF);
    assert_int_equal(erma_pool_capacity(ERMA_POOL_MAX_BUF + 1), 0);
    /* every size class, each buffer filled with its own pattern */
    enum { N = 40 };
    void *buf[N];
    size_t size[N];
    for (int i = 0; i < N; i++) {
        size[i] = (size_t)1 << (i % 25); /* 1 B .. 16 MiB */
        buf[i] = erma_pool_alloc(p, size[i]);
        assert_non_null(buf[i]);
        assert_int_equal((uintptr_t)buf[i] % 64, 0);
        memset(buf[i], i + 1, size[i]);
    }
    assert_int_equal(erma_pool_live(p), N);
    for (int i = 0; i < N; i++) /* nothing overlapped */
        for (size_t k = 0; k < size[i]; k += size[i] / 8 + 1)
            assert_int_equal(((uint8_t *)buf[i])[k], i + 1);
    const int regs = reg_calls;
    assert_true(regs >= 1);
    /* freed buffers are reused, without mapping more */
    const size_t mapped = erma_pool_mapped(p);
    erma_pool_free(p, buf[3], size[3]);
    assert_ptr_equal(erma_pool_alloc(p, size[3]), buf[3]);
    assert_int_equal(erma_pool_mapped(p), mapped);
    for (int i = 0; i < N; i++)
        erma_pool_free(p, buf[i], size[i]);
    assert_int_equal(erma_pool_live(p), 0);
    /* with every class stocked, allocations need no new chunk and no registration */
    reg_fail = 1;
    void *again = erma_pool_alloc(p, ERMA_POOL_MAX_BUF);
    assert_non_null(again);
    assert_int_equal(reg_calls, regs);
    erma_pool_free(p, again, ERMA_POOL_MAX_BUF);
    reg_fail = 0;
    erma_pool_destroy(p);
}

static void test_pool_reg_failure(void **state)
{
    (void)state;
    struct erma_pool *p;
    const struct erma_pool_cfg cfg = {.reg = count_reg, .no_hugepages = true};
    assert_int_equal(erma_pool_create(&cfg, &p), ERMA_OK);
    reg_fail = 1;
    assert_null(erma_pool_alloc(p, 100));
    assert_int_equal(erma_pool_mapped(p), 0);
    reg_fail = 0;
    void *b = erma_pool_alloc(p, 100);
    assert_non_null(b);
    assert_false(erma_pool_uses_hugepages(p));
    erma_pool_free(p, b, 100);
    erma_pool_destroy(p);
    erma_pool_destroy(NULL);
}

/* Registrations and deregistrations, which must match chunk for chunk. */
enum { MAX_REGS = 64 };
static struct {
    void *addr[MAX_REGS];
    size_t len[MAX_REGS];
    int n, unregs;
} regs;

static int track_reg(void *ctx, void *addr, size_t len)
{
    (void)ctx;
    assert_true(regs.n < MAX_REGS);
    regs.addr[regs.n] = addr;
    regs.len[regs.n++] = len;
    return ERMA_OK;
}

static void track_unreg(void *ctx, void *addr, size_t len)
{
    (void)ctx;
    int i = 0;
    while (i < regs.n && regs.addr[i] != addr)
        i++;
    assert_true(i < regs.n);
    assert_int_equal(regs.len[i], len);
    regs.addr[i] = NULL;
    regs.unregs++;
}

#define IDLE 1000 /* ns, the pools' idle time in these tests */

/* Chunks that stay empty for IDLE go back, not before; chunks with a live
 * buffer never, and that buffer keeps its bytes. */
static void test_pool_trim(void **state)
{
    (void)state;
    struct erma_pool *p;
    memset(&regs, 0, sizeof regs);
    const struct erma_pool_cfg cfg = {.reg = track_reg, .unreg = track_unreg, .idle_ns = IDLE};
    assert_int_equal(erma_pool_create(&cfg, &p), ERMA_OK);
    enum { SMALL = ERMA_POOL_CHUNK / 64 + 1, BIG = 4 }; /* 2 chunks of 64 B, 2 of 1 MiB */
    void **small = calloc(SMALL, sizeof *small), *big[BIG], *huge;
    for (int i = 0; i < SMALL; i++)
        assert_non_null(small[i] = erma_pool_alloc(p, 64));
    for (int i = 0; i < BIG; i++)
        assert_non_null(big[i] = erma_pool_alloc(p, 1 << 20));
    assert_non_null(huge = erma_pool_alloc(p, ERMA_POOL_MAX_BUF));
    assert_int_equal(regs.n, 5);
    assert_int_equal(erma_pool_mapped(p), 4 * ERMA_POOL_CHUNK + ERMA_POOL_MAX_BUF);
    assert_int_equal(erma_pool_trim(p, 0), 0); /* all in use */
    assert_int_equal(erma_pool_trim(p, 10 * IDLE), 0);
    void *keep = small[0];
    memset(keep, 0xab, 64);
    for (int i = 1; i < SMALL; i++)
        erma_pool_free(p, small[i], 64);
    for (int i = 0; i < BIG; i++)
        erma_pool_free(p, big[i], 1 << 20);
    erma_pool_free(p, huge, ERMA_POOL_MAX_BUF);
    assert_int_equal(erma_pool_live(p), 1);
    const uint64_t t0 = 20 * IDLE;
    assert_int_equal(erma_pool_trim(p, t0), 0); /* first seen empty */
    assert_int_equal(erma_pool_trim(p, t0 + IDLE - 1), 0);
    /* the 1 MiB chunks, the 16 MiB one and the 64 B chunk without keep */
    assert_int_equal(erma_pool_trim(p, t0 + IDLE), 3 * ERMA_POOL_CHUNK + ERMA_POOL_MAX_BUF);
    assert_int_equal(erma_pool_mapped(p), ERMA_POOL_CHUNK);
    assert_int_equal(regs.unregs, 4);
    for (int k = 0; k < 64; k++)
        assert_int_equal(((uint8_t *)keep)[k], 0xab);
    assert_int_equal(erma_pool_trim(p, t0 + 100 * IDLE), 0);
    /* a chunk used again between two trims starts its idle time again */
    void *b = erma_pool_alloc(p, 1 << 20);
    assert_non_null(b);
    erma_pool_free(p, b, 1 << 20);
    const uint64_t t1 = t0 + 200 * IDLE;
    assert_int_equal(erma_pool_trim(p, t1), 0);
    assert_non_null(b = erma_pool_alloc(p, 1 << 20));
    erma_pool_free(p, b, 1 << 20);
    assert_int_equal(erma_pool_trim(p, t1 + IDLE), 0); /* seen empty again: from here */
    assert_int_equal(erma_pool_trim(p, t1 + 2 * IDLE), ERMA_POOL_CHUNK);
    erma_pool_free(p, keep, 64);
    assert_int_equal(erma_pool_live(p), 0);
    erma_pool_destroy(p); /* unmaps, and deregisters, the last chunk */
    assert_int_equal(regs.unregs, regs.n);
    free(small);
}

/* Registered memory without a way to deregister it stays; so does every
 * chunk with idle_ns UINT64_MAX. A free of what the pool never handed out
 * changes nothing. */
static void test_pool_keeps(void **state)
{
    (void)state;
    const struct erma_pool_cfg cfgs[] = {{.reg = count_reg, .idle_ns = IDLE},
                                         {.idle_ns = UINT64_MAX}};
    for (size_t k = 0; k < sizeof cfgs / sizeof *cfgs; k++) {
        struct erma_pool *p;
        assert_int_equal(erma_pool_create(&cfgs[k], &p), ERMA_OK);
        void *b = erma_pool_alloc(p, 1000);
        assert_non_null(b);
        uint64_t local[8];
        erma_pool_free(p, local, 1000);
        erma_pool_free(p, (char *)b + 64, 1000);
        assert_int_equal(erma_pool_live(p), 1);
        erma_pool_free(p, b, 100); /* the size of another class: still b's */
        erma_pool_free(p, b, 1000); /* twice: its chunk is empty already */
        assert_int_equal(erma_pool_live(p), 0);
        assert_ptr_equal(erma_pool_alloc(p, 1000), b);
        erma_pool_free(p, b, 1000);
        for (uint64_t t = 0; t < 10; t++)
            assert_int_equal(erma_pool_trim(p, t * 10 * IDLE), 0);
        assert_int_equal(erma_pool_mapped(p), ERMA_POOL_CHUNK);
        erma_pool_destroy(p);
    }
}

/* A shared pool: threads allocate and free while another trims all along
 * (idle time 1 ns); no buffer is handed out twice or loses its bytes. */
enum { SHARE_THREADS = 3, SHARE_OPS = 100000, SHARE_HELD = 16, SHARE_TOUCH = 128 };

struct sharer {
    struct erma_pool *pool;
    int id, bad;
    atomic_int *running;
};

static void *share_work(void *arg)
{
    struct sharer *s = arg;
    struct erma_rand r;
    erma_rand_seed(&r, (uint64_t)s->id + 1);
    void *held[SHARE_HELD] = {0};
    size_t size[SHARE_HELD] = {0};
    for (int i = 0; i < SHARE_OPS; i++) {
        const int k = (int)erma_rand_below(&r, SHARE_HELD);
        const size_t touch = size[k] < SHARE_TOUCH ? size[k] : SHARE_TOUCH;
        if (held[k]) {
            for (size_t j = 0; j < touch; j++)
                s->bad += ((uint8_t *)held[k])[j] != (uint8_t)(s->id + k);
            erma_pool_free(s->pool, held[k], size[k]);
        }
        size[k] = (size_t)1 << erma_rand_below(&r, 22); /* 1 B .. 2 MiB */
        held[k] = erma_pool_alloc(s->pool, size[k]);
        s->bad += !held[k];
        if (held[k])
            memset(held[k], s->id + k, size[k] < SHARE_TOUCH ? size[k] : SHARE_TOUCH);
    }
    for (int k = 0; k < SHARE_HELD; k++)
        erma_pool_free(s->pool, held[k], size[k]);
    atomic_fetch_sub(s->running, 1);
    return NULL;
}

static void test_pool_shared(void **state)
{
    (void)state;
    struct erma_pool *p;
    const struct erma_pool_cfg cfg = {.idle_ns = 1};
    assert_int_equal(erma_pool_create(&cfg, &p), ERMA_OK);
    erma_pool_share(p);
    pthread_t t[SHARE_THREADS];
    struct sharer s[SHARE_THREADS];
    atomic_int running = SHARE_THREADS;
    for (int i = 0; i < SHARE_THREADS; i++) {
        s[i] = (struct sharer){p, i * SHARE_HELD, 0, &running};
        assert_int_equal(pthread_create(&t[i], NULL, share_work, &s[i]), 0);
    }
    size_t unmapped = 0;
    const uint64_t end = erma_mono_ns() + 30000000000ull;
    for (uint64_t now = 1; atomic_load(&running) > 0 && erma_mono_ns() < end; now++) {
        unmapped += erma_pool_trim(p, now);
        sched_yield();
    }
    for (int i = 0; i < SHARE_THREADS; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(s[i].bad, 0);
    }
    assert_int_equal(erma_pool_live(p), 0);
    assert_true(unmapped > 0);
    erma_pool_trim(p, UINT64_MAX - 1);
    erma_pool_trim(p, UINT64_MAX);
    assert_int_equal(erma_pool_mapped(p), 0);
    erma_pool_destroy(p);
}

/* ---- rings ---- */

static void test_ring_bounds(void **state)
{
    (void)state;
    struct erma_spsc s;
    struct erma_mpsc m;
    assert_int_equal(erma__spsc_init(&s, 0), ERMA_EINVAL);
    assert_int_equal(erma__spsc_init(&s, 5), ERMA_OK); /* rounded up to 8 */
    assert_int_equal(erma__mpsc_init(&m, 5), ERMA_OK);
    for (uintptr_t i = 1; i <= 8; i++) {
        assert_int_equal(erma__spsc_push(&s, (void *)i), ERMA_OK);
        assert_int_equal(erma__mpsc_push(&m, (void *)i), ERMA_OK);
    }
    assert_int_equal(erma__spsc_push(&s, (void *)9), ERMA_EAGAIN);
    assert_int_equal(erma__mpsc_push(&m, (void *)9), ERMA_EAGAIN);
    assert_int_equal(erma__spsc_count(&s), 8);
    for (uintptr_t i = 1; i <= 8; i++) {
        assert_ptr_equal(erma__spsc_pop(&s), (void *)i);
        assert_ptr_equal(erma__mpsc_pop(&m), (void *)i);
    }
    assert_null(erma__spsc_pop(&s));
    assert_null(erma__mpsc_pop(&m));
    erma__spsc_destroy(&s);
    erma__mpsc_destroy(&m);
}

#define ITEMS 1000000
#define PRODUCERS 4

struct producer {
    void *ring;
    int id;
    int mpsc;
};

static void *produce(void *arg)
{
    const struct producer *p = arg;
    for (uintptr_t i = 0; i < ITEMS / (p->mpsc ? PRODUCERS : 1); i++) {
        void *item = (void *)(((uintptr_t)p->id << 32) | (i + 1));
        while ((p->mpsc ? erma__mpsc_push(p->ring, item) : erma__spsc_push(p->ring, item)) !=
               ERMA_OK)
            sched_yield();
    }
    return NULL;
}

/* Every item arrives exactly once, each producer's in order. */
static void run_threads(int mpsc)
{
    struct erma_spsc s;
    struct erma_mpsc m;
    void *ring = mpsc ? (void *)&m : (void *)&s;
    assert_int_equal(mpsc ? erma__mpsc_init(&m, 1024) : erma__spsc_init(&s, 1024), ERMA_OK);
    const int n = mpsc ? PRODUCERS : 1;
    pthread_t t[PRODUCERS];
    struct producer pr[PRODUCERS];
    for (int i = 0; i < n; i++) {
        pr[i] = (struct producer){ring, i, mpsc};
        pthread_create(&t[i], NULL, produce, &pr[i]);
    }
    uintptr_t next[PRODUCERS] = {0};
    const uint64_t end = erma_mono_ns() + 20000000000ull;
    for (int got = 0; got < ITEMS && erma_mono_ns() < end;) {
        void *item = mpsc ? erma__mpsc_pop(&m) : erma__spsc_pop(&s);
        if (!item)
            continue;
        const uintptr_t v = (uintptr_t)item, id = v >> 32, seq = v & 0xffffffffu;
        assert_true(id < (uintptr_t)n);
        assert_int_equal(seq, next[id] + 1);
        next[id] = seq;
        got++;
    }
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(next[i], ITEMS / n);
    }
    assert_null(mpsc ? erma__mpsc_pop(&m) : erma__spsc_pop(&s));
    if (mpsc)
        erma__mpsc_destroy(&m);
    else
        erma__spsc_destroy(&s);
}

static void test_spsc_threads(void **state)
{
    (void)state;
    run_threads(0);
}

static void test_mpsc_threads(void **state)
{
    (void)state;
    run_threads(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clock_tracks_monotonic), cmocka_unit_test(test_clock_substitution),
        cmocka_unit_test(test_strerror),               cmocka_unit_test(test_log_level),
        cmocka_unit_test(test_rand),                   cmocka_unit_test(test_pool),
        cmocka_unit_test(test_pool_reg_failure),       cmocka_unit_test(test_pool_trim),
        cmocka_unit_test(test_pool_keeps),             cmocka_unit_test(test_pool_shared),
        cmocka_unit_test(test_ring_bounds),
        cmocka_unit_test(test_spsc_threads),           cmocka_unit_test(test_mpsc_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
