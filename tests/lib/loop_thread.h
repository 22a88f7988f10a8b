/*
 * Shared by tests that run one endpoint's loop on a thread of its own (a
 * target or server answering while the test thread blocks in a wait):
 * loop_thread_start() runs it until loop_thread_stop(). cmocka-asserting.
 */
#ifndef ERMA_TEST_LOOP_THREAD_H
#define ERMA_TEST_LOOP_THREAD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "erma/endpoint.h"

struct loop_thread {
    struct erma_endpoint *ep;
    atomic_bool stop;
    pthread_t th;
};

static inline bool loop_thread_stopped(void *ctx)
{
    return atomic_load(&((struct loop_thread *)ctx)->stop);
}

static inline void *loop_thread_main(void *arg)
{
    struct loop_thread *t = arg;
    erma_endpoint_run_until(t->ep, loop_thread_stopped, t, UINT64_MAX);
    return NULL;
}

static inline void loop_thread_start(struct loop_thread *t, struct erma_endpoint *ep)
{
    t->ep = ep;
    atomic_init(&t->stop, false);
    assert_int_equal(pthread_create(&t->th, NULL, loop_thread_main, t), 0);
}

/* Stops the loop (within ERMA_IDLE_SLEEP_MAX_NS) and joins its thread. */
static inline void loop_thread_stop(struct loop_thread *t)
{
    atomic_store(&t->stop, true);
    pthread_join(t->th, NULL);
}

#endif
