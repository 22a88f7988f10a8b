/* The scaling table of a threaded benchmark (threads_table.h). */
#include <stdio.h>
#include <string.h>

#include "erma/errors.h"
#include "threads_table.h"

#define ATTEMPTS 3
#define MAX_COUNTS 8 /* 1, 2, 4, 8, 16 and N <= 32 */
#define MAX_ROUNDS 50

/* One variant at one thread count over the rounds. */
struct series {
    double total[MAX_ROUNDS], min[MAX_ROUNDS], max[MAX_ROUNDS], eff[MAX_ROUNDS];
    double ratio[MAX_ROUNDS], eff_ratio[MAX_ROUNDS]; /* variant 1's, against 0 */
};

/* One measurement's per-thread and total rates. */
struct sample {
    struct bench_raw_rate per[BENCH_MAX_THREADS], total;
};

void threads_table_header(char *buf, size_t len, const char *lead, const char *unit)
{
    snprintf(buf, len, "%s,threads,round:6,variant:7,%s,per_thread:10,thread_min:10,"
             "thread_max:10,efficiency:10,ratio,eff_ratio,thread_%s", lead, unit, unit);
}

static unsigned thread_counts(const struct threads_table *tt, unsigned *out)
{
    unsigned k = 0;
    if (tt->scale)
        for (unsigned n = 1; n < tt->threads; n *= 2)
            out[k++] = n;
    out[k++] = tt->threads;
    return k;
}

/* tt->measure, ATTEMPTS times at most; returns false after the last failure. */
static bool measure(const struct threads_table *tt, unsigned v, unsigned n, unsigned round,
                    struct sample *s)
{
    for (int a = 1; a <= ATTEMPTS; a++) {
        const int rc = tt->measure(tt->ctx, v, n, s->per, &s->total);
        if (rc == ERMA_OK)
            return true;
        const bool last = a == ATTEMPTS || rc == ERMA_EBADPKT;
        fprintf(stderr, "%s: %s, %s, %u threads, round %u, -> %s: %s%s%s (attempt %d of %d%s)\n",
                tt->prog, tt->what, tt->variant[v], n, round, tt->peer[v], erma_strerror(rc),
                rc == ERMA_EBADPKT ? ": " : "", rc == ERMA_EBADPKT ? tt->wrong : "", a,
                ATTEMPTS, last ? ", giving up" : ", trying again");
        if (last)
            break;
    }
    return false;
}

/* The per-thread rates "r0/r1/..." into buf; min and max into s at round i. */
static void per_thread(const struct bench_raw_rate *per, unsigned n, struct series *s,
                       unsigned i, char *buf, size_t len)
{
    size_t pos = 0;
    s->min[i] = s->max[i] = per[0].mpps;
    for (unsigned t = 0; t < n; t++) {
        s->min[i] = per[t].mpps < s->min[i] ? per[t].mpps : s->min[i];
        s->max[i] = per[t].mpps > s->max[i] ? per[t].mpps : s->max[i];
        const int w = snprintf(buf + pos, len - pos, "%s%.3f", t ? "/" : "", per[t].mpps);
        if (w < 0 || (size_t)w >= len - pos)
            break;
        pos += (size_t)w;
    }
}

/* "%.3f" of v into buf, or "" when the value does not apply. */
static const char *cell(char *buf, size_t len, bool has, double v)
{
    if (has)
        snprintf(buf, len, "%.3f", v);
    else
        buf[0] = 0;
    return buf;
}

/* Prints one row: a round's (with the per-thread rates) or the median's. */
static void row(const struct threads_table *tt, const struct bench_table *t, unsigned n,
                const char *round, unsigned v, const struct series *x, unsigned i,
                const char *rates)
{
    char e[32], ra[32], er[32];
    bench_table_row(t, "%s,%s,%u,%s,%s,%.3f,%.3f,%.3f,%.3f,%s,%s,%s,%s", tt->prog, tt->lead, n,
                    round, tt->variant[v], x->total[i], x->total[i] / n, x->min[i], x->max[i],
                    cell(e, sizeof e, tt->scale, x->eff[i]), cell(ra, sizeof ra, v, x->ratio[i]),
                    cell(er, sizeof er, v && tt->scale, x->eff_ratio[i]), rates);
}

/* Round i at n threads (count k), both variants; s[k][v]. */
static bool run_count(const struct threads_table *tt, const struct bench_table *t,
                      struct series (*s)[2], unsigned k, unsigned n, unsigned i)
{
    static struct sample m[2];
    const bool flip = tt->alternate && i % 2;
    for (unsigned j = 0; j < 2; j++)
        if (!measure(tt, flip ? 1 - j : j, n, i, &m[flip ? 1 - j : j]))
            return false;
    for (unsigned v = 0; v < 2; v++) {
        struct series *x = &s[k][v];
        char rates[BENCH_MAX_THREADS * 8], round[16];
        per_thread(m[v].per, n, x, i, rates, sizeof rates);
        x->total[i] = m[v].total.mpps;
        x->eff[i] = x->total[i] / (n * s[0][v].total[i]); /* count 0 is 1 thread with scale */
        if (v == 1) {
            x->ratio[i] = x->total[i] / s[k][0].total[i];
            x->eff_ratio[i] = x->eff[i] / s[k][0].eff[i];
        }
        snprintf(round, sizeof round, "%u", i);
        row(tt, t, n, round, v, x, i, rates);
    }
    return true;
}

int threads_table_run(const struct threads_table *tt, const struct bench_table *t)
{
    static struct series s[MAX_COUNTS][2];
    unsigned counts[MAX_COUNTS];
    const unsigned nc = thread_counts(tt, counts);
    for (unsigned i = 0; i < tt->rounds; i++)
        for (unsigned k = 0; k < nc; k++)
            if (!run_count(tt, t, s, k, counts[k], i))
                return 1;
    for (unsigned k = 0; k < nc; k++) {
        for (unsigned v = 0; v < 2; v++) {
            struct series med, *x = &s[k][v];
            med.total[0] = bench_median(x->total, tt->rounds);
            med.min[0] = bench_median(x->min, tt->rounds);
            med.max[0] = bench_median(x->max, tt->rounds);
            med.eff[0] = bench_median(x->eff, tt->rounds);
            med.ratio[0] = bench_median(x->ratio, tt->rounds);
            med.eff_ratio[0] = bench_median(x->eff_ratio, tt->rounds);
            row(tt, t, counts[k], "median", v, &med, 0, "");
        }
    }
    return 0;
}
