/* The MICA-style table of erma/kv.h. */
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "erma/errors.h"
#include "kv/kv.h"

#define MAGIC 0x65726d614b56ull /* "ermaKV" */
#define HDR 64
#define ITEM_HDR 16
#define ITEM_CHECK 8
#define POS_MASK ((1ull << 39) - 1) /* slot positions: 36 bits of 8-byte units */
#define SUPERSEDED (1ull << 63)     /* in a stamp: a later item, or none, holds the key */

struct kv {
    uint8_t *mem;
    size_t len;
    uint64_t nbuckets, log_bytes, head;
};

static uint64_t get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static void put64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

static uint64_t pow2(uint64_t n)
{
    uint64_t p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

static uint64_t key_hash(const void *key, uint32_t klen)
{
    static const unsigned char k[crypto_shorthash_KEYBYTES] = {0x65, 0x72, 0x6d, 0x61};
    unsigned char h[crypto_shorthash_BYTES];
    crypto_shorthash(h, key, klen, k);
    return get64(h);
}

/* Slot: tag 16 | length in 8-byte units 12 | position in 8-byte units 36. */
static uint16_t tag_of(uint64_t h)
{
    return (uint16_t)(h >> 48) | 1;
}

static uint64_t slot_make(uint16_t tag, uint32_t len, uint64_t pos)
{
    return (uint64_t)tag << 48 | (uint64_t)(len / 8) << 36 | (pos / 8 & ((1ull << 36) - 1));
}

static uint16_t slot_tag(uint64_t s)
{
    return (uint16_t)(s >> 48);
}

static uint32_t slot_len(uint64_t s)
{
    return (uint32_t)((s >> 36) & 0xfff) * 8;
}

static uint64_t slot_pos(uint64_t s)
{
    return (s & ((1ull << 36) - 1)) * 8;
}

static uint32_t item_len(uint32_t klen, uint32_t vlen)
{
    return (ITEM_HDR + klen + vlen + 7) / 8 * 8 + ITEM_CHECK;
}

/* The check of an item of len bytes, over all that precedes it: each
 * 8-byte word xored in, then multiplied by an odd constant and xor-shifted.
 * Both steps are bijections, so a copy that differs from the item in one
 * word always fails the check, and one torn in several places passes with
 * a chance of about 2^-64. It guards against torn reads only: the AEAD
 * of the one-sided packets guards the bytes on the wire. len is a
 * multiple of 8 (item_len). */
static uint64_t item_sum(const uint8_t *item, uint32_t len)
{
    uint64_t h = 0x6a09e667f3bcc909ull ^ len;
    for (uint32_t i = 0; i + ITEM_CHECK < len; i += 8) {
        h = (h ^ get64(item + i)) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    h *= 0xbf58476d1ce4e5b9ull; /* the end of splitmix64, so the last word spreads too */
    return h ^ h >> 31;
}

static uint64_t log_base(uint64_t nbuckets)
{
    return HDR + nbuckets * KV_BUCKET;
}

uint64_t kv_table_len(uint64_t nbuckets, uint64_t log_bytes)
{
    return log_base(nbuckets) + log_bytes;
}

int kv_create(uint32_t buckets, uint64_t log_bytes, struct kv **out)
{
    if (!out || buckets == 0 || buckets > (1u << 26) || log_bytes > (1ull << 38) ||
        sodium_init() < 0)
        return ERMA_EINVAL;
    struct kv *kv = calloc(1, sizeof *kv);
    if (!kv)
        return ERMA_ENOMEM;
    kv->nbuckets = pow2(buckets);
    kv->log_bytes = pow2(log_bytes < 65536 ? 65536 : log_bytes);
    kv->len = kv_table_len(kv->nbuckets, kv->log_bytes);
    kv->mem = aligned_alloc(64, kv->len);
    if (!kv->mem) {
        free(kv);
        return ERMA_ENOMEM;
    }
    memset(kv->mem, 0, kv->len);
    put64(kv->mem, MAGIC);
    put64(kv->mem + 8, kv->nbuckets);
    put64(kv->mem + 16, kv->log_bytes);
    *out = kv;
    return ERMA_OK;
}

void kv_destroy(struct kv *kv)
{
    if (kv)
        free(kv->mem);
    free(kv);
}

const void *kv_memory(const struct kv *kv, size_t *len)
{
    *len = kv->len;
    return kv->mem;
}

uint64_t kv_nbuckets(const struct kv *kv)
{
    return kv->nbuckets;
}

uint64_t kv_log_bytes(const struct kv *kv)
{
    return kv->log_bytes;
}

void kv_bucket_of(uint64_t nbuckets, const void *key, uint32_t klen, uint64_t *off,
                  uint32_t *len)
{
    *off = HDR + (key_hash(key, klen) & (nbuckets - 1)) * KV_BUCKET;
    *len = KV_BUCKET;
}

int kv_bucket_find(const void *bucket, uint64_t nbuckets, uint64_t log_bytes,
                   const void *key, uint32_t klen, struct kv_ref *refs, int max)
{
    const uint8_t *b = bucket;
    if (get64(b) & 1)
        return ERMA_EAGAIN;
    const uint16_t tag = tag_of(key_hash(key, klen));
    int n = 0;
    for (int i = 0; i < KV_SLOTS && n < max; i++) {
        const uint64_t s = get64(b + 8 + 8 * i);
        if (s && slot_tag(s) == tag)
            refs[n++] = (struct kv_ref){
                .off = log_base(nbuckets) + (slot_pos(s) & (log_bytes - 1)),
                .stamp = slot_pos(s) + 1,
                .len = slot_len(s)};
    }
    return n;
}

int kv_item_check(const void *item, const struct kv_ref *ref, const void *key,
                  uint32_t klen, const uint8_t **val, uint32_t *vlen)
{
    const uint8_t *it = item;
    const uint32_t len = ref->len;
    if (len < ITEM_HDR + ITEM_CHECK || len % 8)
        return ERMA_EAGAIN;
    if (get64(it) == (ref->stamp | SUPERSEDED))
        return ERMA_EAGAIN; /* put again, deleted or dropped: the bucket knows */
    if (get64(it) != ref->stamp)
        return ERMA_ENOENT; /* the log has written another item here: this one is gone */
    uint32_t kl, vl;
    memcpy(&kl, it + 8, 4);
    memcpy(&vl, it + 12, 4);
    if ((uint64_t)kl + vl > len || item_len(kl, vl) != len ||
        get64(it + len - ITEM_CHECK) != item_sum(it, len))
        return ERMA_EAGAIN; /* torn: read in pieces while being overwritten */
    if (kl != klen || memcmp(it + ITEM_HDR, key, klen) != 0)
        return ERMA_ENOENT;
    *val = it + ITEM_HDR + kl;
    *vlen = vl;
    return ERMA_OK;
}

/* ---- the owner's side ---- */

static uint8_t *bucket_at(const struct kv *kv, uint64_t h)
{
    return kv->mem + HDR + (h & (kv->nbuckets - 1)) * KV_BUCKET;
}

/* Bytes appended since the item a slot names (positions wrap at 2^39). */
static uint64_t slot_age(const struct kv *kv, uint64_t s)
{
    return (kv->head - slot_pos(s)) & POS_MASK;
}

static uint8_t *item_at(const struct kv *kv, uint64_t s)
{
    return kv->mem + log_base(kv->nbuckets) + (slot_pos(s) & (kv->log_bytes - 1));
}

/* True when the item a slot names is still there: nothing has been written
 * over its stamp (the same test a reader of copies makes; the log may leave
 * an item at its end untouched for several wraps). */
static int slot_live(const struct kv *kv, uint64_t s)
{
    return s && get64(item_at(kv, s)) == slot_pos(s) + 1;
}

/* The slot index holding key in bucket b, or -1. */
static int find(const struct kv *kv, const uint8_t *b, uint16_t tag, const void *key,
                uint32_t klen)
{
    for (int i = 0; i < KV_SLOTS; i++) {
        const uint64_t s = get64(b + 8 + 8 * i);
        if (!slot_live(kv, s) || slot_tag(s) != tag)
            continue;
        const uint8_t *it = item_at(kv, s);
        uint32_t kl;
        memcpy(&kl, it + 8, 4);
        if (kl == klen && memcmp(it + ITEM_HDR, key, klen) == 0)
            return i;
    }
    return -1;
}

/* Where a new slot goes: the key's own, a free or dead one, else the oldest. */
static int victim(const struct kv *kv, const uint8_t *b, int own)
{
    if (own >= 0)
        return own;
    int oldest = 0;
    for (int i = 0; i < KV_SLOTS; i++) {
        const uint64_t s = get64(b + 8 + 8 * i);
        if (!slot_live(kv, s))
            return i;
        if (slot_age(kv, s) > slot_age(kv, get64(b + 8 + 8 * oldest)))
            oldest = i;
    }
    return oldest;
}

/* Changes slot i of bucket b to s, with the bucket's version odd meanwhile;
 * the item it named, if still there, is marked superseded, so that a
 * reader holding its location (not the bucket) does not take it for the
 * key's live item. */
static void slot_set(const struct kv *kv, uint8_t *b, int i, uint64_t s)
{
    const uint64_t old = get64(b + 8 + 8 * i);
    put64(b, get64(b) + 1);
    put64(b + 8 + 8 * i, s);
    put64(b, get64(b) + 1);
    if (slot_live(kv, old))
        put64(item_at(kv, old), (slot_pos(old) + 1) | SUPERSEDED);
}

int kv_put(struct kv *kv, const void *key, uint32_t klen, const void *val,
           uint32_t vlen)
{
    if (!kv || !key || klen == 0 || (vlen && !val))
        return ERMA_EINVAL;
    if ((uint64_t)klen + vlen + ITEM_HDR + ITEM_CHECK + 7 > KV_MAX_ITEM)
        return ERMA_E2BIG;
    const uint32_t len = item_len(klen, vlen);
    uint64_t pos = kv->head;
    if ((pos & (kv->log_bytes - 1)) + len > kv->log_bytes) /* no wrapping item */
        pos = (pos | (kv->log_bytes - 1)) + 1;
    kv->head = pos + len;
    uint8_t *it = kv->mem + log_base(kv->nbuckets) + (pos & (kv->log_bytes - 1));
    memset(it, 0, len);
    put64(it, (pos & POS_MASK) + 1); /* the stamp a slot's position gives */
    memcpy(it + 8, &klen, 4);
    memcpy(it + 12, &vlen, 4);
    memcpy(it + ITEM_HDR, key, klen);
    if (vlen)
        memcpy(it + ITEM_HDR + klen, val, vlen);
    put64(it + len - ITEM_CHECK, item_sum(it, len));
    put64(kv->mem + 24, kv->head);
    const uint64_t h = key_hash(key, klen);
    uint8_t *b = bucket_at(kv, h);
    slot_set(kv, b, victim(kv, b, find(kv, b, tag_of(h), key, klen)),
             slot_make(tag_of(h), len, pos));
    return ERMA_OK;
}

int kv_get(const struct kv *kv, const void *key, uint32_t klen, void *val,
           uint32_t cap, uint32_t *vlen)
{
    if (!kv || !key || !vlen)
        return ERMA_EINVAL;
    const uint64_t h = key_hash(key, klen);
    const uint8_t *b = bucket_at(kv, h);
    const int i = find(kv, b, tag_of(h), key, klen);
    if (i < 0)
        return ERMA_ENOENT;
    const uint8_t *it = item_at(kv, get64(b + 8 + 8 * i));
    memcpy(vlen, it + 12, 4);
    if (*vlen > cap)
        return ERMA_E2BIG;
    memcpy(val, it + ITEM_HDR + klen, *vlen);
    return ERMA_OK;
}

int kv_delete(struct kv *kv, const void *key, uint32_t klen)
{
    if (!kv || !key)
        return ERMA_EINVAL;
    const uint64_t h = key_hash(key, klen);
    uint8_t *b = bucket_at(kv, h);
    const int i = find(kv, b, tag_of(h), key, klen);
    if (i < 0)
        return ERMA_ENOENT;
    slot_set(kv, b, i, 0);
    return ERMA_OK;
}
