/* rma/portal.c - the initiator: command slots, the local queue by priority,
 * issue under the solicitation window, answers, timeouts and completions. */
#include <stdlib.h>
#include <string.h>

#include "erma/clock.h"
#include "internal.h"

int erma_portal_init(struct erma_rma *rma)
{
    const uint32_t n = rma->cfg.slots;
    rma->slots = calloc(n, sizeof *rma->slots);
    rma->cq_cap = n + rma->cfg.transfers;
    rma->cq = calloc(rma->cq_cap, sizeof *rma->cq);
    if (!rma->slots || !rma->cq)
        return ERMA_ENOMEM;
    rma->free_slots = -1;
    for (int32_t i = (int32_t)n - 1; i >= 0; i--) {
        rma->slots[i].next = rma->free_slots;
        rma->free_slots = i;
    }
    for (int p = 0; p < ERMA_RMA_PRIORITIES; p++)
        rma->queued[p] = (struct list){-1, -1};
    rma->inflight = (struct list){-1, -1};
    return ERMA_OK;
}

void erma_portal_fini(struct erma_rma *rma)
{
    free(rma->slots);
    free(rma->cq);
}

static void slot_free(struct erma_rma *rma, struct slot *s)
{
    s->state = SLOT_FREE;
    s->next = rma->free_slots;
    rma->free_slots = (int32_t)(s - rma->slots);
    rma->exec_wake_ns = 0; /* a transfer may have waited for a slot */
}

void erma_cq_push(struct erma_rma *rma, const struct erma_rma_completion *c)
{
    /* cannot overflow: a slot or transfer is reused only after its poll */
    rma->cq[(rma->cq_head + rma->cq_len++) % rma->cq_cap] = *c;
}

static void finish(struct erma_rma *rma, struct slot *s, int status)
{
    const int32_t i = (int32_t)(s - rma->slots);
    erma_list_remove(s->state == SLOT_QUEUED ? &rma->queued[s->prio] : &rma->inflight, rma->slots, i);
    if (s->op == ERMA_RMA_READ && s->state != SLOT_QUEUED) {
        rma->inbound -= s->len;
        rma->exec_wake_ns = 0; /* the inbound window opened */
    } else if (s->op == ERMA_RMA_READ)
        rma->queued_in -= s->len;
    if (s->state == SLOT_QUEUED)
        s->issue_ns = rma->now;
    s->status = status;
    rma->stats.completed++;
    if (s->internal) {
        erma_exec_complete(rma, s);
        slot_free(rma, s);
        return;
    }
    s->state = SLOT_DONE;
    const struct erma_rma_completion c = {.tag = s->tag, .status = status, .id = (uint32_t)i,
                                          .issue_delay_ns = s->issue_ns - s->submit_ns,
                                          .total_delay_ns = rma->now - s->submit_ns};
    erma_cq_push(rma, &c);
}

int erma_portal_submit(struct erma_rma *rma, const struct erma_rma_cmd *c, bool internal)
{
    if (!rma || !c || c->peer < 0 || (uint32_t)c->peer >= rma->npeers || !c->local ||
        c->priority >= ERMA_RMA_PRIORITIES ||
        (c->op != ERMA_RMA_READ && c->op != ERMA_RMA_WRITE && c->op != ERMA_RMA_REKEY) ||
        (c->op != ERMA_RMA_REKEY && c->len == 0))
        return ERMA_EINVAL;
    if (c->op != ERMA_RMA_REKEY && c->len > ERMA_RMA_MAX_OP)
        return ERMA_E2BIG;
    if (rma->free_slots < 0)
        return ERMA_ENOSLOTS;
    const int32_t i = rma->free_slots;
    struct slot *s = &rma->slots[i];
    rma->free_slots = s->next;
    *s = (struct slot){.state = SLOT_QUEUED, .op = (uint8_t)c->op, .prio = c->priority,
                       .internal = internal, .peer = c->peer, .rkey = c->rkey,
                       .offset = c->offset, .local = c->local,
                       .len = c->op == ERMA_RMA_REKEY ? RMA_REKEY_DATA : c->len,
                       .grace_ns = c->grace_ns, .tag = c->tag,
                       .submit_ns = rma_clock(rma, erma_now_ns())};
    erma_list_push(&rma->queued[c->priority], rma->slots, i);
    if (s->op == ERMA_RMA_READ)
        rma->queued_in += s->len;
    rma->stats.submitted++;
    /* Into the TX batch now: the next loop pass sends it before its RX burst. */
    erma_portal_issue(rma, 0);
    return i;
}

int erma_rma_submit(struct erma_rma *rma, const struct erma_rma_cmd *cmd)
{
    return erma_portal_submit(rma, cmd, false);
}

int erma_rma_poll(struct erma_rma *rma, struct erma_rma_completion *out, int max)
{
    if (!rma || (!out && max > 0))
        return ERMA_EINVAL;
    int n = 0;
    for (; n < max && rma->cq_len; n++) {
        out[n] = rma->cq[rma->cq_head];
        rma->cq_head = (rma->cq_head + 1) % rma->cq_cap;
        rma->cq_len--;
        if (out[n].transfer)
            rma->xfers[out[n].id].state = XFER_FREE;
        else
            slot_free(rma, &rma->slots[out[n].id]);
    }
    return n;
}

/* ---- issue ---- */

static struct rma_ophdr op_header(const struct erma_rma *rma, const struct slot *s, uint8_t type)
{
    return (struct rma_ophdr){.type = type, .slot = (uint16_t)(s - rma->slots),
                              .region = s->rkey.region, .key_gen = s->rkey.key_gen,
                              .offset = s->offset, .identity = rma->cfg.identity,
                              .init_ctr = s->init_ctr, .len = s->len};
}

static void issue(struct erma_rma *rma, struct slot *s)
{
    static const uint8_t req_type[] = {
        [ERMA_RMA_READ] = RMA_READ_REQ, [ERMA_RMA_WRITE] = RMA_WRITE_REQ,
        [ERMA_RMA_REKEY] = RMA_REKEY_REQ};
    const int32_t i = (int32_t)(s - rma->slots);
    erma_list_remove(&rma->queued[s->prio], rma->slots, i);
    s->init_ctr = rma->ctr + 1; /* the request's own nonce counter */
    struct rma_ophdr h = op_header(rma, s, req_type[s->op]);
    uint8_t *pkt = erma_rma_tx_buf(rma, &rma->peers[s->peer].addr);
    erma_rma_tx_commit(rma, erma_rma_build(rma, pkt, &h, s->rkey.kd, 0, NULL, 0));
    s->state = SLOT_ISSUED;
    s->issue_ns = rma->now;
    if (s->op == ERMA_RMA_READ) {
        rma->inbound += s->len;
        rma->queued_in -= s->len;
    }
    erma_list_push(&rma->inflight, rma->slots, i);
    rma->stats.issued++;
}

static bool can_issue(const struct erma_rma *rma, const struct slot *s)
{
    return s->op != ERMA_RMA_READ || rma->inbound + s->len <= rma->cfg.inbound_window;
}

/* Issues queued ops in priority order; the first op the window cannot take
 * blocks the rest, so large reads are not starved by small ones. Returns
 * work + the ops issued, stopping at 2 bursts of work. */
int erma_portal_issue(struct erma_rma *rma, int work)
{
    for (int p = 0; p < ERMA_RMA_PRIORITIES; p++)
        for (int32_t h; (h = rma->queued[p].head) >= 0 && work < 2 * ERMA_MAX_BURST; work++) {
            if (!can_issue(rma, &rma->slots[h]))
                return work;
            issue(rma, &rma->slots[h]);
        }
    return work;
}

int erma_portal_poll(struct erma_rma *rma)
{
    int work = 0;
    const uint64_t now = rma->now;
    for (int p = 0; p < ERMA_RMA_PRIORITIES; p++)
        for (int32_t h; (h = rma->queued[p].head) >= 0 &&
                        now - rma->slots[h].submit_ns >= rma->cfg.dispatch_timeout_ns;
             work++)
            finish(rma, &rma->slots[h], ERMA_EDISPATCH);
    work = erma_portal_issue(rma, work);
    for (int32_t h; (h = rma->inflight.head) >= 0 &&
                    now - rma->slots[h].issue_ns >= rma->cfg.op_timeout_ns;
         work++)
        finish(rma, &rma->slots[h], ERMA_ETIMEDOUT);
    return work;
}

uint64_t erma_portal_next_timer(const struct erma_rma *rma)
{
    uint64_t t = UINT64_MAX;
    for (int p = 0; p < ERMA_RMA_PRIORITIES; p++) {
        const int32_t h = rma->queued[p].head;
        if (h < 0)
            continue;
        if (can_issue(rma, &rma->slots[h]))
            return rma->now;
        const uint64_t d = rma->slots[h].submit_ns + rma->cfg.dispatch_timeout_ns;
        t = d < t ? d : t;
    }
    const int32_t h = rma->inflight.head;
    if (h >= 0) {
        const uint64_t d = rma->slots[h].issue_ns + rma->cfg.op_timeout_ns;
        t = d < t ? d : t;
    }
    return t;
}

/* ---- answers ---- */

static void send_data(struct erma_rma *rma, struct slot *s, uint32_t token)
{
    const uint8_t *src = s->local;
    if (s->op == ERMA_RMA_REKEY) { /* the new key and the grace time */
        memcpy(rma->scratch, s->local, ERMA_RMA_KEY_BYTES);
        erma_put_le(rma->scratch + ERMA_RMA_KEY_BYTES, s->grace_ns, 8);
        src = rma->scratch;
    }
    struct rma_ophdr h = op_header(rma, s, RMA_DATA);
    h.token = token;
    for (uint32_t off = 0; off < s->len; off += rma->pkt_data, h.pkt_idx++) {
        const uint32_t n = s->len - off < rma->pkt_data ? s->len - off : rma->pkt_data;
        h.pkt_off = (uint16_t)off;
        uint8_t *pkt = erma_rma_tx_buf(rma, &rma->peers[s->peer].addr);
        erma_rma_tx_commit(rma, erma_rma_build(rma, pkt, &h, s->rkey.kd, 0, src + off, n));
    }
    s->state = SLOT_SENT_DATA;
}

static bool plain_ok(int status)
{
    return status == ERMA_ENACK || status == ERMA_EAUTH || status == ERMA_ENOREGION;
}

/* The live op this answer is for, or NULL. */
static struct slot *match(struct erma_rma *rma, const struct rma_ophdr *h,
                          const struct erma_rx_pkt *pkt)
{
    if (h->slot >= rma->cfg.slots)
        return NULL;
    struct slot *s = &rma->slots[h->slot];
    if ((s->state != SLOT_ISSUED && s->state != SLOT_SENT_DATA) || s->init_ctr != h->init_ctr ||
        h->identity != rma->cfg.identity || h->region != s->rkey.region ||
        h->key_gen != s->rkey.key_gen || h->offset != s->offset || h->len != s->len ||
        !erma_addr_eq(&rma->peers[s->peer].addr, &pkt->src))
        return NULL;
    return s;
}

static void read_resp(struct erma_rma *rma, struct slot *s, const struct rma_ophdr *h,
                      uint32_t plen)
{
    memcpy(s->local + h->pkt_off, rma->scratch, plen);
    s->got |= 1u << h->pkt_idx;
    s->bytes += plen;
    if (s->bytes == s->len)
        finish(rma, s, ERMA_OK);
}

void erma_portal_rx(struct erma_rma *rma, const struct rma_ophdr *h, const struct erma_rx_pkt *pkt)
{
    struct slot *s = match(rma, h, pkt);
    const uint32_t plen = pkt->len - RMA_OVERHEAD;
    const int status = -(int)h->status;
    bool ok;
    if (!s) {
        rma->stats.rx_unmatched++;
        return;
    }
    switch (h->type) {
    case RMA_READ_RESP:
        ok = s->op == ERMA_RMA_READ && plen && h->pkt_idx < 32 && !(s->got >> h->pkt_idx & 1) &&
             h->pkt_off + plen <= s->len;
        break;
    case RMA_SOLICIT:
        ok = s->op != ERMA_RMA_READ && s->state == SLOT_ISSUED && !plen;
        break;
    case RMA_DONE:
        ok = s->op != ERMA_RMA_READ && s->state == SLOT_SENT_DATA && !plen;
        break;
    case RMA_ERROR:
        ok = !plen && status < 0 && status > ERMA_ERR_LAST &&
             (!(h->flags & RMA_FLAG_PLAIN) || plain_ok(status));
        break;
    default:
        ok = false;
    }
    ok = ok && (h->type == RMA_ERROR || !(h->flags & RMA_FLAG_PLAIN));
    if (!ok) {
        rma->stats.rx_unmatched++;
        return;
    }
    if (!(h->flags & RMA_FLAG_PLAIN) &&
        erma_rma_open(s->rkey.kd, 1, h->nonce_ctr, pkt->data, pkt->len, rma->scratch) != 0) {
        rma->stats.rx_unsealed_bad++;
        return;
    }
    if (h->type == RMA_READ_RESP)
        read_resp(rma, s, h, plen);
    else if (h->type == RMA_SOLICIT)
        send_data(rma, s, h->token);
    else
        finish(rma, s, h->type == RMA_DONE ? ERMA_OK : status);
}
