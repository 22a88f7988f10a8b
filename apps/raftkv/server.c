/* A raftkv replica: libraft over the erma io, the kv state machine and
 * the client-facing service (service.c), its data directory and its
 * loop (raftkv/raftkv.h). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "erma/clock.h"
#include "erma/log.h"
#include "kv/kv.h"
#include "raftkv/loop.h"
#include "raftkv/server_impl.h"

/* ---- data directory ---- */

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char path[PATH_MAX];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < sizeof path)
                unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

static int make_dir(struct raftkv_server *s)
{
    if (s->cfg.data_dir) {
        if ((size_t)snprintf(s->dir, sizeof s->dir, "%s", s->cfg.data_dir) >= sizeof s->dir)
            return ERMA_EINVAL;
        if (mkdir(s->dir, 0700) != 0 && errno != EEXIST) {
            ERMA_ERROR("raftkv: mkdir %s: %s", s->dir, strerror(errno));
            return ERMA_ESYS;
        }
        if (raftkv__dir_groups(s->dir) != 0) { /* not one replica's state */
            ERMA_ERROR("raftkv: %s holds raft groups (its file 'groups'): start them with "
                       "raftkv_groups_start()", s->dir);
            return ERMA_EINVAL;
        }
        return ERMA_OK;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(s->dir, sizeof s->dir, "%s/raftkv-%llu-XXXXXX", tmp && *tmp ? tmp : "/tmp",
             (unsigned long long)s->cfg.id);
    if (!mkdtemp(s->dir)) {
        ERMA_ERROR("raftkv: mkdtemp %s: %s", s->dir, strerror(errno));
        return ERMA_ESYS;
    }
    s->own_dir = true;
    return ERMA_OK;
}

/* ---- life ---- */

static void raft_closed(struct raft *r)
{
    struct raftkv_server *s = r->data;
    s->closed = true;
}

static int start_raft(struct raftkv_server *s)
{
    const struct raftkv_server_cfg *c = &s->cfg;
    int rc = raft_init(&s->raft, &s->io, &s->fsm, c->id, s->peers[c->id - 1]);
    if (rc != 0) {
        ERMA_ERROR("raftkv %llu: raft_init: %s (%s)", (unsigned long long)c->id,
                   raft_strerror(rc), s->io.errmsg);
        return ERMA_EINVAL;
    }
    s->raft_inited = true;
    s->raft.data = s;
    raftkv_io_watch(&s->io, &s->raft);
    raft_set_heartbeat_timeout(&s->raft, c->heartbeat_ms);
    raft_set_election_timeout(&s->raft, c->election_ms);
    raft_set_install_snapshot_timeout(&s->raft, c->election_ms);
    raft_set_snapshot_threshold(&s->raft, c->snapshot_threshold);
    raft_set_snapshot_trailing(&s->raft, c->snapshot_trailing);
    raft_set_pre_vote(&s->raft, true);
    /* Every replica bootstraps the same configuration; a directory with
     * state refuses (RAFT_CANTBOOTSTRAP) and keeps its own. */
    struct raft_configuration conf;
    raft_configuration_init(&conf);
    for (unsigned i = 0; i < c->npeers && rc == 0; i++)
        rc = raft_configuration_add(&conf, i + 1, s->peers[i], RAFT_VOTER);
    if (rc == 0)
        rc = raft_bootstrap(&s->raft, &conf);
    raft_configuration_close(&conf);
    if (rc != 0 && rc != RAFT_CANTBOOTSTRAP) {
        ERMA_ERROR("raftkv %llu: bootstrap: %s (%s)", (unsigned long long)c->id,
                   raft_strerror(rc), raft_errmsg(&s->raft));
        return ERMA_ESYS;
    }
    rc = raft_start(&s->raft);
    if (rc != 0) {
        ERMA_ERROR("raftkv %llu: raft_start: %s (%s)", (unsigned long long)c->id,
                   raft_strerror(rc), raft_errmsg(&s->raft));
        return ERMA_ESYS;
    }
    for (unsigned i = 0; i < c->npeers; i++)
        if (i + 1 != c->id)
            raftkv_io_connect(&s->io, i + 1, s->peers[i]);
    return ERMA_OK;
}

int raftkv_server_create(const struct raftkv_server_cfg *cfg,
                         struct raftkv_server **out)
{
    if (!cfg || !out || !cfg->peers || cfg->npeers == 0 ||
        cfg->npeers > RAFTKV_MAX_PEERS || cfg->id == 0 || cfg->id > cfg->npeers ||
        cfg->groups > RAFTKV_MAX_GROUPS || cfg->group >= (cfg->groups ? cfg->groups : 1))
        return ERMA_EINVAL;
    struct raftkv_server *s = calloc(1, sizeof *s);
    if (!s)
        return ERMA_ENOMEM;
    s->cfg = *cfg;
    struct raftkv_server_cfg *c = &s->cfg;
    for (unsigned i = 0; i < c->npeers; i++) {
        if (!cfg->peers[i] ||
            (size_t)snprintf(s->peers[i], URI_MAX, "%s", cfg->peers[i]) >= URI_MAX) {
            free(s);
            return ERMA_EADDR;
        }
        s->peer_ptrs[i] = s->peers[i];
    }
    c->peers = s->peer_ptrs;
    if (!c->type_base)
        c->type_base = RAFTKV_TYPE_BASE;
    if (!c->heartbeat_ms)
        c->heartbeat_ms = 50;
    if (!c->election_ms)
        c->election_ms = 500;
    if (c->election_ms <= c->heartbeat_ms)
        c->election_ms = c->heartbeat_ms * 10;
    if (!c->snapshot_threshold)
        c->snapshot_threshold = 1024;
    if (!c->snapshot_trailing)
        c->snapshot_trailing = 128;
    if (!c->kv_buckets)
        c->kv_buckets = 1u << 16;
    if (!c->kv_log_bytes)
        c->kv_log_bytes = 64ull << 20;
    if (!c->failure_ns)
        c->failure_ns = 200000000;
    s->pend.next = s->pend.prev = &s->pend;
    s->val = malloc(KV_MAX_ITEM);
    int rc = s->val ? make_dir(s) : ERMA_ENOMEM;
    if (rc == ERMA_OK)
        rc = erma_nexus_create(NULL, &s->nx);
    if (rc == ERMA_OK)
        rc = raftkv__service_init(s);
    if (rc == ERMA_OK &&
        (rc = raftkv_fsm_init(&s->fsm, c->kv_buckets, c->kv_log_bytes)) == ERMA_OK)
        s->fsm_inited = true;
    if (rc == ERMA_OK) {
        const struct raftkv_io_cfg icfg = {.dir = s->dir, .type_base = c->type_base,
                                           .no_fsync = c->no_fsync, .seed = c->seed};
        if ((rc = raftkv_io_init(&s->io, s->nx, &icfg)) == ERMA_OK)
            s->io_inited = true;
    }
    if (rc == ERMA_OK)
        rc = erma_endpoint_create(s->peers[c->id - 1], 0, c->ep_cfg, &s->ep);
    if (rc == ERMA_OK) {
        const struct erma_rpc_cfg rcfg = {.failure_ns = c->failure_ns,
                                          .rto_ns = c->rto_ns,
                                          .connect_timeout_ns = c->failure_ns,
                                          /* session tokens from the clock: a restarted
                                           * replica must not reuse its last life's (a
                                           * peer would take its requests for stale) */
                                          .seed = 0,
                                          .sm_handler = raftkv_io_sm,
                                          .sm_ctx = &s->io};
        rc = erma_rpc_create(s->nx, s->ep, &rcfg, &s->rpc);
    }
    if (rc == ERMA_OK) {
        raftkv_io_attach(&s->io, s->rpc);
        rc = start_raft(s);
    }
    if (rc != ERMA_OK) {
        raftkv_server_destroy(s);
        return rc;
    }
    *out = s;
    return ERMA_OK;
}

void raftkv_server_destroy(struct raftkv_server *s)
{
    if (!s)
        return;
    if (s->raft_inited) {
        raft_close(&s->raft, raft_closed);
        /* the io completes its close at once; a bounded wait all the same */
        for (int i = 0; i < 1000 && !s->closed; i++)
            raftkv_io_poll(&s->io);
    }
    s->closed = true;
    raftkv__service_abort(s);
    erma_rpc_destroy(s->rpc);
    erma_endpoint_destroy(s->ep);
    erma_nexus_destroy(s->nx);
    if (s->io_inited)
        raftkv_io_destroy(&s->io);
    if (s->fsm_inited)
        raftkv_fsm_close(&s->fsm);
    if (s->own_dir)
        remove_dir(s->dir);
    free(s->val);
    free(s);
}

struct erma_endpoint *raftkv_server_endpoint(const struct raftkv_server *s)
{
    return s->ep;
}

struct raft *raftkv_server_raft(struct raftkv_server *s)
{
    return &s->raft;
}

const struct raft_fsm *raftkv_server_fsm(const struct raftkv_server *s)
{
    return &s->fsm;
}

const struct raft_io *raftkv_server_io(const struct raftkv_server *s)
{
    return &s->io;
}

const char *raftkv_server_dir(const struct raftkv_server *s)
{
    return s->dir;
}

int raftkv_server_state(const struct raftkv_server *s)
{
    return raft_state((struct raft *)&s->raft);
}

void raftkv_server_get_stats(const struct raftkv_server *s,
                             struct raftkv_server_stats *out)
{
    *out = s->stats;
}

int raftkv_server_poll(struct raftkv_server *s)
{
    return s->closed ? 0 : raftkv_io_poll(&s->io);
}

uint64_t raftkv_server_next_timer(const struct raftkv_server *s)
{
    return s->closed ? UINT64_MAX : raftkv_io_next_timer(&s->io);
}

int raftkv_server_run_once(struct raftkv_server *s)
{
    const int work = erma_endpoint_run_once(s->ep);
    return work + raftkv_server_poll(s);
}

static int poll_obj(void *s)
{
    return raftkv_server_poll(s);
}

static uint64_t next_timer_obj(const void *s)
{
    return raftkv_server_next_timer(s);
}

int raftkv_server_run(struct raftkv_server *s, bool (*stop)(void *ctx), void *ctx,
                      uint64_t timeout_ns)
{
    return raftkv__run(s->ep, poll_obj, next_timer_obj, s, stop, ctx, timeout_ns);
}
