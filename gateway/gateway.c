/*
 * gateway.c - the HTTP side of `shardwire serve` (gateway.h): listening,
 * limits, bearer keys, routing, and one generation per request through the
 * dispatcher, answered as JSON or as server-sent events.
 */
#include "gateway.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>
#include <zmq.h>

#include "codec.h"
#include "dispatch.h"
#include "log.h"
#include "metrics.h"
#include "web.h"

#define S_MAX_KEYS 1024      /* API keys in a key file */
#define S_KEY_HASH 32        /* BLAKE2b-256 of a key */
#define S_POLL_MS 200        /* how often a waiting request looks at its client */
#define S_KEEPALIVE_MS 15000 /* SSE comment after this much silence */
#define S_STREAM_BLOCK 16384 /* bytes MHD asks the stream reader for at most */
/* A request body is parsed (jansson: about 100 bytes per value, kept while its generation runs)
 * only when it holds at most this many JSON values: a chat of 256 turns needs a few thousand,
 * and 8 MB of tiny content parts (230,000 of them) took 120 MB each before. */
#define S_JSON_MAX_VALUES 16384
#define S_PARSE_AT_ONCE 4 /* request bodies parsed at once */

/*
 * One open HTTP connection, for the deadlines libmicrohttpd does not keep:
 * its idle timeout restarts with every byte, so a client sending one byte
 * every few seconds (slow-loris) would hold a connection forever. The main
 * loop shuts a connection down (s_sweep) whose request headers have not all
 * arrived header_timeout_s after it opened or after its last answer, or whose
 * body has not arrived body_timeout_s after its headers.
 */
typedef struct s_link {
    int fd;         /* its socket, -1 = free entry */
    int phase;      /* S_PHASE_* */
    double t_phase; /* when it entered that phase (ms) */
} s_link_t;

enum { S_PHASE_HEADERS = 0, S_PHASE_BODY = 1, S_PHASE_ANSWER = 2 };

typedef struct gw {
    const gw_opts_t *o;
    void *zctx;                        /* inproc sockets of the dispatcher */
    gw_disp_t *disp;                   /* the one relay connection */
    gw_metrics_t *metrics;             /* /metrics */
    unsigned char (*keys)[S_KEY_HASH]; /* hashes of the API keys */
    int n_keys;                        /* entries in keys */
    pthread_mutex_t key_mu;            /* guards key_inflight and links (a thread per connection) */
    s_link_t *links;                   /* (n_links) open connections' deadlines */
    int n_links;                       /* max_connections */
    size_t bodies;                     /* bytes of request bodies buffered (max_bodies) */
    int parsing;                       /* bodies being parsed now (S_PARSE_AT_ONCE) */
    pthread_cond_t parse_cv;           /* signalled when a parse ends */
    int *key_inflight;                 /* (n_keys) generations in flight per API key */
} gw_t;

typedef struct s_conn s_conn_t;
typedef struct s_route s_route_t;

/* One endpoint's handler, called once the whole body is in. */
typedef enum MHD_Result (*s_handler_fn)(gw_t *g, struct MHD_Connection *c, s_conn_t *sc,
                                        const char *url);

/* One HTTP request's state between the handler's calls. */
struct s_conn {
    const s_route_t *rt; /* its route (s_routes) */
    double t0;           /* when the headers arrived (ms) */
    char *body;          /* the body so far */
    size_t len;          /* bytes of body */
    size_t cap;          /* its capacity */
    int too_large;       /* the body passed max_body: it is dropped */
    int answered;        /* a response was queued early */
    int key;             /* the API key it carried (index into keys), -1 = none */
    int no_room;         /* the gateway's buffered bodies passed --max-bodies-mb: refused */
};

/* One endpoint: a path that is not in this table is a 404, a method that
 * its row does not name a 405, by construction. */
struct s_route {
    const char *method;   /* "POST", or "GET" (which takes HEAD too) */
    const char *path;     /* the whole path, or with prefix its start */
    int prefix;           /* 1: path is a prefix that one byte or more must follow */
    int auth;             /* 1: an API key from --api-key-file is required */
    const char *name;     /* the endpoint's name in /metrics */
    s_handler_fn handler; /* answers once the body is in */
};

/* The name /metrics counts a request under: its route's, "other" for none. */
static const char *s_ep(const s_conn_t *sc)
{
    return sc->rt ? sc->rt->name : "other";
}

static double s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- responses --------------------------------------------------------------------------- */

/* Queues body (taken over; NULL = out of memory) with status, and counts it. */
static enum MHD_Result s_send(gw_t *g, struct MHD_Connection *c, const char *ep, int status,
                              char *body, const char *ctype, int retry_after_s)
{
    if (!body) {
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                      "\"param\":null,\"code\":null}}");
        if (!body)
            return MHD_NO;
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (retry_after_s > 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", retry_after_s);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    gw_metrics_response(g->metrics, ep, status);
    return rc;
}

static enum MHD_Result s_error(gw_t *g, struct MHD_Connection *c, const char *ep, int status,
                               const char *message, const char *type, const char *param,
                               const char *code)
{
    return s_send(
        g, c, ep, status, gw_json_error(message, type, param, code), "application/json",
        status == MHD_HTTP_SERVICE_UNAVAILABLE || status == MHD_HTTP_TOO_MANY_REQUESTS ? 1 : 0);
}

/* The HTTP status, OpenAI error type and code of a failed generation. */
static int s_status_of(int code, int wire_code, const char **type)
{
    *type = "server_error";
    switch (code) {
    case SW_CLIENT_EINVAL:
        *type = "invalid_request_error";
        return MHD_HTTP_BAD_REQUEST;
    case SW_CLIENT_EHEAD:
        if (wire_code == SW_ERROR_BAD_REQUEST) {
            *type = "invalid_request_error";
            return MHD_HTTP_BAD_REQUEST;
        }
        if (wire_code == SW_ERROR_BUSY || wire_code == SW_ERROR_DEST_BUSY)
            return MHD_HTTP_SERVICE_UNAVAILABLE;
        if (wire_code == SW_ERROR_DEADLINE)
            return MHD_HTTP_GATEWAY_TIMEOUT;
        return MHD_HTTP_BAD_GATEWAY;
    case SW_CLIENT_ETIMEOUT:
        return MHD_HTTP_GATEWAY_TIMEOUT;
    case SW_CLIENT_ENOHEAD:
    case SW_CLIENT_ECONNECT:
    case SW_CLIENT_EBUSY:
        return MHD_HTTP_SERVICE_UNAVAILABLE;
    case SW_CLIENT_ENOMEM:
        return MHD_HTTP_INTERNAL_SERVER_ERROR;
    default: /* EKEY, EHEADGONE, ELOST, ECANCELLED: the cluster side failed */
        return MHD_HTTP_BAD_GATEWAY;
    }
}

/* The machine-readable code of a failed generation: the head's, else the client's. */
static const char *s_code_of(const gw_event_t *ev)
{
    return ev->wire_code_name[0] ? ev->wire_code_name : sw_client_strerror(ev->code);
}

/* ---- keys and addresses ------------------------------------------------------------------ */

static int s_load_keys(gw_t *g, const char *path, char *err, size_t err_len)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, err_len, "--api-key-file %s: %s", path, strerror(errno));
        return -1;
    }
    if (st.st_mode & 077) {
        snprintf(err, err_len, "--api-key-file %s can be read by others (mode %03o): chmod 600 it",
                 path, (unsigned)(st.st_mode & 0777));
        return -1;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, err_len, "--api-key-file %s: %s", path, strerror(errno));
        return -1;
    }
    g->keys = calloc(S_MAX_KEYS, sizeof *g->keys);
    if (!g->keys) {
        fclose(f);
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    char line[1024];
    int lineno = 0, rc = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *s = line, *e;
        while (*s == ' ' || *s == '\t')
            s++;
        e = s + strcspn(s, "\r\n");
        while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        *e = 0;
        if (!*s || *s == '#')
            continue;
        if (strlen(s) < 16 || strcspn(s, " \t") != strlen(s)) {
            snprintf(err, err_len,
                     "--api-key-file %s line %d: a key is one word of at least 16 characters "
                     "(make one with: head -c 24 /dev/urandom | base64)",
                     path, lineno);
            rc = -1;
            break;
        }
        if (g->n_keys == S_MAX_KEYS) {
            snprintf(err, err_len, "--api-key-file %s: more than %d keys", path, S_MAX_KEYS);
            rc = -1;
            break;
        }
        crypto_generichash(g->keys[g->n_keys++], S_KEY_HASH, (const unsigned char *)s, strlen(s),
                           NULL, 0);
        sodium_memzero(line, sizeof line);
    }
    sodium_memzero(line, sizeof line);
    fclose(f);
    if (rc == 0 && g->n_keys == 0) {
        snprintf(err, err_len, "--api-key-file %s holds no key", path);
        rc = -1;
    }
    return rc;
}

/* 1 when the request carries one of the keys ("Authorization: Bearer KEY"),
 * its index in *key (-1 without keys). */
static int s_authorized(const gw_t *g, struct MHD_Connection *c, int *index)
{
    *index = -1;
    if (g->o->no_api_key)
        return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return 0;
    const char *key = h + 7;
    while (*key == ' ')
        key++;
    unsigned char hash[S_KEY_HASH];
    crypto_generichash(hash, sizeof hash, (const unsigned char *)key, strlen(key), NULL, 0);
    /* every stored hash is compared, in constant time, whichever matches */
    int ok = 0;
    for (int i = 0; i < g->n_keys; i++) {
        const int same = sodium_memcmp(hash, g->keys[i], S_KEY_HASH) == 0;
        ok |= same;
        *index = same ? i : *index;
    }
    return ok;
}

/* One more generation of API key `key` (-1: none in use): 0, or -1 when it has
 * --max-inflight-per-key in flight already, so that one tenant cannot take
 * every generation the gateway (one client to the head) may run. */
static int s_key_take(gw_t *g, int key)
{
    if (key < 0 || !g->key_inflight)
        return 0;
    pthread_mutex_lock(&g->key_mu);
    const int ok = g->key_inflight[key] < g->o->max_inflight_per_key;
    g->key_inflight[key] += ok;
    pthread_mutex_unlock(&g->key_mu);
    return ok ? 0 : -1;
}

/* A generation of API key `key` ended (counted in the metrics too). */
static void s_inflight_end(gw_t *g, int key)
{
    gw_metrics_inflight(g->metrics, -1, 0);
    if (key < 0 || !g->key_inflight)
        return;
    pthread_mutex_lock(&g->key_mu);
    g->key_inflight[key]--;
    pthread_mutex_unlock(&g->key_mu);
}

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

/* 1 when the HTTP client closed its connection. */
static int s_client_gone(int fd)
{
    if (fd < 0)
        return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static int s_conn_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* ---- what a request body may cost --------------------------------------------------------- */

/*
 * An upper bound of the JSON values in body (objects, arrays, members and
 * elements: one more than its ',' ':' '{' '[' outside strings), read in one
 * pass before jansson allocates anything.
 */
static size_t s_json_values(const char *body, size_t len)
{
    size_t n = 1;
    int in_str = 0, esc = 0;
    for (size_t i = 0; i < len; i++) {
        const char ch = body[i];
        if (in_str) {
            if (esc)
                esc = 0;
            else if (ch == '\\')
                esc = 1;
            else if (ch == '"')
                in_str = 0;
        } else if (ch == '"') {
            in_str = 1;
        } else {
            n += ch == ',' || ch == ':' || ch == '{' || ch == '[';
        }
    }
    return n;
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

/* A parse slot: at most S_PARSE_AT_ONCE bodies become jansson trees at once (waits). */
static void s_parse_begin(gw_t *g)
{
    pthread_mutex_lock(&g->key_mu);
    while (g->parsing >= S_PARSE_AT_ONCE)
        pthread_cond_wait(&g->parse_cv, &g->key_mu);
    g->parsing++;
    pthread_mutex_unlock(&g->key_mu);
}

static void s_parse_end(gw_t *g)
{
    pthread_mutex_lock(&g->key_mu);
    g->parsing--;
    pthread_cond_signal(&g->parse_cv);
    pthread_mutex_unlock(&g->key_mu);
}

/* ---- connection deadlines (s_link_t) ------------------------------------------------------ */

/* Moves connection c into phase (S_PHASE_*), now. */
static void s_link_phase(gw_t *g, struct MHD_Connection *c, int phase)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    pthread_mutex_lock(&g->key_mu);
    s_link_t *l = ci ? ci->socket_context : NULL;
    if (l && l->fd >= 0) {
        l->phase = phase;
        l->t_phase = s_now_ms();
    }
    pthread_mutex_unlock(&g->key_mu);
}

/* Shuts down every connection past its phase's deadline (the main loop, every 100 ms). A
 * shut-down socket makes its thread see the end of the stream and close it. */
static void s_sweep(gw_t *g)
{
    const double now = s_now_ms();
    int closed = 0;
    pthread_mutex_lock(&g->key_mu);
    for (int i = 0; i < g->n_links; i++) {
        s_link_t *l = &g->links[i];
        const double limit = l->phase == S_PHASE_HEADERS ? g->o->header_timeout_s * 1e3
                             : l->phase == S_PHASE_BODY  ? g->o->body_timeout_s * 1e3
                                                         : -1;
        if (l->fd < 0 || limit < 0 || now - l->t_phase <= limit)
            continue;
        shutdown(l->fd, SHUT_RDWR);
        l->phase = S_PHASE_ANSWER; /* once */
        closed++;
    }
    pthread_mutex_unlock(&g->key_mu);
    for (int i = 0; i < closed; i++)
        gw_metrics_error(g->metrics, "request_timeout");
}

/* ---- generation -------------------------------------------------------------------------- */

/* A streamed response's state (MHD's content reader owns it; s_stream_free frees it). */
typedef struct s_stream {
    gw_t *g;           /* the gateway */
    gw_call_t *call;   /* the generation */
    gw_req_t *req;     /* the parsed request */
    char id[64];       /* response id */
    long long created; /* Unix time */
    int fd;            /* the HTTP client's socket */
    char *out;         /* bytes to write */
    size_t out_len;    /* bytes in out */
    size_t out_off;    /* bytes of out already written */
    int ended;         /* the last bytes are in out */
    double last_out;   /* when bytes were last produced (ms) */
    int key;           /* the API key it counts against (-1 = none) */
} s_stream_t;

/* Appends s (taken over) to the stream's output. */
static void s_out(s_stream_t *st, char *s)
{
    if (!s)
        return;
    size_t n = strlen(s);
    char *t = realloc(st->out, st->out_len + n + 1);
    if (t) {
        memcpy(t + st->out_len, s, n + 1);
        st->out = t;
        st->out_len += n;
    }
    free(s);
    st->last_out = s_now_ms();
}

/* Turns one event into SSE text. */
static void s_stream_event(s_stream_t *st, const gw_event_t *ev)
{
    gw_t *g = st->g;
    const gw_req_t *r = st->req;
    if (ev->type == SW_CLIENT_EV_ERROR) {
        const char *type;
        (void)s_status_of(ev->code, ev->wire_code, &type);
        char *e = gw_json_error(ev->message, type, NULL, s_code_of(ev));
        if (e) {
            size_t n = strlen(e) + 16;
            char *line = malloc(n);
            if (line)
                snprintf(line, n, "data: %s\n\n", e);
            free(e);
            s_out(st, line);
        }
        s_out(st, strdup("data: [DONE]\n\n"));
        st->ended = 1;
        gw_metrics_error(g->metrics, s_code_of(ev));
        return;
    }
    gw_metrics_tokens(g->metrics, ev->n_tokens);
    if (ev->text_len)
        s_out(st, gw_sse_chunk(r, st->id, st->created, ev->text, ev->text_len, 0, 0, NULL));
    if (ev->type != SW_CLIENT_EV_DONE)
        return;
    s_out(st, gw_sse_chunk(r, st->id, st->created, "", 0, ev->finish, 0, NULL));
    if (r->include_usage)
        s_out(st, gw_sse_chunk(r, st->id, st->created, NULL, 0, 0, 0, &ev->stats));
    s_out(st, strdup("data: [DONE]\n\n"));
    st->ended = 1;
    gw_metrics_generation(g->metrics, &ev->stats);
}

static ssize_t s_stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    s_stream_t *st = cls;
    for (;;) {
        if (st->out_off < st->out_len) {
            size_t n = st->out_len - st->out_off;
            if (n > max)
                n = max;
            memcpy(buf, st->out + st->out_off, n);
            st->out_off += n;
            if (st->out_off == st->out_len)
                st->out_off = st->out_len = 0;
            return (ssize_t)n;
        }
        if (st->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        gw_event_t ev;
        if (gw_call_next(st->call, &ev, S_POLL_MS) == 0) {
            s_stream_event(st, &ev);
            continue;
        }
        if (s_client_gone(st->fd)) {
            gw_call_cancel(st->call);
            gw_metrics_error(st->g->metrics, "client_gone");
            st->ended = 1;
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (s_now_ms() - st->last_out > S_KEEPALIVE_MS)
            s_out(st, strdup(": keep-alive\n\n"));
    }
}

static void s_stream_free(void *cls)
{
    s_stream_t *st = cls;
    if (!st->ended) /* MHD saw the client go when a write failed */
        gw_metrics_error(st->g->metrics, "client_gone");
    gw_call_destroy(&st->call); /* cancels a generation still running */
    s_inflight_end(st->g, st->key);
    gw_req_clear(st->req);
    free(st->req);
    free(st->out);
    free(st);
}

/* Waits for the generation's next event, watching the HTTP client. 0, or -1 when it left. */
static int s_wait_event(gw_t *g, gw_call_t *call, int fd, gw_event_t *ev)
{
    while (gw_call_next(call, ev, S_POLL_MS) != 0) {
        if (s_client_gone(fd)) {
            gw_call_cancel(call);
            gw_metrics_error(g->metrics, "client_gone");
            return -1;
        }
    }
    return 0;
}

/* 0 when some head serves r->model; otherwise an error response was queued (*res). */
static int s_check_model(gw_t *g, struct MHD_Connection *c, const char *ep, gw_call_t *call,
                         const gw_req_t *r, enum MHD_Result *res)
{
    sw_client_table_t t;
    char err[512];
    int rc = gw_call_table(call, &t, err, sizeof err);
    if (rc != 0) {
        *res = s_error(g, c, ep, MHD_HTTP_SERVICE_UNAVAILABLE, err, "server_error", NULL,
                       sw_client_strerror(rc));
        return -1;
    }
    int served = 0, heads = 0;
    char names[512] = "";
    for (int i = 0; i < t.n_peers; i++) {
        if (!sw_client_peer_serves(&t.peers[i], NULL))
            continue;
        heads++;
        served |= sw_client_peer_serves(&t.peers[i], r->model);
        size_t n = strlen(names);
        if (n + 70 < sizeof names)
            snprintf(names + n, sizeof names - n, "%s'%s'", n ? ", " : "",
                     t.peers[i].model_name[0] ? t.peers[i].model_name : t.peers[i].model);
    }
    sw_client_table_clear(&t);
    if (served)
        return 0;
    char msg[1024];
    if (!heads) {
        *res = s_error(g, c, ep, MHD_HTTP_SERVICE_UNAVAILABLE,
                       "no head node is connected to the cluster's relay", "server_error", NULL,
                       "no_head");
        return -1;
    }
    snprintf(msg, sizeof msg, "the model '%.100s' does not exist here; this cluster serves %s",
             r->model, names);
    *res = s_error(g, c, ep, MHD_HTTP_NOT_FOUND, msg, "invalid_request_error", "model",
                   "model_not_found");
    return -1;
}

static enum MHD_Result s_generate(gw_t *g, struct MHD_Connection *c, s_conn_t *sc, int chat)
{
    const char *ep = s_ep(sc);
    char err[640];
    const char *param = NULL;
    enum MHD_Result res;
    if (s_json_values(sc->body ? sc->body : "", sc->len) > S_JSON_MAX_VALUES) {
        snprintf(err, sizeof err, "the body holds more than %d JSON values", S_JSON_MAX_VALUES);
        return s_error(g, c, ep, MHD_HTTP_CONTENT_TOO_LARGE, err, "invalid_request_error", NULL,
                       "request_too_large");
    }
    gw_req_t *r = calloc(1, sizeof *r);
    if (!r)
        return s_send(g, c, ep, 500, NULL, "application/json", 0);
    s_parse_begin(g);
    const int prc = gw_req_parse(r, sc->body ? sc->body : "", sc->len, chat, &g->o->defaults, err,
                                 sizeof err, &param);
    s_parse_end(g);
    if (prc != 0) {
        gw_req_clear(r);
        free(r);
        return s_error(g, c, ep, MHD_HTTP_BAD_REQUEST, err, "invalid_request_error", param,
                       "invalid_request");
    }
    gw_call_t *call = gw_call_new(g->disp);
    if (!call) {
        gw_req_clear(r);
        free(r);
        return s_send(g, c, ep, 500, NULL, "application/json", 0);
    }
    if (!r->head && s_check_model(g, c, ep, call, r, &res) != 0)
        goto out;
    if (gw_metrics_inflight(g->metrics, +1, g->o->max_inflight) < 0) {
        snprintf(err, sizeof err,
                 "%d generations are in flight on this gateway (shardwire serve "
                 "--max-inflight): retry later",
                 g->o->max_inflight);
        res = s_error(g, c, ep, MHD_HTTP_TOO_MANY_REQUESTS, err, "rate_limit_error", NULL,
                      "too_many_requests");
        goto out;
    }
    if (s_key_take(g, sc->key) != 0) {
        gw_metrics_inflight(g->metrics, -1, 0);
        snprintf(err, sizeof err,
                 "this API key has %d generations in flight, its share of the gateway (shardwire "
                 "serve --max-inflight-per-key): retry when one has ended",
                 g->o->max_inflight_per_key);
        res = s_error(g, c, ep, MHD_HTTP_TOO_MANY_REQUESTS, err, "rate_limit_error", NULL,
                      "too_many_requests");
        goto out;
    }
    char rid[SW_CLIENT_ID_LEN];
    int rc = gw_call_submit(call, &r->q, r->model, r->head, rid, err, sizeof err);
    if (rc != 0) {
        s_inflight_end(g, sc->key);
        const char *type;
        int status = s_status_of(rc, 0, &type);
        gw_metrics_error(g->metrics, sw_client_strerror(rc));
        res = s_error(g, c, ep, status, err, type, NULL, sw_client_strerror(rc));
        goto out;
    }
    char id[64];
    snprintf(id, sizeof id, "%s%s", chat ? "chatcmpl-" : "cmpl-", rid + 4);
    const long long created = (long long)time(NULL);
    const int fd = s_conn_fd(c);

    /* The first event decides the status: an error before any token is a plain
     * HTTP error, also for a stream. */
    gw_event_t ev;
    char *text = NULL;
    size_t text_len = 0;
    for (;;) {
        if (s_wait_event(g, call, fd, &ev) != 0) {
            s_inflight_end(g, sc->key);
            res = MHD_NO; /* the client is gone: close */
            goto out_text;
        }
        if (ev.type == SW_CLIENT_EV_ERROR) {
            s_inflight_end(g, sc->key);
            gw_metrics_error(g->metrics, s_code_of(&ev));
            const char *type;
            int status = s_status_of(ev.code, ev.wire_code, &type);
            res = s_error(g, c, ep, status, ev.message, type, NULL, s_code_of(&ev));
            goto out_text;
        }
        if (r->stream)
            break;
        gw_metrics_tokens(g->metrics, ev.n_tokens);
        if (ev.text_len) {
            char *t = realloc(text, text_len + ev.text_len + 1);
            if (!t) {
                s_inflight_end(g, sc->key);
                res = s_send(g, c, ep, 500, NULL, "application/json", 0);
                goto out_text;
            }
            text = t;
            memcpy(text + text_len, ev.text, ev.text_len);
            text_len += ev.text_len;
            text[text_len] = 0;
        }
        if (ev.type == SW_CLIENT_EV_DONE) {
            s_inflight_end(g, sc->key);
            gw_metrics_generation(g->metrics, &ev.stats);
            res = s_send(g, c, ep, MHD_HTTP_OK,
                         gw_json_completion(r, id, created, text, text_len, ev.finish, &ev.stats),
                         "application/json", 0);
            goto out_text;
        }
    }

    /* a stream: the reader takes the call and the request over */
    s_stream_t *st = calloc(1, sizeof *st);
    struct MHD_Response *resp =
        st ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, S_STREAM_BLOCK, s_stream_read, st,
                                               s_stream_free)
           : NULL;
    if (!resp) {
        free(st);
        s_inflight_end(g, sc->key);
        res = s_send(g, c, ep, 500, NULL, "application/json", 0);
        goto out;
    }
    st->g = g;
    st->call = call;
    st->req = r;
    snprintf(st->id, sizeof st->id, "%s", id);
    st->created = created;
    st->fd = fd;
    st->key = sc->key;
    if (chat) /* the first chunk names the role, as OpenAI's do */
        s_out(st, gw_sse_chunk(r, id, created, "", 0, 0, 1, NULL));
    s_stream_event(st, &ev);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    res = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    gw_metrics_response(g->metrics, ep, MHD_HTTP_OK);
    return res;
out_text:
    free(text);
out:
    gw_call_destroy(&call);
    gw_req_clear(r);
    free(r);
    return res;
}

/* ---- other endpoints --------------------------------------------------------------------- */

/* /v1/models (url NULL) or /v1/models/{id}. */
static enum MHD_Result s_models_list(gw_t *g, struct MHD_Connection *c, const char *ep,
                                     const char *url)
{
    gw_call_t *call = gw_call_new(g->disp);
    sw_client_table_t t;
    char err[512] = "out of memory";
    int rc = call ? gw_call_table(call, &t, err, sizeof err) : SW_CLIENT_ENOMEM;
    gw_call_destroy(&call);
    if (rc != 0)
        return s_error(g, c, ep, MHD_HTTP_SERVICE_UNAVAILABLE, err, "server_error", NULL,
                       sw_client_strerror(rc));
    char *body = gw_json_models(&t, (long long)time(NULL));
    sw_client_table_clear(&t);
    if (!url || !body)
        return s_send(g, c, ep, MHD_HTTP_OK, body, "application/json", 0);
    /* /v1/models/{id}: that entry of the list, or 404 */
    const char *want = url + strlen("/v1/models/");
    json_error_t je;
    json_t *list = json_loads(body, 0, &je), *m;
    free(body);
    size_t i;
    char *one = NULL;
    json_array_foreach(json_object_get(list, "data"), i, m)
    {
        if (!strcmp(json_string_value(json_object_get(m, "id")), want))
            one = json_dumps(m, JSON_COMPACT);
    }
    json_decref(list);
    if (one)
        return s_send(g, c, ep, MHD_HTTP_OK, one, "application/json", 0);
    return s_error(g, c, ep, MHD_HTTP_NOT_FOUND, "no such model here", "invalid_request_error",
                   "model", "model_not_found");
}

static enum MHD_Result s_models(gw_t *g, struct MHD_Connection *c, s_conn_t *sc, const char *url)
{
    (void)url;
    return s_models_list(g, c, s_ep(sc), NULL);
}

static enum MHD_Result s_model(gw_t *g, struct MHD_Connection *c, s_conn_t *sc, const char *url)
{
    return s_models_list(g, c, s_ep(sc), url);
}

static enum MHD_Result s_chat(gw_t *g, struct MHD_Connection *c, s_conn_t *sc, const char *url)
{
    (void)url;
    return s_generate(g, c, sc, 1);
}

static enum MHD_Result s_completions(gw_t *g, struct MHD_Connection *c, s_conn_t *sc,
                                     const char *url)
{
    (void)url;
    return s_generate(g, c, sc, 0);
}

static enum MHD_Result s_health(gw_t *g, struct MHD_Connection *c, s_conn_t *sc, const char *url)
{
    (void)url;
    gw_call_t *call = gw_call_new(g->disp);
    sw_client_table_t t;
    char err[512] = "out of memory";
    int rc = call ? gw_call_table(call, &t, err, sizeof err) : SW_CLIENT_ENOMEM;
    gw_call_destroy(&call);
    int heads = 0, nodes = 0;
    if (rc == 0) {
        for (int i = 0; i < t.n_peers; i++) {
            heads += sw_client_peer_serves(&t.peers[i], NULL);
            nodes += t.peers[i].is_node;
        }
        sw_client_table_clear(&t);
    }
    json_t *j = json_object();
    json_object_set_new(j, "status", json_string(rc == 0 && heads ? "ok" : "unavailable"));
    json_object_set_new(j, "relay", json_string(g->o->relay));
    json_object_set_new(j, "relay_connected", json_boolean(rc == 0));
    json_object_set_new(j, "heads", json_integer(heads));
    json_object_set_new(j, "nodes", json_integer(nodes));
    if (rc != 0)
        json_object_set_new(j, "error", json_string(err));
    else if (!heads)
        json_object_set_new(j, "error", json_string("no head node is connected to the relay"));
    char *body = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s_send(g, c, s_ep(sc), rc == 0 && heads ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE,
                  body, "application/json", 0);
}

static enum MHD_Result s_metrics(gw_t *g, struct MHD_Connection *c, s_conn_t *sc, const char *url)
{
    (void)url;
    return s_send(g, c, s_ep(sc), MHD_HTTP_OK, gw_metrics_text(g->metrics),
                  "text/plain; version=0.0.4", 0);
}

/* The cluster page's numbers: the relay's peer table and the gateway's own (web.h). A relay
 * that does not answer is part of the answer (relay.connected false), not an error. */
static enum MHD_Result s_cluster(gw_t *g, struct MHD_Connection *c, s_conn_t *sc, const char *url)
{
    (void)url;
    gw_call_t *call = gw_call_new(g->disp);
    sw_client_table_t t;
    char err[512] = "out of memory";
    int rc = call ? gw_call_table(call, &t, err, sizeof err) : SW_CLIENT_ENOMEM;
    gw_call_destroy(&call);
    char *body = gw_web_cluster_json(rc == 0 ? &t : NULL, g->o->relay, err,
                                     gw_metrics_json(g->metrics), g->o->max_inflight);
    if (rc == 0)
        sw_client_table_clear(&t);
    return s_send(g, c, s_ep(sc), MHD_HTTP_OK, body, "application/json", 0);
}

/* One file of the embedded web page (web.h): no key, the API calls it makes need one. */
static enum MHD_Result s_web(gw_t *g, struct MHD_Connection *c, s_conn_t *sc, const char *url)
{
    const gw_web_file_t *f = gw_web_find(url);
    if (!f)
        return s_error(g, c, s_ep(sc), MHD_HTTP_NOT_FOUND, "no such file in the web page",
                       "invalid_request_error", NULL, "not_found");
    /* PERSISTENT: MHD reads the static bytes and never writes or frees them */
    struct MHD_Response *r =
        MHD_create_response_from_buffer(f->len, (void *)f->data, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, f->ctype);
    MHD_add_response_header(r, "Content-Security-Policy", GW_WEB_CSP);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    gw_metrics_response(g->metrics, s_ep(sc), MHD_HTTP_OK);
    return rc;
}

/* ---- routes ------------------------------------------------------------------------------ */

/* Every endpoint, one row each (docs/api.md). */
static const s_route_t s_routes[] = {
    {"POST", "/v1/chat/completions", 0, 1, "chat", s_chat},
    {"POST", "/v1/completions", 0, 1, "completions", s_completions},
    {"GET", "/v1/models", 0, 1, "models", s_models},
    {"GET", "/v1/models/", 1, 1, "models", s_model},
    {"GET", "/v1/cluster", 0, 1, "cluster", s_cluster},
    {"GET", "/health", 0, 0, "health", s_health},
    {"GET", "/metrics", 0, 1, "metrics", s_metrics},
    {"GET", "/", 0, 0, "web", s_web},
    {"GET", "/web/", 1, 0, "web", s_web},
};

/* ---- MHD callbacks ----------------------------------------------------------------------- */

/* The route of url, or NULL (404). */
static const s_route_t *s_route_find(const char *url)
{
    for (size_t i = 0; i < sizeof s_routes / sizeof s_routes[0]; i++) {
        const s_route_t *rt = &s_routes[i];
        size_t n = strlen(rt->path);
        if (rt->prefix ? !strncmp(url, rt->path, n) && url[n] : !strcmp(url, rt->path))
            return rt;
    }
    return NULL;
}

/* 1 when method is what rt takes. */
static int s_method_ok(const s_route_t *rt, const char *method)
{
    if (!strcmp(rt->method, "GET"))
        return !strcmp(method, "GET") || !strcmp(method, "HEAD");
    return !strcmp(method, rt->method);
}

static enum MHD_Result s_handler(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls)
{
    (void)version;
    gw_t *g = cls;
    s_conn_t *sc = *con_cls;
    if (!sc) { /* the headers are in: decide what can be decided before the body */
        sc = calloc(1, sizeof *sc);
        if (!sc)
            return MHD_NO;
        *con_cls = sc;
        sc->t0 = s_now_ms();
        sc->key = -1;
        s_link_phase(g, c, S_PHASE_BODY);
        sc->rt = s_route_find(url);
        enum MHD_Result r = MHD_YES;
        if (!sc->rt)
            r = s_error(g, c, s_ep(sc), MHD_HTTP_NOT_FOUND, "no such endpoint (see docs/api.md)",
                        "invalid_request_error", NULL, "not_found");
        else if (!s_method_ok(sc->rt, method))
            r = s_error(g, c, s_ep(sc), MHD_HTTP_METHOD_NOT_ALLOWED,
                        "this endpoint does not take that method", "invalid_request_error", NULL,
                        "method_not_allowed");
        else if (sc->rt->auth && !s_authorized(g, c, &sc->key))
            r = s_error(g, c, s_ep(sc), MHD_HTTP_UNAUTHORIZED,
                        "a valid API key is required: send the header 'Authorization: Bearer "
                        "KEY' with a key from the gateway's --api-key-file",
                        "authentication_error", NULL, "invalid_api_key");
        else {
            const char *cl =
                MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
            if (cl && strtoull(cl, NULL, 10) > g->o->max_body) {
                char msg[160];
                snprintf(msg, sizeof msg, "the body is larger than %zu bytes", g->o->max_body);
                r = s_error(g, c, s_ep(sc), MHD_HTTP_CONTENT_TOO_LARGE, msg,
                            "invalid_request_error", NULL, "request_too_large");
            } else {
                return MHD_YES;
            }
        }
        sc->answered = 1;
        return r;
    }
    if (*upload_size) { /* a piece of the body */
        size_t n = *upload_size;
        *upload_size = 0;
        if (sc->answered)
            return MHD_YES;
        if (s_now_ms() - sc->t0 > g->o->body_timeout_s * 1e3) {
            sc->answered = 1;
            gw_metrics_error(g->metrics, "request_timeout"); /* as the sweep counts it */
            return s_error(g, c, s_ep(sc), MHD_HTTP_REQUEST_TIMEOUT,
                           "the request body did not arrive in time", "invalid_request_error", NULL,
                           "request_timeout");
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
    s_link_phase(g, c, S_PHASE_ANSWER); /* the whole request is in */
    if (sc->answered)
        return MHD_YES;
    sc->answered = 1;
    if (sc->too_large) {
        char msg[160];
        snprintf(msg, sizeof msg, "the body is larger than %zu bytes", g->o->max_body);
        return s_error(g, c, s_ep(sc), MHD_HTTP_CONTENT_TOO_LARGE, msg, "invalid_request_error",
                       NULL, "request_too_large");
    }
    if (sc->no_room)
        return s_error(g, c, s_ep(sc), MHD_HTTP_SERVICE_UNAVAILABLE,
                       "the gateway holds its budget of request bodies now (shardwire serve "
                       "--max-bodies-mb): retry",
                       "server_error", NULL, "busy");
    return sc->rt->handler(g, c, sc, url);
}

static void s_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                        enum MHD_RequestTerminationCode why)
{
    (void)why;
    s_link_phase(cls, c, S_PHASE_HEADERS); /* kept alive: the next request's headers are due */
    s_conn_t *sc = *con_cls;
    if (!sc)
        return;
    (void)s_bodies(cls, -(long long)sc->cap);
    free(sc->body);
    free(sc);
    *con_cls = NULL;
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
        for (int i = 0; ci && i < g->n_links; i++)
            if (g->links[i].fd < 0) {
                g->links[i] = (s_link_t){ci->connect_fd, S_PHASE_HEADERS, s_now_ms()};
                *socket_ctx = &g->links[i];
                break;
            }
    } else if (*socket_ctx) {
        ((s_link_t *)*socket_ctx)->fd = -1; /* before libmicrohttpd closes the socket */
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
    if (!o->no_api_key && !o->api_key_file) {
        fprintf(stderr, "shardwire serve: --api-key-file FILE is required (one key per line; "
                        "for a loopback-only test, --insecure-no-api-key)\n");
        return 2;
    }
    if (sodium_init() < 0) {
        fprintf(stderr, "shardwire serve: libsodium cannot start\n");
        return 1;
    }
    gw_t g = {.o = o};
    if (o->api_key_file && s_load_keys(&g, o->api_key_file, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire serve: %s\n", err);
        free(g.keys);
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
        free(g.keys);
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
                           .connect_timeout_ms = 15000,
                           .stop = stop};
    g.disp = gw_disp_new(g.zctx, &co, g.metrics, err, sizeof err);
    if (!g.disp) {
        fprintf(stderr, "shardwire serve: %s\n", err);
        goto out;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0);
    d = MHD_start_daemon(
        flags, 0, NULL, NULL, s_handler, &g, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
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
    rc = 0;
out:
    if (d)
        MHD_stop_daemon(d);
    gw_disp_destroy(&g.disp);
    if (g.zctx)
        zmq_ctx_term(g.zctx);
    gw_metrics_destroy(&g.metrics);
    if (g.keys)
        sodium_memzero(g.keys, S_MAX_KEYS * sizeof *g.keys);
    free(g.keys);
    free(g.key_inflight);
    free(g.links);
    pthread_cond_destroy(&g.parse_cv);
    pthread_mutex_destroy(&g.key_mu);
    return rc;
}
