/* Internal to the sim transport: the fabric (sim.c) and the ports that
 * endpoints open on it (sim_port.c). */
#ifndef ERMA_TRANSPORT_SIM_FABRIC_H
#define ERMA_TRANSPORT_SIM_FABRIC_H

#include <stdbool.h>
#include <stdint.h>

#include "erma/sdk/rand.h"
#include "erma/sdk/transport_driver.h"
#include "erma/sim.h"
#include "transport/builtin.h"

enum stage { AT_PATH, AT_EGRESS, DELIVER };

struct pkt {
    uint64_t time, seq;
    uint64_t left; /* past AT_PATH: when its last bit left the path's queue */
    uint16_t src_host, src_port, dst_host, dst_port;
    uint8_t stage, path;
    uint32_t len;
    uint8_t data[];
};

/* A serialising link with an optional drop-tail buffer. */
struct queue {
    uint64_t bps, buffer, free_at, max_bytes;
};

struct sim_port {
    struct erma_transport base;
    struct erma_sim *sim;
    uint16_t host, port;
    struct pkt **ring;
    uint32_t head, count;
    struct pkt *held[ERMA_MAX_BURST];
    unsigned nheld;
};

struct erma_sim {
    char name[64];
    struct erma_sim_cfg cfg;
    uint64_t now, seq;
    struct erma_rand rng;
    struct queue *uplink, *egress, path[ERMA_SIM_MAX_PATHS];
    struct pkt **heap;
    size_t heap_len, heap_cap;
    struct sim_port **ports; /* open addressing, key host:port */
    size_t ports_cap, ports_len;
    uint16_t next_port;
    struct erma_sim_stats stats;
    erma_sim_trace_fn trace;
    void *trace_ctx;
    erma_sim_tap_fn tap;
    void *tap_ctx;
    struct erma_sim *next;
};

/* The fabric named name, or NULL. */
struct erma_sim *erma__sim_find(const char *name);
/* The port open at host:port, or NULL. */
struct sim_port *erma__sim_port_find(const struct erma_sim *s, uint16_t host, uint16_t port);
int erma__sim_port_insert(struct erma_sim *s, struct sim_port *p);
void erma__sim_port_remove(struct erma_sim *s, struct sim_port *p);
/* Puts one packet on the fabric at the source's uplink (after the tap). */
int erma__sim_send(struct erma_sim *s, uint16_t sh, uint16_t sp, uint16_t dh, uint16_t dp,
                   const struct erma_tx_pkt *t);
/* The unloaded RTT of a port sending max_pkt-byte packets (its hint). */
uint64_t erma__sim_base_rtt(const struct erma_sim *s, uint32_t max_pkt);
/* True when erma_now_ns() reads s's virtual time (erma_sim_use_clock). */
bool erma__sim_is_clock(const struct erma_sim *s);

#endif
