/* rma/portal.h - the portal part: the initiator's peers, command slots,
 * queues by priority, ops in flight, and the hooks of the executor above
 * it. Its files, each on its own concern, bottom up:
 *   peer.c      peers, their round trips and timeouts, virtual paths
 *   slot.c      the slot table, free list, queues and the deadline heap
 *   fence.c     fenced WRITEs held until the writes before them end
 *   complete.c  an op's end: its completion, or a chunk's hook
 *   issue.c     issue under the inbound window and pacing, timeouts
 *   answer.c    answers from targets matched to their ops
 *   portal.c    the part's lifetime, submission
 * The portal knows no transfer: a transfer's chunks are commands like any
 * other, whose end goes to the hooks the executor registered. */
#ifndef ERMA_RMA_PORTAL_H
#define ERMA_RMA_PORTAL_H

#include "internal.h"

/* SLOT_FENCED: a fenced WRITE held back, in portal->fenced, until the
 * earlier writes it waits for have completed (fence.c). */
enum slot_state { SLOT_FREE, SLOT_QUEUED, SLOT_ISSUED, SLOT_SENT_DATA, SLOT_DONE, SLOT_FENCED };

struct slot {
    uint8_t state, op, prio;
    uint8_t path;           /* the virtual path of its packets */
    bool path_out;          /* completed on a path out of use (pruned) */
    /* A transfer's chunk: its end goes to hooks.chunk_done instead of a
     * completion on the queue, and the slot is freed after it. */
    bool chunk;
    int peer;
    struct erma_rkey rkey;
    uint64_t offset;
    uint8_t *local;
    uint32_t len;
    uint64_t grace_ns;
    uint64_t tag;
    erma_rma_cb cb;         /* a command's callback, NULL: polled */
    void *cb_ctx;
    uint64_t init_ctr;
    uint64_t submit_ns, issue_ns;
    uint64_t queued_ns;     /* entered the local queue (DISPATCH_TIMEOUT from here) */
    uint64_t due_ns;        /* a chunk: when its windows let it go (issue.c, pace) */
    uint64_t wseq;          /* WRITE command (not a chunk): its place among writes */
    uint32_t fence_wait;    /* SLOT_FENCED: earlier writes not yet completed */
    int fence_status;       /* ERMA_OK, or ERMA_ECANCELLED: one of them failed */
    bool fence;
    uint64_t sent_ns;       /* the last packet that asked for an answer */
    uint64_t host_ns;       /* of its round trips, the time spent inside the hosts */
    uint64_t deadline_ns;   /* TIMEOUT at this time (engine clock) */
    uint64_t wire_deadline; /* the deadline the target sees (wire clock) */
    uint32_t got, bytes;    /* READ: packets and bytes received */
    int status;
    int32_t prev, next;     /* queue or free list */
    int32_t heap_idx;       /* in flight: position in the deadline heap */
};

struct peer {
    struct erma_addr addr;
    uint64_t srtt_ns, rttvar_ns; /* smoothed round trip and its variation */
    uint64_t backoff_ns;         /* after a timeout: the least RTO until a sample */
    uint64_t stall_ns, stall_at_ns; /* the longest round trip lately, and when */
    bool sampled;
    struct erma_paths ps;        /* its virtual paths: ops spread over our ports */
};

struct list { int32_t head, tail; };

/* The deadline heap holds each key beside its slot, so that its walks and
 * the loop's look at the first deadline touch no slot. */
struct heap_entry {
    uint64_t deadline_ns; /* the slot's deadline_ns, which stays while in the heap */
    int32_t slot;
};

/* How a chunk ended, for hooks.chunk_done. */
struct rma_chunk_end {
    uint64_t tag;                /* the chunk command's tag */
    const uint8_t *local;        /* its local buffer */
    int status;
    uint64_t submit_ns, issue_ns; /* issue_ns: the end, for one never issued */
    uint64_t host_ns;            /* of its round trips, the time inside the hosts */
    bool path_out;               /* it ended on a path out of use (pruned) */
};

/* What the executor registers with the portal, which calls these for
 * whatever a transfer has to learn of its chunks and of the writes that
 * fence it. All are required. */
struct rma_portal_hooks {
    /* A chunk ended; its slot is freed right after. */
    void (*chunk_done)(struct erma_rma *rma, const struct rma_chunk_end *e);
    /* A slot was freed or the inbound window opened: a chunk may go. */
    void (*room)(struct erma_rma *rma);
    /* Writes to (peer, region) in progress outside the slots (transfers). */
    uint32_t (*writes)(const struct erma_rma *rma, int peer, uint32_t region);
    /* Write wseq to (peer, region) ended with status: what waits outside
     * the slots (fenced transfers) waits for one write less. */
    void (*write_done)(struct erma_rma *rma, int peer, uint32_t region, uint64_t wseq,
                       int status);
    /* READ chunks are paced by the answers they solicit (issue.c). */
    bool paced;
};

struct rma_portal {
    struct peer *peers;
    uint32_t npeers, peers_cap;
    struct slot *slots;         /* cfg.slots */
    int32_t free_slots;
    uint32_t nfree;             /* slots on the free list */
    struct list queued[ERMA_RMA_PRIORITIES];
    uint32_t nqueued;           /* slots on the queued lists: none, no loop over them */
    struct list fenced;         /* SLOT_FENCED slots, in submission order */
    uint64_t wseq;              /* WRITE commands and transfers numbered */
    bool fence_settling;
    struct heap_entry *heap;    /* slots in flight, a min-heap by deadline */
    uint32_t nheap;
    uint32_t inbound;           /* READ bytes outstanding */
    uint64_t queued_in;         /* READ bytes waiting in the local queue */
    uint64_t answers_at_ns;     /* no chunk READ issues before this (issue.c) */
    uint64_t last_poll_ns;      /* stall detection for timeouts */
    uint32_t deferrals;
    struct rma_portal_hooks hooks;
};

/* ---- for the engine and the executor ---- */

/* portal.c */
int erma__portal_init(struct erma_rma *rma);
void erma__portal_fini(struct erma_rma *rma);
void erma__portal_set_hooks(struct erma_rma *rma, const struct rma_portal_hooks *h);
/* Takes a transfer's chunk into a slot (as erma_rma_submit() a command);
 * its windows let it go at due_ns. Its slot's id, or an error. */
int erma__portal_submit_chunk(struct erma_rma *rma, const struct erma_rma_cmd *cmd,
                              uint64_t due_ns);
/* ERMA_OK when this engine can use key k (its cipher), else why not. */
int erma__rkey_usable(const struct erma_rma *rma, const struct erma_rkey *k);
/* peer.c */
bool erma__peer_known(const struct erma_rma *rma, int peer);
/* slot.c */
/* Command id's completion was taken or its callback called: its slot is
 * free again. */
void erma__portal_release(struct erma_rma *rma, uint32_t id);
/* Slot id (< cfg.slots) holds a command, in flight or completed. */
bool erma__portal_live(const struct erma_rma *rma, uint32_t id);
bool erma__slot_any_free(const struct erma_rma *rma);
/* fence.c */
/* The number of the next WRITE command or transfer, in submission order. */
uint64_t erma__fence_number(struct erma_rma *rma);
/* How many WRITE commands and transfers to (peer, region) are in progress:
 * what a fenced write submitted now waits for. */
uint32_t erma__fence_count(const struct erma_rma *rma, int peer, uint32_t region);
/* complete.c */
/* A WRITE command or transfer numbered wseq to (peer, region) completed
 * with status: the fenced writes after it wait for one write less, and are
 * cancelled if it failed. */
void erma__portal_write_done(struct erma_rma *rma, int peer, uint32_t region, uint64_t wseq,
                             int status);
/* issue.c: erma__portal_poll() and erma__portal_next_timer(), inline
 * below, go there only when an op waits in a queue or a deadline is due. */
int erma__portal_work(struct erma_rma *rma, bool rx_full);
uint64_t erma__portal_queued_timer(const struct erma_rma *rma);
/* READ bytes in flight or waiting in the local queue. */
uint64_t erma__portal_inbound(const struct erma_rma *rma);
/* How far behind their schedule the pacers catch up at most: the time
 * this host's link takes to bring in one receive burst of answers. */
uint64_t erma__portal_burst_ns(const struct erma_rma *rma);
/* answer.c */
void erma__portal_rx(struct erma_rma *rma, const struct rma_ophdr *h, uint16_t host_delay,
                     const struct erma_rx_pkt *pkt);

/* ---- between the portal's files ---- */

static inline void erma__list_push(struct list *l, struct slot *slots, int32_t i)
{
    slots[i].prev = l->tail;
    slots[i].next = -1;
    if (l->tail >= 0)
        slots[l->tail].next = i;
    else
        l->head = i;
    l->tail = i;
}

static inline void erma__list_remove(struct list *l, struct slot *slots, int32_t i)
{
    struct slot *e = &slots[i];
    if (e->prev >= 0)
        slots[e->prev].next = e->next;
    else
        l->head = e->next;
    if (e->next >= 0)
        slots[e->next].prev = e->prev;
    else
        l->tail = e->prev;
    e->prev = e->next = -1;
}

/* peer.c */
/* An op's timeout towards peer: its RTO, twice that for a WRITE or REKEY
 * (two round trips), or the configured op_timeout_ns. */
uint64_t erma__peer_op_timeout(const struct erma_rma *rma, int peer, uint8_t op);
/* An authentic answer came back from peer after rtt_ns. */
/* host_ns: of rtt_ns, the time inside the two hosts (erma/rma.h, Busy hosts). */
void erma__peer_rtt_sample(struct erma_rma *rma, int peer, uint64_t rtt_ns, uint64_t host_ns);
/* An op timed out after rto_ns, the RTO it had: no RTO below twice that
 * until the next sample. */
void erma__peer_backoff(struct erma_rma *rma, int peer, uint64_t rto_ns);
/* The virtual path the next op to peer leaves on. */
uint8_t erma__path_pick(struct erma_rma *rma, int peer);
/* An authentic answer to an op on path came back after rtt_ns. */
void erma__path_sample(struct erma_rma *rma, int peer, uint8_t path, uint64_t rtt_ns);
/* An op on path ended with status; true when the path is out of use
 * (pruned) after it. */
bool erma__path_end(struct erma_rma *rma, int peer, uint8_t path, int status);
/* slot.c */
int erma__slots_init(struct erma_rma *rma);
void erma__slots_fini(struct erma_rma *rma);
/* Takes a slot off the free list: its index, -1 when none. */
int32_t erma__slot_alloc(struct erma_rma *rma);
void erma__slot_free(struct erma_rma *rma, struct slot *s);
/* A slot may go to a command (or, chunk, a transfer's chunk) of priority
 * prio: priority p leaves the last p x floor(slots / 16) free slots to the
 * priorities before it; a chunk takes any free slot while fenced commands
 * wait, since they may wait for its transfer. */
bool erma__slot_free_for(const struct erma_rma *rma, uint8_t prio, bool chunk);
void erma__heap_push(struct erma_rma *rma, int32_t i);
void erma__heap_remove(struct erma_rma *rma, int32_t i);
/* The op in flight with the earliest deadline: its slot, -1 when none. */
static inline int32_t erma__heap_first(const struct rma_portal *p)
{
    return p->nheap ? p->heap[0].slot : -1;
}
/* That op's deadline, UINT64_MAX when none. */
static inline uint64_t erma__heap_first_deadline(const struct rma_portal *p)
{
    return p->nheap ? p->heap[0].deadline_ns : UINT64_MAX;
}
/* fence.c */
/* Write wseq to (peer, region) ended with status: the fenced slots after
 * it wait for one write less (cancelled if it failed), and so, through
 * hooks.write_done, do fenced transfers. True when a slot's wait ended. */
bool erma__fence_mark(struct erma_rma *rma, int peer, uint32_t region, uint64_t wseq,
                      int status);
/* Fenced slots held (SLOT_FENCED). */
uint32_t erma__fence_held(const struct erma_rma *rma);
/* Holds fenced WRITE command i, which has writes to wait for (SLOT_FENCED). */
void erma__fence_hold(struct erma_rma *rma, int32_t i);
/* Releases the fenced slots in order that wait no more into their queues,
 * up to the first that is to be cancelled: that one, or NULL. */
struct slot *erma__fence_settle(struct erma_rma *rma);
/* complete.c */
/* Ends op s with status: out of its queue or the heap, its completion
 * queued (or its chunk hook called), the fences told of a WRITE. */
void erma__portal_finish(struct erma_rma *rma, struct slot *s, int status);
/* issue.c */
/* Issues queued ops in priority order into the TX batch; work + the ops
 * issued, stopping at 2 bursts of work. */
int erma__portal_issue(struct erma_rma *rma, int work);
/* The op header of the packets of slot s. */
struct rma_ophdr erma__portal_ophdr(const struct erma_rma *rma, const struct slot *s,
                                    uint8_t type);

/* ---- for the engine, inline: most loop passes have nothing to issue and
 * no deadline due ---- */

/* True when no op is queued and no deadline is due: then the pass is only
 * stamped, for the stall detection (issue.c), and nothing else is to do. */
static inline bool erma__portal_quiet(struct erma_rma *rma)
{
    struct rma_portal *p = rma->portal;
    if (p->nqueued || erma__heap_first_deadline(p) <= rma->ep->now)
        return false;
    p->last_poll_ns = rma->ep->now;
    return true;
}

static inline int erma__portal_poll(struct erma_rma *rma, bool rx_full)
{
    return erma__portal_quiet(rma) ? 0 : erma__portal_work(rma, rx_full);
}

static inline uint64_t erma__portal_next_timer(const struct erma_rma *rma)
{
    const struct rma_portal *p = rma->portal;
    return p->nqueued ? erma__portal_queued_timer(rma) : erma__heap_first_deadline(p);
}

#endif
