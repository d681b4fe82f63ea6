/*
 * run.c - `shardwire run` and `shardwire status`: the client side of a
 * cluster. `run` joins the relay as a client, sends one GenerateRequest to
 * the head and streams the TokenChunks it answers with; `status` prints the
 * relay's peer table.
 *
 *   shardwire run --relay tcp://HOST:PORT -p TEXT [-n N] [--temp T --seed S --top-k K
 *                 --top-p P --min-p P --repeat-penalty R] [--chat] [--head NAME]
 *                 [--timeout-s S] [--json] SECURITY
 *                 [--connect-timeout-s S]
 *   shardwire status --relay tcp://HOST:PORT [--json] [--expect NAME[,NAME...]]
 *                    [--connect-timeout-s S] SECURITY
 *
 * Clients started before the relay or the nodes keep trying, one line per
 * attempt, for --connect-timeout-s (default 15 s; 0 = no limit): `run` until a
 * head and a whole pipeline behind it are connected, `status --expect` until
 * the named peers are.
 *
 * SECURITY is --key FILE --relay-key FILE|Z85 --cluster-key FILE (required;
 * or the SW_KEY / SW_RELAY_KEY / SW_CLUSTER_KEY environment variables), or
 * --insecure-loopback for a loopback relay without keys (keys.h).
 */
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "client.h"
#include "cmds.h"
#include "keys.h"
#include "log.h"
#include "wire.h"

#define S_CONNECT_MS 15000 /* default --connect-timeout-s of the clients */
#define S_CONNECT_USAGE                                                                            \
    "  --connect-timeout-s S  keep trying to reach the relay (and, for run, a whole pipeline)\n"   \
    "                         for S s (default 15; 0 = no limit)\n"

static volatile sig_atomic_t s_stop;

static double s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void s_on_signal(int sig)
{
    (void)sig;
    s_stop = 1;
}

/* --connect-timeout-s: seconds, 0 = no limit; into ms (-1 = none). 0 or -1 after a line. */
static int s_connect_timeout(const char *cmd, const char *arg, int *ms)
{
    int sec;
    char prog[64];
    snprintf(prog, sizeof prog, "shardwire %s", cmd);
    if (sw_arg_int(prog, "--connect-timeout-s", arg, 0, 86400 * 24, &sec) != 0)
        return -1;
    *ms = sec > 0 ? sec * 1000 : -1;
    return 0;
}

/* Loads the keys and joins the relay, trying for connect_ms; NULL after one
 * line on stderr (*exit_code set). */
static sw_client_t *s_connect(const char *cmd, const sw_sec_args_t *a, const char *relay,
                              int connect_ms, int *exit_code)
{
    char err[512];
    sw_sec_t sec;
    if (sw_sec_load(a, relay, &sec, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire %s: %s\n", cmd, err);
        *exit_code = 2;
        return NULL;
    }
    sw_client_opts_t co = {
        .relay = relay, .sec = &sec, .connect_timeout_ms = connect_ms, .stop = &s_stop};
    sw_client_t *c = sw_client_new(&co, err, sizeof err);
    sw_sec_wipe(&sec);
    if (!c) {
        fprintf(stderr, "shardwire %s: %s\n", cmd, err);
        *exit_code = 1;
    }
    return c;
}

/* 1 when every comma-separated name in expect is in the table; else 0 and the
 * first missing one in missing. */
static int s_has_names(const sw_client_table_t *t, const char *expect, char *missing, size_t len)
{
    missing[0] = 0; /* a name missing on an earlier attempt may have come since */
    for (const char *p = expect; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        int found = n == 0;
        for (int i = 0; i < t->n_peers && !found; i++)
            found = strlen(t->peers[i].name) == n && !strncmp(t->peers[i].name, p, n);
        if (!found) {
            snprintf(missing, len, "%.*s", (int)(n < 64 ? n : 64), p);
            return 0;
        }
        p = comma ? comma + 1 : NULL;
    }
    return 1;
}

int cmd_status(int argc, char **argv)
{
    enum { O_RELAY = 256, O_JSON, O_EXPECT, O_CONNECT };
    static const struct option longs[] = {{"relay", required_argument, 0, O_RELAY},
                                          {"json", no_argument, 0, O_JSON},
                                          {"expect", required_argument, 0, O_EXPECT},
                                          {"connect-timeout-s", required_argument, 0, O_CONNECT},
                                          SW_SEC_LONGOPTS,
                                          {0, 0, 0, 0}};
    const char *relay = NULL, *expect = NULL;
    int json = 0, c, rc = 1, connect_ms = S_CONNECT_MS;
    sw_sec_args_t sa = {.cluster_optional = 1}; /* the relay operator has no cluster key */
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        int h = sw_sec_args_opt(&sa, c, optarg);
        if (h < 0)
            return 2;
        if (h)
            continue;
        if (c == O_RELAY)
            relay = optarg;
        else if (c == O_JSON)
            json = 1;
        else if (c == O_EXPECT)
            expect = optarg;
        else if (c != O_CONNECT || s_connect_timeout("status", optarg, &connect_ms) != 0)
            return 2;
    }
    if (!relay || optind < argc) {
        fprintf(stderr,
                "usage: shardwire status --relay tcp://HOST:PORT [--json] [--expect "
                "NAME[,NAME...]] SECURITY\n"
                "  --expect NAMES         wait (up to the connect timeout) until these "
                "peers are connected; exit 1 if they are not\n" S_CONNECT_USAGE SW_SEC_USAGE);
        return 2;
    }
    const double deadline = connect_ms < 0 ? -1 : s_now_ms() + connect_ms;
    sw_client_t *cl = s_connect("status", &sa, relay, connect_ms, &rc);
    if (!cl)
        return rc;
    sw_client_table_t t;
    char err[512], missing[80] = "";
    for (int attempt = 1;; attempt++) {
        if (sw_client_status(cl, &t, 5000, err, sizeof err) != 0) {
            fprintf(stderr, "shardwire status: the relay at %s did not answer\n", relay);
            sw_client_destroy(&cl);
            return 1;
        }
        if (!expect || s_has_names(&t, expect, missing, sizeof missing))
            break;
        double left = deadline < 0 ? 2000 : deadline - s_now_ms();
        double wait = attempt < 4 ? 250 << attempt : 2000;
        if (wait > left)
            wait = left;
        if (wait <= 0 || s_stop)
            break;
        fprintf(stderr,
                "shardwire status: '%s' is not connected yet (attempt %d); asking again in "
                "%.1f s\n",
                missing, attempt, wait / 1e3);
        sw_client_table_clear(&t);
        usleep((useconds_t)(wait * 1000));
    }
    if (json) {
        json_t *j = json_object(), *arr = json_array();
        for (int i = 0; i < t.n_peers; i++) {
            const sw_client_peer_t *p = &t.peers[i];
            json_t *o = json_object();
            json_object_set_new(o, "name", json_string(p->name));
            json_object_set_new(o, "role", json_string(p->role));
            json_object_set_new(o, "layer_begin", json_integer(p->layer_begin));
            json_object_set_new(o, "layer_end", json_integer(p->layer_end));
            json_object_set_new(o, "n_layers", json_integer(p->n_layers));
            json_object_set_new(o, "model", json_string(p->model));
            json_object_set_new(o, "heartbeat_age_ms", json_integer(p->heartbeat_age_ms));
            json_object_set_new(o, "idle_ms", json_integer(p->idle_ms));
            json_object_set_new(o, "msgs_in", json_integer((json_int_t)p->msgs_in));
            json_object_set_new(o, "msgs_out", json_integer((json_int_t)p->msgs_out));
            json_array_append_new(arr, o);
        }
        json_object_set_new(j, "peers", arr);
        json_object_set_new(j, "uptime_ms", json_integer((json_int_t)t.uptime_ms));
        json_object_set_new(j, "forwarded", json_integer((json_int_t)t.forwarded));
        json_object_set_new(j, "dropped", json_integer((json_int_t)t.dropped));
        char *s = json_dumps(j, JSON_COMPACT);
        if (s)
            printf("%s\n", s);
        free(s);
        json_decref(j);
    } else {
        printf("relay %s: up %.1f s, %llu forwarded, %llu dropped\n", relay, t.uptime_ms / 1e3,
               (unsigned long long)t.forwarded, (unsigned long long)t.dropped);
        printf("%-24s %-7s %-12s %-14s %s\n", "NAME", "ROLE", "LAYERS", "HEARTBEAT AGE", "MODEL");
        for (int i = 0; i < t.n_peers; i++) {
            const sw_client_peer_t *p = &t.peers[i];
            char layers[32] = "-";
            if (p->is_node)
                snprintf(layers, sizeof layers, "%u:%u/%u", p->layer_begin, p->layer_end,
                         p->n_layers);
            printf("%-24s %-7s %-12s %-14.1f %.12s\n", p->name, p->role, layers,
                   p->heartbeat_age_ms / 1e3, p->model);
        }
    }
    sw_client_table_clear(&t);
    sw_client_destroy(&cl);
    if (expect && missing[0]) {
        fprintf(stderr, "shardwire status: '%s' is not connected to the relay\n", missing);
        return 1;
    }
    return 0;
}

/* Prints the final JSON object of `run --json`. */
static void s_print_json(const char *text, size_t text_len, json_t *ids,
                         const sw_client_stats_t *st)
{
    json_t *j = json_object();
    json_object_set_new(j, "text", json_stringn(text ? text : "", text_len));
    json_object_set(j, "tokens", ids);
    json_object_set_new(j, "n_prompt", json_integer(st->n_prompt));
    json_object_set_new(j, "n_gen", json_integer(st->n_generated));
    json_object_set_new(j, "ttft_ms", json_real(st->ttft_ms));
    json_object_set_new(j, "prefill_tok_s",
                        json_real(st->prompt_ms ? st->n_prompt * 1e3 / st->prompt_ms : 0));
    json_object_set_new(j, "decode_tok_s",
                        json_real(st->decode_ms > 0 && st->n_generated > 1
                                      ? (st->n_generated - 1) * 1e3 / st->decode_ms
                                      : 0));
    json_object_set_new(j, "rounds", json_integer(st->n_rounds));
    json_object_set_new(j, "drafted", json_integer(st->n_drafted));
    json_object_set_new(j, "accepted", json_integer(st->n_accepted));
    json_object_set_new(j, "resumes", json_integer(st->n_resumes));
    char dg[17];
    snprintf(dg, sizeof dg, "%016llx", (unsigned long long)st->logits_digest);
    json_object_set_new(j, "logits_digest", json_string(dg));
    json_t *tm = json_object();
    if (st->have_head) {
        json_object_set_new(tm, "head_ttft_ms", json_real(st->head_ttft_ms));
        json_object_set_new(tm, "draft_ms", json_real(st->draft_ms));
        json_object_set_new(tm, "head_compute_ms", json_real(st->head_compute_ms));
        json_object_set_new(tm, "network_ms", json_real(st->network_ms));
        json_t *stages = json_object();
        for (int i = 0; i < st->n_stages; i++)
            json_object_set_new(stages, st->stages[i].name, json_real(st->stages[i].compute_ms));
        json_object_set_new(tm, "stage_compute_ms", stages);
        json_object_set_new(tm, "per_round_ms",
                            json_real(st->n_rounds ? st->decode_ms / st->n_rounds : 0));
    }
    json_object_set_new(tm, "total_ms", json_real(st->total_ms));
    json_object_set_new(j, "timing", tm);
    char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (s)
        printf("%s\n", s);
    free(s);
    json_decref(j);
}

/* The stats table after streamed text (stderr). */
static void s_print_table(const sw_client_stats_t *st)
{
    double tps =
        st->decode_ms > 0 && st->n_generated > 1 ? (st->n_generated - 1) * 1e3 / st->decode_ms : 0;
    fprintf(stderr, "\n%-22s %12d\n%-22s %12d\n%-22s %12d\n", "prompt tokens", st->n_prompt,
            "generated tokens", st->n_generated, "rounds", st->n_rounds);
    fprintf(stderr, "%-22s %5d / %-5d\n", "drafts accepted", st->n_accepted, st->n_drafted);
    fprintf(stderr, "%-22s %12.2f\n%-22s %8.1f tok/s\n%-22s %9.0f ms\n", "tokens per round",
            st->n_rounds ? (double)(st->n_generated - 1) / st->n_rounds : 0, "decode speed", tps,
            "first token", st->ttft_ms);
}

int cmd_run(int argc, char **argv)
{
    enum {
        O_RELAY = 256,
        O_TEMP,
        O_SEED,
        O_TOPK,
        O_TOPP,
        O_MINP,
        O_REP,
        O_CHAT,
        O_JSON,
        O_HEAD,
        O_TIMEOUT,
        O_DRAFT,
        O_DRAFTK,
        O_CONNECT
    };
    static const struct option longs[] = {{"relay", required_argument, 0, O_RELAY},
                                          {"prompt", required_argument, 0, 'p'},
                                          {"n-predict", required_argument, 0, 'n'},
                                          {"temp", required_argument, 0, O_TEMP},
                                          {"seed", required_argument, 0, O_SEED},
                                          {"top-k", required_argument, 0, O_TOPK},
                                          {"top-p", required_argument, 0, O_TOPP},
                                          {"min-p", required_argument, 0, O_MINP},
                                          {"repeat-penalty", required_argument, 0, O_REP},
                                          {"chat", no_argument, 0, O_CHAT},
                                          {"json", no_argument, 0, O_JSON},
                                          {"head", required_argument, 0, O_HEAD},
                                          {"timeout-s", required_argument, 0, O_TIMEOUT},
                                          {"draft", required_argument, 0, O_DRAFT},
                                          {"draft-k", required_argument, 0, O_DRAFTK},
                                          {"connect-timeout-s", required_argument, 0, O_CONNECT},
                                          SW_SEC_LONGOPTS,
                                          {0, 0, 0, 0}};
    sw_sec_args_t sargs = {0};
    const char *relay = NULL, *prompt = NULL, *head_name = NULL, *draft = NULL;
    double n_predict = 128, temp = 0, seed = 0x5eed, top_k = 40, top_p = 0.95, min_p = 0.05,
           rep = 1.0, timeout_s = 300, draft_k = -1;
    int chat = 0, json = 0, c, rc = 0, connect_ms = S_CONNECT_MS;
    optind = 1;
    while ((c = getopt_long(argc, argv, "p:n:", longs, NULL)) != -1) {
        int h = sw_sec_args_opt(&sargs, c, optarg);
        if (h < 0)
            return 2;
        if (h)
            continue;
        switch (c) {
        case O_RELAY:
            relay = optarg;
            break;
        case 'p':
            prompt = optarg;
            break;
        case 'n':
            rc = sw_arg_double("shardwire run", "-n", optarg, 1, 1 << 20, &n_predict);
            break;
        case O_TEMP:
            rc = sw_arg_double("shardwire run", "--temp", optarg, 0, 100, &temp);
            break;
        case O_SEED:
            rc = sw_arg_double("shardwire run", "--seed", optarg, 0, 1.8e19, &seed);
            break;
        case O_TOPK:
            rc = sw_arg_double("shardwire run", "--top-k", optarg, 0, 1 << 20, &top_k);
            break;
        case O_TOPP:
            rc = sw_arg_double("shardwire run", "--top-p", optarg, 0, 1, &top_p);
            break;
        case O_MINP:
            rc = sw_arg_double("shardwire run", "--min-p", optarg, 0, 1, &min_p);
            break;
        case O_REP:
            rc = sw_arg_double("shardwire run", "--repeat-penalty", optarg, 0.01, 10, &rep);
            break;
        case O_CHAT:
            chat = 1;
            break;
        case O_JSON:
            json = 1;
            break;
        case O_HEAD:
            head_name = optarg;
            break;
        case O_TIMEOUT:
            rc = sw_arg_double("shardwire run", "--timeout-s", optarg, 1, 86400, &timeout_s);
            break;
        case O_DRAFT:
            draft = optarg;
            break;
        case O_DRAFTK:
            rc =
                sw_arg_double("shardwire run", "--draft-k", optarg, 0, SW_WIRE_MAX_DRAFT, &draft_k);
            break;
        case O_CONNECT:
            rc = s_connect_timeout("run", optarg, &connect_ms);
            break;
        default:
            return 2;
        }
        if (rc)
            return 2;
    }
    if (!relay || !prompt) {
        fprintf(stderr, "shardwire run: --relay and -p are required;\n" S_CONNECT_USAGE
                        "security:\n" SW_SEC_USAGE);
        return 2;
    }
    sw_client_request_t q = sw_client_request_default();
    q.prompt = prompt;
    q.chat = chat;
    q.n_predict = (int)n_predict;
    q.temperature = (float)temp;
    q.top_k = (int)top_k;
    q.top_p = top_p > 0 ? (float)top_p : 1.0f;
    q.min_p = (float)min_p;
    q.repeat_penalty = (float)rep;
    q.seed = (uint64_t)seed;
    q.draft_k = (int)draft_k;
    q.timeout_ms = (int)(timeout_s * 1000);
    if (draft) {
        if (!strcmp(draft, "model"))
            q.draft = SW_CLIENT_DRAFT_MODEL;
        else if (!strcmp(draft, "ngram"))
            q.draft = SW_CLIENT_DRAFT_NGRAM;
        else if (!strcmp(draft, "none"))
            q.draft = SW_CLIENT_DRAFT_NONE;
        else if (!strcmp(draft, "auto"))
            q.draft = SW_CLIENT_DRAFT_AUTO;
        else {
            fprintf(stderr, "shardwire run: --draft '%s' must be model, ngram, none or auto\n",
                    draft);
            return 2;
        }
    }
    char err[512];
    if (sw_client_request_check(&q, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire run: %s\n", err);
        return 2;
    }
    struct sigaction sa = {0};
    sa.sa_handler = s_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    int exit_code = 1;
    const double t_start = s_now_ms();
    sw_client_t *cl = s_connect("run", &sargs, relay, connect_ms, &exit_code);
    if (!cl)
        return exit_code;
    exit_code = 1;
    json_t *ids = json_array();
    char *text = NULL;
    size_t text_len = 0;
    int held_c2 = 0; /* the text shown so far ended in a byte that may start a C1 control */
    char head[SW_CLIENT_NAME_LEN], id[SW_CLIENT_ID_LEN];
    /* the rest of the connect deadline goes to waiting for the pipeline */
    int wait_ms = connect_ms < 0 ? -1 : connect_ms - (int)(s_now_ms() - t_start);
    if (sw_client_wait_head(cl, head_name, NULL, wait_ms < 0 && connect_ms >= 0 ? 0 : wait_ms,
                            &s_stop, head, err, sizeof err) != 0 ||
        sw_client_submit(cl, head, &q, id, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire run: %s\n", err);
        goto out;
    }
    for (;;) {
        if (s_stop) {
            /* sw_client_cancel tells the head at once, so that the cluster stops
             * working for nobody; no need to wait for its confirmation. */
            (void)sw_client_cancel(cl, id);
            fprintf(stderr, "\nshardwire run: interrupted (the request is cancelled on the "
                            "cluster)\n");
            exit_code = 130;
            goto out;
        }
        sw_client_event_t ev;
        int r = sw_client_next(cl, &ev, 500);
        if (r == 1)
            continue;
        if (r < 0) {
            fprintf(stderr, "shardwire run: lost the connection to the relay\n");
            goto out;
        }
        if (ev.type == SW_CLIENT_EV_ERROR) {
            if (ev.wire_code)
                fprintf(stderr, "shardwire run: %s (%s)\n", ev.message, ev.wire_code_name);
            else
                fprintf(stderr, "shardwire run: %s\n", ev.message);
            goto out;
        }
        for (int i = 0; i < ev.n_tokens; i++)
            json_array_append_new(ids, json_integer(ev.tokens[i]));
        if (ev.text_len) {
            char *t = realloc(text, text_len + ev.text_len + 1);
            if (!t)
                goto out;
            text = t;
            memcpy(text + text_len, ev.text, ev.text_len);
            text_len += ev.text_len;
            text[text_len] = 0;
            if (!json) { /* model text may hold escape sequences: not for the terminal */
                char *shown = malloc(ev.text_len + 2);
                if (shown) {
                    size_t n_in = 0;
                    if (held_c2)
                        shown[n_in++] = (char)0xc2;
                    memcpy(shown + n_in, ev.text, ev.text_len);
                    n_in += ev.text_len;
                    fwrite(shown, 1, sw_text_clean(shown, shown, n_in, 1, &held_c2), stdout);
                    free(shown);
                }
                fflush(stdout);
            }
        }
        if (ev.type != SW_CLIENT_EV_DONE)
            continue;
        if (json) {
            s_print_json(text, text_len, ids, ev.stats);
        } else {
            printf("\n");
            if (ev.stats->have_head)
                s_print_table(ev.stats);
        }
        exit_code = 0;
        break;
    }
out:
    json_decref(ids);
    free(text);
    sw_client_destroy(&cl);
    return exit_code;
}
