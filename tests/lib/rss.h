/*
 * tests/lib/rss.h - resident memory of a process, from /proc/PID/statm.
 */
#ifndef ERMA_TESTS_RSS_H
#define ERMA_TESTS_RSS_H

#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

/* Bytes resident in process pid (0: this one), or 0 if it cannot be read. */
static inline uint64_t rss_of(int pid)
{
    char path[64];
    if (pid)
        snprintf(path, sizeof path, "/proc/%d/statm", pid);
    else
        snprintf(path, sizeof path, "/proc/self/statm");
    FILE *f = fopen(path, "r");
    unsigned long size = 0, resident = 0;
    const int n = f ? fscanf(f, "%lu %lu", &size, &resident) : 0;
    if (f)
        fclose(f);
    return n == 2 ? (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

#endif
