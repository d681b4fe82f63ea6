/*
 * test_kaggle_2gpu.c - the Kaggle notebooks of deploy/kaggle in their default
 * two-GPU mode, executed with nbclient as Kaggle's "Run all" does (label
 * slow), on the CPU emulation of the CUDA runtime with two emulated GPUs per
 * notebook (SW_NB_CUDA=EMU: the notebooks build with -DSW_CUDA=EMU; a notebook
 * on Kaggle builds with its nvcc, the rest is the same cells):
 *
 *  - the head notebook puts its layers on cuda:0 and its draft model on
 *    cuda:1, the tail notebook its layers over cuda:0,1 (docs/deploy.md,
 *    "Kaggle": the rule the notebooks apply with BACKEND = DRAFT_BACKEND =
 *    "auto"), which their status lines and the nodes' logs show (the tail's
 *    hidden states move between its two GPUs over NCCL);
 *  - the model is SmolLM2-135M cut to 4 layers (real weights and tokenizer:
 *    the emulation runs a few layers in reasonable time), the drafter the
 *    same cut to 1 layer; the client's greedy generation must equal
 *    `shardwire generate` of the same model on the CPU, token for token (the
 *    GPU's exact kernels reproduce the CPU's bits);
 *  - the keys come from `shardwire cluster init` through the stand-in
 *    kaggle_secrets module, a real relay runs on loopback, the client starts
 *    first.
 *
 * The notebooks' build folder is the emulated suite's build-emu/ beside the
 * build when it exists (.ci/run builds it before the slow suite: then the
 * build cell finds it up to date), else a folder of this test (a whole
 * emulated build: minutes).
 */
#include "sw_test.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define N_GEN 8
static const char *s_prompt = "Write a haiku about networks.";

int main(void)
{
    const char *smol = sw_test_model();
    const char *src = sw_test_env("SW_SOURCE_DIR"), *bin = sw_test_env("SW_BIN_DIR");
    char cmd[8192], *out = NULL;
    const char *dir = sw_test_tmpdir();
    setenv("TMPDIR", dir, 1); /* the notebooks' key folders: removed with this test's */

    /* The models: SmolLM2 cut to 4 layers, and to 1 for the drafter. */
    char model[1024], draft[1024];
    snprintf(model, sizeof model, "%s/smollm2-4layers.gguf", dir);
    snprintf(draft, sizeof draft, "%s/smollm2-1layer.gguf", dir);
    snprintf(cmd, sizeof cmd,
             "%s/shardwire-mkmodel --from %s --layers 4 --embd-type q4_0 -o %s >/dev/null && "
             "%s/shardwire-mkmodel --from %s --layers 1 --embd-type q4_0 -o %s >/dev/null",
             bin, smol, model, bin, smol, draft);
    SW_CHECK_INT(sw_test_sh(cmd, 120, NULL), 0);

    char keys[1024];
    snprintf(keys, sizeof keys, "%s/keys", dir);
    int port = sw_test_free_port();
    snprintf(cmd, sizeof cmd,
             "%s/shardwire cluster init --relay 127.0.0.1:%d --nodes head,tail --out %s "
             "--model %s",
             bin, port, keys, model);
    SW_CHECK_INT(sw_test_sh(cmd, 60, NULL), 0);

    snprintf(cmd, sizeof cmd, "bash %s/scripts/dev/py_venv.sh nbclient nbformat ipykernel", src);
    SW_CHECK_INT(sw_test_sh(cmd, 900, &out), 0);
    char py[1024] = "";
    if (out)
        snprintf(py, sizeof py, "%.*s", (int)strcspn(out, "\n"), out);
    free(out);
    out = NULL;

    int32_t ref[N_GEN], got[N_GEN];
    int n_ref = sw_test_generate(model, s_prompt, N_GEN, ref, N_GEN);
    SW_CHECK_INT(n_ref, N_GEN);

    char ep[64], relay_sh[1100], stop[1024], outdir[1024], build[1024], pypath[1024];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    snprintf(relay_sh, sizeof relay_sh, "%s/relay/start.sh", keys);
    setenv("SHARDWIRE_BIN", bin, 1);
    char *argv_r[] = {"/bin/sh", relay_sh, NULL};
    pid_t relay = sw_test_spawn(argv_r, sw_test_log("relay.log"));
    SW_CHECK(relay > 0);
    SW_CHECK_INT(sw_test_wait_listen(ep, 10), 0);

    /* build-emu beside build/ (SW_BIN_DIR is build/bin) when the emulated suite made it */
    struct stat st;
    snprintf(build, sizeof build, "%s/../../build-emu", bin);
    char cache[1100];
    snprintf(cache, sizeof cache, "%s/CMakeCache.txt", build);
    if (stat(cache, &st) != 0)
        snprintf(build, sizeof build, "%s/build", dir);
    printf("notebooks' build folder: %s\n", build);
    snprintf(stop, sizeof stop, "%s/stop", dir);
    snprintf(outdir, sizeof outdir, "%s/out", dir);
    snprintf(pypath, sizeof pypath, "%s/tests/kaggle_secrets", src);
    snprintf(cmd, sizeof cmd, "mkdir -p %s", outdir);
    SW_CHECK_INT(sw_test_sh(cmd, 10, NULL), 0);
    setenv("PYTHONPATH", pypath, 1);
    setenv("SW_NB_SRC", src, 1);
    setenv("SW_NB_BUILD_DIR", build, 1);
    setenv("SW_NB_CUDA", "EMU", 1);
    setenv("SW_CUDA_EMU_DEVICES", "2", 1);
    setenv("SW_NB_MODEL", model, 1);
    setenv("SW_NB_DRAFT_MODEL", draft, 1);
    setenv("SW_NB_EXTRA", "--threads 1", 1);
    setenv("SW_NB_STOP_FILE", stop, 1);
    setenv("SW_NB_GREEDY", "1", 1);
    setenv("SW_NB_STATUS_S", "5", 1);
    setenv("SW_NB_RUN_S", "1500", 1);
    setenv("SW_NB_OUT_DIR", outdir, 1);
    setenv("SW_NB_PROMPT", s_prompt, 1);
    char n[16];
    snprintf(n, sizeof n, "%d", N_GEN);
    setenv("SW_NB_N", n, 1);
    setenv("SW_NB_CHAT", "0", 1);

    pid_t pids[3];
    const char *order[3] = {"client", "head", "node"}, *secrets[3] = {"client", "head", "tail"},
               *layers[3] = {"", "0:2", "2:4"};
    for (int i = 0; i < 3; i++) {
        char sec[1100], nb[1100], log[64];
        snprintf(sec, sizeof sec, "%s/%s/kaggle-secrets.txt", keys, secrets[i]);
        snprintf(nb, sizeof nb, "%s/deploy/kaggle/%s.ipynb", src, order[i]);
        snprintf(log, sizeof log, "%s.nb.log", secrets[i]);
        setenv("SW_KAGGLE_SECRETS", sec, 1);
        setenv("SW_NB_LAYERS", layers[i], 1);
        char runner[1100];
        snprintf(runner, sizeof runner, "%s/scripts/deploy/run_notebook.py", src);
        char *argv[] = {py, runner, nb, "--timeout", "2400", NULL};
        pids[i] = sw_test_spawn(argv, sw_test_log(log));
        SW_CHECK(pids[i] > 0);
        sleep(2);
    }
    SW_CHECK_INT(sw_test_wait(pids[0], 1500), 0);
    FILE *f = fopen(stop, "w");
    if (f)
        fclose(f);
    SW_CHECK_INT(sw_test_wait(pids[1], 120), 0);
    SW_CHECK_INT(sw_test_wait(pids[2], 120), 0);
    sw_test_kill(relay);

    char res[1100];
    snprintf(res, sizeof res, "%s/shardwire-run.json", outdir);
    char *j = sw_test_read_file(res, NULL);
    int got_n = j ? sw_test_json_tokens(j, got, N_GEN) : -1;
    free(j);
    SW_CHECK_INT(got_n, n_ref);
    for (int i = 0; i < got_n && i < n_ref; i++)
        SW_CHECK_INT(got[i], ref[i]);
    /* Both GPUs of each notebook, as the rule says. */
    SW_CHECK(sw_test_count_in_file(sw_test_log("head.nb.log"),
                                   "on cuda:0 (2 GPU(s)) | draft on cuda:1") == 1);
    SW_CHECK(sw_test_count_in_file(sw_test_log("tail.nb.log"), "on cuda:0,1 (2 GPU(s))") == 1);
    char node_log[1100];
    snprintf(node_log, sizeof node_log, "%s/shardwire-tail.log", outdir);
    SW_CHECK(sw_test_count_in_file(node_log, "cuda:0 -> cuda:1: hidden states move over NCCL") >=
             1);
    snprintf(node_log, sizeof node_log, "%s/shardwire-head.log", outdir);
    SW_CHECK(sw_test_count_in_file(node_log, "cuda:1") >= 1);
    SW_CHECK(sw_test_count_in_file(sw_test_log("tail.nb.log"), "tail: running") >= 1);
    SW_CHECK(sw_test_count_in_file(sw_test_log("tail.nb.log"), "tail stopped after") == 1);
    return sw_test_done();
}
