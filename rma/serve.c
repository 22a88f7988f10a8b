/* rma/serve.c - the target's serving engine ("soft NIC"): requests are
 * queued from RX, served by the event loop in order, and answered without
 * any application code. WRITE and REKEY data is solicited from the
 * initiator and accepted only for a live solicitation of ours. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int erma_serve_init(struct erma_rma *rma)
{
    const struct erma_rma_cfg *c = &rma->cfg;
    rma->regions = calloc(c->max_regions, sizeof *rma->regions);
    rma->queue = malloc((size_t)c->nack_threshold * sizeof *rma->queue);
    rma->sol = calloc(c->solicits, sizeof *rma->sol);
    if (!rma->regions || !rma->queue || !rma->sol)
        return ERMA_ENOMEM;
    rma->sol_free = -1;
    for (int32_t i = (int32_t)c->solicits - 1; i >= 0; i--) {
        rma->sol[i].next_free = rma->sol_free;
        rma->sol_free = i;
    }
    rma->sol_expiry_ns = UINT64_MAX;
    return ERMA_OK;
}

void erma_serve_fini(struct erma_rma *rma)
{
    if (rma->regions)
        for (uint32_t i = 0; i < rma->cfg.max_regions; i++)
            if (rma->regions[i].id)
                erma_region_deregister(rma, rma->regions[i].id);
    free(rma->regions);
    free(rma->queue);
    free(rma->sol);
}

/* ---- answers ---- */

static struct rma_ophdr answer_of(const struct rma_ophdr *req, uint8_t type)
{
    struct rma_ophdr a = *req;
    a.type = type;
    a.status = 0;
    a.flags = 0;
    a.pkt_idx = 0;
    a.pkt_off = 0;
    a.token = 0;
    return a;
}

/* kd NULL: unsealed (only NACK, AUTH_FAILED and NO_SUCH_REGION). */
static void send_status(struct erma_rma *rma, const struct erma_addr *to,
                        const struct rma_ophdr *req, int status, const uint8_t *kd)
{
    struct rma_ophdr a = answer_of(req, status ? RMA_ERROR : RMA_DONE);
    a.status = (uint8_t)-status;
    a.flags = kd ? 0 : RMA_FLAG_PLAIN;
    uint8_t *pkt = erma_rma_tx_buf(rma, to);
    erma_rma_tx_commit(rma, erma_rma_build(rma, pkt, &a, kd, 1, NULL, 0));
    if (status == ERMA_ENACK)
        rma->stats.nacks_sent++;
}

static void send_read(struct erma_rma *rma, const struct erma_addr *to,
                      const struct rma_ophdr *req, const uint8_t *src, const uint8_t *kd)
{
    struct rma_ophdr a = answer_of(req, RMA_READ_RESP);
    for (uint32_t off = 0; off < req->len; off += rma->pkt_data, a.pkt_idx++) {
        const uint32_t n = req->len - off < rma->pkt_data ? req->len - off : rma->pkt_data;
        a.pkt_off = (uint16_t)off;
        uint8_t *pkt = erma_rma_tx_buf(rma, to);
        erma_rma_tx_commit(rma, erma_rma_build(rma, pkt, &a, kd, 1, src + off, n));
    }
}

/* ---- solicitations ---- */

static struct solicit *sol_find(struct erma_rma *rma, uint32_t token)
{
    const uint32_t i = (token & 0xffff) - 1;
    if ((token & 0xffff) == 0 || i >= rma->cfg.solicits || rma->sol[i].token != token)
        return NULL;
    return &rma->sol[i];
}

static void sol_free(struct erma_rma *rma, struct solicit *s)
{
    s->token = 0;
    rma->sol_bytes -= s->req.len;
    rma->sol_used--;
    s->next_free = rma->sol_free;
    rma->sol_free = (int32_t)(s - rma->sol);
}

static void solicit(struct erma_rma *rma, const struct erma_addr *to,
                    const struct rma_ophdr *req, const uint8_t *kd)
{
    if (rma->sol_free < 0 || rma->sol_bytes + req->len > rma->cfg.solicit_window) {
        send_status(rma, to, req, ERMA_ENACK, NULL);
        return;
    }
    struct solicit *s = &rma->sol[rma->sol_free];
    rma->sol_free = s->next_free;
    s->gen++;
    s->token = (uint32_t)s->gen << 16 | (uint32_t)(s - rma->sol + 1);
    s->op = req->type == RMA_WRITE_REQ ? ERMA_RMA_WRITE : ERMA_RMA_REKEY;
    s->src = *to;
    s->req = *req;
    memcpy(s->kd, kd, sizeof s->kd);
    s->got = s->bytes = 0;
    s->deadline_ns = rma->now + rma->cfg.op_timeout_ns;
    if (s->deadline_ns < rma->sol_expiry_ns)
        rma->sol_expiry_ns = s->deadline_ns;
    rma->sol_bytes += req->len;
    rma->sol_used++;
    struct rma_ophdr a = answer_of(req, RMA_SOLICIT);
    a.token = s->token;
    uint8_t *pkt = erma_rma_tx_buf(rma, to);
    erma_rma_tx_commit(rma, erma_rma_build(rma, pkt, &a, kd, 1, NULL, 0));
}

static void sol_expire(struct erma_rma *rma)
{
    uint64_t next = UINT64_MAX;
    for (uint32_t i = 0; i < rma->cfg.solicits && rma->sol_used; i++) {
        struct solicit *s = &rma->sol[i];
        if (!s->token)
            continue;
        if (s->deadline_ns <= rma->now) {
            rma->stats.solicit_expired++;
            sol_free(rma, s);
        } else if (s->deadline_ns < next) {
            next = s->deadline_ns;
        }
    }
    rma->sol_expiry_ns = next;
}

/* ---- requests ---- */

static bool req_perm_ok(const struct region *r, uint8_t type)
{
    const unsigned need = type == RMA_READ_REQ    ? ERMA_RMA_PERM_READ
                          : type == RMA_WRITE_REQ ? ERMA_RMA_PERM_WRITE
                                                  : ERMA_RMA_PERM_REKEY;
    return (r->perms & need) != 0;
}

static void serve_one(struct erma_rma *rma, const struct queued_req *q)
{
    struct rma_ophdr h;
    erma_rma_ophdr_decode(q->pkt + ERMA_HDR_SIZE, &h);
    rma->stats.served++;
    struct region *r = erma_region_find(rma, h.region);
    if (!r) {
        send_status(rma, &q->src, &h, ERMA_ENOREGION, NULL);
        return;
    }
    const uint8_t *kr = erma_region_key(r, h.key_gen, rma->now);
    const uint8_t *kd = kr ? erma_region_kd(rma, r, kr, h.key_gen, h.identity) : NULL;
    if (!kr || erma_rma_open(kd, 0, h.nonce_ctr, q->pkt, sizeof q->pkt, rma->scratch) != 0) {
        rma->stats.auth_failed++;
        send_status(rma, &q->src, &h, ERMA_EAUTH, NULL);
        return;
    }
    const bool rekey = h.type == RMA_REKEY_REQ;
    if (rekey ? h.len != RMA_REKEY_DATA : h.offset > r->len || h.len > r->len - h.offset)
        send_status(rma, &q->src, &h, rekey ? ERMA_EINVAL : ERMA_EBOUNDS, kd);
    else if (!req_perm_ok(r, h.type))
        send_status(rma, &q->src, &h, ERMA_EPERM, kd);
    else if (h.type == RMA_READ_REQ)
        send_read(rma, &q->src, &h, r->addr + h.offset, kd);
    else
        solicit(rma, &q->src, &h, kd);
}

/* Solicited data: only for a live solicitation, from its initiator, for
 * its op, each packet once. */
static void data_rx(struct erma_rma *rma, const struct rma_ophdr *h,
                    const struct erma_rx_pkt *pkt)
{
    struct solicit *s = sol_find(rma, h->token);
    const uint32_t plen = pkt->len - RMA_OVERHEAD;
    if (!s || !erma_addr_eq(&s->src, &pkt->src) || h->identity != s->req.identity ||
        h->init_ctr != s->req.init_ctr || h->region != s->req.region ||
        h->offset != s->req.offset || h->len != s->req.len || h->key_gen != s->req.key_gen ||
        h->pkt_idx >= 32 || (s->got >> h->pkt_idx & 1) || plen == 0 ||
        h->pkt_off + plen > s->req.len ||
        erma_rma_open(s->kd, 0, h->nonce_ctr, pkt->data, pkt->len, rma->scratch) != 0) {
        rma->stats.data_rejected++;
        return;
    }
    struct region *r = erma_region_find(rma, s->req.region);
    if (!r) { /* deregistered since */
        send_status(rma, &s->src, &s->req, ERMA_ENOREGION, s->kd);
        sol_free(rma, s);
        return;
    }
    if (s->op == ERMA_RMA_WRITE)
        memcpy(r->addr + s->req.offset + h->pkt_off, rma->scratch, plen);
    else
        memcpy(s->rekey + h->pkt_off, rma->scratch, plen);
    s->got |= 1u << h->pkt_idx;
    s->bytes += plen;
    if (s->bytes < s->req.len)
        return;
    if (s->op == ERMA_RMA_REKEY)
        erma_region_install(r, s->rekey, erma_get_le(s->rekey + ERMA_RMA_KEY_BYTES, 8), rma->now);
    send_status(rma, &s->src, &s->req, ERMA_OK, s->kd);
    sol_free(rma, s);
}

void erma_serve_rx(struct erma_rma *rma, const struct rma_ophdr *h, const struct erma_rx_pkt *pkt)
{
    if (h->type == RMA_DATA) {
        data_rx(rma, h, pkt);
        return;
    }
    if (pkt->len != RMA_OVERHEAD) { /* requests carry no payload */
        rma->stats.rx_bad++;
        return;
    }
    if (rma->q_len >= rma->cfg.nack_threshold) {
        send_status(rma, &pkt->src, h, ERMA_ENACK, NULL);
        return;
    }
    struct queued_req *q = &rma->queue[(rma->q_head + rma->q_len) % rma->cfg.nack_threshold];
    q->src = pkt->src;
    memcpy(q->pkt, pkt->data, RMA_OVERHEAD);
    if (++rma->q_len > rma->stats.max_queue)
        rma->stats.max_queue = rma->q_len;
}

int erma_serve_poll(struct erma_rma *rma)
{
    int work = 0;
    for (; rma->q_len && work < (int)rma->cfg.serve_batch && rma->now >= rma->busy_until_ns;
         work++) {
        if (rma->cfg.serve_ns)
            rma->busy_until_ns = rma->now + rma->cfg.serve_ns;
        serve_one(rma, &rma->queue[rma->q_head]);
        rma->q_head = (rma->q_head + 1) % rma->cfg.nack_threshold;
        rma->q_len--;
    }
    if (rma->now >= rma->sol_expiry_ns)
        sol_expire(rma);
    return work;
}

uint64_t erma_serve_next_timer(const struct erma_rma *rma)
{
    if (rma->q_len)
        return rma->busy_until_ns > rma->now ? rma->busy_until_ns : rma->now;
    return rma->sol_expiry_ns;
}
