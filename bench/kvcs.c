/*
 * kvcs - the key-value caching service under open-loop load: one-sided
 * READ lookups beside RPC lookups, as in 1RMA's KVCS evaluation.
 *
 *   kvcs [--servers S] [--replicas R] [--keys K] [--value B]
 *        [--loads L1,L2,...] [--seconds T] [--base-port P]
 *        [--kill-at SEC --method read|rpc --load L] [--idle-wait-us U]
 *        [--attempt-ms A]
 *
 * Forks S kvcs servers on udp loopback (ports P, P+8, ...; servers on CPU
 * 1, the client on CPU 0), loads K keys of B-byte values, then:
 *
 * sweep (default): for each offered load L (GETs per second, Poisson
 * arrivals, uniform keys), T seconds by one-sided READ, then T seconds by
 * RPC. Latency is from an op's scheduled arrival to its callback, so
 * queueing in the client counts (open loop). CSV line per (load, method):
 *   kvcs,sweep,METHOD,offered,achieved,p50_us,p99_us,p999_us,failed,wrong
 * and per load the ratios READ / RPC of p50 and p99.
 *
 * failure (--kill-at): one method at one load for T seconds; at SEC the
 * primary-serving server 0 is killed (SIGKILL). CSV per 10 ms bin:
 *   kvcs,timeline,METHOD,t_ms,ops,p50_us,p99_us,max_us,failed
 * then a summary line with the disruption: the time from the kill to the
 * end of the last bin holding a failed op or one that took longer than the
 * attempt timeout (it waited on the dead replica before failing over).
 * A try at one replica lasts at most A ms (default 10; the client's
 * attempt_timeout_ns), so a dead replica costs the lookups that find it
 * dead about A ms, until the first of them marks it down.
 *
 * A GET whose value differs from what the loader PUT counts as wrong.
 *
 * The servers share one core, so each sleeps in its socket once idle for
 * U us (default 20; kvcs server cfg.idle_wait_ns). With 0 they poll all
 * the time and take turns in the kernel's time slices: lookups then wait
 * for the right server's turn (p50 about 2 ms, p99 about 9 ms here).
 */
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "erma/clock.h"
#include "kvcs/kvcs.h"
#include "erma/rand.h"

#define MAX_SERVERS 8
#define BIN_NS 10000000ull
#define MAX_BINS 4096

struct opts {
    unsigned servers, replicas, keys, value;
    double seconds, kill_at, load, idle_wait_us, attempt_ms;
    const char *loads;
    int base_port;
    enum erma_kvcs_method method;
};

struct run {
    const struct opts *o;
    struct erma_kvcs_client *c;
    uint64_t *lat, nlat, cap;
    uint64_t failed, wrong, done;
    uint64_t start_ns;
    /* timeline: per bin */
    uint64_t *bin_lat[MAX_BINS];
    uint32_t bin_n[MAX_BINS], bin_cap[MAX_BINS];
    uint32_t bin_failed[MAX_BINS];
    bool timeline;
};

struct pending {
    struct run *r;
    uint64_t arrival_ns;
    uint32_t key;
};

static void key_of(uint32_t k, char out[16])
{
    snprintf(out, 16, "key%08u", k);
}

static void value_of(uint32_t k, uint32_t len, uint8_t *out)
{
    for (uint32_t i = 0; i < len; i++)
        out[i] = (uint8_t)(k * 31 + i);
}

static pid_t server_fork(const char *uri, uint64_t idle_wait_ns)
{
    const pid_t pid = fork();
    if (pid != 0)
        return pid;
    bench_pin(1);
    struct erma_kvcs_server *s;
    const struct erma_kvcs_server_cfg cfg = {.uri = uri, .buckets = 1u << 14,
                                             .log_bytes = 16u << 20,
                                             .idle_wait_ns = idle_wait_ns};
    if (erma_kvcs_server_create(&cfg, &s) != ERMA_OK)
        _exit(1);
    while (getppid() != 1)
        erma_kvcs_server_run(s, 100000000);
    erma_kvcs_server_destroy(s);
    _exit(0);
}

static void record(struct run *r, uint64_t arrival, uint64_t now, bool failed)
{
    const uint64_t ns = now - arrival;
    if (!failed && r->nlat < r->cap)
        r->lat[r->nlat++] = ns;
    if (!r->timeline)
        return;
    const uint64_t b = (now - r->start_ns) / BIN_NS;
    if (b >= MAX_BINS)
        return;
    r->bin_failed[b] += failed;
    if (failed)
        return;
    if (r->bin_n[b] == r->bin_cap[b]) {
        const uint32_t cap = r->bin_cap[b] ? 2 * r->bin_cap[b] : 256;
        uint64_t *v = realloc(r->bin_lat[b], cap * sizeof *v);
        if (!v)
            return;
        r->bin_lat[b] = v;
        r->bin_cap[b] = cap;
    }
    r->bin_lat[b][r->bin_n[b]++] = ns;
}

static void on_get(void *tag, int status, const uint8_t *val, uint32_t vlen)
{
    struct pending *p = tag;
    struct run *r = p->r;
    uint8_t want[4096];
    bool bad = status != ERMA_OK;
    if (!bad) {
        value_of(p->key, r->o->value, want);
        if (vlen != r->o->value || memcmp(val, want, vlen) != 0)
            r->wrong++;
    }
    r->failed += bad;
    r->done++;
    record(r, p->arrival_ns, erma_now_ns(), bad);
    free(p);
}

static void on_put(void *tag, int status, const uint8_t *val, uint32_t vlen)
{
    (void)val;
    (void)vlen;
    struct run *r = tag;
    r->done++;
    r->failed += status != ERMA_OK;
}

/* Loads every key, at most 64 PUTs in flight. */
static int load_keys(struct run *r)
{
    uint8_t v[4096];
    uint64_t started = 0;
    const uint64_t end = erma_now_ns() + 60000000000ull;
    while (r->done < r->o->keys && erma_now_ns() < end) {
        while (started < r->o->keys && started - r->done < 64) {
            char k[16];
            key_of((uint32_t)started, k);
            value_of((uint32_t)started, r->o->value, v);
            if (erma_kvcs_put(r->c, k, (uint32_t)strlen(k), v, r->o->value, on_put, r) != ERMA_OK)
                break;
            started++;
        }
        erma_kvcs_client_run_once(r->c);
    }
    return r->done == r->o->keys && r->failed == 0 ? ERMA_OK : ERMA_ETIMEDOUT;
}

/* Open-loop GETs at `load` per second for `seconds`; kill server 0 at
 * kill_at seconds when kill_pid > 0. Waits up to 2 s for stragglers. */
static void drive(struct run *r, double load, double seconds, double kill_at, pid_t kill_pid)
{
    struct erma_rand rng;
    erma_rand_seed(&rng, (uint64_t)load + 1);
    r->start_ns = erma_now_ns();
    const uint64_t end = r->start_ns + (uint64_t)(seconds * 1e9);
    const uint64_t kill_ns = r->start_ns + (uint64_t)(kill_at * 1e9);
    uint64_t next = r->start_ns, started = 0;
    for (uint64_t now = next; now < end; now = erma_now_ns()) {
        if (kill_pid > 0 && now >= kill_ns) {
            kill(kill_pid, SIGKILL);
            kill_pid = 0;
        }
        while (next <= now && next < end) {
            struct pending *p = malloc(sizeof *p);
            if (!p)
                break;
            *p = (struct pending){r, next, (uint32_t)erma_rand_below(&rng, r->o->keys)};
            char k[16];
            key_of(p->key, k);
            if (erma_kvcs_get(r->c, k, (uint32_t)strlen(k), on_get, p) != ERMA_OK) {
                free(p); /* no free op slot: the arrival waits, its latency grows */
                break;
            }
            started++;
            const double u = (double)(erma_rand_u64(&rng) >> 11) / 9007199254740992.0;
            next += (uint64_t)(-log(1 - u) / load * 1e9);
        }
        erma_kvcs_client_run_once(r->c);
    }
    const uint64_t stop = erma_now_ns() + 2000000000ull;
    while (r->done < started && erma_now_ns() < stop)
        erma_kvcs_client_run_once(r->c);
}

static int run_reset(struct run *r)
{
    r->nlat = r->failed = r->wrong = r->done = 0;
    for (unsigned b = 0; b < MAX_BINS; b++)
        r->bin_n[b] = r->bin_failed[b] = 0;
    return ERMA_OK;
}

static int sweep(struct run *r)
{
    const struct opts *o = r->o;
    char list[512];
    snprintf(list, sizeof list, "%s", o->loads);
    printf("bench,kind,method,offered,achieved,p50_us,p99_us,p999_us,failed,wrong\n");
    for (char *t = strtok(list, ","); t; t = strtok(NULL, ",")) {
        const double load = atof(t);
        struct bench_lat l[2] = {{0}};
        for (int m = 0; m < 2; m++) {
            const enum erma_kvcs_method meth = m == 0 ? ERMA_KVCS_READ : ERMA_KVCS_RPC;
            run_reset(r);
            erma_kvcs_client_set_method(r->c, meth);
            drive(r, load, o->seconds, 0, 0);
            if (r->nlat)
                bench_lat_from_ns(r->lat, r->nlat, &l[m]);
            printf("kvcs,sweep,%s,%.0f,%.0f,%.1f,%.1f,%.1f,%llu,%llu\n", m ? "rpc" : "read", load,
                   (double)r->nlat / o->seconds, l[m].median_us, l[m].p99_us, l[m].p999_us,
                   (unsigned long long)r->failed, (unsigned long long)r->wrong);
            fflush(stdout);
            if (r->wrong)
                return ERMA_EBADPKT;
        }
        printf("kvcs,ratio,read/rpc,%.0f,,%.3f,%.3f,,,\n", load,
               l[0].median_us / l[1].median_us, l[0].p99_us / l[1].p99_us);
    }
    return ERMA_OK;
}

static int failure(struct run *r, pid_t victim)
{
    const struct opts *o = r->o;
    run_reset(r);
    r->timeline = true;
    erma_kvcs_client_set_method(r->c, o->method);
    drive(r, o->load, o->seconds, o->kill_at, victim);
    const char *m = o->method == ERMA_KVCS_READ ? "read" : "rpc";
    const uint64_t kill_bin = (uint64_t)(o->kill_at * 1e9) / BIN_NS;
    const uint64_t nbins = (uint64_t)(o->seconds * 1e9) / BIN_NS;
    printf("bench,kind,method,t_ms,ops,p50_us,p99_us,max_us,failed\n");
    double before = 0;
    uint64_t last_bad = kill_bin;
    uint64_t *pre = malloc((r->nlat + 1) * sizeof *pre), npre = 0;
    for (uint64_t b = 0; b < nbins && b < MAX_BINS; b++) {
        struct bench_lat l = {0};
        double max = 0;
        if (r->bin_n[b]) {
            if (b < kill_bin && pre)
                for (uint32_t i = 0; i < r->bin_n[b]; i++)
                    pre[npre++] = r->bin_lat[b][i];
            bench_lat_from_ns(r->bin_lat[b], r->bin_n[b], &l);
            max = (double)r->bin_lat[b][r->bin_n[b] - 1] / 1e3;
        }
        if (b == kill_bin && npre) {
            struct bench_lat pl;
            bench_lat_from_ns(pre, npre, &pl);
            before = pl.median_us;
        }
        if (b >= kill_bin && (r->bin_failed[b] || max >= o->attempt_ms * 1e3))
            last_bad = b + 1;
        printf("kvcs,timeline,%s,%llu,%u,%.1f,%.1f,%.1f,%u\n", m, (unsigned long long)(b * 10),
               r->bin_n[b], l.median_us, l.p99_us, max, r->bin_failed[b]);
    }
    free(pre);
    printf("kvcs,failure,%s,load %.0f,kill at %.0f ms,pre-kill median %.1f us,"
           "disrupted %llu ms,failed %llu,wrong %llu\n", m, o->load, o->kill_at * 1e3, before,
           (unsigned long long)((last_bad - kill_bin) * 10), (unsigned long long)r->failed,
           (unsigned long long)r->wrong);
    return r->wrong ? ERMA_EBADPKT : ERMA_OK;
}

static int parse(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        {"servers", 1, 0, 's'}, {"replicas", 1, 0, 'r'}, {"keys", 1, 0, 'k'},
        {"value", 1, 0, 'v'},   {"loads", 1, 0, 'l'},    {"seconds", 1, 0, 't'},
        {"base-port", 1, 0, 'p'}, {"kill-at", 1, 0, 'K'}, {"method", 1, 0, 'm'},
        {"load", 1, 0, 'L'},    {"idle-wait-us", 1, 0, 'i'}, {"attempt-ms", 1, 0, 'a'},
        {0, 0, 0, 0}};
    for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        switch (c) {
        case 's': o->servers = (unsigned)atoi(optarg); break;
        case 'r': o->replicas = (unsigned)atoi(optarg); break;
        case 'k': o->keys = (unsigned)atoi(optarg); break;
        case 'v': o->value = (unsigned)atoi(optarg); break;
        case 'l': o->loads = optarg; break;
        case 't': o->seconds = atof(optarg); break;
        case 'p': o->base_port = atoi(optarg); break;
        case 'K': o->kill_at = atof(optarg); break;
        case 'm': o->method = strcmp(optarg, "rpc") == 0 ? ERMA_KVCS_RPC : ERMA_KVCS_READ; break;
        case 'L': o->load = atof(optarg); break;
        case 'i': o->idle_wait_us = atof(optarg); break;
        case 'a': o->attempt_ms = atof(optarg); break;
        default: return -1;
        }
    }
    if (o->servers < 1 || o->servers > MAX_SERVERS || o->keys < 1 || o->value < 1 ||
        o->value > 4096 || o->seconds <= 0 || o->seconds > 600 ||
        (o->kill_at > 0 && (o->kill_at >= o->seconds || o->load <= 0)) || o->attempt_ms <= 0 ||
        o->idle_wait_us < 0)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = {.servers = 3, .replicas = 3, .keys = 10000, .value = 64, .seconds = 2,
                     .loads = "5000,20000,50000,100000", .base_port = 42100, .load = 10000,
                     .idle_wait_us = 20, .attempt_ms = 10};
    if (parse(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: see the comment at the top of bench/kvcs.c\n");
        return 2;
    }
    char uris[MAX_SERVERS][64];
    const char *srv[MAX_SERVERS];
    pid_t pids[MAX_SERVERS];
    for (unsigned i = 0; i < o.servers; i++) {
        snprintf(uris[i], sizeof uris[i], "udp://127.0.0.1:%d", o.base_port + (int)(i * 8));
        srv[i] = uris[i];
        pids[i] = server_fork(uris[i], (uint64_t)(o.idle_wait_us * 1000));
    }
    bench_pin(0);
    char me[64];
    snprintf(me, sizeof me, "udp://127.0.0.1:%d", o.base_port + (int)(o.servers * 8));
    const struct erma_kvcs_client_cfg cc = {
        .uri = me, .servers = srv, .nservers = o.servers, .replicas = o.replicas,
        .max_ops = 1024, .attempt_timeout_ns = (uint64_t)(o.attempt_ms * 1e6), .cc_off = true};
    struct run *r = calloc(1, sizeof *r);
    int rc = r ? erma_kvcs_client_create(&cc, &r->c) : ERMA_ENOMEM;
    if (rc == ERMA_OK) {
        r->o = &o;
        r->cap = 4000000;
        r->lat = malloc(r->cap * sizeof *r->lat);
        rc = r->lat ? load_keys(r) : ERMA_ENOMEM;
    }
    if (rc == ERMA_OK)
        rc = o.kill_at > 0 ? failure(r, pids[0]) : sweep(r);
    if (rc != ERMA_OK)
        fprintf(stderr, "kvcs: %s\n", erma_strerror(rc));
    if (r && r->c)
        erma_kvcs_client_destroy(r->c);
    if (r) {
        for (unsigned b = 0; b < MAX_BINS; b++)
            free(r->bin_lat[b]);
        free(r->lat);
    }
    free(r);
    for (unsigned i = 0; i < o.servers; i++) {
        kill(pids[i], SIGKILL);
        waitpid(pids[i], NULL, 0);
    }
    return rc == ERMA_OK ? 0 : 1;
}
