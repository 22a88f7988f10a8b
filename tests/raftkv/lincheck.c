/* lincheck.c - a linearizability checker for key-value histories (lincheck.h):
 * Wing & Gong's search with Lowe's cache of configurations, one key at a time. */
#include "lincheck.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ABSENT 0u       /* the register's value when the key does not exist */
#define NONE UINT32_MAX /* no return entry: an unknown outcome */
#define UNREAD (UINT32_MAX - 1) /* the value of unknown PUTs no GET finds */
#define AROUND 4        /* ops shown that completed before the blocked one */
#define MAX_LINES 24    /* ops shown in a diagnostic */

struct op {
    uint64_t invoke, complete;
    uint32_t key;
    uint32_t value; /* PUT: the value written; GET: the value found, or ABSENT */
    uint8_t kind, result;
};

struct str {
    uint64_t hash;
    size_t off, len;
};

struct lincheck_history {
    struct op *ops;
    size_t nops, opcap;
    struct str *strs; /* string id i is strs[i - 1] */
    size_t nstrs, strcap;
    char *bytes;
    size_t nbytes, bytecap;
    uint32_t *table; /* string ids by hash, 0 = empty; tcap a power of two */
    size_t tcap;
};

/* p with room for need elements of size elem (capacity *cap), or NULL. */
static void *reserve(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    size_t n = *cap ? *cap : 16;
    while (n < need) {
        if (n > SIZE_MAX / 4 / elem)
            return NULL;
        n *= 2;
    }
    void *q = realloc(p, n * elem);
    if (q)
        *cap = n;
    return q;
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static int same_bytes(const void *a, const void *b, size_t n)
{
    return n == 0 || memcmp(a, b, n) == 0;
}

struct lincheck_history *lincheck_create(void)
{
    return calloc(1, sizeof(struct lincheck_history));
}

void lincheck_destroy(struct lincheck_history *h)
{
    if (!h)
        return;
    free(h->ops);
    free(h->strs);
    free(h->bytes);
    free(h->table);
    free(h);
}

static int grow_table(struct lincheck_history *h)
{
    size_t cap = h->tcap ? h->tcap * 2 : 64;
    uint32_t *t = calloc(cap, sizeof *t);
    if (!t)
        return -1;
    for (size_t id = 1; id <= h->nstrs; id++) {
        size_t i = h->strs[id - 1].hash & (cap - 1);
        while (t[i])
            i = (i + 1) & (cap - 1);
        t[i] = (uint32_t)id;
    }
    free(h->table);
    h->table = t;
    h->tcap = cap;
    return 0;
}

/* Adds the string (p, n) with hash hv at table slot i: its id, or 0. */
static uint32_t add_str(struct lincheck_history *h, size_t i, const void *p, size_t n, uint64_t hv)
{
    if (h->nstrs >= UINT32_MAX - 2 || n > SIZE_MAX / 4 - h->nbytes)
        return 0;
    struct str *s = reserve(h->strs, &h->strcap, h->nstrs + 1, sizeof *s);
    if (!s)
        return 0;
    h->strs = s;
    char *b = reserve(h->bytes, &h->bytecap, h->nbytes + n + 1, 1);
    if (!b)
        return 0;
    h->bytes = b;
    if (n)
        memcpy(b + h->nbytes, p, n);
    s[h->nstrs] = (struct str){.hash = hv, .off = h->nbytes, .len = n};
    h->nbytes += n;
    h->table[i] = (uint32_t)++h->nstrs;
    return (uint32_t)h->nstrs;
}

/* The id (1, 2, ...) of the byte string (p, n), added if new; 0 when out of memory. */
static uint32_t intern(struct lincheck_history *h, const void *p, size_t n)
{
    if ((h->nstrs + 1) * 2 > h->tcap && grow_table(h) < 0)
        return 0;
    const uint64_t hv = fnv(p, n);
    const size_t mask = h->tcap - 1;
    for (size_t i = hv & mask;; i = (i + 1) & mask) {
        const uint32_t id = h->table[i];
        if (!id)
            return add_str(h, i, p, n, hv);
        const struct str *s = &h->strs[id - 1];
        if (s->hash == hv && s->len == n && same_bytes(h->bytes + s->off, p, n))
            return id;
    }
}

static int valid_result(enum lincheck_kind kind, enum lincheck_result r)
{
    switch (kind) {
    case LINCHECK_PUT:
        return r == LINCHECK_RESULT_OK || r == LINCHECK_RESULT_UNKNOWN;
    case LINCHECK_GET:
        return r == LINCHECK_RESULT_VALUE || r == LINCHECK_RESULT_ENOENT ||
               r == LINCHECK_RESULT_UNKNOWN;
    case LINCHECK_DEL:
        return r == LINCHECK_RESULT_OK || r == LINCHECK_RESULT_ENOENT ||
               r == LINCHECK_RESULT_UNKNOWN;
    }
    return 0;
}

static int has_value(const struct lincheck_op *op)
{
    return op->kind == LINCHECK_PUT ||
           (op->kind == LINCHECK_GET && op->result == LINCHECK_RESULT_VALUE);
}

static int valid_op(const struct lincheck_op *op)
{
    const int unknown = op->result == LINCHECK_RESULT_UNKNOWN;
    if (!valid_result(op->kind, op->result) || op->complete < op->invoke)
        return 0;
    if (unknown != (op->complete == UINT64_MAX))
        return 0;
    if (!op->key && op->key_len)
        return 0;
    return !has_value(op) || op->value || !op->value_len;
}

int lincheck_add(struct lincheck_history *h, const struct lincheck_op *op)
{
    if (!h || !op || !valid_op(op))
        return LINCHECK_EINVAL;
    if (h->nops >= UINT32_MAX - 1)
        return LINCHECK_ENOMEM;
    struct op *ops = reserve(h->ops, &h->opcap, h->nops + 1, sizeof *ops);
    if (!ops)
        return LINCHECK_ENOMEM;
    h->ops = ops;
    struct op o = {.invoke = op->invoke, .complete = op->complete, .value = ABSENT,
                   .kind = (uint8_t)op->kind, .result = (uint8_t)op->result};
    o.key = intern(h, op->key, op->key_len);
    if (!o.key)
        return LINCHECK_ENOMEM;
    if (has_value(op)) {
        o.value = intern(h, op->value, op->value_len);
        if (!o.value)
            return LINCHECK_ENOMEM;
    }
    ops[h->nops++] = o;
    return LINCHECK_OK;
}

/* ---- the diagnostic text ---- */

struct out {
    char *buf;
    size_t cap, len;
};

static void say(struct out *o, const char *fmt, ...)
{
    if (o->len + 1 >= o->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->len += (size_t)n < o->cap - o->len ? (size_t)n : o->cap - o->len - 1;
}

/* The string id as a quoted C-like literal, cut after 40 bytes. */
static void say_str(struct out *o, const struct lincheck_history *h, uint32_t id)
{
    const struct str *s = &h->strs[id - 1];
    const unsigned char *b = (const unsigned char *)h->bytes + s->off;
    say(o, "\"");
    for (size_t i = 0; i < s->len && i < 40; i++) {
        if (b[i] >= 0x20 && b[i] < 0x7f && b[i] != '"' && b[i] != '\\')
            say(o, "%c", b[i]);
        else
            say(o, "\\x%02x", b[i]);
    }
    say(o, s->len > 40 ? "\"..." : "\"");
}

static void say_state(struct out *o, const struct lincheck_history *h, uint32_t state)
{
    if (state == ABSENT)
        say(o, "absent");
    else if (state == UNREAD)
        say(o, "holding a value of unknown outcome that no GET found");
    else
        say_str(o, h, state);
}

static void say_result(struct out *o, const struct op *p)
{
    if (p->result == LINCHECK_RESULT_OK)
        say(o, "OK");
    else if (p->result == LINCHECK_RESULT_ENOENT)
        say(o, "ENOENT");
    else
        say(o, "unknown");
}

static void say_op(struct out *o, const struct lincheck_history *h, size_t g, char mark)
{
    const struct op *p = &h->ops[g];
    say(o, "%c #%zu ", mark, g);
    if (p->kind == LINCHECK_PUT) {
        say(o, "PUT ");
        say_str(o, h, p->value);
        say(o, " -> ");
        say_result(o, p);
    } else {
        say(o, p->kind == LINCHECK_GET ? "GET -> " : "DEL -> ");
        if (p->result == LINCHECK_RESULT_VALUE)
            say_str(o, h, p->value);
        else
            say_result(o, p);
    }
    if (p->complete == UINT64_MAX)
        say(o, " [%llu, -]\n", (unsigned long long)p->invoke);
    else
        say(o, " [%llu, %llu]\n", (unsigned long long)p->invoke, (unsigned long long)p->complete);
}

/* ---- one key: the search ---- */

struct entry {
    uint64_t time;
    uint32_t op; /* the local op index */
    uint32_t ret;
};

/* A step: known op op linearized, just after the unknown op whose call
 * entry is unode (0: none). */
struct frame {
    uint32_t op, unode;
    uint32_t state;  /* the register's value before the step */
    uint32_t forced; /* the only step worth trying there (see forced_op) */
};

/* A configuration seen: the ops linearized (the words [lo, lo + n) of the
 * known ops' bitset, outside which it is all ones, then all zeros; then the
 * unknown ops' bitset; both at arena[off]) and the register's value. */
struct cfg {
    uint64_t hash; /* of all the ops linearized and the value */
    size_t off;
    uint32_t lo, n, state;
};

struct keycheck {
    const struct lincheck_history *h;
    uint32_t *ops; /* global indices of the ops checked, by invoke time */
    size_t m, known;
    struct entry *ent; /* ent[1..2m]: calls and returns by time; 0 the list's head */
    uint32_t *next, *prev;
    uint32_t *call, *ret; /* each op's entries (ret NONE: unknown outcome) */
    uint32_t *bit;        /* each op's bit in bits (known) or ubits (unknown) */
    uint64_t *bits, *ubits, *zob; /* the ops linearized; each op's random hash */
    size_t words, uwords;
    uint8_t *unread; /* each unknown PUT: 1 if no GET can find its value */
    struct frame *stack;
    size_t depth;
    struct cfg *cfgs; /* the cache */
    size_t ncfg, cfgcap;
    uint64_t *arena;
    size_t narena, arenacap;
    uint32_t *table; /* cfg index + 1 by hash, 0 = empty */
    size_t tcap;
    uint64_t states, budget; /* explored over all keys, and the bound */
    uint32_t best;           /* the latest return entry the search was stopped at */
    uint32_t best_state;
    size_t best_depth;
};

static const struct op *op_of(const struct keycheck *k, uint32_t i)
{
    return &k->h->ops[k->ops[i]];
}

/* Applies op o to the register's value s: 1 and the new value in *ns if
 * a sequential store gives o's result. */
static int step(const struct op *o, uint32_t s, uint32_t *ns)
{
    *ns = ABSENT;
    if (o->kind == LINCHECK_PUT) {
        *ns = o->value;
        return 1;
    }
    if (o->kind == LINCHECK_GET) {
        *ns = s;
        return s == o->value;
    }
    if (o->result == LINCHECK_RESULT_OK)
        return s != ABSENT;
    return o->result == LINCHECK_RESULT_ENOENT ? s == ABSENT : 1;
}

static void flip(struct keycheck *k, uint32_t i)
{
    uint64_t *b = k->ret[i] == NONE ? k->ubits : k->bits;
    b[k->bit[i] / 64] ^= 1ull << (k->bit[i] % 64);
}

/* The words [*lo, *hi) of k->bits outside of which it is all ones, then all
 * zeros: short, as the ops linearized are mostly the first ones invoked. */
static void window(const struct keycheck *k, size_t *lo, size_t *hi)
{
    size_t l = 0, e = k->words;
    while (l < e && k->bits[l] == UINT64_MAX)
        l++;
    while (e > l && k->bits[e - 1] == 0)
        e--;
    *lo = l;
    *hi = e;
}

/* Whether c is the configuration (k->bits, k->ubits, state). */
static int same_cfg(const struct keycheck *k, const struct cfg *c, size_t lo, size_t hi)
{
    const uint64_t *a = k->arena + c->off;
    return c->lo == lo && c->n == hi - lo &&
           same_bytes(a, k->bits + lo, (hi - lo) * sizeof *a) &&
           same_bytes(a + c->n, k->ubits, k->uwords * sizeof *a);
}

static int grow_cache(struct keycheck *k)
{
    const size_t cap = k->tcap ? k->tcap * 2 : 1024;
    uint32_t *t = calloc(cap, sizeof *t);
    if (!t)
        return -1;
    for (size_t c = 0; c < k->ncfg; c++) {
        size_t i = k->cfgs[c].hash & (cap - 1);
        while (t[i])
            i = (i + 1) & (cap - 1);
        t[i] = (uint32_t)(c + 1);
    }
    free(k->table);
    k->table = t;
    k->tcap = cap;
    return 0;
}

static int add_cfg(struct keycheck *k, size_t slot, uint64_t hash, uint32_t state, size_t lo,
                   size_t hi)
{
    struct cfg *c = reserve(k->cfgs, &k->cfgcap, k->ncfg + 1, sizeof *c);
    if (!c)
        return LINCHECK_ENOMEM;
    k->cfgs = c;
    const size_t n = hi - lo + k->uwords;
    uint64_t *a = reserve(k->arena, &k->arenacap, k->narena + n + 1, sizeof *a);
    if (!a)
        return LINCHECK_ENOMEM;
    k->arena = a;
    if (hi > lo)
        memcpy(a + k->narena, k->bits + lo, (hi - lo) * sizeof *a);
    memcpy(a + k->narena + (hi - lo), k->ubits, k->uwords * sizeof *a);
    c[k->ncfg] = (struct cfg){.hash = hash, .off = k->narena, .lo = (uint32_t)lo,
                              .n = (uint32_t)(hi - lo), .state = state};
    k->narena += n;
    k->table[slot] = (uint32_t)++k->ncfg;
    k->states++;
    return 1;
}

/* Adds the configuration (k->bits, k->ubits, state), whose ops hash to zob,
 * to the cache: 1 if new, 0 if seen (searched already, in vain), or
 * LINCHECK_ENOMEM / LINCHECK_TOO_MANY_STATES. */
static int visit(struct keycheck *k, uint64_t zob, uint32_t state)
{
    if (k->states >= k->budget || k->ncfg >= UINT32_MAX - 2)
        return LINCHECK_TOO_MANY_STATES;
    if ((k->ncfg + 1) * 2 > k->tcap && grow_cache(k) < 0)
        return LINCHECK_ENOMEM;
    const uint64_t hash = zob ^ mix(state);
    const size_t mask = k->tcap - 1;
    size_t lo, hi;
    window(k, &lo, &hi);
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        const uint32_t c = k->table[i];
        if (!c)
            return add_cfg(k, i, hash, state, lo, hi);
        const struct cfg *f = &k->cfgs[c - 1];
        if (f->hash == hash && f->state == state && same_cfg(k, f, lo, hi))
            return 0;
    }
}

/* Takes op i's entries out of the list, or (unlift) puts them back: the
 * reverse order, so the neighbours' links are the ones they had. */
static void unlink_node(struct keycheck *k, uint32_t n)
{
    k->next[k->prev[n]] = k->next[n];
    k->prev[k->next[n]] = k->prev[n];
}

static void relink_node(struct keycheck *k, uint32_t n)
{
    k->next[k->prev[n]] = n;
    k->prev[k->next[n]] = n;
}

static void lift(struct keycheck *k, uint32_t i)
{
    unlink_node(k, k->call[i]);
    if (k->ret[i] != NONE)
        unlink_node(k, k->ret[i]);
}

static void unlift(struct keycheck *k, uint32_t i)
{
    if (k->ret[i] != NONE)
        relink_node(k, k->ret[i]);
    relink_node(k, k->call[i]);
}

static void note_block(struct keycheck *k, uint32_t node, uint32_t state)
{
    if (node > k->best) {
        k->best = node;
        k->best_state = state;
        k->best_depth = k->depth;
    }
}

/* Where the search is: the configuration (with k->bits, k->ubits) and the
 * next step to try from it, op x at call entry node, just after the unknown
 * op following call entry unode (0: x alone, then after each unknown op). */
struct pos {
    uint32_t state, node, unode;
    uint64_t zob;  /* of the ops linearized */
    size_t done;   /* how many known ones */
};

/* The register's value after unknown op i: absent after a DEL; after a
 * PUT, its value, or UNREAD when no GET can find it (then all such PUTs
 * have one effect, so that twin_before() sees them as twins). */
static uint32_t effect(const struct keycheck *k, uint32_t i)
{
    const struct op *o = op_of(k, i);
    return o->kind != LINCHECK_PUT ? ABSENT : k->unread[i] ? UNREAD : o->value;
}

/* Linearizes the unknown op u (NONE: none), then the known op x: 1 if done
 * (a new configuration), 0 if x's result does not fit or the configuration
 * was seen, or an error. */
static int push(struct keycheck *k, struct pos *p, uint32_t x, uint32_t u, uint32_t forced)
{
    const uint32_t mid = u != NONE ? effect(k, u) : p->state;
    uint32_t ns;
    if (!step(op_of(k, x), mid, &ns))
        return 0;
    const uint64_t zob = p->zob ^ k->zob[x] ^ (u != NONE ? k->zob[u] : 0);
    flip(k, x);
    if (u != NONE)
        flip(k, u);
    const int r = visit(k, zob, ns);
    if (r != 1) {
        flip(k, x);
        if (u != NONE)
            flip(k, u);
        return r;
    }
    k->stack[k->depth++] = (struct frame){x, u != NONE ? k->call[u] : 0, p->state, forced};
    if (u != NONE)
        lift(k, u);
    lift(k, x);
    p->state = ns;
    p->zob = zob;
    p->done++;
    return 1;
}

/* Undoes the last step; the frame it was. */
static struct frame pop(struct keycheck *k, struct pos *p)
{
    const struct frame f = k->stack[--k->depth];
    unlift(k, f.op);
    flip(k, f.op);
    p->zob ^= k->zob[f.op];
    if (f.unode) {
        const uint32_t u = k->ent[f.unode].op;
        unlift(k, u);
        flip(k, u);
        p->zob ^= k->zob[u];
    }
    p->state = f.state;
    p->done--;
    return f;
}

/* Whether the call entry n may go next (no return entry before it left). */
static int minimal(const struct keycheck *k, uint32_t n)
{
    return n && !k->ent[n].ret;
}

/* A known read that may go next and leaves the value as it is (a GET that
 * finds it, a DEL finding no key absent), or NONE. Linearizing it first
 * loses nothing (any linearization can take it first), so it is the only
 * step tried: reads never branch the search. Not a PUT of the value held:
 * its write may be needed after a later DEL. */
static uint32_t forced_op(const struct keycheck *k, uint32_t state)
{
    for (uint32_t n = k->next[0]; minimal(k, n); n = k->next[n]) {
        const uint32_t i = k->ent[n].op;
        uint32_t ns;
        if (k->ret[i] != NONE && op_of(k, i)->kind != LINCHECK_PUT &&
            step(op_of(k, i), state, &ns) && ns == state)
            return i;
    }
    return NONE;
}

/* Whether an unknown op with the same effect as that of call entry u (the
 * same value written, or the key deleted) may go next before u in the list:
 * then u needs no try, as the two could trade places in any linearization
 * (neither has a return, and both may go now). */
static int twin_before(const struct keycheck *k, uint32_t u)
{
    const uint32_t e = effect(k, k->ent[u].op);
    for (uint32_t n = k->next[0]; n != u; n = k->next[n]) {
        const uint32_t i = k->ent[n].op;
        if (k->ret[i] == NONE && effect(k, i) == e)
            return 1;
    }
    return 0;
}

/* Takes the next step from p's on: 1 if one led to a new configuration, 0
 * when none is left (p->node is then the return entry that blocks), or an
 * error. A known op x goes alone when its result fits, else just after an
 * unknown op whose effect makes it fit: where a linearization has unknown
 * ops between two known ones, dropping all but the last of them, and that
 * one too unless the next known op needs its effect, leaves one as good. */
static int next_step(struct keycheck *k, struct pos *p)
{
    for (; minimal(k, p->node); p->node = k->next[p->node], p->unode = 0) {
        const uint32_t x = k->ent[p->node].op;
        uint32_t ns;
        if (k->ret[x] == NONE)
            continue;
        if (step(op_of(k, x), p->state, &ns)) {
            const int r = push(k, p, x, NONE, 0);
            if (r != 0)
                return r;
            continue;
        }
        for (uint32_t u = k->next[p->unode]; minimal(k, u); u = k->next[u]) {
            const uint32_t i = k->ent[u].op;
            const int r = k->ret[i] == NONE && !twin_before(k, u) ? push(k, p, x, i, 0) : 0;
            if (r != 0)
                return r;
        }
    }
    return 0;
}

/* Undoes steps back to the last one taken by choice, then moves p past it:
 * 0 when there is none. */
static int backtrack(struct keycheck *k, struct pos *p)
{
    while (k->depth) {
        const struct frame f = pop(k, p);
        if (f.forced)
            continue;
        p->node = f.unode ? k->call[f.op] : k->next[k->call[f.op]];
        p->unode = f.unode;
        return 1;
    }
    return 0;
}

/* The search (Wing and Gong's, with Lowe's cache): LINCHECK_OK once every
 * op with a known result is linearized (unknown ones left over never took
 * effect), or why not. */
static int search(struct keycheck *k)
{
    struct pos p = {.state = ABSENT};
    int fresh = 1; /* p is at a configuration not tried yet */
    while (p.done < k->known) {
        const uint32_t g = fresh ? forced_op(k, p.state) : NONE;
        if (fresh) {
            p.node = k->next[0];
            p.unode = 0;
        }
        const int r = g != NONE ? push(k, &p, g, NONE, 1) : next_step(k, &p);
        if (r < 0 || r == LINCHECK_TOO_MANY_STATES)
            return r;
        fresh = r == 1;
        if (fresh)
            continue;
        if (g == NONE)
            note_block(k, p.node, p.state);
        if (!backtrack(k, &p))
            return LINCHECK_NONLINEARIZABLE;
    }
    return LINCHECK_OK;
}

/* ---- one key: setting up ---- */

/* Whether a known op of g[0..n) that may come after the unknown-outcome
 * PUT or DEL u needs what u leaves: its value (need 2: a GET finding it),
 * an existing key (need 1: that or a DEL returning OK), or none (a DEL:
 * ENOENT). */
static int needed(const struct lincheck_history *h, const struct op *u, const uint32_t *g,
                  size_t n, int need)
{
    for (size_t j = 0; j < n; j++) {
        const struct op *o = &h->ops[g[j]];
        if (o->result == LINCHECK_RESULT_UNKNOWN || o->complete < u->invoke)
            continue;
        if (u->kind == LINCHECK_PUT ? (o->kind == LINCHECK_GET && o->value == u->value) ||
                                          (need == 1 && o->kind == LINCHECK_DEL &&
                                           o->result == LINCHECK_RESULT_OK)
                                    : o->result == LINCHECK_RESULT_ENOENT)
            return 1;
    }
    return 0;
}

static int keep(const struct lincheck_history *h, uint32_t gi, const uint32_t *g, size_t n)
{
    const struct op *o = &h->ops[gi];
    if (o->result != LINCHECK_RESULT_UNKNOWN)
        return 1;
    return o->kind != LINCHECK_GET && needed(h, o, g, n, 1);
}

static int by_time(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    if (x->time != y->time)
        return x->time < y->time ? -1 : 1;
    if (x->ret != y->ret)
        return x->ret < y->ret ? -1 : 1; /* calls first: touching ops overlap */
    return x->op < y->op ? -1 : x->op > y->op;
}

static void free_key(struct keycheck *k)
{
    free(k->ops);
    free(k->ent);
    free(k->next);
    free(k->prev);
    free(k->call);
    free(k->ret);
    free(k->bits);
    free(k->zob);
    free(k->stack);
    free(k->bit);
    free(k->unread);
    free(k->ubits);
    free(k->cfgs);
    free(k->arena);
    free(k->table);
}

static int alloc_key(struct keycheck *k, size_t n)
{
    const size_t e = 2 * n + 1;
    k->words = n / 64 + 1;
    k->uwords = n / 64 + 1; /* cut to what the unknown ops need in build_list */
    k->ops = malloc(n * sizeof *k->ops + 1);
    k->ent = calloc(e, sizeof *k->ent);
    k->next = calloc(e, sizeof *k->next);
    k->prev = calloc(e, sizeof *k->prev);
    k->call = calloc(n + 1, sizeof *k->call);
    k->ret = calloc(n + 1, sizeof *k->ret);
    k->bits = calloc(k->words, sizeof *k->bits);
    k->zob = calloc(n + 1, sizeof *k->zob);
    k->stack = calloc(n + 1, sizeof *k->stack);
    k->bit = calloc(n + 1, sizeof *k->bit);
    k->unread = calloc(n + 1, 1);
    k->ubits = calloc(k->uwords, sizeof *k->ubits);
    return k->ops && k->ent && k->next && k->prev && k->call && k->ret && k->bits && k->zob &&
                   k->stack && k->bit && k->unread && k->ubits
               ? 0
               : -1;
}

/* The list of calls and returns of the ops kept, sorted by time. */
static void build_list(struct keycheck *k)
{
    size_t e = 0, unknown = 0;
    for (uint32_t i = 0; i < k->m; i++) {
        const struct op *o = op_of(k, i);
        k->ent[++e] = (struct entry){o->invoke, i, 0};
        k->ret[i] = NONE;
        k->bit[i] = (uint32_t)unknown++;
        if (o->result != LINCHECK_RESULT_UNKNOWN) {
            k->ent[++e] = (struct entry){o->complete, i, 1};
            k->bit[i] = (uint32_t)k->known++;
            unknown--;
        }
        k->zob[i] = mix(0x5eed0000ull + i);
    }
    k->words = k->known / 64 + 1;
    k->uwords = unknown / 64 + 1;
    qsort(k->ent + 1, e, sizeof *k->ent, by_time);
    k->ent[0] = (struct entry){0, 0, 0};
    for (uint32_t n = 1; n <= e; n++) {
        const struct entry *x = &k->ent[n];
        if (x->ret)
            k->ret[x->op] = n;
        else
            k->call[x->op] = n;
        k->next[n] = n == e ? 0 : n + 1;
        k->prev[n] = n - 1;
    }
    k->next[0] = e ? 1 : 0;
    k->prev[0] = (uint32_t)e;
}

/* The ops shown around the blocked one b, by invoke time: the AROUND that
 * completed last before it was invoked, those overlapping it (unknown ones
 * only if invoked since the first of those AROUND). */
static void say_around(struct out *o, const struct keycheck *k, const struct op *b, size_t gb)
{
    uint64_t last[AROUND] = {0};
    size_t nlast = 0, lines = 0;
    for (uint32_t i = 0; i < k->m; i++) {
        const uint64_t c = op_of(k, i)->complete;
        if (c >= b->invoke)
            continue;
        if (nlast == AROUND && c <= last[AROUND - 1])
            continue;
        size_t j = nlast < AROUND ? nlast++ : AROUND - 1;
        for (; j > 0 && last[j - 1] < c; j--)
            last[j] = last[j - 1];
        last[j] = c;
    }
    const uint64_t since = nlast ? last[nlast - 1] : b->invoke;
    for (uint32_t i = 0; i < k->m && lines < MAX_LINES; i++) {
        const struct op *p = op_of(k, i);
        const int before = nlast && p->complete < b->invoke && p->complete >= since;
        const int unknown = p->result == LINCHECK_RESULT_UNKNOWN;
        const int overlaps = p->invoke <= b->complete && p->complete >= b->invoke &&
                             (!unknown || p->invoke >= since);
        if (before || overlaps) {
            say_op(o, k->h, k->ops[i], k->ops[i] == gb ? '>' : ' ');
            lines++;
        }
    }
    if (lines == MAX_LINES)
        say(o, "  ...\n");
}

static void say_failure(struct out *o, const struct keycheck *k, uint32_t key, int rc,
                        size_t dropped)
{
    say(o, "key ");
    say_str(o, k->h, key);
    say(o, ": %s (%zu ops checked, %zu dropped as unknown and unneeded, %llu states so far)\n",
        rc == LINCHECK_NONLINEARIZABLE ? "not linearizable" : "too many states, gave up", k->m,
        dropped, (unsigned long long)k->states);
    if (!k->best)
        return;
    const uint32_t i = k->ent[k->best].op;
    const size_t g = k->ops[i];
    say(o, "no linearization gets past the return of #%zu; the furthest had %zu ops "
           "linearized, the key ",
        g, k->best_depth);
    say_state(o, k->h, k->best_state);
    say(o, "\nthe ops around it:\n");
    say_around(o, k, op_of(k, i), g);
}

/* Checks the ops g[0..n) of one key. */
static int check_key(struct keycheck *k, const uint32_t *g, size_t n, struct lincheck_stats *st,
                     struct out *o)
{
    if (alloc_key(k, n) < 0)
        return LINCHECK_ENOMEM;
    for (size_t j = 0; j < n; j++) /* by invoke time, in k->ent for now */
        if (keep(k->h, g[j], g, n))
            k->ent[k->m++] = (struct entry){k->h->ops[g[j]].invoke, g[j], 0};
    qsort(k->ent, k->m, sizeof *k->ent, by_time);
    for (size_t i = 0; i < k->m; i++) {
        k->ops[i] = k->ent[i].op;
        const struct op *u = op_of(k, (uint32_t)i);
        k->unread[i] = u->result == LINCHECK_RESULT_UNKNOWN && !needed(k->h, u, g, n, 2);
    }
    build_list(k);
    st->dropped += n - k->m;
    if (k->m > st->max_key_ops)
        st->max_key_ops = k->m;
    const int rc = search(k);
    if (rc == LINCHECK_NONLINEARIZABLE || rc == LINCHECK_TOO_MANY_STATES)
        say_failure(o, k, k->h->ops[g[0]].key, rc, n - k->m);
    return rc;
}

/* The op indices grouped by key: idx[start[j]..start[j + 1]) for j < *nkeys. */
static int group(const struct lincheck_history *h, uint32_t **idx, size_t **start, size_t *nkeys)
{
    size_t *count = calloc(h->nstrs + 2, sizeof *count);
    *idx = malloc(h->nops * sizeof **idx + 1);
    *start = malloc((h->nstrs + 2) * sizeof **start);
    if (!count || !*idx || !*start) {
        free(count);
        return -1;
    }
    for (size_t i = 0; i < h->nops; i++)
        count[h->ops[i].key]++;
    size_t at = 0;
    *nkeys = 0;
    for (size_t id = 0; id <= h->nstrs; id++) {
        if (!count[id])
            continue;
        (*start)[(*nkeys)++] = at;
        at += count[id];
        count[id] = at - count[id];
    }
    (*start)[*nkeys] = at;
    for (size_t i = 0; i < h->nops; i++)
        (*idx)[count[h->ops[i].key]++] = (uint32_t)i;
    free(count);
    return 0;
}

int lincheck_check(const struct lincheck_history *h, uint64_t max_states, char *diag,
                   size_t diag_len, struct lincheck_stats *stats)
{
    if (!h || (!diag && diag_len))
        return LINCHECK_EINVAL;
    struct out o = {diag, diag_len, 0};
    if (diag_len)
        diag[0] = '\0';
    struct lincheck_stats st = {.ops = h->nops};
    uint32_t *idx = NULL;
    size_t *start = NULL;
    int rc = group(h, &idx, &start, &st.keys) < 0 ? LINCHECK_ENOMEM : LINCHECK_OK;
    const uint64_t budget = max_states ? max_states : LINCHECK_DEFAULT_MAX_STATES;
    for (size_t j = 0; rc == LINCHECK_OK && j < st.keys; j++) {
        struct keycheck k = {.h = h, .budget = budget, .states = st.states};
        rc = check_key(&k, idx + start[j], start[j + 1] - start[j], &st, &o);
        st.states = k.states;
        free_key(&k);
    }
    if (rc == LINCHECK_OK)
        say(&o, "linearizable: %zu keys, %zu ops (%zu dropped), %llu states\n", st.keys, st.ops,
            st.dropped, (unsigned long long)st.states);
    free(idx);
    free(start);
    if (stats)
        *stats = st;
    return rc;
}
