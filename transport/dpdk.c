/* DPDK transport: Ethernet + IPv4 + UDP frames built in userspace (erma/dpdk.h).
 * This file sets up the EAL, the port and endpoints; transport/dpdk_io.c
 * moves the frames. */
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
#include "transport/dpdk_port.h"

#define QUERY_KEYS "vdev", "pci", "port", "lcores", "mem"

static const struct erma_transport_ops erma_dpdk_ops;

struct dpdk_port erma__dpdk = {.mu = PTHREAD_MUTEX_INITIALIZER, .init_rc = 1};
#define P erma__dpdk /* the port, P for short */

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
    } else if (d->neigh[erma__dpdk_neigh_slot(ip)].ip == ip) {
        mac = d->neigh[erma__dpdk_neigh_slot(ip)].mac;
    } else if (!static_neigh(ip, &mac)) {
        ERMA_WARN("dpdk: no MAC address known for %s: add ?mac=, set ERMA_DPDK_NEIGH, or "
                  "receive a packet from it first", rest);
        return ERMA_EADDR;
    }
    erma__dpdk_addr(out, ip, port, &mac);
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
    erma__dpdk_rx_release(d);
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
        const char *co = getenv("ERMA_DPDK_COALESCE");
        d->coalesce = !(co && strcmp(co, "0") == 0);
        erma__dpdk_addr(&d->base.local, ip, d->port, &P.mac);
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

static const struct erma_transport_ops erma_dpdk_ops = {
    .scheme = "dpdk",
    .open = dpdk_open,
    .close = dpdk_close,
    .tx_burst = erma__dpdk_tx_burst,
    .rx_burst = erma__dpdk_rx_burst,
    .resolve = dpdk_resolve,
    .addr_str = dpdk_addr_str,
};

ERMA_TRANSPORT_MODULE(erma_dpdk_ops);
