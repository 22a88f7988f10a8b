/* Keys superseded by a rekey (erma/rma.h, Security, Superseded keys): an
 * authentic rkey of a generation a REKEY or erma_region_rekey() retired
 * gets ERMA_ESUPERSEDED once its grace time is over, for the RMA_OLD_KEYS
 * generations the target keeps; a forged key of any generation, and a key
 * older than those, get ERMA_EAUTH; nothing is read or written. Each test
 * runs on the sim fabric and on udp loopback. (test_rma_hardening: a plain
 * ESUPERSEDED answer is dropped as a forgery.) */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "rma/region.h" /* RMA_OLD_KEYS */
#include "rma_util.h"

static bool SIM = true, UDP = false;
#define ON_SIM(state) (*(bool *)*(state))

#define REGION_LEN 8192
#define LEN 64

struct fixture {
    struct world w;
    uint8_t *mem, *copy;
    uint32_t region;
    int peer;
};

static void fixture_up(struct fixture *f, bool on_sim)
{
    world_up(&f->w, on_sim, 2);
    f->mem = malloc(REGION_LEN);
    f->copy = malloc(REGION_LEN);
    assert_true(f->mem && f->copy);
    for (size_t i = 0; i < REGION_LEN; i++)
        f->mem[i] = (uint8_t)(i * 11 + 1);
    assert_int_equal(erma_region_register(f->w.rma[0], f->mem, REGION_LEN,
                                          ERMA_RMA_PERM_READ | ERMA_RMA_PERM_WRITE |
                                              ERMA_RMA_PERM_REKEY,
                                          &f->region),
                     ERMA_OK);
    f->peer = erma_rma_peer(f->w.rma[1], f->w.uri[0], 0);
    assert_true(f->peer >= 0);
}

static void fixture_down(struct fixture *f)
{
    world_down(&f->w);
    free(f->mem);
    free(f->copy);
}

/* The target's rkey for the initiator (host 1), of the current generation. */
static struct erma_rkey key_now(struct fixture *f)
{
    struct erma_rkey k;
    assert_int_equal(erma_region_export_uri(f->w.rma[0], f->region,
                                            erma_rma_identity(f->w.rma[1]), f->w.uri[1], &k),
                     ERMA_OK);
    return k;
}

static struct erma_rkey flipped(struct erma_rkey k)
{
    k.kd[7] ^= 0x10;
    return k;
}

/* A READ and a WRITE under k both end with want; when want is not OK the
 * region is unchanged and the READ's buffer untouched. */
static void read_write(struct fixture *f, const struct erma_rkey *k, int want)
{
    uint8_t buf[LEN], src[LEN];
    memset(buf, 0xab, sizeof buf);
    memset(src, 0xee, sizeof src);
    memcpy(f->copy, f->mem, REGION_LEN);
    assert_int_equal(world_op(&f->w, 1, cmd_of(ERMA_RMA_READ, f->peer, k, 100, buf, LEN, 1),
                              NULL),
                     want);
    for (unsigned i = 0; want != ERMA_OK && i < LEN; i++)
        assert_int_equal(buf[i], 0xab);
    if (want == ERMA_OK)
        assert_memory_equal(buf, f->mem + 100, LEN);
    assert_int_equal(world_op(&f->w, 1, cmd_of(ERMA_RMA_WRITE, f->peer, k, 200, src, LEN, 2),
                              NULL),
                     want);
    if (want != ERMA_OK)
        assert_memory_equal(f->mem, f->copy, REGION_LEN);
    else
        assert_memory_equal(f->mem + 200, src, LEN);
}

static struct erma_rma_stats stats_of(struct fixture *f, unsigned h)
{
    struct erma_rma_stats st;
    erma_rma_get_stats(f->w.rma[h], &st);
    return st;
}

/* erma_region_rekey() without grace: the old key is told it was superseded,
 * a forged one (of the old or the new generation) fails to verify, the new
 * one works, and the target counts each answer as what it is. */
static void test_local_rekey(void **state)
{
    struct fixture f;
    fixture_up(&f, ON_SIM(state));
    const struct erma_rkey old = key_now(&f);
    read_write(&f, &old, ERMA_OK);
    assert_int_equal(erma_region_rekey(f.w.rma[0], f.region, NULL, 0), ERMA_OK);
    const struct erma_rkey cur = key_now(&f);
    assert_int_equal(cur.key_gen, old.key_gen + 1);
    struct erma_rma_stats t0 = stats_of(&f, 0);
    read_write(&f, &old, ERMA_ESUPERSEDED);
    struct erma_rma_stats t1 = stats_of(&f, 0);
    assert_int_equal(t1.superseded_sent - t0.superseded_sent, 2);
    assert_int_equal(t1.auth_failed, t0.auth_failed);
    const struct erma_rkey bad_old = flipped(old), bad_cur = flipped(cur);
    read_write(&f, &bad_old, ERMA_EAUTH);
    read_write(&f, &bad_cur, ERMA_EAUTH);
    t0 = stats_of(&f, 0);
    assert_int_equal(t0.superseded_sent, t1.superseded_sent);
    assert_int_equal(t0.auth_failed - t1.auth_failed, 4);
    read_write(&f, &cur, ERMA_OK);
    const struct erma_rma_stats in = stats_of(&f, 1);
    assert_int_equal(in.rx_unmatched + in.rx_unsealed_bad, 0);
    fixture_down(&f);
}

/* The old key works within its grace time, and is superseded after it. */
static void test_grace(void **state)
{
    struct fixture f;
    const bool on_sim = ON_SIM(state);
    fixture_up(&f, on_sim);
    /* long enough for the ops of a loaded machine; short, then waited out */
    const uint64_t grace = on_sim ? 1000000000ull : 10000000000ull;
    const uint64_t brief = on_sim ? 10000 : 2000000;
    const struct erma_rkey k1 = key_now(&f);
    assert_int_equal(erma_region_rekey(f.w.rma[0], f.region, NULL, grace), ERMA_OK);
    const struct erma_rkey k2 = key_now(&f);
    read_write(&f, &k1, ERMA_OK);
    read_write(&f, &k2, ERMA_OK);
    const struct erma_rkey bad = flipped(k1);
    read_write(&f, &bad, ERMA_EAUTH);
    assert_int_equal(erma_region_rekey(f.w.rma[0], f.region, NULL, brief), ERMA_OK);
    world_run(&f.w, 10 * brief, NULL, NULL);
    read_write(&f, &k2, ERMA_ESUPERSEDED); /* its grace is over */
    read_write(&f, &k1, ERMA_ESUPERSEDED); /* its grace ended with the next rekey */
    const struct erma_rkey k3 = key_now(&f);
    read_write(&f, &k3, ERMA_OK);
    fixture_down(&f);
}

/* The target keeps RMA_OLD_KEYS generations before the current one: the
 * oldest of them is superseded, the one before it, forgotten, fails to
 * verify like a forged key, and so does a generation not installed yet. */
static void test_retention(void **state)
{
    struct fixture f;
    fixture_up(&f, ON_SIM(state));
    struct erma_rkey gen[RMA_OLD_KEYS + 2];
    for (unsigned i = 0; i < RMA_OLD_KEYS + 2; i++) {
        gen[i] = key_now(&f);
        assert_int_equal(gen[i].key_gen, 1 + i);
        if (i < RMA_OLD_KEYS + 1)
            assert_int_equal(erma_region_rekey(f.w.rma[0], f.region, NULL, 0), ERMA_OK);
    }
    read_write(&f, &gen[RMA_OLD_KEYS + 1], ERMA_OK);
    for (unsigned i = 1; i <= RMA_OLD_KEYS; i++)
        read_write(&f, &gen[i], ERMA_ESUPERSEDED);
    const struct erma_rma_stats t0 = stats_of(&f, 0);
    read_write(&f, &gen[0], ERMA_EAUTH);
    struct erma_rkey next = gen[RMA_OLD_KEYS + 1];
    next.key_gen++;
    read_write(&f, &next, ERMA_EAUTH);
    const struct erma_rma_stats t1 = stats_of(&f, 0);
    assert_int_equal(t1.auth_failed - t0.auth_failed, 4);
    assert_int_equal(t1.superseded_sent, t0.superseded_sent);
    assert_int_equal(t0.superseded_sent, 2 * RMA_OLD_KEYS);
    fixture_down(&f);
}

/* A REKEY op from the initiator, without grace: its old key is superseded
 * for every op, a transfer's included (not retried), and a forged one
 * still fails to verify; the key the target exports now works. */
static void test_rekey_op(void **state)
{
    struct fixture f;
    fixture_up(&f, ON_SIM(state));
    const struct erma_rkey old = key_now(&f);
    uint8_t kr[ERMA_RMA_KEY_BYTES];
    memset(kr, 0x3c, sizeof kr);
    assert_int_equal(world_op(&f.w, 1, cmd_of(ERMA_RMA_REKEY, f.peer, &old, 0, kr, 0, 3), NULL),
                     ERMA_OK);
    read_write(&f, &old, ERMA_ESUPERSEDED);
    assert_int_equal(world_op(&f.w, 1, cmd_of(ERMA_RMA_REKEY, f.peer, &old, 0, kr, 0, 4), NULL),
                     ERMA_ESUPERSEDED);
    const struct erma_rkey bad = flipped(old);
    read_write(&f, &bad, ERMA_EAUTH);
    static uint8_t big[3 * ERMA_RMA_MAX_OP];
    const struct erma_rma_xfer x = {.op = ERMA_RMA_READ, .peer = f.peer, .rkey = old,
                                    .local = big, .len = sizeof big, .max_retries = 3};
    const int id = erma_rma_transfer(f.w.rma[1], &x);
    assert_true(id >= 0);
    struct erma_rma_completion c;
    assert_int_equal(world_wait(&f.w, 1, &c, 1, 2000000000ull), 1);
    assert_true(c.transfer);
    assert_int_equal(c.status, ERMA_ESUPERSEDED);
    assert_int_equal(c.retries, 0);
    const struct erma_rkey cur = key_now(&f);
    assert_int_equal(cur.key_gen, old.key_gen + 1);
    struct erma_rkey derived;
    struct erma_addr a;
    assert_int_equal(erma_transport_resolve(f.w.ep[0]->tr, f.w.uri[1], &a),
                     ERMA_OK);
    erma_rma_derive(kr, f.region, cur.key_gen, (enum erma_rma_cipher)cur.cipher,
                    erma_rma_identity(f.w.rma[1]), &a, &derived);
    assert_memory_equal(derived.kd, cur.kd, sizeof cur.kd);
    read_write(&f, &cur, ERMA_OK);
    fixture_down(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_local_rekey, &SIM),
        cmocka_unit_test_prestate(test_local_rekey, &UDP),
        cmocka_unit_test_prestate(test_grace, &SIM),
        cmocka_unit_test_prestate(test_grace, &UDP),
        cmocka_unit_test_prestate(test_retention, &SIM),
        cmocka_unit_test_prestate(test_retention, &UDP),
        cmocka_unit_test_prestate(test_rekey_op, &SIM),
        cmocka_unit_test_prestate(test_rekey_op, &UDP),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
