/* The session table: every session by number (a stack of free numbers),
 * server sessions by token and by peer address (open addressing), the
 * credits the sessions hold of the RX ring, and request numbering. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

uint32_t erma_rpc_free_sessions(const struct erma_rpc *rpc)
{
    return (rpc->ep->tr->rx_ring - rpc->table.ring_credits) / rpc->cfg.credits;
}

bool erma__ring_has_room(const struct erma_rpc *rpc, uint32_t credits)
{
    return (uint64_t)rpc->table.ring_credits + credits <= rpc->ep->tr->rx_ring;
}

void erma__set_credits(struct erma_rpc *rpc, struct session *s, uint32_t credits)
{
    rpc->table.ring_credits = rpc->table.ring_credits - s->credits_max + credits;
    s->credits_max = s->credits = credits;
}

/* ---- server sessions by token ---- */

static uint32_t token_slot(const struct rpc_table *t, uint64_t token)
{
    uint64_t x = token;
    uint32_t i = (uint32_t)erma_splitmix64(&x) & (t->token_cap - 1);
    while (t->by_token[i] && t->by_token[i]->token != token)
        i = (i + 1) & (t->token_cap - 1);
    return i;
}

struct session *erma__token_find(const struct erma_rpc *rpc, uint64_t token)
{
    const struct rpc_table *t = &rpc->table;
    return t->token_cap ? t->by_token[token_slot(t, token)] : NULL;
}

int erma__token_insert(struct erma_rpc *rpc, struct session *s)
{
    struct rpc_table *t = &rpc->table;
    if (2 * (t->token_len + 1) > t->token_cap) {
        const uint32_t old_cap = t->token_cap, cap = old_cap ? 2 * old_cap : 64;
        struct session **old = t->by_token, **a = calloc(cap, sizeof *a);
        if (!a)
            return ERMA_ENOMEM;
        t->by_token = a;
        t->token_cap = cap;
        for (uint32_t i = 0; i < old_cap; i++)
            if (old[i])
                a[token_slot(t, old[i]->token)] = old[i];
        free(old);
    }
    t->by_token[token_slot(t, s->token)] = s;
    t->token_len++;
    return ERMA_OK;
}

static void token_remove(struct rpc_table *t, struct session *s)
{
    if (!t->token_cap)
        return;
    uint32_t i = token_slot(t, s->token);
    if (t->by_token[i] != s)
        return;
    t->by_token[i] = NULL;
    t->token_len--;
    for (i = (i + 1) & (t->token_cap - 1); t->by_token[i]; i = (i + 1) & (t->token_cap - 1)) {
        struct session *q = t->by_token[i];
        t->by_token[i] = NULL;
        t->by_token[token_slot(t, q->token)] = q;
    }
}

/* ---- server sessions per peer address ---- */

static uint32_t peer_slot(const struct rpc_table *t, const struct erma_addr *a)
{
    uint64_t x = 0;
    for (uint8_t i = 0; i < a->len; i++)
        x = x * 131 + a->raw[i];
    uint32_t i = (uint32_t)erma_splitmix64(&x) & (t->peer_cap - 1);
    while (t->by_peer[i].n && !erma_addr_eq(&t->by_peer[i].addr, a))
        i = (i + 1) & (t->peer_cap - 1);
    return i;
}

uint32_t erma__peer_sessions(const struct erma_rpc *rpc, const struct erma_addr *a)
{
    const struct rpc_table *t = &rpc->table;
    return t->peer_cap ? t->by_peer[peer_slot(t, a)].n : 0;
}

int erma__peer_add(struct erma_rpc *rpc, const struct erma_addr *a)
{
    struct rpc_table *t = &rpc->table;
    if (2 * (t->peer_len + 1) > t->peer_cap) {
        const uint32_t old_cap = t->peer_cap, cap = old_cap ? 2 * old_cap : 64;
        struct peer_count *old = t->by_peer, *b = calloc(cap, sizeof *b);
        if (!b)
            return ERMA_ENOMEM;
        t->by_peer = b;
        t->peer_cap = cap;
        for (uint32_t i = 0; i < old_cap; i++)
            if (old[i].n)
                b[peer_slot(t, &old[i].addr)] = old[i];
        free(old);
    }
    struct peer_count *e = &t->by_peer[peer_slot(t, a)];
    if (e->n++ == 0) {
        e->addr = *a;
        e->recv_held = 0;
        t->peer_len++;
    }
    return ERMA_OK;
}

uint64_t *erma__peer_recv_held(struct erma_rpc *rpc, const struct erma_addr *a)
{
    struct rpc_table *t = &rpc->table;
    struct peer_count *e = t->peer_cap ? &t->by_peer[peer_slot(t, a)] : NULL;
    return e && e->n ? &e->recv_held : NULL;
}

static void peer_remove(struct rpc_table *t, const struct erma_addr *a)
{
    uint32_t i = t->peer_cap ? peer_slot(t, a) : 0;
    if (!t->peer_cap || !t->by_peer[i].n || --t->by_peer[i].n)
        return;
    t->peer_len--;
    for (i = (i + 1) & (t->peer_cap - 1); t->by_peer[i].n; i = (i + 1) & (t->peer_cap - 1)) {
        const struct peer_count q = t->by_peer[i];
        t->by_peer[i].n = 0;
        t->by_peer[peer_slot(t, &q.addr)] = q;
    }
}

/* ---- numbers ---- */

/* A FREE session number: a reused one, else a new one. */
static int session_num(struct erma_rpc *rpc)
{
    struct rpc_table *t = &rpc->table;
    if (t->nfree_nums)
        return t->free_nums[--t->nfree_nums];
    if (t->n >= MAX_SESSIONS)
        return -1;
    if (t->n == t->cap) {
        const uint32_t cap = t->cap ? 2 * t->cap : 64;
        struct session **a = realloc(t->sessions, cap * sizeof *a);
        if (!a)
            return -1;
        t->sessions = a;
        uint16_t *f = realloc(t->free_nums, cap * sizeof *f);
        if (!f)
            return -1;
        t->free_nums = f;
        struct session **b = realloc(rpc->client.busy, cap * sizeof *b);
        if (!b)
            return -1;
        rpc->client.busy = b;
        t->cap = cap;
    }
    t->sessions[t->n] = NULL;
    return (int)t->n++;
}

struct session *erma__session_alloc(struct erma_rpc *rpc, enum sess_role role)
{
    struct rpc_table *t = &rpc->table;
    const int i = session_num(rpc);
    if (i < 0)
        return NULL;
    struct session *s = t->sessions[i];
    if (!s && !(s = t->sessions[i] = malloc(sizeof *s))) {
        t->free_nums[t->nfree_nums++] = (uint16_t)i;
        return NULL;
    }
    memset(s, 0, sizeof *s);
    s->num = (uint16_t)i;
    s->role = (uint8_t)role;
    s->sm.start_ns = s->sm.last_rx_ns = s->sm.last_tx_ns = rpc->ep->now;
    if (role == CLIENT)
        erma_timely_init(&s->cc.timely, &rpc->cc.timely_cfg, s->sm.start_ns);
    s->client.dupthresh = 3; /* TCP's, until reordering shows it is too few */
    erma_paths_init(&s->ps, 1); /* until the connect handshake says more */
    t->active++;
    return s;
}

/* Where a session's request numbers start: from its token, so both ends
 * know it, and 2^39 starts apart, so that a late packet of an earlier
 * session with the same number falls outside the new one's numbers. */
static uint64_t req_base(uint64_t token)
{
    uint64_t x = token;
    return ((erma_splitmix64(&x) & ((UINT64_C(1) << 39) - 1)) + 1) * ERMA_SESSION_SLOTS;
}

/* Slot k's request numbers are base + k + 8n: the first request is n = 1,
 * so base + k stands for "none yet". */
void erma__session_token(struct session *s, uint64_t token)
{
    s->token = token;
    s->base = req_base(token);
    for (unsigned k = 0; k < ERMA_SESSION_SLOTS; k++)
        s->slots[k].req_num = s->base + k;
}

void erma__session_free(struct erma_rpc *rpc, struct session *s)
{
    struct rpc_table *t = &rpc->table;
    if (s->role == SERVER) {
        token_remove(t, s);
        if (s->peer_counted)
            peer_remove(t, &s->peer);
    }
    t->active--;
    erma__set_credits(rpc, s, 0);
    erma__seal_end(&s->seal);
    s->state = FREE;
    t->free_nums[t->nfree_nums++] = s->num;
}

bool erma__session_open(struct erma_rpc *rpc, struct session *s, uint8_t *pkt, uint32_t *len)
{
    const int rc = erma__seal_open(&s->seal, pkt, len);
    if (rc == ERMA_EAGAIN)
        rpc->stats.rx_replayed++;
    else if (rc != ERMA_OK)
        rpc->stats.rx_auth_failed++;
    return rc == ERMA_OK;
}
