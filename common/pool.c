#include "erma/pool.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "erma/errors.h"
#include "erma/log.h"

#define MIN_SHIFT 6
#define NUM_CLASSES 19 /* 64 B .. 16 MiB */

struct chunk {
    struct chunk *next;
    void *mem;
    size_t len;
};

struct free_buf {
    struct free_buf *next;
};

struct erma_pool {
    struct erma_pool_cfg cfg;
    struct free_buf *free[NUM_CLASSES];
    struct chunk *chunks;
    size_t live, mapped;
    bool huge_failed, huge_used;
};

static bool huge_notice_given;

static int class_of(size_t size)
{
    if (size == 0 || size > ERMA_POOL_MAX_BUF)
        return -1;
    int c = 0;
    while ((ERMA_POOL_MIN_BUF << c) < size)
        c++;
    return c;
}

size_t erma_pool_capacity(size_t size)
{
    const int c = class_of(size);
    return c < 0 ? 0 : ERMA_POOL_MIN_BUF << c;
}

int erma_pool_create(const struct erma_pool_cfg *cfg, struct erma_pool **out)
{
    struct erma_pool *p = calloc(1, sizeof *p);
    if (!p)
        return ERMA_ENOMEM;
    if (cfg)
        p->cfg = *cfg;
    p->huge_failed = p->cfg.no_hugepages;
    *out = p;
    return ERMA_OK;
}

void erma_pool_destroy(struct erma_pool *p)
{
    if (!p)
        return;
    for (struct chunk *c = p->chunks, *next; c; c = next) {
        next = c->next;
        munmap(c->mem, c->len);
        free(c);
    }
    free(p);
}

static void *map_chunk(struct erma_pool *p, size_t len)
{
    const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
    if (!p->huge_failed) {
        void *m = mmap(NULL, len, prot, flags | MAP_HUGETLB, -1, 0);
        if (m != MAP_FAILED) {
            p->huge_used = true;
            return m;
        }
        p->huge_failed = true;
        if (!huge_notice_given) {
            huge_notice_given = true;
            ERMA_INFO("pool: no 2 MiB hugepages available, using normal pages "
                        "(reserve some in /proc/sys/vm/nr_hugepages)");
        }
    }
    void *m = mmap(NULL, len, prot, flags, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    madvise(m, len, MADV_HUGEPAGE);
    return m;
}

/* Maps a new chunk and threads it onto class c's free list. */
static int grow(struct erma_pool *p, int c)
{
    const size_t buf = ERMA_POOL_MIN_BUF << c;
    const size_t len = buf > ERMA_POOL_CHUNK ? buf : ERMA_POOL_CHUNK;
    struct chunk *ch = malloc(sizeof *ch);
    if (!ch)
        return ERMA_ENOMEM;
    ch->mem = map_chunk(p, len);
    if (!ch->mem) {
        free(ch);
        return ERMA_ENOMEM;
    }
    ch->len = len;
    if (p->cfg.reg) {
        const int rc = p->cfg.reg(p->cfg.reg_ctx, ch->mem, len);
        if (rc != ERMA_OK) {
            munmap(ch->mem, len);
            free(ch);
            return rc;
        }
    }
    ch->next = p->chunks;
    p->chunks = ch;
    p->mapped += len;
    for (size_t off = len; off >= buf; off -= buf) {
        struct free_buf *f = (struct free_buf *)((char *)ch->mem + off - buf);
        f->next = p->free[c];
        p->free[c] = f;
    }
    return ERMA_OK;
}

void *erma_pool_alloc(struct erma_pool *p, size_t size)
{
    const int c = class_of(size);
    if (c < 0)
        return NULL;
    if (!p->free[c] && grow(p, c) != ERMA_OK)
        return NULL;
    struct free_buf *f = p->free[c];
    p->free[c] = f->next;
    p->live++;
    return f;
}

void erma_pool_free(struct erma_pool *p, void *buf, size_t size)
{
    const int c = class_of(size);
    if (!buf || c < 0)
        return;
    struct free_buf *f = buf;
    f->next = p->free[c];
    p->free[c] = f;
    p->live--;
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
