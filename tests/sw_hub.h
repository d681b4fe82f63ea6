/*
 * sw_hub.h - what the tests of downloads from the hub stand-in share
 * (tests/net/test_pull.c, test_pull_layers.c, test_pull_split.c;
 * tests/hub_standin.py, started by sw_test_hub): running `shardwire` with
 * its output, the bytes the stand-in's CDN sent, a model's fingerprint, a
 * cluster whose nodes pull their own partial files.
 * Header-only (static functions) so that each test stays one .c file.
 */
#ifndef SW_HUB_H
#define SW_HUB_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "sw_test.h"

/* `shardwire ARGS...` (NULL-terminated, 14 at most) within timeout_s: the
 * exit code; *out its stdout's first line, *err its stderr (either may be
 * NULL; the caller frees them). */
static inline int swh_cli(char **out, char **err, int timeout_s, const char *const *args)
{
    char *argv[16];
    int n = 0;
    argv[n++] = (char *)sw_test_bin("shardwire");
    for (int i = 0; args[i] && n < 15; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    char *o = NULL, *e = NULL;
    const int rc = sw_test_run(argv, timeout_s, &o, &e);
    if (o)
        o[strcspn(o, "\n")] = 0;
    if (out)
        *out = o;
    else
        free(o);
    if (err)
        *err = e;
    else
        free(e);
    return rc;
}

/* Body bytes the stand-in's CDN sent for repo, by its request log (log),
 * from line `from` on; *lines (may be NULL) receives the log's line count. */
static inline long long swh_sent(const char *log, const char *repo, int from, int *lines)
{
    char *text = sw_test_read_file(log, NULL);
    long long sum = 0;
    int i = 0;
    char needle[128];
    snprintf(needle, sizeof needle, "\"path\": \"/cdn/%s/", repo);
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n"), i++) {
        const char *s = strstr(line, "{\"sent\": ");
        if (i >= from && s && strstr(line, needle))
            sum += atoll(s + 9);
    }
    free(text);
    if (lines)
        *lines = i;
    return sum;
}

/* The "fingerprint" of `shardwire info --model path --json` into fp ("" when none). */
static inline void swh_fingerprint(const char *path, char fp[65])
{
    char *o = NULL;
    fp[0] = 0;
    char *argv[] = {
        (char *)sw_test_bin("shardwire"), "info", "--model", (char *)path, "--json", NULL};
    if (sw_test_run(argv, 60, &o, NULL) == 0 && o) {
        const char *f = strstr(o, "\"fingerprint\"");
        f = f ? strchr(f + 13, '"') : NULL;
        if (f && strlen(f + 1) >= 64) {
            memcpy(fp, f + 1, 64);
            fp[64] = 0;
        }
    }
    free(o);
}

/* The stand-in's configuration file at path, open for writing (skips the
 * test when it cannot be written). */
static inline FILE *swh_config(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        sw_test_skip("cannot write the hub configuration");
    return f;
}

/* Stops the stand-in (hub) and, when a check failed, prints its stderr
 * (stderr_path, as sw_test_hub wrote it); the test's exit code. */
static inline int swh_done(pid_t hub, const char *stderr_path)
{
    sw_test_kill(hub);
    if (sw_test_failures) {
        char *t = sw_test_read_file(stderr_path, NULL);
        fprintf(stderr, "---- hub stand-in stderr\n%s", t ? t : "");
        free(t);
    }
    return sw_test_done();
}

/* A keyed cluster of the default model (30 layers) whose two nodes pull
 * their own partial files: a relay and nodes "head" [0, 15) and "tail"
 * [15, 30) started with --model uri on an empty cache. */
typedef struct swh_cluster {
    char ep[64];     /* the relay */
    const char *log; /* the relay's and nodes' log */
    pid_t relay, head, tail;
} swh_cluster_t;

/* Starts c in dir (keys for node_names, NULL-terminated, and "client"; the
 * nodes' HF_HOME home) and checks that `shardwire run` of prompt gives ref
 * (n tokens) exactly, that both nodes announce the fingerprint fp and that
 * each fetched its layers. The caller kills c's processes and restores
 * HF_HOME. */
static inline void swh_partial_cluster(swh_cluster_t *c, const char *dir,
                                       const char *const *node_names, const char *home,
                                       const char *uri, const char *prompt, const int32_t *ref,
                                       int n, const char *fp)
{
    snprintf(c->ep, sizeof c->ep, "tcp://127.0.0.1:%d", sw_test_free_port());
    const char *clients[] = {"client", NULL};
    SW_CHECK_INT(sw_test_keys(dir, node_names, clients), 0);
    setenv("HF_HOME", home, 1); /* an empty cache: the nodes pull */
    c->log = sw_test_log("cluster.log");
    const char *const hf[] = {"--model", uri, NULL};
    c->relay = sw_test_relay(c->ep, dir, c->log, NULL);
    c->head = sw_test_node(c->ep, dir, "head", "0:15", c->log, hf);
    c->tail = sw_test_node(c->ep, dir, "tail", "15:30", c->log, hf);
    sw_test_client_env(dir, "client");
    SW_CHECK_INT(sw_test_wait_peers(c->ep, 2, 180), 0);
    pid_t run = sw_test_run_bg(c->ep, "head", prompt, n, 150, "run");
    SW_CHECK(sw_test_run_exact(run, "run", ref, n, 180));
    char want[64];
    snprintf(want, sizeof want, "model %.12s...", fp);
    SW_CHECK_INT(sw_test_count_in_file(c->log, want), 2);
    SW_CHECK_INT(sw_test_count_in_file(c->log, "layers 0:15: fetched"), 1);
    SW_CHECK_INT(sw_test_count_in_file(c->log, "layers 15:30: fetched"), 1);
}

#endif
