/* The kvcs client (erma/kvcs.h): ops over the key's replicas, GETs by RPC
 * or by one-sided READ (kv_reader), with failover and down marks. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "erma/clock.h"
#include "kv/kv.h"
#include "kvcs/kvcs.h"
#include "erma/rma.h"
#include "erma/rpc.h"

#define MAX_R KVCS_MAX_REPLICAS
#define ITEM_OVERHEAD (16 + 8 + 7) /* kv item header, check, padding */
#define GET_RESP 512               /* a GET's first response buffer; erma grows it */
#define REGION_RESP 128
#define MAX_SESS 4     /* sessions per server: 8 requests in flight on each */
#define RX_SESSIONS 128 /* sessions the endpoint's RX ring takes (4096 / 32 credits) */
/* start_try: the replica is marked down and cannot be tried now (its
 * sessions failed or, for a READ, its key is not fetched again yet) */
#define PASSED_DOWN 2

enum kind { GET, PUT, DEL };

struct op;

/* One request to one replica. An RPC try past its deadline is abandoned:
 * its op goes on as if it had timed out, and the try (op NULL) waits for
 * its continuation to free it. */
struct try {
    struct kvcs_client *c;
    struct op *op;
    uint32_t pos; /* in op->rep */
    bool read;    /* a one-sided GET: the RMA op timeout bounds it */
    uint64_t deadline;
    struct erma_msgbuf req, resp;
};

struct op {
    struct kvcs_client *c;
    bool live;
    enum kind kind;
    enum kvcs_method method;
    uint8_t key[KVCS_MAX_KEY];
    uint32_t klen, nrep, rep[MAX_R];
    int st[MAX_R];    /* each replica's last outcome, KVCS_NOT_TRIED */
    uint32_t pending; /* PUT, DEL: tries not finished */
    int last_err;     /* GET: the last failed try's status */
    uint32_t answered;
    kvcs_fn cb;
    void *tag;
    struct try *tries[MAX_R]; /* in flight */
    int result;             /* finished while starting: delivered by the loop */
    struct op *next_done;
};

struct server {
    char uri[128];
    int sess[MAX_SESS]; /* -1: failed */
    uint32_t next_sess;
    struct kv_remote remote;
    struct kvcs_client *c;
    uint64_t down_until; /* when marked down: the next probe */
    bool down, probing;
    int down_err;        /* the failure that marked it down, or its last probe's */
    int region_rc; /* 1 asked, 0 known, < 0 to ask again */
    struct erma_msgbuf req, resp;
};

struct kvcs_client {
    struct kvcs_client_cfg cfg;
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    struct erma_rpc *rpc;
    struct erma_rma *rma;
    struct kv_reader *reader;
    struct kvcs_ring *ring;
    struct server *srv;
    struct op *ops;
    uint32_t *free_ops, nfree;
    struct op *done_head, *done_tail; /* finished while starting */
    int starting;                     /* inside a call that starts an op */
    bool destroying;
    bool in_cb;                       /* info: the op whose callback runs */
    struct kvcs_op_info info;
    int completed;
    uint32_t nsess; /* per server */
    uint64_t next_expiry, expiry_ns; /* timer work: expired tries, due probes */
    struct kvcs_client_stats stats;
};

static bool transport_failure(int st)
{
    switch (st) {
    case ERMA_ETIMEDOUT:
    case ERMA_EPEERFAILED:
    case ERMA_ESESSRESET:
    case ERMA_ECANCELLED:
    case ERMA_EREFUSED:
    case ERMA_ENACK:
    case ERMA_EDISPATCH:
    case ERMA_EAUTH:
    case ERMA_ENOREGION:
        return true;
    default:
        return false;
    }
}

/* Ops pass a server marked down by; down_ns after its first failure a
 * probe (the REGION request, which also fetches a restarted server's new
 * key) asks whether it is back. Failures while it is down (tries already
 * under way, ops whose replicas are all down) do not delay that probe. */
static void mark_down(struct kvcs_client *c, uint32_t server, int err)
{
    struct server *s = &c->srv[server];
    if (!s->down)
        s->down_until = erma_now_ns() + c->cfg.down_ns;
    s->down = true;
    s->down_err = err;
}

/* The probe failed (err, when it got that far): the next one in down_ns. */
static void probe_later(struct kvcs_client *c, struct server *s, int err)
{
    s->down = true;
    s->down_until = erma_now_ns() + c->cfg.down_ns;
    if (err)
        s->down_err = err;
}

/* ---- finishing ops ---- */

/* Frees the op's slot before its callback, which may start another op. */
static void deliver(struct kvcs_client *c, struct op *op, int status, const uint8_t *val,
                    uint32_t vlen)
{
    struct kvcs_op_info *in = &c->info;
    memset(in, 0, sizeof *in);
    in->nreplicas = op->nrep;
    memcpy(in->replicas, op->rep, sizeof op->rep);
    memcpy(in->status, op->st, sizeof op->st);
    for (uint32_t i = 0; i < op->nrep; i++) {
        const struct server *s = &c->srv[op->rep[i]];
        in->down_err[i] = s->down ? s->down_err : 0;
    }
    in->answered = op->answered;
    const kvcs_fn cb = op->cb;
    void *tag = op->tag;
    op->live = false;
    c->free_ops[c->nfree++] = (uint32_t)(op - c->ops);
    c->completed++;
    c->in_cb = true;
    cb(tag, status, val, vlen);
    c->in_cb = false;
}

static void finish_op(struct kvcs_client *c, struct op *op, int status, const uint8_t *val,
                      uint32_t vlen)
{
    if (status != ERMA_OK && status != ERMA_ENOENT)
        c->stats.failed++;
    if (!c->starting) {
        deliver(c, op, status, val, vlen);
        return;
    }
    op->result = status; /* no value: only failures happen while starting */
    op->next_done = NULL;
    if (c->done_tail)
        c->done_tail->next_done = op;
    else
        c->done_head = op;
    c->done_tail = op;
}

static void deliver_deferred(struct kvcs_client *c)
{
    struct op *op = c->done_head;
    c->done_head = c->done_tail = NULL;
    while (op) {
        struct op *next = op->next_done;
        deliver(c, op, op->result, NULL, 0);
        op = next;
    }
}

/* PUT, DEL: the outcome once every try finished. */
static int write_result(const struct op *op)
{
    int other = 0, transport = 0;
    bool stored = false, absent = false;
    for (uint32_t i = 0; i < op->nrep; i++) {
        const int st = op->st[i];
        if (st == KVCS_NOT_TRIED)
            continue;
        if (st == ERMA_OK)
            stored = true;
        else if (op->kind == DEL && st == ERMA_ENOENT)
            absent = true;
        else if (transport_failure(st))
            transport = st;
        else if (!other)
            other = st;
    }
    if (other)
        return other;
    if (stored)
        return ERMA_OK;
    return absent ? ERMA_ENOENT : transport ? transport : ERMA_ETIMEDOUT;
}

/* ---- tries ---- */

static void try_done(struct kvcs_client *c, struct op *op, uint32_t pos, int status,
                     const uint8_t *val, uint32_t vlen);

static void on_rpc(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    struct try *t = tag;
    struct op *op = t->op;
    if (t->c->destroying) {
        free(t); /* the endpoint frees its buffers */
        return;
    }
    const uint8_t *val = NULL;
    uint32_t vlen = 0;
    if (op && status == ERMA_OK)
        status = op->kind == GET ? kv_resp(resp, &val, &vlen) : kv_resp(resp, NULL, NULL);
    if (op) {
        op->tries[t->pos] = NULL;
        try_done(t->c, op, t->pos, status, val, vlen);
    }
    erma_msgbuf_free(rpc, &t->req);
    erma_msgbuf_free(rpc, &t->resp);
    free(t);
}

static void on_read(void *tag, int status, const uint8_t *val, uint32_t vlen)
{
    struct try *t = tag;
    struct op *op = t->op;
    const uint32_t pos = t->pos;
    op->tries[pos] = NULL;
    free(t);
    try_done(op->c, op, pos, status, val, vlen);
}

static int fill_req(const struct op *op, struct erma_msgbuf *req, const void *val, uint32_t vlen)
{
    if (op->kind == GET)
        return kv_req_get(req, op->key, op->klen);
    if (op->kind == PUT)
        return kv_req_put(req, op->key, op->klen, val, vlen);
    return kv_req_del(req, op->key, op->klen);
}

/* The server's sessions in turn, so that its requests share their slots;
 * -1 when none is there (failed ones are opened again by the probe). */
static int session_of(struct kvcs_client *c, struct server *s)
{
    for (uint32_t k = 0; k < c->nsess; k++) {
        int *sess = &s->sess[s->next_sess++ % c->nsess];
        if (*sess >= 0)
            return *sess;
    }
    return -1;
}

static int start_rpc(struct kvcs_client *c, struct try *t, struct server *s,
                     const void *val, uint32_t vlen)
{
    const struct op *op = t->op;
    static const uint8_t types[] = {KV_GET, KV_PUT, KV_DEL};
    const int sess = session_of(c, s);
    if (sess < 0)
        return PASSED_DOWN; /* its sessions failed: marked down (on_sm) */
    int rc = erma_msgbuf_alloc(c->rpc, 8 + (size_t)op->klen + vlen, &t->req);
    if (rc != ERMA_OK)
        return rc;
    rc = erma_msgbuf_alloc(c->rpc, op->kind == GET ? GET_RESP : 16, &t->resp);
    if (rc != ERMA_OK) {
        erma_msgbuf_free(c->rpc, &t->req);
        return rc;
    }
    rc = fill_req(op, &t->req, val, vlen);
    if (rc == ERMA_OK)
        rc = erma_rpc_call(c->rpc, sess, KVCS_TYPE_BASE + types[op->kind], &t->req,
                           &t->resp, on_rpc, t);
    if (rc != ERMA_OK) {
        erma_msgbuf_free(c->rpc, &t->req);
        erma_msgbuf_free(c->rpc, &t->resp);
    }
    return rc == ERMA_ENOENT ? ERMA_ESESSRESET : rc; /* ENOENT: the session is gone */
}

static int ask_region(struct kvcs_client *c, struct server *s);
static void probe_servers(struct kvcs_client *c, uint64_t now);

static int start_try(struct kvcs_client *c, struct op *op, uint32_t pos, const void *val,
                     uint32_t vlen)
{
    struct server *s = &c->srv[op->rep[pos]];
    const bool read = op->kind == GET && op->method == KVCS_READ;
    if (read && s->region_rc != 0)
        return PASSED_DOWN; /* marked down, its key not fetched again yet */
    struct try *t = calloc(1, sizeof *t);
    if (!t)
        return ERMA_ENOMEM;
    *t = (struct try){.c = c, .op = op, .pos = pos, .read = read,
                      .deadline = erma_now_ns() + c->cfg.attempt_timeout_ns};
    const int rc = t->read ? kv_rget(c->reader, &s->remote, op->key, op->klen, on_read, t)
                           : start_rpc(c, t, s, val, vlen);
    if (rc != ERMA_OK) {
        free(t);
        return rc;
    }
    op->tries[pos] = t;
    return ERMA_OK;
}

/* A try that did not start: its replica's status, ERMA_EPEERFAILED for one
 * passed over as down (which keeps the error that marked it down); another
 * transport failure marks the replica down. */
static int not_started(struct kvcs_client *c, struct op *op, uint32_t pos, int rc)
{
    const bool passed = rc == PASSED_DOWN;
    if (passed)
        rc = ERMA_EPEERFAILED;
    if (transport_failure(rc) && !(passed && c->srv[op->rep[pos]].down))
        mark_down(c, op->rep[pos], rc);
    op->st[pos] = rc;
    return rc;
}

/* RPC tries past their deadline (they may wait behind others for one of
 * the session's slots, where the request timeout does not run yet) fail
 * as timed out; their requests complete later, to no op. */
static void expire_tries(struct kvcs_client *c, uint64_t now)
{
    for (uint32_t i = 0; i < c->cfg.max_ops; i++) {
        struct op *op = &c->ops[i];
        for (uint32_t p = 0; op->live && p < op->nrep; p++) {
            struct try *t = op->tries[p];
            if (!t || t->read || now < t->deadline)
                continue;
            t->op = NULL;
            op->tries[p] = NULL;
            try_done(c, op, p, ERMA_ETIMEDOUT, NULL, 0);
        }
    }
}

/* ---- GET: one replica after another ---- */

/* The first untried replica not marked down (*passed: after one that is),
 * else the first untried one; -1 when every replica was tried. */
static int pick(struct kvcs_client *c, const struct op *op, bool *passed)
{
    int any = -1;
    for (uint32_t i = 0; i < op->nrep; i++) {
        if (op->st[i] != KVCS_NOT_TRIED)
            continue;
        if (!c->srv[op->rep[i]].down) {
            *passed = any >= 0;
            return (int)i;
        }
        if (any < 0)
            any = (int)i;
    }
    *passed = false;
    return any;
}

/* A failed try: should the GET move on to another replica? */
static bool move_on(int status)
{
    return transport_failure(status) || status == ERMA_EAGAIN;
}

static void get_next(struct kvcs_client *c, struct op *op)
{
    for (;;) {
        bool passed;
        const int pos = pick(c, op, &passed);
        if (pos < 0) {
            finish_op(c, op, op->last_err, NULL, 0);
            return;
        }
        c->stats.skipped += passed;
        c->stats.failovers += op->last_err || passed;
        int rc = start_try(c, op, (uint32_t)pos, NULL, 0);
        if (rc == ERMA_OK)
            return;
        rc = op->last_err = not_started(c, op, (uint32_t)pos, rc);
        if (!move_on(rc)) {
            finish_op(c, op, rc, NULL, 0);
            return;
        }
    }
}

static void try_done(struct kvcs_client *c, struct op *op, uint32_t pos, int status,
                     const uint8_t *val, uint32_t vlen)
{
    op->st[pos] = status;
    if (transport_failure(status))
        mark_down(c, op->rep[pos], status);
    if (op->kind != GET) {
        if (--op->pending == 0)
            finish_op(c, op, write_result(op), NULL, 0);
    } else if (status == ERMA_OK || status == ERMA_ENOENT) {
        op->answered = op->rep[pos];
        finish_op(c, op, status, val, vlen);
    } else if (move_on(status)) {
        op->last_err = status;
        get_next(c, op);
    } else {
        finish_op(c, op, status, NULL, 0);
    }
}

/* ---- starting ops ---- */

static int new_op(struct kvcs_client *c, enum kind kind, const void *key, uint32_t klen,
                  uint32_t vlen, kvcs_fn cb, void *tag, struct op **out)
{
    if (!c || !key || klen == 0 || !cb)
        return ERMA_EINVAL;
    if (klen > KVCS_MAX_KEY || (uint64_t)klen + vlen + ITEM_OVERHEAD > KV_MAX_ITEM)
        return ERMA_E2BIG;
    if (c->nfree == 0)
        return ERMA_ENOSLOTS;
    struct op *op = &c->ops[c->free_ops[--c->nfree]];
    const int n = kvcs_ring_replicas(c->ring, key, klen, op->rep, c->cfg.replicas);
    op->nrep = n > 0 ? (uint32_t)n : 0;
    for (uint32_t i = 0; i < MAX_R; i++)
        op->st[i] = KVCS_NOT_TRIED;
    memcpy(op->key, key, klen);
    op->klen = klen;
    op->kind = kind;
    op->method = c->cfg.method;
    op->cb = cb;
    op->tag = tag;
    op->last_err = 0;
    op->answered = UINT32_MAX;
    op->live = true;
    *out = op;
    return ERMA_OK;
}

int kvcs_get(struct kvcs_client *c, const void *key, uint32_t klen, kvcs_fn cb,
             void *tag)
{
    struct op *op;
    const int rc = new_op(c, GET, key, klen, 0, cb, tag, &op);
    if (rc != ERMA_OK)
        return rc;
    c->stats.gets++;
    if (op->method == KVCS_READ)
        c->stats.read_gets++;
    else
        c->stats.rpc_gets++;
    c->starting++;
    get_next(c, op);
    c->starting--;
    return ERMA_OK;
}

/* PUT, DEL: a try to every replica at once. */
/* A write to a replica marked down goes out if its sessions are there (it
 * may be alive: a stall marked it down), so that it does not keep an old
 * value, but the op does not wait for it: its status stays
 * KVCS_NOT_TRIED and its answer is dropped. */
static void send_detached(struct kvcs_client *c, struct op *op, uint32_t pos,
                          const void *val, uint32_t vlen)
{
    if (start_try(c, op, pos, val, vlen) != ERMA_OK)
        return;
    op->tries[pos]->op = NULL;
    op->tries[pos] = NULL;
}

static void write_all(struct kvcs_client *c, struct op *op, const void *val, uint32_t vlen)
{
    bool all_down = true;
    for (uint32_t i = 0; i < op->nrep; i++)
        all_down = all_down && c->srv[op->rep[i]].down;
    c->starting++;
    op->pending = op->nrep;
    for (uint32_t i = 0; i < op->nrep; i++) {
        if (c->srv[op->rep[i]].down && !all_down) {
            send_detached(c, op, i, val, vlen);
            op->pending--;
            continue;
        }
        const int rc = start_try(c, op, i, val, vlen);
        if (rc == ERMA_OK)
            continue;
        not_started(c, op, i, rc);
        op->pending--;
    }
    if (op->pending == 0)
        finish_op(c, op, write_result(op), NULL, 0);
    c->starting--;
}

int kvcs_put(struct kvcs_client *c, const void *key, uint32_t klen, const void *val,
             uint32_t vlen, kvcs_fn cb, void *tag)
{
    if (vlen && !val)
        return ERMA_EINVAL;
    struct op *op;
    const int rc = new_op(c, PUT, key, klen, vlen, cb, tag, &op);
    if (rc != ERMA_OK)
        return rc;
    c->stats.puts++;
    write_all(c, op, val, vlen);
    return ERMA_OK;
}

int kvcs_del(struct kvcs_client *c, const void *key, uint32_t klen, kvcs_fn cb,
             void *tag)
{
    struct op *op;
    const int rc = new_op(c, DEL, key, klen, 0, cb, tag, &op);
    if (rc != ERMA_OK)
        return rc;
    c->stats.dels++;
    write_all(c, op, NULL, 0);
    return ERMA_OK;
}

/* ---- the loop ---- */

int kvcs_client_run_once(struct kvcs_client *c)
{
    if (!c)
        return ERMA_EINVAL;
    c->completed = 0;
    deliver_deferred(c);
    erma_endpoint_run_once(c->ep);
    for (int i = 0; i < 4 && kv_reader_poll(c->reader) > 0; i++)
        ;
    const uint64_t now = erma_now_ns();
    if (now >= c->next_expiry) { /* timer work, every expiry_ns */
        c->next_expiry = now + c->expiry_ns;
        expire_tries(c, now);
        probe_servers(c, now);
    }
    deliver_deferred(c);
    return c->completed;
}

void kvcs_client_set_method(struct kvcs_client *c, enum kvcs_method m)
{
    if (c)
        c->cfg.method = m;
}

void kvcs_client_get_stats(const struct kvcs_client *c,
                           struct kvcs_client_stats *out)
{
    *out = c->stats;
}

int kvcs_op_info(const struct kvcs_client *c, struct kvcs_op_info *out)
{
    if (!c || !out || !c->in_cb)
        return ERMA_EINVAL;
    *out = c->info;
    return ERMA_OK;
}

/* ---- setting up: sessions and each table's region ---- */

static void on_sm(struct erma_rpc *rpc, int session, enum erma_sm_event ev, int err, void *ctx)
{
    (void)rpc;
    struct kvcs_client *c = ctx;
    if (ev != ERMA_SM_PEER_FAILED && ev != ERMA_SM_CONNECT_FAILED)
        return;
    for (uint32_t i = 0; i < c->cfg.nservers; i++)
        for (uint32_t k = 0; k < c->nsess; k++)
            if (c->srv[i].sess[k] == session) {
                c->srv[i].sess[k] = -1;
                mark_down(c, i, err);
            }
}

/* The answer to a REGION request, at start or as a probe. */
static void on_region(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    struct server *s = tag;
    if (s->c->destroying)
        return;
    if (status == ERMA_OK)
        status = kv_resp_region(resp, &s->remote);
    s->region_rc = status == ERMA_OK ? 0 : status;
    s->probing = false;
    if (status == ERMA_OK)
        s->down = false;
    else
        probe_later(s->c, s, status);
}

/* Opens the server's sessions that are not (or no longer) there, and asks
 * for its region over the first once the last answer failed. */
static int ask_region(struct kvcs_client *c, struct server *s)
{
    for (uint32_t k = 0; k < c->nsess; k++)
        if (s->sess[k] < 0 && (s->sess[k] = erma_session_create(c->rpc, s->uri, 0)) < 0)
            return s->sess[k];
    if (s->region_rc >= 0)
        return ERMA_OK;
    int rc = kv_req_region(&s->req, erma_rma_identity(c->rma));
    if (rc == ERMA_OK)
        rc = erma_rpc_call(c->rpc, s->sess[0], KVCS_TYPE_BASE + KV_REGION,
                           &s->req, &s->resp, on_region, s);
    if (rc == ERMA_OK)
        s->region_rc = 1;
    return rc == ERMA_ENOMEM ? rc : ERMA_OK; /* else asked again next time */
}

/* Servers marked down whose mark has passed are asked for their region
 * again: the probe. */
static void probe_servers(struct kvcs_client *c, uint64_t now)
{
    for (uint32_t i = 0; i < c->cfg.nservers; i++) {
        struct server *s = &c->srv[i];
        if (!s->down || s->probing || now < s->down_until)
            continue;
        s->region_rc = -1;
        const int rc = ask_region(c, s);
        if (rc == ERMA_OK && s->region_rc == 1)
            s->probing = true;
        else
            probe_later(c, s, rc); /* could not even ask */
    }
}

static bool server_ready(const struct kvcs_client *c, const struct server *s)
{
    for (uint32_t k = 0; k < c->nsess; k++)
        if (!erma_session_connected(c->rpc, s->sess[k]))
            return false;
    return s->region_rc == 0;
}

/* Every server's sessions, region and key, before the deadline. */
static int fetch_regions(struct kvcs_client *c)
{
    const uint64_t end = erma_now_ns() + c->cfg.connect_timeout_ns;
    for (;;) {
        bool all = true;
        for (uint32_t i = 0; i < c->cfg.nservers; i++) {
            struct server *s = &c->srv[i];
            const int rc = ask_region(c, s);
            if (rc != ERMA_OK)
                return rc;
            all = all && server_ready(c, s);
        }
        if (all)
            return ERMA_OK;
        if (erma_now_ns() > end)
            return ERMA_ETIMEDOUT;
        erma_endpoint_run_once(c->ep);
    }
}

static int servers_up(struct kvcs_client *c, const char *const *uris)
{
    for (uint32_t i = 0; i < c->cfg.nservers; i++) {
        struct server *s = &c->srv[i];
        s->c = c;
        for (uint32_t k = 0; k < MAX_SESS; k++)
            s->sess[k] = -1;
        s->region_rc = -1;
        if (!uris[i] || (size_t)snprintf(s->uri, sizeof s->uri, "%s", uris[i]) >= sizeof s->uri)
            return ERMA_EADDR;
        s->remote.peer = erma_rma_peer(c->rma, s->uri, 0);
        if (s->remote.peer < 0)
            return s->remote.peer;
        /* kept for asking again, after a restart (the endpoint frees them) */
        if (erma_msgbuf_alloc(c->rpc, 8, &s->req) != ERMA_OK ||
            erma_msgbuf_alloc(c->rpc, REGION_RESP, &s->resp) != ERMA_OK)
            return ERMA_ENOMEM;
    }
    return fetch_regions(c);
}

static void defaults(struct kvcs_client_cfg *cfg)
{
    if (!cfg->replicas)
        cfg->replicas = 3;
    if (cfg->replicas > cfg->nservers)
        cfg->replicas = cfg->nservers;
    if (cfg->replicas > MAX_R)
        cfg->replicas = MAX_R;
    if (!cfg->vnodes)
        cfg->vnodes = 64;
    if (!cfg->max_ops)
        cfg->max_ops = 256;
    if (!cfg->attempt_timeout_ns)
        cfg->attempt_timeout_ns = 5000000;
    if (!cfg->down_ns)
        cfg->down_ns = 200000000;
    if (!cfg->connect_timeout_ns)
        cfg->connect_timeout_ns = 5000000000ull;
}

static int endpoint_up(struct kvcs_client *c)
{
    const struct kvcs_client_cfg *cfg = &c->cfg;
    const struct erma_rpc_cfg rcfg = {.req_timeout_ns = cfg->attempt_timeout_ns,
                                      .failure_ns = cfg->failure_ns,
                                      .sm_handler = on_sm, .sm_ctx = c, .cc = {.off = cfg->cc_off}};
    /* Room for every GET's largest item at once, and no executor windows:
     * the executor holds a transfer's chunks while slots, the inbound
     * window or its CC window are short, and only a transfer's own
     * completions wake it again (GETs of big items stalled). max_ops
     * bounds the reads in flight instead. */
    const uint64_t chunks = (KV_MAX_ITEM + ERMA_RMA_MAX_OP - 1) / ERMA_RMA_MAX_OP;
    const uint64_t slots = cfg->max_ops * chunks + 64, window = cfg->max_ops * 32768ull;
    const struct erma_rma_cfg mcfg = {.slots = slots < 65535 ? (uint32_t)slots : 65535,
                                      .inbound_window = window < (1u << 30) ? (uint32_t)window
                                                                            : 1u << 30,
                                      .transfers = cfg->max_ops, .cc_off = true,
                                      .op_timeout_ns = cfg->attempt_timeout_ns,
                                      .dispatch_timeout_ns = cfg->attempt_timeout_ns};
    int rc = erma_nexus_create(NULL, &c->nx);
    if (rc == ERMA_OK)
        rc = erma_endpoint_create(cfg->uri, 0, NULL, &c->ep);
    if (rc == ERMA_OK)
        rc = erma_rpc_create(c->nx, c->ep, &rcfg, &c->rpc);
    if (rc == ERMA_OK)
        rc = erma_rma_create(c->ep, &mcfg, &c->rma);
    if (rc == ERMA_OK)
        rc = kv_reader_create(c->rma, cfg->max_ops, 0, &c->reader);
    return rc;
}

static int client_up(struct kvcs_client *c)
{
    const uint32_t n = c->cfg.max_ops;
    c->srv = calloc(c->cfg.nservers, sizeof *c->srv);
    c->ops = calloc(n, sizeof *c->ops);
    c->free_ops = calloc(n, sizeof *c->free_ops);
    if (!c->srv || !c->ops || !c->free_ops)
        return ERMA_ENOMEM;
    for (uint32_t i = 0; i < n; i++) {
        c->ops[i].c = c;
        c->free_ops[c->nfree++] = n - 1 - i;
    }
    int rc = kvcs_ring_create(c->cfg.nservers, c->cfg.vnodes, &c->ring);
    if (rc == ERMA_OK)
        rc = endpoint_up(c);
    if (rc == ERMA_OK)
        rc = servers_up(c, c->cfg.servers);
    return rc;
}

int kvcs_client_create(const struct kvcs_client_cfg *cfg,
                       struct kvcs_client **out)
{
    if (!cfg || !cfg->uri || !cfg->servers || !cfg->nservers || !out ||
        cfg->max_ops > 65536 || (cfg->method != KVCS_RPC && cfg->method != KVCS_READ))
        return ERMA_EINVAL;
    struct kvcs_client *c = calloc(1, sizeof *c);
    if (!c)
        return ERMA_ENOMEM;
    c->cfg = *cfg;
    defaults(&c->cfg);
    c->nsess = RX_SESSIONS / c->cfg.nservers < MAX_SESS ? RX_SESSIONS / c->cfg.nservers
                                                        : MAX_SESS;
    if (!c->nsess)
        c->nsess = 1;
    c->expiry_ns = c->cfg.attempt_timeout_ns / 8;
    if (c->expiry_ns > 1000000)
        c->expiry_ns = 1000000;
    const int rc = client_up(c);
    if (rc != ERMA_OK) {
        kvcs_client_destroy(c);
        return rc;
    }
    c->cfg.servers = NULL; /* the caller's; copied into srv[] */
    *out = c;
    return ERMA_OK;
}

void kvcs_client_destroy(struct kvcs_client *c)
{
    if (!c)
        return;
    erma_rma_destroy(c->rma); /* drops the reader's reads without completions */
    kv_reader_destroy(c->reader);
    for (uint32_t i = 0; c->ops && i < c->cfg.max_ops; i++)
        for (uint32_t p = 0; c->ops[i].live && p < c->ops[i].nrep; p++)
            if (c->ops[i].tries[p] && c->ops[i].tries[p]->read)
                free(c->ops[i].tries[p]);
    c->destroying = true;     /* requests fail now: their tries are freed, no callback */
    erma_rpc_destroy(c->rpc);
    erma_endpoint_destroy(c->ep);
    erma_nexus_destroy(c->nx);
    kvcs_ring_destroy(c->ring);
    free(c->srv);
    free(c->ops);
    free(c->free_ops);
    free(c);
}
