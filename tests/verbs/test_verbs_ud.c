/*
 * test_verbs_ud NAME - the verbs transport on the mock libibverbs
 * (mock_verbs.h), one check per defect of issue 19:
 *
 *   mtu     a peer with a larger packet size (MTU 9000 against 1500) gets
 *           its max_pkt packets through: receive buffers fit the port MTU
 *   grh     the sender's address comes out right from a RoCE v1 GRH, a
 *           RoCE v2 IPv6 header whose GID has 0x45 where an IPv4 header
 *           would start, a RoCE v2 IPv4 header, and InfiniBand; replies to
 *           it arrive
 *   errors  after a failed send (QP to SQE), a fatal QP event (ERR) at the
 *           sender and at the receiver, and a port down and up again,
 *           traffic flows again; async events are read without blocking
 *   ah      address handles are created off the calling thread, a failed
 *           one is not retried for every packet, and after 1500 peers a
 *           new one is still reached (the cache evicts)
 *   open    iWARP devices and down ports are passed over, and open fails
 *           with ERMA_ENOTSUP when nothing else is there; bad URIs
 *           ERMA_EADDR
 *   gid     the default GID is the port's RoCE v2 one (IPv4-mapped first)
 *   post    a post that fails at a WR mid-chain returns the packets before
 *           it (the rest are sent again), link_bps and base_rtt_ns are set,
 *           rx_drop drops its fraction
 *
 * Every check ends with the transports closed, the mock seeing no breach
 * of the verbs rules and nothing left allocated. Loops are bounded in
 * count and time (10 s and more, for runs beside a CPU hog).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "erma/clock.h"
#include "erma/errors.h"
#include "erma/sdk/transport_driver.h"
#include "mock_verbs.h"

#define WAIT_NS 10000000000ull

#include "check.h"

static struct erma_transport *open_tr(const char *uri, uint32_t mtu, double drop)
{
    struct erma_transport *t = NULL;
    const struct erma_transport_cfg cfg = {.mtu = mtu, .rx_ring = 256, .rx_drop = drop,
                                           .drop_seed = 7};
    const int rc = erma_transport_open(uri, &cfg, &t);
    CHECK(rc == ERMA_OK, "open %s: %s", uri, erma_strerror(rc));
    return rc == ERMA_OK ? t : NULL;
}

static uint8_t pat(unsigned seq, unsigned i)
{
    return (uint8_t)(seq * 29u + i * 3u + 1u);
}

/* A packet of len bytes numbered seq (byte 0 and 1), from pat(). */
static void fill(uint8_t *buf, unsigned seq, uint32_t len)
{
    buf[0] = (uint8_t)seq;
    buf[1] = (uint8_t)(seq >> 8);
    for (uint32_t k = 2; k < len; k++)
        buf[k] = pat(seq, k);
}

static bool exact(const struct erma_rx_pkt *p, uint32_t len, unsigned *seq)
{
    if (p->len != len || len < 2)
        return false;
    *seq = p->data[0] | (unsigned)p->data[1] << 8;
    for (uint32_t k = 2; k < len; k++)
        if (p->data[k] != pat(*seq, k))
            return false;
    return true;
}

/* Sends n packets of len bytes numbered from 0 to dst from a until b has
 * each once (resending what is missing: address handles come up
 * asynchronously and sends may be lost), WAIT_NS at most. Returns how many
 * distinct packets b got byte-exact from a's address; *bad counts the
 * others. */
static unsigned deliver(struct erma_transport *a, struct erma_transport *b,
                        const struct erma_addr *dst, unsigned n, uint32_t len, unsigned *bad)
{
    static uint8_t buf[9000];
    static bool seen[4096];
    unsigned got = 0;
    *bad = 0;
    memset(seen, 0, sizeof seen);
    const uint64_t end = erma_now_ns() + WAIT_NS;
    for (unsigned next = 0, round = 0; got < n && erma_now_ns() < end; round++) {
        while (seen[next % n])
            next++;
        fill(buf, next % n, len);
        const struct erma_tx_pkt p = {.dst = dst, .hdr = buf, .hdr_len = 16, .data = buf + 16,
                                      .data_len = len - 16};
        if (erma_tx_burst(a, &p, 1) == 1)
            next++;
        for (int spin = 0; spin < 4; spin++) {
            struct erma_rx_pkt rx[ERMA_MAX_BURST];
            const int r = erma_rx_burst(b, rx, ERMA_MAX_BURST);
            for (int i = 0; i < r; i++) {
                unsigned seq;
                if (!exact(&rx[i], len, &seq) || seq >= n || !erma_addr_eq(&rx[i].src, &a->local))
                    (*bad)++;
                else if (!seen[seq] && (seen[seq] = true))
                    got++;
            }
        }
        if (round % 64 == 63)
            usleep(100); /* let the resolver thread run on a loaded machine */
    }
    return got;
}

static void check_mock_clean(const char *what)
{
    struct mock_verbs_stats s;
    mock_verbs_stats(&s);
    CHECK(s.violations == 0, "%s: %llu breaches of the verbs rules, the first: %s", what,
          (unsigned long long)s.violations, s.first_violation);
    CHECK(s.objects_live == 0, "%s: %llu verbs objects left after close", what,
          (unsigned long long)s.objects_live);
}

static void close2(struct erma_transport *a, struct erma_transport *b, const char *what)
{
    erma_transport_close(a);
    erma_transport_close(b);
    check_mock_clean(what);
}

/* ---- the checks ---- */

static void test_mtu(void)
{
    struct erma_transport *a = open_tr("verbs://mock0:1", 9000, 0);
    struct erma_transport *b = open_tr("verbs://mock0:1", 1500, 0);
    if (!a || !b)
        return;
    CHECK(a->max_pkt == 4096 && b->max_pkt == 1472, "max_pkt %u and %u, want 4096 and 1472",
          a->max_pkt, b->max_pkt);
    unsigned bad;
    const unsigned got = deliver(a, b, &b->local, 20, a->max_pkt, &bad);
    struct mock_verbs_stats s;
    mock_verbs_stats(&s);
    CHECK(got == 20 && bad == 0, "a %u-byte peer got %u of 20 packets of %u B through (%u bad)",
          a->max_pkt, got, a->max_pkt, bad);
    CHECK(s.len_errors == 0 && b->stats.rx_dropped == 0,
          "%llu receives ended in IBV_WC_LOC_LEN_ERR, %llu dropped",
          (unsigned long long)s.len_errors, (unsigned long long)b->stats.rx_dropped);
    CHECK(deliver(b, a, &a->local, 20, b->max_pkt, &bad) == 20 && bad == 0, "and back");
    close2(a, b, "mtu");
}

/* a and b on uri exchange both ways, b replying to the source address of
 * what it received. */
static void grh_pair(const char *uri, const char *what)
{
    struct erma_transport *a = open_tr(uri, 1500, 0), *b = open_tr(uri, 1500, 0);
    if (!a || !b) {
        erma_transport_close(a);
        erma_transport_close(b);
        return;
    }
    char s[128] = "?";
    erma_transport_addr_str(a, &a->local, s, sizeof s);
    unsigned bad;
    unsigned got = deliver(a, b, &b->local, 16, 200, &bad);
    CHECK(got == 16 && bad == 0, "%s (%s): %u of 16 arrived from the sender's address, %u "
          "with another source or wrong bytes", what, s, got, bad);
    /* the reply goes to the address the packet came from */
    struct erma_rx_pkt rx[ERMA_MAX_BURST];
    struct erma_addr src = {0};
    uint8_t buf[64] = {0};
    const struct erma_tx_pkt p = {.dst = &b->local, .hdr = buf, .hdr_len = 64};
    const uint64_t end = erma_now_ns() + WAIT_NS;
    bool have = false;
    while (!have && erma_now_ns() < end) {
        erma_tx_burst(a, &p, 1);
        const int r = erma_rx_burst(b, rx, ERMA_MAX_BURST);
        if (r > 0) {
            src = rx[0].src;
            have = true;
        }
    }
    got = have ? deliver(b, a, &src, 16, 300, &bad) : 0;
    CHECK(got == 16 && bad == 0, "%s: replies to the source of a received packet: %u of 16",
          what, got);
    close2(a, b, what);
}

static void test_grh(void)
{
    grh_pair("verbs://mock0?gid=4", "RoCE v2 over IPv6, 0x45 in the GID");
    grh_pair("verbs://mock0?gid=3", "RoCE v2 over IPv4");
    grh_pair("verbs://mock0?gid=1", "RoCE v2 over IPv6, link-local");
    grh_pair("verbs://mock0?gid=0", "RoCE v1");
    setenv("MOCK_VERBS_DEVICES", "ib0:ib", 1);
    grh_pair("verbs://ib0", "InfiniBand");
}

static uint32_t qpn_of(const struct erma_transport *t)
{
    return (uint32_t)t->local.raw[19] << 16 | (uint32_t)t->local.raw[20] << 8 | t->local.raw[21];
}

static void test_errors(void)
{
    struct erma_transport *a = open_tr("verbs://", 1500, 0), *b = open_tr("verbs://", 1500, 0);
    if (!a || !b)
        return;
    unsigned bad, got = deliver(a, b, &b->local, 64, 500, &bad);
    CHECK(got == 64, "before any error: %u of 64", got);

    mock_verbs_fail_sends(1, IBV_WC_GENERAL_ERR);
    got = deliver(a, b, &b->local, 64, 500, &bad);
    CHECK(got == 64, "after a failed send: %u of 64 arrived", got);
    CHECK(mock_verbs_qp_state(qpn_of(a)) == IBV_QPS_RTS, "the sender's QP is in state %d, not RTS",
          mock_verbs_qp_state(qpn_of(a)));
    CHECK(a->stats.tx_errors >= 1, "the failed send was not counted");

    CHECK(mock_verbs_qp_fatal(qpn_of(a)) == 0, "no QP %u", qpn_of(a));
    got = deliver(a, b, &b->local, 64, 500, &bad);
    CHECK(got == 64, "after a fatal error of the sender's QP: %u of 64 arrived", got);

    CHECK(mock_verbs_qp_fatal(qpn_of(b)) == 0, "no QP %u", qpn_of(b));
    got = deliver(a, b, &b->local, 64, 500, &bad);
    CHECK(got == 64, "after a fatal error of the receiver's QP: %u of 64 arrived", got);

    mock_verbs_port("mock0", false);
    uint8_t buf[100] = {0};
    const struct erma_tx_pkt p = {.dst = &b->local, .hdr = buf, .hdr_len = 100};
    const uint64_t before = a->stats.tx_pkts;
    for (int i = 0; i < 4096; i++) /* the event is read within ASYNC_EVERY bursts */
        erma_tx_burst(a, &p, 1);
    CHECK(a->stats.tx_pkts < before + 4096, "the port went down and all %llu sends were posted",
          (unsigned long long)(a->stats.tx_pkts - before));
    mock_verbs_port("mock0", true);
    for (int i = 0; i < 4096; i++)
        erma_tx_burst(a, &p, 1);
    got = deliver(a, b, &b->local, 64, 500, &bad);
    CHECK(got == 64, "after the port came back: %u of 64 arrived", got);
    close2(a, b, "errors");
}

static void test_ah(void)
{
    /* c, on a device of its own, has a GID (so an address handle) of its own */
    setenv("MOCK_VERBS_DEVICES", "mock0:eth,mock1:eth", 1);
    struct erma_transport *a = open_tr("verbs://mock0", 1500, 0);
    struct erma_transport *b = open_tr("verbs://mock0", 1500, 0);
    if (!a || !b)
        return;
    mock_verbs_mark_thread();
    mock_verbs_ah_delay_us(20000); /* the kernel resolving a MAC */
    unsigned bad, got = deliver(a, b, &b->local, 8, 200, &bad);
    mock_verbs_ah_delay_us(0);
    struct mock_verbs_stats s;
    mock_verbs_stats(&s);
    CHECK(got == 8, "%u of 8 through a slow address handle", got);
    CHECK(s.ah_on_marked_thread == 0, "%llu address handles created on the sending thread",
          (unsigned long long)s.ah_on_marked_thread);

    /* a failing peer: asked for once, not once a packet */
    struct erma_addr gone;
    CHECK(erma_transport_resolve(a, "verbs://fd00::dead/0/999", &gone) == ERMA_OK, "resolve");
    mock_verbs_ah_fail((const union ibv_gid *)gone.raw);
    const uint64_t calls0 = s.ah_calls;
    uint8_t buf[64] = {0};
    const struct erma_tx_pkt p = {.dst = &gone, .hdr = buf, .hdr_len = 64};
    int accepted = 0;
    const uint64_t t0 = erma_now_ns();
    for (int i = 0; i < 200; i++) {
        accepted += erma_tx_burst(a, &p, 1);
        usleep(1000);
    }
    /* one try a second at most (the first, then one per second passed) */
    const uint64_t tries = 2 + (erma_now_ns() - t0) / 1000000000ull;
    mock_verbs_stats(&s);
    CHECK(accepted == 200, "%d of 200 sends to an unreachable peer returned (dropped)", accepted);
    CHECK(s.ah_calls - calls0 <= tries, "%llu ibv_create_ah calls for one failing peer in 200 "
          "sends, want %llu at most", (unsigned long long)(s.ah_calls - calls0),
          (unsigned long long)tries);
    mock_verbs_ah_fail(NULL);

    /* 1500 peers, then b again: the cache makes room */
    static struct erma_addr many[1500];
    for (unsigned i = 0; i < 1500; i++) {
        char u[64];
        snprintf(u, sizeof u, "verbs://fd00::1:%x/0/%u", i, 100 + i);
        erma_transport_resolve(a, u, &many[i]);
    }
    const uint64_t end = erma_now_ns() + WAIT_NS;
    do {
        for (unsigned i = 0; i < 1500; i++) {
            const struct erma_tx_pkt q = {.dst = &many[i], .hdr = buf, .hdr_len = 64};
            erma_tx_burst(a, &q, 1);
        }
        usleep(1000);
        mock_verbs_stats(&s);
    } while (s.ah_calls - calls0 < 1500 && erma_now_ns() < end);
    struct erma_transport *c = open_tr("verbs://mock1", 1500, 0);
    got = c ? deliver(a, c, &c->local, 8, 200, &bad) : 0;
    mock_verbs_stats(&s);
    CHECK(got == 8, "after 1500 other peers: %u of 8 reached a new one", got);
    CHECK(s.ah_live <= 1024 + 1, "%llu address handles alive", (unsigned long long)s.ah_live);
    erma_transport_close(c);
    close2(a, b, "ah");
}

static int open_rc(const char *devices, const char *uri)
{
    setenv("MOCK_VERBS_DEVICES", devices, 1);
    struct erma_transport *t = NULL;
    const int rc = erma_transport_open(uri, NULL, &t);
    erma_transport_close(t);
    return rc;
}

static void test_open(void)
{
    int rc = open_rc("iw0:iwarp", "verbs://");
    CHECK(rc == ERMA_ENOTSUP, "iWARP only: %s, want ERMA_ENOTSUP", erma_strerror(rc));
    rc = open_rc("iw0:iwarp,mock1:eth", "verbs://");
    CHECK(rc == ERMA_OK, "iWARP, then RoCE: %s", erma_strerror(rc));
    rc = open_rc("iw0:iwarp,mock1:eth", "verbs://iw0");
    CHECK(rc == ERMA_ENOTSUP, "iWARP by name: %s, want ERMA_ENOTSUP", erma_strerror(rc));
    rc = open_rc("m0:eth:down", "verbs://");
    CHECK(rc == ERMA_ENOTSUP, "a down port: %s, want ERMA_ENOTSUP", erma_strerror(rc));
    rc = open_rc("m0:eth:down,m1:eth", "verbs://");
    CHECK(rc == ERMA_OK, "a down port, then an active one: %s", erma_strerror(rc));
    rc = open_rc("m0:eth", "verbs://m0:2");
    CHECK(rc == ERMA_ENOTSUP, "port 2 of a 1-port device: %s, want ERMA_ENOTSUP",
          erma_strerror(rc));
    rc = open_rc("m0:eth", "verbs://nosuch");
    CHECK(rc == ERMA_ENOTSUP, "no such device: %s, want ERMA_ENOTSUP", erma_strerror(rc));
    static const char *const bad[] = {"verbs://m0:x", "verbs://m0?qkey=1", "verbs://m0:999",
                                      "verbs://m0?gid=", "verbs://m0?gid=300"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        rc = open_rc("m0:eth", bad[i]);
        CHECK(rc == ERMA_EADDR, "%s: %s, want ERMA_EADDR", bad[i], erma_strerror(rc));
    }
    rc = open_rc("m0:eth", "verbs://m0?gid=9");
    CHECK(rc == ERMA_ENOTSUP, "a GID index past the table: %s, want ERMA_ENOTSUP",
          erma_strerror(rc));
    check_mock_clean("open");
}

static void test_gid(void)
{
    struct erma_transport *t = open_tr("verbs://", 1500, 0);
    char s[128] = "";
    if (t)
        erma_transport_addr_str(t, &t->local, s, sizeof s);
    CHECK(strncmp(s, "verbs://::ffff:10.0.0.1/", 24) == 0,
          "the default address on RoCE is %s, want the RoCE v2 GID ::ffff:10.0.0.1", s);
    erma_transport_close(t);
    setenv("MOCK_VERBS_DEVICES", "ib0:ib", 1);
    t = open_tr("verbs://", 1500, 0);
    s[0] = 0;
    if (t)
        erma_transport_addr_str(t, &t->local, s, sizeof s);
    CHECK(strncmp(s, "verbs://fe80::202:c9ff:fe00:0/1:", 32) == 0,
          "the default address on InfiniBand is %s, want GID 0 and LID 1", s);
    erma_transport_close(t);
    check_mock_clean("gid");
}

static void test_post(void)
{
    struct erma_transport *a = open_tr("verbs://", 1500, 0), *b = open_tr("verbs://", 1500, 0.5);
    if (!a || !b)
        return;
    CHECK(a->hints.link_bps == 100000000000ull, "link_bps %llu, want 100 Gb/s (EDR 4x)",
          (unsigned long long)a->hints.link_bps);
    CHECK(a->hints.base_rtt_ns > 0 && a->hints.base_rtt_ns < 1000000, "base_rtt_ns %llu",
          (unsigned long long)a->hints.base_rtt_ns);

    /* rx_drop: half of what arrives is dropped, counted */
    unsigned bad;
    deliver(a, b, &b->local, 1, 100, &bad); /* the address handle */
    const uint64_t rx0 = b->stats.rx_pkts, inj0 = b->stats.rx_injected_drops;
    uint8_t buf[100] = {0};
    const struct erma_tx_pkt p = {.dst = &b->local, .hdr = buf, .hdr_len = 100};
    unsigned sent = 0, seen = 0;
    for (int i = 0; i < 400 && sent < 200; i++) {
        sent += erma_tx_burst(a, &p, 1) == 1;
        struct erma_rx_pkt rx[ERMA_MAX_BURST];
        seen += (unsigned)erma_rx_burst(b, rx, ERMA_MAX_BURST);
    }
    for (int i = 0; i < 100; i++) {
        struct erma_rx_pkt rx[ERMA_MAX_BURST];
        seen += (unsigned)erma_rx_burst(b, rx, ERMA_MAX_BURST);
    }
    const uint64_t inj = b->stats.rx_injected_drops - inj0;
    CHECK(inj >= 50 && inj <= 150 && seen + inj == b->stats.rx_pkts - rx0,
          "rx_drop 0.5: %llu of %llu received packets dropped, %u returned",
          (unsigned long long)inj, (unsigned long long)(b->stats.rx_pkts - rx0), seen);
    erma_transport_close(b);
    b = open_tr("verbs://", 1500, 0);
    if (!b)
        return;
    deliver(a, b, &b->local, 1, 100, &bad);

    /* a post that fails at WR 3 of 8 */
    struct erma_tx_pkt pk[8];
    static uint8_t bufs[8][200];
    for (unsigned i = 0; i < 8; i++) {
        fill(bufs[i], i, 200);
        pk[i] = (struct erma_tx_pkt){.dst = &b->local, .hdr = bufs[i], .hdr_len = 200};
    }
    mock_verbs_bad_wr(3, ENOMEM);
    int r = erma_tx_burst(a, pk, 8);
    CHECK(r == 3, "a post failing at WR 3 of 8: tx_burst returned %d, want 3", r);
    if (r >= 0 && r < 8)
        r += erma_tx_burst(a, pk + r, 8 - (unsigned)r);
    CHECK(r == 8, "the rest sent again: %d of 8", r);
    unsigned got = 0, other = 0;
    bool seen8[8] = {false};
    const uint64_t end = erma_now_ns() + WAIT_NS;
    while (got < 8 && erma_now_ns() < end) {
        struct erma_rx_pkt rx[ERMA_MAX_BURST];
        const int n = erma_rx_burst(b, rx, ERMA_MAX_BURST);
        for (int i = 0; i < n; i++) {
            unsigned seq;
            if (exact(&rx[i], 200, &seq) && seq < 8 && !seen8[seq] && (seen8[seq] = true))
                got++;
            else
                other++;
        }
    }
    CHECK(got == 8 && other == 0, "%u of 8 arrived once each, %u others", got, other);
    close2(a, b, "post");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    static const struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {{"mtu", test_mtu},   {"grh", test_grh}, {"errors", test_errors},
                 {"ah", test_ah},     {"open", test_open}, {"gid", test_gid},
                 {"post", test_post}};
    if (!erma_transport_available("verbs")) {
        printf("SKIP: the verbs transport is not built\n");
        return 77;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: test_verbs_ud mtu|grh|errors|ah|open|gid|post\n");
        return 2;
    }
    setenv("MOCK_VERBS_DEVICES", "mock0:eth", 0);
    for (size_t i = 0; i < sizeof tests / sizeof *tests; i++)
        if (strcmp(argv[1], tests[i].name) == 0) {
            tests[i].fn();
            printf("%s: %s\n", argv[1], failures ? "FAILED" : "ok");
            return failures ? 1 : 0;
        }
    fprintf(stderr, "no test %s\n", argv[1]);
    return 2;
}
