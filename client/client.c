/*
 * client.c - the client side of a cluster (client.h): joining the relay,
 * the peer table, choosing a head, GenerateRequests in flight on one
 * connection, and turning TokenChunks and Errors into per-request events with
 * the watches (head gone, deadline, lost tokens, stop strings, wrong key).
 */
#include "client.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "log.h"
#include "peer.h"

#define S_QUIET_MS 3000       /* silence from a head before we check it is still there */
#define S_RESUME_GAP_MS 300   /* between two Resumes of one request while a gap lasts */
#define S_GRACE_MS 5000       /* past the head's own deadline before we give up */
#define S_STATUS_MS 5000      /* wait for a peer table */
#define S_HEADS_KNOWN 16      /* heads remembered from the last peer table */
#define S_SPOT_HEADS 8        /* heads whose spot reports sw_client_spot_ask awaits or keeps */
#define S_SPOT_WAIT_MS 30000  /* an asked head's report is taken this long after the question */
#define S_FAILOVER_MS 30000   /* a request whose head left waits this long for another */
#define S_REASK_MAX 3         /* a head that took us for gone is asked again this often */
#define S_REASK_STALE_MS 3000 /* ... and its old end, still on the way, ignored this long */
#define S_DEFAULT_TIMEOUT_MS (SW_REQUEST_DEFAULT_TIMEOUT_S * 1000)

typedef struct s_req {
    char id[SW_CLIENT_ID_LEN];     /* request id, "" = free slot */
    char head[SW_CLIENT_NAME_LEN]; /* the head it went to */
    double t_submit;               /* when it was sent (ms) */
    double deadline;               /* when we give up (ms) */
    double last_msg;               /* last message from its head, or last check (ms) */
    int head_missing;              /* consecutive checks that did not find the head */
    char stop[SW_CLIENT_MAX_STOP][SW_CLIENT_MAX_STOP_LEN + 1]; /* stop strings */
    int n_stop;                                                /* entries in stop */
    size_t stop_max;                                           /* longest stop string */
    char *text;                /* text not yet released (stop-string hold-back) */
    size_t text_len, text_cap; /* bytes held, capacity */
    int stopped;               /* a stop string was found: ignore the rest */
    sw_client_stats_t stats;   /* counters so far */
    double resume_at;          /* when to ask the head to send again (Resume), 0 = no need */
    double resumed_at;         /* when we last asked */
    /* failover: what it takes to ask another head for the rest */
    sw_client_request_t q;                  /* the request, its strings in blob and stop */
    char *blob;                             /* the prompt or the turns' strings, q points into it */
    sw_client_msg_t *turns;                 /* (q.n_messages) q.messages */
    const char *stop_p[SW_CLIENT_MAX_STOP]; /* q.stop: r->stop's rows */
    uint32_t *toks;                         /* (stats.n_generated) tokens received, in order */
    size_t toks_cap;                        /* entries allocated in toks */
    char model[65];  /* its head's model fingerprint, "" unknown: another head
                        serving it may take over */
    double gone_at;  /* when its head was found gone (0: it is there) */
    int n_reasks;    /* times its head ended it, taking us for gone, and was asked again */
    double reask_at; /* the last time (0: a token came since): an end then is the old one's */
} s_req_t;

struct sw_client {
    sw_peer_t *peer;   /* connection to the relay */
    int sealed;        /* 1 when the cluster seals (we hold an access key) */
    int secure;        /* 1 with keys: only key-bound heads are used */
    s_req_t *reqs;     /* SW_CLIENT_MAX_INFLIGHT slots */
    int n_inflight;    /* slots in use */
    double next_watch; /* next time the watches run (ms) */
    int announces;     /* announces the relay acked (a new one: it may have restarted) */
    struct {
        char name[SW_CLIENT_NAME_LEN]; /* a head seen in the last peer table */
        char model[65];                /* its model fingerprint */
    } heads[S_HEADS_KNOWN];            /* (n_heads): the model a request's head serves */
    int n_heads;                       /* entries in heads */
    struct {
        char head[SW_CLIENT_NAME_LEN]; /* "" = free */
        double asked_at;               /* the last SpotQuery sent (ms) */
        int fresh;                     /* 1: its report is not yet taken (sw_client_spot_take) */
        sw_client_spot_t report;       /* the last one that arrived */
    } spot[S_SPOT_HEADS];              /* sw_client_spot_ask's heads */
    /* the current event's storage (valid until the next sw_client_next) */
    uint32_t ev_tokens[SW_WIRE_MAX_CHUNK_TOKENS];
    char *ev_text;              /* released text */
    size_t ev_text_cap;         /* its capacity */
    sw_client_stats_t ev_stats; /* statistics of the ending request */
    char ev_message[SW_WIRE_MAX_ERROR_TEXT + 128];
};

static double s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

const char *sw_client_strerror(int rc)
{
    switch (rc) {
    case SW_CLIENT_OK:
        return "ok";
    case SW_CLIENT_EINVAL:
        return "invalid_request";
    case SW_CLIENT_ECONNECT:
        return "relay_unreachable";
    case SW_CLIENT_ENOHEAD:
        return "no_head";
    case SW_CLIENT_EKEY:
        return "wrong_access_key";
    case SW_CLIENT_EHEAD:
        return "head_error";
    case SW_CLIENT_EHEADGONE:
        return "head_gone";
    case SW_CLIENT_ETIMEOUT:
        return "timeout";
    case SW_CLIENT_ELOST:
        return "tokens_lost";
    case SW_CLIENT_EBUSY:
        return "busy";
    case SW_CLIENT_ENOMEM:
        return "out_of_memory";
    case SW_CLIENT_ECANCELLED:
        return "cancelled";
    default:
        return "unknown";
    }
}

const char *sw_client_finish_name(int finish)
{
    switch (finish) {
    case SW_CLIENT_FINISH_LENGTH:
        return "length";
    case SW_CLIENT_FINISH_EOS:
        return "eos";
    case SW_CLIENT_FINISH_STOP:
        return "stop";
    case SW_CLIENT_FINISH_DEADLINE:
        return "deadline";
    default:
        return "?";
    }
}

/* Writes one line into err and returns code. */
static int s_fail(int code, char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int s_fail(int code, char *err, size_t err_len, const char *fmt, ...)
{
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* Copies a peer's text into dst, control characters (but tab) as '?'. */
/* A peer's text, bounded and without the control characters a terminal acts on (log.h). */
static void s_clean(char *dst, size_t dst_len, const char *src)
{
    if (!dst_len)
        return;
    size_t n = src ? strnlen(src, dst_len - 1) : 0;
    memcpy(dst, src ? src : "", n);
    sw_text_clean(dst, dst, n, 0, NULL);
}

static void s_random_hex(char *out, size_t n_bytes)
{
    unsigned char rnd[16];
    if (n_bytes > sizeof rnd)
        n_bytes = sizeof rnd;
    randombytes_buf(rnd, n_bytes);
    for (size_t i = 0; i < n_bytes; i++)
        snprintf(out + 2 * i, 3, "%02x", rnd[i]);
}

/* ---- connection ------------------------------------------------------------------------- */

sw_client_t *sw_client_new(const sw_client_opts_t *o, char *err, size_t err_len)
{
    if (!o || !o->relay) {
        s_fail(0, err, err_len, "no relay endpoint given");
        return NULL;
    }
    if (sodium_init() < 0) {
        s_fail(0, err, err_len, "libsodium cannot start");
        return NULL;
    }
    /* SW_CLIENT_NAME (cluster init's shardwire.sh sets it: the name the relay's
     * allow-list binds our key to) comes before the program's own default */
    const char *env = getenv("SW_CLIENT_NAME");
    const char *prefix = env && env[0] ? env : o->name && o->name[0] ? o->name : "client";
    char name[SW_CLIENT_NAME_LEN];
    char hex[13];
    s_random_hex(hex, 6);
    if (snprintf(name, sizeof name, "%s-%s", prefix, hex) >= (int)sizeof name ||
        !sw_wire_name_ok(name, strlen(name))) {
        s_fail(0, err, err_len, "client name '%s' must be up to 48 characters of [A-Za-z0-9._-]",
               prefix);
        return NULL;
    }
    sw_client_t *c = calloc(1, sizeof *c);
    if (c)
        c->reqs = calloc(SW_CLIENT_MAX_INFLIGHT, sizeof *c->reqs);
    if (!c || !c->reqs) {
        free(c);
        s_fail(0, err, err_len, "out of memory");
        return NULL;
    }
    const sw_msg_announce_t an = {.name = name, .role = SW_ROLE_CLIENT};
    sw_peer_opts_t po = {.relay = o->relay,
                         .announce = &an,
                         .connect_timeout_ms = o->connect_timeout_ms,
                         .sec = o->sec,
                         .stop = o->stop,
                         .accept_clear_errors = 1,
                         .rename_on_taken = 1};
    c->peer = sw_peer_new(&po);
    if (!c->peer) {
        s_fail(0, err, err_len,
               "cannot join the relay at %s (is it running and is the address right? the line "
               "above says more)",
               o->relay);
        free(c->reqs);
        free(c);
        return NULL;
    }
    c->sealed = o->sec && o->sec->n_access > 0; /* also with --insecure-loopback */
    c->secure = o->sec && !o->sec->insecure;
    c->announces = sw_peer_announces(c->peer);
    return c;
}

static void s_req_free(s_req_t *r)
{
    free(r->text);
    free(r->blob);
    free(r->turns);
    free(r->toks);
    memset(r, 0, sizeof *r);
}

/* Keeps a copy of q in r (its strings in r->blob), for a failover. 0, or -1 out of memory. */
static int s_req_keep(s_req_t *r, const sw_client_request_t *q)
{
    size_t need = q->prompt ? strlen(q->prompt) + 1 : 0;
    for (int i = 0; i < q->n_messages; i++)
        need += strlen(q->messages[i].role) + 1 +
                strlen(q->messages[i].content ? q->messages[i].content : "") + 1;
    r->q = *q;
    r->blob = malloc(need ? need : 1);
    r->turns = q->n_messages ? calloc((size_t)q->n_messages, sizeof *r->turns) : NULL;
    if (!r->blob || (q->n_messages && !r->turns))
        return -1;
    char *at = r->blob;
    if (q->prompt) {
        r->q.prompt = strcpy(at, q->prompt);
        at += strlen(at) + 1;
    }
    for (int i = 0; i < q->n_messages; i++) {
        r->turns[i].role = strcpy(at, q->messages[i].role);
        at += strlen(at) + 1;
        r->turns[i].content = strcpy(at, q->messages[i].content ? q->messages[i].content : "");
        at += strlen(at) + 1;
    }
    r->q.messages = r->turns;
    for (int i = 0; i < q->n_stop; i++)
        r->stop_p[i] = r->stop[i];
    r->q.stop = q->n_stop ? r->stop_p : NULL;
    return 0;
}

void sw_client_destroy(sw_client_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    sw_client_t *c = *self_p;
    for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT; i++)
        if (c->reqs[i].id[0])
            (void)sw_client_cancel(c, c->reqs[i].id);
    sw_peer_destroy(&c->peer);
    free(c->reqs);
    free(c->ev_text);
    free(c);
    *self_p = NULL;
}

const char *sw_client_name(const sw_client_t *c)
{
    return sw_peer_name(c->peer);
}

void *sw_client_socket(sw_client_t *c)
{
    return sw_peer_socket(c->peer);
}

int sw_client_pending(const sw_client_t *c)
{
    return sw_peer_pending(c->peer);
}

int sw_client_inflight(const sw_client_t *c)
{
    return c->n_inflight;
}

/* ---- peer table ------------------------------------------------------------------------- */

void sw_client_table_clear(sw_client_table_t *t)
{
    free(t->peers);
    memset(t, 0, sizeof *t);
}

static void s_remember(sw_client_t *c, const sw_client_table_t *t);
static int s_is_head(const sw_client_peer_t *p);

int sw_client_status(sw_client_t *c, sw_client_table_t *out, int timeout_ms, char *err,
                     size_t err_len)
{
    memset(out, 0, sizeof *out);
    sw_wire_msg_t t = {0};
    if (sw_peer_status(c->peer, &t, timeout_ms) != 0)
        return s_fail(SW_CLIENT_ECONNECT, err, err_len,
                      "the relay did not answer a status query within %d ms", timeout_ms);
    sw_msg_t d;
    if (sw_codec_decode(&t, SW_MSG_PEER_TABLE, &d, NULL, 0) != 0) {
        sw_wire_msg_clear(&t);
        return s_fail(SW_CLIENT_ECONNECT, err, err_len, "the relay's peer table is unreadable");
    }
    const sw_msg_table_t *pt = &d.table;
    out->peers = calloc(pt->n_peers ? pt->n_peers : 1, sizeof *out->peers);
    if (!out->peers) {
        sw_wire_msg_clear(&t);
        return s_fail(SW_CLIENT_ENOMEM, err, err_len, "out of memory");
    }
    for (uint32_t i = 0; i < pt->n_peers; i++) {
        sw_msg_peer_t info;
        if (sw_codec_peer_at(pt, i, &info) != 0)
            continue;
        const sw_msg_peer_t *pi = &info;
        const sw_msg_announce_t *a = &info.announce;
        sw_client_peer_t *p = &out->peers[out->n_peers++];
        snprintf(p->name, sizeof p->name, "%s", a->name);
        p->role = sw_wire_role_name(a->role);
        p->is_node = a->role >= SW_ROLE_HEAD && a->role <= SW_ROLE_FULL;
        p->key_bound = p->is_node && pi->key_bound;
        p->role_bound = p->is_node && pi->key_bound == SW_KEY_BOUND_ROLE;
        p->layer_begin = a->layer_begin;
        p->layer_end = a->layer_end;
        p->n_layers = a->n_layers;
        s_clean(p->model, sizeof p->model, a->model_fingerprint);
        s_clean(p->model_name, sizeof p->model_name, a->model_name);
        s_clean(p->backend, sizeof p->backend, a->backend);
        p->max_sessions = a->max_sessions;
        p->heartbeat_age_ms = pi->heartbeat_age_ms;
        p->idle_ms = pi->idle_ms;
        p->msgs_in = pi->msgs_in;
        p->msgs_out = pi->msgs_out;
        p->auto_place = a->auto_place;
        p->standby = sw_wire_standby(a->auto_place, a->layer_begin, a->layer_end);
        p->mem_mib = a->mem_mib;
        p->us_layer_1 = a->us_layer_1;
        p->us_layer_k = a->us_layer_k;
        p->probe_rows = a->probe_rows;
        p->us_out_1 = a->us_out_1;
        p->us_out_k = a->us_out_k;
        p->rtt_us = a->rtt_us;
        p->kv_kib_layer = a->kv_kib_layer;
    }
    out->need_key = c->secure;
    for (int i = 0; i < out->n_peers && c->secure; i++)
        out->role_heads += out->peers[i].role_bound && s_is_head(&out->peers[i]);
    out->uptime_ms = pt->uptime_ms;
    out->forwarded = pt->msgs_forwarded;
    out->dropped = pt->msgs_dropped;
    sw_wire_msg_clear(&t);
    s_remember(c, out);
    return 0;
}

static int s_is_head(const sw_client_peer_t *p)
{
    return !strcmp(p->role, "head") || !strcmp(p->role, "full");
}

int sw_client_peer_serves(const sw_client_peer_t *p, const char *model)
{
    if (!s_is_head(p))
        return 0;
    if (!model || !model[0])
        return 1;
    return !strcmp(p->model_name, model) ||
           (strlen(model) >= 8 && !strncmp(p->model, model, strlen(model)));
}

/* 1 when p may be sent requests: a head, key-bound where keys are used, and bound to the
 * head role when any head is (then a node key bound to a name only that announces a head,
 * a second head of the model, is not one to choose or fail over to). */
static int s_trusted_head(const sw_client_table_t *t, const sw_client_peer_t *p)
{
    if (!s_is_head(p))
        return 0;
    if (!t->need_key)
        return 1;
    return p->key_bound && (p->role_bound || t->role_heads == 0);
}

int sw_client_trusted_head(const sw_client_table_t *t, const sw_client_peer_t *p)
{
    return s_trusted_head(t, p);
}

/* The head sw_client_find_head chooses, from a table: 0 with its index in *at,
 * or SW_CLIENT_ENOHEAD after a line in err. */
static int s_pick_head(const sw_client_table_t *t, const char *want, const char *model, int *at,
                       char *err, size_t err_len)
{
    int found = -1, n_found = 0, other_model = 0, unbound = 0, unroled = 0;
    char names[160] = "";
    for (int i = 0; i < t->n_peers; i++) {
        const sw_client_peer_t *p = &t->peers[i];
        if (!s_is_head(p) || (want && strcmp(want, p->name) != 0))
            continue;
        if (!s_trusted_head(t, p)) {
            unbound++;
            unroled += p->key_bound;
            continue;
        }
        if (!sw_client_peer_serves(p, model)) {
            other_model++;
            continue;
        }
        size_t used = strlen(names);
        if (n_found < 4 && used < sizeof names - 1)
            snprintf(names + used, sizeof names - used, "%s%s", n_found ? ", " : "", p->name);
        n_found++;
        found = i;
    }
    *at = n_found == 1 ? found : n_found > 1 ? -2 : -1; /* -2: ambiguous, waiting cannot help */
    if (n_found == 1)
        return 0;
    if (n_found > 1)
        return s_fail(SW_CLIENT_ENOHEAD, err, err_len,
                      "%d heads serve %s%s (%s%s): name the one to use (shardwire run --head NAME)",
                      n_found, model && model[0] ? "the model " : "requests",
                      model && model[0] ? model : "", names, n_found > 4 ? ", ..." : "");
    if (want && unroled)
        return s_fail(SW_CLIENT_ENOHEAD, err, err_len,
                      "the head '%s' is bound to its name but not to the head role in the relay's "
                      "allow-list, while %d other head(s) are ('KEY head NAME'): refusing to send "
                      "it requests",
                      want, t->role_heads);
    if (want && unbound)
        return s_fail(SW_CLIENT_ENOHEAD, err, err_len,
                      "the head '%s' is not bound to its name by a node key in the relay's "
                      "allow-list ('KEY head %s'): refusing to send it requests",
                      want, want);
    if (want && other_model)
        return s_fail(SW_CLIENT_ENOHEAD, err, err_len, "the head '%s' serves another model than %s",
                      want, model);
    if (want)
        return s_fail(SW_CLIENT_ENOHEAD, err, err_len,
                      "no head node named '%s' is connected to the relay (shardwire status lists "
                      "the peers)",
                      want);
    if (other_model)
        return s_fail(SW_CLIENT_ENOHEAD, err, err_len,
                      "no head connected to the relay serves the model %s", model);
    return s_fail(SW_CLIENT_ENOHEAD, err, err_len,
                  "no %shead node (layers starting at 0) is connected to the relay: start one "
                  "with shardwire-node --layers 0:N (shardwire status lists the peers)",
                  t->need_key ? "key-bound " : "");
}

/*
 * 1 when stages of the head's model cover its layers after the head's range
 * to the end, or when waiting cannot help (a peer of another model or an
 * overlapping range sits where the next stage should: the head refuses the
 * request with the exact reason). Else 0 and what is missing in why.
 */
static int s_pipeline_whole(const sw_client_table_t *t, const sw_client_peer_t *h, char *why,
                            size_t why_len)
{
    for (uint32_t at = h->layer_end; at < h->n_layers;) {
        const sw_client_peer_t *next = NULL;
        for (int i = 0; i < t->n_peers && !next; i++) {
            const sw_client_peer_t *p = &t->peers[i];
            if (p->is_node && !s_is_head(p) && p->layer_begin == at && p->layer_end > at &&
                p->n_layers == h->n_layers && !strcmp(p->model, h->model) &&
                (p->key_bound || !t->need_key))
                next = p;
        }
        if (!next) {
            for (int i = 0; i < t->n_peers; i++) {
                const sw_client_peer_t *p = &t->peers[i];
                if (p != h && p->is_node && p->layer_begin <= at && p->layer_end > at)
                    return 1;
            }
            s_fail(0, why, why_len,
                   "gap in the pipeline: no node serving layer %u of %u is connected", at,
                   h->n_layers);
            return 0;
        }
        at = next->layer_end;
    }
    return 1;
}

/* Remembers the trusted heads of table t and their models (for a failover). */
static void s_remember(sw_client_t *c, const sw_client_table_t *t)
{
    c->n_heads = 0;
    for (int i = 0; i < t->n_peers && c->n_heads < S_HEADS_KNOWN; i++)
        if (s_trusted_head(t, &t->peers[i])) {
            snprintf(c->heads[c->n_heads].name, sizeof c->heads[0].name, "%s", t->peers[i].name);
            snprintf(c->heads[c->n_heads].model, sizeof c->heads[0].model, "%s", t->peers[i].model);
            c->n_heads++;
        }
}

int sw_client_find_head(sw_client_t *c, const char *want, const char *model,
                        char out[SW_CLIENT_NAME_LEN], char *err, size_t err_len)
{
    sw_client_table_t t;
    int rc = sw_client_status(c, &t, S_STATUS_MS, err, err_len), at = -1;
    if (rc == 0)
        rc = s_pick_head(&t, want, model, &at, err, err_len);
    if (rc == 0)
        snprintf(out, SW_CLIENT_NAME_LEN, "%s", t.peers[at].name);
    sw_client_table_clear(&t);
    return rc;
}

int sw_client_pick_head(const sw_client_table_t *t, const char *want, const char *model,
                        char out[SW_CLIENT_NAME_LEN], char *err, size_t err_len)
{
    int at = -1, rc = s_pick_head(t, want, model, &at, err, err_len);
    if (rc == 0)
        snprintf(out, SW_CLIENT_NAME_LEN, "%s", t->peers[at].name);
    return rc;
}

int sw_client_wait_head(sw_client_t *c, const char *want, const char *model, int timeout_ms,
                        volatile sig_atomic_t *stop, char out[SW_CLIENT_NAME_LEN], char *err,
                        size_t err_len)
{
    const double deadline = timeout_ms < 0 ? -1 : s_now_ms() + timeout_ms;
    for (int attempt = 1;; attempt++) {
        sw_client_table_t t;
        char why[SW_WIRE_MAX_ERROR_TEXT];
        int rc = sw_client_status(c, &t, S_STATUS_MS, err, err_len), at = -1;
        if (rc != 0)
            return rc;
        rc = s_pick_head(&t, want, model, &at, why, sizeof why);
        int whole = rc == 0 && s_pipeline_whole(&t, &t.peers[at], why, sizeof why);
        if (at >= 0)
            snprintf(out, SW_CLIENT_NAME_LEN, "%s", t.peers[at].name);
        sw_client_table_clear(&t);
        if (whole)
            return 0;
        if (at == -2)
            return s_fail(SW_CLIENT_ENOHEAD, err, err_len, "%s", why);
        double left = deadline < 0 ? 2000 : deadline - s_now_ms();
        double wait = attempt < 4 ? 250 << attempt : 2000;
        if (wait > left)
            wait = left;
        if (stop && *stop)
            return s_fail(SW_CLIENT_ECANCELLED, err, err_len, "interrupted");
        if (wait <= 0 && at >= 0)
            return 0; /* the head says what is missing */
        if (wait <= 0)
            return s_fail(SW_CLIENT_ENOHEAD, err, err_len, "%s", why);
        SW_WARN("client: waiting for the pipeline: %s (attempt %d); asking again in %.1f s", why,
                attempt, wait / 1e3);
        for (double until = s_now_ms() + wait; s_now_ms() < until && !(stop && *stop);)
            nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
    }
}

/* ---- requests --------------------------------------------------------------------------- */

sw_client_request_t sw_client_request_default(void)
{
    sw_client_request_t r = {
        .n_predict = SW_REQUEST_DEFAULT_N_PREDICT,
        .temperature = 0, /* greedy: temperature 0 and the penalty off */
        .top_k = SW_SAMPLING_TOP_K,
        .top_p = (float)SW_SAMPLING_TOP_P,
        .min_p = (float)SW_SAMPLING_MIN_P,
        .repeat_penalty = SW_SAMPLING_REP_OFF,
        .repeat_last_n = SW_SAMPLING_REP_LAST_N,
        .seed = SW_SAMPLING_SEED,
        .draft = SW_CLIENT_DRAFT_AUTO,
        .draft_k = -1,
        .draft_ahead = -1,
        .timeout_ms = S_DEFAULT_TIMEOUT_MS,
    };
    return r;
}

static s_req_t *s_find(sw_client_t *c, const char *id)
{
    if (!id || !id[0])
        return NULL;
    for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT; i++)
        if (!strcmp(c->reqs[i].id, id))
            return &c->reqs[i];
    return NULL;
}

int sw_client_request_check(const sw_client_request_t *q, char *err, size_t err_len)
{
    const int has_prompt = q->prompt != NULL;
    if (has_prompt == (q->n_messages > 0))
        return s_fail(SW_CLIENT_EINVAL, err, err_len,
                      "give exactly one of a prompt and chat messages");
    if (has_prompt && !q->prompt[0])
        return s_fail(SW_CLIENT_EINVAL, err, err_len, "the prompt is empty");
    if (has_prompt && strlen(q->prompt) > SW_WIRE_MAX_PROMPT_BYTES)
        return s_fail(SW_CLIENT_EINVAL, err, err_len, "the prompt is longer than %u bytes",
                      SW_WIRE_MAX_PROMPT_BYTES);
    if (q->n_messages < 0 || q->n_messages > SW_CLIENT_MAX_MESSAGES ||
        (q->n_messages && !q->messages))
        return s_fail(SW_CLIENT_EINVAL, err, err_len, "between 1 and %d chat messages are allowed",
                      SW_CLIENT_MAX_MESSAGES);
    size_t total = 0;
    for (int i = 0; i < q->n_messages; i++) {
        const char *role = q->messages[i].role;
        if (!role || (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") &&
                      strcmp(role, "tool")))
            return s_fail(SW_CLIENT_EINVAL, err, err_len,
                          "message %d: role must be system, user, assistant or tool", i);
        total += q->messages[i].content ? strlen(q->messages[i].content) : 0;
    }
    if (total > SW_WIRE_MAX_PROMPT_BYTES)
        return s_fail(SW_CLIENT_EINVAL, err, err_len, "the messages are longer than %u bytes",
                      SW_WIRE_MAX_PROMPT_BYTES);
    if (q->n_predict < 1 || q->n_predict > SW_REQUEST_MAX_N_PREDICT)
        return s_fail(SW_CLIENT_EINVAL, err, err_len, "tokens to generate %d not in [1, %d]",
                      q->n_predict, SW_REQUEST_MAX_N_PREDICT);
    if (!(q->temperature >= 0 && q->temperature <= SW_SAMPLING_MAX_TEMP))
        return s_fail(SW_CLIENT_EINVAL, err, err_len, "temperature %g not in [0, %d]",
                      (double)q->temperature, SW_SAMPLING_MAX_TEMP);
    if (q->top_k < 0 || q->top_k > SW_SAMPLING_MAX_TOP_K)
        return s_fail(SW_CLIENT_EINVAL, err, err_len, "top_k %d not in [0, %d]", q->top_k,
                      SW_SAMPLING_MAX_TOP_K);
    if (!(q->top_p > 0 && q->top_p <= 1))
        return s_fail(SW_CLIENT_EINVAL, err, err_len, "top_p %g not in (0, 1]", (double)q->top_p);
    if (!(q->min_p >= 0 && q->min_p < 1))
        return s_fail(SW_CLIENT_EINVAL, err, err_len, "min_p %g not in [0, 1)", (double)q->min_p);
    if (!(q->repeat_penalty > 0 && q->repeat_penalty <= SW_SAMPLING_MAX_REP_PENALTY))
        return s_fail(SW_CLIENT_EINVAL, err, err_len, "repeat penalty %g not in (0, %d]",
                      (double)q->repeat_penalty, SW_SAMPLING_MAX_REP_PENALTY);
    if (q->repeat_last_n < 0 || q->repeat_last_n > SW_SAMPLING_MAX_LAST_N)
        return s_fail(SW_CLIENT_EINVAL, err, err_len, "repeat_last_n %d not in [0, %d]",
                      q->repeat_last_n, SW_SAMPLING_MAX_LAST_N);
    if (q->draft < SW_CLIENT_DRAFT_AUTO || q->draft > SW_CLIENT_DRAFT_MIX)
        return s_fail(SW_CLIENT_EINVAL, err, err_len, "unknown draft mode %d", q->draft);
    if (q->draft_k < -1 || q->draft_k > SW_CLIENT_MAX_DRAFT)
        return s_fail(SW_CLIENT_EINVAL, err, err_len, "draft K %d not in [0, %d]", q->draft_k,
                      SW_CLIENT_MAX_DRAFT);
    if (q->draft_tree < 0 || q->draft_tree > SW_CLIENT_MAX_DRAFT)
        return s_fail(SW_CLIENT_EINVAL, err, err_len, "draft tree of %d drafts not in [0, %d]",
                      q->draft_tree, SW_CLIENT_MAX_DRAFT);
    if (q->draft_ahead < -1 || q->draft_ahead > 1)
        return s_fail(SW_CLIENT_EINVAL, err, err_len, "draft ahead %d is not -1, 0 or 1",
                      q->draft_ahead);
    if (q->n_stop < 0 || q->n_stop > SW_CLIENT_MAX_STOP || (q->n_stop && !q->stop))
        return s_fail(SW_CLIENT_EINVAL, err, err_len, "at most %d stop strings are allowed",
                      SW_CLIENT_MAX_STOP);
    for (int i = 0; i < q->n_stop; i++) {
        size_t n = q->stop[i] ? strlen(q->stop[i]) : 0;
        if (n < 1 || n > SW_CLIENT_MAX_STOP_LEN)
            return s_fail(SW_CLIENT_EINVAL, err, err_len, "stop string %d is not 1..%d bytes", i,
                          SW_CLIENT_MAX_STOP_LEN);
    }
    if (q->timeout_ms < 0 || q->timeout_ms > 86400000)
        return s_fail(SW_CLIENT_EINVAL, err, err_len, "timeout %d ms not in [0, 86400000]",
                      q->timeout_ms);
    return 0;
}

/*
 * Sends q to head as request rid with a deadline of timeout_ms there; after a
 * failover, with the n_resume tokens received so far (GenerateRequest.
 * resume_tokens). The sw_peer_send_msg result.
 */
static int s_send_generate(sw_client_t *c, const char *head, const sw_client_request_t *q,
                           const char *rid, int timeout_ms, const uint32_t *resume,
                           uint32_t n_resume)
{
    sw_msg_turn_t turn[SW_CLIENT_MAX_MESSAGES];
    for (int i = 0; i < q->n_messages && i < SW_CLIENT_MAX_MESSAGES; i++) {
        turn[i].role = q->messages[i].role;
        turn[i].content = q->messages[i].content ? q->messages[i].content : "";
    }
    sw_msg_t msg = {.type = SW_MSG_GENERATE};
    sw_msg_generate_t *g = &msg.generate;
    g->request_id = rid;
    g->prompt = q->prompt ? q->prompt : "";
    g->n_predict = (uint32_t)q->n_predict;
    g->has_sampling = 1;
    g->sampling = (sw_sampling_t){
        .temp = q->temperature,
        .top_k = q->top_k,
        .top_p = q->top_p,
        .min_p = q->min_p,
        .rep_penalty = q->repeat_penalty,
        .rep_last_n = q->repeat_last_n > 0 ? q->repeat_last_n : SW_SAMPLING_REP_LAST_N,
        .seed = q->seed,
    };
    g->chat = q->chat || q->n_messages > 0;
    g->has_draft = 1;
    g->draft = (sw_msg_draft_t){
        .mode = (sw_draft_mode_t)q->draft,
        .n_draft = q->draft_k >= 0 ? (uint32_t)q->draft_k : 0,
        .tree = (uint32_t)q->draft_tree,
        .ahead = q->draft_ahead < 0   ? SW_AHEAD_DEFAULT
                 : q->draft_ahead > 0 ? SW_AHEAD_ON
                                      : SW_AHEAD_OFF,
    };
    g->timeout_ms = (uint32_t)timeout_ms;
    g->n_stop = (uint32_t)q->n_stop;
    for (int i = 0; i < q->n_stop && i < SW_WIRE_MAX_STOP; i++)
        g->stop[i] = q->stop[i];
    g->n_messages = (uint32_t)q->n_messages;
    g->messages = turn;
    g->n_resume_tokens = n_resume;
    g->resume_tokens = resume;
    return sw_peer_send_msg(c->peer, head, &msg);
}

/* A decoded SpotReport into the client's form. */
static void s_spot_copy(sw_client_spot_t *out, const sw_msg_spot_report_t *r)
{
    memset(out, 0, sizeof *out);
    out->share = r->share;
    out->sessions_checked = r->sessions_checked;
    out->rounds_compared = r->rounds_compared;
    out->mismatches = r->mismatches;
    for (uint32_t i = 0; i < r->n_nodes && i < SW_WIRE_MAX_SPOT_NODES; i++) {
        s_clean(out->nodes[i].name, sizeof out->nodes[i].name, r->nodes[i].name);
        out->nodes[i].convicted = r->nodes[i].convicted;
        out->nodes[i].avoid_s = r->nodes[i].avoid_s;
        out->n_nodes++;
    }
}

int sw_client_spot_ask(sw_client_t *c, const char *head)
{
    if (!head || !sw_wire_name_ok(head, strnlen(head, SW_WIRE_NAME_MAX + 1)))
        return SW_CLIENT_EINVAL;
    int at = -1, oldest = 0;
    for (int i = 0; i < S_SPOT_HEADS && at < 0; i++)
        if (!strcmp(c->spot[i].head, head))
            at = i;
    for (int i = 0; i < S_SPOT_HEADS && at < 0; i++)
        if (!c->spot[i].head[0])
            at = i;
    for (int i = 1; i < S_SPOT_HEADS && at < 0; i++)
        if (c->spot[i].asked_at < c->spot[oldest].asked_at)
            oldest = i;
    if (at < 0) { /* every slot taken: the head asked longest ago gives its place */
        at = oldest;
        memset(&c->spot[at], 0, sizeof c->spot[at]);
    }
    const sw_msg_t q = {.type = SW_MSG_SPOT_QUERY};
    if (sw_peer_try_send_msg(c->peer, head, &q) != 0)
        return SW_CLIENT_ECONNECT;
    snprintf(c->spot[at].head, sizeof c->spot[at].head, "%s", head);
    c->spot[at].asked_at = s_now_ms();
    return 0;
}

int sw_client_spot_take(sw_client_t *c, char head[SW_CLIENT_NAME_LEN], sw_client_spot_t *out)
{
    for (int i = 0; i < S_SPOT_HEADS; i++)
        if (c->spot[i].head[0] && c->spot[i].fresh) {
            c->spot[i].fresh = 0;
            memcpy(head, c->spot[i].head, SW_CLIENT_NAME_LEN);
            *out = c->spot[i].report;
            return 0;
        }
    return 1;
}

/* A SpotReport read by sw_client_next: kept when it comes from a head asked
 * lately (sealed when the cluster seals), else ignored. */
static void s_on_spot_report(sw_client_t *c, const sw_wire_msg_t *m, const sw_msg_spot_report_t *r)
{
    if (c->sealed && !m->sealed)
        return;
    for (int i = 0; i < S_SPOT_HEADS; i++)
        if (c->spot[i].head[0] && !strcmp(c->spot[i].head, m->peer) &&
            s_now_ms() - c->spot[i].asked_at < S_SPOT_WAIT_MS) {
            s_spot_copy(&c->spot[i].report, r);
            c->spot[i].fresh = 1;
        }
}

int sw_client_spot(sw_client_t *c, const char *head, sw_client_spot_t *out, int timeout_ms,
                   char *err, size_t err_len)
{
    memset(out, 0, sizeof *out);
    if (c->n_inflight)
        return s_fail(SW_CLIENT_EBUSY, err, err_len, "requests are in flight");
    const sw_msg_t q = {.type = SW_MSG_SPOT_QUERY};
    if (sw_peer_send_msg(c->peer, head, &q) != 0)
        return s_fail(SW_CLIENT_ECONNECT, err, err_len, "could not send the query to %s", head);
    const double end = s_now_ms() + timeout_ms;
    for (double now = s_now_ms(); now < end; now = s_now_ms()) {
        sw_wire_msg_t m = {0};
        const int r = sw_peer_recv(c->peer, &m, (int)(end - now) + 1);
        if (r < 0)
            return s_fail(SW_CLIENT_ECONNECT, err, err_len, "lost the connection to the relay");
        if (r != 0)
            continue;
        sw_msg_t d;
        const sw_msg_type_t type = sw_wire_msg_type(&m);
        int rc = 1;
        if (type == SW_MSG_SPOT_REPORT && !strcmp(m.peer, head) &&
            sw_codec_decode(&m, SW_MSG_SPOT_REPORT, &d, NULL, 0) == 0) {
            s_spot_copy(out, &d.spot);
            rc = 0;
        } else if (type == SW_MSG_ERROR && sw_codec_decode(&m, SW_MSG_ERROR, &d, NULL, 0) == 0 &&
                   (!strcmp(m.peer, head) || !strcmp(d.error.dest, head))) {
            rc = d.error.code == SW_ERROR_UNKNOWN_DEST
                     ? s_fail(SW_CLIENT_ENOHEAD, err, err_len,
                              "no peer called '%s' is connected to the relay (shardwire status "
                              "lists the heads)",
                              head)
                     : s_fail(SW_CLIENT_ENOHEAD, err, err_len, "%s did not answer: %s (%s)", head,
                              sw_wire_error_code_name(d.error.code), d.error.message);
        }
        sw_wire_msg_clear(&m);
        if (rc <= 0)
            return rc;
    }
    return s_fail(SW_CLIENT_ETIMEOUT, err, err_len,
                  "%s did not answer the spot query within %d ms (a head of wire version 7?)", head,
                  timeout_ms);
}

int sw_client_submit(sw_client_t *c, const char *head, const sw_client_request_t *q,
                     char id[SW_CLIENT_ID_LEN], char *err, size_t err_len)
{
    int rc = sw_client_request_check(q, err, err_len);
    if (rc != 0)
        return rc;
    if (!head || !sw_wire_name_ok(head, strnlen(head, SW_WIRE_NAME_MAX + 1)))
        return s_fail(SW_CLIENT_EINVAL, err, err_len, "no head name given");
    s_req_t *r = NULL;
    for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT && !r; i++)
        if (!c->reqs[i].id[0])
            r = &c->reqs[i];
    if (!r)
        return s_fail(SW_CLIENT_EBUSY, err, err_len, "%d requests are already in flight",
                      SW_CLIENT_MAX_INFLIGHT);

    char rid[SW_CLIENT_ID_LEN] = "req-";
    s_random_hex(rid + 4, 8);
    const int timeout_ms = q->timeout_ms ? q->timeout_ms : S_DEFAULT_TIMEOUT_MS;
    if (s_send_generate(c, head, q, rid, timeout_ms, NULL, 0) != 0)
        return s_fail(SW_CLIENT_ECONNECT, err, err_len,
                      "could not send the request to %s through the relay", head);

    memset(r, 0, sizeof *r);
    snprintf(r->id, sizeof r->id, "%s", rid);
    snprintf(r->head, sizeof r->head, "%s", head);
    r->t_submit = r->last_msg = s_now_ms();
    r->deadline = r->t_submit + timeout_ms + S_GRACE_MS;
    for (int i = 0; i < q->n_stop; i++) {
        snprintf(r->stop[i], sizeof r->stop[i], "%s", q->stop[i]);
        size_t n = strlen(r->stop[i]);
        if (n > r->stop_max)
            r->stop_max = n;
    }
    r->n_stop = q->n_stop;
    if (s_req_keep(r, q) != 0)
        r->q.n_predict = 0; /* out of memory: no failover for this one */
    for (int i = 0; i < c->n_heads; i++)
        if (!strcmp(c->heads[i].name, head))
            snprintf(r->model, sizeof r->model, "%s", c->heads[i].model);
    c->n_inflight++;
    memcpy(id, rid, SW_CLIENT_ID_LEN);
    return 0;
}

/* Sends Cancel for r to its head (a failed send only costs the head some work). */
static void s_send_cancel(sw_client_t *c, const s_req_t *r, const char *reason)
{
    const sw_msg_t cn = {.type = SW_MSG_CANCEL, .cancel = {.request_id = r->id, .reason = reason}};
    if (sw_peer_send_msg(c->peer, r->head, &cn) != 0)
        SW_DEBUG("could not send a Cancel for %s to %s", r->id, r->head);
}

int sw_client_cancel(sw_client_t *c, const char *id)
{
    s_req_t *r = s_find(c, id);
    if (!r)
        return SW_CLIENT_EINVAL;
    /* Tell the head at once, so that the cluster stops working for nobody; its
     * confirmation (a final chunk, finish CANCELLED) is not waited for. */
    s_send_cancel(c, r, "no longer wanted");
    s_req_free(r);
    c->n_inflight--;
    return 0;
}

/* ---- events ----------------------------------------------------------------------------- */

static int s_text_reserve(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 256;
    while (n < need)
        n *= 2;
    char *t = realloc(*buf, n);
    if (!t)
        return -1;
    *buf = t;
    *cap = n;
    return 0;
}

/* Puts r's statistics into the event and frees r's slot: the request has ended. */
static void s_finish(sw_client_t *c, s_req_t *r, sw_client_event_t *ev)
{
    c->ev_stats = r->stats;
    c->ev_stats.total_ms = s_now_ms() - r->t_submit;
    ev->stats = &c->ev_stats;
    s_req_free(r);
    c->n_inflight--;
}

/* Ends r with an error event (its slot is freed; the event's strings are the client's). */
static void s_end_error(sw_client_t *c, s_req_t *r, sw_client_event_t *ev, int code, int wire_code,
                        const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void s_end_error(sw_client_t *c, s_req_t *r, sw_client_event_t *ev, int code, int wire_code,
                        const char *fmt, ...)
{
    char line[sizeof c->ev_message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    s_clean(c->ev_message, sizeof c->ev_message, line);
    memset(ev, 0, sizeof *ev);
    ev->type = SW_CLIENT_EV_ERROR;
    memcpy(ev->id, r->id, sizeof ev->id);
    ev->code = code;
    ev->wire_code = wire_code;
    ev->wire_code_name = wire_code ? sw_wire_error_code_name(wire_code) : "";
    ev->message = c->ev_message;
    s_finish(c, r, ev);
}

/*
 * Appends text to r's hold-back buffer and moves what can no longer become
 * a stop string into the event's text. 1 when a stop string was found (the
 * text before it is released, the rest dropped), 0 otherwise, -1 on OOM.
 */
static int s_release(sw_client_t *c, s_req_t *r, const char *text, size_t len, int final,
                     size_t *out_len)
{
    *out_len = 0;
    if (s_text_reserve(&r->text, &r->text_cap, r->text_len + len + 1) != 0)
        return -1;
    if (len)
        memcpy(r->text + r->text_len, text, len);
    r->text_len += len;
    size_t keep = 0, cut = r->text_len;
    int hit = 0;
    for (int i = 0; i < r->n_stop; i++) {
        const char *s = r->stop[i];
        size_t sl = strlen(s);
        /* the earliest full occurrence */
        for (size_t p = 0; p + sl <= r->text_len && p < cut; p++)
            if (!memcmp(r->text + p, s, sl)) {
                cut = p;
                hit = 1;
                break;
            }
    }
    if (!hit && !final) {
        /* the longest tail that is a proper prefix of some stop string stays held */
        for (int i = 0; i < r->n_stop; i++) {
            size_t sl = strlen(r->stop[i]);
            for (size_t k = sl - 1; k > keep; k--)
                if (k <= r->text_len && !memcmp(r->text + r->text_len - k, r->stop[i], k)) {
                    keep = k;
                    break;
                }
        }
        cut = r->text_len - keep;
    }
    if (s_text_reserve(&c->ev_text, &c->ev_text_cap, cut + 1) != 0)
        return -1;
    memcpy(c->ev_text, r->text, cut);
    c->ev_text[cut] = 0;
    *out_len = cut;
    if (hit) {
        r->text_len = 0;
        return 1;
    }
    memmove(r->text, r->text + cut, r->text_len - cut);
    r->text_len -= cut;
    return 0;
}

/* A count from the head, which may be any uint32: kept in [0, INT_MAX]. */
static int s_count(uint32_t n)
{
    return n > INT_MAX ? INT_MAX : (int)n;
}

static void s_copy_stats(sw_client_stats_t *s, const sw_msg_stats_t *st)
{
    s->have_head = 1;
    s->n_prompt = s_count(st->n_prompt);
    s->n_generated = s_count(st->n_generated);
    s->n_rounds = s_count(st->n_rounds);
    s->n_drafted = s_count(st->n_drafted);
    s->n_accepted = s_count(st->n_accepted);
    s->prompt_ms = st->prompt_ms;
    s->decode_ms = st->decode_ms;
    s->head_ttft_ms = st->ttft_ms;
    s->draft_ms = st->draft_ms;
    s->draft_ahead_ms = st->draft_ahead_ms;
    s->n_ahead_hits = s_count(st->n_ahead_hits);
    s->n_ahead_misses = s_count(st->n_ahead_misses);
    s->n_tree_rounds = s_count(st->n_tree_rounds);
    s->n_kv_moves = s_count(st->n_kv_moves);
    s->n_prefix_reused = s_count(st->n_prefix_reused);
    s->head_compute_ms = st->head_ms;
    s->network_ms = st->network_ms;
    s->logits_digest = st->logits_digest;
    s->n_stages = 0;
    for (uint32_t i = 0; i < st->n_stages && i < SW_CLIENT_MAX_STAGES; i++) {
        snprintf(s->stages[i].name, sizeof s->stages[i].name, "%s", st->stages[i].name);
        s->stages[i].compute_ms = st->stages[i].compute_us / 1e3;
        s->n_stages++;
    }
}

/* r's head ended it as cancelled, which we did not ask for: it took us for
 * gone (the relay dropped us while our link was down). The same head is asked
 * for the rest, from the tokens received (GenerateRequest.resume_tokens), at
 * most S_REASK_MAX times. 0 when it was asked, -1 when r cannot be resent. */
static int s_reask(sw_client_t *c, s_req_t *r, double now)
{
    const uint32_t have = (uint32_t)r->stats.n_generated;
    const int left_ms = (int)(r->deadline - S_GRACE_MS - now);
    if (!r->q.n_predict || have >= (uint32_t)r->q.n_predict || r->stopped ||
        r->n_reasks >= S_REASK_MAX || left_ms < 1000)
        return -1;
    if (s_send_generate(c, r->head, &r->q, r->id, left_ms, r->toks, have) != 0)
        return -1;
    SW_WARN("client: request %s: the head '%s' ended it after %u tokens, taking this client for "
            "gone (its link to the relay was down?); asked it again from there",
            r->id, r->head, have);
    r->n_reasks++;
    r->reask_at = now;
    r->last_msg = now;
    r->resume_at = 0;
    return 0;
}

/* One TokenChunk for r. 0 with *ev filled, 1 when it makes no event. */
static int s_on_chunk(sw_client_t *c, s_req_t *r, const sw_msg_chunk_t *tc, sw_client_event_t *ev)
{
    const double now = s_now_ms();
    if (tc->n_tokens && tc->index < (uint32_t)r->stats.n_generated)
        return 1; /* a chunk we hold already (the head resent it) */
    memset(ev, 0, sizeof *ev);
    memcpy(ev->id, r->id, sizeof ev->id);
    if (tc->index > (uint32_t)r->stats.n_generated) {
        /* a gap (chunks lost on the way, e.g. with a relay restart): ask the
         * head for the rest, once per S_RESUME_GAP_MS while later chunks keep
         * coming; this one comes again in order */
        if (!r->resume_at)
            r->resume_at =
                r->resumed_at + S_RESUME_GAP_MS > now ? r->resumed_at + S_RESUME_GAP_MS : now;
        return 1;
    }
    if (tc->n_tokens)
        r->reask_at = 0; /* the request goes on at its head: a later end is this one's */
    if (tc->n_tokens && !r->stats.ttft_ms)
        r->stats.ttft_ms = now - r->t_submit;
    if (r->q.n_predict && (size_t)r->stats.n_generated + tc->n_tokens > r->toks_cap) {
        size_t cap = r->toks_cap ? r->toks_cap : 256;
        while (cap < (size_t)r->stats.n_generated + tc->n_tokens)
            cap *= 2;
        uint32_t *grown = realloc(r->toks, cap * sizeof *grown);
        if (grown) {
            r->toks = grown;
            r->toks_cap = cap;
        } else {
            r->q.n_predict = 0; /* out of memory: no failover for this one */
        }
    }
    for (uint32_t i = 0; i < tc->n_tokens; i++) {
        c->ev_tokens[i] = tc->tokens[i];
        if (r->q.n_predict)
            r->toks[r->stats.n_generated + i] = tc->tokens[i];
    }
    ev->tokens = c->ev_tokens;
    ev->n_tokens = (int)tc->n_tokens;
    r->stats.n_generated += (int)tc->n_tokens;
    size_t n = 0;
    int hit = s_release(c, r, (const char *)tc->text, tc->text_len, tc->done, &n);
    if (hit < 0) {
        s_end_error(c, r, ev, SW_CLIENT_ENOMEM, 0, "out of memory");
        return 0;
    }
    ev->text = c->ev_text;
    ev->text_len = n;
    if (hit) {
        if (!tc->done)
            s_send_cancel(c, r, "a stop string was generated");
        ev->type = SW_CLIENT_EV_DONE;
        ev->finish = SW_CLIENT_FINISH_STOP;
        s_finish(c, r, ev);
        return 0;
    }
    if (!tc->done) {
        ev->type = SW_CLIENT_EV_TOKENS;
        return 0;
    }
    if (tc->finish == SW_FINISH_CANCELLED) {
        /* we did not cancel it (that slot would be free): the head did, e.g. it
         * took us for gone while our link to the relay was down. It is asked
         * again from the tokens we hold (as in a failover: the rest equals the
         * uninterrupted run's); the old end, sent again for our Resumes, may
         * still be on the way when the new request runs. */
        if (r->reask_at && now - r->reask_at < S_REASK_STALE_MS)
            return 1;
        if (s_reask(c, r, now) == 0)
            return 1;
        s_end_error(c, r, ev, SW_CLIENT_ECANCELLED, 0, "the head '%s' cancelled the request",
                    r->head);
        return 0;
    }
    if (tc->finish == SW_FINISH_ERROR) {
        /* the head sends its Error first; this is the end of a request whose Error was lost */
        s_end_error(c, r, ev, SW_CLIENT_EHEAD, 0, "the head '%s' reports that the request failed",
                    r->head);
        return 0;
    }
    const int got = r->stats.n_generated;
    if (tc->has_stats)
        s_copy_stats(&r->stats, &tc->stats);
    if (tc->has_stats && tc->stats.n_generated != (uint32_t)got) {
        s_end_error(c, r, ev, SW_CLIENT_ELOST, 0,
                    "received %d of the %u generated tokens (a message was lost on the way; the "
                    "relay may have restarted)",
                    got, tc->stats.n_generated);
        return 0;
    }
    ev->type = SW_CLIENT_EV_DONE;
    ev->finish = tc->finish == SW_FINISH_EOS        ? SW_CLIENT_FINISH_EOS
                 : tc->finish == SW_FINISH_STOP     ? SW_CLIENT_FINISH_STOP
                 : tc->finish == SW_FINISH_DEADLINE ? SW_CLIENT_FINISH_DEADLINE
                                                    : SW_CLIENT_FINISH_LENGTH;
    s_finish(c, r, ev);
    return 0;
}

/* One message from the relay connection. 0 with *ev filled, 1 when it makes no event. */
static int s_on_message(sw_client_t *c, sw_wire_msg_t *m, sw_client_event_t *ev)
{
    sw_msg_t d;
    const sw_msg_type_t type = sw_wire_msg_type(m);
    if ((type != SW_MSG_TOKEN_CHUNK && type != SW_MSG_ERROR && type != SW_MSG_SPOT_REPORT) ||
        sw_codec_decode(m, type, &d, NULL, 0) != 0)
        return 1;
    if (type == SW_MSG_SPOT_REPORT) {
        s_on_spot_report(c, m, &d.spot);
        return 1;
    }
    if (type == SW_MSG_TOKEN_CHUNK) {
        s_req_t *r = s_find(c, d.chunk.request_id);
        if (!r || strcmp(m->peer, r->head) != 0)
            return 1; /* a request we gave up on, or not from its head */
        r->last_msg = s_now_ms();
        r->head_missing = 0;
        return s_on_chunk(c, r, &d.chunk, ev);
    }
    const sw_msg_error_t *er = &d.error;
    const int from_relay = !strcmp(m->peer, SW_WIRE_RELAY_NAME);
    if (c->sealed && !from_relay && !m->sealed) {
        /* A head without our access key says so in clear: it holds no key to seal
         * with. Its text is not trusted (anyone could send a clear message); the
         * fact is only used for requests that went to that very peer. */
        for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT; i++) {
            s_req_t *r = &c->reqs[i];
            if (r->id[0] && !strcmp(r->head, m->peer) && er->code == SW_ERROR_UNAUTHORIZED) {
                s_end_error(c, r, ev, SW_CLIENT_EKEY, 0,
                            "the head '%s' cannot open our messages: this client's access key "
                            "(--access-key) is not the one the cluster uses",
                            m->peer);
                return 0;
            }
        }
        return 1;
    }
    s_req_t *r = s_find(c, er->request_id);
    if (from_relay && !r && er->dest[0]) {
        /* the relay could not deliver to a head: the request that went there fails */
        for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT && !r; i++)
            if (c->reqs[i].id[0] && !strcmp(c->reqs[i].head, er->dest))
                r = &c->reqs[i];
    }
    if (!r || (!from_relay && strcmp(m->peer, r->head) != 0))
        return 1;
    if (from_relay && (er->code == SW_ERROR_UNKNOWN_DEST || er->code == SW_ERROR_DEST_GONE ||
                       er->code == SW_ERROR_DEST_BUSY)) {
        /* the relay did not deliver a message of ours to the head (it may be
         * restarting, with the head not announced again yet): ask again in a
         * second; the quiet watch tells a head that is really gone */
        for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT; i++)
            if (c->reqs[i].id[0] && !strcmp(c->reqs[i].head, er->dest))
                c->reqs[i].resume_at = s_now_ms() + 1000;
        return 1;
    }
    char msg[SW_WIRE_MAX_ERROR_TEXT + 1];
    s_clean(msg, sizeof msg, er->message);
    if (from_relay)
        s_end_error(c, r, ev, SW_CLIENT_ECONNECT, er->code, "the relay: %s (%s)", msg,
                    sw_wire_error_code_name(er->code));
    else if (er->code == SW_ERROR_BUSY && er->queue_position)
        s_end_error(c, r, ev, SW_CLIENT_EBUSY, er->code, "%s (position %u in the head's queue)",
                    msg, er->queue_position);
    else if (er->code == SW_ERROR_BUSY)
        s_end_error(c, r, ev, SW_CLIENT_EBUSY, er->code, "%s", msg);
    else
        s_end_error(c, r, ev, SW_CLIENT_EHEAD, er->code, "%s", msg);
    return 0;
}

/*
 * Failover: r's head left; a trusted head in t of the same name (restarted)
 * or serving the same model takes r over from the tokens received
 * (GenerateRequest.resume_tokens), so that the output goes on where it
 * stopped (greedy: exactly the uninterrupted output). 0 when one did, -1
 * when none is there (or r cannot be resent).
 */
static int s_failover(sw_client_t *c, s_req_t *r, const sw_client_table_t *t, double now)
{
    const uint32_t have = (uint32_t)r->stats.n_generated;
    if (!r->q.n_predict || have >= (uint32_t)r->q.n_predict || r->stopped)
        return -1;
    const sw_client_peer_t *to = NULL;
    for (int k = 0; k < t->n_peers && !to; k++)
        if (s_trusted_head(t, &t->peers[k]) && !strcmp(t->peers[k].name, r->head) &&
            (!r->model[0] || !strcmp(t->peers[k].model, r->model)))
            to = &t->peers[k];
    for (int k = 0; k < t->n_peers && !to && r->model[0]; k++)
        if (s_trusted_head(t, &t->peers[k]) && !strcmp(t->peers[k].model, r->model))
            to = &t->peers[k];
    const int left_ms = (int)(r->deadline - S_GRACE_MS - now);
    if (!to || left_ms < 1000)
        return -1;
    if (s_send_generate(c, to->name, &r->q, r->id, left_ms, r->toks, have) != 0)
        return -1;
    SW_WARN("client: request %s: the head '%s' left after %u tokens; '%s' takes over from there",
            r->id, r->head, have, to->name);
    snprintf(r->head, sizeof r->head, "%s", to->name);
    r->head_missing = 0;
    r->gone_at = 0;
    r->last_msg = now;
    r->resume_at = 0;
    r->stats.n_failovers++;
    return 0;
}

/*
 * The watches: deadlines, and heads that went quiet. 0 with *ev filled for
 * the first request that fails one, 1 when none does.
 */
static int s_watch(sw_client_t *c, sw_client_event_t *ev)
{
    const double now = s_now_ms();
    int quiet = 0;
    for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT; i++) {
        s_req_t *r = &c->reqs[i];
        if (!r->id[0])
            continue;
        if (now > r->deadline) {
            s_end_error(c, r, ev, SW_CLIENT_ETIMEOUT, 0,
                        "no answer from the head '%s' within %.0f s", r->head,
                        (r->deadline - r->t_submit - S_GRACE_MS) / 1e3);
            return 0;
        }
        if (now - r->last_msg > S_QUIET_MS)
            quiet++;
    }
    if (!quiet)
        return 1;
    sw_client_table_t t;
    if (sw_client_status(c, &t, S_STATUS_MS, NULL, 0) != 0)
        return 1; /* the relay is slow or restarting: the deadline still holds */
    int failed = -1;
    for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT; i++) {
        s_req_t *r = &c->reqs[i];
        if (!r->id[0] || now - r->last_msg <= S_QUIET_MS)
            continue;
        int present = 0;
        for (int k = 0; k < t.n_peers && !present; k++)
            present = !strcmp(t.peers[k].name, r->head);
        if (present) {
            r->head_missing = 0;
            r->last_msg = now;
            r->resume_at = now; /* a lost last chunk is sent again */
        } else if (++r->head_missing >= 2) {
            /* twice in a row, so that a relay restart (the head announces again
             * within a second or so) is not taken for a dead head: another head
             * serving its model (or the same one restarted) takes it over */
            if (!r->gone_at)
                r->gone_at = now;
            if (s_failover(c, r, &t, now) == 0)
                continue;
            if (now - r->gone_at < S_FAILOVER_MS && r->q.n_predict)
                r->last_msg = now - S_QUIET_MS / 2; /* look again soon */
            else if (failed < 0)
                failed = i;
        } else {
            r->last_msg = now - S_QUIET_MS / 2; /* check again soon */
        }
    }
    sw_client_table_clear(&t);
    if (failed < 0)
        return 1;
    s_req_t *r = &c->reqs[failed];
    s_end_error(c, r, ev, SW_CLIENT_EHEADGONE, 0, "the head '%s' left during the request%s",
                r->head, r->q.n_predict ? " and no head serving its model came within 30 s" : "");
    return 0;
}

/* Asks the heads for what may have been lost: once announced again after a
 * reconnect to the relay (it may have restarted with chunks in flight; we may
 * have a new name, which the head then streams to) for every request, else
 * for requests whose resume_at has come. A Resume that cannot go out now (no
 * connection yet) is tried again half a second later. */
static void s_resume(sw_client_t *c, double now)
{
    (void)sw_peer_connects(c->peer); /* reads the connection's events */
    const int announces = sw_peer_announces(c->peer);
    const int reconnected = announces != c->announces;
    c->announces = announces;
    for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT; i++) {
        s_req_t *r = &c->reqs[i];
        if (!r->id[0] || !(reconnected || (r->resume_at && now >= r->resume_at)))
            continue;
        const sw_msg_t rs = {
            .type = SW_MSG_RESUME,
            .resume = {.request_id = r->id, .from_index = (uint32_t)r->stats.n_generated},
        };
        if (sw_peer_try_send_msg(c->peer, r->head, &rs) != 0) {
            r->resume_at = now + 500;
            continue;
        }
        r->resume_at = 0;
        r->resumed_at = now;
        r->stats.n_resumes++;
    }
}

int sw_client_next(sw_client_t *c, sw_client_event_t *ev, int timeout_ms)
{
    const double end = s_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        double now = s_now_ms();
        if (c->n_inflight)
            s_resume(c, now);
        if (c->n_inflight && now >= c->next_watch) {
            c->next_watch = now + 500;
            if (s_watch(c, ev) == 0)
                return 0;
        }
        int wait = (int)(end - now);
        if (wait < 0)
            wait = 0;
        if (c->n_inflight && wait > 500)
            wait = 500;
        sw_wire_msg_t m = {0};
        int r = sw_peer_recv(c->peer, &m, wait);
        if (r < 0) {
            /* every request is lost with the connection */
            for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT; i++)
                if (c->reqs[i].id[0]) {
                    s_end_error(c, &c->reqs[i], ev, SW_CLIENT_ECONNECT, 0,
                                "lost the connection to the relay");
                    return 0;
                }
            return SW_CLIENT_ECONNECT;
        }
        if (r == 1 && (c->n_inflight == 0 || s_now_ms() >= end))
            return 1; /* time is up, or a signal: the caller looks at its flags */
        if (r == 0) {
            int got = s_on_message(c, &m, ev);
            sw_wire_msg_clear(&m);
            if (got == 0)
                return 0;
            if (s_now_ms() >= end)
                return 1;
        }
    }
}
