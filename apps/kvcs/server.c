/* A kvcs server (erma/kvcs.h): one kv table per endpoint thread, each
 * served by RPC and registered for one-sided GETs on its own endpoint. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "kv/kv.h"
#include "kvcs/kvcs.h"
#include "erma/rma.h"
#include "erma/rpc.h"

/* One endpoint thread's share: its keys' table and all that serves it. */
struct part {
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    struct erma_rpc *rpc;
    struct erma_rma *rma;
    struct kv *kv;
    struct kv_server *ks;
    pthread_t thread; /* parts 1.. run on their own threads */
    bool running;
    struct kvcs_server *srv;
};

struct kvcs_server {
    uint32_t nparts;
    atomic_bool stop;
    struct part parts[];
};

/* The table of one of n parts: the configured sizes split n ways. */
static int part_table(const struct kvcs_server_cfg *cfg, uint32_t n, struct kv **out)
{
    uint32_t buckets = (cfg->buckets ? cfg->buckets : 1u << 16) / n;
    uint64_t log = (cfg->log_bytes ? cfg->log_bytes : 64u << 20) / n;
    buckets = buckets < 1024 ? 1024 : buckets;
    log = log < (1u << 20) ? 1u << 20 : log;
    return kv_create(buckets, log, out);
}

static int part_up(struct part *p, const struct kvcs_server_cfg *cfg, uint32_t t, uint32_t n)
{
    const struct erma_nexus_cfg ncfg = {.workers = cfg->workers ? cfg->workers : 1,
                                        .psk = cfg->psk};
    int rc = part_table(cfg, n, &p->kv);
    if (rc == ERMA_OK)
        rc = erma_nexus_create(&ncfg, &p->nx);
    if (rc == ERMA_OK)
        rc = kv_serve(p->nx, KVCS_TYPE_BASE, p->kv, &p->ks);
    const struct erma_endpoint_cfg ecfg = {.idle_wait_ns = cfg->idle_wait_ns,
                                           .busy_poll = cfg->busy_poll};
    if (rc == ERMA_OK)
        rc = erma_endpoint_create(cfg->uri, (uint8_t)t, &ecfg, &p->ep);
    if (rc == ERMA_OK)
        rc = erma_rpc_create(p->nx, p->ep, NULL, &p->rpc);
    if (rc == ERMA_OK)
        rc = erma_rma_create(p->ep, NULL, &p->rma);
    if (rc == ERMA_OK)
        rc = kv_server_rma(p->ks, p->rpc, p->rma);
    return rc;
}

static void part_down(struct part *p)
{
    kv_server_rma_end(p->ks); /* before its rpc */
    if (p->rma)
        erma_rma_destroy(p->rma);
    if (p->rpc)
        erma_rpc_destroy(p->rpc);
    erma_endpoint_destroy(p->ep);
    if (p->nx)
        erma_nexus_destroy(p->nx);
    kv_server_destroy(p->ks);
    kv_destroy(p->kv);
}

static bool stopped(void *ctx)
{
    return atomic_load(&((struct kvcs_server *)ctx)->stop);
}

static void *part_loop(void *arg)
{
    struct part *p = arg;
    erma_endpoint_run_until(p->ep, stopped, p->srv, UINT64_MAX);
    return NULL;
}

int kvcs_server_create(const struct kvcs_server_cfg *cfg, struct kvcs_server **out)
{
    const uint32_t n = cfg && cfg->threads ? cfg->threads : 1;
    if (!cfg || !cfg->uri || !out || n > KVCS_MAX_THREADS)
        return ERMA_EINVAL;
    struct kvcs_server *s = calloc(1, sizeof *s + n * sizeof *s->parts);
    if (!s)
        return ERMA_ENOMEM;
    atomic_init(&s->stop, false);
    int rc = ERMA_OK;
    for (uint32_t t = 0; t < n && rc == ERMA_OK; t++, s->nparts++) {
        s->parts[t].srv = s;
        rc = part_up(&s->parts[t], cfg, t, n);
    }
    for (uint32_t t = 1; t < n && rc == ERMA_OK; t++) {
        struct part *p = &s->parts[t];
        rc = pthread_create(&p->thread, NULL, part_loop, p) == 0 ? ERMA_OK : ERMA_ESYS;
        p->running = rc == ERMA_OK;
    }
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
        erma_endpoint_run(srv->parts[0].ep, ns);
}

void kvcs_server_destroy(struct kvcs_server *srv)
{
    if (!srv)
        return;
    atomic_store(&srv->stop, true);
    for (uint32_t t = 1; t < srv->nparts; t++)
        if (srv->parts[t].running)
            pthread_join(srv->parts[t].thread, NULL);
    for (uint32_t t = 0; t < srv->nparts; t++)
        part_down(&srv->parts[t]);
    free(srv);
}
