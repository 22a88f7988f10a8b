/* rma/engine.c - the one-sided engine: creation, the endpoint hook, the
 * packet codec and the TX batch shared by the target and initiator sides. */
#include <stdlib.h>
#include <string.h>

#include "erma/clock.h"
#include "erma/rpc.h"
#include "internal.h"

/* ---- op header codec ---- */

void erma_rma_ophdr_encode(const struct rma_ophdr *o, uint8_t *p)
{
    p[0] = o->type;
    p[1] = o->status;
    p[2] = o->flags;
    p[3] = o->pkt_idx;
    erma_put_le(p + 4, o->slot, 2);
    erma_put_le(p + 6, o->pkt_off, 2);
    erma_put_le(p + 8, o->region, 4);
    erma_put_le(p + 12, o->key_gen, 4);
    erma_put_le(p + 16, o->offset, 8);
    erma_put_le(p + 24, o->identity, 8);
    erma_put_le(p + 32, o->init_ctr, 8);
    erma_put_le(p + 40, o->len, 4);
    erma_put_le(p + 44, o->sol, 4);
    erma_put_le(p + 48, o->token, 8);
    erma_put_le(p + 56, o->deadline, 8);
    erma_put_le(p + 64, o->nonce_ctr, 8);
}

void erma_rma_ophdr_decode(const uint8_t *p, struct rma_ophdr *o)
{
    o->type = p[0];
    o->status = p[1];
    o->flags = p[2];
    o->pkt_idx = p[3];
    o->slot = (uint16_t)erma_get_le(p + 4, 2);
    o->pkt_off = (uint16_t)erma_get_le(p + 6, 2);
    o->region = (uint32_t)erma_get_le(p + 8, 4);
    o->key_gen = (uint32_t)erma_get_le(p + 12, 4);
    o->offset = erma_get_le(p + 16, 8);
    o->identity = erma_get_le(p + 24, 8);
    o->init_ctr = erma_get_le(p + 32, 8);
    o->len = (uint32_t)erma_get_le(p + 40, 4);
    o->sol = (uint32_t)erma_get_le(p + 44, 4);
    o->token = erma_get_le(p + 48, 8);
    o->deadline = erma_get_le(p + 56, 8);
    o->nonce_ctr = erma_get_le(p + 64, 8);
}

/* ---- slot lists (queues by priority, in flight) linked by index ---- */

void erma_list_push(struct list *l, struct slot *slots, int32_t i)
{
    slots[i].prev = l->tail;
    slots[i].next = -1;
    if (l->tail >= 0)
        slots[l->tail].next = i;
    else
        l->head = i;
    l->tail = i;
}

void erma_list_remove(struct list *l, struct slot *slots, int32_t i)
{
    struct slot *e = &slots[i];
    if (e->prev >= 0)
        slots[e->prev].next = e->next;
    else
        l->head = e->next;
    if (e->next >= 0)
        slots[e->next].prev = e->prev;
    else
        l->tail = e->prev;
    e->prev = e->next = -1;
}

/* ---- TX batch ---- */

uint8_t *erma_rma_tx_buf(struct erma_rma *rma, const struct erma_addr *dst)
{
    if (rma->ntx == ERMA_MAX_BURST)
        erma_rma_tx_flush(rma);
    rma->txdst[rma->ntx] = *dst; /* dst may point into the RX buffer or a table */
    rma->tx[rma->ntx] = (struct erma_tx_pkt){.dst = &rma->txdst[rma->ntx]};
    return rma->txbuf + (size_t)rma->ntx * rma->tr->max_pkt;
}

void erma_rma_tx_commit(struct erma_rma *rma, uint32_t len)
{
    struct erma_tx_pkt *t = &rma->tx[rma->ntx];
    t->hdr = rma->txbuf + (size_t)rma->ntx * rma->tr->max_pkt;
    t->hdr_len = len;
    rma->ntx++;
}

void erma_rma_tx_flush(struct erma_rma *rma)
{
    unsigned sent = 0;
    /* Kernel and NIC queues take a burst at once; a short count means a full
     * queue: retry a bounded number of times, then drop (the ops time out). */
    for (int tries = 0; sent < rma->ntx && tries < 64; tries++) {
        const int n = erma_tx_burst(rma->tr, rma->tx + sent, rma->ntx - sent);
        if (n < 0)
            break;
        sent += (unsigned)n;
    }
    rma->ntx = 0;
}

uint32_t erma_rma_build(struct erma_rma *rma, uint8_t *pkt, struct rma_ophdr *h,
                        const uint8_t *kd, uint8_t cipher, uint8_t dir, const void *m,
                        uint32_t plen)
{
    const struct erma_hdr eh = {.proto = ERMA_PROTO_RMA};
    h->nonce_ctr = ++rma->ctr;
    erma_hdr_encode(&eh, pkt);
    erma_rma_ophdr_encode(h, pkt + ERMA_HDR_SIZE);
    if (kd)
        erma_rma_seal_as(kd, cipher, dir, h->nonce_ctr, pkt, m, plen);
    else /* unsealed error: no payload, zero tag */
        memset(pkt + ERMA_HDR_SIZE + RMA_OPHDR, 0, RMA_TAG);
    return RMA_OVERHEAD + plen;
}

/* ---- the endpoint hook ---- */

static bool is_request(uint8_t t)
{
    return t == RMA_READ_REQ || t == RMA_WRITE_REQ || t == RMA_REKEY_REQ || t == RMA_DATA;
}

static void hook_rx(void *ctx, const struct erma_hdr *eh, const struct erma_rx_pkt *pkt)
{
    struct erma_rma *rma = ctx;
    (void)eh;
    struct rma_ophdr h;
    if (pkt->len < RMA_OVERHEAD || pkt->len > rma->tr->max_pkt) {
        rma->stats.rx_bad++;
        return;
    }
    erma_rma_ophdr_decode(pkt->data + ERMA_HDR_SIZE, &h);
    if (h.type == 0 || h.type > RMA_TYPE_MAX || h.len == 0 || h.len > ERMA_RMA_MAX_OP) {
        rma->stats.rx_bad++;
        return;
    }
    rma_clock(rma, erma_now_ns());
    rma->rx_pass++;
    if (is_request(h.type))
        erma_serve_rx(rma, &h, pkt);
    else
        erma_portal_rx(rma, &h, pkt);
}

static void hook_flush(void *ctx)
{
    struct erma_rma *rma = ctx;
    if (rma->ntx)
        erma_rma_tx_flush(rma);
}

static bool is_sim(const struct erma_transport *tr)
{
    return tr->ops == &erma_sim_ops;
}

/* Wall clock against the engine's (TSC) clock, again now and then: NTP
 * slews the one and not the other. The sim's clock is everyone's. */
static void wire_sync(struct erma_rma *rma)
{
    if (is_sim(rma->tr) || rma->now < rma->wire_sync_ns)
        return;
    const uint64_t t = erma_now_ns(); /* rma->now may be a pass's stale reading */
    rma->wire_off = (int64_t)(erma_rma_wallclock_ns() - t);
    rma->wire_sync_ns = t + 100000000;
}

static int hook_poll(void *ctx, uint64_t now)
{
    struct erma_rma *rma = ctx;
    rma_clock(rma, now);
    wire_sync(rma);
    int work = erma_serve_poll(rma);
    work += erma_exec_poll(rma);
    work += erma_portal_poll(rma);
    erma_rma_tx_flush(rma);
    return work;
}

static uint64_t hook_next_timer(void *ctx)
{
    const struct erma_rma *rma = ctx;
    uint64_t t = erma_serve_next_timer(rma);
    const uint64_t p = erma_portal_next_timer(rma), e = erma_exec_next_timer(rma);
    t = p < t ? p : t;
    return e < t ? e : t;
}

/* ---- lifetime ---- */

static bool is_udp(const struct erma_transport *tr)
{
    return tr->ops == &erma_udp_ops;
}

static void cfg_defaults(struct erma_rma_cfg *c, const struct erma_transport *tr)
{
    const uint64_t base = tr->base_rtt_ns ? tr->base_rtt_ns : 10000;
    if (!c->identity)
        c->identity = erma_rma_wallclock_ns() ^ ((uint64_t)(uintptr_t)c << 20) ^ (uint64_t)rand();
    c->slots = c->slots ? c->slots : 256;
    c->inbound_window = c->inbound_window ? c->inbound_window : 1u << 20;
    if (!c->dispatch_timeout_ns) /* kernel UDP: a loop pass alone can take 10 us */
        c->dispatch_timeout_ns = is_udp(tr) ? 1000000 : 10000;
    /* kernel UDP: a process may stall for milliseconds, whatever the RTT */
    if (!c->op_timeout_min_ns)
        c->op_timeout_min_ns = is_udp(tr) ? 10000000 : 5 * base;
    if (!c->op_timeout_max_ns) {
        const uint64_t cap = is_udp(tr) ? 100000000 : 200 * base;
        c->op_timeout_max_ns = cap > c->op_timeout_min_ns ? cap : c->op_timeout_min_ns;
    }
    /* the margin eats into a WRITE's time for its data: a quarter at most */
    const uint64_t shortest = c->op_timeout_ns ? c->op_timeout_ns : c->op_timeout_min_ns;
    if (!c->clock_skew_ns && !is_sim(tr))
        c->clock_skew_ns = shortest / 4 < 1000000 ? shortest / 4 : 1000000;
    c->max_regions = c->max_regions ? c->max_regions : 1024;
    c->serve_batch = c->serve_batch ? c->serve_batch : 16;
    c->nack_threshold = c->nack_threshold ? c->nack_threshold : 256;
    c->solicits = c->solicits ? c->solicits : 64;
    c->solicit_window = c->solicit_window ? c->solicit_window : 1u << 20;
    c->transfers = c->transfers ? c->transfers : 64;
}

static bool cfg_valid(const struct erma_rma_cfg *c)
{
    return c->slots <= 65535 && c->inbound_window >= ERMA_RMA_MAX_OP &&
           c->max_regions <= 65535 && c->solicits <= 65535 &&
           c->solicit_window >= ERMA_RMA_MAX_OP && c->transfers <= 65535 &&
           c->nack_threshold <= (1u << 20) && c->op_timeout_min_ns <= c->op_timeout_max_ns &&
           c->op_timeout_max_ns <= RMA_MAX_TTL_NS && c->op_timeout_ns <= RMA_MAX_TTL_NS &&
           c->clock_skew_ns <= RMA_MAX_TTL_NS;
}

int erma_rma_create(struct erma_rpc *rpc, const struct erma_rma_cfg *cfg,
                    struct erma_rma **out)
{
    if (!rpc || !out)
        return ERMA_EINVAL;
    int rc = erma_rma_crypto_init();
    if (rc != ERMA_OK)
        return rc;
    struct erma_rma *rma = calloc(1, sizeof *rma);
    if (!rma)
        return ERMA_ENOMEM;
    rma->rpc = rpc;
    rma->tr = erma_rpc_transport(rpc);
    rma->cfg = cfg ? *cfg : (struct erma_rma_cfg){0};
    cfg_defaults(&rma->cfg, rma->tr);
    if (!cfg_valid(&rma->cfg) || rma->tr->max_pkt < RMA_OVERHEAD + 128) {
        free(rma);
        return ERMA_EINVAL;
    }
    rma->pkt_data = rma->tr->max_pkt - RMA_OVERHEAD;
    /* Nonces: from the wall clock in ns, one per packet sent, so that an
     * engine restarted with the same identity and address (the same Kd)
     * starts past every nonce its predecessor used. */
    rma->ctr = erma_rma_wallclock_ns();
    rma->aes = erma_rma_aes_available() && !rma->cfg.no_aes;
    rma->now = erma_now_ns();
    rma->last_poll_ns = rma->now;
    wire_sync(rma);
    rma->txbuf = malloc((size_t)ERMA_MAX_BURST * rma->tr->max_pkt);
    rc = rma->txbuf ? erma_serve_init(rma) : ERMA_ENOMEM;
    if (rc == ERMA_OK)
        rc = erma_portal_init(rma);
    if (rc == ERMA_OK)
        rc = erma_exec_init(rma);
    const struct erma_proto_hook hook = {hook_rx, hook_poll, hook_next_timer, rma, hook_flush};
    if (rc == ERMA_OK)
        rc = erma_rpc_attach(rpc, ERMA_PROTO_RMA, &hook);
    if (rc != ERMA_OK) {
        erma_exec_fini(rma);
        erma_portal_fini(rma);
        erma_serve_fini(rma);
        free(rma->txbuf);
        free(rma);
        return rc;
    }
    *out = rma;
    return ERMA_OK;
}

void erma_rma_destroy(struct erma_rma *rma)
{
    if (!rma)
        return;
    erma_rma_tx_flush(rma);
    erma_rpc_attach(rma->rpc, ERMA_PROTO_RMA, NULL);
    erma_exec_fini(rma);
    erma_portal_fini(rma);
    erma_serve_fini(rma);
    free(rma->peers);
    free(rma->txbuf);
    free(rma);
}

uint64_t erma_rma_identity(const struct erma_rma *rma)
{
    return rma->cfg.identity;
}

void erma_rma_get_stats(const struct erma_rma *rma, struct erma_rma_stats *out)
{
    *out = rma->stats;
}

int erma_rma_uri(const struct erma_rma *rma, char *out, size_t len)
{
    return rma && out ? erma_rpc_uri(rma->rpc, out, len) : ERMA_EINVAL;
}

int erma_rma_peer(struct erma_rma *rma, const char *uri, uint8_t tid)
{
    char ep[256];
    struct erma_addr addr;
    if (!rma || !uri)
        return ERMA_EINVAL;
    int rc = erma_endpoint_uri(uri, tid, ep, sizeof ep);
    if (rc == ERMA_OK)
        rc = erma_transport_resolve(rma->tr, ep, &addr);
    if (rc != ERMA_OK)
        return rc;
    for (uint32_t i = 0; i < rma->npeers; i++)
        if (erma_addr_eq(&rma->peers[i].addr, &addr))
            return (int)i;
    if (rma->npeers == rma->peers_cap) {
        const uint32_t cap = rma->peers_cap ? 2 * rma->peers_cap : 16;
        if (cap > 65536)
            return ERMA_ENOSLOTS;
        struct peer *p = realloc(rma->peers, cap * sizeof *p);
        if (!p)
            return ERMA_ENOMEM;
        rma->peers = p;
        rma->peers_cap = cap;
    }
    rma->peers[rma->npeers] = (struct peer){.addr = addr};
    return (int)rma->npeers++;
}
