/* Setting the kvcs client up (erma/kvcs.h): its endpoint, every server's
 * sessions, region and key; down marks and the probes that lift them; the
 * method, stats and op info accessors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "erma/clock.h"
#include "erma/keys.h"
#include "erma/rma.h"
#include "kvcs/client.h"

#define RX_SESSIONS 128 /* sessions the endpoint's RX ring takes (4096 / 32 credits) */

bool kvcs__transport_failure(int st)
{
    switch (st) {
    case ERMA_ETIMEDOUT:
    case ERMA_EPEERFAILED:
    case ERMA_ESESSRESET:
    case ERMA_ECANCELLED:
    case ERMA_EREFUSED:
    case ERMA_ENACK:
    case ERMA_EDISPATCH:
    case ERMA_EAUTH:
    case ERMA_ENOREGION:
    case ERMA_ESUPERSEDED: /* rekeyed: the probe fetches the key again */
        return true;
    default:
        return false;
    }
}

/* Ops pass a server marked down by; down_ns after its first failure a
 * probe (the REGION request, which also fetches a restarted server's new
 * key) asks whether it is back. Failures while it is down (tries already
 * under way, ops whose replicas are all down) do not delay that probe. */
void kvcs__mark_down(struct kvcs_client *c, uint32_t server, int err)
{
    struct server *s = &c->srv[server];
    if (!s->down)
        s->down_until = erma_now_ns() + c->cfg.down_ns;
    s->down = true;
    s->down_err = err;
}

/* The probe failed (err, when it got that far): the next one in down_ns. */
static void probe_later(struct kvcs_client *c, struct server *s, int err)
{
    s->down = true;
    s->down_until = erma_now_ns() + c->cfg.down_ns;
    if (err)
        s->down_err = err;
}

/* The server's sessions in turn, so that its requests share their slots;
 * -1 when none is there (failed ones are opened again by the probe). */
int kvcs__session_of(struct kvcs_client *c, struct server *s)
{
    for (uint32_t k = 0; k < c->nsess; k++) {
        int *sess = &s->sess[s->next_sess++ % c->nsess];
        if (*sess >= 0)
            return *sess;
    }
    return -1;
}

/* ---- setting up: sessions and each table's region ---- */

static void on_sm(struct erma_rpc *rpc, int session, enum erma_sm_event ev, int err, void *ctx)
{
    (void)rpc;
    struct kvcs_client *c = ctx;
    if (ev != ERMA_SM_PEER_FAILED && ev != ERMA_SM_CONNECT_FAILED)
        return;
    for (uint32_t i = 0; i < c->nsrv; i++)
        for (uint32_t k = 0; k < c->nsess; k++)
            if (c->srv[i].sess[k] == session) {
                c->srv[i].sess[k] = -1;
                kvcs__mark_down(c, i, err);
            }
}

/* The answer to a REGION fetch (the key service), at start or as a probe. */
static void on_region(void *tag, int status, const struct erma_rkey *key, const uint8_t *info,
                      size_t info_len)
{
    struct server *s = tag;
    if (s->c->destroying)
        return;
    if (status == ERMA_OK)
        status = kv_remote_of(key, info, info_len, &s->remote);
    s->region_rc = status == ERMA_OK ? 0 : status;
    s->probing = false;
    if (status == ERMA_OK)
        s->down = false;
    else
        probe_later(s->c, s, status);
}

/* Opens the server's sessions that are not (or no longer) there, and asks
 * for its region over the first once the last answer failed. */
static int ask_region(struct kvcs_client *c, struct server *s)
{
    for (uint32_t k = 0; k < c->nsess; k++)
        if (s->sess[k] < 0 && (s->sess[k] = erma_session_create(c->rpc, s->uri, s->tid)) < 0)
            return s->sess[k];
    if (s->region_rc >= 0)
        return ERMA_OK;
    const int rc = erma_keys_fetch(c->rpc, c->rma, s->sess[0], KVCS_TYPE_BASE + KV_REGION,
                                   KV_KEYS_NAME, on_region, s);
    if (rc == ERMA_OK)
        s->region_rc = 1;
    return rc == ERMA_ENOMEM ? rc : ERMA_OK; /* else asked again next time */
}

/* Servers marked down whose mark has passed are asked for their region
 * again: the probe. */
void kvcs__probe_servers(struct kvcs_client *c, uint64_t now)
{
    for (uint32_t i = 0; i < c->nsrv; i++) {
        struct server *s = &c->srv[i];
        if (!s->down || s->probing || now < s->down_until)
            continue;
        s->region_rc = -1;
        const int rc = ask_region(c, s);
        if (rc == ERMA_OK && s->region_rc == 1)
            s->probing = true;
        else
            probe_later(c, s, rc); /* could not even ask */
    }
}

static bool server_ready(const struct kvcs_client *c, const struct server *s)
{
    for (uint32_t k = 0; k < c->nsess; k++)
        if (!erma_session_connected(c->rpc, s->sess[k]))
            return false;
    return s->region_rc == 0;
}

/* Every server's sessions, region and key, before the deadline. */
static int fetch_regions(struct kvcs_client *c)
{
    const uint64_t end = erma_now_ns() + c->cfg.connect_timeout_ns;
    for (;;) {
        bool all = true;
        for (uint32_t i = 0; i < c->nsrv; i++) {
            struct server *s = &c->srv[i];
            const int rc = ask_region(c, s);
            if (rc != ERMA_OK)
                return rc;
            all = all && server_ready(c, s);
        }
        if (all)
            return ERMA_OK;
        if (erma_now_ns() > end)
            return ERMA_ETIMEDOUT;
        erma_endpoint_run_once(c->ep);
    }
}

static int servers_up(struct kvcs_client *c, const char *const *uris)
{
    for (uint32_t i = 0; i < c->nsrv; i++) {
        struct server *s = &c->srv[i];
        const char *uri = uris[i / c->cfg.server_threads];
        s->c = c;
        s->tid = (uint8_t)(i % c->cfg.server_threads);
        for (uint32_t k = 0; k < MAX_SESS; k++)
            s->sess[k] = -1;
        s->region_rc = -1;
        if (!uri || (size_t)snprintf(s->uri, sizeof s->uri, "%s", uri) >= sizeof s->uri)
            return ERMA_EADDR;
        s->remote.peer = erma_rma_peer(c->rma, s->uri, s->tid);
        if (s->remote.peer < 0)
            return s->remote.peer;
    }
    return fetch_regions(c);
}

static void defaults(struct kvcs_client_cfg *cfg)
{
    if (!cfg->replicas)
        cfg->replicas = 3;
    if (cfg->replicas > cfg->nservers)
        cfg->replicas = cfg->nservers;
    if (cfg->replicas > MAX_R)
        cfg->replicas = MAX_R;
    if (!cfg->vnodes)
        cfg->vnodes = 64;
    if (!cfg->max_ops)
        cfg->max_ops = 256;
    if (!cfg->attempt_timeout_ns)
        cfg->attempt_timeout_ns = 100000000;
    if (!cfg->hedge_stall_ns)
        cfg->hedge_stall_ns = 1000000;
    if (!cfg->down_ns)
        cfg->down_ns = 200000000;
    if (!cfg->connect_timeout_ns)
        cfg->connect_timeout_ns = 5000000000ull;
    if (!cfg->server_threads)
        cfg->server_threads = 1;
}

static int endpoint_up(struct kvcs_client *c)
{
    const struct kvcs_client_cfg *cfg = &c->cfg;
    const struct erma_rpc_cfg rcfg = {.req_timeout_ns = cfg->attempt_timeout_ns,
                                      .failure_ns = cfg->failure_ns,
                                      .sm_handler = on_sm, .sm_ctx = c, .cc = {.off = cfg->cc_off}};
    /* Room for every GET's largest item at once, and no executor windows:
     * the executor holds a transfer's chunks while slots, the inbound
     * window or its CC window are short, and only a transfer's own
     * completions wake it again (GETs of big items stalled). The reads in
     * flight are bounded instead: each op's tries at its replicas, and as
     * many again for tries whose op finished before them. */
    uint64_t gets = (uint64_t)cfg->max_ops * cfg->replicas * 2;
    if (gets > 65536)
        gets = 65536;
    const uint64_t chunks = (KV_MAX_ITEM + ERMA_RMA_MAX_OP - 1) / ERMA_RMA_MAX_OP;
    const uint64_t slots = gets * chunks + 64, window = gets * 32768ull;
    const struct erma_rma_cfg mcfg = {.slots = slots < 65535 ? (uint32_t)slots : 65535,
                                      .inbound_window = window < (1u << 30) ? (uint32_t)window
                                                                            : 1u << 30,
                                      .transfers = (uint32_t)gets, .cc_off = true,
                                      .op_timeout_ns = cfg->attempt_timeout_ns,
                                      .dispatch_timeout_ns = cfg->attempt_timeout_ns};
    const struct erma_nexus_cfg ncfg = {.psk = cfg->psk};
    int rc = erma_nexus_create(&ncfg, &c->nx);
    if (rc == ERMA_OK)
        rc = erma_endpoint_create(cfg->uri, 0, NULL, &c->ep);
    if (rc == ERMA_OK)
        rc = erma_rpc_create(c->nx, c->ep, &rcfg, &c->rpc);
    if (rc == ERMA_OK)
        rc = erma_rma_create(c->ep, &mcfg, &c->rma);
    if (rc == ERMA_OK)
        rc = kv_reader_create(c->rma, (uint32_t)gets, 0, &c->reader);
    if (rc == ERMA_OK && !cfg->no_loc_cache)
        rc = kv_reader_cache(c->reader, cfg->loc_cache ? cfg->loc_cache : 65536);
    return rc;
}

static int client_up(struct kvcs_client *c)
{
    const uint32_t n = c->cfg.max_ops;
    c->srv = calloc(c->nsrv, sizeof *c->srv);
    c->ops = calloc(n, sizeof *c->ops);
    c->free_ops = calloc(n, sizeof *c->free_ops);
    if (!c->srv || !c->ops || !c->free_ops)
        return ERMA_ENOMEM;
    for (uint32_t i = 0; i < n; i++) {
        c->ops[i].c = c;
        c->free_ops[c->nfree++] = n - 1 - i;
    }
    int rc = kvcs_ring_create(c->cfg.nservers, c->cfg.vnodes, &c->ring);
    if (rc == ERMA_OK)
        rc = endpoint_up(c);
    if (rc == ERMA_OK)
        rc = servers_up(c, c->cfg.servers);
    return rc;
}

int kvcs_client_create(const struct kvcs_client_cfg *cfg,
                       struct kvcs_client **out)
{
    if (!cfg || !cfg->uri || !cfg->servers || !cfg->nservers || !out ||
        cfg->max_ops > 65536 || (cfg->method != KVCS_RPC && cfg->method != KVCS_READ) ||
        cfg->server_threads > KVCS_MAX_THREADS)
        return ERMA_EINVAL;
    struct kvcs_client *c = calloc(1, sizeof *c);
    if (!c)
        return ERMA_ENOMEM;
    c->cfg = *cfg;
    defaults(&c->cfg);
    c->nsrv = c->cfg.nservers * c->cfg.server_threads;
    c->nsess = RX_SESSIONS / c->nsrv < MAX_SESS ? RX_SESSIONS / c->nsrv : MAX_SESS;
    if (!c->nsess)
        c->nsess = 1;
    c->probe_tick = c->cfg.attempt_timeout_ns / 8;
    if (c->probe_tick > 1000000)
        c->probe_tick = 1000000;
    const int rc = client_up(c);
    if (rc != ERMA_OK) {
        kvcs_client_destroy(c);
        return rc;
    }
    c->cfg.servers = NULL; /* the caller's; copied into srv[] */
    *out = c;
    return ERMA_OK;
}

void kvcs_client_destroy(struct kvcs_client *c)
{
    if (!c)
        return;
    erma_rma_destroy(c->rma); /* drops the reader's reads without completions */
    kv_reader_destroy(c->reader);
    c->destroying = true; /* requests fail now: their tries are freed, no callback */
    erma_rpc_destroy(c->rpc);
    kvcs__free_tries(c); /* the reads' */
    erma_endpoint_destroy(c->ep);
    erma_nexus_destroy(c->nx);
    kvcs_ring_destroy(c->ring);
    free(c->srv);
    free(c->ops);
    free(c->free_ops);
    free(c);
}

void kvcs_client_set_method(struct kvcs_client *c, enum kvcs_method m)
{
    if (c)
        c->cfg.method = m;
}

void kvcs_client_get_stats(const struct kvcs_client *c,
                           struct kvcs_client_stats *out)
{
    struct kv_reader_stats rs;
    kv_reader_get_stats(c->reader, &rs);
    *out = c->stats;
    out->one_read = rs.cache_hits;
    out->stale_locs = rs.cache_stale;
}

int kvcs_op_info(const struct kvcs_client *c, struct kvcs_op_info *out)
{
    if (!c || !out || !c->in_cb)
        return ERMA_EINVAL;
    *out = c->info;
    return ERMA_OK;
}

