/* The RPC layer over the sim fabric, in virtual time: sizes, loss,
 * selective acknowledgement, nested calls, and main(), which runs the
 * tests of rpc_sim_*.c too (test_rpc_sim.h). */
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
#include "rpc_util.h"
#include "rpc_world.h"
#include "test_rpc_sim.h"


/* Requests of 1..7 bytes: the response is the request xor 0x5a. */
static void call_tiny(struct world *w, int sess, uint32_t size)
{
    struct erma_rpc *rpc = w->rpc[0];
    struct call c = {0};
    assert_int_equal(erma_msgbuf_alloc(rpc, size, &c.req), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(rpc, 16, &c.resp), ERMA_OK);
    for (size_t k = 0; k < size; k++)
        c.req.data[k] = tiny_byte(k);
    assert_int_equal(erma_rpc_call(rpc, sess, ECHO, &c.req, &c.resp, on_call, &c), ERMA_OK);
    assert_int_equal(run_until(w, &c.done, 1000000000ull), ERMA_OK);
    assert_int_equal(c.status, ERMA_OK);
    assert_int_equal(c.resp.size, size);
    for (size_t k = 0; k < size; k++)
        assert_int_equal(c.resp.data[k], tiny_byte(k) ^ 0x5a);
    erma_msgbuf_free(rpc, &c.req);
    erma_msgbuf_free(rpc, &c.resp);
}

static void test_sizes(void **state)
{
    (void)state;
    struct world w;
    world_up(&w, "sizes", 2, 0, 0);
    world_start(&w);
    const int s = connect(&w, 0, 1);
    const uint32_t sizes[] = {REQ_HDR, 100, 1455, 1456, 1457, 2912, 2913, 5000, 65536,
                              1 << 20, ERMA_MAX_MSG_SIZE};
    uint32_t id = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        call_once(&w, 0, s, ECHO, sizes[i], sizes[i], id++, ERMA_OK);
        call_once(&w, 0, s, ECHO, sizes[i], 1, id++, ERMA_OK);
        call_once(&w, 0, s, ECHO, REQ_HDR, sizes[i], id++, ERMA_OK);
    }
    call_once(&w, 0, s, ECHO, REQ_HDR, 0, id++, ERMA_OK);
    for (uint32_t n = 1; n < REQ_HDR; n++, id++)
        call_tiny(&w, s, n);
    assert_int_equal(atomic_load(&w.echo[1].bad), 0);
    assert_int_equal(atomic_load(&w.echo[1].calls), id);
    /* an unregistered request type fails with a precise code, not a hang */
    call_once(&w, 0, s, 77, REQ_HDR, 8, id++, ERMA_ENOHANDLER);
    /* a message over 8 MiB cannot even be allocated */
    struct erma_msgbuf big;
    assert_int_equal(erma_msgbuf_alloc(w.rpc[0], ERMA_MAX_MSG_SIZE + 1, &big), ERMA_E2BIG);
    world_down(&w);
}

/* ---- a continuation re-issues its call with the same buffers ---- */

#define REISSUES 50

struct reissue {
    struct world *w;
    int sess;
    uint32_t id;
    int bad, done;
    struct erma_msgbuf req, resp;
};

/* Checks the answer to call id, then sends call id + 1 in the same req and
 * resp, asking for a larger response each time (resp grows). */
static void on_reissue(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    struct reissue *r = tag;
    r->bad += status != ERMA_OK || resp != &r->resp || check_resp(resp, r->id, r->id * 97) != 0;
    if (++r->id == REISSUES) {
        r->done = 1;
        return;
    }
    fill_req(&r->req, r->id, r->id * 97);
    r->bad += erma_rpc_call(rpc, r->sess, ECHO, &r->req, &r->resp, on_reissue, r) != ERMA_OK;
}

static void test_reissue_in_continuation(void **state)
{
    (void)state;
    struct world w;
    world_up(&w, "reissue", 2, 0.01, 0);
    world_start(&w);
    struct reissue r = {.w = &w, .sess = connect(&w, 0, 1)};
    assert_int_equal(erma_msgbuf_alloc(w.rpc[0], 3000, &r.req), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(w.rpc[0], 16, &r.resp), ERMA_OK);
    fill_req(&r.req, 0, 0);
    assert_int_equal(erma_rpc_call(w.rpc[0], r.sess, ECHO, &r.req, &r.resp, on_reissue, &r),
                     ERMA_OK);
    assert_int_equal(run_until(&w, &r.done, 10000000000ull), ERMA_OK);
    assert_int_equal(r.bad, 0);
    assert_int_equal(atomic_load(&w.echo[1].calls), REISSUES);
    assert_true(r.resp.max_size >= (REISSUES - 1) * 97); /* grown, and still ours */
    erma_msgbuf_free(w.rpc[0], &r.req);
    erma_msgbuf_free(w.rpc[0], &r.resp);
    world_down(&w);
}

/* ---- a call from outside the loop leaves at once ---- */

static uint64_t tx_pkts(struct erma_rpc *rpc)
{
    struct erma_endpoint_stats es;
    erma_endpoint_get_stats(erma_rpc_endpoint(rpc), &es);
    return es.tx_pkts;
}

struct at_once {
    int sess, rc, done;
    uint64_t sent; /* packets the endpoint sent during the continuation's call */
    struct call inner;
};

/* Inside the loop a call's packet waits for the pass's flush. */
static void on_outer(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)resp;
    struct at_once *a = tag;
    const uint64_t before = tx_pkts(rpc);
    a->rc = status != ERMA_OK ? status
                              : erma_rpc_call(rpc, a->sess, ECHO, &a->inner.req, &a->inner.resp,
                                              on_call, &a->inner);
    a->sent = tx_pkts(rpc) - before;
    a->done = 1;
}

/* A call from outside the loop that follows a pass sends its request at
 * once while the application calls one at a time (a closed-loop client
 * waits for no pass); a second call before the next pass joins the batch,
 * and after such a burst the next call waits for the pass too, until one
 * lone call again. A continuation's call waits for its pass. */
static void test_call_sends_at_once(void **state)
{
    (void)state;
    struct world w;
    world_up(&w, "at_once", 2, 0, 0);
    world_start(&w);
    const int s = connect(&w, 0, 1);
    int never = 0;
    run_until(&w, &never, 1000000); /* the handshake's packets all sent */
    const int burst[] = {1, 2, 1}; /* calls in a row, each round */
    const bool at_once[] = {false, true, false}; /* no history; lone; after a burst */
    uint32_t id = 0;
    for (int r = 0; r < 3; r++) {
        struct call c[2];
        const uint64_t t = tx_pkts(w.rpc[0]);
        for (int i = 0; i < burst[r]; i++) {
            start_call(&w, s, ECHO, id + (uint32_t)i, &c[i]);
            assert_int_equal(tx_pkts(w.rpc[0]), t + at_once[r]);
        }
        for (int i = 0; i < burst[r]; i++) {
            assert_int_equal(run_until(&w, &c[i].done, 1000000000ull), ERMA_OK);
            assert_int_equal(c[i].status, ERMA_OK);
            assert_int_equal(check_resp(&c[i].resp, id + (uint32_t)i, 8), 0);
            end_call(&w, &c[i]);
        }
        id += (uint32_t)burst[r];
    }
    struct at_once a = {.sess = s};
    struct call outer = {0};
    assert_int_equal(erma_msgbuf_alloc(w.rpc[0], REQ_HDR, &outer.req), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(w.rpc[0], 16, &outer.resp), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(w.rpc[0], REQ_HDR, &a.inner.req), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(w.rpc[0], 16, &a.inner.resp), ERMA_OK);
    fill_req(&outer.req, id, 8);
    fill_req(&a.inner.req, id + 1, 8);
    const uint64_t t1 = tx_pkts(w.rpc[0]);
    assert_int_equal(erma_rpc_call(w.rpc[0], s, ECHO, &outer.req, &outer.resp, on_outer, &a),
                     ERMA_OK);
    assert_int_equal(tx_pkts(w.rpc[0]), t1 + 1);
    assert_int_equal(run_until(&w, &a.inner.done, 1000000000ull), ERMA_OK);
    assert_int_equal(a.rc, ERMA_OK);
    assert_int_equal(a.sent, 0);
    assert_int_equal(a.inner.status, ERMA_OK);
    assert_int_equal(check_resp(&a.inner.resp, id + 1, 8), 0);
    assert_int_equal(check_resp(&outer.resp, id, 8), 0);
    assert_int_equal(atomic_load(&w.echo[1].calls), id + 2);
    end_call(&w, &outer);
    end_call(&w, &a.inner);
    world_down(&w);
}

/* ---- many calls with loss: at-most-once, exactly-once completion ---- */

#define MANY 100000
#define WINDOW 32

struct many {
    struct world *w;
    int sess;
    uint32_t next_id, done_count, errors, wrong;
    uint8_t *completed; /* per id */
    uint32_t *resp_size;
    struct call calls[WINDOW];
    struct erma_rand rng;
    int finished;
};

static void issue(struct many *m, struct call *c);

static struct many *g_many;

static void on_many_done(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    struct many *m = g_many;
    struct call *c = tag;
    uint32_t id;
    memcpy(&id, c->req.data + 4, 4);
    m->completed[id]++;
    m->done_count++;
    if (status != ERMA_OK)
        m->errors++;
    else if (check_resp(resp, id, m->resp_size[id]) != 0)
        m->wrong++;
    if (m->next_id < MANY)
        issue(m, c);
    else if (m->done_count == MANY)
        m->finished = 1;
}

static void issue(struct many *m, struct call *c)
{
    struct erma_rpc *rpc = m->w->rpc[0];
    const uint32_t id = m->next_id++;
    /* mostly small, sometimes multi-packet, in both directions */
    const uint32_t pick = (uint32_t)erma_rand_below(&m->rng, 100);
    const uint32_t req = pick < 90 ? REQ_HDR + (uint32_t)erma_rand_below(&m->rng, 200)
                                   : REQ_HDR + (uint32_t)erma_rand_below(&m->rng, 20000);
    const uint32_t resp = pick % 10 == 3 ? (uint32_t)erma_rand_below(&m->rng, 20000)
                                         : (uint32_t)erma_rand_below(&m->rng, 300);
    m->resp_size[id] = resp;
    erma_msgbuf_free(rpc, &c->req);
    assert_int_equal(erma_msgbuf_alloc(rpc, req, &c->req), ERMA_OK);
    fill_req(&c->req, id, resp);
    assert_int_equal(erma_rpc_call(rpc, m->sess, ECHO, &c->req, &c->resp, on_many_done, c),
                     ERMA_OK);
}

static void test_many_with_loss(void **state)
{
    (void)state;
    struct world w;
    world_up(&w, "many", 2, 0.01, 0.01);
    world_start(&w);
    w.echo[1].per_id = calloc(MANY, sizeof *w.echo[1].per_id);
    w.echo[1].max_id = MANY;
    struct many *m = calloc(1, sizeof *m);
    g_many = m;
    m->w = &w;
    m->completed = calloc(MANY, 1);
    m->resp_size = calloc(MANY, sizeof *m->resp_size);
    erma_rand_seed(&m->rng, 7);
    m->sess = connect(&w, 0, 1);
    for (int i = 0; i < WINDOW; i++) {
        assert_int_equal(erma_msgbuf_alloc(w.rpc[0], 64, &m->calls[i].resp), ERMA_OK);
        issue(m, &m->calls[i]);
    }
    assert_int_equal(run_until(&w, &m->finished, 600000000000ull), ERMA_OK);
    assert_int_equal(m->done_count, MANY);
    assert_int_equal(m->errors, 0);
    assert_int_equal(m->wrong, 0);
    for (uint32_t id = 0; id < MANY; id++) {
        assert_int_equal(m->completed[id], 1);
        assert_int_equal(atomic_load(&w.echo[1].per_id[id]), 1); /* at most once, and once */
    }
    struct erma_rpc_stats cs, ss;
    struct erma_sim_stats fs;
    erma_rpc_get_stats(w.rpc[0], &cs);
    erma_rpc_get_stats(w.rpc[1], &ss);
    erma_sim_get_stats(w.sim, &fs);
    assert_true(fs.drop_loss > 0);
    assert_true(cs.retransmits > 0);
    assert_true(ss.rx_dup + cs.rx_dup + cs.rx_stale + ss.rx_stale > 0);
    assert_int_equal(atomic_load(&w.echo[1].bad), 0);
    print_message("  %u RPCs, %llu lost packets, %llu retransmissions, %llu dup, %llu "
                  "reordered, %llu stale\n", MANY, (unsigned long long)fs.drop_loss,
                  (unsigned long long)cs.retransmits,
                  (unsigned long long)(cs.rx_dup + ss.rx_dup),
                  (unsigned long long)(cs.rx_reordered + ss.rx_reordered),
                  (unsigned long long)(cs.rx_stale + ss.rx_stale));
    for (int i = 0; i < WINDOW; i++) {
        erma_msgbuf_free(w.rpc[0], &m->calls[i].req);
        erma_msgbuf_free(w.rpc[0], &m->calls[i].resp);
    }
    free(m->completed);
    free(m->resp_size);
    free(m);
    world_down(&w);
}

/* ---- selective acknowledgement: big messages under loss and reordering ----
 * 8 MiB requests and 8 MiB responses, byte-exact, on a lossless fabric, at
 * 1e-3 loss and with 20% of packets delayed past later ones. Out-of-order
 * packets are kept and only the packets without a reply are sent again,
 * most before the timeout (fast retransmit), so goodput at 1e-3 loss stays
 * at least half the lossless one (go-back-N sends the whole window again
 * for each loss; eRPC kept 3% at 1e-3), and reordering alone resends a few
 * packets before the session learns to wait. Virtual time: the figures are
 * the fabric's, the same on every machine. */

struct sack_run {
    uint64_t ns;
    struct erma_rpc_stats cs, ss;
    struct erma_sim_stats fs;
};

static void sack_run(const char *name, double loss, double reorder, struct sack_run *r)
{
    struct world w;
    world_up(&w, name, 2, loss, reorder);
    world_start(&w);
    const int s = connect(&w, 0, 1);
    const uint64_t t0 = erma_sim_now(w.sim);
    for (uint32_t id = 0; id < 4; id++) {
        call_once(&w, 0, s, ECHO, ERMA_MAX_MSG_SIZE, REQ_HDR, id, ERMA_OK);
        call_once(&w, 0, s, ECHO, REQ_HDR, ERMA_MAX_MSG_SIZE, 100 + id, ERMA_OK);
    }
    r->ns = erma_sim_now(w.sim) - t0;
    assert_int_equal(atomic_load(&w.echo[1].bad), 0);
    erma_rpc_get_stats(w.rpc[0], &r->cs);
    erma_rpc_get_stats(w.rpc[1], &r->ss);
    erma_sim_get_stats(w.sim, &r->fs);
    world_down(&w);
}

static void test_selective_ack(void **state)
{
    (void)state;
    struct sack_run clean, lossy, mixed;
    sack_run("sack0", 0, 0, &clean);
    sack_run("sack1", 1e-3, 0, &lossy);
    sack_run("sack2", 0, 0.2, &mixed);
    const double bytes = 8.0 * ERMA_MAX_MSG_SIZE * 8;
    print_message("  8 x 8 MiB: lossless %.2f Gb/s; 1e-3 loss %.2f Gb/s (%.0f%%; %llu lost, %llu "
                  "sent again, %llu of them fast, in %llu timeouts); 20%% reordered %.2f Gb/s "
                  "(%llu taken out of order, %llu sent again, %llu of them found spurious)\n",
                  bytes / (double)clean.ns, bytes / (double)lossy.ns,
                  100.0 * (double)clean.ns / (double)lossy.ns,
                  (unsigned long long)lossy.fs.drop_loss,
                  (unsigned long long)lossy.cs.retransmitted_pkts,
                  (unsigned long long)lossy.cs.fast_retransmits,
                  (unsigned long long)lossy.cs.retransmits, bytes / (double)mixed.ns,
                  (unsigned long long)(mixed.cs.rx_reordered + mixed.ss.rx_reordered),
                  (unsigned long long)mixed.cs.retransmitted_pkts,
                  (unsigned long long)mixed.cs.spurious_retransmits);
    assert_int_equal(clean.cs.retransmitted_pkts, 0);
    assert_true(lossy.fs.drop_loss > 0);
    /* only what was lost goes again (a lost reply costs its packet too) */
    assert_true(lossy.cs.retransmitted_pkts <= 2 * lossy.fs.drop_loss);
    assert_true(lossy.cs.fast_retransmits > 0);
    assert_true(lossy.ns <= 2 * clean.ns); /* goodput at least half the lossless */
    assert_true(mixed.cs.rx_reordered + mixed.ss.rx_reordered > 0);
    /* reordering fools the fast retransmit a few times, then it waits for
     * more replies */
    assert_true(mixed.cs.retransmitted_pkts <= 16);
    assert_true(mixed.cs.spurious_retransmits > 0);
}

/* ---- nested: host 0 -> proxy on host 1 -> echo on host 2 ---- */

static struct proxy g_proxy;

static void test_nested(void **state)
{
    (void)state;
    struct world w;
    world_up(&w, "nested", 3, 0.001, 0);
    g_proxy.type = ECHO;
    assert_int_equal(erma_handler_register(w.nx[1], PROXY, proxy_handler, ERMA_DISPATCH, &g_proxy),
                     ERMA_OK);
    world_start(&w);
    g_proxy.sess = connect(&w, 1, 2);
    const int s = connect(&w, 0, 1);
    for (uint32_t id = 0; id < 200; id++)
        call_once(&w, 0, s, PROXY, REQ_HDR + id * 97, id * 131, id, ERMA_OK);
    assert_int_equal(atomic_load(&w.echo[2].calls), 200);
    assert_int_equal(atomic_load(&w.echo[2].bad), 0);
    assert_int_equal(atomic_load(&g_proxy.failed), 0);
    world_down(&w);
}

/* With an argument "multipath", the virtual-path tests only (ctest's
 * test_multipath_sim, label multipath); else the others. */
int main(int argc, char **argv)
{
    const struct CMUnitTest multipath[] = {
        cmocka_unit_test(test_multipath),
        cmocka_unit_test(test_multipath_errors),
    };
    if (argc > 1 && strcmp(argv[1], "multipath") == 0)
        return cmocka_run_group_tests(multipath, NULL, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),        cmocka_unit_test(test_reissue_in_continuation),
        cmocka_unit_test(test_call_sends_at_once),
        cmocka_unit_test(test_many_with_loss),
        cmocka_unit_test(test_selective_ack),
        cmocka_unit_test(test_nested),       cmocka_unit_test(test_many_sessions),
        cmocka_unit_test(test_refusal),      cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_peer_failure), cmocka_unit_test(test_disconnect),
        cmocka_unit_test(test_request_timeout), cmocka_unit_test(test_inconsistent_sizes),
        cmocka_unit_test(test_session_credits),
        cmocka_unit_test(test_deferred_request),
        cmocka_unit_test(test_unregistered_type),
        cmocka_unit_test(test_stalled_server),
        cmocka_unit_test(test_connect_flood),
        cmocka_unit_test(test_connect_under_loss),
        cmocka_unit_test(test_secure_sessions),
        cmocka_unit_test(test_secure_mismatch),
        cmocka_unit_test(test_secure_forged_answers),
        cmocka_unit_test(test_secure_forged_auth_race),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
