/* A skip list of keys ordered by memcmp, shorter first on a tie. */
#include "index.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "erma/errors.h"
#include "erma/sdk/rand.h"

#define LEVELS 20

struct node {
    uint32_t klen, levels;
    struct node *next[LEVELS]; /* only `levels` used; allocated to fit */
};

struct kv_index {
    struct node head;
    struct erma_rand rng;
    uint64_t count;
};

static const uint8_t *node_key(const struct node *n)
{
    return (const uint8_t *)&n->next[n->levels];
}

static int cmp(const uint8_t *a, uint32_t alen, const void *b, uint32_t blen)
{
    const int c = memcmp(a, b, alen < blen ? alen : blen);
    return c ? c : (alen > blen) - (alen < blen);
}

int kv_index_create(uint64_t seed, struct kv_index **out)
{
    struct kv_index *ix = calloc(1, sizeof *ix);
    if (!ix)
        return ERMA_ENOMEM;
    ix->head.levels = LEVELS;
    erma_rand_seed(&ix->rng, seed);
    *out = ix;
    return ERMA_OK;
}

void kv_index_destroy(struct kv_index *ix)
{
    if (!ix)
        return;
    for (struct node *n = ix->head.next[0], *next; n; n = next) {
        next = n->next[0];
        free(n);
    }
    free(ix);
}

/* Fills prev[l] with the last node before key on each level. */
static struct node *seek(const struct kv_index *ix, const void *key, uint32_t klen,
                         struct node **prev)
{
    struct node *x = (struct node *)&ix->head;
    for (int l = LEVELS - 1; l >= 0; l--) {
        while (x->next[l] && cmp(node_key(x->next[l]), x->next[l]->klen, key, klen) < 0)
            x = x->next[l];
        if (prev)
            prev[l] = x;
    }
    return x->next[0];
}

int kv_index_add(struct kv_index *ix, const void *key, uint32_t klen)
{
    struct node *prev[LEVELS];
    struct node *at = seek(ix, key, klen, prev);
    if (at && cmp(node_key(at), at->klen, key, klen) == 0)
        return ERMA_OK;
    uint32_t levels = 1;
    while (levels < LEVELS && (erma_rand_u64(&ix->rng) & 3) == 0) /* p = 1/4 */
        levels++;
    struct node *n = malloc(offsetof(struct node, next) + levels * sizeof(struct node *) + klen);
    if (!n)
        return ERMA_ENOMEM;
    n->klen = klen;
    n->levels = levels;
    memcpy((uint8_t *)&n->next[levels], key, klen);
    for (uint32_t l = 0; l < levels; l++) {
        n->next[l] = prev[l]->next[l];
        prev[l]->next[l] = n;
    }
    ix->count++;
    return ERMA_OK;
}

void kv_index_remove(struct kv_index *ix, const void *key, uint32_t klen)
{
    struct node *prev[LEVELS];
    struct node *at = seek(ix, key, klen, prev);
    if (!at || cmp(node_key(at), at->klen, key, klen) != 0)
        return;
    for (uint32_t l = 0; l < at->levels; l++)
        prev[l]->next[l] = at->next[l];
    free(at);
    ix->count--;
}

unsigned kv_index_walk(const struct kv_index *ix, const void *key, uint32_t klen, unsigned max,
                       int (*fn)(void *ctx, const void *key, uint32_t klen), void *ctx)
{
    unsigned n = 0;
    for (const struct node *x = seek(ix, key, klen, NULL); x && n < max; x = x->next[0]) {
        n++;
        if (fn(ctx, node_key(x), x->klen))
            break;
    }
    return n;
}

uint64_t kv_index_count(const struct kv_index *ix)
{
    return ix->count;
}
