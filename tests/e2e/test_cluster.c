/*
 * test_cluster.c - the distributed pipeline with real processes on loopback:
 * a shardwire-relay, two or three shardwire-node stages and `shardwire run`
 * clients, compared with `shardwire generate` in one process.
 *
 *  - relay + 2 nodes with f32 hidden states: tokens and the logits digest
 *    (every logits row, bit for bit) equal the single-process run;
 *  - relay + 3 nodes with f32 hidden states: tokens and the logits digest
 *    equal the single-process run too;
 *  - exactly one traversal per round: the relay's per-peer message counters
 *    show each stage receives one Forward and sends one message per round;
 *  - two clients at once each get their own correct output;
 *  - a gap, an overlap and another model file are refused with a message
 *    naming the problem and the error code of its cause (unknown_dest for a
 *    gap or an overlap, model_mismatch for another model);
 *  - a stage killed mid-generation and not restarted gives the client an
 *    error once the head's recovery gives up (--recover-timeout-s), not a hang
 *    (recovery itself: test_recover.c).
 */
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sw_fault.h"
#include "sw_result.h"

#define N_GEN 24

static const char *s_prompts[] = {
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "List three colors of the rainbow:\n1.",
};
#define N_PROMPTS (int)(sizeof s_prompts / sizeof s_prompts[0])

/* `shardwire run`; returns its exit code, stderr into *err_out if wanted. */
static int s_run(const char *ep, const char *prompt, int n_gen, sw_result_t *r, char **err_out)
{
    char n[16];
    snprintf(n, sizeof n, "%d", n_gen);
    char *argv[] = {(char *)sw_test_bin("shardwire"),
                    "run",
                    "--greedy",
                    "--relay",
                    (char *)ep,
                    "-p",
                    (char *)prompt,
                    "-n",
                    n,
                    "--json",
                    "--timeout-s",
                    "120",
                    "--connect-timeout-s", /* the gap case: ask the head soon */
                    "3",
                    "--insecure-loopback",
                    NULL};
    char *out = NULL, *err = NULL;
    int rc = sw_test_run(argv, 150, &out, &err);
    if (r)
        sw_result_parse(out, r);
    if (rc != 0)
        fprintf(stderr, "run exit %d: %s", rc, err ? err : "");
    free(out);
    if (err_out)
        *err_out = err;
    else
        free(err);
    return rc;
}

struct s_cluster {
    char ep[64];
    pid_t relay;
    pid_t nodes[4];
    int n;
};

static int s_start(struct s_cluster *c, const char *model, const char *const *ranges,
                   const char *const *models, int n, const char *dtype, int expect_peers)
{
    memset(c, 0, sizeof *c);
    int port = sw_test_free_port();
    snprintf(c->ep, sizeof c->ep, "tcp://127.0.0.1:%d", port);
    char *ra[] = {(char *)sw_test_bin("shardwire-relay"), "--listen", c->ep, "--insecure-loopback",
                  NULL};
    c->relay = sw_test_spawn(ra, sw_test_log("relay.log"));
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "stage%d", i);
        char *na[] = {(char *)sw_test_bin("shardwire-node"),
                      "--model",
                      (char *)(models && models[i] ? models[i] : model),
                      "--layers",
                      (char *)ranges[i],
                      "--relay",
                      c->ep,
                      "--name",
                      name,
                      "--threads",
                      "1",
                      "--dtype",
                      (char *)dtype,
                      "--round-timeout-ms",
                      "20000",
                      "--recover-timeout-s",
                      "3",
                      "--insecure-loopback",
                      NULL};
        c->nodes[i] = sw_test_spawn(na, sw_test_log("nodes.log"));
    }
    c->n = n;
    return sw_test_wait_peers(c->ep, expect_peers, 60);
}

static void s_stop(struct s_cluster *c)
{
    for (int i = 0; i < c->n; i++)
        sw_test_kill(c->nodes[i]);
    sw_test_kill(c->relay);
    c->n = 0;
    c->relay = 0;
}

/* msgs_in / msgs_out of a peer from the relay's table; 0, or -1 when absent. */
static int s_counters(const char *ep, const char *name, long *in, long *out)
{
    *in = *out = -1;
    return swf_peer(ep, name, in, out) == 1 ? 0 : -1;
}

int main(void)
{
    const char *model = sw_test_model();
    signal(SIGPIPE, SIG_IGN);
    sw_result_t ref[N_PROMPTS], got;
    for (int i = 0; i < N_PROMPTS; i++) {
        sw_result_generate(model, s_prompts[i], N_GEN, 120, &ref[i]);
        SW_CHECK(ref[i].ok && ref[i].n == N_GEN);
    }

    /* 2 stages, f32 hidden states: bit-identical logits. */
    struct s_cluster c;
    const char *two[] = {"0:15", "15:30"};
    SW_CHECK_INT(s_start(&c, model, two, NULL, 2, "f32", 2), 0);
    for (int i = 0; i < N_PROMPTS; i++) {
        SW_CHECK_INT(s_run(c.ep, s_prompts[i], N_GEN, &got, NULL), 0);
        SW_CHECK(sw_result_same(&got, &ref[i]));
        SW_CHECK(got.digest[0] && !strcmp(got.digest, ref[i].digest));
    }
    s_stop(&c);

    /* 3 stages, f32 hidden states: bit-identical logits again; and the
     * message count of one traversal per round. */
    const char *three[] = {"0:10", "10:20", "20:30"};
    SW_CHECK_INT(s_start(&c, model, three, NULL, 3, "f32", 3), 0);
    long mid_in0, mid_out0, tail_in0, tail_out0, mid_in1, mid_out1, tail_in1, tail_out1;
    SW_CHECK_INT(s_counters(c.ep, "stage1", &mid_in0, &mid_out0), 0);
    SW_CHECK_INT(s_counters(c.ep, "stage2", &tail_in0, &tail_out0), 0);
    for (int i = 0; i < N_PROMPTS; i++) {
        SW_CHECK_INT(s_run(c.ep, s_prompts[i], N_GEN, &got, NULL), 0);
        SW_CHECK(sw_result_same(&got, &ref[i]));
        SW_CHECK(got.digest[0] && !strcmp(got.digest, ref[i].digest));
        if (i == 0) {
            /* The relay counts msgs_in from a peer and msgs_out to it. Per
             * request each stage is sent (rounds + 1 prefill) Forwards and
             * one SessionClose, and sends one message (Forward or Verdict)
             * per round and for the prefill. */
            SW_CHECK_INT(s_counters(c.ep, "stage1", &mid_in1, &mid_out1), 0);
            SW_CHECK_INT(s_counters(c.ep, "stage2", &tail_in1, &tail_out1), 0);
            SW_CHECK_INT(mid_out1 - mid_out0, got.rounds + 2);
            SW_CHECK_INT(mid_in1 - mid_in0, got.rounds + 1);
            SW_CHECK_INT(tail_out1 - tail_out0, got.rounds + 2);
            SW_CHECK_INT(tail_in1 - tail_in0, got.rounds + 1);
            SW_CHECK_INT(got.rounds, N_GEN - 1);
        }
    }

    /* Two clients at once. */
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            sw_result_t r;
            int rc = s_run(c.ep, s_prompts[k], N_GEN, &r, NULL);
            _exit(rc == 0 && sw_result_same(&r, &ref[k]) ? 0 : 1);
        }
    }
    for (int k = 0; k < 2; k++) {
        int st = 0;
        waitpid(kids[k], &st, 0);
        SW_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }

    /* A stage killed mid-generation: an error within the deadline, no hang. */
    {
        long tail_in = 0, tail_out = 0;
        SW_CHECK_INT(s_counters(c.ep, "stage2", &tail_in, &tail_out), 0);
        int fd[2];
        SW_CHECK(pipe(fd) == 0);
        pid_t kid = fork();
        if (kid == 0) {
            char *err = NULL;
            int rc = s_run(c.ep, s_prompts[0], 400, NULL, &err);
            int named = err && (strstr(err, "left") || strstr(err, "unreachable"));
            char res[2] = {(char)(rc != 0), (char)named};
            ssize_t w = write(fd[1], res, 2);
            _exit(w == 2 ? 0 : 1);
        }
        /* mid-generation: the tail has answered a few rounds of this request */
        SW_CHECK_INT(swf_wait_msgs_in(c.ep, "stage2", tail_in + 4, 60), 0);
        kill(c.nodes[1], SIGKILL);
        waitpid(c.nodes[1], NULL, 0);
        c.nodes[1] = 0;
        char res[2] = {0, 0};
        SW_CHECK(read(fd[0], res, 2) == 2);
        SW_CHECK(res[0] == 1); // the client failed...
        SW_CHECK(res[1] == 1); // ...with a message that says a stage left
        waitpid(kid, NULL, 0);
        close(fd[0]);
        close(fd[1]);
    }
    s_stop(&c);

    /* Misconfigured chains. */
    char *err = NULL;
    const char *gap[] = {"0:10", "15:30"};
    SW_CHECK_INT(s_start(&c, model, gap, NULL, 2, "f16", 2), 0);
    SW_CHECK(s_run(c.ep, s_prompts[0], 4, NULL, &err) != 0);
    SW_CHECK(err && strstr(err, "gap") && strstr(err, "layer 10"));
    SW_CHECK(err && strstr(err, "(unknown_dest)") && !strstr(err, "model_mismatch"));
    free(err);
    s_stop(&c);

    const char *overlap[] = {"0:15", "10:30"};
    SW_CHECK_INT(s_start(&c, model, overlap, NULL, 2, "f16", 2), 0);
    err = NULL;
    SW_CHECK(s_run(c.ep, s_prompts[0], 4, NULL, &err) != 0);
    SW_CHECK(err && strstr(err, "overlap") && strstr(err, "stage1"));
    SW_CHECK(err && strstr(err, "(unknown_dest)") && !strstr(err, "model_mismatch"));
    free(err);
    s_stop(&c);

    /* Another model file: the same weights with a different name in the
     * metadata, so the fingerprint differs. */
    const char *dir = sw_test_tmpdir();
    char other[256];
    snprintf(other, sizeof other, "%s/other.gguf", dir);
    const int renamed = sw_test_renamed_model(model, other);
    SW_CHECK_INT(renamed, 0);
    if (renamed == 0) {
        const char *models[] = {model, other};
        SW_CHECK_INT(s_start(&c, model, two, models, 2, "f16", 2), 0);
        err = NULL;
        SW_CHECK(s_run(c.ep, s_prompts[0], 4, NULL, &err) != 0);
        SW_CHECK(err && strstr(err, "different model") && strstr(err, "stage1"));
        SW_CHECK(err && strstr(err, "(model_mismatch)"));
        free(err);
        s_stop(&c);
    }
    unlink(other);
    rmdir(dir);
    return sw_test_done();
}
