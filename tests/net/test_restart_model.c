/*
 * test_restart_model.c - a stage restarted under its name with another model
 * file does not end the next request (docs/fault-tolerance.md section 2). A
 * keyed cluster of real programs: head 0:10, mid 10:20, tail 20:30. After a
 * request, mid is restarted at once with another model file (the same weights
 * under another name in the metadata, so another fingerprint), and mid2 (this
 * model, 10:20) joins. The next request starts within HEAD_ROUTE_FRESH_MS of
 * the head's last peer table, so it takes the route through mid that the head
 * still holds; mid refuses it (ERR_BAD_REQUEST: "the route's head 'head'
 * serves another model").
 *
 *  - the head routes again from a table asked after the refusal, which passes
 *    over mid, and the request ends with generate's tokens through mid2. It
 *    used to end with the refusal;
 *  - the refusal is routed again once: the head's log shows one recovery that
 *    names it.
 *
 * The head asks for a table every HEAD_ROUTE_FRESH_MS / 2 while idle, so on a
 * loaded machine a table can reach it between mid's restart and request 2; the
 * route then passes over mid from the start and the refusal path is not run.
 * The test says so and tries again on a fresh cluster (at most S_ATTEMPTS).
 */
#include "sw_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define N_GEN 24
#define S_ATTEMPTS 3

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* One try on a fresh keyed cluster; returns the recoveries from mid's refusal
 * that the head logged, or -1 when the cluster did not come up or request 2
 * did not end with generate's tokens (no use trying again). */
static int s_attempt(const char *model, const char *prompt, const int32_t *ref, int attempt)
{
    char dir[256], ep[64], other[256], name[32];
    char log[512];
    snprintf(name, sizeof name, "cluster%d.log", attempt);
    snprintf(log, sizeof log, "%s", sw_test_log(name));
    pid_t pids[4];
    if (sw_test_keyed_chain(dir, ep, log, pids) != 0)
        return -1;
    pid_t relay = pids[0], tail = pids[1], mid = pids[2], head = pids[3];
    snprintf(other, sizeof other, "%.200s/other.gguf", dir);
    SW_CHECK_INT(sw_test_renamed_model(model, other), 0);

    /* request 1: through mid */
    pid_t r1 = sw_test_run_bg(ep, "head", prompt, 4, 60, "run1");
    SW_CHECK(sw_test_run_exact(r1, "run1", ref, 4, 90));

    /* mid comes back at once with another model file (a later --model wins), mid2 joins */
    const double t0 = s_now();
    sw_test_kill(mid);
    const char *const other_model[] = {"--model", other, NULL};
    mid = sw_test_node(ep, dir, "mid", "10:20", log, other_model);
    pid_t mid2 = sw_test_node(ep, dir, "mid2", "10:20", log, NULL);
    SW_CHECK_INT(sw_test_wait_peers(ep, 4, 60), 0); /* head, tail, the new mid, mid2 */

    /* request 2: the head's route through mid is still fresh */
    pid_t r2 = sw_test_run_bg(ep, "head", prompt, N_GEN, 60, "run2");
    const double t_start = s_now() - t0;
    const int exact = sw_test_run_exact(r2, "run2", ref, N_GEN, 90);
    SW_CHECK(exact);
    const int refused =
        sw_test_count_lines(log, "recovery: round at position", "serves another model");
    printf("attempt %d: request 2 started %.1f s after mid's restart began; recoveries from "
           "mid's refusal: %d\n",
           attempt, t_start, refused);

    sw_test_kill(head);
    sw_test_kill(mid);
    sw_test_kill(mid2);
    sw_test_kill(tail);
    sw_test_kill(relay);
    unlink(other);
    return exact ? refused : -1;
}

int main(void)
{
    const char *model = sw_test_model();
    const char *prompt = "The capital of France is";
    int32_t ref[N_GEN + 8];
    SW_CHECK_INT(sw_test_generate(model, prompt, N_GEN, ref, N_GEN + 8), N_GEN);

    int refused = 0;
    for (int attempt = 1; attempt <= S_ATTEMPTS && refused == 0; attempt++) {
        refused = s_attempt(model, prompt, ref, attempt);
        SW_CHECK(refused >= 0);
        if (refused == 0)
            printf("attempt %d: a table reached the head before request 2, which passed over "
                   "mid from the start: the refusal path did not run; again on a fresh cluster\n",
                   attempt);
    }
    SW_CHECK_INT(refused, 1);
    return sw_test_done();
}
