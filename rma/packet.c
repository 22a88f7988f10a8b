/* rma/packet.c - the one-sided packet: its op header codec, and packets
 * built and sealed in the endpoint's TX batch. Used by the target and the
 * initiator; uses nothing of theirs. */
#include <string.h>

#include "internal.h"

/* ---- op header codec ---- */

void erma__rma_ophdr_encode(const struct rma_ophdr *o, uint8_t *p)
{
    erma_put(&p, o->type, 1);
    erma_put(&p, o->status, 1);
    erma_put(&p, o->flags, 1);
    erma_put(&p, o->pkt_idx, 1);
    erma_put(&p, o->slot, 2);
    erma_put(&p, o->pkt_off, 2);
    erma_put(&p, o->region, 4);
    erma_put(&p, o->key_gen, 4);
    erma_put(&p, o->offset, 8);
    erma_put(&p, o->identity, 8);
    erma_put(&p, o->init_ctr, 8);
    erma_put(&p, o->len, 4);
    erma_put(&p, o->sol, 4);
    erma_put(&p, o->token, 8);
    erma_put(&p, o->deadline, 8);
    erma_put(&p, o->nonce_ctr, 8);
}

void erma__rma_ophdr_decode(const uint8_t *p, struct rma_ophdr *o)
{
    o->type = (uint8_t)erma_get(&p, 1);
    o->status = (uint8_t)erma_get(&p, 1);
    o->flags = (uint8_t)erma_get(&p, 1);
    o->pkt_idx = (uint8_t)erma_get(&p, 1);
    o->slot = (uint16_t)erma_get(&p, 2);
    o->pkt_off = (uint16_t)erma_get(&p, 2);
    o->region = (uint32_t)erma_get(&p, 4);
    o->key_gen = (uint32_t)erma_get(&p, 4);
    o->offset = erma_get(&p, 8);
    o->identity = erma_get(&p, 8);
    o->init_ctr = erma_get(&p, 8);
    o->len = (uint32_t)erma_get(&p, 4);
    o->sol = (uint32_t)erma_get(&p, 4);
    o->token = erma_get(&p, 8);
    o->deadline = erma_get(&p, 8);
    o->nonce_ctr = erma_get(&p, 8);
}

/* ---- packets into the endpoint's TX batch ---- */

void erma__rma_send(struct erma_rma *rma, const struct erma_addr *dst, struct rma_ophdr *h,
                   const uint8_t *kd, uint8_t cipher, uint8_t dir, const void *m, uint32_t plen)
{
    const struct erma_hdr eh = {.proto = ERMA_PROTO_RMA, .host_delay = dir ? rma->tx_delay : 0};
    uint8_t *pkt;
    struct erma_tx_pkt *p = erma__ep_tx(rma->ep, dst, NULL, NULL, &pkt);
    if (dir == 0) /* from the initiator's port of the op's path */
        p->path = RMA_PATH_OF(h->flags) < rma->ep->npaths ? RMA_PATH_OF(h->flags) : 0;
    h->nonce_ctr = ++rma->ctr;
    erma_hdr_encode(&eh, pkt);
    erma__rma_ophdr_encode(h, pkt + ERMA_HDR_SIZE);
    if (kd)
        erma__rma_seal(rma, kd, cipher, dir, h->nonce_ctr, pkt, m, plen);
    else /* unsealed error: no payload, zero tag */
        memset(pkt + ERMA_HDR_SIZE + RMA_OPHDR, 0, RMA_TAG);
    erma__ep_tx_room_len(rma->ep, p, RMA_OVERHEAD + plen);
}
