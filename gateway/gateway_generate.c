/*
 * gateway_generate.c - POST /v1/chat/completions and /v1/completions
 * (gateway_impl.h): a request body parsed within what it may cost, checked
 * against the models the heads serve and the generations in flight, and one
 * generation through the dispatcher, answered as one JSON body or as
 * server-sent events. A client that disconnects (seen within S_POLL_MS)
 * cancels its generation on the cluster.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gateway_impl.h"

#define S_POLL_MS 200        /* how often a waiting request looks at its client */
#define S_KEEPALIVE_MS 15000 /* SSE comment after this much silence */
#define S_STREAM_BLOCK 16384 /* bytes MHD asks the stream reader for at most */
/* A request body is parsed (jansson: about 100 bytes per value, kept while its generation runs)
 * only when it holds at most this many JSON values: a chat of 256 turns needs a few thousand,
 * and 8 MB of tiny content parts (230,000 of them) took 120 MB each before. */
#define S_JSON_MAX_VALUES 16384
#define S_PARSE_AT_ONCE 4 /* request bodies parsed at once */

/* A generation refused by the model check or the gateway's limits, or failed on the cluster
 * before its answer started: counted under code in /metrics' errors, then answered with status,
 * type and code. The model check, the 429s of --max-inflight and --max-inflight-per-key, a failed
 * submit and a first event that is an error all answer through here. */
static enum MHD_Result s_fail(gw_t *g, struct MHD_Connection *c, const char *ep, int status,
                              const char *message, const char *type, const char *param,
                              const char *code)
{
    gw_metrics_error(g->metrics, code);
    return gw_http_error(g, c, ep, status, message, type, param, code);
}

/* s_fail for a code rc of the dispatcher (SW_CLIENT_*, GW_DISP_*): its status and type
 * (gw_status_of) and its name (gw_disp_strerror; SW_CLIENT_ENOMEM: 500 out_of_memory). */
static enum MHD_Result s_fail_rc(gw_t *g, struct MHD_Connection *c, const char *ep, int rc,
                                 const char *message)
{
    const char *type;
    const int status = gw_status_of(rc, 0, &type);
    return s_fail(g, c, ep, status, message, type, NULL, gw_disp_strerror(rc));
}

/* The machine-readable code of a failed generation: the head's, else the client's or the
 * gateway's own (gw_disp_strerror: an event the gateway lost, dispatch.h gw_call_next). */
static const char *s_code_of(const gw_event_t *ev)
{
    return ev->wire_code_name[0] ? ev->wire_code_name : gw_disp_strerror(ev->code);
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

static void s_req_free(gw_req_t *r)
{
    gw_req_clear(r);
    free(r);
}

/* The request in sc's body (the caller frees it with s_req_free), or NULL when an error
 * response was queued (*res). */
static gw_req_t *s_request(gw_t *g, struct MHD_Connection *c, gw_conn_t *sc, int chat,
                           enum MHD_Result *res)
{
    const char *ep = gw_conn_ep(sc);
    char err[640];
    const char *param = NULL;
    if (s_json_values(sc->body ? sc->body : "", sc->len) > S_JSON_MAX_VALUES) {
        snprintf(err, sizeof err, "the body holds more than %d JSON values", S_JSON_MAX_VALUES);
        *res = gw_http_error(g, c, ep, MHD_HTTP_CONTENT_TOO_LARGE, err, "invalid_request_error",
                             NULL, "request_too_large");
        return NULL;
    }
    gw_req_t *r = calloc(1, sizeof *r);
    if (!r) {
        *res = s_fail_rc(g, c, ep, SW_CLIENT_ENOMEM, "out of memory for the request");
        return NULL;
    }
    s_parse_begin(g);
    const int prc = gw_req_parse(r, sc->body ? sc->body : "", sc->len, chat, &g->o->defaults, err,
                                 sizeof err, &param);
    s_parse_end(g);
    if (prc != 0) {
        s_req_free(r);
        *res = prc == -2 ? s_fail_rc(g, c, ep, SW_CLIENT_ENOMEM, err)
                         : gw_http_error(g, c, ep, MHD_HTTP_BAD_REQUEST, err,
                                         "invalid_request_error", param, "invalid_request");
        return NULL;
    }
    return r;
}

/* ---- a streamed response ------------------------------------------------------------------ */

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

/* The error a generation still running gets when the gateway is told to stop
 * (SIGINT/SIGTERM): a stream ends with it as an error event, a plain request
 * answers 503; the generation is cancelled at its head. */
static void s_shutdown_event(gw_call_t *call, gw_event_t *ev)
{
    gw_call_cancel(call);
    memset(ev, 0, sizeof *ev);
    ev->type = SW_CLIENT_EV_ERROR;
    ev->code = SW_CLIENT_EBUSY;
    snprintf(ev->wire_code_name, sizeof ev->wire_code_name, "shutting_down");
    snprintf(ev->message, sizeof ev->message,
             "the gateway is shutting down (shardwire serve was stopped): the generation was "
             "cancelled; send it again to a running gateway");
}

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
    st->last_out = gw_now_ms();
}

/* Turns one event into SSE text. */
static void s_stream_event(s_stream_t *st, const gw_event_t *ev)
{
    gw_t *g = st->g;
    const gw_req_t *r = st->req;
    if (ev->type == SW_CLIENT_EV_ERROR) {
        const char *type;
        (void)gw_status_of(ev->code, ev->wire_code, &type);
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
        if (*st->g->stop) {
            gw_event_t ev;
            s_shutdown_event(st->call, &ev);
            s_stream_event(st, &ev);
            continue;
        }
        if (s_client_gone(st->fd)) { /* each time: tokens may come faster than S_POLL_MS */
            gw_call_cancel(st->call);
            gw_metrics_error(st->g->metrics, "client_gone");
            st->ended = 1;
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        gw_event_t ev;
        if (gw_call_next(st->call, &ev, S_POLL_MS) == 0) {
            s_stream_event(st, &ev);
            continue;
        }
        if (gw_now_ms() - st->last_out > S_KEEPALIVE_MS)
            s_out(st, strdup(": keep-alive\n\n"));
    }
}

static void s_stream_free(void *cls)
{
    s_stream_t *st = cls;
    if (!st->ended) /* MHD saw the client go when a write failed */
        gw_metrics_error(st->g->metrics, "client_gone");
    gw_call_destroy(&st->call); /* cancels a generation still running */
    gw_inflight_end(st->g, st->key);
    s_req_free(st->req);
    free(st->out);
    free(st);
}

/* ---- one generation ----------------------------------------------------------------------- */

/* A submitted generation and the HTTP request that answers it. */
typedef struct s_reply {
    gw_t *g;                  /* the gateway */
    struct MHD_Connection *c; /* the HTTP connection */
    const char *ep;           /* its endpoint's name in /metrics */
    gw_call_t *call;          /* the generation */
    gw_req_t *req;            /* the parsed request */
    char id[64];              /* response id ("chatcmpl-..." / "cmpl-...") */
    long long created;        /* Unix time */
    int fd;                   /* the HTTP client's socket */
    int key;                  /* the API key it counts against (-1 = none) */
} s_reply_t;

/* Waits for the generation's next event, watching the HTTP client: also after an event, since
 * a generation whose tokens come faster than S_POLL_MS would otherwise never look. 0, or -1 when
 * it left. */
static int s_wait_event(gw_t *g, gw_call_t *call, int fd, gw_event_t *ev)
{
    for (;;) {
        const int got = gw_call_next(call, ev, S_POLL_MS) == 0;
        if (s_client_gone(fd)) {
            gw_call_cancel(call);
            gw_metrics_error(g->metrics, "client_gone");
            return -1;
        }
        if (got)
            return 0;
        if (*g->stop) {
            s_shutdown_event(call, ev);
            return 0;
        }
    }
}

/* 0 when some head the gateway would send to (sw_client_trusted_head, as /v1/models
 * and /health count them) serves r->model; otherwise an error response was queued
 * (*res; s_fail: 503 no_head, 404 model_not_found naming only those heads' models, or the
 * table's failure: 503 relay_unreachable, 500 out_of_memory, 503 dispatcher_unavailable,
 * 502 dispatcher_bad_reply). */
static int s_check_model(gw_t *g, struct MHD_Connection *c, const char *ep, gw_call_t *call,
                         const gw_req_t *r, enum MHD_Result *res)
{
    sw_client_table_t t;
    char err[512];
    int rc = gw_call_table(call, &t, err, sizeof err);
    if (rc != 0) {
        *res = s_fail_rc(g, c, ep, rc, err);
        return -1;
    }
    int served = 0, heads = 0;
    char names[512] = "";
    for (int i = 0; i < t.n_peers; i++) {
        if (!sw_client_peer_serves(&t.peers[i], NULL) || !sw_client_trusted_head(&t, &t.peers[i]))
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
        *res = s_fail_rc(g, c, ep, SW_CLIENT_ENOHEAD,
                         "no head node is connected to the cluster's relay");
        return -1;
    }
    snprintf(msg, sizeof msg, "the model '%.100s' does not exist here; this cluster serves %s",
             r->model, names);
    *res = s_fail(g, c, ep, MHD_HTTP_NOT_FOUND, msg, "invalid_request_error", "model",
                  "model_not_found");
    return -1;
}

/*
 * Admits rp's request and submits it: a head serves its model (unless it names a head), a
 * generation is free on the gateway and in its key's share. 0 with the request id in rid
 * (the generation counts as in flight until gw_inflight_end), or -1 when an error response
 * was queued (*res).
 */
static int s_submit(const s_reply_t *rp, char rid[SW_CLIENT_ID_LEN], enum MHD_Result *res)
{
    gw_t *g = rp->g;
    const gw_req_t *r = rp->req;
    char err[640];
    if (!r->head && s_check_model(g, rp->c, rp->ep, rp->call, r, res) != 0)
        return -1;
    if (gw_metrics_inflight(g->metrics, +1, g->o->max_inflight) < 0) {
        snprintf(err, sizeof err,
                 "%d generations are in flight on this gateway (shardwire serve "
                 "--max-inflight): retry later",
                 g->o->max_inflight);
        *res = s_fail(g, rp->c, rp->ep, MHD_HTTP_TOO_MANY_REQUESTS, err, "rate_limit_error", NULL,
                      "too_many_requests");
        return -1;
    }
    if (gw_keys_take(g, rp->key) != 0) {
        gw_metrics_inflight(g->metrics, -1, 0);
        snprintf(err, sizeof err,
                 "this API key has %d generations in flight, its share of the gateway (shardwire "
                 "serve --max-inflight-per-key): retry when one has ended",
                 g->o->max_inflight_per_key);
        *res = s_fail(g, rp->c, rp->ep, MHD_HTTP_TOO_MANY_REQUESTS, err, "rate_limit_error", NULL,
                      "too_many_requests");
        return -1;
    }
    /* the head shares its compute between this gateway's API keys (its tenants) */
    sw_client_request_t q = r->q;
    char tenant[GW_TENANT_LEN];
    gw_keys_tenant(g, rp->key, tenant);
    q.tenant = tenant;
    int rc = gw_call_submit(rp->call, &q, r->model, r->head, rid, err, sizeof err);
    if (rc != 0) {
        gw_inflight_end(g, rp->key);
        *res = s_fail_rc(g, rp->c, rp->ep, rc, err);
        return -1;
    }
    return 0;
}

/*
 * The first event decides the status: an error before any token is a plain HTTP error, also
 * for a stream. 1 when the request streams, with its first event in *ev; 0 when the answer was
 * queued (*res; MHD_NO when the client is gone) and the generation no longer counts in flight.
 */
static int s_answer(const s_reply_t *rp, gw_event_t *ev, enum MHD_Result *res)
{
    gw_t *g = rp->g;
    char *text = NULL;
    size_t text_len = 0;
    for (;;) {
        if (s_wait_event(g, rp->call, rp->fd, ev) != 0) {
            gw_inflight_end(g, rp->key);
            *res = MHD_NO; /* the client is gone: close */
            break;
        }
        if (ev->type == SW_CLIENT_EV_ERROR) {
            gw_inflight_end(g, rp->key);
            const char *type;
            int status = gw_status_of(ev->code, ev->wire_code, &type);
            *res = s_fail(g, rp->c, rp->ep, status, ev->message, type, NULL, s_code_of(ev));
            break;
        }
        if (rp->req->stream) {
            free(text);
            return 1;
        }
        gw_metrics_tokens(g->metrics, ev->n_tokens);
        if (ev->text_len) {
            char *t = realloc(text, text_len + ev->text_len + 1);
            if (!t) { /* the caller's gw_call_destroy cancels the generation */
                gw_inflight_end(g, rp->key);
                *res = s_fail_rc(g, rp->c, rp->ep, SW_CLIENT_ENOMEM,
                                 "the gateway ran out of memory for the completion's text: the "
                                 "generation was cancelled on the cluster; send the request again");
                break;
            }
            text = t;
            memcpy(text + text_len, ev->text, ev->text_len);
            text_len += ev->text_len;
            text[text_len] = 0;
        }
        if (ev->type == SW_CLIENT_EV_DONE) {
            gw_inflight_end(g, rp->key);
            gw_metrics_generation(g->metrics, &ev->stats);
            *res = gw_http_send(g, rp->c, rp->ep, MHD_HTTP_OK,
                                gw_json_completion(rp->req, rp->id, rp->created, text, text_len,
                                                   ev->finish, &ev->stats),
                                "application/json", 0);
            break;
        }
    }
    free(text);
    return 0;
}

/* Starts the stream of server-sent events with its first event ev. 0 when the stream's reader
 * took the call and the request over; -1 when they are still the caller's, with a 500 queued
 * (*res) and the generation no longer in flight. */
static int s_stream(const s_reply_t *rp, const gw_event_t *ev, enum MHD_Result *res)
{
    gw_t *g = rp->g;
    s_stream_t *st = calloc(1, sizeof *st);
    struct MHD_Response *resp =
        st ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, S_STREAM_BLOCK, s_stream_read, st,
                                               s_stream_free)
           : NULL;
    if (!resp) {
        free(st);
        gw_inflight_end(g, rp->key);
        *res = s_fail_rc(g, rp->c, rp->ep, SW_CLIENT_ENOMEM, "out of memory for the stream");
        return -1;
    }
    st->g = g;
    st->call = rp->call;
    st->req = rp->req;
    snprintf(st->id, sizeof st->id, "%s", rp->id);
    st->created = rp->created;
    st->fd = rp->fd;
    st->key = rp->key;
    if (rp->req->chat) /* the first chunk names the role, as OpenAI's do */
        s_out(st, gw_sse_chunk(rp->req, rp->id, rp->created, "", 0, 0, 1, NULL));
    s_stream_event(st, ev);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    *res = MHD_queue_response(rp->c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    gw_metrics_response(g->metrics, rp->ep, MHD_HTTP_OK);
    return 0;
}

static enum MHD_Result s_generate(gw_t *g, struct MHD_Connection *c, gw_conn_t *sc, int chat)
{
    enum MHD_Result res;
    gw_req_t *r = s_request(g, c, sc, chat, &res);
    if (!r)
        return res;
    s_reply_t rp = {.g = g, .c = c, .ep = gw_conn_ep(sc), .req = r, .key = sc->key};
    char err[512];
    int rc;
    rp.call = gw_call_new(g->disp, &rc, err, sizeof err);
    if (!rp.call) { /* as a failed peer table or submit: 500 out_of_memory, 503 dispatcher_... */
        s_req_free(r);
        return s_fail_rc(g, c, rp.ep, rc, err);
    }
    char rid[SW_CLIENT_ID_LEN];
    gw_event_t ev;
    if (s_submit(&rp, rid, &res) == 0) {
        snprintf(rp.id, sizeof rp.id, "%s%s", chat ? "chatcmpl-" : "cmpl-", rid + 4);
        rp.created = (long long)time(NULL);
        rp.fd = s_conn_fd(c);
        if (s_answer(&rp, &ev, &res) == 1 && s_stream(&rp, &ev, &res) == 0)
            return res; /* the stream's reader took the call and the request over */
    }
    gw_call_destroy(&rp.call);
    s_req_free(r);
    return res;
}

enum MHD_Result gw_ep_chat(gw_t *g, struct MHD_Connection *c, gw_conn_t *sc, const char *url)
{
    (void)url;
    return s_generate(g, c, sc, 1);
}

enum MHD_Result gw_ep_completions(gw_t *g, struct MHD_Connection *c, gw_conn_t *sc, const char *url)
{
    (void)url;
    return s_generate(g, c, sc, 0);
}
