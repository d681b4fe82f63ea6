/*
 * test_multi_slow.c - no token lost while several sessions stream and the
 * relay dies (label slow, a few minutes): a relay, a head and a tail node,
 * three `shardwire run` clients at once (greedy, seeded sampling, n-gram
 * drafts), and the relay SIGKILLed and restarted on the same port 20 times,
 * each time at another moment of the streaming (after 5 to ~350 of the
 * tail's ~500 verdicts, down for 0.3 to 1.5 s). Chunks in flight are lost with
 * the relay; every client notices (a gap in the chunk index, a reconnect, or
 * a silence), asks the head to send again from the tokens it holds
 * (Resume), and drops duplicates. Every client's output must equal the same
 * request run without a fault, token for token, every time.
 */
#include "sw_fault.h"

#define N_GEN 300
#define RUNS 20

static const char *s_prompts[3] = {
    "Once upon a time, in a land far away,",
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
};
static const char *const s_cfg[3][7] = {
    {NULL},
    {"--temp", "0.8", "--seed", "7", "--draft", "none", NULL},
    {"--draft", "ngram", NULL},
};

int main(void)
{
    const char *model = sw_test_model();
    signal(SIGPIPE, SIG_IGN);
    swf_cluster_t c = {0};
    static const char *const head[] = {"--recover-timeout-s", "60", "--round-timeout-ms", "10000",
                                       NULL};
    swf_node(&c.nodes[0], "head", "0:15", head);
    swf_node(&c.nodes[1], "tail", "15:30", NULL);
    SW_CHECK_INT(swf_start(&c, model, 2, sw_test_log("nodes.log")), 0);

    swf_result_t ref[3], got[3];
    swf_client_t cl[3] = {{0}};
    for (int i = 0; i < 3; i++) {
        SW_CHECK_INT(swf_client_start(&cl[i], c.ep, s_prompts[i], N_GEN, 300, s_cfg[i], "ref"), 0);
        swf_client_wait(&cl[i], &ref[i]);
        SW_CHECK_INT(ref[i].rc, 0);
        SW_CHECK(ref[i].n >= 50);
    }
    int exact = 0, runs = 0;
    for (int run = 0; run < RUNS; run++) {
        long in0 = 0;
        SW_CHECK_INT(swf_peer(c.ep, "tail", &in0, NULL), 1);
        char tag[16];
        for (int i = 0; i < 3; i++) {
            snprintf(tag, sizeof tag, "relay%d", i);
            SW_CHECK_INT(swf_client_start(&cl[i], c.ep, s_prompts[i], N_GEN, 300, s_cfg[i], tag),
                         0);
        }
        const long at = 5 + (run * 97) % 350; // verdicts before the kill (~500 in a run)
        const int down_ms = 300 + (run * 370) % 1200;
        int waited = swf_wait_msgs_in(c.ep, "tail", in0 + at, 120);
        const double t_kill = swf_now_ms();
        swf_kill9(&c.relay);
        usleep((useconds_t)down_ms * 1000);
        SW_CHECK(swf_start_relay(&c) > 0);
        int ok = 1;
        for (int i = 0; i < 3; i++) {
            swf_client_wait(&cl[i], &got[i]);
            ok &= got[i].rc == 0 && swf_same(&got[i], &ref[i]);
            if (got[i].rc != 0 || !swf_same(&got[i], &ref[i]))
                fprintf(stderr, "run %d client %d: rc %d, differs at %d of %d/%d: %s\n", run, i,
                        got[i].rc, swf_diff_at(&got[i], &ref[i]), got[i].n, ref[i].n, got[i].err);
        }
        fprintf(stderr,
                "run %2d: relay killed after %4ld verdicts%s, down %4d ms; all three exact: %s; "
                "%.1f s from the kill to the last token\n",
                run, at, waited == 0 ? "" : " (the runs ended first)", down_ms, ok ? "yes" : "NO",
                (swf_now_ms() - t_kill) / 1e3);
        exact += ok;
        runs++;
        SW_CHECK(ok);
        SW_CHECK_INT(sw_test_wait_peers(c.ep, 2, 60), 0); // the nodes are back for the next run
    }
    fprintf(stderr, "%d of %d runs exact for all three clients; %d Resumes answered by the head\n",
            exact, runs, swf_log_count(&c, "resumed from token"));
    SW_CHECK(swf_log_count(&c, "resumed from token") > 0); // chunks really were lost and resent
    swf_stop(&c);
    return sw_test_done();
}
