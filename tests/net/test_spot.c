/*
 * test_spot.c - spot checks catch a dishonest stage (docs/security.md).
 *
 * A keyed cluster of real processes (relay, head 0:10 with --spot-check 1,
 * three middles 10:20, tail 20:30 of SmolLM2, CURVE and sealing on). One
 * middle, "mid-bad", runs with --test-flip-bit N: it flips one bit of every
 * Nth hidden-state payload it passes on. With the share 1 every session is
 * checked, and with three nodes serving 10:20 the head sends each round to
 * all three (the main route and two shadows), so the liar computes one copy
 * of every round and its Nth Forward is round N of the first session
 * (round 1 is the prefill, one chunk). The expectation: caught at round N
 * (asserted within 2 N); in general, with the share P, after about N / P of
 * its Forwards.
 *
 *  - request 1: mid-bad started first (quiet longest: the head's route
 *    takes it for the main copy): the head logs its conviction (and no other
 *    node's), naming the round, replays the session under a new id through
 *    an honest route, and the client's tokens are exactly those of
 *    `shardwire generate`; `shardwire status --spot head` reports it, and so
 *    does the gateway's /metrics (`shardwire serve` in front of the cluster
 *    asks the head every 5 s, without waiting: sw_client_spot_ask);
 *  - request 2: the new route and its shadow avoid mid-bad (it passes
 *    nothing on: its relay counter msgs_in stays put), and the tokens are
 *    exact again;
 *  - request 3: a fresh head, mid-bad restarted last (so it computes a
 *    shadow copy): convicted again, its copy dropped, no replay, exact;
 *  - request 4: a fresh head and mid-b gone: two copies on two nodes cannot
 *    name the liar: mid-a and mid-bad are both disputed, neither convicted,
 *    and /metrics follows the new head's report (disputed, not convicted).
 */
#include "sw_attack.h"

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_GEN 24
#define FLIP_N 4

static char s_dir[64];
static char s_ep[64];
static char s_listen[64]; /* the gateway's HOST:PORT */
static char s_curl[32];

/* GET path from the gateway: its body (malloc'd), or NULL. */
static char *s_get(const char *path)
{
    char url[160];
    snprintf(url, sizeof url, "http://%s%s", s_listen, path);
    char *argv[] = {s_curl, "-s", "--max-time", "10", url, NULL};
    char *out = NULL;
    if (sw_test_run(argv, 20, &out, NULL) != 0) {
        free(out);
        return NULL;
    }
    return out;
}

/* Waits up to timeout_s for a line of /metrics starting with want; 1 when
 * one came (its value in *value when not NULL), 0 when not. */
static int s_metrics_line(const char *want, int timeout_s, double *value)
{
    for (int i = 0; i < timeout_s * 4; i++) {
        char *text = s_get("/metrics");
        for (char *line = text, *next; line && *line; line = next) {
            next = strchr(line, '\n');
            if (next)
                *next++ = 0;
            if (!strncmp(line, want, strlen(want))) {
                if (value)
                    *value = atof(line + strlen(want));
                free(text);
                return 1;
            }
        }
        free(text);
        usleep(250000);
    }
    return 0;
}

/* msgs_in of peer name in `shardwire status --json`, or -1. */
static long long s_msgs_in(const char *name)
{
    char *argv[] = {(char *)sw_test_bin("shardwire"), "status", "--relay", s_ep, "--json", NULL};
    char *out = NULL;
    long long v = -1;
    if (sw_test_run(argv, 10, &out, NULL) == 0 && out) {
        json_t *j = json_loads(out, 0, NULL);
        json_t *peers = j ? json_object_get(j, "peers") : NULL;
        for (size_t i = 0; peers && i < json_array_size(peers); i++) {
            json_t *p = json_array_get(peers, i);
            const char *nm = json_string_value(json_object_get(p, "name"));
            if (nm && !strcmp(nm, name))
                v = (long long)json_integer_value(json_object_get(p, "msgs_in"));
        }
        json_decref(j);
    }
    free(out);
    return v;
}

/* From `shardwire status --spot head --json`: 1 when the head reports name
 * as convicted, 0 when not, -1 when it did not answer; *rounds: its rounds
 * compared. */
static int s_spot_convicted(const char *name, long long *rounds)
{
    int convicted;
    const int r = swa_spot_node(s_ep, name, &convicted, NULL, rounds);
    return r < 0 ? -1 : r == 1 && convicted;
}

/* The round of the first line of the log with both a and b ("round R "), or -1. */
/* 1 when the head's "spot check: session X is replayed as Y" line names a Y other than X:
 * the convicted route's stages were told to close X, so a replay under X only meets
 * "the session was closed" and costs a failed round. */
static int s_replayed_new_id(const char *path)
{
    char *text = sw_test_read_file(path, NULL);
    char old_id[17] = "", new_id[17] = "";
    int n = 0;
    for (char *line = text, *next; line && *line && n != 2; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        const char *at = strstr(line, "spot check: session ");
        if (at && strstr(at, " is replayed as "))
            n = sscanf(at, "spot check: session %16s is replayed as %16s", old_id, new_id);
    }
    free(text);
    return n == 2 && strlen(old_id) == 16 && strcmp(old_id, new_id) != 0;
}

static long long s_round_of_line(const char *path, const char *a, const char *b)
{
    char *text = sw_test_read_file(path, NULL);
    long long r = -1;
    for (char *line = text, *next; line && *line && r < 0; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        const char *at = strstr(line, a) && strstr(line, b) ? strstr(line, "round ") : NULL;
        if (at)
            r = atoll(at + 6);
    }
    free(text);
    return r;
}

/* No honest node was ever convicted or disputed. */
static void s_no_honest_convicted(const char *log)
{
    const char *honest[] = {"'mid-a'", "'mid-b'", "'tail'", "'head'"};
    for (int i = 0; i < 4; i++) {
        char who[64];
        snprintf(who, sizeof who, "spot check: node %s", honest[i]);
        SW_CHECK_INT(sw_test_count_lines(log, who, "convicted"), 0);
        snprintf(who, sizeof who, "%s is disputed", honest[i]);
        SW_CHECK_INT(sw_test_count_lines(log, who, "spot check"), 0);
    }
}

int main(void)
{
    const char *model = sw_test_model();
    signal(SIGPIPE, SIG_IGN);
    snprintf(s_dir, sizeof s_dir, "%s", sw_test_tmpdir());
    snprintf(s_ep, sizeof s_ep, "tcp://127.0.0.1:%d", sw_test_free_port());
    const char *nodes[] = {"head", "mid-a", "mid-b", "mid-bad", "tail", NULL};
    const char *clients[] = {"client", NULL};
    SW_CHECK_INT(sw_test_keys(s_dir, nodes, clients), 0);
    const char *prompt = "The capital of France is";
    int32_t ref[N_GEN + 8];
    const int n_ref = sw_test_generate(model, prompt, N_GEN, ref, N_GEN + 8);
    SW_CHECK_INT(n_ref, N_GEN);

    char log[512]; /* sw_test_log's buffers are reused after 8 calls */
    snprintf(log, sizeof log, "%s", sw_test_log("cluster.log"));
    char flip[16];
    snprintf(flip, sizeof flip, "%d", FLIP_N);
    static const char *const head_extra[] = {"--spot-check", "1", NULL};
    const char *const bad_extra[] = {"--test-flip-bit", flip, NULL};
    /* mid-bad first: quiet longest, the head's route takes it for the main copy */
    pid_t relay = sw_test_relay(s_ep, s_dir, log, NULL);
    pid_t tail = sw_test_node(s_ep, s_dir, "tail", "20:30", log, NULL);
    pid_t bad = sw_test_node(s_ep, s_dir, "mid-bad", "10:20", log, bad_extra);
    sw_test_client_env(s_dir, "client");
    SW_CHECK_INT(sw_test_wait_peers(s_ep, 2, 90), 0);
    sleep(2);
    pid_t ma = sw_test_node(s_ep, s_dir, "mid-a", "10:20", log, NULL);
    pid_t mb = sw_test_node(s_ep, s_dir, "mid-b", "10:20", log, NULL);
    pid_t head = sw_test_node(s_ep, s_dir, "head", "0:10", log, head_extra);
    SW_CHECK_INT(sw_test_wait_peers(s_ep, 5, 90), 0);
    /* the gateway (the client's keys, from the environment), no API keys on loopback */
    snprintf(s_curl, sizeof s_curl, "%s",
             access("/usr/bin/curl", X_OK) == 0 ? "/usr/bin/curl" : "/bin/curl");
    snprintf(s_listen, sizeof s_listen, "127.0.0.1:%d", sw_test_free_port());
    char *gw_argv[] = {
        (char *)sw_test_bin("shardwire"), "serve", "--relay", s_ep, "--listen", s_listen,
        "--insecure-no-api-key",          NULL};
    pid_t gw = access(s_curl, X_OK) == 0 ? sw_test_spawn(gw_argv, sw_test_log("serve.log")) : -1;
    if (gw < 0)
        sw_test_skip_part("curl is not installed (scripts/deps.sh installs it): no /metrics check");
    char gw_ep[80];
    snprintf(gw_ep, sizeof gw_ep, "tcp://%s", s_listen);
    SW_CHECK(gw < 0 || sw_test_wait_listen(gw_ep, 30) == 0);
    free(gw < 0 ? NULL : s_get("/v1/models")); /* the gateway's peer table: it sees the head */

    /* request 1: the liar carries the main copy and is caught; the session is
     * replayed through an honest route */
    pid_t r1 = sw_test_run_bg(s_ep, "head", prompt, N_GEN, 120, "run1");
    SW_CHECK(sw_test_run_exact(r1, "run1", ref, N_GEN, 150));
    SW_CHECK(sw_test_wait_text(log, "spot check: node 'mid-bad' computed", 30));
    const long long flipped = s_round_of_line(log, "--test-flip-bit: flipped", "round ");
    const long long caught = s_round_of_line(log, "spot check: node 'mid-bad' computed", "round ");
    printf("mid-bad flipped its first bit in round %lld, convicted in round %lld (expected %d, "
           "bound %d)\n",
           flipped, caught, FLIP_N, 2 * FLIP_N);
    SW_CHECK(flipped >= 1 && flipped <= FLIP_N);
    SW_CHECK(caught >= flipped && caught <= 2 * FLIP_N);
    SW_CHECK_INT(sw_test_count_lines(log, "spot check: node 'mid-bad'", "convicted"), 1);
    SW_CHECK_INT(sw_test_count_lines(log, "spot check: session", "is replayed as"), 1);
    SW_CHECK(s_replayed_new_id(log));
    SW_CHECK_INT(sw_test_count_lines(log, "the session was closed", "shardwire["), 0);
    s_no_honest_convicted(log);
    long long compared = 0;
    SW_CHECK_INT(s_spot_convicted("mid-bad", &compared), 1); /* shardwire status --spot */
    SW_CHECK_INT(s_spot_convicted("mid-a", &compared), 0);
    printf("shardwire status --spot head: mid-bad convicted, %lld rounds compared\n", compared);
    SW_CHECK(compared >= 4);
    if (gw > 0) { /* the same in the gateway's /metrics */
        double avoid = 0, gw_rounds = 0;
        SW_CHECK(s_metrics_line("shardwire_gateway_spot_node_avoid_seconds{head=\"head\","
                                "node=\"mid-bad\",verdict=\"convicted\"} ",
                                20, &avoid));
        SW_CHECK(s_metrics_line("shardwire_gateway_spot_rounds_compared_total{head=\"head\"} ", 5,
                                &gw_rounds));
        SW_CHECK(!s_metrics_line("shardwire_gateway_spot_node_avoid_seconds{head=\"head\","
                                 "node=\"mid-a\"",
                                 1, NULL));
        printf("/metrics: mid-bad convicted, avoided %.0f s more, %.0f rounds compared\n", avoid,
               gw_rounds);
        SW_CHECK(avoid > 3000 && avoid <= 3600);
        SW_CHECK(gw_rounds >= 4);
    }

    /* request 2: routed around the liar, exact */
    const int plans = sw_test_count_lines(log, "spot check: session", "shadow route(s):");
    const long long in0 = s_msgs_in("mid-bad");
    pid_t r2 = sw_test_run_bg(s_ep, "head", prompt, N_GEN, 120, "run2");
    SW_CHECK(sw_test_run_exact(r2, "run2", ref, N_GEN, 150));
    const long long in1 = s_msgs_in("mid-bad");
    printf("mid-bad passed on %lld message(s) during request 2\n", in1 - in0);
    SW_CHECK(in0 >= 0 && in1 == in0);
    SW_CHECK(sw_test_count_lines(log, "spot check: session", "shadow route(s):") > plans);
    SW_CHECK(sw_test_count_lines(log, "round(s) compared with 1 shadow route(s)", "spot check") >=
             1);

    /* request 3: a fresh head (it forgets), mid-bad restarted last: the least
     * quiet, so it computes a shadow copy, which is dropped when caught */
    sw_test_kill(head);
    sw_test_kill(bad);
    bad = sw_test_node(s_ep, s_dir, "mid-bad", "10:20", log, bad_extra);
    head = sw_test_node(s_ep, s_dir, "head", "0:10", log, head_extra);
    SW_CHECK_INT(sw_test_wait_peers(s_ep, 5, 90), 0);
    pid_t r3 = sw_test_run_bg(s_ep, "head", prompt, N_GEN, 120, "run3");
    SW_CHECK(sw_test_run_exact(r3, "run3", ref, N_GEN, 150));
    for (int i = 0;
         i < 100 && sw_test_count_lines(log, "spot check: node 'mid-bad'", "convicted") < 2; i++)
        usleep(100000);
    SW_CHECK_INT(sw_test_count_lines(log, "spot check: node 'mid-bad'", "convicted"), 2);
    SW_CHECK_INT(sw_test_count_lines(log, "spot check: session", "is replayed as"), 1);
    SW_CHECK(sw_test_count_lines(log, "spot check: session", "dropped (its copy diverged)") >= 1);
    s_no_honest_convicted(log);

    /* request 4: a fresh head, mid-b gone: two copies on two nodes cannot name
     * the liar, both are disputed, nobody convicted, the shadow dropped */
    sw_test_kill(head);
    sw_test_kill(mb);
    sw_test_kill(bad);
    mb = -1;
    bad = sw_test_node(s_ep, s_dir, "mid-bad", "10:20", log, bad_extra);
    head = sw_test_node(s_ep, s_dir, "head", "0:10", log, head_extra);
    for (int i = 0; i < 100 && s_msgs_in("mid-b") >= 0; i++)
        usleep(100000); /* the relay forgets mid-b */
    SW_CHECK_INT(sw_test_wait_peers(s_ep, 4, 90), 0);
    pid_t r4 = sw_test_run_bg(s_ep, "head", prompt, N_GEN, 120, "run4");
    SW_CHECK(sw_test_run_exact(r4, "run4", ref, N_GEN, 150));
    for (int i = 0; i < 100 && sw_test_count_lines(log, "'mid-a' is disputed", "no third node") < 1;
         i++)
        usleep(100000);
    SW_CHECK(sw_test_count_lines(log, "'mid-a' is disputed", "no third node settles it") >= 1);
    SW_CHECK(sw_test_count_lines(log, "'mid-bad' is disputed", "no third node settles it") >= 1);
    SW_CHECK_INT(sw_test_count_lines(log, "spot check: node 'mid-bad'", "convicted"), 2);
    SW_CHECK_INT(sw_test_count_lines(log, "spot check: node 'mid-a'", "convicted"), 0);
    SW_CHECK_INT(s_spot_convicted("mid-bad", &compared), 0); /* listed, not convicted */
    if (gw > 0) { /* /metrics follows the new head's report */
        SW_CHECK(s_metrics_line("shardwire_gateway_spot_node_avoid_seconds{head=\"head\","
                                "node=\"mid-bad\",verdict=\"disputed\"} ",
                                20, NULL));
        SW_CHECK(!s_metrics_line("shardwire_gateway_spot_node_avoid_seconds{head=\"head\","
                                 "node=\"mid-bad\",verdict=\"convicted\"} ",
                                 1, NULL));
    }

    if (gw > 0)
        sw_test_kill(gw);
    sw_test_kill(head);
    sw_test_kill(ma);
    sw_test_kill(mb);
    sw_test_kill(bad);
    sw_test_kill(tail);
    sw_test_kill(relay);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", s_dir);
    return sw_test_done();
}
