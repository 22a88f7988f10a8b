/*
 * erma/transport.h - the transports an endpoint can open, and peer addresses.
 *
 * For applications (included by erma/erma.h). What a transport implements
 * and what raw benchmarks call is in erma/sdk/transport_driver.h.
 *
 * A transport is one TX/RX queue owned by one thread (an endpoint). It is
 * chosen at run time from a URI scheme:
 *   udp://HOST:PORT          kernel UDP (IPv4 or [IPv6]); PORT 0 picks a free one
 *   sim://FABRIC/HOST:PORT   the in-process simulated fabric (see sim.h)
 *   dpdk://IP:PORT?...       DPDK Ethernet/IPv4/UDP frames, where built (dpdk.h)
 *   verbs://[DEV][:PORT]     RDMA UD queue pairs, where built (verbs.h)
 *
 * The dpdk and verbs transports are modules, erma_dpdk.so and
 * erma_verbs.so, loaded the first time a URI names their scheme, from
 * $ERMA_MODULE_DIR if set, else erma/ beside liberma.so, the installed
 * <libdir>/erma, or lib/erma beside the program's folder; when none loads,
 * the open fails with ERMA_ENOTSUP and the log names the module and where
 * it looked.
 *
 * A packet is at most max_pkt bytes (the Ethernet MTU less IP and UDP
 * headers: 1472 for the default MTU of 1500, on every transport, so figures
 * stay comparable).
 */
#ifndef ERMA_TRANSPORT_H
#define ERMA_TRANSPORT_H

#include <stdalign.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "erma/api.h"
#include "erma/errors.h"

ERMA_BEGIN_DECLS

#define ERMA_ADDR_MAX 32
#define ERMA_MAX_BURST 32
#define ERMA_DEFAULT_MTU 1500
#define ERMA_IP_UDP_OVERHEAD 28 /* IPv4 20 + UDP 8 */

/* A peer's transport address; opaque outside its transport. raw is aligned
 * so that transports may keep a socket address in it. */
struct erma_addr {
    alignas(8) uint8_t raw[ERMA_ADDR_MAX];
    uint8_t len;
};

/* True when a and b are the same address (same length and bytes). */
static inline bool erma_addr_eq(const struct erma_addr *a, const struct erma_addr *b)
{
    return a->len == b->len && memcmp(a->raw, b->raw, a->len) == 0;
}

/* True when this build has a transport for scheme ("udp", "dpdk", ...). */
bool erma_transport_available(const char *scheme);

ERMA_END_DECLS

#endif
