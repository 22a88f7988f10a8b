/*
 * erma/sdk/rand.h - a fast seeded PRNG (xoshiro256**, seeded by splitmix64).
 *
 * For simulations, tests and benchmarks that want reproducible randomness,
 * and erma's own seeds; included on its own.
 *
 * Not for cryptography (crypto uses libsodium). The same seed gives the same
 * sequence on every machine, which the sim transport relies on.
 */
#ifndef ERMA_RAND_H
#define ERMA_RAND_H

#include <stdint.h>

#include "erma/api.h"

ERMA_BEGIN_DECLS

struct erma_rand {
    uint64_t s[4];
};

/* splitmix64: advances the state *x and returns its next output. Seeds
 * erma_rand, and serves alone where one fast mix of a counter will do. */
static inline uint64_t erma_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Seeds r from seed (any value, 0 included) through splitmix64. */
static inline void erma_rand_seed(struct erma_rand *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = erma_splitmix64(&seed);
}

/* x rotated left by k bits, 0 < k < 64. */
static inline uint64_t erma_rotl64(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* The next 64 random bits of r (xoshiro256**). */
static inline uint64_t erma_rand_u64(struct erma_rand *r)
{
    uint64_t *s = r->s;
    const uint64_t result = erma_rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = erma_rotl64(s[3], 45);
    return result;
}

/* Uniform in [0, 1). */
static inline double erma_rand_double(struct erma_rand *r)
{
    return (double)(erma_rand_u64(r) >> 11) * 0x1.0p-53;
}

/* Uniform in [0, n) for n > 0 (Lemire's multiply-shift; bias < n / 2^64). */
static inline uint64_t erma_rand_below(struct erma_rand *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)erma_rand_u64(r) * n) >> 64);
}

ERMA_END_DECLS

#endif
