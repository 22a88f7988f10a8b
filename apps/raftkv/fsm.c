/* The raft state machine over apps/kv's table (raftkv/raftkv.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "erma/errors.h"
#include "erma/sdk/wire.h"
#include "kv/index.h"
#include "kv/kv.h"
#include "raftkv/raftkv.h"

#define SNAP_MAGIC 0x3250414e53564b52ull /* "RKVSNAP2" */
#define CMD_HDR 33 /* [u8 op][u64 client][u64 seq][u64 floor][u32 klen][u32 vlen] */
#define MAX_CLIENTS 1024

/* What one client's writes did: the outcome of each seq >= floor applied. */
struct done {
    uint64_t seq;
    int32_t status;
};

struct client {
    uint64_t id, floor, last; /* last: the apply count when it last wrote */
    uint32_t n, cap;
    struct done *done;
};

struct fsm {
    struct kv *kv;
    struct kv_index *ix; /* the keys, in order: what a snapshot walks */
    uint32_t buckets;
    uint64_t log_bytes;
    uint64_t restores;
    uint8_t *val;        /* a value's bytes while walking */
    uint64_t applied;    /* commands applied, snapshots included */
    uint32_t nclients;
    struct client clients[MAX_CLIENTS];
    uint64_t duplicates;
};

static int table_new(struct fsm *f)
{
    struct kv *kv;
    struct kv_index *ix;
    int rc = kv_create(f->buckets, f->log_bytes, &kv);
    if (rc != ERMA_OK)
        return rc;
    rc = kv_index_create(0x72616674, &ix);
    if (rc != ERMA_OK) {
        kv_destroy(kv);
        return rc;
    }
    kv_destroy(f->kv);
    if (f->ix)
        kv_index_destroy(f->ix);
    f->kv = kv;
    f->ix = ix;
    return ERMA_OK;
}

static int put(struct fsm *f, const uint8_t *key, uint32_t klen, const uint8_t *val,
               uint32_t vlen)
{
    int rc = kv_put(f->kv, key, klen, val, vlen);
    if (rc == ERMA_OK)
        rc = kv_index_add(f->ix, key, klen);
    return rc;
}

static void clients_clear(struct fsm *f)
{
    for (uint32_t i = 0; i < f->nclients; i++)
        free(f->clients[i].done);
    f->nclients = 0;
}

/* The client's record, made when new; when the table is full, the client
 * that wrote least recently is forgotten (a retry of its last writes would
 * run again). Every replica picks the same: the order is the log's. */
static struct client *client_of(struct fsm *f, uint64_t id)
{
    uint32_t old = 0;
    for (uint32_t i = 0; i < f->nclients; i++) {
        if (f->clients[i].id == id)
            return &f->clients[i];
        if (f->clients[i].last < f->clients[old].last)
            old = i;
    }
    struct client *c = &f->clients[f->nclients < MAX_CLIENTS ? f->nclients++ : old];
    free(c->done);
    *c = (struct client){.id = id};
    return c;
}

static struct done *done_of(struct client *c, uint64_t seq)
{
    for (uint32_t i = 0; i < c->n; i++)
        if (c->done[i].seq == seq)
            return &c->done[i];
    return NULL;
}

/* The client has every answer below floor: those records go. */
static void client_floor(struct client *c, uint64_t floor)
{
    if (floor <= c->floor)
        return;
    c->floor = floor;
    uint32_t k = 0;
    for (uint32_t i = 0; i < c->n; i++)
        if (c->done[i].seq >= floor)
            c->done[k++] = c->done[i];
    c->n = k;
}

static int client_record(struct client *c, uint64_t seq, int status)
{
    if (c->n == c->cap) {
        const uint32_t cap = c->cap ? 2 * c->cap : 8;
        struct done *d = realloc(c->done, cap * sizeof *d);
        if (!d)
            return ERMA_ENOMEM;
        c->done = d;
        c->cap = cap;
    }
    c->done[c->n++] = (struct done){seq, status};
    return ERMA_OK;
}

static int execute(struct fsm *f, uint8_t op, const uint8_t *key, uint32_t klen,
                   const uint8_t *val, uint32_t vlen)
{
    if (op == RAFTKV_CMD_PUT)
        return put(f, key, klen, val, vlen);
    if (op != RAFTKV_CMD_DEL || vlen != 0)
        return ERMA_EBADPKT;
    const int rc = kv_delete(f->kv, key, klen);
    kv_index_remove(f->ix, key, klen);
    return rc;
}

/* A write runs once per (client, seq): a copy (the client retried after
 * an unknown outcome, and both tries reached the log) gets the first's
 * outcome, and one below the client's floor (it has its answer) does
 * nothing. */
static int apply_cmd(struct fsm *f, const uint8_t *p, size_t len)
{
    if (len < CMD_HDR)
        return ERMA_EBADPKT;
    const uint64_t id = erma_get_le(p + 1, 8), seq = erma_get_le(p + 9, 8);
    const uint64_t floor = erma_get_le(p + 17, 8);
    const uint32_t klen = (uint32_t)erma_get_le(p + 25, 4);
    const uint32_t vlen = (uint32_t)erma_get_le(p + 29, 4);
    if ((uint64_t)CMD_HDR + klen + vlen != len || klen == 0)
        return ERMA_EBADPKT;
    const uint8_t *key = p + CMD_HDR;
    if (id == 0)
        return execute(f, p[0], key, klen, key + klen, vlen);
    struct client *c = client_of(f, id);
    c->last = f->applied;
    const struct done *d = seq < c->floor ? NULL : done_of(c, seq);
    int status = seq < c->floor ? ERMA_OK : d ? d->status : ERMA_EBADPKT;
    if (seq < c->floor || d) {
        f->duplicates++;
    } else {
        status = execute(f, p[0], key, klen, key + klen, vlen);
        client_record(c, seq, status); /* out of memory: a copy would run again */
    }
    client_floor(c, floor);
    return status;
}

static int apply(struct raft_fsm *fsm, const struct raft_buffer *buf, void **result)
{
    struct fsm *f = fsm->data;
    const int status = apply_cmd(f, buf->base, buf->len);
    f->applied++;
    /* The outcome is the command's, not the replica's: every replica
     * applies the same bytes to the same state and gets the same status. */
    *result = (void *)(intptr_t)status;
    return 0;
}

/* ---- snapshots: [u64 magic][u64 count] count x [u32 klen][u32 vlen][key][value] ---- */

struct walk {
    struct fsm *f;
    uint8_t *out; /* NULL: only measure */
    size_t size;
    uint64_t count;
    int (*fn)(void *ctx, const void *key, uint32_t klen, const void *val, uint32_t vlen);
    void *ctx;
};

static int value_of(struct fsm *f, const void *key, uint32_t klen, uint32_t *vlen)
{
    return kv_get(f->kv, key, klen, f->val, KV_MAX_ITEM, vlen);
}

static int snap_one(void *ctx, const void *key, uint32_t klen)
{
    struct walk *w = ctx;
    uint32_t vlen;
    if (value_of(w->f, key, klen, &vlen) != ERMA_OK)
        return 0; /* lost by the table: not in the snapshot either */
    if (w->out) {
        uint8_t *p = w->out + w->size;
        erma_put_le(p, klen, 4);
        erma_put_le(p + 4, vlen, 4);
        memcpy(p + 8, key, klen);
        if (vlen)
            memcpy(p + 8 + klen, w->f->val, vlen);
    }
    w->size += 8 + (size_t)klen + vlen;
    w->count++;
    return 0;
}

/* After the items: [u64 applied][u64 nclients] nclients x [u64 id][u64 floor]
 * [u64 last][u64 n] n x [u64 seq][i64 status]. */
static size_t clients_size(const struct fsm *f)
{
    size_t size = 16;
    for (uint32_t i = 0; i < f->nclients; i++)
        size += 32 + 16 * (size_t)f->clients[i].n;
    return size;
}

static uint8_t *clients_put(const struct fsm *f, uint8_t *p)
{
    erma_put(&p, f->applied, 8);
    erma_put(&p, f->nclients, 8);
    for (uint32_t i = 0; i < f->nclients; i++) {
        const struct client *c = &f->clients[i];
        erma_put(&p, c->id, 8);
        erma_put(&p, c->floor, 8);
        erma_put(&p, c->last, 8);
        erma_put(&p, c->n, 8);
        for (uint32_t k = 0; k < c->n; k++) {
            erma_put(&p, c->done[k].seq, 8);
            erma_put(&p, (uint64_t)(int64_t)c->done[k].status, 8);
        }
    }
    return p;
}

static int clients_get(struct fsm *f, const uint8_t *p, size_t left)
{
    if (left < 16)
        return RAFT_MALFORMED;
    f->applied = erma_get_le(p, 8);
    const uint64_t n = erma_get_le(p + 8, 8);
    p += 16;
    left -= 16;
    for (uint64_t i = 0; i < n; i++) {
        if (i >= MAX_CLIENTS || left < 32)
            return RAFT_MALFORMED;
        struct client *c = &f->clients[f->nclients++];
        *c = (struct client){.id = erma_get_le(p, 8), .floor = erma_get_le(p + 8, 8),
                             .last = erma_get_le(p + 16, 8)};
        const uint64_t done = erma_get_le(p + 24, 8);
        p += 32;
        left -= 32;
        if (done > left / 16)
            return RAFT_MALFORMED;
        for (uint64_t k = 0; k < done; k++, p += 16, left -= 16)
            if (client_record(c, erma_get_le(p, 8), (int32_t)erma_get_le(p + 8, 8)) != ERMA_OK)
                return RAFT_NOMEM;
    }
    return left == 0 ? 0 : RAFT_MALFORMED;
}

static int snapshot(struct raft_fsm *fsm, struct raft_buffer *bufs[], unsigned *n_bufs)
{
    struct fsm *f = fsm->data;
    struct walk w = {.f = f, .size = 16};
    kv_index_walk(f->ix, "", 0, UINT32_MAX, snap_one, &w);
    const size_t items = w.size;
    struct raft_buffer *b = raft_malloc(sizeof *b);
    uint8_t *data = raft_malloc(items + clients_size(f));
    if (!b || !data) {
        raft_free(b);
        raft_free(data);
        return RAFT_NOMEM;
    }
    erma_put_le(data, SNAP_MAGIC, 8);
    w = (struct walk){.f = f, .out = data, .size = 16};
    kv_index_walk(f->ix, "", 0, UINT32_MAX, snap_one, &w);
    erma_put_le(data + 8, w.count, 8);
    b->base = data;
    b->len = (size_t)(clients_put(f, data + items) - data);
    *bufs = b;
    *n_bufs = 1;
    return 0;
}

static int restore(struct raft_fsm *fsm, struct raft_buffer *buf)
{
    struct fsm *f = fsm->data;
    const uint8_t *p = buf->base;
    size_t left = buf->len;
    if (left < 16)
        return RAFT_MALFORMED;
    const uint64_t magic = erma_get_le(p, 8), count = erma_get_le(p + 8, 8);
    if (magic != SNAP_MAGIC)
        return RAFT_MALFORMED;
    if (table_new(f) != ERMA_OK)
        return RAFT_NOMEM;
    clients_clear(f);
    p += 16;
    left -= 16;
    for (uint64_t i = 0; i < count; i++) {
        if (left < 8)
            return RAFT_MALFORMED;
        const uint32_t klen = (uint32_t)erma_get_le(p, 4);
        const uint32_t vlen = (uint32_t)erma_get_le(p + 4, 4);
        if ((uint64_t)klen + vlen > left - 8)
            return RAFT_MALFORMED;
        const int rc = put(f, p + 8, klen, p + 8 + klen, vlen);
        if (rc == ERMA_ENOMEM)
            return RAFT_NOMEM;
        p += 8 + (size_t)klen + vlen;
        left -= 8 + (size_t)klen + vlen;
    }
    const int rc = clients_get(f, p, left);
    if (rc != 0)
        return rc;
    f->restores++;
    raft_free(buf->base); /* the state machine owns it on success */
    return 0;
}

/* ---- the application's side ---- */

int raftkv_fsm_init(struct raft_fsm *fsm, uint32_t buckets, uint64_t log_bytes)
{
    struct fsm *f = calloc(1, sizeof *f);
    if (!f)
        return ERMA_ENOMEM;
    f->buckets = buckets;
    f->log_bytes = log_bytes;
    f->val = malloc(KV_MAX_ITEM);
    int rc = f->val ? table_new(f) : ERMA_ENOMEM;
    if (rc != ERMA_OK) {
        free(f->val);
        free(f);
        return rc;
    }
    memset(fsm, 0, sizeof *fsm);
    fsm->version = 1;
    fsm->data = f;
    fsm->apply = apply;
    fsm->snapshot = snapshot;
    fsm->restore = restore;
    return ERMA_OK;
}

void raftkv_fsm_close(struct raft_fsm *fsm)
{
    struct fsm *f = fsm ? fsm->data : NULL;
    if (!f)
        return;
    kv_destroy(f->kv);
    kv_index_destroy(f->ix);
    clients_clear(f);
    free(f->val);
    free(f);
    fsm->data = NULL;
}

const struct kv *raftkv_fsm_kv(const struct raft_fsm *fsm)
{
    return ((const struct fsm *)fsm->data)->kv;
}

uint64_t raftkv_fsm_keys(const struct raft_fsm *fsm)
{
    return kv_index_count(((const struct fsm *)fsm->data)->ix);
}

uint64_t raftkv_fsm_restores(const struct raft_fsm *fsm)
{
    return ((const struct fsm *)fsm->data)->restores;
}

static int walk_one(void *ctx, const void *key, uint32_t klen)
{
    struct walk *w = ctx;
    uint32_t vlen = 0;
    const bool have = value_of(w->f, key, klen, &vlen) == ERMA_OK;
    return w->fn(w->ctx, key, klen, have ? w->f->val : NULL, vlen);
}

void raftkv_fsm_walk(const struct raft_fsm *fsm,
                     int (*fn)(void *ctx, const void *key, uint32_t klen, const void *val,
                               uint32_t vlen),
                          void *ctx)
{
    struct walk w = {.f = fsm->data, .fn = fn, .ctx = ctx};
    kv_index_walk(w.f->ix, "", 0, UINT32_MAX, walk_one, &w);
}

static int cmd(struct raft_buffer *buf, uint8_t op, const struct raftkv_origin *o,
               const void *key, uint32_t klen, const void *val, uint32_t vlen)
{
    if (!buf || !key || klen == 0 || (vlen && !val))
        return ERMA_EINVAL;
    if ((uint64_t)klen + vlen > KV_MAX_ITEM)
        return ERMA_E2BIG;
    uint8_t *p = raft_malloc(CMD_HDR + (size_t)klen + vlen);
    if (!p)
        return ERMA_ENOMEM;
    const struct raftkv_origin none = {0, 0, 0};
    o = o ? o : &none;
    uint8_t *q = p;
    *q++ = op;
    erma_put(&q, o->client, 8);
    erma_put(&q, o->seq, 8);
    erma_put(&q, o->floor, 8);
    erma_put(&q, klen, 4);
    erma_put(&q, vlen, 4);
    memcpy(q, key, klen);
    if (vlen)
        memcpy(q + klen, val, vlen);
    buf->base = p;
    buf->len = CMD_HDR + (size_t)klen + vlen;
    return ERMA_OK;
}

int raftkv_cmd_put(struct raft_buffer *buf, const struct raftkv_origin *o,
                   const void *key, uint32_t klen, const void *val, uint32_t vlen)
{
    return cmd(buf, RAFTKV_CMD_PUT, o, key, klen, val, vlen);
}

int raftkv_cmd_del(struct raft_buffer *buf, const struct raftkv_origin *o,
                   const void *key, uint32_t klen)
{
    return cmd(buf, RAFTKV_CMD_DEL, o, key, klen, NULL, 0);
}

uint64_t raftkv_fsm_duplicates(const struct raft_fsm *fsm)
{
    return ((const struct fsm *)fsm->data)->duplicates;
}
