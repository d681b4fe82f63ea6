/*
 * openai.c - OpenAI-compatible request parsing and response bodies
 * (openai.h, docs/api.md).
 */
#include "openai.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

/* Writes one line into err, sets *param and returns -1. */
static int s_bad(char *err, size_t err_len, const char **param, const char *p, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int s_bad(char *err, size_t err_len, const char **param, const char *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
    *param = p;
    return -1;
}

/*
 * A number field: absent or null leaves *out alone (0); present must be a
 * finite number in [lo, hi] (1 = set), else -1 with the error.
 */
static int s_num(json_t *o, const char *key, double lo, double hi, double *out, char *err,
                 size_t err_len, const char **param)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return s_bad(err, err_len, param, key, "'%s' must be a number", key);
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi)
        return s_bad(err, err_len, param, key, "'%s' is %g; it must be in [%g, %g]", key, d, lo,
                     hi);
    *out = d;
    return 1;
}

/* An integer field, as s_num. */
static int s_int(json_t *o, const char *key, long long lo, long long hi, long long *out, char *err,
                 size_t err_len, const char **param)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return s_bad(err, err_len, param, key, "'%s' must be an integer", key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return s_bad(err, err_len, param, key, "'%s' is %lld; it must be in [%lld, %lld]", key, x,
                     lo, hi);
    *out = x;
    return 1;
}

/* A boolean field: 0 absent/null/false, 1 true, -1 not a boolean. */
static int s_bool(json_t *o, const char *key, char *err, size_t err_len, const char **param)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return s_bad(err, err_len, param, key, "'%s' must be true or false", key);
    return json_is_true(v);
}

/* A message's content: a string, null, or an array of {"type": "text", "text": ...} parts. */
static int s_content(gw_req_t *r, json_t *c, int i, const char **out, char *err, size_t err_len,
                     const char **param)
{
    if (!c || json_is_null(c)) {
        *out = "";
        return 0;
    }
    if (json_is_string(c)) {
        *out = json_string_value(c);
        return 0;
    }
    if (!json_is_array(c))
        return s_bad(err, err_len, param, "messages",
                     "messages[%d].content must be a string or "
                     "an array of text parts",
                     i);
    size_t total = 0, k;
    json_t *part;
    json_array_foreach(c, k, part)
    {
        const char *type = json_string_value(json_object_get(part, "type"));
        const char *text = json_string_value(json_object_get(part, "text"));
        if (!json_is_object(part) || !type || strcmp(type, "text") != 0 || !text)
            return s_bad(err, err_len, param, "messages",
                         "messages[%d].content[%zu]: only {\"type\": \"text\", \"text\": ...} "
                         "parts are supported",
                         i, k);
        total += strlen(text);
    }
    char *joined = malloc(total + 1);
    if (!joined) {
        s_bad(err, err_len, param, NULL, "out of memory for messages[%d].content", i);
        return -2;
    }
    size_t at = 0;
    json_array_foreach(c, k, part)
    {
        const char *text = json_string_value(json_object_get(part, "text"));
        memcpy(joined + at, text, strlen(text));
        at += strlen(text);
    }
    joined[at] = 0;
    r->owned[r->n_owned++] = joined;
    *out = joined;
    return 0;
}

static int s_messages(gw_req_t *r, json_t *root, char *err, size_t err_len, const char **param)
{
    json_t *m = json_object_get(root, "messages");
    if (!json_is_array(m) || json_array_size(m) == 0)
        return s_bad(err, err_len, param, "messages",
                     "'messages' must be a non-empty array of {\"role\", \"content\"} objects");
    if (json_array_size(m) > SW_CLIENT_MAX_MESSAGES)
        return s_bad(err, err_len, param, "messages", "at most %d messages are allowed",
                     SW_CLIENT_MAX_MESSAGES);
    size_t i;
    json_t *msg;
    json_array_foreach(m, i, msg)
    {
        const char *role = json_string_value(json_object_get(msg, "role"));
        if (!json_is_object(msg) || !role)
            return s_bad(err, err_len, param, "messages",
                         "messages[%zu] must be an object with a string 'role'", i);
        if (!strcmp(role, "developer"))
            role = "system"; /* OpenAI's newer name for the system turn */
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") &&
            strcmp(role, "tool"))
            return s_bad(err, err_len, param, "messages",
                         "messages[%zu].role '%.32s' must be system, developer, user, assistant "
                         "or tool",
                         i, role);
        r->msgs[i].role = role;
        const int crc = s_content(r, json_object_get(msg, "content"), (int)i, &r->msgs[i].content,
                                  err, err_len, param);
        if (crc != 0)
            return crc; /* -1, or -2: out of memory */
    }
    r->q.messages = r->msgs;
    r->q.n_messages = (int)json_array_size(m);
    return 0;
}

static int s_prompt(gw_req_t *r, json_t *root, char *err, size_t err_len, const char **param)
{
    json_t *p = json_object_get(root, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
        p = json_array_get(p, 0);
    if (json_is_array(p) && json_array_size(p) > 0 && json_is_integer(json_array_get(p, 0)))
        return s_bad(err, err_len, param, "prompt",
                     "token-id prompts are not supported: send the prompt as text");
    if (!json_is_string(p))
        return s_bad(err, err_len, param, "prompt",
                     "'prompt' must be a string (or an array holding one string)");
    if (json_string_length(p) == 0)
        return s_bad(err, err_len, param, "prompt", "'prompt' is empty");
    r->q.prompt = json_string_value(p);
    return 0;
}

static int s_stop(gw_req_t *r, json_t *root, char *err, size_t err_len, const char **param)
{
    json_t *s = json_object_get(root, "stop");
    if (!s || json_is_null(s))
        return 0;
    json_t *one[1] = {s};
    size_t n = 1;
    if (json_is_array(s))
        n = json_array_size(s);
    else if (!json_is_string(s))
        return s_bad(err, err_len, param, "stop", "'stop' must be a string or an array of strings");
    if (n > SW_CLIENT_MAX_STOP)
        return s_bad(err, err_len, param, "stop", "at most %d stop strings are allowed",
                     SW_CLIENT_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_is_array(s) ? json_array_get(s, i) : one[0];
        if (!json_is_string(v) || json_string_length(v) < 1 ||
            json_string_length(v) > SW_CLIENT_MAX_STOP_LEN)
            return s_bad(err, err_len, param, "stop", "each stop string must be 1..%d bytes",
                         SW_CLIENT_MAX_STOP_LEN);
        r->stop[i] = json_string_value(v);
    }
    r->q.stop = r->stop;
    r->q.n_stop = (int)n;
    return 0;
}

/* Fields the gateway cannot honour: refused rather than silently ignored. */
static int s_unsupported(json_t *root, char *err, size_t err_len, const char **param)
{
    json_t *v;
    if ((v = json_object_get(root, "logprobs")) && !json_is_null(v) && !json_is_false(v) &&
        !(json_is_integer(v) && json_integer_value(v) == 0) &&
        !(json_is_real(v) && json_real_value(v) == 0.0))
        return s_bad(err, err_len, param, "logprobs", "'logprobs' is not supported");
    if ((v = json_object_get(root, "top_logprobs")) && !json_is_null(v))
        return s_bad(err, err_len, param, "top_logprobs", "'top_logprobs' is not supported");
    if ((v = json_object_get(root, "echo")) && !json_is_null(v) && !json_is_false(v))
        return s_bad(err, err_len, param, "echo", "'echo' is not supported");
    if ((v = json_object_get(root, "best_of")) && !json_is_null(v) &&
        !(json_is_integer(v) && json_integer_value(v) == 1))
        return s_bad(err, err_len, param, "best_of", "only best_of = 1 is supported");
    if ((v = json_object_get(root, "suffix")) && !json_is_null(v) &&
        !(json_is_string(v) && json_string_length(v) == 0))
        return s_bad(err, err_len, param, "suffix", "'suffix' is not supported");
    /* anything but null or an empty array asks for tools (an object is not an empty list) */
    static const char *const tool_fields[] = {"tools", "functions"};
    for (int f = 0; f < 2; f++)
        if ((v = json_object_get(root, tool_fields[f])) && !json_is_null(v) &&
            !(json_is_array(v) && json_array_size(v) == 0))
            return s_bad(err, err_len, param, tool_fields[f],
                         "tool and function calls are not supported");
    /* anything but null or an empty object asks for a bias (an array is not an empty map) */
    if ((v = json_object_get(root, "logit_bias")) && !json_is_null(v) &&
        !(json_is_object(v) && json_object_size(v) == 0))
        return s_bad(err, err_len, param, "logit_bias", "'logit_bias' is not supported");
    if ((v = json_object_get(root, "response_format")) && !json_is_null(v)) {
        const char *t = json_string_value(json_object_get(v, "type"));
        if (!t || strcmp(t, "text") != 0)
            return s_bad(err, err_len, param, "response_format",
                         "only response_format {\"type\": \"text\"} is supported");
    }
    long long n = 1;
    if (s_int(root, "n", 1, 1, &n, err, err_len, param) < 0) {
        snprintf(err, err_len, "only n = 1 is supported");
        return -1;
    }
    /* OpenAI's additive penalties: 0 (their default) changes nothing; another
     * value is refused, since the engine has only the multiplicative
     * repetition penalty of llama.cpp (repeat_penalty), which is not the same
     * function of the logits, and a silent substitute would change the text. */
    static const char *additive[] = {"frequency_penalty", "presence_penalty"};
    for (size_t k = 0; k < sizeof additive / sizeof additive[0]; k++) {
        double pen = 0;
        if (s_num(root, additive[k], -2, 2, &pen, err, err_len, param) < 0)
            return -1;
        if (pen != 0)
            return s_bad(err, err_len, param, additive[k],
                         "'%s' other than 0 is not supported: shardwire's repetition penalty is "
                         "llama.cpp's multiplicative one, asked for with \"repeat_penalty\": "
                         "R (e.g. 1.1; 1 = off)",
                         additive[k]);
    }
    return 0;
}

/* The "shardwire" extension object. */
static int s_extension(gw_req_t *r, json_t *root, char *err, size_t err_len, const char **param)
{
    json_t *x = json_object_get(root, "shardwire");
    if (!x || json_is_null(x))
        return 0;
    if (!json_is_object(x))
        return s_bad(err, err_len, param, "shardwire", "'shardwire' must be an object");
    static const char *known[] = {"draft", "draft_k",  "draft_tree",     "draft_ahead",
                                  "top_k", "min_p",    "repeat_penalty", "repeat_last_n",
                                  "head",  "timeout_s"};
    const char *key;
    json_t *v;
    json_object_foreach(x, key, v)
    {
        size_t k = 0;
        while (k < sizeof known / sizeof known[0] && strcmp(key, known[k]))
            k++;
        if (k == sizeof known / sizeof known[0])
            return s_bad(err, err_len, param, "shardwire",
                         "unknown field 'shardwire.%.40s' (known: draft, draft_k, draft_tree, "
                         "draft_ahead, top_k, min_p, repeat_penalty, repeat_last_n, head, "
                         "timeout_s)",
                         key);
    }
    if ((v = json_object_get(x, "draft")) && !json_is_null(v)) {
        const char *d = json_string_value(v);
        if (d && !strcmp(d, "auto"))
            r->q.draft = SW_CLIENT_DRAFT_AUTO;
        else if (d && !strcmp(d, "none"))
            r->q.draft = SW_CLIENT_DRAFT_NONE;
        else if (d && !strcmp(d, "model"))
            r->q.draft = SW_CLIENT_DRAFT_MODEL;
        else if (d && !strcmp(d, "ngram"))
            r->q.draft = SW_CLIENT_DRAFT_NGRAM;
        else if (d && !strcmp(d, "mix"))
            r->q.draft = SW_CLIENT_DRAFT_MIX;
        else
            return s_bad(err, err_len, param, "shardwire.draft",
                         "'shardwire.draft' must be auto, none, model, ngram or mix");
    }
    if ((v = json_object_get(x, "head")) && !json_is_null(v)) {
        if (!json_is_string(v) || json_string_length(v) < 1 ||
            json_string_length(v) > SW_CLIENT_NAME_LEN - 1)
            return s_bad(err, err_len, param, "shardwire.head",
                         "'shardwire.head' must be a peer name");
        r->head = json_string_value(v);
    }
    long long i;
    double d;
    int rc;
    if ((rc = s_int(x, "draft_k", 0, SW_CLIENT_MAX_DRAFT, &i, err, err_len, param)) < 0)
        return -1;
    if (rc)
        r->q.draft_k = (int)i;
    if ((rc = s_int(x, "draft_tree", 0, SW_CLIENT_MAX_DRAFT, &i, err, err_len, param)) < 0)
        return -1;
    if (rc)
        r->q.draft_tree = (int)i;
    if ((v = json_object_get(x, "draft_ahead")) && !json_is_null(v)) {
        if (!json_is_boolean(v))
            return s_bad(
                err, err_len, param, "shardwire.draft_ahead",
                "'shardwire.draft_ahead' must be true, false or null (the head's default)");
        r->q.draft_ahead = json_is_true(v);
    }
    if ((rc = s_int(x, "top_k", 0, SW_SAMPLING_MAX_TOP_K, &i, err, err_len, param)) < 0)
        return -1;
    if (rc)
        r->q.top_k = (int)i;
    if ((rc = s_int(x, "repeat_last_n", 0, SW_SAMPLING_MAX_LAST_N, &i, err, err_len, param)) < 0)
        return -1;
    if (rc)
        r->q.repeat_last_n = (int)i;
    if ((rc = s_num(x, "min_p", 0, SW_SAMPLING_MAX_MIN_P, &d, err, err_len, param)) < 0)
        return -1;
    if (rc)
        r->q.min_p = (float)d;
    if ((rc = s_num(x, "repeat_penalty", SW_SAMPLING_MIN_REP_PENALTY, SW_SAMPLING_MAX_REP_PENALTY,
                    &d, err, err_len, param)) < 0)
        return -1;
    if (rc)
        r->q.repeat_penalty = (float)d;
    if ((rc = s_num(x, "timeout_s", 1, SW_REQUEST_MAX_TIMEOUT_S, &d, err, err_len, param)) < 0)
        return -1;
    if (rc)
        r->q.timeout_ms = (int)(d * 1000);
    return 0;
}

int gw_req_parse(gw_req_t *r, const char *body, size_t len, int chat, const gw_defaults_t *def,
                 char *err, size_t err_len, const char **param)
{
    memset(r, 0, sizeof *r);
    *param = NULL;
    r->chat = chat;
    r->q = sw_client_request_default();
    r->q.n_predict = def->max_tokens;
    r->q.temperature = def->temperature;
    r->q.top_p = def->top_p;
    r->q.top_k = def->top_k;
    r->q.min_p = def->min_p;
    r->q.repeat_penalty = def->repeat_penalty;
    r->q.timeout_ms = def->timeout_ms;
    json_error_t je;
    r->root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!r->root)
        return s_bad(err, err_len, param, NULL,
                     "the body is not valid JSON (%.120s at line %d, column %d)", je.text, je.line,
                     je.column);
    json_t *root = r->root;
    if (!json_is_object(root))
        return s_bad(err, err_len, param, NULL, "the body must be a JSON object");
    json_t *m = json_object_get(root, "model");
    if (!json_is_string(m) || json_string_length(m) == 0)
        return s_bad(err, err_len, param, "model",
                     "'model' is required: one of the ids GET /v1/models lists");
    r->model = json_string_value(m);
    const int brc =
        chat ? s_messages(r, root, err, err_len, param) : s_prompt(r, root, err, err_len, param);
    if (brc != 0)
        return brc;
    long long i = 0;
    double d = 0;
    int rc;
    if ((rc = s_int(root, "max_tokens", 1, SW_REQUEST_MAX_N_PREDICT, &i, err, err_len, param)) < 0)
        return -1;
    if (rc)
        r->q.n_predict = (int)i;
    if ((rc = s_int(root, "max_completion_tokens", 1, SW_REQUEST_MAX_N_PREDICT, &i, err, err_len,
                    param)) < 0)
        return -1;
    if (rc)
        r->q.n_predict = (int)i;
    if ((rc = s_num(root, "temperature", 0, GW_MAX_TEMPERATURE, &d, err, err_len, param)) < 0)
        return -1;
    if (rc)
        r->q.temperature = (float)d;
    /* llama.cpp's server's name for the penalty; shardwire.repeat_penalty too (it wins) */
    if ((rc = s_num(root, "repeat_penalty", SW_SAMPLING_MIN_REP_PENALTY,
                    SW_SAMPLING_MAX_REP_PENALTY, &d, err, err_len, param)) < 0)
        return -1;
    if (rc)
        r->q.repeat_penalty = (float)d;
    if ((rc = s_num(root, "top_p", 0, 1, &d, err, err_len, param)) < 0)
        return -1;
    if (rc && d == 0) {
        r->q.temperature = 0; /* top_p 0 keeps only the most likely token */
        r->q.top_p = 1;
    } else if (rc) {
        r->q.top_p = (float)d;
    }
    if ((rc = s_int(root, "seed", -0x7fffffffffffffffLL, 0x7fffffffffffffffLL, &i, err, err_len,
                    param)) < 0)
        return -1;
    if (rc)
        r->q.seed = (uint64_t)i;
    else
        randombytes_buf(&r->q.seed, sizeof r->q.seed); /* like OpenAI: unseeded varies */
    if ((r->stream = s_bool(root, "stream", err, err_len, param)) < 0)
        return -1;
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return s_bad(err, err_len, param, "stream_options",
                         "'stream_options' must be an object");
        if (!r->stream)
            return s_bad(err, err_len, param, "stream_options",
                         "'stream_options' is only allowed with \"stream\": true");
        if ((r->include_usage = s_bool(so, "include_usage", err, err_len, param)) < 0)
            return -1;
    }
    if (s_stop(r, root, err, err_len, param) != 0 ||
        s_unsupported(root, err, err_len, param) != 0 ||
        s_extension(r, root, err, err_len, param) != 0)
        return -1;
    if (sw_client_request_check(&r->q, err, err_len) != 0) {
        *param = NULL;
        return -1;
    }
    return 0;
}

void gw_req_clear(gw_req_t *r)
{
    for (int i = 0; i < r->n_owned; i++)
        free(r->owned[i]);
    json_decref(r->root);
    memset(r, 0, sizeof *r);
}

const char *gw_finish_reason(int finish)
{
    return finish == SW_CLIENT_FINISH_LENGTH || finish == SW_CLIENT_FINISH_DEADLINE ? "length"
                                                                                    : "stop";
}

/* Serializes and frees j. */
static char *s_dump(json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

json_t *gw_json_stats(const sw_client_stats_t *st)
{
    json_t *x = json_object();
    json_object_set_new(x, "ttft_ms", json_real(st->ttft_ms));
    json_object_set_new(x, "total_ms", json_real(st->total_ms));
    json_object_set_new(x, "rounds", json_integer(st->n_rounds));
    json_object_set_new(x, "drafted", json_integer(st->n_drafted));
    json_object_set_new(x, "accepted", json_integer(st->n_accepted));
    json_object_set_new(x, "decode_tok_s",
                        json_real(st->decode_ms > 0 && st->n_generated > 1
                                      ? (st->n_generated - 1) * 1e3 / st->decode_ms
                                      : 0));
    json_object_set_new(x, "network_ms", json_real(st->network_ms));
    json_object_set_new(x, "tree_rounds", json_integer(st->n_tree_rounds));
    json_object_set_new(x, "ahead_hits", json_integer(st->n_ahead_hits));
    json_object_set_new(x, "ahead_misses", json_integer(st->n_ahead_misses));
    json_object_set_new(x, "draft_ahead_ms", json_real(st->draft_ahead_ms));
    json_object_set_new(x, "prefix_reused", json_integer(st->n_prefix_reused));
    return x;
}

static json_t *s_usage(const sw_client_stats_t *st)
{
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(st->n_prompt));
    json_object_set_new(u, "completion_tokens", json_integer(st->n_generated));
    json_object_set_new(u, "total_tokens", json_integer(st->n_prompt + st->n_generated));
    return u;
}

static json_t *s_head(const gw_req_t *r, const char *id, long long created, const char *object)
{
    json_t *j = json_object();
    json_object_set_new(j, "id", json_string(id));
    json_object_set_new(j, "object", json_string(object));
    json_object_set_new(j, "created", json_integer(created));
    json_object_set_new(j, "model", json_string(r->model));
    return j;
}

char *gw_json_completion(const gw_req_t *r, const char *id, long long created, const char *text,
                         size_t text_len, int finish, const sw_client_stats_t *st)
{
    json_t *j = s_head(r, id, created, r->chat ? "chat.completion" : "text_completion");
    json_t *c = json_object();
    json_object_set_new(c, "index", json_integer(0));
    json_t *t = json_stringn(text ? text : "", text_len);
    if (!t) /* not valid UTF-8: should not happen (the head sends whole characters) */
        t = json_string("");
    if (r->chat) {
        json_t *msg = json_object();
        json_object_set_new(msg, "role", json_string("assistant"));
        json_object_set_new(msg, "content", t);
        json_object_set_new(c, "message", msg);
    } else {
        json_object_set_new(c, "text", t);
    }
    json_object_set_new(c, "logprobs", json_null());
    json_object_set_new(c, "finish_reason", json_string(gw_finish_reason(finish)));
    json_t *arr = json_array();
    json_array_append_new(arr, c);
    json_object_set_new(j, "choices", arr);
    json_object_set_new(j, "usage", s_usage(st));
    json_object_set_new(j, "shardwire", gw_json_stats(st));
    return s_dump(j);
}

char *gw_sse_chunk(const gw_req_t *r, const char *id, long long created, const char *text,
                   size_t text_len, int finish, int role_first, const sw_client_stats_t *usage)
{
    json_t *j = s_head(r, id, created, r->chat ? "chat.completion.chunk" : "text_completion");
    json_t *arr = json_array();
    if (!usage) {
        json_t *c = json_object();
        json_object_set_new(c, "index", json_integer(0));
        json_t *t = json_stringn(text ? text : "", text_len);
        if (!t)
            t = json_string("");
        if (r->chat) {
            json_t *delta = json_object();
            if (role_first)
                json_object_set_new(delta, "role", json_string("assistant"));
            if (text_len || role_first)
                json_object_set_new(delta, "content", t);
            else
                json_decref(t);
            json_object_set_new(c, "delta", delta);
        } else {
            json_object_set_new(c, "text", t);
        }
        json_object_set_new(c, "logprobs", json_null());
        json_object_set_new(c, "finish_reason",
                            finish ? json_string(gw_finish_reason(finish)) : json_null());
        json_array_append_new(arr, c);
    }
    json_object_set_new(j, "choices", arr);
    if (r->include_usage)
        json_object_set_new(j, "usage", usage ? s_usage(usage) : json_null());
    if (usage)
        json_object_set_new(j, "shardwire", gw_json_stats(usage));
    char *body = s_dump(j);
    if (!body)
        return NULL;
    size_t n = strlen(body);
    char *out = malloc(n + 9);
    if (out)
        snprintf(out, n + 9, "data: %s\n\n", body);
    free(body);
    return out;
}

char *gw_json_error(const char *message, const char *type, const char *param, const char *code)
{
    json_t *e = json_object();
    json_object_set_new(e, "message", json_string(message));
    json_object_set_new(e, "type", json_string(type));
    json_object_set_new(e, "param", param ? json_string(param) : json_null());
    json_object_set_new(e, "code", code ? json_string(code) : json_null());
    json_t *j = json_object();
    json_object_set_new(j, "error", e);
    return s_dump(j);
}

char *gw_json_models(const sw_client_table_t *t, long long created)
{
    json_t *arr = json_array();
    for (int i = 0; i < t->n_peers; i++) {
        const sw_client_peer_t *p = &t->peers[i];
        if (!sw_client_peer_serves(p, NULL) || !sw_client_trusted_head(t, p))
            continue; /* only the heads requests go to */
        const char *id = p->model_name[0] ? p->model_name : p->model;
        int seen = 0;
        for (size_t k = 0; k < json_array_size(arr) && !seen; k++)
            seen = !strcmp(json_string_value(json_object_get(json_array_get(arr, k), "id")), id);
        if (seen)
            continue;
        json_t *m = json_object();
        json_object_set_new(m, "id", json_string(id));
        json_object_set_new(m, "object", json_string("model"));
        json_object_set_new(m, "created", json_integer(created));
        json_object_set_new(m, "owned_by", json_string("shardwire"));
        json_t *x = json_object();
        json_object_set_new(x, "fingerprint", json_string(p->model));
        json_object_set_new(x, "n_layers", json_integer(p->n_layers));
        json_object_set_new(x, "head", json_string(p->name));
        json_object_set_new(m, "shardwire", x);
        json_array_append_new(arr, m);
    }
    json_t *j = json_object();
    json_object_set_new(j, "object", json_string("list"));
    json_object_set_new(j, "data", arr);
    return s_dump(j);
}

/* A float as the shortest decimal that reads back as the same float (0.8f is 0.8, not
 * 0.800000011920929): the value as serve's flag or sw_limits.h wrote it. */
static json_t *s_real(float f)
{
    char buf[32];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if ((float)strtod(buf, NULL) == f)
            break;
    }
    return json_real(strtod(buf, NULL));
}

/* [lo, hi] as a JSON array. */
static json_t *s_range(json_t *lo, json_t *hi)
{
    json_t *a = json_array();
    json_array_append_new(a, lo);
    json_array_append_new(a, hi);
    return a;
}

char *gw_json_defaults(const gw_defaults_t *d)
{
    json_t *j = json_object(), *rg = json_object();
    json_object_set_new(j, "object", json_string("shardwire.defaults"));
    json_object_set_new(j, "max_tokens", json_integer(d->max_tokens));
    json_object_set_new(j, "temperature", s_real(d->temperature));
    json_object_set_new(j, "top_p", s_real(d->top_p));
    json_object_set_new(j, "top_k", json_integer(d->top_k));
    json_object_set_new(j, "min_p", s_real(d->min_p));
    json_object_set_new(j, "repeat_penalty", s_real(d->repeat_penalty));
    json_object_set_new(j, "timeout_s", json_integer(d->timeout_ms / 1000));
    json_object_set_new(rg, "max_tokens",
                        s_range(json_integer(1), json_integer(SW_REQUEST_MAX_N_PREDICT)));
    json_object_set_new(rg, "temperature", s_range(json_real(0), json_real(GW_MAX_TEMPERATURE)));
    json_object_set_new(rg, "top_p", s_range(json_real(0), json_real(1)));
    json_object_set_new(rg, "top_k", s_range(json_integer(0), json_integer(SW_SAMPLING_MAX_TOP_K)));
    json_object_set_new(rg, "min_p", s_range(json_real(0), json_real(SW_SAMPLING_MAX_MIN_P)));
    json_object_set_new(
        rg, "repeat_penalty",
        s_range(json_real(SW_SAMPLING_MIN_REP_PENALTY), json_real(SW_SAMPLING_MAX_REP_PENALTY)));
    json_object_set_new(rg, "timeout_s",
                        s_range(json_integer(1), json_integer(SW_REQUEST_MAX_TIMEOUT_S)));
    json_object_set_new(j, "ranges", rg);
    /* 9 digits write each of these (a float's shortest decimal) as it is: 0.7, not
     * 0.69999999999999996 */
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(j);
    return s;
}
