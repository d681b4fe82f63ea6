/*
 * test_cuda_model.c - the CUDA backend against the CPU backend on real model
 * files, and the GPU's own invariances (label cuda; skips without a GPU):
 *
 *  - logits of decode rows, of a short prompt (the exact kernels) and of a
 *    long prompt (the cuBLAS path) within the rule of cuda_test.h, with the
 *    count of bit-identical rows printed;
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
 *  - bad input is refused with a message, and an impossible cache is NULL.
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
    cuda_test_check("gpu vs cpu: a 7-draft token tree", &c);
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

    /* GPU against CPU: a 16-row prompt (exact kernels) then decode rows. */
    cuda_cmp_t c = cuda_cmp_new(0);
    SW_CHECK_INT(s_run(mc, 16, ref, V), 0);
    SW_CHECK_INT(s_run(mg, 16, got, V), 0);
    cuda_test_compare(&c, got, ref, T, V);
    cuda_test_check("gpu vs cpu: 16-row prompt + 32 decode rows", &c);
    /* A 130-row prompt: chunks of more than 64 rows take the cuBLAS path. */
    c = cuda_cmp_new(1);
    sw_kv_t *kc = sw_kv_new(mc, 256), *kg = sw_kv_new(mg, 256);
    SW_CHECK(kc && kg);
    if (kc && kg) {
        SW_CHECK_INT(cuda_test_fwd(mc, kc, s_tok, NULL, 130, NULL, ref, 130, 1), 0);
        SW_CHECK_INT(cuda_test_fwd(mg, kg, s_tok, NULL, 130, NULL, got, 130, 1), 0);
        cuda_test_compare(&c, got, ref, 130, V);
        SW_CHECK_INT(cuda_test_fwd(mc, kc, &s_tok[130], NULL, 1, NULL, ref, 1, 0), 0);
        SW_CHECK_INT(cuda_test_fwd(mg, kg, &s_tok[130], NULL, 1, NULL, got, 1, 0), 0);
        cuda_test_compare(&c, got, ref, 1, V);
        cuda_test_check("gpu vs cpu: 130-row prompt (cuBLAS) + 1 row", &c);
    }
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
            cuda_test_check("gpu head + cpu tail vs cpu", &c);
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
        if (gm && s_run(gm, 16, got, V) == 0) {
            char what[96];
            snprintf(what, sizeof what, "group %s vs %s", groups[g],
                     strstr(name, "cpu") ? "cpu" : "one gpu");
            if (strstr(name, "cpu")) {
                float *cref = malloc((size_t)T * V * sizeof(float));
                if (cref && s_run(mc, 16, cref, V) == 0) {
                    c = cuda_cmp_new(0);
                    cuda_test_compare(&c, got, cref, T, V);
                    cuda_test_check(what, &c);
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
        SW_CHECK_INT(sw_kv_truncate(kv, FROM), 0);
        int32_t t = s_tok[FROM];
        for (int i = 0; kv && i < STEPS; i++) {
            SW_CHECK_INT(cuda_test_fwd(mg, kv, &t, NULL, 1, NULL, got, 1, 0), 0);
            int best = 0;
            for (int j = 1; j < V; j++)
                if (got[j] > got[best])
                    best = j;
            want[i] = t = best;
        }
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

int main(void)
{
    cuda_test_require_gpu();
    char paths[8][512];
    const int n = cuda_test_models(paths, 8);
    for (int i = 0; i < n; i++)
        s_model(paths[i]);
    return sw_test_done();
}
