/* raftkv_client load (raftkv_client.c): writes, then reads back, and
 * with --history keeps reads in flight and records every op. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "erma/clock.h"
#include "raftkv/raftkv_client_load.h"

#define GAP_SHOWN_NS 100000000ull /* load lists the gaps without an ack this long */
#define GAPS_SHOWN 16

struct key_state {
    uint64_t acked;   /* the value (write number) last acknowledged, 0: none */
    uint64_t unknown; /* a later write whose outcome is unknown, 0: none */
    bool busy;
    uint64_t start;   /* the write in flight: when it started */
    uint64_t wrote;
};

/* A time without an acknowledged write: from the last ack before it. */
struct gap {
    uint64_t from, ns;
};

struct load {
    struct raftkv_client *c;
    struct key_state *keys;
    uint32_t nkeys, inflight, busy, next_key;
    uint64_t start, end, writes, acked, failed, last_ack, first_ack, longest_gap, late_acks;
    uint64_t longest_from;       /* when the longest gap began */
    struct gap gaps[GAPS_SHOWN]; /* the first gaps of GAP_SHOWN_NS or more */
    uint32_t ngaps, long_gaps;   /* listed, and all of them */
    uint64_t quarter; /* acks after this time count as late */
    double *lat_us;
    uint64_t nlat, cap_lat;
    uint32_t checked, lost, read_failed;
    struct history *hist; /* --history, or NULL */
};

static void val_of(uint64_t w, char out[32])
{
    snprintf(out, 32, "w%llu", (unsigned long long)w);
}

static void key_of(uint32_t k, char out[32])
{
    snprintf(out, 32, "key%u", k);
}

/* ---- load --history: the ops as the client saw them ---- */

struct hist_read { /* a GET kept in flight beside the writes */
    struct history *h;
    uint32_t key;
    uint64_t invoke;
    bool busy;
};

struct history {
    FILE *f;
    uint64_t *put_invoke; /* per key: when its write in flight was sent */
    struct hist_read *reads;
    uint32_t nreads, next_key;
    uint64_t ops, unknown;
};

/* One op per line: KIND KEY VALUE INVOKE COMPLETE OUTCOME, VALUE "-" when
 * none, COMPLETE "-" when the outcome is unknown (the op failed or timed
 * out), times in ns of CLOCK_MONOTONIC, one clock for every client. */
static void history_line(struct history *h, const char *kind, uint32_t k, const void *val,
                         uint32_t vlen, uint64_t invoke, const char *outcome)
{
    const bool unknown = strcmp(outcome, "unknown") == 0;
    fprintf(h->f, "%s key%u %.*s %llu ", kind, k, vlen ? (int)vlen : 1,
            vlen ? (const char *)val : "-", (unsigned long long)invoke);
    if (unknown)
        fprintf(h->f, "- unknown\n");
    else
        fprintf(h->f, "%llu %s\n", (unsigned long long)erma_mono_ns(), outcome);
    h->ops++;
    h->unknown += unknown;
}

static void history_put_sent(struct load *l, uint32_t k)
{
    if (l->hist)
        l->hist->put_invoke[k] = erma_mono_ns();
}

static void history_put_done(struct load *l, const struct key_state *ks, int status)
{
    if (!l->hist)
        return;
    const uint32_t k = (uint32_t)(ks - l->keys);
    char val[32];
    val_of(ks->wrote, val);
    history_line(l->hist, "put", k, val, (uint32_t)strlen(val), l->hist->put_invoke[k],
                 status == ERMA_OK ? "ok" : "unknown");
}

static void history_read_done(void *tag, int status, const uint8_t *val, uint32_t vlen)
{
    struct hist_read *r = tag;
    if (!r->busy)
        return;
    r->busy = false;
    const char *outcome = status == ERMA_OK       ? "value"
                          : status == ERMA_ENOENT ? "enoent"
                                                  : "unknown";
    history_line(r->h, "get", r->key, val, status == ERMA_OK ? vlen : 0, r->invoke, outcome);
}

/* Keeps the history's reads in flight, on the keys in turn. */
static void history_reads(struct load *l)
{
    struct history *h = l->hist;
    for (uint32_t i = 0; h && i < h->nreads; i++) {
        struct hist_read *r = &h->reads[i];
        if (r->busy)
            continue;
        char key[32];
        r->key = h->next_key++ % l->nkeys;
        key_of(r->key, key);
        r->invoke = erma_mono_ns();
        r->busy = true;
        if (raftkv_get(l->c, key, (uint32_t)strlen(key), false, history_read_done, r) !=
            ERMA_OK)
            r->busy = false;
    }
}

/* Opens path for --history; the values written start at pid * 10^6 so that
 * those of clients run side by side differ. 0, or 1 with the error said. */
static int history_open(struct load *l, const char *path)
{
    struct history *h = calloc(1, sizeof *h);
    l->hist = h;
    if (!h || !(h->put_invoke = calloc(l->nkeys, sizeof *h->put_invoke)) ||
        !(h->reads = calloc(l->inflight, sizeof *h->reads)) || !(h->f = fopen(path, "w"))) {
        fprintf(stderr, "raftkv_client: --history %s: %s\n", path,
                h && h->reads ? strerror(errno) : "out of memory");
        return 1;
    }
    h->nreads = l->inflight;
    for (uint32_t i = 0; i < h->nreads; i++)
        h->reads[i].h = h;
    fprintf(h->f, "# raftkv_client load --history: KIND KEY VALUE INVOKE_NS COMPLETE_NS OUTCOME\n");
    l->writes = (uint64_t)getpid() * 1000000;
    return 0;
}

static bool history_reads_done(void *ctx)
{
    const struct history *h = ctx;
    for (uint32_t i = 0; i < h->nreads; i++)
        if (h->reads[i].busy)
            return false;
    return true;
}

/* Waits for the reads in flight, then writes the file out: 0, or 1. */
static int history_close(struct load *l, const char *path)
{
    struct history *h = l->hist;
    if (!h)
        return 0;
    int rc = 0;
    if (h->f) {
        raftkv_client_run(l->c, history_reads_done, h, OP_TIMEOUT_NS + 1000000000ull);
        printf("raftkv_client load: history: %llu ops, %llu of unknown outcome, in %s\n",
               (unsigned long long)h->ops, (unsigned long long)h->unknown, path);
        if (ferror(h->f) | fclose(h->f)) {
            fprintf(stderr, "raftkv_client: --history %s: %s\n", path, strerror(errno));
            rc = 1;
        }
    }
    if (h->reads && !history_reads_done(h))
        return 1; /* a read still in flight may yet call back into h */
    free(h->reads);
    free(h->put_invoke);
    free(h);
    return rc;
}

static void written(void *tag, int status, const uint8_t *val, uint32_t vlen);

static void write_next(struct load *l)
{
    for (uint32_t tries = 0; tries < l->nkeys && l->busy < l->inflight; tries++) {
        const uint32_t k = l->next_key++ % l->nkeys;
        struct key_state *ks = &l->keys[k];
        if (ks->busy)
            continue;
        char key[32], val[32];
        key_of(k, key);
        val_of(++l->writes, val);
        ks->wrote = l->writes;
        ks->start = erma_now_ns();
        history_put_sent(l, k);
        if (raftkv_put(l->c, key, (uint32_t)strlen(key), val, (uint32_t)strlen(val),
                       written, ks) != ERMA_OK)
            return;
        ks->busy = true;
        l->busy++;
    }
}

static struct load *the_load; /* the callbacks' context */

/* A write acknowledged at now: the time since the last one is a gap. */
static void note_ack(struct load *l, uint64_t now)
{
    const uint64_t gap = now - l->last_ack;
    if (l->first_ack && gap > l->longest_gap) {
        l->longest_gap = gap;
        l->longest_from = l->last_ack;
    }
    if (l->first_ack && gap >= GAP_SHOWN_NS) {
        l->long_gaps++;
        if (l->ngaps < GAPS_SHOWN)
            l->gaps[l->ngaps++] = (struct gap){l->last_ack, gap};
    }
    if (!l->first_ack)
        l->first_ack = now;
    l->last_ack = now;
}

/* When the longest gap began, and the long gaps, in s from the start. */
static void report_gaps(const struct load *l)
{
    printf("raftkv_client load: the longest time without an acknowledgement began %.3f s into"
           " the run; %u such times of %llu ms or more",
           l->longest_gap ? (double)(l->longest_from - l->start) / 1e9 : 0.0, l->long_gaps,
           GAP_SHOWN_NS / 1000000);
    for (uint32_t i = 0; i < l->ngaps; i++)
        printf("%s%.1f ms at %.3f s", i ? ", " : ": ", (double)l->gaps[i].ns / 1e6,
               (double)(l->gaps[i].from - l->start) / 1e9);
    printf("\n");
}

static void written(void *tag, int status, const uint8_t *val, uint32_t vlen)
{
    (void)val;
    (void)vlen;
    struct load *l = the_load;
    struct key_state *ks = tag;
    const uint64_t now = erma_now_ns();
    ks->busy = false;
    l->busy--;
    history_put_done(l, ks, status);
    if (status != ERMA_OK) {
        l->failed++;
        ks->unknown = ks->wrote;
        return;
    }
    ks->acked = ks->wrote;
    ks->unknown = 0;
    l->acked++;
    note_ack(l, now);
    l->late_acks += now >= l->quarter;
    if (l->nlat < l->cap_lat)
        l->lat_us[l->nlat++] = (double)(now - ks->start) / 1e3;
}

static bool load_step(void *ctx)
{
    struct load *l = ctx;
    if (erma_now_ns() < l->end) {
        write_next(l);
        history_reads(l);
    }
    return erma_now_ns() >= l->end && l->busy == 0;
}

static void read_back(void *tag, int status, const uint8_t *val, uint32_t vlen)
{
    struct load *l = the_load;
    const struct key_state *ks = tag;
    const uint32_t k = (uint32_t)(ks - l->keys);
    char want[32], alt[32];
    val_of(ks->acked, want);
    val_of(ks->unknown, alt);
    l->checked++;
    l->busy--;
    if (status != ERMA_OK && status != ERMA_ENOENT) {
        l->read_failed++;
        return;
    }
    const bool absent_ok = ks->acked == 0;
    const bool ok = status == ERMA_ENOENT
                        ? absent_ok
                        : (vlen == strlen(want) && memcmp(val, want, vlen) == 0 && ks->acked) ||
                              (ks->unknown && vlen == strlen(alt) && memcmp(val, alt, vlen) == 0);
    if (!ok) {
        l->lost++;
        if (l->lost <= 5)
            fprintf(stderr, "raftkv_client: key%u holds %.*s, its last acknowledged write was %s\n",
                    k, status == ERMA_OK ? (int)vlen : 6,
                    status == ERMA_OK ? (const char *)val : "(none)", want);
    }
}

static bool reads_step(void *ctx)
{
    struct load *l = ctx;
    while (l->next_key < l->nkeys && l->busy < l->inflight) {
        char key[32];
        key_of(l->next_key, key);
        if (raftkv_get(l->c, key, (uint32_t)strlen(key), false, read_back,
                       &l->keys[l->next_key]) != ERMA_OK)
            break;
        l->next_key++;
        l->busy++;
    }
    return l->checked == l->nkeys;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int load_report(struct load *l, double seconds)
{
    qsort(l->lat_us, l->nlat, sizeof *l->lat_us, cmp_double);
    const double p50 = l->nlat ? l->lat_us[l->nlat / 2] : 0;
    const double p99 = l->nlat ? l->lat_us[(l->nlat * 99) / 100] : 0;
    printf("raftkv_client load: %llu writes acknowledged in %.1f s (%.0f a second), %llu failed;"
           " latency median %.0f us, p99 %.0f us; longest time without an acknowledgement"
           " %.1f ms\n",
           (unsigned long long)l->acked, seconds, (double)l->acked / seconds,
           (unsigned long long)l->failed, p50, p99, (double)l->longest_gap / 1e6);
    report_gaps(l);
    printf("raftkv_client load: read back %u keys: %u lost an acknowledged write, %u reads"
           " failed; %llu writes acknowledged in the last quarter of the run\n",
           l->checked, l->lost, l->read_failed, (unsigned long long)l->late_acks);
    if (l->lost || l->read_failed || l->checked != l->nkeys) {
        fprintf(stderr, "raftkv_client load: FAILED: acknowledged writes lost or unreadable\n");
        return 1;
    }
    if (l->late_acks == 0) {
        fprintf(stderr, "raftkv_client load: FAILED: no write acknowledged in the last quarter\n");
        return 1;
    }
    printf("raftkv_client load: every key holds its last acknowledged write\n");
    return 0;
}

int load_command(struct raftkv_client *c, int argc, char **argv)
{
    static const struct option opts[] = {{"seconds", required_argument, NULL, 's'},
                                         {"keys", required_argument, NULL, 'k'},
                                         {"inflight", required_argument, NULL, 'w'},
                                         {"history", required_argument, NULL, 'H'},
                                         {NULL, 0, NULL, 0}};
    double seconds = 5;
    const char *history = NULL;
    struct load l = {.c = c, .nkeys = 1000, .inflight = 8};
    optind = 1;
    for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        if (o == 's')
            seconds = strtod(optarg, NULL);
        else if (o == 'k')
            l.nkeys = (uint32_t)strtoul(optarg, NULL, 0);
        else if (o == 'w')
            l.inflight = (uint32_t)strtoul(optarg, NULL, 0);
        else if (o == 'H')
            history = optarg;
        else
            return 2;
    }
    if (optind != argc || seconds <= 0 || seconds > 3600 || l.nkeys == 0 || l.inflight == 0 ||
        l.inflight > 256)
        return 2;
    l.keys = calloc(l.nkeys, sizeof *l.keys);
    l.cap_lat = 1u << 22;
    l.lat_us = malloc(l.cap_lat * sizeof *l.lat_us);
    if (!l.keys || !l.lat_us) {
        fprintf(stderr, "raftkv_client: out of memory\n");
        return 1;
    }
    if (history && history_open(&l, history)) {
        history_close(&l, history);
        free(l.keys);
        free(l.lat_us);
        return 1;
    }
    the_load = &l;
    const uint64_t start = erma_now_ns();
    l.start = start;
    l.end = start + (uint64_t)(seconds * 1e9);
    l.quarter = l.end - (uint64_t)(seconds * 0.25e9);
    raftkv_client_run(c, load_step, &l, (uint64_t)(seconds * 1e9) + 2 * OP_TIMEOUT_NS);
    const double ran = (double)(erma_now_ns() - start) / 1e9;
    const int hrc = history_close(&l, history);
    l.next_key = 0;
    l.busy = 0;
    raftkv_client_run(c, reads_step, &l, (uint64_t)l.nkeys * OP_TIMEOUT_NS);
    const int rc = load_report(&l, ran);
    free(l.keys);
    free(l.lat_us);
    return rc ? rc : hrc;
}
