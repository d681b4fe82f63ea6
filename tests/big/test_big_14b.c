/*
 * test_big_14b.c - Qwen2.5-14B's shapes and Q4_K_M type mix with random
 * weights (shardwire-mkmodel --synth qwen2.5-14b, 8.99 GB, made once into
 * $SW_MODELS_DIR/synth/) over three nodes of one thread each (layers 0:16,
 * 16:32, 32:48): greedy tokens and logits digest equal `shardwire generate`'s
 * on the whole file, no recovery, no Resume, and each node's resident memory
 * within its share of the file + its KV + 256 MiB (sw_big.h).
 */
#include "sw_big.h"

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const char *model = swb_model("qwen2.5-14b", 0, "ggml-vocab-qwen2.gguf");
    static const int ranges[3][2] = {{0, 16}, {16, 32}, {32, 48}};
    static const char *const flags[] = {"--prefix-cache", "off", NULL};
    swf_result_t got;
    swb_cluster_test(model, 3, ranges, 0, swb_prompt(12), 8, 2048, 1, flags, &got);
    return sw_test_done();
}
