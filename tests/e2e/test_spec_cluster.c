/*
 * test_spec_cluster.c - speculative decoding across a real pipeline: this
 * test starts build/bin/shardwire-relay and two shardwire-node processes
 * (head with layers [0, 15) and the draft model, tail with [15, 30)) on
 * loopback, then runs `shardwire run --json` and compares the "tokens":
 *
 *  - greedy, on three prompts of tests/fixtures/greedy_smollm2.json (built-in
 *    ones when it is absent): every proposer and K (n-gram K 1..32, draft model K 1..32 and
 *    adaptive, mix with the adaptive K) gives the tokens of the run without speculation, which are
 *    also the tokens of `shardwire generate` in one process;
 *  - sampling (temp 0.8, fixed seed, K 4): the cluster gives the tokens and
 *    the logits digest of the single-process run with the same seed and K
 *    (hidden states travel as f32, so the logits are bit-identical);
 *  - token trees and drafting ahead (draft-model trees with and without
 *    drafting ahead, a chain drafted ahead, n-gram tries whose accepted
 *    path is often not the first branch, so the next round's kv_path moves
 *    cache entries at every stage, and the adaptive shape): the tokens of
 *    the run without speculation, and tree rounds and rounds that left with
 *    drafts prepared ahead really happened;
 *  - sampling with a tree and drafting ahead: the cluster gives the tokens
 *    and the logits digest of one process that drafts nothing ahead;
 *  - a head started with a draft model of another vocabulary refuses to
 *    start, naming the mismatch;
 *  - then the same tree and drafting-ahead runs across three stages (relay,
 *    head [0, 10), middle [10, 20), tail [20, 30)): the two-stage tokens.
 *
 * Every process is killed at the end, on failure and on a timeout as well.
 */
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sw_test.h"

extern char **environ;

#define N_GEN 16
#define MAX_CHILD 8
#define MAX_OUT (1 << 16)

static pid_t s_child[MAX_CHILD];
static int s_n_child;

static void s_kill_all(void)
{
    for (int i = 0; i < s_n_child; i++)
        if (s_child[i] > 0) {
            kill(s_child[i], SIGKILL);
            waitpid(s_child[i], NULL, 0);
            s_child[i] = 0;
        }
}

static void s_on_alarm(int sig)
{
    (void)sig;
    for (int i = 0; i < s_n_child; i++)
        if (s_child[i] > 0)
            kill(s_child[i], SIGKILL);
    static const char msg[] = "test_spec_cluster: timed out\n";
    if (write(2, msg, sizeof msg - 1) < 0)
        _exit(1);
    _exit(1);
}

/* Spawns argv with stdout to out_fd (-1: /dev/null) and stderr to log. */
static pid_t s_spawn(char **argv, int out_fd, const char *log)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (out_fd >= 0)
        posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    else
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        fprintf(stderr, "cannot start %s: %s\n", argv[0], strerror(rc));
        return -1;
    }
    if (s_n_child < MAX_CHILD)
        s_child[s_n_child++] = pid;
    return pid;
}

/* Runs argv (no shell: prompts pass as they are), stderr to /dev/null, and
 * returns its stdout (static buffer) or NULL when it fails. */
static const char *s_capture(char **argv)
{
    static char buf[MAX_OUT];
    int fds[2];
    if (pipe(fds) != 0)
        return NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        return NULL;
    }
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 && (r = read(fds[0], buf + n, sizeof buf - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = 0;
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "%s %s failed (status %d)\n", argv[0], argv[1], st);
        return NULL;
    }
    return buf;
}

/* argv builder: a NULL-terminated list of up to 39 strings. */
typedef struct s_argv {
    char *v[40];
    int n;
} s_argv_t;

static void s_arg(s_argv_t *a, const char *s)
{
    if (a->n < 39) {
        a->v[a->n++] = (char *)s;
        a->v[a->n] = NULL;
    }
}

/* Splits a space-separated flag string into a (kept in a static pool). */
static void s_args(s_argv_t *a, const char *flags)
{
    static char pool[4096];
    static size_t used;
    size_t len = strlen(flags);
    if (used + len + 1 > sizeof pool)
        used = 0;
    char *copy = pool + used;
    memcpy(copy, flags, len + 1);
    used += len + 1;
    for (char *tok = strtok(copy, " "); tok; tok = strtok(NULL, " "))
        s_arg(a, tok);
}

/* Parses "tokens":[...] from a JSON line; returns the count or -1. */
static int s_tokens(const char *json, int *out, int max)
{
    const char *p = json ? strstr(json, "\"tokens\":[") : NULL;
    if (!p)
        return -1;
    p += 10;
    int n = 0;
    while (*p && *p != ']' && n < max) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p)
            return -1;
        out[n++] = (int)v;
        p = end;
        if (*p == ',')
            p++;
    }
    return n;
}

static int s_json_int(const char *json, const char *key)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = json ? strstr(json, k) : NULL;
    return p ? atoi(p + strlen(k)) : -1;
}

static void s_json_str(const char *json, const char *key, char *out, size_t len)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\":\"", key);
    const char *p = json ? strstr(json, k) : NULL;
    out[0] = 0;
    if (!p)
        return;
    p += strlen(k);
    size_t n = strcspn(p, "\"");
    if (n >= len)
        n = len - 1;
    memcpy(out, p, n);
    out[n] = 0;
}

/* Built-in prompts, replaced by the fixture's when it is there. */
static const char *s_prompts[3] = {
    "The capital of France is",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n",
    "Count: one, two, three, four,",
};
#define N_PROMPTS 3
static char s_prompt_buf[N_PROMPTS][1024];

/* The prompts of the cases plain_english, list and numbers of
 * tests/fixtures/greedy_smollm2.json (the llama.cpp parity fixture). */
static void s_load_prompts(void)
{
    static const char *names[N_PROMPTS] = {"plain_english", "list", "numbers"};
    const char *dir = getenv("SW_FIXTURES");
    char path[1024];
    snprintf(path, sizeof path, "%s/greedy_smollm2.json", dir ? dir : "tests/fixtures");
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    json_t *cases = doc ? json_object_get(doc, "cases") : NULL;
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *cs = json_array_get(cases, c);
        const char *name = json_string_value(json_object_get(cs, "name"));
        const char *prompt = json_string_value(json_object_get(cs, "prompt"));
        for (int i = 0; i < N_PROMPTS && name && prompt; i++)
            if (!strcmp(name, names[i]) && strlen(prompt) < sizeof s_prompt_buf[i]) {
                snprintf(s_prompt_buf[i], sizeof s_prompt_buf[i], "%s", prompt);
                s_prompts[i] = s_prompt_buf[i];
            }
    }
    json_decref(doc);
}

static char s_bin[1024], s_relay_ep[512];
static const char *s_model;

static const char *s_last; // the last JSON line s_run read

/* The last `shardwire run --json` output. */
static const char *s_last_json(void)
{
    return s_last;
}

/* `shardwire CMD -p prompt -n N_GEN` into a (strings kept in a static pool). */
static void s_cli(s_argv_t *a, const char *cmd, const char *prompt)
{
    static char exe[1100], n_arg[16];
    snprintf(exe, sizeof exe, "%s/shardwire", s_bin);
    snprintf(n_arg, sizeof n_arg, "%d", N_GEN);
    s_arg(a, exe);
    s_arg(a, cmd);
    s_arg(a, "--greedy"); /* the flags that follow override it */
    s_arg(a, "-p");
    s_arg(a, prompt);
    s_arg(a, "-n");
    s_arg(a, n_arg);
}

/* shardwire run with extra flags; fills tokens, returns the count or -1. */
static int s_run(const char *prompt, const char *flags, int *tokens, char *digest, int *rounds)
{
    s_argv_t a = {0};
    s_cli(&a, "run", prompt);
    s_arg(&a, "--relay");
    s_arg(&a, s_relay_ep);
    s_args(&a, "--insecure-loopback --json --timeout-s 120");
    s_args(&a, flags);
    const char *out = s_capture(a.v);
    s_last = out;
    int n = s_tokens(out, tokens, N_GEN + 1);
    if (digest)
        s_json_str(out, "logits_digest", digest, 17);
    if (rounds)
        *rounds = s_json_int(out, "rounds");
    if (n < 0)
        fprintf(stderr, "no tokens from shardwire run %s\n", flags);
    return n;
}

static int s_same(const int *a, int na, const int *b, int nb, const char *what, int pi)
{
    int same = na >= 0 && na == nb && !memcmp(a, b, (size_t)na * sizeof *a);
    if (!same) {
        fprintf(stderr, "prompt %d, %s: tokens differ (%d vs %d):", pi, what, na, nb);
        for (int i = 0; i < nb; i++)
            fprintf(stderr, " %d/%d", i < na ? a[i] : -1, b[i]);
        fprintf(stderr, "\n");
    }
    return same;
}

/* Waits until the relay lists every node of names (NULL-terminated). */
static int s_wait_ready(const char *const *names)
{
    char exe[1100];
    snprintf(exe, sizeof exe, "%s/shardwire", s_bin);
    char *argv[] = {exe, "status", "--relay", s_relay_ep, "--json", "--insecure-loopback", NULL};
    for (int i = 0; i < 240; i++) {
        const char *out = s_capture(argv);
        int all = out != NULL;
        for (int j = 0; all && names[j]; j++) {
            char want[128];
            snprintf(want, sizeof want, "\"name\":\"%s\"", names[j]);
            all = strstr(out, want) != NULL;
        }
        if (all)
            return 0;
        struct timespec ts = {0, 250 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return -1;
}

static void s_test_vocab_refused(const char *tmp)
{
    /* A tokenizer-only GGUF with 3 tokens: not SmolLM2's vocabulary. */
    char path[1024], log[1024];
    snprintf(path, sizeof path, "%s/tiny_vocab.gguf", tmp);
    snprintf(log, sizeof log, "%s/refused.log", tmp);
    FILE *f = fopen(path, "wb");
    SW_CHECK(f != NULL);
    if (!f)
        return;
    static const unsigned char hdr[] = {'G', 'G', 'U', 'F', 3, 0, 0, 0, 0, 0, 0, 0,
                                        0,   0,   0,   0,   1, 0, 0, 0, 0, 0, 0, 0};
    fwrite(hdr, 1, sizeof hdr, f);
    const char *key = "tokenizer.ggml.tokens";
    uint64_t u64 = strlen(key);
    uint32_t u32;
    fwrite(&u64, 8, 1, f);
    fwrite(key, 1, strlen(key), f);
    u32 = 9; // array
    fwrite(&u32, 4, 1, f);
    u32 = 8; // of strings
    fwrite(&u32, 4, 1, f);
    u64 = 3;
    fwrite(&u64, 8, 1, f);
    for (int i = 0; i < 3; i++) {
        u64 = 1;
        fwrite(&u64, 8, 1, f);
        fputc('a' + i, f);
    }
    long pos = ftell(f);
    while (pos++ % 32)
        fputc(0, f);
    fclose(f);
    char node[1100];
    snprintf(node, sizeof node, "%s/shardwire-node", s_bin);
    char *argv[] = {node,
                    "--model",
                    (char *)s_model,
                    "--layers",
                    "0:15",
                    "--relay",
                    s_relay_ep,
                    "--name",
                    "sc-bad",
                    "--threads",
                    "1",
                    "--draft-model",
                    path,
                    "--insecure-loopback",
                    NULL};
    pid_t pid = s_spawn(argv, -1, log);
    int st = 0;
    SW_CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    for (int i = 0; i < s_n_child; i++)
        if (s_child[i] == pid)
            s_child[i] = 0;
    SW_CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    char *text = sw_test_read_file(log, NULL);
    SW_CHECK(text && strstr(text, "vocabulary mismatch: the draft model has 3 tokens"));
    if (text)
        fprintf(stderr, "head refused: %s", text);
    free(text);
}

/* Stops every process this test started. */
static void s_stop_cluster(void)
{
    s_kill_all();
    s_n_child = 0;
}

/* Starts a relay and a pipeline of n_stages (2: head [0, 15) with the draft
 * model, tail [15, 30); 3: head [0, 10), middle [10, 20), tail [20, 30)),
 * hidden states as f32. 0, or -1. */
static int s_start_cluster(int n_stages, const char *tmp)
{
    char log[4][1024];
    for (int i = 0; i < 4; i++)
        snprintf(log[i], sizeof log[i], "%s/c%d_proc%d.log", tmp, n_stages, i);
    /* Relay on a free port: it prints "listening ENDPOINT". */
    char relay[1100];
    snprintf(relay, sizeof relay, "%s/shardwire-relay", s_bin);
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    char *rargv[] = {
        relay, "--listen", "tcp://127.0.0.1:*", "--heartbeat-ms", "200", "--insecure-loopback",
        NULL};
    pid_t rp = s_spawn(rargv, fds[1], log[0]);
    close(fds[1]);
    FILE *rf = fdopen(fds[0], "r");
    char line[512] = "";
    if (rp < 0 || !rf || !fgets(line, sizeof line, rf) || strncmp(line, "listening ", 10) != 0) {
        if (rf)
            fclose(rf);
        return -1;
    }
    fclose(rf);
    line[strcspn(line, "\n")] = 0;
    snprintf(s_relay_ep, sizeof s_relay_ep, "%s", line + 10);

    static const char *ranges[2][3] = {{"0:15", "15:end", NULL}, {"0:10", "10:20", "20:end"}};
    static const char *names[2][4] = {{"sc-head", "sc-tail", NULL, NULL},
                                      {"sc-head", "sc-mid", "sc-tail", NULL}};
    const int c = n_stages == 3;
    char node[1100];
    snprintf(node, sizeof node, "%s/shardwire-node", s_bin);
    for (int i = 0; i < n_stages; i++) {
        s_argv_t a = {0};
        s_arg(&a, node);
        s_arg(&a, "--model");
        s_arg(&a, s_model);
        s_arg(&a, "--layers");
        s_arg(&a, ranges[c][i]);
        s_arg(&a, "--relay");
        s_arg(&a, s_relay_ep);
        s_arg(&a, "--name");
        s_arg(&a, names[c][i]);
        s_args(&a, "--threads 1 --dtype f32 --insecure-loopback");
        if (i == 0) {
            s_arg(&a, "--draft-model");
            s_arg(&a, s_model);
            s_args(&a, "--draft-threads 1");
        }
        if (s_spawn(a.v, -1, log[i + 1]) < 0)
            return -1;
    }
    return s_wait_ready(names[c]);
}

/* `shardwire generate` in one process with flags; fills tokens (and the
 * logits digest), returns the count or -1. */
static int s_generate(const char *prompt, const char *flags, int *tokens, char *digest)
{
    s_argv_t a = {0};
    s_cli(&a, "generate", prompt);
    s_arg(&a, "--model");
    s_arg(&a, s_model);
    s_args(&a, "-t 1 --json --draft-threads 1");
    s_args(&a, flags);
    if (strstr(flags, "--draft-k")) {
        s_arg(&a, "--draft-model");
        s_arg(&a, s_model);
    }
    const char *js = s_capture(a.v);
    if (digest)
        s_json_str(js, "logits_digest", digest, 17);
    return s_tokens(js, tokens, N_GEN + 1);
}

/* Tree and drafting-ahead runs on one cluster: greedy ones equal base for
 * prompt pi; *trees / *hits count the tree rounds and the rounds that left
 * with drafts prepared ahead. */
static void s_tree_runs(int pi, const int *base, int nb, int *trees, int *hits, int *misses,
                        int *moves)
{
    static const char *flags[] = {
        "--draft model --draft-k 4 --draft-tree 8 --draft-ahead off",
        "--draft model --draft-k 4 --draft-tree 8 --draft-ahead on",
        "--draft model --draft-k 6 --draft-ahead on",
        "--draft ngram --draft-k 4 --draft-tree 12",
        "--draft model --draft-tree 16", // adaptive K and shape, ahead (the head's default)
    };
    int out[N_GEN + 1];
    for (size_t f = 0; f < sizeof flags / sizeof flags[0]; f++) {
        char js_flags[160];
        snprintf(js_flags, sizeof js_flags, "%s", flags[f]);
        int n = s_run(s_prompts[pi], js_flags, out, NULL, NULL);
        SW_CHECK(s_same(out, n, base, nb, flags[f], pi));
        const char *js = s_last_json();
        *trees += s_json_int(js, "tree_rounds") > 0 ? s_json_int(js, "tree_rounds") : 0;
        *hits += s_json_int(js, "ahead_hits") > 0 ? s_json_int(js, "ahead_hits") : 0;
        *misses += s_json_int(js, "ahead_misses") > 0 ? s_json_int(js, "ahead_misses") : 0;
        *moves += s_json_int(js, "kv_moves") > 0 ? s_json_int(js, "kv_moves") : 0;
    }
}

/* A prompt whose n-gram tries hold the target's next token off the first
 * branch now and then: the accepted path is moved (kv_path) at every stage. */
static const char s_code_prompt[] =
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return "
    "a - b\n\ndef mul(a, b):\n";

static int s_moves_run(void)
{
    int base[N_GEN + 1], out[N_GEN + 1];
    int nb = s_run(s_code_prompt, "--draft none", base, NULL, NULL);
    int n = s_run(s_code_prompt, "--draft ngram --draft-k 4 --draft-tree 12", out, NULL, NULL);
    SW_CHECK(s_same(out, n, base, nb, "ngram tree, code prompt", 3));
    const int moves = s_json_int(s_last_json(), "kv_moves");
    return moves > 0 ? moves : 0;
}

/* Sampling with trees and drafting ahead: the cluster gives the tokens and
 * the logits digest of one process with the same seed, K and tree, which
 * drafts nothing ahead (drafts do not depend on timing). */
static void s_tree_sampling(int pi)
{
    int local[N_GEN + 1], out[N_GEN + 1];
    char d_local[17] = "", d_cluster[17] = "";
    int nl = s_generate(s_prompts[pi],
                        "--temp 0.8 --seed 11 --draft-k 4 --draft-tree 8 --draft-ahead off", local,
                        d_local);
    int n = s_run(s_prompts[pi],
                  "--temp 0.8 --seed 11 --draft model --draft-k 4 --draft-tree 8 --draft-ahead on",
                  out, d_cluster, NULL);
    SW_CHECK(nl > 0);
    SW_CHECK(s_same(out, n, local, nl, "sampling, tree + ahead, cluster vs one process", pi));
    SW_CHECK(d_local[0] && !strcmp(d_local, d_cluster));
    SW_CHECK(s_json_int(s_last_json(), "tree_rounds") > 0);
}

int main(void)
{
    s_model = sw_test_model();
    snprintf(s_bin, sizeof s_bin, "%s", sw_test_env("SW_BIN_DIR"));
    signal(SIGALRM, s_on_alarm);
    alarm(540);
    atexit(s_kill_all);
    const char *tmp = sw_test_tmpdir();
    s_load_prompts();
    if (s_start_cluster(2, tmp) != 0) {
        SW_CHECK(!"relay and both nodes started");
        return sw_test_done();
    }

    static const int ks[] = {1, 2, 4, 8, 16, 32};
    int base[N_PROMPTS][N_GEN + 1], nbase[N_PROMPTS], local[N_GEN + 1], out[N_GEN + 1];
    int trees = 0, hits = 0, misses = 0, moves = 0;
    for (int pi = 0; pi < N_PROMPTS; pi++) {
        int *b = base[pi];
        int nb = nbase[pi] = s_run(s_prompts[pi], "--draft none", b, NULL, NULL);
        SW_CHECK_INT(nb, N_GEN);
        int nl = s_generate(s_prompts[pi], "", local, NULL);
        SW_CHECK(s_same(local, nl, b, nb, "single process", pi));
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            char flags[128], what[64];
            snprintf(flags, sizeof flags, "--draft ngram --draft-k %d", ks[ki]);
            snprintf(what, sizeof what, "ngram K %d", ks[ki]);
            int n = s_run(s_prompts[pi], flags, out, NULL, NULL);
            SW_CHECK(s_same(out, n, b, nb, what, pi));
            /* The draft model: every K on the first prompt, some on the others. */
            if (pi > 0 && ks[ki] != 4 && ks[ki] != 32)
                continue;
            int rounds = 0;
            snprintf(flags, sizeof flags, "--draft model --draft-k %d", ks[ki]);
            snprintf(what, sizeof what, "model K %d", ks[ki]);
            n = s_run(s_prompts[pi], flags, out, NULL, &rounds);
            SW_CHECK(s_same(out, n, b, nb, what, pi));
            if (ks[ki] >= 4) // self-drafting: every draft accepted, few rounds
                SW_CHECK(rounds > 0 && rounds <= (N_GEN - 1 + ks[ki]) / (ks[ki] + 1) + 1);
        }
        int n = s_run(s_prompts[pi], "--draft model", out, NULL, NULL); // adaptive (head default)
        SW_CHECK(s_same(out, n, b, nb, "model, adaptive K", pi));
        n = s_run(s_prompts[pi], "--draft mix", out, NULL, NULL); // prompt lookup, else the model
        SW_CHECK(s_same(out, n, b, nb, "mix, adaptive K", pi));
        s_tree_runs(pi, b, nb, &trees, &hits, &misses, &moves);
    }
    moves += s_moves_run();
    SW_CHECK(trees > 0); // the tree runs really sent trees
    SW_CHECK(hits > 0);  // and rounds left with drafts prepared ahead
    SW_CHECK(moves > 0); // and accepted paths off the first branch were kept
    fprintf(stderr,
            "2 nodes: %d tree rounds, %d paths moved, %d rounds drafted ahead (%d misses)\n", trees,
            moves, hits, misses);

    /* Sampling: the cluster and one process agree for one seed and K. */
    char d_local[17] = "", d_cluster[17] = "";
    int nl = s_generate(s_prompts[2], "--temp 0.8 --seed 7 --draft-k 4", local, d_local);
    int n =
        s_run(s_prompts[2], "--temp 0.8 --seed 7 --draft model --draft-k 4", out, d_cluster, NULL);
    SW_CHECK(nl > 0);
    SW_CHECK(s_same(out, n, local, nl, "sampling, cluster vs one process", 2));
    SW_CHECK(d_local[0] && !strcmp(d_local, d_cluster));
    s_tree_sampling(0);

    s_test_vocab_refused(tmp);
    s_stop_cluster();

    /* Three stages: trees and drafting ahead through a middle stage. */
    if (s_start_cluster(3, tmp) != 0) {
        SW_CHECK(!"relay and three nodes started");
        return sw_test_done();
    }
    trees = hits = misses = moves = 0;
    for (int pi = 0; pi < N_PROMPTS; pi++) {
        n = s_run(s_prompts[pi], "--draft none", out, NULL, NULL);
        SW_CHECK(s_same(out, n, base[pi], nbase[pi], "3 nodes, no drafts", pi));
        s_tree_runs(pi, base[pi], nbase[pi], &trees, &hits, &misses, &moves);
    }
    moves += s_moves_run();
    SW_CHECK(trees > 0 && hits > 0 && moves > 0);
    fprintf(stderr,
            "3 nodes: %d tree rounds, %d paths moved, %d rounds drafted ahead (%d misses)\n", trees,
            moves, hits, misses);
    s_tree_sampling(1);
    s_stop_cluster();
    return sw_test_done();
}
