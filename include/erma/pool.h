/*
 * erma/pool.h - buffer pool for message buffers and packet memory.
 *
 * For the endpoint layer and tests; applications allocate message buffers
 * with erma_msgbuf_alloc() (rpc.h).
 *
 * A pool hands out buffers in power-of-two size classes from 64 B to
 * ERMA_POOL_MAX_BUF (16 MiB), carved from chunks of at least 2 MiB. Chunks are
 * 2 MiB hugepages (MAP_HUGETLB) when the system has them reserved; otherwise
 * the pool falls back to normal pages (with transparent hugepages advised)
 * and logs one notice. Freed buffers go back to their class's free list; the
 * memory is returned to the system only by erma_pool_destroy().
 *
 * A pool is not thread-safe: each endpoint owns one. When cfg.reg is set it
 * is called for every new chunk, so that a transport can register the
 * memory (DMA); a failing reg fails the allocation.
 */
#ifndef ERMA_POOL_H
#define ERMA_POOL_H

#include <stdbool.h>
#include <stddef.h>

#include "erma/api.h"

ERMA_BEGIN_DECLS

#define ERMA_POOL_MIN_BUF ((size_t)64)
#define ERMA_POOL_MAX_BUF ((size_t)16 << 20)
#define ERMA_POOL_CHUNK ((size_t)2 << 20)

typedef int (*erma_pool_reg_fn)(void *ctx, void *addr, size_t len);

struct erma_pool_cfg {
    bool no_hugepages;    /* never try MAP_HUGETLB */
    erma_pool_reg_fn reg; /* optional, called per new chunk */
    void *reg_ctx;
};

struct erma_pool;

/* cfg may be NULL for defaults. */
int erma_pool_create(const struct erma_pool_cfg *cfg, struct erma_pool **out);
/* Unmaps every chunk, including buffers still allocated. NULL is ignored. */
void erma_pool_destroy(struct erma_pool *pool);

/* A buffer of at least size bytes, 64-byte aligned, or NULL when size is 0,
 * larger than ERMA_POOL_MAX_BUF, or memory is exhausted. */
void *erma_pool_alloc(struct erma_pool *pool, size_t size);
/* Gives back a buffer; size must be the size it was allocated with. */
void erma_pool_free(struct erma_pool *pool, void *buf, size_t size);

/* The capacity really reserved for a request of size bytes (0 if too big). */
size_t erma_pool_capacity(size_t size);
/* True when at least one chunk is backed by hugepages. */
bool erma_pool_uses_hugepages(const struct erma_pool *pool);
/* Buffers handed out and not yet freed. */
size_t erma_pool_live(const struct erma_pool *pool);
/* Bytes mapped from the system. */
size_t erma_pool_mapped(const struct erma_pool *pool);

ERMA_END_DECLS

#endif
