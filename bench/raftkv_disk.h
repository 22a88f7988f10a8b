/* bench/raftkv's disk: one sync's cost alone, and the clusters' data
 * removed (raftkv_disk.c). */
#ifndef BENCH_RAFTKV_DISK_H
#define BENCH_RAFTKV_DISK_H

#include <stdint.h>

/* The median of 200 appends of entry_bytes to a file in dir, each made
 * durable by fdatasync alone, as the replicas' log does (O_APPEND): what
 * one sync costs on this disk now, in us. -1 when it fails. */
double raftkv_fdatasync_us(const char *dir, uint32_t entry_bytes);
/* rm -rf dir, saying so on stderr when it fails. */
void raftkv_remove_tree(const char *dir);

#endif
