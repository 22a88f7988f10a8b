/* raftkv's raft groups (raftkv.h, "raft groups"): a key's group, a
 * group's URI, and one replica's groups on threads of their own. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "erma/endpoint.h"
#include "erma/errors.h"
#include "erma/log.h"
#include "raftkv/server_impl.h"

unsigned raftkv_group_of(const void *key, uint32_t klen, unsigned groups)
{
    if (groups <= 1)
        return 0;
    const uint8_t *p = key;
    uint64_t h = 14695981039346656037ull; /* FNV-1a */
    for (uint32_t i = 0; i < klen; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    /* FNV's low k bits depend on the bytes' low k bits only, its high bits
     * little on the last bytes: mixed (MurmurHash3's finalizer), then the
     * high bits scaled to groups */
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return (unsigned)(((h >> 32) * groups) >> 32);
}

uint32_t raftkv_group_key(const char *prefix, unsigned g, unsigned groups, char *out,
                          size_t size)
{
    if (g >= (groups ? groups : 1))
        return 0;
    /* a key falls in g with odds 1 / groups: 2^20 tries miss for good */
    for (unsigned k = 0; k < 1u << 20; k++) {
        const int n = snprintf(out, size, "%s%u", prefix, k);
        if (n <= 0 || (size_t)n >= size)
            return 0;
        if (raftkv_group_of(out, (uint32_t)n, groups) == g)
            return (uint32_t)n;
    }
    return 0;
}

bool raftkv_groups_arg(const char *arg, unsigned *out)
{
    char *end;
    errno = 0;
    const unsigned long v = strtoul(arg, &end, 10);
    if (end == arg || *end || errno || v == 0 || v > RAFTKV_MAX_GROUPS)
        return false;
    *out = (unsigned)v;
    return true;
}

int raftkv_group_uri(const char *uri, unsigned g, char *out, size_t size)
{
    char first[256];
    if (g >= RAFTKV_MAX_GROUPS || erma_uri_for_thread(uri, (uint8_t)g, out, size) != ERMA_OK)
        return ERMA_EADDR;
    /* port 0 stays 0 for every thread: a group needs a port of its own */
    if (g > 0 && (erma_uri_for_thread(uri, 0, first, sizeof first) != ERMA_OK ||
                  strcmp(first, out) == 0))
        return ERMA_EADDR;
    return ERMA_OK;
}

struct group {
    struct raftkv_groups *gs;
    struct raftkv_server *s;
    pthread_t thread;
    bool started;
};

struct raftkv_groups {
    atomic_bool stop;
    unsigned n; /* servers created */
    struct group g[RAFTKV_MAX_GROUPS];
};

static bool stopped(void *ctx)
{
    return atomic_load_explicit(&((struct raftkv_groups *)ctx)->stop, memory_order_relaxed);
}

static void *group_main(void *arg)
{
    struct group *g = arg;
    while (!stopped(g->gs))
        raftkv_server_run(g->s, stopped, g->gs, 100000000);
    return NULL;
}

#define GROUPS_FILE "groups"

int raftkv__dir_groups(const char *dir)
{
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/" GROUPS_FILE, dir) >= sizeof path)
        return -1;
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? 0 : -1;
    unsigned g = 0;
    const int n = fscanf(f, "%u", &g);
    fclose(f);
    return n == 1 && g >= 1 && g <= RAFTKV_MAX_GROUPS ? (int)g : -1;
}

/* dir holds `groups` groups from now on: its file says so, made durable
 * the first time; ERMA_EINVAL when it holds one group's state (a log or
 * term there) or another number of groups, whose keys would move. */
static int mark_dir(const char *dir, unsigned groups)
{
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return ERMA_ESYS;
    const int had = raftkv__dir_groups(dir);
    char path[PATH_MAX], log[PATH_MAX];
    snprintf(path, sizeof path, "%s/meta", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    const bool one = access(path, F_OK) == 0 || access(log, F_OK) == 0;
    if (had < 0 || (had > 0 && (unsigned)had != groups) || (had == 0 && one)) {
        ERMA_ERROR("raftkv: %s holds %s, not %u raft groups", dir,
                   had > 0 ? "another number of groups" : "one replica's state", groups);
        return ERMA_EINVAL;
    }
    if (had > 0)
        return ERMA_OK;
    snprintf(path, sizeof path, "%s/" GROUPS_FILE, dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return ERMA_ESYS;
    const bool ok = fprintf(f, "%u\n", groups) > 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
    return fclose(f) == 0 && ok ? ERMA_OK : ERMA_ESYS;
}

/* Group g's replica: cfg with group g's peers, directory and seed. */
static int group_create(const struct raftkv_server_cfg *cfg, unsigned g, unsigned groups,
                        struct raftkv_server **out)
{
    char uri[RAFTKV_MAX_PEERS][128], dir[PATH_MAX];
    const char *peers[RAFTKV_MAX_PEERS];
    for (unsigned i = 0; i < cfg->npeers; i++) {
        const int rc = raftkv_group_uri(cfg->peers[i], g, uri[i], sizeof uri[i]);
        if (rc != ERMA_OK)
            return rc;
        peers[i] = uri[i];
    }
    if ((size_t)snprintf(dir, sizeof dir, "%s/%u", cfg->data_dir, g) >= sizeof dir)
        return ERMA_EINVAL;
    struct raftkv_server_cfg c = *cfg; /* raftkv_server_create makes dir */
    c.peers = peers;
    c.data_dir = dir;
    c.group = g;
    c.groups = groups;
    c.seed = (cfg->seed ? cfg->seed : cfg->id) * RAFTKV_MAX_GROUPS + g; /* timers apart */
    return raftkv_server_create(&c, out);
}

int raftkv_groups_start(const struct raftkv_server_cfg *cfg, unsigned groups,
                        struct raftkv_groups **out)
{
    if (!cfg || !out || !cfg->peers || !cfg->data_dir || cfg->npeers == 0 ||
        cfg->npeers > RAFTKV_MAX_PEERS || groups == 0 || groups > RAFTKV_MAX_GROUPS)
        return ERMA_EINVAL;
    struct raftkv_groups *gs = calloc(1, sizeof *gs);
    if (!gs)
        return ERMA_ENOMEM;
    atomic_init(&gs->stop, false);
    int rc = mark_dir(cfg->data_dir, groups);
    for (unsigned g = 0; g < groups && rc == ERMA_OK; g++) {
        gs->g[g].gs = gs;
        if ((rc = group_create(cfg, g, groups, &gs->g[g].s)) == ERMA_OK)
            gs->n++;
    }
    for (unsigned g = 0; g < gs->n && rc == ERMA_OK; g++) {
        if (pthread_create(&gs->g[g].thread, NULL, group_main, &gs->g[g]) != 0)
            rc = ERMA_ESYS;
        else
            gs->g[g].started = true;
    }
    if (rc != ERMA_OK) {
        raftkv_groups_stop(gs);
        return rc;
    }
    *out = gs;
    return ERMA_OK;
}

void raftkv_groups_stop(struct raftkv_groups *gs)
{
    if (!gs)
        return;
    atomic_store(&gs->stop, true);
    for (unsigned g = 0; g < gs->n; g++)
        if (gs->g[g].started)
            pthread_join(gs->g[g].thread, NULL);
    for (unsigned g = 0; g < gs->n; g++)
        raftkv_server_destroy(gs->g[g].s);
    free(gs);
}
