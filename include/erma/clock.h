/*
 * erma/clock.h - the monotonic clock every layer reads, in nanoseconds.
 *
 * For applications (included by erma/erma.h) and every layer.
 *
 * erma_now_ns() reads the calibrated TSC where the CPU reports an invariant
 * TSC and CLOCK_MONOTONIC otherwise. The source sits behind a function
 * pointer so that the sim transport can substitute its virtual time
 * (erma_clock_set_source()).
 */
#ifndef ERMA_CLOCK_H
#define ERMA_CLOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "erma/api.h"

ERMA_BEGIN_DECLS

typedef uint64_t (*erma_clock_fn)(void *ctx);

struct erma_clock_source {
    erma_clock_fn fn;
    void *ctx;
};
/* The source erma_now_ns() reads; set it with erma_clock_set_source(). */
extern struct erma_clock_source erma_clock_source;

/* Returns the time now in ns, from the current source: the real clock
 * (TSC or CLOCK_MONOTONIC), or the one erma_clock_set_source() installed.
 * The first read calibrates the TSC and then installs the real clock in
 * fn, while other threads may read fn: an acquire load (a plain move on
 * x86) that pairs with that release store. */
static inline uint64_t erma_now_ns(void)
{
    const erma_clock_fn fn = __atomic_load_n(&erma_clock_source.fn, __ATOMIC_ACQUIRE);
    return fn(erma_clock_source.ctx);
}

/* Makes every later erma_now_ns() return fn(ctx) in this process;
 * erma_clock_set_source(NULL, NULL) restores the real clock. The source is
 * process-wide; change it only while no other thread reads the clock.
 * Returns nothing. */
void erma_clock_set_source(erma_clock_fn fn, void *ctx);

/* Returns true when the real clock is the TSC (invariant TSC found and
 * calibrated), false when it is CLOCK_MONOTONIC. */
bool erma_clock_uses_tsc(void);

/* Returns CLOCK_MONOTONIC in ns, whatever the source. */
uint64_t erma_mono_ns(void);

ERMA_END_DECLS

#endif
