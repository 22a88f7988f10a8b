/* The dpdk transport's shared state (transport/dpdk.c sets up the EAL, the
 * port and endpoints; transport/dpdk_io.c builds, sends, receives and
 * demultiplexes frames). Private to the dpdk module. */
#ifndef ERMA_TRANSPORT_DPDK_PORT_H
#define ERMA_TRANSPORT_DPDK_PORT_H

#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include <rte_ether.h>
#include <rte_mbuf.h>
#include <rte_spinlock.h>

#include "common/ring.h"
#include "erma/sdk/bundle.h"
#include "erma/sdk/transport_driver.h"

#define MAX_EP 64
#define MAX_TXQ 16
#define SW_RING 1024
#define TX_DESC 1024
#define NEIGH 64 /* learned neighbours per endpoint (a direct-mapped cache) */
#define FRAME_HDR (RTE_ETHER_HDR_LEN + 20 + 8)
#define ADDR_LEN 12 /* IPv4 (4), UDP port (2), MAC (6); all in network order */

struct dpdk {
    struct erma_transport base;
    uint32_t ip;   /* network order */
    uint16_t port; /* network order */
    uint16_t txq;
    bool coalesce; /* small packets to one destination go as a bundle */
    struct erma_mpsc ring; /* frames other pollers found for us */
    struct rte_mbuf *held[ERMA_MAX_BURST]; /* returned by the last rx_burst */
    unsigned nheld;
    /* a received bundle not yet handed out whole: its frame and sender */
    struct rte_mbuf *bundle;
    struct erma_bundle_reader bundle_rd;
    struct erma_addr bundle_src;
    unsigned bundle_now; /* its packets handed out by this rx_burst */
    struct {
        uint32_t ip;
        struct rte_ether_addr mac;
    } neigh[NEIGH];
};

/* The process's one port. Set up under mu; the data path reads it freely. */
struct dpdk_port {
    pthread_mutex_t mu;
    int init_rc; /* 1 until tried, then the outcome of the EAL/port setup */
    uint16_t id, ntxq, next_txq;
    uint32_t mtu;
    bool tx_csum, rx_csum;
    struct erma_transport_hints hints; /* of every endpoint on the port */
    struct rte_ether_addr mac;
    struct rte_mempool *pool;
    unsigned nep;
    rte_spinlock_t rx_lock;
    uint64_t orphans; /* frames for no endpoint or a full ring; under rx_lock */
    rte_spinlock_t tx_lock[MAX_TXQ];
    struct dpdk *_Atomic by_port[65536]; /* demux: UDP port (host order) -> endpoint */
};
extern struct dpdk_port erma__dpdk;

static inline void erma__dpdk_addr(struct erma_addr *a, uint32_t ip, uint16_t port,
                                   const struct rte_ether_addr *mac)
{
    memset(a, 0, sizeof *a);
    a->len = ADDR_LEN;
    memcpy(a->raw, &ip, 4);
    memcpy(a->raw + 4, &port, 2);
    memcpy(a->raw + 6, mac->addr_bytes, 6);
}

/* d->neigh's slot for ip. */
static inline unsigned erma__dpdk_neigh_slot(uint32_t ip)
{
    return (ntohl(ip) * 2654435761u) >> 26; /* 6 bits: NEIGH = 64 */
}

int erma__dpdk_tx_burst(struct erma_transport *tr, const struct erma_tx_pkt *pkts, unsigned n);
int erma__dpdk_rx_burst(struct erma_transport *tr, struct erma_rx_pkt *pkts, unsigned max);
/* Frees the frames d holds for what rx_burst handed out (at close). */
void erma__dpdk_rx_release(struct dpdk *d);

#endif
