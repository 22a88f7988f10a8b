/* A struct raft_io over erma RPCs and a directory (raftkv/raftkv.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "erma/clock.h"
#include "erma/log.h"
#include "erma/rand.h"
#include "erma/wire.h"
#include "raftkv/raftkv.h"

#define LOG_MAGIC 0x454c4b52u           /* "RKLE" */
#define META_MAGIC 0x4154454d4b52ull    /* "RKMETA" */
#define SNAP_MAGIC 0x50414e534b52ull    /* "RKSNAP" */
#define REC_HDR 32
#define META_LEN 32
#define SNAP_HDR 48
#define ADDR_MAX 128
#define MAX_ENTRIES (1u << 24) /* per message, a sanity bound */

/* ---- little-endian codec with bounds ---- */

struct wr {
    uint8_t *p;
};

static void w8(struct wr *w, uint8_t v)
{
    *w->p++ = v;
}

static void w16(struct wr *w, uint16_t v)
{
    memcpy(w->p, &v, 2);
    w->p += 2;
}

static void w32(struct wr *w, uint32_t v)
{
    memcpy(w->p, &v, 4);
    w->p += 4;
}

static void w64(struct wr *w, uint64_t v)
{
    memcpy(w->p, &v, 8);
    w->p += 8;
}

static void wbytes(struct wr *w, const void *b, size_t n)
{
    if (n)
        memcpy(w->p, b, n);
    w->p += n;
}

struct rd {
    const uint8_t *p;
    size_t left;
    bool bad;
};

static const uint8_t *rtake(struct rd *r, size_t n)
{
    if (r->bad || r->left < n) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += n;
    r->left -= n;
    return p;
}

static uint8_t r8(struct rd *r)
{
    const uint8_t *p = rtake(r, 1);
    return p ? *p : 0;
}

static uint16_t r16(struct rd *r)
{
    uint16_t v = 0;
    const uint8_t *p = rtake(r, 2);
    if (p)
        memcpy(&v, p, 2);
    return v;
}

static uint32_t r32(struct rd *r)
{
    uint32_t v = 0;
    const uint8_t *p = rtake(r, 4);
    if (p)
        memcpy(&v, p, 4);
    return v;
}

static uint64_t r64(struct rd *r)
{
    uint64_t v = 0;
    const uint8_t *p = rtake(r, 8);
    if (p)
        memcpy(&v, p, 8);
    return v;
}

static uint64_t fnv1a(const void *data, size_t n)
{
    const uint8_t *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static size_t pad8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

/* ---- configurations: u32 n, n x [u64 id][u8 role][u16 len][address] ---- */

static size_t conf_size(const struct raft_configuration *c)
{
    size_t n = 4;
    for (unsigned i = 0; i < c->n; i++)
        n += 11 + strlen(c->servers[i].address);
    return n;
}

static void conf_put(struct wr *w, const struct raft_configuration *c)
{
    w32(w, c->n);
    for (unsigned i = 0; i < c->n; i++) {
        const size_t len = strlen(c->servers[i].address);
        w64(w, c->servers[i].id);
        w8(w, (uint8_t)c->servers[i].role);
        w16(w, (uint16_t)len);
        wbytes(w, c->servers[i].address, len);
    }
}

/* Into an initialized c; false when malformed (c then holds what was read). */
static bool conf_get(struct rd *r, struct raft_configuration *c)
{
    const uint32_t n = r32(r);
    if (n > 1024)
        return false;
    for (uint32_t i = 0; i < n && !r->bad; i++) {
        const raft_id id = r64(r);
        const int role = r8(r);
        const uint16_t len = r16(r);
        const uint8_t *a = rtake(r, len);
        char addr[ADDR_MAX];
        if (!a || len >= sizeof addr)
            return false;
        memcpy(addr, a, len);
        addr[len] = 0;
        if (raft_configuration_add(c, id, addr, role) != 0)
            return false;
    }
    return !r->bad;
}

/* ---- state ---- */

struct ent {
    raft_term term;
    unsigned short type;
    uint32_t len;
    uint8_t *data;
    uint64_t off; /* of its record in the log file */
};

struct peer {
    raft_id id;
    char addr[ADDR_MAX];
    int sess;        /* -1: none */
    bool connected;
    uint64_t retry_at; /* no new session before this */
    uint32_t inflight;
};

struct rkio;

struct send_op {
    struct send_op *next, *prev;
    struct rkio *k;
    struct raft_io_send *req;
    raft_io_send_cb cb; /* NULL once answered (at close) */
    struct erma_msgbuf msg, resp;
    int peer, status;
};

enum later_kind { L_APPEND, L_SNAP_PUT, L_SNAP_GET };

struct later {
    struct later *next;
    enum later_kind kind;
    void *req;
    union {
        raft_io_append_cb append;
        raft_io_snapshot_put_cb put;
        raft_io_snapshot_get_cb get;
    } cb;
};

struct inmsg {
    struct inmsg *next;
    struct raft_message m;
    char addr[ADDR_MAX];
};

struct rkio {
    struct raft_io *io;
    struct raftkv_io_cfg cfg;
    char dir[PATH_MAX];
    struct erma_rpc *rpc;
    raft_id id;
    char addr[ADDR_MAX];
    unsigned msecs;
    raft_io_tick_cb tick;
    raft_io_recv_cb recv;
    uint64_t next_tick;
    bool started, closed;
    struct erma_rand rnd;
    /* durable state, mirrored in memory */
    raft_term term;
    raft_id vote;
    int log_fd;
    uint64_t log_size;
    struct ent *ents;
    size_t nents, cap;
    raft_index first; /* index of ents[0]; the next append goes at first + nents */
    struct {
        bool have;
        raft_index index, conf_index;
        raft_term term;
        struct raft_configuration conf;
        uint8_t *data;
        uint64_t len;
    } snap;
    bool need_sync;
    struct peer peers[RAFTKV_MAX_PEERS];
    unsigned npeers;
    struct send_op inflight;     /* list head */
    struct send_op *done, **done_tail;
    struct later *later, **later_tail;
    struct inmsg *inbox, **inbox_tail;
    struct raftkv_io_stats stats;
};

/* ---- files ---- */

static int path_of(const struct rkio *k, const char *name, char *out)
{
    return (size_t)snprintf(out, PATH_MAX, "%s/%s", k->dir, name) < PATH_MAX ? 0 : RAFT_NAMETOOLONG;
}

static int sync_fd(const struct rkio *k, int fd)
{
    if (k->cfg.no_fsync)
        return 0;
    return fdatasync(fd) == 0 ? 0 : RAFT_IOERR;
}

static int sync_dir(const struct rkio *k)
{
    if (k->cfg.no_fsync)
        return 0;
    const int fd = open(k->dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return RAFT_IOERR;
    const int rc = fsync(fd) == 0 ? 0 : RAFT_IOERR;
    close(fd);
    return rc;
}

static int write_all(int fd, const void *data, size_t n)
{
    const uint8_t *p = data;
    while (n) {
        const ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return RAFT_IOERR;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* name's new content, durable before it replaces the old: tmp, fsync,
 * rename, fsync of the directory. */
static int replace_file(struct rkio *k, const char *name, const void *a, size_t alen,
                        const void *b, size_t blen)
{
    char path[PATH_MAX], tmp[PATH_MAX], tname[64];
    snprintf(tname, sizeof tname, "%s.tmp", name);
    if (path_of(k, name, path) || path_of(k, tname, tmp))
        return RAFT_NAMETOOLONG;
    const int fd = open(tmp, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(k->io->errmsg, sizeof k->io->errmsg, "open %.160s: %.60s", tmp, strerror(errno));
        return RAFT_IOERR;
    }
    int rc = write_all(fd, a, alen);
    if (!rc && blen)
        rc = write_all(fd, b, blen);
    if (!rc)
        rc = sync_fd(k, fd);
    close(fd);
    if (!rc && rename(tmp, path) != 0)
        rc = RAFT_IOERR;
    if (!rc)
        rc = sync_dir(k);
    if (rc)
        snprintf(k->io->errmsg, sizeof k->io->errmsg, "write %.200s failed", path);
    return rc;
}

/* The whole file, malloc'd (NULL and 0 when absent). */
static int read_whole(const struct rkio *k, const char *name, uint8_t **out, size_t *len)
{
    char path[PATH_MAX];
    *out = NULL;
    *len = 0;
    if (path_of(k, name, path))
        return RAFT_NAMETOOLONG;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : RAFT_IOERR;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return RAFT_IOERR;
    }
    uint8_t *buf = malloc(st.st_size ? (size_t)st.st_size : 1);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
        const ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (!buf)
        return RAFT_NOMEM;
    *out = buf;
    *len = got;
    return 0;
}

static int meta_write(struct rkio *k, raft_term term, raft_id vote)
{
    uint8_t b[META_LEN];
    struct wr w = {b};
    w64(&w, META_MAGIC);
    w64(&w, term);
    w64(&w, vote);
    w64(&w, fnv1a(b, 24));
    const int rc = replace_file(k, "meta", b, sizeof b, NULL, 0);
    if (rc == 0) {
        k->term = term;
        k->vote = vote;
    }
    return rc;
}

static int meta_read(struct rkio *k)
{
    uint8_t *b;
    size_t len;
    int rc = read_whole(k, "meta", &b, &len);
    if (rc || !b)
        return rc;
    struct rd r = {b, len, false};
    const uint64_t magic = r64(&r), term = r64(&r), vote = r64(&r), check = r64(&r);
    if (r.bad || magic != META_MAGIC || check != fnv1a(b, 24))
        rc = RAFT_CORRUPT;
    else {
        k->term = term;
        k->vote = vote;
    }
    free(b);
    return rc;
}

/* One record of entry e at index into out (rec_size(e->len) bytes). */
static size_t rec_size(uint32_t len)
{
    return REC_HDR + pad8(len) + 8;
}

static void rec_put(uint8_t *out, raft_index index, raft_term term, unsigned short type,
                    const void *data, uint32_t len)
{
    struct wr w = {out};
    w32(&w, LOG_MAGIC);
    w32(&w, len);
    w64(&w, index);
    w64(&w, term);
    w16(&w, type);
    w16(&w, 0);
    w32(&w, 0);
    wbytes(&w, data, len);
    memset(w.p, 0, pad8(len) - len);
    w.p += pad8(len) - len;
    w64(&w, fnv1a(out, REC_HDR + pad8(len)));
}

static void ents_free_from(struct rkio *k, size_t i)
{
    for (size_t j = i; j < k->nents; j++)
        free(k->ents[j].data);
    if (i < k->nents)
        k->nents = i;
}

static int ents_reserve(struct rkio *k, size_t n)
{
    if (k->nents + n <= k->cap)
        return 0;
    size_t cap = k->cap ? k->cap : 64;
    while (cap < k->nents + n)
        cap *= 2;
    struct ent *e = realloc(k->ents, cap * sizeof *e);
    if (!e)
        return RAFT_NOMEM;
    k->ents = e;
    k->cap = cap;
    return 0;
}

/* Drops the first n entries from memory. */
static void ents_drop_head(struct rkio *k, size_t n)
{
    if (n > k->nents)
        n = k->nents;
    for (size_t j = 0; j < n; j++)
        free(k->ents[j].data);
    memmove(k->ents, k->ents + n, (k->nents - n) * sizeof *k->ents);
    k->nents -= n;
    k->first += n;
}

static int log_open(struct rkio *k)
{
    char path[PATH_MAX];
    if (path_of(k, "log", path))
        return RAFT_NAMETOOLONG;
    k->log_fd = open(path, O_CREAT | O_WRONLY | O_APPEND | O_CLOEXEC, 0600);
    return k->log_fd < 0 ? RAFT_IOERR : 0;
}

/* Reads the log file into memory, cutting a torn or corrupt tail. */
static int log_read(struct rkio *k)
{
    uint8_t *b;
    size_t len;
    int rc = read_whole(k, "log", &b, &len);
    if (rc)
        return rc;
    size_t at = 0;
    while (b && len - at >= REC_HDR + 8) {
        struct rd r = {b + at, len - at, false};
        const uint32_t magic = r32(&r), dlen = r32(&r);
        const raft_index index = r64(&r);
        const raft_term term = r64(&r);
        const uint16_t type = r16(&r);
        if (magic != LOG_MAGIC || dlen > ERMA_MAX_MSG_SIZE || rec_size(dlen) > len - at)
            break;
        uint64_t check;
        memcpy(&check, b + at + REC_HDR + pad8(dlen), 8);
        if (check != fnv1a(b + at, REC_HDR + pad8(dlen)))
            break;
        if (k->nents == 0)
            k->first = index;
        else if (index != k->first + k->nents)
            break;
        if ((rc = ents_reserve(k, 1)) != 0)
            break;
        struct ent *e = &k->ents[k->nents];
        e->data = malloc(dlen ? dlen : 1);
        if (!e->data) {
            rc = RAFT_NOMEM;
            break;
        }
        memcpy(e->data, b + at + REC_HDR, dlen);
        e->term = term;
        e->type = type;
        e->len = dlen;
        e->off = at;
        k->nents++;
        at += rec_size(dlen);
    }
    free(b);
    if (rc)
        return rc;
    if (at < len) {
        ERMA_NOTICE("raftkv: %s/log: cut a torn tail of %zu bytes", k->dir, len - at);
        char path[PATH_MAX];
        if (path_of(k, "log", path) || truncate(path, (off_t)at) != 0)
            return RAFT_IOERR;
    }
    k->log_size = at;
    return 0;
}

/* Rewrites the log file with the entries in memory (after dropping some). */
static int log_rewrite(struct rkio *k)
{
    size_t total = 0;
    for (size_t i = 0; i < k->nents; i++)
        total += rec_size(k->ents[i].len);
    uint8_t *buf = malloc(total ? total : 1);
    if (!buf)
        return RAFT_NOMEM;
    size_t at = 0;
    for (size_t i = 0; i < k->nents; i++) {
        struct ent *e = &k->ents[i];
        rec_put(buf + at, k->first + i, e->term, e->type, e->data, e->len);
        e->off = at;
        at += rec_size(e->len);
    }
    int rc = replace_file(k, "log", buf, total, NULL, 0);
    free(buf);
    if (rc)
        return rc;
    close(k->log_fd);
    k->log_size = total;
    return log_open(k);
}

/* Appends n entries at the next index to file and memory. */
static int log_append(struct rkio *k, const struct raft_entry *es, unsigned n)
{
    size_t total = 0;
    for (unsigned i = 0; i < n; i++)
        total += rec_size((uint32_t)es[i].buf.len);
    int rc = ents_reserve(k, n);
    if (rc)
        return rc;
    uint8_t *buf = malloc(total ? total : 1);
    if (!buf)
        return RAFT_NOMEM;
    size_t at = 0;
    for (unsigned i = 0; i < n; i++) {
        const uint32_t len = (uint32_t)es[i].buf.len;
        rec_put(buf + at, k->first + k->nents + i, es[i].term, es[i].type, es[i].buf.base, len);
        at += rec_size(len);
    }
    rc = write_all(k->log_fd, buf, total);
    if (rc) {
        free(buf);
        snprintf(k->io->errmsg, sizeof k->io->errmsg, "write %.160s/log: %.60s", k->dir,
                 strerror(errno));
        return rc;
    }
    at = 0;
    for (unsigned i = 0; i < n; i++) {
        const uint32_t len = (uint32_t)es[i].buf.len;
        struct ent *e = &k->ents[k->nents];
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
        e->off = k->log_size + at;
        at += rec_size(len);
        k->nents++;
    }
    free(buf);
    k->log_size += total;
    k->need_sync = true;
    k->stats.entries_written += n;
    return 0;
}

static int snap_write(struct rkio *k, const struct raft_snapshot *s)
{
    uint64_t dlen = 0;
    for (unsigned i = 0; i < s->n_bufs; i++)
        dlen += s->bufs[i].len;
    const size_t clen = conf_size(&s->configuration);
    const size_t total = SNAP_HDR + clen + dlen + 8;
    uint8_t *buf = malloc(total);
    uint8_t *data = malloc(dlen ? dlen : 1);
    if (!buf || !data) {
        free(buf);
        free(data);
        return RAFT_NOMEM;
    }
    struct wr w = {buf};
    w64(&w, SNAP_MAGIC);
    w64(&w, s->index);
    w64(&w, s->term);
    w64(&w, s->configuration_index);
    w32(&w, (uint32_t)clen);
    w32(&w, 0);
    w64(&w, dlen);
    conf_put(&w, &s->configuration);
    uint8_t *d = w.p;
    for (unsigned i = 0; i < s->n_bufs; i++)
        wbytes(&w, s->bufs[i].base, s->bufs[i].len);
    memcpy(data, d, dlen);
    w64(&w, fnv1a(buf, total - 8));
    struct raft_configuration conf;
    raft_configuration_init(&conf);
    struct rd r = {buf + SNAP_HDR, clen, false};
    int rc = conf_get(&r, &conf) ? 0 : RAFT_NOMEM;
    if (!rc)
        rc = replace_file(k, "snap", buf, total, NULL, 0);
    free(buf);
    if (rc) {
        raft_configuration_close(&conf);
        free(data);
        return rc;
    }
    if (k->snap.have) {
        raft_configuration_close(&k->snap.conf);
        free(k->snap.data);
    }
    k->snap.have = true;
    k->snap.index = s->index;
    k->snap.term = s->term;
    k->snap.conf_index = s->configuration_index;
    k->snap.conf = conf;
    k->snap.data = data;
    k->snap.len = dlen;
    return 0;
}

static int snap_read(struct rkio *k)
{
    uint8_t *b;
    size_t len;
    int rc = read_whole(k, "snap", &b, &len);
    if (rc || !b)
        return rc;
    struct rd r = {b, len, false};
    const uint64_t magic = r64(&r), index = r64(&r), term = r64(&r), conf_index = r64(&r);
    const uint32_t clen = r32(&r);
    (void)r32(&r);
    const uint64_t dlen = r64(&r);
    rc = RAFT_CORRUPT;
    if (!r.bad && magic == SNAP_MAGIC && len >= SNAP_HDR + 8 && clen <= len &&
        dlen <= len - SNAP_HDR - 8 - clen && SNAP_HDR + clen + dlen + 8 == len) {
        uint64_t check;
        memcpy(&check, b + len - 8, 8);
        struct rd c = {b + SNAP_HDR, clen, false};
        raft_configuration_init(&k->snap.conf);
        if (check == fnv1a(b, len - 8) && conf_get(&c, &k->snap.conf) &&
            (k->snap.data = malloc(dlen ? dlen : 1)) != NULL) {
            memcpy(k->snap.data, b + SNAP_HDR + clen, dlen);
            k->snap.have = true;
            k->snap.index = index;
            k->snap.term = term;
            k->snap.conf_index = conf_index;
            k->snap.len = dlen;
            rc = 0;
        } else {
            raft_configuration_close(&k->snap.conf);
        }
    }
    free(b);
    return rc;
}

/* ---- deferred work ---- */

static void later_push(struct rkio *k, enum later_kind kind, void *req, void *cb)
{
    struct later *l = calloc(1, sizeof *l);
    if (!l)
        abort(); /* a callback raft waits for cannot be dropped */
    l->kind = kind;
    l->req = req;
    if (kind == L_APPEND)
        l->cb.append = (raft_io_append_cb)cb;
    else if (kind == L_SNAP_PUT)
        l->cb.put = (raft_io_snapshot_put_cb)cb;
    else
        l->cb.get = (raft_io_snapshot_get_cb)cb;
    *k->later_tail = l;
    k->later_tail = &l->next;
}

static void done_push(struct rkio *k, struct send_op *op)
{
    op->next = NULL;
    *k->done_tail = op;
    k->done_tail = &op->next;
}

static void inflight_unlink(struct send_op *op)
{
    op->prev->next = op->next;
    op->next->prev = op->prev;
}

/* A copy of the snapshot for raft (raft_malloc'd, one buffer). */
static struct raft_snapshot *snap_copy(const struct rkio *k)
{
    struct raft_snapshot *s = raft_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->index = k->snap.index;
    s->term = k->snap.term;
    s->configuration_index = k->snap.conf_index;
    raft_configuration_init(&s->configuration);
    for (unsigned i = 0; i < k->snap.conf.n; i++) {
        const struct raft_server *v = &k->snap.conf.servers[i];
        if (raft_configuration_add(&s->configuration, v->id, v->address, v->role) != 0)
            goto fail;
    }
    s->bufs = raft_malloc(sizeof *s->bufs);
    if (!s->bufs)
        goto fail;
    s->n_bufs = 1;
    s->bufs[0].len = k->snap.len;
    s->bufs[0].base = raft_malloc(k->snap.len ? k->snap.len : 1);
    if (!s->bufs[0].base) {
        raft_free(s->bufs);
        goto fail;
    }
    memcpy(s->bufs[0].base, k->snap.data, k->snap.len);
    return s;
fail:
    raft_configuration_close(&s->configuration);
    raft_free(s);
    return NULL;
}

static void fire_later(struct rkio *k, struct later *l, int status)
{
    switch (l->kind) {
    case L_APPEND:
        l->cb.append(l->req, status);
        break;
    case L_SNAP_PUT:
        l->cb.put(l->req, status);
        break;
    case L_SNAP_GET: {
        struct raft_snapshot *s = NULL;
        if (status == 0 && !k->snap.have)
            status = RAFT_NOTFOUND;
        if (status == 0 && !(s = snap_copy(k)))
            status = RAFT_NOMEM;
        if (s)
            k->stats.snapshots_sent++;
        l->cb.get(l->req, s, status);
        break;
    }
    }
    free(l);
}

/* Frees what a received message owns (never handed to raft). */
static void inmsg_free(struct inmsg *im)
{
    struct raft_message *m = &im->m;
    if (m->type == RAFT_IO_APPEND_ENTRIES && m->append_entries.entries) {
        raft_free(m->append_entries.entries[0].batch);
        raft_free(m->append_entries.entries);
    } else if (m->type == RAFT_IO_INSTALL_SNAPSHOT) {
        raft_configuration_close(&m->install_snapshot.conf);
        raft_free(m->install_snapshot.data.base);
    }
    free(im);
}

/* ---- peers and sessions ---- */

static struct peer *peer_find(struct rkio *k, raft_id id, const char *addr)
{
    for (unsigned i = 0; i < k->npeers; i++)
        if (k->peers[i].id == id && (!addr || strcmp(k->peers[i].addr, addr) == 0))
            return &k->peers[i];
    if (!addr || strlen(addr) >= ADDR_MAX || k->npeers == RAFTKV_MAX_PEERS)
        return NULL;
    for (unsigned i = 0; i < k->npeers; i++) /* an id that moved to another address */
        if (k->peers[i].id == id && k->peers[i].sess < 0) {
            snprintf(k->peers[i].addr, ADDR_MAX, "%s", addr);
            return &k->peers[i];
        }
    struct peer *p = &k->peers[k->npeers++];
    memset(p, 0, sizeof *p);
    p->id = id;
    p->sess = -1;
    snprintf(p->addr, ADDR_MAX, "%s", addr);
    return p;
}

/* Opens a session to p unless one is there or the last failed recently. */
static void peer_connect(struct rkio *k, struct peer *p, uint64_t now)
{
    if (p->sess >= 0 || now < p->retry_at || !k->rpc)
        return;
    p->connected = false;
    p->sess = erma_session_create(k->rpc, p->addr, 0);
    if (p->sess < 0) {
        p->sess = -1;
        p->retry_at = now + k->cfg.reconnect_ns;
    }
}

void raftkv_io_sm(struct erma_rpc *rpc, int session, enum erma_sm_event ev, int err,
                  void *ctx)
{
    (void)rpc;
    (void)err;
    struct rkio *k = ((struct raft_io *)ctx)->impl;
    for (unsigned i = 0; i < k->npeers; i++) {
        struct peer *p = &k->peers[i];
        if (p->sess != session)
            continue;
        if (ev == ERMA_SM_CONNECTED) {
            p->connected = true;
        } else {
            p->sess = -1;
            p->connected = false;
            p->retry_at = erma_now_ns() + k->cfg.reconnect_ns;
        }
    }
}

int raftkv_io_connect(struct raft_io *io, raft_id id, const char *address)
{
    struct rkio *k = io->impl;
    struct peer *p = peer_find(k, id, address);
    if (!p)
        return ERMA_EINVAL;
    peer_connect(k, p, erma_now_ns());
    return ERMA_OK;
}

/* ---- messages ---- */

static size_t msg_size(const struct rkio *k, const struct raft_message *m, bool *ok)
{
    size_t n = 8 + 2 + strlen(k->addr);
    *ok = true;
    switch (m->type) {
    case RAFT_IO_REQUEST_VOTE:
        return n + 34;
    case RAFT_IO_REQUEST_VOTE_RESULT:
        return n + 10;
    case RAFT_IO_APPEND_ENTRIES: {
        const struct raft_append_entries *a = &m->append_entries;
        n += 36 + (size_t)a->n_entries * 14;
        for (unsigned i = 0; i < a->n_entries; i++)
            n += a->entries[i].buf.len;
        return n;
    }
    case RAFT_IO_APPEND_ENTRIES_RESULT:
        return n + 24;
    case RAFT_IO_INSTALL_SNAPSHOT:
        return n + 32 + conf_size(&m->install_snapshot.conf) + 8 +
               m->install_snapshot.data.len;
    case RAFT_IO_TIMEOUT_NOW:
        return n + 24;
    }
    *ok = false;
    return 0;
}

static void msg_put(const struct rkio *k, const struct raft_message *m, uint8_t *out)
{
    struct wr w = {out};
    const size_t alen = strlen(k->addr);
    w64(&w, k->id);
    w16(&w, (uint16_t)alen);
    wbytes(&w, k->addr, alen);
    switch (m->type) {
    case RAFT_IO_REQUEST_VOTE: {
        const struct raft_request_vote *v = &m->request_vote;
        w64(&w, v->term);
        w64(&w, v->candidate_id);
        w64(&w, v->last_log_index);
        w64(&w, v->last_log_term);
        w8(&w, v->disrupt_leader);
        w8(&w, v->pre_vote);
        break;
    }
    case RAFT_IO_REQUEST_VOTE_RESULT: {
        const struct raft_request_vote_result *v = &m->request_vote_result;
        w64(&w, v->term);
        w8(&w, v->vote_granted);
        w8(&w, (uint8_t)v->pre_vote);
        break;
    }
    case RAFT_IO_APPEND_ENTRIES: {
        const struct raft_append_entries *a = &m->append_entries;
        w64(&w, a->term);
        w64(&w, a->prev_log_index);
        w64(&w, a->prev_log_term);
        w64(&w, a->leader_commit);
        w32(&w, a->n_entries);
        for (unsigned i = 0; i < a->n_entries; i++) {
            w64(&w, a->entries[i].term);
            w16(&w, a->entries[i].type);
            w32(&w, (uint32_t)a->entries[i].buf.len);
        }
        for (unsigned i = 0; i < a->n_entries; i++)
            wbytes(&w, a->entries[i].buf.base, a->entries[i].buf.len);
        break;
    }
    case RAFT_IO_APPEND_ENTRIES_RESULT: {
        const struct raft_append_entries_result *a = &m->append_entries_result;
        w64(&w, a->term);
        w64(&w, a->rejected);
        w64(&w, a->last_log_index);
        break;
    }
    case RAFT_IO_INSTALL_SNAPSHOT: {
        const struct raft_install_snapshot *s = &m->install_snapshot;
        w64(&w, s->term);
        w64(&w, s->last_index);
        w64(&w, s->last_term);
        w64(&w, s->conf_index);
        conf_put(&w, &s->conf);
        w64(&w, s->data.len);
        wbytes(&w, s->data.base, s->data.len);
        break;
    }
    case RAFT_IO_TIMEOUT_NOW: {
        const struct raft_timeout_now *t = &m->timeout_now;
        w64(&w, t->term);
        w64(&w, t->last_log_index);
        w64(&w, t->last_log_term);
        break;
    }
    }
}

/* Decodes a received message; NULL when malformed (or out of memory). */
static struct inmsg *msg_get(unsigned type, const uint8_t *data, size_t len)
{
    struct inmsg *im = calloc(1, sizeof *im);
    if (!im)
        return NULL;
    struct raft_message *m = &im->m;
    struct rd r = {data, len, false};
    m->type = (unsigned short)type;
    m->server_id = r64(&r);
    const uint16_t alen = r16(&r);
    const uint8_t *a = rtake(&r, alen);
    if (!a || alen >= ADDR_MAX || m->server_id == 0) {
        free(im);
        return NULL;
    }
    memcpy(im->addr, a, alen);
    im->addr[alen] = 0;
    m->server_address = im->addr;
    switch (type) {
    case RAFT_IO_REQUEST_VOTE: {
        struct raft_request_vote *v = &m->request_vote;
        v->term = r64(&r);
        v->candidate_id = r64(&r);
        v->last_log_index = r64(&r);
        v->last_log_term = r64(&r);
        v->disrupt_leader = r8(&r) != 0;
        v->pre_vote = r8(&r) != 0;
        break;
    }
    case RAFT_IO_REQUEST_VOTE_RESULT: {
        struct raft_request_vote_result *v = &m->request_vote_result;
        v->term = r64(&r);
        v->vote_granted = r8(&r) != 0;
        const uint8_t pv = r8(&r);
        if (pv > raft_tribool_false)
            r.bad = true;
        v->pre_vote = (raft_tribool)pv;
        break;
    }
    case RAFT_IO_APPEND_ENTRIES: {
        struct raft_append_entries *ae = &m->append_entries;
        ae->term = r64(&r);
        ae->prev_log_index = r64(&r);
        ae->prev_log_term = r64(&r);
        ae->leader_commit = r64(&r);
        const uint32_t n = r32(&r);
        if (r.bad || n > MAX_ENTRIES || (uint64_t)n * 14 > r.left)
            break;
        if (n == 0)
            break;
        const uint8_t *hdrs = rtake(&r, (size_t)n * 14);
        uint64_t total = 0;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t l;
            memcpy(&l, hdrs + 14 * i + 10, 4);
            total += l;
        }
        if (total != r.left) {
            r.bad = true;
            break;
        }
        /* One batch for every entry of the message, as libraft requires. */
        uint8_t *batch = raft_malloc(total ? total : 1);
        struct raft_entry *es = raft_calloc(n, sizeof *es);
        if (!batch || !es) {
            raft_free(batch);
            raft_free(es);
            r.bad = true;
            break;
        }
        memcpy(batch, r.p, total);
        uint64_t at = 0;
        for (uint32_t i = 0; i < n; i++) {
            const uint8_t *h = hdrs + 14 * i;
            uint16_t t;
            uint32_t l;
            memcpy(&es[i].term, h, 8);
            memcpy(&t, h + 8, 2);
            memcpy(&l, h + 10, 4);
            es[i].type = t;
            es[i].buf.base = batch + at;
            es[i].buf.len = l;
            es[i].batch = batch;
            at += l;
        }
        ae->entries = es;
        ae->n_entries = n;
        r.left = 0;
        break;
    }
    case RAFT_IO_APPEND_ENTRIES_RESULT: {
        struct raft_append_entries_result *a = &m->append_entries_result;
        a->term = r64(&r);
        a->rejected = r64(&r);
        a->last_log_index = r64(&r);
        break;
    }
    case RAFT_IO_INSTALL_SNAPSHOT: {
        struct raft_install_snapshot *s = &m->install_snapshot;
        s->term = r64(&r);
        s->last_index = r64(&r);
        s->last_term = r64(&r);
        s->conf_index = r64(&r);
        raft_configuration_init(&s->conf);
        if (!conf_get(&r, &s->conf)) {
            r.bad = true;
            break;
        }
        const uint64_t dlen = r64(&r);
        if (r.bad || dlen != r.left) {
            r.bad = true;
            break;
        }
        s->data.base = raft_malloc(dlen ? dlen : 1);
        if (!s->data.base) {
            r.bad = true;
            break;
        }
        memcpy(s->data.base, r.p, dlen);
        s->data.len = dlen;
        r.left = 0;
        break;
    }
    case RAFT_IO_TIMEOUT_NOW: {
        struct raft_timeout_now *t = &m->timeout_now;
        t->term = r64(&r);
        t->last_log_index = r64(&r);
        t->last_log_term = r64(&r);
        break;
    }
    default:
        r.bad = true;
    }
    if (r.bad || r.left) {
        inmsg_free(im);
        return NULL;
    }
    return im;
}

/* A raft message arrived: answered empty at once, handed to raft at the
 * next poll. */
static void on_message(struct erma_req *req, void *ctx)
{
    struct rkio *k = ctx;
    const unsigned type = (unsigned)(erma_req_type(req) - k->cfg.type_base);
    struct inmsg *im = msg_get(type, erma_req_data(req), erma_req_size(req));
    struct erma_msgbuf *resp = erma_req_resp_buf(req);
    erma_msgbuf_resize(resp, 0);
    erma_req_respond(req, resp);
    if (!im) {
        k->stats.rx_bad++;
        return;
    }
    if (!k->started || k->closed) {
        inmsg_free(im);
        return;
    }
    im->next = NULL;
    *k->inbox_tail = im;
    k->inbox_tail = &im->next;
}

static void on_sent(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)resp;
    struct send_op *op = tag;
    struct rkio *k = op->k;
    inflight_unlink(op);
    k->peers[op->peer].inflight--;
    erma_msgbuf_free(rpc, &op->msg);
    erma_msgbuf_free(rpc, &op->resp);
    if (!op->cb) {
        free(op);
        return;
    }
    if (status != ERMA_OK) {
        ERMA_DEBUG("raftkv: send to %s: %s", k->peers[op->peer].addr, erma_strerror(status));
        k->stats.send_failed++;
    }
    else
        k->stats.send_acked++;
    op->status = status == ERMA_OK ? 0 : RAFT_NOCONNECTION;
    done_push(k, op);
}

/* ---- the raft_io methods ---- */

static int m_init(struct raft_io *io, raft_id id, const char *address)
{
    struct rkio *k = io->impl;
    k->id = id;
    if (strlen(address) >= ADDR_MAX)
        return RAFT_NAMETOOLONG;
    snprintf(k->addr, sizeof k->addr, "%s", address);
    erma_rand_seed(&k->rnd, k->cfg.seed ? k->cfg.seed : id * 0x9e3779b97f4a7c15ull);
    int rc = meta_read(k);
    if (!rc)
        rc = snap_read(k);
    if (!rc)
        rc = log_read(k);
    if (!rc && k->nents == 0)
        k->first = k->snap.have ? k->snap.index + 1 : 1;
    if (!rc && k->snap.have && k->nents && k->first + k->nents <= k->snap.index) {
        /* entries wholly before the snapshot (a crash between writing it and
         * compacting the log): not needed */
        ents_free_from(k, 0);
        k->first = k->snap.index + 1;
        rc = log_rewrite(k);
    }
    if (!rc && k->snap.have && k->nents && k->first > k->snap.index + 1)
        rc = RAFT_CORRUPT; /* a gap between the snapshot and the log */
    if (!rc && k->log_fd < 0)
        rc = log_open(k);
    if (rc && !io->errmsg[0])
        snprintf(io->errmsg, sizeof io->errmsg, "loading %.160s failed (%.60s)", k->dir,
                 raft_strerror(rc));
    return rc;
}

static void m_close(struct raft_io *io, raft_io_close_cb cb)
{
    struct rkio *k = io->impl;
    k->closed = true;
    if (k->need_sync) {
        sync_fd(k, k->log_fd);
        k->need_sync = false;
    }
    /* Every request raft still waits for completes now, before the close
     * callback: sends as cancelled, writes (made) as done. */
    for (struct send_op *op = k->inflight.next; op != &k->inflight; op = op->next) {
        raft_io_send_cb cb1 = op->cb;
        op->cb = NULL;
        if (cb1)
            cb1(op->req, RAFT_CANCELED);
    }
    while (k->done) {
        struct send_op *op = k->done;
        k->done = op->next;
        op->cb(op->req, op->status);
        free(op);
    }
    k->done_tail = &k->done;
    while (k->later) {
        struct later *l = k->later;
        k->later = l->next;
        fire_later(k, l, l->kind == L_SNAP_GET ? RAFT_CANCELED : 0);
    }
    k->later_tail = &k->later;
    while (k->inbox) {
        struct inmsg *im = k->inbox;
        k->inbox = im->next;
        inmsg_free(im);
    }
    k->inbox_tail = &k->inbox;
    if (cb)
        cb(io);
}

static int m_load(struct raft_io *io, raft_term *term, raft_id *voted_for,
                  struct raft_snapshot **snapshot, raft_index *start_index,
                  struct raft_entry *entries[], size_t *n_entries)
{
    struct rkio *k = io->impl;
    *term = k->term;
    *voted_for = k->vote;
    *snapshot = NULL;
    *entries = NULL;
    *n_entries = 0;
    *start_index = k->first;
    if (k->snap.have && !(*snapshot = snap_copy(k)))
        return RAFT_NOMEM;
    if (k->nents == 0)
        return 0;
    size_t total = 0;
    for (size_t i = 0; i < k->nents; i++)
        total += k->ents[i].len;
    uint8_t *batch = raft_malloc(total ? total : 1);
    struct raft_entry *es = raft_calloc(k->nents, sizeof *es);
    if (!batch || !es) {
        raft_free(batch);
        raft_free(es);
        if (*snapshot) {
            struct raft_snapshot *s = *snapshot;
            raft_configuration_close(&s->configuration);
            raft_free(s->bufs[0].base);
            raft_free(s->bufs);
            raft_free(s);
            *snapshot = NULL;
        }
        return RAFT_NOMEM;
    }
    size_t at = 0;
    for (size_t i = 0; i < k->nents; i++) {
        memcpy(batch + at, k->ents[i].data, k->ents[i].len);
        es[i].term = k->ents[i].term;
        es[i].type = k->ents[i].type;
        es[i].buf.base = batch + at;
        es[i].buf.len = k->ents[i].len;
        es[i].batch = batch;
        at += k->ents[i].len;
    }
    *entries = es;
    *n_entries = k->nents;
    return 0;
}

static int m_start(struct raft_io *io, unsigned msecs, raft_io_tick_cb tick,
                   raft_io_recv_cb recv)
{
    struct rkio *k = io->impl;
    if (!k->rpc)
        return RAFT_INVALID;
    k->msecs = msecs ? msecs : 1;
    k->tick = tick;
    k->recv = recv;
    k->next_tick = erma_now_ns() + (uint64_t)k->msecs * 1000000;
    k->started = true;
    return 0;
}

static int m_bootstrap(struct raft_io *io, const struct raft_configuration *conf)
{
    struct rkio *k = io->impl;
    if (k->term != 0 || k->nents || k->snap.have)
        return RAFT_CANTBOOTSTRAP;
    struct raft_buffer buf;
    int rc = raft_configuration_encode(conf, &buf);
    if (rc)
        return rc;
    const struct raft_entry e = {.term = 1, .type = RAFT_CHANGE, .buf = buf};
    k->first = 1;
    rc = log_append(k, &e, 1);
    raft_free(buf.base);
    if (!rc)
        rc = sync_fd(k, k->log_fd);
    k->need_sync = false;
    if (!rc)
        rc = meta_write(k, 1, 0);
    return rc;
}

static int m_recover(struct raft_io *io, const struct raft_configuration *conf)
{
    struct rkio *k = io->impl;
    struct raft_buffer buf;
    int rc = raft_configuration_encode(conf, &buf);
    if (rc)
        return rc;
    const struct raft_entry e = {.term = k->term, .type = RAFT_CHANGE, .buf = buf};
    rc = log_append(k, &e, 1);
    raft_free(buf.base);
    if (!rc)
        rc = sync_fd(k, k->log_fd);
    k->need_sync = false;
    return rc;
}

static int m_set_term(struct raft_io *io, raft_term term)
{
    return meta_write(io->impl, term, 0);
}

static int m_set_vote(struct raft_io *io, raft_id server_id)
{
    struct rkio *k = io->impl;
    return meta_write(k, k->term, server_id);
}

static int m_send(struct raft_io *io, struct raft_io_send *req, const struct raft_message *m,
                  raft_io_send_cb cb)
{
    struct rkio *k = io->impl;
    if (k->closed)
        return RAFT_CANCELED;
    bool ok;
    const size_t size = msg_size(k, m, &ok);
    if (!ok)
        return RAFT_MALFORMED;
    if (size > ERMA_MAX_MSG_SIZE) {
        snprintf(io->errmsg, sizeof io->errmsg, "message of %zu bytes: more than erma's %u",
                 size, ERMA_MAX_MSG_SIZE);
        return RAFT_TOOBIG;
    }
    struct peer *p = peer_find(k, m->server_id, m->server_address);
    struct send_op *op = calloc(1, sizeof *op);
    if (!op)
        return RAFT_NOMEM;
    op->k = k;
    op->req = req;
    op->cb = cb;
    op->peer = p ? (int)(p - k->peers) : -1;
    k->stats.sent++;
    if (!p) {
        op->status = RAFT_NOCONNECTION;
    } else {
        peer_connect(k, p, erma_now_ns());
        if (p->sess < 0)
            op->status = RAFT_NOCONNECTION; /* down: fail now, never wait */
        else if (p->inflight >= k->cfg.max_inflight)
            op->status = RAFT_TOOMANY;
    }
    if (op->status == 0) {
        if (erma_msgbuf_alloc(k->rpc, size, &op->msg) != ERMA_OK) {
            free(op);
            return RAFT_NOMEM;
        }
        if (erma_msgbuf_alloc(k->rpc, 8, &op->resp) != ERMA_OK) {
            erma_msgbuf_free(k->rpc, &op->msg);
            free(op);
            return RAFT_NOMEM;
        }
        msg_put(k, m, op->msg.data);
        erma_msgbuf_resize(&op->msg, size);
        op->next = k->inflight.next;
        op->prev = &k->inflight;
        op->next->prev = op;
        k->inflight.next = op;
        p->inflight++;
        const int rc = erma_rpc_call(k->rpc, p->sess, (uint8_t)(k->cfg.type_base + m->type),
                                     &op->msg, &op->resp, on_sent, op);
        if (rc != ERMA_OK) {
            inflight_unlink(op);
            p->inflight--;
            erma_msgbuf_free(k->rpc, &op->msg);
            erma_msgbuf_free(k->rpc, &op->resp);
            op->status = RAFT_NOCONNECTION;
        }
    }
    if (op->status != 0) {
        k->stats.send_failed++;
        done_push(k, op); /* the callback, at the next poll */
    }
    return 0;
}

static int m_append(struct raft_io *io, struct raft_io_append *req,
                    const struct raft_entry entries[], unsigned n, raft_io_append_cb cb)
{
    struct rkio *k = io->impl;
    if (k->closed)
        return RAFT_CANCELED;
    const int rc = log_append(k, entries, n);
    if (rc)
        return rc;
    k->stats.appends++;
    later_push(k, L_APPEND, req, (void *)cb);
    return 0;
}

static int m_truncate(struct raft_io *io, raft_index index)
{
    struct rkio *k = io->impl;
    if (k->closed)
        return RAFT_CANCELED;
    k->stats.truncates++;
    if (index >= k->first + k->nents)
        return 0;
    if (index <= k->first) {
        ents_free_from(k, 0);
        k->first = index;
        return log_rewrite(k);
    }
    const size_t keep = (size_t)(index - k->first);
    const uint64_t off = k->ents[keep].off;
    ents_free_from(k, keep);
    if (ftruncate(k->log_fd, (off_t)off) != 0)
        return RAFT_IOERR;
    k->log_size = off;
    k->need_sync = true;
    return 0;
}

static int m_snapshot_put(struct raft_io *io, unsigned trailing,
                          struct raft_io_snapshot_put *req, const struct raft_snapshot *snapshot,
                          raft_io_snapshot_put_cb cb)
{
    struct rkio *k = io->impl;
    if (k->closed)
        return RAFT_CANCELED;
    int rc = snap_write(k, snapshot);
    if (rc)
        return rc;
    if (trailing == 0) {
        /* an installed snapshot replaces the whole log */
        ents_free_from(k, 0);
        k->first = snapshot->index + 1;
        rc = log_rewrite(k);
        k->stats.snapshots_installed++;
    } else if (snapshot->index > trailing && snapshot->index - trailing >= k->first) {
        ents_drop_head(k, (size_t)(snapshot->index - trailing - k->first + 1));
        rc = log_rewrite(k);
    }
    if (rc)
        return rc;
    k->stats.snapshots_put++;
    later_push(k, L_SNAP_PUT, req, (void *)cb);
    return 0;
}

static int m_snapshot_get(struct raft_io *io, struct raft_io_snapshot_get *req,
                          raft_io_snapshot_get_cb cb)
{
    struct rkio *k = io->impl;
    if (k->closed)
        return RAFT_CANCELED;
    later_push(k, L_SNAP_GET, req, (void *)cb);
    return 0;
}

static raft_time m_time(struct raft_io *io)
{
    (void)io;
    return erma_now_ns() / 1000000;
}

static int m_random(struct raft_io *io, int min, int max)
{
    struct rkio *k = io->impl;
    if (max <= min)
        return min;
    return min + (int)erma_rand_below(&k->rnd, (uint64_t)(max - min));
}

/* ---- the application's side ---- */

int raftkv_io_init(struct raft_io *io, struct erma_nexus *nx,
                   const struct raftkv_io_cfg *cfg)
{
    if (!io || !nx || !cfg || !cfg->dir || strlen(cfg->dir) >= PATH_MAX - 16)
        return ERMA_EINVAL;
    struct rkio *k = calloc(1, sizeof *k);
    if (!k)
        return ERMA_ENOMEM;
    k->cfg = *cfg;
    if (!k->cfg.type_base)
        k->cfg.type_base = RAFTKV_TYPE_BASE;
    if (!k->cfg.reconnect_ns)
        k->cfg.reconnect_ns = 20000000;
    if (!k->cfg.max_inflight)
        k->cfg.max_inflight = 4096;
    snprintf(k->dir, sizeof k->dir, "%s", cfg->dir);
    k->cfg.dir = k->dir;
    k->log_fd = -1;
    k->first = 1;
    k->inflight.next = k->inflight.prev = &k->inflight;
    k->done_tail = &k->done;
    k->later_tail = &k->later;
    k->inbox_tail = &k->inbox;
    for (unsigned t = RAFT_IO_APPEND_ENTRIES; t <= RAFT_IO_TIMEOUT_NOW; t++) {
        const int rc = erma_handler_register(nx, (uint8_t)(k->cfg.type_base + t), on_message,
                                             ERMA_DISPATCH, k);
        if (rc != ERMA_OK) {
            free(k);
            return rc;
        }
    }
    memset(io, 0, sizeof *io);
    io->version = 1;
    io->impl = k;
    io->init = m_init;
    io->close = m_close;
    io->load = m_load;
    io->start = m_start;
    io->bootstrap = m_bootstrap;
    io->recover = m_recover;
    io->set_term = m_set_term;
    io->set_vote = m_set_vote;
    io->send = m_send;
    io->append = m_append;
    io->truncate = m_truncate;
    io->snapshot_put = m_snapshot_put;
    io->snapshot_get = m_snapshot_get;
    io->time = m_time;
    io->random = m_random;
    k->io = io;
    return ERMA_OK;
}

void raftkv_io_attach(struct raft_io *io, struct erma_rpc *rpc)
{
    ((struct rkio *)io->impl)->rpc = rpc;
}

int raftkv_io_poll(struct raft_io *io)
{
    struct rkio *k = io->impl;
    if (!k->started || k->closed)
        return 0;
    int work = 0;
    if (k->need_sync) { /* one sync for every append since the last poll */
        k->need_sync = false;
        k->stats.syncs++;
        if (sync_fd(k, k->log_fd) != 0)
            ERMA_ERROR("raftkv: fdatasync %s/log: %s", k->dir, strerror(errno));
    }
    /* Only what was queued before this poll runs now: callbacks queue more
     * for the next one. */
    struct send_op *done = k->done;
    k->done = NULL;
    k->done_tail = &k->done;
    struct later *later = k->later;
    k->later = NULL;
    k->later_tail = &k->later;
    struct inmsg *inbox = k->inbox;
    k->inbox = NULL;
    k->inbox_tail = &k->inbox;
    while (done) {
        struct send_op *op = done;
        done = op->next;
        if (!k->closed)
            op->cb(op->req, op->status);
        free(op);
        work++;
    }
    while (later) {
        struct later *l = later;
        later = l->next;
        fire_later(k, l, 0);
        work++;
    }
    while (inbox) {
        struct inmsg *im = inbox;
        inbox = im->next;
        if (k->closed) {
            inmsg_free(im);
            continue;
        }
        k->stats.received++;
        k->recv(io, &im->m); /* raft owns what the message points to now */
        free(im);
        work++;
    }
    const uint64_t now = erma_now_ns();
    if (!k->closed && now >= k->next_tick) {
        k->next_tick += (uint64_t)k->msecs * 1000000;
        if (k->next_tick <= now)
            k->next_tick = now + (uint64_t)k->msecs * 1000000;
        k->stats.ticks++;
        k->tick(io);
        work++;
    }
    for (unsigned i = 0; i < k->npeers; i++)
        if (k->peers[i].sess < 0 && now >= k->peers[i].retry_at)
            peer_connect(k, &k->peers[i], now);
    return work;
}

uint64_t raftkv_io_next_timer(const struct raft_io *io)
{
    const struct rkio *k = io->impl;
    if (!k->started || k->closed)
        return UINT64_MAX;
    if (k->done || k->later || k->inbox || k->need_sync)
        return 0; /* work for the next poll */
    return k->next_tick;
}

void raftkv_io_destroy(struct raft_io *io)
{
    if (!io || !io->impl)
        return;
    struct rkio *k = io->impl;
    /* sends the rpc never completed (it is gone): their buffers went with it */
    while (k->inflight.next != &k->inflight) {
        struct send_op *op = k->inflight.next;
        inflight_unlink(op);
        free(op);
    }
    while (k->done) {
        struct send_op *op = k->done;
        k->done = op->next;
        free(op);
    }
    while (k->later) {
        struct later *l = k->later;
        k->later = l->next;
        free(l);
    }
    while (k->inbox) {
        struct inmsg *im = k->inbox;
        k->inbox = im->next;
        inmsg_free(im);
    }
    ents_free_from(k, 0);
    free(k->ents);
    if (k->snap.have) {
        raft_configuration_close(&k->snap.conf);
        free(k->snap.data);
    }
    if (k->log_fd >= 0)
        close(k->log_fd);
    free(k);
    io->impl = NULL;
}

void raftkv_io_get_stats(const struct raft_io *io, struct raftkv_io_stats *out)
{
    *out = ((const struct rkio *)io->impl)->stats;
}
