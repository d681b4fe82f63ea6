/*
 * test_cuda_spec.c - generation on the GPU (label cuda; skips without a GPU):
 *
 *  - greedy tokens from the GPU equal the CPU's on the fixture prompts
 *    (tests/fixtures/greedy_smollm2.json when the model has its vocabulary,
 *    else fixed token prompts), except where the CPU's top-2 margin at the
 *    first differing position is below S_MARGIN (cuda_test.h);
 *  - speculative == plain on the GPU: the tokens of plain decoding, with the
 *    draft model on the GPU (the second GPU when there is one), K = 1, 2, 4,
 *    8, 16, and a draft model on the CPU for a GPU target; and every logits
 *    row the GPU target verified (rejected drafts' rows too: the digest)
 *    bit-identical to the same speculative run on the CPU (target and draft
 *    on the CPU, the same K), which also accepted the same drafts. Plain
 *    decoding's digest equals a speculative run's only when every draft is
 *    accepted (the digest covers rejected rows), so the CPU run is the
 *    reference.
 *
 * The draft model is SW_CUDA_DRAFT_MODEL (a model with the target's
 * vocabulary; scripts/gpu_check.sh cuts one from the target), else the
 * target itself (every draft accepted). The models: SW_CUDA_SPEC_MODELS,
 * else SW_CUDA_TOKENIZER_MODELS, else those of cuda_test.h.
 * SW_CUDA_TEST_QUICK=1 (the CPU emulation) takes 2 prompts, 16 tokens and
 * K = 1, 4, 16.
 */
#include <jansson.h>

#include "cuda_test.h"
#include "decode.h"
#include "drafter.h"

#define N_GEN 32
#define N_CTX 512
#define MAX_PROMPTS 6

static int32_t s_prompts[MAX_PROMPTS][256];
static int s_lens[MAX_PROMPTS], s_n_prompts;

static int s_quick(void)
{
    const char *q = getenv("SW_CUDA_TEST_QUICK");
    return q && !strcmp(q, "1");
}

static void s_load_prompts(int V)
{
    const char *dir = getenv("SW_FIXTURES");
    char path[512];
    snprintf(path, sizeof path, "%s/greedy_smollm2.json", dir ? dir : "tests/fixtures");
    json_error_t je;
    json_t *doc = V == 49152 ? json_load_file(path, 0, &je) : NULL;
    json_t *cases = doc ? json_object_get(doc, "cases") : NULL;
    const int max = s_quick() ? 2 : MAX_PROMPTS;
    for (size_t c = 0; cases && c < json_array_size(cases) && s_n_prompts < max; c++) {
        json_t *pt = json_object_get(json_array_get(cases, c), "prompt_tokens");
        int n = (int)json_array_size(pt);
        if (n < 1 || n > 256)
            continue;
        for (int i = 0; i < n; i++)
            s_prompts[s_n_prompts][i] = (int32_t)json_integer_value(json_array_get(pt, i));
        s_lens[s_n_prompts++] = n;
    }
    json_decref(doc);
    uint32_t x = 4242;
    while (s_n_prompts < (s_quick() ? 2 : 4)) { // no fixture for this vocabulary: token prompts
        int n = 8 + 7 * s_n_prompts;
        for (int i = 0; i < n; i++) {
            x = x * 1664525u + 1013904223u;
            s_prompts[s_n_prompts][i] = (int32_t)((x >> 8) % (uint32_t)V);
        }
        s_lens[s_n_prompts++] = n;
    }
}

typedef struct s_gen {
    int32_t tok[N_GEN];
    int n;
    uint64_t digest;
    int accepted;
} s_gen_t;

/* One greedy generation; dm != NULL drafts K tokens per round with it. */
static int s_generate(sw_model_t *m, draft_model_t *dm, int k, const int32_t *prompt, int n_prompt,
                      s_gen_t *g)
{
    char err[256] = "";
    sw_sampling_t sp = sw_sampling_default();
    sp.temp = 0;
    memset(g, 0, sizeof *g);
    sw_local_target_t *lt = sw_local_target_new(m, N_CTX, &sp, err, sizeof err);
    draft_t *d = draft_new(dm);
    draft_cfg_t cfg = {.mode = dm ? DRAFT_MODE_MODEL : DRAFT_MODE_NONE, .k = k, .sampling = sp};
    int rc = -1;
    if (!lt || !d || draft_begin(d, &cfg, err, sizeof err) != 0)
        goto out;
    sw_target_t target = sw_local_target(lt);
    sw_proposer_t proposer = draft_proposer(d);
    sw_gen_opts_t o = {
        .n_predict = s_quick() ? N_GEN / 2 : N_GEN, .k = draft_gen_k(d), .proposer = &proposer};
    sw_gen_stats_t st;
    rc = sw_generate(&target, prompt, n_prompt, &o, g->tok, &st, err, sizeof err);
    g->n = st.n_gen;
    g->digest = st.logits_digest;
    g->accepted = st.accepted;
out:
    if (rc != 0)
        fprintf(stderr, "generate: %s\n", err);
    draft_free(&d);
    sw_local_target_free(&lt);
    return rc;
}

/* The CPU's top-2 margin at generated position pos (the prompt, then tokens). */
static double s_margin(sw_model_t *mc, const int32_t *prompt, int n_prompt, const int32_t *tok,
                       int pos)
{
    const int V = sw_model_hparams(mc)->n_vocab;
    float *l = malloc((size_t)V * sizeof *l);
    sw_kv_t *kv = sw_kv_new(mc, N_CTX);
    double margin = -1;
    int ok = l && kv && cuda_test_fwd(mc, kv, prompt, NULL, n_prompt, NULL, l, 1, 1) == 0;
    for (int i = 0; ok && i < pos; i++)
        ok = cuda_test_fwd(mc, kv, &tok[i], NULL, 1, NULL, l, 1, 0) == 0;
    if (ok) {
        int a = 0, b = -1;
        for (int i = 1; i < V; i++)
            if (l[i] > l[a])
                a = i;
        for (int i = 0; i < V; i++)
            if (i != a && (b < 0 || l[i] > l[b]))
                b = i;
        margin = (double)l[a] - l[b];
    }
    sw_kv_free(&kv);
    free(l);
    return margin;
}

static void s_model(const char *path)
{
    cuda_test_row("model", path);
    char err[256] = "";
    sw_backend_t *cpu = cuda_test_backend("cpu"), *gpu = cuda_test_backend("cuda:0");
    sw_model_t *mc = cuda_test_load(path, cpu, 0, -1), *mg = cuda_test_load(path, gpu, 0, -1);
    SW_CHECK(mc && mg);
    if (!mc || !mg)
        goto out;
    s_n_prompts = 0;
    s_load_prompts(sw_model_hparams(mc)->n_vocab);

    /* GPU against CPU, greedy. */
    int same = 0, explained = 0, bad = 0;
    for (int p = 0; p < s_n_prompts; p++) {
        s_gen_t gc, gg;
        SW_CHECK_INT(s_generate(mc, NULL, 0, s_prompts[p], s_lens[p], &gc), 0);
        SW_CHECK_INT(s_generate(mg, NULL, 0, s_prompts[p], s_lens[p], &gg), 0);
        int i = 0;
        while (i < gc.n && i < gg.n && gc.tok[i] == gg.tok[i])
            i++;
        if (i == gc.n && gc.n == gg.n) {
            same++;
            continue;
        }
        const double m = s_margin(mc, s_prompts[p], s_lens[p], gc.tok, i);
        printf("prompt %d: gpu differs at token %d, cpu top-2 margin %.4f\n", p, i, m);
        if (m >= 0 && m < S_MARGIN)
            explained++;
        else
            bad++;
    }
    char r[256];
    snprintf(r, sizeof r, "%d prompts same, %d within the margin rule, %d not", same, explained,
             bad);
    cuda_test_row("greedy tokens gpu vs cpu (fixture prompts)", r);
    SW_CHECK_INT(bad, 0);

    /* Speculative == plain on the GPU. */
    const char *dpath = getenv("SW_CUDA_DRAFT_MODEL");
    if (!dpath || !*dpath)
        dpath = path;
    const char *dbe = sw_cuda_device_count() > 1 ? "cuda:1" : "cuda:0";
    cuda_test_one_gpu("the draft model on cuda:1");
    draft_model_t *dm = draft_model_new(dpath, sw_model_gguf(mg), dbe, 0, N_CTX, err, sizeof err);
    if (!dm && dpath != path) { // a draft model for another vocabulary: the target drafts
        printf("draft model %s does not fit %s (%s): the target drafts for itself\n", dpath, path,
               err);
        dpath = path;
        dm = draft_model_new(dpath, sw_model_gguf(mg), dbe, 0, N_CTX, err, sizeof err);
    }
    draft_model_t *dmc =
        draft_model_new(dpath, sw_model_gguf(mg), "cpu", 0, N_CTX, err, sizeof err);
    SW_CHECK(dm && dmc);
    if (!dm || !dmc)
        fprintf(stderr, "draft model %s: %s\n", dpath, err);
    const int ks_all[] = {1, 2, 4, 8, 16}, ks_quick[] = {1, 4, 16};
    const int *ks = s_quick() ? ks_quick : ks_all;
    const size_t n_ks = s_quick() ? 3 : 5;
    int runs = 0, equal = 0, accepted = 0, rows_same = 0;
    for (int p = 0; dm && dmc && p < s_n_prompts; p++) {
        s_gen_t plain;
        SW_CHECK_INT(s_generate(mg, NULL, 0, s_prompts[p], s_lens[p], &plain), 0);
        for (size_t k = 0; k <= n_ks; k++) {
            s_gen_t sg, ref;
            const int kk = k < n_ks ? ks[k] : 4;
            draft_model_t *use = k < n_ks ? dm : dmc;
            SW_CHECK_INT(s_generate(mg, use, kk, s_prompts[p], s_lens[p], &sg), 0);
            SW_CHECK_INT(s_generate(mc, dmc, kk, s_prompts[p], s_lens[p], &ref), 0);
            runs++;
            accepted += sg.accepted;
            const int eq = sg.n == plain.n && !memcmp(sg.tok, plain.tok, sizeof sg.tok);
            const int rows = sg.digest == ref.digest && sg.accepted == ref.accepted;
            if (!eq)
                fprintf(stderr, "prompt %d K=%d (draft on %s): speculative differs from plain\n", p,
                        kk, use == dm ? dbe : "cpu");
            if (!rows)
                fprintf(stderr,
                        "prompt %d K=%d (draft on %s): verified rows differ from the cpu's "
                        "(%d drafts accepted, the cpu %d)\n",
                        p, kk, use == dm ? dbe : "cpu", sg.accepted, ref.accepted);
            equal += eq;
            rows_same += rows;
        }
    }
    snprintf(r, sizeof r,
             "%d of %d runs give plain's tokens, %d the cpu's verified rows bit for bit (draft on "
             "%s and on the cpu; %d drafts accepted)",
             equal, runs, rows_same, dbe, accepted);
    cuda_test_row("speculative == plain on the gpu, K 1..16", r);
    SW_CHECK(runs > 0);
    SW_CHECK_INT(equal, runs);
    SW_CHECK_INT(rows_same, runs);
    draft_model_free(&dm);
    draft_model_free(&dmc);
out:
    sw_model_free(&mc);
    sw_model_free(&mg);
    sw_backend_free(&cpu);
    sw_backend_free(&gpu);
}

int main(void)
{
    cuda_test_require_gpu();
    char paths[8][512];
    const char *spec = getenv("SW_CUDA_SPEC_MODELS");
    const char *tok_model = getenv("SW_CUDA_TOKENIZER_MODELS"); // models with a tokenizer
    if (spec && *spec)
        setenv("SW_CUDA_TEST_MODELS", spec, 1);
    else if (tok_model && *tok_model)
        setenv("SW_CUDA_TEST_MODELS", tok_model, 1);
    const int n = cuda_test_models(paths, 8);
    for (int i = 0; i < n; i++)
        s_model(paths[i]);
    return sw_test_done();
}
