/*
 * 1RMA dual-window congestion control; the rules are documented in
 * erma/sdk/cc.h.
 *
 * Why erma_window_cfg_for() starts a window at the BDP and sets the remote
 * target at 1.25x the base RTT (figures from the fluid simulation in
 * tests/cc/cc_window_sim.c, C ops of 4 KB per base RTT at the bottleneck):
 * - With ai = 0.25 a window of 1 or more grows by ai per RTT (cwnd ops
 *   complete per RTT, each adding ai / cwnd), so a flow started at 1 op
 *   needs about 4 * (C - 1) + 1 RTTs to fill the path: 11, 30, 63, 127 RTTs
 *   for C = 4, 8, 16, 32. Started at the BDP (init_cwnd = C, paced at line
 *   rate by the window's own pacing) it fills it in 2 RTTs.
 * - A lone flow grows until its remote delay reaches the target, i.e. to
 *   C * target / base ops. With a target of 2x base it holds 2 BDPs, and a
 *   newcomer starting at 1 BDP takes 100-350 RTTs (C = 8..32) to come
 *   within 20% of its fair share: proportional decreases keep the 2:1
 *   ratio and only the equal additive increases close it. At 1.25x base
 *   the two windows are within 20% of each other's share 1 RTT after the
 *   join and the throughputs (counted over 4 RTTs) after 11-14 RTTs.
 */
#include "erma/sdk/cc.h"

#include <math.h>
#include <stdlib.h>

#include "erma/errors.h"

#define NONE UINT32_MAX

struct erma_window_remote {
    uint64_t dst;
    uint32_t next; /* hash chain */
    uint8_t dir;
    uint64_t last_use; /* cc->clock when last touched */
    struct erma_window w;
};

struct erma_window_cfg erma_window_cfg_for(double link_bps, uint64_t base_rtt_ns)
{
    if (base_rtt_ns == 0)
        base_rtt_ns = 10000;
    const double bdp_ops = link_bps * (double)base_rtt_ns / 1e9 / 8 / 4096;
    return (struct erma_window_cfg){
        .ai = 0.25,
        .beta = 0.8,
        .md = 0.5,
        .cut = 10,
        .min_cwnd = 1.0 / 64,
        .max_cwnd = 4 * bdp_ops > 256 ? ceil(4 * bdp_ops) : 256,
        .init_cwnd = bdp_ops > 1 ? bdp_ops : 1,
        .local_target_ns = 5000,
        .remote_target_ns = base_rtt_ns + base_rtt_ns / 4,
        .base_rtt_ns = base_rtt_ns,
        .op_bytes = 4096,
        .max_remotes = 256,
        .merged = false,
    };
}

static int cfg_check(const struct erma_window_cfg *c)
{
    if (!(c->min_cwnd > 0 && c->min_cwnd <= c->init_cwnd && c->init_cwnd <= c->max_cwnd) ||
        !(c->ai > 0) || !(c->beta > 0 && c->beta <= 1) || !(c->md > 0 && c->md <= 1) ||
        !(c->cut >= 1) || c->op_bytes == 0 || c->base_rtt_ns == 0 || c->max_remotes == 0 ||
        c->max_remotes > (1u << 20))
        return ERMA_EINVAL;
    return ERMA_OK;
}

static struct erma_window new_window(const struct erma_window_cfg *cfg)
{
    return (struct erma_window){.cwnd = cfg->init_cwnd, .srtt_ns = cfg->base_rtt_ns,
                                .min_delay_ns = UINT64_MAX};
}

int erma_window_init(struct erma_window_cc *cc, const struct erma_window_cfg *cfg)
{
    if (cfg_check(cfg) != ERMA_OK)
        return ERMA_EINVAL;
    uint32_t nbuckets = 2;
    while (nbuckets < 2 * cfg->max_remotes)
        nbuckets <<= 1;
    *cc = (struct erma_window_cc){.cfg = *cfg, .local = new_window(cfg), .nbuckets = nbuckets};
    cc->remotes = calloc(cfg->max_remotes, sizeof *cc->remotes);
    cc->buckets = malloc(nbuckets * sizeof *cc->buckets);
    if (!cc->remotes || !cc->buckets) {
        erma_window_destroy(cc);
        return ERMA_ENOMEM;
    }
    for (uint32_t i = 0; i < nbuckets; i++)
        cc->buckets[i] = NONE;
    return ERMA_OK;
}

void erma_window_destroy(struct erma_window_cc *cc)
{
    free(cc->remotes);
    free(cc->buckets);
    cc->remotes = NULL;
    cc->buckets = NULL;
    cc->used = 0;
}

/* ------------------------------------------------------- remote table */

static uint32_t bucket_of(const struct erma_window_cc *cc, uint64_t dst, uint8_t dir)
{
    uint64_t x = dst * 2 + dir;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (uint32_t)(x & (cc->nbuckets - 1));
}

static void unlink_remote(struct erma_window_cc *cc, uint32_t i)
{
    uint32_t *p = &cc->buckets[bucket_of(cc, cc->remotes[i].dst, cc->remotes[i].dir)];
    while (*p != i)
        p = &cc->remotes[*p].next;
    *p = cc->remotes[i].next;
}

/* The least recently used remote window with nothing in flight, or NONE. */
static uint32_t lru_idle(const struct erma_window_cc *cc)
{
    uint32_t best = NONE;
    for (uint32_t i = 0; i < cc->used; i++) {
        const struct erma_window_remote *r = &cc->remotes[i];
        if (r->w.inflight == 0 && (best == NONE || r->last_use < cc->remotes[best].last_use))
            best = i;
    }
    return best;
}

/* Finds (dst, dir); creates it when create is set. NULL when absent or
 * when the table is full of busy windows. */
static struct erma_window_remote *lookup(struct erma_window_cc *cc, uint64_t dst,
                                         enum erma_window_dir dir, bool create)
{
    const uint8_t d = (uint8_t)dir;
    const uint32_t b = bucket_of(cc, dst, d);
    for (uint32_t i = cc->buckets[b]; i != NONE; i = cc->remotes[i].next) {
        struct erma_window_remote *r = &cc->remotes[i];
        if (r->dst == dst && r->dir == d) {
            r->last_use = ++cc->clock;
            return r;
        }
    }
    if (!create)
        return NULL;
    uint32_t i;
    if (cc->used < cc->cfg.max_remotes) {
        i = cc->used++;
    } else {
        i = lru_idle(cc);
        if (i == NONE)
            return NULL;
        unlink_remote(cc, i);
        cc->evictions++;
    }
    struct erma_window_remote *r = &cc->remotes[i];
    *r = (struct erma_window_remote){
        .dst = dst, .dir = d, .next = cc->buckets[b], .last_use = ++cc->clock,
        .w = new_window(&cc->cfg),
    };
    cc->buckets[b] = i;
    return r;
}

struct erma_window *erma_window_find(struct erma_window_cc *cc, uint64_t dst,
                                     enum erma_window_dir dir)
{
    struct erma_window_remote *r = lookup(cc, dst, dir, false);
    return r ? &r->w : NULL;
}

/* ------------------------------------------------------ one window */

/* The round trip w paces its ops by: srtt less its local part (cc.h). */
static uint64_t pace_rtt(const struct erma_window *w)
{
    return w->local_ns < w->srtt_ns ? w->srtt_ns - w->local_ns : w->srtt_ns;
}

/* Earliest issue time the window allows, UINT64_MAX while it is full. */
static uint64_t window_gate(const struct erma_window *w, const struct erma_window_cfg *cfg,
                            uint32_t bytes, uint64_t now)
{
    const double allowed = w->cwnd < 1 ? 1 : w->cwnd;
    if (w->inflight >= allowed)
        return UINT64_MAX;
    if (w->issued == 0)
        return now;
    const double rate_bps = cfg->op_bytes * 8e9 * w->cwnd / (double)pace_rtt(w);
    return erma_pacer_next_tx(rate_bps, bytes, w->last_issue_ns, now);
}

/* The time an op of `bytes` is due by w's pacing alone. */
static double pace_due(const struct erma_window *w, const struct erma_window_cfg *cfg,
                       uint32_t bytes)
{
    return (double)w->last_issue_ns + (double)bytes * (double)pace_rtt(w) / (cfg->op_bytes * w->cwnd);
}

/* holder: the other window (NULL: none); an op it held past w's pacing
 * time keeps up to half a gap of w's schedule (cc.h). */
static void window_issue(struct erma_window *w, const struct erma_window_cfg *cfg,
                         uint32_t bytes, uint64_t now, const struct erma_window *holder)
{
    uint64_t from = now;
    if (holder && w->issued) {
        const double due = pace_due(w, cfg, bytes), gap = due - (double)w->last_issue_ns;
        const double late = (double)now - due;
        if (late > 0 && window_gate(holder, cfg, bytes, (uint64_t)due) > (uint64_t)due)
            from = now - (uint64_t)(late < gap / 2 ? late : gap / 2);
    }
    w->inflight++;
    w->issued++;
    w->last_issue_ns = from;
}

/* Algorithm 1: a failure cuts only when the window has not decreased
 * (cut or delay-based) within the last srtt, so a burst of k failures from
 * one congestion event divides it by cut once, not cut^k. */
static void window_cut(struct erma_window *w, const struct erma_window_cfg *cfg, uint64_t now)
{
    if (now < w->next_decrease_ns) {
        w->cuts_skipped++;
        return;
    }
    w->cwnd /= cfg->cut;
    if (w->cwnd < cfg->min_cwnd)
        w->cwnd = cfg->min_cwnd;
    w->cuts++;
    w->next_decrease_ns = now + w->srtt_ns;
}

/* A successful op's delay signal for one window. */
static void window_sample(struct erma_window *w, const struct erma_window_cfg *cfg,
                          uint64_t delay, uint64_t target, uint64_t rtt, uint64_t now)
{
    w->srtt_ns = (uint64_t)((int64_t)w->srtt_ns + ((int64_t)rtt - (int64_t)w->srtt_ns) / 8);
    if (w->srtt_ns == 0)
        w->srtt_ns = 1;
    if (delay <= target) {
        w->cwnd += w->cwnd < 1 ? cfg->ai : cfg->ai / w->cwnd;
        if (w->cwnd > cfg->max_cwnd)
            w->cwnd = cfg->max_cwnd;
    } else if (now >= w->next_decrease_ns) {
        double f = 1 - cfg->beta * (double)(delay - target) / (double)delay;
        if (f < cfg->md)
            f = cfg->md;
        w->cwnd *= f;
        if (w->cwnd < cfg->min_cwnd)
            w->cwnd = cfg->min_cwnd;
        w->decreases++;
        w->next_decrease_ns = now + w->srtt_ns;
    }
}

/* A remote window's delay sample, for the shared delay. */
static void excess_sample(struct erma_window *w, uint64_t remote_delay, uint64_t now)
{
    if (remote_delay < w->min_delay_ns)
        w->min_delay_ns = remote_delay;
    w->excess_ns = (7 * w->excess_ns + (remote_delay - w->min_delay_ns)) / 8;
    w->sampled_ns = now;
}

/* The shared delay of dir (cc.h), recomputed at most once per local srtt:
 * the least excess among its windows sampled lately, when two or more. */
static uint64_t shared_delay(struct erma_window_cc *cc, uint8_t dir, uint64_t now)
{
    if (now < cc->shared_next_ns[dir])
        return cc->shared_ns[dir];
    const uint64_t recent = 2 * cc->local.srtt_ns;
    uint64_t least = UINT64_MAX;
    uint32_t n = 0;
    for (uint32_t i = 0; i < cc->used; i++) {
        const struct erma_window_remote *r = &cc->remotes[i];
        if (r->dir != dir || r->w.min_delay_ns == UINT64_MAX || now - r->w.sampled_ns > recent)
            continue;
        n++;
        least = r->w.excess_ns < least ? r->w.excess_ns : least;
    }
    cc->shared_ns[dir] = n >= 2 ? least : 0;
    cc->shared_next_ns[dir] = now + cc->local.srtt_ns;
    return cc->shared_ns[dir];
}

/* ------------------------------------------------------------ API */

int erma_window_next_issue(struct erma_window_cc *cc, uint64_t dst,
                           enum erma_window_dir dir, uint32_t bytes,
                           uint64_t now_ns, uint64_t *at_ns)
{
    struct erma_window_remote *r = lookup(cc, dst, dir, true);
    if (!r)
        return ERMA_ENOSLOTS;
    uint64_t at = window_gate(&r->w, &cc->cfg, bytes, now_ns);
    if (!cc->cfg.merged) {
        const uint64_t local = window_gate(&cc->local, &cc->cfg, bytes, now_ns);
        if (local > at)
            at = local;
    }
    *at_ns = at;
    return ERMA_OK;
}

int erma_window_on_issue(struct erma_window_cc *cc, uint64_t dst,
                         enum erma_window_dir dir, uint32_t bytes, uint64_t now_ns)
{
    struct erma_window_remote *r = lookup(cc, dst, dir, true);
    if (!r)
        return ERMA_ENOSLOTS;
    window_issue(&r->w, &cc->cfg, bytes, now_ns, cc->cfg.merged ? NULL : &cc->local);
    if (!cc->cfg.merged)
        window_issue(&cc->local, &cc->cfg, bytes, now_ns, NULL);
    return ERMA_OK;
}

int erma_window_on_complete(struct erma_window_cc *cc, uint64_t dst,
                            enum erma_window_dir dir, int status,
                            uint64_t issue_delay_ns, uint64_t total_delay_ns,
                            uint64_t now_ns)
{
    struct erma_window_remote *r = lookup(cc, dst, dir, false);
    if (!r)
        return ERMA_ENOENT;
    const struct erma_window_cfg *cfg = &cc->cfg;
    const bool merged = cfg->merged;
    struct erma_window *remote = &r->w, *local = merged ? remote : &cc->local;
    if (remote->inflight)
        remote->inflight--;
    if (!merged && local->inflight)
        local->inflight--;

    if (status == ERMA_OK) {
        const uint64_t total = total_delay_ns;
        const uint64_t issue = issue_delay_ns < total ? issue_delay_ns : total;
        if (merged) {
            window_sample(remote, cfg, total, cfg->local_target_ns + cfg->remote_target_ns,
                          total, now_ns);
        } else {
            const uint64_t rd = total - issue;
            excess_sample(remote, rd, now_ns);
            uint64_t shared = shared_delay(cc, r->dir, now_ns);
            if (shared > rd - remote->min_delay_ns)
                shared = rd - remote->min_delay_ns;
            remote->local_ns = (7 * remote->local_ns + issue + shared) / 8;
            window_sample(local, cfg, issue + shared, cfg->local_target_ns, total, now_ns);
            window_sample(remote, cfg, rd - shared, cfg->remote_target_ns, total, now_ns);
        }
    } else if (status == ERMA_EDISPATCH) {
        window_cut(local, cfg, now_ns);
    } else if (status == ERMA_ENACK || status == ERMA_ETIMEDOUT) {
        window_cut(remote, cfg, now_ns);
    }
    return ERMA_OK;
}

double erma_window_limit(struct erma_window_cc *cc, uint64_t dst, enum erma_window_dir dir)
{
    const struct erma_window *r = erma_window_find(cc, dst, dir);
    const double remote = r ? r->cwnd : cc->cfg.init_cwnd;
    if (cc->cfg.merged || remote < cc->local.cwnd)
        return remote;
    return cc->local.cwnd;
}
