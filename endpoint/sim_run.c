/* The sim driver (sim_run.h) and erma_sim_run() on it. */
#include "sim_run.h"

#include "erma/errors.h"

/* The earliest packet or timer event, at least 1 ns after now. */
static uint64_t next_event(const struct erma_sim *sim, struct erma_endpoint **eps, unsigned n)
{
    uint64_t t = erma_sim_next_event(sim);
    for (unsigned i = 0; i < n; i++) {
        const uint64_t timer = erma_endpoint_next_timer(eps[i]);
        t = timer < t ? timer : t;
    }
    return t <= erma_sim_now(sim) ? erma_sim_now(sim) + 1 : t;
}

static bool is_done(const struct erma__sim_run *r)
{
    return r->done && r->done(r->ctx);
}

int erma__sim_drive(struct erma_sim *sim, struct erma_endpoint **eps, unsigned n, uint64_t ns,
                    struct erma__sim_run *r)
{
    const uint64_t end = erma_sim_now(sim) + ns;
    if (is_done(r))
        return ERMA_OK;
    r->busy = 0;
    for (;;) {
        if (r->max_passes && ++r->passes >= r->max_passes)
            return ERMA_EAGAIN;
        int work = 0;
        for (unsigned i = 0; i < n; i++)
            work += erma_endpoint_run_once(eps[i]);
        if (r->pass)
            work += r->pass(r->ctx);
        if (is_done(r))
            return ERMA_OK; /* before time moves on: a completion need not count as work */
        if (work) {
            if (r->max_busy && ++r->busy >= r->max_busy)
                return ERMA_EAGAIN;
            continue;
        }
        const uint64_t t = next_event(sim, eps, n);
        if (t > end) {
            erma_sim_advance_to(sim, end);
            return is_done(r) ? ERMA_OK : ERMA_ETIMEDOUT;
        }
        erma_sim_advance_to(sim, t);
        r->busy = 0;
    }
}

int erma_sim_run(struct erma_sim *sim, struct erma_endpoint **eps, unsigned n,
                 uint64_t duration_ns, bool (*done)(void *ctx), void *ctx)
{
    erma_sim_use_clock(sim);
    struct erma__sim_run r = {.done = done, .ctx = ctx};
    return erma__sim_drive(sim, eps, n, duration_ns, &r);
}
