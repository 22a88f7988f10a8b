/*
 * erma/erma.h - the whole application API of erma in one include:
 * RPCs (rpc.h), one-sided operations on registered memory (rma.h), error
 * codes (errors.h), the clock (clock.h), logging (log.h) and the version
 * (version.h). Link with `pkg-config --libs erma` or CMake's erma::erma.
 *
 * Headers for other uses are included on their own: transport.h and wire.h
 * (packet I/O and the wire header, for transport writers and raw
 * benchmarks), sim.h (the simulated fabric), cc.h (congestion-control state
 * machines), pool.h and rand.h (buffers and random numbers), dpdk.h and
 * verbs.h (those transports' URIs and behaviour).
 */
#ifndef ERMA_ERMA_H
#define ERMA_ERMA_H

#include "erma/clock.h"
#include "erma/errors.h"
#include "erma/log.h"
#include "erma/rma.h"
#include "erma/rpc.h"
#include "erma/version.h"

#endif
