/*
 * test_recover_others.c - docs/fault-tolerance.md: "With several sessions in
 * flight each one recovers on its own: the others keep streaming while one
 * waits for its route or replays."
 *
 * A head and two tails serving the same layers; two `shardwire run` clients
 * whose sessions the head routes through different tails (each tail's debug
 * log shows one session), each 300 bytes into its text (so that the replay
 * lasts seconds). One tail is frozen (SIGSTOP): its session stalls
 * until the head's round timeout, then is routed through the other tail and
 * replayed. While it stalls, the other client's text keeps growing and the
 * stalled one's does not, and it keeps growing through the recovery (from
 * the head's failure line to its "went through again": also in its second
 * half, past the round in flight at the failure); at the end both
 * outputs equal `shardwire generate`'s, token for token.
 */
#include "sw_test.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define N_GEN 1000
#define PROMPT "Count from 1 to 1000: 1, 2, 3,"

static char s_ep[64];

static pid_t s_node(const char *model, const char *name, const char *layers, const char *log,
                    const char *const *extra)
{
    char *argv[32];
    int n = 0;
    argv[n++] = (char *)sw_test_bin("shardwire-node");
    argv[n++] = "--model";
    argv[n++] = (char *)model;
    argv[n++] = "--layers";
    argv[n++] = (char *)layers;
    argv[n++] = "--relay";
    argv[n++] = s_ep;
    argv[n++] = "--name";
    argv[n++] = (char *)name;
    argv[n++] = "--threads";
    argv[n++] = "1";
    argv[n++] = "--insecure-loopback";
    for (int i = 0; extra && extra[i] && n < 31; i++)
        argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    return sw_test_spawn(argv, log);
}

static pid_t s_client(const char *out, const char *err)
{
    char n_gen[16];
    snprintf(n_gen, sizeof n_gen, "%d", N_GEN);
    char *argv[] = {(char *)sw_test_bin("shardwire"),
                    "run",
                    "--greedy",
                    "--relay",
                    s_ep,
                    "--insecure-loopback",
                    "-p",
                    PROMPT,
                    "-n",
                    n_gen,
                    "--timeout-s",
                    "400",
                    NULL};
    return sw_test_spawn_io(argv, out, err);
}

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static long s_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

int main(void)
{
    const char *model = sw_test_model();
    signal(SIGPIPE, SIG_IGN);
    snprintf(s_ep, sizeof s_ep, "tcp://127.0.0.1:%d", sw_test_free_port());

    /* the reference text: `shardwire run` prints the text; so does generate */
    char n_gen[16];
    snprintf(n_gen, sizeof n_gen, "%d", N_GEN);
    char *ga[] = {(char *)sw_test_bin("shardwire"),
                  "generate",
                  "--greedy",
                  "--model",
                  (char *)model,
                  "-p",
                  PROMPT,
                  "-n",
                  n_gen,
                  "--threads",
                  "1",
                  NULL};
    char *ref = NULL;
    SW_CHECK_INT(sw_test_run(ga, 600, &ref, NULL), 0);
    SW_CHECK(ref && strlen(ref) > 100);

    char *ra[] = {(char *)sw_test_bin("shardwire-relay"), "--listen", s_ep, "--insecure-loopback",
                  NULL};
    pid_t relay = sw_test_spawn(ra, sw_test_log("relay.log"));
    const char *head_x[] = {"--round-timeout-ms", "4000", "--recover-timeout-s", "60", NULL};
    pid_t head = s_node(model, "head", "0:15", sw_test_log("head.log"), head_x);
    setenv("SW_LOG_LEVEL", "debug", 1); /* the tails log the sessions they open */
    const char *log_a = sw_test_log("tail-a.log"), *log_b = sw_test_log("tail-b.log");
    pid_t ta = s_node(model, "tail-a", "15:30", log_a, NULL);
    pid_t tb = s_node(model, "tail-b", "15:30", log_b, NULL);
    unsetenv("SW_LOG_LEVEL");
    SW_CHECK_INT(sw_test_wait_peers(s_ep, 3, 60), 0);

    /* client 1, then (once its session is open) client 2: the head routes the
     * second through the tail that has been quiet longest */
    const char *out1 = sw_test_log("run1.out"), *out2 = sw_test_log("run2.out");
    pid_t c1 = s_client(out1, sw_test_log("run1.err")), c2 = 0;
    for (int i = 0; i < 300; i++) {
        if (sw_test_count_in_file(log_a, "opened by head") +
                sw_test_count_in_file(log_b, "opened by head") >=
            1)
            break;
        usleep(100000);
    }
    sleep(3); /* the head's peer table (refreshed every second) shows tail-a busy */
    c2 = s_client(out2, sw_test_log("run2.err"));
    for (int i = 0; i < 300; i++) {
        if (sw_test_count_in_file(log_a, "opened by head") >= 1 &&
            sw_test_count_in_file(log_b, "opened by head") >= 1)
            break;
        usleep(100000);
    }
    int on_a = sw_test_count_in_file(log_a, "opened by head"),
        on_b = sw_test_count_in_file(log_b, "opened by head");
    SW_CHECK(on_a == 1 && on_b == 1); /* one session per tail */
    /* both streaming, far enough that the replay below lasts (about 100 rounds) */
    for (int i = 0; i < 600 && (s_size(out1) < 300 || s_size(out2) < 300); i++)
        usleep(100000);

    /* freeze tail-a; which client is on it shows in who stops */
    kill(ta, SIGSTOP);
    usleep(500000);
    long a1 = s_size(out1), a2 = s_size(out2);
    sleep(2);
    long b1 = s_size(out1), b2 = s_size(out2);
    printf("while tail-a is frozen (2 s): client 1 +%ld bytes, client 2 +%ld bytes\n", b1 - a1,
           b2 - a2);
    /* exactly one stalled, and the other kept streaming */
    SW_CHECK((b1 == a1) != (b2 == a2));
    SW_CHECK(b1 - a1 > 8 || b2 - a2 > 8);
    const int stalled_is_1 = b1 == a1;
    const char *other = stalled_is_1 ? out2 : out1;

    /* and through the recovery itself: from the head's failure line (the round timeout) to
     * its "went through again" (route found, session replayed through tail-b) */
    const char *head_log = sw_test_log("head.log");
    double t_fail = 0, t_route = 0, t_ok = 0;
    long o_fail = 0, o_route = 0, o_ok = 0, o_mid = -1;
    enum { MAX_SAMPLES = 2000 };
    static double at[MAX_SAMPLES]; /* the other client's text size from the failure on */
    static long size_at[MAX_SAMPLES];
    int n_samples = 0;
    for (const double t0 = s_now(), until = t0 + 90; s_now() < until && !t_ok; usleep(50000)) {
        if (t_fail && n_samples < MAX_SAMPLES) {
            at[n_samples] = s_now() - t0;
            size_at[n_samples++] = s_size(other);
        }
        if (!t_fail && sw_test_count_in_file(head_log, "recovery: round at position") >= 1) {
            t_fail = s_now() - t0;
            o_fail = s_size(other);
        }
        if (t_fail && o_mid < 0 && s_now() - t0 >= t_fail + 0.25)
            o_mid = s_size(other); /* past the round the other session had in flight */
        if (t_fail && !t_route && sw_test_count_in_file(head_log, "recovery: replaying") >= 1) {
            t_route = s_now() - t0;
            o_route = s_size(other);
        }
        if (t_fail && sw_test_count_in_file(head_log, "went through again") >= 1) {
            t_ok = s_now() - t0;
            o_ok = s_size(other);
        }
    }
    /* the other client's text when the recovery was half through */
    long o_half = -1;
    for (int i = 0; i < n_samples && o_half < 0; i++)
        if (at[i] >= t_fail + (t_ok - t_fail) / 2)
            o_half = size_at[i];
    printf("recovery of the frozen tail's session: failure seen at +%.1f s, route at +%.1f s, "
           "through again at +%.1f s; meanwhile the other client +%ld bytes to the route, +%ld "
           "bytes to the end (+%ld from 0.25 s after the failure, +%ld in the second half)\n",
           t_fail, t_route, t_ok, o_route - o_fail, o_ok - o_fail, o_ok - o_mid, o_ok - o_half);
    SW_CHECK(t_fail > 0 && t_ok > 0);
    /* the other client's text grew while this one recovered, in the recovery's second half:
     * long past the round it had in flight at the failure, which may land late on a loaded
     * machine (a recovery shorter than 1 s leaves too little time to tell) */
    SW_CHECK(t_ok - t_fail < 1.0 || (o_half >= 0 && o_ok > o_half));

    /* both finish, exact (the stalled one through tail-b after the timeout) */
    SW_CHECK_INT(sw_test_wait(c1, 400), 0);
    SW_CHECK_INT(sw_test_wait(c2, 400), 0);
    c1 = c2 = 0;
    char *t1 = sw_test_read_file(out1, NULL), *t2 = sw_test_read_file(out2, NULL);
    SW_CHECK(t1 && ref && !strcmp(t1, ref));
    SW_CHECK(t2 && ref && !strcmp(t2, ref));
    if (t1 && ref && strcmp(t1, ref))
        fprintf(stderr, "client 1: %s\nreference: %s\n", t1, ref);
    SW_CHECK(sw_test_count_in_file(sw_test_log("head.log"), "went through again") >= 1);
    free(t1);
    free(t2);
    free(ref);
    kill(ta, SIGCONT);
    sw_test_kill(c1);
    sw_test_kill(c2);
    sw_test_kill(ta);
    sw_test_kill(tb);
    sw_test_kill(head);
    sw_test_kill(relay);
    return sw_test_done();
}
