/*
 * erma/sdk/transport_driver.h - what a transport implements, and the burst
 * calls on it.
 *
 * For transport writers (transport/, the dpdk and verbs modules), the
 * endpoint layer, tests and raw benchmarks; applications use
 * erma/endpoint.h instead.
 *
 * Every packet starts with the 16-byte erma header (wire.h); what a
 * transport adds around it is its own business. A packet is at most
 * tr->max_pkt bytes (the Ethernet MTU less IP and UDP headers: 1472 for the
 * default MTU of 1500, on every transport, so figures stay comparable).
 * A transport sends with erma_tx_burst() and receives with erma_rx_burst(),
 * which call its ops.
 *
 * Hints: what a transport knows of its path, so that the layers above pick
 * their defaults from it, never from which transport it is.
 */
#ifndef ERMA_TRANSPORT_DRIVER_H
#define ERMA_TRANSPORT_DRIVER_H

#include <string.h>

#include "erma/sdk/rand.h"
#include "erma/transport.h"

ERMA_BEGIN_DECLS

/* path: which of an endpoint's virtual paths (its transports, one port
 * each) a packet leaves on or came in on; set and read by the endpoint
 * layer, ignored by transports. */
struct erma_tx_pkt {
    const struct erma_addr *dst;
    const void *hdr;    /* first segment */
    uint32_t hdr_len;
    const void *data;   /* optional second segment (NULL when data_len is 0) */
    uint32_t data_len;
    uint8_t path;
};

/* The bytes packet p puts on the wire: its two segments. */
static inline uint32_t erma_tx_pkt_len(const struct erma_tx_pkt *p)
{
    return p->hdr_len + p->data_len;
}

/* Copies packet p's two segments to buf, one after the other; returns the
 * byte after them (for transports that build frames themselves). */
static inline uint8_t *erma_tx_pkt_copy(uint8_t *buf, const struct erma_tx_pkt *p)
{
    memcpy(buf, p->hdr, p->hdr_len);
    if (p->data_len)
        memcpy(buf + p->hdr_len, p->data, p->data_len);
    return buf + erma_tx_pkt_len(p);
}

struct erma_rx_pkt {
    uint8_t *data;
    uint32_t len;
    struct erma_addr src;
    uint8_t path;
    /* When the packet arrived, on erma_now_ns()'s clock: the kernel's
     * receive stamp on udp, the fabric's arrival on sim; 0 where the
     * transport cannot tell (the endpoint takes the time its loop last
     * looked, or woke: at the earliest, so that a loop kept away from its
     * socket counts that in the host's delay). The time
     * a packet waited in the host, behind a busy or descheduled loop, is
     * its protocol's reading minus this (rpc.h, host delay). */
    uint64_t rx_ns;
};

struct erma_transport_cfg {
    uint32_t mtu;       /* Ethernet MTU, 576..9000; 0 means 1500 */
    uint32_t rx_ring;   /* packets the receive queue must hold; 0 means 4096 */
    double rx_drop;     /* fault injection: drop this fraction of received packets */
    uint64_t drop_seed; /* seed of the drop decisions */
};

struct erma_transport_stats {
    uint64_t tx_pkts, tx_bytes, tx_errors;
    uint64_t tx_bundles; /* datagrams that carried several packets (erma/sdk/bundle.h) */
    uint64_t rx_pkts, rx_bytes, rx_dropped, rx_injected_drops;
    /* udp: bursts that turned the receive offload or the stamps on, and
     * quiet times that turned one off again */
    uint64_t rx_offload_on, rx_offload_off;
};

struct erma_transport;

struct erma_transport_ops {
    const char *scheme;
    /* rest is the URI after "scheme://". */
    int (*open)(const char *rest, const struct erma_transport_cfg *cfg,
                struct erma_transport **out);
    void (*close)(struct erma_transport *tr);
    int (*tx_burst)(struct erma_transport *tr, const struct erma_tx_pkt *pkts, unsigned n);
    int (*rx_burst)(struct erma_transport *tr, struct erma_rx_pkt *pkts, unsigned max);
    int (*resolve)(struct erma_transport *tr, const char *rest, struct erma_addr *out);
    /* addr as the rest of a URI ("HOST:PORT..."), resolvable by tr's peers */
    int (*addr_str)(const struct erma_transport *tr, const struct erma_addr *addr, char *buf,
                    size_t len);
    /* Registers memory for zero-copy I/O; may be NULL (nothing to do). */
    int (*reg_mem)(struct erma_transport *tr, void *addr, size_t len);
    /* Blocks until a packet may be there to receive or timeout_ns passed;
     * may be NULL (a polled device: no way to sleep). */
    int (*wait)(struct erma_transport *tr, uint64_t timeout_ns);
    /* The address k ports after addr (before it when k < 0: virtual
     * paths); may be NULL (no virtual paths on this transport).
     * ERMA_EADDR outside ports 0..65535. */
    int (*addr_path)(const struct erma_transport *tr, const struct erma_addr *addr, int k,
                     struct erma_addr *out);
    /* A file descriptor that polls readable when a packet is there, or -1;
     * may be NULL. For an endpoint waiting on several transports. */
    int (*poll_fd)(const struct erma_transport *tr);
};

/* What a transport knows of its path (0: unknown), for the defaults of the
 * layers above (congestion control, timeouts, deadlines). */
struct erma_transport_hints {
    uint64_t link_bps;       /* line rate */
    /* Bytes a packet takes on the link beyond the erma packet: headers,
     * and on Ethernet FCS 4, preamble 8 and inter-frame gap 12. */
    uint32_t frame_overhead;
    uint64_t base_rtt_ns;    /* unloaded round trip */
    /* How much later than the RTT a live peer may answer: a kernel stack or
     * a shared CPU stalls a process for milliseconds. */
    uint64_t jitter_ns;
    uint64_t min_timeout_ns; /* the shortest timeout worth setting */
    bool shared_clock;       /* every endpoint reads one clock (the sim) */
};

struct erma_transport {
    const struct erma_transport_ops *ops;
    struct erma_addr local;
    uint32_t max_pkt; /* largest erma packet, header included */
    uint32_t rx_ring;
    struct erma_transport_hints hints;
    struct erma_transport_stats stats;
    uint64_t drop_threshold; /* rx_drop scaled to 2^64; 0 = no injected loss */
    uint64_t drop_state;
};

/* Opens the transport named by uri's scheme, bound to the address in uri. */
int erma_transport_open(const char *uri, const struct erma_transport_cfg *cfg,
                        struct erma_transport **out);
/* Closes tr and frees it; NULL is ignored. */
void erma_transport_close(struct erma_transport *tr);

/* Resolves a peer URI of the same scheme to an address. */
int erma_transport_resolve(struct erma_transport *tr, const char *uri, struct erma_addr *out);
/* Formats addr as "scheme://..." into buf; returns ERMA_OK or ERMA_EINVAL. */
int erma_transport_addr_str(const struct erma_transport *tr, const struct erma_addr *addr,
                            char *buf, size_t len);
/* Registers [addr, addr + len) for zero-copy I/O where the transport
 * needs it (ops.reg_mem); ERMA_OK at once where it has nothing to do. */
int erma_transport_reg_mem(struct erma_transport *tr, void *addr, size_t len);

/* Sleeps until a packet may be there or timeout_ns passed (it may return
 * early); ERMA_ENOTSUP at once for a transport that can only be polled. */
int erma_transport_wait(struct erma_transport *tr, uint64_t timeout_ns);

/* Sends up to n packets, each given as up to two segments (a header and a
 * data part, so message buffers are sent without copying). Returns how
 * many were accepted, from the front; the rest may be retried. A packet
 * over max_pkt fails the whole call with ERMA_E2BIG before anything is
 * sent: nothing is ever truncated. */
static inline int erma_tx_burst(struct erma_transport *tr, const struct erma_tx_pkt *pkts,
                                unsigned n)
{
    return tr->ops->tx_burst(tr, pkts, n);
}

/* Returns up to max received packets in pkts. Their data stays valid until
 * the next erma_rx_burst() on the same transport, so callers may process
 * packets in place. Packets the transport itself finds bad (truncated,
 * oversize) are counted in stats.rx_dropped, never returned. For loss
 * tests on real transports, cfg.rx_drop drops a random fraction of
 * received packets (counted in stats.rx_injected_drops). */
static inline int erma_rx_burst(struct erma_transport *tr, struct erma_rx_pkt *pkts,
                                unsigned max)
{
    return tr->ops->rx_burst(tr, pkts, max);
}

/* Internal to transports: shared configuration checks. */
int erma_transport_cfg_resolve(const struct erma_transport_cfg *cfg,
                               struct erma_transport_cfg *out);
/* Internal to transports: ERMA_E2BIG if a packet of pkts[0..n) is over
 * max_pkt, ERMA_EADDR if one has no destination or one of another length
 * than addr_len, else ERMA_OK. tx_burst checks everything before sending.
 * Inline, so that transport modules need nothing of the core for it. */
static inline int erma_transport_check_tx(const struct erma_transport *tr,
                                          const struct erma_tx_pkt *pkts, unsigned n,
                                          uint8_t addr_len)
{
    for (unsigned i = 0; i < n; i++) {
        if ((uint64_t)pkts[i].hdr_len + pkts[i].data_len > tr->max_pkt) /* no 32-bit wrap */
            return ERMA_E2BIG;
        if (!pkts[i].dst || pkts[i].dst->len != addr_len)
            return ERMA_EADDR;
    }
    return ERMA_OK;
}

/* Internal to transports (inline: modules carry no liberma): drops the
 * injected fraction of pkts[0..n) (cfg.rx_drop) in place and returns how
 * many remain. */
static inline unsigned erma_transport_inject_loss(struct erma_transport *tr,
                                                  struct erma_rx_pkt *pkts, unsigned n)
{
    unsigned kept = 0;
    for (unsigned i = 0; i < n; i++) {
        if (erma_splitmix64(&tr->drop_state) < tr->drop_threshold)
            tr->stats.rx_injected_drops++;
        else
            pkts[kept++] = pkts[i];
    }
    return kept;
}

ERMA_END_DECLS

#endif
