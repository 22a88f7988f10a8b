/*
 * erma/endpoint.h - the per-thread endpoint and its event loop.
 *
 * For applications (included by erma/erma.h). An endpoint is one transport
 * queue (a UDP port, a DPDK queue, a UD queue pair) owned by one thread,
 * with the event loop that serves it. The protocols an application puts on
 * it share its queue, its TX batch, its buffer pool and its clock:
 *   erma_rpc_create(nexus, ep, ...)  RPCs (erma/rpc.h)
 *   erma_rma_create(ep, ...)         one-sided READ, WRITE, REKEY (erma/rma.h)
 * An endpoint carries either or both, one of each. Nothing on
 * an endpoint is thread-safe: only the thread that runs its loop calls it
 * (RPC worker handlers excepted, see rpc.h).
 *
 * Addresses. Endpoint t of the base URI udp://H:P listens on udp://H:(P+t)
 * (likewise sim://F/H:(P+t) and dpdk://IP:(P+t)?...): a process runs one
 * endpoint per thread on consecutive ports, and a peer names an endpoint by
 * the base URI and t. With P = 0 every endpoint takes a free port
 * (erma_endpoint_uri() tells which): right for clients, which nobody calls.
 *
 * The loop. Each pass of erma_endpoint_run_once() reads the clock, sends
 * what the application queued (a lone erma_rpc_call from outside the loop
 * has sent its request already), receives a burst, hands every packet to
 * its protocol by the header's proto field, runs the protocols' timers,
 * sends the batch, then runs the continuations of what completed
 * (docs/ARCHITECTURE.md has it step by step). erma_endpoint_run_until()
 * loops; once its passes have found nothing to do for cfg.idle_wait_ns (a
 * packet received counts, and so do the application's calls and queued
 * packets) it sleeps in the transport until a packet or the next timer
 * (stats.sleeps counts them), so an idle endpoint costs
 * well under 1% of a core; until then it spins. On a core that another
 * thread wants too it spins 10 us at most (cfg.idle_wait_ns says when): a
 * sleeper woken by a packet gets the core back at once, a spinner waits for
 * the other's time slice. cfg.busy_poll spins for good instead.
 *
 * Lifetime: create the endpoint, then its protocols; destroy the protocols
 * (erma_rpc_destroy, erma_rma_destroy), then the endpoint.
 *
 * All functions return ERMA_OK or a negative erma_err code unless noted.
 */
#ifndef ERMA_ENDPOINT_H
#define ERMA_ENDPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "erma/api.h"
#include "erma/errors.h"

ERMA_BEGIN_DECLS

#define ERMA_MAX_THREADS 64
#define ERMA_IDLE_SLEEP_MAX_NS 100000000 /* 100 ms */

struct erma_endpoint;

struct erma_endpoint_cfg {
    uint32_t mtu;          /* Ethernet MTU, 576..9000; default 1500 */
    uint32_t rx_ring;      /* packets the receive queue holds; default 4096 */
    /* Once the loop finds nothing to do for this long it sleeps until a
     * packet or the next timer; default 50 us. Until then it spins. A loop
     * whose thread waited on the run queue for over an eighth of the time
     * in three looks 10 ms apart (another thread wants its core: a spinning
     * loop would keep its packets waiting while that one runs) spins at
     * most 10 us instead until a second after the last such look (udp
     * only; it reads the thread's schedstat in /proc and turns itself off
     * where that is missing; stats.shared_core, stats.shared_sleeps). */
    uint64_t idle_wait_ns;
    /* Never sleep: poll the transport all the time (a whole core, the
     * lowest latency; latency benchmarks use it). */
    bool busy_poll;
    double fault_drop;     /* tests only: drop this fraction of received packets */
    uint64_t fault_seed;   /* the seed of those drops */
    /* Virtual paths (udp and sim only): the endpoint also takes the next
     * paths - 1 ports after its own and sends each RPC session's packets,
     * and each one-sided op it initiates, from one of them, so that routers
     * hashing UDP ports (ECMP) spread a session or a destination over up to
     * `paths` routes; the rpc layer picks the path of each packet (rpc.h,
     * Virtual paths), the rma layer that of each op (rma.h, Virtual
     * paths). Default 1 (one port), at most
     * ERMA_MAX_PATHS. With port 0 in the URI the kernel's (or fabric's)
     * free port and the ones after it are taken, trying other ports when
     * one of those is in use. With a fixed port, thread t's endpoint takes
     * PORT + t and the paths - 1 after it, which thread t + 1 needs too:
     * give such threads URIs `paths` ports apart (the open fails with
     * ERMA_EADDR, and the log says so, when a port is taken). */
    uint32_t paths;
};

struct erma_endpoint_stats {
    uint64_t tx_pkts, rx_pkts;
    uint64_t tx_dropped; /* the transport queue stayed full: dropped, counted */
    uint64_t rx_bad;     /* a malformed header */
    uint64_t rx_no_proto; /* for a protocol not on this endpoint (one-sided ops at an
                             endpoint without erma_rma, say), dropped */
    uint64_t sleeps;      /* idle sleeps: passes found nothing to do for cfg.idle_wait_ns
                             (10 us on a shared core: shared_sleeps) */
    uint64_t shared_core; /* looks that found the loop's core shared (see idle_wait_ns) */
    uint64_t shared_sleeps; /* of sleeps, those taken before idle_wait_ns: the core was shared */
};

/* Opens endpoint thread_id of base_uri (see Addresses): "udp://HOST:PORT",
 * "sim://FABRIC/HOST:PORT", "dpdk://IP:PORT?..." or "verbs://...". cfg may
 * be NULL for defaults. Returns ERMA_OK; ERMA_EADDR for a malformed URI,
 * an address that does not resolve or is not this host's, or a port taken
 * (its own or one of its virtual paths': the log says which); ERMA_ENOTSUP
 * for a scheme this build cannot open, or cfg.paths > 1 on a transport
 * without virtual paths (the log says which and why); ERMA_EINVAL for a
 * NULL argument, thread_id >= ERMA_MAX_THREADS or a cfg out of range;
 * ERMA_ESYS when a system call failed otherwise (the log says which URI);
 * ERMA_ENOMEM. */
int erma_endpoint_create(const char *base_uri, uint8_t thread_id,
                         const struct erma_endpoint_cfg *cfg, struct erma_endpoint **out);
/* Closes the transport and frees ep with its buffer pool; NULL is ignored.
 * Destroy the protocols on ep first (the log complains otherwise). Returns
 * nothing. */
void erma_endpoint_destroy(struct erma_endpoint *ep);

/* One pass of the loop; returns the packets and timer events it handled
 * (0: nothing to do). It never fails: errors reach the protocols'
 * completions, never this count. */
int erma_endpoint_run_once(struct erma_endpoint *ep);
/* Runs the loop until done(ctx) is true (asked after every pass) or
 * timeout_ns of erma_now_ns() have passed (counted from the first pass's
 * clock, at most one pass late). Returns ERMA_OK when done, else
 * ERMA_ETIMEDOUT. done may be NULL: run for timeout_ns. A sleeping loop
 * wakes at least every ERMA_IDLE_SLEEP_MAX_NS, so a done() that another
 * thread makes true is seen within that. Typical client use:
 *   erma_rpc_call(rpc, sess, TYPE, &req, &resp, cont, &answered);
 *   erma_endpoint_run_until(ep, flag_set, &answered, 1000000000);  */
int erma_endpoint_run_until(struct erma_endpoint *ep, bool (*done)(void *ctx), void *ctx,
                            uint64_t timeout_ns);
/* erma_endpoint_run_until(ep, NULL, NULL, ns): runs the loop for ns.
 * Returns nothing. */
void erma_endpoint_run(struct erma_endpoint *ep, uint64_t ns);
/* Returns the erma_now_ns() time at which a protocol on ep next has timer
 * work (UINT64_MAX: none). */
uint64_t erma_endpoint_next_timer(const struct erma_endpoint *ep);

/* Writes the URI ep listens on, its real port included, into out.
 * Returns ERMA_OK; ERMA_EINVAL for a NULL argument or when out is too
 * short. */
int erma_endpoint_uri(const struct erma_endpoint *ep, char *out, size_t len);
/* Returns the thread id ep was opened with (its t in Addresses). */
uint8_t erma_endpoint_thread_id(const struct erma_endpoint *ep);
/* Copies the endpoint's counters (struct erma_endpoint_stats) into *out.
 * Returns nothing. */
void erma_endpoint_get_stats(const struct erma_endpoint *ep, struct erma_endpoint_stats *out);

/* Writes the URI of endpoint thread_id of base_uri (its port plus
 * thread_id; port 0 stays 0) into out. Returns ERMA_OK; ERMA_EADDR when
 * base_uri or out is NULL, base_uri is malformed, the port plus thread_id
 * passes 65535, or out is too short. */
int erma_uri_for_thread(const char *base_uri, uint8_t thread_id, char *out, size_t len);

ERMA_END_DECLS

#endif
