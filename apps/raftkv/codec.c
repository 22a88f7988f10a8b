/* raftkv's field tables, strings and configurations (codec.h). */
#include <string.h>

#include "raftkv/codec.h"

size_t raftkv__fields_size(struct fields fs)
{
    size_t n = 0;
    for (unsigned i = 0; i < fs.n; i++)
        n += fs.f[i].width;
    return n;
}

static uint64_t load(const uint8_t *p, unsigned size)
{
    uint8_t v1;
    uint16_t v2;
    uint32_t v4;
    uint64_t v8;
    switch (size) {
    case 1:
        memcpy(&v1, p, 1);
        return v1;
    case 2:
        memcpy(&v2, p, 2);
        return v2;
    case 4:
        memcpy(&v4, p, 4);
        return v4;
    default:
        memcpy(&v8, p, 8);
        return v8;
    }
}

static void store(uint8_t *p, unsigned size, uint64_t v)
{
    const uint8_t v1 = (uint8_t)v;
    const uint16_t v2 = (uint16_t)v;
    const uint32_t v4 = (uint32_t)v;
    switch (size) {
    case 1:
        memcpy(p, &v1, 1);
        break;
    case 2:
        memcpy(p, &v2, 2);
        break;
    case 4:
        memcpy(p, &v4, 4);
        break;
    default:
        memcpy(p, &v, 8);
    }
}

void raftkv__fields_put(struct wr *w, struct fields fs, const void *obj)
{
    for (unsigned i = 0; i < fs.n; i++) {
        const struct field *f = &fs.f[i];
        wr_put(w, load((const uint8_t *)obj + f->off, f->size), f->width);
    }
}

void raftkv__fields_get(struct rd *r, struct fields fs, void *obj)
{
    for (unsigned i = 0; i < fs.n; i++) {
        const struct field *f = &fs.f[i];
        uint8_t *p = (uint8_t *)obj + f->off;
        const uint64_t v = rd_get(r, f->width);
        if (f->kind == F_BOOL) {
            const bool b = v != 0;
            memcpy(p, &b, sizeof b);
            continue;
        }
        if (f->kind == F_TRIBOOL && v > raft_tribool_false)
            r->bad = true;
        store(p, f->size, v);
    }
}

/* ---- strings ---- */

#define STR_LEN 2

size_t raftkv__str_size(const char *s)
{
    return STR_LEN + strlen(s);
}

void raftkv__str_put(struct wr *w, const char *s)
{
    const size_t len = strlen(s);
    wr_put(w, len, STR_LEN);
    wr_bytes(w, s, len);
}

bool raftkv__str_get(struct rd *r, char *out)
{
    const size_t len = (size_t)rd_get(r, STR_LEN);
    const uint8_t *p = rd_take(r, len);
    if (!p || len >= ADDR_MAX)
        return false;
    memcpy(out, p, len);
    out[len] = 0;
    return true;
}

/* ---- configurations ---- */

#define CONF_COUNT 4
#define CONF_MAX 1024 /* servers, a sanity bound */

/* Each server's [u64 id][u8 role], then its address as a string. */
static const struct field server_fields[] = {
    FIELD(struct raft_server, id, 8, F_UINT),
    FIELD(struct raft_server, role, 1, F_UINT),
};
static const struct fields server = {server_fields, NFIELDS(server_fields)};

size_t raftkv__conf_size(const struct raft_configuration *c)
{
    size_t n = CONF_COUNT;
    for (unsigned i = 0; i < c->n; i++)
        n += raftkv__fields_size(server) + raftkv__str_size(c->servers[i].address);
    return n;
}

void raftkv__conf_put(struct wr *w, const struct raft_configuration *c)
{
    wr_put(w, c->n, CONF_COUNT);
    for (unsigned i = 0; i < c->n; i++) {
        raftkv__fields_put(w, server, &c->servers[i]);
        raftkv__str_put(w, c->servers[i].address);
    }
}

bool raftkv__conf_get(struct rd *r, struct raft_configuration *c)
{
    const uint64_t n = rd_get(r, CONF_COUNT);
    if (n > CONF_MAX)
        return false;
    for (uint64_t i = 0; i < n && !r->bad; i++) {
        struct raft_server s = {0};
        char addr[ADDR_MAX];
        raftkv__fields_get(r, server, &s);
        if (!raftkv__str_get(r, addr) ||
            raft_configuration_add(c, s.id, addr, s.role) != 0)
            return false;
    }
    return !r->bad;
}
