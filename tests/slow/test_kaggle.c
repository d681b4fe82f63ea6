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
 */
#include "sw_test.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_GEN 16
static const char *s_prompt = "Write a haiku about networks.";

int main(void)
{
    const char *model = sw_test_model();
    const char *src = sw_test_env("SW_SOURCE_DIR"), *bin = sw_test_env("SW_BIN_DIR");
    char cmd[8192], *out = NULL;

    snprintf(cmd, sizeof cmd, "python3 %s/deploy/kaggle/notebooks.py --check", src);
    SW_CHECK_INT(sw_test_sh(cmd, 60, NULL), 0);

    /* The secrets each bundle lists are the ones its notebook reads. */
    const char *dir = sw_test_tmpdir();
    /* the notebooks write their keys into mkdtemp folders: inside this test's
     * folder, removed with it (a passing suite leaves nothing in /tmp) */
    setenv("TMPDIR", dir, 1);
    char keys[1024];
    snprintf(keys, sizeof keys, "%s/keys", dir);
    int port = sw_test_free_port();
    snprintf(cmd, sizeof cmd,
             "%s/shardwire cluster init --relay 127.0.0.1:%d --nodes head,tail --out %s "
             "--model %s",
             bin, port, keys, model);
    SW_CHECK_INT(sw_test_sh(cmd, 60, NULL), 0);
    const char *nbs[3] = {"head", "node", "client"}, *bundles[3] = {"head", "tail", "client"};
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd,
                 "for l in $(grep -v '^#' %s/%s/kaggle-secrets.txt | cut -d' ' -f1); do "
                 "case $l in SHARDWIRE_KEY_*) grep -q SHARDWIRE_KEY_ %s/deploy/kaggle/%s.ipynb;; "
                 "*) grep -q \"$l\" %s/deploy/kaggle/%s.ipynb;; esac || { echo \"$l\"; exit 1; }; "
                 "done",
                 keys, bundles[i], src, nbs[i], src, nbs[i]);
        SW_CHECK_INT(sw_test_sh(cmd, 30, NULL), 0);
    }

    /* nbclient and a kernel, in the repo's venv. */
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

    snprintf(stop, sizeof stop, "%s/stop", dir);
    snprintf(outdir, sizeof outdir, "%s/out", dir);
    snprintf(build, sizeof build, "%s/build", dir);
    snprintf(pypath, sizeof pypath, "%s/tests/kaggle_secrets", src);
    snprintf(cmd, sizeof cmd, "mkdir -p %s", outdir);
    SW_CHECK_INT(sw_test_sh(cmd, 10, NULL), 0);
    setenv("PYTHONPATH", pypath, 1);
    setenv("SW_NB_SRC", src, 1);
    setenv("SW_NB_BUILD_DIR", build, 1); /* shared: the notebooks take turns (a lock) */
    setenv("SW_NB_CPU", "1", 1);
    setenv("SW_NB_MODEL", model, 1);
    setenv("SW_NB_DRAFT_MODEL", "", 1);
    setenv("SW_NB_EXTRA", "--threads 1", 1);
    setenv("SW_NB_STOP_FILE", stop, 1);
    setenv("SW_NB_GREEDY", "1", 1); /* compared with `shardwire generate --greedy` */
    setenv("SW_NB_STATUS_S", "5", 1);
    setenv("SW_NB_RUN_S", "1200", 1);
    setenv("SW_NB_OUT_DIR", outdir, 1);
    setenv("SW_NB_PROMPT", s_prompt, 1);
    char n[16];
    snprintf(n, sizeof n, "%d", N_GEN);
    setenv("SW_NB_N", n, 1);
    setenv("SW_NB_CHAT", "0", 1);

    /* The client first, then the head, then the tail. */
    pid_t pids[3];
    const char *order[3] = {"client", "head", "node"}, *secrets[3] = {"client", "head", "tail"},
               *layers[3] = {"", "0:15", "15:30"};
    for (int i = 0; i < 3; i++) {
        char sec[1100], nb[1100], log[64];
        snprintf(sec, sizeof sec, "%s/%s/kaggle-secrets.txt", keys, secrets[i]);
        snprintf(nb, sizeof nb, "%s/deploy/kaggle/%s.ipynb", src, order[i]);
        snprintf(log, sizeof log, "%s.nb.log", secrets[i]);
        setenv("SW_KAGGLE_SECRETS", sec, 1);
        setenv("SW_NB_LAYERS", layers[i], 1);
        char runner[1100];
        snprintf(runner, sizeof runner, "%s/scripts/deploy/run_notebook.py", src);
        char *argv[] = {py, runner, nb, NULL};
        pids[i] = sw_test_spawn(argv, sw_test_log(log));
        SW_CHECK(pids[i] > 0);
        sleep(2);
    }
    SW_CHECK_INT(sw_test_wait(pids[0], 1200), 0);
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
    /* The node notebooks kept printing status lines and ended on the stop file. */
    SW_CHECK(sw_test_count_in_file(sw_test_log("head.nb.log"), "head: running") >= 1);
    SW_CHECK(sw_test_count_in_file(sw_test_log("tail.nb.log"), "tail: running") >= 1);
    SW_CHECK(sw_test_count_in_file(sw_test_log("tail.nb.log"), "tail stopped after") == 1);
    return sw_test_done();
}
