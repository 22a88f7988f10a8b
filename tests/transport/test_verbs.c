/*
 * test_verbs - the verbs (UD) transport. Bad URIs fail with ERMA_EADDR. With
 * no usable RDMA device (none, iWARP only, every port down), open must fail
 * with ERMA_ENOTSUP and the test skips (77), saying why. With one, two
 * endpoints on it exchange byte-exact packets both ways, max_pkt-sized ones
 * included, and an oversize send fails with ERMA_E2BIG. tests/verbs runs it
 * on a mock libibverbs too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "erma/clock.h"
#include "erma/errors.h"
#include "erma/sdk/transport_driver.h"

#define N 64

#include "check.h"

static uint8_t pat(unsigned seq, unsigned i)
{
    return (uint8_t)(seq * 29u + i * 3u + 1u);
}

/* Sends N packets from a to b's address; b checks each byte. */
static void exchange(struct erma_transport *a, struct erma_transport *b)
{
    static uint8_t buf[N][9000];
    struct erma_addr dst;
    char s[128];
    CHECK(erma_transport_addr_str(b, &b->local, s, sizeof s) == ERMA_OK, "addr_str");
    CHECK(erma_transport_resolve(a, s, &dst) == ERMA_OK && erma_addr_eq(&dst, &b->local),
          "resolve %s", s);
    const uint32_t max = a->max_pkt < b->max_pkt ? a->max_pkt : b->max_pkt;
    struct erma_tx_pkt tx[N];
    for (unsigned i = 0; i < N; i++) {
        const uint32_t len = i % 3 == 0 ? max : 4 + (i * 37) % (max - 4);
        buf[i][0] = (uint8_t)i;
        for (uint32_t k = 1; k < len; k++)
            buf[i][k] = pat(i, k);
        tx[i] = (struct erma_tx_pkt){.dst = &dst, .hdr = buf[i], .hdr_len = len > 16 ? 16 : len,
                                     .data = len > 16 ? buf[i] + 16 : NULL,
                                     .data_len = len > 16 ? len - 16 : 0};
    }
    struct erma_tx_pkt big = tx[0];
    big.data_len++;
    CHECK(erma_tx_burst(a, &big, 1) == ERMA_E2BIG, "oversize send");
    /* The address handle is made off the data path: until it is, packets
     * to b are dropped. One small packet until b has it (10 s at most). */
    const uint8_t hello[16] = {0xff};
    const struct erma_tx_pkt h = {.dst = &dst, .hdr = hello, .hdr_len = sizeof hello};
    struct erma_rx_pkt rx[ERMA_MAX_BURST];
    int primed = 0;
    for (uint64_t t0 = erma_now_ns(); !primed && erma_now_ns() - t0 < 10000000000ull;) {
        erma_tx_burst(a, &h, 1);
        primed = erma_rx_burst(b, rx, ERMA_MAX_BURST);
    }
    CHECK(primed > 0, "no packet from a reached b in 10 s");
    unsigned sent = 0, got = 0;
    bool seen[N] = {false};
    const uint64_t end = erma_now_ns() + 10000000000ull;
    while (got < N && erma_now_ns() < end) {
        if (sent < N) {
            const int r = erma_tx_burst(a, tx + sent, N - sent);
            CHECK(r >= 0, "tx_burst: %d", r);
            sent += r > 0 ? (unsigned)r : 0;
        }
        const int n = erma_rx_burst(b, rx, ERMA_MAX_BURST);
        for (int i = 0; i < n; i++) {
            if (rx[i].len == sizeof hello && rx[i].data[0] == 0xff)
                continue; /* a late one of those */
            const unsigned seq = rx[i].data[0];
            const uint32_t len = seq % 3 == 0 ? max : 4 + (seq * 37) % (max - 4);
            bool ok = seq < N && !seen[seq] && rx[i].len == len &&
                      erma_addr_eq(&rx[i].src, &a->local);
            for (uint32_t k = 1; ok && k < len; k++)
                ok = rx[i].data[k] == pat(seq, k);
            CHECK(ok, "packet %u not byte-exact or not from the sender", seq);
            if (seq < N)
                seen[seq] = true;
            got++;
        }
    }
    CHECK(got == N, "received %u of %u", got, N);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!erma_transport_available("verbs")) {
        printf("SKIP: the verbs transport is not built\n");
        return 77;
    }
    struct erma_transport *a = NULL, *b = NULL;
    CHECK(erma_transport_open("verbs://dev:x", NULL, &a) == ERMA_EADDR, "bad port");
    CHECK(erma_transport_open("verbs://dev?qkey=1", NULL, &a) == ERMA_EADDR, "bad key");
    int ndev = 0;
    struct ibv_device **list = ibv_get_device_list(&ndev);
    if (list)
        ibv_free_device_list(list);
    const int rc = erma_transport_open("verbs://", NULL, &a);
    if (ndev == 0 || rc == ERMA_ENOTSUP) {
        CHECK(rc == ERMA_ENOTSUP, "open without a device gave %d (%s), want ERMA_ENOTSUP", rc,
              erma_strerror(rc));
        if (failures)
            return 1;
        printf("SKIP: %s (open failed with ERMA_ENOTSUP as it must; the log above says why)\n",
               ndev ? "no usable RDMA device: iWARP only or no active port" : "no RDMA device");
        return 77;
    }
    CHECK(rc == ERMA_OK, "open verbs://: %s", erma_strerror(rc));
    if (rc == ERMA_OK) {
        const int rc2 = erma_transport_open("verbs://", NULL, &b);
        CHECK(rc2 == ERMA_OK, "second open: %s", erma_strerror(rc2));
        if (rc2 == ERMA_OK) {
            exchange(a, b);
            exchange(b, a);
            erma_transport_close(b);
        }
        erma_transport_close(a);
    }
    printf("%s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
