/*
 * tests/lib/ports.h - fixed UDP ports for tests on loopback.
 *
 * A test that must know its ports in advance takes span ports from
 * test_port_base(span): below the kernel's ephemeral range (32768 up), so
 * that no socket bound to port 0 by another process can hold them, and
 * spread by process id, so tests running side by side rarely meet. The
 * CMake tests (app_hello, app_kvcs, test_install) use fixed ports from 31000.
 */
#ifndef ERMA_TESTS_PORTS_H
#define ERMA_TESTS_PORTS_H

#include <unistd.h>

static inline int test_port_base(int span)
{
    const int slots = (30000 - 10000) / span; /* 31000-32767: the fixed ports of CMake tests */
    return 10000 + (int)(getpid() % slots) * span;
}

#endif
