/*
 * test_relay_limits.c - connection hygiene of a keyed shardwire-relay process
 * (real relay, real TCP connections, CURVE on):
 *
 *  - refused handshakes are logged a few lines a minute, not one line each
 *    (a stream of refusals cannot flood the log);
 *  - a crowd of idle and half-greeting TCP connections cannot lock the relay:
 *    with a low soft open-file limit the relay raises it to the hard limit and
 *    serves at once; with a low hard limit too, the short handshake timeout
 *    frees the slots and a real client gets in within seconds.
 */
#include "keys.h"
#include "sw_test.h"

#include <zmq.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char s_dir[64];
static char s_ep[64];
static int s_port;

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static const char *s_path(const char *name, const char *ext)
{
    static char buf[8][256];
    static int slot;
    char *p = buf[slot++ % 8];
    snprintf(p, 256, "%s/%s%s", s_dir, name, ext);
    return p;
}

/* Starts the relay with its open-file limit set to soft / hard first. */
static pid_t s_relay_limited(rlim_t soft, rlim_t hard, const char *log)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    setpgid(0, 0);
    struct rlimit rl = {soft, hard};
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        _exit(126);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
    }
    char *argv[] = {(char *)sw_test_bin("shardwire-relay"),
                    "--listen",
                    s_ep,
                    "--key",
                    (char *)s_path("relay", ".key"),
                    "--allow",
                    (char *)s_path("allow.txt", ""),
                    NULL};
    execv(argv[0], argv);
    _exit(127);
}

/* n TCP connections to the relay; every other one sends the first 10 bytes of a
 * ZMTP greeting and stops there. The fds go into fds (the count opened is returned). */
static int s_crowd(int *fds, int n)
{
    int opened = 0;
    for (int i = 0; i < n; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s_port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd < 0)
            break;
        fcntl(fd, F_SETFL, O_NONBLOCK);
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 && errno != EINPROGRESS) {
            close(fd);
            continue;
        }
        if (i % 2) {
            static const unsigned char greet[10] = {0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f};
            usleep(1000);
            if (write(fd, greet, sizeof greet) < 0 && errno != EAGAIN)
                SW_CHECK(0);
        }
        fds[opened++] = fd;
    }
    return opened;
}

/* Seconds until `shardwire status` with the client's keys gets an answer (up to limit_s), or -1. */
static double s_time_to_status(double limit_s)
{
    double t0 = s_now();
    char *argv[] = {(char *)sw_test_bin("shardwire"), "status", "--relay", s_ep, NULL};
    while (s_now() - t0 < limit_s) {
        if (sw_test_run(argv, 10, NULL, NULL) == 0)
            return s_now() - t0;
        usleep(200000);
    }
    return -1;
}

/* CPU seconds the process has used (user + system). */
static double s_cpu_s(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    char *t = sw_test_read_file(path, NULL);
    if (!t)
        return -1;
    const char *p = strrchr(t, ')');
    unsigned long ut = 0, st = 0;
    /* fields after the comm: state(3) ... utime(14) stime(15) */
    if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        ut = st = 0;
    free(t);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int s_count_lines(const char *log, const char *needle)
{
    char *t = sw_test_read_file(log, NULL);
    int n = 0;
    for (const char *p = t; p && (p = strstr(p, needle)); p += strlen(needle))
        n++;
    free(t);
    return n;
}

/* Refused handshakes: 20 sockets with an unknown key redial every 100 ms for 3 s. */
static void s_refusals(void)
{
    const char *log = sw_test_log("refused.log");
    pid_t relay = sw_test_relay(s_ep, s_dir, log, NULL);
    SW_CHECK(s_time_to_status(10) >= 0);
    void *ctx = zmq_ctx_new();
    void *socks[20];
    char pub[41], sec[41], relay_pub[41], err[256];
    SW_CHECK_INT(sw_keys_load_secret(s_path("outsider", ".key"), pub, sec, err, sizeof err), 0);
    SW_CHECK_INT(sw_keys_load_public(s_path("relay", ".pub"), relay_pub, err, sizeof err), 0);
    for (int i = 0; i < 20; i++) {
        socks[i] = zmq_socket(ctx, ZMQ_DEALER);
        int zero = 0, ivl = 100;
        zmq_setsockopt(socks[i], ZMQ_LINGER, &zero, sizeof zero);
        zmq_setsockopt(socks[i], ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
        zmq_setsockopt(socks[i], ZMQ_RECONNECT_IVL_MAX, &ivl, sizeof ivl);
        zmq_setsockopt(socks[i], ZMQ_CURVE_SERVERKEY, relay_pub, 41);
        zmq_setsockopt(socks[i], ZMQ_CURVE_PUBLICKEY, pub, 41);
        zmq_setsockopt(socks[i], ZMQ_CURVE_SECRETKEY, sec, 41);
        zmq_connect(socks[i], s_ep);
    }
    sleep(3);
    for (int i = 0; i < 20; i++)
        zmq_close(socks[i]);
    zmq_ctx_term(ctx);
    /* the relay still serves, and the log holds a handful of lines, not hundreds */
    SW_CHECK(s_time_to_status(5) >= 0);
    sw_test_kill(relay);
    int lines = s_count_lines(log, "refused a connection");
    int summary = s_count_lines(log, "more handshakes in the last");
    printf("refused-handshake log: %d lines for 20 sockets redialling for 3 s\n", lines);
    SW_CHECK(lines >= 1 && lines <= 5);
    SW_CHECK(summary <= 1);
    char *t = sw_test_read_file(log, NULL);
    SW_CHECK(t && strstr(t, "one summary line"));
    free(t);
}

/* A crowd of idle / half-greeting connections against a relay with a low open-file limit. */
static void s_crowd_case(rlim_t soft, rlim_t hard, int n_conn, double limit_s, const char *what)
{
    char log[512];
    snprintf(log, sizeof log, "%s", sw_test_log(what)); /* one log per case */
    pid_t relay = s_relay_limited(soft, hard, log);
    SW_CHECK(s_time_to_status(10) >= 0);
    int *fds = calloc((size_t)n_conn, sizeof *fds);
    int opened = s_crowd(fds, n_conn);
    SW_CHECK_INT(opened, n_conn);
    usleep(300000);
    double cpu0 = s_cpu_s(relay), t0 = s_now();
    double dt = s_time_to_status(limit_s);
    double cpu = (s_cpu_s(relay) - cpu0) / (s_now() - t0);
    printf("%s: %d idle / half-greeting connections, soft limit %llu, hard %llu: a client got "
           "in after %.2f s; relay CPU %.0f %% meanwhile\n",
           what, opened, (unsigned long long)soft, (unsigned long long)hard, dt, cpu * 100);
    SW_CHECK(dt >= 0 && dt < limit_s);
    for (int i = 0; i < opened; i++)
        close(fds[i]);
    free(fds);
    SW_CHECK(waitpid(relay, NULL, WNOHANG) == 0);
    sw_test_kill(relay);
}

int main(void)
{
    char e[256];
    if (sw_keys_curve_check(e, sizeof e) != 0)
        sw_test_skip(e);
    signal(SIGPIPE, SIG_IGN);
    snprintf(s_dir, sizeof s_dir, "%s", sw_test_tmpdir());
    s_port = sw_test_free_port();
    snprintf(s_ep, sizeof s_ep, "tcp://127.0.0.1:%d", s_port);
    const char *clients[] = {"client", NULL};
    SW_CHECK_INT(sw_test_keys(s_dir, NULL, clients), 0);
    char *kg[] = {(char *)sw_test_bin("shardwire"), "keygen", "--out",
                  (char *)s_path("outsider", ""), NULL};
    SW_CHECK_INT(sw_test_run(kg, 20, NULL, NULL), 0);
    sw_test_client_env(s_dir, "client");

    s_refusals();
    /* soft limit low, hard limit high: raised at start, the crowd does not matter */
    s_crowd_case(64, 4096, 200, 3.0, "soft-limit");
    /* both low: the handshake timeout frees the slots within seconds (libzmq's default: 30 s) */
    s_crowd_case(96, 96, 200, 12.0, "hard-limit");

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", s_dir);
    return sw_test_done();
}
