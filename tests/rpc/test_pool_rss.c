/* The buffer pool gives memory back: after a burst of 1 MiB RPCs and then
 * 30 s of small ones (virtual time, sim fabric), the process's RSS is back
 * within 2x of what it was before the burst. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <cmocka.h>

#include "endpoint/proto.h"
#include "erma/clock.h"
#include "erma/sim.h"
#include "rpc_util.h"

#define ECHO 1
#define WINDOW ERMA_SESSION_SLOTS /* a round gives every slot a new request */
#define BIG (1u << 20)
#define BIG_ROUNDS 4
#define SMALL 32u
#define SMALL_GAP_NS 10000000ull /* 10 ms between rounds of small calls */
#define SMALL_FOR_NS 30000000000ull
#define MIB (1u << 20)

struct host {
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    struct erma_rpc *rpc;
    struct echo_stats echo;
    char uri[64];
};

struct pair {
    struct erma_sim *sim;
    struct host h[2];
    int sess;
    uint32_t next_id;
};

struct round;

struct call {
    struct erma_msgbuf req, resp;
    struct round *round;
    uint32_t id, resp_size;
};

struct round {
    struct call c[WINDOW];
    int done, wrong;
};

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

#ifdef UNDER_ASAN
/* ASan keeps freed heap memory in quarantine (the sim's packets of the
 * burst: tens of MiB) and returns free pages to the system only now and
 * then: neither is the pool's doing. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "quarantine_size_mb=0:allocator_release_to_os_interval_ms=0";
}
#endif

/* Resident memory: VmRSS, plus HugetlbPages where the pool got hugepages
 * (RSS does not count them). */
static size_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    assert_non_null(f);
    char line[256];
    size_t kb = 0, v;
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmRSS: %zu kB", &v) == 1) {
            kb += v;
            found++;
        } else if (sscanf(line, "HugetlbPages: %zu kB", &v) == 1) {
            kb += v;
        }
    }
    fclose(f);
    assert_int_equal(found, 1);
    return kb << 10;
}

static bool round_done(void *ctx)
{
    return ((const struct round *)ctx)->done == WINDOW;
}

static bool never(void *ctx)
{
    (void)ctx;
    return false;
}

static void on_done(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    struct call *c = tag;
    c->round->wrong += status != ERMA_OK || check_resp(resp, c->id, c->resp_size) != 0;
    c->round->done++;
}

static void pair_up(struct pair *p)
{
    memset(p, 0, sizeof *p);
    struct erma_sim_cfg sc;
    erma_sim_cfg_default(&sc);
    sc.hosts = 2;
    assert_int_equal(erma_sim_create("pool_rss", &sc, &p->sim), ERMA_OK);
    erma_sim_use_clock(p->sim);
    const struct erma_rpc_cfg rcfg = {.seed = 5};
    for (int i = 0; i < 2; i++) {
        struct host *h = &p->h[i];
        snprintf(h->uri, sizeof h->uri, "sim://pool_rss/%d:31870", i);
        assert_int_equal(erma_nexus_create(NULL, &h->nx), ERMA_OK);
        assert_int_equal(erma_handler_register(h->nx, ECHO, echo_handler, ERMA_DISPATCH,
                                               &h->echo),
                         ERMA_OK);
        assert_int_equal(erma_endpoint_create(h->uri, 0, NULL, &h->ep), ERMA_OK);
        assert_int_equal(erma_rpc_create(h->nx, h->ep, &rcfg, &h->rpc), ERMA_OK);
    }
    p->sess = erma_session_create(p->h[0].rpc, p->h[1].uri, 0);
    assert_true(p->sess >= 0);
}

static void pair_down(struct pair *p)
{
    for (int i = 0; i < 2; i++) {
        erma_rpc_destroy(p->h[i].rpc);
        erma_endpoint_destroy(p->h[i].ep);
        erma_nexus_destroy(p->h[i].nx);
    }
    erma_sim_destroy(p->sim);
}

static int run(struct pair *p, uint64_t ns, bool (*done)(void *), void *ctx)
{
    struct erma_endpoint *eps[2] = {p->h[0].ep, p->h[1].ep};
    return erma_sim_run(p->sim, eps, 2, ns, done, ctx);
}

/* WINDOW echo calls of size bytes each way at once, all answered right. */
static void call_round(struct pair *p, uint32_t size)
{
    struct erma_rpc *rpc = p->h[0].rpc;
    struct round r = {0};
    for (int i = 0; i < WINDOW; i++) {
        struct call *c = &r.c[i];
        *c = (struct call){.round = &r, .id = p->next_id++, .resp_size = size};
        assert_int_equal(erma_msgbuf_alloc(rpc, size, &c->req), ERMA_OK);
        assert_int_equal(erma_msgbuf_alloc(rpc, SMALL, &c->resp), ERMA_OK);
        fill_req(&c->req, c->id, size);
        assert_int_equal(erma_rpc_call(rpc, p->sess, ECHO, &c->req, &c->resp, on_done, c),
                         ERMA_OK);
    }
    assert_int_equal(run(p, 10000000000ull, round_done, &r), ERMA_OK);
    assert_int_equal(r.wrong, 0);
    for (int i = 0; i < WINDOW; i++) {
        erma_msgbuf_free(rpc, &r.c[i].req);
        erma_msgbuf_free(rpc, &r.c[i].resp);
    }
}

/* Rounds of small calls SMALL_GAP_NS apart for ns of virtual time. */
static void small_calls(struct pair *p, uint64_t ns)
{
    const uint64_t end = erma_sim_now(p->sim) + ns, wall_end = erma_mono_ns() + 60000000000ull;
    while (erma_sim_now(p->sim) < end) {
        assert_true(erma_mono_ns() < wall_end);
        call_round(p, SMALL);
        assert_int_equal(run(p, SMALL_GAP_NS, never, NULL), ERMA_ETIMEDOUT);
    }
}

static size_t pools_mapped(const struct pair *p)
{
    return erma_pool_mapped(p->h[0].ep->pool) + erma_pool_mapped(p->h[1].ep->pool);
}

static void test_rss_after_burst(void **state)
{
    (void)state;
    struct pair p;
    pair_up(&p);
    small_calls(&p, 2 * ERMA_POOL_IDLE_NS); /* every structure of small calls made */
    const size_t rss0 = rss_bytes(), mapped0 = pools_mapped(&p);
    for (int i = 0; i < BIG_ROUNDS; i++)
        call_round(&p, BIG);
    const size_t rss_big = rss_bytes(), mapped_big = pools_mapped(&p);
    small_calls(&p, SMALL_FOR_NS);
    const size_t rss1 = rss_bytes(), mapped1 = pools_mapped(&p);
    print_message("  RSS %zu MiB before the burst, %zu after it, %zu after 30 s of small calls; "
                  "pools %zu / %zu / %zu MiB\n", rss0 / MIB, rss_big / MIB, rss1 / MIB,
                  mapped0 / MIB, mapped_big / MIB, mapped1 / MIB);
    /* the burst's buffers, a 2 MiB class: at both ends a request and a
     * response per slot, about 1 MiB of each written (32 MiB in all
     * without transparent hugepages, 64 with), so that "back within 2x"
     * below says something */
    assert_true(mapped_big >= mapped0 + 2 * WINDOW * ERMA_POOL_CHUNK);
    assert_true(rss_big >= rss0 + WINDOW * ERMA_POOL_CHUNK && rss_big > 2 * rss0);
    assert_true(rss1 <= 2 * rss0);
    assert_true(mapped1 <= mapped0 + 2 * ERMA_POOL_CHUNK);
    assert_int_equal(atomic_load(&p.h[1].echo.bad), 0);
    pair_down(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rss_after_burst),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
