/* test_rpc_sim (the RPC layer over the sim fabric, virtual time): connect
 * floods, connects under loss, and authenticated, encrypted sessions. */
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

/* ---- connects ---- */

#define SM_CONNECT_REQ 1
#define SM_CONNECT_RESP 2
#define SM_RESET 7
#define SM_COOKIE 9
#define SM_LEN (ERMA_HDR_SIZE + 70)

/* A connect request as a flooder sends it (docs/PROTOCOL.md). */
static void sm_connect(uint8_t *p, uint64_t token, uint64_t cookie)
{
    memset(p, 0, SM_LEN);
    const struct erma_hdr h = {.req_type = SM_CONNECT_REQ, .dest_session = 0xffff,
                               .proto = ERMA_PROTO_SM};
    erma_hdr_encode(&h, p);
    erma_put_le(p + ERMA_HDR_SIZE, token, 8);
    erma_put_le(p + ERMA_HDR_SIZE + 12, 32, 4); /* credits */
    erma_put_le(p + ERMA_HDR_SIZE + 29, cookie, 8);
}

static void flood(struct world *w, struct erma_transport *tr, const struct erma_addr *dst,
                  uint64_t first, unsigned n, const uint64_t *cookies)
{
    uint8_t pkt[SM_LEN];
    for (unsigned i = 0; i < n; i++) {
        sm_connect(pkt, first + i, cookies ? cookies[i] : 0);
        const struct erma_tx_pkt t = {.dst = dst, .hdr = pkt, .hdr_len = SM_LEN};
        assert_int_equal(erma_tx_burst(tr, &t, 1), 1);
        if (i % 32 == 31) {
            int never = 0;
            run_until(w, &never, 20000);
        }
    }
    int never = 0;
    run_until(w, &never, 1000000);
}

/* Takes the cookies the server answered with, by token - first. */
static unsigned take_cookies(struct erma_transport *tr, uint64_t first, uint64_t *cookies,
                             unsigned n)
{
    struct erma_rx_pkt rx[ERMA_MAX_BURST];
    unsigned got = 0;
    for (int k; (k = erma_rx_burst(tr, rx, ERMA_MAX_BURST)) > 0;)
        for (int i = 0; i < k; i++) {
            struct erma_hdr h;
            if (erma_hdr_check(rx[i].data, rx[i].len, &h) != ERMA_OK || h.req_type != SM_COOKIE)
                continue;
            const uint64_t t = erma_get_le(rx[i].data + ERMA_HDR_SIZE, 8) - first;
            if (t < n) {
                cookies[t] = erma_get_le(rx[i].data + ERMA_HDR_SIZE + 29, 8);
                got++;
            }
        }
    return got;
}

/* 5000 connect requests from one address keep no state until they echo the
 * server's cookie, and then take at most max_sessions_per_peer sessions;
 * cookies from another address are worth nothing; a client elsewhere still
 * connects and calls. (The flood once took every session the RX ring
 * allowed: 128 here.) */
void test_connect_flood(void **state)
{
    (void)state;
    enum { N = 5000 };
    struct world w;
    world_up(&w, "flood", 3, 0, 0);
    world_start(&w);
    struct erma_transport *evil, *other;
    struct erma_addr server;
    const struct erma_transport_cfg big = {.rx_ring = 2 * N}; /* room for every cookie */
    assert_int_equal(erma_transport_open("sim://flood/2:40000", &big, &evil), ERMA_OK);
    assert_int_equal(erma_transport_open("sim://flood/2:40001", NULL, &other), ERMA_OK);
    assert_int_equal(erma_transport_resolve(evil, w.uri[1], &server), ERMA_OK);
    const uint32_t room = erma_rpc_free_sessions(w.rpc[1]);
    static uint64_t cookies[N];
    flood(&w, evil, &server, 1000, N, NULL);
    assert_int_equal(erma_rpc_free_sessions(w.rpc[1]), room); /* no state kept */
    assert_int_equal(take_cookies(evil, 1000, cookies, N), N);
    flood(&w, other, &server, 1000, N, cookies); /* good cookies, wrong address */
    assert_int_equal(erma_rpc_free_sessions(w.rpc[1]), room);
    flood(&w, evil, &server, 1000, N, cookies);
    struct erma_rpc_stats st;
    erma_rpc_get_stats(w.rpc[1], &st);
    print_message("  %u connects from one address: %u sessions (room for %u), %llu refused, "
                  "%llu cookies sent, %llu bad\n", (unsigned)N,
                  room - erma_rpc_free_sessions(w.rpc[1]), room,
                  (unsigned long long)st.sessions_refused, (unsigned long long)st.cookies_sent,
                  (unsigned long long)st.bad_cookies);
    assert_int_equal(room - erma_rpc_free_sessions(w.rpc[1]), 64);
    assert_true(st.bad_cookies >= N);
    const int s = connect(&w, 0, 1);
    call_once(&w, 0, s, ECHO, 100, 100, 1, ERMA_OK);
    erma_transport_close(evil);
    erma_transport_close(other);
    world_down(&w);
}

/* Connecting has its own budget (connect_timeout_ns), apart from the
 * failure timeout: at 35% loss each way, 200 sessions all connect (with
 * only failure_ns = 50 ms to try in, 28 of 200 gave up). */
void test_connect_under_loss(void **state)
{
    (void)state;
    enum { N = 200 };
    struct world w;
    world_up(&w, "lossyconnect", 2, 0.35, 0);
    struct erma_rpc_cfg c = sim_cfg(&w);
    c.credits = 4;
    c.max_sessions_per_peer = N;
    world_rpc(&w, 0, &c, NULL);
    world_rpc(&w, 1, &c, NULL);
    for (int i = 0; i < N; i++)
        assert_true(erma_session_create(w.rpc[0], w.uri[1], 0) >= 0);
    int never = 0;
    for (int i = 0; i < 100 && w.sm_events[ERMA_SM_CONNECTED] +
                                   w.sm_events[ERMA_SM_CONNECT_FAILED] < N; i++)
        run_until(&w, &never, 50000000);
    print_message("  %d of %d sessions connected at 35%% loss, %d gave up\n",
                  w.sm_events[ERMA_SM_CONNECTED], N, w.sm_events[ERMA_SM_CONNECT_FAILED]);
    assert_int_equal(w.sm_events[ERMA_SM_CONNECTED], N);
    world_down(&w);
}

/* ---- authenticated, encrypted sessions ---- */

static const uint8_t psk[ERMA_PSK_BYTES] = "erma test key: 32 bytes long...";

/* Two hosts whose nexuses hold key (NULL: plaintext), each a nexus with
 * the echo handler; ids below 4096 are counted per execution. */
static void secure_up(struct world *w, const char *name, double loss, const uint8_t *key0,
                      const uint8_t *key1)
{
    memset(w, 0, sizeof *w);
    struct erma_sim_cfg sc;
    erma_sim_cfg_default(&sc);
    sc.loss = loss;
    assert_int_equal(erma_sim_create(name, &sc, &w->sim), ERMA_OK);
    erma_sim_use_clock(w->sim);
    w->hosts = 2;
    for (unsigned h = 0; h < 2; h++) {
        const struct erma_nexus_cfg nc = {.psk = h ? key1 : key0};
        snprintf(w->uri[h], sizeof w->uri[h], "sim://%s/%u:31850", name, h);
        assert_int_equal(erma_nexus_create(&nc, &w->nx[h]), ERMA_OK);
        w->echo[h].per_id = calloc(4096, sizeof *w->echo[h].per_id);
        w->echo[h].max_id = 4096;
        assert_int_equal(erma_handler_register(w->nx[h], ECHO, echo_handler, ERMA_DISPATCH,
                                               &w->echo[h]),
                         ERMA_OK);
    }
    world_start(w);
}

/* Client packets as sent, for replaying. */
struct capture {
    unsigned n;
    struct erma_sim_event ev[512];
    uint8_t data[512][1500];
    bool flip;     /* flip one bit in every 7th data packet to the server */
    unsigned flipped;
};

static bool capture_tap(void *ctx, const struct erma_sim_event *ev, uint8_t *data)
{
    struct capture *c = ctx;
    if (ev->src_host != 0)
        return true;
    if (c->n < 512 && ev->len <= 1500) {
        c->ev[c->n] = *ev;
        memcpy(c->data[c->n++], data, ev->len);
    }
    if (c->flip && ev->len > ERMA_HDR_SIZE + 40 && c->n % 7 == 0) {
        data[ERMA_HDR_SIZE + (c->n * 13) % (ev->len - ERMA_HDR_SIZE)] ^= 0x10;
        c->flipped++;
    }
    return true;
}

static void replay(struct world *w, const struct capture *c, uint16_t src_port)
{
    for (unsigned i = 0; i < c->n; i++)
        assert_int_equal(erma_sim_inject(w->sim, c->ev[i].src_host,
                                         src_port ? src_port : c->ev[i].src_port,
                                         c->ev[i].dst_host, c->ev[i].dst_port, c->data[i],
                                         c->ev[i].len),
                         ERMA_OK);
    int never = 0;
    run_until(w, &never, 10000000);
}

/* An attacker at port 40000 of the client's host replays the capture as
 * if it were the client: it answers the server's cookie itself (patching
 * it into the captured connect request) and readdresses each captured
 * request to the session that opens. */
static void active_replay(struct world *w, const struct capture *c, const char *name)
{
    char uri[64];
    struct erma_transport *tr;
    struct erma_addr server;
    snprintf(uri, sizeof uri, "sim://%s/0:40000", name);
    assert_int_equal(erma_transport_open(uri, NULL, &tr), ERMA_OK);
    assert_int_equal(erma_transport_resolve(tr, w->uri[1], &server), ERMA_OK);
    uint64_t cookie = 0;
    uint16_t session = 0xffff;
    for (unsigned i = 0; i < c->n; i++) {
        uint8_t pkt[1500];
        struct erma_hdr h;
        memcpy(pkt, c->data[i], c->ev[i].len);
        if (erma_hdr_check(pkt, c->ev[i].len, &h) != ERMA_OK)
            continue;
        if (h.proto == ERMA_PROTO_SM && h.req_type == SM_CONNECT_REQ && cookie)
            erma_put_le(pkt + ERMA_HDR_SIZE + 29, cookie, 8);
        if (h.proto == ERMA_PROTO_RPC) {
            h.dest_session = session;
            erma_hdr_encode(&h, pkt);
        }
        const struct erma_tx_pkt t = {.dst = &server, .hdr = pkt, .hdr_len = c->ev[i].len};
        assert_int_equal(erma_tx_burst(tr, &t, 1), 1);
        int never = 0;
        run_until(w, &never, 200000);
        struct erma_rx_pkt rx[ERMA_MAX_BURST];
        for (int k = erma_rx_burst(tr, rx, ERMA_MAX_BURST), j = 0; j < k; j++) {
            if (erma_hdr_check(rx[j].data, rx[j].len, &h) != ERMA_OK || h.proto != ERMA_PROTO_SM)
                continue;
            if (h.req_type == SM_COOKIE)
                cookie = erma_get_le(rx[j].data + ERMA_HDR_SIZE + 29, 8);
            else if (h.req_type == SM_CONNECT_RESP)
                session = (uint16_t)erma_get_le(rx[j].data + ERMA_HDR_SIZE + 10, 2);
        }
    }
    erma_transport_close(tr);
}

static uint64_t executions(const struct world *w)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < 4096; i++)
        n += atomic_load(&w->echo[1].per_id[i]);
    return n;
}

/* Secure sessions answer every size; a captured exchange (connect and 40
 * requests) replayed from the client's address or from another is never
 * executed again (in the clear, an attacker who answers the cookie itself
 * from another port opens a new session and runs every request again);
 * flipped bits are dropped and the requests retransmitted, each executed
 * once. */
void test_secure_sessions(void **state)
{
    (void)state;
    static struct capture cap;
    for (int secure = 0; secure < 2; secure++) {
        struct world w;
        secure_up(&w, secure ? "secure" : "plain", 0, secure ? psk : NULL, secure ? psk : NULL);
        cap = (struct capture){0};
        erma_sim_set_tap(w.sim, capture_tap, &cap);
        const int s = connect(&w, 0, 1);
        for (uint32_t id = 0; id < 40; id++)
            call_once(&w, 0, s, ECHO, 200 + id, 100, id, ERMA_OK);
        erma_sim_set_tap(w.sim, NULL, NULL);
        const uint64_t ran = executions(&w);
        assert_int_equal(ran, 40);
        replay(&w, &cap, 0);           /* from the client's own address */
        const uint64_t same = executions(&w) - ran;
        assert_int_equal(erma_session_destroy(w.rpc[0], s), ERMA_OK); /* later: */
        int never = 0;
        run_until(&w, &never, 10000000);
        replay(&w, &cap, 40000);       /* from another port, connect included */
        active_replay(&w, &cap, secure ? "secure" : "plain");
        const uint64_t other = executions(&w) - ran - same;
        struct erma_rpc_stats st;
        erma_rpc_get_stats(w.rpc[1], &st);
        print_message("  %s: a replayed exchange of 40 requests ran %llu again from the same "
                      "address, %llu from another (%llu replays, %llu forgeries dropped)\n",
                      secure ? "secure" : "plaintext", (unsigned long long)same,
                      (unsigned long long)other, (unsigned long long)st.rx_replayed,
                      (unsigned long long)st.rx_auth_failed);
        if (secure) {
            assert_int_equal(same + other, 0);
            assert_true(st.rx_replayed > 0 && st.rx_auth_failed > 0);
        }
        world_down(&w);
    }
    struct world w;
    secure_up(&w, "secure-sizes", 0.01, psk, psk);
    cap = (struct capture){.flip = true};
    erma_sim_set_tap(w.sim, capture_tap, &cap);
    const int s = connect(&w, 0, 1);
    const uint32_t sizes[] = {1, REQ_HDR, 1000, 1431, 1432, 1433, 5000, 65536, 1 << 20};
    uint32_t id = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        call_once(&w, 0, s, ECHO, sizes[i] < REQ_HDR ? REQ_HDR : sizes[i], sizes[i], id++, ERMA_OK);
        call_once(&w, 0, s, ECHO, REQ_HDR, sizes[i], id++, ERMA_OK);
    }
    erma_sim_set_tap(w.sim, NULL, NULL);
    struct erma_rpc_stats st;
    erma_rpc_get_stats(w.rpc[1], &st);
    assert_true(cap.flipped > 0 && st.rx_auth_failed >= cap.flipped / 2);
    for (uint32_t k = 0; k < id; k++)
        assert_int_equal(atomic_load(&w.echo[1].per_id[k]), 1);
    assert_int_equal(atomic_load(&w.echo[1].bad), 0);
    world_down(&w);
}

/* Both ends need the key: one without it, or with another, gets no session
 * (ERMA_EAUTH: refused, or with another key answered by a cookie and never
 * accepted). */
/* Keys that differ (one end without, or another key): each connect fails
 * with ERMA_EAUTH well within the connect timeout (two answers and a
 * retry interval: 3 ms here), its request with it; the server counts
 * every refusal and warns once. */
void test_secure_mismatch(void **state)
{
    (void)state;
    static const uint8_t other[ERMA_PSK_BYTES] = "another key, also 32 bytes long";
    const uint8_t *keys[3][2] = {{psk, NULL}, {NULL, psk}, {psk, other}};
    for (int i = 0; i < 3; i++) {
        struct world w;
        secure_up(&w, "mismatch", 0, keys[i][0], keys[i][1]);
        struct log_capture cap;
        log_capture_start(&cap);
        const uint64_t t0 = erma_now_ns();
        struct call c[2];
        for (int k = 0; k < 2; k++) {
            const int s = erma_session_create(w.rpc[0], w.uri[1], 0);
            assert_true(s >= 0);
            start_call(&w, s, ECHO, (uint32_t)k, &c[k]);
        }
        assert_int_equal(run_until(&w, &c[1].done, 10000000000ull), ERMA_OK);
        const uint64_t took = erma_now_ns() - t0;
        char *log = log_capture_end(&cap);
        print_message("  keys %d: ERMA_EAUTH after %.1f ms\n", i, (double)took / 1e6);
        assert_true(took < 3000000000ull / 2); /* the default connect timeout: 3 s */
        assert_int_equal(w.sm_events[ERMA_SM_CONNECT_FAILED], 2);
        assert_int_equal(w.sm_last_err, ERMA_EAUTH);
        for (int k = 0; k < 2; k++) {
            assert_int_equal(c[k].status, ERMA_EAUTH);
            end_call(&w, &c[k]);
        }
        assert_int_equal(atomic_load(&w.echo[1].calls), 0);
        struct erma_rpc_stats st;
        erma_rpc_get_stats(w.rpc[1], &st);
        assert_true(st.rx_auth_failed >= 2);
        assert_int_equal(log_count(log, "erma warn:", "failed authentication"), 1);
        free(log);
        world_down(&w);
    }
}

/* Forges, for each connect request the client sends, a refusal and a RESET
 * from the server's address: a secure client takes neither (it would fail
 * the connect at once, and the RESETs once kept a dead session alive). */
static uint8_t forged[SM_LEN]; /* the last forgery: a RESET for the client's session */
static uint16_t forged_port;
static int forged_err; /* the refusal's code */

static bool forge_tap(void *ctx, const struct erma_sim_event *ev, uint8_t *data)
{
    struct world *w = ctx;
    struct erma_hdr h;
    if (ev->src_host != 0 || erma_hdr_check(data, ev->len, &h) != ERMA_OK ||
        h.proto != ERMA_PROTO_SM || h.req_type != SM_CONNECT_REQ)
        return true;
    uint8_t *pkt = forged;
    memcpy(pkt, data, SM_LEN);
    forged_port = ev->src_port;
    const uint16_t client_session = (uint16_t)erma_get_le(pkt + ERMA_HDR_SIZE + 8, 2);
    for (uint8_t type = SM_CONNECT_RESP; type; type = type == SM_CONNECT_RESP ? SM_RESET : 0) {
        const struct erma_hdr f = {.req_type = type, .dest_session = client_session,
                                   .proto = ERMA_PROTO_SM};
        erma_hdr_encode(&f, pkt);
        erma_put_le(pkt + ERMA_HDR_SIZE + 16, (uint32_t)forged_err, 4);
        erma_sim_inject(w->sim, 1, ev->dst_port, 0, ev->src_port, pkt, SM_LEN);
    }
    return true;
}

static void forged_answers(void)
{
    struct world w;
    secure_up(&w, "forged", 0, psk, psk);
    erma_sim_set_tap(w.sim, forge_tap, &w);
    const int s = connect(&w, 0, 1);
    erma_sim_set_tap(w.sim, NULL, NULL);
    call_once(&w, 0, s, ECHO, 100, 100, 1, ERMA_OK);
    struct erma_rpc_stats st;
    erma_rpc_get_stats(w.rpc[0], &st);
    assert_true(st.rx_auth_failed >= 1); /* the forged refusals, counted */
    assert_int_equal(w.sm_events[ERMA_SM_CONNECT_FAILED], 0);
    /* the server goes; RESETs forged every 10 ms must not keep the session up */
    world_rpc_down(&w, 1);
    for (int i = 0; i < 100 && !w.sm_events[ERMA_SM_PEER_FAILED]; i++) {
        erma_sim_inject(w.sim, 1, 31850, 0, forged_port, forged, SM_LEN);
        int never = 0;
        run_until(&w, &never, 10000000);
    }
    assert_int_equal(w.sm_events[ERMA_SM_PEER_FAILED], 1); /* within failure_ns = 50 ms */
    world_down(&w);
}

/* Refusals forged as ERMA_EREFUSED, and as ERMA_EAUTH for every connect
 * request, ahead of the server's answers (an on-path forger that cannot
 * drop): the server's proven accept still wins. */
void test_secure_forged_answers(void **state)
{
    (void)state;
    forged_err = ERMA_EREFUSED;
    forged_answers();
    forged_err = ERMA_EAUTH;
    forged_answers();
}

/* The forger races a slow server: each connect request draws a forged
 * ERMA_EAUTH at once, and the server's first accept is held 600 us (past
 * a session-management scan, within the 1 ms retry interval). A client
 * that believed the first unproven refusal would fail; it waits a retry
 * interval for a proven answer, and connects. */
static struct {
    uint8_t pkt[SM_LEN];
    uint16_t src_port, dst_port;
    bool have, sent;
} held_accept;

static bool race_tap(void *ctx, const struct erma_sim_event *ev, uint8_t *data)
{
    struct erma_hdr h;
    if (ev->src_host == 1 && !held_accept.have && erma_hdr_check(data, ev->len, &h) == ERMA_OK &&
        h.proto == ERMA_PROTO_SM && h.req_type == SM_CONNECT_RESP &&
        erma_get_le(data + ERMA_HDR_SIZE + 16, 4) == 0) { /* the server's accept */
        memcpy(held_accept.pkt, data, SM_LEN);
        held_accept.src_port = ev->src_port;
        held_accept.dst_port = ev->dst_port;
        held_accept.have = true;
        return false; /* sent again later */
    }
    return forge_tap(ctx, ev, data);
}

void test_secure_forged_auth_race(void **state)
{
    (void)state;
    struct world w;
    secure_up(&w, "race", 0, psk, psk);
    forged_err = ERMA_EAUTH;
    memset(&held_accept, 0, sizeof held_accept);
    erma_sim_set_tap(w.sim, race_tap, &w);
    const int s = erma_session_create(w.rpc[0], w.uri[1], 0);
    assert_true(s >= 0);
    uint64_t held_at = 0;
    for (int i = 0; i < 100 && !erma_session_connected(w.rpc[0], s) &&
                    !w.sm_events[ERMA_SM_CONNECT_FAILED];
         i++) {
        int never = 0;
        run_until(&w, &never, 100000);
        held_at = held_accept.have && !held_at ? erma_now_ns() : held_at;
        if (held_at && !held_accept.sent && erma_now_ns() >= held_at + 600000) {
            held_accept.sent = true;
            assert_int_equal(erma_sim_inject(w.sim, 1, held_accept.src_port, 0,
                                             held_accept.dst_port, held_accept.pkt, SM_LEN),
                             ERMA_OK);
        }
    }
    erma_sim_set_tap(w.sim, NULL, NULL);
    assert_int_equal(w.sm_events[ERMA_SM_CONNECT_FAILED], 0);
    assert_true(erma_session_connected(w.rpc[0], s));
    struct erma_rpc_stats st;
    erma_rpc_get_stats(w.rpc[0], &st);
    assert_true(held_accept.sent); /* connected by the held accept */
    assert_true(st.rx_auth_failed >= 2); /* both forged refusals came, and were counted */
    call_once(&w, 0, s, ECHO, 100, 100, 1, ERMA_OK);
    world_down(&w);
}
