/* The sim transport: the ports endpoints open on a simulated fabric
 * (sim.h; the fabric itself is sim.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "erma/errors.h"
#include "erma/sdk/wire.h"
#include "transport/sim_fabric.h"

/* Parses "NAME/HOST:PORT" (NAME may be empty for resolve within a fabric). */
static int parse(const char *rest, char *name, size_t name_len, uint32_t *host, uint32_t *port)
{
    const char *slash = strchr(rest, '/');
    if (!slash || (size_t)(slash - rest) >= name_len)
        return ERMA_EADDR;
    memcpy(name, rest, (size_t)(slash - rest));
    name[slash - rest] = 0;
    char tail;
    if (sscanf(slash + 1, "%u:%u%c", host, port, &tail) != 2 || *port > 65535 ||
        *host > 65535 || slash[1] < '0' || slash[1] > '9')
        return ERMA_EADDR;
    return ERMA_OK;
}

static void encode_addr(struct erma_addr *a, uint16_t host, uint16_t port)
{
    memset(a, 0, sizeof *a);
    a->len = 4;
    memcpy(a->raw, &host, 2);
    memcpy(a->raw + 2, &port, 2);
}

static void decode_addr(const struct erma_addr *a, uint16_t *host, uint16_t *port)
{
    memcpy(host, a->raw, 2);
    memcpy(port, a->raw + 2, 2);
}

static void free_held(struct sim_port *p)
{
    for (unsigned i = 0; i < p->nheld; i++)
        free(p->held[i]);
    p->nheld = 0;
}

static void sim_close(struct erma_transport *tr)
{
    struct sim_port *p = (struct sim_port *)tr;
    free_held(p);
    for (uint32_t i = 0; i < p->count; i++)
        free(p->ring[(p->head + i) % tr->rx_ring]);
    if (p->sim)
        erma__sim_port_remove(p->sim, p);
    free(p->ring);
    free(p);
}


static int sim_open(const char *rest, const struct erma_transport_cfg *cfg,
                    struct erma_transport **out)
{
    char name[64];
    uint32_t host, port;
    int rc = parse(rest, name, sizeof name, &host, &port);
    if (rc != ERMA_OK)
        return rc;
    struct erma_sim *s = erma__sim_find(name);
    if (!s || host >= s->cfg.hosts)
        return ERMA_EADDR;
    for (unsigned tries = 0; port == 0 && tries < 16384; tries++) {
        const uint16_t cand = s->next_port;
        s->next_port = s->next_port == 65535 ? 49152 : s->next_port + 1;
        if (!erma__sim_port_find(s, (uint16_t)host, cand))
            port = cand;
    }
    if (port == 0 || erma__sim_port_find(s, (uint16_t)host, (uint16_t)port))
        return ERMA_EADDR;
    struct sim_port *p = calloc(1, sizeof *p);
    if (!p || !(p->ring = calloc(cfg->rx_ring, sizeof *p->ring))) {
        free(p);
        return ERMA_ENOMEM;
    }
    p->base.ops = &erma__sim_ops;
    p->base.rx_ring = cfg->rx_ring;
    p->base.max_pkt = cfg->mtu - ERMA_IP_UDP_OVERHEAD;
    p->base.hints.shared_clock = true;
    p->base.hints.link_bps = s->cfg.link_bps;
    p->base.hints.frame_overhead = s->cfg.frame_overhead;
    p->base.hints.base_rtt_ns = erma__sim_base_rtt(s, p->base.max_pkt);
    p->sim = s;
    p->host = (uint16_t)host;
    p->port = (uint16_t)port;
    encode_addr(&p->base.local, p->host, p->port);
    if ((rc = erma__sim_port_insert(s, p)) != ERMA_OK) {
        free(p->ring);
        free(p);
        return rc;
    }
    *out = &p->base;
    return ERMA_OK;
}

static int sim_tx_burst(struct erma_transport *tr, const struct erma_tx_pkt *pkts, unsigned n)
{
    struct sim_port *port = (struct sim_port *)tr;
    struct erma_sim *s = port->sim;
    if (!s)
        return ERMA_EINVAL;
    const int rc = erma_transport_check_tx(tr, pkts, n, 4);
    if (rc != ERMA_OK)
        return rc;
    for (unsigned i = 0; i < n; i++) {
        uint16_t dh, dp;
        decode_addr(pkts[i].dst, &dh, &dp);
        if (dh >= s->cfg.hosts)
            return ERMA_EADDR;
    }
    for (unsigned i = 0; i < n; i++) {
        uint16_t dh, dp;
        decode_addr(pkts[i].dst, &dh, &dp);
        if (erma__sim_send(s, port->host, port->port, dh, dp, &pkts[i]) != ERMA_OK)
            return (int)i;
        tr->stats.tx_pkts++;
        tr->stats.tx_bytes += erma_tx_pkt_len(&pkts[i]);
    }
    return (int)n;
}

static int sim_rx_burst(struct erma_transport *tr, struct erma_rx_pkt *pkts, unsigned max)
{
    struct sim_port *p = (struct sim_port *)tr;
    free_held(p);
    if (!p->sim)
        return 0;
    erma_sim_advance_to(p->sim, p->sim->now);
    if (max > ERMA_MAX_BURST)
        max = ERMA_MAX_BURST;
    unsigned n = 0;
    for (; n < max && p->count; n++) {
        struct pkt *k = p->ring[p->head];
        p->head = (p->head + 1) % tr->rx_ring;
        p->count--;
        p->held[p->nheld++] = k;
        pkts[n].data = k->data;
        pkts[n].len = k->len;
        /* its arrival, when sim time is erma_now_ns()'s (erma_sim_use_clock) */
        pkts[n].rx_ns = erma__sim_is_clock(p->sim) ? k->time : 0;
        encode_addr(&pkts[n].src, k->src_host, k->src_port);
        tr->stats.rx_bytes += k->len;
    }
    tr->stats.rx_pkts += n;
    return (int)n;
}

static int sim_resolve(struct erma_transport *tr, const char *rest, struct erma_addr *out)
{
    char name[64];
    uint32_t host, port;
    const struct sim_port *p = (const struct sim_port *)tr;
    if (parse(rest, name, sizeof name, &host, &port) != ERMA_OK || !p->sim ||
        strcmp(name, p->sim->name) != 0 || host >= p->sim->cfg.hosts)
        return ERMA_EADDR;
    encode_addr(out, (uint16_t)host, (uint16_t)port);
    return ERMA_OK;
}

static int sim_addr_str(const struct erma_transport *tr, const struct erma_addr *a, char *buf,
                        size_t len)
{
    const struct sim_port *p = (const struct sim_port *)tr;
    uint16_t host, port;
    if (a->len != 4 || !p->sim)
        return ERMA_EINVAL;
    decode_addr(a, &host, &port);
    const int n = snprintf(buf, len, "%s/%u:%u", p->sim->name, host, port);
    return n < 0 || (size_t)n >= len ? ERMA_EINVAL : ERMA_OK;
}

static int sim_addr_path(const struct erma_transport *tr, const struct erma_addr *a, int k,
                         struct erma_addr *out)
{
    (void)tr;
    uint16_t host, port;
    if (a->len != 4)
        return ERMA_EADDR;
    decode_addr(a, &host, &port);
    if (port + k > 65535 || port + k < 0)
        return ERMA_EADDR;
    encode_addr(out, host, (uint16_t)(port + k));
    return ERMA_OK;
}

const struct erma_transport_ops erma__sim_ops = {
    .scheme = "sim",
    .open = sim_open,
    .close = sim_close,
    .tx_burst = sim_tx_burst,
    .rx_burst = sim_rx_burst,
    .resolve = sim_resolve,
    .addr_str = sim_addr_str,
    .addr_path = sim_addr_path,
};
