/*
 * test_big_7b.c - the model people run (issue 33): Qwen2.5-7B's shapes and
 * llama.cpp's Q4_K_M type mix with random weights (shardwire-mkmodel --synth
 * qwen2.5-7b, 4.68 GB, made once into $SW_MODELS_DIR/synth/) over two nodes
 * of one thread each, a prompt of about 1,000 tokens (pieces of 64, 128, 256,
 * 64 and 512 rows, then the end's):
 *
 *  - greedy tokens and logits digest equal `shardwire generate`'s on the whole
 *    file in one process; no recovery, no Resume;
 *  - each node's resident memory stays within its share of the file (its
 *    layers' weights, the embedding on the head, the output on the tail), the
 *    KV cache of the request's positions and 256 MiB (buffers, logits, code).
 */
#include "sw_big.h"

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const char *model = swb_model("qwen2.5-7b", 0, "ggml-vocab-qwen2.gguf");
    static const int ranges[2][2] = {{0, 14}, {14, 28}};
    static const char *const flags[] = {"--prefix-cache", "off", NULL};
    swf_result_t got;
    swb_cluster_test(model, 2, ranges, 0, swb_prompt(60), 12, 2048, 1, flags, &got);
    return sw_test_done();
}
