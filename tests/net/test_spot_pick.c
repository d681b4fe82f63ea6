/*
 * test_spot_pick.c - a spot check's shadows are drawn at random among the
 * stand-ins, not taken by name (docs/security.md, "Spot checks"): colluding
 * nodes cannot count on being the referees of a range by the names they hold.
 *
 * A keyed cluster of real processes (relay, head 0:15 with --spot-check 1 and
 * four tails t1..t4 of 15:30): every session is checked with two shadows out
 * of the three stand-ins its route leaves. The head logs each session's route
 * and shadows. Before, the shadows were the two stand-ins with the lowest
 * names every time (t4 was never one unless the route took t1..t3 away); now
 * a session takes those two with probability 1/3, so over S_RUNS sessions
 * all doing so fails the test with probability (1/3)^S_RUNS (about 2e-5).
 * Every output is exact.
 */
#include "sw_test.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_GEN 4
#define S_RUNS 10
#define S_TAILS 4

static const char *const s_tails[S_TAILS] = {"t1", "t2", "t3", "t4"};

/* Index of name in s_tails, or -1. */
static int s_tail(const char *name, size_t len)
{
    for (int i = 0; i < S_TAILS; i++)
        if (strlen(s_tails[i]) == len && !strncmp(s_tails[i], name, len))
            return i;
    return -1;
}

/*
 * One "spot check: session ... (route R) checked against 2 shadow route(s): A | B" line:
 * *main the route's tail, sh[0..1] the shadows' (indices into s_tails). 1 when well formed.
 */
static int s_parse(const char *line, int *main, int sh[2])
{
    const char *r = strstr(line, "(route "), *c = strstr(line, "shadow route(s): ");
    if (!r || !c)
        return 0;
    r += 7;
    const char *end = strchr(r, ')');
    *main = end ? s_tail(r, (size_t)(end - r)) : -1;
    c += 17;
    const char *bar = strstr(c, " | ");
    if (!bar)
        return 0;
    sh[0] = s_tail(c, (size_t)(bar - c));
    c = bar + 3;
    sh[1] = s_tail(c, strcspn(c, "\r\n"));
    return *main >= 0 && sh[0] >= 0 && sh[1] >= 0;
}

int main(void)
{
    const char *model = sw_test_model();
    signal(SIGPIPE, SIG_IGN);
    char dir[64], ep[64];
    snprintf(dir, sizeof dir, "%s", sw_test_tmpdir());
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", sw_test_free_port());
    const char *nodes[] = {"head:head", "stage:t1", "stage:t2", "stage:t3", "stage:t4", NULL};
    const char *clients[] = {"client", NULL};
    SW_CHECK_INT(sw_test_keys(dir, nodes, clients), 0);
    const char *prompt = "The capital of France is";
    int32_t ref[N_GEN + 8];
    SW_CHECK_INT(sw_test_generate(model, prompt, N_GEN, ref, N_GEN + 8), N_GEN);
    char log[512];
    snprintf(log, sizeof log, "%s", sw_test_log("cluster.log"));
    static const char *const head_extra[] = {"--spot-check", "1", NULL};
    pid_t relay = sw_test_relay(ep, dir, log, NULL);
    pid_t tails[S_TAILS];
    for (int i = 0; i < S_TAILS; i++)
        tails[i] = sw_test_node(ep, dir, s_tails[i], "15:30", log, NULL);
    pid_t head = sw_test_node(ep, dir, "head", "0:15", log, head_extra);
    sw_test_client_env(dir, "client");
    SW_CHECK_INT(sw_test_wait_peers(ep, 1 + S_TAILS, 90), 0);

    int exact = 0;
    for (int i = 0; i < S_RUNS; i++) {
        char tag[16];
        snprintf(tag, sizeof tag, "run%d", i);
        exact += sw_test_run_exact(sw_test_run_bg(ep, "head", prompt, N_GEN, 60, tag), tag, ref,
                                   N_GEN, 90);
    }
    SW_CHECK_INT(exact, S_RUNS);

    /* the sessions' routes and shadows, from the head's log */
    char *text = sw_test_read_file(log, NULL);
    int sessions = 0, bad = 0, not_lowest = 0, as_shadow[S_TAILS] = {0};
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        if (!strstr(line, "spot check: session") || !strstr(line, "checked against"))
            continue;
        int m, sh[2];
        if (!s_parse(line, &m, sh) || sh[0] == sh[1] || sh[0] == m || sh[1] == m) {
            fprintf(stderr, "unexpected: %s\n", line);
            bad++;
            continue;
        }
        sessions++;
        as_shadow[sh[0]]++;
        as_shadow[sh[1]]++;
        /* the two lowest names but the route's own */
        int low[2], k = 0;
        for (int t = 0; t < S_TAILS && k < 2; t++)
            if (t != m)
                low[k++] = t;
        if (!((sh[0] == low[0] && sh[1] == low[1]) || (sh[0] == low[1] && sh[1] == low[0])))
            not_lowest++;
    }
    free(text);
    printf("%d sessions checked with 2 shadows each; %d of them not the two lowest names; as a "
           "shadow: t1 %d, t2 %d, t3 %d, t4 %d\n",
           sessions, not_lowest, as_shadow[0], as_shadow[1], as_shadow[2], as_shadow[3]);
    SW_CHECK_INT(bad, 0);
    SW_CHECK(sessions >= S_RUNS);
    SW_CHECK(not_lowest >= 1);

    sw_test_kill(head);
    for (int i = 0; i < S_TAILS; i++)
        sw_test_kill(tails[i]);
    sw_test_kill(relay);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return sw_test_done();
}
