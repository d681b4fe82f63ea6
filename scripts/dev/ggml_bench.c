/*
 * ggml_bench.c - developer check, not part of the build: times GGML's
 * ggml_mul_mat (GGML's own threadpool, activation quantization included)
 * against sw_quantize_row + sw_matmul on SmolLM2-135M-sized matrices, and
 * checks that both give the same bits. Built and run by scripts/dev/ggml_bits.sh
 * when SW_GGML_BENCH=1.   ggml_bench [threads]
 */
#include "ggml-cpu.h"
#include "ggml.h"
#include "quant.h"
#include "threadpool.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
static double tcpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
struct job {
    enum sw_type t;
    int64_t n, rows;
    const uint8_t *w;
    size_t ws;
    const float *xf;
    uint8_t *xq;
    size_t xs;
    int nr;
    float *y;
};
static void body(void *ctx, int ith, int nth)
{
    struct job *j = ctx;
    /* quantize activations (split rows), like ggml does inside mul_mat */
    for (int r = ith; r < j->nr; r += nth)
        if (sw_quantize_row(sw_type_vec_dot(j->t), j->xf + r * j->n, j->xq + r * j->xs, j->n))
            abort();
}
static void body2(void *ctx, int ith, int nth)
{
    struct job *j = ctx;
    int64_t per = ((j->rows + nth - 1) / nth + 3) & ~3LL, o0 = per * ith,
            o1 = o0 + per < j->rows ? o0 + per : j->rows;
    if (o0 < o1)
        sw_matmul(j->t, j->n, j->w, j->ws, o0, o1, j->xq, j->xs, j->nr, j->y, j->rows);
}
int main(int argc, char **argv)
{
    int nth = argc > 1 ? atoi(argv[1]) : 1;
    double mins = 0.3;
    ggml_cpu_init();
    const enum sw_type types[] = {SW_TYPE_Q4_1, SW_TYPE_Q8_0};
    const int64_t shapes[][2] = {{576, 576}, {1536, 576}, {576, 1536}, {49152, 576}};
    const int nrs[] = {1, 2, 4, 9, 17, 64};
    sw_pool_t *pool = sw_pool_new(nth);
    struct ggml_threadpool_params tpp = ggml_threadpool_params_default(nth);
    struct ggml_threadpool *tp = ggml_threadpool_new(&tpp);
    printf(
        "threads=%d  times: best of 5 batches, us per call (incl. activation quantization); %s\n",
        nth, nth == 1 ? "thread CPU time" : "wall");
    printf("%-5s %6s %5s %3s %10s %10s %7s\n", "type", "rows", "n", "nr", "ggml us", "sw us",
           "speedup");
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t si = 0; si < 4; si++) {
            enum sw_type t = types[ti];
            int64_t rows = shapes[si][0], n = shapes[si][1];
            struct ggml_init_params ip = {(size_t)1 << 30, NULL, false};
            struct ggml_context *ctx = ggml_init(ip);
            struct ggml_tensor *W = ggml_new_tensor_2d(ctx, (enum ggml_type)t, n, rows);
            float *f = malloc(n * 4);
            for (int64_t o = 0; o < rows; o++) {
                for (int64_t i = 0; i < n; i++)
                    f[i] = (float)rand() / RAND_MAX - 0.5f;
                if (sw_quantize_row(t, f, (char *)W->data + o * W->nb[1], n))
                    abort();
            }
            for (size_t ni = 0; ni < sizeof nrs / sizeof nrs[0]; ni++) {
                int nr = nrs[ni];
                struct ggml_tensor *X = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, nr);
                for (int64_t i = 0; i < n * nr; i++)
                    ((float *)X->data)[i] = (float)rand() / RAND_MAX - 0.5f;
                struct ggml_tensor *Y = ggml_mul_mat(ctx, W, X);
                struct ggml_cgraph *gf = ggml_new_graph(ctx);
                ggml_build_forward_expand(gf, Y);
                struct ggml_cplan cp = ggml_graph_plan(gf, nth, tp);
                cp.work_data = malloc(cp.work_size + 64);
                double best = 1e9;
                for (int b = 0; b < 5; b++) {
                    int it = 0;
                    double t0 = now(), c0 = tcpu(), t;
                    do {
                        ggml_graph_compute(gf, &cp);
                        it++;
                        t = now() - t0;
                    } while (t < mins / 5);
                    if (nth == 1)
                        t = tcpu() - c0;
                    if (t / it < best)
                        best = t / it;
                }
                uint64_t xs;
                if (sw_type_row_bytes(sw_type_vec_dot(t), n, &xs))
                    abort();
                struct job j = {t,
                                n,
                                rows,
                                (const uint8_t *)W->data,
                                W->nb[1],
                                (const float *)X->data,
                                malloc(xs * nr),
                                xs,
                                nr,
                                malloc(4 * rows * nr)};
                double best2 = 1e9;
                for (int b = 0; b < 5; b++) {
                    int it = 0;
                    double t0 = now(), c0 = tcpu(), tt;
                    do {
                        sw_pool_run(pool, body, &j);
                        sw_pool_run(pool, body2, &j);
                        it++;
                        tt = now() - t0;
                    } while (tt < mins / 5);
                    if (nth == 1)
                        tt = tcpu() - c0;
                    if (tt / it < best2)
                        best2 = tt / it;
                }
                /* check: same results */
                int bad = 0;
                for (int r = 0; r < nr; r++)
                    for (int64_t o = 0; o < rows; o++) {
                        float a = ((float *)Y->data)[r * rows + o], c = j.y[r * rows + o];
                        if (memcmp(&a, &c, 4))
                            bad++;
                    }
                printf("%-5s %6lld %5lld %3d %10.1f %10.1f %6.2fx%s\n", sw_type_name(t),
                       (long long)rows, (long long)n, nr, best * 1e6, best2 * 1e6, best / best2,
                       bad ? "  RESULTS DIFFER" : "  (bit-identical)");
                fflush(stdout);
                free(j.xq);
                free(j.y);
            }
            free(f);
            ggml_free(ctx);
        }
    return 0;
}
