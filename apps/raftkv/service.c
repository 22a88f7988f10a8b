/* A raftkv replica's service (server_impl.h): clients' PUT, DEL, GET and
 * GET_LOCAL (raftkv.h, "The service"). */
#include <stdlib.h>
#include <string.h>

#include "erma/sdk/wire.h"
#include "kv/kv.h"
#include "raftkv/server_impl.h"

enum pend_kind { P_WRITE, P_READ };

/* A client request waiting for raft (an apply or a barrier). */
struct pending {
    struct link link; /* first: a link is its pending */
    struct raftkv_server *s;
    struct erma_req *req;
    enum pend_kind kind;
    union {
        struct raft_apply apply;
        struct raft_barrier barrier;
    };
    uint32_t klen;
    uint8_t key[];
};

/* [i32 status][u32 len][bytes] */
static void answer(struct erma_req *req, int status, const void *bytes, uint32_t len)
{
    struct erma_msgbuf *r = erma_req_resp_buf(req), own;
    if ((size_t)len + 8 > r->max_size) {
        if (erma_msgbuf_alloc(erma_req_rpc(req), (size_t)len + 8, &own) == ERMA_OK) {
            r = &own;
        } else {
            status = ERMA_ENOMEM;
            len = 0;
        }
    }
    erma_msgbuf_resize(r, (size_t)len + 8);
    erma_put_le(r->data, (uint32_t)status, 4);
    erma_put_le(r->data + 4, len, 4);
    if (len)
        memcpy(r->data + 8, bytes, len);
    erma_req_respond(req, r);
}

/* Not the leader: where it is, if known. */
static void redirect(struct raftkv_server *s, struct erma_req *req)
{
    raft_id id = 0;
    const char *addr = NULL;
    raft_leader(&s->raft, &id, &addr);
    s->stats.redirects++;
    if (!addr || id == s->cfg.id)
        addr = "";
    answer(req, RAFTKV_REDIRECT, addr, (uint32_t)strlen(addr));
}

#define ORIGIN 24 /* a write's [u64 client][u64 seq][u64 floor] */

/* Parses [u32 klen][u32 vlen][key][value] (with_value) or [u32 klen][key],
 * after skip bytes. */
static int parse(struct erma_req *req, size_t skip, bool with_value, const uint8_t **key,
                 uint32_t *klen, const uint8_t **val, uint32_t *vlen)
{
    const uint8_t *p = erma_req_data(req);
    size_t n = erma_req_size(req);
    const size_t hdr = with_value ? 8 : 4;
    if (!p || n < skip + hdr)
        return ERMA_EBADPKT;
    p += skip;
    n -= skip;
    *klen = (uint32_t)erma_get_le(p, 4);
    *vlen = with_value ? (uint32_t)erma_get_le(p + 4, 4) : 0;
    if (*klen == 0 || (uint64_t)hdr + *klen + *vlen != n)
        return ERMA_EBADPKT;
    *key = p + hdr;
    *val = p + hdr + *klen;
    return ERMA_OK;
}

/* Answers RAFTKV_WRONG_GROUP, and true, when key is another group's. */
static bool other_group(struct raftkv_server *s, struct erma_req *req, const uint8_t *key,
                        uint32_t klen)
{
    if (s->cfg.groups <= 1 || raftkv_group_of(key, klen, s->cfg.groups) == s->cfg.group)
        return false;
    s->stats.wrong_group++;
    answer(req, RAFTKV_WRONG_GROUP, NULL, 0);
    return true;
}

/* Parses req and checks that this replica, as the leader, takes it; false
 * when it has answered already (malformed, another group's key, shutting
 * down, or a redirect). */
static bool admit(struct raftkv_server *s, struct erma_req *req, size_t skip,
                  bool with_value, const uint8_t **key, uint32_t *klen, const uint8_t **val,
                  uint32_t *vlen)
{
    const int rc = parse(req, skip, with_value, key, klen, val, vlen);
    if (rc != ERMA_OK) {
        answer(req, rc, NULL, 0);
        return false;
    }
    if (other_group(s, req, *key, *klen))
        return false;
    if (s->closed) {
        answer(req, ERMA_EAGAIN, NULL, 0);
        return false;
    }
    if (raft_state(&s->raft) != RAFT_LEADER) {
        redirect(s, req);
        return false;
    }
    return true;
}

static struct pending *pend_new(struct raftkv_server *s, struct erma_req *req,
                                enum pend_kind kind, const void *key, uint32_t klen)
{
    struct pending *p = calloc(1, sizeof *p + klen);
    if (!p)
        return NULL;
    p->s = s;
    p->req = req;
    p->kind = kind;
    p->klen = klen;
    if (klen)
        memcpy(p->key, key, klen);
    p->link.next = s->pend.next;
    p->link.prev = &s->pend;
    p->link.next->prev = &p->link;
    s->pend.next = &p->link;
    return p;
}

static void pend_free(struct pending *p)
{
    p->link.prev->next = p->link.next;
    p->link.next->prev = p->link.prev;
    free(p);
}

static void applied(struct raft_apply *a, int status, void *result)
{
    struct pending *p = a->data;
    if (status == 0) {
        answer(p->req, (int)(intptr_t)result, NULL, 0);
    } else {
        /* leadership lost or shutting down: the outcome is unknown */
        p->s->stats.failed++;
        answer(p->req, ERMA_EAGAIN, NULL, 0);
    }
    pend_free(p);
}

static void write_req(struct erma_req *req, void *ctx, bool del)
{
    struct raftkv_server *s = ctx;
    const uint8_t *key, *val;
    uint32_t klen, vlen;
    if (!admit(s, req, ORIGIN, !del, &key, &klen, &val, &vlen))
        return;
    del ? s->stats.dels++ : s->stats.puts++;
    const uint8_t *o = erma_req_data(req);
    const struct raftkv_origin origin = {erma_get_le(o, 8), erma_get_le(o + 8, 8),
                                         erma_get_le(o + 16, 8)};
    struct raft_buffer buf;
    int rc = del ? raftkv_cmd_del(&buf, &origin, key, klen)
             : raftkv_cmd_put(&buf, &origin, key, klen, val, vlen);
    if (rc != ERMA_OK) {
        answer(req, rc, NULL, 0);
        return;
    }
    struct pending *p = pend_new(s, req, P_WRITE, NULL, 0);
    if (!p) {
        raft_free(buf.base);
        answer(req, ERMA_ENOMEM, NULL, 0);
        return;
    }
    p->apply.data = p;
    rc = raft_apply(&s->raft, &p->apply, &buf, 1, applied);
    if (rc != 0) {
        raft_free(buf.base);
        pend_free(p);
        if (rc == RAFT_NOTLEADER)
            redirect(s, req);
        else
            answer(req, rc == RAFT_NOMEM ? ERMA_ENOMEM : ERMA_EAGAIN, NULL, 0);
    }
}

static void on_put(struct erma_req *req, void *ctx)
{
    write_req(req, ctx, false);
}

static void on_del(struct erma_req *req, void *ctx)
{
    write_req(req, ctx, true);
}

static void read_local(struct raftkv_server *s, struct erma_req *req, const void *key,
                       uint32_t klen)
{
    uint32_t vlen = 0;
    const int rc = kv_get(raftkv_fsm_kv(&s->fsm), key, klen, s->val,
                          KV_MAX_ITEM, &vlen);
    answer(req, rc, rc == ERMA_OK ? s->val : NULL, rc == ERMA_OK ? vlen : 0);
}

/* The barrier issued after the GET arrived is applied: every write
 * acknowledged before it is in the table. */
static void barrier_done(struct raft_barrier *b, int status)
{
    struct pending *p = b->data;
    if (status == 0) {
        read_local(p->s, p->req, p->key, p->klen);
    } else {
        p->s->stats.failed++;
        answer(p->req, ERMA_EAGAIN, NULL, 0);
    }
    pend_free(p);
}

static void on_get(struct erma_req *req, void *ctx)
{
    struct raftkv_server *s = ctx;
    const uint8_t *key, *val;
    uint32_t klen, vlen;
    if (!admit(s, req, 0, false, &key, &klen, &val, &vlen))
        return;
    s->stats.gets++;
    struct pending *p = pend_new(s, req, P_READ, key, klen);
    if (!p) {
        answer(req, ERMA_ENOMEM, NULL, 0);
        return;
    }
    p->barrier.data = p;
    const int rc = raft_barrier(&s->raft, &p->barrier, barrier_done);
    if (rc != 0) {
        pend_free(p);
        if (rc == RAFT_NOTLEADER)
            redirect(s, req);
        else
            answer(req, rc == RAFT_NOMEM ? ERMA_ENOMEM : ERMA_EAGAIN, NULL, 0);
    }
}

static void on_get_local(struct erma_req *req, void *ctx)
{
    struct raftkv_server *s = ctx;
    const uint8_t *key, *val;
    uint32_t klen, vlen;
    const int rc = parse(req, 0, false, &key, &klen, &val, &vlen);
    if (rc != ERMA_OK) {
        answer(req, rc, NULL, 0);
        return;
    }
    if (other_group(s, req, key, klen))
        return;
    s->stats.local_gets++;
    read_local(s, req, key, klen);
}

int raftkv__service_init(struct raftkv_server *s)
{
    const uint8_t b = s->cfg.type_base;
    int rc = erma_handler_register(s->nx, b + RAFTKV_PUT, on_put, ERMA_DISPATCH, s);
    if (rc == ERMA_OK)
        rc = erma_handler_register(s->nx, b + RAFTKV_DEL, on_del, ERMA_DISPATCH, s);
    if (rc == ERMA_OK)
        rc = erma_handler_register(s->nx, b + RAFTKV_GET, on_get, ERMA_DISPATCH, s);
    if (rc == ERMA_OK)
        rc = erma_handler_register(s->nx, b + RAFTKV_GET_LOCAL, on_get_local, ERMA_DISPATCH, s);
    return rc;
}

void raftkv__service_abort(struct raftkv_server *s)
{
    /* requests raft never answered: their erma_reqs go with the rpc */
    while (s->pend.next != &s->pend) {
        struct pending *p = (struct pending *)s->pend.next;
        answer(p->req, ERMA_EAGAIN, NULL, 0);
        pend_free(p);
    }
}
