/* The raftkv client's tries (client_impl.h): the replica an op is tried
 * at, when, and what the end of a try means (raftkv.h, "The service"). */
#include <string.h>

#include "erma/clock.h"
#include "erma/sdk/wire.h"
#include "raftkv/client_impl.h"

/* How long a replica may stay silent while tries wait at it: from the
 * answers' round trips, srtt + 4 rttvar, at least try_min_ns, at most
 * failure_ns (also the whole try before any answer came). */
uint64_t raftkv__try_ns(const struct raftkv_client *c)
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

void raftkv__client_sm(struct erma_rpc *rpc, int session, enum erma_sm_event ev, int err,
                       void *ctx)
{
    (void)rpc;
    (void)err;
    struct raftkv_client *c = ctx;
    const uint64_t now = erma_now_ns();
    for (unsigned i = 0; i < c->nsrv; i++) {
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

/* The first replica of from's group after `from` that has not failed,
 * else the first that failed down_ns ago or more, else the next. */
static unsigned next_server(struct raftkv_client *c, unsigned from, uint64_t now)
{
    const unsigned n = c->cfg.nservers, base = raftkv__group(c, from) * n;
    unsigned best = base + (from - base + 1) % n, best_rank = 0;
    for (unsigned i = 1; i <= n; i++) {
        const unsigned j = base + (from - base + i) % n;
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
    raftkv__op_wait(op, true);
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
        c->leader[raftkv__group(c, i)] = i;
    c->stats.followed++;
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
        unsigned *leader = &c->leader[raftkv__group(c, op->server)];
        if (*leader == op->server)
            *leader = next;
        retry(op, next, now);
        return;
    }
    if (resp->size < 8 || (uint32_t)erma_get_le(resp->data + 4, 4) != resp->size - 8) {
        raftkv__op_complete(op, ERMA_EBADPKT, NULL, 0);
        return;
    }
    const int st = (int32_t)(uint32_t)erma_get_le(resp->data, 4);
    const uint32_t len = (uint32_t)erma_get_le(resp->data + 4, 4);
    const uint8_t *bytes = resp->data + 8;
    if (st == RAFTKV_REDIRECT) {
        c->stats.redirects++;
        const unsigned base = raftkv__group(c, op->server) * c->cfg.nservers;
        for (unsigned i = base; len && i < base + c->cfg.nservers; i++)
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
    if (st == RAFTKV_WRONG_GROUP) { /* the servers split the keys otherwise */
        raftkv__op_complete(op, ERMA_EINVAL, NULL, 0);
        return;
    }
    c->leader[raftkv__group(c, op->server)] = op->server;
    raftkv__op_complete(op, st, st == ERMA_OK ? bytes : NULL, st == ERMA_OK ? len : 0);
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

void raftkv__try(struct op *op, uint64_t now)
{
    struct raftkv_client *c = op->c;
    struct server *s = &c->srv[op->server];
    raftkv__op_wait(op, false);
    if (op->seq)
        erma_put_le(op->req.data + 16, floor_seq(c), 8);
    if (s->sess < 0) {
        s->sess = erma_session_create(c->rpc, s->uri, 0);
        /* a new session's wait starts now, though tries of the one
         * raftkv__drop_silent destroyed are not yet cancelled (the next pass) */
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

/* A replica silent for a try's length while tries wait at it has stalled
 * or died: its session goes, and with it those tries (ERMA_ECANCELLED, in
 * the next pass: on_resp moves them on). */
int raftkv__drop_silent(struct raftkv_client *c, uint64_t now)
{
    const uint64_t t = raftkv__try_ns(c);
    int dropped = 0;
    for (unsigned i = 0; i < c->nsrv; i++) {
        struct server *s = &c->srv[i];
        if (!s->tries || s->sess < 0 || now - s->heard_at < t)
            continue;
        const int sess = s->sess;
        s->sess = -1; /* before: the call may report its end to the sm handler */
        mark_failed(c, i, now);
        c->stats.silent++;
        erma_session_destroy(c->rpc, sess);
        dropped++;
    }
    return dropped;
}
