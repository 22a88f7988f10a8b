/* raftkv on the sim fabric (raftkv.h, "Event loop"): servers and clients
 * stepped in virtual time. */
#include "erma/sim.h"
#include "raftkv/raftkv.h"

struct sim_hook {
    struct raftkv_server *const *servers;
    struct raftkv_client *const *clients;
    unsigned ns, nc;
    bool (*done)(void *ctx);
    void *ctx;
    bool first, finished;
};

/* erma_sim_run asks done() before its first pass, then after every round
 * of passes: the first is let through so that a round always runs (and
 * sends what the last polls queued) between polls. */
static bool sim_hook(void *ctx)
{
    struct sim_hook *h = ctx;
    if (h->first) {
        h->first = false;
        return false;
    }
    int work = 0;
    for (unsigned i = 0; i < h->ns; i++)
        if (h->servers[i])
            work += raftkv_server_poll(h->servers[i]);
    for (unsigned i = 0; i < h->nc; i++)
        if (h->clients[i])
            work += raftkv_client_poll(h->clients[i]);
    h->finished = h->done && h->done(h->ctx);
    return h->finished || work > 0;
}

int raftkv_sim_run(struct erma_sim *sim, struct raftkv_server *const *servers,
                   unsigned nservers, struct raftkv_client *const *clients,
                   unsigned nclients, uint64_t duration_ns, bool (*done)(void *ctx),
                   void *ctx)
{
    struct erma_endpoint *eps[2 * RAFTKV_MAX_PEERS + 64];
    unsigned n = 0;
    if (nservers + nclients > sizeof eps / sizeof eps[0])
        return ERMA_EINVAL;
    for (unsigned i = 0; i < nservers; i++)
        if (servers[i])
            eps[n++] = raftkv_server_endpoint(servers[i]);
    for (unsigned i = 0; i < nclients; i++)
        if (clients[i])
            eps[n++] = raftkv_client_endpoint(clients[i]);
    erma_sim_use_clock(sim);
    const uint64_t end = erma_sim_now(sim) + duration_ns;
    struct sim_hook h = {servers, clients, nservers, nclients, done, ctx, false, false};
    if (done && done(ctx))
        return ERMA_OK;
    for (;;) {
        const uint64_t now = erma_sim_now(sim);
        if (now >= end)
            return done && done(ctx) ? ERMA_OK : ERMA_ETIMEDOUT;
        uint64_t until = end;
        for (unsigned i = 0; i < nservers; i++)
            if (servers[i]) {
                const uint64_t t = raftkv_server_next_timer(servers[i]);
                until = t < until ? t : until;
            }
        for (unsigned i = 0; i < nclients; i++)
            if (clients[i]) {
                const uint64_t t = raftkv_client_next_timer(clients[i]);
                until = t < until ? t : until;
            }
        h.first = true;
        erma_sim_run(sim, eps, n, until > now ? until - now : 0, sim_hook, &h);
        if (h.finished)
            return ERMA_OK;
    }
}
