/*
 * erma/keys.h - the key service: one-sided keys handed from a target to
 * its initiators over an RPC, by region name.
 *
 * For applications (included by erma/erma.h).
 *
 * Quick start (check each int returned; apps/hello_rma runs it):
 *   server: erma_nexus_create, erma_endpoint_create(uri, ...), then on that
 *           one endpoint both erma_rpc_create(nx, ep, ...) and
 *           erma_rma_create(ep, ...);
 *           erma_region_register(rma, buf, len, ERMA_RMA_PERM_READ, &region);
 *           erma_keys_create(rpc, rma, ERMA_KEYS_REQ_TYPE, &keys);
 *           erma_keys_export(keys, "table", region, NULL, 0);
 *           erma_endpoint_run_until(ep, stopped, NULL, UINT64_MAX);
 *   client: its own nexus, endpoint, rpc and rma on one endpoint;
 *           int s = erma_session_create(rpc, server_uri, 0);
 *           int peer = erma_rma_peer(rma, server_uri, 0);
 *           struct erma_rkey key;
 *           erma_keys_fetch_wait(rpc, rma, s, ERMA_KEYS_REQ_TYPE, "table",
 *                                1000000000, &key, NULL, NULL);
 *           then READ and WRITE with .peer = peer, .rkey = key (erma/rma.h)
 *   end:    erma_keys_destroy(keys) before erma_rpc_destroy(rpc).
 *
 * What it does. A target exports a registered region under a name, with
 * an optional info blob of up to ERMA_KEYS_INFO_MAX bytes (the geometry of
 * a table, say) that travels with the key. An initiator fetches a name's
 * key over an RPC session of its own: the server derives the key for the
 * identity the client names (its erma_rma_identity()) bound to the address
 * the request came from (erma_req_peer_uri(), erma_region_export_uri()),
 * and answers it packed portably (erma_rkey_pack()) with the info.
 *
 * One endpoint. On both sides the erma_rpc and the erma_rma must sit on the
 * same endpoint: the key works only from the address it was derived for
 * (rma.h, Security, Address), and that address is the one the fetch
 * request came from. A key fetched by an rpc on another endpoint than the
 * one its one-sided ops leave from fails every op with ERMA_EAUTH.
 * erma_keys_create() and the fetch calls check it (ERMA_EINVAL).
 *
 * A key, once fetched, is the client's: it works until the region is
 * deregistered (ERMA_ENOREGION) or rekeyed (erma_region_rekey(); after the
 * grace time the old key fails with ERMA_ESUPERSEDED, which a forged key,
 * ERMA_EAUTH, never draws). Fetch again to get the current key: the server
 * never pushes keys.
 *
 * Wire format (request type of the caller's choice, ERMA_KEYS_REQ_TYPE by
 * default; integers little-endian):
 *   request  [u8 version 1][u8 name length n, 1..ERMA_KEYS_NAME_MAX]
 *            [u64 identity][name: n bytes]
 *   answer   [i32 status]; with ERMA_OK then [packed rkey: 42 bytes]
 *            [u8 info length m, 0..ERMA_KEYS_INFO_MAX][info: m bytes]
 *
 * Errors (the status a fetch completes with):
 *   ERMA_OK          the key (and info) came
 *   ERMA_ENOREGION   no region is exported under that name (or its
 *                    region was deregistered)
 *   ERMA_EBADPKT     the server found the request malformed, or the
 *                    client the answer
 *   ERMA_ENOTSUP     the server's endpoint has no key service for the
 *                    request type (one on another endpoint of its nexus
 *                    registered the type)
 *   ERMA_ENOHANDLER  the server's nexus has no handler for the type
 *   and any failure of the RPC itself (erma_rpc_call(): ERMA_EPEERFAILED,
 *   ERMA_ETIMEDOUT, ...).
 *
 * Threading: a service, like its rpc and rma, belongs to the endpoint's
 * thread; create it before that thread runs the loop, or on it. The
 * services of a process are found by their rpc through a table under a
 * mutex, taken only by create, destroy and each fetch request served.
 */
#ifndef ERMA_KEYS_H
#define ERMA_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "erma/api.h"
#include "erma/errors.h"
#include "erma/rma.h"
#include "erma/rpc.h"

ERMA_BEGIN_DECLS

#define ERMA_KEYS_REQ_TYPE 250 /* the default request type of the key service */
#define ERMA_KEYS_NAME_MAX 63  /* bytes of a region name, NUL not counted */
#define ERMA_KEYS_INFO_MAX 64  /* bytes of a region's info blob */

struct erma_keys;

/* ---- server ---- */

/* Creates a key service on rpc and rma, which must share one endpoint,
 * and registers its handler for req_type on rpc's nexus (a dispatch
 * handler; other services of the nexus with the same type share it).
 * Returns ERMA_OK; ERMA_EINVAL for a NULL argument, an rpc and rma on
 * different endpoints, or a req_type the nexus has another handler for;
 * ERMA_EAGAIN when rpc has a key service for req_type already;
 * ERMA_ENOMEM. */
int erma_keys_create(struct erma_rpc *rpc, struct erma_rma *rma, uint8_t req_type,
                     struct erma_keys **out);
/* Unexports every name and frees ks; NULL is ignored. Later fetch
 * requests to its endpoint are answered ERMA_ENOTSUP. Call it before
 * erma_rpc_destroy() of its rpc, from the endpoint's thread. Returns
 * nothing. */
void erma_keys_destroy(struct erma_keys *ks);
/* Exports region (of the service's rma) under name, a NUL-terminated
 * string of 1 to ERMA_KEYS_NAME_MAX bytes, with info_len bytes of info
 * (0 to ERMA_KEYS_INFO_MAX; info may be NULL when info_len is 0) that
 * every fetch answers with the key. Returns ERMA_OK; ERMA_ENOREGION when
 * rma has no such region; ERMA_EINVAL for a NULL ks or name, a name empty
 * or too long, info too long or NULL with a length, or a name exported
 * already (unexport it first); ERMA_ENOMEM. */
int erma_keys_export(struct erma_keys *ks, const char *name, uint32_t region, const void *info,
                     size_t info_len);
/* Stops exporting name: later fetches of it get ERMA_ENOREGION. Keys
 * fetched before keep working (deregister or rekey the region to stop
 * them). Returns ERMA_OK; ERMA_ENOREGION when name is not exported;
 * ERMA_EINVAL for a NULL argument. */
int erma_keys_unexport(struct erma_keys *ks, const char *name);

/* ---- client ---- */

/* How a fetch completes: status (ERMA_OK or an error above); with
 * ERMA_OK, rkey is the key and info, info_len the region's info (valid
 * during the call; info_len may be 0), else rkey and info are NULL. */
typedef void (*erma_keys_fn)(void *ctx, int status, const struct erma_rkey *rkey,
                             const uint8_t *info, size_t info_len);

/* Asks the server at the other end of session for the key of the region
 * exported under name, derived for rma's identity and bound to this
 * endpoint's address; rpc and rma must share one endpoint. cb(ctx, ...)
 * runs once, later, in the endpoint's loop (an RPC continuation), never
 * from this call. Returns ERMA_OK once asked; otherwise cb never runs:
 * ERMA_EINVAL for a NULL argument, an empty or too long name, or an rpc
 * and rma on different endpoints; ERMA_ENOMEM; or what erma_rpc_call()
 * returns (ERMA_ENOENT for no such session, ...). */
int erma_keys_fetch(struct erma_rpc *rpc, struct erma_rma *rma, int session, uint8_t req_type,
                    const char *name, erma_keys_fn cb, void *ctx);
/* erma_keys_fetch(), then runs the endpoint's loop until the answer came
 * or timeout_ns passed: the key goes to *out and, when info is not NULL,
 * up to *info_len bytes of info to info, *info_len set to the info's
 * length. Call it from outside the loop (never from a handler, a
 * continuation or a callback). Returns ERMA_OK; the fetch's error (the
 * list above); ERMA_E2BIG when the info is longer than *info_len (out
 * holds the key, *info_len the length needed); ERMA_ETIMEDOUT when no
 * answer came in time (it is dropped when it comes); ERMA_ENOTSUP on the
 * sim fabric, whose time moves only under erma_sim_run() (use
 * erma_keys_fetch() there); ERMA_EINVAL as erma_keys_fetch(), also for a
 * NULL out, or an info without info_len. */
int erma_keys_fetch_wait(struct erma_rpc *rpc, struct erma_rma *rma, int session,
                         uint8_t req_type, const char *name, uint64_t timeout_ns,
                         struct erma_rkey *out, void *info, size_t *info_len);

ERMA_END_DECLS

#endif
