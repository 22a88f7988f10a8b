/*
 * kvcs_client - a kvcs client (erma/kvcs.h) that checks what it reads.
 *
 *   kvcs_client --uri URI --servers U1,U2,... [--replicas R] [--method read|rpc]
 *               [--ops N] [--keys K] [--depth D] [--cc-off] [--server-threads T]
 *               [--connect-s S]
 *
 * Loads K keys (default 1000), then runs N ops (default 100000), D at a
 * time (default 32): 90% GETs of a random key, 10% PUTs of a new version of
 * a random key (one PUT per key at a time). Values carry their key and
 * version. A GET is wrong when its value is not one of the key's, is older
 * than what the replica that answered had acknowledged before the GET
 * started, or newer than the last version PUT; a miss is wrong when that
 * replica had acknowledged a version. Prints one line: ops, failed, wrong,
 * failovers, median and p99 latency in microseconds, and on stderr the
 * first five failed ops, each replica's status and why it is marked down.
 * Exits 0 only when every op completed and wrong == 0. --server-threads T:
 * the servers run kvcs_server --threads T. --connect-s S: how long the
 * servers have to answer at the start (default 5 s; servers started just
 * before, under a sanitizer on a busy machine, may need more).
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "erma/clock.h"
#include "kvcs/kvcs.h"
#include "erma/sdk/rand.h"
#include "value.h"

#define MAX_SERVERS 64
#define MAX_DEPTH 256

struct key_state {
    uint32_t issued; /* the last version PUT */
    bool busy;
};

struct prog;

struct op {
    struct prog *p;
    bool live, put, timed;
    uint32_t key, version;
    uint32_t *floor; /* nservers: the key's acknowledged versions when it started */
    uint64_t start;
};

struct prog {
    struct kvcs_client *c;
    uint32_t nservers, nkeys, depth;
    uint64_t nops;
    struct key_state *keys;
    uint32_t *floor; /* nkeys x nservers: the last version each server acknowledged */
    struct op ops[MAX_DEPTH];
    uint32_t *op_floor;
    struct erma_rand rng;
    uint32_t loaded;
    uint64_t started, done, failed, wrong;
    uint64_t *lat, nlat;
};

static void key_name(uint32_t k, char key[16])
{
    snprintf(key, 16, "k%08u", k);
}

#define VALUE_SPAN 1000 /* values of 16 to 1015 bytes */

static uint32_t make_val(uint32_t k, uint32_t version, uint8_t *v)
{
    return kvcs_value_make(k, version, VALUE_SPAN, v);
}

static uint32_t version_of(uint32_t k, const uint8_t *val, uint32_t vlen)
{
    return kvcs_value_version(k, VALUE_SPAN, val, vlen);
}

static void report_wrong(struct prog *p, const struct op *o, const char *why, uint32_t v)
{
    if (p->wrong++ < 5)
        fprintf(stderr, "kvcs_client: wrong GET of key %u: %s (version %u, last PUT %u)\n",
                o->key, why, v, p->keys[o->key].issued);
}

static void check_get(struct prog *p, const struct op *o, int status, const uint8_t *val,
                      uint32_t vlen, uint32_t server)
{
    if (status != ERMA_OK && status != ERMA_ENOENT)
        return;
    if (server >= p->nservers) {
        report_wrong(p, o, "answered by no replica", 0);
        return;
    }
    const uint32_t floor = o->floor[server];
    if (status == ERMA_ENOENT) {
        if (floor)
            report_wrong(p, o, "absent from a replica that had it", 0);
        return;
    }
    const uint32_t v = version_of(o->key, val, vlen);
    if (v == 0)
        report_wrong(p, o, "not a value of the key", v);
    else if (v < floor)
        report_wrong(p, o, "older than the replica acknowledged", v);
    else if (v > p->keys[o->key].issued)
        report_wrong(p, o, "never PUT", v);
}

static void put_done(struct prog *p, const struct op *o, int status,
                     const struct kvcs_op_info *info)
{
    p->keys[o->key].busy = false;
    for (uint32_t i = 0; status == ERMA_OK && i < info->nreplicas; i++) {
        uint32_t *f = &p->floor[(size_t)o->key * p->nservers + info->replicas[i]];
        if (info->status[i] == ERMA_OK && o->version > *f)
            *f = o->version;
    }
}

/* The first few failed ops, each replica with what it answered and, when
 * marked down, why. */
static void report_failed(struct prog *p, const struct op *o, int status,
                          const struct kvcs_op_info *info)
{
    if (p->failed > 5)
        return;
    fprintf(stderr, "kvcs_client: %s of key %u failed: %s;", o->put ? "PUT" : "GET", o->key,
            erma_strerror(status));
    for (uint32_t i = 0; i < info->nreplicas; i++) {
        fprintf(stderr, " server %u: %s", info->replicas[i],
                info->status[i] == KVCS_NOT_TRIED ? "not tried"
                                                      : erma_strerror(info->status[i]));
        if (info->down_err[i])
            fprintf(stderr, " (down: %s)", erma_strerror(info->down_err[i]));
    }
    fprintf(stderr, "\n");
}

static void on_done(void *tag, int status, const uint8_t *val, uint32_t vlen)
{
    struct op *o = tag;
    struct prog *p = o->p;
    struct kvcs_op_info info;
    kvcs_op_info(p->c, &info);
    o->live = false;
    p->done++;
    if (status != ERMA_OK && status != ERMA_ENOENT) {
        p->failed++;
        report_failed(p, o, status, &info);
    }
    if (o->timed)
        p->lat[p->nlat++] = erma_now_ns() - o->start;
    if (o->put)
        put_done(p, o, status, &info);
    else
        check_get(p, o, status, val, vlen, info.answered);
}

/* The key of the next op: the next one to load, or a random one (not one
 * being PUT when put). */
static uint32_t next_key(struct prog *p, bool *put)
{
    if (p->loaded < p->nkeys) {
        *put = true;
        return p->loaded++;
    }
    *put = erma_rand_below(&p->rng, 10) == 0;
    uint32_t k;
    do
        k = (uint32_t)erma_rand_below(&p->rng, p->nkeys);
    while (*put && p->keys[k].busy);
    return k;
}

static int start_op(struct prog *p, struct op *o)
{
    static uint8_t val[1024];
    char key[16];
    bool put;
    const uint32_t k = next_key(p, &put);
    uint32_t *floor = o->floor;
    *o = (struct op){.p = p, .live = true, .put = put, .timed = p->started >= p->nkeys,
                     .key = k, .floor = floor, .start = erma_now_ns()};
    memcpy(floor, &p->floor[(size_t)k * p->nservers], p->nservers * sizeof *floor);
    key_name(k, key);
    p->started++;
    if (!put)
        return kvcs_get(p->c, key, 9, on_done, o);
    o->version = ++p->keys[k].issued;
    p->keys[k].busy = true;
    return kvcs_put(p->c, key, 9, val, make_val(k, o->version, val), on_done, o);
}

/* Runs the load and the ops, then waits for the last ones (30 s at most). */
static int run(struct prog *p)
{
    const uint64_t total = p->nkeys + p->nops;
    uint64_t end = UINT64_MAX;
    while (p->done < total && erma_now_ns() < end) {
        for (uint32_t i = 0; i < p->depth && p->started < total; i++) {
            if (p->ops[i].live)
                continue;
            const int rc = start_op(p, &p->ops[i]);
            if (rc != ERMA_OK) {
                fprintf(stderr, "kvcs_client: op refused: %s\n", erma_strerror(rc));
                return rc;
            }
        }
        if (p->started == total && end == UINT64_MAX)
            end = erma_now_ns() + 30000000000ull;
        kvcs_client_run_once(p->c);
    }
    return p->done == total ? ERMA_OK : ERMA_ETIMEDOUT;
}

static int by_value(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void summary(struct prog *p)
{
    struct kvcs_client_stats st;
    kvcs_client_get_stats(p->c, &st);
    qsort(p->lat, p->nlat, sizeof *p->lat, by_value);
    const double p50 = p->nlat ? p->lat[p->nlat / 2] / 1e3 : 0;
    const double p99 = p->nlat ? p->lat[p->nlat * 99 / 100] / 1e3 : 0;
    printf("kvcs_client: ops %lu failed %lu wrong %lu failovers %lu gets %lu puts %lu "
           "median_us %.1f p99_us %.1f\n",
           (unsigned long)p->nlat, (unsigned long)p->failed, (unsigned long)p->wrong,
           (unsigned long)st.failovers, (unsigned long)st.gets, (unsigned long)st.puts, p50,
           p99);
}

/* Splits a comma-separated list in place into at most max URIs. */
static uint32_t split(char *list, const char **out, uint32_t max)
{
    uint32_t n = 0;
    char *save = NULL;
    for (char *t = strtok_r(list, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save))
        out[n++] = t;
    return n;
}

static int usage(void)
{
    fprintf(stderr, "usage: kvcs_client --uri URI --servers U1,U2,... [--replicas R] "
                    "[--method read|rpc] [--ops N] [--keys K] [--depth D] [--cc-off]\n"
                    "                   [--server-threads T] [--connect-s S]\n");
    return 2;
}

static int parse(int argc, char **argv, struct kvcs_client_cfg *cfg, struct prog *p,
                 const char **uris)
{
    static const struct option opts[] = {
        {"uri", required_argument, NULL, 'u'},     {"servers", required_argument, NULL, 's'},
        {"replicas", required_argument, NULL, 'r'}, {"method", required_argument, NULL, 'm'},
        {"ops", required_argument, NULL, 'n'},     {"keys", required_argument, NULL, 'k'},
        {"depth", required_argument, NULL, 'd'},   {"cc-off", no_argument, NULL, 'c'},
        {"server-threads", required_argument, NULL, 't'},
        {"connect-s", required_argument, NULL, 'C'},      {NULL, 0, NULL, 0}};
    for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        if (o == 'u')
            cfg->uri = optarg;
        else if (o == 's')
            cfg->nservers = split(optarg, uris, MAX_SERVERS);
        else if (o == 'r')
            cfg->replicas = (uint32_t)strtoul(optarg, NULL, 0);
        else if (o == 'm' && (!strcmp(optarg, "read") || !strcmp(optarg, "rpc")))
            cfg->method = !strcmp(optarg, "read") ? KVCS_READ : KVCS_RPC;
        else if (o == 'n')
            p->nops = strtoull(optarg, NULL, 0);
        else if (o == 'k')
            p->nkeys = (uint32_t)strtoul(optarg, NULL, 0);
        else if (o == 'd')
            p->depth = (uint32_t)strtoul(optarg, NULL, 0);
        else if (o == 'c')
            cfg->cc_off = true;
        else if (o == 't')
            cfg->server_threads = (uint32_t)strtoul(optarg, NULL, 0);
        else if (o == 'C')
            cfg->connect_timeout_ns = strtoull(optarg, NULL, 0) * 1000000000ull;
        else
            return ERMA_EINVAL;
    }
    cfg->servers = uris;
    p->nservers = cfg->nservers;
    return cfg->uri && cfg->nservers && p->nkeys && p->depth && p->depth <= MAX_DEPTH &&
                   optind == argc
               ? ERMA_OK
               : ERMA_EINVAL;
}

static int prog_alloc(struct prog *p)
{
    p->keys = calloc(p->nkeys, sizeof *p->keys);
    p->floor = calloc((size_t)p->nkeys * p->nservers, sizeof *p->floor);
    p->op_floor = calloc((size_t)p->depth * p->nservers, sizeof *p->op_floor);
    p->lat = calloc(p->nops + p->nkeys, sizeof *p->lat);
    if (!p->keys || !p->floor || !p->op_floor || !p->lat)
        return ERMA_ENOMEM;
    for (uint32_t i = 0; i < p->depth; i++)
        p->ops[i].floor = &p->op_floor[(size_t)i * p->nservers];
    return ERMA_OK;
}

static void prog_free(struct prog *p)
{
    kvcs_client_destroy(p->c);
    free(p->keys);
    free(p->floor);
    free(p->op_floor);
    free(p->lat);
}

int main(int argc, char **argv)
{
    static struct prog p = {.nkeys = 1000, .nops = 100000, .depth = 32};
    static const char *uris[MAX_SERVERS];
    struct kvcs_client_cfg cfg = {0};
    if (parse(argc, argv, &cfg, &p, uris) != ERMA_OK)
        return usage();
    erma_rand_seed(&p.rng, erma_now_ns());
    int rc = prog_alloc(&p);
    if (rc == ERMA_OK && (rc = kvcs_client_create(&cfg, &p.c)) != ERMA_OK)
        fprintf(stderr, "kvcs_client: cannot reach the servers: %s\n", erma_strerror(rc));
    if (rc == ERMA_OK)
        rc = run(&p);
    if (p.c)
        summary(&p);
    prog_free(&p);
    return rc == ERMA_OK && p.wrong == 0 ? 0 : 1;
}
