/* raftkv's log (store.h), in a file and in memory: records
 * [u32 magic][u32 len][u64 index][u64 term][u16 type][u16 0][u32 0]
 * [data, padded to 8][u64 FNV-1a of all before], each field little-endian,
 * one after the other; a torn or corrupt tail is cut at load.
 *
 * After the last record the file holds zeros: it grows by LOG_PREALLOC
 * bytes of written zeros at a time, and records overwrite them. A sync
 * of an append then writes data and no metadata (the file's length and
 * blocks do not change), which is shorter, and syncs of several replicas
 * on one disk overlap better (docs/PERFORMANCE.md, Raft). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "erma/log.h"
#include "raftkv/codec.h"
#include "raftkv/store.h"

#define LOG_MAGIC 0x454c4b52u /* "RKLE" */
#define REC_HDR 32
#define LOG_PREALLOC (256u << 10)

static size_t pad8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

static size_t rec_size(uint32_t len)
{
    return REC_HDR + pad8(len) + STORE_CHECK;
}

/* The record of an entry at index, rec_size(len) bytes. */
static void rec_put(uint8_t *out, raft_index index, raft_term term, unsigned short type,
                    const void *data, uint32_t len)
{
    struct wr w = {out};
    wr_put(&w, LOG_MAGIC, 4);
    wr_put(&w, len, 4);
    wr_put(&w, index, 8);
    wr_put(&w, term, 8);
    wr_put(&w, type, 2);
    wr_put(&w, 0, 2);
    wr_put(&w, 0, 4);
    wr_bytes(&w, data, len);
    memset(w.p, 0, pad8(len) - len);
    w.p += pad8(len) - len;
    wr_put(&w, fnv1a(out, REC_HDR + pad8(len)), STORE_CHECK);
}

static void ents_free_from(struct store *st, size_t i)
{
    for (size_t j = i; j < st->nents; j++)
        free(st->ents[j].data);
    if (i < st->nents)
        st->nents = i;
}

static int ents_reserve(struct store *st, size_t n)
{
    if (st->nents + n <= st->cap)
        return 0;
    size_t cap = st->cap ? st->cap : 64;
    while (cap < st->nents + n)
        cap *= 2;
    struct store_ent *e = realloc(st->ents, cap * sizeof *e);
    if (!e)
        return RAFT_NOMEM;
    st->ents = e;
    st->cap = cap;
    return 0;
}

/* Drops the first n entries from memory. */
static void ents_drop_head(struct store *st, size_t n)
{
    if (n > st->nents)
        n = st->nents;
    for (size_t j = 0; j < n; j++)
        free(st->ents[j].data);
    memmove(st->ents, st->ents + n, (st->nents - n) * sizeof *st->ents);
    st->nents -= n;
    st->first += n;
}

int raftkv__store_log_open(struct store *st)
{
    char path[PATH_MAX];
    if (raftkv__store_path(st, "log", path))
        return RAFT_NAMETOOLONG;
    st->log_fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    struct stat sb;
    if (st->log_fd < 0 || fstat(st->log_fd, &sb) != 0)
        return RAFT_IOERR;
    st->log_alloc = (uint64_t)sb.st_size > st->log_size ? (uint64_t)sb.st_size : st->log_size;
    return 0;
}

/* Zeros written past log_alloc until n more bytes of records fit. */
static int log_room(struct store *st, size_t n)
{
    static const uint8_t zeros[64 << 10];
    if (st->log_size + n <= st->log_alloc)
        return 0;
    const uint64_t to = (st->log_size + n + LOG_PREALLOC - 1) / LOG_PREALLOC * LOG_PREALLOC;
    for (uint64_t at = st->log_alloc; at < to; at += sizeof zeros) {
        const size_t k = to - at < sizeof zeros ? (size_t)(to - at) : sizeof zeros;
        if (raftkv__store_write(st->log_fd, zeros, k, at))
            return RAFT_IOERR;
    }
    st->log_alloc = to;
    return 0;
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

/* The entry of the record at b (len bytes left), into memory; -1 when
 * there is none (the end, a torn or corrupt record, an index out of
 * order). */
static int rec_read(struct store *st, const uint8_t *b, size_t len, uint64_t off)
{
    if (len < REC_HDR + STORE_CHECK)
        return -1;
    struct rd r = {b, len, false};
    const uint32_t magic = (uint32_t)rd_get(&r, 4), dlen = (uint32_t)rd_get(&r, 4);
    const raft_index index = rd_get(&r, 8);
    const raft_term term = rd_get(&r, 8);
    const uint16_t type = (uint16_t)rd_get(&r, 2);
    if (magic != LOG_MAGIC || dlen > ERMA_MAX_MSG_SIZE || rec_size(dlen) > len)
        return -1;
    if (erma_get_le(b + REC_HDR + pad8(dlen), STORE_CHECK) != fnv1a(b, REC_HDR + pad8(dlen)))
        return -1;
    if (st->nents == 0)
        st->first = index;
    else if (index != st->first + st->nents)
        return -1;
    const int rc = ents_reserve(st, 1);
    if (rc)
        return rc;
    struct store_ent *e = &st->ents[st->nents];
    e->data = malloc(dlen ? dlen : 1);
    if (!e->data)
        return RAFT_NOMEM;
    memcpy(e->data, b + REC_HDR, dlen);
    e->term = term;
    e->type = type;
    e->len = dlen;
    e->off = off;
    st->nents++;
    return 0;
}

/* Reads the log file into memory, cutting a torn or corrupt tail. */
int raftkv__store_log_read(struct store *st)
{
    uint8_t *b;
    size_t len;
    int rc = raftkv__store_read(st, "log", &b, &len);
    if (rc)
        return rc;
    size_t at = 0;
    while (b && (rc = rec_read(st, b + at, len - at, at)) == 0)
        at += rec_size(st->ents[st->nents - 1].len);
    const bool zeros = b && all_zero(b + at, len - at); /* the preallocated rest */
    free(b);
    if (rc > 0)
        return rc;
    if (at < len && !zeros) {
        ERMA_NOTICE("raftkv: %s/log: cut a torn tail of %zu bytes", st->dir, len - at);
        char path[PATH_MAX];
        if (raftkv__store_path(st, "log", path) || truncate(path, (off_t)at) != 0)
            return RAFT_IOERR;
    }
    st->log_size = at;
    return 0;
}

/* Rewrites the log file with the entries in memory (after dropping some),
 * zeros after them as log_room would leave. */
static int log_rewrite(struct store *st)
{
    size_t total = 0;
    for (size_t i = 0; i < st->nents; i++)
        total += rec_size(st->ents[i].len);
    const size_t alloc = (total / LOG_PREALLOC + 1) * LOG_PREALLOC;
    uint8_t *buf = calloc(1, alloc);
    if (!buf)
        return RAFT_NOMEM;
    size_t at = 0;
    for (size_t i = 0; i < st->nents; i++) {
        struct store_ent *e = &st->ents[i];
        rec_put(buf + at, st->first + i, e->term, e->type, e->data, e->len);
        e->off = at;
        at += rec_size(e->len);
    }
    int rc = raftkv__store_replace(st, "log", buf, alloc);
    free(buf);
    if (rc)
        return rc;
    close(st->log_fd);
    st->log_size = total;
    return raftkv__store_log_open(st);
}

int raftkv__store_append(struct store *st, const struct raft_entry *es, unsigned n)
{
    size_t total = 0;
    for (unsigned i = 0; i < n; i++)
        total += rec_size((uint32_t)es[i].buf.len);
    int rc = ents_reserve(st, n);
    if (rc)
        return rc;
    uint8_t *buf = malloc(total ? total : 1);
    if (!buf)
        return RAFT_NOMEM;
    size_t at = 0;
    for (unsigned i = 0; i < n; i++) {
        const uint32_t len = (uint32_t)es[i].buf.len;
        rec_put(buf + at, st->first + st->nents + i, es[i].term, es[i].type, es[i].buf.base, len);
        at += rec_size(len);
    }
    rc = log_room(st, total);
    if (!rc)
        rc = raftkv__store_write(st->log_fd, buf, total, st->log_size);
    if (rc) {
        free(buf);
        snprintf(st->errmsg, RAFT_ERRMSG_BUF_SIZE, "write %.160s/log: %.60s", st->dir,
                 strerror(errno));
        return rc;
    }
    at = 0;
    for (unsigned i = 0; i < n; i++) {
        const uint32_t len = (uint32_t)es[i].buf.len;
        struct store_ent *e = &st->ents[st->nents];
        e->data = malloc(len ? len : 1);
        if (!e->data) {
            free(buf);
            return RAFT_NOMEM;
        }
        if (len)
            memcpy(e->data, es[i].buf.base, len);
        e->term = es[i].term;
        e->type = es[i].type;
        e->len = len;
        e->off = st->log_size + at;
        at += rec_size(len);
        st->nents++;
    }
    free(buf);
    st->log_size += total;
    st->need_sync = true;
    return 0;
}

int raftkv__store_truncate(struct store *st, raft_index index)
{
    if (index >= st->first + st->nents)
        return 0;
    if (index <= st->first) {
        ents_free_from(st, 0);
        st->first = index;
        return log_rewrite(st);
    }
    const size_t keep = (size_t)(index - st->first);
    const uint64_t off = st->ents[keep].off;
    ents_free_from(st, keep);
    if (ftruncate(st->log_fd, (off_t)off) != 0) /* no old record may follow the new ones */
        return RAFT_IOERR;
    st->log_size = st->log_alloc = off;
    st->need_sync = true;
    return 0;
}

int raftkv__store_compact(struct store *st, raft_index index, unsigned trailing)
{
    if (trailing == 0) {
        ents_free_from(st, 0);
        st->first = index + 1;
        return log_rewrite(st);
    }
    if (index > trailing && index - trailing >= st->first) {
        ents_drop_head(st, (size_t)(index - trailing - st->first + 1));
        return log_rewrite(st);
    }
    return 0;
}

int raftkv__store_entries_copy(const struct store *st, struct raft_entry **out)
{
    *out = NULL;
    if (st->nents == 0)
        return 0;
    size_t total = 0;
    for (size_t i = 0; i < st->nents; i++)
        total += st->ents[i].len;
    uint8_t *batch = raft_malloc(total ? total : 1);
    struct raft_entry *es = raft_calloc(st->nents, sizeof *es);
    if (!batch || !es) {
        raft_free(batch);
        raft_free(es);
        return RAFT_NOMEM;
    }
    size_t at = 0;
    for (size_t i = 0; i < st->nents; i++) {
        memcpy(batch + at, st->ents[i].data, st->ents[i].len);
        es[i].term = st->ents[i].term;
        es[i].type = st->ents[i].type;
        es[i].buf.base = batch + at;
        es[i].buf.len = st->ents[i].len;
        es[i].batch = batch;
        at += st->ents[i].len;
    }
    *out = es;
    return 0;
}

void raftkv__store_log_close(struct store *st)
{
    ents_free_from(st, 0);
    free(st->ents);
    st->ents = NULL;
    if (st->log_fd >= 0)
        close(st->log_fd);
    st->log_fd = -1;
}
