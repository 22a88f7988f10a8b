/* Message buffers (their layout: internal.h). */
#include <string.h>

#include "internal.h"

static size_t mem_size(uint32_t max_size, uint32_t max_pkts)
{
    return (size_t)ERMA_HDR_SIZE * max_pkts + max_size;
}

int erma_msgbuf_alloc(struct erma_rpc *rpc, size_t max_size, struct erma_msgbuf *out)
{
    if (!rpc || !out)
        return ERMA_EINVAL;
    memset(out, 0, sizeof *out);
    if (max_size > ERMA_MAX_MSG_SIZE)
        return ERMA_E2BIG;
    const uint32_t pkts = erma__msg_pkts((uint32_t)max_size, rpc->pkt_data);
    out->mem = erma_pool_alloc(rpc->ep->pool, mem_size((uint32_t)max_size, pkts));
    if (!out->mem)
        return ERMA_ENOMEM;
    out->data = out->mem + ERMA_HDR_SIZE;
    out->size = out->max_size = (uint32_t)max_size;
    out->max_pkts = pkts;
    out->pkt_data = rpc->pkt_data;
    return ERMA_OK;
}

void erma_msgbuf_free(struct erma_rpc *rpc, struct erma_msgbuf *mb)
{
    if (!rpc || !mb || !mb->mem)
        return;
    erma_pool_free(rpc->ep->pool, mb->mem, mem_size(mb->max_size, mb->max_pkts));
    memset(mb, 0, sizeof *mb);
}

int erma_msgbuf_resize(struct erma_msgbuf *mb, size_t size)
{
    if (!mb || !mb->mem)
        return ERMA_EINVAL;
    if (size > mb->max_size)
        return ERMA_E2BIG;
    mb->size = (uint32_t)size;
    return ERMA_OK;
}
