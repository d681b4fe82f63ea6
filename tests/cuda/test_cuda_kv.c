/*
 * test_cuda_kv.c - KV caches that grow (engine/include/kv.h) on the CUDA
 * backend (label cuda; skips without a GPU; runs on the CPU emulation of the
 * CUDA runtime on one emulated GPU: the cache lives on cuda:0 alone, so
 * there is no two-GPU copy):
 *
 *  - a growing cache on the GPU gives the logits of a cache allocated whole,
 *    bit for bit, while it steps 256 -> 384 -> 512: a short prompt
 *    (the exact kernels), 9-row verification chunks, decode rows one at a
 *    time across the first step (recorded graphs, keyed by the cache's size:
 *    each size records its own and replays it) and a token tree across the
 *    second whose accepted path sw_kv_keep keeps (the GPU's kv_move after a
 *    step) - and the CPU's logits, bit for bit, for the same rows;
 *  - its steps go through the backend's copy2d kernel (V's rows get the new
 *    stride), and a second session of the same sizes records no graph;
 *  - the budget: a step that does not fit fails with the budget's message
 *    and leaves the cache as it was;
 *  - a q8_0 cache is refused on the GPU with one line.
 */
#include "cuda_test.h"

#define N_CTX 600

static int32_t s_tok[N_CTX];

/* The same call on (a, b) of model ma (a whole cache, b growing) and on the
 * CPU's cache c of model mc: 1 when a's and b's logits are the same bits
 * and the CPU's are too. */
static int s_same3(sw_model_t *ma, sw_kv_t *a, sw_kv_t *b, sw_model_t *mc, sw_kv_t *c,
                   sw_forward_t f, float *la, float *lb, float *lc, int V)
{
    char err[256] = "";
    sw_forward_t fa = f, fb = f, fc = f;
    fa.logits = la;
    fb.logits = lb;
    fc.logits = lc;
    if (sw_model_forward(ma, a, &fa, err, sizeof err) != 0 ||
        sw_model_forward(ma, b, &fb, err, sizeof err) != 0 ||
        sw_model_forward(mc, c, &fc, err, sizeof err) != 0) {
        fprintf(stderr, "forward: %s\n", err);
        return 0;
    }
    const size_t bytes = (size_t)f.n_logits * (size_t)V * sizeof(float);
    return !memcmp(la, lb, bytes) && !memcmp(la, lc, bytes);
}

/* Rows [from, to) in 9-row verification chunks (the last one shorter), each
 * compared as s_same3 does. */
static int s_chunks(sw_model_t *ma, sw_kv_t *a, sw_kv_t *b, sw_model_t *mc, sw_kv_t *c, int from,
                    int to, float *la, float *lb, float *lc, int V)
{
    int ok = 1;
    for (int i = from; ok && i < to; i += 9) {
        const int n = to - i < 9 ? to - i : 9;
        ok &= s_same3(ma, a, b, mc, c, (sw_forward_t){.n = n, .tokens = s_tok + i, .n_logits = n},
                      la, lb, lc, V);
    }
    return ok;
}

static void s_grow(const char *path)
{
    sw_backend_t *gpu = cuda_test_backend("cuda:0"), *cpu = cuda_test_backend("cpu");
    sw_model_t *mg = cuda_test_load(path, gpu, 0, -1), *mc = cuda_test_load(path, cpu, 0, -1);
    SW_CHECK(mg && mc);
    if (!mg || !mc)
        goto out;
    const int V = sw_model_hparams(mg)->n_vocab;
    uint32_t x = 4242;
    for (int i = 0; i < N_CTX; i++) {
        x = x * 1664525u + 1013904223u;
        s_tok[i] = (int32_t)((x >> 8) % (uint32_t)V);
    }
    float *la = malloc(16 * (size_t)V * sizeof(float)),
          *lb = malloc(16 * (size_t)V * sizeof(float));
    float *lc = malloc(16 * (size_t)V * sizeof(float));
    sw_kv_budget_t budget = {0};
    sw_kv_t *a = sw_kv_new(mg, N_CTX), *b = sw_kv_new_grow(mg, N_CTX, &budget);
    sw_kv_t *c = sw_kv_new(mc, N_CTX);
    SW_CHECK(la && lb && lc && a && b && c);
    if (!la || !lb || !lc || !a || !b || !c)
        goto done;
    int ok = 1;
    /* a 40-row prompt (exact kernels: under the cuBLAS threshold) */
    ok &= s_same3(mg, a, b, mc, c,
                  (sw_forward_t){.n = 40, .tokens = s_tok, .n_logits = 1, .prompt = 1}, la, lb, lc,
                  V);
    SW_CHECK_INT(sw_kv_allocated(b), 256);
    /* verification chunks up to 247, then decode rows one at a time across
     * 256 -> 384 (graphs per size) */
    ok &= s_chunks(mg, a, b, mc, c, 40, 247, la, lb, lc, V);
    cuda_paths_t p0 = cuda_test_paths(gpu);
    for (int i = 247; ok && i < 262; i++)
        ok &= s_same3(mg, a, b, mc, c, (sw_forward_t){.n = 1, .tokens = s_tok + i, .n_logits = 1},
                      la, lb, lc, V);
    cuda_paths_t p1 = cuda_test_paths(gpu);
    SW_CHECK_INT(sw_kv_allocated(b), 384);
    SW_CHECK(p1.recorded - p0.recorded >= 2); // one graph at least per cache size
    /* more chunks, one decode row, then a tree across 384 -> 512 */
    ok &= s_chunks(mg, a, b, mc, c, 262, 379, la, lb, lc, V);
    ok &= s_same3(mg, a, b, mc, c, (sw_forward_t){.n = 1, .tokens = s_tok + 379, .n_logits = 1}, la,
                  lb, lc, V);
    const int32_t par[8] = {379, 380, 381, 380, 383, 384, 385, 386}; // slots 380..387
    ok &= s_same3(mg, a, b, mc, c,
                  (sw_forward_t){.n = 8, .tokens = s_tok + 500, .n_logits = 8, .parent = par}, la,
                  lb, lc, V);
    SW_CHECK_INT(sw_kv_allocated(b), 512);
    char err[256] = "";
    const int32_t kept[5] = {383, 384, 385, 386, 387}; // the branch under slot 380
    SW_CHECK(sw_kv_keep(a, 381, kept, 5, err, sizeof err) == 0);
    SW_CHECK(sw_kv_keep(b, 381, kept, 5, err, sizeof err) == 0);
    SW_CHECK(sw_kv_keep(c, 381, kept, 5, err, sizeof err) == 0);
    for (int i = 550; ok && i < 560; i++)
        ok &= s_same3(mg, a, b, mc, c, (sw_forward_t){.n = 1, .tokens = s_tok + i, .n_logits = 1},
                      la, lb, lc, V);
    SW_CHECK(ok);
    char r[160];
    snprintf(r, sizeof r, "%s; %llu graphs recorded over 15 decode rows",
             ok ? "bit-identical to a whole cache and to the CPU" : "DIFFERENT",
             (unsigned long long)(p1.recorded - p0.recorded));
    cuda_test_row("a growing cache, 256 -> 512 positions", r);
    /* a second session of the same sizes records nothing */
    sw_kv_t *d = sw_kv_new_grow(mg, N_CTX, &budget);
    SW_CHECK(d && cuda_test_fwd(mg, d, s_tok, NULL, 40, NULL, la, 1, 1) == 0);
    for (int i = 40; d && i < 247; i += 9)
        SW_CHECK(cuda_test_fwd(mg, d, s_tok + i, NULL, 9, NULL, la, 1, 0) == 0);
    cuda_paths_t p2 = cuda_test_paths(gpu);
    for (int i = 247; d && i < 262; i++)
        SW_CHECK(cuda_test_fwd(mg, d, s_tok + i, NULL, 1, NULL, la, 1, 0) == 0);
    cuda_paths_t p3 = cuda_test_paths(gpu);
    SW_CHECK_INT(p3.recorded - p2.recorded, 0);
    /* a full budget: the step is refused, the cache as it was */
    budget.limit = budget.used;
    SW_CHECK(sw_kv_reserve(d, 400, err, sizeof err) != 0 && strstr(err, "KV cache memory is full"));
    SW_CHECK_INT(sw_kv_allocated(d), 384);
    SW_CHECK(cuda_test_fwd(mg, d, s_tok + 262, NULL, 1, NULL, la, 1, 0) == 0);
    sw_kv_free(&d);
    /* q8_0 is the CPU's alone */
    SW_CHECK(sw_model_set_kv_type(mg, SW_KV_Q8_0, err, sizeof err) != 0 &&
             strstr(err, "keeps an f16 KV cache only"));
    cuda_test_row("a q8_0 cache on the GPU", err);
done:
    sw_kv_free(&a);
    sw_kv_free(&b);
    sw_kv_free(&c);
    SW_CHECK_INT(budget.used, 0);
    free(la);
    free(lb);
    free(lc);
out:
    sw_model_free(&mg);
    sw_model_free(&mc);
    sw_backend_free(&gpu);
    sw_backend_free(&cpu);
}

int main(void)
{
    cuda_test_require_gpu();
    char paths[8][512];
    const int n = cuda_test_models(paths, 8);
    for (int i = 0; i < n; i++)
        s_grow(paths[i]);
    return sw_test_done();
}
