/*
 * wanem.c - the proxy loop of the WAN emulator (see wanem.h).
 *
 * Each accepted connection is a pair of sockets (client, upstream) and two
 * directions. A direction is a FIFO of chunks, one per read(), each stamped
 * with the times its first and last byte may leave:
 *
 *   release = max(previous release, arrival + delay + jitter)   (no reordering)
 *   start   = max(release, link free)                           (link busy)
 *   end     = start + len * 8 / rate                            (serialisation)
 *
 * Between start and end a chunk's bytes become writable linearly, so a large
 * read is paced instead of leaving in one burst. End of stream is a chunk of
 * length 0 queued the same way; when it comes due the destination gets
 * shutdown(SHUT_WR). A direction stops reading its source while its queue
 * holds buffer_max bytes or more (TCP backpressure does the rest).
 *
 * A failed write means the destination is gone: that direction drops its queue
 * and stops reading; the other direction still delivers what it holds (the
 * reply a server sent before closing), then the pair is closed.
 */
#include "wanem.h"

#include "log.h"
#include "rng.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WANEM_READ_MAX (64 * 1024) // bytes per read(), so one chunk is at most this
#define WANEM_READS_PER_WAKE 16    // reads per socket per loop turn, for fairness
#define WANEM_ACCEPTS_PER_WAKE 64
#define WANEM_ACCEPT_BACKOFF_NS (100u * 1000 * 1000) // pause accepting after EMFILE

struct chunk {
    struct chunk *next;
    uint64_t start_ns;    // monotonic time the first byte may leave
    uint64_t end_ns;      // monotonic time the last byte may leave (== start_ns if unpaced)
    uint32_t len;         // payload bytes; 0 marks end of stream
    uint32_t off;         // payload bytes already written
    unsigned char data[]; // (len) bytes
};

struct dir {
    struct chunk *head;       // oldest queued chunk, NULL when empty
    struct chunk *tail;       // newest queued chunk
    uint64_t queued;          // payload bytes queued and not yet written
    uint64_t last_release_ns; // latency release time of the newest chunk
    uint64_t link_free_ns;    // time the emulated link finishes the queued bytes
    uint64_t bytes;           // payload bytes delivered so far (for the close log line)
    bool rd_closed;           // source gave EOF or an error, or the direction failed
    bool wr_closed;           // EOF delivered (or destination failed): nothing more to write
    bool blocked;             // last write hit a full socket buffer: wait for POLLOUT
};

/* dir[i] reads fd[i] and writes fd[1 - i]; fd[0] is the client, fd[1] the upstream. */
struct pair {
    int fd[2];         // client and upstream sockets, -1 once closed
    bool connecting;   // upstream connect() still in progress
    struct dir dir[2]; // client->upstream, upstream->client
    uint64_t id;       // accept order, for log lines
};

struct wanem {
    struct wanem_config cfg;           // copy of the caller's configuration
    int listen_fd;                     // listening socket
    struct sockaddr_storage bound;     // address actually bound
    socklen_t bound_len;               // bytes of bound in use
    struct pair **pairs;               // (n_pairs) live connections
    size_t n_pairs;                    // live connections
    size_t cap_pairs;                  // allocated slots of pairs
    struct pollfd *pfds;               // (1 + 2 * cap_pairs) poll set, rebuilt every turn
    uint64_t accepted;                 // connections accepted so far
    uint64_t accept_resume_ns;         // accepting paused until this time (fd exhaustion)
    sw_rng_t rng;                      // jitter stream
    unsigned char buf[WANEM_READ_MAX]; // read buffer
};

static uint64_t s_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- addresses ------------------------------------------------------------ */

int wanem_parse_addr(const char *text, struct sockaddr_storage *addr, socklen_t *len, char *err,
                     size_t err_size)
{
    char host[256];
    const char *port;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (!close || close[1] != ':') {
            snprintf(err, err_size, "bad address '%s' (want [v6addr]:port)", text);
            return -1;
        }
        size_t n = (size_t)(close - text - 1);
        if (n == 0 || n >= sizeof host) {
            snprintf(err, err_size, "bad address '%s' (host too long or empty)", text);
            return -1;
        }
        memcpy(host, text + 1, n);
        host[n] = 0;
        port = close + 2;
    } else {
        const char *colon = strrchr(text, ':');
        if (!colon) {
            snprintf(err, err_size, "bad address '%s' (want host:port)", text);
            return -1;
        }
        size_t n = (size_t)(colon - text);
        if (n == 0 || n >= sizeof host) {
            snprintf(err, err_size, "bad address '%s' (host too long or empty)", text);
            return -1;
        }
        memcpy(host, text, n);
        host[n] = 0;
        port = colon + 1;
    }
    char *end;
    errno = 0;
    unsigned long p = strtoul(port, &end, 10);
    if (!port[0] || *end || errno || p > 65535 || port[0] == '-' || port[0] == '+') {
        snprintf(err, err_size, "bad port in '%s' (want 0..65535)", text);
        return -1;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0 || !res) {
        snprintf(err, err_size, "cannot resolve '%s': %s", host, gai_strerror(rc));
        return -1;
    }
    if (res->ai_addrlen > sizeof *addr) {
        freeaddrinfo(res);
        snprintf(err, err_size, "address of '%s' too long", host);
        return -1;
    }
    memset(addr, 0, sizeof *addr);
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

void wanem_format_addr(const struct sockaddr *addr, socklen_t len, char *buf, size_t size)
{
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (getnameinfo(addr, len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(buf, size, "?");
        return;
    }
    if (addr->sa_family == AF_INET6)
        snprintf(buf, size, "[%s]:%s", host, serv);
    else
        snprintf(buf, size, "%s:%s", host, serv);
}

/* ---- queues ----------------------------------------------------------------- */

static void s_dir_clear(struct dir *d)
{
    struct chunk *c = d->head;
    while (c) {
        struct chunk *next = c->next;
        free(c);
        c = next;
    }
    d->head = d->tail = NULL;
    d->queued = 0;
}

/* Latency of the next chunk: delay plus a uniform jitter in [-J, +J], never below 0. */
static uint64_t s_latency_ns(wanem_t *w)
{
    if (w->cfg.jitter_ns == 0)
        return w->cfg.delay_ns;
    double j = (2.0 * sw_rng_uniform(&w->rng) - 1.0) * (double)w->cfg.jitter_ns;
    double lat = (double)w->cfg.delay_ns + j;
    return lat <= 0 ? 0 : (uint64_t)lat;
}

/* Queues len bytes (len 0: end of stream) that arrived at now. Returns 0 or -1 (no memory). */
static int s_dir_push(wanem_t *w, struct dir *d, const unsigned char *data, uint32_t len,
                      uint64_t now)
{
    struct chunk *c = malloc(sizeof *c + len);
    if (!c)
        return -1;
    uint64_t release = now + s_latency_ns(w);
    if (release < d->last_release_ns)
        release = d->last_release_ns;
    d->last_release_ns = release;
    c->start_ns = release;
    if (w->cfg.rate_kbps) {
        if (c->start_ns < d->link_free_ns)
            c->start_ns = d->link_free_ns;
        // len * 8 bits at rate_kbps * 1000 bit/s, in ns, rounded up; len < 2^17 and
        // rate >= 1 keep the product far below 2^64.
        uint64_t ser = ((uint64_t)len * 8000000u + w->cfg.rate_kbps - 1) / w->cfg.rate_kbps;
        c->end_ns = c->start_ns + ser;
        d->link_free_ns = c->end_ns;
    } else {
        c->end_ns = c->start_ns;
    }
    c->len = len;
    c->off = 0;
    c->next = NULL;
    if (len)
        memcpy(c->data, data, len);
    if (d->tail)
        d->tail->next = c;
    else
        d->head = c;
    d->tail = c;
    d->queued += len;
    return 0;
}

/* Bytes of c the link has let through by time t (0..len). */
static uint32_t s_chunk_allowed(const struct chunk *c, uint64_t t)
{
    if (t < c->start_ns)
        return 0;
    if (t >= c->end_ns)
        return c->len;
    // (t - start) < (end - start) <= 65536 * 8e6 ns, times len <= 65536: < 2^56.
    return (uint32_t)((t - c->start_ns) * c->len / (c->end_ns - c->start_ns));
}

/* Time at which c will have let through at least want bytes (want <= len). */
static uint64_t s_chunk_time_for(const struct chunk *c, uint32_t want)
{
    if (c->end_ns == c->start_ns || want >= c->len)
        return c->end_ns;
    uint64_t span = c->end_ns - c->start_ns;
    return c->start_ns + ((uint64_t)want * span + c->len - 1) / c->len;
}

/* Next time something of d becomes writable, or UINT64_MAX when nothing is queued. */
static uint64_t s_dir_wake(const wanem_t *w, const struct dir *d)
{
    const struct chunk *c = d->head;
    if (!c)
        return UINT64_MAX;
    if (c->len == 0 || c->end_ns == c->start_ns)
        return c->start_ns;
    // Wake for about 1 ms of link time (rate/8 bytes) at once rather than byte by byte.
    uint64_t quantum = w->cfg.rate_kbps / 8;
    if (quantum < 1)
        quantum = 1;
    uint64_t want = (uint64_t)c->off + quantum;
    if (want > c->len)
        want = c->len;
    return s_chunk_time_for(c, (uint32_t)want);
}

/* ---- pairs ------------------------------------------------------------------ */

static void s_pair_close(struct pair *p, bool abort_client)
{
    if (abort_client && p->fd[0] >= 0) {
        // An RST rather than a FIN: the client sees its connection reset.
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        (void)setsockopt(p->fd[0], SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    for (int i = 0; i < 2; i++) {
        if (p->fd[i] >= 0)
            close(p->fd[i]);
        p->fd[i] = -1;
        s_dir_clear(&p->dir[i]);
    }
    SW_DEBUG("connection %llu closed (%llu bytes up, %llu bytes down)", (unsigned long long)p->id,
             (unsigned long long)p->dir[0].bytes, (unsigned long long)p->dir[1].bytes);
}

/* The destination of direction i is gone: drop what it holds and stop reading its source. */
static void s_dir_fail(struct pair *p, int i)
{
    struct dir *d = &p->dir[i];
    s_dir_clear(d);
    d->rd_closed = true;
    d->wr_closed = true;
    d->blocked = false;
    (void)shutdown(p->fd[i], SHUT_RD);
}

/* Writes what direction i may deliver at time now. */
static void s_dir_flush(struct pair *p, int i, uint64_t now)
{
    struct dir *d = &p->dir[i];
    int dst = p->fd[1 - i];
    if (d->blocked || d->wr_closed || (i == 0 && p->connecting))
        return;
    while (d->head) {
        struct chunk *c = d->head;
        if (c->len == 0) {
            if (now < c->start_ns)
                return;
            (void)shutdown(dst, SHUT_WR);
            d->wr_closed = true;
            s_dir_clear(d);
            return;
        }
        uint32_t allowed = s_chunk_allowed(c, now);
        if (allowed <= c->off)
            return;
        uint32_t want = allowed - c->off;
        ssize_t n = send(dst, c->data + c->off, want, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                d->blocked = true;
                return;
            }
            SW_DEBUG("connection %llu: write to %s: %s", (unsigned long long)p->id,
                     i == 0 ? "upstream" : "client", strerror(errno));
            s_dir_fail(p, i);
            return;
        }
        c->off += (uint32_t)n;
        d->queued -= (uint64_t)n;
        d->bytes += (uint64_t)n;
        if (c->off < c->len) {
            if ((uint32_t)n < want)
                d->blocked = true; // short write: the socket buffer is full
            return;
        }
        d->head = c->next;
        if (!d->head)
            d->tail = NULL;
        free(c);
    }
}

/* Reads what fd[i] holds into direction i. Returns 0, or -1 when out of memory. */
static int s_dir_read(wanem_t *w, struct pair *p, int i, uint64_t now)
{
    struct dir *d = &p->dir[i];
    for (int k = 0; k < WANEM_READS_PER_WAKE && !d->rd_closed; k++) {
        if (d->queued >= w->cfg.buffer_max)
            return 0;
        ssize_t n = recv(p->fd[i], w->buf, sizeof w->buf, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            // A reset reads like an end of stream that travels the link.
            SW_DEBUG("connection %llu: read from %s: %s", (unsigned long long)p->id,
                     i == 0 ? "client" : "upstream", strerror(errno));
            n = 0;
        }
        if (s_dir_push(w, d, w->buf, (uint32_t)n, now) != 0)
            return -1;
        if (n == 0)
            d->rd_closed = true;
    }
    return 0;
}

static void s_set_nodelay(int fd)
{
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Accepts pending clients and dials their upstream connections. */
static int s_accept(wanem_t *w, uint64_t now)
{
    for (int k = 0; k < WANEM_ACCEPTS_PER_WAKE; k++) {
        int cfd = accept4(w->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                SW_WARN("accept: %s (pausing 100 ms)", strerror(errno));
                w->accept_resume_ns = now + WANEM_ACCEPT_BACKOFF_NS;
                return 0;
            }
            SW_ERR("accept: %s", strerror(errno));
            return -1;
        }
        s_set_nodelay(cfd);
        int ufd =
            socket(w->cfg.connect_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (ufd < 0) {
            SW_WARN("socket: %s", strerror(errno));
            close(cfd);
            w->accept_resume_ns = now + WANEM_ACCEPT_BACKOFF_NS;
            return 0;
        }
        s_set_nodelay(ufd);
        bool connecting = false;
        if (connect(ufd, (const struct sockaddr *)&w->cfg.connect_addr, w->cfg.connect_len) != 0) {
            if (errno == EINPROGRESS) {
                connecting = true;
            } else {
                SW_WARN("connect upstream: %s", strerror(errno));
                struct linger lg = {.l_onoff = 1, .l_linger = 0};
                (void)setsockopt(cfd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
                close(cfd);
                close(ufd);
                continue;
            }
        }
        if (w->n_pairs == w->cap_pairs) {
            size_t cap = w->cap_pairs ? 2 * w->cap_pairs : 16;
            struct pair **pairs = realloc(w->pairs, cap * sizeof *pairs);
            if (pairs)
                w->pairs = pairs;
            struct pollfd *pfds = pairs ? realloc(w->pfds, (1 + 2 * cap) * sizeof *pfds) : NULL;
            if (pfds)
                w->pfds = pfds;
            if (!pairs || !pfds) {
                SW_WARN("out of memory for connection slots");
                close(cfd);
                close(ufd);
                return 0;
            }
            w->cap_pairs = cap;
        }
        struct pair *p = calloc(1, sizeof *p);
        if (!p) {
            SW_WARN("out of memory for a connection");
            close(cfd);
            close(ufd);
            return 0;
        }
        p->fd[0] = cfd;
        p->fd[1] = ufd;
        p->connecting = connecting;
        p->id = ++w->accepted;
        w->pairs[w->n_pairs++] = p;
        SW_DEBUG("connection %llu accepted", (unsigned long long)p->id);
    }
    return 0;
}

/* ---- lifecycle -------------------------------------------------------------- */

wanem_t *wanem_new(const struct wanem_config *cfg)
{
    wanem_t *w = calloc(1, sizeof *w);
    if (!w) {
        SW_ERR("out of memory");
        return NULL;
    }
    w->cfg = *cfg;
    if (w->cfg.buffer_max == 0)
        w->cfg.buffer_max = 1;
    sw_rng_seed(&w->rng, cfg->seed);
    w->pfds = malloc(sizeof *w->pfds);
    w->listen_fd =
        socket(cfg->listen_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    char addr[128];
    wanem_format_addr((const struct sockaddr *)&cfg->listen_addr, cfg->listen_len, addr,
                      sizeof addr);
    if (!w->pfds || w->listen_fd < 0) {
        SW_ERR("cannot create the listening socket: %s", strerror(errno));
        goto err;
    }
    int one = 1;
    (void)setsockopt(w->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(w->listen_fd, (const struct sockaddr *)&cfg->listen_addr, cfg->listen_len) != 0) {
        SW_ERR("cannot bind %s: %s", addr, strerror(errno));
        goto err;
    }
    if (listen(w->listen_fd, 512) != 0) {
        SW_ERR("cannot listen on %s: %s", addr, strerror(errno));
        goto err;
    }
    w->bound_len = sizeof w->bound;
    if (getsockname(w->listen_fd, (struct sockaddr *)&w->bound, &w->bound_len) != 0) {
        SW_ERR("getsockname: %s", strerror(errno));
        goto err;
    }
    return w;
err:
    wanem_destroy(&w);
    return NULL;
}

void wanem_bound_addr(const wanem_t *w, char *buf, size_t size)
{
    wanem_format_addr((const struct sockaddr *)&w->bound, w->bound_len, buf, size);
}

uint64_t wanem_accepted(const wanem_t *w)
{
    return w->accepted;
}

void wanem_destroy(wanem_t **wp)
{
    if (!wp || !*wp)
        return;
    wanem_t *w = *wp;
    for (size_t k = 0; k < w->n_pairs; k++) {
        s_pair_close(w->pairs[k], false);
        free(w->pairs[k]);
    }
    free(w->pairs);
    free(w->pfds);
    if (w->listen_fd >= 0)
        close(w->listen_fd);
    free(w);
    *wp = NULL;
}

/* ---- the loop --------------------------------------------------------------- */

static bool s_can_read(const wanem_t *w, const struct pair *p, int i)
{
    const struct dir *d = &p->dir[i];
    return !d->rd_closed && d->queued < w->cfg.buffer_max && !(i == 1 && p->connecting);
}

int wanem_run(wanem_t *w, const sigset_t *wait_mask, volatile sig_atomic_t *stop)
{
    while (!*stop) {
        uint64_t now = s_now_ns();
        uint64_t wake = UINT64_MAX;

        // Deliver what is due, retire finished pairs, find the next deadline.
        for (size_t k = 0; k < w->n_pairs;) {
            struct pair *p = w->pairs[k];
            for (int i = 0; i < 2; i++)
                s_dir_flush(p, i, now);
            if (p->dir[0].wr_closed && p->dir[1].wr_closed) {
                s_pair_close(p, false);
                free(p);
                w->pairs[k] = w->pairs[--w->n_pairs];
                continue;
            }
            for (int i = 0; i < 2; i++) {
                const struct dir *d = &p->dir[i];
                if (d->blocked || d->wr_closed || (i == 0 && p->connecting))
                    continue;
                uint64_t t = s_dir_wake(w, d);
                if (t < wake)
                    wake = t;
            }
            k++;
        }
        if (w->accept_resume_ns && w->accept_resume_ns < wake)
            wake = w->accept_resume_ns;

        // Poll set: [0] the listener, then two slots per pair.
        struct pollfd *pf = w->pfds;
        bool accepting = now >= w->accept_resume_ns;
        pf[0] = (struct pollfd){.fd = accepting ? w->listen_fd : -1, .events = POLLIN};
        for (size_t k = 0; k < w->n_pairs; k++) {
            struct pair *p = w->pairs[k];
            for (int i = 0; i < 2; i++) {
                short ev = 0;
                if (s_can_read(w, p, i))
                    ev |= POLLIN;
                if (p->dir[1 - i].blocked || (i == 1 && p->connecting))
                    ev |= POLLOUT;
                pf[1 + 2 * k + i] = (struct pollfd){.fd = ev ? p->fd[i] : -1, .events = ev};
            }
        }
        struct timespec ts, *tsp = NULL;
        if (wake != UINT64_MAX) {
            uint64_t dt = wake > now ? wake - now : 0;
            ts.tv_sec = (time_t)(dt / 1000000000u);
            ts.tv_nsec = (long)(dt % 1000000000u);
            tsp = &ts;
        }
        size_t n_pfds = 1 + 2 * w->n_pairs;
        int rc = ppoll(pf, n_pfds, tsp, wait_mask);
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            SW_ERR("ppoll: %s", strerror(errno));
            return -1;
        }
        now = s_now_ns();
        if (w->accept_resume_ns && now >= w->accept_resume_ns)
            w->accept_resume_ns = 0;
        if (rc == 0)
            continue;

        size_t n_before = w->n_pairs; // pairs accepted below have no poll slots yet
        for (size_t k = 0; k < n_before; k++) {
            struct pair *p = w->pairs[k];
            for (int i = 0; i < 2 && p->fd[0] >= 0; i++) {
                short re = pf[1 + 2 * k + i].revents;
                if (!re)
                    continue;
                if (i == 1 && p->connecting) {
                    int err = 0;
                    socklen_t len = sizeof err;
                    if (getsockopt(p->fd[1], SOL_SOCKET, SO_ERROR, &err, &len) != 0)
                        err = errno;
                    if (err == 0 && !(re & (POLLOUT | POLLERR | POLLHUP)))
                        continue;
                    if (err != 0 || (re & (POLLERR | POLLHUP))) {
                        // The server refused: reset the client, as a real dial would have.
                        SW_DEBUG("connection %llu: upstream connect: %s", (unsigned long long)p->id,
                                 strerror(err ? err : ECONNREFUSED));
                        s_pair_close(p, true);
                        p->dir[0].wr_closed = p->dir[1].wr_closed = true;
                        continue;
                    }
                    p->connecting = false;
                    continue; // reading waits for the next turn's POLLIN
                }
                if (re & (POLLOUT | POLLERR | POLLHUP))
                    p->dir[1 - i].blocked = false; // retry the write; errors surface there
                if ((re & (POLLIN | POLLERR | POLLHUP)) && s_can_read(w, p, i)) {
                    if (s_dir_read(w, p, i, now) != 0) {
                        SW_WARN("connection %llu: out of memory, closing",
                                (unsigned long long)p->id);
                        s_pair_close(p, true);
                        p->dir[0].wr_closed = p->dir[1].wr_closed = true;
                    }
                }
            }
        }
        if (pf[0].revents && s_accept(w, now) != 0)
            return -1;
    }
    return 0;
}
