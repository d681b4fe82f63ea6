/*
 * test_tree.c - token tree attention in the engine, on the real default
 * model (SmolLM2-135M), compared bit for bit with each path of the tree run
 * on its own as an ordinary sequence:
 *
 *  - a tree of 24 drafts (random shape, one branch 40 deep so that rows see
 *    more than 64 positions) after a 40-token prompt: every row's logits
 *    equal the last row's logits of its root-to-node path evaluated as a
 *    sequence in a fresh cache (memcmp);
 *  - a tree of 70 drafts (more rows than one forward chunk holds): the same;
 *  - the same tree through two stages (layers 0:15 then 15:30, hidden
 *    states handed over) gives the whole model's logits;
 *  - a tree grown over several forward calls (rows whose parents are tree
 *    slots cached by an earlier call, as the draft model grows its trees);
 *  - sw_kv_keep: the accepted path of a branch that is not the first one
 *    becomes ordinary cache (positions, no tree part left), and the next row
 *    computed after it equals the sequence's; bad keeps are refused and
 *    change nothing;
 *  - a tree session sharing forward_batch chunks with a plain session: both
 *    equal to each alone;
 *  - all of the first point again with the scalar kernels (a child process
 *    with SW_CPU=scalar), which must give the same bits as AVX2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "model.h"
#include "rng.h"
#include "sw_test.h"

#define N_PROMPT 40
#define N_CTX 256
#define MAX_NODES 80

static sw_model_t *s_whole, *s_head, *s_tail;
static int s_vocab, s_embd;
static int32_t s_prompt[N_PROMPT]; // the prefix, then the root token t0

/* A tree: node 0 = t0 (the last prompt token), nodes 1..k the drafts. */
typedef struct tree {
    int k;
    int32_t tok[MAX_NODES + 1];
    int32_t par[MAX_NODES + 1]; // node index of the parent (par[0] unused)
} tree_t;

static void s_random_tree(tree_t *t, int k, int deep, uint64_t seed)
{
    sw_rng_t r;
    sw_rng_seed(&r, seed);
    t->k = k;
    t->tok[0] = s_prompt[N_PROMPT - 1];
    for (int i = 1; i <= k; i++) {
        t->tok[i] = (int32_t)(sw_rng_next(&r) % (uint64_t)s_vocab);
        /* The first `deep` drafts form one long branch; the rest hang anywhere. */
        t->par[i] = i <= deep ? i - 1 : (int32_t)(sw_rng_next(&r) % (uint64_t)i);
    }
}

/* The prefix (all prompt tokens but t0) as a prompt, in a fresh cache. */
static sw_kv_t *s_prefilled(sw_model_t *m, float *hidden_io)
{
    char err[256] = "";
    sw_kv_t *kv = sw_kv_new(m, N_CTX);
    if (!kv)
        return NULL;
    float *h = malloc((size_t)N_PROMPT * s_embd * sizeof *h);
    sw_forward_t f = {.n = N_PROMPT - 1, .prompt = 1};
    if (sw_model_is_first(m))
        f.tokens = s_prompt;
    else
        f.hidden = hidden_io;
    if (!sw_model_is_last(m))
        f.out_hidden = h;
    if (!h || sw_model_forward(m, kv, &f, err, sizeof err) != 0) {
        fprintf(stderr, "prefill: %s\n", err);
        sw_kv_free(&kv);
    } else if (!sw_model_is_last(m) && hidden_io) {
        memcpy(hidden_io, h, (size_t)(N_PROMPT - 1) * s_embd * sizeof *h);
    }
    free(h);
    return kv;
}

/* The logits of node i's path (t0 .. node i) run as a sequence after the
 * prefix in a fresh whole-model cache: its last row, into out (n_vocab). */
static int s_path_logits(const tree_t *t, int i, float *out)
{
    int32_t path[MAX_NODES + 1];
    int n = 0;
    for (int x = i; x > 0; x = t->par[x])
        path[n++] = t->tok[x];
    path[n++] = t->tok[0];
    for (int a = 0; a < n / 2; a++) {
        int32_t tmp = path[a];
        path[a] = path[n - 1 - a];
        path[n - 1 - a] = tmp;
    }
    /* One prefilled cache for every reference: truncating it back to the
     * prefix leaves exactly the prefix's rows. */
    static sw_kv_t *ref;
    if (!ref && !(ref = s_prefilled(s_whole, NULL)))
        return -1;
    char err[256] = "";
    sw_forward_t f = {.n = n, .tokens = path, .logits = out, .n_logits = 1};
    int rc = sw_kv_truncate(ref, N_PROMPT - 1) == 0 ? 0 : -1;
    if (rc == 0)
        rc = sw_model_forward(s_whole, ref, &f, err, sizeof err);
    if (rc)
        fprintf(stderr, "path of node %d: %s\n", i, err);
    return rc;
}

/* The row parents (cache slots) of a tree forward after the prefix. */
static void s_row_parents(const tree_t *t, int32_t *rp)
{
    const int base = N_PROMPT - 1; // slot of t0
    rp[0] = base - 1;
    for (int i = 1; i <= t->k; i++)
        rp[i] = base + t->par[i];
}

/* Whole-model tree forward; logits (k + 1, n_vocab). */
static int s_tree_logits(const tree_t *t, float *logits, sw_kv_t **kv_out)
{
    int32_t rp[MAX_NODES + 1];
    s_row_parents(t, rp);
    sw_kv_t *kv = s_prefilled(s_whole, NULL);
    char err[256] = "";
    sw_forward_t f = {
        .n = t->k + 1, .tokens = t->tok, .logits = logits, .n_logits = t->k + 1, .parent = rp};
    int rc = kv ? sw_model_forward(s_whole, kv, &f, err, sizeof err) : -1;
    if (rc)
        fprintf(stderr, "tree forward: %s\n", err);
    if (kv_out && rc == 0)
        *kv_out = kv;
    else
        sw_kv_free(&kv);
    return rc;
}

/* Every node's tree row against its path. Returns the number of rows that differ. */
static int s_check_tree(const tree_t *t, const char *what)
{
    const size_t nv = (size_t)s_vocab;
    float *logits = malloc((size_t)(t->k + 1) * nv * sizeof *logits);
    float *ref = malloc(nv * sizeof *ref);
    int bad = 0;
    if (!logits || !ref || s_tree_logits(t, logits, NULL) != 0) {
        bad = t->k + 1;
        goto out;
    }
    for (int i = 0; i <= t->k; i++) {
        if (s_path_logits(t, i, ref) != 0 || memcmp(ref, logits + i * nv, nv * sizeof *ref)) {
            if (bad++ < 3)
                fprintf(stderr, "%s: node %d differs from its path\n", what, i);
        }
    }
    fprintf(stderr, "%s: %d nodes, %d differ from their paths\n", what, t->k + 1, bad);
out:
    free(logits);
    free(ref);
    return bad;
}

/* The tree through two stages equals the whole model's. */
static void s_test_split(const tree_t *t)
{
    const size_t nv = (size_t)s_vocab, rows = (size_t)t->k + 1;
    float *h_pre = malloc((size_t)N_PROMPT * s_embd * sizeof(float));
    float *h = malloc(rows * s_embd * sizeof(float));
    float *want = malloc(rows * nv * sizeof(float)), *got = malloc(rows * nv * sizeof(float));
    int32_t rp[MAX_NODES + 1];
    s_row_parents(t, rp);
    char err[256] = "";
    sw_kv_t *kh = s_prefilled(s_head, h_pre);
    sw_kv_t *kt = h_pre ? s_prefilled(s_tail, h_pre) : NULL;
    int ok = h && want && got && kh && kt && s_tree_logits(t, want, NULL) == 0;
    sw_forward_t fh = {.n = (int)rows, .tokens = t->tok, .out_hidden = h, .parent = rp};
    sw_forward_t ft = {
        .n = (int)rows, .hidden = h, .logits = got, .n_logits = (int)rows, .parent = rp};
    ok = ok && sw_model_forward(s_head, kh, &fh, err, sizeof err) == 0 &&
         sw_model_forward(s_tail, kt, &ft, err, sizeof err) == 0;
    if (!ok)
        fprintf(stderr, "split tree: %s\n", err);
    SW_CHECK(ok && !memcmp(want, got, rows * nv * sizeof(float)));
    sw_kv_free(&kh);
    sw_kv_free(&kt);
    free(h_pre);
    free(h);
    free(want);
    free(got);
}

/* A tree grown level by level over several calls, as the draft model does. */
static void s_test_growth(void)
{
    tree_t t;
    s_random_tree(&t, 12, 0, 77);
    /* levels: nodes 1-3 under the root, 4-8 under them, 9-12 under those */
    static const int32_t par[13] = {0, 0, 0, 0, 1, 1, 2, 3, 3, 4, 6, 6, 8};
    memcpy(t.par, par, sizeof par);
    const size_t nv = (size_t)s_vocab;
    float *logits = malloc(13 * nv * sizeof *logits), *ref = malloc(nv * sizeof *ref);
    sw_kv_t *kv = s_prefilled(s_whole, NULL);
    char err[256] = "";
    int ok = logits && ref && kv;
    const int base = N_PROMPT - 1;
    const int cuts[4] = {0, 4, 9, 13}; // the root with level 1, then level 2, then 3
    for (int c = 0; c < 3 && ok; c++) {
        int32_t rp[13];
        const int n = cuts[c + 1] - cuts[c];
        for (int r = 0; r < n; r++) {
            const int i = cuts[c] + r;
            rp[r] = i == 0 ? base - 1 : base + t.par[i];
        }
        sw_forward_t f = {.n = n,
                          .tokens = t.tok + cuts[c],
                          .logits = logits + cuts[c] * nv,
                          .n_logits = n,
                          .parent = rp};
        ok = sw_model_forward(s_whole, kv, &f, err, sizeof err) == 0;
    }
    if (!ok)
        fprintf(stderr, "growth: %s\n", err);
    int bad = 0;
    for (int i = 0; ok && i <= 12; i++)
        bad += s_path_logits(&t, i, ref) != 0 || memcmp(ref, logits + i * nv, nv * sizeof *ref);
    SW_CHECK(ok);
    SW_CHECK_INT(bad, 0);
    /* A cache with a tree part cannot run the device greedy loop. */
    int32_t out1;
    SW_CHECK(!kv || sw_model_greedy_steps(s_whole, kv, 5, 1, &out1, NULL, err, sizeof err) != 0);
    sw_kv_free(&kv);
    free(logits);
    free(ref);
}

/* The accepted path of a later branch kept; the next row then equals the sequence's. */
static void s_test_keep(void)
{
    tree_t t;
    s_random_tree(&t, 10, 0, 5);
    static const int32_t par[11] = {0, 0, 1, 2, 0, 4, 5, 4, 7, 8, 8};
    memcpy(t.par, par, sizeof par);
    const size_t nv = (size_t)s_vocab;
    float *logits = malloc(11 * nv * sizeof *logits), *ref = malloc(nv * sizeof *ref),
          *next = malloc(nv * sizeof *next);
    sw_kv_t *kv = NULL;
    char err[256] = "";
    if (!logits || !ref || !next || s_tree_logits(&t, logits, &kv) != 0) {
        SW_CHECK(0);
        goto out;
    }
    const int base = N_PROMPT - 1, from = base + 1;
    /* Refused, and nothing changes: not increasing, a parent not kept, out of range. */
    const int32_t bad1[2] = {from + 6, from + 3}, bad2[2] = {from + 3, from + 7},
                  bad3[1] = {from + 11};
    SW_CHECK(sw_kv_keep(kv, from, bad1, 2, err, sizeof err) != 0);
    SW_CHECK(sw_kv_keep(kv, from, bad2, 2, err, sizeof err) != 0); // 8's parent 7 is not kept
    SW_CHECK(sw_kv_keep(kv, from, bad3, 1, err, sizeof err) != 0);
    SW_CHECK_INT(sw_kv_len(kv), from + 10);
    /* Keep the path 4 -> 7 -> 8 -> 10 (slots from + node - 1). */
    const int32_t path[4] = {from + 3, from + 6, from + 7, from + 9};
    SW_CHECK(sw_kv_keep(kv, from, path, 4, err, sizeof err) == 0);
    SW_CHECK_INT(sw_kv_len(kv), from + 4);
    SW_CHECK_INT(sw_kv_linear(kv), from + 4);
    SW_CHECK_INT(sw_kv_pos(kv, from + 3), from + 3);
    /* One more token after the path: as the sequence t0 4 7 8 10 x. */
    tree_t chain = t;
    chain.k = 5;
    const int32_t ids[6] = {t.tok[0], t.tok[4], t.tok[7], t.tok[8], t.tok[10], 1234};
    for (int i = 0; i <= 5; i++) {
        chain.tok[i] = ids[i];
        chain.par[i] = i - 1;
    }
    sw_forward_t f = {.n = 1, .tokens = &ids[5], .logits = next, .n_logits = 1};
    SW_CHECK(sw_model_forward(s_whole, kv, &f, err, sizeof err) == 0);
    SW_CHECK(s_path_logits(&chain, 5, ref) == 0);
    SW_CHECK(!memcmp(ref, next, nv * sizeof *ref));
    /* The kept rows' own logits were the tree's: node 10's row. */
    SW_CHECK(s_path_logits(&chain, 4, ref) == 0);
    SW_CHECK(!memcmp(ref, logits + 10 * nv, nv * sizeof *ref));
out:
    sw_kv_free(&kv);
    free(logits);
    free(ref);
    free(next);
}

/* A tree session and a plain session in one forward_batch call. */
static void s_test_batch(const tree_t *t)
{
    const size_t nv = (size_t)s_vocab, rows = (size_t)t->k + 1;
    float *alone = malloc(rows * nv * sizeof(float)), *both = malloc(rows * nv * sizeof(float));
    float *p_alone = malloc(3 * nv * sizeof(float)), *p_both = malloc(3 * nv * sizeof(float));
    int32_t rp[MAX_NODES + 1];
    s_row_parents(t, rp);
    const int32_t other[3] = {11, 22, 33};
    char err[256] = "";
    sw_kv_t *k1 = s_prefilled(s_whole, NULL), *k2 = s_prefilled(s_whole, NULL);
    int ok = alone && both && p_alone && p_both && k1 && k2 && s_tree_logits(t, alone, NULL) == 0;
    sw_forward_t f2 = {.n = 3, .tokens = other, .logits = p_alone, .n_logits = 3};
    ok = ok && sw_model_forward(s_whole, k2, &f2, err, sizeof err) == 0 &&
         sw_kv_truncate(k2, N_PROMPT - 1) == 0;
    sw_forward_t fs[2] = {
        {.n = 3, .tokens = other, .logits = p_both, .n_logits = 3},
        {.n = (int)rows, .tokens = t->tok, .logits = both, .n_logits = (int)rows, .parent = rp}};
    sw_kv_t *kvs[2] = {k2, k1};
    ok = ok && sw_model_forward_batch(s_whole, kvs, fs, 2, err, sizeof err) == 0;
    if (!ok)
        fprintf(stderr, "batch: %s\n", err);
    SW_CHECK(ok && !memcmp(alone, both, rows * nv * sizeof(float)));
    SW_CHECK(ok && !memcmp(p_alone, p_both, 3 * nv * sizeof(float)));
    sw_kv_free(&k1);
    sw_kv_free(&k2);
    free(alone);
    free(both);
    free(p_alone);
    free(p_both);
}

/* Bad parents are refused. */
static void s_test_refusals(void)
{
    sw_kv_t *kv = s_prefilled(s_whole, NULL);
    char err[256] = "";
    int32_t tok[2] = {1, 2}, rp[2] = {N_PROMPT - 2, N_PROMPT + 1}; // row 1 under itself
    float logits[2];
    (void)logits;
    sw_forward_t f = {.n = 2, .tokens = tok, .parent = rp};
    SW_CHECK(kv && sw_model_forward(s_whole, kv, &f, err, sizeof err) != 0);
    rp[1] = -2;
    SW_CHECK(kv && sw_model_forward(s_whole, kv, &f, err, sizeof err) != 0);
    rp[1] = N_PROMPT - 1;
    f.prompt = 1; // a prompt cannot be tree rows
    SW_CHECK(kv && sw_model_forward(s_whole, kv, &f, err, sizeof err) != 0);
    SW_CHECK(kv && sw_kv_len(kv) == N_PROMPT - 1);
    sw_kv_free(&kv);
}

static int s_load(int threads)
{
    const char *path = sw_test_model();
    char err[512] = "";
    sw_backend_t *be = sw_backend_new("cpu", threads, NULL, 0);
    if (!be)
        return -1;
    s_whole = sw_model_load(path, 0, -1, be, err, sizeof err);
    s_head = s_whole ? sw_model_load(path, 0, 15, be, err, sizeof err) : NULL;
    s_tail = s_head ? sw_model_load(path, 15, -1, be, err, sizeof err) : NULL;
    if (!s_tail) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    s_vocab = sw_model_hparams(s_whole)->n_vocab;
    s_embd = sw_model_hparams(s_whole)->n_embd;
    sw_rng_t r;
    sw_rng_seed(&r, 2024);
    for (int i = 0; i < N_PROMPT; i++)
        s_prompt[i] = (int32_t)(sw_rng_next(&r) % (uint64_t)s_vocab);
    return 0;
}

int main(int argc, char **argv)
{
    if (s_load(argc > 1 ? 1 : 2) != 0) {
        SW_CHECK(!"model loaded");
        return sw_test_done();
    }
    tree_t t24, t70;
    s_random_tree(&t24, 24, 12, 1);
    if (argc > 1 && !strcmp(argv[1], "scalar")) { // the child: scalar kernels
        SW_CHECK_INT(s_check_tree(&t24, "scalar kernels, 24 drafts"), 0);
        return sw_test_done();
    }
    SW_CHECK_INT(s_check_tree(&t24, "24 drafts"), 0);
    s_random_tree(&t70, 70, 40, 2); // a 40-deep branch: rows see up to 80 positions
    SW_CHECK_INT(s_check_tree(&t70, "70 drafts"), 0);
    s_test_split(&t70);
    s_test_growth();
    s_test_keep();
    s_test_batch(&t24);
    s_test_refusals();

    /* The scalar kernels in a child process (the kernel choice is made once). */
    pid_t pid = fork();
    if (pid == 0) {
        setenv("SW_CPU", "scalar", 1);
        execl(argv[0], argv[0], "scalar", (char *)NULL);
        _exit(127);
    }
    int st = 0;
    SW_CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    return sw_test_done();
}
