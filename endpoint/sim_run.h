/*
 * endpoint/sim_run.h - the sim driver: steps endpoints round-robin on the
 * sim fabric and moves virtual time to the next packet or timer event when
 * a pass found no work. erma_sim_run() and the fuzz harnesses
 * (tests/fuzz/fuzz.h) both run on it. Internal to the library.
 */
#ifndef ERMA_ENDPOINT_SIM_RUN_H
#define ERMA_ENDPOINT_SIM_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include "erma/endpoint.h"
#include "erma/sim.h"

struct erma__sim_run {
    /* How a pass steps one endpoint and reads its next timer. The caller
     * passes them (erma__sim_run_init): endpoint.c's erma_sim_run() calls
     * the driver, so the driver must not call endpoint.c by name (no
     * circle between the files of endpoint/). */
    int (*step)(struct erma_endpoint *ep);
    uint64_t (*next_timer)(const struct erma_endpoint *ep);
    /* Work after each pass's endpoints, counted as the pass's (may be NULL). */
    int (*pass)(void *ctx);
    /* Asked before the first pass and after every pass; true ends the run
     * with ERMA_OK (may be NULL). */
    bool (*done)(void *ctx);
    void *ctx;
    /* Limits, 0 for none: passes (counted across runs on the same struct)
     * and busy passes in a row at one virtual instant. */
    unsigned max_passes, max_busy;
    unsigned passes, busy;
};

/* A run stepping with erma_endpoint_run_once(), no hooks and no limits. */
static inline void erma__sim_run_init(struct erma__sim_run *r)
{
    *r = (struct erma__sim_run){
        .step = erma_endpoint_run_once,
        .next_timer = erma_endpoint_next_timer,
    };
}

/* Steps eps[0..n) for ns of virtual time, or until r->done(r->ctx).
 * Returns ERMA_OK when done, ERMA_ETIMEDOUT at the end of the time (time
 * then stands at the end), ERMA_EAGAIN when a limit is hit: r->passes >=
 * r->max_passes or r->busy >= r->max_busy says which. */
int erma__sim_drive(struct erma_sim *sim, struct erma_endpoint **eps, unsigned n, uint64_t ns,
                    struct erma__sim_run *r);

#endif
