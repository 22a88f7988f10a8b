/* The raw-transport baseline: bare erma-headed packets echoed by a server. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "erma/clock.h"
#include "erma/endpoint.h"
#include "erma/errors.h"
#include "erma/log.h"
#include "erma/sdk/transport_driver.h"
#include "erma/sdk/wire.h"

#define STOP_TYPE 0xff
#define ACK_TYPE 2 /* answered with the header alone, like a credit return */
#define MAX_DATA 9000

static void make_pkt(uint8_t *buf, uint64_t seq, uint8_t type, uint32_t size)
{
    const struct erma_hdr h = {.req_type = type, .msg_size = size, .req_num = seq,
                               .proto = ERMA_PROTO_RPC};
    erma_hdr_encode(&h, buf);
    memset(buf + ERMA_HDR_SIZE, 0xab, size);
}

/* Messages above one packet (bench_raw_pingpong): a request packet has
 * req_type MSG_TYPE, pkt_num its index, dest_session the request's packet
 * count and msg_size the response's size. The server answers each request
 * packet but the last with a bare header (CR_TYPE, like a credit return),
 * the last with the response's first RAW_WINDOW packets (RESP_TYPE), and
 * each RFR_TYPE packet (pkt_num j) with response packet j. */
#define MSG_TYPE 4
#define RFR_TYPE 5
#define CR_TYPE 6
#define RESP_TYPE 7
#define RAW_WINDOW 32 /* as an erma session's credits */

struct server {
    struct erma_transport *tr;
    uint32_t dmax; /* data bytes per packet */
    struct erma_tx_pkt tx[ERMA_MAX_BURST];
    uint8_t hdr[ERMA_MAX_BURST][ERMA_HDR_SIZE];
    unsigned ntx;
    uint8_t data[MAX_DATA];
};

static void server_flush(struct server *s)
{
    if (s->ntx)
        erma_tx_burst(s->tr, s->tx, s->ntx);
    s->ntx = 0;
}

/* Queues the header h with len bytes of data (from s->data). */
static void server_send(struct server *s, const struct erma_addr *dst, const struct erma_hdr *h,
                        uint32_t len)
{
    if (s->ntx == ERMA_MAX_BURST)
        server_flush(s);
    const unsigned i = s->ntx++;
    erma_hdr_encode(h, s->hdr[i]);
    s->tx[i] = (struct erma_tx_pkt){.dst = dst, .hdr = s->hdr[i], .hdr_len = ERMA_HDR_SIZE,
                                    .data = len ? s->data : NULL, .data_len = len};
}

/* Queues the first len bytes of a received packet back to its sender. */
static void server_echo(struct server *s, const struct erma_rx_pkt *pkt, uint32_t len)
{
    if (s->ntx == ERMA_MAX_BURST)
        server_flush(s);
    s->tx[s->ntx++] = (struct erma_tx_pkt){.dst = &pkt->src, .hdr = pkt->data, .hdr_len = len};
}

static uint32_t pkts_of(uint32_t bytes, uint32_t dmax)
{
    return bytes ? (bytes + dmax - 1) / dmax : 1;
}

/* Response packet j of a msg_size-byte response to h's request. */
static void send_resp(struct server *s, const struct erma_addr *dst, const struct erma_hdr *h,
                      uint32_t j)
{
    const uint32_t left = h->msg_size - (h->msg_size < j * s->dmax ? h->msg_size : j * s->dmax);
    const struct erma_hdr r = {.req_type = RESP_TYPE, .msg_size = h->msg_size, .pkt_num = (uint16_t)j,
                               .req_num = h->req_num, .proto = ERMA_PROTO_RPC};
    server_send(s, dst, &r, left < s->dmax ? left : s->dmax);
}

/* Handles one packet; returns false on the stop packet. */
static bool serve_one(struct server *s, const struct erma_rx_pkt *pkt)
{
    struct erma_hdr h;
    if (erma_hdr_check(pkt->data, pkt->len, &h) != ERMA_OK)
        return true;
    if (h.req_type == STOP_TYPE)
        return false;
    if (h.req_type == MSG_TYPE && h.pkt_num + 1u < h.dest_session) {
        struct erma_hdr cr = h;
        cr.req_type = CR_TYPE;
        server_send(s, &pkt->src, &cr, 0);
    } else if (h.req_type == MSG_TYPE) {
        const uint32_t n = pkts_of(h.msg_size, s->dmax);
        for (uint32_t j = 0; j < n && j < RAW_WINDOW; j++)
            send_resp(s, &pkt->src, &h, j);
    } else if (h.req_type == RFR_TYPE) {
        send_resp(s, &pkt->src, &h, h.pkt_num);
    } else {
        server_echo(s, pkt, h.req_type == ACK_TYPE ? ERMA_HDR_SIZE : pkt->len);
    }
    return true;
}

int bench_raw_server(const char *uri, uint64_t max_ns, bool sleeps)
{
    struct server *s = calloc(1, sizeof *s);
    if (!s)
        return ERMA_ENOMEM;
    int rc = erma_transport_open(uri, NULL, &s->tr);
    if (rc != ERMA_OK) {
        ERMA_ERROR("raw server: cannot open %s: %s", uri, erma_strerror(rc));
        free(s);
        return rc;
    }
    s->dmax = s->tr->max_pkt - ERMA_HDR_SIZE;
    memset(s->data, 0xab, sizeof s->data);
    struct erma_rx_pkt rx[ERMA_MAX_BURST];
    const uint64_t end = erma_now_ns() + max_ns;
    bool run = true;
    for (uint64_t iter = 0; run; iter++) {
        const int n = erma_rx_burst(s->tr, rx, ERMA_MAX_BURST);
        for (int i = 0; i < n && run; i++)
            run = serve_one(s, &rx[i]);
        server_flush(s);
        if (n == 0 && sleeps)
            erma_transport_wait(s->tr, 100000000);
        if ((sleeps || (iter & 1023) == 0) && erma_now_ns() > end)
            break;
    }
    erma_transport_close(s->tr);
    free(s);
    return ERMA_OK;
}

pid_t bench_raw_server_fork(const char *uri, int cpu, uint64_t max_ns, bool sleeps)
{
    const pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the benchmark */
        bench_pin(cpu);
        _exit(bench_raw_server(uri, max_ns, sleeps) == ERMA_OK ? 0 : 1);
    }
    return pid;
}

/* Sends the stop packet (three times) from uri to the raw servers on
 * threads 0..n-1 of peer. */
static void send_stop(const char *uri, const char *peer, unsigned n)
{
    struct erma_transport *tr;
    uint8_t buf[ERMA_HDR_SIZE];
    make_pkt(buf, 0, STOP_TYPE, 0);
    if (erma_transport_open(uri, NULL, &tr) != ERMA_OK)
        return;
    for (unsigned t = 0; t < n; t++) {
        struct erma_addr dst;
        char at[256];
        if (erma_uri_for_thread(peer, (uint8_t)t, at, sizeof at) != ERMA_OK ||
            erma_transport_resolve(tr, at, &dst) != ERMA_OK)
            continue;
        const struct erma_tx_pkt p = {.dst = &dst, .hdr = buf, .hdr_len = sizeof buf};
        for (int i = 0; i < 3; i++)
            erma_tx_burst(tr, &p, 1);
    }
    erma_transport_close(tr);
}

void bench_raw_server_stop(const char *uri, const char *peer, pid_t child)
{
    bench_raw_servers_stop(uri, peer, 1, child);
}

void bench_raw_servers_stop(const char *uri, const char *peer, unsigned n, pid_t child)
{
    send_stop(uri, peer, n);
    if (child <= 0)
        return;
    for (int i = 0; i < 200; i++) {
        if (waitpid(child, NULL, WNOHANG) == child)
            return;
        usleep(10000);
    }
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
}

struct client {
    struct erma_transport *tr;
    struct erma_addr dst;
    uint8_t buf[ERMA_HDR_SIZE + MAX_DATA];
    uint32_t size;
    /* bench_raw_pingpong above one packet (see MSG_TYPE) */
    bool msg;
    uint32_t resp_size, dmax;
    uint8_t hdr[ERMA_MAX_BURST][ERMA_HDR_SIZE];
};

static int client_open(struct client *c, const char *uri, const char *peer, uint32_t size)
{
    if (size > MAX_DATA)
        return ERMA_E2BIG;
    c->size = size;
    c->msg = false;
    int rc = erma_transport_open(uri, NULL, &c->tr);
    if (rc != ERMA_OK)
        return rc;
    if ((rc = erma_transport_resolve(c->tr, peer, &c->dst)) != ERMA_OK ||
        ERMA_HDR_SIZE + size > c->tr->max_pkt) {
        erma_transport_close(c->tr);
        return rc != ERMA_OK ? rc : ERMA_E2BIG;
    }
    memset(c->buf + ERMA_HDR_SIZE, 0xab, size);
    return ERMA_OK;
}

static int send_seq(struct client *c, uint64_t seq)
{
    make_pkt(c->buf, seq, 1, c->size);
    const struct erma_tx_pkt p = {.dst = &c->dst, .hdr = c->buf,
                                  .hdr_len = ERMA_HDR_SIZE + c->size};
    return erma_tx_burst(c->tr, &p, 1);
}

/* Waits up to timeout_ns for the echo of seq; returns its RTT or 0. */
static uint64_t await_echo(struct client *c, uint64_t seq, uint64_t t0, uint64_t timeout_ns)
{
    struct erma_rx_pkt rx[ERMA_MAX_BURST];
    for (;;) {
        const int n = erma_rx_burst(c->tr, rx, ERMA_MAX_BURST);
        const uint64_t now = erma_now_ns();
        for (int i = 0; i < n; i++) {
            struct erma_hdr h;
            if (erma_hdr_check(rx[i].data, rx[i].len, &h) == ERMA_OK && h.req_num == seq)
                return now - t0 ? now - t0 : 1;
        }
        if (now - t0 > timeout_ns)
            return 0;
    }
}

/* Request packets [*sent, until) of message seq, in one burst. */
static void msg_send_req(struct client *c, uint64_t seq, uint32_t *sent, uint32_t until)
{
    const uint32_t k = pkts_of(c->size, c->dmax);
    struct erma_tx_pkt tx[ERMA_MAX_BURST];
    unsigned m = 0;
    for (; *sent < until && *sent < k && m < ERMA_MAX_BURST; (*sent)++, m++) {
        const uint32_t off = *sent * c->dmax, len = c->size - off < c->dmax ? c->size - off : c->dmax;
        const struct erma_hdr h = {.req_type = MSG_TYPE, .msg_size = c->resp_size,
                                   .dest_session = (uint16_t)k, .pkt_num = (uint16_t)*sent,
                                   .req_num = seq, .proto = ERMA_PROTO_RPC};
        erma_hdr_encode(&h, c->hdr[m]);
        tx[m] = (struct erma_tx_pkt){.dst = &c->dst, .hdr = c->hdr[m], .hdr_len = ERMA_HDR_SIZE,
                                     .data = len ? c->buf + ERMA_HDR_SIZE : NULL, .data_len = len};
    }
    if (m)
        erma_tx_burst(c->tr, tx, m);
}

/* Asks for response packets [*next, until) of message seq. */
static void msg_send_rfr(struct client *c, uint64_t seq, uint32_t *next, uint32_t until)
{
    struct erma_tx_pkt tx[ERMA_MAX_BURST];
    unsigned m = 0;
    for (; *next < until && m < ERMA_MAX_BURST; (*next)++, m++) {
        const struct erma_hdr h = {.req_type = RFR_TYPE, .msg_size = c->resp_size,
                                   .pkt_num = (uint16_t)*next, .req_num = seq,
                                   .proto = ERMA_PROTO_RPC};
        erma_hdr_encode(&h, c->hdr[m]);
        tx[m] = (struct erma_tx_pkt){.dst = &c->dst, .hdr = c->hdr[m], .hdr_len = ERMA_HDR_SIZE};
    }
    if (m)
        erma_tx_burst(c->tr, tx, m);
}

/* One message exchange (see MSG_TYPE): at most RAW_WINDOW request packets
 * unacknowledged, then one RFR per response packet past the first window.
 * Returns the RTT or 0 after timeout_ns. */
static uint64_t msg_exchange(struct client *c, uint64_t seq, uint64_t timeout_ns)
{
    const uint32_t k = pkts_of(c->size, c->dmax), n = pkts_of(c->resp_size, c->dmax);
    struct erma_rx_pkt rx[ERMA_MAX_BURST];
    const uint64_t t0 = erma_now_ns();
    uint32_t sent = 0, acked = 0, got = 0, asked = n < RAW_WINDOW ? n : RAW_WINDOW;
    for (;;) {
        if (sent < k)
            msg_send_req(c, seq, &sent, acked + RAW_WINDOW);
        const int m = erma_rx_burst(c->tr, rx, ERMA_MAX_BURST);
        const uint64_t now = erma_now_ns();
        uint32_t want = asked;
        for (int i = 0; i < m; i++) {
            struct erma_hdr h;
            if (erma_hdr_check(rx[i].data, rx[i].len, &h) != ERMA_OK || h.req_num != seq)
                continue;
            acked += h.req_type == CR_TYPE;
            if (h.req_type == RESP_TYPE) {
                got++;
                want += want < n;
            }
        }
        msg_send_rfr(c, seq, &asked, want);
        if (got == n)
            return now - t0 ? now - t0 : 1;
        if (now - t0 > timeout_ns)
            return 0;
    }
}

static uint64_t exchange(struct client *c, uint64_t seq, uint64_t timeout_ns)
{
    if (c->msg)
        return msg_exchange(c, seq, timeout_ns);
    const uint64_t t0 = erma_now_ns();
    send_seq(c, seq);
    return await_echo(c, seq, t0, timeout_ns);
}

/* One packet each way when both fit one, else messages (MSG_TYPE). */
static int pingpong_open(struct client *c, const char *uri, const char *peer, uint32_t size,
                         uint32_t resp_size)
{
    if (size > ERMA_MAX_MSG_SIZE || resp_size > ERMA_MAX_MSG_SIZE)
        return ERMA_E2BIG;
    int rc = client_open(c, uri, peer, 0);
    if (rc != ERMA_OK)
        return rc;
    c->dmax = c->tr->max_pkt - ERMA_HDR_SIZE;
    c->size = size;
    c->resp_size = resp_size;
    c->msg = size != resp_size || size > c->dmax;
    memset(c->buf + ERMA_HDR_SIZE, 0xab, size < c->dmax ? size : c->dmax);
    return ERMA_OK;
}

int bench_raw_pingpong(const char *uri, const char *peer, uint32_t size, uint32_t resp_size,
                       uint64_t iters, struct bench_lat *out)
{
    return bench_raw_pingpong_gap(uri, peer, size, resp_size, iters, 0, out);
}

int bench_raw_pingpong_gap(const char *uri, const char *peer, uint32_t size, uint32_t resp_size,
                           uint64_t iters, uint64_t gap_ns, struct bench_lat *out)
{
    struct client *c = calloc(1, sizeof *c);
    int rc = c ? pingpong_open(c, uri, peer, size, resp_size) : ERMA_ENOMEM;
    if (rc != ERMA_OK) {
        free(c);
        return rc;
    }
    uint64_t *rtt = malloc(iters * sizeof *rtt), n = 0, seq = 0, lost = 0;
    const uint64_t warmup = iters / 10 + 1;
    rc = rtt ? ERMA_OK : ERMA_ENOMEM;
    /* Until the first echo the server may still be starting: retry for 2 s. */
    for (int i = 0; rc == ERMA_OK && i < 2000; i++) {
        const uint32_t size = c->size;
        c->size = 0; /* a bare header */
        send_seq(c, ++seq);
        c->size = size;
        if (await_echo(c, seq, erma_now_ns(), 1000000))
            break;
        if (i == 1999)
            rc = ERMA_ETIMEDOUT;
    }
    for (uint64_t i = 0; rc == ERMA_OK && i < iters + warmup && lost < 100; i++) {
        if (gap_ns) /* polls, as an idle polling client does; no echo has seq 0 */
            await_echo(c, 0, erma_now_ns(), gap_ns);
        const uint64_t d = exchange(c, ++seq, 100000000);
        if (d == 0)
            lost++;
        else if (i >= warmup)
            rtt[n++] = d;
    }
    if (rc == ERMA_OK && lost >= 100)
        rc = ERMA_ETIMEDOUT;
    if (rc == ERMA_OK)
        bench_lat_from_ns(rtt, n, out);
    free(rtt);
    erma_transport_close(c->tr);
    free(c);
    return rc;
}

static int raw_window(const char *uri, const char *peer, uint8_t type, uint32_t size,
                      uint32_t window, uint32_t batch, double seconds, struct bench_gate *gate,
                      struct bench_raw_rate *out)
{
    struct client c;
    int rc = window == 0 || batch == 0 || batch > ERMA_MAX_BURST
                 ? ERMA_EINVAL
                 : client_open(&c, uri, peer, size);
    bench_gate_wait(gate);
    if (rc != ERMA_OK)
        return rc;
    make_pkt(c.buf, 1, type, size);
    struct erma_tx_pkt tx[ERMA_MAX_BURST];
    for (unsigned i = 0; i < batch; i++)
        tx[i] = (struct erma_tx_pkt){.dst = &c.dst, .hdr = c.buf,
                                     .hdr_len = ERMA_HDR_SIZE + size};
    struct erma_rx_pkt rx[ERMA_MAX_BURST];
    *out = (struct bench_raw_rate){0};
    uint64_t inflight = 0, last_rx = erma_now_ns();
    const uint64_t start = last_rx, end = start + (uint64_t)(seconds * 1e9);
    uint64_t now = start;
    while (now < end) {
        while (inflight + batch <= window) {
            const int s = erma_tx_burst(c.tr, tx, batch);
            if (s <= 0)
                break;
            inflight += (uint64_t)s;
        }
        const int n = erma_rx_burst(c.tr, rx, ERMA_MAX_BURST);
        now = erma_now_ns();
        if (n > 0) {
            out->echoes += (uint64_t)n;
            inflight -= (uint64_t)n > inflight ? inflight : (uint64_t)n;
            last_rx = now;
        } else if (now - last_rx > 10000000) {
            out->lost += inflight; /* nothing for 10 ms: count the window as lost */
            inflight = 0;
            last_rx = now;
        }
    }
    out->seconds = (double)(now - start) / 1e9;
    out->mpps = (double)out->echoes / out->seconds / 1e6;
    erma_transport_close(c.tr);
    return out->echoes ? ERMA_OK : ERMA_ETIMEDOUT;
}

int bench_raw_rate(const char *uri, const char *peer, uint32_t size, uint32_t window,
                   uint32_t batch, double seconds, struct bench_raw_rate *out)
{
    return raw_window(uri, peer, 1, size, window, batch, seconds, NULL, out);
}

int bench_raw_rate_at(const char *uri, const char *peer, uint32_t size, uint32_t window,
                      uint32_t batch, double seconds, struct bench_gate *start,
                      struct bench_raw_rate *out)
{
    return raw_window(uri, peer, 1, size, window, batch, seconds, start, out);
}

int bench_raw_stream(const char *uri, const char *peer, uint32_t window, double seconds,
                     double *gbps)
{
    struct erma_transport *tr;
    int rc = erma_transport_open(uri, NULL, &tr);
    if (rc != ERMA_OK)
        return rc;
    const uint32_t size = tr->max_pkt - ERMA_HDR_SIZE;
    erma_transport_close(tr);
    struct bench_raw_rate r;
    rc = raw_window(uri, peer, ACK_TYPE, size, window, window < 16 ? window : 16, seconds,
                    NULL, &r);
    *gbps = rc == ERMA_OK ? r.mpps * 1e6 * size * 8 / 1e9 : 0;
    return rc;
}

#define REQ_TYPE 1
#define REPLY_TYPE 3

/* One side of the symmetric rate: sends requests, echoes the peer's as
 * replies, counts replies to its own; serves on for `linger` after. */
static int raw_sym_side(const char *uri, const char *peer, uint32_t size, uint32_t window,
                        uint32_t batch, double seconds, double linger, struct bench_raw_rate *out)
{
    struct client c;
    int rc = client_open(&c, uri, peer, size);
    if (rc != ERMA_OK)
        return rc;
    make_pkt(c.buf, 1, REQ_TYPE, size);
    struct erma_tx_pkt tx[ERMA_MAX_BURST], echo[ERMA_MAX_BURST];
    for (unsigned i = 0; i < batch; i++)
        tx[i] = (struct erma_tx_pkt){.dst = &c.dst, .hdr = c.buf, .hdr_len = ERMA_HDR_SIZE + size};
    struct erma_rx_pkt rx[ERMA_MAX_BURST];
    *out = (struct bench_raw_rate){0};
    uint64_t inflight = 0, now = erma_now_ns(), last_rx = now;
    const uint64_t start = now, end = start + (uint64_t)(seconds * 1e9);
    const uint64_t stop = end + (uint64_t)(linger * 1e9);
    while (now < stop) {
        while (now < end && inflight + batch <= window) {
            const int s = erma_tx_burst(c.tr, tx, batch);
            if (s <= 0)
                break;
            inflight += (uint64_t)s;
        }
        const int n = erma_rx_burst(c.tr, rx, ERMA_MAX_BURST);
        now = erma_now_ns();
        unsigned m = 0;
        for (int i = 0; i < n; i++) {
            if (rx[i].len < ERMA_HDR_SIZE)
                continue;
            if (rx[i].data[0] == REQ_TYPE) { /* req_type is the header's first byte */
                rx[i].data[0] = REPLY_TYPE;
                echo[m++] = (struct erma_tx_pkt){.dst = &rx[i].src, .hdr = rx[i].data,
                                                 .hdr_len = rx[i].len};
            } else if (now < end) {
                out->echoes++;
                inflight -= inflight ? 1 : 0;
                last_rx = now;
            }
        }
        if (m)
            erma_tx_burst(c.tr, echo, m);
        if (now - last_rx > 10000000) {
            out->lost += inflight;
            inflight = 0;
            last_rx = now;
        }
    }
    out->seconds = seconds;
    erma_transport_close(c.tr);
    return ERMA_OK;
}

struct sym_args {
    const char *uri, *peer;
    uint32_t size, window, batch;
    double seconds;
};

static int raw_sym(void *ctx, bool peer, struct bench_raw_rate *out)
{
    const struct sym_args *a = ctx;
    return raw_sym_side(peer ? a->peer : a->uri, peer ? a->uri : a->peer, a->size, a->window,
                        a->batch, a->seconds, 0.3, out);
}

int bench_raw_rate_sym(const char *uri, const char *peer, uint32_t size, uint32_t window,
                       uint32_t batch, double seconds, int peer_cpu, struct bench_raw_rate *out)
{
    if (window == 0 || batch == 0 || batch > ERMA_MAX_BURST)
        return ERMA_EINVAL;
    struct sym_args a = {uri, peer, size, window, batch, seconds};
    return bench_both_sides(raw_sym, &a, seconds, peer_cpu, out);
}
