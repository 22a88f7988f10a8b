/*
 * erma/erma.h - the whole application API of erma in one include:
 * endpoints and their event loop (endpoint.h), RPCs (rpc.h), one-sided
 * operations on registered memory (rma.h), their keys handed over by name
 * (keys.h), transports and peer addresses
 * (transport.h), error codes (errors.h), the clock (clock.h), logging
 * (log.h) and the version (version.h). Link with `pkg-config --libs erma`
 * or CMake's erma::erma.
 *
 * Headers for other uses are included on their own: transport_driver.h and
 * wire.h (what a transport implements and the wire header, for transport
 * writers and raw benchmarks), sim.h (the simulated fabric), cc.h
 * (congestion-control state machines), pool.h and rand.h (buffers and
 * random numbers), dpdk.h and verbs.h (those transports' URIs and
 * behaviour).
 */
#ifndef ERMA_ERMA_H
#define ERMA_ERMA_H

#include "erma/clock.h"
#include "erma/endpoint.h"
#include "erma/errors.h"
#include "erma/keys.h"
#include "erma/log.h"
#include "erma/rma.h"
#include "erma/rpc.h"
#include "erma/transport.h"
#include "erma/version.h"

#endif
