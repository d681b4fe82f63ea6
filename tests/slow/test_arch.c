/*
 * test_arch.c - the model families of issue 24 against llama.cpp, in one
 * process, on the CPU backend: Llama 3.2 (rope_freqs), Qwen3 (QK norm,
 * queries wider than the hidden size), Qwen3-MoE (router, top-k experts),
 * Gemma 3 (the real 270M Q4_K_M; and a miniature whose sliding window of 16
 * is shorter than every prompt). For each fixture tests/fixtures/arch_*.json
 * (scripts/ref/make_arch_fixtures.py; models: tests/sw_arch.h):
 *
 *  - our tokenizer gives llama.cpp's prompt ids and end-of-generation set;
 *  - greedy decoding as llama.cpp ran it (the prompt as one forward call,
 *    then one token per call) gives llama.cpp's tokens, and every step's
 *    whole logits row hashes (sha256 of the float32 bytes) to llama.cpp's:
 *    bit-identical logits; the first position's top-5 equal to the float;
 *  - the model split into two stages in one process ([0, a) then [a, L),
 *    f32 hidden states handed over) gives the same hashes: a stage computes
 *    what the whole model computes;
 *  - speculative decoding (sw_generate) with the model drafting for itself
 *    (K 4, every draft accepted), with every third draft corrupted, as token
 *    trees of up to 6 drafts, and with the n-gram proposer gives the tokens
 *    of plain decoding;
 *  - model files are untrusted: copies with one metadata value or tensor
 *    shape of the new families made wrong are refused with one line naming
 *    it, and a backend without the operations an architecture needs (the
 *    optional members of backend_impl.h's table) is refused at load with one
 *    line.
 *
 * SW_ARCH_SETS=qwen3,gemma3 runs only those sets (add "untrusted" for the
 * broken-file checks).
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backend_impl.h"
#include "decode.h"
#include "drafter.h"
#include "model.h"
#include "sw_arch.h"
#include "sw_test.h"
#include "tokenizer.h"

#define N_CTX SWA_N_CTX

/* A proposer that corrupts every third draft of the one it wraps. */
typedef struct s_noisy {
    sw_proposer_t inner;
    int n_vocab, count;
} s_noisy_t;

static int s_noisy_propose(void *self, const int32_t *ctx, int n_ctx, int k_max, int guess,
                           sw_proposal_t *out)
{
    s_noisy_t *p = self;
    if (p->inner.propose(p->inner.self, ctx, n_ctx, k_max, guess, out) != 0)
        return -1;
    for (int i = 0; !out->tree && i < out->n; i++)
        if (++p->count % 3 == 0)
            out->tokens[i] = (out->tokens[i] + 1) % p->n_vocab;
    return 0;
}

static void s_noisy_observe(void *self, const sw_round_obs_t *o)
{
    s_noisy_t *p = self;
    if (p->inner.observe)
        p->inner.observe(p->inner.self, o);
}

/* sw_generate on the whole model; the tokens into out, their count or -1. */
static int s_generate(sw_model_t *m, const swa_case_t *c, sw_proposer_t *prop, int k, int32_t *out,
                      sw_gen_stats_t *gs)
{
    char err[256] = "";
    sw_sampling_t sp = sw_sampling_default();
    sp.temp = 0;
    sw_local_target_t *lt = sw_local_target_new(m, N_CTX, &sp, err, sizeof err);
    if (!lt) {
        fprintf(stderr, "target: %s\n", err);
        return -1;
    }
    sw_target_t t = sw_local_target(lt);
    sw_gen_opts_t go = {.n_predict = c->n_gen, .k = k, .proposer = prop};
    const int rc = sw_generate(&t, c->prompt, c->n_prompt, &go, out, gs, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "generate: %s\n", err);
    sw_local_target_free(&lt);
    return rc == 0 ? gs->n_gen : -1;
}

/* Speculation == plain: the fixture's tokens with each proposer. */
static void s_speculative(sw_model_t *m, const char *path, const swa_case_t *c)
{
    char err[512] = "";
    draft_model_t *dm = draft_model_new(path, sw_model_gguf(m), "cpu", 2, N_CTX, err, sizeof err);
    SW_CHECK(dm != NULL);
    draft_t *d = dm ? draft_new(dm) : NULL;
    SW_CHECK(d != NULL);
    if (!d) {
        fprintf(stderr, "draft model: %s\n", err);
        draft_model_free(&dm);
        return;
    }
    sw_sampling_t sp = sw_sampling_default();
    sp.temp = 0;
    static const struct {
        enum draft_mode mode;
        int k, tree, noisy;
        const char *what;
    } runs[] = {
        {DRAFT_MODE_MODEL, 4, 0, 0, "self-drafting K 4"},
        {DRAFT_MODE_MODEL, 3, 0, 1, "corrupted drafts K 3"},
        {DRAFT_MODE_MODEL, 6, 6, 0, "token trees of 6"},
        {DRAFT_MODE_NGRAM, 3, 0, 0, "n-gram K 3"},
    };
    int32_t out[256];
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        draft_cfg_t dc = {.mode = runs[r].mode,
                          .k = runs[r].k,
                          .tree = runs[r].tree,
                          .sampling = sp,
                          .n_ctx = N_CTX};
        SW_CHECK(draft_begin(d, &dc, err, sizeof err) == 0);
        sw_proposer_t p = draft_proposer(d);
        s_noisy_t noisy = {.inner = p, .n_vocab = sw_model_hparams(m)->n_vocab};
        sw_proposer_t np = {.propose = s_noisy_propose, .self = &noisy, .observe = s_noisy_observe};
        sw_gen_stats_t gs;
        const int n = s_generate(m, c, runs[r].noisy ? &np : &p, draft_gen_k(d), out, &gs);
        const int same = n == c->n_gen && !memcmp(out, c->gen, (size_t)n * sizeof *out);
        if (!same)
            fprintf(stderr, "%s, %s: tokens differ from plain decoding\n", c->name, runs[r].what);
        SW_CHECK(same);
        SW_CHECK(gs.accepted <= gs.drafted);
        if (r == 0) { // the model drafting for itself: every draft is accepted
            SW_CHECK_INT(gs.accepted, gs.drafted);
            SW_CHECK(gs.rounds < c->n_gen - 1);
        }
        if (r == 1)
            SW_CHECK(gs.drafted > gs.accepted); // the corruption was rejected
    }
    draft_free(&d);
    draft_model_free(&dm);
}

static void s_run_set(int si)
{
    const char *set = swa_sets[si].set;
    json_t *doc = swa_fixture(set);
    char path[1024];
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
    const int mid = atoi(swa_sets[si].mid);
    SW_CHECK_INT(sw_model_hparams(m)->n_layer, atoi(swa_sets[si].split));
    sw_model_t *st2[2] = {sw_model_load(path, 0, mid, be, err, sizeof err),
                          sw_model_load(path, mid, -1, be, err, sizeof err)};
    SW_CHECK(st2[0] && st2[1]);
    sw_tokenizer_t *tok = sw_tokenizer_from_gguf(sw_model_gguf(m), err, sizeof err);
    SW_CHECK(tok != NULL);
    /* llama.cpp's end-of-generation set (where chat generation stops) */
    if (tok) {
        const json_t *eog = json_object_get(json_object_get(doc, "model"), "eog_ids");
        const int V = sw_model_hparams(m)->n_vocab;
        int n_ours = 0, n_both = 0;
        for (int id = 0; id < V; id++) {
            int theirs = 0;
            for (size_t k = 0; k < json_array_size(eog) && !theirs; k++)
                theirs = json_integer_value(json_array_get(eog, k)) == id;
            n_ours += sw_tokenizer_is_eog(tok, id);
            n_both += theirs && sw_tokenizer_is_eog(tok, id);
        }
        if (n_ours != (int)json_array_size(eog) || n_both != n_ours)
            fprintf(stderr, "%s: our end-of-generation set (%d ids) differs from llama.cpp's\n",
                    set, n_ours);
        SW_CHECK(n_ours == (int)json_array_size(eog) && n_both == n_ours);
    }
    json_t *cases = json_object_get(doc, "cases");
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
                ? sw_tokenize_alloc(tok, text, strlen(text),
                                    json_is_true(json_object_get(cs, "add_bos")),
                                    json_is_true(json_object_get(cs, "parse_special")), &n_ours)
                : NULL;
        const int tok_same =
            ours && n_ours == c.n_prompt && !memcmp(ours, c.prompt, (size_t)n_ours * sizeof *ours);
        if (!tok_same)
            fprintf(stderr, "%s/%s: our prompt ids differ from llama.cpp's\n", set, c.name);
        SW_CHECK(tok_same);
        free(ours);
        const json_t *top5 = json_object_get(cs, "first_top5");
        const int whole = swa_greedy(&m, 1, &c, top5, "whole");
        const int split = st2[0] && st2[1] ? swa_greedy(st2, 2, &c, NULL, "2 stages") : 0;
        printf("%-10s %-16s %3d prompt ids %s, %2d/%d steps equal (tokens and logits bits), "
               "2 stages %2d/%d\n",
               set, c.name, c.n_prompt, tok_same ? "equal" : "DIFFER", whole, c.n_gen, split,
               c.n_gen);
        n_cases++;
        n_same += whole == c.n_gen && split == c.n_gen && tok_same;
        /* speculation on two cases per set (time): a short and a long prompt */
        if (ci == 1 || ci == 5)
            s_speculative(m, path, &c);
        free(c.prompt);
        free(c.gen);
    }
    printf("%s (%s): %d/%d cases bit-identical to llama.cpp\n", set,
           json_string_value(json_object_get(doc, "model_file")), n_same, n_cases);
    SW_CHECK(n_cases >= 6);
    sw_tokenizer_free(&tok);
    sw_model_free(&st2[0]);
    sw_model_free(&st2[1]);
    sw_model_free(&m);
    sw_backend_free(&be);
    json_decref(doc);
}

/* A copy of the file at src with the 4 bytes after the first occurrence of
 * needle + skip replaced by v (a u32 metadata value or tensor field); loads
 * it and checks the refusal names want. */
static void s_refused(const char *src, const char *needle, size_t skip, uint32_t v,
                      const char *want)
{
    size_t len = 0;
    char *b = sw_test_read_file(src, &len);
    char *at = b ? memmem(b, len, needle, strlen(needle)) : NULL;
    SW_CHECK(at != NULL);
    if (!at) {
        free(b);
        return;
    }
    memcpy(at + strlen(needle) + skip, &v, 4);
    char path[1024];
    snprintf(path, sizeof path, "%s/bad.gguf", sw_test_tmpdir());
    FILE *f = fopen(path, "wb");
    SW_CHECK(f && fwrite(b, 1, len, f) == len);
    if (f)
        fclose(f);
    free(b);
    char err[512] = "";
    sw_backend_t *be = sw_backend_new("cpu", 1, NULL, 0);
    sw_model_t *m = be ? sw_model_load(path, 0, -1, be, err, sizeof err) : NULL;
    const int ok = m == NULL && strstr(err, want) && !strchr(err, '\n');
    if (!ok)
        fprintf(stderr, "%s = %u: expected a refusal naming '%s', got '%s'\n", needle, v, want,
                err);
    SW_CHECK(ok);
    sw_model_free(&m);
    sw_backend_free(&be);
    unlink(path);
}

/* Loads path on a CPU backend whose ops table lacks what `drop` says; the
 * load must fail with one line naming it. */
static void s_backend_refuses(const char *path, int drop, const char *want)
{
    char err[512] = "";
    sw_backend_t *be = sw_backend_new("cpu", 1, NULL, 0);
    if (!be) {
        SW_CHECK(be != NULL);
        return;
    }
    static sw_backend_ops_t lacking;
    const sw_backend_ops_t *real = be->ops;
    lacking = *real;
    if (drop == 0)
        lacking.moe = NULL;
    else if (drop == 1)
        lacking.attn_swa = 0;
    else
        lacking.geglu = NULL;
    be->ops = &lacking;
    sw_model_t *m = sw_model_load(path, 0, -1, be, err, sizeof err);
    const int ok = m == NULL && strstr(err, want) && strstr(err, "use the cpu backend");
    if (!ok)
        fprintf(stderr, "expected a refusal naming '%s', got '%s'\n", want, err);
    SW_CHECK(ok);
    sw_model_free(&m);
    be->ops = real;
    sw_backend_free(&be);
}

static void s_untrusted(void)
{
    static const char *sets[] = {"llama32", "qwen3moe", "gemma3swa"};
    char path[3][1024];
    for (int i = 0; i < 3; i++) {
        json_t *doc = swa_fixture(sets[i]);
        const int rc = doc ? swa_model(doc, path[i], sizeof path[i]) : -1;
        json_decref(doc);
        if (rc != 0)
            return;
    }
    /* metadata values: a u32 key's value follows its type field */
    s_refused(path[1], "qwen3moe.expert_used_count", 4, 17, "expert counts not supported");
    s_refused(path[1], "qwen3moe.expert_count", 4, 100000, "expert counts not supported");
    s_refused(path[1], "qwen3moe.expert_feed_forward_length", 4, 128, "ffn_gate_exps.weight");
    s_refused(path[1], "qwen3moe.embedding_length", 4, 260, "hidden size divisible by 8");
    s_refused(path[2], "gemma3.attention.sliding_window_pattern", 4, 1u << 25,
              "sliding_window_pattern' = 33554432 is out of range");
    s_refused(path[2], "gemma3.attention.key_length", 4, 128, "head size 128");
    s_refused(path[2], "gemma3.attention.value_length", 4, 128, "values 128");
    /* tensor shapes: the tensor table has name, n_dims, ne[], type */
    s_refused(path[0], "rope_freqs.weight", 4, 31, "rope_freqs.weight' must be f32 with 32");
    s_refused(path[0], "rope_freqs.weight", 12, 1 /* f16 */, "rope_freqs.weight' must be f32");
    s_refused(path[1], "blk.0.ffn_gate_inp.weight", 20, 1 /* f16 */, "only f32 is supported");
    s_refused(path[1], "blk.1.ffn_down_exps.weight", 20, 8 /* ne[2]: experts */,
              "'blk.1.ffn_down_exps.weight' has shape [256, 256, 8], expected [256, 256, 16]");
    /* what a backend lacks (optional members of the table: backend_impl.h) */
    s_backend_refuses(path[1], 0, "the mixture-of-experts operation");
    s_backend_refuses(path[2], 1, "sliding-window attention");
    s_backend_refuses(path[2], 2, "the scale and GELU operations");
}

int main(void)
{
    const char *only = getenv("SW_ARCH_SETS");
    for (int i = 0; i < SWA_N_SETS; i++) {
        char want[64];
        snprintf(want, sizeof want, ",%s,", swa_sets[i].set);
        char list[256];
        snprintf(list, sizeof list, ",%s,", only ? only : "");
        if (only && *only && !strstr(list, want))
            continue;
        s_run_set(i);
    }
    if (!only || !*only || strstr(only, "untrusted"))
        s_untrusted();
    return sw_test_done();
}
