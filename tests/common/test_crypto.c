/* Known answers of the AEAD and key derivation that rpc's sealed sessions
 * and rma's one-sided ops put on the wire: fixed keys, counters and
 * packets must give these bytes, so a change to the crypto code that
 * changed the wire format fails here. Also: what is sealed opens, a flipped
 * bit or a wrong direction does not, a replayed counter is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "rma/internal.h"
#include "rpc/seal.h"

static void fill(uint8_t *p, size_t n, uint8_t start)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(start + i);
}

/* Fails naming the first differing byte, printing the bytes it got. */
static void assert_hex(const uint8_t *got, size_t n, const char *want)
{
    char hex[2 * 256 + 1] = "";
    assert_true(n <= 256);
    for (size_t i = 0; i < n; i++)
        snprintf(hex + 2 * i, 3, "%02x", got[i]);
    if (strcmp(hex, want) != 0)
        fail_msg("got  %s\nwant %s", hex, want);
}

static const uint8_t data[] = "hello, erma";

/* A session's packet sealed by the client, opened by the server. */
static void rpc_session(bool aes, const char *want)
{
    uint8_t psk[ERMA_PSK_BYTES], accept[40], pkt[ERMA_HDR_SIZE + sizeof data + ERMA_SEAL_OVERHEAD];
    fill(psk, sizeof psk, 1);
    fill(accept, sizeof accept, 100);
    fill(pkt, ERMA_HDR_SIZE, 200);
    struct seal client = {0}, server = {0};
    assert_int_equal(erma__seal_start(&client, psk, accept, sizeof accept, true, aes), ERMA_OK);
    assert_int_equal(erma__seal_start(&server, psk, accept, sizeof accept, false, aes), ERMA_OK);
    uint8_t again[sizeof pkt]; /* sealed in place: counter 2 */
    erma__seal(&client, pkt, data, sizeof data, pkt);
    fill(again, ERMA_HDR_SIZE, 200);
    memcpy(again + ERMA_HDR_SIZE, data, sizeof data);
    const uint32_t n = erma__seal(&client, again, again + ERMA_HDR_SIZE, sizeof data, again);
    assert_int_equal(n, sizeof again);
    assert_hex(again, n, want);
    uint32_t len = n;
    uint8_t bad[sizeof again];
    memcpy(bad, again, n);
    bad[ERMA_HDR_SIZE + 3] ^= 0x10;
    assert_int_equal(erma__seal_open(&server, bad, &len), ERMA_EAUTH);
    len = n;
    uint8_t copy[sizeof again];
    memcpy(copy, again, n);
    assert_int_equal(erma__seal_open(&server, again, &len), ERMA_OK);
    assert_int_equal(len, ERMA_HDR_SIZE + sizeof data);
    assert_memory_equal(again + ERMA_HDR_SIZE, data, sizeof data);
    len = n;
    assert_int_equal(erma__seal_open(&server, copy, &len), ERMA_EAGAIN); /* replay */
    erma__seal_end(&client);
    erma__seal_end(&server);
}

static void rpc_chacha(void **state)
{
    (void)state;
    rpc_session(false, "c8c9cacbcccdcecfd0d1d2d3d4d5d6d784d913d069feefe8100719db02000000"
                       "00000000f06219e901014cb50ffa251ea34df361");
}

static void rpc_aes(void **state)
{
    (void)state;
    if (!erma__crypto_aes_available()) {
        printf("skipped: no AES-NI on this CPU, AES-256-GCM is not offered\n");
        skip();
    }
    rpc_session(true, "c8c9cacbcccdcecfd0d1d2d3d4d5d6d7bbc94d412eef033a502a8a4202000000"
                      "00000000af6446e1e6a1d9988c1e7682f8e316ec");
}

static void rpc_proofs(void **state)
{
    (void)state;
    uint8_t psk[ERMA_PSK_BYTES], payload[48], proof[ERMA_PROOF_BYTES];
    fill(psk, sizeof psk, 1);
    fill(payload, sizeof payload, 50);
    erma__seal_proof(psk, SEAL_CONNECT, payload, sizeof payload, proof);
    assert_hex(proof, sizeof proof, "3a6a323ff73b297e7bd92b9abef951b0");
    assert_true(erma__seal_proof_ok(psk, SEAL_CONNECT, payload, sizeof payload, proof));
    assert_false(erma__seal_proof_ok(psk, SEAL_ACCEPT, payload, sizeof payload, proof));
    payload[7] ^= 1;
    assert_false(erma__seal_proof_ok(psk, SEAL_CONNECT, payload, sizeof payload, proof));
}

static void rma_kdf(void **state)
{
    (void)state;
    uint8_t kr[ERMA_RMA_KEY_BYTES], kd[ERMA_RMA_KEY_BYTES];
    fill(kr, sizeof kr, 9);
    struct erma_addr a = {.len = 6};
    fill(a.raw, a.len, 77);
    erma__rma_kdf(kr, 0x0123456789abcdefull, &a, kd);
    assert_hex(kd, sizeof kd, "3bf99a2ea4da4587c40312c65c5d865a5d4f71fb14770d236044cb17d98d233c");
}

/* An op packet sealed target to initiator (dir 1) with cipher. */
static void rma_op(uint8_t cipher, const char *want)
{
    uint8_t kd[ERMA_RMA_KEY_BYTES], pkt[RMA_OVERHEAD + sizeof data], m[sizeof data];
    fill(kd, sizeof kd, 33);
    fill(pkt, ERMA_HDR_SIZE + RMA_OPHDR, 150);
    erma__rma_seal_as(kd, cipher, 1, 7, pkt, data, sizeof data);
    assert_hex(pkt + ERMA_HDR_SIZE + RMA_OPHDR, sizeof data + RMA_TAG, want);
    assert_int_equal(erma__rma_open_as(kd, cipher, 1, 7, pkt, sizeof pkt, m), 0);
    assert_memory_equal(m, data, sizeof data);
    assert_int_not_equal(erma__rma_open_as(kd, cipher, 0, 7, pkt, sizeof pkt, m), 0);
    assert_int_not_equal(erma__rma_open_as(kd, cipher, 1, 8, pkt, sizeof pkt, m), 0);
    pkt[5] ^= 4; /* the headers are authenticated */
    assert_int_not_equal(erma__rma_open_as(kd, cipher, 1, 7, pkt, sizeof pkt, m), 0);
}

static void rma_chacha(void **state)
{
    (void)state;
    rma_op(ERMA_RMA_CHACHA20_POLY1305, "54cc6e425d57e8a22d2c2dc05cdc440d3d4e89c7c5c80b097b70cc86");
}

static void rma_aes(void **state)
{
    (void)state;
    if (!erma__crypto_aes_available()) {
        printf("skipped: no AES-NI on this CPU, AES-256-GCM is not offered\n");
        skip();
    }
    rma_op(ERMA_RMA_AES256_GCM, "865a2fa344b9e417c011e086d4a8550ac31480b1a80efdc55ac87854");
}

int main(void)
{
    assert_true(erma__crypto_init());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rpc_chacha), cmocka_unit_test(rpc_aes), cmocka_unit_test(rpc_proofs),
        cmocka_unit_test(rma_kdf),    cmocka_unit_test(rma_chacha), cmocka_unit_test(rma_aes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
