/* rma/region.h - the regions part: registered regions, their keys and a
 * cache of derived keys (region.c). The target (serve.c) finds a region
 * and its keys here; the record a lookup returns is read, never kept. */
#ifndef ERMA_RMA_REGION_H
#define ERMA_RMA_REGION_H

#include "internal.h"

/* Key generations before the current one whose keys a region keeps: the
 * previous one verifies as usual within its grace time; past it, and for
 * the generations before it, a request that verifies under its own
 * generation's Kd is told, sealed under that Kd, that its key was
 * superseded (ERMA_ESUPERSEDED). A generation further back gets
 * ERMA_EAUTH, as a forged key does. 4 x 32 bytes a region. */
#define RMA_OLD_KEYS 4

struct region {
    uint8_t *addr;
    uint64_t len;
    uint32_t id;        /* 0: free slot; else generation << 16 | index + 1 */
    uint16_t gen;
    uint8_t perms;
    uint8_t cipher;     /* enum erma_rma_cipher, fixed at registration */
    uint32_t key_gen;
    uint8_t kr[ERMA_RMA_KEY_BYTES];
    uint8_t old_kr[RMA_OLD_KEYS][ERMA_RMA_KEY_BYTES]; /* [i]: generation key_gen - 1 - i */
    uint64_t old_until_ns; /* old_kr[0] verifies before this time */
};

/* A derived key the target computed lately. Only a cache: the target could
 * derive Kd per packet as 1RMA's NIC does, but in software that BLAKE2b
 * costs as much as the AEAD itself. (region id, key_gen) names one Kr. */
#define RMA_KD_CACHE 64
struct kd_entry {
    uint32_t region, key_gen; /* region 0: empty */
    uint64_t identity;
    struct erma_addr addr;
    uint8_t kd[ERMA_RMA_KEY_BYTES];
};

struct rma_regions {
    struct region *table;      /* cfg.max_regions */
    struct kd_entry kd_cache[RMA_KD_CACHE];
};

int erma__regions_init(struct erma_rma *rma);
/* Deregisters what is left (its keys wiped) and frees the table. */
void erma__regions_fini(struct erma_rma *rma);
struct region *erma__region_find(struct erma_rma *rma, uint32_t id);
/* Kr of key generation key_gen of r: the current one, or the previous one
 * within its grace time (*retired false); one of the RMA_OLD_KEYS before
 * the current one otherwise (*retired true: a request under it may only
 * learn that its key was superseded). NULL for any other generation. */
const uint8_t *erma__region_key(const struct region *r, uint32_t key_gen, uint64_t now,
                                bool *retired);
/* Kd for identity at addr under r's key of
 * generation key_gen (kr), from the cache. */
const uint8_t *erma__region_kd(struct erma_rma *rma, const struct region *r, const uint8_t *kr,
                               uint32_t key_gen, uint64_t identity,
                               const struct erma_addr *addr);
void erma__region_install(struct region *r, const uint8_t *key, uint64_t grace_ns, uint64_t now);

#endif
