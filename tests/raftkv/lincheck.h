/*
 * lincheck.h - a linearizability checker for the client history of a
 * key-value store (the tests of apps/raftkv use it).
 *
 * SYNOPSIS
 *   #include "lincheck.h"
 *
 *   struct lincheck_history *lincheck_create(void);
 *   void lincheck_destroy(struct lincheck_history *h);
 *   int lincheck_add(struct lincheck_history *h, const struct lincheck_op *op);
 *   int lincheck_check(const struct lincheck_history *h, uint64_t max_states,
 *                      char *diag, size_t diag_len, struct lincheck_stats *stats);
 *
 * DESCRIPTION
 *   A history is what the clients of a store saw: operations, each with the
 *   time it was invoked and the time its result came back (any clock common
 *   to all clients, in ns). lincheck_check() tells whether some order of the
 *   operations (a linearization) both respects real time (an operation that
 *   completed before another was invoked comes first) and explains every
 *   result by a sequential store. Each key is an independent register,
 *   checked on its own, absent at first:
 *     PUT(key, value)  -> OK                      the key holds value
 *     DEL(key)         -> OK if the key existed, ENOENT if not; then absent
 *     GET(key)         -> the value held, or ENOENT when absent
 *   Values and keys are byte strings, compared byte for byte (the history
 *   keeps its own copy of each distinct one).
 *
 *   An operation whose outcome is unknown (it timed out or failed: it may or
 *   may not have taken effect, at any time after its invoke) has result
 *   LINCHECK_RESULT_UNKNOWN and complete time UINT64_MAX. A PUT or DEL so
 *   recorded may be linearized anywhere after its invoke, or not at all; a
 *   GET so recorded constrains nothing and is dropped. An unknown PUT or DEL
 *   no known result could depend on (no later GET of its value or later DEL
 *   returning OK; no later ENOENT after an unknown DEL) is dropped too.
 *
 *   Two operations whose intervals share an end point (one's invoke equals
 *   the other's complete) count as concurrent.
 *
 *   lincheck_create() returns an empty history, or NULL when out of memory.
 *   lincheck_destroy() frees it and everything it holds (NULL is fine).
 *
 *   lincheck_add() appends a copy of *op (the bytes op->key and op->value
 *   point to are copied; the caller's buffers may go right after), in any
 *   order: the checker sorts by time. It returns LINCHECK_OK, LINCHECK_EINVAL
 *   for a NULL h or op, an unknown kind, a result that kind cannot have
 *   (PUT: OK or UNKNOWN; GET: VALUE, ENOENT or UNKNOWN; DEL: OK, ENOENT or
 *   UNKNOWN), complete < invoke, complete == UINT64_MAX with a known result or
 *   a finite complete with LINCHECK_RESULT_UNKNOWN, or a NULL pointer with a
 *   nonzero length; or LINCHECK_ENOMEM. On an error the history is as before.
 *   An operation's number in diagnostics is the count of operations added
 *   before it (#0 is the first).
 *
 *   lincheck_check() checks each key on its own (linearizability is
 *   compositional: a history is linearizable if and only if each key's is)
 *   with the algorithm of Wing and Gong as Lowe improved it ("Testing for
 *   linearizability", 2016; also the Porcupine checker): the calls and
 *   returns in a doubly linked list sorted by time; a depth-first search
 *   that linearizes, one at a time, an operation whose call precedes every
 *   return left, backtracking at a return no order can pass; and a cache of
 *   the configurations seen (the operations linearized, known and unknown
 *   outcomes alike, as a bitset, and the register's value), so that none
 *   is explored twice. Three rules prune the search and lose no
 *   linearization:
 *     - reads do not branch: when a read that may go next fits (a GET
 *       finding the value, a DEL finding no key), it is the only step
 *       tried: any linearization can take it first (not so a PUT of the
 *       value held: its write may matter after a later DEL);
 *     - an unknown-outcome operation is linearized only just before a known
 *       one that does not fit without it and fits with it: of unknown ones
 *       in a row only the last can matter, and only if the next one needs
 *       its effect;
 *     - of unknown-outcome operations that may go next with one effect (the
 *       same value written, the key deleted, or a value no GET finds), only
 *       the first is tried: any two such could trade places.
 *   So a linearizable history is found in a few configurations per
 *   operation, the search going nearly straight through (one recorded from
 *   raftkv, tests/raftkv/data/raftkv_history.txt: 36,714 operations, 18,161 on
 *   one key, 127 writes of unknown outcome; 70,558 configurations, 0.06 s).
 *   One that is not linearizable makes the search visit every
 *   configuration reachable before the first return no order can pass:
 *   about the orders of the writes concurrent at each point (the same
 *   history with one read made stale: 523,706, 0.4 s).
 *   max_states bounds the configurations explored, over all keys together
 *   (0: LINCHECK_DEFAULT_MAX_STATES); past it the check gives up. Memory
 *   grows by about 48 bytes + a few bitset words per configuration
 *   (LINCHECK_DEFAULT_MAX_STATES: about 100 MB at most). Keys are
 *   checked one after another; the check stops at the first key that is
 *   not linearizable or exhausts the budget.
 *   It returns
 *     LINCHECK_OK               every key is linearizable;
 *     LINCHECK_NONLINEARIZABLE  some key is not;
 *     LINCHECK_TOO_MANY_STATES  the budget ran out before an answer;
 *     LINCHECK_EINVAL           h is NULL, or diag is NULL with diag_len > 0;
 *     LINCHECK_ENOMEM           out of memory.
 *   Unless diag_len is 0, diag receives a NUL-terminated text (cut to fit)
 *   saying, on a failure, which key, how many operations, how far the
 *   best linearization got, and the operations around the first point no
 *   linearization could extend past (the return of an operation no order
 *   could place), that operation marked with '>'; on success, a one-line
 *   summary. If stats is not NULL it receives the counts below, also on
 *   a failure (states counted up to where the check stopped).
 *
 * EXAMPLE
 *   struct lincheck_history *h = lincheck_create();
 *   struct lincheck_op put = {.key = "k", .key_len = 1, .kind = LINCHECK_PUT,
 *       .value = "v", .value_len = 1, .result = LINCHECK_RESULT_OK,
 *       .invoke = 0, .complete = 10};
 *   struct lincheck_op get = {.key = "k", .key_len = 1, .kind = LINCHECK_GET,
 *       .result = LINCHECK_RESULT_ENOENT, .invoke = 20, .complete = 30};
 *   lincheck_add(h, &put);
 *   lincheck_add(h, &get);
 *   char diag[2048];
 *   if (lincheck_check(h, 0, diag, sizeof diag, NULL) != LINCHECK_OK)
 *       puts(diag); // key "k": not linearizable ... the stale GET marked '>'
 *   lincheck_destroy(h);
 */
#ifndef ERMA_TESTS_LINCHECK_H
#define ERMA_TESTS_LINCHECK_H

#include <stddef.h>
#include <stdint.h>

#define LINCHECK_DEFAULT_MAX_STATES 2000000u

/* What lincheck_add() and lincheck_check() return. */
enum lincheck_status {
    LINCHECK_OK = 0,
    LINCHECK_NONLINEARIZABLE = 1,
    LINCHECK_TOO_MANY_STATES = 2,
    LINCHECK_EINVAL = -22,
    LINCHECK_ENOMEM = -12,
};

enum lincheck_kind {
    LINCHECK_PUT = 1,
    LINCHECK_GET,
    LINCHECK_DEL,
};

enum lincheck_result {
    LINCHECK_RESULT_OK = 1, /* PUT done; DEL removed a key that existed */
    LINCHECK_RESULT_VALUE,  /* GET found op->value */
    LINCHECK_RESULT_ENOENT, /* GET or DEL found no key */
    LINCHECK_RESULT_UNKNOWN /* timed out or failed; complete == UINT64_MAX */
};

/* One operation as a client saw it. */
struct lincheck_op {
    const void *key;
    size_t key_len;
    enum lincheck_kind kind;
    const void *value; /* PUT: the value written; GET: the value found
                          (LINCHECK_RESULT_VALUE); else ignored */
    size_t value_len;
    enum lincheck_result result;
    uint64_t invoke;   /* when the client sent it */
    uint64_t complete; /* when its result came back; UINT64_MAX if unknown */
};

struct lincheck_stats {
    size_t keys;        /* distinct keys in the history */
    size_t ops;         /* operations in the history */
    size_t dropped;     /* unknown-outcome ones that constrain nothing */
    size_t max_key_ops; /* the most operations checked for one key */
    uint64_t states;    /* configurations explored, over all keys */
};

struct lincheck_history;

struct lincheck_history *lincheck_create(void);
void lincheck_destroy(struct lincheck_history *h);
int lincheck_add(struct lincheck_history *h, const struct lincheck_op *op);
int lincheck_check(const struct lincheck_history *h, uint64_t max_states, char *diag,
                   size_t diag_len, struct lincheck_stats *stats);

#endif
