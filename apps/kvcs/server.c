/* A kvcs server (erma/kvcs.h): one kv table served by RPC and registered
 * for one-sided GETs, on one endpoint. */
#include <stdlib.h>

#include "kv/kv.h"
#include "kvcs/kvcs.h"
#include "erma/rma.h"
#include "erma/rpc.h"

struct kvcs_server {
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    struct erma_rpc *rpc;
    struct erma_rma *rma;
    struct kv *kv;
    struct kv_server *ks;
};

static int server_up(struct kvcs_server *s, const struct kvcs_server_cfg *cfg)
{
    const struct erma_nexus_cfg ncfg = {.workers = cfg->workers ? cfg->workers : 1,
                                        .psk = cfg->psk};
    int rc = kv_create(cfg->buckets ? cfg->buckets : 1u << 16,
                       cfg->log_bytes ? cfg->log_bytes : 64u << 20, &s->kv);
    if (rc == ERMA_OK)
        rc = erma_nexus_create(&ncfg, &s->nx);
    if (rc == ERMA_OK)
        rc = kv_serve(s->nx, KVCS_TYPE_BASE, s->kv, &s->ks);
    const struct erma_endpoint_cfg ecfg = {.idle_wait_ns = cfg->idle_wait_ns,
                                           .busy_poll = cfg->busy_poll};
    if (rc == ERMA_OK)
        rc = erma_endpoint_create(cfg->uri, 0, &ecfg, &s->ep);
    if (rc == ERMA_OK)
        rc = erma_rpc_create(s->nx, s->ep, NULL, &s->rpc);
    if (rc == ERMA_OK)
        rc = erma_rma_create(s->ep, NULL, &s->rma);
    if (rc == ERMA_OK)
        rc = kv_server_rma(s->ks, s->rpc, s->rma);
    return rc;
}

int kvcs_server_create(const struct kvcs_server_cfg *cfg,
                       struct kvcs_server **out)
{
    if (!cfg || !cfg->uri || !out)
        return ERMA_EINVAL;
    struct kvcs_server *s = calloc(1, sizeof *s);
    if (!s)
        return ERMA_ENOMEM;
    const int rc = server_up(s, cfg);
    if (rc != ERMA_OK) {
        kvcs_server_destroy(s);
        return rc;
    }
    *out = s;
    return ERMA_OK;
}

void kvcs_server_run(struct kvcs_server *srv, uint64_t ns)
{
    if (srv)
        erma_endpoint_run(srv->ep, ns);
}

void kvcs_server_destroy(struct kvcs_server *srv)
{
    if (!srv)
        return;
    kv_server_rma_end(srv->ks); /* before its rpc */
    if (srv->rma)
        erma_rma_destroy(srv->rma);
    if (srv->rpc)
        erma_rpc_destroy(srv->rpc);
    erma_endpoint_destroy(srv->ep);
    if (srv->nx)
        erma_nexus_destroy(srv->nx);
    kv_server_destroy(srv->ks);
    kv_destroy(srv->kv);
    free(srv);
}
