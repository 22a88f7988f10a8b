/* kv GETs by one-sided READ beside GET/PUT/DELETE/SCAN over RPC, on udp
 * loopback: 10^5 random ops with a writer and a reader running concurrently
 * (one thread polls the server, writer and reader endpoints), every GET and
 * every scanned key checked against the history of its key, and no key
 * present throughout a scan missing from it; and a small table whose log wraps under
 * the readers, where torn or overwritten items must be retried or reported
 * absent, never returned; both with a location cache in the reader, whose
 * superseded items must be noticed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>
#include <cmocka.h>

#include "erma/clock.h"
#include "erma/keys.h"
#include "kv/kv.h"
#include "erma/sdk/rand.h"
#include "erma/rma.h"
#include "erma/rpc.h"
#include "ports.h"

#define BASE 20
#define KEYS 2000
#define OPS 100000
#define WRITE_DEPTH 8
#define READ_DEPTH 16
#define SCAN_COUNT 50

struct write { uint32_t version; bool del; uint64_t issued, acked; };

struct history { struct write *w; uint32_t n, cap; bool busy; };

struct op {
    struct world_ *wd;
    uint32_t key;
    bool write, one_sided, live;
    uint64_t start;
    struct erma_msgbuf req, resp;
};

struct scan_op {
    bool live;
    uint32_t from;
    uint64_t start;
    struct erma_msgbuf req, resp;
};

struct world_ {
    struct erma_nexus *nx[3];
    struct erma_endpoint *ep[3]; /* server, writer, reader */
    struct erma_rpc *rpc[3];
    struct erma_rma *rma[3];
    struct kv *kv;
    struct kv_server *srv;
    struct kv_reader *reader;
    struct kv_remote remote;
    int sess[3];
    uint64_t clock;           /* logical time: every start and end */
    struct history h[KEYS];
    struct op wops[WRITE_DEPTH], rops[READ_DEPTH];
    struct scan_op sop; /* one SCAN at a time, beside the GETs */
    uint64_t started, finished, ok_rpc, ok_rma, absent, bad, scans, scanned;
    uint64_t failed; /* ops that failed with a precise code (a loaded machine): allowed */
    bool lossy;               /* the log wraps: any key may be absent */
    bool scan;                /* SCANs run beside the GETs */
    struct erma_rand rng;
};

static void key_of(uint32_t k, char key[16])
{
    snprintf(key, 16, "key%05u", k);
}

static uint32_t make_val(uint32_t k, uint32_t version, uint8_t *v)
{
    const uint32_t len = 16 + (k * 7 + version) % 200;
    memcpy(v, &k, 4);
    memcpy(v + 4, &version, 4);
    for (uint32_t i = 8; i < len; i++)
        v[i] = (uint8_t)(k + version * 3 + i);
    return len;
}

/* The last of k's writes acknowledged before start, -1 if none. */
static int acked_before(const struct history *h, uint64_t start)
{
    int b = -1;
    for (uint32_t i = 0; i < h->n; i++)
        if (h->w[i].acked && h->w[i].acked < start)
            b = (int)i;
    return b;
}

/* Is a GET of k over [start, end] that saw (val or absent) consistent with
 * k's writes? The writer has at most one write per key in flight, so
 * versions are in the order the server applied them. */
static bool consistent(const struct history *h, uint32_t k, uint64_t start, uint64_t end,
                       const uint8_t *val, uint32_t vlen)
{
    const int b = acked_before(h, start);
    for (int i = b < 0 ? 0 : b; i < (int)h->n; i++) {
        const struct write *w = &h->w[i];
        if (w->issued > end)
            break;
        if (!val && w->del)
            return true;
        uint8_t expect[256];
        if (val && !w->del && make_val(k, w->version, expect) == vlen &&
            memcmp(expect, val, vlen) == 0)
            return true;
    }
    return !val && b < 0; /* never written before the GET */
}

static void get_done(struct world_ *w, struct op *o, int status, const uint8_t *val,
                     uint32_t vlen)
{
    o->live = false;
    w->finished++;
    const uint64_t end = ++w->clock;
    if (status == ERMA_OK)
        o->one_sided ? w->ok_rma++ : w->ok_rpc++;
    else if (status == ERMA_ENOENT)
        w->absent++;
    const struct history *h = &w->h[o->key];
    bool ok = false;
    if (status == ERMA_OK)
        ok = consistent(h, o->key, o->start, end, val, vlen);
    else if (status == ERMA_ENOENT)
        ok = w->lossy || consistent(h, o->key, o->start, end, NULL, 0);
    else if (w->failed++ < 5) /* a failure is no answer, and no wrong one */
        print_message("  GET of %u (%s) failed: %s\n", o->key, o->one_sided ? "READ" : "RPC",
                      erma_strerror(status));
    if (!ok && (status == ERMA_OK || status == ERMA_ENOENT)) {
        if (w->bad++ < 5)
            print_message("  bad GET of %u (%s): status %d vlen %u\n", o->key,
                          o->one_sided ? "READ" : "RPC", status, vlen);
    }
}

static void on_rget(void *tag, int status, const uint8_t *val, uint32_t vlen)
{
    struct op *o = tag;
    get_done(o->wd, o, status, val, vlen);
}

static void on_rpc(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    struct op *o = tag;
    struct world_ *w = o->wd;
    const uint8_t *val = NULL;
    uint32_t vlen = 0;
    const int rc = status != ERMA_OK ? status
                   : o->write        ? kv_resp(resp, NULL, NULL)
                                     : kv_resp(resp, &val, &vlen);
    if (!o->write) {
        get_done(w, o, rc, val, vlen);
        return;
    }
    o->live = false;
    w->finished++;
    struct history *h = &w->h[o->key];
    h->busy = false;
    if (rc != ERMA_OK && !(rc == ERMA_ENOENT && h->w[h->n - 1].del)) {
        /* done or not, nobody knows: it stays unacked, a possible value ever after */
        if (w->failed++ < 5)
            print_message("  write of %u failed: %s\n", o->key, erma_strerror(rc));
        return;
    }
    h->w[h->n - 1].acked = ++w->clock;
}

static void start_write(struct world_ *w, struct op *o)
{
    uint32_t k;
    do
        k = (uint32_t)erma_rand_below(&w->rng, KEYS);
    while (w->h[k].busy);
    struct history *h = &w->h[k];
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 8;
        h->w = realloc(h->w, h->cap * sizeof *h->w);
        assert_non_null(h->w);
    }
    const bool del = erma_rand_below(&w->rng, 5) == 0;
    const uint32_t version = h->n + 1;
    char key[16];
    uint8_t val[256];
    key_of(k, key);
    if (del) {
        assert_int_equal(kv_req_del(&o->req, key, 8), ERMA_OK);
    } else {
        const uint32_t vlen = make_val(k, version, val);
        assert_int_equal(kv_req_put(&o->req, key, 8, val, vlen), ERMA_OK);
    }
    h->w[h->n++] = (struct write){version, del, ++w->clock, 0};
    h->busy = true;
    *o = (struct op){w, k, true, false, true, 0, o->req, o->resp};
    assert_int_equal(erma_rpc_call(w->rpc[1], w->sess[1], BASE + (del ? KV_DEL : KV_PUT),
                                   &o->req, &o->resp, on_rpc, o),
                     ERMA_OK);
    w->started++;
}

/* Was k present all through [start, end]: its last write acked before
 * start a PUT, and none issued after it before end? */
static bool present_throughout(const struct history *h, uint64_t start, uint64_t end)
{
    const int b = acked_before(h, start);
    if (b < 0 || h->w[b].del)
        return false;
    for (uint32_t i = (uint32_t)b + 1; i < h->n; i++)
        if (h->w[i].issued <= end)
            return false;
    return true;
}

static void scan_bad(struct world_ *w, const char *why, uint32_t k)
{
    if (w->bad++ < 5)
        print_message("  bad SCAN: %s (key %u)\n", why, k);
}

/* Keys ascending from `from`, each with a value it had during the scan, and
 * none skipped that was there all the time. */
static void on_scan(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    struct world_ *w = tag;
    const uint64_t end = ++w->clock;
    w->sop.live = false;
    w->finished++;
    w->scans++;
    if (status != ERMA_OK || kv_resp(resp, NULL, NULL) != ERMA_OK) {
        scan_bad(w, "failed", w->sop.from);
        return;
    }
    uint32_t cursor = 0, klen, vlen, next = w->sop.from, n = 0;
    const uint8_t *kp, *vp;
    while (kv_resp_scan(resp, &cursor, &kp, &klen, &vp, &vlen) == ERMA_OK) {
        char key[16] = {0};
        memcpy(key, kp, klen < 15 ? klen : 15);
        const uint32_t k = (uint32_t)strtoul(key + 3, NULL, 10);
        if (klen != 8 || k < next || k >= KEYS) {
            scan_bad(w, "out of order", k);
            return;
        }
        for (; next < k; next++)
            if (present_throughout(&w->h[next], w->sop.start, end))
                scan_bad(w, "skipped a present key", next);
        if (!consistent(&w->h[k], k, w->sop.start, end, vp, vlen))
            scan_bad(w, "a value the key never had", k);
        next = k + 1;
        n++;
    }
    if (n < SCAN_COUNT) /* the end of the index: nothing present may follow */
        for (; next < KEYS; next++)
            if (present_throughout(&w->h[next], w->sop.start, end))
                scan_bad(w, "stopped before a present key", next);
    w->scanned += n;
}

static void start_scan(struct world_ *w)
{
    struct scan_op *s = &w->sop;
    char key[16];
    s->from = (uint32_t)erma_rand_below(&w->rng, KEYS);
    key_of(s->from, key);
    assert_int_equal(kv_req_scan(&s->req, key, 8, SCAN_COUNT), ERMA_OK);
    s->live = true;
    s->start = ++w->clock;
    assert_int_equal(erma_rpc_call(w->rpc[2], w->sess[2], BASE + KV_SCAN, &s->req,
                                   &s->resp, on_scan, w),
                     ERMA_OK);
    w->started++;
}

static void start_read(struct world_ *w, struct op *o)
{
    const uint32_t k = (uint32_t)erma_rand_below(&w->rng, KEYS);
    const bool one_sided = erma_rand_below(&w->rng, 2) == 0;
    char key[16];
    key_of(k, key);
    *o = (struct op){w, k, false, one_sided, true, ++w->clock, o->req, o->resp};
    if (one_sided) {
        kv_reader_prefetch(w->reader, &w->remote, key, 8); /* a hint: changes nothing */
        kv_reader_prefetch(NULL, &w->remote, key, 8);
        kv_reader_prefetch(w->reader, NULL, key, 8);
        assert_int_equal(kv_rget(w->reader, &w->remote, key, 8, on_rget, o), ERMA_OK);
    } else {
        assert_int_equal(kv_req_get(&o->req, key, 8), ERMA_OK);
        assert_int_equal(erma_rpc_call(w->rpc[2], w->sess[2], BASE + KV_GET,
                                       &o->req, &o->resp, on_rpc, o),
                         ERMA_OK);
    }
    w->started++;
}

static void run_once(struct world_ *w)
{
    for (int i = 0; i < 3; i++)
        erma_endpoint_run_once(w->ep[i]);
    kv_reader_poll(w->reader);
}

struct region_answer {
    struct world_ *w;
    int done, status;
};

static void on_region(void *ctx, int status, const struct erma_rkey *key, const uint8_t *info,
                      size_t info_len)
{
    struct region_answer *a = ctx;
    a->done = 1;
    a->status = status == ERMA_OK ? kv_remote_of(key, info, info_len, &a->w->remote) : status;
}

static void connect_all(struct world_ *w, char uri[3][64])
{
    for (int i = 1; i < 3; i++) {
        w->sess[i] = erma_session_create(w->rpc[i], uri[0], 0);
        assert_true(w->sess[i] >= 0);
        const uint64_t end = erma_now_ns() + 5000000000ull;
        while (!erma_session_connected(w->rpc[i], w->sess[i]) && erma_now_ns() < end)
            run_once(w);
        assert_true(erma_session_connected(w->rpc[i], w->sess[i]));
    }
    /* the reader asks the server for the table's region and its key */
    struct region_answer a = {.w = w};
    assert_int_equal(erma_keys_fetch(w->rpc[2], w->rma[2], w->sess[2], BASE + KV_REGION,
                                     KV_KEYS_NAME, on_region, &a),
                     ERMA_OK);
    const uint64_t end = erma_now_ns() + 5000000000ull;
    while (!a.done && erma_now_ns() < end)
        run_once(w);
    assert_int_equal(a.done, 1);
    assert_int_equal(a.status, ERMA_OK);
    w->remote.peer = erma_rma_peer(w->rma[2], uri[0], 0);
    assert_true(w->remote.peer >= 0);
}

/* cache: entries of the reader's location cache (0: none). */
static void world_up_kv(struct world_ *w, uint32_t buckets, uint64_t log_bytes, uint32_t cache)
{
    memset(w, 0, sizeof *w);
    erma_rand_seed(&w->rng, 17);
    char uri[3][64];
    static int seq;
    const int base = test_port_base(16) + 4 * (seq++ % 4);
    for (int i = 0; i < 3; i++)
        snprintf(uri[i], sizeof uri[i], "udp://127.0.0.1:%d", base + i);
    assert_int_equal(kv_create(buckets, log_bytes, &w->kv), ERMA_OK);
    const struct erma_nexus_cfg ncfg = {.workers = 1};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(erma_nexus_create(i == 0 ? &ncfg : NULL, &w->nx[i]), ERMA_OK);
        if (i == 0)
            assert_int_equal(kv_serve(w->nx[0], BASE, w->kv, &w->srv), ERMA_OK);
        assert_int_equal(erma_endpoint_create(uri[i], 0, NULL, &w->ep[i]), ERMA_OK);
        assert_int_equal(erma_rpc_create(w->nx[i], w->ep[i], NULL, &w->rpc[i]), ERMA_OK);
        /* This test checks values, not congestion control. Generous
         * timeouts: a loaded 2-core machine (ASan, parallel tests) must not
         * fail ops by scheduling; the dispatch timeout well below the op
         * timeout, or the target's NACK threshold, (TIMEOUT - RTT -
         * DISPATCH_TIMEOUT) x bandwidth, is a single op. No executor
         * windows: under TSan they take the sanitizer's slowness for
         * congestion and pace READs to a few dozen a second. */
        const struct erma_rma_cfg rc = {.identity = 500 + (uint64_t)i,
                                        .op_timeout_ns = 100000000,
                                        .dispatch_timeout_ns = 10000000,
                                        .cc_off = true};
        assert_int_equal(erma_rma_create(w->ep[i], &rc, &w->rma[i]), ERMA_OK);
    }
    assert_int_equal(kv_server_rma(w->srv, w->rpc[0], w->rma[0]), ERMA_OK);
    assert_int_equal(kv_reader_create(w->rma[2], READ_DEPTH, 0, &w->reader), ERMA_OK);
    assert_int_equal(kv_reader_cache(w->reader, cache), ERMA_OK);
    for (int i = 0; i < WRITE_DEPTH; i++) {
        assert_int_equal(erma_msgbuf_alloc(w->rpc[1], 512, &w->wops[i].req), ERMA_OK);
        assert_int_equal(erma_msgbuf_alloc(w->rpc[1], 512, &w->wops[i].resp), ERMA_OK);
    }
    for (int i = 0; i < READ_DEPTH; i++) {
        assert_int_equal(erma_msgbuf_alloc(w->rpc[2], 512, &w->rops[i].req), ERMA_OK);
        assert_int_equal(erma_msgbuf_alloc(w->rpc[2], 512, &w->rops[i].resp), ERMA_OK);
    }
    assert_int_equal(erma_msgbuf_alloc(w->rpc[2], 64, &w->sop.req), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(w->rpc[2], SCAN_COUNT * 512, &w->sop.resp), ERMA_OK);
    connect_all(w, uri);
}

static void world_down_kv(struct world_ *w)
{
    kv_reader_destroy(w->reader);
    kv_server_rma_end(w->srv); /* before its rpc */
    for (int i = 2; i >= 0; i--) {
        erma_rma_destroy(w->rma[i]);
        erma_rpc_destroy(w->rpc[i]); /* frees the msgbufs' pool */
        erma_endpoint_destroy(w->ep[i]);
        erma_nexus_destroy(w->nx[i]);
    }
    kv_server_destroy(w->srv);
    kv_destroy(w->kv);
    for (int k = 0; k < KEYS; k++)
        free(w->h[k].w);
}

/* ops in total, keeping the writer and the reader busy; reads_only: no
 * new writes once half are done (so late GETs see settled keys). */
static void workload(struct world_ *w, uint64_t ops)
{
    const uint64_t end = erma_now_ns() + 120000000000ull;
    while ((w->started < ops || w->finished < w->started) && erma_now_ns() < end) {
        for (int i = 0; i < WRITE_DEPTH && w->started < ops; i++)
            if (!w->wops[i].live)
                start_write(w, &w->wops[i]);
        for (int i = 0; i < READ_DEPTH && w->started < ops; i++)
            if (!w->rops[i].live)
                start_read(w, &w->rops[i]);
        if (w->scan && !w->sop.live && w->started < ops)
            start_scan(w);
        run_once(w);
    }
    assert_int_equal(w->finished, w->started);
}

static void test_model(void **state)
{
    (void)state;
    static struct world_ w;
    world_up_kv(&w, 1 << 14, 64u << 20, KEYS);
    w.scan = true;
    workload(&w, OPS);
    struct kv_reader_stats rs;
    kv_reader_get_stats(w.reader, &rs);
    print_message("  %lu ops: GET ok by RPC %lu, by READ %lu, absent %lu; %lu SCANs of %lu "
                  "keys; %lu READs, %lu retries, %lu from cached locations, %lu stale; %lu "
                  "failed; inconsistent %lu\n",
                  (unsigned long)w.finished, (unsigned long)w.ok_rpc, (unsigned long)w.ok_rma,
                  (unsigned long)w.absent, (unsigned long)w.scans, (unsigned long)w.scanned,
                  (unsigned long)rs.reads, (unsigned long)rs.retries,
                  (unsigned long)rs.cache_hits, (unsigned long)rs.cache_stale,
                  (unsigned long)w.failed, (unsigned long)w.bad);
    assert_int_equal(w.bad, 0);
    /* keys are read again after other keys' writes and after their own */
    assert_true(rs.cache_hits > w.ok_rma / 10 && rs.cache_stale > 0);
    assert_true(w.ok_rma > OPS / 5 && w.ok_rpc > OPS / 5);
    assert_true(w.scans > 100 && w.scanned > w.scans * SCAN_COUNT / 2);
    world_down_kv(&w);
}

/* A 64 KiB log wraps every few hundred PUTs: GETs by READ race items being
 * overwritten. Every value returned must be one the key really had. */
static void test_wrapping_log(void **state)
{
    (void)state;
    static struct world_ w;
    world_up_kv(&w, 1 << 10, 64u << 10, KEYS);
    w.lossy = true;
    workload(&w, 30000);
    struct kv_reader_stats rs;
    kv_reader_get_stats(w.reader, &rs);
    print_message("  wrapping log: GET ok by READ %lu, absent %lu, retries %lu, from cached "
                  "locations %lu, stale %lu, failed %lu, inconsistent %lu\n",
                  (unsigned long)w.ok_rma, (unsigned long)w.absent, (unsigned long)rs.retries,
                  (unsigned long)rs.cache_hits, (unsigned long)rs.cache_stale,
                  (unsigned long)w.failed, (unsigned long)w.bad);
    assert_int_equal(w.bad, 0);
    world_down_kv(&w);
}

/* A location cache far smaller than the keys (two sets of four): entries
 * are taken from one another all the time, and a GET whose entry went to
 * another key, or whose item moved, still returns only the key's values. */
static void test_small_cache(void **state)
{
    (void)state;
    static struct world_ w;
    world_up_kv(&w, 1 << 10, 1u << 20, 8);
    workload(&w, 20000);
    struct kv_reader_stats rs;
    kv_reader_get_stats(w.reader, &rs);
    print_message("  8-entry cache: GET ok by READ %lu, from cached locations %lu, stale %lu, "
                  "failed %lu, inconsistent %lu\n",
                  (unsigned long)w.ok_rma, (unsigned long)rs.cache_hits,
                  (unsigned long)rs.cache_stale, (unsigned long)w.failed, (unsigned long)w.bad);
    assert_int_equal(w.bad, 0);
    assert_true(rs.cache_hits > 0 && rs.cache_hits < w.ok_rma / 2);
    world_down_kv(&w);
}

/* ---- torn reads: the table changes while the target reads it ---- */

#define TORN_KEYS 64

struct torn {
    struct world_ *w;
    atomic_bool stop;
    _Atomic uint32_t max_version[TORN_KEYS];
    uint64_t ok, absent, again, failed, bad;
    _Atomic uint64_t done; /* GETs completed: the writer keeps pace with them */
};

static struct torn *torn_ctx;

static uint32_t big_val(uint32_t k, uint32_t version, uint8_t *v)
{
    const uint32_t len = 4096 + (k * 7 + version * 13) % 12000; /* 2 to 4 READs */
    memcpy(v, &k, 4);
    memcpy(v + 4, &version, 4);
    for (uint32_t i = 8; i < len; i++)
        v[i] = (uint8_t)(k * 5 + version + i);
    return len;
}

/* The application's own writer thread: the table's only writer here, it
 * puts bigger and bigger versions while the target's loop serves READs. */
static void *torn_writer(void *arg)
{
    struct torn *t = arg;
    static uint8_t val[16384];
    char key[16];
    for (uint32_t v = 1; !atomic_load(&t->stop) && v < 10000000; v++) {
        /* at most 2 PUTs per GET: as many torn reads, whatever the speeds */
        while (v > 2 * atomic_load(&t->done) + 256 && !atomic_load(&t->stop))
            sched_yield();
        const uint32_t k = v % TORN_KEYS;
        key_of(k, key);
        atomic_store(&t->max_version[k], v);
        if (kv_put(t->w->kv, key, 8, val, big_val(k, v, val)) != ERMA_OK)
            break;
    }
    return NULL;
}

static void on_torn_get(void *tag, int status, const uint8_t *val, uint32_t vlen)
{
    struct op *o = tag;
    struct torn *t = torn_ctx;
    static uint8_t expect[16384];
    o->live = false;
    atomic_fetch_add(&t->done, 1);
    if (status == ERMA_ENOENT) {
        t->absent++;
    } else if (status == ERMA_EAGAIN) {
        t->again++;
    } else if (status != ERMA_OK) {
        t->failed++; /* a precise failure, e.g. ERMA_ETIMEDOUT on a loaded machine */
    } else if (vlen < 8) {
        t->bad++;
    } else {
        uint32_t k, v;
        memcpy(&k, val, 4);
        memcpy(&v, val + 4, 4);
        const bool whole = k == o->key && v <= atomic_load(&t->max_version[k]) &&
                           big_val(k, v, expect) == vlen && memcmp(expect, val, vlen) == 0;
        whole ? t->ok++ : t->bad++;
    }
}

static void test_torn(void **state)
{
    (void)state;
    static struct world_ w;
    static struct torn t;
    world_up_kv(&w, 1 << 10, 256u << 10, 0);
    t = (struct torn){.w = &w};
    torn_ctx = &t;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, torn_writer, &t), 0);
    struct op *ops = w.rops;
    /* GETs go out for 1.5 s, longer on a loaded machine until enough whole
     * values and torn reads were seen, at most 30 s; those still out then
     * finish long before end. */
    const uint64_t t0 = erma_now_ns(), stop = t0 + 1500000000ull, last = t0 + 30000000000ull;
    const uint64_t end = last + 15000000000ull;
    uint64_t started = 0;
    struct kv_reader_stats rs = {0};
    for (bool more = true; (more || atomic_load(&t.done) < started) && erma_now_ns() < end;) {
        const uint64_t now = erma_now_ns();
        kv_reader_get_stats(w.reader, &rs);
        more = started < 20000 &&
               (now < stop || (now < last && (t.ok <= 200 || rs.retries == 0)));
        for (int i = 0; i < READ_DEPTH && started < 20000 && more; i++) {
            if (ops[i].live)
                continue;
            const uint32_t k = (uint32_t)erma_rand_below(&w.rng, TORN_KEYS);
            char key[16];
            key_of(k, key);
            ops[i].key = k;
            ops[i].live = true;
            assert_int_equal(kv_rget(w.reader, &w.remote, key, 8, on_torn_get, &ops[i]),
                             ERMA_OK);
            started++;
        }
        run_once(&w);
    }
    atomic_store(&t.stop, true);
    pthread_join(th, NULL);
    kv_reader_get_stats(w.reader, &rs);
    print_message("  torn: %lu GETs by READ: %lu whole values, %lu absent, %lu gave up, %lu "
                  "failed; %lu re-reads after a torn or changing read; %lu wrong\n",
                  (unsigned long)atomic_load(&t.done), (unsigned long)t.ok, (unsigned long)t.absent,
                  (unsigned long)t.again, (unsigned long)t.failed, (unsigned long)rs.retries,
                  (unsigned long)t.bad);
    assert_int_equal(atomic_load(&t.done), started);
    assert_int_equal(t.bad, 0);
    assert_true(t.ok > 100);
    assert_true(rs.retries > 0);
    world_down_kv(&w);
}

/* The REGION call binds the key it hands out to the requester's address:
 * another endpoint claiming the same identity reads nothing with it (it
 * read the table with a key the server handed out for any identity). */
static void test_region_key_bound(void **state)
{
    (void)state;
    static struct world_ w;
    world_up_kv(&w, 1 << 10, 1u << 20, 0);
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    struct erma_rpc *rpc;
    struct erma_rma *thief;
    char uri[64];
    const struct erma_rma_cfg rc = {.identity = 502}; /* the reader's */
    assert_int_equal(erma_nexus_create(NULL, &nx), ERMA_OK);
    assert_int_equal(erma_endpoint_create("udp://127.0.0.1:0", 0, NULL, &ep), ERMA_OK);
    assert_int_equal(erma_rpc_create(nx, ep, NULL, &rpc), ERMA_OK);
    assert_int_equal(erma_rma_create(ep, &rc, &thief), ERMA_OK);
    assert_int_equal(erma_endpoint_uri(w.ep[0], uri, sizeof uri), ERMA_OK);
    uint8_t buf[64];
    const struct erma_rma_cmd cmd = {.op = ERMA_RMA_READ, .peer = erma_rma_peer(thief, uri, 0),
                                     .rkey = w.remote.rkey, .local = buf, .len = sizeof buf};
    assert_true(cmd.peer >= 0);
    assert_true(erma_rma_submit(thief, &cmd) >= 0);
    struct erma_rma_completion c;
    int n = 0;
    for (const uint64_t end = erma_now_ns() + 10000000000ull; !n && erma_now_ns() < end;) {
        erma_endpoint_run_once(ep);
        run_once(&w);
        n = erma_rma_poll(thief, &c, 1);
    }
    assert_int_equal(n, 1);
    assert_int_equal(c.status, ERMA_EAUTH);
    erma_rma_destroy(thief);
    erma_rpc_destroy(rpc);
    erma_endpoint_destroy(ep);
    erma_nexus_destroy(nx);
    world_down_kv(&w);
}

/* ---- items read with the bytes after them ---- */

struct end_get {
    int done, status;
    uint8_t val[64];
    uint32_t vlen;
};

static void on_end_get(void *tag, int status, const uint8_t *val, uint32_t vlen)
{
    struct end_get *g = tag;
    g->done = 1;
    g->status = status;
    g->vlen = vlen;
    if (status == ERMA_OK && vlen <= sizeof g->val)
        memcpy(g->val, val, vlen);
}

/* A GET of key (klen bytes) run to its end; its value must be want
 * (wlen bytes). */
static void rget_expect(struct world_ *w, const char *key, uint32_t klen, const void *want,
                        uint32_t wlen)
{
    struct end_get g = {0};
    assert_int_equal(kv_rget(w->reader, &w->remote, key, klen, on_end_get, &g), ERMA_OK);
    for (const uint64_t end = erma_now_ns() + 10000000000ull; !g.done && erma_now_ns() < end;)
        run_once(w);
    assert_int_equal(g.done, 1);
    assert_int_equal(g.status, ERMA_OK);
    assert_int_equal(g.vlen, wlen);
    assert_memory_equal(g.val, want, wlen);
}

/* A short item is READ with the table's bytes after it up to 128 bytes
 * (kv/reader.c): items of 64 bytes fill a 64 KiB log exactly, so the last
 * one ends at the table's end, where its READ must stay its own length.
 * Every key is read twice (the bucket, then the cached location). */
static void test_items_to_the_end(void **state)
{
    (void)state;
    static struct world_ w;
    world_up_kv(&w, 1 << 12, 64u << 10, 2048);
    enum { N = 1024, VLEN = 32 }; /* 16 + 8-byte key + 32 + 8: 64 bytes */
    char key[16];
    uint8_t val[VLEN];
    for (uint32_t k = 0; k < N; k++) {
        key_of(k, key);
        memset(val, (int)(k & 0xff), VLEN);
        memcpy(val, &k, 4);
        assert_int_equal(kv_put(w.kv, key, 8, val, VLEN), ERMA_OK);
    }
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t k = 0; k < N; k++) {
            if (k < N - 40 && k % 97)
                continue;
            key_of(k, key);
            memset(val, (int)(k & 0xff), VLEN);
            memcpy(val, &k, 4);
            rget_expect(&w, key, 8, val, VLEN);
        }
    struct kv_reader_stats rs;
    kv_reader_get_stats(w.reader, &rs);
    assert_true(rs.cache_hits > 0);
    world_down_kv(&w);
}

static uint64_t hits_of(const struct world_ *w)
{
    struct kv_reader_stats rs;
    kv_reader_get_stats(w->reader, &rs);
    return rs.cache_hits;
}

/* A cache of one set (1 entry asked, 4 given): four 13-byte keys all
 * stay; a fifth takes one of their ways; a key put again is found stale
 * at its remembered location, read from its bucket, and remembered anew. */
static void test_cache_set(void **state)
{
    (void)state;
    static struct world_ w;
    world_up_kv(&w, 1 << 10, 1u << 20, 0);
    assert_int_equal(kv_reader_cache(w.reader, 1), ERMA_OK);
    char keys[5][16];
    for (int i = 0; i < 5; i++) {
        snprintf(keys[i], sizeof keys[i], "cachekey%05d", i);
        assert_int_equal(kv_put(w.kv, keys[i], 13, keys[i], 13), ERMA_OK);
    }
    assert_false(kv_reader_cached(w.reader, &w.remote, keys[0], 13));
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < 4; i++)
            rget_expect(&w, keys[i], 13, keys[i], 13);
    assert_int_equal(hits_of(&w), 4); /* the second pass: four ways */
    for (int i = 0; i < 4; i++)
        assert_true(kv_reader_cached(w.reader, &w.remote, keys[i], 13));
    assert_false(kv_reader_cached(w.reader, &w.remote, keys[4], 13));
    assert_false(kv_reader_cached(w.reader, &w.remote, keys[0], 12)); /* another key */
    rget_expect(&w, keys[4], 13, keys[4], 13);
    uint64_t before = hits_of(&w);
    for (int i = 0; i < 4; i++)
        rget_expect(&w, keys[i], 13, keys[i], 13);
    const uint64_t hit = hits_of(&w) - before;
    assert_true(hit >= 2 && hit <= 3); /* one was taken (and, read again, may take another) */
    assert_int_equal(kv_put(w.kv, keys[3], 13, "a new value", 11), ERMA_OK);
    struct kv_reader_stats rs;
    kv_reader_get_stats(w.reader, &rs);
    const uint64_t stale = rs.cache_stale;
    before = rs.cache_hits;
    rget_expect(&w, keys[3], 13, "a new value", 11); /* keys[3] was read last: in the set */
    kv_reader_get_stats(w.reader, &rs);
    assert_int_equal(rs.cache_stale, stale + 1);
    assert_int_equal(rs.cache_hits, before);
    rget_expect(&w, keys[3], 13, "a new value", 11);
    assert_int_equal(hits_of(&w), before + 1);
    world_down_kv(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model),
        cmocka_unit_test(test_wrapping_log),
        cmocka_unit_test(test_small_cache),
        cmocka_unit_test(test_cache_set),
        cmocka_unit_test(test_torn),
        cmocka_unit_test(test_region_key_bound),
        cmocka_unit_test(test_items_to_the_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
