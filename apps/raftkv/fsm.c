/* The raft state machine over apps/kv's table (raftkv/raftkv.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "erma/errors.h"
#include "erma/wire.h"
#include "kv/index.h"
#include "kv/kv.h"
#include "raftkv/raftkv.h"

#define SNAP_MAGIC 0x50414e53564b52ull /* "RKVSNAP" */
#define CMD_HDR 9

struct fsm {
    struct erma_kv *kv;
    struct kv_index *ix; /* the keys, in order: what a snapshot walks */
    uint32_t buckets;
    uint64_t log_bytes;
    uint64_t restores;
    uint8_t *val;        /* a value's bytes while walking */
};

static int table_new(struct fsm *f)
{
    struct erma_kv *kv;
    struct kv_index *ix;
    int rc = erma_kv_create(f->buckets, f->log_bytes, &kv);
    if (rc != ERMA_OK)
        return rc;
    rc = kv_index_create(0x72616674, &ix);
    if (rc != ERMA_OK) {
        erma_kv_destroy(kv);
        return rc;
    }
    erma_kv_destroy(f->kv);
    if (f->ix)
        kv_index_destroy(f->ix);
    f->kv = kv;
    f->ix = ix;
    return ERMA_OK;
}

static int put(struct fsm *f, const uint8_t *key, uint32_t klen, const uint8_t *val,
               uint32_t vlen)
{
    int rc = erma_kv_put(f->kv, key, klen, val, vlen);
    if (rc == ERMA_OK)
        rc = kv_index_add(f->ix, key, klen);
    return rc;
}

static int apply(struct raft_fsm *fsm, const struct raft_buffer *buf, void **result)
{
    struct fsm *f = fsm->data;
    const uint8_t *p = buf->base;
    int status = ERMA_EBADPKT;
    if (buf->len >= CMD_HDR) {
        const uint32_t klen = (uint32_t)erma_get_le(p + 1, 4);
        const uint32_t vlen = (uint32_t)erma_get_le(p + 5, 4);
        if ((uint64_t)CMD_HDR + klen + vlen == buf->len && klen > 0) {
            const uint8_t *key = p + CMD_HDR;
            if (p[0] == ERMA_RAFTKV_CMD_PUT) {
                status = put(f, key, klen, key + klen, vlen);
            } else if (p[0] == ERMA_RAFTKV_CMD_DEL && vlen == 0) {
                status = erma_kv_delete(f->kv, key, klen);
                kv_index_remove(f->ix, key, klen);
            }
        }
    }
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
    return erma_kv_get(f->kv, key, klen, f->val, ERMA_KV_MAX_ITEM, vlen);
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

static int snapshot(struct raft_fsm *fsm, struct raft_buffer *bufs[], unsigned *n_bufs)
{
    struct fsm *f = fsm->data;
    struct walk w = {.f = f, .size = 16};
    kv_index_walk(f->ix, "", 0, UINT32_MAX, snap_one, &w);
    struct raft_buffer *b = raft_malloc(sizeof *b);
    uint8_t *data = raft_malloc(w.size);
    if (!b || !data) {
        raft_free(b);
        raft_free(data);
        return RAFT_NOMEM;
    }
    const uint64_t magic = SNAP_MAGIC;
    memcpy(data, &magic, 8);
    w = (struct walk){.f = f, .out = data, .size = 16};
    kv_index_walk(f->ix, "", 0, UINT32_MAX, snap_one, &w);
    memcpy(data + 8, &w.count, 8);
    b->base = data;
    b->len = w.size;
    *bufs = b;
    *n_bufs = 1;
    return 0;
}

static int restore(struct raft_fsm *fsm, struct raft_buffer *buf)
{
    struct fsm *f = fsm->data;
    const uint8_t *p = buf->base;
    size_t left = buf->len;
    uint64_t magic, count;
    if (left < 16)
        return RAFT_MALFORMED;
    memcpy(&magic, p, 8);
    memcpy(&count, p + 8, 8);
    if (magic != SNAP_MAGIC)
        return RAFT_MALFORMED;
    if (table_new(f) != ERMA_OK)
        return RAFT_NOMEM;
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
    f->restores++;
    raft_free(buf->base); /* the state machine owns it on success */
    return 0;
}

/* ---- the application's side ---- */

int erma_raftkv_fsm_init(struct raft_fsm *fsm, uint32_t buckets, uint64_t log_bytes)
{
    struct fsm *f = calloc(1, sizeof *f);
    if (!f)
        return ERMA_ENOMEM;
    f->buckets = buckets;
    f->log_bytes = log_bytes;
    f->val = malloc(ERMA_KV_MAX_ITEM);
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

void erma_raftkv_fsm_close(struct raft_fsm *fsm)
{
    struct fsm *f = fsm ? fsm->data : NULL;
    if (!f)
        return;
    erma_kv_destroy(f->kv);
    kv_index_destroy(f->ix);
    free(f->val);
    free(f);
    fsm->data = NULL;
}

const struct erma_kv *erma_raftkv_fsm_kv(const struct raft_fsm *fsm)
{
    return ((const struct fsm *)fsm->data)->kv;
}

uint64_t erma_raftkv_fsm_keys(const struct raft_fsm *fsm)
{
    return kv_index_count(((const struct fsm *)fsm->data)->ix);
}

uint64_t erma_raftkv_fsm_restores(const struct raft_fsm *fsm)
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

void erma_raftkv_fsm_walk(const struct raft_fsm *fsm,
                          int (*fn)(void *ctx, const void *key, uint32_t klen, const void *val,
                                    uint32_t vlen),
                          void *ctx)
{
    struct walk w = {.f = fsm->data, .fn = fn, .ctx = ctx};
    kv_index_walk(w.f->ix, "", 0, UINT32_MAX, walk_one, &w);
}

static int cmd(struct raft_buffer *buf, uint8_t op, const void *key, uint32_t klen,
               const void *val, uint32_t vlen)
{
    if (!buf || !key || klen == 0 || (vlen && !val))
        return ERMA_EINVAL;
    if ((uint64_t)klen + vlen > ERMA_KV_MAX_ITEM)
        return ERMA_E2BIG;
    uint8_t *p = raft_malloc(CMD_HDR + (size_t)klen + vlen);
    if (!p)
        return ERMA_ENOMEM;
    p[0] = op;
    erma_put_le(p + 1, klen, 4);
    erma_put_le(p + 5, vlen, 4);
    memcpy(p + CMD_HDR, key, klen);
    if (vlen)
        memcpy(p + CMD_HDR + klen, val, vlen);
    buf->base = p;
    buf->len = CMD_HDR + (size_t)klen + vlen;
    return ERMA_OK;
}

int erma_raftkv_cmd_put(struct raft_buffer *buf, const void *key, uint32_t klen,
                        const void *val, uint32_t vlen)
{
    return cmd(buf, ERMA_RAFTKV_CMD_PUT, key, klen, val, vlen);
}

int erma_raftkv_cmd_del(struct raft_buffer *buf, const void *key, uint32_t klen)
{
    return cmd(buf, ERMA_RAFTKV_CMD_DEL, key, klen, NULL, 0);
}
