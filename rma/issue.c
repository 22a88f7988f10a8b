/* rma/issue.c - the initiator's ops leave: queued ops issued by priority
 * into the TX batch under the inbound (solicitation) window, READ chunks
 * paced by the answers they bring in, dispatch timeouts in the queue and
 * op timeouts in flight. */
#include "portal.h"

struct rma_ophdr erma__portal_ophdr(const struct erma_rma *rma, const struct slot *s,
                                    uint8_t type)
{
    const uint8_t fence = type == RMA_WRITE_REQ && s->fence ? RMA_FLAG_FENCE : 0;
    return (struct rma_ophdr){.type = type, .flags = (uint8_t)(fence | RMA_FLAG_PATH(s->path)),
                              .slot = (uint16_t)(s - rma->portal->slots),
                              .region = s->rkey.region, .key_gen = s->rkey.key_gen,
                              .offset = s->offset, .identity = rma->cfg.identity,
                              .init_ctr = s->init_ctr, .len = s->len,
                              .deadline = s->wire_deadline};
}

uint64_t erma__portal_inbound(const struct erma_rma *rma)
{
    return rma->portal->inbound + rma->portal->queued_in;
}

/* How long this host's link takes to bring in a READ's answer of len
 * bytes: its packets, erma and frame headers included, at the line rate. */
static uint64_t answer_ns(const struct erma_rma *rma, uint32_t len)
{
    const struct erma_transport_hints *h = &rma->tr->hints;
    const uint64_t pkts = (len + rma->pkt_data - 1) / rma->pkt_data;
    const uint64_t wire = len + pkts * (RMA_OVERHEAD + h->frame_overhead);
    return h->link_bps ? wire * 8000000000ull / h->link_bps : 0;
}

/* When the queued op s may issue: now, later for a transfer's READ (the
 * executor's chunks solicit no faster than this host's link brings the
 * answers in, so that they wait here, as issue_delay the local window acts
 * on, rather than in the switch's queue towards this host, which every
 * inbound flow would read as its destination's congestion), or UINT64_MAX
 * while the solicitation window has no room. Commands are not paced (they
 * wait behind a paced chunk of their own priority), nor are chunks with
 * merged windows: without a local window this wait would act on no one
 * (hooks.paced). */
static uint64_t issue_at(const struct erma_rma *rma, const struct slot *s)
{
    const struct rma_portal *p = rma->portal;
    const uint64_t now = rma->ep->now;
    if (s->op != ERMA_RMA_READ)
        return now;
    if (p->inbound + s->len > rma->cfg.inbound_window)
        return UINT64_MAX;
    const bool paced = s->chunk && p->hooks.paced;
    return paced && p->answers_at_ns > now ? p->answers_at_ns : now;
}

uint64_t erma__portal_burst_ns(const struct erma_rma *rma)
{
    return answer_ns(rma, ERMA_MAX_BURST * rma->pkt_data);
}

/* Every READ's answer takes the link; a burst of commands delays the
 * chunks behind it by at most half a dispatch timeout. A chunk is paced
 * from when its windows let it go (a burst ago at most), not from the loop
 * pass that issues it: a pass longer than an answer's time then issues
 * every chunk that came due in it, rather than one per pass, which held
 * the rate to the loop's. With timers on time this changes nothing. */
static void pace(struct erma_rma *rma, const struct slot *s)
{
    struct rma_portal *p = rma->portal;
    uint64_t from = s->issue_ns;
    if (s->chunk && s->due_ns < from)
        from = erma__rma_catch_up(s->due_ns, from, erma__portal_burst_ns(rma));
    from = p->answers_at_ns > from ? p->answers_at_ns : from;
    const uint64_t cap = s->issue_ns + rma->cfg.dispatch_timeout_ns / 2;
    p->answers_at_ns = from + answer_ns(rma, s->len);
    if (!s->chunk && p->answers_at_ns > cap)
        p->answers_at_ns = cap > from ? cap : from;
}

static void issue(struct erma_rma *rma, struct slot *s)
{
    static const uint8_t req_type[] = {
        [ERMA_RMA_READ] = RMA_READ_REQ, [ERMA_RMA_WRITE] = RMA_WRITE_REQ,
        [ERMA_RMA_REKEY] = RMA_REKEY_REQ};
    struct rma_portal *p = rma->portal;
    const int32_t i = (int32_t)(s - p->slots);
    erma__list_remove(&p->queued[s->prio], p->slots, i);
    p->nqueued--;
    s->init_ctr = rma->ctr + 1; /* the request's own nonce counter */
    s->path = erma__path_pick(rma, s->peer);
    uint64_t timeout = erma__peer_op_timeout(rma, s->peer, s->op);
    timeout = timeout < RMA_MAX_TTL_NS ? timeout : RMA_MAX_TTL_NS; /* a WRITE's 2 RTOs */
    s->issue_ns = s->sent_ns = rma->ep->now;
    s->host_ns = 0;
    s->deadline_ns = rma->ep->now + timeout;
    s->wire_deadline = erma__rma_wire_now(rma) + timeout;
    struct rma_ophdr h = erma__portal_ophdr(rma, s, req_type[s->op]);
    erma__rma_send(rma, &p->peers[s->peer].addr, &h, s->rkey.kd, s->rkey.cipher, 0, NULL, 0);
    s->state = SLOT_ISSUED;
    if (s->op == ERMA_RMA_READ) {
        p->inbound += s->len;
        p->queued_in -= s->len;
        pace(rma, s);
    }
    erma__heap_push(rma, i);
    rma->stats.issued++;
}

/* The first op the solicitation window cannot take blocks the rest, so
 * large reads are not starved by small ones; a READ chunk the pacer holds
 * blocks only its own priority. */
int erma__portal_issue(struct erma_rma *rma, int work)
{
    struct rma_portal *p = rma->portal;
    for (int q = 0; q < ERMA_RMA_PRIORITIES && p->nqueued; q++)
        for (int32_t h; (h = p->queued[q].head) >= 0 && work < 2 * ERMA_MAX_BURST; work++) {
            const uint64_t at = issue_at(rma, &p->slots[h]);
            if (at == UINT64_MAX)
                return work;
            if (at > rma->ep->now)
                break;
            issue(rma, &p->slots[h]);
        }
    return work;
}

/* ---- timeouts ---- */

/* A pass right after the loop stalled (descheduled, or a sleep past its
 * timer), or whose RX burst was full, may leave answers unread: timeouts
 * then wait a pass, at most 16 passes in a row. */
#define RMA_STALL_NS 100000
#define RMA_MAX_DEFERRALS 16

static bool defer_timeouts(struct erma_rma *rma, bool rx_full)
{
    struct rma_portal *p = rma->portal;
    const bool stalled = rma->ep->now - p->last_poll_ns > RMA_STALL_NS;
    p->last_poll_ns = rma->ep->now;
    if (erma__heap_first_deadline(p) > rma->ep->now)
        return false;
    if ((stalled || rx_full) && p->deferrals < RMA_MAX_DEFERRALS) {
        p->deferrals++;
        return true;
    }
    p->deferrals = 0;
    return false;
}

static void time_out(struct erma_rma *rma, struct slot *s)
{
    erma__peer_backoff(rma, s->peer,
                       (s->deadline_ns - s->issue_ns) / (s->op == ERMA_RMA_READ ? 1 : 2));
    erma__portal_finish(rma, s, ERMA_ETIMEDOUT);
}

int erma__portal_work(struct erma_rma *rma, bool rx_full)
{
    struct rma_portal *p = rma->portal;
    int work = 0;
    const uint64_t now = rma->ep->now;
    for (int q = 0; q < ERMA_RMA_PRIORITIES && p->nqueued; q++)
        for (int32_t h; (h = p->queued[q].head) >= 0 &&
                        now - p->slots[h].queued_ns >= rma->cfg.dispatch_timeout_ns;
             work++)
            erma__portal_finish(rma, &p->slots[h], ERMA_EDISPATCH);
    work = erma__portal_issue(rma, work);
    if (defer_timeouts(rma, rx_full))
        return work + 1;
    for (; erma__heap_first_deadline(p) <= now; work++)
        time_out(rma, &p->slots[erma__heap_first(p)]);
    return work;
}

uint64_t erma__portal_queued_timer(const struct erma_rma *rma)
{
    const struct rma_portal *p = rma->portal;
    uint64_t t = UINT64_MAX;
    bool blocked = false; /* as erma__portal_issue: nothing after it issues */
    for (int q = 0; q < ERMA_RMA_PRIORITIES && p->nqueued; q++) {
        const int32_t h = p->queued[q].head;
        if (h < 0)
            continue;
        const uint64_t d = p->slots[h].queued_ns + rma->cfg.dispatch_timeout_ns;
        t = d < t ? d : t;
        if (blocked)
            continue;
        const uint64_t at = issue_at(rma, &p->slots[h]);
        if (at <= rma->ep->now)
            return rma->ep->now;
        blocked = at == UINT64_MAX;
        t = at < t ? at : t;
    }
    const uint64_t d = erma__heap_first_deadline(p);
    return d < t ? d : t;
}
