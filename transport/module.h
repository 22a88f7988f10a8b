/*
 * transport/module.h - the entry point of a transport module (internal).
 *
 * The dpdk and verbs transports are shared objects, erma_SCHEME.so, that
 * erma_transport_open() loads the first time a URI names their scheme, so
 * that liberma needs neither DPDK nor rdma-core at run time. A module
 * exports one symbol, erma_transport_module; everything else in it is
 * local (it carries its own copies of the few core helpers it uses: the
 * log and the rings). The loader takes a module only from the same erma
 * version and ABI.
 */
#ifndef ERMA_TRANSPORT_MODULE_H
#define ERMA_TRANSPORT_MODULE_H

#include <stdint.h>

#include "erma/log.h"
#include "erma/sdk/transport_driver.h"

#define ERMA_MODULE_ABI 2 /* 2: erma_rx_pkt.rx_ns */
#define ERMA_MODULE_SYMBOL "erma_transport_module"

struct erma_transport_module {
    uint32_t abi;                             /* ERMA_MODULE_ABI */
    const char *version;                      /* ERMA_VERSION it was built with */
    const struct erma_transport_ops *ops;
    void (*set_log_level)(enum erma_log_level); /* the loading process's level */
};

/* Defines the entry of the module whose transport is ops. */
#define ERMA_TRANSPORT_MODULE(ops_)                                              \
    __attribute__((visibility("default")))                                    \
    const struct erma_transport_module erma_transport_module = {               \
        .abi = ERMA_MODULE_ABI, .version = ERMA_VERSION, .ops = &(ops_),       \
        .set_log_level = erma_log_set_level}

#endif
