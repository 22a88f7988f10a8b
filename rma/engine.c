/* rma/engine.c - the one-sided engine: creation, configuration, its
 * parts (internal.h) and its hooks in the endpoint's loop, which hand
 * packets and time to the target (serve.c), the initiator's portal
 * (portal.h) and the executor; completions polled. */
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "erma/clock.h"
#include "executor.h"
#include "portal.h"
#include "region.h"
#include "serve.h"

/* ---- the endpoint hook ---- */

static bool is_request(uint8_t t)
{
    return t == RMA_READ_REQ || t == RMA_WRITE_REQ || t == RMA_REKEY_REQ || t == RMA_DATA;
}

static void hook_rx(void *ctx, const struct erma_hdr *eh, const struct erma_rx_pkt *pkt)
{
    struct erma_rma *rma = ctx;
    struct rma_ophdr h;
    if (pkt->len < RMA_OVERHEAD || pkt->len > rma->tr->max_pkt) {
        rma->stats.rx_bad++;
        return;
    }
    erma__rma_ophdr_decode(pkt->data + ERMA_HDR_SIZE, &h);
    if (h.type == 0 || h.type > RMA_TYPE_MAX || h.len == 0 || h.len > ERMA_RMA_MAX_OP) {
        rma->stats.rx_bad++;
        return;
    }
    erma__ep_clock(rma->ep);
    rma->rx_pass++;
    if (is_request(h.type))
        erma__serve_rx(rma, &h, pkt);
    else
        erma__portal_rx(rma, &h, eh->host_delay, pkt);
}

/* Wall clock against the engine's (TSC) clock, again now and then: NTP
 * slews the one and not the other. The sim's clock is everyone's: its
 * wire_sync_ns is UINT64_MAX. */
static bool wire_sync_due(const struct erma_rma *rma)
{
    return rma->ep->now >= rma->wire_sync_ns;
}

static void wire_sync(struct erma_rma *rma)
{
    if (!wire_sync_due(rma))
        return;
    const uint64_t t = erma_now_ns(); /* rma->ep->now may be a pass's stale reading */
    rma->wire_off = (int64_t)(erma__rma_wallclock_ns() - t);
    rma->wire_sync_ns = t + 100000000;
}

/* Apart from hook_poll, so that its quiet passes save no registers. */
__attribute__((noinline)) static int poll_parts(struct erma_rma *rma, bool rx_full)
{
    wire_sync(rma);
    int work = erma__serve_poll(rma);
    work += erma__exec_poll(rma);
    return work + erma__portal_poll(rma, rx_full);
}

static int hook_poll(void *ctx, uint64_t now)
{
    struct erma_rma *rma = ctx;
    (void)now; /* rma->ep->now */
    /* a full RX burst may have left answers unread (issue.c, timeouts) */
    const bool rx_full = rma->rx_pass >= ERMA_MAX_BURST;
    rma->rx_pass = 0;
    if (!wire_sync_due(rma) && erma__serve_quiet(rma) && erma__exec_quiet(rma) &&
        erma__portal_quiet(rma))
        return 0; /* most passes */
    return poll_parts(rma, rx_full);
}

static void hook_after_flush(void *ctx)
{
    struct erma_rma *rma = ctx;
    if (rma->cbq.len) /* after the flush: a callback may reuse its buffers */
        erma__rma_run_callbacks(rma);
}

static uint64_t hook_next_timer(const void *ctx)
{
    const struct erma_rma *rma = ctx;
    if (rma->cbq.len)
        return 0; /* callbacks queued outside the loop: the next pass runs them */
    uint64_t t = erma__serve_next_timer(rma);
    const uint64_t p = erma__portal_next_timer(rma), e = erma__exec_next_timer(rma);
    t = p < t ? p : t;
    return e < t ? e : t;
}

/* ---- lifetime ---- */

/* The defaults that hold on every transport; the rest follow its hints. */
static const struct erma_rma_cfg defaults = {
    .slots = 256,
    .inbound_window = 1u << 20,
    .max_regions = 1024,
    .serve_batch = 16,
    .nack_threshold = 1024,
    .solicits = 64,
    .solicit_window = 1u << 20,
    .transfers = 64,
};

#define DEFAULT_BASE_RTT_NS 10000
#define DEFAULT_DISPATCH_NS 10000

static uint64_t max64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

static void cfg_defaults(struct erma_rma_cfg *c, const struct erma_transport_hints *h)
{
    const uint64_t base = h->base_rtt_ns ? h->base_rtt_ns : DEFAULT_BASE_RTT_NS;
    while (!c->identity) /* libsodium's generator: rand() is neither random nor thread-safe */
        randombytes_buf(&c->identity, sizeof c->identity);
    c->slots = c->slots ? c->slots : defaults.slots;
    c->inbound_window = c->inbound_window ? c->inbound_window : defaults.inbound_window;
    c->max_regions = c->max_regions ? c->max_regions : defaults.max_regions;
    c->serve_batch = c->serve_batch ? c->serve_batch : defaults.serve_batch;
    c->nack_threshold = c->nack_threshold ? c->nack_threshold : defaults.nack_threshold;
    c->solicits = c->solicits ? c->solicits : defaults.solicits;
    c->solicit_window = c->solicit_window ? c->solicit_window : defaults.solicit_window;
    /* a quarter stays for the other initiators */
    if (!c->solicits_per_source)
        c->solicits_per_source = c->solicits - c->solicits / 4;
    if (!c->solicit_window_per_source)
        c->solicit_window_per_source =
            (uint32_t)max64(c->solicit_window - c->solicit_window / 4, ERMA_RMA_MAX_OP);
    c->transfers = c->transfers ? c->transfers : defaults.transfers;
    if (!c->dispatch_timeout_ns)
        c->dispatch_timeout_ns = max64(h->jitter_ns, DEFAULT_DISPATCH_NS);
    if (!c->op_timeout_min_ns)
        c->op_timeout_min_ns = max64(h->min_timeout_ns, 5 * base);
    if (!c->op_timeout_max_ns)
        c->op_timeout_max_ns = max64(max64(10 * h->min_timeout_ns, 200 * base),
                                     c->op_timeout_min_ns);
    /* the margin eats into a WRITE's time for its data: a quarter at most */
    const uint64_t shortest = c->op_timeout_ns ? c->op_timeout_ns : c->op_timeout_min_ns;
    if (!c->clock_skew_ns && !h->shared_clock)
        c->clock_skew_ns = shortest / 4 < 1000000 ? shortest / 4 : 1000000;
    /* 1RMA's NACK threshold: the work a response queued behind can wait for
     * and still reach its initiator before the shortest op timeout an
     * initiator configured like this one sets (a fixed timeout, else the
     * RTO's floor, base RTT + op_timeout_min_ns). At least one largest op. */
    if (!c->nack_bytes) {
        const uint64_t timeout = c->op_timeout_ns ? c->op_timeout_ns : base + c->op_timeout_min_ns;
        const uint64_t spent = base + c->dispatch_timeout_ns;
        const uint64_t bps = h->link_bps ? h->link_bps : 25000000000ull;
        const uint64_t least = ERMA_RMA_MAX_OP + RMA_OVERHEAD;
        const uint64_t bytes =
            timeout > spent ? (uint64_t)((double)(timeout - spent) * (double)bps / 8e9) : 0;
        c->nack_bytes = bytes > least ? bytes : least;
    }
}

static bool cfg_valid(const struct erma_rma_cfg *c)
{
    return c->slots <= 65535 && c->inbound_window >= ERMA_RMA_MAX_OP &&
           c->max_regions <= 65535 && c->solicits <= 65535 &&
           c->solicit_window >= ERMA_RMA_MAX_OP && c->transfers <= 65535 &&
           c->solicits_per_source <= c->solicits &&
           c->solicit_window_per_source <= c->solicit_window &&
           c->solicit_window_per_source >= ERMA_RMA_MAX_OP &&
           c->nack_threshold <= (1u << 20) && c->op_timeout_min_ns <= c->op_timeout_max_ns &&
           c->op_timeout_max_ns <= RMA_MAX_TTL_NS && c->op_timeout_ns <= RMA_MAX_TTL_NS &&
           c->clock_skew_ns <= RMA_MAX_TTL_NS;
}

/* The parts bottom up: each may use those before it. */
static int parts_init(struct erma_rma *rma)
{
    int rc = erma__cq_init(rma);
    if (rc == ERMA_OK)
        rc = erma__regions_init(rma);
    if (rc == ERMA_OK)
        rc = erma__serve_init(rma);
    if (rc == ERMA_OK)
        rc = erma__portal_init(rma);
    if (rc == ERMA_OK)
        rc = erma__exec_init(rma);
    return rc;
}

static void parts_fini(struct erma_rma *rma)
{
    erma__exec_fini(rma);
    erma__portal_fini(rma);
    erma__serve_fini(rma);
    erma__regions_fini(rma);
    erma__cq_fini(rma);
    erma__rma_keys_forget(rma);
}

int erma_rma_create(struct erma_endpoint *ep, const struct erma_rma_cfg *cfg,
                    struct erma_rma **out)
{
    if (!ep || !out)
        return ERMA_EINVAL;
    if (!erma__crypto_init())
        return ERMA_ENOTSUP;
    struct erma_rma *rma = calloc(1, sizeof *rma);
    if (!rma)
        return ERMA_ENOMEM;
    rma->ep = ep;
    rma->tr = ep->tr;
    rma->cfg = cfg ? *cfg : (struct erma_rma_cfg){0};
    cfg_defaults(&rma->cfg, &rma->tr->hints);
    if (!cfg_valid(&rma->cfg) || rma->tr->max_pkt < RMA_OVERHEAD + 128) {
        free(rma);
        return ERMA_EINVAL;
    }
    rma->pkt_data = rma->tr->max_pkt - RMA_OVERHEAD;
    /* Nonces: from the wall clock in ns, one per packet sent, so that an
     * engine restarted with the same identity and address (the same Kd)
     * starts past every nonce its predecessor used. */
    rma->ctr = erma__rma_wallclock_ns();
    rma->aes = erma__crypto_aes_available() && !rma->cfg.no_aes;
    erma__ep_clock(ep); /* the parts start at ep->now */
    if (rma->tr->hints.shared_clock)
        rma->wire_sync_ns = UINT64_MAX;
    wire_sync(rma);
    int rc = parts_init(rma);
    const struct erma_ep_proto hooks = {hook_rx, hook_poll, hook_after_flush, hook_next_timer,
                                       rma, NULL};
    const uint8_t id = ERMA_PROTO_RMA;
    if (rc == ERMA_OK)
        rc = erma__ep_register(ep, &hooks, &id, 1);
    if (rc != ERMA_OK) {
        parts_fini(rma);
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
    erma__ep_unregister(rma->ep, rma);
    parts_fini(rma);
    free(rma);
}

__attribute__((noinline)) static int poll_queue(struct erma_rma *rma,
                                                struct erma_rma_completion *out, int max)
{
    int n = 0;
    for (struct rma_done d; n < max && erma__cq_pop(&rma->cq, &d); n++) {
        out[n] = d.c;
        erma__rma_release(rma, &out[n]);
    }
    return n;
}

int erma_rma_poll(struct erma_rma *rma, struct erma_rma_completion *out, int max)
{
    if (!rma || (!out && max > 0))
        return ERMA_EINVAL;
    /* polled every loop pass, mostly empty: the loop apart, so that this
     * path saves no registers */
    return rma->cq.len ? poll_queue(rma, out, max) : 0;
}

uint64_t erma_rma_identity(const struct erma_rma *rma)
{
    return rma->cfg.identity;
}

void erma_rma_get_stats(const struct erma_rma *rma, struct erma_rma_stats *out)
{
    *out = rma->stats;
}

void erma_rma_get_cfg(const struct erma_rma *rma, struct erma_rma_cfg *out)
{
    *out = rma->cfg;
}

int erma_rma_uri(const struct erma_rma *rma, char *out, size_t len)
{
    return rma ? erma_endpoint_uri(rma->ep, out, len) : ERMA_EINVAL;
}
