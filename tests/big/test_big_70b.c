/*
 * test_big_70b.c - messages sized by bytes at a 70B model's width (issue 33):
 * the first 4 layers of Llama-3.1-70B's shapes and Q4_K_M type mix with
 * random weights (shardwire-mkmodel --synth llama3.1-70b --layers 4, 3.6 GB,
 * made once into $SW_MODELS_DIR/synth/), two nodes with real keys (CURVE to
 * the relay, sealed payloads), a prompt of about 2,000 tokens: its whole
 * windows travel as 512 x 8192 x f32 = 16 MiB Forwards, exactly
 * SW_WIRE_MAX_PAYLOAD, which used to drop the head's link (sealing and CURVE
 * took the frame past ZMQ_MAXMSGSIZE) and end in "recovery gave up". Greedy
 * tokens and logits digest equal `shardwire generate`'s, no recovery, no
 * Resume.
 */
#include "sw_big.h"

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const char *model = swb_model("llama3.1-70b", 4, "ggml-vocab-llama-bpe.gguf");
    SW_CHECK_INT(sw_wire_prompt_rows(8192), 512); // whole windows: 16 MiB each
    static const int ranges[2][2] = {{0, 2}, {2, 4}};
    swf_result_t got;
    /* whole windows (--prefill-pieces 0): the fair queue's pieces of a prompt that shares
     * the pipeline are smaller than 16 MiB */
    static const char *const flags[] = {"--prefill-pieces", "0", NULL};
    swb_cluster_test(model, 2, ranges, 1, swb_prompt(125), 4, 2100, 0, flags, &got);
    return sw_test_done();
}
