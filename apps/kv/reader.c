/* One-sided GETs on a kv table (erma/kv.h): bucket READ, item READ, check. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"
#include "erma/rma.h"

#define MAX_KEY 256

struct get {
    bool live;
    struct kv_remote remote;
    uint8_t key[MAX_KEY];
    uint32_t klen, tries;
    kv_get_fn cb;
    void *tag;
    uint8_t bucket[KV_BUCKET];
    struct kv_ref refs[KV_SLOTS];
    int nrefs, ref;       /* ref < 0: reading the bucket */
    uint8_t *item;        /* KV_MAX_ITEM bytes */
};

struct kv_reader {
    struct erma_rma *rma;
    struct get *gets;
    uint32_t max_gets, max_tries;
    struct kv_reader_stats stats;
};

int kv_reader_create(struct erma_rma *rma, uint32_t max_gets, uint32_t max_tries,
                     struct kv_reader **out)
{
    if (!rma || !out || max_gets == 0 || max_gets > 65536)
        return ERMA_EINVAL;
    struct kv_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->gets = calloc(max_gets, sizeof *r->gets))) {
        free(r);
        return ERMA_ENOMEM;
    }
    r->rma = rma;
    r->max_gets = max_gets;
    r->max_tries = max_tries ? max_tries : 16;
    *out = r;
    return ERMA_OK;
}

void kv_reader_destroy(struct kv_reader *r)
{
    if (!r)
        return;
    for (uint32_t i = 0; i < r->max_gets; i++)
        free(r->gets[i].item);
    free(r->gets);
    free(r);
}

void kv_reader_get_stats(const struct kv_reader *r, struct kv_reader_stats *out)
{
    *out = r->stats;
}

static int read_into(struct kv_reader *r, struct get *g, uint64_t off, void *dst,
                     uint32_t len)
{
    const uint64_t tag = (uint64_t)(g - r->gets);
    r->stats.reads++;
    if (len <= ERMA_RMA_MAX_OP) {
        const struct erma_rma_cmd c = {.op = ERMA_RMA_READ, .peer = g->remote.peer,
                                       .rkey = g->remote.rkey, .offset = off, .local = dst,
                                       .len = len, .tag = tag};
        const int rc = erma_rma_submit(r->rma, &c);
        return rc < 0 ? rc : ERMA_OK;
    }
    const struct erma_rma_xfer x = {.op = ERMA_RMA_READ, .peer = g->remote.peer,
                                    .rkey = g->remote.rkey, .offset = off, .local = dst,
                                    .len = len, .tag = tag};
    const int rc = erma_rma_transfer(r->rma, &x);
    return rc < 0 ? rc : ERMA_OK;
}

static int read_bucket(struct kv_reader *r, struct get *g)
{
    uint64_t off;
    uint32_t len;
    kv_bucket_of(g->remote.nbuckets, g->key, g->klen, &off, &len);
    g->ref = -1;
    return read_into(r, g, off, g->bucket, len);
}

static void finish(struct get *g, int status, const uint8_t *val, uint32_t vlen)
{
    g->live = false;
    g->cb(g->tag, status, val, vlen);
}

int kv_rget(struct kv_reader *r, const struct kv_remote *remote,
            const void *key, uint32_t klen, kv_get_fn cb, void *tag)
{
    if (!r || !remote || !key || klen == 0 || !cb)
        return ERMA_EINVAL;
    if (klen > MAX_KEY)
        return ERMA_E2BIG;
    for (uint32_t i = 0; i < r->max_gets; i++) {
        struct get *g = &r->gets[i];
        if (g->live)
            continue;
        if (!g->item && !(g->item = malloc(KV_MAX_ITEM)))
            return ERMA_ENOMEM;
        g->remote = *remote;
        memcpy(g->key, key, klen);
        g->klen = klen;
        g->cb = cb;
        g->tag = tag;
        g->tries = 0;
        const int rc = read_bucket(r, g);
        if (rc == ERMA_OK) {
            g->live = true;
            r->stats.gets++;
        }
        return rc;
    }
    return ERMA_ENOSLOTS;
}

/* The bucket or item changed under us: start again from the bucket. */
static void retry(struct kv_reader *r, struct get *g)
{
    r->stats.retries++;
    int rc = ++g->tries >= r->max_tries ? ERMA_EAGAIN : read_bucket(r, g);
    if (rc != ERMA_OK)
        finish(g, rc, NULL, 0);
}

/* Reads candidate item g->ref, or ends the GET when none is left. */
static void next_item(struct kv_reader *r, struct get *g)
{
    if (g->ref >= g->nrefs) {
        finish(g, ERMA_ENOENT, NULL, 0);
        return;
    }
    const struct kv_ref *ref = &g->refs[g->ref];
    const int rc = ref->len > KV_MAX_ITEM ? ERMA_EBADPKT
                                          : read_into(r, g, ref->off, g->item, ref->len);
    if (rc != ERMA_OK)
        finish(g, rc, NULL, 0);
}

static void advance(struct kv_reader *r, struct get *g)
{
    if (g->ref < 0) {
        g->nrefs = kv_bucket_find(g->bucket, g->remote.nbuckets, g->remote.log_bytes,
                                  g->key, g->klen, g->refs, KV_SLOTS);
        if (g->nrefs == ERMA_EAGAIN) {
            retry(r, g);
            return;
        }
        g->ref = 0;
        next_item(r, g);
        return;
    }
    const uint8_t *val;
    uint32_t vlen;
    const int rc = kv_item_check(g->item, &g->refs[g->ref], g->key, g->klen, &val, &vlen);
    if (rc == ERMA_OK) {
        finish(g, ERMA_OK, val, vlen);
    } else if (rc == ERMA_EAGAIN) {
        retry(r, g);
    } else {
        g->ref++;
        next_item(r, g);
    }
}

int kv_reader_poll(struct kv_reader *r)
{
    struct erma_rma_completion c[32];
    int done = 0;
    const int n = erma_rma_poll(r->rma, c, 32);
    for (int i = 0; i < n; i++) {
        if (c[i].tag >= r->max_gets || !r->gets[c[i].tag].live)
            continue; /* not ours */
        struct get *g = &r->gets[c[i].tag];
        if (c[i].status != ERMA_OK)
            finish(g, c[i].status, NULL, 0);
        else
            advance(r, g);
        done += !g->live;
    }
    return done;
}
