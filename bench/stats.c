#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "erma/errors.h"

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
    const int err = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    if (err)
        fprintf(stderr, "bench: cannot pin to CPU %d: %s; running unpinned\n", cpu, strerror(err));
}

/* The CPUs the process was given (taskset, a cgroup), before any pinning. */
static cpu_set_t given;
static bool given_known;

__attribute__((constructor)) static void save_given(void)
{
    given_known = sched_getaffinity(0, sizeof given, &given) == 0;
}

void bench_pin_or_free(int cpu)
{
    if (cpu >= 0) {
        bench_pin(cpu);
        return;
    }
    if (given_known && pthread_setaffinity_np(pthread_self(), sizeof given, &given) != 0)
        fprintf(stderr, "bench: cannot run on the process's CPUs again; staying pinned\n");
}

int bench_both_sides(int (*side)(void *ctx, bool peer, struct bench_raw_rate *out), void *ctx,
                     double seconds, int peer_cpu, struct bench_raw_rate *out)
{
    int fd[2];
    if (pipe(fd) != 0)
        return ERMA_ESYS;
    const pid_t pid = fork();
    if (pid == 0) {
        bench_pin(peer_cpu);
        struct bench_raw_rate r = {0};
        side(ctx, true, &r);
        _exit(write(fd[1], &r, sizeof r) == sizeof r ? 0 : 1);
    }
    close(fd[1]);
    int rc = side(ctx, false, out);
    struct bench_raw_rate other = {0};
    if (read(fd[0], &other, sizeof other) != sizeof other && rc == ERMA_OK)
        rc = ERMA_ESYS;
    close(fd[0]);
    waitpid(pid, NULL, 0);
    out->echoes += other.echoes;
    out->lost += other.lost;
    out->mpps = (double)out->echoes / seconds / 1e6;
    return rc == ERMA_OK && out->echoes == 0 ? ERMA_ETIMEDOUT : rc;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, unsigned n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
