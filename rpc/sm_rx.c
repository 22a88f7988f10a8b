/* Session-management messages received: connect handshakes (cookies
 * first, then, secure, proofs and keys), disconnects, keepalive pings and
 * their answers, resets, and failed requests. */
#include <string.h>

#include <sodium.h>

#include "client.h"
#include "erma/log.h"

/* The virtual paths both ends of a connect have: the fewer of the two. */
static unsigned common_paths(const struct erma_rpc *rpc, const struct sm_msg *m)
{
    return SM_PATHS_OF(m->flags) < rpc->ep->npaths ? SM_PATHS_OF(m->flags) : rpc->ep->npaths;
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
    crypto_shorthash(out, in, peer->len + 16u, rpc->sm.cookie_key);
    return erma_get_le(out, 8) | 1;
}

static bool cookie_ok(const struct erma_rpc *rpc, const struct erma_addr *peer,
                      const struct sm_msg *m)
{
    const uint64_t epoch = rpc->ep->now >> COOKIE_EPOCH_SHIFT;
    return m->cookie && (m->cookie == cookie_for(rpc, peer, m->token, epoch) ||
                         m->cookie == cookie_for(rpc, peer, m->token, epoch - 1));
}

/* ---- the server side of session management ---- */

static struct session *find_server_session(struct erma_rpc *rpc, const struct erma_addr *peer,
                                           uint64_t token)
{
    struct session *s = erma__token_find(rpc, token);
    return s && erma_addr_eq(&s->peer, peer) ? s : NULL;
}

/* Why a connect request with a good cookie gets no session (ERMA_OK: it may). */
static int admit(struct erma_rpc *rpc, const struct erma_addr *peer, const struct sm_msg *m,
                 uint32_t grant)
{
    if (m->server_tid != rpc->ep->tid || grant == 0)
        return ERMA_ENOENT;
    if (!erma__ring_has_room(rpc, grant) ||
        erma__peer_sessions(rpc, peer) >= rpc->cfg.max_sessions_per_peer ||
        erma__token_find(rpc, m->token))
        return ERMA_EREFUSED; /* no room, too many from this peer, or a token clash */
    return ERMA_OK;
}

static struct session *server_session_new(struct erma_rpc *rpc, const struct erma_addr *peer,
                                          const struct sm_msg *m, uint32_t grant)
{
    struct session *s = erma__session_alloc(rpc, SERVER);
    if (!s)
        return NULL;
    s->state = CONNECTED;
    s->peer = *peer;
    erma_paths_init(&s->ps, common_paths(rpc, m));
    erma__session_token(s, m->token);
    s->remote_num = m->client_session;
    /* The client pings every keepalive (its connect request says how often):
     * wait three of them, but at least failure_ns, at most 60 s. */
    s->sm.idle_ns = m->req_num < 20000000000ull ? 3 * m->req_num : 60000000000ull;
    s->sm.idle_ns = s->sm.idle_ns > rpc->cfg.failure_ns ? s->sm.idle_ns : rpc->cfg.failure_ns;
    erma__set_credits(rpc, s, grant);
    s->peer_counted = erma__peer_add(rpc, peer) == ERMA_OK;
    if (!s->peer_counted || erma__token_insert(rpc, s) != ERMA_OK) {
        erma__session_release(rpc, s);
        return NULL;
    }
    return s;
}

/* A secure server session's keys and the proof of its accept message m. */
static int server_seal(struct erma_rpc *rpc, struct session *s, struct sm_msg *m)
{
    const bool aes = (m->flags & SM_AES) && erma__crypto_aes_available();
    m->req_num = rpc->sm.serial++; /* never repeats: a replayed connect gets other keys */
    m->server_session = s->num;
    m->credits = s->credits_max;
    m->err = ERMA_OK;
    m->flags = SM_SECURE | (aes ? SM_AES : 0) | SM_PATHS(s->ps.n);
    erma__sm_prove(rpc, SEAL_ACCEPT, m);
    s->sm.accept = *m;
    return erma__sm_seal_start(rpc, s, m, false);
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
        erma__session_release(rpc, s);
        s = NULL;
        m->err = ERMA_ENOMEM;
    }
    if (m->err == ERMA_EREFUSED)
        rpc->stats.sessions_refused++;
    return s;
}

/* A connect request that did not prove the key (or one end has none): an
 * ERMA_EAUTH answer in the clear, which the client takes only as a hint
 * (client_proven). It costs the server no state, and it is no amplifier:
 * one answer of the request's size per request, and for a wrong proof
 * only to an address that echoed its cookie. It tells the sender nothing
 * it did not know: without the key no accept would come. */
static void auth_refuse(struct erma_rpc *rpc, const struct erma_rx_pkt *pkt, struct sm_msg *m)
{
    rpc->stats.rx_auth_failed++;
    if (!rpc->sm.auth_logged) {
        const bool client_psk = (m->flags & SM_SECURE) != 0;
        char from[128] = "?";
        erma_transport_addr_str(rpc->ep->tr, &pkt->src, from, sizeof from);
        ERMA_WARN("rpc: a connect from %s failed authentication (%s): answered ERMA_EAUTH; "
                  "later ones are only counted (stats.rx_auth_failed)", from,
                  !rpc->nx->secure ? "it has a psk, this nexus none"
                  : client_psk     ? "not this nexus's psk"
                                   : "this nexus has a psk, it none");
        rpc->sm.auth_logged = true;
    }
    m->err = ERMA_EAUTH;
    erma__sm_send(rpc, NULL, &pkt->src, CONNECT_RESP, m->client_session, m);
}

static void on_connect_req(struct erma_rpc *rpc, const struct erma_rx_pkt *pkt,
                           struct sm_msg *m)
{
    const bool secure = rpc->nx->secure;
    if (secure != ((m->flags & SM_SECURE) != 0)) { /* one end has the key, the other not */
        auth_refuse(rpc, pkt, m);
        return;
    }
    struct session *s = find_server_session(rpc, &pkt->src, m->token);
    if (s && secure) { /* a retry: the same proven answer */
        erma__sm_send(rpc, NULL, &pkt->src, CONNECT_RESP, m->client_session, &s->sm.accept);
        return;
    }
    if (!s && !cookie_ok(rpc, &pkt->src, m)) { /* keep nothing until it proves its address */
        if (m->cookie)
            rpc->stats.bad_cookies++;
        m->cookie = cookie_for(rpc, &pkt->src, m->token, rpc->ep->now >> COOKIE_EPOCH_SHIFT);
        rpc->stats.cookies_sent++;
        erma__sm_send(rpc, NULL, &pkt->src, COOKIE, m->client_session, m);
        return;
    }
    if (!s && secure && !erma__sm_proven(rpc, SEAL_CONNECT, m)) {
        auth_refuse(rpc, pkt, m); /* not a holder of the key */
        return;
    }
    if (!s)
        s = accept_session(rpc, &pkt->src, m);
    if (s && secure)
        m = &s->sm.accept;
    else if (s)
        *m = (struct sm_msg){.token = m->token, .client_session = m->client_session,
                             .server_session = s->num, .credits = s->credits_max,
                             .flags = SM_PATHS(s->ps.n)};
    else if (secure)
        erma__sm_prove(rpc, SEAL_REFUSE, m); /* to a proven client: the refusal may be final */
    erma__sm_send(rpc, NULL, &pkt->src, CONNECT_RESP, m->client_session, m);
}

static void on_server_msg(struct erma_rpc *rpc, enum sm_type type, const struct erma_hdr *h,
                          const struct erma_rx_pkt *pkt, const struct sm_msg *m)
{
    struct session *s = erma__session_get(rpc, h->dest_session);
    const bool ours = s && s->role == SERVER && s->token == m->token &&
                      erma__session_path(rpc, s, &pkt->src) >= 0;
    if (ours)
        s->sm.last_rx_ns = rpc->ep->now;
    if (type == DISCONNECT_REQ) {
        erma__sm_send(rpc, ours ? s : NULL, &pkt->src, DISCONNECT_RESP, m->client_session, m);
        if (ours)
            erma__session_release(rpc, s); /* after the answer is sealed: it flushes */
    } else { /* PING */
        erma__sm_send(rpc, ours ? s : NULL, &pkt->src, ours ? PONG : RESET, m->client_session,
                      m);
    }
}

/* ---- the client side ---- */

static bool session_msg(uint8_t type)
{
    return type == DISCONNECT_REQ || type == DISCONNECT_RESP || type == PING || type == PONG ||
           type == REQ_ERROR;
}

/* An unproven ERMA_EAUTH answer for our nonce: counted once per connect
 * request it answers (a copy of one answer counts once). */
static void note_auth_reject(struct erma_rpc *rpc, struct session *s, const struct sm_msg *m)
{
    if (m->err != ERMA_EAUTH || sodium_memcmp(m->nonce, s->sm.nonce, sizeof s->sm.nonce) != 0 ||
        (s->sm.auth_rejects && s->sm.auth_reject_tx_ns == s->sm.last_tx_ns))
        return;
    if (s->sm.auth_rejects++ == 0)
        s->sm.auth_reject_ns = rpc->ep->now;
    s->sm.auth_reject_tx_ns = s->sm.last_tx_ns;
}

/* Whether a secure CONNECT_RESP is the server's, for our nonce: an accept
 * (whose keys it starts) or a refusal under the key's proof. Anything else
 * (a refusal from a server without the key, or a forgery) is only a hint,
 * reported if the connect times out, or sooner for ERMA_EAUTH (timers.c,
 * auth_refused). */
static bool client_proven(struct erma_rpc *rpc, struct session *s, const struct sm_msg *m)
{
    const bool accept = m->err == ERMA_OK;
    const bool usable = !(m->flags & SM_AES) || erma__crypto_aes_available();
    if (sodium_memcmp(m->nonce, s->sm.nonce, sizeof s->sm.nonce) == 0 &&
        (m->flags & SM_SECURE) && usable &&
        erma__sm_proven(rpc, accept ? SEAL_ACCEPT : SEAL_REFUSE, m))
        return !accept || erma__sm_seal_start(rpc, s, m, true) == ERMA_OK;
    if (!accept) {
        s->sm.hint = m->err;
        note_auth_reject(rpc, s, m);
    }
    rpc->stats.rx_auth_failed++;
    return false;
}

static void on_connect_resp(struct erma_rpc *rpc, struct session *s, struct sm_msg *m)
{
    if (rpc->nx->secure && !client_proven(rpc, s, m))
        return; /* wait for the real answer */
    s->sm.last_rx_ns = rpc->ep->now;
    if (m->err == ERMA_OK && (m->credits == 0 || m->credits > s->credits_max))
        m->err = ERMA_EREFUSED; /* a grant we did not ask for */
    if (m->err != ERMA_OK) {
        erma__fail_client_slots(rpc, s, m->err);
        erma__session_release(rpc, s);
        erma__sm_notify(rpc, s, ERMA_SM_CONNECT_FAILED, m->err);
        return;
    }
    s->remote_num = m->server_session;
    erma_paths_init(&s->ps, common_paths(rpc, m)); /* each path's probe first */
    erma__set_credits(rpc, s, m->credits);
    s->state = CONNECTED;
    const bool again = s->sm.reconnecting;
    s->sm.reconnecting = false;
    erma__sm_notify(rpc, s, again ? ERMA_SM_RECONNECTED : ERMA_SM_CONNECTED, ERMA_OK);
    erma__client_kick(rpc, s);
}

static void on_client_msg(struct erma_rpc *rpc, enum sm_type type, const struct erma_hdr *h,
                          const struct erma_rx_pkt *pkt, struct sm_msg *m)
{
    struct session *s = erma__session_get(rpc, h->dest_session);
    if (!s || s->role != CLIENT || s->token != m->token ||
        erma__session_path(rpc, s, &pkt->src) < 0) {
        rpc->stats.rx_no_session++;
        return;
    }
    /* secure: only sealed messages (opened by erma__sm_rx) are surely the server's */
    if (!rpc->nx->secure || session_msg((uint8_t)type))
        s->sm.last_rx_ns = rpc->ep->now;
    if (type == CONNECT_RESP && s->state == CONNECTING) {
        on_connect_resp(rpc, s, m);
    } else if (type == COOKIE && s->state == CONNECTING) {
        s->sm.cookie = m->cookie; /* prove our address: ask again with it, now */
        if (rpc->nx->secure && !s->sm.hint)
            s->sm.hint = ERMA_EAUTH; /* a live server; if it never accepts, another key */
        erma__sm_send_connect(rpc, s, rpc->ep->now);
    } else if (type == DISCONNECT_RESP && s->state == DISCONNECTING) {
        erma__session_release(rpc, s);
        erma__sm_notify(rpc, s, ERMA_SM_DISCONNECTED, ERMA_OK);
    } else if (type == REQ_ERROR && s->state == CONNECTED) {
        erma__client_req_error(rpc, s, m->req_num, m->err);
    } else if (type == RESET && s->state == CONNECTED && !rpc->nx->secure) {
        /* (secure: an unsealed RESET could be anyone's; silence fails the session) */
        ERMA_INFO("rpc: session %u reset by its server (restarted?)", s->num);
        erma__session_lost(rpc, s);
    }
}

void erma__sm_rx(struct erma_rpc *rpc, const struct erma_hdr *h, const struct erma_rx_pkt *pkt)
{
    uint32_t len = pkt->len;
    if (rpc->nx->secure && session_msg(h->req_type)) { /* sealed under the session's keys */
        struct session *s = erma__session_get(rpc, h->dest_session);
        if (!s || !s->seal.on || erma__session_path(rpc, s, &pkt->src) < 0) {
            rpc->stats.rx_no_session++;
            return;
        }
        if (!erma__session_open(rpc, s, pkt->data, &len))
            return;
    }
    struct sm_msg m;
    if (!erma__sm_decode(pkt->data, len, &m)) {
        rpc->stats.rx_bad++;
        return;
    }
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
