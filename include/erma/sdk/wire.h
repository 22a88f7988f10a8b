/*
 * erma/sdk/wire.h - the 16-byte erma packet header that starts every packet.
 *
 * For protocol code, transports, tests and raw benchmarks; applications
 * never see a header.
 *
 * Layout (two little-endian 64-bit words; docs/PROTOCOL.md has the picture):
 *   word 0: req_type 8 | msg_size 24 | dest_session 16 | pkt_type 2 | pkt_num 14
 *   word 1: req_num 44 | magic 4 | proto 4 | host_delay 12
 * The first 112 bits are eRPC's header; erma adds proto, which tells RPC,
 * one-sided (RMA) and session-management packets apart, and host_delay:
 * in an RPC credit return or response, or a one-sided target's answer,
 * how long the packet it answers spent inside the answering host
 * (erma_delay_encode; zero in every other packet). erma_hdr_check() is the gate every received packet passes.
 */
#ifndef ERMA_WIRE_H
#define ERMA_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "erma/api.h"

ERMA_BEGIN_DECLS

#define ERMA_HDR_SIZE 16
#define ERMA_HDR_MAGIC 0xEu
#define ERMA_MAX_MSG_SIZE ((uint32_t)8 << 20) /* 8 MiB */
#define ERMA_MAX_REQ_NUM ((UINT64_C(1) << 44) - 1)
#define ERMA_MAX_PKT_NUM ((1u << 14) - 1)

enum erma_proto {
    ERMA_PROTO_RPC = 1, /* request, credit return, RFR, response */
    ERMA_PROTO_RMA = 2, /* one-sided ops */
    ERMA_PROTO_SM = 3,  /* session management: connect, disconnect, keepalive */
};

/* RPC packet types (the 2-bit pkt_type). */
enum erma_pkt_type {
    ERMA_PKT_REQ = 0,
    ERMA_PKT_CR = 1,  /* credit return */
    ERMA_PKT_RFR = 2, /* request for response */
    ERMA_PKT_RESP = 3,
};

struct erma_hdr {
    uint8_t req_type;
    uint32_t msg_size;     /* 24 bits */
    uint16_t dest_session;
    uint8_t pkt_type;      /* 2 bits */
    uint16_t pkt_num;      /* 14 bits */
    uint64_t req_num;      /* 44 bits */
    uint8_t proto;         /* 4 bits */
    uint16_t host_delay;   /* 12 bits, erma_delay_encode(); RPC CR and RESP, RMA answers */
};

/* host_delay's 12 bits: a 4-bit exponent e and an 8-bit mantissa m for
 * (m << e) units of 128 ns, rounded down: exact to 128 ns below 32 us,
 * within 1/128 above (m >= 128 there), at most 1.07 s (longer reads as
 * that). */
static inline uint16_t erma_delay_encode(uint64_t ns)
{
    uint64_t v = ns >> 7;
    unsigned e = 0;
    while (v > 255 && e < 15) {
        v >>= 1;
        e++;
    }
    return (uint16_t)(e << 8 | (v > 255 ? 255 : v));
}

static inline uint64_t erma_delay_decode(uint16_t d)
{
    return ((uint64_t)(d & 255u) << (d >> 8 & 15u)) << 7;
}

/* Sets the host_delay of the encoded header at buf (bits 52..63 of word 1). */
static inline void erma_hdr_set_delay(void *buf, uint16_t d)
{
    uint8_t *p = (uint8_t *)buf + 14;
    p[0] = (uint8_t)((p[0] & 0x0fu) | (d & 0x0fu) << 4);
    p[1] = (uint8_t)(d >> 4);
}

#ifndef __cplusplus
_Static_assert(ERMA_MAX_MSG_SIZE < (1u << 24), "msg_size must fit 24 bits");
#endif

/* Writes the low `bytes` bytes of v at p, little-endian. On a
 * little-endian host the whole-word widths are one store: compilers do not
 * merge the byte loop, and headers are written for every packet. */
static inline void erma_put_le(uint8_t *p, uint64_t v, int bytes)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (bytes == 8) {
        memcpy(p, &v, 8);
        return;
    }
    if (bytes == 4) {
        const uint32_t w = (uint32_t)v;
        memcpy(p, &w, 4);
        return;
    }
#endif
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Reads `bytes` little-endian bytes at p. */
static inline uint64_t erma_get_le(const uint8_t *p, int bytes)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (bytes == 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    if (bytes == 4) {
        uint32_t w;
        memcpy(&w, p, 4);
        return w;
    }
#endif
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* The codec style of every erma header: fields one after another, each
 * little-endian, through a cursor that moves past what it wrote or read.
 * erma_put() writes the low `bytes` bytes of v at *p and moves *p past
 * them. */
static inline void erma_put(uint8_t **p, uint64_t v, int bytes)
{
    erma_put_le(*p, v, bytes);
    *p += bytes;
}

/* Reads a field of `bytes` bytes at *p and moves *p past it. */
static inline uint64_t erma_get(const uint8_t **p, int bytes)
{
    const uint64_t v = erma_get_le(*p, bytes);
    *p += bytes;
    return v;
}

/* Copies n bytes of src to *p and moves *p past them. */
static inline void erma_put_bytes(uint8_t **p, const void *src, size_t n)
{
    memcpy(*p, src, n);
    *p += n;
}

/* Copies n bytes at *p to dst and moves *p past them. */
static inline void erma_get_bytes(const uint8_t **p, void *dst, size_t n)
{
    memcpy(dst, *p, n);
    *p += n;
}

/* Writes h to buf[0..16). Fields wider than their wire width are masked. */
void erma_hdr_encode(const struct erma_hdr *h, void *buf);
/* Reads buf[0..16) into h without validation. */
void erma_hdr_decode(const void *buf, struct erma_hdr *h);
/* Decodes and validates a received packet of len bytes: ERMA_OK or
 * ERMA_EBADPKT. It accepts the packet only when it is at least a header
 * long, has the magic, a known proto and pkt_type, a host_delay of zero
 * unless it is an RPC credit return or response or a one-sided packet, and
 * a msg_size within
 * ERMA_MAX_MSG_SIZE; it reads nothing past len. */
int erma_hdr_check(const void *pkt, size_t len, struct erma_hdr *h);

ERMA_END_DECLS

#endif
