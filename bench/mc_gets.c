/*
 * bench/mc_gets - a memcached peer for bench/peers: GETs per second from
 * one client on one TCP connection, W GETs pipelined (sent in one write,
 * their answers read before the next W go), each answer checked.
 *
 *   mc_gets [--host H] [--port P] [--window W] [--seconds S] [--value B]
 *
 * Stores key "erma_k" with a value of B bytes (default 3) first, then
 * prints one line: "gets_per_s N". Exits 1 on a wrong or missing answer
 * or when the server cannot be reached.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_WINDOW 1024

static const char usage[] =
    "usage: mc_gets [--host H] [--port P] [--window W] [--seconds S] [--value B]\n"
    "  pipelined memcached GETs on one TCP connection (bench/mc_gets.c)\n"
    "  --host H     server address (default 127.0.0.1)\n"
    "  --port P     server port (default 11211)\n"
    "  --window W   GETs per pipelined write, 1..1024 (default 32)\n"
    "  --seconds S  how long (default 2)\n"
    "  --value B    value bytes, 1..1000 (default 3)\n"
    "  -h, --help   this text\n";

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int put_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        const ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads exactly n bytes into p. */
static int get_all(int fd, char *p, size_t n)
{
    while (n > 0) {
        const ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1";
    int port = 11211, window = 32, value = 3;
    double seconds = 2;
    static const struct option opts[] = {{"host", 1, 0, 'H'},    {"port", 1, 0, 'p'},
                                         {"window", 1, 0, 'w'},  {"seconds", 1, 0, 's'},
                                         {"value", 1, 0, 'v'},   {"help", 0, 0, 'h'},
                                         {0, 0, 0, 0}};
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        switch (c) {
        case 'H': host = optarg; break;
        case 'p': port = atoi(optarg); break;
        case 'w': window = atoi(optarg); break;
        case 's': seconds = atof(optarg); break;
        case 'v': value = atoi(optarg); break;
        case 'h': fputs(usage, stdout); return 0;
        default: fputs(usage, stderr); return 2;
        }
    }
    if (window < 1 || window > MAX_WINDOW || value < 1 || value > 1000 || seconds <= 0 ||
        port < 1 || port > 65535) {
        fputs(usage, stderr);
        return 2;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    if (fd < 0 || inet_pton(AF_INET, host, &a.sin_addr) != 1 ||
        connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        fprintf(stderr, "mc_gets: cannot connect to %s:%d: %s\n", host, port, strerror(errno));
        return 1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char val[1001], set[1100], line[64];
    memset(val, 'v', (size_t)value);
    const int n = snprintf(set, sizeof set, "set erma_k 0 0 %d\r\n%.*s\r\n", value, value, val);
    if (put_all(fd, set, (size_t)n) || get_all(fd, line, 8) || memcmp(line, "STORED\r\n", 8)) {
        fprintf(stderr, "mc_gets: set failed\n");
        return 1;
    }
    /* each answer: "VALUE erma_k 0 B\r\n" + value + "\r\nEND\r\n" */
    char hdr[64];
    const int hlen = snprintf(hdr, sizeof hdr, "VALUE erma_k 0 %d\r\n", value);
    const size_t alen = (size_t)hlen + (size_t)value + 7;
    static char req[MAX_WINDOW * 12], ans[MAX_WINDOW * 1100], want[1100];
    for (int i = 0; i < window; i++)
        memcpy(req + i * 12, "get erma_k\r\n", 12);
    memcpy(want, hdr, (size_t)hlen);
    memcpy(want + hlen, val, (size_t)value);
    memcpy(want + hlen + value, "\r\nEND\r\n", 7);
    unsigned long long gets = 0;
    const double start = now_s();
    double t = start;
    while (t - start < seconds) {
        if (put_all(fd, req, (size_t)window * 12) || get_all(fd, ans, alen * (size_t)window)) {
            fprintf(stderr, "mc_gets: connection lost after %llu GETs\n", gets);
            return 1;
        }
        for (int i = 0; i < window; i++)
            if (memcmp(ans + (size_t)i * alen, want, alen) != 0) {
                fprintf(stderr, "mc_gets: answer %llu is wrong\n", gets + (unsigned)i);
                return 1;
            }
        gets += (unsigned)window;
        t = now_s();
    }
    printf("gets_per_s %.0f\n", (double)gets / (t - start));
    close(fd);
    return 0;
}
