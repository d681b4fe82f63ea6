/*
 * test_replace_mid.c - a middle stage that dies mid-request is replaced by
 * another node of its layers without a wait (docs/fault-tolerance.md
 * section 2). A keyed cluster of real programs: head 0:10, mid 10:20, tail
 * 20:30 (SmolLM2); while a request streams, mid2 (10:20) joins and mid is
 * SIGKILLed.
 *
 *  - the head routes the session through mid2; the tail, which holds the
 *    session for the peer that opened it (mid), would refuse mid2's Forwards
 *    ("session belongs to another peer", an Error to mid2 that the head never
 *    sees), so the head closes the session on the old route and goes on under
 *    a new id ("reaches a stage of its route through another stage now");
 *  - the request ends with generate's tokens, and no round waits for
 *    --round-timeout-ms (60 s by default): no "no verdict within" line. It
 *    used to wait a round timeout at every try until --recover-timeout-s.
 */
#include "sw_test.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define N_GEN 160

int main(void)
{
    const char *model = sw_test_model();
    char dir[256], ep[64];
    char log[512];
    snprintf(log, sizeof log, "%s", sw_test_log("cluster.log"));
    pid_t pids[4];
    SW_CHECK_INT(sw_test_keyed_chain(dir, ep, log, pids), 0);
    pid_t relay = pids[0], tail = pids[1], mid = pids[2], head = pids[3];
    const char *prompt = "Once upon a time, in a land far away,";
    int32_t ref[N_GEN + 8];
    SW_CHECK_INT(sw_test_generate(model, prompt, N_GEN, ref, N_GEN + 8), N_GEN);

    /* the request streams through mid; mid2 joins, then mid dies */
    pid_t run = sw_test_run_bg(ep, "head", prompt, N_GEN, 50, "run");
    SW_CHECK(sw_test_wait_text(log, "to generate", 30)); /* the head started it */
    pid_t mid2 = sw_test_node(ep, dir, "mid2", "10:20", log, NULL);
    SW_CHECK_INT(sw_test_wait_peers(ep, 4, 60), 0);
    kill(mid, SIGKILL);
    sw_test_kill(mid);
    SW_CHECK(sw_test_run_exact(run, "run", ref, N_GEN, 60));

    const int failed = sw_test_count_lines(log, "recovery: round at position", "failed after");
    const int renamed = sw_test_count_lines(log, "through another stage now", "goes on as");
    const int waited = sw_test_count_lines(log, "no verdict within", "shardwire[head]");
    printf("mid killed mid-request: %d failed round(s), %d new id(s) for the new predecessor, "
           "%d round timeout(s)\n",
           failed, renamed, waited);
    SW_CHECK(failed >= 1); /* the kill came while the request ran */
    SW_CHECK_INT(renamed, 1);
    SW_CHECK_INT(waited, 0);

    sw_test_kill(head);
    sw_test_kill(mid2);
    sw_test_kill(tail);
    sw_test_kill(relay);
    return sw_test_done();
}
