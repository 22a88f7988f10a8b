/* Point GETs beside long SCANs on the kv service (erma/kv.h): does a scan,
 * which runs on a worker thread, hold up the event loop's point requests? */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "erma/clock.h"
#include "erma/endpoint.h"
#include "kv/kv.h"
#include "erma/log.h"
#include "erma/sdk/rand.h"
#include "erma/rpc.h"

#define KV_BASE 10
#define PUT_WINDOW 8
/* The most GETs in flight (--window), on sessions of ERMA_SESSION_SLOTS each:
 * a session has that many requests in flight, the rest wait in its backlog. */
#define GET_WINDOW 512
#define GET_SESSIONS (GET_WINDOW / ERMA_SESSION_SLOTS)

int bench_kv_scan_server(const char *uri, uint64_t max_ns, bool busy_poll)
{
    struct erma_nexus *nx = NULL;
    struct erma_endpoint *ep = NULL;
    struct erma_rpc *rpc = NULL;
    struct kv *kv = NULL;
    struct kv_server *srv = NULL;
    const struct erma_nexus_cfg ncfg = {.workers = 1};
    const struct erma_endpoint_cfg cfg = {.busy_poll = busy_poll};
    int rc = kv_create(1 << 16, 64u << 20, &kv);
    if (rc == ERMA_OK)
        rc = erma_nexus_create(&ncfg, &nx);
    if (rc == ERMA_OK)
        rc = kv_serve(nx, KV_BASE, kv, &srv);
    if (rc == ERMA_OK)
        rc = erma_endpoint_create(uri, 0, &cfg, &ep);
    if (rc == ERMA_OK)
        rc = erma_rpc_create(nx, ep, NULL, &rpc);
    const uint64_t end = erma_now_ns() + max_ns;
    while (rc == ERMA_OK && erma_now_ns() < end && getppid() != 1)
        erma_endpoint_run(ep, 10000000);
    if (rc != ERMA_OK)
        ERMA_ERROR("kv server on %s: %s", uri, erma_strerror(rc));
    if (rpc)
        erma_rpc_destroy(rpc);
    erma_endpoint_destroy(ep);
    kv_server_destroy(srv);
    erma_nexus_destroy(nx);
    kv_destroy(kv);
    return rc;
}

pid_t bench_kv_scan_server_fork(const char *uri, int cpu, uint64_t max_ns, bool busy_poll)
{
    const pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the client */
        bench_pin(cpu);
        _exit(bench_kv_scan_server(uri, max_ns, busy_poll) == ERMA_OK ? 0 : 1);
    }
    return pid;
}

/* Keys "k000042" sort like their numbers; values are a function of the key. */
static uint32_t make_key(uint32_t k, char *key)
{
    return (uint32_t)snprintf(key, 16, "k%06u", k % 1000000);
}

static uint32_t make_val(uint32_t k, uint32_t size, uint8_t *v)
{
    for (uint32_t i = 0; i < size; i++)
        v[i] = (uint8_t)(k * 7 + i);
    return size;
}

/* One request in flight on a session. */
struct call {
    struct erma_msgbuf req, resp;
    uint64_t start;
    uint32_t key;
    int status;
    bool busy;
};

struct client {
    const struct bench_kv_scan_opts *o;
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    struct erma_rpc *rpc;
    int get_sess[GET_SESSIONS], scan_sess;
    unsigned nget_sess;
    struct call *get, scan, put[PUT_WINDOW];
    uint64_t wrong, failed, scans, gets;
};

static void on_done(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    (void)resp;
    struct call *c = tag;
    c->status = status;
    c->busy = false;
}

static int issue(struct client *cl, int sess, uint8_t op, struct call *c)
{
    c->busy = true;
    c->start = erma_now_ns();
    const int rc = erma_rpc_call(cl->rpc, sess, KV_BASE + op, &c->req, &c->resp, on_done, c);
    c->busy = rc == ERMA_OK;
    return rc;
}

static bool call_idle(void *ctx)
{
    return !((const struct call *)ctx)->busy;
}

/* Runs the loop until c is done or timeout_ns passes. */
static int wait_call(struct client *cl, struct call *c, uint64_t timeout_ns)
{
    /* its status is checked by the caller */
    return erma_endpoint_run_until(cl->ep, call_idle, c, timeout_ns);
}

static int load(struct client *cl)
{
    char key[16];
    uint8_t val[4096];
    uint32_t next = 0, left = cl->o->keys;
    const uint64_t end = erma_now_ns() + 30000000000ull;
    while (left && erma_now_ns() < end) {
        for (int i = 0; i < PUT_WINDOW; i++) {
            struct call *c = &cl->put[i];
            if (c->busy)
                continue;
            if (c->start && (c->status != ERMA_OK || kv_resp(&c->resp, NULL, NULL) != ERMA_OK)) {
                const int rc = c->status != ERMA_OK ? c->status : kv_resp(&c->resp, NULL, NULL);
                fprintf(stderr, "kv_scan: loading keys: PUT k%06u: %s\n", c->key, erma_strerror(rc));
                return rc;
            }
            if (c->start)
                left--;
            c->start = 0;
            if (next == cl->o->keys)
                continue;
            const uint32_t kl = make_key(next, key), vl = make_val(next, cl->o->value_size, val);
            int rc = kv_req_put(&c->req, key, kl, val, vl);
            c->key = next;
            if (rc == ERMA_OK)
                rc = issue(cl, cl->get_sess[0], KV_PUT, c);
            if (rc != ERMA_OK)
                return rc;
            next++;
        }
        erma_endpoint_run_once(cl->ep);
    }
    if (left)
        fprintf(stderr, "kv_scan: loading keys: %u of %u keys stored after 30 s\n",
                cl->o->keys - left, cl->o->keys);
    return left ? ERMA_ETIMEDOUT : ERMA_OK;
}

static int start_get(struct client *cl, struct erma_rand *r, struct call *g)
{
    char key[16];
    g->key = (uint32_t)erma_rand_below(r, cl->o->keys);
    const int rc = kv_req_get(&g->req, key, make_key(g->key, key));
    const int sess = cl->get_sess[(size_t)(g - cl->get) / ERMA_SESSION_SLOTS];
    return rc == ERMA_OK ? issue(cl, sess, KV_GET, g) : rc;
}

static void check_get(struct client *cl, struct call *g)
{
    uint8_t want[4096];
    const uint8_t *v;
    uint32_t vl;
    cl->gets++;
    if (g->status != ERMA_OK) {
        fprintf(stderr, "kv_scan: GET k%06u: %s\n", g->key, erma_strerror(g->status));
        cl->failed++;
        return;
    }
    const uint32_t wl = make_val(g->key, cl->o->value_size, want);
    if (kv_resp(&g->resp, &v, &vl) != ERMA_OK || vl != wl || memcmp(v, want, wl) != 0) {
        fprintf(stderr, "kv_scan: GET k%06u: wrong answer (%s, %u B)\n", g->key,
                erma_strerror(kv_resp(&g->resp, &v, &vl)), vl);
        cl->wrong++;
    }
}

static int start_scan(struct client *cl, struct erma_rand *r)
{
    char key[16];
    const uint32_t from = (uint32_t)erma_rand_below(r, cl->o->keys - cl->o->scan_count + 1);
    const int rc = kv_req_scan(&cl->scan.req, key, make_key(from, key), cl->o->scan_count);
    return rc == ERMA_OK ? issue(cl, cl->scan_sess, KV_SCAN, &cl->scan) : rc;
}

/* A scan must return scan_count keys in order, each with its value. */
static void check_scan(struct client *cl)
{
    uint32_t cursor = 0, n = 0, klen, vlen, prev = 0;
    const uint8_t *kp, *vp;
    uint8_t want[4096];
    if (cl->scan.status != ERMA_OK) {
        fprintf(stderr, "kv_scan: SCAN of %u keys: %s\n", cl->o->scan_count,
                erma_strerror(cl->scan.status));
        cl->failed++;
        return;
    }
    while (kv_resp_scan(&cl->scan.resp, &cursor, &kp, &klen, &vp, &vlen) == ERMA_OK) {
        char key[8] = {0};
        memcpy(key, kp, klen == 7 ? 7 : 0);
        const uint32_t k = (uint32_t)strtoul(key + 1, NULL, 10);
        if (klen != 7 || (n && k != prev + 1) || vlen != make_val(k, cl->o->value_size, want) ||
            memcmp(vp, want, vlen) != 0) {
            fprintf(stderr, "kv_scan: SCAN: key k%06u (after k%06u, #%u, %u B) is wrong\n", k,
                    prev, n, vlen);
            cl->wrong++;
        }
        prev = k;
        n++;
    }
    if (n != cl->o->scan_count) {
        fprintf(stderr, "kv_scan: SCAN: %u keys, %u expected\n", n, cl->o->scan_count);
        cl->wrong++;
    }
    cl->scans++;
}

/* One round of round_seconds: closed-loop GETs, with one SCAN always in
 * flight when scanning; each GET's latency goes to lat. */
static int round_run(struct client *cl, struct erma_rand *r, bool scanning, uint64_t *lat,
                     size_t cap, size_t *n)
{
    const uint64_t end = erma_now_ns() + (uint64_t)(cl->o->round_seconds * 1e9);
    int rc = ERMA_OK;
    while (rc == ERMA_OK && erma_now_ns() < end) {
        for (unsigned i = 0; rc == ERMA_OK && i < cl->o->get_window; i++) {
            struct call *g = &cl->get[i];
            if (g->busy)
                continue;
            if (g->start) {
                if (*n < cap)
                    lat[(*n)++] = erma_now_ns() - g->start;
                check_get(cl, g);
            }
            rc = start_get(cl, r, g);
        }
        if (rc == ERMA_OK && scanning && !cl->scan.busy) {
            if (cl->scan.start)
                check_scan(cl);
            rc = start_scan(cl, r);
        }
        erma_endpoint_run_once(cl->ep);
    }
    /* the round's last requests finish here, checked but not timed, so
     * that a quiet round never sees a scan */
    if (rc == ERMA_OK && cl->scan.start && (rc = wait_call(cl, &cl->scan, 10000000000ull)) == ERMA_OK)
        check_scan(cl);
    for (unsigned i = 0; i < cl->o->get_window; i++) {
        struct call *g = &cl->get[i];
        if (rc == ERMA_OK && g->start && (rc = wait_call(cl, g, 5000000000ull)) == ERMA_OK)
            check_get(cl, g);
        g->start = 0;
    }
    cl->scan.start = 0;
    return rc;
}

static int client_up(struct client *cl)
{
    /* the server's failure_ns is 500 ms */
    const struct erma_rpc_cfg cfg = {.keepalive_ns = 50000000};
    const struct erma_endpoint_cfg ecfg = {.busy_poll = cl->o->busy_poll};
    const size_t scan_resp = (size_t)cl->o->scan_count * (16 + cl->o->value_size) + 64;
    int rc = erma_nexus_create(NULL, &cl->nx);
    if (rc == ERMA_OK)
        rc = erma_endpoint_create(cl->o->uri, 0, &ecfg, &cl->ep);
    if (rc == ERMA_OK)
        rc = erma_rpc_create(cl->nx, cl->ep, &cfg, &cl->rpc);
    if (rc != ERMA_OK)
        return rc;
    cl->nget_sess = (cl->o->get_window + ERMA_SESSION_SLOTS - 1) / ERMA_SESSION_SLOTS;
    for (unsigned i = 0; i < cl->nget_sess; i++)
        if ((cl->get_sess[i] = erma_session_create(cl->rpc, cl->o->server, 0)) < 0)
            return cl->get_sess[i];
    cl->scan_sess = erma_session_create_credits(cl->rpc, cl->o->server, 0, cl->o->scan_credits);
    if (cl->scan_sess < 0)
        return cl->scan_sess;
    cl->get = calloc(cl->o->get_window, sizeof *cl->get);
    if (!cl->get)
        return ERMA_ENOMEM;
    const uint32_t item = 64 + cl->o->value_size;
    rc = erma_msgbuf_alloc(cl->rpc, 64, &cl->scan.req);
    for (unsigned i = 0; rc == ERMA_OK && i < cl->o->get_window; i++) {
        rc = erma_msgbuf_alloc(cl->rpc, item, &cl->get[i].req);
        if (rc == ERMA_OK)
            rc = erma_msgbuf_alloc(cl->rpc, item, &cl->get[i].resp);
    }
    if (rc == ERMA_OK)
        rc = erma_msgbuf_alloc(cl->rpc, scan_resp, &cl->scan.resp);
    for (int i = 0; rc == ERMA_OK && i < PUT_WINDOW; i++) {
        rc = erma_msgbuf_alloc(cl->rpc, item, &cl->put[i].req);
        if (rc == ERMA_OK)
            rc = erma_msgbuf_alloc(cl->rpc, 64, &cl->put[i].resp);
    }
    return rc;
}

/* Median over pairs of rounds (quiet 2j, scanning 2j + 1) of the ratio
 * scanning / quiet of v. */
static double pair_ratio(const double *v, unsigned rounds)
{
    double r[256];
    unsigned n = 0;
    for (unsigned j = 0; j + 1 < rounds && n < 256; j += 2)
        if (v[j] > 0)
            r[n++] = v[j + 1] / v[j];
    return n ? bench_median(r, n) : 0;
}

int bench_kv_scan(const struct bench_kv_scan_opts *o, struct bench_kv_scan_result *out)
{
    if (!o || !out || o->keys == 0 || o->keys > 1000000 || o->scan_count == 0 ||
        o->scan_count > o->keys || o->value_size > 2048 || o->rounds == 0 || o->rounds > 256 ||
        o->get_window > GET_WINDOW)
        return ERMA_EINVAL;
    struct bench_kv_scan_opts one = *o;
    one.get_window = o->get_window ? o->get_window : 1;
    o = &one;
    struct client cl = {.o = o};
    const size_t cap = 4000000;
    uint64_t *lat[2] = {calloc(cap, 8), calloc(cap, 8)};
    size_t n[2] = {0, 0};
    double p50[256], p99[256];
    struct erma_rand r;
    erma_rand_seed(&r, 11);
    int rc = lat[0] && lat[1] ? client_up(&cl) : ERMA_ENOMEM;
    if (rc == ERMA_OK)
        rc = load(&cl);
    for (unsigned i = 0; rc == ERMA_OK && i < o->rounds; i++) { /* quiet, scanning, ... */
        const size_t from = n[i % 2];
        rc = round_run(&cl, &r, i % 2, lat[i % 2], cap, &n[i % 2]);
        struct bench_lat l;
        bench_lat_from_ns(lat[i % 2] + from, n[i % 2] - from, &l);
        p50[i] = l.median_us;
        p99[i] = l.p99_us;
    }
    *out = (struct bench_kv_scan_result){.wrong = cl.wrong, .failed = cl.failed,
                                         .scans = cl.scans, .gets = cl.gets};
    if (rc == ERMA_OK) {
        bench_lat_from_ns(lat[0], n[0], &out->quiet);
        bench_lat_from_ns(lat[1], n[1], &out->scanning);
        out->pairs = o->rounds / 2;
        out->p50_ratio = pair_ratio(p50, o->rounds);
        out->p99_ratio = pair_ratio(p99, o->rounds);
    }
    free(lat[0]);
    free(lat[1]);
    if (cl.rpc)
        erma_rpc_destroy(cl.rpc);
    erma_endpoint_destroy(cl.ep);
    erma_nexus_destroy(cl.nx);
    free(cl.get);
    return rc;
}
