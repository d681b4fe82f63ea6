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
#include "kaggle_nb.h"

#include <sys/stat.h>

int main(void)
{
    const char *smol = sw_test_model(), *bin = sw_test_env("SW_BIN_DIR");
    const char *dir = sw_test_tmpdir();
    char cmd[4096];

    /* The models: SmolLM2 cut to 4 layers, and to 1 for the drafter. */
    char model[1024], draft[1024];
    snprintf(model, sizeof model, "%s/smollm2-4layers.gguf", dir);
    snprintf(draft, sizeof draft, "%s/smollm2-1layer.gguf", dir);
    snprintf(cmd, sizeof cmd,
             "%s/shardwire-mkmodel --from %s --layers 4 --embd-type q4_0 -o %s >/dev/null && "
             "%s/shardwire-mkmodel --from %s --layers 1 --embd-type q4_0 -o %s >/dev/null",
             bin, smol, model, bin, smol, draft);
    SW_CHECK_INT(sw_test_sh(cmd, 120, NULL), 0);

    /* build-emu beside build/ (SW_BIN_DIR is build/bin) when the emulated suite made it */
    char build[1024], cache[1100];
    struct stat st;
    snprintf(build, sizeof build, "%s/../../build-emu", bin);
    snprintf(cache, sizeof cache, "%s/CMakeCache.txt", build);
    if (stat(cache, &st) != 0)
        snprintf(build, sizeof build, "%s/build", dir);
    printf("notebooks' build folder: %s\n", build);
    setenv("SW_NB_BUILD_DIR", build, 1);
    setenv("SW_NB_CUDA", "EMU", 1);
    setenv("SW_CUDA_EMU_DEVICES", "2", 1);
    setenv("SW_NB_DRAFT_MODEL", draft, 1);
    kaggle_nb_t k = {.model = model, .layers = {"0:2", "2:4"}, .n_gen = 8, .timeout_s = 1500};
    kaggle_nb_run(&k, "Write a haiku about networks.");

    /* Both GPUs of each notebook, as the rule says. */
    SW_CHECK(sw_test_count_in_file(sw_test_log("head.nb.log"),
                                   "on cuda:0 (2 GPU(s)) | draft on cuda:1") == 1);
    SW_CHECK(sw_test_count_in_file(sw_test_log("tail.nb.log"), "on cuda:0,1 (2 GPU(s))") == 1);
    char node_log[1100];
    snprintf(node_log, sizeof node_log, "%s/shardwire-tail.log", k.out_dir);
    SW_CHECK(sw_test_count_in_file(node_log, "cuda:0 -> cuda:1: hidden states move over NCCL") >=
             1);
    snprintf(node_log, sizeof node_log, "%s/shardwire-head.log", k.out_dir);
    SW_CHECK(sw_test_count_in_file(node_log, "cuda:1") >= 1);
    return sw_test_done();
}
