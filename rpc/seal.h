/* Authenticated, encrypted sessions (seal.c): the handshake's proofs and
 * keys, and the sealing and opening of each packet. */
#ifndef ERMA_RPC_SEAL_H
#define ERMA_RPC_SEAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "crypto/aead.h"
#include "erma/rpc.h"

#define ERMA_PROOF_BYTES 16
#define ERMA_SEAL_OVERHEAD 24 /* counter (8) and tag (16) after the data */

/* One session's keys and windows, one per direction. */
struct seal {
    struct erma__aead tx, rx; /* AES-256-GCM keys expanded once */
    uint64_t tx_ctr;          /* the last counter sent */
    uint64_t rx_top, rx_seen; /* highest counter opened; bit i: rx_top - i was */
    bool on;
};

/* The proof under label (below) of a session-management payload whose
 * proof field is zero: BLAKE2b keyed with the pre-shared key, 16 bytes. */
void erma__seal_proof(const uint8_t psk[ERMA_PSK_BYTES], const char *label,
                      const uint8_t *payload, size_t len, uint8_t out[ERMA_PROOF_BYTES]);
bool erma__seal_proof_ok(const uint8_t psk[ERMA_PSK_BYTES], const char *label,
                         const uint8_t *payload, size_t len,
                         const uint8_t proof[ERMA_PROOF_BYTES]);
#define SEAL_CONNECT "erma connect" /* the client's connect request */
#define SEAL_ACCEPT "erma accept"   /* the server's CONNECT_RESP granting a session */
#define SEAL_REFUSE "erma refuse"   /* its CONNECT_RESP refusing one, to a proven client */
/* The session's keys from the accept payload (proof zeroed) both ends saw. */
int erma__seal_start(struct seal *k, const uint8_t psk[ERMA_PSK_BYTES], const uint8_t *accept,
                     size_t len, bool client, bool aes);
void erma__seal_end(struct seal *k);
/* Writes hdr, data encrypted, counter and tag to out; returns its length.
 * out may be hdr, with the data right after it: sealed in place. */
uint32_t erma__seal(struct seal *k, const uint8_t *hdr, const uint8_t *data, uint32_t len,
                    uint8_t *out);
/* Opens a sealed packet in place and shortens *len to header and data:
 * ERMA_EAGAIN for a counter the window has seen (a replay) or left behind,
 * ERMA_EAUTH for a forgery, ERMA_EBADPKT when too short. */
int erma__seal_open(struct seal *k, uint8_t *pkt, uint32_t *len);

#endif
