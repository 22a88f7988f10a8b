/* keys/fetch.c - the key service's client side (erma/keys.h): a fetch is
 * one RPC whose buffers and callback live in a struct of its own, freed
 * by its continuation; the blocking fetch runs the loop until it came. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "endpoint/proto.h"
#include "msg.h"

struct fetch {
    struct erma_msgbuf req, resp;
    erma_keys_fn cb;
    void *ctx;
};

static void on_answer(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    struct fetch *f = tag;
    struct erma_rkey k;
    const uint8_t *info = NULL;
    size_t info_len = 0;
    if (status == ERMA_OK)
        status = erma__keys_answer_decode(resp->data, resp->size, &k, &info, &info_len);
    f->cb(f->ctx, status, status == ERMA_OK ? &k : NULL, status == ERMA_OK ? info : NULL,
          info_len);
    erma_msgbuf_free(rpc, &f->req);
    erma_msgbuf_free(rpc, &f->resp);
    free(f);
}

int erma_keys_fetch(struct erma_rpc *rpc, struct erma_rma *rma, int session, uint8_t req_type,
                    const char *name, erma_keys_fn cb, void *ctx)
{
    if (!rpc || !rma || !name || !cb || !erma__keys_same_endpoint(rpc, rma))
        return ERMA_EINVAL;
    uint8_t msg[ERMA__KEYS_REQ_MAX];
    const int n = erma__keys_req_encode(erma_rma_identity(rma), name, msg);
    if (n < 0)
        return n;
    struct fetch *f = calloc(1, sizeof *f);
    if (!f)
        return ERMA_ENOMEM;
    f->cb = cb;
    f->ctx = ctx;
    int rc = erma_msgbuf_alloc(rpc, (size_t)n, &f->req);
    if (rc == ERMA_OK)
        rc = erma_msgbuf_alloc(rpc, ERMA__KEYS_ANSWER_MAX, &f->resp);
    if (rc == ERMA_OK) {
        memcpy(f->req.data, msg, (size_t)n);
        rc = erma_rpc_call(rpc, session, req_type, &f->req, &f->resp, on_answer, f);
    }
    if (rc != ERMA_OK) {
        erma_msgbuf_free(rpc, &f->req);
        erma_msgbuf_free(rpc, &f->resp);
        free(f);
    }
    return rc;
}

/* A blocking fetch's outcome; the caller's until it gives up (abandoned),
 * then the continuation's to free. */
struct waiter {
    bool done, abandoned;
    int status;
    struct erma_rkey key;
    uint8_t info[ERMA_KEYS_INFO_MAX];
    size_t info_len;
};

static void on_waited(void *ctx, int status, const struct erma_rkey *rkey, const uint8_t *info,
                      size_t info_len)
{
    struct waiter *w = ctx;
    if (w->abandoned) {
        free(w);
        return;
    }
    w->done = true;
    w->status = status;
    if (status == ERMA_OK) {
        w->key = *rkey;
        w->info_len = info_len;
        if (info_len)
            memcpy(w->info, info, info_len);
    }
}

static bool waited(void *ctx)
{
    return ((const struct waiter *)ctx)->done;
}

int erma_keys_fetch_wait(struct erma_rpc *rpc, struct erma_rma *rma, int session,
                         uint8_t req_type, const char *name, uint64_t timeout_ns,
                         struct erma_rkey *out, void *info, size_t *info_len)
{
    if (!rpc || !out || (info && !info_len))
        return ERMA_EINVAL;
    struct erma_endpoint *ep = erma_rpc_endpoint(rpc);
    if (ep->tr->hints.shared_clock)
        return ERMA_ENOTSUP; /* the sim: its time moves only under erma_sim_run() */
    struct waiter *w = calloc(1, sizeof *w);
    if (!w)
        return ERMA_ENOMEM;
    int rc = erma_keys_fetch(rpc, rma, session, req_type, name, on_waited, w);
    if (rc == ERMA_OK && erma_endpoint_run_until(ep, waited, w, timeout_ns) != ERMA_OK) {
        w->abandoned = true; /* the answer, when it comes, frees w */
        return ERMA_ETIMEDOUT;
    }
    if (rc == ERMA_OK)
        rc = w->status;
    if (rc == ERMA_OK) {
        *out = w->key;
        if (info && w->info_len > *info_len)
            rc = ERMA_E2BIG;
        else if (info)
            memcpy(info, w->info, w->info_len);
        if (info)
            *info_len = w->info_len;
    }
    free(w);
    return rc;
}
