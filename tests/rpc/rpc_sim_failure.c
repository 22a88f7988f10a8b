/* test_rpc_sim (the RPC layer over the sim fabric, virtual time): servers
 * that die, come back, stay silent or answer late. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "endpoint/proto.h"
#include "erma/clock.h"
#include "erma/sdk/rand.h"
#include "erma/sim.h"
#include "erma/sdk/transport_driver.h"
#include "erma/sdk/wire.h"
#include "rpc/internal.h"
#include "../bench/bench.h"
#include "log_capture.h"
#include "rpc_util.h"
#include "rpc_world.h"
#include "test_rpc_sim.h"

/* ---- a server that dies, and one that comes back ---- */

struct fail_track {
    int done, peer_failed, cancelled, other;
    uint64_t last_ns;
    struct erma_msgbuf req[8], resp[8];
};

static void on_fail_cont(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    (void)resp;
    struct fail_track *t = tag;
    t->done++;
    if (status == ERMA_EPEERFAILED)
        t->peer_failed++;
    else if (status == ERMA_ECANCELLED)
        t->cancelled++;
    else
        t->other++;
    t->last_ns = erma_now_ns();
}

static bool all_failed(void *ctx)
{
    return ((struct fail_track *)ctx)->done == 8;
}

void test_peer_failure(void **state)
{
    (void)state;
    for (int restart_fast = 0; restart_fast < 2; restart_fast++) {
        struct world w;
        world_up(&w, restart_fast ? "restart" : "death", 2, 0, 0);
        world_start(&w);
        const int s = connect(&w, 0, 1);
        struct fail_track t = {0};
        for (int i = 0; i < 8; i++) {
            assert_int_equal(erma_msgbuf_alloc(w.rpc[0], 1 << 20, &t.req[i]), ERMA_OK);
            assert_int_equal(erma_msgbuf_alloc(w.rpc[0], 64, &t.resp[i]), ERMA_OK);
            fill_req(&t.req[i], (uint32_t)i, 1 << 20);
            assert_int_equal(erma_rpc_call(w.rpc[0], s, ECHO, &t.req[i], &t.resp[i],
                                           on_fail_cont, &t),
                             ERMA_OK);
        }
        int never = 0;
        run_until(&w, &never, 100000); /* mid-stream */
        assert_int_equal(t.done, 0);
        world_rpc_down(&w, 1);
        const uint64_t killed = erma_now_ns();
        if (restart_fast)
            world_rpc(&w, 1, NULL, NULL);
        struct erma_endpoint *live[2] = {w.ep[0], w.ep[1]};
        assert_int_equal(erma_sim_run(w.sim, live, restart_fast ? 2 : 1, 1000000000ull,
                                      all_failed, &t),
                         ERMA_OK);
        assert_int_equal(t.peer_failed, 8);
        assert_int_equal(t.other, 0);
        const struct erma_rpc_cfg c = sim_cfg(&w);
        assert_true(t.last_ns - killed <= c.failure_ns + 2 * c.rto_ns);
        print_message("  %s: all 8 pending calls failed %.1f ms after the kill\n",
                      restart_fast ? "restarted" : "dead", (t.last_ns - killed) / 1e6);
        assert_int_equal(w.sm_events[ERMA_SM_PEER_FAILED], 1);
        if (!restart_fast)
            world_rpc(&w, 1, NULL, NULL);
        const int s2 = connect(&w, 0, 1);
        call_once(&w, 0, s2, ECHO, 5000, 70000, 9, ERMA_OK);
        for (int i = 0; i < 8; i++) {
            erma_msgbuf_free(w.rpc[0], &t.req[i]);
            erma_msgbuf_free(w.rpc[0], &t.resp[i]);
        }
        world_down(&w);
    }
}

void test_disconnect(void **state)
{
    (void)state;
    struct world w;
    world_up(&w, "disconnect", 2, 0, 0);
    world_start(&w);
    const uint32_t server_free = erma_rpc_free_sessions(w.rpc[1]);
    const int s = connect(&w, 0, 1);
    assert_int_equal(erma_rpc_free_sessions(w.rpc[1]), server_free - 1);
    struct fail_track t = {0};
    for (int i = 0; i < 8; i++) {
        assert_int_equal(erma_msgbuf_alloc(w.rpc[0], 100000, &t.req[i]), ERMA_OK);
        assert_int_equal(erma_msgbuf_alloc(w.rpc[0], 64, &t.resp[i]), ERMA_OK);
        fill_req(&t.req[i], (uint32_t)i, 10);
        assert_int_equal(erma_rpc_call(w.rpc[0], s, ECHO, &t.req[i], &t.resp[i],
                                       on_fail_cont, &t),
                         ERMA_OK);
    }
    assert_int_equal(erma_session_destroy(w.rpc[0], s), ERMA_OK);
    assert_int_equal(erma_session_destroy(w.rpc[0], s), ERMA_ENOENT); /* already going */
    int never = 0;
    run_until(&w, &never, 5000000);
    assert_int_equal(t.done, 8);
    assert_int_equal(t.cancelled, 8);
    assert_int_equal(w.sm_events[ERMA_SM_DISCONNECTED], 1);
    assert_int_equal(w.sm_last_err, ERMA_OK);
    assert_int_equal(erma_rpc_free_sessions(w.rpc[1]), server_free);
    assert_false(erma_session_connected(w.rpc[0], s));
    struct erma_msgbuf m1, m2;
    assert_int_equal(erma_msgbuf_alloc(w.rpc[0], 8, &m1), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(w.rpc[0], 8, &m2), ERMA_OK);
    assert_int_equal(erma_rpc_call(w.rpc[0], s, ECHO, &m1, &m2, on_call, NULL),
                     ERMA_ENOENT);
    erma_msgbuf_free(w.rpc[0], &m1);
    erma_msgbuf_free(w.rpc[0], &m2);
    for (int i = 0; i < 8; i++) {
        erma_msgbuf_free(w.rpc[0], &t.req[i]);
        erma_msgbuf_free(w.rpc[0], &t.resp[i]);
    }
    /* a new session reuses the number and works */
    const int s2 = connect(&w, 0, 1);
    call_once(&w, 0, s2, ECHO, 50, 50, 3, ERMA_OK);
    world_down(&w);
}

/* Two hosts, host 1 with fn for type (a handler slow to answer, or never),
 * host 0's requests timing out after req_timeout_ns (its cfg in *c); the
 * session between them. */
static int world_slow(struct world *w, const char *name, uint8_t type, erma_handler_fn fn,
                      uint64_t req_timeout_ns, struct erma_rpc_cfg *c)
{
    world_up(w, name, 2, 0, 0);
    assert_int_equal(erma_handler_register(w->nx[1], type, fn, ERMA_DISPATCH, NULL), ERMA_OK);
    *c = sim_cfg(w);
    c->req_timeout_ns = req_timeout_ns;
    world_rpc(w, 0, c, NULL);
    world_rpc(w, 1, NULL, NULL);
    return connect(w, 0, 1);
}

/* A handler that never answers: the client gives up after req_timeout_ns. */
#define SILENT 3
static int silent_calls;
static void silent_handler(struct erma_req *req, void *ctx)
{
    (void)req;
    (void)ctx;
    silent_calls++;
}

void test_request_timeout(void **state)
{
    (void)state;
    struct world w;
    struct erma_rpc_cfg c;
    const int s = world_slow(&w, "timeout", SILENT, silent_handler, 20000000, &c);
    const uint64_t t0 = erma_now_ns();
    call_once(&w, 0, s, SILENT, REQ_HDR, 8, 1, ERMA_ETIMEDOUT);
    const uint64_t took = erma_now_ns() - t0;
    assert_true(took >= c.req_timeout_ns && took < c.req_timeout_ns + 2 * c.rto_ns);
    assert_int_equal(silent_calls, 1); /* retransmissions did not run it again */
    call_once(&w, 0, s, ECHO, 100, 100, 2, ERMA_OK); /* the session is fine */
    world_down(&w);
}

/* A handler that answers later: it keeps its request, and the test answers. */
#define DEFER 4
static struct erma_req *deferred;
static uint8_t deferred_bytes[REQ_HDR];
static int deferred_calls;
static void defer_handler(struct erma_req *req, void *ctx)
{
    (void)ctx;
    deferred = req;
    deferred_calls++;
    memcpy(deferred_bytes, erma_req_data(req), sizeof deferred_bytes);
}

/* Answers the held request with its own bytes, checking they are still there. */
static void answer_deferred(void)
{
    assert_non_null(deferred);
    assert_int_equal(erma_req_size(deferred), REQ_HDR);
    assert_memory_equal(erma_req_data(deferred), deferred_bytes, REQ_HDR);
    struct erma_msgbuf *r = erma_req_resp_buf(deferred);
    memcpy(r->data, "LATE", 4);
    assert_int_equal(erma_msgbuf_resize(r, 4), ERMA_OK);
    assert_int_equal(erma_req_respond(deferred, r), ERMA_OK);
    deferred = NULL;
}


/* A request whose handler answers later keeps its bytes until it does, but
 * not its slot: requests the client sends on that slot after giving up on
 * it (an unknown type among them) are served at once, and the late answer
 * goes nowhere. (The slot was once reset under the handler: the held bytes
 * freed, the late answer refused or taken for the next request's.) */
void test_deferred_request(void **state)
{
    (void)state;
    struct world w;
    struct erma_rpc_cfg c;
    const int s = world_slow(&w, "deferred", DEFER, defer_handler, 3000000, &c);
    struct call held, unknown, next;
    start_call(&w, s, DEFER, 1, &held);
    assert_int_equal(run_until(&w, &held.done, 1000000000ull), ERMA_OK);
    assert_int_equal(held.status, ERMA_ETIMEDOUT); /* the client gave up; the handler holds it */
    assert_int_equal(deferred_calls, 1);
    start_call(&w, s, 99, 2, &unknown); /* the same slot, no handler: the REQ_ERROR path */
    assert_int_equal(run_until(&w, &unknown.done, 1000000000ull), ERMA_OK);
    assert_int_equal(unknown.status, ERMA_ENOHANDLER);
    start_call(&w, s, ECHO, 3, &next);
    assert_int_equal(run_until(&w, &next.done, 1000000000ull), ERMA_OK);
    assert_int_equal(next.status, ERMA_OK);
    answer_deferred(); /* its bytes are intact; the answer reaches no request */
    int never = 0;
    run_until(&w, &never, 10000000);
    assert_int_equal(held.done, 1);
    assert_int_equal(next.done, 1);
    assert_int_equal(check_resp(&next.resp, 3, 8), 0);
    end_call(&w, &held);
    end_call(&w, &unknown);
    end_call(&w, &next);
    /* held when its session goes: the answer after that frees what it kept */
    start_call(&w, s, DEFER, 4, &held);
    run_until(&w, &never, 1000000);
    assert_non_null(deferred);
    assert_int_equal(erma_session_destroy(w.rpc[0], s), ERMA_OK);
    run_until(&w, &never, 100000000);
    answer_deferred();
    run_until(&w, &never, 1000000);
    end_call(&w, &held);
    const int s2 = connect(&w, 0, 1);
    call_once(&w, 0, s2, ECHO, 50, 50, 5, ERMA_OK);
    assert_int_equal(deferred_calls, 2);
    world_down(&w);
}

/* ---- a request type the server has no handler for ---- */

static void call_type(struct world *w, int sess, uint8_t type, uint32_t id, int expect)
{
    struct call c;
    start_call(w, sess, type, id, &c);
    assert_int_equal(run_until(w, &c.done, 1000000000ull), ERMA_OK);
    assert_int_equal(c.status, expect);
    end_call(w, &c);
}

/* Its client gets a code of its own (not a session's ERMA_ENOENT), the
 * server warns once per type, naming it, and a handler registered while
 * the rpcs run (one thread here) serves the next request. */
void test_unregistered_type(void **state)
{
    (void)state;
    struct world w;
    world_up(&w, "unregistered", 2, 0, 0);
    world_start(&w);
    const int s = connect(&w, 0, 1);
    struct log_capture cap;
    log_capture_start(&cap);
    call_type(&w, s, 77, 1, ERMA_ENOHANDLER);
    call_type(&w, s, 77, 2, ERMA_ENOHANDLER);
    call_type(&w, s, 78, 3, ERMA_ENOHANDLER);
    char *log = log_capture_end(&cap);
    assert_int_equal(log_count(log, "erma warn:", "request type 77"), 1);
    assert_int_equal(log_count(log, "erma warn:", "request type 78"), 1);
    free(log);
    assert_int_equal(erma_handler_register(w.nx[1], 77, echo_handler, ERMA_DISPATCH, &w.echo[1]),
                     ERMA_OK);
    assert_int_equal(erma_handler_register(w.nx[1], 77, echo_handler, ERMA_DISPATCH, NULL),
                     ERMA_EINVAL); /* taken */
    assert_int_equal(erma_handler_register(w.nx[1], 77, echo_handler, ERMA_WORKER, &w.echo[1]),
                     ERMA_EINVAL); /* taken, though the mode is the only difference */
    assert_int_equal(erma_handler_register(w.nx[1], 77, echo_handler, ERMA_DISPATCH, &w.echo[1]),
                     ERMA_OK); /* the same registration again */
    assert_ptr_equal(erma_rpc_nexus(w.rpc[1]), w.nx[1]);
    call_once(&w, 0, s, 77, REQ_HDR, 8, 4, ERMA_OK);
    assert_int_equal(atomic_load(&w.echo[1].calls), 1);
    world_down(&w);
}
