/*
 * raw - the physical-limit baseline: a ping-pong and a batched echo rate of
 * bare erma-headed packets over one transport, client and server in two
 * processes (the server is forked unless --role says otherwise). CSV out.
 *
 *   raw [--uri CLIENT_URI] [--server SERVER_URI] [--role both|client|server]
 *       [--size BYTES] [--iters N] [--window W] [--batch B] [--seconds S]
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "erma/errors.h"

int main(int argc, char **argv)
{
    const char *uri = "udp://127.0.0.1:0", *server = "udp://127.0.0.1:31850", *role = "both";
    uint32_t size = 32, window = 60, batch = 3;
    uint64_t iters = 100000;
    double seconds = 2;
    static const struct option opts[] = {
        {"uri", 1, 0, 'u'},    {"server", 1, 0, 's'}, {"role", 1, 0, 'r'},
        {"size", 1, 0, 'z'},   {"iters", 1, 0, 'i'},  {"window", 1, 0, 'w'},
        {"batch", 1, 0, 'b'},  {"seconds", 1, 0, 't'}, {0, 0, 0, 0}};
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (c) {
        case 'u': uri = optarg; break;
        case 's': server = optarg; break;
        case 'r': role = optarg; break;
        case 'z': size = (uint32_t)atoi(optarg); break;
        case 'i': iters = strtoull(optarg, NULL, 10); break;
        case 'w': window = (uint32_t)atoi(optarg); break;
        case 'b': batch = (uint32_t)atoi(optarg); break;
        case 't': seconds = atof(optarg); break;
        default:
            fprintf(stderr, "usage: raw [--uri U] [--server U] [--role both|client|server] "
                            "[--size B] [--iters N] [--window W] [--batch B] [--seconds S]\n");
            return 2;
        }
    }
    if (strcmp(role, "server") == 0)
        return bench_raw_server(server, (uint64_t)3600e9) == ERMA_OK ? 0 : 1;
    const pid_t child = strcmp(role, "both") == 0
                            ? bench_raw_server_fork(server, 1, (uint64_t)(seconds * 4e9 + 60e9))
                            : 0;
    bench_pin(0);
    struct bench_lat lat;
    struct bench_raw_rate rate;
    int rc = bench_raw_pingpong(uri, server, size, iters, &lat);
    if (rc == ERMA_OK)
        rc = bench_raw_rate(uri, server, size, window, batch, seconds, &rate);
    bench_raw_server_stop(uri, server, child);
    if (rc != ERMA_OK) {
        fprintf(stderr, "raw: %s\n", erma_strerror(rc));
        return 1;
    }
    printf("bench,transport,size,samples,median_us,p99_us,p999_us,window,batch,mpps,lost\n");
    printf("raw,%.*s,%u,%llu,%.2f,%.2f,%.2f,%u,%u,%.3f,%llu\n",
           (int)(strstr(server, "://") ? strstr(server, "://") - server : 0), server, size,
           (unsigned long long)lat.samples, lat.median_us, lat.p99_us, lat.p999_us, window,
           batch, rate.mpps, (unsigned long long)rate.lost);
    return 0;
}
