/*
 * kvcs - the key-value caching service under open-loop load: one-sided
 * READ lookups beside RPC lookups, as in 1RMA's KVCS evaluation.
 *
 *   kvcs [--loads L1,L2,...] [--seconds T] [--sizes LIST] [options]        (sweep)
 *   kvcs --kill-at SEC --method read|rpc --load L [options]             (failure)
 *   kvcs --role server --server URI                  (one server, on each server host)
 *   kvcs --role client --server URI1,URI2,... [...]  (the client, on another)
 *
 * `kvcs --help` lists every option. By default (--role both) it forks
 * --servers kvcs servers on udp loopback (ports P, P+8, ...), loads --keys
 * keys of each --sizes value size (default 64 B) with 64 PUTs in flight (the
 * keys a PUT could not store on every replica are PUT again in a later
 * pass, 5 passes in all), then:
 *
 * Unless --no-loc-cache, every key is then read once by one-sided GET,
 * untimed, so that the client's location cache knows every item as a
 * running service's would (its one-sided GETs take one READ, not two).
 *
 * --client-threads C (default 1) runs C client threads in this process so
 * that the servers can be saturated, each with its own kvcs client (a
 * client belongs to one thread, erma/kvcs.h) at its own endpoint: the
 * client URI's port plus t (port 0: any free port). Thread 0's client
 * loads the keys; every client reads them all for its own location cache
 * (above). In each phase below the threads start together, each with
 * 1 / C of the offered load as its own Poisson stream (its own seed);
 * a row merges their latencies for the percentiles and sums the rest
 * (achieved, failed, wrong, hedged, one_read).
 *
 * sweep (default): for each offered load L (GETs per second, Poisson
 * arrivals, uniform keys), T seconds by one-sided READ, then T seconds by
 * RPC. Latency is from an op's scheduled arrival to its callback, so
 * queueing in the client counts (open loop). A row per (size, load,
 * method): achieved GETs/s, p50, p99, p99.9, failed and wrong GETs, GETs
 * hedged and GETs done in one READ, and the CPU time per GET of this
 * process and of the forked servers together (utime + stime, us; 0 for
 * servers elsewhere), which tells the methods' cost where the latencies
 * are queueing.
 *
 * failure (--kill-at): one method at one load for T seconds; at SEC server
 * 0 is killed (SIGKILL; only with --role both). With --csv, a row per 10 ms
 * bin (ops, p50, p99, max, failed); then a summary: the median before the
 * kill and the disruption, the time from the kill to the end of the last bin
 * holding a failed op or one that took longer than --slow-ms (default 10: it
 * waited on the dead replica before moving on). A try at one replica has
 * --attempt-ms (default 100; the client's attempt_timeout_ns) before it
 * fails; the client asks the next replica too once a try is slower than
 * that replica's round trips (a hedge, erma/kvcs.h).
 *
 * --closed: the sweep's one load is one GET at a time per client thread
 * (offered 0 in the rows), for the latency of a lone lookup by each method.
 *
 * --rounds N repeats the sweep N times, each load by both methods in turn
 * (READ first in odd rounds, RPC first in even ones), and ends with a
 * summary per load: the medians over rounds of the achieved rates and of
 * the per-round READ / RPC ratios of p50 and p99. --psk gives the servers
 * and the client a key: RPC sessions are then sealed as one-sided ops
 * always are (the fair comparison; erma_nexus_cfg.psk).
 *
 * A GET whose value differs from what the loader PUT counts as wrong and
 * ends the run (exit 1); stderr names the method, the replica that
 * answered and the key whose value it was (each value starts with its
 * key's number). Failed GETs (every replica timed out, say) are
 * counted and named on stderr, and the run goes on.
 *
 * The servers sleep in their sockets once idle for --idle-wait-us
 * (default 20; kvcs server cfg.idle_wait_ns), so that three of them can
 * share one core; the clients poll. --cpu LIST pins client thread t to
 * the list's t-th CPU (it needs at least C of them) and the servers to the
 * CPUs after those in turn (unpinned when none is left; default: no
 * pinning). --server-threads N gives each server N endpoint threads with a
 * share of the keys each (kvcs cfg.threads; the clients know it), unpinned.
 *
 * The client threads (loading, warm-up reads, GETs, merged counts) are in
 * kvcs_clients.c; the servers, the rows and the command line here.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "erma/rpc.h"
#include "kvcs_clients.h" /* the client threads: loading, warm-up, GETs */

static const char usage[] =
    "usage: kvcs [options]\n"
    "  KVCS lookups by one-sided READ and by RPC under open-loop load (bench/kvcs.c)\n"
    "  --loads LIST       sweep: offered GETs/s (default 5000,20000,50000,100000)\n"
    "  --seconds T        per load and method, or the failure run (default 2)\n"
    "  --sizes LIST       value sizes in bytes, 1..4096 (--size B: one; default 64);\n"
    "                     --role server: its log holds --keys keys of the largest\n"
    "  --kill-at SEC      failure run: kill server 0 at SEC (with --method, --load)\n"
    "  --method M         failure run: read (default) or rpc\n"
    "  --load L           failure run: offered GETs/s (default 10000)\n"
    "  --servers S        servers to fork (default 3, at most 8)\n"
    "  --replicas R       replicas per key (default 3)\n"
    "  --keys K           keys loaded (default 10000)\n"
    "  --attempt-ms A     a try's full chance at one replica, A ms (default 100)\n"
    "  --slow-ms S        failure run: an op slower than S ms is disrupted (default 10)\n"
    "  --rounds N         sweep: N rounds, medians of per-round ratios (default 1)\n"
    "  --psk              secure RPC sessions (a shared key; READs are sealed anyway)\n"
    "  --no-loc-cache     one-sided GETs without the location cache (two READs each)\n"
    "  --closed           sweep: one GET at a time per client thread (closed loop)\n"
    "                     instead of --loads\n"
    "  --no-hedge         GET tries not hedged (kvcs cfg.no_hedge)\n"
    "  --only M           sweep: only method M, read or rpc (for profiles; no ratios)\n"
    "  --server-threads N each server runs N endpoint threads, keys split among them\n"
    "                     (kvcs cfg.threads; ports P..P+N-1; servers then unpinned)\n"
    "  --client-threads C C client threads (1..32, default 1), each its own kvcs\n"
    "                     client at the client URI's port plus t, with 1/C of the\n"
    "                     load; rows merge their latencies and sum their counts\n"
    "  --idle-wait-us U   servers sleep once idle U us (default 20)\n"
    "  --base-port P      forked servers on udp://127.0.0.1:P, P+8, ... (default 42100)\n"
    "  --cpu LIST         CPUs: client thread t on the t-th (at least C of them), then\n"
    "                     the servers on the rest in turn (default: none)\n"
    "  --csv              CSV instead of the table (failure: with the 10 ms timeline)\n"
    "  --role R           both (default: fork the servers), server (one server at\n"
    "                     --server until killed), client (servers elsewhere)\n"
    "  --server URI[,..]  server: its URI; client: every server's URI, in ring order\n"
    "  --uri URI          client thread 0's URI, thread t at its port plus t (port\n"
    "                     0: any free port; default: the port after the servers')\n"
    "  -h, --help         this text\n";

#define MAX_SERVERS 8
#define MAX_ROUNDS 64
#define MAX_LOADS 32

static const char *method_name(enum kvcs_method m)
{
    return m == KVCS_READ ? "read" : "rpc";
}

/* Runs one kvcs server here until the parent dies (forked: getppid() == 1)
 * or, with forever, until killed. */
static int server_run(const char *uri, uint64_t idle_wait_ns, uint64_t log_bytes,
                      const uint8_t *psk, unsigned threads, bool forever)
{
    struct kvcs_server *s;
    const struct kvcs_server_cfg cfg = {.uri = uri, .buckets = threads << 14,
                                        .log_bytes = log_bytes * threads,
                                        .idle_wait_ns = idle_wait_ns, .psk = psk,
                                        .threads = threads};
    const int rc = kvcs_server_create(&cfg, &s);
    if (rc != ERMA_OK) {
        fprintf(stderr, "kvcs: server on %s: %s\n", uri, erma_strerror(rc));
        return 1;
    }
    while (forever || getppid() != 1)
        kvcs_server_run(s, 100000000);
    kvcs_server_destroy(s);
    return 0;
}

/* Forks a server pinned to cpu (its threads inherit it; -1: unpinned). */
static pid_t server_fork(const char *uri, uint64_t idle_wait_ns, uint64_t log_bytes,
                         const uint8_t *psk, unsigned threads, int cpu)
{
    const pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the benchmark */
    bench_pin(cpu);
    _exit(server_run(uri, idle_wait_ns, log_bytes, psk, threads, false));
}

/* A server's item log: twice what the keys take at the largest value size
 * (the log is circular: an item it wraps over is gone), at least 16 MiB. */
static uint64_t log_bytes_for(const struct opts *o, const struct bench_cli *cli)
{
    uint64_t need = 16u << 20, value = 0;
    for (unsigned i = 0; i < cli->nsizes; i++)
        value = cli->sizes[i] > value ? cli->sizes[i] : value;
    while (need < 2 * (uint64_t)o->keys * (value + 64))
        need *= 2;
    return need;
}

/* CPU time of process pid (0: this one) so far, in us: utime + stime of
 * /proc/PID/stat (every thread), 0 when unreadable. */
static double cpu_us(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, pid ? "/proc/%d/stat" : "/proc/self/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the name may hold spaces */
    unsigned long long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
                     &st) != 2)
        return 0;
    return (double)(ut + st) * 1e6 / (double)sysconf(_SC_CLK_TCK);
}

/* The client's and the forked servers' CPU time so far, in us. */
static void cpu_both(const struct run *r, double *client, double *servers)
{
    *client = cpu_us(0);
    *servers = 0;
    for (unsigned i = 0; r->pids && i < r->o->servers; i++)
        *servers += r->pids[i] > 0 ? cpu_us(r->pids[i]) : 0;
}

/* One load by one method (load 0: closed loop): GETs for o->seconds from
 * every client thread (r: runs[0]), a row, the latencies in *l and the
 * achieved rate in *rate. */
static int sweep_row(struct run *r, const struct bench_table *t, double load,
                     enum kvcs_method meth, struct bench_lat *l, double *rate)
{
    const struct opts *o = r->o;
    struct kvcs_client_stats a, b;
    double cli0, srv0, cli1, srv1;
    struct phase ph = {.runs = r, .kind = PHASE_GETS, .meth = meth, .load = load,
                       .seconds = o->seconds};
    clients_stats(r, &a);
    cpu_both(r, &cli0, &srv0);
    const int rc = clients_phase(&ph);
    cpu_both(r, &cli1, &srv1);
    clients_stats(r, &b);
    if (rc != ERMA_OK)
        return rc;
    char phase[96];
    snprintf(phase, sizeof phase, "sweep at %.0f GETs/s by %s, %u B values", load,
             method_name(meth), o->value);
    clients_report_failed(r, phase);
    if (b.failovers != a.failovers)
        bench_note(false, "kvcs: %s: %llu GET tries moved on from a failed replica, %llu passed "
                   "one marked down", phase, (unsigned long long)(b.failovers - a.failovers),
                   (unsigned long long)(b.skipped - a.skipped));
    memset(l, 0, sizeof *l);
    if (r->nlat)
        bench_lat_from_ns(r->lat, r->nlat, l);
    *rate = (double)r->nlat / o->seconds;
    const double gets = r->nlat ? (double)r->nlat : 1;
    bench_table_row(t, "kvcs,sweep,%s,%u,%.0f,%.0f,%.1f,%.1f,%.1f,%llu,%llu,%llu,%llu,%.2f,%.2f",
                    method_name(meth), o->value, load, *rate, l->median_us, l->p99_us,
                    l->p999_us, (unsigned long long)(r->failed + r->started - r->done),
                    (unsigned long long)r->wrong, (unsigned long long)(b.hedges - a.hedges),
                    (unsigned long long)(b.one_read - a.one_read), (cli1 - cli0) / gets,
                    (srv1 - srv0) / gets);
    return r->wrong ? ERMA_EBADPKT : ERMA_OK;
}

/* Per load, over rounds: [0] READ, [1] RPC achieved; READ / RPC p50, p99. */
struct sweep_sums {
    double rate[2][MAX_ROUNDS], p50[MAX_ROUNDS], p99[MAX_ROUNDS];
};

static void sweep_summary(const struct run *r, const double *loads, unsigned nloads,
                          struct sweep_sums *sum)
{
    const struct opts *o = r->o;
    struct bench_table t;
    bench_table_start(&t, false, "bench,kind,value,offered,read_achieved,rpc_achieved,"
                                 "read_rpc_p50:12,read_rpc_p99:12,rounds");
    for (unsigned i = 0; i < nloads; i++) {
        struct sweep_sums *m = &sum[i];
        char list[MAX_ROUNDS * 8] = "";
        for (unsigned k = 0; k < o->rounds; k++)
            snprintf(list + strlen(list), sizeof list - strlen(list), " %.3f", m->p50[k]);
        bench_note(false, "kvcs: %.0f GETs/s, %u B: READ / RPC p50 per round:%s", loads[i],
                   o->value, list);
        const double read = bench_median(m->rate[0], o->rounds);
        const double rpc = bench_median(m->rate[1], o->rounds);
        bench_table_row(&t, "kvcs,summary,%u,%.0f,%.0f,%.0f,%.3f,%.3f,%u", o->value, loads[i],
                        read, rpc, bench_median(m->p50, o->rounds),
                        bench_median(m->p99, o->rounds), o->rounds);
    }
}

static int sweep(struct run *r, const struct bench_table *t)
{
    const struct opts *o = r->o;
    char list[512];
    double loads[MAX_LOADS];
    unsigned nloads = 0;
    snprintf(list, sizeof list, "%s", o->closed ? "0" : o->loads);
    for (char *save, *tok = strtok_r(list, ",", &save); tok && nloads < MAX_LOADS;
         tok = strtok_r(NULL, ",", &save))
        loads[nloads++] = atof(tok);
    struct sweep_sums *sum = calloc(nloads, sizeof *sum);
    if (!sum)
        return ERMA_ENOMEM;
    int rc = ERMA_OK;
    for (unsigned k = 0; k < o->rounds && rc == ERMA_OK; k++)
        for (unsigned i = 0; i < nloads && rc == ERMA_OK; i++) {
            struct bench_lat l[2] = {{0}};
            for (int n = 0; n < 2 && rc == ERMA_OK; n++) {
                const int m = k % 2 ? n : 1 - n; /* READ first in odd rounds (1, 3...) */
                const enum kvcs_method meth = m == 0 ? KVCS_READ : KVCS_RPC;
                if (!o->only || o->only == 1 + (int)meth)
                    rc = sweep_row(r, t, loads[i], meth, &l[m], &sum[i].rate[m][k]);
            }
            sum[i].p50[k] = l[1].median_us > 0 ? l[0].median_us / l[1].median_us : 0;
            sum[i].p99[k] = l[1].p99_us > 0 ? l[0].p99_us / l[1].p99_us : 0;
        }
    if (rc == ERMA_OK && !t->csv && !o->only)
        sweep_summary(r, loads, nloads, sum);
    free(sum);
    return rc;
}

/* The 10 ms timeline of a failure run (CSV only); returns the median
 * latency before the kill and sets *disrupted_ms. */
static double timeline(struct run *r, bool csv, uint64_t *disrupted_ms)
{
    const struct opts *o = r->o;
    const uint64_t kill_bin = (uint64_t)(o->kill_at * 1e9) / BIN_NS;
    const uint64_t nbins = (uint64_t)(o->seconds * 1e9) / BIN_NS;
    struct bench_table t;
    if (csv)
        bench_table_start(&t, true, "bench,kind,method,value,t_ms,ops,p50_us,p99_us,max_us,failed");
    double before = 0;
    uint64_t last_bad = kill_bin;
    uint64_t *pre = malloc((r->nlat + 1) * sizeof *pre), npre = 0;
    for (uint64_t b = 0; b < nbins && b < MAX_BINS; b++) {
        struct bench_lat l = {0};
        double max = 0;
        if (r->bin_n[b]) {
            if (b < kill_bin && pre)
                for (uint32_t i = 0; i < r->bin_n[b]; i++)
                    pre[npre++] = r->bin_lat[b][i];
            bench_lat_from_ns(r->bin_lat[b], r->bin_n[b], &l);
            max = (double)r->bin_lat[b][r->bin_n[b] - 1] / 1e3;
        }
        if (b == kill_bin && npre) {
            struct bench_lat pl;
            bench_lat_from_ns(pre, npre, &pl);
            before = pl.median_us;
        }
        if (b >= kill_bin && (r->bin_failed[b] || max >= o->slow_ms * 1e3))
            last_bad = b + 1;
        if (csv)
            bench_table_row(&t, "kvcs,timeline,%s,%u,%llu,%u,%.1f,%.1f,%.1f,%u",
                            method_name(o->method), o->value, (unsigned long long)(b * 10),
                            r->bin_n[b], l.median_us, l.p99_us, max, r->bin_failed[b]);
    }
    free(pre);
    *disrupted_ms = (last_bad - kill_bin) * 10;
    return before;
}

static int failure(struct run *r, pid_t victim, bool csv)
{
    const struct opts *o = r->o;
    struct phase ph = {.runs = r, .kind = PHASE_GETS, .meth = o->method, .load = o->load,
                       .seconds = o->seconds, .kill_at = o->kill_at, .victim = victim,
                       .timeline = true};
    const int rc = clients_phase(&ph);
    if (rc != ERMA_OK)
        return rc;
    char phase[96];
    snprintf(phase, sizeof phase, "failure run by %s at %.0f GETs/s, %u B values",
             method_name(o->method), o->load, o->value);
    clients_report_failed(r, phase);
    uint64_t disrupted;
    const double before = timeline(r, csv, &disrupted);
    struct bench_table t;
    bench_table_start(&t, csv, "bench,kind,method,value,load,kill_ms,pre_kill_p50_us:15,"
                               "disrupted_ms:12,failed,wrong");
    bench_table_row(&t, "kvcs,failure,%s,%u,%.0f,%.0f,%.1f,%llu,%llu,%llu", method_name(o->method),
                    o->value, o->load, o->kill_at * 1e3, before, (unsigned long long)disrupted,
                    (unsigned long long)(r->failed + r->started - r->done),
                    (unsigned long long)r->wrong);
    return r->wrong ? ERMA_EBADPKT : ERMA_OK;
}

static void parse(struct bench_cli *cli, struct opts *o, int argc, char **argv)
{
    static const struct option lo[] = {
        BENCH_COMMON_OPTIONS,
        {"servers", 1, 0, 's'},   {"replicas", 1, 0, 'r'},     {"keys", 1, 0, 'k'},
        {"value", 1, 0, 'v'},     {"loads", 1, 0, 'l'},        {"seconds", 1, 0, 't'},
        {"base-port", 1, 0, 'p'}, {"kill-at", 1, 0, 'K'},      {"method", 1, 0, 'm'},
        {"load", 1, 0, 'L'},      {"idle-wait-us", 1, 0, 'i'}, {"attempt-ms", 1, 0, 'a'},
        {"role", 1, 0, 'R'},      {"server", 1, 0, 'S'},       {"uri", 1, 0, 'u'},
        {"slow-ms", 1, 0, 'w'},   {"rounds", 1, 0, 'n'},       {"psk", 0, 0, 'P'},
        {"no-loc-cache", 0, 0, 'C'}, {"closed", 0, 0, 'c'},
        {"no-hedge", 0, 0, 'H'}, {"only", 1, 0, 'O'}, {"server-threads", 1, 0, 'T'},
        {"client-threads", 1, 0, 'N'}, {0, 0, 0, 0}};
    bench_cli_init(cli, "kvcs", usage, lo);
    for (int c; (c = bench_cli_next(cli, argc, argv)) != -1;) {
        switch (c) {
        case 's': o->servers = (unsigned)bench_cli_u64(cli, optarg); break;
        case 'r': o->replicas = (unsigned)bench_cli_u64(cli, optarg); break;
        case 'k': o->keys = (unsigned)bench_cli_u64(cli, optarg); break;
        case 'v': cli->sizes[0] = bench_cli_size(cli, optarg); cli->nsizes = 1; break;
        case 'l': o->loads = optarg; break;
        case 't': o->seconds = bench_cli_real(cli, optarg); break;
        case 'p': o->base_port = (int)bench_cli_u64(cli, optarg); break;
        case 'K': o->kill_at = bench_cli_real(cli, optarg); break;
        case 'm':
            if (strcmp(optarg, "rpc") && strcmp(optarg, "read"))
                bench_cli_fail(cli, "unknown method '%s'", optarg);
            o->method = strcmp(optarg, "rpc") == 0 ? KVCS_RPC : KVCS_READ;
            break;
        case 'L': o->load = bench_cli_real(cli, optarg); break;
        case 'i': o->idle_wait_us = bench_cli_real(cli, optarg); break;
        case 'a': o->attempt_ms = bench_cli_real(cli, optarg); break;
        case 'R': o->role = optarg; break;
        case 'S': o->server_list = optarg; break;
        case 'u': o->uri = optarg; break;
        case 'w': o->slow_ms = bench_cli_real(cli, optarg); break;
        case 'n': o->rounds = (unsigned)bench_cli_u64(cli, optarg); break;
        case 'P': o->psk = true; break;
        case 'C': o->no_loc_cache = true; break;
        case 'c': o->closed = true; break;
        case 'H': o->no_hedge = true; break;
        case 'T': o->server_threads = (unsigned)bench_cli_u64(cli, optarg); break;
        case 'N': o->client_threads = bench_cli_threads(cli, "--client-threads", optarg); break;
        case 'O':
            if (strcmp(optarg, "rpc") && strcmp(optarg, "read"))
                bench_cli_fail(cli, "unknown method '%s'", optarg);
            o->only = 1 + (strcmp(optarg, "rpc") == 0 ? KVCS_RPC : KVCS_READ);
            break;
        default: bench_cli_fail(cli, NULL);
        }
    }
}

static void check(const struct bench_cli *cli, const struct opts *o)
{
    if (strcmp(o->role, "both") && strcmp(o->role, "server") && strcmp(o->role, "client"))
        bench_cli_fail(cli, "unknown role '%s'", o->role);
    if (strcmp(o->role, "both") && !o->server_list)
        bench_cli_fail(cli, "--role %s needs --server", o->role);
    if (strcmp(o->role, "client") == 0 && o->kill_at > 0)
        bench_cli_fail(cli, "--kill-at kills a server this program forked: not with --role client");
    if (o->servers < 1 || o->servers > MAX_SERVERS || o->keys < 1 || o->keys > 10000000 ||
        o->seconds <= 0 || o->seconds > 600 || o->attempt_ms <= 0 || o->slow_ms <= 0 ||
        o->rounds < 1 || o->rounds > MAX_ROUNDS || o->server_threads < 1 ||
        o->server_threads > KVCS_MAX_THREADS)
        bench_cli_fail(cli, "--servers (1..8), --keys, --seconds (up to 600), --attempt-ms, "
                            "--slow-ms, --rounds (1..%d) or --server-threads (1..%d) out of "
                            "range", MAX_ROUNDS, KVCS_MAX_THREADS);
    if (cli->ncpus && cli->ncpus < o->client_threads)
        bench_cli_fail(cli, "--cpu: %u CPUs for %u client threads", cli->ncpus,
                       o->client_threads);
    char uri[128];
    if (o->uri && !clients_uri(o->uri, o->client_threads - 1, uri, sizeof uri))
        bench_cli_fail(cli, "--uri %s: no port for client thread %u", o->uri,
                       o->client_threads - 1);
    if (o->kill_at > 0 && (o->kill_at >= o->seconds || o->load <= 0))
        bench_cli_fail(cli, "--kill-at must come before --seconds end, with --load above 0");
    for (unsigned i = 0; i < cli->nsizes; i++)
        if (cli->sizes[i] < 1 || cli->sizes[i] > 4096)
            bench_cli_fail(cli, "value size %u: 1..4096 B", cli->sizes[i]);
}

/* Loads the keys at each value size, then sweeps or runs the failure
 * (r: runs[0]). */
static int run_sizes(struct run *r, struct opts *o, const struct bench_cli *cli, pid_t victim)
{
    struct bench_table t;
    if (o->kill_at <= 0)
        bench_table_start(&t, cli->csv, "bench,kind,method,value,offered,achieved,p50_us,"
                                        "p99_us,p999_us,failed,wrong,hedged,one_read,"
                                        "cli_cpu_us,srv_cpu_us");
    int rc = ERMA_OK;
    for (unsigned i = 0; i < cli->nsizes && rc == ERMA_OK; i++) {
        o->value = cli->sizes[i];
        if ((rc = clients_load_keys(r)) != ERMA_OK)
            break;
        struct phase warm = {.runs = r, .kind = PHASE_WARM};
        if (!o->no_loc_cache && (rc = clients_phase(&warm)) != ERMA_OK)
            break;
        rc = o->kill_at > 0 ? failure(r, victim, cli->csv) : sweep(r, &t);
    }
    return rc;
}

int main(int argc, char **argv)
{
    struct opts o = {.servers = 3, .replicas = 3, .keys = 10000, .seconds = 2,
                     .server_threads = 1, .client_threads = 1,
                     .loads = "5000,20000,50000,100000", .base_port = 42100, .load = 10000,
                     .idle_wait_us = 20, .attempt_ms = 100, .slow_ms = 10, .rounds = 1,
                     .role = "both",
                     .method = KVCS_READ};
    struct bench_cli cli;
    parse(&cli, &o, argc, argv);
    check(&cli, &o);
    if (cli.nsizes == 0)
        cli.sizes[cli.nsizes++] = 64;
    const uint64_t idle_ns = (uint64_t)(o.idle_wait_us * 1000), log = log_bytes_for(&o, &cli);
    static const uint8_t key[ERMA_PSK_BYTES] = "kvcs bench key: known to all!!";
    const uint8_t *psk = o.psk ? key : NULL;
    if (strcmp(o.role, "server") == 0) {
        bench_pin(bench_cli_cpu(&cli, 0));
        return server_run(o.server_list, idle_ns, log, psk, o.server_threads, true);
    }
    char uris[MAX_SERVERS][128], list[1024], me[64];
    const char *srv[MAX_SERVERS];
    pid_t pids[MAX_SERVERS] = {0};
    const unsigned nc = o.client_threads;
    if (strcmp(o.role, "client") == 0) {
        snprintf(list, sizeof list, "%s", o.server_list);
        o.servers = 0;
        for (char *save, *tok = strtok_r(list, ",", &save); tok && o.servers < MAX_SERVERS;
             tok = strtok_r(NULL, ",", &save))
            srv[o.servers++] = tok;
    } else {
        /* forked before this process is pinned: an unpinned one may run anywhere */
        for (unsigned i = 0; i < o.servers; i++) {
            snprintf(uris[i], sizeof uris[i], "udp://127.0.0.1:%d", o.base_port + (int)(i * 8));
            srv[i] = uris[i];
            const int cpu = cli.ncpus > nc ? cli.cpus[nc + i % (cli.ncpus - nc)] : -1;
            pids[i] = server_fork(uris[i], idle_ns, log, psk, o.server_threads,
                                  o.server_threads > 1 ? -1 : cpu);
        }
    }
    bench_pin(bench_cli_cpu(&cli, 0)); /* loading, on client thread 0's CPU */
    snprintf(me, sizeof me, "udp://127.0.0.1:%d", o.base_port + (int)(o.servers * 8));
    const struct kvcs_client_cfg cc = {
        .uri = o.uri ? o.uri : me, .servers = srv, .nservers = o.servers,
        .replicas = o.replicas, .max_ops = 1024,
        .attempt_timeout_ns = (uint64_t)(o.attempt_ms * 1e6), .cc_off = true,
        .psk = psk, .no_loc_cache = o.no_loc_cache, .no_hedge = o.no_hedge,
        .server_threads = o.server_threads};
    bench_note(cli.csv, "kvcs: %u servers (%s, ...), %u replicas, %u keys; servers sleep once "
               "idle %.0f us, %u client thread%s poll%s", o.servers, srv[0], o.replicas, o.keys,
               o.idle_wait_us, nc, nc > 1 ? "s" : "", nc > 1 ? "" : "s");
    for (unsigned t = 0; t < nc; t++)
        o.client_cpu[t] = cli.ncpus ? cli.cpus[t] : -1;
    struct run *runs = clients_new(&o, cc.uri, pids);
    int rc = runs ? ERMA_OK : ERMA_ENOMEM;
    struct phase connect = {.runs = runs, .kind = PHASE_CONNECT, .cc = &cc};
    if (rc == ERMA_OK && (rc = clients_phase(&connect)) == ERMA_OK)
        rc = run_sizes(runs, &o, &cli, pids[0]);
    if (rc != ERMA_OK && rc != ERMA_EBADPKT)
        fprintf(stderr, "kvcs: ended: %s\n", erma_strerror(rc));
    clients_free(runs, nc);
    for (unsigned i = 0; i < o.servers; i++) {
        if (pids[i] > 0) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
        }
    }
    return rc == ERMA_OK ? 0 : 1;
}
