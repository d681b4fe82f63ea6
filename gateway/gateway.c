/*
 * gateway.c - the HTTP side of `shardwire serve` (gateway.h): listening, the
 * table of routes, and libmicrohttpd's callbacks: what is decided once a
 * request's headers are in (route, method, API key, announced size), the
 * body's buffering within the gateway's budget, and the deadlines of every
 * connection. The endpoints are gateway_generate.c's and
 * gateway_endpoints.c's (gateway_impl.h).
 */
#include "gateway.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_received (glibc's has not) */
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sodium.h>
#include <zmq.h>

#include "gateway_impl.h"
#include "log.h"

/* How long a stopped gateway waits for its streams' last events to leave (ms). */
#define S_DRAIN_MS 3000
#define S_RX_UNKNOWN ULLONG_MAX /* gw_link_t.rx when the kernel did not say */

_Static_assert(SW_GATEWAY_DEFAULT_INFLIGHT <= SW_CLIENT_MAX_INFLIGHT,
               "the gateway's one client holds them all");

/* Parses HOST:PORT (or [V6]:PORT) into *sa. */
static int s_parse_listen(const char *listen, struct sockaddr_storage *sa, int *v6, int *loopback,
                          char *err, size_t err_len)
{
    char host[256];
    const char *colon = strrchr(listen, ':');
    const char *h = listen;
    size_t hl = colon ? (size_t)(colon - listen) : 0;
    if (!colon || hl == 0 || hl >= sizeof host)
        goto bad;
    if (h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    memcpy(host, h, hl);
    host[hl] = 0;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || port < 0 || port > 65535)
        goto bad;
    memset(sa, 0, sizeof *sa);
    if (!strcmp(host, "localhost"))
        snprintf(host, sizeof host, "127.0.0.1");
    struct sockaddr_in *a4 = (struct sockaddr_in *)sa;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)sa;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        *v6 = 0;
        *loopback = (ntohl(a4->sin_addr.s_addr) >> 24) == 127;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        *v6 = 1;
        *loopback = IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr);
        return 0;
    }
bad:
    snprintf(err, err_len,
             "--listen '%s' must be HOST:PORT with a numeric address (e.g. 127.0.0.1:8080, "
             "0.0.0.0:8080 or [::1]:8080)",
             listen);
    return -1;
}

/* Counts delta bytes of request bodies in (or out, negative); 0, or -1 when taking them would
 * pass --max-bodies-mb (then nothing is counted). */
static int s_bodies(gw_t *g, long long delta)
{
    pthread_mutex_lock(&g->key_mu);
    const int ok = delta <= 0 || g->bodies + (size_t)delta <= g->o->max_bodies;
    if (ok)
        g->bodies = (size_t)((long long)g->bodies + delta);
    pthread_mutex_unlock(&g->key_mu);
    return ok ? 0 : -1;
}

/* ---- connection deadlines (gw_link_t) ------------------------------------------------------ */

/* The bytes socket fd has received (the kernel's count, TCP_INFO): 0, or -1 when the kernel
 * does not say (before Linux 4.1). */
static int s_rx_bytes(int fd, unsigned long long *rx)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received)
        return -1;
    *rx = ti.tcpi_bytes_received;
    return 0;
}

/*
 * Says once, at the start, when the kernel does not count a socket's received bytes (asked of
 * the listening socket fd): s_sweep cannot then see a kept-alive connection's next request
 * begin, so the header deadline runs from the answer and closes such a connection after
 * --header-timeout-s when that is shorter than --idle-timeout-s.
 */
static void s_rx_check(int fd, const gw_opts_t *o)
{
    unsigned long long rx;
    if (fd < 0 || s_rx_bytes(fd, &rx) == 0)
        return;
    const int wait_s =
        o->header_timeout_s < o->idle_timeout_s ? o->header_timeout_s : o->idle_timeout_s;
    SW_WARN("serve: this kernel does not count a connection's received bytes (TCP_INFO "
            "tcpi_bytes_received, Linux 4.1 and later): a kept-alive connection waits %d s for its "
            "next request (the shorter of --header-timeout-s %d and --idle-timeout-s %d), "
            "not --idle-timeout-s",
            wait_s, o->header_timeout_s, o->idle_timeout_s);
}

/* Moves connection c into phase (GW_PHASE_*), now. Into BODY and ANSWER it keeps the bytes
 * its socket has received so far (the request's), so that s_sweep sees a byte of the next
 * request once the connection is IDLE (it is HEADERS at once where the kernel cannot tell). */
static void s_link_phase(gw_t *g, struct MHD_Connection *c, int phase)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    pthread_mutex_lock(&g->key_mu);
    gw_link_t *l = ci ? ci->socket_context : NULL;
    if (l && l->fd >= 0) {
        l->phase = phase;
        l->t_phase = gw_now_ms();
        if ((phase == GW_PHASE_BODY || phase == GW_PHASE_ANSWER) && s_rx_bytes(l->fd, &l->rx) != 0)
            l->rx = S_RX_UNKNOWN;
        if (phase == GW_PHASE_IDLE && l->rx == S_RX_UNKNOWN)
            l->phase = GW_PHASE_HEADERS;
    }
    pthread_mutex_unlock(&g->key_mu);
}

/*
 * Every 100 ms (the main loop): a kept-alive connection (GW_PHASE_IDLE) whose socket has
 * received a byte since its last request was in is sending its next request: its header
 * deadline starts now. Then every connection past its phase's deadline is shut down (a
 * shut-down socket makes its thread see the end of the stream and close it); an idle one is
 * libmicrohttpd's to close (--idle-timeout-s, MHD_OPTION_CONNECTION_TIMEOUT).
 */
static void s_sweep(gw_t *g)
{
    const double now = gw_now_ms();
    int closed = 0;
    pthread_mutex_lock(&g->key_mu);
    for (int i = 0; i < g->n_links; i++) {
        gw_link_t *l = &g->links[i];
        unsigned long long rx;
        if (l->fd >= 0 && l->phase == GW_PHASE_IDLE &&
            (s_rx_bytes(l->fd, &rx) != 0 || rx != l->rx)) {
            l->phase = GW_PHASE_HEADERS;
            l->t_phase = now;
        }
        const double limit = l->phase == GW_PHASE_HEADERS ? g->o->header_timeout_s * 1e3
                             : l->phase == GW_PHASE_BODY  ? g->o->body_timeout_s * 1e3
                                                          : -1;
        if (l->fd < 0 || limit < 0 || now - l->t_phase <= limit)
            continue;
        shutdown(l->fd, SHUT_RDWR);
        l->phase = GW_PHASE_ANSWER; /* once */
        closed++;
    }
    pthread_mutex_unlock(&g->key_mu);
    for (int i = 0; i < closed; i++)
        gw_metrics_error(g->metrics, "request_timeout");
}

/* ---- routes ------------------------------------------------------------------------------ */

/* Every endpoint, one row each (docs/api.md). */
static const gw_route_t s_routes[] = {
    {"POST", "/v1/chat/completions", 0, 1, "chat", gw_ep_chat},
    {"POST", "/v1/completions", 0, 1, "completions", gw_ep_completions},
    {"GET", "/v1/models", 0, 1, "models", gw_ep_models},
    {"GET", "/v1/models/", 1, 1, "models", gw_ep_model},
    {"GET", "/v1/cluster", 0, 1, "cluster", gw_ep_cluster},
    {"GET", "/v1/defaults", 0, 1, "defaults", gw_ep_defaults},
    {"GET", "/health", 0, 0, "health", gw_ep_health},
    {"GET", "/metrics", 0, 1, "metrics", gw_ep_metrics},
    {"GET", "/", 0, 0, "web", gw_ep_web},
    {"GET", "/favicon.ico", 0, 0, "web", gw_ep_web},
    {"GET", "/web/", 1, 0, "web", gw_ep_web},
};

/* ---- MHD callbacks ----------------------------------------------------------------------- */

/* The route of url, or NULL (404). */
static const gw_route_t *s_route_find(const char *url)
{
    for (size_t i = 0; i < sizeof s_routes / sizeof s_routes[0]; i++) {
        const gw_route_t *rt = &s_routes[i];
        size_t n = strlen(rt->path);
        if (rt->prefix ? !strncmp(url, rt->path, n) && url[n] : !strcmp(url, rt->path))
            return rt;
    }
    return NULL;
}

/* 1 when method is what rt takes. */
static int s_method_ok(const gw_route_t *rt, const char *method)
{
    if (!strcmp(rt->method, "GET"))
        return !strcmp(method, "GET") || !strcmp(method, "HEAD");
    return !strcmp(method, rt->method);
}

/* The headers of a request are in: decide what can be decided before its body (route, method,
 * API key, announced size). MHD_YES with *sc made and nothing queued when the body may come. */
static enum MHD_Result s_on_headers(gw_t *g, struct MHD_Connection *c, const char *url,
                                    const char *method, gw_conn_t **scp)
{
    gw_conn_t *sc = calloc(1, sizeof *sc);
    if (!sc)
        return MHD_NO;
    *scp = sc;
    sc->t0 = gw_now_ms();
    sc->key = -1;
    s_link_phase(g, c, GW_PHASE_BODY);
    sc->rt = s_route_find(url);
    enum MHD_Result r = MHD_YES;
    if (!sc->rt)
        r = gw_http_error(g, c, gw_conn_ep(sc), MHD_HTTP_NOT_FOUND,
                          "no such endpoint (see docs/api.md)", "invalid_request_error", NULL,
                          "not_found");
    else if (!s_method_ok(sc->rt, method))
        r = gw_http_error(g, c, gw_conn_ep(sc), MHD_HTTP_METHOD_NOT_ALLOWED,
                          "this endpoint does not take that method", "invalid_request_error", NULL,
                          "method_not_allowed");
    else if (sc->rt->auth && !gw_keys_check(g, c, &sc->key))
        r = gw_http_error(g, c, gw_conn_ep(sc), MHD_HTTP_UNAUTHORIZED,
                          "a valid API key is required: send the header 'Authorization: Bearer "
                          "KEY' with a key from the gateway's --api-key-file",
                          "authentication_error", NULL, "invalid_api_key");
    else {
        const char *cl =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > g->o->max_body) {
            char msg[160];
            snprintf(msg, sizeof msg, "the body is larger than %zu bytes", g->o->max_body);
            r = gw_http_error(g, c, gw_conn_ep(sc), MHD_HTTP_CONTENT_TOO_LARGE, msg,
                              "invalid_request_error", NULL, "request_too_large");
        } else {
            return MHD_YES;
        }
    }
    sc->answered = 1;
    return r;
}

/* A piece of the body (n bytes at upload): buffered within max_body and the gateway's budget of
 * buffered bodies, or dropped (the answer says why once the body is in). */
static enum MHD_Result s_on_upload(gw_t *g, struct MHD_Connection *c, gw_conn_t *sc,
                                   const char *upload, size_t n)
{
    if (sc->answered)
        return MHD_YES;
    if (gw_now_ms() - sc->t0 > g->o->body_timeout_s * 1e3) {
        sc->answered = 1;
        gw_metrics_error(g->metrics, "request_timeout"); /* as the sweep counts it */
        return gw_http_error(g, c, gw_conn_ep(sc), MHD_HTTP_REQUEST_TIMEOUT,
                             "the request body did not arrive in time", "invalid_request_error",
                             NULL, "request_timeout");
    }
    if (sc->too_large || sc->no_room || sc->len + n > g->o->max_body) {
        sc->too_large |= !sc->no_room;
        return MHD_YES;
    }
    if (sc->len + n + 1 > sc->cap) {
        size_t cap = sc->cap ? sc->cap * 2 : 4096;
        while (cap < sc->len + n + 1)
            cap *= 2;
        if (cap > g->o->max_body + 1)
            cap = g->o->max_body + 1;
        if (s_bodies(g, (long long)cap - (long long)sc->cap) != 0) {
            sc->no_room = 1; /* every buffered body together stays within the budget */
            return MHD_YES;
        }
        char *b = realloc(sc->body, cap);
        if (!b)
            return MHD_NO;
        sc->body = b;
        sc->cap = cap;
    }
    memcpy(sc->body + sc->len, upload, n);
    sc->len += n;
    sc->body[sc->len] = 0;
    return MHD_YES;
}

/* The whole request is in: its endpoint answers, unless its body was refused. */
static enum MHD_Result s_on_request(gw_t *g, struct MHD_Connection *c, gw_conn_t *sc,
                                    const char *url)
{
    s_link_phase(g, c, GW_PHASE_ANSWER);
    if (sc->answered)
        return MHD_YES;
    sc->answered = 1;
    if (sc->too_large) {
        char msg[160];
        snprintf(msg, sizeof msg, "the body is larger than %zu bytes", g->o->max_body);
        return gw_http_error(g, c, gw_conn_ep(sc), MHD_HTTP_CONTENT_TOO_LARGE, msg,
                             "invalid_request_error", NULL, "request_too_large");
    }
    if (sc->no_room)
        return gw_http_error(g, c, gw_conn_ep(sc), MHD_HTTP_SERVICE_UNAVAILABLE,
                             "the gateway holds its budget of request bodies now (shardwire serve "
                             "--max-bodies-mb): retry",
                             "server_error", NULL, "busy");
    return sc->rt->handler(g, c, sc, url);
}

static enum MHD_Result s_handler(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls)
{
    (void)version;
    gw_t *g = cls;
    if (!*con_cls) {
        gw_conn_t *sc = NULL;
        const enum MHD_Result r = s_on_headers(g, c, url, method, &sc);
        *con_cls = sc;
        return r;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        return s_on_upload(g, c, *con_cls, upload, n);
    }
    return s_on_request(g, c, *con_cls, url);
}

static void s_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                        enum MHD_RequestTerminationCode why)
{
    (void)why;
    s_link_phase(cls, c, GW_PHASE_IDLE); /* kept alive: idle until the next request's first byte */
    gw_conn_t *sc = *con_cls;
    if (!sc)
        return;
    (void)s_bodies(cls, -(long long)sc->cap);
    free(sc->body);
    free(sc);
    *con_cls = NULL;
}

/*
 * The accept policy (libmicrohttpd's, called before a connection is taken):
 * at most --max-per-prefix connections from one IPv4 /24 or IPv6 /64 (beyond:
 * refused), and at most --max-slow connections still sending a request (opened
 * and its headers not all in, or its body not all in: GW_PHASE_HEADERS and
 * GW_PHASE_BODY), all addresses together: a new one beyond closes the one
 * longest in its phase (a slow-loris connection, never a client that sends its
 * request at once), so that slow connections from many addresses cannot hold
 * every slot (issue 35, finding 8). A kept-alive connection waiting for its
 * next request (GW_PHASE_IDLE) is not a slow one: a client polling on one
 * connection is never the one closed. The lines go through conn_log.
 */
static enum MHD_Result s_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    gw_t *g = cls;
    uint8_t p[SW_ADDR_PREFIX_LEN];
    if (addrlen < sizeof(sa_family_t) || sw_addr_prefix(addr, p) != 0)
        return MHD_YES; /* not an IP address: the per-address limit is libmicrohttpd's */
    char net[64];
    sw_addr_prefix_str(p, net, sizeof net);
    const double now = gw_now_ms();
    int same = 0, slow = 0, evict = -1;
    pthread_mutex_lock(&g->key_mu);
    for (int i = 0; i < g->n_links; i++) {
        const gw_link_t *l = &g->links[i];
        if (l->fd < 0)
            continue;
        same += !memcmp(l->prefix, p, sizeof p);
        if (l->phase == GW_PHASE_HEADERS || l->phase == GW_PHASE_BODY) {
            slow++;
            if (evict < 0 || l->t_phase < g->links[evict].t_phase)
                evict = i;
        }
    }
    if (same >= g->o->max_per_prefix) {
        sw_log_gated(&g->conn_log, SW_LOG_WARN, net, now,
                     "refused a connection from %s: %d open from it (--max-per-prefix)", net, same);
        pthread_mutex_unlock(&g->key_mu);
        gw_metrics_error(g->metrics, "prefix_full");
        return MHD_NO;
    }
    if (slow >= g->o->max_slow && evict >= 0) {
        gw_link_t *l = &g->links[evict];
        char old[64];
        sw_addr_prefix_str(l->prefix, old, sizeof old);
        sw_log_gated(&g->conn_log, SW_LOG_WARN, old, now,
                     "closed a connection from %s, %.1f s at its request's %s: %d such "
                     "connections open (--max-slow)",
                     old, (now - l->t_phase) / 1e3, l->phase == GW_PHASE_BODY ? "body" : "headers",
                     slow);
        shutdown(l->fd, SHUT_RDWR);
        l->phase = GW_PHASE_ANSWER; /* once */
    }
    sw_log_gate_tick(&g->conn_log, now);
    pthread_mutex_unlock(&g->key_mu);
    if (slow >= g->o->max_slow && evict >= 0)
        gw_metrics_error(g->metrics, "slow_closed");
    return MHD_YES;
}

static void s_connection(void *cls, struct MHD_Connection *c, void **socket_ctx,
                         enum MHD_ConnectionNotificationCode code)
{
    gw_t *g = cls;
    gw_metrics_connection(g->metrics, code == MHD_CONNECTION_NOTIFY_STARTED ? +1 : -1);
    pthread_mutex_lock(&g->key_mu);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ai =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        const double now = gw_now_ms();
        for (int i = 0; ci && i < g->n_links; i++)
            if (g->links[i].fd < 0) {
                g->links[i] = (gw_link_t){ci->connect_fd, GW_PHASE_HEADERS, now, S_RX_UNKNOWN, {0}};
                if (ai && ai->client_addr)
                    (void)sw_addr_prefix(ai->client_addr, g->links[i].prefix);
                *socket_ctx = &g->links[i];
                break;
            }
    } else if (*socket_ctx) {
        ((gw_link_t *)*socket_ctx)->fd = -1; /* before libmicrohttpd closes the socket */
        *socket_ctx = NULL;
    }
    pthread_mutex_unlock(&g->key_mu);
}

static void s_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\n")] = 0;
    SW_DEBUG("http: %s", line);
}

int gw_run(const gw_opts_t *o, volatile sig_atomic_t *stop)
{
    char err[640];
    struct sockaddr_storage sa;
    int v6 = 0, loopback = 0, rc = 1;
    if (s_parse_listen(o->listen, &sa, &v6, &loopback, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire serve: %s\n", err);
        return 2;
    }
    if (o->no_api_key && !loopback) {
        fprintf(stderr, "shardwire serve: --insecure-no-api-key only works on a loopback "
                        "--listen address (127.0.0.1, [::1]); give --api-key-file instead\n");
        return 2;
    }
    if (o->no_api_key && o->api_key_file) {
        fprintf(stderr, "shardwire serve: --insecure-no-api-key and --api-key-file contradict each "
                        "other (with both, no key would be asked for): give one\n");
        return 2;
    }
    if (o->defaults.temperature > GW_MAX_TEMPERATURE) {
        fprintf(stderr,
                "shardwire serve: --temp %g is above %d, the most a request's temperature may "
                "be (OpenAI's range): give --temp 0 to %d\n",
                (double)o->defaults.temperature, GW_MAX_TEMPERATURE, GW_MAX_TEMPERATURE);
        return 2;
    }
    if (!o->no_api_key && !o->api_key_file) {
        fprintf(stderr, "shardwire serve: --api-key-file FILE is required (one key per line; "
                        "for a loopback-only test, --insecure-no-api-key)\n");
        return 2;
    }
    if (sodium_init() < 0) {
        fprintf(stderr, "shardwire serve: libsodium cannot start\n");
        return 1;
    }
    gw_t g = {.o = o, .stop = stop};
    if (o->api_key_file && gw_keys_load(&g, o->api_key_file, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire serve: %s\n", err);
        gw_keys_free(&g);
        return 2;
    }
    pthread_mutex_init(&g.key_mu, NULL);
    pthread_cond_init(&g.parse_cv, NULL);
    g.n_links = o->max_connections + 16; /* MHD refuses beyond max_connections */
    g.links = calloc((size_t)g.n_links, sizeof *g.links);
    for (int i = 0; g.links && i < g.n_links; i++)
        g.links[i].fd = -1;
    if (!g.links ||
        (g.n_keys > 0 && !(g.key_inflight = calloc((size_t)g.n_keys, sizeof *g.key_inflight)))) {
        fprintf(stderr, "shardwire serve: out of memory\n");
        gw_keys_free(&g);
        free(g.links);
        return 1;
    }
    struct MHD_Daemon *d = NULL;
    g.metrics = gw_metrics_new();
    g.zctx = zmq_ctx_new();
    if (!g.metrics || !g.zctx) {
        fprintf(stderr, "shardwire serve: out of memory\n");
        goto out;
    }
    sw_client_opts_t co = {.relay = o->relay,
                           .sec = o->sec,
                           .name = "gateway",
                           .connect_timeout_ms = o->connect_timeout_ms,
                           .stop = stop,
                           .join_err_logged = 1};
    err[0] = 0;
    g.disp = gw_disp_new(g.zctx, &co, g.metrics, err, sizeof err);
    if (!g.disp) {
        if (err[0]) /* else the peer's line said why */
            fprintf(stderr, "shardwire serve: %s\n", err);
        goto out;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0);
    sw_log_gate_refusals(&g.conn_log, "serve: connections refused or closed");
    d = MHD_start_daemon(
        flags, 0, s_accept, &g, s_handler, &g, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)o->max_per_ip, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)o->idle_timeout_s, MHD_OPTION_NOTIFY_COMPLETED, s_completed, &g,
        MHD_OPTION_NOTIFY_CONNECTION, s_connection, &g, MHD_OPTION_THREAD_STACK_SIZE,
        (size_t)(512 << 10), MHD_OPTION_EXTERNAL_LOGGER, s_mhd_log, NULL, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "shardwire serve: cannot listen on %s (%s)\n", o->listen,
                errno ? strerror(errno) : "address in use or not available");
        goto out;
    }
    const union MHD_DaemonInfo *lfd = MHD_get_daemon_info(d, MHD_DAEMON_INFO_LISTEN_FD);
    s_rx_check(lfd ? lfd->listen_fd : -1, o);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    char host[256];
    snprintf(host, sizeof host, "%.*s", (int)(strrchr(o->listen, ':') - o->listen), o->listen);
    printf("listening http://%s:%u\n", host, di ? di->port : 0);
    fflush(stdout);
    SW_INFO("serving the cluster at %s over HTTP on %s (%s)", o->relay, o->listen,
            o->no_api_key ? "no API keys: loopback only" : "API keys required");
    while (!*stop) {
        usleep(100000);
        s_sweep(&g);
    }
    /* The generations in flight see the stop flag and end with an error event
     * (gateway_generate.c); give their last bytes a moment to leave. */
    for (int i = 0; i < S_DRAIN_MS / 50 && gw_metrics_inflight(g.metrics, 0, 0) > 0; i++)
        usleep(50000);
    rc = 0;
out:
    if (d)
        MHD_stop_daemon(d);
    gw_disp_destroy(&g.disp);
    if (g.zctx)
        zmq_ctx_term(g.zctx);
    gw_metrics_destroy(&g.metrics);
    gw_keys_free(&g);
    free(g.key_inflight);
    free(g.links);
    pthread_cond_destroy(&g.parse_cv);
    pthread_mutex_destroy(&g.key_mu);
    return rc;
}
