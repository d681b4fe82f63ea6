/*
 * dispatch.c - the gateway's client thread (dispatch.h): owns the
 * sw_client_t, serves commands from the HTTP threads over an inproc ROUTER
 * and routes each generation's events to the thread that submitted it.
 *
 * Inproc messages (both sides live in this file):
 *   call -> dispatcher   ['T']                       peer table
 *                        ['S'][struct s_submit]      submit (pointers valid during the call)
 *                        ['C']                       cancel this call's generation
 *   dispatcher -> call   ['R'][int rc][err][payload] reply: a table (struct + peers) or an id
 *                        ['E'][struct s_ev][text]    one event of the generation
 *
 * The ROUTER is ZMQ_ROUTER_MANDATORY, so that a reply or an event for a call that is gone
 * (its HTTP thread gave up on the submit's reply, or dropped the call without a cancel) fails
 * with EHOSTUNREACH instead of vanishing: the dispatcher then cancels that generation at its
 * head, which would otherwise run to its end for nobody and hold a session slot.
 */
#include "dispatch.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "args.h"
#include "log.h"

#define S_TABLE_MAX_AGE_MS 1000 /* a peer table (with a head) this old is asked for again */
#define S_STATUS_TIMEOUT_MS 2000
#define S_REJOIN_MS 2000 /* between attempts to join the relay again */
#define S_IDENT_MAX 32   /* bytes of a ROUTER identity kept */
#define S_REPLY_TIMEOUT_MS 15000
#define S_SPOT_EVERY_MS (GW_SPOT_EVERY_S * 1000) /* between two spot queries to a head */

struct s_submit {
    const sw_client_request_t *q; /* the request (the caller's memory) */
    const char *model;            /* model name or fingerprint prefix, or NULL */
    const char *head;             /* head name, or NULL */
};

struct s_ev {
    int type, n_tokens, finish, code, wire_code;
    char wire_code_name[32];
    char message[640];
    sw_client_stats_t stats;
};

/* A generation in flight and the call that owns it. */
struct s_route {
    char id[SW_CLIENT_ID_LEN];        /* request id, "" = free */
    unsigned char ident[S_IDENT_MAX]; /* the call's ROUTER identity */
    size_t ident_len;                 /* its bytes */
};

struct gw_disp {
    void *zctx;                     /* the caller's context */
    char endpoint[64];              /* inproc address of the ROUTER */
    void *router;                   /* owned by the thread after start */
    pthread_t thread;               /* the dispatcher */
    volatile int stop;              /* set by gw_disp_destroy */
    sw_client_t *client;            /* NULL while the relay connection is down */
    sw_client_opts_t opts;          /* for joining again */
    sw_sec_t sec;                   /* keys (copied; wiped at the end) */
    char relay[SW_ARGS_RELAYS_MAX]; /* relay endpoint(s) (copied) */
    char name[SW_CLIENT_NAME_LEN];
    double next_join;        /* next attempt to join the relay (ms) */
    sw_client_table_t table; /* cached peer table */
    double table_at;         /* when it was fetched (ms); 0 = none */
    gw_metrics_t *metrics;   /* where heads' spot reports go (the caller's), or NULL */
    double spot_at;          /* when the heads were last asked for them (ms) */
    struct s_route routes[SW_CLIENT_MAX_INFLIGHT];
};

struct gw_call {
    void *sock;    /* DEALER to the dispatcher */
    int submitted; /* a generation was submitted and has not ended */
    char *text;    /* the current event's text (malloc'd) */
};

static double s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- dispatcher thread ------------------------------------------------------------------ */

/* Sends frames (count n) to the call with this identity, without waiting. 0, or -1 when the
 * message was not sent: errno EHOSTUNREACH when the call is gone (its socket closed), EAGAIN
 * when its queue is full. */
static int s_send_to(gw_disp_t *d, const unsigned char *ident, size_t ident_len,
                     const void *const *parts, const size_t *lens, int n)
{
    if (zmq_send(d->router, ident, ident_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return -1;
    for (int i = 0; i < n; i++)
        if (zmq_send(d->router, parts[i], lens[i], (i + 1 < n ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) <
            0)
            return -1;
    return 0;
}

/* s_send_to of a reply ['R'][rc][err][p1][p2]: its result. */
static int s_reply(gw_disp_t *d, const unsigned char *ident, size_t ident_len, int rc,
                   const char *err, const void *p1, size_t l1, const void *p2, size_t l2)
{
    const void *parts[] = {"R", &rc, err ? err : "", p1 ? p1 : "", p2 ? p2 : ""};
    size_t lens[] = {1, sizeof rc, err ? strlen(err) : 0, p1 ? l1 : 0, p2 ? l2 : 0};
    return s_send_to(d, ident, ident_len, parts, lens, 5);
}

/* Cancels route r's generation at its head (its call is gone or asked for it) and frees r. */
static void s_route_cancel(gw_disp_t *d, struct s_route *r, const char *why)
{
    SW_DEBUG("gateway: cancelling request %s: %s", r->id, why);
    if (d->client)
        (void)sw_client_cancel(d->client, r->id);
    memset(r, 0, sizeof *r);
}

/* The peer table, fetched again when older than S_TABLE_MAX_AGE_MS. 0 or a client code. */
static int s_table(gw_disp_t *d, char *err, size_t err_len)
{
    if (!d->client) {
        snprintf(err, err_len, "the gateway is not connected to the relay at %.300s (retrying)",
                 d->relay);
        return SW_CLIENT_ECONNECT;
    }
    double now = s_now_ms();
    if (d->table_at && now - d->table_at < S_TABLE_MAX_AGE_MS)
        return 0;
    sw_client_table_t t;
    int rc = sw_client_status(d->client, &t, S_STATUS_TIMEOUT_MS, err, err_len);
    if (rc != 0)
        return rc;
    sw_client_table_clear(&d->table);
    d->table = t;
    /* kept only while it shows a head: a cluster coming up is seen at once */
    d->table_at = 0;
    for (int i = 0; i < t.n_peers && !d->table_at; i++)
        if (sw_client_peer_serves(&t.peers[i], NULL))
            d->table_at = now;
    return 0;
}

static void s_cmd_table(gw_disp_t *d, const unsigned char *ident, size_t ident_len)
{
    char err[512] = "";
    int rc = s_table(d, err, sizeof err);
    if (rc != 0) {
        s_reply(d, ident, ident_len, rc, err, NULL, 0, NULL, 0);
        return;
    }
    s_reply(d, ident, ident_len, 0, "", &d->table, sizeof d->table, d->table.peers,
            (size_t)d->table.n_peers * sizeof *d->table.peers);
}

static struct s_route *s_route_of_ident(gw_disp_t *d, const unsigned char *ident, size_t len)
{
    for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT; i++)
        if (d->routes[i].id[0] && d->routes[i].ident_len == len &&
            !memcmp(d->routes[i].ident, ident, len))
            return &d->routes[i];
    return NULL;
}

static void s_cmd_submit(gw_disp_t *d, const unsigned char *ident, size_t ident_len,
                         const struct s_submit *sub)
{
    char err[512] = "", head[SW_CLIENT_NAME_LEN], id[SW_CLIENT_ID_LEN] = "";
    struct s_route *r = NULL;
    for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT && !r; i++)
        if (!d->routes[i].id[0])
            r = &d->routes[i];
    int rc = r ? 0 : SW_CLIENT_EBUSY;
    if (!r)
        snprintf(err, sizeof err, "%d requests are in flight", SW_CLIENT_MAX_INFLIGHT);
    if (rc == 0 && ident_len > S_IDENT_MAX) {
        rc = SW_CLIENT_EINVAL;
        snprintf(err, sizeof err, "internal: identity too long");
    }
    if (rc == 0)
        rc = s_table(d, err, sizeof err);
    if (rc == 0)
        rc = sw_client_pick_head(&d->table, sub->head, sub->model, head, err, sizeof err);
    if (rc == 0)
        rc = sw_client_submit(d->client, head, sub->q, id, err, sizeof err);
    if (rc == 0) {
        memcpy(r->id, id, sizeof r->id);
        memcpy(r->ident, ident, ident_len);
        r->ident_len = ident_len;
    }
    /* a call that gave up waiting (S_REPLY_TIMEOUT_MS) is gone: nobody reads this generation */
    if (s_reply(d, ident, ident_len, rc, err, id, strlen(id), NULL, 0) != 0 && rc == 0 &&
        errno == EHOSTUNREACH)
        s_route_cancel(d, r, "the call that submitted it is gone");
}

static void s_forward_event(gw_disp_t *d, const sw_client_event_t *ev)
{
    struct s_route *r = NULL;
    for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT && !r; i++)
        if (d->routes[i].id[0] && !strcmp(d->routes[i].id, ev->id))
            r = &d->routes[i];
    if (!r)
        return;
    struct s_ev e;
    memset(&e, 0, sizeof e);
    e.type = ev->type;
    e.n_tokens = ev->n_tokens;
    e.finish = ev->finish;
    e.code = ev->code;
    e.wire_code = ev->wire_code;
    snprintf(e.wire_code_name, sizeof e.wire_code_name, "%s",
             ev->wire_code_name ? ev->wire_code_name : "");
    snprintf(e.message, sizeof e.message, "%s", ev->message ? ev->message : "");
    if (ev->stats)
        e.stats = *ev->stats;
    const void *parts[] = {"E", &e, ev->text_len ? ev->text : ""};
    size_t lens[] = {1, sizeof e, ev->text_len};
    const int sent = s_send_to(d, r->ident, r->ident_len, parts, lens, 3);
    if (ev->type != SW_CLIENT_EV_TOKENS)
        memset(r, 0, sizeof *r);
    else if (sent != 0 && errno == EHOSTUNREACH) /* its call is gone without a cancel */
        s_route_cancel(d, r, "the call that submitted it is gone");
    if (ev->type == SW_CLIENT_EV_ERROR &&
        (ev->code == SW_CLIENT_EHEADGONE || ev->code == SW_CLIENT_EKEY))
        d->table_at = 0; /* choose again from a fresh table */
}

/* Reads one command from the router. */
static void s_command(gw_disp_t *d)
{
    unsigned char ident[256], cmd = 0;
    int il = zmq_recv(d->router, ident, sizeof ident, ZMQ_DONTWAIT);
    if (il < 0)
        return;
    struct s_submit sub;
    memset(&sub, 0, sizeof sub);
    int more = 0, n = 0;
    size_t ml = sizeof more;
    zmq_getsockopt(d->router, ZMQ_RCVMORE, &more, &ml);
    if (more)
        n = zmq_recv(d->router, &cmd, 1, 0);
    zmq_getsockopt(d->router, ZMQ_RCVMORE, &more, &ml);
    int sl = 0;
    if (more)
        sl = zmq_recv(d->router, &sub, sizeof sub, 0);
    zmq_getsockopt(d->router, ZMQ_RCVMORE, &more, &ml);
    while (more) { /* nothing else is expected: drain */
        char junk[64];
        if (zmq_recv(d->router, junk, sizeof junk, 0) < 0)
            break;
        zmq_getsockopt(d->router, ZMQ_RCVMORE, &more, &ml);
    }
    if (n != 1 || (size_t)il > sizeof ident)
        return;
    if (cmd == 'T') {
        s_cmd_table(d, ident, (size_t)il);
    } else if (cmd == 'S' && sl == (int)sizeof sub) {
        if (!d->client) {
            char err[512];
            snprintf(err, sizeof err,
                     "the gateway is not connected to the relay at %.300s (retrying)", d->relay);
            s_reply(d, ident, (size_t)il, SW_CLIENT_ECONNECT, err, NULL, 0, NULL, 0);
        } else {
            s_cmd_submit(d, ident, (size_t)il, &sub);
        }
    } else if (cmd == 'C') {
        struct s_route *r = s_route_of_ident(d, ident, (size_t)il);
        if (r)
            s_route_cancel(d, r, "its call cancelled it");
    }
}

/* Every S_SPOT_EVERY_MS: asks the trusted heads of the last peer table (those
 * it would send requests to; no new table is fetched for it) for their spot
 * reports, without waiting; the reports that arrived go to the metrics. */
static void s_spot(gw_disp_t *d)
{
    if (!d->metrics || !d->client)
        return;
    char head[SW_CLIENT_NAME_LEN];
    sw_client_spot_t rep;
    while (sw_client_spot_take(d->client, head, &rep) == 0)
        gw_metrics_spot(d->metrics, head, &rep);
    const double now = s_now_ms();
    if (now - d->spot_at < S_SPOT_EVERY_MS)
        return;
    d->spot_at = now;
    int asked = 0;
    for (int i = 0; i < d->table.n_peers && asked < GW_METRICS_SPOT_HEADS; i++) {
        const sw_client_peer_t *p = &d->table.peers[i];
        if (!sw_client_trusted_head(&d->table, p))
            continue;
        asked++;
        if (sw_client_spot_ask(d->client, p->name) != 0)
            SW_DEBUG("gateway: could not ask %s for its spot checks now", p->name);
    }
}

/* The relay connection broke: fail the generations in flight and join again later. */
static void s_lost(gw_disp_t *d)
{
    SW_WARN("gateway: lost the relay connection; joining %s again every %d s", d->relay,
            S_REJOIN_MS / 1000);
    for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT; i++) {
        struct s_route *r = &d->routes[i];
        if (!r->id[0])
            continue;
        sw_client_event_t ev;
        memset(&ev, 0, sizeof ev);
        ev.type = SW_CLIENT_EV_ERROR;
        memcpy(ev.id, r->id, sizeof ev.id);
        ev.code = SW_CLIENT_ECONNECT;
        ev.message = "lost the connection to the relay";
        ev.wire_code_name = "";
        s_forward_event(d, &ev);
    }
    sw_client_destroy(&d->client);
    d->table_at = 0;
    d->next_join = s_now_ms() + S_REJOIN_MS;
}

static void *s_thread(void *arg)
{
    gw_disp_t *d = arg;
    while (!d->stop) {
        if (!d->client && s_now_ms() >= d->next_join) {
            char err[512];
            d->client = sw_client_new(&d->opts, err, sizeof err);
            if (d->client)
                SW_INFO("gateway: joined the relay at %s again", d->relay);
            else
                d->next_join = s_now_ms() + S_REJOIN_MS;
        }
        zmq_pollitem_t items[1 + SW_PEER_MAX_RELAYS] = {{d->router, 0, ZMQ_POLLIN, 0}};
        const int n_items =
            1 + (d->client ? sw_client_poll_items(d->client, items + 1, SW_PEER_MAX_RELAYS) : 0);
        int wait = d->client && sw_client_pending(d->client) > 0 ? 0 : 100;
        if (zmq_poll(items, n_items, wait) < 0 && errno != EINTR)
            break;
        if (items[0].revents & ZMQ_POLLIN)
            for (int i = 0; i < 64; i++) {
                zmq_pollitem_t one = {d->router, 0, ZMQ_POLLIN, 0};
                if (zmq_poll(&one, 1, 0) <= 0)
                    break;
                s_command(d);
            }
        /* events (and the client's watches, which want a call every so often) */
        for (int i = 0; d->client && i < 256; i++) {
            sw_client_event_t ev;
            int r = sw_client_next(d->client, &ev, 0);
            if (r == 0) {
                s_forward_event(d, &ev);
                continue;
            }
            if (r < 0)
                s_lost(d);
            break;
        }
        s_spot(d);
    }
    return NULL;
}

gw_disp_t *gw_disp_new(void *zctx, const sw_client_opts_t *opts, gw_metrics_t *metrics, char *err,
                       size_t err_len)
{
    gw_disp_t *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    d->zctx = zctx;
    d->metrics = metrics;
    snprintf(d->relay, sizeof d->relay, "%s", opts->relay);
    snprintf(d->name, sizeof d->name, "%s", opts->name ? opts->name : "gateway");
    if (opts->sec)
        d->sec = *opts->sec;
    else
        d->sec.insecure = 1;
    d->opts = *opts;
    d->opts.relay = d->relay;
    d->opts.name = d->name;
    d->opts.sec = &d->sec;
    snprintf(d->endpoint, sizeof d->endpoint, "inproc://sw-gateway-%p", (void *)d);
    d->router = zmq_socket(zctx, ZMQ_ROUTER);
    int zero = 0, one = 1;
    if (!d->router || zmq_setsockopt(d->router, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_setsockopt(d->router, ZMQ_ROUTER_MANDATORY, &one, sizeof one) != 0 ||
        zmq_bind(d->router, d->endpoint) != 0) {
        snprintf(err, err_len, "inproc socket: %s", zmq_strerror(errno));
        goto fail;
    }
    d->client = sw_client_new(&d->opts, err, err_len);
    if (!d->client)
        goto fail;
    if (pthread_create(&d->thread, NULL, s_thread, d) != 0) {
        snprintf(err, err_len, "cannot start the dispatcher thread");
        goto fail;
    }
    return d;
fail:
    sw_client_destroy(&d->client);
    if (d->router)
        zmq_close(d->router);
    sw_sec_wipe(&d->sec);
    free(d);
    return NULL;
}

void gw_disp_destroy(gw_disp_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    gw_disp_t *d = *self_p;
    d->stop = 1;
    pthread_join(d->thread, NULL);
    sw_client_destroy(&d->client);
    sw_client_table_clear(&d->table);
    zmq_close(d->router);
    sw_sec_wipe(&d->sec);
    free(d);
    *self_p = NULL;
}

/* ---- the HTTP threads' side -------------------------------------------------------------- */

gw_call_t *gw_call_new(gw_disp_t *d, int *rc, char *err, size_t err_len)
{
    gw_call_t *c = calloc(1, sizeof *c);
    if (!c) {
        *rc = SW_CLIENT_ENOMEM;
        snprintf(err, err_len, "out of memory for a link to the gateway's dispatcher thread");
        return NULL;
    }
    c->sock = zmq_socket(d->zctx, ZMQ_DEALER);
    int zero = 0;
    if (!c->sock || zmq_setsockopt(c->sock, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_connect(c->sock, d->endpoint) != 0) {
        /* ZeroMQ's own limits (its socket count, ZMQ_MAX_SOCKETS; file descriptors) or a
         * context being terminated, not this process's memory: a failure of the link */
        const int e = errno;
        *rc = e == ENOMEM ? SW_CLIENT_ENOMEM : GW_DISP_ELINK;
        snprintf(err, err_len,
                 "internal: cannot open a link to the gateway's dispatcher thread: %s",
                 zmq_strerror(e));
        if (c->sock)
            zmq_close(c->sock);
        free(c);
        return NULL;
    }
    *rc = 0;
    return c;
}

void gw_call_destroy(gw_call_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    gw_call_t *c = *self_p;
    if (c->submitted)
        gw_call_cancel(c);
    zmq_close(c->sock);
    free(c->text);
    free(c);
    *self_p = NULL;
}

/*
 * Receives one whole message: its first max frames into f (malloc'd, fl[i] bytes, NUL after),
 * the others dropped, so that the next message starts clean whatever happens. The number of
 * frames it had, or -1 when the socket failed (errno says why). *oom: a frame's copy could not
 * be allocated (its f[i] is NULL).
 */
static int s_recv_msg(void *sock, void **f, size_t *fl, int max, int *oom)
{
    int n = 0, more = 1;
    *oom = 0;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, 0) < 0) {
            const int e = errno;
            zmq_msg_close(&m);
            errno = e;
            return -1;
        }
        more = zmq_msg_more(&m);
        if (n < max) {
            fl[n] = zmq_msg_size(&m);
            f[n] = malloc(fl[n] + 1);
            if (f[n]) {
                memcpy(f[n], zmq_msg_data(&m), fl[n]);
                ((char *)f[n])[fl[n]] = 0;
            } else {
                *oom = 1;
            }
        }
        n++;
        zmq_msg_close(&m);
    }
    return n;
}

const char *gw_disp_strerror(int rc)
{
    switch (rc) {
    case GW_DISP_ELINK:
        return "dispatcher_unavailable";
    case GW_DISP_EREPLY:
        return "dispatcher_bad_reply";
    default:
        return sw_client_strerror(rc);
    }
}

/* Waits for the dispatcher's reply ['R'][rc][err][p1][p2]; the payloads are malloc'd. Its rc
 * (*answered 1), or what failed on the way (*answered 0): SW_CLIENT_ECONNECT (no reply in time),
 * SW_CLIENT_ENOMEM (no memory for its copy), GW_DISP_ELINK (the socket failed) or GW_DISP_EREPLY
 * (not such a reply). */
static int s_wait_reply(gw_call_t *c, char *err, size_t err_len, void **p1, size_t *l1, void **p2,
                        size_t *l2, int *answered)
{
    *p1 = *p2 = NULL;
    *answered = 0;
    zmq_pollitem_t it = {c->sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, S_REPLY_TIMEOUT_MS) <= 0) {
        snprintf(err, err_len, "the gateway's relay connection did not answer in time");
        return SW_CLIENT_ECONNECT;
    }
    void *f[5] = {0};
    size_t fl[5] = {0};
    int oom;
    const int n = s_recv_msg(c->sock, f, fl, 5, &oom);
    int rc = GW_DISP_EREPLY;
    if (n < 0) {
        rc = GW_DISP_ELINK;
        snprintf(err, err_len, "internal: cannot read the dispatcher thread's reply: %s",
                 zmq_strerror(errno));
    } else if (oom) {
        rc = SW_CLIENT_ENOMEM;
        snprintf(err, err_len, "out of memory for the dispatcher thread's reply");
    } else if (n == 5 && fl[0] == 1 && ((char *)f[0])[0] == 'R' && fl[1] == sizeof(int)) {
        memcpy(&rc, f[1], sizeof rc);
        *answered = 1;
        snprintf(err, err_len, "%s", (char *)f[2]);
        *p1 = f[3];
        *l1 = fl[3];
        *p2 = f[4];
        *l2 = fl[4];
        f[3] = f[4] = NULL;
    } else {
        snprintf(err, err_len, "internal: malformed reply from the dispatcher thread (%d frames)",
                 n);
    }
    for (int i = 0; i < 5; i++)
        free(f[i]);
    return rc;
}

int gw_call_table(gw_call_t *c, sw_client_table_t *out, char *err, size_t err_len)
{
    memset(out, 0, sizeof *out);
    if (zmq_send(c->sock, "T", 1, 0) < 0) {
        snprintf(err, err_len, "internal: cannot ask the dispatcher thread: %s",
                 zmq_strerror(errno));
        return GW_DISP_ELINK;
    }
    void *p1, *p2;
    size_t l1, l2;
    int answered;
    int rc = s_wait_reply(c, err, err_len, &p1, &l1, &p2, &l2, &answered);
    if (rc == 0 && l1 != sizeof *out) {
        snprintf(err, err_len, "internal: malformed peer table from the dispatcher thread");
        rc = GW_DISP_EREPLY;
    }
    if (rc == 0) {
        memcpy(out, p1, sizeof *out);
        out->peers = p2; /* a copy of the dispatcher's array */
        p2 = NULL;
        if (out->n_peers < 0 || (size_t)out->n_peers * sizeof *out->peers != l2) {
            free(out->peers);
            memset(out, 0, sizeof *out);
            snprintf(err, err_len, "internal: malformed peer table from the dispatcher thread");
            rc = GW_DISP_EREPLY;
        }
    }
    free(p1);
    free(p2);
    return rc;
}

int gw_call_submit(gw_call_t *c, const sw_client_request_t *q, const char *model,
                   const char *head_name, char id[SW_CLIENT_ID_LEN], char *err, size_t err_len)
{
    struct s_submit sub = {.q = q, .model = model, .head = head_name};
    if (zmq_send(c->sock, "S", 1, ZMQ_SNDMORE) < 0 || zmq_send(c->sock, &sub, sizeof sub, 0) < 0) {
        snprintf(err, err_len, "internal: cannot pass the request to the dispatcher thread: %s",
                 zmq_strerror(errno));
        return GW_DISP_ELINK;
    }
    void *p1, *p2;
    size_t l1, l2;
    int answered;
    int rc = s_wait_reply(c, err, err_len, &p1, &l1, &p2, &l2, &answered);
    if (rc == 0) {
        snprintf(id, SW_CLIENT_ID_LEN, "%s", (char *)p1);
        c->submitted = 1;
    } else if (!answered) {
        /* the dispatcher may have started the generation all the same: gw_call_destroy's cancel
         * ends it (a cancel of a call with none is ignored) */
        c->submitted = 1;
    }
    free(p1);
    free(p2);
    return rc;
}

/* An event that could not be read ends the generation: *ev becomes an EV_ERROR with code (the
 * link's), the rest of the generation is cancelled at its head. Had it been dropped, a lost
 * EV_DONE would leave the HTTP request waiting for its client to leave. */
static void s_event_lost(gw_call_t *c, gw_event_t *ev, int code, const char *what)
{
    gw_call_cancel(c);
    memset(ev, 0, sizeof *ev);
    ev->type = SW_CLIENT_EV_ERROR;
    ev->code = code;
    snprintf(ev->message, sizeof ev->message,
             "%s: the generation was cancelled on the cluster; send the request again", what);
}

int gw_call_next(gw_call_t *c, gw_event_t *ev, int timeout_ms)
{
    zmq_pollitem_t it = {c->sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, timeout_ms) <= 0)
        return 1;
    void *f[3] = {0};
    size_t fl[3] = {0};
    int oom;
    const int n = s_recv_msg(c->sock, f, fl, 3, &oom);
    int rc = 1;
    if (n < 0 && errno != EINTR && errno != EAGAIN) {
        char what[160];
        snprintf(what, sizeof what, "internal: cannot read the generation's next event: %s",
                 zmq_strerror(errno));
        s_event_lost(c, ev, GW_DISP_ELINK, what);
        rc = 0;
    } else if (n > 0 && oom) {
        s_event_lost(c, ev, SW_CLIENT_ENOMEM,
                     "the gateway ran out of memory for the generation's next event");
        rc = 0;
    } else if (n > 0 &&
               (n != 3 || fl[0] != 1 || ((char *)f[0])[0] != 'E' || fl[1] != sizeof(struct s_ev))) {
        s_event_lost(c, ev, GW_DISP_EREPLY,
                     "internal: malformed event from the gateway's dispatcher thread");
        rc = 0;
    } else if (n > 0) {
        struct s_ev e;
        memcpy(&e, f[1], sizeof e);
        memset(ev, 0, sizeof *ev);
        ev->type = e.type;
        ev->n_tokens = e.n_tokens;
        ev->finish = e.finish;
        ev->code = e.code;
        ev->wire_code = e.wire_code;
        memcpy(ev->wire_code_name, e.wire_code_name, sizeof ev->wire_code_name);
        memcpy(ev->message, e.message, sizeof ev->message);
        ev->stats = e.stats;
        free(c->text);
        c->text = f[2]; /* NUL-terminated by s_recv_msg */
        f[2] = NULL;
        ev->text = c->text;
        ev->text_len = fl[2];
        if (ev->type != SW_CLIENT_EV_TOKENS)
            c->submitted = 0;
        rc = 0;
    }
    for (int i = 0; i < 3; i++)
        free(f[i]);
    return rc;
}

void gw_call_cancel(gw_call_t *c)
{
    if (!c->submitted)
        return;
    if (zmq_send(c->sock, "C", 1, ZMQ_DONTWAIT) < 0)
        SW_DEBUG("gateway: could not pass a cancel on: %s", zmq_strerror(errno));
    c->submitted = 0;
}
