/*
 * gateway_impl.h - the gateway's state and what its files share; private to
 * gateway/gateway*.c.
 *
 * The gateway is cut by concern, each file calling only those below it (no
 * circle between them, tests/unit/test_layers.py):
 *
 *   gateway.c            the gateway's lifetime (gw_run), the table of routes,
 *                        libmicrohttpd's callbacks: what is decided before a
 *                        body is read, buffering bodies, the connections'
 *                        deadlines
 *   gateway_generate.c   POST /v1/chat/completions and /v1/completions: one
 *                        generation through the dispatcher, answered as JSON or
 *                        as server-sent events
 *   gateway_endpoints.c  the other endpoints (models, health, metrics, the
 *                        cluster page's numbers, the request defaults, the web
 *                        page's files) and the responses every endpoint sends
 *   gateway_keys.c       the API keys: the key file, the key a request carries,
 *                        each key's share of the generations in flight
 *
 * The gw_t belongs to gw_run (its stack); the HTTP threads share it, and
 * key_mu guards what they change in it.
 */
#ifndef GW_GATEWAY_IMPL_H
#define GW_GATEWAY_IMPL_H

#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <time.h>

#include "addr.h"
#include "dispatch.h"
#include "gateway.h"
#include "log.h"
#include "metrics.h"

#define GW_KEY_HASH 32 /* BLAKE2b-256 of an API key */

/*
 * One open HTTP connection, for the deadlines libmicrohttpd does not keep:
 * its idle timeout restarts with every byte, so a client sending one byte
 * every few seconds (slow-loris) would hold a connection forever. The main
 * loop shuts a connection down (gateway.c, s_sweep) whose request headers have
 * not all arrived header_timeout_s after it opened or after the first byte of
 * a kept-alive connection's next request, or whose body has not arrived
 * body_timeout_s after its headers. A kept-alive connection waiting for its
 * next request (GW_PHASE_IDLE: not one byte of it yet) is libmicrohttpd's to
 * close, idle_timeout_s after its last answer, and is not a slow one
 * (--max-slow, gateway.c s_accept).
 */
typedef struct gw_link {
    int fd;                             /* its socket, -1 = free entry */
    int phase;                          /* GW_PHASE_* */
    double t_phase;                     /* when it entered that phase (ms) */
    unsigned long long rx;              /* bytes its socket had received when its last request
                                           was in (BODY, ANSWER), ULLONG_MAX unknown */
    uint8_t prefix[SW_ADDR_PREFIX_LEN]; /* its address's /24 or /64 (sw_addr_prefix), 0s unknown */
} gw_link_t;

/* A connection's phase: opened or a request's first byte in, until its headers are
 * (HEADERS); its body arriving (BODY); being answered (ANSWER); kept alive after an answer,
 * no byte of the next request yet (IDLE). */
enum { GW_PHASE_HEADERS = 0, GW_PHASE_BODY = 1, GW_PHASE_ANSWER = 2, GW_PHASE_IDLE = 3 };

typedef struct gw {
    const gw_opts_t *o;
    void *zctx;                         /* inproc sockets of the dispatcher */
    gw_disp_t *disp;                    /* the one relay connection */
    gw_metrics_t *metrics;              /* /metrics */
    unsigned char (*keys)[GW_KEY_HASH]; /* hashes of the API keys (gateway_keys.c) */
    int n_keys;                         /* entries in keys */
    pthread_mutex_t key_mu;       /* guards key_inflight, links, bodies and parsing (a thread per
                                     connection) */
    gw_link_t *links;             /* (n_links) open connections' deadlines */
    int n_links;                  /* max_connections */
    size_t bodies;                /* bytes of request bodies buffered (max_bodies) */
    int parsing;                  /* bodies being parsed now (gateway_generate.c) */
    pthread_cond_t parse_cv;      /* signalled when a parse ends */
    int *key_inflight;            /* (n_keys) generations in flight per API key */
    volatile sig_atomic_t *stop;  /* set by SIGINT/SIGTERM: generations end with an error */
    sw_log_gate_t conn_log;       /* connections refused for their prefix or closed as slow */
    unsigned char tenant_key[32]; /* the secret of the keys' tenant ids (gateway_keys.c) */
} gw_t;

typedef struct gw_conn gw_conn_t;
typedef struct gw_route gw_route_t;

/* One endpoint's handler, called once the whole body is in. */
typedef enum MHD_Result (*gw_handler_fn)(gw_t *g, struct MHD_Connection *c, gw_conn_t *sc,
                                         const char *url);

/* One HTTP request's state between the handler's calls. */
struct gw_conn {
    const gw_route_t *rt; /* its route (gateway.c, s_routes) */
    double t0;            /* when the headers arrived (ms) */
    char *body;           /* the body so far */
    size_t len;           /* bytes of body */
    size_t cap;           /* its capacity */
    int too_large;        /* the body passed max_body: it is dropped */
    int answered;         /* a response was queued early */
    int key;              /* the API key it carried (index into keys), -1 = none */
    int no_room;          /* the gateway's buffered bodies passed --max-bodies-mb: refused */
};

/* One endpoint: a path that is not in the table is a 404, a method that
 * its row does not name a 405, by construction. */
struct gw_route {
    const char *method;    /* "POST", or "GET" (which takes HEAD too) */
    const char *path;      /* the whole path, or with prefix its start */
    int prefix;            /* 1: path is a prefix that one byte or more must follow */
    int auth;              /* 1: an API key from --api-key-file is required */
    const char *name;      /* the endpoint's name in /metrics */
    gw_handler_fn handler; /* answers once the body is in */
};

/* The name /metrics counts a request under: its route's, "other" for none. */
static inline const char *gw_conn_ep(const gw_conn_t *sc)
{
    return sc->rt ? sc->rt->name : "other";
}

static inline double gw_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- responses (gateway_endpoints.c) ----------------------------------------------------- */

/* Queues body (taken over; NULL = out of memory: a 500) with status, and counts it under ep;
 * retry_after_s > 0 adds a Retry-After header. */
enum MHD_Result gw_http_send(gw_t *g, struct MHD_Connection *c, const char *ep, int status,
                             char *body, const char *ctype, int retry_after_s);
/* The HTTP status and OpenAI error type (*type) of a failed generation or peer table: code is
 * the dispatcher's (SW_CLIENT_*, GW_DISP_*), wire_code the head's ErrorCode (SW_CLIENT_EHEAD). */
int gw_status_of(int code, int wire_code, const char **type);
/* An OpenAI error body (openai.h, gw_json_error) with status; 503 and 429 say Retry-After: 1. */
enum MHD_Result gw_http_error(gw_t *g, struct MHD_Connection *c, const char *ep, int status,
                              const char *message, const char *type, const char *param,
                              const char *code);

/* ---- the endpoints (gateway_generate.c, gateway_endpoints.c): s_routes' handlers ---------- */

enum MHD_Result gw_ep_chat(gw_t *g, struct MHD_Connection *c, gw_conn_t *sc, const char *url);
enum MHD_Result gw_ep_completions(gw_t *g, struct MHD_Connection *c, gw_conn_t *sc,
                                  const char *url);
enum MHD_Result gw_ep_models(gw_t *g, struct MHD_Connection *c, gw_conn_t *sc, const char *url);
enum MHD_Result gw_ep_model(gw_t *g, struct MHD_Connection *c, gw_conn_t *sc, const char *url);
enum MHD_Result gw_ep_cluster(gw_t *g, struct MHD_Connection *c, gw_conn_t *sc, const char *url);
enum MHD_Result gw_ep_defaults(gw_t *g, struct MHD_Connection *c, gw_conn_t *sc, const char *url);
enum MHD_Result gw_ep_health(gw_t *g, struct MHD_Connection *c, gw_conn_t *sc, const char *url);
enum MHD_Result gw_ep_metrics(gw_t *g, struct MHD_Connection *c, gw_conn_t *sc, const char *url);
enum MHD_Result gw_ep_web(gw_t *g, struct MHD_Connection *c, gw_conn_t *sc, const char *url);

/* ---- API keys (gateway_keys.c) ----------------------------------------------------------- */

#define GW_TENANT_LEN 18 /* "k" + 16 hex digits + NUL */

/* The tenant id of API key index key (GenerateRequest.tenant: the head shares its compute
 * fairly between the API keys of this gateway, docs/api.md): "k" and 16 hex digits of a keyed
 * hash of the key's hash under a secret drawn at start, so it says nothing of the key; "" for
 * -1 (no keys). */
void gw_keys_tenant(const gw_t *g, int key, char out[GW_TENANT_LEN]);

/* Reads the key file at path into g->keys (their hashes). 0, or -1 with one line in err;
 * gw_keys_free frees g->keys either way. */
int gw_keys_load(gw_t *g, const char *path, char *err, size_t err_len)
    __attribute__((warn_unused_result));
/* Wipes and frees g->keys (NULL is fine). */
void gw_keys_free(gw_t *g);
/* 1 when the request carries one of the keys ("Authorization: Bearer KEY"),
 * its index in *index (-1 without keys). */
int gw_keys_check(const gw_t *g, struct MHD_Connection *c, int *index);
/* One more generation of API key `key` (-1: none in use): 0, or -1 when it has
 * --max-inflight-per-key in flight already. */
int gw_keys_take(gw_t *g, int key) __attribute__((warn_unused_result));
/* A generation of API key `key` ended (counted in the metrics too). */
void gw_inflight_end(gw_t *g, int key);

#endif
