/* keys/serve.c - the key service's server side (erma/keys.h): named
 * exports of an engine's regions, and the fetch handler, which derives a
 * key for the identity a request names, bound to the address it came
 * from. The services of a process are found by their rpc in one table: a
 * request type is one handler per nexus, while a service is per endpoint. */
#include <pthread.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "erma/log.h"
#include "msg.h"

struct export {
    char name[ERMA_KEYS_NAME_MAX + 1];
    uint32_t region;
    uint8_t info_len;
    uint8_t info[ERMA_KEYS_INFO_MAX];
};

struct erma_keys {
    struct erma_rpc *rpc;
    struct erma_rma *rma;
    uint8_t type;
    struct export *ex;
    uint32_t n, cap;
    struct erma_keys *next; /* in the table of services */
};

static pthread_mutex_t services_lock = PTHREAD_MUTEX_INITIALIZER;
static struct erma_keys *services;

/* Under services_lock. */
static struct erma_keys *service_of(const struct erma_rpc *rpc, uint8_t type)
{
    struct erma_keys *ks = services;
    while (ks && (ks->rpc != rpc || ks->type != type))
        ks = ks->next;
    return ks;
}

static struct export *find(struct erma_keys *ks, const void *name, size_t len)
{
    for (uint32_t i = 0; i < ks->n; i++)
        if (strlen(ks->ex[i].name) == len && memcmp(ks->ex[i].name, name, len) == 0)
            return &ks->ex[i];
    return NULL;
}

/* The key and info for a request, or why not. */
static int derive(struct erma_req *req, struct erma_keys *ks, struct erma_rkey *k,
                  const struct export **ex)
{
    struct erma__keys_req r;
    char from[128];
    if (!ks)
        return ERMA_ENOTSUP;
    int rc = erma__keys_req_decode(erma_req_data(req), erma_req_size(req), &r);
    if (rc != ERMA_OK)
        return rc;
    if (!(*ex = find(ks, r.name, r.name_len)))
        return ERMA_ENOREGION;
    rc = erma_req_peer_uri(req, from, sizeof from);
    if (rc == ERMA_OK)
        rc = erma_region_export_uri(ks->rma, (*ex)->region, r.identity, from, k);
    return rc;
}

/* The dispatch handler of every service's type; runs in the loop of the
 * endpoint whose service (if any) answers. */
static void on_fetch(struct erma_req *req, void *ctx)
{
    (void)ctx;
    pthread_mutex_lock(&services_lock);
    struct erma_keys *ks = service_of(erma_req_rpc(req), erma_req_type(req));
    pthread_mutex_unlock(&services_lock); /* ks is this thread's: only it destroys ks */
    struct erma_rkey k;
    const struct export *ex = NULL;
    const int rc = derive(req, ks, &k, &ex);
    struct erma_msgbuf *r = erma_req_resp_buf(req), own;
    if (r->max_size < ERMA__KEYS_ANSWER_MAX &&
        erma_msgbuf_alloc(erma_req_rpc(req), ERMA__KEYS_ANSWER_MAX, &own) == ERMA_OK)
        r = &own;
    const size_t n = r->max_size < ERMA__KEYS_ANSWER_MAX
                         ? erma__keys_answer_encode(ERMA_ENOMEM, NULL, NULL, 0, r->data)
                         : erma__keys_answer_encode(rc, &k, ex ? ex->info : NULL,
                                                    ex ? ex->info_len : 0, r->data);
    erma_msgbuf_resize(r, n);
    erma_req_respond(req, r);
}

int erma_keys_create(struct erma_rpc *rpc, struct erma_rma *rma, uint8_t req_type,
                     struct erma_keys **out)
{
    if (!rpc || !rma || !out || !erma__keys_same_endpoint(rpc, rma))
        return ERMA_EINVAL;
    struct erma_keys *ks = calloc(1, sizeof *ks);
    if (!ks)
        return ERMA_ENOMEM;
    *ks = (struct erma_keys){.rpc = rpc, .rma = rma, .type = req_type};
    int rc = erma_handler_register(erma_rpc_nexus(rpc), req_type, on_fetch, ERMA_DISPATCH, NULL);
    if (rc != ERMA_OK)
        ERMA_WARN("keys: request type %u is another handler's on this nexus", req_type);
    pthread_mutex_lock(&services_lock);
    if (rc == ERMA_OK && service_of(rpc, req_type))
        rc = ERMA_EAGAIN;
    if (rc == ERMA_OK) {
        ks->next = services;
        services = ks;
    }
    pthread_mutex_unlock(&services_lock);
    if (rc != ERMA_OK) {
        free(ks);
        return rc;
    }
    *out = ks;
    return ERMA_OK;
}

void erma_keys_destroy(struct erma_keys *ks)
{
    if (!ks)
        return;
    pthread_mutex_lock(&services_lock);
    struct erma_keys **p = &services;
    while (*p && *p != ks)
        p = &(*p)->next;
    if (*p)
        *p = ks->next;
    pthread_mutex_unlock(&services_lock);
    free(ks->ex);
    free(ks);
}

/* The name's length, or 0 when it is empty or too long. */
static size_t name_len(const char *name)
{
    const size_t n = strnlen(name, ERMA_KEYS_NAME_MAX + 1);
    return n > ERMA_KEYS_NAME_MAX ? 0 : n;
}

/* ERMA_ENOREGION when rma has no such region (an export to its own
 * address says so), else ERMA_OK. */
static int region_exists(struct erma_rma *rma, uint32_t region)
{
    char self[160];
    struct erma_rkey k;
    int rc = erma_rma_uri(rma, self, sizeof self);
    if (rc == ERMA_OK)
        rc = erma_region_export_uri(rma, region, 0, self, &k);
    sodium_memzero(&k, sizeof k);
    return rc == ERMA_ENOREGION ? rc : ERMA_OK;
}

int erma_keys_export(struct erma_keys *ks, const char *name, uint32_t region, const void *info,
                     size_t info_len)
{
    if (!ks || !name || info_len > ERMA_KEYS_INFO_MAX || (info_len && !info))
        return ERMA_EINVAL;
    const size_t n = name_len(name);
    if (!n || find(ks, name, n))
        return ERMA_EINVAL;
    const int rc = region_exists(ks->rma, region);
    if (rc != ERMA_OK)
        return rc;
    if (ks->n == ks->cap) {
        const uint32_t cap = ks->cap ? 2 * ks->cap : 4;
        struct export *ex = realloc(ks->ex, cap * sizeof *ex);
        if (!ex)
            return ERMA_ENOMEM;
        ks->ex = ex;
        ks->cap = cap;
    }
    struct export *e = &ks->ex[ks->n++];
    memset(e, 0, sizeof *e);
    memcpy(e->name, name, n);
    e->region = region;
    e->info_len = (uint8_t)info_len;
    if (info_len)
        memcpy(e->info, info, info_len);
    return ERMA_OK;
}

int erma_keys_unexport(struct erma_keys *ks, const char *name)
{
    if (!ks || !name)
        return ERMA_EINVAL;
    struct export *e = find(ks, name, strnlen(name, ERMA_KEYS_NAME_MAX + 1));
    if (!e)
        return ERMA_ENOREGION;
    *e = ks->ex[--ks->n];
    return ERMA_OK;
}
