#include "erma/transport.h"

#include <stdio.h>
#include <string.h>

#include "erma/errors.h"
#include "erma/rand.h"

#ifdef ERMA_HAVE_DPDK
extern const struct erma_transport_ops erma_dpdk_ops;
#endif
#ifdef ERMA_HAVE_VERBS
extern const struct erma_transport_ops erma_verbs_ops;
#endif

static const struct erma_transport_ops *const transports[] = {
    &erma_udp_ops,
    &erma_sim_ops,
#ifdef ERMA_HAVE_DPDK
    &erma_dpdk_ops,
#endif
#ifdef ERMA_HAVE_VERBS
    &erma_verbs_ops,
#endif
};

/* Finds the ops for uri's scheme and points *rest past "scheme://". */
static const struct erma_transport_ops *find(const char *uri, const char **rest)
{
    const char *sep = uri ? strstr(uri, "://") : NULL;
    if (!sep)
        return NULL;
    const size_t n = (size_t)(sep - uri);
    for (size_t i = 0; i < sizeof transports / sizeof transports[0]; i++) {
        if (strlen(transports[i]->scheme) == n && memcmp(uri, transports[i]->scheme, n) == 0) {
            *rest = sep + 3;
            return transports[i];
        }
    }
    return NULL;
}

bool erma_transport_available(const char *scheme)
{
    char uri[64];
    const char *rest;
    snprintf(uri, sizeof uri, "%s://", scheme ? scheme : "");
    return find(uri, &rest) != NULL;
}

int erma_transport_cfg_resolve(const struct erma_transport_cfg *cfg,
                               struct erma_transport_cfg *out)
{
    *out = cfg ? *cfg : (struct erma_transport_cfg){0};
    if (out->mtu == 0)
        out->mtu = ERMA_DEFAULT_MTU;
    if (out->rx_ring == 0)
        out->rx_ring = 4096;
    if (out->mtu < 576 || out->mtu > 9000 || out->rx_ring > (1u << 24) ||
        !(out->rx_drop >= 0 && out->rx_drop <= 1))
        return ERMA_EINVAL;
    return ERMA_OK;
}

int erma_transport_check_tx(const struct erma_transport *tr, const struct erma_tx_pkt *pkts,
                            unsigned n, uint8_t addr_len)
{
    for (unsigned i = 0; i < n; i++) {
        if ((uint64_t)pkts[i].hdr_len + pkts[i].data_len > tr->max_pkt)
            return ERMA_E2BIG;
        if (!pkts[i].dst || pkts[i].dst->len != addr_len)
            return ERMA_EADDR;
    }
    return ERMA_OK;
}

unsigned erma_transport_inject_loss(struct erma_transport *tr, struct erma_rx_pkt *pkts,
                                    unsigned n)
{
    unsigned kept = 0;
    for (unsigned i = 0; i < n; i++) {
        if (erma_splitmix64(&tr->drop_state) < tr->drop_threshold)
            tr->stats.rx_injected_drops++;
        else
            pkts[kept++] = pkts[i];
    }
    return kept;
}

int erma_transport_open(const char *uri, const struct erma_transport_cfg *cfg,
                        struct erma_transport **out)
{
    const char *rest;
    if (!out)
        return ERMA_EINVAL;
    const struct erma_transport_ops *ops = find(uri, &rest);
    if (!ops)
        return uri && strstr(uri, "://") ? ERMA_ENOTSUP : ERMA_EADDR;
    struct erma_transport_cfg c;
    const int rc = erma_transport_cfg_resolve(cfg, &c);
    if (rc != ERMA_OK)
        return rc;
    const int rc2 = ops->open(rest, &c, out);
    if (rc2 == ERMA_OK && c.rx_drop > 0) {
        (*out)->drop_threshold = c.rx_drop >= 1 ? UINT64_MAX : (uint64_t)(c.rx_drop * 0x1p64);
        (*out)->drop_state = c.drop_seed;
    }
    return rc2;
}

void erma_transport_close(struct erma_transport *tr)
{
    if (tr)
        tr->ops->close(tr);
}

int erma_transport_resolve(struct erma_transport *tr, const char *uri, struct erma_addr *out)
{
    const char *rest;
    if (find(uri, &rest) != tr->ops)
        return ERMA_EADDR;
    return tr->ops->resolve(tr, rest, out);
}

int erma_transport_addr_str(const struct erma_transport *tr, const struct erma_addr *addr,
                            char *buf, size_t len)
{
    const int n = snprintf(buf, len, "%s://", tr->ops->scheme);
    if (n < 0 || (size_t)n >= len)
        return ERMA_EINVAL;
    return tr->ops->addr_str(addr, buf + n, len - (size_t)n);
}

int erma_transport_reg_mem(struct erma_transport *tr, void *addr, size_t len)
{
    return tr->ops->reg_mem ? tr->ops->reg_mem(tr, addr, len) : ERMA_OK;
}

int erma_transport_wait(struct erma_transport *tr, uint64_t timeout_ns)
{
    return tr->ops->wait ? tr->ops->wait(tr, timeout_ns) : ERMA_ENOTSUP;
}
