/*
 * fuzz_bundle: the bundle reader and writer (erma/sdk/bundle.h) that udp
 * uses to put small packets into one datagram and split them again.
 *
 * The input is taken two ways:
 *   1. as a received datagram, in an exact-size heap copy (ASan watches
 *      every read): erma_bundle_open() accepts exactly a header with the
 *      magic, proto ERMA_PROTO_BUNDLE, a count above 0 and every other
 *      field zero; each packet erma_bundle_next() hands out lies inside the
 *      datagram, right after its 2-byte length, is not empty, and there are
 *      at most as many as announced. A bundle read to its end
 *      (erma_bundle_done) written again from its packets gives the same
 *      bytes.
 *   2. as packets to bundle: the input cut into pieces (each piece's
 *      length from its first byte) written as a bundle reads back as the
 *      same pieces, and no packet header is taken for a bundle by
 *      erma_hdr_check().
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "erma/errors.h"
#include "erma/sdk/bundle.h"
#include "fuzz.h"

#define MAX_PKTS 1024

/* What bundle.h says erma_bundle_open() accepts. */
static bool open_by_spec(const uint8_t *p, size_t len)
{
    if (len < ERMA_HDR_SIZE)
        return false;
    const uint64_t w0 = erma_get_le(p, 8), w1 = erma_get_le(p + 8, 8);
    const uint64_t count = (w0 >> 8) & 0xffffff;
    const uint64_t others = (w0 & ~(0xffffffull << 8)) | (w1 & ((1ull << 44) - 1)) | (w1 >> 52);
    return ((w1 >> 44) & 0xf) == ERMA_HDR_MAGIC && ((w1 >> 48) & 0xf) == ERMA_PROTO_BUNDLE &&
           count > 0 && others == 0;
}

static void check_received(const uint8_t *data, size_t size)
{
    uint8_t *d = malloc(size ? size : 1);
    FUZZ_CHECK(d != NULL, "malloc");
    memcpy(d, data, size);
    struct erma_bundle_reader r = {0};
    const bool opened = erma_bundle_open(&r, d, size);
    FUZZ_CHECK(opened == open_by_spec(d, size), "open %d against the spec", opened);
    struct erma_hdr h;
    FUZZ_CHECK(!opened || erma_hdr_check(d, size, &h) == ERMA_EBADPKT,
               "a bundle passed as a packet");
    if (!opened) {
        free(d);
        return;
    }
    const uint32_t announced = r.left;
    static const uint8_t *pkt[MAX_PKTS];
    static uint32_t len[MAX_PKTS];
    uint32_t n = 0;
    const uint8_t *expect = d + ERMA_HDR_SIZE;
    const uint8_t *p;
    uint32_t l;
    while (erma_bundle_next(&r, &p, &l)) {
        FUZZ_CHECK(p == expect + ERMA_BUNDLE_LEN_SIZE, "packet %u not after its length", n);
        FUZZ_CHECK(l > 0 && p + l <= d + size, "packet %u of %u bytes outside", n, l);
        FUZZ_CHECK(n < announced, "more packets than the %u announced", announced);
        if (n < MAX_PKTS) {
            pkt[n] = p;
            len[n] = l;
        }
        n++;
        expect = p + l;
    }
    if (erma_bundle_done(&r) && n <= MAX_PKTS) {
        uint8_t *again = malloc(size);
        FUZZ_CHECK(again != NULL, "malloc");
        erma_bundle_hdr(again, n);
        uint8_t *w = again + ERMA_HDR_SIZE;
        for (uint32_t i = 0; i < n; i++) {
            erma_bundle_len(w, len[i]);
            memcpy(w + ERMA_BUNDLE_LEN_SIZE, pkt[i], len[i]);
            w += ERMA_BUNDLE_LEN_SIZE + len[i];
        }
        FUZZ_CHECK(w == again + size && memcmp(again, d, size) == 0,
                   "a bundle of %u packets written again differs", n);
        free(again);
    }
    free(d);
}

static void check_written(const uint8_t *data, size_t size)
{
    if (size > 60000)
        return;
    uint32_t cut[MAX_PKTS], n = 0;
    for (size_t at = 0; at < size && n < MAX_PKTS; n++) {
        const size_t want = (size_t)data[at] + 1;
        cut[n] = (uint32_t)(want < size - at ? want : size - at);
        at += cut[n];
    }
    uint8_t *b = malloc(erma_bundle_size(n, (uint32_t)size));
    FUZZ_CHECK(b != NULL, "malloc");
    erma_bundle_hdr(b, n);
    uint8_t *w = b + ERMA_HDR_SIZE;
    size_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        erma_bundle_len(w, cut[i]);
        memcpy(w + ERMA_BUNDLE_LEN_SIZE, data + at, cut[i]);
        w += ERMA_BUNDLE_LEN_SIZE + cut[i];
        at += cut[i];
    }
    const size_t blen = (size_t)(w - b);
    struct erma_bundle_reader r = {0};
    FUZZ_CHECK(n == 0 || erma_bundle_open(&r, b, blen), "a written bundle of %u not opened", n);
    const uint8_t *p;
    uint32_t l;
    at = 0;
    for (uint32_t i = 0; n && i < n; i++) {
        FUZZ_CHECK(erma_bundle_next(&r, &p, &l), "packet %u of %u missing", i, n);
        FUZZ_CHECK(l == cut[i] && memcmp(p, data + at, l) == 0, "packet %u differs", i);
        at += l;
    }
    FUZZ_CHECK(n == 0 || erma_bundle_done(&r), "a written bundle not read to its end");
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_received(data, size);
    check_written(data, size);
    return 0;
}

/* ---- seeds ---- */

static size_t seed(uint8_t *buf, uint32_t announce, const uint32_t *lens, uint32_t n)
{
    erma_bundle_hdr(buf, announce);
    uint8_t *w = buf + ERMA_HDR_SIZE;
    for (uint32_t i = 0; i < n; i++) {
        erma_bundle_len(w, lens[i]);
        memset(w + ERMA_BUNDLE_LEN_SIZE, (int)(0x40 + i), lens[i]);
        w += ERMA_BUNDLE_LEN_SIZE + lens[i];
    }
    return (size_t)(w - buf);
}

int fuzz_write_seeds(const char *dir)
{
    static uint8_t buf[2048];
    const uint32_t crs[] = {28, 28, 28, 28, 28}, mixed[] = {48, 28, 1200, 16};
    int n = 0;
    n += fuzz_save(dir, "credit_returns", buf, seed(buf, 5, crs, 5));
    n += fuzz_save(dir, "mixed", buf, seed(buf, 4, mixed, 4));
    n += fuzz_save(dir, "count_short", buf, seed(buf, 2, mixed, 3));
    n += fuzz_save(dir, "count_long", buf, seed(buf, 9, crs, 5));
    const size_t len = seed(buf, 4, mixed, 4);
    n += fuzz_save(dir, "truncated", buf, len - 7);
    return n;
}
