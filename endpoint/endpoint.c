/* The endpoint: its transport queue, TX batch, clock, demultiplexer, loop
 * and idle wait, and the sim driver. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "erma/log.h"
#include "erma/sim.h"
#include "proto.h"
#define TX_TRIES 64

static const struct erma_endpoint_cfg defaults = {
    .mtu = ERMA_DEFAULT_MTU,
    .rx_ring = 4096,
    .idle_wait_ns = 50000,
};

static void cfg_defaults(struct erma_endpoint_cfg *c)
{
    c->mtu = c->mtu ? c->mtu : defaults.mtu;
    c->rx_ring = c->rx_ring ? c->rx_ring : defaults.rx_ring;
    c->idle_wait_ns = c->idle_wait_ns ? c->idle_wait_ns : defaults.idle_wait_ns;
    c->paths = c->paths ? c->paths : 1;
}

/* Splits "scheme://host:PORT[?query]" at PORT: *port_at points at the ':'
 * and *query at the '?' (or the end). */
static int split_uri(const char *uri, const char **colon, const char **query, unsigned *port)
{
    const char *sep = uri ? strstr(uri, "://") : NULL;
    if (!sep)
        return ERMA_EADDR;
    const char *q = strchr(sep, '?'), *end = q ? q : sep + strlen(sep);
    const char *c = end;
    while (c > sep + 3 && c[-1] != ':')
        c--;
    if (c <= sep + 3 || c == end)
        return ERMA_EADDR;
    unsigned long v = 0;
    for (const char *d = c; d < end; d++) {
        if (*d < '0' || *d > '9' || (v = v * 10 + (unsigned long)(*d - '0')) > 65535)
            return ERMA_EADDR;
    }
    *colon = c - 1;
    *query = end;
    *port = (unsigned)v;
    return ERMA_OK;
}

int erma_uri_for_thread(const char *base, uint8_t tid, char *out, size_t len)
{
    const char *colon, *query;
    unsigned port;
    if (!base || !out || split_uri(base, &colon, &query, &port) != ERMA_OK ||
        port + tid > 65535)
        return ERMA_EADDR;
    if (port != 0) /* port 0: every endpoint takes a free port of its own */
        port += tid;
    const int n = snprintf(out, len, "%.*s:%u%s", (int)(colon - base), base, port, query);
    return n < 0 || (size_t)n >= len ? ERMA_EADDR : ERMA_OK;
}

static int reg_chunk(void *ctx, void *addr, size_t len)
{
    struct erma_endpoint *ep = ctx;
    int rc = ERMA_OK;
    for (unsigned k = 0; k < ep->npaths && rc == ERMA_OK; k++)
        rc = erma_transport_reg_mem(ep->path[k], addr, len);
    return rc;
}

/* No transport can deregister memory yet, so the pool registers chunks only
 * where one registers them: a pool that registers keeps every chunk. */
static bool paths_reg_mem(const struct erma_endpoint *ep)
{
    for (unsigned k = 0; k < ep->npaths; k++)
        if (ep->path[k]->ops->reg_mem)
            return true;
    return false;
}

int erma__ep_path_addr(const struct erma_endpoint *ep, const struct erma_addr *addr, int k,
                       struct erma_addr *out)
{
    if (k == 0) {
        *out = *addr;
        return ERMA_OK;
    }
    return ep->tr->ops->addr_path ? ep->tr->ops->addr_path(ep->tr, addr, k, out) : ERMA_EADDR;
}

int erma__ep_path_of(const struct erma_endpoint *ep, const struct erma_addr *base, unsigned n,
                     const struct erma_addr *a)
{
    if (erma_addr_eq(base, a))
        return 0;
    struct erma_addr b;
    for (unsigned k = 1; k < n; k++)
        if (erma__ep_path_addr(ep, base, (int)k, &b) == ERMA_OK && erma_addr_eq(&b, a))
            return (int)k;
    return -1;
}

static void close_paths(struct erma_endpoint *ep)
{
    for (unsigned k = 0; k < ep->npaths; k++)
        erma_transport_close(ep->path[k]);
    ep->npaths = 0;
    ep->tr = NULL;
}

/* Opens uri and, for virtual paths, the cfg.paths - 1 ports after it. */
static int open_paths(struct erma_endpoint *ep, const char *uri,
                      const struct erma_transport_cfg *tcfg)
{
    const unsigned want = ep->cfg.paths;
    const char *colon, *query;
    unsigned port = 0;
    const bool any_port = split_uri(uri, &colon, &query, &port) == ERMA_OK && port == 0;
    int rc = ERMA_EADDR;
    for (int tries = 0; tries < 16 && ep->npaths < want; tries++) {
        close_paths(ep);
        if ((rc = erma_transport_open(uri, tcfg, &ep->path[0])) != ERMA_OK)
            return rc;
        ep->tr = ep->path[0];
        ep->npaths = 1;
        if (want > 1 && !ep->tr->ops->addr_path) {
            ERMA_ERROR("endpoint: %s has no virtual paths (udp and sim have)", uri);
            return ERMA_ENOTSUP;
        }
        char next[256];
        struct erma_addr a;
        for (unsigned k = 1; k < want; k++) {
            rc = erma__ep_path_addr(ep, &ep->tr->local, (int)k, &a);
            if (rc == ERMA_OK)
                rc = erma_transport_addr_str(ep->tr, &a, next, sizeof next);
            if (rc == ERMA_OK)
                rc = erma_transport_open(next, tcfg, &ep->path[k]);
            if (rc != ERMA_OK)
                break;
            ep->npaths++;
        }
        if (rc != ERMA_OK && !any_port) /* a fixed port: no other to try */
            break;
    }
    if (ep->npaths < want) {
        ERMA_ERROR("endpoint: cannot open %u ports from %s for its virtual paths", want, uri);
        close_paths(ep);
        return rc != ERMA_OK ? rc : ERMA_EADDR;
    }
    return ERMA_OK;
}

int erma_endpoint_create(const char *base_uri, uint8_t tid, const struct erma_endpoint_cfg *cfg,
                         struct erma_endpoint **out)
{
    if (!base_uri || !out || tid >= ERMA_MAX_THREADS)
        return ERMA_EINVAL;
    struct erma_endpoint *ep = calloc(1, sizeof *ep);
    if (!ep)
        return ERMA_ENOMEM;
    ep->cfg = cfg ? *cfg : (struct erma_endpoint_cfg){0};
    cfg_defaults(&ep->cfg);
    ep->tid = tid;
    memset(ep->by_id, -1, sizeof ep->by_id);
    if (ep->cfg.paths > ERMA_MAX_PATHS) {
        ERMA_ERROR("endpoint: %u virtual paths asked, at most %u", ep->cfg.paths, ERMA_MAX_PATHS);
        free(ep);
        return ERMA_EINVAL;
    }
    char uri[512];
    int rc = erma_uri_for_thread(base_uri, tid, uri, sizeof uri);
    if (rc != ERMA_OK)
        ERMA_ERROR("endpoint: malformed URI %s (want scheme://HOST:PORT)", base_uri);
    const struct erma_transport_cfg tcfg = {.mtu = ep->cfg.mtu, .rx_ring = ep->cfg.rx_ring,
                                            .rx_drop = ep->cfg.fault_drop,
                                            .drop_seed = ep->cfg.fault_seed};
    if (rc == ERMA_OK)
        rc = open_paths(ep, uri, &tcfg);
    if (rc == ERMA_OK) {
        const struct erma_pool_cfg pcfg = {.reg = paths_reg_mem(ep) ? reg_chunk : NULL,
                                           .reg_ctx = ep};
        rc = erma_pool_create(&pcfg, &ep->pool);
    }
    if (rc == ERMA_OK && !(ep->room = malloc((size_t)ERMA_MAX_BURST * ep->tr->max_pkt)))
        rc = ERMA_ENOMEM;
    if (rc != ERMA_OK) {
        erma_pool_destroy(ep->pool);
        close_paths(ep);
        free(ep);
        return rc;
    }
    ep->idle_since = erma__ep_clock(ep);
    *out = ep;
    return ERMA_OK;
}

void erma_endpoint_destroy(struct erma_endpoint *ep)
{
    if (!ep)
        return;
    if (ep->nprotos)
        ERMA_ERROR("endpoint: destroyed with %u protocols still on it", ep->nprotos);
    erma__ep_tx_flush(ep);
    free(ep->room);
    erma_pool_destroy(ep->pool);
    close_paths(ep);
    free(ep);
}

int erma__ep_register(struct erma_endpoint *ep, const struct erma_ep_proto *p, const uint8_t *ids,
                      unsigned nids)
{
    if (!ep || !p || !p->rx || !p->poll || !p->next_timer)
        return ERMA_EINVAL;
    if (ep->nprotos == ERMA_EP_PROTOS)
        return ERMA_ENOSLOTS;
    for (unsigned i = 0; i < nids; i++)
        if (ids[i] >= ERMA_PROTO_IDS || ep->by_id[ids[i]] >= 0)
            return ERMA_EAGAIN;
    for (unsigned i = 0; i < nids; i++)
        ep->by_id[ids[i]] = (int8_t)ep->nprotos;
    ep->protos[ep->nprotos++] = *p;
    return ERMA_OK;
}

void erma__ep_unregister(struct erma_endpoint *ep, void *ctx)
{
    erma__ep_tx_flush(ep); /* the batch may point at what the protocol frees */
    unsigned k = 0;
    while (k < ep->nprotos && ep->protos[k].ctx != ctx)
        k++;
    if (k == ep->nprotos)
        return;
    memmove(&ep->protos[k], &ep->protos[k + 1], (ep->nprotos - k - 1) * sizeof ep->protos[0]);
    ep->nprotos--;
    for (unsigned i = 0; i < ERMA_PROTO_IDS; i++)
        if (ep->by_id[i] == (int8_t)k)
            ep->by_id[i] = -1;
        else if (ep->by_id[i] > (int8_t)k)
            ep->by_id[i]--;
}

/* ---- TX batch ---- */

/* What the first try at tx[a..b) left (n: its result): offered again, up
 * to TX_TRIES tries in all; returns the packets sent. Out of line: most
 * runs leave at the first try. */
__attribute__((noinline)) static unsigned send_rest(struct erma_endpoint *ep,
                                                    struct erma_transport *tr, unsigned a,
                                                    unsigned b, int n)
{
    unsigned sent = 0;
    for (int tries = 1;; tries++) {
        if (n < 0) {
            ERMA_WARN("endpoint: tx_burst failed: %s", erma_strerror(n));
            break;
        }
        sent += (unsigned)n;
        if (a + sent >= b || tries == TX_TRIES)
            break;
        n = erma_tx_burst(tr, ep->tx + a + sent, b - a - sent);
    }
    return sent;
}

/* Sends tx[a..b) on tr, counting what the transport would not take. */
static void send_run(struct erma_endpoint *ep, struct erma_transport *tr, unsigned a, unsigned b)
{
    const int n = erma_tx_burst(tr, ep->tx + a, b - a);
    const unsigned sent = n == (int)(b - a) ? (unsigned)n : send_rest(ep, tr, a, b, n);
    ep->stats.tx_pkts += sent;
    ep->stats.tx_dropped += b - a - sent;
}

/* Sends the batch that passes at pass_ns queued, at flush_ns (0: the clock
 * is read at the first packet with a prep). */
static void tx_flush_at(struct erma_endpoint *ep, uint64_t pass_ns, uint64_t flush_ns)
{
    uint64_t flush = flush_ns;
    for (unsigned i = 0; i < ep->ntx; i++) {
        if (!ep->prep[i])
            continue;
        if (!flush) {
            const uint64_t t = erma_now_ns();
            flush = t > pass_ns ? t : pass_ns;
        }
        ep->prep[i](ep->prep_ctx[i], &ep->tx[i], ep->room + (size_t)i * ep->tr->max_pkt,
                    pass_ns, flush);
    }
    if (ep->npaths == 1) {
        send_run(ep, ep->tr, 0, ep->ntx);
    } else { /* runs of packets on one path, in order */
        for (unsigned a = 0, b; a < ep->ntx; a = b) {
            for (b = a + 1; b < ep->ntx && ep->tx[b].path == ep->tx[a].path;)
                b++;
            send_run(ep, ep->path[ep->tx[a].path < ep->npaths ? ep->tx[a].path : 0], a, b);
        }
    }
    ep->ntx = 0;
}

void erma__ep_tx_flush(struct erma_endpoint *ep)
{
    if (ep->ntx)
        tx_flush_at(ep, ep->now, 0);
}

void erma__ep_tx_send_now(struct erma_endpoint *ep)
{
    if (!ep->in_pass && ep->calls++ == 0 && ep->lone_calls && ep->ntx)
        tx_flush_at(ep, ep->now, ep->now);
}

/* Receives from every path, starting with the next one each pass (a busy
 * port must not starve the others). */
static int rx_paths(struct erma_endpoint *ep, struct erma_rx_pkt *rx)
{
    int n = 0;
    const unsigned first = ep->rx_first++ % ep->npaths;
    for (unsigned q = 0; q < ep->npaths && n < ERMA_MAX_BURST; q++) {
        const unsigned p = (first + q) % ep->npaths;
        const int m = erma_rx_burst(ep->path[p], rx + n, ERMA_MAX_BURST - (unsigned)n);
        for (int k = 0; k < m; k++)
            rx[n + k].path = (uint8_t)p;
        n += m > 0 ? m : 0;
    }
    return n;
}

/* ---- the loop ---- */

static void demux(struct erma_endpoint *ep, const struct erma_rx_pkt *pkt)
{
    struct erma_hdr h;
    int k;
    if (erma_hdr_check(pkt->data, pkt->len, &h) != ERMA_OK) {
        ep->stats.rx_bad++;
        return;
    }
    if ((k = ep->by_id[h.proto]) < 0) {
        ep->stats.rx_no_proto++;
        return;
    }
    ep->protos[k].rx(ep->protos[k].ctx, &h, pkt);
}

/* When a packet without the transport's arrival stamp came, at the
 * earliest: after the last pass looked (its clock reading), or after the
 * loop woke from its idle sleep. The earliest, so that a loop kept away
 * from its socket (an application's callback blocking it between passes,
 * a disk sync) counts that time in the host's delay (erma/rpc.h, Busy
 * hosts), not as network round trip: a busy-polling loop's bound is one
 * pass; udp stamps arrivals from a burst to a quiet time. */
static uint64_t unstamped_rx(struct erma_endpoint *ep, uint64_t last, uint64_t now)
{
    const uint64_t t = ep->woke || last == 0 || last > now ? now : last;
    ep->woke = false;
    return t;
}

int erma_endpoint_run_once(struct erma_endpoint *ep)
{
    struct erma_rx_pkt rx[ERMA_MAX_BURST];
    const uint64_t last = ep->now;
    /* The pass's time, read before the receive: the application's packets
     * leave at it, and a lone packet that came is handled without another
     * reading (this time is off by one receive call at most). It is read
     * again after a burst (whose copies take long), after a flush of the
     * application's packets, and for a packet the kernel stamped later. */
    uint64_t now = erma__ep_clock(ep);
    const bool outer = ep->in_pass; /* (a pass run from a callback of one) */
    ep->in_pass = true;
    const bool called = ep->calls > 0;
    if (called) { /* one call, or a burst of them, since the last pass */
        ep->lone_calls = ep->calls == 1;
        ep->calls = 0;
    }
    const bool flushed = ep->ntx > 0;
    if (flushed) /* what the application queued since the last pass goes first */
        tx_flush_at(ep, last, now);
    const int n = ep->npaths > 1 ? rx_paths(ep, rx) : erma_rx_burst(ep->tr, rx, ERMA_MAX_BURST);
    if (n > 1 || (n == 1 && (flushed || rx[0].rx_ns > now)))
        now = erma__ep_clock(ep);
    const uint64_t since = n > 0 ? unstamped_rx(ep, last, now) : now;
    int work = n > 0 ? n : 0;
    ep->stats.rx_pkts += (uint64_t)work;
    for (int i = 0; i < n; i++) {
        if (rx[i].rx_ns == 0)
            rx[i].rx_ns = since;
        else if (rx[i].rx_ns > now)
            rx[i].rx_ns = now; /* a stamp ahead of this clock */
        demux(ep, &rx[i]);
    }
    for (unsigned k = 0; k < ep->nprotos; k++)
        work += ep->protos[k].poll(ep->protos[k].ctx, now);
    erma__ep_tx_flush(ep);
    for (unsigned k = 0; k < ep->nprotos; k++)
        if (ep->protos[k].after_flush)
            ep->protos[k].after_flush(ep->protos[k].ctx);
    erma__ep_tx_flush(ep); /* what the continuations sent: before any sleep */
    /* Work, or the application's packets: the loop is busy (an answer may
     * come soon). Here, since run_until may return on done() before its
     * idle wait looks. */
    if (work > 0 || called || flushed)
        ep->idle_since = now;
    if (now >= ep->next_trim) {
        erma_pool_trim(ep->pool, now);
        ep->next_trim = now + ERMA_EP_TRIM_NS;
    }
    ep->in_pass = outer;
    return work;
}

uint64_t erma_endpoint_next_timer(const struct erma_endpoint *ep)
{
    uint64_t t = UINT64_MAX;
    for (unsigned k = 0; k < ep->nprotos; k++) {
        const uint64_t p = ep->protos[k].next_timer(ep->protos[k].ctx);
        t = p < t ? p : t;
    }
    return t;
}

/* Once nothing happened for idle_wait_ns, or SHARED_SPIN_NS on a shared
 * core (share_check), and no protocol awaits what would not wake it,
 * sleeps until a packet, the next timer or end, at most
 * ERMA_IDLE_SLEEP_MAX_NS. Idleness carries over from one run call to the
 * next, so a loop of short runs sleeps as one long one. */
static bool awaits(const struct erma_endpoint *ep)
{
    for (unsigned k = 0; k < ep->nprotos; k++)
        if (ep->protos[k].awaits && ep->protos[k].awaits(ep->protos[k].ctx))
            return true;
    return false;
}

/* Sleeps until a packet on any path; a path that cannot be polled with
 * the others makes it a short sleep on the first. */
static void wait_paths(struct erma_endpoint *ep, uint64_t ns)
{
    struct pollfd fds[ERMA_MAX_PATHS];
    unsigned n = 0;
    for (; n < ep->npaths && ep->npaths > 1; n++)
        if (!ep->path[n]->ops->poll_fd || (fds[n].fd = ep->path[n]->ops->poll_fd(ep->path[n])) < 0)
            break;
    ep->woke = true;
    ep->stats.sleeps++;
    if (ep->npaths == 1 || n < ep->npaths) {
        erma_transport_wait(ep->tr, ep->npaths == 1 || ns < 100000 ? ns : 100000);
        return;
    }
    for (unsigned k = 0; k < n; k++)
        fds[k].events = POLLIN;
    const struct timespec t = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    ppoll(fds, n, &t, NULL);
}

/* The calling thread's run-queue wait in ns (schedstat's second field)
 * into *wait: 1; 0 where this look failed but a later one may not (no file
 * descriptor left, say); -1 where the kernel does not tell it (no
 * schedstat, or not ours to read). Opened at each look, 10 ms apart, so
 * that an endpoint holds no descriptor and reads the thread that calls. */
static int run_queue_ns(uint64_t *wait)
{
    char buf[96];
    const int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT || errno == EACCES || errno == EPERM ? -1 : 0;
    const ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return n < 0 && errno == EINTR ? 0 : -1;
    buf[n] = 0;
    char *end;
    strtoull(buf, &end, 10); /* the time on the CPU */
    const char *field = end;
    *wait = strtoull(field, &end, 10);
    return end > field && (*end == ' ' || *end == '\n') ? 1 : -1;
}

/* The shared-core guard: a loop whose thread waited on the run queue for
 * over an eighth of the time in SHARE_WINDOWS looks in a row, SHARE_CHECK_NS
 * apart (one window alone may be a blip: a kernel thread, a process
 * exiting), spins at most SHARED_SPIN_NS once idle until SHARED_HOLD_NS
 * after the last such look (each look of the streak extends it): about two
 * loopback round trips, so a ping-pong's answer still finds it awake,
 * while a longer wait is left to the threads that share the core. Only
 * where the transport can sleep (udp: cfg.busy_poll is the way to spin for
 * good); no schedstat turns it off. The looks' intervals are measured on
 * the monotonic clock, which the kernel's wait is in; the hold is on the
 * loop's clock, which idle_wait compares. An endpoint run by another thread
 * than at the last look starts over. */
#define SHARE_CHECK_NS 10000000ull
#define SHARE_WINDOWS 3
#define SHARED_HOLD_NS 1000000000ull
#define SHARED_SPIN_NS 10000ull
static void share_check(struct erma_endpoint *ep, uint64_t now)
{
    uint64_t wait = 0;
    const int got = ep->tr->ops->wait ? run_queue_ns(&wait) : -1;
    if (got < 0) {
        ep->next_share_check = UINT64_MAX;
        return;
    }
    ep->next_share_check = now + SHARE_CHECK_NS;
    if (got == 0)
        return;
    const pthread_t self = pthread_self();
    if (ep->share_wall && !pthread_equal(self, ep->share_thread)) {
        ep->share_wall = 0;
        ep->share_streak = 0;
        ep->shared_until = 0;
    }
    ep->share_thread = self;
    const uint64_t wall = erma_mono_ns();
    const bool waited = ep->share_wall && wall > ep->share_wall && wait >= ep->share_delay &&
                        (wait - ep->share_delay) * 8 > wall - ep->share_wall;
    ep->share_streak = waited ? ep->share_streak + 1 : 0;
    if (ep->share_streak >= SHARE_WINDOWS) {
        ep->shared_until = now + SHARED_HOLD_NS;
        ep->stats.shared_core++;
    }
    ep->share_wall = wall;
    ep->share_delay = wait;
}

static void idle_wait(struct erma_endpoint *ep, int work, uint64_t end)
{
    const uint64_t now = ep->now;
    if (now >= ep->next_share_check)
        share_check(ep, now);
    if (ep->ntx) { /* queued since the pass (by done(), say): never sleep on it */
        erma__ep_tx_flush(ep);
        ep->idle_since = now;
        return;
    }
    if (work > 0 || awaits(ep)) { /* awaits: a worker's answer wakes nothing */
        ep->idle_since = now;
        return;
    }
    const bool shared = now < ep->shared_until;
    const uint64_t spin = shared && SHARED_SPIN_NS < ep->cfg.idle_wait_ns ? SHARED_SPIN_NS
                                                                          : ep->cfg.idle_wait_ns;
    if (now - ep->idle_since < spin)
        return;
    uint64_t until = erma_endpoint_next_timer(ep);
    until = until < end ? until : end;
    if (until > now + ERMA_IDLE_SLEEP_MAX_NS)
        until = now + ERMA_IDLE_SLEEP_MAX_NS;
    if (until > now) {
        ep->stats.shared_sleeps += shared && now - ep->idle_since < ep->cfg.idle_wait_ns;
        wait_paths(ep, until - now);
    }
}

int erma_endpoint_run_until(struct erma_endpoint *ep, bool (*done)(void *ctx), void *ctx,
                            uint64_t timeout_ns)
{
    uint64_t end = 0; /* from the first pass's clock: no reading of its own */
    for (;;) {
        const int work = erma_endpoint_run_once(ep);
        if (!end)
            end = timeout_ns > UINT64_MAX - ep->now ? UINT64_MAX : ep->now + timeout_ns;
        if (done && done(ctx))
            return ERMA_OK;
        if (ep->now >= end)
            return ERMA_ETIMEDOUT;
        if (!ep->cfg.busy_poll)
            idle_wait(ep, work, end);
    }
}

void erma_endpoint_run(struct erma_endpoint *ep, uint64_t ns)
{
    erma_endpoint_run_until(ep, NULL, NULL, ns);
}

int erma_endpoint_uri(const struct erma_endpoint *ep, char *out, size_t len)
{
    return ep && out ? erma_transport_addr_str(ep->tr, &ep->tr->local, out, len) : ERMA_EINVAL;
}

uint8_t erma_endpoint_thread_id(const struct erma_endpoint *ep)
{
    return ep->tid;
}

void erma_endpoint_get_stats(const struct erma_endpoint *ep, struct erma_endpoint_stats *out)
{
    *out = ep->stats;
}
