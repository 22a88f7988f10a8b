/*
 * rma_eval - the experiments of 1RMA's evaluation (Singhvi et al.,
 * SIGCOMM 2020, sections 7.1-7.5) on the sim fabric, in virtual time (the
 * same figures on every machine):
 *
 *   rma_eval --exp NAME [--udp] [--csv]
 *
 *   load     Figure 10: uniform random READs of 1-4 KB among 8 hosts,
 *            open loop (Poisson) at an offered load per host of 10-90% of
 *            its link: median and p99 latency, failures.
 *   prio     7.2: a 64 B READ stream (one at a time) beside a bulk READ
 *            transfer of the same initiator, the stream at the first
 *            priority and the bulk at the last, and both at the last:
 *            the stream's median and p99, the bulk's share of the link.
 *   rekey    7.3: 4 initiators READ 4 KB (4 at a time each) while the
 *            target rekeys its region every 500 us, with a grace time of 0
 *            and of 50 us; the new key reaches the initiators 20 us after
 *            each rekey (an RPC, say), and one that gets ERMA_ESUPERSEDED
 *            before that fetches it at once: latency and failures per
 *            50 us bin (docs/PERFORMANCE.md's figures predate that status
 *            and call those failures AUTH_FAILED).
 *   cc       7.4, Figure 15: one initiator READs from target A, and after
 *            30 RTTs from target B too, its solicitation window 24 ops:
 *            each flow's share of the link and the local and remote
 *            windows per RTT, split windows and merged; and the same with
 *            a third host that starts reading from A when B starts, so
 *            that A is congested too ("shared", "shared_merged"; share_h
 *            the third host's share of its link).
 *   solicit  7.5: 7 initiators start 4 MiB WRITE transfers to one target at
 *            once, with the target's solicitation window (64 KB) and with
 *            it off (1 GiB): the bytes it receives per RTT (all of them,
 *            data sent again included) and the fabric's drops per RTT.
 *
 * Sim fabric: 25 Gb/s links with 5 us of delay (an RTT of ~23 us for a 4 KB
 * op, a BDP of ~17 such ops), 1 MiB switch buffers (solicit: 256 KB). The
 * window CC uses the base RTT of one idle 4 KB READ. Commands (load, prio's
 * stream, rekey) are not paced by the window CC, as 1RMA's software would;
 * transfers are. Prints a table, or CSV with --csv (bench/rma_eval_plot
 * draws them).
 *
 * --udp runs load, prio and rekey over kernel UDP on loopback instead, in
 * wall-clock time, every host an endpoint of this process and one thread
 * polling them all (the figures vary from run to run): load at offered
 * rates in ops/s per host (4 hosts, 0.2 s a point; the one thread's
 * capacity, about 50,000 READs/s, is the bottleneck), prio with 1 MiB
 * bulk transfers and 5,000 stream ops, its bulk column in Gb/s, rekey
 * with times 20x longer (1 ms bins, a rekey every 10 ms, grace 0 and 1 ms)
 * and one READ in flight per reader.
 * cc and solicit need a link to congest, which loopback does not have.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "erma/clock.h"
#include "erma/endpoint.h"
#include "erma/sdk/cc.h"
#include "erma/sdk/rand.h"
#include "erma/rma.h"
#include "erma/sim.h"

static const char usage[] =
    "usage: rma_eval --exp NAME [--udp] [--csv]\n"
    "  1RMA's evaluation (SIGCOMM'20, 7.1-7.5) on the sim fabric, virtual time\n"
    "  --exp load     uniform random 1-4 KB READs against offered load (Figure 10)\n"
    "  --exp prio     a first-priority stream beside last-priority bulk (7.2)\n"
    "  --exp rekey    READ latency over time while the target rekeys (7.3)\n"
    "  --exp cc       two flows of one initiator, split and merged windows, and with\n"
    "                 one target congested by a third host (7.4, Fig. 15)\n"
    "  --exp solicit  a WRITE incast with and without solicitation (7.5)\n"
    "  --udp          load, prio and rekey over udp loopback, wall-clock time\n"
    "  --csv          CSV instead of the table\n"
    "  -h, --help     this text\n";

#define MAXH 8
#define REGION (8u << 20)
#define LINK_BPS 25000000000ull

struct world {
    struct erma_sim *sim;
    unsigned n;
    struct erma_endpoint *ep[MAXH];
    struct erma_rma *rma[MAXH];
    char uri[MAXH][64];
    uint8_t *mem[MAXH];
    uint32_t region[MAXH];
    struct erma_rkey key[MAXH][MAXH]; /* [initiator][target] */
    int peer[MAXH][MAXH];
};

static bool udp; /* --udp */

static __attribute__((noreturn)) void fail(const char *what)
{
    fprintf(stderr, "rma_eval: %s failed\n", what);
    exit(1);
}

static void sim_cfg(struct erma_sim_cfg *sc, unsigned hosts)
{
    erma_sim_cfg_default(sc);
    sc->hosts = hosts;
    sc->link_delay_ns = 5000;
}

static void world_down(struct world *w)
{
    for (unsigned h = 0; h < w->n; h++) {
        erma_rma_destroy(w->rma[h]);
        erma_endpoint_destroy(w->ep[h]);
        free(w->mem[h]);
    }
    erma_sim_destroy(w->sim);
    memset(w, 0, sizeof *w);
}

/* n hosts, each a target with a region and an initiator with every key:
 * on the sim fabric sc describes, or (--udp) udp endpoints on loopback. */
static void world_up(struct world *w, const struct erma_sim_cfg *sc, const struct erma_rma_cfg *rc)
{
    static unsigned serial;
    char name[32];
    snprintf(name, sizeof name, "eval%u", serial++);
    memset(w, 0, sizeof *w);
    w->n = sc->hosts;
    if (!udp) {
        if (erma_sim_create(name, sc, &w->sim) != ERMA_OK)
            fail("erma_sim_create");
        erma_sim_use_clock(w->sim);
    }
    for (unsigned h = 0; h < w->n; h++) {
        snprintf(w->uri[h], sizeof w->uri[h], udp ? "udp://127.0.0.1:0" : "sim://%s/%u:31850",
                 name, h);
        struct erma_rma_cfg c = *rc;
        c.identity = 1000 + h;
        w->mem[h] = calloc(1, REGION);
        /* one thread polls every udp endpoint: none may sleep */
        const struct erma_endpoint_cfg ec = {.busy_poll = true};
        if (!w->mem[h] || erma_endpoint_create(w->uri[h], 0, udp ? &ec : NULL, &w->ep[h]) != ERMA_OK ||
            erma_rma_create(w->ep[h], &c, &w->rma[h]) != ERMA_OK ||
            erma_rma_uri(w->rma[h], w->uri[h], sizeof w->uri[h]) != ERMA_OK ||
            erma_region_register(w->rma[h], w->mem[h], REGION,
                                 ERMA_RMA_PERM_READ | ERMA_RMA_PERM_WRITE, &w->region[h]) != ERMA_OK)
            fail("world set-up");
    }
    for (unsigned i = 0; i < w->n; i++)
        for (unsigned t = 0; t < w->n; t++)
            if ((w->peer[i][t] = erma_rma_peer(w->rma[i], w->uri[t], 0)) < 0 ||
                erma_region_export_uri(w->rma[t], w->region[t], erma_rma_identity(w->rma[i]),
                                       w->uri[i], &w->key[i][t]) != ERMA_OK)
                fail("keys");
}

static uint64_t now_of(const struct world *w)
{
    return w->sim ? erma_sim_now(w->sim) : erma_now_ns();
}

/* Runs the fabric for ns of virtual time, or (--udp) polls every endpoint
 * for ns of wall-clock time, at least once. */
static void run(struct world *w, uint64_t ns)
{
    if (!w->sim) {
        const uint64_t end = erma_now_ns() + ns;
        do
            for (unsigned h = 0; h < w->n; h++)
                if (erma_endpoint_run_once(w->ep[h]) < 0)
                    fail("erma_endpoint_run_once");
        while (erma_now_ns() < end);
        return;
    }
    if (!ns)
        return;
    const int rc = erma_sim_run(w->sim, w->ep, w->n, ns, NULL, NULL);
    if (rc != ERMA_OK && rc != ERMA_ETIMEDOUT)
        fail("erma_sim_run");
}

/* Waits (at most 100 ms) for one completion of host h. */
static struct erma_rma_completion wait_one(struct world *w, unsigned h)
{
    struct erma_rma_completion c;
    for (int i = 0; i < 100000; i++) {
        if (erma_rma_poll(w->rma[h], &c, 1) == 1)
            return c;
        run(w, 1000);
    }
    fail("an op's completion");
}

static struct erma_rma_cmd read_cmd(const struct world *w, unsigned i, unsigned t, uint64_t off,
                                    void *buf, uint32_t len, uint64_t tag)
{
    return (struct erma_rma_cmd){.op = ERMA_RMA_READ, .peer = w->peer[i][t],
                                 .rkey = w->key[i][t], .offset = off, .local = buf, .len = len,
                                 .tag = tag};
}

/* The unloaded total delay of one 4 KB READ: the window CC's base RTT. */
static uint64_t base_rtt(void)
{
    struct erma_sim_cfg sc;
    sim_cfg(&sc, 2);
    struct world w;
    world_up(&w, &sc, &(struct erma_rma_cfg){0});
    static uint8_t buf[4096];
    if (erma_rma_submit(w.rma[1], &(struct erma_rma_cmd){.op = ERMA_RMA_READ,
                                                          .peer = w.peer[1][0],
                                                          .rkey = w.key[1][0], .local = buf,
                                                          .len = 4096}) < 0)
        fail("submit");
    const struct erma_rma_completion c = wait_one(&w, 1);
    world_down(&w);
    if (c.status != ERMA_OK)
        fail("the base RTT's READ");
    return c.total_delay_ns;
}

/* Uniform in [0, 1) from a splitmix64 sequence (erma/sdk/rand.h). */
static double uniform(uint64_t *s)
{
    return (double)(erma_splitmix64(s) >> 11) * 0x1.0p-53;
}

/* Bytes per host and drops per time bin, from the fabric's trace. */
#define BINS 4096
struct meter {
    uint64_t start_ns, bin_ns;
    uint64_t to[MAXH][BINS];       /* delivered to host h */
    uint64_t from_to1[MAXH][BINS]; /* delivered to host 1, by source */
    uint64_t drops[BINS];
};

static void meter_fn(void *ctx, const struct erma_sim_event *ev)
{
    struct meter *m = ctx;
    if (ev->time < m->start_ns)
        return;
    const uint64_t b = (ev->time - m->start_ns) / m->bin_ns;
    if (b >= BINS)
        return;
    if (ev->kind != ERMA_SIM_DELIVER) {
        m->drops[b]++;
        return;
    }
    if (ev->dst_host < MAXH)
        m->to[ev->dst_host][b] += ev->len;
    if (ev->dst_host == 1 && ev->src_host < MAXH)
        m->from_to1[ev->src_host][b] += ev->len;
}

static void meter_start(struct meter *m, struct world *w, uint64_t bin_ns)
{
    memset(m, 0, sizeof *m);
    m->start_ns = now_of(w);
    m->bin_ns = bin_ns;
    if (w->sim)
        erma_sim_set_trace(w->sim, meter_fn, m);
}

static double share(uint64_t bytes, uint64_t ns)
{
    return ns ? (double)bytes * 8e9 / (double)ns / (double)LINK_BPS : 0;
}

/* ---- load: Figure 10 ---- */

#define LOAD_HOSTS 8
#define LOAD_NS 2000000ull

/* udp: 4 hosts, offered ops/s per host, 0.2 s a point */
#define UDP_LOAD_HOSTS 4
#define UDP_LOAD_NS 200000000ull

static void exp_load(struct bench_table *t)
{
    bench_table_start(t, t->csv, udp ? "exp,ops_per_s,done_per_s,ops,failed,p50_us,p99_us"
                                     : "exp,load,ops,failed,p50_us,p99_us");
    static const double loads[] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9};
    static const double udp_rates[] = {2e3, 4e3, 6e3, 8e3, 10e3, 12e3, 14e3, 16e3, 18e3};
    /* udp: each op's latency counts from the time it was due, so that a
     * loop too busy to submit on time shows as latency */
    static uint64_t lat[LOAD_HOSTS * 40000], due[LOAD_HOSTS * 40000];
    static uint8_t buf[LOAD_HOSTS][4096];
    const unsigned hosts = udp ? UDP_LOAD_HOSTS : LOAD_HOSTS;
    const uint64_t span = udp ? UDP_LOAD_NS : LOAD_NS;
    for (size_t li = 0; li < sizeof loads / sizeof *loads; li++) {
        struct erma_sim_cfg sc;
        sim_cfg(&sc, hosts);
        struct world w;
        world_up(&w, &sc, &(struct erma_rma_cfg){.slots = 4096});
        uint64_t seed = 42 + li, next[LOAD_HOSTS];
        /* ops per ns per host: load x link / mean op size (2.5 KB) */
        const double rate = udp ? udp_rates[li] / 1e9
                                : loads[li] * (double)LINK_BPS / 8e9 / 2560.0;
        const uint64_t t0 = now_of(&w);
        for (unsigned h = 0; h < hosts; h++)
            next[h] = t0 + (uint64_t)(-log(1 - uniform(&seed)) / rate);
        size_t n = 0;
        uint64_t failed = 0, submitted = 0, done = 0;
        for (;;) {
            uint64_t soonest = UINT64_MAX;
            unsigned who = 0;
            for (unsigned h = 0; h < hosts; h++)
                if (next[h] < soonest)
                    soonest = next[h], who = h;
            const uint64_t now = now_of(&w);
            if (soonest >= t0 + span || submitted == sizeof due / sizeof *due) {
                /* every op submitted: wait for the last */
                if (done == submitted)
                    break;
                run(&w, 1000);
            } else if (udp && soonest > now) { /* completions seen as they come */
                run(&w, soonest - now < 1000 ? soonest - now : 1000);
            } else {
                run(&w, soonest > now ? soonest - now : 0);
                unsigned target = (unsigned)(erma_splitmix64(&seed) % (hosts - 1));
                target += target >= who;
                const uint32_t len = 1024 + (uint32_t)(erma_splitmix64(&seed) % 3073);
                const uint64_t off = (erma_splitmix64(&seed) % (REGION / 4096)) * 4096;
                if (erma_rma_submit(w.rma[who], &(struct erma_rma_cmd){
                                                    .op = ERMA_RMA_READ,
                                                    .peer = w.peer[who][target],
                                                    .rkey = w.key[who][target], .offset = off,
                                                    .local = buf[who], .len = len,
                                                    .tag = submitted}) >= 0)
                    due[submitted++] = soonest;
                else
                    failed++;
                next[who] += (uint64_t)(-log(1 - uniform(&seed)) / rate) + 1;
            }
            for (unsigned h = 0; h < hosts; h++) {
                struct erma_rma_completion c[64];
                const int k = erma_rma_poll(w.rma[h], c, 64);
                for (int j = 0; j < k; j++, done++) {
                    if (c[j].status != ERMA_OK)
                        failed++;
                    else
                        lat[n++] = udp ? now_of(&w) - due[c[j].tag] : c[j].total_delay_ns;
                }
            }
        }
        const double elapsed = (double)(now_of(&w) - t0);
        struct bench_lat l;
        bench_lat_from_ns(lat, n, &l);
        if (udp)
            bench_table_row(t, "load,%.0f,%.0f,%llu,%llu,%.2f,%.2f", udp_rates[li],
                            (double)n / hosts / elapsed * 1e9, (unsigned long long)n,
                            (unsigned long long)failed, l.median_us, l.p99_us);
        else
            bench_table_row(t, "load,%.1f,%llu,%llu,%.2f,%.2f", loads[li], (unsigned long long)n,
                        (unsigned long long)failed, l.median_us, l.p99_us);
        world_down(&w);
    }
}

/* ---- prio: 7.2 ---- */

#define STREAM_OPS 1000
#define UDP_STREAM_OPS 5000

/* bulk: 0 none, 1 READ transfers, 2 a queue of BULK_CMDS 4 KB READ commands
 * kept full (with a 64 KB solicitation window, so that they wait in the
 * initiator's own queue). */
#define BULK_CMDS 200

/* A bulk op completed (got): its bytes counted when it succeeded, and
 * another one started, a transfer x (bulk 1) or a command c (bulk 2). */
static void bulk_again(struct world *w, int bulk, const struct erma_rma_xfer *x,
                       const struct erma_rma_cmd *c, const struct erma_rma_completion *got,
                       uint64_t *bytes)
{
    *bytes += got->status == ERMA_OK ? (bulk == 1 ? x->len : c->len) : 0;
    if ((bulk == 1 ? erma_rma_transfer(w->rma[1], x) : erma_rma_submit(w->rma[1], c)) < 0)
        fail("bulk again");
}

/* The stream's p50 and p99 and failures; the bulk's share of the link, or
 * (--udp) its goodput in Gb/s: 1 MiB transfers, counted as they complete. */
static void prio_run(const struct erma_window_cfg *wc, bool stream, int bulk, uint8_t prio,
                     double *p50, double *p99, double *bulk_share, unsigned *failed)
{
    struct erma_sim_cfg sc;
    sim_cfg(&sc, 2);
    struct world w;
    world_up(&w, &sc, &(struct erma_rma_cfg){.window = wc, .slots = 256,
                                              .inbound_window = bulk == 2 ? 64u << 10 : 0});
    static struct meter m;
    uint8_t *big = malloc(REGION);
    if (!big)
        fail("malloc");
    const unsigned ops = udp ? UDP_STREAM_OPS : STREAM_OPS;
    const struct erma_rma_xfer x = {.op = ERMA_RMA_READ, .peer = w.peer[1][0],
                                    .rkey = w.key[1][0], .local = big,
                                    .len = udp ? 1u << 20 : REGION, .max_retries = 50,
                                    .priority = ERMA_RMA_PRIORITIES - 1, .tag = ops};
    const struct erma_rma_cmd bc = {.op = ERMA_RMA_READ, .peer = w.peer[1][0],
                                    .rkey = w.key[1][0], .local = big, .len = 4096,
                                    .priority = ERMA_RMA_PRIORITIES - 1, .tag = ops};
    for (unsigned k = 0; bulk == 1 && k < 2; k++) /* the whole region, again and again */
        if (erma_rma_transfer(w.rma[1], &x) < 0)
            fail("transfer");
    for (unsigned k = 0; bulk == 2 && k < BULK_CMDS; k++)
        if (erma_rma_submit(w.rma[1], &bc) < 0)
            fail("submit");
    if (bulk)
        run(&w, udp ? 50000000 : 500000);
    meter_start(&m, &w, 10000); /* from here: 10 us bins */
    const uint64_t t0 = now_of(&w);
    static uint64_t lat[UDP_STREAM_OPS];
    uint8_t buf[64];
    size_t n = 0;
    uint64_t bulk_bytes = 0;
    *failed = 0;
    for (unsigned i = 0; stream && i < ops; i++) {
        struct erma_rma_cmd c = read_cmd(&w, 1, 0, i * 64, buf, 64, i);
        c.priority = prio;
        if (erma_rma_submit(w.rma[1], &c) < 0)
            fail("submit");
        struct erma_rma_completion got;
        while ((got = wait_one(&w, 1)).tag != i) /* a bulk op */
            bulk_again(&w, bulk, &x, &bc, &got, &bulk_bytes);
        if (got.status == ERMA_OK)
            lat[n++] = got.total_delay_ns;
        else
            ++*failed;
    }
    for (uint64_t end = now_of(&w) + (udp ? 400000000 : 4000000); !stream && now_of(&w) < end;) {
        const struct erma_rma_completion got = wait_one(&w, 1); /* a bulk op */
        bulk_again(&w, bulk, &x, &bc, &got, &bulk_bytes);
    }
    const uint64_t t1 = now_of(&w);
    uint64_t bytes = 0, bins = (t1 - t0) / m.bin_ns; /* whole bins from t0 */
    bins = bins < BINS ? bins : BINS;
    for (uint64_t b = 0; b < bins; b++)
        bytes += m.to[1][b];
    *bulk_share = udp ? (double)bulk_bytes * 8 / (double)(t1 - t0)
                      : share(bytes, bins * m.bin_ns);
    struct bench_lat l;
    bench_lat_from_ns(lat, n, &l);
    *p50 = l.median_us;
    *p99 = l.p99_us;
    world_down(&w);
    free(big);
}

static void exp_prio(struct bench_table *t, const struct erma_window_cfg *wc)
{
    bench_table_start(t, t->csv,
                      udp ? "exp,bulk:9,case:22,p50_us,p99_us,p99_vs_quiet,failed,bulk_gbps"
                          : "exp,bulk:9,case:22,p50_us,p99_us,p99_vs_quiet,failed,bulk_share");
    double qp50, qp99, lone, p50, p99, bs, d0, d1;
    unsigned failed;
    prio_run(wc, true, 0, 0, &qp50, &qp99, &d0, &failed);
    bench_table_row(t, "prio,none,quiet stream,%.2f,%.2f,1.00,%u,0", qp50, qp99, failed);
    static const char *const kind[] = {"", "transfer", "commands"};
    for (int bulk = 1; bulk <= 2; bulk++) {
        prio_run(wc, false, bulk, 0, &d0, &d1, &lone, &failed);
        bench_table_row(t, "prio,%s,bulk alone,0,0,0,0,%.3f", kind[bulk], lone);
        prio_run(wc, true, bulk, 0, &p50, &p99, &bs, &failed);
        bench_table_row(t, "prio,%s,stream first bulk last,%.2f,%.2f,%.2f,%u,%.3f", kind[bulk],
                        p50, p99, p99 / qp99, failed, bs);
        prio_run(wc, true, bulk, ERMA_RMA_PRIORITIES - 1, &p50, &p99, &bs, &failed);
        bench_table_row(t, "prio,%s,both last,%.2f,%.2f,%.2f,%u,%.3f", kind[bulk], p50, p99,
                        p99 / qp99, failed, bs);
    }
}

/* ---- rekey: 7.3 ---- */

#define REKEY_READERS 4
#define REKEY_DEPTH 4
#define REKEY_BIN 50000ull
#define REKEY_BINS 40
#define KEY_SPREAD 20000ull

static void refresh_key(struct world *w, unsigned i)
{
    if (erma_region_export_uri(w->rma[0], w->region[0], erma_rma_identity(w->rma[i]), w->uri[i],
                               &w->key[i][0]) != ERMA_OK)
        fail("export");
}

static void exp_rekey(struct bench_table *t)
{
    bench_table_start(t, t->csv, "exp,grace_us,bin_us,ops,superseded,p50_us,p99_us");
    static const uint64_t graces[] = {0, 50000};
    static uint8_t buf[REKEY_READERS + 1][REKEY_DEPTH][4096];
    const uint64_t x = udp ? 20 : 1; /* udp: times 20x longer */
    for (size_t g = 0; g < 2; g++) {
        struct erma_sim_cfg sc;
        sim_cfg(&sc, REKEY_READERS + 1);
        struct world w;
        world_up(&w, &sc, &(struct erma_rma_cfg){0});
        for (unsigned i = 1; i <= REKEY_READERS; i++)
            for (unsigned d = 0; d < (udp ? 1 : REKEY_DEPTH); d++)
                if (erma_rma_submit(w.rma[i], &(struct erma_rma_cmd){
                                                  .op = ERMA_RMA_READ, .peer = w.peer[i][0],
                                                  .rkey = w.key[i][0], .local = buf[i][d],
                                                  .len = 4096, .tag = d}) < 0)
                    fail("submit");
        const uint64_t t0 = now_of(&w);
        for (unsigned b = 0; b < REKEY_BINS; b++) {
            static uint64_t lat[1 << 16];
            size_t n = 0;
            uint64_t auth = 0;
            const bool rekey = b % 10 == 5;
            if (rekey && erma_region_rekey(w.rma[0], w.region[0], NULL, graces[g] * x) != ERMA_OK)
                fail("rekey");
            const uint64_t spread = now_of(&w) + KEY_SPREAD * x;
            bool spread_done = !rekey;
            while (now_of(&w) < t0 + (b + 1) * REKEY_BIN * x) {
                run(&w, 1000);
                for (unsigned i = 1; !spread_done && now_of(&w) >= spread &&
                                     i <= REKEY_READERS;
                     i++)
                    refresh_key(&w, i);
                spread_done |= now_of(&w) >= spread;
                for (unsigned i = 1; i <= REKEY_READERS; i++) {
                    struct erma_rma_completion c[REKEY_DEPTH];
                    const int k = erma_rma_poll(w.rma[i], c, REKEY_DEPTH);
                    for (int j = 0; j < k; j++) {
                        if (c[j].status == ERMA_OK && n < sizeof lat / sizeof *lat)
                            lat[n++] = c[j].total_delay_ns;
                        if (c[j].status == ERMA_ESUPERSEDED) { /* fetch the new key now */
                            auth++;
                            refresh_key(&w, i);
                        }
                        if (erma_rma_submit(w.rma[i], &(struct erma_rma_cmd){
                                                          .op = ERMA_RMA_READ,
                                                          .peer = w.peer[i][0],
                                                          .rkey = w.key[i][0],
                                                          .local = buf[i][c[j].tag],
                                                          .len = 4096, .tag = c[j].tag}) < 0)
                            fail("submit");
                    }
                }
            }
            struct bench_lat l;
            bench_lat_from_ns(lat, n, &l);
            bench_table_row(t, "rekey,%llu,%llu,%zu,%llu,%.2f,%.2f",
                            (unsigned long long)(graces[g] * x / 1000),
                            (unsigned long long)(b * REKEY_BIN * x / 1000), n,
                            (unsigned long long)auth, l.median_us, l.p99_us);
        }
        world_down(&w);
    }
}

/* ---- cc: 7.4, Figure 15 ---- */

static void exp_cc(struct bench_table *t, const struct erma_window_cfg *base, uint64_t rtt)
{
    bench_table_start(t, t->csv,
                      "exp,windows:7,rtt,share_a,share_b,local_cwnd,remote_a,remote_b,share_h");
    static const char *const name[] = {"split", "merged", "shared", "shared_merged"};
    for (int v = 0; v < 4; v++) {
        const bool merged = v & 1, shared = v >= 2;
        struct erma_sim_cfg sc;
        sim_cfg(&sc, shared ? 4 : 3);
        struct erma_window_cfg wc = *base;
        wc.merged = merged;
        struct world w;
        world_up(&w, &sc, &(struct erma_rma_cfg){.window = &wc, .inbound_window = 24 * 4096,
                                                  .slots = 1024});
        static struct meter m;
        meter_start(&m, &w, rtt);
        uint8_t *dst = malloc(2 * (size_t)REGION);
        if (!dst)
            fail("malloc");
        for (unsigned k = 0; k < 2; k++) {
            if (k == 1)
                run(&w, 30 * rtt);
            for (unsigned rep = 0; shared && k == 1 && rep < 4; rep++)
                if (erma_rma_transfer(w.rma[3], &(struct erma_rma_xfer){
                                                    .op = ERMA_RMA_READ, .peer = w.peer[3][0],
                                                    .rkey = w.key[3][0], .local = w.mem[3],
                                                    .len = REGION, .max_retries = 50}) < 0)
                    fail("transfer");
            const unsigned target = k ? 2 : 0;
            for (unsigned rep = 0; rep < 4; rep++) /* long enough for the run */
                if (erma_rma_transfer(w.rma[1], &(struct erma_rma_xfer){
                                                    .op = ERMA_RMA_READ,
                                                    .peer = w.peer[1][target],
                                                    .rkey = w.key[1][target],
                                                    .local = dst + (size_t)k * REGION,
                                                    .len = REGION, .max_retries = 50,
                                                    .tag = k}) < 0)
                    fail("transfer");
        }
        for (unsigned r = 30; r < 200; r++) {
            const uint64_t end = m.start_ns + (r + 1) * rtt, now = erma_sim_now(w.sim);
            run(&w, end > now ? end - now : 0);
            struct erma_rma_window_info a = {0}, b = {0}, lw = {0};
            erma_rma_window(w.rma[1], w.peer[1][0], ERMA_RMA_READ, &a); /* zeros before use */
            erma_rma_window(w.rma[1], w.peer[1][2], ERMA_RMA_READ, &b);
            erma_rma_local_window(w.rma[1], &lw);
            bench_table_row(t, "cc,%s,%u,%.3f,%.3f,%.1f,%.1f,%.1f,%.3f", name[v],
                            r - 30, share(m.from_to1[0][r], rtt), share(m.from_to1[2][r], rtt),
                            merged ? 0 : lw.cwnd, a.cwnd, b.cwnd, share(m.to[3][r], rtt));
        }
        world_down(&w);
        free(dst);
    }
}

/* ---- solicit: 7.5 ---- */

#define INCAST 7

static void exp_solicit(struct bench_table *t, const struct erma_window_cfg *wc, uint64_t rtt)
{
    bench_table_start(t, t->csv, "exp,solicitation:12,rtt,rx_share,drops");
    for (int on = 1; on >= 0; on--) {
        struct erma_sim_cfg sc;
        sim_cfg(&sc, INCAST + 1);
        sc.switch_buffer = 256 << 10;
        struct world w;
        world_up(&w, &sc, &(struct erma_rma_cfg){.window = wc,
                                                  .solicit_window = on ? 64u << 10 : 1u << 30,
                                                  .solicits = on ? 64 : 4096,
                                                  .slots = 1024});
        static struct meter m;
        meter_start(&m, &w, rtt);
        for (unsigned i = 1; i <= INCAST; i++)
            if (erma_rma_transfer(w.rma[i], &(struct erma_rma_xfer){
                                                .op = ERMA_RMA_WRITE, .peer = w.peer[i][0],
                                                .rkey = w.key[i][0], .offset = 0,
                                                .local = w.mem[i], .len = 4u << 20,
                                                .max_retries = 100, .tag = i}) < 0)
                fail("transfer");
        run(&w, 150 * rtt);
        for (unsigned r = 0; r < 150; r++)
            bench_table_row(t, "solicit,%s,%u,%.3f,%llu", on ? "on" : "off", r,
                            share(m.to[0][r], rtt), (unsigned long long)m.drops[r]);
        world_down(&w);
    }
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {BENCH_COMMON_OPTIONS, {"exp", 1, 0, 'e'},
                                       {"udp", 0, 0, 'u'}, {0, 0, 0, 0}};
    struct bench_cli cli;
    const char *exp = NULL;
    bench_cli_init(&cli, "rma_eval", usage, lo);
    for (int c; (c = bench_cli_next(&cli, argc, argv)) != -1;) {
        if (c == 'e')
            exp = optarg;
        else if (c == 'u')
            udp = true;
        else
            bench_cli_fail(&cli, NULL);
    }
    if (!exp)
        bench_cli_fail(&cli, "--exp is required");
    struct bench_table t = {.csv = cli.csv};
    if (udp) {
        if (strcmp(exp, "load") != 0 && strcmp(exp, "prio") != 0 && strcmp(exp, "rekey") != 0)
            bench_cli_fail(&cli, "--exp %s needs a link to congest: sim only", exp);
        bench_note(cli.csv, "rma_eval %s: udp loopback, one thread polls every endpoint, "
                            "wall-clock time, the executor's default windows",
                   exp);
        if (strcmp(exp, "load") == 0)
            exp_load(&t);
        else if (strcmp(exp, "prio") == 0)
            exp_prio(&t, NULL);
        else
            exp_rekey(&t);
        return 0;
    }
    const uint64_t rtt = base_rtt();
    const struct erma_window_cfg wc = erma_window_cfg_for((double)LINK_BPS, rtt);
    bench_note(cli.csv, "rma_eval %s: sim fabric, 25 Gb/s links, 5 us link delay, 4 KB READ "
                        "base RTT %.2f us",
               exp, (double)rtt / 1e3);
    if (strcmp(exp, "load") == 0)
        exp_load(&t);
    else if (strcmp(exp, "prio") == 0)
        exp_prio(&t, &wc);
    else if (strcmp(exp, "rekey") == 0)
        exp_rekey(&t);
    else if (strcmp(exp, "cc") == 0)
        exp_cc(&t, &wc, rtt);
    else if (strcmp(exp, "solicit") == 0)
        exp_solicit(&t, &wc, rtt);
    else
        bench_cli_fail(&cli, "unknown experiment '%s'", exp);
    return 0;
}
