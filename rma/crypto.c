/* rma/crypto.c - AEAD and key derivation for one-sided ops, all libsodium. */
#include <sodium.h>
#include <string.h>
#include <time.h>

#include "internal.h"

static bool use_aes; /* AES-256-GCM where the CPU has AES-NI, set once */

int erma_rma_crypto_init(void)
{
    if (sodium_init() < 0)
        return ERMA_ENOTSUP;
    use_aes = crypto_aead_aes256gcm_is_available() != 0;
    return ERMA_OK;
}

void erma_rma_kdf(const uint8_t kr[ERMA_RMA_KEY_BYTES], uint64_t identity,
             uint8_t kd[ERMA_RMA_KEY_BYTES])
{
    uint8_t msg[16] = "erma-kd\0";
    erma_put_le(msg + 8, identity, 8);
    crypto_generichash(kd, ERMA_RMA_KEY_BYTES, msg, sizeof msg, kr, ERMA_RMA_KEY_BYTES);
}

static void nonce_of(uint8_t n[12], uint8_t dir, uint64_t ctr)
{
    memset(n, 0, 12);
    erma_put_le(n, ctr, 8);
    n[8] = dir;
}

#define AD_LEN (ERMA_HDR_SIZE + RMA_OPHDR)

void erma_rma_seal(const uint8_t kd[ERMA_RMA_KEY_BYTES], uint8_t dir, uint64_t nonce_ctr,
              uint8_t *pkt, const void *m, uint32_t plen)
{
    uint8_t n[12];
    nonce_of(n, dir, nonce_ctr);
    uint8_t *c = pkt + AD_LEN, *tag = c + plen;
    if (use_aes)
        crypto_aead_aes256gcm_encrypt_detached(c, tag, NULL, m, plen, pkt, AD_LEN, NULL, n, kd);
    else
        crypto_aead_chacha20poly1305_ietf_encrypt_detached(c, tag, NULL, m, plen, pkt, AD_LEN,
                                                           NULL, n, kd);
}

int erma_rma_open(const uint8_t kd[ERMA_RMA_KEY_BYTES], uint8_t dir, uint64_t nonce_ctr,
             const uint8_t *pkt, uint32_t len, uint8_t *m)
{
    if (len < RMA_OVERHEAD)
        return -1;
    uint8_t n[12];
    nonce_of(n, dir, nonce_ctr);
    const uint32_t plen = len - RMA_OVERHEAD;
    const uint8_t *c = pkt + AD_LEN, *tag = c + plen;
    if (use_aes)
        return crypto_aead_aes256gcm_decrypt_detached(m, NULL, c, plen, tag, pkt, AD_LEN, n, kd);
    return crypto_aead_chacha20poly1305_ietf_decrypt_detached(m, NULL, c, plen, tag, pkt, AD_LEN,
                                                              n, kd);
}

uint64_t erma_rma_wallclock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
