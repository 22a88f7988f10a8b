/* transport/sim.c: the simulated fabric in virtual time. */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "erma/clock.h"
#include "erma/errors.h"
#include "erma/sim.h"
#include "erma/sdk/transport_driver.h"

#define MAXH 16

struct net {
    struct erma_sim *sim;
    struct erma_transport *tr[MAXH];
    struct erma_addr addr[MAXH];
    unsigned hosts;
};

static void net_up(struct net *n, const char *name, const struct erma_sim_cfg *cfg,
                   uint32_t rx_ring)
{
    memset(n, 0, sizeof *n);
    assert_int_equal(erma_sim_create(name, cfg, &n->sim), ERMA_OK);
    n->hosts = cfg->hosts;
    const struct erma_transport_cfg tc = {.rx_ring = rx_ring};
    for (unsigned h = 0; h < n->hosts; h++) {
        char uri[64];
        snprintf(uri, sizeof uri, "sim://%s/%u:%u", name, h, 100 + h);
        assert_int_equal(erma_transport_open(uri, &tc, &n->tr[h]), ERMA_OK);
        n->addr[h] = n->tr[h]->local;
    }
}

static void net_down(struct net *n)
{
    for (unsigned h = 0; h < n->hosts; h++)
        erma_transport_close(n->tr[h]);
    erma_sim_destroy(n->sim);
}

static void send(struct net *n, unsigned from, unsigned to, uint32_t len)
{
    static uint8_t buf[1472];
    const struct erma_tx_pkt p = {.dst = &n->addr[to], .hdr = buf, .hdr_len = len};
    assert_int_equal(erma_tx_burst(n->tr[from], &p, 1), 1);
}

/* Runs the fabric until idle, recording when host `at` receives packets. */
static unsigned drain(struct net *n, unsigned at, uint64_t *when, unsigned max)
{
    unsigned got = 0;
    struct erma_rx_pkt rx[ERMA_MAX_BURST];
    for (;;) {
        const int k = erma_rx_burst(n->tr[at], rx, ERMA_MAX_BURST);
        for (int i = 0; i < k; i++, got++)
            if (when && got < max)
                when[got] = erma_sim_now(n->sim);
        if (k > 0)
            continue;
        const uint64_t t = erma_sim_next_event(n->sim);
        if (t == UINT64_MAX)
            return got;
        erma_sim_advance_to(n->sim, t);
    }
}

static uint64_t ser(uint64_t bytes, uint64_t bps)
{
    return (bytes * 8000000000ull + bps - 1) / bps;
}

static void test_delay_and_bandwidth(void **state)
{
    (void)state;
    struct erma_sim_cfg c;
    erma_sim_cfg_default(&c);
    c.link_bps = 10000000000ull; /* 10 Gb/s */
    c.link_delay_ns = 1500;
    struct net n;
    net_up(&n, "timing", &c, 64);
    const uint32_t len = 1000;
    const uint64_t s = ser(len + c.frame_overhead, c.link_bps); /* 834 ns */
    uint64_t when[8];
    send(&n, 0, 1, len);
    assert_int_equal(drain(&n, 1, when, 1), 1);
    assert_int_equal(when[0], s + c.link_delay_ns + s + c.link_delay_ns);
    /* a burst of 8 arrives back to back, one serialisation apart */
    const uint64_t t0 = erma_sim_now(n.sim);
    for (int i = 0; i < 8; i++)
        send(&n, 0, 1, len);
    assert_int_equal(drain(&n, 1, when, 8), 8);
    assert_int_equal(when[0], t0 + 2 * s + 2 * c.link_delay_ns);
    for (int i = 1; i < 8; i++)
        assert_int_equal(when[i] - when[i - 1], s);
    net_down(&n);
}

static void test_loss_rate(void **state)
{
    (void)state;
    struct erma_sim_cfg c;
    erma_sim_cfg_default(&c);
    c.loss = 0.1;
    struct net n;
    net_up(&n, "loss", &c, 1 << 16);
    const unsigned N = 20000;
    for (unsigned i = 0; i < N; i++)
        send(&n, 0, 1, 100);
    const unsigned got = drain(&n, 1, NULL, 0);
    struct erma_sim_stats st;
    erma_sim_get_stats(n.sim, &st);
    const double sigma = sqrt(N * 0.1 * 0.9); /* 42 */
    print_message("  loss 0.1: %u of %u lost (expected 2000 +- %.0f)\n", N - got, N, 3 * sigma);
    assert_true(fabs((double)(N - got) - N * 0.1) < 3 * sigma);
    assert_int_equal(st.drop_loss, N - got);
    assert_int_equal(st.sent, N);
    net_down(&n);
}

static void test_switch_buffer(void **state)
{
    (void)state;
    struct erma_sim_cfg c;
    erma_sim_cfg_default(&c);
    c.hosts = 9;
    c.switch_buffer = 20000;
    struct net n;
    net_up(&n, "incast", &c, 1 << 16);
    for (unsigned h = 1; h < 9; h++)
        for (int i = 0; i < 20; i++)
            send(&n, h, 0, 1400);
    const unsigned got = drain(&n, 0, NULL, 0);
    struct erma_sim_stats st;
    erma_sim_get_stats(n.sim, &st);
    print_message("  8 x 20 packets into a 20 kB buffer: %u delivered, %llu dropped, peak %llu B\n",
                  got, (unsigned long long)st.drop_buffer,
                  (unsigned long long)erma_sim_egress_max_bytes(n.sim, 0));
    assert_true(st.drop_buffer > 0);
    assert_int_equal(got + st.drop_buffer, 160);
    assert_int_equal(st.delivered, got);
    assert_true(erma_sim_egress_max_bytes(n.sim, 0) <= c.switch_buffer);
    assert_true(erma_sim_egress_max_bytes(n.sim, 0) > c.switch_buffer - 1442);
    assert_int_equal(erma_sim_egress_bytes(n.sim, 0), 0); /* drained */
    net_down(&n);
}

static void test_ecmp(void **state)
{
    (void)state;
    struct erma_sim_cfg c;
    erma_sim_cfg_default(&c);
    c.paths = 4;
    for (int p = 0; p < 4; p++)
        c.path_delay_ns[p] = 1000u * (unsigned)p;
    struct net n;
    net_up(&n, "ecmp", &c, 1 << 16);
    /* 400 source ports, 10 packets each */
    for (unsigned port = 0; port < 400; port++) {
        struct erma_transport *t;
        char uri[64];
        snprintf(uri, sizeof uri, "sim://ecmp/0:%u", 2000 + port);
        assert_int_equal(erma_transport_open(uri, NULL, &t), ERMA_OK);
        static uint8_t buf[64];
        const struct erma_tx_pkt p = {.dst = &n.addr[1], .hdr = buf, .hdr_len = 64};
        struct erma_sim_stats before, after;
        erma_sim_get_stats(n.sim, &before);
        for (int i = 0; i < 10; i++)
            assert_int_equal(erma_tx_burst(t, &p, 1), 1);
        erma_sim_get_stats(n.sim, &after);
        /* erma_sim_flow_path names the path the flow took */
        const int path = erma_sim_flow_path(n.sim, 0, (uint16_t)(2000 + port), 1, 101);
        assert_true(path >= 0 && path < 4);
        assert_int_equal(after.path_pkts[path] - before.path_pkts[path], 10);
        erma_transport_close(t);
    }
    assert_int_equal(erma_sim_flow_path(n.sim, 0, 2000, 2, 101), ERMA_EINVAL); /* no host 2 */
    drain(&n, 1, NULL, 0);
    struct erma_sim_stats st;
    erma_sim_get_stats(n.sim, &st);
    for (int p = 0; p < 4; p++) {
        print_message("  path %d: %llu packets\n", p, (unsigned long long)st.path_pkts[p]);
        assert_true(st.path_pkts[p] > 600 && st.path_pkts[p] < 1400); /* 1000 expected */
        assert_int_equal(st.path_pkts[p] % 10, 0); /* a flow stays on one path */
    }
    net_down(&n);
}

struct trace {
    uint64_t hash, events, out_of_order, last_seq;
};

static void on_event(void *ctx, const struct erma_sim_event *ev)
{
    struct trace *t = ctx;
    uint64_t x = ev->time ^ (uint64_t)ev->kind << 56 ^ (uint64_t)ev->src_port << 40 ^
                 (uint64_t)ev->len << 16 ^ ev->path;
    t->hash = (t->hash ^ x) * 0x100000001b3ull;
    t->events++;
    if (ev->kind == ERMA_SIM_DELIVER) { /* the packet's sequence is its length here */
        t->out_of_order += ev->len < t->last_seq;
        t->last_seq = ev->len;
    }
}

static struct trace run_trace(uint64_t seed, double loss, double reorder)
{
    struct erma_sim_cfg c;
    erma_sim_cfg_default(&c);
    c.seed = seed;
    c.loss = loss;
    c.reorder = reorder;
    c.reorder_delay_ns = 5000;
    struct net n;
    char name[32];
    snprintf(name, sizeof name, "trace%llu", (unsigned long long)seed);
    net_up(&n, name, &c, 1 << 16);
    struct trace t = {0};
    erma_sim_set_trace(n.sim, on_event, &t);
    for (uint32_t i = 0; i < 2000; i++) {
        send(&n, 0, 1, 16 + i % 1400); /* length encodes the order within 1400 */
        if (i % 50 == 49)
            erma_sim_advance_to(n.sim, erma_sim_now(n.sim) + 20000);
    }
    drain(&n, 1, NULL, 0);
    net_down(&n);
    return t;
}

static void test_same_seed_same_run(void **state)
{
    (void)state;
    const struct trace a = run_trace(5, 0.05, 0.1), b = run_trace(5, 0.05, 0.1),
                       c = run_trace(6, 0.05, 0.1);
    assert_int_equal(a.hash, b.hash);
    assert_int_equal(a.events, b.events);
    assert_true(a.hash != c.hash);
}

static void test_reordering(void **state)
{
    (void)state;
    const struct trace none = run_trace(11, 0, 0), some = run_trace(12, 0, 0.2);
    print_message("  out of order: %llu without reordering, %llu with 20%%\n",
                  (unsigned long long)none.out_of_order, (unsigned long long)some.out_of_order);
    /* lengths wrap every 1400 packets: exactly one drop in order by design */
    assert_int_equal(none.out_of_order, 1);
    assert_true(some.out_of_order > 50);
}

static void test_rx_ring_and_no_port(void **state)
{
    (void)state;
    struct erma_sim_cfg c;
    erma_sim_cfg_default(&c);
    struct net n;
    net_up(&n, "ring", &c, 8);
    for (int i = 0; i < 20; i++)
        send(&n, 0, 1, 100);
    while (erma_sim_next_event(n.sim) != UINT64_MAX) /* nobody reads meanwhile */
        erma_sim_advance_to(n.sim, erma_sim_next_event(n.sim));
    assert_int_equal(drain(&n, 1, NULL, 0), 8);
    struct erma_addr nowhere;
    assert_int_equal(erma_transport_resolve(n.tr[0], "sim://ring/1:999", &nowhere), ERMA_OK);
    static uint8_t buf[10];
    const struct erma_tx_pkt p = {.dst = &nowhere, .hdr = buf, .hdr_len = 10};
    assert_int_equal(erma_tx_burst(n.tr[0], &p, 1), 1);
    drain(&n, 1, NULL, 0);
    struct erma_sim_stats st;
    erma_sim_get_stats(n.sim, &st);
    assert_int_equal(st.drop_rx_full, 12);
    assert_int_equal(st.drop_no_port, 1);
    const struct erma_tx_pkt big = {.dst = &n.addr[1], .hdr = buf, .hdr_len = n.tr[0]->max_pkt + 1};
    assert_int_equal(erma_tx_burst(n.tr[0], &big, 1), ERMA_E2BIG);
    net_down(&n);
}

static void test_virtual_clock(void **state)
{
    (void)state;
    struct erma_sim_cfg c;
    erma_sim_cfg_default(&c);
    struct net n;
    net_up(&n, "clock", &c, 8);
    erma_sim_use_clock(n.sim);
    assert_int_equal(erma_now_ns(), 0);
    erma_sim_advance_to(n.sim, 123456);
    assert_int_equal(erma_now_ns(), 123456);
    erma_sim_advance_to(n.sim, 100); /* never backwards */
    assert_int_equal(erma_now_ns(), 123456);
    net_down(&n); /* destroying the fabric restores the real clock */
    assert_true(erma_now_ns() > 1000000000ull);
}

static void test_bad_input(void **state)
{
    (void)state;
    struct erma_sim_cfg c;
    erma_sim_cfg_default(&c);
    struct erma_sim *s, *dup;
    assert_int_equal(erma_sim_create("bad", &c, &s), ERMA_OK);
    assert_int_equal(erma_sim_create("bad", &c, &dup), ERMA_EINVAL);
    assert_int_equal(erma_sim_create("a/b", &c, &dup), ERMA_EINVAL);
    struct erma_sim_cfg w = c;
    w.paths = 0;
    assert_int_equal(erma_sim_create("w", &w, &dup), ERMA_EINVAL);
    w = c;
    w.loss = 1.5;
    assert_int_equal(erma_sim_create("w", &w, &dup), ERMA_EINVAL);
    struct erma_transport *t, *t2, *t3;
    assert_int_equal(erma_transport_open("sim://nofabric/0:1", NULL, &t), ERMA_EADDR);
    assert_int_equal(erma_transport_open("sim://bad/2:1", NULL, &t), ERMA_EADDR); /* 2 hosts */
    assert_int_equal(erma_transport_open("sim://bad/x:1", NULL, &t), ERMA_EADDR);
    assert_int_equal(erma_transport_open("sim://bad/0:70000", NULL, &t), ERMA_EADDR);
    assert_int_equal(erma_transport_open("sim://bad/0:5", NULL, &t), ERMA_OK);
    assert_int_equal(erma_transport_open("sim://bad/0:5", NULL, &t2), ERMA_EADDR); /* taken */
    assert_int_equal(erma_transport_open("sim://bad/0:0", NULL, &t2), ERMA_OK);
    assert_int_equal(erma_transport_open("sim://bad/0:0", NULL, &t3), ERMA_OK);
    assert_true(t2->local.raw[2] != t3->local.raw[2] || t2->local.raw[3] != t3->local.raw[3]);
    erma_transport_close(t3);
    erma_transport_close(t2);
    erma_transport_close(t);
    assert_int_equal(erma_transport_open("sim://bad/0:5", NULL, &t), ERMA_OK); /* free again */
    char uri[64]; /* an address printed resolves back to itself, fabric name and all */
    struct erma_addr back;
    assert_int_equal(erma_transport_addr_str(t, &t->local, uri, sizeof uri), ERMA_OK);
    assert_string_equal(uri, "sim://bad/0:5");
    assert_int_equal(erma_transport_resolve(t, uri, &back), ERMA_OK);
    assert_true(erma_addr_eq(&back, &t->local));
    erma_transport_close(t);
    erma_sim_destroy(s);
}

/* ---- per-path impairments (multipath) ---- */

static uint32_t probed_path;

static bool probe_tap(void *ctx, const struct erma_sim_event *ev, uint8_t *data)
{
    (void)ctx;
    (void)data;
    probed_path = ev->path;
    return false; /* dropped silently: no stats, no random draw */
}

/* The first source port >= from on host 0 whose flow to 1:101 hashes to path. */
static uint16_t port_on_path(struct erma_sim *sim, uint32_t path, uint16_t from)
{
    static const uint8_t b[1];
    erma_sim_set_tap(sim, probe_tap, NULL);
    for (uint16_t port = from;; port++) {
        assert_true(port != 0);
        assert_int_equal(erma_sim_inject(sim, 0, port, 1, 101, b, 1), ERMA_OK);
        if (probed_path == path) {
            erma_sim_set_tap(sim, NULL, NULL);
            return port;
        }
    }
}

static void inject_n(struct net *n, uint16_t src_port, uint32_t len, unsigned count)
{
    static uint8_t buf[1472];
    for (unsigned i = 0; i < count; i++)
        assert_int_equal(erma_sim_inject(n->sim, 0, src_port, 1, 101, buf, len), ERMA_OK);
}

static void test_path_loss(void **state)
{
    (void)state;
    struct erma_sim_cfg c;
    erma_sim_cfg_default(&c);
    c.paths = 4;
    c.path_loss[2] = 0.01;
    struct net n;
    net_up(&n, "pathloss", &c, 1 << 16);
    /* 400 flows, 300 packets each, interleaved */
    for (unsigned round = 0; round < 300; round++)
        for (uint16_t port = 0; port < 400; port++)
            inject_n(&n, (uint16_t)(3000 + port), 100, 1);
    const unsigned got = drain(&n, 1, NULL, 0);
    struct erma_sim_stats st;
    erma_sim_get_stats(n.sim, &st);
    uint64_t lost = 0;
    for (int p = 0; p < 4; p++) {
        print_message("  path %d: %llu packets, %llu lost\n", p,
                      (unsigned long long)st.path_pkts[p], (unsigned long long)st.path_drop_loss[p]);
        assert_int_equal(st.path_pkts[p] % 300, 0); /* a flow stays on one path */
        assert_int_equal(st.path_drop_buffer[p], 0);
        if (p != 2)
            assert_int_equal(st.path_drop_loss[p], 0);
        lost += st.path_drop_loss[p];
    }
    assert_true(st.path_pkts[2] >= 20000);
    const double rate = (double)st.path_drop_loss[2] / (double)st.path_pkts[2];
    assert_true(rate > 0.005 && rate < 0.02);
    assert_int_equal(lost, st.drop_loss);
    assert_int_equal(st.sent, 120000);
    assert_int_equal(got, st.sent - st.drop_loss);
    assert_int_equal(st.delivered, got);
    net_down(&n);
}

/* 4 paths at 10 Gb/s but path 3 at 1/40 of that; 1000-byte frames. */
static void slow_path_cfg(struct erma_sim_cfg *c)
{
    erma_sim_cfg_default(c);
    c->paths = 4;
    c->path_bps = 10000000000ull;
    c->path_rate_bps[3] = c->path_bps / 40;
}

static const uint32_t frame_len = 1000 - 42; /* 1000 bytes on the wire */

static void test_path_rate(void **state)
{
    (void)state;
    struct erma_sim_cfg c;
    slow_path_cfg(&c);
    struct net n;
    net_up(&n, "pathrate", &c, 1 << 16);
    const uint16_t fast = port_on_path(n.sim, 0, 1000), slow = port_on_path(n.sim, 3, 1000);
    const uint64_t link = ser(1000, c.link_bps), d = c.link_delay_ns;
    uint64_t gap[2];
    for (int k = 0; k < 2; k++) {
        const uint64_t bps = k ? c.path_rate_bps[3] : c.path_bps, t0 = erma_sim_now(n.sim);
        uint64_t when[8];
        inject_n(&n, k ? slow : fast, frame_len, 8);
        assert_int_equal(drain(&n, 1, when, 8), 8);
        /* uplink, link delay, the path's queue, egress, link delay */
        assert_int_equal(when[0], t0 + link + d + ser(1000, bps) + link + d);
        for (int i = 1; i < 8; i++)
            assert_int_equal(when[i] - when[i - 1], ser(1000, bps));
        gap[k] = when[1] - when[0];
    }
    print_message("  1000 B frames %llu ns apart on a fast path, %llu on the slow one\n",
                  (unsigned long long)gap[0], (unsigned long long)gap[1]);
    assert_int_equal(gap[0], 800);
    assert_int_equal(gap[1], 40 * gap[0]);
    net_down(&n);
}

static void test_path_buffer(void **state)
{
    (void)state;
    struct erma_sim_cfg c;
    slow_path_cfg(&c);
    c.switch_buffer = 30000;
    struct net n;
    net_up(&n, "pathbuf", &c, 1 << 16);
    /* 40 frames in a burst: the fast path drains 2/5 as fast as they come,
     * the slow one 1/100 */
    for (uint32_t p = 0; p < 4; p++) {
        inject_n(&n, port_on_path(n.sim, p, 1000), frame_len, 40);
        drain(&n, 1, NULL, 0);
    }
    struct erma_sim_stats st;
    erma_sim_get_stats(n.sim, &st);
    for (uint32_t p = 0; p < 4; p++)
        print_message("  path %u: %llu of %llu dropped, peak %llu B\n", p,
                      (unsigned long long)st.path_drop_buffer[p],
                      (unsigned long long)st.path_pkts[p],
                      (unsigned long long)erma_sim_path_max_bytes(n.sim, p));
    for (uint32_t p = 0; p < 3; p++) {
        assert_int_equal(st.path_drop_buffer[p], 0);
        assert_true(erma_sim_path_max_bytes(n.sim, p) < c.switch_buffer);
    }
    assert_true(st.path_drop_buffer[3] > 0);
    assert_int_equal(st.drop_buffer, st.path_drop_buffer[3]);
    assert_int_equal(st.delivered, 160 - st.drop_buffer);
    assert_true(erma_sim_path_max_bytes(n.sim, 3) <= c.switch_buffer);
    assert_true(erma_sim_path_max_bytes(n.sim, 3) > c.switch_buffer - 1000);
    assert_int_equal(erma_sim_path_max_bytes(n.sim, 4), 0);
    net_down(&n);
}

struct deliveries {
    uint64_t t[64];
    unsigned n;
};

static void on_deliver(void *ctx, const struct erma_sim_event *ev)
{
    struct deliveries *d = ctx;
    if (ev->kind == ERMA_SIM_DELIVER && d->n < 64)
        d->t[d->n++] = ev->time;
}

static void test_set_path_mid_run(void **state)
{
    (void)state;
    struct erma_sim_cfg c;
    slow_path_cfg(&c);
    c.path_bps = 0; /* for now: no path queues, only path 3's */
    c.path_rate_bps[3] = 0;
    struct net n;
    net_up(&n, "midrun", &c, 1 << 16);
    const uint16_t p0 = port_on_path(n.sim, 0, 1000), p1 = port_on_path(n.sim, 1, 1000);
    struct erma_sim_stats st;
    /* loss: nothing, then everything on path 1 only, then nothing again */
    const struct erma_sim_path lossy = {.loss = 1}, clean = {0};
    for (int phase = 0; phase < 3; phase++) {
        if (phase)
            assert_int_equal(erma_sim_set_path(n.sim, 1, phase == 1 ? &lossy : &clean), ERMA_OK);
        inject_n(&n, p0, 100, 50);
        inject_n(&n, p1, 100, 50);
        assert_int_equal(drain(&n, 1, NULL, 0), phase == 1 ? 50 : 100);
    }
    erma_sim_get_stats(n.sim, &st);
    assert_int_equal(st.path_drop_loss[1], 50);
    assert_int_equal(st.path_drop_loss[0], 0);
    assert_int_equal(st.drop_loss, 50);
    /* delay: a packet sent after the change takes the new one */
    const uint64_t link = ser(1000, c.link_bps), d = c.link_delay_ns;
    const struct erma_sim_path slower = {.delay_ns = 7000};
    assert_int_equal(erma_sim_set_path(n.sim, 1, &slower), ERMA_OK);
    struct erma_sim_path got;
    assert_int_equal(erma_sim_get_path(n.sim, 1, &got), ERMA_OK);
    assert_int_equal(got.delay_ns, 7000);
    assert_int_equal(got.bps, 0);
    assert_true(got.loss == 0);
    uint64_t t0 = erma_sim_now(n.sim), when[1];
    inject_n(&n, p1, frame_len, 1);
    assert_int_equal(drain(&n, 1, when, 1), 1);
    assert_int_equal(when[0], t0 + link + d + 7000 + link + d);
    /* rate: 10 frames queue on path 1 at 250 Mb/s; at T, mid-way through the
     * fourth, the path goes to 10 Gb/s and the rest of the queue with it */
    const struct erma_sim_path slow = {.bps = 250000000}, fast = {.bps = 10000000000ull};
    assert_int_equal(erma_sim_set_path(n.sim, 1, &slow), ERMA_OK);
    struct deliveries dl = {.n = 0};
    erma_sim_set_trace(n.sim, on_deliver, &dl);
    t0 = erma_sim_now(n.sim);
    inject_n(&n, p1, frame_len, 10);
    const uint64_t start = t0 + link + d; /* the first reaches the path */
    const uint64_t T = start + 3 * 32000 + 16000;
    erma_sim_advance_to(n.sim, T);
    assert_int_equal(erma_sim_set_path(n.sim, 1, &fast), ERMA_OK);
    drain(&n, 1, NULL, 0);
    assert_int_equal(dl.n, 10);
    for (unsigned k = 0; k < 10; k++) {
        const uint64_t left = k < 3 ? start + 32000 * (k + 1) : T + 16000 / 40 + 800 * (k - 3);
        assert_int_equal(dl.t[k], left + link + d);
    }
    /* ...and so do frames that reach it later */
    dl.n = 0;
    inject_n(&n, p1, frame_len, 3);
    drain(&n, 1, NULL, 0);
    assert_int_equal(dl.n, 3);
    assert_int_equal(dl.t[2] - dl.t[1], 800);
    assert_int_equal(dl.t[1] - dl.t[0], 800);
    /* bps 0 is path_bps again, here no serialisation on the path */
    assert_int_equal(erma_sim_set_path(n.sim, 1, &clean), ERMA_OK);
    dl.n = 0;
    inject_n(&n, p1, frame_len, 3);
    drain(&n, 1, NULL, 0);
    assert_int_equal(dl.t[1] - dl.t[0], link);
    erma_sim_get_stats(n.sim, &st);
    assert_int_equal(st.path_drop_buffer[1], 0);
    net_down(&n);
}

static void test_path_bad_input(void **state)
{
    (void)state;
    struct erma_sim_cfg c;
    erma_sim_cfg_default(&c);
    c.paths = 4;
    struct erma_sim *s;
    struct erma_sim_cfg w = c;
    w.path_loss[0] = -0.01;
    assert_int_equal(erma_sim_create("pbad", &w, &s), ERMA_EINVAL);
    w = c;
    w.path_loss[3] = 1.5;
    assert_int_equal(erma_sim_create("pbad", &w, &s), ERMA_EINVAL);
    w = c;
    w.path_loss[1] = NAN;
    assert_int_equal(erma_sim_create("pbad", &w, &s), ERMA_EINVAL);
    w = c;
    w.path_loss[4] = 7; /* beyond paths: ignored */
    w.path_loss[3] = 1;
    assert_int_equal(erma_sim_create("pbad", &w, &s), ERMA_OK);
    struct erma_sim_path p = {.delay_ns = 5, .bps = 1000000, .loss = 0.25}, q;
    assert_int_equal(erma_sim_set_path(s, 2, &p), ERMA_OK);
    const struct erma_sim_path bad[] = {{.loss = -0.01}, {.loss = 1.01}, {.loss = NAN}};
    for (unsigned i = 0; i < 3; i++)
        assert_int_equal(erma_sim_set_path(s, 2, &bad[i]), ERMA_EINVAL);
    assert_int_equal(erma_sim_set_path(s, 4, &p), ERMA_EINVAL);
    assert_int_equal(erma_sim_set_path(s, UINT32_MAX, &p), ERMA_EINVAL);
    assert_int_equal(erma_sim_set_path(s, 0, NULL), ERMA_EINVAL);
    assert_int_equal(erma_sim_set_path(NULL, 0, &p), ERMA_EINVAL);
    assert_int_equal(erma_sim_get_path(s, 4, &q), ERMA_EINVAL);
    assert_int_equal(erma_sim_get_path(s, 0, NULL), ERMA_EINVAL);
    assert_int_equal(erma_sim_get_path(s, 2, &q), ERMA_OK); /* the failed calls changed nothing */
    assert_int_equal(q.delay_ns, 5);
    assert_int_equal(q.bps, 1000000);
    assert_true(q.loss == 0.25);
    assert_int_equal(erma_sim_get_path(s, 3, &q), ERMA_OK);
    assert_true(q.loss == 1);
    assert_int_equal(erma_sim_path_max_bytes(s, 4), 0);
    erma_sim_destroy(s);
}

struct mp_run {
    struct erma_sim_stats st;
    struct trace t;
};

/* Flows over 4 impaired paths, with global loss and reordering, and paths
 * changed twice mid-run. */
static struct mp_run run_multipath(uint64_t seed, const char *name)
{
    struct erma_sim_cfg c;
    slow_path_cfg(&c);
    c.seed = seed;
    c.switch_buffer = 50000;
    c.loss = 0.01;
    c.reorder = 0.05;
    c.reorder_delay_ns = 3000;
    c.path_loss[1] = 0.03;
    c.path_delay_ns[2] = 2500;
    struct net n;
    net_up(&n, name, &c, 1 << 16);
    struct mp_run r;
    memset(&r, 0, sizeof r);
    erma_sim_set_trace(n.sim, on_event, &r.t);
    const struct erma_sim_path degrade = {.delay_ns = 4000, .bps = 1000000000, .loss = 0.1},
                               restore = {.loss = 0.001};
    for (uint32_t i = 0; i < 4000; i++) {
        inject_n(&n, (uint16_t)(5000 + i % 64), 16 + i % 1400, 1);
        if (i % 50 == 49)
            erma_sim_advance_to(n.sim, erma_sim_now(n.sim) + 20000);
        if (i == 1500)
            assert_int_equal(erma_sim_set_path(n.sim, 0, &degrade), ERMA_OK);
        if (i == 3000)
            assert_int_equal(erma_sim_set_path(n.sim, 3, &restore), ERMA_OK);
    }
    drain(&n, 1, NULL, 0);
    erma_sim_get_stats(n.sim, &r.st);
    net_down(&n);
    return r;
}

static void test_multipath_same_seed_same_run(void **state)
{
    (void)state;
    const struct mp_run a = run_multipath(21, "mp1"), b = run_multipath(21, "mp2"),
                        c = run_multipath(22, "mp3");
    assert_memory_equal(&a.st, &b.st, sizeof a.st);
    assert_int_equal(a.t.hash, b.t.hash);
    assert_int_equal(a.t.events, b.t.events);
    assert_true(a.t.hash != c.t.hash);
    /* every impairment showed up */
    assert_true(a.st.path_drop_loss[1] > a.st.path_drop_loss[2]);
    assert_true(a.st.path_drop_buffer[3] > 0 || a.st.path_drop_buffer[0] > 0);
    assert_true(a.st.reordered > 0);
    print_message("  loss per path %llu %llu %llu %llu, buffer drops %llu %llu %llu %llu\n",
                  (unsigned long long)a.st.path_drop_loss[0],
                  (unsigned long long)a.st.path_drop_loss[1],
                  (unsigned long long)a.st.path_drop_loss[2],
                  (unsigned long long)a.st.path_drop_loss[3],
                  (unsigned long long)a.st.path_drop_buffer[0],
                  (unsigned long long)a.st.path_drop_buffer[1],
                  (unsigned long long)a.st.path_drop_buffer[2],
                  (unsigned long long)a.st.path_drop_buffer[3]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_delay_and_bandwidth), cmocka_unit_test(test_loss_rate),
        cmocka_unit_test(test_switch_buffer),       cmocka_unit_test(test_ecmp),
        cmocka_unit_test(test_same_seed_same_run),  cmocka_unit_test(test_reordering),
        cmocka_unit_test(test_rx_ring_and_no_port), cmocka_unit_test(test_virtual_clock),
        cmocka_unit_test(test_bad_input),           cmocka_unit_test(test_path_loss),
        cmocka_unit_test(test_path_rate),           cmocka_unit_test(test_path_buffer),
        cmocka_unit_test(test_set_path_mid_run),    cmocka_unit_test(test_path_bad_input),
        cmocka_unit_test(test_multipath_same_seed_same_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
