/* transport/udp.c's segmentation offload (UDP_SEGMENT) and receive offload
 * (UDP_GRO) on loopback: runs of packets go out as super-datagrams and come
 * back cut into the same packets, in order, with their sources; a plain
 * socket sees one datagram per packet or bundles of small ones (coalescing);
 * a hostile sender's super-datagram of 1-byte segments is cut, over many
 * bursts, without harm. ctest runs it with the offloads and coalescing
 * (test_udp_gso) and again with ERMA_UDP_GSO=0 ERMA_UDP_COALESCE=0
 * (test_udp_gso_off): every assertion holds both ways. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "erma/clock.h"
#include "erma/errors.h"
#include "erma/sdk/bundle.h"
#include "erma/sdk/transport_driver.h"
#include "udp_rx.h"

#define NPKT 32
#define TIMEOUT_NS 2000000000ull /* 10x what loopback needs, on a busy machine */

static struct erma_transport *open_v4(void)
{
    struct erma_transport *t;
    assert_int_equal(erma_transport_open("udp://127.0.0.1:0", NULL, &t), ERMA_OK);
    return t;
}

/* Receives want packets at most per_call at a time: the rest of a cut
 * super-datagram waits for the next call. */
static unsigned receive(struct erma_transport *tr, struct erma_rx_pkt *out, uint8_t (*copy)[1472],
                        unsigned want, unsigned per_call)
{
    unsigned largest;
    const unsigned got = udp_receive(tr, out, copy, want, per_call, TIMEOUT_NS, &largest);
    assert_true(largest <= per_call);
    return got;
}

/* Nothing more arrives within 50 ms (a late packet would show here). */
static void nothing_more(struct erma_transport *tr)
{
    struct erma_rx_pkt rx[ERMA_MAX_BURST];
    const uint64_t end = erma_now_ns() + 50000000;
    while (erma_now_ns() < end)
        assert_int_equal(erma_rx_burst(tr, rx, ERMA_MAX_BURST), 0);
}

static uint32_t fill(uint8_t *p, uint32_t len, unsigned i)
{
    for (uint32_t k = 0; k < len; k++)
        p[k] = (uint8_t)(i * 31 + k);
    return len;
}

/* A burst whose runs end every way a run can: a shorter packet (10 x 1000
 * then 400), a longer one (5 x 300 then 1472), another destination in
 * between (3 to c), the burst's end; some packets in two segments. */
static const uint32_t sizes[NPKT] = {1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000,
                                     400,  300,  300,  300,  300,  300,  1472, 200,  200,  200,
                                     64,   64,   64,   64,   64,   64,   64,   64,   64,   64,
                                     64,   17};
static const bool to_c[NPKT] = {[17] = true, [18] = true, [19] = true};

static void runs(unsigned per_call)
{
    struct erma_transport *a = open_v4(), *b = open_v4(), *c = open_v4();
    static uint8_t data[NPKT][1472], copy[NPKT][1472];
    struct erma_tx_pkt tx[NPKT];
    for (unsigned i = 0; i < NPKT; i++) {
        const uint32_t len = fill(data[i], sizes[i], i);
        const struct erma_addr *dst = to_c[i] ? &c->local : &b->local;
        tx[i] = i % 3 == 1 ? (struct erma_tx_pkt){.dst = dst, .hdr = data[i], .hdr_len = 16,
                                                  .data = data[i] + 16, .data_len = len - 16}
                           : (struct erma_tx_pkt){.dst = dst, .hdr = data[i], .hdr_len = len};
    }
    assert_int_equal(erma_tx_burst(a, tx, NPKT), NPKT);
    struct erma_rx_pkt rx[NPKT];
    assert_int_equal(receive(b, rx, copy, NPKT - 3, per_call), NPKT - 3);
    for (unsigned i = 0, k = 0; i < NPKT; i++) { /* loopback keeps order */
        if (to_c[i])
            continue;
        assert_int_equal(rx[k].len, sizes[i]);
        assert_memory_equal(rx[k].data, data[i], sizes[i]);
        assert_true(erma_addr_eq(&rx[k].src, &a->local));
        k++;
    }
    assert_int_equal(receive(c, rx, copy, 3, per_call), 3);
    for (unsigned k = 0; k < 3; k++)
        assert_memory_equal(rx[k].data, data[17 + k], 200);
    nothing_more(b);
    assert_int_equal(b->stats.rx_pkts, NPKT - 3);
    assert_int_equal(a->stats.tx_pkts, NPKT);
    erma_transport_close(a);
    erma_transport_close(b);
    erma_transport_close(c);
}

static void test_runs(void **state)
{
    (void)state;
    runs(ERMA_MAX_BURST);
}

static void test_runs_three_per_call(void **state)
{
    (void)state;
    runs(3);
}

static int plain_socket(struct sockaddr_in *sa)
{
    const int fd = socket(AF_INET, SOCK_DGRAM, 0);
    assert_true(fd >= 0);
    *sa = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof *sa;
    assert_int_equal(bind(fd, (struct sockaddr *)sa, sizeof *sa), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)sa, &len), 0);
    const struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* What goes on the wire: one datagram per packet, or with coalescing
 * (not ERMA_UDP_COALESCE=0) bundles of the small ones, whatever the
 * segmentation offload did; every packet in order, intact. */
static void test_plain_receiver_sees_packets(void **state)
{
    (void)state;
    struct sockaddr_in sa;
    const int fd = plain_socket(&sa);
    struct erma_addr dst = {.len = sizeof sa};
    memcpy(dst.raw, &sa, sizeof sa);
    struct erma_transport *a = open_v4();
    static uint8_t data[NPKT][1472];
    struct erma_tx_pkt tx[NPKT];
    for (unsigned i = 0; i < NPKT; i++)
        tx[i] = (struct erma_tx_pkt){.dst = &dst, .hdr = data[i],
                                     .hdr_len = fill(data[i], i < 20 ? 1200 : 60 + i, i)};
    assert_int_equal(erma_tx_burst(a, tx, NPKT), NPKT);
    static uint8_t buf[65536];
    unsigned got = 0, datagrams = 0;
    while (got < NPKT) {
        const ssize_t n = recv(fd, buf, sizeof buf, 0);
        assert_true(n > 0);
        assert_true((size_t)n <= a->max_pkt);
        datagrams++;
        struct erma_bundle_reader r;
        if (!erma_bundle_open(&r, buf, (size_t)n)) {
            assert_int_equal(n, tx[got].hdr_len);
            assert_memory_equal(buf, data[got++], (size_t)n);
            continue;
        }
        const uint8_t *pkt;
        uint32_t len;
        while (erma_bundle_next(&r, &pkt, &len)) {
            assert_true(got < NPKT);
            assert_int_equal(len, tx[got].hdr_len);
            assert_memory_equal(pkt, data[got++], len);
        }
        assert_true(erma_bundle_done(&r));
    }
    const char *env = getenv("ERMA_UDP_COALESCE");
    if (env && strcmp(env, "0") == 0) {
        assert_int_equal(datagrams, NPKT);
        assert_int_equal(a->stats.tx_bundles, 0);
    } else {
        assert_true(datagrams <= 22); /* the twelve small ones, all of other sizes, share */
        assert_true(a->stats.tx_bundles >= 1 && a->stats.tx_bundles <= 2);
    }
    print_message("  %u packets in %u datagrams\n", NPKT, datagrams);
    erma_transport_close(a);
    close(fd);
}

/* Sends len bytes as one super-datagram of seg-byte segments, from a plain
 * socket (the kernel refuses when it has no UDP_SEGMENT: then skips). */
static bool send_segmented(int fd, const struct erma_addr *to, const uint8_t *p, size_t len,
                           uint16_t seg)
{
    struct iovec iov = {(void *)p, len};
    _Alignas(struct cmsghdr) uint8_t ctrl[CMSG_SPACE(sizeof seg)] = {0};
    struct msghdr m = {.msg_name = (void *)to->raw, .msg_namelen = to->len, .msg_iov = &iov,
                       .msg_iovlen = 1, .msg_control = ctrl, .msg_controllen = sizeof ctrl};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    *c = (struct cmsghdr){.cmsg_len = CMSG_LEN(sizeof seg), .cmsg_level = SOL_UDP,
                          .cmsg_type = UDP_SEGMENT};
    memcpy(CMSG_DATA(c), &seg, sizeof seg);
    return sendmsg(fd, &m, 0) == (ssize_t)len;
}

/* A peer's super-datagrams of tiny segments (the kernel takes at most 64
 * segments in one): cut into that many packets over as many bursts as it
 * takes, each right, then nothing more. */
static void test_hostile_tiny_segments(void **state)
{
    (void)state;
    struct sockaddr_in sa;
    const int fd = plain_socket(&sa);
    struct erma_transport *b = open_v4();
    enum { SENDS = 50, SEGS = 64 };
    static uint8_t data[SENDS * SEGS], copy[SENDS * SEGS][1472];
    static struct erma_rx_pkt rx[SENDS * SEGS];
    fill(data, sizeof data, 5);
    if (!send_segmented(fd, &b->local, data, SEGS, 1)) {
        print_message("  skipped: this kernel has no UDP_SEGMENT (%s)\n", strerror(errno));
        erma_transport_close(b);
        close(fd);
        skip();
    }
    for (unsigned k = 1; k < SENDS; k++)
        assert_true(send_segmented(fd, &b->local, data + k * SEGS, SEGS, 1));
    assert_int_equal(receive(b, rx, copy, SENDS * SEGS, ERMA_MAX_BURST), SENDS * SEGS);
    for (unsigned i = 0; i < SENDS * SEGS; i++) {
        assert_int_equal(rx[i].len, 1);
        assert_int_equal(copy[i][0], data[i]);
    }
    assert_true(send_segmented(fd, &b->local, data, 400, 7)); /* 57 x 7 and 1 */
    assert_int_equal(receive(b, rx, copy, 58, 5), 58);
    assert_int_equal(rx[56].len, 7);
    assert_int_equal(rx[57].len, 1);
    assert_memory_equal(copy[56], data + 392, 7);
    assert_int_equal(copy[57][0], data[399]);
    nothing_more(b);
    erma_transport_close(b);
    close(fd);
}

/* Writes a bundle header announcing count at p, then the packets of lens
 * (each filled by fill()); returns the bytes. */
static size_t make_bundle(uint8_t *p, uint32_t count, const uint32_t *lens, unsigned n)
{
    erma_bundle_hdr(p, count);
    size_t at = ERMA_HDR_SIZE;
    for (unsigned i = 0; i < n; i++) {
        erma_bundle_len(p + at, lens[i]);
        at += ERMA_BUNDLE_LEN_SIZE + fill(p + at + ERMA_BUNDLE_LEN_SIZE, lens[i], i);
    }
    return at;
}

/* A peer's bundles, good and bad, from a plain socket: every packet of a
 * good one comes up with the sender's address; a bad one (a count that
 * disagrees, a length past the end or of 0) gives up the packets before
 * the fault, counts one drop and harms nothing after it; a header that is
 * not exactly a bundle's (no packets, reserved fields set) comes up as one
 * packet, which erma_hdr_check() rejects; bundles as GSO segments are
 * split too. */
static void test_hostile_bundles(void **state)
{
    (void)state;
    struct sockaddr_in sa;
    const int fd = plain_socket(&sa);
    struct erma_transport *b = open_v4();
    static uint8_t dg[8][256], copy[16][1472];
    static struct erma_rx_pkt rx[16];
    size_t len[8];
    const uint32_t three[] = {20, 30, 40}, two[] = {10, 10}, past[] = {10, 500}, zero[] = {10, 0};
    len[0] = make_bundle(dg[0], 3, three, 3);      /* 3 packets */
    len[1] = make_bundle(dg[1], 5, two, 2);        /* 2, then a drop */
    len[2] = make_bundle(dg[2], 2, past, 1);       /* 1, then a drop */
    erma_bundle_len(dg[2] + len[2], 500);
    memset(dg[2] + len[2] + 2, 7, 5);
    len[2] += 7;
    len[3] = make_bundle(dg[3], 0, NULL, 0);       /* no bundle: one packet */
    len[4] = make_bundle(dg[4], 2, two, 2);        /* reserved bits: one packet */
    dg[4][15] |= 0x10;
    len[5] = make_bundle(dg[5], 2, zero, 2);       /* 1, then a drop */
    len[6] = fill(dg[6], 24, 9);                   /* a plain packet */
    for (unsigned i = 0; i < 7; i++)
        assert_int_equal(sendto(fd, dg[i], len[i], 0, (const struct sockaddr *)b->local.raw,
                                b->local.len), (ssize_t)len[i]);
    assert_int_equal(receive(b, rx, copy, 10, 2), 10);
    const uint32_t want[10] = {20, 30, 40, 10, 10, 10, 16, 40, 10, 24};
    for (unsigned i = 0; i < 10; i++) {
        assert_int_equal(rx[i].len, want[i]);
        assert_int_equal(rx[i].src.len, sizeof sa);
        assert_memory_equal(rx[i].src.raw, &sa, sizeof sa);
    }
    assert_memory_equal(copy[2], dg[0] + ERMA_HDR_SIZE + 2 + 20 + 2 + 30 + 2, 40);
    assert_memory_equal(copy[9], dg[6], 24);
    struct erma_hdr h; /* the two that are no bundles, as packets: rejected above */
    assert_int_equal(erma_hdr_check(copy[6], rx[6].len, &h), ERMA_EBADPKT);
    assert_int_equal(erma_hdr_check(copy[7], rx[7].len, &h), ERMA_EBADPKT);
    nothing_more(b);
    assert_int_equal(b->stats.rx_dropped, 3);
    /* two bundles of two as one super-datagram of 40-byte segments */
    len[7] = make_bundle(dg[7], 2, two, 2);
    memcpy(dg[7] + len[7], dg[7], len[7]);
    if (send_segmented(fd, &b->local, dg[7], 2 * len[7], (uint16_t)len[7])) {
        assert_int_equal(receive(b, rx, copy, 4, ERMA_MAX_BURST), 4);
        for (unsigned i = 0; i < 4; i++)
            assert_memory_equal(copy[i], dg[7] + ERMA_HDR_SIZE + 2 + (i % 2) * 12, 10);
        nothing_more(b);
    } else {
        print_message("  bundles as segments: skipped, no UDP_SEGMENT (%s)\n", strerror(errno));
    }
    erma_transport_close(b);
    close(fd);
}

/* 40 datagrams queued, taken 32 at most a call: no call comes back empty
 * while some are still queued (callers take an empty or short burst for
 * an empty queue: the one-sided engine times its ops out then). */
static void test_no_empty_burst_while_queued(void **state)
{
    (void)state;
    enum { N = 40 };
    struct sockaddr_in sa;
    const int fd = plain_socket(&sa);
    struct erma_transport *b = open_v4();
    static uint8_t data[N][64];
    for (unsigned i = 0; i < N; i++) {
        fill(data[i], sizeof data[i], i);
        assert_int_equal(sendto(fd, data[i], sizeof data[i], 0,
                                (const struct sockaddr *)b->local.raw, b->local.len),
                         (ssize_t)sizeof data[i]);
    }
    struct erma_rx_pkt rx[ERMA_MAX_BURST];
    unsigned got = 0, calls = 0;
    while (got < N && calls++ < 100) {
        const int n = erma_rx_burst(b, rx, ERMA_MAX_BURST);
        assert_true(n > 0);
        for (int i = 0; i < n; i++, got++)
            assert_memory_equal(rx[i].data, data[got], sizeof data[got]);
    }
    assert_int_equal(got, N);
    nothing_more(b);
    erma_transport_close(b);
    close(fd);
}

int main(void)
{
    const char *env = getenv("ERMA_UDP_GSO"), *co = getenv("ERMA_UDP_COALESCE");
    printf("udp segmentation and receive offload: %s; coalescing: %s\n",
           env && strcmp(env, "0") == 0 ? "off (ERMA_UDP_GSO=0)" : "on where the kernel has them",
           co && strcmp(co, "0") == 0 ? "off (ERMA_UDP_COALESCE=0)" : "on");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_runs),
        cmocka_unit_test(test_runs_three_per_call),
        cmocka_unit_test(test_plain_receiver_sees_packets),
        cmocka_unit_test(test_hostile_tiny_segments),
        cmocka_unit_test(test_hostile_bundles),
        cmocka_unit_test(test_no_empty_burst_while_queued),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
