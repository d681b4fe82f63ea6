/*
 * test_cuda_fatal.c - a GPU error that CUDA never recovers from (700, an
 * illegal address, and the other "sticky" errors: every later call of the
 * process on that device fails), injected through the CPU emulation of the
 * CUDA runtime (swemu.h; labels cuda and cudaemu, built with SW_CUDA=EMU
 * only: a real GPU cannot be made to fail on purpose, so elsewhere it skips):
 *
 *  - the engine: a forward on cuda:1 whose synchronisation fails with 700
 *    fails with a line that says the GPU failed for good; the backend says
 *    so (sw_backend_failed), every later forward fails at once with the same
 *    reason (test_cuda_emu checks that the emulation keeps returning 700),
 *    opening cuda:1 again fails, and cuda:0 still computes the right logits
 *    (the error is the device's);
 *  - the cluster: a head on the CPU (layers 0:2 of SmolLM2 cut to 4 layers,
 *    --auto-nodes 1), a tail on emulated cuda:0 (2:4) whose fourth graph
 *    launch fails with 700 (SW_CUDA_EMU_FAIL), and a standby auto node on the
 *    CPU. During a greedy run the tail answers the round with an error the
 *    head recovers from, says in one line that its GPU failed and that it
 *    leaves, exits with status 1; the head plans the gap over the standby,
 *    replays the session there, and the output equals `shardwire generate`
 *    token for token.
 */
#include "cuda_test.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef SW_CUDA_EMU

#define N_GEN 40
static const char *s_prompt = "Once upon a time, in a land far away,";

/* Part 1: the engine on cuda:1 (cuda:0 must stay usable). */
static void s_engine(const char *path)
{
    sw_backend_t *b1 = cuda_test_backend("cuda:1"), *b0 = cuda_test_backend("cuda:0");
    sw_model_t *m1 = cuda_test_load(path, b1, 0, -1), *m0 = cuda_test_load(path, b0, 0, -1);
    SW_CHECK(m1 && m0);
    if (!m1 || !m0)
        goto out;
    const int V = sw_model_hparams(m1)->n_vocab;
    float *ref = malloc((size_t)V * sizeof(float)), *got = malloc((size_t)V * sizeof(float));
    static const int32_t tok[4] = {1, 2, 3, 4};
    sw_kv_t *k1 = sw_kv_new(m1, 64), *k0 = sw_kv_new(m0, 64);
    SW_CHECK(ref && got && k1 && k0);
    if (!ref || !got || !k1 || !k0) {
        free(ref);
        free(got);
        sw_kv_free(&k1);
        sw_kv_free(&k0);
        goto out;
    }
    SW_CHECK_INT(cuda_test_fwd(m1, k1, tok, NULL, 3, NULL, ref, 1, 1), 0);
    SW_CHECK(!sw_backend_failed(b1));
    /* The next synchronisation of cuda:1 fails with 700. */
    swemu_fail("cudaStreamSynchronize", 0, 700);
    char err[256] = "";
    sw_forward_t f = {.n = 1, .tokens = &tok[3], .logits = got, .n_logits = 1};
    SW_CHECK(sw_model_forward(m1, k1, &f, err, sizeof err) != 0);
    printf("the failing forward: %s\n", err);
    SW_CHECK(strstr(err, "failed for good") != NULL && strstr(err, "error 700") != NULL);
    SW_CHECK(sw_backend_failed(b1));
    /* Every later call fails at once, with the same reason. */
    SW_CHECK_INT(sw_kv_truncate(k1, 3), 0);
    SW_CHECK(sw_model_forward(m1, k1, &f, err, sizeof err) != 0);
    printf("the next forward: %s\n", err);
    SW_CHECK(strstr(err, "failed for good earlier") != NULL);
    char oerr[256] = "";
    sw_backend_t *again = sw_backend_new("cuda:1", 0, oerr, sizeof oerr);
    SW_CHECK(again == NULL);
    printf("opening cuda:1 again: %s\n", oerr);
    SW_CHECK(strstr(oerr, "failed for good earlier") != NULL);
    sw_backend_free(&again);
    /* cuda:0 is another device: it still computes what cuda:1 did before. */
    SW_CHECK(!sw_backend_failed(b0));
    SW_CHECK_INT(cuda_test_fwd(m0, k0, tok, NULL, 3, NULL, got, 1, 1), 0);
    const int same = !memcmp(got, ref, (size_t)V * sizeof(float));
    cuda_test_row("cuda:1 after error 700", "every call fails, the backend is marked failed");
    cuda_test_row("cuda:0 after cuda:1's error 700", same ? "computes as before" : "DIFFERS");
    SW_CHECK(same);
    sw_kv_free(&k1);
    sw_kv_free(&k0);
    free(ref);
    free(got);
out:
    sw_model_free(&m1);
    sw_model_free(&m0);
    sw_backend_free(&b1);
    sw_backend_free(&b0);
}

/* Part 2: the tail's GPU fails during a run; the standby takes its layers. */
static void s_cluster(const char *cut)
{
    char dir[600]; /* keys, inside this test's folder (removed when it passes) */
    snprintf(dir, sizeof dir, "%s/keys", sw_test_tmpdir());
    SW_CHECK_INT(mkdir(dir, 0700), 0);
    const char *nodes[] = {"head", "tail", "spare", NULL}, *clients[] = {"alice", NULL};
    SW_CHECK_INT(sw_test_keys(dir, nodes, clients), 0);
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", sw_test_free_port());
    const char *log = sw_test_log("cluster.log"), *tail_log = sw_test_log("tail.log");
    pid_t relay = sw_test_relay(ep, dir, log, NULL);
    SW_CHECK(relay > 0);
    SW_CHECK_INT(sw_test_wait_listen(ep, 10), 0);
    int32_t ref[N_GEN + 8];
    SW_CHECK_INT(sw_test_generate(cut, s_prompt, N_GEN, ref, N_GEN + 8), N_GEN);

    setenv("SW_TEST_MODEL", cut, 1); /* sw_test_node's model */
    const char *hx[] = {"--backend", "cpu", "--auto-nodes", "1", "--recover-timeout-s", "60", NULL};
    const char *tx[] = {"--backend", "cuda:0", NULL};
    const char *px[] = {"--backend", "cpu", NULL};
    pid_t head = sw_test_node(ep, dir, "head", "0:2", log, hx);
    /* the tail's fourth graph launch (a decode step) fails with 700 */
    setenv("SW_CUDA_EMU_FAIL", "cudaGraphLaunch:3:700", 1);
    pid_t tail = sw_test_node(ep, dir, "tail", "2:4", tail_log, tx);
    unsetenv("SW_CUDA_EMU_FAIL");
    sw_test_client_env(dir, "alice");
    SW_CHECK_INT(sw_test_wait_peers(ep, 2, 120), 0);
    pid_t spare = sw_test_node(ep, dir, "spare", "auto", log, px);
    SW_CHECK_INT(sw_test_wait_peers(ep, 3, 120), 0);
    for (int i = 0; i < 200 && !sw_test_count_in_file(log, "standby auto node (model"); i++)
        usleep(100000);
    sleep(1); /* its round trip announced */

    pid_t run = sw_test_run_bg(ep, "head", s_prompt, N_GEN, 300, "run");
    SW_CHECK(sw_test_run_exact(run, "run", ref, N_GEN, 320));
    /* The tail said why in one line and left with status 1. */
    const int tail_rc = sw_test_wait(tail, 60);
    tail = 0;
    printf("the tail exited with %d\n", tail_rc);
    SW_CHECK_INT(tail_rc, 1);
    SW_CHECK_INT(sw_test_count_in_file(tail_log, "error: "), 1); /* one error line: */
    SW_CHECK_INT(sw_test_count_in_file(tail_log, "failed for good; restart the process to use it "
                                                 "again; this node leaves the cluster"),
                 1);
    /* The head recovered over the standby, which now holds the tail's layers. */
    SW_CHECK(sw_test_count_in_file(log, "placement: spare gets layers [2, 4)") == 1);
    SW_CHECK(sw_test_count_in_file(log, "recovery: replaying") +
                 sw_test_count_in_file(log, "recovery: the round went through again") >=
             1);
    cuda_test_row("a tail whose GPU fails with 700 during a run",
                  "it leaves (status 1, one line); the standby takes [2, 4); output exact");
    sw_test_kill(spare);
    sw_test_kill(head);
    sw_test_kill(relay);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (sw_cuda_device_count() < 2)
        sw_test_skip("two emulated GPUs are needed (SW_CUDA_EMU_DEVICES=2)");
    const char *smol = sw_test_model();
    char cut[1024], cmd[3000];
    snprintf(cut, sizeof cut, "%s/smollm2-4layers.gguf", sw_test_tmpdir());
    snprintf(cmd, sizeof cmd, "%s --from %s --layers 4 --embd-type q4_0 -o %s >/dev/null",
             sw_test_bin("shardwire-mkmodel"), smol, cut);
    SW_CHECK_INT(sw_test_sh(cmd, 120, NULL), 0);
    s_cluster(cut); /* first: part 1 leaves cuda:1 of this process failed */
    s_engine(cut);
    return sw_test_done();
}

#else

int main(void)
{
    sw_test_skip("a fatal GPU error is injected by the CPU emulation of the CUDA runtime "
                 "(build with -DSW_CUDA=EMU)");
}

#endif
