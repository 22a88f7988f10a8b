/* rma/executor.c - transfers of any size as chunks of at most
 * ERMA_RMA_MAX_OP, issued as the 1RMA window CC allows, with bounded
 * per-chunk retries of transient failures. Chunks are the portal's
 * commands; the portal tells the executor of their ends, of room for more
 * and of the writes that fence its transfers through the hooks registered
 * here (struct rma_portal_hooks). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "erma/clock.h"
#include "executor.h"
#include "portal.h"

/* The windows' configuration from the transport's hints. */
static struct erma_window_cfg default_window(const struct erma_rma *rma)
{
    const struct erma_transport_hints *h = &rma->tr->hints;
    struct erma_window_cfg c = erma_window_cfg_for((double)h->link_bps, h->base_rtt_ns);
    c.remote_target_ns += h->jitter_ns / 4;
    return c;
}

static void xfer_release(struct xfer *x)
{
    free(x->redo);
    free(x->tries);
    x->redo = NULL;
    x->tries = NULL;
}

void erma__exec_fini(struct erma_rma *rma)
{
    struct rma_exec *e = rma->exec;
    if (!e)
        return;
    if (e->xfers)
        for (uint32_t i = 0; i < rma->cfg.transfers; i++)
            xfer_release(&e->xfers[i]);
    free(e->xfers);
    if (e->wcc.remotes)
        erma_window_destroy(&e->wcc);
    free(e);
    rma->exec = NULL;
}

void erma__exec_release(struct erma_rma *rma, uint32_t id)
{
    struct rma_exec *e = rma->exec;
    e->xfers[id].state = XFER_FREE;
    while (e->used && e->xfers[e->used - 1].state == XFER_FREE)
        e->used--;
}

bool erma__exec_live(const struct erma_rma *rma, uint32_t id)
{
    return rma->exec->xfers[id].state != XFER_FREE;
}

/* A slot, a window or a transfer may let a chunk go: the executor looks at
 * its transfers again in the next poll. */
static void wake(struct erma_rma *rma)
{
    rma->exec->wake_ns = 0;
}

static enum erma_window_dir dir_of(uint8_t op)
{
    return op == ERMA_RMA_READ ? ERMA_WINDOW_IN : ERMA_WINDOW_OUT;
}

int erma_rma_transfer(struct erma_rma *rma, const struct erma_rma_xfer *t)
{
    if (!rma || !t || !t->local || t->len == 0 || !erma__peer_known(rma, t->peer) ||
        t->priority >= ERMA_RMA_PRIORITIES ||
        (t->op != ERMA_RMA_READ && t->op != ERMA_RMA_WRITE) ||
        (t->fence && t->op != ERMA_RMA_WRITE))
        return ERMA_EINVAL;
    const int usable = erma__rkey_usable(rma, &t->rkey);
    if (usable != ERMA_OK)
        return usable;
    struct rma_exec *e = rma->exec;
    for (uint32_t i = 0; i < rma->cfg.transfers; i++) {
        struct xfer *x = &e->xfers[i];
        if (x->state != XFER_FREE)
            continue;
        const uint64_t chunks = (t->len + ERMA_RMA_MAX_OP - 1) / ERMA_RMA_MAX_OP;
        /* A fenced transfer waits, holding no slot, for the WRITEs in
         * progress now (fence.c); then its chunks flow as any. */
        const uint32_t wait = t->fence ? erma__fence_count(rma, t->peer, t->rkey.region) : 0;
        *x = (struct xfer){.state = XFER_ACTIVE, .op = (uint8_t)t->op, .prio = t->priority,
                           .peer = t->peer, .rkey = t->rkey, .offset = t->offset,
                           .local = t->local, .len = t->len, .max_retries = t->max_retries,
                           .tag = t->tag, .start_ns = erma__ep_clock(rma->ep),
                           .cb = t->cb, .cb_ctx = t->cb_ctx,
                           .fence = t->fence, .fence_wait = wait};
        if (t->max_retries && !(x->tries = calloc(chunks, sizeof *x->tries))) {
            x->state = XFER_FREE;
            return ERMA_ENOMEM;
        }
        if (x->op == ERMA_RMA_WRITE)
            x->wseq = erma__fence_number(rma);
        if (wait) {
            e->fenced++;
            rma->stats.fence_held++;
        }
        e->used = i + 1 > e->used ? i + 1 : e->used;
        rma->open++;
        wake(rma);
        return (int)i;
    }
    return ERMA_ENOSLOTS;
}

/* The next chunk of x to issue, or false when none is ready. */
static bool next_chunk(const struct xfer *x, uint64_t *off)
{
    if (x->state != XFER_ACTIVE || x->status != ERMA_OK || x->fence_wait)
        return false;
    if (x->nredo) {
        *off = x->redo[x->nredo - 1];
        return true;
    }
    *off = x->next_off;
    return x->next_off < x->len;
}

static void xfer_complete(struct erma_rma *rma, struct xfer *x, uint32_t id);

/* Whether the windows let a chunk of n bytes of x go now, and in *at the
 * time it counts as issued. The windows pace their ops; a flow their
 * pacing held back is asked as of the time it was due (a burst ago at
 * most), so that a loop pass longer than their gap issues every chunk that
 * came due in it, each at its time, rather than one per pass, which held
 * the rate to the loop's. With timers on time this changes nothing. */
static bool window_lets(struct erma_rma *rma, struct xfer *x, uint32_t n, uint64_t *at)
{
    struct rma_exec *e = rma->exec;
    const uint64_t now = rma->ep->now, burst = erma__portal_burst_ns(rma);
    const bool late = x->due_ns && x->due_ns < now;
    const uint64_t from = late ? erma__rma_catch_up(x->due_ns, now, burst) : now;
    if (erma_window_next_issue(&e->wcc, (uint64_t)x->peer, dir_of(x->op), n, from, at) !=
            ERMA_OK ||
        *at == UINT64_MAX) {
        x->due_ns = 0;
        return false;
    }
    /* held back, or caught up to: the next chunk goes on from here */
    x->due_ns = *at > now || late ? *at : 0;
    if (*at <= now)
        return true;
    e->wake_ns = *at < e->wake_ns ? *at : e->wake_ns;
    return false;
}

/* Submits one chunk of x if the windows allow; false when they do not. */
static bool issue_chunk(struct erma_rma *rma, struct xfer *x, uint32_t id, uint64_t off)
{
    struct rma_exec *e = rma->exec;
    const uint32_t n = x->len - off < ERMA_RMA_MAX_OP ? (uint32_t)(x->len - off)
                                                      : ERMA_RMA_MAX_OP;
    /* Once the windows let a chunk go it waits in the portal's queue, for
     * the solicitation window among others: that wait is its issue_delay,
     * local congestion that the local window and DISPATCH_TIMEOUT act on
     * (1RMA's Algorithm 1). Without CC nothing would act on it: READs the
     * solicitation window cannot take wait here instead. */
    if (rma->cfg.cc_off && x->op == ERMA_RMA_READ &&
        erma__portal_inbound(rma) + n > rma->cfg.inbound_window)
        return false;
    uint64_t at = rma->ep->now;
    if (!rma->cfg.cc_off && !window_lets(rma, x, n, &at))
        return false;
    const struct erma_rma_cmd c = {.op = x->op, .peer = x->peer, .rkey = x->rkey,
                                   .offset = x->offset + off, .local = x->local + off,
                                   .len = n, .priority = x->prio, .tag = id,
                                   .fence = x->fence};
    if (erma__portal_submit_chunk(rma, &c, at) < 0)
        return false;
    if (!rma->cfg.cc_off)
        erma_window_on_issue(&e->wcc, (uint64_t)x->peer, dir_of(x->op), n, at);
    if (x->nredo && x->redo[x->nredo - 1] == off)
        x->nredo--;
    else
        x->next_off += n;
    x->inflight++;
    return true;
}

/* Points each active transfer at its flow's window (destination and
 * direction; NULL before the flow's first op or with CC off). */
static void find_windows(struct erma_rma *rma)
{
    struct rma_exec *e = rma->exec;
    for (uint32_t id = 0; id < e->used; id++) {
        struct xfer *x = &e->xfers[id];
        x->win = x->state == XFER_ACTIVE && !rma->cfg.cc_off
                     ? erma_window_find(&e->wcc, (uint64_t)x->peer, dir_of(x->op))
                     : NULL;
    }
}

/* The rate of x's flow now: its ops in flight per smoothed round trip
 * (Little's law), in ops per second; 0 before its first op. */
static double flow_rate(const struct xfer *x)
{
    return x->win ? x->win->inflight * 1e9 / (double)x->win->srtt_ns : 0;
}

/* The transfer of priority p to serve next (see erma__exec_poll) and, in
 * *off, its next chunk; UINT32_MAX when none not yet tried in this call has
 * a chunk to issue. */
static uint32_t next_xfer(struct erma_rma *rma, uint8_t p, uint64_t gen, uint64_t *off)
{
    const struct rma_exec *e = rma->exec;
    uint32_t best = UINT32_MAX;
    double least = INFINITY;
    for (uint32_t id = 0; id < e->used; id++) {
        const struct xfer *x = &e->xfers[id];
        uint64_t o;
        if (x->prio != p || x->tried == gen || !next_chunk(x, &o))
            continue;
        /* rates within half an op per round trip count as equal: the
         * flows take turns then, where comparing rates that jitter with
         * each op's wait here let one flow win for an RTT, then the other */
        const double r = flow_rate(x), tie = x->win ? 0.5e9 / (double)x->win->srtt_ns : 0;
        if (best == UINT32_MAX || r < least - tie ||
            (r <= least + tie && x->served < e->xfers[best].served)) {
            least = r;
            best = id;
            *off = o;
        }
    }
    return best;
}

/* The windows held x back: its flow's other transfers need not ask again
 * in this call. */
static void flow_tried(struct erma_rma *rma, const struct xfer *x, uint64_t gen)
{
    struct rma_exec *e = rma->exec;
    for (uint32_t id = 0; id < e->used; id++) {
        struct xfer *y = &e->xfers[id];
        if (y->peer == x->peer && dir_of(y->op) == dir_of(x->op) && y->prio == x->prio)
            y->tried = gen;
    }
}

int erma__exec_work(struct erma_rma *rma)
{
    struct rma_exec *e = rma->exec;
    e->wake_ns = UINT64_MAX;
    const uint32_t nx = e->used;
    int work = 0;
    /* Fenced transfers a failed write cancelled (fence.c): they
     * complete without a chunk sent. */
    while (e->fence_cancel) { /* a cancel may cancel another */
        e->fence_cancel = false;
        for (uint32_t id = 0; id < nx; id++) {
            struct xfer *x = &e->xfers[id];
            if (x->state == XFER_ACTIVE && x->fence && !x->fence_wait &&
                x->fence_status != ERMA_OK && x->status == ERMA_OK) {
                x->status = x->fence_status;
                rma->stats.fence_cancelled++;
                xfer_complete(rma, x, id);
                work++;
            }
        }
    }
    unsigned present = 0; /* priorities with an active transfer */
    for (uint32_t id = 0; id < nx; id++)
        present |= e->xfers[id].state == XFER_ACTIVE ? 1u << e->xfers[id].prio : 0;
    if (!present)
        return work;
    /* Priorities in order. Within one, each chunk goes to the transfer
     * whose flow (destination and direction) has the lowest rate, among
     * equals (within half an op per RTT) the one served longest ago: the
     * flows share the local window by rate (a flow through a congested
     * target, slower to complete, would otherwise lose its turns to a
     * faster one), and the transfers of one flow take turns. A flow the
     * windows hold back is not tried again in this call: issuing more only
     * closes windows. */
    const uint64_t gen = ++e->gen;
    find_windows(rma);
    for (uint8_t p = 0; p < ERMA_RMA_PRIORITIES; p++)
        while (present >> p & 1 && erma__slot_any_free(rma)) {
            uint64_t off = 0;
            const uint32_t id = next_xfer(rma, p, gen, &off);
            if (id == UINT32_MAX)
                break;
            struct xfer *x = &e->xfers[id];
            /* a flow's first op creates its window, which may take an idle
             * flow's: the pointers are found again */
            const bool first = !x->win && !rma->cfg.cc_off;
            const uint64_t evictions = e->wcc.evictions;
            const bool issued = issue_chunk(rma, x, id, off);
            if (first || e->wcc.evictions != evictions)
                find_windows(rma);
            if (issued) {
                work++;
                x->served = ++e->served;
            } else {
                flow_tried(rma, x, gen);
            }
        }
    return work;
}

static bool transient(int status)
{
    return status == ERMA_ETIMEDOUT || status == ERMA_ENACK || status == ERMA_EDISPATCH;
}

static int redo_push(struct xfer *x, uint64_t off)
{
    if (x->nredo == x->redo_cap) {
        const uint32_t cap = x->redo_cap ? 2 * x->redo_cap : 16;
        uint64_t *r = realloc(x->redo, cap * sizeof *r);
        if (!r)
            return ERMA_ENOMEM;
        x->redo = r;
        x->redo_cap = cap;
    }
    x->redo[x->nredo++] = off;
    return ERMA_OK;
}

/* Without a window configuration of its own, the windows' base RTT comes
 * from the transport's hint: a small packet's, on the link's rate. A
 * chunk's round trip can never be faster than its path allows (4 KB of
 * serialisation, a path slower than the link, a slow or sanitised host),
 * and a remote target below it would read every op as congestion and hold
 * the windows at min_cwnd: base and target follow the smallest round trip
 * measured (target 1.25 x it, as in erma_window_cfg_for()), never below
 * the hint's. */
static void follow_base_rtt(struct erma_rma *rma, enum erma_window_dir dir, uint64_t sample)
{
    struct rma_exec *e = rma->exec;
    uint64_t *min = &e->min_rtt_ns[dir];
    if (!sample || (*min && sample >= *min))
        return;
    *min = sample;
    /* one configuration for both directions: the slower one's base */
    const uint64_t rtt = *min > e->min_rtt_ns[!dir] ? *min : e->min_rtt_ns[!dir];
    const struct erma_window_cfg hint = default_window(rma);
    struct erma_window_cfg *c = &e->wcc.cfg;
    c->base_rtt_ns = rtt > hint.base_rtt_ns ? rtt : hint.base_rtt_ns;
    c->remote_target_ns = rtt + rtt / 4 > hint.remote_target_ns ? rtt + rtt / 4
                                                                : hint.remote_target_ns;
}

/* A chunk ended (hooks.chunk_done). */
static void chunk_done(struct erma_rma *rma, const struct rma_chunk_end *c)
{
    struct rma_exec *e = rma->exec;
    const uint32_t id = (uint32_t)c->tag;
    struct xfer *x = &e->xfers[id];
    const uint64_t off = (uint64_t)(c->local - x->local);
    const uint64_t issue_delay = c->issue_ns - c->submit_ns;
    /* The round trip less the time it spent inside the hosts (a busy or
     * descheduled loop on either side, erma/rma.h, Busy hosts): the
     * network's part, at least 1 ns. */
    const uint64_t rtt = rma->ep->now - c->issue_ns;
    uint64_t remote = rtt > c->host_ns ? rtt - c->host_ns : 1;
    /* A WRITE makes two round trips (request and solicitation, data and
     * completion); the window's targets are for one, so it sees the remote
     * delay per round trip. */
    if (x->op == ERMA_RMA_WRITE)
        remote /= 2;
    /* an op on a path pruned for standing out says nothing of the
     * destination's congestion: counted out, no signal (cc.h); a NACK is
     * the target's own */
    const bool quiet = c->path_out && c->status != ERMA_ENACK;
    if (!rma->cfg.cc_off)
        erma_window_on_complete(&e->wcc, (uint64_t)x->peer, dir_of(x->op),
                                quiet ? ERMA_ECANCELLED : c->status, issue_delay,
                                issue_delay + remote, rma->ep->now);
    if (c->status == ERMA_OK && !rma->cfg.window)
        follow_base_rtt(rma, dir_of(x->op), remote);
    x->inflight--;
    wake(rma); /* a window or slot opened */
    if (c->status != ERMA_OK && x->status == ERMA_OK) {
        uint16_t *tries = x->tries ? &x->tries[off / ERMA_RMA_MAX_OP] : NULL;
        /* a DISPATCH_TIMEOUT sent nothing: again, without using a try (the
         * local window it cut keeps the next ones from waiting as long) */
        const bool unsent = c->status == ERMA_EDISPATCH;
        if (transient(c->status) && tries && (unsent || *tries < x->max_retries) &&
            redo_push(x, off) == ERMA_OK) {
            *tries += !unsent;
            x->retries++;
            rma->stats.retries++;
        } else {
            x->status = c->status;
        }
    }
    if (x->inflight || (x->status == ERMA_OK && (x->nredo || x->next_off < x->len)))
        return;
    xfer_complete(rma, x, id);
}

static void xfer_complete(struct erma_rma *rma, struct xfer *x, uint32_t id)
{
    const struct erma_rma_completion c = {.tag = x->tag, .status = x->status, .id = id,
                                          .transfer = true, .retries = x->retries,
                                          .total_delay_ns = rma->ep->now - x->start_ns};
    xfer_release(x);
    x->state = XFER_DONE;
    erma__cq_complete(rma, &c, x->cb, x->cb_ctx);
    /* after its completion is queued: a fenced write it cancels completes later */
    if (x->op == ERMA_RMA_WRITE)
        erma__portal_write_done(rma, x->peer, x->rkey.region, x->wseq, x->status);
}

static void window_info(const struct erma_window *w, struct erma_rma_window_info *out)
{
    *out = (struct erma_rma_window_info){w->cwnd,   w->inflight,  w->srtt_ns,
                                         w->issued, w->decreases, w->cuts};
}

int erma_rma_window(const struct erma_rma *rma, int peer, enum erma_rma_op op,
                    struct erma_rma_window_info *out)
{
    if (!rma || peer < 0 || !out ||
        (op != ERMA_RMA_READ && op != ERMA_RMA_WRITE && op != ERMA_RMA_REKEY))
        return ERMA_EINVAL;
    const struct erma_window *w = erma_window_find(&rma->exec->wcc, (uint64_t)peer, dir_of(op));
    if (!w)
        return ERMA_ENOENT;
    window_info(w, out);
    return ERMA_OK;
}

int erma_rma_local_window(const struct erma_rma *rma, struct erma_rma_window_info *out)
{
    if (!rma || !out)
        return ERMA_EINVAL;
    window_info(&rma->exec->wcc.local, out);
    return ERMA_OK;
}

/* ---- what the portal tells the executor (struct rma_portal_hooks) ---- */

/* WRITE transfers in progress to (peer, region). */
static uint32_t writes(const struct erma_rma *rma, int peer, uint32_t region)
{
    const struct rma_exec *e = rma->exec;
    uint32_t n = 0;
    for (uint32_t i = 0; i < e->used; i++) {
        const struct xfer *x = &e->xfers[i];
        n += x->state == XFER_ACTIVE && x->op == ERMA_RMA_WRITE && x->peer == peer &&
             x->rkey.region == region;
    }
    return n;
}

/* Write wseq ended: the fenced transfers after it wait for one less; those
 * that wait no more issue their chunks, or complete cancelled in the next
 * poll if a write they waited for failed. */
static void write_done(struct erma_rma *rma, int peer, uint32_t region, uint64_t wseq,
                       int status)
{
    struct rma_exec *e = rma->exec;
    for (uint32_t i = 0; e->fenced && i < e->used; i++) {
        struct xfer *x = &e->xfers[i];
        if (x->state != XFER_ACTIVE || !x->fence_wait || x->wseq <= wseq || x->peer != peer ||
            x->rkey.region != region)
            continue;
        if (status != ERMA_OK)
            x->fence_status = ERMA_ECANCELLED;
        if (--x->fence_wait == 0) {
            e->fenced--;
            e->fence_cancel |= x->fence_status != ERMA_OK;
            wake(rma);
        }
    }
}

/* A slot was freed or the inbound window opened: transfers in progress may
 * go on (the engine's commands alone wake no one). */
static void room(struct erma_rma *rma)
{
    if (rma->exec->used)
        wake(rma);
}

int erma__exec_init(struct erma_rma *rma)
{
    struct rma_exec *e = rma->exec = calloc(1, sizeof *rma->exec);
    if (!e)
        return ERMA_ENOMEM;
    e->xfers = calloc(rma->cfg.transfers, sizeof *e->xfers);
    if (!e->xfers)
        return ERMA_ENOMEM;
    const struct erma_window_cfg wc = rma->cfg.window ? *rma->cfg.window : default_window(rma);
    e->wake_ns = UINT64_MAX;
    const int rc = erma_window_init(&e->wcc, &wc);
    /* merged windows have no local window for the pacing to act on */
    const struct rma_portal_hooks hooks = {.chunk_done = chunk_done, .room = room,
                                           .writes = writes, .write_done = write_done,
                                           .paced = !rma->cfg.cc_off && !e->wcc.cfg.merged};
    erma__portal_set_hooks(rma, &hooks);
    return rc;
}
