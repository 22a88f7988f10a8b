/*
 * apps/kvcs/value.h - self-checking values for kvcs programs and tests: the
 * key number and a version in the first 8 bytes, then a pattern of both,
 * 16 to 15 + span bytes long (the length depends on key and version too),
 * so a reader can tell a whole value of its key, and which version, from
 * anything else.
 */
#ifndef KVCS_VALUE_H
#define KVCS_VALUE_H

#include <stdint.h>
#include <string.h>

static inline uint8_t kvcs_value_byte(uint32_t k, uint32_t version, uint32_t i)
{
    return (uint8_t)(k * 3 + version * 7 + i);
}

/* Writes the value of key k at version into v; returns its length. */
static inline uint32_t kvcs_value_make(uint32_t k, uint32_t version, uint32_t span, uint8_t *v)
{
    const uint32_t len = 16 + (k * 37 + version * 11) % span;
    memcpy(v, &k, 4);
    memcpy(v + 4, &version, 4);
    for (uint32_t i = 8; i < len; i++)
        v[i] = kvcs_value_byte(k, version, i);
    return len;
}

/* The version val holds, 0 when it is not a value kvcs_value_make(k, ...,
 * span, ...) made. */
static inline uint32_t kvcs_value_version(uint32_t k, uint32_t span, const uint8_t *val,
                                          uint32_t vlen)
{
    uint32_t kk, v;
    if (vlen < 8)
        return 0;
    memcpy(&kk, val, 4);
    memcpy(&v, val + 4, 4);
    if (kk != k || v == 0 || 16 + (k * 37 + v * 11) % span != vlen)
        return 0;
    for (uint32_t i = 8; i < vlen; i++)
        if (val[i] != kvcs_value_byte(k, v, i))
            return 0;
    return v;
}

#endif
