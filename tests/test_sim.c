/* transport/sim.c: the simulated fabric in virtual time. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "erma/clock.h"
#include "erma/errors.h"
#include "erma/sim.h"
#include "erma/transport_driver.h"

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
    const struct erma_tx_pkt p = {&n->addr[to], buf, len, NULL, 0};
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
        const struct erma_tx_pkt p = {&n.addr[1], buf, 64, NULL, 0};
        for (int i = 0; i < 10; i++)
            assert_int_equal(erma_tx_burst(t, &p, 1), 1);
        erma_transport_close(t);
    }
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
    const struct erma_tx_pkt p = {&nowhere, buf, 10, NULL, 0};
    assert_int_equal(erma_tx_burst(n.tr[0], &p, 1), 1);
    drain(&n, 1, NULL, 0);
    struct erma_sim_stats st;
    erma_sim_get_stats(n.sim, &st);
    assert_int_equal(st.drop_rx_full, 12);
    assert_int_equal(st.drop_no_port, 1);
    const struct erma_tx_pkt big = {&n.addr[1], buf, n.tr[0]->max_pkt + 1, NULL, 0};
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_delay_and_bandwidth), cmocka_unit_test(test_loss_rate),
        cmocka_unit_test(test_switch_buffer),       cmocka_unit_test(test_ecmp),
        cmocka_unit_test(test_same_seed_same_run),  cmocka_unit_test(test_reordering),
        cmocka_unit_test(test_rx_ring_and_no_port), cmocka_unit_test(test_virtual_clock),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
