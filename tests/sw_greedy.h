/*
 * sw_greedy.h - greedy parity with llama.cpp, shared by tests/e2e/test_greedy.c
 * (SmolLM2) and tests/slow/test_greedy_qwen.c (Qwen2.5-Coder 0.5B and 1.5B).
 * The fixtures in tests/fixtures/greedy_*.json were made by
 * scripts/ref/make_greedy_fixtures.py with llama-cpp-python (an independent
 * implementation) on the same GGUF: prompt token ids, the greedy
 * continuation, and the top-5 logits of the first generated position. A check
 * compares our tokenizer's prompt ids, our engine's greedy tokens from
 * llama.cpp's prompt ids, and the first position's top-5 logits (to a given
 * tolerance). Header-only (static functions) so that each test stays one .c.
 */
#ifndef SW_GREEDY_H
#define SW_GREEDY_H

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "decode.h"
#include "model.h"
#include "sw_test.h"
#include "tokenizer.h"

/* Checks every case of the fixture against the model (threads compute
 * threads); tol bounds |our logit - llama.cpp's| on the first position's
 * top-5. Returns 0, or -1 when the fixture or the model cannot be read. */
static inline int swg_check_fixture(const char *fixture, const char *model_path, int threads,
                                    double tol)
{
    json_error_t je;
    json_t *doc = json_load_file(fixture, 0, &je);
    if (!doc) {
        fprintf(stderr, "%s: %s\n", fixture, je.text);
        SW_CHECK(!"fixture parses");
        return -1;
    }
    char err[512] = "";
    sw_backend_t *be = sw_backend_new("cpu", threads, NULL, 0);
    sw_model_t *m = sw_model_load(model_path, 0, -1, be, err, sizeof err);
    SW_CHECK(m != NULL);
    if (!m) {
        fprintf(stderr, "%s\n", err);
        json_decref(doc);
        sw_backend_free(&be);
        return -1;
    }
    sw_tokenizer_t *tok = sw_tokenizer_from_gguf(sw_model_gguf(m), err, sizeof err);
    SW_CHECK(tok != NULL);
    const int V = sw_model_hparams(m)->n_vocab;
    json_t *cases = json_object_get(doc, "cases");
    int n_cases = 0, n_same = 0, n_tok_same = 0;
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *cs = json_array_get(cases, c);
        const char *name = json_string_value(json_object_get(cs, "name"));
        const char *prompt = json_string_value(json_object_get(cs, "prompt"));
        int special = json_is_true(json_object_get(cs, "parse_special"));
        json_t *pt = json_object_get(cs, "prompt_tokens");
        json_t *gt = json_object_get(cs, "gen_tokens");
        json_t *margins = json_object_get(cs, "margins");
        const int n_prompt = (int)json_array_size(pt), n_gen = (int)json_array_size(gt);
        int32_t *ptoks = malloc((size_t)n_prompt * sizeof *ptoks);
        int32_t *want = malloc((size_t)n_gen * sizeof *want);
        int32_t *got = malloc((size_t)n_gen * sizeof *got);
        for (int i = 0; i < n_prompt; i++)
            ptoks[i] = (int32_t)json_integer_value(json_array_get(pt, i));
        for (int i = 0; i < n_gen; i++)
            want[i] = (int32_t)json_integer_value(json_array_get(gt, i));
        n_cases++;

        /* Our tokenizer on the same prompt. */
        int n_ours = 0;
        int32_t *ours =
            tok ? sw_tokenize_alloc(tok, prompt, strlen(prompt), 1, special, &n_ours) : NULL;
        int tok_same =
            ours && n_ours == n_prompt && !memcmp(ours, ptoks, (size_t)n_prompt * sizeof *ours);
        SW_CHECK(tok_same);
        n_tok_same += tok_same;
        free(ours);

        /* Our engine from llama.cpp's prompt ids, greedy, no EOG stop. */
        sw_sampling_t sp = sw_sampling_default();
        sp.temp = 0;
        sw_local_target_t *lt = sw_local_target_new(m, n_prompt + n_gen + 8, &sp, err, sizeof err);
        SW_CHECK(lt != NULL);
        sw_target_t tg = sw_local_target(lt);
        sw_gen_opts_t go = {.n_predict = n_gen};
        sw_gen_stats_t st;
        int rc = lt ? sw_generate(&tg, ptoks, n_prompt, &go, got, &st, err, sizeof err) : -1;
        SW_CHECK_INT(rc, 0);
        int first_diff = -1;
        for (int i = 0; rc == 0 && i < n_gen && first_diff < 0; i++)
            if (got[i] != want[i])
                first_diff = i;
        if (first_diff >= 0) {
            double mg = json_real_value(json_array_get(margins, (size_t)first_diff));
            fprintf(stderr,
                    "%s: first difference at generated token %d (ours %d, llama.cpp %d); "
                    "llama.cpp's top-2 logit margin there: %.5f\n",
                    name, first_diff, got[first_diff], want[first_diff], mg);
        }
        SW_CHECK(first_diff < 0);
        n_same += first_diff < 0 && rc == 0;

        /* First position's logits: the top-5 ids and values. */
        sw_kv_t *kv = sw_kv_new(m, n_prompt + 1);
        float *logits = malloc((size_t)V * sizeof *logits);
        sw_forward_t f = {
            .n = n_prompt, .tokens = ptoks, .logits = logits, .n_logits = 1, .prompt = 1};
        SW_CHECK(kv != NULL && logits != NULL);
        rc = kv && logits ? sw_model_forward(m, kv, &f, err, sizeof err) : -1;
        SW_CHECK_INT(rc, 0); /* a failed forward pass fails the test, never skips the check */
        if (rc != 0)
            fprintf(stderr, "%s: the prompt's forward pass failed: %s\n", name, err);
        if (rc == 0) {
            json_t *top = json_object_get(cs, "first_top5");
            double worst = 0;
            for (size_t k = 0; k < json_array_size(top); k++) {
                json_t *e = json_array_get(top, k);
                int id = (int)json_integer_value(json_object_get(e, "id"));
                double ref = json_real_value(json_object_get(e, "logit"));
                double d = fabs((double)logits[id] - ref);
                if (d > worst)
                    worst = d;
            }
            printf("%-16s prompt ids %s, %d/%d tokens equal, top-5 logit max |diff| %.5f\n", name,
                   tok_same ? "equal" : "DIFFER", first_diff < 0 ? n_gen : first_diff, n_gen,
                   worst);
            SW_CHECK(worst <= tol);
        }
        free(logits);
        sw_kv_free(&kv);
        sw_local_target_free(&lt);
        free(ptoks);
        free(want);
        free(got);
    }
    printf("%s: %d/%d cases identical, %d/%d prompts tokenized identically\n", fixture, n_same,
           n_cases, n_tok_same, n_cases);
    SW_CHECK(n_cases >= 1);
    sw_tokenizer_free(&tok);
    sw_model_free(&m);
    sw_backend_free(&be);
    json_decref(doc);
    return 0;
}

#endif
