#include "erma/sdk/wire.h"

#include "erma/errors.h"

#include <string.h>

static uint64_t get_le64(const uint8_t *p)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
#else
    return erma_get_le(p, 8);
#endif
}

void erma_hdr_encode(const struct erma_hdr *h, void *buf)
{
    const uint64_t w0 = (uint64_t)h->req_type |
                        (uint64_t)(h->msg_size & 0xffffffu) << 8 |
                        (uint64_t)h->dest_session << 32 |
                        (uint64_t)(h->pkt_type & 3u) << 48 |
                        (uint64_t)(h->pkt_num & ERMA_MAX_PKT_NUM) << 50;
    const uint64_t w1 = (h->req_num & ERMA_MAX_REQ_NUM) |
                        (uint64_t)ERMA_HDR_MAGIC << 44 |
                        (uint64_t)(h->proto & 0xfu) << 48 |
                        (uint64_t)(h->host_delay & 0xfffu) << 52;
    uint8_t *p = buf;
    erma_put(&p, w0, 8);
    erma_put(&p, w1, 8);
}

/* Every received packet's header is decoded here: inlined into the check. */
static inline void decode(const void *buf, struct erma_hdr *h)
{
    const uint64_t w0 = get_le64(buf), w1 = get_le64((const uint8_t *)buf + 8);
    h->req_type = (uint8_t)w0;
    h->msg_size = (uint32_t)(w0 >> 8) & 0xffffffu;
    h->dest_session = (uint16_t)(w0 >> 32);
    h->pkt_type = (uint8_t)(w0 >> 48) & 3u;
    h->pkt_num = (uint16_t)(w0 >> 50);
    h->req_num = w1 & ERMA_MAX_REQ_NUM;
    h->proto = (uint8_t)(w1 >> 48) & 0xfu;
    h->host_delay = (uint16_t)(w1 >> 52);
}

void erma_hdr_decode(const void *buf, struct erma_hdr *h)
{
    decode(buf, h);
}

int erma_hdr_check(const void *pkt, size_t len, struct erma_hdr *h)
{
    if (!pkt || len < ERMA_HDR_SIZE)
        return ERMA_EBADPKT;
    const uint64_t w1 = get_le64((const uint8_t *)pkt + 8);
    if (((w1 >> 44) & 0xfu) != ERMA_HDR_MAGIC)
        return ERMA_EBADPKT;
    decode(pkt, h);
    if (h->proto < ERMA_PROTO_RPC || h->proto > ERMA_PROTO_SM)
        return ERMA_EBADPKT;
    if (h->host_delay && h->proto != ERMA_PROTO_RMA &&
        (h->proto != ERMA_PROTO_RPC || (h->pkt_type != ERMA_PKT_CR && h->pkt_type != ERMA_PKT_RESP)))
        return ERMA_EBADPKT;
    if (h->msg_size > ERMA_MAX_MSG_SIZE)
        return ERMA_EBADPKT;
    return ERMA_OK;
}
