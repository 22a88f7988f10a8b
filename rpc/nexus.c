/* The nexus: endpoint addressing, handler registry, worker threads. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "erma/log.h"
#include "internal.h"

#define WORKER_QUEUE 65536

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    unsigned idle = 0;
    while (!atomic_load_explicit(&w->nx->stop, memory_order_acquire)) {
        struct erma_req *rq = erma_mpsc_pop(&w->queue);
        if (!rq) {
            if (++idle > 1000) {
                nanosleep(&(struct timespec){0, 20000}, NULL);
            }
            continue;
        }
        idle = 0;
        const struct handler *h = &w->nx->handlers[rq->type];
        h->fn(rq, h->ctx);
        if (!rq->responded) {
            ERMA_WARN("worker handler for type %u returned without a response; "
                      "sending an empty one", rq->type);
            erma_resize_msgbuf(&rq->pre_resp, 0);
            rq->resp = &rq->pre_resp;
            rq->responded = true;
        }
        while (erma_mpsc_push(&rq->rpc->worker_done, rq) != ERMA_OK)
            sched_yield();
    }
    return NULL;
}

void nexus_to_worker(struct erma_nexus *nx, struct erma_req *rq)
{
    const unsigned i = atomic_fetch_add(&nx->next_worker, 1) % nx->nworkers;
    while (erma_mpsc_push(&nx->workers[i].queue, rq) != ERMA_OK)
        sched_yield();
}

int erma_nexus_create(const char *uri, const struct erma_nexus_cfg *cfg,
                      struct erma_nexus **out)
{
    const char *colon = uri ? strrchr(uri, ':') : NULL, *sep = uri ? strstr(uri, "://") : NULL;
    if (!out || !colon || !sep || colon < sep + 3)
        return ERMA_EADDR;
    char *end;
    const unsigned long port = strtoul(colon + 1, &end, 10);
    if (*end || colon[1] == 0 || port > 65535 || (size_t)(colon - uri) >= 160)
        return ERMA_EADDR;
    struct erma_nexus *nx = calloc(1, sizeof *nx);
    if (!nx)
        return ERMA_ENOMEM;
    memcpy(nx->scheme_host, uri, (size_t)(colon - uri));
    nx->base_port = (unsigned)port;
    const unsigned n = cfg ? cfg->workers : 0;
    if (n) {
        nx->workers = calloc(n, sizeof *nx->workers);
        if (!nx->workers) {
            free(nx);
            return ERMA_ENOMEM;
        }
    }
    for (unsigned i = 0; i < n; i++) {
        struct worker *w = &nx->workers[i];
        w->nx = nx;
        if (erma_mpsc_init(&w->queue, WORKER_QUEUE) != ERMA_OK ||
            pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            erma_mpsc_destroy(&w->queue);
            erma_nexus_destroy(nx);
            return ERMA_ENOMEM;
        }
        nx->nworkers++;
    }
    *out = nx;
    return ERMA_OK;
}

void erma_nexus_destroy(struct erma_nexus *nx)
{
    if (!nx)
        return;
    atomic_store(&nx->stop, true);
    for (unsigned i = 0; i < nx->nworkers; i++) {
        pthread_join(nx->workers[i].thread, NULL);
        erma_mpsc_destroy(&nx->workers[i].queue);
    }
    free(nx->workers);
    free(nx);
}

int erma_register_handler(struct erma_nexus *nx, uint8_t req_type, erma_handler_fn fn,
                          enum erma_handler_mode mode, void *ctx)
{
    if (!nx || !fn || nx->handlers[req_type].fn ||
        (mode == ERMA_WORKER && nx->nworkers == 0) ||
        (mode != ERMA_WORKER && mode != ERMA_DISPATCH))
        return ERMA_EINVAL;
    nx->handlers[req_type] = (struct handler){fn, ctx, mode};
    return ERMA_OK;
}

int nexus_endpoint_uri(const struct erma_nexus *nx, const char *base, uint8_t tid, char *out,
                       size_t len)
{
    const char *colon = strrchr(base, ':'), *sep = strstr(base, "://");
    if (!colon || !sep || colon < sep + 3)
        return ERMA_EADDR;
    char *end;
    const unsigned long port = strtoul(colon + 1, &end, 10) + tid;
    if (*end || colon[1] == 0 || port > 65535)
        return ERMA_EADDR;
    (void)nx;
    const int n = snprintf(out, len, "%.*s:%lu", (int)(colon - base), base, port);
    return n < 0 || (size_t)n >= len ? ERMA_EADDR : ERMA_OK;
}
