/*
 * test_greedy_lowbit.c - the low-bit quant types of issue 34 against
 * llama.cpp on real models: Qwen2.5-Coder 0.5B requantized to IQ4_NL and
 * IQ4_XS, 1.5B to Q2_K and Q3_K_M (scripts/requant_model.sh makes them with
 * llama.cpp's llama-quantize from the fetched Q4_K_M files; the fixtures
 * tests/fixtures/quant_*.json come from scripts/ref/make_arch_fixtures.py,
 * llama.cpp's AVX2 build with repacking off, scripts/ref/README.md). For
 * each model and each of its 7 prompts (5 to 91 tokens: llama.cpp's one-row,
 * sgemm and tiled prompt paths), on the CPU backend:
 *
 *  - the model holds the type it is named for (no vacuous pass on a file
 *    that fell back to other types), and our tokenizer gives llama.cpp's
 *    prompt ids;
 *  - greedy decoding as llama.cpp ran it gives its tokens and, at every
 *    step, its whole logits row to the bit (sha256 of the float32 bytes);
 *    the first position's top-5 logits equal to the float;
 *  - the model in two stages ([0, L/2) then [L/2, L), f32 hidden states
 *    handed over) gives the same bits;
 *  - through the programs, on the first prompt: `shardwire generate` gives
 *    llama.cpp's tokens, and a relay with two shardwire-node stages
 *    ([0, L/2), [L/2, L)) gives `shardwire run` the same tokens and logits
 *    digest, plainly and with n-gram speculation;
 *  - Q3_K_M also as a split set (3 parts, as the hub ships big files): two
 *    nodes opening it from its first and last parts give the same tokens and
 *    logits digest.
 *
 * Label slow: the four models are 2.5 GB and a minute or two each to check.
 * A model that is absent skips its part (run: bash scripts/requant_model.sh
 * NAME); SW_LOWBIT_SETS=qwen05_iq4_nl,... runs only those.
 */
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "gguf.h"
#include "model.h"
#include "quant.h"
#include "sw_arch.h"
#include "sw_test.h"
#include "tokenizer.h"

static const struct {
    const char *set;   // tests/fixtures/quant_<set>.json
    enum sw_type type; // the type the model is named for
    int n_layer;       // its layers (the 2-stage split is at half)
    int split;         // also through a cluster from a split set of the file (s_split_cluster)
} s_sets[] = {
    {"qwen05_iq4_nl", SW_TYPE_IQ4_NL, 24, 0},
    {"qwen05_iq4_xs", SW_TYPE_IQ4_XS, 24, 0},
    {"qwen15_q2_k", SW_TYPE_Q2_K, 28, 0},
    {"qwen15_q3_k_m", SW_TYPE_Q3_K, 28, 1},
};

/* Tensors of type t in the model's file. */
static int s_count_type(const sw_model_t *m, enum sw_type t)
{
    const sw_gguf_t *g = sw_model_gguf(m);
    int n = 0;
    for (int64_t i = 0; i < sw_gguf_tensor_count(g); i++)
        n += sw_gguf_tensor(g, i)->type == t;
    return n;
}

/* The model as the hub ships big files (issue 34): split into 3 parts with
 * shardwire-mksplit (byte-equal to llama.cpp's gguf-split, test_gguf_split), a
 * relay and two stages that open the set from different parts (the first part
 * for [0, mid), the last for [mid, L)) give `shardwire run` the tokens and logits
 * digest `shardwire generate` gave on the whole file (ref: llama.cpp's tokens). */
static void s_split_cluster(const char *set, const char *model, const char *prompt, int n_gen,
                            const sw_result_t *ref, const char *mid_s, const char *l_s)
{
    char err[256], per[32], prefix[600], parts[2][700];
    sw_gguf_t *g = sw_gguf_open_file(model, err, sizeof err);
    SW_CHECK(g != NULL);
    if (!g)
        return;
    snprintf(per, sizeof per, "%lld", (long long)(sw_gguf_tensor_count(g) / 3 + 1));
    sw_gguf_close(&g);
    snprintf(prefix, sizeof prefix, "%s/%s", sw_test_tmpdir(), set);
    char *argv[] = {(char *)sw_test_bin("shardwire-mksplit"),
                    "--split-max-tensors",
                    per,
                    (char *)model,
                    prefix,
                    NULL};
    char *out = NULL;
    SW_CHECK_INT(sw_test_run(argv, 600, &out, NULL), 0);
    free(out);
    snprintf(parts[0], sizeof parts[0], "%s-00001-of-00003.gguf", prefix);
    snprintf(parts[1], sizeof parts[1], "%s-00003-of-00003.gguf", prefix);
    const char *const models[2] = {parts[0], parts[1]};
    char ep[64];
    pid_t relay = 0, nodes[2] = {0, 0};
    const int up = swa_start_files(models, mid_s, l_s, ep, sizeof ep, &relay, nodes);
    SW_CHECK_INT(up, 0);
    sw_result_t got;
    int same = 0;
    if (up == 0) {
        SW_CHECK_INT(swa_run(ep, prompt ? prompt : "", n_gen, "none", &got), 0);
        same = sw_result_same(&got, ref) && got.digest[0] && !strcmp(got.digest, ref->digest);
    }
    SW_CHECK(same);
    printf("%s: split into 3 parts, relay + 2 nodes from parts 1 and 3: %s\n", set,
           same ? "same tokens and logits digest as the whole file" : "DIFFERENT");
    swa_stop(relay, nodes);
    for (int i = 1; i <= 3; i++) {
        char p[700];
        snprintf(p, sizeof p, "%s-%05d-of-00003.gguf", prefix, i);
        unlink(p);
    }
}

/* Through the programs: `shardwire generate` on case cs's text gives
 * llama.cpp's tokens; a relay and two shardwire-node stages split at mid
 * give `shardwire run` the same tokens and logits digest, plainly and with
 * the n-gram proposer. */
static void s_cluster(const char *set, const char *model, const json_t *cs, int mid, int L,
                      int split)
{
    const char *prompt = json_string_value(json_object_get(cs, "prompt"));
    const json_t *want = json_object_get(cs, "gen_tokens");
    const int n_gen = (int)json_array_size(want);
    sw_result_t ref, got;
    sw_result_generate(model, prompt ? prompt : "", n_gen, 180, &ref);
    int same = ref.ok && ref.n == n_gen;
    for (int t = 0; same && t < n_gen; t++)
        same = ref.ids[t] == (int32_t)json_integer_value(json_array_get(want, (size_t)t));
    if (!same)
        fprintf(stderr, "%s: shardwire generate differs from llama.cpp\n", set);
    SW_CHECK(same);
    char ep[64], mid_s[16], l_s[16];
    snprintf(mid_s, sizeof mid_s, "%d", mid);
    snprintf(l_s, sizeof l_s, "%d", L);
    pid_t relay = 0, nodes[2] = {0, 0};
    const int up = swa_start(model, mid_s, l_s, ep, sizeof ep, &relay, nodes);
    SW_CHECK_INT(up, 0);
    int plain = 0, ngram = 0;
    if (up == 0) {
        SW_CHECK_INT(swa_run(ep, prompt, n_gen, "none", &got), 0);
        plain = sw_result_same(&got, &ref) && got.digest[0] && !strcmp(got.digest, ref.digest);
        SW_CHECK_INT(swa_run(ep, prompt, n_gen, "ngram", &got), 0);
        ngram = sw_result_same(&got, &ref);
    }
    SW_CHECK(plain && ngram);
    printf("%s: generate == llama.cpp (%d tokens); relay + 2 nodes [0, %d) [%d, %d): %s, "
           "n-gram speculation %s\n",
           set, n_gen, mid, mid, L, plain ? "same tokens and logits digest" : "DIFFERENT",
           ngram ? "same tokens" : "DIFFERENT");
    swa_stop(relay, nodes);
    if (split)
        s_split_cluster(set, model, prompt, n_gen, &ref, mid_s, l_s);
}

static void s_run_set(int si)
{
    const char *set = s_sets[si].set;
    char path[1024];
    snprintf(path, sizeof path, "%s/quant_%s.json", sw_test_env("SW_FIXTURES"), set);
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    if (!doc)
        fprintf(stderr, "%s: %s\n", path, je.text);
    SW_CHECK(doc != NULL);
    if (!doc || swa_model(doc, path, sizeof path) != 0) {
        json_decref(doc);
        return;
    }
    char err[512] = "";
    sw_backend_t *be = sw_backend_new("cpu", 2, NULL, 0);
    sw_model_t *m = be ? sw_model_load(path, 0, -1, be, err, sizeof err) : NULL;
    SW_CHECK(m != NULL);
    if (!m) {
        fprintf(stderr, "%s: %s\n", path, err);
        sw_backend_free(&be);
        json_decref(doc);
        return;
    }
    const int n_of_type = s_count_type(m, s_sets[si].type);
    SW_CHECK(n_of_type >= 20);
    const int L = sw_model_hparams(m)->n_layer, mid = L / 2;
    SW_CHECK_INT(L, s_sets[si].n_layer);
    sw_model_t *st2[2] = {sw_model_load(path, 0, mid, be, err, sizeof err),
                          sw_model_load(path, mid, -1, be, err, sizeof err)};
    SW_CHECK(st2[0] && st2[1]);
    sw_tokenizer_t *tok = sw_tokenizer_from_gguf(sw_model_gguf(m), err, sizeof err);
    SW_CHECK(tok != NULL);
    const json_t *cases = json_object_get(doc, "cases");
    int n_cases = 0, n_same = 0;
    for (size_t ci = 0; ci < json_array_size(cases); ci++) {
        const json_t *cs = json_array_get(cases, ci);
        swa_case_t c = {.name = json_string_value(json_object_get(cs, "name")),
                        .hashes = json_object_get(cs, "logits_sha256")};
        c.prompt = swa_ids(json_object_get(cs, "prompt_tokens"), &c.n_prompt);
        c.gen = swa_ids(json_object_get(cs, "gen_tokens"), &c.n_gen);
        SW_CHECK_INT((int)json_array_size(c.hashes), c.n_gen);
        const char *text = json_string_value(json_object_get(cs, "prompt"));
        int n_ours = 0;
        int32_t *ours =
            tok && text
                ? sw_tokenize_alloc(tok, text, strlen(text), 0,
                                    json_is_true(json_object_get(cs, "parse_special")), &n_ours)
                : NULL;
        const int tok_same =
            ours && n_ours == c.n_prompt && !memcmp(ours, c.prompt, (size_t)n_ours * sizeof *ours);
        SW_CHECK(tok_same);
        free(ours);
        const int whole = swa_greedy(&m, 1, &c, json_object_get(cs, "first_top5"), "whole");
        const int split = st2[0] && st2[1] ? swa_greedy(st2, 2, &c, NULL, "2 stages") : 0;
        printf("%-14s %-15s %3d prompt ids %s, %2d/%d steps equal (tokens and logits bits), "
               "2 stages %2d/%d\n",
               set, c.name, c.n_prompt, tok_same ? "equal" : "DIFFER", whole, c.n_gen, split,
               c.n_gen);
        n_cases++;
        n_same += whole == c.n_gen && split == c.n_gen && tok_same;
        free(c.prompt);
        free(c.gen);
    }
    s_cluster(set, path, json_array_get(cases, 0), mid, L, s_sets[si].split);
    printf("%s (%s, %d %s tensors): %d/%d cases bit-identical to llama.cpp\n", set,
           json_string_value(json_object_get(doc, "model_file")), n_of_type,
           sw_type_name(s_sets[si].type), n_same, n_cases);
    SW_CHECK(n_cases >= 7);
    sw_tokenizer_free(&tok);
    sw_model_free(&st2[0]);
    sw_model_free(&st2[1]);
    sw_model_free(&m);
    sw_backend_free(&be);
    json_decref(doc);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const char *only = getenv("SW_LOWBIT_SETS");
    for (int i = 0; i < (int)(sizeof s_sets / sizeof s_sets[0]); i++)
        if (!only || strstr(only, s_sets[i].set))
            s_run_set(i);
    return sw_test_done();
}
