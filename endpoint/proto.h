/*
 * endpoint/proto.h - what a protocol on an endpoint (rpc/, rma/) uses:
 * registration in the receive demultiplexer, the TX batch, the clock and
 * the buffer pool. Internal to the library.
 *
 * The loop trims the pool (erma_pool_trim) every ERMA_EP_TRIM_NS: a protocol
 * that lets other threads allocate from ep->pool must erma_pool_share() it
 * before they start.
 */
#ifndef ERMA_ENDPOINT_PROTO_H
#define ERMA_ENDPOINT_PROTO_H

#include <pthread.h>

#include "erma/clock.h"
#include "erma/endpoint.h"
#include "erma/sdk/pool.h"
#include "erma/sdk/transport_driver.h"
#include "erma/sdk/wire.h"

#define ERMA_EP_PROTOS 4 /* protocol objects on one endpoint */
#define ERMA_PROTO_IDS 16 /* the header's 4-bit proto field */
#define ERMA_EP_TRIM_NS 100000000ull /* how often the loop trims the pool */

/* A protocol's hooks; ctx is the protocol object. */
struct erma_ep_proto {
    /* A valid packet whose header proto is one the protocol registered
     * for; pkt's data stays valid until rx returns. */
    void (*rx)(void *ctx, const struct erma_hdr *h, const struct erma_rx_pkt *pkt);
    /* Timers, once per pass after RX; returns the work done. */
    int (*poll)(void *ctx, uint64_t now_ns);
    /* After the pass's TX batch left (continuations); may be NULL. */
    void (*after_flush)(void *ctx);
    /* The time of the next poll with work to do; UINT64_MAX: none. */
    uint64_t (*next_timer)(const void *ctx);
    void *ctx;
    /* True while the protocol awaits something that does not wake the
     * transport (an RPC worker thread's answer): the loop keeps polling.
     * May be NULL. */
    bool (*awaits)(const void *ctx);
};

/* Called on every packet of the batch with one, at the flush, before it is
 * sent: may rewrite the packet, building it in room (max_pkt bytes).
 * flush_ns is when the batch leaves, pass_ns the pass's time (ep->now,
 * every time its protocol took): a long pass, or a loop descheduled,
 * puts them apart. */
typedef void (*erma_ep_prep_fn)(void *ctx, struct erma_tx_pkt *p, uint8_t *room, uint64_t pass_ns,
                                uint64_t flush_ns);

struct erma_endpoint {
    struct erma_endpoint_cfg cfg;
    uint8_t tid;
    struct erma_transport *tr;   /* path[0]: its own port */
    struct erma_transport *path[ERMA_MAX_PATHS]; /* virtual paths: the next ports */
    unsigned npaths;
    unsigned rx_first; /* the path the next pass receives from first */
    struct erma_pool *pool;
    uint64_t next_trim;  /* when the loop next trims the pool */
    uint64_t now;        /* the clock, at the top of each pass (erma__ep_clock) */
    uint64_t idle_since; /* when the loop last found work or the application called */
    bool woke;           /* it slept in wait since the last pass that received */
    bool in_pass;        /* run_once runs: protocols' packets wait for its flushes */
    bool lone_calls;     /* the application called alone between passes, lately */
    unsigned calls;      /* erma__ep_tx_send_now calls since the pass began */
    /* The shared-core guard (endpoint.c, share_check): the next look at the
     * thread's run-queue wait (ep->now), the monotonic time and the wait at
     * the last look and the thread that looked, until when (ep->now) the
     * loop spins SHARED_SPIN_NS at most; the looks in a row that found the
     * core shared. */
    uint64_t next_share_check, share_wall, share_delay, shared_until;
    pthread_t share_thread;
    unsigned share_streak;
    struct erma_endpoint_stats stats;
    struct erma_ep_proto protos[ERMA_EP_PROTOS];
    unsigned nprotos;
    int8_t by_id[ERMA_PROTO_IDS]; /* header proto -> protos[] index, -1: none */
    /* The TX batch: packet i, its destination (a copy: the caller's may
     * sit in an RX buffer), its prep, and room for building it in. */
    struct erma_tx_pkt tx[ERMA_MAX_BURST];
    struct erma_addr txdst[ERMA_MAX_BURST];
    erma_ep_prep_fn prep[ERMA_MAX_BURST];
    void *prep_ctx[ERMA_MAX_BURST];
    uint8_t *room; /* ERMA_MAX_BURST x tr->max_pkt */
    unsigned ntx;
};

/* The address k virtual paths (ports) after addr, before it when k < 0;
 * ERMA_EADDR when the transport has none or the port would be outside. */
int erma__ep_path_addr(const struct erma_endpoint *ep, const struct erma_addr *addr, int k,
                       struct erma_addr *out);
/* k when a is base's path k for some k < n, else -1. */
int erma__ep_path_of(const struct erma_endpoint *ep, const struct erma_addr *base, unsigned n,
                     const struct erma_addr *a);

/* Registers p for header protos ids[0..nids); ERMA_EAGAIN when one is taken,
 * ERMA_ENOSLOTS when ERMA_EP_PROTOS protocols are on ep already. */
int erma__ep_register(struct erma_endpoint *ep, const struct erma_ep_proto *p, const uint8_t *ids,
                      unsigned nids);
/* Removes the protocol whose ctx is ctx, after sending the batch. */
void erma__ep_unregister(struct erma_endpoint *ep, void *ctx);

/* The clock read now: for calls from outside the loop. Every time of a
 * protocol comes from ep->now, which never goes back. */
static inline uint64_t erma__ep_clock(struct erma_endpoint *ep)
{
    const uint64_t t = erma_now_ns();
    return ep->now = t > ep->now ? t : ep->now;
}

/* Sends the batch. A queue that takes only part of it is offered the rest
 * again (64 tries in all); what it still refuses is dropped and counted
 * (stats.tx_dropped): the protocols' timeouts repair it. */
void erma__ep_tx_flush(struct erma_endpoint *ep);

/* For a call from outside the loop that has just read the clock
 * (erma__ep_clock) and queued packets: the first such call after a pass
 * sends the batch at once, at ep->now, so that a lone request does not
 * wait for the next pass, while the application has been calling one at
 * a time (the last pass that followed calls followed one). Later calls
 * before the next pass, calls of an application that calls in bursts,
 * and calls inside a pass leave theirs to the pass: one batch, one
 * system call for a burst. */
void erma__ep_tx_send_now(struct erma_endpoint *ep);

/* The next packet of the batch (sending the batch first if it is full),
 * to dst, with no segments yet: the caller sets hdr/hdr_len and
 * data/data_len, or builds it in *room (max_pkt bytes) and calls
 * erma__ep_tx_room_len(). prep (may be NULL) runs on it at the flush.
 * Inline: every packet sent passes here. */
static inline struct erma_tx_pkt *erma__ep_tx(struct erma_endpoint *ep,
                                              const struct erma_addr *dst, erma_ep_prep_fn prep,
                                              void *prep_ctx, uint8_t **room)
{
    if (ep->ntx == ERMA_MAX_BURST)
        erma__ep_tx_flush(ep);
    const unsigned i = ep->ntx++;
    ep->txdst[i] = *dst;
    ep->prep[i] = prep;
    ep->prep_ctx[i] = prep_ctx;
    ep->tx[i] = (struct erma_tx_pkt){.dst = &ep->txdst[i]};
    if (room)
        *room = ep->room + (size_t)i * ep->tr->max_pkt;
    return &ep->tx[i];
}
/* The packet p was built in its room and is len bytes long. */
static inline void erma__ep_tx_room_len(struct erma_endpoint *ep, struct erma_tx_pkt *p,
                                        uint32_t len)
{
    p->hdr = ep->room + (size_t)(p - ep->tx) * ep->tr->max_pkt;
    p->hdr_len = len;
}
#endif
