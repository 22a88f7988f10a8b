/*
 * tests/lib/rpc_attack.h - a client that sends the first packet of a request on
 * every slot of one of its sessions and never the rest (raw packets from
 * the session's own transport, with its server session and request
 * numbers, read from rpc/internal.h). Include after cmocka.h.
 */
#ifndef ERMA_TESTS_RPC_ATTACK_H
#define ERMA_TESTS_RPC_ATTACK_H

#include <string.h>

#include "erma/sdk/transport_driver.h"
#include "erma/sdk/wire.h"
#include "rpc/internal.h"

/* The first packets of a size-byte request of type on the slots of sess. */
static inline void send_first_packets(struct erma_transport *tr, struct erma_rpc *rpc, int sess,
                                      uint8_t type, uint32_t size)
{
    static uint8_t pkt[ERMA_HDR_SIZE + 9000];
    const uint32_t data = tr->max_pkt - ERMA_HDR_SIZE;
    const struct session *s = erma__session_get(rpc, (uint16_t)sess);
    assert_non_null(s);
    memset(pkt + ERMA_HDR_SIZE, 0xab, data);
    for (unsigned k = 0; k < ERMA_SESSION_SLOTS; k++) {
        const struct erma_hdr h = {.req_type = type, .msg_size = size,
                                   .dest_session = s->remote_num, .pkt_type = ERMA_PKT_REQ,
                                   .req_num = s->base + ERMA_SESSION_SLOTS + k,
                                   .proto = ERMA_PROTO_RPC};
        erma_hdr_encode(&h, pkt);
        const struct erma_tx_pkt p = {.dst = &s->peer, .hdr = pkt,
                                      .hdr_len = ERMA_HDR_SIZE + data};
        assert_int_equal(erma_tx_burst(tr, &p, 1), 1);
    }
}

#endif
