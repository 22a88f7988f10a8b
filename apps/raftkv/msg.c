/* The raft messages on the wire (msg.h): each kind's fixed fields are one
 * table, from which its size, encoder and decoder all follow. */
#include <string.h>

#include "raftkv/codec.h"
#include "raftkv/msg.h"

#define SENDER_ID 8
#define DATA_LEN 8             /* InstallSnapshot's, before its data */
#define MAX_ENTRIES (1u << 24) /* per message, a sanity bound */

static const struct field request_vote[] = {
    FIELD(struct raft_request_vote, term, 8, F_UINT),
    FIELD(struct raft_request_vote, candidate_id, 8, F_UINT),
    FIELD(struct raft_request_vote, last_log_index, 8, F_UINT),
    FIELD(struct raft_request_vote, last_log_term, 8, F_UINT),
    FIELD(struct raft_request_vote, disrupt_leader, 1, F_BOOL),
    FIELD(struct raft_request_vote, pre_vote, 1, F_BOOL),
};

static const struct field request_vote_result[] = {
    FIELD(struct raft_request_vote_result, term, 8, F_UINT),
    FIELD(struct raft_request_vote_result, vote_granted, 1, F_BOOL),
    FIELD(struct raft_request_vote_result, pre_vote, 1, F_TRIBOOL),
};

/* Then n_entries entry headers, then the entries' data one after another. */
static const struct field append_entries[] = {
    FIELD(struct raft_append_entries, term, 8, F_UINT),
    FIELD(struct raft_append_entries, prev_log_index, 8, F_UINT),
    FIELD(struct raft_append_entries, prev_log_term, 8, F_UINT),
    FIELD(struct raft_append_entries, leader_commit, 8, F_UINT),
    FIELD(struct raft_append_entries, n_entries, 4, F_UINT),
};

static const struct field entry_fields[] = {
    FIELD(struct raft_entry, term, 8, F_UINT),
    FIELD(struct raft_entry, type, 2, F_UINT),
    FIELD(struct raft_entry, buf.len, 4, F_UINT),
};
static const struct fields entry = {entry_fields, NFIELDS(entry_fields)};

static const struct field append_entries_result[] = {
    FIELD(struct raft_append_entries_result, term, 8, F_UINT),
    FIELD(struct raft_append_entries_result, rejected, 8, F_UINT),
    FIELD(struct raft_append_entries_result, last_log_index, 8, F_UINT),
};

/* Then the configuration (codec.h), [u64 data length][data]. */
static const struct field install_snapshot[] = {
    FIELD(struct raft_install_snapshot, term, 8, F_UINT),
    FIELD(struct raft_install_snapshot, last_index, 8, F_UINT),
    FIELD(struct raft_install_snapshot, last_term, 8, F_UINT),
    FIELD(struct raft_install_snapshot, conf_index, 8, F_UINT),
};

static const struct field timeout_now[] = {
    FIELD(struct raft_timeout_now, term, 8, F_UINT),
    FIELD(struct raft_timeout_now, last_log_index, 8, F_UINT),
    FIELD(struct raft_timeout_now, last_log_term, 8, F_UINT),
};

/* A kind's fixed fields, in its member of struct raft_message's union. */
struct kind {
    size_t off;
    struct fields fixed;
};

#define KIND(member, table) {offsetof(struct raft_message, member), {table, NFIELDS(table)}}

static const struct kind kinds[] = {
    [RAFT_IO_APPEND_ENTRIES] = KIND(append_entries, append_entries),
    [RAFT_IO_APPEND_ENTRIES_RESULT] = KIND(append_entries_result, append_entries_result),
    [RAFT_IO_REQUEST_VOTE] = KIND(request_vote, request_vote),
    [RAFT_IO_REQUEST_VOTE_RESULT] = KIND(request_vote_result, request_vote_result),
    [RAFT_IO_INSTALL_SNAPSHOT] = KIND(install_snapshot, install_snapshot),
    [RAFT_IO_TIMEOUT_NOW] = KIND(timeout_now, timeout_now),
};

static const struct kind *kind_of(unsigned type)
{
    return type >= RAFT_IO_APPEND_ENTRIES && type <= RAFT_IO_TIMEOUT_NOW ? &kinds[type] : NULL;
}

size_t raftkv__msg_size(const struct raft_message *m, const char *addr)
{
    const struct kind *k = kind_of(m->type);
    if (!k)
        return 0;
    size_t n = SENDER_ID + raftkv__str_size(addr) + raftkv__fields_size(k->fixed);
    if (m->type == RAFT_IO_APPEND_ENTRIES) {
        const struct raft_append_entries *a = &m->append_entries;
        n += (size_t)a->n_entries * raftkv__fields_size(entry);
        for (unsigned i = 0; i < a->n_entries; i++)
            n += a->entries[i].buf.len;
    } else if (m->type == RAFT_IO_INSTALL_SNAPSHOT) {
        const struct raft_install_snapshot *s = &m->install_snapshot;
        n += raftkv__conf_size(&s->conf) + DATA_LEN + s->data.len;
    }
    return n;
}

void raftkv__msg_encode(const struct raft_message *m, raft_id id, const char *addr,
                        uint8_t *out)
{
    const struct kind *k = kind_of(m->type);
    struct wr w = {out};
    wr_put(&w, id, SENDER_ID);
    raftkv__str_put(&w, addr);
    raftkv__fields_put(&w, k->fixed, (const uint8_t *)m + k->off);
    if (m->type == RAFT_IO_APPEND_ENTRIES) {
        const struct raft_append_entries *a = &m->append_entries;
        for (unsigned i = 0; i < a->n_entries; i++)
            raftkv__fields_put(&w, entry, &a->entries[i]);
        for (unsigned i = 0; i < a->n_entries; i++)
            wr_bytes(&w, a->entries[i].buf.base, a->entries[i].buf.len);
    } else if (m->type == RAFT_IO_INSTALL_SNAPSHOT) {
        const struct raft_install_snapshot *s = &m->install_snapshot;
        raftkv__conf_put(&w, &s->conf);
        wr_put(&w, s->data.len, DATA_LEN);
        wr_bytes(&w, s->data.base, s->data.len);
    }
}

/* The entries after the fixed fields (n_entries read there): all that is
 * left of the message. */
static bool entries_get(struct rd *r, struct raft_append_entries *a)
{
    const uint32_t n = a->n_entries;
    a->n_entries = 0; /* until entries holds them */
    if (n == 0)
        return true;
    if (n > MAX_ENTRIES || (uint64_t)n * raftkv__fields_size(entry) > r->left)
        return false;
    struct raft_entry *es = raft_calloc(n, sizeof *es);
    if (!es)
        return false;
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        raftkv__fields_get(r, entry, &es[i]);
        total += es[i].buf.len;
    }
    /* One batch for every entry of the message, as libraft requires. */
    uint8_t *batch = total == r->left ? raft_malloc(total ? total : 1) : NULL;
    if (!batch) {
        raft_free(es);
        return false;
    }
    memcpy(batch, rd_take(r, total), total);
    uint64_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        es[i].buf.base = batch + at;
        es[i].batch = batch;
        at += es[i].buf.len;
    }
    a->entries = es;
    a->n_entries = n;
    return true;
}

/* The configuration and data after the fixed fields. */
static bool snapshot_get(struct rd *r, struct raft_install_snapshot *s)
{
    if (!raftkv__conf_get(r, &s->conf))
        return false;
    const uint64_t dlen = rd_get(r, DATA_LEN);
    if (r->bad || dlen != r->left)
        return false;
    s->data.base = raft_malloc(dlen ? dlen : 1);
    if (!s->data.base)
        return false;
    memcpy(s->data.base, rd_take(r, dlen), dlen);
    s->data.len = dlen;
    return true;
}

bool raftkv__msg_decode(unsigned type, const uint8_t *data, size_t len, struct raft_message *m,
                        char *addr)
{
    const struct kind *k = kind_of(type);
    struct rd r = {data, len, false};
    memset(m, 0, sizeof *m);
    m->type = (unsigned short)type;
    m->server_id = rd_get(&r, SENDER_ID);
    if (!k || !raftkv__str_get(&r, addr) || m->server_id == 0)
        return false;
    m->server_address = addr;
    raftkv__fields_get(&r, k->fixed, (uint8_t *)m + k->off);
    if (!r.bad && type == RAFT_IO_APPEND_ENTRIES)
        r.bad = !entries_get(&r, &m->append_entries);
    else if (!r.bad && type == RAFT_IO_INSTALL_SNAPSHOT)
        r.bad = !snapshot_get(&r, &m->install_snapshot);
    if (r.bad || r.left) {
        raftkv__msg_release(m);
        return false;
    }
    return true;
}

void raftkv__msg_release(struct raft_message *m)
{
    if (m->type == RAFT_IO_APPEND_ENTRIES && m->append_entries.entries) {
        raft_free(m->append_entries.entries[0].batch);
        raft_free(m->append_entries.entries);
        m->append_entries.entries = NULL;
        m->append_entries.n_entries = 0;
    } else if (m->type == RAFT_IO_INSTALL_SNAPSHOT) {
        raft_configuration_close(&m->install_snapshot.conf);
        raft_configuration_init(&m->install_snapshot.conf);
        raft_free(m->install_snapshot.data.base);
        m->install_snapshot.data.base = NULL;
    }
}
