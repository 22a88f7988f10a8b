/*
 * erma/sdk/bundle.h - several erma packets for one destination in one
 * datagram (coalescing), for transports.
 *
 * A transport may put small packets of one TX burst that go to the same
 * destination into one bundle instead of a datagram each, and must split
 * every bundle it receives into its packets again before they go up: no
 * protocol ever sees a bundle, and each packet inside keeps its own header
 * and, on a secure session, its own seal. Layout (docs/PROTOCOL.md):
 *
 *   bundle header: an erma header (wire.h) with proto ERMA_PROTO_BUNDLE,
 *                  msg_size the number of packets, every other field zero
 *   then per packet: its length (2 bytes, little-endian), its bytes
 *
 * A bundle is never longer than the transport's max_pkt, so it fits any
 * datagram a single packet fits. A datagram is a bundle only when its first
 * 16 bytes are exactly a bundle header (erma_bundle_open); any other goes
 * up as one packet, where erma_hdr_check() rejects proto 4, so a malformed
 * bundle header is dropped as a malformed packet and a transport's own
 * payloads that are not erma packets (raw tests) are never taken apart.
 * The reader trusts nothing: a length that runs past the datagram, a zero
 * length or a count that disagrees ends the split and the rest is dropped
 * (each packet is checked above as usual). Peers older than bundles drop
 * them as malformed: turn coalescing off (udp: ERMA_UDP_COALESCE=0, dpdk:
 * ERMA_DPDK_COALESCE=0) when talking to one.
 */
#ifndef ERMA_BUNDLE_H
#define ERMA_BUNDLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "erma/sdk/transport_driver.h"
#include "erma/sdk/wire.h"

ERMA_BEGIN_DECLS

#define ERMA_PROTO_BUNDLE 4u
#define ERMA_BUNDLE_LEN_SIZE 2u /* the length before each packet */

/* Bytes a bundle of n packets of `bytes` bytes in all takes. */
static inline uint32_t erma_bundle_size(uint32_t n, uint32_t bytes)
{
    return ERMA_HDR_SIZE + n * ERMA_BUNDLE_LEN_SIZE + bytes;
}

/* Word 1 of every bundle header: the magic and proto 4, nothing else. */
#define ERMA_BUNDLE_W1 ((uint64_t)ERMA_HDR_MAGIC << 44 | (uint64_t)ERMA_PROTO_BUNDLE << 48)

/* Writes the header of a bundle of n packets (n < 2^24) at
 * buf[0..ERMA_HDR_SIZE): word 0 holds n as msg_size. */
static inline void erma_bundle_hdr(void *buf, uint32_t n)
{
    erma_put_le((uint8_t *)buf, (uint64_t)(n & 0xffffffu) << 8, 8);
    erma_put_le((uint8_t *)buf + 8, ERMA_BUNDLE_W1, 8);
}

/* How many of pkts[0..n) a transport puts in one bundle: adjacent, to one
 * destination, together within max_pkt; 0 when fewer than two would. */
static inline unsigned erma_bundle_run(const struct erma_tx_pkt *pkts, unsigned n,
                                       uint32_t max_pkt)
{
    uint32_t bytes = 0;
    unsigned k = 0;
    while (k < n && (k == 0 || erma_addr_eq(pkts[k].dst, pkts[0].dst)) &&
           erma_bundle_size(k + 1, bytes + erma_tx_pkt_len(&pkts[k])) <= max_pkt)
        bytes += erma_tx_pkt_len(&pkts[k++]);
    return k >= 2 ? k : 0;
}

/* Writes the length of the next packet at buf[0..ERMA_BUNDLE_LEN_SIZE). */
static inline void erma_bundle_len(uint8_t *buf, uint32_t len)
{
    erma_put_le(buf, len, (int)ERMA_BUNDLE_LEN_SIZE);
}

/* True when the datagram of len bytes is a bundle (by its header alone). */
static inline bool erma_bundle_is(const uint8_t *dgram, size_t len)
{
    if (len < ERMA_HDR_SIZE)
        return false;
    const uint64_t w1 = erma_get_le(dgram + 8, 8);
    return ((w1 >> 44) & 0xfu) == ERMA_HDR_MAGIC && ((w1 >> 48) & 0xfu) == ERMA_PROTO_BUNDLE;
}

/* Reading a bundle: start with erma_bundle_open(), then call
 * erma_bundle_next() until it returns false. */
struct erma_bundle_reader {
    const uint8_t *at, *end;
    uint32_t left; /* packets the header announced and not yet read */
};

/* Starts reading the bundle dgram[0..len); false when its header is not a
 * well-formed bundle's (a count of 0 or the reserved fields not zero). */
static inline bool erma_bundle_open(struct erma_bundle_reader *r, const uint8_t *dgram,
                                    size_t len)
{
    if (len < ERMA_HDR_SIZE)
        return false;
    const uint64_t w0 = erma_get_le(dgram, 8), w1 = erma_get_le(dgram + 8, 8);
    const uint32_t count = (uint32_t)(w0 >> 8) & 0xffffffu;
    if (w1 != ERMA_BUNDLE_W1 || w0 != (uint64_t)count << 8 || count == 0)
        return false;
    r->at = dgram + ERMA_HDR_SIZE;
    r->end = dgram + len;
    r->left = count;
    return true;
}

/* The next packet: *pkt and *len, true; false at the end or at the first
 * length that does not fit (the rest is not read). */
static inline bool erma_bundle_next(struct erma_bundle_reader *r, const uint8_t **pkt,
                                    uint32_t *len)
{
    if (r->left == 0 || (size_t)(r->end - r->at) < ERMA_BUNDLE_LEN_SIZE)
        return false;
    const uint32_t n = (uint32_t)erma_get_le(r->at, (int)ERMA_BUNDLE_LEN_SIZE);
    if (n == 0 || (size_t)(r->end - r->at) - ERMA_BUNDLE_LEN_SIZE < n)
        return false;
    *pkt = r->at + ERMA_BUNDLE_LEN_SIZE;
    *len = n;
    r->at += ERMA_BUNDLE_LEN_SIZE + n;
    r->left--;
    return true;
}

/* True when the reader consumed the bundle exactly: every announced
 * packet, nothing after the last. */
static inline bool erma_bundle_done(const struct erma_bundle_reader *r)
{
    return r->left == 0 && r->at == r->end;
}

ERMA_END_DECLS

#endif
