/*
 * kaggle_nb.h - what the tests of the Kaggle notebooks share (test_kaggle.c
 * on the CPU, test_kaggle_2gpu.c on two emulated GPUs): `shardwire cluster
 * init` makes the keys, a real relay runs on loopback, the stand-in
 * kaggle_secrets module (tests/kaggle_secrets/) answers each notebook from
 * its bundle's kaggle-secrets.txt, and client.ipynb, head.ipynb and
 * node.ipynb (as the tail) run with nbclient as Kaggle's "Run all" does, the
 * client first. The client's greedy generation must equal `shardwire
 * generate` on the same model and prompt, token for token; the node
 * notebooks print their status lines until the stop file appears, then end.
 *
 * The caller sets the notebooks' own hooks (SW_NB_CPU or SW_NB_CUDA, models,
 * SW_NB_BUILD_DIR) before kaggle_nb_run; the logs are sw_test_log's
 * "head.nb.log" and "tail.nb.log", the nodes' own logs OUT/shardwire-NAME.log.
 */
#ifndef SW_KAGGLE_NB_H
#define SW_KAGGLE_NB_H

#include "sw_test.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct kaggle_nb {
    const char *model;     // the cluster's model (the nodes', and the reference's)
    const char *layers[2]; // the head's and the tail's ranges
    int n_gen;             // tokens to generate (at most 64)
    int timeout_s;         // the client notebook's run
    char out_dir[1024];    // filled: the notebooks' OUT_DIR
} kaggle_nb_t;

/* Runs the three notebooks as above and checks their results. */
static void kaggle_nb_run(kaggle_nb_t *k, const char *prompt)
{
    const char *src = sw_test_env("SW_SOURCE_DIR"), *bin = sw_test_env("SW_BIN_DIR");
    const char *dir = sw_test_tmpdir();
    char cmd[8192], *out = NULL;
    /* the notebooks write their keys into mkdtemp folders: inside this test's
     * folder, removed with it (a passing suite leaves nothing in /tmp) */
    setenv("TMPDIR", dir, 1);
    char keys[1024];
    snprintf(keys, sizeof keys, "%s/keys", dir);
    int port = sw_test_free_port();
    snprintf(cmd, sizeof cmd,
             "%s/shardwire cluster init --relay 127.0.0.1:%d --nodes head,tail --out %s "
             "--model %s",
             bin, port, keys, k->model);
    SW_CHECK_INT(sw_test_sh(cmd, 60, NULL), 0);
    /* The secrets each bundle lists are the ones its notebook reads. */
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

    int32_t ref[64], got[64];
    const int n_ref = sw_test_generate(k->model, prompt, k->n_gen, ref, 64);
    SW_CHECK_INT(n_ref, k->n_gen);

    char ep[64], relay_sh[1100], stop[1024], pypath[1024];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    snprintf(relay_sh, sizeof relay_sh, "%s/relay/start.sh", keys);
    setenv("SHARDWIRE_BIN", bin, 1);
    char *argv_r[] = {"/bin/sh", relay_sh, NULL};
    pid_t relay = sw_test_spawn(argv_r, sw_test_log("relay.log"));
    SW_CHECK(relay > 0);
    SW_CHECK_INT(sw_test_wait_listen(ep, 10), 0);

    snprintf(stop, sizeof stop, "%s/stop", dir);
    snprintf(k->out_dir, sizeof k->out_dir, "%s/out", dir);
    snprintf(pypath, sizeof pypath, "%s/tests/kaggle_secrets", src);
    snprintf(cmd, sizeof cmd, "mkdir -p %s", k->out_dir);
    SW_CHECK_INT(sw_test_sh(cmd, 10, NULL), 0);
    setenv("PYTHONPATH", pypath, 1);
    setenv("SW_NB_SRC", src, 1);
    setenv("SW_NB_MODEL", k->model, 1);
    setenv("SW_NB_EXTRA", "--threads 1", 1);
    setenv("SW_NB_STOP_FILE", stop, 1);
    setenv("SW_NB_GREEDY", "1", 1); /* compared with `shardwire generate --greedy` */
    setenv("SW_NB_STATUS_S", "5", 1);
    setenv("SW_NB_RUN_S", "1500", 1);
    setenv("SW_NB_OUT_DIR", k->out_dir, 1);
    setenv("SW_NB_PROMPT", prompt, 1);
    char n[16], timeout[16];
    snprintf(n, sizeof n, "%d", k->n_gen);
    snprintf(timeout, sizeof timeout, "%d", k->timeout_s);
    setenv("SW_NB_N", n, 1);
    setenv("SW_NB_CHAT", "0", 1);

    /* The client first, then the head, then the tail. */
    pid_t pids[3];
    const char *order[3] = {"client", "head", "node"}, *secrets[3] = {"client", "head", "tail"},
               *layers[3] = {"", k->layers[0], k->layers[1]};
    for (int i = 0; i < 3; i++) {
        char sec[1100], nb[1100], log[64], runner[1100];
        snprintf(sec, sizeof sec, "%s/%s/kaggle-secrets.txt", keys, secrets[i]);
        snprintf(nb, sizeof nb, "%s/deploy/kaggle/%s.ipynb", src, order[i]);
        snprintf(log, sizeof log, "%s.nb.log", secrets[i]);
        snprintf(runner, sizeof runner, "%s/scripts/deploy/run_notebook.py", src);
        setenv("SW_KAGGLE_SECRETS", sec, 1);
        setenv("SW_NB_LAYERS", layers[i], 1);
        char *argv[] = {py, runner, nb, "--timeout", timeout, NULL};
        pids[i] = sw_test_spawn(argv, sw_test_log(log));
        SW_CHECK(pids[i] > 0);
        sleep(2);
    }
    SW_CHECK_INT(sw_test_wait(pids[0], k->timeout_s), 0);
    FILE *f = fopen(stop, "w");
    if (f)
        fclose(f);
    SW_CHECK_INT(sw_test_wait(pids[1], 120), 0);
    SW_CHECK_INT(sw_test_wait(pids[2], 120), 0);
    sw_test_kill(relay);

    char res[1100];
    snprintf(res, sizeof res, "%s/shardwire-run.json", k->out_dir);
    char *j = sw_test_read_file(res, NULL);
    int got_n = j ? sw_test_json_tokens(j, got, 64) : -1;
    free(j);
    SW_CHECK_INT(got_n, n_ref);
    for (int i = 0; i < got_n && i < n_ref; i++)
        SW_CHECK_INT(got[i], ref[i]);
    /* The node notebooks kept printing status lines and ended on the stop file. */
    SW_CHECK(sw_test_count_in_file(sw_test_log("head.nb.log"), "head: running") >= 1);
    SW_CHECK(sw_test_count_in_file(sw_test_log("tail.nb.log"), "tail: running") >= 1);
    SW_CHECK(sw_test_count_in_file(sw_test_log("tail.nb.log"), "tail stopped after") == 1);
}

#endif
