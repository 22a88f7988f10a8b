/* The server's half of the protocol (server.c): a slot's request from its
 * packets to its handler (in the loop, or at a worker thread: nexus.c) and
 * its response back, and the request objects handlers get. */
#ifndef ERMA_RPC_SERVER_H
#define ERMA_RPC_SERVER_H

#include "internal.h"

/* server.c */
/* A request packet or RFR for a server session of the packet's peer. */
void erma__server_rx(struct erma_rpc *rpc, struct session *s, const struct erma_hdr *h,
                     const struct erma_rx_pkt *pkt);
/* Lets the slot's current request go: back to the free list, or, while a
 * handler holds it, on as an orphan whose answer goes nowhere. */
void erma__server_slot_free(struct erma_rpc *rpc, struct slot *sl);
/* A worker's answer to rq, back in the loop: sends it. */
void erma__worker_response(struct erma_rpc *rpc, struct erma_req *rq);
/* Drops the partly received requests that stalled past cfg.recv_timeout_ns. */
void erma__partial_expire(struct erma_rpc *rpc, uint64_t now);

/* nexus.c */
/* Hands rq to worker pick (modulo the workers); the caller's round robin. */
void erma__nexus_to_worker(struct erma_nexus *nx, struct erma_req *rq, unsigned pick);

#endif
