/*
 * run.c - `shardwire run`: the client side of a cluster. Joins the relay as
 * a client, sends one GenerateRequest to a head and streams the TokenChunks
 * it answers with.
 *
 *   shardwire run --relay HOST:PORT -p TEXT [-n N] [--chat] [--json] [--head NAME]
 *                 [--timeout-s S] [sampling, drafting, relay options of args.h] SECURITY
 *
 * Started before the relay or the nodes, it keeps trying, one line per
 * attempt, for --connect-timeout-s (default SW_CLIENT_DEFAULT_CONNECT_S; 0 =
 * no limit), until a head and a whole pipeline behind it are connected
 * (connect.c).
 *
 * SECURITY is --key FILE --relay-key FILE|Z85 --access-key FILE (required;
 * or the SW_KEY / SW_RELAY_KEY / SW_ACCESS_KEY environment variables), or
 * --insecure-loopback for a loopback relay without keys (keys.h).
 */
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "client.h"
#include "cmds.h"
#include "keys.h"
#include "log.h"

static volatile sig_atomic_t s_stop;

static void s_on_signal(int sig)
{
    (void)sig;
    s_stop = 1;
}

enum { O_HEAD = SW_OPT_OWN, O_TIMEOUT, O_PROGRESS };

static const sw_opt_t s_opts[] = {
    {"head", O_HEAD, "NAME",
     "send the request to this head (default: the one serving\nthe model; refused, naming them, "
     "when several do)"},
    {"timeout-s", O_TIMEOUT, "S",
     "the request's deadline on the cluster (default " SW_STR(SW_REQUEST_DEFAULT_TIMEOUT_S) ")"},
    {"progress", O_PROGRESS, "on|off",
     "a long prompt's progress on one updating line of stderr\n(default: on when stderr is a "
     "terminal and not --json)"},
};

static const sw_opt_group_t s_groups[] = {
    SW_ARGS_GROUP_REQUEST,
    SW_ARGS_GROUP(NULL, s_opts),
    SW_ARGS_GROUP_SAMPLING,
    /* proposer, K, trees, ahead; the models are the head's */
    SW_ARGS_SHARED_TO("speculative decoding", DRAFT, AHEAD),
    SW_ARGS_GROUP_RELAY,
    SW_ARGS_GROUP_SECURITY,
};

static const sw_args_spec_t s_spec = {
    .prog = "shardwire run",
    .usage = "--relay HOST:PORT -p TEXT [options] SECURITY",
    .about = "  Generates through a cluster: sends the request to a head via the relay and\n"
             "  streams the text to stdout, then a stats table to stderr. Ctrl-C cancels\n"
             "  the request on the cluster. --draft, --draft-k, --draft-tree and\n"
             "  --draft-ahead choose the head's speculation for this request (left out:\n"
             "  the head's defaults). Here --draft-k auto and --draft-tree 0 mean the\n"
             "  head's --draft-k and --draft-tree, which may be fixed, not adaptive K and\n"
             "  chains; --draft-k 0 turns drafting off.\n",
    .groups = s_groups,
    .n_groups = SW_ARGS_COUNT(s_groups),
};

struct s_run_opts {
    sw_sec_args_t sec;     /* the security flags */
    sw_args_relay_t relay; /* --relay, --connect-timeout-s */
    const char *head;      /* --head NAME, or NULL: the one serving (several: refused) */
    int json;              /* --json */
    int progress;          /* --progress: 1 on, 0 off, -1 on a terminal */
    sw_client_request_t q; /* the request (its strings point into argv), checked */
};

/* The request of the parsed options (q.prompt points into rq's). */
static sw_client_request_t s_request(const sw_args_request_t *rq, const sw_sampling_t *sp,
                                     const sw_args_draft_t *dr, int timeout_s)
{
    sw_client_request_t q = sw_client_request_default();
    q.prompt = rq->prompt;
    q.chat = rq->chat;
    q.n_predict = rq->n_predict;
    q.temperature = sp->temp;
    q.top_k = sp->top_k;
    q.top_p = sp->top_p;
    q.min_p = sp->min_p;
    q.repeat_penalty = sp->rep_penalty;
    q.repeat_last_n = sp->rep_last_n;
    q.seed = sp->seed;
    q.draft_k = dr->k;         /* -1: the head's K */
    q.draft_tree = dr->tree;   /* 0: the head's --draft-tree */
    q.draft_ahead = dr->ahead; /* -1: the head's --draft-ahead */
    q.timeout_ms = timeout_s * 1000;
    q.draft = !dr->mode                    ? SW_CLIENT_DRAFT_AUTO
              : !strcmp(dr->mode, "none")  ? SW_CLIENT_DRAFT_NONE
              : !strcmp(dr->mode, "model") ? SW_CLIENT_DRAFT_MODEL
              : !strcmp(dr->mode, "ngram") ? SW_CLIENT_DRAFT_NGRAM
                                           : SW_CLIENT_DRAFT_MIX;
    if (dr->k == 0) /* --draft-k 0: off, as everywhere */
        q.draft = SW_CLIENT_DRAFT_NONE;
    return q;
}

/* -1 when the options are good (o filled), else the exit code: 0 after --help /
 * --version, 2 after a usage error's line (or a request the client library refuses). */
static int s_run_parse(int argc, char **argv, struct s_run_opts *o)
{
    const char *P = s_spec.prog, *v;
    *o = (struct s_run_opts){.relay = SW_ARGS_RELAY_DEFAULT, .progress = -1};
    sw_args_request_t rq = SW_ARGS_REQUEST_DEFAULT;
    sw_sampling_t sp = sw_args_sampling_default();
    sw_args_draft_t dr = SW_ARGS_DRAFT_DEFAULT;
    int timeout_s = SW_REQUEST_DEFAULT_TIMEOUT_S, c;
    sw_args_t a;
    sw_args_init(&a, &s_spec, argc, argv);
    while ((c = sw_args_next(&a, &v)) >= 0) {
        int h = sw_sec_args_opt(&o->sec, c, v);
        if (!h)
            h = sw_args_request_opt(P, &rq, c, v);
        if (!h)
            h = sw_args_sampling_opt(P, &sp, c, v);
        if (!h)
            h = sw_args_draft_opt(P, &dr, c, v);
        if (!h)
            h = sw_args_relay_opt(P, &o->relay, c, v);
        if (!h && c == O_HEAD) {
            o->head = v;
            h = 1;
        }
        if (!h && c == O_PROGRESS) {
            if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0) {
                fprintf(stderr, "%s: --progress '%s' must be on or off\n", P, v);
                return 2;
            }
            o->progress = !strcmp(v, "on");
            h = 1;
        }
        if (!h && c == O_TIMEOUT)
            h = sw_arg_int(P, "--timeout-s", v, 1, SW_REQUEST_MAX_TIMEOUT_S, &timeout_s) ? -1 : 1;
        if (h <= 0)
            return 2;
    }
    if ((c = sw_args_finish(&a, c, 0)) >= 0)
        return c;
    if (!o->relay.relay[0] || !rq.prompt)
        return sw_args_exit(sw_args_fail(&s_spec, "%s is required",
                                         !o->relay.relay[0] ? "--relay HOST:PORT" : "-p TEXT"));
    o->json = rq.json;
    if (o->progress < 0)
        o->progress = !o->json && isatty(STDERR_FILENO);
    o->q = s_request(&rq, &sp, &dr, timeout_s);
    char err[512];
    if (sw_client_request_check(&o->q, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire run: %s\n", err);
        return 2;
    }
    return -1;
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
        json_object_set_new(tm, "overlap_ms", json_real(st->overlap_ms));
        json_t *stages = json_object(), *crit = json_object();
        for (int i = 0; i < st->n_stages; i++) {
            json_object_set_new(stages, st->stages[i].name, json_real(st->stages[i].compute_ms));
            json_object_set_new(crit, st->stages[i].name, json_real(st->stages[i].critical_ms));
        }
        json_object_set_new(tm, "stage_compute_ms", stages);
        json_object_set_new(tm, "stage_critical_ms", crit);
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

/* What a generation sent so far. */
typedef struct s_got {
    json_t *ids; /* the token ids */
    char *text;  /* the text (text_len bytes, NUL after), NULL before any */
    size_t text_len;
    int held_c2; /* the text shown so far ended in a byte that may start a C1 control */
} s_got_t;

/* Takes one event's tokens and text into got, and shows the text (unless json). 0, or -1 when
 * out of memory. */
static int s_take(s_got_t *got, const sw_client_event_t *ev, int json)
{
    for (int i = 0; i < ev->n_tokens; i++)
        json_array_append_new(got->ids, json_integer(ev->tokens[i]));
    if (!ev->text_len)
        return 0;
    char *t = realloc(got->text, got->text_len + ev->text_len + 1);
    if (!t)
        return -1;
    got->text = t;
    memcpy(got->text + got->text_len, ev->text, ev->text_len);
    got->text_len += ev->text_len;
    got->text[got->text_len] = 0;
    if (!json) { /* model text may hold escape sequences: not for the terminal */
        char *shown = malloc(ev->text_len + 2);
        if (shown) {
            size_t n_in = 0;
            if (got->held_c2)
                shown[n_in++] = (char)0xc2;
            memcpy(shown + n_in, ev->text, ev->text_len);
            n_in += ev->text_len;
            fwrite(shown, 1, sw_text_clean(shown, shown, n_in, 1, &got->held_c2), stdout);
            free(shown);
        }
        fflush(stdout);
    }
    return 0;
}

/* The progress line (stderr, rewritten in place): where a long prompt is. shown: 1 while a
 * line is up. */
static void s_progress(const sw_client_event_t *ev, double waited_ms, int *shown)
{
    if (ev->generated > 0 || ev->prompt_total <= 0 || waited_ms < 1000)
        return;
    char line[128];
    snprintf(line, sizeof line,
             "prompt: %d of %d tokens through the head, %d through every stage (%d %%), %.0f s",
             ev->prompt_done, ev->prompt_total, ev->prompt_finished,
             (int)(100.0 * ev->prompt_finished / ev->prompt_total), waited_ms / 1e3);
    fprintf(stderr, "\r%-78s", line);
    fflush(stderr);
    *shown = 1;
}

/* Clears the progress line before anything else goes to the terminal. */
static void s_progress_clear(int *shown)
{
    if (*shown)
        fprintf(stderr, "\r%-78s\r", "");
    *shown = 0;
}

/* Receives request id's events until it ends (or Ctrl-C cancels it), showing the text as it
 * comes and the statistics at the end: the exit code. */
static int s_receive(sw_client_t *cl, const char *id, int json, int progress)
{
    s_got_t got = {.ids = json_array()};
    int exit_code = 1, shown = 0;
    const double t0 = cli_now_ms();
    for (;;) {
        if (s_stop) {
            /* sw_client_cancel tells the head at once, so that the cluster stops
             * working for nobody; no need to wait for its confirmation. */
            (void)sw_client_cancel(cl, id);
            fprintf(stderr, "\nshardwire run: interrupted (the request is cancelled on the "
                            "cluster)\n");
            exit_code = 130;
            break;
        }
        sw_client_event_t ev;
        int r = sw_client_next(cl, &ev, 500);
        if (r == 1)
            continue;
        if (r == 0 && ev.type == SW_CLIENT_EV_PROGRESS) {
            if (progress)
                s_progress(&ev, cli_now_ms() - t0, &shown);
            continue;
        }
        s_progress_clear(&shown);
        if (r < 0) {
            fprintf(stderr, "shardwire run: lost the connection to the relay\n");
            break;
        }
        if (ev.type == SW_CLIENT_EV_ERROR) {
            if (ev.wire_code)
                fprintf(stderr, "shardwire run: %s (%s)\n", ev.message, ev.wire_code_name);
            else
                fprintf(stderr, "shardwire run: %s\n", ev.message);
            break;
        }
        if (s_take(&got, &ev, json) != 0)
            break;
        if (ev.type != SW_CLIENT_EV_DONE)
            continue;
        if (json) {
            s_print_json(got.text, got.text_len, got.ids, ev.stats);
        } else {
            printf("\n");
            fflush(stdout); /* the text ends before the table starts, also on one pipe */
            if (ev.stats->have_head)
                s_print_table(ev.stats);
        }
        exit_code = 0;
        break;
    }
    s_progress_clear(&shown);
    json_decref(got.ids);
    free(got.text);
    return exit_code;
}

/* Joins the relay, waits for a head with a whole pipeline behind it, sends the request and
 * receives its answer: the exit code. */
static int s_run_run(const struct s_run_opts *o)
{
    struct sigaction sa = {0};
    sa.sa_handler = s_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    int exit_code = 1;
    const double t_start = cli_now_ms();
    const int connect_ms = cli_connect_ms(o->relay.connect_s);
    sw_client_t *cl =
        cli_connect("run", &o->sec, o->relay.relay, o->relay.connect_s, &s_stop, 1, &exit_code);
    if (!cl)
        return exit_code;
    char head[SW_CLIENT_NAME_LEN], id[SW_CLIENT_ID_LEN], err[512];
    /* the rest of the connect deadline goes to waiting for the pipeline */
    int wait_ms = connect_ms < 0 ? -1 : connect_ms - (int)(cli_now_ms() - t_start);
    if (sw_client_wait_head(cl, o->head, NULL, wait_ms < 0 && connect_ms >= 0 ? 0 : wait_ms,
                            &s_stop, head, err, sizeof err) != 0 ||
        sw_client_submit(cl, head, &o->q, id, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire run: %s\n", err);
        exit_code = 1;
    } else {
        exit_code = s_receive(cl, id, o->json, o->progress);
    }
    sw_client_destroy(&cl);
    return exit_code;
}

int cmd_run(int argc, char **argv)
{
    struct s_run_opts o;
    const int rc = s_run_parse(argc, argv, &o);
    return rc >= 0 ? rc : s_run_run(&o);
}
