/* raftkv's byte codec, shared by the store (store.c) and the raft message
 * codec (msg.c): erma's wire cursor (erma/sdk/wire.h: fields one after another,
 * each little-endian) with a bounded reader, and tables of fields so that
 * a record's size, encoder and decoder are one description. */
#ifndef RAFTKV_CODEC_H
#define RAFTKV_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <raft.h>

#include "erma/sdk/wire.h"

#define ADDR_MAX 128 /* a server address, its NUL included */

struct wr {
    uint8_t *p;
};

static inline void wr_put(struct wr *w, uint64_t v, int width)
{
    erma_put(&w->p, v, width);
}

static inline void wr_bytes(struct wr *w, const void *b, size_t n)
{
    if (n)
        memcpy(w->p, b, n);
    w->p += n;
}

/* Reads past the end read 0 and set bad. */
struct rd {
    const uint8_t *p;
    size_t left;
    bool bad;
};

static inline const uint8_t *rd_take(struct rd *r, size_t n)
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

static inline uint64_t rd_get(struct rd *r, int width)
{
    const uint8_t *p = rd_take(r, (size_t)width);
    return p ? erma_get(&p, width) : 0;
}

static inline uint64_t fnv1a(const void *data, size_t n)
{
    const uint8_t *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* ---- tables of fields ---- */

enum field_kind {
    F_UINT,    /* an unsigned integer (a wider member takes it zero-extended) */
    F_BOOL,    /* a bool: any byte but 0 reads true */
    F_TRIBOOL, /* a raft_tribool: more than raft_tribool_false is malformed */
};

/* One fixed-size field of a struct: where it lives, how wide it is there
 * and on the wire (at most as wide). */
struct field {
    uint16_t off;
    uint8_t size, width;
    enum field_kind kind;
};

#define FIELD(type, member, width, kind) \
    {offsetof(type, member), sizeof(((type *)0)->member), width, kind}
#define NFIELDS(table) (sizeof(table) / sizeof((table)[0]))

struct fields {
    const struct field *f;
    unsigned n;
};

size_t raftkv__fields_size(struct fields fs);
void raftkv__fields_put(struct wr *w, struct fields fs, const void *obj);
/* Into obj's fields; a malformed value sets r->bad. */
void raftkv__fields_get(struct rd *r, struct fields fs, void *obj);

/* ---- a string: [u16 len][bytes] ---- */

size_t raftkv__str_size(const char *s);
void raftkv__str_put(struct wr *w, const char *s);
/* Into out[ADDR_MAX]; false when malformed or too long. */
bool raftkv__str_get(struct rd *r, char *out);

/* ---- a configuration: [u32 n] n x [u64 id][u8 role][u16 len][address] ---- */

size_t raftkv__conf_size(const struct raft_configuration *c);
void raftkv__conf_put(struct wr *w, const struct raft_configuration *c);
/* Into an initialized c; false when malformed (c then holds what was read). */
bool raftkv__conf_get(struct rd *r, struct raft_configuration *c);

#endif
