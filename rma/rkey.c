/* rma/rkey.c - the portable encoding of struct erma_rkey (rma.h): a version
 * byte, then the fields little-endian, so that a key can travel between
 * hosts of any byte order and any compiler's struct padding.
 *   [u8 version 1][u32 region][u32 key_gen][u8 cipher][kd 32]  (42 bytes) */
#include <string.h>

#include "erma/rma.h"
#include "erma/sdk/wire.h"

#define RKEY_VERSION 1

static int known_cipher(unsigned cipher)
{
    return cipher == ERMA_RMA_CHACHA20_POLY1305 || cipher == ERMA_RMA_AES256_GCM;
}

int erma_rkey_pack(const struct erma_rkey *key, uint8_t out[ERMA_RKEY_PACKED_BYTES])
{
    if (!key || !out || !known_cipher(key->cipher))
        return ERMA_EINVAL;
    out[0] = RKEY_VERSION;
    erma_put_le(out + 1, key->region, 4);
    erma_put_le(out + 5, key->key_gen, 4);
    out[9] = key->cipher;
    memcpy(out + 10, key->kd, ERMA_RMA_KEY_BYTES);
    return ERMA_OK;
}

int erma_rkey_unpack(const uint8_t *in, size_t len, struct erma_rkey *out)
{
    if (!in || !out)
        return ERMA_EINVAL;
    if (len != ERMA_RKEY_PACKED_BYTES || in[0] != RKEY_VERSION || !known_cipher(in[9]))
        return ERMA_EBADPKT;
    memset(out, 0, sizeof *out);
    out->region = (uint32_t)erma_get_le(in + 1, 4);
    out->key_gen = (uint32_t)erma_get_le(in + 5, 4);
    out->cipher = in[9];
    memcpy(out->kd, in + 10, ERMA_RMA_KEY_BYTES);
    return ERMA_OK;
}
