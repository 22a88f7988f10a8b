/* rma/region.c - registered regions and their keys (the target side). */
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "erma/clock.h"
#include "region.h"

/* A region's id: generation << 16 | (index + 1), so that a deregistered id
 * never matches the slot's next tenant, and 0 is never an id. */
static uint32_t region_id(uint16_t gen, uint32_t index)
{
    return (uint32_t)gen << 16 | (index + 1);
}

static uint32_t region_index(uint32_t id)
{
    return (id & 0xffff) - 1; /* UINT32_MAX for no index */
}

int erma__regions_init(struct erma_rma *rma)
{
    rma->regions = calloc(1, sizeof *rma->regions);
    if (!rma->regions)
        return ERMA_ENOMEM;
    rma->regions->table = calloc(rma->cfg.max_regions, sizeof *rma->regions->table);
    return rma->regions->table ? ERMA_OK : ERMA_ENOMEM;
}

void erma__regions_fini(struct erma_rma *rma)
{
    if (!rma->regions)
        return;
    if (rma->regions->table)
        for (uint32_t i = 0; i < rma->cfg.max_regions; i++)
            if (rma->regions->table[i].id)
                erma_region_deregister(rma, rma->regions->table[i].id);
    free(rma->regions->table);
    free(rma->regions);
    rma->regions = NULL;
}

struct region *erma__region_find(struct erma_rma *rma, uint32_t id)
{
    struct region *table = rma->regions->table;
    const uint32_t i = region_index(id);
    if (i >= rma->cfg.max_regions || table[i].id != id)
        return NULL;
    return &table[i];
}

const uint8_t *erma__region_key(const struct region *r, uint32_t key_gen, uint64_t now,
                                bool *retired)
{
    const uint32_t back = r->key_gen - key_gen; /* generations behind the current one */
    *retired = false;
    if (back == 0)
        return r->kr;
    if (back > RMA_OLD_KEYS || back >= r->key_gen) /* too old, or never installed */
        return NULL;
    *retired = back > 1 || now >= r->old_until_ns;
    return r->old_kr[back - 1];
}

static uint64_t addr_hash(const struct erma_addr *a)
{
    uint64_t h = a->len;
    for (uint8_t i = 0; i < a->len; i++)
        h = (h ^ a->raw[i]) * 0x100000001b3ull;
    return h;
}

const uint8_t *erma__region_kd(struct erma_rma *rma, const struct region *r, const uint8_t *kr,
                              uint32_t key_gen, uint64_t identity,
                              const struct erma_addr *addr)
{
    const uint64_t h = (identity ^ (uint64_t)r->id << 20 ^ key_gen ^ addr_hash(addr)) *
                       0x9e3779b97f4a7c15ull;
    struct kd_entry *e = &rma->regions->kd_cache[h >> 58]; /* 6 bits: RMA_KD_CACHE entries */
    if (e->region != r->id || e->key_gen != key_gen || e->identity != identity ||
        !erma_addr_eq(&e->addr, addr)) {
        *e = (struct kd_entry){.region = r->id, .key_gen = key_gen, .identity = identity,
                               .addr = *addr};
        erma__rma_kdf(kr, identity, addr, e->kd);
    }
    return e->kd;
}

/* Forgets region id's derived keys (its id may come back 65536 tenants on). */
static void kd_forget(struct erma_rma *rma, uint32_t id)
{
    struct kd_entry *cache = rma->regions->kd_cache;
    for (unsigned i = 0; i < RMA_KD_CACHE; i++)
        if (cache[i].region == id)
            sodium_memzero(&cache[i], sizeof cache[i]);
    erma__rma_keys_forget(rma); /* key schedules too (of any region: they are few) */
}

void erma__region_install(struct region *r, const uint8_t *key, uint64_t grace_ns, uint64_t now)
{
    /* the oldest key is overwritten, so no copy of it is left */
    memmove(r->old_kr[1], r->old_kr[0], sizeof r->old_kr - sizeof r->old_kr[0]);
    memcpy(r->old_kr[0], r->kr, sizeof r->kr);
    r->old_until_ns = grace_ns ? now + grace_ns : 0;
    if (key)
        memcpy(r->kr, key, sizeof r->kr);
    else
        randombytes_buf(r->kr, sizeof r->kr);
    r->key_gen++;
}

int erma_region_register_cipher(struct erma_rma *rma, void *addr, size_t len, unsigned perms,
                                enum erma_rma_cipher cipher, uint32_t *region)
{
    if (!rma || !addr || len == 0 || !region || perms == 0 ||
        (perms & ~(unsigned)(ERMA_RMA_PERM_READ | ERMA_RMA_PERM_WRITE | ERMA_RMA_PERM_REKEY)) ||
        (cipher != ERMA_RMA_CHACHA20_POLY1305 && cipher != ERMA_RMA_AES256_GCM))
        return ERMA_EINVAL;
    if (cipher == ERMA_RMA_AES256_GCM && !rma->aes)
        return ERMA_ENOTSUP;
    for (uint32_t i = 0; i < rma->cfg.max_regions; i++) {
        struct region *r = &rma->regions->table[i];
        if (r->id)
            continue;
        const uint16_t gen = (uint16_t)(r->gen + 1);
        *r = (struct region){.addr = addr, .len = len, .gen = gen, .perms = (uint8_t)perms,
                             .cipher = (uint8_t)cipher, .key_gen = 1};
        r->id = region_id(gen, i);
        randombytes_buf(r->kr, sizeof r->kr);
        *region = r->id;
        return ERMA_OK;
    }
    return ERMA_ENOSLOTS;
}

int erma_region_register(struct erma_rma *rma, void *addr, size_t len, unsigned perms,
                         uint32_t *region)
{
    return erma_region_register_cipher(rma, addr, len, perms,
                                       rma && rma->aes ? ERMA_RMA_AES256_GCM
                                                       : ERMA_RMA_CHACHA20_POLY1305,
                                       region);
}

int erma_region_deregister(struct erma_rma *rma, uint32_t region)
{
    struct region *r = rma ? erma__region_find(rma, region) : NULL;
    if (!r)
        return ERMA_ENOREGION;
    sodium_memzero(r->kr, sizeof r->kr);
    sodium_memzero(r->old_kr, sizeof r->old_kr);
    kd_forget(rma, r->id);
    r->id = 0;
    r->addr = NULL;
    return ERMA_OK;
}

int erma_region_export_addr(struct erma_rma *rma, uint32_t region, uint64_t identity,
                            const struct erma_addr *initiator, struct erma_rkey *out)
{
    if (!initiator || initiator->len == 0 || initiator->len > ERMA_ADDR_MAX || !out)
        return ERMA_EINVAL;
    struct region *r = rma ? erma__region_find(rma, region) : NULL;
    if (!r)
        return ERMA_ENOREGION;
    erma_rma_derive(r->kr, region, r->key_gen, r->cipher, identity, initiator, out);
    return ERMA_OK;
}

int erma_region_export_uri(struct erma_rma *rma, uint32_t region, uint64_t identity,
                           const char *initiator_uri, struct erma_rkey *out)
{
    struct erma_addr a;
    if (!rma || !initiator_uri)
        return ERMA_EINVAL;
    const int rc = erma_transport_resolve(rma->tr, initiator_uri, &a);
    return rc == ERMA_OK ? erma_region_export_addr(rma, region, identity, &a, out) : rc;
}

int erma_region_rekey(struct erma_rma *rma, uint32_t region, const uint8_t *new_key,
                      uint64_t grace_ns)
{
    struct region *r = rma ? erma__region_find(rma, region) : NULL;
    if (!r)
        return ERMA_ENOREGION;
    erma__region_install(r, new_key, grace_ns, erma__ep_clock(rma->ep));
    return ERMA_OK;
}

void erma_rma_derive(const uint8_t kr[ERMA_RMA_KEY_BYTES], uint32_t region, uint32_t key_gen,
                     enum erma_rma_cipher cipher, uint64_t identity,
                     const struct erma_addr *initiator, struct erma_rkey *out)
{
    *out = (struct erma_rkey){.region = region, .key_gen = key_gen, .cipher = (uint8_t)cipher};
    erma__rma_kdf(kr, identity, initiator, out->kd);
}
