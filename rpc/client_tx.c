/* The client's sending: requests onto slots (erma_rpc_call, the backlog),
 * their packets within the session's credits, paced by Timely through the
 * timing wheel, over the session's virtual paths. */
#include <stdlib.h>

#include "client.h"

/* Sends client packet i; returns the bytes it brings onto the path: the
 * request packet, or for an RFR the response packet it asks for. */
static uint32_t send_pkt(struct erma_rpc *rpc, struct session *s, struct slot *sl, uint32_t i)
{
    struct client_slot *c = &sl->client;
    if (s->ps.n > 1) {
        s->tx_path = erma_paths_pick(&s->ps, rpc->ep->now);
        c->tx_path[i % ERMA_MAX_CREDITS] = s->tx_path;
    }
    c->tx_ns[i % ERMA_MAX_CREDITS] = (uint32_t)cc_now(rpc);
    if (i < c->req_pkts) {
        const uint8_t *data;
        uint32_t len;
        erma__msg_pkt_span(c->req, i, &data, &len);
        erma__tx_data(rpc, s, &s->peer, erma__msg_hdr(c->req, i), data, len);
        return ERMA_HDR_SIZE + len;
    }
    uint8_t *h = erma__tx_ctrl(rpc, s, &s->peer, ERMA_HDR_SIZE);
    hdr_put(h, c->req_type, 0, s->remote_num, ERMA_PKT_RFR, i, sl->req_num);
    return rpc->ep->tr->max_pkt;
}

/* A busy slot (callers walk busy_mask) with a packet to send. */
static bool slot_pending(const struct client_slot *c)
{
    return c->resend || (c->num_tx < client_total_tx(c) && c->num_tx - c->num_rx < WINDOW);
}

/* A bit at a time: usually none is left, and without -mpopcnt
 * __builtin_popcountll is a library call. */
static uint32_t slot_outstanding(const struct client_slot *c)
{
    uint32_t n = 0;
    for (uint64_t m = slot_unanswered(c); m; m &= m - 1)
        n++;
    return n;
}

/* The next packet of a pending slot: a lost one first, else a new one. */
static uint32_t slot_next_pkt(struct client_slot *c)
{
    if (c->resend) {
        const uint32_t k = (uint32_t)__builtin_ctzll(c->resend);
        c->resend &= ~bit(k);
        return c->num_rx + k;
    }
    return c->num_tx++;
}

/* Sends the next packet of the session's next slot with one pending (round
 * robin), spending a credit; returns its bytes, 0 when there is none or no
 * credit. */
static uint32_t send_next(struct erma_rpc *rpc, struct session *s)
{
    if (s->credits == 0 || s->client.busy_mask == 0 ||
        (s->ps.n > 1 && !erma_paths_free(&s->ps, rpc->ep->now)))
        return 0;
    const unsigned rr = s->client.rr, m = s->client.busy_mask;
    /* bit n: slot rr + n (mod the slots) is busy */
    for (unsigned busy = (m >> rr | m << (ERMA_SESSION_SLOTS - rr)) & 0xffu; busy;
         busy &= busy - 1) {
        const unsigned n = (unsigned)__builtin_ctz(busy);
        struct slot *sl = &s->slots[(rr + n) % ERMA_SESSION_SLOTS];
        if (slot_pending(&sl->client)) {
            s->client.rr = (uint8_t)((s->client.rr + n + 1) % ERMA_SESSION_SLOTS);
            s->credits--;
            return send_pkt(rpc, s, sl, slot_next_pkt(&sl->client));
        }
    }
    return 0;
}

/* ---- pacing ---- */

/* True when the session's packets must go through the timing wheel. */
static bool paced(const struct erma_rpc *rpc, const struct session *s)
{
    const struct erma_cc_switches *cc = &rpc->cfg.cc;
    return !cc->off && (s->cc.timely.rate_bps < rpc->cc.timely_cfg.link_bps ||
                        cc->no_wheel_bypass);
}

/* Puts the session in the wheel for its next packet (at most one entry per
 * session, so a packet leaves at the rate of the moment it leaves). */
static void schedule(struct erma_rpc *rpc, struct session *s, uint64_t now)
{
    const uint64_t due = s->cc.next_tx_ns > now ? s->cc.next_tx_ns : now;
    /* An empty wheel's time stands where its last reap left it: brought to
     * now, due is placed in its own slot (not in the last, which would let
     * it go early, after a walk over every slot in between). */
    if (rpc->cc.wheel.count == 0)
        erma_wheel_reap(&rpc->cc.wheel, now, NULL, 0);
    if (erma_wheel_insert(&rpc->cc.wheel, due, s, s->token) == ERMA_OK)
        s->cc.in_wheel = true;
    else if (send_next(rpc, s)) /* wheel full: go now rather than stall */
        s->cc.direct_pkts++;
}

static bool any_pending(const struct session *s)
{
    if (s->credits == 0)
        return false;
    for (unsigned busy = s->client.busy_mask; busy; busy &= busy - 1)
        if (slot_pending(&s->slots[__builtin_ctz(busy)].client))
            return true;
    return false;
}

/* A paced session's packet whose due time has come leaves at once, as the
 * wheel would release it, without a wait for the wheel's slot to end; the
 * next one goes into the wheel. */
static void client_send(struct erma_rpc *rpc, struct session *s)
{
    if (s->cc.in_wheel)
        return; /* the wheel will send */
    if (!paced(rpc, s)) {
        while (send_next(rpc, s))
            s->cc.direct_pkts++;
        return;
    }
    if (!any_pending(s))
        return;
    const uint64_t now = cc_now(rpc);
    uint32_t bytes;
    if (s->cc.next_tx_ns <= now && (bytes = send_next(rpc, s)) > 0) {
        s->cc.paced_pkts++;
        s->cc.next_tx_ns = erma_pacer_next_tx(s->cc.timely.rate_bps, bytes, now, now);
        if (!any_pending(s))
            return;
    }
    schedule(rpc, s, now);
}

/* Packets a released session may send at once when it is behind schedule. */
#define PACE_BURST 8

/* Sends what the session's rate allows up to now: its due packet, and more
 * while the next due time has passed already (up to PACE_BURST, so that a
 * session late by a loop pass keeps its rate without bursting after idling). */
static void pace_release(struct erma_rpc *rpc, struct session *s, uint64_t due, uint64_t now)
{
    uint32_t bytes;
    for (unsigned k = 0; k < PACE_BURST && due <= now && (bytes = send_next(rpc, s)); k++) {
        s->cc.paced_pkts++;
        due = erma_pacer_next_tx(s->cc.timely.rate_bps, bytes, due, due);
    }
    s->cc.next_tx_ns = due;
    client_send(rpc, s); /* back in the wheel if more is pending, or direct at line rate */
}

void erma__rpc_wheel_release(struct erma_rpc *rpc, uint64_t now)
{
    struct erma_wheel_entry e[ERMA_MAX_BURST];
    size_t n;
    while ((n = erma_wheel_reap(&rpc->cc.wheel, now, e, ERMA_MAX_BURST)) > 0) {
        for (size_t k = 0; k < n; k++) {
            struct session *s = e[k].ptr;
            if (s->token != e[k].cookie || !s->cc.in_wheel)
                continue; /* an entry of an earlier session in this struct */
            s->cc.in_wheel = false;
            if (s->state == CONNECTED)
                pace_release(rpc, s, e[k].due_ns, now);
        }
    }
}

int erma_session_cc_stats(const struct erma_rpc *rpc, int num, struct erma_session_cc *out)
{
    const struct session *s = rpc && out && num >= 0 && (uint32_t)num < rpc->table.n
                                  ? rpc->table.sessions[num] : NULL;
    if (!s || s->role != CLIENT || s->state == FREE)
        return ERMA_ENOENT;
    const struct erma_timely *t = &s->cc.timely;
    *out = (struct erma_session_cc){.rate_bps = t->rate_bps, .avg_rtt_ns = t->avg_rtt_ns,
                                    .last_rtt_ns = t->last_rtt_ns, .min_rtt_ns = t->min_rtt_ns,
                                    .rtt_samples = s->cc.rtt_samples,
                                    .timely_updates = t->updates,
                                    .timely_bypasses = t->bypasses,
                                    .paced_pkts = s->cc.paced_pkts,
                                    .direct_pkts = s->cc.direct_pkts,
                                    .busy_samples = s->cc.busy_samples};
    return ERMA_OK;
}

/* ---- requests onto slots ---- */

static void busy_add(struct erma_rpc *rpc, struct session *s, const struct slot *sl)
{
    if (s->client.busy_mask == 0) {
        s->client.busy_idx = rpc->client.nbusy;
        rpc->client.busy[rpc->client.nbusy++] = s;
    }
    s->client.busy_mask |= (uint8_t)(1u << (sl - s->slots));
}

static void busy_remove(struct erma_rpc *rpc, struct session *s, const struct slot *sl)
{
    s->client.busy_mask &= (uint8_t)~(1u << (sl - s->slots));
    if (s->client.busy_mask == 0) {
        struct session *last = rpc->client.busy[--rpc->client.nbusy];
        rpc->client.busy[s->client.busy_idx] = last;
        last->client.busy_idx = s->client.busy_idx;
    }
}

static void slot_start(struct erma_rpc *rpc, struct session *s, struct slot *sl,
                       const struct backlog *b)
{
    struct client_slot *c = &sl->client;
    busy_add(rpc, s, sl);
    sl->req_num += ERMA_SESSION_SLOTS;
    c->req_type = b->req_type;
    c->req = b->req;
    c->resp = b->resp;
    c->cont = b->cont;
    c->tag = b->tag;
    c->req_pkts = erma__msg_pkts(c->req->size, rpc->pkt_data);
    c->resp_pkts = c->num_tx = c->num_rx = 0;
    c->rx_bits = c->resend = c->again = c->timed = 0;
    c->waited_ns = 0;
    c->backoff = 0;
    c->progress_ns = c->start_ns = rpc->ep->now;
    for (uint32_t k = 0; k < c->req_pkts; k++)
        hdr_put(erma__msg_hdr(c->req, k), c->req_type, c->req->size, s->remote_num, ERMA_PKT_REQ,
                k, sl->req_num);
}

void erma__slot_finish(struct erma_rpc *rpc, struct session *s, struct slot *sl, int status)
{
    struct client_slot *c = &sl->client;
    if (c->charged) { /* a response buffer erma grew */
        erma__budget_give(rpc, &s->recv_held, NULL, c->charged);
        c->charged = 0;
    }
    s->credits += slot_outstanding(c);
    paths_done(s, c, slot_unanswered(c));
    busy_remove(rpc, s, sl);
    erma__complete(rpc, c->cont, c->tag, status, c->resp);
}

/* Starts the waiting requests on the free slots. Out of line: a kick
 * with none waiting saves no registers for it. */
__attribute__((noinline)) static void start_backlog(struct erma_rpc *rpc, struct session *s)
{
    for (unsigned k = 0; k < ERMA_SESSION_SLOTS && s->client.backlog; k++) {
        struct slot *sl = &s->slots[k];
        if (!erma__slot_busy(s, sl)) {
            struct backlog *b = s->client.backlog;
            s->client.backlog = b->next;
            s->client.nbacklog--;
            slot_start(rpc, s, sl, b);
            b->next = rpc->client.free_backlog;
            rpc->client.free_backlog = b;
        }
    }
}

void erma__client_kick(struct erma_rpc *rpc, struct session *s)
{
    if (s->state != CONNECTED || (!s->client.backlog && !s->client.busy_mask))
        return; /* nothing to start or send */
    if (s->client.backlog)
        start_backlog(rpc, s);
    client_send(rpc, s);
}

int erma_rpc_call(struct erma_rpc *rpc, int num, uint8_t req_type, struct erma_msgbuf *req,
                  struct erma_msgbuf *resp, erma_cont_fn cont, void *tag)
{
    if (!rpc || !req || !resp || !cont || !req->mem || !resp->mem || req == resp ||
        req->size > req->max_size || req->pkt_data != rpc->pkt_data)
        return ERMA_EINVAL;
    if (rpc->destroying)
        return ERMA_ESESSRESET;
    struct session *s = num >= 0 && num < (int)MAX_SESSIONS
                            ? erma__session_get(rpc, (uint16_t)num) : NULL;
    if (!s || s->role != CLIENT || (s->state != CONNECTED && s->state != CONNECTING))
        return ERMA_ENOENT;
    if (s->sm.reconnecting && (rpc->cfg.reconnect != ERMA_RECONNECT_QUEUE ||
                               s->client.nbacklog >= rpc->cfg.reconnect_queue))
        return ERMA_EAGAIN;
    erma__ep_clock(rpc->ep); /* called from outside the loop */
    const uint8_t busy = s->client.busy_mask;
    if (s->state == CONNECTED && !s->client.backlog && busy != 0xffu) {
        /* none waits before it: the first free slot takes it, as a kick would */
        const struct backlog now = {NULL, req_type, req, resp, cont, tag};
        slot_start(rpc, s, &s->slots[__builtin_ctz(~busy & 0xffu)], &now);
        client_send(rpc, s);
        erma__ep_tx_send_now(rpc->ep);
        return ERMA_OK;
    }
    struct backlog *b = rpc->client.free_backlog;
    if (b)
        rpc->client.free_backlog = b->next;
    else if (!(b = malloc(sizeof *b)))
        return ERMA_ENOMEM;
    *b = (struct backlog){NULL, req_type, req, resp, cont, tag};
    if (s->client.backlog_tail && s->client.backlog)
        s->client.backlog_tail->next = b;
    else
        s->client.backlog = b;
    s->client.backlog_tail = b;
    s->client.nbacklog++;
    erma__client_kick(rpc, s);
    erma__ep_tx_send_now(rpc->ep);
    return ERMA_OK;
}

void erma__fail_client_sent(struct erma_rpc *rpc, struct session *s, int status)
{
    for (unsigned k = 0; k < ERMA_SESSION_SLOTS; k++)
        if (erma__slot_busy(s, &s->slots[k]))
            erma__slot_finish(rpc, s, &s->slots[k], status);
}

void erma__fail_client_slots(struct erma_rpc *rpc, struct session *s, int status)
{
    erma__fail_client_sent(rpc, s, status);
    s->client.nbacklog = 0;
    while (s->client.backlog) {
        struct backlog *b = s->client.backlog;
        s->client.backlog = b->next;
        erma__complete(rpc, b->cont, b->tag, status, b->resp);
        b->next = rpc->client.free_backlog;
        rpc->client.free_backlog = b;
    }
}
