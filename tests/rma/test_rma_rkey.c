/* The portable rkey encoding (rma.h, erma_rkey_pack / erma_rkey_unpack):
 * the exact bytes of a known key, a round trip of every cipher, and a
 * precise refusal of anything that is not a packed key: wrong length,
 * unknown version, unknown cipher, NULL arguments. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "erma/rma.h"

static struct erma_rkey sample(uint8_t cipher)
{
    struct erma_rkey k;
    memset(&k, 0xee, sizeof k); /* padding must not leak into the bytes */
    k.region = 0x01020304;
    k.key_gen = 0xa0b0c0d0;
    for (int i = 0; i < ERMA_RMA_KEY_BYTES; i++)
        k.kd[i] = (uint8_t)(0x40 + i);
    k.cipher = cipher;
    return k;
}

static void packed_bytes(void **state)
{
    (void)state;
    const struct erma_rkey k = sample(ERMA_RMA_AES256_GCM);
    uint8_t b[ERMA_RKEY_PACKED_BYTES];
    assert_int_equal(erma_rkey_pack(&k, b), ERMA_OK);
    const uint8_t head[10] = {1, 0x04, 0x03, 0x02, 0x01, 0xd0, 0xc0, 0xb0, 0xa0, 1};
    assert_memory_equal(b, head, sizeof head);
    assert_memory_equal(b + 10, k.kd, ERMA_RMA_KEY_BYTES);
}

static void round_trip(void **state)
{
    (void)state;
    for (uint8_t c = ERMA_RMA_CHACHA20_POLY1305; c <= ERMA_RMA_AES256_GCM; c++) {
        const struct erma_rkey k = sample(c);
        uint8_t b[ERMA_RKEY_PACKED_BYTES];
        struct erma_rkey got;
        assert_int_equal(erma_rkey_pack(&k, b), ERMA_OK);
        assert_int_equal(erma_rkey_unpack(b, sizeof b, &got), ERMA_OK);
        assert_int_equal(got.region, k.region);
        assert_int_equal(got.key_gen, k.key_gen);
        assert_int_equal(got.cipher, c);
        assert_memory_equal(got.kd, k.kd, ERMA_RMA_KEY_BYTES);
    }
}

static void refusals(void **state)
{
    (void)state;
    struct erma_rkey k = sample(ERMA_RMA_CHACHA20_POLY1305), got = sample(0), before = got;
    uint8_t b[ERMA_RKEY_PACKED_BYTES + 1] = {0};
    assert_int_equal(erma_rkey_pack(&k, b), ERMA_OK);
    assert_int_equal(erma_rkey_unpack(b, ERMA_RKEY_PACKED_BYTES - 1, &got), ERMA_EBADPKT);
    assert_int_equal(erma_rkey_unpack(b, ERMA_RKEY_PACKED_BYTES + 1, &got), ERMA_EBADPKT);
    assert_int_equal(erma_rkey_unpack(b, 0, &got), ERMA_EBADPKT);
    b[0] = 2; /* a version this build does not know */
    assert_int_equal(erma_rkey_unpack(b, ERMA_RKEY_PACKED_BYTES, &got), ERMA_EBADPKT);
    b[0] = 0;
    assert_int_equal(erma_rkey_unpack(b, ERMA_RKEY_PACKED_BYTES, &got), ERMA_EBADPKT);
    b[0] = 1;
    b[9] = 2; /* no such cipher */
    assert_int_equal(erma_rkey_unpack(b, ERMA_RKEY_PACKED_BYTES, &got), ERMA_EBADPKT);
    assert_memory_equal(&got, &before, sizeof got); /* untouched by a refusal */
    assert_int_equal(erma_rkey_unpack(NULL, ERMA_RKEY_PACKED_BYTES, &got), ERMA_EINVAL);
    assert_int_equal(erma_rkey_unpack(b, ERMA_RKEY_PACKED_BYTES, NULL), ERMA_EINVAL);
    k.cipher = 7;
    assert_int_equal(erma_rkey_pack(&k, b), ERMA_EINVAL);
    assert_int_equal(erma_rkey_pack(NULL, b), ERMA_EINVAL);
    assert_int_equal(erma_rkey_pack(&k, NULL), ERMA_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(packed_bytes),
        cmocka_unit_test(round_trip),
        cmocka_unit_test(refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
