/* Receive demultiplexing: each packet the endpoint hands the RPC layer
 * goes to session management (sm_rx.c) or, checked and opened, to the
 * client or server half of the session it names. */
#include "client.h"
#include "server.h"

/* Checks a packet's length against what its header says it carries. */
static bool length_ok(const struct erma_hdr *h, uint32_t len, uint32_t pkt_data)
{
    const uint32_t data = len - ERMA_HDR_SIZE;
    if (h->pkt_type == ERMA_PKT_CR)
        return data == CR_ACK_LEN;
    if (h->pkt_type == ERMA_PKT_RFR)
        return data == 0;
    if (h->pkt_type == ERMA_PKT_REQ && h->pkt_num >= erma__msg_pkts(h->msg_size, pkt_data))
        return false;
    /* data packets: full except the last of their message */
    const uint32_t k = h->pkt_type == ERMA_PKT_REQ ? h->pkt_num : 0;
    const uint32_t off = k * pkt_data;
    const uint32_t want = h->msg_size - off < pkt_data ? h->msg_size - off : pkt_data;
    return h->pkt_type == ERMA_PKT_RESP || data == want;
}

static void rpc_rx(struct erma_rpc *rpc, const struct erma_hdr *h, const struct erma_rx_pkt *pkt)
{
    const bool secure = rpc->secure; /* lengths are known once a packet is opened */
    if (!secure && !length_ok(h, pkt->len, rpc->pkt_data)) {
        rpc->stats.rx_bad++;
        return;
    }
    struct session *s = erma__session_get(rpc, h->dest_session);
    const bool to_server = h->pkt_type == ERMA_PKT_REQ || h->pkt_type == ERMA_PKT_RFR;
    const int path = s ? erma__session_path(rpc, s, &pkt->src) : -1;
    if (!s || s->state != CONNECTED || s->role != (to_server ? SERVER : CLIENT) || path < 0) {
        rpc->stats.rx_no_session++;
        return;
    }
    struct erma_rx_pkt plain;
    if (secure) {
        plain = *pkt;
        if (!erma__session_open(rpc, s, plain.data, &plain.len))
            return;
        pkt = &plain;
        if (!length_ok(h, pkt->len, rpc->pkt_data)) {
            rpc->stats.rx_bad++;
            return;
        }
    }
    s->sm.last_rx_ns = rpc->ep->now;
    s->tx_path = (uint8_t)path; /* a server answers on the path the packet came on */
    if (to_server)
        erma__server_rx(rpc, s, h, pkt);
    else
        erma__client_rx(rpc, s, h, pkt);
}

void erma__rx(void *ctx, const struct erma_hdr *h, const struct erma_rx_pkt *pkt)
{
    struct erma_rpc *rpc = ctx;
    if (h->proto == ERMA_PROTO_RPC)
        rpc_rx(rpc, h, pkt);
    else
        erma__sm_rx(rpc, h, pkt);
}
