/*
 * test_gateway_limits.c - a few addresses cannot lock the HTTP gateway
 * (issue 21, finding 4). A relay (loopback, no keys) and `shardwire serve`
 * with its default limits (but the idle timeout); no nodes are needed
 * (/health answers without a head).
 *
 *  - slow-loris: 4 source addresses (127.0.0.2-5) open 16 connections each
 *    and send their request headers one byte a second. The gateway used to
 *    hold 64 connections, 16 per address, with an idle timeout that every
 *    byte restarts: the 4 addresses took all of them for as long as they
 *    liked and a fifth address got nothing. Now one address holds at most 8
 *    (of 512) and a request's headers must be in 10 s after the connection
 *    opened (--header-timeout-s), however slowly they trickle: a fifth
 *    address is answered at once, and every slow connection is closed by the
 *    server within the deadline (and a second).
 *  - kept alive (--idle-timeout-s 16): a client answered once whose
 *    connection waits for its next request is closed by the idle timeout,
 *    not by the header deadline (before, the deadline ran from the answer and
 *    closed it after 10 s); one that starts its next request's headers and
 *    trickles them is closed by the header deadline like the others.
 *
 * And its memory (finding 6): 16 clients from 2 addresses send at once a
 * 7.4 MB chat body of 230,000 tiny content parts each. jansson spends about
 * 100 bytes per JSON value, so these bodies took the gateway from 27 MB to
 * 2 GB in 2.8 s. Now a body is parsed only when it holds at most 16,384
 * values (counted in one pass before jansson allocates anything, 413
 * otherwise), at most 4 bodies are parsed at once, and all buffered bodies
 * together stay within --max-bodies-mb (64; beyond: 503): the gateway's
 * resident memory grows by less than 64 MB + 64 MB of threads and slack.
 */
#include "sw_attack.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define N_ADDR 4
#define PER_ADDR 16
#define IDLE_S 16 /* --idle-timeout-s: past the header deadline (10 s) */

static int s_port;

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A TCP connection to the gateway from 127.0.0.`host`; -1 when refused. */
static int s_connect_from(int host)
{
    return swa_tcp_from(s_port, (uint32_t)host, 10);
}

static int s_open(int fd)
{
    return swa_tcp_open(fd);
}

/* GET /health from 127.0.0.`host`: the HTTP status (0 = no answer within 10 s). */
static int s_health(int host)
{
    return swa_http_health(s_port, (uint32_t)host, 10);
}

/* A kept-alive connection answered at t_idle that sends nothing more: still open past the
 * header deadline (10 s, +2 s), closed by the idle timeout (IDLE_S, within 4 s more). */
static void s_idle_kept(int fd, int status, double t_idle)
{
    while (s_now() - t_idle < 10 + 2)
        usleep(100000);
    const int open_past_header = fd >= 0 && s_open(fd);
    double closed = 0;
    while (!closed && s_now() - t_idle < IDLE_S + 4) {
        if (fd < 0 || !s_open(fd))
            closed = s_now() - t_idle;
        else
            usleep(100000);
    }
    printf("kept alive: a connection waiting for its next request (answered %d) was %s 12 s "
           "after its answer and closed after %.1f s (--idle-timeout-s %d)\n",
           status, open_past_header ? "open" : "closed", closed, IDLE_S);
    SW_CHECK_INT(status, 503); /* answered (no head in this cluster) */
    SW_CHECK(open_past_header);
    SW_CHECK(closed >= IDLE_S - 1 && closed < IDLE_S + 4);
    if (fd >= 0)
        close(fd);
}

/* Part 1: slow-loris from a few addresses, and two kept-alive connections from 127.0.0.6 after
 * their first answer: one trickling its next request's headers (closed by the header deadline
 * like the others), one waiting for its next request (s_idle_kept). */
static void s_slow_loris(void)
{
    int fd[N_ADDR][PER_ADDR];
    const char *start = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
    int idle = s_connect_from(6), next = s_connect_from(6);
    const int idle_st = swa_http_health_keep(idle), next_st = swa_http_health_keep(next);
    const double t_idle = s_now();
    const char *again = "GET /health HTTP/1.1\r\n";
    if (next >= 0 && send(next, again, strlen(again), MSG_NOSIGNAL) < 0) {
        close(next);
        next = -1;
    }
    const double t0 = s_now();
    for (int a = 0; a < N_ADDR; a++)
        for (int i = 0; i < PER_ADDR; i++) {
            fd[a][i] = s_connect_from(2 + a);
            if (fd[a][i] >= 0 && write(fd[a][i], start, strlen(start)) < 0) {
                close(fd[a][i]);
                fd[a][i] = -1;
            }
        }
    usleep(1000000);
    int held = 0;
    for (int a = 0; a < N_ADDR; a++)
        for (int i = 0; i < PER_ADDR; i++)
            held += fd[a][i] >= 0 && s_open(fd[a][i]);
    const double th = s_now();
    const int st = s_health(6);
    const double health_s = s_now() - th;
    printf("slow-loris: %d addresses x %d connections: %d held by the gateway; a fifth address "
           "got %d in %.2f s\n",
           N_ADDR, PER_ADDR, held, st, health_s);
    SW_CHECK(held <= N_ADDR * 8);
    SW_CHECK(st == 200 || st == 503); /* answered (503: no head in this cluster) */
    SW_CHECK(health_s < 5);
    /* trickle one header byte a second; the server must close them all by the deadline */
    double last_closed = 0, next_closed = 0;
    int open = held + (next >= 0);
    while (open > 0 && s_now() - t0 < 20) {
        open = 0;
        for (int k = 0; k <= N_ADDR * PER_ADDR; k++) {
            int *f = k < N_ADDR * PER_ADDR ? &fd[k / PER_ADDR][k % PER_ADDR] : &next;
            if (*f < 0)
                continue;
            if (!s_open(*f) || send(*f, "X", 1, MSG_NOSIGNAL) != 1) {
                close(*f);
                *f = -1;
                *(k < N_ADDR * PER_ADDR ? &last_closed : &next_closed) = s_now() - t0;
                continue;
            }
            open++;
        }
        if (open)
            usleep(1000000);
    }
    printf("slow-loris: the last slow connection was closed %.1f s after it opened, the kept-alive "
           "one sending its next request %.1f s after its first byte (%d left open after 20 s)\n",
           last_closed, next_closed, open);
    SW_CHECK_INT(open, 0);
    SW_CHECK(last_closed < 10 + 3);
    SW_CHECK_INT(next_st, 503);
    SW_CHECK(next_closed > 0 && next_closed < 10 + 3);
    for (int a = 0; a < N_ADDR; a++)
        for (int i = 0; i < PER_ADDR; i++)
            if (fd[a][i] >= 0)
                close(fd[a][i]);
    s_idle_kept(idle, idle_st, t_idle);
}

/* Resident memory of pid: its peak (VmHWM) in MiB, or -1. */
static long s_peak_mib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r"); /* /proc files have no size: read them line by line */
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6))
            kb = atol(line + 6);
    if (f)
        fclose(f);
    return kb < 0 ? -1 : kb / 1024;
}

typedef struct s_post {
    int host;         /* source address 127.0.0.host */
    const char *body; /* the chat body */
    int status;       /* the answer's HTTP status, 0 = none */
} s_post_t;

static void *s_post_thread(void *arg)
{
    s_post_t *p = arg;
    int fd = s_connect_from(p->host);
    if (fd < 0)
        return NULL;
    struct timeval tv = {.tv_sec = 60};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char head[512];
    size_t len = strlen(p->body);
    int n = snprintf(head, sizeof head,
                     "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                     "limits-test-key-0123456789\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                     len);
    if (write(fd, head, (size_t)n) == n) {
        size_t off = 0;
        while (off < len) {
            ssize_t w = send(fd, p->body + off, len - off, MSG_NOSIGNAL);
            if (w <= 0)
                break;
            off += (size_t)w;
        }
        char line[64] = "";
        ssize_t r = read(fd, line, sizeof line - 1);
        if (r > 0)
            line[r] = 0;
        if (sscanf(line, "HTTP/1.%*d %d", &p->status) != 1)
            p->status = 0;
    }
    close(fd);
    return NULL;
}

/* Part 2: bodies of many tiny JSON values, all at once. */
static void s_json_memory(pid_t serve)
{
    const char *part = "{\"type\":\"text\",\"text\":\"a\"},";
    const size_t parts = 230000, pl = strlen(part);
    const char *pre = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[";
    char *body = malloc(strlen(pre) + parts * pl + 64);
    if (!body)
        return;
    size_t off = (size_t)sprintf(body, "%s", pre);
    for (size_t i = 0; i < parts; i++, off += pl)
        memcpy(body + off, part, pl);
    sprintf(body + off - 1, "]}]}");
    const long before = s_peak_mib(serve);
    s_post_t posts[16];
    pthread_t th[16];
    const double t0 = s_now();
    for (int i = 0; i < 16; i++) {
        posts[i] = (s_post_t){.host = 7 + i % 2, .body = body};
        pthread_create(&th[i], NULL, s_post_thread, &posts[i]);
    }
    int refused = 0;
    for (int i = 0; i < 16; i++) {
        pthread_join(th[i], NULL);
        refused += posts[i].status == 413 || posts[i].status == 503;
    }
    const long after = s_peak_mib(serve);
    printf("JSON memory: 16 bodies of %.1f MB (%zu content parts) at once: %d refused (413 or "
           "503) in %.1f s; the gateway's peak resident memory %ld MiB -> %ld MiB\n",
           strlen(body) / 1e6, parts, refused, s_now() - t0, before, after);
    SW_CHECK_INT(refused, 16);
    SW_CHECK(before > 0 && after - before < 128);
    free(body);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    sw_test_memory_bounds(); /* the gateway's resident memory is bounded below */
    char relay_ep[64], listen[64], keyfile[256];
    snprintf(relay_ep, sizeof relay_ep, "tcp://127.0.0.1:%d", sw_test_free_port());
    s_port = sw_test_free_port();
    snprintf(listen, sizeof listen, "127.0.0.1:%d", s_port);
    snprintf(keyfile, sizeof keyfile, "%s", sw_test_log("api.keys"));
    FILE *kf = fopen(keyfile, "w");
    if (!kf)
        sw_test_skip("cannot write the key file");
    fprintf(kf, "limits-test-key-0123456789\n");
    fclose(kf);
    chmod(keyfile, 0600);
    char *ra[] = {(char *)sw_test_bin("shardwire-relay"), "--listen", relay_ep,
                  "--insecure-loopback", NULL};
    pid_t relay = sw_test_spawn(ra, sw_test_log("relay.log"));
    char *sa[] = {(char *)sw_test_bin("shardwire"),
                  "serve",
                  "--relay",
                  relay_ep,
                  "--insecure-loopback",
                  "--listen",
                  listen,
                  "--api-key-file",
                  keyfile,
                  "--idle-timeout-s",
                  SW_STR(IDLE_S),
                  NULL};
    pid_t serve = sw_test_spawn(sa, sw_test_log("serve.log"));
    int up = 0;
    for (int i = 0; i < 200 && !up; i++) {
        int fd = s_connect_from(1);
        up = fd >= 0;
        if (fd >= 0)
            close(fd);
        else
            usleep(100000);
    }
    SW_CHECK(up);
    if (up)
        s_slow_loris();
    if (up)
        s_json_memory(serve);
    sw_test_kill(serve);
    sw_test_kill(relay);
    return sw_test_done();
}
