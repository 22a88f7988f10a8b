/* test_rpc_reconnect (sim fabric, virtual time): client sessions with
 * cfg.reconnect whose server is killed and restarted (rpc.h, Session
 * lifecycle), with and without a psk, and the same without reconnect. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "erma/clock.h"
#include "erma/sim.h"
#include "rpc_util.h"
#include "rpc_world.h"

#define MS 1000000ull
#define IDS 4096
#define SENT 8   /* calls on the slots when the server dies */
#define WAITING 4 /* calls behind them, not yet sent */
#define LATER 4  /* calls made while the session reconnects */

static const uint8_t psk[ERMA_PSK_BYTES] = "erma test key: 32 bytes long...";

/* A call that logs its status in its world's order log. */
struct rcall {
    struct world *w;
    uint32_t id;
    int done, status;
    struct erma_msgbuf req, resp;
};

static void on_rcall(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    (void)resp;
    struct rcall *c = tag;
    c->status = status;
    c->done++;
    world_log(c->w, status);
}

static int rcall_start(struct world *w, int s, uint32_t id, struct rcall *c)
{
    memset(c, 0, sizeof *c);
    c->w = w;
    c->id = id;
    assert_int_equal(erma_msgbuf_alloc(w->rpc[0], REQ_HDR, &c->req), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(w->rpc[0], 64, &c->resp), ERMA_OK);
    fill_req(&c->req, id, 8);
    return erma_rpc_call(w->rpc[0], s, ECHO, &c->req, &c->resp, on_rcall, c);
}

static void rcall_end(struct world *w, struct rcall *c)
{
    erma_msgbuf_free(w->rpc[0], &c->req);
    erma_msgbuf_free(w->rpc[0], &c->resp);
}

/* Two hosts, each nexus with key (NULL: none) and the echo handler that
 * counts executions per id; host 0 the client with mode. */
static void up(struct world *w, const char *name, const uint8_t *key, enum erma_reconnect mode,
               uint32_t queue, uint64_t give_up_ns)
{
    memset(w, 0, sizeof *w);
    struct erma_sim_cfg sc;
    erma_sim_cfg_default(&sc);
    sc.hosts = 2;
    assert_int_equal(erma_sim_create(name, &sc, &w->sim), ERMA_OK);
    erma_sim_use_clock(w->sim);
    w->hosts = 2;
    for (unsigned h = 0; h < 2; h++) {
        const struct erma_nexus_cfg nc = {.psk = key};
        snprintf(w->uri[h], sizeof w->uri[h], "sim://%s/%u:31850", name, h);
        assert_int_equal(erma_nexus_create(&nc, &w->nx[h]), ERMA_OK);
        w->echo[h].per_id = calloc(IDS, sizeof *w->echo[h].per_id);
        w->echo[h].max_id = IDS;
        assert_int_equal(erma_handler_register(w->nx[h], ECHO, echo_handler, ERMA_DISPATCH,
                                               &w->echo[h]),
                         ERMA_OK);
    }
    struct erma_rpc_cfg c = sim_cfg(w);
    c.reconnect = mode;
    c.reconnect_queue = queue;
    c.reconnect_timeout_ns = give_up_ns;
    world_rpc(w, 0, &c, NULL);
    world_rpc(w, 1, NULL, NULL);
}

/* Runs until host 0 saw ev (or ns passed); returns the events seen. */
static int run_to_event(struct world *w, enum erma_sm_event ev, uint64_t ns)
{
    run_until(w, &w->sm_events[ev], ns);
    return w->sm_events[ev];
}

/* The index in w's order log of the first entry equal to what, or -1. */
static int logged_at(const struct world *w, int what)
{
    for (unsigned i = 0; i < w->norder; i++)
        if (w->order[i] == what)
            return (int)i;
    return -1;
}

static bool rcalls_done(void *ctx)
{
    struct rcall *c = ctx;
    for (unsigned i = 0; i < SENT + WAITING + LATER; i++)
        if (!c[i].done)
            return false;
    return true;
}

static void run_calls_done(struct world *w, struct rcall *c, uint64_t ns)
{
    struct erma_endpoint *live[2] = {w->ep[0], w->ep[1]};
    assert_int_equal(erma_sim_run(w->sim, live, w->ep[1] ? 2 : 1, ns, rcalls_done, c), ERMA_OK);
}

/* SENT calls on the slots and WAITING behind them, then the server dies;
 * fast: it comes back at once, else after the client noticed. */
static void kill_server(struct world *w, int s, struct rcall *c, bool fast)
{
    for (uint32_t i = 0; i < SENT + WAITING; i++)
        assert_int_equal(rcall_start(w, s, 100 + i, &c[i]), ERMA_OK);
    world_rpc_down(w, 1);
    if (fast)
        world_rpc(w, 1, NULL, NULL);
    const uint64_t t0 = erma_now_ns();
    /* without a psk a restarted server resets the session as soon as it
     * hears from it; else (and a dead one) after failure_ns (50 ms) */
    assert_int_equal(run_to_event(w, ERMA_SM_RECONNECTING, 500 * MS), 1);
    assert_true(erma_now_ns() - t0 < 500 * MS);
    assert_int_equal(w->sm_last_err, ERMA_EPEERFAILED);
}

/* Queue mode: the number works again, the sent calls fail EPEERFAILED
 * after the event, the others complete once, none runs twice. */
static void reconnect_queue(const uint8_t *key, bool fast)
{
    struct world w;
    up(&w, key ? "rq-psk" : "rq", key, ERMA_RECONNECT_QUEUE, 0, 0);
    const int s = connect(&w, 0, 1);
    call_once(&w, 0, s, ECHO, REQ_HDR, 8, 1, ERMA_OK);
    struct rcall c[SENT + WAITING + LATER];
    kill_server(&w, s, c, fast);
    assert_false(erma_session_connected(w.rpc[0], s));
    for (uint32_t i = SENT + WAITING; i < SENT + WAITING + LATER; i++)
        assert_int_equal(rcall_start(&w, s, 100 + i, &c[i]), ERMA_OK);
    if (!fast)
        world_rpc(&w, 1, NULL, NULL);
    run_calls_done(&w, c, 2000 * MS);
    assert_true(erma_session_connected(w.rpc[0], s));
    assert_int_equal(w.sm_events[ERMA_SM_RECONNECTED], 1);
    assert_int_equal(w.sm_events[ERMA_SM_PEER_FAILED], 0);
    assert_int_equal(w.sm_events[ERMA_SM_CONNECT_FAILED], 0);
    for (uint32_t i = 0; i < SENT + WAITING + LATER; i++) {
        assert_int_equal(c[i].done, 1);
        assert_int_equal(c[i].status, i < SENT ? ERMA_EPEERFAILED : ERMA_OK);
        if (i >= SENT)
            assert_int_equal(check_resp(&c[i].resp, c[i].id, 8), 0);
        assert_true(atomic_load(&w.echo[1].per_id[c[i].id]) <= 1);
        rcall_end(&w, &c[i]);
    }
    assert_int_equal(echo_dups(&w.echo[1]), 0);
    /* the event, then the failed calls; reconnected, then the waiting ones */
    const int lost = logged_at(&w, ORDER_EVENT + ERMA_SM_RECONNECTING);
    const int back = logged_at(&w, ORDER_EVENT + ERMA_SM_RECONNECTED);
    assert_true(lost >= 0 && lost < logged_at(&w, ERMA_EPEERFAILED));
    assert_true(back >= 0 && back < logged_at(&w, ERMA_OK));
    call_once(&w, 0, s, ECHO, 5000, 70000, 9, ERMA_OK);
    assert_int_equal(erma_session_destroy(w.rpc[0], s), ERMA_OK);
    world_down(&w);
}

static void test_reconnect_queue(void **state)
{
    (void)state;
    for (int fast = 0; fast < 2; fast++) {
        reconnect_queue(NULL, fast);
        reconnect_queue(psk, fast);
    }
}

/* Fail mode: every pending call fails EPEERFAILED, calls while it
 * reconnects return ERMA_EAGAIN, then the number works again. */
static void test_reconnect_fail(void **state)
{
    (void)state;
    for (int secure = 0; secure < 2; secure++) {
        struct world w;
        up(&w, "rf", secure ? psk : NULL, ERMA_RECONNECT_FAIL, 0, 0);
        const int s = connect(&w, 0, 1);
        struct rcall c[SENT + WAITING + LATER] = {0};
        kill_server(&w, s, c, false);
        struct rcall extra;
        assert_int_equal(rcall_start(&w, s, 200, &extra), ERMA_EAGAIN);
        rcall_end(&w, &extra);
        for (uint32_t i = SENT + WAITING; i < SENT + WAITING + LATER; i++)
            c[i].done = 1; /* not made */
        world_rpc(&w, 1, NULL, NULL);
        run_calls_done(&w, c, 2000 * MS);
        for (uint32_t i = 0; i < SENT + WAITING; i++) {
            assert_int_equal(c[i].status, ERMA_EPEERFAILED);
            rcall_end(&w, &c[i]);
        }
        assert_int_equal(run_to_event(&w, ERMA_SM_RECONNECTED, 2000 * MS), 1);
        call_once(&w, 0, s, ECHO, REQ_HDR, 8, 2, ERMA_OK);
        assert_int_equal(echo_dups(&w.echo[1]), 0);
        world_down(&w);
    }
}

/* At most cfg.reconnect_queue calls wait; a reconnect that outlasts
 * reconnect_timeout_ns ends the session: CONNECT_FAILED ERMA_ETIMEDOUT,
 * the waiting calls fail so, after it, and the number is gone. */
static void test_reconnect_gives_up(void **state)
{
    (void)state;
    struct world w;
    up(&w, "rg", NULL, ERMA_RECONNECT_QUEUE, WAITING + 1, 300 * MS);
    const int s = connect(&w, 0, 1);
    struct rcall c[SENT + WAITING + LATER];
    kill_server(&w, s, c, false);
    const uint64_t t0 = erma_now_ns();
    struct rcall later[3];
    assert_int_equal(rcall_start(&w, s, 300, &later[0]), ERMA_OK);
    assert_int_equal(rcall_start(&w, s, 301, &later[1]), ERMA_EAGAIN); /* the queue is full */
    assert_int_equal(run_to_event(&w, ERMA_SM_CONNECT_FAILED, 3000 * MS), 1);
    const uint64_t took = erma_now_ns() - t0;
    assert_true(took > 250 * MS && took < 3000 * MS);
    assert_int_equal(w.sm_last_err, ERMA_ETIMEDOUT);
    int never = 0;
    run_until(&w, &never, MS); /* the continuations */
    for (uint32_t i = 0; i < SENT + WAITING; i++) {
        assert_int_equal(c[i].status, i < SENT ? ERMA_EPEERFAILED : ERMA_ETIMEDOUT);
        rcall_end(&w, &c[i]);
    }
    assert_int_equal(later[0].status, ERMA_ETIMEDOUT);
    const int failed = logged_at(&w, ORDER_EVENT + ERMA_SM_CONNECT_FAILED);
    assert_true(failed >= 0 && failed < logged_at(&w, ERMA_ETIMEDOUT));
    assert_int_equal(rcall_start(&w, s, 302, &later[2]), ERMA_ENOENT);
    assert_int_equal(erma_session_destroy(w.rpc[0], s), ERMA_ENOENT);
    for (unsigned i = 0; i < 3; i++)
        rcall_end(&w, &later[i]);
    assert_int_equal(w.sm_events[ERMA_SM_RECONNECTED], 0);
    world_rpc(&w, 1, NULL, NULL);
    world_down(&w);
}

/* Off: PEER_FAILED, then the calls fail; the number is gone at once. */
static void test_reconnect_off(void **state)
{
    (void)state;
    for (int secure = 0; secure < 2; secure++) {
        struct world w;
        up(&w, "ro", secure ? psk : NULL, ERMA_RECONNECT_OFF, 0, 0);
        const int s = connect(&w, 0, 1);
        struct rcall c[SENT + WAITING + LATER] = {0};
        for (uint32_t i = 0; i < SENT + WAITING; i++)
            assert_int_equal(rcall_start(&w, s, 100 + i, &c[i]), ERMA_OK);
        world_rpc_down(&w, 1);
        world_rpc(&w, 1, NULL, NULL);
        for (uint32_t i = SENT + WAITING; i < SENT + WAITING + LATER; i++)
            c[i].done = 1;
        run_calls_done(&w, c, 1000 * MS);
        assert_int_equal(w.sm_events[ERMA_SM_PEER_FAILED], 1);
        assert_int_equal(w.sm_events[ERMA_SM_RECONNECTING], 0);
        for (uint32_t i = 0; i < SENT + WAITING; i++) {
            assert_int_equal(c[i].status, ERMA_EPEERFAILED);
            rcall_end(&w, &c[i]);
        }
        const int ev = logged_at(&w, ORDER_EVENT + ERMA_SM_PEER_FAILED);
        assert_true(ev >= 0 && ev < logged_at(&w, ERMA_EPEERFAILED));
        assert_false(erma_session_connected(w.rpc[0], s));
        assert_int_equal(erma_session_destroy(w.rpc[0], s), ERMA_ENOENT);
        const int s2 = connect(&w, 0, 1);
        call_once(&w, 0, s2, ECHO, REQ_HDR, 8, 3, ERMA_OK);
        world_down(&w);
    }
}

/* A cfg.reconnect that is no mode is refused. */
static void test_reconnect_cfg(void **state)
{
    (void)state;
    struct world w;
    world_up(&w, "rc", 1, 0, 0);
    struct erma_rpc_cfg c = sim_cfg(&w);
    c.reconnect = (enum erma_reconnect)7;
    assert_int_equal(erma_endpoint_create(w.uri[0], 0, NULL, &w.ep[0]), ERMA_OK);
    assert_int_equal(erma_rpc_create(w.nx[0], w.ep[0], &c, &w.rpc[0]), ERMA_EINVAL);
    world_down(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reconnect_queue),
        cmocka_unit_test(test_reconnect_fail),
        cmocka_unit_test(test_reconnect_gives_up),
        cmocka_unit_test(test_reconnect_off),
        cmocka_unit_test(test_reconnect_cfg),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
