/* A raftkv replica (raftkv.h), inside: server.c holds its life (the data
 * directory, raft, the endpoint), service.c the requests of clients. */
#ifndef RAFTKV_SERVER_IMPL_H
#define RAFTKV_SERVER_IMPL_H

#include <limits.h>

#include "raftkv/raftkv.h"

#define URI_MAX 128

struct link {
    struct link *next, *prev;
};

struct raftkv_server {
    struct raftkv_server_cfg cfg;
    char peers[RAFTKV_MAX_PEERS][URI_MAX];
    const char *peer_ptrs[RAFTKV_MAX_PEERS];
    char dir[PATH_MAX];
    bool own_dir;
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    struct erma_rpc *rpc;
    struct raft_io io;
    struct raft_fsm fsm;
    struct raft raft;
    bool io_inited, fsm_inited, raft_inited, closed;
    struct link pend; /* the pending requests */
    uint8_t *val;     /* a GET's value */
    struct raftkv_server_stats stats;
};

/* The groups a replica's directory holds, from its file `groups` written
 * by raftkv_groups_start() (groups.c): 0 when it has none (one group's
 * state, or nothing yet), -1 when the file cannot be read. */
int raftkv__dir_groups(const char *dir);

/* Registers the client requests' handlers on s->nx. */
int raftkv__service_init(struct raftkv_server *s);
/* The requests still waiting for raft are answered ERMA_EAGAIN. */
void raftkv__service_abort(struct raftkv_server *s);

#endif
