/*
 * erma/sdk/cc.h - congestion control units: Timely rates, a Carousel timing
 * wheel with a pacer, 1RMA's dual-window CC for one-sided ops, and the
 * choice among virtual paths.
 *
 * For protocol code, tests and benchmarks that drive congestion control
 * directly; applications tune it through erma_rpc_cfg and erma_rma_cfg.
 *
 * The units are plain state machines. They never read the clock, allocate
 * only in their init functions, take no locks and know nothing of sessions,
 * packets or ops beyond the numbers passed in: the RPC layer and the RMA
 * executor own the objects and call in from their event loop. Not
 * thread-safe: one endpoint (one thread) owns each object.
 *
 * Units used throughout:
 *   time and delays   nanoseconds, uint64_t, the erma_now_ns() time base
 *   rates             bits per second, double (1 MB/s = 8e6 b/s)
 *   windows           ops in flight, double (fractions allowed)
 *   sizes             bytes
 *
 * Each unit's section below starts with its algorithm, then its calls:
 *   TIMELY                    the rate of an RPC client session
 *   CAROUSEL TIMING WHEEL     pacing those sessions' packets (and the pacer)
 *   1RMA WINDOW CC            the one-sided executor's windows (SHARED DELAY,
 *                             pacing, merged mode)
 *   VIRTUAL PATHS             the path of each packet or op
 */
#ifndef ERMA_CC_H
#define ERMA_CC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "erma/api.h"

ERMA_BEGIN_DECLS

/* ---------------------------------------------------------------------------
 * TIMELY (Mittal et al., SIGCOMM 2015, in eRPC's form)
 *
 * One struct erma_timely per client session holds its sending rate. Feed it
 * every RTT sample with erma_timely_update(t, rtt_ns, now_ns):
 *
 *   diff      = rtt - previous rtt              (0 for the first sample)
 *   gradient  = (1 - alpha) * gradient + alpha * diff
 *   norm      = max(min_rtt seen, cfg.min_rtt_ns)
 *   g         = gradient / norm                 (normalised gradient)
 *   d         = min((now - time of last update) / norm, 1)
 *   rtt < t_low:   rate += step * d
 *   rtt > t_high:  rate *= 1 - d * beta * (1 - t_high / rtt)
 *   otherwise:     g <= 0: rate += n * step * d, n = hai_n after hai_n
 *                          consecutive falling samples (HAI), else 1
 *                  g > 0:  rate *= 1 - d * beta * g
 *   then: rate is not cut below half of its old value by one update, and
 *   is clamped to [floor_bps, link_bps].
 *
 * d scales a change by the time it covers, so that a session that gets a
 * sample per packet (many per RTT) moves as fast as one that gets one per
 * RTT, as in eRPC. Two differences from eRPC: the gradient is normalised by
 * the smallest RTT the session has seen, with cfg.min_rtt_ns as a lower
 * bound (eRPC divides by a constant 2 us, so on a path whose RTT is above
 * t_low a few microseconds of jitter read as a steep gradient and halve the
 * rate, while increases come 5 MB/s at a time: a likely cause of the
 * sessions eRPC users saw pinned at the 15 MB/s floor, 0.12 Gb/s); and the
 * thresholds can be derived from the transport's base RTT with
 * erma_timely_cfg_for().
 *
 * What a sample measures: the RPC layer gives Timely the network's part of
 * a round trip only, the client's reading of the reply less the time the
 * packet spent inside the server (its host delay, reported in the reply:
 * from the kernel's receive stamp to the answer, handler included) and
 * the time the reply waited in the client before it was read (erma/rpc.h,
 * Busy hosts). A host whose loop is busy or descheduled makes its own
 * delay, which Timely does not see; what is left is queues in the path
 * (the kernel's and the links'). t_low and t_high are thresholds on that.
 *
 * Common-case bypass: when cfg.bypass is set, a sample below t_low while the
 * rate is already link_bps only records the sample (last_rtt_ns, min_rtt_ns
 * and the counters); gradient, avg_rtt_ns and the update time are left as
 * they were. The flag is read on every call, so it can be switched at run
 * time, for all sessions sharing the cfg at once.
 */

struct erma_timely_cfg {
    double link_bps;     /* ceiling, and the rate a session starts at */
    double floor_bps;    /* the rate never goes below this */
    double step_bps;     /* additive increase per min RTT of time */
    uint64_t t_low_ns;   /* below: additive increase */
    uint64_t t_high_ns;  /* above: multiplicative decrease */
    uint64_t min_rtt_ns; /* lower bound of the gradient normaliser */
    double alpha;        /* EWMA weight of a new sample */
    double beta;         /* multiplicative decrease factor */
    uint32_t hai_n;      /* HAI after hai_n falling samples, n-fold; 0 off */
    bool bypass;         /* common-case bypass, read on every update */
    double ai_span;      /* increases accrue over up to this many min RTTs
                            between samples; <= 1 (default): eRPC. Larger
                            spans make increase per time, not per sample,
                            fairer between flows with few samples, at some
                            cost in utilisation (docs/PERFORMANCE.md). */
};

/* One session's rate. Readable state: rate_bps, gradient_ns (the EWMA of
 * RTT differences, signed), avg_rtt_ns (EWMA of samples with weight alpha),
 * last_rtt_ns, min_rtt_ns (UINT64_MAX before the first sample), updates
 * (samples given, bypassed ones included) and bypasses. */
struct erma_timely {
    const struct erma_timely_cfg *cfg;
    double rate_bps;
    double gradient_ns;
    double avg_rtt_ns;
    uint64_t last_rtt_ns;
    uint64_t min_rtt_ns;
    uint64_t last_update_ns;
    uint32_t falling; /* consecutive samples below the previous one */
    uint64_t updates;
    uint64_t bypasses;
};

/* eRPC's real-network defaults (docs/DESIGN.md section 9): link_bps 25 Gb/s
 * (set it to the NIC's rate), floor 15 MB/s (120 Mb/s), step 5 MB/s
 * (40 Mb/s), t_low 50 us, t_high 1 ms, alpha 0.46, beta 0.26,
 * min_rtt_ns 2 us, hai_n 5, bypass on. */
struct erma_timely_cfg erma_timely_cfg_real(void);
/* Defaults for a transport whose unloaded RTT is base_rtt_ns (measured
 * ping-pong, e.g. 5-20 us on kernel UDP loopback, a few us in the sim
 * fabric) and whose line rate is link_bps:
 *   t_low  = 5 * base   An unloaded path must sit below t_low, jitter
 *                       included, or noise alone drives the rate down
 *                       (eRPC's fixed 50 us is below the RTT of many
 *                       kernel-stack and VM paths); this leaves 4 base
 *                       RTTs of headroom for jitter.
 *   t_high = 25 * base  The hard brake. It must sit well below the
 *                       delay of a full switch buffer (1 MiB at 25 Gb/s
 *                       is 335 us) so that incast queues are bounded;
 *                       eRPC's 1 ms is above that on every fabric here.
 *   min_rtt_ns = base   normaliser floor and the unit of d
 *   step  = link / 1000 a session at the floor is back at link rate
 *                       within ~1000 uncongested min RTTs (5 ms on a
 *                       5 us fabric; eRPC's 5 MB/s at 25 Gb/s needs
 *                       625). link/100 recovers 10x faster but lets a
 *                       50-way incast oscillate: measured on the sim
 *                       fabric (docs/PERFORMANCE.md), p99 RTT 718 us
 *                       instead of 39 us and 88% instead of 95% of the
 *                       link.
 *   floor = link / 1000 low enough for a 1000-way incast to share the
 *                       link, high enough that the wheel horizon (one
 *                       MTU at the floor rate) stays small
 *   alpha, beta, hai_n, bypass as in erma_timely_cfg_real().
 * base_rtt_ns of 0 is taken as 1 us. */
struct erma_timely_cfg erma_timely_cfg_for(double link_bps, uint64_t base_rtt_ns);
/* ERMA_OK, or ERMA_EINVAL unless 0 < floor <= link, step > 0,
 * 0 < t_low <= t_high, 0 < alpha <= 1, 0 < beta <= 1 and min_rtt_ns > 0. */
int erma_timely_cfg_check(const struct erma_timely_cfg *cfg);
/* Starts a session at link rate. cfg is referenced, not copied: it must
 * outlive t and may be shared by many sessions. Returns ERMA_EINVAL for
 * a bad cfg (see erma_timely_cfg_check). */
int erma_timely_init(struct erma_timely *t, const struct erma_timely_cfg *cfg,
                     uint64_t now_ns);
/* Applies one RTT sample measured at now_ns; returns the new rate.
 * A sample of 0 is taken as 1 ns. */
double erma_timely_update(struct erma_timely *t, uint64_t rtt_ns, uint64_t now_ns);

/* ---------------------------------------------------------------------------
 * CAROUSEL TIMING WHEEL (Saeed et al., SIGCOMM 2017, as eRPC uses it)
 *
 * A ring of slots, each slot_ns wide, covering at least horizon_ns ahead of
 * the wheel's current slot. An entry (a pointer and a 64-bit cookie, both
 * opaque) is put into the slot holding its due time in O(1); a due time
 * before the current slot goes into the current slot, one beyond the last
 * slot into the last slot (it leaves early: keep due times within the
 * horizon). Entries live in a fixed array allocated by erma_wheel_init:
 * inserting never allocates and fails with ERMA_ENOSLOTS when full.
 *
 * A slot is released once the clock has passed its end, so an entry never
 * leaves before its due time, and leaves less than slot_ns plus the time
 * between two reaps after it. Entries leave slot by slot in time order and,
 * within a slot, in insertion order. The wheel's time is the now_ns of the
 * last erma_wheel_reap() (or of erma_wheel_init): reap before inserting, as
 * the event loop does (docs/DESIGN.md section 2), so that due times are placed
 * relative to the present.
 */

struct erma_wheel_cfg {
    uint64_t slot_ns;
    uint64_t horizon_ns;
    uint32_t capacity;
};

struct erma_wheel_entry {
    void *ptr;
    uint64_t cookie;
    uint64_t due_ns; /* as given to erma_wheel_insert */
};

struct erma_wheel_node;

struct erma_wheel {
    uint64_t slot_ns;
    uint32_t nslots;
    uint32_t cur;          /* index of the current slot */
    uint64_t cur_start_ns; /* start of the current slot, a multiple of slot_ns */
    uint32_t count;
    uint32_t capacity;
    uint32_t free_head;
    uint32_t *head, *tail; /* per slot, UINT32_MAX when empty */
    struct erma_wheel_node *nodes;
};

/* A configuration for packets of mtu_bytes paced no slower than
 * min_rate_bps:
 *   horizon_ns = the gap between two MTU-size packets at min_rate_bps
 *                (mtu * 8e9 / rate, rounded up): the farthest a paced
 *                session at the floor rate schedules its next packet. A
 *                caller that keeps k packets of a session on the wheel at
 *                once must multiply it by k.
 *   slot_ns    = 500 (eRPC's 0.5 us), widened if the horizon would need
 *                more than 65536 slots.
 *   capacity   = 4096 entries (set it to the packets the endpoint may have
 *                paced at once, e.g. sessions x credits).
 * mtu_bytes of 0 is taken as 1500, min_rate_bps <= 0 as 1 Mb/s. */
struct erma_wheel_cfg erma_wheel_cfg_for(uint32_t mtu_bytes, double min_rate_bps);
/* Allocates the slots and entries; the wheel's time starts at now_ns.
 * ERMA_EINVAL when slot_ns, horizon_ns or capacity is 0, capacity is
 * UINT32_MAX or the slot count exceeds 2^24; ERMA_ENOMEM. */
int erma_wheel_init(struct erma_wheel *w, const struct erma_wheel_cfg *cfg,
                    uint64_t now_ns);
/* Frees the memory; entries still held are dropped. */
void erma_wheel_destroy(struct erma_wheel *w);
/* Puts (ptr, cookie) in the slot of due_ns. ERMA_OK or ERMA_ENOSLOTS (the
 * wheel holds capacity entries). */
int erma_wheel_insert(struct erma_wheel *w, uint64_t due_ns, void *ptr,
                      uint64_t cookie);
/* Moves up to max due entries, in order, into out; returns how many.
 * Entries beyond max stay and come first on the next call. now_ns must
 * not go backwards (an earlier time releases nothing). */
size_t erma_wheel_reap(struct erma_wheel *w, uint64_t now_ns,
                       struct erma_wheel_entry *out, size_t max);
/* Entries held. */
uint32_t erma_wheel_count(const struct erma_wheel *w);

/* The due time of a packet of `bytes` that follows one due at last_tx_ns
 * on a session paced at rate_bps: max(last_tx_ns + bytes * 8e9 / rate,
 * now_ns), the gap rounded up to whole ns. Store the result as the
 * session's last_tx_ns (start it at 0). A session that fell behind does
 * not get a burst: the due time is never before now_ns. rate_bps <= 0
 * gives UINT64_MAX (never). */
uint64_t erma_pacer_next_tx(double rate_bps, uint32_t bytes, uint64_t last_tx_ns,
                            uint64_t now_ns);

/* ---------------------------------------------------------------------------
 * 1RMA WINDOW CC (Singhvi et al., SIGCOMM 2020; docs/DESIGN.md section 5)
 *
 * Decided at the initiator only. One local window per endpoint, driven by
 * issue_delay (submit to entering service: local congestion), and one remote
 * window per (destination, direction), driven by remote_delay = total_delay
 * - issue_delay (fabric and target congestion). On each completion:
 *   OK, delay <= target:  cwnd += ai             while cwnd < 1
 *                         cwnd += ai / cwnd      otherwise
 *   OK, delay > target:   at most once per RTT,
 *                         cwnd *= max(1 - beta * (delay - target) / delay, md)
 *   DISPATCH_TIMEOUT (ERMA_EDISPATCH):          local cwnd /= cut
 *   TIMEOUT (ERMA_ETIMEDOUT), NACK (ERMA_ENACK): remote cwnd /= cut
 *   other statuses carry no congestion signal (the executor passes
 *   ERMA_ECANCELLED for an op on a virtual path pruned for standing out).
 * cwnd stays in [min_cwnd, max_cwnd]. "Once per RTT": a decrease (or a cut)
 * at time t allows the next decrease of that window from t + srtt, where
 * srtt is the window's smoothed RTT (EWMA, weight 1/8, of the total_delay of
 * successful ops, base_rtt_ns before the first). Cuts are rate-limited the
 * same way, as in 1RMA's Algorithm 1 ("if no decrease happened in the last
 * RTT"): k failures of one window within an srtt cut it once; failures
 * spaced more than an srtt apart cut each time. The local and each remote
 * window keep their own time (next_decrease_ns).
 *
 * SHARED DELAY. A queue that every active flow of a direction crosses (for
 * READs above all the initiator's own downlink, whose queue the
 * solicitation window allows) is the initiator's congestion, not any
 * destination's. Left in the remote delays it starves a flow that also
 * crosses a congested target: that flow reads the target's queue plus this
 * one, and stays above the remote target while a competitor at the target
 * that does not cross this queue holds the target's queue at the target
 * (the parking lot: such a flow fell from half the link to nothing). So each
 * remote window keeps its smallest remote delay and the EWMA (1/8) of the
 * excess over it; once per local srtt, the shared delay of a direction
 * becomes the least excess among that direction's windows sampled within
 * the last 2 local srtts, when there are two or more (else 0: one flow's
 * queues cannot be told apart). A success's remote signal is its
 * remote_delay less the shared delay (never below its window's smallest),
 * its local signal issue_delay plus that same amount. Not in merged mode.
 * A window's smallest remote delay does not age: a flow that starts while
 * such a queue stands takes it as its base and holds the shared delay near
 * 0 (the remote windows then read the queue, as without this rule) until
 * the queue drains below it.
 *
 * An op to (dst, dir) may issue when, for both windows, fewer than
 * max(cwnd, 1) ops are in flight and the window's pacing allows it: each
 * window paces its ops at op_bytes * cwnd per round trip (in bits per
 * second, op_bytes * 8e9 * cwnd / rtt), measured from its last issue with
 * erma_pacer_next_tx(). The round trip is srtt for the local window and,
 * for a remote one, srtt less the EWMA (1/8) of its ops' local part
 * (issue_delay plus the shared delay): waits at the initiator must not
 * slow a flow below the rate its destination allows (a flow through a
 * congested target that the initiator also held ran 12% slower than a
 * competitor at that target with the same window). Below cwnd 1 this
 * spaces ops rtt / cwnd apart (min_cwnd 1/64: one op per 64 RTTs). The
 * more restrictive window decides.
 * An op that the local window held past its remote window's pacing time
 * keeps up to half a gap of the remote window's schedule: the next one is
 * due up to half a gap sooner, so a flow the local window holds back at its
 * turns does not drift below the rate its own remote window sets.
 *
 * merged mode (for the comparison experiment): no local window; the remote
 * window is driven by total_delay against local_target + remote_target, and
 * every one of the three failures cuts it.
 */

enum erma_window_dir {
    ERMA_WINDOW_IN = 0,  /* data flows to the initiator: READ */
    ERMA_WINDOW_OUT = 1, /* data flows to the target: WRITE, REKEY */
};

struct erma_window_cfg {
    double ai;                 /* additive increase, ops */
    double beta;               /* decrease gain */
    double md;                 /* smallest factor of one decrease */
    double cut;                /* divisor on a failure */
    double min_cwnd, max_cwnd; /* bounds, ops */
    double init_cwnd;          /* a new window's cwnd, ops */
    uint64_t local_target_ns;  /* target issue_delay */
    uint64_t remote_target_ns; /* target remote_delay */
    uint64_t base_rtt_ns;      /* srtt before the first sample */
    uint32_t op_bytes;         /* op size the pacing rate is counted in */
    uint32_t max_remotes;      /* remote windows held at most */
    bool merged;               /* one window per destination, no local one */
};

struct erma_window {
    double cwnd;
    uint32_t inflight;
    uint64_t srtt_ns;
    uint64_t issued;            /* ops issued */
    uint64_t last_issue_ns;
    uint64_t next_decrease_ns;  /* no decrease (nor cut) before this time */
    uint64_t decreases, cuts;
    uint64_t cuts_skipped;      /* failures that came within an srtt of a decrease */
    /* remote windows: the shared delay's inputs (see SHARED DELAY) */
    uint64_t min_delay_ns;      /* smallest remote_delay seen, UINT64_MAX before one */
    uint64_t excess_ns;         /* EWMA (1/8) of remote_delay - min_delay_ns */
    uint64_t sampled_ns;        /* time of the last delay sample */
    uint64_t local_ns;          /* EWMA (1/8) of issue_delay + shared delay */
};

struct erma_window_remote; /* table entry, private */

struct erma_window_cc {
    struct erma_window_cfg cfg;
    struct erma_window local;
    struct erma_window_remote *remotes; /* max_remotes entries */
    uint32_t *buckets;                  /* hash chains */
    uint32_t nbuckets;
    uint32_t used;                      /* remote windows in the table */
    uint64_t clock;                     /* use counter for LRU */
    uint64_t evictions;
    uint64_t shared_ns[2];              /* per direction: the shared delay */
    uint64_t shared_next_ns[2];         /* when it is next recomputed */
};

/* Defaults for a transport: base_rtt_ns is the unloaded total_delay of a
 * small op on the transport (measure a few 64 B READs), its usual jitter
 * included; link_bps the line rate. The choices (reasons and measurements
 * at the top of window.c):
 *   ai 0.25, beta 0.8, md 0.5, cut 10   docs/DESIGN.md section 5
 *   min_cwnd 1/64                        one op per 64 RTTs at worst
 *   init_cwnd = BDP in 4 KB ops, >= 1    link_bps * base / (8 * 4096);
 *                                        1RMA's start at 1 op needs
 *                                        ~4 (C - 1) RTTs to fill a path
 *                                        of C ops per RTT
 *   max_cwnd = max(256, 4 BDPs)          ops
 *   remote_target_ns = 1.25 * base       a queue of a quarter BDP; 2x
 *                                        makes a newcomer take 100+
 *                                        RTTs to a fair share
 *   local_target_ns = 5 us               half the portal's 10 us
 *                                        dispatch timeout, so the local
 *                                        window shrinks before ops fail
 *   base_rtt_ns = base, op_bytes 4096 (the executor's op size),
 *   max_remotes 256, merged off.
 * base_rtt_ns of 0 is taken as 10 us. */
struct erma_window_cfg erma_window_cfg_for(double link_bps, uint64_t base_rtt_ns);
/* Copies cfg and allocates the remote table (max_remotes entries).
 * ERMA_EINVAL unless 0 < min_cwnd <= init_cwnd <= max_cwnd, ai > 0,
 * 0 < beta <= 1, 0 < md <= 1, cut >= 1, op_bytes > 0, base_rtt_ns > 0,
 * 0 < max_remotes <= 2^20; ERMA_ENOMEM. */
int erma_window_init(struct erma_window_cc *cc, const struct erma_window_cfg *cfg);
/* Frees the remote table; its windows are forgotten. */
void erma_window_destroy(struct erma_window_cc *cc);
/* Sets *at_ns to the earliest time (>= now_ns) an op of `bytes` to
 * (dst, dir) may issue, or UINT64_MAX while a window is full (wait for a
 * completion). Creates the remote window on first use; when the table
 * is full it reuses the least recently used window with nothing in
 * flight (counted in cc.evictions), else returns ERMA_ENOSLOTS. */
int erma_window_next_issue(struct erma_window_cc *cc, uint64_t dst,
                           enum erma_window_dir dir, uint32_t bytes,
                           uint64_t now_ns, uint64_t *at_ns);
/* Records an op of `bytes` issued at now_ns (in flight +1 in both
 * windows, pacing measured from now_ns, less the remote window's
 * credit above). Creates the window like next_issue (ERMA_ENOSLOTS when
 * it cannot); else ERMA_OK. */
int erma_window_on_issue(struct erma_window_cc *cc, uint64_t dst,
                         enum erma_window_dir dir, uint32_t bytes, uint64_t now_ns);
/* Records the completion of an op issued with on_issue: status is
 * ERMA_OK or a negative erma code; the delays are those of the portal's
 * completion (read only when status is ERMA_OK; issue_delay above
 * total_delay is taken as total_delay). ERMA_ENOENT when (dst, dir) has
 * no window (never issued, or evicted, which cannot happen while ops are
 * in flight). */
int erma_window_on_complete(struct erma_window_cc *cc, uint64_t dst,
                            enum erma_window_dir dir, int status,
                            uint64_t issue_delay_ns, uint64_t total_delay_ns,
                            uint64_t now_ns);
/* The remote window of (dst, dir), or NULL; for reading its state.
 * Counts as a use for the LRU choice of the table. */
struct erma_window *erma_window_find(struct erma_window_cc *cc, uint64_t dst,
                                     enum erma_window_dir dir);
/* The window that bounds (dst, dir) now: min(local, remote) cwnd, the
 * remote one alone when merged; init_cwnd stands for a missing remote. */
double erma_window_limit(struct erma_window_cc *cc, uint64_t dst,
                         enum erma_window_dir dir);

/* ---------------------------------------------------------------------------
 * VIRTUAL PATHS (MP-RDMA, Lu et al., NSDI 2018, in software)
 *
 * One struct erma_paths per sender and destination spreads packets over n
 * virtual paths (source ports that ECMP routers hash onto different routes)
 * and keeps, per path, packets out, a smoothed RTT (EWMA 1/8) and a loss
 * share (moving average over ERMA_PATH_LOSS_AVG packets, in 1/65536). The
 * RPC layer keeps one per client session, the one-sided initiator one per
 * destination; the caller says which packets were answered, lost or given up.
 *
 *   pick:   the path in use with the fewest packets out; among equals the
 *           one whose reply just came (ACK clocking: a packet leaves where
 *           one left the network), else round robin.
 *   probe:  at start, and when a pruned path comes back, a path carries one
 *           packet until that packet is answered or lost or given up.
 *   prune:  after a sample or a loss on p, p is out of use when, against
 *           the other paths in use, its loss exceeds twice their mean plus
 *           ERMA_PATH_PRUNE_LOSS (1%), or its srtt exceeds 16 times the best
 *           one's and the best by 16 of the smallest RTT seen, or its reply
 *           came more than ERMA_PATH_PRUNE_LATE packets behind the newest
 *           reply (MP-RDMA's out-of-order rule); the last path in use is
 *           never pruned. It rests rest_ns, doubled per earlier prune (up to
 *           2^ERMA_PATH_MAX_PRUNES times), then comes back with a clean
 *           record and a probe.
 *
 * A set costs 24 bytes per path plus 8 (200 bytes for 8 paths). n = 1 makes
 * every call trivial: pick returns 0, free is true.
 */

#define ERMA_PATH_LOSS_AVG 256
#define ERMA_PATH_PRUNE_LOSS 655 /* 1% in 1/65536 */
#define ERMA_PATH_PRUNE_LATE 16
#define ERMA_PATH_MAX_PRUNES 6

enum { ERMA_PROBE_NONE, ERMA_PROBE_READY, ERMA_PROBE_OUT };

struct erma_path {
    uint64_t pruned_until; /* out of use until then; 0: in use */
    uint32_t srtt_ns;      /* 0: no sample yet */
    uint16_t loss;         /* share of its packets lost, in 1/65536 */
    uint16_t inflight;     /* packets sent on it, neither answered nor lost */
    uint8_t prunes;        /* times pruned (each doubles the rest) */
    uint8_t probe;         /* ERMA_PROBE_*: READY, then OUT until its reply */
};

struct erma_paths {
    uint8_t n, rr;         /* paths; round-robin start */
    int8_t clock;          /* the path whose reply just came, -1: none */
    uint32_t min_rtt_ns;   /* smallest sample */
    struct erma_path p[ERMA_MAX_PATHS];
};

/* n paths (clamped to 1..ERMA_MAX_PATHS), each ready for its probe. */
void erma_paths_init(struct erma_paths *ps, unsigned n);
/* False while every path in use waits for its probe: send nothing yet. */
bool erma_paths_free(const struct erma_paths *ps, uint64_t now_ns);
/* The path of the next packet (counted out on it). When none is free
 * (the RPC layer waits until one is; the one-sided initiator does not,
 * so that one slow destination holds up no other), the path in use
 * with the fewest packets out. */
uint8_t erma_paths_pick(struct erma_paths *ps, uint64_t now_ns);
/* A packet sent on p is out no longer (answered or given up), no sample. */
void erma_paths_done(struct erma_paths *ps, uint8_t p);
/* A reply came on p after rtt_ns (take samples from packets sent once:
 * Karn), `late` packets behind the newest reply (0 when unknown). Does
 * not count the packet done. True when this prunes p. A sample of a
 * pruned path (ps->p[p].pruned_until != 0) says nothing of the others'
 * congestion: leave it out of rate control. */
bool erma_paths_sample(struct erma_paths *ps, uint8_t p, uint64_t rtt_ns, uint32_t late,
                       uint64_t now_ns, uint64_t rest_ns);
/* A packet sent on p was lost: counted done and in p's loss. True when
 * this prunes p. */
bool erma_paths_lost(struct erma_paths *ps, uint8_t p, uint64_t now_ns, uint64_t rest_ns);

ERMA_END_DECLS

#endif
