/* The kvcs client's ops (erma/kvcs.h): GETs by RPC or by one-sided READ
 * (kv_reader) at one replica after another, hedged when a try is slower
 * than its replica's round trips; PUTs and DELs at every replica. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "erma/clock.h"
#include "erma/rma.h"
#include "kvcs/client.h"

#define ITEM_OVERHEAD (16 + 8 + 7) /* kv item header, check, padding */
#define GET_RESP 512               /* a GET's first response buffer; erma grows it */
/* start_try: the replica is marked down and cannot be tried now (its
 * sessions failed or, for a READ, its key is not fetched again yet) */
#define PASSED_DOWN 2
#define CHECK_NS 20000ull         /* how often tries' timers are looked at, */
#define CHECK_PER_TRY_NS 100ull   /* and later by this per try walked: the walk's cost bounded */

/* ---- finishing ops ---- */

/* Frees the op's slot before its callback, which may start another op. */
static void deliver(struct kvcs_client *c, struct op *op, int status, const uint8_t *val,
                    uint32_t vlen)
{
    struct kvcs_op_info *in = &c->info;
    memset(in, 0, sizeof *in);
    in->nreplicas = op->nrep;
    memcpy(in->status, op->st, sizeof op->st);
    for (uint32_t i = 0; i < op->nrep; i++) {
        const struct server *s = &c->srv[op->rep[i]];
        in->replicas[i] = op->rep[i] / c->cfg.server_threads; /* the ring's server number */
        in->down_err[i] = s->down ? s->down_err : 0;
    }
    in->answered = op->answered == UINT32_MAX ? UINT32_MAX : op->answered / c->cfg.server_threads;
    const kvcs_fn cb = op->cb;
    void *tag = op->tag;
    op->live = false;
    c->free_ops[c->nfree++] = (uint32_t)(op - c->ops);
    c->completed++;
    c->in_cb = true;
    cb(tag, status, val, vlen);
    c->in_cb = false;
}

/* Tries still in flight leave the op: they complete to no op. */
static void finish_op(struct kvcs_client *c, struct op *op, int status, const uint8_t *val,
                      uint32_t vlen)
{
    for (uint32_t i = 0; i < op->nrep; i++)
        if (op->tries[i]) {
            op->tries[i]->op = NULL;
            op->tries[i] = NULL;
        }
    op->inflight = 0;
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
    if (!c->done_head)
        return;
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
        else if (kvcs__transport_failure(st))
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

/* A try's outcome: a round trip to its server, news of a failed server,
 * and, while it is still in its op, the op's next step. */
static void try_end(struct kvcs_client *c, struct try *t, int status, const uint8_t *val,
                    uint32_t vlen)
{
    struct op *op = t->op;
    struct server *s = &c->srv[t->server];
    if (!kvcs__transport_failure(status))
        s->heard_ns = erma_now_ns();
    if (status == ERMA_OK || status == ERMA_ENOENT)
        kvcs__rtt_sample(&s->rtt[t->read], s->heard_ns - t->start);
    if (!op) {
        if (kvcs__transport_failure(status))
            kvcs__mark_down(c, t->server, status);
        return;
    }
    op->tries[t->pos] = NULL;
    op->inflight--;
    try_done(c, op, t->pos, status, val, vlen);
}

static void on_rpc(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    struct try *t = tag;
    struct kvcs_client *c = t->c;
    if (c->destroying) {
        kvcs__try_free(c, t); /* the endpoint frees its buffers */
        return;
    }
    const uint8_t *val = NULL;
    uint32_t vlen = 0;
    if (t->op && status == ERMA_OK)
        status = t->op->kind == GET ? kv_resp(resp, &val, &vlen) : kv_resp(resp, NULL, NULL);
    try_end(c, t, status, val, vlen);
    erma_msgbuf_free(rpc, &t->req);
    erma_msgbuf_free(rpc, &t->resp);
    kvcs__try_free(c, t);
}

static void on_read(void *tag, int status, const uint8_t *val, uint32_t vlen);

/* A one-sided GET try at s, or queued behind READ_WINDOW others there (as
 * an RPC waits for one of its sessions' slots): without a window a burst
 * of GETs went out at once and their answers waited in this client's own
 * socket (ms beside a busy core, docs/PERFORMANCE.md). */
static int start_read(struct kvcs_client *c, struct try *t, struct server *s)
{
    if (s->reads >= READ_WINDOW) {
        c->stats.read_waits++;
        t->wnext = NULL;
        if (s->wait_tail)
            s->wait_tail->wnext = t;
        else
            s->wait_head = t;
        s->wait_tail = t;
        return ERMA_OK;
    }
    const int rc = kv_rget(c->reader, &s->remote, t->op->key, t->op->klen, on_read, t);
    s->reads += rc == ERMA_OK;
    return rc;
}

/* A read at s ended: waiting ones go; those whose op finished without
 * them are dropped, and one that cannot start ends as a failed try. */
static void read_window_next(struct kvcs_client *c, struct server *s)
{
    while (s->wait_head && s->reads < READ_WINDOW) {
        struct try *t = s->wait_head;
        s->wait_head = t->wnext;
        if (!s->wait_head)
            s->wait_tail = NULL;
        const int rc = t->op ? start_read(c, t, s) : ERMA_ECANCELLED;
        if (rc != ERMA_OK) {
            if (t->op)
                try_end(c, t, rc, NULL, 0);
            kvcs__try_free(c, t);
        }
    }
}

static void on_read(void *tag, int status, const uint8_t *val, uint32_t vlen)
{
    struct try *t = tag;
    struct kvcs_client *c = t->c;
    struct server *s = &c->srv[t->server];
    s->reads--;
    try_end(c, t, status, val, vlen);
    kvcs__try_free(c, t);
    read_window_next(c, s);
}

static int fill_req(const struct op *op, struct erma_msgbuf *req, const void *val, uint32_t vlen)
{
    if (op->kind == GET)
        return kv_req_get(req, op->key, op->klen);
    if (op->kind == PUT)
        return kv_req_put(req, op->key, op->klen, val, vlen);
    return kv_req_del(req, op->key, op->klen);
}

static int start_rpc(struct kvcs_client *c, struct try *t, struct server *s,
                     const void *val, uint32_t vlen)
{
    const struct op *op = t->op;
    static const uint8_t types[] = {KV_GET, KV_PUT, KV_DEL};
    const int sess = kvcs__session_of(c, s);
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

static int start_try(struct kvcs_client *c, struct op *op, uint32_t pos, const void *val,
                     uint32_t vlen)
{
    const uint32_t server = op->rep[pos];
    struct server *s = &c->srv[server];
    const bool read = op->kind == GET && op->method == KVCS_READ;
    if (read && s->region_rc != 0)
        return PASSED_DOWN; /* marked down, its key not fetched again yet */
    struct try *t = kvcs__try_new(c);
    if (!t)
        return ERMA_ENOMEM;
    const uint64_t now = erma_now_ns();
    t->op = op;
    t->pos = pos;
    t->server = server;
    t->read = read;
    t->start = now;
    t->hedge_at = now + kvcs__hedge_ns(c, s, read);
    t->deadline = now + c->cfg.attempt_timeout_ns;
    const int rc = read ? start_read(c, t, s) : start_rpc(c, t, s, val, vlen);
    if (rc != ERMA_OK) {
        kvcs__try_free(c, t);
        return rc;
    }
    op->tries[pos] = t;
    op->inflight++;
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
    if (kvcs__transport_failure(rc) && !(passed && c->srv[op->rep[pos]].down))
        kvcs__mark_down(c, op->rep[pos], rc);
    op->st[pos] = rc;
    return rc;
}

/* ---- GET: one replica after another ---- */

/* The first untried replica not marked down (*passed: after one that is),
 * else the first untried one; -1 when every replica was tried or is being
 * tried. */
static int pick(struct kvcs_client *c, const struct op *op, bool *passed)
{
    int any = -1;
    for (uint32_t i = 0; i < op->nrep; i++) {
        if (op->st[i] != KVCS_NOT_TRIED || op->tries[i])
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
    return kvcs__transport_failure(status) || status == ERMA_EAGAIN;
}

/* Starts a try at the next replica; the op fails when none is left and no
 * try is in flight (one still in flight may answer: a hedge that cannot
 * start is no failure). */
static void get_next(struct kvcs_client *c, struct op *op)
{
    for (;;) {
        bool passed;
        const int pos = pick(c, op, &passed);
        if (pos < 0) {
            if (!op->inflight)
                finish_op(c, op, op->last_err, NULL, 0);
            return;
        }
        c->stats.skipped += passed;
        c->stats.failovers += op->last_err || passed;
        int rc = start_try(c, op, (uint32_t)pos, NULL, 0);
        if (rc == ERMA_OK)
            return;
        rc = not_started(c, op, (uint32_t)pos, rc);
        if (move_on(rc)) {
            op->last_err = rc;
            continue;
        }
        if (!op->inflight)
            finish_op(c, op, rc, NULL, 0);
        return;
    }
}

static void try_done(struct kvcs_client *c, struct op *op, uint32_t pos, int status,
                     const uint8_t *val, uint32_t vlen)
{
    op->st[pos] = status;
    if (kvcs__transport_failure(status))
        kvcs__mark_down(c, op->rep[pos], status);
    if (op->kind != GET) {
        if (--op->pending == 0)
            finish_op(c, op, write_result(op), NULL, 0);
    } else if (status == ERMA_OK || status == ERMA_ENOENT) {
        op->answered = op->rep[pos];
        finish_op(c, op, status, val, vlen);
    } else if (move_on(status)) {
        op->last_err = status;
        if (!op->inflight)
            get_next(c, op);
    } else {
        finish_op(c, op, status, NULL, 0);
    }
}

/* Would op's next try take one round trip? Not a one-sided GET at a
 * replica whose location cache has no entry for the key: two READs,
 * which seldom beat the try already in flight. */
static bool hedge_is_cheap(struct kvcs_client *c, const struct op *op)
{
    bool passed;
    const int pos = op->method == KVCS_READ ? pick(c, op, &passed) : -1;
    return pos < 0 || kv_reader_cached(c->reader, &c->srv[op->rep[pos]].remote, op->key,
                                       op->klen);
}

/* t's GET asks its next replica too if t's replica has been silent for
 * its hedge time and the budget allows (kvcs__hedge_kind), or it stalls;
 * a budgeted one-sided hedge only where it takes one READ. */
static void hedge(struct kvcs_client *c, struct try *t, struct op *op, uint64_t now)
{
    const enum hedge_kind h = kvcs__hedge_kind(c, t, now);
    if (h == HEDGE_BUDGET && !t->costly)
        t->costly = !hedge_is_cheap(c, op);
    if (h == HEDGE_NOT || (h == HEDGE_BUDGET && t->costly))
        return;
    t->hedged = true;
    const uint32_t before = op->inflight;
    get_next(c, op);
    if (!op->live || op->inflight <= before)
        return; /* no replica left to ask, or none took the try */
    c->stats.hedges++;
    c->stats.stall_hedges += h == HEDGE_STALL;
    if (h == HEDGE_BUDGET)
        kvcs__hedge_spend(c);
}

/* The timers of the tries in flight. A GET try slower than its replica's
 * round trips (hedge_at) at a replica silent as long may be joined by a
 * try at the next replica (hedge(): on a budget, beyond it past a stall);
 * both stay in flight and the first answer wins, so a replica that stalls
 * (a descheduled server) costs a GET about a round trip more, not a
 * failure, and a busy one gets no more load. An RPC try past its
 * deadline (it may wait behind others for one of its session's slots,
 * where the request timeout does not run yet) fails as timed out; its
 * request completes later, to no op. Tries started here are put at the
 * list's head, behind the walk. Returns the tries walked. */
static uint32_t check_tries(struct kvcs_client *c, uint64_t now)
{
    struct try *next;
    uint32_t n = 0;
    for (struct try *t = c->tries; t; t = next, n++) {
        next = t->next;
        struct op *op = t->op;
        if (!op)
            continue;
        if (!t->read && now >= t->deadline) {
            t->op = NULL;
            op->tries[t->pos] = NULL;
            op->inflight--;
            try_done(c, op, t->pos, ERMA_ETIMEDOUT, NULL, 0);
        } else if (op->kind == GET && !t->hedged && now >= t->hedge_at && !c->cfg.no_hedge) {
            hedge(c, t, op, now);
        }
    }
    return n;
}

/* ---- starting ops ---- */

/* The servers' endpoint thread that holds key, as every client computes
 * it (erma/kvcs.h, Client): FNV-1a of its bytes, mixed by MurmurHash3's
 * finalizer (FNV-1a alone splits keys that differ in a digit badly: its
 * low bits are the xor of the bytes' low bits), scaled to [0, threads). */
static uint32_t thread_of(const void *key, uint32_t klen, uint32_t threads)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint32_t i = 0; i < klen; i++)
        h = (h ^ ((const uint8_t *)key)[i]) * 0x100000001b3ull;
    h = (h ^ h >> 33) * 0xff51afd7ed558ccdull;
    h = (h ^ h >> 33) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return (uint32_t)(((h >> 32) * threads) >> 32);
}

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
    const uint32_t t = c->cfg.server_threads > 1 ? thread_of(key, klen, c->cfg.server_threads) : 0;
    for (uint32_t i = 0; i < op->nrep; i++)
        op->rep[i] = op->rep[i] * c->cfg.server_threads + t;
    for (uint32_t i = 0; i < MAX_R; i++)
        op->st[i] = KVCS_NOT_TRIED;
    if (kind == GET && c->cfg.method == KVCS_READ) { /* where its first try goes */
        bool passed;
        const int first = pick(c, op, &passed);
        if (first >= 0)
            kv_reader_prefetch(c->reader, &c->srv[op->rep[first]].remote, key, klen);
    }
    memcpy(op->key, key, klen);
    op->klen = klen;
    op->kind = kind;
    op->method = c->cfg.method;
    op->cb = cb;
    op->tag = tag;
    op->last_err = 0;
    op->inflight = 0;
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
    kvcs__hedge_earn(c);
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
    op->inflight--;
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
    if (c->tries && now >= c->next_check)
        c->next_check = now + CHECK_NS + check_tries(c, now) * CHECK_PER_TRY_NS;
    if (now >= c->next_probe) {
        c->next_probe = now + c->probe_tick;
        kvcs__probe_servers(c, now);
    }
    deliver_deferred(c);
    return c->completed;
}
