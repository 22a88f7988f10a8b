/* transport/udp.c: two endpoints in one process on loopback. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <unistd.h>
#include <cmocka.h>

#include "erma/clock.h"
#include "erma/endpoint.h"
#include "erma/errors.h"
#include "erma/sdk/bundle.h"
#include "erma/sdk/transport_driver.h"
#include "udp_rx.h"

static void open_pair(const char *host, struct erma_transport **a, struct erma_transport **b,
                      struct erma_addr *b_addr)
{
    char uri[64];
    snprintf(uri, sizeof uri, "udp://%s:0", host);
    assert_int_equal(erma_transport_open(uri, NULL, a), ERMA_OK);
    assert_int_equal(erma_transport_open(uri, NULL, b), ERMA_OK);
    char name[96];
    assert_int_equal(erma_transport_addr_str(*b, &(*b)->local, name, sizeof name), ERMA_OK);
    assert_int_equal(erma_transport_resolve(*a, name, b_addr), ERMA_OK); /* round trip */
    assert_true(erma_addr_eq(b_addr, &(*b)->local));
}

static void exchange(const char *host)
{
    struct erma_transport *a, *b;
    struct erma_addr to_b;
    open_pair(host, &a, &b, &to_b);
    assert_int_equal(a->max_pkt, strchr(host, ':') ? 1452u : 1472u);
    static uint8_t data[32][1472], copy[32][1472];
    struct erma_tx_pkt tx[32];
    for (unsigned i = 0; i < 32; i++) {
        const uint32_t len = i == 31 ? a->max_pkt : 1 + i * 45;
        for (uint32_t k = 0; k < len; k++)
            data[i][k] = (uint8_t)(i * 7 + k);
        /* even packets in one segment, odd ones split in two */
        tx[i] = i % 2 ? (struct erma_tx_pkt){.dst = &to_b, .hdr = data[i], .hdr_len = len / 2,
                                              .data = data[i] + len / 2,
                                              .data_len = len - len / 2}
                      : (struct erma_tx_pkt){.dst = &to_b, .hdr = data[i], .hdr_len = len};
    }
    assert_int_equal(erma_tx_burst(a, tx, 32), 32);
    struct erma_rx_pkt rx[32];
    assert_int_equal(udp_receive(b, rx, copy, 32, ERMA_MAX_BURST, 2000000000ull, NULL), 32);
    for (unsigned i = 0; i < 32; i++) { /* loopback keeps order */
        assert_int_equal(rx[i].len, tx[i].hdr_len + tx[i].data_len);
        assert_memory_equal(rx[i].data, data[i], rx[i].len);
        assert_true(erma_addr_eq(&rx[i].src, &a->local));
    }
    assert_int_equal(a->stats.tx_pkts, 32);
    assert_int_equal(b->stats.rx_pkts, 32);
    /* an oversize packet fails the call before anything goes */
    struct erma_tx_pkt big[2] = {tx[0], {.dst = &to_b, .hdr = data[0], .hdr_len = a->max_pkt,
                                          .data = data[1], .data_len = 1}};
    assert_int_equal(erma_tx_burst(a, big, 2), ERMA_E2BIG);
    assert_int_equal(udp_receive(b, rx, copy, 1, ERMA_MAX_BURST, 50000000, NULL), 0);
    assert_int_equal(a->stats.tx_pkts, 32);
    erma_transport_close(a);
    erma_transport_close(b);
}

/* Sends one packet a to b, lets it wait wait_us in b's socket and reads
 * it: its rx_ns, and the times of the send and of the read. */
static uint64_t waited_one(struct erma_transport *a, struct erma_transport *b,
                           struct erma_tx_pkt *tx, unsigned wait_us, uint64_t *sent,
                           uint64_t *read_at)
{
    static uint8_t copy[1][1472];
    struct erma_rx_pkt rx[1];
    const uint64_t before = erma_now_ns();
    assert_int_equal(erma_tx_burst(a, tx, 1), 1);
    *sent = erma_now_ns();
    usleep(wait_us);
    *read_at = erma_now_ns();
    assert_int_equal(udp_receive(b, rx, copy, 1, ERMA_MAX_BURST, 2000000000ull, NULL), 1);
    assert_true(rx[0].rx_ns == 0 || rx[0].rx_ns + 100000 >= before); /* converted clocks */
    return rx[0].rx_ns;
}

/* Stamps on: a packet that waited 20 ms says so. The kernel starts
 * stamping on arrival a moment after a socket first asks (until then it
 * stamps at the read), so the first packets may not. */
static void assert_stamped(struct erma_transport *a, struct erma_transport *b,
                           struct erma_tx_pkt *tx)
{
    uint64_t sent, read_at, rx_ns = 0;
    for (int i = 0; i < 100; i++) {
        rx_ns = waited_one(a, b, tx, 5000, &sent, &read_at);
        if (rx_ns && rx_ns + 4000000 <= read_at)
            break;
    }
    rx_ns = waited_one(a, b, tx, 20000, &sent, &read_at);
    assert_true(rx_ns != 0);
    assert_true(rx_ns <= sent + 100000);
    assert_true(rx_ns + 15000000 <= read_at);
}

/* Each packet carries the kernel's receive stamp on erma_now_ns()'s clock:
 * when it arrived, not when it was read (the host delay starts there);
 * none (0) with ERMA_UDP_STAMP=0, or before the first burst of 8. */
static void test_receive_stamps(void **state)
{
    (void)state;
    for (int mode = 0; mode < 3; mode++) { /* ERMA_UDP_STAMP=1, =0, unset */
        setenv("ERMA_UDP_STAMP", mode == 0 ? "1" : "0", 1);
        if (mode == 2)
            unsetenv("ERMA_UDP_STAMP");
        struct erma_transport *a, *b;
        struct erma_addr to_b;
        open_pair("127.0.0.1", &a, &b, &to_b);
        unsetenv("ERMA_UDP_STAMP");
        static uint8_t data[8][64], copy[8][1472];
        struct erma_tx_pkt tx[8];
        for (unsigned i = 0; i < 8; i++)
            tx[i] = (struct erma_tx_pkt){.dst = &to_b, .hdr = data[i], .hdr_len = 64};
        uint64_t sent, read_at;
        if (mode == 0) {
            assert_stamped(a, b, tx);
        } else {
            for (int i = 0; i < 3; i++) /* single packets: no burst */
                assert_int_equal(waited_one(a, b, tx, 1000, &sent, &read_at), 0);
        }
        /* a burst of 8 turns them on lazily (mode 2), never with =0 */
        assert_int_equal(erma_tx_burst(a, tx, 8), 8);
        usleep(10000);
        struct erma_rx_pkt rx[8];
        assert_int_equal(udp_receive(b, rx, copy, 8, ERMA_MAX_BURST, 2000000000ull, NULL), 8);
        if (mode == 1)
            assert_int_equal(waited_one(a, b, tx, 1000, &sent, &read_at), 0);
        else
            assert_stamped(a, b, tx);
        erma_transport_close(a);
        erma_transport_close(b);
    }
}

/* UDP_GRO on b's socket: 1 on, 0 off, -1 where the kernel has none. */
static int gro_state(const struct erma_transport *b)
{
    int v = 0;
    socklen_t len = sizeof v;
    if (getsockopt(b->ops->poll_fd(b), SOL_UDP, UDP_GRO, &v, &len) != 0)
        return -1;
    return v != 0;
}

/* A burst turns the receive offload and the stamps on; OFFLOAD_QUIET_NS
 * (200 ms) without one turns them off again, so
 * that lone packets come by recvfrom once more, unstamped; a run of
 * same-size packets the peer sends by segmentation offload then comes
 * cut by the kernel, every packet whole, and the next burst turns both
 * on again. */
static void test_offload_quiet_time(void **state)
{
    (void)state;
    struct erma_transport *a, *b;
    struct erma_addr to_b;
    open_pair("127.0.0.1", &a, &b, &to_b);
    static uint8_t data[16][1000], copy[16][1472];
    struct erma_tx_pkt tx[16];
    for (unsigned i = 0; i < 16; i++) {
        memset(data[i], (int)i + 1, sizeof data[i]);
        tx[i] = (struct erma_tx_pkt){.dst = &to_b, .hdr = data[i], .hdr_len = sizeof data[i]};
    }
    struct erma_rx_pkt rx[16];
    for (int round = 1; round <= 2; round++) {
        assert_int_equal(erma_tx_burst(a, tx, 16), 16); /* a GSO run, or 16 datagrams */
        usleep(10000);
        assert_int_equal(udp_receive(b, rx, copy, 16, ERMA_MAX_BURST, 2000000000ull, NULL), 16);
        for (unsigned i = 0; i < 16; i++) {
            assert_int_equal(rx[i].len, sizeof data[i]);
            assert_memory_equal(rx[i].data, data[i], sizeof data[i]);
        }
        assert_int_equal(b->stats.rx_offload_on, (uint64_t)round);
        assert_true(gro_state(b) != 0);
        assert_stamped(a, b, tx);
        const uint64_t end = erma_now_ns() + 2000000000ull; /* 10x the quiet time */
        while (b->stats.rx_offload_off < (uint64_t)round && erma_now_ns() < end)
            assert_int_equal(erma_rx_burst(b, rx, ERMA_MAX_BURST), 0);
        assert_int_equal(b->stats.rx_offload_off, (uint64_t)round);
        assert_true(gro_state(b) <= 0);
        uint64_t sent, read_at;
        for (int i = 0; i < 3; i++) /* single packets: no stamps, no burst */
            assert_int_equal(waited_one(a, b, tx, 1000, &sent, &read_at), 0);
        assert_int_equal(b->stats.rx_offload_on, (uint64_t)round);
    }
    assert_int_equal(b->stats.rx_dropped, 0);
    erma_transport_close(a);
    erma_transport_close(b);
}

/* One datagram at a time (a ping-pong's case): a lone packet goes by
 * sendto (from one buffer when it has two segments of at most 256 bytes,
 * else by sendmsg) and, after a receive that found nothing, comes up by
 * recvfrom; every size arrives whole, from the right source, one packet
 * each. */
static void one_at_a_time(const char *host)
{
    struct erma_transport *a, *b;
    struct erma_addr to_b;
    open_pair(host, &a, &b, &to_b);
    static uint8_t data[1472], copy[1][1472];
    for (uint32_t k = 0; k < sizeof data; k++)
        data[k] = (uint8_t)(k * 13 + 5);
    const uint32_t sizes[] = {1, 16, 48, 255, 256, 257, 300, a->max_pkt};
    for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        for (uint32_t split = 0; split <= 1; split++) { /* header alone; header and data */
            const uint32_t hl = split ? sizes[i] / 2 : sizes[i];
            const struct erma_tx_pkt tx = {.dst = &to_b, .hdr = data, .hdr_len = hl,
                                           .data = split ? data + hl : NULL,
                                           .data_len = sizes[i] - hl};
            struct erma_rx_pkt rx[1];
            assert_int_equal(erma_rx_burst(b, rx, 1), 0); /* idle: the lone receive next */
            assert_int_equal(erma_tx_burst(a, &tx, 1), 1);
            assert_int_equal(udp_receive(b, rx, copy, 1, 1, 2000000000ull, NULL), 1);
            assert_int_equal(rx[0].len, sizes[i]);
            assert_memory_equal(rx[0].data, data, sizes[i]);
            assert_true(erma_addr_eq(&rx[0].src, &a->local));
        }
    }
    assert_int_equal(b->stats.rx_pkts, 16);
    assert_int_equal(b->stats.rx_dropped, 0);
    erma_transport_close(a);
    erma_transport_close(b);
}

static void test_one_at_a_time(void **state)
{
    (void)state;
    one_at_a_time("127.0.0.1");
    one_at_a_time("[::1]");
}

/* A datagram longer than max_pkt (a plain socket's) is dropped and
 * counted, and the next one still comes: without the receive offload its
 * buffer holds max_pkt bytes and the kernel cuts it; with it possible but
 * off (before a burst, after a quiet time) the 64 KiB buffer takes it
 * whole and the transport drops it. */
static void oversize_dropped(bool gro)
{
    if (!gro)
        setenv("ERMA_UDP_GRO", "0", 1);
    struct erma_transport *b;
    assert_int_equal(erma_transport_open("udp://127.0.0.1:0", NULL, &b), ERMA_OK);
    unsetenv("ERMA_UDP_GRO");
    const int fd = socket(AF_INET, SOCK_DGRAM, 0);
    assert_true(fd >= 0);
    static uint8_t big[4000], copy[1][1472];
    memset(big, 0x5a, sizeof big);
    const struct sockaddr *to = (const struct sockaddr *)b->local.raw;
    assert_int_equal(sendto(fd, big, b->max_pkt + 1, 0, to, b->local.len), b->max_pkt + 1);
    assert_int_equal(sendto(fd, big, sizeof big, 0, to, b->local.len), sizeof big);
    assert_int_equal(sendto(fd, big, 20, 0, to, b->local.len), 20);
    struct erma_rx_pkt rx[1];
    assert_int_equal(udp_receive(b, rx, copy, 1, 1, 2000000000ull, NULL), 1);
    assert_int_equal(rx[0].len, 20);
    assert_int_equal(b->stats.rx_dropped, 2);
    close(fd);
    erma_transport_close(b);
}

static void test_oversize_datagram_dropped(void **state)
{
    (void)state;
    oversize_dropped(false);
    oversize_dropped(true);
}

/* Polls an idle b until a call hands out packets or drops a datagram
 * (loopback may deliver a moment after the send); that call's count. */
static int poll_one(struct erma_transport *b, struct erma_rx_pkt *rx)
{
    const uint64_t dropped = b->stats.rx_dropped, end = erma_now_ns() + 2000000000ull;
    int n = 0;
    while (n == 0 && b->stats.rx_dropped == dropped && erma_now_ns() < end)
        n = erma_rx_burst(b, rx, ERMA_MAX_BURST);
    return n;
}

/* After a receive that found nothing, a datagram comes up alone by
 * recvfrom: one cut short or empty is dropped and counted, a bundle is
 * still split into its packets (one that announces a packet it lacks is
 * dropped, and leaves nothing held to hand out again), a plain one is
 * handed out whole with its source, once. */
static void test_lone_datagrams(void **state)
{
    (void)state;
    setenv("ERMA_UDP_GRO", "0", 1); /* buffers of max_pkt bytes */
    struct erma_transport *b;
    assert_int_equal(erma_transport_open("udp://127.0.0.1:0", NULL, &b), ERMA_OK);
    unsetenv("ERMA_UDP_GRO");
    const int fd = socket(AF_INET, SOCK_DGRAM, 0);
    assert_true(fd >= 0);
    const struct sockaddr *to = (const struct sockaddr *)b->local.raw;
    static uint8_t dg[4000];
    memset(dg, 0x5a, sizeof dg);
    struct erma_rx_pkt rx[ERMA_MAX_BURST];
    assert_int_equal(erma_rx_burst(b, rx, ERMA_MAX_BURST), 0);
    assert_int_equal(sendto(fd, dg, b->max_pkt + 1, 0, to, b->local.len), b->max_pkt + 1);
    assert_int_equal(poll_one(b, rx), 0);
    assert_int_equal(b->stats.rx_dropped, 1);
    assert_int_equal(sendto(fd, dg, 0, 0, to, b->local.len), 0);
    assert_int_equal(poll_one(b, rx), 0);
    assert_int_equal(b->stats.rx_dropped, 2);
    uint32_t len = ERMA_HDR_SIZE; /* a bundle of 20 and 30 bytes */
    erma_bundle_hdr(dg, 2);
    for (uint32_t k = 0, n = 20; k < 2; k++, n += 10) {
        erma_bundle_len(dg + len, n);
        memset(dg + len + ERMA_BUNDLE_LEN_SIZE, (int)k + 1, n);
        len += ERMA_BUNDLE_LEN_SIZE + n;
    }
    assert_int_equal(sendto(fd, dg, len, 0, to, b->local.len), len);
    assert_int_equal(poll_one(b, rx), 2);
    assert_int_equal(rx[0].len, 20);
    assert_int_equal(rx[1].len, 30);
    assert_int_equal(rx[0].data[19], 1);
    assert_int_equal(rx[1].data[29], 2);
    assert_int_equal(erma_rx_burst(b, rx, ERMA_MAX_BURST), 0);
    erma_bundle_hdr(dg, 1); /* a bundle that announces a packet and has none */
    assert_int_equal(sendto(fd, dg, ERMA_HDR_SIZE, 0, to, b->local.len), ERMA_HDR_SIZE);
    assert_int_equal(poll_one(b, rx), 0);
    assert_int_equal(b->stats.rx_dropped, 3);
    memset(dg, 9, 24);
    assert_int_equal(sendto(fd, dg, 24, 0, to, b->local.len), 24);
    assert_int_equal(poll_one(b, rx), 1);
    assert_int_equal(rx[0].len, 24);
    assert_int_equal(rx[0].data[23], 9);
    assert_int_equal(erma_rx_burst(b, rx, ERMA_MAX_BURST), 0); /* once: nothing held again */
    struct sockaddr_in me;
    socklen_t mlen = sizeof me;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&me, &mlen), 0);
    assert_int_equal(rx[0].src.len, sizeof me);
    assert_int_equal(memcmp(rx[0].src.raw + 2, &me.sin_port, 2), 0); /* from fd's port */
    assert_int_equal(b->stats.rx_pkts, 3);
    assert_int_equal(b->stats.rx_dropped, 3);
    close(fd);
    erma_transport_close(b);
}

static void test_exchange_v4(void **state)
{
    (void)state;
    exchange("127.0.0.1");
}

static void test_exchange_v6(void **state)
{
    (void)state;
    const int fd = socket(AF_INET6, SOCK_DGRAM, 0);
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    const int ok = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    if (fd >= 0)
        close(fd);
    if (!ok) {
        print_message("  skipped: this machine has no IPv6 loopback\n");
        skip();
    }
    exchange("[::1]");
}

static void test_bad_uris(void **state)
{
    (void)state;
    struct erma_transport *t;
    assert_int_equal(erma_transport_open(NULL, NULL, &t), ERMA_EADDR);
    assert_int_equal(erma_transport_open("udp://127.0.0.1:1", NULL, NULL), ERMA_EINVAL);
    assert_int_equal(erma_transport_open("bogus://x", NULL, &t), ERMA_ENOTSUP);
    assert_int_equal(erma_transport_open("no scheme", NULL, &t), ERMA_EADDR);
    assert_int_equal(erma_transport_open("udp://nohost", NULL, &t), ERMA_EADDR);
    assert_int_equal(erma_transport_open("udp://127.0.0.1:99999", NULL, &t), ERMA_EADDR);
    assert_int_equal(erma_transport_open("udp://127.0.0.1:", NULL, &t), ERMA_EADDR);
    assert_int_equal(erma_transport_open("udp://[::1:5", NULL, &t), ERMA_EADDR);
    const struct erma_transport_cfg bad_mtu = {.mtu = 100};
    assert_int_equal(erma_transport_open("udp://127.0.0.1:0", &bad_mtu, &t), ERMA_EINVAL);
    assert_true(erma_transport_available("udp"));
    assert_true(erma_transport_available("sim"));
    assert_false(erma_transport_available("carrier-pigeon"));
    /* a port in use: the address is the cause, not the system call */
    struct erma_transport *a;
    assert_int_equal(erma_transport_open("udp://127.0.0.1:0", NULL, &a), ERMA_OK);
    char uri[64];
    assert_int_equal(erma_transport_addr_str(a, &a->local, uri, sizeof uri), ERMA_OK);
    assert_int_equal(erma_transport_open(uri, NULL, &t), ERMA_EADDR);
    struct erma_addr x;
    assert_int_equal(erma_transport_resolve(a, "sim://f/0:1", &x), ERMA_EADDR);
    char tiny[8];
    assert_int_equal(erma_transport_addr_str(a, &a->local, tiny, sizeof tiny), ERMA_EINVAL);
    erma_transport_close(a);
}

/* endpoint.h's promise: an endpoint on a UDP port in use fails with
 * ERMA_EADDR, alone and as a virtual path of a fixed port. */
static void test_endpoint_port_taken(void **state)
{
    (void)state;
    struct erma_endpoint *a, *b;
    assert_int_equal(erma_endpoint_create("udp://127.0.0.1:0", 0, NULL, &a), ERMA_OK);
    char uri[64];
    assert_int_equal(erma_endpoint_uri(a, uri, sizeof uri), ERMA_OK);
    assert_int_equal(erma_endpoint_create(uri, 0, NULL, &b), ERMA_EADDR);
    /* a's port is the second path of the endpoint on the port below it */
    const char *colon = strrchr(uri, ':');
    char below[64];
    snprintf(below, sizeof below, "udp://127.0.0.1:%d", atoi(colon + 1) - 1);
    const struct erma_endpoint_cfg two = {.paths = 2};
    assert_int_equal(erma_endpoint_create(below, 0, &two, &b), ERMA_EADDR);
    erma_endpoint_destroy(a);
}

static void test_jumbo_and_loss_injection(void **state)
{
    (void)state;
    const struct erma_transport_cfg jumbo = {.mtu = 9000};
    struct erma_transport *a, *b;
    assert_int_equal(erma_transport_open("udp://127.0.0.1:0", &jumbo, &a), ERMA_OK);
    assert_int_equal(a->max_pkt, 8972);
    const struct erma_transport_cfg lossy = {.rx_drop = 0.5, .drop_seed = 3};
    assert_int_equal(erma_transport_open("udp://127.0.0.1:0", &lossy, &b), ERMA_OK);
    static uint8_t buf[8972];
    struct erma_tx_pkt p = {.dst = &b->local, .hdr = buf, .hdr_len = 1000};
    unsigned sent = 0;
    for (int i = 0; i < 64; i++) { /* 2000 packets in bursts, received as they come */
        for (int k = 0; k < 32; k++)
            sent += (unsigned)erma_tx_burst(a, &p, 1);
        struct erma_rx_pkt rx[ERMA_MAX_BURST];
        /* until the burst is in (2 s at most: a busy machine stalls us) */
        const uint64_t end = erma_now_ns() + 2000000000ull;
        while (b->stats.rx_pkts < sent && erma_now_ns() < end)
            erma_rx_burst(b, rx, ERMA_MAX_BURST);
    }
    const uint64_t got = b->stats.rx_pkts, dropped = b->stats.rx_injected_drops;
    print_message("  %u sent, %llu received, %llu dropped by injection\n", sent,
                  (unsigned long long)(got - dropped), (unsigned long long)dropped);
    assert_int_equal(got, sent); /* the kernel lost none */
    assert_true(dropped > sent * 4 / 10 && dropped < sent * 6 / 10);
    const struct erma_tx_pkt too_big = {.dst = &b->local, .hdr = buf, .hdr_len = 8973};
    assert_int_equal(erma_tx_burst(a, &too_big, 1), ERMA_E2BIG);
    erma_transport_close(a);
    erma_transport_close(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exchange_v4),
        cmocka_unit_test(test_exchange_v6),
        cmocka_unit_test(test_bad_uris),
        cmocka_unit_test(test_endpoint_port_taken),
        cmocka_unit_test(test_jumbo_and_loss_injection),
        cmocka_unit_test(test_receive_stamps),
        cmocka_unit_test(test_offload_quiet_time),
        cmocka_unit_test(test_one_at_a_time),
        cmocka_unit_test(test_oversize_datagram_dropped),
        cmocka_unit_test(test_lone_datagrams),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
