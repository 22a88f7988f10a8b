/*
 * rma_peer - one-sided ops and a KVCS run across processes, for transports
 * that need a process per network namespace (tests/transport/test_dpdk.sh):
 *
 *   rma_peer server URI          a region and three kvcs servers, 120 s at most
 *   rma_peer client URI SERVER   runs the checks below, exits 0 if all pass
 *   rma_peer pair URI            both in one process, the server on a thread,
 *                                both at URI, without the kvcs part (for
 *                                fabrics that live in one process, whose
 *                                addresses have no port to count up from:
 *                                verbs on the mock, tests/verbs)
 *
 * Every endpoint of a side lives in its one process and thread (a dpdk port
 * belongs to one process, and net_af_xdp cannot be shared): the first open
 * is URI itself (with ?vdev=... on dpdk), the others are on the next ports
 * of URI's address without its query.
 *
 * Server: an endpoint at URI with RPCs and an RMA engine; a region of
 * REGION_LEN bytes filled with pattern() and registered READ|WRITE|REKEY;
 * RPC KEY [u64 identity] -> [i32 status][u32 region][u32 key_gen][kd 32]
 * [u8 cipher][u64 region length], a key for the identity bound to the
 * requester's address (erma_req_peer_uri, erma_region_export_uri); RPC STOP
 * ends the process (exit 0) shortly after its answer. Besides, three kvcs
 * servers at URI's port + 1, + 2, + 3, polled round-robin with the first.
 * It prints "server: ready" once everything is up.
 *
 * Client: an endpoint at URI; fetches its key by RPC, then checks, each with
 * its exact status: READs of the pattern (32 B, 4 KB, 32 at once, a 300 KB
 * transfer), WRITEs read back byte-exact (1000 B, 4 KB, a 200 KB transfer,
 * the bytes around them untouched), a READ past the region's end
 * (ERMA_EBOUNDS), an unknown region (ERMA_ENOREGION), a key with one bit of
 * kd flipped (ERMA_EAUTH, as tests/rma/test_rma.c's test_statuses finds), and a
 * REKEY with no grace: the old key then fails (ERMA_ESUPERSEDED), a key
 * derived with erma_rma_derive() from the new region key works and equals the one
 * the target now exports. Then a kvcs client (at URI's port + 1) over the
 * three kvcs servers with 2 replicas: PUTs of NKEYS keys (1 B to 9 KB), GETs
 * of them byte-exact by RPC and by one-sided READ, a missing key
 * (ERMA_ENOENT) both ways. Last, STOP to the server.
 *
 * The client's one-sided ops have a fixed timeout (OP_TIMEOUT_NS) and its
 * executor windows a base RTT (BASE_RTT_NS) fit for this path, not the
 * transport's hints (why: client()). Every wait is bounded, at 10x or more
 * of what it takes on a loaded machine; a wait that runs out prints the
 * engine's state and ends the one-sided checks.
 *
 * Exit 0 when all pass, 1 on a failure, 77 when the transport cannot open
 * (the reason is printed).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "peer_pair.h"
#include "endpoint/proto.h" /* ep->tr: the address a derived key is bound to */
#include "erma/sdk/cc.h"
#include "erma/clock.h"
#include "erma/endpoint.h"
#include "erma/sdk/rand.h"
#include "erma/rma.h"
#include "erma/rpc.h"
#include "erma/sdk/transport_driver.h"
#include "erma/sdk/wire.h"
#include "kvcs/kvcs.h"

#define KEY_RPC 1
#define STOP_RPC 2
#define REGION_LEN (1u << 20)
#define KEY_RESP (4 + 4 + 4 + ERMA_RMA_KEY_BYTES + 1 + 8)
#define KVCS_SERVERS 3
#define SERVER_MAX_NS 120000000000ull /* the server's whole life at most */
#ifndef WAIT_NS
#define WAIT_NS 10000000000ull /* any one wait of the client */
#endif
#define OP_TIMEOUT_NS 2000000000ull   /* one-sided ops: far above a loaded machine's stalls */
#define BASE_RTT_NS 50000000ull       /* for the executor's windows (client()) */
#define NKEYS 48

static uint8_t pattern(uint64_t i)
{
    return (uint8_t)(i * 7 + (i >> 9) * 13 + 3);
}

/* URI with its port moved up by delta; its query kept or dropped. */
static int uri_plus(const char *uri, unsigned delta, bool keep_query, char *out, size_t len)
{
    const char *query = strchr(uri, '?');
    const size_t host_end = query ? (size_t)(query - uri) : strlen(uri);
    const char *colon = NULL;
    for (size_t i = 0; i < host_end; i++)
        if (uri[i] == ':' && !(i + 2 < host_end && uri[i + 1] == '/' && uri[i + 2] == '/'))
            colon = uri + i;
    if (!colon)
        return ERMA_EADDR;
    const unsigned port = (unsigned)strtoul(colon + 1, NULL, 10);
    if (port == 0 || port + delta > 65535)
        return ERMA_EADDR;
    const int n = snprintf(out, len, "%.*s:%u%s", (int)(colon - uri), uri, port + delta,
                           keep_query && query ? query : "");
    return n < 0 || (size_t)n >= len ? ERMA_EADDR : ERMA_OK;
}

/* ---- server ---- */

struct server {
    struct erma_rma *rma;
    uint32_t region;
    uint64_t stop_at; /* 0: no STOP yet */
    unsigned keys_given;
};

static void on_key(struct erma_req *req, void *ctx)
{
    struct server *s = ctx;
    struct erma_msgbuf *r = erma_req_resp_buf(req);
    struct erma_rkey k = {0};
    char from[160];
    int rc = erma_req_size(req) == 8 ? ERMA_OK : ERMA_EBADPKT;
    if (rc == ERMA_OK)
        rc = erma_req_peer_uri(req, from, sizeof from);
    if (rc == ERMA_OK)
        rc = erma_region_export_uri(s->rma, s->region, erma_get_le(erma_req_data(req), 8), from,
                                    &k);
    erma_msgbuf_resize(r, rc == ERMA_OK ? KEY_RESP : 4);
    erma_put_le(r->data, (uint32_t)rc, 4);
    if (rc == ERMA_OK) {
        erma_put_le(r->data + 4, k.region, 4);
        erma_put_le(r->data + 8, k.key_gen, 4);
        memcpy(r->data + 12, k.kd, ERMA_RMA_KEY_BYTES);
        r->data[12 + ERMA_RMA_KEY_BYTES] = k.cipher;
        erma_put_le(r->data + 13 + ERMA_RMA_KEY_BYTES, REGION_LEN, 8);
        s->keys_given++;
    }
    erma_req_respond(req, r);
}

static void on_stop(struct erma_req *req, void *ctx)
{
    struct server *s = ctx;
    struct erma_msgbuf *r = erma_req_resp_buf(req);
    erma_msgbuf_resize(r, 0);
    erma_req_respond(req, r);
    if (!s->stop_at)
        s->stop_at = erma_now_ns() + 500000000ull; /* time for the answer to arrive */
}

static int serve(const char *uri)
{
    struct server s = {0};
    struct erma_nexus *nx = NULL;
    struct erma_endpoint *ep = NULL;
    struct erma_rpc *rpc = NULL;
    struct kvcs_server *kv[KVCS_SERVERS] = {0};
    uint8_t *mem = malloc(REGION_LEN);
    const struct erma_rpc_cfg rcfg = {.failure_ns = 30000000000ull};
    int rc = mem ? erma_nexus_create(NULL, &nx) : ERMA_ENOMEM;
    if (rc == ERMA_OK)
        rc = erma_handler_register(nx, KEY_RPC, on_key, ERMA_DISPATCH, &s);
    if (rc == ERMA_OK)
        rc = erma_handler_register(nx, STOP_RPC, on_stop, ERMA_DISPATCH, &s);
    if (rc == ERMA_OK && (rc = erma_endpoint_create(uri, 0, NULL, &ep)) != ERMA_OK) {
        fprintf(stderr, "server: cannot open %s: %s\n", uri, erma_strerror(rc));
        erma_nexus_destroy(nx);
        free(mem);
        return rc == ERMA_ENOTSUP ? 77 : 1;
    }
    if (rc == ERMA_OK)
        rc = erma_rpc_create(nx, ep, &rcfg, &rpc);
    if (rc == ERMA_OK)
        rc = erma_rma_create(ep, NULL, &s.rma);
    if (rc == ERMA_OK) {
        for (size_t i = 0; i < REGION_LEN; i++)
            mem[i] = pattern(i);
        rc = erma_region_register(s.rma, mem, REGION_LEN,
                                  ERMA_RMA_PERM_READ | ERMA_RMA_PERM_WRITE | ERMA_RMA_PERM_REKEY,
                                  &s.region);
    }
    char kuri[KVCS_SERVERS][160] = {""};
    const unsigned nkv = peer_pair.on ? 0 : KVCS_SERVERS;
    for (unsigned i = 0; rc == ERMA_OK && i < nkv; i++) {
        rc = uri_plus(uri, i + 1, false, kuri[i], sizeof kuri[i]);
        const struct kvcs_server_cfg kc = {.uri = kuri[i], .buckets = 1024,
                                           .log_bytes = 4u << 20};
        if (rc == ERMA_OK && (rc = kvcs_server_create(&kc, &kv[i])) != ERMA_OK)
            fprintf(stderr, "server: kvcs server on %s: %s\n", kuri[i], erma_strerror(rc));
    }
    if (rc == ERMA_OK) {
        printf("server: ready: region %" PRIu32 " of %u B on %s, kvcs servers on %s %s %s\n",
               s.region, REGION_LEN, uri, kuri[0], kuri[1], kuri[2]);
        fflush(stdout);
        peer_pair_up(ep);
        const uint64_t end = erma_now_ns() + SERVER_MAX_NS;
        for (uint64_t now = 0; now < end && (!s.stop_at || now < s.stop_at) &&
                               !peer_pair_done();
             now = erma_now_ns()) {
            erma_endpoint_run_once(ep);
            for (unsigned i = 0; i < nkv; i++)
                kvcs_server_run(kv[i], 0);
        }
        struct erma_rma_stats st;
        erma_rma_get_stats(s.rma, &st);
        printf("server: %s; %u keys handed out; one-sided: %" PRIu64 " served, %" PRIu64
               " auth failed\n",
               s.stop_at ? "stopped by the client" : "time limit reached", s.keys_given,
               st.served, st.auth_failed);
        if (!s.stop_at)
            rc = ERMA_ETIMEDOUT;
    } else {
        fprintf(stderr, "server: %s\n", erma_strerror(rc));
    }
    for (unsigned i = 0; i < KVCS_SERVERS; i++)
        kvcs_server_destroy(kv[i]);
    if (s.rma)
        erma_rma_destroy(s.rma);
    if (rpc)
        erma_rpc_destroy(rpc);
    erma_endpoint_destroy(ep);
    erma_nexus_destroy(nx);
    free(mem);
    return rc == ERMA_OK ? 0 : 1;
}

/* ---- client ---- */

struct client {
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    struct erma_rpc *rpc;
    struct erma_rma *rma;
    int sess, peer;
    unsigned failed;
    /* the RPC in flight */
    bool rpc_done;
    int rpc_status;
    /* the completion awaited */
    struct erma_rma_completion c;
    int want, got;
    bool stuck;       /* a wait ran out: ops are left behind */
    uint64_t last_ns; /* how long the last wait took */
};

static void check(struct client *c, bool ok, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void check(struct client *c, bool ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s: ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    c->failed += !ok;
}

static void on_rpc(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    (void)resp;
    struct client *c = tag;
    c->rpc_status = status;
    c->rpc_done = true;
}

static bool rpc_done(void *ctx)
{
    return ((struct client *)ctx)->rpc_done;
}

/* One RPC of type with req, its answer in resp; the RPC's status. */
static int call(struct client *c, uint8_t type, struct erma_msgbuf *req, struct erma_msgbuf *resp)
{
    c->rpc_done = false;
    int rc = erma_rpc_call(c->rpc, c->sess, type, req, resp, on_rpc, c);
    if (rc != ERMA_OK) {
        c->rpc_done = true; /* never queued */
        return rc;
    }
    /* the first call waits for the session to connect too */
    rc = erma_endpoint_run_until(c->ep, rpc_done, c, 3 * WAIT_NS);
    return rc == ERMA_OK ? c->rpc_status : rc;
}

/* req and resp, unless erma still holds them (a call that did not come
 * back): the endpoint's pool frees those at the end. */
static void call_free(struct client *c, struct erma_msgbuf *req, struct erma_msgbuf *resp)
{
    if (!c->rpc_done)
        return;
    erma_msgbuf_free(c->rpc, req);
    erma_msgbuf_free(c->rpc, resp);
}

/* Asks the server for the region's key for this client. */
static int fetch_key(struct client *c, struct erma_rkey *k, uint64_t *len)
{
    struct erma_msgbuf req = {0}, resp = {0};
    c->rpc_done = true;
    int rc = erma_msgbuf_alloc(c->rpc, 8, &req);
    if (rc == ERMA_OK)
        rc = erma_msgbuf_alloc(c->rpc, 128, &resp);
    if (rc == ERMA_OK) {
        erma_put_le(req.data, erma_rma_identity(c->rma), 8);
        rc = call(c, KEY_RPC, &req, &resp);
    }
    if (rc == ERMA_OK && resp.size >= 4 && (int32_t)erma_get_le(resp.data, 4) != ERMA_OK)
        rc = (int32_t)erma_get_le(resp.data, 4);
    else if (rc == ERMA_OK && resp.size != KEY_RESP)
        rc = ERMA_EBADPKT;
    if (rc == ERMA_OK) {
        k->region = (uint32_t)erma_get_le(resp.data + 4, 4);
        k->key_gen = (uint32_t)erma_get_le(resp.data + 8, 4);
        memcpy(k->kd, resp.data + 12, ERMA_RMA_KEY_BYTES);
        k->cipher = resp.data[12 + ERMA_RMA_KEY_BYTES];
        *len = erma_get_le(resp.data + 13 + ERMA_RMA_KEY_BYTES, 8);
    }
    call_free(c, &req, &resp);
    return rc;
}

static bool gathered(void *ctx)
{
    struct client *c = ctx;
    struct erma_rma_completion one;
    while (c->got < c->want && erma_rma_poll(c->rma, &one, 1) == 1) {
        if (c->got == 0 || one.status != ERMA_OK)
            c->c = one; /* the first, or a failure */
        c->got++;
    }
    return c->got >= c->want;
}

/* What the initiator's engine is doing, when a wait ran out. */
static void diagnose(struct client *c)
{
    struct erma_rma_stats st;
    struct erma_rma_rtt rtt = {0};
    erma_rma_get_stats(c->rma, &st);
    erma_rma_peer_rtt(c->rma, c->peer, &rtt);
    struct erma_rma_window_info w[3];
    const bool have[] = {erma_rma_local_window(c->rma, &w[0]) == ERMA_OK,
                         erma_rma_window(c->rma, c->peer, ERMA_RMA_READ, &w[1]) == ERMA_OK,
                         erma_rma_window(c->rma, c->peer, ERMA_RMA_WRITE, &w[2]) == ERMA_OK};
    printf("     initiator: %" PRIu64 " submitted, %" PRIu64 " issued, %" PRIu64
           " completed, %" PRIu64 " retries, %" PRIu64 " unmatched, %" PRIu64
           " failed to open; srtt %.1f us, rttvar %.1f us, rto %.1f us\n",
           st.submitted, st.issued, st.completed, st.retries, st.rx_unmatched,
           st.rx_unsealed_bad, rtt.srtt_ns / 1e3, rtt.rttvar_ns / 1e3, rtt.rto_ns / 1e3);
    static const char *const name[] = {"local", "remote in", "remote out"};
    for (int i = 0; i < 3; i++)
        if (have[i])
            printf("     window %s: cwnd %.4f, %" PRIu32 " in flight, srtt %.1f us, %" PRIu64
                   " issued, %" PRIu64 " decreases, %" PRIu64 " cuts\n",
                   name[i], w[i].cwnd, w[i].inflight, w[i].srtt_ns / 1e3, w[i].issued,
                   w[i].decreases, w[i].cuts);
}

/* Runs until want completions came (the first failure's or the first
 * completion's status is returned), at most WAIT_NS; 1 when they did not.
 * A run that timed out leaves ops behind: later waits would take their
 * completions for their own, so the client gives up on the rest. */
static int await(struct client *c, int want)
{
    if (c->stuck)
        return 1;
    c->want = want;
    c->got = 0;
    c->c.status = ERMA_OK;
    const uint64_t t0 = erma_now_ns();
    if (erma_endpoint_run_until(c->ep, gathered, c, WAIT_NS) != ERMA_OK) {
        printf("     no completion within %.0f s (%d of %d)\n", WAIT_NS / 1e9, c->got, want);
        diagnose(c);
        c->stuck = true;
        return 1;
    }
    c->last_ns = erma_now_ns() - t0;
    return c->c.status;
}

static int op(struct client *c, enum erma_rma_op o, const struct erma_rkey *k, uint64_t off,
              void *local, uint32_t len)
{
    const struct erma_rma_cmd cmd = {.op = o, .peer = c->peer, .rkey = *k, .offset = off,
                                     .local = local, .len = len};
    const int slot = erma_rma_submit(c->rma, &cmd);
    return slot < 0 ? slot : await(c, 1);
}

static int xfer(struct client *c, enum erma_rma_op o, const struct erma_rkey *k, uint64_t off,
                void *local, uint32_t len)
{
    const struct erma_rma_xfer x = {.op = o, .peer = c->peer, .rkey = *k, .offset = off,
                                    .local = local, .len = len, .max_retries = 8};
    const int id = erma_rma_transfer(c->rma, &x);
    if (id < 0)
        return id;
    const int rc = await(c, 1);
    if (rc == ERMA_OK && (!c->c.transfer || c->c.id != (uint32_t)id))
        return ERMA_EBADPKT;
    return rc;
}

/* The first byte of buf[0..len) that is not pattern(off + i), or -1. */
static long unlike_pattern(const uint8_t *buf, uint64_t off, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (buf[i] != pattern(off + i))
            return (long)i;
    return -1;
}

static void want_status(struct client *c, int got, int want, const char *what)
{
    check(c, got == want, "%s: %s (want %s)", what, erma_strerror(got), erma_strerror(want));
}

/* buf and src (REGION_LEN bytes each) stay the caller's until the engine
 * is gone: after a wait that ran out, ops may still land in them. */
static void one_sided(struct client *c, struct erma_rkey k, uint64_t len, uint8_t *buf,
                      uint8_t *src)
{
    int rc = ERMA_OK;
    check(c, len == REGION_LEN, "the region is %" PRIu64 " B (want %u)", len, REGION_LEN);

    /* READs of the pattern */
    static const uint32_t sizes[] = {32, 4096};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        const uint64_t off = 100 + i * 8192;
        memset(buf, 0, sizes[i]);
        rc = op(c, ERMA_RMA_READ, &k, off, buf, sizes[i]);
        const long bad = rc == ERMA_OK ? unlike_pattern(buf, off, sizes[i]) : -1;
        check(c, rc == ERMA_OK && bad < 0, "READ %u B at %" PRIu64 ": %s, %s", sizes[i], off,
              erma_strerror(rc), bad < 0 ? "byte-exact" : "WRONG BYTES");
    }
    enum { MANY = 32, SMALL = 64 };
    memset(buf, 0, MANY * SMALL);
    int submitted = 0, src_rc = ERMA_OK;
    for (unsigned i = 0; i < MANY && src_rc >= 0; i++) {
        const struct erma_rma_cmd cmd = {.op = ERMA_RMA_READ, .peer = c->peer, .rkey = k,
                                         .offset = 20000 + 97 * i, .local = buf + SMALL * i,
                                         .len = SMALL, .tag = i};
        src_rc = erma_rma_submit(c->rma, &cmd);
        submitted += src_rc >= 0;
    }
    rc = submitted ? await(c, submitted) : ERMA_OK; /* what was submitted completes first */
    rc = src_rc < 0 ? src_rc : rc;
    long bad = -1;
    for (unsigned i = 0; rc == ERMA_OK && bad < 0 && i < MANY; i++)
        bad = unlike_pattern(buf + SMALL * i, 20000 + 97 * i, SMALL);
    check(c, rc == ERMA_OK && bad < 0, "%d READs of %d B in flight at once: %s, %s", MANY, SMALL,
          erma_strerror(rc), bad < 0 ? "byte-exact" : "WRONG BYTES");
    const uint32_t big = 300000 + 7;
    memset(buf, 0, big);
    rc = xfer(c, ERMA_RMA_READ, &k, 65536 + 5, buf, big);
    bad = rc == ERMA_OK ? unlike_pattern(buf, 65536 + 5, big) : -1;
    check(c, rc == ERMA_OK && bad < 0, "READ transfer of %u B (%u ops): %s in %.1f ms, %s",
          big, (big + ERMA_RMA_MAX_OP - 1) / ERMA_RMA_MAX_OP, erma_strerror(rc),
          c->last_ns / 1e6, bad < 0 ? "byte-exact" : "WRONG BYTES");
    diagnose(c);

    /* WRITEs, read back with the bytes around them */
    const struct {
        uint64_t off;
        uint32_t len;
        bool transfer;
    } w[] = {{500001, 1000, false}, {520000, 4096, false}, {600000 + 3, 200000, true}};
    for (size_t i = 0; i < sizeof w / sizeof *w; i++) {
        for (uint32_t j = 0; j < w[i].len; j++)
            src[j] = (uint8_t)(j * 29 + i * 11 + 5);
        rc = w[i].transfer ? xfer(c, ERMA_RMA_WRITE, &k, w[i].off, src, w[i].len)
                           : op(c, ERMA_RMA_WRITE, &k, w[i].off, src, w[i].len);
        const uint64_t took = c->last_ns;
        const uint32_t around = 64, n = w[i].len + 2 * around;
        const uint64_t from = w[i].off - around;
        memset(buf, 0, n);
        const int rrc = rc != ERMA_OK ? rc
                        : n > ERMA_RMA_MAX_OP ? xfer(c, ERMA_RMA_READ, &k, from, buf, n)
                                              : op(c, ERMA_RMA_READ, &k, from, buf, n);
        const bool exact = rrc == ERMA_OK && memcmp(buf + around, src, w[i].len) == 0 &&
                           unlike_pattern(buf, from, around) < 0 &&
                           unlike_pattern(buf + around + w[i].len, w[i].off + w[i].len,
                                          around) < 0;
        check(c, rc == ERMA_OK && rrc == ERMA_OK && exact,
              "WRITE%s %u B at %" PRIu64 ": %s in %.1f ms, read back: %s, %s",
              w[i].transfer ? " transfer" : "", w[i].len, w[i].off, erma_strerror(rc),
              took / 1e6, erma_strerror(rrc),
              exact ? "byte-exact, the bytes around untouched" : "WRONG BYTES");
    }

    /* statuses */
    rc = op(c, ERMA_RMA_READ, &k, REGION_LEN - 16, buf, 32);
    want_status(c, rc, ERMA_EBOUNDS, "READ of 32 B 16 B before the region's end");
    rc = op(c, ERMA_RMA_READ, &k, REGION_LEN, buf, 1);
    want_status(c, rc, ERMA_EBOUNDS, "READ of 1 B at the region's end");
    struct erma_rkey unknown = k;
    unknown.region = 0x7777;
    rc = op(c, ERMA_RMA_READ, &unknown, 0, buf, 32);
    want_status(c, rc, ERMA_ENOREGION, "READ of an unknown region id");
    struct erma_rkey tampered = k;
    tampered.kd[7] ^= 0x10;
    rc = op(c, ERMA_RMA_READ, &tampered, 0, buf, 32);
    want_status(c, rc, ERMA_EAUTH, "READ with one bit of kd flipped");
    memset(src, 0xee, 32);
    rc = op(c, ERMA_RMA_WRITE, &tampered, 500001, src, 32);
    want_status(c, rc, ERMA_EAUTH, "WRITE with one bit of kd flipped");
    rc = op(c, ERMA_RMA_READ, &k, 500001, buf, 32);
    bool kept = true; /* what the first WRITE put there */
    for (uint32_t j = 0; j < 32; j++)
        kept = kept && buf[j] == (uint8_t)(j * 29 + 5);
    check(c, rc == ERMA_OK && kept, "the tampered WRITE wrote nothing: %s, %s",
          erma_strerror(rc), kept ? "the bytes unchanged" : "BYTES CHANGED");

    /* REKEY without grace, then the old key fails and a derived one works */
    uint8_t kr[ERMA_RMA_KEY_BYTES];
    struct erma_rand r;
    erma_rand_seed(&r, erma_now_ns());
    for (size_t i = 0; i < sizeof kr; i++)
        kr[i] = (uint8_t)erma_rand_u64(&r);
    const struct erma_rma_cmd rk = {.op = ERMA_RMA_REKEY, .peer = c->peer, .rkey = k,
                                    .local = kr, .grace_ns = 0};
    rc = erma_rma_submit(c->rma, &rk);
    rc = rc < 0 ? rc : await(c, 1);
    want_status(c, rc, ERMA_OK, "REKEY, no grace");
    rc = op(c, ERMA_RMA_READ, &k, 0, buf, 32);
    want_status(c, rc, ERMA_ESUPERSEDED, "READ with the old key after the REKEY");
    char me[160];
    struct erma_addr addr;
    struct erma_rkey nk = {0}, exported = {0};
    rc = erma_rma_uri(c->rma, me, sizeof me);
    if (rc == ERMA_OK)
        rc = erma_transport_resolve(c->ep->tr, me, &addr);
    if (rc == ERMA_OK) {
        erma_rma_derive(kr, k.region, k.key_gen + 1, (enum erma_rma_cipher)k.cipher,
                        erma_rma_identity(c->rma), &addr, &nk);
        memset(buf, 0, 4096);
        rc = op(c, ERMA_RMA_READ, &nk, 4096, buf, 4096);
    }
    bad = rc == ERMA_OK ? unlike_pattern(buf, 4096, 4096) : -1;
    check(c, rc == ERMA_OK && bad < 0,
          "READ of 4 KB with a key derived from the new region key (generation %" PRIu32
          ", for %s): %s, %s", nk.key_gen, me, erma_strerror(rc),
          bad < 0 ? "byte-exact" : "WRONG BYTES");
    for (uint32_t j = 0; j < 100; j++)
        src[j] = (uint8_t)(j ^ 0xa5);
    rc = op(c, ERMA_RMA_WRITE, &nk, 520000, src, 100);
    const int rrc = rc == ERMA_OK ? op(c, ERMA_RMA_READ, &nk, 520000, buf, 100) : rc;
    check(c, rrc == ERMA_OK && memcmp(buf, src, 100) == 0,
          "WRITE and READ back with the derived key: %s, %s", erma_strerror(rc),
          erma_strerror(rrc));
    uint64_t len2 = 0;
    rc = fetch_key(c, &exported, &len2);
    check(c, rc == ERMA_OK && exported.region == nk.region && exported.key_gen == nk.key_gen &&
                 exported.cipher == nk.cipher && memcmp(exported.kd, nk.kd, sizeof nk.kd) == 0,
          "the target now exports the derived key (generation %" PRIu32 "): %s",
          exported.key_gen, erma_strerror(rc));

    struct erma_rma_stats st;
    erma_rma_get_stats(c->rma, &st);
    printf("     initiator: %" PRIu64 " submitted, %" PRIu64 " completed, %" PRIu64
           " chunk retries, %" PRIu64 " unmatched answers\n",
           st.submitted, st.completed, st.retries, st.rx_unmatched);
}

/* ---- kvcs ---- */

struct kvcs_get_op {
    struct client *c;
    unsigned key;
    int status;
    bool done, exact;
    uint32_t answered;
    struct kvcs_op_info info;
    struct kvcs_client *kc;
};

static unsigned kv_pending;

static uint32_t value_len(unsigned i)
{
    return i == 0 ? 1 : (i * 1237u) % 9000u + 1;
}

static uint8_t value_byte(unsigned i, uint32_t j)
{
    return (uint8_t)(i * 31 + j * 7 + 11);
}

static void key_of(unsigned i, char *key, uint32_t *klen)
{
    *klen = (uint32_t)snprintf(key, 32, "rma_peer-key-%03u", i);
}

static void on_kv(void *tag, int status, const uint8_t *val, uint32_t vlen)
{
    struct kvcs_get_op *o = tag;
    o->status = status;
    o->done = true;
    o->exact = false;
    if (status == ERMA_OK && val) {
        bool same = vlen == value_len(o->key);
        for (uint32_t j = 0; same && j < vlen; j++)
            same = val[j] == value_byte(o->key, j);
        o->exact = same;
    }
    kvcs_op_info(o->kc, &o->info);
    kv_pending--;
}

/* Runs the kvcs client (and the client's own endpoint) until no op is
 * pending, WAIT_NS at most. */
static bool kv_wait(struct client *c, struct kvcs_client *kc)
{
    const uint64_t end = erma_now_ns() + WAIT_NS;
    while (kv_pending && erma_now_ns() < end) {
        kvcs_client_run_once(kc);
        erma_endpoint_run_once(c->ep);
    }
    return kv_pending == 0;
}

static void kvcs_gets(struct client *c, struct kvcs_client *kc, struct kvcs_get_op *ops,
                      const char *how)
{
    char key[32];
    uint32_t klen;
    unsigned started = 0, exact = 0, from[KVCS_SERVERS] = {0};
    int last = ERMA_OK;
    for (unsigned i = 0; i < NKEYS; i++) {
        ops[i] = (struct kvcs_get_op){.c = c, .key = i, .kc = kc};
        key_of(i, key, &klen);
        const int rc = kvcs_get(kc, key, klen, on_kv, &ops[i]);
        if (rc == ERMA_OK) {
            started++;
            kv_pending++;
        } else {
            last = rc;
        }
    }
    const bool all = kv_wait(c, kc);
    for (unsigned i = 0; i < NKEYS; i++) {
        exact += ops[i].done && ops[i].status == ERMA_OK && ops[i].exact;
        if (ops[i].done && ops[i].status != ERMA_OK)
            last = ops[i].status;
        if (ops[i].done && ops[i].info.answered < KVCS_SERVERS)
            from[ops[i].info.answered]++;
    }
    check(c, all && started == NKEYS && exact == NKEYS,
          "kvcs: %u GETs by %s: %u of %u byte-exact (answers from servers 0/1/2: %u/%u/%u)%s%s",
          NKEYS, how, exact, NKEYS, from[0], from[1], from[2], last != ERMA_OK ? "; a failure: " : "",
          last != ERMA_OK ? erma_strerror(last) : "");
    /* a key never PUT is a miss */
    struct kvcs_get_op miss = {.c = c, .key = 9999, .kc = kc};
    int rc = kvcs_get(kc, "rma_peer-no-such-key", 20, on_kv, &miss);
    if (rc == ERMA_OK) {
        kv_pending++;
        rc = kv_wait(c, kc) ? miss.status : ERMA_ETIMEDOUT;
    }
    char what[64];
    snprintf(what, sizeof what, "kvcs: GET of a missing key by %s", how);
    want_status(c, rc, ERMA_ENOENT, what);
}

static void kvcs(struct client *c, const char *uri, const char *server)
{
    char me[160], srv[KVCS_SERVERS][160];
    const char *servers[KVCS_SERVERS];
    int rc = uri_plus(uri, 1, false, me, sizeof me);
    for (unsigned i = 0; rc == ERMA_OK && i < KVCS_SERVERS; i++) {
        rc = uri_plus(server, i + 1, true, srv[i], sizeof srv[i]);
        servers[i] = srv[i];
    }
    if (rc != ERMA_OK) {
        check(c, false, "kvcs: URIs from %s and %s: %s", uri, server, erma_strerror(rc));
        return;
    }
    /* Generous bounds: a loaded 2-core machine (ASan, another process) must
     * not turn scheduling delays into failed tries. */
    const struct kvcs_client_cfg cfg = {.uri = me, .servers = servers,
                                        .nservers = KVCS_SERVERS, .replicas = 2,
                                        .method = KVCS_RPC, .max_ops = 64,
                                        .attempt_timeout_ns = 1000000000ull,
                                        .connect_timeout_ns = 20000000000ull,
                                        .failure_ns = 5000000000ull, .cc_off = true};
    struct kvcs_client *kc = NULL;
    rc = kvcs_client_create(&cfg, &kc);
    check(c, rc == ERMA_OK, "kvcs: client on %s over %s %s %s, 2 replicas: %s", me, srv[0],
          srv[1], srv[2], erma_strerror(rc));
    if (rc != ERMA_OK)
        return;
    static struct kvcs_get_op ops[NKEYS];
    static uint8_t val[9001];
    char key[32];
    uint32_t klen;
    unsigned started = 0, ok = 0, two = 0;
    int last = ERMA_OK;
    kv_pending = 0;
    for (unsigned i = 0; i < NKEYS; i++) {
        ops[i] = (struct kvcs_get_op){.c = c, .key = i, .kc = kc};
        key_of(i, key, &klen);
        for (uint32_t j = 0; j < value_len(i); j++)
            val[j] = value_byte(i, j);
        rc = kvcs_put(kc, key, klen, val, value_len(i), on_kv, &ops[i]);
        if (rc == ERMA_OK) {
            started++;
            kv_pending++;
        } else {
            last = rc;
        }
    }
    const bool all = kv_wait(c, kc);
    for (unsigned i = 0; i < NKEYS; i++) {
        ok += ops[i].done && ops[i].status == ERMA_OK;
        if (ops[i].done && ops[i].status != ERMA_OK)
            last = ops[i].status;
        /* stored on both replicas, not only on one */
        two += ops[i].done && ops[i].info.nreplicas == 2 && ops[i].info.status[0] == ERMA_OK &&
               ops[i].info.status[1] == ERMA_OK;
    }
    check(c, all && started == NKEYS && ok == NKEYS && two == NKEYS,
          "kvcs: %u PUTs of 1 B to 9 KB: %u ok, %u stored on both replicas%s%s", NKEYS, ok, two,
          last != ERMA_OK ? "; a failure: " : "", last != ERMA_OK ? erma_strerror(last) : "");
    kvcs_gets(c, kc, ops, "RPC");
    kvcs_client_set_method(kc, KVCS_READ);
    kvcs_gets(c, kc, ops, "READ");
    struct kvcs_client_stats st;
    kvcs_client_get_stats(kc, &st);
    check(c, st.rpc_gets == NKEYS + 1 && st.read_gets == NKEYS + 1 && st.failed == 0,
          "kvcs: %" PRIu64 " GETs by RPC, %" PRIu64 " by READ, %" PRIu64 " failed, %" PRIu64
          " failovers",
          st.rpc_gets, st.read_gets, st.failed, st.failovers);
    kvcs_client_destroy(kc);
}

static int client(const char *uri, const char *server)
{
    struct client c = {.sess = -1};
    /* Fixed op timeouts far above what a loaded machine stalls for: the
     * statuses checked must come from the target, never from a timeout. */
    struct erma_rma_cfg mcfg = {.op_timeout_ns = OP_TIMEOUT_NS,
                                .dispatch_timeout_ns = OP_TIMEOUT_NS};
    const struct erma_rpc_cfg rcfg = {.failure_ns = 30000000000ull,
                                      .connect_timeout_ns = 20000000000ull};
    int rc = erma_nexus_create(NULL, &c.nx);
    if (rc == ERMA_OK && (rc = erma_endpoint_create(uri, 0, NULL, &c.ep)) != ERMA_OK) {
        fprintf(stderr, "client: cannot open %s: %s\n", uri, erma_strerror(rc));
        erma_nexus_destroy(c.nx);
        return rc == ERMA_ENOTSUP ? 77 : 1;
    }
    /* The executor's windows for the path this test runs on. By default
     * they come from the transport's hints, and the dpdk transport gives
     * no base RTT for a PMD over a kernel socket (af_packet, af_xdp), so
     * erma_window_cfg_for() takes 10 us, while READs between these
     * namespaces take 0.1-0.5 ms, and milliseconds while another process
     * loads this 2-core machine: the remote window sat at its floor of 1/64
     * op and a 300 KB READ transfer took from 0.5 s to 28 s. BASE_RTT_NS is
     * that round trip with its jitter, as cc.h asks, on a machine loaded as
     * the suite's may be: beside a CPU hog af_xdp's round trips reached
     * 20 ms and, with a 1 ms base, the windows decreased to 1/64 op until a
     * 200 KB WRITE transfer could not finish in 10 s: 50 ms now. This test
     * checks bytes and statuses; the windows' behaviour is tested on the sim. */
    struct erma_window_cfg wcfg;
    if (rc == ERMA_OK) {
        const uint64_t link = c.ep->tr->hints.link_bps ? c.ep->tr->hints.link_bps : 10000000000ull;
        wcfg = erma_window_cfg_for((double)link, BASE_RTT_NS);
        mcfg.window = &wcfg;
        printf("     executor windows: link %.1f Gb/s, base RTT %.1f ms (transport hint: %.1f us)"
               ", first window %.0f ops\n", link / 1e9, BASE_RTT_NS / 1e6,
               c.ep->tr->hints.base_rtt_ns / 1e3, wcfg.init_cwnd);
    }
    if (rc == ERMA_OK)
        rc = erma_rpc_create(c.nx, c.ep, &rcfg, &c.rpc);
    if (rc == ERMA_OK)
        rc = erma_rma_create(c.ep, &mcfg, &c.rma);
    if (rc == ERMA_OK && (c.sess = erma_session_create(c.rpc, server, 0)) < 0)
        rc = c.sess;
    if (rc == ERMA_OK && (c.peer = erma_rma_peer(c.rma, server, 0)) < 0)
        rc = c.peer;
    struct erma_rkey k = {0};
    uint64_t len = 0;
    if (rc == ERMA_OK)
        rc = fetch_key(&c, &k, &len);
    check(&c, rc == ERMA_OK,
          "key by RPC from %s: %s (region %" PRIu32 ", generation %" PRIu32 ", cipher %s)",
          server, erma_strerror(rc), k.region, k.key_gen,
          k.cipher == ERMA_RMA_AES256_GCM ? "AES-256-GCM" : "ChaCha20-Poly1305");
    uint8_t *buf = malloc(REGION_LEN), *src = malloc(REGION_LEN);
    if (rc == ERMA_OK && (!buf || !src))
        rc = ERMA_ENOMEM;
    if (rc == ERMA_OK)
        one_sided(&c, k, len, buf, src);
    if (rc == ERMA_OK && !peer_pair.on)
        kvcs(&c, uri, server);
    if (c.sess >= 0) { /* the server ends once it answered */
        struct erma_msgbuf req = {0}, resp = {0};
        c.rpc_done = true;
        int stop = erma_msgbuf_alloc(c.rpc, 8, &req);
        if (stop == ERMA_OK)
            stop = erma_msgbuf_alloc(c.rpc, 64, &resp);
        if (stop == ERMA_OK)
            stop = call(&c, STOP_RPC, &req, &resp);
        printf("     STOP to the server: %s\n", erma_strerror(stop));
        call_free(&c, &req, &resp);
    }
    if (c.rma)
        erma_rma_destroy(c.rma);
    if (c.rpc)
        erma_rpc_destroy(c.rpc);
    erma_endpoint_destroy(c.ep);
    erma_nexus_destroy(c.nx);
    free(buf);
    free(src);
    printf("%s: %u check(s) failed\n", c.failed ? "FAIL" : "PASS", c.failed);
    return c.failed ? 1 : 0;
}

/* The server on a thread, the client here; the server ends on the
 * client's STOP (or after SERVER_MAX_NS). */
static int pair(const char *uri)
{
    const int rc = peer_pair_run(uri, serve, client);
    if (rc < 0)
        return peer_pair.serve_rc ? peer_pair.serve_rc : 1;
    return rc || peer_pair.serve_rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && strcmp(argv[1], "server") == 0)
        return serve(argv[2]);
    if (argc == 4 && strcmp(argv[1], "client") == 0)
        return client(argv[2], argv[3]);
    if (argc == 3 && strcmp(argv[1], "pair") == 0)
        return pair(argv[2]);
    fprintf(stderr, "usage: rma_peer server URI | rma_peer client URI SERVER_URI | "
                    "rma_peer pair URI\n");
    return 2;
}
