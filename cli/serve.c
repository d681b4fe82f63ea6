/*
 * serve.c - `shardwire serve`: the OpenAI-compatible HTTP gateway in front
 * of a cluster (gateway/gateway.h, docs/api.md). Parses the options into the
 * gateway's (s_serve_parse), then runs the gateway until SIGINT/SIGTERM
 * (s_serve_run). The defaults are sw_limits.h's (SW_GATEWAY_DEFAULT_*, the
 * request timeout and the sampling defaults); --help prints them.
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
    O_PERPREFIX,
    O_SLOW,
    O_INFLIGHT,
    O_KEYINFLIGHT,
    O_IDLE,
    O_HDRT,
    O_BODYT,
    O_MAXTOK,
    O_TIMEOUT,
};

static const sw_opt_t s_opts[] = {
    {"listen", O_LISTEN, "HOST:PORT",
     "HTTP address (default " SW_GATEWAY_DEFAULT_LISTEN "; port 0 = any)"},
    {"api-key-file", O_KEYS, "FILE", "bearer keys, one per line (mode 0600)"},
    {"insecure-no-api-key", O_NOKEY, NULL, "no keys: only with a loopback --listen address"},
    {"max-body-mb", O_BODY, "N",
     "largest request body (default " SW_STR(SW_GATEWAY_DEFAULT_BODY_MB) ")"},
    {"max-bodies-mb", O_BODIES, "N",
     "request bodies buffered at once, all together\n(default " SW_STR(
         SW_GATEWAY_DEFAULT_BODIES_MB) ")"},
    {"max-connections", O_CONNS, "N",
     "open HTTP connections (default " SW_STR(SW_GATEWAY_DEFAULT_CONNECTIONS) ")"},
    {"max-per-ip", O_PERIP, "N",
     "open connections from one address (default " SW_STR(SW_GATEWAY_DEFAULT_PER_IP) ")"},
    {"max-per-prefix", O_PERPREFIX, "N",
     "open connections from one IPv4 /24 or IPv6 /64\n(default " SW_STR(
         SW_GATEWAY_DEFAULT_PER_PREFIX) ")"},
    {"max-slow", O_SLOW, "N",
     "connections opened or sending a request, not the\n"
     "kept-alive ones waiting for their next; a new one\n"
     "beyond closes the one longest at its headers or\n"
     "body (default " SW_STR(SW_GATEWAY_DEFAULT_SLOW) ")"},
    {"max-inflight", O_INFLIGHT, "N",
     "generations at once; beyond: 429 (default " SW_STR(SW_GATEWAY_DEFAULT_INFLIGHT) ")"},
    {"max-inflight-per-key", O_KEYINFLIGHT, "N",
     "of them with one API key; beyond: 429 (default " SW_STR(
         SW_GATEWAY_DEFAULT_INFLIGHT_PER_KEY) ")"},
    {"idle-timeout-s", O_IDLE, "S",
     "close a connection that sends nothing for S: a\n"
     "kept-alive one waits S for its next request\n"
     "(default " SW_STR(SW_GATEWAY_DEFAULT_IDLE_S) ")"},
    {"header-timeout-s", O_HDRT, "S",
     "a request's headers must arrive within S of its\n"
     "first byte (a connection's first request: of its\n"
     "opening), however slowly (default " SW_STR(SW_GATEWAY_DEFAULT_HEADER_TIMEOUT_S) ")"},
    {"body-timeout-s", O_BODYT, "S",
     "a request body must arrive within S (default " SW_STR(SW_GATEWAY_DEFAULT_BODY_TIMEOUT_S) ")"},
    {"max-tokens", O_MAXTOK, "N",
     "tokens to generate when a request does not say\n(default " SW_STR(
         SW_GATEWAY_DEFAULT_MAX_TOKENS) ")"},
    {"timeout-s", O_TIMEOUT, "S",
     "each request's deadline on the cluster (default " SW_STR(SW_REQUEST_DEFAULT_TIMEOUT_S) ")"},
};

/* The sampling defaults of requests: the shared --temp, --top-k, --top-p and
 * --min-p, and the gateway's own --repeat-penalty, whose default is off
 * (OpenAI's semantics: sw_limits.h, SW_SAMPLING_HTTP_REP_PENALTY). Its key is
 * the shared option's, so that sw_args_sampling_opt checks it; only the help
 * (the default) is the gateway's. */
static const sw_opt_t s_rep_opts[] = {
    {"repeat-penalty", SW_OPT_REP, "R",
     "repetition penalty of requests that ask for none,\n" SW_STR(
         SW_SAMPLING_REP_OFF) " = off (default " SW_STR(SW_SAMPLING_HTTP_REP_PENALTY) ", as "
                                                                                      "OpenAI)"},
};

static const sw_opt_group_t s_groups[] = {
    SW_ARGS_GROUP(NULL, s_opts),
    /* the defaults of the fields a request leaves out (its seed is random) */
    SW_ARGS_SHARED_TO("sampling defaults", SAMPLING, MIN_P),
    SW_ARGS_GROUP("repetition penalty (OpenAI's semantics: off unless asked)", s_rep_opts),
    SW_ARGS_GROUP_RELAY,
    SW_ARGS_GROUP_SECURITY,
};

static const sw_args_spec_t s_spec = {
    .prog = "shardwire serve",
    .usage = "--relay HOST:PORT --listen HOST:PORT --api-key-file FILE SECURITY [options]",
    .about = "  An OpenAI-compatible HTTP API (POST /v1/chat/completions, /v1/completions;\n"
             "  GET /v1/models, /v1/models/ID, /v1/cluster, /v1/defaults, /health,\n"
             "  /metrics) in front of a cluster; docs/api.md.\n"
             "  The gateway is a client of the cluster: it needs a client key and the\n"
             "  access key, never the cluster key (security below). GET / serves a web\n"
             "  chat and a live page of the cluster (docs/api.md, \"Web page\").\n",
    .groups = s_groups,
    .n_groups = SW_ARGS_COUNT(s_groups),
};

/* serve's options. gw.listen and gw.relay point into the struct itself: it is
 * filled in place and never copied. */
struct s_serve_opts {
    gw_opts_t gw;                      /* what gw_run takes */
    sw_sampling_t sampling;            /* the request defaults' sampling fields */
    sw_sec_args_t sec;                 /* the security flags */
    sw_args_relay_t relay;             /* --relay */
    char listen[SW_ARGS_ENDPOINT_MAX]; /* --listen, normalised (tcp://HOST:PORT) */
    int body_mb;                       /* --max-body-mb */
    int bodies_mb;                     /* --max-bodies-mb */
    int timeout_s;                     /* --timeout-s */
};

/* One of serve's own options into o: 0, or -1 after the error line. */
static int s_serve_opt(struct s_serve_opts *o, int c, const char *v)
{
    const char *P = s_spec.prog;
    gw_opts_t *g = &o->gw;
    switch (c) {
    case O_LISTEN:
        /* HOST:PORT (tcp:// accepted too) for libmicrohttpd */
        if (sw_arg_endpoint(P, "--listen", v, 1, o->listen, sizeof o->listen) != 0)
            return -1;
        if (strncmp(o->listen, "tcp://", 6) != 0) { // ipc:// and inproc:// are ZeroMQ's
            fprintf(stderr,
                    "%s: --listen '%s' is not an HTTP address: give HOST:PORT, e.g. "
                    "127.0.0.1:8080\n",
                    P, v);
            return -1;
        }
        g->listen = o->listen + 6;
        return 0;
    case O_KEYS:
        g->api_key_file = v;
        return 0;
    case O_NOKEY:
        g->no_api_key = 1;
        return 0;
    case O_BODY:
        return sw_arg_int(P, "--max-body-mb", v, 1, 1024, &o->body_mb);
    case O_BODIES:
        return sw_arg_int(P, "--max-bodies-mb", v, 1, 65536, &o->bodies_mb);
    case O_CONNS:
        return sw_arg_int(P, "--max-connections", v, 1, 10000, &g->max_connections);
    case O_PERIP:
        return sw_arg_int(P, "--max-per-ip", v, 1, 10000, &g->max_per_ip);
    case O_PERPREFIX:
        return sw_arg_int(P, "--max-per-prefix", v, 1, 10000, &g->max_per_prefix);
    case O_SLOW:
        return sw_arg_int(P, "--max-slow", v, 1, 10000, &g->max_slow);
    case O_INFLIGHT:
        return sw_arg_int(P, "--max-inflight", v, 1, SW_CLIENT_MAX_INFLIGHT, &g->max_inflight);
    case O_KEYINFLIGHT:
        return sw_arg_int(P, "--max-inflight-per-key", v, 1, SW_CLIENT_MAX_INFLIGHT,
                          &g->max_inflight_per_key);
    case O_IDLE:
        return sw_arg_int(P, "--idle-timeout-s", v, 1, 3600, &g->idle_timeout_s);
    case O_HDRT:
        return sw_arg_int(P, "--header-timeout-s", v, 1, 3600, &g->header_timeout_s);
    case O_BODYT:
        return sw_arg_int(P, "--body-timeout-s", v, 1, 3600, &g->body_timeout_s);
    case O_MAXTOK:
        return sw_arg_int(P, "--max-tokens", v, 1, SW_REQUEST_MAX_N_PREDICT,
                          &g->defaults.max_tokens);
    case O_TIMEOUT:
        return sw_arg_int(P, "--timeout-s", v, 1, SW_REQUEST_MAX_TIMEOUT_S, &o->timeout_s);
    default:
        return -1;
    }
}

/* The values the options leave to the gateway: sampling, byte budgets, deadlines. */
static void s_serve_finish(struct s_serve_opts *o)
{
    gw_opts_t *g = &o->gw;
    g->relay = o->relay.relay;
    g->connect_timeout_ms = cli_connect_ms(o->relay.connect_s);
    g->defaults.temperature = o->sampling.temp;
    g->defaults.top_k = o->sampling.top_k;
    g->defaults.top_p = o->sampling.top_p;
    g->defaults.min_p = o->sampling.min_p;
    g->defaults.repeat_penalty = o->sampling.rep_penalty;
    g->max_body = (size_t)o->body_mb << 20;
    g->max_bodies = (size_t)o->bodies_mb << 20;
    if (g->max_bodies < g->max_body + 1)
        g->max_bodies = g->max_body + 1; /* one largest body always fits */
    g->defaults.timeout_ms = o->timeout_s * 1000;
    if (g->max_per_ip > g->max_connections)
        g->max_per_ip = g->max_connections;
    if (g->max_per_prefix < g->max_per_ip)
        g->max_per_prefix = g->max_per_ip;
    if (g->max_slow > g->max_connections)
        g->max_slow = g->max_connections;
}

/* -1 when the options are good (o filled), else the exit code: 0 after --help /
 * --version, 2 after a usage error's line. */
static int s_serve_parse(int argc, char **argv, struct s_serve_opts *o)
{
    const char *P = s_spec.prog, *v;
    *o = (struct s_serve_opts){
        .gw = {.listen = SW_GATEWAY_DEFAULT_LISTEN,
               .max_connections = SW_GATEWAY_DEFAULT_CONNECTIONS,
               .max_per_ip = SW_GATEWAY_DEFAULT_PER_IP,
               .max_per_prefix = SW_GATEWAY_DEFAULT_PER_PREFIX,
               .max_slow = SW_GATEWAY_DEFAULT_SLOW,
               .max_inflight = SW_GATEWAY_DEFAULT_INFLIGHT,
               .max_inflight_per_key = SW_GATEWAY_DEFAULT_INFLIGHT_PER_KEY,
               .idle_timeout_s = SW_GATEWAY_DEFAULT_IDLE_S,
               .header_timeout_s = SW_GATEWAY_DEFAULT_HEADER_TIMEOUT_S,
               .body_timeout_s = SW_GATEWAY_DEFAULT_BODY_TIMEOUT_S,
               .defaults = {.max_tokens = SW_GATEWAY_DEFAULT_MAX_TOKENS}},
        .sampling = sw_args_sampling_default(),
        .relay = SW_ARGS_RELAY_DEFAULT,
        .body_mb = SW_GATEWAY_DEFAULT_BODY_MB,
        .bodies_mb = SW_GATEWAY_DEFAULT_BODIES_MB,
        .timeout_s = SW_REQUEST_DEFAULT_TIMEOUT_S,
    };
    o->sampling.rep_penalty = (float)SW_SAMPLING_HTTP_REP_PENALTY;
    int c;
    sw_args_t a;
    sw_args_init(&a, &s_spec, argc, argv);
    while ((c = sw_args_next(&a, &v)) >= 0) {
        int h = sw_sec_args_opt(&o->sec, c, v);
        if (!h)
            h = sw_args_relay_opt(P, &o->relay, c, v);
        if (!h)
            h = sw_args_sampling_opt(P, &o->sampling, c, v);
        if (!h)
            h = s_serve_opt(o, c, v) == 0 ? 1 : -1;
        if (h < 0)
            return 2;
    }
    if ((c = sw_args_finish(&a, c, 0)) >= 0)
        return c;
    if (!o->relay.relay[0])
        return sw_args_exit(sw_args_fail(&s_spec, "--relay HOST:PORT is required"));
    s_serve_finish(o);
    return -1;
}

/* Loads the keys and runs the gateway until SIGINT/SIGTERM: the exit code. */
static int s_serve_run(struct s_serve_opts *o)
{
    char err[512];
    static sw_sec_t sec; /* lives until the gateway stops */
    if (sw_sec_load(&o->sec, o->gw.relay, &sec, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", s_spec.prog, err);
        return 2;
    }
    o->gw.sec = &sec;
    if (!getenv("SW_LOG_LEVEL"))
        sw_log_set_level(SW_LOG_INFO);
    sw_log_set_tag("serve");
    struct sigaction sa = {0};
    sa.sa_handler = s_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    const int rc = gw_run(&o->gw, &s_stop);
    sw_sec_wipe(&sec);
    return rc;
}

int cmd_serve(int argc, char **argv)
{
    static struct s_serve_opts o; /* gw points into it */
    const int rc = s_serve_parse(argc, argv, &o);
    return rc >= 0 ? rc : s_serve_run(&o);
}
