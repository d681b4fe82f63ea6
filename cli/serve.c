/*
 * serve.c - `shardwire serve`: the OpenAI-compatible HTTP gateway in front
 * of a cluster (gateway/gateway.h, docs/api.md). Parses the options and runs
 * the gateway until SIGINT/SIGTERM.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cmds.h"
#include "gateway.h"
#include "keys.h"
#include "log.h"

/* The gateway's defaults, each stated once for the code and --help (the
 * request timeout and the sampling defaults are sw_limits.h's). */
#define S_LISTEN "127.0.0.1:8080"
#define S_BODY_MB 8
#define S_BODIES_MB 64    /* every body buffered at once: 8 of the largest */
#define S_CONNECTIONS 512 /* with 8 per address: 64 addresses to fill them, each for 10 s */
#define S_PER_IP 8
#define S_HEADER_TIMEOUT_S 10
#define S_INFLIGHT 32
#define S_INFLIGHT_PER_KEY 4 /* a tenant's share: the head runs 6 of the gateway's at once */
#define S_IDLE_S 30
#define S_BODY_TIMEOUT_S 30
#define S_MAX_TOKENS 512

_Static_assert(S_INFLIGHT <= SW_CLIENT_MAX_INFLIGHT, "the gateway's one client holds them all");
_Static_assert(S_MAX_TOKENS <= SW_REQUEST_MAX_N_PREDICT, "the default is a valid max_tokens");

static volatile sig_atomic_t s_stop;

static void s_on_signal(int sig)
{
    (void)sig;
    s_stop = 1;
}

enum {
    O_LISTEN = SW_OPT_OWN,
    O_KEYS,
    O_NOKEY,
    O_BODY,
    O_BODIES,
    O_CONNS,
    O_PERIP,
    O_INFLIGHT,
    O_KEYINFLIGHT,
    O_IDLE,
    O_HDRT,
    O_BODYT,
    O_MAXTOK,
    O_TIMEOUT,
    O_REP,
};

static const sw_opt_t s_opts[] = {
    {"listen", O_LISTEN, "HOST:PORT", "HTTP address (default " S_LISTEN "; port 0 = any)"},
    {"api-key-file", O_KEYS, "FILE", "bearer keys, one per line (mode 0600)"},
    {"insecure-no-api-key", O_NOKEY, NULL, "no keys: only with a loopback --listen address"},
    {"max-body-mb", O_BODY, "N", "largest request body (default " SW_STR(S_BODY_MB) ")"},
    {"max-bodies-mb", O_BODIES, "N",
     "request bodies buffered at once, all together\n(default " SW_STR(S_BODIES_MB) ")"},
    {"max-connections", O_CONNS, "N", "open HTTP connections (default " SW_STR(S_CONNECTIONS) ")"},
    {"max-per-ip", O_PERIP, "N",
     "open connections from one address (default " SW_STR(S_PER_IP) ")"},
    {"max-inflight", O_INFLIGHT, "N",
     "generations at once; beyond: 429 (default " SW_STR(S_INFLIGHT) ")"},
    {"max-inflight-per-key", O_KEYINFLIGHT, "N",
     "of them with one API key; beyond: 429 (default " SW_STR(S_INFLIGHT_PER_KEY) ")"},
    {"idle-timeout-s", O_IDLE, "S",
     "close a connection idle this long (default " SW_STR(S_IDLE_S) ")"},
    {"header-timeout-s", O_HDRT, "S",
     "a request's headers must arrive within S, however\nslowly (default " SW_STR(
         S_HEADER_TIMEOUT_S) ")"},
    {"body-timeout-s", O_BODYT, "S",
     "a request body must arrive within S (default " SW_STR(S_BODY_TIMEOUT_S) ")"},
    {"max-tokens", O_MAXTOK, "N",
     "tokens to generate when a request does not say\n(default " SW_STR(S_MAX_TOKENS) ")"},
    {"timeout-s", O_TIMEOUT, "S",
     "each request's deadline on the cluster (default " SW_STR(SW_REQUEST_DEFAULT_TIMEOUT_S) ")"},
};

/* The sampling defaults of requests: the shared --temp, --top-k, --top-p and
 * --min-p, and the gateway's own --repeat-penalty, whose default is off
 * (OpenAI's semantics: sw_limits.h, SW_SAMPLING_HTTP_REP_PENALTY). */
static const sw_opt_t s_rep_opts[] = {
    {"repeat-penalty", O_REP, "R",
     "repetition penalty of requests that ask for none,\n" SW_STR(
         SW_SAMPLING_REP_OFF) " = off (default " SW_STR(SW_SAMPLING_HTTP_REP_PENALTY) ", as "
                                                                                      "OpenAI)"},
};

static const sw_opt_group_t s_groups[] = {
    SW_ARGS_GROUP(NULL, s_opts),
    /* the defaults of the fields a request leaves out (its seed is random) */
    SW_ARGS_SHARED_TO("sampling defaults", SAMPLING, MIN_P),
    SW_ARGS_GROUP("repetition penalty (OpenAI's semantics: off unless asked)", s_rep_opts),
    SW_ARGS_SHARED_TO("relay", RELAY, RELAY),
    SW_ARGS_GROUP_SECURITY,
};

static const sw_args_spec_t s_spec = {
    .prog = "shardwire serve",
    .usage = "--relay HOST:PORT --listen HOST:PORT --api-key-file FILE SECURITY [options]",
    .about = "  An OpenAI-compatible HTTP API (POST /v1/chat/completions, /v1/completions,\n"
             "  GET /v1/models, /health, /metrics) in front of a cluster; docs/api.md.\n"
             "  The gateway is a client of the cluster: it needs a client key and the\n"
             "  access key, never the cluster key (security below). GET / serves a web\n"
             "  chat and a live page of the cluster (docs/api.md, \"Web page\").\n",
    .groups = s_groups,
    .n_groups = SW_ARGS_COUNT(s_groups),
};

int cmd_serve(int argc, char **argv)
{
    const char *P = s_spec.prog, *v;
    const sw_sampling_t sd = sw_args_sampling_default();
    gw_opts_t o = {
        .listen = S_LISTEN,
        .max_body = (size_t)S_BODY_MB << 20,
        .max_connections = S_CONNECTIONS,
        .max_per_ip = S_PER_IP,
        .max_inflight = S_INFLIGHT,
        .max_inflight_per_key = S_INFLIGHT_PER_KEY,
        .idle_timeout_s = S_IDLE_S,
        .header_timeout_s = S_HEADER_TIMEOUT_S,
        .body_timeout_s = S_BODY_TIMEOUT_S,
        .defaults = {.max_tokens = S_MAX_TOKENS, .timeout_ms = SW_REQUEST_DEFAULT_TIMEOUT_S * 1000},
    };
    sw_sampling_t sp = sd;
    sp.rep_penalty = (float)SW_SAMPLING_HTTP_REP_PENALTY;
    sw_sec_args_t sargs = {0};
    sw_args_relay_t ra = SW_ARGS_RELAY_DEFAULT;
    char listen[SW_ARGS_ENDPOINT_MAX];
    int c, rc = 0, mb = S_BODY_MB, bodies_mb = S_BODIES_MB,
           timeout_s = SW_REQUEST_DEFAULT_TIMEOUT_S;
    sw_args_t a;
    sw_args_init(&a, &s_spec, argc, argv);
    while ((c = sw_args_next(&a, &v)) >= 0) {
        int h = sw_sec_args_opt(&sargs, c, v);
        if (!h)
            h = sw_args_relay_opt(P, &ra, c, v);
        if (!h)
            h = sw_args_sampling_opt(P, &sp, c, v);
        if (h < 0)
            return 2;
        if (h)
            continue;
        switch (c) {
        case O_LISTEN:
            /* HOST:PORT (tcp:// accepted too) for libmicrohttpd */
            rc = sw_arg_endpoint(P, "--listen", v, 1, listen, sizeof listen);
            o.listen = listen + 6;
            break;
        case O_KEYS:
            o.api_key_file = v;
            break;
        case O_NOKEY:
            o.no_api_key = 1;
            break;
        case O_BODY:
            rc = sw_arg_int(P, "--max-body-mb", v, 1, 1024, &mb);
            break;
        case O_BODIES:
            rc = sw_arg_int(P, "--max-bodies-mb", v, 1, 65536, &bodies_mb);
            break;
        case O_CONNS:
            rc = sw_arg_int(P, "--max-connections", v, 1, 10000, &o.max_connections);
            break;
        case O_PERIP:
            rc = sw_arg_int(P, "--max-per-ip", v, 1, 10000, &o.max_per_ip);
            break;
        case O_INFLIGHT:
            rc = sw_arg_int(P, "--max-inflight", v, 1, SW_CLIENT_MAX_INFLIGHT, &o.max_inflight);
            break;
        case O_KEYINFLIGHT:
            rc = sw_arg_int(P, "--max-inflight-per-key", v, 1, SW_CLIENT_MAX_INFLIGHT,
                            &o.max_inflight_per_key);
            break;
        case O_IDLE:
            rc = sw_arg_int(P, "--idle-timeout-s", v, 1, 3600, &o.idle_timeout_s);
            break;
        case O_HDRT:
            rc = sw_arg_int(P, "--header-timeout-s", v, 1, 3600, &o.header_timeout_s);
            break;
        case O_BODYT:
            rc = sw_arg_int(P, "--body-timeout-s", v, 1, 3600, &o.body_timeout_s);
            break;
        case O_MAXTOK:
            rc = sw_arg_int(P, "--max-tokens", v, 1, SW_REQUEST_MAX_N_PREDICT,
                            &o.defaults.max_tokens);
            break;
        case O_TIMEOUT:
            rc = sw_arg_int(P, "--timeout-s", v, 1, 86400, &timeout_s);
            break;
        case O_REP:
            rc = sw_arg_float(P, "--repeat-penalty", v, 0.01f, 10, &sp.rep_penalty);
            break;
        default:
            return 2;
        }
        if (rc)
            return 2;
    }
    if ((c = sw_args_finish(&a, c, 0)) >= 0)
        return c;
    if (!ra.relay[0])
        return sw_args_exit(sw_args_fail(&s_spec, "--relay HOST:PORT is required"));
    o.relay = ra.relay;
    o.defaults.temperature = sp.temp;
    o.defaults.top_k = sp.top_k;
    o.defaults.top_p = sp.top_p;
    o.defaults.min_p = sp.min_p;
    o.defaults.repeat_penalty = sp.rep_penalty;
    o.max_body = (size_t)mb << 20;
    o.max_bodies = (size_t)bodies_mb << 20;
    if (o.max_bodies < o.max_body + 1)
        o.max_bodies = o.max_body + 1; /* one largest body always fits */
    o.defaults.timeout_ms = timeout_s * 1000;
    if (o.max_per_ip > o.max_connections)
        o.max_per_ip = o.max_connections;
    char err[512];
    static sw_sec_t sec; /* lives until the gateway stops */
    if (sw_sec_load(&sargs, o.relay, &sec, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", P, err);
        return 2;
    }
    o.sec = &sec;
    if (!getenv("SW_LOG_LEVEL"))
        sw_log_set_level(SW_LOG_INFO);
    sw_log_set_tag("serve");
    struct sigaction sa = {0};
    sa.sa_handler = s_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    rc = gw_run(&o, &s_stop);
    sw_sec_wipe(&sec);
    return rc;
}
