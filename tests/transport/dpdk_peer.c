/*
 * dpdk_peer - one side of the dpdk transport test (test_dpdk.sh runs it in
 * two network namespaces joined by a veth pair).
 *
 *   dpdk_peer echo   URI PEER_IP            echo every packet to its sender,
 *                                           checking its bytes; exit on "stop"
 *                                           (or fail after 15 s)
 *   dpdk_peer client URI1 URI2 SERVER_URI   two endpoints in this process
 *                                           exchange checked batches with the
 *                                           echo server (fail after 12 s)
 *   dpdk_peer open   URI                    open, print the local address
 *
 * Packets: 4-byte sequence number, 2-byte origin UDP port, 2-byte length,
 * then pattern bytes derived from all three. Exit 0 on success, 1 on any
 * mismatch or timeout, 77 when open says the transport cannot run here.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "erma/clock.h"
#include "erma/errors.h"
#include "erma/sdk/transport_driver.h"

#define ROUNDS 40
#define BATCH 16
#define STOP_SEQ 0xffffffffu

static uint8_t pattern(uint32_t seq, uint16_t port, uint32_t i)
{
    return (uint8_t)(seq * 131u + port * 17u + i * 7u + (i >> 8));
}

/* Fills buf with packet seq from port, len bytes (len >= 8). */
static void fill(uint8_t *buf, uint32_t seq, uint16_t port, uint16_t len)
{
    memcpy(buf, &seq, 4);
    memcpy(buf + 4, &port, 2);
    memcpy(buf + 6, &len, 2);
    for (uint32_t i = 8; i < len; i++)
        buf[i] = pattern(seq, port, i);
}

/* True when p is a well-formed packet; gives its seq and origin port. */
static bool check(const uint8_t *p, uint32_t len, uint32_t *seq, uint16_t *port)
{
    uint16_t l;
    if (len < 8)
        return false;
    memcpy(seq, p, 4);
    memcpy(port, p + 4, 2);
    memcpy(&l, p + 6, 2);
    if (l != len)
        return false;
    for (uint32_t i = 8; i < len; i++)
        if (p[i] != pattern(*seq, *port, i))
            return false;
    return true;
}

static uint16_t local_port(const struct erma_transport *tr)
{
    uint16_t p;
    memcpy(&p, tr->local.raw + 4, 2); /* dpdk address: IPv4, port, MAC */
    return ntohs(p);
}

static int open_or_exit(const char *uri, struct erma_transport **tr)
{
    const int rc = erma_transport_open(uri, NULL, tr);
    if (rc != ERMA_OK) {
        printf("open %s: %s\n", uri, erma_strerror(rc));
        exit(rc == ERMA_ENOTSUP ? 77 : 1);
    }
    char s[128];
    erma_transport_addr_str(*tr, &(*tr)->local, s, sizeof s);
    printf("opened %s, max_pkt %u\n", s, (*tr)->max_pkt);
    return rc;
}

static int echo(const char *uri, const char *peer_ip)
{
    struct erma_transport *tr;
    open_or_exit(uri, &tr);
    fflush(stdout);
    char peer[64];
    struct erma_addr a;
    /* Nothing received from the peer yet: no MAC, no address. */
    snprintf(peer, sizeof peer, "dpdk://%s:9", peer_ip);
    if (erma_transport_resolve(tr, peer, &a) != ERMA_EADDR) {
        printf("FAIL: resolved %s without knowing its MAC\n", peer);
        return 1;
    }
    uint64_t verified = 0, learned = 0;
    const uint64_t end = erma_now_ns() + 15000000000ull;
    int status = 1;
    for (uint64_t iter = 0; iter < 4000000000ull; iter++) {
        struct erma_rx_pkt rx[ERMA_MAX_BURST];
        struct erma_tx_pkt tx[ERMA_MAX_BURST];
        const int n = erma_rx_burst(tr, rx, ERMA_MAX_BURST);
        unsigned m = 0;
        bool stop = false;
        for (int i = 0; i < n; i++) {
            uint32_t seq;
            uint16_t port;
            if (!check(rx[i].data, rx[i].len, &seq, &port)) {
                printf("FAIL: packet of %u bytes is not byte-exact\n", rx[i].len);
                goto out;
            }
            if (seq == STOP_SEQ) {
                stop = true;
                continue;
            }
            if (!learned) {
                /* Now its MAC is known from the frame's source. */
                if (erma_transport_resolve(tr, peer, &a) != ERMA_OK ||
                    memcmp(a.raw + 6, rx[i].src.raw + 6, 6) != 0) {
                    printf("FAIL: MAC of %s not learned from a received packet\n", peer_ip);
                    goto out;
                }
                learned = 1;
            }
            verified++;
            tx[m++] = (struct erma_tx_pkt){.dst = &rx[i].src, .hdr = rx[i].data,
                                           .hdr_len = rx[i].len};
        }
        for (unsigned done = 0, tries = 0; done < m && tries < 100000; tries++) {
            const int s = erma_tx_burst(tr, tx + done, m - done);
            if (s < 0) {
                printf("FAIL: echo tx: %s\n", erma_strerror(s));
                goto out;
            }
            done += (unsigned)s;
        }
        if (stop) {
            status = 0;
            break;
        }
        if ((iter & 1023) == 0 && erma_now_ns() > end) {
            printf("FAIL: no stop packet within 15 s\n");
            break;
        }
    }
out:
    printf("echo: %llu packets verified and echoed, rx %llu dropped %llu, tx %llu\n",
           (unsigned long long)verified, (unsigned long long)tr->stats.rx_pkts,
           (unsigned long long)tr->stats.rx_dropped, (unsigned long long)tr->stats.tx_pkts);
    erma_transport_close(tr);
    return status;
}

struct ep {
    struct erma_transport *tr;
    struct erma_addr server;
    uint16_t port;
    uint32_t next_seq;
    uint64_t outstanding; /* bit i: seq base+i awaits its echo */
    uint32_t base;
    uint64_t echoes;
};

static uint16_t pick_len(const struct ep *e, uint32_t seq)
{
    static const uint16_t sizes[] = {8, 9, 64, 100, 512, 1000, 1471, 1472};
    const uint32_t max = e->tr->max_pkt;
    uint16_t len = sizes[seq % (sizeof sizes / sizeof sizes[0])];
    if (seq % 4 == 3)
        len = (uint16_t)max; /* max_pkt every fourth packet */
    return len > max ? (uint16_t)max : len;
}

/* Sends one batch of BATCH packets, half of them as two segments. */
static int send_batch(struct ep *e)
{
    static uint8_t bufs[BATCH][9000];
    struct erma_tx_pkt tx[BATCH];
    e->base = e->next_seq;
    e->outstanding = (1ull << BATCH) - 1;
    for (unsigned i = 0; i < BATCH; i++) {
        const uint32_t seq = e->next_seq++;
        const uint16_t len = pick_len(e, seq);
        fill(bufs[i], seq, e->port, len);
        const uint32_t split = i % 2 ? (len > 16 ? 16 : 8) : len;
        tx[i] = (struct erma_tx_pkt){.dst = &e->server, .hdr = bufs[i], .hdr_len = split,
                                     .data = split < len ? bufs[i] + split : NULL,
                                     .data_len = len - split};
    }
    unsigned done = 0;
    for (unsigned tries = 0; done < BATCH && tries < 100000; tries++) {
        const int s = erma_tx_burst(e->tr, tx + done, BATCH - done);
        if (s < 0) {
            printf("FAIL: tx: %s\n", erma_strerror(s));
            return 1;
        }
        done += (unsigned)s;
    }
    return done == BATCH ? 0 : 1;
}

/* Takes what e received; fails on a packet that is not e's or not exact. */
static int poll_ep(struct ep *e)
{
    struct erma_rx_pkt rx[ERMA_MAX_BURST];
    const int n = erma_rx_burst(e->tr, rx, 4); /* small bursts: leave some for the other */
    for (int i = 0; i < n; i++) {
        uint32_t seq;
        uint16_t port;
        if (!check(rx[i].data, rx[i].len, &seq, &port)) {
            printf("FAIL: port %u: echo of %u bytes is not byte-exact\n", e->port, rx[i].len);
            return 1;
        }
        if (seq == 0 && port == e->port) { /* a start-up probe's echo, maybe a late one */
            if (e->base == 0)
                e->outstanding &= ~1ull;
            continue;
        }
        if (port != e->port) {
            printf("FAIL: port %u received a packet of port %u\n", e->port, port);
            return 1;
        }
        if (seq - e->base >= BATCH || !(e->outstanding & (1ull << (seq - e->base)))) {
            printf("FAIL: port %u: unexpected or duplicate seq %u\n", e->port, seq);
            return 1;
        }
        e->outstanding &= ~(1ull << (seq - e->base));
        e->echoes++;
    }
    return 0;
}

static int client(const char *uri1, const char *uri2, const char *server)
{
    struct ep e[2] = {0};
    open_or_exit(uri1, &e[0].tr);
    open_or_exit(uri2, &e[1].tr);
    /* Endpoint 0 resolves the server by its mac= key, endpoint 1 by the
     * static map in ERMA_DPDK_NEIGH (the URI without its query). */
    char bare[128];
    snprintf(bare, sizeof bare, "%.*s", (int)strcspn(server, "?"), server);
    for (int i = 0; i < 2; i++) {
        e[i].port = local_port(e[i].tr);
        const char *u = i == 0 ? server : bare;
        if (erma_transport_resolve(e[i].tr, u, &e[i].server) != ERMA_OK) {
            printf("FAIL: cannot resolve %s\n", u);
            return 1;
        }
    }
    if (!erma_addr_eq(&e[0].server, &e[1].server)) {
        printf("FAIL: %s and %s resolve differently\n", server, bare);
        return 1;
    }
    /* The local address prints as a URI that resolves back to itself. */
    char s[128] = "";
    struct erma_addr back;
    if (erma_transport_addr_str(e[0].tr, &e[0].tr->local, s, sizeof s) != ERMA_OK ||
        erma_transport_resolve(e[0].tr, s, &back) != ERMA_OK ||
        !erma_addr_eq(&back, &e[0].tr->local)) {
        printf("FAIL: address %s does not round-trip\n", s);
        return 1;
    }
    /* Oversize: ERMA_E2BIG, and nothing at all sent from the burst. */
    static uint8_t big[9100];
    const uint32_t max = e[0].tr->max_pkt;
    fill(big, 0, e[0].port, 8);
    const struct erma_tx_pkt bad[3] = {
        {.dst = &e[0].server, .hdr = big, .hdr_len = 8},
        {.dst = &e[0].server, .hdr = big, .hdr_len = 8},
        {.dst = &e[0].server, .hdr = big, .hdr_len = 16, .data = big, .data_len = max - 15},
    };
    const uint64_t before = e[0].tr->stats.tx_pkts;
    int rc = erma_tx_burst(e[0].tr, bad, 3);
    if (rc != ERMA_E2BIG || e[0].tr->stats.tx_pkts != before) {
        printf("FAIL: oversize burst gave %d and sent %llu\n", rc,
               (unsigned long long)(e[0].tr->stats.tx_pkts - before));
        return 1;
    }
    printf("oversize burst (%u bytes > max_pkt %u): %s, nothing sent\n", max + 1, max,
           erma_strerror(rc));
    /* Wait for the echo server: probe until the first echo, up to 5 s. */
    const uint64_t deadline = erma_now_ns() + 12000000000ull;
    bool up = false;
    for (int i = 0; i < 500 && !up; i++) {
        fill(big, 0, e[0].port, 8);
        e[0].base = 0;
        e[0].outstanding = 1;
        const struct erma_tx_pkt probe = {.dst = &e[0].server, .hdr = big, .hdr_len = 8};
        erma_tx_burst(e[0].tr, &probe, 1);
        const uint64_t t = erma_now_ns() + 10000000;
        while (!up && erma_now_ns() < t) {
            if (poll_ep(&e[0]) || poll_ep(&e[1]))
                return 1;
            up = e[0].outstanding == 0;
        }
    }
    if (!up) {
        printf("FAIL: no echo from %s within 5 s\n", server);
        return 1;
    }
    e[0].next_seq = e[1].next_seq = 1;
    e[0].echoes = 0;
    for (int r = 0; r < ROUNDS; r++) {
        if (send_batch(&e[0]) || send_batch(&e[1]))
            return 1;
        const uint64_t t = erma_now_ns() + 1000000000ull;
        while ((e[0].outstanding || e[1].outstanding) && erma_now_ns() < t &&
               erma_now_ns() < deadline) {
            /* Alternate, so each endpoint also polls the other's frames. */
            if (poll_ep(&e[r % 2]) || poll_ep(&e[1 - r % 2]))
                return 1;
        }
        if (e[0].outstanding || e[1].outstanding) {
            printf("FAIL: round %d: echoes missing (%#llx, %#llx)\n", r,
                   (unsigned long long)e[0].outstanding, (unsigned long long)e[1].outstanding);
            return 1;
        }
    }
    for (int i = 0; i < 2; i++)
        printf("client port %u: %llu echoes byte-exact, rx %llu dropped %llu, tx %llu in "
               "%llu bundles and the rest alone\n",
               e[i].port, (unsigned long long)e[i].echoes,
               (unsigned long long)e[i].tr->stats.rx_pkts,
               (unsigned long long)e[i].tr->stats.rx_dropped,
               (unsigned long long)e[i].tr->stats.tx_pkts,
               (unsigned long long)e[i].tr->stats.tx_bundles);
    /* each batch has small packets side by side: they share frames unless
     * ERMA_DPDK_COALESCE=0 */
    const char *co = getenv("ERMA_DPDK_COALESCE");
    const bool coalesce = !(co && strcmp(co, "0") == 0);
    if ((e[0].tr->stats.tx_bundles > 0) != coalesce) {
        printf("FAIL: %llu bundles sent with coalescing %s\n",
               (unsigned long long)e[0].tr->stats.tx_bundles, coalesce ? "on" : "off");
        return 1;
    }
    fill(big, STOP_SEQ, e[0].port, 8);
    const struct erma_tx_pkt stop = {.dst = &e[0].server, .hdr = big, .hdr_len = 8};
    for (int i = 0; i < 3; i++)
        erma_tx_burst(e[0].tr, &stop, 1);
    erma_transport_close(e[1].tr);
    erma_transport_close(e[0].tr);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 4 && strcmp(argv[1], "echo") == 0)
        return echo(argv[2], argv[3]);
    if (argc == 5 && strcmp(argv[1], "client") == 0)
        return client(argv[2], argv[3], argv[4]);
    if (argc == 3 && strcmp(argv[1], "open") == 0) {
        struct erma_transport *tr;
        open_or_exit(argv[2], &tr);
        erma_transport_close(tr);
        return 0;
    }
    fprintf(stderr, "usage: dpdk_peer echo URI PEER_IP | client URI1 URI2 SERVER_URI | "
                    "open URI\n");
    return 2;
}
