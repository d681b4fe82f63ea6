/*
 * test_kaggle.c - the Kaggle notebooks of deploy/kaggle, executed top to
 * bottom with nbclient as Kaggle's "Run all" does (label slow, about 5
 * minutes: each notebook builds shardwire):
 *
 *  - the notebooks are what deploy/kaggle/notebooks.py writes;
 *  - `shardwire cluster init` makes the keys; a real relay runs on loopback;
 *  - a stand-in kaggle_secrets module (tests/kaggle_secrets/) answers the
 *    notebooks from the kaggle-secrets.txt of each bundle, so the secrets the
 *    notebooks read are the ones cluster init writes;
 *  - the client notebook starts first, then head.ipynb, then node.ipynb as the
 *    tail (any order must work), with CPU builds and the local SmolLM2 file
 *    (SW_NB_CPU, SW_NB_MODEL); the client's generation must equal `shardwire
 *    generate` on the same model and prompt (greedy), token for token;
 *  - the node notebooks print their status lines until the test's stop file
 *    appears, then end cleanly.
 * The flow is kaggle_nb.h's (test_kaggle_2gpu.c runs it on two emulated GPUs).
 */
#include "kaggle_nb.h"

int main(void)
{
    const char *src = sw_test_env("SW_SOURCE_DIR");
    char cmd[2048], build[1024];
    snprintf(cmd, sizeof cmd, "python3 %s/deploy/kaggle/notebooks.py --check", src);
    SW_CHECK_INT(sw_test_sh(cmd, 60, NULL), 0);
    /* CPU builds in one folder of this test (the notebooks take turns: a lock) */
    snprintf(build, sizeof build, "%s/build", sw_test_tmpdir());
    setenv("SW_NB_BUILD_DIR", build, 1);
    setenv("SW_NB_CPU", "1", 1);
    setenv("SW_NB_DRAFT_MODEL", "", 1);
    kaggle_nb_t k = {
        .model = sw_test_model(), .layers = {"0:15", "15:30"}, .n_gen = 16, .timeout_s = 1200};
    kaggle_nb_run(&k, "Write a haiku about networks.");
    return sw_test_done();
}
