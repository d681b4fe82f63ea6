/*
 * probe.c - the ZMTP greeting probe of a relay endpoint (see probe.h).
 *
 * A ZMTP 3 greeting is 64 bytes: signature (0xFF, 8 bytes, 0x7F), version
 * (major 3, minor), the mechanism name NUL-padded to 20 bytes, the as-server
 * flag and 31 bytes of filler (RFC 23). libzmq sends its signature at once
 * and the rest once it has read our signature and major version. The probe
 * sends only those 11 bytes: with a whole greeting naming another mechanism
 * libzmq would close before sending its mechanism.
 */
#include "probe.h"

#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define S_GREETING 64
#define S_MECH_AT 12 /* offset of the mechanism field */

static int64_t s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int sw_probe_retryable(sw_probe_rc rc)
{
    return rc == SW_PROBE_RESOLVE || rc == SW_PROBE_CONNECT || rc == SW_PROBE_CLOSED ||
           rc == SW_PROBE_SILENT;
}

/* Splits the address part of a tcp:// endpoint into host and port. 0 or -1. */
static int s_split(const char *ep, char *host, size_t host_len, char *port, size_t port_len)
{
    const char *a = ep + 6; /* after "tcp://" */
    const char *semi = strchr(a, ';');
    if (semi)
        a = semi + 1; /* "tcp://source;host:port": the source address is ours */
    const char *h = a, *colon;
    size_t hl;
    if (*a == '[') {
        const char *close = strchr(a, ']');
        if (!close || close[1] != ':')
            return -1;
        h = a + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(a, ':');
        if (!colon)
            return -1;
        hl = (size_t)(colon - a);
    }
    size_t pl = strlen(colon + 1);
    if (hl == 0 || hl >= host_len || pl == 0 || pl >= port_len)
        return -1;
    for (size_t i = 0; i < pl; i++)
        if (colon[1 + i] < '0' || colon[1 + i] > '9')
            return -1;
    memcpy(host, h, hl);
    host[hl] = 0;
    memcpy(port, colon + 1, pl + 1);
    return 0;
}

/* Non-blocking connect to one address, waiting until deadline. fd or -1 (errno set). */
static int s_connect(const struct addrinfo *ai, int64_t deadline)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0)
        return -1;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
        return fd;
    if (errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    for (;;) {
        int64_t left = deadline - s_now_ms();
        if (left <= 0) {
            close(fd);
            errno = ETIMEDOUT;
            return -1;
        }
        struct pollfd p = {fd, POLLOUT, 0};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue;
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
            soerr = errno;
        if (soerr) {
            close(fd);
            errno = soerr;
            return -1;
        }
        return fd;
    }
}

sw_probe_rc sw_probe_relay(const char *endpoint, int timeout_ms, char *mech, char *err,
                           size_t err_len)
{
    char host[256], port[16];
    mech[0] = 0;
    if (!endpoint || strncmp(endpoint, "tcp://", 6) != 0)
        return SW_PROBE_UNSUPPORTED;
    if (s_split(endpoint, host, sizeof host, port, sizeof port) != 0) {
        sw_errf(err, err_len, "'%s' is not tcp://HOST:PORT", endpoint);
        return SW_PROBE_BAD_ENDPOINT;
    }
    if (timeout_ms <= 0)
        timeout_ms = 1;
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int gr = getaddrinfo(host, port, &hints, &res);
    if (gr != 0) {
        sw_errf(err, err_len, "host '%s' does not resolve (%s)", host,
                gr == EAI_SYSTEM ? strerror(errno) : gai_strerror(gr));
        return SW_PROBE_RESOLVE;
    }
    int64_t deadline = s_now_ms() + timeout_ms;
    int fd = -1, cerr = ECONNREFUSED;
    for (const struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = s_connect(ai, deadline);
        if (fd < 0)
            cerr = errno;
    }
    freeaddrinfo(res);
    if (fd < 0 && (cerr == ECONNRESET || cerr == EPIPE)) {
        sw_errf(err, err_len,
                "the connection was accepted and reset before the relay greeted us "
                "(a forwarder or tunnel with no relay behind it yet?)");
        return SW_PROBE_CLOSED;
    }
    if (fd < 0) {
        sw_errf(err, err_len, "%s",
                cerr == ETIMEDOUT ? "no answer to the TCP connect (firewall?)" : strerror(cerr));
        return SW_PROBE_CONNECT;
    }

    static const uint8_t g[11] = {0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F, 3};
    sw_probe_rc rc = SW_PROBE_SILENT;
    /* A forwarder with nothing behind it may already have closed: a failed
     * send is that, not an error of ours. */
    if (send(fd, g, sizeof g, MSG_NOSIGNAL) != (ssize_t)sizeof g) {
        sw_errf(err, err_len,
                "the connection was accepted and closed before the relay greeted "
                "us (a forwarder or tunnel with no relay behind it yet?)");
        close(fd);
        return SW_PROBE_CLOSED;
    }
    uint8_t in[S_GREETING];
    size_t got = 0;
    deadline = s_now_ms() + timeout_ms;
    while (got < sizeof in) {
        int64_t left = deadline - s_now_ms();
        if (left <= 0)
            break;
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue;
        ssize_t n = recv(fd, in + got, sizeof in - got, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0) {
            rc = SW_PROBE_CLOSED;
            break;
        }
        got += (size_t)n;
        if (got >= 1 && in[0] != 0xFF)
            break;
    }
    close(fd);
    if (got >= 1 && in[0] != 0xFF) {
        sw_errf(err, err_len, "something that is not a shardwire relay answers there");
        return SW_PROBE_NOT_ZMTP;
    }
    if (got >= 10) {
        if (in[9] != 0x7F) {
            sw_errf(err, err_len, "something that is not a shardwire relay answers there");
            return SW_PROBE_NOT_ZMTP;
        }
        if (got >= S_MECH_AT + SW_PROBE_MECH_MAX) {
            memcpy(mech, in + S_MECH_AT, SW_PROBE_MECH_MAX);
            mech[SW_PROBE_MECH_MAX] = 0;
        }
        return SW_PROBE_OK;
    }
    if (rc == SW_PROBE_CLOSED || got > 0)
        sw_errf(err, err_len,
                "the connection was accepted and closed before the relay greeted us (a "
                "forwarder or tunnel with no relay behind it yet?)");
    else
        sw_errf(err, err_len, "the connection was accepted but nothing answered in %d ms",
                timeout_ms);
    return got > 0 ? SW_PROBE_CLOSED : rc;
}
