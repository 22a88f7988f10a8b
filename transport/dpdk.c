/* DPDK transport: Ethernet + IPv4 + UDP frames built in userspace (erma/dpdk.h). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_spinlock.h>
#include <rte_udp.h>

#include "erma/dpdk.h"
#include "erma/errors.h"
#include "erma/log.h"
#include "erma/version.h"
#include "transport/module.h"
#include "common/ring.h"

#define MAX_EP 64
#define MAX_TXQ 16
#define SW_RING 1024
#define TX_DESC 1024
#define NEIGH 64 /* learned neighbours per endpoint (a direct-mapped cache) */
#define FRAME_HDR (RTE_ETHER_HDR_LEN + 20 + 8)
#define ADDR_LEN 12 /* IPv4 (4), UDP port (2), MAC (6); all in network order */
#define QUERY_KEYS "vdev", "pci", "port", "lcores", "mem"

struct dpdk {
    struct erma_transport base;
    uint32_t ip;   /* network order */
    uint16_t port; /* network order */
    uint16_t txq;
    struct erma_mpsc ring; /* frames other pollers found for us */
    struct rte_mbuf *held[ERMA_MAX_BURST]; /* returned by the last rx_burst */
    unsigned nheld;
    struct {
        uint32_t ip;
        struct rte_ether_addr mac;
    } neigh[NEIGH];
};

/* The process's one port. Set up under mu; the data path reads it freely. */
static const struct erma_transport_ops erma_dpdk_ops;

static struct {
    pthread_mutex_t mu;
    int init_rc; /* 1 until tried, then the outcome of the EAL/port setup */
    uint16_t id, ntxq, next_txq;
    uint32_t mtu;
    bool tx_csum, rx_csum;
    struct erma_transport_hints hints; /* of every endpoint on the port */
    struct rte_ether_addr mac;
    struct rte_mempool *pool;
    unsigned nep;
    rte_spinlock_t rx_lock;
    uint64_t orphans; /* frames for no endpoint or a full ring; under rx_lock */
    rte_spinlock_t tx_lock[MAX_TXQ];
    struct dpdk *_Atomic by_port[65536]; /* demux: UDP port (host order) -> endpoint */
} P = {.mu = PTHREAD_MUTEX_INITIALIZER, .init_rc = 1};

/* ---- URI query: "k=v&k=v" lists, from the URI first, then ERMA_DPDK ---- */

/* Copies the value of key in list (NULL: none) to val; false when absent. */
static bool kv_find(const char *list, const char *key, char *val, size_t len)
{
    const size_t klen = strlen(key);
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, '&');
        const size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
            const size_t vlen = n - klen - 1;
            if (vlen >= len)
                return false;
            memcpy(val, p + klen + 1, vlen);
            val[vlen] = 0;
            return true;
        }
        p = end ? end + 1 : NULL;
    }
    return false;
}

static bool kv_get(const char *query, const char *key, char *val, size_t len)
{
    return kv_find(query, key, val, len) || kv_find(getenv("ERMA_DPDK"), key, val, len);
}

/* True when every key in list is one of names[0..n). */
static bool kv_known(const char *list, const char *const *names, size_t n)
{
    for (const char *p = list; p && *p;) {
        const char *eq = strchr(p, '='), *end = strchr(p, '&');
        if (!eq || (end && eq > end))
            return false;
        const size_t klen = (size_t)(eq - p);
        bool ok = false;
        for (size_t i = 0; i < n && !ok; i++)
            ok = strlen(names[i]) == klen && strncmp(p, names[i], klen) == 0;
        if (!ok)
            return false;
        p = end ? end + 1 : NULL;
    }
    return true;
}

/* Splits "IP:PORT[?query]" into address parts and the query (or NULL). */
static int parse_hostport(const char *rest, uint32_t *ip, uint16_t *port, const char **query)
{
    const char *q = strchr(rest, '?');
    const char *colon = strchr(rest, ':');
    char host[INET_ADDRSTRLEN];
    if (!colon || (q && colon > q) || (size_t)(colon - rest) >= sizeof host)
        return ERMA_EADDR;
    memcpy(host, rest, (size_t)(colon - rest));
    host[colon - rest] = 0;
    struct in_addr a;
    if (inet_pton(AF_INET, host, &a) != 1)
        return ERMA_EADDR;
    char *end;
    const long p = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || (*end && *end != '?') || p < 0 || p > 65535)
        return ERMA_EADDR;
    *ip = a.s_addr;
    *port = htons((uint16_t)p);
    *query = q ? q + 1 : NULL;
    return ERMA_OK;
}

static bool parse_mac(const char *s, struct rte_ether_addr *mac)
{
    unsigned b[6];
    char tail;
    if (sscanf(s, "%2x:%2x:%2x:%2x:%2x:%2x%c", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5],
               &tail) != 6)
        return false;
    for (int i = 0; i < 6; i++)
        mac->addr_bytes[i] = (uint8_t)b[i];
    return true;
}

/* ---- EAL and port setup, once per process ---- */

/* Appends to argv (at most max entries) a strdup of s; false when full. */
static bool arg(char **argv, int *argc, int max, const char *s)
{
    if (*argc >= max - 1 || !(argv[*argc] = strdup(s)))
        return false;
    (*argc)++;
    return true;
}

/* "0@(c1,c2,...)" from the calling thread's CPU affinity. */
static void default_lcores(char *buf, size_t len)
{
    cpu_set_t set;
    snprintf(buf, len, "0@(0)");
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return;
    size_t n = (size_t)snprintf(buf, len, "0@(");
    for (int c = 0; c < CPU_SETSIZE && n + 8 < len; c++)
        if (CPU_ISSET(c, &set))
            n += (size_t)snprintf(buf + n, len - n, "%s%d", buf[n - 1] == '(' ? "" : ",", c);
    snprintf(buf + n, len - n, ")");
}

/* HugePages_Free of /proc/meminfo (of the default size), 0 if unknown. */
static unsigned long free_hugepages(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    unsigned long n = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "HugePages_Free: %lu", &n) == 1)
            break;
    if (f)
        fclose(f);
    return n;
}

static int eal_init(const char *query)
{
    enum { MAX_ARGS = 64 };
    /* The EAL may keep pointers into argv: it lives as long as the process. */
    static char *argv[MAX_ARGS];
    int argc = 0;
    char val[1024], buf[1100];
    bool ok = arg(argv, &argc, MAX_ARGS, "erma") && arg(argv, &argc, MAX_ARGS, "--in-memory") &&
              arg(argv, &argc, MAX_ARGS, "--no-telemetry");
    ERMA_DEBUG("dpdk: initialising the EAL"); /* the first message sets the log level */
    snprintf(buf, sizeof buf, "--log-level=*:%s",
             erma_log_level >= ERMA_LOG_DEBUG  ? "debug"
             : erma_log_level >= ERMA_LOG_INFO ? "info"
                                               : "error");
    ok = ok && arg(argv, &argc, MAX_ARGS, buf);
    if (!kv_get(query, "pci", val, sizeof val))
        ok = ok && arg(argv, &argc, MAX_ARGS, "--no-pci");
    else if (strcmp(val, "all") != 0)
        ok = ok && arg(argv, &argc, MAX_ARGS, "-a") && arg(argv, &argc, MAX_ARGS, val);
    if (kv_get(query, "vdev", val, sizeof val)) {
        snprintf(buf, sizeof buf, "--vdev=%s", val);
        ok = ok && arg(argv, &argc, MAX_ARGS, buf);
    }
    if (kv_get(query, "lcores", val, sizeof val)) {
        ok = ok && arg(argv, &argc, MAX_ARGS, "-l") && arg(argv, &argc, MAX_ARGS, val);
    } else {
        default_lcores(val, sizeof val);
        snprintf(buf, sizeof buf, "--lcores=%s", val);
        ok = ok && arg(argv, &argc, MAX_ARGS, buf);
    }
    if (kv_get(query, "mem", val, sizeof val))
        ok = ok && arg(argv, &argc, MAX_ARGS, "-m") && arg(argv, &argc, MAX_ARGS, val);
    const char *extra = getenv("ERMA_DPDK_EAL");
    if (extra && strlen(extra) >= sizeof buf) {
        ERMA_ERROR("dpdk: ERMA_DPDK_EAL is too long");
        return ERMA_EINVAL;
    }
    if (extra) {
        strcpy(buf, extra);
        char *save;
        for (char *t = strtok_r(buf, " \t", &save); t; t = strtok_r(NULL, " \t", &save))
            ok = ok && arg(argv, &argc, MAX_ARGS, t);
    }
    if (!ok)
        return ERMA_ENOMEM;
    char line[2048];
    size_t n = 0;
    for (int i = 0; i < argc && n < sizeof line; i++)
        n += (size_t)snprintf(line + n, sizeof line - n, " %s", argv[i]);
    ERMA_INFO("dpdk: EAL arguments:%s", line);
    /* rte_eal_init permutes argv; hand it a copy of the pointer array. */
    static char *args[MAX_ARGS];
    memcpy(args, argv, sizeof args);
    if (rte_eal_init(argc, args) < 0) {
        ERMA_ERROR("dpdk: EAL init failed (%s):%s", rte_strerror(rte_errno), line);
        if (!strstr(line, "--no-huge") && free_hugepages() == 0)
            ERMA_ERROR("dpdk: no free hugepages: reserve some (echo 256 > "
                       "/proc/sys/vm/nr_hugepages, hugetlbfs mounted; scripts/netns up does "
                       "both) or set ERMA_DPDK_EAL=\"--no-huge -m 512\"");
        return ERMA_ENOTSUP;
    }
    return ERMA_OK;
}

/* The port id the query names, or the first available; -1 when none. */
static int find_port(const char *query)
{
    char val[1024];
    uint16_t id;
    if (kv_get(query, "port", val, sizeof val)) {
        char *end;
        const long p = strtol(val, &end, 10);
        return *end || p < 0 || p >= RTE_MAX_ETHPORTS || !rte_eth_dev_is_valid_port((uint16_t)p)
                   ? -1
                   : (int)p;
    }
    if (kv_get(query, "vdev", val, sizeof val)) {
        val[strcspn(val, ",")] = 0;
        return rte_eth_dev_get_port_by_name(val, &id) == 0 ? id : -1;
    }
    RTE_ETH_FOREACH_DEV(id) {
        return id;
    }
    return -1;
}

/* At exit, with no endpoint left open: release the port (an af_xdp port
 * detaches its XDP program) and the EAL's memory. */
static void port_fini(void)
{
    pthread_mutex_lock(&P.mu);
    if (P.init_rc == ERMA_OK && P.nep == 0) {
        rte_eth_dev_stop(P.id);
        rte_eth_dev_close(P.id);
        rte_eal_cleanup();
        P.init_rc = ERMA_ENOTSUP; /* the EAL cannot come back */
    }
    pthread_mutex_unlock(&P.mu);
}

static int port_init(const char *query, const struct erma_transport_cfg *cfg)
{
    int rc = eal_init(query);
    if (rc != ERMA_OK)
        return rc;
    const int pid = find_port(query);
    if (pid < 0) {
        ERMA_ERROR("dpdk: no such DPDK port (give vdev=, pci= or port=)");
        return ERMA_ENOTSUP;
    }
    P.id = (uint16_t)pid;
    struct rte_eth_dev_info info;
    if ((rc = rte_eth_dev_info_get(P.id, &info)) != 0) {
        ERMA_ERROR("dpdk: port %u: no device info: %s", P.id, rte_strerror(-rc));
        return ERMA_ENOTSUP;
    }
    struct rte_eth_conf conf = {.rxmode.mtu = cfg->mtu};
    P.tx_csum = info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM;
    P.rx_csum = info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_IPV4_CKSUM;
    if (P.tx_csum)
        conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_IPV4_CKSUM;
    if (P.rx_csum)
        conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_IPV4_CKSUM;
    P.ntxq = info.max_tx_queues < MAX_TXQ ? info.max_tx_queues : MAX_TXQ;
    if (P.ntxq == 0 || info.max_rx_queues == 0) {
        ERMA_ERROR("dpdk: port %u (%s) has no queues", P.id, info.driver_name);
        return ERMA_ENOTSUP;
    }
    if ((rc = rte_eth_dev_configure(P.id, 1, P.ntxq, &conf)) != 0) {
        ERMA_ERROR("dpdk: port %u (%s): configure for MTU %u: %s", P.id, info.driver_name,
                   cfg->mtu, rte_strerror(-rc));
        return ERMA_ENOTSUP;
    }
    rc = rte_eth_dev_set_mtu(P.id, (uint16_t)cfg->mtu);
    if (rc != 0 && rc != -ENOTSUP) {
        ERMA_ERROR("dpdk: port %u: cannot set MTU %u: %s", P.id, cfg->mtu, rte_strerror(-rc));
        return ERMA_ENOTSUP;
    }
    uint16_t nb_rxd = cfg->rx_ring > 32768 ? 32768 : (uint16_t)cfg->rx_ring, nb_txd = TX_DESC;
    if ((rc = rte_eth_dev_adjust_nb_rx_tx_desc(P.id, &nb_rxd, &nb_txd)) != 0)
        return ERMA_ENOTSUP;
    const unsigned nmbufs =
        2u * (nb_rxd + (unsigned)P.ntxq * nb_txd) + 4u * SW_RING + 2u * MAX_EP * ERMA_MAX_BURST;
    const uint32_t room = RTE_PKTMBUF_HEADROOM + cfg->mtu + RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN;
    const int socket = rte_eth_dev_socket_id(P.id);
    P.pool = rte_pktmbuf_pool_create("erma_pool", nmbufs, 256, 0,
                                     (uint16_t)(room > RTE_MBUF_DEFAULT_BUF_SIZE
                                                    ? room
                                                    : RTE_MBUF_DEFAULT_BUF_SIZE),
                                     socket);
    if (!P.pool) {
        ERMA_ERROR("dpdk: cannot allocate %u mbufs: %s (hugepages reserved?)", nmbufs,
                   rte_strerror(rte_errno));
        return ERMA_ENOMEM;
    }
    if ((rc = rte_eth_rx_queue_setup(P.id, 0, nb_rxd, (unsigned)socket, NULL, P.pool)) != 0) {
        ERMA_ERROR("dpdk: port %u: RX queue: %s", P.id, rte_strerror(-rc));
        return ERMA_ENOTSUP;
    }
    for (uint16_t q = 0; q < P.ntxq; q++) {
        if ((rc = rte_eth_tx_queue_setup(P.id, q, nb_txd, (unsigned)socket, NULL)) != 0) {
            ERMA_ERROR("dpdk: port %u: TX queue %u: %s", P.id, q, rte_strerror(-rc));
            return ERMA_ENOTSUP;
        }
        rte_spinlock_init(&P.tx_lock[q]);
    }
    rte_spinlock_init(&P.rx_lock);
    if ((rc = rte_eth_dev_start(P.id)) != 0) {
        ERMA_ERROR("dpdk: port %u: start: %s", P.id, rte_strerror(-rc));
        return ERMA_ENOTSUP;
    }
    rte_eth_macaddr_get(P.id, &P.mac);
    struct rte_eth_link link = {0};
    for (int i = 0; i < 300; i++) { /* up to 3 s */
        if (rte_eth_link_get_nowait(P.id, &link) == 0 && link.link_status)
            break;
        usleep(10000);
    }
    char mac[RTE_ETHER_ADDR_FMT_SIZE];
    rte_ether_format_addr(mac, sizeof mac, &P.mac);
    if (!link.link_status)
        ERMA_WARN("dpdk: port %u (%s) link is down", P.id, info.driver_name);
    P.mtu = cfg->mtu;
    P.hints.frame_overhead = FRAME_HDR + 24; /* FCS, preamble, inter-frame gap */
    P.hints.link_bps = link.link_speed && link.link_speed != RTE_ETH_SPEED_NUM_UNKNOWN
                           ? (uint64_t)link.link_speed * 1000000
                           : 0;
    /* A PMD over a kernel socket (af_packet, af_xdp, tap, pcap) waits on
     * the kernel as udp does. */
    const char *drv = info.driver_name ? info.driver_name : "";
    if (!strncmp(drv, "net_af_", 7) || !strcmp(drv, "net_tap") || !strcmp(drv, "net_pcap")) {
        P.hints.base_rtt_ns = 30000; /* af_packet on veth between namespaces, unloaded */
        P.hints.jitter_ns = 1000000;
        P.hints.min_timeout_ns = 10000000;
    }
    atexit(port_fini);
    ERMA_INFO("dpdk: port %u (%s) mac %s mtu %u, %u rx / %u tx descriptors, %u tx queues, "
              "ipv4 checksum offload tx %d rx %d",
              P.id, info.driver_name, mac, P.mtu, nb_rxd, nb_txd, P.ntxq, P.tx_csum, P.rx_csum);
    return ERMA_OK;
}

/* ---- endpoints ---- */

static int dpdk_addr_str(const struct erma_transport *tr, const struct erma_addr *a, char *buf,
                         size_t len)
{
    (void)tr;
    if (a->len != ADDR_LEN)
        return ERMA_EINVAL;
    char ip[INET_ADDRSTRLEN];
    uint16_t port;
    inet_ntop(AF_INET, a->raw, ip, sizeof ip);
    memcpy(&port, a->raw + 4, 2);
    const uint8_t *m = a->raw + 6;
    const int n = snprintf(buf, len, "%s:%u?mac=%02x:%02x:%02x:%02x:%02x:%02x", ip, ntohs(port),
                           m[0], m[1], m[2], m[3], m[4], m[5]);
    return n < 0 || (size_t)n >= len ? ERMA_EINVAL : ERMA_OK;
}

static void make_addr(struct erma_addr *a, uint32_t ip, uint16_t port,
                      const struct rte_ether_addr *mac)
{
    memset(a, 0, sizeof *a);
    a->len = ADDR_LEN;
    memcpy(a->raw, &ip, 4);
    memcpy(a->raw + 4, &port, 2);
    memcpy(a->raw + 6, mac->addr_bytes, 6);
}

static unsigned neigh_slot(uint32_t ip)
{
    return (ntohl(ip) * 2654435761u) >> 26; /* 6 bits: NEIGH = 64 */
}

/* Looks for ip in "IP=MAC,IP=MAC" (ERMA_DPDK_NEIGH). */
static bool static_neigh(uint32_t ip, struct rte_ether_addr *mac)
{
    const char *list = getenv("ERMA_DPDK_NEIGH");
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        const size_t n = end ? (size_t)(end - p) : strlen(p);
        char item[64];
        if (n < sizeof item) {
            memcpy(item, p, n);
            item[n] = 0;
            char *eq = strchr(item, '=');
            struct in_addr a;
            if (eq) {
                *eq = 0;
                if (inet_pton(AF_INET, item, &a) == 1 && a.s_addr == ip && parse_mac(eq + 1, mac))
                    return true;
            }
        }
        p = end ? end + 1 : NULL;
    }
    return false;
}

static int dpdk_resolve(struct erma_transport *tr, const char *rest, struct erma_addr *out)
{
    struct dpdk *d = (struct dpdk *)tr;
    static const char *const keys[] = {QUERY_KEYS, "mac"};
    uint32_t ip;
    uint16_t port;
    const char *query;
    char val[64];
    struct rte_ether_addr mac;
    if (parse_hostport(rest, &ip, &port, &query) != ERMA_OK || port == 0 || ip == 0 ||
        !kv_known(query, keys, sizeof keys / sizeof keys[0]))
        return ERMA_EADDR;
    if (kv_find(query, "mac", val, sizeof val)) {
        if (!parse_mac(val, &mac))
            return ERMA_EADDR;
    } else if (d->neigh[neigh_slot(ip)].ip == ip) {
        mac = d->neigh[neigh_slot(ip)].mac;
    } else if (!static_neigh(ip, &mac)) {
        ERMA_WARN("dpdk: no MAC address known for %s: add ?mac=, set ERMA_DPDK_NEIGH, or "
                  "receive a packet from it first", rest);
        return ERMA_EADDR;
    }
    make_addr(out, ip, port, &mac);
    return ERMA_OK;
}

static void dpdk_close(struct erma_transport *tr)
{
    struct dpdk *d = (struct dpdk *)tr;
    pthread_mutex_lock(&P.mu);
    atomic_store(&P.by_port[ntohs(d->port)], NULL);
    /* Once we have held rx_lock, no poller can still be pushing to our ring. */
    rte_spinlock_lock(&P.rx_lock);
    const uint64_t orphans = P.orphans;
    rte_spinlock_unlock(&P.rx_lock);
    P.nep--;
    pthread_mutex_unlock(&P.mu);
    rte_pktmbuf_free_bulk(d->held, d->nheld);
    for (struct rte_mbuf *m; (m = erma__mpsc_pop(&d->ring));)
        rte_pktmbuf_free(m);
    erma__mpsc_destroy(&d->ring);
    ERMA_DEBUG("dpdk: closed endpoint on port %u (process: %llu frames for no endpoint)",
               ntohs(d->port), (unsigned long long)orphans);
    free(d);
}

static int dpdk_open(const char *rest, const struct erma_transport_cfg *cfg,
                     struct erma_transport **out)
{
    static const char *const keys[] = {QUERY_KEYS};
    uint32_t ip;
    uint16_t port;
    const char *query;
    if (parse_hostport(rest, &ip, &port, &query) != ERMA_OK || ip == 0 ||
        !kv_known(query, keys, sizeof keys / sizeof keys[0]) ||
        !kv_known(getenv("ERMA_DPDK"), keys, sizeof keys / sizeof keys[0])) {
        ERMA_WARN("dpdk: bad URI dpdk://%s (want IP:PORT?key=value&..., keys vdev pci port "
                  "lcores mem; ERMA_DPDK likewise)", rest);
        return ERMA_EADDR;
    }
    struct dpdk *d = calloc(1, sizeof *d);
    if (!d)
        return ERMA_ENOMEM;
    if (erma__mpsc_init(&d->ring, SW_RING) != ERMA_OK) {
        free(d);
        return ERMA_ENOMEM;
    }
    pthread_mutex_lock(&P.mu);
    if (P.init_rc == 1)
        P.init_rc = port_init(query, cfg);
    int rc = P.init_rc;
    if (rc == ERMA_OK && cfg->mtu > P.mtu) {
        ERMA_WARN("dpdk: MTU %u is over the port's %u", cfg->mtu, P.mtu);
        rc = ERMA_EINVAL;
    }
    if (rc == ERMA_OK && P.nep >= MAX_EP)
        rc = ERMA_ENOSLOTS;
    unsigned hport = ntohs(port);
    if (rc == ERMA_OK && hport == 0) {
        for (hport = 49152; hport < 65536 && atomic_load(&P.by_port[hport]); hport++)
            ;
    }
    if (rc == ERMA_OK && (hport >= 65536 || atomic_load(&P.by_port[hport]))) {
        ERMA_WARN("dpdk: UDP port %u is in use in this process", hport);
        rc = ERMA_EADDR;
    }
    if (rc == ERMA_OK) {
        d->base.ops = &erma_dpdk_ops;
        d->base.max_pkt = cfg->mtu - ERMA_IP_UDP_OVERHEAD;
        d->base.rx_ring = cfg->rx_ring;
        d->base.hints = P.hints;
        d->ip = ip;
        d->port = htons((uint16_t)hport);
        d->txq = P.next_txq++ % P.ntxq;
        make_addr(&d->base.local, ip, d->port, &P.mac);
        P.nep++;
        atomic_store(&P.by_port[hport], d);
    }
    pthread_mutex_unlock(&P.mu);
    if (rc != ERMA_OK) {
        erma__mpsc_destroy(&d->ring);
        free(d);
        return rc;
    }
    *out = &d->base;
    return ERMA_OK;
}

/* Writes frame headers and packet p into m. */
static void build(struct dpdk *d, struct rte_mbuf *m, const struct erma_tx_pkt *p)
{
    const uint32_t len = p->hdr_len + p->data_len;
    uint8_t *f = rte_pktmbuf_mtod(m, uint8_t *);
    struct rte_ether_hdr *eth = (struct rte_ether_hdr *)f;
    struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(f + RTE_ETHER_HDR_LEN);
    struct rte_udp_hdr *udp = (struct rte_udp_hdr *)(ip + 1);
    const uint8_t *dst = p->dst->raw;
    memcpy(eth->dst_addr.addr_bytes, dst + 6, 6);
    eth->src_addr = P.mac;
    eth->ether_type = htons(RTE_ETHER_TYPE_IPV4);
    *ip = (struct rte_ipv4_hdr){.version_ihl = RTE_IPV4_VHL_DEF,
                                .total_length = htons((uint16_t)(len + 28)),
                                .fragment_offset = htons(RTE_IPV4_HDR_DF_FLAG),
                                .time_to_live = 64,
                                .next_proto_id = IPPROTO_UDP,
                                .src_addr = d->ip};
    memcpy(&ip->dst_addr, dst, 4);
    udp->src_port = d->port;
    memcpy(&udp->dst_port, dst + 4, 2);
    udp->dgram_len = htons((uint16_t)(len + 8));
    udp->dgram_cksum = 0;
    memcpy(f + FRAME_HDR, p->hdr, p->hdr_len);
    if (p->data_len)
        memcpy(f + FRAME_HDR + p->hdr_len, p->data, p->data_len);
    m->data_len = (uint16_t)(FRAME_HDR + len);
    m->pkt_len = FRAME_HDR + len;
    if (P.tx_csum) {
        m->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM;
        m->l2_len = RTE_ETHER_HDR_LEN;
        m->l3_len = 20;
    } else {
        ip->hdr_checksum = rte_ipv4_cksum(ip);
    }
}

static int dpdk_tx_burst(struct erma_transport *tr, const struct erma_tx_pkt *pkts, unsigned n)
{
    struct dpdk *d = (struct dpdk *)tr;
    const int rc = erma_transport_check_tx(tr, pkts, n, ADDR_LEN);
    if (rc != ERMA_OK)
        return rc;
    unsigned sent = 0;
    while (sent < n) {
        const unsigned want = n - sent < ERMA_MAX_BURST ? n - sent : ERMA_MAX_BURST;
        struct rte_mbuf *m[ERMA_MAX_BURST];
        if (rte_pktmbuf_alloc_bulk(P.pool, m, want) != 0)
            break;
        for (unsigned i = 0; i < want; i++)
            build(d, m[i], &pkts[sent + i]);
        rte_spinlock_lock(&P.tx_lock[d->txq]);
        const unsigned got = rte_eth_tx_burst(P.id, d->txq, m, (uint16_t)want);
        rte_spinlock_unlock(&P.tx_lock[d->txq]);
        if (got < want)
            rte_pktmbuf_free_bulk(m + got, want - got);
        for (unsigned i = sent; i < sent + got; i++)
            tr->stats.tx_bytes += pkts[i].hdr_len + pkts[i].data_len;
        sent += got;
        if (got < want)
            break;
    }
    tr->stats.tx_pkts += sent;
    return (int)sent;
}

/* The IPv4 header of m when m is an IPv4/UDP frame long enough for it and
 * its UDP header, else NULL; *ihl gets the IPv4 header length. */
static const struct rte_ipv4_hdr *udp4(const struct rte_mbuf *m, uint32_t *ihl)
{
    const uint8_t *f = rte_pktmbuf_mtod(m, const uint8_t *);
    if (m->nb_segs != 1 || m->data_len < FRAME_HDR ||
        ((const struct rte_ether_hdr *)f)->ether_type != htons(RTE_ETHER_TYPE_IPV4))
        return NULL;
    const struct rte_ipv4_hdr *ip = (const struct rte_ipv4_hdr *)(f + RTE_ETHER_HDR_LEN);
    *ihl = (ip->version_ihl & 0xf) * 4u;
    if ((ip->version_ihl >> 4) != 4 || *ihl < 20 || ip->next_proto_id != IPPROTO_UDP ||
        RTE_ETHER_HDR_LEN + *ihl + 8 > m->data_len)
        return NULL;
    return ip;
}

/* The endpoint m is addressed to (by UDP destination port), or NULL. */
static struct dpdk *demux(const struct rte_mbuf *m)
{
    uint32_t ihl;
    const struct rte_ipv4_hdr *ip = udp4(m, &ihl);
    if (!ip)
        return NULL;
    const struct rte_udp_hdr *udp = (const struct rte_udp_hdr *)((const uint8_t *)ip + ihl);
    return atomic_load_explicit(&P.by_port[ntohs(udp->dst_port)], memory_order_acquire);
}

/* Validates frame m for d and hands it out as pkts[*n], or frees it. */
static void take(struct dpdk *d, struct rte_mbuf *m, struct erma_rx_pkt *pkts, unsigned *n)
{
    uint32_t ihl;
    const struct rte_ipv4_hdr *ip = udp4(m, &ihl);
    const struct rte_udp_hdr *udp = ip ? (const void *)((const uint8_t *)ip + ihl) : NULL;
    const uint32_t ip_len = ip ? ntohs(ip->total_length) : 0;
    const uint32_t udp_len = udp ? ntohs(udp->dgram_len) : 0;
    const uint64_t csum = m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK;
    if (!ip || udp->dst_port != d->port || (ip->dst_addr != d->ip) ||
        (ip->fragment_offset & htons(RTE_IPV4_HDR_MF_FLAG | RTE_IPV4_HDR_OFFSET_MASK)) ||
        ip_len < ihl + 8 || RTE_ETHER_HDR_LEN + ip_len > m->data_len || udp_len < 8 ||
        udp_len > ip_len - ihl || udp_len - 8 > d->base.max_pkt ||
        csum == RTE_MBUF_F_RX_IP_CKSUM_BAD ||
        (csum != RTE_MBUF_F_RX_IP_CKSUM_GOOD && rte_raw_cksum(ip, ihl) != 0xffff)) {
        d->base.stats.rx_dropped++;
        rte_pktmbuf_free(m);
        return;
    }
    const struct rte_ether_hdr *eth = rte_pktmbuf_mtod(m, const struct rte_ether_hdr *);
    struct erma_rx_pkt *p = &pkts[(*n)++];
    p->data = (uint8_t *)udp + 8;
    p->len = udp_len - 8;
    make_addr(&p->src, ip->src_addr, udp->src_port, &eth->src_addr);
    const unsigned s = neigh_slot(ip->src_addr); /* learn the sender's MAC */
    d->neigh[s].ip = ip->src_addr;
    d->neigh[s].mac = eth->src_addr;
    d->held[d->nheld++] = m;
    d->base.stats.rx_pkts++;
    d->base.stats.rx_bytes += p->len;
}

static int dpdk_rx_burst(struct erma_transport *tr, struct erma_rx_pkt *pkts, unsigned max)
{
    struct dpdk *d = (struct dpdk *)tr;
    if (d->nheld) {
        rte_pktmbuf_free_bulk(d->held, d->nheld);
        d->nheld = 0;
    }
    if (max > ERMA_MAX_BURST)
        max = ERMA_MAX_BURST;
    unsigned n = 0;
    /* Take the queue before draining the ring, so frames stay in order: only
     * rx_lock holders push to rings. */
    const bool polling = rte_spinlock_trylock(&P.rx_lock);
    struct rte_mbuf *m;
    while (n < max && (m = erma__mpsc_pop(&d->ring)))
        take(d, m, pkts, &n);
    if (polling && n < max) {
        struct rte_mbuf *b[ERMA_MAX_BURST];
        const uint16_t got = rte_eth_rx_burst(P.id, 0, b, ERMA_MAX_BURST);
        for (uint16_t i = 0; i < got; i++) {
            struct dpdk *o = demux(b[i]);
            if (o == d && n < max) {
                take(d, b[i], pkts, &n);
            } else if (!o || erma__mpsc_push(&o->ring, b[i]) != ERMA_OK) {
                if (o == d)
                    d->base.stats.rx_dropped++;
                else
                    P.orphans++;
                rte_pktmbuf_free(b[i]);
            } /* else queued; ours beyond max land at our ring's tail, in order */
        }
    }
    if (polling)
        rte_spinlock_unlock(&P.rx_lock);
    return (int)n;
}

static const struct erma_transport_ops erma_dpdk_ops = {
    .scheme = "dpdk",
    .open = dpdk_open,
    .close = dpdk_close,
    .tx_burst = dpdk_tx_burst,
    .rx_burst = dpdk_rx_burst,
    .resolve = dpdk_resolve,
    .addr_str = dpdk_addr_str,
};

ERMA_TRANSPORT_MODULE(erma_dpdk_ops);
