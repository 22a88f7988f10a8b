/*
 * erma/kv.h - a MICA-style key-value table in one contiguous buffer.
 *
 * The table is laid out so that a reader holding only a copy of its bytes
 * (a one-sided READ of a bucket, then of an item) can find and validate an
 * item without the owner's help; kv_bucket_find() and
 * kv_item_check() are that reader's side.
 *
 * Layout (little-endian; docs/ARCHITECTURE.md):
 *   header   64 B: magic, nbuckets, log_bytes, log_head
 *   buckets  nbuckets x 64 B: version (odd while being changed), 7 slots
 *   log      log_bytes, circular: items appended at log_head
 * A slot is tag 16 | item length in 8-byte units 12 | log position in
 * 8-byte units 36 (0: empty). An item is
 *   [u64 stamp][u32 key_len][u32 value_len][key][value][pad to 8][u64 check]
 * where stamp = its log position + 1 (so an item overwritten by the wrapping
 * log no longer matches its slot; its top bit set once the slot names
 * another item or none: superseded) and check = a 64-bit hash of
 * everything before it, word by word (table.c; not cryptographic: the
 * one-sided packets are authenticated, the check only has to catch an item
 * read in pieces while being overwritten). Items never wrap around the log's
 * end.
 *
 * The table is lossy, as MICA: when a bucket is full the oldest item in it
 * is dropped, and items the log has wrapped over are gone. Not thread-safe:
 * the owner (an endpoint's event loop) does every put and delete; readers
 * of copies need no lock. All functions return ERMA_OK or a negative code.
 */
#ifndef KV_H
#define KV_H

#include <stddef.h>
#include <stdint.h>

#include "erma/rma.h"

#define KV_SLOTS 7
#define KV_BUCKET 64
#define KV_MAX_ITEM (4095 * 8) /* bytes, header and check included */

struct kv;

/* buckets and log_bytes are rounded up to powers of two (log_bytes at least
 * 64 KiB). */
int kv_create(uint32_t buckets, uint64_t log_bytes, struct kv **out);
void kv_destroy(struct kv *kv);

/* ERMA_E2BIG when the item would exceed KV_MAX_ITEM; ERMA_EINVAL for an
 * empty key. */
int kv_put(struct kv *kv, const void *key, uint32_t klen, const void *val,
           uint32_t vlen);
/* Copies the value into val (up to cap bytes) and its length to *vlen;
 * ERMA_ENOENT when absent, ERMA_E2BIG when cap is too small. */
int kv_get(const struct kv *kv, const void *key, uint32_t klen, void *val,
           uint32_t cap, uint32_t *vlen);
int kv_delete(struct kv *kv, const void *key, uint32_t klen);

/* The table's bytes (for registering as a region) and their size, and the
 * geometry a reader needs. */
const void *kv_memory(const struct kv *kv, size_t *len);
uint64_t kv_nbuckets(const struct kv *kv);
uint64_t kv_log_bytes(const struct kv *kv);

/* ---- the reader's side, on copies of the table's bytes ---- */

/* Where a candidate item lives, and the stamp it must carry. */
struct kv_ref {
    uint64_t off, stamp;
    uint32_t len;
};

/* The table's length in bytes (its region's) for that geometry. */
uint64_t kv_table_len(uint64_t nbuckets, uint64_t log_bytes);
/* Offset and length of the bucket that would hold key. */
void kv_bucket_of(uint64_t nbuckets, const void *key, uint32_t klen, uint64_t *off,
                  uint32_t *len);
/* Looks through a bucket copy for key: the items to read, up to max;
 * returns how many (0: absent), or ERMA_EAGAIN when the bucket was being
 * changed (read it again). */
int kv_bucket_find(const void *bucket, uint64_t nbuckets, uint64_t log_bytes,
                   const void *key, uint32_t klen, struct kv_ref *refs, int max);
/* Checks an item copy read as ref says: ERMA_OK and its value (pointing
 * into item) when it is whole and holds key; ERMA_ENOENT when it holds
 * another key (whose tag matched) or the log has overwritten it (the slot
 * is dead: the key is not there); ERMA_EAGAIN when it is torn, i.e. read in
 * pieces while being overwritten, or superseded (read the bucket again). */
int kv_item_check(const void *item, const struct kv_ref *ref, const void *key,
                  uint32_t klen, const uint8_t **val, uint32_t *vlen);

/* ---- the kv service over erma RPC ---- */

/* Request types, from the type_base a server registers with. */
enum kv_op {
    KV_GET, KV_PUT, KV_DEL, KV_SCAN,
    KV_REGION, /* the key service (erma/keys.h): the table's key, for one-sided GETs */
    KV_OPS
};

struct erma_nexus;
struct erma_rpc;
struct erma_msgbuf;
struct kv_server;

/* Serves table kv on nx: GET, PUT and DELETE as dispatch handlers, SCAN (an
 * ordered walk from a start key) as a worker handler, so long scans never
 * hold up point requests (the nexus needs workers). Register before
 * creating the endpoint that serves; only that endpoint's thread may change
 * kv from then on. */
int kv_serve(struct erma_nexus *nx, uint8_t type_base, struct kv *kv,
             struct kv_server **out);
void kv_server_destroy(struct kv_server *srv);
/* Registers the table as a read-only region of rma and serves its key
 * with the key service (erma/keys.h) on rpc and rma, which share the
 * serving endpoint: REGION requests (type_base + KV_REGION) fetch the name
 * KV_KEYS_NAME, with the table's geometry as info (kv_remote_of()). Until
 * then REGION requests get ERMA_ENOHANDLER. ERMA_EINVAL for a NULL
 * argument, a second call, or rpc and rma on different endpoints; what
 * erma_region_register() or erma_keys_create() return. */
int kv_server_rma(struct kv_server *srv, struct erma_rpc *rpc, struct erma_rma *rma);
/* Stops the key service kv_server_rma() started (the region stays
 * registered). Call it before erma_rpc_destroy() of that rpc;
 * kv_server_destroy() calls it too. */
void kv_server_rma_end(struct kv_server *srv);
/* Keys in the ordered index (what SCAN walks). */
uint64_t kv_server_keys(struct kv_server *srv);

/* Client side: fill a request msgbuf (ERMA_E2BIG if it does not fit) and
 * send it with erma_rpc_call(rpc, session, type_base + op, ...). */
int kv_req_get(struct erma_msgbuf *req, const void *key, uint32_t klen);
int kv_req_put(struct erma_msgbuf *req, const void *key, uint32_t klen, const void *val,
               uint32_t vlen);
int kv_req_del(struct erma_msgbuf *req, const void *key, uint32_t klen);
int kv_req_scan(struct erma_msgbuf *req, const void *start, uint32_t klen, uint32_t count);
/* REGION is the key service's fetch: erma_keys_fetch(rpc, rma, session,
 * type_base + KV_REGION, KV_KEYS_NAME, ...), then kv_remote_of(). */
#define KV_KEYS_NAME "kv"
#define KV_GEOMETRY_BYTES 16 /* the info: [u64 nbuckets][u64 log_bytes] */

/* The server's answer to any request: ERMA_OK, ERMA_ENOENT, ERMA_E2BIG,
 * ERMA_EBADPKT (malformed request) or ERMA_ENOMEM. For GET, val and vlen
 * (may be NULL) get the value inside resp. */
int kv_resp(const struct erma_msgbuf *resp, const uint8_t **val, uint32_t *vlen);
/* For SCAN: the next (key, value) at *cursor (start at 0); ERMA_ENOENT at
 * the end, ERMA_EBADPKT if the response is malformed. */
int kv_resp_scan(const struct erma_msgbuf *resp, uint32_t *cursor, const uint8_t **key,
                 uint32_t *klen, const uint8_t **val, uint32_t *vlen);

/* ---- one-sided GETs ---- */

/* A server's table as a one-sided reader sees it (from a REGION fetch);
 * set peer with erma_rma_peer() for the serving endpoint. */
struct kv_remote {
    struct erma_rkey rkey;
    uint64_t nbuckets, log_bytes;
    int peer;
};

/* Fills *out (all but peer) from a REGION fetch's key and info. ERMA_OK;
 * ERMA_EBADPKT when the info is no geometry (16 bytes, both powers of
 * two); ERMA_EINVAL for a NULL argument. */
int kv_remote_of(const struct erma_rkey *key, const uint8_t *info, size_t info_len,
                 struct kv_remote *out);

/* A reader does GETs by one-sided READs on one RMA engine: READ the key's
 * bucket, find candidate items, READ the item, check its stamp and its check (a hash of its bytes).
 * (An item under 1 KiB is READ with the table's bytes after it up to a
 * multiple of 128 bytes, which the AEAD seals and opens more cheaply.)
 * A bucket being changed or an item torn by a concurrent write is read
 * again (at most max_tries times, then ERMA_EAGAIN); a torn read is never
 * returned. The reader owns the engine's completions: while it exists,
 * only kv_reader_poll() may call erma_rma_poll() on that engine.
 *
 * cb(tag, status, val, vlen) runs inside kv_reader_poll(), once per
 * GET: ERMA_OK with the value (valid during the call), ERMA_ENOENT, ERMA_EAGAIN
 * (too many torn reads), or the one-sided op's failure (ERMA_ETIMEDOUT,
 * ERMA_EAUTH, ...). */
typedef void (*kv_get_fn)(void *tag, int status, const uint8_t *val, uint32_t vlen);

struct kv_reader;

/* retries: bucket re-reads after a change or a torn item; cache_hits: GETs
 * answered by one READ at a remembered location; cache_stale: remembered
 * locations that no longer held the key's live item (one READ more). */
struct kv_reader_stats {
    uint64_t gets, reads, retries;
    uint64_t cache_hits, cache_stale;
};

/* max_gets in progress at once; max_tries per GET (0: 16). */
int kv_reader_create(struct erma_rma *rma, uint32_t max_gets, uint32_t max_tries,
                     struct kv_reader **out);
void kv_reader_destroy(struct kv_reader *r);
/* A location cache of `entries` entries (rounded up to a power of two, at
 * least 4, at most 2^24; 0: none, the default), four-way set-associative by
 * a hash of the table (peer, region, key generation) and the key: a GET of a key found before
 * READs its item alone, one round trip instead of two. The item's checks
 * stand as ever (stamp, check, the key itself), and the owner marks an
 * item superseded when its slot changes (put again, deleted, dropped for
 * room), so an item that is not the key's live one is never returned from
 * a remembered location: the GET reads the bucket, as without a cache.
 * The cache's memory (32 bytes an entry) is taken and zeroed at once.
 * ERMA_EAGAIN while GETs are in progress, ERMA_ENOMEM. */
int kv_reader_cache(struct kv_reader *r, uint32_t entries);
/* Starts loading the location cache's entry for key at remote, for a
 * kv_rget() of it soon after: the entry is a cache miss in most GETs of
 * a large key set (about 150 ns of a loaded client's time per GET), and
 * the caller's work between the two calls hides part of it (the kvcs
 * client's set-up of a GET hides most). Does nothing without a cache, for
 * a NULL argument or a key over 256 bytes. */
void kv_reader_prefetch(const struct kv_reader *r, const struct kv_remote *remote,
                        const void *key, uint32_t klen);
/* Whether the location cache knows where key's item at remote was: a
 * kv_rget() of it would take one READ, not two (false without a cache). */
bool kv_reader_cached(const struct kv_reader *r, const struct kv_remote *remote,
                      const void *key, uint32_t klen);
/* Starts a GET; ERMA_ENOSLOTS when max_gets are in progress or the engine
 * has no free command slot; keys up to 256 bytes. */
int kv_rget(struct kv_reader *r, const struct kv_remote *remote,
            const void *key, uint32_t klen, kv_get_fn cb, void *tag);
/* Takes the engine's completions and advances GETs; returns GETs finished. */
int kv_reader_poll(struct kv_reader *r);
void kv_reader_get_stats(const struct kv_reader *r, struct kv_reader_stats *out);

#endif
