/* raftkv's snapshot (store.h), in `snap`: [u64 magic][u64 index][u64 term]
 * [u64 conf index][u32 conf len][u32 0][u64 data len][configuration
 * (codec.h)][data][u64 FNV-1a of all before], each field little-endian. */
#include <stdlib.h>
#include <string.h>

#include "raftkv/codec.h"
#include "raftkv/store.h"

#define SNAP_MAGIC 0x50414e534b52ull /* "RKSNAP" */
#define SNAP_HDR 48

void raftkv__store_snap_forget(struct store *st)
{
    if (!st->snap.have)
        return;
    raft_configuration_close(&st->snap.conf);
    free(st->snap.data);
    st->snap.have = false;
}

int raftkv__store_snapshot_write(struct store *st, const struct raft_snapshot *s)
{
    uint64_t dlen = 0;
    for (unsigned i = 0; i < s->n_bufs; i++)
        dlen += s->bufs[i].len;
    const size_t clen = raftkv__conf_size(&s->configuration);
    const size_t total = SNAP_HDR + clen + dlen + STORE_CHECK;
    uint8_t *buf = malloc(total);
    uint8_t *data = malloc(dlen ? dlen : 1);
    if (!buf || !data) {
        free(buf);
        free(data);
        return RAFT_NOMEM;
    }
    struct wr w = {buf};
    wr_put(&w, SNAP_MAGIC, 8);
    wr_put(&w, s->index, 8);
    wr_put(&w, s->term, 8);
    wr_put(&w, s->configuration_index, 8);
    wr_put(&w, clen, 4);
    wr_put(&w, 0, 4);
    wr_put(&w, dlen, 8);
    raftkv__conf_put(&w, &s->configuration);
    uint8_t *d = w.p;
    for (unsigned i = 0; i < s->n_bufs; i++)
        wr_bytes(&w, s->bufs[i].base, s->bufs[i].len);
    memcpy(data, d, dlen);
    wr_put(&w, fnv1a(buf, total - STORE_CHECK), STORE_CHECK);
    struct raft_configuration conf;
    raft_configuration_init(&conf);
    struct rd r = {buf + SNAP_HDR, clen, false};
    int rc = raftkv__conf_get(&r, &conf) ? 0 : RAFT_NOMEM;
    if (!rc)
        rc = raftkv__store_replace(st, "snap", buf, total);
    free(buf);
    if (rc) {
        raft_configuration_close(&conf);
        free(data);
        return rc;
    }
    raftkv__store_snap_forget(st);
    st->snap.have = true;
    st->snap.index = s->index;
    st->snap.term = s->term;
    st->snap.conf_index = s->configuration_index;
    st->snap.conf = conf;
    st->snap.data = data;
    st->snap.len = dlen;
    return 0;
}

int raftkv__store_snap_read(struct store *st)
{
    uint8_t *b;
    size_t len;
    int rc = raftkv__store_read(st, "snap", &b, &len);
    if (rc || !b)
        return rc;
    struct rd r = {b, len, false};
    const uint64_t magic = rd_get(&r, 8), index = rd_get(&r, 8), term = rd_get(&r, 8);
    const uint64_t conf_index = rd_get(&r, 8);
    const uint32_t clen = (uint32_t)rd_get(&r, 4);
    (void)rd_get(&r, 4);
    const uint64_t dlen = rd_get(&r, 8);
    const size_t room = len >= SNAP_HDR + STORE_CHECK ? len - SNAP_HDR - STORE_CHECK : 0;
    rc = RAFT_CORRUPT;
    if (!r.bad && magic == SNAP_MAGIC && len >= SNAP_HDR + STORE_CHECK && clen <= room &&
        dlen == room - clen) {
        struct rd c = {b + SNAP_HDR, clen, false};
        raft_configuration_init(&st->snap.conf);
        if (erma_get_le(b + len - STORE_CHECK, STORE_CHECK) == fnv1a(b, len - STORE_CHECK) &&
            raftkv__conf_get(&c, &st->snap.conf) &&
            (st->snap.data = malloc(dlen ? dlen : 1)) != NULL) {
            memcpy(st->snap.data, b + SNAP_HDR + clen, dlen);
            st->snap.have = true;
            st->snap.index = index;
            st->snap.term = term;
            st->snap.conf_index = conf_index;
            st->snap.len = dlen;
            rc = 0;
        } else {
            raft_configuration_close(&st->snap.conf);
        }
    }
    free(b);
    return rc;
}

struct raft_snapshot *raftkv__store_snapshot_copy(const struct store *st)
{
    struct raft_snapshot *s = raft_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->index = st->snap.index;
    s->term = st->snap.term;
    s->configuration_index = st->snap.conf_index;
    raft_configuration_init(&s->configuration);
    for (unsigned i = 0; i < st->snap.conf.n; i++) {
        const struct raft_server *v = &st->snap.conf.servers[i];
        if (raft_configuration_add(&s->configuration, v->id, v->address, v->role) != 0)
            goto fail;
    }
    s->bufs = raft_malloc(sizeof *s->bufs);
    if (!s->bufs)
        goto fail;
    s->n_bufs = 1;
    s->bufs[0].len = st->snap.len;
    s->bufs[0].base = raft_malloc(st->snap.len ? st->snap.len : 1);
    if (!s->bufs[0].base) {
        raft_free(s->bufs);
        goto fail;
    }
    memcpy(s->bufs[0].base, st->snap.data, st->snap.len);
    return s;
fail:
    raft_configuration_close(&s->configuration);
    raft_free(s);
    return NULL;
}

void raftkv__store_snapshot_free(struct raft_snapshot *s)
{
    raft_configuration_close(&s->configuration);
    raft_free(s->bufs[0].base);
    raft_free(s->bufs);
    raft_free(s);
}
