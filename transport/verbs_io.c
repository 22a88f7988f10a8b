/* transport/verbs_io.c - the verbs transport's data path (send and receive
 * bursts) and its recovery from QP errors and async events (verbs_ud.h). */
#include "transport/verbs_ud.h"

/* ---- errors: the QP's state and the async events ---- */

/* Brings the QP back to RTS: from SQE (a send failed) directly, from ERR
 * through RESET, dropping what its queues held and reposting receives. */
static int recover_qp(struct verbs *v)
{
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;
    if (ibv_query_qp(v->qp, &a, IBV_QP_STATE, &ia))
        return ERMA_ESYS;
    if (a.qp_state == IBV_QPS_RTS)
        return ERMA_OK;
    if (a.qp_state == IBV_QPS_SQE) {
        a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS};
        return ibv_modify_qp(v->qp, &a, IBV_QP_STATE) ? ERMA_ESYS : ERMA_OK;
    }
    a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RESET};
    if (ibv_modify_qp(v->qp, &a, IBV_QP_STATE))
        return ERMA_ESYS;
    struct ibv_wc wc[16];
    for (int k = 0; k < 4096 && ibv_poll_cq(v->send_cq, 16, wc) > 0; k++)
        ;
    for (int k = 0; k < 4096 && ibv_poll_cq(v->recv_cq, 16, wc) > 0; k++)
        ;
    v->completed = v->posted; /* RESET dropped every send */
    if (erma__verbs_qp_to_rts(v) != ERMA_OK || erma__verbs_post_all_recv(v) != ERMA_OK)
        return ERMA_ESYS;
    ERMA_NOTICE("verbs: QP %u recovered from the error state", v->qp->qp_num);
    return ERMA_OK;
}

static void recover(struct verbs *v)
{
    if (!v->dead && recover_qp(v) != ERMA_OK) {
        ERMA_WARN("verbs: QP %u cannot leave the error state (%s): the endpoint is dead",
                  v->qp->qp_num, strerror(errno));
        v->dead = true;
    }
}

/* Reads the pending async events (never blocks: async_fd is O_NONBLOCK). */
static void read_events(struct verbs *v)
{
    struct ibv_async_event ev;
    bool broken = false;
    for (int k = 0; k < 64 && ibv_get_async_event(v->ctx, &ev) == 0; k++) {
        const enum ibv_event_type t = ev.event_type;
        if ((t == IBV_EVENT_PORT_ERR || t == IBV_EVENT_PORT_ACTIVE) &&
            ev.element.port_num == v->port) {
            v->port_down = t == IBV_EVENT_PORT_ERR;
            ERMA_WARN("verbs: port %u is %s", v->port, v->port_down ? "down" : "up again");
        } else if (t == IBV_EVENT_QP_FATAL || t == IBV_EVENT_QP_REQ_ERR ||
                   t == IBV_EVENT_QP_ACCESS_ERR || t == IBV_EVENT_CQ_ERR) {
            ERMA_WARN("verbs: %s", ibv_event_type_str(t));
            broken = true;
        } else if (t == IBV_EVENT_DEVICE_FATAL) {
            ERMA_WARN("verbs: %s: the endpoint is dead", ibv_event_type_str(t));
            v->dead = true;
        } else if (t == IBV_EVENT_GID_CHANGE) {
            ERMA_WARN("verbs: the GID table of port %u changed", v->port);
        }
        ibv_ack_async_event(&ev);
    }
    if (broken)
        recover(v);
}

static void maybe_read_events(struct verbs *v)
{
    if (++v->bursts % ASYNC_EVERY == 0)
        read_events(v);
}

/* ---- data path ---- */

/* Reaps send completions; each signaled one retires every send before it.
 * A failed send has moved the QP to SQE (or ERR): it is brought back. */
static void reap_sends(struct verbs *v)
{
    struct ibv_wc wc[16];
    bool failed = false;
    const int n = ibv_poll_cq(v->send_cq, 16, wc);
    for (int i = 0; i < n; i++) {
        if (wc[i].status != IBV_WC_SUCCESS) {
            v->base.stats.tx_errors++;
            if (!failed && wc[i].status != IBV_WC_WR_FLUSH_ERR)
                ERMA_WARN("verbs: send failed: %s", ibv_wc_status_str(wc[i].status));
            failed = true;
        }
        if (wc[i].wr_id + 1 > v->completed)
            v->completed = wc[i].wr_id + 1;
    }
    if (failed) {
        read_events(v);
        recover(v);
    }
}

/* Copies pkt into send buffer seq and fills its work request. */
static void prep_send(struct verbs *v, const struct erma_tx_pkt *pkt, struct ibv_ah *ah,
                      uint64_t seq, struct ibv_send_wr *wr, struct ibv_sge *sge)
{
    uint8_t *buf = v->mem + ((size_t)v->rq_depth + seq % SQ_DEPTH) * v->rx_stride;
    const uint32_t len = erma_tx_pkt_len(pkt);
    erma_tx_pkt_copy(buf, pkt);
    uint32_t qpn;
    memcpy(&qpn, pkt->dst->raw + 18, 4);
    *sge = (struct ibv_sge){.addr = (uintptr_t)buf, .length = len, .lkey = v->mr->lkey};
    *wr = (struct ibv_send_wr){
        .wr_id = seq,
        .sg_list = sge,
        .num_sge = 1,
        .opcode = IBV_WR_SEND,
        .send_flags = (len <= v->max_inline ? IBV_SEND_INLINE : 0) |
                      ((seq + 1) % SIGNAL_EVERY == 0 ? IBV_SEND_SIGNALED : 0),
        .wr.ud = {.ah = ah, .remote_qpn = ntohl(qpn), .remote_qkey = ERMA_VERBS_QKEY},
    };
}

int erma__verbs_tx_burst(struct erma_transport *tr, const struct erma_tx_pkt *pkts, unsigned n)
{
    struct verbs *v = (struct verbs *)tr;
    const int rc = erma_transport_check_tx(tr, pkts, n, ADDR_LEN);
    if (rc != ERMA_OK)
        return rc;
    maybe_read_events(v);
    reap_sends(v);
    if (v->dead)
        return ERMA_ESYS;
    if (v->port_down) { /* nowhere to go: dropped, as datagrams are */
        tr->stats.tx_errors += n;
        return (int)n;
    }
    const uint64_t free_slots = SQ_DEPTH - (v->posted - v->completed);
    if (n > free_slots)
        n = (unsigned)free_slots;
    if (n > ERMA_MAX_BURST)
        n = ERMA_MAX_BURST;
    struct ibv_send_wr wr[ERMA_MAX_BURST], *bad = NULL;
    struct ibv_sge sge[ERMA_MAX_BURST];
    struct ah_slot *slot[ERMA_MAX_BURST];
    unsigned pkt_of[ERMA_MAX_BURST]; /* the packet of each work request */
    unsigned k = 0;
    for (unsigned i = 0; i < n; i++) {
        if (!(slot[k] = erma__verbs_get_ah(v, pkts[i].dst))) {
            tr->stats.tx_errors++; /* dropped, as an unreachable datagram is */
            continue;
        }
        prep_send(v, &pkts[i], slot[k]->ah, v->posted + k, &wr[k], &sge[k]);
        if (k)
            wr[k - 1].next = &wr[k];
        pkt_of[k++] = i;
    }
    unsigned ok = k, accepted = n;
    if (k && ibv_post_send(v->qp, wr, &bad)) {
        /* Nothing from bad on was queued: those packets are not accepted. */
        ok = bad >= wr && bad < wr + k ? (unsigned)(bad - wr) : 0;
        accepted = pkt_of[ok];
        ERMA_WARN("verbs: ibv_post_send took %u of %u: %s", ok, k, strerror(errno));
    }
    for (unsigned j = 0; j < ok; j++) {
        slot[j]->last_seq = wr[j].wr_id + 1;
        tr->stats.tx_bytes += sge[j].length;
    }
    v->posted += ok;
    tr->stats.tx_pkts += ok;
    return (int)accepted;
}

static uint16_t csum_fold(const uint8_t *p, unsigned len)
{
    uint32_t sum = 0;
    for (unsigned i = 0; i + 1 < len; i += 2)
        sum += (uint32_t)p[i] << 8 | p[i + 1];
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)sum;
}

/* Whether the 40 bytes before a packet hold an IPv4 header in their last 20
 * (RoCE v2 over IPv4) rather than a GRH or an IPv6 header: as rdma-core's
 * get_grh_header_version, byte 0 first (6 for IPv6; undefined before an
 * IPv4 header), then the IPv4 header's length and checksum, as byte 20 of
 * an IPv6 header is part of the sender's GID. */
static bool grh_is_ipv4(const uint8_t *g)
{
    const uint8_t *ip = g + 20;
    if (g[0] >> 4 != 6)
        return ip[0] >> 4 == 4;
    return (ip[0] & 0xf) == 5 && csum_fold(ip, 20) == 0xffff;
}

/* The sender's address of a received packet. */
static void rx_source(const struct ibv_wc *wc, const uint8_t *buf, struct erma_addr *src)
{
    uint8_t gid[16] = {0};
    if (wc->wc_flags & IBV_WC_GRH) {
        if (grh_is_ipv4(buf)) {
            gid[10] = gid[11] = 0xff;
            memcpy(gid + 12, buf + 20 + 12, 4);
        } else {
            memcpy(gid, ((const struct ibv_grh *)buf)->sgid.raw, 16);
        }
    }
    verbs_make_addr(src, gid, wc->slid, wc->src_qp);
}


int erma__verbs_rx_burst(struct erma_transport *tr, struct erma_rx_pkt *pkts, unsigned max)
{
    struct verbs *v = (struct verbs *)tr;
    maybe_read_events(v);
    if (v->nrepost) {
        if (erma__verbs_post_recv(v, v->repost, v->nrepost))
            ERMA_WARN("verbs: cannot repost receive buffers: %s", strerror(errno));
        v->nrepost = 0;
    }
    if (max > ERMA_MAX_BURST)
        max = ERMA_MAX_BURST;
    struct ibv_wc wc[ERMA_MAX_BURST];
    const int got = ibv_poll_cq(v->recv_cq, (int)max, wc);
    unsigned n = 0;
    bool flushed = false; /* the QP is in ERR */
    for (int i = 0; i < got; i++) {
        const uint32_t idx = (uint32_t)wc[i].wr_id;
        v->repost[v->nrepost++] = idx;
        uint8_t *buf = v->mem + (size_t)idx * v->rx_stride;
        if (wc[i].status != IBV_WC_SUCCESS || wc[i].byte_len < GRH ||
            wc[i].byte_len > v->rx_stride) {
            tr->stats.rx_dropped++;
            flushed |= wc[i].status == IBV_WC_WR_FLUSH_ERR;
            continue;
        }
        struct erma_rx_pkt *p = &pkts[n++];
        p->data = buf + GRH;
        p->len = wc[i].byte_len - GRH;
        p->rx_ns = 0;
        rx_source(&wc[i], buf, &p->src);
        tr->stats.rx_bytes += p->len;
    }
    if (flushed) {
        read_events(v);
        recover(v);
    }
    tr->stats.rx_pkts += n;
    return (int)(tr->drop_threshold ? erma_transport_inject_loss(tr, pkts, n) : n);
}

