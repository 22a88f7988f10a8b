/*
 * raftkv - replicated PUTs of raftkv (libraft over erma RPCs) beside one
 * plain RPC round trip to the same leader, in one run.
 *
 *   raftkv [--rounds R] [--iters N] [--seconds S] [--inflight W] [--size B]
 *          [--modes LIST] [--groups G] [--dir DIR] [--no-failover] [--poll]
 *          [--cpu LIST] [--csv]
 *
 * Every round starts, for each mode, a fresh cluster of 3 raftkv_server
 * replicas on udp loopback with their data in DIR (default /var/tmp: a
 * disk, so that fsync costs what it costs):
 *   fsync    3 processes, the log and term fsynced (the default durability);
 *   nofsync  3 processes, never fsynced;
 *   polled   never fsynced, the 3 replicas in one process whose one thread
 *            polls their endpoints in turn (no wake-ups or process
 *            switches: what replicas with a polling core each would see,
 *            on a machine with too few cores for that; no failover);
 *   groups   as nofsync, the keys split over G raft groups (--groups,
 *            default 2), each replica's groups on threads of their own
 *            (raftkv_server --threads G); the leader killed is group 0's
 *            (the failover gap: no group acknowledging), and the end
 *            compares its PUTs/s with nofsync's, round by round.
 * then from this process (busy-polling):
 *   latency     N times in turn (default 5000): a PUT of B bytes (default
 *               32) to the leader, replicated and applied before it is
 *               answered, then a GET of the same key answered by the
 *               leader from its own table (GET_LOCAL: one RPC round trip,
 *               no replication): the ratio PUT / RPC of their medians is
 *               measured op by op in the same run;
 *   throughput  W PUTs in flight (default 64) for S seconds (default 2);
 *   failover    the same load, the leader killed (SIGKILL) 0.5 s in with
 *               W PUTs in flight: the longest time without an
 *               acknowledged PUT from the kill until 0.2 s after the
 *               first PUT sent after it is acknowledged (--no-failover
 *               skips it).
 * In fsync rounds one sync alone is measured on the same disk (raftkv_disk.c),
 * and the end compares the fsync PUT's median with the no-fsync PUT's plus
 * 1.5 syncs (one on the critical path, room for the replicas' syncs meeting
 * on one disk). The modes alternate in order from round to round (the
 * machines are noisy). Replicas sleep when idle, as servers do (--poll:
 * they spin, a core each). Output: a row per round and mode, then per mode
 * the medians over rounds (the ratio: the median of the per-round ratios).
 * Exits 1 when the cluster cannot start or an op fails outside failover.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "erma/clock.h"
#include "kv/kv.h"
#include "raftkv/raftkv.h"
#include "raftkv_disk.h"

#define R 3
#define BASE_PORT 42600
#define LEADER_WAIT_NS 20000000000ull
#define OP_WAIT_NS 30000000000ull
#define MAX_MODES 4

enum mode { FSYNC, NOFSYNC, POLLED, GROUPS };
static const char *const mode_names[] = {"fsync", "nofsync", "polled", "groups"};

static const char usage[] =
    "usage: raftkv [options]\n"
    "  replicated PUT latency and throughput of raftkv (3 replicas as processes on\n"
    "  udp loopback) beside one RPC round trip to the leader, in one run\n"
    "  --rounds R      rounds (default 3)\n"
    "  --iters N       PUT/RPC pairs per round (default 5000)\n"
    "  --seconds S     throughput phase, seconds (default 2)\n"
    "  --inflight W    PUTs in flight in the throughput phase (default 64)\n"
    "  --size B        value bytes (default 32)\n"
    "  --modes LIST    of fsync, nofsync, polled, groups (default the first three)\n"
    "  --groups G      groups mode: raft groups, 2..8 (default 2)\n"
    "  --dir DIR       the replicas' data (default /var/tmp)\n"
    "  --no-failover   skip the leader kill\n"
    "  --poll          fsync, nofsync: replicas spin instead of sleeping when idle\n"
    "  --cpu LIST      CPUs: this process, then the replicas (default: none; one\n"
    "                  CPU: the replicas unpinned)\n"
    "  --csv           CSV instead of the table\n"
    "  -h, --help      this text\n";

struct opts {
    unsigned rounds, iters, inflight, nmodes, groups;
    double seconds;
    uint32_t size;
    enum mode modes[MAX_MODES];
    bool failover, poll;
    const char *dir;
};

struct result {
    struct bench_lat put, rpc;
    double ratio, puts_per_s, failover_ms, fdatasync_us;
    uint64_t failed;
};

struct cluster {
    pid_t pid[R]; /* POLLED: pid[0] runs all three */
    char uri[R][64];
    const char *uris[R];
    char dir[512];
    struct raftkv_client *c;
};

static const struct bench_cli *the_cli;

/* ---- the replicas ---- */

static volatile sig_atomic_t stop_server;

static void on_term(int sig)
{
    (void)sig;
    stop_server = 1;
}

static bool server_stopped(void *ctx)
{
    (void)ctx;
    return stop_server;
}

/* Replica i (of groups raft groups on threads of their own when groups >
 * 1: *gs, else *s), in a forked child, which exits 1 when it cannot start. */
static void replica(struct cluster *cl, unsigned i, bool fsync, bool poll, unsigned groups,
                    struct raftkv_server **s, struct raftkv_groups **gs)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/r%u", cl->dir, i + 1);
    const struct erma_endpoint_cfg ep = {.busy_poll = poll};
    const struct raftkv_server_cfg cfg = {.id = i + 1, .peers = cl->uris, .npeers = R,
                                          .data_dir = dir, .no_fsync = !fsync, .ep_cfg = &ep};
    if ((groups > 1 ? raftkv_groups_start(&cfg, groups, gs) : raftkv_server_create(&cfg, s)) ==
        ERMA_OK)
        return;
    fprintf(stderr, "raftkv: replica %u cannot start on %s\n", i + 1, cl->uri[i]);
    _exit(1);
}

static void serve(struct cluster *cl, unsigned i, bool fsync, bool poll, unsigned groups)
{
    struct raftkv_server *s = NULL;
    struct raftkv_groups *gs = NULL;
    replica(cl, i, fsync, poll, groups, &s, &gs);
    const struct timespec tick = {0, 10000000};
    while (!stop_server)
        s ? (void)raftkv_server_run(s, server_stopped, NULL, 100000000)
          : (void)nanosleep(&tick, NULL);
    s ? raftkv_server_destroy(s) : raftkv_groups_stop(gs);
    _exit(0);
}

/* POLLED: the three replicas in this process, one thread polling their
 * endpoints in turn: no wake-ups, no process switches, one core. */
static void serve_all(struct cluster *cl)
{
    struct raftkv_server *s[R];
    for (unsigned i = 0; i < R; i++)
        replica(cl, i, false, true, 1, &s[i], NULL);
    while (!stop_server)
        for (unsigned i = 0; i < R; i++)
            raftkv_server_run_once(s[i]);
    for (unsigned i = 0; i < R; i++)
        raftkv_server_destroy(s[i]);
    _exit(0);
}

/* ---- ops, one at a time ---- */

struct one {
    bool done;
    int status;
};

static void one_done(void *tag, int status, const uint8_t *val, uint32_t vlen)
{
    (void)val;
    (void)vlen;
    struct one *o = tag;
    o->done = true;
    o->status = status;
}

static int wait_one(struct raftkv_client *c, struct one *o)
{
    const uint64_t end = erma_now_ns() + OP_WAIT_NS;
    while (!o->done && erma_now_ns() < end)
        raftkv_client_run_once(c);
    return o->done ? o->status : ERMA_ETIMEDOUT;
}

static int op(struct raftkv_client *c, bool put, const char *key, const uint8_t *val,
              uint32_t vlen)
{
    struct one o = {0};
    const uint32_t klen = (uint32_t)strlen(key);
    const int rc = put ? raftkv_put(c, key, klen, val, vlen, one_done, &o)
                       : raftkv_get(c, key, klen, true, one_done, &o);
    return rc != ERMA_OK ? rc : wait_one(c, &o);
}

static int cluster_start(struct cluster *cl, const struct opts *o, enum mode m, unsigned round)
{
    memset(cl, 0, sizeof *cl);
    snprintf(cl->dir, sizeof cl->dir, "%s/raftkv-bench-%d-%u-%s", o->dir, (int)getpid(), round,
             mode_names[m]);
    if (mkdir(cl->dir, 0700) != 0) {
        fprintf(stderr, "raftkv: cannot make %s\n", cl->dir);
        return ERMA_ESYS;
    }
    for (unsigned i = 0; i < R; i++) {
        snprintf(cl->uri[i], sizeof cl->uri[i], "udp://127.0.0.1:%u",
                 BASE_PORT + i * RAFTKV_MAX_GROUPS); /* a group per port after */
        cl->uris[i] = cl->uri[i];
    }
    const unsigned groups = m == GROUPS ? o->groups : 1;
    fflush(NULL);
    for (unsigned i = 0; i < (m == POLLED ? 1u : R); i++) {
        cl->pid[i] = fork();
        if (cl->pid[i] == 0) {
            bench_pin_or_free(bench_cli_cpu(the_cli, i + 1)); /* --cpu C alone: free */
            const struct sigaction sa = {.sa_handler = on_term};
            sigaction(SIGTERM, &sa, NULL);
            if (m == POLLED)
                serve_all(cl);
            serve(cl, i, m == FSYNC, o->poll, groups);
        }
    }
    const struct erma_endpoint_cfg ep = {.busy_poll = true};
    const struct raftkv_client_cfg cc = {.uri = "udp://127.0.0.1:0", .servers = cl->uris,
                                         .nservers = R, .ep_cfg = &ep,
                                         .op_timeout_ns = 10000000000ull, .groups = groups};
    int rc = raftkv_client_create(&cc, &cl->c);
    /* a leader in every group: a PUT that succeeds, to a key of each */
    const uint64_t end = erma_now_ns() + LEADER_WAIT_NS;
    for (unsigned g = 0; rc == ERMA_OK && g < groups && erma_now_ns() < end; g++) {
        char key[32];
        raftkv_group_key("bench:leader:", g, groups, key, sizeof key);
        while (erma_now_ns() < end && op(cl->c, true, key, (const uint8_t *)"1", 1) != ERMA_OK)
            ;
    }
    return rc == ERMA_OK && erma_now_ns() < end ? ERMA_OK : ERMA_ETIMEDOUT;
}

static void cluster_stop(struct cluster *cl)
{
    raftkv_client_destroy(cl->c);
    for (unsigned i = 0; i < R; i++)
        if (cl->pid[i] > 0)
            kill(cl->pid[i], SIGTERM);
    for (unsigned i = 0; i < R; i++)
        if (cl->pid[i] > 0)
            waitpid(cl->pid[i], NULL, 0);
    raftkv_remove_tree(cl->dir);
}

/* ---- the phases ---- */

static int latency(struct cluster *cl, const struct opts *o, struct result *r)
{
    uint64_t *put = malloc(o->iters * sizeof *put), *rpc = malloc(o->iters * sizeof *rpc);
    uint8_t *val = calloc(1, o->size ? o->size : 1);
    int rc = put && rpc && val ? ERMA_OK : ERMA_ENOMEM;
    for (unsigned i = 0; i < o->iters && rc == ERMA_OK; i++) {
        char key[32];
        snprintf(key, sizeof key, "k%u", i % 1000);
        memcpy(val, &i, o->size < sizeof i ? o->size : sizeof i);
        uint64_t t0 = erma_now_ns();
        rc = op(cl->c, true, key, val, o->size);
        uint64_t t1 = erma_now_ns();
        put[i] = t1 - t0;
        if (rc == ERMA_OK)
            rc = op(cl->c, false, key, NULL, 0);
        rpc[i] = erma_now_ns() - t1;
    }
    if (rc == ERMA_OK) {
        bench_lat_from_ns(put, o->iters, &r->put);
        bench_lat_from_ns(rpc, o->iters, &r->rpc);
        r->ratio = r->put.median_us / r->rpc.median_us;
    }
    free(put);
    free(rpc);
    free(val);
    return rc;
}

struct load {
    struct raftkv_client *c;
    uint32_t inflight, busy, size, next;
    uint64_t acked, failed;
    uint64_t kill_at, last_ack, max_gap; /* max_gap: between acks after kill_at */
    uint64_t first_sent, recovered_at;   /* the first PUT sent after kill_at; its ack */
    uint8_t val[KV_MAX_ITEM];
};

/* The tag of one PUT: the load and the PUT's number. */
struct put {
    struct load *l;
    uint64_t n;
};

static void load_done(void *tag, int status, const uint8_t *val, uint32_t vlen)
{
    (void)val;
    (void)vlen;
    struct put *p = tag;
    struct load *l = p->l;
    const uint64_t n = p->n;
    free(p);
    l->busy--;
    if (status != ERMA_OK) {
        l->failed++;
        return;
    }
    l->acked++;
    const uint64_t now = erma_now_ns();
    if (l->kill_at) { /* the gap since the last ack, or since the kill */
        const uint64_t gap = now - (l->last_ack > l->kill_at ? l->last_ack : l->kill_at);
        l->max_gap = gap > l->max_gap ? gap : l->max_gap;
    }
    l->last_ack = now;
    if (l->first_sent && n >= l->first_sent && !l->recovered_at)
        l->recovered_at = now;
}

static void load_fill(struct load *l)
{
    while (l->busy < l->inflight) {
        char key[32];
        struct put *p = malloc(sizeof *p);
        if (!p)
            return;
        *p = (struct put){l, l->next};
        if (l->kill_at && !l->first_sent)
            l->first_sent = l->next;
        snprintf(key, sizeof key, "t%u", l->next++ % 100000);
        if (raftkv_put(l->c, key, (uint32_t)strlen(key), l->val, l->size, load_done, p) !=
            ERMA_OK) {
            free(p);
            return;
        }
        l->busy++;
    }
}

/* Runs the load until end or until done(l). */
static void load_until(struct load *l, uint64_t end, bool (*done)(const struct load *))
{
    while (erma_now_ns() < end && !(done && done(l))) {
        load_fill(l);
        raftkv_client_run_once(l->c);
    }
}

/* Runs the load until end, then lets what is in flight finish. */
static void load_run(struct load *l, uint64_t end)
{
    load_until(l, end, NULL);
    const uint64_t drain = erma_now_ns() + OP_WAIT_NS;
    while (l->busy && erma_now_ns() < drain)
        raftkv_client_run_once(l->c);
}

static struct load *load_new(struct cluster *cl, const struct opts *o)
{
    struct load *l = calloc(1, sizeof *l);
    if (l) {
        l->c = cl->c;
        l->inflight = o->inflight;
        l->size = o->size;
    }
    return l;
}

static int throughput(struct cluster *cl, const struct opts *o, struct result *r)
{
    struct load *l = load_new(cl, o);
    if (!l)
        return ERMA_ENOMEM;
    const uint64_t start = erma_now_ns();
    load_run(l, start + (uint64_t)(o->seconds * 1e9));
    r->puts_per_s = (double)l->acked / ((double)(erma_now_ns() - start) / 1e9);
    r->failed += l->failed;
    const int rc = l->failed ? ERMA_EAGAIN : ERMA_OK;
    free(l);
    return rc;
}

static bool recovered(const struct load *l)
{
    return l->recovered_at != 0;
}

static int failover(struct cluster *cl, const struct opts *o, struct result *r)
{
    struct load *l = load_new(cl, o);
    if (!l)
        return ERMA_ENOMEM;
    load_until(l, erma_now_ns() + 500000000ull, NULL);
    const unsigned leader = raftkv_client_leader(cl->c);
    l->kill_at = erma_now_ns();
    kill(cl->pid[leader], SIGKILL);
    waitpid(cl->pid[leader], NULL, 0);
    cl->pid[leader] = -1;
    load_until(l, l->kill_at + 15000000000ull, recovered);
    if (l->recovered_at)
        load_run(l, l->recovered_at + 200000000ull);
    else
        load_run(l, erma_now_ns());
    r->failover_ms = l->recovered_at ? (double)l->max_gap / 1e6 : -1;
    const int rc = l->recovered_at ? ERMA_OK : ERMA_ETIMEDOUT;
    free(l);
    return rc;
}

/* ---- main ---- */

static void parse_modes(const struct bench_cli *cli, struct opts *o, char *list)
{
    o->nmodes = 0;
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        unsigned m = 0;
        while (m < MAX_MODES && strcmp(t, mode_names[m]) != 0)
            m++;
        if (o->nmodes == MAX_MODES || m == MAX_MODES)
            bench_cli_fail(cli, "--modes: fsync, nofsync, polled, groups, not %s", t);
        o->modes[o->nmodes++] = (enum mode)m;
    }
    if (o->nmodes == 0)
        bench_cli_fail(cli, "--modes: fsync, nofsync, polled, groups");
}

static void parse(struct bench_cli *cli, struct opts *o, int argc, char **argv)
{
    static const struct option lo[] = {BENCH_COMMON_OPTIONS,
                                        {"rounds", 1, 0, 'n'},   {"iters", 1, 0, 'i'},
                                        {"seconds", 1, 0, 't'},  {"inflight", 1, 0, 'w'},
                                        {"modes", 1, 0, 'm'},    {"dir", 1, 0, 'd'},
                                        {"no-failover", 0, 0, 'F'}, {"poll", 0, 0, 'P'},
                                        {"groups", 1, 0, 'g'},   {0, 0, 0, 0}};
    *o = (struct opts){.rounds = 3, .iters = 5000, .inflight = 64, .seconds = 2, .size = 32,
                       .nmodes = 3, .modes = {FSYNC, NOFSYNC, POLLED}, .failover = true,
                       .dir = "/var/tmp", .groups = 2};
    bench_cli_init(cli, "raftkv", usage, lo);
    for (int c; (c = bench_cli_next(cli, argc, argv)) != -1;) {
        switch (c) {
        case 'n': o->rounds = (unsigned)bench_cli_u64(cli, optarg); break;
        case 'i': o->iters = (unsigned)bench_cli_u64(cli, optarg); break;
        case 't': o->seconds = bench_cli_real(cli, optarg); break;
        case 'w': o->inflight = (unsigned)bench_cli_u64(cli, optarg); break;
        case 'm': parse_modes(cli, o, optarg); break;
        case 'd': o->dir = optarg; break;
        case 'F': o->failover = false; break;
        case 'P': o->poll = true; break;
        case 'g': o->groups = (unsigned)bench_cli_u64(cli, optarg); break;
        default: bench_cli_fail(cli, NULL);
        }
    }
    if (cli->nsizes > 1)
        bench_cli_fail(cli, "--size: one size");
    if (cli->nsizes == 1)
        o->size = cli->sizes[0];
    if (o->rounds == 0 || o->iters == 0 || o->inflight == 0 || o->inflight > 256 ||
        o->seconds <= 0 || o->size == 0 || o->size > 4096 || o->groups < 2 ||
        o->groups > RAFTKV_MAX_GROUPS)
        bench_cli_fail(cli, "--rounds, --iters, --inflight (<= 256), --seconds and --size"
                            " (<= 4096) must be positive, --groups 2..8");
}

static int run_round(const struct opts *o, unsigned round, enum mode m, struct result *r)
{
    struct cluster cl;
    memset(r, 0, sizeof *r);
    int rc = cluster_start(&cl, o, m, round);
    if (rc != ERMA_OK)
        fprintf(stderr, "raftkv: round %u: no leader within %llu s\n", round,
                (unsigned long long)(LEADER_WAIT_NS / 1000000000ull));
    if (rc == ERMA_OK && (rc = latency(&cl, o, r)) != ERMA_OK)
        fprintf(stderr, "raftkv: round %u: latency phase: %s\n", round, erma_strerror(rc));
    if (rc == ERMA_OK && (rc = throughput(&cl, o, r)) != ERMA_OK)
        fprintf(stderr, "raftkv: round %u: throughput phase: %llu PUTs failed\n", round,
                (unsigned long long)r->failed);
    r->failover_ms = -1;
    r->fdatasync_us = m == FSYNC ? raftkv_fdatasync_us(o->dir, o->size + 64) : -1;
    if (rc == ERMA_OK && o->failover && m != POLLED && (rc = failover(&cl, o, r)) != ERMA_OK)
        fprintf(stderr, "raftkv: round %u: no PUT acknowledged within 15 s of the kill\n",
                round);
    cluster_stop(&cl);
    return rc;
}

/* The index in o->modes of mode `want` where it has results, else -1. */
static int mode_at(const struct opts *o, const unsigned *n, enum mode want)
{
    for (unsigned m = 0; m < o->nmodes; m++)
        if (o->modes[m] == want && n[m])
            return (int)m;
    return -1;
}

/* The groups mode's PUTs/s against nofsync's, the median of the per-round
 * ratios, when both ran in every round. */
static void note_groups(const struct bench_cli *cli, const struct opts *o, double tput[][64],
                        const unsigned *n)
{
    const int g = mode_at(o, n, GROUPS), nf = mode_at(o, n, NOFSYNC);
    if (g < 0 || nf < 0 || n[g] != n[nf])
        return;
    double r[64];
    for (unsigned i = 0; i < n[g]; i++)
        r[i] = tput[g][i] / tput[nf][i];
    bench_note(cli->csv, "raftkv: %u groups / one, PUTs/s with %u in flight: %.2fx (the median"
               " of %u rounds' ratios)", o->groups, o->inflight, bench_median(r, n[g]), n[g]);
}

/* The fsync PUT's median against the no-fsync PUT's plus 1.5 syncs
 * alone (medians over rounds), when both modes ran. */
static void note_group_commit(const struct bench_cli *cli, const struct opts *o,
                              double p50[][64], const unsigned *n, double *sync, unsigned nsync)
{
    const int f = mode_at(o, n, FSYNC), nf = mode_at(o, n, NOFSYNC);
    if (f < 0 || nf < 0 || !nsync)
        return;
    const double put = bench_median(p50[f], n[f]), base = bench_median(p50[nf], n[nf]),
                 one = bench_median(sync, nsync);
    bench_note(cli->csv, "raftkv: fsync PUT p50 %.1f us against no-fsync PUT p50 %.1f + 1.5 x"
               " fdatasync alone %.1f = %.1f us: %.2fx", put, base, one, base + 1.5 * one,
               put / (base + 1.5 * one));
}

int main(int argc, char **argv)
{
    struct bench_cli cli;
    struct opts o;
    parse(&cli, &o, argc, argv);
    the_cli = &cli;
    bench_pin(bench_cli_cpu(&cli, 0));
    bench_note(cli.csv, "raftkv: 3 replicas on udp loopback, data in %s, %u B values, %u rounds"
               " of %u PUT/RPC pairs, %u in flight for %.1f s%s",
               o.dir, o.size, o.rounds, o.iters, o.inflight, o.seconds,
               o.failover ? ", then the leader killed" : "");
    struct bench_table t;
    bench_table_start(&t, cli.csv, "bench,round,mode:8,put_p50_us,put_p99_us,rpc_p50_us,"
                                   "rpc_p99_us,put/rpc,puts_per_s,failover_ms,"
                                   "fdatasync_us");
    double ratio[MAX_MODES][64], p50[MAX_MODES][64], p99[MAX_MODES][64], rpc50[MAX_MODES][64],
        tput[MAX_MODES][64], fo[MAX_MODES][64], sync[64];
    unsigned nsync = 0;
    unsigned n[MAX_MODES] = {0}, nfo[MAX_MODES] = {0};
    int status = 0;
    for (unsigned round = 0; round < o.rounds; round++)
        for (unsigned k = 0; k < o.nmodes; k++) {
            const unsigned m = round % 2 ? o.nmodes - 1 - k : k;
            const char *name = mode_names[o.modes[m]];
            struct result r;
            if (run_round(&o, round, o.modes[m], &r) != ERMA_OK) {
                status = 1;
                continue;
            }
            bench_table_row(&t, "raftkv,%u,%s,%.1f,%.1f,%.1f,%.1f,%.2f,%.0f,%.1f,%.1f", round,
                            name, r.put.median_us, r.put.p99_us, r.rpc.median_us, r.rpc.p99_us,
                            r.ratio, r.puts_per_s, r.failover_ms, r.fdatasync_us);
            if (r.fdatasync_us >= 0 && nsync < 64)
                sync[nsync++] = r.fdatasync_us;
            if (n[m] < 64) {
                ratio[m][n[m]] = r.ratio;
                p50[m][n[m]] = r.put.median_us;
                p99[m][n[m]] = r.put.p99_us;
                rpc50[m][n[m]] = r.rpc.median_us;
                tput[m][n[m]++] = r.puts_per_s;
            }
            if (r.failover_ms >= 0 && nfo[m] < 64)
                fo[m][nfo[m]++] = r.failover_ms;
        }
    for (unsigned m = 0; m < o.nmodes; m++)
        if (n[m])
            bench_table_row(&t, "raftkv,median,%s,%.1f,%.1f,%.1f,,%.2f,%.0f,%.1f,%.1f",
                            mode_names[o.modes[m]], bench_median(p50[m], n[m]),
                            bench_median(p99[m], n[m]), bench_median(rpc50[m], n[m]),
                            bench_median(ratio[m], n[m]), bench_median(tput[m], n[m]),
                            nfo[m] ? bench_median(fo[m], nfo[m]) : -1.0,
                            o.modes[m] == FSYNC && nsync ? bench_median(sync, nsync) : -1.0);
    note_group_commit(&cli, &o, p50, n, sync, nsync);
    note_groups(&cli, &o, tput, n);
    return status;
}
