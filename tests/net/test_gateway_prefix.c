/*
 * test_gateway_prefix.c - many addresses cannot lock the HTTP gateway out
 * (issue 35, finding 8: 70 addresses x 8 slow connections exceeded the 512
 * connections of `shardwire serve`, and every legitimate request was reset
 * for 60 s). A keyed relay and `shardwire serve` with its keys, scaled down
 * (--max-connections 64 --max-per-ip 4 --max-per-prefix 16 --max-slow 32):
 *
 *  - per prefix: 10 addresses of 127.0.9.0/24 open 4 connections each (40,
 *    within the per-address limit): at most 16 are kept, the rest refused at
 *    once (before: all 40);
 *  - slow budget: 20 addresses, each in its own /24 (127.0.20.1 ..
 *    127.0.39.1), open 4 slow connections each that send the start of a
 *    request and nothing more (80, over the 64 connections). Before, they
 *    held every slot until the header timeout and a client's GET /health got
 *    no answer; now at most 32 connections may still be sending their
 *    request, a new one beyond closes the one at it longest, and the
 *    client's GET /health from 127.0.0.1 is answered at once. Four clients
 *    that were answered first and keep their connections for their next
 *    request (the web page polling /v1/cluster) are not slow: all four are
 *    still open (before, they counted as slow and, opened first, were the
 *    first closed).
 */
#include "sw_attack.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static swa_t s_a;
static char s_dir[64];
static char s_ep[64];
static int s_port;

/* A TCP connection to the gateway from 127.0.NET.HOST; -1 when it could not connect. */
static int s_connect_from(int net, int host)
{
    return swa_tcp_from(s_port, (uint32_t)net << 8 | (uint32_t)host, 5);
}

static int s_open(int fd)
{
    return swa_tcp_open(fd);
}

/* GET /health from 127.0.0.1: the HTTP status (0 = no answer within 5 s). */
static int s_health(void)
{
    return swa_http_health(s_port, 1, 5);
}

/* Opens per connections from each of n addresses 127.0.(net0 + i*dnet).(host0 + i*dhost), each
 * sending the start of a request: how many connected. */
static int s_open_many(int *fd, int n, int per, int net0, int dnet, int host0, int dhost)
{
    const char *start = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
    int ok = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < per; k++) {
            int f = s_connect_from(net0 + i * dnet, host0 + i * dhost);
            if (f >= 0 && send(f, start, strlen(start), MSG_NOSIGNAL) < 0) {
                close(f);
                f = -1;
            }
            fd[i * per + k] = f;
            ok += f >= 0;
        }
    return ok;
}

static int s_count_open(const int *fd, int n)
{
    int open = 0;
    for (int i = 0; i < n; i++)
        open += fd[i] >= 0 && s_open(fd[i]);
    return open;
}

static void s_close_all(int *fd, int n)
{
    for (int i = 0; i < n; i++)
        if (fd[i] >= 0)
            close(fd[i]);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const char *clients[] = {"gw", NULL};
    pid_t relay = swa_relay(&s_a, s_dir, s_ep, NULL, clients, NULL);
    SW_CHECK(relay > 0);
    if (relay <= 0)
        return sw_test_done();
    s_port = sw_test_free_port();
    char listen[64], keyfile[256];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", s_port);
    snprintf(keyfile, sizeof keyfile, "%s/api.keys", s_dir);
    FILE *kf = fopen(keyfile, "w");
    if (!kf)
        sw_test_skip("cannot write the key file");
    fprintf(kf, "prefix-test-key-0123456789\n");
    fclose(kf);
    chmod(keyfile, 0600);
    char *argv[] = {(char *)sw_test_bin("shardwire"),
                    "serve",
                    "--relay",
                    s_ep,
                    "--key",
                    (char *)swa_path(&s_a, "gw", ".key"),
                    "--relay-key",
                    (char *)swa_path(&s_a, "relay", ".pub"),
                    "--access-key",
                    (char *)swa_path(&s_a, "access.key", ""),
                    "--listen",
                    listen,
                    "--api-key-file",
                    keyfile,
                    "--max-connections",
                    "64",
                    "--max-per-ip",
                    "4",
                    "--max-per-prefix",
                    "16",
                    "--max-slow",
                    "32",
                    NULL};
    const char *slog = sw_test_log("serve.log");
    pid_t serve = sw_test_spawn(argv, slog);
    int up = 0;
    for (int i = 0; i < 200 && !up; i++) {
        up = s_health() != 0;
        if (!up)
            usleep(100000);
    }
    SW_CHECK(up);
    if (!up)
        goto out;

    /* 1. one /24: 10 addresses x 4 */
    int one[40];
    const int dialled = s_open_many(one, 10, 4, 9, 0, 1, 1);
    usleep(1000000);
    const int kept = s_count_open(one, 40);
    printf("one /24: 40 connections from 10 addresses (%d connected): %d kept "
           "(--max-per-prefix 16)\n",
           dialled, kept);
    SW_CHECK(kept >= 12 && kept <= 16);
    s_close_all(one, 40);
    usleep(500000);

    /* 2. four kept-alive clients (the web page polling /v1/cluster) between two requests, then
     * slow connections from 20 /24s: 20 addresses x 4 */
    int keep[4], answered = 0;
    for (int i = 0; i < 4; i++) {
        keep[i] = s_connect_from(50 + i, 1);
        answered += swa_http_health_keep(keep[i]) != 0;
    }
    int slow[80];
    const double t0 = swa_now();
    const int got = s_open_many(slow, 20, 4, 20, 1, 1, 0);
    usleep(1000000);
    const int held = s_count_open(slow, 80);
    const double th = swa_now();
    const int st = s_health();
    const double health_s = swa_now() - th;
    printf("slow: 80 connections from 20 addresses of 20 /24s (%d connected): %d held after "
           "%.1f s (--max-slow 32, --max-connections 64); a client's GET /health got %d in "
           "%.2f s\n",
           got, held, th - t0, st, health_s);
    SW_CHECK(held <= 32 + 2);
    SW_CHECK(st != 0);
    SW_CHECK(health_s < 3);
    SW_CHECK(sw_test_count_in_file(slog, "--max-slow") >= 1);
    SW_CHECK(sw_test_count_in_file(slog, "--max-per-prefix") >= 1);
    const int idle = s_count_open(keep, 4);
    printf("slow: %d of 4 kept-alive connections (%d answered) still open: a connection waiting "
           "for its next request is not a slow one\n",
           idle, answered);
    SW_CHECK_INT(answered, 4);
    SW_CHECK_INT(idle, 4);
    s_close_all(slow, 80);
    s_close_all(keep, 4);
out:
    sw_test_kill(serve);
    sw_test_kill(relay);
    swa_rmdir(s_dir);
    return sw_test_done();
}
