/* raftkv's durable state (store.h): the directory's files, meta, and
 * loading it all. meta is [u64 magic][u64 term][u64 vote][u64 FNV-1a of
 * all before], each field little-endian. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "raftkv/codec.h"
#include "raftkv/store.h"

#define META_MAGIC 0x4154454d4b52ull /* "RKMETA" */
#define META_LEN 32

void raftkv__store_init(struct store *st, const char *dir, bool no_fsync, char *errmsg)
{
    memset(st, 0, sizeof *st);
    snprintf(st->dir, sizeof st->dir, "%s", dir);
    st->no_fsync = no_fsync;
    st->errmsg = errmsg;
    st->log_fd = -1;
    st->first = 1;
}

/* ---- files ---- */

int raftkv__store_path(const struct store *st, const char *name, char *out)
{
    return (size_t)snprintf(out, PATH_MAX, "%s/%s", st->dir, name) < PATH_MAX ? 0
                                                                              : RAFT_NAMETOOLONG;
}

int raftkv__store_fsync(const struct store *st, int fd)
{
    if (st->no_fsync)
        return 0;
    return fdatasync(fd) == 0 ? 0 : RAFT_IOERR;
}

static int sync_dir(const struct store *st)
{
    if (st->no_fsync)
        return 0;
    const int fd = open(st->dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return RAFT_IOERR;
    const int rc = fsync(fd) == 0 ? 0 : RAFT_IOERR;
    close(fd);
    return rc;
}

int raftkv__store_write(int fd, const void *data, size_t n, uint64_t off)
{
    const uint8_t *p = data;
    while (n) {
        const ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return RAFT_IOERR;
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

/* name's new content, durable before it replaces the old: tmp, fsync,
 * rename, fsync of the directory. */
int raftkv__store_replace(struct store *st, const char *name, const void *data, size_t len)
{
    char path[PATH_MAX], tmp[PATH_MAX], tname[64];
    snprintf(tname, sizeof tname, "%s.tmp", name);
    if (raftkv__store_path(st, name, path) || raftkv__store_path(st, tname, tmp))
        return RAFT_NAMETOOLONG;
    const int fd = open(tmp, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(st->errmsg, RAFT_ERRMSG_BUF_SIZE, "open %.160s: %.60s", tmp, strerror(errno));
        return RAFT_IOERR;
    }
    int rc = raftkv__store_write(fd, data, len, 0);
    if (!rc)
        rc = raftkv__store_fsync(st, fd);
    close(fd);
    if (!rc && rename(tmp, path) != 0)
        rc = RAFT_IOERR;
    if (!rc)
        rc = sync_dir(st);
    if (rc)
        snprintf(st->errmsg, RAFT_ERRMSG_BUF_SIZE, "write %.200s failed", path);
    return rc;
}

/* The whole file, malloc'd (NULL and 0 when absent). */
int raftkv__store_read(const struct store *st, const char *name, uint8_t **out, size_t *len)
{
    char path[PATH_MAX];
    *out = NULL;
    *len = 0;
    if (raftkv__store_path(st, name, path))
        return RAFT_NAMETOOLONG;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : RAFT_IOERR;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return RAFT_IOERR;
    }
    uint8_t *buf = malloc(sb.st_size ? (size_t)sb.st_size : 1);
    size_t got = 0;
    while (buf && got < (size_t)sb.st_size) {
        const ssize_t r = read(fd, buf + got, (size_t)sb.st_size - got);
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

/* ---- meta ---- */

int raftkv__store_set_meta(struct store *st, raft_term term, raft_id vote)
{
    uint8_t b[META_LEN];
    struct wr w = {b};
    wr_put(&w, META_MAGIC, 8);
    wr_put(&w, term, 8);
    wr_put(&w, vote, 8);
    wr_put(&w, fnv1a(b, META_LEN - STORE_CHECK), STORE_CHECK);
    const int rc = raftkv__store_replace(st, "meta", b, sizeof b);
    if (rc == 0) {
        st->term = term;
        st->vote = vote;
    }
    return rc;
}

static int meta_read(struct store *st)
{
    uint8_t *b;
    size_t len;
    int rc = raftkv__store_read(st, "meta", &b, &len);
    if (rc || !b)
        return rc;
    struct rd r = {b, len, false};
    const uint64_t magic = rd_get(&r, 8), term = rd_get(&r, 8), vote = rd_get(&r, 8);
    const uint64_t check = rd_get(&r, STORE_CHECK);
    if (r.bad || magic != META_MAGIC || check != fnv1a(b, META_LEN - STORE_CHECK))
        rc = RAFT_CORRUPT;
    else {
        st->term = term;
        st->vote = vote;
    }
    free(b);
    return rc;
}

int raftkv__store_sync(struct store *st)
{
    return raftkv__store_fsync(st, st->log_fd);
}

/* ---- life ---- */

int raftkv__store_load(struct store *st)
{
    int rc = meta_read(st);
    if (!rc)
        rc = raftkv__store_snap_read(st);
    if (!rc)
        rc = raftkv__store_log_read(st);
    if (!rc && st->nents == 0)
        st->first = st->snap.have ? st->snap.index + 1 : 1;
    if (!rc && st->snap.have && st->nents && st->first + st->nents <= st->snap.index) {
        /* entries wholly before the snapshot (a crash between writing it and
         * compacting the log): not needed */
        rc = raftkv__store_compact(st, st->snap.index, 0);
    }
    if (!rc && st->snap.have && st->nents && st->first > st->snap.index + 1)
        rc = RAFT_CORRUPT; /* a gap between the snapshot and the log */
    if (!rc && st->log_fd < 0)
        rc = raftkv__store_log_open(st);
    return rc;
}

void raftkv__store_close(struct store *st)
{
    raftkv__store_log_close(st);
    raftkv__store_snap_forget(st);
}
