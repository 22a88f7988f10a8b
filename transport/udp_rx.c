/* The udp transport's receive side (udp.c has the rest): recvmmsg into
 * held datagrams, cut into packets at their UDP_GRO segment size, bundles
 * split, each with the kernel's arrival stamp; the receive offload and
 * the stamps on from a burst until a quiet time. */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "erma/clock.h"
#include "erma/log.h"
#include "transport/udp.h"

/* From now on the kernel stamps each datagram's arrival (SO_TIMESTAMPNS):
 * the host delay starts there (erma_rx_pkt.rx_ns). */
void erma__udp_stamps_on(struct udp *u)
{
    const int v = 1;
    u->stamp = setsockopt(u->fd, SOL_SOCKET, SO_TIMESTAMPNS, &v, sizeof v) == 0;
    u->stamp_ok = u->stamp;
    if (!u->stamp)
        ERMA_DEBUG("udp: no receive stamps (SO_TIMESTAMPNS: errno %d)", errno);
}

/* The segment size of a received datagram of len bytes (its UDP_GRO
 * cmsg's, else len: one packet) and its SO_TIMESTAMPNS receive stamp in
 * CLOCK_REALTIME ns (0: none). */
static uint32_t read_cmsgs(struct msghdr *m, uint32_t len, uint64_t *stamp)
{
    uint32_t seg = len;
    *stamp = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
            int size;
            memcpy(&size, CMSG_DATA(c), sizeof size);
            seg = size > 0 && (uint32_t)size < len ? (uint32_t)size : len;
        } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(c), sizeof ts);
            *stamp = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        }
    }
    return seg;
}

/* The kernel's stamps (CLOCK_REALTIME) on erma_now_ns()'s clock: later
 * than now (a clock step) reads as now. */
static void stamps_to_erma(struct udp *u, const uint64_t *real, unsigned n)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const uint64_t now = erma_now_ns();
    const uint64_t real_now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    for (unsigned i = 0; i < n; i++) {
        const uint64_t ago = real[i] && real[i] < real_now ? real_now - real[i] : 0;
        u->rx_ns[i] = real[i] == 0 ? 0 : ago < now ? now - ago : now;
    }
}

/* recvmmsg, or one datagram: after a receive that found nothing (a polling
 * loop's usual case) only one is asked for, sparing the kernel a second
 * look at an empty queue. */
static int recv_msgs(struct udp *u, unsigned count)
{
    if (count > 1)
        return udp_recvmmsg(u->fd, u->rx_msg, count, MSG_DONTWAIT);
    const ssize_t r = udp_recvmsg(u->fd, &u->rx_msg[0].msg_hdr, MSG_DONTWAIT);
    if (r < 0)
        return -1;
    u->rx_msg[0].msg_len = (unsigned)r;
    return 1;
}

/* Turns the receive offload on: a receive found a burst. From then on
 * the cmsg says how a datagram is cut (recv_held always asks for it), so
 * datagrams queued before stay right. */
void erma__udp_gro_on(struct udp *u)
{
    const int v = 1;
    u->gro = setsockopt(u->fd, SOL_UDP, UDP_GRO, &v, sizeof v) == 0;
    u->gro_ok = u->gro;
    ERMA_DEBUG("udp: receive offload %s", u->gro ? "on" : "refused");
}

/* Turns the receive offload off, unless a datagram is queued: one queued
 * whole before it went off would come up without the cmsg that says how
 * to cut it. (A run the kernel was queueing at that very moment still
 * can: whole, it fails erma's length checks or its seal and is sent
 * again, as a lost packet is.) */
static void gro_off(struct udp *u)
{
    const int off = 0;
    uint8_t byte;
    if (setsockopt(u->fd, SOL_UDP, UDP_GRO, &off, sizeof off) != 0)
        return;
    if (recv(u->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) < 0 &&
        (errno == EAGAIN || errno == EWOULDBLOCK))
        u->gro = false;
    else /* something queued (or unknown): on again, until the next quiet time */
        erma__udp_gro_on(u);
}

/* A burst (GRO_AFTER packets in one receive: a queue formed, the loop is
 * busy or was away) turns the receive offload and the stamps on. */
static void offload_on(struct udp *u)
{
    const bool gro = u->gro, stamp = u->stamp;
    if (u->gro_ok && !u->gro)
        erma__udp_gro_on(u);
    if (u->stamp_ok && !u->stamp)
        erma__udp_stamps_on(u);
    u->base.stats.rx_offload_on += (u->gro && !gro) || (u->stamp && !stamp);
    u->quiet = 0;
    u->quiet_since = 0;
}

/* Both go off again once no receive has found a burst for
 * OFFLOAD_QUIET_NS, so that an endpoint whose load has passed gets the
 * lone receive back (each costs a lone packet's round trip 5-9%). The
 * time is long beside the gaps between a loaded endpoint's bursts, so
 * that one under load keeps them rather than switching (a system call
 * or two each way); the clock is read once in QUIET_CHECK receives. */
static void watch_quiet(struct udp *u)
{
    if (++u->quiet < QUIET_CHECK)
        return;
    u->quiet = 0;
    const uint64_t now = erma_now_ns();
    if (!u->quiet_since) {
        u->quiet_since = now;
        return;
    }
    if (u->rx_n > 0 || now - u->quiet_since < OFFLOAD_QUIET_NS)
        return;
    u->quiet_since = 0;
    const bool gro = u->gro, stamp = u->stamp;
    const int off = 0;
    if (u->stamp && !u->stamp_always &&
        setsockopt(u->fd, SOL_SOCKET, SO_TIMESTAMPNS, &off, sizeof off) == 0)
        u->stamp = false;
    if (u->gro && !u->gro_always)
        gro_off(u);
    u->base.stats.rx_offload_off += (gro && !u->gro) || (stamp && !u->stamp);
    ERMA_DEBUG("udp: after a quiet time: receive offload %s, stamps %s", u->gro ? "on" : "off",
               u->stamp ? "on" : "off");
}

/* Receives up to max datagrams into the receive buffers; how many. */
static unsigned recv_held(struct udp *u, unsigned max)
{
    for (unsigned i = 0; i < max; i++) {
        struct msghdr *m = &u->rx_msg[i].msg_hdr;
        m->msg_name = &u->rx_src[i];
        m->msg_namelen = ERMA_ADDR_MAX;
        m->msg_control = u->rx_ctrl[i];
        m->msg_controllen = CTRL_BYTES;
        m->msg_flags = 0;
    }
    const int r = recv_msgs(u, max);
    u->rx_n = r > 0 ? (unsigned)r : 0;
    u->rx_i = u->rx_off = 0;
    uint64_t real[ERMA_MAX_BURST];
    uint32_t pkts = 0;
    for (unsigned i = 0; i < u->rx_n; i++) {
        struct msghdr *m = &u->rx_msg[i].msg_hdr;
        const uint32_t len = u->rx_msg[i].msg_len, seg = read_cmsgs(m, len, &real[i]);
        /* cut short, or a packet longer than ours (a run that came whole
         * without its cmsg, just after the offload went off): dropped */
        u->rx_seg[i] = m->msg_flags & MSG_TRUNC || seg > u->base.max_pkt ? 0 : seg;
        u->base.stats.rx_dropped += u->rx_seg[i] == 0;
        pkts += seg < len ? (len + seg - 1) / seg : 1;
    }
    if (pkts >= GRO_AFTER)
        offload_on(u);
    else if ((u->gro && !u->gro_always) || (u->stamp && !u->stamp_always))
        watch_quiet(u);
    if (u->rx_n && u->stamp)
        stamps_to_erma(u, real, u->rx_n);
    else
        memset(u->rx_ns, 0, sizeof u->rx_ns[0] * u->rx_n);
    return u->rx_n;
}

/* Hands out data[0..len) from the sender of datagram rx_i as *p. */
static void put_pkt(const struct udp *u, struct erma_rx_pkt *p, const uint8_t *data, uint32_t len)
{
    p->data = (uint8_t *)data;
    p->len = len;
    p->rx_ns = u->rx_ns[u->rx_i];
    p->src.len = (uint8_t)u->rx_msg[u->rx_i].msg_hdr.msg_namelen;
    memcpy(p->src.raw, &u->rx_src[u->rx_i], sizeof p->src.raw); /* a fixed size: no call */
}

/* The next packet of the bundle being read into *p; false at its end
 * (a bundle that did not end cleanly counts as dropped). */
static bool bundle_pkt(struct udp *u, struct erma_rx_pkt *p)
{
    const uint8_t *data;
    uint32_t len;
    if (erma_bundle_next(&u->rx_bundle, &data, &len)) {
        put_pkt(u, p, data, len);
        return true;
    }
    u->base.stats.rx_dropped += !erma_bundle_done(&u->rx_bundle);
    u->in_bundle = false;
    return false;
}

/* Hands out the packets of the datagrams held, each cut at its segment
 * size (a datagram without GRO is one packet) and each bundle split; 0
 * when all are handed out. */
static unsigned cut_held(struct udp *u, struct erma_rx_pkt *pkts, unsigned max)
{
    unsigned n = 0;
    while (n < max) {
        if (u->in_bundle) {
            n += bundle_pkt(u, &pkts[n]);
            continue;
        }
        if (u->rx_i >= u->rx_n)
            break;
        const struct mmsghdr *mm = &u->rx_msg[u->rx_i];
        const uint32_t len = mm->msg_len, seg = u->rx_seg[u->rx_i];
        if (!seg || u->rx_off >= len) {
            u->rx_i++;
            u->rx_off = 0;
            continue;
        }
        const uint32_t take = len - u->rx_off < seg ? len - u->rx_off : seg;
        const uint8_t *data = (const uint8_t *)mm->msg_hdr.msg_iov[0].iov_base + u->rx_off;
        u->rx_off += take;
        if (erma_bundle_open(&u->rx_bundle, data, take))
            u->in_bundle = true;
        else /* a packet (one that only looks like a bundle fails checks above) */
            put_pkt(u, &pkts[n++], data, take);
    }
    return n;
}

/* The packets held, else those of a new receive: their buffers stay valid
 * until the next call. A call returns 0 only when the kernel had nothing
 * (callers take a short burst for an empty queue: one-sided timeouts);
 * the held datagrams' last packets, handed out in a full burst, must not
 * make the next call come back empty with more queued. */
static unsigned held_rx(struct udp *u, struct erma_rx_pkt *pkts, unsigned max)
{
    const unsigned n = cut_held(u, pkts, max);
    if (n > 0 || !recv_held(u, u->rx_idle ? 1 : max))
        return n;
    return cut_held(u, pkts, max);
}

/* A polling loop's usual receive: the last one found nothing, none is
 * held and no cmsg is wanted: one datagram by recvfrom, handed out as it
 * is unless it is a bundle or cut short. */
static unsigned lone_rx(struct udp *u, struct erma_rx_pkt *pkts, unsigned max)
{
    socklen_t alen = sizeof u->rx_src[0];
    u->rx_n = 0; /* the last receive's datagrams are all handed out: none is held */
    const ssize_t r = udp_recvfrom(u->fd, u->rx_iov[0].iov_base, u->rx_buf,
                                   MSG_DONTWAIT | MSG_TRUNC, &u->rx_src[0], &alen);
    if (r < 0)
        return 0;
    if (r == 0 || (size_t)r > u->base.max_pkt) { /* empty, cut short or oversize: dropped */
        u->base.stats.rx_dropped++;
        return 0;
    }
    u->rx_msg[0].msg_hdr.msg_namelen = alen;
    u->rx_ns[0] = 0;
    u->rx_i = u->rx_off = 0;
    if (erma_bundle_is(u->rx_iov[0].iov_base, (uint32_t)r)) { /* split as if held */
        u->rx_n = 1;
        u->rx_msg[0].msg_len = (unsigned)r;
        u->rx_seg[0] = (uint32_t)r;
        return cut_held(u, pkts, max);
    }
    put_pkt(u, &pkts[0], u->rx_iov[0].iov_base, (uint32_t)r);
    return 1;
}

int erma__udp_rx_burst(struct erma_transport *tr, struct erma_rx_pkt *pkts, unsigned max)
{
    struct udp *u = (struct udp *)tr;
    if (max > ERMA_MAX_BURST)
        max = ERMA_MAX_BURST;
    const unsigned n = u->rx_idle && !u->gro && !u->stamp ? lone_rx(u, pkts, max)
                                                          : held_rx(u, pkts, max);
    u->rx_idle = n == 0;
    for (unsigned i = 0; i < n; i++)
        tr->stats.rx_bytes += pkts[i].len;
    tr->stats.rx_pkts += n;
    return (int)(tr->drop_threshold ? erma_transport_inject_loss(tr, pkts, n) : n);
}
