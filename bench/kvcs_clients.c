/* bench/kvcs's client threads: loading, warm-up reads, open- and
 * closed-loop GETs, phases and their merged counts (kvcs_clients.h). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvcs_clients.h"
#include "erma/clock.h"
#include "erma/sdk/rand.h"

#define PUT_TRIES 5
#define PUT_WINDOW 64

struct pending {
    struct run *r;
    uint64_t arrival_ns;
    uint32_t key;
    enum kvcs_method meth; /* the phase's, when the GET began */
};

/* "key%08u" of k without snprintf, whose formatting was 1.8% of a loaded
 * client's time (two keys a GET) in a bench that measures the library. */
static void key_of(uint32_t k, char out[16])
{
    char d[10];
    int n = 0;
    do
        d[n++] = (char)('0' + k % 10);
    while ((k /= 10) != 0);
    memcpy(out, "key", 3);
    int i = 3;
    for (int pad = 8 - n; pad > 0; pad--)
        out[i++] = '0';
    while (n > 0)
        out[i++] = d[--n];
    out[i] = 0;
}

/* Key k's value: the key number in its first 4 bytes (fewer in a shorter
 * value), so that a wrong value names the key it belongs to, then a
 * pattern of k. */
static void value_of(uint32_t k, uint32_t len, uint8_t *out)
{
    uint32_t i = 0;
    for (; i < 4 && i < len; i++)
        out[i] = (uint8_t)(k >> 8 * i);
    for (; i < len; i++) /* apart, so that the compiler vectorizes it */
        out[i] = (uint8_t)(k * 31 + i);
}

/* Says what a wrong value was: whose key's bytes it holds, its length,
 * and which replica answered by which method. */
static void report_wrong(const struct pending *p, const uint8_t *val, uint32_t vlen)
{
    const struct run *r = p->r;
    char k[16];
    key_of(p->key, k);
    uint32_t claims = 0;
    for (uint32_t i = 0; i < 4 && i < vlen; i++)
        claims |= (uint32_t)val[i] << 8 * i;
    struct kvcs_op_info info;
    const bool have = kvcs_op_info(r->c, &info) == ERMA_OK;
    fprintf(stderr, "kvcs: GET %s by %s: wrong value (%u B, %u B expected; its first bytes "
                    "name key %u), answered by replica %d\n",
            k, p->meth == KVCS_READ ? "read" : "rpc", vlen, r->o->value, claims,
            have && info.answered != UINT32_MAX ? (int)info.answered : -1);
}

/* Room for k more latencies in bin b. */
static bool bin_room(struct run *r, uint64_t b, uint32_t k)
{
    if (r->bin_n[b] + k <= r->bin_cap[b])
        return true;
    uint32_t cap = r->bin_cap[b] ? r->bin_cap[b] : 256;
    while (cap < r->bin_n[b] + k)
        cap *= 2;
    uint64_t *v = realloc(r->bin_lat[b], cap * sizeof *v);
    if (!v)
        return false;
    r->bin_lat[b] = v;
    r->bin_cap[b] = cap;
    return true;
}

static void record(struct run *r, uint64_t arrival, uint64_t now, bool failed)
{
    const uint64_t ns = now - arrival;
    if (!failed && r->nlat < r->cap)
        r->lat[r->nlat++] = ns;
    if (!r->timeline)
        return;
    const uint64_t b = (now - r->start_ns) / BIN_NS;
    if (b >= MAX_BINS)
        return;
    r->bin_failed[b] += failed;
    if (failed)
        return;
    if (bin_room(r, b, 1))
        r->bin_lat[b][r->bin_n[b]++] = ns;
}

static void on_get(void *tag, int status, const uint8_t *val, uint32_t vlen)
{
    struct pending *p = tag;
    struct run *r = p->r;
    uint8_t want[4096];
    const bool bad = status != ERMA_OK;
    if (!bad) {
        value_of(p->key, r->o->value, want);
        if (vlen != r->o->value || memcmp(val, want, vlen) != 0) {
            report_wrong(p, val, vlen);
            r->wrong++;
        }
    } else {
        r->last_fail_key = p->key;
        r->last_fail = status;
    }
    r->failed += bad;
    r->done++;
    record(r, p->arrival_ns, erma_now_ns(), bad);
    free(p);
}

/* The replicas of the op whose callback runs that did not store it; *why:
 * the status of the last of them. */
static uint32_t replicas_missed(const struct run *r, int *why)
{
    struct kvcs_op_info info;
    uint32_t missed = 0;
    if (kvcs_op_info(r->c, &info) == ERMA_OK)
        for (uint32_t i = 0; i < info.nreplicas; i++)
            if (info.status[i] != ERMA_OK) {
                missed++;
                *why = info.status[i];
            }
    return missed;
}

/* A PUT that failed, or that some replica missed (it timed out there, or
 * the replica was marked down), goes into the next pass's list. */
static void on_put(void *tag, int status, const uint8_t *val, uint32_t vlen)
{
    (void)val;
    (void)vlen;
    struct pending *p = tag;
    struct run *r = p->r;
    int why = status;
    const uint32_t missed = status == ERMA_OK ? replicas_missed(r, &why) : 0;
    r->done++;
    if (status != ERMA_OK || missed) {
        r->again[r->nagain++] = p->key;
        r->last_fail_key = p->key;
        r->last_fail = why;
        r->failed += status != ERMA_OK;
        r->put_error = status != ERMA_OK ? status : r->put_error;
    }
    free(p);
}

static int put_key(struct run *r, uint32_t key)
{
    char k[16];
    uint8_t v[4096];
    struct pending *p = malloc(sizeof *p);
    if (!p)
        return ERMA_ENOMEM;
    *p = (struct pending){r, 0, key, r->meth};
    key_of(key, k);
    value_of(key, r->o->value, v);
    const int rc = kvcs_put(r->c, k, (uint32_t)strlen(k), v, r->o->value, on_put, p);
    if (rc != ERMA_OK)
        free(p);
    return rc;
}

static void nap(long ns)
{
    const struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

/* A loop pass of thread 0's client r (runs[0]), which loads the keys, and
 * one of every other thread's: a client that runs no loop pings no server,
 * and a server drops its sessions after 500 ms (rpc cfg.failure_ns).
 * Returns thread 0's count. */
static int poll_clients(struct run *r)
{
    const int n = kvcs_client_run_once(r->c);
    for (unsigned t = 1; t < r->o->client_threads; t++)
        kvcs_client_run_once(r[t].c);
    return n;
}

/* PUTs keys list[0..n) (list NULL: 0..n), PUT_WINDOW in flight; those
 * that fail or miss a replica end up in r->again. */
static int load_pass(struct run *r, const uint32_t *list, uint32_t n, uint64_t end)
{
    uint32_t next = 0;
    r->done = r->failed = r->nagain = 0;
    r->put_error = ERMA_OK;
    while (next < n || r->done < next) {
        while (next - r->done < PUT_WINDOW && next < n && put_key(r, list ? list[next] : next) ==
                                                              ERMA_OK)
            next++;
        /* nothing to do but wait: leave the CPU to the servers */
        if (poll_clients(r) == 0 && next - r->done == PUT_WINDOW)
            nap(20000);
        if (erma_now_ns() > end)
            return ERMA_ETIMEDOUT;
    }
    return ERMA_OK;
}

/* Loads every key in up to PUT_TRIES passes: each pass PUTs again the keys
 * the one before could not store on every replica, after a pause of 200 ms
 * per pass (time for the client's probe to bring a replica marked down
 * back). Fails only for keys stored nowhere. */
int clients_load_keys(struct run *r)
{
    const uint32_t keys = r->o->keys;
    const uint64_t end = erma_now_ns() + 120000000000ull;
    uint32_t n = keys;
    int rc = ERMA_OK;
    for (int pass = 1; pass <= PUT_TRIES && rc == ERMA_OK; pass++) {
        if (pass > 1) {
            memcpy(r->list, r->again, n * sizeof *r->list);
            for (uint64_t t = erma_now_ns() + 200000000ull * (unsigned)(pass - 1);
                 erma_now_ns() < t;)
                if (poll_clients(r) == 0)
                    nap(1000000);
        }
        const uint32_t tried = n;
        rc = load_pass(r, pass > 1 ? r->list : NULL, tried, end);
        n = r->nagain;
        if (rc != ERMA_OK) {
            fprintf(stderr, "kvcs: loading keys, pass %d: PUTs unanswered after 120 s\n", pass);
            break;
        }
        if (n == 0)
            return ERMA_OK;
        char k[16];
        key_of(r->last_fail_key, k);
        fprintf(stderr, "kvcs: loading keys, pass %d of %d: %u of %u keys missed a replica, "
                "%u of them every replica; the last, %s: %s%s\n", pass, PUT_TRIES, n, tried,
                (unsigned)r->failed, k,
                r->last_fail == KVCS_NOT_TRIED ? "replica marked down, not waited for"
                                               : erma_strerror(r->last_fail),
                pass < PUT_TRIES ? "; PUTting them again" : "");
    }
    if (rc == ERMA_OK && r->failed)
        rc = r->put_error;
    else if (rc == ERMA_OK)
        fprintf(stderr, "kvcs: loading keys: going on; GETs of keys a replica missed may miss "
                "there\n");
    return rc;
}

static void on_warm(void *tag, int status, const uint8_t *val, uint32_t vlen)
{
    (void)status;
    (void)val;
    (void)vlen;
    ((struct run *)tag)->done++;
}

/* One one-sided GET of every key, PUT_WINDOW in flight, untimed: the
 * client's location cache learns where the items are, as a running cache
 * service's would have (erma/kvcs.h). Each client thread warms its own. */
static void warm_reads(struct run *r)
{
    const uint64_t end = erma_now_ns() + 60000000000ull;
    uint32_t next = 0;
    r->done = 0;
    kvcs_client_set_method(r->c, KVCS_READ);
    while ((next < r->o->keys || r->done < next) && erma_now_ns() < end) {
        char k[16];
        for (; next - r->done < PUT_WINDOW && next < r->o->keys; next++) {
            key_of(next, k);
            if (kvcs_get(r->c, k, (uint32_t)strlen(k), on_warm, r) != ERMA_OK)
                break;
        }
        kvcs_client_run_once(r->c);
    }
}

/* Open-loop GETs at `load` per second for `seconds`; kill server 0 at
 * kill_at seconds when kill_pid > 0. Waits up to 2 s for stragglers. */
static void drive(struct run *r, double load, double seconds, double kill_at, pid_t kill_pid)
{
    struct erma_rand rng;
    erma_rand_seed(&rng, (uint64_t)load + 1 + 7919ull * r->t);
    r->start_ns = erma_now_ns();
    const uint64_t end = r->start_ns + (uint64_t)(seconds * 1e9);
    const uint64_t kill_ns = r->start_ns + (uint64_t)(kill_at * 1e9);
    uint64_t next = r->start_ns;
    for (uint64_t now = next; now < end; now = erma_now_ns()) {
        if (kill_pid > 0 && now >= kill_ns) {
            kill(kill_pid, SIGKILL);
            kill_pid = 0;
        }
        while (next <= now && next < end) {
            struct pending *p = malloc(sizeof *p);
            if (!p)
                break;
            *p = (struct pending){r, next, (uint32_t)erma_rand_below(&rng, r->o->keys), r->meth};
            char k[16];
            key_of(p->key, k);
            if (kvcs_get(r->c, k, (uint32_t)strlen(k), on_get, p) != ERMA_OK) {
                free(p); /* no free op slot: the arrival waits, its latency grows */
                break;
            }
            r->started++;
            const double u = (double)(erma_rand_u64(&rng) >> 11) / 9007199254740992.0;
            next += (uint64_t)(-log(1 - u) / load * 1e9);
        }
        kvcs_client_run_once(r->c);
    }
    const uint64_t stop = erma_now_ns() + 2000000000ull;
    while (r->done < r->started && erma_now_ns() < stop)
        kvcs_client_run_once(r->c);
}

static void run_reset(struct run *r)
{
    r->nlat = r->failed = r->wrong = r->done = r->started = 0;
    r->last_fail = ERMA_OK;
    for (unsigned b = 0; b < MAX_BINS; b++)
        r->bin_n[b] = r->bin_failed[b] = 0;
}

/* Names the GETs of a phase that failed or were never answered (no end). */
void clients_report_failed(const struct run *r, const char *phase)
{
    const uint64_t unanswered = r->started - r->done;
    if (!r->failed && !unanswered)
        return;
    char k[16];
    key_of(r->last_fail_key, k);
    fprintf(stderr, "kvcs: %s: %llu of %llu GETs failed", phase, (unsigned long long)r->failed,
            (unsigned long long)r->started);
    if (r->failed)
        fprintf(stderr, ", the last (%s) with: %s", k, erma_strerror(r->last_fail));
    if (unanswered)
        fprintf(stderr, "; %llu unanswered 2 s after the last arrival",
                (unsigned long long)unanswered);
    fputs("\n", stderr);
}

/* One GET at a time for `seconds`, each on a random key. */
static void drive_closed(struct run *r, double seconds)
{
    struct erma_rand rng;
    erma_rand_seed(&rng, 7 + 7919ull * r->t);
    r->start_ns = erma_now_ns();
    const uint64_t end = r->start_ns + (uint64_t)(seconds * 1e9);
    for (uint64_t now = r->start_ns; now < end; now = erma_now_ns()) {
        if (r->done == r->started) {
            struct pending *p = malloc(sizeof *p);
            if (!p)
                break;
            *p = (struct pending){r, now, (uint32_t)erma_rand_below(&rng, r->o->keys), r->meth};
            char k[16];
            key_of(p->key, k);
            if (kvcs_get(r->c, k, (uint32_t)strlen(k), on_get, p) != ERMA_OK)
                free(p);
            else
                r->started++;
        }
        kvcs_client_run_once(r->c);
    }
    const uint64_t stop = erma_now_ns() + 2000000000ull;
    while (r->done < r->started && erma_now_ns() < stop)
        kvcs_client_run_once(r->c);
}

/* Connects the client, three tries (a server on a loaded host may be slow
 * to start). */
static int client_up(struct run *r, const struct kvcs_client_cfg *cc)
{
    int rc = ERMA_OK;
    for (int a = 1; a <= 3; a++) {
        if ((rc = kvcs_client_create(cc, &r->c)) == ERMA_OK)
            return rc;
        fprintf(stderr, "kvcs: connecting %s to %u servers (%s, ...): %s (attempt %d of 3)\n",
                cc->uri, cc->nservers, cc->servers[0], erma_strerror(rc), a);
    }
    return rc;
}

/* One client thread's GETs of a phase. Not inlined, so that `valgrind
 * --tool=callgrind --collect-atstart=no --toggle-collect=sweep_one` counts
 * the client threads' work in the GET phases alone. */
__attribute__((noinline)) static void sweep_one(struct run *r, const struct phase *ph)
{
    if (ph->load > 0)
        drive(r, ph->load / r->o->client_threads, ph->seconds, ph->kill_at,
              r->t == 0 ? ph->victim : 0);
    else
        drive_closed(r, ph->seconds);
}

static int phase_side(void *ctx, unsigned t, struct bench_gate *start,
                      struct bench_raw_rate *out)
{
    (void)out;
    const struct phase *ph = ctx;
    struct run *r = &ph->runs[t];
    if (ph->kind == PHASE_CONNECT) {
        struct kvcs_client_cfg cc = *ph->cc;
        cc.uri = r->uri;
        const int rc = client_up(r, &cc);
        bench_gate_wait(start);
        return rc;
    }
    run_reset(r);
    r->timeline = ph->timeline;
    r->meth = ph->meth;
    kvcs_client_set_method(r->c, ph->meth);
    bench_gate_wait(start);
    if (ph->kind == PHASE_WARM)
        warm_reads(r);
    else
        sweep_one(r, ph);
    return ERMA_OK;
}

/* Adds the counts, latencies and bins of runs[1..n) to runs[0]'s. */
static void runs_merge(struct run *runs, unsigned n)
{
    struct run *r = &runs[0];
    for (unsigned t = 1; t < n; t++) {
        const struct run *s = &runs[t];
        const uint64_t k = s->nlat < r->cap - r->nlat ? s->nlat : r->cap - r->nlat;
        memcpy(r->lat + r->nlat, s->lat, k * sizeof *r->lat);
        r->nlat += k;
        r->failed += s->failed;
        r->wrong += s->wrong;
        r->done += s->done;
        r->started += s->started;
        if (s->failed) {
            r->last_fail = s->last_fail;
            r->last_fail_key = s->last_fail_key;
        }
        for (unsigned b = 0; s->timeline && b < MAX_BINS; b++) {
            r->bin_failed[b] += s->bin_failed[b];
            if (s->bin_n[b] && bin_room(r, b, s->bin_n[b])) {
                memcpy(r->bin_lat[b] + r->bin_n[b], s->bin_lat[b], s->bin_n[b] * sizeof(uint64_t));
                r->bin_n[b] += s->bin_n[b];
            }
        }
    }
}

/* Runs ph on every client thread (they start together); a GET phase's
 * counts end up in runs[0] (runs_merge). */
int clients_phase(struct phase *ph)
{
    const struct opts *o = ph->runs->o;
    struct bench_raw_rate per[BENCH_MAX_THREADS], total;
    const int rc = bench_run_threads(phase_side, ph, o->client_threads, o->client_cpu, per,
                                     &total);
    if (ph->kind == PHASE_GETS)
        runs_merge(ph->runs, o->client_threads);
    return rc;
}

/* The sums over the clients of runs[0..n) of their stats. */
void clients_stats(const struct run *runs, struct kvcs_client_stats *out)
{
    memset(out, 0, sizeof *out);
    for (unsigned t = 0; t < runs->o->client_threads; t++) {
        struct kvcs_client_stats s;
        kvcs_client_get_stats(runs[t].c, &s);
        out->failovers += s.failovers;
        out->skipped += s.skipped;
        out->hedges += s.hedges;
        out->one_read += s.one_read;
    }
}

/* Client thread t's URI in out: uri's port plus t (port 0 stays 0: any
 * free port; thread 0's is uri). False when uri has no port to add to. */
bool clients_uri(const char *uri, unsigned t, char *out, size_t n)
{
    if (t == 0)
        return (size_t)snprintf(out, n, "%s", uri) < n;
    const char *q = strchr(uri, '?'); /* dpdk://IP:PORT?... */
    const size_t end = q ? (size_t)(q - uri) : strlen(uri);
    size_t colon = end;
    while (colon > 0 && uri[colon - 1] != ':')
        colon--;
    char *stop;
    const unsigned long port = colon ? strtoul(uri + colon, &stop, 10) : 0;
    if (colon == 0 || colon == end || stop != uri + end || port + t > 65535)
        return false;
    return (size_t)snprintf(out, n, "%.*s%lu%s", (int)colon, uri, port ? port + t : 0,
                            uri + end) < n;
}

/* Destroys the clients of runs[0..n) and frees them; NULL is ignored. */
void clients_free(struct run *runs, unsigned n)
{
    for (unsigned t = 0; runs && t < n; t++) {
        if (runs[t].c)
            kvcs_client_destroy(runs[t].c);
        for (unsigned b = 0; b < MAX_BINS; b++)
            free(runs[t].bin_lat[b]);
        free(runs[t].lat);
        free(runs[t].list);
        free(runs[t].again);
    }
    free(runs);
}

/* The client threads' runs, each with its URI (from uri) and its
 * latencies; runs[0] has room for all threads' and the loading's lists. */
struct run *clients_new(const struct opts *o, const char *uri, const pid_t *pids)
{
    struct run *runs = calloc(o->client_threads, sizeof *runs);
    bool ok = runs != NULL;
    for (unsigned t = 0; ok && t < o->client_threads; t++) {
        struct run *r = &runs[t];
        r->o = o;
        r->t = t;
        r->pids = pids;
        r->cap = 4000000ull * (t ? 1 : o->client_threads);
        r->lat = malloc(r->cap * sizeof *r->lat);
        ok = r->lat && clients_uri(uri, t, r->uri, sizeof r->uri);
    }
    if (ok) {
        runs->list = malloc(o->keys * sizeof *runs->list);
        runs->again = malloc(o->keys * sizeof *runs->again);
        ok = runs->list && runs->again;
    }
    return ok ? runs : (clients_free(runs, o->client_threads), NULL);
}

