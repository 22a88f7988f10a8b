/* The client's half of the protocol: sending, pacing and virtual paths
 * (client_tx.c), receiving and loss recovery (client_rx.c). A slot's
 * packets have one index space (struct client_slot); the server's reply
 * to client packet i carries pkt_num i: a credit return for
 * i < req_pkts-1, else response packet i - (req_pkts-1). */
#ifndef ERMA_RPC_CLIENT_H
#define ERMA_RPC_CLIENT_H

#include "erma/clock.h"
#include "internal.h"

/* A slot keeps at most this many packets past its first unanswered one
 * (tx_ns holds their send times; the bitmaps are 64 bits). */
#define WINDOW ERMA_MAX_CREDITS

/* The clock for CC timestamps: one reading per loop pass, or per packet. */
static inline uint64_t cc_now(const struct erma_rpc *rpc)
{
    return rpc->cfg.cc.no_batch_clock ? erma_now_ns() : rpc->ep->now;
}

/* The slot's packets: requests, then RFRs for the response's packets 1... */
static inline uint32_t client_total_tx(const struct client_slot *c)
{
    return c->resp_pkts ? c->req_pkts + c->resp_pkts - 1 : c->req_pkts;
}

/* Packets sent and neither answered nor queued to be sent again (bit k:
 * packet num_rx + k): each holds a credit. */
static inline uint64_t slot_unanswered(const struct client_slot *c)
{
    return (bit(c->num_tx - c->num_rx) - 1) & ~(c->rx_bits | c->resend);
}

/* ---- virtual paths (erma/sdk/cc.h, VIRTUAL PATHS) ---- */

/* Packet i of c is out no longer (answered, lost or given up): its path
 * may take packets again even if it was the path's probe. */
static inline void path_done(struct session *s, const struct client_slot *c, uint32_t i)
{
    erma_paths_done(&s->ps, c->tx_path[i % ERMA_MAX_CREDITS]);
}

/* The packets of mask (bit k: packet num_rx + k) are out no longer. */
static inline void paths_done(struct session *s, const struct client_slot *c, uint64_t mask)
{
    for (mask = s->ps.n > 1 ? mask : 0; mask; mask &= mask - 1)
        path_done(s, c, c->num_rx + (uint32_t)__builtin_ctzll(mask));
}

/* client_tx.c */
/* Starts the session's waiting requests on its free slots, and sends. */
void erma__client_kick(struct erma_rpc *rpc, struct session *s);
/* Ends the slot's request: its continuation runs after the flush. */
void erma__slot_finish(struct erma_rpc *rpc, struct session *s, struct slot *sl, int status);
/* Fails the requests of s on a slot (sent, or about to be) with status. */
void erma__fail_client_sent(struct erma_rpc *rpc, struct session *s, int status);
/* Fails every request of s, on a slot or waiting, with status. */
void erma__fail_client_slots(struct erma_rpc *rpc, struct session *s, int status);
/* Sends the packets of the paced sessions the timing wheel has due by now. */
void erma__rpc_wheel_release(struct erma_rpc *rpc, uint64_t now);

/* client_rx.c */
/* A reply (CR or response packet) for a client session of the packet's peer. */
void erma__client_rx(struct erma_rpc *rpc, struct session *s, const struct erma_hdr *h,
                     const struct erma_rx_pkt *pkt);
/* The server failed the request req_num with err (a REQ_ERROR message). */
void erma__client_req_error(struct erma_rpc *rpc, struct session *s, uint64_t req_num, int err);
/* Request timeouts and retransmissions of s's slots; true when a slot gave
 * up on too many requests in a row without any reply: the caller declares
 * the session's server lost. */
bool erma__client_scan(struct erma_rpc *rpc, struct session *s, uint64_t now);

#endif
