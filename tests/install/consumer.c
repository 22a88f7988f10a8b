/*
 * consumer - a program outside erma's tree, built against an installed erma
 * (as C with pkg-config, as C++ with find_package(erma), and through
 * add_subdirectory) by test_install.sh. One thread drives two endpoints:
 * the client asks the server by RPC for a key to its region, then reads the
 * region with a one-sided READ.
 *
 *   consumer HOST SERVER_PORT CLIENT_PORT   RPC + READ over udp; exit 0 if right
 *   consumer --open URI                     exit 0 if opening URI fails with
 *                                           ERMA_ENOTSUP (its module is missing)
 *   consumer --available SCHEME             exit 0 if SCHEME's transport loads
 * Valid C11 and C++17.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <erma/erma.h>
#include <erma/transport.h>

#define KEY_REQ 1
static const char secret[] = "read one-sided from an installed erma";

struct server {
    struct erma_rma *rma;
    uint32_t region;
};

/* Answers the client's identity (8 bytes) with an rkey for the region,
 * good from the address the request came from only. */
static void key_handler(struct erma_req *req, void *ctx)
{
    struct server *s = (struct server *)ctx;
    struct erma_msgbuf *resp = erma_req_resp_buf(req);
    uint64_t identity = 0;
    char from[128];
    struct erma_rkey rkey;
    memcpy(&identity, erma_req_data(req), sizeof identity);
    if (erma_req_peer_uri(req, from, sizeof from) != ERMA_OK ||
        erma_region_export_uri(s->rma, s->region, identity, from, &rkey) != ERMA_OK)
        rkey.region = UINT32_MAX;
    memcpy(resp->data, &rkey, sizeof rkey);
    erma_msgbuf_resize(resp, sizeof rkey);
    erma_req_respond(req, resp);
}

struct answer {
    int done, status;
};

static void on_key(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    (void)resp;
    struct answer *a = (struct answer *)tag;
    a->status = status;
    a->done = 1;
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "consumer: %s: %s\n", what, erma_strerror(rc));
    return 1;
}

/* A READ's callback: *ctx 1 when it read, -1 when it failed. */
static void on_read(struct erma_rma *rma, const struct erma_rma_completion *c, void *ctx)
{
    (void)rma;
    *(int *)ctx = c->status == ERMA_OK ? 1 : -1;
}

/* Runs both loops until *done or 5 s pass. */
static int run_both(struct erma_endpoint *a, struct erma_endpoint *b, const int *done)
{
    const uint64_t end = erma_now_ns() + 5000000000ull;
    while (!*done && erma_now_ns() < end) {
        erma_endpoint_run_once(a);
        erma_endpoint_run_once(b);
    }
    return *done ? ERMA_OK : ERMA_ETIMEDOUT;
}

static int rpc_and_read(const char *host, const char *sport, const char *cport)
{
    char suri[128], curi[128];
    snprintf(suri, sizeof suri, "udp://%s:%s", host, sport);
    snprintf(curi, sizeof curi, "udp://%s:%s", host, cport);
    struct erma_nexus *snx, *cnx;
    struct erma_endpoint *sep, *cep;
    struct erma_rpc *srv, *cli;
    struct erma_rma *crma;
    struct server s;
    int rc;
    char region_mem[64];
    memcpy(region_mem, secret, sizeof secret);
    if ((rc = erma_nexus_create(NULL, &snx)) != ERMA_OK)
        return fail("server nexus", rc);
    if ((rc = erma_handler_register(snx, KEY_REQ, key_handler, ERMA_DISPATCH, &s)) != ERMA_OK)
        return fail("register handler", rc);
    if ((rc = erma_endpoint_create(suri, 0, NULL, &sep)) != ERMA_OK)
        return fail(suri, rc);
    if ((rc = erma_rpc_create(snx, sep, NULL, &srv)) != ERMA_OK ||
        (rc = erma_rma_create(sep, NULL, &s.rma)) != ERMA_OK ||
        (rc = erma_region_register(s.rma, region_mem, sizeof region_mem, ERMA_RMA_PERM_READ,
                                   &s.region)) != ERMA_OK)
        return fail("server endpoint", rc);
    if ((rc = erma_nexus_create(NULL, &cnx)) != ERMA_OK ||
        (rc = erma_endpoint_create(curi, 0, NULL, &cep)) != ERMA_OK ||
        (rc = erma_rpc_create(cnx, cep, NULL, &cli)) != ERMA_OK ||
        (rc = erma_rma_create(cep, NULL, &crma)) != ERMA_OK)
        return fail("client endpoint", rc);

    struct erma_msgbuf req, resp;
    struct answer a = {0, 0};
    const int sess = erma_session_create(cli, suri, 0);
    const uint64_t id = erma_rma_identity(crma);
    if (sess < 0)
        return fail("session", sess);
    erma_msgbuf_alloc(cli, sizeof id, &req);
    erma_msgbuf_alloc(cli, 64, &resp);
    memcpy(req.data, &id, sizeof id);
    rc = erma_rpc_call(cli, sess, KEY_REQ, &req, &resp, on_key, &a);
    if (rc == ERMA_OK)
        rc = run_both(cep, sep, &a.done);
    if (rc != ERMA_OK || a.status != ERMA_OK || resp.size != sizeof(struct erma_rkey))
        return fail("RPC for the key", rc != ERMA_OK ? rc : a.status);
    printf("RPC: got a key to region %u\n", ((struct erma_rkey *)resp.data)->region);

    struct erma_rma_cmd cmd;
    char got[sizeof secret] = {0};
    memset(&cmd, 0, sizeof cmd);
    cmd.op = ERMA_RMA_READ;
    cmd.peer = erma_rma_peer(crma, suri, 0);
    memcpy(&cmd.rkey, resp.data, sizeof cmd.rkey);
    cmd.local = got;
    cmd.len = sizeof secret;
    if ((rc = erma_rma_submit(crma, &cmd)) < 0)
        return fail("READ submit", rc);
    struct erma_rma_completion c;
    int read_done = 0;
    const uint64_t end = erma_now_ns() + 5000000000ull;
    while (!read_done && erma_now_ns() < end) {
        erma_endpoint_run_once(cep);
        erma_endpoint_run_once(sep);
        read_done = erma_rma_poll(crma, &c, 1);
    }
    if (!read_done || c.status != ERMA_OK)
        return fail("READ", read_done ? c.status : ERMA_ETIMEDOUT);
    if (memcmp(got, secret, sizeof secret) != 0)
        return fail("READ returned other bytes", ERMA_EBADPKT);
    printf("READ: \"%s\"\n", got);
    int cb_done = 0; /* the same READ again, completing by callback in the loop */
    memset(got, 0, sizeof got);
    cmd.cb = on_read;
    cmd.cb_ctx = &cb_done;
    if ((rc = erma_rma_submit(crma, &cmd)) < 0)
        return fail("READ submit (callback)", rc);
    rc = run_both(cep, sep, &cb_done);
    if (rc != ERMA_OK || cb_done != 1 || memcmp(got, secret, sizeof secret) != 0)
        return fail("READ by callback", rc != ERMA_OK ? rc : ERMA_EBADPKT);
    printf("READ by callback: \"%s\"\n", got);
    erma_msgbuf_free(cli, &req);
    erma_msgbuf_free(cli, &resp);
    erma_rma_destroy(crma);
    erma_rpc_destroy(cli);
    erma_endpoint_destroy(cep);
    erma_nexus_destroy(cnx);
    erma_rma_destroy(s.rma);
    erma_rpc_destroy(srv);
    erma_endpoint_destroy(sep);
    erma_nexus_destroy(snx);
    return 0;
}

int main(int argc, char **argv)
{
    if (strcmp(erma_version(), ERMA_VERSION) != 0)
        return fail("erma_version() is not ERMA_VERSION", ERMA_EINVAL);
    printf("erma %s\n", erma_version());
    if (argc == 3 && strcmp(argv[1], "--open") == 0) {
        struct erma_endpoint *ep;
        const int rc = erma_endpoint_create(argv[2], 0, NULL, &ep);
        if (rc == ERMA_OK)
            erma_endpoint_destroy(ep);
        printf("open %s: %s\n", argv[2], erma_strerror(rc));
        return rc == ERMA_ENOTSUP ? 0 : 1;
    }
    if (argc == 3 && strcmp(argv[1], "--available") == 0)
        return erma_transport_available(argv[2]) ? 0 : 1;
    if (argc == 4)
        return rpc_and_read(argv[1], argv[2], argv[3]);
    fprintf(stderr, "usage: consumer HOST SERVER_PORT CLIENT_PORT | --open URI | "
                    "--available SCHEME\n");
    return 2;
}
