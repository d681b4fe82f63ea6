/*
 * test_recover.c - fault tolerance with real processes on loopback (the fast
 * part; the long scenarios are in tests/slow/test_recover_slow.c):
 *
 *  - the tail stage is killed (SIGKILL) mid-generation and restarted under
 *    the same name: the head waits, replays the session's committed tokens
 *    and retries; the client's tokens equal `shardwire generate`'s, none lost
 *    or repeated; the same with sampling (temperature, seed, repetition
 *    penalty) against the same pipeline without a fault, and with n-gram
 *    drafts (speculative rounds are replayed with their drafts);
 *  - a node stopped with SIGSTOP leaves the relay's table within a few
 *    heartbeat intervals, and comes back by itself after SIGCONT;
 *  - a long prefill on a single compute thread does not starve the
 *    heartbeats (ZMTP heartbeats run in libzmq's I/O thread): the tail is
 *    never dropped and the head never has to recover;
 *  - a stage that freed a session on its own (idle timeout) takes the
 *    head's replay of it;
 *  - a replay whose window waits: the tail it goes to is killed in the
 *    window (the route check and the round timeout run then), and a slow
 *    tail's window longer than --round-timeout-ms is not taken for a loss;
 *  - a route change that leaves a live stage behind (head -> mid -> tail,
 *    the tail killed, a stage of mid's and tail's layers started): the
 *    head closes the session on mid (it held the cache until its idle
 *    timeout) and goes on under a new id, tokens equal.
 *
 * The relay runs with --heartbeat-ms 200 (dead after 5 x 200 ms of silence).
 */
#include "sw_fault.h"

#define N_GEN 64

static const char *s_prompt = "The capital of France is";

/* Lines of c's log from node `name` that contain needle. */
static int s_node_lines(const swf_cluster_t *c, const char *name, const char *needle)
{
    size_t len = 0;
    char *text = sw_test_read_file(c->log, &len), tag[64];
    snprintf(tag, sizeof tag, "shardwire[%s] ", name);
    int n = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n"))
        n += !strncmp(line, tag, strlen(tag)) && strstr(line, needle);
    free(text);
    return n;
}

int main(void)
{
    const char *model = sw_test_model();
    signal(SIGPIPE, SIG_IGN);
    swf_result_t ref, got;
    swf_reference(model, s_prompt, N_GEN, NULL, &ref);
    SW_CHECK(ref.ok && ref.n == N_GEN);

    swf_cluster_t c = {0};
    snprintf(c.nodes[0].name, sizeof c.nodes[0].name, "head");
    snprintf(c.nodes[0].layers, sizeof c.nodes[0].layers, "0:15");
    snprintf(c.nodes[0].extra[0], 32, "--recover-timeout-s");
    snprintf(c.nodes[0].extra[1], 32, "30");
    snprintf(c.nodes[0].extra[2], 32, "--round-timeout-ms");
    snprintf(c.nodes[0].extra[3], 32, "10000");
    snprintf(c.nodes[1].name, sizeof c.nodes[1].name, "tail");
    snprintf(c.nodes[1].layers, sizeof c.nodes[1].layers, "15:30");
    SW_CHECK_INT(swf_start(&c, model, 2, sw_test_log("nodes.log")), 0);

    /* 1. The tail killed mid-generation and restarted: greedy, then sampling
     * (temperature, repetition penalty, seed), whose tokens depend on the
     * verifier's random numbers and history being rebuilt exactly. */
    static char seed[16] = "7";
    static const char *const sampling[] = {"--temp",           "0.9",  "--seed", seed,
                                           "--repeat-penalty", "1.15", NULL};
    /* The sampled reference is the same pipeline without a fault: the claim
     * is "as if nothing failed", whatever --dtype the stages use (f16 or bf16
     * hidden states change the logits slightly, so their samples may differ
     * from `shardwire generate`'s). */
    /* A seed whose sample runs all N_GEN tokens (no early end of text), so
     * that the kill below lands mid-generation. */
    swf_result_t ref_s;
    for (int sd = 7; sd < 17; sd++) {
        snprintf(seed, sizeof seed, "%d", sd);
        swf_client_t cl0 = {0};
        SW_CHECK_INT(swf_client_start(&cl0, c.ep, s_prompt, N_GEN, 120, sampling, "ref"), 0);
        swf_client_wait(&cl0, &ref_s);
        if (ref_s.ok && ref_s.n == N_GEN)
            break;
    }
    SW_CHECK(ref_s.ok && ref_s.n == N_GEN);
    SW_CHECK(!swf_same(&ref_s, &ref)); // the sampled run really differs from greedy
    static const char *const ngram[] = {"--draft", "ngram", NULL};
    for (int pass = 0; pass < 3; pass++) {
        /* 0 greedy, 1 sampling, 2 greedy with n-gram drafts (the replay
         * sends the drafted rounds again) */
        const char *const *extra = pass == 1 ? sampling : pass == 2 ? ngram : NULL;
        const swf_result_t *want = pass == 1 ? &ref_s : &ref;
        long in0 = 0;
        SW_CHECK_INT(swf_peer(c.ep, "tail", &in0, NULL), 1);
        const int recovered0 = swf_log_count(&c, "went through again");
        swf_client_t cl = {0};
        SW_CHECK_INT(swf_client_start(&cl, c.ep, s_prompt, N_GEN, 120, extra, "recover"), 0);
        /* The tail sends one message (a Verdict) per round: wait for 10. */
        SW_CHECK_INT(swf_wait_msgs_in(c.ep, "tail", in0 + 10, 60), 0);
        SW_CHECK(swf_client_running(&cl)); // still mid-generation
        const double t_kill = swf_now_ms();
        swf_kill9(&c.nodes[1].pid);
        usleep(700 * 1000);
        swf_start_node(&c, 1);
        swf_client_wait(&cl, &got);
        const double t_done = swf_now_ms();
        SW_CHECK_INT(got.rc, 0);
        SW_CHECK(swf_same(&got, want));
        if (!swf_same(&got, want))
            fprintf(stderr, "tokens differ at %d of %d/%d: %s\n", swf_diff_at(&got, want), got.n,
                    want->n, got.err);
        SW_CHECK(swf_log_count(&c, "went through again") > recovered0);
        /* docs/fault-tolerance.md: a restarted tail sees the replayed rounds
         * as the first time, so its logits digest is that of a run without
         * the fault (f32 hidden states: of one process, for greedy). With
         * n-gram drafts the rows verified differ from the reference's. */
        if (pass < 2) {
            SW_CHECK(got.digest[0] && !strcmp(got.digest, want->digest));
            if (strcmp(got.digest, want->digest))
                fprintf(stderr, "logits digest after recovery %s, without the fault %s\n",
                        got.digest, want->digest);
        }
        fprintf(stderr,
                "tail kill (%s): round failed %.0f ms after it was sent, recovered %.0f ms after "
                "that; kill to end of the request %.0f ms\n",
                pass == 1   ? "sampling"
                : pass == 2 ? "greedy, n-gram drafts"
                            : "greedy",
                swf_log_ms(&c, "failed after "), swf_log_ms(&c, "went through again "),
                t_done - t_kill);
    }

    /* 2. SIGSTOP: declared dead within a few heartbeat intervals. A spare
     * tail named after "tail" is never picked for the route. */
    {
        swf_node_t *sp = &c.nodes[2];
        snprintf(sp->name, sizeof sp->name, "zz-spare");
        snprintf(sp->layers, sizeof sp->layers, "15:30");
        c.n = 3;
        swf_start_node(&c, 2);
        SW_CHECK_INT(sw_test_wait_peers(c.ep, 3, 60), 0);
        SW_CHECK_INT(swf_peer(c.ep, "zz-spare", NULL, NULL), 1);
        kill(sp->pid, SIGSTOP);
        const double t0 = swf_now_ms();
        double gone_ms = -1;
        while (swf_now_ms() - t0 < 15000) {
            if (swf_peer(c.ep, "zz-spare", NULL, NULL) == 0) {
                gone_ms = swf_now_ms() - t0;
                break;
            }
            usleep(50000);
        }
        fprintf(stderr,
                "SIGSTOP: dropped from the relay's table after %.0f ms (heartbeat 200 ms)\n",
                gone_ms);
        SW_CHECK(gone_ms > 0 && gone_ms < 5 * 200 + 2000);
        SW_CHECK_INT(swf_peer(c.ep, "tail", NULL, NULL), 1); // the others stay
        kill(sp->pid, SIGCONT);
        const double t1 = swf_now_ms();
        double back_ms = -1;
        while (swf_now_ms() - t1 < 15000) {
            if (swf_peer(c.ep, "zz-spare", NULL, NULL) == 1) {
                back_ms = swf_now_ms() - t1;
                break;
            }
            usleep(100000);
        }
        fprintf(stderr, "SIGCONT: announced again after %.0f ms\n", back_ms);
        SW_CHECK(back_ms >= 0);
        sw_test_kill(sp->pid);
        sp->pid = 0;
        c.n = 2;
    }

    /* 3. A long prefill (one compute thread, several heartbeat timeouts
     * long) does not get the stage dropped. */
    {
        static char prompt[8192];
        prompt[0] = 0;
        for (int i = 0; i < 50; i++)
            strcat(prompt, "The quick brown fox jumps over the lazy dog. ");
        swf_result_t ref2;
        swf_reference(model, prompt, 4, NULL, &ref2);
        const int before = swf_log_count(&c, "recovery:");
        const int lost = swf_log_count(&c, "lost the relay connection");
        swf_client_t cl = {0};
        const double t0 = swf_now_ms();
        SW_CHECK_INT(swf_client_start(&cl, c.ep, prompt, 4, 120, NULL, "prefill"), 0);
        swf_client_wait(&cl, &got);
        fprintf(stderr,
                "long prefill: %.0f ms end to end, the tail computed %.0f ms on one thread "
                "(the relay drops a peer after 1000 ms of silence): no eviction expected\n",
                swf_now_ms() - t0, got.tail_ms);
        SW_CHECK_INT(got.rc, 0);
        SW_CHECK(swf_same(&got, &ref2));
        SW_CHECK_INT(swf_log_count(&c, "recovery:"), before);
        SW_CHECK_INT(swf_log_count(&c, "lost the relay connection"), lost);
    }
    swf_stop(&c);

    /* 4. A stage that freed a session on its own (here: its idle timeout,
     * while the head stood still) must take the head's replay of it: only a
     * session its owner closed stays closed to stray Forwards. */
    {
        swf_cluster_t c4 = {.relay_hb = 1000}; /* the stopped head stays in the table */
        static const char *const h4[] = {"--recover-timeout-s", "20", NULL};
        static const char *const t4[] = {"--idle-timeout-s", "1", NULL};
        swf_node(&c4.nodes[0], "head", "0:15", h4);
        swf_node(&c4.nodes[1], "tail", "15:30", t4);
        SW_CHECK_INT(swf_start(&c4, model, 2, sw_test_log("nodes4.log")), 0);
        long in0 = 0;
        SW_CHECK_INT(swf_peer(c4.ep, "tail", &in0, NULL), 1);
        swf_client_t cl = {0};
        SW_CHECK_INT(swf_client_start(&cl, c4.ep, s_prompt, N_GEN, 120, NULL, "idle"), 0);
        SW_CHECK_INT(swf_wait_msgs_in(c4.ep, "tail", in0 + 10, 60), 0);
        kill(c4.nodes[0].pid, SIGSTOP);
        usleep(2500 * 1000); /* the tail frees the session after 1 s idle */
        kill(c4.nodes[0].pid, SIGCONT);
        swf_client_wait(&cl, &got);
        SW_CHECK_INT(got.rc, 0);
        SW_CHECK(swf_same(&got, &ref));
        if (!swf_same(&got, &ref))
            fprintf(stderr, "idle-freed session: tokens differ at %d: %s\n",
                    swf_diff_at(&got, &ref), got.err);
        SW_CHECK(swf_log_count(&c4, "idle for") >= 1);
        fprintf(stderr, "idle-freed session: the tail freed it %d time(s), %d recoveries\n",
                swf_log_count(&c4, "idle for"), swf_log_count(&c4, "went through again"));
        swf_stop(&c4);
    }

    /* 5. A replay whose window stalls: the head sends at most NODE_REC_WINDOW
     * replayed rounds unanswered, then waits for the window's verdict. Here
     * the tail it replays to is killed while it works through the window:
     * the rounds it had not run are lost with it, and the relay, which
     * delivered them, tells nobody. The route check and --round-timeout-ms
     * must go on in that state (they ran only while the current round
     * travelled: the request waited for its deadline). Three tails, each made
     * slow on purpose (--test-slow-ms: a window takes seconds to run, and a
     * round is slow enough to act mid-generation, and a window of them takes
     * longer than the head's --round-timeout-ms, which must not fire while
     * their verdicts come). */
    {
        swf_result_t ref5;
        swf_reference(model, s_prompt, 96, NULL, &ref5);
        SW_CHECK(ref5.ok && ref5.n == 96);
        swf_cluster_t c5 = {0};
        static const char *const h5[] = {"--recover-timeout-s", "30", "--round-timeout-ms", "1500",
                                         NULL};
        static const char *const slow[] = {"--test-slow-ms", "60", NULL};
        swf_node(&c5.nodes[0], "head", "0:15", h5);
        swf_node(&c5.nodes[1], "t1", "15:30", slow);
        swf_node(&c5.nodes[2], "t2", "15:30", slow);
        swf_node(&c5.nodes[3], "t3", "15:30", slow);
        SW_CHECK_INT(swf_start(&c5, model, 4, sw_test_log("nodes5.log")), 0);
        long in[4] = {0};
        for (int i = 1; i < 4; i++)
            SW_CHECK_INT(swf_peer(c5.ep, c5.nodes[i].name, &in[i], NULL), 1);
        swf_client_t cl = {0};
        SW_CHECK_INT(swf_client_start(&cl, c5.ep, s_prompt, 96, 60, NULL, "stall"), 0);
        /* the tail of the route: the one with 60 verdicts (the replay needs two windows, the
         * second nearly full, so the current round waits behind 28 slow replayed rounds:
         * longer than --round-timeout-ms, and their verdicts must count) */
        int x = 0;
        for (int k = 0; k < 600 && !x; k++)
            for (int i = 1; i < 4 && !x; i++) {
                long v = 0;
                if (swf_peer(c5.ep, c5.nodes[i].name, &v, NULL) == 1 && v >= in[i] + 60)
                    x = i;
            }
        SW_CHECK(x > 0 && swf_client_running(&cl));
        if (x < 1)
            x = 1;
        swf_kill9(&c5.nodes[x].pid);
        const double t_kill = swf_now_ms();
        /* the head replays to one of the others: which one, its log says */
        const char *needle = "recovery: the route is now head -> t";
        for (int i = 0; i < 500 && !swf_log_count(&c5, needle); i++)
            usleep(10000);
        size_t len = 0;
        char *text = sw_test_read_file(c5.log, &len);
        const char *at = text ? strstr(text, needle) : NULL;
        int y = at ? atoi(at + strlen(needle)) : 0;
        free(text);
        SW_CHECK(y >= 1 && y <= 3 && y != x);
        if (y < 1 || y > 3 || y == x)
            y = x == 1 ? 2 : 1;
        const int z = 6 - x - y;
        usleep(700 * 1000); /* the head sent its window at once; the slow tail is in it */
        SW_CHECK(swf_client_running(&cl));
        swf_kill9(&c5.nodes[y].pid);
        const double t_lost = swf_now_ms();
        swf_client_wait(&cl, &got);
        const double t_done = swf_now_ms();
        SW_CHECK_INT(got.rc, 0);
        SW_CHECK(swf_same(&got, &ref5));
        if (!swf_same(&got, &ref5))
            fprintf(stderr, "stalled replay: tokens differ at %d: %s\n", swf_diff_at(&got, &ref5),
                    got.err);
        char gone[64];
        snprintf(gone, sizeof gone, "stage 't%d' left the pipeline during the round", y);
        SW_CHECK(swf_log_count(&c5, gone) == 1);
        SW_CHECK(t_done - t_lost < 20000);
        /* a window takes a slow tail 32 x 60 ms, longer than --round-timeout-ms: its replayed
         * verdicts show it moves (fault-tolerance.md, "Slow is not gone") */
        SW_CHECK_INT(swf_log_count(&c5, "no verdict within"), 0);
        fprintf(stderr,
                "stalled replay: t%d killed, t%d killed %.0f ms later within the replay's window; "
                "the request ended %.0f ms after that, on t%d (%d replays)\n",
                x, y, t_lost - t_kill, t_done - t_lost, z,
                swf_log_count(&c5, "recovery: replaying"));
        swf_stop(&c5);
    }

    /* 6. A route change that leaves a live stage: head -> mid (15:22) -> tail (22:30), the
     * tail killed, then "whole" (15:30) started: the only whole route is head -> whole, and
     * mid, alive, leaves the session's route. The head closes the session there (mid kept
     * its cache until its --idle-timeout-s before) and goes on under a new id. */
    {
        swf_cluster_t c6 = {0};
        static const char *const h6[] = {"--recover-timeout-s", "30", NULL};
        swf_node(&c6.nodes[0], "head", "0:15", h6);
        swf_node(&c6.nodes[1], "mid", "15:22", NULL);
        swf_node(&c6.nodes[2], "tail", "22:30", NULL);
        swf_node(&c6.nodes[3], "whole", "15:30", NULL);
        SW_CHECK_INT(swf_start(&c6, model, 3, sw_test_log("nodes6.log")), 0);
        long in0 = 0;
        SW_CHECK_INT(swf_peer(c6.ep, "tail", &in0, NULL), 1);
        swf_client_t cl = {0};
        SW_CHECK_INT(swf_client_start(&cl, c6.ep, s_prompt, N_GEN, 120, NULL, "leave"), 0);
        SW_CHECK_INT(swf_wait_msgs_in(c6.ep, "tail", in0 + 10, 60), 0);
        SW_CHECK(swf_client_running(&cl));
        swf_kill9(&c6.nodes[2].pid);
        c6.n = 4;
        swf_start_node(&c6, 3);
        swf_client_wait(&cl, &got);
        SW_CHECK_INT(got.rc, 0);
        SW_CHECK(swf_same(&got, &ref));
        if (!swf_same(&got, &ref))
            fprintf(stderr, "route change: tokens differ at %d: %s\n", swf_diff_at(&got, &ref),
                    got.err);
        SW_CHECK(swf_log_count(&c6, "recovery: the route is now head -> whole") >= 1);
        const char *closed = "closed by head (the session took another route)";
        for (int i = 0; i < 50 && !s_node_lines(&c6, "mid", closed); i++)
            usleep(100000);
        SW_CHECK_INT(s_node_lines(&c6, "mid", closed), 1);
        SW_CHECK_INT(s_node_lines(&c6, "head", "left a live stage of its route"), 1);
        fprintf(stderr, "route change: mid closed the session %s\n",
                s_node_lines(&c6, "mid", closed) ? "(told by the head)" : "NOT (kept its cache)");
        swf_stop(&c6);
    }
    return sw_test_done();
}
