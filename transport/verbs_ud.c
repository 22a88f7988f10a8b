/* Verbs transport: RDMA Unreliable Datagram QPs (erma/verbs.h); this
 * file: addresses, open and close, the QP (verbs_ud.h). */
#include "transport/verbs_ud.h"

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
    const int n = snprintf(buf, len, "%s/%u:%u", gid, ntohs(lid), ntohl(qpn));
    return n < 0 || (size_t)n >= len ? ERMA_EINVAL : ERMA_OK;
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
    /* "GID/LID:QPN" (QPN where other schemes have the port), or "GID/LID/QPN" */
    if (inet_pton(AF_INET6, gid_s, gid) != 1 || end == slash + 1 || (*end != ':' && *end != '/') ||
        lid > 0xffff)
        return ERMA_EADDR;
    const unsigned long qpn = strtoul(end + 1, &end2, 10);
    if (end2 == end + 1 || *end2 || qpn > 0xffffff)
        return ERMA_EADDR;
    verbs_make_addr(out, gid, (uint16_t)lid, (uint32_t)qpn);
    return ERMA_OK;
}

/* ---- open and close ---- */
static void verbs_close(struct erma_transport *tr)
{
    struct verbs *v = (struct verbs *)tr;
    erma__verbs_stop_resolver(v);
    if (v->qp)
        ibv_destroy_qp(v->qp);
    for (unsigned i = 0; v->ahs && i < v->nah; i++)
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
    pthread_mutex_destroy(&v->lock);
    pthread_cond_destroy(&v->wake);
    free(v->bucket);
    free(v->ahs);
    free(v->mem);
    free(v);
}

int erma__verbs_post_recv(struct verbs *v, const uint32_t *idx, unsigned n)
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

int erma__verbs_post_all_recv(struct verbs *v)
{
    uint32_t idx[ERMA_MAX_BURST];
    unsigned n = 0;
    for (uint32_t i = 0; i < v->rq_depth; i++) {
        bool held = false;
        for (unsigned k = 0; k < v->nrepost && !held; k++)
            held = v->repost[k] == i;
        if (!held)
            idx[n++] = i;
        if ((n == ERMA_MAX_BURST || i + 1 == v->rq_depth) && erma__verbs_post_recv(v, idx, n))
            return ERMA_ESYS;
        if (n == ERMA_MAX_BURST)
            n = 0;
    }
    return ERMA_OK;
}

/* Parses "[DEVICE][:PORT][?gid=N]"; PORT 0 is the default, 1. *gid is -1
 * when not given. */
static int parse_local(const char *rest, char *dev, size_t len, unsigned *port, int *gid)
{
    const size_t n = strcspn(rest, ":?");
    if (n >= len)
        return ERMA_EADDR;
    memcpy(dev, rest, n);
    dev[n] = 0;
    *port = 1;
    *gid = -1;
    const char *p = rest + n;
    char *end;
    if (*p == ':') {
        const unsigned long v = strtoul(p + 1, &end, 10);
        if (end == p + 1 || v > 255)
            return ERMA_EADDR;
        *port = v ? (unsigned)v : 1;
        p = end;
    }
    if (*p == '?') {
        if (strncmp(p, "?gid=", 5) != 0)
            return ERMA_EADDR;
        const unsigned long v = strtoul(p + 5, &end, 10);
        if (end == p + 5 || v > 255)
            return ERMA_EADDR;
        *gid = (int)v;
        p = end;
    }
    return *p ? ERMA_EADDR : ERMA_OK;
}

/* Opens dev when it can carry UD on an active port; else why says why. */
static int try_device(struct verbs *v, struct ibv_device *dev, struct ibv_port_attr *pa,
                      char *why, size_t len)
{
    const char *name = ibv_get_device_name(dev);
    if (dev->transport_type != IBV_TRANSPORT_IB) {
        snprintf(why, len, "%s is not InfiniBand or RoCE (iWARP has no UD QPs)", name);
        return ERMA_ENOTSUP;
    }
    if (!(v->ctx = ibv_open_device(dev))) {
        snprintf(why, len, "%s cannot be opened: %s", name, strerror(errno));
        return ERMA_ENOTSUP;
    }
    const int q = ibv_query_port(v->ctx, v->port, pa);
    if (q || pa->state != IBV_PORT_ACTIVE) {
        snprintf(why, len, "%s port %u is %s", name, v->port, q ? "not there" : "not active");
        ibv_close_device(v->ctx);
        v->ctx = NULL;
        return ERMA_ENOTSUP;
    }
    return ERMA_OK;
}

/* Opens the named device or the first usable one; ERMA_ENOTSUP when there
 * is none (no device, iWARP only, ports down), with the reason logged. */
static int open_device(struct verbs *v, const char *name, struct ibv_port_attr *pa)
{
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    char why[160] = "ibv_get_device_list found none";
    if (!list)
        snprintf(why, sizeof why, "ibv_get_device_list: %s", strerror(errno));
    else if (name[0])
        snprintf(why, sizeof why, "no device named %s", name);
    int rc = ERMA_ENOTSUP;
    for (int i = 0; i < num && rc != ERMA_OK; i++)
        if (!name[0] || strcmp(ibv_get_device_name(list[i]), name) == 0)
            rc = try_device(v, list[i], pa, why, sizeof why);
    if (list)
        ibv_free_device_list(list);
    if (rc != ERMA_OK)
        ERMA_WARN("verbs: no usable RDMA device (%s)", why);
    return rc;
}

/* On RoCE, the first RoCE v2 GID (an IPv4-mapped one first: entry 0 is the
 * RoCE v1 link-local one); on InfiniBand, 0. */
static int pick_gid(struct verbs *v, const struct ibv_port_attr *pa)
{
    if (pa->link_layer != IBV_LINK_LAYER_ETHERNET)
        return 0;
    static const uint8_t v4mapped[12] = {[10] = 0xff, [11] = 0xff};
    int any = -1;
    for (int i = 0; i < pa->gid_tbl_len && i < 256; i++) {
        struct ibv_gid_entry e;
        if (ibv_query_gid_ex(v->ctx, v->port, (uint32_t)i, &e, 0) ||
            e.gid_type != IBV_GID_TYPE_ROCE_V2)
            continue;
        if (memcmp(e.gid.raw, v4mapped, 12) == 0)
            return i;
        if (any < 0)
            any = i;
    }
    if (any < 0)
        ERMA_WARN("verbs: %s port %u has no RoCE v2 GID; using GID 0 (RoCE v1)",
                  ibv_get_device_name(v->ctx->device), v->port);
    return any < 0 ? 0 : any;
}

/* The port's line rate from its width and per-lane speed (0: unknown). */
static uint64_t port_bps(const struct ibv_port_attr *pa)
{
    static const struct { uint8_t code; uint32_t mbps; } lane[] = {
        {1, 2000}, {2, 4000}, {4, 8000}, {8, 10000}, {16, 13636}, {32, 25000},
        {64, 50000}, {128, 100000}};
    static const struct { uint8_t code, lanes; } width[] = {
        {1, 1}, {2, 4}, {4, 8}, {8, 12}, {16, 2}};
    uint64_t mbps = 0, lanes = 0;
    for (size_t i = 0; i < sizeof lane / sizeof *lane; i++)
        if (lane[i].code == pa->active_speed)
            mbps = lane[i].mbps;
    for (size_t i = 0; i < sizeof width / sizeof *width; i++)
        if (width[i].code == pa->active_width)
            lanes = width[i].lanes;
    return mbps * lanes * 1000000ull;
}

int erma__verbs_qp_to_rts(struct verbs *v)
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

/* PD, buffers, MR, CQs, the QP in RTS with every receive buffer posted. */
static int make_qp(struct verbs *v)
{
    const size_t mem_len = ((size_t)v->rq_depth + SQ_DEPTH) * v->rx_stride;
    if (!(v->mem = malloc(mem_len)))
        return ERMA_ENOMEM;
    if (!(v->pd = ibv_alloc_pd(v->ctx)) ||
        !(v->mr = ibv_reg_mr(v->pd, v->mem, mem_len, IBV_ACCESS_LOCAL_WRITE)) ||
        !(v->send_cq = ibv_create_cq(v->ctx, SQ_DEPTH, NULL, NULL, 0)) ||
        !(v->recv_cq = ibv_create_cq(v->ctx, (int)v->rq_depth, NULL, NULL, 0))) {
        ERMA_WARN("verbs: cannot allocate PD/MR/CQ: %s", strerror(errno));
        return ERMA_ESYS;
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
    if (!v->qp || erma__verbs_qp_to_rts(v) != ERMA_OK) {
        ERMA_WARN("verbs: cannot create or start the UD QP: %s", strerror(errno));
        return ERMA_ESYS;
    }
    v->max_inline = qa.cap.max_inline_data;
    if (erma__verbs_post_all_recv(v) != ERMA_OK) {
        ERMA_WARN("verbs: cannot post receive buffers: %s", strerror(errno));
        return ERMA_ESYS;
    }
    return ERMA_OK;
}

/* Sizes, hints and the local address, from the device and port. */
static int setup(struct verbs *v, const struct erma_transport_cfg *cfg,
                 const struct ibv_port_attr *pa, int gid_index)
{
    struct ibv_device_attr da;
    union ibv_gid gid;
    v->gid_index = (uint8_t)(gid_index >= 0 ? gid_index : pick_gid(v, pa));
    if (ibv_query_device(v->ctx, &da) || ibv_query_gid(v->ctx, v->port, v->gid_index, &gid)) {
        ERMA_WARN("verbs: cannot query %s port %u gid %u", ibv_get_device_name(v->ctx->device),
                  v->port, v->gid_index);
        return ERMA_ENOTSUP;
    }
    const uint32_t path_mtu = 128u << pa->active_mtu;
    v->base.max_pkt = cfg->mtu - ERMA_IP_UDP_OVERHEAD;
    if (v->base.max_pkt > path_mtu) {
        ERMA_NOTICE("verbs: max_pkt %u lowered to the path MTU %u", v->base.max_pkt, path_mtu);
        v->base.max_pkt = path_mtu;
    }
    v->rx_stride = GRH + path_mtu;
    v->rq_depth = cfg->rx_ring < (uint32_t)da.max_qp_wr ? cfg->rx_ring : (uint32_t)da.max_qp_wr;
    if ((uint32_t)da.max_cqe < v->rq_depth)
        v->rq_depth = (uint32_t)da.max_cqe;
    v->base.rx_ring = v->rq_depth;
    /* A NIC's round trip is microseconds, but the peer is a process whose
     * CPU may be shared: it stalls for milliseconds now and then, as a
     * kernel stack's does (udp.c). */
    /* RoCEv2: Ethernet 14, IPv4 20, UDP 8, BTH 12, DETH 8, ICRC 4, and
     * FCS, preamble and inter-frame gap 24 */
    v->base.hints = (struct erma_transport_hints){.link_bps = port_bps(pa),
                                                  .frame_overhead = 90,
                                                  .base_rtt_ns = 5000,
                                                  .jitter_ns = 1000000,
                                                  .min_timeout_ns = 10000000};
    int rc = make_qp(v);
    if (rc == ERMA_OK)
        verbs_make_addr(&v->base.local, gid.raw, pa->lid, v->qp->qp_num);
    return rc;
}

static int verbs_open(const char *rest, const struct erma_transport_cfg *cfg,
                      struct erma_transport **out)
{
    char name[64];
    unsigned port;
    int gid_index;
    if (parse_local(rest, name, sizeof name, &port, &gid_index) != ERMA_OK) {
        ERMA_WARN("verbs: bad URI verbs://%s (want [DEVICE][:PORT][?gid=N])", rest);
        return ERMA_EADDR;
    }
    struct verbs *v = calloc(1, sizeof *v);
    if (!v)
        return ERMA_ENOMEM;
    v->base.ops = &erma_verbs_ops;
    v->port = (uint8_t)port;
    pthread_mutex_init(&v->lock, NULL);
    pthread_cond_init(&v->wake, NULL);
    struct ibv_port_attr pa;
    int rc = open_device(v, name, &pa);
    if (rc == ERMA_OK)
        rc = setup(v, cfg, &pa, gid_index);
    if (rc == ERMA_OK) {
        /* Events are read without blocking, from the data path. */
        const int fl = fcntl(v->ctx->async_fd, F_GETFL);
        rc = fl < 0 || fcntl(v->ctx->async_fd, F_SETFL, fl | O_NONBLOCK) ? ERMA_ESYS : ERMA_OK;
    }
    if (rc == ERMA_OK) {
        v->ahs = calloc(AH_SLOTS, sizeof *v->ahs);
        v->bucket = malloc(AH_BUCKETS * sizeof *v->bucket);
        rc = v->ahs && v->bucket ? ERMA_OK : ERMA_ENOMEM;
    }
    if (rc == ERMA_OK) {
        memset(v->bucket, -1, AH_BUCKETS * sizeof *v->bucket);
        rc = pthread_create(&v->resolver, NULL, erma__verbs_resolver, v) ? ERMA_ESYS : ERMA_OK;
        v->resolver_started = rc == ERMA_OK;
    }
    if (rc != ERMA_OK) {
        verbs_close(&v->base);
        return rc;
    }
    *out = &v->base;
    return ERMA_OK;
}

static const struct erma_transport_ops erma_verbs_ops = {
    .scheme = "verbs",
    .open = verbs_open,
    .close = verbs_close,
    .tx_burst = erma__verbs_tx_burst,
    .rx_burst = erma__verbs_rx_burst,
    .resolve = verbs_resolve,
    .addr_str = verbs_addr_str,
};

ERMA_TRANSPORT_MODULE(erma_verbs_ops);
