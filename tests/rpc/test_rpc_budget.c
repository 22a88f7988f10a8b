/* What a peer can make a server hold (rpc.h, Budgets), and sessions that
 * reuse numbers while packets of earlier ones are still in flight, over
 * the sim fabric in virtual time. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "rpc_attack.h"
#include "rpc_world.h"
#include "rss.h"

#define MIB ((uint64_t)1 << 20)
#define C_HOST 0
#define S_HOST 1
#define A_HOST 2

static void run_for(struct world *w, struct erma_endpoint **more, unsigned nmore, uint64_t ns)
{
    struct erma_endpoint *live[MAX_HOSTS + 8];
    unsigned n = 0;
    for (unsigned h = 0; h < w->hosts; h++)
        if (w->ep[h])
            live[n++] = w->ep[h];
    for (unsigned k = 0; k < nmore; k++)
        live[n++] = more[k];
    int never = 0;
    erma_sim_run(w->sim, live, n, ns, flag_set, &never);
}

/* n sessions of rpc to the server, connected. */
static void open_sessions(struct world *w, struct erma_endpoint **eps, unsigned neps,
                          struct erma_rpc *rpc, int *sess, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        sess[i] = erma_session_create(rpc, w->uri[S_HOST], 0);
        assert_true(sess[i] >= 0);
    }
    run_for(w, eps, neps, 20000000);
    for (unsigned i = 0; i < n; i++)
        assert_true(erma_session_connected(rpc, sess[i]));
}

/* The attack: first packets of size-byte requests on every slot of each
 * session, at a pace the fabric's queues take. */
static void attack(struct world *w, struct erma_endpoint *ep, struct erma_rpc *rpc,
                   const int *sess, unsigned n, uint32_t size)
{
    for (unsigned i = 0; i < n; i++) {
        send_first_packets(ep->tr, rpc, sess[i], ECHO, size);
        run_for(w, &ep, 1, 20000);
    }
}

static struct erma_rpc_stats server_stats(const struct world *w)
{
    struct erma_rpc_stats st;
    erma_rpc_get_stats(w->rpc[S_HOST], &st);
    return st;
}

/* One peer opens the session limit's worth of sessions (64) and sends the
 * first packet of an 8 MiB request on each of their 512 slots: the server
 * takes 8 (its 64 MiB per address), refuses the rest, frees those it took
 * after recv_timeout_ns, and serves another client throughout. */
static void test_one_peer_first_packets(void **state)
{
    (void)state;
    struct world w;
    world_up(&w, "budget1", 3, 0, 0);
    struct erma_rpc_cfg c = sim_cfg(&w);
    world_rpc(&w, C_HOST, &c, NULL);
    world_rpc(&w, S_HOST, &c, NULL);
    c.seed++; /* tokens apart from the other client's: a clash is refused */
    world_rpc(&w, A_HOST, &c, NULL);
    const int legit = connect(&w, C_HOST, S_HOST);
    static int sess[64];
    open_sessions(&w, NULL, 0, w.rpc[A_HOST], sess, 64);
    const uint64_t rss0 = rss_of(0);
    attack(&w, w.ep[A_HOST], w.rpc[A_HOST], sess, 64, ERMA_MAX_MSG_SIZE);
    run_for(&w, NULL, 0, 1000000);
    const uint64_t rss1 = rss_of(0);
    struct erma_rpc_stats st = server_stats(&w);
    print_message("  512 first packets of 8 MiB requests: %llu MiB held, %llu refused, "
                  "resident memory +%.1f MiB\n",
                  (unsigned long long)(erma_rpc_recv_held(w.rpc[S_HOST]) / MIB),
                  (unsigned long long)st.recv_refused, (double)(rss1 - rss0) / (double)MIB);
    assert_int_equal(erma_rpc_recv_held(w.rpc[S_HOST]), 8 * (uint64_t)ERMA_MAX_MSG_SIZE);
    assert_int_equal(st.recv_refused, 512 - 8);
    assert_true(rss1 < rss0 + 64 * MIB + 32 * MIB); /* the budget, and slack for the rest */
    /* another client is served meanwhile, large requests too */
    call_once(&w, C_HOST, legit, ECHO, (uint32_t)MIB, (uint32_t)MIB, 1, ERMA_OK);
    call_once(&w, C_HOST, legit, ECHO, 100, 100, 2, ERMA_OK);
    /* the requests stall: dropped after recv_timeout_ns (2 x failure_ns = 100 ms) */
    run_for(&w, NULL, 0, 90000000);
    assert_int_equal(erma_rpc_recv_held(w.rpc[S_HOST]), 8 * (uint64_t)ERMA_MAX_MSG_SIZE);
    run_for(&w, NULL, 0, 30000000);
    st = server_stats(&w);
    assert_int_equal(erma_rpc_recv_held(w.rpc[S_HOST]), 0);
    assert_int_equal(st.recv_expired, 8);
    for (unsigned i = 0; i < 64; i++) /* the attacker's sessions live on (keepalives) */
        assert_true(erma_session_connected(w.rpc[A_HOST], sess[i]));
    call_once(&w, C_HOST, legit, ECHO, ERMA_MAX_MSG_SIZE, 64, 3, ERMA_OK);
    assert_int_equal(atomic_load(&w.echo[S_HOST].calls), 3);
    world_down(&w);
}

/* Four addresses, two sessions each, first packets of 1 MiB requests
 * against small budgets (3 MiB a session, 5 MiB an address, 12 MiB the
 * endpoint): each budget stops its share, a client's large request gets
 * ERMA_ENOBUFS while the endpoint's is spent (a small one goes through),
 * and everything is back once the partial requests expire. */
static void test_budget_limits(void **state)
{
    (void)state;
    struct world w;
    world_up(&w, "budget4", 3, 0, 0);
    struct erma_rpc_cfg c = sim_cfg(&w);
    world_rpc(&w, C_HOST, &c, NULL);
    c.recv_budget_session = 3 * MIB;
    c.recv_budget_peer = 5 * MIB;
    c.recv_budget = 12 * MIB;
    world_rpc(&w, S_HOST, &c, NULL);
    const int legit = connect(&w, C_HOST, S_HOST);
    struct erma_endpoint *ep[4];
    struct erma_rpc *rpc[4];
    int sess[4][2];
    for (unsigned a = 0; a < 4; a++) {
        char uri[64];
        snprintf(uri, sizeof uri, "sim://budget4/%u:%u", A_HOST, 5000 + a);
        struct erma_rpc_cfg ac = sim_cfg(&w);
        ac.seed += 1 + a;
        assert_int_equal(erma_endpoint_create(uri, 0, NULL, &ep[a]), ERMA_OK);
        assert_int_equal(erma_rpc_create(w.nx[A_HOST], ep[a], &ac, &rpc[a]), ERMA_OK);
        open_sessions(&w, ep, a + 1, rpc[a], sess[a], 2);
    }
    const uint64_t held_after[4] = {5 * MIB, 10 * MIB, 12 * MIB, 12 * MIB};
    for (unsigned a = 0; a < 4; a++) {
        attack(&w, ep[a], rpc[a], sess[a], 2, (uint32_t)MIB);
        run_for(&w, ep, 4, 100000);
        assert_int_equal(erma_rpc_recv_held(w.rpc[S_HOST]), held_after[a]);
    }
    assert_int_equal(server_stats(&w).recv_refused, 64 - 12);
    call_once(&w, C_HOST, legit, ECHO, 3000, 64, 1, ERMA_ENOBUFS);
    call_once(&w, C_HOST, legit, ECHO, 1000, 3000, 2, ERMA_OK);
    run_for(&w, ep, 4, 120000000);
    assert_int_equal(erma_rpc_recv_held(w.rpc[S_HOST]), 0);
    assert_int_equal(server_stats(&w).recv_expired, 12);
    call_once(&w, C_HOST, legit, ECHO, 3000, 64, 3, ERMA_OK);
    for (unsigned a = 0; a < 4; a++) {
        erma_rpc_destroy(rpc[a]);
        erma_endpoint_destroy(ep[a]);
    }
    world_down(&w);
}

/* A client counts a response buffer it must grow against its budgets. */
static void test_client_response_budget(void **state)
{
    (void)state;
    struct world w;
    world_up(&w, "budgetc", 2, 0, 0);
    struct erma_rpc_cfg c = sim_cfg(&w);
    c.recv_budget_session = MIB;
    world_rpc(&w, C_HOST, &c, NULL);
    world_rpc(&w, S_HOST, NULL, NULL);
    const int s = connect(&w, C_HOST, S_HOST);
    call_once(&w, C_HOST, s, ECHO, 100, (uint32_t)(2 * MIB), 1, ERMA_ENOBUFS);
    call_once(&w, C_HOST, s, ECHO, 100, (uint32_t)(MIB / 2), 2, ERMA_OK);
    struct erma_rpc_stats st;
    erma_rpc_get_stats(w.rpc[C_HOST], &st);
    assert_int_equal(st.recv_refused, 1);
    assert_int_equal(erma_rpc_recv_held(w.rpc[C_HOST]), 0);
    world_down(&w);
}

/* Forged first response packets that each declare a larger response, with
 * a wrong length: the client grows its buffer for each, counts only the
 * last against its budget, and gives that back when the call ends. */
#define HOLD 4

static void hold_handler(struct erma_req *req, void *ctx)
{
    (void)req;
    (void)ctx; /* never answers: the call waits until its session goes */
}

static void test_client_forged_sizes(void **state)
{
    (void)state;
    struct world w;
    world_up(&w, "forged", 2, 0, 0);
    assert_int_equal(erma_handler_register(w.nx[S_HOST], HOLD, hold_handler, ERMA_DISPATCH, NULL),
                     ERMA_OK);
    world_start(&w);
    const int s = connect(&w, C_HOST, S_HOST);
    struct call c = {0};
    assert_int_equal(erma_msgbuf_alloc(w.rpc[C_HOST], 64, &c.req), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(w.rpc[C_HOST], 16, &c.resp), ERMA_OK);
    assert_int_equal(erma_rpc_call(w.rpc[C_HOST], s, HOLD, &c.req, &c.resp, on_call, &c),
                     ERMA_OK);
    run_for(&w, NULL, 0, 1000000);
    const struct session *cs = erma__session_get(w.rpc[C_HOST], (uint16_t)s);
    uint8_t pkt[ERMA_HDR_SIZE + 100];
    memset(pkt, 0, sizeof pkt);
    for (uint32_t size = (uint32_t)MIB; size <= 3 * MIB; size += (uint32_t)MIB) {
        const struct erma_hdr h = {.req_type = HOLD, .msg_size = size, .dest_session = cs->num,
                                   .pkt_type = ERMA_PKT_RESP, .pkt_num = 0,
                                   .req_num = cs->slots[0].req_num, .proto = ERMA_PROTO_RPC};
        erma_hdr_encode(&h, pkt);
        assert_int_equal(erma_sim_inject(w.sim, S_HOST, 31850, C_HOST, 31850, pkt, sizeof pkt),
                         ERMA_OK);
        run_for(&w, NULL, 0, 100000);
        assert_int_equal(erma_rpc_recv_held(w.rpc[C_HOST]), size);
    }
    struct erma_rpc_stats st;
    erma_rpc_get_stats(w.rpc[C_HOST], &st);
    assert_int_equal(st.rx_bad, 3);
    assert_int_equal(erma_session_destroy(w.rpc[C_HOST], s), ERMA_OK);
    run_for(&w, NULL, 0, 1000000);
    assert_int_equal(c.done, 1);
    assert_int_equal(c.status, ERMA_ECANCELLED);
    assert_int_equal(erma_rpc_recv_held(w.rpc[C_HOST]), 0);
    erma_msgbuf_free(w.rpc[C_HOST], &c.req);
    erma_msgbuf_free(w.rpc[C_HOST], &c.resp);
    world_down(&w);
}

/* ---- a live client whose request stops midway ---- */

/* Drops the client's request packets after the first (keepalives pass). */
static bool drop_later_request_pkts(void *ctx, const struct erma_sim_event *ev, uint8_t *data)
{
    (void)ctx;
    struct erma_hdr h;
    erma_hdr_decode(data, &h);
    return !(ev->src_host == C_HOST && h.proto == ERMA_PROTO_RPC && h.pkt_type == ERMA_PKT_REQ &&
             h.pkt_num > 0);
}

static void test_stalled_request_fails(void **state)
{
    (void)state;
    struct world w;
    world_up(&w, "stall", 2, 0, 0);
    world_start(&w);
    const int s = connect(&w, C_HOST, S_HOST);
    erma_sim_set_tap(w.sim, drop_later_request_pkts, NULL);
    const uint64_t t0 = erma_now_ns();
    call_once(&w, C_HOST, s, ECHO, 100000, 64, 1, ERMA_ETIMEDOUT);
    const uint64_t took = erma_now_ns() - t0;
    const struct erma_rpc_cfg c = sim_cfg(&w);
    print_message("  a request that stopped after its first packet failed after %.1f ms\n",
                  (double)took / 1e6);
    assert_true(took > 2 * c.failure_ns && took < 2 * c.failure_ns + 20000000);
    assert_int_equal(server_stats(&w).recv_expired, 1);
    assert_int_equal(erma_rpc_recv_held(w.rpc[S_HOST]), 0);
    assert_true(erma_session_connected(w.rpc[C_HOST], s));
    erma_sim_set_tap(w.sim, NULL, NULL);
    call_once(&w, C_HOST, s, ECHO, 100000, 64, 2, ERMA_OK);
    world_down(&w);
}

/* ---- a server that hears no request while it answers keepalives ---- */

/* Drops every request packet of the client's (session management passes). */
static bool drop_requests(void *ctx, const struct erma_sim_event *ev, uint8_t *data)
{
    (void)ctx;
    struct erma_hdr h;
    erma_hdr_decode(data, &h);
    return !(ev->src_host == C_HOST && h.proto == ERMA_PROTO_RPC && h.pkt_type == ERMA_PKT_REQ);
}

/* With cfg.req_timeout_ns, a slot moves on by one request number per
 * request given up on; past 2^16 of them its server would take the next
 * for another session's. So the session fails (ERMA_SM_PEER_FAILED) at
 * the 65,535th request in a row on one slot that had no reply at all. */
static void test_deaf_server_fails_session(void **state)
{
    (void)state;
    struct world w;
    world_up(&w, "deaf", 2, 0, 0);
    struct erma_rpc_cfg c = sim_cfg(&w);
    c.req_timeout_ns = 20000;
    world_rpc(&w, C_HOST, &c, NULL);
    world_rpc(&w, S_HOST, NULL, NULL);
    const int s = connect(&w, C_HOST, S_HOST);
    erma_sim_set_tap(w.sim, drop_requests, NULL);
    struct erma_rpc *rpc = w.rpc[C_HOST];
    struct call k = {0};
    assert_int_equal(erma_msgbuf_alloc(rpc, 64, &k.req), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(rpc, 64, &k.resp), ERMA_OK);
    uint32_t timeouts = 0;
    for (int i = 0; i < 70000 && erma_rpc_call(rpc, s, ECHO, &k.req, &k.resp, on_call, &k) ==
                                     ERMA_OK; i++) {
        k.done = 0;
        assert_int_equal(run_until(&w, &k.done, 10000000), ERMA_OK);
        assert_int_equal(k.status, ERMA_ETIMEDOUT);
        timeouts++;
    }
    print_message("  %u requests timed out unheard, then the session failed\n", timeouts);
    assert_int_equal(timeouts, 65535);
    assert_int_equal(w.sm_events[ERMA_SM_PEER_FAILED], 1);
    assert_false(erma_session_connected(rpc, s));
    erma_msgbuf_free(rpc, &k.req);
    erma_msgbuf_free(rpc, &k.resp);
    world_down(&w);
}

/* ---- sessions destroyed and opened again while their packets fly ---- */

#define TOKEN_ECHO 3
#define CHURN_IDS 6000

struct churn {
    struct world *w;
    uint64_t issued_by[CHURN_IDS]; /* the client session's token */
    uint64_t ran_in[CHURN_IDS];    /* the server session's token */
    uint32_t resp_size[CHURN_IDS];
    uint8_t runs[CHURN_IDS], completions[CHURN_IDS];
    struct call calls[CHURN_IDS];
    uint32_t ok, cancelled, other, wrong, misrouted;
};

static struct churn *g_churn;

/* The echo, remembering which server session ran each request. */
static void token_echo(struct erma_req *req, void *ctx)
{
    struct churn *c = ctx;
    uint32_t id;
    memcpy(&id, erma_req_data(req) + 4, 4);
    if (id < CHURN_IDS) {
        c->runs[id]++;
        c->ran_in[id] = req->sess->token;
    }
    echo_handler(req, &c->w->echo[S_HOST]);
}

static void on_churn_call(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    struct churn *c = g_churn;
    struct call *k = tag;
    const uint32_t id = (uint32_t)(k - c->calls);
    c->completions[id]++;
    if (status == ERMA_OK)
        c->wrong += check_resp(resp, id, c->resp_size[id]) != 0;
    c->ok += status == ERMA_OK;
    c->cancelled += status == ERMA_ECANCELLED;
    c->other += status != ERMA_OK && status != ERMA_ECANCELLED;
    erma_msgbuf_free(rpc, &k->req);
    erma_msgbuf_free(rpc, &k->resp);
}

static void churn_call(struct churn *c, struct erma_rand *r, int sess, uint32_t id)
{
    struct erma_rpc *rpc = c->w->rpc[C_HOST];
    struct call *k = &c->calls[id];
    const uint32_t pick = (uint32_t)erma_rand_below(r, 10);
    const uint32_t req = pick < 3 ? 5000 : 100;
    c->resp_size[id] = pick >= 8 ? 5000 : 100;
    assert_int_equal(erma_msgbuf_alloc(rpc, req, &k->req), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(rpc, 16, &k->resp), ERMA_OK);
    fill_req(&k->req, id, c->resp_size[id]);
    c->issued_by[id] = erma__session_get(rpc, (uint16_t)sess)->token;
    assert_int_equal(erma_rpc_call(rpc, sess, TOKEN_ECHO, &k->req, &k->resp, on_churn_call, k),
                     ERMA_OK);
}

static void print_drops(const char *who, const struct erma_rpc_stats *st)
{
    print_message("  %s: other session %llu, stale %llu, no session %llu, duplicates %llu, "
                  "malformed %llu\n", who, (unsigned long long)st->rx_other_session,
                  (unsigned long long)st->rx_stale, (unsigned long long)st->rx_no_session,
                  (unsigned long long)st->rx_dup, (unsigned long long)st->rx_bad);
}

/* 500 sessions, one after another, each destroyed with its requests in
 * flight and replaced at once (the numbers are reused on both ends), on a
 * fabric that delays 5% of packets by 300 us and loses 1%: late packets
 * of the old sessions reach the new ones and must deliver nothing. Every
 * request runs at most once, in the server session of the client session
 * that sent it; every OK response is the right one; every packet dropped
 * is counted under its cause, none as malformed. */
static void test_session_churn(void **state)
{
    (void)state;
    static struct churn c;
    struct world w;
    memset(&c, 0, sizeof c);
    c.w = &w;
    g_churn = &c;
    struct erma_sim_cfg sc;
    erma_sim_cfg_default(&sc);
    sc.hosts = 2;
    sc.loss = 0.01;
    sc.reorder = 0.05;
    sc.reorder_delay_ns = 300000;
    world_up_cfg(&w, "churn", &sc);
    assert_int_equal(erma_handler_register(w.nx[S_HOST], TOKEN_ECHO, token_echo, ERMA_DISPATCH,
                                           &c),
                     ERMA_OK);
    world_rpc(&w, C_HOST, NULL, NULL);
    /* a session destroyed while connecting may live on at the server until
     * it expires (50 ms): room for all of them */
    struct erma_rpc_cfg sc_rpc = sim_cfg(&w);
    sc_rpc.max_sessions_per_peer = 1000;
    const struct erma_endpoint_cfg ring = {.rx_ring = 32000};
    world_rpc(&w, S_HOST, &sc_rpc, &ring);
    struct erma_rand r;
    erma_rand_seed(&r, 7);
    uint32_t id = 0;
    for (int round = 0; round < 500; round++) {
        const int s = erma_session_create(w.rpc[C_HOST], w.uri[S_HOST], 0);
        assert_true(s >= 0);
        for (int k = 0; k < 10 && id < CHURN_IDS; k++)
            churn_call(&c, &r, s, id++);
        run_for(&w, NULL, 0, 5000 + erma_rand_below(&r, 60000));
        assert_int_equal(erma_session_destroy(w.rpc[C_HOST], s), ERMA_OK);
    }
    run_for(&w, NULL, 0, 20000000);
    for (uint32_t i = 0; i < id; i++) {
        assert_int_equal(c.completions[i], 1);
        assert_true(c.runs[i] <= 1);
        if (c.runs[i])
            c.misrouted += c.ran_in[i] != c.issued_by[i];
    }
    struct erma_rpc_stats cs, ss;
    erma_rpc_get_stats(w.rpc[C_HOST], &cs);
    erma_rpc_get_stats(w.rpc[S_HOST], &ss);
    print_message("  %u requests: %u answered, %u cancelled, %u other; %u wrong answers, "
                  "%u run in another session\n", id, c.ok, c.cancelled, c.other, c.wrong,
                  c.misrouted);
    print_drops("client", &cs);
    print_drops("server", &ss);
    assert_int_equal(c.ok + c.cancelled, id);
    assert_true(c.ok > id / 4 && c.cancelled > id / 10);
    assert_int_equal(c.wrong, 0);
    assert_int_equal(c.misrouted, 0);
    assert_int_equal(cs.rx_bad + ss.rx_bad, 0);
    assert_true(ss.rx_other_session > 0); /* late packets did reach new sessions */
    world_down(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_peer_first_packets),
        cmocka_unit_test(test_budget_limits),
        cmocka_unit_test(test_client_response_budget),
        cmocka_unit_test(test_client_forged_sizes),
        cmocka_unit_test(test_stalled_request_fails),
        cmocka_unit_test(test_session_churn),
        cmocka_unit_test(test_deaf_server_fails_session),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
