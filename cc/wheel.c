/* Carousel timing wheel and pacer; semantics are documented in erma/sdk/cc.h. */
#include "erma/sdk/cc.h"

#include <math.h>
#include <stdlib.h>

#include "erma/errors.h"

#define NONE UINT32_MAX
#define MAX_SLOTS ((uint64_t)1 << 24)

struct erma_wheel_node {
    struct erma_wheel_entry e;
    uint32_t next; /* in its slot's list, or in the free list */
};

struct erma_wheel_cfg erma_wheel_cfg_for(uint32_t mtu_bytes, double min_rate_bps)
{
    if (mtu_bytes == 0)
        mtu_bytes = 1500;
    if (!(min_rate_bps > 0))
        min_rate_bps = 1e6;
    const uint64_t horizon = (uint64_t)ceil(mtu_bytes * 8e9 / min_rate_bps);
    uint64_t slot = 500;
    if (horizon / slot > 65536)
        slot = (horizon + 65535) / 65536;
    return (struct erma_wheel_cfg){.slot_ns = slot, .horizon_ns = horizon, .capacity = 4096};
}

int erma_wheel_init(struct erma_wheel *w, const struct erma_wheel_cfg *cfg,
                    uint64_t now_ns)
{
    if (cfg->slot_ns == 0 || cfg->horizon_ns == 0 || cfg->capacity == 0 ||
        cfg->capacity == NONE)
        return ERMA_EINVAL;
    /* One slot more than the horizon needs: "now" may be anywhere in the
     * current slot, and now + horizon must still land in the last one. */
    const uint64_t nslots = (cfg->horizon_ns + cfg->slot_ns - 1) / cfg->slot_ns + 1;
    if (nslots > MAX_SLOTS)
        return ERMA_EINVAL;
    *w = (struct erma_wheel){
        .slot_ns = cfg->slot_ns,
        .nslots = (uint32_t)nslots,
        .cur_start_ns = now_ns - now_ns % cfg->slot_ns,
        .capacity = cfg->capacity,
    };
    w->head = malloc(nslots * sizeof *w->head);
    w->tail = malloc(nslots * sizeof *w->tail);
    w->nodes = malloc((size_t)cfg->capacity * sizeof *w->nodes);
    if (!w->head || !w->tail || !w->nodes) {
        erma_wheel_destroy(w);
        return ERMA_ENOMEM;
    }
    for (uint32_t i = 0; i < w->nslots; i++)
        w->head[i] = w->tail[i] = NONE;
    for (uint32_t i = 0; i < w->capacity; i++)
        w->nodes[i].next = i + 1 < w->capacity ? i + 1 : NONE;
    return ERMA_OK;
}

void erma_wheel_destroy(struct erma_wheel *w)
{
    free(w->head);
    free(w->tail);
    free(w->nodes);
    w->head = w->tail = NULL;
    w->nodes = NULL;
    w->count = 0;
}

int erma_wheel_insert(struct erma_wheel *w, uint64_t due_ns, void *ptr, uint64_t cookie)
{
    if (w->free_head == NONE || w->count == w->capacity)
        return ERMA_ENOSLOTS;
    uint64_t k = due_ns <= w->cur_start_ns ? 0 : (due_ns - w->cur_start_ns) / w->slot_ns;
    if (k >= w->nslots)
        k = w->nslots - 1;
    uint32_t slot = w->cur + (uint32_t)k;
    if (slot >= w->nslots)
        slot -= w->nslots;

    const uint32_t n = w->free_head;
    w->free_head = w->nodes[n].next;
    w->nodes[n] = (struct erma_wheel_node){
        .e = {.ptr = ptr, .cookie = cookie, .due_ns = due_ns},
        .next = NONE,
    };
    if (w->tail[slot] == NONE)
        w->head[slot] = n;
    else
        w->nodes[w->tail[slot]].next = n;
    w->tail[slot] = n;
    w->count++;
    return ERMA_OK;
}

/* Moves entries of the current slot to out while there is room. */
static size_t drain_current(struct erma_wheel *w, struct erma_wheel_entry *out, size_t max)
{
    size_t got = 0;
    uint32_t n = w->head[w->cur];
    while (n != NONE && got < max) {
        out[got++] = w->nodes[n].e;
        const uint32_t next = w->nodes[n].next;
        w->nodes[n].next = w->free_head;
        w->free_head = n;
        n = next;
    }
    w->head[w->cur] = n;
    if (n == NONE)
        w->tail[w->cur] = NONE;
    w->count -= (uint32_t)got;
    return got;
}

size_t erma_wheel_reap(struct erma_wheel *w, uint64_t now_ns,
                       struct erma_wheel_entry *out, size_t max)
{
    size_t got = 0;
    while (w->cur_start_ns + w->slot_ns <= now_ns) { /* the current slot has ended */
        if (w->count == 0) { /* nothing held: jump to the slot of now */
            const uint64_t k = (now_ns - w->cur_start_ns) / w->slot_ns;
            w->cur = (uint32_t)((w->cur + k % w->nslots) % w->nslots);
            w->cur_start_ns += k * w->slot_ns;
            break;
        }
        got += drain_current(w, out + got, max - got);
        if (w->head[w->cur] != NONE)
            break; /* out is full */
        w->cur = w->cur + 1 == w->nslots ? 0 : w->cur + 1;
        w->cur_start_ns += w->slot_ns;
    }
    return got;
}

uint32_t erma_wheel_count(const struct erma_wheel *w)
{
    return w->count;
}

uint64_t erma_pacer_next_tx(double rate_bps, uint32_t bytes, uint64_t last_tx_ns,
                            uint64_t now_ns)
{
    if (!(rate_bps > 0))
        return UINT64_MAX;
    const double gap = ceil(bytes * 8e9 / rate_bps);
    if (gap >= (double)(UINT64_MAX - last_tx_ns))
        return UINT64_MAX;
    const uint64_t due = last_tx_ns + (uint64_t)gap;
    return due > now_ns ? due : now_ns;
}
