/* One-sided GETs on a kv table (erma/kv.h): bucket READ, item READ, check;
 * or, for a key whose item was found before, the item READ alone. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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
    uint64_t loc;         /* its location's tag (loc_tag); 0 without a cache */
    bool cached;          /* reading the item at a remembered location */
};

/* Where a key's item was found: its table (peer, region, key generation)
 * and key hashed into tag (0: an empty entry). */
struct loc {
    uint64_t tag;
    struct kv_ref ref;
};
/* Four ways: with two, 1.5% of the KVCS bench's GETs (10,000 keys, 65,536
 * entries) missed for want of room in a set. */
#define LOC_WAYS 4

struct kv_reader {
    struct erma_rma *rma;
    struct get *gets;
    uint32_t max_gets, max_tries;
    uint32_t *free, nfree; /* gets not live, a stack */
    struct loc *locs; /* sets of LOC_WAYS (loc_set), nlocs a power of two; NULL: no cache */
    uint32_t nlocs;
    struct kv_reader_stats stats;
};

int kv_reader_create(struct erma_rma *rma, uint32_t max_gets, uint32_t max_tries,
                     struct kv_reader **out)
{
    if (!rma || !out || max_gets == 0 || max_gets > 65536)
        return ERMA_EINVAL;
    struct kv_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->gets = calloc(max_gets, sizeof *r->gets)) ||
        !(r->free = malloc(max_gets * sizeof *r->free))) {
        if (r)
            free(r->gets);
        free(r);
        return ERMA_ENOMEM;
    }
    for (uint32_t i = 0; i < max_gets; i++)
        r->free[r->nfree++] = max_gets - 1 - i;
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
    free(r->free);
    free(r->locs);
    free(r);
}

/* n zeroed entries, a set to two cache lines (aligned to a set); from 2
 * MiB on in huge pages where the kernel gives them (transparent huge
 * pages, "madvise" mode): an entry is a random access, and with 4 KiB
 * pages its TLB miss cost a loaded client about as much as the cache miss
 * its prefetch hides. */
#define HUGE_PAGE (2u << 20)
static struct loc *locs_alloc(uint32_t n)
{
    const size_t bytes = (size_t)n * sizeof(struct loc);
    const bool huge = bytes >= HUGE_PAGE;
    void *p;
    if (posix_memalign(&p, huge ? HUGE_PAGE : LOC_WAYS * sizeof(struct loc), bytes) != 0)
        return NULL;
    if (huge)
        madvise(p, bytes, MADV_HUGEPAGE); /* a hint: refused, it stays 4 KiB pages */
    memset(p, 0, bytes);
    return p;
}

int kv_reader_cache(struct kv_reader *r, uint32_t entries)
{
    if (!r || entries > (1u << 24))
        return ERMA_EINVAL;
    if (r->nfree != r->max_gets) /* GETs in progress */
        return ERMA_EAGAIN;
    free(r->locs);
    r->locs = NULL;
    r->nlocs = 0;
    if (!entries)
        return ERMA_OK;
    uint32_t n = LOC_WAYS;
    while (n < entries)
        n <<= 1;
    if (!(r->locs = locs_alloc(n)))
        return ERMA_ENOMEM;
    r->nlocs = n;
    return ERMA_OK;
}

/* The table's identity (peer, region, key generation) and the key hashed
 * a word at a time (a GET computes it twice, kv_reader_prefetch() and
 * kv_rget(); bytewise FNV-1a was 0.6% of a loaded client's time), mixed
 * by MurmurHash3's finalizer; never 0. */
static uint64_t loc_tag(const struct kv_remote *rm, const void *key, uint32_t klen)
{
    const uint64_t k = 0x9e3779b97f4a7c15ull;
    const uint8_t *p = key;
    uint64_t h = ((uint64_t)(uint32_t)rm->peer << 32 | klen) * k;
    h = (h ^ ((uint64_t)rm->rkey.region << 32 | rm->rkey.key_gen)) * k;
    uint32_t i = 0;
    for (; i + 8 <= klen; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * k;
    }
    if (i < klen) {
        uint64_t w = 0;
        memcpy(&w, p + i, klen - i);
        h = (h ^ w) * k;
    }
    h = (h ^ h >> 33) * 0xff51afd7ed558ccdull;
    h = (h ^ h >> 33) * 0xc4ceb9fe1a85ec53ull;
    return (h ^ h >> 33) | 1;
}

/* A tag's set: LOC_WAYS entries, two cache lines. */
static struct loc *loc_set(const struct kv_reader *r, uint64_t tag)
{
    return &r->locs[((tag ^ tag >> 32) & (r->nlocs - 1)) & ~(uint64_t)(LOC_WAYS - 1)];
}

/* The tag's entry, or NULL. */
static struct loc *loc_find(const struct kv_reader *r, uint64_t tag)
{
    struct loc *l = loc_set(r, tag);
    for (int i = 0; i < LOC_WAYS; i++)
        if (l[i].tag == tag)
            return &l[i];
    return NULL;
}

/* The entry to keep the tag in: its own, else the first empty one, else
 * one chosen by tag bits. */
static struct loc *loc_slot(const struct kv_reader *r, uint64_t tag)
{
    struct loc *l = loc_set(r, tag), *empty = NULL;
    for (int i = 0; i < LOC_WAYS; i++) {
        if (l[i].tag == tag)
            return &l[i];
        if (!empty && l[i].tag == 0)
            empty = &l[i];
    }
    return empty ? empty : &l[tag >> 40 & (LOC_WAYS - 1)];
}

void kv_reader_prefetch(const struct kv_reader *r, const struct kv_remote *remote,
                        const void *key, uint32_t klen)
{
    if (!r || !r->locs || !remote || !key || klen > MAX_KEY)
        return;
    const struct loc *l = loc_set(r, loc_tag(remote, key, klen));
    __builtin_prefetch(l);
    __builtin_prefetch(l + LOC_WAYS - 1);
}

bool kv_reader_cached(const struct kv_reader *r, const struct kv_remote *remote,
                      const void *key, uint32_t klen)
{
    if (!r || !r->locs || !remote || !key || klen == 0 || klen > MAX_KEY)
        return false;
    return loc_find(r, loc_tag(remote, key, klen)) != NULL;
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

/* A short item is read with the bytes after it up to a multiple of
 * READ_ROUND, where the table has them: libsodium 1.0.18's AES-256-GCM
 * seals and opens whole 128-byte runs of payload far cheaper than a
 * shorter tail (callgrind: 96 bytes about 1,820 instructions each way, 128
 * bytes 1,050), and both the target and this reader pay it. The item's
 * checks look at its own bytes only. */
#define READ_ROUND 128
#define READ_ROUND_MAX 1024

static uint32_t item_read_len(const struct kv_remote *rm, const struct kv_ref *ref)
{
    const uint32_t len = (ref->len + READ_ROUND - 1) / READ_ROUND * READ_ROUND;
    const uint64_t end = kv_table_len(rm->nbuckets, rm->log_bytes);
    return len > READ_ROUND_MAX || ref->off > end || len > end - ref->off ? ref->len : len;
}

static int read_ref(struct kv_reader *r, struct get *g)
{
    const struct kv_ref *ref = &g->refs[g->ref];
    if (ref->len > KV_MAX_ITEM)
        return ERMA_EBADPKT;
    return read_into(r, g, ref->off, g->item, item_read_len(&g->remote, ref));
}

/* The get is free again before its callback, which may start another. */
static void finish(struct kv_reader *r, struct get *g, int status, const uint8_t *val,
                   uint32_t vlen)
{
    g->live = false;
    r->free[r->nfree++] = (uint32_t)(g - r->gets);
    g->cb(g->tag, status, val, vlen);
}

/* A short key as two overlapping words: the compiler made the memcpy a
 * `rep movsq`, whose start-up was a third of kv_rget's time (perf). */
static void copy_key(uint8_t *dst, const void *key, uint32_t klen)
{
    const uint8_t *s = key;
    if (klen < 8 || klen > 16) {
        memcpy(dst, s, klen);
        return;
    }
    uint64_t a, b;
    memcpy(&a, s, 8);
    memcpy(&b, s + klen - 8, 8);
    memcpy(dst, &a, 8);
    memcpy(dst + klen - 8, &b, 8);
}

int kv_rget(struct kv_reader *r, const struct kv_remote *remote,
            const void *key, uint32_t klen, kv_get_fn cb, void *tag)
{
    if (!r || !remote || !key || klen == 0 || !cb)
        return ERMA_EINVAL;
    if (klen > MAX_KEY)
        return ERMA_E2BIG;
    if (r->nfree == 0)
        return ERMA_ENOSLOTS;
    struct get *g = &r->gets[r->free[r->nfree - 1]];
    if (!g->item && !(g->item = malloc(KV_MAX_ITEM)))
        return ERMA_ENOMEM;
    g->remote = *remote;
    copy_key(g->key, key, klen);
    g->klen = klen;
    g->cb = cb;
    g->tag = tag;
    g->tries = 0;
    g->loc = r->locs ? loc_tag(remote, key, klen) : 0;
    const struct loc *l = g->loc ? loc_find(r, g->loc) : NULL;
    g->cached = l != NULL;
    if (g->cached) {
        g->refs[0] = l->ref;
        g->nrefs = 1;
        g->ref = 0;
    }
    const int rc = g->cached ? read_ref(r, g) : read_bucket(r, g);
    if (rc != ERMA_OK)
        return rc;
    g->live = true;
    r->nfree--;
    r->stats.gets++;
    return ERMA_OK;
}

/* The bucket or item changed under us: start again from the bucket. */
static void retry(struct kv_reader *r, struct get *g)
{
    r->stats.retries++;
    int rc = ++g->tries >= r->max_tries ? ERMA_EAGAIN : read_bucket(r, g);
    if (rc != ERMA_OK)
        finish(r, g, rc, NULL, 0);
}

/* Reads candidate item g->ref, or ends the GET when none is left. */
static void next_item(struct kv_reader *r, struct get *g)
{
    if (g->ref >= g->nrefs) {
        finish(r, g, ERMA_ENOENT, NULL, 0);
        return;
    }
    const int rc = read_ref(r, g);
    if (rc != ERMA_OK)
        finish(r, g, rc, NULL, 0);
}

/* A GET that found its item: the cache keeps where. */
static void remember(struct kv_reader *r, const struct get *g)
{
    if (g->cached) {
        r->stats.cache_hits++;
    } else if (g->loc) {
        struct loc *l = loc_slot(r, g->loc);
        l->tag = g->loc;
        l->ref = g->refs[g->ref];
    }
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
        remember(r, g);
        finish(r, g, ERMA_OK, val, vlen);
    } else if (g->cached) { /* moved, deleted, dropped or torn: ask the bucket */
        g->cached = false;
        r->stats.cache_stale++;
        struct loc *l = loc_find(r, g->loc);
        if (l && l->ref.off == g->refs[0].off && l->ref.stamp == g->refs[0].stamp)
            l->tag = 0; /* (not since taken by another key, or this one's new place) */
        const int brc = read_bucket(r, g);
        if (brc != ERMA_OK)
            finish(r, g, brc, NULL, 0);
    } else if (rc == ERMA_EAGAIN) {
        retry(r, g);
    } else {
        g->ref++;
        next_item(r, g);
    }
}

/* Not inlined: the reader is polled every loop pass, mostly for nothing,
 * and this keeps that path from saving registers for the loop. */
__attribute__((noinline)) static int advance_all(struct kv_reader *r,
                                                 const struct erma_rma_completion *c, int n)
{
    int done = 0;
    for (int i = 0; i < n; i++) {
        if (c[i].tag >= r->max_gets || !r->gets[c[i].tag].live)
            continue; /* not ours */
        struct get *g = &r->gets[c[i].tag];
        if (c[i].status != ERMA_OK)
            finish(r, g, c[i].status, NULL, 0);
        else
            advance(r, g);
        done += !g->live;
    }
    return done;
}

int kv_reader_poll(struct kv_reader *r)
{
    struct erma_rma_completion c[32];
    const int n = erma_rma_poll(r->rma, c, 32);
    return n > 0 ? advance_all(r, c, n) : 0;
}
