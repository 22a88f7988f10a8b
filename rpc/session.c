/* Sessions and the in-band session-management protocol. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "erma/clock.h"
#include "erma/log.h"
#include "internal.h"

#define SM_PAYLOAD 70
#define SM_LEN (ERMA_HDR_SIZE + SM_PAYLOAD)

#define SM_PROOF_AT 53 /* the proof field's place in the payload (sm_encode) */
_Static_assert(8 + 2 + 2 + 4 + 4 + 1 + 8 + 8 + 16 == SM_PROOF_AT, "proof offset");
_Static_assert(SM_PROOF_AT + ERMA_PROOF_BYTES + 1 == SM_PAYLOAD, "payload length");

static void sm_encode(uint8_t *p, const struct sm_msg *m)
{
    erma_put(&p, m->token, 8);
    erma_put(&p, m->client_session, 2);
    erma_put(&p, m->server_session, 2);
    erma_put(&p, m->credits, 4);
    erma_put(&p, (uint32_t)m->err, 4);
    erma_put(&p, m->server_tid, 1);
    erma_put(&p, m->req_num, 8);
    erma_put(&p, m->cookie, 8);
    erma_put_bytes(&p, m->nonce, sizeof m->nonce); /* the proof follows at SM_PROOF_AT */
    erma_put_bytes(&p, m->proof, sizeof m->proof);
    erma_put(&p, m->flags, 1);
}

void erma_sm_send(struct erma_rpc *rpc, struct session *s, const struct erma_addr *dst,
                  enum sm_type type, uint16_t dest_session, const struct sm_msg *m)
{
    uint8_t *p = erma_tx_ctrl(rpc, s, dst, SM_LEN);
    const struct erma_hdr h = {.req_type = (uint8_t)type, .dest_session = dest_session,
                               .proto = ERMA_PROTO_SM};
    erma_hdr_encode(&h, p);
    sm_encode(p + ERMA_HDR_SIZE, m);
}

static void sm_decode(const uint8_t *p, struct sm_msg *m)
{
    p += ERMA_HDR_SIZE;
    m->token = erma_get(&p, 8);
    m->client_session = (uint16_t)erma_get(&p, 2);
    m->server_session = (uint16_t)erma_get(&p, 2);
    m->credits = (uint32_t)erma_get(&p, 4);
    m->err = (int32_t)(uint32_t)erma_get(&p, 4);
    m->server_tid = (uint8_t)erma_get(&p, 1);
    m->req_num = erma_get(&p, 8);
    m->cookie = erma_get(&p, 8);
    erma_get_bytes(&p, m->nonce, sizeof m->nonce);
    erma_get_bytes(&p, m->proof, sizeof m->proof);
    m->flags = (uint8_t)erma_get(&p, 1);
}

/* The virtual paths both ends of a connect have: the fewer of the two. */
static unsigned common_paths(const struct erma_rpc *rpc, const struct sm_msg *m)
{
    return SM_PATHS_OF(m->flags) < rpc->ep->npaths ? SM_PATHS_OF(m->flags) : rpc->ep->npaths;
}

/* ---- secure handshakes: every field of a connect request or answer is
 * covered by its proof (the payload with the proof field zeroed) ---- */

static void unproven(const struct sm_msg *m, uint8_t out[SM_PAYLOAD])
{
    sm_encode(out, m);
    memset(out + SM_PROOF_AT, 0, ERMA_PROOF_BYTES);
}

static void prove(const struct erma_rpc *rpc, const char *label, struct sm_msg *m)
{
    uint8_t b[SM_PAYLOAD];
    unproven(m, b);
    erma_seal_proof(rpc->nx->psk, label, b, sizeof b, m->proof);
}

static bool proven(const struct erma_rpc *rpc, const char *label, const struct sm_msg *m)
{
    uint8_t b[SM_PAYLOAD];
    unproven(m, b);
    return erma_seal_proof_ok(rpc->nx->psk, label, b, sizeof b, m->proof);
}

/* The session's keys from the accept message m, client or server side. */
static int seal_from(struct erma_rpc *rpc, struct session *s, const struct sm_msg *m, bool client)
{
    uint8_t b[SM_PAYLOAD];
    unproven(m, b);
    return erma_seal_start(&s->seal, rpc->nx->psk, b, sizeof b, client, (m->flags & SM_AES) != 0);
}

struct sm_msg erma_sess_msg(const struct session *s)
{
    const bool client = s->role == CLIENT;
    return (struct sm_msg){.token = s->token,
                           .client_session = client ? s->num : s->remote_num,
                           .server_session = client ? s->remote_num : s->num,
                           .credits = s->credits_max,
                           .server_tid = s->remote_tid};
}

static void send_connect(struct erma_rpc *rpc, struct session *s, uint64_t now)
{
    struct sm_msg m = erma_sess_msg(s);
    m.cookie = s->cookie;
    m.req_num = rpc->cfg.keepalive_ns; /* how long the server may hear nothing */
    m.flags = SM_PATHS(rpc->ep->npaths);
    if (rpc->nx->secure) {
        m.flags |= SM_SECURE | (erma_seal_aes_available() ? SM_AES : 0);
        memcpy(m.nonce, s->nonce, sizeof m.nonce);
        if (m.cookie)
            prove(rpc, SEAL_CONNECT, &m);
    }
    s->last_tx_sm_ns = now;
    erma_sm_send(rpc, NULL, &s->peer, CONNECT_REQ, NO_SESSION, &m);
}

static void sm_notify(struct erma_rpc *rpc, struct session *s, enum erma_sm_event ev, int err)
{
    if (rpc->cfg.sm_handler)
        rpc->cfg.sm_handler(rpc, s->num, ev, err, rpc->cfg.sm_ctx);
}

struct session *erma_session_get(struct erma_rpc *rpc, uint16_t num)
{
    if (num >= rpc->nsessions)
        return NULL;
    struct session *s = rpc->sessions[num];
    return s && s->state != FREE ? s : NULL;
}

uint32_t erma_rpc_free_sessions(const struct erma_rpc *rpc)
{
    return (rpc->ep->tr->rx_ring - rpc->ring_credits) / rpc->cfg.credits;
}

static bool ring_has_room(const struct erma_rpc *rpc, uint32_t credits)
{
    return (uint64_t)rpc->ring_credits + credits <= rpc->ep->tr->rx_ring;
}

static void set_credits(struct erma_rpc *rpc, struct session *s, uint32_t credits)
{
    rpc->ring_credits = rpc->ring_credits - s->credits_max + credits;
    s->credits_max = s->credits = credits;
}

/* ---- server sessions by token ---- */

static uint32_t token_slot(const struct erma_rpc *rpc, uint64_t token)
{
    uint64_t x = token;
    uint32_t i = (uint32_t)erma_splitmix64(&x) & (rpc->token_cap - 1);
    while (rpc->by_token[i] && rpc->by_token[i]->token != token)
        i = (i + 1) & (rpc->token_cap - 1);
    return i;
}

static int token_insert(struct erma_rpc *rpc, struct session *s)
{
    if (2 * (rpc->token_len + 1) > rpc->token_cap) {
        const uint32_t old_cap = rpc->token_cap, cap = old_cap ? 2 * old_cap : 64;
        struct session **old = rpc->by_token, **t = calloc(cap, sizeof *t);
        if (!t)
            return ERMA_ENOMEM;
        rpc->by_token = t;
        rpc->token_cap = cap;
        for (uint32_t i = 0; i < old_cap; i++)
            if (old[i])
                t[token_slot(rpc, old[i]->token)] = old[i];
        free(old);
    }
    rpc->by_token[token_slot(rpc, s->token)] = s;
    rpc->token_len++;
    return ERMA_OK;
}

static void token_remove(struct erma_rpc *rpc, struct session *s)
{
    if (!rpc->token_cap)
        return;
    uint32_t i = token_slot(rpc, s->token);
    if (rpc->by_token[i] != s)
        return;
    rpc->by_token[i] = NULL;
    rpc->token_len--;
    for (i = (i + 1) & (rpc->token_cap - 1); rpc->by_token[i];
         i = (i + 1) & (rpc->token_cap - 1)) {
        struct session *q = rpc->by_token[i];
        rpc->by_token[i] = NULL;
        rpc->by_token[token_slot(rpc, q->token)] = q;
    }
}

/* ---- server sessions per peer address ---- */

static uint32_t peer_slot(const struct erma_rpc *rpc, const struct erma_addr *a)
{
    uint64_t x = 0;
    for (uint8_t i = 0; i < a->len; i++)
        x = x * 131 + a->raw[i];
    uint32_t i = (uint32_t)erma_splitmix64(&x) & (rpc->peer_cap - 1);
    while (rpc->by_peer[i].n && !erma_addr_eq(&rpc->by_peer[i].addr, a))
        i = (i + 1) & (rpc->peer_cap - 1);
    return i;
}

static uint32_t peer_sessions(const struct erma_rpc *rpc, const struct erma_addr *a)
{
    return rpc->peer_cap ? rpc->by_peer[peer_slot(rpc, a)].n : 0;
}

static int peer_add(struct erma_rpc *rpc, const struct erma_addr *a)
{
    if (2 * (rpc->peer_len + 1) > rpc->peer_cap) {
        const uint32_t old_cap = rpc->peer_cap, cap = old_cap ? 2 * old_cap : 64;
        struct peer_count *old = rpc->by_peer, *t = calloc(cap, sizeof *t);
        if (!t)
            return ERMA_ENOMEM;
        rpc->by_peer = t;
        rpc->peer_cap = cap;
        for (uint32_t i = 0; i < old_cap; i++)
            if (old[i].n)
                t[peer_slot(rpc, &old[i].addr)] = old[i];
        free(old);
    }
    struct peer_count *e = &rpc->by_peer[peer_slot(rpc, a)];
    if (e->n++ == 0) {
        e->addr = *a;
        e->recv_held = 0;
        rpc->peer_len++;
    }
    return ERMA_OK;
}

uint64_t *erma_peer_recv_held(struct erma_rpc *rpc, const struct erma_addr *a)
{
    struct peer_count *e = rpc->peer_cap ? &rpc->by_peer[peer_slot(rpc, a)] : NULL;
    return e && e->n ? &e->recv_held : NULL;
}

static void peer_remove(struct erma_rpc *rpc, const struct erma_addr *a)
{
    uint32_t i = rpc->peer_cap ? peer_slot(rpc, a) : 0;
    if (!rpc->peer_cap || !rpc->by_peer[i].n || --rpc->by_peer[i].n)
        return;
    rpc->peer_len--;
    for (i = (i + 1) & (rpc->peer_cap - 1); rpc->by_peer[i].n; i = (i + 1) & (rpc->peer_cap - 1)) {
        const struct peer_count q = rpc->by_peer[i];
        rpc->by_peer[i].n = 0;
        rpc->by_peer[peer_slot(rpc, &q.addr)] = q;
    }
}

/* ---- connect cookies ---- */

#define COOKIE_EPOCH_SHIFT 30 /* a cookie is good for 1 to 2 epochs of 1.07 s */

/* The cookie for a connect request from peer with token in an epoch: no
 * state is kept before a client echoes it, which proves it receives at
 * its source address. Never 0 (0 means none). */
static uint64_t cookie_for(const struct erma_rpc *rpc, const struct erma_addr *peer,
                           uint64_t token, uint64_t epoch)
{
    uint8_t in[ERMA_ADDR_MAX + 16], out[crypto_shorthash_BYTES];
    memcpy(in, peer->raw, peer->len);
    erma_put_le(in + peer->len, token, 8);
    erma_put_le(in + peer->len + 8, epoch, 8);
    crypto_shorthash(out, in, peer->len + 16u, rpc->cookie_key);
    return erma_get_le(out, 8) | 1;
}

static bool cookie_ok(const struct erma_rpc *rpc, const struct erma_addr *peer,
                      const struct sm_msg *m)
{
    const uint64_t epoch = rpc->ep->now >> COOKIE_EPOCH_SHIFT;
    return m->cookie && (m->cookie == cookie_for(rpc, peer, m->token, epoch) ||
                         m->cookie == cookie_for(rpc, peer, m->token, epoch - 1));
}

/* A FREE session number: a reused one, else a new one. */
static int session_num(struct erma_rpc *rpc)
{
    if (rpc->nfree_nums)
        return rpc->free_nums[--rpc->nfree_nums];
    if (rpc->nsessions >= MAX_SESSIONS)
        return -1;
    if (rpc->nsessions == rpc->sessions_cap) {
        const uint32_t cap = rpc->sessions_cap ? 2 * rpc->sessions_cap : 64;
        struct session **a = realloc(rpc->sessions, cap * sizeof *a);
        if (!a)
            return -1;
        rpc->sessions = a;
        uint16_t *f = realloc(rpc->free_nums, cap * sizeof *f);
        if (!f)
            return -1;
        rpc->free_nums = f;
        struct session **b = realloc(rpc->busy, cap * sizeof *b);
        if (!b)
            return -1;
        rpc->busy = b;
        rpc->sessions_cap = cap;
    }
    rpc->sessions[rpc->nsessions] = NULL;
    return (int)rpc->nsessions++;
}

static struct session *session_alloc(struct erma_rpc *rpc, enum sess_role role)
{
    const int i = session_num(rpc);
    if (i < 0)
        return NULL;
    struct session *s = rpc->sessions[i];
    if (!s && !(s = rpc->sessions[i] = malloc(sizeof *s))) {
        rpc->free_nums[rpc->nfree_nums++] = (uint16_t)i;
        return NULL;
    }
    memset(s, 0, sizeof *s);
    s->num = (uint16_t)i;
    s->role = (uint8_t)role;
    s->start_ns = s->last_rx_ns = s->last_tx_sm_ns = rpc->ep->now;
    if (role == CLIENT)
        erma_timely_init(&s->timely, &rpc->timely_cfg, s->start_ns);
    s->dupthresh = 3; /* TCP's, until reordering shows it is too few */
    erma_paths_init(&s->ps, 1); /* until the connect handshake says more */
    rpc->active_sessions++;
    return s;
}

/* Where a session's request numbers start: from its token, so both ends
 * know it, and 2^39 starts apart, so that a late packet of an earlier
 * session with the same number falls outside the new one's numbers. */
static uint64_t req_base(uint64_t token)
{
    uint64_t x = token;
    return ((erma_splitmix64(&x) & ((UINT64_C(1) << 39) - 1)) + 1) * ERMA_SESSION_SLOTS;
}

/* Names s by token. Slot k's request numbers are base + k + 8n: the
 * first request is n = 1, so base + k stands for "none yet". */
static void session_token(struct session *s, uint64_t token)
{
    s->token = token;
    s->base = req_base(token);
    for (unsigned k = 0; k < ERMA_SESSION_SLOTS; k++)
        s->slots[k].req_num = s->base + k;
}

void erma_session_fail(struct erma_rpc *rpc, struct session *s, int status)
{
    if (s->role == CLIENT)
        erma_fail_client_slots(rpc, s, status);
}

void erma_session_lost(struct erma_rpc *rpc, struct session *s)
{
    erma_session_fail(rpc, s, ERMA_EPEERFAILED);
    erma_session_release(rpc, s);
    sm_notify(rpc, s, ERMA_SM_PEER_FAILED, ERMA_EPEERFAILED);
}

void erma_session_release(struct erma_rpc *rpc, struct session *s)
{
    erma_ep_tx_flush(rpc->ep); /* nothing in the batch may point at this session */
    if (s->role == SERVER) {
        for (unsigned k = 0; k < ERMA_SESSION_SLOTS; k++)
            erma_server_slot_free(rpc, &s->slots[k]);
        token_remove(rpc, s);
        if (s->peer_counted)
            peer_remove(rpc, &s->peer);
    }
    rpc->active_sessions--;
    set_credits(rpc, s, 0);
    erma_seal_end(&s->seal);
    s->state = FREE;
    rpc->free_nums[rpc->nfree_nums++] = s->num;
}

int erma_session_create(struct erma_rpc *rpc, const char *remote_uri, uint8_t remote_tid)
{
    return erma_session_create_credits(rpc, remote_uri, remote_tid, 0);
}

int erma_session_create_credits(struct erma_rpc *rpc, const char *remote_uri,
                                uint8_t remote_tid, uint32_t credits)
{
    if (!rpc || !remote_uri || remote_tid >= ERMA_MAX_THREADS || credits > rpc->cfg.credits)
        return ERMA_EINVAL;
    char uri[512];
    struct erma_addr peer;
    int rc = erma_uri_for_thread(remote_uri, remote_tid, uri, sizeof uri);
    if (rc == ERMA_OK)
        rc = erma_transport_resolve(rpc->ep->tr, uri, &peer);
    if (rc != ERMA_OK)
        return rc;
    if (!credits)
        credits = rpc->cfg.credits;
    if (!ring_has_room(rpc, credits))
        return ERMA_ENOSLOTS;
    erma_ep_clock(rpc->ep); /* called from outside the loop */
    struct session *s = session_alloc(rpc, CLIENT);
    if (!s)
        return ERMA_ENOMEM;
    s->state = CONNECTING;
    s->peer = peer;
    s->remote_tid = remote_tid;
    s->remote_num = NO_SESSION;
    set_credits(rpc, s, credits);
    session_token(s, erma_rand_u64(&rpc->rng) | 1);
    if (rpc->nx->secure)
        randombytes_buf(s->nonce, sizeof s->nonce);
    send_connect(rpc, s, rpc->ep->now);
    erma_ep_tx_flush(rpc->ep);
    return s->num;
}

int erma_session_destroy(struct erma_rpc *rpc, int num)
{
    struct session *s = rpc && num >= 0 && num < (int)MAX_SESSIONS
                            ? erma_session_get(rpc, (uint16_t)num) : NULL;
    if (!s || s->role != CLIENT || s->state == DISCONNECTING)
        return ERMA_ENOENT;
    erma_fail_client_slots(rpc, s, ERMA_ECANCELLED);
    if (s->state == CONNECTING) {
        erma_session_release(rpc, s);
        sm_notify(rpc, s, ERMA_SM_DISCONNECTED, ERMA_OK);
        return ERMA_OK;
    }
    s->state = DISCONNECTING;
    s->start_ns = s->last_tx_sm_ns = erma_ep_clock(rpc->ep);
    s->sm_retries = 0;
    const struct sm_msg m = erma_sess_msg(s);
    erma_sm_send(rpc, s, &s->peer, DISCONNECT_REQ, s->remote_num, &m);
    return ERMA_OK;
}

bool erma_session_connected(const struct erma_rpc *rpc, int num)
{
    const struct session *s = rpc && num >= 0 && (uint32_t)num < rpc->nsessions
                                  ? rpc->sessions[num] : NULL;
    return s && s->state == CONNECTED;
}

/* ---- the server side of session management ---- */

static struct session *find_server_session(struct erma_rpc *rpc, const struct erma_addr *peer,
                                           uint64_t token)
{
    struct session *s = rpc->token_cap ? rpc->by_token[token_slot(rpc, token)] : NULL;
    return s && erma_addr_eq(&s->peer, peer) ? s : NULL;
}

/* Why a connect request with a good cookie gets no session (ERMA_OK: it may). */
static int admit(struct erma_rpc *rpc, const struct erma_addr *peer, const struct sm_msg *m,
                 uint32_t grant)
{
    if (m->server_tid != rpc->ep->tid || grant == 0)
        return ERMA_ENOENT;
    if (!ring_has_room(rpc, grant) || peer_sessions(rpc, peer) >= rpc->cfg.max_sessions_per_peer ||
        (rpc->token_cap && rpc->by_token[token_slot(rpc, m->token)]))
        return ERMA_EREFUSED; /* no room, too many from this peer, or a token clash */
    return ERMA_OK;
}

static struct session *server_session_new(struct erma_rpc *rpc, const struct erma_addr *peer,
                                          const struct sm_msg *m, uint32_t grant)
{
    struct session *s = session_alloc(rpc, SERVER);
    if (!s)
        return NULL;
    s->state = CONNECTED;
    s->peer = *peer;
    erma_paths_init(&s->ps, common_paths(rpc, m));
    session_token(s, m->token);
    s->remote_num = m->client_session;
    /* The client pings every keepalive (its connect request says how often):
     * wait three of them, but at least failure_ns, at most 60 s. */
    s->idle_ns = m->req_num < 20000000000ull ? 3 * m->req_num : 60000000000ull;
    s->idle_ns = s->idle_ns > rpc->cfg.failure_ns ? s->idle_ns : rpc->cfg.failure_ns;
    set_credits(rpc, s, grant);
    s->peer_counted = peer_add(rpc, peer) == ERMA_OK;
    if (!s->peer_counted || token_insert(rpc, s) != ERMA_OK) {
        erma_session_release(rpc, s);
        return NULL;
    }
    return s;
}

/* A secure server session's keys and the proof of its accept message m. */
static int server_seal(struct erma_rpc *rpc, struct session *s, struct sm_msg *m)
{
    const bool aes = (m->flags & SM_AES) && erma_seal_aes_available();
    m->req_num = rpc->serial++; /* never repeats: a replayed connect gets other keys */
    m->server_session = s->num;
    m->credits = s->credits_max;
    m->err = ERMA_OK;
    m->flags = SM_SECURE | (aes ? SM_AES : 0) | SM_PATHS(s->ps.n);
    prove(rpc, SEAL_ACCEPT, m);
    s->accept = *m;
    return seal_from(rpc, s, m, false);
}

/* A new session for a connect request with a good cookie (and, secure, a
 * good proof); m->err says why not. */
static struct session *accept_session(struct erma_rpc *rpc, const struct erma_addr *peer,
                                      struct sm_msg *m)
{
    const uint32_t grant = m->credits < rpc->cfg.credits ? m->credits : rpc->cfg.credits;
    struct session *s = NULL;
    m->err = admit(rpc, peer, m, grant);
    if (m->err == ERMA_OK && !(s = server_session_new(rpc, peer, m, grant)))
        m->err = ERMA_EREFUSED;
    if (s && rpc->nx->secure && server_seal(rpc, s, m) != ERMA_OK) {
        erma_session_release(rpc, s);
        s = NULL;
        m->err = ERMA_ENOMEM;
    }
    if (m->err == ERMA_EREFUSED)
        rpc->stats.sessions_refused++;
    return s;
}

static void on_connect_req(struct erma_rpc *rpc, const struct erma_rx_pkt *pkt,
                           struct sm_msg *m)
{
    const bool secure = rpc->nx->secure;
    if (secure != ((m->flags & SM_SECURE) != 0)) { /* one end has the key, the other not */
        rpc->stats.rx_auth_failed++;
        m->err = ERMA_EAUTH;
        erma_sm_send(rpc, NULL, &pkt->src, CONNECT_RESP, m->client_session, m);
        return;
    }
    struct session *s = find_server_session(rpc, &pkt->src, m->token);
    if (s && secure) { /* a retry: the same proven answer */
        erma_sm_send(rpc, NULL, &pkt->src, CONNECT_RESP, m->client_session, &s->accept);
        return;
    }
    if (!s && !cookie_ok(rpc, &pkt->src, m)) { /* keep nothing until it proves its address */
        if (m->cookie)
            rpc->stats.bad_cookies++;
        m->cookie = cookie_for(rpc, &pkt->src, m->token, rpc->ep->now >> COOKIE_EPOCH_SHIFT);
        rpc->stats.cookies_sent++;
        erma_sm_send(rpc, NULL, &pkt->src, COOKIE, m->client_session, m);
        return;
    }
    if (!s && secure && !proven(rpc, SEAL_CONNECT, m)) {
        rpc->stats.rx_auth_failed++; /* not a holder of the key: no answer */
        return;
    }
    if (!s)
        s = accept_session(rpc, &pkt->src, m);
    if (s && secure)
        m = &s->accept;
    else if (s)
        *m = (struct sm_msg){.token = m->token, .client_session = m->client_session,
                             .server_session = s->num, .credits = s->credits_max,
                             .flags = SM_PATHS(s->ps.n)};
    else if (secure)
        prove(rpc, SEAL_REFUSE, m); /* to a proven client: it may take the refusal as final */
    erma_sm_send(rpc, NULL, &pkt->src, CONNECT_RESP, m->client_session, m);
}

static void on_server_msg(struct erma_rpc *rpc, enum sm_type type, const struct erma_hdr *h,
                          const struct erma_rx_pkt *pkt, const struct sm_msg *m)
{
    struct session *s = erma_session_get(rpc, h->dest_session);
    const bool ours = s && s->role == SERVER && s->token == m->token &&
                      erma_session_path(rpc, s, &pkt->src) >= 0;
    if (ours)
        s->last_rx_ns = rpc->ep->now;
    if (type == DISCONNECT_REQ) {
        erma_sm_send(rpc, ours ? s : NULL, &pkt->src, DISCONNECT_RESP, m->client_session, m);
        if (ours)
            erma_session_release(rpc, s); /* after the answer is sealed: it flushes */
    } else { /* PING */
        erma_sm_send(rpc, ours ? s : NULL, &pkt->src, ours ? PONG : RESET, m->client_session, m);
    }
}

/* ---- the client side ---- */

static bool session_msg(uint8_t type)
{
    return type == DISCONNECT_REQ || type == DISCONNECT_RESP || type == PING || type == PONG ||
           type == REQ_ERROR;
}

/* Whether a secure CONNECT_RESP is the server's, for our nonce: an accept
 * (whose keys it starts) or a refusal under the key's proof. Anything else
 * (a refusal from a server without the key, or a forgery) is only a hint,
 * reported if the connect times out. */
static bool client_proven(struct erma_rpc *rpc, struct session *s, const struct sm_msg *m)
{
    const bool accept = m->err == ERMA_OK;
    const bool usable = !(m->flags & SM_AES) || erma_seal_aes_available();
    if (sodium_memcmp(m->nonce, s->nonce, sizeof s->nonce) == 0 && (m->flags & SM_SECURE) &&
        usable && proven(rpc, accept ? SEAL_ACCEPT : SEAL_REFUSE, m))
        return !accept || seal_from(rpc, s, m, true) == ERMA_OK;
    if (!accept)
        s->hint = m->err;
    rpc->stats.rx_auth_failed++;
    return false;
}

static void on_connect_resp(struct erma_rpc *rpc, struct session *s, struct sm_msg *m)
{
    if (rpc->nx->secure && !client_proven(rpc, s, m))
        return; /* wait for the real answer */
    s->last_rx_ns = rpc->ep->now;
    if (m->err == ERMA_OK && (m->credits == 0 || m->credits > s->credits_max))
        m->err = ERMA_EREFUSED; /* a grant we did not ask for */
    if (m->err != ERMA_OK) {
        erma_fail_client_slots(rpc, s, m->err);
        erma_session_release(rpc, s);
        sm_notify(rpc, s, ERMA_SM_CONNECT_FAILED, m->err);
        return;
    }
    s->remote_num = m->server_session;
    erma_paths_init(&s->ps, common_paths(rpc, m)); /* each path's probe first */
    set_credits(rpc, s, m->credits);
    s->state = CONNECTED;
    sm_notify(rpc, s, ERMA_SM_CONNECTED, ERMA_OK);
    erma_client_kick(rpc, s);
}

static void on_client_msg(struct erma_rpc *rpc, enum sm_type type, const struct erma_hdr *h,
                          const struct erma_rx_pkt *pkt, struct sm_msg *m)
{
    struct session *s = erma_session_get(rpc, h->dest_session);
    if (!s || s->role != CLIENT || s->token != m->token ||
        erma_session_path(rpc, s, &pkt->src) < 0) {
        rpc->stats.rx_no_session++;
        return;
    }
    /* secure: only sealed messages (opened by erma_sm_rx) are surely the server's */
    if (!rpc->nx->secure || session_msg((uint8_t)type))
        s->last_rx_ns = rpc->ep->now;
    if (type == CONNECT_RESP && s->state == CONNECTING) {
        on_connect_resp(rpc, s, m);
    } else if (type == COOKIE && s->state == CONNECTING) {
        s->cookie = m->cookie; /* prove our address: ask again with it, now */
        if (rpc->nx->secure && !s->hint)
            s->hint = ERMA_EAUTH; /* a live server; if it never accepts, another key */
        send_connect(rpc, s, rpc->ep->now);
    } else if (type == DISCONNECT_RESP && s->state == DISCONNECTING) {
        erma_session_release(rpc, s);
        sm_notify(rpc, s, ERMA_SM_DISCONNECTED, ERMA_OK);
    } else if (type == REQ_ERROR && s->state == CONNECTED) {
        erma_client_req_error(rpc, s, m->req_num, m->err);
    } else if (type == RESET && s->state == CONNECTED && !rpc->nx->secure) {
        /* (secure: an unsealed RESET could be anyone's; silence fails the session) */
        ERMA_INFO("rpc: session %u reset by its server (restarted?)", s->num);
        erma_session_lost(rpc, s);
    }
}


void erma_sm_rx(struct erma_rpc *rpc, const struct erma_hdr *h, const struct erma_rx_pkt *pkt)
{
    uint32_t len = pkt->len;
    if (rpc->nx->secure && session_msg(h->req_type)) { /* sealed under the session's keys */
        struct session *s = erma_session_get(rpc, h->dest_session);
        if (!s || !s->seal.on || erma_session_path(rpc, s, &pkt->src) < 0) {
            rpc->stats.rx_no_session++;
            return;
        }
        if (!erma_rx_open(rpc, s, pkt->data, &len))
            return;
    }
    if (len != SM_LEN) {
        rpc->stats.rx_bad++;
        return;
    }
    struct sm_msg m;
    sm_decode(pkt->data, &m);
    switch (h->req_type) {
    case CONNECT_REQ:
        on_connect_req(rpc, pkt, &m);
        break;
    case DISCONNECT_REQ:
    case PING:
        on_server_msg(rpc, (enum sm_type)h->req_type, h, pkt, &m);
        break;
    case CONNECT_RESP:
    case COOKIE:
    case DISCONNECT_RESP:
    case PONG:
    case RESET:
    case REQ_ERROR:
        on_client_msg(rpc, (enum sm_type)h->req_type, h, pkt, &m);
        break;
    default:
        rpc->stats.rx_bad++;
    }
}

/* ---- timers ---- */

/* Resend interval of connect and disconnect requests: exponential backoff,
 * so thousands of sessions opened at once do not flood their server. */
static uint64_t retry_ns(const struct erma_rpc *rpc, const struct session *s)
{
    return rpc->cfg.connect_retry_ns << (s->sm_retries < 5 ? s->sm_retries : 5);
}

static void scan_client(struct erma_rpc *rpc, struct session *s, uint64_t now)
{
    const struct erma_rpc_cfg *c = &rpc->cfg;
    struct sm_msg m;
    if (s->state == CONNECTING) {
        if (since(now, s->start_ns) > c->connect_timeout_ns) {
            char peer[128] = "?";
            erma_transport_addr_str(rpc->ep->tr, &s->peer, peer, sizeof peer);
            ERMA_INFO("rpc: session %u: no answer to %u connect requests from %s (endpoint "
                      "%u) in %llu ms", s->num, s->sm_retries + 1, peer, s->remote_tid,
                      (unsigned long long)(since(now, s->start_ns) / 1000000));
            const int err = s->hint ? s->hint : ERMA_ETIMEDOUT;
            erma_fail_client_slots(rpc, s, err);
            erma_session_release(rpc, s);
            sm_notify(rpc, s, ERMA_SM_CONNECT_FAILED, err);
        } else if (since(now, s->last_tx_sm_ns) >= retry_ns(rpc, s)) {
            s->sm_retries++;
            send_connect(rpc, s, now);
        }
    } else if (s->state == DISCONNECTING) {
        if (since(now, s->start_ns) > c->failure_ns) {
            erma_session_release(rpc, s);
            sm_notify(rpc, s, ERMA_SM_DISCONNECTED, ERMA_ETIMEDOUT);
        } else if (since(now, s->last_tx_sm_ns) >= retry_ns(rpc, s)) {
            s->last_tx_sm_ns = now;
            s->sm_retries++;
            m = erma_sess_msg(s);
            erma_sm_send(rpc, s, &s->peer, DISCONNECT_REQ, s->remote_num, &m);
        }
    } else if (since(now, s->last_rx_ns) > c->failure_ns) {
        ERMA_INFO("rpc: session %u: peer silent for %llu ms, declared failed", s->num,
                  (unsigned long long)(since(now, s->last_rx_ns) / 1000000));
        erma_session_lost(rpc, s);
    } else if (since(now, s->last_rx_ns) >= c->keepalive_ns &&
               since(now, s->last_tx_sm_ns) >= c->keepalive_ns) {
        s->last_tx_sm_ns = now;
        m = erma_sess_msg(s);
        erma_sm_send(rpc, s, &s->peer, PING, s->remote_num, &m);
    }
}

void erma_busy_scan(struct erma_rpc *rpc, uint64_t now)
{
    /* Backwards: a session leaving the list is replaced by one already seen. */
    for (uint32_t i = rpc->nbusy; i-- > 0;)
        if (i < rpc->nbusy)
            erma_client_scan(rpc, rpc->busy[i], now);
}

void erma_sessions_scan(struct erma_rpc *rpc, uint64_t now)
{
    for (uint32_t i = 0; i < rpc->nsessions; i++) {
        struct session *s = rpc->sessions[i];
        if (!s || s->state == FREE)
            continue;
        if (s->role == CLIENT)
            scan_client(rpc, s, now);
        else if (since(now, s->last_rx_ns) > s->idle_ns)
            erma_session_release(rpc, s); /* the client is gone */
    }
}
