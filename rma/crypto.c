/* rma/crypto.c - one-sided ops' packets and keys on crypto/'s AEAD: the
 * headers are the associated data, the nonce is the sender's packet
 * counter and the direction (0: initiator to target, 1: back). */
#include <string.h>
#include <time.h>

#include "erma/errors.h"
#include "internal.h"

/* BLAKE2b keyed with Kr over "erma-kd\0" | identity | address length |
 * address. */
void erma__rma_kdf(const uint8_t kr[ERMA_RMA_KEY_BYTES], uint64_t identity,
                   const struct erma_addr *addr, uint8_t kd[ERMA_RMA_KEY_BYTES])
{
    uint8_t msg[17 + ERMA_ADDR_MAX] = "erma-kd\0";
    const uint8_t alen = addr->len;
    erma_put_le(msg + 8, identity, 8);
    msg[16] = alen;
    memcpy(msg + 17, addr->raw, alen);
    erma__keyed_hash(kr, ERMA_RMA_KEY_BYTES, msg, 17u + alen, NULL, 0, kd, ERMA_RMA_KEY_BYTES);
}

/* Kd with its cipher, expanded on each call: a peer's key serves a few
 * packets of a few ops. */
static void key_of(struct erma__aead *k, const uint8_t kd[ERMA_RMA_KEY_BYTES], uint8_t cipher)
{
    memcpy(k->key, kd, ERMA__AEAD_KEY);
    k->expanded = NULL;
    k->aes = cipher == ERMA_RMA_AES256_GCM;
}

/* Whether two keys are equal, in constant time (sodium_memcmp's byte loop
 * cost as much as the expansion it saved). */
static bool same_key(const uint8_t *a, const uint8_t *b)
{
    uint64_t d = 0;
    for (unsigned i = 0; i < ERMA__AEAD_KEY; i += 8) {
        uint64_t x, y;
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        d |= x ^ y;
    }
    return d == 0;
}

/* The key to seal or open with under kd: for AES, the engine cache's entry
 * with its schedule (expanded there on a miss), used in place; else (or
 * when memory for a schedule ran out) *tmp, set to kd, which the caller
 * wipes. A bulk transfer's thousands of packets use one key; the entry hit
 * last is looked at first, inline (key_cached). */
__attribute__((noinline)) static const struct erma__aead *
key_search(struct erma_rma *rma, struct erma__aead *tmp, const uint8_t kd[ERMA_RMA_KEY_BYTES],
           uint8_t cipher)
{
    if (cipher == ERMA_RMA_AES256_GCM) {
        struct rma_keys *c = &rma->keys;
        for (unsigned n = 0, i = c->last; n < RMA_KEYS; n++, i = (i + 1) % RMA_KEYS)
            if (c->k[i].expanded && same_key(c->k[i].key, kd)) {
                c->last = i;
                return &c->k[i];
            }
        struct erma__aead *e = &c->k[c->next++ % RMA_KEYS];
        if (erma__aead_expand(e, kd, true) == ERMA_OK)
            return e;
    }
    key_of(tmp, kd, cipher);
    return tmp;
}

static inline const struct erma__aead *key_cached(struct erma_rma *rma, struct erma__aead *tmp,
                                                  const uint8_t kd[ERMA_RMA_KEY_BYTES],
                                                  uint8_t cipher)
{
    const struct erma__aead *e = &rma->keys.k[rma->keys.last];
    if (cipher == ERMA_RMA_AES256_GCM && e->expanded && same_key(e->key, kd))
        return e;
    return key_search(rma, tmp, kd, cipher);
}

void erma__rma_keys_forget(struct erma_rma *rma)
{
    for (unsigned i = 0; i < RMA_KEYS; i++)
        erma__aead_end(&rma->keys.k[i]);
}

#define AD_LEN (ERMA_HDR_SIZE + RMA_OPHDR)

static void seal(const struct erma__aead *k, uint8_t dir, uint64_t nonce_ctr, uint8_t *pkt,
                 const void *m, uint32_t plen)
{
    uint8_t n[ERMA__AEAD_NONCE];
    erma__aead_nonce(n, nonce_ctr, dir);
    erma__aead_seal(k, n, pkt, AD_LEN, m, plen, pkt + AD_LEN, pkt + AD_LEN + plen);
}

static int open_pkt(const struct erma__aead *k, uint8_t dir, uint64_t nonce_ctr,
                    const uint8_t *pkt, uint32_t len, uint8_t *m)
{
    if (len < RMA_OVERHEAD)
        return -1;
    uint8_t n[ERMA__AEAD_NONCE];
    erma__aead_nonce(n, nonce_ctr, dir);
    const uint32_t plen = len - RMA_OVERHEAD;
    return erma__aead_open(k, n, pkt, AD_LEN, pkt + AD_LEN, plen, pkt + AD_LEN + plen, m);
}

void erma__rma_seal_as(const uint8_t kd[ERMA_RMA_KEY_BYTES], uint8_t cipher, uint8_t dir,
                       uint64_t nonce_ctr, uint8_t *pkt, const void *m, uint32_t plen)
{
    struct erma__aead k;
    key_of(&k, kd, cipher);
    seal(&k, dir, nonce_ctr, pkt, m, plen);
    sodium_memzero(&k, sizeof k);
}

int erma__rma_open_as(const uint8_t kd[ERMA_RMA_KEY_BYTES], uint8_t cipher, uint8_t dir,
                      uint64_t nonce_ctr, const uint8_t *pkt, uint32_t len, uint8_t *m)
{
    struct erma__aead k;
    key_of(&k, kd, cipher);
    const int rc = open_pkt(&k, dir, nonce_ctr, pkt, len, m);
    sodium_memzero(&k, sizeof k);
    return rc;
}

void erma__rma_seal(struct erma_rma *rma, const uint8_t kd[ERMA_RMA_KEY_BYTES], uint8_t cipher,
                    uint8_t dir, uint64_t nonce_ctr, uint8_t *pkt, const void *m, uint32_t plen)
{
    struct erma__aead tmp;
    const struct erma__aead *k = key_cached(rma, &tmp, kd, cipher);
    seal(k, dir, nonce_ctr, pkt, m, plen);
    if (k == &tmp)
        sodium_memzero(&tmp, sizeof tmp);
}

int erma__rma_open(struct erma_rma *rma, const uint8_t kd[ERMA_RMA_KEY_BYTES], uint8_t cipher,
                   uint8_t dir, uint64_t nonce_ctr, const uint8_t *pkt, uint32_t len, uint8_t *m)
{
    struct erma__aead tmp;
    const struct erma__aead *k = key_cached(rma, &tmp, kd, cipher);
    const int rc = open_pkt(k, dir, nonce_ctr, pkt, len, m);
    if (k == &tmp)
        sodium_memzero(&tmp, sizeof tmp);
    return rc;
}

uint64_t erma__rma_wallclock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
