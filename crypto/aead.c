/* crypto/aead.c - the AEAD and keyed hash of erma, all libsodium. */
#include <stdlib.h>
#include <string.h>

#include "aead.h"
#include "erma/errors.h"

bool erma__crypto_init(void)
{
    return sodium_init() >= 0;
}

bool erma__crypto_aes_available(void)
{
    return crypto_aead_aes256gcm_is_available() != 0;
}

int erma__aead_expand(struct erma__aead *k, const uint8_t key[ERMA__AEAD_KEY], bool aes)
{
    memcpy(k->key, key, ERMA__AEAD_KEY);
    k->aes = aes;
    if (!aes)
        return ERMA_OK;
    if (!k->expanded)
        k->expanded = aligned_alloc(16, sizeof *k->expanded);
    if (!k->expanded)
        return ERMA_ENOMEM;
    crypto_aead_aes256gcm_beforenm(k->expanded, key);
    return ERMA_OK;
}

void erma__aead_end(struct erma__aead *k)
{
    if (k->expanded) /* the AES key schedule is key material too */
        sodium_memzero(k->expanded, sizeof *k->expanded);
    free(k->expanded);
    sodium_memzero(k, sizeof *k);
}

void erma__aead_seal(const struct erma__aead *k, const uint8_t n[ERMA__AEAD_NONCE],
                     const uint8_t *ad, size_t adlen, const uint8_t *m, size_t mlen, uint8_t *c,
                     uint8_t tag[ERMA__AEAD_TAG])
{
    if (!k->aes)
        crypto_aead_chacha20poly1305_ietf_encrypt_detached(c, tag, NULL, m, mlen, ad, adlen, NULL,
                                                           n, k->key);
    else if (k->expanded)
        crypto_aead_aes256gcm_encrypt_detached_afternm(c, tag, NULL, m, mlen, ad, adlen, NULL, n,
                                                        k->expanded);
    else
        crypto_aead_aes256gcm_encrypt_detached(c, tag, NULL, m, mlen, ad, adlen, NULL, n, k->key);
}

int erma__aead_open(const struct erma__aead *k, const uint8_t n[ERMA__AEAD_NONCE],
                    const uint8_t *ad, size_t adlen, const uint8_t *c, size_t clen,
                    const uint8_t tag[ERMA__AEAD_TAG], uint8_t *m)
{
    if (!k->aes)
        return crypto_aead_chacha20poly1305_ietf_decrypt_detached(m, NULL, c, clen, tag, ad,
                                                                  adlen, n, k->key);
    if (k->expanded) /* expanded only where AES-256-GCM runs (erma__aead_expand's callers) */
        return crypto_aead_aes256gcm_decrypt_detached_afternm(m, NULL, c, clen, tag, ad, adlen, n,
                                                              k->expanded);
    if (!erma__crypto_aes_available())
        return -1;
    return crypto_aead_aes256gcm_decrypt_detached(m, NULL, c, clen, tag, ad, adlen, n, k->key);
}

void erma__keyed_hash(const uint8_t *key, size_t keylen, const void *a, size_t alen,
                      const void *b, size_t blen, uint8_t *out, size_t outlen)
{
    crypto_generichash_state st;
    crypto_generichash_init(&st, key, keylen, outlen);
    crypto_generichash_update(&st, a, alen);
    if (b)
        crypto_generichash_update(&st, b, blen);
    crypto_generichash_final(&st, out, outlen);
}
