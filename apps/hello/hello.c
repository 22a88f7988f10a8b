/*
 * hello - the smallest erma program: a server thread answers "hello, NAME"
 * to a client thread, over kernel UDP on loopback (or any URI given).
 *
 *   hello [SERVER_URI [CLIENT_URI]]     defaults udp://127.0.0.1:31900 and :31910
 *
 * Exits 0 when the client got the expected answer.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "erma/rpc.h"

#define HELLO 1

static atomic_bool stop;

/* A dispatch handler: runs in the server's event loop, answers at once. */
static void hello_handler(struct erma_req *req, void *ctx)
{
    (void)ctx;
    struct erma_msgbuf *resp = erma_req_resp_buf(req);
    const int n = snprintf((char *)resp->data, resp->max_size, "hello, %.*s",
                           (int)erma_req_size(req), (const char *)erma_req_data(req));
    erma_resize_msgbuf(resp, (size_t)n);
    erma_enqueue_response(req, resp);
}

static void *server(void *uri)
{
    struct erma_nexus *nx;
    struct erma_rpc *rpc;
    if (erma_nexus_create(uri, NULL, &nx) != ERMA_OK)
        return "cannot create the server nexus";
    erma_register_handler(nx, HELLO, hello_handler, ERMA_DISPATCH, NULL);
    if (erma_rpc_create(nx, 0, NULL, &rpc) != ERMA_OK) {
        erma_nexus_destroy(nx);
        return "cannot create the server endpoint";
    }
    while (!atomic_load(&stop))
        erma_rpc_run(rpc, 1000000);
    erma_rpc_destroy(rpc);
    erma_nexus_destroy(nx);
    return NULL;
}

struct answer {
    int done, status;
};

static void on_response(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    struct answer *a = tag;
    a->status = status;
    a->done = 1;
    if (status == ERMA_OK)
        printf("%.*s\n", (int)resp->size, (const char *)resp->data);
}

static int client(const char *server_uri, const char *uri)
{
    struct erma_nexus *nx;
    struct erma_rpc *rpc;
    struct erma_msgbuf req, resp;
    struct answer a = {0};
    int rc = erma_nexus_create(uri, NULL, &nx);
    if (rc != ERMA_OK)
        return rc;
    if ((rc = erma_rpc_create(nx, 0, NULL, &rpc)) == ERMA_OK) {
        const int sess = erma_create_session(rpc, server_uri, 0);
        erma_alloc_msgbuf(rpc, 5, &req);
        erma_alloc_msgbuf(rpc, 64, &resp);
        memcpy(req.data, "world", 5);
        /* Requests may be queued before the session is up; they wait for it. */
        rc = sess < 0 ? sess : erma_enqueue_request(rpc, sess, HELLO, &req, &resp, on_response, &a);
        for (int i = 0; rc == ERMA_OK && !a.done && i < 5000; i++)
            erma_rpc_run(rpc, 1000000);
        if (rc == ERMA_OK)
            rc = a.done ? a.status : ERMA_ETIMEDOUT;
        if (rc == ERMA_OK && (resp.size != 12 || memcmp(resp.data, "hello, world", 12) != 0))
            rc = ERMA_EBADPKT;
        erma_free_msgbuf(rpc, &req);
        erma_free_msgbuf(rpc, &resp);
        erma_rpc_destroy(rpc);
    }
    erma_nexus_destroy(nx);
    return rc;
}

int main(int argc, char **argv)
{
    const char *server_uri = argc > 1 ? argv[1] : "udp://127.0.0.1:31900";
    const char *client_uri = argc > 2 ? argv[2] : "udp://127.0.0.1:31910";
    pthread_t t;
    pthread_create(&t, NULL, server, (void *)server_uri);
    const int rc = client(server_uri, client_uri);
    atomic_store(&stop, true);
    void *err;
    pthread_join(t, &err);
    if (err)
        fprintf(stderr, "hello: %s\n", (const char *)err);
    if (rc != ERMA_OK)
        fprintf(stderr, "hello: %s\n", erma_strerror(rc));
    return rc == ERMA_OK && !err ? 0 : 1;
}
