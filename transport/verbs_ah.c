/* transport/verbs_ah.c - the verbs transport's address handles: a cache
 * the data path reads, filled by a resolver thread, as ibv_create_ah may
 * block (verbs_ud.h). */
#include "transport/verbs_ud.h"

/* The resolver thread: creates the address handles the data path asks for,
 * as ibv_create_ah may block (about 1 s on RoCE while the kernel resolves
 * a MAC). */
void *erma__verbs_resolver(void *arg)
{
    struct verbs *v = arg;
    pthread_mutex_lock(&v->lock);
    for (;;) {
        while (!v->qlen && !v->stopping)
            pthread_cond_wait(&v->wake, &v->lock);
        if (v->stopping)
            break;
        struct ah_slot *s = &v->ahs[v->queue[v->qhead]];
        v->qhead = (v->qhead + 1) % AH_QUEUE;
        v->qlen--;
        pthread_mutex_unlock(&v->lock);
        uint16_t lid;
        memcpy(&lid, s->key + 16, 2);
        /* Always with a GRH, so that the receiver learns the sender's GID. */
        struct ibv_ah_attr a = {.dlid = ntohs(lid), .port_num = v->port, .is_global = 1,
                                .grh = {.hop_limit = 64, .sgid_index = v->gid_index}};
        memcpy(a.grh.dgid.raw, s->key, 16);
        s->ah = ibv_create_ah(v->pd, &a);
        if (!s->ah) {
            char gid[INET6_ADDRSTRLEN];
            ERMA_WARN("verbs: no address handle for %s: %s (not retried for 1 s)",
                      inet_ntop(AF_INET6, s->key, gid, sizeof gid), strerror(errno));
            s->retry_ns = verbs_now_ns() + AH_RETRY_NS;
        }
        atomic_store_explicit(&s->state, s->ah ? AH_READY : AH_FAILED, memory_order_release);
        pthread_mutex_lock(&v->lock);
    }
    pthread_mutex_unlock(&v->lock);
    return NULL;
}

static unsigned ah_hash(const uint8_t *key)
{
    uint32_t h = 2166136261u;
    for (int i = 0; i < 18; i++)
        h = (h ^ key[i]) * 16777619u;
    return h % AH_BUCKETS;
}

static void ah_unlink(struct verbs *v, int32_t i)
{
    int32_t *p = &v->bucket[ah_hash(v->ahs[i].key)];
    while (*p != i)
        p = &v->ahs[*p].next;
    *p = v->ahs[i].next;
}

/* A slot to reuse: a free one, else the clock's first not recently used one
 * whose sends all completed; -1 when none is. */
static int32_t ah_victim(struct verbs *v)
{
    if (v->nah < AH_SLOTS)
        return (int32_t)v->nah++;
    for (unsigned k = 0; k < 2 * AH_SLOTS; k++) {
        const unsigned i = v->hand;
        struct ah_slot *s = &v->ahs[i];
        v->hand = (v->hand + 1) % AH_SLOTS;
        const int st = atomic_load_explicit(&s->state, memory_order_acquire);
        if (st == AH_PENDING || (st == AH_READY && s->last_seq > v->completed))
            continue;
        if (s->used) {
            s->used = false;
            continue;
        }
        ah_unlink(v, (int32_t)i);
        if (s->ah)
            ibv_destroy_ah(s->ah);
        s->ah = NULL;
        atomic_store_explicit(&s->state, AH_FREE, memory_order_relaxed);
        return (int32_t)i;
    }
    return -1;
}

/* Hands slot i to the resolver; false when its queue is full. */
static bool ah_request(struct verbs *v, int32_t i)
{
    pthread_mutex_lock(&v->lock);
    const bool ok = v->qlen < AH_QUEUE;
    if (ok) {
        v->queue[(v->qhead + v->qlen++) % AH_QUEUE] = (uint32_t)i;
        atomic_store_explicit(&v->ahs[i].state, AH_PENDING, memory_order_relaxed);
        pthread_cond_signal(&v->wake);
    }
    pthread_mutex_unlock(&v->lock);
    return ok;
}

struct ah_slot *erma__verbs_get_ah(struct verbs *v, const struct erma_addr *dst)
{
    const unsigned b = ah_hash(dst->raw);
    int32_t i = v->bucket[b];
    while (i >= 0 && memcmp(v->ahs[i].key, dst->raw, 18) != 0)
        i = v->ahs[i].next;
    if (i >= 0) {
        struct ah_slot *s = &v->ahs[i];
        const int st = atomic_load_explicit(&s->state, memory_order_acquire);
        s->used = true;
        if (st == AH_READY)
            return s;
        if (st == AH_FAILED && verbs_now_ns() >= s->retry_ns)
            ah_request(v, i); /* failed long enough ago, or the queue was full */
        return NULL;
    }
    if ((i = ah_victim(v)) < 0)
        return NULL;
    struct ah_slot *s = &v->ahs[i];
    memcpy(s->key, dst->raw, 18);
    s->used = true;
    s->last_seq = 0;
    s->retry_ns = 0;
    atomic_store_explicit(&s->state, AH_FAILED, memory_order_relaxed); /* until requested */
    s->next = v->bucket[b];
    v->bucket[b] = i;
    ah_request(v, i);
    return NULL;
}

void erma__verbs_stop_resolver(struct verbs *v)
{
    if (!v->resolver_started)
        return;
    pthread_mutex_lock(&v->lock);
    v->stopping = true;
    pthread_cond_signal(&v->wake);
    pthread_mutex_unlock(&v->lock);
    pthread_join(v->resolver, NULL);
    v->resolver_started = false;
}

