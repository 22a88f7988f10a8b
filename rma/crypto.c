/* rma/crypto.c - one-sided ops' packets and keys on crypto/'s AEAD: the
 * headers are the associated data, the nonce is the sender's packet
 * counter and the direction (0: initiator to target, 1: back). */
#include <string.h>
#include <time.h>

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

#define AD_LEN (ERMA_HDR_SIZE + RMA_OPHDR)

void erma__rma_seal_as(const uint8_t kd[ERMA_RMA_KEY_BYTES], uint8_t cipher, uint8_t dir,
                       uint64_t nonce_ctr, uint8_t *pkt, const void *m, uint32_t plen)
{
    struct erma__aead k;
    uint8_t n[ERMA__AEAD_NONCE];
    key_of(&k, kd, cipher);
    erma__aead_nonce(n, nonce_ctr, dir);
    erma__aead_seal(&k, n, pkt, AD_LEN, m, plen, pkt + AD_LEN, pkt + AD_LEN + plen);
}

int erma__rma_open_as(const uint8_t kd[ERMA_RMA_KEY_BYTES], uint8_t cipher, uint8_t dir,
                      uint64_t nonce_ctr, const uint8_t *pkt, uint32_t len, uint8_t *m)
{
    if (len < RMA_OVERHEAD)
        return -1;
    struct erma__aead k;
    uint8_t n[ERMA__AEAD_NONCE];
    key_of(&k, kd, cipher);
    erma__aead_nonce(n, nonce_ctr, dir);
    const uint32_t plen = len - RMA_OVERHEAD;
    return erma__aead_open(&k, n, pkt, AD_LEN, pkt + AD_LEN, plen, pkt + AD_LEN + plen, m);
}

uint64_t erma__rma_wallclock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
