/*
 * tests/lib/check.h - CHECK(cond, fmt, ...) for the plain-C tests (no cmocka):
 * prints "FAIL file:line: message" and counts the failure in `failures`,
 * then carries on, so that one run shows every check that failed. A test's
 * main returns failures ? 1 : 0 (or 77 to skip, saying why).
 */
#ifndef ERMA_TESTS_CHECK_H
#define ERMA_TESTS_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#endif
