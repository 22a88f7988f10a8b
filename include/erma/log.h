/*
 * erma/log.h - a small leveled log to stderr.
 *
 * For applications (included by erma/erma.h) and every layer.
 *
 * The level comes from the ERMA_LOG environment variable (error, warn,
 * notice, info, debug; default warn: errors and warnings only) at the
 * first message, or from erma_log_set_level(). Messages below the level
 * cost one comparison. An error names what failed: the URI, the scheme or
 * module, the phase.
 */
#ifndef ERMA_LOG_H
#define ERMA_LOG_H

#include "erma/api.h"

ERMA_BEGIN_DECLS

enum erma_log_level {
    ERMA_LOG_ERROR,
    ERMA_LOG_WARN,
    ERMA_LOG_NOTICE,
    ERMA_LOG_INFO,
    ERMA_LOG_DEBUG
};

/* What ERMA_LOG() compares with: the most verbose level until ERMA_LOG is
 * read (so that the first message reads it), then the level in force.
 * erma_log_get_level() tells the level in force. Threads read it with a
 * relaxed atomic load (the macro's), as erma writes it. */
extern int erma_log_level;

/* Sets the level; ERMA_LOG is not read after that. Returns nothing. */
void erma_log_set_level(enum erma_log_level level);
/* Returns the level in force (ERMA_LOG read if nothing set it yet). */
enum erma_log_level erma_log_get_level(void);
/* Writes one line "erma LEVEL: message" (printf-style fmt) to stderr if
 * level is within the level in force. Use the macros below, which skip
 * the call below the level. Returns nothing. */
void erma_log_write(enum erma_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define ERMA_LOG(lvl, ...)                                                     \
    do {                                                                       \
        if ((int)(lvl) <= __atomic_load_n(&erma_log_level, __ATOMIC_RELAXED)) \
            erma_log_write(lvl, __VA_ARGS__);                                  \
    } while (0)
#define ERMA_ERROR(...) ERMA_LOG(ERMA_LOG_ERROR, __VA_ARGS__)
#define ERMA_WARN(...) ERMA_LOG(ERMA_LOG_WARN, __VA_ARGS__)
#define ERMA_NOTICE(...) ERMA_LOG(ERMA_LOG_NOTICE, __VA_ARGS__)
#define ERMA_INFO(...) ERMA_LOG(ERMA_LOG_INFO, __VA_ARGS__)
#define ERMA_DEBUG(...) ERMA_LOG(ERMA_LOG_DEBUG, __VA_ARGS__)

ERMA_END_DECLS

#endif
