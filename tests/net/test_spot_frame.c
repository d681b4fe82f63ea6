/*
 * test_spot_frame.c - a lying stand-in cannot get an honest node convicted
 * with two copies, nor keep it avoided by accusing it again (issue 35,
 * finding 5).
 *
 * A keyed cluster of real processes (relay, head 0:10 with --spot-check 1,
 * one middle "mid" 10:20, the tail 20:30 and a stand-in "rogue" 20:30, a
 * `KEY stage` key, running --test-fake-digest 1: every verdict it sends
 * reports a made-up digest of what it received from mid). Every session is
 * checked with two copies: head -> mid -> tail and head -> mid -> rogue; mid
 * serves both. The copies disagree at stage 1 (mid's output as the tails
 * report it): before, the head convicted the honest mid "differently from
 * itself"; now two copies never convict: mid is disputed, and so are the
 * tails that reported the copies that disagree.
 *
 *  - request 1: exact; no "convicted" line; mid disputed;
 *  - request 2, 3 s later: the same accusation by the same nodes: mid's avoid
 *    timer (`shardwire status --spot head --json`, avoid_s) runs on instead of
 *    starting its hour again.
 */
#include "sw_attack.h"

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_GEN 16

static char s_dir[64];
static char s_ep[64];

/* From `shardwire status --spot head --json`: node name's avoid_s (-1: not listed, -2: no
 * answer); *convicted its mark. */
static long s_avoid(const char *name, int *convicted)
{
    long avoid = -1;
    const int r = swa_spot_node(s_ep, name, convicted, &avoid, NULL);
    return r < 0 ? -2 : r == 0 ? -1 : avoid;
}

int main(void)
{
    const char *model = sw_test_model();
    signal(SIGPIPE, SIG_IGN);
    snprintf(s_dir, sizeof s_dir, "%s", sw_test_tmpdir());
    snprintf(s_ep, sizeof s_ep, "tcp://127.0.0.1:%d", sw_test_free_port());
    const char *nodes[] = {"head:head", "stage:mid", "stage:tail", "stage:rogue", NULL};
    const char *clients[] = {"client", NULL};
    SW_CHECK_INT(sw_test_keys(s_dir, nodes, clients), 0);
    const char *prompt = "The capital of France is";
    int32_t ref[N_GEN + 8];
    SW_CHECK_INT(sw_test_generate(model, prompt, N_GEN, ref, N_GEN + 8), N_GEN);
    char log[512];
    snprintf(log, sizeof log, "%s", sw_test_log("cluster.log"));
    static const char *const head_extra[] = {"--spot-check", "1", NULL};
    static const char *const rogue_extra[] = {"--test-fake-digest", "1", NULL};
    pid_t relay = sw_test_relay(s_ep, s_dir, log, NULL);
    pid_t mid = sw_test_node(s_ep, s_dir, "mid", "10:20", log, NULL);
    pid_t tail = sw_test_node(s_ep, s_dir, "tail", "20:30", log, NULL);
    pid_t rogue = sw_test_node(s_ep, s_dir, "rogue", "20:30", log, rogue_extra);
    pid_t head = sw_test_node(s_ep, s_dir, "head", "0:10", log, head_extra);
    sw_test_client_env(s_dir, "client");
    SW_CHECK_INT(sw_test_wait_peers(s_ep, 4, 90), 0);

    pid_t r1 = sw_test_run_bg(s_ep, "head", prompt, N_GEN, 120, "run1");
    SW_CHECK(sw_test_run_exact(r1, "run1", ref, N_GEN, 150));
    SW_CHECK(sw_test_wait_text(log, "'mid' is disputed", 20));
    int conv = 0;
    const long a1 = s_avoid("mid", &conv);
    const int convicted = sw_test_count_lines(log, "spot check: node", "convicted");
    printf("request 1: %d conviction(s) in the head's log; mid %s, avoided %ld s more; rogue "
           "disputed %d time(s)\n",
           convicted, conv ? "convicted" : "disputed", a1,
           sw_test_count_lines(log, "'rogue'", "disputed"));
    SW_CHECK_INT(convicted, 0);
    SW_CHECK(!conv && a1 > 3500);
    SW_CHECK(sw_test_count_lines(log, "'rogue' reported", "disputed") >= 1);

    sleep(3);
    const int accusations = sw_test_count_lines(log, "'mid' is disputed", "spot check");
    pid_t r2 = sw_test_run_bg(s_ep, "head", prompt, N_GEN, 120, "run2");
    SW_CHECK(sw_test_run_exact(r2, "run2", ref, N_GEN, 150));
    for (int i = 0;
         i < 40 && sw_test_count_lines(log, "'mid' is disputed", "spot check") == accusations; i++)
        usleep(250000);
    const long a2 = s_avoid("mid", &conv);
    printf("request 2 (accused again by the same nodes 3 s later): mid %s, avoided %ld s more "
           "(was %ld)\n",
           conv ? "convicted" : "disputed", a2, a1);
    SW_CHECK(sw_test_count_lines(log, "'mid' is disputed", "spot check") > accusations);
    SW_CHECK(!conv && a2 >= 0 && a2 <= a1 - 2);
    SW_CHECK_INT(sw_test_count_lines(log, "spot check: node", "convicted"), 0);

    sw_test_kill(head);
    sw_test_kill(rogue);
    sw_test_kill(tail);
    sw_test_kill(mid);
    sw_test_kill(relay);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", s_dir);
    return sw_test_done();
}
