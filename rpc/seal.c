/* Authenticated, encrypted sessions (erma_nexus_cfg.psk): the handshake's
 * proofs and keys, and the sealing and opening of each packet. */
#include <string.h>

#include "erma/sdk/wire.h"
#include "seal.h"

/* The nonce is the packet's counter (erma__aead_nonce, direction 0): each
 * direction has its own key. */

/* BLAKE2b keyed with the pre-shared key over label (with its NUL) and a
 * session-management payload (its proof field zeroed by the caller): the
 * proofs (16 bytes) and the session keys (64). */
static void psk_hash(const uint8_t psk[ERMA_PSK_BYTES], const char *label, const uint8_t *payload,
                     size_t len, uint8_t *out, size_t outlen)
{
    erma__keyed_hash(psk, ERMA_PSK_BYTES, label, strlen(label) + 1, payload, len, out, outlen);
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

int erma__seal_start(struct seal *k, const uint8_t psk[ERMA_PSK_BYTES], const uint8_t *accept,
                     size_t len, bool client, bool aes)
{
    uint8_t keys[64];
    psk_hash(psk, "erma keys", accept, len, keys, sizeof keys);
    const int rc = erma__aead_expand(&k->tx, client ? keys : keys + 32, aes) |
                   erma__aead_expand(&k->rx, client ? keys + 32 : keys, aes);
    sodium_memzero(keys, sizeof keys);
    if (rc != ERMA_OK)
        return ERMA_ENOMEM;
    k->tx_ctr = 0;
    k->rx_top = k->rx_seen = 0;
    k->on = true;
    return ERMA_OK;
}

void erma__seal_end(struct seal *k)
{
    erma__aead_end(&k->tx);
    erma__aead_end(&k->rx);
    sodium_memzero(k, sizeof *k);
}

uint32_t erma__seal(struct seal *k, const uint8_t *hdr, const uint8_t *data, uint32_t len,
                    uint8_t *out)
{
    uint8_t n[ERMA__AEAD_NONCE];
    const uint64_t ctr = ++k->tx_ctr;
    erma__aead_nonce(n, ctr, 0);
    if (out != hdr) /* else sealed in place */
        memcpy(out, hdr, ERMA_HDR_SIZE);
    uint8_t *c = out + ERMA_HDR_SIZE, *tail = c + len;
    erma_put_le(tail, ctr, 8);
    erma__aead_seal(&k->tx, n, hdr, ERMA_HDR_SIZE, data, len, c, tail + 8);
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
    uint8_t *c = pkt + ERMA_HDR_SIZE, *tail = c + clen, n[ERMA__AEAD_NONCE];
    const uint64_t ctr = erma_get_le(tail, 8);
    if (!window_fresh(k, ctr))
        return ERMA_EAGAIN; /* a replay, or too old to tell */
    erma__aead_nonce(n, ctr, 0);
    if (erma__aead_open(&k->rx, n, pkt, ERMA_HDR_SIZE, c, clen, tail + 8, c) != 0)
        return ERMA_EAUTH;
    window_take(k, ctr);
    *len = ERMA_HDR_SIZE + clen;
    return ERMA_OK;
}
