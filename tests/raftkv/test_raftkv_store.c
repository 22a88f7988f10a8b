/* apps/raftkv's log file (store_log.c): records over preallocated zeros,
 * read back whole after a reopen; a torn tail cut; a truncated log never
 * brings old records back. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "raftkv/store.h"

static char dir[] = "/tmp/erma_raftkv_storeXXXXXX";
static char errmsg[RAFT_ERRMSG_BUF_SIZE];

static void open_store(struct store *st)
{
    raftkv__store_init(st, dir, true, errmsg);
    assert_int_equal(raftkv__store_load(st), 0);
}

/* Appends n entries of term, each 40 bytes naming its index. */
static void append(struct store *st, unsigned n, raft_term term)
{
    for (unsigned i = 0; i < n; i++) {
        char data[40] = {0};
        snprintf(data, sizeof data, "entry %llu of term %llu",
                 (unsigned long long)(st->first + st->nents), (unsigned long long)term);
        struct raft_entry e = {.term = term, .type = RAFT_COMMAND,
                               .buf = {.base = data, .len = sizeof data}};
        assert_int_equal(raftkv__store_append(st, &e, 1), 0);
    }
}

static void assert_entry(const struct store *st, raft_index index, raft_term term)
{
    char want[40] = {0};
    snprintf(want, sizeof want, "entry %llu of term %llu", (unsigned long long)index,
             (unsigned long long)term);
    const struct store_ent *e = &st->ents[index - st->first];
    assert_int_equal(e->term, term);
    assert_int_equal(e->len, sizeof want);
    assert_memory_equal(e->data, want, sizeof want);
}

static off_t log_length(void)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/log", dir);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    return sb.st_size;
}

static int setup(void **state)
{
    (void)state;
    strcpy(dir, "/tmp/erma_raftkv_storeXXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* The file grows by 256 KiB of zeros at a time; a reopen reads every record and
 * keeps the zeros (nothing cut). */
static void test_prealloc_reopen(void **state)
{
    (void)state;
    struct store st;
    open_store(&st);
    append(&st, 100, 1);
    const uint64_t size = st.log_size;
    assert_true(size > 0);
    assert_int_equal(log_length() % (256 << 10), 0);
    assert_true((uint64_t)log_length() >= size);
    raftkv__store_close(&st);
    open_store(&st);
    assert_int_equal(st.nents, 100);
    assert_int_equal(st.log_size, size);
    for (raft_index i = 1; i <= 100; i++)
        assert_entry(&st, i, 1);
    assert_int_equal(log_length() % (256 << 10), 0); /* the zeros stay */
    append(&st, 1, 2);                            /* after the old ones */
    raftkv__store_close(&st);
    open_store(&st);
    assert_int_equal(st.nents, 101);
    assert_entry(&st, 101, 2);
    raftkv__store_close(&st);
}

/* Bytes past the last record that are not zeros (a torn write) are cut. */
static void test_torn_tail_cut(void **state)
{
    (void)state;
    struct store st;
    open_store(&st);
    append(&st, 10, 1);
    const uint64_t size = st.log_size;
    static const uint8_t junk[24] = {0x52, 0x4b, 0x4c, 0x45, 0xff, 0xff}; /* a torn header */
    assert_int_equal(pwrite(st.log_fd, junk, sizeof junk, (off_t)size), (ssize_t)sizeof junk);
    raftkv__store_close(&st);
    open_store(&st);
    assert_int_equal(st.nents, 10);
    assert_int_equal(log_length(), (off_t)size);
    append(&st, 5, 1);
    raftkv__store_close(&st);
    open_store(&st);
    assert_int_equal(st.nents, 15);
    assert_entry(&st, 15, 1);
    raftkv__store_close(&st);
}

/* Entries dropped by a truncation stay dropped when newer, shorter ones
 * take their place (an old record must not follow the new ones). */
static void test_truncate_no_old_records(void **state)
{
    (void)state;
    struct store st;
    open_store(&st);
    append(&st, 10, 1);
    assert_int_equal(raftkv__store_truncate(&st, 6), 0);
    append(&st, 2, 2); /* indexes 6 and 7, the same sizes as the old 6 and 7 */
    raftkv__store_close(&st);
    open_store(&st);
    assert_int_equal(st.nents, 7);
    assert_entry(&st, 5, 1);
    assert_entry(&st, 6, 2);
    assert_entry(&st, 7, 2);
    raftkv__store_close(&st);
}

/* A compaction rewrites the log with zeros after the records it keeps. */
static void test_compact_keeps_zeros(void **state)
{
    (void)state;
    struct store st;
    open_store(&st);
    append(&st, 100, 1);
    assert_int_equal(raftkv__store_compact(&st, 90, 5), 0); /* keeps 86..100 */
    assert_int_equal(st.first, 86);
    assert_int_equal(log_length() % (256 << 10), 0);
    append(&st, 1, 3);
    raftkv__store_close(&st);
    open_store(&st);
    assert_int_equal(st.first, 86);
    assert_int_equal(st.nents, 16);
    assert_entry(&st, 86, 1);
    assert_entry(&st, 101, 3);
    raftkv__store_close(&st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_prealloc_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torn_tail_cut, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncate_no_old_records, setup, teardown),
        cmocka_unit_test_setup_teardown(test_compact_keeps_zeros, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
