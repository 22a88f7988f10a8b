/* crypto/aead.h - the one AEAD of erma (internal), below rpc and rma, all
 * libsodium: the cipher choice (AES-256-GCM where the CPU has AES-NI, else
 * ChaCha20-Poly1305), 96-bit nonces from a packet counter, sealing and
 * opening with detached 16-byte tags, and keyed BLAKE2b for proofs and
 * key derivation. rpc/seal.c and rma/crypto.c lay out their packets and
 * keys on top of it. */
#ifndef ERMA_CRYPTO_AEAD_H
#define ERMA_CRYPTO_AEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <sodium.h>

#define ERMA__AEAD_KEY 32
#define ERMA__AEAD_TAG 16
#define ERMA__AEAD_NONCE 12

/* Initialises libsodium (any number of times, from any thread); false when
 * it cannot. */
bool erma__crypto_init(void);
/* Whether AES-256-GCM runs here (AES-NI and CLMUL): libsodium has no
 * portable version of it. */
bool erma__crypto_aes_available(void);

/* A key with its cipher. With AES, expanded is the key schedule computed
 * once (erma__aead_expand), or NULL to expand it on every call. */
struct erma__aead {
    uint8_t key[ERMA__AEAD_KEY];
    crypto_aead_aes256gcm_state *expanded;
    bool aes;
};

/* Sets k to key and cipher; with AES also expands it (ERMA_ENOMEM). */
int erma__aead_expand(struct erma__aead *k, const uint8_t key[ERMA__AEAD_KEY], bool aes);
/* Frees what erma__aead_expand took and wipes the key. */
void erma__aead_end(struct erma__aead *k);

/* The nonce of packet counter ctr in direction dir: ctr little-endian in
 * bytes 0-7, dir in byte 8, zero after. (Inline: it runs per packet.) */
static inline void erma__aead_nonce(uint8_t n[ERMA__AEAD_NONCE], uint64_t ctr, uint8_t dir)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(n, &ctr, 8); /* the byte loop cost about 55 instructions a packet */
#else
    for (int i = 0; i < 8; i++)
        n[i] = (uint8_t)(ctr >> (8 * i));
#endif
    n[8] = dir;
    n[9] = n[10] = n[11] = 0;
}

/* Encrypts mlen bytes of m into c (which may be m) and writes the tag,
 * authenticating ad too. */
void erma__aead_seal(const struct erma__aead *k, const uint8_t n[ERMA__AEAD_NONCE],
                     const uint8_t *ad, size_t adlen, const uint8_t *m, size_t mlen, uint8_t *c,
                     uint8_t tag[ERMA__AEAD_TAG]);
/* Decrypts clen bytes of c into m (which may be c): 0 when tag proves c
 * and ad authentic, -1 otherwise (m then holds garbage). */
int erma__aead_open(const struct erma__aead *k, const uint8_t n[ERMA__AEAD_NONCE],
                    const uint8_t *ad, size_t adlen, const uint8_t *c, size_t clen,
                    const uint8_t tag[ERMA__AEAD_TAG], uint8_t *m);

/* BLAKE2b keyed with key (16-64 bytes) over a then b (b may be NULL),
 * outlen (16-64) bytes. */
void erma__keyed_hash(const uint8_t *key, size_t keylen, const void *a, size_t alen,
                      const void *b, size_t blen, uint8_t *out, size_t outlen);

#endif
