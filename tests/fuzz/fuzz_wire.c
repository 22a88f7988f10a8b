/*
 * fuzz_wire: the 16-byte erma header codec (transport/wire.c) and the
 * 56-byte one-sided op header codec (rma/engine.c) on arbitrary bytes.
 *
 * The input is taken three ways:
 *   1. as a received packet: erma_hdr_check() on the whole input and on
 *      every prefix of up to 24 bytes (it must read nothing past len:
 *      each prefix is its own exact-size heap copy, which ASan watches).
 *      An accepted header re-encodes to exactly its 16 bytes, and check
 *      accepts exactly what docs/PROTOCOL.md says (length, magic, proto
 *      1..3, msg_size <= 8 MiB, a host_delay only in an RPC CR or RESP or
 *      a one-sided packet).
 *   2. as raw header bytes: decode then encode gives the same word 0 and
 *      the same word 1 with the magic set;
 *      decoding that again gives the same fields.
 *   3. as field values: a struct erma_hdr filled from the first 19 bytes
 *      (values wider than their wire fields included) encodes to fields
 *      that decode to the values masked to their widths, and check accepts
 *      the encoding exactly when the masked proto and msg_size are valid.
 * Bytes 16..72 (when present) also go through the op header codec:
 * decode then encode is the identity on those 56 bytes.
 * The input, and its first ERMA_RKEY_PACKED_BYTES bytes with byte 0 set to
 * the version, also go to erma_rkey_unpack(): it accepts exactly a packed
 * key of the right length, version and cipher, which packs again to the
 * same bytes, and refuses anything else with ERMA_EBADPKT. The whole input
 * also goes to the key service's request and answer decoders (keys/msg.h):
 * ERMA_OK or ERMA_EBADPKT (an answer: or its error code), never a read past
 * the input, and a request they accept encodes again to the same bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "erma/errors.h"
#include "erma/rma.h"
#include "erma/sdk/wire.h"
#include "fuzz.h"
#include "keys/msg.h"
#include "rma/internal.h"

static uint64_t word(const uint8_t *p)
{
    return erma_get_le(p, 8);
}

static bool hdr_eq(const struct erma_hdr *a, const struct erma_hdr *b)
{
    return a->req_type == b->req_type && a->msg_size == b->msg_size &&
           a->dest_session == b->dest_session && a->pkt_type == b->pkt_type &&
           a->pkt_num == b->pkt_num && a->req_num == b->req_num && a->proto == b->proto &&
           a->host_delay == b->host_delay;
}

/* Which packets docs/PROTOCOL.md lets carry a host_delay: an RPC credit
 * return or response, or any one-sided packet. */
static bool may_delay(uint64_t proto, uint64_t pkt_type)
{
    return proto == ERMA_PROTO_RMA ||
           (proto == ERMA_PROTO_RPC && (pkt_type == ERMA_PKT_CR || pkt_type == ERMA_PKT_RESP));
}

/* What docs/PROTOCOL.md says erma_hdr_check() accepts. */
static bool valid_by_spec(const uint8_t *p, size_t len)
{
    if (len < ERMA_HDR_SIZE)
        return false;
    const uint64_t w0 = word(p), w1 = word(p + 8);
    const uint64_t msg_size = (w0 >> 8) & 0xffffff, magic = (w1 >> 44) & 0xf;
    const uint64_t proto = (w1 >> 48) & 0xf, delay = w1 >> 52, pkt_type = (w0 >> 48) & 3;
    return magic == ERMA_HDR_MAGIC && (delay == 0 || may_delay(proto, pkt_type)) &&
           proto >= 1 && proto <= 3 && msg_size <= ERMA_MAX_MSG_SIZE;
}

static void check_received(const uint8_t *data, size_t size)
{
    struct erma_hdr h;
    const int rc = erma_hdr_check(data, size, &h);
    FUZZ_CHECK((rc == ERMA_OK) == valid_by_spec(data, size), "check says %d", rc);
    FUZZ_CHECK(rc == ERMA_OK || rc == ERMA_EBADPKT, "check returned %d", rc);
    if (rc == ERMA_OK) {
        uint8_t again[ERMA_HDR_SIZE];
        erma_hdr_encode(&h, again);
        FUZZ_CHECK(memcmp(again, data, ERMA_HDR_SIZE) == 0, "accepted header re-encodes");
    }
    FUZZ_CHECK(erma_hdr_check(NULL, size, &h) == ERMA_EBADPKT, "NULL packet");
    for (size_t len = 0; len <= size && len <= 24; len++) {
        uint8_t *copy = malloc(len ? len : 1);
        FUZZ_CHECK(copy != NULL, "malloc");
        memcpy(copy, data, len);
        const int r = erma_hdr_check(copy, len, &h);
        FUZZ_CHECK((r == ERMA_OK) == valid_by_spec(copy, len), "prefix %zu: %d", len, r);
        free(copy);
    }
}

static void check_raw(const uint8_t *data, size_t size)
{
    if (size < ERMA_HDR_SIZE)
        return;
    struct erma_hdr h, h2;
    uint8_t enc[ERMA_HDR_SIZE];
    erma_hdr_decode(data, &h);
    erma_hdr_encode(&h, enc);
    const uint64_t w1 = (word(data + 8) & ((UINT64_C(1) << 44) - 1)) |
                        (uint64_t)ERMA_HDR_MAGIC << 44 | (word(data + 8) & ~UINT64_C(0) << 48);
    FUZZ_CHECK(word(enc) == word(data), "word 0 round trip");
    FUZZ_CHECK(word(enc + 8) == w1, "word 1 round trip");
    erma_hdr_decode(enc, &h2);
    FUZZ_CHECK(hdr_eq(&h, &h2), "decode(encode(decode(x))) == decode(x)");
}

static void check_fields(const uint8_t *data, size_t size)
{
    if (size < 19)
        return;
    const struct erma_hdr h = {.req_type = data[0],
                               .msg_size = (uint32_t)erma_get_le(data + 1, 4),
                               .dest_session = (uint16_t)erma_get_le(data + 5, 2),
                               .pkt_type = data[7],
                               .pkt_num = (uint16_t)erma_get_le(data + 8, 2),
                               .req_num = erma_get_le(data + 10, 8),
                               .proto = data[18],
                               .host_delay = (uint16_t)erma_get_le(data + 11, 2)};
    const struct erma_hdr want = {.req_type = h.req_type,
                                  .msg_size = h.msg_size & 0xffffff,
                                  .dest_session = h.dest_session,
                                  .pkt_type = h.pkt_type & 3,
                                  .pkt_num = h.pkt_num & ERMA_MAX_PKT_NUM,
                                  .req_num = h.req_num & ERMA_MAX_REQ_NUM,
                                  .proto = h.proto & 0xf,
                                  .host_delay = h.host_delay & 0xfff};
    uint8_t enc[ERMA_HDR_SIZE];
    struct erma_hdr got, checked;
    erma_hdr_encode(&h, enc);
    erma_hdr_decode(enc, &got);
    FUZZ_CHECK(hdr_eq(&got, &want), "fields masked to their widths");
    const bool ok = want.proto >= 1 && want.proto <= 3 && want.msg_size <= ERMA_MAX_MSG_SIZE &&
                    (want.host_delay == 0 || may_delay(want.proto, want.pkt_type));
    const int rc = erma_hdr_check(enc, sizeof enc, &checked);
    FUZZ_CHECK((rc == ERMA_OK) == ok, "check of an encoded header: %d", rc);
    FUZZ_CHECK(rc != ERMA_OK || hdr_eq(&checked, &want), "check decodes the fields");
}

/* host_delay's codec: rounds down, within 1/128 (and 128 ns), saturates. */
static void check_delay(const uint8_t *data, size_t size)
{
    if (size < 8)
        return;
    const uint64_t ns = erma_get_le(data, 8) >> (data[0] & 63);
    const uint16_t d = erma_delay_encode(ns);
    const uint64_t back = erma_delay_decode(d);
    FUZZ_CHECK(d < 4096, "12 bits");
    FUZZ_CHECK(erma_delay_encode(back) == d, "decode then encode is stable");
    if (ns < erma_delay_decode(0xfff)) {
        FUZZ_CHECK(back <= ns, "rounds down: %llu > %llu", (unsigned long long)back,
                   (unsigned long long)ns);
        FUZZ_CHECK(ns - back < 128 + ns / 128, "within 1/128: %llu for %llu",
                   (unsigned long long)back, (unsigned long long)ns);
    } else {
        FUZZ_CHECK(d == 0xfff, "saturates");
    }
}

static void check_ophdr(const uint8_t *data, size_t size)
{
    if (size < ERMA_HDR_SIZE + RMA_OPHDR)
        return;
    struct rma_ophdr o;
    uint8_t enc[RMA_OPHDR];
    erma__rma_ophdr_decode(data + ERMA_HDR_SIZE, &o);
    erma__rma_ophdr_encode(&o, enc);
    FUZZ_CHECK(memcmp(enc, data + ERMA_HDR_SIZE, RMA_OPHDR) == 0, "op header round trip");
}

static void check_rkey_at(const uint8_t *in, size_t size)
{
    struct erma_rkey k;
    const int rc = erma_rkey_unpack(in, size, &k);
    const bool valid = size == ERMA_RKEY_PACKED_BYTES && in[0] == 1 && in[9] <= 1;
    FUZZ_CHECK(rc == (valid ? ERMA_OK : ERMA_EBADPKT), "rkey unpack says %d", rc);
    if (rc == ERMA_OK) {
        uint8_t again[ERMA_RKEY_PACKED_BYTES];
        FUZZ_CHECK(erma_rkey_pack(&k, again) == ERMA_OK, "an unpacked key packs");
        FUZZ_CHECK(memcmp(again, in, sizeof again) == 0, "rkey round trip");
    }
}

static void check_rkey(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1); /* exact size: ASan sees overreads */
    FUZZ_CHECK(copy != NULL, "malloc");
    memcpy(copy, data, size);
    check_rkey_at(copy, size);
    if (size >= ERMA_RKEY_PACKED_BYTES) {
        copy[0] = 1;
        check_rkey_at(copy, ERMA_RKEY_PACKED_BYTES);
    }
    free(copy);
}

static void check_keys_msgs(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1);
    FUZZ_CHECK(copy != NULL, "malloc");
    memcpy(copy, data, size);
    struct erma__keys_req r;
    int rc = erma__keys_req_decode(copy, size, &r);
    FUZZ_CHECK(rc == ERMA_OK || rc == ERMA_EBADPKT, "keys request: %d", rc);
    if (rc == ERMA_OK) {
        char name[ERMA_KEYS_NAME_MAX + 1] = {0};
        uint8_t again[ERMA__KEYS_REQ_MAX];
        memcpy(name, r.name, r.name_len);
        FUZZ_CHECK(erma__keys_req_encode(r.identity, name, again) == (int)size, "size");
        FUZZ_CHECK(memcmp(again, copy, size) == 0, "keys request round trip");
    }
    struct erma_rkey k;
    const uint8_t *info;
    size_t info_len;
    rc = erma__keys_answer_decode(copy, size, &k, &info, &info_len);
    FUZZ_CHECK(rc <= 0 && rc > ERMA_ERR_LAST, "keys answer: %d", rc);
    if (rc == ERMA_OK)
        FUZZ_CHECK(info >= copy && info + info_len == copy + size, "info inside the answer");
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_received(data, size);
    check_raw(data, size);
    check_fields(data, size);
    check_ophdr(data, size);
    check_delay(data, size);
    check_rkey(data, size);
    check_keys_msgs(data, size);
    return 0;
}

/* ---- seeds: headers of every kind the protocol sends ---- */

static size_t seed_hdr(uint8_t *buf, uint8_t type, uint32_t msg_size, uint16_t dest,
                       uint8_t pkt_type, uint16_t pkt_num, uint64_t req_num, uint8_t proto)
{
    const struct erma_hdr h = {type, msg_size, dest, pkt_type, pkt_num, req_num, proto, 0};
    erma_hdr_encode(&h, buf);
    return ERMA_HDR_SIZE;
}

int fuzz_write_seeds(const char *dir)
{
    uint8_t buf[ERMA_HDR_SIZE + RMA_OPHDR + 16] = {0};
    int n = 0;
    seed_hdr(buf, 1, 32, 0, ERMA_PKT_REQ, 0, 8, ERMA_PROTO_RPC);
    n += fuzz_save(dir, "rpc_req", buf, ERMA_HDR_SIZE);
    seed_hdr(buf, 1, 3000, 2, ERMA_PKT_CR, 1, 0x123456789ab, ERMA_PROTO_RPC);
    n += fuzz_save(dir, "rpc_cr", buf, ERMA_HDR_SIZE);
    erma_hdr_set_delay(buf, erma_delay_encode(123456));
    n += fuzz_save(dir, "rpc_cr_delay", buf, ERMA_HDR_SIZE);
    seed_hdr(buf, 1, 0, 2, ERMA_PKT_RFR, 3, ERMA_MAX_REQ_NUM, ERMA_PROTO_RPC);
    n += fuzz_save(dir, "rpc_rfr", buf, ERMA_HDR_SIZE);
    seed_hdr(buf, 255, ERMA_MAX_MSG_SIZE, 0xfffe, ERMA_PKT_RESP, ERMA_MAX_PKT_NUM, 9,
             ERMA_PROTO_RPC);
    n += fuzz_save(dir, "rpc_resp_max", buf, ERMA_HDR_SIZE);
    seed_hdr(buf, 1, 0, 0xffff, 0, 0, 0, ERMA_PROTO_SM);
    n += fuzz_save(dir, "sm_connect", buf, ERMA_HDR_SIZE + 29);
    seed_hdr(buf, 0, 0, 0, 0, 0, 0, ERMA_PROTO_RMA);
    struct rma_ophdr o = {.type = 1, .slot = 3, .region = 1 << 16 | 1, .key_gen = 1,
                          .offset = 4096, .identity = 1001, .init_ctr = 1ull << 60,
                          .len = 4096, .nonce_ctr = (1ull << 60) + 1};
    erma__rma_ophdr_encode(&o, buf + ERMA_HDR_SIZE);
    n += fuzz_save(dir, "rma_read_req", buf, sizeof buf);
    n += fuzz_save(dir, "short", buf, 9);
    const struct erma_rkey k = {.region = 1 << 16 | 1, .key_gen = 3, .cipher = 1,
                                .kd = {0x5a, 1, 2, 3}};
    uint8_t rk[ERMA_RKEY_PACKED_BYTES];
    erma_rkey_pack(&k, rk);
    n += fuzz_save(dir, "rkey", rk, sizeof rk);
    uint8_t msg[ERMA__KEYS_ANSWER_MAX];
    n += fuzz_save(dir, "keys_req", msg, (size_t)erma__keys_req_encode(1001, "table", msg));
    n += fuzz_save(dir, "keys_answer", msg,
                   erma__keys_answer_encode(ERMA_OK, &k, (const uint8_t *)"geometry", 8, msg));
    return n;
}
