#include "erma/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[] = {"error", "warn", "notice", "info", "debug"};

/* Starts at the most verbose level so that the first message reads ERMA_LOG.
 * Threads log at once: the level is read and written with relaxed atomics
 * (plain moves) and ERMA_LOG is read once, under level_once. */
int erma_log_level = ERMA_LOG_DEBUG;
static pthread_once_t level_once = PTHREAD_ONCE_INIT;

static void init_level(void)
{
    const char *env = getenv("ERMA_LOG");
    int level = ERMA_LOG_WARN;
    for (int i = 0; env && i <= ERMA_LOG_DEBUG; i++)
        if (strcmp(env, names[i]) == 0)
            level = i;
    __atomic_store_n(&erma_log_level, level, __ATOMIC_RELAXED);
}

static void env_not_read(void) {}

void erma_log_set_level(enum erma_log_level level)
{
    pthread_once(&level_once, env_not_read);
    __atomic_store_n(&erma_log_level, (int)level, __ATOMIC_RELAXED);
}

enum erma_log_level erma_log_get_level(void)
{
    pthread_once(&level_once, init_level);
    return (enum erma_log_level)__atomic_load_n(&erma_log_level, __ATOMIC_RELAXED);
}

void erma_log_write(enum erma_log_level level, const char *fmt, ...)
{
    if ((int)level > (int)erma_log_get_level())
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "erma %s: %s\n", names[level], line);
}
