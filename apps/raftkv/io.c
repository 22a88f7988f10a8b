/* A struct raft_io over erma RPCs and a directory (raftkv/raftkv.h): the
 * raft_io methods, the callbacks deferred to the next poll, and the poll.
 * The network is net.c's, the durable state the store's (store.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "erma/clock.h"
#include "erma/log.h"
#include "raftkv/io_impl.h"

/* ---- deferred callbacks ---- */

static void later_push(struct rkio *k, enum later_kind kind, void *req, void *cb)
{
    struct later *l = calloc(1, sizeof *l);
    if (!l)
        abort(); /* a callback raft waits for cannot be dropped */
    l->kind = kind;
    l->req = req;
    if (kind == L_APPEND)
        l->cb.append = (raft_io_append_cb)cb;
    else if (kind == L_SNAP_PUT)
        l->cb.put = (raft_io_snapshot_put_cb)cb;
    else
        l->cb.get = (raft_io_snapshot_get_cb)cb;
    *k->later_tail = l;
    k->later_tail = &l->next;
}

static struct later *later_take(struct rkio *k)
{
    struct later *later = k->later;
    k->later = NULL;
    k->later_tail = &k->later;
    return later;
}

static void fire_later(struct rkio *k, struct later *l, int status)
{
    switch (l->kind) {
    case L_APPEND:
        l->cb.append(l->req, status);
        break;
    case L_SNAP_PUT:
        l->cb.put(l->req, status);
        break;
    case L_SNAP_GET: {
        struct raft_snapshot *s = NULL;
        if (status == 0 && !k->st.snap.have)
            status = RAFT_NOTFOUND;
        if (status == 0 && !(s = raftkv__store_snapshot_copy(&k->st)))
            status = RAFT_NOMEM;
        if (s)
            k->stats.snapshots_sent++;
        l->cb.get(l->req, s, status);
        break;
    }
    }
    free(l);
}

/* ---- the raft_io methods ---- */

static int m_init(struct raft_io *io, raft_id id, const char *address)
{
    struct rkio *k = io->impl;
    k->id = id;
    if (strlen(address) >= ADDR_MAX)
        return RAFT_NAMETOOLONG;
    snprintf(k->addr, sizeof k->addr, "%s", address);
    erma_rand_seed(&k->rnd, k->cfg.seed ? k->cfg.seed : id * 0x9e3779b97f4a7c15ull);
    const int rc = raftkv__store_load(&k->st);
    if (rc && !io->errmsg[0])
        snprintf(io->errmsg, sizeof io->errmsg, "loading %.160s failed (%.60s)", k->st.dir,
                 raft_strerror(rc));
    return rc;
}

static void m_close(struct raft_io *io, raft_io_close_cb cb)
{
    struct rkio *k = io->impl;
    k->closed = true;
    if (k->st.need_sync) {
        raftkv__store_sync(&k->st);
        k->st.need_sync = false;
    }
    /* Every request raft still waits for completes now, before the close
     * callback: sends as cancelled, writes (made) as done. */
    raftkv__net_close(k);
    for (struct later *l = later_take(k), *next; l; l = next) {
        next = l->next;
        fire_later(k, l, l->kind == L_SNAP_GET ? RAFT_CANCELED : 0);
    }
    if (cb)
        cb(io);
}

static int m_load(struct raft_io *io, raft_term *term, raft_id *voted_for,
                  struct raft_snapshot **snapshot, raft_index *start_index,
                  struct raft_entry *entries[], size_t *n_entries)
{
    struct rkio *k = io->impl;
    *term = k->st.term;
    *voted_for = k->st.vote;
    *snapshot = NULL;
    *entries = NULL;
    *n_entries = 0;
    *start_index = k->st.first;
    if (k->st.snap.have && !(*snapshot = raftkv__store_snapshot_copy(&k->st)))
        return RAFT_NOMEM;
    const int rc = raftkv__store_entries_copy(&k->st, entries);
    if (rc) {
        if (*snapshot)
            raftkv__store_snapshot_free(*snapshot);
        *snapshot = NULL;
        return rc;
    }
    *n_entries = k->st.nents;
    return 0;
}

/* libraft asks for a tick every msecs (its heartbeat timeout) and checks
 * its timers against time() at each: a timer that expires just after a
 * tick fires up to msecs late, and an election then starts late by as
 * much. More ticks cost little (a comparison each) and cut that. */
#define TICKS_PER_MSECS 5

static int m_start(struct raft_io *io, unsigned msecs, raft_io_tick_cb tick,
                   raft_io_recv_cb recv)
{
    struct rkio *k = io->impl;
    if (!k->rpc)
        return RAFT_INVALID;
    k->tick_ns = (msecs ? msecs : 1) * 1000000ull / TICKS_PER_MSECS;
    k->tick = tick;
    k->recv = recv;
    k->next_tick = erma_now_ns() + k->tick_ns;
    k->started = true;
    return 0;
}

/* Appends to the store, counted. */
static int append(struct rkio *k, const struct raft_entry *es, unsigned n)
{
    const int rc = raftkv__store_append(&k->st, es, n);
    if (rc == 0)
        k->stats.entries_written += n;
    return rc;
}

/* A configuration entry at once durable (bootstrap, recover). */
static int append_conf(struct rkio *k, raft_term term, const struct raft_configuration *conf)
{
    struct raft_buffer buf;
    int rc = raft_configuration_encode(conf, &buf);
    if (rc)
        return rc;
    const struct raft_entry e = {.term = term, .type = RAFT_CHANGE, .buf = buf};
    rc = append(k, &e, 1);
    raft_free(buf.base);
    if (!rc)
        rc = raftkv__store_sync(&k->st);
    k->st.need_sync = false;
    return rc;
}

static int m_bootstrap(struct raft_io *io, const struct raft_configuration *conf)
{
    struct rkio *k = io->impl;
    if (k->st.term != 0 || k->st.nents || k->st.snap.have)
        return RAFT_CANTBOOTSTRAP;
    k->st.first = 1;
    int rc = append_conf(k, 1, conf);
    if (!rc)
        rc = raftkv__store_set_meta(&k->st, 1, 0);
    return rc;
}

static int m_recover(struct raft_io *io, const struct raft_configuration *conf)
{
    struct rkio *k = io->impl;
    return append_conf(k, k->st.term, conf);
}

static int m_set_term(struct raft_io *io, raft_term term)
{
    struct rkio *k = io->impl;
    return raftkv__store_set_meta(&k->st, term, 0);
}

static int m_set_vote(struct raft_io *io, raft_id server_id)
{
    struct rkio *k = io->impl;
    return raftkv__store_set_meta(&k->st, k->st.term, server_id);
}

static int m_append(struct raft_io *io, struct raft_io_append *req,
                    const struct raft_entry entries[], unsigned n, raft_io_append_cb cb)
{
    struct rkio *k = io->impl;
    if (k->closed)
        return RAFT_CANCELED;
    const int rc = append(k, entries, n);
    if (rc)
        return rc;
    k->stats.appends++;
    later_push(k, L_APPEND, req, (void *)cb);
    return 0;
}

static int m_truncate(struct raft_io *io, raft_index index)
{
    struct rkio *k = io->impl;
    if (k->closed)
        return RAFT_CANCELED;
    k->stats.truncates++;
    return raftkv__store_truncate(&k->st, index);
}

static int m_snapshot_put(struct raft_io *io, unsigned trailing,
                          struct raft_io_snapshot_put *req, const struct raft_snapshot *snapshot,
                          raft_io_snapshot_put_cb cb)
{
    struct rkio *k = io->impl;
    if (k->closed)
        return RAFT_CANCELED;
    int rc = raftkv__store_snapshot_write(&k->st, snapshot);
    if (rc)
        return rc;
    rc = raftkv__store_compact(&k->st, snapshot->index, trailing);
    if (trailing == 0)
        k->stats.snapshots_installed++;
    if (rc)
        return rc;
    k->stats.snapshots_put++;
    later_push(k, L_SNAP_PUT, req, (void *)cb);
    return 0;
}

static int m_snapshot_get(struct raft_io *io, struct raft_io_snapshot_get *req,
                          raft_io_snapshot_get_cb cb)
{
    struct rkio *k = io->impl;
    if (k->closed)
        return RAFT_CANCELED;
    later_push(k, L_SNAP_GET, req, (void *)cb);
    return 0;
}

static raft_time m_time(struct raft_io *io)
{
    (void)io;
    return erma_now_ns() / 1000000;
}

/* libraft draws only its election timer here, in [E, 2E] for election
 * timeout E, each time it restarts it. A follower's is drawn in the first
 * 1 / ELECTION_SPREAD_DIV of that: libraft 0.15's followers refuse even a
 * pre-vote while they still know a leader, so after the leader dies an
 * election can succeed only once the *last* follower's timer has fired,
 * and the whole spread adds to the failover. E / 8 (62 ms by default) is
 * still far above a vote's round trip, which is what the spread must beat
 * to keep split votes rare. A candidate's (a pre-vote or vote under way)
 * is drawn in [E / 32, E / 16]: a candidate refused by a follower that
 * still knew the old leader, or by one whose log is longer (so the other
 * must win), asks again soon after that follower's own timer fired, not
 * about E later; with pre-votes an early retry cannot disturb a live
 * leader. */
#define ELECTION_SPREAD_DIV 8

static int m_random(struct raft_io *io, int min, int max)
{
    struct rkio *k = io->impl;
    const int spread = (max - min) / ELECTION_SPREAD_DIV;
    if (k->raft && raft_state((struct raft *)k->raft) == RAFT_CANDIDATE && spread >= 4)
        return spread / 4 + (int)erma_rand_below(&k->rnd, (uint64_t)spread / 4 + 1);
    if (spread <= 0)
        return min;
    return min + (int)erma_rand_below(&k->rnd, (uint64_t)spread + 1);
}

/* ---- the application's side ---- */

int raftkv_io_init(struct raft_io *io, struct erma_nexus *nx, const struct raftkv_io_cfg *cfg)
{
    if (!io || !nx || !cfg || !cfg->dir || strlen(cfg->dir) >= PATH_MAX - 16)
        return ERMA_EINVAL;
    struct rkio *k = calloc(1, sizeof *k);
    if (!k)
        return ERMA_ENOMEM;
    k->cfg = *cfg;
    if (!k->cfg.type_base)
        k->cfg.type_base = RAFTKV_TYPE_BASE;
    if (!k->cfg.reconnect_ns)
        k->cfg.reconnect_ns = 20000000;
    if (!k->cfg.max_inflight)
        k->cfg.max_inflight = 4096;
    raftkv__store_init(&k->st, cfg->dir, cfg->no_fsync, io->errmsg);
    k->cfg.dir = k->st.dir;
    k->later_tail = &k->later;
    const int rc = raftkv__net_init(k, nx);
    if (rc != ERMA_OK) {
        free(k);
        return rc;
    }
    memset(io, 0, sizeof *io);
    io->version = 1;
    io->impl = k;
    io->init = m_init;
    io->close = m_close;
    io->load = m_load;
    io->start = m_start;
    io->bootstrap = m_bootstrap;
    io->recover = m_recover;
    io->set_term = m_set_term;
    io->set_vote = m_set_vote;
    io->send = raftkv__net_send;
    io->append = m_append;
    io->truncate = m_truncate;
    io->snapshot_put = m_snapshot_put;
    io->snapshot_get = m_snapshot_get;
    io->time = m_time;
    io->random = m_random;
    k->io = io;
    return ERMA_OK;
}

void raftkv_io_attach(struct raft_io *io, struct erma_rpc *rpc)
{
    ((struct rkio *)io->impl)->rpc = rpc;
}

void raftkv_io_watch(struct raft_io *io, const struct raft *r)
{
    ((struct rkio *)io->impl)->raft = r;
}

/* The tick, when due. */
static int tick(struct rkio *k, uint64_t now)
{
    if (k->closed || now < k->next_tick)
        return 0;
    k->next_tick += k->tick_ns;
    if (k->next_tick <= now)
        k->next_tick = now + k->tick_ns;
    k->stats.ticks++;
    k->tick(k->io);
    return 1;
}

/* One sync for every append queued since the last, then what was queued
 * before this round: completed sends, deferred callbacks, arrived
 * messages. Returns the work done; callbacks queue more for the next. */
static int poll_round(struct rkio *k)
{
    if (k->st.need_sync) {
        k->st.need_sync = false;
        k->stats.syncs++;
        if (raftkv__store_sync(&k->st) != 0)
            ERMA_ERROR("raftkv: fdatasync %s/log: %s", k->st.dir, strerror(errno));
    }
    struct send_op *done = raftkv__net_take_done(k);
    struct later *later = later_take(k);
    struct inmsg *inbox = raftkv__net_take_inbox(k);
    int work = raftkv__net_complete(k, done);
    for (struct later *next; later; later = next, work++) {
        next = later->next;
        fire_later(k, later, 0);
    }
    return work + raftkv__net_deliver(k, inbox);
}

/* Rounds of a poll: what one round's callbacks and messages queue (an
 * append's callback, its answer to the leader) runs in the next round of
 * the same poll, not a loop pass later; bounded, so the endpoint's
 * packets still get their turn. */
#define POLL_ROUNDS 4

int raftkv_io_poll(struct raft_io *io)
{
    struct rkio *k = io->impl;
    if (!k->started || k->closed)
        return 0;
    int work = 0;
    for (int r = 0; r < POLL_ROUNDS && !k->closed; r++) {
        const int w = poll_round(k);
        work += w;
        if (!w && !k->st.need_sync)
            break;
    }
    const uint64_t now = erma_now_ns();
    work += tick(k, now);
    raftkv__net_reconnect(k, now);
    return work;
}

uint64_t raftkv_io_next_timer(const struct raft_io *io)
{
    const struct rkio *k = io->impl;
    if (!k->started || k->closed)
        return UINT64_MAX;
    if (raftkv__net_pending(k) || k->later || k->st.need_sync)
        return 0; /* work for the next poll */
    const uint64_t held = raftkv__net_next_timer(k);
    return held < k->next_tick ? held : k->next_tick;
}

void raftkv_io_destroy(struct raft_io *io)
{
    if (!io || !io->impl)
        return;
    struct rkio *k = io->impl;
    raftkv__net_destroy(k);
    for (struct later *l = later_take(k), *next; l; l = next) {
        next = l->next;
        free(l);
    }
    raftkv__store_close(&k->st);
    free(k);
    io->impl = NULL;
}

void raftkv_io_get_stats(const struct raft_io *io, struct raftkv_io_stats *out)
{
    *out = ((const struct rkio *)io->impl)->stats;
}
