/* An ordered index of keys (a skip list), for SCAN. Not thread-safe. */
#ifndef KV_INDEX_H
#define KV_INDEX_H

#include <stdint.h>

struct kv_index;

int kv_index_create(uint64_t seed, struct kv_index **out);
void kv_index_destroy(struct kv_index *ix);
/* Adds key (a copy) if absent. */
int kv_index_add(struct kv_index *ix, const void *key, uint32_t klen);
void kv_index_remove(struct kv_index *ix, const void *key, uint32_t klen);
/* Calls fn for up to max keys >= key in order, stopping early when fn returns
 * non-zero; returns the number of keys visited. */
unsigned kv_index_walk(const struct kv_index *ix, const void *key, uint32_t klen, unsigned max,
                       int (*fn)(void *ctx, const void *key, uint32_t klen), void *ctx);
uint64_t kv_index_count(const struct kv_index *ix);

#endif
