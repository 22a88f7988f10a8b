/* Session-management messages: their codec, the proofs of secure
 * handshakes, and the messages a client session sends. */
#include <string.h>

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

void erma__sm_send(struct erma_rpc *rpc, struct session *s, const struct erma_addr *dst,
                   enum sm_type type, uint16_t dest_session, const struct sm_msg *m)
{
    uint8_t *p = erma__tx_ctrl(rpc, s, dst, SM_LEN);
    const struct erma_hdr h = {.req_type = (uint8_t)type, .dest_session = dest_session,
                               .proto = ERMA_PROTO_SM};
    erma_hdr_encode(&h, p);
    sm_encode(p + ERMA_HDR_SIZE, m);
}

bool erma__sm_decode(const uint8_t *p, uint32_t len, struct sm_msg *m)
{
    if (len != SM_LEN)
        return false;
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
    return true;
}

struct sm_msg erma__sess_msg(const struct session *s)
{
    const bool client = s->role == CLIENT;
    return (struct sm_msg){.token = s->token,
                           .client_session = client ? s->num : s->remote_num,
                           .server_session = client ? s->remote_num : s->num,
                           .credits = s->credits_max,
                           .server_tid = s->remote_tid};
}

/* ---- secure handshakes ---- */

static void unproven(const struct sm_msg *m, uint8_t out[SM_PAYLOAD])
{
    sm_encode(out, m);
    memset(out + SM_PROOF_AT, 0, ERMA_PROOF_BYTES);
}

void erma__sm_prove(const struct erma_rpc *rpc, const char *label, struct sm_msg *m)
{
    uint8_t b[SM_PAYLOAD];
    unproven(m, b);
    erma__seal_proof(rpc->nx->psk, label, b, sizeof b, m->proof);
}

bool erma__sm_proven(const struct erma_rpc *rpc, const char *label, const struct sm_msg *m)
{
    uint8_t b[SM_PAYLOAD];
    unproven(m, b);
    return erma__seal_proof_ok(rpc->nx->psk, label, b, sizeof b, m->proof);
}

int erma__sm_seal_start(struct erma_rpc *rpc, struct session *s, const struct sm_msg *m,
                        bool client)
{
    uint8_t b[SM_PAYLOAD];
    unproven(m, b);
    return erma__seal_start(&s->seal, rpc->nx->psk, b, sizeof b, client,
                            (m->flags & SM_AES) != 0);
}

/* ---- a client's messages ---- */

void erma__sm_send_connect(struct erma_rpc *rpc, struct session *s, uint64_t now)
{
    struct sm_msg m = erma__sess_msg(s);
    m.cookie = s->sm.cookie;
    m.req_num = rpc->cfg.keepalive_ns; /* how long the server may hear nothing */
    m.flags = SM_PATHS(rpc->ep->npaths);
    if (rpc->nx->secure) {
        m.flags |= SM_SECURE | (erma__crypto_aes_available() ? SM_AES : 0);
        memcpy(m.nonce, s->sm.nonce, sizeof m.nonce);
        if (m.cookie)
            erma__sm_prove(rpc, SEAL_CONNECT, &m);
    }
    s->sm.last_tx_ns = now;
    erma__sm_send(rpc, NULL, &s->peer, CONNECT_REQ, NO_SESSION, &m);
}

void erma__sm_notify(struct erma_rpc *rpc, struct session *s, enum erma_sm_event ev, int err)
{
    if (rpc->cfg.sm_handler)
        rpc->cfg.sm_handler(rpc, s->num, ev, err, rpc->cfg.sm_ctx);
}
