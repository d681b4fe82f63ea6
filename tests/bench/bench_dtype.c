/*
 * bench_dtype.c - what a narrower hidden-state width at a stage boundary does
 * to a model's output: the model split in two halves in one process, the
 * hidden states between them rounded as the wire would carry them (f16 or
 * bf16: base/half.h, the codec's pack), for the prompt's rows only
 * (--prefill-dtype) or for every row (--dtype), against the same split in
 * f32 (which is bit-identical to the whole model). Greedy decoding of N
 * tokens per prompt; per prompt: the tokens equal or the first that differs,
 * and the largest difference of any logit while the two runs' contexts were
 * the same (the steps up to and including the first differing token).
 *
 *   bench_dtype MODEL.gguf N prefill|all f16|bf16 PROMPT...
 *
 * Prints one JSON object per prompt and a summary line; scripts/bench/
 * measure_dtype.py runs it on the greedy fixtures (docs/benchmarks.md).
 */
#include <math.h>

#include "bench_util.h"
#include "gguf.h"
#include "half.h"
#include "kv.h"
#include "tokenizer.h"

typedef struct s_run {
    sw_model_t *a, *b; // layers [0, L/2) and [L/2, L)
    sw_kv_t *ka, *kb;  // their caches
    float *hid;        // (n_ctx, n_embd) hidden states between them
    float *logits;     // (n_vocab)
    int round_prompt;  // round the prompt's rows
    int round_decode;  // round the decoding rows
    int bf16;          // bf16, else f16
} s_run_t;

static void s_round(const s_run_t *r, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = r->bf16 ? sw_bf2f(sw_f2bf(x[i])) : sw_h2f(sw_f2h(x[i]));
}

/* Runs rows tok[0..n) through both halves (prompt: as a prompt), rounding between them
 * when asked; the logits of the last row into r->logits. 0 or -1. */
static int s_step(s_run_t *r, const int32_t *tok, int n, int prompt, int round)
{
    char err[256];
    const int E = sw_model_hparams(r->a)->n_embd;
    sw_forward_t fa = {.n = n, .tokens = tok, .out_hidden = r->hid, .prompt = prompt};
    if (sw_model_forward(r->a, r->ka, &fa, err, sizeof err) != 0) {
        fprintf(stderr, "bench_dtype: %s\n", err);
        return -1;
    }
    if (round)
        s_round(r, r->hid, (size_t)n * E);
    sw_forward_t fb = {
        .n = n, .hidden = r->hid, .logits = r->logits, .n_logits = 1, .prompt = prompt};
    if (sw_model_forward(r->b, r->kb, &fb, err, sizeof err) != 0) {
        fprintf(stderr, "bench_dtype: %s\n", err);
        return -1;
    }
    return 0;
}

static int s_argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

int main(int argc, char **argv)
{
    if (argc < 6 || (strcmp(argv[3], "prefill") && strcmp(argv[3], "all")) ||
        (strcmp(argv[4], "f16") && strcmp(argv[4], "bf16"))) {
        fprintf(stderr, "usage: bench_dtype MODEL.gguf N prefill|all f16|bf16 PROMPT...\n");
        return 2;
    }
    const int n_gen = atoi(argv[2]);
    char err[256];
    sw_backend_t *be = sw_backend_new("cpu", 1, err, sizeof err);
    sw_model_t *whole = be ? bench_load(argv[1], be) : NULL;
    if (!whole)
        return 1;
    const sw_hparams_t *hp = sw_model_hparams(whole);
    const int L = hp->n_layer, E = hp->n_embd, V = hp->n_vocab, n_ctx = 4096;
    sw_tokenizer_t *tk = sw_tokenizer_from_gguf(sw_model_gguf(whole), err, sizeof err);
    s_run_t run[2]; // 0: f32, 1: rounded
    for (int k = 0; k < 2; k++) {
        run[k] = (s_run_t){.round_prompt = k,
                           .round_decode = k && !strcmp(argv[3], "all"),
                           .bf16 = !strcmp(argv[4], "bf16")};
        run[k].a = sw_model_load(argv[1], 0, L / 2, be, err, sizeof err);
        run[k].b = run[k].a ? sw_model_load(argv[1], L / 2, L, be, err, sizeof err) : NULL;
        run[k].ka = run[k].a ? sw_kv_new(run[k].a, n_ctx) : NULL;
        run[k].kb = run[k].b ? sw_kv_new(run[k].b, n_ctx) : NULL;
        run[k].hid = malloc((size_t)n_ctx * E * sizeof(float));
        run[k].logits = malloc((size_t)V * sizeof(float));
        if (!tk || !run[k].kb || !run[k].hid || !run[k].logits) {
            fprintf(stderr, "bench_dtype: cannot set up %s: %s\n", argv[1], err);
            return 1;
        }
    }
    int equal = 0, n_prompts = 0;
    double worst = 0;
    for (int p = 5; p < argc; p++) {
        int n_tok = 0;
        int32_t *tok = sw_tokenize_alloc(tk, argv[p], strlen(argv[p]), 1, 0, &n_tok);
        if (!tok || n_tok < 1 || n_tok + n_gen > n_ctx) {
            free(tok);
            continue;
        }
        int32_t next[2];
        double max_diff = 0;
        int first_diff = -1;
        for (int k = 0; k < 2; k++) {
            if (sw_kv_truncate(run[k].ka, 0) != 0 || sw_kv_truncate(run[k].kb, 0) != 0 ||
                s_step(&run[k], tok, n_tok, 1, run[k].round_prompt) != 0)
                return 1;
        }
        for (int i = 0; i < n_gen; i++) {
            for (int j = 0; j < V; j++) {
                const double d = fabs((double)run[0].logits[j] - run[1].logits[j]);
                max_diff = d > max_diff ? d : max_diff;
            }
            for (int k = 0; k < 2; k++)
                next[k] = s_argmax(run[k].logits, V);
            if (next[0] != next[1]) {
                first_diff = i;
                break;
            }
            if (i + 1 == n_gen || sw_tokenizer_is_eog(tk, next[0]))
                break;
            for (int k = 0; k < 2; k++)
                if (s_step(&run[k], &next[k], 1, 0, run[k].round_decode) != 0)
                    return 1;
        }
        printf("{\"prompt\": %d, \"n_prompt\": %d, \"tokens_equal\": %s, \"first_diff\": %d, "
               "\"max_logit_diff\": %.6g}\n",
               n_prompts, n_tok, first_diff < 0 ? "true" : "false", first_diff, max_diff);
        equal += first_diff < 0;
        worst = max_diff > worst ? max_diff : worst;
        n_prompts++;
        free(tok);
    }
    printf("summary: %s rows as %s: %d of %d prompts' tokens equal, largest logit difference "
           "%.4g\n",
           argv[3], argv[4], equal, n_prompts, worst);
    return 0;
}
