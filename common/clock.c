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

static void calibrate(void)
{
    if (!tsc_invariant())
        return;
    const uint64_t ns0 = erma_mono_ns(), tsc0 = __rdtsc();
    uint64_t ns1;
    do
        ns1 = erma_mono_ns();
    while (ns1 - ns0 < 5000000);
    const uint64_t tsc1 = __rdtsc();
    if (tsc1 <= tsc0)
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
