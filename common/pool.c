#include "erma/sdk/pool.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "erma/errors.h"
#include "erma/log.h"

#define MIN_SHIFT 6
#define CHUNK_SHIFT 21
#define NUM_CLASSES 19 /* 64 B .. 16 MiB */
#define UNSEEN UINT64_MAX /* empty_at of a chunk no trim has seen empty */

_Static_assert(ERMA_POOL_CHUNK == (size_t)1 << CHUNK_SHIFT, "CHUNK_SHIFT");

struct link {
    struct link *prev, *next;
};

struct free_buf {
    struct free_buf *next;
};

struct chunk {
    struct link link; /* first: in its class's list while it has room */
    char *mem;        /* CHUNK-aligned */
    size_t len;
    struct free_buf *free; /* buffers given back */
    uint32_t live, nbufs;
    uint32_t carved; /* buffers ever cut from it: pages are touched as needed */
    int cls;
    uint64_t empty_at; /* when a trim first found it empty */
};

/* avail[c]: class c's chunks with room, partly used ones first and empty
 * ones last. Allocation takes from the first, so that empty chunks stay
 * empty; trim finds them at the tail. */
struct erma_pool {
    struct erma_pool_cfg cfg;
    struct link avail[NUM_CLASSES];
    /* Every chunk, by address: open addressing, linear probing, at most
     * half full, so that free finds a buffer's chunk in O(1). */
    struct chunk **slot;
    unsigned slot_bits;
    size_t nchunks, live, mapped;
    bool huge_failed, huge_used, shared;
    pthread_mutex_t lock;
};

static bool huge_notice_given;

/* ---- chunks by address ---- */

static uintptr_t key_of(const void *addr)
{
    return (uintptr_t)addr >> CHUNK_SHIFT;
}

static size_t slot_hash(uintptr_t key, unsigned bits)
{
    return (size_t)(((uint64_t)key * 0x9e3779b97f4a7c15ull) >> (64 - bits));
}

static size_t slot_mask(const struct erma_pool *p)
{
    return ((size_t)1 << p->slot_bits) - 1;
}

/* The chunk holding addr's CHUNK-aligned block, or NULL. */
static struct chunk *chunk_at(const struct erma_pool *p, const void *addr)
{
    const uintptr_t key = key_of(addr);
    for (size_t i = slot_hash(key, p->slot_bits);; i = (i + 1) & slot_mask(p)) {
        struct chunk *ch = p->slot[i];
        if (!ch || key_of(ch->mem) == key)
            return ch;
    }
}

static void slot_put(struct chunk **slot, unsigned bits, struct chunk *ch)
{
    const size_t mask = ((size_t)1 << bits) - 1;
    size_t i = slot_hash(key_of(ch->mem), bits);
    while (slot[i])
        i = (i + 1) & mask;
    slot[i] = ch;
}

static int index_chunk(struct erma_pool *p, struct chunk *ch)
{
    if ((p->nchunks + 1) * 2 > (size_t)1 << p->slot_bits) {
        const unsigned bits = p->slot_bits + 1;
        struct chunk **slot = calloc((size_t)1 << bits, sizeof *slot);
        if (!slot)
            return ERMA_ENOMEM;
        for (size_t i = 0; i <= slot_mask(p); i++)
            if (p->slot[i])
                slot_put(slot, bits, p->slot[i]);
        free(p->slot);
        p->slot = slot;
        p->slot_bits = bits;
    }
    slot_put(p->slot, p->slot_bits, ch);
    p->nchunks++;
    return ERMA_OK;
}

/* Removes ch, moving back the entries after it that probed past its slot. */
static void unindex_chunk(struct erma_pool *p, const struct chunk *ch)
{
    const size_t mask = slot_mask(p);
    size_t hole = slot_hash(key_of(ch->mem), p->slot_bits);
    while (p->slot[hole] != ch)
        hole = (hole + 1) & mask;
    p->slot[hole] = NULL;
    for (size_t i = (hole + 1) & mask; p->slot[i]; i = (i + 1) & mask) {
        const size_t home = slot_hash(key_of(p->slot[i]->mem), p->slot_bits);
        if (((i - home) & mask) >= ((i - hole) & mask)) { /* home is not in (hole, i] */
            p->slot[hole] = p->slot[i];
            p->slot[i] = NULL;
            hole = i;
        }
    }
    p->nchunks--;
}

/* ---- class lists ---- */

static void link_after(struct link *at, struct link *l)
{
    l->prev = at;
    l->next = at->next;
    at->next->prev = l;
    at->next = l;
}

static void link_remove(struct link *l)
{
    l->prev->next = l->next;
    l->next->prev = l->prev;
}

/* ---- mapping ---- */

static int class_of(size_t size)
{
    if (size == 0 || size > ERMA_POOL_MAX_BUF)
        return -1;
    if (size <= ERMA_POOL_MIN_BUF)
        return 0;
    return 64 - __builtin_clzll((unsigned long long)size - 1) - MIN_SHIFT;
}

static size_t buf_size(int c)
{
    return ERMA_POOL_MIN_BUF << c;
}

size_t erma_pool_capacity(size_t size)
{
    const int c = class_of(size);
    return c < 0 ? 0 : buf_size(c);
}

int erma_pool_create(const struct erma_pool_cfg *cfg, struct erma_pool **out)
{
    struct erma_pool *p = calloc(1, sizeof *p);
    if (!p)
        return ERMA_ENOMEM;
    if (cfg)
        p->cfg = *cfg;
    p->cfg.idle_ns = p->cfg.idle_ns ? p->cfg.idle_ns : ERMA_POOL_IDLE_NS;
    p->huge_failed = p->cfg.no_hugepages;
    p->slot_bits = 4;
    if (!(p->slot = calloc((size_t)1 << p->slot_bits, sizeof *p->slot))) {
        free(p);
        return ERMA_ENOMEM;
    }
    for (int c = 0; c < NUM_CLASSES; c++)
        p->avail[c].prev = p->avail[c].next = &p->avail[c];
    pthread_mutex_init(&p->lock, NULL);
    *out = p;
    return ERMA_OK;
}

static void unmap_chunk(struct erma_pool *p, struct chunk *ch)
{
    if (p->cfg.unreg)
        p->cfg.unreg(p->cfg.reg_ctx, ch->mem, ch->len);
    munmap(ch->mem, ch->len);
    p->mapped -= ch->len;
    free(ch);
}

void erma_pool_destroy(struct erma_pool *p)
{
    if (!p)
        return;
    for (size_t i = 0; i <= slot_mask(p); i++)
        if (p->slot[i])
            unmap_chunk(p, p->slot[i]);
    free(p->slot);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

void erma_pool_share(struct erma_pool *p)
{
    p->shared = true;
}

/* len bytes of normal pages at a CHUNK-aligned address (so that they can
 * be transparent hugepages, and a buffer's chunk is found by its address). */
static void *map_aligned(size_t len)
{
    const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
    char *m = mmap(NULL, len + ERMA_POOL_CHUNK, prot, flags, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    const size_t head = -(uintptr_t)m & (ERMA_POOL_CHUNK - 1);
    if (head)
        munmap(m, head);
    munmap(m + head + len, ERMA_POOL_CHUNK - head);
    madvise(m + head, len, MADV_HUGEPAGE);
    return m + head;
}

static void *map_chunk(struct erma_pool *p, size_t len)
{
    if (!p->huge_failed) {
        const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB;
        void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, flags, -1, 0);
        if (m != MAP_FAILED && ((uintptr_t)m & (ERMA_POOL_CHUNK - 1)) == 0) {
            p->huge_used = true;
            return m;
        }
        if (m != MAP_FAILED) /* hugepages of another size */
            munmap(m, len);
        p->huge_failed = true;
        if (!__atomic_exchange_n(&huge_notice_given, true, __ATOMIC_RELAXED)) /* threads */
            ERMA_INFO("pool: no 2 MiB hugepages available, using normal pages "
                      "(reserve some in /proc/sys/vm/nr_hugepages)");
    }
    return map_aligned(len);
}

/* Maps, indexes and registers a new chunk for class c, at the head of its
 * list. Not inlined: take() would save the registers it needs at every call. */
__attribute__((noinline)) static int grow(struct erma_pool *p, int c)
{
    const size_t len = buf_size(c) > ERMA_POOL_CHUNK ? buf_size(c) : ERMA_POOL_CHUNK;
    struct chunk *ch = calloc(1, sizeof *ch);
    if (!ch)
        return ERMA_ENOMEM;
    ch->len = len;
    ch->mem = map_chunk(p, len);
    int rc = ch->mem ? index_chunk(p, ch) : ERMA_ENOMEM;
    if (rc == ERMA_OK && p->cfg.reg) {
        rc = p->cfg.reg(p->cfg.reg_ctx, ch->mem, len);
        if (rc != ERMA_OK)
            unindex_chunk(p, ch);
    }
    if (rc != ERMA_OK) {
        if (ch->mem)
            munmap(ch->mem, len);
        free(ch);
        return rc;
    }
    ch->nbufs = (uint32_t)(len / buf_size(c));
    ch->cls = c;
    ch->empty_at = UNSEEN;
    p->mapped += len;
    link_after(&p->avail[c], &ch->link);
    return ERMA_OK;
}

/* ---- the data path ---- */

static void *take(struct erma_pool *p, int c)
{
    if (p->avail[c].next == &p->avail[c] && grow(p, c) != ERMA_OK)
        return NULL;
    struct chunk *ch = (struct chunk *)p->avail[c].next;
    void *buf = ch->free;
    if (buf)
        ch->free = ch->free->next;
    else
        buf = ch->mem + (size_t)ch->carved++ * buf_size(c);
    if (++ch->live == ch->nbufs)
        link_remove(&ch->link);
    p->live++;
    return buf;
}

static void give(struct erma_pool *p, void *buf)
{
    struct chunk *ch = chunk_at(p, buf);
    if (!ch || ch->live == 0 || (((uintptr_t)buf - (uintptr_t)ch->mem) & (buf_size(ch->cls) - 1)))
        return;
    const int c = ch->cls;
    struct free_buf *f = buf;
    f->next = ch->free;
    ch->free = f;
    p->live--;
    const bool was_full = ch->live-- == ch->nbufs;
    if (ch->live > 0) {
        if (was_full)
            link_after(&p->avail[c], &ch->link);
        return;
    }
    if (!was_full)
        link_remove(&ch->link);
    link_after(p->avail[c].prev, &ch->link); /* last */
    ch->empty_at = UNSEEN;
}

/* The shared pool's paths, out of line: the unshared ones save no
 * registers for the lock calls. */
__attribute__((noinline)) static void *take_locked(struct erma_pool *p, int c)
{
    pthread_mutex_lock(&p->lock);
    void *buf = take(p, c);
    pthread_mutex_unlock(&p->lock);
    return buf;
}

__attribute__((noinline)) static void give_locked(struct erma_pool *p, void *buf)
{
    pthread_mutex_lock(&p->lock);
    give(p, buf);
    pthread_mutex_unlock(&p->lock);
}

void *erma_pool_alloc(struct erma_pool *p, size_t size)
{
    const int c = class_of(size);
    if (c < 0)
        return NULL;
    return p->shared ? take_locked(p, c) : take(p, c);
}

void erma_pool_free(struct erma_pool *p, void *buf, size_t size)
{
    (void)size; /* the chunk knows the class */
    if (!buf)
        return;
    if (p->shared)
        give_locked(p, buf);
    else
        give(p, buf);
}

/* ---- trim ---- */

/* Class c's empty chunks (the tail of its list): stamps the ones seen empty
 * for the first time, unmaps those empty for idle_ns. */
static size_t trim_class(struct erma_pool *p, int c, uint64_t now)
{
    size_t unmapped = 0;
    for (struct link *l = p->avail[c].prev, *prev; l != &p->avail[c]; l = prev) {
        struct chunk *ch = (struct chunk *)l;
        prev = l->prev;
        if (ch->live)
            break;
        if (ch->empty_at == UNSEEN) {
            ch->empty_at = now;
        } else if (now > ch->empty_at && now - ch->empty_at >= p->cfg.idle_ns) {
            link_remove(l);
            unindex_chunk(p, ch);
            unmapped += ch->len;
            unmap_chunk(p, ch);
        }
    }
    return unmapped;
}

size_t erma_pool_trim(struct erma_pool *p, uint64_t now_ns)
{
    if (p->cfg.reg && !p->cfg.unreg) /* registered memory it cannot take back */
        return 0;
    if (p->shared)
        pthread_mutex_lock(&p->lock);
    size_t unmapped = 0;
    for (int c = 0; c < NUM_CLASSES; c++)
        unmapped += trim_class(p, c, now_ns);
    if (p->shared)
        pthread_mutex_unlock(&p->lock);
    return unmapped;
}

bool erma_pool_uses_hugepages(const struct erma_pool *p)
{
    return p->huge_used;
}

size_t erma_pool_live(const struct erma_pool *p)
{
    return p->live;
}

size_t erma_pool_mapped(const struct erma_pool *p)
{
    return p->mapped;
}
