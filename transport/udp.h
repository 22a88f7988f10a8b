/* The udp transport's state, shared by udp.c (open, send, addresses) and
 * udp_rx.c (receive). Private to the transport. */
#ifndef ERMA_TRANSPORT_UDP_H
#define ERMA_TRANSPORT_UDP_H

#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "erma/sdk/bundle.h"
#include "erma/sdk/transport_driver.h"

/* Kernel memory a queued datagram costs beyond its payload (skb truesize). */
#define SKB_OVERHEAD 768
/* The largest super-datagram: a UDP payload fits 65,507 bytes over IPv4. */
#define GSO_MAX_BYTES 65000u
#define GSO_MAX_SEGS 64u
#define GRO_BUF 65536u
/* a UDP_GRO segment size and an SO_TIMESTAMPNS receive stamp */
#define CTRL_BYTES (CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(struct timespec)))
/* Packets in one receive (a burst) that turn the receive offload and the
 * stamps on. On, a 32 B RPC round trip on loopback takes 9% and 5% longer
 * (docs/PERFORMANCE.md), and latency-bound endpoints never see a burst. */
#define GRO_AFTER 8u
/* No burst for this long turns both off again;
 * the clock is read once in QUIET_CHECK of them (udp_rx.c watch_quiet). */
#define OFFLOAD_QUIET_NS 200000000ull
#define QUIET_CHECK 256u
/* A lone packet of two segments up to this size goes by sendto from one
 * buffer (udp.c send_lone). */
#define PLAIN_MAX 256u

struct udp {
    struct erma_transport base;
    int fd;
    bool gso;         /* UDP_SEGMENT on send */
    bool gro_ok, gro; /* UDP_GRO on receive: possible; on (from a burst to a quiet time) */
    bool gro_always, stamp_always;   /* ERMA_UDP_GRO=1, ERMA_UDP_STAMP=1: on from the start */
    bool coalesce;    /* small packets to one destination go as a bundle */
    bool stamp_ok, stamp; /* SO_TIMESTAMPNS: allowed; on (from a burst to a quiet time) */
    uint32_t quiet;       /* receives without a burst since the clock was read */
    uint64_t quiet_since; /* when that clock reading first found them quiet (0: not yet) */
    uint32_t rx_buf;  /* bytes of one receive buffer: max_pkt, or GRO_BUF with GRO */
    uint8_t *rx_mem;  /* ERMA_MAX_BURST buffers of rx_buf bytes */
    struct mmsghdr rx_msg[ERMA_MAX_BURST];
    struct iovec rx_iov[ERMA_MAX_BURST];
    /* the datagrams of the last receive, cut into packets over calls (GRO) */
    struct sockaddr_storage rx_src[ERMA_MAX_BURST];
    _Alignas(struct cmsghdr) uint8_t rx_ctrl[ERMA_MAX_BURST][CTRL_BYTES];
    uint32_t rx_seg[ERMA_MAX_BURST]; /* segment size of each */
    uint64_t rx_ns[ERMA_MAX_BURST];  /* the kernel's receive stamp of each, erma clock; 0 none */
    unsigned rx_n, rx_i;             /* datagrams held; the one being cut */
    bool rx_idle;                    /* the last receive found nothing */
    uint32_t rx_off;                 /* where its next packet starts */
    bool in_bundle;                  /* rx_bundle reads a bundle of datagram rx_i */
    struct erma_bundle_reader rx_bundle;
    struct mmsghdr tx_msg[ERMA_MAX_BURST];
    struct iovec tx_iov[4 * ERMA_MAX_BURST]; /* a bundle: header, then length, header, data */
    uint8_t tx_bundle_hdr[ERMA_MAX_BURST][ERMA_HDR_SIZE];
    uint8_t tx_len[ERMA_MAX_BURST][ERMA_BUNDLE_LEN_SIZE]; /* each bundled packet's */
    _Alignas(struct cmsghdr) uint8_t tx_ctrl[ERMA_MAX_BURST][CTRL_BYTES];
    unsigned tx_pkts[ERMA_MAX_BURST]; /* packets in each message */
    bool tx_bundle[ERMA_MAX_BURST];   /* the message is a bundle */
};

/* From now on the kernel stamps each datagram's arrival (SO_TIMESTAMPNS). */
void erma__udp_stamps_on(struct udp *u);
/* From now on the kernel hands up GSO runs whole (UDP_GRO). */
void erma__udp_gro_on(struct udp *u);
int erma__udp_rx_burst(struct erma_transport *tr, struct erma_rx_pkt *pkts, unsigned max);

/* The loop's sends and receives by syscall(2), not glibc's wrappers: those
 * are cancellation points, and in a process of more than one thread each
 * call turns asynchronous cancellation on and off around the system call
 * (two atomic read-modify-writes a call; a READ's round trip in
 * bench/rma_perf, whose target runs in a thread of its own, 3% shorter
 * without them: docs/PERFORMANCE.md). No thread is ever cancelled inside
 * erma's loop. A library preloaded to take over glibc's socket calls
 * (LD_PRELOAD) no longer sees these. Only on 64-bit Linux, where these
 * system calls and their structures are the C library's own; elsewhere
 * glibc's wrappers. */
#if defined(__linux__) && defined(__LP64__) && defined(SYS_recvmmsg) && defined(SYS_sendmmsg)
static inline ssize_t udp_sendto(int fd, const void *b, size_t n, const void *to, socklen_t tl)
{
    return syscall(SYS_sendto, fd, b, n, 0, to, tl);
}

static inline ssize_t udp_recvfrom(int fd, void *b, size_t n, int flags, void *from,
                                   socklen_t *fl)
{
    return syscall(SYS_recvfrom, fd, b, n, flags, from, fl);
}

static inline ssize_t udp_sendmsg(int fd, const struct msghdr *m)
{
    return syscall(SYS_sendmsg, fd, m, 0);
}

static inline ssize_t udp_recvmsg(int fd, struct msghdr *m, int flags)
{
    return syscall(SYS_recvmsg, fd, m, flags);
}

static inline int udp_sendmmsg(int fd, struct mmsghdr *m, unsigned n)
{
    return (int)syscall(SYS_sendmmsg, fd, m, n, 0);
}

static inline int udp_recvmmsg(int fd, struct mmsghdr *m, unsigned n, int flags)
{
    return (int)syscall(SYS_recvmmsg, fd, m, n, flags, NULL);
}
#else
#define udp_sendto(fd, b, n, to, tl) sendto(fd, b, n, 0, (const struct sockaddr *)(to), tl)
#define udp_recvfrom(fd, b, n, flags, from, fl) \
    recvfrom(fd, b, n, flags, (struct sockaddr *)(from), fl)
#define udp_sendmsg(fd, m) sendmsg(fd, m, 0)
#define udp_recvmsg(fd, m, flags) recvmsg(fd, m, flags)
#define udp_sendmmsg(fd, m, n) sendmmsg(fd, m, n, 0)
#define udp_recvmmsg(fd, m, n, flags) recvmmsg(fd, m, n, flags, NULL)
#endif

#endif
