/*
 * bench/busy_host.c - RPCs on a saturated host, congestion control on
 * against off, in alternating rounds.
 *
 * One server process and --clients client processes on udp loopback, each
 * client one endpoint with one session keeping --window requests in
 * flight, their sizes taken in turn from --sizes (32 B requests are echoes
 * whose round trips are recorded; every other request gets a 32 B
 * response and goes in turn to a handler in the event loop, one on the
 * server's worker thread and one that answers on a later loop pass),
 * beside --hogs processes that spin for the whole round: the host's cores
 * are busy, as a KV or Raft server's are. No process is
 * pinned and no endpoint busy-polls (they sleep when idle, the default).
 * Each round runs both variants, the order swapped every round: "cc" (the
 * default) and "cc_off" (erma_rpc_cfg.cc.off on the clients).
 *
 * Per round and variant: RPCs completed, Gb/s of request bytes, the 32 B
 * round trip's p50 and p99, packets the clients sent, packets sent again,
 * timeouts and the spurious ones (rpc.h, Busy hosts). Then the medians
 * of the per-round ratios cc / cc_off. With ERMA_BENCH_CC=1 each client
 * also prints its session's Timely state (erma_session_cc_stats) at the
 * end. Figures: docs/PERFORMANCE.md.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "erma/clock.h"
#include "erma/errors.h"
#include "erma/rpc.h"
#include "erma/sdk/wire.h"

static const char usage[] =
    "usage: busy_host [--clients N] [--hogs H] [--window W] [--sizes LIST]\n"
    "                 [--rounds R] [--seconds S] [--server URI] [--csv]\n"
    "  RPCs on a saturated host, congestion control on against off\n"
    "  (alternating rounds; see bench/busy_host.c)\n"
    "  --clients N   client processes, each one session (default 4)\n"
    "  --hogs H      processes spinning beside them (default 2: this VM's cores)\n"
    "  --window W    requests in flight per client, 1..8 (default 8)\n"
    "  --sizes LIST  request sizes in turn (default 32,32,32,4K,64K,1M)\n"
    "  --rounds R    rounds, each both variants (default 3)\n"
    "  --seconds S   seconds per variant and round (default 5)\n"
    "  --server URI  the server's address (default udp://127.0.0.1:31880)\n"
    "  --csv         CSV instead of the table\n"
    "  -h, --help    this text\n";

enum { DISPATCH = 1, WORKER, DEFERRED }; /* the server's handlers */

#define MAX_CLIENTS 16
#define MAX_HELD 256
#define MAX_LAT (1u << 20) /* 32 B round trips kept per client */
#define DRAIN_NS 2000000000ull

struct opts {
    struct bench_cli cli;
    unsigned clients, hogs, window, rounds;
    double seconds;
    const char *server;
};

/* What one client process reports (in memory shared with the parent). */
struct result {
    int rc;
    uint64_t done, failed, bytes, sent, resent, timeouts, spurious, nlat;
};

struct shared {
    struct result res[MAX_CLIENTS];
    uint64_t lat[MAX_CLIENTS * MAX_LAT]; /* client k's at k * MAX_LAT */
};

struct call {
    struct erma_msgbuf req, resp;
    uint64_t t0;
    uint32_t size;
    bool busy;
};

struct client {
    const struct opts *o;
    struct erma_rpc *rpc;
    int sess;
    struct call calls[ERMA_SESSION_SLOTS];
    unsigned inflight, next_size, next_type;
    bool measuring;
    struct result *res;
    uint64_t *lat;
};

static struct client *g_client; /* this process's (one client a process) */

static void on_done(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    (void)resp;
    struct call *k = tag;
    struct client *c = g_client;
    k->busy = false;
    c->inflight--;
    if (!c->measuring)
        return;
    if (status != ERMA_OK) {
        c->res->failed++;
        return;
    }
    c->res->done++;
    c->res->bytes += k->size;
    if (k->size <= 32 && c->res->nlat < MAX_LAT)
        c->lat[c->res->nlat++] = erma_now_ns() - k->t0;
}

static void issue(struct client *c)
{
    for (unsigned i = 0; i < c->o->window && c->inflight < c->o->window; i++) {
        struct call *k = &c->calls[i];
        if (k->busy)
            continue;
        const struct bench_cli *cli = &c->o->cli;
        k->size = cli->sizes[c->next_size++ % cli->nsizes];
        const uint32_t resp = 32;
        k->req.size = k->size < 4 ? 4 : k->size;
        memcpy(k->req.data, &resp, 4);
        k->t0 = erma_now_ns();
        const uint8_t type = k->size <= 32 ? DISPATCH : (uint8_t)(DISPATCH + c->next_type++ % 3);
        if (erma_rpc_call(c->rpc, c->sess, type, &k->req, &k->resp, on_done, k) != ERMA_OK)
            return;
        k->busy = true;
        c->inflight++;
    }
}

static bool has_room(void *ctx)
{
    const struct client *c = ctx;
    return c->inflight < c->o->window;
}

static bool drained(void *ctx)
{
    return ((const struct client *)ctx)->inflight == 0;
}

static int client_body(struct client *c, struct erma_endpoint *ep)
{
    uint32_t max = 4;
    for (unsigned i = 0; i < c->o->cli.nsizes; i++)
        max = c->o->cli.sizes[i] > max ? c->o->cli.sizes[i] : max;
    for (unsigned i = 0; i < c->o->window; i++) {
        int rc = erma_msgbuf_alloc(c->rpc, max, &c->calls[i].req);
        if (rc == ERMA_OK)
            rc = erma_msgbuf_alloc(c->rpc, 32, &c->calls[i].resp);
        if (rc != ERMA_OK)
            return rc;
        memset(c->calls[i].req.data, 0x5a, max);
    }
    if ((c->sess = erma_session_create(c->rpc, c->o->server, 0)) < 0)
        return c->sess;
    const uint64_t connect_end = erma_now_ns() + 10000000000ull;
    while (!erma_session_connected(c->rpc, c->sess) && erma_now_ns() < connect_end)
        erma_endpoint_run(ep, 1000000);
    if (!erma_session_connected(c->rpc, c->sess))
        return ERMA_ETIMEDOUT;
    c->measuring = true;
    const uint64_t end = erma_now_ns() + (uint64_t)(c->o->seconds * 1e9);
    while (erma_now_ns() < end) {
        issue(c);
        erma_endpoint_run_until(ep, has_room, c, 1000000);
    }
    c->measuring = false;
    erma_endpoint_run_until(ep, drained, c, DRAIN_NS);
    struct erma_rpc_stats st;
    erma_rpc_get_stats(c->rpc, &st);
    struct erma_endpoint_stats es;
    erma_endpoint_get_stats(ep, &es);
    c->res->sent = es.tx_pkts;
    c->res->resent = st.retransmitted_pkts;
    c->res->timeouts = st.retransmits;
    c->res->spurious = st.spurious_timeouts;
    struct erma_session_cc cc;
    if (getenv("ERMA_BENCH_CC") && erma_session_cc_stats(c->rpc, c->sess, &cc) == ERMA_OK)
        fprintf(stderr, "# client %d: rate %.3f Gb/s, avg RTT %.1f us, last %.1f us, min %.1f us, "
                        "%llu samples (%llu left out: busy), %llu paced, %llu direct\n",
                (int)getpid(),
                cc.rate_bps / 1e9, cc.avg_rtt_ns / 1e3, cc.last_rtt_ns / 1e3, cc.min_rtt_ns / 1e3,
                (unsigned long long)cc.rtt_samples, (unsigned long long)cc.busy_samples,
                (unsigned long long)cc.paced_pkts,
                (unsigned long long)cc.direct_pkts);
    return ERMA_OK;
}

/* One client process: its figures go to res and lat. */
static int client_run(const struct opts *o, bool cc_off, struct result *res, uint64_t *lat)
{
    struct client c = {.o = o, .res = res, .lat = lat};
    struct erma_nexus *nx = NULL;
    struct erma_endpoint *ep = NULL;
    struct erma_rpc_cfg cfg = {0};
    cfg.cc.off = cc_off;
    int rc = erma_nexus_create(NULL, &nx);
    if (rc == ERMA_OK)
        rc = erma_endpoint_create("udp://127.0.0.1:0", 0, NULL, &ep);
    if (rc == ERMA_OK)
        rc = erma_rpc_create(nx, ep, &cfg, &c.rpc);
    if (rc == ERMA_OK) {
        g_client = &c;
        rc = client_body(&c, ep);
        for (unsigned i = 0; i < o->window; i++) {
            erma_msgbuf_free(c.rpc, &c.calls[i].req);
            erma_msgbuf_free(c.rpc, &c.calls[i].resp);
        }
    }
    erma_rpc_destroy(c.rpc);
    erma_endpoint_destroy(ep);
    erma_nexus_destroy(nx);
    return rc;
}

/* ---- the server: the three handlers, each answering 32 B ---- */

struct server {
    struct erma_req *held[MAX_HELD];
    unsigned nheld;
};

static void answer(struct erma_req *req)
{
    struct erma_msgbuf *resp = erma_req_resp_buf(req);
    erma_msgbuf_resize(resp, 32);
    memset(resp->data, 0xa5, 32);
    erma_req_respond(req, resp);
}

static void on_now(struct erma_req *req, void *ctx)
{
    (void)ctx;
    answer(req);
}

static void on_later(struct erma_req *req, void *ctx)
{
    struct server *sv = ctx;
    if (sv->nheld == MAX_HELD)
        answer(req);
    else
        sv->held[sv->nheld++] = req; /* answered after this loop pass */
}

static bool has_held(void *ctx)
{
    return ((const struct server *)ctx)->nheld > 0;
}

static int serve(const char *uri, uint64_t max_ns)
{
    static struct server sv;
    const struct erma_nexus_cfg ncfg = {.workers = 1};
    struct erma_nexus *nx = NULL;
    struct erma_endpoint *ep = NULL;
    struct erma_rpc *rpc = NULL;
    int rc = erma_nexus_create(&ncfg, &nx);
    if (rc == ERMA_OK)
        rc = erma_handler_register(nx, DISPATCH, on_now, ERMA_DISPATCH, NULL);
    if (rc == ERMA_OK)
        rc = erma_handler_register(nx, WORKER, on_now, ERMA_WORKER, NULL);
    if (rc == ERMA_OK)
        rc = erma_handler_register(nx, DEFERRED, on_later, ERMA_DISPATCH, &sv);
    if (rc == ERMA_OK)
        rc = erma_endpoint_create(uri, 0, NULL, &ep);
    if (rc == ERMA_OK)
        rc = erma_rpc_create(nx, ep, NULL, &rpc);
    const uint64_t end = erma_now_ns() + max_ns;
    while (rc == ERMA_OK && erma_now_ns() < end && getppid() != 1) {
        erma_endpoint_run_until(ep, has_held, &sv, 10000000);
        for (unsigned i = 0; i < sv.nheld; i++)
            answer(sv.held[i]);
        sv.nheld = 0;
    }
    if (rc != ERMA_OK)
        fprintf(stderr, "busy_host: server: %s\n", erma_strerror(rc));
    erma_rpc_destroy(rpc);
    erma_endpoint_destroy(ep);
    erma_nexus_destroy(nx);
    return rc;
}

static pid_t start_server(const char *uri, uint64_t max_ns)
{
    const pid_t pid = fork();
    if (pid == 0)
        _exit(serve(uri, max_ns) == ERMA_OK ? 0 : 1);
    return pid;
}

static pid_t start_hog(void)
{
    const pid_t pid = fork();
    if (pid == 0) {
        for (volatile uint64_t x = 0;; x++)
            ;
    }
    return pid;
}

static void stop(pid_t pid)
{
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
}

static int cmp_u64(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* One variant for o->seconds: the sums of the clients' results in *sum,
 * the 32 B round trips' p50 and p99 in us. */
static int run_variant(const struct opts *o, struct shared *sh, bool cc_off, struct result *sum,
                       double *p50, double *p99)
{
    memset(sh->res, 0, sizeof sh->res);
    const uint64_t max_ns = (uint64_t)(o->seconds * 1e9) + 30000000000ull;
    const pid_t server = start_server(o->server, max_ns);
    pid_t hogs[16], kids[MAX_CLIENTS];
    for (unsigned h = 0; h < o->hogs; h++)
        hogs[h] = start_hog();
    usleep(200000);
    for (unsigned k = 0; k < o->clients; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            sh->res[k].rc = client_run(o, cc_off, &sh->res[k], sh->lat + (size_t)k * MAX_LAT);
            _exit(0);
        }
    }
    for (unsigned k = 0; k < o->clients; k++)
        waitpid(kids[k], NULL, 0);
    for (unsigned h = 0; h < o->hogs; h++)
        stop(hogs[h]);
    stop(server);
    memset(sum, 0, sizeof *sum);
    uint64_t n = 0;
    for (unsigned k = 0; k < o->clients; k++) {
        const struct result *r = &sh->res[k];
        if (r->rc != ERMA_OK) {
            fprintf(stderr, "busy_host: client %u: %s\n", k, erma_strerror(r->rc));
            sum->rc = r->rc;
        }
        sum->done += r->done;
        sum->failed += r->failed;
        sum->bytes += r->bytes;
        sum->sent += r->sent;
        sum->resent += r->resent;
        sum->timeouts += r->timeouts;
        sum->spurious += r->spurious;
        /* packed to the front: n <= k * MAX_LAT, so nothing unread is overwritten */
        memmove(sh->lat + n, sh->lat + (size_t)k * MAX_LAT, r->nlat * sizeof(uint64_t));
        n += r->nlat;
    }
    qsort(sh->lat, n, sizeof(uint64_t), cmp_u64);
    *p50 = n ? sh->lat[n / 2] / 1e3 : 0;
    *p99 = n ? sh->lat[n * 99 / 100] / 1e3 : 0;
    return sum->rc;
}

static void parse(struct opts *o, int argc, char **argv)
{
    static const struct option lo[] = {
        BENCH_COMMON_OPTIONS,     {"clients", 1, 0, 'c'}, {"hogs", 1, 0, 'H'},
        {"window", 1, 0, 'w'},    {"rounds", 1, 0, 'r'},  {"seconds", 1, 0, 't'},
        {"server", 1, 0, 's'},    {0, 0, 0, 0}};
    bench_cli_init(&o->cli, "busy_host", usage, lo);
    for (int c; (c = bench_cli_next(&o->cli, argc, argv)) != -1;) {
        switch (c) {
        case 'c': o->clients = (unsigned)bench_cli_u64(&o->cli, optarg); break;
        case 'H': o->hogs = (unsigned)bench_cli_u64(&o->cli, optarg); break;
        case 'w': o->window = (unsigned)bench_cli_u64(&o->cli, optarg); break;
        case 'r': o->rounds = (unsigned)bench_cli_u64(&o->cli, optarg); break;
        case 't': o->seconds = bench_cli_real(&o->cli, optarg); break;
        case 's': o->server = optarg; break;
        default: bench_cli_fail(&o->cli, NULL);
        }
    }
    if (o->clients == 0 || o->clients > MAX_CLIENTS || o->hogs > 16 || o->window == 0 ||
        o->window > ERMA_SESSION_SLOTS || o->rounds == 0 || o->rounds > 50 || o->seconds <= 0)
        bench_cli_fail(&o->cli, "--clients 1..%d, --hogs 0..16, --window 1..%d, --rounds 1..50, "
                                "--seconds above 0", MAX_CLIENTS, ERMA_SESSION_SLOTS);
    if (o->cli.nsizes == 0) {
        const uint32_t d[] = {32, 32, 32, 4096, 65536, 1 << 20};
        memcpy(o->cli.sizes, d, sizeof d);
        o->cli.nsizes = 6;
    }
    for (unsigned i = 0; i < o->cli.nsizes; i++)
        if (o->cli.sizes[i] > ERMA_MAX_MSG_SIZE)
            bench_cli_fail(&o->cli, "size %u is above the 8 MiB message limit", o->cli.sizes[i]);
}

int main(int argc, char **argv)
{
    struct opts o = {.clients = 4, .hogs = 2, .window = 8, .rounds = 3, .seconds = 5,
                     .server = "udp://127.0.0.1:31880"};
    parse(&o, argc, argv);
    struct shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                             -1, 0);
    if (sh == MAP_FAILED) {
        fprintf(stderr, "busy_host: mmap: %s\n", strerror(errno));
        return 1;
    }
    struct bench_table t;
    bench_table_start(&t, o.cli.csv,
                      "round,variant:7,rpcs,failed,gbps,p50_us,p99_us,pkts_sent,pkts_resent,"
                      "timeouts,spurious");
    double r_rpcs[50], r_p99[50], r_resent[2][50];
    int rc = ERMA_OK;
    for (unsigned r = 0; r < o.rounds && rc == ERMA_OK; r++) {
        struct result sum[2];
        double p50[2], p99[2];
        for (unsigned k = 0; k < 2 && rc == ERMA_OK; k++) {
            const unsigned v = (r + k) % 2; /* 0 cc, 1 cc_off; the order swaps each round */
            rc = run_variant(&o, sh, v == 1, &sum[v], &p50[v], &p99[v]);
        }
        if (rc != ERMA_OK)
            break;
        for (unsigned v = 0; v < 2; v++) {
            bench_table_row(&t, "%u,%s,%llu,%llu,%.3f,%.1f,%.1f,%llu,%llu,%llu,%llu", r,
                            v ? "cc_off" : "cc", (unsigned long long)sum[v].done,
                            (unsigned long long)sum[v].failed,
                            sum[v].bytes * 8 / o.seconds / 1e9, p50[v], p99[v],
                            (unsigned long long)sum[v].sent, (unsigned long long)sum[v].resent,
                            (unsigned long long)sum[v].timeouts,
                            (unsigned long long)sum[v].spurious);
            r_resent[v][r] = sum[v].sent ? 100.0 * sum[v].resent / sum[v].sent : 0;
        }
        r_rpcs[r] = sum[1].done ? (double)sum[0].done / sum[1].done : 0;
        r_p99[r] = p99[1] > 0 ? p99[0] / p99[1] : 0;
    }
    if (rc == ERMA_OK) {
        bench_note(o.cli.csv, "cc / cc_off, medians of the per-round ratios: RPCs %.3f, "
                              "32 B p99 %.3f; packets sent again, %% of sent (median): cc %.3f, "
                              "cc_off %.3f",
                   bench_median(r_rpcs, o.rounds), bench_median(r_p99, o.rounds),
                   bench_median(r_resent[0], o.rounds), bench_median(r_resent[1], o.rounds));
    }
    munmap(sh, sizeof *sh);
    return rc == ERMA_OK ? 0 : 1;
}
