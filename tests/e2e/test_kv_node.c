/*
 * test_kv_node.c - KV caches that grow, through real processes on loopback
 * (a relay, a head 0:15 and a tail 15:30 of SmolLM2, `shardwire run`,
 * `shardwire status`), issue 33 point 5:
 *
 *  - a 32k-context cluster (--ctx 32768 --kv-mib 1024 on both, the tail's
 *    cache in q8_0): each node says at start how many sessions of what
 *    length fit (2 of 32768 positions on the head, 5 on the q8_0 tail; the
 *    rest of --max-sessions 8 only while sessions are shorter), and
 *    `status --json` and the gateway's /v1/cluster show n_ctx, kv_mib,
 *    kv_full, kv_type and max_sessions; a request that may reach 32,000 positions allocates the
 *    first step (256 positions) on each node for its short prompt before it
 *    generates, not its whole context (the nodes' debug log of each step:
 *    2.81 MiB on the head where the whole 32,006 positions (prompt + 32,000) would take 352 MiB);
 *  - contexts that disagree (a head of the model's 8192 positions, a tail
 *    whose --kv-mib 6 holds 546): the tail says its context was cut, the head
 *    says at join that the tail's is smaller and that requests are limited
 *    to it, and refuses a longer one at once naming the tail;
 *  - a session that cannot grow: on that tail, a short request of up to 261
 *    positions holds 256 while a prompt of 228 to 240 tokens takes the other
 *    256, so its growth to the 318-330 it may reach does not fit: that request ends with one clear
 * error (busy, "KV cache memory is full") and the other one finishes with exactly the tokens of
 * `shardwire generate`; the tail stays up.
 */
#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model.h"
#include "sw_fault.h"
#include "tokenizer.h"

/* `shardwire status --json` -> the peer named name (a new reference), or NULL. */
static json_t *s_status_peer(const char *ep, const char *name)
{
    char *argv[] = {(char *)sw_test_bin("shardwire"),
                    "status",
                    "--relay",
                    (char *)ep,
                    "--json",
                    "--insecure-loopback",
                    NULL};
    char *out = NULL;
    json_t *found = NULL;
    if (sw_test_run(argv, 30, &out, NULL) == 0 && out) {
        json_error_t je;
        json_t *j = json_loads(out, 0, &je);
        json_t *peers = json_object_get(j, "peers");
        for (size_t i = 0; i < json_array_size(peers) && !found; i++) {
            json_t *p = json_array_get(peers, i);
            if (!strcmp(json_string_value(json_object_get(p, "name")), name))
                found = json_incref(p);
        }
        json_decref(j);
    }
    free(out);
    return found;
}

/* The gateway's GET /v1/cluster (`shardwire serve` on relay ep, key KEY) ->
 * its node named name (a new reference), or NULL. */
static json_t *s_cluster_node(const char *ep, const char *name)
{
    char listen[64], keyfile[256], cmd[512];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", sw_test_free_port());
    snprintf(keyfile, sizeof keyfile, "%s", sw_test_log("api.keys"));
    FILE *kf = fopen(keyfile, "w");
    if (!kf)
        return NULL;
    fprintf(kf, "kv-node-test-key-0123456789\n");
    fclose(kf);
    chmod(keyfile, 0600);
    char *sa[] = {(char *)sw_test_bin("shardwire"),
                  "serve",
                  "--relay",
                  (char *)ep,
                  "--insecure-loopback",
                  "--listen",
                  listen,
                  "--api-key-file",
                  keyfile,
                  NULL};
    pid_t ps = sw_test_spawn(sa, sw_test_log("serve.log"));
    snprintf(cmd, sizeof cmd, "tcp://%s", listen);
    SW_CHECK_INT(sw_test_wait_listen(cmd, 30), 0);
    json_t *found = NULL;
    char *out = NULL;
    snprintf(cmd, sizeof cmd,
             "curl -s -H 'Authorization: Bearer kv-node-test-key-0123456789' http://%s/v1/cluster",
             listen);
    for (int tries = 0; tries < 40 && !found; tries++) { /* the gateway's first table */
        if (tries)
            usleep(250000);
        free(out);
        out = NULL;
        if (sw_test_sh(cmd, 30, &out) != 0 || !out)
            continue;
        json_t *j = json_loads(out, 0, NULL), *nodes = json_object_get(j, "nodes");
        for (size_t i = 0; i < json_array_size(nodes) && !found; i++) {
            json_t *nd = json_array_get(nodes, i);
            const char *nm = json_string_value(json_object_get(nd, "name"));
            if (nm && !strcmp(nm, name))
                found = json_incref(nd);
        }
        json_decref(j);
    }
    free(out);
    sw_test_kill(ps);
    return found;
}

static long s_int(const json_t *o, const char *key)
{
    return (long)json_integer_value(json_object_get(o, key));
}

static void s_long_context(const char *model)
{
    swf_cluster_t c = {0};
    static const char *const head[] = {"--ctx", "32768", "--kv-mib", "1024", NULL};
    static const char *const tail[] = {"--ctx",     "32768", "--kv-mib", "1024",
                                       "--kv-type", "q8_0",  NULL};
    swf_node(&c.nodes[0], "head", "0:15", head);
    swf_node(&c.nodes[1], "tail", "15:30", tail);
    setenv("SW_LOG_LEVEL", "debug", 1); /* each cache step is a debug line */
    SW_CHECK_INT(swf_start(&c, model, 2, sw_test_log("long.log")), 0);
    unsetenv("SW_LOG_LEVEL");
    /* what each node said at start (15 layers: 11.25 KiB a position in f16, 5.98 in q8_0) */
    SW_CHECK(swf_log_count(&c, "KV cache: f16, 1024 MiB (--kv-mib), 11.2 KiB a position: 2 "
                               "sessions of 32768 positions (--ctx) fit at full length") == 1);
    SW_CHECK(swf_log_count(&c, "KV cache: q8_0, 1024 MiB (--kv-mib), 6.0 KiB a position: 5 "
                               "sessions of 32768 positions (--ctx) fit at full length") == 1);
    SW_CHECK(swf_log_count(&c, "6 of the --max-sessions 8 fit only while sessions are shorter") ==
             1);
    SW_CHECK(swf_log_count(&c, "3 of the --max-sessions 8 fit only while sessions are shorter") ==
             1);
    json_t *h = s_status_peer(c.ep, "head"), *t = s_status_peer(c.ep, "tail");
    SW_CHECK(h && t);
    if (h && t) {
        SW_CHECK_INT(s_int(h, "n_ctx"), 32768);
        SW_CHECK_INT(s_int(h, "kv_mib"), 1024);
        SW_CHECK_INT(s_int(h, "kv_full"), 2);
        SW_CHECK_INT(s_int(h, "max_sessions"), 8);
        SW_CHECK(!strcmp(json_string_value(json_object_get(h, "kv_type")), "f16"));
        SW_CHECK_INT(s_int(t, "kv_full"), 5);
        SW_CHECK(!strcmp(json_string_value(json_object_get(t, "kv_type")), "q8_0"));
    }
    json_decref(h);
    json_decref(t);
    h = s_cluster_node(c.ep, "head");
    SW_CHECK(h != NULL); /* the gateway's cluster page says the same */
    if (h) {
        SW_CHECK_INT(s_int(h, "n_ctx"), 32768);
        SW_CHECK_INT(s_int(h, "kv_mib"), 1024);
        SW_CHECK_INT(s_int(h, "kv_full"), 2);
        SW_CHECK_INT(s_int(h, "max_sessions"), 8);
        SW_CHECK(!strcmp(json_string_value(json_object_get(h, "kv_type")), "f16"));
    }
    json_decref(h);
    /* a request that may reach 32,000 positions: the short prompt's first step only */
    swf_client_t cl = {0};
    swf_result_t r;
    static const char *const quick[] = {"--timeout-s", "4", NULL};
    SW_CHECK_INT(swf_client_start(&cl, c.ep, "The capital of France is", 32000, 60, quick, "long"),
                 0);
    swf_client_wait(&cl, &r); /* its deadline ends it after some tokens */
    SW_CHECK(r.rc != 0 && strstr(r.err, "deadline"));
    const int head_first = swf_log_count(&c, "KV cache 0 -> 256 positions (2.81 MiB;");
    const int tail_first = swf_log_count(&c, "KV cache 0 -> 256 positions (1.49 MiB;");
    printf("a request of up to 32006 positions: the head allocated 256 positions (2.81 MiB) "
           "and the q8_0 tail 256 (1.49 MiB) before generating; preallocated it took %.0f and "
           "%.0f MiB\n",
           32006 * 11.25 / 1024, 32006 * 5.977 / 1024);
    SW_CHECK_INT(head_first, 1);
    SW_CHECK_INT(tail_first, 1);
    SW_CHECK_INT(swf_log_count(&c, "KV cache 0 -> "), 2); /* nothing larger first */
    swf_stop(&c);
}

/* A prompt of about n tokens (the model's tokenizer counts). */
static char *s_prompt_of(const char *model, int n)
{
    char err[256] = "";
    sw_gguf_t *g = sw_gguf_open(model, err, sizeof err);
    sw_tokenizer_t *tok = g ? sw_tokenizer_from_gguf(g, err, sizeof err) : NULL;
    char *text = calloc(1, 16384);
    static const char *const s[] = {"The quick brown fox jumps over the lazy dog. ",
                                    "A journey of a thousand miles begins with a single step. ",
                                    "All that glitters is not gold. "};
    for (int i = 0; tok && text;) {
        strcat(text, s[i++ % 3]);
        int k = 0;
        int32_t *ids = sw_tokenize_alloc(tok, text, strlen(text), 1, 0, &k);
        free(ids);
        if (k >= n - 12)
            break;
    }
    sw_tokenizer_free(&tok);
    sw_gguf_close(&g);
    return text;
}

static void s_small_tail(const char *model)
{
    swf_cluster_t c = {0};
    static const char *const tail[] = {"--kv-mib", "6", "--prefix-cache", "off", NULL};
    swf_node(&c.nodes[0], "head", "0:15", NULL);
    swf_node(&c.nodes[1], "tail", "15:30", tail);
    SW_CHECK_INT(swf_start(&c, model, 2, sw_test_log("small.log")), 0);
    SW_CHECK(swf_log_count(&c, "context cut to 546 positions") == 1);
    /* a request longer than the tail holds: refused by the head, naming the tail */
    swf_client_t cl = {0};
    swf_result_t r;
    SW_CHECK_INT(swf_client_start(&cl, c.ep, "The capital of France is", 1000, 60, NULL, "long"),
                 0);
    swf_client_wait(&cl, &r);
    SW_CHECK(r.rc != 0 && strstr(r.err, "546-position context of stage 'tail'") &&
             strstr(r.err, "bad_request"));
    fprintf(stderr, "too long for the tail: %s", r.err);
    SW_CHECK(swf_log_count(&c, "stage 'tail' holds sessions of up to 546 positions, this head "
                               "8192: requests are limited to 546") >= 1);
    /* b holds 256 positions of the tail's 546; a's 250-token prompt the other 256; a cannot
     * grow past them */
    const char *pb = "Once upon a time, in a land far away,";
    swf_result_t ref;
    swf_reference(model, pb, 250, NULL, &ref);
    SW_CHECK_INT(ref.n, 250);
    char *pa = s_prompt_of(model, 240);
    SW_CHECK(pa != NULL);
    swf_client_t a = {0}, b = {0};
    swf_result_t ra, rb;
    SW_CHECK_INT(swf_client_start(&b, c.ep, pb, 250, 120, NULL, "b"), 0);
    SW_CHECK_INT(swf_wait_msgs_in(c.ep, "tail", 3, 60), 0); /* b runs */
    SW_CHECK_INT(swf_client_start(&a, c.ep, pa ? pa : "", 90, 120, NULL, "a"), 0);
    swf_client_wait(&a, &ra);
    fprintf(stderr, "a session that cannot grow: %s", ra.err);
    SW_CHECK(ra.rc != 0 && strstr(ra.err, "KV cache memory is full: growing a session's cache") &&
             strstr(ra.err, "tail") && strstr(ra.err, "(busy)"));
    SW_CHECK(swf_client_running(&b)); /* the other session goes on */
    swf_client_wait(&b, &rb);
    SW_CHECK_INT(rb.rc, 0);
    SW_CHECK(swf_same(&rb, &ref));
    SW_CHECK(kill(c.nodes[1].pid, 0) == 0); /* the tail is up */
    free(pa);
    swf_stop(&c);
}

int main(void)
{
    const char *model = sw_test_model();
    s_long_context(model);
    s_small_tail(model);
    return sw_test_done();
}
