/*
 * tests/lib/peer_pair.h - the "pair URI" mode of the peer programs (rpc_peer,
 * rma_peer), for fabrics that live in one process (verbs on the mock,
 * tests/verbs): the program's server on a thread, its client here.
 *
 * The server calls peer_pair_up(ep) once it listens and, in pair mode,
 * ends when peer_pair_done() (the client finished). peer_pair_run() waits
 * 30 s at most for the server to come up and returns the client's result,
 * or -1 when the server never came up (peer_pair.serve_rc says why).
 */
#ifndef ERMA_TESTS_PEER_PAIR_H
#define ERMA_TESTS_PEER_PAIR_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include "erma/endpoint.h"

static struct {
    bool on;                /* pair mode */
    char server_uri[256];   /* the server's address once it is up */
    atomic_int server_up;   /* 0 starting, 1 up, -1 ended */
    atomic_bool client_done;
    int (*serve)(const char *uri);
    int serve_rc;
} peer_pair;

static inline void peer_pair_up(struct erma_endpoint *ep)
{
    if (erma_endpoint_uri(ep, peer_pair.server_uri, sizeof peer_pair.server_uri) == ERMA_OK)
        atomic_store(&peer_pair.server_up, 1);
}

static inline bool peer_pair_done(void)
{
    return atomic_load(&peer_pair.client_done);
}

static inline void *peer_pair_thread(void *uri)
{
    peer_pair.serve_rc = peer_pair.serve(uri);
    atomic_store(&peer_pair.server_up, -1); /* if it never came up */
    return NULL;
}

static inline int peer_pair_run(const char *uri, int (*serve)(const char *uri),
                                int (*client)(const char *uri, const char *server))
{
    pthread_t t;
    peer_pair.on = true;
    peer_pair.serve = serve;
    if (pthread_create(&t, NULL, peer_pair_thread, (void *)uri))
        return -1;
    for (int i = 0; i < 30000 && !atomic_load(&peer_pair.server_up); i++)
        usleep(1000);
    const int rc = atomic_load(&peer_pair.server_up) == 1 ? client(uri, peer_pair.server_uri) : -1;
    atomic_store(&peer_pair.client_done, true);
    pthread_join(t, NULL);
    if (rc < 0)
        fprintf(stderr, "pair: the server did not come up\n");
    return rc;
}

#endif
