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
 */
#include "sw_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define N_GEN 24

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(void)
{
    const char *model = sw_test_model();
    char dir[256], ep[64], other[256];
    char log[512];
    snprintf(log, sizeof log, "%s", sw_test_log("cluster.log"));
    pid_t pids[4];
    SW_CHECK_INT(sw_test_keyed_chain(dir, ep, log, pids), 0);
    pid_t relay = pids[0], tail = pids[1], mid = pids[2], head = pids[3];
    snprintf(other, sizeof other, "%.200s/other.gguf", dir);
    SW_CHECK_INT(sw_test_renamed_model(model, other), 0);
    const char *prompt = "The capital of France is";
    int32_t ref[N_GEN + 8];
    SW_CHECK_INT(sw_test_generate(model, prompt, N_GEN, ref, N_GEN + 8), N_GEN);

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
    SW_CHECK(sw_test_run_exact(r2, "run2", ref, N_GEN, 90));
    const int refused =
        sw_test_count_lines(log, "recovery: round at position", "serves another model");
    printf(
        "request 2 started %.1f s after mid's restart began; recoveries from mid's refusal: %d\n",
        t_start, refused);
    SW_CHECK_INT(refused, 1);

    sw_test_kill(head);
    sw_test_kill(mid);
    sw_test_kill(mid2);
    sw_test_kill(tail);
    sw_test_kill(relay);
    unlink(other);
    return sw_test_done();
}
