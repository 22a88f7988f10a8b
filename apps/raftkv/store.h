/* raftkv's durable state in a directory (raftkv.h, "Storage"): term and
 * vote in `meta`, the log in `log` (also kept in memory), the last
 * snapshot in `snap`. Functions return 0 or raft's error codes
 * (RAFT_IOERR, RAFT_CORRUPT, RAFT_NOMEM, ...), what failed written to
 * errmsg where it says more. */
#ifndef RAFTKV_STORE_H
#define RAFTKV_STORE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <raft.h>

struct store_ent {
    raft_term term;
    unsigned short type;
    uint32_t len;
    uint8_t *data;
    uint64_t off; /* of its record in the log file */
};

struct store {
    char dir[PATH_MAX];
    bool no_fsync;
    char *errmsg; /* RAFT_ERRMSG_BUF_SIZE bytes: the raft_io's */
    raft_term term;
    raft_id vote;
    int log_fd;
    uint64_t log_size;  /* the records' end */
    uint64_t log_alloc; /* the file's length: zeros from log_size on (store_log.c) */
    struct store_ent *ents;
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
    bool need_sync; /* the log changed since its last sync */
};

/* dir: shorter than PATH_MAX - 16. */
void raftkv__store_init(struct store *st, const char *dir, bool no_fsync, char *errmsg);
/* Reads meta, snapshot and log (a torn or corrupt tail of the log is cut)
 * and opens the log for appending. */
int raftkv__store_load(struct store *st);
/* Returns once term and vote are durable. */
int raftkv__store_set_meta(struct store *st, raft_term term, raft_id vote);
/* Appends n entries at index first + nents, to the file (written, not
 * synced: need_sync) and to memory. */
int raftkv__store_append(struct store *st, const struct raft_entry *es, unsigned n);
/* fdatasync of the log (nothing with no_fsync). */
int raftkv__store_sync(struct store *st);
/* Drops the entries from index on. */
int raftkv__store_truncate(struct store *st, raft_index index);
int raftkv__store_snapshot_write(struct store *st, const struct raft_snapshot *s);
/* After a snapshot at index, drops the entries before index - trailing
 * (all of them when trailing is 0: an installed snapshot). */
int raftkv__store_compact(struct store *st, raft_index index, unsigned trailing);
/* For raft (raft_malloc'd): a copy of the snapshot, NULL when out of
 * memory; the log's entries in one batch (*out NULL when empty). */
struct raft_snapshot *raftkv__store_snapshot_copy(const struct store *st);
void raftkv__store_snapshot_free(struct raft_snapshot *s);
int raftkv__store_entries_copy(const struct store *st, struct raft_entry **out);
/* Frees the memory and closes the log. */
void raftkv__store_close(struct store *st);

/* ---- between the store's files (store.c, store_log.c, store_snap.c) ---- */

#define STORE_CHECK 8 /* the FNV-1a (codec.h) that ends each record */

int raftkv__store_path(const struct store *st, const char *name, char *out);
int raftkv__store_fsync(const struct store *st, int fd);
/* n bytes at offset off of fd. */
int raftkv__store_write(int fd, const void *data, size_t n, uint64_t off);
/* name's new content, durable before it replaces the old. */
int raftkv__store_replace(struct store *st, const char *name, const void *data, size_t len);
/* name's whole content, malloc'd (NULL and 0 when absent). */
int raftkv__store_read(const struct store *st, const char *name, uint8_t **out, size_t *len);
int raftkv__store_log_read(struct store *st);
int raftkv__store_log_open(struct store *st);
void raftkv__store_log_close(struct store *st);
int raftkv__store_snap_read(struct store *st);
void raftkv__store_snap_forget(struct store *st);

#endif
