/*
 * raftkv/raftkv.h - a key-value store replicated with Raft: Debian's
 * libraft (canonical raft 0.15, <raft.h>, used unmodified) over erma RPCs,
 * its state machine apps/kv's table (kv/kv.h).
 *
 * Three pieces, each usable alone:
 *
 * raft_io over erma (io.c; net.c the network, msg.c its messages, store*.c
 * the directory)
 *   raftkv_io_init() fills a struct raft_io whose messages travel as
 *   erma RPCs on one endpoint and whose state lives in a directory.
 *   Network. One request type per raft message kind, type_base +
 *   RAFT_IO_APPEND_ENTRIES .. type_base + RAFT_IO_TIMEOUT_NOW (AppendEntries,
 *   its result, RequestVote, its result, InstallSnapshot, TimeoutNow), each
 *   [u64 sender id][u16 len][sender address][body] and answered with an
 *   empty response: raft's own results travel as messages of their own, as
 *   raft expects of an unreliable network, save one: a follower holds an
 *   AppendEntries (at most 4, none past 2 ms) and sends its result to the
 *   sender as that request's response, a message in the same encoding
 *   (one message and one empty response fewer each way, as eRPC's Raft
 *   answers AppendEntries); a result with no AppendEntries held goes on
 *   its own. Every replica must run this version. A message is encoded into an
 *   erma message buffer inside send(); the send callback runs once the RPC
 *   has completed, from the next raftkv_io_poll(), never from inside
 *   send(): 0 when the peer's endpoint took it, RAFT_NOCONNECTION when the
 *   peer is down (no connected session: a send to it fails at once, a new
 *   session is tried at most every reconnect_ns) or failed while it was in
 *   flight (ERMA_EPEERFAILED, ERMA_ETIMEDOUT, ...), RAFT_TOOMANY past
 *   max_inflight sends to one peer, RAFT_CANCELED at close. A send never
 *   blocks. Received entries of one AppendEntries share one raft_malloc()
 *   batch (each entry's .batch points to it, as libraft requires); received
 *   messages are handed to raft by the next poll, not from inside erma's
 *   handler. A server address is the base URI of the peer's endpoint 0
 *   (sim://F/H:P, udp://IP:P, ...).
 *   Storage (dir): `meta` holds term and vote (written to meta.tmp,
 *   fsynced, renamed, the directory fsynced: set_term and set_vote return
 *   only once it is durable); `log` is a file of records
 *   [u32 magic][u32 len][u64 index][u64 term][u16 type][u16 0][u32 0]
 *   [data, padded to 8][u64 FNV-1a of all before], one after the other,
 *   then zeros (it grows by 256 KiB of written zeros at a time, which new
 *   records overwrite, so that a sync writes no metadata); a tail torn by
 *   a crash is cut at load; `snap` holds the last snapshot (index, term,
 *   configuration and the state machine's bytes, checked the same way).
 *   The log is also kept in memory. append() writes at once; the entries
 *   of every append of one loop pass are made durable by one fdatasync
 *   at the next poll, then their callbacks run (a group commit). truncate()
 *   cuts the file (ftruncate) and the memory. snapshot_put() writes the
 *   snapshot file, then rewrites the log without the entries before
 *   index - trailing (all of them when trailing is 0, an installed
 *   snapshot). Ticks: five every msecs of erma_now_ns() (virtual time on
 *   the sim fabric), checked by each poll, so that libraft's timers fire
 *   within msecs / 5 of their time; time() is erma_now_ns() in ms,
 *   random() a seeded xoshiro256** that draws a follower's election
 *   timeout in [E, 1.125E] rather than libraft's [E, 2E], a candidate's in
 *   [E / 32, E / 16] (io.c says why).
 *   no_fsync skips every fsync (benchmarks only: a crash may lose
 *   acknowledged writes). Every integer in messages and files is
 *   little-endian.
 *
 * The state machine (fsm.c)
 *   raftkv_fsm_init() fills a struct raft_fsm over a kv table
 *   and an ordered index of its keys (apps/kv's own, kv/index.h). Commands
 *   (raftkv_cmd_put/_del) are [u8 op][u64 client][u64 seq][u64 floor]
 *   [u32 klen][u32 vlen][key][value]; apply() puts or deletes and returns
 *   the outcome (ERMA_OK, ERMA_ENOENT, ERMA_E2BIG) as its result pointer,
 *   (void *)(intptr_t)status. Writes run at most once per (client, seq)
 *   (Raft thesis 6.3): a client that retries after an unknown outcome
 *   (a leader lost mid-way) may get both tries into the log; the second
 *   returns the first's outcome and changes nothing. Per client the state
 *   machine keeps the outcomes of seqs >= the floor the client last sent,
 *   for at most 1024 clients (past that, the one that wrote least recently
 *   is forgotten and its retries may run twice). A snapshot is [u64 magic]
 *   [u64 count] count x [u32 klen][u32 vlen][key][value] in key order (the
 *   same bytes on every replica holding the same keys), then the clients'
 *   outcomes; restore() empties the table and puts them back. The table is as lossy
 *   as apps/kv's (MICA: a full bucket drops its oldest item, the circular
 *   log overwrites what it wraps over): size it (buckets, log_bytes) for
 *   the data, or lose items. Replicas that applied the same commands have
 *   byte-identical tables; one restored from a snapshot holds the same
 *   keys and values in another layout.
 *
 * The service (server.c and service.c; client.c and client_tries.c)
 *   A server (raftkv_server_create) is one replica: a nexus, an
 *   endpoint at peers[id - 1] (thread 0), the raft io and fsm above, and
 *   libraft's struct raft. A fresh directory is bootstrapped with the
 *   configuration of all peers (ids 1..npeers, all voters), as every
 *   replica does, so any of them may start first. Request types
 *   type_base + RAFTKV_PUT, _DEL, _GET, _GET_LOCAL carry apps/kv's
 *   request formats (kv_req_put/_del/_get), PUT and DEL after
 *   [u64 client][u64 seq][u64 floor] (struct raftkv_origin); every answer is
 *   [i32 status][u32 len][bytes]:
 *     ERMA_OK, ERMA_ENOENT   done (GET: bytes = the value)
 *     RAFTKV_REDIRECT        not the leader: bytes = the leader's address,
 *                            empty when none is known
 *     ERMA_EAGAIN            leadership lost before the outcome was known
 *                            (the write may or may not take effect), or the
 *                            server is shutting down
 *     ERMA_EBADPKT, ERMA_E2BIG, ERMA_ENOMEM  a bad or too large request
 *   PUT and DEL go through raft_apply() and are answered once applied on
 *   the leader (so committed: an acknowledged write survives any minority
 *   of failures). GET is linearizable: a raft_barrier() issued after the
 *   GET arrived is applied on the leader, then the leader's table answers.
 *   GET_LOCAL is the documented faster option: any replica answers from
 *   its own table at once, no barrier, so it may return stale data.
 *
 *   A server's RPC sessions take their tokens from the clock: a replica
 *   restarted at the same address must not reuse its last life's tokens
 *   (a peer would take the new session for the old one and drop its
 *   requests as stale).
 *
 *   A client (raftkv_client_create) has its own nexus and endpoint,
 *   sends each op to the replica it believes leads and follows redirects.
 *   A try fails when its replica stays silent for a try's length while
 *   tries wait at it (its session is dropped, failing them all), or at the
 *   RPC level (failure_ns of silence, no session within failure_ns,
 *   try_timeout_ns without an answer). A try's length follows the round
 *   trips of answered tries, srtt + 4 rttvar as TCP's RTO (RFC 6298),
 *   within [try_min_ns, failure_ns] (failure_ns before any answer). A
 *   failure marks the replica failed until it answers again, the op
 *   moving on at once to the next replica that has not failed (else to
 *   one that failed down_ns ago or more, else to the next). A redirect
 *   naming a failed leader (one that stalled, or died and is not yet timed
 *   out by the others) is followed by one op at a time, a probe: a stalled
 *   leader is found back as soon as it answers, a dead one gets a single
 *   try at once, each a try's length, and only while another replica names
 *   it. The other ops ask the replica that named it again after retry_ns
 *   (it names a new leader once elected); on a redirect that names no
 *   leader (an election) an op asks the next replica after retry_ns.
 *   ERMA_EAGAIN retries the same replica after retry_ns. An op fails only
 *   after op_timeout_ns (its outcome is then unknown). Every write carries
 *   the client's id and its own seq, the same on every try, so it takes
 *   effect once however often it is tried: PUT, DEL and the linearizable
 *   GET are linearizable; GET with stale set is not.
 *
 * Event loop (loop.c, sim.c). Each server and client is driven by its
 * endpoint's loop plus its own poll (deferred callbacks, received messages,
 * ticks, retries), which must follow every endpoint pass:
 * raftkv_server_run_once() is one pass then a poll; raftkv_server_run()
 * runs erma_endpoint_run_until() with the poll in its done() hook,
 * returning to it whenever a poll did work (so what the poll queued leaves
 * with the next pass, not after an idle sleep) and bounding each call by
 * the next tick, so a sleeping endpoint still ticks on time. On the sim
 * fabric, raftkv_sim_run() steps servers and clients through erma_sim_run()
 * in slices that end at the next tick or client timer (the fabric only
 * knows the endpoints' own timers), its done() hook polling them after each
 * round of passes; a run with the same seeds is the same run.
 *
 * Nothing here is thread-safe: one thread drives a server or client.
 * Functions return ERMA_OK or a negative erma_err code unless noted.
 */
#ifndef RAFTKV_H
#define RAFTKV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <raft.h>

#include "erma/endpoint.h"
#include "erma/rpc.h"

#define RAFTKV_TYPE_BASE 96 /* default request type base */
#define RAFTKV_MAX_PEERS 16
#define RAFTKV_REDIRECT 1 /* answer status: not the leader (positive: not an erma_err) */
#define RAFTKV_WRONG_GROUP 2 /* answer status: the key is another group's */
#define RAFTKV_MAX_GROUPS 8

/* Client request types, from type_base (raft's messages use type_base + 1..6). */
enum raftkv_op {
    RAFTKV_PUT = 8,
    RAFTKV_DEL,
    RAFTKV_GET,       /* linearizable, on the leader */
    RAFTKV_GET_LOCAL, /* any replica's own table: fast, may be stale */
    RAFTKV_TYPES      /* types used: type_base .. type_base + RAFTKV_TYPES - 1 */
};

/* ---- raft_io over erma ---- */

struct raftkv_io_cfg {
    const char *dir;         /* existing directory for meta, log and snap */
    uint8_t type_base;       /* 0: RAFTKV_TYPE_BASE */
    bool no_fsync;           /* benchmarks only */
    uint64_t seed;           /* random(); 0: from the server id */
    uint64_t reconnect_ns;   /* a down peer gets a new session at most this often,
                                default 20 ms */
    uint32_t max_inflight;   /* sends in flight to one peer, default 4096 */
};

struct raftkv_io_stats {
    uint64_t sent, send_failed, received, rx_bad;
    uint64_t send_acked; /* sends the peer's endpoint took */
    uint64_t results_in_responses; /* AppendEntries results sent as their responses */
    uint64_t appends, entries_written, syncs, truncates;
    uint64_t snapshots_put, snapshots_installed; /* installed: put with trailing 0 */
    uint64_t snapshots_sent;                      /* snapshot_get: loaded to send */
    uint64_t ticks;
};

/* Fills io and registers raft's six request types on nx (before the
 * endpoint's erma_rpc is created); the io is not usable until
 * raftkv_io_attach(). */
int raftkv_io_init(struct raft_io *io, struct erma_nexus *nx,
                   const struct raftkv_io_cfg *cfg);
/* The erma_rpc the io sends on; its cfg.sm_handler must be
 * raftkv_io_sm with sm_ctx the io (or call it from its own). */
void raftkv_io_attach(struct raft_io *io, struct erma_rpc *rpc);
/* The raft the io serves (after raft_init()), whose state random() asks:
 * a candidate's election timer is drawn short (io.c). Without it every
 * timer is a follower's. */
void raftkv_io_watch(struct raft_io *io, const struct raft *r);
void raftkv_io_sm(struct erma_rpc *rpc, int session, enum erma_sm_event ev, int err,
                  void *ctx);
/* Opens a session to a peer ahead of the first send (which otherwise
 * fails RAFT_NOCONNECTION while the session connects). */
int raftkv_io_connect(struct raft_io *io, raft_id id, const char *address);
/* After each endpoint pass: due callbacks, received messages, the tick.
 * Returns the work done. */
int raftkv_io_poll(struct raft_io *io);
/* erma_now_ns() time of the next tick (UINT64_MAX before start). */
uint64_t raftkv_io_next_timer(const struct raft_io *io);
/* Frees the io; after raft_close() completed and the erma_rpc is destroyed. */
void raftkv_io_destroy(struct raft_io *io);
void raftkv_io_get_stats(const struct raft_io *io, struct raftkv_io_stats *out);

/* ---- the state machine ---- */

enum { RAFTKV_CMD_PUT = 1, RAFTKV_CMD_DEL = 2 };

int raftkv_fsm_init(struct raft_fsm *fsm, uint32_t buckets, uint64_t log_bytes);
void raftkv_fsm_close(struct raft_fsm *fsm);
const struct kv *raftkv_fsm_kv(const struct raft_fsm *fsm);
uint64_t raftkv_fsm_keys(const struct raft_fsm *fsm);
uint64_t raftkv_fsm_restores(const struct raft_fsm *fsm);
/* Calls fn(ctx, key, klen, val, vlen) for every key in order (a key the
 * table has lost comes with val NULL); stops when fn returns non-zero. */
void raftkv_fsm_walk(const struct raft_fsm *fsm,
                     int (*fn)(void *ctx, const void *key, uint32_t klen, const void *val,
                               uint32_t vlen),
                          void *ctx);
/* Who sent a write: client 0 means nobody in particular (no dedup). */
struct raftkv_origin {
    uint64_t client; /* the client's id, random per client */
    uint64_t seq;    /* the op's number at that client, from 1 */
    uint64_t floor;  /* the client has the answers of every seq below this */
};

/* A command in a raft_malloc() buffer, ready for raft_apply(); o may be NULL. */
int raftkv_cmd_put(struct raft_buffer *buf, const struct raftkv_origin *o,
                   const void *key, uint32_t klen, const void *val, uint32_t vlen);
int raftkv_cmd_del(struct raft_buffer *buf, const struct raftkv_origin *o,
                   const void *key, uint32_t klen);
/* Commands not run again because their (client, seq) had run. */
uint64_t raftkv_fsm_duplicates(const struct raft_fsm *fsm);

/* ---- server ---- */

struct raftkv_server_cfg {
    raft_id id;                    /* 1..npeers */
    const char *const *peers;      /* every replica's endpoint URI; peers[id - 1] is ours */
    unsigned npeers;               /* at most RAFTKV_MAX_PEERS */
    const char *data_dir;          /* NULL: a new temporary one (mkdtemp), removed
                                      at destroy */
    uint8_t type_base;             /* 0: RAFTKV_TYPE_BASE */
    unsigned heartbeat_ms;         /* default 50 (raft's tick) */
    unsigned election_ms;          /* default 500 */
    unsigned snapshot_threshold;   /* default 1024 (raft's) */
    unsigned snapshot_trailing;    /* default 128 (raft's) */
    bool no_fsync;
    uint32_t kv_buckets;           /* default 2^16 */
    uint64_t kv_log_bytes;         /* default 64 MiB */
    uint64_t seed;                 /* raft's random() (election timeouts); 0: from id */
    const struct erma_endpoint_cfg *ep_cfg; /* may be NULL */
    uint64_t failure_ns;           /* rpc cfg.failure_ns and connect_timeout_ns: a
                                      silent peer's sends fail after this; 0: 200 ms */
    uint64_t rto_ns;               /* rpc cfg.rto_ns; 0: erma's default */
    unsigned group, groups;        /* this replica's raft group of groups (below);
                                      0, 0: the only one */
};

struct raftkv_server_stats {
    uint64_t puts, dels, gets, local_gets, redirects, failed;
    uint64_t wrong_group; /* requests for another group's key */
};

struct raftkv_server;

int raftkv_server_create(const struct raftkv_server_cfg *cfg,
                         struct raftkv_server **out);
/* Stops raft (pending client requests are answered ERMA_EAGAIN) and frees
 * everything; the data directory stays unless the server made it. */
void raftkv_server_destroy(struct raftkv_server *s);
struct erma_endpoint *raftkv_server_endpoint(const struct raftkv_server *s);
struct raft *raftkv_server_raft(struct raftkv_server *s);
const struct raft_fsm *raftkv_server_fsm(const struct raftkv_server *s);
const struct raft_io *raftkv_server_io(const struct raftkv_server *s);
const char *raftkv_server_dir(const struct raftkv_server *s);
/* raft's state (RAFT_FOLLOWER, RAFT_CANDIDATE, RAFT_LEADER). */
int raftkv_server_state(const struct raftkv_server *s);
void raftkv_server_get_stats(const struct raftkv_server *s,
                             struct raftkv_server_stats *out);
/* After an endpoint pass: the io's poll. */
int raftkv_server_poll(struct raftkv_server *s);
uint64_t raftkv_server_next_timer(const struct raftkv_server *s);
/* One endpoint pass and a poll; returns the work done. */
int raftkv_server_run_once(struct raftkv_server *s);
/* Runs the loop until stop(ctx) (may be NULL) or timeout_ns pass. */
int raftkv_server_run(struct raftkv_server *s, bool (*stop)(void *ctx), void *ctx,
                      uint64_t timeout_ns);

/* ---- client ---- */

struct raftkv_client_cfg {
    const char *uri;               /* the client's endpoint URI (port 0: any) */
    const char *const *servers;    /* the replicas' URIs, as the servers' peers */
    unsigned nservers;
    uint8_t type_base;             /* 0: RAFTKV_TYPE_BASE */
    uint32_t max_ops;              /* ops in progress at once, default 256 */
    uint64_t op_timeout_ns;        /* an op fails ERMA_ETIMEDOUT after this, default 10 s */
    uint64_t try_timeout_ns;       /* one try at one replica (rpc req_timeout_ns),
                                      default 1 s */
    uint64_t retry_ns;             /* wait before asking a replica again when none is
                                      known to lead (or the one named failed),
                                      default 10 ms */
    uint64_t failure_ns;           /* rpc cfg.failure_ns and connect_timeout_ns, and
                                      the longest try; 0: 200 ms */
    uint64_t try_min_ns;           /* the shortest try, default 100 ms (at most
                                      failure_ns) */
    uint64_t down_ns;              /* a replica that failed a try and has not answered
                                      since is passed over this long while another is
                                      not, then after those that have not failed,
                                      default 1 s */
    const struct erma_endpoint_cfg *ep_cfg;
    uint64_t id;                   /* the client's id for at-most-once writes; 0:
                                      random (getrandom). Two clients with one id
                                      lose writes. */
    unsigned groups;               /* raft groups (below): servers are group 0's
                                      URIs; 0: 1 */
};

struct raftkv_client_stats {
    uint64_t ops, done, failed, redirects, retries, tries_failed;
    uint64_t followed; /* redirects whose named leader the op went to at once */
    uint64_t silent; /* replicas given up on after a try's length of silence */
};

/* cb(tag, status, val, vlen) runs once per started op, from
 * raftkv_client_poll(), never from the call that started it: ERMA_OK
 * (GET: the value, valid during the call), ERMA_ENOENT (GET, DEL of a
 * missing key), ERMA_ETIMEDOUT, ERMA_E2BIG, ERMA_EINVAL (the servers put
 * the key in another raft group: their groups differ from cfg.groups). */
typedef void (*raftkv_fn)(void *tag, int status, const uint8_t *val, uint32_t vlen);

struct raftkv_client;

int raftkv_client_create(const struct raftkv_client_cfg *cfg,
                         struct raftkv_client **out);
/* Pending ops complete with ERMA_ECANCELLED. */
void raftkv_client_destroy(struct raftkv_client *c);
struct erma_endpoint *raftkv_client_endpoint(const struct raftkv_client *c);
/* ERMA_ENOSLOTS when max_ops are in progress. */
int raftkv_put(struct raftkv_client *c, const void *key, uint32_t klen,
               const void *val, uint32_t vlen, raftkv_fn cb, void *tag);
int raftkv_del(struct raftkv_client *c, const void *key, uint32_t klen,
               raftkv_fn cb, void *tag);
/* stale: GET_LOCAL at the replica thought to lead (may be stale). */
int raftkv_get(struct raftkv_client *c, const void *key, uint32_t klen, bool stale,
               raftkv_fn cb, void *tag);
/* The index (into cfg.servers) of the replica the client sends group 0's
 * next op to. */
unsigned raftkv_client_leader(const struct raftkv_client *c);
uint32_t raftkv_client_pending(const struct raftkv_client *c);
void raftkv_client_get_stats(const struct raftkv_client *c,
                             struct raftkv_client_stats *out);
/* After an endpoint pass: silent replicas, retries that are due,
 * completions; returns the work done (tries ended, replicas given up on,
 * ops completed: the client's timers may have moved). */
int raftkv_client_poll(struct raftkv_client *c);
uint64_t raftkv_client_next_timer(const struct raftkv_client *c);
int raftkv_client_run_once(struct raftkv_client *c);
/* Runs the loop until stop(ctx) (may be NULL) or timeout_ns pass; the
 * endpoint sleeps when idle unless its cfg says busy_poll. */
int raftkv_client_run(struct raftkv_client *c, bool (*stop)(void *ctx), void *ctx,
                      uint64_t timeout_ns);

/* ---- raft groups: the key space over endpoint threads (groups.c) ----
 *
 * A cluster may run G independent raft groups (multi-raft), each with its
 * own leader, log and table, so that G endpoint threads of every replica
 * share the work: raftkv_group_of() puts a key in one group (FNV-1a over
 * its bytes, mixed, scaled to G: every client and server of the cluster
 * must use the same G), and group g of a replica listens at its URI's
 * port plus g (raftkv_group_uri), its data in DIR/g. A server of group g
 * answers a request for a key of another group RAFTKV_WRONG_GROUP, which
 * the client reports as ERMA_EINVAL (its cfg.groups is not the servers').
 * A client with cfg.groups G keeps a leader per group and sends each op to
 * its key's group, all over its one endpoint, as eRPC's clients pick a
 * server thread by key. */

/* Returns key's group, 0..groups - 1 (0 when groups <= 1). */
unsigned raftkv_group_of(const void *key, uint32_t klen, unsigned groups);
/* Writes into out a key of group g (of groups), prefix followed by the
 * first number that puts it there (to reach one group alone: its leader,
 * a probe). Returns its length, or 0 when g >= groups (groups >= 1) or
 * out is too small. */
uint32_t raftkv_group_key(const char *prefix, unsigned g, unsigned groups, char *out,
                          size_t size);
/* Where group g of the replica at uri listens (erma_uri_for_thread: its
 * port plus g) into out; ERMA_EADDR when uri is malformed or has no port,
 * its port is 0 and g is not, the port would pass 65535, g is past
 * RAFTKV_MAX_GROUPS or out is too small. */
int raftkv_group_uri(const char *uri, unsigned g, char *out, size_t size);

struct raftkv_groups;
/* Replica cfg->id of groups groups (1..RAFTKV_MAX_GROUPS), each a
 * raftkv_server whose cfg is *cfg with group g, the peers' URIs of group
 * g and data_dir/g (made when missing; cfg->data_dir is needed), run by a
 * thread of its own until raftkv_groups_stop(). Returns once every group
 * runs: ERMA_OK, or the first group's error (none is left running):
 * ERMA_EINVAL (no data_dir, groups out of range, a bad cfg), ERMA_EADDR
 * (a peer URI without a port, or past 65535 with g added), ERMA_ESYS (a
 * directory or thread not made), ERMA_ENOMEM. */
int raftkv_groups_start(const struct raftkv_server_cfg *cfg, unsigned groups,
                        struct raftkv_groups **out);
/* Stops the threads and destroys the servers (gs may be NULL); returns
 * nothing. */
void raftkv_groups_stop(struct raftkv_groups *gs);

/* A number of raft groups, 1..RAFTKV_MAX_GROUPS, from arg into *out (for
 * command lines); returns false, *out untouched, when arg is none. */
bool raftkv_groups_arg(const char *arg, unsigned *out);

/* Splits a comma-separated list of URIs in place into out[0..max); returns
 * how many (max + 1 when there were more). For command lines. */
unsigned raftkv_split(char *list, const char **out, unsigned max);

/* ---- the sim fabric ---- */

struct erma_sim;
/* Steps the servers and clients given (NULL entries skipped) on sim in
 * virtual time until done(ctx) (may be NULL) or duration_ns pass: ERMA_OK
 * or ERMA_ETIMEDOUT. */
int raftkv_sim_run(struct erma_sim *sim, struct raftkv_server *const *servers,
                   unsigned nservers, struct raftkv_client *const *clients,
                   unsigned nclients, uint64_t duration_ns, bool (*done)(void *ctx),
                   void *ctx);

#endif
