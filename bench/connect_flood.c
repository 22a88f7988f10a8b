/*
 * connect_flood - an erma server under a flood of connect requests from
 * other sources, beside its real clients, in one run.
 *
 *   connect_flood [--rate N] [--sources K] [--rounds R] [--seconds S]
 *                 [--server URI] [--uri URI] [--cpu LIST] [--csv]
 *
 * A forked server (default settings: cookies, 64 sessions per address)
 * serves echo RPCs. A forked flooder sends --rate connect requests per
 * second (default 10000) from --sources UDP sockets (default 256, each its
 * own source address), with fresh tokens, and never answers the cookies:
 * the traffic of spoofed sources. Here one client keeps 32 B RPCs going
 * on an established session (busy-polling, the measurement condition) and
 * every 100 ms a new session connects from this endpoint, timed from
 * erma_session_create() to ERMA_SM_CONNECTED. Rounds of --seconds (1)
 * alternate without and with the flood, --rounds in all (6).
 *
 * Output per round: the flood's rate, connect time (median and max), RPC
 * latency p50/p99; then the medians of the quiet and the flooded rounds
 * and their ratios. Exits 1 when a connect or an RPC failed.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "erma/clock.h"
#include "erma/endpoint.h"
#include "erma/errors.h"
#include "erma/rpc.h"
#include "erma/sdk/wire.h"

#define SM_CONNECT_REQ 1
#define SM_LEN (ERMA_HDR_SIZE + 70) /* docs/PROTOCOL.md, session management */
#define CONNECT_EVERY_NS 100000000ull

static const char usage[] =
    "usage: connect_flood [options]\n"
    "  a server under a connect flood from other sources, beside its clients\n"
    "  --rate N        connect requests per second in the flood (default 10000)\n"
    "  --sources K     source addresses of the flood (default 256)\n"
    "  --rounds R      rounds, quiet and flooded in turn (default 6)\n"
    "  --seconds S     seconds per round (default 1)\n"
    "  --server URI    the server (default udp://127.0.0.1:42400)\n"
    "  --uri URI       this client (default udp://127.0.0.1:42410)\n"
    "  --cpu LIST      CPUs: this process, the server, the flooder (default: none)\n"
    "  --csv           CSV instead of the table\n"
    "  -h, --help      this text\n";

struct opts {
    const char *server, *uri;
    double rate, seconds;
    unsigned sources, rounds;
};

struct round {
    double flood_rate, connect_med_ms, connect_max_ms, p50_us, p99_us;
    unsigned connects, failed;
};

static void parse(struct bench_cli *cli, struct opts *o, int argc, char **argv)
{
    static const struct option lo[] = {BENCH_COMMON_OPTIONS,
                                        {"rate", 1, 0, 'r'},   {"sources", 1, 0, 'k'},
                                        {"rounds", 1, 0, 'n'}, {"seconds", 1, 0, 't'},
                                        {"server", 1, 0, 's'}, {"uri", 1, 0, 'u'},
                                        {0, 0, 0, 0}};
    bench_cli_init(cli, "connect_flood", usage, lo);
    for (int c; (c = bench_cli_next(cli, argc, argv)) != -1;) {
        switch (c) {
        case 'r': o->rate = bench_cli_real(cli, optarg); break;
        case 'k': o->sources = (unsigned)bench_cli_u64(cli, optarg); break;
        case 'n': o->rounds = (unsigned)bench_cli_u64(cli, optarg); break;
        case 't': o->seconds = bench_cli_real(cli, optarg); break;
        case 's': o->server = optarg; break;
        case 'u': o->uri = optarg; break;
        default: bench_cli_fail(cli, NULL);
        }
    }
    if (cli->nsizes)
        bench_cli_fail(cli, "the RPCs are 32 B: no --size or --sizes");
    if (o->rate <= 0 || o->sources == 0 || o->sources > 4096 || o->rounds < 2 ||
        o->seconds <= 0)
        bench_cli_fail(cli, "--rate, --seconds > 0; --sources 1..4096; --rounds >= 2");
}

/* ---- the flooder ---- */

static void connect_req(uint8_t *p, uint64_t token)
{
    memset(p, 0, SM_LEN);
    const struct erma_hdr h = {.req_type = SM_CONNECT_REQ, .dest_session = 0xffff,
                               .proto = ERMA_PROTO_SM};
    erma_hdr_encode(&h, p);
    erma_put_le(p + ERMA_HDR_SIZE, token, 8);
    erma_put_le(p + ERMA_HDR_SIZE + 12, 32, 4); /* credits */
}

static int server_sockaddr(const char *uri, struct sockaddr_in *sa)
{
    char host[64];
    unsigned port;
    if (sscanf(uri, "udp://%63[^:]:%u", host, &port) != 2 || port > 65535)
        return ERMA_EADDR;
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? ERMA_OK : ERMA_EADDR;
}

/* Sends rate connect requests per second round-robin from `sources`
 * sockets until killed; writes how many it has sent to fd every 100 ms. */
static void flood_main(const struct opts *o, int cpu, int fd)
{
    bench_pin(cpu);
    struct sockaddr_in dst;
    if (server_sockaddr(o->server, &dst) != ERMA_OK)
        _exit(2);
    int *socks = calloc(o->sources, sizeof *socks);
    for (unsigned i = 0; socks && i < o->sources; i++) {
        struct sockaddr_in me = {.sin_family = AF_INET, .sin_addr.s_addr = dst.sin_addr.s_addr};
        socks[i] = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
        if (socks[i] < 0 || bind(socks[i], (struct sockaddr *)&me, sizeof me) != 0)
            _exit(2);
    }
    uint8_t pkt[SM_LEN];
    uint64_t token = (uint64_t)getpid() << 32, sent = 0;
    const uint64_t start = erma_now_ns(), step = 1000000; /* a batch per ms */
    for (uint64_t tick = 1;; tick++) {
        const uint64_t due = (uint64_t)(o->rate * (double)tick / 1000.0);
        for (; sent < due; sent++) {
            connect_req(pkt, ++token | 1);
            sendto(socks[sent % o->sources], pkt, SM_LEN, 0, (struct sockaddr *)&dst,
                   sizeof dst);
        }
        if (tick % 100 == 0 && write(fd, &sent, sizeof sent) < 0)
            _exit(0);
        while (erma_now_ns() < start + tick * step)
            nanosleep(&(struct timespec){0, 100000}, NULL);
    }
}

/* ---- the client ---- */

struct client {
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    struct erma_rpc *rpc;
    int sess;
    uint64_t connect_start, connect_ns[64];
    unsigned connects, failed;
    int fresh, prev; /* the session connecting, the last one connected */
    bool done;
    struct erma_msgbuf req, resp;
};

static void on_sm(struct erma_rpc *rpc, int session, enum erma_sm_event ev, int err, void *ctx)
{
    (void)rpc;
    (void)err;
    struct client *c = ctx;
    if (session != c->fresh || session == c->sess)
        return;
    if (ev == ERMA_SM_CONNECTED && c->connects < 64)
        c->connect_ns[c->connects++] = erma_now_ns() - c->connect_start;
    if (ev == ERMA_SM_CONNECTED)
        c->prev = session;
    else if (ev == ERMA_SM_CONNECT_FAILED)
        c->failed++;
    if (ev == ERMA_SM_CONNECTED || ev == ERMA_SM_CONNECT_FAILED)
        c->fresh = -1;
}

static void on_rpc(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    (void)resp;
    struct client *c = tag;
    c->done = true;
    if (status != ERMA_OK)
        c->failed++;
}

static bool connected(void *ctx)
{
    const struct client *c = ctx;
    return erma_session_connected(c->rpc, c->sess);
}

static int client_up(struct client *c, const struct opts *o)
{
    const struct erma_endpoint_cfg ecfg = {.busy_poll = true};
    const struct erma_rpc_cfg cfg = {.sm_handler = on_sm, .sm_ctx = c};
    int rc = erma_nexus_create(NULL, &c->nx);
    if (rc == ERMA_OK)
        rc = erma_endpoint_create(o->uri, 0, &ecfg, &c->ep);
    if (rc == ERMA_OK)
        rc = erma_rpc_create(c->nx, c->ep, &cfg, &c->rpc);
    if (rc != ERMA_OK)
        return rc;
    c->fresh = c->prev = -1;
    c->sess = erma_session_create(c->rpc, o->server, 0);
    if (c->sess < 0)
        return c->sess;
    erma_msgbuf_alloc(c->rpc, 32, &c->req);
    erma_msgbuf_alloc(c->rpc, 64, &c->resp);
    memset(c->req.data, 0, 32);
    c->req.data[0] = 32; /* the bench server answers as many bytes as the first word asks */
    return erma_endpoint_run_until(c->ep, connected, c, 5000000000ull);
}

/* Starts a new session every 100 ms (the last one disconnected). */
static void maybe_connect(struct client *c, const struct opts *o, uint64_t now, uint64_t *next)
{
    if (now < *next || c->fresh >= 0)
        return;
    if (c->prev >= 0)
        erma_session_destroy(c->rpc, c->prev);
    c->prev = -1;
    c->connect_start = now;
    c->fresh = erma_session_create(c->rpc, o->server, 0);
    if (c->fresh < 0)
        c->failed++;
    *next = now + CONNECT_EVERY_NS;
}

static void run_round(struct client *c, const struct opts *o, struct round *r)
{
    const size_t max = 2000000;
    uint64_t *lat = malloc(max * sizeof *lat), n = 0, next = 0;
    c->connects = c->failed = 0;
    const uint64_t end = erma_now_ns() + (uint64_t)(o->seconds * 1e9);
    while (erma_now_ns() < end && lat) {
        c->done = false;
        const uint64_t t0 = erma_now_ns();
        if (erma_rpc_call(c->rpc, c->sess, BENCH_ECHO, &c->req, &c->resp, on_rpc, c) !=
            ERMA_OK)
            break;
        while (!c->done) {
            erma_endpoint_run_once(c->ep);
            maybe_connect(c, o, erma_now_ns(), &next);
        }
        if (n < max)
            lat[n++] = erma_now_ns() - t0;
    }
    struct bench_lat l = {0};
    if (n)
        bench_lat_from_ns(lat, n, &l);
    free(lat);
    double ms[64];
    for (unsigned i = 0; i < c->connects; i++)
        ms[i] = c->connect_ns[i] / 1e6;
    r->connects = c->connects;
    r->failed = c->failed;
    r->connect_med_ms = c->connects ? bench_median(ms, c->connects) : 0;
    r->connect_max_ms = c->connects ? ms[c->connects - 1] : 0; /* sorted by bench_median */
    r->p50_us = l.median_us;
    r->p99_us = l.p99_us;
}

static void print_round(const struct bench_table *t, const char *what, unsigned i,
                        const struct round *r)
{
    bench_table_row(t, "connect_flood,%s,%u,%.0f,%u,%.2f,%.2f,%.2f,%.2f,%u", what, i,
                    r->flood_rate, r->connects, r->connect_med_ms, r->connect_max_ms, r->p50_us,
                    r->p99_us, r->failed);
}

/* Median over the rounds of one kind, field by field. */
static struct round median_of(const struct round *rs, unsigned n)
{
    double v[5][64];
    struct round m = {0};
    for (unsigned i = 0; i < n; i++) {
        v[0][i] = rs[i].flood_rate;
        v[1][i] = rs[i].connect_med_ms;
        v[2][i] = rs[i].connect_max_ms;
        v[3][i] = rs[i].p50_us;
        v[4][i] = rs[i].p99_us;
        m.connects += rs[i].connects;
        m.failed += rs[i].failed;
    }
    m.flood_rate = bench_median(v[0], n);
    m.connect_med_ms = bench_median(v[1], n);
    m.connect_max_ms = bench_median(v[2], n);
    m.p50_us = bench_median(v[3], n);
    m.p99_us = bench_median(v[4], n);
    return m;
}

static double flood_rate(int fd, uint64_t *last, double seconds)
{
    uint64_t sent = *last, v;
    while (read(fd, &v, sizeof v) == (ssize_t)sizeof v)
        sent = v;
    const double rate = (double)(sent - *last) / seconds;
    *last = sent;
    return rate;
}

int main(int argc, char **argv)
{
    struct opts o = {.server = "udp://127.0.0.1:42400", .uri = "udp://127.0.0.1:42410",
                     .rate = 10000, .seconds = 1, .sources = 256, .rounds = 6};
    struct bench_cli cli;
    parse(&cli, &o, argc, argv);
    bench_pin(bench_cli_cpu(&cli, 0));
    const pid_t server = bench_rpc_server_fork(o.server, NULL, NULL, bench_cli_cpu(&cli, 1),
                                               3600000000000ull);
    struct client c = {0};
    int rc = server > 0 ? client_up(&c, &o) : ERMA_ESYS;
    if (rc != ERMA_OK) {
        fprintf(stderr, "connect_flood: client %s to server %s: %s\n", o.uri, o.server,
                erma_strerror(rc));
        bench_rpc_server_stop(server);
        return 1;
    }
    struct bench_table t;
    bench_table_start(&t, cli.csv, "bench,round:14,n,flood_per_s:11,connects,connect_ms_p50:14,"
                                   "connect_ms_max:14,rpc_p50_us:10,rpc_p99_us:10,failed");
    bench_note(cli.csv, "%u rounds of %.1f s, quiet and flooded in turn; %.0f connects/s from "
                        "%u sources in the flood; RPCs busy-poll", o.rounds, o.seconds, o.rate,
               o.sources);
    struct round quiet[32], flooded[32];
    unsigned nq = 0, nf = 0, failed = 0;
    for (unsigned i = 0; i < o.rounds && i < 64; i++) {
        const bool flood = i % 2;
        int fds[2] = {-1, -1};
        pid_t flooder = -1;
        uint64_t last = 0;
        if (flood && pipe(fds) == 0 && (flooder = fork()) == 0)
            flood_main(&o, bench_cli_cpu(&cli, 2), fds[1]);
        struct round *r = flood ? &flooded[nf++] : &quiet[nq++];
        *r = (struct round){0};
        run_round(&c, &o, r);
        if (flooder > 0) {
            close(fds[1]);
            kill(flooder, SIGKILL);
            waitpid(flooder, NULL, 0);
            r->flood_rate = flood_rate(fds[0], &last, o.seconds);
            close(fds[0]);
        }
        failed += r->failed;
        print_round(&t, flood ? "flooded" : "quiet", i, r);
    }
    const struct round mq = median_of(quiet, nq), mf = median_of(flooded, nf);
    print_round(&t, "median_quiet", nq, &mq);
    print_round(&t, "median_flooded", nf, &mf);
    bench_table_row(&t, "connect_flood,ratio,-,-,-,%.2f,%.2f,%.2f,%.2f,-",
                    mf.connect_med_ms / mq.connect_med_ms, mf.connect_max_ms / mq.connect_max_ms,
                    mf.p50_us / mq.p50_us, mf.p99_us / mq.p99_us);
    bench_rpc_server_stop(server);
    if (failed)
        fprintf(stderr, "connect_flood: %u connects or RPCs failed\n", failed);
    return failed ? 1 : 0;
}
