/* raftkv's event loop, shared by the server and the client (raftkv.h,
 * "Event loop"): erma_endpoint_run_until() with poll(obj) in its done()
 * hook, back here whenever a poll did work (what it queued leaves with the
 * next pass, not after an idle sleep), each call bounded by
 * next_timer(obj), so a sleeping endpoint still ticks on time. Runs until
 * stop(ctx) (may be NULL): ERMA_OK, or ERMA_ETIMEDOUT after timeout_ns. */
#ifndef RAFTKV_LOOP_H
#define RAFTKV_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include "erma/endpoint.h"

int raftkv__run(struct erma_endpoint *ep, int (*poll)(void *obj),
                uint64_t (*next_timer)(const void *obj), void *obj, bool (*stop)(void *ctx),
                void *ctx, uint64_t timeout_ns);

#endif
