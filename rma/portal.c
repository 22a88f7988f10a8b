/* rma/portal.c - the initiator: command slots, the local queue by priority,
 * issue under the solicitation window, answers, timeouts and completions. */
#include <stdlib.h>
#include <string.h>

#include "erma/clock.h"
#include "internal.h"

/* ---- slot lists (queues by priority, in flight) linked by index ---- */

static void list_push(struct list *l, struct slot *slots, int32_t i)
{
    slots[i].prev = l->tail;
    slots[i].next = -1;
    if (l->tail >= 0)
        slots[l->tail].next = i;
    else
        l->head = i;
    l->tail = i;
}

static void list_remove(struct list *l, struct slot *slots, int32_t i)
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
    rma->nfree = n;
    for (int p = 0; p < ERMA_RMA_PRIORITIES; p++)
        rma->queued[p] = (struct list){-1, -1};
    rma->fenced = (struct list){-1, -1};
    rma->heap = malloc(n * sizeof *rma->heap);
    return rma->heap ? ERMA_OK : ERMA_ENOMEM;
}

void erma_portal_fini(struct erma_rma *rma)
{
    free(rma->slots);
    free(rma->cq);
    free(rma->heap);
}

/* ---- ops in flight: a min-heap by deadline (timeouts differ by peer) ---- */

static void heap_set(struct erma_rma *rma, uint32_t pos, int32_t i)
{
    rma->heap[pos] = i;
    rma->slots[i].heap_idx = (int32_t)pos;
}

static uint64_t heap_key(const struct erma_rma *rma, uint32_t pos)
{
    return rma->slots[rma->heap[pos]].deadline_ns;
}

static void heap_up(struct erma_rma *rma, uint32_t pos)
{
    const int32_t i = rma->heap[pos];
    const uint64_t d = rma->slots[i].deadline_ns;
    for (; pos > 0 && heap_key(rma, (pos - 1) / 2) > d; pos = (pos - 1) / 2)
        heap_set(rma, pos, rma->heap[(pos - 1) / 2]);
    heap_set(rma, pos, i);
}

static void heap_down(struct erma_rma *rma, uint32_t pos)
{
    const int32_t i = rma->heap[pos];
    const uint64_t d = rma->slots[i].deadline_ns;
    for (;;) {
        uint32_t c = 2 * pos + 1;
        if (c >= rma->nheap)
            break;
        if (c + 1 < rma->nheap && heap_key(rma, c + 1) < heap_key(rma, c))
            c++;
        if (heap_key(rma, c) >= d)
            break;
        heap_set(rma, pos, rma->heap[c]);
        pos = c;
    }
    heap_set(rma, pos, i);
}

static void heap_push(struct erma_rma *rma, int32_t i)
{
    heap_set(rma, rma->nheap++, i);
    heap_up(rma, rma->nheap - 1);
}

static void heap_remove(struct erma_rma *rma, int32_t i)
{
    const uint32_t pos = (uint32_t)rma->slots[i].heap_idx;
    const int32_t last = rma->heap[--rma->nheap];
    rma->slots[i].heap_idx = -1;
    if (last == i)
        return;
    heap_set(rma, pos, last);
    heap_up(rma, pos);
    heap_down(rma, (uint32_t)rma->slots[last].heap_idx);
}

/* ---- round trips and timeouts per peer ---- */

/* srtt + 4 rttvar, with the floor as the least margin over srtt (a steady
 * RTT has no variance, and no time for jitter), after a timeout at least
 * the doubled RTO until a new sample; the cap, also before any sample. */
static uint64_t peer_rto(const struct erma_rma *rma, const struct peer *p)
{
    const struct erma_rma_cfg *c = &rma->cfg;
    if (!p->sampled)
        return c->op_timeout_max_ns;
    const uint64_t var = 4 * p->rttvar_ns, margin = var > c->op_timeout_min_ns ? var
                                                                            : c->op_timeout_min_ns;
    uint64_t rto = p->srtt_ns + margin;
    rto = rto > p->backoff_ns ? rto : p->backoff_ns;
    return rto < c->op_timeout_max_ns ? rto : c->op_timeout_max_ns;
}

/* RFC 6298's estimator, from authentic answers only. */
static void rtt_sample(struct peer *p, uint64_t rtt)
{
    if (!p->sampled) {
        p->srtt_ns = rtt;
        p->rttvar_ns = rtt / 2;
        p->sampled = true;
    } else {
        const uint64_t diff = rtt > p->srtt_ns ? rtt - p->srtt_ns : p->srtt_ns - rtt;
        p->rttvar_ns = (3 * p->rttvar_ns + diff) / 4;
        p->srtt_ns = (7 * p->srtt_ns + rtt) / 8;
    }
    p->backoff_ns = 0;
}

/* A WRITE or REKEY makes two round trips. */
static uint64_t op_timeout(const struct erma_rma *rma, const struct slot *s)
{
    if (rma->cfg.op_timeout_ns)
        return rma->cfg.op_timeout_ns;
    const uint64_t rto = peer_rto(rma, &rma->peers[s->peer]);
    return s->op == ERMA_RMA_READ ? rto : 2 * rto;
}

int erma_rma_peer_rtt(const struct erma_rma *rma, int peer, struct erma_rma_rtt *out)
{
    if (!rma || !out || peer < 0 || (uint32_t)peer >= rma->npeers)
        return ERMA_EINVAL;
    const struct peer *p = &rma->peers[peer];
    *out = (struct erma_rma_rtt){.srtt_ns = p->srtt_ns, .rttvar_ns = p->rttvar_ns,
                                 .rto_ns = rma->cfg.op_timeout_ns ? rma->cfg.op_timeout_ns
                                                                  : peer_rto(rma, p)};
    return ERMA_OK;
}

/* ---- virtual paths (erma/cc.h) ---- */

/* A pruned path rests 4 of the peer's RTOs, twice that after each prune. */
static uint64_t path_rest(const struct erma_rma *rma, const struct peer *p)
{
    return 4 * peer_rto(rma, p);
}

static void path_end(struct erma_rma *rma, struct slot *s, int status)
{
    struct peer *p = &rma->peers[s->peer];
    if (status == ERMA_ETIMEDOUT)
        rma->stats.paths_pruned += erma_paths_lost(&p->ps, s->path, rma->ep->now,
                                                   path_rest(rma, p));
    else
        erma_paths_done(&p->ps, s->path);
    s->path_out = p->ps.p[s->path].pruned_until != 0;
}

/* An authentic answer to s came back on its path after rtt_ns. No
 * out-of-order measure (late 0): ops are independent, and a burst of
 * them overtakes itself across paths without any path standing out. */
static void path_sample(struct erma_rma *rma, struct slot *s, uint64_t rtt_ns)
{
    struct peer *p = &rma->peers[s->peer];
    rma->stats.paths_pruned += erma_paths_sample(&p->ps, s->path, rtt_ns, 0, rma->ep->now,
                                                 path_rest(rma, p));
    p->ps.clock = (int8_t)s->path; /* the next op leaves where this answer came */
}

static void slot_free(struct erma_rma *rma, struct slot *s)
{
    s->state = SLOT_FREE;
    s->next = rma->free_slots;
    rma->free_slots = (int32_t)(s - rma->slots);
    rma->nfree++;
    erma_exec_wake(rma); /* a transfer may have waited for a slot */
}

void erma_cq_push(struct erma_rma *rma, const struct erma_rma_completion *c)
{
    /* cannot overflow: a slot or transfer is reused only after its poll */
    rma->cq[(rma->cq_head + rma->cq_len++) % rma->cq_cap] = *c;
}

static void finish(struct erma_rma *rma, struct slot *s, int status)
{
    const int32_t i = (int32_t)(s - rma->slots);
    const bool unsent = s->state == SLOT_QUEUED || s->state == SLOT_FENCED;
    if (s->state == SLOT_QUEUED)
        list_remove(&rma->queued[s->prio], rma->slots, i);
    else if (s->state == SLOT_FENCED)
        list_remove(&rma->fenced, rma->slots, i);
    else
        heap_remove(rma, i);
    if (!unsent && rma->ep->npaths > 1)
        path_end(rma, s, status);
    if (s->op == ERMA_RMA_READ && !unsent) {
        rma->inbound -= s->len;
        erma_exec_wake(rma); /* the inbound window opened */
    } else if (s->op == ERMA_RMA_READ)
        rma->queued_in -= s->len;
    if (unsent)
        s->issue_ns = rma->ep->now;
    s->status = status;
    rma->stats.completed++;
    if (s->done) {
        s->done(rma, s);
        slot_free(rma, s);
        return;
    }
    s->state = SLOT_DONE;
    const struct erma_rma_completion c = {.tag = s->tag, .status = status, .id = (uint32_t)i,
                                          .issue_delay_ns = s->issue_ns - s->submit_ns,
                                          .total_delay_ns = rma->ep->now - s->submit_ns};
    erma_cq_push(rma, &c);
    /* after its completion is queued: a fenced write it cancels completes later */
    if (s->op == ERMA_RMA_WRITE)
        erma_fence_done(rma, s->peer, s->rkey.region, s->wseq, status);
}

/* ---- fences ----
 *
 * A fenced WRITE (cmd.fence, xfer.fence) is applied only after every
 * earlier WRITE of this engine to the same region (same peer and region id)
 * has completed: "earlier" are the WRITE commands submitted and the WRITE
 * transfers started before it and not completed then (a transfer with all
 * its chunks and retries). The fence is enforced here, at the initiator,
 * as MP-RDMA's "stop-wait" synchronise: the fenced write's request is not
 * sent until those writes have completed. The target then needs no state
 * per initiator (1RMA's target keeps none, and could not learn of writes
 * lost on the way), and nothing else changes on the wire: the request's
 * FENCE flag is informational. It holds because a completed write writes
 * nothing more: DONE comes after its last byte is applied, and after any
 * failure (TIMEOUT included: the target stops taking its data at its
 * deadline less clock_skew_ns) none of its data is applied any more. The
 * cost is the round trips of the writes it waits for.
 *
 * If any write it waited for failed, the fenced write is not sent: it
 * completes with ERMA_ECANCELLED, after that write's completion, having
 * written nothing (a flag written after data must not land on data that
 * did not). Non-fenced writes and reads never wait for anything.
 *
 * A fenced command that has to wait holds its slot (its id is returned at
 * submit) in SLOT_FENCED, outside the priority queues, so it blocks no
 * other op, and its DISPATCH_TIMEOUT runs only from its release into the
 * queue. That is safe: what it waits for already holds its slot (commands)
 * or is a transfer, which holds none; for those, at most cfg.slots - 1
 * slots are ever SLOT_FENCED (submit refuses more with ERMA_ENOSLOTS), so
 * one slot always frees up for a transfer's next chunk (once its
 * completion is polled, as for any command). A waiting fenced transfer
 * holds no slot. Waits are bounded: each write waited for completes within
 * its timeouts (and a transfer's retries). */

static bool write_in_progress(const struct slot *s)
{
    return s->op == ERMA_RMA_WRITE && !s->done && s->state != SLOT_FREE && s->state != SLOT_DONE;
}

uint32_t erma_fence_count(const struct erma_rma *rma, int peer, uint32_t region)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < rma->cfg.slots; i++) {
        const struct slot *s = &rma->slots[i];
        n += write_in_progress(s) && s->peer == peer && s->rkey.region == region;
    }
    for (uint32_t i = 0; i < rma->cfg.transfers; i++) {
        const struct xfer *x = &rma->xfers[i];
        n += x->state == XFER_ACTIVE && x->op == ERMA_RMA_WRITE && x->peer == peer &&
             x->rkey.region == region;
    }
    return n;
}

static uint32_t fenced_slots(const struct erma_rma *rma)
{
    uint32_t n = 0;
    for (int32_t i = rma->fenced.head; i >= 0; i = rma->slots[i].next)
        n++;
    return n;
}

/* Releases the fenced slots no longer waiting: into their queue, or
 * cancelled (which may release or cancel others: again until none). */
static void fence_settle(struct erma_rma *rma)
{
    rma->fence_settling = true;
    for (bool again = true; again;) {
        again = false;
        for (int32_t i = rma->fenced.head, next; i >= 0; i = next) {
            struct slot *s = &rma->slots[i];
            next = s->next;
            if (s->fence_wait)
                continue;
            if (s->fence_status != ERMA_OK) {
                rma->stats.fence_cancelled++;
                finish(rma, s, s->fence_status);
                again = true;
                continue;
            }
            list_remove(&rma->fenced, rma->slots, i);
            s->state = SLOT_QUEUED;
            s->queued_ns = rma->ep->now;
            list_push(&rma->queued[s->prio], rma->slots, i);
        }
    }
    rma->fence_settling = false;
}

void erma_fence_done(struct erma_rma *rma, int peer, uint32_t region, uint64_t wseq, int status)
{
    bool released = false;
    for (int32_t i = rma->fenced.head; i >= 0; i = rma->slots[i].next) {
        struct slot *s = &rma->slots[i];
        if (s->wseq <= wseq || s->peer != peer || s->rkey.region != region || !s->fence_wait)
            continue; /* not one it waits for: it came later, or elsewhere */
        if (status != ERMA_OK)
            s->fence_status = ERMA_ECANCELLED;
        released |= --s->fence_wait == 0;
    }
    for (uint32_t i = 0; rma->fenced_xfers && i < rma->cfg.transfers; i++) {
        struct xfer *x = &rma->xfers[i];
        if (x->state != XFER_ACTIVE || !x->fence_wait || x->wseq <= wseq || x->peer != peer ||
            x->rkey.region != region)
            continue;
        if (status != ERMA_OK)
            x->fence_status = ERMA_ECANCELLED;
        if (--x->fence_wait == 0) {
            rma->fenced_xfers--;
            rma->fence_cancel |= x->fence_status != ERMA_OK;
            erma_exec_wake(rma);
        }
    }
    if (released && !rma->fence_settling)
        fence_settle(rma);
}

int erma_rkey_usable(const struct erma_rma *rma, const struct erma_rkey *k)
{
    if (k->cipher != ERMA_RMA_CHACHA20_POLY1305 && k->cipher != ERMA_RMA_AES256_GCM)
        return ERMA_EINVAL;
    return k->cipher == ERMA_RMA_AES256_GCM && !rma->aes ? ERMA_ENOTSUP : ERMA_OK;
}

bool erma_slot_free_for(const struct erma_rma *rma, uint8_t prio, bool chunk)
{
    if (chunk && rma->fenced.head >= 0) /* fenced commands may wait for it (fences) */
        return rma->nfree > 0;
    return rma->nfree > prio * (rma->cfg.slots / 16);
}

int erma_portal_submit(struct erma_rma *rma, const struct erma_rma_cmd *c,
                       void (*done)(struct erma_rma *rma, struct slot *s))
{
    if (!rma || !c || c->peer < 0 || (uint32_t)c->peer >= rma->npeers || !c->local ||
        c->priority >= ERMA_RMA_PRIORITIES ||
        (c->op != ERMA_RMA_READ && c->op != ERMA_RMA_WRITE && c->op != ERMA_RMA_REKEY) ||
        (c->op != ERMA_RMA_REKEY && c->len == 0))
        return ERMA_EINVAL;
    if (c->fence && c->op != ERMA_RMA_WRITE)
        return ERMA_EINVAL; /* a fence orders WRITEs only */
    if (c->op != ERMA_RMA_REKEY && c->len > ERMA_RMA_MAX_OP)
        return ERMA_E2BIG;
    const int usable = erma_rkey_usable(rma, &c->rkey);
    if (usable != ERMA_OK)
        return usable;
    if (!erma_slot_free_for(rma, c->priority, done != NULL))
        return ERMA_ENOSLOTS;
    /* A chunk (done set) of a fenced transfer: the executor held it back
     * already; the flag only marks its request. */
    const uint32_t wait = c->fence && !done ? erma_fence_count(rma, c->peer, c->rkey.region) : 0;
    if (wait && fenced_slots(rma) + 1 >= rma->cfg.slots)
        return ERMA_ENOSLOTS; /* keep a slot that no fenced write waits in (fences) */
    const int32_t i = rma->free_slots;
    struct slot *s = &rma->slots[i];
    rma->free_slots = s->next;
    rma->nfree--;
    const uint64_t now = erma_ep_clock(rma->ep);
    *s = (struct slot){.state = wait ? SLOT_FENCED : SLOT_QUEUED, .op = (uint8_t)c->op,
                       .prio = c->priority, .done = done, .peer = c->peer, .rkey = c->rkey,
                       .offset = c->offset, .local = c->local,
                       .len = c->op == ERMA_RMA_REKEY ? RMA_REKEY_DATA : c->len,
                       .grace_ns = c->grace_ns, .tag = c->tag,
                       .submit_ns = now, .queued_ns = now, .fence = c->fence,
                       .fence_wait = wait,
                       .wseq = c->op == ERMA_RMA_WRITE && !done ? ++rma->wseq : 0};
    if (wait) {
        list_push(&rma->fenced, rma->slots, i);
        rma->stats.fence_held++;
    } else {
        list_push(&rma->queued[c->priority], rma->slots, i);
    }
    if (s->op == ERMA_RMA_READ)
        rma->queued_in += s->len;
    rma->stats.submitted++;
    /* Into the TX batch now: the next loop pass sends it before its RX burst. */
    erma_portal_issue(rma, 0);
    return i;
}

int erma_rma_submit(struct erma_rma *rma, const struct erma_rma_cmd *cmd)
{
    return erma_portal_submit(rma, cmd, NULL);
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
    return (struct rma_ophdr){.type = type,
                              .flags = (uint8_t)((type == RMA_WRITE_REQ && s->fence ? RMA_FLAG_FENCE
                                                                                   : 0) |
                                                 RMA_FLAG_PATH(s->path)),
                              .slot = (uint16_t)(s - rma->slots), .region = s->rkey.region,
                              .key_gen = s->rkey.key_gen, .offset = s->offset,
                              .identity = rma->cfg.identity, .init_ctr = s->init_ctr,
                              .len = s->len, .deadline = s->wire_deadline};
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
 * merged windows: without a local window this wait would act on no one. */
static uint64_t issue_at(const struct erma_rma *rma, const struct slot *s)
{
    const uint64_t now = rma->ep->now;
    if (s->op != ERMA_RMA_READ)
        return now;
    if (rma->inbound + s->len > rma->cfg.inbound_window)
        return UINT64_MAX;
    const bool paced = s->done && !rma->cfg.cc_off && !rma->wcc.cfg.merged;
    return paced && rma->answers_at_ns > now ? rma->answers_at_ns : now;
}

static void issue(struct erma_rma *rma, struct slot *s)
{
    static const uint8_t req_type[] = {
        [ERMA_RMA_READ] = RMA_READ_REQ, [ERMA_RMA_WRITE] = RMA_WRITE_REQ,
        [ERMA_RMA_REKEY] = RMA_REKEY_REQ};
    const int32_t i = (int32_t)(s - rma->slots);
    list_remove(&rma->queued[s->prio], rma->slots, i);
    s->init_ctr = rma->ctr + 1; /* the request's own nonce counter */
    s->path = erma_paths_pick(&rma->peers[s->peer].ps, rma->ep->now);
    uint64_t timeout = op_timeout(rma, s);
    timeout = timeout < RMA_MAX_TTL_NS ? timeout : RMA_MAX_TTL_NS; /* a WRITE's 2 RTOs */
    s->issue_ns = s->sent_ns = rma->ep->now;
    s->deadline_ns = rma->ep->now + timeout;
    s->wire_deadline = rma_wire_now(rma) + timeout;
    struct rma_ophdr h = op_header(rma, s, req_type[s->op]);
    erma_rma_send(rma, &rma->peers[s->peer].addr, &h, s->rkey.kd, s->rkey.cipher, 0, NULL, 0);
    s->state = SLOT_ISSUED;
    if (s->op == ERMA_RMA_READ) {
        rma->inbound += s->len;
        rma->queued_in -= s->len;
        /* every READ's answer takes the link; a burst of commands delays
         * the chunks behind it by at most half a dispatch timeout */
        const uint64_t from = rma->answers_at_ns > s->issue_ns ? rma->answers_at_ns : s->issue_ns;
        const uint64_t cap = s->issue_ns + rma->cfg.dispatch_timeout_ns / 2;
        rma->answers_at_ns = from + answer_ns(rma, s->len);
        if (!s->done && rma->answers_at_ns > cap)
            rma->answers_at_ns = cap > from ? cap : from;
    }
    heap_push(rma, i);
    rma->stats.issued++;
}

/* Issues queued ops in priority order; the first op the solicitation
 * window cannot take blocks the rest, so large reads are not starved by
 * small ones; a READ chunk the pacer holds blocks only its own priority.
 * Returns work + the ops issued, stopping at 2 bursts of work. */
int erma_portal_issue(struct erma_rma *rma, int work)
{
    for (int p = 0; p < ERMA_RMA_PRIORITIES; p++)
        for (int32_t h; (h = rma->queued[p].head) >= 0 && work < 2 * ERMA_MAX_BURST; work++) {
            const uint64_t at = issue_at(rma, &rma->slots[h]);
            if (at == UINT64_MAX)
                return work;
            if (at > rma->ep->now)
                break;
            issue(rma, &rma->slots[h]);
        }
    return work;
}

/* A pass right after the loop stalled (descheduled, or a sleep past its
 * timer), or whose RX burst was full, may leave answers unread: timeouts
 * then wait a pass, at most 16 passes in a row. */
#define RMA_STALL_NS 100000
#define RMA_MAX_DEFERRALS 16

static bool defer_timeouts(struct erma_rma *rma)
{
    const bool stalled = rma->ep->now - rma->last_poll_ns > RMA_STALL_NS;
    const bool full = rma->rx_pass >= ERMA_MAX_BURST;
    rma->last_poll_ns = rma->ep->now;
    rma->rx_pass = 0;
    if (!rma->nheap || rma->slots[rma->heap[0]].deadline_ns > rma->ep->now)
        return false;
    if ((stalled || full) && rma->deferrals < RMA_MAX_DEFERRALS) {
        rma->deferrals++;
        return true;
    }
    rma->deferrals = 0;
    return false;
}

/* Doubles the RTO this op had (not again for each op of one burst). */
static void time_out(struct erma_rma *rma, struct slot *s)
{
    struct peer *p = &rma->peers[s->peer];
    const uint64_t rto = (s->deadline_ns - s->issue_ns) / (s->op == ERMA_RMA_READ ? 1 : 2);
    const uint64_t b = 2 * rto < rma->cfg.op_timeout_max_ns ? 2 * rto : rma->cfg.op_timeout_max_ns;
    p->backoff_ns = b > p->backoff_ns ? b : p->backoff_ns;
    finish(rma, s, ERMA_ETIMEDOUT);
}

int erma_portal_poll(struct erma_rma *rma)
{
    int work = 0;
    const uint64_t now = rma->ep->now;
    for (int p = 0; p < ERMA_RMA_PRIORITIES; p++)
        for (int32_t h; (h = rma->queued[p].head) >= 0 &&
                        now - rma->slots[h].queued_ns >= rma->cfg.dispatch_timeout_ns;
             work++)
            finish(rma, &rma->slots[h], ERMA_EDISPATCH);
    work = erma_portal_issue(rma, work);
    if (defer_timeouts(rma))
        return work + 1;
    for (; rma->nheap && rma->slots[rma->heap[0]].deadline_ns <= now; work++)
        time_out(rma, &rma->slots[rma->heap[0]]);
    return work;
}

uint64_t erma_portal_next_timer(const struct erma_rma *rma)
{
    uint64_t t = UINT64_MAX;
    bool blocked = false; /* as erma_portal_issue: nothing after it issues */
    for (int p = 0; p < ERMA_RMA_PRIORITIES; p++) {
        const int32_t h = rma->queued[p].head;
        if (h < 0)
            continue;
        const uint64_t d = rma->slots[h].queued_ns + rma->cfg.dispatch_timeout_ns;
        t = d < t ? d : t;
        if (blocked)
            continue;
        const uint64_t at = issue_at(rma, &rma->slots[h]);
        if (at <= rma->ep->now)
            return rma->ep->now;
        blocked = at == UINT64_MAX;
        t = at < t ? at : t;
    }
    if (rma->nheap) {
        const uint64_t d = rma->slots[rma->heap[0]].deadline_ns;
        t = d < t ? d : t;
    }
    return t;
}

/* ---- answers ---- */

static void send_data(struct erma_rma *rma, struct slot *s, uint32_t sol, uint64_t token)
{
    const uint8_t *src = s->local;
    if (s->op == ERMA_RMA_REKEY) { /* the new key and the grace time */
        memcpy(rma->scratch, s->local, ERMA_RMA_KEY_BYTES);
        erma_put_le(rma->scratch + ERMA_RMA_KEY_BYTES, s->grace_ns, 8);
        src = rma->scratch;
    }
    struct rma_ophdr h = op_header(rma, s, RMA_DATA);
    h.sol = sol;
    h.token = token;
    for (uint32_t off = 0; off < s->len; off += rma->pkt_data, h.pkt_idx++) {
        const uint32_t n = s->len - off < rma->pkt_data ? s->len - off : rma->pkt_data;
        h.pkt_off = (uint16_t)off;
        erma_rma_send(rma, &rma->peers[s->peer].addr, &h, s->rkey.kd, s->rkey.cipher, 0, src + off,
                      n);
    }
    s->state = SLOT_SENT_DATA;
    s->sent_ns = rma->ep->now;
}

/* The outcomes a target cannot seal, having no key: hints that end the op
 * but never cut a window (a NACK, which does, is always sealed). */
static bool plain_ok(int status)
{
    return status == ERMA_EAUTH || status == ERMA_ENOREGION;
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
        h->deadline != s->wire_deadline || (rma->ep->npaths > 1 && pkt->path != s->path) ||
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
    if (h->flags & RMA_FLAG_PLAIN) {
        finish(rma, s, status);
        return;
    }
    if (erma_rma_open_as(s->rkey.kd, s->rkey.cipher, 1, h->nonce_ctr, pkt->data, pkt->len,
                      rma->scratch) != 0) {
        rma->stats.rx_unsealed_bad++;
        return;
    }
    if (h->type != RMA_READ_RESP || !s->got) {
        rtt_sample(&rma->peers[s->peer], rma->ep->now - s->sent_ns);
        if (rma->ep->npaths > 1)
            path_sample(rma, s, rma->ep->now - s->sent_ns);
    }
    if (h->type == RMA_READ_RESP)
        read_resp(rma, s, h, plen);
    else if (h->type == RMA_SOLICIT && rma->ep->now < s->deadline_ns)
        send_data(rma, s, h->sol, h->token);
    else if (h->type != RMA_SOLICIT)
        finish(rma, s, h->type == RMA_DONE ? ERMA_OK : status);
}
