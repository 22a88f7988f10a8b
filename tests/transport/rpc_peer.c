/*
 * rpc_peer - one side of an RPC test across processes, for transports that
 * need a process per network namespace (tests/transport/test_dpdk.sh):
 *
 *   rpc_peer server URI          serves echo requests for 200 s at most
 *   rpc_peer client URI SERVER   runs the checks below, exits 0 if all pass
 *   rpc_peer pair URI            both in one process, the server on a thread
 *                                at URI, the client at URI too (for fabrics
 *                                that live in one process: verbs on the mock,
 *                                tests/verbs)
 *
 * The client sends 1 B to 8 MiB requests and responses to dispatch and
 * worker handlers, byte-exact both ways, then 2000 RPCs of random sizes with
 * 16 in flight, each completing once with the right bytes.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "erma/clock.h"
#include "erma/sdk/rand.h"
#include "peer_pair.h"
#include "rpc_util.h"

#define ECHO 1
#define ECHO_WORKER 2

static struct echo_stats st;

/* Pair mode's fabric is two threads of one process: its round trips are
 * thread hand-offs on a shared CPU, a millisecond rather than the
 * transport's hint, and Timely is told so (as rma_peer does for its
 * windows); beside a CPU hog a thread may not run for half a second, and
 * a peer in the same process cannot have failed (30 s, as rma_peer). */
static const struct erma_rpc_cfg pair_cfg = {.base_rtt_ns = 1000000,
                                             .failure_ns = 30000000000ull};

static bool server_stopped(void *ctx)
{
    (void)ctx;
    return peer_pair_done();
}

static int serve(const char *uri)
{
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    struct erma_rpc *rpc;
    const struct erma_nexus_cfg ncfg = {.workers = 1};
    int rc = erma_nexus_create(&ncfg, &nx);
    if (rc == ERMA_OK &&
        (rc = erma_handler_register(nx, ECHO, echo_handler, ERMA_DISPATCH, &st)) == ERMA_OK &&
        (rc = erma_handler_register(nx, ECHO_WORKER, echo_handler, ERMA_WORKER, &st)) == ERMA_OK &&
        (rc = erma_endpoint_create(uri, 0, NULL, &ep)) == ERMA_OK &&
        (rc = erma_rpc_create(nx, ep, peer_pair.on ? &pair_cfg : NULL, &rpc)) != ERMA_OK)
        erma_endpoint_destroy(ep);
    if (rc != ERMA_OK) {
        fprintf(stderr, "server: %s\n", erma_strerror(rc));
        return rc == ERMA_ENOTSUP ? 77 : 1;
    }
    peer_pair_up(ep);
    erma_endpoint_run_until(ep, server_stopped, NULL, 200000000000ull);
    erma_rpc_destroy(rpc);
    erma_endpoint_destroy(ep);
    erma_nexus_destroy(nx);
    return 0;
}

struct call {
    struct erma_msgbuf req, resp;
    uint32_t id, resp_size;
    int done, status;
};

static unsigned done_total, wrong;

/* A request shorter than REQ_HDR comes back xor 0x5a (echo_handler). */
static int check_tiny(const struct erma_msgbuf *resp, uint32_t size)
{
    if (resp->size != size)
        return -1;
    for (uint32_t k = 0; k < size; k++)
        if (resp->data[k] != (tiny_byte(k) ^ 0x5a))
            return -1;
    return 0;
}
static void (*next_call)(struct erma_rpc *rpc, struct call *c); /* reissues, or NULL */

static void on_done(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    struct call *c = tag;
    c->done++;
    c->status = status;
    done_total++;
    if (status != ERMA_OK || (c->req.size >= REQ_HDR ? check_resp(resp, c->id, c->resp_size)
                                                      : check_tiny(resp, c->req.size)))
        wrong++;
    if (next_call)
        next_call(rpc, c);
}

/* Runs until want calls completed: ERMA_ETIMEDOUT after 30 s without a
 * completion or 150 s in all (a sanitized build beside a CPU hog once made
 * af_xdp complete 26 calls a second, against thousands as a rule). */
static int wait_all(struct erma_endpoint *ep, unsigned want)
{
    const uint64_t start = erma_now_ns(), stall = 30000000000ull, most = 150000000000ull;
    uint64_t last = start;
    for (unsigned seen = done_total; done_total < want; erma_endpoint_run_once(ep)) {
        const uint64_t now = erma_now_ns();
        if (done_total != seen) {
            seen = done_total;
            last = now;
        }
        if (now - last > stall || now - start > most)
            return ERMA_ETIMEDOUT;
    }
    return ERMA_OK;
}

/* One request of req_size bytes asking for resp_size bytes. */
static int call(struct erma_rpc *rpc, int sess, uint8_t type, struct call *c, uint32_t id,
                uint32_t req_size, uint32_t resp_size)
{
    erma_msgbuf_free(rpc, &c->req);
    int rc = erma_msgbuf_alloc(rpc, req_size, &c->req);
    if (rc == ERMA_OK && !c->resp.mem)
        rc = erma_msgbuf_alloc(rpc, 64, &c->resp);
    if (rc != ERMA_OK)
        return rc;
    c->id = id;
    c->resp_size = resp_size;
    c->done = 0;
    if (req_size < REQ_HDR)
        for (uint32_t k = 0; k < req_size; k++)
            c->req.data[k] = tiny_byte(k);
    else
        fill_req(&c->req, id, resp_size);
    return erma_rpc_call(rpc, sess, type, &c->req, &c->resp, on_done, c);
}

#define RANDOM_CALLS 2000
static struct erma_rand rng;
static uint32_t next_id;
static int the_session;

/* The continuation's follow-up: the next random RPC in the same call slot. */
static void random_call(struct erma_rpc *rpc, struct call *c)
{
    if (next_id >= RANDOM_CALLS)
        return;
    const uint32_t id = next_id++;
    if (call(rpc, the_session, id % 5 ? ECHO : ECHO_WORKER, c, id,
             REQ_HDR + (uint32_t)erma_rand_below(&rng, 5000),
             (uint32_t)erma_rand_below(&rng, 5000)) != ERMA_OK)
        wrong++;
}

static int client(const char *uri, const char *server)
{
    struct erma_nexus *nx;
    struct erma_endpoint *ep = NULL;
    struct erma_rpc *rpc;
    const struct erma_rpc_cfg *rcfg = peer_pair.on ? &pair_cfg : NULL;
    int rc = erma_nexus_create(NULL, &nx);
    if (rc == ERMA_OK && ((rc = erma_endpoint_create(uri, 0, NULL, &ep)) != ERMA_OK ||
                          (rc = erma_rpc_create(nx, ep, rcfg, &rpc)) != ERMA_OK)) {
        erma_endpoint_destroy(ep);
        erma_nexus_destroy(nx);
    }
    if (rc != ERMA_OK) {
        fprintf(stderr, "client: %s\n", erma_strerror(rc));
        return rc == ERMA_ENOTSUP ? 77 : 1;
    }
    const int sess = erma_session_create(rpc, server, 0);
    static struct call calls[16];
    unsigned want = 0;
    rc = sess < 0 ? sess : ERMA_OK;
    const uint32_t sizes[] = {1, REQ_HDR, 1000, 1457, 70000, 1 << 20, 8u << 20};
    for (size_t i = 0; rc == ERMA_OK && i < sizeof sizes / sizeof *sizes; i++)
        for (uint8_t type = ECHO; rc == ERMA_OK && type <= ECHO_WORKER; type++) {
            rc = call(rpc, sess, type, &calls[0], (uint32_t)i, sizes[i], sizes[i]);
            if (rc == ERMA_OK)
                rc = wait_all(ep, ++want);
        }
    printf("sizes 1 B .. 8 MiB, dispatch and worker: %s, %u wrong\n", erma_strerror(rc), wrong);
    erma_rand_seed(&rng, 1);
    the_session = sess;
    next_call = random_call;
    for (int k = 0; rc == ERMA_OK && k < 16; k++) /* 16 in flight, each reissued when done */
        random_call(rpc, &calls[k]);
    if (rc == ERMA_OK)
        rc = wait_all(ep, want + RANDOM_CALLS);
    printf("%d random RPCs, 16 in flight: %s, %u completed, %u wrong\n", RANDOM_CALLS,
           erma_strerror(rc), done_total - want, wrong);
    erma_rpc_destroy(rpc);
    erma_endpoint_destroy(ep);
    erma_nexus_destroy(nx);
    return rc == ERMA_OK && wrong == 0 ? 0 : 1;
}

/* The server on a thread, the client here. */
static int pair(const char *uri)
{
    const int rc = peer_pair_run(uri, serve, client);
    return rc >= 0 ? rc : peer_pair.serve_rc ? peer_pair.serve_rc : 1;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && strcmp(argv[1], "server") == 0)
        return serve(argv[2]);
    if (argc == 4 && strcmp(argv[1], "client") == 0)
        return client(argv[2], argv[3]);
    if (argc == 3 && strcmp(argv[1], "pair") == 0)
        return pair(argv[2]);
    fprintf(stderr, "usage: rpc_peer server URI | rpc_peer client URI SERVER_URI | "
                    "rpc_peer pair URI\n");
    return 2;
}
