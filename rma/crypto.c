/* rma/crypto.c - AEAD and key derivation for one-sided ops, all libsodium. */
#include <sodium.h>
#include <string.h>
#include <time.h>

#include "internal.h"

static bool aes_hw; /* the CPU has AES-NI (and CLMUL), set once */

int erma__rma_crypto_init(void)
{
    if (sodium_init() < 0)
        return ERMA_ENOTSUP;
    aes_hw = crypto_aead_aes256gcm_is_available() != 0;
    return ERMA_OK;
}

bool erma__rma_aes_available(void)
{
    return aes_hw;
}

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
    crypto_generichash(kd, ERMA_RMA_KEY_BYTES, msg, 17u + alen, kr, ERMA_RMA_KEY_BYTES);
}

static void nonce_of(uint8_t n[12], uint8_t dir, uint64_t ctr)
{
    memset(n, 0, 12);
    erma_put_le(n, ctr, 8);
    n[8] = dir;
}

#define AD_LEN (ERMA_HDR_SIZE + RMA_OPHDR)

void erma__rma_seal_as(const uint8_t kd[ERMA_RMA_KEY_BYTES], uint8_t cipher, uint8_t dir,
                      uint64_t nonce_ctr, uint8_t *pkt, const void *m, uint32_t plen)
{
    uint8_t n[12];
    nonce_of(n, dir, nonce_ctr);
    uint8_t *c = pkt + AD_LEN, *tag = c + plen;
    if (cipher == ERMA_RMA_AES256_GCM)
        crypto_aead_aes256gcm_encrypt_detached(c, tag, NULL, m, plen, pkt, AD_LEN, NULL, n, kd);
    else
        crypto_aead_chacha20poly1305_ietf_encrypt_detached(c, tag, NULL, m, plen, pkt, AD_LEN,
                                                           NULL, n, kd);
}

void erma__rma_seal(const uint8_t kd[ERMA_RMA_KEY_BYTES], uint8_t dir, uint64_t nonce_ctr,
                   uint8_t *pkt, const void *m, uint32_t plen)
{
    erma__rma_seal_as(kd, aes_hw ? ERMA_RMA_AES256_GCM : ERMA_RMA_CHACHA20_POLY1305, dir,
                     nonce_ctr, pkt, m, plen);
}

int erma__rma_open_as(const uint8_t kd[ERMA_RMA_KEY_BYTES], uint8_t cipher, uint8_t dir,
                     uint64_t nonce_ctr, const uint8_t *pkt, uint32_t len, uint8_t *m)
{
    if (len < RMA_OVERHEAD || (cipher == ERMA_RMA_AES256_GCM && !aes_hw))
        return -1;
    uint8_t n[12];
    nonce_of(n, dir, nonce_ctr);
    const uint32_t plen = len - RMA_OVERHEAD;
    const uint8_t *c = pkt + AD_LEN, *tag = c + plen;
    if (cipher == ERMA_RMA_AES256_GCM)
        return crypto_aead_aes256gcm_decrypt_detached(m, NULL, c, plen, tag, pkt, AD_LEN, n, kd);
    return crypto_aead_chacha20poly1305_ietf_decrypt_detached(m, NULL, c, plen, tag, pkt, AD_LEN,
                                                              n, kd);
}

uint64_t erma__rma_wallclock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
