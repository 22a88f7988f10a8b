/* apps/kv/table.c: the MICA-style table, owner side and reader side. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "erma/errors.h"
#include "kv/kv.h"
#include "erma/sdk/rand.h"

#define KEYS 2000

struct model {
    uint32_t vlen[KEYS];
    uint32_t version[KEYS]; /* 0: absent */
};

static uint32_t make_key(uint32_t k, char *key)
{
    return (uint32_t)snprintf(key, 32, "key-%u", k);
}

/* Value bytes from (key, version): any mix-up shows. */
static void make_val(uint32_t k, uint32_t version, uint32_t len, uint8_t *v)
{
    for (uint32_t i = 0; i < len; i++)
        v[i] = (uint8_t)(k * 31 + version * 7 + i);
}

/* A one-sided reader's GET on copies of the table's bytes. */
static int remote_get(const struct kv *kv, const char *key, uint32_t klen, uint8_t *out,
                      uint32_t *vlen)
{
    size_t len;
    const uint8_t *mem = kv_memory(kv, &len);
    uint64_t boff;
    uint32_t blen;
    kv_bucket_of(kv_nbuckets(kv), key, klen, &boff, &blen);
    uint8_t bucket[KV_BUCKET];
    memcpy(bucket, mem + boff, blen);
    struct kv_ref refs[KV_SLOTS];
    const int n = kv_bucket_find(bucket, kv_nbuckets(kv), kv_log_bytes(kv), key,
                                 klen, refs, KV_SLOTS);
    for (int i = 0; i < n; i++) {
        assert_true(refs[i].off + refs[i].len <= len);
        const uint8_t *val;
        const int rc = kv_item_check(mem + refs[i].off, &refs[i], key, klen, &val, vlen);
        if (rc == ERMA_OK) {
            memcpy(out, val, *vlen);
            return ERMA_OK;
        }
        assert_int_equal(rc, ERMA_ENOENT); /* no concurrent writer here */
    }
    return n < 0 ? n : ERMA_ENOENT;
}

static void test_agrees_with_model(void **state)
{
    (void)state;
    struct kv *kv;
    assert_int_equal(kv_create(4096, 64u << 20, &kv), ERMA_OK);
    static struct model m;
    memset(&m, 0, sizeof m);
    struct erma_rand r;
    erma_rand_seed(&r, 1);
    static uint8_t val[2048], got[2048], want[2048];
    char key[32];
    unsigned gets = 0, hits = 0;
    for (int op = 0; op < 100000; op++) {
        const uint32_t k = (uint32_t)erma_rand_below(&r, KEYS), kl = make_key(k, key);
        const uint64_t what = erma_rand_below(&r, 10);
        if (what < 4) { /* put */
            const uint32_t len = (uint32_t)erma_rand_below(&r, 1500);
            make_val(k, ++m.version[k], len, val);
            m.vlen[k] = len;
            assert_int_equal(kv_put(kv, key, kl, val, len), ERMA_OK);
        } else if (what < 5) { /* delete */
            assert_int_equal(kv_delete(kv, key, kl), m.version[k] ? ERMA_OK : ERMA_ENOENT);
            m.version[k] = 0;
        } else { /* get, locally and as a remote reader */
            uint32_t vlen;
            const int rc = kv_get(kv, key, kl, got, sizeof got, &vlen);
            gets++;
            if (!m.version[k]) {
                assert_int_equal(rc, ERMA_ENOENT);
                assert_int_equal(remote_get(kv, key, kl, got, &vlen), ERMA_ENOENT);
                continue;
            }
            hits++;
            make_val(k, m.version[k], m.vlen[k], want);
            assert_int_equal(rc, ERMA_OK);
            assert_int_equal(vlen, m.vlen[k]);
            assert_memory_equal(got, want, vlen);
            memset(got, 0, sizeof got);
            assert_int_equal(remote_get(kv, key, kl, got, &vlen), ERMA_OK);
            assert_int_equal(vlen, m.vlen[k]);
            assert_memory_equal(got, want, vlen);
        }
    }
    print_message("  100000 ops on %d keys: %u gets, %u hits, all equal to the model\n", KEYS,
                  gets, hits);
    kv_destroy(kv);
}

/* A small lossy table: every answer is the latest value or absent, never wrong. */
static void test_lossy_never_wrong(void **state)
{
    (void)state;
    struct kv *kv;
    assert_int_equal(kv_create(64, 65536, &kv), ERMA_OK);
    static struct model m;
    memset(&m, 0, sizeof m);
    struct erma_rand r;
    erma_rand_seed(&r, 2);
    static uint8_t val[2048], got[2048], want[2048];
    char key[32];
    unsigned misses = 0;
    for (int op = 0; op < 100000; op++) {
        const uint32_t k = (uint32_t)erma_rand_below(&r, KEYS), kl = make_key(k, key);
        if (erma_rand_below(&r, 2)) {
            const uint32_t len = (uint32_t)erma_rand_below(&r, 1000);
            make_val(k, ++m.version[k], len, val);
            m.vlen[k] = len;
            assert_int_equal(kv_put(kv, key, kl, val, len), ERMA_OK);
            continue;
        }
        uint32_t vlen;
        const int local = kv_get(kv, key, kl, got, sizeof got, &vlen);
        if (local == ERMA_OK) {
            make_val(k, m.version[k], m.vlen[k], want);
            assert_int_equal(vlen, m.vlen[k]);
            assert_memory_equal(got, want, vlen);
        } else {
            assert_int_equal(local, ERMA_ENOENT);
            misses++;
        }
        const int remote = remote_get(kv, key, kl, got, &vlen);
        assert_int_equal(remote, local);
        if (remote == ERMA_OK)
            assert_memory_equal(got, want, vlen);
    }
    print_message("  small table: %u of the gets missed (evicted or wrapped over)\n", misses);
    assert_true(misses > 0);
    kv_destroy(kv);
}

/* A reader that read the bucket, then the item after the log wrapped over
 * it or while it was half-written, must see EAGAIN, never a value. */
static void test_torn_reads(void **state)
{
    (void)state;
    struct kv *kv;
    assert_int_equal(kv_create(1024, 65536, &kv), ERMA_OK);
    size_t len;
    const uint8_t *mem = kv_memory(kv, &len);
    static uint8_t val[4000];
    memset(val, 0xaa, sizeof val);
    assert_int_equal(kv_put(kv, "target", 6, val, 100), ERMA_OK);
    uint64_t boff;
    uint32_t blen;
    kv_bucket_of(kv_nbuckets(kv), "target", 6, &boff, &blen);
    uint8_t bucket[KV_BUCKET];
    memcpy(bucket, mem + boff, blen);
    struct kv_ref ref;
    assert_int_equal(kv_bucket_find(bucket, kv_nbuckets(kv), kv_log_bytes(kv),
                                    "target", 6, &ref, 1),
                     1);
    static uint8_t item[KV_MAX_ITEM];
    const uint8_t *v;
    uint32_t vlen;
    memcpy(item, mem + ref.off, ref.len);
    assert_int_equal(kv_item_check(item, &ref, "target", 6, &v, &vlen), ERMA_OK);
    assert_int_equal(vlen, 100);
    /* a half-written copy: every single bit flipped is caught */
    for (uint32_t i = 0; i < ref.len * 8; i++) {
        memcpy(item, mem + ref.off, ref.len);
        item[i / 8] ^= (uint8_t)(1u << i % 8);
        assert_int_not_equal(kv_item_check(item, &ref, "target", 6, &v, &vlen), ERMA_OK);
    }
    /* a copy that is half the old item and half a new one (read in pieces) */
    memcpy(item, mem + ref.off, ref.len);
    memset(item + 40, 0x55, 30);
    assert_int_equal(kv_item_check(item, &ref, "target", 6, &v, &vlen), ERMA_EAGAIN);
    /* the log wraps over it (other keys, 70 kB), then the reader reads the item */
    char key[32];
    for (uint32_t k = 0; k < 20; k++)
        assert_int_equal(kv_put(kv, key, make_key(k, key), val, 3500), ERMA_OK);
    memcpy(item, mem + ref.off, ref.len);
    assert_int_equal(kv_item_check(item, &ref, "target", 6, &v, &vlen), ERMA_ENOENT);
    /* a bucket copied while its version is odd says read again */
    memcpy(bucket, mem + boff, blen);
    bucket[0] |= 1;
    assert_int_equal(kv_bucket_find(bucket, kv_nbuckets(kv), kv_log_bytes(kv),
                                    "target", 6, &ref, 1),
                     ERMA_EAGAIN);
    kv_destroy(kv);
}

static void test_bad_input(void **state)
{
    (void)state;
    struct kv *kv;
    assert_int_equal(kv_create(0, 65536, &kv), ERMA_EINVAL);
    assert_int_equal(kv_create(16, 65536, &kv), ERMA_OK);
    static uint8_t big[KV_MAX_ITEM];
    assert_int_equal(kv_put(kv, "", 0, big, 1), ERMA_EINVAL);
    assert_int_equal(kv_put(kv, "k", 1, big, KV_MAX_ITEM), ERMA_E2BIG);
    assert_int_equal(kv_put(kv, "k", 1, big, KV_MAX_ITEM - 40), ERMA_OK);
    uint32_t vlen;
    assert_int_equal(kv_get(kv, "k", 1, big, 10, &vlen), ERMA_E2BIG);
    assert_int_equal(vlen, KV_MAX_ITEM - 40);
    assert_int_equal(kv_get(kv, "nope", 4, big, 10, &vlen), ERMA_ENOENT);
    assert_int_equal(kv_delete(kv, "nope", 4), ERMA_ENOENT);
    kv_destroy(kv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_agrees_with_model),
        cmocka_unit_test(test_lossy_never_wrong),
        cmocka_unit_test(test_torn_reads),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
