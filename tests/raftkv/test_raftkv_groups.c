/* raftkv's raft groups (apps/raftkv/raftkv.h, "raft groups"): a key's
 * group spreads keys evenly and never moves; a group's URI is its port
 * plus the group's number, refused where that cannot be; three replicas of
 * two groups each, every group on a thread of its own, on udp loopback:
 * every write of a client of both groups is read back from its key's
 * group, and a client of one group only is told ERMA_EINVAL for a key of
 * the other; bad configurations fail with their codes. Loops are bounded
 * in count and time. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "erma/clock.h"
#include "raftkv/raftkv.h"

#define R 3
#define G 2
#define KEYS 200
#define WAIT_NS 60000000000ull /* 10x what a run takes beside two CPU hogs */

static void test_group_of(void **state)
{
    (void)state;
    assert_int_equal(raftkv_group_of("a", 1, 0), 0);
    assert_int_equal(raftkv_group_of("a", 1, 1), 0);
    unsigned count[4] = {0};
    char key[32];
    for (unsigned k = 0; k < 4000; k++) {
        const int n = snprintf(key, sizeof key, "key-%u", k);
        const unsigned g = raftkv_group_of(key, (uint32_t)n, 4);
        assert_true(g < 4);
        assert_int_equal(raftkv_group_of(key, (uint32_t)n, 4), g);
        count[g]++;
    }
    for (unsigned g = 0; g < 4; g++)
        assert_in_range(count[g], 800, 1200);
    /* a key of each group, found by raftkv_group_key */
    for (unsigned g = 0; g < 4; g++) {
        const uint32_t n = raftkv_group_key("probe:", g, 4, key, sizeof key);
        assert_true(n > 6);
        assert_int_equal(strlen(key), n);
        assert_memory_equal(key, "probe:", 6);
        assert_int_equal(raftkv_group_of(key, n, 4), g);
    }
    assert_int_equal(raftkv_group_key("probe:", 0, 1, key, sizeof key), 7);
    assert_string_equal(key, "probe:0");
    assert_int_equal(raftkv_group_key("probe:", 0, 0, key, sizeof key), 7);
    assert_int_equal(raftkv_group_key("probe:", 4, 4, key, sizeof key), 0);
    assert_int_equal(raftkv_group_key("probe:", 1, 0, key, sizeof key), 0);
    assert_int_equal(raftkv_group_key("probe:", 0, 4, key, 7), 0); /* no room for a digit */
}

static void test_group_uri(void **state)
{
    (void)state;
    char out[64];
    assert_int_equal(raftkv_group_uri("udp://127.0.0.1:40000", 3, out, sizeof out), ERMA_OK);
    assert_string_equal(out, "udp://127.0.0.1:40003");
    assert_int_equal(raftkv_group_uri("udp://[::1]:5", 2, out, sizeof out), ERMA_OK);
    assert_string_equal(out, "udp://[::1]:7");
    assert_int_equal(raftkv_group_uri("udp://h:0", 0, out, sizeof out), ERMA_OK);
    assert_string_equal(out, "udp://h:0");
    assert_int_equal(raftkv_group_uri("udp://h:0", 1, out, sizeof out), ERMA_EADDR);
    assert_int_equal(raftkv_group_uri("udp://h:65535", 1, out, sizeof out), ERMA_EADDR);
    assert_int_equal(raftkv_group_uri("udp://h:70000", 0, out, sizeof out), ERMA_EADDR);
    assert_int_equal(raftkv_group_uri("udp://h", 1, out, sizeof out), ERMA_EADDR);
    assert_int_equal(raftkv_group_uri("udp://h:12x", 1, out, sizeof out), ERMA_EADDR);
    assert_int_equal(raftkv_group_uri("udp://h:1000", 1, out, 8), ERMA_EADDR);
    assert_int_equal(raftkv_group_uri(NULL, 1, out, sizeof out), ERMA_EADDR);
}

/* Ports apart from other tests' and from other runs of this one. */
static unsigned base_port(void)
{
    return 20000u + (unsigned)(getpid() % 400) * 16u;
}

static void uris_of(unsigned base, unsigned g, char uri[R][64], const char *uris[R])
{
    for (unsigned i = 0; i < R; i++) {
        snprintf(uri[i], sizeof uri[i], "udp://127.0.0.1:%u", base + 4 * i + g);
        uris[i] = uri[i];
    }
}

static void test_bad_cfg(void **state)
{
    (void)state;
    char uri[R][64];
    const char *uris[R];
    uris_of(base_port(), 0, uri, uris);
    struct raftkv_server_cfg cfg = {.id = 1, .peers = uris, .npeers = R, .data_dir = "/nonexistent"};
    struct raftkv_groups *gs;
    assert_int_equal(raftkv_groups_start(&cfg, 0, &gs), ERMA_EINVAL);
    assert_int_equal(raftkv_groups_start(&cfg, RAFTKV_MAX_GROUPS + 1, &gs), ERMA_EINVAL);
    cfg.data_dir = NULL;
    assert_int_equal(raftkv_groups_start(&cfg, 2, &gs), ERMA_EINVAL);
    const char *portless[R] = {"udp://127.0.0.1", uris[1], uris[2]};
    cfg.peers = portless;
    cfg.data_dir = "/nonexistent";
    assert_int_equal(raftkv_groups_start(&cfg, 2, &gs), ERMA_EADDR);
    cfg.peers = uris;
    cfg.group = 2;
    cfg.groups = 2;
    struct raftkv_server *s;
    assert_int_equal(raftkv_server_create(&cfg, &s), ERMA_EINVAL);
    const struct raftkv_client_cfg cc = {.uri = "udp://127.0.0.1:0", .servers = uris,
                                         .nservers = R, .groups = RAFTKV_MAX_GROUPS + 1};
    struct raftkv_client *c;
    assert_int_equal(raftkv_client_create(&cc, &c), ERMA_EINVAL);
}

/* ---- three replicas of two groups on udp loopback ---- */

struct tag {
    bool done;
    int status;
    char val[32];
};

struct batch {
    struct tag tag[KEYS];
    unsigned done;
};

static struct batch batch;

static void op_done(void *p, int status, const uint8_t *val, uint32_t vlen)
{
    struct tag *t = p;
    t->done = true;
    t->status = status;
    if (status == ERMA_OK && val && vlen < sizeof t->val) {
        memcpy(t->val, val, vlen);
        t->val[vlen] = '\0';
    }
    batch.done++;
}

static bool batch_done(void *ctx)
{
    (void)ctx;
    return batch.done == KEYS;
}

static void key_of(unsigned k, char key[16])
{
    snprintf(key, 16, "g-key-%u", k);
}

/* put: PUT key k with "v-k"; else a linearizable GET of each key; every
 * op of the batch in flight at once. */
static void run_batch(struct raftkv_client *c, bool put)
{
    memset(&batch, 0, sizeof batch);
    for (unsigned k = 0; k < KEYS; k++) {
        char key[16], val[16];
        key_of(k, key);
        const int n = snprintf(val, sizeof val, "v-%u", k);
        const int rc = put ? raftkv_put(c, key, (uint32_t)strlen(key), val, (uint32_t)n, op_done,
                                        &batch.tag[k])
                           : raftkv_get(c, key, (uint32_t)strlen(key), false, op_done,
                                        &batch.tag[k]);
        assert_int_equal(rc, ERMA_OK);
    }
    raftkv_client_run(c, batch_done, NULL, WAIT_NS);
    assert_int_equal(batch.done, KEYS);
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* What test_groups_udp has running, for live_teardown to stop when an
 * assertion ends the test early. */
static struct {
    char dir[32];
    struct raftkv_groups *gs[R];
} live;

static int live_teardown(void **state)
{
    (void)state;
    for (unsigned i = 0; i < R; i++)
        if (live.gs[i])
            raftkv_groups_stop(live.gs[i]);
    if (live.dir[0])
        nftw(live.dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    memset(&live, 0, sizeof live);
    return 0;
}

/* A client of group g alone, of replica order `order` (indices into
 * uris), groups 1. */
static struct raftkv_client *group_client(char uris[G][R][64], unsigned g,
                                          const unsigned order[R])
{
    const char *list[R];
    for (unsigned i = 0; i < R; i++)
        list[i] = uris[g][order[i]];
    const struct raftkv_client_cfg cc = {.uri = "udp://127.0.0.1:0", .servers = list,
                                         .nservers = R, .max_ops = KEYS};
    struct raftkv_client *c;
    assert_int_equal(raftkv_client_create(&cc, &c), ERMA_OK);
    return c;
}

/* A client of both groups, replicas in that order. */
static struct raftkv_client *both_client(char uris[G][R][64], const unsigned order[R])
{
    const char *list[R];
    for (unsigned i = 0; i < R; i++)
        list[i] = uris[0][order[i]];
    const struct raftkv_client_cfg cc = {.uri = "udp://127.0.0.1:0", .servers = list,
                                         .nservers = R, .groups = G, .max_ops = KEYS};
    struct raftkv_client *c;
    assert_int_equal(raftkv_client_create(&cc, &c), ERMA_OK);
    return c;
}

static bool first_done(void *ctx)
{
    (void)ctx;
    return batch.tag[0].done;
}

/* Replica r0 has applied key k's write in k's group (its own copy). */
static bool applied_at(char uris[G][R][64], unsigned r0, unsigned k)
{
    char key[16], want[16];
    key_of(k, key);
    snprintf(want, sizeof want, "v-%u", k);
    const unsigned g = raftkv_group_of(key, (uint32_t)strlen(key), G);
    const char *one[1] = {uris[g][r0]};
    const struct raftkv_client_cfg cc = {.uri = "udp://127.0.0.1:0", .servers = one,
                                         .nservers = 1};
    struct raftkv_client *c;
    assert_int_equal(raftkv_client_create(&cc, &c), ERMA_OK);
    memset(&batch, 0, sizeof batch);
    assert_int_equal(raftkv_get(c, key, (uint32_t)strlen(key), true, op_done, &batch.tag[0]),
                     ERMA_OK);
    raftkv_client_run(c, first_done, NULL, 200000000);
    raftkv_client_destroy(c);
    return batch.tag[0].done && batch.tag[0].status == ERMA_OK &&
           strcmp(batch.tag[0].val, want) == 0;
}

/* Replicas 2 and 3 elect each group's leader and take every write, then
 * replica 1 starts and catches up: a client that asks replica 1 first is
 * redirected in both groups, and follows every redirect to the leader it
 * names. Every value reads back; a client of one group is refused the
 * other's keys. */
static void test_groups_udp(void **state)
{
    (void)state;
    char *dir = live.dir, rdir[R][PATH_MAX];
    strcpy(dir, "/tmp/raftkv-groups-XXXXXX");
    assert_non_null(mkdtemp(dir));
    char uri[G][R][64];
    const char *uris[G][R];
    const unsigned base = base_port();
    for (unsigned g = 0; g < G; g++)
        uris_of(base, g, uri[g], uris[g]);
    struct raftkv_groups **gs = live.gs;
    struct raftkv_server_cfg cfg[R];
    for (unsigned i = 0; i < R; i++) {
        snprintf(rdir[i], sizeof rdir[i], "%s/r%u", dir, i + 1);
        cfg[i] = (struct raftkv_server_cfg){.id = i + 1, .peers = uris[0], .npeers = R,
                                            .data_dir = rdir[i], .no_fsync = true};
    }
    for (unsigned i = 1; i < R; i++)
        assert_int_equal(raftkv_groups_start(&cfg[i], G, &gs[i]), ERMA_OK);
    static const unsigned late[R] = {1, 2, 0}, first[R] = {0, 1, 2};
    struct raftkv_client *c = both_client(uri, late);
    run_batch(c, true);
    unsigned in_group[G] = {0};
    for (unsigned k = 0; k < KEYS; k++) {
        assert_int_equal(batch.tag[k].status, ERMA_OK);
        char key[16];
        key_of(k, key);
        in_group[raftkv_group_of(key, (uint32_t)strlen(key), G)]++;
    }
    assert_true(in_group[0] > 0 && in_group[1] > 0);
    raftkv_client_destroy(c);
    assert_int_equal(raftkv_groups_start(&cfg[0], G, &gs[0]), ERMA_OK);
    const uint64_t end = erma_now_ns() + WAIT_NS;
    unsigned caught = 0; /* keys whose write replica 1 holds, in order */
    while (caught < KEYS && erma_now_ns() < end)
        caught += applied_at(uri, 0, caught) ? 1 : 0;
    assert_int_equal(caught, KEYS);
    c = both_client(uri, first);
    run_batch(c, false);
    for (unsigned k = 0; k < KEYS; k++) {
        char want[16];
        snprintf(want, sizeof want, "v-%u", k);
        assert_int_equal(batch.tag[k].status, ERMA_OK);
        assert_string_equal(batch.tag[k].val, want);
    }
    struct raftkv_client_stats st;
    raftkv_client_get_stats(c, &st);
    assert_true(st.redirects >= G); /* replica 1 leads neither group */
    assert_int_equal(st.followed, st.redirects);
    raftkv_client_destroy(c);
    /* a client of group g alone: its keys' values, the others' refused */
    for (unsigned g = 0; g < G; g++) {
        c = group_client(uri, g, first);
        run_batch(c, false);
        for (unsigned k = 0; k < KEYS; k++) {
            char key[16], want[16];
            key_of(k, key);
            snprintf(want, sizeof want, "v-%u", k);
            if (raftkv_group_of(key, (uint32_t)strlen(key), G) == g) {
                assert_int_equal(batch.tag[k].status, ERMA_OK);
                assert_string_equal(batch.tag[k].val, want);
            } else {
                assert_int_equal(batch.tag[k].status, ERMA_EINVAL);
            }
        }
        raftkv_client_destroy(c);
    }
    for (unsigned i = 0; i < R; i++) {
        raftkv_groups_stop(gs[i]);
        gs[i] = NULL;
    }
    /* the directories are two groups' for good: one group, or three, refused */
    struct raftkv_groups *other;
    assert_int_equal(raftkv_groups_start(&cfg[0], 3, &other), ERMA_EINVAL);
    struct raftkv_server *one;
    assert_int_equal(raftkv_server_create(&cfg[0], &one), ERMA_EINVAL);
    assert_int_equal(nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS), 0);
    live.dir[0] = '\0';
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_of),
        cmocka_unit_test(test_group_uri),
        cmocka_unit_test(test_bad_cfg),
        cmocka_unit_test_teardown(test_groups_udp, live_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
