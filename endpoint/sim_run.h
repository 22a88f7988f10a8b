/*
 * endpoint/sim_run.h - the sim driver: steps endpoints round-robin on the
 * sim fabric and moves virtual time to the next packet or timer event when
 * a pass found no work. erma_sim_run() (sim_run.c) and the fuzz harnesses
 * (tests/fuzz/fuzz.h) both run on it. Internal to the library.
 */
#ifndef ERMA_ENDPOINT_SIM_RUN_H
#define ERMA_ENDPOINT_SIM_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include "erma/endpoint.h"
#include "erma/sim.h"

/* One run's hooks, limits and counters; zero-initialised it has none. */
struct erma__sim_run {
    /* Work after each pass's endpoints, counted as the pass's (may be NULL). */
    int (*pass)(void *ctx);
    /* Asked before the first pass and after every pass; true ends the run
     * with ERMA_OK (may be NULL). */
    bool (*done)(void *ctx);
    void *ctx;
    /* Limits, 0 for none: passes (counted across runs on the same struct,
     * only while max_passes is set) and busy passes in a row at one
     * virtual instant (counted only while max_busy is set). */
    unsigned max_passes, max_busy;
    unsigned passes, busy;
};

/* Steps eps[0..n) for ns of virtual time, or until r->done(r->ctx).
 * Returns ERMA_OK when done, ERMA_ETIMEDOUT at the end of the time (time
 * then stands at the end), ERMA_EAGAIN when a limit is hit: r->passes >=
 * r->max_passes or r->busy >= r->max_busy says which. */
int erma__sim_drive(struct erma_sim *sim, struct erma_endpoint **eps, unsigned n, uint64_t ns,
                    struct erma__sim_run *r);

#endif
