/* The RPC layer's packets into the endpoint's TX batch (sealed at the flush
 * for secure sessions), and continuations deferred until after it. */
#include <stdlib.h>

#include "internal.h"

/* Seals p under session s's keys into room: header and data in one
 * segment, the data encrypted, counter and tag after it. At the flush, so
 * that a control packet's caller may fill it after queueing it. */
static void tx_seal(struct session *s, struct erma_tx_pkt *p, uint8_t *room)
{
    const uint8_t *hdr = p->hdr;
    const uint8_t *data = p->data_len ? p->data : hdr + ERMA_HDR_SIZE;
    const uint32_t len = p->data_len ? p->data_len : p->hdr_len - ERMA_HDR_SIZE;
    p->hdr_len = erma__seal(&s->seal, hdr, data, len, room);
    p->hdr = room;
    p->data = NULL;
    p->data_len = 0;
}

/* A batch that leaves LATE_NS or more after its pass's time moves the
 * times its packets carry to the time they leave: a client's send times
 * (its RTT samples), a server's host delays (rpc.h, Busy hosts). */
#define LATE_NS 2000

static void tx_late(struct session *s, struct erma_tx_pkt *p, uint64_t flush_ns, uint64_t late_ns)
{
    uint8_t *hdr = (uint8_t *)p->hdr;
    struct erma_hdr h;
    erma_hdr_decode(hdr, &h);
    if (h.proto != ERMA_PROTO_RPC)
        return;
    if (s->role == SERVER && (h.pkt_type == ERMA_PKT_CR || h.pkt_type == ERMA_PKT_RESP)) {
        erma_hdr_set_delay(hdr, erma_delay_encode(erma_delay_decode(h.host_delay) + late_ns));
    } else if (s->role == CLIENT && (h.pkt_type == ERMA_PKT_REQ || h.pkt_type == ERMA_PKT_RFR)) {
        struct slot *sl = &s->slots[h.req_num % ERMA_SESSION_SLOTS];
        if (erma__slot_busy(s, sl) && sl->req_num == h.req_num) /* it leaves now */
            sl->client.tx_ns[h.pkt_num % ERMA_MAX_CREDITS] = (uint32_t)flush_ns;
        if (late_ns > s->cc.timely.cfg->t_low_ns) /* this host is busy */
            erma__host_busy(s, flush_ns);
    }
}

/* Every RPC packet's prep at the flush: late times moved, then sealed. */
static void tx_prep(void *ctx, struct erma_tx_pkt *p, uint8_t *room, uint64_t pass_ns,
                    uint64_t flush_ns)
{
    struct session *s = ctx;
    if (flush_ns - pass_ns >= LATE_NS)
        tx_late(s, p, flush_ns, flush_ns - pass_ns);
    if (s->seal.on)
        tx_seal(s, p, room);
}

/* On virtual path k a client sends from its port k to the server's own
 * port; the server answers from its port k to the client's port k. Out of
 * line: a session of one path needs no registers for this. */
__attribute__((noinline)) static struct erma_tx_pkt *
tx_next_path(struct erma_rpc *rpc, struct session *s, const struct erma_addr *dst, uint8_t **room)
{
    const uint8_t path = s->tx_path < s->ps.n ? s->tx_path : 0;
    struct erma_addr there;
    if (path && s->role == SERVER && dst == &s->peer &&
        erma__ep_path_addr(rpc->ep, dst, path, &there) == ERMA_OK)
        dst = &there;
    struct erma_tx_pkt *p = erma__ep_tx(rpc->ep, dst, tx_prep, s, room);
    p->path = path;
    return p;
}

static struct erma_tx_pkt *tx_next(struct erma_rpc *rpc, struct session *s,
                                   const struct erma_addr *dst, uint8_t **room)
{
    if (!s || s->ps.n <= 1)
        return erma__ep_tx(rpc->ep, dst, s ? tx_prep : NULL, s, room);
    return tx_next_path(rpc, s, dst, room);
}

uint8_t *erma__tx_ctrl(struct erma_rpc *rpc, struct session *s, const struct erma_addr *dst,
                       uint32_t len)
{
    uint8_t *room;
    struct erma_tx_pkt *p = tx_next(rpc, s, dst, &room);
    p->hdr = room; /* sealed in place at the flush */
    p->hdr_len = len;
    return room;
}

void erma__tx_data(struct erma_rpc *rpc, struct session *s, const struct erma_addr *dst,
                   const uint8_t *hdr, const uint8_t *data, uint32_t data_len)
{
    struct erma_tx_pkt *p = tx_next(rpc, s, dst, NULL);
    if (data == hdr + ERMA_HDR_SIZE) { /* header sits before the data: one segment */
        p->hdr = hdr;
        p->hdr_len = ERMA_HDR_SIZE + data_len;
    } else {
        p->hdr = hdr;
        p->hdr_len = ERMA_HDR_SIZE;
        p->data = data;
        p->data_len = data_len;
    }
}

uint8_t *erma__tx_data_own_hdr(struct erma_rpc *rpc, struct session *s,
                               const struct erma_addr *dst, const uint8_t *data,
                               uint32_t data_len)
{
    uint8_t *room;
    struct erma_tx_pkt *p = tx_next(rpc, s, dst, &room);
    p->hdr = room; /* sealed in place at the flush */
    p->hdr_len = ERMA_HDR_SIZE;
    p->data = data_len ? data : NULL;
    p->data_len = data_len;
    return room;
}

/* ---- continuations ---- */

void erma__complete(struct erma_rpc *rpc, erma_cont_fn cont, void *tag, int status,
                    struct erma_msgbuf *resp)
{
    if (status == ERMA_OK)
        rpc->stats.rpcs_done++;
    else
        rpc->stats.rpcs_failed++;
    if (status != ERMA_OK && resp)
        resp->size = 0;
    if (rpc->done.n == rpc->done.cap) {
        const unsigned cap = rpc->done.cap ? 2 * rpc->done.cap : 64;
        struct completion *d = realloc(rpc->done.list, cap * sizeof *d);
        if (!d) { /* no memory to defer: flush so no packet refers to the buffers */
            erma__ep_tx_flush(rpc->ep);
            cont(rpc, tag, status, resp);
            return;
        }
        rpc->done.list = d;
        rpc->done.cap = cap;
    }
    rpc->done.list[rpc->done.n++] = (struct completion){cont, tag, status, resp};
}

void erma__run_completions(struct erma_rpc *rpc)
{
    if (rpc->done.n == 0)
        return;
    erma__ep_tx_flush(rpc->ep); /* a retransmitted request may still sit in the batch */
    for (unsigned i = 0; i < rpc->done.n; i++) {
        const struct completion c = rpc->done.list[i];
        c.cont(rpc, c.tag, c.status, c.resp);
    }
    rpc->done.n = 0;
}
