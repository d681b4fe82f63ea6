/*
 * test_quant_lowbit.c - q2_K, q3_K, iq4_nl and iq4_xs (issue 34):
 *
 *  - rows as f32 against an independent per-element decode of GGML's
 *    layouts (written here from the block descriptions, not from
 *    quant_math_lowbit.h), and sw_deq_elem (the GPU's) equal to them;
 *  - every kernel level (scalar, avx2, avx512 where the CPU has them; 17
 *    rows for the AVX-512 tiled kernels, 70 for iq4_nl's sgemm panels) gives the same bits for
 * sw_vec_dot, sw_matmul (per element equal to sw_vec_dot, any row count and output split),
 * sw_matmul_tiled and sw_matmul_sgemm; the dot products are close to the f64 dot of the dequantized
 * rows with the dequantized activations;
 *  - the GPU's shape of the same arithmetic (quant_math_lowbit.h: one lane
 *    per thread, iq4_nl's two chains and odd tail) equals the CPU's bits;
 *  - the orders differ where llama.cpp's differ (iq4_nl's one-row order and
 *    its sgemm order; the K types' one-row and tiled orders), and
 *    sw_matmul_batch picks llama.cpp's path for each batch size;
 *  - a model file with a tensor of a type shardwire cannot compute (the
 *    other IQ types, ternary, MXFP4, ...) is refused in one line naming the
 *    type and the tensor.
 * Bit-exactness against GGML itself: scripts/dev/ggml_bits.sh (and the
 * requantized models' fixtures, tests/slow/test_greedy_lowbit.c).
 */
#include "quant.h"
#include "quant_math.h"
#include "sw_test.h"

#include "backend.h"
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t s_rng = 0x243f6a8885a308d3ull;

static uint32_t s_rand(void)
{
    s_rng ^= s_rng << 13;
    s_rng ^= s_rng >> 7;
    s_rng ^= s_rng << 17;
    return (uint32_t)(s_rng >> 32);
}

static float s_uniform(float lo, float hi)
{
    return lo + (hi - lo) * (float)(s_rand() >> 8) / 16777216.0f;
}

static void s_put_h(uint8_t *p, float f)
{
    const sw_f16 h = sw_f32_to_f16(f);
    memcpy(p, &h, 2);
}

static float s_h(const uint8_t *p)
{
    sw_f16 h;
    memcpy(&h, p, 2);
    return sw_f16_to_f32(h);
}

static const enum sw_type s_types[] = {SW_TYPE_Q2_K, SW_TYPE_Q3_K, SW_TYPE_IQ4_NL, SW_TYPE_IQ4_XS};
#define N_TYPES 4

/* A random row of type t with sane super-scales. */
static void s_random_row(enum sw_type t, uint8_t *row, int64_t n)
{
    uint64_t bytes;
    if (sw_type_row_bytes(t, n, &bytes) != 0)
        abort();
    for (uint64_t i = 0; i < bytes; i++)
        row[i] = (uint8_t)s_rand();
    const int64_t be = sw_type_block_elems(t);
    const size_t bb = sw_type_block_bytes(t);
    for (int64_t b = 0; b < n / be; b++) {
        uint8_t *p = row + b * bb;
        if (t == SW_TYPE_Q2_K) {
            s_put_h(p + 80, s_uniform(0.0f, 0.002f));
            s_put_h(p + 82, s_uniform(0.0f, 0.002f));
        } else if (t == SW_TYPE_Q3_K) {
            s_put_h(p + 108, s_uniform(0.0f, 0.001f));
        } else if (t == SW_TYPE_IQ4_NL) {
            s_put_h(p, s_uniform(-0.002f, 0.002f));
        } else {
            s_put_h(p, s_uniform(0.0f, 0.0005f));
        }
    }
}

/* GGML's non-linear levels, from ggml-common.h's kvalues_iq4nl. */
static const int s_kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                             1,    13,   25,  38,  53,  69,  89,  113};

/* Element e of a row, decoded from the bytes as the block layouts say. */
static double s_ref_elem(enum sw_type t, const uint8_t *row, int64_t e)
{
    if (t == SW_TYPE_IQ4_NL) {
        const uint8_t *b = row + (e / 32) * 18;
        const int i = (int)(e % 32);
        const int q = i < 16 ? b[2 + i] & 0xF : b[2 + i - 16] >> 4;
        return (double)s_h(b) * s_kv[q];
    }
    const int r = (int)(e % 256);
    if (t == SW_TYPE_IQ4_XS) {
        const uint8_t *b = row + (e / 256) * 136;
        const int s = r / 32, j = r % 32;
        uint16_t sh;
        memcpy(&sh, b + 2, 2);
        const int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 0xF) | (((sh >> (2 * s)) & 3) << 4);
        const uint8_t *qs = b + 8 + 16 * s;
        const int q = j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4;
        return (double)s_h(b) * (ls - 32) * s_kv[q];
    }
    /* q2_K/q3_K: element 128h + 32g + l is bits 2g..2g+1 of qs[32h + l] */
    const int h = r / 128, g = (r % 128) / 32, l = r % 32, sub = r / 16;
    if (t == SW_TYPE_Q2_K) {
        const uint8_t *b = row + (e / 256) * 84;
        const int q = (b[16 + 32 * h + l] >> (2 * g)) & 3;
        return (double)s_h(b + 80) * (b[sub] & 0xF) * q - (double)s_h(b + 82) * (b[sub] >> 4);
    }
    const uint8_t *b = row + (e / 256) * 110;
    const int q = ((b[32 + 32 * h + l] >> (2 * g)) & 3) | (((b[l] >> (4 * h + g)) & 1) << 2);
    /* 16 6-bit scales: low 4 bits in bytes 0..7 (sub-blocks 8..15 in the high
     * nibbles), the top 2 bits in bytes 8..11 */
    const int lo = sub < 8 ? b[96 + sub] & 0xF : b[96 + sub - 8] >> 4;
    const int hi = (b[96 + 8 + sub % 4] >> (2 * (sub / 4))) & 3;
    return (double)s_h(b + 108) * ((lo | hi << 4) - 32) * (q - 4);
}

static void test_dequantize(void)
{
    for (int k = 0; k < N_TYPES; k++) {
        const enum sw_type t = s_types[k];
        const int64_t n = 512;
        uint64_t bytes;
        SW_CHECK(sw_type_row_bytes(t, n, &bytes) == 0);
        uint8_t *row = malloc(bytes);
        float *f = malloc(sizeof(float) * n);
        int bad = 0, bad_elem = 0;
        for (int trial = 0; trial < 20; trial++) {
            s_random_row(t, row, n);
            sw_dequantize_row(t, row, f, n);
            for (int64_t e = 0; e < n; e++) {
                const double ref = s_ref_elem(t, row, e);
                bad += !(fabs(f[e] - ref) <= 1e-6 * fabs(ref) + 1e-12);
                const float g = sw_deq_elem(t, row, e);
                bad_elem += memcmp(&g, &f[e], 4) != 0;
            }
        }
        if (bad || bad_elem)
            fprintf(stderr, "%s: %d elements off the reference, %d differ from sw_deq_elem\n",
                    sw_type_name(t), bad, bad_elem);
        SW_CHECK_INT(bad, 0);
        SW_CHECK_INT(bad_elem, 0);
        free(row);
        free(f);
    }
}

/* The GPU's shape: lane k of 8, blocks in order, then the combine. */
static float s_lanes_dot(enum sw_type t, int64_t n, const void *w, const void *x, int sgemm)
{
    float acc[8], acc2[8];
    const int64_t nb = n / sw_type_block_elems(t);
    int32_t tail = 0;
    float tail_d = 0.0f;
    for (int k = 0; k < 8; k++) {
        acc[k] = acc2[k] = 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            if (t == SW_TYPE_Q2_K) {
                sw_wl_q2_k l;
                sw_q2_k_wl((const sw_block_q2_k *)w + b, k, &l);
                sw_q2_k_step(&l, (const sw_block_q8_k *)x + b, k, &acc[k], &acc2[k]);
            } else if (t == SW_TYPE_Q3_K) {
                sw_wl_q3_k l;
                sw_q3_k_wl((const sw_block_q3_k *)w + b, k, &l);
                sw_q3_k_step(&l, (const sw_block_q8_k *)x + b, k, &acc[k], &acc2[k]);
            } else if (t == SW_TYPE_IQ4_XS) {
                sw_wl_iq4_xs l;
                sw_iq4_xs_wl((const sw_block_iq4_xs *)w + b, k, &l);
                sw_iq4_xs_step(&l, (const sw_block_q8_k *)x + b, k, &acc[k], &acc2[k]);
            } else {
                sw_wl_iq4_nl l;
                const sw_block_q8_0 *xb = (const sw_block_q8_0 *)x + b;
                sw_iq4_nl_wl((const sw_block_iq4_nl *)w + b, k, &l);
                if (!sgemm && b == nb - 1 && nb % 2 == 1) { // the one-row order's odd tail
                    tail += sw_iq4_nl_ints(&l, xb, k);
                    tail_d = sw_f16_to_f32(xb->d) * l.d;
                } else {
                    float *a = sgemm || b % 2 == 0 ? &acc[k] : &acc2[k];
                    sw_iq4_nl_step(&l, xb, k, a, NULL);
                }
            }
        }
    }
    if (t == SW_TYPE_Q2_K)
        return sw_q2_k_combine(acc, acc2);
    if (t == SW_TYPE_Q3_K)
        return sw_q3_k_combine(acc, acc2);
    if (t == SW_TYPE_IQ4_XS)
        return sw_iq4_xs_combine(acc, acc2);
    if (sgemm)
        return sw_iq4_nl_combine(acc, acc2);
    return sw_iq4_nl_combine2(acc, acc2, nb % 2 == 1, tail_d, tail);
}

/* The GPU's tiled shape: per block the 8 lanes' integers summed, then the update. */
static float s_lanes_tiled(enum sw_type t, int64_t n, const void *w, const void *x)
{
    float y = 0.0f;
    for (int64_t b = 0; b < n / SW_QK_K; b++) {
        const sw_block_q8_k *xb = (const sw_block_q8_k *)x + b;
        int32_t tt = 0, mm = 0, l, m;
        if (t == SW_TYPE_Q2_K) {
            sw_wl_q2_k wl[8];
            for (int k = 0; k < 8; k++) {
                sw_q2_k_wl((const sw_block_q2_k *)w + b, k, &wl[k]);
                sw_q2_k_ints(&wl[k], xb, k, &l, &m);
                tt += l;
                mm += m;
            }
            y = sw_q2_k_tiled(&wl[0], xb, tt, mm, y);
        } else if (t == SW_TYPE_Q3_K) {
            sw_wl_q3_k wl[8];
            for (int k = 0; k < 8; k++) {
                sw_q3_k_wl((const sw_block_q3_k *)w + b, k, &wl[k]);
                sw_q3_k_ints(&wl[k], xb, k, &l, &m);
                tt += l;
            }
            y = sw_q3_k_tiled(&wl[0], xb, tt, 0, y);
        } else {
            sw_wl_iq4_xs wl[8];
            for (int k = 0; k < 8; k++) {
                sw_iq4_xs_wl((const sw_block_iq4_xs *)w + b, k, &wl[k]);
                sw_iq4_xs_ints(&wl[k], xb, k, &l, &m);
                tt += l;
            }
            y = sw_iq4_xs_tiled(&wl[0], xb, tt, 0, y);
        }
    }
    return y;
}

typedef void (*s_mm_t)(enum sw_type, int64_t, const void *, size_t, int64_t, int64_t, const void *,
                       size_t, int, float *, int64_t);

/* One type, one row length: every level and every order against each other. */
static void s_check_type(enum sw_type t, int64_t n, int rows, int nr)
{
    const enum sw_type at = sw_type_vec_dot(t);
    uint64_t ws, xs;
    SW_CHECK(sw_type_row_bytes(t, n, &ws) == 0 && sw_type_row_bytes(at, n, &xs) == 0);
    uint8_t *w = malloc(ws * rows), *x = malloc(xs * nr);
    float *xf = malloc(sizeof(float) * n * nr), *wd = malloc(sizeof(float) * n);
    float *xd = malloc(sizeof(float) * n);
    const size_t ny = (size_t)rows * nr;
    float *y[SW_KLEVEL_AMX + 1][4]; // level x (dot, matmul, tiled, sgemm)
    for (int o = 0; o < rows; o++)
        s_random_row(t, w + o * ws, n);
    for (int64_t i = 0; i < n * nr; i++)
        xf[i] = s_uniform(-1.0f, 1.0f) * (i % 37 == 0 ? 5.0f : 1.0f);
    for (int r = 0; r < nr; r++)
        SW_CHECK(sw_quantize_row(at, xf + r * n, x + r * xs, n) == 0);
    const enum sw_kernel_level best = sw_quant_best_level();
    const s_mm_t mms[3] = {sw_matmul, sw_matmul_tiled, sw_matmul_sgemm};
    int diff_level = 0, diff_dot = 0, diff_gpu = 0, far = 0;
    for (int lv = 0; lv <= (int)best; lv++) {
        SW_CHECK(sw_quant_force_level((enum sw_kernel_level)lv) == 0);
        for (int j = 0; j < 4; j++)
            y[lv][j] = malloc(sizeof(float) * ny);
        for (int r = 0; r < nr; r++)
            for (int o = 0; o < rows; o++)
                sw_vec_dot(t, n, &y[lv][0][r * rows + o], w + o * ws, x + r * xs);
        for (int j = 0; j < 3; j++) { // in two uneven slices, as two threads run them
            mms[j](t, n, w, ws, 0, 3, x, xs, nr, y[lv][j + 1], rows);
            mms[j](t, n, w, ws, 3, rows, x, xs, nr, y[lv][j + 1], rows);
        }
        diff_dot += memcmp(y[lv][0], y[lv][1], sizeof(float) * ny) != 0;
        for (int j = 0; lv > 0 && j < 4; j++)
            diff_level += memcmp(y[lv][j], y[0][j], sizeof(float) * ny) != 0;
    }
    SW_CHECK(sw_quant_force_level(best) == 0);
    const int k_type = t != SW_TYPE_IQ4_NL;
    for (int r = 0; r < nr; r++)
        for (int o = 0; o < rows; o++) {
            const void *wo = w + o * ws, *xr = x + r * xs;
            const float g = s_lanes_dot(t, n, wo, xr, 0);
            const float gt = k_type ? s_lanes_tiled(t, n, wo, xr) : s_lanes_dot(t, n, wo, xr, 1);
            const size_t i = (size_t)r * rows + o;
            diff_gpu += memcmp(&g, &y[0][0][i], 4) != 0;
            diff_gpu += memcmp(&gt, &y[0][k_type ? 2 : 3][i], 4) != 0;
            /* the value: the f64 dot of the dequantized weights and activations */
            sw_dequantize_row(t, w + o * ws, wd, n);
            sw_dequantize_row(at, x + r * xs, xd, n);
            double exact = 0, mag = 0;
            for (int64_t e = 0; e < n; e++) {
                exact += (double)wd[e] * xd[e];
                mag += fabs((double)wd[e] * xd[e]);
            }
            for (int j = 0; j < 4; j++)
                far += !(fabs(y[0][j][i] - exact) <= 1e-4 * mag + 1e-9);
        }
    if (diff_level || diff_dot || diff_gpu || far)
        fprintf(stderr, "%s n=%lld: levels differ %d, matmul != vec_dot %d, GPU shape %d, far %d\n",
                sw_type_name(t), (long long)n, diff_level, diff_dot, diff_gpu, far);
    SW_CHECK_INT(diff_level, 0);
    SW_CHECK_INT(diff_dot, 0);
    SW_CHECK_INT(diff_gpu, 0);
    SW_CHECK_INT(far, 0);
    /* the orders llama.cpp distinguishes are distinct here too (some element differs) */
    const int j_other = k_type ? 2 : 3, j_same = k_type ? 3 : 2;
    if (n >= 1536) // (a row of one or two blocks may round alike)
        SW_CHECK(memcmp(y[0][0], y[0][j_other], sizeof(float) * ny) != 0);
    SW_CHECK(memcmp(y[0][0], y[0][j_same], sizeof(float) * ny) == 0);
    /* sw_matmul_batch: llama.cpp's path for each batch size */
    float *yb = malloc(sizeof(float) * ny);
    for (int batch = 1; batch <= 16; batch *= 2) {
        sw_matmul_batch(t, batch, n, w, ws, 0, rows, x, xs, nr, yb, rows);
        const int want = batch < 2 ? 0 : k_type ? (batch >= 8 ? 2 : 0) : 3;
        SW_CHECK(memcmp(yb, y[0][want], sizeof(float) * ny) == 0);
    }
    free(yb);
    for (int lv = 0; lv <= (int)best; lv++)
        for (int j = 0; j < 4; j++)
            free(y[lv][j]);
    free(w);
    free(x);
    free(xf);
    free(wd);
    free(xd);
}

static void test_kernels(void)
{
    for (int k = 0; k < N_TYPES; k++) {
        const enum sw_type t = s_types[k];
        const int64_t blk = sw_type_block_elems(t);
        /* 1, 2 and 3 blocks (iq4_nl's odd tail), a model's rows; 1..9 activation rows */
        const int64_t ns[] = {blk, 2 * blk, 3 * blk, 1536, blk == 32 ? 896 : 4864};
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
            s_check_type(t, ns[i], 11, 1 + (int)(i * 2));
        /* 17 rows: the AVX-512 tiled kernels (SW_MMTW_ROWS), over 2 panels and a partial one */
        s_check_type(t, 1280, 40, 17);
    }
    /* iq4_nl's AVX-512 sgemm panels: 21 blocks (a slab of 16 and an odd 5), 19 weight rows
     * (a panel and a partial one), 70 activation rows (a pass of 64 and one of 6) */
    s_check_type(SW_TYPE_IQ4_NL, 21 * 32, 19, 70);
    /* its AVX-512 one-row kernel: 2 groups of 8 blocks, a pair and the odd tail, rows in pairs */
    s_check_type(SW_TYPE_IQ4_NL, 21 * 32, 11, 1);
}

/* A copy of the model with tensor `tensor`'s type id set to `type`; its load
 * must fail with one line naming the type and the tensor. */
static void s_refused(const char *model, const char *tensor, uint32_t type)
{
    size_t len = 0;
    char *b = sw_test_read_file(model, &len);
    char *at = b ? memmem(b, len, tensor, strlen(tensor)) : NULL;
    SW_CHECK(at != NULL);
    if (!at) {
        free(b);
        return;
    }
    /* after the name: n_dims (u32), ne[n_dims] (u64 each), then the type (u32) */
    uint32_t nd;
    memcpy(&nd, at + strlen(tensor), 4);
    memcpy(at + strlen(tensor) + 4 + 8 * nd, &type, 4);
    char path[1024];
    snprintf(path, sizeof path, "%s/unsupported.gguf", sw_test_tmpdir());
    FILE *f = fopen(path, "wb");
    SW_CHECK(f && fwrite(b, 1, len, f) == len);
    if (f)
        fclose(f);
    free(b);
    char err[512] = "";
    sw_backend_t *be = sw_backend_new("cpu", 1, NULL, 0);
    sw_model_t *m = be ? sw_model_load(path, 0, -1, be, err, sizeof err) : NULL;
    const char *name = sw_type_name((enum sw_type)type);
    const int ok = m == NULL && strstr(err, name) && strstr(err, tensor) &&
                   strstr(err, "cannot compute") && !strchr(err, '\n');
    printf("%-8s: %s\n", name, err);
    if (!ok)
        fprintf(stderr, "expected one line naming %s and %s, got '%s'\n", name, tensor, err);
    SW_CHECK(ok);
    sw_model_free(&m);
    sw_backend_free(&be);
    unlink(path);
}

static void test_unsupported(void)
{
    const char *model = sw_test_model();
    if (access(model, R_OK) != 0) {
        sw_test_skip_part("the default model is absent (bash scripts/fetch_model.sh)");
        return;
    }
    /* every type GGML defines that shardwire cannot compute, in a layer
     * tensor and in the token embedding, each named by the model loader */
    const uint32_t ids[] = {16, 17, 18, 19, 21, 22, 29, 34, 35, 39, 40, 41, 42};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        s_refused(model, "blk.3.ffn_down.weight", ids[i]); // 1536 columns: any block size
    s_refused(model, "token_embd.weight", 39);             // 576 columns: mxfp4's 32-element blocks
    /* and the supported types have kernels at every level */
    for (int k = 0; k < N_TYPES; k++)
        SW_CHECK(sw_type_supported(s_types[k]) && sw_type_vec_dot(s_types[k]) != SW_TYPE_COUNT);
    SW_CHECK(!sw_type_supported((enum sw_type)16) &&
             sw_type_vec_dot((enum sw_type)16) == SW_TYPE_COUNT);
}

int main(void)
{
    test_dequantize();
    test_kernels();
    test_unsupported();
    return sw_test_done();
}
