/* The dpdk transport's frames: built into mbufs and sent, received,
 * checked and handed out, demultiplexed to endpoints by UDP port. Small
 * packets to one destination in one TX burst share a frame as a bundle
 * (erma/sdk/bundle.h) unless ERMA_DPDK_COALESCE=0; received bundles are
 * always split. */
#include <netinet/in.h>

#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_udp.h>

#include "transport/dpdk_port.h"

#define P erma__dpdk /* the port, P for short */

/* Writes the Ethernet, IPv4 and UDP headers of a frame to p->dst with a
 * payload of len bytes into m; returns where the payload goes. */
static uint8_t *frame(struct dpdk *d, struct rte_mbuf *m, const struct erma_tx_pkt *p,
                      uint32_t len)
{
    uint8_t *f = rte_pktmbuf_mtod(m, uint8_t *);
    struct rte_ether_hdr *eth = (struct rte_ether_hdr *)f;
    struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(f + RTE_ETHER_HDR_LEN);
    struct rte_udp_hdr *udp = (struct rte_udp_hdr *)(ip + 1);
    const uint8_t *dst = p->dst->raw;
    memcpy(eth->dst_addr.addr_bytes, dst + 6, 6);
    eth->src_addr = P.mac;
    eth->ether_type = htons(RTE_ETHER_TYPE_IPV4);
    *ip = (struct rte_ipv4_hdr){.version_ihl = RTE_IPV4_VHL_DEF,
                                .total_length = htons((uint16_t)(len + 28)),
                                .fragment_offset = htons(RTE_IPV4_HDR_DF_FLAG),
                                .time_to_live = 64,
                                .next_proto_id = IPPROTO_UDP,
                                .src_addr = d->ip};
    memcpy(&ip->dst_addr, dst, 4);
    udp->src_port = d->port;
    memcpy(&udp->dst_port, dst + 4, 2);
    udp->dgram_len = htons((uint16_t)(len + 8));
    udp->dgram_cksum = 0;
    m->data_len = (uint16_t)(FRAME_HDR + len);
    m->pkt_len = FRAME_HDR + len;
    if (P.tx_csum) {
        m->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM;
        m->l2_len = RTE_ETHER_HDR_LEN;
        m->l3_len = 20;
    } else {
        ip->hdr_checksum = rte_ipv4_cksum(ip);
    }
    return f + FRAME_HDR;
}

/* How many of pkts[0..n) share one frame: a bundle's, else 1. */
static unsigned frame_run(const struct dpdk *d, const struct erma_tx_pkt *pkts, unsigned n)
{
    const unsigned k = d->coalesce ? erma_bundle_run(pkts, n, d->base.max_pkt) : 0;
    return k ? k : 1;
}

/* Builds pkts[0..k) into m: the packet alone, or a bundle of them. */
static void build(struct dpdk *d, struct rte_mbuf *m, const struct erma_tx_pkt *pkts, unsigned k)
{
    if (k == 1) {
        erma_tx_pkt_copy(frame(d, m, pkts, erma_tx_pkt_len(pkts)), pkts);
        return;
    }
    uint32_t bytes = 0;
    for (unsigned i = 0; i < k; i++)
        bytes += erma_tx_pkt_len(&pkts[i]);
    uint8_t *w = frame(d, m, pkts, erma_bundle_size(k, bytes));
    erma_bundle_hdr(w, k);
    w += ERMA_HDR_SIZE;
    for (unsigned i = 0; i < k; i++) {
        erma_bundle_len(w, erma_tx_pkt_len(&pkts[i]));
        w = erma_tx_pkt_copy(w + ERMA_BUNDLE_LEN_SIZE, &pkts[i]);
    }
}

/* Sends up to ERMA_MAX_BURST frames of pkts[0..n); returns the packets
 * sent, *full when the queue took fewer frames than offered. */
static unsigned send_frames(struct dpdk *d, const struct erma_tx_pkt *pkts, unsigned n,
                            bool *full)
{
    struct rte_mbuf *m[ERMA_MAX_BURST];
    unsigned per[ERMA_MAX_BURST], nf = 0, covered = 0;
    while (covered < n && nf < ERMA_MAX_BURST) {
        per[nf] = frame_run(d, pkts + covered, n - covered);
        covered += per[nf++];
    }
    *full = true;
    if (rte_pktmbuf_alloc_bulk(P.pool, m, nf) != 0)
        return 0;
    for (unsigned i = 0, at = 0; i < nf; at += per[i++])
        build(d, m[i], pkts + at, per[i]);
    rte_spinlock_lock(&P.tx_lock[d->txq]);
    const unsigned got = rte_eth_tx_burst(P.id, d->txq, m, (uint16_t)nf);
    rte_spinlock_unlock(&P.tx_lock[d->txq]);
    *full = got < nf;
    if (got < nf)
        rte_pktmbuf_free_bulk(m + got, nf - got);
    unsigned sent = 0;
    for (unsigned i = 0; i < got; i++) {
        sent += per[i];
        d->base.stats.tx_bundles += per[i] > 1;
    }
    return sent;
}

int erma__dpdk_tx_burst(struct erma_transport *tr, const struct erma_tx_pkt *pkts, unsigned n)
{
    struct dpdk *d = (struct dpdk *)tr;
    const int rc = erma_transport_check_tx(tr, pkts, n, ADDR_LEN);
    if (rc != ERMA_OK)
        return rc;
    unsigned sent = 0;
    bool full = false;
    while (sent < n && !full) {
        const unsigned got = send_frames(d, pkts + sent, n - sent, &full);
        for (unsigned i = sent; i < sent + got; i++)
            tr->stats.tx_bytes += erma_tx_pkt_len(&pkts[i]);
        sent += got;
    }
    tr->stats.tx_pkts += sent;
    return (int)sent;
}

/* The IPv4 header of m when m is an IPv4/UDP frame long enough for it and
 * its UDP header, else NULL; *ihl gets the IPv4 header length. */
static const struct rte_ipv4_hdr *udp4(const struct rte_mbuf *m, uint32_t *ihl)
{
    const uint8_t *f = rte_pktmbuf_mtod(m, const uint8_t *);
    if (m->nb_segs != 1 || m->data_len < FRAME_HDR ||
        ((const struct rte_ether_hdr *)f)->ether_type != htons(RTE_ETHER_TYPE_IPV4))
        return NULL;
    const struct rte_ipv4_hdr *ip = (const struct rte_ipv4_hdr *)(f + RTE_ETHER_HDR_LEN);
    *ihl = (ip->version_ihl & 0xf) * 4u;
    if ((ip->version_ihl >> 4) != 4 || *ihl < 20 || ip->next_proto_id != IPPROTO_UDP ||
        RTE_ETHER_HDR_LEN + *ihl + 8 > m->data_len)
        return NULL;
    return ip;
}

/* The endpoint m is addressed to (by UDP destination port), or NULL. */
static struct dpdk *demux(const struct rte_mbuf *m)
{
    uint32_t ihl;
    const struct rte_ipv4_hdr *ip = udp4(m, &ihl);
    if (!ip)
        return NULL;
    const struct rte_udp_hdr *udp = (const struct rte_udp_hdr *)((const uint8_t *)ip + ihl);
    return atomic_load_explicit(&P.by_port[ntohs(udp->dst_port)], memory_order_acquire);
}

/* Hands out data[0..len) from src as *p. */
static void hand_out(struct dpdk *d, struct erma_rx_pkt *p, const uint8_t *data, uint32_t len,
                     const struct erma_addr *src)
{
    p->data = (uint8_t *)data;
    p->len = len;
    p->rx_ns = 0; /* no receive stamps on the PMDs this runs on */
    p->src = *src;
    d->base.stats.rx_pkts++;
    d->base.stats.rx_bytes += len;
}

/* Hands out the packets of d's bundle while pkts has room; at its end (a
 * bundle that did not end cleanly counts as dropped) its frame is held
 * with the others, or freed when this call handed out none of it. */
static void split(struct dpdk *d, struct erma_rx_pkt *pkts, unsigned *n, unsigned max)
{
    const uint8_t *data;
    uint32_t len;
    while (*n < max) {
        if (!erma_bundle_next(&d->bundle_rd, &data, &len)) {
            d->base.stats.rx_dropped += !erma_bundle_done(&d->bundle_rd);
            if (d->bundle_now)
                d->held[d->nheld++] = d->bundle;
            else
                rte_pktmbuf_free(d->bundle);
            d->bundle = NULL;
            return;
        }
        hand_out(d, &pkts[(*n)++], data, len, &d->bundle_src);
        d->bundle_now++;
    }
}

/* Validates frame m for d and hands out its packet as pkts[*n] (or its
 * bundle's, as far as max allows), or frees it. */
static void take(struct dpdk *d, struct rte_mbuf *m, struct erma_rx_pkt *pkts, unsigned *n,
                 unsigned max)
{
    uint32_t ihl;
    const struct rte_ipv4_hdr *ip = udp4(m, &ihl);
    const struct rte_udp_hdr *udp = ip ? (const void *)((const uint8_t *)ip + ihl) : NULL;
    const uint32_t ip_len = ip ? ntohs(ip->total_length) : 0;
    const uint32_t udp_len = udp ? ntohs(udp->dgram_len) : 0;
    const uint64_t csum = m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK;
    if (!ip || udp->dst_port != d->port || (ip->dst_addr != d->ip) ||
        (ip->fragment_offset & htons(RTE_IPV4_HDR_MF_FLAG | RTE_IPV4_HDR_OFFSET_MASK)) ||
        ip_len < ihl + 8 || RTE_ETHER_HDR_LEN + ip_len > m->data_len || udp_len < 8 ||
        udp_len > ip_len - ihl || udp_len - 8 > d->base.max_pkt ||
        csum == RTE_MBUF_F_RX_IP_CKSUM_BAD ||
        (csum != RTE_MBUF_F_RX_IP_CKSUM_GOOD && rte_raw_cksum(ip, ihl) != 0xffff)) {
        d->base.stats.rx_dropped++;
        rte_pktmbuf_free(m);
        return;
    }
    const struct rte_ether_hdr *eth = rte_pktmbuf_mtod(m, const struct rte_ether_hdr *);
    const unsigned s = erma__dpdk_neigh_slot(ip->src_addr); /* learn the sender's MAC */
    d->neigh[s].ip = ip->src_addr;
    d->neigh[s].mac = eth->src_addr;
    struct erma_addr src;
    erma__dpdk_addr(&src, ip->src_addr, udp->src_port, &eth->src_addr);
    const uint8_t *data = (const uint8_t *)udp + 8;
    if (erma_bundle_open(&d->bundle_rd, data, udp_len - 8)) {
        d->bundle = m;
        d->bundle_src = src;
        split(d, pkts, n, max);
    } else { /* a packet (one that only looks like a bundle fails checks above) */
        hand_out(d, &pkts[(*n)++], data, udp_len - 8, &src);
        d->held[d->nheld++] = m;
    }
}

void erma__dpdk_rx_release(struct dpdk *d)
{
    rte_pktmbuf_free_bulk(d->held, d->nheld);
    d->nheld = 0;
    rte_pktmbuf_free(d->bundle); /* NULL is ignored */
    d->bundle = NULL;
}

/* Frames are taken while pkts has room and no bundle waits to be split. */
static bool room(const struct dpdk *d, unsigned n, unsigned max)
{
    return n < max && !d->bundle;
}

int erma__dpdk_rx_burst(struct erma_transport *tr, struct erma_rx_pkt *pkts, unsigned max)
{
    struct dpdk *d = (struct dpdk *)tr;
    if (d->nheld) {
        rte_pktmbuf_free_bulk(d->held, d->nheld);
        d->nheld = 0;
    }
    if (max > ERMA_MAX_BURST)
        max = ERMA_MAX_BURST;
    unsigned n = 0;
    d->bundle_now = 0;
    if (d->bundle)
        split(d, pkts, &n, max);
    /* Take the queue before draining the ring, so frames stay in order: only
     * rx_lock holders push to rings. */
    const bool polling = rte_spinlock_trylock(&P.rx_lock);
    struct rte_mbuf *m;
    while (room(d, n, max) && (m = erma__mpsc_pop(&d->ring)))
        take(d, m, pkts, &n, max);
    if (polling && room(d, n, max)) {
        struct rte_mbuf *b[ERMA_MAX_BURST];
        const uint16_t got = rte_eth_rx_burst(P.id, 0, b, ERMA_MAX_BURST);
        for (uint16_t i = 0; i < got; i++) {
            struct dpdk *o = demux(b[i]);
            if (o == d && room(d, n, max)) {
                take(d, b[i], pkts, &n, max);
            } else if (!o || erma__mpsc_push(&o->ring, b[i]) != ERMA_OK) {
                if (o == d)
                    d->base.stats.rx_dropped++;
                else
                    P.orphans++;
                rte_pktmbuf_free(b[i]);
            } /* else queued; ours beyond max land at our ring's tail, in order */
        }
    }
    if (polling)
        rte_spinlock_unlock(&P.rx_lock);
    return (int)n;
}
