/* Session management: its messages (sm.c: the codec, proofs and sending),
 * their handlers (sm_rx.c), the session API and a session's end
 * (sm_api.c), and the timers (timers.c). docs/PROTOCOL.md has the wire
 * format. */
#ifndef ERMA_RPC_SM_H
#define ERMA_RPC_SM_H

#include "endpoint/proto.h"
#include "erma/rpc.h"
#include "seal.h"

struct erma_rpc;
struct session;

enum sm_type {
    CONNECT_REQ = 1, CONNECT_RESP, DISCONNECT_REQ, DISCONNECT_RESP, PING, PONG, RESET,
    REQ_ERROR, /* server to client: the request in req_num failed with err */
    COOKIE,    /* server to client: send the connect request again with this cookie */
};

/* A session-management message: the payload after the header (docs/PROTOCOL.md). */
struct sm_msg {
    uint64_t token;
    uint16_t client_session, server_session;
    uint32_t credits;
    int32_t err;
    uint8_t server_tid;
    uint64_t req_num; /* REQ_ERROR: the request; CONNECT_REQ: the client's keepalive;
                         secure CONNECT_RESP: the server's session serial */
    uint64_t cookie; /* CONNECT_REQ: the server's cookie echoed (0: none yet) */
    uint8_t nonce[16]; /* secure CONNECT_REQ: the client's nonce */
    uint8_t proof[ERMA_PROOF_BYTES]; /* secure CONNECT_REQ (with a cookie), CONNECT_RESP */
    uint8_t flags;     /* SM_SECURE, SM_AES */
};

#define SM_SECURE 1 /* the sender's nexus has a pre-shared key */
#define SM_AES 2    /* CONNECT_REQ: the client can do AES-256-GCM; CONNECT_RESP: use it */
/* bits 4-6: virtual paths - 1; CONNECT_REQ: the client's, CONNECT_RESP: the session's */
#define SM_PATHS(n) ((uint8_t)(((n) - 1) << 4))
#define SM_PATHS_OF(flags) (1u + ((flags) >> 4 & 7u))

/* sm.c */
/* Queues message m of type to dst for the next flush, sealed under s's
 * keys when s is a secure session (s NULL: in the clear). */
void erma__sm_send(struct erma_rpc *rpc, struct session *s, const struct erma_addr *dst,
                   enum sm_type type, uint16_t dest_session, const struct sm_msg *m);
/* The message of a packet of len bytes (header included); false when
 * len is not a message's. */
bool erma__sm_decode(const uint8_t *pkt, uint32_t len, struct sm_msg *m);
/* A message naming s: its token, both ends' numbers, credits, server thread. */
struct sm_msg erma__sess_msg(const struct session *s);
/* A client session's connect request (sent again until answered). */
void erma__sm_send_connect(struct erma_rpc *rpc, struct session *s, uint64_t now);
/* Secure handshakes: every field of a connect request or answer is covered
 * by its proof (the payload with the proof field zeroed). */
void erma__sm_prove(const struct erma_rpc *rpc, const char *label, struct sm_msg *m);
bool erma__sm_proven(const struct erma_rpc *rpc, const char *label, const struct sm_msg *m);
/* s's keys from the accept message m, client or server side. */
int erma__sm_seal_start(struct erma_rpc *rpc, struct session *s, const struct sm_msg *m,
                        bool client);
/* Tells the application (cfg.sm_handler) of an event of s. */
void erma__sm_notify(struct erma_rpc *rpc, struct session *s, enum erma_sm_event ev, int err);

/* sm_api.c */
void erma__session_fail(struct erma_rpc *rpc, struct session *s, int status);
/* Ends s: a server session's slots and table entries go, its number is free. */
void erma__session_release(struct erma_rpc *rpc, struct session *s);
/* A client session whose server is gone: fails what is pending with
 * ERMA_EPEERFAILED, releases it, then ERMA_SM_PEER_FAILED. */
void erma__session_lost(struct erma_rpc *rpc, struct session *s);

/* sm_rx.c */
void erma__sm_rx(struct erma_rpc *rpc, const struct erma_hdr *h, const struct erma_rx_pkt *pkt);

/* timers.c */
/* Retransmission timeouts of the client sessions with requests in flight. */
void erma__busy_scan(struct erma_rpc *rpc, uint64_t now);
/* Connect and disconnect retries, keepalive pings, silent peers, idle
 * server sessions. */
/* Session management's scan of every session; returns the client
 * sessions still connecting or disconnecting. */
uint32_t erma__sessions_scan(struct erma_rpc *rpc, uint64_t now);

#endif
