/* Consistent hashing for kvcs (erma/kvcs.h): vnodes points per server on a
 * 64-bit ring of SipHash values, sorted; a key's replicas are found by a
 * binary search and its point's list, computed with the ring (or a
 * clockwise walk). */
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "kvcs/kvcs.h"
#include "erma/sdk/wire.h"

struct point {
    uint64_t hash;
    uint32_t server;
};

/* Each point's replica list, the first nsucc distinct servers clockwise
 * from it, is computed at creation when the table stays small
 * (RING_SUCC_MAX entries): a key's replicas are then its point's list. */
#define RING_SUCC_MAX (1u << 20)

struct kvcs_ring {
    uint32_t nservers, npoints;
    struct point *points;
    uint32_t nsucc;  /* 0: no table, walk the ring */
    uint32_t *succ;  /* point i's list at succ[i * nsucc] */
};

static uint32_t walk(const struct kvcs_ring *ring, uint32_t at, uint32_t *out, uint32_t r);

/* Fixed, so that every process builds the same ring. */
static const uint8_t ring_key[crypto_shorthash_KEYBYTES] = "erma kvcs ring!";

static uint64_t hash_of(const void *data, size_t len)
{
    uint8_t h[crypto_shorthash_BYTES];
    crypto_shorthash(h, data, len, ring_key);
    return erma_get_le(h, 8);
}

static int by_hash(const void *a, const void *b)
{
    const struct point *x = a, *y = b;
    if (x->hash != y->hash)
        return x->hash < y->hash ? -1 : 1;
    return x->server < y->server ? -1 : x->server > y->server;
}

int kvcs_ring_create(uint32_t nservers, uint32_t vnodes, struct kvcs_ring **out)
{
    if (!vnodes)
        vnodes = 64;
    if (!out || nservers == 0 || (uint64_t)nservers * vnodes > (1u << 24))
        return ERMA_EINVAL;
    if (sodium_init() < 0)
        return ERMA_ENOTSUP;
    struct kvcs_ring *r = calloc(1, sizeof *r);
    if (!r || !(r->points = calloc((size_t)nservers * vnodes, sizeof *r->points))) {
        free(r);
        return ERMA_ENOMEM;
    }
    r->nservers = nservers;
    r->npoints = nservers * vnodes;
    for (uint32_t s = 0; s < nservers; s++)
        for (uint32_t j = 0; j < vnodes; j++) {
            uint8_t id[8];
            erma_put_le(id, s, 4);
            erma_put_le(id + 4, j, 4);
            r->points[s * vnodes + j] = (struct point){hash_of(id, sizeof id), s};
        }
    qsort(r->points, r->npoints, sizeof *r->points, by_hash);
    const uint32_t nsucc = nservers < KVCS_MAX_REPLICAS ? nservers : KVCS_MAX_REPLICAS;
    if ((uint64_t)r->npoints * nsucc <= RING_SUCC_MAX &&
        (r->succ = malloc((size_t)r->npoints * nsucc * sizeof *r->succ))) {
        for (uint32_t i = 0; i < r->npoints; i++)
            walk(r, i, r->succ + (size_t)i * nsucc, nsucc);
        r->nsucc = nsucc; /* set last: walk() above used no table */
    }
    *out = r;
    return ERMA_OK;
}

void kvcs_ring_destroy(struct kvcs_ring *ring)
{
    if (!ring)
        return;
    free(ring->points);
    free(ring->succ);
    free(ring);
}

uint32_t kvcs_ring_servers(const struct kvcs_ring *ring)
{
    return ring ? ring->nservers : 0;
}

/* The first point at or after h, wrapping to 0. */
static uint32_t first_at(const struct kvcs_ring *ring, uint64_t h)
{
    uint32_t lo = 0, hi = ring->npoints;
    while (lo < hi) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if (ring->points[mid].hash < h)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo == ring->npoints ? 0 : lo;
}

static int has(const uint32_t *out, uint32_t n, uint32_t s)
{
    for (uint32_t i = 0; i < n; i++)
        if (out[i] == s)
            return 1;
    return 0;
}

/* The first r distinct servers clockwise from point at, into out. */
static uint32_t walk(const struct kvcs_ring *ring, uint32_t at, uint32_t *out, uint32_t r)
{
    uint32_t n = 0;
    for (uint32_t walked = 0; n < r && walked < ring->npoints; walked++) {
        const uint32_t s = ring->points[at].server;
        if (!has(out, n, s))
            out[n++] = s;
        at = at + 1 == ring->npoints ? 0 : at + 1;
    }
    return n;
}

int kvcs_ring_replicas(const struct kvcs_ring *ring, const void *key, uint32_t klen,
                       uint32_t *out, uint32_t r)
{
    if (!ring || !key || klen == 0 || !out)
        return ERMA_EINVAL;
    if (r > ring->nservers)
        r = ring->nservers;
    const uint32_t at = first_at(ring, hash_of(key, klen));
    if (r > ring->nsucc)
        return (int)walk(ring, at, out, r);
    memcpy(out, ring->succ + (size_t)at * ring->nsucc, r * sizeof *out);
    return (int)r;
}
