/*
 * kvcs_server - one kvcs cache server (erma/kvcs.h).
 *
 *   kvcs_server --uri udp://127.0.0.1:PORT [--buckets N] [--log-bytes N] [--seconds S]
 *               [--idle-wait-us U]
 *
 * --idle-wait-us: sleep in the socket once idle for U us (default: always
 * poll), for servers that share cores with each other or with clients.
 * Serves its kv table by RPC and one-sided READ until SIGTERM or SIGINT, or
 * for S seconds (default: until a signal). Exits 0, or 1 when it cannot
 * start (bad arguments, address in use).
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "erma/clock.h"
#include "kvcs/kvcs.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static int usage(void)
{
    fprintf(stderr, "usage: kvcs_server --uri URI [--buckets N] [--log-bytes N] [--seconds S] "
                    "[--idle-wait-us U]\n");
    return 1;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"uri", required_argument, NULL, 'u'},
                                         {"buckets", required_argument, NULL, 'b'},
                                         {"log-bytes", required_argument, NULL, 'l'},
                                         {"seconds", required_argument, NULL, 's'},
                                         {"idle-wait-us", required_argument, NULL, 'i'},
                                         {NULL, 0, NULL, 0}};
    struct erma_kvcs_server_cfg cfg = {0};
    double seconds = 0;
    for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        if (o == 'u')
            cfg.uri = optarg;
        else if (o == 'b')
            cfg.buckets = (uint32_t)strtoul(optarg, NULL, 0);
        else if (o == 'l')
            cfg.log_bytes = strtoull(optarg, NULL, 0);
        else if (o == 's')
            seconds = strtod(optarg, NULL);
        else if (o == 'i')
            cfg.idle_wait_ns = strtoull(optarg, NULL, 0) * 1000;
        else
            return usage();
    }
    if (!cfg.uri || optind != argc || seconds < 0)
        return usage();
    const struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    struct erma_kvcs_server *srv;
    const int rc = erma_kvcs_server_create(&cfg, &srv);
    if (rc != ERMA_OK) {
        fprintf(stderr, "kvcs_server: %s: %s\n", cfg.uri, erma_strerror(rc));
        return 1;
    }
    const uint64_t end = seconds > 0 ? erma_now_ns() + (uint64_t)(seconds * 1e9) : UINT64_MAX;
    while (!stop && erma_now_ns() < end)
        erma_kvcs_server_run(srv, 10000000);
    erma_kvcs_server_destroy(srv);
    return 0;
}
