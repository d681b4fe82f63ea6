/*
 * test_greedy.c - greedy parity with llama.cpp on SmolLM2-135M Q4_1 (the
 * default model): tests/fixtures/greedy_smollm2.json, 10 prompts x 64 tokens,
 * made from llama.cpp's AVX2 build (scripts/ref/README.md). Our tokenizer must
 * give the same prompt ids, our engine the same tokens, and the first
 * position's top-5 logits must equal the fixture's to its 5 decimals: the
 * kernels follow that build's arithmetic bit for bit. The Qwen2.5-Coder
 * fixtures need 1.6 GB of models and run in the slow suite
 * (tests/slow/test_greedy_qwen.c).
 */
#include <unistd.h>

#include "sw_greedy.h"

int main(void)
{
    const char *fixtures = sw_test_env("SW_FIXTURES");
    const char *model = sw_test_model();
    char path[1024];
    snprintf(path, sizeof path, "%s/greedy_smollm2.json", fixtures);
    if (access(path, R_OK) != 0)
        sw_test_skip("tests/fixtures/greedy_smollm2.json is absent");
    /* The fixture stores logits rounded to 5 decimals. */
    swg_check_fixture(path, model, 2, 2e-5);
    return sw_test_done();
}
