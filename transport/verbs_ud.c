/* Verbs transport: RDMA Unreliable Datagram QPs (erma/verbs.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#include "erma/errors.h"
#include "erma/log.h"
#include "erma/sdk/rand.h"
#include "erma/version.h"
#include "transport/module.h"
#include "erma/verbs.h"

#define GRH 40
#define SQ_DEPTH 256
#define SIGNAL_EVERY 32 /* SQ_DEPTH must be at least twice this */
#define AH_SLOTS 1024   /* cached address handles; the least recently used go first */
#define AH_BUCKETS 2048
#define AH_QUEUE 64     /* address handles waiting for the resolver thread */
#define AH_RETRY_NS 1000000000ull /* a failed address handle is not retried for this long */
#define ASYNC_EVERY 1024 /* bursts between looks at the async events */
#define ADDR_LEN 22 /* GID (16), LID (2, network order), QPN (4, network order) */

enum { AH_FREE, AH_PENDING, AH_READY, AH_FAILED };

struct ah_slot {
    uint8_t key[18];   /* GID and LID of the peer */
    _Atomic int state; /* PENDING -> READY or FAILED is the resolver's */
    bool used;         /* clock bit for eviction */
    int32_t next;      /* hash chain */
    struct ibv_ah *ah;
    uint64_t retry_ns; /* FAILED: when to try again */
    uint64_t last_seq; /* 1 + the last send that used ah: kept until it completed */
};

struct verbs {
    struct erma_transport base;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *send_cq, *recv_cq;
    struct ibv_qp *qp;
    struct ibv_mr *mr;
    uint8_t *mem;       /* rq_depth receive buffers, then SQ_DEPTH send buffers */
    uint32_t rx_stride; /* GRH + the port's MTU: the largest UD packet a peer may send */
    uint32_t rq_depth, max_inline;
    uint8_t port, gid_index;
    bool port_down, dead;
    uint64_t posted, completed; /* sends */
    uint32_t repost[ERMA_MAX_BURST]; /* receive buffers handed out last time */
    unsigned nrepost, bursts;
    /* address handles: the cache is the data path's, creation the resolver's */
    struct ah_slot *ahs;
    int32_t *bucket;
    unsigned hand, nah;
    pthread_t resolver;
    bool resolver_started, stopping;
    pthread_mutex_t lock; /* the queue below and stopping */
    pthread_cond_t wake;
    uint32_t queue[AH_QUEUE];
    unsigned qhead, qlen;
};

static const struct erma_transport_ops erma_verbs_ops;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

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
    /* "GID/LID:QPN" (QPN where other schemes have the port), or "GID/LID/QPN" */
    if (inet_pton(AF_INET6, gid_s, gid) != 1 || end == slash + 1 || (*end != ':' && *end != '/') ||
        lid > 0xffff)
        return ERMA_EADDR;
    const unsigned long qpn = strtoul(end + 1, &end2, 10);
    if (end2 == end + 1 || *end2 || qpn > 0xffffff)
        return ERMA_EADDR;
    make_addr(out, gid, (uint16_t)lid, (uint32_t)qpn);
    return ERMA_OK;
}

/* ---- address handles ---- */

/* The resolver thread: creates the address handles the data path asks for,
 * as ibv_create_ah may block (about 1 s on RoCE while the kernel resolves
 * a MAC). */
static void *resolver(void *arg)
{
    struct verbs *v = arg;
    pthread_mutex_lock(&v->lock);
    for (;;) {
        while (!v->qlen && !v->stopping)
            pthread_cond_wait(&v->wake, &v->lock);
        if (v->stopping)
            break;
        struct ah_slot *s = &v->ahs[v->queue[v->qhead]];
        v->qhead = (v->qhead + 1) % AH_QUEUE;
        v->qlen--;
        pthread_mutex_unlock(&v->lock);
        uint16_t lid;
        memcpy(&lid, s->key + 16, 2);
        /* Always with a GRH, so that the receiver learns the sender's GID. */
        struct ibv_ah_attr a = {.dlid = ntohs(lid), .port_num = v->port, .is_global = 1,
                                .grh = {.hop_limit = 64, .sgid_index = v->gid_index}};
        memcpy(a.grh.dgid.raw, s->key, 16);
        s->ah = ibv_create_ah(v->pd, &a);
        if (!s->ah) {
            char gid[INET6_ADDRSTRLEN];
            ERMA_WARN("verbs: no address handle for %s: %s (not retried for 1 s)",
                      inet_ntop(AF_INET6, s->key, gid, sizeof gid), strerror(errno));
            s->retry_ns = now_ns() + AH_RETRY_NS;
        }
        atomic_store_explicit(&s->state, s->ah ? AH_READY : AH_FAILED, memory_order_release);
        pthread_mutex_lock(&v->lock);
    }
    pthread_mutex_unlock(&v->lock);
    return NULL;
}

static unsigned ah_hash(const uint8_t *key)
{
    uint32_t h = 2166136261u;
    for (int i = 0; i < 18; i++)
        h = (h ^ key[i]) * 16777619u;
    return h % AH_BUCKETS;
}

static void ah_unlink(struct verbs *v, int32_t i)
{
    int32_t *p = &v->bucket[ah_hash(v->ahs[i].key)];
    while (*p != i)
        p = &v->ahs[*p].next;
    *p = v->ahs[i].next;
}

/* A slot to reuse: a free one, else the clock's first not recently used one
 * whose sends all completed; -1 when none is. */
static int32_t ah_victim(struct verbs *v)
{
    if (v->nah < AH_SLOTS)
        return (int32_t)v->nah++;
    for (unsigned k = 0; k < 2 * AH_SLOTS; k++) {
        const unsigned i = v->hand;
        struct ah_slot *s = &v->ahs[i];
        v->hand = (v->hand + 1) % AH_SLOTS;
        const int st = atomic_load_explicit(&s->state, memory_order_acquire);
        if (st == AH_PENDING || (st == AH_READY && s->last_seq > v->completed))
            continue;
        if (s->used) {
            s->used = false;
            continue;
        }
        ah_unlink(v, (int32_t)i);
        if (s->ah)
            ibv_destroy_ah(s->ah);
        s->ah = NULL;
        atomic_store_explicit(&s->state, AH_FREE, memory_order_relaxed);
        return (int32_t)i;
    }
    return -1;
}

/* Hands slot i to the resolver; false when its queue is full. */
static bool ah_request(struct verbs *v, int32_t i)
{
    pthread_mutex_lock(&v->lock);
    const bool ok = v->qlen < AH_QUEUE;
    if (ok) {
        v->queue[(v->qhead + v->qlen++) % AH_QUEUE] = (uint32_t)i;
        atomic_store_explicit(&v->ahs[i].state, AH_PENDING, memory_order_relaxed);
        pthread_cond_signal(&v->wake);
    }
    pthread_mutex_unlock(&v->lock);
    return ok;
}

/* The cached address handle for dst's GID and LID, or NULL while the
 * resolver creates it or after it failed (for AH_RETRY_NS). */
static struct ah_slot *get_ah(struct verbs *v, const struct erma_addr *dst)
{
    const unsigned b = ah_hash(dst->raw);
    int32_t i = v->bucket[b];
    while (i >= 0 && memcmp(v->ahs[i].key, dst->raw, 18) != 0)
        i = v->ahs[i].next;
    if (i >= 0) {
        struct ah_slot *s = &v->ahs[i];
        const int st = atomic_load_explicit(&s->state, memory_order_acquire);
        s->used = true;
        if (st == AH_READY)
            return s;
        if (st == AH_FAILED && now_ns() >= s->retry_ns)
            ah_request(v, i); /* failed long enough ago, or the queue was full */
        return NULL;
    }
    if ((i = ah_victim(v)) < 0)
        return NULL;
    struct ah_slot *s = &v->ahs[i];
    memcpy(s->key, dst->raw, 18);
    s->used = true;
    s->last_seq = 0;
    s->retry_ns = 0;
    atomic_store_explicit(&s->state, AH_FAILED, memory_order_relaxed); /* until requested */
    s->next = v->bucket[b];
    v->bucket[b] = i;
    ah_request(v, i);
    return NULL;
}

/* ---- open and close ---- */

static void stop_resolver(struct verbs *v)
{
    if (!v->resolver_started)
        return;
    pthread_mutex_lock(&v->lock);
    v->stopping = true;
    pthread_cond_signal(&v->wake);
    pthread_mutex_unlock(&v->lock);
    pthread_join(v->resolver, NULL);
    v->resolver_started = false;
}

static void verbs_close(struct erma_transport *tr)
{
    struct verbs *v = (struct verbs *)tr;
    stop_resolver(v);
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

/* Posts every receive buffer but those the caller still holds (repost). */
static int post_all_recv(struct verbs *v)
{
    uint32_t idx[ERMA_MAX_BURST];
    unsigned n = 0;
    for (uint32_t i = 0; i < v->rq_depth; i++) {
        bool held = false;
        for (unsigned k = 0; k < v->nrepost && !held; k++)
            held = v->repost[k] == i;
        if (!held)
            idx[n++] = i;
        if ((n == ERMA_MAX_BURST || i + 1 == v->rq_depth) && post_recv(v, idx, n))
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
    if (!v->qp || qp_to_rts(v) != ERMA_OK) {
        ERMA_WARN("verbs: cannot create or start the UD QP: %s", strerror(errno));
        return ERMA_ESYS;
    }
    v->max_inline = qa.cap.max_inline_data;
    if (post_all_recv(v) != ERMA_OK) {
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
        make_addr(&v->base.local, gid.raw, pa->lid, v->qp->qp_num);
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
        rc = pthread_create(&v->resolver, NULL, resolver, v) ? ERMA_ESYS : ERMA_OK;
        v->resolver_started = rc == ERMA_OK;
    }
    if (rc != ERMA_OK) {
        verbs_close(&v->base);
        return rc;
    }
    *out = &v->base;
    return ERMA_OK;
}

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
    if (qp_to_rts(v) != ERMA_OK || post_all_recv(v) != ERMA_OK)
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

static int verbs_tx_burst(struct erma_transport *tr, const struct erma_tx_pkt *pkts, unsigned n)
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
        if (!(slot[k] = get_ah(v, pkts[i].dst))) {
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
    make_addr(src, gid, wc->slid, wc->src_qp);
}


static int verbs_rx_burst(struct erma_transport *tr, struct erma_rx_pkt *pkts, unsigned max)
{
    struct verbs *v = (struct verbs *)tr;
    maybe_read_events(v);
    if (v->nrepost) {
        if (post_recv(v, v->repost, v->nrepost))
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
