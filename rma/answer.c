/* rma/answer.c - answers from targets: matched to the live op they are
 * for, opened, sampled for the round trip and the path, and acted on (READ
 * data, a solicitation answered with the op's data, or the op's end). */
#include <string.h>

#include "portal.h"

static void send_data(struct erma_rma *rma, struct slot *s, uint32_t sol, uint64_t token)
{
    const uint8_t *src = s->local;
    if (s->op == ERMA_RMA_REKEY) { /* the new key and the grace time */
        memcpy(rma->scratch, s->local, ERMA_RMA_KEY_BYTES);
        erma_put_le(rma->scratch + ERMA_RMA_KEY_BYTES, s->grace_ns, 8);
        src = rma->scratch;
    }
    const struct erma_addr *to = &rma->portal->peers[s->peer].addr;
    struct rma_ophdr h = erma__portal_ophdr(rma, s, RMA_DATA);
    h.sol = sol;
    h.token = token;
    for (uint32_t off = 0; off < s->len; off += rma->pkt_data, h.pkt_idx++) {
        const uint32_t n = s->len - off < rma->pkt_data ? s->len - off : rma->pkt_data;
        h.pkt_off = (uint16_t)off;
        erma__rma_send(rma, to, &h, s->rkey.kd, s->rkey.cipher, 0, src + off, n);
    }
    s->state = SLOT_SENT_DATA;
    s->sent_ns = rma->ep->now;
}

/* The outcomes a target cannot seal, having no key: hints that end the op
 * but never cut a window (a NACK, which does, is always sealed). Not
 * ERMA_ESUPERSEDED: the target seals it under the op's own (retired) Kd,
 * so that no one else can tell an initiator its key was replaced. */
static bool plain_ok(int status)
{
    return status == ERMA_EAUTH || status == ERMA_ENOREGION;
}

/* The live op this answer is for, or NULL. */
static struct slot *match(struct erma_rma *rma, const struct rma_ophdr *h,
                          const struct erma_rx_pkt *pkt)
{
    struct rma_portal *p = rma->portal;
    if (h->slot >= rma->cfg.slots)
        return NULL;
    struct slot *s = &p->slots[h->slot];
    if ((s->state != SLOT_ISSUED && s->state != SLOT_SENT_DATA) || s->init_ctr != h->init_ctr ||
        h->identity != rma->cfg.identity || h->region != s->rkey.region ||
        h->key_gen != s->rkey.key_gen || h->offset != s->offset || h->len != s->len ||
        h->deadline != s->wire_deadline || (rma->ep->npaths > 1 && pkt->path != s->path) ||
        !erma_addr_eq(&p->peers[s->peer].addr, &pkt->src))
        return NULL;
    return s;
}

/* Whether answer h (plen payload bytes, status) fits the state of op s. */
static bool answer_ok(const struct slot *s, const struct rma_ophdr *h, uint32_t plen,
                      int status)
{
    bool ok;
    switch (h->type) {
    case RMA_READ_RESP:
        ok = s->op == ERMA_RMA_READ && plen && h->pkt_idx < 32 && !(s->got >> h->pkt_idx & 1) &&
             h->pkt_off + plen <= s->len;
        break;
    case RMA_SOLICIT:
        ok = s->op != ERMA_RMA_READ && s->state == SLOT_ISSUED && !plen;
        break;
    case RMA_DONE:
        ok = s->op != ERMA_RMA_READ && s->state == SLOT_SENT_DATA && !plen;
        break;
    case RMA_ERROR:
        ok = !plen && status < 0 && status > ERMA_ERR_LAST &&
             (!(h->flags & RMA_FLAG_PLAIN) || plain_ok(status));
        break;
    default:
        ok = false;
    }
    return ok && (h->type == RMA_ERROR || !(h->flags & RMA_FLAG_PLAIN));
}

static void read_resp(struct erma_rma *rma, struct slot *s, const struct rma_ophdr *h,
                      uint32_t plen)
{
    memcpy(s->local + h->pkt_off, rma->scratch, plen);
    s->got |= 1u << h->pkt_idx;
    s->bytes += plen;
    if (s->bytes == s->len)
        erma__portal_finish(rma, s, ERMA_OK);
}

/* The time an authentic answer's round trip spent inside the two hosts:
 * the target's, as its answer says, and this loop's own wait to read it. */
static uint64_t host_delays(const struct erma_rma *rma, uint16_t host_delay,
                            const struct erma_rx_pkt *pkt)
{
    const uint64_t own = pkt->rx_ns && pkt->rx_ns < rma->ep->now ? rma->ep->now - pkt->rx_ns : 0;
    return erma_delay_decode(host_delay) + own;
}

void erma__portal_rx(struct erma_rma *rma, const struct rma_ophdr *h, uint16_t host_delay,
                     const struct erma_rx_pkt *pkt)
{
    struct slot *s = match(rma, h, pkt);
    const uint32_t plen = pkt->len - RMA_OVERHEAD;
    const int status = -(int)h->status;
    if (!s || !answer_ok(s, h, plen, status)) {
        rma->stats.rx_unmatched++;
        return;
    }
    if (h->flags & RMA_FLAG_PLAIN) {
        erma__portal_finish(rma, s, status);
        return;
    }
    if (erma__rma_open(rma, s->rkey.kd, s->rkey.cipher, 1, h->nonce_ctr, pkt->data, pkt->len,
                       rma->scratch) != 0) {
        rma->stats.rx_unsealed_bad++;
        return;
    }
    /* a READ's answer packets wait alike: the last one's counts; a WRITE's
     * two round trips add up */
    const uint64_t host = host_delays(rma, host_delay, pkt);
    s->host_ns = h->type == RMA_READ_RESP ? host : s->host_ns + host;
    if (h->type != RMA_READ_RESP || !s->got) {
        const uint64_t rtt = rma->ep->now - s->sent_ns;
        erma__peer_rtt_sample(rma, s->peer, rtt, host);
        if (rma->ep->npaths > 1)
            erma__path_sample(rma, s->peer, s->path, rtt);
    }
    if (h->type == RMA_READ_RESP)
        read_resp(rma, s, h, plen);
    else if (h->type == RMA_SOLICIT && rma->ep->now < s->deadline_ns)
        send_data(rma, s, h->sol, h->token);
    else if (h->type != RMA_SOLICIT)
        erma__portal_finish(rma, s, h->type == RMA_DONE ? ERMA_OK : status);
}
