/*
 * Shared by the RPC tests: a request format whose bytes can be checked at
 * both ends. A request is [u32 resp_size][u32 id][pattern...]; request byte k
 * is req_byte(id, k), response byte k is resp_byte(id, k).
 */
#ifndef ERMA_TEST_RPC_UTIL_H
#define ERMA_TEST_RPC_UTIL_H

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "erma/sdk/rand.h"
#include "erma/rpc.h"
#include "erma/sdk/wire.h"

#define REQ_HDR 8

static inline uint8_t req_byte(uint32_t id, size_t k)
{
    return (uint8_t)(id * 7 + k * 13 + 1);
}

static inline uint8_t resp_byte(uint32_t id, size_t k)
{
    return (uint8_t)(id * 31 + k * 5 + 3);
}

static inline void fill_req(struct erma_msgbuf *mb, uint32_t id, uint32_t resp_size)
{
    memcpy(mb->data, &resp_size, 4);
    memcpy(mb->data + 4, &id, 4);
    for (size_t k = REQ_HDR; k < mb->size; k++)
        mb->data[k] = req_byte(id, k);
}

static inline int check_resp(const struct erma_msgbuf *mb, uint32_t id, uint32_t size)
{
    if (mb->size != size)
        return -1;
    for (size_t k = 0; k < size; k++)
        if (mb->data[k] != resp_byte(id, k))
            return (int)k + 1;
    return 0;
}

struct echo_stats {
    _Atomic uint64_t calls, bad;
    _Atomic uint32_t *per_id; /* executions per request id, may be NULL */
    uint32_t max_id;
};

/* Executions of ids that ran more than once. */
static inline uint64_t echo_dups(const struct echo_stats *st)
{
    uint64_t dups = 0;
    for (uint32_t i = 0; st->per_id && i < st->max_id; i++)
        dups += atomic_load(&st->per_id[i]) > 1;
    return dups;
}

/* Requests shorter than REQ_HDR are answered with their bytes xor 0x5a. */
static inline uint8_t tiny_byte(size_t k)
{
    return (uint8_t)(k * 3 + 1);
}

/* Checks the request, builds the response it asks for. */
static inline void echo_handler(struct erma_req *req, void *ctx)
{
    struct echo_stats *st = ctx;
    const uint8_t *d = erma_req_data(req);
    const size_t n = erma_req_size(req);
    uint32_t resp_size = 0, id = 0;
    atomic_fetch_add(&st->calls, 1);
    if (n < REQ_HDR) {
        struct erma_msgbuf *r = erma_req_resp_buf(req);
        erma_msgbuf_resize(r, n);
        for (size_t k = 0; k < n; k++)
            r->data[k] = d[k] ^ 0x5a;
        erma_req_respond(req, r);
        return;
    } else {
        memcpy(&resp_size, d, 4);
        memcpy(&id, d + 4, 4);
        for (size_t k = REQ_HDR; k < n; k++)
            if (d[k] != req_byte(id, k)) {
                atomic_fetch_add(&st->bad, 1);
                break;
            }
        if (st->per_id && id < st->max_id)
            atomic_fetch_add(&st->per_id[id], 1);
    }
    struct erma_msgbuf *resp = erma_req_resp_buf(req), own;
    if (resp_size > resp->max_size) {
        if (erma_msgbuf_alloc(erma_req_rpc(req), resp_size, &own) != ERMA_OK) {
            atomic_fetch_add(&st->bad, 1);
            return;
        }
        resp = &own;
    }
    erma_msgbuf_resize(resp, resp_size);
    for (size_t k = 0; k < resp_size; k++)
        resp->data[k] = resp_byte(id, k);
    erma_req_respond(req, resp);
}

/* Fills buf with garbage packet number i: random bytes of a random length,
 * every second one behind a valid header with random fields, aimed at
 * sessions 0..3 and request type `type`. Returns the length. */
static inline uint32_t garbage_packet(struct erma_rand *r, uint8_t *buf, uint32_t cap, int i,
                                      uint8_t type)
{
    const uint32_t len = (uint32_t)erma_rand_below(r, cap + 1);
    for (uint32_t k = 0; k < len; k++)
        buf[k] = (uint8_t)erma_rand_u64(r);
    if (len >= ERMA_HDR_SIZE && i % 2) {
        const struct erma_hdr h = {.req_type = type,
                                   .msg_size = (uint32_t)erma_rand_below(r, 1 << 23),
                                   .dest_session = (uint16_t)erma_rand_below(r, 4),
                                   .pkt_type = (uint8_t)erma_rand_below(r, 4),
                                   .pkt_num = (uint16_t)erma_rand_below(r, 8),
                                   .req_num = erma_rand_below(r, 64),
                                   .proto = (uint8_t)(1 + erma_rand_below(r, 3))};
        erma_hdr_encode(&h, buf);
    }
    return len;
}

/* A dispatch handler that forwards its request to type `type` over session
 * `sess` of the same endpoint and answers with what comes back (a nested
 * RPC): the response leaves from the continuation, after the handler. */
struct proxy {
    int sess;
    uint8_t type;
    _Atomic uint64_t failed;
};

struct proxied {
    struct erma_req *req;
    struct proxy *px;
    struct erma_msgbuf fwd, back;
};

static inline void proxy_done(struct erma_rpc *rpc, void *tag, int status,
                              struct erma_msgbuf *resp)
{
    struct proxied *p = tag;
    struct erma_msgbuf out;
    if (status != ERMA_OK || erma_msgbuf_alloc(rpc, resp->size, &out) != ERMA_OK) {
        atomic_fetch_add(&p->px->failed, 1);
        struct erma_msgbuf *empty = erma_req_resp_buf(p->req);
        erma_msgbuf_resize(empty, 0);
        erma_req_respond(p->req, empty);
    } else {
        memcpy(out.data, resp->data, resp->size);
        erma_req_respond(p->req, &out);
    }
    erma_msgbuf_free(rpc, &p->fwd);
    erma_msgbuf_free(rpc, &p->back);
    free(p);
}

static inline void proxy_handler(struct erma_req *req, void *ctx)
{
    struct proxy *px = ctx;
    struct erma_rpc *rpc = erma_req_rpc(req);
    struct proxied *p = calloc(1, sizeof *p);
    if (!p || erma_msgbuf_alloc(rpc, erma_req_size(req), &p->fwd) != ERMA_OK ||
        erma_msgbuf_alloc(rpc, 64, &p->back) != ERMA_OK) {
        atomic_fetch_add(&px->failed, 1);
        free(p);
        return;
    }
    p->req = req;
    p->px = px;
    memcpy(p->fwd.data, erma_req_data(req), erma_req_size(req));
    if (erma_rpc_call(rpc, px->sess, px->type, &p->fwd, &p->back, proxy_done, p) != ERMA_OK)
        proxy_done(rpc, p, ERMA_ENOENT, &p->back);
}

#endif
