/*
 * gateway.h - `shardwire serve`: an OpenAI-compatible HTTP API in front of a
 * cluster (docs/api.md).
 *
 * Endpoints: POST /v1/chat/completions and /v1/completions (JSON, or
 * server-sent events ending with "data: [DONE]"), GET /v1/models,
 * /v1/models/{id}, /v1/cluster (the cluster page's numbers), /v1/defaults
 * (what a request gets for the fields it leaves out: the web page's
 * settings start from it), /health (no key), /metrics (Prometheus text),
 * and the web page compiled into the binary at / and /web/ (no key; web.h).
 *
 * HTTP is libmicrohttpd with one thread per connection, bounded by a
 * connection limit, a per-address limit (chosen so that a few addresses
 * cannot take every connection), an idle timeout, a header deadline and a
 * body deadline that no trickle of bytes extends, and a body size limit; every generation goes
 * through the one relay connection of dispatch.h. Bearer API keys are required unless the listen
 * address is loopback and the caller asked for no keys explicitly; keys are
 * compared as BLAKE2b hashes in constant time. A client that disconnects
 * (seen within 200 ms) cancels its generation on the cluster.
 *
 * shardwire serve fills gw_opts_t; its defaults are sw_limits.h's
 * (SW_GATEWAY_DEFAULT_*), which serve's --help prints.
 */
#ifndef GW_GATEWAY_H
#define GW_GATEWAY_H

#include <signal.h>
#include <stddef.h>

#include "keys.h"
#include "openai.h"

typedef struct gw_opts {
    const char *listen;       /* HOST:PORT (port 0 = any free port; printed at start) */
    const char *relay;        /* relay endpoint */
    int connect_timeout_ms;   /* how long the first join may wait for the relay (-1 = no limit) */
    const sw_sec_t *sec;      /* keys for the relay (NULL or insecure = loopback only) */
    const char *api_key_file; /* one bearer key per line; NULL = none */
    int no_api_key;           /* 1 = serve without keys (loopback listen address only) */
    size_t max_body;          /* bytes of a request body */
    size_t max_bodies;        /* bytes of all request bodies buffered at once */
    int max_connections;      /* open HTTP connections at once */
    int max_per_ip;           /* open connections from one address */
    int max_per_prefix;       /* open connections from one IPv4 /24 or IPv6 /64 */
    int max_slow;             /* connections opened or sending headers or body (not kept-alive
                                 ones waiting for their next request), all together; beyond:
                                 the one longest in its phase is closed */
    int max_inflight;         /* generations in flight at once (beyond: 429) */
    int max_inflight_per_key; /* of them, with one API key at most (beyond: 429) */
    int idle_timeout_s;       /* an HTTP connection that sends nothing this long is closed: a
                                 kept-alive one waits this long for its next request */
    int header_timeout_s;     /* a request's headers must arrive within this of its first byte
                                 (a connection's first request: of its opening), however slowly
                                 bytes trickle */
    int body_timeout_s;       /* a request body must arrive within this */
    gw_defaults_t defaults;   /* for fields a request leaves out */
} gw_opts_t;

/*
 * Runs the gateway until *stop is set. Prints "listening http://HOST:PORT"
 * on stdout once it accepts connections. Returns 0, 1 on a runtime failure
 * (after a line on stderr), 2 on bad options.
 */
int gw_run(const gw_opts_t *opts, volatile sig_atomic_t *stop);

#endif
