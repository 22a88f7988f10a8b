/*
 * tests/fuzz/fuzz.h - shared by the fuzz harnesses (fuzz_*.c) and the corpus
 * replay program (replay_main.c).
 *
 * Each harness defines LLVMFuzzerTestOneInput() (libFuzzer's entry point)
 * and fuzz_write_seeds(dir), which writes its seed corpus from real traffic
 * (`fuzz_replay_<name> --write-seeds DIR`).
 *
 * Packet inputs (rpc_rx, rma_serve) are one flags byte, then records:
 *   [ctl u8][len u16 little-endian][len bytes: one packet]
 * ctl bits 0-1 pick the route (who sends, who receives: see each harness),
 * bits 2-7 are the harness's own (a wait before the packet, sealing...).
 * A record cut short by the end of the input takes what is left; a packet
 * longer than the largest the fabric carries is cut to that size; an empty
 * record sends nothing (its wait still counts).
 *
 * FUZZ_CHECK() is the harnesses' assertion: unlike assert() it stays in
 * release builds (NDEBUG) and aborts, which libFuzzer and ctest both report.
 */
#ifndef ERMA_TESTS_FUZZ_H
#define ERMA_TESTS_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "erma/rpc.h"
#include "erma/sim.h"
#include "endpoint/sim_run.h"
#include "erma/sdk/wire.h"

#define FUZZ_CHECK(cond, ...)                                                         \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "fuzz check failed at %s:%d: %s: ", __FILE__, __LINE__,   \
                    #cond);                                                           \
            fprintf(stderr, __VA_ARGS__);                                             \
            fputc('\n', stderr);                                                      \
            abort();                                                                  \
        }                                                                             \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Writes the harness's seed corpus into dir (which must exist); returns the
 * number of files written, or -1. */
int fuzz_write_seeds(const char *dir);

/* ---- reading inputs ---- */

#define FUZZ_MAX_PKT 1472 /* the fabric's largest packet at the default MTU */

struct fuzz_in {
    const uint8_t *p;
    size_t n;
};

struct fuzz_rec {
    uint8_t ctl;
    uint32_t len;
    uint8_t pkt[FUZZ_MAX_PKT];
};

/* The input's flags byte (0 for an empty input). */
static inline uint8_t fuzz_flags(struct fuzz_in *in)
{
    if (in->n == 0)
        return 0;
    in->n--;
    return *in->p++;
}

/* The next record, copied into r (packets are changed before sending); false
 * at the end of the input. */
static inline bool fuzz_next(struct fuzz_in *in, struct fuzz_rec *r)
{
    if (in->n == 0)
        return false;
    r->ctl = in->p[0];
    size_t len = in->n >= 3 ? (size_t)in->p[1] | (size_t)in->p[2] << 8 : 0;
    const size_t head = in->n >= 3 ? 3 : in->n;
    in->p += head;
    in->n -= head;
    len = len < in->n ? len : in->n;
    r->len = (uint32_t)(len < FUZZ_MAX_PKT ? len : FUZZ_MAX_PKT);
    memcpy(r->pkt, in->p, r->len);
    in->p += len;
    in->n -= len;
    return true;
}

/* ---- writing seeds ---- */

struct fuzz_out {
    uint8_t buf[1 << 16];
    size_t n;
};

static inline void fuzz_out_start(struct fuzz_out *o, uint8_t flags)
{
    o->buf[0] = flags;
    o->n = 1;
}

static inline void fuzz_out_rec(struct fuzz_out *o, uint8_t ctl, const void *pkt, uint32_t len)
{
    if (o->n + 3 + len > sizeof o->buf)
        return;
    o->buf[o->n] = ctl;
    erma_put_le(o->buf + o->n + 1, len, 2);
    if (len)
        memcpy(o->buf + o->n + 3, pkt, len);
    o->n += 3 + len;
}

/* Writes data to dir/name; returns 1 when written, 0 otherwise. */
static inline int fuzz_save(const char *dir, const char *name, const void *data, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    const size_t put = fwrite(data, 1, len, f);
    return fclose(f) == 0 && put == len;
}

/* ---- running a sim world ---- */

/* Passes at one virtual instant before the run counts as a livelock (an
 * event loop that always has work and never lets time move), and passes of
 * a whole run (time crawling forward a nanosecond at a time). */
#define FUZZ_STUCK_PASSES 20000u
#define FUZZ_MAX_PASSES 400000u

/* Work a harness does between passes (answers, polls); returns work done. */
typedef int (*fuzz_pass_fn)(void *ctx);

/* Steps the endpoints round-robin with the driver erma_sim_run() runs on
 * (endpoint/sim_run.h) for ns of virtual time; after every pass calls hook
 * (may be NULL), and moves time to the next packet or timer event when
 * nobody had work. *passes counts the passes of the whole input. */
static inline void fuzz_run(struct erma_sim *sim, struct erma_endpoint **eps, unsigned n,
                            uint64_t ns, fuzz_pass_fn hook, void *ctx, unsigned *passes)
{
    struct erma__sim_run r = {.pass = hook, .ctx = ctx, .max_passes = FUZZ_MAX_PASSES,
                              .max_busy = FUZZ_STUCK_PASSES, .passes = *passes};
    const int rc = erma__sim_drive(sim, eps, n, ns, &r);
    *passes = r.passes;
    FUZZ_CHECK(r.passes < FUZZ_MAX_PASSES, "time crawls: %u passes, at %llu ns", r.passes,
               (unsigned long long)erma_sim_now(sim));
    FUZZ_CHECK(r.busy < FUZZ_STUCK_PASSES, "livelock: %u busy passes at %llu ns", r.busy,
               (unsigned long long)erma_sim_now(sim));
    FUZZ_CHECK(rc == ERMA_ETIMEDOUT, "the sim driver returned %d", rc);
}

/* A small FNV-1a hash, to remember buffer contents. */
static inline uint64_t fuzz_hash(const void *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
    return h;
}

#endif
