/* raftkv (apps/raftkv/raftkv.h): libraft over erma RPCs on the sim fabric,
 * in virtual time. A 3-replica cluster elects a leader and applies 10^4
 * PUTs identically on every replica; killing the leader elects another and
 * the client carries on with no acknowledged write lost, trying the dead
 * replica only a few times; a leader stalled for less than an election
 * timeout holds the client up little longer than the stall; a restarted
 * replica catches up from the log, or through a snapshot when it lagged
 * past the leader's trailing entries; a leader cut off from the others
 * heals without two leaders committing in one term; a write retried after
 * an unknown outcome runs once, across snapshots; the history of
 * concurrent clients through a leader kill and a partition is linearizable,
 * and one with stale reads is shown not to be. Every run is bounded in virtual time
 * and every loop in count. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "erma/clock.h"
#include "erma/sdk/rand.h"
#include "erma/sim.h"
#include "kv/kv.h"
#include "raftkv/raftkv.h"
#include "lincheck.h"

#define N 3
#define SEC 1000000000ull
#define MS 1000000ull
#define MAX_KEYS 10000

struct cluster {
    struct erma_sim *sim;
    struct raftkv_server *srv[N];
    struct raftkv_client *cli;
    char uri[N][64];
    const char *uris[N];
    char dir[N][PATH_MAX];
    struct raftkv_server_cfg cfg; /* what every replica starts with */
};

/* The directories of the cluster a test runs, removed by the teardown
 * when the test failed before cluster_down(). */
static char (*test_dirs)[PATH_MAX];

/* The watch run() feeds (test 5), dropped by the teardown too. */
struct watch;
static struct watch *watching;

/* Where the replicas' directories go: $TMPDIR if set, else /dev/shm when
 * there is one (tmpfs: every fsync is still made, and costs nothing),
 * else /tmp. */
static const char *scratch_dir(void)
{
    const char *tmp = getenv("TMPDIR");
    if (tmp && *tmp)
        return tmp;
    return access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
}

static void server_up(struct cluster *c, unsigned i)
{
    struct raftkv_server_cfg cfg = c->cfg;
    cfg.id = i + 1;
    cfg.peers = c->uris;
    cfg.npeers = N;
    cfg.data_dir = c->dir[i];
    cfg.seed = 1000 + i;
    assert_int_equal(raftkv_server_create(&cfg, &c->srv[i]), ERMA_OK);
}

static void server_down(struct cluster *c, unsigned i)
{
    raftkv_server_destroy(c->srv[i]);
    c->srv[i] = NULL;
}

/* A cluster of replicas started with cfg (id, peers, data_dir and seed
 * their own) and a client whose failure_ns is client_failure_ns. */
static void cluster_start(struct cluster *c, const char *name,
                          const struct raftkv_server_cfg *cfg, uint64_t client_failure_ns)
{
    memset(c, 0, sizeof *c);
    struct erma_sim_cfg sc;
    erma_sim_cfg_default(&sc);
    sc.hosts = N + 1;
    sc.seed = 7;
    assert_int_equal(erma_sim_create(name, &sc, &c->sim), ERMA_OK);
    erma_sim_use_clock(c->sim);
    c->cfg = *cfg;
    for (unsigned i = 0; i < N; i++) {
        snprintf(c->uri[i], sizeof c->uri[i], "sim://%s/%u:31000", name, i);
        c->uris[i] = c->uri[i];
        snprintf(c->dir[i], sizeof c->dir[i], "%s/test_raftkv-XXXXXX", scratch_dir());
        assert_non_null(mkdtemp(c->dir[i]));
    }
    test_dirs = c->dir;
    for (unsigned i = 0; i < N; i++)
        server_up(c, i);
    char curi[64];
    snprintf(curi, sizeof curi, "sim://%s/%u:0", name, N);
    const struct raftkv_client_cfg cc = {.uri = curi, .servers = c->uris, .nservers = N,
                                         .max_ops = 256, .failure_ns = client_failure_ns};
    assert_int_equal(raftkv_client_create(&cc, &c->cli), ERMA_OK);
}

/* Fast raft timers (a 20 ms heartbeat, 200 ms elections) and failure
 * detection (100 ms). */
static void cluster_up(struct cluster *c, const char *name, unsigned snapshot_threshold,
                       unsigned snapshot_trailing)
{
    const struct raftkv_server_cfg cfg = {
        .heartbeat_ms = 20, .election_ms = 200, .failure_ns = 100 * MS,
        .snapshot_threshold = snapshot_threshold, .snapshot_trailing = snapshot_trailing,
        .kv_buckets = 1u << 14, .kv_log_bytes = 8u << 20};
    cluster_start(c, name, &cfg, 100 * MS);
}

static int remove_dir(const char *dir)
{
    static const char *const names[] = {"meta", "log", "snap", "meta.tmp", "log.tmp",
                                        "snap.tmp"};
    char path[PATH_MAX + 16];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    return rmdir(dir);
}

static int remove_test_dirs(void **state)
{
    (void)state;
    watching = NULL;
    for (unsigned i = 0; test_dirs && i < N; i++)
        if (test_dirs[i][0])
            remove_dir(test_dirs[i]);
    test_dirs = NULL;
    return 0;
}

static void cluster_down(struct cluster *c)
{
    raftkv_client_destroy(c->cli);
    for (unsigned i = 0; i < N; i++)
        if (c->srv[i])
            server_down(c, i);
    erma_sim_destroy(c->sim);
    for (unsigned i = 0; i < N; i++)
        assert_int_equal(remove_dir(c->dir[i]), 0);
    test_dirs = NULL;
}

/* ---- watching every replica's raft state (test 5) ----
 * While a watch is set, run() looks at every live replica after each
 * round of polls (raftkv_sim_run's done() hook): the replicas seen
 * leading each term, those seen committing (commit index advanced) while
 * leading, and each follower's commit advancing under a leader it names. */

#define WATCH_TERMS 256

struct watch {
    struct cluster *c;
    bool (*done)(void *ctx);
    void *ctx;
    raft_index commit[N];
    uint8_t leaders[WATCH_TERMS];    /* bit i: replica i seen leading the term */
    uint8_t committers[WATCH_TERMS]; /* bit i: seen leading and committing in the term */
    uint64_t rounds, commits, violations;
};

static unsigned bits(uint8_t m)
{
    unsigned n = 0;
    for (; m; m &= (uint8_t)(m - 1))
        n++;
    return n;
}

static void watch_look(struct watch *w)
{
    w->rounds++;
    for (unsigned i = 0; i < N; i++) {
        if (!w->c->srv[i])
            continue;
        struct raft *r = raftkv_server_raft(w->c->srv[i]);
        const raft_term t = r->current_term;
        if (t >= WATCH_TERMS) {
            w->violations++;
            print_message("  watch: replica %u in term %llu, past what is watched\n", i + 1,
                          (unsigned long long)t);
            continue;
        }
        const bool leads = raft_state(r) == RAFT_LEADER;
        const bool committed = r->commit_index > w->commit[i];
        if (committed)
            w->commits++;
        w->commit[i] = r->commit_index;
        if (leads) {
            w->leaders[t] |= (uint8_t)(1u << i);
            if (committed)
                w->committers[t] |= (uint8_t)(1u << i);
        } else if (committed && raft_state(r) == RAFT_FOLLOWER) {
            /* a follower commits what the term's leader told it: that leader,
             * if seen, is the one it names */
            raft_id id = 0;
            const char *addr = NULL;
            raft_leader(r, &id, &addr);
            if (id != 0 && w->leaders[t] && w->leaders[t] != (uint8_t)(1u << (id - 1))) {
                w->violations++;
                print_message("  watch: replica %u committed in term %llu under leader %llu, "
                              "but the term's leader mask is %#x\n",
                              i + 1, (unsigned long long)t, (unsigned long long)id,
                              w->leaders[t]);
            }
        }
        if (bits(w->leaders[t]) > 1 || bits(w->committers[t]) > 1) {
            w->violations++;
            print_message("  watch: term %llu: leaders %#x, committing leaders %#x\n",
                          (unsigned long long)t, w->leaders[t], w->committers[t]);
        }
    }
}

static bool watch_done(void *ctx)
{
    struct watch *w = ctx;
    watch_look(w);
    return w->done && w->done(w->ctx);
}

static int run(struct cluster *c, uint64_t ns, bool (*done)(void *ctx), void *ctx)
{
    if (watching && watching->c == c) {
        struct watch *w = watching;
        bool (*const done0)(void *) = w->done;
        void *const ctx0 = w->ctx;
        w->done = done;
        w->ctx = ctx;
        const int rc = raftkv_sim_run(c->sim, c->srv, N, &c->cli, 1, ns, watch_done, w);
        w->done = done0;
        w->ctx = ctx0;
        return rc;
    }
    return raftkv_sim_run(c->sim, c->srv, N, &c->cli, 1, ns, done, ctx);
}

/* The one live leader, or -1. */
static int leader(const struct cluster *c)
{
    int l = -1;
    for (unsigned i = 0; i < N; i++)
        if (c->srv[i] && raftkv_server_state(c->srv[i]) == RAFT_LEADER) {
            if (l >= 0)
                return -1;
            l = (int)i;
        }
    return l;
}

static bool has_leader(void *ctx)
{
    return leader(ctx) >= 0;
}

static int wait_leader(struct cluster *c)
{
    assert_int_equal(run(c, 10 * SEC, has_leader, c), ERMA_OK);
    return leader(c);
}

/* ---- a workload: PUTs of keys [0, total), window at a time ---- */

struct load {
    struct cluster *c;
    uint32_t total, next, inflight, acked, failed, window, round;
    uint32_t stop_at; /* done() holds once this many are acked (0: all) */
    bool acked_key[MAX_KEYS];
};

static void key_of(uint32_t k, char key[16])
{
    snprintf(key, 16, "key%06u", k);
}

static uint32_t val_of(uint32_t k, uint32_t round, char val[64])
{
    return (uint32_t)snprintf(val, 64, "value-%06u-round-%u-%s", k, round,
                              k % 7 ? "short" : "a little longer than the others");
}

struct put_tag {
    struct load *l;
    uint32_t k;
};

static struct put_tag tags[MAX_KEYS];

static void put_done(void *tag, int status, const uint8_t *val, uint32_t vlen)
{
    (void)val;
    (void)vlen;
    struct put_tag *t = tag;
    t->l->inflight--;
    if (status == ERMA_OK) {
        t->l->acked++;
        t->l->acked_key[t->k] = true;
    } else {
        t->l->failed++;
        print_message("  put %u: %s\n", t->k, erma_strerror(status));
    }
}

static bool load_step(void *ctx)
{
    struct load *l = ctx;
    while (l->inflight < l->window && l->next < l->total) {
        char key[16], val[64];
        key_of(l->next, key);
        const uint32_t vlen = val_of(l->next, l->round, val);
        tags[l->next] = (struct put_tag){l, l->next};
        if (raftkv_put(l->c->cli, key, (uint32_t)strlen(key), val, vlen, put_done,
                       &tags[l->next]) != ERMA_OK)
            break;
        l->next++;
        l->inflight++;
    }
    if (l->stop_at && l->acked >= l->stop_at)
        return true;
    return l->inflight == 0 && l->next == l->total;
}

static void load_init(struct load *l, struct cluster *c, uint32_t total, uint32_t round)
{
    memset(l, 0, sizeof *l);
    l->c = c;
    l->total = total;
    l->window = 64;
    l->round = round;
}

/* ---- checking the replicas ---- */

static bool applied_equal(void *ctx)
{
    struct cluster *c = ctx;
    raft_index want = 0;
    const int l = leader(c);
    if (l < 0)
        return false;
    want = raft_last_applied(raftkv_server_raft(c->srv[l]));
    for (unsigned i = 0; i < N; i++)
        if (c->srv[i] && raft_last_applied(raftkv_server_raft(c->srv[i])) != want)
            return false;
    return true;
}

struct cmp {
    const struct kv *other;
    uint64_t n, bad;
    uint8_t buf[KV_MAX_ITEM];
};

static int cmp_one(void *ctx, const void *key, uint32_t klen, const void *val, uint32_t vlen)
{
    struct cmp *m = ctx;
    uint32_t olen = 0;
    m->n++;
    if (!val || kv_get(m->other, key, klen, m->buf, sizeof m->buf, &olen) != ERMA_OK ||
        olen != vlen || memcmp(m->buf, val, vlen) != 0)
        m->bad++;
    return 0;
}

static struct cmp cmp_state;

/* Every live replica holds the same keys and values as replica a. */
static void replicas_equal(struct cluster *c, uint64_t keys)
{
    if (run(c, 10 * SEC, applied_equal, c) != ERMA_OK) {
        for (unsigned i = 0; i < N; i++) {
            if (!c->srv[i])
                continue;
            struct raft *r = raftkv_server_raft(c->srv[i]);
            struct raftkv_io_stats io;
            raftkv_io_get_stats(raftkv_server_io(c->srv[i]), &io);
            print_message("  replica %u: state %d term %llu last index %llu applied %llu; "
                          "io sent %llu (%llu failed, %llu acked) received %llu entries %llu "
                          "snapshots put %llu installed %llu sent %llu\n",
                          i + 1, raft_state(r), (unsigned long long)r->current_term,
                          (unsigned long long)raft_last_index(r),
                          (unsigned long long)raft_last_applied(r),
                          (unsigned long long)io.sent, (unsigned long long)io.send_failed,
                          (unsigned long long)io.send_acked, (unsigned long long)io.received,
                          (unsigned long long)io.entries_written,
                          (unsigned long long)io.snapshots_put,
                          (unsigned long long)io.snapshots_installed,
                          (unsigned long long)io.snapshots_sent);
        }
        fail_msg("the replicas did not converge");
    }
    int a = -1;
    for (unsigned i = 0; i < N && a < 0; i++)
        if (c->srv[i])
            a = (int)i;
    const struct raft_fsm *fa = raftkv_server_fsm(c->srv[a]);
    assert_int_equal(raftkv_fsm_keys(fa), keys);
    for (unsigned i = 0; i < N; i++) {
        if (!c->srv[i] || (int)i == a)
            continue;
        const struct raft_fsm *fi = raftkv_server_fsm(c->srv[i]);
        assert_int_equal(raftkv_fsm_keys(fi), keys);
        memset(&cmp_state, 0, sizeof cmp_state);
        cmp_state.other = raftkv_fsm_kv(fi);
        raftkv_fsm_walk(fa, cmp_one, &cmp_state);
        assert_int_equal(cmp_state.n, keys);
        assert_int_equal(cmp_state.bad, 0);
    }
}

/* Every acked key of l holds its value on replica i. */
static void holds_acked(struct cluster *c, unsigned i, const struct load *l)
{
    const struct kv *kv = raftkv_fsm_kv(raftkv_server_fsm(c->srv[i]));
    uint32_t n = 0;
    for (uint32_t k = 0; k < l->total; k++) {
        if (!l->acked_key[k])
            continue;
        char key[16], want[64], got[64];
        key_of(k, key);
        const uint32_t wlen = val_of(k, l->round, want);
        uint32_t glen = 0;
        assert_int_equal(kv_get(kv, key, (uint32_t)strlen(key), got, sizeof got, &glen),
                         ERMA_OK);
        assert_int_equal(glen, wlen);
        assert_memory_equal(got, want, wlen);
        n++;
    }
    assert_int_equal(n, l->acked);
}

/* ---- linearizable GETs through the client ---- */

struct gets {
    struct cluster *c;
    const struct load *l;
    uint32_t next, inflight, ok, wrong, failed;
};

struct get_tag {
    struct gets *g;
    uint32_t k;
};

static struct get_tag gtags[MAX_KEYS];

static void get_done(void *tag, int status, const uint8_t *val, uint32_t vlen)
{
    struct get_tag *t = tag;
    t->g->inflight--;
    char want[64];
    const uint32_t wlen = val_of(t->k, t->g->l->round, want);
    if (status == ERMA_OK && vlen == wlen && memcmp(val, want, wlen) == 0)
        t->g->ok++;
    else if (status == ERMA_OK || status == ERMA_ENOENT)
        t->g->wrong++;
    else
        t->g->failed++;
}

static bool gets_step(void *ctx)
{
    struct gets *g = ctx;
    while (g->inflight < 64 && g->next < g->l->total) {
        const uint32_t k = g->next++;
        if (!g->l->acked_key[k])
            continue;
        char key[16];
        key_of(k, key);
        gtags[k] = (struct get_tag){g, k};
        assert_int_equal(raftkv_get(g->c->cli, key, (uint32_t)strlen(key), false, get_done,
                                    &gtags[k]),
                         ERMA_OK);
        g->inflight++;
    }
    return g->inflight == 0 && g->next == g->l->total;
}

static void read_back(struct cluster *c, const struct load *l)
{
    struct gets g = {.c = c, .l = l};
    assert_int_equal(run(c, 60 * SEC, gets_step, &g), ERMA_OK);
    assert_int_equal(g.wrong, 0);
    assert_int_equal(g.failed, 0);
    assert_int_equal(g.ok, l->acked);
}

static struct load load;

/* ---- single ops ---- */

struct one {
    bool done;
    int status;
    char val[64];
    uint32_t vlen;
};

static void one_done(void *tag, int status, const uint8_t *val, uint32_t vlen)
{
    struct one *o = tag;
    o->done = true;
    o->status = status;
    o->vlen = vlen;
    if (val && vlen <= sizeof o->val)
        memcpy(o->val, val, vlen);
}

static bool one_finished(void *ctx)
{
    return ((struct one *)ctx)->done;
}

enum { OP_DEL, OP_GET, OP_GET_STALE };

/* Runs one op on key k to its end; returns its status. */
static int one_op(struct cluster *c, int op, uint32_t k, struct one *o)
{
    char key[16];
    key_of(k, key);
    memset(o, 0, sizeof *o);
    const uint32_t klen = (uint32_t)strlen(key);
    const int rc = op == OP_DEL ? raftkv_del(c->cli, key, klen, one_done, o)
                                : raftkv_get(c->cli, key, klen, op == OP_GET_STALE,
                                             one_done, o);
    assert_int_equal(rc, ERMA_OK);
    assert_int_equal(run(c, 20 * SEC, one_finished, o), ERMA_OK);
    return o->status;
}

/* ---- (1) a leader, 10^4 PUTs, identical replicas ---- */

static void test_replicate(void **state)
{
    (void)state;
    struct cluster c;
    cluster_up(&c, "rkv1", 0, 0);
    const int l = wait_leader(&c);
    assert_true(l >= 0);
    const uint64_t t0 = erma_now_ns();
    load_init(&load, &c, MAX_KEYS, 1);
    assert_int_equal(run(&c, 120 * SEC, load_step, &load), ERMA_OK);
    assert_int_equal(load.failed, 0);
    assert_int_equal(load.acked, MAX_KEYS);
    print_message("  leader %d; 10^4 PUTs in %.1f ms of virtual time\n", l + 1,
                  (double)(erma_now_ns() - t0) / 1e6);
    replicas_equal(&c, MAX_KEYS);
    /* The same commands on the same empty tables: the same bytes. */
    size_t len0, leni;
    const void *m0 = kv_memory(raftkv_fsm_kv(raftkv_server_fsm(c.srv[0])), &len0);
    for (unsigned i = 1; i < N; i++) {
        const struct raft_fsm *f = raftkv_server_fsm(c.srv[i]);
        assert_int_equal(raftkv_fsm_restores(f), 0);
        const void *mi = kv_memory(raftkv_fsm_kv(f), &leni);
        assert_int_equal(leni, len0);
        assert_memory_equal(mi, m0, len0);
    }
    holds_acked(&c, 0, &load);
    /* every key back through the leader's barrier */
    read_back(&c, &load);
    /* DELETE, then GETs: through the barrier, and the stale-allowed local one */
    struct one o;
    char want[64];
    for (uint32_t k = 0; k < 100; k++)
        assert_int_equal(one_op(&c, OP_DEL, k, &o), ERMA_OK);
    assert_int_equal(one_op(&c, OP_DEL, 5, &o), ERMA_ENOENT);
    assert_int_equal(one_op(&c, OP_GET, 5, &o), ERMA_ENOENT);
    assert_int_equal(one_op(&c, OP_GET_STALE, 500, &o), ERMA_OK);
    assert_int_equal(o.vlen, val_of(500, 1, want));
    assert_memory_equal(o.val, want, o.vlen);
    assert_int_equal(one_op(&c, OP_GET, 500, &o), ERMA_OK);
    assert_memory_equal(o.val, want, o.vlen);
    replicas_equal(&c, MAX_KEYS - 100);
    struct raftkv_server_stats st;
    raftkv_server_get_stats(c.srv[leader(&c)], &st);
    assert_true(st.gets >= MAX_KEYS);
    struct raftkv_io_stats io;
    raftkv_io_get_stats(raftkv_server_io(c.srv[leader(&c)]), &io);
    print_message("  leader io: %llu appends, %llu syncs, %llu sent (%llu failed), %llu "
                  "snapshots\n",
                  (unsigned long long)io.appends, (unsigned long long)io.syncs,
                  (unsigned long long)io.sent, (unsigned long long)io.send_failed,
                  (unsigned long long)io.snapshots_put);
    /* the followers' AppendEntries results rode in the responses to them */
    uint64_t piggybacked = 0, sent = 0;
    for (unsigned i = 0; i < N; i++) {
        raftkv_io_get_stats(raftkv_server_io(c.srv[i]), &io);
        piggybacked += io.results_in_responses;
        sent += io.sent;
    }
    print_message("  %llu of %llu raft messages sent as the responses to AppendEntries\n",
                  (unsigned long long)piggybacked, (unsigned long long)sent);
    assert_true(piggybacked > 0);
    cluster_down(&c);
}

/* ---- (2) the leader killed with writes in flight ---- */

/* Counts the packets the client (host N) sends to one replica's host. */
struct to_host {
    uint16_t host;
    uint64_t pkts;
};

static bool count_tap(void *ctx, const struct erma_sim_event *ev, uint8_t *data)
{
    (void)data;
    struct to_host *t = ctx;
    t->pkts += ev->src_host == N && ev->dst_host == t->host;
    return true;
}

static void test_leader_killed(void **state)
{
    (void)state;
    struct cluster c;
    cluster_up(&c, "rkv2", 0, 0);
    const int l0 = wait_leader(&c);
    assert_true(l0 >= 0);
    const raft_term term0 = raftkv_server_raft(c.srv[l0])->current_term;
    load_init(&load, &c, 3000, 2);
    load.stop_at = 1000;
    assert_int_equal(run(&c, 60 * SEC, load_step, &load), ERMA_OK);
    const uint32_t acked_before = load.acked, inflight = load.inflight;
    server_down(&c, l0); /* as a crash: nothing more leaves it */
    const uint64_t t_kill = erma_now_ns();
    struct to_host dead = {.host = (uint16_t)l0};
    erma_sim_set_tap(c.sim, count_tap, &dead);
    assert_int_equal(run(&c, 10 * SEC, has_leader, &c), ERMA_OK);
    const uint64_t t_elected = erma_now_ns();
    erma_sim_set_tap(c.sim, NULL, NULL);
    load.stop_at = 0;
    assert_int_equal(run(&c, 60 * SEC, load_step, &load), ERMA_OK);
    const int l1 = leader(&c);
    assert_true(l1 >= 0 && l1 != l0);
    assert_true(raftkv_server_raft(c.srv[l1])->current_term > term0);
    assert_int_equal(load.failed, 0);
    assert_int_equal(load.acked, load.total);
    /* the dead replica was tried a try's length at a time, while named
     * leader: a few packets per try, not one per round trip */
    assert_true(dead.pkts <= (t_elected - t_kill) / (5 * MS));
    struct raftkv_client_stats cs;
    raftkv_client_get_stats(c.cli, &cs);
    print_message("  leader %d killed after %u acks (%u in flight); leader %d elected %.1f ms "
                  "later; the rest done %.1f ms after that (%llu redirects, %llu tries "
                  "failed); %llu packets to the dead replica until the election\n",
                  l0 + 1, acked_before, inflight, l1 + 1, (double)(t_elected - t_kill) / 1e6,
                  (double)(erma_now_ns() - t_elected) / 1e6, (unsigned long long)cs.redirects,
                  (unsigned long long)cs.tries_failed, (unsigned long long)dead.pkts);
    /* Nothing acknowledged is lost: on both survivors and through the leader. */
    replicas_equal(&c, load.total);
    for (unsigned i = 0; i < N; i++)
        if (c.srv[i])
            holds_acked(&c, i, &load);
    read_back(&c, &load);
    cluster_down(&c);
}

/* ---- (3) a restarted replica catches up ---- */

static int follower(const struct cluster *c)
{
    const int l = leader(c);
    return l < 0 ? -1 : (l + 1) % N;
}

/* Kills a follower, writes `more` keys past `before`, restarts it. */
static unsigned lag_and_restart(struct cluster *c, uint32_t before, uint32_t more)
{
    load_init(&load, c, before, 3);
    assert_int_equal(run(c, 60 * SEC, load_step, &load), ERMA_OK);
    assert_int_equal(load.acked, before);
    const int f = follower(c);
    assert_true(f >= 0);
    server_down(c, (unsigned)f);
    load.total = before + more;
    assert_int_equal(run(c, 60 * SEC, load_step, &load), ERMA_OK);
    assert_int_equal(load.failed, 0);
    assert_int_equal(load.acked, before + more);
    server_up(c, (unsigned)f);
    replicas_equal(c, load.total);
    holds_acked(c, (unsigned)f, &load);
    return (unsigned)f;
}

static void test_restart_from_log(void **state)
{
    (void)state;
    struct cluster c;
    cluster_up(&c, "rkv3", 0, 0); /* raft's defaults: 1024 entries, 128 trailing */
    assert_true(wait_leader(&c) >= 0);
    const unsigned f = lag_and_restart(&c, 200, 300);
    struct raftkv_io_stats io;
    raftkv_io_get_stats(raftkv_server_io(c.srv[f]), &io);
    assert_int_equal(io.snapshots_installed, 0);
    assert_true(io.entries_written >= 300);
    print_message("  replica %u restarted: %llu entries from the leader, no snapshot\n", f + 1,
                  (unsigned long long)io.entries_written);
    read_back(&c, &load);
    cluster_down(&c);
}

static void test_restart_from_snapshot(void **state)
{
    (void)state;
    struct cluster c;
    cluster_up(&c, "rkv4", 64, 16); /* a snapshot every 64 entries, 16 kept */
    assert_true(wait_leader(&c) >= 0);
    const unsigned f = lag_and_restart(&c, 500, 1000);
    struct raftkv_io_stats io;
    raftkv_io_get_stats(raftkv_server_io(c.srv[f]), &io);
    assert_true(io.snapshots_installed >= 1);
    struct raftkv_io_stats lio;
    raftkv_io_get_stats(raftkv_server_io(c.srv[leader(&c)]), &lio);
    assert_true(lio.snapshots_sent >= 1);
    print_message("  replica %u restarted: %llu snapshot(s) installed, %llu entries after; "
                  "%llu state-machine restores\n",
                  f + 1, (unsigned long long)io.snapshots_installed,
                  (unsigned long long)io.entries_written,
                  (unsigned long long)raftkv_fsm_restores(
                      raftkv_server_fsm(c.srv[f])));
    read_back(&c, &load);
    /* and it keeps up from there */
    load.total = 1700;
    assert_int_equal(run(&c, 60 * SEC, load_step, &load), ERMA_OK);
    assert_int_equal(load.acked, 1700);
    replicas_equal(&c, 1700);
    cluster_down(&c);
}

/* ---- (5) the leader partitioned away, then healed ---- */

/* Drops every packet to or from host `cut` (the replicas are hosts 0..N-1,
 * the client host N): the cut host is alone, the client with the others. */
struct partition {
    int cut; /* -1: none */
    uint64_t dropped;
};

static bool partition_tap(void *ctx, const struct erma_sim_event *ev, uint8_t *data)
{
    (void)data;
    struct partition *p = ctx;
    if (p->cut >= 0 && ev->src_host != ev->dst_host &&
        (ev->src_host == (uint16_t)p->cut || ev->dst_host == (uint16_t)p->cut)) {
        p->dropped++;
        return false;
    }
    return true;
}

struct part_wait {
    struct cluster *c;
    int old;             /* the cut-off leader */
    raft_term term0;     /* its term */
    uint32_t acked_goal; /* acks wanted */
    int leader;          /* out: the majority's leader */
};

/* Keeps the load going; done once a replica other than the old leader
 * leads in a later term and acked_goal writes are acknowledged. */
static bool majority_progress(void *ctx)
{
    struct part_wait *pw = ctx;
    load_step(&load);
    pw->leader = -1;
    for (unsigned i = 0; i < N; i++) {
        struct raft *r = raftkv_server_raft(pw->c->srv[i]);
        if ((int)i != pw->old && raft_state(r) == RAFT_LEADER && r->current_term > pw->term0)
            pw->leader = (int)i;
    }
    return pw->leader >= 0 && load.acked >= pw->acked_goal;
}

/* The old leader follows, in the majority leader's term, and has applied
 * what that leader has. */
static bool old_caught_up(void *ctx)
{
    struct part_wait *pw = ctx;
    const int l = leader(pw->c);
    if (l < 0 || l == pw->old)
        return false;
    struct raft *rl = raftkv_server_raft(pw->c->srv[l]);
    struct raft *ro = raftkv_server_raft(pw->c->srv[pw->old]);
    return raft_state(ro) == RAFT_FOLLOWER && ro->current_term == rl->current_term &&
           raft_last_applied(ro) == raft_last_applied(rl);
}

/* Keeps the load going while the cut holds; never done. */
static bool hold_step(void *ctx)
{
    (void)ctx;
    load_step(&load);
    return false;
}

static struct watch watch5;

static void test_partition_heals(void **state)
{
    (void)state;
    struct cluster c;
    cluster_up(&c, "rkv5", 0, 0);
    memset(&watch5, 0, sizeof watch5);
    watch5.c = &c;
    watching = &watch5;
    const int l0 = wait_leader(&c);
    assert_true(l0 >= 0);
    struct raft *r0 = raftkv_server_raft(c.srv[l0]);
    const raft_term term0 = r0->current_term;
    load_init(&load, &c, 3000, 5);
    load.stop_at = 1000;
    assert_int_equal(run(&c, 60 * SEC, load_step, &load), ERMA_OK);

    /* cut the leader off from both followers and the client */
    struct partition part = {.cut = l0};
    erma_sim_set_tap(c.sim, partition_tap, &part);
    const uint64_t t_cut = erma_now_ns();
    const uint32_t acked_cut = load.acked;
    const raft_index old_commit_cut = r0->commit_index;
    load.stop_at = 0;
    struct part_wait pw = {.c = &c, .old = l0, .term0 = term0, .acked_goal = acked_cut + 1000};
    assert_int_equal(run(&c, 30 * SEC, majority_progress, &pw), ERMA_OK);
    const int l1 = pw.leader;
    assert_true(l1 >= 0 && l1 != l0);
    struct raft *r1 = raftkv_server_raft(c.srv[l1]);
    const raft_term term1 = r1->current_term;
    assert_true(term1 > term0);
    assert_true(r1->commit_index > old_commit_cut);
    const uint64_t t_progress = erma_now_ns();
    /* the cut-off leader committed nothing new in all that time (a few
     * acknowledgements already on the wire when it was cut may land) */
    const raft_index old_commit_part = r0->commit_index;
    /* hold the cut 1 s longer: the old leader, alone, steps down and stands
     * for election (a pre-vote, raftkv sets raft_set_pre_vote) it cannot
     * win; the majority keeps its leader */
    assert_int_equal(run(&c, 1 * SEC, hold_step, NULL), ERMA_ETIMEDOUT);
    assert_int_equal(leader(&c), l1);
    assert_true(r0->commit_index == old_commit_part);
    const uint32_t acked_part = load.acked;
    const raft_index new_commit_part = r1->commit_index;
    assert_true(old_commit_part < new_commit_part);

    /* heal; the old leader steps down and catches up, the load completes */
    part.cut = -1;
    const uint64_t t_heal = erma_now_ns();
    const int old_state_part = raft_state(r0);
    const raft_term old_term_part = r0->current_term;
    load.total = 4000; /* and the client writes on */
    assert_int_equal(run(&c, 60 * SEC, load_step, &load), ERMA_OK);
    assert_int_equal(load.failed, 0);
    assert_int_equal(load.acked, load.total);
    assert_int_equal(run(&c, 20 * SEC, old_caught_up, &pw), ERMA_OK);
    const int l2 = leader(&c);
    assert_true(l2 >= 0 && l2 != l0);
    assert_int_equal(raft_state(r0), RAFT_FOLLOWER);
    assert_true(r0->current_term >= term1);
    replicas_equal(&c, load.total);
    for (unsigned i = 0; i < N; i++)
        holds_acked(&c, i, &load);
    read_back(&c, &load);
    erma_sim_set_tap(c.sim, NULL, NULL);
    watching = NULL;

    /* what was watched: one leader per term, commits in the old term and
     * the new one, and no two leaders committing in one term */
    unsigned terms_led = 0, terms_committed = 0;
    for (unsigned t = 0; t < WATCH_TERMS; t++) {
        terms_led += watch5.leaders[t] != 0;
        terms_committed += watch5.committers[t] != 0;
        assert_true(bits(watch5.leaders[t]) <= 1);
        assert_true(bits(watch5.committers[t]) <= 1);
    }
    assert_int_equal(watch5.violations, 0);
    assert_true(watch5.committers[term0] == (uint8_t)(1u << l0));
    assert_true(watch5.committers[term1] == (uint8_t)(1u << l1));
    assert_true(terms_committed >= 2);
    print_message("  leader %d (term %llu) cut off after %u acks; leader %d in term %llu "
                  "%.1f ms later, %u more acks by the heal; the old leader at heal: state %d, term %llu, "
                  "commit %llu -> %llu (majority's %llu); healed, done %.1f ms later with "
                  "leader %d in term %llu; %llu packets dropped; watched %llu rounds, %llu "
                  "commits, %u terms led, %u with commits\n",
                  l0 + 1, (unsigned long long)term0, acked_cut, l1 + 1,
                  (unsigned long long)term1, (double)(t_progress - t_cut) / 1e6,
                  acked_part - acked_cut, old_state_part,
                  (unsigned long long)old_term_part, (unsigned long long)old_commit_cut,
                  (unsigned long long)old_commit_part, (unsigned long long)new_commit_part,
                  (double)(erma_now_ns() - t_heal) / 1e6, l2 + 1,
                  (unsigned long long)raftkv_server_raft(c.srv[l2])->current_term,
                  (unsigned long long)part.dropped, (unsigned long long)watch5.rounds,
                  (unsigned long long)watch5.commits, terms_led, terms_committed);
    cluster_down(&c);
}

/* ---- (6) a write runs once per (client, seq), across a snapshot ---- */

static int apply_one(struct raft_fsm *f, bool del, uint64_t client, uint64_t seq, uint64_t floor,
                     const char *key, const char *val)
{
    const struct raftkv_origin o = {client, seq, floor};
    struct raft_buffer buf;
    const uint32_t klen = (uint32_t)strlen(key);
    assert_int_equal(del ? raftkv_cmd_del(&buf, &o, key, klen)
                         : raftkv_cmd_put(&buf, &o, key, klen, val, (uint32_t)strlen(val)),
                     ERMA_OK);
    void *result = NULL;
    assert_int_equal(f->apply(f, &buf, &result), 0);
    raft_free(buf.base);
    return (int)(intptr_t)result;
}

static void assert_value(const struct raft_fsm *f, const char *key, const char *want)
{
    char got[64];
    uint32_t vlen = 0;
    const int rc = kv_get(raftkv_fsm_kv(f), key, (uint32_t)strlen(key), got,
                          sizeof got, &vlen);
    if (!want) {
        assert_int_equal(rc, ERMA_ENOENT);
        return;
    }
    assert_int_equal(rc, ERMA_OK);
    assert_int_equal(vlen, strlen(want));
    assert_memory_equal(got, want, vlen);
}

static void test_at_most_once(void **state)
{
    (void)state;
    struct raft_fsm a, b;
    assert_int_equal(raftkv_fsm_init(&a, 1024, 1 << 20), ERMA_OK);
    assert_int_equal(raftkv_fsm_init(&b, 1024, 1 << 20), ERMA_OK);
    assert_int_equal(apply_one(&a, false, 7, 1, 1, "k", "v1"), ERMA_OK);
    assert_int_equal(apply_one(&a, false, 7, 2, 1, "k", "v2"), ERMA_OK);
    /* a retry of seq 1 reached the log after seq 2: nothing changes */
    assert_int_equal(apply_one(&a, false, 7, 1, 1, "k", "v1"), ERMA_OK);
    assert_value(&a, "k", "v2");
    assert_int_equal(apply_one(&a, true, 7, 3, 1, "k", NULL), ERMA_OK);
    /* the copy of a DEL answers what the DEL did, not ENOENT */
    assert_int_equal(apply_one(&a, true, 7, 3, 1, "k", NULL), ERMA_OK);
    assert_value(&a, "k", NULL);
    /* another client's seq 1 is its own */
    assert_int_equal(apply_one(&a, false, 8, 1, 1, "k", "x1"), ERMA_OK);
    assert_value(&a, "k", "x1");
    /* no origin: no dedup */
    assert_int_equal(apply_one(&a, true, 0, 0, 0, "k", NULL), ERMA_OK);
    assert_int_equal(apply_one(&a, true, 0, 0, 0, "k", NULL), ERMA_ENOENT);
    assert_int_equal(raftkv_fsm_duplicates(&a), 2);
    /* the outcomes travel in the snapshot */
    struct raft_buffer *bufs;
    unsigned n = 0;
    assert_int_equal(a.snapshot(&a, &bufs, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(b.restore(&b, &bufs[0]), 0); /* takes bufs[0].base */
    raft_free(bufs);
    assert_int_equal(apply_one(&b, false, 7, 2, 1, "k", "v2"), ERMA_OK);
    assert_int_equal(apply_one(&b, false, 8, 1, 1, "k", "x1-again"), ERMA_OK);
    assert_value(&b, "k", NULL);
    assert_int_equal(raftkv_fsm_duplicates(&b), 2);
    /* below the floor the client sent, a copy does nothing either */
    assert_int_equal(apply_one(&b, false, 7, 4, 4, "k", "v4"), ERMA_OK);
    assert_int_equal(apply_one(&b, false, 7, 3, 4, "k", "v3-late"), ERMA_OK);
    assert_value(&b, "k", "v4");
    /* a damaged snapshot is refused */
    assert_int_equal(b.snapshot(&b, &bufs, &n), 0);
    bufs[0].len -= 3;
    assert_int_equal(a.restore(&a, &bufs[0]), RAFT_MALFORMED);
    raft_free(bufs[0].base);
    raft_free(bufs);
    raftkv_fsm_close(&a);
    raftkv_fsm_close(&b);
}

/* ---- (7) linearizability: concurrent clients, a leader killed, a partition ----
 * LIN_CLIENTS clients, two ops in flight each, PUT (unique values), GET
 * (linearizable) and DEL over LIN_KEYS keys, while the leader is killed,
 * and comes back, then the leader's answers to the clients are lost for a
 * while (writes commit unanswered and are tried again: copies reach the
 * log), then the leader is cut off from the other replicas (clients still
 * reach it), then the cut heals. Every
 * op's invoke and completion (virtual time) goes into a history checked by
 * tests/raftkv/lincheck.c: it must be linearizable. During the cut, one more
 * client reads with GET_LOCAL (stale allowed) from the cut-off replica
 * only: the history with its reads must fail the check. */

#define LIN_CLIENTS 4
#define LIN_KEYS 8
#define LIN_WINDOW 2
#define LIN_THINK_NS (4 * MS)

struct lin_op {
    struct lin_client *cl;
    bool busy, stale;
    enum lincheck_kind kind;
    char key[8], val[24];
    uint64_t invoke, next;
};

struct lin_client {
    struct lin_run *run;
    struct raftkv_client *c;
    bool stale; /* the deliberately stale reader */
    uint32_t made;
    struct lin_op ops[LIN_WINDOW];
};

struct lin_run {
    struct lincheck_history *lin, *all; /* all: the stale reader's ops too */
    struct lin_client cl[LIN_CLIENTS + 1];
    struct raftkv_client *clients[LIN_CLIENTS + 1];
    unsigned nclients;
    struct erma_rand rng;
    uint64_t until; /* a phase ends */
    bool issuing;
    uint64_t done, unknown, stale_reads, by_phase[7];
    unsigned phase;
};

static void lin_record(struct lin_run *r, const struct lin_op *op, int status,
                       const uint8_t *val, uint32_t vlen)
{
    struct lincheck_op h = {.key = op->key, .key_len = strlen(op->key), .kind = op->kind,
                            .invoke = op->invoke, .complete = erma_now_ns()};
    if (status != ERMA_OK && status != ERMA_ENOENT) {
        if (op->kind == LINCHECK_GET)
            return; /* a failed read says nothing */
        h.result = LINCHECK_RESULT_UNKNOWN;
        h.complete = UINT64_MAX;
        r->unknown++;
    } else if (op->kind == LINCHECK_GET) {
        h.result = status == ERMA_OK ? LINCHECK_RESULT_VALUE : LINCHECK_RESULT_ENOENT;
        h.value = val;
        h.value_len = vlen;
    } else {
        h.result = status == ERMA_OK ? LINCHECK_RESULT_OK : LINCHECK_RESULT_ENOENT;
    }
    if (op->kind == LINCHECK_PUT) {
        h.value = op->val;
        h.value_len = strlen(op->val);
    }
    if (!op->stale)
        assert_int_equal(lincheck_add(r->lin, &h), LINCHECK_OK);
    assert_int_equal(lincheck_add(r->all, &h), LINCHECK_OK);
}

static void lin_done(void *tag, int status, const uint8_t *val, uint32_t vlen)
{
    struct lin_op *op = tag;
    struct lin_run *r = op->cl->run;
    op->busy = false;
    /* a pause before the slot's next op (virtual time is fast: without it
     * the history grows to millions of ops) */
    op->next = erma_now_ns() + erma_rand_below(&r->rng, LIN_THINK_NS);
    if (status == ERMA_ECANCELLED && op->kind == LINCHECK_GET)
        return;
    lin_record(r, op, status, val, vlen);
    if (status == ERMA_OK || status == ERMA_ENOENT) {
        r->done++;
        r->by_phase[r->phase]++;
        r->stale_reads += op->stale;
    }
}

static void lin_start(struct lin_run *r, struct lin_client *cl, struct lin_op *op)
{
    const uint64_t x = erma_rand_u64(&r->rng);
    snprintf(op->key, sizeof op->key, "lk%u", (unsigned)(x % LIN_KEYS));
    const unsigned pick = (unsigned)((x >> 8) % 100);
    op->cl = cl;
    op->stale = cl->stale;
    op->kind = cl->stale || pick < 40 ? LINCHECK_GET : pick < 85 ? LINCHECK_PUT : LINCHECK_DEL;
    snprintf(op->val, sizeof op->val, "c%u.%u", (unsigned)(cl - r->cl), ++cl->made);
    op->invoke = erma_now_ns();
    const uint32_t klen = (uint32_t)strlen(op->key);
    int rc;
    if (op->kind == LINCHECK_PUT)
        rc = raftkv_put(cl->c, op->key, klen, op->val, (uint32_t)strlen(op->val), lin_done,
                        op);
    else if (op->kind == LINCHECK_DEL)
        rc = raftkv_del(cl->c, op->key, klen, lin_done, op);
    else
        rc = raftkv_get(cl->c, op->key, klen, op->stale, lin_done, op);
    assert_int_equal(rc, ERMA_OK);
    op->busy = true;
}

static bool lin_step(void *ctx)
{
    struct lin_run *r = ctx;
    const uint64_t now = erma_now_ns();
    for (unsigned i = 0; r->issuing && i < r->nclients; i++)
        for (unsigned k = 0; k < (r->cl[i].stale ? 1u : LIN_WINDOW); k++)
            if (!r->cl[i].ops[k].busy && now >= r->cl[i].ops[k].next)
                lin_start(r, &r->cl[i], &r->cl[i].ops[k]);
    if (r->issuing)
        return erma_now_ns() >= r->until;
    for (unsigned i = 0; i < r->nclients; i++)
        for (unsigned k = 0; k < LIN_WINDOW; k++)
            if (r->cl[i].ops[k].busy)
                return false;
    return true;
}

static void lin_phase(struct cluster *c, struct lin_run *r, unsigned phase, uint64_t ns)
{
    r->phase = phase;
    r->until = erma_now_ns() + ns;
    assert_int_equal(raftkv_sim_run(c->sim, c->srv, N, r->clients, r->nclients, ns + SEC,
                                    lin_step, r),
                     ERMA_OK);
}

static void lin_client(struct lin_run *r, unsigned i, const char *const *uris, unsigned n,
                       bool stale)
{
    char uri[64];
    snprintf(uri, sizeof uri, "sim://rkv7/%u:0", N);
    const struct raftkv_client_cfg cc = {.uri = uri, .servers = uris, .nservers = n,
                                         .max_ops = LIN_WINDOW, .failure_ns = 100 * MS,
                                         .op_timeout_ns = 3 * SEC, .id = 100 + i};
    r->cl[i] = (struct lin_client){.run = r, .stale = stale};
    assert_int_equal(raftkv_client_create(&cc, &r->cl[i].c), ERMA_OK);
    r->clients[i] = r->cl[i].c;
}

/* cut: a replica cut off from the other replicas (clients reach it);
 * mute: a replica whose packets to the clients are lost. -1: none. */
struct lin_tap {
    int cut, mute;
};

static bool lin_tap(void *ctx, const struct erma_sim_event *ev, uint8_t *data)
{
    (void)data;
    const struct lin_tap *t = ctx;
    const bool replicas = ev->src_host < N && ev->dst_host < N && ev->src_host != ev->dst_host;
    if (t->cut >= 0 && replicas && (ev->src_host == t->cut || ev->dst_host == t->cut))
        return false;
    return !(t->mute >= 0 && ev->src_host == t->mute && ev->dst_host == N);
}

static void lin_check(struct lincheck_history *h, bool want_ok, const char *what)
{
    static char diag[4096];
    struct lincheck_stats st;
    const int rc = lincheck_check(h, 0, diag, sizeof diag, &st);
    print_message("  %s: %zu ops over %zu keys (%zu unknown-outcome ops dropped), %llu states: "
                  "%s\n",
                  what, st.ops, st.keys, st.dropped, (unsigned long long)st.states,
                  rc == LINCHECK_OK ? "linearizable"
                  : rc == LINCHECK_NONLINEARIZABLE ? "NOT linearizable"
                                                   : "no answer");
    if ((rc == LINCHECK_OK) != want_ok || rc < 0 || rc == LINCHECK_TOO_MANY_STATES)
        print_message("%s\n", diag);
    assert_int_equal(rc, want_ok ? LINCHECK_OK : LINCHECK_NONLINEARIZABLE);
}

static void test_linearizable(void **state)
{
    (void)state;
    struct cluster c;
    cluster_up(&c, "rkv7", 0, 0);
    static struct lin_run r;
    memset(&r, 0, sizeof r);
    r.lin = lincheck_create();
    r.all = lincheck_create();
    assert_non_null(r.lin);
    assert_non_null(r.all);
    erma_rand_seed(&r.rng, 77);
    r.issuing = true;
    for (unsigned i = 0; i < LIN_CLIENTS; i++)
        lin_client(&r, i, c.uris, N, false);
    r.nclients = LIN_CLIENTS;
    const int l0 = wait_leader(&c);
    assert_true(l0 >= 0);
    struct lin_tap tap = {-1, -1};
    erma_sim_set_tap(c.sim, lin_tap, &tap);
    lin_phase(&c, &r, 0, SEC);
    server_down(&c, l0);
    lin_phase(&c, &r, 1, 2 * SEC);
    server_up(&c, (unsigned)l0);
    lin_phase(&c, &r, 2, SEC);
    /* the leader's answers lost: writes commit unanswered, their clients
     * try elsewhere, then again at the leader: copies in the log */
    tap.mute = leader(&c);
    assert_true(tap.mute >= 0);
    lin_phase(&c, &r, 3, 1500 * MS);
    tap.mute = -1;
    lin_phase(&c, &r, 4, 2 * SEC);
    tap.cut = leader(&c);
    assert_true(tap.cut >= 0);
    const int cut = tap.cut;
    lin_client(&r, LIN_CLIENTS, &c.uris[cut], 1, true);
    r.nclients = LIN_CLIENTS + 1;
    lin_phase(&c, &r, 5, 2 * SEC);
    tap.cut = -1;
    lin_phase(&c, &r, 6, 2 * SEC);
    r.issuing = false;
    assert_int_equal(raftkv_sim_run(c.sim, c.srv, N, r.clients, r.nclients, 10 * SEC,
                                    lin_step, &r),
                     ERMA_OK);
    erma_sim_set_tap(c.sim, NULL, NULL);
    print_message("  leader %d killed, restarted; a leader's answers lost; leader %d cut off from "
                  "the others, healed: %llu ops done (%llu %llu %llu %llu %llu %llu %llu by "
                  "phase), %llu outcomes unknown, %llu stale reads from the cut-off replica\n",
                  l0 + 1, cut + 1, (unsigned long long)r.done,
                  (unsigned long long)r.by_phase[0], (unsigned long long)r.by_phase[1],
                  (unsigned long long)r.by_phase[2], (unsigned long long)r.by_phase[3],
                  (unsigned long long)r.by_phase[4], (unsigned long long)r.by_phase[5],
                  (unsigned long long)r.by_phase[6], (unsigned long long)r.unknown,
                  (unsigned long long)r.stale_reads);
    uint64_t dups = 0, retries = 0;
    for (unsigned i = 0; i < N; i++)
        dups += raftkv_fsm_duplicates(raftkv_server_fsm(c.srv[i]));
    for (unsigned i = 0; i < r.nclients; i++) {
        struct raftkv_client_stats cs;
        raftkv_client_get_stats(r.cl[i].c, &cs);
        retries += cs.retries;
    }
    print_message("  %llu tries retried; %llu copies of retried writes not run again (over "
                  "the replicas)\n",
                  (unsigned long long)retries, (unsigned long long)dups);
    for (unsigned p = 0; p < 7; p++)
        assert_true(p == 3 || r.by_phase[p] > 0); /* 3: no answer gets through */
    assert_true(dups > 0); /* copies of retried writes reached the log */ /* the clients carried on in every phase */
    assert_true(r.stale_reads > 0);
    lin_check(r.lin, true, "the clients' history");
    lin_check(r.all, false, "with the stale reader's GET_LOCALs");
    for (unsigned i = 0; i < r.nclients; i++)
        raftkv_client_destroy(r.cl[i].c);
    lincheck_destroy(r.lin);
    lincheck_destroy(r.all);
    cluster_down(&c);
}

/* ---- (8) the leader stalled for less than an election timeout ----
 * raftkv_server's timers (a 50 ms heartbeat, 500 ms elections, 200 ms
 * failure detection) and a client with its defaults, STALL_WINDOW writes
 * in flight, each slot writing again STALL_THINK_NS after its answer. The
 * leader is not stepped (as under SIGSTOP: its timers and the packets sent
 * to it wait) for 300, 200, then 400 ms: no election follows, and the
 * client has a write acknowledged within the stall plus STALL_EXTRA_NS of
 * the last one before it (600 ms for 300: the old client took 1.2 s, 200
 * ms to time the leader out, then down_ns passing it over). */

#define STALL_WINDOW 8
#define STALL_THINK_NS MS
#define STALL_EXTRA_NS (300 * MS)

struct paced;

struct paced_slot {
    struct paced *p;
    bool busy;
    uint64_t next; /* when it writes again */
};

struct paced {
    struct raftkv_client *c;
    struct paced_slot slot[STALL_WINDOW];
    uint32_t made, acked, failed;
    uint64_t last_ack, gap; /* gap: the longest time between two acks since reset */
    bool stopping;          /* no more writes: done once none is in flight */
};

static void paced_done(void *tag, int status, const uint8_t *val, uint32_t vlen)
{
    (void)val;
    (void)vlen;
    struct paced_slot *sl = tag;
    struct paced *p = sl->p;
    const uint64_t now = erma_now_ns();
    sl->busy = false;
    sl->next = now + STALL_THINK_NS;
    if (status != ERMA_OK) {
        p->failed++;
        print_message("  paced put: %s\n", erma_strerror(status));
        return;
    }
    p->acked++;
    if (p->last_ack && now - p->last_ack > p->gap)
        p->gap = now - p->last_ack;
    p->last_ack = now;
}

/* Starts the writes that are due; done once stopping and none is busy. */
static bool paced_step(void *ctx)
{
    struct paced *p = ctx;
    const uint64_t now = erma_now_ns();
    bool busy = false;
    for (unsigned i = 0; i < STALL_WINDOW; i++) {
        struct paced_slot *sl = &p->slot[i];
        busy |= sl->busy;
        if (sl->busy || now < sl->next || p->stopping)
            continue;
        char key[16], val[16];
        snprintf(key, sizeof key, "st%u", p->made % 64);
        snprintf(val, sizeof val, "v%u", ++p->made);
        assert_int_equal(raftkv_put(p->c, key, (uint32_t)strlen(key), val,
                                    (uint32_t)strlen(val), paced_done, sl),
                         ERMA_OK);
        sl->busy = true;
    }
    return p->stopping && !busy;
}

/* Writes for ns with replica `paused` (-1: none) not stepped, in slices of
 * STALL_THINK_NS (the fabric does not know the slots' timers). */
static void paced_run(struct cluster *c, struct paced *p, int paused, uint64_t ns)
{
    struct raftkv_server *srv[N];
    for (unsigned i = 0; i < N; i++)
        srv[i] = (int)i == paused ? NULL : c->srv[i];
    const uint64_t until = erma_now_ns() + ns;
    for (uint64_t n = 0; n <= ns / STALL_THINK_NS && erma_now_ns() < until; n++)
        assert_int_equal(raftkv_sim_run(c->sim, srv, N, &c->cli, 1, STALL_THINK_NS,
                                        paced_step, p),
                         ERMA_ETIMEDOUT);
}

static void test_leader_stalled(void **state)
{
    (void)state;
    struct cluster c;
    const struct raftkv_server_cfg cfg = {.kv_buckets = 1u << 14,
                                          .kv_log_bytes = 8u << 20};
    cluster_start(&c, "rkv8", &cfg, 0);
    const int l0 = wait_leader(&c);
    assert_true(l0 >= 0);
    const raft_term term0 = raftkv_server_raft(c.srv[l0])->current_term;
    static struct paced p;
    memset(&p, 0, sizeof p);
    p.c = c.cli;
    for (unsigned i = 0; i < STALL_WINDOW; i++)
        p.slot[i].p = &p;
    paced_run(&c, &p, -1, 200 * MS);
    assert_true(p.acked > 0);
    static const uint64_t stalls[] = {300 * MS, 200 * MS, 400 * MS};
    for (unsigned k = 0; k < sizeof stalls / sizeof stalls[0]; k++) {
        paced_run(&c, &p, -1, 100 * MS);
        struct raftkv_client_stats cs0, cs1;
        raftkv_client_get_stats(c.cli, &cs0);
        p.gap = 0;
        const uint32_t acked0 = p.acked;
        const uint64_t t_stall = erma_now_ns();
        paced_run(&c, &p, l0, stalls[k]);
        const uint64_t t_resume = erma_now_ns();
        paced_run(&c, &p, -1, SEC);
        /* a gap still open counts too */
        const uint64_t open = erma_now_ns() - p.last_ack;
        const uint64_t outage = p.gap > open ? p.gap : open;
        raftkv_client_get_stats(c.cli, &cs1);
        print_message("  leader %d stalled %.1f ms: %.1f ms without an acknowledgement; %u acks "
                      "in the second after; %llu redirects, %llu tries failed, replica given "
                      "up on %llu time(s)\n",
                      l0 + 1, (double)(t_resume - t_stall) / 1e6, (double)outage / 1e6,
                      p.acked - acked0, (unsigned long long)(cs1.redirects - cs0.redirects),
                      (unsigned long long)(cs1.tries_failed - cs0.tries_failed),
                      (unsigned long long)(cs1.silent - cs0.silent));
        /* no election: the same leader in the same term */
        assert_int_equal(leader(&c), l0);
        assert_true(raftkv_server_raft(c.srv[l0])->current_term == term0);
        assert_true(outage >= stalls[k]); /* the stall held the writes up */
        assert_true(outage <= stalls[k] + STALL_EXTRA_NS);
        /* the replica is given up on once per try's length (100 ms at least),
         * not again as soon as a new session to it opens */
        assert_true(cs1.silent - cs0.silent <= stalls[k] / 100000000 + 1);
        assert_true(p.acked > acked0);
    }
    p.stopping = true; /* the last writes end */
    assert_int_equal(raftkv_sim_run(c.sim, c.srv, N, &c.cli, 1, 10 * SEC, paced_step, &p),
                     ERMA_OK);
    assert_int_equal(p.failed, 0);
    cluster_down(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_replicate, remove_test_dirs),
        cmocka_unit_test_teardown(test_leader_killed, remove_test_dirs),
        cmocka_unit_test_teardown(test_restart_from_log, remove_test_dirs),
        cmocka_unit_test_teardown(test_restart_from_snapshot, remove_test_dirs),
        cmocka_unit_test_teardown(test_partition_heals, remove_test_dirs),
        cmocka_unit_test(test_at_most_once),
        cmocka_unit_test_teardown(test_linearizable, remove_test_dirs),
        cmocka_unit_test_teardown(test_leader_stalled, remove_test_dirs),
    };
    if (getenv("RAFTKV_TEST")) /* one test by name, for debugging */
        cmocka_set_test_filter(getenv("RAFTKV_TEST"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
