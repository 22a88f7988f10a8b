#include "erma/clock.h"

#include <pthread.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <x86intrin.h>
#define HAVE_TSC 1
#endif

uint64_t erma_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ns = base_ns + ((tsc - base_tsc) * mult) >> 32 */
static struct {
    uint64_t base_tsc, base_ns, mult;
    bool use_tsc;
} cal;

static pthread_once_t cal_once = PTHREAD_ONCE_INIT;

#ifdef HAVE_TSC
static bool tsc_invariant(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u)
        return false;
    __get_cpuid(0x80000007u, &a, &b, &c, &d);
    return (d >> 8) & 1;
}

/* The TSC and CLOCK_MONOTONIC at one instant: a TSC reading between two
 * monotonic ones under 10 us apart. A thread preempted between two
 * readings (beside CPU hogs) would skew the rate by the time it was away,
 * for the life of the process. */
static bool tsc_at(uint64_t *ns, uint64_t *tsc)
{
    for (int i = 0; i < 1000; i++) {
        const uint64_t a = erma_mono_ns(), t = __rdtsc(), b = erma_mono_ns();
        if (b - a < 10000) {
            *ns = a + (b - a) / 2;
            *tsc = t;
            return true;
        }
    }
    return false;
}

static void calibrate(void)
{
    uint64_t ns0, tsc0, ns1, tsc1;
    if (!tsc_invariant() || !tsc_at(&ns0, &tsc0))
        return;
    while (erma_mono_ns() - ns0 < 5000000)
        ;
    if (!tsc_at(&ns1, &tsc1) || tsc1 <= tsc0)
        return;
    cal.mult = (uint64_t)(((unsigned __int128)(ns1 - ns0) << 32) / (tsc1 - tsc0));
    cal.base_tsc = tsc1;
    cal.base_ns = ns1;
    cal.use_tsc = true;
}
#else
static void calibrate(void) {}
#endif

static uint64_t real_clock(void *ctx)
{
    (void)ctx;
#ifdef HAVE_TSC
    if (cal.use_tsc) {
        const uint64_t d = __rdtsc() - cal.base_tsc;
        return cal.base_ns + (uint64_t)(((unsigned __int128)d * cal.mult) >> 32);
    }
#endif
    return erma_mono_ns();
}

static uint64_t first_read(void *ctx)
{
    pthread_once(&cal_once, calibrate);
    __atomic_store_n(&erma_clock_source.fn, real_clock, __ATOMIC_RELEASE); /* cal published */
    return real_clock(ctx);
}

struct erma_clock_source erma_clock_source = {first_read, NULL};

void erma_clock_set_source(erma_clock_fn fn, void *ctx)
{
    erma_clock_source.ctx = ctx;
    __atomic_store_n(&erma_clock_source.fn, fn ? fn : first_read, __ATOMIC_RELEASE);
}

bool erma_clock_uses_tsc(void)
{
    pthread_once(&cal_once, calibrate);
    return cal.use_tsc;
}
