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
 *   first usable device: iWARP devices, which have no UD QPs, and devices
 *   whose PORT is not active are passed over), PORT its port number
 *   (default and 0: 1), gid=N the GID table index to send from (default:
 *   on RoCE the port's first RoCE v2 GID, an IPv4-mapped one first, as
 *   entry 0 is the RoCE v1 link-local one on ConnectX; on InfiniBand 0).
 *   Each open creates its own UD QP, so any number of endpoints coexist.
 *   With no usable device, open fails with ERMA_ENOTSUP and logs why (no
 *   device, iWARP only, port not active, no such device or GID).
 *
 * Addresses
 *   verbs://GID/LID:QPN
 *
 *   GID in IPv6 notation (an IPv4-mapped ::ffff:a.b.c.d on RoCE v2 over
 *   IPv4), LID and QPN in decimal; the QPN stands where other schemes have
 *   the port (endpoint thread ids count it up, so verbs peers use thread 0).
 *   "GID/LID/QPN" is read too. erma_transport_addr_str() prints this form,
 *   tr->local holds the endpoint's own, erma_transport_resolve() parses it.
 *   Every QP uses the qkey 0x11111111. The sender's address of a received
 *   packet comes from the work completion (source QPN, SLID) and the 40
 *   bytes before every UD receive buffer: a GRH, or on RoCE v2 an IPv6
 *   header or 20 undefined bytes and an IPv4 header, told apart as
 *   rdma-core's get_grh_header_version does (byte 0, then the IPv4 header
 *   length and checksum). Every send carries a GRH, on InfiniBand too, so
 *   that the receiver learns the sender's GID.
 *
 * Behaviour
 *   max_pkt is the Ethernet MTU less 28 as on every transport, or the
 *   port's active MTU when that is smaller; receive buffers hold the port's
 *   active MTU, so peers with a larger max_pkt are received. The receive
 *   queue holds cfg.rx_ring buffers (capped by the device's max_qp_wr and
 *   max_cqe); buffers handed out by erma_rx_burst() are reposted by the
 *   next call. cfg.rx_drop drops its fraction of received packets.
 *   TX copies each packet into a registered send buffer (inline when it
 *   fits the QP's max_inline_data), signals one send in 32 and reclaims
 *   buffers from those completions; when the send queue is full, or
 *   ibv_post_send refuses a work request, tx_burst accepts only the
 *   packets before it.
 *   Address handles are created by a thread of the endpoint's own (on RoCE
 *   ibv_create_ah may block about 1 s while the kernel resolves a MAC):
 *   packets to a peer are dropped until its handle exists, a failure is
 *   not retried for 1 s, and the cache (1024 handles) evicts the least
 *   recently used once their sends completed.
 *   Errors: a failed send (the QP in SQE) brings the QP back to RTS; a QP
 *   in ERR (a fatal async event, or flushed receives) is reset and
 *   restarted with every receive buffer posted again; async events are
 *   read without blocking every 1024 bursts and after any error. While the
 *   port is down (IBV_EVENT_PORT_ERR) sends are dropped and counted in
 *   stats.tx_errors; after a device fatal event, or a QP that cannot be
 *   restarted, tx_burst fails with ERMA_ESYS.
 *   Hints: link_bps from the port's width and speed, base_rtt_ns 5 us,
 *   jitter 1 ms and a 10 ms shortest timeout (a polling process on a
 *   shared CPU). Zero-copy TX from reg_mem'd buffers is future work
 *   (reg_mem is a no-op).
 *
 * Tests: tests/verbs runs this transport on a mock libibverbs; what that
 * proves and what only hardware can is in docs/ARCHITECTURE.md.
 */
#ifndef ERMA_VERBS_H
#define ERMA_VERBS_H

#define ERMA_VERBS_QKEY 0x11111111u

#endif
