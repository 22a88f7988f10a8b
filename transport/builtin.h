/*
 * transport/builtin.h - the transports compiled into liberma (internal):
 * udp:// (udp.c) and sim:// (sim.c), which transport.c finds by scheme.
 * The dpdk and verbs transports are modules instead (module.h).
 */
#ifndef ERMA_TRANSPORT_BUILTIN_H
#define ERMA_TRANSPORT_BUILTIN_H

#include "erma/sdk/transport_driver.h"

extern const struct erma_transport_ops erma__udp_ops;
extern const struct erma_transport_ops erma__sim_ops;

#endif
