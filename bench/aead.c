/*
 * bench/aead.c - what erma's AEAD costs on this CPU: libsodium's
 * AES-256-GCM (with the key schedule computed once, as erma keeps it) and
 * ChaCha20-Poly1305 (IETF), sealing and opening with a detached tag, by
 * payload size, with the associated data of a one-sided packet (88 bytes)
 * or of an RPC packet (16). Each figure is the median over --rounds of a
 * --seconds run of one call after another on one core; GB/s counts the
 * payload only.
 *
 * Why: every one-sided READ's data is sealed once by its target and opened
 * once by its initiator, each on its own event loop's core, so a READ
 * stream moves at most this many bytes a second per core, whatever else
 * the loops do (docs/PERFORMANCE.md, One-sided operations).
 */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "erma/clock.h"

static const char usage[] =
    "usage: aead [options]\n"
    "  libsodium AEAD cost by payload size, one core (bench/aead.c)\n"
    "  --sizes LIST   payload sizes (default 32,128,1400,4096,8192)\n"
    "  --ad B         associated data bytes (default 88, a one-sided packet's;\n"
    "                 an RPC packet's is 16)\n"
    "  --seconds T    per measurement (default 0.3)\n"
    "  --rounds N     medians over N rounds (default 3)\n"
    "  --cpu LIST     pin to the first CPU\n"
    "  --csv          CSV instead of the table\n"
    "  -h, --help     this text\n";

enum { OPT_AD = 1, OPT_SECONDS, OPT_ROUNDS };
#define MAX_PAYLOAD 65536
#define MAX_AD 256
#define MAX_ROUNDS 99

struct aead_cfg {
    crypto_aead_aes256gcm_state *aes; /* NULL: ChaCha20-Poly1305 */
    uint8_t key[crypto_aead_chacha20poly1305_ietf_KEYBYTES];
    uint8_t ad[MAX_AD];
    size_t adlen;
};

static void seal(const struct aead_cfg *a, const uint8_t *n, const uint8_t *m, size_t len,
                 uint8_t *c, uint8_t *tag)
{
    if (a->aes)
        crypto_aead_aes256gcm_encrypt_detached_afternm(c, tag, NULL, m, len, a->ad, a->adlen,
                                                       NULL, n, a->aes);
    else
        crypto_aead_chacha20poly1305_ietf_encrypt_detached(c, tag, NULL, m, len, a->ad,
                                                           a->adlen, NULL, n, a->key);
}

static int open_(const struct aead_cfg *a, const uint8_t *n, const uint8_t *c, size_t len,
                 const uint8_t *tag, uint8_t *m)
{
    if (a->aes)
        return crypto_aead_aes256gcm_decrypt_detached_afternm(m, NULL, c, len, tag, a->ad,
                                                              a->adlen, n, a->aes);
    return crypto_aead_chacha20poly1305_ietf_decrypt_detached(m, NULL, c, len, tag, a->ad,
                                                              a->adlen, n, a->key);
}

/* Calls of one kind for `seconds`: ns per call. Opening checks every tag
 * (a failure ends the program: the benchmark would measure nothing). */
static double run(const struct aead_cfg *a, bool opening, size_t len, double seconds)
{
    static uint8_t m[MAX_PAYLOAD], c[MAX_PAYLOAD], out[MAX_PAYLOAD];
    uint8_t n[crypto_aead_aes256gcm_NPUBBYTES] = {0}, tag[crypto_aead_aes256gcm_ABYTES];
    randombytes_buf(m, len);
    seal(a, n, m, len, c, tag);
    uint64_t calls = 0;
    const uint64_t t0 = erma_now_ns(), end = t0 + (uint64_t)(seconds * 1e9);
    uint64_t t = t0;
    do {
        for (int i = 0; i < 64; i++, calls++) {
            if (!opening) {
                n[0] = (uint8_t)calls;
                seal(a, n, m, len, out, tag);
            } else if (open_(a, n, c, len, tag, out) != 0) {
                fprintf(stderr, "aead: an authentic packet failed to open\n");
                exit(1);
            }
        }
        t = erma_now_ns();
    } while (t < end);
    return (double)(t - t0) / (double)calls;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {BENCH_COMMON_OPTIONS,
                                         {"ad", 1, 0, OPT_AD},
                                         {"seconds", 1, 0, OPT_SECONDS},
                                         {"rounds", 1, 0, OPT_ROUNDS},
                                         {0, 0, 0, 0}};
    struct bench_cli cli;
    bench_cli_init(&cli, "aead", usage, opts);
    double seconds = 0.3;
    uint64_t rounds = 3, adlen = 88;
    for (int o; (o = bench_cli_next(&cli, argc, argv)) != -1;) {
        if (o == OPT_AD)
            adlen = bench_cli_u64(&cli, optarg);
        else if (o == OPT_SECONDS)
            seconds = bench_cli_real(&cli, optarg);
        else if (o == OPT_ROUNDS)
            rounds = bench_cli_u64(&cli, optarg);
    }
    if (adlen > MAX_AD || rounds < 1 || rounds > MAX_ROUNDS || !(seconds > 0 && seconds <= 60))
        bench_cli_fail(&cli, "--ad at most %d, --rounds 1..%d, --seconds in (0, 60]", MAX_AD,
                       MAX_ROUNDS);
    static const uint32_t defaults[] = {32, 128, 1400, 4096, 8192};
    const uint32_t *sizes = cli.nsizes ? cli.sizes : defaults;
    const unsigned nsizes = cli.nsizes ? cli.nsizes : 5;
    for (unsigned i = 0; i < nsizes; i++)
        if (sizes[i] == 0 || sizes[i] > MAX_PAYLOAD)
            bench_cli_fail(&cli, "sizes 1..%d", MAX_PAYLOAD);
    if (sodium_init() < 0) {
        fprintf(stderr, "aead: libsodium cannot start (sodium_init)\n");
        return 1;
    }
    bench_pin(bench_cli_cpu(&cli, 0));
    static struct aead_cfg ciphers[2];
    crypto_aead_aes256gcm_state *st = sodium_malloc(sizeof *st);
    const bool aes = crypto_aead_aes256gcm_is_available() && st;
    for (int k = 0; k < 2; k++) {
        randombytes_buf(ciphers[k].key, sizeof ciphers[k].key);
        randombytes_buf(ciphers[k].ad, adlen);
        ciphers[k].adlen = adlen;
    }
    if (aes) {
        crypto_aead_aes256gcm_beforenm(st, ciphers[0].key);
        ciphers[0].aes = st;
    } else {
        bench_note(cli.csv, "aead: no AES-256-GCM on this CPU (AES-NI and CLMUL): ChaCha20 only");
    }
    bench_note(cli.csv, "aead: libsodium %s, %llu B of associated data, medians of %llu rounds "
               "of %.2f s", sodium_version_string(), (unsigned long long)adlen,
               (unsigned long long)rounds, seconds);
    struct bench_table t;
    bench_table_start(&t, cli.csv, "bench,cipher,size,seal_ns,open_ns,seal_GBps,open_GBps");
    for (int k = aes ? 0 : 1; k < 2; k++)
        for (unsigned i = 0; i < nsizes; i++) {
            double s[MAX_ROUNDS], o[MAX_ROUNDS];
            for (unsigned r = 0; r < rounds; r++) { /* seal and open take turns */
                s[r] = run(&ciphers[k], false, sizes[i], seconds);
                o[r] = run(&ciphers[k], true, sizes[i], seconds);
            }
            const double sn = bench_median(s, (unsigned)rounds);
            const double on = bench_median(o, (unsigned)rounds);
            bench_table_row(&t, "aead,%s,%u,%.0f,%.0f,%.2f,%.2f", k ? "chacha20" : "aes256gcm",
                            sizes[i], sn, on, sizes[i] / sn, sizes[i] / on);
        }
    sodium_free(st);
    return 0;
}
