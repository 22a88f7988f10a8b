/*
 * hello - the smallest erma program: a server answers "hello, NAME" to a
 * client, over kernel UDP (or any URI).
 *
 *   hello                          server and client in one process, on
 *                                  udp://127.0.0.1:31900 and :31910
 *   hello SERVER_URI CLIENT_URI    the same on other URIs
 *   hello --server URI             a server alone, until SIGINT or SIGTERM
 *   hello --client SERVER_URI [--uri CLIENT_URI] [--name NAME]
 *                                  one call to a server elsewhere
 *
 * Exits 0 when the client got the expected answer (or the server stopped
 * cleanly), 1 when something failed (the message says what), 2 on bad
 * arguments. An idle server sleeps in its socket: it uses no CPU to speak of.
 */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "erma/erma.h"

#define HELLO 1

static atomic_bool stop; /* set by a signal or by the client thread */

static void on_signal(int sig)
{
    (void)sig;
    atomic_store(&stop, true);
}

/* A dispatch handler: runs in the server's event loop, answers at once. */
static void hello_handler(struct erma_req *req, void *ctx)
{
    (void)ctx;
    struct erma_msgbuf *resp = erma_req_resp_buf(req);
    const int n = snprintf((char *)resp->data, resp->max_size, "hello, %.*s",
                           (int)erma_req_size(req), (const char *)erma_req_data(req));
    erma_msgbuf_resize(resp, n < (int)resp->max_size ? (size_t)n : resp->max_size);
    erma_req_respond(req, resp);
}

static bool stopped(void *ctx)
{
    (void)ctx;
    return atomic_load(&stop);
}

/* Serves until stop is set; NULL or what failed. */
static const char *serve(const char *uri)
{
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    struct erma_rpc *rpc;
    if (erma_nexus_create(NULL, &nx) != ERMA_OK)
        return "cannot create the server nexus";
    erma_handler_register(nx, HELLO, hello_handler, ERMA_DISPATCH, NULL);
    if (erma_endpoint_create(uri, 0, NULL, &ep) != ERMA_OK) {
        erma_nexus_destroy(nx);
        return "cannot open the server endpoint (is the port in use?)";
    }
    const char *err = NULL;
    if (erma_rpc_create(nx, ep, NULL, &rpc) == ERMA_OK) {
        erma_endpoint_run_until(ep, stopped, NULL, UINT64_MAX);
        erma_rpc_destroy(rpc);
    } else {
        err = "cannot put RPCs on the server endpoint";
    }
    erma_endpoint_destroy(ep);
    erma_nexus_destroy(nx);
    return err;
}

static void *server_thread(void *uri)
{
    return (void *)serve(uri);
}

struct answer {
    bool done;
    int status;
};

static void on_response(struct erma_rpc *rpc, void *tag, int status, struct erma_msgbuf *resp)
{
    (void)rpc;
    struct answer *a = tag;
    a->status = status;
    a->done = true;
    if (status == ERMA_OK)
        printf("%.*s\n", (int)resp->size, (const char *)resp->data);
}

static bool answered(void *ctx)
{
    return ((struct answer *)ctx)->done;
}

/* Calls the server once with name; ERMA_OK when the answer is right. */
static int call(const char *server_uri, const char *uri, const char *name)
{
    struct erma_nexus *nx;
    struct erma_endpoint *ep;
    struct erma_rpc *rpc;
    struct erma_msgbuf req, resp;
    struct answer a = {0};
    const size_t len = strlen(name);
    int rc = erma_nexus_create(NULL, &nx);
    if (rc != ERMA_OK)
        return rc;
    if ((rc = erma_endpoint_create(uri, 0, NULL, &ep)) != ERMA_OK) {
        erma_nexus_destroy(nx);
        return rc;
    }
    if ((rc = erma_rpc_create(nx, ep, NULL, &rpc)) == ERMA_OK) {
        const int sess = erma_session_create(rpc, server_uri, 0);
        erma_msgbuf_alloc(rpc, len, &req);
        erma_msgbuf_alloc(rpc, len + 16, &resp);
        memcpy(req.data, name, len);
        /* Requests may be queued before the session is up; they wait for it. */
        rc = sess < 0 ? sess : erma_rpc_call(rpc, sess, HELLO, &req, &resp, on_response, &a);
        if (rc == ERMA_OK)
            rc = erma_endpoint_run_until(ep, answered, &a, 5000000000ull);
        if (rc == ERMA_OK)
            rc = a.status;
        if (rc == ERMA_OK && (resp.size != len + 7 || memcmp(resp.data, "hello, ", 7) != 0 ||
                              memcmp(resp.data + 7, name, len) != 0))
            rc = ERMA_EBADPKT;
        erma_msgbuf_free(rpc, &req);
        erma_msgbuf_free(rpc, &resp);
        erma_rpc_destroy(rpc);
    }
    erma_endpoint_destroy(ep);
    erma_nexus_destroy(nx);
    return rc;
}

static const char usage_text[] =
    "usage: hello [SERVER_URI CLIENT_URI]      server and client in one process\n"
    "       hello --server URI                 a server alone, until SIGINT/SIGTERM\n"
    "       hello --client SERVER_URI [--uri CLIENT_URI] [--name NAME]\n"
    "URIs look like udp://127.0.0.1:31900 (defaults: :31900 server, :31910 client).\n";

static void report(const char *server_uri, const char *uri, int rc)
{
    fprintf(stderr, "hello: call to %s (endpoint 0) from %s failed: %s%s\n", server_uri, uri,
            erma_strerror(rc),
            rc == ERMA_ETIMEDOUT ? " (no answer: is a server running there?)" : "");
}

static int usage(FILE *f, int rc)
{
    fputs(usage_text, f);
    return rc;
}

static int both(const char *server_uri, const char *client_uri)
{
    pthread_t t;
    pthread_create(&t, NULL, server_thread, (void *)server_uri);
    const int rc = call(server_uri, client_uri, "world");
    atomic_store(&stop, true);
    void *err;
    pthread_join(t, &err);
    if (err)
        fprintf(stderr, "hello: server %s: %s\n", server_uri, (const char *)err);
    if (rc != ERMA_OK)
        report(server_uri, client_uri, rc);
    return rc == ERMA_OK && !err ? 0 : 1;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"server", required_argument, NULL, 's'},
                                         {"client", required_argument, NULL, 'c'},
                                         {"uri", required_argument, NULL, 'u'},
                                         {"name", required_argument, NULL, 'n'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *server = NULL, *client = NULL, *uri = "udp://127.0.0.1:31910", *name = "world";
    for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        if (o == 's')
            server = optarg;
        else if (o == 'c')
            client = optarg;
        else if (o == 'u')
            uri = optarg;
        else if (o == 'n')
            name = optarg;
        else
            return usage(o == 'h' ? stdout : stderr, o == 'h' ? 0 : 2);
    }
    const int rest = argc - optind;
    if ((server && client) || ((server || client) && rest) || (rest != 0 && rest != 2))
        return usage(stderr, 2);
    if (server) {
        const struct sigaction sa = {.sa_handler = on_signal};
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        const char *err = serve(server);
        if (err)
            fprintf(stderr, "hello: server %s: %s\n", server, err);
        return err ? 1 : 0;
    }
    if (client) {
        const int rc = call(client, uri, name);
        if (rc != ERMA_OK)
            report(client, uri, rc);
        return rc == ERMA_OK ? 0 : 1;
    }
    return both(rest ? argv[optind] : "udp://127.0.0.1:31900",
                rest ? argv[optind + 1] : "udp://127.0.0.1:31910");
}
