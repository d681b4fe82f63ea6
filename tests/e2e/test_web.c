/*
 * test_web.c - the web page of `shardwire serve` in a real headless browser
 * (Debian's chromium over the DevTools protocol, driven by web_driver.py),
 * against a relay, a head (drafting with its own model) and a tail on
 * loopback:
 *
 *  - the page and its files come from the binary, with a Content-Security-Policy
 *    that allows only the gateway's own origin; /v1/cluster needs the key;
 *  - a wrong key is refused on the page (and not kept), and by /v1/cluster;
 *  - the side panel's sampling fields are empty until the key is accepted,
 *    then show the gateway's defaults (GET /v1/defaults, which needs the key):
 *    the max_tokens a request gets (SW_GATEWAY_DEFAULT_MAX_TOKENS), the
 *    sampling defaults of sw_limits.h, the penalty off; the page keeps no
 *    copy of them;
 *  - a message streams token by token (one token per round trip: many
 *    growth steps over time) and its text, at temperature 0, equals
 *    `shardwire run --greedy --chat` (the HTTP API's OpenAI semantics: no
 *    repetition penalty unless asked);
 *  - Stop ends a long generation at once on the page, and the cluster frees
 *    it: the head logs the cancel and the tail closes the session;
 *  - the cluster page lists both nodes with their roles, layer ranges and
 *    backend, and its numbers (messages the relay forwarded, tokens
 *    streamed, generations, the nodes' messages) move with one more
 *    generation; the round-trip chart draws a bar per generation; the page
 *    names the model and the chart's axes; the health dot says "ok";
 *  - the end of a reply is in view; a reload keeps the conversation, the list
 *    of chats and the settings; Regenerate gives the same greedy reply;
 *    a failed turn (max_tokens beyond the context) is marked, left out of the
 *    stored chat and its text put back; Edit takes the last turn back;
 *  - Markdown: a stored chat picked from the list shows bold, italics, lists,
 *    a quote and a C code block in a monospace font, highlighted (comments,
 *    keywords, numbers, strings), whose Copy button copies its text; the
 *    model and draft selects show their whole option text;
 *  - at 390 px (a phone): no sideways scrolling, the chat gets the width and
 *    the settings open over it; the cluster page fits too;
 *  - /favicon.ico is the page's icon (no 404).
 *
 * Screenshots (1280 px, and 390 px for 6-8) go to the build's Testing/web/
 * folder: look at them after a change to the page. Chromium and the
 * driver's websocket-client package are installed by scripts/deps.sh and
 * scripts/dev/py_venv.sh the first time; without them the test is skipped.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sw_limits.h"
#include "sw_test.h"

#define KEY "web-test-key-0123456789abcdef"
#define MODEL "SmolLM2-135M-Instruct.Q4_1"
#define N_GEN 32
static const char *s_prompt = "Write a haiku about networks.";

static char s_base[64];

/* HTTP status of a GET with curl (key NULL: none), and the headers into *hdr. */
static int s_get(const char *path, const char *key, char **hdr)
{
    char cmd[512], auth[128] = "";
    if (key)
        snprintf(auth, sizeof auth, "-H 'Authorization: Bearer %s'", key);
    snprintf(cmd, sizeof cmd, "curl -s --path-as-is -D - -o /dev/null %s '%s%s' | tr -d '\\r'",
             auth, s_base, path);
    char *out = NULL;
    int rc = sw_test_sh(cmd, 30, &out);
    int status = rc == 0 && out && !strncmp(out, "HTTP/1.1 ", 9) ? atoi(out + 9) : 0;
    if (hdr)
        *hdr = out;
    else
        free(out);
    return status;
}

static json_t *s_get_obj(json_t *j, const char *a, const char *b)
{
    json_t *v = json_object_get(j, a);
    return b ? json_object_get(v, b) : v;
}

static long long s_num(json_t *j, const char *a, const char *b)
{
    return (long long)json_number_value(s_get_obj(j, a, b)); /* an integer or a real */
}

/* The value the page shows in its field id (an object of id -> value), as a number; NAN when
 * it shows none. */
static double s_setting(json_t *settings, const char *id)
{
    const char *v = json_string_value(json_object_get(settings, id));
    return v && v[0] ? strtod(v, NULL) : NAN;
}

/* Cell c of row r of a node table (an array of arrays of strings), or "". */
static const char *s_cell(json_t *rows, size_t r, size_t c)
{
    const char *s = json_string_value(json_array_get(json_array_get(rows, r), c));
    return s ? s : "";
}

int main(void)
{
    const char *model = sw_test_model();
    const char *src = sw_test_env("SW_SOURCE_DIR");
    char cmd[1024], *out = NULL;

    /* The browser (Debian's chromium) and the driver's Python package. */
    snprintf(cmd, sizeof cmd, "SW_DEPS_EXTRA='chromium curl' bash %s/scripts/deps.sh", src);
    if (sw_test_sh(cmd, 900, NULL) != 0 || access("/usr/bin/chromium", X_OK) != 0)
        sw_test_skip(
            "chromium could not be installed (scripts/deps.sh with SW_DEPS_EXTRA=chromium)");
    char venv[300];
    snprintf(venv, sizeof venv, "%s/venv", sw_test_env("SW_BUILD_DIR"));
    if (!getenv("SW_VENV"))
        setenv("SW_VENV", venv, 1);
    snprintf(cmd, sizeof cmd, "bash %s/scripts/dev/py_venv.sh websocket-client:websocket", src);
    char *py = NULL;
    if (sw_test_sh(cmd, 600, &py) != 0 || !py || !py[0])
        sw_test_skip("the websocket-client package could not be installed (PyPI unreachable?)");
    py[strcspn(py, "\n")] = 0;

    /* A cluster and its gateway. */
    char relay[64], keyfile[256], listen[64];
    snprintf(relay, sizeof relay, "tcp://127.0.0.1:%d", sw_test_free_port());
    int port = sw_test_free_port();
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    snprintf(s_base, sizeof s_base, "http://127.0.0.1:%d", port);
    snprintf(keyfile, sizeof keyfile, "%s", sw_test_log("api.keys"));
    FILE *kf = fopen(keyfile, "w");
    if (!kf)
        sw_test_skip("cannot write the key file");
    fprintf(kf, "%s\n", KEY);
    fclose(kf);
    chmod(keyfile, 0600);
    char head_log[256], tail_log[256];
    snprintf(head_log, sizeof head_log, "%s", sw_test_log("head.log"));
    snprintf(tail_log, sizeof tail_log, "%s", sw_test_log("tail.log"));
    char *ra[] = {(char *)sw_test_bin("shardwire-relay"), "--listen", relay, "--insecure-loopback",
                  NULL};
    pid_t pr = sw_test_spawn(ra, sw_test_log("relay.log"));
    char *ha[] = {(char *)sw_test_bin("shardwire-node"),
                  "--model",
                  (char *)model,
                  "--layers",
                  "0:15",
                  "--relay",
                  relay,
                  "--name",
                  "head",
                  "--threads",
                  "1",
                  "--insecure-loopback",
                  "--draft-model",
                  (char *)model,
                  NULL};
    /* The tail holds every round 25 ms (--test-slow-ms): a round trip takes that or more on
     * any machine, so the reply's growth (more than a few animation frames) and Stop (before
     * the long reply ends) are seen on a fast machine too, where 32 tokens came in < 100 ms. */
    char *ta[] = {(char *)sw_test_bin("shardwire-node"),
                  "--model",
                  (char *)model,
                  "--layers",
                  "15:end",
                  "--relay",
                  relay,
                  "--name",
                  "tail",
                  "--threads",
                  "1",
                  "--insecure-loopback",
                  "--test-slow-ms",
                  "25",
                  NULL};
    pid_t ph = sw_test_spawn(ha, head_log), pt = sw_test_spawn(ta, tail_log), ps = 0;
    if (sw_test_wait_peers(relay, 2, 60) != 0) {
        SW_CHECK(!"the nodes came up");
        goto out;
    }
    char *sa[] = {(char *)sw_test_bin("shardwire"),
                  "serve",
                  "--relay",
                  relay,
                  "--insecure-loopback",
                  "--listen",
                  listen,
                  "--api-key-file",
                  keyfile,
                  NULL};
    ps = sw_test_spawn(sa, sw_test_log("serve.log"));
    snprintf(cmd, sizeof cmd, "tcp://%s", listen);
    SW_CHECK_INT(sw_test_wait_listen(cmd, 30), 0);

    /* The page comes from the binary, locked to this origin; the API needs the key. */
    char *hdr = NULL;
    SW_CHECK_INT(s_get("/", NULL, &hdr), 200);
    SW_CHECK(hdr && strstr(hdr, "Content-Type: text/html; charset=utf-8"));
    SW_CHECK(hdr && strstr(hdr, "Content-Security-Policy: default-src 'none'; script-src 'self'"));
    SW_CHECK(hdr && strstr(hdr, "X-Frame-Options: DENY"));
    free(hdr);
    SW_CHECK_INT(s_get("/web/app.js", NULL, NULL), 200);
    SW_CHECK_INT(s_get("/web/style.css", NULL, NULL), 200);
    SW_CHECK_INT(s_get("/web/md.js", NULL, NULL), 200);
    SW_CHECK_INT(s_get("/favicon.ico", NULL, &hdr), 200); /* no 404 in /metrics for it */
    SW_CHECK(hdr && strstr(hdr, "Content-Type: image/svg+xml"));
    free(hdr);
    hdr = NULL;
    SW_CHECK_INT(s_get("/health", NULL, &hdr), 200);
    free(hdr);
    hdr = NULL;
    SW_CHECK_INT(s_get("/web/../../etc/passwd", NULL, NULL), 404);
    SW_CHECK_INT(s_get("/web/nothing.js", NULL, NULL), 404);
    SW_CHECK_INT(s_get("/v1/cluster", NULL, NULL), 401);
    SW_CHECK_INT(s_get("/v1/cluster", "wrong-key-0123456789", NULL), 401);
    SW_CHECK_INT(s_get("/v1/cluster", KEY, NULL), 200);
    SW_CHECK_INT(s_get("/v1/defaults", NULL, NULL), 401);
    SW_CHECK_INT(s_get("/v1/defaults", KEY, NULL), 200);
    snprintf(cmd, sizeof cmd,
             "grep -c 'https\\?://' %s/gateway/web/*.html %s/gateway/web/*.js | "
             "grep -v ':0$' || true",
             src, src);
    SW_CHECK_INT(sw_test_sh(cmd, 10, &out), 0);
    SW_CHECK(out && !out[0]); /* the page names no other server */
    free(out);
    out = NULL;

    /* The reference: `shardwire run --greedy --chat`. */
    char n_gen[16], ref[4096] = "";
    snprintf(n_gen, sizeof n_gen, "%d", N_GEN);
    char *rr[] = {(char *)sw_test_bin("shardwire"),
                  "run",
                  "--relay",
                  relay,
                  "--insecure-loopback",
                  "--greedy",
                  "--chat",
                  "-p",
                  (char *)s_prompt,
                  "-n",
                  n_gen,
                  "--json",
                  NULL};
    SW_CHECK_INT(sw_test_run(rr, 120, &out, NULL), 0);
    json_error_t je;
    json_t *rj = out ? json_loads(out, JSON_DISABLE_EOF_CHECK, &je) : NULL;
    if (json_is_string(json_object_get(rj, "text")))
        snprintf(ref, sizeof ref, "%s", json_string_value(json_object_get(rj, "text")));
    json_decref(rj);
    free(out);
    out = NULL;
    SW_CHECK(ref[0]);

    /* The browser. */
    char shots[512], script[512];
    snprintf(shots, sizeof shots, "%s/Testing/web", sw_test_env("SW_BUILD_DIR"));
    snprintf(script, sizeof script, "%s/tests/e2e/web_driver.py", src);
    int cancels0 = sw_test_count_in_file(tail_log, "closed by head (cancelled)");
    char *da[] = {py, script, s_base, KEY, MODEL, (char *)s_prompt, n_gen, shots, NULL};
    char *err = NULL;
    int rc = sw_test_run(da, 400, &out, &err);
    SW_CHECK_INT(rc, 0);
    json_t *j = out ? json_loads(out, JSON_DISABLE_EOF_CHECK, &je) : NULL;
    SW_CHECK(j != NULL);
    if (rc != 0 || !j)
        fprintf(stderr, "web_driver: %s\n%s\n", out ? out : "", err ? err : "");
    else
        fprintf(stderr, "web_driver: %s\n", out);
    free(err);
    if (!j)
        goto out; /* nothing to check (the driver's error is above) */

    /* a wrong key */
    const char *refused = json_string_value(json_object_get(j, "key_refused"));
    SW_CHECK(refused && strstr(refused, "Refused") && strstr(refused, "401"));
    SW_CHECK(json_is_true(json_object_get(j, "key_dialog_after_wrong")));
    SW_CHECK(json_is_null(json_object_get(j, "key_stored_after_wrong")));
    SW_CHECK_INT(s_num(j, "cluster_wrong_key", NULL), 401);
    SW_CHECK(json_is_true(json_object_get(j, "key_stored")));

    /* the settings: empty before the key, then the gateway's defaults, never the page's own */
    static const char *fields[] = {"temperature", "top-p",          "top-k",
                                   "min-p",       "repeat-penalty", "max-tokens"};
    json_t *set0 = json_object_get(j, "settings_before_key"), *set = json_object_get(j, "settings");
    SW_CHECK_INT(json_object_size(set0), 6);
    for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
        const char *v = json_string_value(json_object_get(set0, fields[f]));
        SW_CHECK(v && !v[0]);
        if (v && v[0])
            fprintf(stderr, "the page shows %s = '%s' before the gateway said\n", fields[f], v);
    }
    SW_CHECK(s_setting(set, "max-tokens") == SW_GATEWAY_DEFAULT_MAX_TOKENS);
    SW_CHECK(s_setting(set, "temperature") == SW_SAMPLING_TEMP);
    SW_CHECK(s_setting(set, "top-p") == SW_SAMPLING_TOP_P);
    SW_CHECK(s_setting(set, "top-k") == SW_SAMPLING_TOP_K);
    SW_CHECK(s_setting(set, "min-p") == SW_SAMPLING_MIN_P);
    SW_CHECK(s_setting(set, "repeat-penalty") == SW_SAMPLING_HTTP_REP_PENALTY);
    const char *rp_max = json_string_value(json_object_get(j, "repeat_penalty_max"));
    SW_CHECK(rp_max && strtod(rp_max, NULL) == SW_SAMPLING_MAX_REP_PENALTY);

    /* a message, token by token, equal to run --greedy */
    const char *text = json_string_value(json_object_get(j, "chat_text"));
    SW_CHECK(text && !strcmp(text, ref));
    if (text && strcmp(text, ref))
        fprintf(stderr, "page: '%s'\nrun:  '%s'\n", text, ref);
    SW_CHECK(s_num(j, "chat_chunks", NULL) >= N_GEN / 2);
    /* The page draws once per animation frame (app.js), so a fast cluster's
     * 32 tokens in ~300 ms show in ~15-20 steps; a reply drawn in one piece
     * shows in 1. At least 4 steps over more than 100 ms is "it grew" (the
     * tail's --test-slow-ms 25 makes the 32 tokens last 775 ms or more on
     * any machine, so a fast one cannot draw them in fewer frames). */
    SW_CHECK(s_num(j, "chat_steps", NULL) >= 4);
    SW_CHECK(json_number_value(json_object_get(j, "chat_span_ms")) > 100);
    const char *stats = json_string_value(json_object_get(j, "chat_stats"));
    SW_CHECK(stats && strstr(stats, "32 tokens") && strstr(stats, "tokens per round trip"));

    /* stop */
    SW_CHECK(json_is_true(json_object_get(j, "stop_enabled")));
    const char *st = json_string_value(json_object_get(j, "stop_state"));
    SW_CHECK(st && !strcmp(st, "stopped"));
    long long at = s_num(j, "stop_len_at_click", NULL), after = s_num(j, "stop_len_after", NULL);
    SW_CHECK(at > 40 && at == after && at < 3000);
    SW_CHECK(json_is_true(json_object_get(j, "stop_send_enabled")));
    SW_CHECK(sw_test_wait_text(head_log, "ended: cancelled by the client", 15));
    for (int i = 0;
         i < 150 && sw_test_count_in_file(tail_log, "closed by head (cancelled)") <= cancels0; i++)
        usleep(100000);
    SW_CHECK(sw_test_count_in_file(tail_log, "closed by head (cancelled)") > cancels0);

    /* the cluster page */
    json_t *nb = json_object_get(j, "nodes_before"), *na = json_object_get(j, "nodes_after");
    SW_CHECK_INT(json_array_size(nb), 2);
    SW_CHECK(!strcmp(s_cell(nb, 0, 0), "head") && !strcmp(s_cell(nb, 0, 1), "head"));
    SW_CHECK(!strcmp(s_cell(nb, 0, 2), "0:15 of 30"));
    SW_CHECK(!strcmp(s_cell(nb, 1, 0), "tail") && !strcmp(s_cell(nb, 1, 1), "tail"));
    SW_CHECK(!strcmp(s_cell(nb, 1, 2), "15:30 of 30"));
    SW_CHECK(!strncmp(s_cell(nb, 0, 3), "cpu", 3) && !strncmp(s_cell(nb, 1, 3), "cpu", 3));
    SW_CHECK(strstr(s_cell(nb, 0, 4), "ms") || strstr(s_cell(nb, 0, 4), " s"));
    SW_CHECK_INT(json_array_size(na), 2);
    /* per hop, the path that carries it (these nodes have no --listen: the relay) and its
     * measured round trip (issue 39) */
    json_t *hops = json_object_get(j, "hops");
    SW_CHECK_INT(json_array_size(hops), 2);
    SW_CHECK(!strcmp(s_cell(hops, 0, 0), "head → tail") &&
             !strcmp(s_cell(hops, 1, 0), "tail → head"));
    SW_CHECK(!strncmp(s_cell(hops, 0, 1), "relay tcp://", 12));
    SW_CHECK(strstr(s_cell(hops, 0, 2), " ms") != NULL);
    SW_CHECK_INT(s_num(j, "more_status", NULL), 200);
    json_t *b = json_object_get(j, "numbers_before"), *a = json_object_get(j, "numbers_after");
    char *bs = json_dumps(b, JSON_COMPACT), *as = json_dumps(a, JSON_COMPACT);
    fprintf(stderr, "the cluster page's numbers: %s -> %s\n", bs ? bs : "", as ? as : "");
    free(bs);
    free(as);
    SW_CHECK(s_num(b, "forwarded", NULL) > 0);
    SW_CHECK(s_num(a, "forwarded", NULL) > s_num(b, "forwarded", NULL));
    SW_CHECK(s_num(a, "streamed", NULL) > s_num(b, "streamed", NULL));
    SW_CHECK_INT(s_num(a, "generations", NULL), s_num(b, "generations", NULL) + 1);
    SW_CHECK(s_num(b, "generations", NULL) >= 1);
    SW_CHECK(s_num(a, "head_msgs", NULL) > s_num(b, "head_msgs", NULL));
    SW_CHECK(s_num(a, "tail_msgs", NULL) > s_num(b, "tail_msgs", NULL));
    SW_CHECK(s_num(j, "chart_bars", NULL) >= 2);
    SW_CHECK(s_num(j, "recent_rows", NULL) >= 2);
    json_t *pipe = json_object_get(j, "pipeline");
    SW_CHECK(json_array_size(pipe) == 2 &&
             !strcmp(json_string_value(json_array_get(pipe, 0)), "head 0:15") &&
             !strcmp(json_string_value(json_array_get(pipe, 1)), "tail 15:30"));

    /* the end of a reply in view; a reload keeps the chat, the list and the settings */
    SW_CHECK(json_is_true(json_object_get(j, "chat_stats_in_view")));
    json_t *rm = json_object_get(j, "reload_msgs");
    SW_CHECK(json_array_size(rm) == 2 &&
             !strcmp(json_string_value(json_array_get(rm, 0)), "user") &&
             !strcmp(json_string_value(json_array_get(rm, 1)), "assistant"));
    SW_CHECK(json_is_true(json_object_get(j, "reload_text_same")));
    SW_CHECK_INT(s_num(j, "reload_chats", NULL), 1);
    /* kept: the fields set (temperature, draft), not top-p, left at the gateway's default (a
     * page that kept it would send the old default after the operator changed it) */
    json_t *ks = json_object_get(j, "kept_settings");
    int kept_temp = 0, kept_top_p = 0;
    for (size_t i = 0; i < json_array_size(ks); i++) {
        const char *k = json_string_value(json_array_get(ks, i));
        kept_temp += k && !strcmp(k, "temperature");
        kept_top_p += k && !strcmp(k, "top-p");
    }
    SW_CHECK(kept_temp == 1 && kept_top_p == 0);
    json_t *rs = json_object_get(j, "reload_settings");
    SW_CHECK(s_setting(rs, "temperature") == 0 && s_setting(rs, "max-tokens") == N_GEN);
    SW_CHECK(!strcmp(json_string_value(json_object_get(j, "reload_draft")), "none"));
    /* regenerate: the same greedy reply in place of the first, its end in view */
    SW_CHECK(json_is_true(json_object_get(j, "regen_same")));
    SW_CHECK_INT(s_num(j, "regen_msgs", NULL), 2);
    SW_CHECK(json_is_true(json_object_get(j, "regen_stats_in_view")));
    /* a failed turn: marked (the user's message and the error), not stored, its text back
     * in the composer, the error line in view and naming max_tokens */
    const char *fl = json_string_value(json_object_get(j, "failed_line"));
    SW_CHECK(fl && strstr(fl, "failed:") && strstr(fl, "max_tokens") && strstr(fl, "not part"));
    SW_CHECK_INT(s_num(j, "failed_marked", NULL), 2);
    SW_CHECK_INT(json_array_size(json_object_get(j, "failed_stored")), 2);
    SW_CHECK(!strcmp(json_string_value(json_object_get(j, "failed_prompt_back")), "Say hello."));
    SW_CHECK(json_is_true(json_object_get(j, "failed_in_view")));
    /* edit: the last message back in the composer, the turn out of the chat */
    SW_CHECK(!strcmp(json_string_value(json_object_get(j, "edit_prompt")), s_prompt));
    SW_CHECK_INT(s_num(j, "edit_msgs", NULL), 0);
    SW_CHECK(json_is_null(json_object_get(j, "edit_stored")));

    /* the cluster page names the model, the chart its axes; health and favicon on the page */
    const char *cm = json_string_value(json_object_get(j, "cluster_model"));
    SW_CHECK(cm && strstr(cm, MODEL));
    const char *ax = json_string_value(json_object_get(j, "chart_axes"));
    SW_CHECK(ax && strstr(ax, "ms per round trip") && strstr(ax, "tokens per round trip"));
    SW_CHECK(!strcmp(json_string_value(json_object_get(j, "health_page")), "ok"));
    const char *fav = json_string_value(json_object_get(j, "favicon_link"));
    SW_CHECK(fav && strstr(fav, "/web/favicon.svg"));

    /* Markdown: a stored chat (from the list) renders code in monospace, highlighted, with
     * Copy; nothing as HTML, no literal fences */
    json_t *ids = json_object_get(j, "chats_listed"), *md = json_object_get(j, "md");
    SW_CHECK(json_array_size(ids) >= 2 &&
             !strcmp(json_string_value(json_array_get(ids, 0)), "cmd"));
    SW_CHECK(!strcmp(json_string_value(json_object_get(md, "strong")), "bold"));
    SW_CHECK(!strcmp(json_string_value(json_object_get(md, "em")), "italic"));
    SW_CHECK(!strcmp(json_string_value(json_object_get(md, "inline_code")), "inline code"));
    const char *code = json_string_value(json_object_get(md, "code"));
    SW_CHECK(code && !strncmp(code, "#include <stdio.h>\nint main(void) {", 34));
    const char *font = json_string_value(json_object_get(md, "font"));
    SW_CHECK(font && strstr(font, "monospace"));
    SW_CHECK(s_num(md, "tokens", NULL) >= 8);
    json_t *kinds = json_object_get(md, "kinds");
    SW_CHECK_INT(json_array_size(kinds), 4); /* comment, keyword, number, string */
    json_t *items = json_object_get(md, "items");
    SW_CHECK(json_array_size(items) == 2 &&
             !strcmp(json_string_value(json_array_get(items, 1)), "second"));
    SW_CHECK(!strcmp(json_string_value(json_object_get(md, "quote")), "a quote"));
    SW_CHECK(json_is_false(json_object_get(md, "fences")));
    SW_CHECK_INT(s_num(md, "html", NULL), 0);
    const char *copied = json_string_value(json_object_get(j, "copied"));
    SW_CHECK(copied && code && !strcmp(copied, code));
    json_t *fit = json_object_get(j, "selects_fit");
    SW_CHECK(json_is_true(json_object_get(fit, "model")) &&
             json_is_true(json_object_get(fit, "draft")));

    /* 390 px: no sideways scrolling, the chat gets the width, the settings open over it */
    json_t *nw = json_object_get(j, "narrow");
    SW_CHECK(s_num(nw, "page_width", NULL) <= 390 && s_num(nw, "cluster_width", NULL) <= 390);
    SW_CHECK(s_num(nw, "messages_width", NULL) >= 370 && s_num(nw, "prompt_width", NULL) >= 200);
    SW_CHECK(!strcmp(json_string_value(json_object_get(nw, "settings_hidden")), "none"));
    SW_CHECK(!strcmp(json_string_value(json_object_get(nw, "settings_open")), "block"));
    fit = json_object_get(nw, "selects_fit");
    SW_CHECK(json_is_true(json_object_get(fit, "model")) &&
             json_is_true(json_object_get(fit, "draft")));

    /* the screenshots */
    size_t i;
    json_t *shot;
    SW_CHECK_INT(json_array_size(json_object_get(j, "screenshots")), 9);
    json_array_foreach(json_object_get(j, "screenshots"), i, shot)
    {
        size_t len = 0;
        char *png = sw_test_read_file(json_string_value(shot), &len);
        SW_CHECK(png && len > 10000 && !memcmp(png, "\x89PNG", 4));
        free(png);
    }
    fprintf(stderr, "screenshots in %s\n", shots);
    json_decref(j);
out:
    free(out);
    free(py);
    sw_test_kill(ps);
    sw_test_kill(ph);
    sw_test_kill(pt);
    sw_test_kill(pr);
    return sw_test_done();
}
