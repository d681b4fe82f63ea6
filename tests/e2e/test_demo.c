/*
 * test_demo.c - the core of the README's first command (scripts/demo.sh runs
 * scripts/bench/demo_wan.py after installing, fetching and building): the default
 * model split over two nodes behind shardwire-wanem at 86 ms per round trip,
 * plain decoding next to n-gram drafts and the draft model (the model itself).
 *
 *  - the table has the three rows; plain decoding commits 1.00 token per round
 *    trip, the self-drafting model accepts every draft and commits several
 *    tokens per round trip, and is faster than plain decoding;
 *  - every mode gave the same tokens (the demo says so, and checks it);
 *  - Ctrl-C (SIGINT to the demo's process group, as a terminal sends it)
 *    while a request is running ends the demo within seconds with exit 130,
 *    and no process it started is left.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sw_test.h"

/* The numbers of a table row that starts with label: tok/s, tokens per round trip, speed-up. */
static int s_row(const char *out, const char *label, double *tps, double *tpr, double *up)
{
    const char *p = out ? strstr(out, label) : NULL;
    while (p && p > out && p[-1] != '\n') /* the table's row, not a progress line */
        p = strstr(p + 1, label);
    if (!p)
        return -1;
    p += strlen(label);
    return sscanf(p, " %lf %lf %lfx", tps, tpr, up) == 3 ? 0 : -1;
}

int main(void)
{
    const char *model = sw_test_model();
    const char *src = sw_test_env("SW_SOURCE_DIR");
    char script[512];
    snprintf(script, sizeof script, "%s/scripts/bench/demo_wan.py", src);
    char *argv[] = {"/usr/bin/env",
                    "python3",
                    script,
                    "--target",
                    (char *)model,
                    "--draft",
                    (char *)model,
                    "--draft-label",
                    "SmolLM2-135M drafting for itself",
                    "-p",
                    "Write a Python function that checks whether a number is prime.",
                    "-n",
                    "32",
                    "--repeat-penalty",
                    "1.1",
                    "--build",
                    (char *)sw_test_env("SW_BUILD_DIR"),
                    NULL};
    char *out = NULL, *err = NULL;
    int rc = sw_test_run(argv, 400, &out, &err);
    SW_CHECK_INT(rc, 0);
    fprintf(stderr, "%s\n%s\n", err ? err : "", out ? out : "");
    double tps[3], tpr[3], up[3];
    SW_CHECK_INT(s_row(out, "plain decoding", &tps[0], &tpr[0], &up[0]), 0);
    SW_CHECK_INT(s_row(out, "n-gram drafts (prompt lookup)", &tps[1], &tpr[1], &up[1]), 0);
    SW_CHECK_INT(
        s_row(out, "draft model: SmolLM2-135M drafting for itself", &tps[2], &tpr[2], &up[2]), 0);
    SW_CHECK_NEAR(tpr[0], 1.0, 0.001);
    SW_CHECK_NEAR(up[0], 1.0, 0.001);
    SW_CHECK(tpr[2] >= 3.0);                  /* several tokens per round trip */
    SW_CHECK(tps[2] > tps[0] && up[2] > 1.0); /* and faster than plain decoding */
    SW_CHECK(out && strstr(out, "86 ms per round trip"));
    SW_CHECK(out && strstr(out, "every mode gave the same tokens: yes"));
    /* the self-drafting model's drafts are all accepted: "N / N" in its row */
    const char *row = out ? strstr(out, "\ndraft model: SmolLM2") : NULL;
    int acc = -1, dr = -2;
    const char *slash = row ? strstr(row, " / ") : NULL;
    if (slash) {
        const char *a = slash;
        while (a > row && a[-1] >= '0' && a[-1] <= '9')
            a--;
        acc = atoi(a);
        dr = atoi(slash + 3);
    }
    SW_CHECK(acc > 0 && acc == dr);
    free(out);
    free(err);

    /* Ctrl-C during a request: everything it started stops, exit 130. */
    char log[256];
    snprintf(log, sizeof log, "%s", sw_test_log("demo_int.log"));
    argv[12] = "400"; /* a long plain request, to be interrupted */
    pid_t pid = sw_test_spawn(argv, log);
    SW_CHECK(pid > 0);
    SW_CHECK(sw_test_wait_text(log, "demo: plain decoding ...", 120));
    usleep(1500 * 1000);
    kill(-pid, SIGINT); /* the whole process group, as a terminal's Ctrl-C */
    rc = sw_test_wait(pid, 20);
    SW_CHECK_INT(rc, 130);
    SW_CHECK(sw_test_count_in_file(log, "demo: interrupted; the relay, proxies and nodes were "
                                        "stopped") == 1);
    int left = 0;
    for (int i = 0; i < 50; i++) { /* the group is empty once every child was reaped */
        left = kill(-pid, 0) == 0 || errno != ESRCH;
        if (!left)
            break;
        usleep(100000);
    }
    SW_CHECK(!left);
    if (left)
        kill(-pid, SIGKILL);
    return sw_test_done();
}
