/*
 * test_serve_api.c - the HTTP API's promises that test_serve.c does not
 * cover (docs/api.md), with a real relay, real nodes and `shardwire serve`
 * on loopback:
 *
 *  - a model named by a prefix of 8 hex digits of its fingerprint is served;
 *    7 digits are not (404 model_not_found);
 *  - `stop`: the text ends before the first stop string, finish_reason
 *    "stop", and the head stopped generating: it logs the client's Cancel
 *    for a stop string (the client library matches stop strings and cancels
 *    at the head; the completion-token count is the client's own);
 *  - `shardwire.head`: a named head is used; an unknown name is refused;
 *  - several heads serving the model: 503 no_head naming them; with
 *    `shardwire.head` the request runs, with the same text;
 *  - busy: with the head's one session in use and no queue, 503 busy with
 *    Retry-After;
 *  - a stream that goes idle gets ": keep-alive" comments (15 s), and an
 *    error after the stream started (the tail killed, recovery given up)
 *    arrives as `data: {"error": ...}` followed by `data: [DONE]`;
 *  - the relay gone: 503 relay_unreachable;
 *  - max_tokens beyond the context: 400 naming max_tokens and its most;
 *  - SIGINT (Ctrl-C) on a gateway mid-stream: the stream ends with an error
 *    event (code shutting_down) and [DONE]; the gateway exits 0.
 */
#include "sw_fault.h"
#include "sw_test.h"

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROMPT "List three colors of the rainbow:\n1."

static char s_relay[64], s_base[64], s_curl[32];
static const char *s_model;

/* POST (body) or GET (no body) path; the HTTP status, the body in *resp
 * (malloc'd) and the headers in *hdrs when asked. */
static int s_http(const char *path, const char *body, char **resp, char **hdrs)
{
    char url[160], out[300], hd[300];
    snprintf(url, sizeof url, "%s%s", s_base, path);
    snprintf(out, sizeof out, "%s", sw_test_log("curl.out"));
    snprintf(hd, sizeof hd, "%s", sw_test_log("curl.hdr"));
    char *argv[] = {s_curl,
                    "-s",
                    "--max-time",
                    "120",
                    "-o",
                    out,
                    "-D",
                    hd,
                    "-w",
                    "%{http_code}",
                    "-H",
                    "Content-Type: application/json",
                    body ? "--data-binary" : url,
                    (char *)body,
                    body ? url : NULL,
                    NULL};
    char *code = NULL;
    int rc = sw_test_run(argv, 150, &code, NULL);
    int status = rc == 0 && code ? atoi(code) : -1;
    free(code);
    *resp = sw_test_read_file(out, NULL);
    if (!*resp)
        *resp = strdup("");
    if (hdrs) {
        *hdrs = sw_test_read_file(hd, NULL);
        if (!*hdrs)
            *hdrs = strdup("");
    }
    return status;
}

/* A completion request's JSON: greedy, n tokens, extra fields (a JSON
 * fragment starting with ',' or ""). */
static char *s_body(const char *model, int n, const char *extra, int stream)
{
    json_t *m = json_string(model), *p = json_string(PROMPT);
    char *qm = json_dumps(m, JSON_ENCODE_ANY), *qp = json_dumps(p, JSON_ENCODE_ANY);
    char *b = malloc(1024);
    snprintf(b, 1024, "{\"model\":%s,\"prompt\":%s,\"max_tokens\":%d,\"temperature\":0%s%s}", qm,
             qp, n, stream ? ",\"stream\":true" : "", extra);
    json_decref(m);
    json_decref(p);
    free(qm);
    free(qp);
    return b;
}

/* choices[0].text, finish_reason and usage.completion_tokens of a response. */
static int s_parse(const char *resp, char *text, size_t len, char *finish, size_t flen, int *n_tok)
{
    json_error_t je;
    json_t *j = json_loads(resp, 0, &je);
    json_t *c = j ? json_array_get(json_object_get(j, "choices"), 0) : NULL;
    const char *t = json_string_value(json_object_get(c, "text"));
    const char *f = json_string_value(json_object_get(c, "finish_reason"));
    snprintf(text, len, "%s", t ? t : "");
    snprintf(finish, flen, "%s", f ? f : "");
    *n_tok =
        (int)json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens"));
    json_decref(j);
    return t ? 0 : -1;
}

static pid_t s_node(const char *name, const char *layers, const char *const *extra)
{
    char *argv[32];
    int n = 0;
    argv[n++] = (char *)sw_test_bin("shardwire-node");
    argv[n++] = "--model";
    argv[n++] = (char *)s_model;
    argv[n++] = "--layers";
    argv[n++] = (char *)layers;
    argv[n++] = "--relay";
    argv[n++] = s_relay;
    argv[n++] = "--name";
    argv[n++] = (char *)name;
    argv[n++] = "--threads";
    argv[n++] = "1";
    argv[n++] = "--insecure-loopback";
    for (int i = 0; extra && extra[i] && n < 31; i++)
        argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    return sw_test_spawn(argv, sw_test_log("nodes.log"));
}

/* The model's id and fingerprint from /v1/models and `shardwire status`. */
static int s_model_ids(char *id, size_t id_len, char *fp, size_t fp_len)
{
    char *resp;
    int st = s_http("/v1/models", NULL, &resp, NULL);
    json_t *j = json_loads(resp, 0, NULL);
    const char *v =
        json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id"));
    snprintf(id, id_len, "%s", v ? v : "");
    json_decref(j);
    free(resp);
    char *argv[] = {(char *)sw_test_bin("shardwire"),
                    "status",
                    "--relay",
                    s_relay,
                    "--json",
                    "--insecure-loopback",
                    NULL};
    char *out = NULL;
    fp[0] = 0;
    if (sw_test_run(argv, 20, &out, NULL) == 0 && out) {
        json_t *s = json_loads(out, JSON_DISABLE_EOF_CHECK, NULL);
        json_t *peers = json_object_get(s, "peers");
        for (size_t i = 0; i < json_array_size(peers); i++) {
            const char *m = json_string_value(json_object_get(json_array_get(peers, i), "model"));
            if (m && strlen(m) == 64)
                snprintf(fp, fp_len, "%s", m);
        }
        json_decref(s);
    }
    free(out);
    return st == 200 && id[0] && fp[0] ? 0 : -1;
}

int main(void)
{
    s_model = sw_test_model();
    signal(SIGPIPE, SIG_IGN);
    snprintf(s_curl, sizeof s_curl, "%s",
             access("/usr/bin/curl", X_OK) == 0 ? "/usr/bin/curl" : "/bin/curl");
    if (access(s_curl, X_OK) != 0)
        sw_test_skip("curl is not installed (scripts/deps.sh installs it)");
    snprintf(s_relay, sizeof s_relay, "tcp://127.0.0.1:%d", sw_test_free_port());
    int port = sw_test_free_port();
    snprintf(s_base, sizeof s_base, "http://127.0.0.1:%d", port);
    char listen[64];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);

    /* the relay's heartbeat at 5 s: a stopped tail stays in the table for 25 s */
    char *ra[] = {(char *)sw_test_bin("shardwire-relay"),
                  "--listen",
                  s_relay,
                  "--heartbeat-ms",
                  "5000",
                  "--insecure-loopback",
                  NULL};
    pid_t relay = sw_test_spawn(ra, sw_test_log("relay.log"));
    char *ga[] = {(char *)sw_test_bin("shardwire"),
                  "serve",
                  "--relay",
                  s_relay,
                  "--insecure-loopback",
                  "--listen",
                  listen,
                  "--insecure-no-api-key",
                  NULL};
    pid_t serve = sw_test_spawn(ga, sw_test_log("serve.log"));
    const char *head_x[] = {"--max-sessions",      "1", "--max-queue", "0",
                            "--recover-timeout-s", "3", NULL};
    pid_t head = s_node("head", "0:15", head_x);
    pid_t tail = s_node("tail", "15:end", NULL), head2 = 0, bg = 0;
    SW_CHECK_INT(sw_test_wait_peers(s_relay, 2, 60), 0);
    char gw_ep[80];
    snprintf(gw_ep, sizeof gw_ep, "tcp://%s", listen);
    SW_CHECK_INT(sw_test_wait_listen(gw_ep, 30), 0);

    char id[256], fp[80], text[4096], ref[4096], finish[32], *resp, *hdrs, *b;
    int n_tok = 0, st = 0;
    if (s_model_ids(id, sizeof id, fp, sizeof fp) != 0) {
        SW_CHECK(!"the model's id and fingerprint");
        goto out;
    }

    /* the reference: 24 greedy tokens */
    b = s_body(id, 24, "", 0);
    SW_CHECK_INT(s_http("/v1/completions", b, &resp, NULL), 200);
    free(b);
    SW_CHECK_INT(s_parse(resp, ref, sizeof ref, finish, sizeof finish, &n_tok), 0);
    SW_CHECK_INT(n_tok, 24);
    SW_CHECK(!strcmp(finish, "length"));
    free(resp);

    /* max_tokens beyond the context: one line naming max_tokens and the most
     * it can be, not "the prompt (more than 0 tokens) + ..." */
    b = s_body(id, 100000, "", 0);
    SW_CHECK_INT(s_http("/v1/completions", b, &resp, NULL), 400);
    SW_CHECK(strstr(resp, "max_tokens") && strstr(resp, "ask for at most") &&
             !strstr(resp, "more than 0"));
    printf("max_tokens 100000: %s\n", resp);
    free(b);
    free(resp);

    /* Ctrl-C on a second gateway while it streams: the stream ends with an
     * error event (shutting_down) and [DONE], and the gateway exits 0 */
    {
        int port2 = sw_test_free_port();
        char listen2[64], url2[160];
        snprintf(listen2, sizeof listen2, "127.0.0.1:%d", port2);
        snprintf(url2, sizeof url2, "http://%s/v1/completions", listen2);
        char *g2a[] = {(char *)sw_test_bin("shardwire"),
                       "serve",
                       "--relay",
                       s_relay,
                       "--insecure-loopback",
                       "--listen",
                       listen2,
                       "--insecure-no-api-key",
                       NULL};
        pid_t serve2 = sw_test_spawn(g2a, sw_test_log("serve2.log"));
        char ep2[80];
        snprintf(ep2, sizeof ep2, "tcp://%s", listen2);
        SW_CHECK_INT(sw_test_wait_listen(ep2, 30), 0);
        const char *sse2 = sw_test_log("sigint.sse");
        b = s_body(id, 400, "", 1);
        char *c2[] = {s_curl,
                      "-s",
                      "-N",
                      "--max-time",
                      "120",
                      "-H",
                      "Content-Type: application/json",
                      "--data-binary",
                      b,
                      url2,
                      NULL};
        pid_t cl = sw_test_spawn_io(c2, sse2, sw_test_log("sigint.err"));
        free(b);
        for (int i = 0; i < 300 && sw_test_count_in_file(sse2, "\"text\":") < 2; i++)
            usleep(100000);
        SW_CHECK(sw_test_count_in_file(sse2, "\"text\":") >= 2);
        kill(serve2, SIGINT);
        SW_CHECK_INT(sw_test_wait(cl, 30), 0);
        SW_CHECK_INT(sw_test_wait(serve2, 30), 0);
        char *s2 = sw_test_read_file(sse2, NULL);
        const char *e2 = s2 ? strstr(s2, "data: {\"error\"") : NULL;
        SW_CHECK(e2 && strstr(e2, "shutting_down") && strstr(e2, "data: [DONE]"));
        if (!e2)
            fprintf(stderr, "the stream after SIGINT: %s\n",
                    s2 ? s2 + (strlen(s2) > 600 ? strlen(s2) - 600 : 0) : "(nothing)");
        free(s2);
        /* the head's one session is free again once the cancel reached it */
        st = 0;
        for (int i = 0; i < 50 && st != 200; i++) {
            if (i)
                usleep(200000);
            b = s_body(id, 4, "", 0);
            st = s_http("/v1/completions", b, &resp, NULL);
            free(b);
            free(resp);
        }
        SW_CHECK_INT(st, 200);
    }

    /* a fingerprint prefix of 8 hex digits names the model; 7 do not */
    char pre[16];
    snprintf(pre, sizeof pre, "%.8s", fp);
    b = s_body(pre, 24, "", 0);
    SW_CHECK_INT(s_http("/v1/completions", b, &resp, NULL), 200);
    free(b);
    SW_CHECK_INT(s_parse(resp, text, sizeof text, finish, sizeof finish, &n_tok), 0);
    SW_CHECK(!strcmp(text, ref));
    free(resp);
    pre[7] = 0;
    b = s_body(pre, 24, "", 0);
    SW_CHECK_INT(s_http("/v1/completions", b, &resp, NULL), 404);
    SW_CHECK(strstr(resp, "model_not_found") != NULL);
    free(b);
    free(resp);

    /* stop: a string from the middle of the reference */
    size_t rl = strlen(ref);
    if (rl < 12) {
        SW_CHECK(!"a reference of at least 12 characters");
        goto out;
    }
    char stop[8], want[4096], extra[128];
    snprintf(stop, sizeof stop, "%.3s", ref + rl / 3);
    snprintf(want, sizeof want, "%.*s", (int)(strstr(ref, stop) - ref), ref);
    json_t *js = json_string(stop);
    char *qs = json_dumps(js, JSON_ENCODE_ANY);
    snprintf(extra, sizeof extra, ",\"stop\":[\"never-in-it\",%s]", qs);
    free(qs);
    json_decref(js);
    /* the head itself stops: the client library sends it a Cancel at the match, which the
     * head logs (the usage count below is the client's, which stops reading either way) */
    const char *stop_line = "cancelled by the client (a stop string was generated)";
    const int stops0 = sw_test_count_in_file(sw_test_log("nodes.log"), stop_line);
    b = s_body(id, 24, extra, 0);
    SW_CHECK_INT(s_http("/v1/completions", b, &resp, NULL), 200);
    free(b);
    SW_CHECK_INT(s_parse(resp, text, sizeof text, finish, sizeof finish, &n_tok), 0);
    SW_CHECK(!strcmp(text, want));
    SW_CHECK(!strcmp(finish, "stop"));
    SW_CHECK(n_tok > 0 && n_tok < 24);
    for (const double until = swf_now_ms() + 5000; swf_now_ms() < until;) {
        if (sw_test_count_in_file(sw_test_log("nodes.log"), stop_line) > stops0)
            break;
        usleep(50000);
    }
    SW_CHECK_INT(sw_test_count_in_file(sw_test_log("nodes.log"), stop_line), stops0 + 1);
    printf("stop %s: %d of 24 tokens, text '%s'\n", stop, n_tok, text);
    free(resp);

    /* shardwire.head: the named head; an unknown one is refused */
    b = s_body(id, 24, ",\"shardwire\":{\"head\":\"head\"}", 0);
    SW_CHECK_INT(s_http("/v1/completions", b, &resp, NULL), 200);
    free(b);
    SW_CHECK_INT(s_parse(resp, text, sizeof text, finish, sizeof finish, &n_tok), 0);
    SW_CHECK(!strcmp(text, ref));
    free(resp);
    b = s_body(id, 24, ",\"shardwire\":{\"head\":\"nobody\"}", 0);
    SW_CHECK_INT(s_http("/v1/completions", b, &resp, NULL), 503);
    SW_CHECK(strstr(resp, "no_head") && strstr(resp, "nobody"));
    free(b);
    free(resp);

    /* several heads: refused, naming them, unless one is named */
    head2 = s_node("head2", "0:15", NULL);
    SW_CHECK_INT(sw_test_wait_peers(s_relay, 3, 60), 0);
    st = 0;
    for (int i = 0; i < 20 && st != 503; i++) { /* the gateway's table cache catches up */
        if (i)
            usleep(500000);
        b = s_body(id, 24, "", 0);
        st = s_http("/v1/completions", b, &resp, NULL);
        free(b);
        if (st == 503)
            break;
        free(resp);
    }
    SW_CHECK_INT(st, 503);
    SW_CHECK(st == 503 && strstr(resp, "no_head") && strstr(resp, "head2") &&
             strstr(resp, "2 heads"));
    if (st == 503)
        free(resp);
    b = s_body(id, 24, ",\"shardwire\":{\"head\":\"head2\"}", 0);
    SW_CHECK_INT(s_http("/v1/completions", b, &resp, NULL), 200);
    free(b);
    SW_CHECK_INT(s_parse(resp, text, sizeof text, finish, sizeof finish, &n_tok), 0);
    SW_CHECK(!strcmp(text, ref));
    free(resp);
    sw_test_kill(head2);
    head2 = 0;
    for (int i = 0; i < 100 && swf_peer(s_relay, "head2", NULL, NULL) == 1; i++)
        usleep(100000);

    /* a long stream in the background holds the head's one session */
    const char *sse = sw_test_log("stream.sse");
    char url[160];
    snprintf(url, sizeof url, "%s/v1/completions", s_base);
    b = s_body(id, 400, ",\"shardwire\":{\"head\":\"head\"}", 1);
    char *ca[] = {
        s_curl,          "-s", "-N", "--max-time", "120", "-H", "Content-Type: application/json",
        "--data-binary", b,    url,  NULL};
    bg = sw_test_spawn_io(ca, sse, sw_test_log("stream.err"));
    free(b);
    for (int i = 0; i < 300 && sw_test_count_in_file(sse, "\"text\":") < 2; i++)
        usleep(100000);
    SW_CHECK(sw_test_count_in_file(sse, "\"text\":") >= 2);

    /* busy: no session and no queue place left (the head named: the
     * gateway's cached table may still list head2 for a moment) */
    b = s_body(id, 4, ",\"shardwire\":{\"head\":\"head\"}", 0);
    SW_CHECK_INT(s_http("/v1/completions", b, &resp, &hdrs), 503);
    SW_CHECK(strstr(resp, "busy") != NULL);
    if (!strstr(resp, "busy"))
        fprintf(stderr, "busy: %s\n", resp);
    SW_CHECK(strstr(hdrs, "Retry-After: 1") || strstr(hdrs, "retry-after: 1"));
    free(b);
    free(resp);
    free(hdrs);

    /* the stream idle for 17 s: a keep-alive comment; then the tail killed
     * and recovery given up (3 s): an error event and [DONE] */
    kill(tail, SIGSTOP);
    usleep(300000);
    int chunks = sw_test_count_in_file(sse, "\"text\":");
    sleep(17);
    SW_CHECK_INT(sw_test_count_in_file(sse, "\"text\":"), chunks); /* idle indeed */
    SW_CHECK(sw_test_count_in_file(sse, ": keep-alive") >= 1);
    kill(tail, SIGKILL);
    sw_test_kill(tail);
    tail = 0;
    int rc = sw_test_wait(bg, 60);
    bg = 0;
    SW_CHECK_INT(rc, 0);
    char *s = sw_test_read_file(sse, NULL);
    const char *err = s ? strstr(s, "data: {\"error\"") : NULL;
    SW_CHECK(err != NULL);
    SW_CHECK(err && strstr(err, "data: [DONE]") != NULL);
    if (!err)
        fprintf(stderr, "the stream's end: %s\n",
                s ? s + (strlen(s) > 600 ? strlen(s) - 600 : 0) : "(nothing)");
    free(s);

    /* the relay gone: relay_unreachable. Asked until the first 503 (the gateway's status
       query to the relay unanswered: the first try here), which must name that code: a 503
       under another code ends the loop too (m:relay-unreachable's head_gone took about 10 s
       a try, 30 tries in all: 357 s, past the 120 s a budgeted run gives this test) */
    sw_test_kill(relay);
    relay = 0;
    st = 0;
    int hit = 0;
    for (int i = 0; i < 30 && st != 503; i++) {
        b = s_body(id, 4, "", 0);
        st = s_http("/v1/completions", b, &resp, NULL);
        free(b);
        hit = st == 503 && strstr(resp, "relay_unreachable") != NULL;
        free(resp);
        if (st != 503)
            sleep(1);
    }
    SW_CHECK_INT(st, 503);
    SW_CHECK(hit); /* the code says what is wrong, not only the status */

out:
    sw_test_kill(bg);
    sw_test_kill(head2);
    sw_test_kill(tail);
    sw_test_kill(head);
    sw_test_kill(serve);
    sw_test_kill(relay);
    return sw_test_done();
}
