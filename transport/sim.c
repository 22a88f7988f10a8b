/* The simulated fabric (sim.h): hosts, links, paths and virtual time; its
 * transport, the ports endpoints open on it, is sim_port.c. */
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
#include "transport/sim_fabric.h"

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

struct sim_port *erma__sim_port_find(const struct erma_sim *s, uint16_t host, uint16_t port)
{
    return s->ports_cap ? s->ports[port_slot(s, host, port)] : NULL;
}

int erma__sim_port_insert(struct erma_sim *s, struct sim_port *p)
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

void erma__sim_port_remove(struct erma_sim *s, struct sim_port *p)
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
    struct sim_port *port = erma__sim_port_find(s, p->dst_host, p->dst_port);
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

/* Unloaded RTT: a full packet out and a header back, each crossing two
 * serialising hops and two link delays, plus the slowest path twice. */
uint64_t erma__sim_base_rtt(const struct erma_sim *s, uint32_t max_pkt)
{
    const uint32_t big = max_pkt + s->cfg.frame_overhead;
    const uint32_t small = ERMA_HDR_SIZE + s->cfg.frame_overhead;
    uint64_t path = 0;
    for (uint32_t k = 0; k < s->cfg.paths; k++)
        path = s->cfg.path_delay_ns[k] > path ? s->cfg.path_delay_ns[k] : path;
    return 2 * (ser_ns(big, s->cfg.link_bps) + ser_ns(small, s->cfg.link_bps)) +
           4 * s->cfg.link_delay_ns + 2 * path;
}

bool erma__sim_is_clock(const struct erma_sim *s)
{
    return erma_clock_source.fn == sim_clock && erma_clock_source.ctx == s;
}

struct erma_sim *erma__sim_find(const char *name)
{
    pthread_mutex_lock(&registry_lock);
    struct erma_sim *s = registry;
    while (s && strcmp(s->name, name) != 0)
        s = s->next;
    pthread_mutex_unlock(&registry_lock);
    return s;
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

int erma__sim_send(struct erma_sim *s, uint16_t sh, uint16_t sp, uint16_t dh, uint16_t dp,
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
    return erma__sim_send(s, src_host, src_port, dst_host, dst_port, &t);
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
