/* The key service (erma/keys.h), on the sim fabric and on udp loopback:
 * a fetched key READs and WRITEs, with the region's info; an unknown name
 * is ERMA_ENOREGION; a key fetched by endpoint A fails from endpoint B
 * (ERMA_EAUTH: it is bound to A's address); malformed requests are
 * answered ERMA_EBADPKT and a malformed answer fails the fetch with
 * ERMA_EBADPKT; a key fetched again after erma_region_rekey() works where
 * the old one fails with ERMA_ESUPERSEDED; a destroyed service answers ERMA_ENOTSUP; the
 * blocking fetch works on udp (server loop on a thread) and says
 * ERMA_ENOTSUP on the sim; and the API refuses bad arguments precisely.
 * Host 0 serves, hosts 1 and 2 are clients. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>

#include "erma/keys.h"
#include "erma/sdk/wire.h"
#include "loop_thread.h"
#include "rma_util.h"

static bool SIM = true, UDP = false;
#define ON_SIM(state) (*(bool *)*(state))

#define LEN 65536
#define SEC 1000000000ull
#define BOGUS_TYPE 77 /* a handler that answers garbage */

struct fx {
    struct world w;
    uint8_t *mem;
    uint32_t region;
    struct erma_keys *keys;
    int sess[3], peer[3]; /* of clients 1, 2 towards host 0 */
};

static void bogus(struct erma_req *req, void *ctx)
{
    (void)ctx;
    struct erma_msgbuf *r = erma_req_resp_buf(req);
    erma_msgbuf_resize(r, 7); /* an OK status with 3 bytes: no key */
    memset(r->data, 0, 7);
    erma_req_respond(req, r);
}

static void fx_up(struct fx *f, bool on_sim)
{
    world_up(&f->w, on_sim, 3);
    f->mem = malloc(LEN);
    for (int i = 0; i < LEN; i++)
        f->mem[i] = (uint8_t)(i * 7 + 1);
    assert_int_equal(erma_region_register(f->w.rma[0], f->mem, LEN,
                                          ERMA_RMA_PERM_READ | ERMA_RMA_PERM_WRITE, &f->region),
                     ERMA_OK);
    assert_int_equal(erma_keys_create(f->w.rpc[0], f->w.rma[0], ERMA_KEYS_REQ_TYPE, &f->keys),
                     ERMA_OK);
    assert_int_equal(erma_keys_export(f->keys, "table", f->region, "geometry", 8), ERMA_OK);
    assert_int_equal(erma_handler_register(f->w.nx[0], BOGUS_TYPE, bogus, ERMA_DISPATCH, NULL),
                     ERMA_OK);
    for (unsigned h = 1; h < 3; h++) {
        f->sess[h] = erma_session_create(f->w.rpc[h], f->w.uri[0], 0);
        assert_true(f->sess[h] >= 0);
        f->peer[h] = erma_rma_peer(f->w.rma[h], f->w.uri[0], 0);
        assert_true(f->peer[h] >= 0);
    }
}

static void fx_down(struct fx *f)
{
    erma_keys_destroy(f->keys);
    world_down(&f->w);
    free(f->mem);
}

/* ---- an asynchronous fetch, run to its end ---- */

struct got {
    bool done;
    int status;
    struct erma_rkey key;
    uint8_t info[ERMA_KEYS_INFO_MAX];
    size_t info_len;
};

static void on_key(void *ctx, int status, const struct erma_rkey *rkey, const uint8_t *info,
                   size_t info_len)
{
    struct got *g = ctx;
    assert_false(g->done); /* exactly once */
    g->done = true;
    g->status = status;
    assert_true((status == ERMA_OK) == (rkey != NULL));
    if (rkey) {
        g->key = *rkey;
        memcpy(g->info, info, info_len);
        g->info_len = info_len;
    }
}

static bool got_done(void *ctx)
{
    return ((struct got *)ctx)->done;
}

static struct got fetch_type(struct fx *f, unsigned h, uint8_t type, const char *name)
{
    struct got g = {0};
    assert_int_equal(erma_keys_fetch(f->w.rpc[h], f->w.rma[h], f->sess[h], type, name, on_key,
                                     &g),
                     ERMA_OK);
    assert_false(g.done); /* never from the call */
    assert_true(world_run(&f->w, 5 * SEC, got_done, &g));
    return g;
}

static struct got fetch(struct fx *f, unsigned h, const char *name)
{
    return fetch_type(f, h, ERMA_KEYS_REQ_TYPE, name);
}

static int op(struct fx *f, unsigned h, enum erma_rma_op o, const struct erma_rkey *k,
              uint64_t off, void *buf, uint32_t len)
{
    return world_op(&f->w, h, cmd_of(o, f->peer[h], k, off, buf, len, 9), NULL);
}

/* ---- tests ---- */

static void test_fetch_read_write(void **state)
{
    struct fx f;
    fx_up(&f, ON_SIM(state));
    struct got g = fetch(&f, 1, "table");
    assert_int_equal(g.status, ERMA_OK);
    assert_int_equal(g.info_len, 8);
    assert_memory_equal(g.info, "geometry", 8);
    assert_int_equal(g.key.region, f.region);
    uint8_t buf[4096];
    assert_int_equal(op(&f, 1, ERMA_RMA_READ, &g.key, 8192, buf, sizeof buf), ERMA_OK);
    assert_memory_equal(buf, f.mem + 8192, sizeof buf);
    memset(buf, 0xab, sizeof buf);
    assert_int_equal(op(&f, 1, ERMA_RMA_WRITE, &g.key, 0, buf, 512), ERMA_OK);
    assert_memory_equal(f.mem, buf, 512);
    /* a second name without info */
    assert_int_equal(erma_keys_export(f.keys, "t2", f.region, NULL, 0), ERMA_OK);
    g = fetch(&f, 2, "t2");
    assert_int_equal(g.status, ERMA_OK);
    assert_int_equal(g.info_len, 0);
    assert_int_equal(op(&f, 2, ERMA_RMA_READ, &g.key, 0, buf, 64), ERMA_OK);
    fx_down(&f);
}

static void test_unknown_name(void **state)
{
    struct fx f;
    fx_up(&f, ON_SIM(state));
    assert_int_equal(fetch(&f, 1, "chair").status, ERMA_ENOREGION);
    assert_int_equal(erma_keys_unexport(f.keys, "table"), ERMA_OK);
    assert_int_equal(fetch(&f, 1, "table").status, ERMA_ENOREGION);
    assert_int_equal(erma_keys_unexport(f.keys, "table"), ERMA_ENOREGION);
    /* exported again, then its region deregistered */
    assert_int_equal(erma_keys_export(f.keys, "table", f.region, NULL, 0), ERMA_OK);
    assert_int_equal(fetch(&f, 1, "table").status, ERMA_OK);
    assert_int_equal(erma_region_deregister(f.w.rma[0], f.region), ERMA_OK);
    assert_int_equal(fetch(&f, 1, "table").status, ERMA_ENOREGION);
    fx_down(&f);
}

/* The key is bound to the address its request came from. */
static void test_other_endpoint(void **state)
{
    struct fx f;
    fx_up(&f, ON_SIM(state));
    struct got a = fetch(&f, 1, "table");
    assert_int_equal(a.status, ERMA_OK);
    uint8_t buf[256];
    assert_int_equal(op(&f, 2, ERMA_RMA_READ, &a.key, 0, buf, sizeof buf), ERMA_EAUTH);
    assert_int_equal(op(&f, 1, ERMA_RMA_READ, &a.key, 0, buf, sizeof buf), ERMA_OK);
    fx_down(&f);
}

/* Raw requests of the service's type, answered [i32 status]. */
struct raw {
    bool done;
    int status;
    uint32_t size;
    uint8_t b[8];
};

static void raw_cont(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    struct raw *r = tag;
    r->done = true;
    r->status = status;
    r->size = resp->size;
    memcpy(r->b, resp->data, resp->size < 8 ? resp->size : 8);
}

static bool raw_done(void *ctx)
{
    return ((struct raw *)ctx)->done;
}

static int raw_status(struct fx *f, const uint8_t *body, size_t len)
{
    struct erma_msgbuf req, resp;
    struct raw r = {0};
    assert_int_equal(erma_msgbuf_alloc(f->w.rpc[1], len ? len : 1, &req), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(f->w.rpc[1], 256, &resp), ERMA_OK);
    assert_int_equal(erma_msgbuf_resize(&req, len), ERMA_OK);
    if (len)
        memcpy(req.data, body, len);
    assert_int_equal(erma_rpc_call(f->w.rpc[1], f->sess[1], ERMA_KEYS_REQ_TYPE, &req, &resp,
                                   raw_cont, &r),
                     ERMA_OK);
    assert_true(world_run(&f->w, 5 * SEC, raw_done, &r));
    assert_int_equal(r.status, ERMA_OK);
    erma_msgbuf_free(f->w.rpc[1], &req);
    erma_msgbuf_free(f->w.rpc[1], &resp);
    const int st = (int32_t)erma_get_le(r.b, 4);
    assert_int_equal(r.size, st == ERMA_OK ? 4 + ERMA_RKEY_PACKED_BYTES + 1 + 8 : 4);
    return st;
}

static void test_malformed(void **state)
{
    struct fx f;
    fx_up(&f, ON_SIM(state));
    uint8_t m[80] = {1, 5, 1, 0, 0, 0, 0, 0, 0, 0, 't', 'a', 'b', 'l', 'e'};
    assert_int_equal(raw_status(&f, m, 15), ERMA_OK); /* well formed: the key */
    assert_int_equal(raw_status(&f, m, 0), ERMA_EBADPKT);  /* empty */
    assert_int_equal(raw_status(&f, m, 9), ERMA_EBADPKT);  /* short header */
    assert_int_equal(raw_status(&f, m, 14), ERMA_EBADPKT); /* name cut */
    assert_int_equal(raw_status(&f, m, 16), ERMA_EBADPKT); /* a byte too many */
    m[0] = 2; /* version */
    assert_int_equal(raw_status(&f, m, 15), ERMA_EBADPKT);
    m[0] = 1;
    m[1] = 0; /* empty name */
    assert_int_equal(raw_status(&f, m, 10), ERMA_EBADPKT);
    m[1] = 64; /* name too long */
    assert_int_equal(raw_status(&f, m, 74), ERMA_EBADPKT);
    m[1] = 5;
    m[12] = 0; /* a NUL in the name */
    assert_int_equal(raw_status(&f, m, 15), ERMA_EBADPKT);
    /* the service lives on: a good fetch still works */
    assert_int_equal(fetch(&f, 1, "table").status, ERMA_OK);
    /* a malformed answer fails the fetch */
    assert_int_equal(fetch_type(&f, 1, BOGUS_TYPE, "table").status, ERMA_EBADPKT);
    fx_down(&f);
}

static void test_rekey(void **state)
{
    struct fx f;
    fx_up(&f, ON_SIM(state));
    struct got old = fetch(&f, 1, "table");
    assert_int_equal(old.status, ERMA_OK);
    uint8_t buf[256];
    assert_int_equal(op(&f, 1, ERMA_RMA_READ, &old.key, 0, buf, sizeof buf), ERMA_OK);
    assert_int_equal(erma_region_rekey(f.w.rma[0], f.region, NULL, 0), ERMA_OK);
    assert_int_equal(op(&f, 1, ERMA_RMA_READ, &old.key, 0, buf, sizeof buf), ERMA_ESUPERSEDED);
    struct got now = fetch(&f, 1, "table");
    assert_int_equal(now.status, ERMA_OK);
    assert_int_equal(now.key.key_gen, old.key.key_gen + 1);
    assert_int_equal(op(&f, 1, ERMA_RMA_READ, &now.key, 0, buf, sizeof buf), ERMA_OK);
    assert_memory_equal(buf, f.mem, sizeof buf);
    fx_down(&f);
}

/* A destroyed service's endpoint answers ERMA_ENOTSUP (its nexus keeps
 * the handler); one created again serves again. */
static void test_destroyed(void **state)
{
    struct fx f;
    fx_up(&f, ON_SIM(state));
    erma_keys_destroy(f.keys);
    assert_int_equal(fetch(&f, 1, "table").status, ERMA_ENOTSUP);
    assert_int_equal(erma_keys_create(f.w.rpc[0], f.w.rma[0], ERMA_KEYS_REQ_TYPE, &f.keys),
                     ERMA_OK);
    assert_int_equal(erma_keys_export(f.keys, "table", f.region, NULL, 0), ERMA_OK);
    assert_int_equal(fetch(&f, 1, "table").status, ERMA_OK);
    /* no service on host 2's endpoint: the nexus has no handler for it */
    f.sess[1] = erma_session_create(f.w.rpc[1], f.w.uri[2], 0);
    assert_true(f.sess[1] >= 0);
    assert_int_equal(fetch(&f, 1, "table").status, ERMA_ENOHANDLER);
    fx_down(&f);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    struct fx f;
    fx_up(&f, true);
    struct erma_keys *k2;
    char long_name[ERMA_KEYS_NAME_MAX + 2];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = 0;
    uint8_t info[ERMA_KEYS_INFO_MAX + 1] = {0};
    assert_int_equal(erma_keys_create(f.w.rpc[0], f.w.rma[0], ERMA_KEYS_REQ_TYPE, &k2),
                     ERMA_EAGAIN);
    assert_int_equal(erma_keys_create(f.w.rpc[0], f.w.rma[1], ERMA_KEYS_REQ_TYPE, &k2),
                     ERMA_EINVAL); /* two endpoints */
    assert_int_equal(erma_keys_create(f.w.rpc[0], f.w.rma[0], BOGUS_TYPE, &k2),
                     ERMA_EINVAL); /* another handler's type */
    assert_int_equal(erma_keys_create(NULL, f.w.rma[0], 1, &k2), ERMA_EINVAL);
    assert_int_equal(erma_keys_export(f.keys, "table", f.region, NULL, 0), ERMA_EINVAL);
    assert_int_equal(erma_keys_export(f.keys, "", f.region, NULL, 0), ERMA_EINVAL);
    assert_int_equal(erma_keys_export(f.keys, long_name, f.region, NULL, 0), ERMA_EINVAL);
    long_name[ERMA_KEYS_NAME_MAX] = 0; /* the longest name */
    assert_int_equal(erma_keys_export(f.keys, long_name, f.region, info, ERMA_KEYS_INFO_MAX),
                     ERMA_OK);
    assert_int_equal(erma_keys_export(f.keys, "x", f.region, info, sizeof info), ERMA_EINVAL);
    assert_int_equal(erma_keys_export(f.keys, "x", f.region, NULL, 3), ERMA_EINVAL);
    assert_int_equal(erma_keys_export(f.keys, "x", f.region + 1, NULL, 0), ERMA_ENOREGION);
    assert_int_equal(erma_keys_unexport(f.keys, NULL), ERMA_EINVAL);
    struct got g = fetch(&f, 1, long_name);
    assert_int_equal(g.status, ERMA_OK);
    assert_int_equal(g.info_len, ERMA_KEYS_INFO_MAX);
    assert_int_equal(erma_keys_fetch(f.w.rpc[1], f.w.rma[2], f.sess[1], ERMA_KEYS_REQ_TYPE,
                                     "table", on_key, &g),
                     ERMA_EINVAL); /* two endpoints */
    assert_int_equal(erma_keys_fetch(f.w.rpc[1], f.w.rma[1], f.sess[1], ERMA_KEYS_REQ_TYPE, "",
                                     on_key, &g),
                     ERMA_EINVAL);
    long_name[ERMA_KEYS_NAME_MAX] = 'n';
    assert_int_equal(erma_keys_fetch(f.w.rpc[1], f.w.rma[1], f.sess[1], ERMA_KEYS_REQ_TYPE,
                                     long_name, on_key, &g),
                     ERMA_EINVAL);
    assert_int_equal(erma_keys_fetch(f.w.rpc[1], f.w.rma[1], 99, ERMA_KEYS_REQ_TYPE, "table",
                                     on_key, &g),
                     ERMA_ENOENT);
    struct erma_rkey k;
    assert_int_equal(erma_keys_fetch_wait(f.w.rpc[1], f.w.rma[1], f.sess[1], ERMA_KEYS_REQ_TYPE,
                                          "table", SEC, &k, NULL, NULL),
                     ERMA_ENOTSUP); /* the sim */
    fx_down(&f);
}

/* ---- the blocking fetch, on udp with the server's loop on a thread ---- */

static void test_fetch_wait(void **state)
{
    (void)state;
    struct fx f;
    fx_up(&f, false);
    struct loop_thread s;
    loop_thread_start(&s, f.w.ep[0]);
    struct erma_rkey k;
    uint8_t info[ERMA_KEYS_INFO_MAX];
    size_t n = sizeof info;
    assert_int_equal(erma_keys_fetch_wait(f.w.rpc[1], f.w.rma[1], f.sess[1], ERMA_KEYS_REQ_TYPE,
                                          "table", 10 * SEC, &k, info, &n),
                     ERMA_OK);
    assert_int_equal(n, 8);
    assert_memory_equal(info, "geometry", 8);
    n = 4; /* too short for the info: the key comes, and the length needed */
    assert_int_equal(erma_keys_fetch_wait(f.w.rpc[1], f.w.rma[1], f.sess[1], ERMA_KEYS_REQ_TYPE,
                                          "table", 10 * SEC, &k, info, &n),
                     ERMA_E2BIG);
    assert_int_equal(n, 8);
    assert_int_equal(erma_keys_fetch_wait(f.w.rpc[1], f.w.rma[1], f.sess[1], ERMA_KEYS_REQ_TYPE,
                                          "nothing", 10 * SEC, &k, NULL, NULL),
                     ERMA_ENOREGION);
    assert_int_equal(erma_keys_fetch_wait(f.w.rpc[1], f.w.rma[1], f.sess[1], ERMA_KEYS_REQ_TYPE,
                                          "table", 10 * SEC, &k, NULL, NULL),
                     ERMA_OK);
    loop_thread_stop(&s);
    /* the server's loop stopped: ERMA_ETIMEDOUT; the answer, once the loop
     * runs again, goes to no one (and frees what the wait left) */
    assert_int_equal(erma_keys_fetch_wait(f.w.rpc[1], f.w.rma[1], f.sess[1], ERMA_KEYS_REQ_TYPE,
                                          "table", SEC / 20, &k, NULL, NULL),
                     ERMA_ETIMEDOUT);
    world_run(&f.w, SEC / 5, NULL, NULL);
    uint8_t buf[512];
    int rc = ERMA_ETIMEDOUT;
    for (int i = 0; i < 3 && rc == ERMA_ETIMEDOUT; i++) /* a loaded host may stall a try */
        rc = op(&f, 1, ERMA_RMA_READ, &k, 100, buf, sizeof buf);
    assert_int_equal(rc, ERMA_OK);
    assert_memory_equal(buf, f.mem + 100, sizeof buf);
    fx_down(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_fetch_read_write, &SIM),
        cmocka_unit_test_prestate(test_fetch_read_write, &UDP),
        cmocka_unit_test_prestate(test_unknown_name, &SIM),
        cmocka_unit_test_prestate(test_unknown_name, &UDP),
        cmocka_unit_test_prestate(test_other_endpoint, &SIM),
        cmocka_unit_test_prestate(test_other_endpoint, &UDP),
        cmocka_unit_test_prestate(test_malformed, &SIM),
        cmocka_unit_test_prestate(test_malformed, &UDP),
        cmocka_unit_test_prestate(test_rekey, &SIM),
        cmocka_unit_test_prestate(test_rekey, &UDP),
        cmocka_unit_test_prestate(test_destroyed, &SIM),
        cmocka_unit_test_prestate(test_destroyed, &UDP),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_fetch_wait),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
