/*
 * test_arch_cluster.c - the model families of issue 24 through the programs
 * a user runs (tests/sw_arch.h names the models):
 *
 *  - `shardwire generate --greedy` on two of each model's fixture prompts
 *    (the first and the sixth) gives llama.cpp's first tokens
 *    (tests/fixtures/arch_*.json): the Llama 3.2 shape with its rope_freqs,
 *    Qwen3, Qwen3-MoE, Gemma 3 270M and the sliding-window miniature, from
 *    the text prompt through our tokenizer;
 *  - a relay and two shardwire-node stages splitting the layers in half,
 *    with f32 hidden states, give `shardwire run` the same tokens and the
 *    same logits digest (every logits row, bit for bit) as one process, on
 *    two prompts (for the mixture of experts: each stage holds all the
 *    experts of its layers);
 *  - the same with speculation: the head (which also loads the model as
 *    its own draft model) drafting with the n-gram proposer and with the
 *    draft model gives the same tokens.
 */
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sw_arch.h"
#include "sw_test.h"

#define N_GEN 16

static void s_run_set(int si)
{
    const char *set = swa_sets[si].set;
    json_t *doc = swa_fixture(set);
    char model[1024];
    if (!doc || swa_model(doc, model, sizeof model) != 0) {
        json_decref(doc);
        return;
    }
    json_t *cases = json_object_get(doc, "cases");
    /* a short and a long prompt, no special-token text */
    const json_t *picked[2] = {json_array_get(cases, 0), json_array_get(cases, 5)};
    sw_result_t ref[2], got;
    for (int i = 0; i < 2; i++) {
        const char *prompt = json_string_value(json_object_get(picked[i], "prompt"));
        const json_t *want = json_object_get(picked[i], "gen_tokens");
        sw_result_generate(model, prompt ? prompt : "", N_GEN, 180, &ref[i]);
        int same = ref[i].ok && ref[i].n == N_GEN;
        for (int t = 0; same && t < N_GEN; t++)
            same = ref[i].ids[t] == (int32_t)json_integer_value(json_array_get(want, (size_t)t));
        if (!same)
            fprintf(stderr, "%s: shardwire generate differs from llama.cpp on prompt %d\n", set, i);
        SW_CHECK(same);
    }
    char ep[64];
    pid_t relay = 0, nodes[2] = {0, 0};
    const int up =
        swa_start(model, swa_sets[si].mid, swa_sets[si].split, ep, sizeof ep, &relay, nodes);
    SW_CHECK_INT(up, 0);
    for (int i = 0; up == 0 && i < 2; i++) {
        const char *prompt = json_string_value(json_object_get(picked[i], "prompt"));
        SW_CHECK_INT(swa_run(ep, prompt, N_GEN, "none", &got), 0);
        const int same =
            sw_result_same(&got, &ref[i]) && got.digest[0] && !strcmp(got.digest, ref[i].digest);
        if (!same)
            fprintf(stderr, "%s: 2 stages differ from one process on prompt %d\n", set, i);
        SW_CHECK(same);
        SW_CHECK_INT(swa_run(ep, prompt, N_GEN, "ngram", &got), 0);
        SW_CHECK(sw_result_same(&got, &ref[i]));
        SW_CHECK_INT(swa_run(ep, prompt, N_GEN, "model", &got), 0);
        SW_CHECK(sw_result_same(&got, &ref[i]));
        SW_CHECK(got.drafted > 0); // the draft model did draft
    }
    printf("%s: generate == llama.cpp, 2 stages == 1 process (tokens, logits digest), n-gram "
           "and draft-model speculation == plain\n",
           set);
    swa_stop(relay, nodes);
    json_decref(doc);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const char *only = getenv("SW_ARCH_SETS");
    for (int i = 0; i < SWA_N_SETS; i++) {
        char want[64], list[256];
        snprintf(want, sizeof want, ",%s,", swa_sets[i].set);
        snprintf(list, sizeof list, ",%s,", only ? only : "");
        if (only && *only && !strstr(list, want))
            continue;
        s_run_set(i);
    }
    return sw_test_done();
}
