/* The kv service (erma/kv.h) over erma RPC.
 *   GET  [u32 klen][key]                  -> [i32 status][u32 vlen][value]
 *   PUT  [u32 klen][u32 vlen][key][value] -> [i32 status]
 *   DEL  [u32 klen][key]                  -> [i32 status]
 *   SCAN [u32 klen][u32 count][start key] -> [i32 status][u32 n] n x [u32 klen][u32 vlen][key][value]
 *   REGION: the key service's fetch (erma/keys.h) of KV_KEYS_NAME, its info
 *           [u64 nbuckets][u64 log_bytes] (the key works from the requester's address)
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"
#include "erma/keys.h"
#include "erma/rma.h"
#include "erma/rpc.h"
#include "erma/sdk/wire.h"
#include "index.h"

#define SCAN_CHUNK 64 /* keys walked per lock hold */

struct kv_server {
    struct kv *kv;
    struct erma_rma *rma; /* one-sided GETs, once kv_server_rma() ran */
    uint32_t region;
    struct erma_keys *keys; /* hands out the region's key */
    uint8_t type_base;
    struct kv_index *ix;
    pthread_mutex_t lock; /* the table and index, between the loop and the workers */
};

static uint32_t u32_at(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static void u32_put(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

/* Answers with status and, when val is set, [vlen][val]. */
static void answer(struct erma_req *req, int status, const uint8_t *val, uint32_t vlen)
{
    struct erma_msgbuf *r = erma_req_resp_buf(req), own;
    const size_t size = 4 + (val ? 4 + (size_t)vlen : 0);
    if (size > r->max_size) {
        if (erma_msgbuf_alloc(erma_req_rpc(req), size, &own) == ERMA_OK)
            r = &own;
        else
            status = ERMA_ENOMEM;
    }
    erma_msgbuf_resize(r, status == ERMA_ENOMEM ? 4 : size);
    u32_put(r->data, (uint32_t)status);
    if (val && status != ERMA_ENOMEM) {
        u32_put(r->data + 4, vlen);
        memcpy(r->data + 8, val, vlen);
    }
    erma_req_respond(req, r);
}

/* Parses [u32 klen][rest...]; checks that klen fits. */
static int key_of(struct erma_req *req, uint32_t skip, const uint8_t **key, uint32_t *klen)
{
    const size_t n = erma_req_size(req);
    const uint8_t *d = erma_req_data(req);
    if (n < 4 + skip || u32_at(d) == 0 || u32_at(d) > n - 4 - skip)
        return ERMA_EBADPKT;
    *klen = u32_at(d);
    *key = d + 4 + skip;
    return ERMA_OK;
}

static void on_get(struct erma_req *req, void *ctx)
{
    struct kv_server *srv = ctx;
    const uint8_t *key;
    uint32_t klen, vlen = 0;
    static __thread uint8_t val[KV_MAX_ITEM];
    int rc = key_of(req, 0, &key, &klen);
    if (rc == ERMA_OK) {
        pthread_mutex_lock(&srv->lock);
        rc = kv_get(srv->kv, key, klen, val, sizeof val, &vlen);
        pthread_mutex_unlock(&srv->lock);
    }
    answer(req, rc, rc == ERMA_OK ? val : NULL, vlen);
}

static void on_put(struct erma_req *req, void *ctx)
{
    struct kv_server *srv = ctx;
    const uint8_t *key;
    uint32_t klen;
    int rc = key_of(req, 4, &key, &klen);
    const uint32_t vlen = rc == ERMA_OK ? u32_at(erma_req_data(req) + 4) : 0;
    if (rc == ERMA_OK && (size_t)klen + vlen + 8 != erma_req_size(req))
        rc = ERMA_EBADPKT;
    if (rc == ERMA_OK) {
        pthread_mutex_lock(&srv->lock);
        rc = kv_put(srv->kv, key, klen, key + klen, vlen);
        if (rc == ERMA_OK)
            rc = kv_index_add(srv->ix, key, klen);
        pthread_mutex_unlock(&srv->lock);
    }
    answer(req, rc, NULL, 0);
}

static void on_del(struct erma_req *req, void *ctx)
{
    struct kv_server *srv = ctx;
    const uint8_t *key;
    uint32_t klen;
    int rc = key_of(req, 0, &key, &klen);
    if (rc == ERMA_OK) {
        pthread_mutex_lock(&srv->lock);
        rc = kv_delete(srv->kv, key, klen);
        kv_index_remove(srv->ix, key, klen);
        pthread_mutex_unlock(&srv->lock);
    }
    answer(req, rc, NULL, 0);
}

/* One-sided GETs: the key service (erma/keys.h) at type_base + KV_REGION
 * hands out the table's key by the name KV_KEYS_NAME, bound to the
 * requester's address, with the geometry a reader needs as its info. */
int kv_server_rma(struct kv_server *srv, struct erma_rpc *rpc, struct erma_rma *rma)
{
    size_t len;
    if (!srv || !rpc || !rma || srv->rma)
        return ERMA_EINVAL;
    void *mem = (void *)kv_memory(srv->kv, &len);
    uint8_t info[KV_GEOMETRY_BYTES];
    erma_put_le(info, kv_nbuckets(srv->kv), 8);
    erma_put_le(info + 8, kv_log_bytes(srv->kv), 8);
    int rc = erma_region_register(rma, mem, len, ERMA_RMA_PERM_READ, &srv->region);
    if (rc != ERMA_OK)
        return rc;
    rc = erma_keys_create(rpc, rma, (uint8_t)(srv->type_base + KV_REGION), &srv->keys);
    if (rc == ERMA_OK)
        rc = erma_keys_export(srv->keys, KV_KEYS_NAME, srv->region, info, sizeof info);
    if (rc != ERMA_OK) {
        erma_keys_destroy(srv->keys);
        srv->keys = NULL;
        erma_region_deregister(rma, srv->region);
        return rc;
    }
    srv->rma = rma;
    return ERMA_OK;
}

void kv_server_rma_end(struct kv_server *srv)
{
    if (srv) {
        erma_keys_destroy(srv->keys);
        srv->keys = NULL;
    }
}

int kv_remote_of(const struct erma_rkey *key, const uint8_t *info, size_t info_len,
                 struct kv_remote *out)
{
    if (!key || !out || (info_len && !info))
        return ERMA_EINVAL;
    if (info_len != KV_GEOMETRY_BYTES)
        return ERMA_EBADPKT;
    const uint64_t nbuckets = erma_get_le(info, 8), log_bytes = erma_get_le(info + 8, 8);
    if (!nbuckets || (nbuckets & (nbuckets - 1)) || !log_bytes || (log_bytes & (log_bytes - 1)))
        return ERMA_EBADPKT;
    out->rkey = *key;
    out->nbuckets = nbuckets;
    out->log_bytes = log_bytes;
    return ERMA_OK;
}

/* A growing scan result ([status][n] then entries) and where the walk is. */
struct scan {
    struct kv_server *srv;
    uint8_t *buf;
    size_t len, cap;
    uint32_t n, want;
    int err;
    uint8_t cursor[KV_MAX_ITEM]; /* the last key walked */
    uint32_t cursor_len;
    bool resume; /* the walk restarts at cursor, which was taken already */
};

static int append(struct scan *s, const void *key, uint32_t klen, const uint8_t *val,
                  uint32_t vlen)
{
    const size_t need = 8 + (size_t)klen + vlen;
    if (s->len + need > ERMA_MAX_MSG_SIZE)
        return ERMA_E2BIG;
    if (s->len + need > s->cap) {
        const size_t cap = 2 * (s->len + need);
        uint8_t *b = realloc(s->buf, cap);
        if (!b)
            return ERMA_ENOMEM;
        s->buf = b;
        s->cap = cap;
    }
    u32_put(s->buf + s->len, klen);
    u32_put(s->buf + s->len + 4, vlen);
    memcpy(s->buf + s->len + 8, key, klen);
    memcpy(s->buf + s->len + 8 + klen, val, vlen);
    s->len += need;
    s->n++;
    return ERMA_OK;
}

static int scan_one(void *ctx, const void *key, uint32_t klen)
{
    struct scan *s = ctx;
    if (s->resume) {
        s->resume = false;
        if (klen == s->cursor_len && memcmp(key, s->cursor, klen) == 0)
            return 0;
    }
    memcpy(s->cursor, key, klen);
    s->cursor_len = klen;
    static __thread uint8_t val[KV_MAX_ITEM];
    uint32_t vlen;
    if (kv_get(s->srv->kv, key, klen, val, sizeof val, &vlen) != ERMA_OK)
        return 0; /* in the index but evicted from the lossy table: skip */
    s->err = append(s, key, klen, val, vlen);
    return s->err != ERMA_OK || s->n == s->want;
}

/* Runs on a worker: walks the index a chunk at a time, so that the event
 * loop's point requests wait at most one chunk for the lock. */
static void on_scan(struct erma_req *req, void *ctx)
{
    struct scan *s = calloc(1, sizeof *s);
    const uint8_t *key;
    uint32_t klen;
    int rc = s ? key_of(req, 4, &key, &klen) : ERMA_ENOMEM;
    if (rc == ERMA_OK && (size_t)klen + 8 != erma_req_size(req))
        rc = ERMA_EBADPKT;
    if (rc == ERMA_OK && !(s->buf = malloc(s->cap = 4096)))
        rc = ERMA_ENOMEM;
    if (rc == ERMA_OK) {
        s->srv = ctx;
        s->len = 8;
        s->want = u32_at(erma_req_data(req) + 4);
        memcpy(s->cursor, key, klen);
        s->cursor_len = klen;
    }
    while (rc == ERMA_OK && s->n < s->want && s->err == ERMA_OK) {
        pthread_mutex_lock(&s->srv->lock);
        const unsigned walked = kv_index_walk(s->srv->ix, s->cursor, s->cursor_len, SCAN_CHUNK,
                                              scan_one, s);
        pthread_mutex_unlock(&s->srv->lock);
        s->resume = true;
        if (walked < SCAN_CHUNK)
            break; /* the end of the index, or enough */
    }
    if (rc == ERMA_OK)
        rc = s->err;
    struct erma_msgbuf out;
    if (rc == ERMA_OK && erma_msgbuf_alloc(erma_req_rpc(req), s->len, &out) == ERMA_OK) {
        u32_put(s->buf, (uint32_t)ERMA_OK);
        u32_put(s->buf + 4, s->n);
        memcpy(out.data, s->buf, s->len);
        erma_req_respond(req, &out);
    } else {
        answer(req, rc == ERMA_OK ? ERMA_ENOMEM : rc, NULL, 0);
    }
    if (s)
        free(s->buf);
    free(s);
}

int kv_serve(struct erma_nexus *nx, uint8_t type_base, struct kv *kv,
             struct kv_server **out)
{
    if (!nx || !kv || !out || type_base > 255 - KV_OPS)
        return ERMA_EINVAL;
    struct kv_server *srv = calloc(1, sizeof *srv);
    if (!srv)
        return ERMA_ENOMEM;
    srv->kv = kv;
    pthread_mutex_init(&srv->lock, NULL);
    int rc = kv_index_create(type_base + 1, &srv->ix);
    static const struct {
        erma_handler_fn fn;
        enum erma_handler_mode mode;
    } h[KV_REGION] = {{on_get, ERMA_DISPATCH}, {on_put, ERMA_DISPATCH},
                   {on_del, ERMA_DISPATCH}, {on_scan, ERMA_WORKER}};
    srv->type_base = type_base;
    for (int op = 0; rc == ERMA_OK && op < KV_REGION; op++) /* REGION: kv_server_rma() */
        rc = erma_handler_register(nx, (uint8_t)(type_base + op), h[op].fn, h[op].mode, srv);
    if (rc != ERMA_OK) {
        kv_server_destroy(srv);
        return rc;
    }
    *out = srv;
    return ERMA_OK;
}

void kv_server_destroy(struct kv_server *srv)
{
    if (!srv)
        return;
    kv_server_rma_end(srv);
    kv_index_destroy(srv->ix);
    pthread_mutex_destroy(&srv->lock);
    free(srv);
}

uint64_t kv_server_keys(struct kv_server *srv)
{
    pthread_mutex_lock(&srv->lock);
    const uint64_t n = kv_index_count(srv->ix);
    pthread_mutex_unlock(&srv->lock);
    return n;
}

/* ---- client side ---- */

static int fill(struct erma_msgbuf *req, uint32_t a, const uint32_t *b, const void *key,
                uint32_t klen, const void *val, uint32_t vlen)
{
    const size_t hdr = b ? 8 : 4, size = hdr + (size_t)klen + vlen;
    if (!req || !req->mem || (klen && !key) || (vlen && !val))
        return ERMA_EINVAL;
    if (size > req->max_size)
        return ERMA_E2BIG;
    req->size = (uint32_t)size;
    u32_put(req->data, a);
    if (b)
        u32_put(req->data + 4, *b);
    memcpy(req->data + hdr, key, klen);
    if (vlen)
        memcpy(req->data + hdr + klen, val, vlen);
    return ERMA_OK;
}

int kv_req_get(struct erma_msgbuf *req, const void *key, uint32_t klen)
{
    return fill(req, klen, NULL, key, klen, NULL, 0);
}

int kv_req_put(struct erma_msgbuf *req, const void *key, uint32_t klen, const void *val,
               uint32_t vlen)
{
    return fill(req, klen, &vlen, key, klen, val, vlen);
}

int kv_req_del(struct erma_msgbuf *req, const void *key, uint32_t klen)
{
    return fill(req, klen, NULL, key, klen, NULL, 0);
}

int kv_req_scan(struct erma_msgbuf *req, const void *start, uint32_t klen, uint32_t count)
{
    return fill(req, klen, &count, start, klen, NULL, 0);
}

int kv_resp(const struct erma_msgbuf *resp, const uint8_t **val, uint32_t *vlen)
{
    if (!resp || resp->size < 4)
        return ERMA_EBADPKT;
    const int status = (int32_t)u32_at(resp->data);
    if (status > 0 || status <= ERMA_ERR_LAST)
        return ERMA_EBADPKT;
    if (status == ERMA_OK && val && vlen) {
        if (resp->size < 8 || u32_at(resp->data + 4) != resp->size - 8)
            return ERMA_EBADPKT;
        *vlen = u32_at(resp->data + 4);
        *val = resp->data + 8;
    }
    return status;
}

int kv_resp_scan(const struct erma_msgbuf *resp, uint32_t *cursor, const uint8_t **key,
                 uint32_t *klen, const uint8_t **val, uint32_t *vlen)
{
    if (kv_resp(resp, NULL, NULL) != ERMA_OK || resp->size < 8)
        return ERMA_EBADPKT;
    uint32_t at = *cursor < 8 ? 8 : *cursor;
    if (at == resp->size)
        return ERMA_ENOENT;
    if (resp->size - at < 8)
        return ERMA_EBADPKT;
    *klen = u32_at(resp->data + at);
    *vlen = u32_at(resp->data + at + 4);
    if ((uint64_t)*klen + *vlen > resp->size - at - 8)
        return ERMA_EBADPKT;
    *key = resp->data + at + 8;
    *val = *key + *klen;
    *cursor = at + 8 + *klen + *vlen;
    return ERMA_OK;
}
