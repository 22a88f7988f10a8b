/* The nexus: handler registry, worker threads. */
#include <sched.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "erma/log.h"
#include "server.h"

#define WORKER_QUEUE 65536

#define WORKER_SPINS 2000 /* empty polls before an idle worker sleeps */

/* Sleeps until the queue may hold work or the nexus stops; returns a
 * request if one came meanwhile. sleeping is read and written under the
 * lock: the loop pushes, then takes the lock to look at it; we look at the
 * queue under the lock after setting it, so no push goes unnoticed. */
static struct erma_req *worker_sleep(struct worker *w)
{
    pthread_mutex_lock(&w->lock);
    w->sleeping = true;
    struct erma_req *rq = erma__mpsc_pop(&w->queue);
    if (!rq && !atomic_load(&w->nx->stop))
        pthread_cond_wait(&w->wake, &w->lock);
    w->sleeping = false;
    pthread_mutex_unlock(&w->lock);
    return rq;
}

static void worker_signal(struct worker *w)
{
    pthread_mutex_lock(&w->lock);
    if (w->sleeping)
        pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    unsigned idle = 0;
    while (!atomic_load_explicit(&w->nx->stop, memory_order_acquire)) {
        struct erma_req *rq = erma__mpsc_pop(&w->queue);
        if (!rq && ++idle > WORKER_SPINS) {
            rq = worker_sleep(w);
            idle = 0;
        }
        if (!rq)
            continue;
        idle = 0;
        struct handler *h = &w->nx->handlers[rq->type];
        atomic_load_explicit(&h->fn, memory_order_acquire)(rq, h->ctx);
        if (!rq->responded) {
            ERMA_WARN("worker handler for type %u returned without a response; "
                      "sending an empty one", rq->type);
            erma_msgbuf_resize(&rq->pre_resp, 0);
            rq->resp = &rq->pre_resp;
            rq->responded = true;
        }
        while (erma__mpsc_push(&rq->rpc->server.worker_done, rq) != ERMA_OK)
            sched_yield();
    }
    return NULL;
}

void erma__nexus_to_worker(struct erma_nexus *nx, struct erma_req *rq, unsigned pick)
{
    const unsigned i = pick % nx->nworkers;
    while (erma__mpsc_push(&nx->workers[i].queue, rq) != ERMA_OK)
        sched_yield();
    worker_signal(&nx->workers[i]);
}

int erma_nexus_create(const struct erma_nexus_cfg *cfg, struct erma_nexus **out)
{
    if (!out)
        return ERMA_EINVAL;
    struct erma_nexus *nx = calloc(1, sizeof *nx);
    if (!nx)
        return ERMA_ENOMEM;
    if (cfg && cfg->psk) {
        nx->secure = true;
        memcpy(nx->psk, cfg->psk, ERMA_PSK_BYTES);
    }
    const unsigned n = cfg ? cfg->workers : 0;
    if (n) { /* a worker's queue is cache-line aligned (common/ring.h): so must it be */
        nx->workers = aligned_alloc(alignof(struct worker), n * sizeof *nx->workers);
        if (!nx->workers) {
            free(nx);
            return ERMA_ENOMEM;
        }
        memset(nx->workers, 0, n * sizeof *nx->workers);
    }
    for (unsigned i = 0; i < n; i++) {
        struct worker *w = &nx->workers[i];
        w->nx = nx;
        pthread_mutex_init(&w->lock, NULL);
        pthread_cond_init(&w->wake, NULL);
        if (erma__mpsc_init(&w->queue, WORKER_QUEUE) != ERMA_OK ||
            pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            erma__mpsc_destroy(&w->queue);
            pthread_cond_destroy(&w->wake);
            pthread_mutex_destroy(&w->lock);
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
        struct worker *w = &nx->workers[i];
        pthread_mutex_lock(&w->lock);
        pthread_cond_signal(&w->wake);
        pthread_mutex_unlock(&w->lock);
        pthread_join(w->thread, NULL);
        erma__mpsc_destroy(&w->queue);
        pthread_cond_destroy(&w->wake);
        pthread_mutex_destroy(&w->lock);
    }
    free(nx->workers);
    sodium_memzero(nx->psk, sizeof nx->psk);
    free(nx);
}

int erma_handler_register(struct erma_nexus *nx, uint8_t req_type, erma_handler_fn fn,
                          enum erma_handler_mode mode, void *ctx)
{
    if (!nx || !fn || (mode == ERMA_WORKER && nx->nworkers == 0) ||
        (mode != ERMA_WORKER && mode != ERMA_DISPATCH))
        return ERMA_EINVAL;
    struct handler *h = &nx->handlers[req_type];
    if (atomic_exchange(&h->claimed, true)) { /* the same registration again is no error */
        erma_handler_fn was;
        while (!(was = atomic_load_explicit(&h->fn, memory_order_acquire)))
            sched_yield(); /* claimed by a registration not done yet */
        return was == fn && h->ctx == ctx && h->mode == mode ? ERMA_OK : ERMA_EINVAL;
    }
    h->ctx = ctx;
    h->mode = mode;
    atomic_store_explicit(&h->fn, fn, memory_order_release);
    return ERMA_OK;
}
