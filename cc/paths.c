/* cc/paths.c - virtual paths: which path the next packet takes, per-path
 * delay and loss, pruning and probing (erma/sdk/cc.h, VIRTUAL PATHS). */
#include "erma/sdk/cc.h"

#include <string.h>

void erma_paths_init(struct erma_paths *ps, unsigned n)
{
    memset(ps, 0, sizeof *ps);
    ps->n = (uint8_t)(n < 1 ? 1 : n > ERMA_MAX_PATHS ? ERMA_MAX_PATHS : n);
    ps->clock = -1;
    for (unsigned p = 0; ps->n > 1 && p < ps->n; p++)
        ps->p[p].probe = ERMA_PROBE_READY; /* one packet each until its reply */
}

static bool in_use(const struct erma_path *v, uint64_t now)
{
    return !v->pruned_until || now >= v->pruned_until;
}

uint8_t erma_paths_pick(struct erma_paths *ps, uint64_t now)
{
    if (ps->n <= 1)
        return 0;
    int best = -1;
    for (unsigned k = 0; k < ps->n; k++) {
        const uint8_t p = (uint8_t)((ps->rr + k) % ps->n);
        struct erma_path *v = &ps->p[p];
        if (v->pruned_until && now >= v->pruned_until) /* probe it, with a clean record */
            *v = (struct erma_path){.prunes = v->prunes, .probe = ERMA_PROBE_READY,
                                    .inflight = v->inflight};
        if (v->pruned_until || v->probe == ERMA_PROBE_OUT)
            continue;
        if (best < 0 || v->inflight < ps->p[best].inflight ||
            (v->inflight == ps->p[best].inflight && p == ps->clock))
            best = p;
    }
    ps->clock = -1;
    for (unsigned p = 0; best < 0 && p < ps->n; p++) /* every path waits for its probe */
        if (!ps->p[p].pruned_until && (best < 0 || ps->p[p].inflight < ps->p[best].inflight))
            best = (int)p;
    if (best < 0)
        return 0; /* (never: the last path in use is never pruned) */
    struct erma_path *v = &ps->p[best];
    ps->rr = (uint8_t)(best + 1);
    v->probe = v->probe == ERMA_PROBE_READY ? ERMA_PROBE_OUT : ERMA_PROBE_NONE;
    v->inflight++;
    return (uint8_t)best;
}

bool erma_paths_free(const struct erma_paths *ps, uint64_t now)
{
    if (ps->n <= 1)
        return true;
    for (unsigned p = 0; p < ps->n; p++)
        if (in_use(&ps->p[p], now) && ps->p[p].probe != ERMA_PROBE_OUT)
            return true;
    return false;
}

void erma_paths_done(struct erma_paths *ps, uint8_t p)
{
    struct erma_path *v = &ps->p[p < ps->n ? p : 0];
    v->inflight -= v->inflight > 0;
    v->probe = ERMA_PROBE_NONE;
}

/* Prunes p when its loss or delay stands out against the other paths in
 * use, or its reply came `late` packets behind the newest; the last path
 * in use stays. */
static bool judge(struct erma_paths *ps, uint8_t p, uint32_t late, uint64_t now, uint64_t rest_ns)
{
    struct erma_path *v = &ps->p[p];
    uint32_t loss = 0, rtt = UINT32_MAX, others = 0;
    for (unsigned k = 0; k < ps->n; k++) {
        const struct erma_path *o = &ps->p[k];
        if (k == p || o->pruned_until)
            continue;
        others++;
        loss += o->loss;
        rtt = o->srtt_ns && o->srtt_ns < rtt ? o->srtt_ns : rtt;
    }
    if (!others || v->pruned_until)
        return false;
    const bool lossy = v->loss > 2 * loss / others + ERMA_PATH_PRUNE_LOSS;
    const bool slow = rtt != UINT32_MAX && v->srtt_ns > 16 * (uint64_t)rtt &&
                      v->srtt_ns > (uint64_t)rtt + 16ull * ps->min_rtt_ns;
    if (!lossy && !slow && late <= ERMA_PATH_PRUNE_LATE)
        return false;
    v->pruned_until = now + (rest_ns << v->prunes); /* out for longer each time */
    v->prunes += v->prunes < ERMA_PATH_MAX_PRUNES;
    return true;
}

bool erma_paths_sample(struct erma_paths *ps, uint8_t p, uint64_t rtt_ns, uint32_t late,
                       uint64_t now, uint64_t rest_ns)
{
    if (p >= ps->n)
        return false;
    struct erma_path *v = &ps->p[p];
    const uint32_t r = rtt_ns < UINT32_MAX ? (uint32_t)rtt_ns : UINT32_MAX;
    if (r && (r < ps->min_rtt_ns || !ps->min_rtt_ns))
        ps->min_rtt_ns = r;
    v->srtt_ns = v->srtt_ns ? v->srtt_ns - v->srtt_ns / 8 + r / 8 : r;
    v->loss -= v->loss / ERMA_PATH_LOSS_AVG;
    v->probe = ERMA_PROBE_NONE;
    return judge(ps, p, late, now, rest_ns);
}

bool erma_paths_lost(struct erma_paths *ps, uint8_t p, uint64_t now, uint64_t rest_ns)
{
    if (p >= ps->n)
        return false;
    struct erma_path *v = &ps->p[p];
    erma_paths_done(ps, p);
    v->loss += (uint16_t)((UINT16_MAX - v->loss) / ERMA_PATH_LOSS_AVG);
    return judge(ps, p, 0, now, rest_ns);
}
