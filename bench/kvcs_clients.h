/*
 * bench/kvcs_clients.h - bench/kvcs's client threads (kvcs_clients.c):
 * each with its own kvcs client (apps/kvcs/kvcs.h: one per thread), they
 * connect, warm their location caches and GET together, phase by phase;
 * thread 0's client loads the keys.
 */
#ifndef ERMA_BENCH_KVCS_CLIENTS_H
#define ERMA_BENCH_KVCS_CLIENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bench.h"
#include "kvcs/kvcs.h"

#define BIN_NS 10000000ull /* the failure run's timeline: 10 ms bins */
#define MAX_BINS 4096

struct opts {
    unsigned servers, replicas, keys, value;
    double seconds, kill_at, load, idle_wait_us, attempt_ms, slow_ms;
    unsigned rounds;
    bool psk, no_loc_cache, closed, no_hedge;
    unsigned server_threads; /* each server's endpoint threads (kvcs cfg.threads) */
    unsigned client_threads; /* client threads here, each with its own kvcs client */
    int client_cpu[BENCH_MAX_THREADS]; /* client thread t's CPU, -1: unpinned */
    int only; /* sweep: 0 both, else KVCS_READ + 1 or KVCS_RPC + 1 */
    const char *loads, *role, *uri, *server_list;
    int base_port;
    enum kvcs_method method;
};

/* One client thread's client and counts; thread t's is runs[t], and
 * runs[0] also gets the others' counts once a phase ends (clients_phase). */
struct run {
    const struct opts *o;
    struct kvcs_client *c;
    unsigned t;    /* the thread's number */
    char uri[128]; /* its client's URI */
    uint64_t *lat, nlat, cap;
    uint64_t failed, wrong, done, started;
    uint64_t start_ns;
    uint32_t last_fail_key; /* for the message naming the failures */
    int last_fail;
    /* loading: the keys of a pass, and those to PUT again */
    uint32_t *list, *again, nagain;
    int put_error; /* of the last PUT stored nowhere */
    /* timeline: per bin */
    uint64_t *bin_lat[MAX_BINS];
    uint32_t bin_n[MAX_BINS], bin_cap[MAX_BINS];
    uint32_t bin_failed[MAX_BINS];
    bool timeline;
    enum kvcs_method meth; /* the phase's */
    const pid_t *pids; /* the forked servers (none: 0), for their CPU time */
};

/* What the client threads do together (clients_phase): connect their
 * clients, warm their location caches, or GETs for a row or failure run. */
enum phase_kind { PHASE_CONNECT, PHASE_WARM, PHASE_GETS };
struct phase {
    struct run *runs;
    enum phase_kind kind;
    const struct kvcs_client_cfg *cc; /* connect: the clients' config, but for uri */
    enum kvcs_method meth;
    double load, seconds, kill_at; /* load: all threads' (0: closed loop) */
    pid_t victim;                  /* thread 0 kills it at kill_at (0: none) */
    bool timeline;
};

/* Loads every key at o->value bytes by thread 0's client (r: runs[0]) in
 * up to 5 passes, the others' loops kept running. ERMA_OK, ERMA_ETIMEDOUT
 * (PUTs unanswered after 120 s) or the error of keys stored nowhere. */
int clients_load_keys(struct run *r);
/* Runs ph on every client thread (started together); a GET phase's counts,
 * latencies and bins end up in runs[0]. ERMA_OK or the first thread's
 * error (bench_run_threads). */
int clients_phase(struct phase *ph);
/* The sums of failovers, skipped, hedges and one_read over the clients of
 * runs[0..o->client_threads). */
void clients_stats(const struct run *runs, struct kvcs_client_stats *out);
/* Names the GETs of a phase that failed or were never answered (stderr). */
void clients_report_failed(const struct run *r, const char *phase);
/* Client thread t's URI in out: uri's port plus t (port 0 stays 0: any
 * free port; thread 0's is uri). False when uri has no port to add t to. */
bool clients_uri(const char *uri, unsigned t, char *out, size_t n);
/* The client threads' runs, no client connected yet (clients_phase with
 * PHASE_CONNECT does), or NULL (no memory). */
struct run *clients_new(const struct opts *o, const char *uri, const pid_t *pids);
/* Destroys the clients of runs[0..n) and frees them; NULL is ignored. */
void clients_free(struct run *runs, unsigned n);

#endif
