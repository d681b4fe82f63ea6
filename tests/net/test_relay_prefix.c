/*
 * test_relay_prefix.c - the relay keeps at most --max-conns-per-prefix TCP
 * connections open from one address prefix (an IPv4 /24, an IPv6 /64),
 * authenticated or not (issue 35, finding 9: 9,500 half-open connections from
 * 600 addresses, 16 each, within a per-address firewall rule, held 8,401 of
 * the relay's descriptors and slowed a client's join from 0.1 to 3.7 s).
 *
 * A keyed relay of real sockets with --max-conns-per-prefix 32:
 *
 *  - 80 plain TCP connections, each from its own address of 127.0.7.0/24
 *    (one connection per address: any per-address limit lets them all in),
 *    send nothing (half-open for the relay: no greeting, no handshake). The
 *    relay shuts down those beyond 32 at once: within 1.5 s, at least 40 of
 *    the 80 are closed, at most 32 (+ 2 in flight) stay open (before: all
 *    80 stayed open until the 5 s handshake timeout, and a flood that
 *    redials keeps them so);
 *  - 10 connections from 127.0.8.0/24 meanwhile all stay open (the limit is
 *    per prefix), and a client (`shardwire status`, from 127.0.0.1) is
 *    answered at once.
 */
#include "sw_attack.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#define N_FLOOD 80
#define N_OTHER 10
#define LIMIT 32

static swa_t s_a;
static char s_dir[64];
static char s_ep[64];

/* A TCP connection from 127.0.NET.HOST to the relay's port; the fd or -1. */
static int s_dial(int port, int net, int host)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in src = {.sin_family = AF_INET}, dst = {.sin_family = AF_INET};
    char ip[32];
    snprintf(ip, sizeof ip, "127.0.%d.%d", net, host);
    inet_pton(AF_INET, ip, &src.sin_addr);
    inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
    dst.sin_port = htons((uint16_t)port);
    if (bind(fd, (struct sockaddr *)&src, sizeof src) != 0 ||
        connect(fd, (struct sockaddr *)&dst, sizeof dst) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* 1 when the relay closed fd (EOF or a reset); it may have sent its ZMTP greeting first. */
static int s_closed(int fd)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 0) <= 0)
            return 0;
        char buf[256];
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            return 1;
        if (n < 0)
            return 0;
    }
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const char *clients[] = {"alice", NULL};
    static const char *const flags[] = {"--max-conns-per-prefix", "32", NULL};
    pid_t relay = swa_relay(&s_a, s_dir, s_ep, NULL, clients, flags);
    SW_CHECK(relay > 0);
    if (relay <= 0)
        return sw_test_done();
    const int port = atoi(strrchr(s_ep, ':') + 1);
    int flood[N_FLOOD], other[N_OTHER], dialled = 0;
    for (int i = 0; i < N_FLOOD; i++)
        dialled += (flood[i] = s_dial(port, 7, i + 1)) >= 0;
    for (int i = 0; i < N_OTHER; i++)
        dialled += (other[i] = s_dial(port, 8, i + 1)) >= 0;
    SW_CHECK_INT(dialled, N_FLOOD + N_OTHER);
    usleep(1500000);
    int closed = 0, other_closed = 0;
    for (int i = 0; i < N_FLOOD; i++)
        closed += flood[i] >= 0 && s_closed(flood[i]);
    for (int i = 0; i < N_OTHER; i++)
        other_closed += other[i] >= 0 && s_closed(other[i]);
    sw_test_client_env(s_dir, "alice");
    const double t0 = swa_now();
    char *argv[] = {(char *)sw_test_bin("shardwire"), "status", "--relay", s_ep, "--json", NULL};
    const int rc = sw_test_run(argv, 20, NULL, NULL);
    const double status_s = swa_now() - t0;
    printf("%d connections from 80 addresses of one /24: %d shut down within 1.5 s, %d open "
           "(--max-conns-per-prefix %d); %d of %d from another /24 shut; a client's status in "
           "%.2f s\n",
           N_FLOOD, closed, N_FLOOD - closed, LIMIT, other_closed, N_OTHER, status_s);
    SW_CHECK(closed >= N_FLOOD - LIMIT - 2 && N_FLOOD - closed <= LIMIT + 2);
    SW_CHECK_INT(other_closed, 0);
    SW_CHECK_INT(rc, 0);
    SW_CHECK(status_s < 5);
    SW_CHECK(sw_test_count_in_file(sw_test_log("relay.log"), "--max-conns-per-prefix") >= 1);
    for (int i = 0; i < N_FLOOD; i++)
        if (flood[i] >= 0)
            close(flood[i]);
    for (int i = 0; i < N_OTHER; i++)
        if (other[i] >= 0)
            close(other[i]);
    sw_test_kill(relay);
    swa_rmdir(s_dir);
    return sw_test_done();
}
