/*
 * args.c - the shared option groups, the parser over a program's option
 * table, --help / --version, and checked values (args.h).
 */
#include "args.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- checked values ------------------------------------------------------------------- */

int sw_arg_int(const char *prog, const char *flag, const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 0);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "%s: %s '%s' is not an integer in [%ld, %ld]\n", prog, flag, s, lo, hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int sw_arg_layers(const char *prog, const char *flag, const char *s, int *a, int *b)
{
    const char *colon = strchr(s, ':');
    char first[32];
    if (!colon || (size_t)(colon - s) >= sizeof first)
        goto bad;
    memcpy(first, s, (size_t)(colon - s));
    first[colon - s] = 0;
    if (sw_arg_int(prog, flag, first, 0, SW_WIRE_MAX_LAYERS, a) != 0)
        return -1;
    if (!strcmp(colon + 1, "end")) {
        *b = -1;
        return 0;
    }
    if (sw_arg_int(prog, flag, colon + 1, 1, SW_WIRE_MAX_LAYERS, b) != 0)
        return -1;
    if (*b > *a)
        return 0;
bad:
    fprintf(stderr, "%s: %s '%s' must be A:B with A < B (e.g. 0:15; B may be 'end')\n", prog, flag,
            s);
    return -1;
}

int sw_arg_u64(const char *prog, const char *flag, const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end || s[0] == '-' || s[0] == '+') {
        fprintf(stderr, "%s: %s '%s' is not an unsigned 64-bit integer\n", prog, flag, s);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

int sw_arg_double(const char *prog, const char *flag, const char *s, double lo, double hi,
                  double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "%s: %s '%s' is not a number in [%g, %g]\n", prog, flag, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int sw_arg_float(const char *prog, const char *flag, const char *s, double lo, double hi,
                 float *out)
{
    double v;
    if (sw_arg_double(prog, flag, s, lo, hi, &v) != 0)
        return -1;
    *out = (float)v;
    return 0;
}

static int s_host_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-' || c == '_';
}

int sw_arg_endpoint(const char *prog, const char *flag, const char *s, int listen, char *out,
                    size_t out_len)
{
    const char *form = listen ? "HOST:PORT or tcp://HOST:PORT, e.g. tcp://0.0.0.0:5555"
                              : "HOST:PORT or tcp://HOST:PORT, e.g. tcp://203.0.113.5:5555";
    const char *why = NULL;
    char detail[160] = "";
    if (!s || !s[0]) {
        fprintf(stderr, "%s: %s is empty: give %s\n", prog, flag, form);
        return -1;
    }
    if (!strncmp(s, "ipc://", 6) || !strncmp(s, "inproc://", 9)) {
        if (strlen(s) >= out_len) {
            fprintf(stderr, "%s: %s '%.64s...' is too long\n", prog, flag, s);
            return -1;
        }
        snprintf(out, out_len, "%s", s);
        return 0;
    }
    const char *rest = s;
    const char *scheme = strstr(s, "://");
    if (scheme) {
        if (scheme - s == 3 && !strncmp(s, "tcp", 3)) {
            rest = scheme + 3;
        } else {
            snprintf(detail, sizeof detail, "'%.*s://' is not a transport shardwire uses",
                     (int)(scheme - s < 16 ? scheme - s : 16), s);
            why = detail;
            goto bad;
        }
    }
    if (strlen(rest) + 7 > out_len || strlen(rest) > 200) {
        why = "is too long";
        goto bad;
    }
    const char *port;
    if (rest[0] == '[') {
        const char *close = strchr(rest, ']');
        if (!close) {
            why = "the IPv6 address has no closing ']'";
            goto bad;
        }
        if (close == rest + 1) {
            why = "the IPv6 address between [ and ] is empty";
            goto bad;
        }
        for (const char *p = rest + 1; p < close; p++)
            if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') ||
                  (*p >= 'A' && *p <= 'F') || *p == ':' || *p == '.')) {
                why = "the IPv6 address holds a character that is not hex, ':' or '.'";
                goto bad;
            }
        if (close[1] != ':') {
            why = close[1] ? "expected ':' and a port after the ']'" : "no port";
            goto bad;
        }
        port = close + 2;
    } else {
        const char *colon = strrchr(rest, ':');
        if (!colon) {
            why = "no port";
            goto bad;
        }
        if (memchr(rest, ':', (size_t)(colon - rest))) {
            why = "an IPv6 address needs brackets: [ADDR]:PORT";
            goto bad;
        }
        if (colon == rest) {
            why = "no host before the port";
            goto bad;
        }
        if (colon - rest == 1 && rest[0] == '*') {
            if (!listen) {
                why = "'*' (every interface) is only for a listening address: give the host "
                      "to connect to";
                goto bad;
            }
        } else {
            for (const char *p = rest; p < colon; p++)
                if (!s_host_char(*p)) {
                    snprintf(detail, sizeof detail,
                             "the host holds '%c', which is not a letter, digit, '.', '-' or '_'",
                             *p);
                    why = detail;
                    goto bad;
                }
        }
        port = colon + 1;
    }
    if (listen && !strcmp(port, "*")) {
        snprintf(out, out_len, "tcp://%s", rest);
        return 0;
    }
    if (!port[0]) {
        why = "no port after the ':'";
        goto bad;
    }
    long v = 0;
    for (const char *p = port; *p; p++) {
        if (*p < '0' || *p > '9' || p - port > 5) {
            snprintf(detail, sizeof detail, "the port '%.16s' is not a number", port);
            why = detail;
            goto bad;
        }
        v = v * 10 + (*p - '0');
    }
    if (v > 65535 || (v == 0 && !listen)) {
        snprintf(detail, sizeof detail, "the port %ld is not in %d..65535", v, listen ? 0 : 1);
        why = detail;
        goto bad;
    }
    snprintf(out, out_len, "tcp://%s", rest);
    return 0;
bad:
    fprintf(stderr, "%s: %s '%s': %s; give %s\n", prog, flag, s, why, form);
    return -1;
}

/* ---- the shared groups ------------------------------------------------------------------ */

/* Each shared table is initialised by its SW_OPTS_* indices (args.h), so
 * that each option sits where its index says; the table's length must be
 * its SW_OPTS_*_N (asserted after it), and sw_args_init asserts that no
 * index in between was left out. The empty comments keep each index on a
 * line of its own. */

const sw_opt_t sw_opts_model[] = {
    [SW_OPTS_MODEL_MODEL] = //
    {"model", SW_OPT_MODEL, "PATH",
     "GGUF model file, or hf:ORG/NAME/FILE (fetched into the\nHugging Face cache; HF_HOME, "
     "HF_TOKEN)"},
    [SW_OPTS_MODEL_BACKEND] = //
    {"backend", SW_OPT_BACKEND, "B",
     "cpu, cuda, cuda:N, or cuda:0,1 to split the layers over\ntwo GPUs (default: cuda when a GPU "
     "is found, else cpu)"},
    [SW_OPTS_MODEL_THREADS] = //
    {"threads", SW_OPT_THREADS, "N", "CPU compute threads (default: every core)"},
    [SW_OPTS_MODEL_CTX] = //
    {"ctx", SW_OPT_CTX, "N",
     "context size in tokens, per session (default: the model's\ntrained context; a node cuts it "
     "to what its --kv-mib\nholds)"},
};
_Static_assert(sizeof sw_opts_model / sizeof sw_opts_model[0] == SW_OPTS_MODEL_N,
               "SW_OPTS_MODEL_* indexes every option");

const sw_opt_t sw_opts_request[] = {
    [SW_OPTS_REQUEST_PROMPT] = //
    {"prompt", SW_OPT_PROMPT, "TEXT", "the prompt"},
    [SW_OPTS_REQUEST_N_PREDICT] = //
    {"n-predict", SW_OPT_NPREDICT, "N",
     "tokens to generate, 1.." SW_STR(SW_REQUEST_MAX_N_PREDICT) //
     " (default " SW_STR(SW_REQUEST_DEFAULT_N_PREDICT) ")"},
    [SW_OPTS_REQUEST_CHAT] = //
    {"chat", SW_OPT_CHAT, NULL, "wrap the prompt in the model's chat template"},
    [SW_OPTS_REQUEST_JSON] = //
    {"json", SW_OPT_JSON, NULL,
     "print one JSON object (text, token ids, timings) at\nthe end instead of streaming the text"},
};
_Static_assert(sizeof sw_opts_request / sizeof sw_opts_request[0] == SW_OPTS_REQUEST_N,
               "SW_OPTS_REQUEST_* indexes every option");

const sw_opt_t sw_opts_sampling[] = {
    [SW_OPTS_SAMPLING_TEMP] = //
    {"temp", SW_OPT_TEMP, "T", "temperature, 0 = greedy (default " SW_STR(SW_SAMPLING_TEMP) ")"},
    [SW_OPTS_SAMPLING_TOP_K] = //
    {"top-k", SW_OPT_TOPK, "K",
     "keep the K most likely tokens, 0 = off (default " SW_STR(SW_SAMPLING_TOP_K) ")"},
    [SW_OPTS_SAMPLING_TOP_P] = //
    {"top-p", SW_OPT_TOPP, "P",
     "nucleus sampling in (0, 1], 1 = off (default " SW_STR(SW_SAMPLING_TOP_P) ")"},
    [SW_OPTS_SAMPLING_MIN_P] = //
    {"min-p", SW_OPT_MINP, "P",
     "drop tokens below P x the best one's probability,\n"
     "0 = off (default " SW_STR(SW_SAMPLING_MIN_P) ")"},
    [SW_OPTS_SAMPLING_REP] = //
    {"repeat-penalty", SW_OPT_REP, "R",
     "repetition penalty, " SW_STR(SW_SAMPLING_REP_OFF) //
     " = off (default " SW_STR(SW_SAMPLING_REP_PENALTY) ")"},
    [SW_OPTS_SAMPLING_REP_LAST_N] = //
    {"repeat-last-n", SW_OPT_REP_N, "N",
     "tokens the penalty looks back over (default " SW_STR(SW_SAMPLING_REP_LAST_N) ")"},
    [SW_OPTS_SAMPLING_SEED] = //
    {"seed", SW_OPT_SEED, "S",
     "sampling seed (default " SW_STR(SW_SAMPLING_SEED) //
     ": the same request gives\nthe same text; another seed, another text)"},
    [SW_OPTS_SAMPLING_GREEDY] = //
    {"greedy", SW_OPT_GREEDY, NULL,
     "plain greedy decoding: --temp 0 --repeat-penalty " SW_STR(SW_SAMPLING_REP_OFF) //
     " (the\nreference output of llama.cpp)"},
};
_Static_assert(sizeof sw_opts_sampling / sizeof sw_opts_sampling[0] == SW_OPTS_SAMPLING_N,
               "SW_OPTS_SAMPLING_* indexes every option");

const sw_opt_t sw_opts_draft[] = {
    [SW_OPTS_DRAFT_MODE] = //
    {"draft", SW_OPT_DRAFT, "MODE",
     "the proposer: model, ngram (prompt lookup), mix (prompt\nlookup, else the model), none, or "
     "auto (default: model\nwhen a draft model is loaded, else none)"},
    [SW_OPTS_DRAFT_K] = //
    {"draft-k", SW_OPT_DRAFT_K, "K", "drafts per round, 0 = off, auto = adaptive (default)"},
    [SW_OPTS_DRAFT_TREE] = //
    {"draft-tree", SW_OPT_DRAFT_TREE, "N",
     "token trees of at most N drafts (default 0 = chains;\nneeds every stage on a backend with "
     "trees)"},
    [SW_OPTS_DRAFT_AHEAD] = //
    {"draft-ahead", SW_OPT_DRAFT_AHEAD, "on|off",
     "draft the next round while one travels (default: on\nat a head, off in generate; for "
     "run, the head's)"},
    [SW_OPTS_DRAFT_MODEL] = //
    {"draft-model", SW_OPT_DRAFT_MODEL, "PATH", "draft model GGUF (the model's vocabulary)"},
    [SW_OPTS_DRAFT_K_MAX] = //
    {"draft-k-max", SW_OPT_DRAFT_KMAX, "N",
     "largest adaptive K (default " SW_STR(SW_DRAFT_DEFAULT_K_MAX) ")"},
    [SW_OPTS_DRAFT_P_MIN] = //
    {"draft-p-min", SW_OPT_DRAFT_PMIN, "P",
     "stop drafting below this draft probability (default 0)"},
    [SW_OPTS_DRAFT_THREADS] = //
    {"draft-threads", SW_OPT_DRAFT_THREADS, "N", "draft model threads (default: as --threads)"},
    [SW_OPTS_DRAFT_BACKEND] = //
    {"draft-backend", SW_OPT_DRAFT_BACKEND, "B",
     "where the draft model runs, e.g. cuda:1 (default: the\nfirst device of --backend)"},
};
_Static_assert(sizeof sw_opts_draft / sizeof sw_opts_draft[0] == SW_OPTS_DRAFT_N,
               "SW_OPTS_DRAFT_* indexes every option");

const sw_opt_t sw_opts_relay[] = {
    [SW_OPTS_RELAY_RELAY] = //
    {"relay", SW_OPT_RELAY, "ENDPOINT[,...]",
     "the relay: HOST:PORT or tcp://HOST:PORT; several relays\n(A,B or the flag again, at "
     "most " SW_STR(SW_PEER_MAX_RELAYS) "): a link to each,\nmessages by the one in use while "
                                        "it is live, else\nthe live one with the lowest round "
                                        "trip"},
    [SW_OPTS_RELAY_CONNECT] = //
    {"connect-timeout-s", SW_OPT_CONNECT, "S",
     "keep trying to reach the relay for S s, one progress\nline while waiting; 0 = no limit "
     "(default: " SW_STR(SW_CLIENT_DEFAULT_CONNECT_S) " for clients,\n0 for a node)"},
};
_Static_assert(sizeof sw_opts_relay / sizeof sw_opts_relay[0] == SW_OPTS_RELAY_N,
               "SW_OPTS_RELAY_* indexes every option");

static const sw_opt_t s_opts_general[] = {
    {"help", SW_OPT_HELP, NULL, "print this help and exit"},
    {"version", SW_OPT_VERSION, NULL, "print the version and exit"},
};

/* ---- the parser ----------------------------------------------------------------------- */

static void s_add(sw_args_t *a, const char *name, int has_arg, int key)
{
    assert(a->n_longs < SW_ARGS_MAX && "too many options: raise SW_ARGS_MAX");
    for (int i = 0; i < a->n_longs; i++)
        assert(strcmp(a->longs[i].name, name) != 0 && a->longs[i].val != key &&
               "an option name or key is used twice");
    a->longs[a->n_longs++] = (struct option){name, has_arg, NULL, key};
    if (key > 0 && key < 128) {
        size_t n = strlen(a->shorts);
        a->shorts[n++] = (char)key;
        if (has_arg)
            a->shorts[n++] = ':';
        a->shorts[n] = 0;
    }
}

static void s_add_opts(sw_args_t *a, const sw_opt_t *o, int n)
{
    for (int i = 0; i < n; i++) {
        assert(o[i].name && o[i].help && "an option without a name: an index left out of a table");
        s_add(a, o[i].name, o[i].arg ? required_argument : no_argument, o[i].key);
    }
}

void sw_args_init(sw_args_t *a, const sw_args_spec_t *spec, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->spec = spec;
    a->argc = argc;
    a->argv = argv;
    a->shorts[0] = ':'; /* a missing value returns ':' */
    for (int g = 0; g < spec->n_groups; g++) {
        const sw_opt_group_t *gr = &spec->groups[g];
        if (gr->opts)
            s_add_opts(a, gr->opts, gr->n);
        for (const struct option *r = gr->raw; r && r->name; r++)
            s_add(a, r->name, r->has_arg, r->val);
    }
    s_add_opts(a, s_opts_general, SW_ARGS_COUNT(s_opts_general));
    a->longs[a->n_longs] = (struct option){0, 0, 0, 0};
    optind = 0; /* glibc: a full reset, also after an earlier parse stopped halfway */
    opterr = 0;
}

int sw_args_fail(const sw_args_spec_t *spec, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s (see '%s --help')\n", spec->prog, msg, spec->prog);
    return SW_ARGS_BAD;
}

/* The option as typed ("--relay" of "--relay=x"), into buf. */
static const char *s_typed(const sw_args_t *a, char *buf, size_t len)
{
    const char *t = optind >= 1 && optind <= a->argc ? a->argv[optind - 1] : "?";
    size_t n = strcspn(t, "=");
    snprintf(buf, len, "%.*s", (int)(n < 64 ? n : 64), t);
    return buf;
}

/* The long names that start with prefix (a typed abbreviation), comma-separated into buf;
 * their count. */
static int s_prefixed(const sw_args_t *a, const char *prefix, char *buf, size_t len)
{
    int n = 0;
    size_t pl = strlen(prefix), used = 0;
    buf[0] = 0;
    for (int i = 0; i < a->n_longs; i++) {
        if (strncmp(a->longs[i].name, prefix, pl) != 0)
            continue;
        int w = snprintf(buf + used, len - used, "%s--%s", n ? ", " : "", a->longs[i].name);
        if (w > 0 && (size_t)w < len - used)
            used += (size_t)w;
        n++;
    }
    return n;
}

int sw_args_next(sw_args_t *a, const char **val)
{
    char typed[80], names[256];
    *val = NULL;
    if (a->argc < 2) {
        sw_args_usage(a->spec, stderr);
        return SW_ARGS_BAD;
    }
    int c = getopt_long(a->argc, a->argv, a->shorts, a->longs, NULL);
    switch (c) {
    case -1:
        a->first_arg = optind;
        return SW_ARGS_END;
    case ':':
        return sw_args_fail(a->spec, "option '%s' needs a value", s_typed(a, typed, sizeof typed));
    case '?':
        if (optopt > 0 && optopt < 128 && !strchr(a->shorts + 1, optopt))
            return sw_args_fail(a->spec, "unknown option '-%c'", optopt);
        s_typed(a, typed, sizeof typed);
        if (optopt != 0)
            return sw_args_fail(a->spec, "option '%s' takes no value", typed);
        if (!strncmp(typed, "--", 2) && typed[2] &&
            s_prefixed(a, typed + 2, names, sizeof names) > 1)
            return sw_args_fail(a->spec, "option '%s' is ambiguous: %s", typed, names);
        return sw_args_fail(a->spec, "unknown option '%s'", typed);
    case SW_OPT_HELP:
        sw_args_usage(a->spec, stdout);
        return SW_ARGS_QUIT;
    case SW_OPT_VERSION: {
        size_t n = strcspn(a->spec->prog, " ");
        printf("%.*s %s\n", (int)n, a->spec->prog, sw_version());
        return SW_ARGS_QUIT;
    }
    default:
        *val = optarg;
        return c;
    }
}

int sw_args_exit(int rc)
{
    return rc == SW_ARGS_QUIT ? 0 : 2;
}

int sw_args_finish(const sw_args_t *a, int c, int max_operands)
{
    if (c != SW_ARGS_END)
        return sw_args_exit(c);
    if (a->argc - a->first_arg > max_operands)
        return sw_args_exit(sw_args_fail(a->spec, "unexpected argument '%s'",
                                         a->argv[a->first_arg + max_operands]));
    return -1;
}

#define S_HELP_COL 25 /* where the help text of an option starts */

static void s_usage_opts(FILE *f, const sw_opt_t *o, int n)
{
    for (int i = 0; i < n; i++) {
        char left[96];
        if (o[i].key > 0 && o[i].key < 128)
            snprintf(left, sizeof left, "  -%c, --%s%s%s", o[i].key, o[i].name, o[i].arg ? " " : "",
                     o[i].arg ? o[i].arg : "");
        else
            snprintf(left, sizeof left, "      --%s%s%s", o[i].name, o[i].arg ? " " : "",
                     o[i].arg ? o[i].arg : "");
        if (strlen(left) + 1 >= S_HELP_COL)
            fprintf(f, "%s\n%*s", left, S_HELP_COL, "");
        else
            fprintf(f, "%-*s", S_HELP_COL, left);
        for (const char *h = o[i].help; *h;) {
            size_t len = strcspn(h, "\n");
            fprintf(f, "%.*s\n", (int)len, h);
            h += len;
            if (*h == '\n' && *++h)
                fprintf(f, "%*s", S_HELP_COL, "");
        }
    }
}

void sw_args_usage(const sw_args_spec_t *spec, FILE *f)
{
    fprintf(f, "usage: %s %s\n", spec->prog, spec->usage);
    if (spec->about)
        fprintf(f, "%s", spec->about);
    for (int g = 0; g < spec->n_groups; g++) {
        const sw_opt_group_t *gr = &spec->groups[g];
        fprintf(f, "\n%s:\n", gr->title ? gr->title : "options");
        if (gr->opts)
            s_usage_opts(f, gr->opts, gr->n);
        if (gr->raw_help)
            fprintf(f, "%s", gr->raw_help);
    }
    fprintf(f, "\ngeneral:\n");
    s_usage_opts(f, s_opts_general, SW_ARGS_COUNT(s_opts_general));
    if (spec->footer)
        fprintf(f, "\n%s", spec->footer);
}

/* ---- the groups' handlers --------------------------------------------------------------- */

int sw_args_model_opt(const char *prog, sw_args_model_t *m, int key, const char *val)
{
    switch (key) {
    case SW_OPT_MODEL:
        m->model = val;
        return 1;
    case SW_OPT_BACKEND:
        m->backend = val;
        return 1;
    case SW_OPT_THREADS:
        return sw_arg_int(prog, "--threads", val, 1, 512, &m->threads) ? -1 : 1;
    case SW_OPT_CTX:
        return sw_arg_int(prog, "--ctx", val, 16, 1 << 24, &m->n_ctx) ? -1 : 1;
    default:
        return 0;
    }
}

int sw_args_request_opt(const char *prog, sw_args_request_t *r, int key, const char *val)
{
    switch (key) {
    case SW_OPT_PROMPT:
        if (!val[0]) {
            fprintf(stderr, "%s: -p: the prompt is empty: give some text, e.g. -p \"Hello\"\n",
                    prog);
            return -1;
        }
        r->prompt = val;
        return 1;
    case SW_OPT_NPREDICT:
        return sw_arg_int(prog, "-n", val, 1, SW_REQUEST_MAX_N_PREDICT, &r->n_predict) ? -1 : 1;
    case SW_OPT_CHAT:
        r->chat = 1;
        return 1;
    case SW_OPT_JSON:
        r->json = 1;
        return 1;
    default:
        return 0;
    }
}

sw_sampling_t sw_args_sampling_default(void)
{
    sw_sampling_t s = sw_sampling_default(); /* the engine's preset: the penalty off */
    s.rep_penalty = (float)SW_SAMPLING_REP_PENALTY;
    return s;
}

int sw_args_sampling_opt(const char *prog, sw_sampling_t *s, int key, const char *val)
{
    switch (key) {
    case SW_OPT_TEMP:
        return sw_arg_float(prog, "--temp", val, 0, SW_SAMPLING_MAX_TEMP, &s->temp) ? -1 : 1;
    case SW_OPT_TOPK:
        return sw_arg_int(prog, "--top-k", val, 0, SW_SAMPLING_MAX_TOP_K, &s->top_k) ? -1 : 1;
    case SW_OPT_TOPP:
        if (sw_arg_float(prog, "--top-p", val, 0, 1, &s->top_p) != 0)
            return -1;
        if (s->top_p <= 0) {
            fprintf(stderr, "%s: --top-p '%s' must be above 0 (1 = off; --greedy for greedy)\n",
                    prog, val);
            return -1;
        }
        return 1;
    case SW_OPT_MINP:
        return sw_arg_float(prog, "--min-p", val, 0, SW_SAMPLING_MAX_MIN_P, &s->min_p) ? -1 : 1;
    case SW_OPT_REP:
        return sw_arg_float(prog, "--repeat-penalty", val, SW_SAMPLING_MIN_REP_PENALTY,
                            SW_SAMPLING_MAX_REP_PENALTY, &s->rep_penalty)
                   ? -1
                   : 1;
    case SW_OPT_REP_N:
        if (sw_arg_int(prog, "--repeat-last-n", val, 1, SW_SAMPLING_MAX_LAST_N, &s->rep_last_n))
            return -1;
        return 1;
    case SW_OPT_SEED:
        return sw_arg_u64(prog, "--seed", val, &s->seed) ? -1 : 1;
    case SW_OPT_GREEDY:
        s->temp = 0;
        s->rep_penalty = SW_SAMPLING_REP_OFF;
        return 1;
    default:
        return 0;
    }
}

int sw_args_draft_opt(const char *prog, sw_args_draft_t *d, int key, const char *val)
{
    static const char *const modes[] = {"auto", "model", "ngram", "mix", "none"};
    switch (key) {
    case SW_OPT_DRAFT:
        for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
            if (!strcmp(val, modes[i])) {
                d->mode = i == 0 ? NULL : modes[i];
                return 1;
            }
        fprintf(stderr, "%s: --draft '%s' must be model, ngram, mix, none or auto\n", prog, val);
        return -1;
    case SW_OPT_DRAFT_K:
        if (!strcmp(val, "auto")) {
            d->k = -1;
            return 1;
        }
        return sw_arg_int(prog, "--draft-k", val, 0, SW_MAX_DRAFT, &d->k) ? -1 : 1;
    case SW_OPT_DRAFT_MODEL:
        d->model = val;
        return 1;
    case SW_OPT_DRAFT_KMAX:
        return sw_arg_int(prog, "--draft-k-max", val, 1, SW_MAX_DRAFT, &d->k_max) ? -1 : 1;
    case SW_OPT_DRAFT_PMIN:
        return sw_arg_float(prog, "--draft-p-min", val, 0, 1, &d->p_min) ? -1 : 1;
    case SW_OPT_DRAFT_THREADS:
        return sw_arg_int(prog, "--draft-threads", val, 1, 512, &d->threads) ? -1 : 1;
    case SW_OPT_DRAFT_BACKEND:
        d->backend = val;
        return 1;
    case SW_OPT_DRAFT_TREE:
        return sw_arg_int(prog, "--draft-tree", val, 0, SW_MAX_DRAFT, &d->tree) ? -1 : 1;
    case SW_OPT_DRAFT_AHEAD:
        if (!strcmp(val, "on") || !strcmp(val, "off")) {
            d->ahead = !strcmp(val, "on");
            return 1;
        }
        fprintf(stderr, "%s: --draft-ahead '%s' must be on or off\n", prog, val);
        return -1;
    default:
        return 0;
    }
}

int sw_args_draft_check(const sw_args_spec_t *spec, const sw_args_draft_t *d)
{
    if (d->mode && (!strcmp(d->mode, "model") || !strcmp(d->mode, "mix")) && !d->model) {
        sw_args_fail(spec, "--draft %s needs --draft-model", d->mode);
        return -1;
    }
    return 0;
}

int sw_args_relay_opt(const char *prog, sw_args_relay_t *r, int key, const char *val)
{
    switch (key) {
    case SW_OPT_RELAY:
        return sw_arg_relays(prog, val, r->relay, sizeof r->relay) ? -1 : 1;
    case SW_OPT_CONNECT:
        return sw_arg_int(prog, "--connect-timeout-s", val, 0, 86400 * 24, &r->connect_s) ? -1 : 1;
    default:
        return 0;
    }
}

int sw_relay_at(const char *list, int i, char *out, size_t out_len)
{
    int n = 0;
    for (const char *at = list; at && *at;) {
        const char *end = strchr(at, ',');
        const size_t len = end ? (size_t)(end - at) : strlen(at);
        if (n == i && out && out_len) {
            snprintf(out, out_len, "%.*s", (int)len, at);
            return i;
        }
        n++;
        at = end ? end + 1 : at + len;
    }
    if (out && out_len)
        out[0] = 0;
    return n;
}

int sw_arg_relays(const char *prog, const char *s, char *out, size_t out_len)
{
    char one[SW_ARGS_ENDPOINT_MAX], ep[SW_ARGS_ENDPOINT_MAX];
    int have = out[0] ? sw_relay_at(out, 1 << 30, NULL, 0) : 0; /* a repeated --relay appends */
    if (!s || !s[0])
        return sw_arg_endpoint(prog, "--relay", s, 0, ep, sizeof ep);
    for (const char *at = s;;) {
        const char *end = strchr(at, ',');
        const size_t len = end ? (size_t)(end - at) : strlen(at);
        if (len >= sizeof one) {
            fprintf(stderr, "%s: --relay '%.64s...' is too long\n", prog, at);
            return -1;
        }
        snprintf(one, sizeof one, "%.*s", (int)len, at);
        if (sw_arg_endpoint(prog, "--relay", one, 0, ep, sizeof ep) != 0)
            return -1;
        for (int i = 0; i < have; i++) {
            char prev[SW_ARGS_ENDPOINT_MAX];
            sw_relay_at(out, i, prev, sizeof prev);
            if (!strcmp(prev, ep)) {
                fprintf(stderr, "%s: --relay names %s twice: give each relay once\n", prog, ep);
                return -1;
            }
        }
        if (have == SW_PEER_MAX_RELAYS) {
            fprintf(stderr,
                    "%s: --relay: more than %d relays (SW_PEER_MAX_RELAYS): a process keeps a "
                    "link to at most that many\n",
                    prog, SW_PEER_MAX_RELAYS);
            return -1;
        }
        const size_t used = strlen(out);
        if (used + strlen(ep) + 2 > out_len) {
            fprintf(stderr, "%s: --relay: the list is too long\n", prog);
            return -1;
        }
        snprintf(out + used, out_len - used, "%s%s", have ? "," : "", ep);
        have++;
        if (!end)
            return 0;
        at = end + 1;
    }
}
