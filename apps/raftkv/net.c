/* raftkv's raft_io, the network (io_impl.h): peers, their sessions, raft
 * messages sent as erma RPCs and received ones (raftkv.h, "Network"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "erma/clock.h"
#include "erma/log.h"
#include "raftkv/io_impl.h"
#include "raftkv/msg.h"

/* AppendEntries held for their results (raftkv.h, "Network"): at most
 * HOLD_MAX (the oldest is answered empty when another comes), none longer
 * than HOLD_NS (well within the sender's retransmission timeout). */
#define HOLD_MAX 4
#define HOLD_NS 2000000ull

/* Room in an AppendEntries' response for its result: id, address, body. */
#define RESULT_ROOM (8 + 2 + ADDR_MAX + 64)

static void held_answer(struct rkio *k, struct held **at);
static bool answer_with(struct rkio *k, const struct raft_message *m, size_t size);
static void take_result(struct rkio *k, const uint8_t *data, size_t len);

/* ---- peers and sessions ---- */

static struct peer *peer_find(struct rkio *k, raft_id id, const char *addr)
{
    struct peer *peers = k->net.peers;
    for (unsigned i = 0; i < k->net.npeers; i++)
        if (peers[i].id == id && (!addr || strcmp(peers[i].addr, addr) == 0))
            return &peers[i];
    if (!addr || strlen(addr) >= ADDR_MAX || k->net.npeers == RAFTKV_MAX_PEERS)
        return NULL;
    for (unsigned i = 0; i < k->net.npeers; i++) /* an id that moved to another address */
        if (peers[i].id == id && peers[i].sess < 0) {
            snprintf(peers[i].addr, ADDR_MAX, "%s", addr);
            return &peers[i];
        }
    struct peer *p = &peers[k->net.npeers++];
    memset(p, 0, sizeof *p);
    p->id = id;
    p->sess = -1;
    snprintf(p->addr, ADDR_MAX, "%s", addr);
    return p;
}

/* Opens a session to p unless one is there or the last failed recently. */
static void peer_connect(struct rkio *k, struct peer *p, uint64_t now)
{
    if (p->sess >= 0 || now < p->retry_at || !k->rpc)
        return;
    p->connected = false;
    p->sess = erma_session_create(k->rpc, p->addr, 0);
    if (p->sess < 0) {
        p->sess = -1;
        p->retry_at = now + k->cfg.reconnect_ns;
    }
}

void raftkv_io_sm(struct erma_rpc *rpc, int session, enum erma_sm_event ev, int err, void *ctx)
{
    (void)rpc;
    (void)err;
    struct rkio *k = ((struct raft_io *)ctx)->impl;
    for (unsigned i = 0; i < k->net.npeers; i++) {
        struct peer *p = &k->net.peers[i];
        if (p->sess != session)
            continue;
        if (ev == ERMA_SM_CONNECTED) {
            p->connected = true;
        } else {
            p->sess = -1;
            p->connected = false;
            p->retry_at = erma_now_ns() + k->cfg.reconnect_ns;
        }
    }
}

int raftkv_io_connect(struct raft_io *io, raft_id id, const char *address)
{
    struct rkio *k = io->impl;
    struct peer *p = peer_find(k, id, address);
    if (!p)
        return ERMA_EINVAL;
    peer_connect(k, p, erma_now_ns());
    return ERMA_OK;
}

void raftkv__net_reconnect(struct rkio *k, uint64_t now)
{
    while (k->net.held && now - k->net.held->at > HOLD_NS)
        held_answer(k, &k->net.held); /* its result will go as a message of its own */
    for (unsigned i = 0; i < k->net.npeers; i++)
        if (k->net.peers[i].sess < 0 && now >= k->net.peers[i].retry_at)
            peer_connect(k, &k->net.peers[i], now);
}

/* ---- sending ---- */

static void done_push(struct rkio *k, struct send_op *op)
{
    op->next = NULL;
    *k->net.done_tail = op;
    k->net.done_tail = &op->next;
}

static void inflight_unlink(struct send_op *op)
{
    op->prev->next = op->next;
    op->next->prev = op->prev;
}

static void on_sent(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)resp;
    struct send_op *op = tag;
    struct rkio *k = op->k;
    inflight_unlink(op);
    k->net.peers[op->peer].inflight--;
    if (status == ERMA_OK && op->type == RAFT_IO_APPEND_ENTRIES && resp->size > 0)
        take_result(k, resp->data, resp->size);
    erma_msgbuf_free(rpc, &op->msg);
    erma_msgbuf_free(rpc, &op->resp);
    if (!op->cb) {
        free(op);
        return;
    }
    if (status != ERMA_OK) {
        ERMA_DEBUG("raftkv: send to %s: %s", k->net.peers[op->peer].addr,
                   erma_strerror(status));
        k->stats.send_failed++;
    }
    else
        k->stats.send_acked++;
    op->status = status == ERMA_OK ? 0 : RAFT_NOCONNECTION;
    done_push(k, op);
}

/* Sends m to p as an RPC: 0, or the status op fails with. */
static int call(struct rkio *k, struct peer *p, struct send_op *op, const struct raft_message *m,
                size_t size)
{
    if (erma_msgbuf_alloc(k->rpc, size, &op->msg) != ERMA_OK)
        return RAFT_NOMEM;
    const size_t room = m->type == RAFT_IO_APPEND_ENTRIES ? RESULT_ROOM : 8;
    if (erma_msgbuf_alloc(k->rpc, room, &op->resp) != ERMA_OK) {
        erma_msgbuf_free(k->rpc, &op->msg);
        return RAFT_NOMEM;
    }
    raftkv__msg_encode(m, k->id, k->addr, op->msg.data);
    erma_msgbuf_resize(&op->msg, size);
    op->next = k->net.inflight.next;
    op->prev = &k->net.inflight;
    op->next->prev = op;
    k->net.inflight.next = op;
    p->inflight++;
    const int rc = erma_rpc_call(k->rpc, p->sess, (uint8_t)(k->cfg.type_base + m->type),
                                 &op->msg, &op->resp, on_sent, op);
    if (rc != ERMA_OK) {
        inflight_unlink(op);
        p->inflight--;
        erma_msgbuf_free(k->rpc, &op->msg);
        erma_msgbuf_free(k->rpc, &op->resp);
        return RAFT_NOCONNECTION;
    }
    return 0;
}

int raftkv__net_send(struct raft_io *io, struct raft_io_send *req, const struct raft_message *m,
                     raft_io_send_cb cb)
{
    struct rkio *k = io->impl;
    if (k->closed)
        return RAFT_CANCELED;
    const size_t size = raftkv__msg_size(m, k->addr);
    if (!size)
        return RAFT_MALFORMED;
    if (size > ERMA_MAX_MSG_SIZE) {
        snprintf(io->errmsg, sizeof io->errmsg, "message of %zu bytes: more than erma's %u",
                 size, ERMA_MAX_MSG_SIZE);
        return RAFT_TOOBIG;
    }
    struct peer *p = peer_find(k, m->server_id, m->server_address);
    struct send_op *op = calloc(1, sizeof *op);
    if (!op)
        return RAFT_NOMEM;
    op->k = k;
    op->req = req;
    op->cb = cb;
    op->peer = p ? (int)(p - k->net.peers) : -1;
    op->type = m->type;
    k->stats.sent++;
    if (m->type == RAFT_IO_APPEND_ENTRIES_RESULT && answer_with(k, m, size)) {
        done_push(k, op); /* taken: the callback, at the next poll */
        return 0;
    }
    if (!p) {
        op->status = RAFT_NOCONNECTION;
    } else {
        peer_connect(k, p, erma_now_ns());
        if (p->sess < 0)
            op->status = RAFT_NOCONNECTION; /* down: fail now, never wait */
        else if (p->inflight >= k->cfg.max_inflight)
            op->status = RAFT_TOOMANY;
    }
    if (op->status == 0 && (op->status = call(k, p, op, m, size)) == RAFT_NOMEM) {
        free(op);
        return RAFT_NOMEM;
    }
    if (op->status != 0) {
        k->stats.send_failed++;
        done_push(k, op); /* the callback, at the next poll */
    }
    return 0;
}

struct send_op *raftkv__net_take_done(struct rkio *k)
{
    struct send_op *done = k->net.done;
    k->net.done = NULL;
    k->net.done_tail = &k->net.done;
    return done;
}

int raftkv__net_complete(struct rkio *k, struct send_op *done)
{
    int n = 0;
    while (done) {
        struct send_op *op = done;
        done = op->next;
        if (!k->closed)
            op->cb(op->req, op->status);
        free(op);
        n++;
    }
    return n;
}

/* ---- receiving ---- */

static void inmsg_free(struct inmsg *im)
{
    raftkv__msg_release(&im->m);
    free(im);
}

static bool running(const struct rkio *k)
{
    return k->started && !k->closed;
}

/* A received message of the kind type, decoded; NULL (counted) when it is
 * malformed or no memory is left. */
static struct inmsg *received(struct rkio *k, unsigned type, const uint8_t *data, size_t len)
{
    struct inmsg *im = calloc(1, sizeof *im);
    if (!im || !raftkv__msg_decode(type, data, len, &im->m, im->addr)) {
        free(im);
        k->stats.rx_bad++;
        return NULL;
    }
    return im;
}

/* Hands im to raft at the next poll; dropped while raft is not running. */
static void inbox_push(struct rkio *k, struct inmsg *im)
{
    if (!running(k)) {
        inmsg_free(im);
        return;
    }
    im->next = NULL;
    *k->net.inbox_tail = im;
    k->net.inbox_tail = &im->next;
}

static void answer_empty(struct erma_req *req)
{
    struct erma_msgbuf *resp = erma_req_resp_buf(req);
    erma_msgbuf_resize(resp, 0);
    erma_req_respond(req, resp);
}

/* Unlinks *at; returns its request, still to be answered. */
static struct erma_req *unhold(struct rkio *k, struct held **at)
{
    struct held *h = *at;
    struct erma_req *req = h->req;
    *at = h->next;
    if (!*at)
        k->net.held_tail = at;
    k->net.nheld--;
    free(h);
    return req;
}

/* Answers *at (empty) and unlinks it. */
static void held_answer(struct rkio *k, struct held **at)
{
    answer_empty(unhold(k, at));
}

/* Keeps an AppendEntries unanswered for its result; false without memory. */
static bool hold(struct rkio *k, struct erma_req *req, raft_id from)
{
    struct held *h = malloc(sizeof *h);
    if (!h)
        return false;
    if (k->net.nheld == HOLD_MAX)
        held_answer(k, &k->net.held);
    *h = (struct held){NULL, req, from, erma_now_ns()};
    *k->net.held_tail = h;
    k->net.held_tail = &h->next;
    k->net.nheld++;
    return true;
}

/* Sends the AppendEntries result m (size bytes) as the response to the
 * oldest AppendEntries held from its addressee; false when none is held
 * (it goes as a message of its own). */
static bool answer_with(struct rkio *k, const struct raft_message *m, size_t size)
{
    struct held **at = &k->net.held;
    while (*at && (*at)->from != m->server_id)
        at = &(*at)->next;
    struct erma_msgbuf *resp = *at ? erma_req_resp_buf((*at)->req) : NULL;
    if (!resp || resp->max_size < size)
        return false;
    raftkv__msg_encode(m, k->id, k->addr, resp->data);
    erma_msgbuf_resize(resp, size);
    erma_req_respond(unhold(k, at), resp);
    k->stats.results_in_responses++;
    return true;
}

/* An AppendEntries result in the response to one this replica sent. */
static void take_result(struct rkio *k, const uint8_t *data, size_t len)
{
    struct inmsg *im = received(k, RAFT_IO_APPEND_ENTRIES_RESULT, data, len);
    if (im)
        inbox_push(k, im);
}

/* A raft message arrived: handed to raft at the next poll, and answered
 * empty at once; an AppendEntries later, with its result. */
static void on_message(struct erma_req *req, void *ctx)
{
    struct rkio *k = ctx;
    const unsigned type = (unsigned)(erma_req_type(req) - k->cfg.type_base);
    struct inmsg *im = received(k, type, erma_req_data(req), erma_req_size(req));
    if (!im || !running(k) || type != RAFT_IO_APPEND_ENTRIES || !hold(k, req, im->m.server_id))
        answer_empty(req);
    if (im)
        inbox_push(k, im);
}

struct inmsg *raftkv__net_take_inbox(struct rkio *k)
{
    struct inmsg *inbox = k->net.inbox;
    k->net.inbox = NULL;
    k->net.inbox_tail = &k->net.inbox;
    return inbox;
}

int raftkv__net_deliver(struct rkio *k, struct inmsg *inbox)
{
    int n = 0;
    while (inbox) {
        struct inmsg *im = inbox;
        inbox = im->next;
        if (k->closed) {
            inmsg_free(im);
            continue;
        }
        k->stats.received++;
        k->recv(k->io, &im->m); /* raft owns what the message points to now */
        free(im);
        n++;
    }
    return n;
}

/* ---- life ---- */

int raftkv__net_init(struct rkio *k, struct erma_nexus *nx)
{
    k->net.inflight.next = k->net.inflight.prev = &k->net.inflight;
    k->net.done_tail = &k->net.done;
    k->net.inbox_tail = &k->net.inbox;
    k->net.held_tail = &k->net.held;
    for (unsigned t = RAFT_IO_APPEND_ENTRIES; t <= RAFT_IO_TIMEOUT_NOW; t++) {
        const int rc = erma_handler_register(nx, (uint8_t)(k->cfg.type_base + t), on_message,
                                             ERMA_DISPATCH, k);
        if (rc != ERMA_OK)
            return rc;
    }
    return ERMA_OK;
}

bool raftkv__net_pending(const struct rkio *k)
{
    return k->net.done || k->net.inbox;
}

uint64_t raftkv__net_next_timer(const struct rkio *k)
{
    return k->net.held ? k->net.held->at + HOLD_NS + 1 : UINT64_MAX;
}

void raftkv__net_close(struct rkio *k)
{
    for (struct send_op *op = k->net.inflight.next; op != &k->net.inflight; op = op->next) {
        raft_io_send_cb cb = op->cb;
        op->cb = NULL;
        if (cb)
            cb(op->req, RAFT_CANCELED);
    }
    struct send_op *done = raftkv__net_take_done(k);
    while (done) {
        struct send_op *op = done;
        done = op->next;
        op->cb(op->req, op->status);
        free(op);
    }
    for (struct inmsg *im = raftkv__net_take_inbox(k), *next; im; im = next) {
        next = im->next;
        inmsg_free(im);
    }
    while (k->net.held)
        held_answer(k, &k->net.held);
}

void raftkv__net_destroy(struct rkio *k)
{
    while (k->net.held) { /* the rpc is gone, and the requests with it */
        struct held *h = k->net.held;
        k->net.held = h->next;
        free(h);
    }
    /* sends the rpc never completed (it is gone): their buffers went with it */
    while (k->net.inflight.next != &k->net.inflight) {
        struct send_op *op = k->net.inflight.next;
        inflight_unlink(op);
        free(op);
    }
    for (struct send_op *op = raftkv__net_take_done(k), *next; op; op = next) {
        next = op->next;
        free(op);
    }
    for (struct inmsg *im = raftkv__net_take_inbox(k), *next; im; im = next) {
        next = im->next;
        inmsg_free(im);
    }
}
