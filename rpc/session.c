/* Sessions and the in-band session-management protocol. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "erma/clock.h"
#include "erma/log.h"
#include "internal.h"


#define SM_PAYLOAD 29
#define SM_LEN (ERMA_HDR_SIZE + SM_PAYLOAD)

void erma_sm_send(struct erma_rpc *rpc, const struct erma_addr *dst, enum sm_type type,
             uint16_t dest_session, const struct sm_msg *m)
{
    uint8_t *p = erma_tx_ctrl(rpc, dst, SM_LEN);
    const struct erma_hdr h = {.req_type = (uint8_t)type, .dest_session = dest_session,
                               .proto = ERMA_PROTO_SM};
    erma_hdr_encode(&h, p);
    p += ERMA_HDR_SIZE;
    erma_put_le(p, m->token, 8);
    erma_put_le(p + 8, m->client_session, 2);
    erma_put_le(p + 10, m->server_session, 2);
    erma_put_le(p + 12, m->credits, 4);
    erma_put_le(p + 16, (uint32_t)m->err, 4);
    p[20] = m->server_tid;
    erma_put_le(p + 21, m->req_num, 8);
}

static void sm_decode(const uint8_t *p, struct sm_msg *m)
{
    p += ERMA_HDR_SIZE;
    m->token = erma_get_le(p, 8);
    m->client_session = (uint16_t)erma_get_le(p + 8, 2);
    m->server_session = (uint16_t)erma_get_le(p + 10, 2);
    m->credits = (uint32_t)erma_get_le(p + 12, 4);
    m->err = (int32_t)(uint32_t)erma_get_le(p + 16, 4);
    m->server_tid = p[20];
    m->req_num = erma_get_le(p + 21, 8);
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
    return (rpc->cfg.rx_ring - rpc->ring_credits) / rpc->cfg.credits;
}

static bool ring_has_room(const struct erma_rpc *rpc, uint32_t credits)
{
    return (uint64_t)rpc->ring_credits + credits <= rpc->cfg.rx_ring;
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
    s->start_ns = s->last_rx_ns = s->last_tx_sm_ns = rpc->loop_now;
    /* A random start makes packets of an earlier session with this number stale. */
    const uint64_t base = (erma_rand_u64(&rpc->rng) & (ERMA_MAX_REQ_NUM >> 8)) * ERMA_SESSION_SLOTS;
    if (role == CLIENT)
        erma_timely_init(&s->timely, &rpc->timely_cfg, s->start_ns);
    for (unsigned k = 0; k < ERMA_SESSION_SLOTS; k++)
        s->slots[k].req_num = role == CLIENT ? base + k : 0; /* server: 0 is none yet */
    rpc->active_sessions++;
    return s;
}

void erma_session_fail(struct erma_rpc *rpc, struct session *s, int status)
{
    if (s->role == CLIENT)
        erma_fail_client_slots(rpc, s, status);
}

void erma_session_release(struct erma_rpc *rpc, struct session *s)
{
    erma_tx_flush(rpc); /* nothing in the batch may point at this session */
    if (s->role == SERVER)
        for (unsigned k = 0; k < ERMA_SESSION_SLOTS; k++)
            erma_server_slot_free(rpc, &s->slots[k]);
    if (s->role == SERVER)
        token_remove(rpc, s);
    rpc->active_sessions--;
    set_credits(rpc, s, 0);
    s->state = FREE;
    rpc->free_nums[rpc->nfree_nums++] = s->num;
}

int erma_create_session(struct erma_rpc *rpc, const char *remote_uri, uint8_t remote_tid)
{
    return erma_create_session_credits(rpc, remote_uri, remote_tid, 0);
}

int erma_create_session_credits(struct erma_rpc *rpc, const char *remote_uri,
                                uint8_t remote_tid, uint32_t credits)
{
    if (!rpc || !remote_uri || remote_tid >= ERMA_MAX_THREADS || credits > rpc->cfg.credits)
        return ERMA_EINVAL;
    char uri[512];
    struct erma_addr peer;
    int rc = erma_endpoint_uri(remote_uri, remote_tid, uri, sizeof uri);
    if (rc == ERMA_OK)
        rc = erma_transport_resolve(rpc->tr, uri, &peer);
    if (rc != ERMA_OK)
        return rc;
    if (!credits)
        credits = rpc->cfg.credits;
    if (!ring_has_room(rpc, credits))
        return ERMA_ENOSLOTS;
    refresh_clock(rpc); /* called from outside the loop */
    struct session *s = session_alloc(rpc, CLIENT);
    if (!s)
        return ERMA_ENOMEM;
    s->state = CONNECTING;
    s->peer = peer;
    s->remote_tid = remote_tid;
    s->remote_num = NO_SESSION;
    set_credits(rpc, s, credits);
    s->token = erma_rand_u64(&rpc->rng) | 1;
    const struct sm_msg m = erma_sess_msg(s);
    erma_sm_send(rpc, &s->peer, CONNECT_REQ, NO_SESSION, &m);
    erma_tx_flush(rpc);
    return s->num;
}

int erma_destroy_session(struct erma_rpc *rpc, int num)
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
    s->start_ns = s->last_tx_sm_ns = refresh_clock(rpc);
    s->sm_retries = 0;
    const struct sm_msg m = erma_sess_msg(s);
    erma_sm_send(rpc, &s->peer, DISCONNECT_REQ, s->remote_num, &m);
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

static void on_connect_req(struct erma_rpc *rpc, const struct erma_rx_pkt *pkt,
                           struct sm_msg *m)
{
    struct session *s = find_server_session(rpc, &pkt->src, m->token);
    if (!s) {
        const uint32_t grant = m->credits < rpc->cfg.credits ? m->credits : rpc->cfg.credits;
        if (m->server_tid != rpc->tid || grant == 0) {
            m->err = ERMA_ENOENT;
        } else if (!ring_has_room(rpc, grant) ||
                   (rpc->token_cap && rpc->by_token[token_slot(rpc, m->token)]) ||
                   !(s = session_alloc(rpc, SERVER))) {
            m->err = ERMA_EREFUSED; /* no room, or a token clash with another client */
            rpc->stats.sessions_refused++;
        } else {
            s->state = CONNECTED;
            s->peer = pkt->src;
            s->token = m->token;
            s->remote_num = m->client_session;
            set_credits(rpc, s, grant);
            if (token_insert(rpc, s) != ERMA_OK) {
                erma_session_release(rpc, s);
                s = NULL;
                m->err = ERMA_EREFUSED;
            }
        }
    }
    if (s) {
        m->server_session = s->num;
        m->credits = s->credits_max;
        m->err = ERMA_OK;
    }
    erma_sm_send(rpc, &pkt->src, CONNECT_RESP, m->client_session, m);
}

static void on_server_msg(struct erma_rpc *rpc, enum sm_type type, const struct erma_hdr *h,
                          const struct erma_rx_pkt *pkt, const struct sm_msg *m)
{
    struct session *s = erma_session_get(rpc, h->dest_session);
    const bool ours = s && s->role == SERVER && s->token == m->token &&
                      erma_addr_eq(&s->peer, &pkt->src);
    if (ours)
        s->last_rx_ns = rpc->loop_now;
    if (type == DISCONNECT_REQ) {
        if (ours)
            erma_session_release(rpc, s);
        erma_sm_send(rpc, &pkt->src, DISCONNECT_RESP, m->client_session, m);
    } else { /* PING */
        erma_sm_send(rpc, &pkt->src, ours ? PONG : RESET, m->client_session, m);
    }
}

/* ---- the client side ---- */

static void on_client_msg(struct erma_rpc *rpc, enum sm_type type, const struct erma_hdr *h,
                          const struct erma_rx_pkt *pkt, struct sm_msg *m)
{
    struct session *s = erma_session_get(rpc, h->dest_session);
    if (!s || s->role != CLIENT || s->token != m->token || !erma_addr_eq(&s->peer, &pkt->src)) {
        rpc->stats.rx_no_session++;
        return;
    }
    s->last_rx_ns = rpc->loop_now;
    if (type == CONNECT_RESP && s->state == CONNECTING) {
        if (m->err == ERMA_OK && (m->credits == 0 || m->credits > s->credits_max))
            m->err = ERMA_EREFUSED; /* a grant we did not ask for */
        if (m->err != ERMA_OK) {
            erma_fail_client_slots(rpc, s, m->err);
            erma_session_release(rpc, s);
            sm_notify(rpc, s, ERMA_SM_CONNECT_FAILED, m->err);
            return;
        }
        s->remote_num = m->server_session;
        set_credits(rpc, s, m->credits);
        s->state = CONNECTED;
        sm_notify(rpc, s, ERMA_SM_CONNECTED, ERMA_OK);
        erma_client_kick(rpc, s);
    } else if (type == DISCONNECT_RESP && s->state == DISCONNECTING) {
        erma_session_release(rpc, s);
        sm_notify(rpc, s, ERMA_SM_DISCONNECTED, ERMA_OK);
    } else if (type == REQ_ERROR && s->state == CONNECTED) {
        erma_client_req_error(rpc, s, m->req_num, m->err);
    } else if (type == RESET && s->state == CONNECTED) {
        ERMA_INFO("rpc: session %u reset by its server (restarted?)", s->num);
        erma_session_fail(rpc, s, ERMA_EPEERFAILED);
        erma_session_release(rpc, s);
        sm_notify(rpc, s, ERMA_SM_PEER_FAILED, ERMA_EPEERFAILED);
    }
}

void erma_sm_rx(struct erma_rpc *rpc, const struct erma_hdr *h, const struct erma_rx_pkt *pkt)
{
    if (pkt->len != SM_LEN) {
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
        if (since(now, s->start_ns) > c->failure_ns) {
            char peer[128] = "?";
            erma_transport_addr_str(rpc->tr, &s->peer, peer, sizeof peer);
            ERMA_INFO("rpc: session %u: no answer to %u connect requests from %s (endpoint "
                      "%u) in %llu ms", s->num, s->sm_retries + 1, peer, s->remote_tid,
                      (unsigned long long)(since(now, s->start_ns) / 1000000));
            erma_fail_client_slots(rpc, s, ERMA_ETIMEDOUT);
            erma_session_release(rpc, s);
            sm_notify(rpc, s, ERMA_SM_CONNECT_FAILED, ERMA_ETIMEDOUT);
        } else if (since(now, s->last_tx_sm_ns) >= retry_ns(rpc, s)) {
            s->last_tx_sm_ns = now;
            s->sm_retries++;
            m = erma_sess_msg(s);
            erma_sm_send(rpc, &s->peer, CONNECT_REQ, NO_SESSION, &m);
        }
    } else if (s->state == DISCONNECTING) {
        if (since(now, s->start_ns) > c->failure_ns) {
            erma_session_release(rpc, s);
            sm_notify(rpc, s, ERMA_SM_DISCONNECTED, ERMA_ETIMEDOUT);
        } else if (since(now, s->last_tx_sm_ns) >= retry_ns(rpc, s)) {
            s->last_tx_sm_ns = now;
            s->sm_retries++;
            m = erma_sess_msg(s);
            erma_sm_send(rpc, &s->peer, DISCONNECT_REQ, s->remote_num, &m);
        }
    } else if (since(now, s->last_rx_ns) > c->failure_ns) {
        ERMA_INFO("rpc: session %u: peer silent for %llu ms, declared failed", s->num,
                  (unsigned long long)(since(now, s->last_rx_ns) / 1000000));
        erma_session_fail(rpc, s, ERMA_EPEERFAILED);
        erma_session_release(rpc, s);
        sm_notify(rpc, s, ERMA_SM_PEER_FAILED, ERMA_EPEERFAILED);
    } else if (since(now, s->last_rx_ns) >= c->keepalive_ns &&
               since(now, s->last_tx_sm_ns) >= c->keepalive_ns) {
        s->last_tx_sm_ns = now;
        m = erma_sess_msg(s);
        erma_sm_send(rpc, &s->peer, PING, s->remote_num, &m);
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
        else if (since(now, s->last_rx_ns) > rpc->cfg.failure_ns)
            erma_session_release(rpc, s); /* the client is gone */
    }
}
