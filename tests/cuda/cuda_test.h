/*
 * cuda_test.h - what the GPU tests share: skipping cleanly without a GPU,
 * the models to run on, and the comparison of GPU logits with the CPU's.
 *
 * Models: SW_CUDA_TEST_MODELS (paths separated by ':'; scripts/gpu_check.sh
 * makes them with shardwire-mkmodel), else the default test model.
 *
 * The rule for GPU against CPU (issue 11): greedy tokens must be equal except
 * where the CPU's top-2 logit margin at the first differing position is below
 * S_MARGIN; logits must agree within S_LOGIT_TOL of the row's largest
 * magnitude. The CUDA kernels reproduce the CPU's arithmetic (quant_math.h,
 * op_math.h), so the expected difference is zero and these bounds only say
 * how far a future change may go before the test fails; the tests print
 * whether rows were bit-identical. The cuBLAS prompt path is not exact: it
 * rounds weights and activations to f16 (relative 2^-11) before a 1536- to
 * 8960-term dot product, in every layer of the prefill, and the rows after
 * it attend to that prefill; it has its own bounds (S_GEMM_*).
 */
#ifndef SW_CUDA_TEST_H
#define SW_CUDA_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model.h"
#include "sw_test.h"

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
    SW_CHECK(c->max_rel <= c->tol);
    SW_CHECK_INT(c->argmax_bad, 0);
}

#endif
