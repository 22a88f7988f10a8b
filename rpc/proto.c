/*
 * The RPC wire protocol. A client slot numbers its packets in one index
 * space: 0..req_pkts-1 are request packets, req_pkts.. are RFRs for response
 * packets 1... The server's reply to client packet i carries pkt_num i: a
 * credit return for i < req_pkts-1, else response packet i - (req_pkts-1).
 */
#include <stdlib.h>
#include <string.h>

#include "erma/clock.h"
#include "erma/log.h"
#include "internal.h"

static void hdr_put(uint8_t *buf, uint8_t type, uint32_t msg_size, uint16_t dest,
                    enum erma_pkt_type pkt_type, uint32_t pkt_num, uint64_t req_num)
{
    const struct erma_hdr h = {.req_type = type, .msg_size = msg_size, .dest_session = dest,
                               .pkt_type = (uint8_t)pkt_type, .pkt_num = (uint16_t)pkt_num,
                               .req_num = req_num, .proto = ERMA_PROTO_RPC};
    erma_hdr_encode(&h, buf);
}

/* ---- client ---- */

static uint32_t client_total_tx(const struct slot *sl)
{
    return sl->resp_pkts ? sl->req_pkts + sl->resp_pkts - 1 : sl->req_pkts;
}

/* The clock for CC timestamps: one reading per loop pass, or per packet. */
static uint64_t cc_now(const struct erma_rpc *rpc)
{
    return rpc->cfg.cc.no_batch_clock ? erma_now_ns() : rpc->ep->now;
}

/* Timeouts in a row without a reply double a slot's timeout, up to 64 x. */
#define MAX_BACKOFF 6

/* Request numbers past a slot's current one that its server takes: the
 * client may have given up on requests none of whose packets came. */
#define REQ_AHEAD ((uint64_t)ERMA_SESSION_SLOTS << 16)

/* Requests in a row a slot gives up on (cfg.req_timeout_ns) without any
 * reply before its session is failed: past REQ_AHEAD its server would take
 * the slot's next request for another session's, and drop it. */
#define MAX_UNHEARD ((uint32_t)(REQ_AHEAD / ERMA_SESSION_SLOTS) - 1)

/* ---- virtual paths (client; erma/cc.h, VIRTUAL PATHS) ---- */

/* A pruned path rests PRUNE_RTOS timeouts, twice that after each prune. */
#define PRUNE_RTOS 4

static uint64_t path_rest(const struct erma_rpc *rpc)
{
    return PRUNE_RTOS * rpc->cfg.rto_ns;
}

/* Packet i of sl is out no longer (answered, lost or given up): its path
 * may take packets again even if it was the path's probe. */
static void path_done(struct session *s, const struct slot *sl, uint32_t i)
{
    erma_paths_done(&s->ps, sl->tx_path[i % ERMA_MAX_CREDITS]);
}

/* The packets of mask (bit k: packet num_rx + k) are out no longer. */
static void paths_done(struct session *s, const struct slot *sl, uint64_t mask)
{
    for (mask = s->ps.n > 1 ? mask : 0; mask; mask &= mask - 1)
        path_done(s, sl, sl->num_rx + (uint32_t)__builtin_ctzll(mask));
}

static uint64_t bit(uint32_t k)
{
    return (uint64_t)1 << k;
}

static void path_lost(struct erma_rpc *rpc, struct session *s, uint64_t lost, const struct slot *sl)
{
    for (lost = s->ps.n > 1 ? lost : 0; lost; lost &= lost - 1) {
        const uint32_t i = sl->num_rx + (uint32_t)__builtin_ctzll(lost);
        rpc->stats.paths_pruned += erma_paths_lost(&s->ps, sl->tx_path[i % ERMA_MAX_CREDITS],
                                                   rpc->ep->now, path_rest(rpc));
    }
}

/* Sends client packet i; returns the bytes it brings onto the path: the
 * request packet, or for an RFR the response packet it asks for. */
static uint32_t send_pkt(struct erma_rpc *rpc, struct session *s, struct slot *sl, uint32_t i)
{
    if (s->ps.n > 1) {
        s->tx_path = erma_paths_pick(&s->ps, rpc->ep->now);
        sl->tx_path[i % ERMA_MAX_CREDITS] = s->tx_path;
    }
    sl->tx_ns[i % ERMA_MAX_CREDITS] = (uint32_t)cc_now(rpc);
    if (i < sl->req_pkts) {
        const uint8_t *data;
        uint32_t len;
        erma_msg_pkt_span(sl->req, i, &data, &len);
        erma_tx_data(rpc, s, &s->peer, erma_msg_hdr(sl->req, i), data, len);
        return ERMA_HDR_SIZE + len;
    }
    uint8_t *h = erma_tx_ctrl(rpc, s, &s->peer, ERMA_HDR_SIZE);
    hdr_put(h, sl->req_type, 0, s->remote_num, ERMA_PKT_RFR, i, sl->req_num);
    return rpc->ep->tr->max_pkt;
}

/* A slot keeps at most this many packets past its first unanswered one
 * (tx_ns holds their send times; the bitmaps are 64 bits). */
#define WINDOW ERMA_MAX_CREDITS

/* A CR's data: the server's srv_rx (4 bytes) and srv_bits (8), little-endian. */
#define CR_ACK_LEN 12

static bool slot_pending(const struct slot *sl)
{
    return sl->busy && (sl->resend || (sl->num_tx < client_total_tx(sl) &&
                                       sl->num_tx - sl->num_rx < WINDOW));
}

/* Packets sent and neither answered nor queued to be sent again (bit k:
 * packet num_rx + k): each holds a credit. */
static uint64_t slot_unanswered(const struct slot *sl)
{
    return (bit(sl->num_tx - sl->num_rx) - 1) & ~(sl->rx_bits | sl->resend);
}

static uint32_t slot_outstanding(const struct slot *sl)
{
    return (uint32_t)__builtin_popcountll(slot_unanswered(sl));
}

/* Queues the packets of lost (bit k: packet num_rx + k, each without a
 * reply) to be sent again, first of all, giving back their credits. */
static void slot_resend(struct erma_rpc *rpc, struct session *s, struct slot *sl, uint64_t lost)
{
    const uint32_t n = (uint32_t)__builtin_popcountll(lost);
    s->credits += n;
    rpc->stats.retransmitted_pkts += n;
    sl->resend |= lost;
    sl->again |= lost;
}

/* The next packet of a pending slot: a lost one first, else a new one. */
static uint32_t slot_next_pkt(struct slot *sl)
{
    if (sl->resend) {
        const uint32_t k = (uint32_t)__builtin_ctzll(sl->resend);
        sl->resend &= ~bit(k);
        return sl->num_rx + k;
    }
    return sl->num_tx++;
}

/* Sends the next packet of the session's next slot with one pending (round
 * robin), spending a credit; returns its bytes, 0 when there is none or no
 * credit. */
static uint32_t send_next(struct erma_rpc *rpc, struct session *s)
{
    if (s->credits == 0 || (s->ps.n > 1 && !erma_paths_free(&s->ps, rpc->ep->now)))
        return 0;
    for (unsigned n = 0; n < ERMA_SESSION_SLOTS; n++) {
        struct slot *sl = &s->slots[(s->rr + n) % ERMA_SESSION_SLOTS];
        if (slot_pending(sl)) {
            s->rr = (uint8_t)((s->rr + n + 1) % ERMA_SESSION_SLOTS);
            s->credits--;
            return send_pkt(rpc, s, sl, slot_next_pkt(sl));
        }
    }
    return 0;
}

/* True when the session's packets must go through the timing wheel. */
static bool paced(const struct erma_rpc *rpc, const struct session *s)
{
    const struct erma_cc_switches *cc = &rpc->cfg.cc;
    return !cc->off && (s->timely.rate_bps < rpc->timely_cfg.link_bps || cc->no_wheel_bypass);
}

/* Puts the session in the wheel for its next packet (at most one entry per
 * session, so a packet leaves at the rate of the moment it leaves). */
static void schedule(struct erma_rpc *rpc, struct session *s, uint64_t now)
{
    const uint64_t due = s->next_tx_ns > now ? s->next_tx_ns : now;
    if (erma_wheel_insert(&rpc->wheel, due, s, s->token) == ERMA_OK)
        s->in_wheel = true;
    else if (send_next(rpc, s)) /* wheel full: go now rather than stall */
        s->direct_pkts++;
}

static void client_send(struct erma_rpc *rpc, struct session *s)
{
    if (s->in_wheel)
        return; /* the wheel will send */
    if (paced(rpc, s)) {
        if (s->credits > 0)
            for (unsigned k = 0; k < ERMA_SESSION_SLOTS; k++)
                if (slot_pending(&s->slots[k])) {
                    schedule(rpc, s, cc_now(rpc));
                    return;
                }
        return;
    }
    while (send_next(rpc, s))
        s->direct_pkts++;
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
        s->paced_pkts++;
        due = erma_pacer_next_tx(s->timely.rate_bps, bytes, due, due);
    }
    s->next_tx_ns = due;
    client_send(rpc, s); /* back in the wheel if more is pending, or direct at line rate */
}

void erma_wheel_release(struct erma_rpc *rpc, uint64_t now)
{
    struct erma_wheel_entry e[ERMA_MAX_BURST];
    size_t n;
    while ((n = erma_wheel_reap(&rpc->wheel, now, e, ERMA_MAX_BURST)) > 0) {
        for (size_t k = 0; k < n; k++) {
            struct session *s = e[k].ptr;
            if (s->token != e[k].cookie || !s->in_wheel)
                continue; /* an entry of an earlier session in this struct */
            s->in_wheel = false;
            if (s->state == CONNECTED)
                pace_release(rpc, s, e[k].due_ns, now);
        }
    }
}

static void busy_add(struct erma_rpc *rpc, struct session *s)
{
    if (s->busy_slots++ == 0) {
        s->busy_idx = rpc->nbusy;
        rpc->busy[rpc->nbusy++] = s;
    }
}

static void busy_remove(struct erma_rpc *rpc, struct session *s)
{
    if (--s->busy_slots == 0) {
        struct session *last = rpc->busy[--rpc->nbusy];
        rpc->busy[s->busy_idx] = last;
        last->busy_idx = s->busy_idx;
    }
}

static void slot_start(struct erma_rpc *rpc, struct session *s, struct slot *sl,
                       const struct backlog *b)
{
    sl->busy = true;
    busy_add(rpc, s);
    sl->req_num += ERMA_SESSION_SLOTS;
    sl->req_type = b->req_type;
    sl->req = b->req;
    sl->resp = b->resp;
    sl->cont = b->cont;
    sl->tag = b->tag;
    sl->req_pkts = erma_msg_pkts(sl->req->size, rpc->pkt_data);
    sl->resp_pkts = sl->num_tx = sl->num_rx = 0;
    sl->rx_bits = sl->resend = sl->again = 0;
    sl->backoff = 0;
    sl->progress_ns = sl->start_ns = rpc->ep->now;
    for (uint32_t k = 0; k < sl->req_pkts; k++)
        hdr_put(erma_msg_hdr(sl->req, k), sl->req_type, sl->req->size, s->remote_num, ERMA_PKT_REQ,
                k, sl->req_num);
}

static void slot_finish(struct erma_rpc *rpc, struct session *s, struct slot *sl, int status)
{
    erma_budget_give(rpc, &s->recv_held, NULL, sl->charged);
    sl->charged = 0;
    s->credits += slot_outstanding(sl);
    paths_done(s, sl, slot_unanswered(sl));
    sl->busy = false;
    busy_remove(rpc, s);
    erma_complete(rpc, sl->cont, sl->tag, status, sl->resp);
}

void erma_client_kick(struct erma_rpc *rpc, struct session *s)
{
    if (s->state != CONNECTED)
        return;
    for (unsigned k = 0; k < ERMA_SESSION_SLOTS && s->backlog; k++) {
        struct slot *sl = &s->slots[k];
        if (!sl->busy) {
            struct backlog *b = s->backlog;
            s->backlog = b->next;
            slot_start(rpc, s, sl, b);
            b->next = rpc->free_backlog;
            rpc->free_backlog = b;
        }
    }
    client_send(rpc, s);
}

int erma_rpc_call(struct erma_rpc *rpc, int num, uint8_t req_type,
                         struct erma_msgbuf *req, struct erma_msgbuf *resp, erma_cont_fn cont,
                         void *tag)
{
    if (!rpc || !req || !resp || !cont || !req->mem || !resp->mem || req == resp ||
        req->size > req->max_size || req->pkt_data != rpc->pkt_data)
        return ERMA_EINVAL;
    if (rpc->destroying)
        return ERMA_ESESSRESET;
    struct session *s = num >= 0 && num < (int)MAX_SESSIONS ? erma_session_get(rpc, (uint16_t)num)
                                                            : NULL;
    if (!s || s->role != CLIENT || (s->state != CONNECTED && s->state != CONNECTING))
        return ERMA_ENOENT;
    struct backlog *b = rpc->free_backlog;
    if (b)
        rpc->free_backlog = b->next;
    else if (!(b = malloc(sizeof *b)))
        return ERMA_ENOMEM;
    *b = (struct backlog){NULL, req_type, req, resp, cont, tag};
    erma_ep_clock(rpc->ep); /* called from outside the loop */
    if (s->backlog_tail && s->backlog)
        s->backlog_tail->next = b;
    else
        s->backlog = b;
    s->backlog_tail = b;
    erma_client_kick(rpc, s);
    return ERMA_OK;
}

void erma_fail_client_slots(struct erma_rpc *rpc, struct session *s, int status)
{
    for (unsigned k = 0; k < ERMA_SESSION_SLOTS; k++)
        if (s->slots[k].busy)
            slot_finish(rpc, s, &s->slots[k], status);
    while (s->backlog) {
        struct backlog *b = s->backlog;
        s->backlog = b->next;
        erma_complete(rpc, b->cont, b->tag, status, b->resp);
        b->next = rpc->free_backlog;
        rpc->free_backlog = b;
    }
}

void erma_client_req_error(struct erma_rpc *rpc, struct session *s, uint64_t req_num, int err)
{
    struct slot *sl = &s->slots[req_num % ERMA_SESSION_SLOTS];
    if (!sl->busy || sl->req_num != req_num || err >= 0 || err <= ERMA_ERR_LAST)
        return;
    sl->unheard = 0;
    slot_finish(rpc, s, sl, err);
    erma_client_kick(rpc, s);
}

void erma_client_scan(struct erma_rpc *rpc, struct session *s, uint64_t now)
{
    bool kick = false, deaf = false;
    for (unsigned k = 0; k < ERMA_SESSION_SLOTS; k++) {
        struct slot *sl = &s->slots[k];
        if (!sl->busy)
            continue;
        if (rpc->cfg.req_timeout_ns && since(now, sl->start_ns) > rpc->cfg.req_timeout_ns) {
            sl->unheard = sl->num_rx || sl->rx_bits ? 0 : sl->unheard + 1;
            deaf |= sl->unheard >= MAX_UNHEARD;
            slot_finish(rpc, s, sl, ERMA_ETIMEDOUT);
            kick = true;
        } else if (slot_unanswered(sl) &&
                   since(now, sl->progress_ns) > rpc->cfg.rto_ns << sl->backoff) {
            /* selective: send again only the packets without a reply; only
             * the first is surely lost: the rest may wait behind it in
             * queues (and a loss on every path would prune them all) */
            const uint64_t out = slot_unanswered(sl);
            path_lost(rpc, s, out & -out, sl);
            paths_done(s, sl, out & (out - 1));
            slot_resend(rpc, s, sl, out);
            sl->progress_ns = now;
            sl->backoff += sl->backoff < MAX_BACKOFF; /* the path may be slower than rto_ns */
            rpc->stats.retransmits++;
            kick = true;
        }
    }
    if (deaf) {
        ERMA_INFO("rpc: session %u: %u requests in a row on one slot had no reply, declared "
                  "failed", s->num, MAX_UNHEARD);
        erma_session_lost(rpc, s);
    } else if (kick) {
        erma_client_kick(rpc, s);
    }
}

/* A response buffer of size bytes in place of the caller's, within the
 * session's and the endpoint's budgets (the server declared the size). */
static int client_grow_resp(struct erma_rpc *rpc, struct session *s, struct slot *sl,
                            uint32_t size)
{
    erma_budget_give(rpc, &s->recv_held, NULL, sl->charged); /* an earlier first packet's */
    sl->charged = 0;
    if (!erma_budget_take(rpc, &s->recv_held, NULL, size)) {
        rpc->stats.recv_refused++;
        return ERMA_ENOBUFS;
    }
    erma_msgbuf_free(rpc, sl->resp);
    if (erma_msgbuf_alloc(rpc, size, sl->resp) != ERMA_OK) {
        erma_budget_give(rpc, &s->recv_held, NULL, size);
        return ERMA_ENOMEM;
    }
    sl->charged = size;
    return ERMA_OK;
}

/* Accepts response packet j (data in pkt) into the slot's response buffer. */
static int client_take_resp(struct erma_rpc *rpc, struct session *s, struct slot *sl,
                            const struct erma_hdr *h, const uint8_t *data, uint32_t len,
                            uint32_t j)
{
    struct erma_msgbuf *resp = sl->resp;
    if (j == 0) {
        if (h->msg_size > resp->max_size || resp->pkt_data != rpc->pkt_data) {
            const int rc = client_grow_resp(rpc, s, sl, h->msg_size);
            if (rc != ERMA_OK)
                return rc;
        }
        resp->size = h->msg_size;
        sl->resp_pkts = erma_msg_pkts(h->msg_size, rpc->pkt_data);
    } else if (h->msg_size != resp->size || j >= sl->resp_pkts) {
        return ERMA_EBADPKT;
    }
    const uint8_t *dst;
    uint32_t want;
    erma_msg_pkt_span(resp, j, &dst, &want);
    if (len != want)
        return ERMA_EBADPKT;
    memcpy((uint8_t *)dst, data, len);
    return ERMA_OK;
}

/* An RTT sample from the reply to packet i feeds Timely; none from a
 * packet sent again, whose reply may answer either copy (Karn). A reply
 * to a copy sent sooner than half the smallest RTT ago answers the first
 * one: the loss was reordering, and fast retransmits wait for more. */
static void cc_sample(struct erma_rpc *rpc, struct session *s, const struct slot *sl, uint32_t i)
{
    const uint64_t now = cc_now(rpc);
    const uint32_t elapsed = (uint32_t)now - sl->tx_ns[i % ERMA_MAX_CREDITS]; /* mod 2^32 */
    const uint64_t rtt = elapsed ? elapsed : 1;
    if (sl->again & bit(i - sl->num_rx)) {
        if (2 * rtt < s->min_rtt_ns) {
            rpc->stats.spurious_retransmits++;
            s->dupthresh = s->dupthresh < WINDOW / 2 ? 2 * s->dupthresh : WINDOW;
        }
        return;
    }
    if (rtt < s->min_rtt_ns || !s->min_rtt_ns)
        s->min_rtt_ns = rtt;
    const uint32_t newest = sl->rx_bits ? sl->num_rx + 63 - (uint32_t)__builtin_clzll(sl->rx_bits)
                                        : i;
    if (s->ps.n > 1) {
        const uint8_t p = sl->tx_path[i % ERMA_MAX_CREDITS];
        rpc->stats.paths_pruned += erma_paths_sample(&s->ps, p, rtt, newest > i ? newest - i : 0,
                                                     rpc->ep->now, path_rest(rpc));
        if (s->ps.p[p].pruned_until)
            return; /* a path that stands out says nothing of the others' congestion */
    }
    s->rtt_samples++;
    if (!rpc->cfg.cc.off)
        erma_timely_update(&s->timely, rtt, now);
    if (rpc->cfg.rtt_hook)
        rpc->cfg.rtt_hook(rpc->cfg.rtt_ctx, s->num, rtt);
}

/* Marks the reply to packet i received (it returns its credit); the
 * first unanswered packet moves past every reply received without a gap. */
static void client_mark(struct session *s, struct slot *sl, uint32_t i)
{
    const uint64_t b = bit(i - sl->num_rx);
    sl->unheard = 0;
    if (s->ps.n > 1)
        s->ps.p[sl->tx_path[i % ERMA_MAX_CREDITS]].probe = ERMA_PROBE_NONE; /* its path delivers */
    sl->rx_bits |= b;
    if (sl->resend & b) { /* it came after all: its credit came back at the timeout */
        sl->resend &= ~b;
    } else {
        s->credits++;
        if (s->ps.n > 1)
            path_done(s, sl, i);
    }
    while (sl->rx_bits & 1) {
        sl->rx_bits >>= 1;
        sl->resend >>= 1;
        sl->again >>= 1;
        sl->num_rx++;
    }
}

/* A CR's arrival bitmap: request packets the server has whose own CRs
 * were lost (or are late) are answered too. Never the last request
 * packet: response packet 0 answers it. */
static void client_take_acks(struct session *s, struct slot *sl, const uint8_t *ack)
{
    const uint32_t crs = sl->req_pkts - 1 < sl->num_tx ? sl->req_pkts - 1 : sl->num_tx;
    const uint32_t top = (uint32_t)erma_get_le(ack, 4);
    uint64_t bits = erma_get_le(ack + 4, 8);
    while (sl->num_rx < top && sl->num_rx < crs)
        client_mark(s, sl, sl->num_rx);
    for (; bits; bits &= bits - 1) {
        const uint64_t j = top + (uint64_t)__builtin_ctzll(bits);
        if (j >= crs)
            break;
        if (j >= sl->num_rx && !(sl->rx_bits & bit((uint32_t)(j - sl->num_rx))))
            client_mark(s, sl, (uint32_t)j);
    }
}

/* Fast retransmit: a path delivers in order, so a packet sent once and
 * still without a reply once the replies to dupthresh packets sent after
 * it on its path came was lost; it goes again now, not at the timeout.
 * (Paths differ in delay: packets on different ones say nothing of each
 * other.) A packet sent again already waits for the timeout. */
static void client_fast_resend(struct erma_rpc *rpc, struct session *s, struct slot *sl,
                               uint32_t i)
{
    if (i < sl->num_rx + s->dupthresh)
        return;
    const uint32_t top = i - sl->num_rx;
    const uint64_t cand = slot_unanswered(sl) & ~sl->again & (bit(top) - 1);
    if (!cand)
        return;
    const uint8_t path = sl->tx_path[i % ERMA_MAX_CREDITS];
    uint64_t lost = 0;
    uint32_t later = 1; /* replies to packets after k on the path: i's first */
    for (uint32_t k = top; k-- > 0;) {
        if (sl->tx_path[(sl->num_rx + k) % ERMA_MAX_CREDITS] != path)
            continue;
        if (sl->rx_bits & bit(k))
            later++;
        else if ((cand & bit(k)) && later >= s->dupthresh)
            lost |= bit(k);
    }
    if (!lost)
        return;
    path_lost(rpc, s, lost, sl);
    slot_resend(rpc, s, sl, lost);
    rpc->stats.fast_retransmits += (uint32_t)__builtin_popcountll(lost);
}

/* Whether req_num lies outside s's request numbers, at most `ahead` past
 * the slot's current one: a late packet of an earlier session that had
 * s's number (session.c, req_base). */
static bool foreign(const struct session *s, const struct slot *sl, uint64_t req_num,
                    uint64_t ahead)
{
    return req_num < s->base || req_num > sl->req_num + ahead;
}

static void client_rx(struct erma_rpc *rpc, struct session *s, const struct erma_hdr *h,
                      const struct erma_rx_pkt *pkt)
{
    struct slot *sl = &s->slots[h->req_num % ERMA_SESSION_SLOTS];
    const uint32_t i = h->pkt_num;
    if (foreign(s, sl, h->req_num, 0)) {
        rpc->stats.rx_other_session++;
        return;
    }
    if (!sl->busy || sl->req_num != h->req_num || i >= sl->num_tx) {
        rpc->stats.rx_stale++;
        return;
    }
    if (i < sl->num_rx || (sl->rx_bits & bit(i - sl->num_rx))) {
        rpc->stats.rx_dup++;
        return;
    }
    const uint32_t len = pkt->len - ERMA_HDR_SIZE;
    const bool is_cr = i + 1 < sl->req_pkts;
    if (is_cr != (h->pkt_type == ERMA_PKT_CR) || (is_cr && len != CR_ACK_LEN)) {
        rpc->stats.rx_bad++;
        return;
    }
    if (rpc->cfg.go_back_n && i != sl->num_rx && i + 1 != sl->req_pkts) {
        rpc->stats.rx_reordered++; /* go-back-N: only the next reply is taken */
        return;
    }
    if (!is_cr) {
        const int rc = client_take_resp(rpc, s, sl, h, pkt->data + ERMA_HDR_SIZE, len,
                                        i + 1 - sl->req_pkts);
        if (rc == ERMA_ENOMEM || rc == ERMA_ENOBUFS) {
            slot_finish(rpc, s, sl, rc);
            return;
        }
        if (rc != ERMA_OK) {
            rpc->stats.rx_bad++;
            return;
        }
    }
    if (i != sl->num_rx)
        rpc->stats.rx_reordered++;
    cc_sample(rpc, s, sl, i);
    /* The first response packet says the server has every request packet:
     * credit returns still missing were lost, or are late duplicates
     * (num_rx is always the first packet without a reply). */
    while (!is_cr && i + 1 == sl->req_pkts && sl->num_rx < i)
        client_mark(s, sl, sl->num_rx);
    client_mark(s, sl, i);
    if (is_cr)
        client_take_acks(s, sl, pkt->data + ERMA_HDR_SIZE);
    sl->backoff = 0;
    if (!rpc->cfg.go_back_n)
        client_fast_resend(rpc, s, sl, i);
    if (s->ps.n > 1)
        s->ps.clock = (int8_t)pkt->path; /* the next packet goes where this one left */
    sl->progress_ns = rpc->ep->now;
    if (!is_cr && sl->num_rx == client_total_tx(sl))
        slot_finish(rpc, s, sl, ERMA_OK);
    erma_client_kick(rpc, s);
}

/* ---- server ---- */

static void server_send_resp_pkt(struct erma_rpc *rpc, struct session *s, struct erma_req *rq,
                                 uint32_t j)
{
    const uint8_t *data;
    uint32_t len;
    erma_msg_pkt_span(rq->resp, j, &data, &len);
    erma_tx_data(rpc, s, &s->peer, erma_msg_hdr(rq->resp, j), data, len);
}

/* A credit return for request packet i, with the server's arrival bitmap:
 * the packets it has without a gap (srv_rx) and the 64 after (srv_bits),
 * so that one CR also stands for earlier ones that were lost. */
static void server_send_cr(struct erma_rpc *rpc, struct session *s, const struct slot *sl,
                           uint32_t i)
{
    uint8_t *h = erma_tx_ctrl(rpc, s, &s->peer, ERMA_HDR_SIZE + CR_ACK_LEN);
    hdr_put(h, sl->rq->type, 0, s->remote_num, ERMA_PKT_CR, i, sl->req_num);
    erma_put_le(h + ERMA_HDR_SIZE, sl->srv_rx, 4);
    erma_put_le(h + ERMA_HDR_SIZE + 4, sl->srv_bits, 8);
}

static void server_send_error(struct erma_rpc *rpc, struct session *s, const struct slot *sl)
{
    struct sm_msg m = erma_sess_msg(s);
    m.err = sl->rq->err;
    m.req_num = sl->req_num;
    erma_sm_send(rpc, s, &s->peer, REQ_ERROR, s->remote_num, &m);
}

/* The request's bytes are no longer being received (all came, or it is
 * dropped): off the budgets and the partial list. */
static void recv_done(struct erma_rpc *rpc, struct erma_req *rq)
{
    struct session *s = rq->sess;
    erma_budget_give(rpc, &s->recv_held, erma_peer_recv_held(rpc, &s->peer), rq->charged);
    rq->charged = 0;
    erma_partial_remove(rpc, rq);
}

static void free_req_buf(struct erma_rpc *rpc, struct erma_req *rq)
{
    if (rq->charged)
        recv_done(rpc, rq);
    if (rq->owns_req)
        erma_msgbuf_free(rpc, &rq->req_buf);
    rq->owns_req = false;
    rq->data = NULL;
}

/* Forgets rq's request and response (keeps pre_resp for reuse). */
static void req_clear(struct erma_rpc *rpc, struct erma_req *rq)
{
    if (rq->resp == &rq->own_resp) {
        erma_ep_tx_flush(rpc->ep); /* the batch may still point into it */
        erma_msgbuf_free(rpc, &rq->own_resp);
    }
    free_req_buf(rpc, rq);
    rq->resp = NULL;
    rq->resp_pkts = 0;
    rq->responded = false;
    rq->err = ERMA_OK;
}

static void req_put(struct erma_rpc *rpc, struct erma_req *rq)
{
    req_clear(rpc, rq);
    rq->slot = NULL;
    rq->next = rpc->free_reqs;
    rpc->free_reqs = rq;
}

static struct erma_req *req_get(struct erma_rpc *rpc, struct session *s, struct slot *sl)
{
    struct erma_req *rq = rpc->free_reqs;
    if (rq) {
        rpc->free_reqs = rq->next;
    } else {
        if (!(rq = calloc(1, sizeof *rq)))
            return NULL;
        rq->rpc = rpc;
        rq->all = rpc->all_reqs;
        rpc->all_reqs = rq;
    }
    rq->sess = s;
    rq->slot = sl;
    rq->peer = s->peer;
    return rq;
}

/* Lets the slot's current request go: back to the free list, or, while a
 * handler holds it, on as an orphan whose answer goes nowhere. */
void erma_server_slot_free(struct erma_rpc *rpc, struct slot *sl)
{
    struct erma_req *rq = sl->rq;
    sl->rq = NULL;
    sl->srv_rx = 0;
    sl->srv_bits = 0;
    if (rq && rq->held)
        rq->slot = NULL;
    else if (rq)
        req_put(rpc, rq);
}

static void server_respond(struct erma_rpc *rpc, struct erma_req *rq)
{
    struct session *s = rq->sess;
    struct slot *sl = rq->slot;
    const uint32_t req_pkts = erma_msg_pkts(rq->size, rpc->pkt_data);
    free_req_buf(rpc, rq);
    rq->resp_pkts = erma_msg_pkts(rq->resp->size, rpc->pkt_data);
    for (uint32_t j = 0; j < rq->resp_pkts; j++)
        hdr_put(erma_msg_hdr(rq->resp, j), rq->type, rq->resp->size, s->remote_num, ERMA_PKT_RESP,
                req_pkts - 1 + j, sl->req_num);
    server_send_resp_pkt(rpc, s, rq, 0);
}

/* The handler that held rq has answered: send the response, unless rq is
 * an orphan (its slot took a newer request, or its session went). */
static void let_go(struct erma_rpc *rpc, struct erma_req *rq)
{
    rq->held = false;
    if (rq->slot)
        server_respond(rpc, rq);
    else
        req_put(rpc, rq);
}

int erma_req_respond(struct erma_req *rq, struct erma_msgbuf *resp)
{
    if (!rq || !resp || !resp->mem || resp->size > resp->max_size || rq->responded ||
        resp->pkt_data != rq->rpc->pkt_data)
        return ERMA_EINVAL;
    if (resp != &rq->pre_resp) {
        rq->own_resp = *resp;
        memset(resp, 0, sizeof *resp); /* erma owns the buffer now */
        resp = &rq->own_resp;
    }
    rq->resp = resp;
    rq->responded = true;
    if (rq->in_worker)
        return ERMA_OK; /* the loop sends it (erma_worker_response) */
    if (rq->held)
        let_go(rq->rpc, rq);
    else
        server_respond(rq->rpc, rq); /* answered inside the handler call */
    return ERMA_OK;
}

void erma_worker_response(struct erma_rpc *rpc, struct erma_req *rq)
{
    rq->in_worker = false;
    rpc->in_workers--;
    let_go(rpc, rq);
}

/* Keeps the request bytes past the RX buffer's lifetime. */
static int own_request(struct erma_rpc *rpc, struct erma_req *rq)
{
    if (rq->owns_req)
        return ERMA_OK;
    const int rc = erma_msgbuf_alloc(rpc, rq->size, &rq->req_buf);
    if (rc != ERMA_OK)
        return rc;
    memcpy(rq->req_buf.data, rq->data, rq->size);
    rq->data = rq->req_buf.data;
    rq->owns_req = true;
    return ERMA_OK;
}

static void server_call(struct erma_rpc *rpc, struct session *s, struct slot *sl)
{
    struct erma_req *rq = sl->rq;
    const struct handler *h = &rpc->nx->handlers[rq->type];
    if (rq->charged)
        recv_done(rpc, rq);
    if (!rq->pre_resp.mem && erma_msgbuf_alloc(rpc, rpc->pkt_data, &rq->pre_resp) != ERMA_OK)
        rq->err = ERMA_ENOMEM;
    else if (!h->fn)
        rq->err = ERMA_ENOENT;
    else if (h->mode == ERMA_WORKER && own_request(rpc, rq) != ERMA_OK)
        rq->err = ERMA_ENOMEM;
    if (rq->err != ERMA_OK) {
        server_send_error(rpc, s, sl);
        return;
    }
    rq->pre_resp.size = rq->pre_resp.max_size;
    rpc->stats.handler_calls++;
    if (h->mode == ERMA_WORKER) {
        /* The worker writes pre_resp: no packet in the batch may still be
         * reading this slot's last response from it. */
        erma_ep_tx_flush(rpc->ep);
        rq->in_worker = rq->held = true;
        rpc->in_workers++;
        erma_nexus_to_worker(rpc->nx, rq);
        return;
    }
    h->fn(rq, h->ctx);
    if (rq->responded)
        return;
    /* Answered later: the handler holds the request and its slot until then;
     * the bytes move out of the RX buffer (erma_req_data() follows them). */
    if (own_request(rpc, rq) != ERMA_OK) { /* the RX buffer goes: no bytes rather than others' */
        ERMA_WARN("rpc: no memory to keep a deferred request's %u bytes", rq->size);
        rq->data = NULL; /* (its size stays: the response's packet numbers follow it) */
    }
    rq->held = true;
}

/* A buffer for the slot's request of several packets, within the budgets;
 * else it is refused (ERMA_ENOBUFS to its client, nothing kept), or, with
 * no memory, dropped (the client will retransmit). */
static bool recv_buffer(struct erma_rpc *rpc, struct session *s, struct slot *sl)
{
    struct erma_req *rq = sl->rq;
    uint64_t *peer = erma_peer_recv_held(rpc, &s->peer);
    if (!erma_budget_take(rpc, &s->recv_held, peer, rq->size)) {
        rpc->stats.recv_refused++;
        rq->err = ERMA_ENOBUFS;
        server_send_error(rpc, s, sl);
        return false;
    }
    if (erma_msgbuf_alloc(rpc, rq->size, &rq->req_buf) != ERMA_OK) {
        erma_budget_give(rpc, &s->recv_held, peer, rq->size);
        return false;
    }
    rq->charged = rq->size;
    rq->owns_req = true;
    rq->data = rq->req_buf.data;
    return true;
}

void erma_partial_expire(struct erma_rpc *rpc, uint64_t now)
{
    for (struct erma_req *rq; (rq = erma_partial_stalled(rpc, now));) {
        rpc->stats.recv_expired++;
        free_req_buf(rpc, rq);
        rq->err = ERMA_ETIMEDOUT;
        server_send_error(rpc, rq->sess, rq->slot);
    }
}

/* A request packet i for the slot's current request. Packets may come in
 * any order within 64 of the first missing one: each is kept and answered
 * with its credit return; the handler runs once all have come. */
static void server_req_pkt(struct erma_rpc *rpc, struct session *s, struct slot *sl,
                           const struct erma_hdr *h, const struct erma_rx_pkt *pkt)
{
    struct erma_req *rq = sl->rq;
    const uint32_t i = h->pkt_num, req_pkts = erma_msg_pkts(rq->size, rpc->pkt_data);
    if (i >= sl->srv_rx + 64 || (rpc->cfg.go_back_n && i > sl->srv_rx)) {
        rpc->stats.rx_reordered++;
        return;
    }
    if (i < sl->srv_rx || (sl->srv_bits & bit(i - sl->srv_rx))) {
        /* a retransmission: answer again what is idempotent */
        rpc->stats.rx_dup++;
        if (i + 1 < req_pkts)
            server_send_cr(rpc, s, sl, i);
        else if (rq->err != ERMA_OK)
            server_send_error(rpc, s, sl);
        else if (!rq->held && rq->responded) /* a worker may be writing responded */
            server_send_resp_pkt(rpc, s, rq, 0);
        return;
    }
    const uint8_t *data = pkt->data + ERMA_HDR_SIZE;
    const uint32_t len = pkt->len - ERMA_HDR_SIZE;
    if (req_pkts == 1) {
        rq->data = data; /* processed in the RX buffer */
    } else {
        if (!rq->owns_req && !recv_buffer(rpc, s, sl))
            return;
        memcpy(rq->req_buf.data + (size_t)i * rpc->pkt_data, data, len);
        erma_partial_touch(rpc, rq);
    }
    if (i != sl->srv_rx)
        rpc->stats.rx_reordered++;
    sl->srv_bits |= bit(i - sl->srv_rx);
    while (sl->srv_bits & 1) {
        sl->srv_bits >>= 1;
        sl->srv_rx++;
    }
    if (i + 1 < req_pkts)
        server_send_cr(rpc, s, sl, i);
    if (sl->srv_rx == req_pkts)
        server_call(rpc, s, sl);
}

/* A new request on sl: the last one was delivered (or given up on). */
static struct erma_req *server_new_req(struct erma_rpc *rpc, struct session *s, struct slot *sl,
                                       const struct erma_hdr *h)
{
    struct erma_req *rq = sl->rq;
    if (rq && !rq->held) {
        req_clear(rpc, rq);
    } else {
        erma_server_slot_free(rpc, sl);
        if (!(rq = sl->rq = req_get(rpc, s, sl)))
            return NULL; /* dropped; the client will retransmit */
    }
    sl->srv_rx = 0;
    sl->srv_bits = 0;
    sl->req_num = h->req_num;
    rq->type = h->req_type;
    rq->size = h->msg_size;
    return rq;
}

static void server_rx(struct erma_rpc *rpc, struct session *s, const struct erma_hdr *h,
                      const struct erma_rx_pkt *pkt)
{
    struct slot *sl = &s->slots[h->req_num % ERMA_SESSION_SLOTS];
    struct erma_req *rq = sl->rq;
    if (foreign(s, sl, h->req_num, REQ_AHEAD)) {
        rpc->stats.rx_other_session++;
        return;
    }
    if (h->req_num < sl->req_num || (!rq && h->req_num == sl->req_num)) {
        rpc->stats.rx_stale++;
        return;
    }
    if (h->req_num > sl->req_num) {
        /* any request packet starts it: the client sends the slot's next
         * request only once it had the whole last response */
        if (h->pkt_type != ERMA_PKT_REQ) {
            rpc->stats.rx_stale++;
            return;
        }
        if (!(rq = server_new_req(rpc, s, sl, h)))
            return;
    }
    if (h->msg_size != rq->size && h->pkt_type == ERMA_PKT_REQ) {
        rpc->stats.rx_bad++; /* its size disagrees with the request's first packet */
        return;
    }
    if (rq->err != ERMA_OK) { /* failed, refused or dropped: each packet learns so */
        server_send_error(rpc, s, sl);
        return;
    }
    if (h->pkt_type == ERMA_PKT_REQ) {
        server_req_pkt(rpc, s, sl, h, pkt);
        return;
    }
    /* RFR for response packet j */
    const uint32_t req_pkts = erma_msg_pkts(rq->size, rpc->pkt_data);
    const uint32_t j = h->pkt_num + 1 - req_pkts;
    /* held: a worker may be writing the response, resp_pkts is the last one's */
    if (rq->held || !rq->responded || h->pkt_num < req_pkts || j >= rq->resp_pkts) {
        rpc->stats.rx_stale++;
        return;
    }
    server_send_resp_pkt(rpc, s, rq, j);
}

/* Checks a packet's length against what its header says it carries. */
static bool length_ok(const struct erma_hdr *h, uint32_t len, uint32_t pkt_data)
{
    const uint32_t data = len - ERMA_HDR_SIZE;
    if (h->pkt_type == ERMA_PKT_CR)
        return data == CR_ACK_LEN;
    if (h->pkt_type == ERMA_PKT_RFR)
        return data == 0;
    if (h->pkt_type == ERMA_PKT_REQ && h->pkt_num >= erma_msg_pkts(h->msg_size, pkt_data))
        return false;
    /* data packets: full except the last of their message */
    const uint32_t k = h->pkt_type == ERMA_PKT_REQ ? h->pkt_num : 0;
    const uint32_t off = k * pkt_data;
    const uint32_t want = h->msg_size - off < pkt_data ? h->msg_size - off : pkt_data;
    return h->pkt_type == ERMA_PKT_RESP || data == want;
}

/* Opens a secure session's packet in place (shortening *len); false, and
 * counted, for a forgery or a replay. */
bool erma_rx_open(struct erma_rpc *rpc, struct session *s, uint8_t *pkt, uint32_t *len)
{
    const int rc = erma_open(&s->seal, pkt, len);
    if (rc == ERMA_EAGAIN)
        rpc->stats.rx_replayed++;
    else if (rc != ERMA_OK)
        rpc->stats.rx_auth_failed++;
    return rc == ERMA_OK;
}

void erma_rpc_rx(struct erma_rpc *rpc, const struct erma_hdr *h, const struct erma_rx_pkt *pkt)
{
    const bool secure = rpc->nx->secure; /* lengths are known once a packet is opened */
    if (!secure && !length_ok(h, pkt->len, rpc->pkt_data)) {
        rpc->stats.rx_bad++;
        return;
    }
    struct session *s = erma_session_get(rpc, h->dest_session);
    const bool to_server = h->pkt_type == ERMA_PKT_REQ || h->pkt_type == ERMA_PKT_RFR;
    const int path = s ? erma_session_path(rpc, s, &pkt->src) : -1;
    if (!s || s->state != CONNECTED || s->role != (to_server ? SERVER : CLIENT) || path < 0) {
        rpc->stats.rx_no_session++;
        return;
    }
    struct erma_rx_pkt plain = *pkt;
    if (secure && !erma_rx_open(rpc, s, plain.data, &plain.len))
        return;
    pkt = &plain;
    if (secure && !length_ok(h, pkt->len, rpc->pkt_data)) {
        rpc->stats.rx_bad++;
        return;
    }
    s->last_rx_ns = rpc->ep->now;
    s->tx_path = (uint8_t)path; /* a server answers on the path the packet came on */
    if (to_server)
        server_rx(rpc, s, h, pkt);
    else
        client_rx(rpc, s, h, pkt);
}

int erma_session_cc_stats(const struct erma_rpc *rpc, int num, struct erma_session_cc *out)
{
    const struct session *s = rpc && out && num >= 0 && (uint32_t)num < rpc->nsessions
                                  ? rpc->sessions[num] : NULL;
    if (!s || s->role != CLIENT || s->state == FREE)
        return ERMA_ENOENT;
    const struct erma_timely *t = &s->timely;
    *out = (struct erma_session_cc){.rate_bps = t->rate_bps, .avg_rtt_ns = t->avg_rtt_ns,
                                    .last_rtt_ns = t->last_rtt_ns, .min_rtt_ns = t->min_rtt_ns,
                                    .rtt_samples = s->rtt_samples,
                                    .timely_updates = t->updates,
                                    .timely_bypasses = t->bypasses,
                                    .paced_pkts = s->paced_pkts, .direct_pkts = s->direct_pkts};
    return ERMA_OK;
}

/* ---- request handle accessors ---- */

const uint8_t *erma_req_data(const struct erma_req *rq)
{
    return rq->data;
}

size_t erma_req_size(const struct erma_req *rq)
{
    return rq->size;
}

uint8_t erma_req_type(const struct erma_req *rq)
{
    return rq->type;
}

struct erma_rpc *erma_req_rpc(const struct erma_req *rq)
{
    return rq->rpc;
}

int erma_req_peer_uri(const struct erma_req *rq, char *out, size_t len)
{
    return rq ? erma_transport_addr_str(rq->rpc->ep->tr, &rq->peer, out, len) : ERMA_EINVAL;
}

struct erma_msgbuf *erma_req_resp_buf(struct erma_req *rq)
{
    return &rq->pre_resp;
}
