/* common/: clock, errors, log, PRNG, pool, rings. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <pthread.h>
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
#include "erma/pool.h"
#include "erma/rand.h"
#include "common/ring.h"

/* ---- clock ---- */

static void test_clock_tracks_monotonic(void **state)
{
    (void)state;
    const uint64_t c0 = erma_now_ns(), m0 = erma_mono_ns();
    uint64_t prev = c0;
    for (int i = 0; i < 100000; i++) { /* never goes back */
        const uint64_t t = erma_now_ns();
        assert_true(t >= prev);
        prev = t;
    }
    nanosleep(&(struct timespec){0, 50000000}, NULL);
    const uint64_t dc = erma_now_ns() - c0, dm = erma_mono_ns() - m0;
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

/* ---- rings ---- */

static void test_ring_bounds(void **state)
{
    (void)state;
    struct erma_spsc s;
    struct erma_mpsc m;
    assert_int_equal(erma_spsc_init(&s, 0), ERMA_EINVAL);
    assert_int_equal(erma_spsc_init(&s, 5), ERMA_OK); /* rounded up to 8 */
    assert_int_equal(erma_mpsc_init(&m, 5), ERMA_OK);
    for (uintptr_t i = 1; i <= 8; i++) {
        assert_int_equal(erma_spsc_push(&s, (void *)i), ERMA_OK);
        assert_int_equal(erma_mpsc_push(&m, (void *)i), ERMA_OK);
    }
    assert_int_equal(erma_spsc_push(&s, (void *)9), ERMA_EAGAIN);
    assert_int_equal(erma_mpsc_push(&m, (void *)9), ERMA_EAGAIN);
    assert_int_equal(erma_spsc_count(&s), 8);
    for (uintptr_t i = 1; i <= 8; i++) {
        assert_ptr_equal(erma_spsc_pop(&s), (void *)i);
        assert_ptr_equal(erma_mpsc_pop(&m), (void *)i);
    }
    assert_null(erma_spsc_pop(&s));
    assert_null(erma_mpsc_pop(&m));
    erma_spsc_destroy(&s);
    erma_mpsc_destroy(&m);
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
        while ((p->mpsc ? erma_mpsc_push(p->ring, item) : erma_spsc_push(p->ring, item)) != ERMA_OK)
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
    assert_int_equal(mpsc ? erma_mpsc_init(&m, 1024) : erma_spsc_init(&s, 1024), ERMA_OK);
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
        void *item = mpsc ? erma_mpsc_pop(&m) : erma_spsc_pop(&s);
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
    assert_null(mpsc ? erma_mpsc_pop(&m) : erma_spsc_pop(&s));
    if (mpsc)
        erma_mpsc_destroy(&m);
    else
        erma_spsc_destroy(&s);
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
        cmocka_unit_test(test_pool_reg_failure),       cmocka_unit_test(test_ring_bounds),
        cmocka_unit_test(test_spsc_threads),           cmocka_unit_test(test_mpsc_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
