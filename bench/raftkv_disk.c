/* bench/raftkv's disk (raftkv_disk.h). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench.h"
#include "erma/clock.h"
#include "raftkv_disk.h"

#define SYNC_PROBES 200

double raftkv_fdatasync_us(const char *dir, uint32_t entry_bytes)
{
    char path[600];
    snprintf(path, sizeof path, "%s/raftkv-bench-sync.%d", dir, (int)getpid());
    const int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0 || entry_bytes > 4096 + 64) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    uint64_t t[SYNC_PROBES];
    static const uint8_t entry[4096 + 64];
    unsigned n = 0;
    for (; n < SYNC_PROBES; n++) {
        const uint64_t t0 = erma_now_ns();
        if (write(fd, entry, entry_bytes) != (ssize_t)entry_bytes || fdatasync(fd) != 0)
            break;
        t[n] = erma_now_ns() - t0;
    }
    close(fd);
    unlink(path);
    if (n < SYNC_PROBES)
        return -1;
    struct bench_lat lat;
    bench_lat_from_ns(t, n, &lat);
    return lat.median_us;
}

void raftkv_remove_tree(const char *dir)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "raftkv: could not remove %s\n", dir);
}
