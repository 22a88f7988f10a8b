/* The kv service over erma RPC on udp loopback: the server in another process. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "erma/clock.h"
#include "kv/kv.h"
#include "erma/sdk/rand.h"
#include "erma/rpc.h"
#include "ports.h"

#define BASE 10
#define KEYS 10000

static char server_uri[64], client_uri[64];
static pid_t server_pid;

static void server_main(void)
{
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    struct erma_rpc *rpc;
    struct kv *kv;
    struct kv_server *srv;
    const struct erma_nexus_cfg ncfg = {.workers = 1};
    int rc = kv_create(1 << 15, 64u << 20, &kv);
    if (rc == ERMA_OK)
        rc = erma_nexus_create(&ncfg, &nx);
    if (rc == ERMA_OK)
        rc = kv_serve(nx, BASE, kv, &srv);
    if (rc == ERMA_OK)
        rc = erma_endpoint_create(server_uri, 0, NULL, &ep);
    if (rc == ERMA_OK)
        rc = erma_rpc_create(nx, ep, NULL, &rpc);
    if (rc != ERMA_OK) {
        fprintf(stderr, "kv server: %s\n", erma_strerror(rc));
        _exit(2);
    }
    const uint64_t end = erma_now_ns() + 120000000000ull;
    while (erma_now_ns() < end && getppid() != 1)
        erma_endpoint_run(ep, 10000000);
    _exit(0);
}

struct client {
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    struct erma_rpc *rpc;
    int sess;
    struct erma_msgbuf req, resp;
    int done, status;
};

static void on_done(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    (void)resp;
    struct client *c = tag;
    c->done = 1;
    c->status = status;
}

static int wait_connected(struct client *c, int s)
{
    for (int i = 0; i < 3000 && !erma_session_connected(c->rpc, s); i++)
        erma_endpoint_run(c->ep, 1000000);
    assert_true(erma_session_connected(c->rpc, s));
    return s;
}

static void client_up(struct client *c)
{
    memset(c, 0, sizeof *c);
    assert_int_equal(erma_nexus_create(NULL, &c->nx), ERMA_OK);
    assert_int_equal(erma_endpoint_create(client_uri, 0, NULL, &c->ep), ERMA_OK);
    const struct erma_rpc_cfg cfg = {.failure_ns = 5000000000ull}; /* the server may be slow to start */
    assert_int_equal(erma_rpc_create(c->nx, c->ep, &cfg, &c->rpc), ERMA_OK);
    c->sess = wait_connected(c, erma_session_create(c->rpc, server_uri, 0));
    assert_int_equal(erma_msgbuf_alloc(c->rpc, 4096, &c->req), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(c->rpc, 4096, &c->resp), ERMA_OK);
}

/* Sends c->req as op and waits; returns the server's status. */
static int call(struct client *c, enum kv_op op)
{
    c->done = 0;
    assert_int_equal(erma_rpc_call(c->rpc, c->sess, BASE + op, &c->req, &c->resp, on_done, c),
                     ERMA_OK);
    const uint64_t end = erma_now_ns() + 5000000000ull;
    while (!c->done && erma_now_ns() < end)
        erma_endpoint_run_once(c->ep);
    assert_int_equal(c->done, 1);
    assert_int_equal(c->status, ERMA_OK);
    return kv_resp(&c->resp, NULL, NULL);
}

static uint32_t make_key(uint32_t k, char *key)
{
    return (uint32_t)snprintf(key, 32, "k%06u", k); /* ordered like k */
}

static uint32_t make_val(uint32_t k, uint32_t version, uint8_t *v)
{
    const uint32_t len = 20 + (k * 7 + version) % 200;
    for (uint32_t i = 0; i < len; i++)
        v[i] = (uint8_t)(k + version * 3 + i);
    return len;
}

static uint32_t version[KEYS]; /* 0: absent */

static void check_scan(struct client *c, uint32_t from, uint32_t count)
{
    char key[32];
    assert_int_equal(kv_req_scan(&c->req, key, make_key(from, key), count), ERMA_OK);
    assert_int_equal(call(c, KV_SCAN), ERMA_OK);
    uint32_t cursor = 0, k = from, n = 0, klen, vlen;
    const uint8_t *kp, *vp;
    uint8_t want[256];
    while (kv_resp_scan(&c->resp, &cursor, &kp, &klen, &vp, &vlen) == ERMA_OK) {
        while (k < KEYS && !version[k])
            k++;
        assert_true(k < KEYS);
        assert_int_equal(klen, make_key(k, key));
        assert_memory_equal(kp, key, klen);
        assert_int_equal(vlen, make_val(k, version[k], want));
        assert_memory_equal(vp, want, vlen);
        k++;
        n++;
    }
    uint32_t expect = 0;
    for (uint32_t j = from; j < KEYS && expect < count; j++)
        expect += version[j] != 0;
    assert_int_equal(n, expect);
}

static void test_agrees_with_model(void **state)
{
    (void)state;
    struct client c;
    client_up(&c);
    struct erma_rand r;
    erma_rand_seed(&r, 5);
    char key[32];
    uint8_t val[256], want[256];
    memset(version, 0, sizeof version);
    for (int op = 0; op < 20000; op++) {
        const uint32_t k = (uint32_t)erma_rand_below(&r, KEYS), kl = make_key(k, key);
        const uint64_t what = erma_rand_below(&r, 10);
        if (what < 5) {
            const uint32_t vl = make_val(k, ++version[k], val);
            assert_int_equal(kv_req_put(&c.req, key, kl, val, vl), ERMA_OK);
            assert_int_equal(call(&c, KV_PUT), ERMA_OK);
        } else if (what < 6) {
            assert_int_equal(kv_req_del(&c.req, key, kl), ERMA_OK);
            assert_int_equal(call(&c, KV_DEL), version[k] ? ERMA_OK : ERMA_ENOENT);
            version[k] = 0;
        } else {
            assert_int_equal(kv_req_get(&c.req, key, kl), ERMA_OK);
            const int rc = call(&c, KV_GET);
            if (!version[k]) {
                assert_int_equal(rc, ERMA_ENOENT);
                continue;
            }
            const uint8_t *v;
            uint32_t vl;
            assert_int_equal(kv_resp(&c.resp, &v, &vl), ERMA_OK);
            assert_int_equal(vl, make_val(k, version[k], want));
            assert_memory_equal(v, want, vl);
        }
    }
    for (uint32_t from = 0; from < KEYS; from += 1234)
        check_scan(&c, from, 300);
    check_scan(&c, 0, KEYS); /* all of them, in many chunks */
    /* malformed requests get a precise error, not a crash */
    memset(c.req.data, 0xff, 16);
    c.req.size = 16;
    assert_int_equal(call(&c, KV_GET), ERMA_EBADPKT);
    assert_int_equal(call(&c, KV_PUT), ERMA_EBADPKT);
    assert_int_equal(call(&c, KV_SCAN), ERMA_EBADPKT);
    erma_rpc_destroy(c.rpc);
    erma_endpoint_destroy(c.ep);
    erma_nexus_destroy(c.nx);
}

int main(void)
{
    const int base = test_port_base(8);
    snprintf(server_uri, sizeof server_uri, "udp://127.0.0.1:%d", base);
    snprintf(client_uri, sizeof client_uri, "udp://127.0.0.1:%d", base + 4);
    server_pid = fork();
    if (server_pid == 0)
        server_main();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_agrees_with_model),
    };
    const int rc = cmocka_run_group_tests(tests, NULL, NULL);
    int status = 0;
    if (waitpid(server_pid, &status, WNOHANG) == server_pid) {
        fprintf(stderr, "test_kv_rpc: the server died early (status %#x)\n", status);
        return 1;
    }
    kill(server_pid, SIGKILL);
    waitpid(server_pid, NULL, 0);
    return rc;
}
