/*
 * test_greedy_qwen.c - greedy parity with llama.cpp on the real target/drafter
 * pair, Qwen2.5-Coder-1.5B-Instruct Q4_K_M (Q4_K, Q6_K) and
 * Qwen2.5-Coder-0.5B-Instruct Q4_K_M (mostly Q5_0, with Q8_0, Q4_K, Q6_K):
 * tests/fixtures/greedy_qwen15.json and greedy_qwen05.json, made from
 * llama.cpp's AVX2 build with Q4_K repacking off (scripts/ref/README.md).
 * Label slow: the models are 1.6 GB (bash scripts/fetch_model.sh
 * qwen-coder-1.5b and qwen-coder-0.5b; .ci/run fetches them).
 */
#include <unistd.h>

#include "sw_greedy.h"

static void s_set(const char *fixtures, const char *models, const char *fixture, const char *file,
                  const char *fetch_name, double tol)
{
    char path[1024], model[1024];
    snprintf(path, sizeof path, "%s/%s", fixtures, fixture);
    snprintf(model, sizeof model, "%s/%s", models, file);
    if (access(model, R_OK) != 0) {
        char why[2300];
        snprintf(why, sizeof why, "%s: model %s is absent (run: bash scripts/fetch_model.sh %s)",
                 fixture, model, fetch_name);
        sw_test_skip_part(why);
        return;
    }
    SW_CHECK(access(path, R_OK) == 0);
    swg_check_fixture(path, model, 2, tol);
}

/* The fixtures round logits to 5 decimals: a tolerance of 1e-5 asks for
 * llama.cpp's logits to the last stored digit (the engine reproduces them to
 * the bit; see scripts/ref/README.md). */
int main(void)
{
    const char *fixtures = sw_test_env("SW_FIXTURES");
    const char *models = sw_test_env("SW_MODELS_DIR");
    s_set(fixtures, models, "greedy_qwen15.json", "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf",
          "qwen-coder-1.5b", 1e-5);
    s_set(fixtures, models, "greedy_qwen05.json", "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
          "qwen-coder-0.5b", 1e-5);
    return sw_test_done();
}
