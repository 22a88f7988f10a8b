/*
 * erma/sim.h - an in-process simulated fabric with virtual time.
 *
 * For simulations and tests: build a fabric here, open sim:// endpoints on
 * it (endpoint.h) and step them with erma_sim_run().
 *
 * Many endpoints in one process and one thread talk over a fabric of
 * `hosts` hosts joined by one switch. A packet from host A to host B:
 *   1. leaves A's uplink (link_bps serialisation, unbounded NIC queue),
 *   2. after link_delay_ns crosses one of `paths` ECMP core paths, chosen by
 *      hashing (hosts, UDP ports); each path adds path_delay_ns[p] and, if
 *      path_bps is set, its own serialisation and a switch_buffer queue,
 *   3. is randomly dropped with probability `loss`,
 *   4. queues at the switch egress port towards B: link_bps serialisation
 *      and a drop-tail buffer of switch_buffer bytes,
 *   5. after link_delay_ns (plus, with probability `reorder`, a random extra
 *      delay of up to reorder_delay_ns) lands in the RX queue of its
 *      destination port, which holds rx_ring packets and drops beyond that.
 * Serialisation counts frame_overhead bytes per packet beyond the erma
 * packet (Ethernet, IPv4 and UDP headers by default).
 *
 * Time is virtual: nothing moves until the harness calls
 * erma_sim_advance_to(), typically to erma_sim_next_event() after every
 * endpoint has had its turn. erma_sim_use_clock() makes erma_now_ns() read
 * the fabric's time. With the same seed and the same calls, a run is the
 * same run, packet for packet.
 *
 * Endpoints open "sim://NAME/HOST:PORT" with erma_endpoint_create(); PORT 0
 * picks a free port. Close every such transport before erma_sim_destroy().
 */
#ifndef ERMA_SIM_H
#define ERMA_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include "erma/api.h"

ERMA_BEGIN_DECLS

#define ERMA_SIM_MAX_PATHS 16

struct erma_sim_cfg {
    uint32_t hosts;
    uint64_t link_bps;
    uint64_t link_delay_ns;
    uint32_t paths;
    uint64_t path_delay_ns[ERMA_SIM_MAX_PATHS];
    uint64_t path_bps;      /* 0: the core is never the bottleneck */
    uint64_t switch_buffer; /* bytes per queue; 0: unbounded */
    double loss;
    double reorder;
    uint64_t reorder_delay_ns;
    uint32_t frame_overhead;
    uint64_t seed;
};

enum erma_sim_event_kind {
    ERMA_SIM_DELIVER,
    ERMA_SIM_DROP_LOSS,    /* random loss */
    ERMA_SIM_DROP_BUFFER,  /* switch buffer full */
    ERMA_SIM_DROP_RX_FULL, /* destination RX queue full */
    ERMA_SIM_DROP_NO_PORT, /* nobody listens at the destination */
};

struct erma_sim_event {
    uint64_t time;
    enum erma_sim_event_kind kind;
    uint16_t src_host, src_port, dst_host, dst_port;
    uint32_t len;
    uint32_t path;
};

struct erma_sim_stats {
    uint64_t sent, delivered;
    uint64_t drop_loss, drop_buffer, drop_rx_full, drop_no_port;
    uint64_t reordered;
    uint64_t path_pkts[ERMA_SIM_MAX_PATHS];
};

typedef void (*erma_sim_trace_fn)(void *ctx, const struct erma_sim_event *ev);

struct erma_sim;

/* 2 hosts, 25 Gb/s links, 1 us per hop, 1 path, 1 MiB buffers, no loss. */
void erma_sim_cfg_default(struct erma_sim_cfg *cfg);

/* Creates the fabric registered under name (unique in the process). */
int erma_sim_create(const char *name, const struct erma_sim_cfg *cfg, struct erma_sim **out);
void erma_sim_destroy(struct erma_sim *sim);

uint64_t erma_sim_now(const struct erma_sim *sim);
/* Time of the next packet event, or UINT64_MAX when nothing is in flight. */
uint64_t erma_sim_next_event(const struct erma_sim *sim);
/* Moves virtual time forward to t, running every event up to t in order. */
void erma_sim_advance_to(struct erma_sim *sim, uint64_t t);
/* Makes erma_now_ns() return this fabric's virtual time. */
void erma_sim_use_clock(struct erma_sim *sim);

void erma_sim_get_stats(const struct erma_sim *sim, struct erma_sim_stats *out);
/* Largest backlog in bytes seen at the switch egress port towards host. */
uint64_t erma_sim_egress_max_bytes(const struct erma_sim *sim, uint32_t host);
/* Current backlog in bytes at the switch egress port towards host. */
uint64_t erma_sim_egress_bytes(const struct erma_sim *sim, uint32_t host);
void erma_sim_set_trace(struct erma_sim *sim, erma_sim_trace_fn fn, void *ctx);
/* Largest backlog in bytes seen in host's uplink (NIC) queue. */
uint64_t erma_sim_uplink_max_bytes(const struct erma_sim *sim, uint32_t host);
/* Current backlog in bytes in host's uplink queue. */
uint64_t erma_sim_uplink_bytes(const struct erma_sim *sim, uint32_t host);

/* For fault tests: tap sees every packet as it is sent (ev.kind is
 * ERMA_SIM_DELIVER, ev.time the send time) and may change its bytes in
 * place; returning false drops it silently. */
typedef bool (*erma_sim_tap_fn)(void *ctx, const struct erma_sim_event *ev, uint8_t *data);
void erma_sim_set_tap(struct erma_sim *sim, erma_sim_tap_fn fn, void *ctx);
/* Sends a copy of data as if host:port src had sent it (replays, forgeries). */
int erma_sim_inject(struct erma_sim *sim, uint16_t src_host, uint16_t src_port,
                    uint16_t dst_host, uint16_t dst_port, const void *data, uint32_t len);

ERMA_END_DECLS

#endif
