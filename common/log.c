#include "erma/log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[] = {"error", "warn", "notice", "info", "debug"};

/* Starts at the most verbose level so that the first message reads ERMA_LOG. */
int erma_log_level = ERMA_LOG_DEBUG;
static bool level_set;

static void init_level(void)
{
    const char *env = getenv("ERMA_LOG");
    level_set = true;
    erma_log_level = ERMA_LOG_WARN;
    for (int i = 0; env && i <= ERMA_LOG_DEBUG; i++)
        if (strcmp(env, names[i]) == 0)
            erma_log_level = i;
}

void erma_log_set_level(enum erma_log_level level)
{
    level_set = true;
    erma_log_level = (int)level;
}

enum erma_log_level erma_log_get_level(void)
{
    if (!level_set)
        init_level();
    return (enum erma_log_level)erma_log_level;
}

void erma_log_write(enum erma_log_level level, const char *fmt, ...)
{
    if (!level_set)
        init_level();
    if ((int)level > erma_log_level)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "erma %s: %s\n", names[level], line);
}
