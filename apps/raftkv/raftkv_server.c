/*
 * raftkv_server - one replica of a raftkv cluster (raftkv/raftkv.h).
 *
 *   raftkv_server --id N --peers URI,URI,... --dir DIR [--no-fsync]
 *                 [--heartbeat-ms H] [--election-ms E] [--seconds S] [--poll]
 *                 [--threads G]
 *
 * Replica N of the cluster whose endpoints are --peers (N counts from 1;
 * the N-th URI is where this one listens). Its term, vote, log and
 * snapshots live in DIR (made when missing): started again on the same
 * DIR it carries on from them. Serves until SIGTERM or SIGINT, or for S
 * seconds. Idle, it sleeps in the socket (well under 1% of a core);
 * --poll never sleeps. --no-fsync is for benchmarks only (a crash may lose
 * acknowledged writes). --threads G runs G raft groups (raftkv.h, "raft
 * groups"), each on an endpoint thread of its own at the URI's port plus
 * its number, its data in DIR/g; every replica and client of the cluster
 * must be given the same G, and DIR is then G groups' for good (its file
 * `groups` says so: another G, or none, refuses to start on it). Exits 0,
 * 1 when it cannot start, 2 on bad arguments.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "erma/clock.h"
#include "raftkv/raftkv.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static bool stopped(void *ctx)
{
    (void)ctx;
    return stop;
}

static const char usage_text[] =
    "usage: raftkv_server --id N --peers URI,URI,... --dir DIR [--no-fsync]\n"
    "                     [--heartbeat-ms H] [--election-ms E] [--seconds S] [--poll]\n"
    "                     [--threads G]\n"
    "  --id N            this replica's number, 1..peers (its URI is the N-th)\n"
    "  --peers LIST      every replica's URI, e.g. udp://127.0.0.1:31971,...\n"
    "  --dir DIR         term, vote, log and snapshots (made when missing)\n"
    "  --no-fsync        never fsync (benchmarks only: a crash may lose writes)\n"
    "  --heartbeat-ms H  raft's heartbeat (default 50)\n"
    "  --election-ms E   raft's election timeout (default 500)\n"
    "  --seconds S       exit after S seconds (default: at SIGTERM or SIGINT)\n"
    "  --poll            never sleep (a whole core, the lowest latency)\n"
    "  --threads G       G raft groups, the keys split among them, each on a thread\n"
    "                    at the URI's port plus its number, data in DIR/0.. (1..8)\n";

static int usage(FILE *f, int rc)
{
    fputs(usage_text, f);
    return rc;
}

/* --threads: the groups run on threads of their own; this one waits. */
static int serve_groups(const struct raftkv_server_cfg *cfg, unsigned groups, double seconds)
{
    struct raftkv_groups *gs;
    const int rc = raftkv_groups_start(cfg, groups, &gs);
    if (rc != ERMA_OK) {
        fprintf(stderr, "raftkv_server %llu: cannot start %u groups on %s with %s: %s\n",
                (unsigned long long)cfg->id, groups, cfg->peers[cfg->id - 1], cfg->data_dir,
                erma_strerror(rc));
        return 1;
    }
    printf("raftkv_server %llu: %u groups serving on %s and the %u ports after, data in %s/0..\n",
           (unsigned long long)cfg->id, groups, cfg->peers[cfg->id - 1], groups - 1,
           cfg->data_dir);
    fflush(stdout);
    const uint64_t end = seconds > 0 ? erma_now_ns() + (uint64_t)(seconds * 1e9) : UINT64_MAX;
    const struct timespec tick = {0, 10000000};
    while (!stop && erma_now_ns() < end)
        nanosleep(&tick, NULL);
    raftkv_groups_stop(gs);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"id", required_argument, NULL, 'i'},
                                         {"peers", required_argument, NULL, 'p'},
                                         {"dir", required_argument, NULL, 'd'},
                                         {"no-fsync", no_argument, NULL, 'n'},
                                         {"heartbeat-ms", required_argument, NULL, 'b'},
                                         {"election-ms", required_argument, NULL, 'e'},
                                         {"seconds", required_argument, NULL, 's'},
                                         {"poll", no_argument, NULL, 'P'},
                                         {"threads", required_argument, NULL, 't'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *peers[RAFTKV_MAX_PEERS];
    struct raftkv_server_cfg cfg = {.peers = peers};
    struct erma_endpoint_cfg ep = {0}; /* zero: the defaults */
    double seconds = 0;
    unsigned groups = 0;
    for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        if (o == 'i')
            cfg.id = strtoull(optarg, NULL, 0);
        else if (o == 'p')
            cfg.npeers = raftkv_split(optarg, peers, RAFTKV_MAX_PEERS);
        else if (o == 'd')
            cfg.data_dir = optarg;
        else if (o == 'n')
            cfg.no_fsync = true;
        else if (o == 'b')
            cfg.heartbeat_ms = (unsigned)strtoul(optarg, NULL, 0);
        else if (o == 'e')
            cfg.election_ms = (unsigned)strtoul(optarg, NULL, 0);
        else if (o == 's')
            seconds = strtod(optarg, NULL);
        else if (o == 'P')
            ep.busy_poll = true;
        else if (o == 't' && raftkv_groups_arg(optarg, &groups))
            continue;
        else if (o == 'h')
            return usage(stdout, 0);
        else
            return usage(stderr, 2);
    }
    if (optind != argc || !cfg.data_dir || cfg.npeers == 0 ||
        cfg.npeers > RAFTKV_MAX_PEERS || cfg.id == 0 || cfg.id > cfg.npeers ||
        seconds < 0) {
        fprintf(stderr, "raftkv_server: --id 1..%u, --peers (at most %d) and --dir are needed; "
                "--threads 1..%d\n", cfg.npeers, RAFTKV_MAX_PEERS, RAFTKV_MAX_GROUPS);
        return usage(stderr, 2);
    }
    cfg.ep_cfg = &ep;
    const struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (groups > 1)
        return serve_groups(&cfg, groups, seconds);
    struct raftkv_server *s;
    const int rc = raftkv_server_create(&cfg, &s);
    if (rc != ERMA_OK) {
        fprintf(stderr, "raftkv_server %llu: cannot start on %s with %s: %s\n",
                (unsigned long long)cfg.id, peers[cfg.id - 1], cfg.data_dir, erma_strerror(rc));
        return 1;
    }
    printf("raftkv_server %llu: serving on %s, data in %s\n", (unsigned long long)cfg.id,
           peers[cfg.id - 1], raftkv_server_dir(s));
    fflush(stdout);
    const uint64_t end = seconds > 0 ? erma_now_ns() + (uint64_t)(seconds * 1e9) : UINT64_MAX;
    while (!stop && erma_now_ns() < end)
        raftkv_server_run(s, stopped, NULL, 100000000); /* a signal within 100 ms */
    raftkv_server_destroy(s);
    return 0;
}
