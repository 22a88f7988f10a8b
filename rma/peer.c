/* rma/peer.c - the initiator's peers: their addresses, round-trip
 * estimates and the timeouts these set, and the virtual paths its ops to
 * each spread over (erma/sdk/cc.h). */
#include <stdlib.h>

#include "portal.h"

int erma_rma_peer(struct erma_rma *rma, const char *uri, uint8_t tid)
{
    char ep[256];
    struct erma_addr addr;
    if (!rma || !uri)
        return ERMA_EINVAL;
    int rc = erma_uri_for_thread(uri, tid, ep, sizeof ep);
    if (rc == ERMA_OK)
        rc = erma_transport_resolve(rma->tr, ep, &addr);
    if (rc != ERMA_OK)
        return rc;
    struct rma_portal *p = rma->portal;
    for (uint32_t i = 0; i < p->npeers; i++)
        if (erma_addr_eq(&p->peers[i].addr, &addr))
            return (int)i;
    if (p->npeers == p->peers_cap) {
        const uint32_t cap = p->peers_cap ? 2 * p->peers_cap : 16;
        if (cap > 65536)
            return ERMA_ENOSLOTS;
        struct peer *peers = realloc(p->peers, cap * sizeof *peers);
        if (!peers)
            return ERMA_ENOMEM;
        p->peers = peers;
        p->peers_cap = cap;
    }
    p->peers[p->npeers] = (struct peer){.addr = addr};
    erma_paths_init(&p->peers[p->npeers].ps, rma->ep->npaths);
    return (int)p->npeers++;
}

bool erma__peer_known(const struct erma_rma *rma, int peer)
{
    return peer >= 0 && (uint32_t)peer < rma->portal->npeers;
}

/* ---- round trips and timeouts ---- */

/* The longest round trip lately halves every STALL_HALF_NS (as RPC's,
 * erma/rpc.h, Busy hosts): a peer whose loop was descheduled once for a
 * time slice will likely be again. */
#define STALL_HALF_NS 100000000ull

static uint64_t stall_now(const struct peer *p, uint64_t now)
{
    const uint64_t halvings = (now > p->stall_at_ns ? now - p->stall_at_ns : 0) / STALL_HALF_NS;
    return halvings < 64 ? p->stall_ns >> halvings : 0;
}

/* srtt + 4 rttvar, with the floor as the least margin over srtt (a steady
 * RTT has no variance, and no time for jitter), at least twice the longest
 * round trip lately, after a timeout at least the doubled RTO until a new
 * sample; the cap, also before any sample. */
static uint64_t peer_rto(const struct erma_rma *rma, const struct peer *p)
{
    const struct erma_rma_cfg *c = &rma->cfg;
    if (!p->sampled)
        return c->op_timeout_max_ns;
    const uint64_t var = 4 * p->rttvar_ns, margin = var > c->op_timeout_min_ns ? var
                                                                            : c->op_timeout_min_ns;
    uint64_t rto = p->srtt_ns + margin;
    const uint64_t stall = 2 * stall_now(p, rma->ep->now);
    rto = rto > stall ? rto : stall;
    rto = rto > p->backoff_ns ? rto : p->backoff_ns;
    return rto < c->op_timeout_max_ns ? rto : c->op_timeout_max_ns;
}

/* RFC 6298's estimator, from authentic answers only; a round trip spent
 * mostly inside the hosts (a loop descheduled) is remembered as a stall,
 * one slowed on the way (a slow path, which the paths prune) is not. */
void erma__peer_rtt_sample(struct erma_rma *rma, int peer, uint64_t rtt, uint64_t host)
{
    struct peer *p = &rma->portal->peers[peer];
    if (!p->sampled) {
        p->srtt_ns = rtt;
        p->rttvar_ns = rtt / 2;
        p->sampled = true;
    } else {
        const uint64_t diff = rtt > p->srtt_ns ? rtt - p->srtt_ns : p->srtt_ns - rtt;
        p->rttvar_ns = (3 * p->rttvar_ns + diff) / 4;
        p->srtt_ns = (7 * p->srtt_ns + rtt) / 8;
    }
    if (2 * host >= rtt && rtt >= stall_now(p, rma->ep->now)) {
        p->stall_ns = rtt;
        p->stall_at_ns = rma->ep->now;
    }
    p->backoff_ns = 0;
}

/* A WRITE or REKEY makes two round trips. */
uint64_t erma__peer_op_timeout(const struct erma_rma *rma, int peer, uint8_t op)
{
    if (rma->cfg.op_timeout_ns)
        return rma->cfg.op_timeout_ns;
    const uint64_t rto = peer_rto(rma, &rma->portal->peers[peer]);
    return op == ERMA_RMA_READ ? rto : 2 * rto;
}

/* Doubles the RTO this op had (not again for each op of one burst). */
void erma__peer_backoff(struct erma_rma *rma, int peer, uint64_t rto)
{
    struct peer *p = &rma->portal->peers[peer];
    const uint64_t b = 2 * rto < rma->cfg.op_timeout_max_ns ? 2 * rto : rma->cfg.op_timeout_max_ns;
    p->backoff_ns = b > p->backoff_ns ? b : p->backoff_ns;
}

int erma_rma_peer_rtt(const struct erma_rma *rma, int peer, struct erma_rma_rtt *out)
{
    if (!rma || !out || !erma__peer_known(rma, peer))
        return ERMA_EINVAL;
    const struct peer *p = &rma->portal->peers[peer];
    *out = (struct erma_rma_rtt){.srtt_ns = p->srtt_ns, .rttvar_ns = p->rttvar_ns,
                                 .rto_ns = rma->cfg.op_timeout_ns ? rma->cfg.op_timeout_ns
                                                                  : peer_rto(rma, p)};
    return ERMA_OK;
}

/* ---- virtual paths (erma/sdk/cc.h) ---- */

/* A pruned path rests 4 of the peer's RTOs, twice that after each prune. */
static uint64_t path_rest(const struct erma_rma *rma, const struct peer *p)
{
    return 4 * peer_rto(rma, p);
}

uint8_t erma__path_pick(struct erma_rma *rma, int peer)
{
    return erma_paths_pick(&rma->portal->peers[peer].ps, rma->ep->now);
}

bool erma__path_end(struct erma_rma *rma, int peer, uint8_t path, int status)
{
    struct peer *p = &rma->portal->peers[peer];
    if (status == ERMA_ETIMEDOUT)
        rma->stats.paths_pruned += erma_paths_lost(&p->ps, path, rma->ep->now,
                                                   path_rest(rma, p));
    else
        erma_paths_done(&p->ps, path);
    return p->ps.p[path].pruned_until != 0;
}

/* No out-of-order measure (late 0): ops are independent, and a burst of
 * them overtakes itself across paths without any path standing out. */
void erma__path_sample(struct erma_rma *rma, int peer, uint8_t path, uint64_t rtt_ns)
{
    struct peer *p = &rma->portal->peers[peer];
    rma->stats.paths_pruned += erma_paths_sample(&p->ps, path, rtt_ns, 0, rma->ep->now,
                                                 path_rest(rma, p));
    p->ps.clock = (int8_t)path; /* the next op leaves where this answer came */
}
