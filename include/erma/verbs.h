/*
 * erma/verbs.h - the verbs transport: erma packets as RDMA Unreliable
 * Datagram sends (rdma-core libibverbs), on InfiniBand or RoCE.
 *
 * For applications that open verbs:// endpoints (its URI options); the
 * transport itself is the module erma_verbs.so.
 *
 * Opened through erma_endpoint_create() (endpoint.h) with scheme "verbs",
 * from the module erma_verbs.so (loaded on first use, see transport.h);
 * erma_transport_available("verbs") tells whether this build has it.
 *
 * Local URI
 *   verbs://[DEVICE][:PORT][?gid=N]
 *
 *   DEVICE is an RDMA device name as ibv_devices lists it (default: the
 *   first device), PORT its port number (default 1), gid=N the GID table
 *   index to send from (default 0; on RoCE pick the RoCE v2 entry). Each
 *   open creates its own UD QP, so any number of endpoints coexist.
 *   With no RDMA device, open fails with ERMA_ENOTSUP and logs
 *   "no RDMA device"; with the port not active, likewise.
 *
 * Addresses
 *   verbs://GID/LID/QPN
 *
 *   GID in IPv6 notation (an IPv4-mapped ::ffff:a.b.c.d on RoCE v2 over
 *   IPv4), LID and QPN in decimal. erma_transport_addr_str() prints this
 *   form, tr->local holds the endpoint's own, and erma_transport_resolve()
 *   parses it. Every QP uses the qkey 0x11111111. The sender's address of a
 *   received packet comes from the work completion (source QPN, SLID) and
 *   the 40-byte GRH that precedes every UD receive buffer.
 *
 * Behaviour
 *   max_pkt is the Ethernet MTU less 28 as on every transport, or the
 *   port's active path MTU when that is smaller. The receive queue holds
 *   cfg.rx_ring buffers (capped by the device's max_qp_wr); buffers handed
 *   out by erma_rx_burst() are reposted by the next call. TX copies each
 *   packet into a registered send buffer (inline when it fits the QP's
 *   max_inline_data), signals one send in 32 and reclaims buffers from those
 *   completions; when the send queue is full tx_burst accepts fewer
 *   packets. Address handles are created on first use per peer and cached
 *   until close. Zero-copy TX from reg_mem'd buffers is future work
 *   (reg_mem is a no-op).
 */
#ifndef ERMA_VERBS_H
#define ERMA_VERBS_H

#define ERMA_VERBS_QKEY 0x11111111u

#endif
