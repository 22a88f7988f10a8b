/* The session API (erma_session_create, _destroy, _connected) and the end
 * of a session, whichever side ends it. */
#include <sodium.h>

#include "client.h"
#include "server.h"

void erma__session_fail(struct erma_rpc *rpc, struct session *s, int status)
{
    if (s->role == CLIENT)
        erma__fail_client_slots(rpc, s, status);
}

/* A client session's state of one life on the wire, new: a new token (so
 * new request numbers), one path, fresh congestion control (the wheel's
 * entry, if any, has the old token) and a fresh handshake. */
static void session_new_life(struct erma_rpc *rpc, struct session *s, uint64_t now)
{
    erma__seal_end(&s->seal);
    s->remote_num = NO_SESSION;
    erma__session_token(s, erma_rand_u64(&rpc->rng) | 1);
    erma_paths_init(&s->ps, 1);
    s->cc = (struct sess_cc){0};
    erma_timely_init(&s->cc.timely, &rpc->cc.timely_cfg, now);
    s->client.dupthresh = 3;
    for (unsigned k = 0; k < ERMA_SESSION_SLOTS; k++)
        s->slots[k].client.unheard = 0;
    s->sm = (struct sess_sm){.start_ns = now, .last_rx_ns = now, .reconnecting = true};
    if (rpc->nx->secure)
        randombytes_buf(s->sm.nonce, sizeof s->sm.nonce);
}

/* cfg.reconnect: s connects again, keeping its number. The requests it
 * sent fail (they may have run); in ERMA_RECONNECT_QUEUE those it did not
 * send wait for the new session. */
static void session_reconnect(struct erma_rpc *rpc, struct session *s)
{
    if (rpc->cfg.reconnect == ERMA_RECONNECT_QUEUE)
        erma__fail_client_sent(rpc, s, ERMA_EPEERFAILED);
    else
        erma__fail_client_slots(rpc, s, ERMA_EPEERFAILED);
    erma__ep_tx_flush(rpc->ep); /* nothing in the batch may use the old keys */
    const uint64_t now = erma__ep_clock(rpc->ep);
    session_new_life(rpc, s, now);
    s->state = CONNECTING;
    rpc->timers.pending++;
    erma__sm_send_connect(rpc, s, now);
    erma__sm_notify(rpc, s, ERMA_SM_RECONNECTING, ERMA_EPEERFAILED);
}

void erma__session_lost(struct erma_rpc *rpc, struct session *s)
{
    if (rpc->cfg.reconnect != ERMA_RECONNECT_OFF && !rpc->destroying) {
        session_reconnect(rpc, s);
        return;
    }
    erma__session_fail(rpc, s, ERMA_EPEERFAILED);
    erma__session_release(rpc, s);
    erma__sm_notify(rpc, s, ERMA_SM_PEER_FAILED, ERMA_EPEERFAILED);
}

void erma__session_release(struct erma_rpc *rpc, struct session *s)
{
    erma__ep_tx_flush(rpc->ep); /* nothing in the batch may point at this session */
    if (s->role == SERVER)
        for (unsigned k = 0; k < ERMA_SESSION_SLOTS; k++)
            erma__server_slot_free(rpc, &s->slots[k]);
    erma__session_free(rpc, s);
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
    if (!erma__ring_has_room(rpc, credits))
        return ERMA_ENOSLOTS;
    erma__ep_clock(rpc->ep); /* called from outside the loop */
    struct session *s = erma__session_alloc(rpc, CLIENT);
    if (!s)
        return ERMA_ENOMEM;
    s->state = CONNECTING;
    rpc->timers.pending++; /* retries from the next scan on */
    s->peer = peer;
    s->remote_tid = remote_tid;
    s->remote_num = NO_SESSION;
    erma__set_credits(rpc, s, credits);
    erma__session_token(s, erma_rand_u64(&rpc->rng) | 1);
    if (rpc->nx->secure)
        randombytes_buf(s->sm.nonce, sizeof s->sm.nonce);
    erma__sm_send_connect(rpc, s, rpc->ep->now);
    erma__ep_tx_flush(rpc->ep);
    return s->num;
}

int erma_session_destroy(struct erma_rpc *rpc, int num)
{
    struct session *s = rpc && num >= 0 && num < (int)MAX_SESSIONS
                            ? erma__session_get(rpc, (uint16_t)num) : NULL;
    if (!s || s->role != CLIENT || s->state == DISCONNECTING)
        return ERMA_ENOENT;
    erma__fail_client_slots(rpc, s, ERMA_ECANCELLED);
    if (s->state == CONNECTING) {
        erma__session_release(rpc, s);
        erma__sm_notify(rpc, s, ERMA_SM_DISCONNECTED, ERMA_OK);
        return ERMA_OK;
    }
    s->state = DISCONNECTING;
    rpc->timers.pending++;
    s->sm.start_ns = s->sm.last_tx_ns = erma__ep_clock(rpc->ep);
    s->sm.retries = 0;
    const struct sm_msg m = erma__sess_msg(s);
    erma__sm_send(rpc, s, &s->peer, DISCONNECT_REQ, s->remote_num, &m);
    return ERMA_OK;
}

bool erma_session_connected(const struct erma_rpc *rpc, int num)
{
    const struct session *s = rpc && num >= 0 && (uint32_t)num < rpc->table.n
                                  ? rpc->table.sessions[num] : NULL;
    return s && s->state == CONNECTED;
}
