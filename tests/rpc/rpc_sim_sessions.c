/* test_rpc_sim (the RPC layer over the sim fabric, virtual time): many
 * sessions, refusal past the RX ring, garbage on the wire, a session's own
 * credits. */
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

/* ---- many sessions, and refusal past the RX ring ---- */

void test_many_sessions(void **state)
{
    (void)state;
    struct world w;
    world_up(&w, "sessions", 2, 0, 0);
    struct erma_rpc_cfg c = sim_cfg(&w);
    c.credits = 4;
    c.max_sessions_per_peer = 1024; /* all from one client endpoint */
    const struct erma_endpoint_cfg ec = {.rx_ring = 4096}; /* room for 1024 sessions of 4 credits */
    world_rpc(&w, 0, &c, &ec);
    world_rpc(&w, 1, &c, &ec);
    enum { N = 1000 };
    static int sess[N];
    for (int i = 0; i < N; i++) {
        sess[i] = erma_session_create(w.rpc[0], w.uri[1], 0);
        assert_true(sess[i] >= 0);
    }
    int never = 0;
    run_until(&w, &never, 20000000);
    assert_int_equal(w.sm_events[ERMA_SM_CONNECTED], N);
    for (int i = 0; i < N; i += 37)
        call_once(&w, 0, sess[i], ECHO, 100, 100, (uint32_t)i, ERMA_OK);
    /* the client's own ring is the limit now: 1024 - 1000 left */
    assert_int_equal(erma_rpc_free_sessions(w.rpc[0]), 24);
    world_down(&w);
}

void test_refusal(void **state)
{
    (void)state;
    struct world w;
    world_up(&w, "refusal", 2, 0, 0);
    struct erma_rpc_cfg small = sim_cfg(&w), big = sim_cfg(&w);
    const struct erma_endpoint_cfg small_ep = {.rx_ring = 64}; /* 2 sessions of 32 credits */
    world_rpc(&w, 0, &big, NULL);
    world_rpc(&w, 1, &small, &small_ep);
    const int a = connect(&w, 0, 1), b = connect(&w, 0, 1);
    assert_true(a >= 0 && b >= 0);
    const int c = erma_session_create(w.rpc[0], w.uri[1], 0);
    assert_true(c >= 0);
    int never = 0;
    run_until(&w, &never, 10000000);
    assert_false(erma_session_connected(w.rpc[0], c));
    assert_int_equal(w.sm_events[ERMA_SM_CONNECT_FAILED], 1);
    assert_int_equal(w.sm_last_err, ERMA_EREFUSED);
    struct erma_rpc_stats st;
    erma_rpc_get_stats(w.rpc[1], &st);
    assert_int_equal(st.sessions_refused, 1);
    /* locally: the small endpoint cannot open a third session itself */
    world_rpc_down(&w, 0);
    run_until(&w, &never, 100000000); /* server sessions expire */
    world_rpc(&w, 0, &small, &small_ep);
    assert_true(erma_session_create(w.rpc[0], w.uri[1], 0) >= 0);
    assert_true(erma_session_create(w.rpc[0], w.uri[1], 0) >= 0);
    assert_int_equal(erma_session_create(w.rpc[0], w.uri[1], 0), ERMA_ENOSLOTS);
    assert_int_equal(erma_session_create_credits(w.rpc[0], w.uri[1], 0, 1), ERMA_ENOSLOTS);
    assert_int_equal(erma_rpc_free_sessions(w.rpc[0]), 0);
    /* sessions of fewer credits take less of the ring: 1 x 32 + 32 x 1 fill 64 */
    world_rpc_down(&w, 0);
    world_rpc(&w, 0, &small, &small_ep);
    assert_true(erma_session_create(w.rpc[0], w.uri[1], 0) >= 0);
    assert_int_equal(erma_rpc_free_sessions(w.rpc[0]), 1);
    for (int i = 0; i < 32; i++)
        assert_true(erma_session_create_credits(w.rpc[0], w.uri[1], 0, 1) >= 0);
    assert_int_equal(erma_session_create_credits(w.rpc[0], w.uri[1], 0, 1), ERMA_ENOSLOTS);
    /* bad arguments */
    assert_int_equal(erma_session_create(w.rpc[0], "sim://nofabric/0:1", 0), ERMA_EADDR);
    assert_int_equal(erma_session_create(w.rpc[0], "garbage", 0), ERMA_EADDR);
    struct erma_msgbuf m1, m2;
    assert_int_equal(erma_msgbuf_alloc(w.rpc[0], 8, &m1), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(w.rpc[0], 8, &m2), ERMA_OK);
    assert_int_equal(erma_rpc_call(w.rpc[0], 999, ECHO, &m1, &m2, on_call, NULL),
                     ERMA_ENOENT);
    assert_int_equal(erma_rpc_call(w.rpc[0], -1, ECHO, &m1, &m2, on_call, NULL),
                     ERMA_ENOENT);
    assert_int_equal(erma_rpc_call(w.rpc[0], 0, ECHO, &m1, &m1, on_call, NULL),
                     ERMA_EINVAL);
    m1.size = 9;
    assert_int_equal(erma_rpc_call(w.rpc[0], 0, ECHO, &m1, &m2, on_call, NULL),
                     ERMA_EINVAL);
    m1.size = 8;
    assert_int_equal(erma_msgbuf_resize(&m1, 9), ERMA_E2BIG);
    erma_msgbuf_free(w.rpc[0], &m1);
    erma_msgbuf_free(w.rpc[0], &m2);
    world_down(&w);
}

/* ---- garbage on the wire ---- */

void test_malformed(void **state)
{
    (void)state;
    struct world w;
    world_up(&w, "garbage", 2, 0, 0);
    world_start(&w);
    const int s = connect(&w, 0, 1);
    struct erma_transport *evil;
    assert_int_equal(erma_transport_open("sim://garbage/0:0", NULL, &evil), ERMA_OK);
    struct erma_addr dst;
    assert_int_equal(erma_transport_resolve(evil, "sim://garbage/1:31850", &dst), ERMA_OK);
    struct erma_rand r;
    erma_rand_seed(&r, 3);
    uint8_t buf[1472];
    for (int i = 0; i < 20000; i++) {
        const uint32_t len = garbage_packet(&r, buf, sizeof buf, i, ECHO);
        const struct erma_tx_pkt p = {.dst = &dst, .hdr = buf, .hdr_len = len};
        assert_int_equal(erma_tx_burst(evil, &p, 1), 1);
        if (i % 64 == 0) {
            int never = 0;
            run_until(&w, &never, 50000);
        }
    }
    int never = 0;
    run_until(&w, &never, 1000000);
    struct erma_rpc_stats st;
    struct erma_endpoint_stats es;
    erma_rpc_get_stats(w.rpc[1], &st);
    erma_endpoint_get_stats(w.ep[1], &es);
    /* malformed: dropped by the endpoint (a bad header, no protocol for it)
     * or by the RPC layer */
    const uint64_t bad = st.rx_bad + es.rx_bad + es.rx_no_proto;
    print_message("  20000 garbage packets: %llu malformed, %llu for no session, %llu of "
                  "another session, %llu stale\n", (unsigned long long)bad,
                  (unsigned long long)st.rx_no_session, (unsigned long long)st.rx_other_session,
                  (unsigned long long)st.rx_stale);
    assert_true(bad > 10000);
    assert_true(bad + st.rx_no_session + st.rx_other_session + st.rx_stale > 19000);
    assert_int_equal(atomic_load(&w.echo[1].calls), 0);
    /* the real session is unharmed */
    call_once(&w, 0, s, ECHO, 3000, 3000, 1, ERMA_OK);
    erma_transport_close(evil);
    world_down(&w);
}

/* Packets from the session's own address whose sizes disagree: the second
 * packet of a 2000-byte request claims 9000 bytes (a heap overflow if the
 * server trusted it; ASan watches). */
void test_inconsistent_sizes(void **state)
{
    (void)state;
    struct world w;
    world_up(&w, "sizes2", 2, 0, 0);
    world_start(&w);
    connect(&w, 0, 1); /* server session 0 */
    struct erma_transport *tr = w.ep[0]->tr;
    struct erma_addr dst;
    assert_int_equal(erma_transport_resolve(tr, "sim://sizes2/1:31850", &dst), ERMA_OK);
    static uint8_t pkt[1472];
    const uint32_t data = tr->max_pkt - ERMA_HDR_SIZE;
    const uint64_t first = erma__session_get(w.rpc[1], 0)->base + ERMA_SESSION_SLOTS;
    const struct erma_hdr h0 = {.req_type = ECHO, .msg_size = 2000, .dest_session = 0,
                                .pkt_type = ERMA_PKT_REQ, .pkt_num = 0, .req_num = first,
                                .proto = ERMA_PROTO_RPC};
    struct erma_hdr h1 = h0;
    h1.pkt_num = 1;
    h1.msg_size = 9000; /* a lie: packet 1 of 9000 bytes carries a full packet */
    erma_hdr_encode(&h0, pkt);
    const struct erma_tx_pkt p0 = {.dst = &dst, .hdr = pkt, .hdr_len = ERMA_HDR_SIZE + data};
    assert_int_equal(erma_tx_burst(tr, &p0, 1), 1);
    erma_hdr_encode(&h1, pkt);
    assert_int_equal(erma_tx_burst(tr, &p0, 1), 1);
    int never = 0;
    run_until(&w, &never, 1000000);
    struct erma_rpc_stats st;
    erma_rpc_get_stats(w.rpc[1], &st);
    assert_true(st.rx_bad >= 1);
    assert_int_equal(atomic_load(&w.echo[1].calls), 0); /* nothing ran */
    world_down(&w);
}

/* ---- a session's own credits ---- */

/* Packets delivered client to server less those server to client: at most
 * the session's credits, as each client packet (request or RFR) is
 * answered by one (credit return or response). */
struct imbalance {
    int64_t now, max;
};

static void count_imbalance(void *ctx, const struct erma_sim_event *ev)
{
    struct imbalance *im = ctx;
    if (ev->kind != ERMA_SIM_DELIVER)
        return;
    im->now += ev->src_host == 0 ? 1 : -1;
    if (im->now > im->max)
        im->max = im->now;
}

/* A fresh world each time, so that no other session's keepalive counts. */
static int64_t max_in_flight(uint32_t credits)
{
    struct world w;
    struct imbalance im = {0};
    world_up(&w, "credits", 2, 0, 0);
    world_start(&w);
    assert_int_equal(erma_session_create_credits(w.rpc[0], w.uri[1], 0, ERMA_MAX_CREDITS + 1),
                     ERMA_EINVAL);
    const int s = erma_session_create_credits(w.rpc[0], w.uri[1], 0, credits);
    assert_true(s >= 0);
    erma_sim_set_trace(w.sim, count_imbalance, &im);
    call_once(&w, 0, s, ECHO, 1 << 20, 1 << 20, 1, ERMA_OK); /* waits for the connection */
    world_down(&w);
    return im.max;
}

void test_session_credits(void **state)
{
    (void)state;
    assert_int_equal(erma_session_create_credits(NULL, "sim://x/0:1", 0, 1), ERMA_EINVAL);
    const int64_t full = max_in_flight(0), two = max_in_flight(2), one = max_in_flight(1);
    print_message("  1 MiB each way: at most %lld, %lld, %lld packets in flight with 32, 2 "
                  "and 1 credits\n", (long long)full, (long long)two, (long long)one);
    assert_true(full > 16);
    assert_true(two <= 2);
    assert_true(one <= 1);
    /* a server admits by credits: 1 x 32 and 32 x 1 fill a ring of 64, one more is refused */
    struct world w;
    world_up(&w, "admit", 2, 0, 0);
    struct erma_rpc_cfg small = sim_cfg(&w);
    const struct erma_endpoint_cfg small_ep = {.rx_ring = 64};
    world_rpc(&w, 0, NULL, NULL);
    world_rpc(&w, 1, &small, &small_ep);
    int s[34];
    s[0] = erma_session_create(w.rpc[0], w.uri[1], 0);
    for (int i = 1; i < 34; i++)
        s[i] = erma_session_create_credits(w.rpc[0], w.uri[1], 0, 1);
    int never = 0;
    run_until(&w, &never, 10000000);
    for (int i = 0; i < 33; i++)
        assert_true(erma_session_connected(w.rpc[0], s[i]));
    assert_false(erma_session_connected(w.rpc[0], s[33]));
    assert_int_equal(w.sm_events[ERMA_SM_CONNECT_FAILED], 1);
    assert_int_equal(w.sm_last_err, ERMA_EREFUSED);
    world_down(&w);
}
