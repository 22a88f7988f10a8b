/* Authenticated, encrypted sessions (erma_nexus_cfg.psk): the handshake's
 * proofs and keys, and the sealing and opening of each packet. */
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "erma/wire.h"
#include "seal.h"

#define NONCE_BYTES 12 /* both AEADs: the packet counter, little-endian, zero-padded */

bool erma__seal_aes_available(void)
{
    return crypto_aead_aes256gcm_is_available() != 0;
}

/* BLAKE2b keyed with the pre-shared key over label and a session-management
 * payload (its proof field zeroed by the caller): the proofs (16 bytes)
 * and the session keys (64). */
static void psk_hash(const uint8_t psk[ERMA_PSK_BYTES], const char *label, const uint8_t *payload,
                     size_t len, uint8_t *out, size_t outlen)
{
    crypto_generichash_state st;
    crypto_generichash_init(&st, psk, ERMA_PSK_BYTES, outlen);
    crypto_generichash_update(&st, (const uint8_t *)label, strlen(label) + 1);
    crypto_generichash_update(&st, payload, len);
    crypto_generichash_final(&st, out, outlen);
}

void erma__seal_proof(const uint8_t psk[ERMA_PSK_BYTES], const char *label,
                      const uint8_t *payload, size_t len, uint8_t out[ERMA_PROOF_BYTES])
{
    psk_hash(psk, label, payload, len, out, ERMA_PROOF_BYTES);
}

bool erma__seal_proof_ok(const uint8_t psk[ERMA_PSK_BYTES], const char *label,
                         const uint8_t *payload, size_t len,
                         const uint8_t proof[ERMA_PROOF_BYTES])
{
    uint8_t want[ERMA_PROOF_BYTES];
    erma__seal_proof(psk, label, payload, len, want);
    return sodium_memcmp(want, proof, ERMA_PROOF_BYTES) == 0;
}

static void aes_expand(crypto_aead_aes256gcm_state **st, const uint8_t key[32])
{
    if (!*st)
        *st = aligned_alloc(16, sizeof **st);
    if (*st)
        crypto_aead_aes256gcm_beforenm(*st, key);
}

int erma__seal_start(struct seal *k, const uint8_t psk[ERMA_PSK_BYTES], const uint8_t *accept,
                     size_t len, bool client, bool aes)
{
    uint8_t keys[64];
    psk_hash(psk, "erma keys", accept, len, keys, sizeof keys);
    memcpy(k->tx, client ? keys : keys + 32, 32);
    memcpy(k->rx, client ? keys + 32 : keys, 32);
    sodium_memzero(keys, sizeof keys);
    k->tx_ctr = 0;
    k->rx_top = k->rx_seen = 0;
    k->aes = aes;
    if (aes) {
        aes_expand(&k->tx_st, k->tx);
        aes_expand(&k->rx_st, k->rx);
        if (!k->tx_st || !k->rx_st)
            return ERMA_ENOMEM;
    }
    k->on = true;
    return ERMA_OK;
}

void erma__seal_end(struct seal *k)
{
    free(k->tx_st);
    free(k->rx_st);
    sodium_memzero(k, sizeof *k);
}

static void nonce_of(uint64_t ctr, uint8_t n[NONCE_BYTES])
{
    memset(n, 0, NONCE_BYTES);
    erma_put_le(n, ctr, 8);
}

uint32_t erma__seal(struct seal *k, const uint8_t *hdr, const uint8_t *data, uint32_t len,
                    uint8_t *out)
{
    uint8_t n[NONCE_BYTES];
    const uint64_t ctr = ++k->tx_ctr;
    nonce_of(ctr, n);
    if (out != hdr) /* else sealed in place */
        memcpy(out, hdr, ERMA_HDR_SIZE);
    uint8_t *c = out + ERMA_HDR_SIZE, *tail = c + len;
    erma_put_le(tail, ctr, 8);
    if (k->aes)
        crypto_aead_aes256gcm_encrypt_detached_afternm(c, tail + 8, NULL, data, len, hdr,
                                                        ERMA_HDR_SIZE, NULL, n, k->tx_st);
    else
        crypto_aead_chacha20poly1305_ietf_encrypt_detached(c, tail + 8, NULL, data, len, hdr,
                                                           ERMA_HDR_SIZE, NULL, n, k->tx);
    return ERMA_HDR_SIZE + len + ERMA_SEAL_OVERHEAD;
}

/* Whether counter ctr is new to the receive window (the last 64 counters). */
static bool window_fresh(const struct seal *k, uint64_t ctr)
{
    if (ctr == 0)
        return false;
    if (ctr > k->rx_top)
        return true;
    const uint64_t back = k->rx_top - ctr;
    return back < 64 && !(k->rx_seen >> back & 1);
}

static void window_take(struct seal *k, uint64_t ctr)
{
    if (ctr > k->rx_top) {
        const uint64_t shift = ctr - k->rx_top;
        k->rx_seen = shift >= 64 ? 0 : k->rx_seen << shift;
        k->rx_top = ctr;
    }
    k->rx_seen |= 1ull << (k->rx_top - ctr);
}

int erma__seal_open(struct seal *k, uint8_t *pkt, uint32_t *len)
{
    if (*len < ERMA_HDR_SIZE + ERMA_SEAL_OVERHEAD)
        return ERMA_EBADPKT;
    const uint32_t clen = *len - ERMA_HDR_SIZE - ERMA_SEAL_OVERHEAD;
    uint8_t *c = pkt + ERMA_HDR_SIZE, *tail = c + clen, n[NONCE_BYTES];
    const uint64_t ctr = erma_get_le(tail, 8);
    if (!window_fresh(k, ctr))
        return ERMA_EAGAIN; /* a replay, or too old to tell */
    nonce_of(ctr, n);
    const int rc =
        k->aes ? crypto_aead_aes256gcm_decrypt_detached_afternm(c, NULL, c, clen, tail + 8, pkt,
                                                                ERMA_HDR_SIZE, n, k->rx_st)
               : crypto_aead_chacha20poly1305_ietf_decrypt_detached(c, NULL, c, clen, tail + 8,
                                                                    pkt, ERMA_HDR_SIZE, n, k->rx);
    if (rc != 0)
        return ERMA_EAUTH;
    window_take(k, ctr);
    *len = ERMA_HDR_SIZE + clen;
    return ERMA_OK;
}
