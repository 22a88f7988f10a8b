/* The kvcs client's tries (client.h): the list of those not freed, the
 * round trips of answered ones per server and method, and when a slow one
 * is hedged. */
#include <stdlib.h>
#include <string.h>

#include "kvcs/client.h"

#define HEDGE_MIN_NS 100000ull    /* no hedge sooner than this after a try */
#define HEDGE_FIRST_NS 1000000ull /* before a round trip was measured */
#define HEDGE_COST 20             /* GETs that earn one hedge: at most 5% more tries */
#define HEDGE_BURST 64            /* hedges that a quiet spell saves up */

/* Freed tries wait in c->spare (linked by next) for the next op: no
 * allocation per try once the client has run its peak of tries. */
struct try *kvcs__try_new(struct kvcs_client *c)
{
    struct try *t = c->spare;
    if (t) {
        c->spare = t->next;
        memset(t, 0, sizeof *t);
    } else if (!(t = calloc(1, sizeof *t))) {
        return NULL;
    }
    t->c = c;
    t->next = c->tries;
    if (c->tries)
        c->tries->prev = t;
    c->tries = t;
    return t;
}

void kvcs__try_free(struct kvcs_client *c, struct try *t)
{
    if (t->prev)
        t->prev->next = t->next;
    else
        c->tries = t->next;
    if (t->next)
        t->next->prev = t->prev;
    t->next = c->spare;
    c->spare = t;
}

void kvcs__free_tries(struct kvcs_client *c)
{
    while (c->tries)
        kvcs__try_free(c, c->tries);
    for (struct try *t; (t = c->spare);) {
        c->spare = t->next;
        free(t);
    }
}

/* The k-th largest of v[0..m), k <= 4: one pass keeping the top k (most
 * values are below all of them: one comparison each). */
static uint32_t kth_largest(const uint32_t *v, uint32_t m, uint32_t k)
{
    uint32_t top[4] = {0}; /* descending */
    for (uint32_t i = 0; i < m; i++) {
        uint32_t x = v[i];
        if (x <= top[k - 1])
            continue;
        for (uint32_t j = 0; j < k; j++)
            if (x > top[j]) {
                const uint32_t y = top[j];
                top[j] = x;
                x = y;
            }
    }
    return top[k - 1];
}

void kvcs__rtt_sample(struct rtt *e, uint64_t ns)
{
    e->ring[e->n++ % RTT_RING] = ns < UINT32_MAX ? (uint32_t)ns : UINT32_MAX;
    if (e->n % RTT_EVERY)
        return;
    const uint32_t m = e->n < RTT_RING ? e->n : RTT_RING;
    e->p95 = kth_largest(e->ring, m, m - ((m * 95 + 99) / 100 - 1)); /* 4th of 64 */
}

/* How long a try at s may take before the GET may ask the next replica
 * too (if s is silent as long: check_tries): the 95th percentile of the
 * method's answered tries there lately (Dean and Barroso's hedged
 * requests), at least HEDGE_MIN_NS, at most half the attempt timeout. */
uint64_t kvcs__hedge_ns(const struct kvcs_client *c, const struct server *s, bool read)
{
    const struct rtt *e = &s->rtt[read];
    uint64_t ns = e->p95 ? e->p95 : HEDGE_FIRST_NS;
    if (ns < HEDGE_MIN_NS)
        ns = HEDGE_MIN_NS;
    return ns < c->cfg.attempt_timeout_ns / 2 ? ns : c->cfg.attempt_timeout_ns / 2;
}

void kvcs__hedge_earn(struct kvcs_client *c)
{
    if (c->hedge_credit < HEDGE_COST * HEDGE_BURST)
        c->hedge_credit++;
}

/* A try's server has answered nothing for a hedge period: it stalls (or
 * died), rather than being busy with others' requests, where a hedge
 * would only add load. Such hedges are budgeted to one per HEDGE_COST
 * GETs, as Dean and Barroso's hedging at the 95th percentile expects:
 * where the replicas share a saturated core, every one of them falls
 * silent that long now and then, and unbudgeted hedges grew to 12% more
 * tries, on the busiest core. A replica silent for hedge_stall_ns has
 * stalled beyond doubt (descheduled, stopped or dead): hedged always. */
enum hedge_kind kvcs__hedge_kind(const struct kvcs_client *c, const struct try *t,
                                 uint64_t now)
{
    const uint64_t heard = c->srv[t->server].heard_ns;
    const uint64_t silent = now > heard ? now - heard : 0;
    if (silent < t->hedge_at - t->start)
        return HEDGE_NOT;
    if (silent >= c->cfg.hedge_stall_ns)
        return HEDGE_STALL;
    return c->hedge_credit >= HEDGE_COST ? HEDGE_BUDGET : HEDGE_NOT;
}

void kvcs__hedge_spend(struct kvcs_client *c)
{
    c->hedge_credit -= HEDGE_COST;
}
