/* The command line and output conventions every benchmark shares (bench.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

void bench_cli_init(struct bench_cli *c, const char *prog, const char *usage,
                    const struct option *opts)
{
    *c = (struct bench_cli){.prog = prog, .usage = usage, .opts = opts, .idx = -1};
}

void bench_cli_fail(const struct bench_cli *c, const char *fmt, ...)
{
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "%s: ", c->prog);
        vfprintf(stderr, fmt, ap);
        fputs("\n", stderr);
        va_end(ap);
    }
    fputs(c->usage, stderr);
    exit(2);
}

/* The option being parsed, for messages. */
static const char *opt_name(const struct bench_cli *c)
{
    return c->idx >= 0 ? c->opts[c->idx].name : "?";
}

uint64_t bench_cli_u64(const struct bench_cli *c, const char *arg)
{
    char *end;
    errno = 0;
    const unsigned long long v = strtoull(arg, &end, 10);
    if (errno || end == arg || *end || arg[0] == '-')
        bench_cli_fail(c, "--%s: '%s' is not a whole number", opt_name(c), arg);
    return v;
}

double bench_cli_real(const struct bench_cli *c, const char *arg)
{
    char *end;
    errno = 0;
    const double v = strtod(arg, &end);
    if (errno || end == arg || *end || v < 0)
        bench_cli_fail(c, "--%s: '%s' is not a number >= 0", opt_name(c), arg);
    return v;
}

/* "4096", "4K", "64k", "8M": bytes (K and M are 1024 and 1024^2). */
static bool parse_size(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-')
        return false;
    if (*end == 'k' || *end == 'K')
        v <<= 10, end++;
    else if (*end == 'm' || *end == 'M')
        v <<= 20, end++;
    if (*end || v > UINT32_MAX)
        return false;
    *out = (uint32_t)v;
    return true;
}

uint32_t bench_cli_size(const struct bench_cli *c, const char *arg)
{
    uint32_t v;
    if (!parse_size(arg, &v))
        bench_cli_fail(c, "--%s: '%s' is not a size (e.g. 32, 4K, 8M)", opt_name(c), arg);
    return v;
}

/* Splits a comma-separated list into at most max entries with each(). */
static unsigned split(const struct bench_cli *c, const char *arg, unsigned max,
                      bool (*each)(const char *tok, void *out, unsigned i), void *out)
{
    char buf[1024];
    if (snprintf(buf, sizeof buf, "%s", arg) >= (int)sizeof buf)
        bench_cli_fail(c, "--%s: list too long", opt_name(c));
    unsigned n = 0;
    for (char *save, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == max)
            bench_cli_fail(c, "--%s: more than %u entries", opt_name(c), max);
        if (!each(t, out, n))
            bench_cli_fail(c, "--%s: bad entry '%s' in '%s'", opt_name(c), t, arg);
        n++;
    }
    if (n == 0)
        bench_cli_fail(c, "--%s: empty list", opt_name(c));
    return n;
}

static bool size_at(const char *tok, void *out, unsigned i)
{
    return parse_size(tok, (uint32_t *)out + i);
}

static bool cpu_at(const char *tok, void *out, unsigned i)
{
    char *end;
    const long v = strtol(tok, &end, 10);
    ((int *)out)[i] = (int)v;
    return end != tok && !*end && v >= 0 && v < 1024; /* CPU_SETSIZE */
}

unsigned bench_cli_sizes(const struct bench_cli *c, const char *arg, uint32_t *out,
                         unsigned max)
{
    return split(c, arg, max, size_at, out);
}

int bench_cli_next(struct bench_cli *c, int argc, char **argv)
{
    for (;;) {
        c->idx = -1;
        const int o = getopt_long(argc, argv, "h", c->opts, &c->idx);
        switch (o) {
        case -1:
            if (optind < argc)
                bench_cli_fail(c, "unexpected argument '%s'", argv[optind]);
            return -1;
        case 'h':
        case BENCH_OPT_HELP:
            fputs(c->usage, stdout);
            exit(0);
        case '?':
        case ':':
            bench_cli_fail(c, NULL); /* getopt has said what was wrong */
            break;
        case BENCH_OPT_CSV:
            c->csv = true;
            break;
        case BENCH_OPT_CPU:
            c->ncpus = split(c, optarg, BENCH_MAX_CPUS, cpu_at, c->cpus);
            break;
        case BENCH_OPT_SIZES:
            c->nsizes = bench_cli_sizes(c, optarg, c->sizes, BENCH_MAX_SIZES);
            break;
        default:
            return o;
        }
    }
}

int bench_cli_cpu(const struct bench_cli *c, unsigned who)
{
    if (who == 0)
        return c->ncpus ? c->cpus[0] : -1;
    return c->ncpus > 1 ? c->cpus[1 + (who - 1) % (c->ncpus - 1)] : -1;
}

unsigned bench_cli_threads(const struct bench_cli *c, const char *name, const char *arg)
{
    const uint64_t n = bench_cli_u64(c, arg);
    if (n == 0 || n > BENCH_MAX_THREADS)
        bench_cli_fail(c, "%s must be 1..%d", name, BENCH_MAX_THREADS);
    return (unsigned)n;
}

bool bench_cli_thread_cpus(const struct bench_cli *c, unsigned n, int cpus[2][BENCH_MAX_THREADS])
{
    if (c->ncpus && c->ncpus != 1 && c->ncpus != 2 * n)
        bench_cli_fail(c, "--cpu with --threads %u: one CPU F (threads on F, F+1, ...) or "
                          "%u CPUs", n, 2 * n);
    for (unsigned t = 0; t < n && c->ncpus; t++)
        for (unsigned side = 0; side < 2; side++)
            cpus[side][t] = c->ncpus == 1 ? c->cpus[0] + (int)(side * n + t)
                                          : c->cpus[side * n + t];
    return c->ncpus > 0;
}

uint64_t bench_iters_for(uint64_t base, uint32_t size)
{
    if (size <= 4096)
        return base;
    const uint64_t scaled = base * 4096 / size;
    return scaled > 1000 ? scaled : 1000;
}

/* ---- tables ---- */

/* Copies field i of the CSV line s (no quoting) into out. */
static void field(const char *s, unsigned i, char *out, size_t len)
{
    for (; i && s; i--)
        if ((s = strchr(s, ',')))
            s++;
    size_t n = 0;
    if (s)
        for (; s[n] && s[n] != ',' && s[n] != '\n' && n + 1 < len; n++)
            out[n] = s[n];
    out[n] = 0;
}

void bench_table_start(struct bench_table *t, bool csv, const char *header)
{
    *t = (struct bench_table){.csv = csv};
    char line[1024], name[128];
    size_t pos = 0;
    for (const char *s = header; *s && t->ncols < BENCH_MAX_COLS; t->ncols++) {
        field(s, 0, name, sizeof name);
        char *hint = strchr(name, ':');
        unsigned w = 0;
        if (hint) {
            *hint = 0;
            w = (unsigned)atoi(hint + 1);
        }
        const unsigned len = (unsigned)strlen(name);
        t->width[t->ncols] = w > len ? w : len > 7 ? len : 7;
        t->hidden[t->ncols] = strcmp(name, "bench") == 0;
        pos += (size_t)snprintf(line + pos, sizeof line - pos, "%s%s", t->ncols ? "," : "", name);
        if (pos >= sizeof line)
            pos = sizeof line - 1;
        s = strchr(s, ',');
        if (!s)
            s = "";
        else
            s++;
    }
    if (csv)
        printf("%s\n", line);
    else
        bench_table_print(t, line);
    fflush(stdout);
}

void bench_table_print(const struct bench_table *t, const char *line)
{
    char cell[256];
    bool first = true;
    for (unsigned i = 0; i < t->ncols; i++) {
        if (t->hidden[i])
            continue;
        field(line, i, cell, sizeof cell);
        printf("%s%*s", first ? "" : " ", (int)t->width[i], cell[0] ? cell : "-");
        first = false;
    }
    putchar('\n');
}

void bench_table_row(const struct bench_table *t, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (t->csv)
        printf("%s\n", line);
    else
        bench_table_print(t, line);
    fflush(stdout);
}

void bench_note(bool csv, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    FILE *f = csv ? stderr : stdout;
    fputs("# ", f);
    vfprintf(f, fmt, ap);
    fputs("\n", f);
    va_end(ap);
    fflush(f);
}
