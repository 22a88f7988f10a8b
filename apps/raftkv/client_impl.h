/* The raftkv client (raftkv.h), inside: client.c keeps the ops (start,
 * completion, the loop, life), client_tries.c their tries (which replica,
 * when, and what the end of a try means). */
#ifndef RAFTKV_CLIENT_IMPL_H
#define RAFTKV_CLIENT_IMPL_H

#include "raftkv/raftkv.h"

#define URI_MAX 128

struct op {
    struct raftkv_client *c;
    bool busy, inflight, waiting, completed;
    uint8_t type;
    unsigned server; /* into srv: group g's replica r at g * cfg.nservers + r */
    uint64_t deadline, retry_at;
    uint64_t sent_at; /* the try in flight: when it started */
    struct erma_msgbuf req, resp;
    bool have_bufs;
    raftkv_fn cb;
    void *tag;
    uint64_t seq; /* writes: the op's number at this client; 0 for reads */
    int status;
    const uint8_t *val;
    uint32_t vlen;
};

struct server {
    char uri[URI_MAX];
    int sess;
    bool failed;         /* a try failed there, and it has not answered since */
    uint64_t failed_at;  /* its last failure */
    uint32_t tries;      /* tries in flight at it */
    uint32_t queued;     /* ops waiting to be tried at it */
    uint64_t heard_at;   /* tries in flight: the last answer, or the first try */
};

struct raftkv_client {
    struct raftkv_client_cfg cfg;
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    struct erma_rpc *rpc;
    struct server srv[RAFTKV_MAX_PEERS * RAFTKV_MAX_GROUPS];
    unsigned nsrv;                       /* cfg.nservers x cfg.groups */
    unsigned leader[RAFTKV_MAX_GROUPS]; /* each group's, into srv */
    uint64_t next_seq;
    struct op *ops;
    uint32_t pending, completions;
    uint32_t waiting; /* ops waiting for a retry: poll has nothing to do without them */
    uint32_t tries;   /* tries in flight: poll watches their replicas for silence */
    uint32_t ended;   /* tries ended since the last poll (work: timers may have moved) */
    uint64_t srtt, rttvar, rtt_samples; /* of answered tries (RFC 6298) */
    bool destroying;
    struct raftkv_client_stats stats;
};

/* ---- client.c ---- */

/* The group of srv[i]. */
static inline unsigned raftkv__group(const struct raftkv_client *c, unsigned i)
{
    return i / c->cfg.nservers;
}

/* op waits (or no longer) to be tried at op->server. */
void raftkv__op_wait(struct op *op, bool waiting);
/* op has its outcome: its callback runs at the next poll. */
void raftkv__op_complete(struct op *op, int status, const uint8_t *val, uint32_t vlen);

/* ---- client_tries.c ---- */

/* How long a replica may stay silent while tries wait at it. */
uint64_t raftkv__try_ns(const struct raftkv_client *c);
/* Tries op at op->server now (or, failing at once, waits for the next). */
void raftkv__try(struct op *op, uint64_t now);
/* Drops the sessions of replicas silent for a try's length; returns how
 * many. */
int raftkv__drop_silent(struct raftkv_client *c, uint64_t now);
/* The client's erma_rpc sm_handler (ctx: the client). */
void raftkv__client_sm(struct erma_rpc *rpc, int session, enum erma_sm_event ev, int err,
                       void *ctx);

#endif
