/* A raftkv replica: libraft over the erma io, the kv state machine and
 * the client-facing service (raftkv/raftkv.h). */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "erma/clock.h"
#include "erma/log.h"
#include "erma/sim.h"
#include "erma/wire.h"
#include "kv/kv.h"
#include "raftkv/loop.h"
#include "raftkv/raftkv.h"

#define URI_MAX 128

enum pend_kind { P_WRITE, P_READ };

struct link {
    struct link *next, *prev;
};

/* A client request waiting for raft (an apply or a barrier). */
struct pending {
    struct link link; /* first: a link is its pending */
    struct raftkv_server *s;
    struct erma_req *req;
    enum pend_kind kind;
    union {
        struct raft_apply apply;
        struct raft_barrier barrier;
    };
    uint32_t klen;
    uint8_t key[];
};

struct raftkv_server {
    struct raftkv_server_cfg cfg;
    char peers[RAFTKV_MAX_PEERS][URI_MAX];
    const char *peer_ptrs[RAFTKV_MAX_PEERS];
    char dir[PATH_MAX];
    bool own_dir;
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    struct erma_rpc *rpc;
    struct raft_io io;
    struct raft_fsm fsm;
    struct raft raft;
    bool io_inited, fsm_inited, raft_inited, closed;
    struct link pend; /* the pending requests */
    uint8_t *val;        /* a GET's value */
    struct raftkv_server_stats stats;
};

/* [i32 status][u32 len][bytes] */
static void answer(struct erma_req *req, int status, const void *bytes, uint32_t len)
{
    struct erma_msgbuf *r = erma_req_resp_buf(req), own;
    if ((size_t)len + 8 > r->max_size) {
        if (erma_msgbuf_alloc(erma_req_rpc(req), (size_t)len + 8, &own) == ERMA_OK) {
            r = &own;
        } else {
            status = ERMA_ENOMEM;
            len = 0;
        }
    }
    erma_msgbuf_resize(r, (size_t)len + 8);
    erma_put_le(r->data, (uint32_t)status, 4);
    erma_put_le(r->data + 4, len, 4);
    if (len)
        memcpy(r->data + 8, bytes, len);
    erma_req_respond(req, r);
}

/* Not the leader: where it is, if known. */
static void redirect(struct raftkv_server *s, struct erma_req *req)
{
    raft_id id = 0;
    const char *addr = NULL;
    raft_leader(&s->raft, &id, &addr);
    s->stats.redirects++;
    if (!addr || id == s->cfg.id)
        addr = "";
    answer(req, RAFTKV_REDIRECT, addr, (uint32_t)strlen(addr));
}

#define ORIGIN 24 /* a write's [u64 client][u64 seq][u64 floor] */

/* Parses [u32 klen][u32 vlen][key][value] (with_value) or [u32 klen][key],
 * after skip bytes. */
static int parse(struct erma_req *req, size_t skip, bool with_value, const uint8_t **key,
                 uint32_t *klen, const uint8_t **val, uint32_t *vlen)
{
    const uint8_t *p = erma_req_data(req);
    size_t n = erma_req_size(req);
    const size_t hdr = with_value ? 8 : 4;
    if (!p || n < skip + hdr)
        return ERMA_EBADPKT;
    p += skip;
    n -= skip;
    *klen = (uint32_t)erma_get_le(p, 4);
    *vlen = with_value ? (uint32_t)erma_get_le(p + 4, 4) : 0;
    if (*klen == 0 || (uint64_t)hdr + *klen + *vlen != n)
        return ERMA_EBADPKT;
    *key = p + hdr;
    *val = p + hdr + *klen;
    return ERMA_OK;
}

/* Parses req and checks that this replica, as the leader, takes it; false
 * when it has answered already (malformed, shutting down, or a redirect). */
static bool admit(struct raftkv_server *s, struct erma_req *req, size_t skip,
                  bool with_value, const uint8_t **key, uint32_t *klen, const uint8_t **val,
                  uint32_t *vlen)
{
    const int rc = parse(req, skip, with_value, key, klen, val, vlen);
    if (rc != ERMA_OK) {
        answer(req, rc, NULL, 0);
        return false;
    }
    if (s->closed) {
        answer(req, ERMA_EAGAIN, NULL, 0);
        return false;
    }
    if (raft_state(&s->raft) != RAFT_LEADER) {
        redirect(s, req);
        return false;
    }
    return true;
}

static struct pending *pend_new(struct raftkv_server *s, struct erma_req *req,
                                enum pend_kind kind, const void *key, uint32_t klen)
{
    struct pending *p = calloc(1, sizeof *p + klen);
    if (!p)
        return NULL;
    p->s = s;
    p->req = req;
    p->kind = kind;
    p->klen = klen;
    if (klen)
        memcpy(p->key, key, klen);
    p->link.next = s->pend.next;
    p->link.prev = &s->pend;
    p->link.next->prev = &p->link;
    s->pend.next = &p->link;
    return p;
}

static void pend_free(struct pending *p)
{
    p->link.prev->next = p->link.next;
    p->link.next->prev = p->link.prev;
    free(p);
}

static void applied(struct raft_apply *a, int status, void *result)
{
    struct pending *p = a->data;
    if (status == 0) {
        answer(p->req, (int)(intptr_t)result, NULL, 0);
    } else {
        /* leadership lost or shutting down: the outcome is unknown */
        p->s->stats.failed++;
        answer(p->req, ERMA_EAGAIN, NULL, 0);
    }
    pend_free(p);
}

static void write_req(struct erma_req *req, void *ctx, bool del)
{
    struct raftkv_server *s = ctx;
    const uint8_t *key, *val;
    uint32_t klen, vlen;
    if (!admit(s, req, ORIGIN, !del, &key, &klen, &val, &vlen))
        return;
    del ? s->stats.dels++ : s->stats.puts++;
    const uint8_t *o = erma_req_data(req);
    const struct raftkv_origin origin = {erma_get_le(o, 8), erma_get_le(o + 8, 8),
                                         erma_get_le(o + 16, 8)};
    struct raft_buffer buf;
    int rc = del ? raftkv_cmd_del(&buf, &origin, key, klen)
             : raftkv_cmd_put(&buf, &origin, key, klen, val, vlen);
    if (rc != ERMA_OK) {
        answer(req, rc, NULL, 0);
        return;
    }
    struct pending *p = pend_new(s, req, P_WRITE, NULL, 0);
    if (!p) {
        raft_free(buf.base);
        answer(req, ERMA_ENOMEM, NULL, 0);
        return;
    }
    p->apply.data = p;
    rc = raft_apply(&s->raft, &p->apply, &buf, 1, applied);
    if (rc != 0) {
        raft_free(buf.base);
        pend_free(p);
        if (rc == RAFT_NOTLEADER)
            redirect(s, req);
        else
            answer(req, rc == RAFT_NOMEM ? ERMA_ENOMEM : ERMA_EAGAIN, NULL, 0);
    }
}

static void on_put(struct erma_req *req, void *ctx)
{
    write_req(req, ctx, false);
}

static void on_del(struct erma_req *req, void *ctx)
{
    write_req(req, ctx, true);
}

static void read_local(struct raftkv_server *s, struct erma_req *req, const void *key,
                       uint32_t klen)
{
    uint32_t vlen = 0;
    const int rc = kv_get(raftkv_fsm_kv(&s->fsm), key, klen, s->val,
                          KV_MAX_ITEM, &vlen);
    answer(req, rc, rc == ERMA_OK ? s->val : NULL, rc == ERMA_OK ? vlen : 0);
}

/* The barrier issued after the GET arrived is applied: every write
 * acknowledged before it is in the table. */
static void barrier_done(struct raft_barrier *b, int status)
{
    struct pending *p = b->data;
    if (status == 0) {
        read_local(p->s, p->req, p->key, p->klen);
    } else {
        p->s->stats.failed++;
        answer(p->req, ERMA_EAGAIN, NULL, 0);
    }
    pend_free(p);
}

static void on_get(struct erma_req *req, void *ctx)
{
    struct raftkv_server *s = ctx;
    const uint8_t *key, *val;
    uint32_t klen, vlen;
    if (!admit(s, req, 0, false, &key, &klen, &val, &vlen))
        return;
    s->stats.gets++;
    struct pending *p = pend_new(s, req, P_READ, key, klen);
    if (!p) {
        answer(req, ERMA_ENOMEM, NULL, 0);
        return;
    }
    p->barrier.data = p;
    const int rc = raft_barrier(&s->raft, &p->barrier, barrier_done);
    if (rc != 0) {
        pend_free(p);
        if (rc == RAFT_NOTLEADER)
            redirect(s, req);
        else
            answer(req, rc == RAFT_NOMEM ? ERMA_ENOMEM : ERMA_EAGAIN, NULL, 0);
    }
}

static void on_get_local(struct erma_req *req, void *ctx)
{
    struct raftkv_server *s = ctx;
    const uint8_t *key, *val;
    uint32_t klen, vlen;
    const int rc = parse(req, 0, false, &key, &klen, &val, &vlen);
    if (rc != ERMA_OK) {
        answer(req, rc, NULL, 0);
        return;
    }
    s->stats.local_gets++;
    read_local(s, req, key, klen);
}

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
        cfg->npeers > RAFTKV_MAX_PEERS || cfg->id == 0 || cfg->id > cfg->npeers)
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
    const uint8_t b = c->type_base;
    if (rc == ERMA_OK)
        rc = erma_handler_register(s->nx, b + RAFTKV_PUT, on_put, ERMA_DISPATCH, s);
    if (rc == ERMA_OK)
        rc = erma_handler_register(s->nx, b + RAFTKV_DEL, on_del, ERMA_DISPATCH, s);
    if (rc == ERMA_OK)
        rc = erma_handler_register(s->nx, b + RAFTKV_GET, on_get, ERMA_DISPATCH, s);
    if (rc == ERMA_OK)
        rc = erma_handler_register(s->nx, b + RAFTKV_GET_LOCAL, on_get_local,
                                   ERMA_DISPATCH, s);
    if (rc == ERMA_OK &&
        (rc = raftkv_fsm_init(&s->fsm, c->kv_buckets, c->kv_log_bytes)) == ERMA_OK)
        s->fsm_inited = true;
    if (rc == ERMA_OK) {
        const struct raftkv_io_cfg icfg = {.dir = s->dir, .type_base = b,
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
    /* requests raft never answered: their erma_reqs go with the rpc */
    while (s->pend.next != &s->pend) {
        struct pending *p = (struct pending *)s->pend.next;
        answer(p->req, ERMA_EAGAIN, NULL, 0);
        pend_free(p);
    }
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
    return raftkv_run(s->ep, poll_obj, next_timer_obj, s, stop, ctx, timeout_ns);
}

/* ---- the sim fabric ---- */

struct sim_hook {
    struct raftkv_server *const *servers;
    struct raftkv_client *const *clients;
    unsigned ns, nc;
    bool (*done)(void *ctx);
    void *ctx;
    bool first, finished;
};

/* erma_sim_run asks done() before its first pass, then after every round
 * of passes: the first is let through so that a round always runs (and
 * sends what the last polls queued) between polls. */
static bool sim_hook(void *ctx)
{
    struct sim_hook *h = ctx;
    if (h->first) {
        h->first = false;
        return false;
    }
    int work = 0;
    for (unsigned i = 0; i < h->ns; i++)
        if (h->servers[i])
            work += raftkv_server_poll(h->servers[i]);
    for (unsigned i = 0; i < h->nc; i++)
        if (h->clients[i])
            work += raftkv_client_poll(h->clients[i]);
    h->finished = h->done && h->done(h->ctx);
    return h->finished || work > 0;
}

int raftkv_sim_run(struct erma_sim *sim, struct raftkv_server *const *servers,
                   unsigned nservers, struct raftkv_client *const *clients,
                   unsigned nclients, uint64_t duration_ns, bool (*done)(void *ctx),
                   void *ctx)
{
    struct erma_endpoint *eps[2 * RAFTKV_MAX_PEERS + 64];
    unsigned n = 0;
    if (nservers + nclients > sizeof eps / sizeof eps[0])
        return ERMA_EINVAL;
    for (unsigned i = 0; i < nservers; i++)
        if (servers[i])
            eps[n++] = servers[i]->ep;
    for (unsigned i = 0; i < nclients; i++)
        if (clients[i])
            eps[n++] = raftkv_client_endpoint(clients[i]);
    erma_sim_use_clock(sim);
    const uint64_t end = erma_sim_now(sim) + duration_ns;
    struct sim_hook h = {servers, clients, nservers, nclients, done, ctx, false, false};
    if (done && done(ctx))
        return ERMA_OK;
    for (;;) {
        const uint64_t now = erma_sim_now(sim);
        if (now >= end)
            return done && done(ctx) ? ERMA_OK : ERMA_ETIMEDOUT;
        uint64_t until = end;
        for (unsigned i = 0; i < nservers; i++)
            if (servers[i]) {
                const uint64_t t = raftkv_server_next_timer(servers[i]);
                until = t < until ? t : until;
            }
        for (unsigned i = 0; i < nclients; i++)
            if (clients[i]) {
                const uint64_t t = raftkv_client_next_timer(clients[i]);
                until = t < until ? t : until;
            }
        h.first = true;
        erma_sim_run(sim, eps, n, until > now ? until - now : 0, sim_hook, &h);
        if (h.finished)
            return ERMA_OK;
    }
}
