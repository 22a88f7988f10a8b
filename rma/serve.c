/* rma/serve.c - the target's serving engine ("soft NIC"): requests are
 * queued from RX, served by the event loop in order, and answered without
 * any application code. WRITE and REKEY data is solicited from the
 * initiator and accepted only for a live solicitation of ours. */
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "erma/log.h"
#include "region.h"
#include "serve.h"

struct key {
    const uint8_t *kd;
    uint8_t cipher;
};

int erma__serve_init(struct erma_rma *rma)
{
    const struct erma_rma_cfg *c = &rma->cfg;
    uint32_t buckets = 1;
    while (buckets < 2 * c->solicits)
        buckets *= 2;
    struct rma_target *t = rma->target = calloc(1, sizeof *rma->target);
    if (!t)
        return ERMA_ENOMEM;
    t->queue = malloc((size_t)c->nack_threshold * sizeof *t->queue);
    t->sol = calloc(c->solicits, sizeof *t->sol);
    t->sol_hash = malloc(buckets * sizeof *t->sol_hash);
    if (!t->queue || !t->sol || !t->sol_hash)
        return ERMA_ENOMEM;
    t->sol_mask = buckets - 1;
    for (uint32_t i = 0; i < buckets; i++)
        t->sol_hash[i] = -1;
    t->sol_free = -1;
    for (int32_t i = (int32_t)c->solicits - 1; i >= 0; i--) {
        t->sol[i].next_free = t->sol_free;
        t->sol_free = i;
    }
    t->sol_expiry_ns = UINT64_MAX;
    randombytes_buf(t->token_key, sizeof t->token_key);
    return ERMA_OK;
}

void erma__serve_fini(struct erma_rma *rma)
{
    struct rma_target *t = rma->target;
    if (!t)
        return;
    free(t->queue);
    free(t->sol);
    free(t->sol_hash);
    sodium_memzero(t->token_key, sizeof t->token_key);
    sodium_memzero(t->tails, sizeof t->tails);
    free(t);
    rma->target = NULL;
}

/* ---- answers ---- */

static struct rma_ophdr answer_of(const struct rma_ophdr *req, uint8_t type)
{
    struct rma_ophdr a = *req;
    a.type = type;
    a.status = 0;
    a.flags = 0;
    a.pkt_idx = 0;
    a.pkt_off = 0;
    a.sol = 0;
    a.token = 0;
    return a;
}

/* k NULL: unsealed (only AUTH_FAILED and NO_SUCH_REGION, which have no
 * key; SUPERSEDED is sealed under the retired generation's Kd). */
static void send_status(struct erma_rma *rma, const struct erma_addr *to,
                        const struct rma_ophdr *req, int status, const struct key *k)
{
    struct rma_ophdr a = answer_of(req, status ? RMA_ERROR : RMA_DONE);
    a.status = (uint8_t)-status;
    a.flags = k ? 0 : RMA_FLAG_PLAIN;
    erma__rma_send(rma, to, &a, k ? k->kd : NULL, k ? k->cipher : 0, 1, NULL, 0);
    if (status == ERMA_ENACK)
        rma->stats.nacks_sent++;
    else if (status == ERMA_ESUPERSEDED)
        rma->stats.superseded_sent++;
}

/* The tails held: each only while its region is still registered (the
 * application may deregister it, and free its memory, in a callback of
 * the same pass; the READ then times out and finds no region). */
static void send_tails(struct erma_rma *rma)
{
    struct rma_target *t = rma->target;
    if (!t->ntails)
        return;
    for (uint32_t i = 0; i < t->ntails; i++) {
        struct tail *l = &t->tails[i];
        rma->tx_delay = l->delay;
        if (erma__region_find(rma, l->h.region))
            erma__rma_send(rma, &l->to, &l->h, l->kd, l->cipher, 1, l->src, l->len);
    }
    rma->tx_delay = 0;
    sodium_memzero(t->tails, t->ntails * sizeof *t->tails);
    t->ntails = 0;
}

/* The full packets of a READ's answer; its last, shorter packet waits in
 * the pass's tails (send_tails), so that the answers of a pass leave as
 * one run of equal packets (one UDP_SEGMENT send where the transport
 * offers it) and one of tails, not a run per answer. */
static void send_read(struct erma_rma *rma, const struct erma_addr *to,
                      const struct rma_ophdr *req, const uint8_t *src, const struct key *k)
{
    struct rma_target *t = rma->target;
    struct rma_ophdr a = answer_of(req, RMA_READ_RESP);
    for (uint32_t off = 0; off < req->len; off += rma->pkt_data, a.pkt_idx++) {
        const uint32_t n = req->len - off < rma->pkt_data ? req->len - off : rma->pkt_data;
        a.pkt_off = (uint16_t)off;
        if (n == rma->pkt_data || off == 0) {
            erma__rma_send(rma, to, &a, k->kd, k->cipher, 1, src + off, n);
            continue;
        }
        if (t->ntails == RMA_TAILS)
            send_tails(rma);
        struct tail *l = &t->tails[t->ntails++];
        *l = (struct tail){.to = *to, .h = a, .src = src + off, .len = n, .cipher = k->cipher,
                           .delay = rma->tx_delay};
        memcpy(l->kd, k->kd, sizeof l->kd);
    }
}

/* The answers sent from now on say that what they answer came at rx_ns
 * (erma/rma.h, Busy hosts); answered() ends that. */
static void answering(struct erma_rma *rma, uint64_t rx_ns)
{
    rma->tx_delay = erma_delay_encode(rx_ns && rx_ns < rma->ep->now ? rma->ep->now - rx_ns : 0);
}

static void answered(struct erma_rma *rma)
{
    rma->tx_delay = 0;
}

/* ---- deadlines ---- */

/* False (and counted) when h's deadline has passed, so that its initiator
 * gave up on it, or lies further ahead than any initiator sets one: such a
 * request is dropped unanswered, and so is any replay of it. */
static bool alive(struct erma_rma *rma, const struct rma_ophdr *h)
{
    const uint64_t now = erma__rma_wire_now(rma), skew = rma->cfg.clock_skew_ns;
    if (h->deadline > now + skew + RMA_MAX_TTL_NS || now > h->deadline + skew) {
        rma->stats.expired++;
        return false;
    }
    return true;
}

/* ---- solicitations ---- */

static uint32_t sol_bucket(const struct erma_rma *rma, uint64_t identity, uint64_t init_ctr)
{
    const struct rma_target *t = rma->target;
    const uint64_t h = (identity ^ init_ctr * 0xff51afd7ed558ccdull) * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(h >> 32) & t->sol_mask;
}

static struct solicit *sol_find(struct erma_rma *rma, uint32_t i, uint64_t token)
{
    struct rma_target *t = rma->target;
    if (i >= rma->cfg.solicits || token == 0 || t->sol[i].token != token)
        return NULL;
    return &t->sol[i];
}

/* A live solicitation for the same op (identity, request, source). */
static bool sol_dup(struct erma_rma *rma, const struct erma_addr *src, const struct rma_ophdr *h)
{
    struct rma_target *t = rma->target;
    for (int32_t i = t->sol_hash[sol_bucket(rma, h->identity, h->init_ctr)]; i >= 0;
         i = t->sol[i].next_hash) {
        const struct solicit *s = &t->sol[i];
        if (s->req.identity == h->identity && s->req.init_ctr == h->init_ctr &&
            erma_addr_eq(&s->src, src))
            return true;
    }
    return false;
}

static void sol_free(struct erma_rma *rma, struct solicit *s)
{
    struct rma_target *t = rma->target;
    const int32_t i = (int32_t)(s - t->sol);
    int32_t *p = &t->sol_hash[sol_bucket(rma, s->req.identity, s->req.init_ctr)];
    while (*p != i)
        p = &t->sol[*p].next_hash;
    *p = s->next_hash;
    s->token = 0;
    t->sol_bytes -= s->req.len;
    t->sol_used--;
    s->next_free = t->sol_free;
    t->sol_free = i;
}

/* Unpredictable (SipHash under a secret key) and, over 2^64 values, as
 * good as never repeating: replayed data never meets a solicitation made
 * after it was captured. */
static uint64_t next_token(struct erma_rma *rma)
{
    struct rma_target *t = rma->target;
    uint8_t in[8], out[8];
    uint64_t token;
    do {
        erma_put_le(in, ++t->token_ctr, 8);
        crypto_shorthash(out, in, sizeof in, t->token_key);
        token = erma_get_le(out, 8);
    } while (token == 0);
    return token;
}

/* How long the target waits for the data: until the initiator's deadline
 * less the clocks' possible difference (so that no data is written after
 * the initiator reported TIMEOUT), and at most its own op timeout. */
static uint64_t sol_lifetime(const struct erma_rma *rma, const struct rma_ophdr *req)
{
    const uint64_t now = erma__rma_wire_now(rma), skew = rma->cfg.clock_skew_ns;
    const uint64_t own = rma->cfg.op_timeout_ns ? rma->cfg.op_timeout_ns
                                                : rma->cfg.op_timeout_max_ns;
    if (req->deadline < skew || req->deadline - skew <= now)
        return 0;
    const uint64_t left = req->deadline - skew - now;
    return left < own ? left : own;
}

/* The initiator's own address: the source of a request sent on virtual
 * path k is k ports past it (verify() has checked that it exists). */
static struct erma_addr owner_of(const struct erma_rma *rma, const struct erma_addr *src,
                                 const struct rma_ophdr *h)
{
    struct erma_addr base = *src;
    erma__ep_path_addr(rma->ep, src, -(int)RMA_PATH_OF(h->flags), &base);
    return base;
}

/* Whether a solicitation of len bytes more would take initiator owner past
 * its share of the table or the window (its virtual paths together); the
 * table is searched only once it holds more than one initiator's share. */
static bool over_share(struct erma_rma *rma, const struct erma_addr *owner, uint32_t len)
{
    struct rma_target *t = rma->target;
    const struct erma_rma_cfg *c = &rma->cfg;
    if (t->sol_used < c->solicits_per_source &&
        t->sol_bytes + len <= c->solicit_window_per_source)
        return false;
    uint32_t n = 0;
    uint64_t bytes = len;
    for (uint32_t i = 0; i < c->solicits; i++) {
        const struct solicit *s = &t->sol[i];
        if (s->token && erma_addr_eq(&s->owner, owner)) {
            n++;
            bytes += s->req.len;
        }
    }
    return n >= c->solicits_per_source || bytes > c->solicit_window_per_source;
}

static void solicit(struct erma_rma *rma, const struct erma_addr *to,
                    const struct rma_ophdr *req, const struct key *k)
{
    struct rma_target *t = rma->target;
    const uint64_t life = sol_lifetime(rma, req);
    if (!life) {
        rma->stats.expired++;
        return;
    }
    if (sol_dup(rma, to, req)) {
        rma->stats.duplicates++;
        return;
    }
    if (t->sol_free < 0 || t->sol_bytes + req->len > rma->cfg.solicit_window) {
        send_status(rma, to, req, ERMA_ENACK, k);
        return;
    }
    const struct erma_addr owner = owner_of(rma, to, req);
    if (over_share(rma, &owner, req->len)) {
        rma->stats.nacks_share++;
        send_status(rma, to, req, ERMA_ENACK, k);
        return;
    }
    const int32_t i = t->sol_free;
    struct solicit *s = &t->sol[i];
    t->sol_free = s->next_free;
    s->token = next_token(rma);
    s->op = req->type == RMA_WRITE_REQ ? ERMA_RMA_WRITE : ERMA_RMA_REKEY;
    s->cipher = k->cipher;
    s->src = *to;
    s->owner = owner;
    s->req = *req;
    memcpy(s->kd, k->kd, sizeof s->kd);
    s->got = s->bytes = 0;
    s->deadline_ns = rma->ep->now + life;
    if (s->deadline_ns < t->sol_expiry_ns)
        t->sol_expiry_ns = s->deadline_ns;
    int32_t *head = &t->sol_hash[sol_bucket(rma, req->identity, req->init_ctr)];
    s->next_hash = *head;
    *head = i;
    t->sol_bytes += req->len;
    t->sol_used++;
    struct rma_ophdr a = answer_of(req, RMA_SOLICIT);
    a.sol = (uint32_t)i;
    a.token = s->token;
    erma__rma_send(rma, to, &a, k->kd, k->cipher, 1, NULL, 0);
}

static void sol_expire(struct erma_rma *rma)
{
    struct rma_target *t = rma->target;
    uint64_t next = UINT64_MAX;
    for (uint32_t i = 0; i < rma->cfg.solicits && t->sol_used; i++) {
        struct solicit *s = &t->sol[i];
        if (!s->token)
            continue;
        if (s->deadline_ns <= rma->ep->now) {
            rma->stats.solicit_expired++;
            sol_free(rma, s);
        } else if (s->deadline_ns < next) {
            next = s->deadline_ns;
        }
    }
    t->sol_expiry_ns = next;
}

/* ---- requests ---- */

static bool req_perm_ok(const struct region *r, uint8_t type)
{
    const unsigned need = type == RMA_READ_REQ    ? ERMA_RMA_PERM_READ
                          : type == RMA_WRITE_REQ ? ERMA_RMA_PERM_WRITE
                                                  : ERMA_RMA_PERM_REKEY;
    return (r->perms & need) != 0;
}

/* ERMA_OK with the region and the key when request pkt (len bytes, from
 * src) is authentic; ERMA_ESUPERSEDED with them when it is authentic under
 * a retired key generation (region.h, RMA_OLD_KEYS): only the one its
 * header names is tried, so a forger cannot make us try more; else
 * ERMA_ENOREGION or ERMA_EAUTH. A packet sent on virtual path k comes from
 * k ports past the address its key is bound to. */
static int verify(struct erma_rma *rma, const struct rma_ophdr *h, const uint8_t *pkt,
                  uint32_t len, const struct erma_addr *src, struct region **rp, struct key *k)
{
    struct region *r = erma__region_find(rma, h->region);
    if (!r)
        return ERMA_ENOREGION;
    bool retired;
    const uint8_t *kr = erma__region_key(r, h->key_gen, rma->ep->now, &retired);
    struct erma_addr base;
    const struct erma_addr *a = src; /* path 0: the address the key is bound to */
    if (kr && RMA_PATH_OF(h->flags)) {
        a = &base;
        if (erma__ep_path_addr(rma->ep, src, -(int)RMA_PATH_OF(h->flags), &base) != ERMA_OK)
            kr = NULL;
    }
    if (kr) {
        k->kd = erma__region_kd(rma, r, kr, h->key_gen, h->identity, a);
        k->cipher = r->cipher;
    }
    if (!kr || erma__rma_open(rma, k->kd, k->cipher, 0, h->nonce_ctr, pkt, len, rma->scratch) != 0) {
        rma->stats.auth_failed++;
        return ERMA_EAUTH;
    }
    *rp = r;
    return retired ? ERMA_ESUPERSEDED : ERMA_OK;
}

static void serve_req(struct erma_rma *rma, const struct queued_req *q);

static void serve_one(struct erma_rma *rma, const struct queued_req *q)
{
    if (!alive(rma, &q->h)) /* its initiator has given up: not served */
        return;
    rma->stats.served++;
    answering(rma, q->rx_ns);
    serve_req(rma, q);
    answered(rma);
}

static void serve_req(struct erma_rma *rma, const struct queued_req *q)
{
    const struct rma_ophdr h = q->h;
    struct region *r;
    struct key k;
    const int rc = verify(rma, &h, q->pkt, sizeof q->pkt, &q->src, &r, &k);
    if (rc != ERMA_OK) {
        send_status(rma, &q->src, &h, rc, rc == ERMA_ESUPERSEDED ? &k : NULL);
        return;
    }
    const bool rekey = h.type == RMA_REKEY_REQ;
    if (rekey ? h.len != RMA_REKEY_DATA : h.offset > r->len || h.len > r->len - h.offset)
        send_status(rma, &q->src, &h, rekey ? ERMA_EINVAL : ERMA_EBOUNDS, &k);
    else if (!req_perm_ok(r, h.type))
        send_status(rma, &q->src, &h, ERMA_EPERM, &k);
    else if (h.type == RMA_READ_REQ)
        send_read(rma, &q->src, &h, r->addr + h.offset, &k);
    else {
        rma->stats.fenced += h.type == RMA_WRITE_REQ && (h.flags & RMA_FLAG_FENCE);
        solicit(rma, &q->src, &h, &k);
    }
}

/* Solicited data: only for a live solicitation, from its initiator, for
 * its op, each packet once, before the solicitation's deadline. */
static void data_rx(struct erma_rma *rma, const struct rma_ophdr *h,
                    const struct erma_rx_pkt *pkt)
{
    struct solicit *s = sol_find(rma, h->sol, h->token);
    const uint32_t plen = pkt->len - RMA_OVERHEAD;
    if (!s || rma->ep->now >= s->deadline_ns || !erma_addr_eq(&s->src, &pkt->src) ||
        h->identity != s->req.identity || h->init_ctr != s->req.init_ctr ||
        h->region != s->req.region || h->offset != s->req.offset || h->len != s->req.len ||
        h->key_gen != s->req.key_gen || h->deadline != s->req.deadline || h->pkt_idx >= 32 ||
        (s->got >> h->pkt_idx & 1) || plen == 0 || h->pkt_off + plen > s->req.len ||
        erma__rma_open(rma, s->kd, s->cipher, 0, h->nonce_ctr, pkt->data, pkt->len,
                       rma->scratch)) {
        rma->stats.data_rejected++;
        return;
    }
    const struct key k = {s->kd, s->cipher};
    struct region *r = erma__region_find(rma, s->req.region);
    if (!r) { /* deregistered since */
        send_status(rma, &s->src, &s->req, ERMA_ENOREGION, &k);
        sol_free(rma, s);
        return;
    }
    if (s->op == ERMA_RMA_WRITE)
        memcpy(r->addr + s->req.offset + h->pkt_off, rma->scratch, plen);
    else
        memcpy(s->rekey + h->pkt_off, rma->scratch, plen);
    s->got |= 1u << h->pkt_idx;
    s->bytes += plen;
    if (s->bytes < s->req.len)
        return;
    if (s->op == ERMA_RMA_REKEY)
        erma__region_install(r, s->rekey, erma_get_le(s->rekey + ERMA_RMA_KEY_BYTES, 8),
                             rma->ep->now);
    answering(rma, pkt->rx_ns);
    send_status(rma, &s->src, &s->req, ERMA_OK, &k);
    answered(rma);
    sol_free(rma, s);
}

/* A full queue: an authentic request learns so from a sealed NACK (one
 * under a retired key that its key was superseded, the answer it would
 * get once queued); anything else is dropped, so that no one can draw a
 * NACK for another's op. */
static void refuse(struct erma_rma *rma, const struct rma_ophdr *h, const struct erma_rx_pkt *pkt)
{
    struct rma_target *t = rma->target;
    struct region *r;
    struct key k;
    const int rc = verify(rma, h, pkt->data, pkt->len, &pkt->src, &r, &k);
    if (rc == ERMA_ESUPERSEDED)
        send_status(rma, &pkt->src, h, rc, &k);
    if (rc != ERMA_OK)
        return;
    answering(rma, pkt->rx_ns);
    send_status(rma, &pkt->src, h, ERMA_ENACK, &k);
    answered(rma);
    if (t->q_len < 4 && !t->warned_nack) { /* once: a threshold this small is a mistake */
        t->warned_nack = true;
        ERMA_WARN("rma: NACKed a request with %u queued: NACK threshold %llu bytes (1RMA's "
                  "(TIMEOUT - RTT - DISPATCH_TIMEOUT) x bandwidth unless cfg.nack_bytes is set; "
                  "is dispatch_timeout_ns close to op_timeout_ns?)",
                  t->q_len, (unsigned long long)rma->cfg.nack_bytes);
    }
}

void erma__serve_rx(struct erma_rma *rma, const struct rma_ophdr *h, const struct erma_rx_pkt *pkt)
{
    struct rma_target *t = rma->target;
    if (h->type == RMA_DATA) {
        data_rx(rma, h, pkt);
        return;
    }
    if (pkt->len != RMA_OVERHEAD) { /* requests carry no payload */
        rma->stats.rx_bad++;
        return;
    }
    if (!alive(rma, h))
        return;
    if (t->q_len >= rma->cfg.nack_threshold ||
        (t->q_len && t->q_bytes + erma__rma_work(h) > rma->cfg.nack_bytes)) {
        refuse(rma, h, pkt);
        return;
    }
    struct queued_req *q = &t->queue[(t->q_head + t->q_len) % rma->cfg.nack_threshold];
    q->src = pkt->src;
    q->h = *h;
    q->rx_ns = pkt->rx_ns;
    memcpy(q->pkt, pkt->data, RMA_OVERHEAD);
    if (++t->q_len > rma->stats.max_queue)
        rma->stats.max_queue = t->q_len;
    t->q_bytes += erma__rma_work(h);
    if (t->q_bytes > rma->stats.max_queue_bytes)
        rma->stats.max_queue_bytes = t->q_bytes;
}

int erma__serve_work(struct erma_rma *rma)
{
    struct rma_target *t = rma->target;
    int work = 0;
    for (; t->q_len && work < (int)rma->cfg.serve_batch && rma->ep->now >= t->busy_until_ns;
         work++) {
        if (rma->cfg.serve_ns)
            t->busy_until_ns = rma->ep->now + rma->cfg.serve_ns;
        t->q_bytes -= erma__rma_work(&t->queue[t->q_head].h);
        serve_one(rma, &t->queue[t->q_head]);
        t->q_head = (t->q_head + 1) % rma->cfg.nack_threshold;
        t->q_len--;
    }
    send_tails(rma);
    if (rma->ep->now >= t->sol_expiry_ns)
        sol_expire(rma);
    return work;
}
