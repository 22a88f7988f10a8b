/* keys/msg.h - the key service's two messages (erma/keys.h, Wire format).
 * Internal to the library. */
#ifndef ERMA_KEYS_MSG_H
#define ERMA_KEYS_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "erma/keys.h"

#define ERMA__KEYS_VERSION 1
#define ERMA__KEYS_REQ_HDR 10 /* version, name length, identity */
#define ERMA__KEYS_REQ_MAX (ERMA__KEYS_REQ_HDR + ERMA_KEYS_NAME_MAX)
#define ERMA__KEYS_ANSWER_MAX (4 + ERMA_RKEY_PACKED_BYTES + 1 + ERMA_KEYS_INFO_MAX)

/* A fetch request as decoded; name points into the message. */
struct erma__keys_req {
    uint64_t identity;
    const uint8_t *name;
    uint8_t name_len;
};

/* Writes a request into out (ERMA__KEYS_REQ_MAX bytes at least) and
 * returns its size, or ERMA_EINVAL for a name empty or too long. */
int erma__keys_req_encode(uint64_t identity, const char *name, uint8_t *out);
/* ERMA_OK, or ERMA_EBADPKT for anything but a whole request. */
int erma__keys_req_decode(const uint8_t *in, size_t len, struct erma__keys_req *out);
/* Writes an answer into out (ERMA__KEYS_ANSWER_MAX bytes at least) and
 * returns its size: status alone unless it is ERMA_OK. */
size_t erma__keys_answer_encode(int status, const struct erma_rkey *key, const uint8_t *info,
                                uint8_t info_len, uint8_t *out);
/* The answer's status, its key into *key and its info (pointing into in)
 * when ERMA_OK; ERMA_EBADPKT for a malformed answer or a status that is
 * no erma code. */
int erma__keys_answer_decode(const uint8_t *in, size_t len, struct erma_rkey *key,
                             const uint8_t **info, size_t *info_len);

/* True when rpc and rma sit on one endpoint (their URIs are the same). */
bool erma__keys_same_endpoint(struct erma_rpc *rpc, struct erma_rma *rma);

#endif
