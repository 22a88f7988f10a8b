#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "bench.h"

static int cmp_u64(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static double pick(const uint64_t *v, size_t n, double q)
{
    size_t i = (size_t)(q * (double)n);
    if (i >= n)
        i = n - 1;
    return (double)v[i] / 1000.0;
}

void bench_lat_from_ns(uint64_t *v, size_t n, struct bench_lat *out)
{
    *out = (struct bench_lat){.samples = n};
    if (n == 0)
        return;
    qsort(v, n, sizeof *v, cmp_u64);
    out->median_us = pick(v, n, 0.5);
    out->p99_us = pick(v, n, 0.99);
    out->p999_us = pick(v, n, 0.999);
}

void bench_pin(int cpu)
{
    if (cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}
