/* Timely rate control; the algorithm and its parameters are in erma/sdk/cc.h. */
#include "erma/sdk/cc.h"

#include "erma/errors.h"

struct erma_timely_cfg erma_timely_cfg_real(void)
{
    return (struct erma_timely_cfg){
        .link_bps = 25e9,
        .floor_bps = 15e6 * 8,
        .step_bps = 5e6 * 8,
        .t_low_ns = 50000,
        .t_high_ns = 1000000,
        .min_rtt_ns = 2000,
        .alpha = 0.46,
        .beta = 0.26,
        .hai_n = 5,
        .bypass = true,
    };
}

struct erma_timely_cfg erma_timely_cfg_for(double link_bps, uint64_t base_rtt_ns)
{
    struct erma_timely_cfg cfg = erma_timely_cfg_real();
    if (base_rtt_ns == 0)
        base_rtt_ns = 1000;
    cfg.link_bps = link_bps;
    cfg.floor_bps = link_bps / 1000;
    cfg.step_bps = link_bps / 1000;
    cfg.t_low_ns = 5 * base_rtt_ns;
    cfg.t_high_ns = 25 * base_rtt_ns;
    cfg.min_rtt_ns = base_rtt_ns;
    return cfg;
}

int erma_timely_cfg_check(const struct erma_timely_cfg *cfg)
{
    /* Written so that NaNs fail too. */
    if (!(cfg->floor_bps > 0 && cfg->floor_bps <= cfg->link_bps) ||
        !(cfg->step_bps > 0) || cfg->t_low_ns == 0 || cfg->t_low_ns > cfg->t_high_ns ||
        !(cfg->alpha > 0 && cfg->alpha <= 1) || !(cfg->beta > 0 && cfg->beta <= 1) ||
        cfg->min_rtt_ns == 0)
        return ERMA_EINVAL;
    return ERMA_OK;
}

int erma_timely_init(struct erma_timely *t, const struct erma_timely_cfg *cfg,
                     uint64_t now_ns)
{
    if (erma_timely_cfg_check(cfg) != ERMA_OK)
        return ERMA_EINVAL;
    *t = (struct erma_timely){
        .cfg = cfg,
        .rate_bps = cfg->link_bps,
        .min_rtt_ns = UINT64_MAX,
        .last_update_ns = now_ns,
    };
    return ERMA_OK;
}

/* Records the sample in the fields the bypass keeps up to date too. */
static void note_sample(struct erma_timely *t, uint64_t rtt)
{
    t->last_rtt_ns = rtt;
    if (rtt < t->min_rtt_ns)
        t->min_rtt_ns = rtt;
}

/* The new rate before the per-update and [floor, link] limits. */
static double next_rate(const struct erma_timely *t, uint64_t rtt, double norm, double d,
                        double d_inc)
{
    const struct erma_timely_cfg *cfg = t->cfg;
    const double step = cfg->step_bps * d_inc;
    if (rtt < cfg->t_low_ns)
        return t->rate_bps + step;
    if (rtt > cfg->t_high_ns)
        return t->rate_bps * (1 - d * cfg->beta * (1 - (double)cfg->t_high_ns / (double)rtt));
    const double g = t->gradient_ns / norm;
    if (g > 0)
        return t->rate_bps * (1 - d * cfg->beta * g);
    const bool hai = cfg->hai_n > 0 && t->falling >= cfg->hai_n;
    return t->rate_bps + (hai ? cfg->hai_n : 1) * step;
}

double erma_timely_update(struct erma_timely *t, uint64_t rtt_ns, uint64_t now_ns)
{
    const struct erma_timely_cfg *cfg = t->cfg;
    const uint64_t rtt = rtt_ns ? rtt_ns : 1;
    t->updates++;
    if (cfg->bypass && rtt < cfg->t_low_ns && t->rate_bps >= cfg->link_bps) {
        t->bypasses++;
        note_sample(t, rtt);
        return t->rate_bps;
    }

    const bool first = t->min_rtt_ns == UINT64_MAX;
    const double diff = first ? 0 : (double)rtt - (double)t->last_rtt_ns;
    t->falling = diff < 0 ? t->falling + 1 : 0;
    t->gradient_ns = (1 - cfg->alpha) * t->gradient_ns + cfg->alpha * diff;
    const double sample = (double)rtt;
    t->avg_rtt_ns = t->avg_rtt_ns == 0 ? sample
                                       : (1 - cfg->alpha) * t->avg_rtt_ns + cfg->alpha * sample;
    note_sample(t, rtt);

    const uint64_t min_rtt = t->min_rtt_ns > cfg->min_rtt_ns ? t->min_rtt_ns : cfg->min_rtt_ns;
    const double norm = (double)min_rtt;
    double d = now_ns > t->last_update_ns ? (double)(now_ns - t->last_update_ns) / norm : 0;
    const double span = cfg->ai_span > 1 ? cfg->ai_span : 1;
    const double d_inc = d < span ? d : span;
    if (d > 1)
        d = 1;
    if (now_ns > t->last_update_ns)
        t->last_update_ns = now_ns;

    double rate = next_rate(t, rtt, norm, d, d_inc);
    if (rate < t->rate_bps / 2)
        rate = t->rate_bps / 2;
    if (rate > cfg->link_bps)
        rate = cfg->link_bps;
    if (rate < cfg->floor_bps)
        rate = cfg->floor_bps;
    t->rate_bps = rate;
    return rate;
}
