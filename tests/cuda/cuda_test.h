/*
 * cuda_test.h - what the GPU tests share: skipping cleanly without a GPU,
 * the models to run on, and the comparison of GPU logits with the CPU's.
 *
 * Models: SW_CUDA_TEST_MODELS (paths separated by ':'; scripts/gpu_check.sh
 * makes them with shardwire-mkmodel), else the default test model.
 *
 * What the docs claim is what the tests assert (docs/architecture.md, "The
 * CUDA backend"): the CUDA kernels reproduce the CPU's arithmetic
 * (quant_math.h, op_math.h), so rows computed by them are bit-identical to
 * the CPU's (cuda_test_check_exact). The cuBLAS prompt path is not exact: it
 * rounds weights and activations to f16 (relative 2^-11) before a 1536- to
 * 8960-term dot product, in every layer of the prefill, and the rows after
 * it attend to that prefill; its rows follow the margin rule (issue 11):
 * greedy tokens must be equal except where the CPU's top-2 logit margin is
 * below S_GEMM_MARGIN, logits within S_GEMM_LOGIT_TOL of the row's largest
 * magnitude (cuda_test_check). A NaN or an infinity in any logit fails
 * either way.
 */
#ifndef SW_CUDA_TEST_H
#define SW_CUDA_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gguf.h"
#include "model.h"
#include "sw_test.h"
#ifdef SW_HAVE_CUDA
#include "cuda/backend_cuda.h"
#endif
#ifdef SW_CUDA_EMU
#include "swemu.h"
#endif

/* A top-2 margin below this (in logits) lets the GPU pick the other token:
 * the cuBLAS prompt path's f16 rounding moves logits by up to about 1e-3 x
 * their magnitude (10-20 for these models), so 0.05 covers it with room. */
#define S_MARGIN 0.05
/* Largest |GPU - CPU| allowed, as a fraction of the row's largest |logit|. */
#define S_LOGIT_TOL 5e-3
/* The same for rows computed from a cuBLAS prefill: f16's 2^-11 relative
 * rounding summed over thousands of terms and tens of layers reaches a few
 * 1e-3 of the largest logit; a token may flip only where the top two are
 * within 0.5. */
#define S_GEMM_LOGIT_TOL 5e-2
#define S_GEMM_MARGIN 0.5

/* One row of the results table scripts/gpu_check.sh prints: "| what | result |". */
static inline void cuda_test_row(const char *what, const char *result)
{
    printf("| %s | %s |\n", what, result);
    fflush(stdout);
}

/* Skips the test (exit 77) unless this build has CUDA and a GPU is visible. */
static inline void cuda_test_require_gpu(void)
{
    if (sw_cuda_device_count() < 1)
        sw_test_skip("no GPU visible (or a build without CUDA)");
}

/* A part that needs two GPUs, on a machine with one: recorded as skipped
 * (scripts/gpu_check.sh, strict, then fails: a one-GPU check is not a
 * two-GPU one). On the emulation the *_2gpu copies run those parts, so the
 * one-GPU runs record nothing. */
static inline void cuda_test_one_gpu(const char *part)
{
#ifdef SW_CUDA_EMU
    (void)part;
#else
    if (sw_cuda_device_count() < 2) {
        char why[256];
        snprintf(why, sizeof why, "%s: one GPU visible (run on two)", part);
        sw_test_skip_part(why);
    }
#endif
}

/* The models to test: fills paths (at most max), returns the count (skips when none). */
static inline int cuda_test_models(char paths[][512], int max)
{
    const char *env = getenv("SW_CUDA_TEST_MODELS");
    int n = 0;
    if (env && *env) {
        const char *p = env;
        while (*p && n < max) {
            const char *colon = strchr(p, ':');
            size_t len = colon ? (size_t)(colon - p) : strlen(p);
            if (len > 0 && len < 512) {
                memcpy(paths[n], p, len);
                paths[n][len] = 0;
                n++;
            }
            if (!colon)
                break;
            p = colon + 1;
        }
    }
    if (n == 0) {
        snprintf(paths[0], 512, "%s", sw_test_model()); /* skips when absent */
        n = 1;
    }
    return n;
}

static inline sw_backend_t *cuda_test_backend(const char *name)
{
    char err[256] = "";
    sw_backend_t *be = sw_backend_new(name, 0, err, sizeof err);
    if (!be)
        fprintf(stderr, "backend %s: %s\n", name, err);
    return be;
}

static inline sw_model_t *cuda_test_load(const char *path, sw_backend_t *be, int a, int b)
{
    char err[256] = "";
    sw_model_t *m = be ? sw_model_load(path, a, b, be, err, sizeof err) : NULL;
    if (!m)
        fprintf(stderr, "load %s [%d, %d) on %s: %s\n", path, a, b, be ? sw_backend_name(be) : "?",
                err);
    return m;
}

/* One forward; 0 or -1 (printed). */
static inline int cuda_test_fwd(sw_model_t *m, sw_kv_t *kv, const int32_t *tok, const float *hid,
                                int n, float *out_hidden, float *logits, int n_logits, int prompt)
{
    char err[256] = "";
    sw_forward_t f = {.n = n,
                      .tokens = tok,
                      .hidden = hid,
                      .out_hidden = out_hidden,
                      .logits = logits,
                      .n_logits = n_logits,
                      .prompt = prompt};
    int rc = sw_model_forward(m, kv, &f, err, sizeof err);
    if (rc)
        fprintf(stderr, "forward: %s\n", err);
    return rc;
}

/* Comparison of rows of logits, GPU against CPU. */
typedef struct cuda_cmp {
    int rows;          // rows compared
    int exact;         // rows bit-identical
    int nonfinite;     // rows with a NaN or an infinity (GPU or CPU)
    double max_rel;    // largest |diff| / the row's largest |logit|
    int argmax_differ; // rows whose argmax differs
    int argmax_bad;    // of those, rows where the CPU's top-2 margin is >= margin
    double margin;     // the margin rule's threshold
    double tol;        // the logit tolerance
} cuda_cmp_t;

/* A comparison under the exact kernels' bounds, or the cuBLAS path's. */
static inline cuda_cmp_t cuda_cmp_new(int gemm)
{
    cuda_cmp_t c;
    memset(&c, 0, sizeof c);
    c.margin = gemm ? S_GEMM_MARGIN : S_MARGIN;
    c.tol = gemm ? S_GEMM_LOGIT_TOL : S_LOGIT_TOL;
    return c;
}

static inline void cuda_test_compare(cuda_cmp_t *c, const float *gpu, const float *cpu, int rows,
                                     int V)
{
    for (int r = 0; r < rows; r++) {
        const float *g = gpu + (size_t)r * V, *x = cpu + (size_t)r * V;
        c->rows++;
        c->exact += memcmp(g, x, (size_t)V * sizeof *g) == 0;
        int bad = 0;
        for (int i = 0; i < V; i++)
            bad |= !isfinite(g[i]) || !isfinite(x[i]);
        c->nonfinite += bad;
        double mag = 0, diff = 0;
        int ag = 0, ac = 0, second = -1;
        for (int i = 0; i < V; i++) {
            mag = fabs(x[i]) > mag ? fabs(x[i]) : mag;
            diff = fabs((double)g[i] - x[i]) > diff ? fabs((double)g[i] - x[i]) : diff;
            if (g[i] > g[ag])
                ag = i;
            if (x[i] > x[ac])
                ac = i;
        }
        for (int i = 0; i < V; i++)
            if (i != ac && (second < 0 || x[i] > x[second]))
                second = i;
        const double rel = diff / (mag > 0 ? mag : 1);
        c->max_rel = rel > c->max_rel ? rel : c->max_rel;
        if (ag != ac) {
            c->argmax_differ++;
            if (x[ac] - x[second] >= c->margin)
                c->argmax_bad++;
        }
    }
}

/* Fails the test when c breaks the rule; prints one line either way. */
static inline void cuda_test_check(const char *what, const cuda_cmp_t *c)
{
    char r[160];
    snprintf(r, sizeof r,
             "%d rows, %d bit-identical, max diff %.1e of max logit (bound %.0e), argmax differs "
             "in %d (%d with margin >= %.2f)",
             c->rows, c->exact, c->max_rel, c->tol, c->argmax_differ, c->argmax_bad, c->margin);
    cuda_test_row(what, r);
    SW_CHECK(c->rows > 0);
    SW_CHECK_INT(c->nonfinite, 0);
    SW_CHECK(c->max_rel <= c->tol);
    SW_CHECK_INT(c->argmax_bad, 0);
}

/* The same for rows of the exact kernels: every row bit-identical. */
static inline void cuda_test_check_exact(const char *what, const cuda_cmp_t *c)
{
    cuda_test_check(what, c);
    SW_CHECK_INT(c->exact, c->rows);
}

/* 1 when every value of the rows is finite. */
static inline int cuda_test_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return 0;
    return 1;
}

/* What the backend ran so far (zeros without CUDA). */
typedef struct cuda_paths {
    unsigned long long gemm, nccl, peer, recorded, replayed;
} cuda_paths_t;

static inline cuda_paths_t cuda_test_paths(sw_backend_t *be)
{
    cuda_paths_t p = {0, 0, 0, 0, 0};
#ifdef SW_HAVE_CUDA
    sw_cuda_paths_t q = {0, 0, 0, 0, 0};
    if (be)
        sw_cuda_paths(be, &q);
    p.gemm = q.gemm;
    p.nccl = q.nccl;
    p.peer = q.peer;
    p.recorded = q.recorded;
    p.replayed = q.replayed;
#else
    (void)be;
#endif
    return p;
}

/* One row of the table: which paths a backend took since `before`. */
static inline void cuda_test_paths_row(const char *what, sw_backend_t *be, cuda_paths_t before)
{
    const cuda_paths_t p = cuda_test_paths(be);
    char r[200];
    snprintf(r, sizeof r,
             "cuBLAS %llu weights, NCCL %llu hand-overs, peer copies %llu, graphs recorded %llu "
             "replayed %llu",
             p.gemm - before.gemm, p.nccl - before.nccl, p.peer - before.peer,
             p.recorded - before.recorded, p.replayed - before.replayed);
    cuda_test_row(what, r);
}

/* 1 when a library whose file name holds `name` (e.g. "cublas") is mapped into this process. */
static inline int cuda_test_mapped(const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r"); // its size reads as 0: line by line
    char line[1024];
    int found = 0, lines = 0;
    while (f && fgets(line, sizeof line, f)) {
        lines++;
        found |= strstr(line, name) != NULL;
    }
    if (f)
        fclose(f);
    SW_CHECK(lines > 0); // the check itself works
    return found;
}

/* A copy of the model at path (an untied output) whose logit `row` is NaN
 * for every input: the scales of that row of output.weight are NaN. 0, or
 * -1 when the model cannot be made so (tied output, or an output type whose
 * scale this does not know). A NaN elsewhere (an embedding row) would not
 * reach the logits: quantizing the activations turns it into zeros. */
static inline int cuda_test_nan_model(const char *path, const char *out, int64_t row)
{
    char err[256] = "";
    sw_gguf_t *g = sw_gguf_open(path, err, sizeof err);
    if (!g)
        return -1;
    const sw_gguf_tensor_t *o = sw_gguf_find_tensor(g, "output.weight");
    const enum sw_type t = o ? o->type : SW_TYPE_COUNT;
    const size_t d_at = t == SW_TYPE_Q6_K ? 208 : 0; // where the block's f16 scale is
    const int ok =
        o && row >= 0 && row < o->ne[1] &&
        (t == SW_TYPE_Q4_0 || t == SW_TYPE_Q4_1 || t == SW_TYPE_Q5_0 || t == SW_TYPE_Q5_1 ||
         t == SW_TYPE_Q8_0 || t == SW_TYPE_Q4_K || t == SW_TYPE_Q5_K || t == SW_TYPE_Q6_K);
    int rc = -1;
    if (ok) {
        const uint64_t size = sw_gguf_file_size(g);
        const size_t blk = sw_type_block_bytes(t);
        uint8_t *bytes = (uint8_t *)malloc(size);
        if (bytes) {
            memcpy(bytes, sw_gguf_bytes(g), size);
            const size_t off =
                (size_t)((const uint8_t *)o->data - (const uint8_t *)sw_gguf_bytes(g));
            const size_t rb = (size_t)(o->n_bytes / (uint64_t)o->ne[1]);
            for (size_t b = 0; b < rb; b += blk) { // f16 0x7e00: a NaN
                bytes[off + (size_t)row * rb + b + d_at] = 0x00;
                bytes[off + (size_t)row * rb + b + d_at + 1] = 0x7e;
            }
            FILE *f = fopen(out, "wb");
            rc = f && fwrite(bytes, 1, size, f) == size ? 0 : -1;
            if (f && fclose(f) != 0)
                rc = -1;
            free(bytes);
        }
    }
    sw_gguf_close(&g);
    return rc;
}

#endif
