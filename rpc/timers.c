/* The timers the loop's poll runs (rpc.c): retransmission timeouts of the
 * client sessions with requests in flight, and session management's
 * connect and disconnect retries, keepalive pings, silent servers and idle
 * clients. */
#include "client.h"
#include "erma/log.h"

/* Resend interval of connect and disconnect requests: exponential backoff,
 * so thousands of sessions opened at once do not flood their server. */
static uint64_t retry_ns(const struct erma_rpc *rpc, const struct session *s)
{
    return rpc->cfg.connect_retry_ns << (s->sm.retries < 5 ? s->sm.retries : 5);
}

static void connect_failed(struct erma_rpc *rpc, struct session *s, int err, uint64_t now)
{
    char peer[128] = "?";
    erma_transport_addr_str(rpc->ep->tr, &s->peer, peer, sizeof peer);
    ERMA_INFO("rpc: session %u: connect to %s (endpoint %u) failed after %u requests in %llu "
              "ms: %s", s->num, peer, s->remote_tid, s->sm.retries + 1,
              (unsigned long long)(since(now, s->sm.start_ns) / 1000000), erma_strerror(err));
    erma__fail_client_slots(rpc, s, err);
    erma__session_release(rpc, s);
    erma__sm_notify(rpc, s, ERMA_SM_CONNECT_FAILED, err);
}

/* A secure client takes the server's unproven ERMA_EAUTH (sm_rx.c) as its
 * outcome once it answered two of its connect requests and a retry
 * interval passed since the first without a proven answer. A forger that
 * sees the requests and races the server cannot fail a good connect so:
 * the server's accept comes within a round trip, and a proven accept
 * wins; one that can also drop the server's answers could fail it anyway
 * (ERMA_ETIMEDOUT). An off-path one cannot echo the nonce. */
static bool auth_refused(const struct erma_rpc *rpc, const struct session *s, uint64_t now)
{
    return s->sm.auth_rejects >= 2 &&
           since(now, s->sm.auth_reject_ns) >= rpc->cfg.connect_retry_ns;
}

static void scan_client(struct erma_rpc *rpc, struct session *s, uint64_t now)
{
    const struct erma_rpc_cfg *c = &rpc->cfg;
    struct sm_msg m;
    if (s->state == CONNECTING) {
        const uint64_t limit = s->sm.reconnecting ? c->reconnect_timeout_ns
                                                  : c->connect_timeout_ns;
        if (auth_refused(rpc, s, now)) {
            connect_failed(rpc, s, ERMA_EAUTH, now);
        } else if (since(now, s->sm.start_ns) > limit) {
            connect_failed(rpc, s, s->sm.hint ? s->sm.hint : ERMA_ETIMEDOUT, now);
        } else if (since(now, s->sm.last_tx_ns) >= retry_ns(rpc, s)) {
            s->sm.retries++;
            erma__sm_send_connect(rpc, s, now);
        }
    } else if (s->state == DISCONNECTING) {
        if (since(now, s->sm.start_ns) > c->failure_ns) {
            erma__session_release(rpc, s);
            erma__sm_notify(rpc, s, ERMA_SM_DISCONNECTED, ERMA_ETIMEDOUT);
        } else if (since(now, s->sm.last_tx_ns) >= retry_ns(rpc, s)) {
            s->sm.last_tx_ns = now;
            s->sm.retries++;
            m = erma__sess_msg(s);
            erma__sm_send(rpc, s, &s->peer, DISCONNECT_REQ, s->remote_num, &m);
        }
    } else if (since(now, s->sm.last_rx_ns) > c->failure_ns) {
        ERMA_INFO("rpc: session %u: peer silent for %llu ms, declared failed", s->num,
                  (unsigned long long)(since(now, s->sm.last_rx_ns) / 1000000));
        erma__session_lost(rpc, s);
    } else if (since(now, s->sm.last_rx_ns) >= c->keepalive_ns &&
               since(now, s->sm.last_tx_ns) >= c->keepalive_ns) {
        s->sm.last_tx_ns = now;
        m = erma__sess_msg(s);
        erma__sm_send(rpc, s, &s->peer, PING, s->remote_num, &m);
    }
}

void erma__busy_scan(struct erma_rpc *rpc, uint64_t now)
{
    /* Backwards: a session leaving the list is replaced by one already seen. */
    for (uint32_t i = rpc->client.nbusy; i-- > 0;) {
        struct session *s = i < rpc->client.nbusy ? rpc->client.busy[i] : NULL;
        if (s && erma__client_scan(rpc, s, now))
            erma__session_lost(rpc, s);
    }
}

uint32_t erma__sessions_scan(struct erma_rpc *rpc, uint64_t now)
{
    uint32_t pending = 0;
    for (uint32_t i = 0; i < rpc->table.n; i++) {
        struct session *s = rpc->table.sessions[i];
        if (!s || s->state == FREE)
            continue;
        if (s->role == CLIENT) {
            scan_client(rpc, s, now);
            pending += s->state == CONNECTING || s->state == DISCONNECTING;
        } else if (since(now, s->sm.last_rx_ns) > s->sm.idle_ns) {
            erma__session_release(rpc, s); /* the client is gone */
        }
    }
    return pending;
}
