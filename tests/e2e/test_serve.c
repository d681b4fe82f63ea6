/*
 * test_serve.c - `shardwire serve` (the OpenAI-compatible HTTP API) against a
 * real relay and two nodes on loopback, with curl and the official `openai`
 * Python client (installed by scripts/dev/py_venv.sh; that part is reported as
 * skipped when PyPI cannot be reached).
 *
 *  - /health and a completion answer 503 while no node is connected
 *    (status "down"), /health 503 "degraded" naming the missing layers while
 *    the head is alone, 200 "ok" with the whole pipeline;
 *  - greedy and seeded-sampling completions and chat completions equal
 *    `shardwire run` for the same request, streamed (SSE ending with
 *    "data: [DONE]", usage chunk) and not; OpenAI's semantics: temperature 0
 *    without a penalty field is `run --greedy` (also through the openai
 *    client), "repeat_penalty" asks for run's --repeat-penalty, and
 *    frequency/presence penalties other than 0 are refused;
 *  - token trees and drafting ahead asked for per request (shardwire.draft_tree,
 *    .draft_ahead; the head drafts with its own model) give the same greedy text, and
 *    the response counts tree rounds and rounds drafted ahead (none with it off);
 *  - four concurrent requests each get their own correct output;
 *  - every error status: 400 (bad JSON, bad field, unsupported field), 401
 *    (no key, wrong key), 404 (model, endpoint), 405, 413 (a 100 MB body),
 *    429 (--max-inflight), 504 (the request's deadline);
 *  - a client that disconnects cancels its generation: the next request does
 *    not wait for it;
 *  - slow-loris connections (headers trickled, a body trickled past the body
 *    deadline) and a 100 MB upload running at the same time do not keep
 *    another address's request from completing promptly;
 *  - /metrics counts what happened, the refusals of the model check (no_head,
 *    model_not_found) and the 429 of --max-inflight (too_many_requests) among
 *    the errors.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sw_test.h"

#define N_GEN 16
#define KEY "test-key-0123456789abcdef"
#define MODEL "SmolLM2-135M-Instruct.Q4_1"

static char s_relay[64], s_base[64], s_curl[64];
static int s_port;

static double s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/*
 * curl: method POST when body (or @file) is given, else GET. Returns the
 * HTTP status (0 when curl failed), the response body into *resp (malloc'd).
 * key NULL = no Authorization header.
 */
static int s_http(const char *path, const char *key, const char *body, char **resp,
                  const char *iface)
{
    char url[256], auth[128], out[256], data[512];
    snprintf(url, sizeof url, "%s%s", s_base, path);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", key ? key : "");
    snprintf(out, sizeof out, "%s", sw_test_log("curl.out"));
    char *argv[32];
    int n = 0;
    argv[n++] = s_curl;
    argv[n++] = "-s";
    argv[n++] = "--max-time";
    argv[n++] = "120";
    argv[n++] = "-o";
    argv[n++] = out;
    argv[n++] = "-w";
    argv[n++] = "%{http_code}";
    argv[n++] = "-H";
    argv[n++] = "Content-Type: application/json";
    if (key) {
        argv[n++] = "-H";
        argv[n++] = auth;
    }
    if (iface) {
        argv[n++] = "--interface";
        argv[n++] = (char *)iface;
    }
    if (body && body[0] == '@') {
        snprintf(data, sizeof data, "%s", body);
        argv[n++] = "--data-binary";
        argv[n++] = data;
    } else if (body) {
        argv[n++] = "--data-binary";
        argv[n++] = (char *)body;
    }
    argv[n++] = url;
    argv[n] = NULL;
    char *so = NULL;
    unlink(out);
    sw_test_run(argv, 150, &so, NULL);
    int status = so ? atoi(so) : 0;
    free(so);
    size_t len;
    char *r = sw_test_read_file(out, &len);
    if (resp)
        *resp = r ? r : strdup("");
    else
        free(r);
    return status;
}

/* A field of a JSON object text (string), copied into out. */
static void s_jstr(const char *text, const char *path1, const char *path2, char *out, size_t n)
{
    out[0] = 0;
    json_error_t je;
    json_t *j = text ? json_loads(text, JSON_DISABLE_EOF_CHECK, &je) : NULL;
    json_t *v = j ? json_object_get(j, path1) : NULL;
    if (v && path2)
        v = json_object_get(v, path2);
    if (json_is_string(v))
        snprintf(out, n, "%s", json_string_value(v));
    json_decref(j);
}

/* choices[0].text or choices[0].message.content of a completion body. */
static void s_choice_text(const char *body, char *out, size_t n)
{
    out[0] = 0;
    json_error_t je;
    json_t *j = body ? json_loads(body, 0, &je) : NULL;
    json_t *c = j ? json_array_get(json_object_get(j, "choices"), 0) : NULL;
    json_t *t = json_object_get(c, "text");
    if (!t)
        t = json_object_get(json_object_get(c, "message"), "content");
    if (json_is_string(t))
        snprintf(out, n, "%s", json_string_value(t));
    json_decref(j);
}

/* The text of an SSE body: its data lines' choices[0] text / delta.content, joined. */
static int s_sse_text(const char *body, char *out, size_t n, int *done, int *usage_seen)
{
    out[0] = 0;
    *done = *usage_seen = 0;
    size_t at = 0;
    int chunks = 0;
    for (const char *p = body; p && (p = strstr(p, "data: ")); p += 6) {
        const char *end = strstr(p, "\n\n");
        if (!end)
            return -1;
        if (!strncmp(p + 6, "[DONE]", 6)) {
            *done = 1;
            continue;
        }
        json_error_t je;
        json_t *j = json_loadb(p + 6, (size_t)(end - p - 6), 0, &je);
        if (!j)
            return -1;
        json_t *c = json_array_get(json_object_get(j, "choices"), 0);
        json_t *t = json_object_get(c, "text");
        if (!t)
            t = json_object_get(json_object_get(c, "delta"), "content");
        if (json_is_string(t) && at + json_string_length(t) < n) {
            memcpy(out + at, json_string_value(t), json_string_length(t));
            at += json_string_length(t);
            out[at] = 0;
        }
        if (json_is_object(json_object_get(j, "usage")))
            *usage_seen = (int)json_integer_value(
                json_object_get(json_object_get(j, "usage"), "completion_tokens"));
        json_decref(j);
        chunks++;
    }
    return chunks;
}

/* `shardwire run --json` text for the same request. */
static int s_run(const char *prompt, int chat, const char *extra1, const char *extra2, char *out,
                 size_t n)
{
    char nn[16];
    snprintf(nn, sizeof nn, "%d", N_GEN);
    char *argv[24];
    int k = 0;
    argv[k++] = (char *)sw_test_bin("shardwire");
    argv[k++] = "run";
    argv[k++] = "--relay";
    argv[k++] = s_relay;
    argv[k++] = "--insecure-loopback";
    argv[k++] = "-p";
    argv[k++] = (char *)prompt;
    argv[k++] = "-n";
    argv[k++] = nn;
    argv[k++] = "--json";
    argv[k++] = "--temp";
    argv[k++] = "0";
    argv[k++] = "--repeat-penalty";
    argv[k++] = "1";
    if (chat)
        argv[k++] = "--chat";
    if (extra1) { /* sampling: --temp 0.7 --seed 42 (the later --temp wins) */
        argv[k++] = "--temp";
        argv[k++] = (char *)extra1;
        argv[k++] = "--seed";
        argv[k++] = (char *)extra2;
    }
    argv[k] = NULL;
    char *o = NULL;
    int rc = sw_test_run(argv, 120, &o, NULL);
    s_jstr(o, "text", NULL, out, n);
    free(o);
    return rc;
}

/* A background curl (streaming, its output into file); returns its pid. */
static pid_t s_curl_bg(const char *path, const char *body, const char *file)
{
    static char url[256], auth[128], outf[8][256], bodies[8][1024];
    static int slot;
    int s = slot++ & 7;
    snprintf(url, sizeof url, "%s%s", s_base, path);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", KEY);
    snprintf(outf[s], sizeof outf[s], "%s", file);
    snprintf(bodies[s], sizeof bodies[s], "%s", body);
    char *argv[] = {s_curl,
                    "-s",
                    "-N",
                    "--max-time",
                    "120",
                    "-o",
                    outf[s],
                    "-H",
                    auth,
                    "-H",
                    "Content-Type: application/json",
                    "--data-binary",
                    bodies[s],
                    url,
                    NULL};
    return sw_test_spawn(argv, NULL);
}

static int s_wait_pid(pid_t pid, int timeout_s)
{
    double end = s_now_ms() + timeout_s * 1e3;
    int st;
    while (s_now_ms() < end) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        usleep(50000);
    }
    sw_test_kill(pid);
    return -1;
}

/* A TCP connection to the gateway from 127.0.0.1. */
static int s_connect(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static pid_t s_start_serve(const char *keyfile, int max_inflight, const char *access_key)
{
    char listen[64], mi[16];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", s_port);
    snprintf(mi, sizeof mi, "%d", max_inflight);
    char *argv[] = {(char *)sw_test_bin("shardwire"),
                    "serve",
                    "--relay",
                    s_relay,
                    "--insecure-loopback",
                    "--listen",
                    listen,
                    "--api-key-file",
                    (char *)keyfile,
                    "--max-inflight",
                    mi,
                    "--max-per-ip",
                    "8",
                    "--body-timeout-s",
                    "3",
                    access_key ? "--access-key" : NULL,
                    (char *)access_key,
                    NULL};
    pid_t pid = sw_test_spawn(argv, sw_test_log("serve.log"));
    for (int i = 0; i < 100; i++) { /* until it accepts connections */
        int fd = s_connect();
        if (fd >= 0) {
            close(fd);
            break;
        }
        usleep(100000);
    }
    return pid;
}

int main(void)
{
    const char *model = sw_test_model();
    snprintf(s_curl, sizeof s_curl, "%s",
             access("/usr/bin/curl", X_OK) == 0 ? "/usr/bin/curl" : "/bin/curl");
    if (access(s_curl, X_OK) != 0)
        sw_test_skip("curl is not installed (scripts/deps.sh installs it)");
    snprintf(s_relay, sizeof s_relay, "tcp://127.0.0.1:%d", sw_test_free_port());
    s_port = sw_test_free_port();
    snprintf(s_base, sizeof s_base, "http://127.0.0.1:%d", s_port);
    char keyfile[256];
    snprintf(keyfile, sizeof keyfile, "%s", sw_test_log("api.keys"));
    FILE *kf = fopen(keyfile, "w");
    if (!kf)
        sw_test_skip("cannot write the key file");
    fprintf(kf, "# test keys\n%s\n", KEY);
    fclose(kf);
    chmod(keyfile, 0600);

    char *ra[] = {(char *)sw_test_bin("shardwire-relay"), "--listen", s_relay,
                  "--insecure-loopback", NULL};
    pid_t relay = sw_test_spawn(ra, sw_test_log("relay.log"));
    pid_t serve = s_start_serve(keyfile, 2, NULL);
    pid_t nodes[2] = {0, 0}, bg[4] = {0};
    char *resp = NULL;

    /* no node yet: 503 "down" */
    SW_CHECK_INT(s_http("/health", NULL, NULL, &resp, NULL), 503);
    SW_CHECK(resp && strstr(resp, "\"status\":\"down\""));
    free(resp);
    char body[2048];
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"prompt\":\"Hi\",\"max_tokens\":2}", MODEL);
    SW_CHECK_INT(s_http("/v1/completions", KEY, body, &resp, NULL), 503);
    SW_CHECK(strstr(resp, "no_head") != NULL);
    free(resp);
    /* and /metrics counts the refusal (the model check's), as every failed generation */
    SW_CHECK_INT(s_http("/metrics", KEY, NULL, &resp, NULL), 200);
    SW_CHECK(resp && strstr(resp, "shardwire_gateway_errors_total{code=\"no_head\"} 1\n"));
    free(resp);

    const char *ranges[2] = {"0:15", "15:end"}, *names[2] = {"head", "tail"};
    for (int i = 0; i < 2; i++) {
        char *na[] = {(char *)sw_test_bin("shardwire-node"),
                      "--model",
                      (char *)model,
                      "--layers",
                      (char *)ranges[i],
                      "--relay",
                      s_relay,
                      "--name",
                      (char *)names[i],
                      "--threads",
                      "1",
                      "--insecure-loopback",
                      NULL, /* the head: --draft-model (itself) */
                      NULL,
                      NULL};
        if (i == 0) {
            na[12] = "--draft-model";
            na[13] = (char *)model;
        }
        nodes[i] = sw_test_spawn(na, sw_test_log("nodes.log"));
        if (i == 0 && sw_test_wait_peers(s_relay, 1, 60) == 0) {
            /* the head alone: its pipeline has a gap (layers 15:30): 503 "degraded" naming it */
            int st = 0;
            for (int k = 0; k < 30; k++) { /* the gateway's table cache catches up */
                st = s_http("/health", NULL, NULL, &resp, NULL);
                if (k == 29 || (resp && strstr(resp, "degraded")))
                    break;
                free(resp);
                resp = NULL;
                usleep(200000);
            }
            SW_CHECK_INT(st, 503);
            SW_CHECK(resp && strstr(resp, "\"status\":\"degraded\"") &&
                     strstr(resp, "no node holds layers 15:30 of 30"));
            if (resp && !strstr(resp, "degraded"))
                fprintf(stderr, "/health with the head alone: %s\n", resp);
            free(resp);
            resp = NULL;
        }
    }
    if (sw_test_wait_peers(s_relay, 2, 60) != 0) {
        SW_CHECK(!"the nodes came up");
        goto out;
    }
    for (int k = 0; k < 30; k++) { /* the cached table may still lack the tail */
        int st = s_http("/health", NULL, NULL, &resp, NULL);
        if (st == 200 || k == 29)
            break;
        free(resp);
        usleep(200000);
    }
    SW_CHECK(resp && strstr(resp, "\"status\":\"ok\"") && strstr(resp, "\"gaps\":[]"));
    free(resp);
    SW_CHECK_INT(s_http("/health", NULL, NULL, &resp, NULL), 200);
    free(resp);
    SW_CHECK_INT(s_http("/v1/models", KEY, NULL, &resp, NULL), 200);
    SW_CHECK(strstr(resp, "\"id\":\"" MODEL "\"") != NULL);
    free(resp);
    SW_CHECK_INT(s_http("/v1/models/" MODEL, KEY, NULL, &resp, NULL), 200);
    free(resp);
    SW_CHECK_INT(s_http("/v1/models/other", KEY, NULL, &resp, NULL), 404);
    free(resp);

    /* the same request as `shardwire run`: greedy completion, chat, and seeded sampling */
    const char *prompts[4] = {"The capital of France is", "List three colors of the rainbow:\n1.",
                              "def add(a, b):", "Once upon a time"};
    char ref[4][2048], ref_chat[2048], ref_sample[2048], got[4096];
    for (int i = 0; i < 4; i++)
        SW_CHECK_INT(s_run(prompts[i], 0, NULL, NULL, ref[i], sizeof ref[i]), 0);
    SW_CHECK_INT(s_run(prompts[0], 1, NULL, NULL, ref_chat, sizeof ref_chat), 0);
    SW_CHECK_INT(s_run(prompts[3], 0, "0.7", "42", ref_sample, sizeof ref_sample), 0);
    SW_CHECK(ref[0][0] && ref_chat[0] && ref_sample[0]);

    /* temperature 0 and no penalty field: greedy, as OpenAI's API means it */
    json_t *jb = json_pack("{s:s,s:s,s:i,s:i}", "model", MODEL, "prompt", prompts[0], "max_tokens",
                           N_GEN, "temperature", 0);
    char *req = json_dumps(jb, JSON_COMPACT);
    SW_CHECK_INT(s_http("/v1/completions", KEY, req, &resp, NULL), 200);
    s_choice_text(resp, got, sizeof got);
    SW_CHECK(!strcmp(got, ref[0]));
    SW_CHECK(strstr(resp, "\"completion_tokens\":16") != NULL);
    free(resp);
    free(req);
    json_object_set_new(jb, "stream", json_true());
    json_object_set_new(jb, "stream_options", json_pack("{s:b}", "include_usage", 1));
    req = json_dumps(jb, JSON_COMPACT);
    SW_CHECK_INT(s_http("/v1/completions", KEY, req, &resp, NULL), 200);
    int done, usage;
    SW_CHECK(s_sse_text(resp, got, sizeof got, &done, &usage) > 2);
    SW_CHECK(!strcmp(got, ref[0]));
    SW_CHECK(done && usage == N_GEN);
    size_t rl = strlen(resp);
    SW_CHECK(rl > 14 && !strcmp(resp + rl - 14, "data: [DONE]\n\n"));
    free(resp);
    free(req);
    json_decref(jb);

    jb = json_pack("{s:s,s:[{s:s,s:s}],s:i,s:i,s:{s:f}}", "model", MODEL, "messages", "role",
                   "user", "content", prompts[0], "max_tokens", N_GEN, "temperature", 0,
                   "shardwire", "repeat_penalty", 1.0);
    req = json_dumps(jb, JSON_COMPACT);
    SW_CHECK_INT(s_http("/v1/chat/completions", KEY, req, &resp, NULL), 200);
    s_choice_text(resp, got, sizeof got);
    SW_CHECK(!strcmp(got, ref_chat));
    SW_CHECK(strstr(resp, "\"object\":\"chat.completion\"") != NULL);
    free(resp);
    free(req);
    json_object_set_new(jb, "stream", json_true());
    req = json_dumps(jb, JSON_COMPACT);
    SW_CHECK_INT(s_http("/v1/chat/completions", KEY, req, &resp, NULL), 200);
    SW_CHECK(s_sse_text(resp, got, sizeof got, &done, &usage) > 2);
    SW_CHECK(!strcmp(got, ref_chat) && done);
    SW_CHECK(strstr(resp, "\"role\":\"assistant\"") != NULL);
    free(resp);
    free(req);
    json_decref(jb);

    /* seeded sampling: top-k 40, top-p 0.95, min-p 0.05 are run's defaults too */
    jb = json_pack("{s:s,s:s,s:i,s:f,s:i,s:f,s:{s:f,s:i,s:f}}", "model", MODEL, "prompt",
                   prompts[3], "max_tokens", N_GEN, "temperature", 0.7, "seed", 42, "top_p", 0.95,
                   "shardwire", "repeat_penalty", 1.0, "top_k", 40, "min_p", 0.05);
    req = json_dumps(jb, JSON_COMPACT);
    SW_CHECK_INT(s_http("/v1/completions", KEY, req, &resp, NULL), 200);
    s_choice_text(resp, got, sizeof got);
    SW_CHECK(!strcmp(got, ref_sample));
    free(resp);
    free(req);
    json_decref(jb);

    /* the speculation shape per request: token trees and drafting ahead are lossless (greedy:
     * the text of `shardwire run` without them), and the response says what happened */
    long long trees = 0, ahead_on = 0, ahead_off = 0;
    for (int i = 0; i < 8; i++) {
        const int ahead = i < 4; /* then the same without drafting ahead */
        jb = json_pack("{s:s,s:s,s:i,s:i,s:{s:s,s:i,s:i,s:b,s:f}}", "model", MODEL, "prompt",
                       prompts[i % 4], "max_tokens", N_GEN, "temperature", 0, "shardwire", "draft",
                       "model", "draft_k", 4, "draft_tree", 8, "draft_ahead", ahead,
                       "repeat_penalty", 1.0);
        req = json_dumps(jb, JSON_COMPACT);
        SW_CHECK_INT(s_http("/v1/completions", KEY, req, &resp, NULL), 200);
        s_choice_text(resp, got, sizeof got);
        if (strcmp(got, ref[i % 4]) != 0)
            fprintf(stderr, "tree, ahead %d, prompt %d: got '%s', want '%s'\n", ahead, i % 4, got,
                    ref[i % 4]);
        SW_CHECK(!strcmp(got, ref[i % 4]));
        json_t *rj = json_loads(resp, 0, NULL);
        json_t *sx = json_object_get(rj, "shardwire");
        SW_CHECK(json_is_integer(json_object_get(sx, "tree_rounds")) &&
                 json_is_integer(json_object_get(sx, "ahead_hits")) &&
                 json_is_integer(json_object_get(sx, "ahead_misses")) &&
                 json_is_number(json_object_get(sx, "draft_ahead_ms")));
        trees += json_integer_value(json_object_get(sx, "tree_rounds"));
        *(ahead ? &ahead_on : &ahead_off) +=
            json_integer_value(json_object_get(sx, "ahead_hits")) +
            json_integer_value(json_object_get(sx, "ahead_misses"));
        json_decref(rj);
        free(resp);
        free(req);
        json_decref(jb);
    }
    SW_CHECK(trees > 0);                      /* the trees were really sent */
    SW_CHECK(ahead_on > 0 && ahead_off == 0); /* and draft_ahead reached the head */

    /* four at once (the gateway's limit is 2 in flight: raise it for this) */
    sw_test_kill(serve);
    serve = s_start_serve(keyfile, 8, NULL);
    char files[4][256];
    for (int i = 0; i < 4; i++) {
        snprintf(files[i], sizeof files[i], "%s",
                 sw_test_log(i == 0   ? "c0"
                             : i == 1 ? "c1"
                             : i == 2 ? "c2"
                                      : "c3"));
        jb = json_pack("{s:s,s:s,s:i,s:i,s:{s:f}}", "model", MODEL, "prompt", prompts[i],
                       "max_tokens", N_GEN, "temperature", 0, "shardwire", "repeat_penalty", 1.0);
        req = json_dumps(jb, JSON_COMPACT);
        bg[i] = s_curl_bg("/v1/completions", req, files[i]);
        free(req);
        json_decref(jb);
    }
    for (int i = 0; i < 4; i++) {
        SW_CHECK_INT(s_wait_pid(bg[i], 120), 0);
        bg[i] = 0;
        size_t len;
        char *b = sw_test_read_file(files[i], &len);
        s_choice_text(b, got, sizeof got);
        if (strcmp(got, ref[i]) != 0)
            fprintf(stderr, "concurrent %d: got '%s', want '%s'\n", i, got, ref[i]);
        SW_CHECK(!strcmp(got, ref[i]));
        free(b);
    }
    sw_test_kill(serve);
    serve = s_start_serve(keyfile, 2, NULL);

    /* every error status */
    struct {
        const char *path, *key, *body;
        int status;
        const char *needle;
    } bad[] = {
        {"/v1/completions", KEY, "{not json", 400, "not valid JSON"},
        {"/v1/completions", KEY, "[1]", 400, "JSON object"},
        {"/v1/completions", KEY, "{\"prompt\":\"x\"}", 400, "'model' is required"},
        {"/v1/completions", KEY, "{\"model\":\"" MODEL "\",\"prompt\":\"x\",\"temperature\":3}",
         400, "temperature"},
        {"/v1/completions", KEY, "{\"model\":\"" MODEL "\",\"prompt\":\"x\",\"max_tokens\":\"9\"}",
         400, "max_tokens"},
        {"/v1/completions", KEY, "{\"model\":\"" MODEL "\",\"prompt\":\"x\",\"n\":3}", 400,
         "n = 1"},
        {"/v1/completions", KEY, "{\"model\":\"" MODEL "\",\"prompt\":[1,2]}", 400, "token-id"},
        {"/v1/completions", KEY,
         "{\"model\":\"" MODEL "\",\"prompt\":\"x\",\"shardwire\":{\"k\":1}}", 400,
         "unknown field"},
        {"/v1/completions", KEY,
         "{\"model\":\"" MODEL "\",\"prompt\":\"x\",\"shardwire\":{\"draft_tree\":65}}", 400,
         "draft_tree"},
        {"/v1/completions", KEY,
         "{\"model\":\"" MODEL "\",\"prompt\":\"x\",\"shardwire\":{\"draft_ahead\":1}}", 400,
         "draft_ahead"},
        {"/v1/chat/completions", KEY, "{\"model\":\"" MODEL "\",\"messages\":[]}", 400, "messages"},
        {"/v1/chat/completions", KEY,
         "{\"model\":\"" MODEL "\",\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", 400,
         "role"},
        {"/v1/completions", KEY,
         "{\"model\":\"" MODEL "\",\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}",
         400, "stream"},
        {"/v1/completions", KEY, "{\"model\":\"" MODEL "\",\"prompt\":\"x\",\"max_tokens\":9000}",
         400, "context"},
        {"/v1/completions", KEY,
         "{\"model\":\"" MODEL "\",\"prompt\":\"x\",\"frequency_penalty\":0.5}", 400,
         "repeat_penalty"},
        {"/v1/completions", KEY,
         "{\"model\":\"" MODEL "\",\"prompt\":\"x\",\"presence_penalty\":-1}", 400,
         "presence_penalty"},
        {"/v1/completions", KEY, "{\"model\":\"" MODEL "\",\"prompt\":\"x\",\"repeat_penalty\":0}",
         400, "repeat_penalty"},
        /* logprobs: true asks for them; 0.0 (a real, as some clients send it) asks for nothing,
         * so the next refusal, n, is the one named */
        {"/v1/completions", KEY, "{\"model\":\"" MODEL "\",\"prompt\":\"x\",\"logprobs\":true}",
         400, "'logprobs' is not supported"},
        {"/v1/completions", KEY,
         "{\"model\":\"" MODEL "\",\"prompt\":\"x\",\"logprobs\":0.0,\"n\":3}", 400, "only n = 1"},
        /* a field the gateway cannot honour is refused whatever its type, not only in its
         * documented form (echo 1, tools as an object, logit_bias as an array were taken
         * silently) */
        {"/v1/completions", KEY, "{\"model\":\"" MODEL "\",\"prompt\":\"x\",\"echo\":1}", 400,
         "'echo' is not supported"},
        {"/v1/chat/completions", KEY,
         "{\"model\":\"" MODEL "\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"tools\":{\"type\":\"function\"}}",
         400, "tool and function calls"},
        {"/v1/chat/completions", KEY,
         "{\"model\":\"" MODEL "\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"functions\":[{\"name\":\"f\"}]}",
         400, "\"param\":\"functions\""},
        {"/v1/completions", KEY, "{\"model\":\"" MODEL "\",\"prompt\":\"x\",\"logit_bias\":[1]}",
         400, "'logit_bias' is not supported"},
        {"/v1/completions", NULL, "{}", 401, "API key"},
        {"/v1/completions", "wrong-key-0123456789", "{}", 401, "invalid_api_key"},
        {"/metrics", "wrong-key-0123456789", NULL, 401, "API key"},
        {"/v1/completions", KEY, "{\"model\":\"gpt-4o\",\"prompt\":\"x\"}", 404, "model_not_found"},
        {"/v1/nothing", KEY, NULL, 404, "no such endpoint"},
        {"/v1/completions", KEY, NULL, 405, "method"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int st = s_http(bad[i].path, bad[i].key, bad[i].body, &resp, NULL);
        if (st != bad[i].status || !strstr(resp, bad[i].needle))
            fprintf(stderr, "case %zu: %d %s\n", i, st, resp);
        SW_CHECK_INT(st, bad[i].status);
        SW_CHECK(strstr(resp, bad[i].needle) != NULL);
        SW_CHECK(strstr(resp, "\"error\":{\"message\"") != NULL);
        free(resp);
    }
    /* 504: the request's own deadline passes on the cluster */
    SW_CHECK_INT(s_http("/v1/completions", KEY,
                        "{\"model\":\"" MODEL "\",\"prompt\":\"Count from 1 to 1000: 1, 2, 3,\","
                        "\"max_tokens\":1500,\"temperature\":0,"
                        "\"shardwire\":{\"timeout_s\":1,\"repeat_penalty\":1}}",
                        &resp, NULL),
                 504);
    if (!strstr(resp, "deadline"))
        fprintf(stderr, "504 body: %s\n", resp);
    SW_CHECK(strstr(resp, "deadline") != NULL);
    free(resp);

    /* 502: a gateway holding an access key the head does not share hears so within seconds */
    {
        char ck[256];
        snprintf(ck, sizeof ck, "%s", sw_test_log("other.access.key"));
        char *ka[] = {(char *)sw_test_bin("shardwire"), "keygen", "--access-key", ck, NULL};
        SW_CHECK_INT(sw_test_run(ka, 20, NULL, NULL), 0);
        int port = s_port;
        s_port = sw_test_free_port();
        snprintf(s_base, sizeof s_base, "http://127.0.0.1:%d", s_port);
        pid_t other = s_start_serve(keyfile, 2, ck);
        double t = s_now_ms();
        SW_CHECK_INT(s_http("/v1/completions", KEY, body, &resp, NULL), 502);
        SW_CHECK(strstr(resp, "wrong_access_key") != NULL && s_now_ms() - t < 5000);
        free(resp);
        sw_test_kill(other);
        s_port = port;
        snprintf(s_base, sizeof s_base, "http://127.0.0.1:%d", s_port);
    }

    /* 413: a 100 MB body is refused at once, from its Content-Length */
    char big[256];
    snprintf(big, sizeof big, "%s", sw_test_log("big.json"));
    int bfd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    SW_CHECK(bfd >= 0 && ftruncate(bfd, 100 << 20) == 0);
    if (bfd >= 0)
        close(bfd);
    char bigarg[300];
    snprintf(bigarg, sizeof bigarg, "@%s", big);
    double t0 = s_now_ms();
    SW_CHECK_INT(s_http("/v1/completions", KEY, bigarg, &resp, NULL), 413);
    SW_CHECK(s_now_ms() - t0 < 10000);
    free(resp);

    /* 429, and a client that disconnects cancels its generation */
    const char *longreq = "{\"model\":\"" MODEL "\",\"prompt\":\"Count from 1 to 1000: 1, 2, 3,\","
                          "\"max_tokens\":1500,\"temperature\":0,\"stream\":true,"
                          "\"shardwire\":{\"repeat_penalty\":1}}";
    /* one streamed, one not: a streamed client's absence shows when a write
     * fails; a waiting one's only when the gateway looks (every 200 ms) */
    const char *longreq_whole =
        "{\"model\":\"" MODEL "\",\"prompt\":\"Count from 1 to 1000: 1, 2, 3,\","
        "\"max_tokens\":1500,\"temperature\":0,\"shardwire\":{\"repeat_penalty\":1}}";
    bg[0] = s_curl_bg("/v1/completions", longreq, sw_test_log("long0"));
    bg[1] = s_curl_bg("/v1/completions", longreq_whole, sw_test_log("long1"));
    for (int i = 0; i < 100; i++) { /* until the first has tokens streaming */
        size_t len = 0;
        char *b = sw_test_read_file(sw_test_log("long0"), &len);
        free(b);
        if (len > 200)
            break;
        usleep(100000);
    }
    SW_CHECK_INT(
        s_http("/v1/completions", KEY, "{\"model\":\"" MODEL "\",\"prompt\":\"x\"}", &resp, NULL),
        429);
    free(resp);
    /* counted among the errors under its code, as every refused generation */
    SW_CHECK_INT(s_http("/metrics", KEY, NULL, &resp, NULL), 200);
    SW_CHECK(resp &&
             strstr(resp, "shardwire_gateway_errors_total{code=\"too_many_requests\"} 1\n"));
    free(resp);
    const int cancels0 = sw_test_count_in_file(sw_test_log("nodes.log"), "cancelled by the client");
    double t_gone = s_now_ms();
    sw_test_kill(bg[0]); /* both clients go away */
    sw_test_kill(bg[1]);
    bg[0] = bg[1] = 0;
    /* the gateway looks at a waiting client every 200 ms (S_POLL_MS): both
     * generations end on the gateway and are cancelled on the cluster (the
     * head logs each). The wait allows a loaded machine 5 s; the time it
     * took is printed. */
    int idle = 0;
    for (int i = 0; i < 100 && !idle; i++) {
        SW_CHECK_INT(s_http("/metrics", KEY, NULL, &resp, NULL), 200);
        idle = strstr(resp, "\nshardwire_gateway_inflight 0\n") != NULL;
        free(resp);
        if (!idle)
            usleep(50000);
    }
    fprintf(stderr, "two disconnected clients: inflight 0 after %.0f ms\n", s_now_ms() - t_gone);
    SW_CHECK(idle);
    SW_CHECK(s_now_ms() - t_gone < 5000);
    for (int i = 0; i < 50; i++) {
        if (sw_test_count_in_file(sw_test_log("nodes.log"), "cancelled by the client") >=
            cancels0 + 2)
            break;
        usleep(100000);
    }
    SW_CHECK(sw_test_count_in_file(sw_test_log("nodes.log"), "cancelled by the client") >=
             cancels0 + 2);
    t0 = s_now_ms();
    snprintf(body, sizeof body,
             "{\"model\":\"%s\",\"prompt\":\"Hello\",\"max_tokens\":4,\"temperature\":0}", MODEL);
    SW_CHECK_INT(s_http("/v1/completions", KEY, body, &resp, NULL), 200);
    double after_cancel = s_now_ms() - t0;
    fprintf(stderr, "a request after two cancelled 1500-token generations took %.0f ms\n",
            after_cancel);
    SW_CHECK(after_cancel < 8000);
    free(resp);

    /* slow loris from 127.0.0.1 (8 connections per address) and a 100 MB upload
     * at the same time; a user at 127.0.0.2 still gets answered promptly */
    int loris[24], n_loris = 0;
    for (int i = 0; i < 24; i++) {
        int fd = s_connect();
        if (fd < 0)
            continue;
        const char *part = i == 0 ? "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: "
                                    "Bearer " KEY "\r\nContent-Length: 1000\r\n\r\n{"
                                  : "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
        if (send(fd, part, strlen(part), MSG_NOSIGNAL) < 0) {
            close(fd);
            continue;
        }
        loris[n_loris++] = fd;
    }
    pid_t up = 0;
    {
        char url[256], auth[128];
        snprintf(url, sizeof url, "%s/v1/completions", s_base);
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", KEY);
        char *argv[] = {s_curl,
                        "-s",
                        "--interface",
                        "127.0.0.3",
                        "-H",
                        auth,
                        "-H",
                        "Transfer-Encoding: chunked",
                        "--data-binary",
                        bigarg,
                        url,
                        NULL};
        up = sw_test_spawn(argv, sw_test_log("upload.out"));
    }
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < n_loris; i++) /* a byte now and then keeps them alive */
            if (send(loris[i], i == 0 ? " " : "X", 1, MSG_NOSIGNAL) < 0) {
                close(loris[i]);
                loris[i] = loris[--n_loris];
                i--;
            }
        t0 = s_now_ms();
        int st = s_http("/v1/completions", KEY, body, &resp, "127.0.0.2");
        double ms = s_now_ms() - t0;
        fprintf(stderr, "during the attack: %d in %.0f ms\n", st, ms);
        SW_CHECK_INT(st, 200);
        SW_CHECK(ms < 8000);
        free(resp);
        usleep(500000);
    }
    SW_CHECK(s_wait_pid(up, 60) >= 0); /* the upload was cut off, it did not hang */
    size_t ul = 0;
    char *ub = sw_test_read_file(sw_test_log("upload.out"), &ul);
    SW_CHECK(ub && strstr(ub, "request_too_large") != NULL);
    free(ub);
    /* the trickled body passed the 3 s body deadline: the gateway answers 408 and
     * closes the connection (the answer may be lost to the reset of a socket with
     * unread data: what counts is that the connection ends) */
    if (n_loris > 0) {
        int closed = 0;
        for (int i = 0; i < 50 && !closed; i++) {
            char buf[512];
            closed = send(loris[0], "x", 1, MSG_NOSIGNAL) < 0;
            struct timeval tv = {0, 100000};
            setsockopt(loris[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            ssize_t n = recv(loris[0], buf, sizeof buf - 1, 0);
            closed |= n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ||
                      (n > 0 && (buf[n] = 0, strstr(buf, " 408 ") != NULL));
        }
        SW_CHECK(closed);
        /* and the gateway says why, in /metrics: a request_timeout error, whichever
         * closed it (a 408 when a body byte reached the handler after the deadline,
         * the 100 ms sweep's shutdown when it came first: docs/api.md) */
        int mst = 0, seen = 0; /* counted when the gateway has finished with the connection */
        for (int i = 0; i < 50 && !seen; i++) {
            if (i)
                usleep(100000);
            mst = s_http("/metrics", KEY, NULL, &resp, NULL);
            seen = resp && strstr(resp, "errors_total{code=\"request_timeout\"}") != NULL;
            free(resp);
        }
        SW_CHECK_INT(mst, 200);
        SW_CHECK(seen);
        if (!seen)
            fprintf(stderr, "no request_timeout in /metrics within 5 s of the slow body's end\n");
    }
    for (int i = 0; i < n_loris; i++)
        close(loris[i]);

    /* the official Python client */
    char venv_env[300], py_out[600];
    snprintf(venv_env, sizeof venv_env, "%s/../venv", getenv("SW_BIN_DIR"));
    if (!getenv("SW_VENV"))
        setenv("SW_VENV", venv_env, 1);
    char script[512], pyscript[512];
    snprintf(script, sizeof script, "%s/scripts/dev/py_venv.sh", getenv("SW_SOURCE_DIR"));
    snprintf(pyscript, sizeof pyscript, "%s/tests/e2e/openai_client.py", getenv("SW_SOURCE_DIR"));
    char *va[] = {"/bin/bash", script, NULL};
    char *py = NULL;
    int vrc = sw_test_run(va, 300, &py, NULL);
    if (vrc != 0 || !py || !py[0]) {
        sw_test_skip_part("the openai Python client could not be installed (PyPI unreachable?)");
    } else {
        py[strcspn(py, "\n")] = 0;
        snprintf(py_out, sizeof py_out, "%s", py);
        char n_gen[16];
        snprintf(n_gen, sizeof n_gen, "%d", N_GEN);
        /* OpenAI's semantics: temperature 0 and no penalty field is `run --greedy`; a
         * "repeat_penalty" asks for llama.cpp's penalty (compared with run's) */
        char ref_chat_rp[2048], ref_greedy[2048], ref_greedy_chat[2048];
        char *ra2[] = {(char *)sw_test_bin("shardwire"),
                       "run",
                       "--relay",
                       s_relay,
                       "--insecure-loopback",
                       "-p",
                       (char *)prompts[0],
                       "-n",
                       n_gen,
                       "--json",
                       "--greedy",
                       "--chat",
                       NULL,
                       NULL,
                       NULL,
                       NULL};
        char *o = NULL;
        SW_CHECK_INT(sw_test_run(ra2, 120, &o, NULL), 0);
        s_jstr(o, "text", NULL, ref_greedy_chat, sizeof ref_greedy_chat);
        free(o);
        ra2[11] = NULL; /* without --chat */
        SW_CHECK_INT(sw_test_run(ra2, 120, &o, NULL), 0);
        s_jstr(o, "text", NULL, ref_greedy, sizeof ref_greedy);
        free(o);
        ra2[10] = "--chat"; /* --temp 0 --repeat-penalty 1.1 --chat */
        ra2[11] = "--temp";
        ra2[12] = "0";
        ra2[13] = "--repeat-penalty";
        ra2[14] = "1.1";
        SW_CHECK_INT(sw_test_run(ra2, 120, &o, NULL), 0);
        s_jstr(o, "text", NULL, ref_chat_rp, sizeof ref_chat_rp);
        free(o);
        SW_CHECK(!strcmp(ref_greedy_chat, ref_chat)); /* --greedy = --temp 0 --repeat-penalty 1 */
        SW_CHECK(strcmp(ref_chat_rp, ref_greedy_chat) != 0); /* the penalty changes this text */
        char *pa[] = {py_out, pyscript, s_base, KEY, MODEL, (char *)prompts[0], n_gen, NULL};
        char *err = NULL;
        o = NULL;
        SW_CHECK_INT(sw_test_run(pa, 300, &o, &err), 0);
        if (err && err[0])
            fprintf(stderr, "openai client: %s\n", err);
        json_error_t je;
        json_t *j = o ? json_loads(o, JSON_DISABLE_EOF_CHECK, &je) : NULL;
        SW_CHECK(j != NULL);
        const char *chat = json_string_value(json_object_get(j, "chat"));
        SW_CHECK(chat && !strcmp(chat, ref_greedy_chat));
        const char *cs = json_string_value(json_object_get(j, "chat_stream"));
        SW_CHECK(cs && !strcmp(cs, ref_greedy_chat));
        SW_CHECK(json_integer_value(json_object_get(j, "chat_stream_chunks")) > 2);
        SW_CHECK(json_integer_value(json_array_get(json_object_get(j, "chat_stream_usage"), 1)) ==
                 N_GEN);
        const char *cm = json_string_value(json_object_get(j, "completion"));
        SW_CHECK(cm && !strcmp(cm, ref_greedy));
        const char *cms = json_string_value(json_object_get(j, "completion_stream"));
        SW_CHECK(cms && !strcmp(cms, ref_greedy));
        const char *ng = json_string_value(json_object_get(j, "chat_ngram"));
        SW_CHECK(ng && !strcmp(ng, ref_greedy_chat)); /* speculation is lossless */
        const char *rp = json_string_value(json_object_get(j, "chat_repeat_penalty"));
        SW_CHECK(rp && !strcmp(rp, ref_chat_rp));
        const char *zp = json_string_value(json_object_get(j, "chat_zero_penalties"));
        SW_CHECK(zp && !strcmp(zp, ref_greedy_chat));
        const char *fp = json_string_value(json_object_get(j, "frequency_penalty"));
        SW_CHECK(fp && !strcmp(fp, "BadRequestError"));
        const char *wk = json_string_value(json_object_get(j, "wrong_key"));
        SW_CHECK(wk && !strcmp(wk, "AuthenticationError"));
        const char *wm = json_string_value(json_object_get(j, "wrong_model"));
        SW_CHECK(wm && !strcmp(wm, "NotFoundError"));
        if (!j || !chat || strcmp(chat, ref_greedy_chat))
            fprintf(stderr, "openai client said: %s\nrun --greedy said: '%s'\n", o ? o : "",
                    ref_greedy_chat);
        json_decref(j);
        free(o);
        free(err);
    }
    free(py);

    /* /metrics counted it */
    SW_CHECK_INT(s_http("/metrics", KEY, NULL, &resp, NULL), 200);
    SW_CHECK(strstr(resp, "shardwire_gateway_requests_total{endpoint=\"completions\",status="
                          "\"413\"} ") != NULL);
    SW_CHECK(strstr(resp, "shardwire_gateway_errors_total{code=\"client_gone\"}") != NULL);
    SW_CHECK(strstr(resp, "shardwire_gateway_errors_total{code=\"model_not_found\"} ") != NULL);
    SW_CHECK(strstr(resp, "shardwire_gateway_time_to_first_token_seconds_count") != NULL);
    SW_CHECK(strstr(resp, "shardwire_gateway_tokens_total{kind=\"completion\"}") != NULL);
    SW_CHECK(strstr(resp, "shardwire_gateway_tree_rounds_total ") != NULL);
    SW_CHECK(strstr(resp, "shardwire_gateway_ahead_rounds_total{outcome=\"hit\"} ") != NULL);
    SW_CHECK(strstr(resp, "shardwire_gateway_prefix_tokens_reused_total ") != NULL);
    free(resp);

out:
    for (int i = 0; i < 4; i++)
        sw_test_kill(bg[i]);
    sw_test_kill(serve);
    sw_test_kill(nodes[0]);
    sw_test_kill(nodes[1]);
    sw_test_kill(relay);
    return sw_test_done();
}
