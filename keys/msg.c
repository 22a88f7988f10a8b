/* keys/msg.c - the key service's request and answer codecs. */
#include <string.h>

#include "erma/sdk/wire.h"
#include "msg.h"

int erma__keys_req_encode(uint64_t identity, const char *name, uint8_t *out)
{
    const size_t n = strnlen(name, ERMA_KEYS_NAME_MAX + 1);
    if (n == 0 || n > ERMA_KEYS_NAME_MAX)
        return ERMA_EINVAL;
    out[0] = ERMA__KEYS_VERSION;
    out[1] = (uint8_t)n;
    erma_put_le(out + 2, identity, 8);
    memcpy(out + ERMA__KEYS_REQ_HDR, name, n);
    return (int)(ERMA__KEYS_REQ_HDR + n);
}

int erma__keys_req_decode(const uint8_t *in, size_t len, struct erma__keys_req *out)
{
    if (!in || len < ERMA__KEYS_REQ_HDR + 1 || in[0] != ERMA__KEYS_VERSION || in[1] == 0 ||
        in[1] > ERMA_KEYS_NAME_MAX || len != ERMA__KEYS_REQ_HDR + (size_t)in[1])
        return ERMA_EBADPKT;
    out->name_len = in[1];
    out->identity = erma_get_le(in + 2, 8);
    out->name = in + ERMA__KEYS_REQ_HDR;
    return memchr(out->name, 0, out->name_len) ? ERMA_EBADPKT : ERMA_OK;
}

size_t erma__keys_answer_encode(int status, const struct erma_rkey *key, const uint8_t *info,
                                uint8_t info_len, uint8_t *out)
{
    if (status == ERMA_OK && erma_rkey_pack(key, out + 4) != ERMA_OK)
        status = ERMA_EBADPKT; /* a key this side cannot name: never sent */
    erma_put_le(out, (uint32_t)status, 4);
    if (status != ERMA_OK)
        return 4;
    out[4 + ERMA_RKEY_PACKED_BYTES] = info_len;
    if (info_len)
        memcpy(out + 5 + ERMA_RKEY_PACKED_BYTES, info, info_len);
    return 5 + ERMA_RKEY_PACKED_BYTES + (size_t)info_len;
}

int erma__keys_answer_decode(const uint8_t *in, size_t len, struct erma_rkey *key,
                             const uint8_t **info, size_t *info_len)
{
    if (!in || len < 4)
        return ERMA_EBADPKT;
    const int status = (int32_t)erma_get_le(in, 4);
    if (status > 0 || status <= ERMA_ERR_LAST)
        return ERMA_EBADPKT;
    if (status != ERMA_OK)
        return len == 4 ? status : ERMA_EBADPKT;
    const size_t at = 4 + ERMA_RKEY_PACKED_BYTES;
    if (len < at + 1 || in[at] > ERMA_KEYS_INFO_MAX || len != at + 1 + in[at])
        return ERMA_EBADPKT;
    const int rc = erma_rkey_unpack(in + 4, ERMA_RKEY_PACKED_BYTES, key);
    if (rc != ERMA_OK)
        return rc;
    *info_len = in[at];
    *info = in + at + 1;
    return ERMA_OK;
}

bool erma__keys_same_endpoint(struct erma_rpc *rpc, struct erma_rma *rma)
{
    char a[160], b[160];
    return erma_endpoint_uri(erma_rpc_endpoint(rpc), a, sizeof a) == ERMA_OK &&
           erma_rma_uri(rma, b, sizeof b) == ERMA_OK && strcmp(a, b) == 0;
}
