/*
 * erma/dpdk.h - the dpdk transport: erma packets in Ethernet + IPv4 + UDP
 * frames, built and parsed in userspace on a DPDK port.
 *
 * For applications that open dpdk:// endpoints (its URI options); the
 * transport itself is the module erma_dpdk.so.
 *
 * There is no function here: the transport is opened through
 * erma_endpoint_create() (endpoint.h) with a URI of scheme "dpdk", from the
 * module erma_dpdk.so that the first such open loads (transport.h says
 * where it is looked for). This header documents that URI, the environment
 * it reads and the behaviour. erma_transport_available("dpdk") tells
 * whether the module is there and loads.
 *
 * URI
 *   dpdk://IP:PORT[?KEY=VALUE[&KEY=VALUE...]]
 *
 *   IP is this endpoint's IPv4 address (dotted quad, not 0.0.0.0) and PORT
 *   its UDP port; PORT 0 picks a free one from 49152 up. Keys:
 *     vdev=SPEC    a virtual device given to the EAL as --vdev=SPEC, e.g.
 *                  vdev=net_af_packet0,iface=veth0,qdisc_bypass=1 or
 *                  vdev=net_af_xdp0,iface=veth0. The port used is the one
 *                  SPEC creates (its name is SPEC up to the first comma).
 *     pci=ADDR     allow-list PCI device ADDR (EAL -a ADDR); pci=all probes
 *                  every PCI device. Without pci=, the EAL gets --no-pci.
 *     port=N       use DPDK port N (default: the vdev's port, else port 0).
 *     lcores=LIST  EAL -l LIST, which pins the calling thread to LIST's
 *                  first CPU. By default the EAL's lcore 0 is mapped onto
 *                  the calling thread's current CPU affinity, which is left
 *                  unchanged (pin with taskset or bench_pin beforehand).
 *     mem=MB       EAL -m MB: preallocate MB of hugepage memory (default:
 *                  allocate on demand).
 *   Every key may also come from the environment variable ERMA_DPDK, which
 *   holds the same KEY=VALUE&... list; a key in the URI wins. Extra EAL
 *   arguments, separated by blanks, can be given in ERMA_DPDK_EAL (e.g.
 *   "--no-huge -m 512" where no hugepages are reserved); they come last.
 *   The EAL always gets --in-memory (so any number of erma processes
 *   coexist, no shared files) and --no-telemetry; its log level follows
 *   ERMA_LOG (errors only, unless ERMA_LOG is info or debug).
 *
 *   The EAL and the port are set up once per process, by the first
 *   successful open of a dpdk URI; later opens use that
 *   port whatever their vdev/pci/port/lcores/mem keys say. If that setup
 *   fails, every dpdk open in the process fails the same way (the EAL cannot
 *   be initialised twice). The first open's cfg.rx_ring sizes the port's
 *   receive queue and its cfg.mtu becomes the port MTU (set on the device,
 *   e.g. on the af_packet interface); a later open may ask for a smaller
 *   MTU, not a larger one (ERMA_EINVAL). max_pkt is the MTU less 28, as on
 *   every transport. The port and the EAL stay up until the process exits.
 *
 * Peer addresses
 *   erma_transport_resolve(tr, "dpdk://IP:PORT[?mac=MAC]", &addr)
 *
 *   There is no ARP. The peer's Ethernet address is, in this order: the
 *   mac= key (aa:bb:cc:dd:ee:ff), the address last seen as the Ethernet
 *   source of a packet from IP that this endpoint received, or the static
 *   map in ERMA_DPDK_NEIGH ("IP=MAC,IP=MAC..."). Otherwise resolve fails
 *   with ERMA_EADDR and a logged reason. The source address of every
 *   received packet carries the sender's MAC, so replying needs nothing.
 *   erma_transport_addr_str() prints "dpdk://IP:PORT?mac=MAC", which
 *   resolves back to the same address; tr->local holds the port's MAC, so
 *   a process can hand its own address to a peer that way.
 *
 * Endpoints and queues
 *   Any number of endpoints (up to 64) may share the process's port, each
 *   on its own UDP port, each owned by one thread. Transmit: the port gets
 *   as many TX queues as it offers (up to 16); endpoints take them in turn
 *   and share one behind a spinlock when there are more endpoints than
 *   queues. Receive: the port has one RX queue, polled by whichever
 *   endpoint calls erma_rx_burst() while no other is polling it; frames
 *   for another endpoint (by UDP destination port, and IP) go to that
 *   endpoint's software ring of 1024 packets, read first by its next
 *   erma_rx_burst(). Frames for no endpoint, and non-IPv4/UDP frames, are
 *   dropped. An endpoint thus receives only while some endpoint of the
 *   process polls. Steering with rte_flow to one RX queue per endpoint is
 *   future work.
 *
 * Frames
 *   TX copies each packet's two segments into one mbuf behind a 42-byte
 *   Ethernet/IPv4/UDP header (IPv4 checksum offloaded where the port offers
 *   it, else computed; UDP checksum 0; DF set). Zero-copy TX from
 *   registered memory (rte_extmem_register + external mbufs) is future
 *   work, so reg_mem is a no-op. RX accepts unfragmented IPv4/UDP frames
 *   with a valid IPv4 header checksum whose UDP payload fits max_pkt; the
 *   payload is returned in place in the mbuf, which is freed by the next
 *   erma_rx_burst(). An endpoint cannot send to another endpoint of the same
 *   process (DPDK does not loop frames back).
 *
 * Needs root (or the capabilities the PMD needs) and hugepages unless
 * ERMA_DPDK_EAL says --no-huge. scripts/netns sets up a veth testbed.
 */
#ifndef ERMA_DPDK_H
#define ERMA_DPDK_H

#endif
