/*
 * serve.c - `shardwire serve`: the OpenAI-compatible HTTP gateway in front
 * of a cluster (gateway/gateway.h, docs/api.md). Parses the options and runs
 * the gateway until SIGINT/SIGTERM.
 */
#include <getopt.h>
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

static void s_usage(FILE *f)
{
    fprintf(f, "usage: shardwire serve --relay tcp://HOST:PORT --listen HOST:PORT "
               "--api-key-file FILE SECURITY [options]\n"
               "  An OpenAI-compatible HTTP API (POST /v1/chat/completions, /v1/completions,\n"
               "  GET /v1/models, /health, /metrics) in front of a cluster; docs/api.md.\n"
               "\n"
               "  --relay ENDPOINT         the cluster's relay\n"
               "  --listen HOST:PORT       HTTP address (default 127.0.0.1:8080; port 0 = any)\n"
               "  --api-key-file FILE      bearer keys, one per line (mode 0600)\n"
               "  --insecure-no-api-key    no keys: only with a loopback --listen address\n"
               "  --max-body-mb N          largest request body (default 8)\n"
               "  --max-connections N      open HTTP connections (default 64)\n"
               "  --max-per-ip N           open connections from one address (default 16)\n"
               "  --max-inflight N         generations at once; beyond: 429 (default 32)\n"
               "  --idle-timeout-s S       close a connection idle this long (default 30)\n"
               "  --body-timeout-s S       a request body must arrive within S (default 30)\n"
               "  defaults for fields a request leaves out:\n"
               "  --max-tokens N           tokens to generate (default 512)\n"
               "  --temp T                 temperature (default 0.8; 0 = greedy)\n"
               "  --top-k K                (default 40; 0 = off)\n"
               "  --top-p P                (default 0.95)\n"
               "  --min-p P                (default 0.05)\n"
               "  --repeat-penalty R       (default 1.1; 1 = off)\n"
               "  --timeout-s S            each request's deadline on the cluster (default 300)\n"
               "security (the gateway is a client of the cluster):\n" SW_SEC_USAGE);
}

int cmd_serve(int argc, char **argv)
{
    enum {
        O_RELAY = 256,
        O_LISTEN,
        O_KEYS,
        O_NOKEY,
        O_BODY,
        O_CONNS,
        O_PERIP,
        O_INFLIGHT,
        O_IDLE,
        O_BODYT,
        O_MAXTOK,
        O_TEMP,
        O_TOPK,
        O_TOPP,
        O_MINP,
        O_REP,
        O_TIMEOUT,
        O_HELP
    };
    static const struct option longs[] = {{"relay", required_argument, 0, O_RELAY},
                                          {"listen", required_argument, 0, O_LISTEN},
                                          {"api-key-file", required_argument, 0, O_KEYS},
                                          {"insecure-no-api-key", no_argument, 0, O_NOKEY},
                                          {"max-body-mb", required_argument, 0, O_BODY},
                                          {"max-connections", required_argument, 0, O_CONNS},
                                          {"max-per-ip", required_argument, 0, O_PERIP},
                                          {"max-inflight", required_argument, 0, O_INFLIGHT},
                                          {"idle-timeout-s", required_argument, 0, O_IDLE},
                                          {"body-timeout-s", required_argument, 0, O_BODYT},
                                          {"max-tokens", required_argument, 0, O_MAXTOK},
                                          {"temp", required_argument, 0, O_TEMP},
                                          {"top-k", required_argument, 0, O_TOPK},
                                          {"top-p", required_argument, 0, O_TOPP},
                                          {"min-p", required_argument, 0, O_MINP},
                                          {"repeat-penalty", required_argument, 0, O_REP},
                                          {"timeout-s", required_argument, 0, O_TIMEOUT},
                                          {"help", no_argument, 0, O_HELP},
                                          SW_SEC_LONGOPTS,
                                          {0, 0, 0, 0}};
    const char *P = "shardwire serve";
    gw_opts_t o = {
        .listen = "127.0.0.1:8080",
        .max_body = 8u << 20,
        .max_connections = 64,
        .max_per_ip = 16,
        .max_inflight = 32,
        .idle_timeout_s = 30,
        .body_timeout_s = 30,
        .defaults = {.max_tokens = 512,
                     .temperature = 0.8f,
                     .top_k = 40,
                     .top_p = 0.95f,
                     .min_p = 0.05f,
                     .repeat_penalty = 1.1f,
                     .timeout_ms = 300000},
    };
    sw_sec_args_t sargs = {0};
    int c, rc = 0, mb = 8, timeout_s = 300;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        int h = sw_sec_args_opt(&sargs, c, optarg);
        if (h < 0)
            return 2;
        if (h)
            continue;
        switch (c) {
        case O_RELAY:
            o.relay = optarg;
            break;
        case O_LISTEN:
            o.listen = optarg;
            break;
        case O_KEYS:
            o.api_key_file = optarg;
            break;
        case O_NOKEY:
            o.no_api_key = 1;
            break;
        case O_BODY:
            rc = sw_arg_int(P, "--max-body-mb", optarg, 1, 1024, &mb);
            break;
        case O_CONNS:
            rc = sw_arg_int(P, "--max-connections", optarg, 1, 10000, &o.max_connections);
            break;
        case O_PERIP:
            rc = sw_arg_int(P, "--max-per-ip", optarg, 1, 10000, &o.max_per_ip);
            break;
        case O_INFLIGHT:
            rc =
                sw_arg_int(P, "--max-inflight", optarg, 1, SW_CLIENT_MAX_INFLIGHT, &o.max_inflight);
            break;
        case O_IDLE:
            rc = sw_arg_int(P, "--idle-timeout-s", optarg, 1, 3600, &o.idle_timeout_s);
            break;
        case O_BODYT:
            rc = sw_arg_int(P, "--body-timeout-s", optarg, 1, 3600, &o.body_timeout_s);
            break;
        case O_MAXTOK:
            rc = sw_arg_int(P, "--max-tokens", optarg, 1, 1 << 20, &o.defaults.max_tokens);
            break;
        case O_TEMP:
            rc = sw_arg_float(P, "--temp", optarg, 0, 2, &o.defaults.temperature);
            break;
        case O_TOPK:
            rc = sw_arg_int(P, "--top-k", optarg, 0, 1 << 20, &o.defaults.top_k);
            break;
        case O_TOPP:
            rc = sw_arg_float(P, "--top-p", optarg, 0.001, 1, &o.defaults.top_p);
            break;
        case O_MINP:
            rc = sw_arg_float(P, "--min-p", optarg, 0, 0.999, &o.defaults.min_p);
            break;
        case O_REP:
            rc = sw_arg_float(P, "--repeat-penalty", optarg, 0.01, 10, &o.defaults.repeat_penalty);
            break;
        case O_TIMEOUT:
            rc = sw_arg_int(P, "--timeout-s", optarg, 1, 86400, &timeout_s);
            break;
        case O_HELP:
            s_usage(stdout);
            return 0;
        default:
            fprintf(stderr, "(see shardwire serve --help)\n");
            return 2;
        }
        if (rc)
            return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", P, argv[optind]);
        return 2;
    }
    if (!o.relay) {
        fprintf(stderr, "%s: --relay tcp://HOST:PORT is required (see --help)\n", P);
        return 2;
    }
    o.max_body = (size_t)mb << 20;
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
