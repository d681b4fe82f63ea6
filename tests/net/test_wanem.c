/*
 * test_wanem.c - the WAN emulator (tools/shardwire-wanem) measured from the
 * outside: the real binary proxies to echo and closing servers run by this
 * test, and the checks are on wall-clock times and bytes:
 *   - a small message's round trip is at least 2 * delay (and not much more),
 *   - 5 MB random streams on 3 concurrent connections come back byte-exact,
 *     through jitter, and each close travels through the proxy,
 *   - jitter spreads round trips but never reorders a stream,
 *   - 1 MB at 8000 kbit/s takes about a second, and arrives paced: most 20 ms
 *     windows carry about 20 kB, not bursts of a whole chunk and then nothing,
 *   - with --buffer-mib 1 and a server that never reads, the sender is held
 *     back (TCP backpressure) after far less than the default 64 MiB queue,
 *   - --flag=value is read as --flag value (the start line says so),
 *   - a server that closes closes the client; a refused upstream too,
 *   - libzmq (loaded at run time) DEALER -> proxy -> ROUTER works,
 *   - bad flags exit 2, SIGTERM exits 0.
 */
#include "rng.h"
#include "sw_test.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define STREAM_BYTES (5u * 1000 * 1000)
#define N_STREAMS 3

static char s_wanem_path[1024];

static double s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- sockets ---------------------------------------------------------------- */

/* A listening socket on 127.0.0.1 with a kernel-chosen port (*port). */
static int s_listen_any(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 64) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* A blocking client socket with 10 s send/receive timeouts, so no check can hang. */
static int s_dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}

static int s_send_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Reads exactly len bytes; -1 on error, timeout or early end of stream. */
static int s_recv_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len) {
        ssize_t n = recv(fd, p, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* ---- servers (threads) ------------------------------------------------------ */

static void *s_echo_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[65536];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || s_send_all(fd, buf, (size_t)n) != 0)
            break;
    }
    close(fd); // end of stream in: close out, so the client sees its close come back
    return NULL;
}

/* Echo server: one thread per connection, echoes until end of stream, then closes. */
static void *s_echo_server(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return NULL;
        }
        pthread_t t;
        if (pthread_create(&t, NULL, s_echo_conn, (void *)(intptr_t)fd) == 0)
            pthread_detach(t);
        else
            close(fd);
    }
}

/* Closing server: says "bye\n" and closes every connection at once. */
static void *s_bye_server(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return NULL;
        }
        (void)s_send_all(fd, "bye\n", 4);
        close(fd);
    }
}

/* ---- the proxy process ------------------------------------------------------ */

struct wanem_proc {
    pid_t pid;      // child process
    int err_fd;     // read end of its stderr
    int port;       // port it listens on
    char line[512]; // its start line
};

/*
 * Starts shardwire-wanem listening on 127.0.0.1:0 with the given extra flags
 * (NULL-terminated) and reads its start line for the port. Returns 0 or -1.
 */
static int s_wanem_start(struct wanem_proc *wp, int upstream_port, const char *const *flags)
{
    char listen_arg[64], connect_arg[64];
    snprintf(listen_arg, sizeof listen_arg, "127.0.0.1:0");
    snprintf(connect_arg, sizeof connect_arg, "127.0.0.1:%d", upstream_port);
    const char *argv[32];
    int argc = 0;
    argv[argc++] = s_wanem_path;
    argv[argc++] = "--listen";
    argv[argc++] = listen_arg;
    argv[argc++] = "--connect";
    argv[argc++] = connect_arg;
    for (int i = 0; flags[i] && argc < 30; i++)
        argv[argc++] = flags[i];
    argv[argc] = NULL;

    int pfd[2];
    if (pipe(pfd) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(pfd[1], STDERR_FILENO);
        close(pfd[0]);
        close(pfd[1]);
        execv(s_wanem_path, (char *const *)argv);
        _exit(127);
    }
    close(pfd[1]);
    wp->pid = pid;
    wp->err_fd = pfd[0];
    wp->port = -1;
    size_t len = 0;
    double t0 = s_now_ms();
    while (len + 1 < sizeof wp->line && !memchr(wp->line, '\n', len)) {
        struct pollfd p = {.fd = pfd[0], .events = POLLIN};
        if (poll(&p, 1, 200) < 0 && errno != EINTR)
            break;
        if (s_now_ms() - t0 > 5000)
            break;
        if (!(p.revents & (POLLIN | POLLHUP)))
            continue;
        ssize_t n = read(pfd[0], wp->line + len, sizeof wp->line - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        wp->line[len] = 0;
    }
    wp->line[len] = 0;
    const char *at = strstr(wp->line, "wanem: 127.0.0.1:");
    if (at)
        wp->port = atoi(at + strlen("wanem: 127.0.0.1:"));
    if (wp->port <= 0) {
        fprintf(stderr, "wanem did not start: %s\n", wp->line);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(pfd[0]);
        return -1;
    }
    return 0;
}

/* Waits up to timeout_ms for pid; returns its wait status or -1 (then it is killed). */
static int s_wait_pid(pid_t pid, int timeout_ms)
{
    double t0 = s_now_ms();
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return st;
        if (r < 0 || s_now_ms() - t0 > timeout_ms) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            return -1;
        }
        usleep(5000);
    }
}

/* SIGTERM must stop the proxy with exit status 0 within 3 s. */
static void s_wanem_stop(struct wanem_proc *wp)
{
    SW_CHECK_INT(kill(wp->pid, SIGTERM), 0);
    int st = s_wait_pid(wp->pid, 3000);
    SW_CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(wp->err_fd);
}

/* ---- checks ----------------------------------------------------------------- */

static void s_check_rtt(int echo_port)
{
    const char *flags[] = {"--delay-ms", "43", NULL};
    struct wanem_proc wp;
    SW_CHECK_INT(s_wanem_start(&wp, echo_port, flags), 0);
    if (wp.port <= 0)
        return;
    SW_CHECK(strstr(wp.line, "one-way 43 ms") != NULL);
    int fd = s_dial(wp.port);
    SW_CHECK(fd >= 0);
    enum { N = 15 };
    double rtt[N];
    int ok = 0;
    char msg[32], back[32];
    for (int i = 0; fd >= 0 && i < N; i++) {
        memset(msg, 'a' + i, sizeof msg);
        double t0 = s_now_ms();
        if (s_send_all(fd, msg, sizeof msg) != 0 || s_recv_all(fd, back, sizeof back) != 0)
            break;
        rtt[ok++] = s_now_ms() - t0;
        SW_CHECK(memcmp(msg, back, sizeof msg) == 0);
    }
    SW_CHECK_INT(ok, N);
    if (ok == N) {
        qsort(rtt, N, sizeof rtt[0], s_cmp_double);
        printf("rtt through delay 43 ms: min %.2f median %.2f max %.2f ms\n", rtt[0], rtt[N / 2],
               rtt[N - 1]);
        SW_CHECK(rtt[0] >= 86.0);            // strict: the latency is really added both ways
        SW_CHECK(rtt[N / 2] <= 86.0 + 40.0); // generous: shared, noisy machines
    }
    if (fd >= 0)
        close(fd);
    s_wanem_stop(&wp);
}

struct stream {
    int port;            // proxy port
    uint64_t seed;       // data seed
    unsigned char *data; // (STREAM_BYTES) sent
    unsigned char *back; // (STREAM_BYTES) received
    size_t got;          // bytes received before end of stream
    int send_rc;         // 0 when everything was sent
    int eof;             // 1 when the stream ended cleanly after the data
    int fd;              // connection
    uint64_t sum_sent;   // FNV-1a of data
    uint64_t sum_back;   // FNV-1a of back[0, got)
};

static uint64_t s_fnv(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void *s_stream_writer(void *arg)
{
    struct stream *s = arg;
    s->send_rc = s_send_all(s->fd, s->data, STREAM_BYTES);
    shutdown(s->fd, SHUT_WR); // the echo server then closes, and that close comes back
    return NULL;
}

static void *s_stream_run(void *arg)
{
    struct stream *s = arg;
    sw_rng_t rng;
    sw_rng_seed(&rng, s->seed);
    for (size_t i = 0; i < STREAM_BYTES; i += 8) {
        uint64_t v = sw_rng_next(&rng);
        size_t n = STREAM_BYTES - i < 8 ? STREAM_BYTES - i : 8;
        memcpy(s->data + i, &v, n);
    }
    s->sum_sent = s_fnv(s->data, STREAM_BYTES);
    s->fd = s_dial(s->port);
    s->send_rc = -1;
    if (s->fd < 0)
        return NULL;
    pthread_t wt;
    if (pthread_create(&wt, NULL, s_stream_writer, s) != 0) {
        close(s->fd);
        return NULL;
    }
    for (;;) {
        size_t room = STREAM_BYTES - s->got;
        unsigned char extra;
        ssize_t n = recv(s->fd, room ? s->back + s->got : &extra, room ? room : 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0)
            s->eof = 1;
        if (n <= 0)
            break;
        if (!room) {
            s->got++; // more bytes than were sent: counted, never stored
            break;
        }
        s->got += (size_t)n;
    }
    pthread_join(wt, NULL);
    close(s->fd);
    s->sum_back = s_fnv(s->back, s->got < STREAM_BYTES ? s->got : STREAM_BYTES);
    return NULL;
}

static void s_check_integrity(int echo_port)
{
    const char *flags[] = {"--delay-ms", "5", "--jitter-ms", "3", "--seed", "7", NULL};
    struct wanem_proc wp;
    SW_CHECK_INT(s_wanem_start(&wp, echo_port, flags), 0);
    if (wp.port <= 0)
        return;
    struct stream st[N_STREAMS];
    pthread_t th[N_STREAMS];
    double t0 = s_now_ms();
    for (int k = 0; k < N_STREAMS; k++) {
        st[k] = (struct stream){.port = wp.port, .seed = 1000u + (uint64_t)k};
        st[k].data = malloc(STREAM_BYTES);
        st[k].back = malloc(STREAM_BYTES);
        SW_CHECK(st[k].data && st[k].back);
        if (!st[k].data || !st[k].back)
            return;
        SW_CHECK_INT(pthread_create(&th[k], NULL, s_stream_run, &st[k]), 0);
    }
    for (int k = 0; k < N_STREAMS; k++)
        pthread_join(th[k], NULL);
    double dt = s_now_ms() - t0;
    for (int k = 0; k < N_STREAMS; k++) {
        SW_CHECK_INT(st[k].send_rc, 0);
        SW_CHECK_INT(st[k].got, STREAM_BYTES);
        SW_CHECK_INT(st[k].eof, 1);
        SW_CHECK(st[k].sum_back == st[k].sum_sent);
        SW_CHECK(memcmp(st[k].data, st[k].back, STREAM_BYTES) == 0);
        printf("stream %d: %zu bytes back, fnv %016llx sent %016llx\n", k, st[k].got,
               (unsigned long long)st[k].sum_back, (unsigned long long)st[k].sum_sent);
        free(st[k].data);
        free(st[k].back);
    }
    printf("integrity: %d x %u bytes echoed through delay 5 +- 3 ms in %.0f ms\n", N_STREAMS,
           STREAM_BYTES, dt);
    s_wanem_stop(&wp);
}

static void s_check_jitter_order(int echo_port)
{
    const char *flags[] = {"--delay-ms", "20", "--jitter-ms", "15", NULL};
    struct wanem_proc wp;
    SW_CHECK_INT(s_wanem_start(&wp, echo_port, flags), 0);
    if (wp.port <= 0)
        return;
    int fd = s_dial(wp.port);
    SW_CHECK(fd >= 0);
    if (fd < 0) {
        s_wanem_stop(&wp);
        return;
    }
    // 200 numbered 8-byte messages 1 ms apart; the echo reader checks their order.
    enum { N = 200 };
    double sent_at[N];
    double rtt_min = 1e9, rtt_max = 0;
    int in_order = 1, got = 0;
    for (int i = 0; i < N; i++) {
        uint64_t v = (uint64_t)i * 0x9e3779b97f4a7c15ull;
        sent_at[i] = s_now_ms();
        if (s_send_all(fd, &v, sizeof v) != 0)
            break;
        // Read whatever came back meanwhile without blocking.
        for (;;) {
            uint64_t r;
            ssize_t n = recv(fd, &r, sizeof r, MSG_DONTWAIT | MSG_PEEK);
            if (n != (ssize_t)sizeof r)
                break;
            if (s_recv_all(fd, &r, sizeof r) != 0)
                break;
            double rtt = s_now_ms() - sent_at[got];
            rtt_min = rtt < rtt_min ? rtt : rtt_min;
            rtt_max = rtt > rtt_max ? rtt : rtt_max;
            if (r != (uint64_t)got * 0x9e3779b97f4a7c15ull)
                in_order = 0;
            got++;
        }
        usleep(1000);
    }
    while (got < N) {
        uint64_t r;
        if (s_recv_all(fd, &r, sizeof r) != 0)
            break;
        double rtt = s_now_ms() - sent_at[got];
        rtt_min = rtt < rtt_min ? rtt : rtt_min;
        rtt_max = rtt > rtt_max ? rtt : rtt_max;
        if (r != (uint64_t)got * 0x9e3779b97f4a7c15ull)
            in_order = 0;
        got++;
    }
    printf("jitter 20 +- 15 ms: %d messages in order %d, rtt min %.2f max %.2f ms\n", got, in_order,
           rtt_min, rtt_max);
    SW_CHECK_INT(got, N);
    SW_CHECK_INT(in_order, 1);
    SW_CHECK(rtt_min >= 2 * (20.0 - 15.0));
    SW_CHECK(rtt_max <= 2 * (20.0 + 15.0) + 40.0);
    SW_CHECK(rtt_max - rtt_min >= 5.0); // jitter really varies the latency
    close(fd);
    s_wanem_stop(&wp);
}

struct sender {
    int fd;           // connection
    const void *data; // bytes to send
    size_t len;       // bytes
    int rc;           // 0 when all sent
};

static void *s_sender(void *arg)
{
    struct sender *s = arg;
    s->rc = s_send_all(s->fd, s->data, s->len);
    return NULL;
}

static void s_check_rate(int echo_port)
{
    const char *flags[] = {"--delay-ms", "10", "--rate-kbps", "8000", NULL};
    struct wanem_proc wp;
    SW_CHECK_INT(s_wanem_start(&wp, echo_port, flags), 0);
    if (wp.port <= 0)
        return;
    const size_t len = 1000 * 1000; // 8 Mbit: 1 s at 8000 kbit/s in each direction
    unsigned char *data = malloc(len), *back = malloc(len);
    int fd = s_dial(wp.port);
    SW_CHECK(data && back && fd >= 0);
    if (data && back && fd >= 0) {
        for (size_t i = 0; i < len; i++)
            data[i] = (unsigned char)(i * 131u + (i >> 9));
        struct sender snd = {.fd = fd, .data = data, .len = len, .rc = -1};
        pthread_t t;
        double t0 = s_now_ms();
        SW_CHECK_INT(pthread_create(&t, NULL, s_sender, &snd), 0);
        /* bytes received per 20 ms window from t0 (how the pacing looks) */
        enum { WIN_MS = 20, N_WIN = 400 };
        static size_t win[N_WIN];
        memset(win, 0, sizeof win);
        size_t got = 0;
        int rc = 0;
        while (got < len) {
            ssize_t n = recv(fd, back + got, len - got, 0);
            if (n <= 0) {
                rc = -1;
                break;
            }
            got += (size_t)n;
            int w = (int)((s_now_ms() - t0) / WIN_MS);
            win[w < N_WIN ? w : N_WIN - 1] += (size_t)n;
        }
        double dt = s_now_ms() - t0;
        /* the windows between the first bytes and the last: paced means most
         * of them carry 20 kB give or take (1/4..2x); bursts of 64 kB chunks
         * every 64 ms would leave most windows empty or at 64 kB */
        int first = 0, last = N_WIN - 1, paced = 0, n_win = 0;
        while (first < N_WIN && !win[first])
            first++;
        while (last > first && !win[last])
            last--;
        for (int w = first + 1; w < last; w++, n_win++)
            paced += win[w] >= 5000 && win[w] <= 40000;
        printf("pacing: %d of %d windows of 20 ms carried 5-40 kB\n", paced, n_win);
        SW_CHECK(n_win >= 20 && paced * 10 >= n_win * 7);
        pthread_join(t, NULL);
        SW_CHECK_INT(rc, 0);
        SW_CHECK_INT(snd.rc, 0);
        SW_CHECK(memcmp(data, back, len) == 0);
        printf("rate 8000 kbit/s: 1 MB echoed in %.0f ms (%.0f kbit/s)\n", dt,
               8.0 * (double)len / dt);
        SW_CHECK(dt >= 900.0);  // the cap holds (10% tolerance)
        SW_CHECK(dt <= 4000.0); // and the pacing is not grossly slower than the cap
    }
    if (fd >= 0)
        close(fd);
    free(data);
    free(back);
    s_wanem_stop(&wp);
}

/* --buffer-mib 1 in front of a server that accepts nothing and reads nothing:
 * the proxy stops reading once 1 MiB is queued, so what a non-blocking
 * sender gets rid of is that MiB plus the kernel's socket buffers on the
 * way (a few MiB each on loopback), far below the default queue of 64 MiB;
 * without the limit the proxy would take everything offered (256 MiB). */
static void s_check_backpressure(void)
{
    int port = 0, lfd = s_listen_any(&port); /* never accepted, never read */
    const char *flags[] = {"--delay-ms", "1", "--buffer-mib", "1", NULL};
    struct wanem_proc wp;
    SW_CHECK(lfd >= 0);
    if (lfd < 0 || s_wanem_start(&wp, port, flags) != 0) {
        SW_CHECK(!"the proxy started");
        if (lfd >= 0)
            close(lfd);
        return;
    }
    int fd = s_dial(wp.port);
    SW_CHECK(fd >= 0);
    size_t sent = 0;
    const size_t cap = (size_t)256 << 20;
    static unsigned char chunk[1 << 16];
    if (fd >= 0) {
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        while (sent < cap) {
            ssize_t n = send(fd, chunk, sizeof chunk, MSG_NOSIGNAL);
            if (n > 0) {
                sent += (size_t)n;
                continue;
            }
            if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
                break;
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            if (poll(&p, 1, 1500) == 0)
                break; /* held back for 1.5 s: the backpressure reached the sender */
        }
        close(fd);
    }
    printf("backpressure: --buffer-mib 1 let %.1f MiB through before the sender was held\n",
           (double)sent / (1 << 20));
    SW_CHECK(sent > ((size_t)1 << 20) && sent < ((size_t)40 << 20));
    s_wanem_stop(&wp);
    close(lfd);
}

/* --flag=value is --flag value: the start line shows the values. */
static void s_check_flag_equals(int echo_port)
{
    const char *flags[] = {"--delay-ms=7.5", "--jitter-ms=2", "--seed=42", "--buffer-mib=3", NULL};
    struct wanem_proc wp;
    SW_CHECK_INT(s_wanem_start(&wp, echo_port, flags), 0);
    if (wp.port <= 0)
        return;
    SW_CHECK(strstr(wp.line, "one-way 7.5 ms") && strstr(wp.line, "jitter +-2 ms") &&
             strstr(wp.line, "seed 42") && strstr(wp.line, "buffer 3 MiB"));
    if (!strstr(wp.line, "seed 42"))
        fprintf(stderr, "start line: %s", wp.line);
    s_wanem_stop(&wp);
}

/* Waits up to timeout_ms for the end of fd's stream; returns the ms it took or -1. */
static double s_wait_closed(int fd, int timeout_ms, double t0)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    for (;;) {
        double left = timeout_ms - (s_now_ms() - t0);
        if (left <= 0)
            return -1;
        int rc = poll(&p, 1, (int)left + 1);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            return -1;
        char c;
        ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            return s_now_ms() - t0;
        if (n > 0)
            return -2; // unexpected data
    }
}

static void s_check_close(int bye_port)
{
    const char *flags[] = {"--delay-ms", "20", NULL};
    struct wanem_proc wp;
    SW_CHECK_INT(s_wanem_start(&wp, bye_port, flags), 0);
    if (wp.port <= 0)
        return;
    double t0 = s_now_ms();
    int fd = s_dial(wp.port);
    SW_CHECK(fd >= 0);
    if (fd >= 0) {
        char bye[4];
        SW_CHECK_INT(s_recv_all(fd, bye, 4), 0);
        double t_bye = s_now_ms() - t0;
        SW_CHECK(memcmp(bye, "bye\n", 4) == 0);
        double t_eof = s_wait_closed(fd, 3000, t0);
        printf("closing server: data after %.2f ms, close after %.2f ms (delay 20 ms)\n", t_bye,
               t_eof);
        SW_CHECK(t_bye >= 20.0);
        SW_CHECK(t_eof >= 20.0); // the close travels the link too
        SW_CHECK(t_eof <= 3000.0);
        close(fd);
    }
    s_wanem_stop(&wp);

    // A port nobody listens on: the proxy accepts, the dial fails, the client is closed.
    int dead_port = 0;
    int lfd = s_listen_any(&dead_port);
    SW_CHECK(lfd >= 0);
    if (lfd < 0)
        return;
    close(lfd);
    SW_CHECK_INT(s_wanem_start(&wp, dead_port, flags), 0);
    if (wp.port <= 0)
        return;
    t0 = s_now_ms();
    fd = s_dial(wp.port);
    SW_CHECK(fd >= 0);
    if (fd >= 0) {
        double t = s_wait_closed(fd, 3000, t0);
        printf("refused upstream: client closed after %.2f ms\n", t);
        SW_CHECK(t >= 0);
        close(fd);
    }
    s_wanem_stop(&wp);
}

static void s_check_bad_flags(void)
{
    static const char *const cases[][8] = {
        {"--listen", "127.0.0.1:0", "--connect", "127.0.0.1:1", NULL}, // no --delay-ms
        {"--listen", "127.0.0.1:0", "--connect", "127.0.0.1:1", "--delay-ms", "-3", NULL},
        {"--listen", "127.0.0.1:0", "--connect", "127.0.0.1:1", "--delay-ms", "3", "--jitter-ms",
         "4"},
        {"--listen", "127.0.0.1", "--connect", "127.0.0.1:1", "--delay-ms", "3", NULL},
        {"--listen", "127.0.0.1:0", "--connect", "127.0.0.1:1", "--delay-ms", "3", "--rate-kbps",
         "fast"},
        {"--bogus", NULL},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *argv[10] = {s_wanem_path};
        for (int i = 0; i < 8 && cases[c][i]; i++)
            argv[i + 1] = cases[c][i];
        int pfd[2];
        if (pipe(pfd) != 0)
            continue;
        pid_t pid = fork();
        if (pid == 0) {
            dup2(pfd[1], STDERR_FILENO);
            close(pfd[0]);
            close(pfd[1]);
            execv(s_wanem_path, (char *const *)argv);
            _exit(127);
        }
        close(pfd[1]);
        int st = s_wait_pid(pid, 3000);
        char err[512] = {0};
        ssize_t n = read(pfd[0], err, sizeof err - 1);
        close(pfd[0]);
        SW_CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 2);
        // One line, naming the program.
        SW_CHECK(n > 0 && strncmp(err, "shardwire-wanem: ", 17) == 0 &&
                 strchr(err, '\n') == err + n - 1);
        if (c == 0)
            printf("bad flags, e.g.: %s", err);
    }
}

/* ---- ZeroMQ through the proxy (libzmq loaded at run time) --------------------- */

struct zmq_api {
    void *(*ctx_new)(void);
    int (*ctx_term)(void *);
    void *(*socket)(void *, int);
    int (*close)(void *);
    int (*setsockopt)(void *, int, const void *, size_t);
    int (*getsockopt)(void *, int, void *, size_t *);
    int (*bind)(void *, const char *);
    int (*connect)(void *, const char *);
    int (*send)(void *, const void *, size_t, int);
    int (*recv)(void *, void *, size_t, int);
};

static int s_zmq_load(struct zmq_api *z)
{
    void *lib = dlopen("libzmq.so.5", RTLD_NOW);
    if (!lib)
        return -1;
    // Function pointers come back from dlsym as void *; memcpy avoids the ISO C cast warning.
    struct {
        const char *name;
        void *slot;
    } syms[] = {
        {"zmq_ctx_new", &z->ctx_new},
        {"zmq_ctx_term", &z->ctx_term},
        {"zmq_socket", &z->socket},
        {"zmq_close", &z->close},
        {"zmq_setsockopt", &z->setsockopt},
        {"zmq_getsockopt", &z->getsockopt},
        {"zmq_bind", &z->bind},
        {"zmq_connect", &z->connect},
        {"zmq_send", &z->send},
        {"zmq_recv", &z->recv},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *f = dlsym(lib, syms[i].name);
        if (!f)
            return -1;
        memcpy(syms[i].slot, &f, sizeof f);
    }
    return 0;
}

static void s_check_zmq(void)
{
    struct zmq_api z;
    if (s_zmq_load(&z) != 0) {
        printf("zmq: libzmq.so.5 not loadable, ZeroMQ check not run\n");
        return;
    }
    void *ctx = z.ctx_new();
    void *router = ctx ? z.socket(ctx, ZMQ_ROUTER) : NULL;
    void *dealer = ctx ? z.socket(ctx, ZMQ_DEALER) : NULL;
    SW_CHECK(router && dealer);
    if (!router || !dealer)
        return;
    int zero = 0, tmo = 5000;
    for (int i = 0; i < 2; i++) {
        void *s = i ? dealer : router;
        z.setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
        z.setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
        z.setsockopt(s, ZMQ_SNDTIMEO, &tmo, sizeof tmo);
    }
    SW_CHECK_INT(z.bind(router, "tcp://127.0.0.1:*"), 0);
    char ep[256] = {0};
    size_t ep_len = sizeof ep;
    SW_CHECK_INT(z.getsockopt(router, ZMQ_LAST_ENDPOINT, ep, &ep_len), 0);
    const char *colon = strrchr(ep, ':');
    int router_port = colon ? atoi(colon + 1) : 0;
    SW_CHECK(router_port > 0);

    const char *flags[] = {"--delay-ms", "20", NULL};
    struct wanem_proc wp;
    if (router_port <= 0 || s_wanem_start(&wp, router_port, flags) != 0) {
        SW_CHECK(0);
        goto out;
    }
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", wp.port);
    SW_CHECK_INT(z.connect(dealer, url), 0);
    double rtt[3] = {0};
    for (int round = 0; round < 3; round++) {
        char msg[16], id[256], body[16];
        int len = snprintf(msg, sizeof msg, "ping %d", round);
        double t0 = s_now_ms();
        SW_CHECK_INT(z.send(dealer, msg, (size_t)len, 0), len);
        int id_len = z.recv(router, id, sizeof id, 0);
        int body_len = z.recv(router, body, sizeof body, 0);
        SW_CHECK(id_len > 0 && body_len == len && memcmp(body, msg, (size_t)len) == 0);
        if (id_len <= 0)
            break;
        msg[1] = 'o'; // "pong n"
        SW_CHECK_INT(z.send(router, id, (size_t)id_len, ZMQ_SNDMORE), id_len);
        SW_CHECK_INT(z.send(router, msg, (size_t)len, 0), len);
        int back = z.recv(dealer, body, sizeof body, 0);
        rtt[round] = s_now_ms() - t0;
        SW_CHECK(back == len && memcmp(body, msg, (size_t)len) == 0);
    }
    printf("zmq DEALER -> wanem(20 ms) -> ROUTER: rtt %.2f (with handshake), %.2f, %.2f ms\n",
           rtt[0], rtt[1], rtt[2]);
    SW_CHECK(rtt[1] >= 40.0 && rtt[2] >= 40.0);
    SW_CHECK(rtt[1] <= 40.0 + 40.0 && rtt[2] <= 40.0 + 40.0);
    s_wanem_stop(&wp);
out:
    z.close(dealer);
    z.close(router);
    z.ctx_term(ctx);
}

int main(void)
{
    const char *bin = sw_test_env("SW_BIN_DIR");
    snprintf(s_wanem_path, sizeof s_wanem_path, "%s/shardwire-wanem", bin);
    if (access(s_wanem_path, X_OK) != 0)
        sw_test_skip("shardwire-wanem is not built");
    signal(SIGPIPE, SIG_IGN);

    int echo_port = 0, bye_port = 0;
    int echo_fd = s_listen_any(&echo_port);
    int bye_fd = s_listen_any(&bye_port);
    SW_CHECK(echo_fd >= 0 && bye_fd >= 0);
    if (echo_fd < 0 || bye_fd < 0)
        return sw_test_done();
    pthread_t t1, t2; // they serve until the process exits
    SW_CHECK_INT(pthread_create(&t1, NULL, s_echo_server, (void *)(intptr_t)echo_fd), 0);
    SW_CHECK_INT(pthread_create(&t2, NULL, s_bye_server, (void *)(intptr_t)bye_fd), 0);
    pthread_detach(t1);
    pthread_detach(t2);

    double t0 = s_now_ms();
    s_check_bad_flags();
    s_check_rtt(echo_port);
    s_check_integrity(echo_port);
    s_check_jitter_order(echo_port);
    s_check_rate(echo_port);
    s_check_backpressure();
    s_check_flag_equals(echo_port);
    s_check_close(bye_port);
    s_check_zmq();
    printf("total %.1f s\n", (s_now_ms() - t0) / 1e3);
    return sw_test_done();
}
