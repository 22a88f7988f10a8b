/*
 * tests/verbs/mock_verbs.h - an in-memory libibverbs for the verbs tests.
 *
 * libmock_verbs.so defines the ibv_* calls erma's verbs transport makes
 * (unversioned: they satisfy libibverbs' versioned references when the
 * mock is preloaded or linked before libibverbs) and the provider ops that
 * verbs.h calls inline (post_send, post_recv, poll_cq through ctx->ops).
 * Behind them, one UD fabric per process: every QP of every mock device
 * can reach every other by GID (or LID) and QPN.
 *
 * Devices come from $MOCK_VERBS_DEVICES, read by ibv_get_device_list()
 * while no device is open: a comma-separated list of NAME[:eth|:ib|:iwarp]
 * [:down][:mtu=BYTES] (default "mock0:eth", port 1 active, MTU 4096).
 * Each RoCE port's GID table is, for device number d:
 *   0 RoCE v1 fe80::202:c9ff:fe00:d    1 RoCE v2 fe80::202:c9ff:fe00:d
 *   2 RoCE v1 ::ffff:10.0.0.(d+1)      3 RoCE v2 ::ffff:10.0.0.(d+1)
 *   4 RoCE v2 fd00::4500:(d+1)         (byte 12 is 0x45, as an IPv4 header's first byte)
 * an InfiniBand port's is 0 fe80::202:c9ff:fe00:d with LID d+1.
 * $MOCK_VERBS_LOSS drops that fraction of packets on the fabric.
 *
 * What the mock checks (each breach is a "violation", counted and logged on
 * stderr, and the call fails as a real device would fail it): QP state
 * order and attribute masks, posting before RTS, SGE lkeys and bounds
 * against registered memory, inline sizes, messages over the port MTU,
 * send- and receive-queue overflow, CQ overflow, address handles used
 * after destruction, a blocking ibv_get_async_event with nothing pending
 * (it would hang), destruction order (a busy CQ or PD, unacked events).
 * Receive buffers get the 40 bytes a ConnectX writes before the payload:
 * a GRH (RoCE v1, InfiniBand), an IPv6 header (RoCE v2 over IPv6) or 20
 * undefined bytes and an IPv4 header (RoCE v2 over IPv4).
 */
#ifndef MOCK_VERBS_H
#define MOCK_VERBS_H

#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>

struct mock_verbs_stats {
    uint64_t violations;
    char first_violation[256];
    uint64_t delivered, lost, no_qp, rnr, port_down, gid_type, qkey, len_errors;
    uint64_t send_errors, flushed, sq_full, bad_wr;
    uint64_t ah_calls, ah_failed, ah_on_marked_thread, ah_live;
    uint64_t objects_live; /* contexts, PDs, MRs, CQs, QPs and AHs not destroyed */
};

void mock_verbs_stats(struct mock_verbs_stats *out);
/* The next n sends fail with status (the QP then goes to SQE). */
void mock_verbs_fail_sends(unsigned n, enum ibv_wc_status status);
/* The next ibv_post_send of more than `at` WRs fails at WR `at` with err. */
void mock_verbs_bad_wr(unsigned at, int err);
/* ibv_create_ah to gid fails (NULL: none does). */
void mock_verbs_ah_fail(const union ibv_gid *gid);
/* ibv_create_ah sleeps this long first, as a kernel resolving a MAC. */
void mock_verbs_ah_delay_us(unsigned us);
/* Counts ibv_create_ah calls made from the calling thread. */
void mock_verbs_mark_thread(void);
/* Port 1 of device dev goes down (IBV_EVENT_PORT_ERR) or up again. */
int mock_verbs_port(const char *dev, bool up);
/* The QP numbered qpn goes to ERR with IBV_EVENT_QP_FATAL. */
int mock_verbs_qp_fatal(uint32_t qpn);
void mock_verbs_loss(double p);
/* The state of QP qpn (-1: no such QP). */
int mock_verbs_qp_state(uint32_t qpn);

#endif
