/*
 * bench_quant.c - times sw_matmul for decode (nr = 1) and verification /
 * prefill batches. Two sets of matrices: "smol" (SmolLM2-135M-sized, Q4_1 and
 * Q8_0 weights, 1 and 2 threads, next to a plain sw_vec_dot loop and the
 * machine's memcpy bandwidth) and "qwen" (Qwen2.5-Coder-1.5B Q4_K_M-shaped
 * Q4_K/Q6_K matrices plus the 0.5B drafter's Q5_0/Q8_0 and IQ4_NL, with each batch's
 * time as a multiple of the nr = 1 time). Not a test: prints a table.
 *
 * A third set, "tiled", times sw_matmul_tiled (prompt windows of K-quant
 * weights) at each kernel level from AVX2 up on the 1.5B's matrices,
 * sw_matmul_sgemm (iq4_nl's prompt order) on the 0.5B's iq4_nl matrices, and
 * the q8_0 and q4_0 prompt matmul (sw_matmul: their prompt order is
 * generation's) on the 1.5B's shapes.
 *
 *   bench_quant [min_seconds_per_case [smol|qwen|tiled|all [threads [type]]]]
 *   (defaults: 0.15, all, 1, every type; type is a name like q4_K; "all" is
 *   smol and qwen)
 */
#include "quant.h"
#include "threadpool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct job {
    enum sw_type t;   // weight type
    int64_t n;        // row length (elements)
    int64_t rows;     // output rows
    const uint8_t *w; // rows x w_stride bytes
    size_t w_stride;  // bytes per weight row
    const uint8_t *x; // nr x x_stride bytes
    size_t x_stride;  // bytes per activation row
    int nr;           // activation rows
    float *y;         // nr x rows
    int plain;        // 1: sw_vec_dot loop instead of sw_matmul
    int tiled;        // 1: sw_matmul_tiled (the prompt windows' K-quant order), 2: sgemm
};

static void s_body(void *ctx, int ith, int nth)
{
    struct job *j = ctx;
    // split the output rows in multiples of 4 so that tiles stay whole
    int64_t per = ((j->rows + nth - 1) / nth + 3) & ~(int64_t)3;
    int64_t o0 = per * ith, o1 = o0 + per < j->rows ? o0 + per : j->rows;
    if (o0 >= o1)
        return;
    if (j->plain) {
        for (int r = 0; r < j->nr; r++)
            for (int64_t o = o0; o < o1; o++)
                sw_vec_dot(j->t, j->n, &j->y[r * j->rows + o], j->w + o * j->w_stride,
                           j->x + r * j->x_stride);
    } else {
        (j->tiled == 2 ? sw_matmul_sgemm
         : j->tiled    ? sw_matmul_tiled
                       : sw_matmul)(j->t, j->n, j->w, j->w_stride, o0, o1, j->x, j->x_stride, j->nr,
                                 j->y, j->rows);
    }
}

static double s_thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Seconds per call, the best of 7 batches, each at least min_s / 7 long. The
 * machine may be shared with other jobs: on one thread the calling thread's
 * CPU time is measured (time slices taken by others do not count); on more
 * threads the wall clock (the best batch is the least disturbed one). */
static double s_time(sw_pool_t *pool, struct job *j, double min_s)
{
    const int cpu = sw_pool_size(pool) == 1;
    sw_pool_run(pool, s_body, j); // warm-up
    double best = 1e30;
    for (int batch = 0; batch < 7; batch++) {
        int iters = 0;
        double t0 = s_now(), c0 = s_thread_cpu(), t;
        do {
            sw_pool_run(pool, s_body, j);
            iters++;
            t = s_now() - t0;
        } while (t < min_s / 7);
        if (cpu)
            t = s_thread_cpu() - c0;
        best = t / iters < best ? t / iters : best;
    }
    return best;
}

static double s_memcpy_gbs(double min_s)
{
    const size_t sz = (size_t)256 << 20;
    char *a = malloc(sz), *b = malloc(sz);
    if (a == NULL || b == NULL) {
        free(a);
        free(b);
        return 0.0;
    }
    memset(a, 1, sz);
    memset(b, 2, sz);
    int iters = 0;
    double t0 = s_now(), t;
    do {
        memcpy(iters & 1 ? a : b, iters & 1 ? b : a, sz);
        iters++;
        t = s_now() - t0;
    } while (t < min_s || iters < 2);
    free(a);
    free(b);
    return (double)sz * iters / t / 1e9; // bytes copied per second (reads; writes as many)
}

/* Random bytes for a row of a type sw_quantize_row cannot write (the
 * K-quants, q5_0), with small finite f16 scales; 0 or -1. */
static int s_random_blocks(enum sw_type t, uint8_t *row, int64_t n)
{
    uint64_t bytes;
    if (sw_type_row_bytes(t, n, &bytes) != 0)
        return -1;
    for (uint64_t i = 0; i < bytes; i++)
        row[i] = (uint8_t)rand();
    const sw_f16 small = sw_f32_to_f16(0.001f);
    const int64_t nb = n / sw_type_block_elems(t);
    const size_t bb = sw_type_block_bytes(t);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *p = row + b * bb;
        switch (t) {
        case SW_TYPE_Q4_K:
        case SW_TYPE_Q5_K:
            memcpy(p + 2, &small, 2); // dmin
            memcpy(p, &small, 2);     // d
            break;
        case SW_TYPE_Q6_K:
            memcpy(p + 208, &small, 2);
            break;
        case SW_TYPE_Q5_0:
        case SW_TYPE_Q5_1:
            memcpy(p, &small, 2);
            memcpy(p + 2, &small, 2); // q5_1's m (q5_0: high bits, any value)
            break;
        case SW_TYPE_IQ4_NL:
        case SW_TYPE_IQ4_XS:
            memcpy(p, &small, 2); // d (iq4_xs: its scales any value)
            break;
        default:
            return -1;
        }
    }
    return 0;
}

/* Random weights (rows x n of type t) and nx activation rows; 0 or -1. */
static int s_make(enum sw_type t, int64_t rows, int64_t n, int nx, uint8_t **w, uint64_t *wsb,
                  uint8_t **x, uint64_t *xsb)
{
    enum sw_type at = sw_type_vec_dot(t);
    if (sw_type_row_bytes(t, n, wsb) != 0 || sw_type_row_bytes(at, n, xsb) != 0)
        return -1;
    *w = malloc(*wsb * rows);
    *x = malloc(*xsb * nx);
    float *f = malloc(sizeof(float) * n);
    if (*w == NULL || *x == NULL || f == NULL) {
        free(f);
        return -1;
    }
    srand(1);
    for (int64_t o = 0; o < rows; o++) {
        for (int64_t i = 0; i < n; i++)
            f[i] = (float)rand() / RAND_MAX - 0.5f;
        if (sw_quantize_row(t, f, *w + o * *wsb, n) != 0 &&
            s_random_blocks(t, *w + o * *wsb, n) != 0)
            return -1;
    }
    for (int r = 0; r < nx; r++) {
        for (int64_t i = 0; i < n; i++)
            f[i] = (float)rand() / RAND_MAX - 0.5f;
        if (sw_quantize_row(at, f, *x + r * *xsb, n) != 0)
            return -1;
    }
    free(f);
    return 0;
}

/* Qwen2.5-Coder-1.5B's matrices (and the 0.5B drafter's main types): time per
 * call for each batch size and its ratio to the one-row time. */
static int s_qwen(sw_pool_t *pool, double min_s, const char *only)
{
    const struct {
        enum sw_type t;
        int64_t rows, n;
    } cases[] = {
        {SW_TYPE_Q4_K, 1536, 1536},   {SW_TYPE_Q4_K, 8960, 1536}, {SW_TYPE_Q6_K, 1536, 8960},
        {SW_TYPE_Q6_K, 151936, 1536}, {SW_TYPE_Q5_0, 4864, 896},  {SW_TYPE_Q8_0, 4864, 896},
        {SW_TYPE_IQ4_NL, 4864, 896},
    };
    const int nrs[] = {1, 2, 5, 8, 9, 17, 33};
    printf("%-5s %6s %5s %3s %3s %10s %9s %7s\n", "type", "rows", "n", "nr", "thr", "us/call",
           "W GB/s", "vs nr=1");
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        uint8_t *w, *x;
        uint64_t wsb, xsb;
        if (only != NULL && strcmp(only, sw_type_name(cases[ci].t)) != 0)
            continue;
        const int64_t rows = cases[ci].rows, n = cases[ci].n;
        float *y = malloc(sizeof(float) * rows * 64);
        if (y == NULL || s_make(cases[ci].t, rows, n, 64, &w, &wsb, &x, &xsb) != 0)
            return -1;
        double one = 0.0;
        for (size_t ni = 0; ni < sizeof nrs / sizeof nrs[0]; ni++) {
            struct job j = {cases[ci].t, n, rows, w, wsb, x, xsb, nrs[ni], y, 0, 0};
            double sec = s_time(pool, &j, min_s);
            if (ni == 0)
                one = sec;
            printf("%-5s %6lld %5lld %3d %3d %10.1f %9.2f %6.2fx\n", sw_type_name(cases[ci].t),
                   (long long)rows, (long long)n, nrs[ni], sw_pool_size(pool), sec * 1e6,
                   (double)wsb * rows / sec / 1e9, sec / one);
            fflush(stdout);
        }
        free(w);
        free(x);
        free(y);
    }
    return 0;
}

/* The prompt windows' K-quant matmul (sw_matmul_tiled) on Qwen2.5-Coder-1.5B's
 * matrices and iq4_nl's sgemm order (sw_matmul_sgemm) on the 0.5B's, at every
 * kernel level from AVX2 up, side by side: time per call and integer
 * multiply-adds per second. */
static int s_tiled(sw_pool_t *pool, double min_s, const char *only)
{
    const struct {
        enum sw_type t;
        int64_t rows, n;
    } cases[] = {
        {SW_TYPE_Q4_K, 1536, 1536},  {SW_TYPE_Q4_K, 8960, 1536},  {SW_TYPE_Q5_K, 1536, 1536},
        {SW_TYPE_Q6_K, 1536, 8960},  {SW_TYPE_IQ4_NL, 4864, 896}, {SW_TYPE_IQ4_NL, 896, 4864},
        {SW_TYPE_IQ4_XS, 896, 4864}, {SW_TYPE_Q8_0, 1536, 1536},  {SW_TYPE_Q8_0, 8960, 1536},
        {SW_TYPE_Q8_0, 1536, 8960},  {SW_TYPE_Q4_0, 8960, 1536},  {SW_TYPE_Q4_0, 1536, 8960},
    };
    const int nrs[] = {8, 10, 12, 14, 16, 64, 128, 512};
    const enum sw_kernel_level best = sw_quant_best_level();
    printf("%-5s %6s %5s %3s %3s", "type", "rows", "n", "nr", "thr");
    for (int l = SW_KLEVEL_AVX2; l <= (int)best; l++) {
        if (sw_quant_force_level((enum sw_kernel_level)l) != 0)
            return -1;
        printf(" %8s us %6s GMAC/s", sw_cpu_kernels(), "");
    }
    printf(" %8s\n", "speed-up");
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        uint8_t *w, *x;
        uint64_t wsb, xsb;
        if (only != NULL && strcmp(only, sw_type_name(cases[ci].t)) != 0)
            continue;
        const int64_t rows = cases[ci].rows, n = cases[ci].n;
        float *y = malloc(sizeof(float) * rows * 512);
        if (y == NULL || s_make(cases[ci].t, rows, n, 512, &w, &wsb, &x, &xsb) != 0)
            return -1;
        for (size_t ni = 0; ni < sizeof nrs / sizeof nrs[0]; ni++) {
            const int order = cases[ci].t == SW_TYPE_IQ4_NL ? 2 : 1; // sgemm, tiled
            struct job j = {cases[ci].t, n, rows, w, wsb, x, xsb, nrs[ni], y, 0, order};
            printf("%-5s %6lld %5lld %3d %3d", sw_type_name(cases[ci].t), (long long)rows,
                   (long long)n, nrs[ni], sw_pool_size(pool));
            double first = 0.0, last = 0.0;
            for (int l = SW_KLEVEL_AVX2; l <= (int)best; l++) {
                if (sw_quant_force_level((enum sw_kernel_level)l) != 0)
                    return -1;
                // fewer repetitions for the big batches: each call is long already
                double sec = s_time(pool, &j, nrs[ni] >= 64 ? min_s * 2 : min_s);
                if (l == SW_KLEVEL_AVX2)
                    first = sec;
                last = sec;
                printf(" %11.1f %13.1f", sec * 1e6, (double)rows * n * nrs[ni] / sec / 1e9);
            }
            printf(" %7.2fx\n", first / last);
            fflush(stdout);
        }
        free(w);
        free(x);
        free(y);
    }
    sw_quant_force_scalar(0);
    return 0;
}

static int s_usage(const char *why)
{
    fprintf(stderr,
            "bench_quant: %s\nusage: bench_quant [min_seconds_per_case [smol|qwen|tiled|all "
            "[threads (1..64) [type]]]]\n",
            why);
    return 2;
}

int main(int argc, char **argv)
{
    char *end = NULL;
    const double min_s = argc > 1 ? strtod(argv[1], &end) : 0.15;
    if (argc > 1 && (end == argv[1] || *end || !(min_s > 0 && min_s <= 60)))
        return s_usage("the first argument is the seconds per case, a number in (0, 60]");
    const char *set = argc > 2 ? argv[2] : "all";
    if (strcmp(set, "smol") && strcmp(set, "qwen") && strcmp(set, "tiled") && strcmp(set, "all"))
        return s_usage("the second argument is the set: smol, qwen, tiled or all");
    const long qthreads = argc > 3 ? strtol(argv[3], &end, 10) : 1;
    if (argc > 3 && (end == argv[3] || *end || qthreads < 1 || qthreads > 64))
        return s_usage("the third argument is the thread count, 1..64");
    printf("kernels: %s\n", sw_cpu_kernels());
    if (strcmp(set, "tiled") == 0) {
        sw_pool_t *pool = sw_pool_new((int)qthreads);
        if (pool == NULL || s_tiled(pool, min_s, argc > 4 ? argv[4] : NULL) != 0) {
            fprintf(stderr, "bench_quant: tiled set failed\n");
            return 1;
        }
        sw_pool_destroy(&pool);
        return 0;
    }
    if (strcmp(set, "smol") != 0) {
        sw_pool_t *pool = sw_pool_new((int)qthreads);
        if (pool == NULL || s_qwen(pool, min_s, argc > 4 ? argv[4] : NULL) != 0) {
            fprintf(stderr, "bench_quant: qwen set failed\n");
            return 1;
        }
        sw_pool_destroy(&pool);
        if (strcmp(set, "qwen") == 0)
            return 0;
    }
    printf("memcpy 256 MiB: %.1f GB/s copied (1 thread)\n", s_memcpy_gbs(min_s * 3));

    const enum sw_type types[] = {SW_TYPE_Q4_1, SW_TYPE_Q8_0};
    const int64_t shapes[][2] = {{576, 576}, {1536, 576}, {576, 1536}, {49152, 576}}; // rows, n
    const int nrs[] = {1, 4, 9, 17, 33, 64};
    sw_pool_t *pools[2] = {sw_pool_new(1), sw_pool_new(2)};
    if (pools[0] == NULL || pools[1] == NULL) {
        fprintf(stderr, "bench_quant: cannot start threads\n");
        return 1;
    }
    printf("times: best of 7 batches; 1 thread: thread CPU time, 2 threads: wall clock\n");
    printf("%-5s %6s %5s %3s %3s %10s %9s %9s %9s\n", "type", "rows", "n", "nr", "thr", "us/call",
           "GFLOP/s", "W GB/s", "vs plain");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        enum sw_type t = types[ti], at = sw_type_vec_dot(t);
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            int64_t rows = shapes[si][0], n = shapes[si][1];
            uint64_t wsb, xsb;
            if (sw_type_row_bytes(t, n, &wsb) != 0 || sw_type_row_bytes(at, n, &xsb) != 0)
                return 1;
            uint8_t *w = malloc(wsb * rows), *x = malloc(xsb * 64);
            float *y = malloc(sizeof(float) * rows * 64), *f = malloc(sizeof(float) * n);
            if (w == NULL || x == NULL || y == NULL || f == NULL)
                return 1;
            srand(1);
            for (int64_t o = 0; o < rows; o++) {
                for (int64_t i = 0; i < n; i++)
                    f[i] = (float)rand() / RAND_MAX - 0.5f;
                if (sw_quantize_row(t, f, w + o * wsb, n) != 0)
                    return 1;
            }
            for (int r = 0; r < 64; r++) {
                for (int64_t i = 0; i < n; i++)
                    f[i] = (float)rand() / RAND_MAX - 0.5f;
                if (sw_quantize_row(at, f, x + r * xsb, n) != 0)
                    return 1;
            }
            for (size_t ni = 0; ni < sizeof nrs / sizeof nrs[0]; ni++) {
                for (int th = 1; th <= 2; th++) {
                    struct job j = {t, n, rows, w, wsb, x, xsb, nrs[ni], y, 0, 0};
                    double sec = s_time(pools[th - 1], &j, min_s);
                    j.plain = 1;
                    double plain = s_time(pools[th - 1], &j, min_s);
                    double flop = 2.0 * (double)rows * (double)n * nrs[ni];
                    printf("%-5s %6lld %5lld %3d %3d %10.1f %9.1f %9.2f %8.2fx\n", sw_type_name(t),
                           (long long)rows, (long long)n, nrs[ni], th, sec * 1e6, flop / sec / 1e9,
                           (double)wsb * rows / sec / 1e9, plain / sec);
                    fflush(stdout);
                }
            }
            free(w);
            free(x);
            free(y);
            free(f);
        }
    }
    sw_pool_destroy(&pools[0]);
    sw_pool_destroy(&pools[1]);
    return 0;
}
