/*
 * reconnect - a program outside erma's tree, written from the installed
 * headers only (erma/rpc.h, Session lifecycle), built against an
 * installed erma by test_install.sh.
 *
 *   reconnect HOST PORT [psk]
 *
 * Forks a server on udp://HOST:PORT, then makes 10,000 checked RPCs to it,
 * 16 at a time, on one session with cfg.reconnect = ERMA_RECONNECT_QUEUE,
 * killing the server (SIGKILL) and starting a new one halfway. A call the
 * dead server may have run fails with ERMA_EPEERFAILED and is made again
 * under a new id. Exits 0 when every answer was right, the session number
 * worked on (ERMA_SM_RECONNECTING, then ERMA_SM_RECONNECTED) and no id ran
 * twice (the servers count runs per id in memory shared with this
 * process). With "psk" both ends hold a pre-shared key.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, clock_gettime under -std=c11 */
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <erma/erma.h>

#define ANSWER 1
#define GOAL 10000
#define MAX_IDS (2 * GOAL)
#define WINDOW 16

static const uint8_t key[ERMA_PSK_BYTES] = "reconnect test key, 32 bytes...";
static _Atomic uint32_t *runs; /* per id, shared with the servers */

static uint64_t answer_of(uint64_t id)
{
    return id * 0x9e3779b97f4a7c15ull ^ 0x5eed;
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void on_request(struct erma_req *req, void *ctx)
{
    (void)ctx;
    uint64_t id = 0;
    struct erma_msgbuf *resp = erma_req_resp_buf(req);
    memcpy(&id, erma_req_data(req), sizeof id);
    if (id < MAX_IDS)
        atomic_fetch_add(&runs[id], 1);
    const uint64_t a = answer_of(id);
    memcpy(resp->data, &a, sizeof a);
    erma_msgbuf_resize(resp, sizeof a);
    erma_req_respond(req, resp);
}

/* The server process: serves until its parent goes. */
static void serve(const char *uri, bool psk, pid_t parent)
{
    struct erma_nexus_cfg ncfg = {0};
    ncfg.psk = psk ? key : NULL;
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    struct erma_rpc *rpc;
    if (erma_nexus_create(&ncfg, &nx) != ERMA_OK ||
        erma_handler_register(nx, ANSWER, on_request, ERMA_DISPATCH, NULL) != ERMA_OK ||
        erma_endpoint_create(uri, 0, NULL, &ep) != ERMA_OK ||
        erma_rpc_create(nx, ep, NULL, &rpc) != ERMA_OK)
        _exit(2);
    while (getppid() == parent)
        erma_endpoint_run(ep, 10000000);
    _exit(0);
}

static pid_t start_server(const char *uri, bool psk)
{
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0)
        serve(uri, psk, parent);
    return pid;
}

struct call {
    uint64_t id;
    struct erma_msgbuf req, resp;
};

struct client {
    struct erma_rpc *rpc;
    int session;
    uint64_t next_id;
    unsigned ok, wrong, failed, other, inflight;
    int events[8], failed_before_event;
    struct call calls[WINDOW];
};
static struct client cl;

static void on_answer(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp);

static void issue(struct call *k)
{
    if (cl.ok + cl.inflight >= GOAL || cl.next_id >= MAX_IDS)
        return;
    k->id = cl.next_id++;
    memcpy(k->req.data, &k->id, sizeof k->id);
    const int rc = erma_rpc_call(cl.rpc, cl.session, ANSWER, &k->req, &k->resp, on_answer, k);
    if (rc == ERMA_OK)
        cl.inflight++;
    else
        cl.other++;
}

static void on_answer(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    struct call *k = (struct call *)tag;
    uint64_t a = 0;
    cl.inflight--;
    if (status == ERMA_OK && resp->size == sizeof a) {
        memcpy(&a, resp->data, sizeof a);
        cl.ok += a == answer_of(k->id);
        cl.wrong += a != answer_of(k->id);
    } else if (status == ERMA_OK) {
        cl.wrong++;
    } else if (status == ERMA_EPEERFAILED) {
        cl.failed++; /* the dead server may have run it: call again, under a new id */
        cl.failed_before_event += !cl.events[ERMA_SM_RECONNECTING];
    } else {
        cl.other++;
        fprintf(stderr, "reconnect: call %llu: %s\n", (unsigned long long)k->id,
                erma_strerror(status));
    }
    issue(k);
}

static void on_event(struct erma_rpc *rpc, int session, enum erma_sm_event ev, int err,
                     void *ctx)
{
    (void)rpc;
    (void)ctx;
    if (session == cl.session && (unsigned)ev < 8)
        cl.events[ev]++;
    if (ev != ERMA_SM_CONNECTED)
        fprintf(stderr, "reconnect: session %d: event %d (%s)\n", session, (int)ev,
                erma_strerror(err));
}

static bool goal_or(void *ctx)
{
    return cl.ok >= *(unsigned *)ctx || cl.inflight == 0;
}

static int fail(const char *what)
{
    fprintf(stderr, "reconnect: FAIL: %s (ok %u, wrong %u, failed %u, other %u, "
            "events reconnecting %d reconnected %d peer failed %d)\n", what, cl.ok, cl.wrong,
            cl.failed, cl.other, cl.events[ERMA_SM_RECONNECTING],
            cl.events[ERMA_SM_RECONNECTED], cl.events[ERMA_SM_PEER_FAILED]);
    return 1;
}

static int check(void)
{
    if (cl.ok != GOAL || cl.wrong || cl.other)
        return fail("not every answer right");
    if (cl.events[ERMA_SM_RECONNECTING] != 1 || cl.events[ERMA_SM_RECONNECTED] != 1 ||
        cl.events[ERMA_SM_PEER_FAILED] || cl.failed_before_event)
        return fail("events");
    if (!erma_session_connected(cl.rpc, cl.session))
        return fail("the session is not connected");
    unsigned ran = 0;
    for (uint64_t id = 0; id < cl.next_id; id++) {
        if (atomic_load(&runs[id]) > 1)
            return fail("an id ran twice");
        ran += atomic_load(&runs[id]);
    }
    if (ran < GOAL || ran > GOAL + cl.failed)
        return fail("runs do not add up");
    return 0;
}

/* The client: a session with cfg.reconnect to uri, WINDOW calls made. */
static int client_up(const char *uri, const char *client_uri, bool psk, struct erma_nexus **nx,
                     struct erma_endpoint **ep)
{
    struct erma_nexus_cfg ncfg = {0};
    ncfg.psk = psk ? key : NULL;
    struct erma_rpc_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.failure_ns = 300000000;
    cfg.keepalive_ns = 50000000;
    cfg.reconnect = ERMA_RECONNECT_QUEUE;
    cfg.sm_handler = on_event;
    if (erma_nexus_create(&ncfg, nx) != ERMA_OK ||
        erma_endpoint_create(client_uri, 0, NULL, ep) != ERMA_OK ||
        erma_rpc_create(*nx, *ep, &cfg, &cl.rpc) != ERMA_OK ||
        (cl.session = erma_session_create(cl.rpc, uri, 0)) < 0)
        return fail("setting up");
    for (int i = 0; i < WINDOW; i++) {
        if (erma_msgbuf_alloc(cl.rpc, sizeof(uint64_t), &cl.calls[i].req) != ERMA_OK ||
            erma_msgbuf_alloc(cl.rpc, 64, &cl.calls[i].resp) != ERMA_OK)
            return fail("buffers");
        issue(&cl.calls[i]);
    }
    return 0;
}

static void client_down(struct erma_nexus *nx, struct erma_endpoint *ep)
{
    for (int i = 0; i < WINDOW; i++) {
        erma_msgbuf_free(cl.rpc, &cl.calls[i].req);
        erma_msgbuf_free(cl.rpc, &cl.calls[i].resp);
    }
    erma_rpc_destroy(cl.rpc);
    erma_endpoint_destroy(ep);
    erma_nexus_destroy(nx);
}

static void stop_server(pid_t server)
{
    kill(server, SIGKILL);
    waitpid(server, NULL, 0);
}

/* Half the calls, the server killed and started again, the rest. */
static int run(const char *uri, bool psk, const char *client_uri)
{
    pid_t server = start_server(uri, psk);
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    if (server < 0)
        return fail("fork");
    if (client_up(uri, client_uri, psk, &nx, &ep) != 0) {
        stop_server(server);
        return 1;
    }
    const uint64_t t0 = now_ns();
    unsigned half = GOAL / 2, all = GOAL;
    erma_endpoint_run_until(ep, goal_or, &half, 10000000000ull);
    stop_server(server);
    server = start_server(uri, psk);
    erma_endpoint_run_until(ep, goal_or, &all, 15000000000ull);
    printf("reconnect%s: %u right answers in %.0f ms, %u calls failed across the restart "
           "and were made again\n", psk ? " (psk)" : "", cl.ok, (now_ns() - t0) / 1e6,
           cl.failed);
    const int rc = check();
    client_down(nx, ep);
    stop_server(server);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: reconnect HOST PORT [psk]\n");
        return 2;
    }
    char uri[128], client_uri[128];
    snprintf(uri, sizeof uri, "udp://%s:%s", argv[1], argv[2]);
    snprintf(client_uri, sizeof client_uri, "udp://%s:0", argv[1]);
    runs = (_Atomic uint32_t *)mmap(NULL, MAX_IDS * sizeof *runs, PROT_READ | PROT_WRITE,
                                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (runs == MAP_FAILED)
        return 2;
    return run(uri, argc > 3 && strcmp(argv[3], "psk") == 0, client_uri);
}
