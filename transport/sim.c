/* The simulated fabric (sim.h) and its transport. */
#include "erma/sim.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "erma/clock.h"
#include "erma/errors.h"
#include "erma/sdk/rand.h"
#include "erma/sdk/transport_driver.h"
#include "erma/sdk/wire.h"
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

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct erma_sim *registry;

void erma_sim_cfg_default(struct erma_sim_cfg *c)
{
    *c = (struct erma_sim_cfg){.hosts = 2,
                               .link_bps = 25000000000ull,
                               .link_delay_ns = 1000,
                               .paths = 1,
                               .switch_buffer = 1 << 20,
                               .frame_overhead = 42,
                               .seed = 1};
}

/* ---- time arithmetic ---- */

static uint64_t ser_ns(uint64_t bytes, uint64_t bps)
{
    if (bps == 0)
        return 0;
    return (uint64_t)(((unsigned __int128)bytes * 8000000000ull + bps - 1) / bps);
}

static uint64_t backlog_bytes(const struct queue *q, uint64_t t)
{
    if (q->bps == 0 || q->free_at <= t)
        return 0;
    return (uint64_t)((unsigned __int128)(q->free_at - t) * q->bps / 8000000000ull);
}

/* Time the packet's last bit leaves q, or UINT64_MAX when q drops it. */
static uint64_t queue_admit(struct queue *q, uint64_t t, uint32_t wire)
{
    if (q->bps == 0)
        return t;
    const uint64_t backlog = backlog_bytes(q, t);
    if (q->buffer && backlog + wire > q->buffer)
        return UINT64_MAX;
    if (backlog + wire > q->max_bytes)
        q->max_bytes = backlog + wire;
    q->free_at = (q->free_at > t ? q->free_at : t) + ser_ns(wire, q->bps);
    return q->free_at;
}

/* ---- event heap ordered by (time, seq) ---- */

static int before(const struct pkt *a, const struct pkt *b)
{
    return a->time < b->time || (a->time == b->time && a->seq < b->seq);
}

/* Restores heap order after times changed in place (Floyd). */
/* Moves x down from slot i to where the heap wants it. */
static void sift_down(struct erma_sim *s, size_t i, struct pkt *x)
{
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= s->heap_len)
            break;
        if (c + 1 < s->heap_len && before(s->heap[c + 1], s->heap[c]))
            c++;
        if (!before(s->heap[c], x))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    s->heap[i] = x;
}

static void heapify(struct erma_sim *s)
{
    for (size_t k = s->heap_len / 2; k-- > 0;)
        sift_down(s, k, s->heap[k]);
}

static int heap_push(struct erma_sim *s, struct pkt *p)
{
    if (s->heap_len == s->heap_cap) {
        const size_t cap = s->heap_cap ? 2 * s->heap_cap : 256;
        struct pkt **h = realloc(s->heap, cap * sizeof *h);
        if (!h)
            return ERMA_ENOMEM;
        s->heap = h;
        s->heap_cap = cap;
    }
    size_t i = s->heap_len++;
    while (i > 0 && before(p, s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = p;
    return ERMA_OK;
}

static struct pkt *heap_pop(struct erma_sim *s)
{
    struct pkt *top = s->heap[0], *last = s->heap[--s->heap_len];
    if (s->heap_len)
        sift_down(s, 0, last);
    return top;
}

/* ---- port table ---- */

static uint64_t mix64(uint64_t x)
{
    return erma_splitmix64(&x);
}

static size_t port_slot(const struct erma_sim *s, uint16_t host, uint16_t port)
{
    size_t i = mix64((uint64_t)host << 16 | port) & (s->ports_cap - 1);
    while (s->ports[i] && (s->ports[i]->host != host || s->ports[i]->port != port))
        i = (i + 1) & (s->ports_cap - 1);
    return i;
}

static struct sim_port *port_find(const struct erma_sim *s, uint16_t host, uint16_t port)
{
    return s->ports_cap ? s->ports[port_slot(s, host, port)] : NULL;
}

static int port_insert(struct erma_sim *s, struct sim_port *p)
{
    if (2 * (s->ports_len + 1) > s->ports_cap) {
        const size_t old_cap = s->ports_cap, cap = old_cap ? 2 * old_cap : 64;
        struct sim_port **old = s->ports;
        s->ports = calloc(cap, sizeof *s->ports);
        if (!s->ports) {
            s->ports = old;
            return ERMA_ENOMEM;
        }
        s->ports_cap = cap;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i])
                s->ports[port_slot(s, old[i]->host, old[i]->port)] = old[i];
        free(old);
    }
    s->ports[port_slot(s, p->host, p->port)] = p;
    s->ports_len++;
    return ERMA_OK;
}

static void port_remove(struct erma_sim *s, struct sim_port *p)
{
    size_t i = port_slot(s, p->host, p->port);
    if (s->ports[i] != p)
        return;
    s->ports[i] = NULL;
    s->ports_len--;
    /* Re-place the rest of the probe run so lookups still find them. */
    for (i = (i + 1) & (s->ports_cap - 1); s->ports[i]; i = (i + 1) & (s->ports_cap - 1)) {
        struct sim_port *q = s->ports[i];
        s->ports[i] = NULL;
        s->ports[port_slot(s, q->host, q->port)] = q;
    }
}

/* ---- packet movement ---- */

static void emit(struct erma_sim *s, const struct pkt *p, enum erma_sim_event_kind kind)
{
    if (!s->trace)
        return;
    const struct erma_sim_event ev = {s->now, kind, p->src_host, p->src_port,
                                      p->dst_host, p->dst_port, p->len, p->path};
    s->trace(s->trace_ctx, &ev);
}

static void drop(struct erma_sim *s, struct pkt *p, enum erma_sim_event_kind kind,
                 uint64_t *counter)
{
    (*counter)++;
    emit(s, p, kind);
    free(p);
}

/* Schedules p for stage at time t, or drops it if t is UINT64_MAX. */
static void schedule(struct erma_sim *s, struct pkt *p, enum stage stage, uint64_t t)
{
    if (t == UINT64_MAX) {
        drop(s, p, ERMA_SIM_DROP_BUFFER, &s->stats.drop_buffer);
        return;
    }
    p->stage = (uint8_t)stage;
    p->time = t;
    p->seq = s->seq++;
    if (heap_push(s, p) != ERMA_OK)
        drop(s, p, ERMA_SIM_DROP_BUFFER, &s->stats.drop_buffer);
}

static void deliver(struct erma_sim *s, struct pkt *p)
{
    struct sim_port *port = port_find(s, p->dst_host, p->dst_port);
    if (!port) {
        drop(s, p, ERMA_SIM_DROP_NO_PORT, &s->stats.drop_no_port);
    } else if (port->count == port->base.rx_ring) {
        drop(s, p, ERMA_SIM_DROP_RX_FULL, &s->stats.drop_rx_full);
    } else {
        port->ring[(port->head + port->count++) % port->base.rx_ring] = p;
        s->stats.delivered++;
        emit(s, p, ERMA_SIM_DELIVER);
    }
}

static void step(struct erma_sim *s, struct pkt *p)
{
    const uint32_t wire = p->len + s->cfg.frame_overhead;
    switch (p->stage) {
    case AT_PATH: {
        const uint64_t t = queue_admit(&s->path[p->path], p->time, wire);
        if (t == UINT64_MAX) {
            s->stats.path_drop_buffer[p->path]++;
            schedule(s, p, AT_EGRESS, t);
            break;
        }
        p->left = t;
        schedule(s, p, AT_EGRESS, t + s->cfg.path_delay_ns[p->path]);
        break;
    }
    case AT_EGRESS: {
        /* No draw for a loss of 0, so runs without per-path loss draw as before. */
        const double pl = s->cfg.path_loss[p->path];
        if ((pl > 0 && erma_rand_double(&s->rng) < pl) ||
            (s->cfg.loss > 0 && erma_rand_double(&s->rng) < s->cfg.loss)) {
            s->stats.path_drop_loss[p->path]++;
            drop(s, p, ERMA_SIM_DROP_LOSS, &s->stats.drop_loss);
            break;
        }
        uint64_t t = queue_admit(&s->egress[p->dst_host], p->time, wire);
        if (t != UINT64_MAX) {
            t += s->cfg.link_delay_ns;
            if (s->cfg.reorder > 0 && erma_rand_double(&s->rng) < s->cfg.reorder) {
                t += erma_rand_below(&s->rng, s->cfg.reorder_delay_ns + 1);
                s->stats.reordered++;
            }
        }
        schedule(s, p, DELIVER, t);
        break;
    }
    default:
        deliver(s, p);
    }
}

void erma_sim_advance_to(struct erma_sim *s, uint64_t t)
{
    while (s->heap_len && s->heap[0]->time <= t) {
        struct pkt *p = heap_pop(s);
        if (p->time > s->now)
            s->now = p->time;
        step(s, p);
    }
    if (t > s->now)
        s->now = t;
}

uint64_t erma_sim_next_event(const struct erma_sim *s)
{
    return s->heap_len ? s->heap[0]->time : UINT64_MAX;
}

uint64_t erma_sim_now(const struct erma_sim *s)
{
    return s->now;
}

static uint64_t sim_clock(void *ctx)
{
    return ((const struct erma_sim *)ctx)->now;
}

void erma_sim_use_clock(struct erma_sim *s)
{
    erma_clock_set_source(sim_clock, s);
}

void erma_sim_get_stats(const struct erma_sim *s, struct erma_sim_stats *out)
{
    *out = s->stats;
}

uint64_t erma_sim_egress_max_bytes(const struct erma_sim *s, uint32_t host)
{
    return host < s->cfg.hosts ? s->egress[host].max_bytes : 0;
}

uint64_t erma_sim_egress_bytes(const struct erma_sim *s, uint32_t host)
{
    return host < s->cfg.hosts ? backlog_bytes(&s->egress[host], s->now) : 0;
}

static bool valid_loss(double x)
{
    return x >= 0 && x <= 1; /* false for NaN */
}

static uint64_t path_rate(const struct erma_sim_cfg *c, uint32_t path)
{
    return c->path_rate_bps[path] ? c->path_rate_bps[path] : c->path_bps;
}

/* now + (t - now) * r0 / r1, rounded up; now when r1 is 0 (no serialisation). */
static uint64_t rescale_time(uint64_t t, uint64_t now, uint64_t r0, uint64_t r1)
{
    if (r1 == 0)
        return now;
    return now + (uint64_t)(((unsigned __int128)(t - now) * r0 + r1 - 1) / r1);
}

int erma_sim_set_path(struct erma_sim *s, uint32_t path, const struct erma_sim_path *np)
{
    if (!s || !np || path >= s->cfg.paths || !valid_loss(np->loss))
        return ERMA_EINVAL;
    struct queue *q = &s->path[path];
    const uint64_t now = s->now, r0 = q->bps;
    s->cfg.path_delay_ns[path] = np->delay_ns;
    s->cfg.path_rate_bps[path] = np->bps;
    s->cfg.path_loss[path] = np->loss;
    const uint64_t r1 = path_rate(&s->cfg, path);
    /* Bytes still to be sent at now go on at r1: remaining time scales by r0/r1. */
    const bool rescale = r0 != r1 && r0 != 0 && q->free_at > now;
    bool moved = false;
    for (size_t i = 0; i < s->heap_len; i++) {
        struct pkt *k = s->heap[i];
        if (k->stage != AT_EGRESS || k->path != path || k->left <= now)
            continue;
        if (rescale)
            k->left = rescale_time(k->left, now, r0, r1);
        k->time = k->left + np->delay_ns;
        moved = true;
    }
    if (rescale)
        q->free_at = rescale_time(q->free_at, now, r0, r1);
    q->bps = r1;
    if (moved)
        heapify(s);
    return ERMA_OK;
}

int erma_sim_get_path(const struct erma_sim *s, uint32_t path, struct erma_sim_path *out)
{
    if (!s || !out || path >= s->cfg.paths)
        return ERMA_EINVAL;
    *out = (struct erma_sim_path){.delay_ns = s->cfg.path_delay_ns[path],
                                  .bps = s->cfg.path_rate_bps[path],
                                  .loss = s->cfg.path_loss[path]};
    return ERMA_OK;
}

uint64_t erma_sim_path_max_bytes(const struct erma_sim *s, uint32_t path)
{
    return path < s->cfg.paths ? s->path[path].max_bytes : 0;
}

void erma_sim_set_trace(struct erma_sim *s, erma_sim_trace_fn fn, void *ctx)
{
    s->trace = fn;
    s->trace_ctx = ctx;
}

/* ---- fabric lifetime ---- */

int erma_sim_create(const char *name, const struct erma_sim_cfg *cfg, struct erma_sim **out)
{
    if (!name || !cfg || !out || strlen(name) >= sizeof registry->name || strchr(name, '/') ||
        cfg->hosts == 0 || cfg->hosts > 65535 || cfg->link_bps == 0 || cfg->paths == 0 ||
        cfg->paths > ERMA_SIM_MAX_PATHS || cfg->loss < 0 || cfg->loss > 1 ||
        cfg->reorder < 0 || cfg->reorder > 1)
        return ERMA_EINVAL;
    for (uint32_t p = 0; p < cfg->paths; p++)
        if (!valid_loss(cfg->path_loss[p]))
            return ERMA_EINVAL;
    struct erma_sim *s = calloc(1, sizeof *s);
    if (!s)
        return ERMA_ENOMEM;
    s->uplink = calloc(cfg->hosts, sizeof *s->uplink);
    s->egress = calloc(cfg->hosts, sizeof *s->egress);
    if (!s->uplink || !s->egress) {
        erma_sim_destroy(s);
        return ERMA_ENOMEM;
    }
    snprintf(s->name, sizeof s->name, "%s", name);
    s->cfg = *cfg;
    s->next_port = 49152;
    erma_rand_seed(&s->rng, cfg->seed);
    for (uint32_t h = 0; h < cfg->hosts; h++) {
        s->uplink[h].bps = cfg->link_bps;
        s->egress[h] = (struct queue){.bps = cfg->link_bps, .buffer = cfg->switch_buffer};
    }
    for (uint32_t p = ERMA_SIM_MAX_PATHS; p-- > cfg->paths;) { /* ignored: keep them 0 */
        s->cfg.path_loss[p] = 0;
        s->cfg.path_rate_bps[p] = 0;
    }
    for (uint32_t p = 0; p < cfg->paths; p++)
        s->path[p] = (struct queue){.bps = path_rate(cfg, p), .buffer = cfg->switch_buffer};
    pthread_mutex_lock(&registry_lock);
    for (struct erma_sim *o = registry; o; o = o->next) {
        if (strcmp(o->name, name) == 0) {
            pthread_mutex_unlock(&registry_lock);
            erma_sim_destroy(s);
            return ERMA_EINVAL;
        }
    }
    s->next = registry;
    registry = s;
    pthread_mutex_unlock(&registry_lock);
    *out = s;
    return ERMA_OK;
}

void erma_sim_destroy(struct erma_sim *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&registry_lock);
    for (struct erma_sim **pp = &registry; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    pthread_mutex_unlock(&registry_lock);
    if (erma_clock_source.ctx == s)
        erma_clock_set_source(NULL, NULL);
    for (size_t i = 0; i < s->ports_cap; i++)
        if (s->ports[i])
            s->ports[i]->sim = NULL; /* still open: detach */
    for (size_t i = 0; i < s->heap_len; i++)
        free(s->heap[i]);
    free(s->heap);
    free(s->ports);
    free(s->uplink);
    free(s->egress);
    free(s);
}

/* ---- the transport ---- */

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
        port_remove(p->sim, p);
    free(p->ring);
    free(p);
}

static struct erma_sim *find_fabric(const char *name)
{
    pthread_mutex_lock(&registry_lock);
    struct erma_sim *s = registry;
    while (s && strcmp(s->name, name) != 0)
        s = s->next;
    pthread_mutex_unlock(&registry_lock);
    return s;
}

static int sim_open(const char *rest, const struct erma_transport_cfg *cfg,
                    struct erma_transport **out)
{
    char name[64];
    uint32_t host, port;
    int rc = parse(rest, name, sizeof name, &host, &port);
    if (rc != ERMA_OK)
        return rc;
    struct erma_sim *s = find_fabric(name);
    if (!s || host >= s->cfg.hosts)
        return ERMA_EADDR;
    for (unsigned tries = 0; port == 0 && tries < 16384; tries++) {
        const uint16_t cand = s->next_port;
        s->next_port = s->next_port == 65535 ? 49152 : s->next_port + 1;
        if (!port_find(s, (uint16_t)host, cand))
            port = cand;
    }
    if (port == 0 || port_find(s, (uint16_t)host, (uint16_t)port))
        return ERMA_EADDR;
    struct sim_port *p = calloc(1, sizeof *p);
    if (!p || !(p->ring = calloc(cfg->rx_ring, sizeof *p->ring))) {
        free(p);
        return ERMA_ENOMEM;
    }
    p->base.ops = &erma__sim_ops;
    p->base.rx_ring = cfg->rx_ring;
    p->base.max_pkt = cfg->mtu - ERMA_IP_UDP_OVERHEAD;
    /* Unloaded RTT: a full packet out and a header back, each crossing two
     * serialising hops and two link delays, plus the slowest path twice. */
    const uint32_t big = p->base.max_pkt + s->cfg.frame_overhead;
    const uint32_t small = ERMA_HDR_SIZE + s->cfg.frame_overhead;
    uint64_t path = 0;
    for (uint32_t k = 0; k < s->cfg.paths; k++)
        path = s->cfg.path_delay_ns[k] > path ? s->cfg.path_delay_ns[k] : path;
    p->base.hints.shared_clock = true;
    p->base.hints.link_bps = s->cfg.link_bps;
    p->base.hints.frame_overhead = s->cfg.frame_overhead;
    p->base.hints.base_rtt_ns = 2 * (ser_ns(big, s->cfg.link_bps) + ser_ns(small, s->cfg.link_bps)) +
                          4 * s->cfg.link_delay_ns + 2 * path;
    p->sim = s;
    p->host = (uint16_t)host;
    p->port = (uint16_t)port;
    encode_addr(&p->base.local, p->host, p->port);
    if ((rc = port_insert(s, p)) != ERMA_OK) {
        free(p->ring);
        free(p);
        return rc;
    }
    *out = &p->base;
    return ERMA_OK;
}

static uint32_t flow_path(const struct erma_sim *s, uint16_t sh, uint16_t sp, uint16_t dh,
                          uint16_t dp)
{
    const uint64_t flow = (uint64_t)sh << 48 | (uint64_t)dh << 32 | (uint64_t)sp << 16 | dp;
    return (uint32_t)(mix64(flow) % s->cfg.paths);
}

int erma_sim_flow_path(const struct erma_sim *s, uint16_t src_host, uint16_t src_port,
                       uint16_t dst_host, uint16_t dst_port)
{
    if (!s || src_host >= s->cfg.hosts || dst_host >= s->cfg.hosts)
        return ERMA_EINVAL;
    return (int)flow_path(s, src_host, src_port, dst_host, dst_port);
}

/* Puts one packet on the fabric at the source's uplink (after the tap). */
static int send_one(struct erma_sim *s, uint16_t sh, uint16_t sp, uint16_t dh, uint16_t dp,
                    const struct erma_tx_pkt *t)
{
    const uint32_t len = erma_tx_pkt_len(t);
    struct pkt *p = malloc(sizeof *p + len);
    if (!p)
        return ERMA_ENOMEM;
    *p = (struct pkt){.src_host = sh, .src_port = sp, .dst_host = dh, .dst_port = dp,
                      .len = len};
    erma_tx_pkt_copy(p->data, t);
    p->path = (uint8_t)flow_path(s, sh, sp, dh, dp);
    if (s->tap) {
        const struct erma_sim_event ev = {s->now, ERMA_SIM_DELIVER, sh, sp, dh, dp, len,
                                          p->path};
        if (!s->tap(s->tap_ctx, &ev, p->data)) {
            free(p);
            return ERMA_OK;
        }
    }
    s->stats.sent++;
    s->stats.path_pkts[p->path]++;
    const uint64_t at = queue_admit(&s->uplink[sh], s->now, len + s->cfg.frame_overhead);
    schedule(s, p, AT_PATH, at + s->cfg.link_delay_ns);
    return ERMA_OK;
}

int erma_sim_inject(struct erma_sim *s, uint16_t src_host, uint16_t src_port,
                    uint16_t dst_host, uint16_t dst_port, const void *data, uint32_t len)
{
    if (!s || !data || len == 0 || src_host >= s->cfg.hosts || dst_host >= s->cfg.hosts)
        return ERMA_EINVAL;
    const struct erma_tx_pkt t = {.hdr = data, .hdr_len = len};
    return send_one(s, src_host, src_port, dst_host, dst_port, &t);
}

void erma_sim_set_tap(struct erma_sim *s, erma_sim_tap_fn fn, void *ctx)
{
    s->tap = fn;
    s->tap_ctx = ctx;
}

uint64_t erma_sim_uplink_max_bytes(const struct erma_sim *s, uint32_t host)
{
    return host < s->cfg.hosts ? s->uplink[host].max_bytes : 0;
}

uint64_t erma_sim_uplink_bytes(const struct erma_sim *s, uint32_t host)
{
    return host < s->cfg.hosts ? backlog_bytes(&s->uplink[host], s->now) : 0;
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
        if (send_one(s, port->host, port->port, dh, dp, &pkts[i]) != ERMA_OK)
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
        pkts[n].rx_ns = erma_clock_source.fn == sim_clock && erma_clock_source.ctx == p->sim
                            ? k->time
                            : 0;
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
