/*
 * openai.h - the OpenAI-compatible request and response bodies of the
 * gateway (docs/api.md): parsing /v1/chat/completions and /v1/completions
 * requests into a client request, and writing completions, stream chunks,
 * model lists and errors as JSON.
 *
 * Every field of a request body is outside input: types and ranges are
 * checked, unknown fields are ignored, known fields the gateway cannot honour
 * (n > 1, logprobs, tools, ...) are refused with the field named. shardwire's
 * own settings live under one field, "shardwire" (an object; its unknown
 * keys are refused, since they are ours).
 */
#ifndef GW_OPENAI_H
#define GW_OPENAI_H

#include <jansson.h>
#include <stddef.h>

#include "client.h"

/* The most a request's temperature may be: OpenAI's range (the CLI's --temp goes to
 * SW_SAMPLING_MAX_TEMP; serve's --temp, a request's default, only to this). The parser checks
 * it and GET /v1/defaults hands it to the web page (gw_json_defaults). */
#define GW_MAX_TEMPERATURE 2

/* Defaults a request gets for the fields it leaves out (shardwire serve's flags; their defaults
 * are sw_limits.h's SW_GATEWAY_DEFAULT_MAX_TOKENS, SW_SAMPLING_*, SW_REQUEST_DEFAULT_TIMEOUT_S). */
typedef struct gw_defaults {
    int max_tokens;       /* tokens to generate */
    float temperature;    /* 0 = greedy */
    float top_p;          /* (0, 1] */
    int top_k;            /* 0 = off */
    float min_p;          /* [0, 1) */
    float repeat_penalty; /* 1 = off */
    int timeout_ms;       /* the head's deadline per request */
} gw_defaults_t;

/* One parsed request. Strings point into root or into owned (freed by gw_req_clear). */
typedef struct gw_req {
    int chat;                                     /* 1 = /v1/chat/completions */
    const char *model;                            /* the "model" field */
    int stream;                                   /* "stream": true */
    int include_usage;                            /* "stream_options": {"include_usage": true} */
    const char *head;                             /* shardwire.head, or NULL */
    sw_client_request_t q;                        /* what goes to the cluster */
    sw_client_msg_t msgs[SW_CLIENT_MAX_MESSAGES]; /* chat turns (q.messages) */
    const char *stop[SW_CLIENT_MAX_STOP];         /* stop strings (q.stop) */
    char *owned[SW_CLIENT_MAX_MESSAGES + 1];      /* joined content parts */
    int n_owned;                                  /* entries in owned */
    json_t *root;                                 /* the parsed body */
} gw_req_t;

/*
 * Parses body (len bytes) for the chat (1) or completions (0) endpoint.
 * 0, or -1 with one line in err and the offending field in *param (a static
 * string, or NULL), or -2 when memory ran out (err says for what: a 500, not
 * the client's mistake). Clear r with gw_req_clear either way.
 */
int gw_req_parse(gw_req_t *r, const char *body, size_t len, int chat, const gw_defaults_t *def,
                 char *err, size_t err_len, const char **param) __attribute__((warn_unused_result));
void gw_req_clear(gw_req_t *r);

/* The OpenAI finish_reason of a client finish ("stop", "length"). */
const char *gw_finish_reason(int finish);

/*
 * Response bodies (malloc'd JSON text the caller frees; NULL when out of
 * memory). id is the response id ("chatcmpl-..." / "cmpl-..."), created the
 * Unix time of the request.
 */
char *gw_json_completion(const gw_req_t *r, const char *id, long long created, const char *text,
                         size_t text_len, int finish, const sw_client_stats_t *st);
/* One "data: {...}\n\n" stream chunk: text (may be empty), finish (0 = none yet),
 * role_first (1 on the first chat chunk), usage (1: the final usage chunk, choices []). */
char *gw_sse_chunk(const gw_req_t *r, const char *id, long long created, const char *text,
                   size_t text_len, int finish, int role_first, const sw_client_stats_t *usage);
/* {"error": {"message", "type", "param", "code"}} */
char *gw_json_error(const char *message, const char *type, const char *param, const char *code);
/* {"object": "list", "data": [models served by the heads in t]} */
char *gw_json_models(const sw_client_table_t *t, long long created);
/* GET /v1/defaults: {"object": "shardwire.defaults", each field of d (timeout_s in seconds),
 * "ranges": {field: [lo, hi], ...}: the values a request may give}. Floats are written as the
 * shortest decimal that reads back as the same float (0.8, not 0.800000011920929). */
char *gw_json_defaults(const gw_defaults_t *d);

/* The shardwire extension object of a finished request's statistics (new reference). */
json_t *gw_json_stats(const sw_client_stats_t *st);

#endif
