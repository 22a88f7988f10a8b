/* The client's receiving: credit returns and response packets, the RTT
 * samples they give Timely and the virtual paths, and loss recovery (fast
 * retransmits, timeouts with backoff, request timeouts). */
#include <string.h>

#include "client.h"
#include "erma/log.h"

/* Timeouts in a row without a reply double a slot's timeout, up to 64 x. */
#define MAX_BACKOFF 6

/* Requests in a row a slot gives up on (cfg.req_timeout_ns) without any
 * reply before its session is failed: past REQ_AHEAD its server would take
 * the slot's next request for another session's, and drop it. */
#define MAX_UNHEARD ((uint32_t)(REQ_AHEAD / ERMA_SESSION_SLOTS) - 1)

/* A pruned path rests PRUNE_RTOS timeouts, twice that after each prune. */
#define PRUNE_RTOS 4

static uint64_t path_rest(const struct erma_rpc *rpc)
{
    return PRUNE_RTOS * rpc->cfg.rto_ns;
}

/* The retransmission timeout's estimate (rpc.h, Busy hosts): the longest
 * round trip lately halves every RTO_STALL_HALF_NS; the estimate is at
 * most RTO_MAX x cfg.rto_ns. */
#define RTO_STALL_HALF_NS 100000000ull
#define RTO_MAX 32

static uint64_t stall_now(const struct sess_cc *cc, uint64_t now)
{
    const uint64_t halvings = since(now, cc->stall_at_ns) / RTO_STALL_HALF_NS;
    return halvings < 64 ? cc->stall_ns >> halvings : 0;
}

/* A whole round trip (RFC 6298's smoothing, and the longest lately). */
static void rto_sample(struct sess_cc *cc, uint64_t rtt, uint64_t now)
{
    if (!cc->srtt_ns) {
        cc->srtt_ns = rtt;
        cc->rttvar_ns = rtt / 2;
    } else {
        const uint64_t err = rtt > cc->srtt_ns ? rtt - cc->srtt_ns : cc->srtt_ns - rtt;
        cc->rttvar_ns = (3 * cc->rttvar_ns + err) / 4;
        cc->srtt_ns = (7 * cc->srtt_ns + rtt) / 8;
    }
    if (rtt >= stall_now(cc, now)) {
        cc->stall_ns = rtt;
        cc->stall_at_ns = now;
    }
}

static uint64_t session_rto(const struct erma_rpc *rpc, const struct session *s, uint64_t now)
{
    const struct sess_cc *cc = &s->cc;
    uint64_t rto = cc->srtt_ns + 4 * cc->rttvar_ns;
    const uint64_t stall = 2 * stall_now(cc, now);
    rto = stall > rto ? stall : rto;
    rto = rto < rpc->cfg.rto_ns ? rpc->cfg.rto_ns : rto;
    return rto < RTO_MAX * rpc->cfg.rto_ns ? rto : RTO_MAX * rpc->cfg.rto_ns;
}

/* The slot's timeout: the session's RTO doubled per timeout in a row, at
 * most 64 x rto_ns (the longest wait before a resend, as before the RTO
 * adapted). */
static uint64_t slot_timeout_ns(const struct erma_rpc *rpc, const struct session *s,
                                const struct client_slot *c, uint64_t now)
{
    const uint64_t t = session_rto(rpc, s, now) << c->backoff, cap = rpc->cfg.rto_ns << MAX_BACKOFF;
    return t < cap ? t : cap;
}

static void path_lost(struct erma_rpc *rpc, struct session *s, uint64_t lost,
                      const struct client_slot *c)
{
    for (lost = s->ps.n > 1 ? lost : 0; lost; lost &= lost - 1) {
        const uint32_t i = c->num_rx + (uint32_t)__builtin_ctzll(lost);
        rpc->stats.paths_pruned += erma_paths_lost(&s->ps, c->tx_path[i % ERMA_MAX_CREDITS],
                                                   rpc->ep->now, path_rest(rpc));
    }
}

/* Queues the packets of lost (bit k: packet num_rx + k, each without a
 * reply) to be sent again, first of all, giving back their credits. */
static void slot_resend(struct erma_rpc *rpc, struct session *s, struct client_slot *c,
                        uint64_t lost)
{
    const uint32_t n = (uint32_t)__builtin_popcountll(lost);
    s->credits += n;
    rpc->stats.retransmitted_pkts += n;
    c->resend |= lost;
    c->again |= lost;
}

/* A response buffer of size bytes in place of the caller's, within the
 * session's and the endpoint's budgets (the server declared the size).
 * Out of line, as the rare paths below: erma__client_rx, which inlines
 * the rest, needs fewer registers. */
__attribute__((noinline)) static int client_grow_resp(struct erma_rpc *rpc, struct session *s,
                                                      struct client_slot *c, uint32_t size)
{
    erma__budget_give(rpc, &s->recv_held, NULL, c->charged); /* an earlier first packet's */
    c->charged = 0;
    if (!erma__budget_take(rpc, &s->recv_held, NULL, size)) {
        rpc->stats.recv_refused++;
        return ERMA_ENOBUFS;
    }
    erma_msgbuf_free(rpc, c->resp);
    if (erma_msgbuf_alloc(rpc, size, c->resp) != ERMA_OK) {
        erma__budget_give(rpc, &s->recv_held, NULL, size);
        return ERMA_ENOMEM;
    }
    c->charged = size;
    return ERMA_OK;
}

/* Accepts response packet j (data in pkt) into the slot's response buffer. */
static int client_take_resp(struct erma_rpc *rpc, struct session *s, struct client_slot *c,
                            const struct erma_hdr *h, const uint8_t *data, uint32_t len,
                            uint32_t j)
{
    struct erma_msgbuf *resp = c->resp;
    if (j == 0) {
        if (h->msg_size > resp->max_size || resp->pkt_data != rpc->pkt_data) {
            const int rc = client_grow_resp(rpc, s, c, h->msg_size);
            if (rc != ERMA_OK)
                return rc;
        }
        resp->size = h->msg_size;
        c->resp_pkts = erma__msg_pkts(h->msg_size, rpc->pkt_data);
    } else if (h->msg_size != resp->size || j >= c->resp_pkts) {
        return ERMA_EBADPKT;
    }
    const uint8_t *dst;
    uint32_t want;
    erma__msg_pkt_span(resp, j, &dst, &want);
    if (len != want)
        return ERMA_EBADPKT;
    memcpy((uint8_t *)dst, data, len);
    return ERMA_OK;
}

/* True when this sample says nothing of the network: a host on the path
 * is busy (this sample's queueing in the hosts, or another's lately, above
 * t_low: the client's own wait and a credit return's host delay; a
 * response's includes its handler, which is work, not a queue) and the
 * network's part is no faster than t_low. A loop descheduled
 * inside a send or between its reading of the clock and the kernel's
 * stamp makes delays no stamp sees, as long as a time slice; while the
 * host is this busy the credits bound its load, and Timely only rises. */
static bool host_busy(struct erma_rpc *rpc, struct session *s, uint64_t queued, uint64_t net)
{
    const uint64_t t_low = rpc->cc.timely_cfg.t_low_ns, now = rpc->ep->now;
    if (queued > t_low)
        erma__host_busy(s, now);
    if (net < t_low || now >= s->cc.busy_until_ns)
        return false;
    s->cc.busy_samples++;
    return true;
}

/* An RTT sample from the reply to packet i feeds Timely; none from a
 * packet sent again, whose reply may answer either copy (Karn). A reply
 * to a copy sent sooner than half the smallest RTT ago answers the first
 * one: the loss was reordering, and fast retransmits wait for more. */
static void cc_sample(struct erma_rpc *rpc, struct session *s, struct client_slot *c, uint32_t i,
                      const struct erma_hdr *h, const struct erma_rx_pkt *pkt)
{
    const uint64_t now = cc_now(rpc);
    const uint32_t elapsed = (uint32_t)now - c->tx_ns[i % ERMA_MAX_CREDITS]; /* mod 2^32 */
    if ((int32_t)elapsed < 0)
        return; /* sent after now by this clock: no sample */
    const uint64_t rtt = elapsed ? elapsed : 1;
    const uint64_t own = pkt->rx_ns && pkt->rx_ns < now ? now - pkt->rx_ns : 0;
    const uint64_t server = erma_delay_decode(h->host_delay), host = server + own;
    const uint64_t net = rtt > host ? rtt - host : 1; /* the network's part */
    if (c->again & bit(i - c->num_rx)) {
        if (2 * net >= s->cc.min_rtt_ns)
            return;
        if (!(c->timed & bit(i - c->num_rx))) {
            rpc->stats.spurious_retransmits++;
            s->client.dupthresh = s->client.dupthresh < WINDOW / 2 ? 2 * s->client.dupthresh
                                                                   : WINDOW;
        } else if (c->waited_ns) { /* the first reply since the timeout: count it once */
            rpc->stats.spurious_timeouts++;
            rto_sample(&s->cc, rtt + c->waited_ns, rpc->ep->now); /* the first copy's, at least */
        }
        return;
    }
    rto_sample(&s->cc, rtt, rpc->ep->now);
    if (host >= rtt)
        return; /* the clocks disagree (or a peer lies): nothing of the network */
    if (net < s->cc.min_rtt_ns || !s->cc.min_rtt_ns)
        s->cc.min_rtt_ns = net;
    const uint32_t newest = c->rx_bits ? c->num_rx + 63 - (uint32_t)__builtin_clzll(c->rx_bits)
                                       : i;
    if (s->ps.n > 1) {
        const uint8_t p = c->tx_path[i % ERMA_MAX_CREDITS];
        rpc->stats.paths_pruned += erma_paths_sample(&s->ps, p, net, newest > i ? newest - i : 0,
                                                     rpc->ep->now, path_rest(rpc));
        if (s->ps.p[p].pruned_until)
            return; /* a path that stands out says nothing of the others' congestion */
    }
    s->cc.rtt_samples++;
    const uint64_t queued = own + (h->pkt_type == ERMA_PKT_CR ? server : 0);
    if (!rpc->cfg.cc.off && !host_busy(rpc, s, queued, net))
        erma_timely_update(&s->cc.timely, net, now);
    if (rpc->cfg.rtt_hook)
        rpc->cfg.rtt_hook(rpc->cfg.rtt_ctx, s->num, net);
}

/* Marks the reply to packet i received (it returns its credit); the
 * first unanswered packet moves past every reply received without a gap. */
static void client_mark(struct session *s, struct client_slot *c, uint32_t i)
{
    const uint64_t b = bit(i - c->num_rx);
    c->unheard = 0;
    if (s->ps.n > 1) /* its path delivers */
        s->ps.p[c->tx_path[i % ERMA_MAX_CREDITS]].probe = ERMA_PROBE_NONE;
    c->rx_bits |= b;
    if (c->resend & b) { /* it came after all: its credit came back at the timeout */
        c->resend &= ~b;
    } else {
        s->credits++;
        if (s->ps.n > 1)
            path_done(s, c, i);
    }
    while (c->rx_bits & 1) {
        c->rx_bits >>= 1;
        c->resend >>= 1;
        c->again >>= 1;
        c->timed >>= 1;
        c->num_rx++;
    }
}

/* Marks the replies to every packet before i received. */
__attribute__((noinline)) static void client_mark_before(struct session *s,
                                                         struct client_slot *c, uint32_t i)
{
    while (c->num_rx < i)
        client_mark(s, c, c->num_rx);
}

/* A CR's arrival bitmap: request packets the server has whose own CRs
 * were lost (or are late) are answered too. Never the last request
 * packet: response packet 0 answers it. */
static void client_take_acks(struct session *s, struct client_slot *c, const uint8_t *ack)
{
    const uint32_t crs = c->req_pkts - 1 < c->num_tx ? c->req_pkts - 1 : c->num_tx;
    const uint32_t top = (uint32_t)erma_get_le(ack, 4);
    uint64_t bits = erma_get_le(ack + 4, 8);
    while (c->num_rx < top && c->num_rx < crs)
        client_mark(s, c, c->num_rx);
    for (; bits; bits &= bits - 1) {
        const uint64_t j = top + (uint64_t)__builtin_ctzll(bits);
        if (j >= crs)
            break;
        if (j >= c->num_rx && !(c->rx_bits & bit((uint32_t)(j - c->num_rx))))
            client_mark(s, c, (uint32_t)j);
    }
}

/* Fast retransmit: a path delivers in order, so a packet sent once and
 * still without a reply once the replies to dupthresh packets sent after
 * it on its path came was lost; it goes again now, not at the timeout.
 * (Paths differ in delay: packets on different ones say nothing of each
 * other.) A packet sent again already waits for the timeout. Called for
 * a reply to packet i >= num_rx + dupthresh only. */
__attribute__((noinline)) static void client_fast_resend(struct erma_rpc *rpc,
                                                         struct session *s,
                                                         struct client_slot *c, uint32_t i)
{
    const uint32_t top = i - c->num_rx;
    const uint64_t cand = slot_unanswered(c) & ~c->again & (bit(top) - 1);
    if (!cand)
        return;
    const uint8_t path = c->tx_path[i % ERMA_MAX_CREDITS];
    uint64_t lost = 0;
    uint32_t later = 1; /* replies to packets after k on the path: i's first */
    for (uint32_t k = top; k-- > 0;) {
        if (c->tx_path[(c->num_rx + k) % ERMA_MAX_CREDITS] != path)
            continue;
        if (c->rx_bits & bit(k))
            later++;
        else if ((cand & bit(k)) && later >= s->client.dupthresh)
            lost |= bit(k);
    }
    if (!lost)
        return;
    path_lost(rpc, s, lost, c);
    slot_resend(rpc, s, c, lost);
    rpc->stats.fast_retransmits += (uint32_t)__builtin_popcountll(lost);
}

void erma__client_rx(struct erma_rpc *rpc, struct session *s, const struct erma_hdr *h,
                     const struct erma_rx_pkt *pkt)
{
    struct slot *sl = &s->slots[h->req_num % ERMA_SESSION_SLOTS];
    struct client_slot *c = &sl->client;
    const uint32_t i = h->pkt_num;
    if (foreign(s, sl, h->req_num, 0)) {
        rpc->stats.rx_other_session++;
        return;
    }
    if (!erma__slot_busy(s, sl) || sl->req_num != h->req_num || i >= c->num_tx) {
        rpc->stats.rx_stale++;
        return;
    }
    if (i < c->num_rx || (c->rx_bits & bit(i - c->num_rx))) {
        rpc->stats.rx_dup++;
        return;
    }
    const uint32_t len = pkt->len - ERMA_HDR_SIZE;
    const bool is_cr = i + 1 < c->req_pkts;
    if (is_cr != (h->pkt_type == ERMA_PKT_CR) || (is_cr && len != CR_ACK_LEN)) {
        rpc->stats.rx_bad++;
        return;
    }
    if (rpc->cfg.go_back_n && i != c->num_rx && i + 1 != c->req_pkts) {
        rpc->stats.rx_reordered++; /* go-back-N: only the next reply is taken */
        return;
    }
    if (!is_cr) {
        const int rc = client_take_resp(rpc, s, c, h, pkt->data + ERMA_HDR_SIZE, len,
                                        i + 1 - c->req_pkts);
        if (rc == ERMA_ENOMEM || rc == ERMA_ENOBUFS) {
            erma__slot_finish(rpc, s, sl, rc);
            return;
        }
        if (rc != ERMA_OK) {
            rpc->stats.rx_bad++;
            return;
        }
    }
    if (i != c->num_rx)
        rpc->stats.rx_reordered++;
    cc_sample(rpc, s, c, i, h, pkt);
    /* The first response packet says the server has every request packet:
     * credit returns still missing were lost, or are late duplicates
     * (num_rx is always the first packet without a reply). */
    if (!is_cr && i + 1 == c->req_pkts && c->num_rx < i)
        client_mark_before(s, c, i);
    client_mark(s, c, i);
    if (is_cr)
        client_take_acks(s, c, pkt->data + ERMA_HDR_SIZE);
    c->backoff = 0;
    c->waited_ns = 0;
    if (!rpc->cfg.go_back_n && i >= c->num_rx + s->client.dupthresh)
        client_fast_resend(rpc, s, c, i);
    if (s->ps.n > 1)
        s->ps.clock = (int8_t)pkt->path; /* the next packet goes where this one left */
    c->progress_ns = rpc->ep->now;
    if (!is_cr && c->num_rx == client_total_tx(c))
        erma__slot_finish(rpc, s, sl, ERMA_OK);
    erma__client_kick(rpc, s);
}

void erma__client_req_error(struct erma_rpc *rpc, struct session *s, uint64_t req_num, int err)
{
    struct slot *sl = &s->slots[req_num % ERMA_SESSION_SLOTS];
    if (!erma__slot_busy(s, sl) || sl->req_num != req_num || err >= 0 || err <= ERMA_ERR_LAST)
        return;
    sl->client.unheard = 0;
    erma__slot_finish(rpc, s, sl, err);
    erma__client_kick(rpc, s);
}

/* The slot's unanswered packets, a timeout after its last progress:
 * selective, only the packets without a reply go again; only the first is
 * surely lost: the rest may wait behind it in queues (and a loss on every
 * path would prune them all). */
static void slot_timeout(struct erma_rpc *rpc, struct session *s, struct client_slot *c,
                         uint64_t now)
{
    c->waited_ns += since(now, c->progress_ns); /* since the first of a row */
    const uint64_t out = slot_unanswered(c);
    path_lost(rpc, s, out & -out, c);
    paths_done(s, c, out & (out - 1));
    slot_resend(rpc, s, c, out);
    c->timed |= out;
    c->progress_ns = now;
    c->backoff += c->backoff < MAX_BACKOFF; /* the path may be slower than rto_ns */
    rpc->stats.retransmits++;
}

bool erma__client_scan(struct erma_rpc *rpc, struct session *s, uint64_t now)
{
    bool kick = false, deaf = false;
    for (unsigned k = 0; k < ERMA_SESSION_SLOTS; k++) {
        struct slot *sl = &s->slots[k];
        struct client_slot *c = &sl->client;
        if (!erma__slot_busy(s, sl))
            continue;
        if (rpc->cfg.req_timeout_ns && since(now, c->start_ns) > rpc->cfg.req_timeout_ns) {
            c->unheard = c->num_rx || c->rx_bits ? 0 : c->unheard + 1;
            deaf |= c->unheard >= MAX_UNHEARD;
            erma__slot_finish(rpc, s, sl, ERMA_ETIMEDOUT);
            kick = true;
        } else if (slot_unanswered(c) &&
                   since(now, c->progress_ns) > slot_timeout_ns(rpc, s, c, now)) {
            slot_timeout(rpc, s, c, now);
            kick = true;
        }
    }
    if (deaf) {
        ERMA_INFO("rpc: session %u: %u requests in a row on one slot had no reply, declared "
                  "failed", s->num, MAX_UNHEARD);
        return true;
    }
    if (kick)
        erma__client_kick(rpc, s);
    return false;
}
