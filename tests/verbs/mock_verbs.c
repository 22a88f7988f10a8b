/* mock_verbs - an in-memory libibverbs with one UD fabric (mock_verbs.h). */
#include "mock_verbs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#undef ibv_reg_mr
#undef ibv_query_port
#undef ibv_get_device_list

#define EXPORT __attribute__((visibility("default")))
#define MAX_DEV 4
#define GIDS 5
#define GRH 40
#define MAX_INLINE 188

struct mdev {
    struct ibv_device dev;
    int idx;
    bool ib, down;
    enum ibv_mtu mtu;
    int ngid;
    union ibv_gid gid[GIDS];
    enum ibv_gid_type type[GIDS];
};

struct mctx {
    struct ibv_context ctx;
    struct mdev *d;
    int pipe[2];
    struct ibv_async_event ev[64];
    unsigned nev;
    struct mctx *next;
};

struct mqp;

struct cqe {
    struct ibv_wc wc;
    struct mqp *owner; /* a send CQE retires owner's WRs up to seq */
    uint64_t seq;
};

struct mcq {
    struct ibv_cq cq;
    struct cqe *ring;
    unsigned cap, head, count, qps;
};

struct mah {
    struct ibv_ah ah;
    struct ibv_ah_attr attr;
    bool dead;
    struct mah *next; /* every AH ever made: freed at exit */
};

struct pend { /* a posted send not yet on the wire */
    struct ibv_send_wr wr;
    struct ibv_sge sge[4];
    struct mah *ah;
    uint8_t inl[MAX_INLINE];
    uint32_t len;
    uint64_t seq;
    enum ibv_wc_status fail;
};

struct rwr {
    uint64_t wr_id;
    struct ibv_sge sge;
};

struct mqp {
    struct ibv_qp qp;
    struct ibv_qp_cap cap;
    uint8_t port;
    uint32_t qkey;
    struct pend *sq;
    uint64_t sq_head, sq_tail, sq_retired; /* sends pending [head, tail); posted < tail */
    struct rwr *rq;
    unsigned rq_head, rq_count;
    unsigned unacked; /* async events about this QP not acked */
    struct mqp *next;
};

struct mmr {
    struct ibv_mr mr;
    int access;
    struct mmr *next;
};

static pthread_mutex_t M = PTHREAD_MUTEX_INITIALIZER;
static struct mdev devs[MAX_DEV];
static int ndev = -1, open_ctx;
static struct mctx *ctxs;
static struct mqp *qps;
static struct mmr *mrs;
static struct mah *ahs;
static struct mock_verbs_stats st;
static uint32_t next_qpn = 0x1c0, next_key = 0x1000;
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double loss;
static unsigned fail_n, bad_at, ah_delay_us;
static int bad_err;
static enum ibv_wc_status fail_status;
static union ibv_gid ah_fail_gid;
static bool ah_fail_on;
static pthread_t marked;
static bool marked_set;

static struct ibv_context_ops ops;
/* Sends posted and not yet on the wire, fabric-wide: with none, and its CQ
 * empty, a poll returns at once without the lock, so that pollers spinning
 * on empty queues do not starve the others of it. */
static unsigned npending;

static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void violation(const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!st.violations++)
        snprintf(st.first_violation, sizeof st.first_violation, "%s", msg);
    fprintf(stderr, "mock_verbs: VIOLATION: %s\n", msg);
}

static uint64_t next_rand(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- devices ---- */

static void set_gid(struct mdev *d, int i, const char *text, enum ibv_gid_type t)
{
    inet_pton(AF_INET6, text, d->gid[i].raw);
    d->type[i] = t;
}

static void make_dev(struct mdev *d, int idx, const char *spec)
{
    memset(d, 0, sizeof *d);
    d->idx = idx;
    d->mtu = IBV_MTU_4096;
    const size_t n = strcspn(spec, ":");
    snprintf(d->dev.name, sizeof d->dev.name, "%.*s", (int)n, spec);
    snprintf(d->dev.dev_name, sizeof d->dev.dev_name, "uverbs%d", idx);
    d->dev.node_type = IBV_NODE_CA;
    d->dev.transport_type = IBV_TRANSPORT_IB;
    if (strstr(spec, ":iwarp")) {
        d->dev.node_type = IBV_NODE_RNIC;
        d->dev.transport_type = IBV_TRANSPORT_IWARP;
    }
    d->ib = strstr(spec, ":ib") != NULL;
    d->down = strstr(spec, ":down") != NULL;
    const char *m = strstr(spec, ":mtu=");
    for (int b = 256, e = IBV_MTU_256; m && b <= 4096; b *= 2, e++)
        if (atoi(m + 5) == b)
            d->mtu = (enum ibv_mtu)e;
    char g[64];
    snprintf(g, sizeof g, "fe80::202:c9ff:fe00:%x", idx);
    if (d->ib) {
        set_gid(d, 0, g, IBV_GID_TYPE_IB);
        d->ngid = 1;
        return;
    }
    set_gid(d, 0, g, IBV_GID_TYPE_ROCE_V1);
    set_gid(d, 1, g, IBV_GID_TYPE_ROCE_V2);
    snprintf(g, sizeof g, "::ffff:10.0.0.%d", idx + 1);
    set_gid(d, 2, g, IBV_GID_TYPE_ROCE_V1);
    set_gid(d, 3, g, IBV_GID_TYPE_ROCE_V2);
    snprintf(g, sizeof g, "fd00::4500:%x", idx + 1);
    set_gid(d, 4, g, IBV_GID_TYPE_ROCE_V2);
    d->ngid = 5;
}

/* (Re)reads $MOCK_VERBS_DEVICES and $MOCK_VERBS_LOSS while nothing is open. */
static void load_devices(void)
{
    if (open_ctx)
        return;
    const char *env = getenv("MOCK_VERBS_DEVICES");
    char buf[256];
    snprintf(buf, sizeof buf, "%s", env && *env ? env : "mock0:eth");
    ndev = 0;
    for (char *save, *tok = strtok_r(buf, ",", &save); tok && ndev < MAX_DEV;
         tok = strtok_r(NULL, ",", &save), ndev++)
        make_dev(&devs[ndev], ndev, tok);
    const char *l = getenv("MOCK_VERBS_LOSS");
    if (l && *l)
        loss = atof(l);
}

EXPORT struct ibv_device **ibv_get_device_list(int *num)
{
    pthread_mutex_lock(&M);
    load_devices();
    struct ibv_device **list = calloc((size_t)ndev + 1, sizeof *list);
    for (int i = 0; list && i < ndev; i++)
        list[i] = &devs[i].dev;
    if (num)
        *num = list ? ndev : 0;
    pthread_mutex_unlock(&M);
    return list;
}

EXPORT void ibv_free_device_list(struct ibv_device **list)
{
    free(list);
}

EXPORT const char *ibv_get_device_name(struct ibv_device *dev)
{
    return dev->name;
}

static int poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
static int post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *dev)
{
    struct mctx *c = calloc(1, sizeof *c);
    if (!c || pipe(c->pipe)) {
        free(c);
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_lock(&M);
    c->d = (struct mdev *)dev;
    ops.poll_cq = poll_cq;
    ops.post_send = post_send;
    ops.post_recv = post_recv;
    c->ctx.device = dev;
    c->ctx.ops = ops;
    c->ctx.async_fd = c->pipe[0];
    c->ctx.cmd_fd = -1;
    c->ctx.num_comp_vectors = 1;
    pthread_mutex_init(&c->ctx.mutex, NULL);
    c->next = ctxs;
    ctxs = c;
    open_ctx++;
    st.objects_live++;
    pthread_mutex_unlock(&M);
    return &c->ctx;
}

EXPORT int ibv_close_device(struct ibv_context *ctx)
{
    struct mctx *c = (struct mctx *)ctx;
    pthread_mutex_lock(&M);
    for (struct mqp *q = qps; q; q = q->next)
        if (q->qp.context == ctx)
            violation("ibv_close_device with QP %u alive", q->qp.qp_num);
    struct mctx **p = &ctxs;
    while (*p != c)
        p = &(*p)->next;
    *p = c->next;
    open_ctx--;
    st.objects_live--;
    pthread_mutex_unlock(&M);
    close(c->pipe[0]);
    close(c->pipe[1]);
    pthread_mutex_destroy(&ctx->mutex);
    free(c);
    return 0;
}

static struct mdev *dev_of(struct ibv_context *ctx)
{
    return ((struct mctx *)ctx)->d;
}

EXPORT int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *a)
{
    memset(a, 0, sizeof *a);
    snprintf(a->fw_ver, sizeof a->fw_ver, "mock");
    a->max_qp = 1 << 16;
    a->max_qp_wr = 32768;
    a->max_sge = 4;
    a->max_cq = 1 << 16;
    a->max_cqe = 1 << 22;
    a->max_mr = 1 << 16;
    a->max_pd = 1 << 16;
    a->max_ah = 1 << 16;
    a->phys_port_cnt = 1;
    a->node_guid = htobe64(0x0202c9fffe000000ull + (uint64_t)dev_of(ctx)->idx);
    return 0;
}

EXPORT int ibv_query_port(struct ibv_context *ctx, uint8_t port,
                          struct _compat_ibv_port_attr *out)
{
    struct ibv_port_attr *a = (struct ibv_port_attr *)out; /* verbs.h's inline passes one */
    const struct mdev *d = dev_of(ctx);
    if (port != 1) {
        errno = EINVAL;
        return EINVAL;
    }
    memset(a, 0, sizeof *a);
    pthread_mutex_lock(&M);
    a->state = d->down ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
    pthread_mutex_unlock(&M);
    a->max_mtu = IBV_MTU_4096;
    a->active_mtu = d->mtu;
    a->gid_tbl_len = d->ngid;
    a->max_msg_sz = 1u << 30;
    a->pkey_tbl_len = 1;
    a->lid = d->ib ? (uint16_t)(d->idx + 1) : 0;
    a->active_width = 2;  /* 4x */
    a->active_speed = 32; /* EDR: 100 Gb/s */
    a->phys_state = d->down ? 3 : 5;
    a->link_layer = d->ib ? IBV_LINK_LAYER_INFINIBAND : IBV_LINK_LAYER_ETHERNET;
    return 0;
}

EXPORT int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
    const struct mdev *d = dev_of(ctx);
    if (port != 1 || index < 0 || index >= d->ngid)
        return -1;
    *gid = d->gid[index];
    return 0;
}

EXPORT int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
                             struct ibv_gid_entry *e, uint32_t flags, size_t size)
{
    const struct mdev *d = dev_of(ctx);
    if (flags || size < sizeof *e) {
        violation("ibv_query_gid_ex: flags %u, entry size %zu", flags, size);
        return EINVAL;
    }
    if (port != 1 || index >= (uint32_t)d->ngid)
        return ENODATA;
    *e = (struct ibv_gid_entry){.gid = d->gid[index], .gid_index = index, .port_num = port,
                                .gid_type = d->type[index]};
    return 0;
}

EXPORT const char *ibv_wc_status_str(enum ibv_wc_status s)
{
    return s == IBV_WC_SUCCESS ? "success" : s == IBV_WC_WR_FLUSH_ERR ? "WR flushed" : "error";
}

EXPORT const char *ibv_event_type_str(enum ibv_event_type t)
{
    return t == IBV_EVENT_QP_FATAL ? "local catastrophic error" : "async event";
}

/* ---- PD, MR, CQ ---- */

static unsigned pd_refs(struct ibv_pd *pd)
{
    unsigned n = 0;
    for (struct mqp *q = qps; q; q = q->next)
        n += q->qp.pd == pd;
    for (struct mmr *m = mrs; m; m = m->next)
        n += m->mr.pd == pd;
    for (struct mah *a = ahs; a; a = a->next)
        n += !a->dead && a->ah.pd == pd;
    return n;
}

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
    struct ibv_pd *pd = calloc(1, sizeof *pd);
    if (!pd)
        return NULL;
    pd->context = ctx;
    pthread_mutex_lock(&M);
    pd->handle = next_key++;
    st.objects_live++;
    pthread_mutex_unlock(&M);
    return pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
    pthread_mutex_lock(&M);
    const unsigned refs = pd_refs(pd);
    if (refs) {
        violation("ibv_dealloc_pd with %u QPs, MRs or AHs on it", refs);
        pthread_mutex_unlock(&M);
        return EBUSY;
    }
    st.objects_live--;
    pthread_mutex_unlock(&M);
    free(pd);
    return 0;
}

EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    struct mmr *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    pthread_mutex_lock(&M);
    m->mr = (struct ibv_mr){.context = pd->context, .pd = pd, .addr = addr, .length = len,
                            .lkey = next_key, .rkey = next_key + 1};
    next_key += 2;
    m->access = access;
    m->next = mrs;
    mrs = m;
    st.objects_live++;
    pthread_mutex_unlock(&M);
    return &m->mr;
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
    pthread_mutex_lock(&M);
    struct mmr **p = &mrs;
    while (*p && &(*p)->mr != mr)
        p = &(*p)->next;
    if (!*p) {
        violation("ibv_dereg_mr of an unknown MR");
        pthread_mutex_unlock(&M);
        return EINVAL;
    }
    struct mmr *m = *p;
    *p = m->next;
    st.objects_live--;
    pthread_mutex_unlock(&M);
    free(m);
    return 0;
}

/* The MR on pd whose lkey is sge's and that covers it, or NULL. */
static struct mmr *find_mr(struct ibv_pd *pd, const struct ibv_sge *sge)
{
    for (struct mmr *m = mrs; m; m = m->next)
        if (m->mr.pd == pd && m->mr.lkey == sge->lkey && sge->addr >= (uintptr_t)m->mr.addr &&
            sge->addr + sge->length <= (uintptr_t)m->mr.addr + m->mr.length)
            return m;
    return NULL;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_ctx,
                                    struct ibv_comp_channel *ch, int vec)
{
    (void)ch;
    (void)vec;
    if (cqe < 1 || cqe > (1 << 22)) {
        errno = EINVAL;
        return NULL;
    }
    struct mcq *c = calloc(1, sizeof *c);
    if (!c || !(c->ring = calloc((size_t)cqe, sizeof *c->ring))) {
        free(c);
        errno = ENOMEM;
        return NULL;
    }
    c->cap = (unsigned)cqe;
    c->cq = (struct ibv_cq){.context = ctx, .cq_context = cq_ctx, .cqe = cqe};
    pthread_mutex_lock(&M);
    st.objects_live++;
    pthread_mutex_unlock(&M);
    return &c->cq;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
    struct mcq *c = (struct mcq *)cq;
    pthread_mutex_lock(&M);
    if (c->qps) {
        violation("ibv_destroy_cq with %u QPs on it", c->qps);
        pthread_mutex_unlock(&M);
        return EBUSY;
    }
    st.objects_live--;
    pthread_mutex_unlock(&M);
    free(c->ring);
    free(c);
    return 0;
}

static void push_cqe(struct ibv_cq *cq, const struct ibv_wc *wc, struct mqp *owner,
                     uint64_t seq)
{
    struct mcq *c = (struct mcq *)cq;
    if (c->count == c->cap) {
        violation("CQ overflow (%u entries): completion of QP %u lost", c->cap, wc->qp_num);
        return;
    }
    c->ring[(c->head + c->count) % c->cap] = (struct cqe){*wc, owner, seq};
    __atomic_add_fetch(&c->count, 1, __ATOMIC_RELEASE);
}

/* ---- async events ---- */

static void push_event(struct mctx *c, struct ibv_async_event ev)
{
    if (c->nev == sizeof c->ev / sizeof *c->ev)
        return;
    c->ev[c->nev++] = ev;
    if (write(c->pipe[1], "e", 1) != 1)
        violation("cannot signal an async event");
}

EXPORT int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
    struct mctx *c = (struct mctx *)ctx;
    pthread_mutex_lock(&M);
    if (!c->nev) {
        if (!(fcntl(ctx->async_fd, F_GETFL) & O_NONBLOCK))
            violation("ibv_get_async_event on a blocking async_fd with no event: it would hang");
        pthread_mutex_unlock(&M);
        errno = EAGAIN;
        return -1;
    }
    char b;
    if (read(c->pipe[0], &b, 1) != 1)
        violation("async event pipe");
    *ev = c->ev[0];
    memmove(c->ev, c->ev + 1, --c->nev * sizeof *c->ev);
    pthread_mutex_unlock(&M);
    return 0;
}

EXPORT void ibv_ack_async_event(struct ibv_async_event *ev)
{
    pthread_mutex_lock(&M);
    if (ev->event_type == IBV_EVENT_QP_FATAL)
        for (struct mqp *q = qps; q; q = q->next)
            if (&q->qp == ev->element.qp && q->unacked)
                q->unacked--;
    pthread_mutex_unlock(&M);
}

/* ---- QPs ---- */

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
    const struct mdev *d = dev_of(pd->context);
    struct ibv_qp_cap *cap = &a->cap;
    if (d->dev.transport_type != IBV_TRANSPORT_IB || a->qp_type != IBV_QPT_UD) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    if (!a->send_cq || !a->recv_cq || cap->max_send_wr > 32768 || cap->max_recv_wr > 32768 ||
        cap->max_send_sge > 4 || cap->max_recv_sge > 4 || cap->max_inline_data > MAX_INLINE) {
        errno = EINVAL;
        return NULL;
    }
    struct mqp *q = calloc(1, sizeof *q);
    if (!q || !(q->sq = calloc(cap->max_send_wr + 1, sizeof *q->sq)) ||
        !(q->rq = calloc(cap->max_recv_wr + 1, sizeof *q->rq))) {
        if (q)
            free(q->sq);
        free(q);
        errno = ENOMEM;
        return NULL;
    }
    q->cap = *cap;
    pthread_mutex_lock(&M);
    q->qp = (struct ibv_qp){.context = pd->context, .qp_context = a->qp_context, .pd = pd,
                            .send_cq = a->send_cq, .recv_cq = a->recv_cq,
                            .qp_num = next_qpn++, .state = IBV_QPS_RESET,
                            .qp_type = IBV_QPT_UD};
    ((struct mcq *)a->send_cq)->qps++;
    ((struct mcq *)a->recv_cq)->qps++;
    q->next = qps;
    qps = q;
    st.objects_live++;
    pthread_mutex_unlock(&M);
    return &q->qp;
}

static void purge_cq(struct ibv_cq *cq, struct mqp *q)
{
    struct mcq *c = (struct mcq *)cq;
    unsigned kept = 0;
    for (unsigned i = 0; i < c->count; i++) {
        const struct cqe e = c->ring[(c->head + i) % c->cap];
        if (e.wc.qp_num != q->qp.qp_num)
            c->ring[(c->head + kept++) % c->cap] = e;
    }
    __atomic_store_n(&c->count, kept, __ATOMIC_RELEASE);
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
    struct mqp *q = (struct mqp *)qp;
    pthread_mutex_lock(&M);
    if (q->unacked)
        violation("ibv_destroy_qp of QP %u with %u async events not acked (it would block)",
                  qp->qp_num, q->unacked);
    struct mqp **p = &qps;
    while (*p != q)
        p = &(*p)->next;
    *p = q->next;
    __atomic_sub_fetch(&npending, (unsigned)(q->sq_tail - q->sq_head), __ATOMIC_RELEASE);
    purge_cq(qp->send_cq, q);
    purge_cq(qp->recv_cq, q);
    ((struct mcq *)qp->send_cq)->qps--;
    ((struct mcq *)qp->recv_cq)->qps--;
    st.objects_live--;
    pthread_mutex_unlock(&M);
    free(q->sq);
    free(q->rq);
    free(q);
    return 0;
}

static void flush_rq(struct mqp *q)
{
    for (; q->rq_count; q->rq_count--, q->rq_head = (q->rq_head + 1) % (q->cap.max_recv_wr + 1)) {
        const struct ibv_wc wc = {.wr_id = q->rq[q->rq_head].wr_id,
                                  .status = IBV_WC_WR_FLUSH_ERR, .qp_num = q->qp.qp_num};
        push_cqe(q->qp.recv_cq, &wc, NULL, 0);
    }
}

/* Checks a modify against the UD state table (IB spec 11.2.5, rdma-core's
 * qp_state_table): required and allowed attributes per transition. */
static bool transition_ok(enum ibv_qp_state cur, enum ibv_qp_state to, int mask)
{
    const int s = IBV_QP_STATE, cs = IBV_QP_CUR_STATE;
    if (to == IBV_QPS_RESET || to == IBV_QPS_ERR)
        return (mask & ~cs) == s;
    if (cur == IBV_QPS_RESET && to == IBV_QPS_INIT)
        return mask == (s | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
    if (cur == IBV_QPS_INIT && to == IBV_QPS_RTR)
        return (mask & s) && !(mask & ~(s | IBV_QP_PKEY_INDEX | IBV_QP_QKEY));
    if (cur == IBV_QPS_RTR && to == IBV_QPS_RTS)
        return (mask & (s | IBV_QP_SQ_PSN)) == (s | IBV_QP_SQ_PSN) &&
               !(mask & ~(s | IBV_QP_SQ_PSN | cs | IBV_QP_QKEY));
    if ((cur == IBV_QPS_SQE || cur == IBV_QPS_RTS) && to == IBV_QPS_RTS)
        return (mask & s) && !(mask & ~(s | cs | IBV_QP_QKEY));
    return false;
}

EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
    struct mqp *q = (struct mqp *)qp;
    pthread_mutex_lock(&M);
    const enum ibv_qp_state cur = qp->state, to = mask & IBV_QP_STATE ? a->qp_state : cur;
    if (!transition_ok(cur, to, mask) || ((mask & IBV_QP_CUR_STATE) && a->cur_qp_state != cur) ||
        ((mask & IBV_QP_PORT) && a->port_num != 1)) {
        violation("QP %u: modify from state %d to %d with mask 0x%x", qp->qp_num, cur, to, mask);
        pthread_mutex_unlock(&M);
        errno = EINVAL;
        return EINVAL;
    }
    if (mask & IBV_QP_PORT)
        q->port = a->port_num;
    if (mask & IBV_QP_QKEY)
        q->qkey = a->qkey;
    if (to == IBV_QPS_RESET) {
        __atomic_sub_fetch(&npending, (unsigned)(q->sq_tail - q->sq_head), __ATOMIC_RELEASE);
        q->sq_head = q->sq_tail = q->sq_retired = 0;
        q->rq_count = 0;
    }
    if (to == IBV_QPS_ERR)
        flush_rq(q);
    qp->state = to;
    pthread_mutex_unlock(&M);
    return 0;
}

EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask,
                        struct ibv_qp_init_attr *init)
{
    (void)mask;
    struct mqp *q = (struct mqp *)qp;
    pthread_mutex_lock(&M);
    memset(a, 0, sizeof *a);
    a->qp_state = a->cur_qp_state = qp->state;
    a->qkey = q->qkey;
    a->port_num = q->port;
    a->cap = q->cap;
    memset(init, 0, sizeof *init);
    init->cap = q->cap;
    init->qp_type = IBV_QPT_UD;
    init->send_cq = qp->send_cq;
    init->recv_cq = qp->recv_cq;
    pthread_mutex_unlock(&M);
    return 0;
}

/* ---- address handles ---- */

EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
    pthread_mutex_lock(&M);
    st.ah_calls++;
    if (marked_set && pthread_equal(marked, pthread_self()))
        st.ah_on_marked_thread++;
    const unsigned delay = ah_delay_us;
    const bool fail = ah_fail_on && attr->is_global &&
                      !memcmp(attr->grh.dgid.raw, ah_fail_gid.raw, 16);
    const struct mdev *d = dev_of(pd->context);
    const bool bad = attr->port_num != 1 || (attr->is_global && attr->grh.sgid_index >= d->ngid) ||
                     (!d->ib && !attr->is_global);
    pthread_mutex_unlock(&M);
    if (delay)
        usleep(delay);
    if (bad) {
        pthread_mutex_lock(&M);
        violation("ibv_create_ah: port %u, is_global %u, sgid_index %u", attr->port_num,
                  attr->is_global, attr->grh.sgid_index);
        pthread_mutex_unlock(&M);
    }
    if (fail || bad) {
        pthread_mutex_lock(&M);
        st.ah_failed++;
        pthread_mutex_unlock(&M);
        errno = fail ? ETIMEDOUT : EINVAL;
        return NULL;
    }
    struct mah *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->ah = (struct ibv_ah){.context = pd->context, .pd = pd};
    a->attr = *attr;
    pthread_mutex_lock(&M);
    a->ah.handle = next_key++;
    a->next = ahs;
    ahs = a;
    st.ah_live++;
    st.objects_live++;
    pthread_mutex_unlock(&M);
    return &a->ah;
}

static bool ah_pending(const struct mah *a)
{
    for (struct mqp *q = qps; q; q = q->next)
        for (uint64_t s = q->sq_head; s < q->sq_tail; s++)
            if (q->sq[s % (q->cap.max_send_wr + 1)].ah == a)
                return true;
    return false;
}

EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
    struct mah *a = (struct mah *)ah;
    pthread_mutex_lock(&M);
    if (a->dead)
        violation("ibv_destroy_ah twice");
    else if (ah_pending(a))
        violation("ibv_destroy_ah while a posted send still uses it");
    if (!a->dead) {
        a->dead = true;
        st.ah_live--;
        st.objects_live--;
    }
    pthread_mutex_unlock(&M);
    return 0; /* the memory stays, so that a later use is seen (freed at exit) */
}

static struct mah *live_ah(struct ibv_ah *ah)
{
    for (struct mah *a = ahs; a; a = a->next)
        if (&a->ah == ah)
            return a->dead ? NULL : a;
    return NULL;
}

/* At exit: $MOCK_VERBS_REPORT set prints what the fabric did. */
__attribute__((destructor)) static void free_ahs(void)
{
    const char *r = getenv("MOCK_VERBS_REPORT");
    if (r && *r)
        fprintf(stderr, "mock_verbs: %llu delivered, lost %llu, no QP %llu, no receive posted "
                "%llu, port down %llu, qkey %llu, gid type %llu, length errors %llu, send "
                "errors %llu, flushed %llu, send queue full %llu; %llu violations\n",
                (unsigned long long)st.delivered, (unsigned long long)st.lost,
                (unsigned long long)st.no_qp, (unsigned long long)st.rnr,
                (unsigned long long)st.port_down, (unsigned long long)st.qkey,
                (unsigned long long)st.gid_type, (unsigned long long)st.len_errors,
                (unsigned long long)st.send_errors, (unsigned long long)st.flushed,
                (unsigned long long)st.sq_full, (unsigned long long)st.violations);
    while (ahs) {
        struct mah *n = ahs->next;
        free(ahs);
        ahs = n;
    }
}

/* ---- posting ---- */

static unsigned sq_size(const struct mqp *q)
{
    return q->cap.max_send_wr + 1;
}

/* Queues one send WR; an errno value when the post must fail at it. */
static int queue_send(struct mqp *q, struct ibv_send_wr *wr)
{
    const enum ibv_qp_state s = q->qp.state;
    if (s == IBV_QPS_RESET || s == IBV_QPS_INIT || s == IBV_QPS_RTR) {
        violation("QP %u: post_send in state %d (before RTS)", q->qp.qp_num, s);
        return EINVAL;
    }
    if ((wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM) || wr->num_sge < 0 ||
        wr->num_sge > (int)q->cap.max_send_sge || (wr->num_sge && !wr->sg_list)) {
        violation("QP %u: send WR opcode %d with %d SGEs", q->qp.qp_num, wr->opcode,
                  wr->num_sge);
        return EINVAL;
    }
    uint32_t len = 0;
    for (int i = 0; i < wr->num_sge; i++)
        len += wr->sg_list[i].length;
    if ((wr->send_flags & IBV_SEND_INLINE) && len > q->cap.max_inline_data) {
        violation("QP %u: inline send of %u B, max_inline_data %u", q->qp.qp_num, len,
                  q->cap.max_inline_data);
        return EINVAL;
    }
    struct mah *ah = live_ah(wr->wr.ud.ah);
    if (!ah) {
        violation("QP %u: send with %s address handle", q->qp.qp_num,
                  wr->wr.ud.ah ? "a destroyed or unknown" : "no");
        return EINVAL;
    }
    if (q->sq_tail - q->sq_retired >= q->cap.max_send_wr) {
        st.sq_full++;
        return ENOMEM;
    }
    struct pend *p = &q->sq[q->sq_tail % sq_size(q)];
    memset(p, 0, sizeof *p);
    p->wr = *wr;
    p->wr.next = NULL;
    memcpy(p->sge, wr->sg_list, (size_t)wr->num_sge * sizeof *p->sge);
    p->wr.sg_list = p->sge;
    p->ah = ah;
    p->len = len;
    p->seq = q->sq_tail++;
    __atomic_add_fetch(&npending, 1, __ATOMIC_RELEASE);
    if (wr->send_flags & IBV_SEND_INLINE)
        for (uint32_t i = 0, off = 0; i < (uint32_t)wr->num_sge; off += p->sge[i++].length)
            memcpy(p->inl + off, (void *)(uintptr_t)p->sge[i].addr, p->sge[i].length);
    if (fail_n) {
        fail_n--;
        p->fail = fail_status;
    }
    return 0;
}

static int post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    struct mqp *q = (struct mqp *)qp;
    pthread_mutex_lock(&M);
    int err = 0;
    for (unsigned i = 0; wr && !err; wr = err ? wr : wr->next, i++) {
        if (bad_at && i == bad_at) {
            bad_at = 0;
            st.bad_wr++;
            err = bad_err;
        } else {
            err = queue_send(q, wr);
        }
    }
    bad_at = 0;
    if (err)
        *bad = wr;
    pthread_mutex_unlock(&M);
    errno = err;
    return err;
}

static int post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    struct mqp *q = (struct mqp *)qp;
    pthread_mutex_lock(&M);
    int err = 0;
    for (; wr && !err; wr = err ? wr : wr->next) {
        struct mmr *m = wr->num_sge == 1 ? find_mr(qp->pd, wr->sg_list) : NULL;
        if (qp->state == IBV_QPS_RESET) {
            violation("QP %u: post_recv in RESET", qp->qp_num);
            err = EINVAL;
        } else if (!m || !(m->access & IBV_ACCESS_LOCAL_WRITE)) {
            violation("QP %u: receive SGE (%d of them) not in writable registered memory",
                      qp->qp_num, wr->num_sge);
            err = EINVAL;
        } else if (q->rq_count >= q->cap.max_recv_wr) {
            violation("QP %u: receive queue overflow (%u)", qp->qp_num, q->cap.max_recv_wr);
            err = ENOMEM;
        } else {
            const unsigned size = q->cap.max_recv_wr + 1;
            q->rq[(q->rq_head + q->rq_count++) % size] = (struct rwr){wr->wr_id, *wr->sg_list};
            if (qp->state == IBV_QPS_ERR)
                flush_rq(q);
        }
    }
    if (err)
        *bad = wr;
    pthread_mutex_unlock(&M);
    return err;
}

/* ---- the fabric ---- */

/* The entry of d with gid, of type t if there is one. */
static int gid_index(const struct mdev *d, const uint8_t *gid, enum ibv_gid_type t)
{
    int any = -1;
    for (int i = 0; i < d->ngid; i++)
        if (!memcmp(d->gid[i].raw, gid, 16)) {
            if (d->type[i] == t)
                return i;
            any = any < 0 ? i : any;
        }
    return any;
}

/* The QP a send from sender over ah to qpn reaches, or NULL (counted). */
static struct mqp *route(const struct mqp *sender, const struct mah *ah, uint32_t qpn,
                         uint32_t qkey)
{
    const struct mdev *sd = dev_of(sender->qp.context);
    if (sd->down) {
        st.port_down++;
        return NULL;
    }
    for (struct mqp *q = qps; q; q = q->next) {
        const struct mdev *d = dev_of(q->qp.context);
        if (q->qp.qp_num != qpn)
            continue;
        const enum ibv_gid_type t = sd->type[ah->attr.grh.sgid_index];
        const int gi = ah->attr.is_global ? gid_index(d, ah->attr.grh.dgid.raw, t) : -1;
        if (ah->attr.is_global ? gi < 0 : (!d->ib || ah->attr.dlid != d->idx + 1))
            break;
        if (gi >= 0 && d->type[gi] != t) {
            st.gid_type++; /* RoCE v1 and v2 do not meet */
            return NULL;
        }
        if (d->down || q->qp.state < IBV_QPS_RTR || q->qp.state == IBV_QPS_ERR) {
            st.port_down++;
            return NULL;
        }
        if (q->qkey != qkey) {
            st.qkey++;
            return NULL;
        }
        return q;
    }
    st.no_qp++;
    return NULL;
}

static void put16(uint8_t *p, unsigned v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

/* The 40 bytes before the payload, as the receiving NIC writes them. */
static void make_grh(uint8_t *g, const struct mdev *sd, const struct mah *ah, uint32_t len)
{
    const unsigned si = ah->attr.grh.sgid_index;
    const uint8_t *sgid = sd->gid[si].raw, *dgid = ah->attr.grh.dgid.raw;
    static const uint8_t v4[12] = {[10] = 0xff, [11] = 0xff};
    if (sd->type[si] == IBV_GID_TYPE_ROCE_V2 && !memcmp(sgid, v4, 12)) {
        /* 20 undefined bytes (sometimes looking like an IPv6 header), then IPv4 */
        for (int i = 0; i < 20; i++)
            g[i] = (uint8_t)next_rand();
        if (next_rand() & 1)
            g[0] = 0x60 | (g[0] & 0xf);
        uint8_t *ip = g + 20;
        memset(ip, 0, 20);
        ip[0] = 0x45;
        put16(ip + 2, 20 + 8 + 12 + len + 4); /* UDP, BTH+DETH (20 - 8), ICRC */
        ip[8] = 64;
        ip[9] = 17;
        memcpy(ip + 12, sgid + 12, 4);
        memcpy(ip + 16, dgid + 12, 4);
        uint32_t sum = 0;
        for (int i = 0; i < 20; i += 2)
            sum += (uint32_t)ip[i] << 8 | ip[i + 1];
        while (sum >> 16)
            sum = (sum & 0xffff) + (sum >> 16);
        put16(ip + 10, ~sum & 0xffff);
        return;
    }
    memset(g, 0, 8);
    g[0] = 0x60;
    put16(g + 4, len);
    g[6] = sd->type[si] == IBV_GID_TYPE_ROCE_V2 ? 17 : 0x1b;
    g[7] = ah->attr.grh.hop_limit;
    memcpy(g + 8, sgid, 16);
    memcpy(g + 24, dgid, 16);
}

/* Hands one send to its receiver; the receive completion's status. */
static void deliver(struct mqp *s, const struct pend *p)
{
    const struct mdev *sd = dev_of(s->qp.context);
    struct mqp *r = route(s, p->ah, p->wr.wr.ud.remote_qpn, p->wr.wr.ud.remote_qkey);
    if (!r)
        return;
    if (loss > 0 && (double)(next_rand() >> 11) * 0x1p-53 < loss) {
        st.lost++;
        return;
    }
    if (!r->rq_count) {
        st.rnr++; /* UD: no receive posted, the packet is gone */
        return;
    }
    const struct rwr w = r->rq[r->rq_head];
    r->rq_head = (r->rq_head + 1) % (r->cap.max_recv_wr + 1);
    r->rq_count--;
    struct ibv_wc wc = {.wr_id = w.wr_id, .opcode = IBV_WC_RECV, .qp_num = r->qp.qp_num,
                        .src_qp = s->qp.qp_num, .byte_len = GRH + p->len,
                        .wc_flags = p->ah->attr.is_global ? IBV_WC_GRH : 0,
                        .slid = sd->ib ? (uint16_t)(sd->idx + 1) : 0};
    uint8_t *dst = (uint8_t *)(uintptr_t)w.sge.addr;
    if (w.sge.length < GRH + p->len) {
        st.len_errors++;
        wc.status = IBV_WC_LOC_LEN_ERR;
    } else {
        if (p->ah->attr.is_global)
            make_grh(dst, sd, p->ah, p->len);
        if (p->wr.send_flags & IBV_SEND_INLINE)
            memcpy(dst + GRH, p->inl, p->len);
        for (uint32_t i = 0, off = 0; !(p->wr.send_flags & IBV_SEND_INLINE) &&
                                      i < (uint32_t)p->wr.num_sge; off += p->sge[i++].length)
            memcpy(dst + GRH + off, (void *)(uintptr_t)p->sge[i].addr, p->sge[i].length);
        st.delivered++;
    }
    push_cqe(r->qp.recv_cq, &wc, NULL, 0);
}

/* What a send completes with before it is delivered. */
static enum ibv_wc_status send_status(struct mqp *q, const struct pend *p)
{
    if (q->qp.state == IBV_QPS_SQE || q->qp.state == IBV_QPS_ERR)
        return IBV_WC_WR_FLUSH_ERR;
    if (p->fail)
        return p->fail;
    if (p->ah->dead) {
        violation("QP %u: address handle destroyed before its send went out", q->qp.qp_num);
        return IBV_WC_LOC_PROT_ERR;
    }
    for (int i = 0; !(p->wr.send_flags & IBV_SEND_INLINE) && i < p->wr.num_sge; i++)
        if (!find_mr(q->qp.pd, &p->sge[i])) {
            violation("QP %u: send SGE with lkey 0x%x not in registered memory", q->qp.qp_num,
                      p->sge[i].lkey);
            return IBV_WC_LOC_PROT_ERR;
        }
    if (p->len > 128u << dev_of(q->qp.context)->mtu) {
        violation("QP %u: UD send of %u B over the port MTU", q->qp.qp_num, p->len);
        return IBV_WC_LOC_LEN_ERR;
    }
    return IBV_WC_SUCCESS;
}

/* Puts every pending send of q on the wire. */
static void progress_qp(struct mqp *q)
{
    for (; q->sq_head < q->sq_tail; q->sq_head++) {
        __atomic_sub_fetch(&npending, 1, __ATOMIC_RELEASE);
        const struct pend *p = &q->sq[q->sq_head % sq_size(q)];
        const enum ibv_wc_status s = send_status(q, p);
        if (s == IBV_WC_SUCCESS)
            deliver(q, p);
        else if (s == IBV_WC_WR_FLUSH_ERR)
            st.flushed++;
        else
            st.send_errors++;
        if (s != IBV_WC_SUCCESS && q->qp.state == IBV_QPS_RTS)
            q->qp.state = IBV_QPS_SQE; /* UD: a failed send stops the send queue */
        if (s != IBV_WC_SUCCESS || (p->wr.send_flags & IBV_SEND_SIGNALED)) {
            const struct ibv_wc wc = {.wr_id = p->wr.wr_id, .status = s,
                                      .opcode = IBV_WC_SEND, .qp_num = q->qp.qp_num};
            push_cqe(q->qp.send_cq, &wc, q, p->seq);
        }
    }
}

static int poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    struct mcq *c = (struct mcq *)cq;
    if (!__atomic_load_n(&npending, __ATOMIC_ACQUIRE) &&
        !__atomic_load_n(&c->count, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&M);
    for (struct mqp *q = qps; q; q = q->next)
        progress_qp(q);
    int k = 0;
    for (; k < n && c->count; k++, c->head = (c->head + 1) % c->cap) {
        __atomic_sub_fetch(&c->count, 1, __ATOMIC_RELEASE);
        const struct cqe *e = &c->ring[c->head];
        wc[k] = e->wc;
        if (e->owner)
            e->owner->sq_retired = e->seq + 1;
    }
    pthread_mutex_unlock(&M);
    return k;
}

/* ---- control ---- */

EXPORT void mock_verbs_stats(struct mock_verbs_stats *out)
{
    pthread_mutex_lock(&M);
    *out = st;
    pthread_mutex_unlock(&M);
}

EXPORT void mock_verbs_fail_sends(unsigned n, enum ibv_wc_status status)
{
    pthread_mutex_lock(&M);
    fail_n = n;
    fail_status = status;
    pthread_mutex_unlock(&M);
}

EXPORT void mock_verbs_bad_wr(unsigned at, int err)
{
    pthread_mutex_lock(&M);
    bad_at = at;
    bad_err = err;
    pthread_mutex_unlock(&M);
}

EXPORT void mock_verbs_ah_fail(const union ibv_gid *gid)
{
    pthread_mutex_lock(&M);
    ah_fail_on = gid != NULL;
    if (gid)
        ah_fail_gid = *gid;
    pthread_mutex_unlock(&M);
}

EXPORT void mock_verbs_ah_delay_us(unsigned us)
{
    pthread_mutex_lock(&M);
    ah_delay_us = us;
    pthread_mutex_unlock(&M);
}

EXPORT void mock_verbs_mark_thread(void)
{
    pthread_mutex_lock(&M);
    marked = pthread_self();
    marked_set = true;
    pthread_mutex_unlock(&M);
}

EXPORT void mock_verbs_loss(double p)
{
    pthread_mutex_lock(&M);
    loss = p;
    pthread_mutex_unlock(&M);
}

EXPORT int mock_verbs_port(const char *dev, bool up)
{
    pthread_mutex_lock(&M);
    int rc = -1;
    for (int i = 0; i < ndev && i < MAX_DEV; i++)
        if (!strcmp(devs[i].dev.name, dev)) {
            devs[i].down = !up;
            rc = 0;
        }
    for (struct mctx *c = ctxs; c && rc == 0; c = c->next)
        if (!strcmp(c->d->dev.name, dev))
            push_event(c, (struct ibv_async_event){
                              .element.port_num = 1,
                              .event_type = up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR});
    pthread_mutex_unlock(&M);
    return rc;
}

EXPORT int mock_verbs_qp_fatal(uint32_t qpn)
{
    pthread_mutex_lock(&M);
    int rc = -1;
    for (struct mqp *q = qps; q; q = q->next)
        if (q->qp.qp_num == qpn) {
            q->qp.state = IBV_QPS_ERR;
            flush_rq(q);
            q->unacked++;
            push_event((struct mctx *)q->qp.context,
                       (struct ibv_async_event){.element.qp = &q->qp,
                                                .event_type = IBV_EVENT_QP_FATAL});
            rc = 0;
        }
    pthread_mutex_unlock(&M);
    return rc;
}

EXPORT int mock_verbs_qp_state(uint32_t qpn)
{
    pthread_mutex_lock(&M);
    int rc = -1;
    for (struct mqp *q = qps; q; q = q->next)
        if (q->qp.qp_num == qpn)
            rc = q->qp.state;
    pthread_mutex_unlock(&M);
    return rc;
}
