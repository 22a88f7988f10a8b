/* One-sided ops over virtual paths (erma/rma.h, Virtual paths) on the sim
 * fabric in virtual time: an initiator with 4 ports spreads its ops to one
 * target over 4 ECMP paths, its transfers move twice what one path does,
 * a path that loses or slows down is pruned while transfers complete
 * byte-exact, and a derived key works from the initiator's K ports only
 * with the path index the (authenticated) header names.
 *
 * The fabric: host 0 is the target (one port, 31850), host 1 the
 * initiator; 4 core paths each at half the host link, so one path carries
 * half of what a host can send. The initiator's ports are chosen so that
 * its 4 flows to the target, and the target's answers, hash onto the 4
 * paths, its first port onto path `first`, the one a 1-path initiator
 * uses and the one a test degrades. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "erma/sdk/wire.h"
#include "rma_util.h"

#define PATHS 4
#define TARGET_PORT 31850
#define XFER (1u << 20) /* bytes per transfer */
#define NX 4            /* transfers per run: 2 READs, 2 WRITEs, at once */
#define REQ_BYTES 88    /* erma header + op header: a request's sealed part */

/* An initiator base port whose PATHS flows to the target, and the
 * target's answers to them, take PATHS different core paths. */
static uint16_t spread_port(const struct erma_sim_cfg *sc)
{
    struct erma_sim *probe;
    assert_int_equal(erma_sim_create("rmapaths-probe", sc, &probe), ERMA_OK);
    uint16_t found = 0;
    for (uint16_t base = 40000; !found && base < 60000; base = (uint16_t)(base + PATHS)) {
        unsigned fwd = 0, back = 0;
        for (uint16_t k = 0; k < PATHS; k++) {
            fwd |= 1u << erma_sim_flow_path(probe, 1, (uint16_t)(base + k), 0, TARGET_PORT);
            back |= 1u << erma_sim_flow_path(probe, 0, TARGET_PORT, 1, (uint16_t)(base + k));
        }
        found = fwd == (1u << PATHS) - 1 && back == fwd ? base : 0;
    }
    erma_sim_destroy(probe);
    assert_true(found > 0);
    return found;
}

/* Requests (READ, WRITE and their data) from the initiator, by source port. */
struct port_count {
    uint16_t base;
    uint64_t pkts[PATHS + 1]; /* [PATHS]: from no path port */
};

static bool count_tap(void *ctx, const struct erma_sim_event *ev, uint8_t *data)
{
    (void)data;
    struct port_count *pc = ctx;
    if (ev->src_host == 1) {
        const unsigned k = (unsigned)(ev->src_port - pc->base);
        pc->pkts[k < PATHS ? k : PATHS]++;
    }
    return true;
}

struct run {
    double gbps;
    struct erma_rma_stats st;
    struct erma_sim_stats fs;
    struct port_count pc;
};

enum fault { CLEAN, LOSSY_PATH, ALL_LOSSY, SLOW_PATH };

static void sim_cfg(struct erma_sim_cfg *sc)
{
    erma_sim_cfg_default(sc);
    sc->hosts = 2;
    sc->paths = PATHS;
    sc->path_bps = sc->link_bps / 2;
}

/* The initiator's window CC starts from the fabric's hints (a small
 * packet's RTT on the link's rate) and follows the round trips its 4 KB
 * chunks take on these half-rate paths (rma/executor.c). */
static void world_paths(struct world *w, struct erma_sim_cfg *sc, unsigned paths, uint16_t base)
{
    const struct erma_endpoint_cfg ec[2] = {{.paths = 1}, {.paths = paths}};
    const uint16_t port[2] = {TARGET_PORT, base};
    world_up_ep(w, true, 2, sc, NULL, ec, port);
}

/* The fabric and a world whose initiator has PATHS ports from *base, each
 * on its own core path. */
static void paths_up(struct world *w, struct erma_sim_cfg *sc, uint16_t *base)
{
    sim_cfg(sc);
    *base = spread_port(sc);
    world_paths(w, sc, PATHS, *base);
}

/* uri with its port replaced by port. */
static void uri_at(char *out, size_t len, const char *uri, unsigned port)
{
    snprintf(out, len, "%.*s:%u", (int)(strrchr(uri, ':') - uri), uri, port);
}

/* Registers mem on the target and returns the initiator's peer for it,
 * with the key exported for the initiator at `to` (NULL: its own URI). */
static int target_up(struct world *w, void *mem, size_t len, unsigned perms, const char *to,
                     struct erma_rkey *k)
{
    uint32_t region;
    assert_int_equal(erma_region_register(w->rma[0], mem, len, perms, &region), ERMA_OK);
    assert_int_equal(erma_region_export_uri(w->rma[0], region, erma_rma_identity(w->rma[1]),
                                            to ? to : w->uri[1], k),
                     ERMA_OK);
    const int peer = erma_rma_peer(w->rma[1], w->uri[0], 0);
    assert_true(peer >= 0);
    return peer;
}

/* Moves NX transfers of XFER bytes between the initiator and the target's
 * region at once and checks every byte. */
static void run(unsigned paths, enum fault f, struct run *r)
{
    struct erma_sim_cfg sc;
    sim_cfg(&sc);
    const uint16_t base = spread_port(&sc);
    if (f == ALL_LOSSY)
        sc.loss = 1e-3;
    struct world w;
    world_paths(&w, &sc, paths, base);
    const int first = erma_sim_flow_path(w.sim, 1, base, 0, TARGET_PORT);
    if (f == LOSSY_PATH)
        assert_int_equal(erma_sim_set_path(w.sim, (uint32_t)first,
                                           &(struct erma_sim_path){.loss = 0.01}),
                         ERMA_OK);
    if (f == SLOW_PATH)
        assert_int_equal(erma_sim_set_path(w.sim, (uint32_t)first,
                                           &(struct erma_sim_path){.bps = sc.path_bps / 40}),
                         ERMA_OK);
    uint8_t *mem = malloc(NX * XFER), *local = malloc(NX * XFER);
    assert_non_null(mem);
    assert_non_null(local);
    for (size_t i = 0; i < NX * XFER; i++) {
        mem[i] = (uint8_t)(i * 7 + 1);
        local[i] = (uint8_t)(i * 13 + 5);
    }
    struct erma_rkey k;
    const int peer = target_up(&w, mem, NX * XFER, ERMA_RMA_PERM_READ | ERMA_RMA_PERM_WRITE,
                               NULL, &k);
    r->pc = (struct port_count){.base = base};
    erma_sim_set_tap(w.sim, count_tap, &r->pc);
    const uint64_t t0 = erma_sim_now(w.sim);
    for (unsigned x = 0; x < NX; x++) {
        const struct erma_rma_xfer t = {.op = x % 2 ? ERMA_RMA_WRITE : ERMA_RMA_READ, .peer = peer,
                                        .rkey = k, .offset = (uint64_t)x * XFER,
                                        .local = local + (size_t)x * XFER, .len = XFER,
                                        .max_retries = 1000, .tag = x};
        assert_true(erma_rma_transfer(w.rma[1], &t) >= 0);
    }
    struct erma_rma_completion c[NX];
    assert_int_equal(world_wait(&w, 1, c, NX, 10000000000ull), NX);
    r->gbps = NX * XFER * 8.0 / (double)(erma_sim_now(w.sim) - t0);
    erma_sim_set_tap(w.sim, NULL, NULL);
    for (unsigned x = 0; x < NX; x++)
        assert_int_equal(c[x].status, ERMA_OK);
    /* READs brought the region's bytes, WRITEs put the local ones there */
    for (size_t i = 0; i < NX * XFER; i++) {
        const unsigned x = (unsigned)(i / XFER);
        const uint8_t want = x % 2 ? (uint8_t)(i * 13 + 5) : (uint8_t)(i * 7 + 1);
        if (mem[i] != want || local[i] != want)
            fail_msg("byte %zu: region %u local %u, want %u", i, mem[i], local[i], want);
    }
    erma_rma_get_stats(w.rma[1], &r->st);
    erma_sim_get_stats(w.sim, &r->fs);
    world_down(&w);
    free(mem);
    free(local);
}

static void print_run(const char *what, const struct run *one, const struct run *four,
                      const struct run *clean)
{
    print_message("  %-26s 1 path %6.2f Gb/s, %u paths %6.2f Gb/s (%3.0f%% of lossless; %llu "
                  "lost, %llu chunks retried, %llu paths pruned; requests by port %llu %llu "
                  "%llu %llu)\n",
                  what, one->gbps, PATHS, four->gbps, 100 * four->gbps / clean->gbps,
                  (unsigned long long)four->fs.drop_loss, (unsigned long long)four->st.retries,
                  (unsigned long long)four->st.paths_pruned,
                  (unsigned long long)four->pc.pkts[0], (unsigned long long)four->pc.pkts[1],
                  (unsigned long long)four->pc.pkts[2], (unsigned long long)four->pc.pkts[3]);
}

static void test_rma_paths(void **state)
{
    (void)state;
    struct run clean1, clean4, lossy1, lossy4, all1, all4, slow1, slow4;
    run(1, CLEAN, &clean1);
    run(PATHS, CLEAN, &clean4);
    run(1, LOSSY_PATH, &lossy1);
    run(PATHS, LOSSY_PATH, &lossy4);
    run(1, ALL_LOSSY, &all1);
    run(PATHS, ALL_LOSSY, &all4);
    run(1, SLOW_PATH, &slow1);
    run(PATHS, SLOW_PATH, &slow4);
    print_run("lossless", &clean1, &clean4, &clean4);
    print_run("1 of 4 paths drops 1%", &lossy1, &lossy4, &clean4);
    print_run("1e-3 loss on every path", &all1, &all4, &clean4);
    print_run("1 of 4 paths at 1/40 rate", &slow1, &slow4, &clean4);
    /* one path carries half of what the host sends: 4 carry more; the
     * windows follow the chunks' round trips (they fell to min_cwnd, 0.14
     * Gb/s, on the hint's small-packet RTT before) */
    assert_true(clean1.gbps > 5);
    assert_true(clean4.gbps > 1.5 * clean1.gbps);
    /* every port carries a share of the ops, the single path only one */
    assert_int_equal(clean4.pc.pkts[PATHS], 0);
    for (unsigned k = 0; k < PATHS; k++)
        assert_true(clean4.pc.pkts[k] * 8 >= clean4.pc.pkts[0] + clean4.pc.pkts[1] +
                                                 clean4.pc.pkts[2] + clean4.pc.pkts[3]);
    assert_int_equal(clean1.pc.pkts[1] + clean1.pc.pkts[2] + clean1.pc.pkts[3], 0);
    assert_int_equal(clean4.st.paths_pruned, 0);
    /* the others carry the load of a lossy path (8 losses in ~2,600 ops
     * may or may not prune it) and of a slow one, which is pruned */
    assert_true(lossy4.fs.drop_loss > 0);
    assert_true(lossy4.gbps >= 0.8 * clean4.gbps);
    assert_true(all4.gbps >= 0.5 * clean4.gbps);
    /* the slow path also carries one port's answers (2 of 4 ports suffer),
     * and its first slow ops, before the prune, cut the destination's one
     * remote window: about half of lossless (RPC sessions keep 99%) */
    assert_true(slow4.st.paths_pruned > 0);
    assert_true(slow4.gbps >= 0.4 * clean4.gbps);
    assert_true(slow4.gbps >= 10 * slow1.gbps);
}

/* The path index travels in the authenticated header and the target
 * derives Kd for the address that many ports below the source: a key
 * works from its initiator's ports with their own index and from nowhere
 * else. */
struct capture {
    uint16_t base;
    uint8_t pkt[REQ_BYTES + 16];
    uint32_t len;
};

static bool capture_tap(void *ctx, const struct erma_sim_event *ev, uint8_t *data)
{
    struct capture *c = ctx;
    if (!c->len && ev->src_host == 1 && ev->src_port == c->base + 2 &&
        ev->len == sizeof c->pkt) {
        memcpy(c->pkt, data, ev->len);
        c->len = ev->len;
    }
    return true;
}

static void test_rma_paths_auth(void **state)
{
    (void)state;
    struct erma_sim_cfg sc;
    struct world w;
    uint16_t base;
    paths_up(&w, &sc, &base);
    uint8_t mem[256] = {1, 2, 3}, buf[64];
    struct erma_rkey k;
    const int peer = target_up(&w, mem, sizeof mem, ERMA_RMA_PERM_READ, NULL, &k);
    struct capture cap = {.base = base};
    erma_sim_set_tap(w.sim, capture_tap, &cap);
    /* READs 8 at a time (one at a time would all take the first path:
     * the path whose answer just came is the next op's) */
    struct erma_rma_completion c[2 * PATHS];
    for (unsigned i = 0; i < 2 * PATHS; i++)
        assert_true(erma_rma_submit(w.rma[1], &(struct erma_rma_cmd){
                                                  .op = ERMA_RMA_READ, .peer = peer, .rkey = k,
                                                  .local = buf, .len = 64, .tag = i}) >= 0);
    assert_int_equal(world_wait(&w, 1, c, 2 * PATHS, 1000000000ull), 2 * PATHS);
    for (unsigned i = 0; i < 2 * PATHS; i++)
        assert_int_equal(c[i].status, ERMA_OK);
    erma_sim_set_tap(w.sim, NULL, NULL);
    assert_int_equal(cap.len, REQ_BYTES + 16); /* a READ request left from port base + 2 */
    assert_memory_equal(buf, mem, 64);
    struct erma_rma_stats t0, t1;
    erma_rma_get_stats(w.rma[0], &t0);
    /* the same request from the initiator's next port claims the wrong
     * base address: it does not verify */
    assert_int_equal(erma_sim_inject(w.sim, 1, (uint16_t)(base + 3), 0, TARGET_PORT, cap.pkt,
                                     cap.len),
                     ERMA_OK);
    world_run(&w, 1000000, NULL, NULL);
    erma_rma_get_stats(w.rma[0], &t1);
    assert_int_equal(t1.auth_failed, t0.auth_failed + 1);
    assert_int_equal(t1.served, t0.served + 1); /* answered AUTH_FAILED, no data */
    world_down(&w);

    /* an initiator whose own port is its key's address + 1 is not the
     * initiator the key was made for */
    world_paths(&w, &sc, 1, (uint16_t)(base + 1));
    char uri[64];
    uri_at(uri, sizeof uri, w.uri[1], base);
    const int p2 = target_up(&w, mem, sizeof mem, ERMA_RMA_PERM_READ, uri, &k);
    assert_int_equal(world_op(&w, 1, cmd_of(ERMA_RMA_READ, p2, &k, 0, buf, 64, 0), NULL),
                     ERMA_EAUTH);
    world_down(&w);
}

/* Concurrent WRITEs on a clean fabric prune nothing (a WRITE's second
 * answer, a round trip after its first, is not "late"), and ops to a
 * destination whose every path waits for its first answer hold up no op
 * to another destination. */
static void test_rma_paths_no_false_prune(void **state)
{
    (void)state;
    struct erma_sim_cfg sc;
    struct world w;
    uint16_t base;
    paths_up(&w, &sc, &base);
    static uint8_t mem[64 * 64], src[64 * 64], buf[64];
    struct erma_rkey k;
    const int peer = target_up(&w, mem, sizeof mem, ERMA_RMA_PERM_READ | ERMA_RMA_PERM_WRITE,
                               NULL, &k);
    struct erma_rma_completion c[64];
    for (int round = 0; round < 20; round++) {
        for (unsigned i = 0; i < 48; i++)
            assert_true(erma_rma_submit(w.rma[1], &(struct erma_rma_cmd){
                                                      .op = ERMA_RMA_WRITE, .peer = peer,
                                                      .rkey = k, .offset = i * 64,
                                                      .local = src + i * 64, .len = 64}) >= 0);
        assert_int_equal(world_wait(&w, 1, c, 48, 1000000000ull), 48);
        for (unsigned i = 0; i < 48; i++)
            assert_int_equal(c[i].status, ERMA_OK);
    }
    struct erma_rma_stats st;
    erma_rma_get_stats(w.rma[1], &st);
    assert_int_equal(st.paths_pruned, 0);

    /* a destination where nobody listens: its first ops wait out their
     * timeouts, and a READ to the live target goes at once */
    char dead[64];
    uri_at(dead, sizeof dead, w.uri[0], TARGET_PORT + 100);
    const int gone = erma_rma_peer(w.rma[1], dead, 0);
    assert_true(gone >= 0);
    for (unsigned i = 0; i < PATHS + 1; i++)
        assert_true(erma_rma_submit(w.rma[1], &(struct erma_rma_cmd){
                                                  .op = ERMA_RMA_READ, .peer = gone, .rkey = k,
                                                  .local = buf, .len = 64, .tag = 1}) >= 0);
    assert_true(erma_rma_submit(w.rma[1], &(struct erma_rma_cmd){.op = ERMA_RMA_READ,
                                                                  .peer = peer, .rkey = k,
                                                                  .local = buf, .len = 64,
                                                                  .tag = 2}) >= 0);
    assert_int_equal(world_wait(&w, 1, c, 1, 1000000000ull), 1);
    assert_int_equal(c[0].tag, 2);
    assert_int_equal(c[0].status, ERMA_OK);
    assert_int_equal(world_wait(&w, 1, c, PATHS + 1, 10000000000ull), PATHS + 1);
    for (unsigned i = 0; i < PATHS + 1; i++)
        assert_int_equal(c[i].status, ERMA_ETIMEDOUT);
    world_down(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rma_paths),
        cmocka_unit_test(test_rma_paths_auth),
        cmocka_unit_test(test_rma_paths_no_false_prune),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
