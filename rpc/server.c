/* The server's request lifecycle: a slot's request packets (in any order
 * within 64), its handler called once all came (in the loop, or at a
 * worker thread), its response packets (the first sent at once, the rest
 * when the client's RFRs ask), errors as REQ_ERROR; the request objects
 * and their accessors (erma_req_*). */
#include <stdlib.h>
#include <string.h>

#include "erma/log.h"
#include "server.h"

/* Response packet j of rq (on its slot), answering a packet that came at
 * rx_ns: each queued copy has its own header, written in the batch's
 * room, whose host delay is its own. */
static void server_send_resp_pkt(struct erma_rpc *rpc, struct session *s, struct erma_req *rq,
                                 uint32_t j, uint64_t rx_ns)
{
    const uint8_t *data;
    uint32_t len;
    erma__msg_pkt_span(rq->resp, j, &data, &len);
    uint8_t *h = erma__tx_data_own_hdr(rpc, s, &s->peer, data, len);
    const uint32_t req_pkts = erma__msg_pkts(rq->size, rpc->pkt_data);
    hdr_put(h, rq->type, rq->resp->size, s->remote_num, ERMA_PKT_RESP, req_pkts - 1 + j,
            rq->slot->req_num);
    erma_hdr_set_delay(h, erma__host_delay(rpc, rx_ns));
}

/* A credit return for request packet i, with the server's arrival bitmap:
 * the packets it has without a gap (num_rx) and the 64 after (rx_bits),
 * so that one CR also stands for earlier ones that were lost. */
static void server_send_cr(struct erma_rpc *rpc, struct session *s, const struct slot *sl,
                           uint32_t i, uint64_t rx_ns)
{
    uint8_t *h = erma__tx_ctrl(rpc, s, &s->peer, ERMA_HDR_SIZE + CR_ACK_LEN);
    hdr_put(h, sl->server.rq->type, 0, s->remote_num, ERMA_PKT_CR, i, sl->req_num);
    erma_hdr_set_delay(h, erma__host_delay(rpc, rx_ns));
    erma_put_le(h + ERMA_HDR_SIZE, sl->server.num_rx, 4);
    erma_put_le(h + ERMA_HDR_SIZE + 4, sl->server.rx_bits, 8);
}

static void server_send_error(struct erma_rpc *rpc, struct session *s, const struct slot *sl)
{
    struct sm_msg m = erma__sess_msg(s);
    m.err = sl->server.rq->err;
    m.req_num = sl->req_num;
    erma__sm_send(rpc, s, &s->peer, REQ_ERROR, s->remote_num, &m);
}

/* The request's bytes are no longer being received (all came, or it is
 * dropped): off the budgets and the partial list. */
static void recv_done(struct erma_rpc *rpc, struct erma_req *rq)
{
    struct session *s = rq->sess;
    erma__budget_give(rpc, &s->recv_held, erma__peer_recv_held(rpc, &s->peer), rq->charged);
    rq->charged = 0;
    erma__partial_remove(rpc, rq);
}

static void free_req_buf(struct erma_rpc *rpc, struct erma_req *rq)
{
    if (rq->charged)
        recv_done(rpc, rq);
    if (rq->owns_req)
        erma_msgbuf_free(rpc, &rq->req_buf);
    rq->owns_req = false;
    rq->data = NULL;
}

/* Forgets rq's request and response (keeps pre_resp for reuse). */
static void req_clear(struct erma_rpc *rpc, struct erma_req *rq)
{
    if (rq->resp == &rq->own_resp) {
        erma__ep_tx_flush(rpc->ep); /* the batch may still point into it */
        erma_msgbuf_free(rpc, &rq->own_resp);
    }
    free_req_buf(rpc, rq);
    rq->resp = NULL;
    rq->resp_pkts = 0;
    rq->responded = false;
    rq->err = ERMA_OK;
}

static void req_put(struct erma_rpc *rpc, struct erma_req *rq)
{
    req_clear(rpc, rq);
    rq->slot = NULL;
    rq->next = rpc->server.free_reqs;
    rpc->server.free_reqs = rq;
}

static struct erma_req *req_get(struct erma_rpc *rpc, struct session *s, struct slot *sl)
{
    struct erma_req *rq = rpc->server.free_reqs;
    if (rq) {
        rpc->server.free_reqs = rq->next;
    } else {
        if (!(rq = calloc(1, sizeof *rq)))
            return NULL;
        rq->rpc = rpc;
        rq->all = rpc->server.all_reqs;
        rpc->server.all_reqs = rq;
    }
    rq->sess = s;
    rq->slot = sl;
    rq->peer = s->peer;
    return rq;
}

void erma__server_slot_free(struct erma_rpc *rpc, struct slot *sl)
{
    struct erma_req *rq = sl->server.rq;
    sl->server.rq = NULL;
    sl->server.num_rx = 0;
    sl->server.rx_bits = 0;
    if (rq && rq->held)
        rq->slot = NULL;
    else if (rq)
        req_put(rpc, rq);
}

static void server_respond(struct erma_rpc *rpc, struct erma_req *rq)
{
    free_req_buf(rpc, rq);
    rq->resp_pkts = erma__msg_pkts(rq->resp->size, rpc->pkt_data);
    server_send_resp_pkt(rpc, rq->sess, rq, 0, rq->rx_ns);
}

/* The handler that held rq has answered: send the response, unless rq is
 * an orphan (its slot took a newer request, or its session went). */
static void let_go(struct erma_rpc *rpc, struct erma_req *rq)
{
    rq->held = false;
    if (rq->slot)
        server_respond(rpc, rq);
    else
        req_put(rpc, rq);
}

int erma_req_respond(struct erma_req *rq, struct erma_msgbuf *resp)
{
    if (!rq || !resp || !resp->mem || resp->size > resp->max_size || rq->responded ||
        resp->pkt_data != rq->rpc->pkt_data)
        return ERMA_EINVAL;
    if (resp != &rq->pre_resp) {
        rq->own_resp = *resp;
        memset(resp, 0, sizeof *resp); /* erma owns the buffer now */
        resp = &rq->own_resp;
    }
    rq->resp = resp;
    rq->responded = true;
    if (rq->in_worker)
        return ERMA_OK; /* the loop sends it (erma__worker_response) */
    if (rq->held)
        let_go(rq->rpc, rq);
    else
        server_respond(rq->rpc, rq); /* answered inside the handler call */
    return ERMA_OK;
}

void erma__worker_response(struct erma_rpc *rpc, struct erma_req *rq)
{
    rq->in_worker = false;
    rpc->server.in_workers--;
    let_go(rpc, rq);
}

/* Keeps the request bytes past the RX buffer's lifetime. */
static int own_request(struct erma_rpc *rpc, struct erma_req *rq)
{
    if (rq->owns_req)
        return ERMA_OK;
    const int rc = erma_msgbuf_alloc(rpc, rq->size, &rq->req_buf);
    if (rc != ERMA_OK)
        return rc;
    memcpy(rq->req_buf.data, rq->data, rq->size);
    rq->data = rq->req_buf.data;
    rq->owns_req = true;
    return ERMA_OK;
}

/* A request of a type with no handler: its client gets ERMA_ENOHANDLER,
 * and the first of each type on the nexus is logged. */
static int no_handler(struct erma_rpc *rpc, uint8_t type)
{
    const uint64_t bit = 1ull << (type % 64);
    _Atomic uint64_t *logged = &rpc->nx->unhandled_logged[type / 64];
    if (!(atomic_load_explicit(logged, memory_order_relaxed) & bit) && /* no write once logged */
        !(atomic_fetch_or(logged, bit) & bit))
        ERMA_WARN("rpc: no handler for request type %u: its clients get ERMA_ENOHANDLER "
                  "(logged once per type)", (unsigned)type);
    return ERMA_ENOHANDLER;
}

static void server_call(struct erma_rpc *rpc, struct session *s, struct slot *sl)
{
    struct erma_req *rq = sl->server.rq;
    struct handler *h = &rpc->nx->handlers[rq->type];
    const erma_handler_fn fn = atomic_load_explicit(&h->fn, memory_order_acquire);
    if (rq->charged)
        recv_done(rpc, rq);
    if (!rq->pre_resp.mem && erma_msgbuf_alloc(rpc, rpc->pkt_data, &rq->pre_resp) != ERMA_OK)
        rq->err = ERMA_ENOMEM;
    else if (!fn)
        rq->err = no_handler(rpc, rq->type);
    else if (h->mode == ERMA_WORKER && own_request(rpc, rq) != ERMA_OK)
        rq->err = ERMA_ENOMEM;
    if (rq->err != ERMA_OK) {
        server_send_error(rpc, s, sl);
        return;
    }
    rq->pre_resp.size = rq->pre_resp.max_size;
    rpc->stats.handler_calls++;
    if (h->mode == ERMA_WORKER) {
        /* The worker writes pre_resp: no packet in the batch may still be
         * reading this slot's last response from it. */
        erma__ep_tx_flush(rpc->ep);
        rq->in_worker = rq->held = true;
        rpc->server.in_workers++;
        erma__nexus_to_worker(rpc->nx, rq, rpc->server.next_worker++);
        return;
    }
    fn(rq, h->ctx);
    if (rq->responded)
        return;
    /* Answered later: the handler holds the request and its slot until then;
     * the bytes move out of the RX buffer (erma_req_data() follows them). */
    if (own_request(rpc, rq) != ERMA_OK) { /* the RX buffer goes: no bytes rather than others' */
        ERMA_WARN("rpc: no memory to keep a deferred request's %u bytes", rq->size);
        rq->data = NULL; /* (its size stays: the response's packet numbers follow it) */
    }
    rq->held = true;
}

/* A buffer for the slot's request of several packets, within the budgets;
 * else it is refused (ERMA_ENOBUFS to its client, nothing kept), or, with
 * no memory, dropped (the client will retransmit). */
static bool recv_buffer(struct erma_rpc *rpc, struct session *s, struct slot *sl)
{
    struct erma_req *rq = sl->server.rq;
    uint64_t *peer = erma__peer_recv_held(rpc, &s->peer);
    if (!erma__budget_take(rpc, &s->recv_held, peer, rq->size)) {
        rpc->stats.recv_refused++;
        rq->err = ERMA_ENOBUFS;
        server_send_error(rpc, s, sl);
        return false;
    }
    if (erma_msgbuf_alloc(rpc, rq->size, &rq->req_buf) != ERMA_OK) {
        erma__budget_give(rpc, &s->recv_held, peer, rq->size);
        return false;
    }
    rq->charged = rq->size;
    rq->owns_req = true;
    rq->data = rq->req_buf.data;
    return true;
}

void erma__partial_expire(struct erma_rpc *rpc, uint64_t now)
{
    for (struct erma_req *rq; (rq = erma__partial_stalled(rpc, now));) {
        rpc->stats.recv_expired++;
        free_req_buf(rpc, rq);
        rq->err = ERMA_ETIMEDOUT;
        server_send_error(rpc, rq->sess, rq->slot);
    }
}

/* A request packet i for the slot's current request. Packets may come in
 * any order within 64 of the first missing one: each is kept and answered
 * with its credit return; the handler runs once all have come. */
static void server_req_pkt(struct erma_rpc *rpc, struct session *s, struct slot *sl,
                           const struct erma_hdr *h, const struct erma_rx_pkt *pkt)
{
    struct server_slot *v = &sl->server;
    struct erma_req *rq = v->rq;
    const uint32_t i = h->pkt_num, req_pkts = erma__msg_pkts(rq->size, rpc->pkt_data);
    if (i >= v->num_rx + 64 || (rpc->cfg.go_back_n && i > v->num_rx)) {
        rpc->stats.rx_reordered++;
        return;
    }
    if (i < v->num_rx || (v->rx_bits & bit(i - v->num_rx))) {
        /* a retransmission: answer again what is idempotent */
        rpc->stats.rx_dup++;
        if (i + 1 < req_pkts)
            server_send_cr(rpc, s, sl, i, pkt->rx_ns);
        else if (rq->err != ERMA_OK)
            server_send_error(rpc, s, sl);
        else if (!rq->held && rq->responded) /* a worker may be writing responded */
            server_send_resp_pkt(rpc, s, rq, 0, pkt->rx_ns);
        return;
    }
    const uint8_t *data = pkt->data + ERMA_HDR_SIZE;
    const uint32_t len = pkt->len - ERMA_HDR_SIZE;
    if (req_pkts == 1) {
        rq->data = data; /* processed in the RX buffer */
    } else {
        if (!rq->owns_req && !recv_buffer(rpc, s, sl))
            return;
        memcpy(rq->req_buf.data + (size_t)i * rpc->pkt_data, data, len);
        erma__partial_touch(rpc, rq);
    }
    if (i != v->num_rx)
        rpc->stats.rx_reordered++;
    v->rx_bits |= bit(i - v->num_rx);
    while (v->rx_bits & 1) {
        v->rx_bits >>= 1;
        v->num_rx++;
    }
    if (i + 1 < req_pkts)
        server_send_cr(rpc, s, sl, i, pkt->rx_ns);
    if (v->num_rx == req_pkts) {
        rq->rx_ns = pkt->rx_ns; /* the response's delay runs from here */
        server_call(rpc, s, sl);
    }
}

/* A new request on sl: the last one was delivered (or given up on). */
static struct erma_req *server_new_req(struct erma_rpc *rpc, struct session *s, struct slot *sl,
                                       const struct erma_hdr *h)
{
    struct erma_req *rq = sl->server.rq;
    if (rq && !rq->held) {
        req_clear(rpc, rq);
    } else {
        erma__server_slot_free(rpc, sl);
        if (!(rq = sl->server.rq = req_get(rpc, s, sl)))
            return NULL; /* dropped; the client will retransmit */
    }
    sl->server.num_rx = 0;
    sl->server.rx_bits = 0;
    sl->req_num = h->req_num;
    rq->type = h->req_type;
    rq->size = h->msg_size;
    return rq;
}

void erma__server_rx(struct erma_rpc *rpc, struct session *s, const struct erma_hdr *h,
                     const struct erma_rx_pkt *pkt)
{
    struct slot *sl = &s->slots[h->req_num % ERMA_SESSION_SLOTS];
    struct erma_req *rq = sl->server.rq;
    if (foreign(s, sl, h->req_num, REQ_AHEAD)) {
        rpc->stats.rx_other_session++;
        return;
    }
    if (h->req_num < sl->req_num || (!rq && h->req_num == sl->req_num)) {
        rpc->stats.rx_stale++;
        return;
    }
    if (h->req_num > sl->req_num) {
        /* any request packet starts it: the client sends the slot's next
         * request only once it had the whole last response */
        if (h->pkt_type != ERMA_PKT_REQ) {
            rpc->stats.rx_stale++;
            return;
        }
        if (!(rq = server_new_req(rpc, s, sl, h)))
            return;
    }
    if (h->msg_size != rq->size && h->pkt_type == ERMA_PKT_REQ) {
        rpc->stats.rx_bad++; /* its size disagrees with the request's first packet */
        return;
    }
    if (rq->err != ERMA_OK) { /* failed, refused or dropped: each packet learns so */
        server_send_error(rpc, s, sl);
        return;
    }
    if (h->pkt_type == ERMA_PKT_REQ) {
        server_req_pkt(rpc, s, sl, h, pkt);
        return;
    }
    /* RFR for response packet j */
    const uint32_t req_pkts = erma__msg_pkts(rq->size, rpc->pkt_data);
    const uint32_t j = h->pkt_num + 1 - req_pkts;
    /* held: a worker may be writing the response, resp_pkts is the last one's */
    if (rq->held || !rq->responded || h->pkt_num < req_pkts || j >= rq->resp_pkts) {
        rpc->stats.rx_stale++;
        return;
    }
    server_send_resp_pkt(rpc, s, rq, j, pkt->rx_ns);
}

/* ---- request handle accessors ---- */

const uint8_t *erma_req_data(const struct erma_req *rq)
{
    return rq->data;
}

size_t erma_req_size(const struct erma_req *rq)
{
    return rq->size;
}

uint8_t erma_req_type(const struct erma_req *rq)
{
    return rq->type;
}

struct erma_rpc *erma_req_rpc(const struct erma_req *rq)
{
    return rq->rpc;
}

int erma_req_peer_uri(const struct erma_req *rq, char *out, size_t len)
{
    return rq ? erma_transport_addr_str(rq->rpc->ep->tr, &rq->peer, out, len) : ERMA_EINVAL;
}

struct erma_msgbuf *erma_req_resp_buf(struct erma_req *rq)
{
    return &rq->pre_resp;
}
