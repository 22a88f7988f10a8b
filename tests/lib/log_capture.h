/*
 * tests/lib/log_capture.h - what erma logs (to stderr) while a test runs:
 * log_capture_start() sends stderr to a temporary file, log_capture_end()
 * puts it back and returns what was written (free it). log_count() counts
 * the lines that hold every one of up to two strings.
 */
#ifndef ERMA_TESTS_LOG_CAPTURE_H
#define ERMA_TESTS_LOG_CAPTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct log_capture {
    FILE *file;
    int saved_fd;
};

static inline void log_capture_start(struct log_capture *c)
{
    fflush(stderr);
    c->file = tmpfile();
    c->saved_fd = dup(STDERR_FILENO);
    if (!c->file || c->saved_fd < 0 || dup2(fileno(c->file), STDERR_FILENO) < 0)
        abort();
}

static inline char *log_capture_end(struct log_capture *c)
{
    fflush(stderr);
    dup2(c->saved_fd, STDERR_FILENO);
    close(c->saved_fd);
    fseek(c->file, 0, SEEK_END);
    const long n = ftell(c->file) > 0 ? ftell(c->file) : 0;
    char *text = calloc(1, (size_t)n + 1);
    rewind(c->file);
    if (!text || fread(text, 1, (size_t)n, c->file) != (size_t)n)
        abort();
    fclose(c->file);
    fputs(text, stderr); /* still shown with the test's output */
    return text;
}

/* Lines of text that contain a and, unless it is NULL, b. */
static inline int log_count(const char *text, const char *a, const char *b)
{
    int n = 0;
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        const size_t len = end ? (size_t)(end - line) : strlen(line);
        const char *hit = strstr(line, a);
        const char *hit_b = b ? strstr(line, b) : line;
        n += hit && hit < line + len && hit_b && hit_b < line + len;
        line += len + (end != NULL);
    }
    return n;
}

#endif
