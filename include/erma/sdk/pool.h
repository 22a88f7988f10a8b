/*
 * erma/sdk/pool.h - buffer pool for message buffers and packet memory.
 *
 * For the endpoint layer and tests; applications allocate message buffers
 * with erma_msgbuf_alloc() (rpc.h).
 *
 * A pool hands out buffers in power-of-two size classes from 64 B to
 * ERMA_POOL_MAX_BUF (16 MiB). Each class carves chunks of its own: 2 MiB,
 * 2 MiB-aligned, for buffers up to 2 MiB; one buffer each above. Chunks are
 * 2 MiB hugepages (MAP_HUGETLB) when the system has them reserved; otherwise
 * the pool falls back to normal pages (with transparent hugepages advised)
 * and logs one notice. Allocation prefers chunks already in use, so that the
 * others empty; erma_pool_trim() unmaps the chunks that stayed empty for
 * cfg.idle_ns, so that the memory mapped follows the working set, a while
 * behind. erma_pool_destroy() unmaps the rest.
 *
 * When cfg.reg is set it is called for every new chunk, so that a transport
 * can register the memory (DMA); a failing reg fails the allocation.
 * cfg.unreg is called for every chunk before it is unmapped, by trim or
 * destroy; with reg set and no unreg, trim keeps every chunk.
 *
 * A pool is used by one thread unless erma_pool_share() was called: then
 * alloc, free and trim take the pool's mutex. The owner of a pool that
 * other threads allocate from must share it before they start.
 */
#ifndef ERMA_POOL_H
#define ERMA_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "erma/api.h"

ERMA_BEGIN_DECLS

#define ERMA_POOL_MIN_BUF ((size_t)64)
#define ERMA_POOL_MAX_BUF ((size_t)16 << 20)
#define ERMA_POOL_CHUNK ((size_t)2 << 20)
#define ERMA_POOL_IDLE_NS 1000000000ull /* default cfg.idle_ns: 1 s */

typedef int (*erma_pool_reg_fn)(void *ctx, void *addr, size_t len);
typedef void (*erma_pool_unreg_fn)(void *ctx, void *addr, size_t len);

struct erma_pool_cfg {
    bool no_hugepages;        /* never try MAP_HUGETLB */
    erma_pool_reg_fn reg;     /* optional, called per new chunk */
    erma_pool_unreg_fn unreg; /* optional, called per chunk before it is unmapped */
    void *reg_ctx;
    /* How long a chunk stays empty before trim unmaps it; 0: ERMA_POOL_IDLE_NS,
     * UINT64_MAX: never. */
    uint64_t idle_ns;
};

struct erma_pool;

/* cfg may be NULL for defaults. */
int erma_pool_create(const struct erma_pool_cfg *cfg, struct erma_pool **out);
/* Unmaps every chunk, including buffers still allocated. NULL is ignored. */
void erma_pool_destroy(struct erma_pool *pool);
/* From now on alloc, free and trim lock the pool: call it before a second
 * thread uses the pool. */
void erma_pool_share(struct erma_pool *pool);

/* A buffer of at least size bytes, 64-byte aligned, or NULL when size is 0,
 * larger than ERMA_POOL_MAX_BUF, or memory is exhausted. */
void *erma_pool_alloc(struct erma_pool *pool, size_t size);
/* Gives back a buffer; size is the size it was allocated with (the pool
 * finds the class by buf's address). A pointer outside the pool's chunks or
 * not at a buffer's start, or a buffer of a chunk with none handed out, is
 * ignored; any other wrong pointer (a buffer not handed out, or freed
 * twice, while others of its chunk are out) corrupts the pool, as free()
 * would. */
void erma_pool_free(struct erma_pool *pool, void *buf, size_t size);

/* Called now and then (an endpoint's loop does, every 100 ms) with a clock
 * that never goes back: unmaps the chunks found empty by a trim at least
 * cfg.idle_ns before now and empty since. Returns the bytes unmapped. */
size_t erma_pool_trim(struct erma_pool *pool, uint64_t now_ns);

/* The capacity really reserved for a request of size bytes (0 if too big). */
size_t erma_pool_capacity(size_t size);
/* True when at least one chunk is backed by hugepages. */
bool erma_pool_uses_hugepages(const struct erma_pool *pool);
/* Buffers handed out and not yet freed. This and erma_pool_mapped() take no
 * lock: on a shared pool, call them only while no other thread uses it. */
size_t erma_pool_live(const struct erma_pool *pool);
/* Bytes mapped from the system. */
size_t erma_pool_mapped(const struct erma_pool *pool);

ERMA_END_DECLS

#endif
