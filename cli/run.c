/*
 * run.c - `shardwire run` and `shardwire status`: the client side of a
 * cluster. `run` joins the relay as a client, sends one GenerateRequest to
 * the head and streams the TokenChunks it answers with; `status` prints the
 * relay's peer table.
 *
 *   shardwire run --relay HOST:PORT -p TEXT [-n N] [--chat] [--json] [--head NAME]
 *                 [--timeout-s S] [sampling, drafting, relay options of args.h] SECURITY
 *   shardwire status --relay HOST:PORT [--json] [--expect NAME[,NAME...]]
 *                    [--connect-timeout-s S] SECURITY
 *
 * Clients started before the relay or the nodes keep trying, one line per
 * attempt, for --connect-timeout-s (default SW_CLIENT_DEFAULT_CONNECT_S; 0 =
 * no limit): `run` until a head and a whole pipeline behind it are connected,
 * `status --expect` until the named peers are.
 *
 * SECURITY is --key FILE --relay-key FILE|Z85 --access-key FILE (required;
 * or the SW_KEY / SW_RELAY_KEY / SW_CLUSTER_KEY environment variables), or
 * --insecure-loopback for a loopback relay without keys (keys.h).
 */
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

#define S_CONNECT_MS (SW_CLIENT_DEFAULT_CONNECT_S * 1000) /* default --connect-timeout-s */

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

/* --connect-timeout-s (-1 = not given) into ms: the default, or -1 for no limit. */
static int s_connect_ms(int connect_s)
{
    if (connect_s < 0)
        return S_CONNECT_MS;
    return connect_s > 0 ? connect_s * 1000 : -1;
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

sw_client_t *cli_connect(const char *cmd, const sw_sec_args_t *a, const char *relay, int connect_s,
                         int *exit_code)
{
    return s_connect(cmd, a, relay, s_connect_ms(connect_s), exit_code);
}

/* 1 when every comma-separated name in expect is in the table (missing is
 * then ""); else 0 and the first missing one in missing. */
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

enum { O_EXPECT = SW_OPT_OWN, O_HEAD, O_TIMEOUT, O_SPOT };

static const sw_opt_t s_status_opts[] = {
    {"json", SW_OPT_JSON, NULL, "print the peer table as one JSON object"},
    {"expect", O_EXPECT, "NAMES",
     "wait (up to the connect timeout) until these peers\n(comma-separated) are connected; exit 1 "
     "if they are not"},
    {"spot", O_SPOT, "HEAD",
     "also ask head HEAD what its spot checks found (nodes\nconvicted or disputed; needs the "
     "access key;\ndocs/security.md)"},
};

static const sw_opt_group_t s_status_groups[] = {
    SW_ARGS_GROUP(NULL, s_status_opts),
    SW_ARGS_GROUP_RELAY,
    SW_ARGS_GROUP_SECURITY,
};

static const sw_args_spec_t s_status_spec = {
    .prog = "shardwire status",
    .usage = "--relay HOST:PORT [--json] [--expect NAME[,NAME...]] [--spot HEAD] SECURITY",
    .about = "  The relay's peers: names, roles, layer ranges, heartbeat ages, models.\n"
             "  Needs a client key on the relay's allow-list, no access key.\n",
    .groups = s_status_groups,
    .n_groups = SW_ARGS_COUNT(s_status_groups),
};

int cmd_status(int argc, char **argv)
{
    const char *P = s_status_spec.prog, *expect = NULL, *spot_head = NULL, *v;
    sw_args_relay_t ra = SW_ARGS_RELAY_DEFAULT;
    int json = 0, c, rc = 1;
    sw_sec_args_t sa = {.e2e_optional = 1}; /* the relay operator has no access key */
    sw_args_t a;
    sw_args_init(&a, &s_status_spec, argc, argv);
    while ((c = sw_args_next(&a, &v)) >= 0) {
        int h = sw_sec_args_opt(&sa, c, v);
        if (!h)
            h = sw_args_relay_opt(P, &ra, c, v);
        if (!h && c == SW_OPT_JSON)
            h = json = 1;
        if (!h && c == O_EXPECT) {
            expect = v;
            h = 1;
        }
        if (!h && c == O_SPOT) {
            if (!sw_wire_name_ok(v, strlen(v)))
                return sw_args_exit(sw_args_fail(&s_status_spec, "--spot '%s' is no peer name", v));
            spot_head = v;
            h = 1;
        }
        if (h <= 0)
            return 2;
    }
    if ((c = sw_args_finish(&a, c, 0)) >= 0)
        return c;
    if (!ra.relay[0])
        return sw_args_exit(sw_args_fail(&s_status_spec, "--relay HOST:PORT is required"));
    const char *relay = ra.relay;
    const int connect_ms = s_connect_ms(ra.connect_s);
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
    sw_client_spot_t spot;
    int spot_rc = 0;
    if (spot_head && (spot_rc = sw_client_spot(cl, spot_head, &spot, 5000, err, sizeof err)) != 0)
        fprintf(stderr, "shardwire status: %s\n", err);
    if (json) {
        json_t *j = json_object(), *arr = json_array();
        if (spot_head && spot_rc == 0) {
            json_t *o = json_object(), *nodes = json_array();
            json_object_set_new(o, "head", json_string(spot_head));
            json_object_set_new(o, "share", json_real(spot.share));
            json_object_set_new(o, "sessions_checked",
                                json_integer((json_int_t)spot.sessions_checked));
            json_object_set_new(o, "rounds_compared",
                                json_integer((json_int_t)spot.rounds_compared));
            json_object_set_new(o, "mismatches", json_integer((json_int_t)spot.mismatches));
            for (int i = 0; i < spot.n_nodes; i++) {
                json_t *nd = json_object();
                json_object_set_new(nd, "name", json_string(spot.nodes[i].name));
                json_object_set_new(nd, "convicted", json_boolean(spot.nodes[i].convicted));
                json_object_set_new(nd, "avoid_s", json_integer(spot.nodes[i].avoid_s));
                json_array_append_new(nodes, nd);
            }
            json_object_set_new(o, "nodes", nodes);
            json_object_set_new(j, "spot", o);
        }
        for (int i = 0; i < t.n_peers; i++) {
            const sw_client_peer_t *p = &t.peers[i];
            json_t *o = json_object();
            json_object_set_new(o, "name", json_string(p->name));
            json_object_set_new(o, "role", json_string(p->role));
            json_object_set_new(o, "layer_begin", json_integer(p->layer_begin));
            json_object_set_new(o, "layer_end", json_integer(p->layer_end));
            json_object_set_new(o, "n_layers", json_integer(p->n_layers));
            json_object_set_new(o, "model", json_string(p->model));
            json_object_set_new(o, "key_bound", json_boolean(p->key_bound));
            json_object_set_new(o, "role_bound", json_boolean(p->role_bound));
            json_object_set_new(o, "heartbeat_age_ms", json_integer(p->heartbeat_age_ms));
            json_object_set_new(o, "idle_ms", json_integer(p->idle_ms));
            json_object_set_new(o, "msgs_in", json_integer((json_int_t)p->msgs_in));
            json_object_set_new(o, "msgs_out", json_integer((json_int_t)p->msgs_out));
            if (p->is_node) {
                json_object_set_new(o, "auto", json_boolean(p->auto_place));
                json_object_set_new(o, "standby", json_boolean(p->standby));
                json_object_set_new(o, "mem_mib", json_integer(p->mem_mib));
                json_object_set_new(o, "us_layer_1", json_integer(p->us_layer_1));
                json_object_set_new(o, "us_layer_k", json_integer(p->us_layer_k));
                json_object_set_new(o, "probe_rows", json_integer(p->probe_rows));
                json_object_set_new(o, "us_out_1", json_integer(p->us_out_1));
                json_object_set_new(o, "us_out_k", json_integer(p->us_out_k));
                json_object_set_new(o, "rtt_us", json_integer(p->rtt_us));
                json_object_set_new(o, "kv_kib_layer", json_integer(p->kv_kib_layer));
            }
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
        printf("%-24s %-7s %-12s %-14s %-12s %s\n", "NAME", "ROLE", "LAYERS", "HEARTBEAT AGE",
               "MODEL", "KEY BINDS");
        for (int i = 0; i < t.n_peers; i++) {
            const sw_client_peer_t *p = &t.peers[i];
            char layers[32] = "-";
            if (p->standby)
                snprintf(layers, sizeof layers, "auto/%u", p->n_layers);
            else if (p->is_node)
                snprintf(layers, sizeof layers, "%u:%u/%u", p->layer_begin, p->layer_end,
                         p->n_layers);
            /* what the relay's allow-list binds its key to (docs/security.md section 2) */
            const char *binds = p->role_bound ? "name+role" : p->key_bound ? "name" : "-";
            printf("%-24s %-7s %-12s %-14.1f %-12.12s %s\n", p->name, p->role, layers,
                   p->heartbeat_age_ms / 1e3, p->model, binds);
        }
        if (spot_head && spot_rc == 0) {
            printf("spot checks of %s (share %g): %llu sessions checked, %llu rounds compared, "
                   "%llu mismatches\n",
                   spot_head, (double)spot.share, (unsigned long long)spot.sessions_checked,
                   (unsigned long long)spot.rounds_compared, (unsigned long long)spot.mismatches);
            for (int i = 0; i < spot.n_nodes; i++)
                printf("  %-24s %-9s avoided for %u s more\n", spot.nodes[i].name,
                       spot.nodes[i].convicted ? "convicted" : "disputed", spot.nodes[i].avoid_s);
        }
    }
    sw_client_table_clear(&t);
    sw_client_destroy(&cl);
    if (expect && missing[0]) {
        fprintf(stderr, "shardwire status: '%s' is not connected to the relay\n", missing);
        return 1;
    }
    return spot_rc != 0;
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
    json_object_set_new(j, "failovers", json_integer(st->n_failovers));
    json_object_set_new(j, "tree_rounds", json_integer(st->n_tree_rounds));
    json_object_set_new(j, "kv_moves", json_integer(st->n_kv_moves));
    json_object_set_new(j, "prefix_reused", json_integer(st->n_prefix_reused));
    json_object_set_new(j, "ahead_hits", json_integer(st->n_ahead_hits));
    json_object_set_new(j, "ahead_misses", json_integer(st->n_ahead_misses));
    char dg[17];
    snprintf(dg, sizeof dg, "%016llx", (unsigned long long)st->logits_digest);
    json_object_set_new(j, "logits_digest", json_string(dg));
    json_t *tm = json_object();
    if (st->have_head) {
        json_object_set_new(tm, "head_ttft_ms", json_real(st->head_ttft_ms));
        json_object_set_new(tm, "draft_ms", json_real(st->draft_ms));
        json_object_set_new(tm, "draft_ahead_ms", json_real(st->draft_ahead_ms));
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

static const sw_opt_t s_run_opts[] = {
    {"head", O_HEAD, "NAME", "send the request to this head (default: the first one\nserving)"},
    {"timeout-s", O_TIMEOUT, "S",
     "the request's deadline on the cluster (default " SW_STR(SW_REQUEST_DEFAULT_TIMEOUT_S) ")"},
};

static const sw_opt_group_t s_run_groups[] = {
    SW_ARGS_GROUP_REQUEST,
    SW_ARGS_GROUP(NULL, s_run_opts),
    SW_ARGS_GROUP_SAMPLING,
    /* proposer, K, trees, ahead; the models are the head's */
    SW_ARGS_SHARED_TO("speculative decoding", DRAFT, AHEAD),
    SW_ARGS_GROUP_RELAY,
    SW_ARGS_GROUP_SECURITY,
};

static const sw_args_spec_t s_run_spec = {
    .prog = "shardwire run",
    .usage = "--relay HOST:PORT -p TEXT [options] SECURITY",
    .about = "  Generates through a cluster: sends the request to a head via the relay and\n"
             "  streams the text to stdout, then a stats table to stderr. Ctrl-C cancels\n"
             "  the request on the cluster. --draft, --draft-k, --draft-tree and\n"
             "  --draft-ahead choose the head's speculation for this request (left out:\n"
             "  the head's defaults).\n",
    .groups = s_run_groups,
    .n_groups = SW_ARGS_COUNT(s_run_groups),
};

int cmd_run(int argc, char **argv)
{
    const char *P = s_run_spec.prog, *head_name = NULL, *v;
    sw_sec_args_t sargs = {0};
    sw_args_request_t rq = SW_ARGS_REQUEST_DEFAULT;
    sw_sampling_t sp = sw_args_sampling_default();
    sw_args_draft_t dr = SW_ARGS_DRAFT_DEFAULT;
    sw_args_relay_t ra = SW_ARGS_RELAY_DEFAULT;
    int timeout_s = SW_REQUEST_DEFAULT_TIMEOUT_S, c;
    sw_args_t a;
    sw_args_init(&a, &s_run_spec, argc, argv);
    while ((c = sw_args_next(&a, &v)) >= 0) {
        int h = sw_sec_args_opt(&sargs, c, v);
        if (!h)
            h = sw_args_request_opt(P, &rq, c, v);
        if (!h)
            h = sw_args_sampling_opt(P, &sp, c, v);
        if (!h)
            h = sw_args_draft_opt(P, &dr, c, v);
        if (!h)
            h = sw_args_relay_opt(P, &ra, c, v);
        if (!h && c == O_HEAD) {
            head_name = v;
            h = 1;
        }
        if (!h && c == O_TIMEOUT)
            h = sw_arg_int(P, "--timeout-s", v, 1, 86400, &timeout_s) ? -1 : 1;
        if (h <= 0)
            return 2;
    }
    if ((c = sw_args_finish(&a, c, 0)) >= 0)
        return c;
    if (!ra.relay[0] || !rq.prompt)
        return sw_args_exit(sw_args_fail(&s_run_spec, "%s is required",
                                         !ra.relay[0] ? "--relay HOST:PORT" : "-p TEXT"));
    const char *relay = ra.relay;
    const int connect_ms = s_connect_ms(ra.connect_s);
    const int json = rq.json;
    sw_client_request_t q = sw_client_request_default();
    q.prompt = rq.prompt;
    q.chat = rq.chat;
    q.n_predict = rq.n_predict;
    q.temperature = sp.temp;
    q.top_k = sp.top_k;
    q.top_p = sp.top_p;
    q.min_p = sp.min_p;
    q.repeat_penalty = sp.rep_penalty;
    q.repeat_last_n = sp.rep_last_n;
    q.seed = sp.seed;
    q.draft_k = dr.k;         /* -1: the head's K */
    q.draft_tree = dr.tree;   /* 0: the head's --draft-tree */
    q.draft_ahead = dr.ahead; /* -1: the head's --draft-ahead */
    q.timeout_ms = timeout_s * 1000;
    q.draft = !dr.mode                    ? SW_CLIENT_DRAFT_AUTO
              : !strcmp(dr.mode, "none")  ? SW_CLIENT_DRAFT_NONE
              : !strcmp(dr.mode, "model") ? SW_CLIENT_DRAFT_MODEL
              : !strcmp(dr.mode, "ngram") ? SW_CLIENT_DRAFT_NGRAM
                                          : SW_CLIENT_DRAFT_MIX;
    if (dr.k == 0) /* --draft-k 0: off, as everywhere */
        q.draft = SW_CLIENT_DRAFT_NONE;
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
            fflush(stdout); /* the text ends before the table starts, also on one pipe */
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
