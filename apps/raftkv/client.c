/* The raftkv client: finds the leader, follows redirects, moves past
 * replicas that fail or fall silent for a try's length (raftkv/raftkv.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "erma/clock.h"
#include "erma/log.h"
#include "erma/wire.h"
#include "kv/kv.h"
#include "raftkv/loop.h"
#include "raftkv/raftkv.h"

#define URI_MAX 128

struct op {
    struct raftkv_client *c;
    bool busy, inflight, waiting, completed;
    uint8_t type;
    unsigned server;
    uint64_t deadline, retry_at;
    uint64_t sent_at; /* the try in flight: when it started */
    struct erma_msgbuf req, resp;
    bool have_bufs;
    raftkv_fn cb;
    void *tag;
    uint64_t seq; /* writes: the op's number at this client; 0 for reads */
    int status;
    const uint8_t *val;
    uint32_t vlen;
};

struct server {
    char uri[URI_MAX];
    int sess;
    bool failed;         /* a try failed there, and it has not answered since */
    uint64_t failed_at;  /* its last failure */
    uint32_t tries;      /* tries in flight at it */
    uint32_t queued;     /* ops waiting to be tried at it */
    uint64_t heard_at;   /* tries in flight: the last answer, or the first try */
};

struct raftkv_client {
    struct raftkv_client_cfg cfg;
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    struct erma_rpc *rpc;
    struct server srv[RAFTKV_MAX_PEERS];
    unsigned leader;
    uint64_t next_seq;
    struct op *ops;
    uint32_t pending, completions;
    uint32_t waiting; /* ops waiting for a retry: poll has nothing to do without them */
    uint32_t tries;   /* tries in flight: poll watches their replicas for silence */
    uint32_t ended;   /* tries ended since the last poll (work: timers may have moved) */
    uint64_t srtt, rttvar, rtt_samples; /* of answered tries (RFC 6298) */
    bool destroying;
    struct raftkv_client_stats stats;
};

/* How long a replica may stay silent while tries wait at it: from the
 * answers' round trips, srtt + 4 rttvar, at least try_min_ns, at most
 * failure_ns (also the whole try before any answer came). */
static uint64_t try_ns(const struct raftkv_client *c)
{
    if (!c->rtt_samples)
        return c->cfg.failure_ns;
    const uint64_t t = c->srtt + 4 * c->rttvar;
    return t < c->cfg.try_min_ns ? c->cfg.try_min_ns
           : t > c->cfg.failure_ns ? c->cfg.failure_ns
                                   : t;
}

static void rtt_sample(struct raftkv_client *c, uint64_t r)
{
    if (c->rtt_samples++ == 0) {
        c->srtt = r;
        c->rttvar = r / 2;
        return;
    }
    const uint64_t d = r > c->srtt ? r - c->srtt : c->srtt - r;
    c->rttvar = (3 * c->rttvar + d) / 4;
    c->srtt = (7 * c->srtt + r) / 8;
}

/* Replica i failed a try: so it stays until it answers again. */
static void mark_failed(struct raftkv_client *c, unsigned i, uint64_t now)
{
    c->srv[i].failed = true;
    c->srv[i].failed_at = now;
}

static void on_sm(struct erma_rpc *rpc, int session, enum erma_sm_event ev, int err, void *ctx)
{
    (void)rpc;
    (void)err;
    struct raftkv_client *c = ctx;
    const uint64_t now = erma_now_ns();
    for (unsigned i = 0; i < c->cfg.nservers; i++) {
        if (c->srv[i].sess != session)
            continue;
        if (ev == ERMA_SM_CONNECTED) { /* it answered: the tries' wait starts over */
            c->srv[i].heard_at = now;
            continue;
        }
        c->srv[i].sess = -1;
        mark_failed(c, i, now);
    }
}

/* op waits (or no longer) to be tried at op->server. */
static void set_waiting(struct op *op, bool waiting)
{
    const uint32_t d = (uint32_t)waiting - (uint32_t)op->waiting;
    op->c->waiting += d;
    op->c->srv[op->server].queued += d;
    op->waiting = waiting;
}

static void complete(struct op *op, int status, const uint8_t *val, uint32_t vlen)
{
    op->completed = true;
    set_waiting(op, false);
    op->status = status;
    op->val = val;
    op->vlen = vlen;
    op->c->completions++;
}

/* The first replica after `from` that has not failed, else the first that
 * failed down_ns ago or more, else the next. */
static unsigned next_server(struct raftkv_client *c, unsigned from, uint64_t now)
{
    unsigned best = (from + 1) % c->cfg.nservers, best_rank = 0;
    for (unsigned i = 1; i <= c->cfg.nservers; i++) {
        const unsigned j = (from + i) % c->cfg.nservers;
        const struct server *s = &c->srv[j];
        const unsigned rank = !s->failed ? 2 : now - s->failed_at >= c->cfg.down_ns;
        if (rank > best_rank) {
            best = j;
            best_rank = rank;
        }
    }
    return best;
}

static void retry(struct op *op, unsigned server, uint64_t at)
{
    op->server = server;
    set_waiting(op, true);
    op->retry_at = at;
    op->c->stats.retries++;
}

/* The try of op at its replica ended (answered or failed). */
static void try_ended(struct op *op, bool answered, uint64_t now)
{
    struct raftkv_client *c = op->c;
    struct server *s = &c->srv[op->server];
    op->inflight = false;
    s->tries--;
    c->tries--;
    c->ended++;
    if (!answered)
        return;
    s->heard_at = now;
    s->failed = false;
    rtt_sample(c, now - op->sent_at);
}

/* A redirect named replica i leader: the op goes there, unless i failed
 * (and has not answered since) and another op is bound there already: the
 * probe that finds it back, one at a time, so a dead replica gets one try
 * at once, each a try's length. Then the op asks the replica that
 * answered again after retry_ns: it names a new leader once one is
 * elected, or i again, which the op follows once i has answered. */
static void follow(struct op *op, unsigned i, uint64_t now)
{
    struct raftkv_client *c = op->c;
    const struct server *s = &c->srv[i];
    if (s->failed && s->tries + s->queued > 0) {
        retry(op, op->server, now + c->cfg.retry_ns);
        return;
    }
    if (!s->failed)
        c->leader = i;
    retry(op, i, now);
}

static void on_resp(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    struct op *op = tag;
    struct raftkv_client *c = op->c;
    if (c->destroying) {
        op->inflight = false;
        erma_msgbuf_free(rpc, &op->req);
        erma_msgbuf_free(rpc, &op->resp);
        op->have_bufs = false;
        return;
    }
    const uint64_t now = erma_now_ns();
    try_ended(op, status == ERMA_OK, now);
    if (status != ERMA_OK) {
        /* the replica failed or fell silent: mark it (once for all the tries
         * that failed with it), go on to the next */
        c->stats.tries_failed++;
        const struct server *s = &c->srv[op->server];
        if (!s->failed || s->failed_at < op->sent_at)
            mark_failed(c, op->server, now);
        const unsigned next = next_server(c, op->server, now);
        if (c->leader == op->server)
            c->leader = next;
        retry(op, next, now);
        return;
    }
    if (resp->size < 8 || (uint32_t)erma_get_le(resp->data + 4, 4) != resp->size - 8) {
        complete(op, ERMA_EBADPKT, NULL, 0);
        return;
    }
    const int st = (int32_t)(uint32_t)erma_get_le(resp->data, 4);
    const uint32_t len = (uint32_t)erma_get_le(resp->data + 4, 4);
    const uint8_t *bytes = resp->data + 8;
    if (st == RAFTKV_REDIRECT) {
        c->stats.redirects++;
        for (unsigned i = 0; len && i < c->cfg.nservers; i++)
            if (strlen(c->srv[i].uri) == len && memcmp(c->srv[i].uri, bytes, len) == 0 &&
                i != op->server) {
                follow(op, i, now);
                return;
            }
        /* no leader known there (an election): another replica, a little later */
        retry(op, next_server(c, op->server, now), now + c->cfg.retry_ns);
        return;
    }
    if (st == ERMA_EAGAIN) { /* leadership lost meanwhile */
        retry(op, op->server, now + c->cfg.retry_ns);
        return;
    }
    c->leader = op->server;
    complete(op, st, st == ERMA_OK ? bytes : NULL, st == ERMA_OK ? len : 0);
}

/* The lowest seq whose answer the client still waits for. */
static uint64_t floor_seq(const struct raftkv_client *c)
{
    uint64_t floor = c->next_seq;
    for (uint32_t i = 0; i < c->cfg.max_ops; i++)
        if (c->ops[i].busy && c->ops[i].seq && !c->ops[i].completed && c->ops[i].seq < floor)
            floor = c->ops[i].seq;
    return floor;
}

static void try_op(struct op *op, uint64_t now)
{
    struct raftkv_client *c = op->c;
    struct server *s = &c->srv[op->server];
    set_waiting(op, false);
    if (op->seq)
        erma_put_le(op->req.data + 16, floor_seq(c), 8);
    if (s->sess < 0) {
        s->sess = erma_session_create(c->rpc, s->uri, 0);
        /* a new session's wait starts now, though tries of the one
         * drop_silent destroyed are not yet cancelled (the next pass) */
        s->heard_at = now;
    }
    int rc = s->sess < 0 ? s->sess : ERMA_OK;
    if (s->sess < 0)
        s->sess = -1;
    if (rc == ERMA_OK) {
        rc = erma_rpc_call(c->rpc, s->sess, (uint8_t)(c->cfg.type_base + op->type), &op->req,
                           &op->resp, on_resp, op);
        if (rc == ERMA_OK) {
            op->inflight = true;
            op->sent_at = now;
            if (s->tries++ == 0)
                s->heard_at = now;
            c->tries++;
            return;
        }
    }
    c->stats.tries_failed++;
    mark_failed(c, op->server, now);
    retry(op, next_server(c, op->server, now), now + c->cfg.retry_ns);
}

/* A replica silent for try_ns() while tries wait at it has stalled or
 * died: its session goes, and with it those tries (ERMA_ECANCELLED, in
 * the next pass: on_resp moves them on). */
static int drop_silent(struct raftkv_client *c, uint64_t now)
{
    const uint64_t t = try_ns(c);
    int dropped = 0;
    for (unsigned i = 0; i < c->cfg.nservers; i++) {
        struct server *s = &c->srv[i];
        if (!s->tries || s->sess < 0 || now - s->heard_at < t)
            continue;
        const int sess = s->sess;
        s->sess = -1; /* before: the call may report its end to on_sm */
        mark_failed(c, i, now);
        c->stats.silent++;
        erma_session_destroy(c->rpc, sess);
        dropped++;
    }
    return dropped;
}

static int start(struct raftkv_client *c, uint8_t type, const void *key, uint32_t klen,
                 const void *val, uint32_t vlen, raftkv_fn cb, void *tag)
{
    if (!c || !key || klen == 0 || (vlen && !val) || !cb)
        return ERMA_EINVAL;
    struct op *op = NULL;
    for (uint32_t i = 0; i < c->cfg.max_ops && !op; i++)
        if (!c->ops[i].busy)
            op = &c->ops[i];
    if (!op)
        return ERMA_ENOSLOTS;
    const bool write = type != RAFTKV_GET && type != RAFTKV_GET_LOCAL;
    const size_t origin = write ? 24 : 0, size = origin + 8 + (size_t)klen + vlen;
    int rc = erma_msgbuf_alloc(c->rpc, size, &op->req);
    if (rc != ERMA_OK)
        return rc;
    rc = erma_msgbuf_alloc(c->rpc, 256, &op->resp);
    if (rc != ERMA_OK) {
        erma_msgbuf_free(c->rpc, &op->req);
        return rc;
    }
    /* the kv request after the origin: built in a view of the buffer */
    struct erma_msgbuf kv = op->req;
    kv.data += origin;
    kv.max_size -= origin;
    if (type == RAFTKV_PUT)
        rc = kv_req_put(&kv, key, klen, val, vlen);
    else if (type == RAFTKV_DEL)
        rc = kv_req_del(&kv, key, klen);
    else
        rc = kv_req_get(&kv, key, klen);
    if (rc != ERMA_OK) {
        erma_msgbuf_free(c->rpc, &op->req);
        erma_msgbuf_free(c->rpc, &op->resp);
        return rc;
    }
    op->seq = write ? ++c->next_seq : 0;
    if (write) {
        erma_put_le(op->req.data, c->cfg.id, 8);
        erma_put_le(op->req.data + 8, op->seq, 8);
    }
    erma_msgbuf_resize(&op->req, origin + kv.size);
    const uint64_t now = erma_now_ns();
    op->c = c;
    op->busy = true;
    op->have_bufs = true;
    op->inflight = op->completed = false;
    op->type = type;
    op->cb = cb;
    op->tag = tag;
    op->server = c->leader;
    op->deadline = now + c->cfg.op_timeout_ns;
    c->pending++;
    c->stats.ops++;
    try_op(op, now);
    return ERMA_OK;
}

int raftkv_put(struct raftkv_client *c, const void *key, uint32_t klen,
               const void *val, uint32_t vlen, raftkv_fn cb, void *tag)
{
    return start(c, RAFTKV_PUT, key, klen, val, vlen, cb, tag);
}

int raftkv_del(struct raftkv_client *c, const void *key, uint32_t klen,
               raftkv_fn cb, void *tag)
{
    return start(c, RAFTKV_DEL, key, klen, NULL, 0, cb, tag);
}

int raftkv_get(struct raftkv_client *c, const void *key, uint32_t klen, bool stale,
               raftkv_fn cb, void *tag)
{
    return start(c, stale ? RAFTKV_GET_LOCAL : RAFTKV_GET, key, klen, NULL, 0, cb,
                 tag);
}

/* Runs the callback of a completed op and frees its slot. */
static void finish(struct op *op)
{
    struct raftkv_client *c = op->c;
    c->completions--;
    c->pending--;
    op->status == ERMA_OK || op->status == ERMA_ENOENT ? c->stats.done++ : c->stats.failed++;
    op->cb(op->tag, op->status, op->val, op->vlen);
    erma_msgbuf_free(c->rpc, &op->req);
    erma_msgbuf_free(c->rpc, &op->resp);
    op->have_bufs = false;
    op->busy = op->completed = false;
}

int raftkv_client_poll(struct raftkv_client *c)
{
    int work = (int)c->ended;
    c->ended = 0;
    if (!c->completions && !c->waiting && !c->tries)
        return work;
    const uint64_t now = erma_now_ns();
    if (c->tries)
        work += drop_silent(c, now);
    if (!c->completions && !c->waiting)
        return work;
    for (uint32_t i = 0; i < c->cfg.max_ops; i++) {
        struct op *op = &c->ops[i];
        if (!op->busy)
            continue;
        if (op->waiting && now >= op->deadline)
            complete(op, ERMA_ETIMEDOUT, NULL, 0);
        else if (op->waiting && now >= op->retry_at)
            try_op(op, now);
        if (op->completed) {
            finish(op);
            work++;
        }
    }
    return work;
}

uint64_t raftkv_client_next_timer(const struct raftkv_client *c)
{
    if (c->completions)
        return 0;
    uint64_t t = UINT64_MAX;
    const uint64_t try_len = c->tries ? try_ns(c) : 0;
    for (unsigned i = 0; c->tries && i < c->cfg.nservers; i++)
        if (c->srv[i].tries && c->srv[i].sess >= 0 && c->srv[i].heard_at + try_len < t)
            t = c->srv[i].heard_at + try_len; /* drop_silent's */
    if (!c->waiting)
        return t;
    for (uint32_t i = 0; i < c->cfg.max_ops; i++) {
        const struct op *op = &c->ops[i];
        if (op->busy && op->waiting) {
            const uint64_t at = op->retry_at < op->deadline ? op->retry_at : op->deadline;
            t = at < t ? at : t;
        }
    }
    return t;
}

int raftkv_client_run_once(struct raftkv_client *c)
{
    const int work = erma_endpoint_run_once(c->ep);
    return work + raftkv_client_poll(c);
}

static int poll_obj(void *c)
{
    return raftkv_client_poll(c);
}

static uint64_t next_timer_obj(const void *c)
{
    return raftkv_client_next_timer(c);
}

int raftkv_client_run(struct raftkv_client *c, bool (*stop)(void *ctx), void *ctx,
                      uint64_t timeout_ns)
{
    return raftkv_run(c->ep, poll_obj, next_timer_obj, c, stop, ctx, timeout_ns);
}

int raftkv_client_create(const struct raftkv_client_cfg *cfg,
                         struct raftkv_client **out)
{
    if (!cfg || !out || !cfg->uri || !cfg->servers || cfg->nservers == 0 ||
        cfg->nservers > RAFTKV_MAX_PEERS)
        return ERMA_EINVAL;
    struct raftkv_client *c = calloc(1, sizeof *c);
    if (!c)
        return ERMA_ENOMEM;
    c->cfg = *cfg;
    struct raftkv_client_cfg *k = &c->cfg;
    if (!k->type_base)
        k->type_base = RAFTKV_TYPE_BASE;
    if (!k->max_ops)
        k->max_ops = 256;
    if (!k->op_timeout_ns)
        k->op_timeout_ns = 10000000000ull;
    if (!k->try_timeout_ns)
        k->try_timeout_ns = 1000000000ull;
    if (!k->retry_ns)
        k->retry_ns = 10000000;
    if (!k->failure_ns)
        k->failure_ns = 200000000;
    if (!k->try_min_ns)
        k->try_min_ns = 100000000;
    if (k->try_min_ns > k->failure_ns)
        k->try_min_ns = k->failure_ns;
    if (!k->down_ns)
        k->down_ns = 1000000000ull;
    k->servers = NULL;
    int rc = ERMA_OK;
    while (k->id == 0 && rc == ERMA_OK)
        if (getrandom(&k->id, sizeof k->id, 0) != sizeof k->id)
            rc = ERMA_ESYS;
    for (unsigned i = 0; i < k->nservers; i++) {
        c->srv[i].sess = -1;
        if (!cfg->servers[i] ||
            (size_t)snprintf(c->srv[i].uri, URI_MAX, "%s", cfg->servers[i]) >= URI_MAX)
            rc = ERMA_EADDR;
    }
    c->ops = calloc(k->max_ops, sizeof *c->ops);
    if (rc == ERMA_OK && !c->ops)
        rc = ERMA_ENOMEM;
    if (rc == ERMA_OK)
        rc = erma_nexus_create(NULL, &c->nx);
    if (rc == ERMA_OK)
        rc = erma_endpoint_create(k->uri, 0, k->ep_cfg, &c->ep);
    if (rc == ERMA_OK) {
        const struct erma_rpc_cfg rcfg = {.failure_ns = k->failure_ns,
                                          .req_timeout_ns = k->try_timeout_ns,
                                          .connect_timeout_ns = k->failure_ns,
                                          .sm_handler = on_sm,
                                          .sm_ctx = c};
        rc = erma_rpc_create(c->nx, c->ep, &rcfg, &c->rpc);
    }
    for (unsigned i = 0; rc == ERMA_OK && i < k->nservers; i++) {
        c->srv[i].sess = erma_session_create(c->rpc, c->srv[i].uri, 0);
        if (c->srv[i].sess < 0)
            c->srv[i].sess = -1;
    }
    if (rc != ERMA_OK) {
        raftkv_client_destroy(c);
        return rc;
    }
    *out = c;
    return ERMA_OK;
}

void raftkv_client_destroy(struct raftkv_client *c)
{
    if (!c)
        return;
    c->destroying = true;
    for (uint32_t i = 0; c->ops && i < c->cfg.max_ops; i++) {
        struct op *op = &c->ops[i];
        if (op->busy && op->have_bufs && !op->inflight) {
            erma_msgbuf_free(c->rpc, &op->req);
            erma_msgbuf_free(c->rpc, &op->resp);
            op->have_bufs = false;
        }
    }
    erma_rpc_destroy(c->rpc); /* in-flight tries end, freeing their buffers */
    for (uint32_t i = 0; c->ops && i < c->cfg.max_ops; i++) {
        struct op *op = &c->ops[i];
        if (op->busy)
            op->cb(op->tag, ERMA_ECANCELLED, NULL, 0);
    }
    erma_endpoint_destroy(c->ep);
    erma_nexus_destroy(c->nx);
    free(c->ops);
    free(c);
}

struct erma_endpoint *raftkv_client_endpoint(const struct raftkv_client *c)
{
    return c->ep;
}

unsigned raftkv_client_leader(const struct raftkv_client *c)
{
    return c->leader;
}

uint32_t raftkv_client_pending(const struct raftkv_client *c)
{
    return c->pending;
}

void raftkv_client_get_stats(const struct raftkv_client *c,
                             struct raftkv_client_stats *out)
{
    *out = c->stats;
}

unsigned raftkv_split(char *list, const char **out, unsigned max)
{
    unsigned n = 0;
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == max)
            return max + 1;
        out[n++] = t;
    }
    return n;
}
