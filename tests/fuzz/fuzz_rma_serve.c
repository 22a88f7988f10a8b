/*
 * fuzz_rma_serve: the one-sided engine's packet paths (rma/engine.c hook_rx,
 * rma/serve.c: the target's request queue, verification, READ responses,
 * solicitations and solicited data; rma/answer.c, complete.c and
 * executor.c: the initiator's answer matching and completions) on the sim
 * fabric.
 *
 * World, rebuilt for every input: host 0 a target with an RMA engine and
 * four regions: R1 8192 B read/write, R2 5096 B read-only, R3 256 B
 * read/write/rekey, RD 512 B registered, exported and deregistered (all
 * malloc'd to their exact size, so ASan sees any access past one); host 1
 * an initiator holding rkeys for them (and one for R1 under the wrong
 * identity); host 2 a stranger. The initiator submits nine standard ops:
 * READ R1, WRITE R1, READ R2, WRITE R2 (EPERM), READ past R2 (EBOUNDS),
 * READ RD (ENOREGION), READ R1 with the wrong key (EAUTH), REKEY R3 and a
 * 5096-byte READ transfer of R2 (two chunks).
 *
 * Input: fuzz.h's format. Flags: bit 0 mutes the initiator's own packets
 * to the target, bit 1 the target's own packets to the initiator (the
 * input then speaks for them), bit 2 leaves out the standard ops, bit 3
 * has the target rekey R1 (500 us grace) first, bit 4 makes the target
 * slow (serve_ns 2 us a request), bit 5 gives the initiator the smallest
 * inbound window (4 KB: READs wait, and may time out locally). Record ctl
 * bits 0-1, the route:
 *   0 initiator -> target   1 stranger -> target
 *   2 target -> initiator   3 stranger -> initiator
 * bit 2 "seal": the harness seals the packet as an authorised peer would
 *   (payload = the record's bytes after the op header, as plaintext):
 *   towards the target under Kd of the named region for the named
 *   identity at the packet's source address (the region's current key, its
 *   cipher), towards the initiator under the initiator's rkey for the
 *   named region;
 * bit 3 "live": init_ctr (the op's name, from the wall clock) and the
 *   deadline are those of the op the initiator last issued from the slot
 *   the op header names, and a SOLICIT's or DATA's solicitation index and
 *   token (random) those of the target's solicitation for that op, so that
 *   captured packets match this run's ops;
 * bits 4-7: 4-microsecond steps of virtual time the world runs first.
 * An empty record sends nothing; on routes 1-3 the engines act instead:
 * 1 the target deregisters R3, 2 the target rekeys R1 (200 us grace),
 * 3 the initiator submits another READ (R1, 64 bytes at 0).
 * After the last record the world runs 20 ms more (op timeouts 2 ms).
 *
 * Checked, besides ASan/UBSan/LSan:
 *   - every op and transfer completes exactly once, with an erma status;
 *   - R2 (read-only) and RD (deregistered) never change; without sealed
 *     records towards the target, R3 never changes and R1 only where the
 *     real WRITE puts its own bytes;
 *   - without records towards the initiator, every OK READ of R2 holds
 *     R2's bytes (and of R1, when nothing sealed reached the target);
 *   - a stranger changes nothing: with only stranger packets, no engine
 *     acting and nothing muted, each op ends with its expected status or
 *     ERMA_ENACK;
 *   - counters: the initiator completes every op it accepted (submitted ==
 *     completed), issues no more than that, the target fails at most what
 *     it served;
 *   - no livelock or time crawl in the event loop (fuzz.h).
 * Seeds (fuzz_write_seeds) are the real packets of the same world in both
 * directions, captured with the fabric's tap, marked "seal" and "live",
 * and floods that fill the target's request queue and solicitation table.
 *
 * The harness uses rma/internal.h for the op header codec and
 * erma__rma_seal_as() (libsodium AEAD, as the engine seals).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "erma/clock.h"
#include "erma/log.h"
#include "erma/rma.h"
#include "erma/rpc.h"
#include "erma/sim.h"
#include "fuzz.h"
#include "rma/internal.h"

enum { TARGET_HOST, INIT_HOST, STRANGER_HOST, HOSTS };
enum { R_INIT_TARGET, R_STRANGER_TARGET, R_TARGET_INIT, R_STRANGER_INIT };
enum { R1, R2, R3, RD, NREGIONS };

#define PORT 31850
#define INIT_URI "sim://fzrma/1:31850"
#define STRANGER_PORT 4242
#define FLAG_MUTE_INIT 1
#define FLAG_MUTE_TARGET 2
#define FLAG_NO_OPS 4
#define FLAG_REKEY 8
#define FLAG_SLOW_TARGET 16
#define FLAG_SMALL_WINDOW 32
#define CTL_SEAL 4
#define CTL_LIVE 8
#define SLOTS 64
#define NSTANDARD 9
#define MAX_OPS 32
#define WRITE_OFF 6000
#define WRITE_LEN 2000
#define FINAL_NS 20000000ull
#define OP_TIMEOUT_NS 2000000ull

static const uint32_t region_len[NREGIONS] = {8192, 5096, 256, 512};
static const unsigned region_perms[NREGIONS] = {
    ERMA_RMA_PERM_READ | ERMA_RMA_PERM_WRITE, ERMA_RMA_PERM_READ,
    ERMA_RMA_PERM_READ | ERMA_RMA_PERM_WRITE | ERMA_RMA_PERM_REKEY, ERMA_RMA_PERM_WRITE};

struct op {
    int id; /* slot or transfer id */
    bool transfer;
    int expect, status, done;
    int region;      /* READs checked against it; -1: not checked */
    uint64_t offset;
    uint32_t len;
    uint8_t *buf;
};

struct captured {
    uint64_t t;
    uint8_t route;
    uint32_t len;
    uint8_t data[FUZZ_MAX_PKT];
};

struct world {
    struct erma_sim *sim;
    struct erma_nexus *nx[2];
    struct erma_endpoint *ep[2];
    struct erma_rpc *rpc[2]; /* on ep[] beside the engines: RPC and SM packets go to them */
    struct erma_rma *target, *init;
    uint8_t *mem[NREGIONS], *orig[NREGIONS];
    uint32_t region[NREGIONS];
    struct erma_rkey rkey[NREGIONS], bad_rkey;
    uint8_t wbuf[WRITE_LEN], new_key[ERMA_RMA_KEY_BYTES];
    struct op ops[MAX_OPS];
    unsigned nops, passes;
    struct { uint64_t init_ctr, deadline; } live[SLOTS]; /* each slot's last issued op */
    struct { uint64_t init_ctr, token; uint32_t sol; } sols[16]; /* the target's last SOLICITs */
    unsigned nsols;
    uint8_t flags;
    bool muting, injecting, sealed_to_target, to_init, r3_gone;
    uint8_t r3_at_dereg[256];
    uint64_t t0; /* virtual time when the world is up */
    struct captured *cap;
    unsigned ncap, cap_max;
};

static struct world W;

/* ---- the fabric's tap: live ops, mutes, capture ---- */

/* Notes the ops the initiator issues (their name, init_ctr, and deadline
 * come from the clocks) and the target's solicitations (random tokens). */
static void note_live(const uint8_t *data, uint32_t len, bool from_init)
{
    if (len < RMA_OVERHEAD)
        return;
    struct rma_ophdr h;
    erma__rma_ophdr_decode(data + ERMA_HDR_SIZE, &h);
    const bool request = h.type == RMA_READ_REQ || h.type == RMA_WRITE_REQ ||
                         h.type == RMA_REKEY_REQ;
    if (from_init && request && h.slot < SLOTS) {
        W.live[h.slot].init_ctr = h.init_ctr;
        W.live[h.slot].deadline = h.deadline;
    } else if (!from_init && h.type == RMA_SOLICIT) {
        const unsigned i = W.nsols++ % 16;
        W.sols[i].init_ctr = h.init_ctr;
        W.sols[i].sol = h.sol;
        W.sols[i].token = h.token;
    }
}

static bool tap(void *ctx, const struct erma_sim_event *ev, uint8_t *data)
{
    (void)ctx;
    if (W.injecting)
        return true;
    if (ev->src_host != STRANGER_HOST)
        note_live(data, ev->len, ev->src_host == INIT_HOST);
    if (W.cap && W.ncap < W.cap_max && ev->len <= FUZZ_MAX_PKT) {
        struct captured *c = &W.cap[W.ncap++];
        c->t = ev->time;
        c->route = ev->src_host == INIT_HOST ? R_INIT_TARGET : R_TARGET_INIT;
        c->len = ev->len;
        memcpy(c->data, data, ev->len);
    }
    if (W.muting && (W.flags & FLAG_MUTE_INIT) && ev->src_host == INIT_HOST)
        return false;
    return !(W.muting && (W.flags & FLAG_MUTE_TARGET) && ev->src_host == TARGET_HOST);
}

/* ---- ops and completions ---- */

static void submit(enum erma_rma_op kind, const struct erma_rkey *k, int region, uint64_t off,
                   uint32_t len, int expect)
{
    struct op *o = &W.ops[W.nops++];
    *o = (struct op){.expect = expect, .region = kind == ERMA_RMA_READ ? region : -1,
                     .offset = off, .len = len};
    void *local = kind == ERMA_RMA_WRITE ? W.wbuf : W.new_key;
    if (kind == ERMA_RMA_READ) {
        o->buf = calloc(1, len);
        local = o->buf;
    }
    const struct erma_rma_cmd c = {.op = kind, .peer = 0, .rkey = *k, .offset = off,
                                   .local = local, .len = len, .grace_ns = 1000000,
                                   .tag = W.nops - 1};
    o->id = erma_rma_submit(W.init, &c);
    FUZZ_CHECK(o->id >= 0, "submit: %d", o->id);
}

static void standard_ops(void)
{
    submit(ERMA_RMA_READ, &W.rkey[R1], R1, 0, 4096, ERMA_OK);
    submit(ERMA_RMA_WRITE, &W.rkey[R1], R1, WRITE_OFF, WRITE_LEN, ERMA_OK);
    submit(ERMA_RMA_READ, &W.rkey[R2], R2, 100, 1000, ERMA_OK);
    submit(ERMA_RMA_WRITE, &W.rkey[R2], R2, 0, 10, ERMA_EPERM);
    submit(ERMA_RMA_READ, &W.rkey[R2], -1, 5000, 100, ERMA_EBOUNDS);
    submit(ERMA_RMA_READ, &W.rkey[RD], -1, 0, 64, ERMA_ENOREGION);
    submit(ERMA_RMA_READ, &W.bad_rkey, -1, 0, 64, ERMA_EAUTH);
    submit(ERMA_RMA_REKEY, &W.rkey[R3], -1, 0, 0, ERMA_OK);
    struct op *o = &W.ops[W.nops++];
    *o = (struct op){.transfer = true, .expect = ERMA_OK, .region = R2, .len = 5096,
                     .buf = calloc(1, 5096)};
    const struct erma_rma_xfer x = {.op = ERMA_RMA_READ, .peer = 0, .rkey = W.rkey[R2],
                                    .local = o->buf, .len = 5096, .max_retries = 1,
                                    .tag = W.nops - 1};
    o->id = erma_rma_transfer(W.init, &x);
    FUZZ_CHECK(o->id >= 0, "transfer: %d", o->id);
}

static int poll_hook(void *ctx)
{
    (void)ctx;
    struct erma_rma_completion c[16];
    const int n = erma_rma_poll(W.init, c, 16);
    FUZZ_CHECK(n >= 0, "poll");
    for (int i = 0; i < n; i++) {
        FUZZ_CHECK(c[i].tag < W.nops, "a completion with tag %llu", (unsigned long long)c[i].tag);
        struct op *o = &W.ops[c[i].tag];
        FUZZ_CHECK(o->id == (int)c[i].id && o->transfer == c[i].transfer,
                   "completion of op %llu names id %u", (unsigned long long)c[i].tag, c[i].id);
        FUZZ_CHECK(!o->done, "op %llu completed twice", (unsigned long long)c[i].tag);
        FUZZ_CHECK(c[i].status <= 0 && c[i].status > ERMA_ERR_LAST, "status %d", c[i].status);
        o->done = 1;
        o->status = c[i].status;
    }
    struct erma_rma_completion none;
    FUZZ_CHECK(erma_rma_poll(W.target, &none, 1) == 0, "the target completed an op");
    return n;
}

/* ---- the world ---- */

static void regions_up(void)
{
    for (int r = 0; r < NREGIONS; r++) {
        W.mem[r] = malloc(region_len[r]);
        W.orig[r] = malloc(region_len[r]);
        FUZZ_CHECK(W.mem[r] && W.orig[r], "malloc");
        for (uint32_t k = 0; k < region_len[r]; k++)
            W.mem[r][k] = W.orig[r][k] = (uint8_t)(k * 7 + r * 31 + 1);
        FUZZ_CHECK(erma_region_register(W.target, W.mem[r], region_len[r], region_perms[r],
                                        &W.region[r]) == ERMA_OK,
                   "register");
        FUZZ_CHECK(erma_region_export_uri(W.target, W.region[r], erma_rma_identity(W.init),
                                          INIT_URI, &W.rkey[r]) == ERMA_OK,
                   "export");
    }
    FUZZ_CHECK(erma_region_export_uri(W.target, W.region[R1], 999, INIT_URI, &W.bad_rkey) ==
                   ERMA_OK,
               "export");
    FUZZ_CHECK(erma_region_deregister(W.target, W.region[RD]) == ERMA_OK, "deregister");
    for (int k = 0; k < WRITE_LEN; k++)
        W.wbuf[k] = (uint8_t)(k * 11 + 5);
    memset(W.new_key, 0x5a, sizeof W.new_key);
}

static void endpoint_up(int h, uint64_t identity, uint8_t flags)
{
    char uri[64];
    snprintf(uri, sizeof uri, "sim://fzrma/%d:%d", h, PORT);
    FUZZ_CHECK(erma_nexus_create(NULL, &W.nx[h]) == ERMA_OK, "nexus");
    FUZZ_CHECK(erma_endpoint_create(uri, 0, NULL, &W.ep[h]) == ERMA_OK, "endpoint");
    const struct erma_rpc_cfg rc = {.seed = 42 + (uint64_t)h};
    FUZZ_CHECK(erma_rpc_create(W.nx[h], W.ep[h], &rc, &W.rpc[h]) == ERMA_OK, "rpc");
    const struct erma_rma_cfg mc = {.identity = identity, .slots = SLOTS,
                                    .op_timeout_ns = OP_TIMEOUT_NS,
                                    .dispatch_timeout_ns = 1000000, .serve_batch = 4,
                                    .nack_threshold = 64, .solicits = 8,
                                    .serve_ns = flags & FLAG_SLOW_TARGET ? 2000 : 0,
                                    .inbound_window = flags & FLAG_SMALL_WINDOW ? 4096 : 0};
    FUZZ_CHECK(erma_rma_create(W.ep[h], &mc, h == TARGET_HOST ? &W.target : &W.init) ==
                   ERMA_OK,
               "rma");
}

static void world_up(uint8_t flags)
{
    W.flags = flags;
    W.nops = W.passes = 0;
    W.muting = W.injecting = W.sealed_to_target = W.to_init = W.r3_gone = false;
    memset(W.live, 0, sizeof W.live);
    W.nsols = 0;
    struct erma_sim_cfg sc;
    erma_sim_cfg_default(&sc);
    sc.hosts = HOSTS;
    FUZZ_CHECK(erma_sim_create("fzrma", &sc, &W.sim) == ERMA_OK, "sim");
    erma_sim_use_clock(W.sim);
    erma_sim_set_tap(W.sim, tap, NULL);
    endpoint_up(TARGET_HOST, 1000, flags);
    endpoint_up(INIT_HOST, 1001, flags);
    regions_up();
    FUZZ_CHECK(erma_rma_peer(W.init, "sim://fzrma/0:31850", 0) == 0, "peer");
    if (flags & FLAG_REKEY)
        FUZZ_CHECK(erma_region_rekey(W.target, W.region[R1], NULL, 500000) == ERMA_OK, "rekey");
    W.muting = true;
    W.t0 = erma_sim_now(W.sim);
    if (!(flags & FLAG_NO_OPS))
        standard_ops();
}

static void world_down(void)
{
    erma_rma_destroy(W.init);
    erma_rma_destroy(W.target);
    for (int h = 0; h < 2; h++) {
        erma_rpc_destroy(W.rpc[h]);
        erma_endpoint_destroy(W.ep[h]);
        erma_nexus_destroy(W.nx[h]);
    }
    erma_sim_destroy(W.sim);
    for (int r = 0; r < NREGIONS; r++) {
        free(W.mem[r]);
        free(W.orig[r]);
    }
    for (unsigned i = 0; i < W.nops; i++)
        free(W.ops[i].buf);
}

/* ---- records ---- */

/* The key an authorised peer at src (host, port) seals this packet with,
 * or NULL: towards the target Kd for the identity and src under the region's
 * current key, else (deregistered) the one the initiator holds; towards the
 * initiator the one it holds. */
static const struct erma_rkey *seal_key(const struct rma_ophdr *h, bool to_target,
                                        uint16_t src_host, uint16_t src_port,
                                        struct erma_rkey *tmp)
{
    char uri[64];
    snprintf(uri, sizeof uri, "sim://fzrma/%u:%u", src_host, src_port);
    if (to_target && erma_region_export_uri(W.target, h->region, h->identity, uri, tmp) == ERMA_OK)
        return tmp;
    for (int r = 0; r < NREGIONS; r++)
        if (W.rkey[r].region == h->region && (!to_target || src_host == INIT_HOST))
            return &W.rkey[r];
    return NULL;
}

/* The "live" bit: this run's name and deadline of the op in the slot the
 * header names, and for SOLICIT and DATA the target's solicitation of it. */
static void make_live(struct rma_ophdr *h)
{
    if (h->slot >= SLOTS || !W.live[h->slot].init_ctr)
        return;
    h->init_ctr = W.live[h->slot].init_ctr;
    h->deadline = W.live[h->slot].deadline;
    if (h->type != RMA_SOLICIT && h->type != RMA_DATA)
        return;
    for (unsigned i = 0; i < 16 && i < W.nsols; i++)
        if (W.sols[i].init_ctr == h->init_ctr) {
            h->sol = W.sols[i].sol;
            h->token = W.sols[i].token;
        }
}

/* Applies the record's "live" and "seal" bits to its packet, sent from
 * src (host, port). */
static void prepare(struct fuzz_rec *r, bool to_target, uint16_t src_host, uint16_t src_port)
{
    if (r->len < RMA_OVERHEAD || !(r->ctl & (CTL_SEAL | CTL_LIVE)))
        return;
    uint8_t *op = r->pkt + ERMA_HDR_SIZE;
    struct rma_ophdr h;
    erma__rma_ophdr_decode(op, &h);
    if (r->ctl & CTL_LIVE) {
        make_live(&h);
        erma__rma_ophdr_encode(&h, op);
    }
    struct erma_rkey tmp;
    const struct erma_rkey *k =
        r->ctl & CTL_SEAL ? seal_key(&h, to_target, src_host, src_port, &tmp) : NULL;
    if (!k)
        return;
    static uint8_t plain[FUZZ_MAX_PKT];
    const uint32_t plen = r->len - RMA_OVERHEAD;
    memcpy(plain, op + RMA_OPHDR, plen);
    erma__rma_seal_as(k->kd, k->cipher, to_target ? 0 : 1, h.nonce_ctr, r->pkt, plain, plen);
    W.sealed_to_target = W.sealed_to_target || to_target;
}

/* An empty record on route 1-3: an engine acts. */
static void engine_action(unsigned route)
{
    if (route == R_STRANGER_TARGET && !W.r3_gone) {
        FUZZ_CHECK(erma_region_deregister(W.target, W.region[R3]) == ERMA_OK, "deregister");
        memcpy(W.r3_at_dereg, W.mem[R3], region_len[R3]);
        W.r3_gone = true;
    } else if (route == R_TARGET_INIT) {
        FUZZ_CHECK(erma_region_rekey(W.target, W.region[R1], NULL, 200000) == ERMA_OK, "rekey");
    } else if (route == R_STRANGER_INIT && W.nops < MAX_OPS) {
        submit(ERMA_RMA_READ, &W.rkey[R1], R1, 0, 64, ERMA_OK);
    }
}

/* Runs the record's wait, then sends its packet or has an engine act.
 * Returns whether the record keeps the input a stranger's only. */
static bool inject(struct fuzz_rec *r)
{
    static const uint16_t src[4] = {INIT_HOST, STRANGER_HOST, TARGET_HOST, STRANGER_HOST};
    static const uint16_t dst[4] = {TARGET_HOST, TARGET_HOST, INIT_HOST, INIT_HOST};
    const unsigned route = r->ctl & 3;
    fuzz_run(W.sim, W.ep, 2, (uint64_t)(r->ctl >> 4) * 4000, poll_hook, NULL, &W.passes);
    if (r->len == 0) {
        if (route != R_INIT_TARGET)
            engine_action(route);
        return route == R_INIT_TARGET;
    }
    const uint16_t sport = src[route] == STRANGER_HOST ? STRANGER_PORT : PORT;
    prepare(r, dst[route] == TARGET_HOST, src[route], sport);
    W.to_init = W.to_init || dst[route] == INIT_HOST;
    W.injecting = true;
    FUZZ_CHECK(erma_sim_inject(W.sim, src[route], sport, dst[route], PORT, r->pkt, r->len) ==
                   ERMA_OK,
               "inject");
    W.injecting = false;
    return src[route] == STRANGER_HOST;
}

/* ---- checks ---- */

static void check_memory(void)
{
    FUZZ_CHECK(memcmp(W.mem[R2], W.orig[R2], region_len[R2]) == 0, "read-only R2 changed");
    FUZZ_CHECK(memcmp(W.mem[RD], W.orig[RD], region_len[RD]) == 0, "deregistered RD changed");
    FUZZ_CHECK(!W.r3_gone || memcmp(W.mem[R3], W.r3_at_dereg, region_len[R3]) == 0,
               "R3 changed after it was deregistered");
    if (W.sealed_to_target)
        return;
    FUZZ_CHECK(memcmp(W.mem[R3], W.orig[R3], region_len[R3]) == 0, "R3 changed unsealed");
    for (uint32_t k = 0; k < region_len[R1]; k++) {
        const bool written = k >= WRITE_OFF && k < WRITE_OFF + WRITE_LEN &&
                             W.mem[R1][k] == W.wbuf[k - WRITE_OFF];
        FUZZ_CHECK(W.mem[R1][k] == W.orig[R1][k] || written, "R1[%u] changed unsealed", k);
    }
}

static void check_ops(bool stranger_only)
{
    for (unsigned i = 0; i < W.nops; i++) {
        const struct op *o = &W.ops[i];
        FUZZ_CHECK(o->done, "op %u never completed", i);
        FUZZ_CHECK(!stranger_only || o->status == o->expect || o->status == ERMA_ENACK,
                   "op %u: a stranger changed its outcome to %d", i, o->status);
        const bool truth = o->region == R2 || (o->region == R1 && !W.sealed_to_target);
        if (o->status == ERMA_OK && truth && !W.to_init)
            FUZZ_CHECK(memcmp(o->buf, W.orig[o->region] + o->offset, o->len) == 0,
                       "op %u: READ data differ from the region", i);
    }
    struct erma_rma_stats is, ts;
    erma_rma_get_stats(W.init, &is);
    erma_rma_get_stats(W.target, &ts);
    FUZZ_CHECK(is.submitted == is.completed, "initiator: %llu submitted, %llu completed",
               (unsigned long long)is.submitted, (unsigned long long)is.completed);
    FUZZ_CHECK(is.issued <= is.submitted, "initiator: issued more than submitted");
    FUZZ_CHECK(ts.auth_failed <= ts.served, "target: more failures than requests served");
    if (getenv("FUZZ_VERBOSE")) {
        for (unsigned i = 0; i < W.nops; i++)
            fprintf(stderr, "  op %u: status %d (expected %d)\n", i, W.ops[i].status,
                    W.ops[i].expect);
        fprintf(stderr, "  target: served %llu nacks %llu auth_failed %llu bad %llu data_rej %llu"
                " expired %llu; initiator: issued %llu unmatched %llu unsealed_bad %llu\n",
                (unsigned long long)ts.served, (unsigned long long)ts.nacks_sent,
                (unsigned long long)ts.auth_failed, (unsigned long long)ts.rx_bad,
                (unsigned long long)ts.data_rejected, (unsigned long long)ts.solicit_expired,
                (unsigned long long)is.issued, (unsigned long long)is.rx_unmatched,
                (unsigned long long)is.rx_unsealed_bad);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool once;
    if (!once) {
        once = true;
        erma_log_set_level(ERMA_LOG_ERROR);
    }
    struct fuzz_in in = {data, size};
    const uint8_t flags = fuzz_flags(&in);
    world_up(flags);
    bool stranger_only = !(flags & (FLAG_MUTE_INIT | FLAG_MUTE_TARGET));
    static struct fuzz_rec r;
    while (fuzz_next(&in, &r))
        stranger_only = inject(&r) && stranger_only;
    fuzz_run(W.sim, W.ep, 2, FINAL_NS, poll_hook, NULL, &W.passes);
    check_memory();
    check_ops(stranger_only);
    world_down();
    return 0;
}

/* ---- seeds: the world's real packets ---- */

/* Adds the captured packets with route keep (-1: all) as route (-1: their
 * own), with ctl bits extra, waits from their send times. */
static void seed_recs(struct fuzz_out *o, int keep, int route, uint8_t extra, int slot)
{
    uint64_t t = W.t0; /* when the harness sends: never before the packet was captured */
    for (unsigned i = 0; i < W.ncap; i++) {
        const struct captured *c = &W.cap[i];
        struct rma_ophdr h = {0};
        if (c->len >= RMA_OVERHEAD)
            erma__rma_ophdr_decode(c->data + ERMA_HDR_SIZE, &h);
        if ((keep >= 0 && c->route != keep) || (slot >= 0 && h.slot != slot))
            continue;
        uint64_t wait = c->t > t ? (c->t - t + 3999) / 4000 : 0;
        t += wait * 4000;
        for (; wait > 15; wait -= 15) /* empty records: waits only */
            fuzz_out_rec(o, 15 << 4, NULL, 0);
        const uint8_t r = (uint8_t)(route >= 0 ? route : c->route);
        fuzz_out_rec(o, (uint8_t)(wait << 4 | extra | r), c->data, c->len);
    }
}

/* The first captured packet of op type type from slot, or NULL. */
static const struct captured *find(uint8_t type, uint16_t slot)
{
    for (unsigned i = 0; i < W.ncap; i++) {
        struct rma_ophdr h;
        erma__rma_ophdr_decode(W.cap[i].data + ERMA_HDR_SIZE, &h);
        if (W.cap[i].len >= RMA_OVERHEAD && h.type == type && h.slot == slot)
            return &W.cap[i];
    }
    return NULL;
}

/* count copies of a captured packet from the stranger, all at once, at a
 * slow target. */
static int seed_flood(const char *dir, const char *name, const struct captured *c, int count)
{
    static struct fuzz_out o;
    fuzz_out_start(&o, FLAG_SLOW_TARGET);
    for (int i = 0; c && i < count; i++)
        fuzz_out_rec(&o, CTL_SEAL | CTL_LIVE | R_STRANGER_TARGET, c->data, c->len);
    return c ? fuzz_save(dir, name, o.buf, o.n) : 0;
}

/* The WRITE (slot 1) and REKEY of R3 (slot 7) requests spoken for the
 * initiator (in the order that gives the REKEY the captured solicitation
 * token), and R3 deregistered between the solicitation and the data. */
static int seed_dereg_rekey(const char *dir)
{
    static struct fuzz_out o;
    const struct captured *write = find(RMA_WRITE_REQ, 1), *req = find(RMA_REKEY_REQ, 7);
    const struct captured *data = find(RMA_DATA, 7);
    if (!write || !req || !data)
        return 0;
    fuzz_out_start(&o, FLAG_MUTE_INIT);
    fuzz_out_rec(&o, CTL_SEAL | CTL_LIVE | R_INIT_TARGET, write->data, write->len);
    fuzz_out_rec(&o, CTL_SEAL | CTL_LIVE | R_INIT_TARGET, req->data, req->len);
    fuzz_out_rec(&o, 3 << 4 | R_STRANGER_TARGET, NULL, 0); /* deregister R3 */
    fuzz_out_rec(&o, CTL_SEAL | CTL_LIVE | R_INIT_TARGET, data->data, data->len);
    return fuzz_save(dir, "dereg_during_rekey", o.buf, o.n);
}

/* The engines acting: READs submitted over time, R1 rekeyed, R3 gone. */
static int seed_actions(const char *dir)
{
    static struct fuzz_out o;
    fuzz_out_start(&o, FLAG_SMALL_WINDOW | FLAG_SLOW_TARGET);
    for (int i = 0; i < 6; i++)
        fuzz_out_rec(&o, (uint8_t)(i << 4 | R_STRANGER_INIT), NULL, 0);
    fuzz_out_rec(&o, 2 << 4 | R_TARGET_INIT, NULL, 0);
    for (int i = 0; i < 4; i++)
        fuzz_out_rec(&o, 15 << 4 | R_STRANGER_INIT, NULL, 0);
    fuzz_out_rec(&o, 1 << 4 | R_STRANGER_TARGET, NULL, 0);
    return fuzz_save(dir, "engine_actions", o.buf, o.n);
}

int fuzz_write_seeds(const char *dir)
{
    static struct fuzz_out o;
    erma_log_set_level(ERMA_LOG_ERROR);
    W.cap_max = 1024;
    W.cap = calloc(W.cap_max, sizeof *W.cap);
    if (!W.cap)
        return -1;
    W.ncap = 0;
    world_up(0);
    fuzz_run(W.sim, W.ep, 2, FINAL_NS, poll_hook, NULL, &W.passes);
    for (unsigned i = 0; i < W.nops; i++)
        FUZZ_CHECK(W.ops[i].done && W.ops[i].status == W.ops[i].expect,
                   "seed op %u: status %d", i, W.ops[i].status);
    world_down();
    const uint8_t both = CTL_SEAL | CTL_LIVE;
    const struct { const char *name; uint8_t flags; int keep, route; uint8_t extra; } full[] = {
        {"conv_initiator", FLAG_MUTE_INIT, R_INIT_TARGET, -1, both},
        {"conv_target", FLAG_MUTE_TARGET, R_TARGET_INIT, -1, both},
        {"conv_both", FLAG_MUTE_INIT | FLAG_MUTE_TARGET, -1, -1, both},
        {"dup_all", 0, -1, -1, both},
        {"stranger", 0, R_INIT_TARGET, R_STRANGER_TARGET, both},
        {"stranger_to_initiator", 0, R_TARGET_INIT, R_STRANGER_INIT, both},
        {"raw_all", 0, -1, -1, 0},
        {"rekeyed_conv_initiator", FLAG_MUTE_INIT | FLAG_REKEY, R_INIT_TARGET, -1, both},
    };
    int n = 0;
    for (size_t k = 0; k < sizeof full / sizeof full[0]; k++) {
        fuzz_out_start(&o, full[k].flags);
        seed_recs(&o, full[k].keep, full[k].route, full[k].extra, -1);
        n += fuzz_save(dir, full[k].name, o.buf, o.n);
    }
    for (int slot = 0; slot < 10; slot++) { /* one op at a time, both directions spoken */
        fuzz_out_start(&o, FLAG_MUTE_INIT | FLAG_MUTE_TARGET);
        seed_recs(&o, -1, -1, both, slot);
        char name[32];
        snprintf(name, sizeof name, "op_slot%d", slot);
        n += fuzz_save(dir, name, o.buf, o.n);
    }
    n += seed_flood(dir, "flood_requests", find(RMA_READ_REQ, 2), 80);
    n += seed_flood(dir, "flood_writes", find(RMA_WRITE_REQ, 1), 12);
    n += seed_dereg_rekey(dir);
    n += seed_actions(dir);
    free(W.cap);
    W.cap = NULL;
    return n;
}
