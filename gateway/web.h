/*
 * web.h - the web page of `shardwire serve` (docs/api.md, "Web page"): a
 * chat that streams from POST /v1/chat/completions, with a stop button and
 * the model and sampling settings, and a live page of the cluster fed by
 * GET /v1/cluster (the relay's peer table and the gateway's own numbers).
 *
 * The page's files (gateway/web/) are compiled into the binary:
 * web_embed.cmake writes them as byte arrays into web_files.c at build time.
 * Nothing is read from disk at run time and the page loads nothing from
 * elsewhere: the Content-Security-Policy sent with it (GW_WEB_CSP) allows
 * only the gateway's own origin. The page asks for the API key once and keeps
 * it in the browser's sessionStorage (gone when the tab closes); the files
 * need no key, every API call does.
 */
#ifndef GW_WEB_H
#define GW_WEB_H

#include <jansson.h>
#include <stddef.h>

#include "client.h"

/* One embedded file. */
typedef struct gw_web_file {
    const char *path;          /* its URL path: "/web/NAME" (index.html also "/") */
    const char *ctype;         /* Content-Type, from the file's extension */
    const unsigned char *data; /* len bytes, static */
    size_t len;                /* bytes */
} gw_web_file_t;

/* The files (web_files.c, generated). */
extern const gw_web_file_t gw_web_files[];
extern const size_t gw_web_n_files;

/* Only this origin's scripts, styles and connections; no frames, no forms elsewhere. */
#define GW_WEB_CSP                                                                                 \
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "                \
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

/* The file served at url (a static row), or NULL (404). */
const gw_web_file_t *gw_web_find(const char *url);

/* Each hop of the pipelines in t (sw_client_hops): from, to, model, path ("direct" or "relay"),
 * relay (the relay's endpoint, relay path only), rtt_ms (null = not measured). A new array;
 * `shardwire status --json` prints the same. */
json_t *gw_web_hops_json(const sw_client_table_t *t, const char *relay);

/* The relay as GET /v1/cluster shows it when its peer table could not be had (the caller's). */
typedef struct gw_web_relay {
    const char *endpoint;   /* the relay's endpoint */
    int connected;          /* 0: the relay did not answer; 1: the table failed on the gateway */
    const char *error;      /* one line: what failed */
    const char *error_code; /* its code (gw_disp_strerror) */
} gw_web_relay_t;

/*
 * The body of GET /v1/cluster (malloc'd JSON text the caller frees; NULL when
 * out of memory): the relay (endpoint, and uptime and message counts from t),
 * every node of t (name, role, layer range, model, backend, capacity,
 * heartbeat age, idle time, messages), the number of clients, and gateway
 * (gw_metrics_json, taken over; may be NULL) with max_inflight added. t NULL:
 * no peer table, rl says why (connected, error, error_code); with t, only
 * rl->endpoint is read.
 */
char *gw_web_cluster_json(const sw_client_table_t *t, const gw_web_relay_t *rl, json_t *gateway,
                          int max_inflight);

#endif
