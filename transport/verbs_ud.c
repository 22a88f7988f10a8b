/* Verbs transport: RDMA Unreliable Datagram QPs (erma/verbs.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "erma/errors.h"
#include "erma/log.h"
#include "erma/version.h"
#include "transport/module.h"
#include "erma/verbs.h"

#define GRH 40
#define SQ_DEPTH 256
#define SIGNAL_EVERY 32 /* SQ_DEPTH must be at least twice this */
#define AH_SLOTS 1024
#define ADDR_LEN 22 /* GID (16), LID (2, network order), QPN (4, network order) */

struct ah_slot {
    uint8_t key[18]; /* GID and LID of the peer */
    struct ibv_ah *ah;
};

struct verbs {
    struct erma_transport base;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *send_cq, *recv_cq;
    struct ibv_qp *qp;
    struct ibv_mr *mr;
    uint8_t *mem;       /* rq_depth receive buffers, then SQ_DEPTH send buffers */
    uint32_t rx_stride; /* GRH + max_pkt */
    uint32_t rq_depth, max_inline;
    uint8_t port, gid_index;
    bool ethernet;
    uint64_t posted, completed; /* sends */
    uint32_t repost[ERMA_MAX_BURST]; /* receive buffers handed out last time */
    unsigned nrepost;
    struct ah_slot *ahs; /* AH_SLOTS, open addressing, insert only */
    unsigned nah;
};

static const struct erma_transport_ops erma_verbs_ops;

static int verbs_addr_str(const struct erma_transport *tr, const struct erma_addr *a, char *buf,
                          size_t len)
{
    (void)tr;
    if (a->len != ADDR_LEN)
        return ERMA_EINVAL;
    char gid[INET6_ADDRSTRLEN];
    uint16_t lid;
    uint32_t qpn;
    inet_ntop(AF_INET6, a->raw, gid, sizeof gid);
    memcpy(&lid, a->raw + 16, 2);
    memcpy(&qpn, a->raw + 18, 4);
    const int n = snprintf(buf, len, "%s/%u/%u", gid, ntohs(lid), ntohl(qpn));
    return n < 0 || (size_t)n >= len ? ERMA_EINVAL : ERMA_OK;
}

static void make_addr(struct erma_addr *a, const void *gid, uint16_t lid, uint32_t qpn)
{
    memset(a, 0, sizeof *a);
    a->len = ADDR_LEN;
    memcpy(a->raw, gid, 16);
    lid = htons(lid);
    qpn = htonl(qpn);
    memcpy(a->raw + 16, &lid, 2);
    memcpy(a->raw + 18, &qpn, 4);
}

static int verbs_resolve(struct erma_transport *tr, const char *rest, struct erma_addr *out)
{
    (void)tr;
    char gid_s[INET6_ADDRSTRLEN];
    const char *slash = strchr(rest, '/');
    if (!slash || (size_t)(slash - rest) >= sizeof gid_s)
        return ERMA_EADDR;
    memcpy(gid_s, rest, (size_t)(slash - rest));
    gid_s[slash - rest] = 0;
    uint8_t gid[16];
    char *end, *end2;
    const unsigned long lid = strtoul(slash + 1, &end, 10);
    if (inet_pton(AF_INET6, gid_s, gid) != 1 || end == slash + 1 || *end != '/' || lid > 0xffff)
        return ERMA_EADDR;
    const unsigned long qpn = strtoul(end + 1, &end2, 10);
    if (end2 == end + 1 || *end2 || qpn > 0xffffff)
        return ERMA_EADDR;
    make_addr(out, gid, (uint16_t)lid, (uint32_t)qpn);
    return ERMA_OK;
}

static void verbs_close(struct erma_transport *tr)
{
    struct verbs *v = (struct verbs *)tr;
    if (v->qp)
        ibv_destroy_qp(v->qp);
    for (unsigned i = 0; v->ahs && i < AH_SLOTS; i++)
        if (v->ahs[i].ah)
            ibv_destroy_ah(v->ahs[i].ah);
    if (v->mr)
        ibv_dereg_mr(v->mr);
    if (v->send_cq)
        ibv_destroy_cq(v->send_cq);
    if (v->recv_cq)
        ibv_destroy_cq(v->recv_cq);
    if (v->pd)
        ibv_dealloc_pd(v->pd);
    if (v->ctx)
        ibv_close_device(v->ctx);
    free(v->ahs);
    free(v->mem);
    free(v);
}

/* Posts receive buffers idx[0..n) as one chain. */
static int post_recv(struct verbs *v, const uint32_t *idx, unsigned n)
{
    struct ibv_recv_wr wr[ERMA_MAX_BURST], *bad;
    struct ibv_sge sge[ERMA_MAX_BURST];
    for (unsigned i = 0; i < n; i++) {
        sge[i] = (struct ibv_sge){.addr = (uintptr_t)(v->mem + (size_t)idx[i] * v->rx_stride),
                                  .length = v->rx_stride,
                                  .lkey = v->mr->lkey};
        wr[i] = (struct ibv_recv_wr){.wr_id = idx[i], .sg_list = &sge[i], .num_sge = 1,
                                     .next = i + 1 < n ? &wr[i + 1] : NULL};
    }
    return n ? ibv_post_recv(v->qp, wr, &bad) : 0;
}

/* Parses "[DEVICE][:PORT][?gid=N]". */
static int parse_local(const char *rest, char *dev, size_t len, unsigned *port, unsigned *gid)
{
    const size_t n = strcspn(rest, ":?");
    if (n >= len)
        return ERMA_EADDR;
    memcpy(dev, rest, n);
    dev[n] = 0;
    *port = 1;
    *gid = 0;
    const char *p = rest + n;
    char *end;
    if (*p == ':') {
        *port = (unsigned)strtoul(p + 1, &end, 10);
        if (end == p + 1 || *port == 0 || *port > 255)
            return ERMA_EADDR;
        p = end;
    }
    if (*p == '?') {
        if (strncmp(p, "?gid=", 5) != 0)
            return ERMA_EADDR;
        *gid = (unsigned)strtoul(p + 5, &end, 10);
        if (end == p + 5 || *gid > 255)
            return ERMA_EADDR;
        p = end;
    }
    return *p ? ERMA_EADDR : ERMA_OK;
}

/* Opens the named device (or the first); ERMA_ENOTSUP when there is none. */
static int open_device(struct verbs *v, const char *name)
{
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    if (!list || num == 0) {
        ERMA_WARN("verbs: no RDMA device (ibv_get_device_list found none%s%s)",
                  list ? "" : ": ", list ? "" : strerror(errno));
        if (list)
            ibv_free_device_list(list);
        return ERMA_ENOTSUP;
    }
    struct ibv_device *dev = NULL;
    for (int i = 0; i < num && !dev; i++)
        if (!name[0] || strcmp(ibv_get_device_name(list[i]), name) == 0)
            dev = list[i];
    if (dev)
        v->ctx = ibv_open_device(dev);
    ibv_free_device_list(list);
    if (!v->ctx) {
        ERMA_WARN("verbs: no RDMA device %s", dev ? "could be opened" : name);
        return ERMA_ENOTSUP;
    }
    return ERMA_OK;
}

static int qp_to_rts(struct verbs *v)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = v->port,
                            .qkey = ERMA_VERBS_QKEY};
    if (ibv_modify_qp(v->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
        return ERMA_ESYS;
    a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR};
    if (ibv_modify_qp(v->qp, &a, IBV_QP_STATE))
        return ERMA_ESYS;
    a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .sq_psn = 0};
    if (ibv_modify_qp(v->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
        return ERMA_ESYS;
    return ERMA_OK;
}

static int verbs_open(const char *rest, const struct erma_transport_cfg *cfg,
                      struct erma_transport **out)
{
    char name[64];
    unsigned port, gid_index;
    if (parse_local(rest, name, sizeof name, &port, &gid_index) != ERMA_OK) {
        ERMA_WARN("verbs: bad URI verbs://%s (want [DEVICE][:PORT][?gid=N])", rest);
        return ERMA_EADDR;
    }
    struct verbs *v = calloc(1, sizeof *v);
    if (!v)
        return ERMA_ENOMEM;
    v->base.ops = &erma_verbs_ops;
    v->port = (uint8_t)port;
    v->gid_index = (uint8_t)gid_index;
    int rc = open_device(v, name);
    if (rc != ERMA_OK)
        goto fail;
    rc = ERMA_ENOTSUP;
    struct ibv_port_attr pa;
    struct ibv_device_attr da;
    union ibv_gid gid;
    if (ibv_query_device(v->ctx, &da) || ibv_query_port(v->ctx, v->port, &pa) ||
        ibv_query_gid(v->ctx, v->port, v->gid_index, &gid)) {
        ERMA_WARN("verbs: cannot query %s port %u gid %u", ibv_get_device_name(v->ctx->device),
                  port, gid_index);
        goto fail;
    }
    if (pa.state != IBV_PORT_ACTIVE) {
        ERMA_WARN("verbs: %s port %u is not active", ibv_get_device_name(v->ctx->device), port);
        goto fail;
    }
    v->ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
    const uint32_t path_mtu = 128u << pa.active_mtu;
    v->base.max_pkt = cfg->mtu - ERMA_IP_UDP_OVERHEAD;
    if (v->base.max_pkt > path_mtu) {
        ERMA_NOTICE("verbs: max_pkt %u lowered to the path MTU %u", v->base.max_pkt, path_mtu);
        v->base.max_pkt = path_mtu;
    }
    v->rq_depth = cfg->rx_ring < (uint32_t)da.max_qp_wr ? cfg->rx_ring : (uint32_t)da.max_qp_wr;
    if ((uint32_t)da.max_cqe < v->rq_depth)
        v->rq_depth = (uint32_t)da.max_cqe;
    v->base.rx_ring = v->rq_depth;
    v->rx_stride = GRH + v->base.max_pkt;
    const size_t mem_len = ((size_t)v->rq_depth + SQ_DEPTH) * v->rx_stride;
    rc = ERMA_ENOMEM;
    if (!(v->mem = malloc(mem_len)) || !(v->ahs = calloc(AH_SLOTS, sizeof *v->ahs)))
        goto fail;
    rc = ERMA_ESYS;
    if (!(v->pd = ibv_alloc_pd(v->ctx)) ||
        !(v->mr = ibv_reg_mr(v->pd, v->mem, mem_len, IBV_ACCESS_LOCAL_WRITE)) ||
        !(v->send_cq = ibv_create_cq(v->ctx, SQ_DEPTH, NULL, NULL, 0)) ||
        !(v->recv_cq = ibv_create_cq(v->ctx, (int)v->rq_depth, NULL, NULL, 0))) {
        ERMA_WARN("verbs: cannot allocate PD/MR/CQ: %s", strerror(errno));
        goto fail;
    }
    struct ibv_qp_init_attr qa = {
        .send_cq = v->send_cq,
        .recv_cq = v->recv_cq,
        .cap = {.max_send_wr = SQ_DEPTH, .max_recv_wr = v->rq_depth, .max_send_sge = 1,
                .max_recv_sge = 1, .max_inline_data = 128},
        .qp_type = IBV_QPT_UD,
    };
    if (!(v->qp = ibv_create_qp(v->pd, &qa))) {
        qa.cap.max_inline_data = 0;
        v->qp = ibv_create_qp(v->pd, &qa);
    }
    if (!v->qp || qp_to_rts(v) != ERMA_OK) {
        ERMA_WARN("verbs: cannot create or start the UD QP: %s", strerror(errno));
        goto fail;
    }
    v->max_inline = qa.cap.max_inline_data;
    for (uint32_t i = 0; i < v->rq_depth; i += ERMA_MAX_BURST) {
        uint32_t idx[ERMA_MAX_BURST];
        unsigned n = 0;
        for (; n < ERMA_MAX_BURST && i + n < v->rq_depth; n++)
            idx[n] = i + n;
        if (post_recv(v, idx, n)) {
            ERMA_WARN("verbs: cannot post receive buffers");
            goto fail;
        }
    }
    make_addr(&v->base.local, gid.raw, pa.lid, v->qp->qp_num);
    *out = &v->base;
    return ERMA_OK;
fail:
    verbs_close(&v->base);
    return rc;
}

/* The cached address handle for dst's GID and LID, created on a miss. */
static struct ibv_ah *get_ah(struct verbs *v, const struct erma_addr *dst)
{
    uint32_t h = 2166136261u;
    for (int i = 0; i < 18; i++)
        h = (h ^ dst->raw[i]) * 16777619u;
    for (unsigned i = 0; i < AH_SLOTS; i++) {
        struct ah_slot *s = &v->ahs[(h + i) % AH_SLOTS];
        if (s->ah && memcmp(s->key, dst->raw, 18) == 0)
            return s->ah;
        if (s->ah)
            continue;
        if (v->nah >= AH_SLOTS * 3 / 4)
            return NULL;
        uint16_t lid;
        memcpy(&lid, dst->raw + 16, 2);
        struct ibv_ah_attr a = {.dlid = ntohs(lid), .port_num = v->port};
        static const uint8_t zero[8];
        if (v->ethernet || memcmp(dst->raw + 8, zero, 8) != 0) {
            a.is_global = 1;
            a.grh.hop_limit = 64;
            a.grh.sgid_index = v->gid_index;
            memcpy(a.grh.dgid.raw, dst->raw, 16);
        }
        if (!(s->ah = ibv_create_ah(v->pd, &a)))
            return NULL;
        memcpy(s->key, dst->raw, 18);
        v->nah++;
        return s->ah;
    }
    return NULL;
}

/* Reaps send completions; each signaled one retires every send before it. */
static void reap_sends(struct verbs *v)
{
    struct ibv_wc wc[8];
    const int n = ibv_poll_cq(v->send_cq, 8, wc);
    for (int i = 0; i < n; i++) {
        if (wc[i].status != IBV_WC_SUCCESS) {
            v->base.stats.tx_errors++;
            ERMA_WARN("verbs: send failed: %s", ibv_wc_status_str(wc[i].status));
        }
        if (wc[i].wr_id + 1 > v->completed)
            v->completed = wc[i].wr_id + 1;
    }
}

static int verbs_tx_burst(struct erma_transport *tr, const struct erma_tx_pkt *pkts, unsigned n)
{
    struct verbs *v = (struct verbs *)tr;
    const int rc = erma_transport_check_tx(tr, pkts, n, ADDR_LEN);
    if (rc != ERMA_OK)
        return rc;
    reap_sends(v);
    const uint64_t free_slots = SQ_DEPTH - (v->posted - v->completed);
    if (n > free_slots)
        n = (unsigned)free_slots;
    if (n > ERMA_MAX_BURST)
        n = ERMA_MAX_BURST;
    struct ibv_send_wr wr[ERMA_MAX_BURST], *bad = NULL;
    struct ibv_sge sge[ERMA_MAX_BURST];
    unsigned k = 0;
    for (unsigned i = 0; i < n; i++) {
        struct ibv_ah *ah = get_ah(v, pkts[i].dst);
        if (!ah) {
            tr->stats.tx_errors++; /* dropped, as an unreachable datagram is */
            continue;
        }
        const uint64_t seq = v->posted + k;
        uint8_t *buf = v->mem + ((size_t)v->rq_depth + seq % SQ_DEPTH) * v->rx_stride;
        const uint32_t len = pkts[i].hdr_len + pkts[i].data_len;
        memcpy(buf, pkts[i].hdr, pkts[i].hdr_len);
        if (pkts[i].data_len)
            memcpy(buf + pkts[i].hdr_len, pkts[i].data, pkts[i].data_len);
        uint32_t qpn;
        memcpy(&qpn, pkts[i].dst->raw + 18, 4);
        sge[k] = (struct ibv_sge){.addr = (uintptr_t)buf, .length = len, .lkey = v->mr->lkey};
        wr[k] = (struct ibv_send_wr){
            .wr_id = seq,
            .sg_list = &sge[k],
            .num_sge = 1,
            .opcode = IBV_WR_SEND,
            .send_flags = (len <= v->max_inline ? IBV_SEND_INLINE : 0) |
                          ((seq + 1) % SIGNAL_EVERY == 0 ? IBV_SEND_SIGNALED : 0),
            .wr.ud = {.ah = ah, .remote_qpn = ntohl(qpn), .remote_qkey = ERMA_VERBS_QKEY},
        };
        if (k)
            wr[k - 1].next = &wr[k];
        tr->stats.tx_bytes += len;
        k++;
    }
    if (k && ibv_post_send(v->qp, wr, &bad)) {
        /* Nothing from bad on was queued: give those slots back. */
        const unsigned ok = (unsigned)(bad - wr);
        for (unsigned i = ok; i < k; i++)
            tr->stats.tx_bytes -= sge[i].length;
        tr->stats.tx_errors += k - ok;
        k = ok;
    }
    v->posted += k;
    tr->stats.tx_pkts += k;
    return (int)n;
}

static int verbs_rx_burst(struct erma_transport *tr, struct erma_rx_pkt *pkts, unsigned max)
{
    struct verbs *v = (struct verbs *)tr;
    if (v->nrepost) {
        if (post_recv(v, v->repost, v->nrepost))
            ERMA_WARN("verbs: cannot repost receive buffers");
        v->nrepost = 0;
    }
    if (max > ERMA_MAX_BURST)
        max = ERMA_MAX_BURST;
    struct ibv_wc wc[ERMA_MAX_BURST];
    const int got = ibv_poll_cq(v->recv_cq, (int)max, wc);
    unsigned n = 0;
    for (int i = 0; i < got; i++) {
        const uint32_t idx = (uint32_t)wc[i].wr_id;
        v->repost[v->nrepost++] = idx;
        uint8_t *buf = v->mem + (size_t)idx * v->rx_stride;
        if (wc[i].status != IBV_WC_SUCCESS || wc[i].byte_len < GRH ||
            wc[i].byte_len - GRH > tr->max_pkt) {
            tr->stats.rx_dropped++;
            continue;
        }
        uint8_t gid[16] = {0};
        if (wc[i].wc_flags & IBV_WC_GRH) {
            if (v->ethernet && (buf[20] >> 4) == 4) {
                /* RoCE v2 over IPv4: the IPv4 header fills the GRH's last 20 bytes. */
                gid[10] = gid[11] = 0xff;
                memcpy(gid + 12, buf + 20 + 12, 4);
            } else {
                memcpy(gid, ((const struct ibv_grh *)buf)->sgid.raw, 16);
            }
        }
        struct erma_rx_pkt *p = &pkts[n++];
        p->data = buf + GRH;
        p->len = wc[i].byte_len - GRH;
        make_addr(&p->src, gid, wc[i].slid, wc[i].src_qp);
        tr->stats.rx_bytes += p->len;
    }
    tr->stats.rx_pkts += n;
    return (int)n;
}

static const struct erma_transport_ops erma_verbs_ops = {
    .scheme = "verbs",
    .open = verbs_open,
    .close = verbs_close,
    .tx_burst = verbs_tx_burst,
    .rx_burst = verbs_rx_burst,
    .resolve = verbs_resolve,
    .addr_str = verbs_addr_str,
};

ERMA_TRANSPORT_MODULE(erma_verbs_ops);
