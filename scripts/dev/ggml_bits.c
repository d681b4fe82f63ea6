/*
 * ggml_bits.c - developer check, not part of the build: compares shardwire's
 * activation quantizers and dot products with GGML's CPU backend bit for bit,
 * on random rows of every supported type, at both shardwire kernel levels.
 * Built and run by scripts/dev/ggml_bits.sh against a llama.cpp ggml source tree
 * compiled for AVX2 (no AVX-512, no AMX), the arithmetic shardwire follows.
 * Also compares ggml_mul_mat of a K-quant weight with a batch of 16 rows
 * (GGML's tiled K-quant path) against sw_matmul_tiled, and with 1 row
 * against sw_matmul. Exit status 0 when the AVX2 level matches everywhere.
 */
#include "ggml-cpu.h"
#include "ggml.h"
#include "quant.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float uni(float a, float b)
{
    return a + (b - a) * (float)(rnd() >> 8) / 16777216.0f;
}
static void puth(uint8_t *p, float f)
{
    sw_f16 h = sw_f32_to_f16(f);
    memcpy(p, &h, 2);
}

static void rand_row(enum sw_type t, uint8_t *row, int64_t n)
{
    uint64_t bytes;
    if (sw_type_row_bytes(t, n, &bytes))
        abort();
    for (uint64_t i = 0; i < bytes; i++)
        row[i] = (uint8_t)rnd();
    int64_t be = sw_type_block_elems(t);
    size_t bb = sw_type_block_bytes(t);
    for (int64_t b = 0; b < n / be; b++) {
        uint8_t *p = row + b * bb;
        switch (t) {
        case SW_TYPE_Q4_0:
        case SW_TYPE_Q5_0:
            puth(p, uni(-0.02f, 0.02f));
            break;
        case SW_TYPE_Q4_1:
        case SW_TYPE_Q5_1:
            puth(p, uni(0, 0.02f));
            puth(p + 2, uni(-0.2f, 0));
            break;
        case SW_TYPE_Q8_0:
            puth(p, uni(-0.002f, 0.002f));
            for (int j = 0; j < 32; j++)
                if (p[2 + j] == 0x80)
                    p[2 + j] = 0x81;
            break;
        case SW_TYPE_Q4_K:
        case SW_TYPE_Q5_K:
            puth(p, uni(0, 0.001f));
            puth(p + 2, uni(0, 0.002f));
            break;
        case SW_TYPE_Q6_K:
            puth(p + 208, uni(0, 0.0005f));
            break;
        case SW_TYPE_Q2_K:
            puth(p + 80, uni(0, 0.002f));
            puth(p + 82, uni(0, 0.002f));
            break;
        case SW_TYPE_Q3_K:
            puth(p + 108, uni(0, 0.001f));
            break;
        case SW_TYPE_IQ4_NL:
            puth(p, uni(-0.002f, 0.002f));
            break;
        case SW_TYPE_IQ4_XS:
            puth(p, uni(0, 0.0005f));
            break;
        case SW_TYPE_F32: {
            float f = uni(-1, 1);
            memcpy(p, &f, 4);
            break;
        }
        case SW_TYPE_F16:
            puth(p, uni(-1, 1));
            break;
        case SW_TYPE_BF16: {
            sw_bf16 v = sw_f32_to_bf16(uni(-1, 1));
            memcpy(p, &v, 2);
            break;
        }
        default:
            break;
        }
    }
}

/* ggml_mul_mat(W, X) with nr rows against shardwire's matmul of the same
 * order (tiled for nr >= 8, as GGML chooses). Returns the mismatches. */
static int mm_check(enum sw_type t, int64_t n, int64_t rows, int nr)
{
    struct ggml_init_params ip = {(size_t)256 << 20, NULL, false};
    struct ggml_context *ctx = ggml_init(ip);
    struct ggml_tensor *W = ggml_new_tensor_2d(ctx, (enum ggml_type)t, n, rows);
    struct ggml_tensor *X = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, nr);
    for (int64_t o = 0; o < rows; o++)
        rand_row(t, (uint8_t *)W->data + o * W->nb[1], n);
    for (int64_t i = 0; i < n * nr; i++)
        ((float *)X->data)[i] = uni(-1, 1) * (i % 37 == 0 ? 5.f : 1.f);
    struct ggml_tensor *Y = ggml_mul_mat(ctx, W, X);
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, Y);
    ggml_graph_compute_with_ctx(ctx, gf, 2);
    enum sw_type at = sw_type_vec_dot(t);
    uint64_t xs;
    if (sw_type_row_bytes(at, n, &xs))
        abort();
    uint8_t *xq = malloc(xs * nr);
    float *y = malloc(sizeof(float) * rows * nr);
    for (int r = 0; r < nr; r++)
        if (sw_quantize_row(at, (const float *)X->data + r * n, xq + r * xs, n))
            abort();
    if (t == SW_TYPE_IQ4_NL && nr >= 2) // llamafile's sgemm serves it
        sw_matmul_sgemm(t, n, W->data, W->nb[1], 0, rows, xq, xs, nr, y, rows);
    else
        (nr >= 8 ? sw_matmul_tiled : sw_matmul)(t, n, W->data, W->nb[1], 0, rows, xq, xs, nr, y,
                                                rows);
    int bad = 0;
    for (int64_t i = 0; i < rows * nr; i++)
        bad += memcmp(&y[i], (const float *)Y->data + i, 4) != 0;
    free(xq);
    free(y);
    ggml_free(ctx);
    return bad;
}

int main(void)
{
    ggml_cpu_init();
    const enum sw_type ts[] = {SW_TYPE_Q4_0, SW_TYPE_Q4_1,   SW_TYPE_Q5_0,  SW_TYPE_Q5_1,
                               SW_TYPE_Q8_0, SW_TYPE_Q4_K,   SW_TYPE_Q5_K,  SW_TYPE_Q6_K,
                               SW_TYPE_F16,  SW_TYPE_F32,    SW_TYPE_BF16,  SW_TYPE_Q2_K,
                               SW_TYPE_Q3_K, SW_TYPE_IQ4_NL, SW_TYPE_IQ4_XS};
    const int64_t ns[] = {512, 1536, 576, 1024 + 96, 64 + 7, 96, 32};
    int total_bad = 0;
    for (int level = 0; level < 2; level++) {
        sw_quant_force_scalar(level == 1);
        printf("== shardwire level %s\n", sw_cpu_kernels());
        for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) {
            enum sw_type t = ts[k], at = sw_type_vec_dot(t);
            const struct ggml_type_traits_cpu *tr = ggml_get_type_traits_cpu((enum ggml_type)t);
            const struct ggml_type_traits_cpu *atr = ggml_get_type_traits_cpu((enum ggml_type)at);
            if ((enum ggml_type)at != tr->vec_dot_type) {
                printf("%s: vec_dot type differs (ggml %d)\n", sw_type_name(t), tr->vec_dot_type);
                total_bad++;
                continue;
            }
            int qbad = 0, dbad = 0, trials = 0;
            double maxrel = 0;
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                int64_t n = ns[ni];
                if (n % sw_type_block_elems(t))
                    continue;
                uint64_t wb, xb;
                if (sw_type_row_bytes(t, n, &wb) || sw_type_row_bytes(at, n, &xb))
                    abort();
                uint8_t *w = malloc(wb), *x1 = malloc(xb), *x2 = malloc(xb);
                float *f = malloc(n * 4);
                for (int tr_i = 0; tr_i < 200; tr_i++) {
                    rand_row(t, w, n);
                    float sc = tr_i % 3 == 0 ? 100.f : tr_i % 3 == 1 ? 1.f : 0.01f;
                    for (int64_t i = 0; i < n; i++)
                        f[i] = uni(-1, 1) * sc * (i % 37 == 0 ? 5.f : 1.f);
                    if (at == SW_TYPE_F32)
                        memcpy(x2, f, n * 4);
                    else
                        atr->from_float(f, x2, n);
                    if (sw_quantize_row(at, f, x1, n))
                        abort();
                    if (memcmp(x1, x2, xb))
                        qbad++;
                    float s1, s2;
                    sw_vec_dot(t, n, &s1, w, x2);
                    tr->vec_dot((int)n, &s2, 0, w, 0, x2, 0, 1);
                    if (memcmp(&s1, &s2, 4)) {
                        dbad++;
                        double r = fabs((double)s1 - s2) / (fabs(s2) + 1e-30);
                        if (r > maxrel)
                            maxrel = r;
                    }
                    trials++;
                }
                free(w);
                free(x1);
                free(x2);
                free(f);
            }
            printf("%-5s: quantize(%s) byte mismatches %d/%d, vec_dot bit mismatches %d/%d (max "
                   "rel %.2g)\n",
                   sw_type_name(t), sw_type_name(at), qbad, trials, dbad, trials, maxrel);
            if (level == 0)
                total_bad += qbad + dbad;
        }
    }
    sw_quant_force_scalar(0);
    const enum sw_type kq[] = {SW_TYPE_Q4_K, SW_TYPE_Q5_K, SW_TYPE_Q6_K,
                               SW_TYPE_Q2_K, SW_TYPE_Q3_K, SW_TYPE_IQ4_XS};
    for (size_t k = 0; k < sizeof kq / sizeof kq[0]; k++)
        for (int nr = 1; nr <= 16; nr += 15) {
            int bad = mm_check(kq[k], 1536, 96, nr);
            printf("%-5s: ggml_mul_mat with %2d rows (%s path): %d/%d mismatches\n",
                   sw_type_name(kq[k]), nr, nr >= 8 ? "tiled" : "vec_dot", bad, 96 * nr);
            total_bad += bad;
        }
    /* iq4_nl: vec_dot for one row, llamafile's sgemm for 2 or more */
    for (int nr = 1; nr <= 16; nr = nr * 2 + (nr == 1 ? 0 : 1))
        for (int64_t n = 96; n <= 1536; n += 1440) {
            int bad = mm_check(SW_TYPE_IQ4_NL, n, 96, nr);
            printf("iq4_nl: ggml_mul_mat %4lld x %2d rows (%s path): %d/%d mismatches\n",
                   (long long)n, nr, nr >= 2 ? "sgemm" : "vec_dot", bad, 96 * nr);
            total_bad += bad;
        }
    /* the rows as f32 (get_rows): GGML's to_float */
    const enum sw_type dq[] = {SW_TYPE_Q2_K,   SW_TYPE_Q3_K, SW_TYPE_IQ4_NL,
                               SW_TYPE_IQ4_XS, SW_TYPE_Q4_K, SW_TYPE_Q6_K};
    for (size_t k = 0; k < sizeof dq / sizeof dq[0]; k++) {
        uint64_t wb;
        if (sw_type_row_bytes(dq[k], 1536, &wb))
            abort();
        uint8_t *w = malloc(wb);
        float *a = malloc(1536 * 4), *b = malloc(1536 * 4);
        int bad = 0;
        for (int tr_i = 0; tr_i < 50; tr_i++) {
            rand_row(dq[k], w, 1536);
            sw_dequantize_row(dq[k], w, a, 1536);
            ggml_get_type_traits((enum ggml_type)dq[k])->to_float(w, b, 1536);
            bad += memcmp(a, b, 1536 * 4) != 0;
        }
        printf("%-6s: dequantize row mismatches %d/50\n", sw_type_name(dq[k]), bad);
        total_bad += bad;
        free(w);
        free(a);
        free(b);
    }
    printf("avx2 level total mismatches: %d\n", total_bad);
    return total_bad != 0;
}
