/* raftkv's raft_io (raftkv.h), inside: io.c holds the raft_io methods,
 * the deferred callbacks and the poll; net.c the peers, their sessions and
 * the messages sent and received; the store (store.h) the durable state. */
#ifndef RAFTKV_IO_IMPL_H
#define RAFTKV_IO_IMPL_H

#include "erma/sdk/rand.h"
#include "raftkv/codec.h"
#include "raftkv/raftkv.h"
#include "raftkv/store.h"

struct peer {
    raft_id id;
    char addr[ADDR_MAX];
    int sess; /* -1: none */
    bool connected;
    uint64_t retry_at; /* no new session before this */
    uint32_t inflight;
};

struct rkio;

struct send_op {
    struct send_op *next, *prev;
    struct rkio *k;
    struct raft_io_send *req;
    raft_io_send_cb cb; /* NULL once answered (at close) */
    struct erma_msgbuf msg, resp;
    int peer, status;
    unsigned type; /* the raft message's */
};

/* An AppendEntries received and not answered yet: the follower's result
 * to its sender rides in its response (net.c). */
struct held {
    struct held *next;
    struct erma_req *req;
    raft_id from;
    uint64_t at; /* when it came */
};

/* A received message, waiting for the next poll. */
struct inmsg {
    struct inmsg *next;
    struct raft_message m;
    char addr[ADDR_MAX];
};

enum later_kind { L_APPEND, L_SNAP_PUT, L_SNAP_GET };

/* A callback raft waits for, run by the next poll. */
struct later {
    struct later *next;
    enum later_kind kind;
    void *req;
    union {
        raft_io_append_cb append;
        raft_io_snapshot_put_cb put;
        raft_io_snapshot_get_cb get;
    } cb;
};

struct rkio {
    struct raft_io *io;
    struct raftkv_io_cfg cfg;
    struct erma_rpc *rpc;
    const struct raft *raft; /* raftkv_io_watch(): its state, for random() */
    raft_id id;
    char addr[ADDR_MAX];
    uint64_t tick_ns; /* libraft's msecs / TICKS_PER_MSECS */
    raft_io_tick_cb tick;
    raft_io_recv_cb recv;
    uint64_t next_tick;
    bool started, closed;
    struct erma_rand rnd;
    struct store st;
    struct later *later, **later_tail;
    struct { /* net.c's */
        struct peer peers[RAFTKV_MAX_PEERS];
        unsigned npeers;
        struct send_op inflight; /* list head */
        struct send_op *done, **done_tail;
        struct inmsg *inbox, **inbox_tail;
        struct held *held, **held_tail; /* oldest first */
        unsigned nheld;
    } net;
    struct raftkv_io_stats stats;
};

/* ---- net.c ---- */

/* Registers raft's request types on nx. */
int raftkv__net_init(struct rkio *k, struct erma_nexus *nx);
/* raft_io's send(). */
int raftkv__net_send(struct raft_io *io, struct raft_io_send *req, const struct raft_message *m,
                     raft_io_send_cb cb);
/* The sends completed and the messages received since the last take. */
struct send_op *raftkv__net_take_done(struct rkio *k);
struct inmsg *raftkv__net_take_inbox(struct rkio *k);
/* Runs the send callbacks of done (taken); returns how many. */
int raftkv__net_complete(struct rkio *k, struct send_op *done);
/* Hands the messages of inbox (taken) to raft; returns how many. */
int raftkv__net_deliver(struct rkio *k, struct inmsg *inbox);
/* Opens sessions to the peers that are down and due a try; answers the
 * AppendEntries held too long without a result. */
void raftkv__net_reconnect(struct rkio *k, uint64_t now);
/* At close: every send raft still waits for completes now (cancelled, or
 * as it did); received messages are dropped. */
void raftkv__net_close(struct rkio *k);
/* Frees what is left (the erma_rpc is gone). */
void raftkv__net_destroy(struct rkio *k);
/* Work for the next poll. */
bool raftkv__net_pending(const struct rkio *k);
/* When the oldest AppendEntries held is to be answered (UINT64_MAX: none). */
uint64_t raftkv__net_next_timer(const struct rkio *k);

#endif
