/* Receiving from a transport in tests: udp_receive() gathers packets,
 * copying each out, since a packet's data is valid only until the next
 * burst. */
#ifndef ERMA_TESTS_UDP_RX_H
#define ERMA_TESTS_UDP_RX_H

#include <limits.h>
#include <string.h>

#include "erma/clock.h"
#include "erma/sdk/transport_driver.h"

/* Receives up to want packets, asking at most per_call per burst, for at
 * most timeout_ns; out[i].data points into copy[i]. Returns how many came;
 * *largest (may be NULL) is the largest burst returned, UINT_MAX when one
 * failed (which ends the receive). */
static inline unsigned udp_receive(struct erma_transport *tr, struct erma_rx_pkt *out,
                                   uint8_t (*copy)[1472], unsigned want, unsigned per_call,
                                   uint64_t timeout_ns, unsigned *largest)
{
    unsigned got = 0, most = 0;
    const uint64_t end = erma_now_ns() + timeout_ns;
    struct erma_rx_pkt rx[ERMA_MAX_BURST];
    if (per_call > ERMA_MAX_BURST)
        per_call = ERMA_MAX_BURST;
    while (got < want && erma_now_ns() < end) {
        const int n = erma_rx_burst(tr, rx, per_call);
        if (n < 0) {
            most = UINT_MAX;
            break;
        }
        most = (unsigned)n > most ? (unsigned)n : most;
        for (int i = 0; i < n && got < want; i++, got++) {
            out[got] = rx[i];
            memcpy(copy[got], rx[i].data, rx[i].len);
            out[got].data = copy[got];
        }
    }
    if (largest)
        *largest = most;
    return got;
}

#endif
