/*
 * test_split.c - a model as a split GGUF set (llama.cpp's gguf-split) through
 * the programs a user runs, against the same model unsplit:
 *
 *  - with a llama.cpp greedy fixture (tests/fixtures/greedy_*.json), the set
 *    opened from a middle part gives llama.cpp's prompt ids, greedy tokens
 *    and first-position top-5 logits, as the whole file does (test_greedy);
 *  - `shardwire info` on every part shows the set and one fingerprint;
 *  - `shardwire generate --greedy` on the set, opened from its first and its
 *    last part, gives the whole file's tokens and logits digest (every
 *    logits row, bit for bit) on two prompts;
 *  - a relay and two shardwire-node stages, the head opening the set from
 *    its first part and the tail from its last, each holding half the layers
 *    (and so mapping only some parts), give `shardwire run` the same tokens
 *    and digest, with f32 hidden states; both announce the set's
 *    fingerprint; the head drafting with the set as its draft model gives
 *    the same tokens;
 *  - a stage with the unsplit file is another model (another fingerprint):
 *    the head does not route to it.
 *
 * Any model: SW_SPLIT_MODEL (default: the default model) is the whole file;
 * SW_SPLIT_SET any part of its split set (default: the split_models fixture
 * for the default model; else the test splits SW_SPLIT_MODEL into about 3
 * parts with shardwire-mksplit, which writes what llama.cpp's gguf-split
 * writes); SW_SPLIT_FIXTURE a llama.cpp greedy fixture of the model (default:
 * greedy_smollm2.json for the default model, else none).
 */
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "sw_fault.h"
#include "sw_greedy.h"
#include "sw_test.h"

#define N_GEN 24

static const char *s_prompts[2] = {
    "The capital of France is",
    "Write a short story about a robot who learns to paint. Once upon a time,"};

/* Tokens and logits digest equal. */
static int s_exact(const swf_result_t *a, const swf_result_t *b)
{
    return swf_same(a, b) && a->digest[0] && !strcmp(a->digest, b->digest);
}

/* `shardwire run` of prompt on c, drafting with draft: the result. */
static void s_run(const swf_cluster_t *c, const char *prompt, const char *draft, int timeout_s,
                  swf_result_t *r)
{
    swf_client_t cl = {0};
    const char *extra[] = {"--draft", draft, NULL};
    memset(r, 0, sizeof *r);
    if (swf_client_start(&cl, c->ep, prompt, N_GEN, timeout_s, extra, draft) == 0)
        swf_client_wait(&cl, r);
    if (r->rc != 0)
        fprintf(stderr, "run exit %d: %s", r->rc, r->err);
}

/* `shardwire info --json` of path: its fingerprint, layer count and split parts. */
static int s_info(const char *path, char fp[65], int *n_layer, int *parts)
{
    char *argv[] = {
        (char *)sw_test_bin("shardwire"), "info", "--model", (char *)path, "--json", NULL};
    char *out = NULL, *err = NULL;
    const int rc = sw_test_run(argv, 120, &out, &err);
    json_error_t je;
    json_t *j = rc == 0 && out ? json_loads(out, 0, &je) : NULL;
    const char *f = j ? json_string_value(json_object_get(j, "fingerprint")) : NULL;
    snprintf(fp, 65, "%s", f ? f : "");
    *n_layer = j ? (int)json_integer_value(json_object_get(j, "n_layers")) : 0;
    json_t *sp = j ? json_object_get(j, "split_parts") : NULL;
    *parts = json_is_array(sp) ? (int)json_array_size(sp) : 1;
    if (!j)
        fprintf(stderr, "info %s: %s\n", path, err ? err : "");
    json_decref(j);
    free(out);
    free(err);
    return j ? 0 : -1;
}

/* The set of the model under test: any part of it into set (made here when needed). */
static int s_the_set(const char *whole, int is_default, char *set, size_t len)
{
    const char *given = getenv("SW_SPLIT_SET");
    if (given && *given)
        return snprintf(set, len, "%s", given) < (int)len ? 0 : -1;
    const char *fx = getenv("SW_SPLIT_DIR");
    if (is_default && fx) {
        snprintf(set, len, "%s/smol-00002-of-00003.gguf", fx);
        return access(set, R_OK);
    }
    char err[256];
    sw_gguf_t *g = sw_gguf_open_file(whole, err, sizeof err);
    if (!g) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    char per[32], prefix[600];
    snprintf(per, sizeof per, "%lld", (long long)(sw_gguf_tensor_count(g) / 3 + 1));
    sw_gguf_close(&g);
    snprintf(prefix, sizeof prefix, "%s/model", sw_test_tmpdir());
    char *argv[] = {(char *)sw_test_bin("shardwire-mksplit"),
                    "--split-max-tensors",
                    per,
                    (char *)whole,
                    prefix,
                    NULL};
    char *out = NULL;
    const int rc = sw_test_run(argv, 600, &out, NULL);
    free(out);
    return rc == 0 && snprintf(set, len, "%s-00002-of-00003.gguf", prefix) < (int)len ? 0 : -1;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const char *def = sw_test_model();
    const char *whole = getenv("SW_SPLIT_MODEL");
    if (!whole || !*whole)
        whole = def;
    const int is_default = !strcmp(whole, def);
    char set[1024], fixture[1024] = "";
    if (access(whole, R_OK) != 0)
        sw_test_skip("SW_SPLIT_MODEL is not readable");
    if (s_the_set(whole, is_default, set, sizeof set) != 0)
        sw_test_skip("no split set of the model (the split_models fixture, or shardwire-mksplit)");
    const char *fx = getenv("SW_SPLIT_FIXTURE");
    if (fx && *fx)
        snprintf(fixture, sizeof fixture, "%s", fx);
    else if (is_default)
        snprintf(fixture, sizeof fixture, "%s/greedy_smollm2.json", sw_test_env("SW_FIXTURES"));
    printf("whole %s\nset   %s\n", whole, set);

    /* the set's parts: one fingerprint, not the whole file's */
    char whole_fp[65], fp[65], first[1100], last[1100];
    int n_layer = 0, parts = 0, idx, count;
    size_t plen;
    SW_CHECK_INT(s_info(whole, whole_fp, &n_layer, &parts), 0);
    SW_CHECK_INT(parts, 1);
    SW_CHECK(sw_gguf_split_name(set, &idx, &count, &plen) == 1 && count >= 2);
    if (sw_test_failures)
        return sw_test_done();
    sw_gguf_split_path(first, sizeof first, set, plen, 0, count);
    sw_gguf_split_path(last, sizeof last, set, plen, count - 1, count);
    for (int i = 0; i < count; i++) {
        char p[1100], f[65];
        int nl = 0, np = 0;
        sw_gguf_split_path(p, sizeof p, set, plen, i, count);
        SW_CHECK_INT(s_info(p, f, &nl, &np), 0);
        SW_CHECK_INT(np, count);
        SW_CHECK_INT(nl, n_layer);
        if (i == 0)
            memcpy(fp, f, 65);
        SW_CHECK(!strcmp(f, fp) && strlen(fp) == 64);
    }
    SW_CHECK(strcmp(fp, whole_fp) != 0);

    /* llama.cpp's tokens and logits from the set */
    if (fixture[0] && access(fixture, R_OK) == 0)
        swg_check_fixture(fixture, set, 2, 2e-5);
    else if (fixture[0])
        SW_CHECK(!"the fixture is readable");

    /* generate: the set == the whole file */
    swf_result_t ref[2], got;
    for (int i = 0; i < 2; i++) {
        swf_reference(whole, s_prompts[i], N_GEN, NULL, &ref[i]);
        SW_CHECK(ref[i].ok && ref[i].n == N_GEN);
        swf_reference(i == 0 ? first : last, s_prompts[i], N_GEN, NULL, &got);
        SW_CHECK(s_exact(&got, &ref[i]));
    }

    /* a cluster of two stages, each opening the set from another part */
    static swf_cluster_t c;
    char mid[32], tail[32];
    snprintf(mid, sizeof mid, "0:%d", n_layer / 2);
    snprintf(tail, sizeof tail, "%d:%d", n_layer / 2, n_layer);
    const char *head_flags[] = {"--dtype", "f32", "--round-timeout-ms", "60000", "--draft-model",
                                first,     NULL};
    const char *tail_flags[] = {"--dtype", "f32", "--round-timeout-ms", "60000", "--model",
                                last,      NULL};
    swf_node(&c.nodes[0], "head", mid, head_flags);
    swf_node(&c.nodes[1], "tail", tail, tail_flags);
    const int up = swf_start(&c, first, 2, sw_test_log("nodes.log"));
    SW_CHECK_INT(up, 0);
    char want[96];
    snprintf(want, sizeof want, "model %.12s...", fp);
    SW_CHECK_INT(sw_test_count_in_file(c.log, want), 2);
    for (int i = 0; up == 0 && i < 2; i++) {
        s_run(&c, s_prompts[i], "none", 250, &got);
        if (!s_exact(&got, &ref[i]))
            fprintf(stderr, "2 stages of the set differ from the whole file on prompt %d\n", i);
        SW_CHECK(s_exact(&got, &ref[i]));
        s_run(&c, s_prompts[i], "model", 250, &got);
        SW_CHECK(swf_same(&got, &ref[i]));
    }
    /* the unsplit file in the tail's place: another model, never routed to */
    sw_test_kill(c.nodes[1].pid);
    const char *whole_flags[] = {"--dtype", "f32", "--model", whole, NULL};
    swf_node(&c.nodes[1], "tail2", tail, whole_flags);
    swf_start_node(&c, 1);
    char other[96];
    snprintf(other, sizeof other, "model %.12s...", whole_fp);
    SW_CHECK(sw_test_wait_text(c.log, other, 60));
    s_run(&c, s_prompts[0], "none", 8, &got);
    SW_CHECK(got.rc != 0);
    char line[128];
    snprintf(line, sizeof line, "peer 'tail2' serves layers [%d, %d) of a different model file",
             n_layer / 2, n_layer);
    SW_CHECK(sw_test_count_in_file(c.log, line) >= 1);
    swf_stop(&c);
    printf("set == whole: info (one fingerprint over %d parts), generate (tokens, digest), 2 "
           "stages from different parts, draft model from the set%s\n",
           count, fixture[0] ? ", llama.cpp's fixture" : "");
    return sw_test_done();
}
