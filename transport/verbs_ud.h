/* transport/verbs_ud.h - the verbs transport's state, shared by its files:
 * verbs_ud.c (addresses, open and close, the QP), verbs_ah.c (address
 * handles and the resolver thread) and verbs_io.c (the data path and
 * error recovery). RDMA Unreliable Datagram QPs (erma/verbs.h). */
#ifndef ERMA_VERBS_UD_H
#define ERMA_VERBS_UD_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#include "erma/errors.h"
#include "erma/log.h"
#include "erma/sdk/rand.h"
#include "erma/version.h"
#include "transport/module.h"
#include "erma/verbs.h"

#define GRH 40
#define SQ_DEPTH 256
#define SIGNAL_EVERY 32 /* SQ_DEPTH must be at least twice this */
#define AH_SLOTS 1024   /* cached address handles; the least recently used go first */
#define AH_BUCKETS 2048
#define AH_QUEUE 64     /* address handles waiting for the resolver thread */
#define AH_RETRY_NS 1000000000ull /* a failed address handle is not retried for this long */
#define ASYNC_EVERY 1024 /* bursts between looks at the async events */
#define ADDR_LEN 22 /* GID (16), LID (2, network order), QPN (4, network order) */

enum { AH_FREE, AH_PENDING, AH_READY, AH_FAILED };

struct ah_slot {
    uint8_t key[18];   /* GID and LID of the peer */
    _Atomic int state; /* PENDING -> READY or FAILED is the resolver's */
    bool used;         /* clock bit for eviction */
    int32_t next;      /* hash chain */
    struct ibv_ah *ah;
    uint64_t retry_ns; /* FAILED: when to try again */
    uint64_t last_seq; /* 1 + the last send that used ah: kept until it completed */
};

struct verbs {
    struct erma_transport base;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *send_cq, *recv_cq;
    struct ibv_qp *qp;
    struct ibv_mr *mr;
    uint8_t *mem;       /* rq_depth receive buffers, then SQ_DEPTH send buffers */
    uint32_t rx_stride; /* GRH + the port's MTU: the largest UD packet a peer may send */
    uint32_t rq_depth, max_inline;
    uint8_t port, gid_index;
    bool port_down, dead;
    uint64_t posted, completed; /* sends */
    uint32_t repost[ERMA_MAX_BURST]; /* receive buffers handed out last time */
    unsigned nrepost, bursts;
    /* address handles: the cache is the data path's, creation the resolver's */
    struct ah_slot *ahs;
    int32_t *bucket;
    unsigned hand, nah;
    pthread_t resolver;
    bool resolver_started, stopping;
    pthread_mutex_t lock; /* the queue below and stopping */
    pthread_cond_t wake;
    uint32_t queue[AH_QUEUE];
    unsigned qhead, qlen;
};

static inline uint64_t verbs_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The transport address of GID, LID and QPN (ADDR_LEN bytes). */
static inline void verbs_make_addr(struct erma_addr *a, const void *gid, uint16_t lid,
                                   uint32_t qpn)
{
    memset(a, 0, sizeof *a);
    a->len = ADDR_LEN;
    memcpy(a->raw, gid, 16);
    lid = htons(lid);
    qpn = htonl(qpn);
    memcpy(a->raw + 16, &lid, 2);
    memcpy(a->raw + 18, &qpn, 4);
}

/* verbs_ah.c */
/* The resolver thread (arg: the struct verbs): creates the address
 * handles get_ah asks for. */
void *erma__verbs_resolver(void *arg);
/* Stops and joins the resolver thread, if it runs. */
void erma__verbs_stop_resolver(struct verbs *v);
/* The cached address handle for dst's GID and LID, or NULL while the
 * resolver creates it or after it failed (for AH_RETRY_NS). */
struct ah_slot *erma__verbs_get_ah(struct verbs *v, const struct erma_addr *dst);

/* verbs_ud.c */
/* Posts receive buffers idx[0..n) as one chain; 0 or ibv_post_recv's error. */
int erma__verbs_post_recv(struct verbs *v, const uint32_t *idx, unsigned n);
/* Posts every receive buffer but those the caller still holds (repost). */
int erma__verbs_post_all_recv(struct verbs *v);
/* INIT, RTR, RTS. */
int erma__verbs_qp_to_rts(struct verbs *v);

/* verbs_io.c */
int erma__verbs_tx_burst(struct erma_transport *tr, const struct erma_tx_pkt *pkts, unsigned n);
int erma__verbs_rx_burst(struct erma_transport *tr, struct erma_rx_pkt *pkts, unsigned max);

#endif
