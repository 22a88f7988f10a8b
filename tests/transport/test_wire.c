/* transport/wire.c: the 16-byte header codec and its validity check. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "erma/errors.h"
#include "erma/sdk/rand.h"
#include "erma/sdk/wire.h"

static struct erma_hdr random_hdr(struct erma_rand *r)
{
    struct erma_hdr h = {.req_type = (uint8_t)erma_rand_u64(r),
                             .msg_size = (uint32_t)erma_rand_below(r, ERMA_MAX_MSG_SIZE + 1),
                             .dest_session = (uint16_t)erma_rand_u64(r),
                             .pkt_type = (uint8_t)erma_rand_below(r, 4),
                             .pkt_num = (uint16_t)erma_rand_below(r, ERMA_MAX_PKT_NUM + 1),
                             .req_num = erma_rand_u64(r) & ERMA_MAX_REQ_NUM,
                             .proto = (uint8_t)(1 + erma_rand_below(r, 3))};
    if (h.proto == ERMA_PROTO_RPC && (h.pkt_type == ERMA_PKT_CR || h.pkt_type == ERMA_PKT_RESP))
        h.host_delay = (uint16_t)erma_rand_below(r, 4096);
    return h;
}

static void assert_hdr_equal(const struct erma_hdr *a, const struct erma_hdr *b)
{
    assert_int_equal(a->req_type, b->req_type);
    assert_int_equal(a->msg_size, b->msg_size);
    assert_int_equal(a->dest_session, b->dest_session);
    assert_int_equal(a->pkt_type, b->pkt_type);
    assert_int_equal(a->pkt_num, b->pkt_num);
    assert_int_equal(a->req_num, b->req_num);
    assert_int_equal(a->proto, b->proto);
    assert_int_equal(a->host_delay, b->host_delay);
}

static void test_round_trip(void **state)
{
    (void)state;
    struct erma_rand r;
    erma_rand_seed(&r, 1);
    uint8_t buf[ERMA_HDR_SIZE];
    for (int i = 0; i < 100000; i++) {
        const struct erma_hdr h = random_hdr(&r);
        struct erma_hdr d;
        erma_hdr_encode(&h, buf);
        assert_int_equal(erma_hdr_check(buf, sizeof buf, &d), ERMA_OK);
        assert_hdr_equal(&h, &d);
    }
    const struct erma_hdr max = {0xff, ERMA_MAX_MSG_SIZE, 0xffff, 3, ERMA_MAX_PKT_NUM,
                                 ERMA_MAX_REQ_NUM, ERMA_PROTO_RPC, 0xfff};
    struct erma_hdr d;
    erma_hdr_encode(&max, buf);
    assert_int_equal(erma_hdr_check(buf, sizeof buf, &d), ERMA_OK);
    assert_hdr_equal(&max, &d);
}

/* The layout of wire.h, computed by hand for one header. */
static void test_layout(void **state)
{
    (void)state;
    const struct erma_hdr h = {.req_type = 0x12, .msg_size = 0x345678, .dest_session = 0x9abc,
                               .pkt_type = 2, .pkt_num = 0x1234, .req_num = 0xabcdef01234,
                               .proto = ERMA_PROTO_RPC};
    /* word 0 = 0x12 | 0x345678 << 8 | 0x9abc << 32 | 2 << 48 | 0x1234 << 50
     *        = 0x48d2_9abc_3456_7812; word 1 = 0xabcdef01234 | 0xE << 44 | 1 << 48 */
    const uint8_t want[16] = {0x12, 0x78, 0x56, 0x34, 0xbc, 0x9a, 0xd2, 0x48,
                              0x34, 0x12, 0xf0, 0xde, 0xbc, 0xea, 0x01, 0x00};
    uint8_t buf[16];
    erma_hdr_encode(&h, buf);
    assert_memory_equal(buf, want, 16);
}

static void test_masking(void **state)
{
    (void)state;
    const struct erma_hdr wide = {.msg_size = 0xff000001, .pkt_type = 7, .pkt_num = 0xffff,
                                  .req_num = UINT64_MAX, .proto = 0xf1};
    uint8_t buf[16];
    struct erma_hdr d;
    erma_hdr_encode(&wide, buf);
    erma_hdr_decode(buf, &d);
    assert_int_equal(d.msg_size, 1);
    assert_int_equal(d.pkt_type, 3);
    assert_int_equal(d.pkt_num, ERMA_MAX_PKT_NUM);
    assert_int_equal(d.req_num, ERMA_MAX_REQ_NUM);
    assert_int_equal(d.proto, 1);
}

static void test_rejects(void **state)
{
    (void)state;
    const struct erma_hdr h = {.req_type = 1, .msg_size = 100, .proto = ERMA_PROTO_RPC};
    uint8_t good[16], bad[16];
    struct erma_hdr d;
    erma_hdr_encode(&h, good);
    assert_int_equal(erma_hdr_check(NULL, 16, &d), ERMA_EBADPKT);
    for (size_t len = 0; len < ERMA_HDR_SIZE; len++) {
        uint8_t *p = malloc(len ? len : 1); /* exactly len: ASan sees any over-read */
        memcpy(p, good, len);
        assert_int_equal(erma_hdr_check(p, len, &d), ERMA_EBADPKT);
        free(p);
    }
    memcpy(bad, good, 16);
    bad[13] ^= 0x10; /* magic */
    assert_int_equal(erma_hdr_check(bad, 16, &d), ERMA_EBADPKT);
    memcpy(bad, good, 16);
    bad[15] |= 0x80; /* a host delay in a request */
    assert_int_equal(erma_hdr_check(bad, 16, &d), ERMA_EBADPKT);
    struct erma_hdr answer = h;
    answer.pkt_type = ERMA_PKT_CR;
    answer.host_delay = 0x123;
    erma_hdr_encode(&answer, bad);
    assert_int_equal(erma_hdr_check(bad, 16, &d), ERMA_OK);
    assert_int_equal(d.host_delay, 0x123);
    erma_hdr_set_delay(bad, 0xabc);
    assert_int_equal(erma_hdr_check(bad, 16, &d), ERMA_OK);
    assert_int_equal(d.host_delay, 0xabc);
    assert_int_equal(d.proto, ERMA_PROTO_RPC);
    answer.proto = ERMA_PROTO_SM; /* not an RPC answer: no host delay */
    erma_hdr_encode(&answer, bad);
    assert_int_equal(erma_hdr_check(bad, 16, &d), ERMA_EBADPKT);
    answer.proto = ERMA_PROTO_RMA; /* a one-sided target's answer says its delay */
    answer.pkt_type = ERMA_PKT_REQ;
    erma_hdr_encode(&answer, bad);
    assert_int_equal(erma_hdr_check(bad, 16, &d), ERMA_OK);
    assert_int_equal(d.host_delay, 0x123);
    memcpy(bad, good, 16);
    bad[14] = (uint8_t)((bad[14] & 0xf0) | 0x0); /* proto 0 */
    assert_int_equal(erma_hdr_check(bad, 16, &d), ERMA_EBADPKT);
    bad[14] = (uint8_t)((bad[14] & 0xf0) | 0x4); /* proto 4 */
    assert_int_equal(erma_hdr_check(bad, 16, &d), ERMA_EBADPKT);
    struct erma_hdr big = h;
    big.msg_size = ERMA_MAX_MSG_SIZE + 1;
    erma_hdr_encode(&big, bad);
    assert_int_equal(erma_hdr_check(bad, 16, &d), ERMA_EBADPKT);
    assert_int_equal(erma_hdr_check(good, 16, &d), ERMA_OK);
}

/* host_delay's codec: exact below 32 us, within 1/128 above, saturating. */
static void test_delay_codec(void **state)
{
    (void)state;
    assert_int_equal(erma_delay_encode(0), 0);
    assert_int_equal(erma_delay_decode(erma_delay_encode(127)), 0);
    assert_int_equal(erma_delay_decode(erma_delay_encode(5000)), 4992); /* 39 x 128 */
    assert_int_equal(erma_delay_decode(erma_delay_encode(32639)), 32640 - 128);
    const uint64_t ms = 7000000, back = erma_delay_decode(erma_delay_encode(ms));
    assert_true(back <= ms && ms - back <= ms / 128);
    const uint64_t worst = 66047, wb = erma_delay_decode(erma_delay_encode(worst));
    assert_true(wb <= worst && worst - wb < 128 + worst / 128 && worst - wb > worst / 256);
    assert_int_equal(erma_delay_encode(UINT64_MAX), 0xfff);
    assert_int_equal(erma_delay_decode(0xfff), (uint64_t)255 << 15 << 7);
}

/* Random bytes of random lengths: whatever is accepted re-encodes to itself. */
static void test_fuzz(void **state)
{
    (void)state;
    struct erma_rand r;
    erma_rand_seed(&r, 99);
    unsigned accepted = 0;
    for (int i = 0; i < 1000000; i++) {
        const size_t len = (size_t)erma_rand_below(&r, 65);
        uint8_t *p = malloc(len ? len : 1);
        for (size_t k = 0; k < len; k++)
            p[k] = (uint8_t)erma_rand_u64(&r);
        if (len >= ERMA_HDR_SIZE && i % 4 == 0) { /* give some the magic and proto */
            p[13] = (uint8_t)((p[13] & 0x0f) | 0xe0);
            p[14] = (uint8_t)(1 + i % 3);
            p[15] = 0;
        }
        struct erma_hdr d;
        if (erma_hdr_check(p, len, &d) == ERMA_OK) {
            uint8_t again[16];
            erma_hdr_encode(&d, again);
            assert_memory_equal(again, p, 16);
            accepted++;
        }
        free(p);
    }
    print_message("  %u of 1000000 random buffers were valid headers\n", accepted);
    assert_true(accepted > 10000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip), cmocka_unit_test(test_layout),
        cmocka_unit_test(test_delay_codec),
        cmocka_unit_test(test_masking),    cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_fuzz),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
