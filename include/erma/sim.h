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
 *      hashing (hosts, UDP ports); path p serialises at path_rate_bps[p], or
 *      at path_bps when that is 0, behind a drop-tail queue of switch_buffer
 *      bytes (no queue and no serialisation when the rate is 0), then adds
 *      path_delay_ns[p],
 *   3. is randomly dropped with probability path_loss[p] as it comes off
 *      path p, then with probability `loss` (independently: a packet on p
 *      survives with probability (1 - path_loss[p]) * (1 - loss)),
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
 * endpoint has had its turn (erma_sim_run() does both). erma_sim_use_clock()
 * makes erma_now_ns() read the fabric's time. With the same seed and the
 * same calls, a run is the same run, packet for packet.
 *
 * Per-path impairments (multipath experiments): path_loss[p] and
 * path_rate_bps[p] make one path lossy or slow; entries at and beyond
 * `paths` are ignored, and with all of them 0 the fabric behaves, and draws
 * random numbers, exactly as without them. erma_sim_set_path() changes them
 * during a run.
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
    uint64_t path_bps;      /* 0: paths without path_rate_bps[p] never queue */
    uint64_t switch_buffer; /* bytes per queue; 0: unbounded */
    double loss;
    double reorder;
    uint64_t reorder_delay_ns;
    uint32_t frame_overhead;
    uint64_t seed;
    /* Per path, for p < paths; each in [0, 1]; 0: only `loss` applies. */
    double path_loss[ERMA_SIM_MAX_PATHS];
    /* Per path, bits/s; 0: path_bps. */
    uint64_t path_rate_bps[ERMA_SIM_MAX_PATHS];
};

/* One core path's settings, for erma_sim_set_path() and erma_sim_get_path(). */
struct erma_sim_path {
    uint64_t delay_ns; /* as path_delay_ns[p] */
    uint64_t bps;      /* as path_rate_bps[p]: 0 means path_bps */
    double loss;       /* as path_loss[p], in [0, 1] */
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

/* Per-path statistics: path_pkts[p] counts packets hashed to path p when
 * sent; path_drop_loss[p] those of them dropped at random (path_loss[p] or
 * `loss`), so the path_drop_loss[] sum to drop_loss; path_drop_buffer[p]
 * those dropped because path p's own queue was full. Drops at the switch
 * egress port belong to no path: they are drop_buffer minus the sum of
 * path_drop_buffer[]. */
struct erma_sim_stats {
    uint64_t sent, delivered;
    uint64_t drop_loss, drop_buffer, drop_rx_full, drop_no_port;
    uint64_t reordered;
    uint64_t path_pkts[ERMA_SIM_MAX_PATHS];
    uint64_t path_drop_loss[ERMA_SIM_MAX_PATHS];   /* random loss on path p */
    uint64_t path_drop_buffer[ERMA_SIM_MAX_PATHS]; /* path p's queue full */
};

typedef void (*erma_sim_trace_fn)(void *ctx, const struct erma_sim_event *ev);

struct erma_sim;

/* Fills *cfg with the defaults: 2 hosts, 25 Gb/s links, 1 us per hop, 1
 * path, 1 MiB buffers, no loss. Returns nothing. */
void erma_sim_cfg_default(struct erma_sim_cfg *cfg);

/* Creates the fabric registered under name (unique in the process), which
 * sim:// URIs name. ERMA_EINVAL for a name that is taken, too long or has
 * a '/', or a cfg out of range (no hosts or more than 65535, link_bps 0,
 * paths not in 1..ERMA_SIM_MAX_PATHS, a loss or reorder outside [0, 1]);
 * ERMA_ENOMEM; else ERMA_OK. */
int erma_sim_create(const char *name, const struct erma_sim_cfg *cfg, struct erma_sim **out);
/* Unregisters the fabric and frees it with the packets in flight, and
 * gives erma_now_ns() back the real clock if it read this fabric's; NULL
 * is ignored. Close its transports first. Returns nothing. */
void erma_sim_destroy(struct erma_sim *sim);

/* Returns the fabric's virtual time, in ns. */
uint64_t erma_sim_now(const struct erma_sim *sim);
/* Returns the time of the next packet event, or UINT64_MAX when nothing
 * is in flight. */
uint64_t erma_sim_next_event(const struct erma_sim *sim);
/* Moves virtual time forward to t, running every event up to t in order.
 * Returns nothing. */
void erma_sim_advance_to(struct erma_sim *sim, uint64_t t);
/* Makes erma_now_ns() return this fabric's virtual time, in the whole
 * process (erma_clock_set_source()). Returns nothing. */
void erma_sim_use_clock(struct erma_sim *sim);

/* Copies the fabric's counters (struct erma_sim_stats) into *out. Returns
 * nothing. */
void erma_sim_get_stats(const struct erma_sim *sim, struct erma_sim_stats *out);
/* Returns the largest backlog in bytes seen at the switch egress port
 * towards host (0 for a host beyond the fabric, as the other backlog calls
 * return). */
uint64_t erma_sim_egress_max_bytes(const struct erma_sim *sim, uint32_t host);
/* Returns the current backlog in bytes at the switch egress port towards
 * host. */
uint64_t erma_sim_egress_bytes(const struct erma_sim *sim, uint32_t host);
/* Calls fn(ctx, ev) for every delivery and every drop, at its virtual
 * time; fn NULL stops it. Returns nothing. */
void erma_sim_set_trace(struct erma_sim *sim, erma_sim_trace_fn fn, void *ctx);
/* Returns the largest backlog in bytes seen in host's uplink (NIC) queue. */
uint64_t erma_sim_uplink_max_bytes(const struct erma_sim *sim, uint32_t host);
/* Returns the current backlog in bytes in host's uplink queue. */
uint64_t erma_sim_uplink_bytes(const struct erma_sim *sim, uint32_t host);

/* Sets path's delay, rate and loss from the current virtual time on:
 *   - the rate applies to every byte not yet sent onto the path: packets
 *     waiting in its queue, and the rest of the one being serialised, go on
 *     at the new rate (their departure times are rescaled; at rate 0 they
 *     leave at once), and so do packets that reach the path later;
 *   - the delay applies to packets whose last bit leaves the path's queue
 *     after the call (those still queued included); packets already
 *     propagating keep the delay they left with;
 *   - the loss applies to packets that come off the path after the call,
 *     including ones already on it.
 * The change is part of the run: the same seed and the same calls, including
 * erma_sim_set_path() at the same virtual times, give the same run.
 * Returns ERMA_OK; ERMA_EINVAL and no change unless path < paths and loss
 * is in [0, 1]. */
int erma_sim_set_path(struct erma_sim *sim, uint32_t path, const struct erma_sim_path *p);
/* Reads path's current settings as erma_sim_set_path() takes them (bps 0
 * when the path runs at path_bps). Returns ERMA_OK; ERMA_EINVAL if path >=
 * paths. */
int erma_sim_get_path(const struct erma_sim *sim, uint32_t path, struct erma_sim_path *out);
/* Returns the largest backlog in bytes seen in path's queue (0 if path >=
 * paths). */
uint64_t erma_sim_path_max_bytes(const struct erma_sim *sim, uint32_t path);
/* Returns the core path (0..paths-1) the flow's packets hash to, as an
 * ECMP switch would hash its UDP ports; ERMA_EINVAL for a NULL sim or a
 * host beyond the fabric. */
int erma_sim_flow_path(const struct erma_sim *sim, uint16_t src_host, uint16_t src_port,
                       uint16_t dst_host, uint16_t dst_port);

/* For fault tests: tap sees every packet as it is sent (ev.kind is
 * ERMA_SIM_DELIVER, ev.time the send time) and may change its bytes in
 * place; returning false drops it silently. */
typedef bool (*erma_sim_tap_fn)(void *ctx, const struct erma_sim_event *ev, uint8_t *data);
/* Installs the tap fn with ctx; fn NULL removes it. Returns nothing. */
void erma_sim_set_tap(struct erma_sim *sim, erma_sim_tap_fn fn, void *ctx);
/* Sends a copy of data as if host:port src had sent it (replays, forgeries);
 * the tap sees it too. Returns ERMA_OK; ERMA_EINVAL for no data or a host
 * beyond the fabric; ERMA_ENOMEM. */
int erma_sim_inject(struct erma_sim *sim, uint16_t src_host, uint16_t src_port,
                    uint16_t dst_host, uint16_t dst_port, const void *data, uint32_t len);

struct erma_endpoint; /* erma/endpoint.h */
/* Steps endpoints eps[0..n) round-robin on sim's virtual clock (which it
 * installs) until done(ctx) is true or duration_ns of virtual time pass,
 * advancing time to the next packet or timer when every endpoint is idle.
 * done may be NULL (run the whole duration). Returns ERMA_OK when done,
 * ERMA_ETIMEDOUT when time ran out. */
int erma_sim_run(struct erma_sim *sim, struct erma_endpoint **eps, unsigned n,
                 uint64_t duration_ns, bool (*done)(void *ctx), void *ctx);

ERMA_END_DECLS

#endif
