/*
 * tests/fuzz/replay_main.c - a main() for a fuzz harness built as a plain
 * program (any compiler, no libFuzzer): feeds every file named on the
 * command line, and every file of every directory named, to
 * LLVMFuzzerTestOneInput() once, in name order. The ctest entries
 * fuzz_replay_<harness> run it on tests/fuzz/corpus/<harness>, so the
 * release and sanitizer builds of scripts/test replay the corpus.
 *
 *   fuzz_replay_<harness> PATH...          replay files and directories
 *   fuzz_replay_<harness> --write-seeds DIR  write the seed corpus into DIR
 *
 * A failing input aborts (FUZZ_CHECK, a sanitizer report) after its name
 * was printed, so the report names it.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            uint8_t *b = realloc(buf, cap *= 2);
            if (!b)
                free(buf);
            buf = b;
        }
    }
    fclose(f);
    if (!buf)
        return -1;
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, n);
    /* an exact-size copy, so that reads past the input trip ASan */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Replays the regular files of dir in name order; returns how many, or -1. */
static int replay_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **bigger = realloc(names, cap * sizeof *names);
            if (!bigger)
                break;
            names = bigger;
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    int done = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && replay_file(path) == 0)
            done++;
        free(names[i]);
    }
    free(names);
    return done;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--write-seeds") == 0) {
        const int n = fuzz_write_seeds(argv[2]);
        printf("%d seeds written to %s\n", n, argv[2]);
        return n > 0 ? 0 : 1;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH... | --write-seeds DIR\n", argv[0]);
        return 2;
    }
    int total = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        const int n = S_ISDIR(st.st_mode) ? replay_dir(argv[i]) : replay_file(argv[i]) == 0;
        if (n < 0)
            return 1;
        total += n;
    }
    printf("replayed %d inputs\n", total);
    return total > 0 ? 0 : 1;
}
