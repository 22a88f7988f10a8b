/*
 * kvcs_server - one kvcs cache server (erma/kvcs.h).
 *
 *   kvcs_server --uri udp://127.0.0.1:PORT [--buckets N] [--log-bytes N] [--seconds S]
 *               [--idle-wait-us U | --poll] [--threads T]
 *
 * Serves its kv table by RPC and one-sided READ until SIGTERM or SIGINT, or
 * for S seconds (default: until a signal). With --threads T, T endpoint
 * threads on ports PORT..PORT+T-1, each with its share of the keys
 * (clients need kvcs_client --server-threads T). Once idle for U us (default 50)
 * it sleeps in the socket until a packet comes, as servers do (an idle
 * server uses well under 1% of a core); --poll never sleeps (a core, the
 * lowest latency). Exits 0, 1 when it cannot start (address in use, ...),
 * 2 on bad arguments.
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

static const char usage_text[] =
    "usage: kvcs_server --uri URI [--buckets N] [--log-bytes N] [--seconds S]\n"
    "                   [--idle-wait-us U | --poll] [--threads T]\n"
    "  --uri URI          listen here, e.g. udp://127.0.0.1:31850\n"
    "  --buckets N        kv buckets (default 65536)\n"
    "  --log-bytes N      kv item log bytes (default 64 MiB)\n"
    "  --seconds S        exit after S seconds (default: at SIGTERM or SIGINT)\n"
    "  --idle-wait-us U   spin U us once idle, then sleep until a packet (default 50)\n"
    "  --poll             never sleep (a whole core, the lowest latency)\n"
    "  --threads T        T endpoint threads at ports PORT.., each with its share of\n"
    "                     the keys (default 1, at most 8)\n";

static int usage(FILE *f, int rc)
{
    fputs(usage_text, f);
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"uri", required_argument, NULL, 'u'},
                                         {"buckets", required_argument, NULL, 'b'},
                                         {"log-bytes", required_argument, NULL, 'l'},
                                         {"seconds", required_argument, NULL, 's'},
                                         {"idle-wait-us", required_argument, NULL, 'i'},
                                         {"poll", no_argument, NULL, 'p'},
                                         {"threads", required_argument, NULL, 't'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    struct kvcs_server_cfg cfg = {0};
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
        else if (o == 'p')
            cfg.busy_poll = true;
        else if (o == 't')
            cfg.threads = (uint32_t)strtoul(optarg, NULL, 0);
        else if (o == 'h')
            return usage(stdout, 0);
        else
            return usage(stderr, 2);
    }
    if (!cfg.uri || optind != argc || seconds < 0 || cfg.threads > KVCS_MAX_THREADS)
        return usage(stderr, 2);
    const struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    struct kvcs_server *srv;
    const int rc = kvcs_server_create(&cfg, &srv);
    if (rc != ERMA_OK) {
        fprintf(stderr, "kvcs_server: cannot serve on %s: %s\n", cfg.uri, erma_strerror(rc));
        return 1;
    }
    const uint64_t end = seconds > 0 ? erma_now_ns() + (uint64_t)(seconds * 1e9) : UINT64_MAX;
    while (!stop && erma_now_ns() < end)
        kvcs_server_run(srv, 100000000); /* a signal is seen within 100 ms */
    kvcs_server_destroy(srv);
    return 0;
}
