/*
 * test_slow_queue.c - a prompt chunk that waits in a slow stage's own queue
 * is not lost (issue 33). A keyed cluster of two nodes behind a WAN emulator
 * (20 ms each way) whose tail holds its loop 12 s longer in every batch
 * (--test-slow-ms, as a 7B layer range on a starved CPU computes a 512-row
 * chunk for minutes), and whose head's clock runs 110 s behind the tail's
 * (--test-clock-skew-ms: machines whose clocks are apart, within the 120 s a
 * sealed message lives). The prompt goes in 3 byte-sized chunks
 * (--prefill-pieces 0); the head sends them at once, so the second and third
 * wait 12 s and 24 s in the tail's receive queue while it computes:
 *
 *  - the tokens equal `shardwire generate`'s; nothing is dropped, no
 *    recovery. The tail used to judge a chunk's age when it read it: 110 s +
 *    12 s of its own computing is more than 120 s, so it dropped the chunk as
 *    a replay ("sealed message from head dropped: sent more than 120000 ms
 *    ago"), and the next chunk found a hole ("the round keeps N positions but
 *    this stage has M"); each replay met the same fate until recovery gave up
 *    (what scripts/bench/bench_ttft.py hit on the 7B at load 25, where one
 *    chunk took minutes and no skew was needed).
 *
 * tests/net/test_seal_queue.c shows the same with bare peers in seconds.
 */
#include "sw_fault.h"

#define N_GEN 2

int main(void)
{
    const char *model = sw_test_model();
    signal(SIGPIPE, SIG_IGN);
    /* about 250 tokens: the head cuts them into 3 Forwards (64, 128, the rest: node/chunk.c) */
    static char prompt[4096];
    size_t at = 0;
    for (int i = 0; i < 15 && at + 96 < sizeof prompt; i++)
        at += (size_t)snprintf(prompt + at, sizeof prompt - at,
                               "Section %d: the relay forwards frames by name and never decodes "
                               "tensors. ",
                               i);
    swf_result_t ref, got;
    swf_reference(model, prompt, N_GEN, NULL, &ref);
    SW_CHECK(ref.ok && ref.n == N_GEN);

    swf_cluster_t c = {0};
    snprintf(c.keys, sizeof c.keys, "%s", sw_test_tmpdir());
    c.wan_ms = 20;
    static const char *const head_flags[] = {
        "--draft", "none", "--prefill-pieces", "0", "--test-clock-skew-ms", "-110000", NULL};
    static const char *const tail_flags[] = {"--test-slow-ms", "12000", NULL};
    swf_node(&c.nodes[0], "head", "0:15", head_flags);
    swf_node(&c.nodes[1], "tail", "15:30", tail_flags);
    SW_CHECK_INT(swf_start(&c, model, 2, sw_test_log("nodes.log")), 0);

    swf_client_t cl = {0};
    SW_CHECK_INT(swf_client_start(&cl, c.ep, prompt, N_GEN, 300, NULL, "slowq"), 0);
    swf_client_wait(&cl, &got);
    SW_CHECK_INT(got.rc, 0);
    SW_CHECK(swf_same(&got, &ref));
    SW_CHECK_INT(swf_log_count(&c, "dropped a message"), 0);
    SW_CHECK_INT(swf_log_count(&c, "recovery:"), 0);
    SW_CHECK_INT(swf_log_count(&c, "this stage has"), 0);
    /* the chunks did wait: the tail ran the prompt's 3 chunks and the decode round */
    SW_CHECK(swf_log_count(&c, "--test-slow-ms: held") >= 3 + N_GEN - 1);
    swf_stop(&c);
    return sw_test_done();
}
