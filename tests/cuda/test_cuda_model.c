/*
 * test_cuda_model.c - the CUDA backend against the CPU backend on real model
 * files, and the GPU's own invariances (label cuda; skips without a GPU):
 *
 *  - logits of decode rows and of a short prompt (the exact kernels, K-quant
 *    prompt windows in llama.cpp's tiled order) bit-identical to the CPU's;
 *    a long prompt through cuBLAS within the margin rule, and cuBLAS must
 *    have run (a missing library is a skipped part, a failure in CI);
 *    no NaN or infinity anywhere;
 *  - batch invariance on the GPU: a row's logits are bit-identical alone and
 *    in batches of 1..33 rows (K+1 verification rows);
 *  - a layer split on the GPU ([0, a) + [a, L)) and a group of two backends
 *    on one GPU ("cuda:0,0"; "cuda:0,1" when there are two GPUs, with NCCL
 *    and with peer copies) give the whole model's logits bit for bit;
 *  - a GPU head with a CPU tail, and the group "cuda:0,cpu", against the CPU;
 *  - the greedy draft loop on the GPU equals one-row forwards and the argmax;
 *  - the left-to-right sums forced (SW_CUDA_SEQ_SUMS=1) give the same bits;
 *  - token trees on the GPU: every tree row's logits equal its path run as
 *    a sequence on the GPU (bit for bit, as on the CPU) and the CPU's tree
 *    within the rule; the accepted path kept by sw_kv_keep (the GPU's
 *    kv_move) continues exactly like the sequence;
 *  - bad input is refused with a message, and an impossible cache is NULL;
 *  - sessions: one recorded graph serves every session of a model (a second
 *    session records nothing, closing one forgets nothing), and sessions in
 *    one shared batch (sw_model_forward_batch) give each one's results alone;
 *  - a 150-row prompt with attention taking one row per pass
 *    (SW_CUDA_ATTN_MIB=0) equals one pass and the CPU;
 *  - a kept tree path of 70 slots (two kv_move kernels) continues exactly
 *    like the sequence;
 *  - a failed CUDA call (an error the GPU recovers from) is reported once, by
 *    the call that failed, not by the next launch (on the emulation, which
 *    injects the failures; a fatal one: test_cuda_fatal);
 *  - destroying a backend that never ran a long prompt does not load cuBLAS;
 *  - the families whose operations came with issue 24 (SW_CUDA_ARCH_MODELS:
 *    Gemma 3 with sliding windows shorter than the sequence, Qwen3-MoE):
 *    a 20-row prompt (tiled order, tiled experts), 5 verification rows and
 *    single rows (recorded graphs) bit-identical to the CPU over 48
 *    positions, and a prompt whose last row alone wants logits (experts
 *    counted on that row only); the same model over two GPUs (one when
 *    there is one: "cuda:0,0") equal to one GPU; the greedy draft loop equal
 *    to one-row forwards.
 */
#include "cuda_test.h"

#define T 48

static int32_t s_tok[T + 100];

static void s_tokens(int V)
{
    uint32_t x = 777;
    for (int i = 0; i < T + 100; i++) {
        x = x * 1664525u + 1013904223u;
        s_tok[i] = (int32_t)((x >> 8) % (uint32_t)V);
    }
}

/* Logits of the sequence: a prompt of n_prompt rows, then single rows to T. */
static int s_run(sw_model_t *m, int n_prompt, float *logits, int V)
{
    sw_kv_t *kv = sw_kv_new(m, 256);
    if (!kv)
        return -1;
    int rc = cuda_test_fwd(m, kv, s_tok, NULL, n_prompt, NULL, logits, n_prompt, 1);
    for (int i = n_prompt; i < T && rc == 0; i++)
        rc = cuda_test_fwd(m, kv, &s_tok[i], NULL, 1, NULL, logits + (size_t)i * V, 1, 0);
    sw_kv_free(&kv);
    return rc;
}

/* What the greedy draft loop from cache length `from` must return: n one-row
 * forwards from s_tok[from], each fed the argmax of the last (row: V floats). */
static void s_argmax_chain(sw_model_t *m, sw_kv_t *kv, int from, int n, float *row, int V,
                           int32_t *want)
{
    if (!kv)
        return;
    SW_CHECK_INT(sw_kv_truncate(kv, from), 0);
    int32_t t = s_tok[from];
    for (int i = 0; i < n; i++) {
        SW_CHECK_INT(cuda_test_fwd(m, kv, &t, NULL, 1, NULL, row, 1, 0), 0);
        int best = 0;
        for (int j = 1; j < V; j++)
            if (row[j] > row[best])
                best = j;
        want[i] = t = best;
    }
}

/* A prefix of P prompt rows, then a tree of K drafts (node i + 1 = draft i
 * with token s_tok[P + i], under node s_par[i]; node 0 = the last prefix
 * row). */
enum { S_TP = 20, S_TK = 7 };
static const int32_t s_par[S_TK] = {0, 1, 0, 3, 1, 5, 3};

/* The tree's rows' logits into out (S_TK rows); the cache is left holding it. */
static int s_tree_rows(sw_model_t *m, sw_kv_t *kv, float *out)
{
    int32_t par[S_TK];
    for (int i = 0; i < S_TK; i++)
        par[i] = S_TP - 1 + s_par[i]; // node j sits at slot S_TP - 1 + j
    char err[256] = "";
    if (cuda_test_fwd(m, kv, s_tok, NULL, S_TP, NULL, out, 1, 1) != 0)
        return -1;
    sw_forward_t f = {
        .n = S_TK, .tokens = s_tok + S_TP, .logits = out, .n_logits = S_TK, .parent = par};
    int rc = sw_model_forward(m, kv, &f, err, sizeof err);
    if (rc)
        fprintf(stderr, "tree forward: %s\n", err);
    return rc;
}

/* The path root -> node (1..S_TK) as tokens; returns its length. */
static int s_path(int node, int32_t *toks)
{
    int32_t rev[S_TK], n = 0;
    for (int at = node; at > 0; at = s_par[at - 1])
        rev[n++] = s_tok[S_TP + at - 1];
    for (int i = 0; i < n; i++)
        toks[i] = rev[n - 1 - i];
    return n;
}

static void s_tree(sw_model_t *mg, sw_model_t *mc, int V, float *ref, float *got)
{
    sw_kv_t *kg = sw_kv_new(mg, 128), *kc = sw_kv_new(mc, 128), *ks = sw_kv_new(mg, 128);
    SW_CHECK(kg && kc && ks);
    if (!kg || !kc || !ks)
        goto out;
    SW_CHECK_INT(s_tree_rows(mg, kg, got), 0);
    SW_CHECK_INT(s_tree_rows(mc, kc, ref), 0);
    cuda_cmp_t c = cuda_cmp_new(0);
    cuda_test_compare(&c, got, ref, S_TK, V);
    cuda_test_check_exact("gpu vs cpu: a 7-draft token tree", &c);
    /* Each row against its path as a sequence, on the GPU. */
    int bad = 0;
    float *row = ref; // reused: the CPU rows were compared
    for (int node = 1; node <= S_TK; node++) {
        int32_t toks[S_TK];
        const int n = s_path(node, toks);
        SW_CHECK_INT(sw_kv_truncate(ks, 0), 0);
        SW_CHECK_INT(cuda_test_fwd(mg, ks, s_tok, NULL, S_TP, NULL, row, 1, 1), 0);
        SW_CHECK_INT(cuda_test_fwd(mg, ks, toks, NULL, n, NULL, row, 1, 0), 0);
        bad += memcmp(row, got + (size_t)(node - 1) * V, (size_t)V * sizeof(float)) != 0;
    }
    cuda_test_row("gpu tree rows vs their paths as sequences", bad ? "DIFFERS" : "bit-identical");
    SW_CHECK_INT(bad, 0);
    /* Keep the path to node 7 (nodes 3 and 7: not the first branch) and go on. */
    {
        char err[256] = "";
        const int32_t slots[2] = {S_TP - 1 + 3, S_TP - 1 + 7};
        SW_CHECK_INT(sw_kv_keep(kg, S_TP, slots, 2, err, sizeof err), 0);
        SW_CHECK_INT(sw_kv_len(kg), S_TP + 2);
        const int32_t next = s_tok[S_TP + S_TK];
        SW_CHECK_INT(cuda_test_fwd(mg, kg, &next, NULL, 1, NULL, got, 1, 0), 0);
        int32_t toks[S_TK + 1];
        const int n = s_path(7, toks);
        toks[n] = next;
        SW_CHECK_INT(sw_kv_truncate(ks, 0), 0);
        SW_CHECK_INT(cuda_test_fwd(mg, ks, s_tok, NULL, S_TP, NULL, row, 1, 1), 0);
        SW_CHECK_INT(cuda_test_fwd(mg, ks, toks, NULL, n + 1, NULL, row, 1, 0), 0);
        const int same = !memcmp(row, got, (size_t)V * sizeof(float));
        cuda_test_row("gpu kept tree path (kv_move) + 1 row vs the sequence",
                      same ? "bit-identical" : "DIFFERS");
        SW_CHECK(same);
    }
out:
    sw_kv_free(&kg);
    sw_kv_free(&kc);
    sw_kv_free(&ks);
}

/* A tree of 71 drafts after a prefix of S_TP: a decoy under the last prefix
 * row, then a chain of 70 under it too; keeping the chain moves 70 slots
 * (two kv_move kernels of at most 64 moves each), and the next row must equal
 * the sequence's. */
static void s_many_moves(sw_model_t *mg, int V, float *ref, float *got)
{
    enum { CHAIN = 70, N = CHAIN + 1 };
    static int32_t par[N], toks[N], slots[CHAIN], seq[CHAIN + 1];
    sw_kv_t *kv = sw_kv_new(mg, 128), *ks = sw_kv_new(mg, 128);
    char err[256] = "";
    SW_CHECK(kv && ks);
    if (!kv || !ks)
        goto out;
    SW_CHECK_INT(cuda_test_fwd(mg, kv, s_tok, NULL, S_TP, NULL, got, 1, 1), 0);
    for (int i = 0; i < N; i++) {
        toks[i] = s_tok[(S_TP + i) % (T + 100)];
        par[i] = i <= 1 ? S_TP - 1 : S_TP + i - 1; // node i at slot S_TP + i
    }
    sw_forward_t f = {.n = N, .tokens = toks, .logits = got, .n_logits = 1, .parent = par};
    SW_CHECK_INT(sw_model_forward(mg, kv, &f, err, sizeof err), 0);
    for (int i = 0; i < CHAIN; i++) {
        slots[i] = S_TP + 1 + i;
        seq[i] = toks[1 + i];
    }
    SW_CHECK_INT(sw_kv_keep(kv, S_TP, slots, CHAIN, err, sizeof err), 0);
    seq[CHAIN] = s_tok[3];
    SW_CHECK_INT(cuda_test_fwd(mg, kv, &seq[CHAIN], NULL, 1, NULL, got, 1, 0), 0);
    SW_CHECK_INT(cuda_test_fwd(mg, ks, s_tok, NULL, S_TP, NULL, ref, 1, 1), 0);
    SW_CHECK_INT(cuda_test_fwd(mg, ks, seq, NULL, CHAIN + 1, NULL, ref, 1, 0), 0);
    const int same = !memcmp(got, ref, (size_t)V * sizeof(float));
    cuda_test_row("gpu kept tree path of 70 slots (2 kv_move kernels) + 1 row vs the sequence",
                  same ? "bit-identical" : "DIFFERS");
    SW_CHECK(same);
out:
    sw_kv_free(&kv);
    sw_kv_free(&ks);
}

/* Sessions: graphs shared by every session (defect 6 of issue 20), and shared batches. */
static void s_sessions(sw_model_t *mg, sw_model_t *mc, int V, float *ref, float *got)
{
    sw_backend_t *be = sw_model_backend(mg);
    enum { P = 6, STEPS = 4, NS = 3 };
    sw_kv_t *a = sw_kv_new(mg, 128), *b = sw_kv_new(mg, 128);
    SW_CHECK(a && b);
    if (!a || !b) {
        sw_kv_free(&a);
        sw_kv_free(&b);
        return;
    }
    /* Session a: a prompt, then decode steps (the step's graph is recorded on the second). */
    SW_CHECK_INT(cuda_test_fwd(mg, a, s_tok, NULL, P, NULL, got, 1, 1), 0);
    for (int i = 0; i < STEPS; i++)
        SW_CHECK_INT(cuda_test_fwd(mg, a, &s_tok[P + i], NULL, 1, NULL, got, 1, 0), 0);
    const cuda_paths_t p1 = cuda_test_paths(be);
    /* Session b, while a is open, then after a is closed: no new recording, and
     * its rows are the rows of a session run alone (ref: session a's tokens). */
    SW_CHECK_INT(cuda_test_fwd(mg, b, s_tok + 1, NULL, P, NULL, got, 1, 1), 0);
    for (int i = 0; i < STEPS; i++)
        SW_CHECK_INT(cuda_test_fwd(mg, b, &s_tok[P + 1 + i], NULL, 1, NULL, got, 1, 0), 0);
    sw_kv_free(&a);
    for (int i = 0; i < STEPS; i++)
        SW_CHECK_INT(cuda_test_fwd(mg, b, &s_tok[P + 1 + STEPS + i], NULL, 1, NULL,
                                   got + (size_t)i * V, 1, 0),
                     0);
    const cuda_paths_t p2 = cuda_test_paths(be);
    char r[160];
    snprintf(r, sizeof r, "%llu graphs recorded by session 1, %llu more by session 2 (want 0)",
             p1.recorded, p2.recorded - p1.recorded);
    cuda_test_row("one graph for every session", r);
    SW_CHECK(p1.recorded > 0);
    SW_CHECK(p2.recorded == p1.recorded);
    SW_CHECK(p2.replayed > p1.replayed);
    /* The same rows on the CPU (graphs must not change a bit). */
    sw_kv_t *kc = sw_kv_new(mc, 128);
    SW_CHECK(kc != NULL);
    if (kc) {
        SW_CHECK_INT(cuda_test_fwd(mc, kc, s_tok + 1, NULL, P, NULL, ref, 1, 1), 0);
        for (int i = 0; i < STEPS; i++)
            SW_CHECK_INT(cuda_test_fwd(mc, kc, &s_tok[P + 1 + i], NULL, 1, NULL, ref, 1, 0), 0);
        for (int i = 0; i < STEPS; i++)
            SW_CHECK_INT(cuda_test_fwd(mc, kc, &s_tok[P + 1 + STEPS + i], NULL, 1, NULL,
                                       ref + (size_t)i * V, 1, 0),
                         0);
        cuda_cmp_t c = cuda_cmp_new(0);
        cuda_test_compare(&c, got, ref, STEPS, V);
        cuda_test_check_exact("gpu vs cpu: a second session on the first one's graphs", &c);
    }
    sw_kv_free(&kc);
    sw_kv_free(&b);

    /* NS sessions in one shared batch: each one's rows equal the session alone. */
    sw_kv_t *kv[NS] = {0}, *alone = sw_kv_new(mg, 128);
    int ok = alone != NULL;
    for (int s = 0; s < NS; s++) {
        kv[s] = sw_kv_new(mg, 128);
        ok = ok && kv[s] &&
             cuda_test_fwd(mg, kv[s], s_tok + 5 * s, NULL, P + s, NULL, got, 1, 1) == 0;
    }
    SW_CHECK(ok);
    int bad = 0;
    for (int step = 0; ok && step < 2; step++) {
        sw_forward_t fs[NS];
        int32_t toks[NS][3];
        for (int s = 0; s < NS; s++) {
            const int n = 1 + (s + step) % 3; // 1..3 rows: decode and verification rows
            for (int i = 0; i < n; i++)
                toks[s][i] = s_tok[40 + 7 * s + 3 * step + i];
            memset(&fs[s], 0, sizeof fs[s]);
            fs[s].n = n;
            fs[s].tokens = toks[s];
            fs[s].logits = got + (size_t)s * 3 * V;
            fs[s].n_logits = n;
        }
        char err[256] = "";
        SW_CHECK_INT(sw_model_forward_batch(mg, kv, fs, NS, err, sizeof err), 0);
        for (int s = 0; s < NS; s++) {
            /* The session alone: its prompt, its earlier steps, then this step. */
            SW_CHECK_INT(sw_kv_truncate(alone, 0), 0);
            SW_CHECK_INT(cuda_test_fwd(mg, alone, s_tok + 5 * s, NULL, P + s, NULL, ref, 1, 1), 0);
            for (int st = 0; st <= step; st++) {
                const int n = 1 + (s + st) % 3;
                int32_t t[3];
                for (int i = 0; i < n; i++)
                    t[i] = s_tok[40 + 7 * s + 3 * st + i];
                SW_CHECK_INT(cuda_test_fwd(mg, alone, t, NULL, n, NULL, ref, n, 0), 0);
            }
            bad += memcmp(ref, got + (size_t)s * 3 * V, (size_t)fs[s].n * V * sizeof(float)) != 0;
        }
    }
    cuda_test_row("gpu: 3 sessions in shared batches vs each alone",
                  bad ? "DIFFERS" : "bit-identical");
    SW_CHECK_INT(bad, 0);
    for (int s = 0; s < NS; s++)
        sw_kv_free(&kv[s]);
    sw_kv_free(&alone);
}

/* A 150-row prompt (exact kernels: SW_CUDA_GEMM=off: two tiles of 128 cache
 * slots), then decode rows, with attention one row per pass
 * (SW_CUDA_ATTN_MIB=0) against the default and the CPU. */
static void s_long_context(const char *path, sw_model_t *mc, int V)
{
    enum { N = 150, D = 4 };
    static int32_t toks[N + D];
    for (int i = 0; i < N + D; i++)
        toks[i] = s_tok[i % (T + 100)];
    float *l[3];
    const char *env[3] = {"SW_CUDA_ATTN_MIB=256", "SW_CUDA_ATTN_MIB=0", NULL};
    for (int k = 0; k < 3; k++) {
        l[k] = malloc((size_t)(1 + D) * V * sizeof(float));
        if (!l[k])
            return;
        setenv("SW_CUDA_GEMM", "off", 1);
        if (env[k])
            putenv((char *)env[k]);
        sw_backend_t *be = k < 2 ? cuda_test_backend("cuda:0") : NULL;
        unsetenv("SW_CUDA_GEMM");
        unsetenv("SW_CUDA_ATTN_MIB");
        sw_model_t *m = k < 2 ? cuda_test_load(path, be, 0, -1) : mc;
        sw_kv_t *kv = m ? sw_kv_new(m, 320) : NULL;
        int ok = kv && cuda_test_fwd(m, kv, toks, NULL, N, NULL, l[k], 1, 1) == 0;
        for (int i = 0; ok && i < D; i++)
            ok = cuda_test_fwd(m, kv, &toks[N + i], NULL, 1, NULL, l[k] + (size_t)(1 + i) * V, 1,
                               0) == 0;
        SW_CHECK(ok);
        sw_kv_free(&kv);
        if (k < 2) {
            sw_model_free(&m);
            sw_backend_free(&be);
        }
    }
    const int same = !memcmp(l[0], l[1], (size_t)(1 + D) * V * sizeof(float));
    cuda_test_row("gpu: 150-row prompt + 4 rows, attention 1 row per pass vs all rows",
                  same ? "bit-identical" : "DIFFERS");
    SW_CHECK(same);
    cuda_cmp_t c = cuda_cmp_new(0);
    cuda_test_compare(&c, l[1], l[2], 1 + D, V);
    cuda_test_check_exact("gpu vs cpu: 150-row prompt (exact kernels) + 4 rows", &c);
    for (int k = 0; k < 3; k++)
        free(l[k]);
}

/* A CUDA call that fails is reported by that call, once: the next operation
 * works (defect 4 of issue 20). The failures are injected by the emulation. */
static void s_failed_calls(const char *path, sw_model_t *mg, int V, float *ref, float *got)
{
#ifdef SW_CUDA_EMU
    sw_backend_t *be = sw_model_backend(mg);
    char err[256] = "";
    /* A weight that cannot be copied: the load fails and says why. */
    swemu_fail("cudaMemcpy", 3, 2 /* cudaErrorMemoryAllocation */);
    sw_model_t *m2 = sw_model_load(path, 0, -1, be, err, sizeof err);
    SW_CHECK(m2 == NULL);
    SW_CHECK(strstr(err, "copying a weight") != NULL);
    sw_model_free(&m2);
    /* A download whose synchronisation fails: that forward fails. */
    sw_kv_t *kv = sw_kv_new(mg, 64);
    SW_CHECK(kv != NULL);
    if (!kv)
        return;
    SW_CHECK_INT(cuda_test_fwd(mg, kv, s_tok, NULL, 4, NULL, ref, 1, 1), 0);
    /* an error a GPU recovers from (701: too many resources requested); a
     * fatal one (700) fails every later call: test_cuda_fatal */
    swemu_fail("cudaStreamSynchronize", 0, 701 /* cudaErrorLaunchOutOfResources */);
    sw_forward_t f = {.n = 1, .tokens = &s_tok[4], .logits = got, .n_logits = 1};
    SW_CHECK(sw_model_forward(mg, kv, &f, err, sizeof err) != 0);
    /* The next operations work and compute what they should. */
    SW_CHECK_INT(sw_kv_truncate(kv, 4), 0);
    const int ok = cuda_test_fwd(mg, kv, &s_tok[4], NULL, 1, NULL, got, 1, 0) == 0;
    SW_CHECK(ok);
    SW_CHECK_INT(sw_kv_truncate(kv, 4), 0);
    SW_CHECK_INT(cuda_test_fwd(mg, kv, &s_tok[4], NULL, 1, NULL, ref, 1, 0), 0);
    const int same = ok && !memcmp(got, ref, (size_t)V * sizeof(float));
    cuda_test_row("gpu after a failed copy and a failed synchronisation",
                  same ? "the next forward works" : "FAILS");
    SW_CHECK(same);
    sw_kv_free(&kv);
#else
    (void)path, (void)mg, (void)V, (void)ref, (void)got;
#endif
}

static void s_model(const char *path)
{
    cuda_test_row("model", path);
    sw_backend_t *cpu = cuda_test_backend("cpu"), *gpu = cuda_test_backend("cuda:0");
    sw_model_t *mc = cuda_test_load(path, cpu, 0, -1), *mg = cuda_test_load(path, gpu, 0, -1);
    SW_CHECK(mc && mg);
    if (!mc || !mg) {
        sw_model_free(&mc);
        sw_model_free(&mg);
        sw_backend_free(&cpu);
        sw_backend_free(&gpu);
        return;
    }
    SW_CHECK(sw_backend_mem_free(gpu) > 0); /* the node sizes --kv-mib from it */
    const sw_hparams_t *hp = sw_model_hparams(mc);
    const int V = hp->n_vocab, L = hp->n_layer, E = hp->n_embd;
    s_tokens(V);
    const size_t big = (size_t)(T + 100) * V;
    float *ref = malloc(big * sizeof(float)), *got = malloc(big * sizeof(float));
    float *hid = malloc((size_t)(T + 100) * E * sizeof(float));
    if (!ref || !got || !hid) {
        SW_CHECK(!"out of memory");
        goto out;
    }
    if (L < 2) { /* the split checks below cut the model in two */
        fprintf(stderr,
                "test_cuda_model: %s has %d layer(s); SW_CUDA_TEST_MODELS takes models of 2 "
                "layers or more (the checks split them in two)\n",
                path, L);
        sw_test_failures++;
        goto out;
    }

    /* GPU against CPU: a 16-row prompt (exact kernels) then decode rows. */
    cuda_cmp_t c = cuda_cmp_new(0);
    SW_CHECK_INT(s_run(mc, 16, ref, V), 0);
    SW_CHECK_INT(s_run(mg, 16, got, V), 0);
    cuda_test_compare(&c, got, ref, T, V);
    cuda_test_check_exact("gpu vs cpu: 16-row prompt + 32 decode rows", &c);
    /* A 130-row prompt: chunks of more than 64 rows take the cuBLAS path. */
    c = cuda_cmp_new(1);
    sw_kv_t *kc = sw_kv_new(mc, 256), *kg = sw_kv_new(mg, 256);
    SW_CHECK(kc && kg);
    const cuda_paths_t p0 = cuda_test_paths(gpu);
    if (kc && kg) {
        SW_CHECK_INT(cuda_test_fwd(mc, kc, s_tok, NULL, 130, NULL, ref, 130, 1), 0);
        SW_CHECK_INT(cuda_test_fwd(mg, kg, s_tok, NULL, 130, NULL, got, 130, 1), 0);
        cuda_test_compare(&c, got, ref, 130, V);
        SW_CHECK_INT(cuda_test_fwd(mc, kc, &s_tok[130], NULL, 1, NULL, ref, 1, 0), 0);
        SW_CHECK_INT(cuda_test_fwd(mg, kg, &s_tok[130], NULL, 1, NULL, got, 1, 0), 0);
        cuda_test_compare(&c, got, ref, 1, V);
        cuda_test_check("gpu vs cpu: 130-row prompt (cuBLAS) + 1 row", &c);
    }
    cuda_test_paths_row("paths of the 130-row prompt", gpu, p0);
    if (cuda_test_paths(gpu).gemm == p0.gemm)
        sw_test_skip_part("the 130-row prompt did not run through cuBLAS (libcublas missing?)");
    sw_kv_free(&kc);
    sw_kv_free(&kg);

    /* Batch invariance on the GPU: rows [34 - b, 34) as one batch, b = 1..33. */
    {
        enum { N = 34 };
        sw_kv_t *kv = sw_kv_new(mg, 128);
        SW_CHECK(kv != NULL);
        int bad = 0;
        for (int i = 0; kv && i < N; i++)
            SW_CHECK_INT(cuda_test_fwd(mg, kv, &s_tok[i], NULL, 1, NULL, ref + (size_t)i * V, 1, 0),
                         0);
        for (int b = 1; kv && b <= N - 1; b++) {
            SW_CHECK_INT(sw_kv_truncate(kv, N - b), 0);
            SW_CHECK_INT(cuda_test_fwd(mg, kv, s_tok + N - b, NULL, b, NULL, got, b, 0), 0);
            if (memcmp(got, ref + (size_t)(N - b) * V, (size_t)b * V * sizeof(float)) != 0) {
                fprintf(stderr, "gpu: a batch of %d rows differs from single rows\n", b);
                bad++;
            }
        }
        cuda_test_row("gpu batch invariance, rows 1..33", bad ? "FAILED" : "bit-identical");
        SW_CHECK_INT(bad, 0);
        sw_kv_free(&kv);
    }

    /* The whole model on the GPU as the reference from here on. */
    SW_CHECK_INT(s_run(mg, 16, ref, V), 0);

    /* Split [0, L/2) + [L/2, L) on the GPU, f32 hidden states in between. */
    {
        sw_model_t *s0 = cuda_test_load(path, gpu, 0, L / 2),
                   *s1 = cuda_test_load(path, gpu, L / 2, L);
        sw_kv_t *k0 = s0 ? sw_kv_new(s0, 256) : NULL, *k1 = s1 ? sw_kv_new(s1, 256) : NULL;
        int ok = k0 && k1;
        ok = ok && cuda_test_fwd(s0, k0, s_tok, NULL, 16, hid, NULL, 0, 1) == 0 &&
             cuda_test_fwd(s1, k1, NULL, hid, 16, NULL, got, 16, 1) == 0;
        for (int i = 16; ok && i < T; i++)
            ok = cuda_test_fwd(s0, k0, &s_tok[i], NULL, 1, hid, NULL, 0, 0) == 0 &&
                 cuda_test_fwd(s1, k1, NULL, hid, 1, NULL, got + (size_t)i * V, 1, 0) == 0;
        SW_CHECK(ok);
        const int same = ok && !memcmp(got, ref, (size_t)T * V * sizeof(float));
        cuda_test_row("gpu split [0,L/2)+[L/2,L) vs whole gpu", same ? "bit-identical" : "DIFFERS");
        SW_CHECK(same);
        /* A GPU head and a CPU tail against the CPU. */
        sw_model_t *t1 = cuda_test_load(path, cpu, L / 2, L);
        sw_kv_t *kt = t1 ? sw_kv_new(t1, 256) : NULL;
        SW_CHECK_INT(sw_kv_truncate(k0, 0), 0);
        ok = kt && cuda_test_fwd(s0, k0, s_tok, NULL, 16, hid, NULL, 0, 1) == 0 &&
             cuda_test_fwd(t1, kt, NULL, hid, 16, NULL, got, 16, 1) == 0;
        for (int i = 16; ok && i < T; i++)
            ok = cuda_test_fwd(s0, k0, &s_tok[i], NULL, 1, hid, NULL, 0, 0) == 0 &&
                 cuda_test_fwd(t1, kt, NULL, hid, 1, NULL, got + (size_t)i * V, 1, 0) == 0;
        SW_CHECK(ok);
        float *cref = malloc((size_t)T * V * sizeof(float));
        if (cref && s_run(mc, 16, cref, V) == 0) {
            c = cuda_cmp_new(0);
            cuda_test_compare(&c, got, cref, T, V);
            cuda_test_check_exact("gpu head + cpu tail vs cpu", &c);
        }
        free(cref);
        sw_kv_free(&kt);
        sw_model_free(&t1);
        sw_kv_free(&k0);
        sw_kv_free(&k1);
        sw_model_free(&s0);
        sw_model_free(&s1);
    }

    /* Groups: two backends on one GPU, two GPUs (NCCL, then peer copies), GPU + CPU. */
    const int n_gpu = sw_cuda_device_count();
    cuda_test_one_gpu("groups cuda:0,1 with NCCL and with peer copies");
    const char *groups[] = {"cuda:0,0", n_gpu > 1 ? "cuda:0,1" : NULL,
                            n_gpu > 1 ? "cuda:0,1 nccl off" : NULL, "cuda:0,cpu"};
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        if (!groups[g])
            continue;
        char name[32];
        snprintf(name, sizeof name, "%s", groups[g]);
        char *space = strchr(name, ' ');
        if (space) {
            *space = 0;
            setenv("SW_NCCL", "0", 1);
        }
        sw_backend_t *gb = cuda_test_backend(name);
        unsetenv("SW_NCCL");
        sw_model_t *gm = cuda_test_load(path, gb, 0, -1);
        SW_CHECK(gm != NULL);
        const cuda_paths_t gp0 = cuda_test_paths(gb);
        if (gm && s_run(gm, 16, got, V) == 0) {
            if (!strcmp(groups[g], "cuda:0,1") || !strcmp(groups[g], "cuda:0,1 nccl off")) {
                char what[96];
                snprintf(what, sizeof what, "paths of group %s", groups[g]);
                cuda_test_paths_row(what, gb, gp0);
                const cuda_paths_t gp = cuda_test_paths(gb);
                if (space)
                    SW_CHECK(gp.peer > gp0.peer && gp.nccl == gp0.nccl);
                else if (gp.nccl == gp0.nccl)
                    sw_test_skip_part("cuda:0,1 handed over without NCCL (libnccl missing?)");
            }
            char what[96];
            snprintf(what, sizeof what, "group %s vs %s", groups[g],
                     strstr(name, "cpu") ? "cpu" : "one gpu");
            if (strstr(name, "cpu")) {
                float *cref = malloc((size_t)T * V * sizeof(float));
                if (cref && s_run(mc, 16, cref, V) == 0) {
                    c = cuda_cmp_new(0);
                    cuda_test_compare(&c, got, cref, T, V);
                    cuda_test_check_exact(what, &c);
                }
                free(cref);
            } else {
                const int same = !memcmp(got, ref, (size_t)T * V * sizeof(float));
                cuda_test_row(what, same ? "bit-identical" : "DIFFERS");
                SW_CHECK(same);
            }
        } else {
            SW_CHECK(!"group forward");
        }
        sw_model_free(&gm);
        sw_backend_free(&gb);
    }

    /* The greedy draft loop on the GPU. */
    {
        enum { STEPS = 16, FROM = 10 };
        int32_t ids[STEPS] = {0}, want[STEPS] = {0};
        float prob[STEPS] = {0};
        char err[256] = "";
        sw_kv_t *kv = sw_kv_new(mg, 128);
        SW_CHECK(kv != NULL);
        SW_CHECK_INT(cuda_test_fwd(mg, kv, s_tok, NULL, FROM, NULL, got, 1, 1), 0);
        for (int rep = 0; kv && rep < 3; rep++) { // recorded as a graph from the second call
            SW_CHECK_INT(sw_kv_truncate(kv, FROM), 0);
            SW_CHECK_INT(
                sw_model_greedy_steps(mg, kv, s_tok[FROM], STEPS, ids, prob, err, sizeof err), 0);
        }
        s_argmax_chain(mg, kv, FROM, STEPS, got, V, want);
        const int same = !memcmp(ids, want, sizeof ids);
        cuda_test_row("gpu greedy draft loop (graph) vs one-row forwards",
                      same ? "same" : "DIFFERS");
        SW_CHECK(same);
        for (int i = 0; i < STEPS; i++)
            SW_CHECK(prob[i] > 0 && prob[i] <= 1);
        sw_kv_free(&kv);
    }

    /* Forced left-to-right sums: the same bits. */
    {
        setenv("SW_CUDA_SEQ_SUMS", "1", 1);
        sw_backend_t *sb = cuda_test_backend("cuda:0");
        unsetenv("SW_CUDA_SEQ_SUMS");
        sw_model_t *sm = cuda_test_load(path, sb, 0, -1);
        const int same =
            sm && s_run(sm, 16, got, V) == 0 && !memcmp(got, ref, (size_t)T * V * sizeof(float));
        cuda_test_row("gpu with SW_CUDA_SEQ_SUMS=1 vs default", same ? "bit-identical" : "DIFFERS");
        SW_CHECK(same);
        sw_model_free(&sm);
        sw_backend_free(&sb);
    }

    s_tree(mg, mc, V, ref, got);
    s_many_moves(mg, V, ref, got);
    s_sessions(mg, mc, V, ref, got);
    s_long_context(path, mc, V);
    s_failed_calls(path, mg, V, ref, got);

    /* Bad input on the GPU: clean errors, the cache unchanged. */
    {
        char err[256] = "";
        sw_kv_t *kv = sw_kv_new(mg, 8);
        int32_t bad = V;
        sw_forward_t f = {.n = 1, .tokens = &bad, .logits = got, .n_logits = 1};
        SW_CHECK(kv && sw_model_forward(mg, kv, &f, err, sizeof err) != 0);
        SW_CHECK(strstr(err, "outside the vocabulary") != NULL);
        f.tokens = s_tok;
        f.n = 9;
        SW_CHECK(kv && sw_model_forward(mg, kv, &f, err, sizeof err) != 0);
        SW_CHECK(kv && sw_kv_len(kv) == 0);
        sw_kv_free(&kv);
        /* A cache far larger than the GPU: NULL, not a crash. */
        sw_kv_t *huge = sw_kv_new(mg, 1 << 30);
        SW_CHECK(huge == NULL);
        sw_kv_free(&huge);
    }

out:
    free(ref);
    free(got);
    free(hid);
    sw_model_free(&mc);
    sw_model_free(&mg);
    sw_backend_free(&cpu);
    sw_backend_free(&gpu);
}

/* Greedy steps whose logits hold a NaN fail with a message on the GPU as on
 * the CPU, instead of returning ids of -1 (defect 2 of issue 20): logit V-1
 * of the model is NaN for every input. 1 when the model allowed it. */
static int s_nan_greedy(const char *path)
{
    char out[600], err[256] = "";
    snprintf(out, sizeof out, "%s/nan.gguf", sw_test_tmpdir());
    sw_backend_t *cpu = cuda_test_backend("cpu");
    sw_model_t *mc = cuda_test_load(path, cpu, 0, -1);
    const int64_t V = mc ? sw_model_hparams(mc)->n_vocab : 0;
    sw_model_free(&mc);
    sw_backend_free(&cpu);
    if (V < 2 || cuda_test_nan_model(path, out, V - 1) != 0)
        return 0;
    const char *names[2] = {"cuda:0", "cpu"};
    for (int i = 0; i < 2; i++) {
        sw_backend_t *be = cuda_test_backend(names[i]);
        sw_model_t *m = cuda_test_load(out, be, 0, -1);
        sw_kv_t *kv = m ? sw_kv_new(m, 64) : NULL;
        float *l = malloc((size_t)V * sizeof(float));
        SW_CHECK(kv && l && cuda_test_fwd(m, kv, s_tok, NULL, 4, NULL, l, 1, 1) == 0);
        SW_CHECK(l && isnan(l[V - 1])); // the model is what the test needs
        int32_t ids[4] = {0, 0, 0, 0};
        const int rc =
            kv ? sw_model_greedy_steps(m, kv, s_tok[4], 4, ids, NULL, err, sizeof err) : 0;
        char what[96];
        snprintf(what, sizeof what, "greedy steps on %s with a NaN logit", names[i]);
        cuda_test_row(what, rc != 0 ? err : "NO ERROR");
        SW_CHECK(rc != 0);
        SW_CHECK(kv && sw_kv_len(kv) == 4); // the cache as it was
        free(l);
        sw_kv_free(&kv);
        sw_model_free(&m);
        sw_backend_free(&be);
    }
    return 1;
}

/* A model of the families of issue 24 (Gemma 3, Qwen3-MoE) on the GPU against the CPU. */
static void s_arch_model(const char *path)
{
    cuda_test_row("model (issue 24's families)", path);
    sw_backend_t *cpu = cuda_test_backend("cpu"), *gpu = cuda_test_backend("cuda:0");
    sw_model_t *mc = cuda_test_load(path, cpu, 0, -1), *mg = cuda_test_load(path, gpu, 0, -1);
    SW_CHECK(mc && mg);
    const int V = mc ? (int)sw_model_hparams(mc)->n_vocab : 0;
    float *ref = V ? malloc((size_t)T * V * sizeof(float)) : NULL;
    float *got = V ? malloc((size_t)T * V * sizeof(float)) : NULL;
    sw_kv_t *kc = mc ? sw_kv_new(mc, 128) : NULL, *kg = mg ? sw_kv_new(mg, 128) : NULL;
    SW_CHECK(ref && got && kc && kg);
    if (!ref || !got || !kc || !kg)
        goto out;
    s_tokens(V);
    /* 20 prompt rows, 5 verification rows, then single rows to T. */
    sw_model_t *ms[2] = {mc, mg};
    sw_kv_t *ks[2] = {kc, kg};
    float *outs[2] = {ref, got};
    for (int b = 0; b < 2; b++) {
        int ok = cuda_test_fwd(ms[b], ks[b], s_tok, NULL, 20, NULL, outs[b], 20, 1) == 0 &&
                 cuda_test_fwd(ms[b], ks[b], s_tok + 20, NULL, 5, NULL, outs[b] + (size_t)20 * V, 5,
                               0) == 0;
        for (int i = 25; ok && i < T; i++)
            ok = cuda_test_fwd(ms[b], ks[b], &s_tok[i], NULL, 1, NULL, outs[b] + (size_t)i * V, 1,
                               0) == 0;
        SW_CHECK(ok);
    }
    cuda_cmp_t c = cuda_cmp_new(0);
    cuda_test_compare(&c, got, ref, T, V);
    cuda_test_check_exact("gpu vs cpu: 20-row prompt + 5 verification rows + 23 single rows", &c);
    /* A prompt whose last row alone wants logits. */
    SW_CHECK_INT(sw_kv_truncate(kc, 0), 0);
    SW_CHECK_INT(sw_kv_truncate(kg, 0), 0);
    SW_CHECK_INT(cuda_test_fwd(mc, kc, s_tok + 3, NULL, 20, NULL, ref, 1, 1), 0);
    SW_CHECK_INT(cuda_test_fwd(mg, kg, s_tok + 3, NULL, 20, NULL, got, 1, 1), 0);
    c = cuda_cmp_new(0);
    cuda_test_compare(&c, got, ref, 1, V);
    cuda_test_check_exact("gpu vs cpu: 20-row prompt, the last row's logits", &c);

    /* The whole sequence on one GPU as the reference; the group must equal it. */
    SW_CHECK_INT(s_run(mg, 16, ref, V), 0);
    const char *group = sw_cuda_device_count() > 1 ? "cuda:0,1" : "cuda:0,0";
    cuda_test_one_gpu("the model over cuda:0,1");
    sw_backend_t *gb = cuda_test_backend(group);
    sw_model_t *gm = cuda_test_load(path, gb, 0, -1);
    const int same =
        gm && s_run(gm, 16, got, V) == 0 && !memcmp(got, ref, (size_t)T * V * sizeof(float));
    char what[96];
    snprintf(what, sizeof what, "group %s vs one gpu", group);
    cuda_test_row(what, same ? "bit-identical" : "DIFFERS");
    SW_CHECK(same);
    sw_model_free(&gm);
    sw_backend_free(&gb);

    /* The greedy draft loop (a recorded graph from the second call). */
    {
        enum { STEPS = 8, FROM = 10 };
        int32_t ids[STEPS] = {0}, want[STEPS] = {0};
        char err[256] = "";
        SW_CHECK_INT(sw_kv_truncate(kg, 0), 0);
        SW_CHECK_INT(cuda_test_fwd(mg, kg, s_tok, NULL, FROM, NULL, got, 1, 1), 0);
        for (int rep = 0; rep < 2; rep++) {
            SW_CHECK_INT(sw_kv_truncate(kg, FROM), 0);
            SW_CHECK_INT(
                sw_model_greedy_steps(mg, kg, s_tok[FROM], STEPS, ids, NULL, err, sizeof err), 0);
        }
        s_argmax_chain(mg, kg, FROM, STEPS, got, V, want);
        const int eq = !memcmp(ids, want, sizeof ids);
        cuda_test_row("gpu greedy draft loop (graph) vs one-row forwards", eq ? "same" : "DIFFERS");
        SW_CHECK(eq);
    }
out:
    free(ref);
    free(got);
    sw_kv_free(&kc);
    sw_kv_free(&kg);
    sw_model_free(&mc);
    sw_model_free(&mg);
    sw_backend_free(&cpu);
    sw_backend_free(&gpu);
}

/* Destroying a backend that ran no long prompt must not load cuBLAS (defect 5 of issue 20). */
static void s_no_cublas(const char *path)
{
    SW_CHECK(!cuda_test_mapped("cublas"));
    sw_backend_t *be = cuda_test_backend("cuda:0");
    sw_model_t *m = cuda_test_load(path, be, 0, -1);
    sw_kv_t *kv = m ? sw_kv_new(m, 32) : NULL;
    float *l = m ? malloc((size_t)sw_model_hparams(m)->n_vocab * sizeof(float)) : NULL;
    s_tokens(m ? sw_model_hparams(m)->n_vocab : 2);
    SW_CHECK(kv && l && cuda_test_fwd(m, kv, s_tok, NULL, 4, NULL, l, 1, 1) == 0);
    free(l);
    sw_kv_free(&kv);
    sw_model_free(&m);
    sw_backend_free(&be);
    const int loaded = cuda_test_mapped("cublas");
    cuda_test_row("a backend without long prompts, destroyed",
                  loaded ? "LOADED cuBLAS" : "cuBLAS never loaded");
    SW_CHECK(!loaded);
}

int main(void)
{
    cuda_test_require_gpu();
    char paths[8][512];
    const int n = cuda_test_models(paths, 8);
    s_no_cublas(paths[0]);
    int nan = 0;
    for (int i = 0; i < n; i++) {
        s_model(paths[i]);
        nan += s_nan_greedy(paths[i]);
    }
    if (!nan)
        sw_test_skip_part("no model with an untied quantized output: NaN logits in greedy steps "
                          "were not tried");
    const char *arch = getenv("SW_CUDA_ARCH_MODELS");
    if (arch && *arch) {
        setenv("SW_CUDA_TEST_MODELS", arch, 1);
        const int na = cuda_test_models(paths, 8);
        for (int i = 0; i < na; i++)
            s_arch_model(paths[i]);
    } else {
        sw_test_skip_part("SW_CUDA_ARCH_MODELS unset: Gemma 3 and Qwen3-MoE were not tried");
    }
    return sw_test_done();
}
