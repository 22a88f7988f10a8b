/* Kernel UDP transport: non-blocking socket, sendmmsg/recvmmsg batches.
 * This file opens sockets, sends and handles addresses; udp_rx.c receives.
 *
 * Segmentation offload (Linux 4.18 and 5.0 on): consecutive packets of a
 * TX burst to one destination, all of one size but the last, go to the
 * kernel as one super-datagram with UDP_SEGMENT, which the stack (or the
 * NIC) cuts into those datagrams again. With UDP_GRO on, the kernel hands
 * such runs up as one buffer and a cmsg giving the segment size, which
 * rx_burst cuts into packets again; it is turned on by a receive of a
 * burst (GRO_AFTER packets) and off again after a quiet time
 * (OFFLOAD_QUIET_NS without a burst), so that ping-pong traffic does not
 * pay for it. The receive buffers are 64 KiB each for it (2 MiB a
 * socket, touched only as bulk arrives). ERMA_UDP_GSO=0 in the environment turns
 * both off, ERMA_UDP_GRO=0 the receive side only, ERMA_UDP_GRO=1 turns
 * the receive side on for good at once; a kernel without them runs
 * without.
 *
 * Coalescing: adjacent packets of a TX burst to one destination that fit
 * one datagram together (small ones: requests, responses, credit returns
 * of a few dozen bytes) and do not make a GSO run go as one bundle
 * (erma/sdk/bundle.h) instead of a datagram each; every received bundle
 * is split again. ERMA_UDP_COALESCE=0 turns the sending side off (bundles
 * are always split on receive). Nothing above the transport sees either:
 * on the wire every datagram is one erma packet or one bundle.
 *
 * Receive stamps: the kernel's arrival time of each datagram
 * (SO_TIMESTAMPNS) becomes erma_rx_pkt.rx_ns, where a packet's time inside
 * this host starts (erma/rpc.h, Busy hosts). Like UDP_GRO they are on
 * from a burst (a queue formed: the loop is busy or was away) to a quiet
 * time; outside, rx_ns is 0 (the endpoint's estimate). The kernel starts
 * stamping on arrival a moment after the first socket asks (a deferred
 * switch): until then it stamps at the read, which only makes a host
 * delay look shorter. ERMA_UDP_STAMP=0 never turns them on,
 * ERMA_UDP_STAMP=1 on for good at once. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "erma/errors.h"
#include "erma/log.h"
#include "erma/sdk/bundle.h"
#include "erma/sdk/transport_driver.h"
#include "transport/builtin.h"
#include "transport/udp.h"

/* Parses "host:port" or "[v6host]:port" into a socket address. */
static int parse(const char *rest, int family, struct erma_addr *out)
{
    char host[256];
    const char *colon;
    if (rest[0] == '[') {
        const char *end = strchr(rest, ']');
        if (!end || end[1] != ':' || (size_t)(end - rest - 1) >= sizeof host)
            return ERMA_EADDR;
        memcpy(host, rest + 1, (size_t)(end - rest - 1));
        host[end - rest - 1] = 0;
        colon = end + 1;
    } else {
        colon = strrchr(rest, ':');
        if (!colon || (size_t)(colon - rest) >= sizeof host)
            return ERMA_EADDR;
        memcpy(host, rest, (size_t)(colon - rest));
        host[colon - rest] = 0;
    }
    char *end;
    const long port = strtol(colon + 1, &end, 10);
    if (colon[1] == 0 || *end || port < 0 || port > 65535)
        return ERMA_EADDR;
    struct addrinfo hints = {.ai_family = family, .ai_socktype = SOCK_DGRAM}, *res;
    if (getaddrinfo(host, NULL, &hints, &res) != 0)
        return ERMA_EADDR;
    int rc = ERMA_EADDR;
    if (res->ai_addrlen <= ERMA_ADDR_MAX) {
        memset(out, 0, sizeof *out);
        memcpy(out->raw, res->ai_addr, res->ai_addrlen);
        out->len = (uint8_t)res->ai_addrlen;
        struct sockaddr *sa = (struct sockaddr *)out->raw;
        if (sa->sa_family == AF_INET)
            ((struct sockaddr_in *)sa)->sin_port = htons((uint16_t)port);
        else
            ((struct sockaddr_in6 *)sa)->sin6_port = htons((uint16_t)port);
        rc = ERMA_OK;
    }
    freeaddrinfo(res);
    return rc;
}

static int udp_addr_str(const struct erma_transport *tr, const struct erma_addr *a, char *buf,
                        size_t len)
{
    (void)tr;
    const struct sockaddr *sa = (const struct sockaddr *)a->raw;
    char host[INET6_ADDRSTRLEN];
    int n;
    if (a->len == sizeof(struct sockaddr_in) && sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const void *)a->raw;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        n = snprintf(buf, len, "%s:%u", host, ntohs(in->sin_port));
    } else if (a->len == sizeof(struct sockaddr_in6) && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const void *)a->raw;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
        n = snprintf(buf, len, "[%s]:%u", host, ntohs(in6->sin6_port));
    } else {
        return ERMA_EINVAL;
    }
    return n < 0 || (size_t)n >= len ? ERMA_EINVAL : ERMA_OK;
}

static int udp_resolve(struct erma_transport *tr, const char *rest, struct erma_addr *out)
{
    const int family = ((const struct sockaddr *)tr->local.raw)->sa_family;
    return parse(rest, family, out);
}

/* Asks for a socket buffer of bytes; as root past rmem_max/wmem_max too. */
static void size_buffer(int fd, int force_opt, int opt, size_t bytes)
{
    int v = bytes > (size_t)(1 << 30) ? 1 << 30 : (int)bytes;
    if (setsockopt(fd, SOL_SOCKET, force_opt, &v, sizeof v) != 0)
        setsockopt(fd, SOL_SOCKET, opt, &v, sizeof v);
}

static bool env_off(const char *name)
{
    const char *env = getenv(name);
    return env && strcmp(env, "0") == 0;
}

/* Finds what the kernel offers of UDP_SEGMENT and UDP_GRO, unless
 * ERMA_UDP_GSO=0 (neither) or ERMA_UDP_GRO=0 (no UDP_GRO); coalescing
 * unless ERMA_UDP_COALESCE=0. */
static void offload_on(struct udp *u)
{
    u->coalesce = !env_off("ERMA_UDP_COALESCE");
    if (env_off("ERMA_UDP_GSO"))
        return;
    int v;
    socklen_t len = sizeof v;
    u->gso = getsockopt(u->fd, SOL_UDP, UDP_SEGMENT, &v, &len) == 0;
    len = sizeof v;
    u->gro_ok = !env_off("ERMA_UDP_GRO") && getsockopt(u->fd, SOL_UDP, UDP_GRO, &v, &len) == 0;
}

static void udp_close(struct erma_transport *tr)
{
    struct udp *u = (struct udp *)tr;
    if (u->fd >= 0)
        close(u->fd);
    free(u->rx_mem);
    free(u);
}

static int udp_open(const char *rest, const struct erma_transport_cfg *cfg,
                    struct erma_transport **out)
{
    struct udp *u = calloc(1, sizeof *u);
    if (!u)
        return ERMA_ENOMEM;
    u->fd = -1;
    u->base.ops = &erma__udp_ops;
    u->base.rx_ring = cfg->rx_ring;
    int rc = parse(rest, AF_UNSPEC, &u->base.local);
    if (rc != ERMA_OK)
        goto fail;
    const struct sockaddr *sa = (const struct sockaddr *)u->base.local.raw;
    const uint32_t ip_hdr = sa->sa_family == AF_INET6 ? 40 : 20;
    u->base.max_pkt = cfg->mtu - ip_hdr - 8;
    /* Kernel UDP: no line rate to speak of. Unloaded loopback RTTs are about
     * 4 us, but with tens of packets in flight the kernel and the peer's CPU
     * queue them to ~50 us, with rarer ms-scale hiccups; a 20 us hint puts
     * Timely's t_low at 100 us and t_high at 500 us, above that noise. */
    /* The kernel's stack: a pass of the loop alone can take 10 us, and a
     * process may stall for milliseconds whatever the RTT. Measured with
     * the hosts' delays taken out (erma/rpc.h, Busy hosts), the network's
     * part of loopback samples stays small on a saturated 2-core host:
     * the sessions' last samples 4-10 us, their smallest 2.6-3.4 us
     * (bench/busy_host with ERMA_BENCH_CC=1, docs/PERFORMANCE.md): t_low
     * 100 us is 10x that, so the thresholds stay, on measurement now. */
    u->base.hints = (struct erma_transport_hints){.link_bps = 25000000000ull,
                                                  .frame_overhead = 14 + ERMA_IP_UDP_OVERHEAD + 24,
                                                  .base_rtt_ns = 20000,
                                                  .jitter_ns = 1000000,
                                                  .min_timeout_ns = 10000000};
    rc = ERMA_ESYS;
    u->fd = socket(sa->sa_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (u->fd < 0)
        goto fail;
    const size_t ring_bytes = (size_t)cfg->rx_ring * (u->base.max_pkt + SKB_OVERHEAD);
    size_buffer(u->fd, SO_RCVBUFFORCE, SO_RCVBUF, ring_bytes);
    size_buffer(u->fd, SO_SNDBUFFORCE, SO_SNDBUF, ring_bytes);
    if (bind(u->fd, sa, u->base.local.len) != 0) {
        const int e = errno;
        ERMA_WARN("udp: cannot bind %s: %s", rest, strerror(e));
        if (e == EADDRINUSE || e == EADDRNOTAVAIL) /* a port taken, an address not ours */
            rc = ERMA_EADDR;
        goto fail;
    }
    socklen_t len = sizeof u->base.local.raw;
    if (getsockname(u->fd, (struct sockaddr *)u->base.local.raw, &len) != 0)
        goto fail;
    offload_on(u);
    const char *gro = getenv("ERMA_UDP_GRO"), *st = getenv("ERMA_UDP_STAMP");
    u->gro_always = u->gro_ok && gro && strcmp(gro, "1") == 0;
    if (u->gro_always)
        erma__udp_gro_on(u);
    u->stamp_ok = !env_off("ERMA_UDP_STAMP");
    u->stamp_always = st && strcmp(st, "1") == 0;
    if (u->stamp_always)
        erma__udp_stamps_on(u);
    rc = ERMA_ENOMEM;
    u->rx_buf = u->gro_ok ? GRO_BUF : u->base.max_pkt;
    u->rx_mem = malloc((size_t)ERMA_MAX_BURST * u->rx_buf);
    if (!u->rx_mem)
        goto fail;
    for (unsigned i = 0; i < ERMA_MAX_BURST; i++) {
        u->rx_iov[i] = (struct iovec){u->rx_mem + (size_t)i * u->rx_buf, u->rx_buf};
        u->rx_msg[i].msg_hdr.msg_iov = &u->rx_iov[i];
        u->rx_msg[i].msg_hdr.msg_iovlen = 1;
    }
    ERMA_DEBUG("udp %s: segmentation offload %s, receive offload %s, coalescing %s", rest,
               u->gso ? "on" : "off",
               u->gro_always ? "on" : u->gro_ok ? "from a burst to a quiet time" : "off",
               u->coalesce ? "on" : "off");
    *out = &u->base;
    return ERMA_OK;
fail:
    udp_close(&u->base);
    return rc;
}

/* How many of pkts[0..n) go as one super-datagram: to one destination,
 * each of the first one's size but the last, which may be shorter. */
static unsigned gso_run(const struct udp *u, const struct erma_tx_pkt *pkts, unsigned n)
{
    if (!u->gso)
        return 1;
    const uint32_t size = erma_tx_pkt_len(&pkts[0]);
    uint32_t bytes = size;
    unsigned k = 1;
    while (k < n && k < GSO_MAX_SEGS && erma_tx_pkt_len(&pkts[k]) <= size &&
           bytes + erma_tx_pkt_len(&pkts[k]) <= GSO_MAX_BYTES &&
           erma_addr_eq(pkts[k].dst, pkts[0].dst)) {
        bytes += erma_tx_pkt_len(&pkts[k]);
        if (erma_tx_pkt_len(&pkts[k++]) < size)
            break;
    }
    return k;
}

static void set_segment(struct msghdr *m, uint8_t *ctrl, uint16_t size)
{
    m->msg_control = ctrl;
    m->msg_controllen = CMSG_SPACE(sizeof size);
    struct cmsghdr *c = CMSG_FIRSTHDR(m);
    c->cmsg_level = SOL_UDP;
    c->cmsg_type = UDP_SEGMENT;
    c->cmsg_len = CMSG_LEN(sizeof size);
    memcpy(CMSG_DATA(c), &size, sizeof size);
}

/* Adds packet p's header and data to the iovecs from *nio. */
static void add_pkt(struct udp *u, unsigned *nio, const struct erma_tx_pkt *p)
{
    u->tx_iov[(*nio)++] = (struct iovec){(void *)p->hdr, p->hdr_len};
    if (p->data_len)
        u->tx_iov[(*nio)++] = (struct iovec){(void *)p->data, p->data_len};
}

/* The messages of pkts[0..n): one per GSO run, per bundle or per packet.
 * A run of one size goes by GSO, which costs the kernel one buffer however
 * long the run (on loopback: measured 4% above bundles of the same
 * packets); bundles take what would go alone, mixed sizes. */
static unsigned build_msgs(struct udp *u, const struct erma_tx_pkt *pkts, unsigned n)
{
    unsigned nmsg = 0, nio = 0;
    for (unsigned i = 0; i < n; nmsg++) {
        const unsigned g = gso_run(u, pkts + i, n - i);
        const unsigned b =
            g == 1 && u->coalesce ? erma_bundle_run(pkts + i, n - i, u->base.max_pkt) : 0;
        const unsigned k = b ? b : g;
        struct msghdr *m = &u->tx_msg[nmsg].msg_hdr;
        *m = (struct msghdr){.msg_name = (void *)pkts[i].dst->raw,
                             .msg_namelen = pkts[i].dst->len,
                             .msg_iov = &u->tx_iov[nio]};
        if (b) {
            erma_bundle_hdr(u->tx_bundle_hdr[nmsg], b);
            u->tx_iov[nio++] = (struct iovec){u->tx_bundle_hdr[nmsg], ERMA_HDR_SIZE};
        }
        for (unsigned j = i; j < i + k; j++) {
            if (b) {
                erma_bundle_len(u->tx_len[j], erma_tx_pkt_len(&pkts[j]));
                u->tx_iov[nio++] = (struct iovec){u->tx_len[j], ERMA_BUNDLE_LEN_SIZE};
            }
            add_pkt(u, &nio, &pkts[j]);
        }
        m->msg_iovlen = (size_t)(&u->tx_iov[nio] - m->msg_iov);
        if (k > 1 && !b)
            set_segment(m, u->tx_ctrl[nmsg], (uint16_t)erma_tx_pkt_len(&pkts[i]));
        u->tx_pkts[nmsg] = k;
        u->tx_bundle[nmsg] = b > 0;
        i += k;
    }
    return nmsg;
}

/* sendmmsg, or one message by sendmsg. */
static int send_msgs(struct udp *u, unsigned from, unsigned count)
{
    if (count > 1)
        return udp_sendmmsg(u->fd, u->tx_msg + from, count);
    return udp_sendmsg(u->fd, &u->tx_msg[from].msg_hdr) < 0 ? -1 : 1;
}

/* The send's errno says the kernel's queue is full (or it was
 * interrupted): the packets stay for the next flush, not dropped. */
static bool queue_full(int e)
{
    return e == EAGAIN || e == ENOBUFS || e == EINTR;
}

/* Sends pkts[0..n), n <= ERMA_MAX_BURST; returns how many the kernel took. */
static unsigned send_batch(struct udp *u, const struct erma_tx_pkt *pkts, unsigned n)
{
    const unsigned nmsg = build_msgs(u, pkts, n);
    unsigned done = 0, sent = 0; /* messages, packets */
    while (done < nmsg) {
        const int r = send_msgs(u, done, nmsg - done);
        if (r > 0) {
            for (int i = 0; i < r; i++, done++) {
                sent += u->tx_pkts[done];
                u->base.stats.tx_bundles += u->tx_bundle[done];
            }
        } else if (queue_full(errno)) {
            break;
        } else if (u->tx_pkts[done] > 1 && (errno == EIO || errno == EINVAL)) {
            /* A device that cannot segment: the rest, offered again, goes
             * one datagram per packet. */
            ERMA_WARN("udp: segmentation offload refused (%s): turned off", strerror(errno));
            u->gso = false;
            break;
        } else {
            /* These packets cannot go (e.g. unreachable address): drop them alone. */
            u->base.stats.tx_errors += u->tx_pkts[done];
            sent += u->tx_pkts[done++];
        }
    }
    return sent;
}

/* A lone packet of at most PLAIN_MAX bytes, or of one segment, straight
 * to sendto: no message built for a batch (a ping-pong's every send).
 * Returns what send_batch would: 1 sent (or dropped as unsendable), 0 the
 * kernel's queue is full. */
static unsigned send_lone(struct udp *u, const struct erma_tx_pkt *p)
{
    uint8_t buf[PLAIN_MAX];
    const void *data = p->hdr;
    size_t len = p->hdr_len;
    if (p->data_len) {
        memcpy(buf, p->hdr, p->hdr_len);
        memcpy(buf + len, p->data, p->data_len);
        data = buf;
        len += p->data_len;
    }
    if (udp_sendto(u->fd, data, len, p->dst->raw, p->dst->len) >= 0)
        return 1;
    if (queue_full(errno))
        return 0;
    u->base.stats.tx_errors++; /* unsendable (e.g. unreachable address): dropped alone */
    return 1;
}

static int udp_tx_burst(struct erma_transport *tr, const struct erma_tx_pkt *pkts, unsigned n)
{
    struct udp *u = (struct udp *)tr;
    const int rc = erma_transport_check_tx(tr, pkts, n, tr->local.len);
    if (rc != ERMA_OK)
        return rc;
    if (n == 1 && (!pkts[0].data_len || erma_tx_pkt_len(&pkts[0]) <= PLAIN_MAX)) {
        const unsigned got = send_lone(u, &pkts[0]);
        tr->stats.tx_bytes += got ? erma_tx_pkt_len(&pkts[0]) : 0;
        tr->stats.tx_pkts += got;
        return (int)got;
    }
    unsigned sent = 0;
    while (sent < n) {
        const unsigned want = n - sent < ERMA_MAX_BURST ? n - sent : ERMA_MAX_BURST;
        const unsigned got = send_batch(u, pkts + sent, want);
        for (unsigned i = sent; i < sent + got; i++)
            tr->stats.tx_bytes += erma_tx_pkt_len(&pkts[i]);
        sent += got;
        if (got < want)
            break;
    }
    tr->stats.tx_pkts += sent;
    return (int)sent;
}

static int udp_wait(struct erma_transport *tr, uint64_t timeout_ns)
{
    struct pollfd p = {.fd = ((struct udp *)tr)->fd, .events = POLLIN};
    const struct timespec t = {(time_t)(timeout_ns / 1000000000u), (long)(timeout_ns % 1000000000u)};
    return ppoll(&p, 1, &t, NULL) < 0 && errno != EINTR ? ERMA_ESYS : ERMA_OK;
}

static int udp_addr_path(const struct erma_transport *tr, const struct erma_addr *a, int k,
                         struct erma_addr *out)
{
    (void)tr;
    const struct sockaddr *sa = (const struct sockaddr *)a->raw;
    if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
        return ERMA_EADDR;
    /* sin_port and sin6_port sit at the same place */
    uint16_t port;
    memcpy(&port, a->raw + offsetof(struct sockaddr_in, sin_port), 2);
    if (ntohs(port) + k > 65535 || ntohs(port) + k < 0)
        return ERMA_EADDR;
    *out = *a;
    port = htons((uint16_t)(ntohs(port) + k));
    memcpy(out->raw + offsetof(struct sockaddr_in, sin_port), &port, 2);
    return ERMA_OK;
}

static int udp_poll_fd(const struct erma_transport *tr)
{
    return ((const struct udp *)tr)->fd;
}

const struct erma_transport_ops erma__udp_ops = {
    .scheme = "udp",
    .open = udp_open,
    .close = udp_close,
    .tx_burst = udp_tx_burst,
    .rx_burst = erma__udp_rx_burst,
    .wait = udp_wait,
    .resolve = udp_resolve,
    .addr_str = udp_addr_str,
    .addr_path = udp_addr_path,
    .poll_fd = udp_poll_fd,
};
