/* The raftkv client: its ops, their completion, its loop and life
 * (raftkv/raftkv.h); the tries of an op at the replicas are
 * client_tries.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "erma/clock.h"
#include "erma/sdk/wire.h"
#include "kv/kv.h"
#include "raftkv/client_impl.h"
#include "raftkv/loop.h"

/* op waits (or no longer) to be tried at op->server. */
void raftkv__op_wait(struct op *op, bool waiting)
{
    const uint32_t d = (uint32_t)waiting - (uint32_t)op->waiting;
    op->c->waiting += d;
    op->c->srv[op->server].queued += d;
    op->waiting = waiting;
}

void raftkv__op_complete(struct op *op, int status, const uint8_t *val, uint32_t vlen)
{
    op->completed = true;
    raftkv__op_wait(op, false);
    op->status = status;
    op->val = val;
    op->vlen = vlen;
    op->c->completions++;
}

static int start(struct raftkv_client *c, uint8_t type, const void *key, uint32_t klen,
                 const void *val, uint32_t vlen, raftkv_fn cb, void *tag)
{
    if (!c || !key || klen == 0 || (vlen && !val) || !cb)
        return ERMA_EINVAL;
    struct op *op = NULL;
    for (uint32_t i = 0; i < c->cfg.max_ops && !op; i++)
        if (!c->ops[i].busy)
            op = &c->ops[i];
    if (!op)
        return ERMA_ENOSLOTS;
    const bool write = type != RAFTKV_GET && type != RAFTKV_GET_LOCAL;
    const size_t origin = write ? 24 : 0, size = origin + 8 + (size_t)klen + vlen;
    int rc = erma_msgbuf_alloc(c->rpc, size, &op->req);
    if (rc != ERMA_OK)
        return rc;
    rc = erma_msgbuf_alloc(c->rpc, 256, &op->resp);
    if (rc != ERMA_OK) {
        erma_msgbuf_free(c->rpc, &op->req);
        return rc;
    }
    /* the kv request after the origin: built in a view of the buffer */
    struct erma_msgbuf kv = op->req;
    kv.data += origin;
    kv.max_size -= origin;
    if (type == RAFTKV_PUT)
        rc = kv_req_put(&kv, key, klen, val, vlen);
    else if (type == RAFTKV_DEL)
        rc = kv_req_del(&kv, key, klen);
    else
        rc = kv_req_get(&kv, key, klen);
    if (rc != ERMA_OK) {
        erma_msgbuf_free(c->rpc, &op->req);
        erma_msgbuf_free(c->rpc, &op->resp);
        return rc;
    }
    op->seq = write ? ++c->next_seq : 0;
    if (write) {
        erma_put_le(op->req.data, c->cfg.id, 8);
        erma_put_le(op->req.data + 8, op->seq, 8);
    }
    erma_msgbuf_resize(&op->req, origin + kv.size);
    const uint64_t now = erma_now_ns();
    op->c = c;
    op->busy = true;
    op->have_bufs = true;
    op->inflight = op->completed = false;
    op->type = type;
    op->cb = cb;
    op->tag = tag;
    op->server = c->leader[raftkv_group_of(key, klen, c->cfg.groups)];
    op->deadline = now + c->cfg.op_timeout_ns;
    c->pending++;
    c->stats.ops++;
    raftkv__try(op, now);
    return ERMA_OK;
}

int raftkv_put(struct raftkv_client *c, const void *key, uint32_t klen,
               const void *val, uint32_t vlen, raftkv_fn cb, void *tag)
{
    return start(c, RAFTKV_PUT, key, klen, val, vlen, cb, tag);
}

int raftkv_del(struct raftkv_client *c, const void *key, uint32_t klen,
               raftkv_fn cb, void *tag)
{
    return start(c, RAFTKV_DEL, key, klen, NULL, 0, cb, tag);
}

int raftkv_get(struct raftkv_client *c, const void *key, uint32_t klen, bool stale,
               raftkv_fn cb, void *tag)
{
    return start(c, stale ? RAFTKV_GET_LOCAL : RAFTKV_GET, key, klen, NULL, 0, cb,
                 tag);
}

/* Runs the callback of a completed op and frees its slot. */
static void finish(struct op *op)
{
    struct raftkv_client *c = op->c;
    c->completions--;
    c->pending--;
    op->status == ERMA_OK || op->status == ERMA_ENOENT ? c->stats.done++ : c->stats.failed++;
    op->cb(op->tag, op->status, op->val, op->vlen);
    erma_msgbuf_free(c->rpc, &op->req);
    erma_msgbuf_free(c->rpc, &op->resp);
    op->have_bufs = false;
    op->busy = op->completed = false;
}

int raftkv_client_poll(struct raftkv_client *c)
{
    int work = (int)c->ended;
    c->ended = 0;
    if (!c->completions && !c->waiting && !c->tries)
        return work;
    const uint64_t now = erma_now_ns();
    if (c->tries)
        work += raftkv__drop_silent(c, now);
    if (!c->completions && !c->waiting)
        return work;
    for (uint32_t i = 0; i < c->cfg.max_ops; i++) {
        struct op *op = &c->ops[i];
        if (!op->busy)
            continue;
        if (op->waiting && now >= op->deadline)
            raftkv__op_complete(op, ERMA_ETIMEDOUT, NULL, 0);
        else if (op->waiting && now >= op->retry_at)
            raftkv__try(op, now);
        if (op->completed) {
            finish(op);
            work++;
        }
    }
    return work;
}

uint64_t raftkv_client_next_timer(const struct raftkv_client *c)
{
    if (c->completions)
        return 0;
    uint64_t t = UINT64_MAX;
    const uint64_t try_len = c->tries ? raftkv__try_ns(c) : 0;
    for (unsigned i = 0; c->tries && i < c->nsrv; i++)
        if (c->srv[i].tries && c->srv[i].sess >= 0 && c->srv[i].heard_at + try_len < t)
            t = c->srv[i].heard_at + try_len; /* raftkv__drop_silent's */
    if (!c->waiting)
        return t;
    for (uint32_t i = 0; i < c->cfg.max_ops; i++) {
        const struct op *op = &c->ops[i];
        if (op->busy && op->waiting) {
            const uint64_t at = op->retry_at < op->deadline ? op->retry_at : op->deadline;
            t = at < t ? at : t;
        }
    }
    return t;
}

int raftkv_client_run_once(struct raftkv_client *c)
{
    const int work = erma_endpoint_run_once(c->ep);
    return work + raftkv_client_poll(c);
}

static int poll_obj(void *c)
{
    return raftkv_client_poll(c);
}

static uint64_t next_timer_obj(const void *c)
{
    return raftkv_client_next_timer(c);
}

int raftkv_client_run(struct raftkv_client *c, bool (*stop)(void *ctx), void *ctx,
                      uint64_t timeout_ns)
{
    return raftkv__run(c->ep, poll_obj, next_timer_obj, c, stop, ctx, timeout_ns);
}

int raftkv_client_create(const struct raftkv_client_cfg *cfg,
                         struct raftkv_client **out)
{
    if (!cfg || !out || !cfg->uri || !cfg->servers || cfg->nservers == 0 ||
        cfg->nservers > RAFTKV_MAX_PEERS || cfg->groups > RAFTKV_MAX_GROUPS)
        return ERMA_EINVAL;
    struct raftkv_client *c = calloc(1, sizeof *c);
    if (!c)
        return ERMA_ENOMEM;
    c->cfg = *cfg;
    struct raftkv_client_cfg *k = &c->cfg;
    if (!k->type_base)
        k->type_base = RAFTKV_TYPE_BASE;
    if (!k->max_ops)
        k->max_ops = 256;
    if (!k->op_timeout_ns)
        k->op_timeout_ns = 10000000000ull;
    if (!k->try_timeout_ns)
        k->try_timeout_ns = 1000000000ull;
    if (!k->retry_ns)
        k->retry_ns = 10000000;
    if (!k->failure_ns)
        k->failure_ns = 200000000;
    if (!k->try_min_ns)
        k->try_min_ns = 100000000;
    if (k->try_min_ns > k->failure_ns)
        k->try_min_ns = k->failure_ns;
    if (!k->down_ns)
        k->down_ns = 1000000000ull;
    k->servers = NULL;
    int rc = ERMA_OK;
    while (k->id == 0 && rc == ERMA_OK)
        if (getrandom(&k->id, sizeof k->id, 0) != sizeof k->id)
            rc = ERMA_ESYS;
    if (!k->groups)
        k->groups = 1;
    c->nsrv = k->nservers * k->groups;
    for (unsigned i = 0; i < c->nsrv; i++) {
        const char *uri = cfg->servers[i % k->nservers];
        struct server *s = &c->srv[i];
        s->sess = -1;
        /* with groups, every group's URI as the servers make theirs */
        if (k->groups == 1 ? !uri || (size_t)snprintf(s->uri, URI_MAX, "%s", uri) >= URI_MAX
                           : raftkv_group_uri(uri, i / k->nservers, s->uri, URI_MAX) != ERMA_OK)
            rc = ERMA_EADDR;
    }
    for (unsigned g = 0; g < k->groups; g++)
        c->leader[g] = g * k->nservers;
    c->ops = calloc(k->max_ops, sizeof *c->ops);
    if (rc == ERMA_OK && !c->ops)
        rc = ERMA_ENOMEM;
    if (rc == ERMA_OK)
        rc = erma_nexus_create(NULL, &c->nx);
    if (rc == ERMA_OK)
        rc = erma_endpoint_create(k->uri, 0, k->ep_cfg, &c->ep);
    if (rc == ERMA_OK) {
        const struct erma_rpc_cfg rcfg = {.failure_ns = k->failure_ns,
                                          .req_timeout_ns = k->try_timeout_ns,
                                          .connect_timeout_ns = k->failure_ns,
                                          .sm_handler = raftkv__client_sm,
                                          .sm_ctx = c};
        rc = erma_rpc_create(c->nx, c->ep, &rcfg, &c->rpc);
    }
    for (unsigned i = 0; rc == ERMA_OK && i < c->nsrv; i++) {
        c->srv[i].sess = erma_session_create(c->rpc, c->srv[i].uri, 0);
        if (c->srv[i].sess < 0)
            c->srv[i].sess = -1;
    }
    if (rc != ERMA_OK) {
        raftkv_client_destroy(c);
        return rc;
    }
    *out = c;
    return ERMA_OK;
}

void raftkv_client_destroy(struct raftkv_client *c)
{
    if (!c)
        return;
    c->destroying = true;
    for (uint32_t i = 0; c->ops && i < c->cfg.max_ops; i++) {
        struct op *op = &c->ops[i];
        if (op->busy && op->have_bufs && !op->inflight) {
            erma_msgbuf_free(c->rpc, &op->req);
            erma_msgbuf_free(c->rpc, &op->resp);
            op->have_bufs = false;
        }
    }
    erma_rpc_destroy(c->rpc); /* in-flight tries end, freeing their buffers */
    for (uint32_t i = 0; c->ops && i < c->cfg.max_ops; i++) {
        struct op *op = &c->ops[i];
        if (op->busy)
            op->cb(op->tag, ERMA_ECANCELLED, NULL, 0);
    }
    erma_endpoint_destroy(c->ep);
    erma_nexus_destroy(c->nx);
    free(c->ops);
    free(c);
}

struct erma_endpoint *raftkv_client_endpoint(const struct raftkv_client *c)
{
    return c->ep;
}

unsigned raftkv_client_leader(const struct raftkv_client *c)
{
    return c->leader[0];
}

uint32_t raftkv_client_pending(const struct raftkv_client *c)
{
    return c->pending;
}

void raftkv_client_get_stats(const struct raftkv_client *c,
                             struct raftkv_client_stats *out)
{
    *out = c->stats;
}

unsigned raftkv_split(char *list, const char **out, unsigned max)
{
    unsigned n = 0;
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == max)
            return max + 1;
        out[n++] = t;
    }
    return n;
}
