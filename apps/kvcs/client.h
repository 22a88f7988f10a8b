/* The kvcs client's inside (erma/kvcs.h): client.c runs ops and their
 * tries, client_setup.c sets the client up, keeps track of servers
 * (sessions, regions, down marks and probes) and answers the accessors,
 * client_try.c keeps tries, round trips and the hedges' budget. */
#ifndef KVCS_CLIENT_H
#define KVCS_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#include "erma/rpc.h"
#include "kv/kv.h"
#include "kvcs/kvcs.h"

#define MAX_R KVCS_MAX_REPLICAS
#define MAX_SESS 4 /* sessions per server: 8 requests in flight on each */
#define READ_WINDOW 32 /* one-sided GETs in flight per server, as RPC's 4 x 8 slots */

enum kind { GET, PUT, DEL };

struct op;

/* One request to one replica. A try leaves its op (op NULL) when the op
 * finishes before it (another replica answered a GET) or gives it up (an
 * RPC try past its deadline, which goes on as timed out); it is freed
 * when its request completes. c->tries lists every try not freed. */
struct try {
    struct kvcs_client *c;
    struct op *op;
    struct try *prev, *next;
    uint32_t pos, server; /* in op->rep; the server */
    bool read;            /* a one-sided GET: the RMA op timeout bounds it */
    bool hedged;          /* a GET try past hedge_at: the next replica was asked too */
    bool costly;          /* a budgeted hedge of it would take two READs */
    struct try *wnext;    /* a read waiting for its server's READ_WINDOW */
    uint64_t start, hedge_at, deadline;
    struct erma_msgbuf req, resp;
};

struct op {
    struct kvcs_client *c;
    bool live;
    enum kind kind;
    enum kvcs_method method;
    uint8_t key[KVCS_MAX_KEY];
    uint32_t klen, nrep, rep[MAX_R];
    int st[MAX_R];     /* each replica's last outcome, KVCS_NOT_TRIED */
    uint32_t pending;  /* PUT, DEL: tries not finished */
    uint32_t inflight; /* tries in op->tries */
    int last_err;      /* GET: the last failed try's status */
    uint32_t answered;
    kvcs_fn cb;
    void *tag;
    struct try *tries[MAX_R]; /* in flight */
    int result;               /* finished while starting: delivered by the loop */
    struct op *next_done;
};

/* Round trips of the last RTT_RING answered tries to one server by one
 * method, and their 95th percentile (0 before RTT_EVERY samples),
 * recomputed every RTT_EVERY samples. */
#define RTT_RING 64
#define RTT_EVERY 16
struct rtt {
    uint32_t ring[RTT_RING]; /* ns, at most 4 s */
    uint32_t n;
    uint32_t p95;
};

struct server { /* one endpoint thread of one server (erma/kvcs.h, Client) */
    char uri[128];
    uint8_t tid; /* its endpoint thread */
    int sess[MAX_SESS]; /* -1: failed */
    uint32_t next_sess;
    struct kv_remote remote;
    struct kvcs_client *c;
    uint64_t down_until; /* when marked down: the next probe */
    bool down, probing;
    int down_err;  /* the failure that marked it down, or its last probe's */
    int region_rc; /* 1 asked, 0 known, < 0 to ask again */
    struct rtt rtt[2]; /* [0] RPC tries, [1] one-sided GETs */
    uint64_t heard_ns; /* its last answer to a try (not a transport failure) */
    uint32_t reads;    /* one-sided GETs in flight there */
    struct try *wait_head, *wait_tail; /* reads waiting for one of them to end */
};

struct kvcs_client {
    struct kvcs_client_cfg cfg;
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    struct erma_rpc *rpc;
    struct erma_rma *rma;
    struct kv_reader *reader;
    struct kvcs_ring *ring;
    struct server *srv; /* server s's thread t at srv[s * cfg.server_threads + t] */
    uint32_t nsrv; /* cfg.nservers x cfg.server_threads (at least 1) */
    struct op *ops;
    uint32_t *free_ops, nfree;
    struct try *tries;
    struct try *spare; /* freed tries, for reuse (client_try.c) */
    struct op *done_head, *done_tail; /* finished while starting */
    int starting;                     /* inside a call that starts an op */
    bool destroying;
    bool in_cb; /* info: the op whose callback runs */
    struct kvcs_op_info info;
    int completed;
    uint32_t nsess;                  /* per server */
    uint64_t next_check;             /* tries' hedge times and deadlines */
    uint32_t hedge_credit;           /* GETs started, less HEDGE_COST a budgeted hedge,
                                        at most HEDGE_COST x HEDGE_BURST */
    uint64_t next_probe, probe_tick; /* servers due a probe */
    struct kvcs_client_stats stats;
};

bool kvcs__transport_failure(int st);
void kvcs__mark_down(struct kvcs_client *c, uint32_t server, int err);
void kvcs__probe_servers(struct kvcs_client *c, uint64_t now);
/* The server's sessions in turn; -1 when none is there. */
int kvcs__session_of(struct kvcs_client *c, struct server *s);
/* client_try.c: a try in c->tries, zeroed but for c; unlinked and kept
 * for reuse. */
struct try *kvcs__try_new(struct kvcs_client *c);
void kvcs__try_free(struct kvcs_client *c, struct try *t);
/* Frees every try left (those of reads the engine dropped) and those kept
 * for reuse. */
void kvcs__free_tries(struct kvcs_client *c);
void kvcs__rtt_sample(struct rtt *e, uint64_t ns);
uint64_t kvcs__hedge_ns(const struct kvcs_client *c, const struct server *s, bool read);
/* Hedges (client_try.c). A GET started earns them their budget. */
void kvcs__hedge_earn(struct kvcs_client *c);
enum hedge_kind { HEDGE_NOT, HEDGE_STALL, HEDGE_BUDGET };
/* May try t's GET ask the next replica too now: not (the replica was
 * heard too lately, or the budget is spent), past a stall, or on the
 * budget (kvcs__hedge_spend() once the hedge started a try). */
enum hedge_kind kvcs__hedge_kind(const struct kvcs_client *c, const struct try *t,
                                 uint64_t now);
void kvcs__hedge_spend(struct kvcs_client *c);

#endif
