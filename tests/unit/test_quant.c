/*
 * test_quant.c - element conversions, row dequantizers against an independent
 * per-element decode of the GGML layouts, activation quantizers against values
 * worked out by hand, dot products against dequantize-then-dot at both kernel
 * levels (which must agree to the bit), and sw_matmul bit-identical to
 * sw_vec_dot for every row count.
 *
 * The shared host/device arithmetic the CUDA kernels run (quant_math.h,
 * op_math.h) is run here on the CPU in the shape the kernels use it (one
 * lane per thread, blocks in order, the lanes combined at the end) and must
 * give the CPU kernels' results to the bit, for every type.
 */
#include "cpu/backend_cpu_impl.h"
#include "op_math.h"
#include "quant.h"
#include "quant_math.h"
#include "sw_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_X86 1
#endif

static uint64_t s_rng = 0x9e3779b97f4a7c15ull;

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

static float s_h(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return sw_f16_to_f32(v);
}

static void s_put_h(uint8_t *p, float f)
{
    sw_f16 h = sw_f32_to_f16(f);
    memcpy(p, &h, 2);
}

/* ---- independent per-element decode of each layout --------------------- */

static int s_nib(const uint8_t *qs, int e) // 32-element nibble layout
{
    return e < 16 ? (qs[e] & 0xF) : (qs[e - 16] >> 4);
}

static void s_k4_scale(const uint8_t *s, int j, int *sc, int *mn)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

static double s_ref_elem(enum sw_type t, const uint8_t *row, int64_t e)
{
    switch (t) {
    case SW_TYPE_Q4_0: {
        const uint8_t *b = row + (e / 32) * 18;
        return (s_nib(b + 2, (int)(e % 32)) - 8) * (double)s_h(b);
    }
    case SW_TYPE_Q4_1: {
        const uint8_t *b = row + (e / 32) * 20;
        return s_nib(b + 4, (int)(e % 32)) * (double)s_h(b) + s_h(b + 2);
    }
    case SW_TYPE_Q5_0: {
        const uint8_t *b = row + (e / 32) * 22;
        uint32_t qh;
        memcpy(&qh, b + 2, 4);
        int q = s_nib(b + 6, (int)(e % 32)) | (int)(((qh >> (e % 32)) & 1) << 4);
        return (q - 16) * (double)s_h(b);
    }
    case SW_TYPE_Q5_1: {
        const uint8_t *b = row + (e / 32) * 24;
        uint32_t qh;
        memcpy(&qh, b + 4, 4);
        int q = s_nib(b + 8, (int)(e % 32)) | (int)(((qh >> (e % 32)) & 1) << 4);
        return q * (double)s_h(b) + s_h(b + 2);
    }
    case SW_TYPE_Q8_0: {
        const uint8_t *b = row + (e / 32) * 34;
        return (int8_t)b[2 + e % 32] * (double)s_h(b);
    }
    case SW_TYPE_Q8_1: {
        const uint8_t *b = row + (e / 32) * 36;
        return (int8_t)b[4 + e % 32] * (double)s_h(b);
    }
    case SW_TYPE_Q4_K: {
        const uint8_t *b = row + (e / 256) * 144;
        int r = (int)(e % 256), c = r / 64, j = r / 32, sc, mn;
        uint8_t byte = b[16 + 32 * c + r % 32];
        int q = (r % 64) < 32 ? (byte & 0xF) : (byte >> 4);
        s_k4_scale(b + 4, j, &sc, &mn);
        return (double)s_h(b) * sc * q - (double)s_h(b + 2) * mn;
    }
    case SW_TYPE_Q5_K: {
        const uint8_t *b = row + (e / 256) * 176;
        int r = (int)(e % 256), c = r / 64, j = r / 32, sc, mn;
        uint8_t byte = b[48 + 32 * c + r % 32];
        int q = (r % 64) < 32 ? (byte & 0xF) : (byte >> 4);
        q += ((b[16 + r % 32] >> j) & 1) * 16;
        s_k4_scale(b + 4, j, &sc, &mn);
        return (double)s_h(b) * sc * q - (double)s_h(b + 2) * mn;
    }
    case SW_TYPE_Q6_K: {
        const uint8_t *b = row + (e / 256) * 210;
        int r = (int)(e % 256), half = r / 128, rr = r % 128, c = rr / 32, l = rr % 32;
        uint8_t lb = b[64 * half + l + 32 * (c & 1)];
        int lo = c < 2 ? (lb & 0xF) : (lb >> 4);
        int hi = (b[128 + 32 * half + l] >> (2 * c)) & 3;
        int sc = (int8_t)b[192 + 8 * half + 2 * c + l / 16];
        return (double)s_h(b + 208) * sc * ((lo | (hi << 4)) - 32);
    }
    case SW_TYPE_Q8_K: {
        const uint8_t *b = row + (e / 256) * 292;
        float d;
        memcpy(&d, b, 4);
        return (double)d * (int8_t)b[4 + e % 256];
    }
    case SW_TYPE_F32: {
        float f;
        memcpy(&f, row + 4 * e, 4);
        return f;
    }
    case SW_TYPE_F16:
        return s_h(row + 2 * e);
    case SW_TYPE_BF16: {
        uint16_t v;
        memcpy(&v, row + 2 * e, 2);
        return sw_bf16_to_f32(v);
    }
    default:
        return NAN;
    }
}

/* A random valid row of weight type t with sane scales. */
static void s_random_row(enum sw_type t, uint8_t *row, int64_t n)
{
    uint64_t bytes;
    if (sw_type_row_bytes(t, n, &bytes) != 0)
        abort();
    for (uint64_t i = 0; i < bytes; i++)
        row[i] = (uint8_t)s_rand();
    int64_t be = sw_type_block_elems(t);
    size_t bb = sw_type_block_bytes(t);
    for (int64_t b = 0; b < n / be; b++) {
        uint8_t *p = row + b * bb;
        switch (t) {
        case SW_TYPE_Q4_0:
        case SW_TYPE_Q5_0:
            s_put_h(p, s_uniform(-0.02f, 0.02f));
            break;
        case SW_TYPE_Q4_1:
        case SW_TYPE_Q5_1:
            s_put_h(p, s_uniform(0.0f, 0.02f));
            s_put_h(p + 2, s_uniform(-0.2f, 0.0f));
            break;
        case SW_TYPE_Q8_0:
            s_put_h(p, s_uniform(-0.002f, 0.002f));
            for (int j = 0; j < 32; j++)
                if (p[2 + j] == 0x80) // -128 never comes out of a quantizer
                    p[2 + j] = 0x81;
            break;
        case SW_TYPE_Q4_K:
        case SW_TYPE_Q5_K:
            s_put_h(p, s_uniform(0.0f, 0.001f));
            s_put_h(p + 2, s_uniform(0.0f, 0.002f));
            break;
        case SW_TYPE_Q6_K:
            s_put_h(p + 208, s_uniform(0.0f, 0.0005f));
            break;
        case SW_TYPE_F32:
            for (int j = 0; j < 1; j++) {
                float f = s_uniform(-1.0f, 1.0f);
                memcpy(p, &f, 4);
            }
            break;
        case SW_TYPE_F16:
            s_put_h(p, s_uniform(-1.0f, 1.0f));
            break;
        case SW_TYPE_BF16: {
            sw_bf16 v = sw_f32_to_bf16(s_uniform(-1.0f, 1.0f));
            memcpy(p, &v, 2);
            break;
        }
        default:
            break;
        }
    }
}

static const enum sw_type s_weight_types[] = {
    SW_TYPE_F32,  SW_TYPE_F16,  SW_TYPE_BF16, SW_TYPE_Q4_0, SW_TYPE_Q4_1, SW_TYPE_Q5_0,
    SW_TYPE_Q5_1, SW_TYPE_Q8_0, SW_TYPE_Q4_K, SW_TYPE_Q5_K, SW_TYPE_Q6_K,
};
#define N_WTYPES (int)(sizeof s_weight_types / sizeof s_weight_types[0])

static uint8_t *s_row_alloc(enum sw_type t, int64_t n, int64_t rows, size_t *stride)
{
    uint64_t bytes;
    if (sw_type_row_bytes(t, n, &bytes) != 0)
        abort();
    *stride = (size_t)bytes;
    uint8_t *p = malloc((size_t)bytes * (size_t)rows + 64);
    if (p == NULL)
        abort();
    return p;
}

/* ---- tests --------------------------------------------------------------- */

#ifdef HAVE_X86
__attribute__((target("f16c"))) static float s_hw_h2f(uint16_t h)
{
    return _cvtsh_ss(h);
}
__attribute__((target("f16c"))) static uint16_t s_hw_f2h(float f)
{
    return _cvtss_sh(f, 0);
}
#endif

static void test_conversions(void)
{
    int bad16 = 0, badbf = 0, badhw = 0;
#ifdef HAVE_X86
    unsigned ca, cb, cc, cd; // CPUID.1:ECX[29] = F16C
    int hw = __get_cpuid(1, &ca, &cb, &cc, &cd) && ((cc >> 29) & 1u);
#endif
    for (uint32_t h = 0; h < 65536; h++) {
        float f = sw_f16_to_f32((sw_f16)h);
        int nan = ((h & 0x7c00) == 0x7c00) && (h & 0x3ff);
        if (nan) {
            bad16 += !isnan(f);
        } else {
            bad16 += sw_f32_to_f16(f) != h;
        }
        float g = sw_bf16_to_f32((sw_bf16)h);
        int bnan = ((h & 0x7f80) == 0x7f80) && (h & 0x7f);
        if (bnan)
            badbf += !isnan(g);
        else
            badbf += sw_f32_to_bf16(g) != h;
#ifdef HAVE_X86
        if (hw && !nan) {
            float hf = s_hw_h2f((uint16_t)h);
            badhw += memcmp(&hf, &f, 4) != 0;
        }
#endif
    }
    SW_CHECK_INT(bad16, 0);
    SW_CHECK_INT(badbf, 0);
    SW_CHECK_INT(badhw, 0);

    /* f32 -> f16 rounding: halfway cases go to even, overflow, subnormals. */
    SW_CHECK_INT(sw_f32_to_f16(1.0f), 0x3c00);
    SW_CHECK_INT(sw_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);     // tie -> even (down)
    SW_CHECK_INT(sw_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02); // tie -> even (up)
    SW_CHECK_INT(sw_f32_to_f16(65504.0f), 0x7bff);
    SW_CHECK_INT(sw_f32_to_f16(65519.0f), 0x7bff);
    SW_CHECK_INT(sw_f32_to_f16(65520.0f), 0x7c00);
    SW_CHECK_INT(sw_f32_to_f16(-INFINITY), 0xfc00);
    SW_CHECK_INT(sw_f32_to_f16(0x1p-24f), 0x0001);
    SW_CHECK_INT(sw_f32_to_f16(0x1p-25f), 0x0000);     // tie -> even (0)
    SW_CHECK_INT(sw_f32_to_f16(3 * 0x1p-25f), 0x0002); // tie -> even (2)
    SW_CHECK_INT(sw_f32_to_f16(-0.0f), 0x8000);
    SW_CHECK_INT(sw_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80); // tie -> even
    SW_CHECK_INT(sw_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
#ifdef HAVE_X86
    if (hw) {
        int bad = 0;
        for (int i = 0; i < 200000; i++) {
            uint32_t u = s_rand();
            float f;
            memcpy(&f, &u, 4);
            if (isnan(f))
                continue;
            bad += sw_f32_to_f16(f) != s_hw_f2h(f);
        }
        SW_CHECK_INT(bad, 0);
    }
#endif
}

static void test_dequantize(void)
{
    const enum sw_type types[] = {SW_TYPE_F32,  SW_TYPE_F16,  SW_TYPE_BF16, SW_TYPE_Q4_0,
                                  SW_TYPE_Q4_1, SW_TYPE_Q5_0, SW_TYPE_Q5_1, SW_TYPE_Q8_0,
                                  SW_TYPE_Q4_K, SW_TYPE_Q5_K, SW_TYPE_Q6_K};
    const int64_t n = 512;
    float *out = malloc(n * sizeof(float));
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        size_t stride;
        uint8_t *row = s_row_alloc(types[k], n, 1, &stride);
        s_random_row(types[k], row, n);
        sw_dequantize_row(types[k], row, out, n);
        int bad = 0;
        for (int64_t e = 0; e < n; e++) {
            double ref = s_ref_elem(types[k], row, e);
            if (!(fabs(out[e] - ref) <= 1e-6 * fabs(ref) + 1e-12))
                bad++;
        }
        if (bad)
            fprintf(stderr, "dequantize %s: %d mismatches\n", sw_type_name(types[k]), bad);
        SW_CHECK_INT(bad, 0);
        free(row);
    }
    free(out);
}

static void test_quantize_by_hand(void)
{
    /* q8_0: amax 127 -> d = 1, id = 1, so q = x rounded half to even. */
    float x[64] = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 3.5f};
    /* second block: amax 16 -> d = 16/127 (f16 0x3008), id = 127/16 = 7.9375 */
    x[32] = -16.0f;
    x[33] = 1.0f;  // 7.9375 -> 8
    x[34] = 2.0f;  // 15.875 -> 16
    x[35] = 15.0f; // 119.0625 -> 119
    uint8_t q0[2 * 34], q1[2 * 36];
    for (int level = 0; level < 2; level++) {
        sw_quant_force_scalar(level == 0);
        SW_CHECK(sw_quantize_row(SW_TYPE_Q8_0, x, q0, 64) == 0);
        SW_CHECK(sw_quantize_row(SW_TYPE_Q8_1, x, q1, 64) == 0);
        const int8_t e0[8] = {127, 0, 2, 2, 0, -2, -2, 4};
        uint16_t d;
        memcpy(&d, q0, 2);
        SW_CHECK_INT(d, 0x3c00);
        memcpy(&d, q1, 2);
        SW_CHECK_INT(d, 0x3c00);
        memcpy(&d, q1 + 2, 2);
        SW_CHECK_INT(d, 0x5818); // s = 1 * 131
        for (int j = 0; j < 8; j++) {
            SW_CHECK_INT((int8_t)q0[2 + j], e0[j]);
            SW_CHECK_INT((int8_t)q1[4 + j], e0[j]);
        }
        for (int j = 8; j < 32; j++)
            SW_CHECK_INT((int8_t)q0[2 + j], 0);
        memcpy(&d, q0 + 34, 2);
        SW_CHECK_INT(d, 0x3008);
        const int8_t e1[4] = {-127, 8, 16, 119};
        for (int j = 0; j < 4; j++) {
            SW_CHECK_INT((int8_t)q0[34 + 2 + j], e1[j]);
            SW_CHECK_INT((int8_t)q1[36 + 4 + j], e1[j]);
        }
        /* s = f16(d * (-127 + 8 + 16 + 119)) = f16(16/127 * 16) = f16(2.015748) = 0x4008 */
        memcpy(&d, q1 + 36 + 2, 2);
        SW_CHECK_INT(d, 0x4008);
    }
    sw_quant_force_scalar(0);

    /* q8_K: the signed extreme -4 sets iscale = -127/-4 = 31.75. */
    float k[512] = {-4.0f, 1.0f, 2.0f, -2.0f, 3.0f};
    k[256] = 4.0f; // positive extreme: iscale = -31.75
    k[257] = -4.0f;
    k[258] = 1.0f;
    uint8_t qk[2 * 292];
    SW_CHECK(sw_quantize_row(SW_TYPE_Q8_K, k, qk, 512) == 0);
    float dk;
    memcpy(&dk, qk, 4);
    SW_CHECK(dk == (float)(4.0 / 127.0));
    const int8_t ek[5] = {-127, 32, 64, -64, 95}; // 31.75, 63.5 -> 64, -63.5 -> -64, 95.25
    for (int j = 0; j < 5; j++)
        SW_CHECK_INT((int8_t)qk[4 + j], ek[j]);
    int16_t bs[16];
    memcpy(bs, qk + 4 + 256, sizeof bs);
    SW_CHECK_INT(bs[0], -127 + 32 + 64 - 64 + 95);
    SW_CHECK_INT(bs[1], 0);
    memcpy(&dk, qk + 292, 4);
    SW_CHECK(dk == (float)(-4.0 / 127.0));
    SW_CHECK_INT((int8_t)qk[292 + 4], -127);
    SW_CHECK_INT((int8_t)qk[292 + 5], 127);
    SW_CHECK_INT((int8_t)qk[292 + 6], -32);
    memcpy(bs, qk + 292 + 4 + 256, sizeof bs);
    SW_CHECK_INT(bs[0], -32);

    /* All-zero block: d = 0 and zero quants. */
    float z[256] = {0};
    SW_CHECK(sw_quantize_row(SW_TYPE_Q8_K, z, qk, 256) == 0);
    memcpy(&dk, qk, 4);
    SW_CHECK(dk == 0.0f);
    SW_CHECK(sw_quantize_row(SW_TYPE_Q8_0, z, q0, 32) == 0);
    SW_CHECK_INT(q0[0] | q0[1] | q0[2] | q0[33], 0);

    /* Types that cannot be written. */
    SW_CHECK(sw_quantize_row(SW_TYPE_Q6_K, z, qk, 256) == -1);
}

static void test_quantize_levels_agree(void)
{
    const int64_t n = 4096;
    float *x = malloc(n * sizeof(float));
    uint8_t *a = malloc(n * 2), *b = malloc(n * 2);
    for (int64_t i = 0; i < n; i++)
        x[i] = s_uniform(-3.0f, 3.0f) * ((i / 32) % 3 == 0 ? 100.0f : 1.0f);
    const enum sw_type ts[] = {SW_TYPE_Q8_0, SW_TYPE_Q8_1, SW_TYPE_Q8_K, SW_TYPE_F16, SW_TYPE_BF16};
    for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) {
        uint64_t bytes;
        SW_CHECK(sw_type_row_bytes(ts[k], n, &bytes) == 0);
        sw_quant_force_scalar(1);
        SW_CHECK(sw_quantize_row(ts[k], x, a, n) == 0);
        sw_quant_force_scalar(0);
        SW_CHECK(sw_quantize_row(ts[k], x, b, n) == 0);
        SW_CHECK(memcmp(a, b, bytes) == 0);
    }
    /* Weight quantizers: every value within half a step of its input. */
    const enum sw_type ws[] = {SW_TYPE_Q4_0, SW_TYPE_Q4_1, SW_TYPE_Q8_0};
    float *y = malloc(n * sizeof(float));
    for (size_t k = 0; k < sizeof ws / sizeof ws[0]; k++) {
        SW_CHECK(sw_quantize_row(ws[k], x, a, n) == 0);
        sw_dequantize_row(ws[k], a, y, n);
        int bad = 0;
        for (int64_t blk = 0; blk < n / 32; blk++) {
            float lo = x[blk * 32], hi = lo;
            for (int j = 0; j < 32; j++) {
                lo = fminf(lo, x[blk * 32 + j]);
                hi = fmaxf(hi, x[blk * 32 + j]);
            }
            float amax = fmaxf(fabsf(lo), fabsf(hi));
            float step = ws[k] == SW_TYPE_Q4_1   ? (hi - lo) / 15
                         : ws[k] == SW_TYPE_Q4_0 ? amax / 8
                                                 : amax / 127;
            // q4_0 spans [-8, 7] steps: the extreme opposite the signed max clamps a full step
            float lim = (ws[k] == SW_TYPE_Q4_0 ? 1.01f : 0.51f) * step + 2e-3f * amax;
            for (int j = 0; j < 32; j++)
                if (!(fabsf(y[blk * 32 + j] - x[blk * 32 + j]) <= lim))
                    bad++;
        }
        if (bad)
            fprintf(stderr, "quantize %s: %d values off\n", sw_type_name(ws[k]), bad);
        SW_CHECK_INT(bad, 0);
    }
    free(x);
    free(y);
    free(a);
    free(b);
}

/* dot(w, x) computed as the CUDA kernel does: for quantized types 8 lanes,
 * each walking the blocks in order (wl once per weight block, step per
 * activation block), then combine; for f16/bf16/f32 32 lanes then combine. */
static float s_gpu_shaped_dot(enum sw_type t, int64_t n, const void *w, const void *x)
{
#define S_LANES(fmt, WB, XB, WL, qk)                                                               \
    do {                                                                                           \
        float la[8], la2[8];                                                                       \
        for (int k = 0; k < 8; k++) {                                                              \
            la[k] = la2[k] = 0.0f;                                                                 \
            for (int64_t b = 0; b < n / (qk); b++) {                                               \
                WL wl;                                                                             \
                sw_##fmt##_wl((const WB *)w + b, k, &wl);                                          \
                sw_##fmt##_step(&wl, (const XB *)x + b, k, &la[k], &la2[k]);                       \
            }                                                                                      \
        }                                                                                          \
        return sw_##fmt##_combine(la, la2);                                                        \
    } while (0)
    float acc[32];
    const int64_t np = n & ~(int64_t)31;
    switch (t) {
    case SW_TYPE_Q4_0:
        S_LANES(q4_0, sw_block_q4_0, sw_block_q8_0, sw_wl_q4_0, 32);
    case SW_TYPE_Q4_1:
        S_LANES(q4_1, sw_block_q4_1, sw_block_q8_1, sw_wl_q4_1, 32);
    case SW_TYPE_Q5_0:
        S_LANES(q5_0, sw_block_q5_0, sw_block_q8_0, sw_wl_q5, 32);
    case SW_TYPE_Q5_1:
        S_LANES(q5_1, sw_block_q5_1, sw_block_q8_1, sw_wl_q5, 32);
    case SW_TYPE_Q8_0:
        S_LANES(q8_0, sw_block_q8_0, sw_block_q8_0, sw_wl_q8_0, 32);
    case SW_TYPE_Q4_K:
        S_LANES(q4_k, sw_block_q4_k, sw_block_q8_k, sw_wl_q4_k, 256);
    case SW_TYPE_Q5_K:
        S_LANES(q5_k, sw_block_q5_k, sw_block_q8_k, sw_wl_q5_k, 256);
    case SW_TYPE_Q6_K:
        S_LANES(q6_k, sw_block_q6_k, sw_block_q8_k, sw_wl_q6_k, 256);
    case SW_TYPE_F16:
        for (int l = 0; l < 32; l++)
            acc[l] = sw_f16_lane(w, x, np, l);
        return sw_f16_combine(acc, w, x, n);
    case SW_TYPE_BF16:
        for (int l = 0; l < 32; l++)
            acc[l] = sw_bf16_lane(w, x, np, l);
        return sw_bf16_combine(acc, w, x, n);
    case SW_TYPE_F32:
        for (int l = 0; l < 32; l++)
            acc[l] = sw_f32_lane(w, x, np, l);
        return sw_f32_combine(acc, w, x, n);
    default:
        abort();
    }
#undef S_LANES
}

static void s_check_vec_dot(enum sw_type t, int64_t n, int trials)
{
    enum sw_type at = sw_type_vec_dot(t);
    float *x = malloc(n * sizeof(float)), *wd = malloc(n * sizeof(float)),
          *xd = malloc(n * sizeof(float));
    size_t ws, xs;
    uint8_t *w = s_row_alloc(t, n, 1, &ws), *xq = s_row_alloc(at, n, 1, &xs);
    int differ = 0;
    for (int trial = 0; trial < trials; trial++) {
        s_random_row(t, w, n);
        for (int64_t i = 0; i < n; i++)
            x[i] = s_uniform(-1.0f, 1.0f) * (trial & 1 ? 10.0f : 1.0f);
        SW_CHECK(sw_quantize_row(at, x, xq, n) == 0);
        sw_dequantize_row(t, w, wd, n);
        sw_dequantize_row(at, xq, xd, n);
        double exact = 0, mag = 0, qexact = 0, qmag = 0;
        for (int64_t i = 0; i < n; i++) {
            exact += (double)wd[i] * x[i];
            mag += fabs((double)wd[i] * x[i]);
            qexact += (double)wd[i] * xd[i];
            qmag += fabs((double)wd[i] * xd[i]);
        }
        float got[2];
        for (int level = 0; level < 2; level++) {
            sw_quant_force_scalar(level == 0);
            sw_vec_dot(t, n, &got[level], w, xq);
            // q4_1/q5_1 use the f16-rounded d*sum(q): allow 2e-3 of the magnitude
            SW_CHECK_NEAR(got[level], qexact, 2e-3 * qmag + 1e-6);
            SW_CHECK_NEAR(got[level], exact, 1e-2 * mag + 1e-6);
        }
        sw_quant_force_scalar(0);
        // both levels follow GGML's AVX2 arithmetic to the bit
        differ += memcmp(&got[0], &got[1], sizeof(float)) != 0;
        // and so does the GPU's formulation
        const float gpu = s_gpu_shaped_dot(t, n, w, xq);
        if (memcmp(&gpu, &got[1], sizeof gpu) != 0) {
            fprintf(stderr, "vec_dot %s n=%lld: GPU-shaped %.9g, CPU %.9g\n", sw_type_name(t),
                    (long long)n, (double)gpu, (double)got[1]);
            differ++;
        }
    }
    if (differ)
        fprintf(stderr, "vec_dot %s n=%lld: scalar and %s differ in %d of %d\n", sw_type_name(t),
                (long long)n, sw_cpu_kernels(), differ, trials);
    SW_CHECK_INT(differ, 0);
    free(w);
    free(xq);
    free(x);
    free(wd);
    free(xd);
}

static void test_vec_dot(void)
{
    for (int k = 0; k < N_WTYPES; k++) {
        enum sw_type t = s_weight_types[k];
        s_check_vec_dot(t, 1536, 8);
        s_check_vec_dot(t, sw_type_block_elems(t) == 256 ? 256 : 64, 8);
        if (sw_type_block_elems(t) == 1) { // tails of the 32-element SIMD steps
            for (int64_t n = 65; n < 96; n += 2)
                s_check_vec_dot(t, n, 2);
        }
    }
}

static void test_matmul_bit_identical(void)
{
    const int rows = 37, nx = 65;
    for (int k = 0; k < N_WTYPES; k++) {
        enum sw_type t = s_weight_types[k], at = sw_type_vec_dot(t);
        const int64_t n = sw_type_block_elems(t) == 256 ? 512 : 96;
        size_t ws, xs;
        uint8_t *w = s_row_alloc(t, n, rows, &ws), *xq = s_row_alloc(at, n, nx, &xs);
        float *xf = malloc(n * sizeof(float));
        for (int o = 0; o < rows; o++)
            s_random_row(t, w + o * ws, n);
        for (int r = 0; r < nx; r++) {
            for (int64_t i = 0; i < n; i++)
                xf[i] = s_uniform(-2.0f, 2.0f);
            SW_CHECK(sw_quantize_row(at, xf, xq + r * xs, n) == 0);
        }
        const int64_t ystride = rows + 3;
        float *y = malloc(sizeof(float) * ystride * nx), *ref = malloc(sizeof(float) * rows * nx);
        float *ref0 = malloc(sizeof(float) * rows * nx);
        for (int level = 0; level < 2; level++) {
            sw_quant_force_scalar(level == 0);
            for (int r = 0; r < nx; r++)
                for (int o = 0; o < rows; o++)
                    sw_vec_dot(t, n, &ref[r * rows + o], w + o * ws, xq + r * xs);
            if (level == 0)
                memcpy(ref0, ref, sizeof(float) * rows * nx);
            else // the scalar and SIMD levels agree to the bit
                SW_CHECK(memcmp(ref0, ref, sizeof(float) * rows * nx) == 0);
            const int ranges[][2] = {{0, 37}, {3, 30}, {5, 6}, {1, 8}, {36, 37}, {2, 13}};
            int bad = 0;
            for (int nr = 1; nr <= nx; nr++) {
                for (size_t q = 0; q < sizeof ranges / sizeof ranges[0]; q++) {
                    if (nr > 9 && nr % 8 != 1 && q > 1)
                        continue; // keep the test quick: odd ranges for small and 8k+1 batches
                    int o0 = ranges[q][0], o1 = ranges[q][1];
                    for (int64_t i = 0; i < ystride * nx; i++)
                        y[i] = -12345.0f;
                    sw_matmul(t, n, w, ws, o0, o1, xq, xs, nr, y, ystride);
                    for (int r = 0; r < nx; r++)
                        for (int o = 0; o < (int)ystride; o++) {
                            int inside = r < nr && o >= o0 && o < o1;
                            float want = inside ? ref[r * rows + o] : -12345.0f;
                            bad += memcmp(&y[r * ystride + o], &want, 4) != 0;
                        }
                }
            }
            if (bad)
                fprintf(stderr, "matmul %s (%s): %d mismatches\n", sw_type_name(t),
                        sw_cpu_kernels(), bad);
            SW_CHECK_INT(bad, 0);
        }
        sw_quant_force_scalar(0);
        free(w);
        free(xq);
        free(xf);
        free(y);
        free(ref);
        free(ref0);
    }
}

/* Long K-quant rows (40 super-blocks): the AVX2 matmul then splits the
 * activation rows into chunks that fit its per-call scratch; every chunk and
 * group size must still give sw_vec_dot's bits. */
static void test_matmul_long_rows(void)
{
    const enum sw_type types[] = {SW_TYPE_Q4_K, SW_TYPE_Q5_K, SW_TYPE_Q6_K};
    const int rows = 6, nx = 70, nrs[] = {1, 2, 9, 17, 51, 52, 70};
    const int64_t n = 40 * 256;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        enum sw_type t = types[k], at = sw_type_vec_dot(t);
        size_t ws, xs;
        uint8_t *w = s_row_alloc(t, n, rows, &ws), *xq = s_row_alloc(at, n, nx, &xs);
        float *xf = malloc(n * sizeof(float));
        float *y = malloc(sizeof(float) * rows * nx), *ref = malloc(sizeof(float) * rows * nx);
        for (int o = 0; o < rows; o++)
            s_random_row(t, w + o * ws, n);
        for (int r = 0; r < nx; r++) {
            for (int64_t i = 0; i < n; i++)
                xf[i] = s_uniform(-2.0f, 2.0f);
            SW_CHECK(sw_quantize_row(at, xf, xq + r * xs, n) == 0);
        }
        for (int r = 0; r < nx; r++)
            for (int o = 0; o < rows; o++)
                sw_vec_dot(t, n, &ref[r * rows + o], w + o * ws, xq + r * xs);
        int bad = 0;
        for (size_t q = 0; q < sizeof nrs / sizeof nrs[0]; q++) {
            for (int i = 0; i < rows * nx; i++)
                y[i] = -12345.0f;
            sw_matmul(t, n, w, ws, 1, rows, xq, xs, nrs[q], y, rows);
            for (int r = 0; r < nx; r++)
                for (int o = 0; o < rows; o++) {
                    float want = r < nrs[q] && o >= 1 ? ref[r * rows + o] : -12345.0f;
                    bad += memcmp(&y[r * rows + o], &want, 4) != 0;
                }
        }
        if (bad)
            fprintf(stderr, "long-row matmul %s (%s): %d mismatches\n", sw_type_name(t),
                    sw_cpu_kernels(), bad);
        SW_CHECK_INT(bad, 0);
        free(w);
        free(xq);
        free(xf);
        free(y);
        free(ref);
    }
}

/* The shared host/device code the CUDA kernels run, against the CPU's. */
static void test_shared_math(void)
{
    /* Element j of a row = sw_dequantize_row (the GPU's embedding lookup). */
    for (int k = 0; k < N_WTYPES; k++) {
        enum sw_type t = s_weight_types[k];
        const int64_t n = 512;
        size_t ws;
        uint8_t *w = s_row_alloc(t, n, 1, &ws);
        float *ref = malloc(n * sizeof *ref);
        s_random_row(t, w, n);
        sw_dequantize_row(t, w, ref, n);
        int bad = 0;
        for (int64_t j = 0; j < n; j++) {
            const float v = sw_deq_elem(t, w, j);
            bad += memcmp(&v, &ref[j], sizeof v) != 0;
        }
        if (bad)
            fprintf(stderr, "sw_deq_elem %s: %d of %lld elements differ\n", sw_type_name(t), bad,
                    (long long)n);
        SW_CHECK_INT(bad, 0);
        free(w);
        free(ref);
    }

    /* The activation quantizers block by block = the rows of the best kernel level. */
    const enum sw_type acts[] = {SW_TYPE_Q8_0, SW_TYPE_Q8_1, SW_TYPE_Q8_K};
    for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++) {
        const int64_t n = 1024, qk = sw_type_block_elems(acts[a]);
        const size_t bb = sw_type_block_bytes(acts[a]);
        float *x = malloc(n * sizeof *x);
        size_t rs;
        uint8_t *row = s_row_alloc(acts[a], n, 1, &rs), *blk = s_row_alloc(acts[a], n, 1, &rs);
        for (int trial = 0; trial < 20; trial++) {
            for (int64_t i = 0; i < n; i++)
                x[i] = trial == 0   ? 0.0f
                       : trial == 1 ? (i % 5 == 3   ? -2.5f
                                       : i % 7 == 1 ? 2.5f
                                                    : 0.5f)            // ties
                       : trial == 2 ? (i % 256 == 255 ? 1e-30f : 0.0f) // one tiny value
                                    : s_uniform(-3.0f, 3.0f) * (trial % 3 ? 1.0f : 100.0f);
            SW_CHECK(sw_quantize_row(acts[a], x, row, n) == 0);
            for (int64_t b = 0; b < n / qk; b++) {
                if (acts[a] == SW_TYPE_Q8_0)
                    sw_quant_block_q8_0(x + b * qk, (sw_block_q8_0 *)(blk + b * bb));
                else if (acts[a] == SW_TYPE_Q8_1)
                    sw_quant_block_q8_1(x + b * qk, (sw_block_q8_1 *)(blk + b * bb));
                else
                    sw_quant_block_q8_k(x + b * qk, (sw_block_q8_k *)(blk + b * bb));
            }
            SW_CHECK(memcmp(row, blk, rs) == 0);
        }
        free(x);
        free(row);
        free(blk);
    }

    /* Attention's f16 dot products split the way the kernels split them. */
    sw_f16 a[300], b[300];
    int bad_dot = 0;
    for (int trial = 0; trial < 200; trial++) {
        const int n = 1 + (int)(s_rand() % 299);
        for (int i = 0; i < n; i++) {
            a[i] = sw_f32_to_f16(s_uniform(-2.0f, 2.0f));
            b[i] = sw_f32_to_f16(s_uniform(0.0f, 1.0f));
        }
        for (int pad = 0; pad < 2; pad++) {
            const float ref = sw_dot_f16_4x8(a, b, n, pad);
            float acc[32];
            for (int t = 0; t < 32; t++) { // lane t takes elements t, t+32, ...
                acc[t] = 0.0f;
                for (int i = t; i < (pad ? n : (n & ~31)); i += 32)
                    acc[t] = fmaf(sw_h2f(a[i]), sw_h2f(b[i]), acc[t]);
            }
            double sum = sw_reduce4x8(acc);
            for (int i = n & ~31; !pad && i < n; i++)
                sum += (double)(sw_h2f(a[i]) * sw_h2f(b[i]));
            const float split = (float)sum;
            bad_dot += memcmp(&split, &ref, sizeof ref) != 0;
#ifdef HAVE_X86
            if (sw_quant_level() >= SW_KLEVEL_AVX2) {
                const float v = sw_cpu_dot_f16_avx2(a, b, n, pad);
                bad_dot += memcmp(&v, &ref, sizeof ref) != 0;
            }
#endif
        }
        const float tref = sw_dot_f16_tiled(a, b, n);
        float lane[8];
        for (int l = 0; l < 8; l++) {
            lane[l] = 0.0f;
            for (int i = l; i < n; i += 8)
                lane[l] = fmaf(sw_h2f(a[i]), sw_h2f(b[i]), lane[l]);
        }
        const float tsplit = sw_hsum8(lane);
        bad_dot += memcmp(&tsplit, &tref, sizeof tref) != 0;
#ifdef HAVE_X86
        if (sw_quant_level() >= SW_KLEVEL_AVX2) {
            const float v = sw_cpu_dot_f16_tiled_avx2(a, b, n);
            bad_dot += memcmp(&v, &tref, sizeof tref) != 0;
        }
#endif
    }
    SW_CHECK_INT(bad_dot, 0);

#ifdef HAVE_X86
    /* The prompt attention's dots 8 rows at a time = one at a time, bit for
     * bit: row counts around multiples of 8, lengths with and without a tail,
     * rows wider than n whose extra elements are NaN (never read). */
    if (sw_quant_level() >= SW_KLEVEL_AVX2) {
        enum { W = 304, NR = 19 };
        sw_f16 *rows = malloc(sizeof(sw_f16) * W * NR);
        float bf[W], out[NR];
        int bad_dots = 0;
        for (int trial = 0; trial < 120; trial++) {
            const int n = trial < 3 ? 8 * (trial + 1) : 1 + (int)(s_rand() % 299);
            const int na = 1 + trial % NR;
            for (int i = 0; i < W * NR; i++)
                rows[i] = (i % W) < n ? sw_f32_to_f16(s_uniform(-3.0f, 3.0f)) : (sw_f16)0x7E00;
            for (int i = 0; i < n; i++) {
                b[i] = sw_f32_to_f16(trial % 4 ? s_uniform(0.0f, 1.0f) : s_uniform(-9.0f, 9.0f));
                bf[i] = sw_h2f(b[i]);
            }
            sw_cpu_dots_f16_tiled_avx2(rows, W, na, bf, n, out);
            for (int j = 0; j < na; j++) {
                const float want = sw_dot_f16_tiled(rows + j * W, b, n);
                bad_dots += memcmp(&out[j], &want, sizeof want) != 0;
            }
        }
        SW_CHECK_INT(bad_dots, 0);
        free(rows);
    }

    /* GGML's exp: the scalar code = the AVX2 kernel, including the slow paths. */
    if (sw_quant_level() >= SW_KLEVEL_AVX2) {
        int bad_exp = 0;
        for (int trial = 0; trial < 4000; trial++) {
            float v[8], e[8];
            for (int l = 0; l < 8; l++)
                v[l] = trial == 0 ? (l == 0 ? -INFINITY : -200.0f + 60.0f * l)
                                  : s_uniform(-100.0f, 100.0f) * (trial % 2 ? 1.0f : 0.01f);
            sw_cpu_expf8_avx2(v, e);
            for (int l = 0; l < 8; l++) {
                const float s1 = sw_expf_ggml(v[l]);
                bad_exp += memcmp(&s1, &e[l], sizeof s1) != 0;
            }
        }
        SW_CHECK_INT(bad_exp, 0);
        SW_CHECK(sw_expf_ggml(-INFINITY) == 0.0f);
    }
#endif

    /* A parallel double sum is accepted only when it rounds like the loop. */
    int accepted = 0, wrong = 0;
    float *x = malloc(4096 * sizeof *x);
    for (int trial = 0; trial < 3000; trial++) {
        const int m = 1 + (int)(s_rand() % 4096);
        for (int i = 0; i < m; i++)
            x[i] = s_uniform(-1.0f, 1.0f) * (float)(1 << (s_rand() % 20)) * 1e-3f;
        double part[256];
        for (int t = 0; t < 256; t++) { // 256 threads, elements t, t+256, ...
            part[t] = 0.0;
            for (int i = t; i < m; i += 256)
                part[t] += (double)(x[i] * x[i]);
        }
        for (int w = 128; w > 0; w /= 2) // the kernel's tree
            for (int t = 0; t < w; t++)
                part[t] += part[t + w];
        const double seq = sw_sumsq_seq(x, m);
        float mean, arg, inv;
        if (sw_rms_mean_stable(part[0], m, m, &mean)) {
            accepted++;
            wrong += mean != sw_rms_mean(seq, m);
        }
        if (sw_head_norm_stable(part[0], m, m, 1e-6f, &arg))
            wrong += arg != sw_head_norm_arg(seq, m, 1e-6f);
        if (part[0] > 0 && sw_softmax_inv_stable(part[0], m, &inv))
            wrong += inv != sw_softmax_inv(seq);
    }
    free(x);
    SW_CHECK_INT(wrong, 0);
    SW_CHECK(accepted > 2900); /* the fallback is rare */
    /* A sum exactly at a rounding boundary is never accepted. */
    const float f = 1.5f, next = nextafterf(f, 2.0f);
    const double mid = ((double)f + (double)next) / 2;
    float out;
    SW_CHECK(!sw_rms_mean_stable(mid * 1000, 1000, 1000, &out));
    SW_CHECK(sw_rms_mean_stable((double)f * 1000, 1000, 1000, &out) && out == f);
    SW_CHECK(!sw_softmax_inv_stable(1.0 / mid, 10, &out));
}

/* sw_matmul_tiled (llama.cpp's tiled K-quant order, used for prompt windows
 * of 8 rows or more): the scalar and SIMD levels agree to the bit, each
 * element depends only on its two rows (any batch size, any output range),
 * the value is close to the exact dot product, and for the K-quants it is a
 * different rounding from sw_matmul's (else the flag would be pointless);
 * other types give exactly sw_matmul. The bits themselves are checked against
 * llama.cpp by tests/slow/test_greedy_qwen.c (bit-identical prompt logits). */
static void test_matmul_tiled(void)
{
    const int rows = 37, nx = 20;
    for (int k = 0; k < N_WTYPES; k++) {
        enum sw_type t = s_weight_types[k], at = sw_type_vec_dot(t);
        const int kq = sw_type_block_elems(t) == 256;
        const int64_t n = kq ? 1536 : 96;
        size_t ws, xs;
        uint8_t *w = s_row_alloc(t, n, rows, &ws), *xq = s_row_alloc(at, n, nx, &xs);
        float *xf = malloc(n * sizeof(float)), *wd = malloc(n * sizeof(float)),
              *xd = malloc(n * sizeof(float));
        for (int o = 0; o < rows; o++)
            s_random_row(t, w + o * ws, n);
        for (int r = 0; r < nx; r++) {
            for (int64_t i = 0; i < n; i++)
                xf[i] = s_uniform(-2.0f, 2.0f) * (r & 1 ? 10.0f : 1.0f);
            SW_CHECK(sw_quantize_row(at, xf, xq + r * xs, n) == 0);
        }
        float *ref[2], *plain = malloc(sizeof(float) * rows * nx);
        float *y = malloc(sizeof(float) * rows * nx);
        int bad = 0, differ = 0, far = 0;
        for (int level = 0; level < 2; level++) {
            sw_quant_force_scalar(level == 0);
            ref[level] = malloc(sizeof(float) * rows * nx);
            for (int r = 0; r < nx; r++)
                for (int o = 0; o < rows; o++)
                    sw_matmul_tiled(t, n, w, ws, o, o + 1, xq + r * xs, xs, 1,
                                    ref[level] + r * rows, rows);
            for (int nr = 1; nr <= nx; nr++) {
                const int o0 = nr % 3, o1 = rows - nr % 5;
                sw_matmul_tiled(t, n, w, ws, o0, o1, xq, xs, nr, y, rows);
                for (int r = 0; r < nr; r++)
                    for (int o = o0; o < o1; o++)
                        bad += memcmp(&y[r * rows + o], &ref[level][r * rows + o], 4) != 0;
            }
        }
        sw_quant_force_scalar(0);
        sw_matmul(t, n, w, ws, 0, rows, xq, xs, nx, plain, rows);
        for (int r = 0; r < nx; r++) {
            sw_dequantize_row(at, xq + r * xs, xd, n);
            for (int o = 0; o < rows; o++) {
                sw_dequantize_row(t, w + o * ws, wd, n);
                double exact = 0, mag = 0;
                for (int64_t i = 0; i < n; i++) {
                    exact += (double)wd[i] * xd[i];
                    mag += fabs((double)wd[i] * xd[i]);
                }
                const float v = ref[1][r * rows + o];
                far += fabs(v - exact) > 2e-3 * mag + 1e-6;
                differ += memcmp(&v, &plain[r * rows + o], 4) != 0;
            }
        }
        SW_CHECK_INT(memcmp(ref[0], ref[1], sizeof(float) * rows * nx), 0);
        SW_CHECK_INT(bad, 0);
        SW_CHECK_INT(far, 0);
        if (kq)
            SW_CHECK(differ > 0);
        else
            SW_CHECK_INT(differ, 0);
        fprintf(stderr, "matmul_tiled %s: %d of %d elements round differently from sw_matmul\n",
                sw_type_name(t), differ, rows * nx);
        free(ref[0]);
        free(ref[1]);
        free(plain);
        free(y);
        free(w);
        free(xq);
        free(xf);
        free(wd);
        free(xd);
    }
}

/* A K-quant row at the integer extremes: every quant at its largest value,
 * every scale and minimum at its largest (q6_K: alternately -128 and 127),
 * the super-scales small; the tiled kernels' int32 totals are then as large
 * as real weights can make them. q4_0 and q8_0: blocks alternately of the
 * largest and the smallest quants (q4_0 7 and -8, q8_0 127 and -128). */
static void s_extreme_row(enum sw_type t, uint8_t *row, int64_t n)
{
    uint64_t bytes;
    if (sw_type_row_bytes(t, n, &bytes) != 0)
        abort();
    memset(row, 0xFF, (size_t)bytes);
    const size_t bb = sw_type_block_bytes(t);
    if (t == SW_TYPE_Q4_0 || t == SW_TYPE_Q8_0) {
        for (int64_t b = 0; b < n / 32; b++) {
            uint8_t *p = row + b * bb;
            memset(p + 2, t == SW_TYPE_Q4_0 ? (b % 2 ? 0x00 : 0xFF) : (b % 2 ? 0x80 : 0x7F),
                   bb - 2);
            s_put_h(p, 0.001f);
        }
        return;
    }
    for (int64_t b = 0; b < n / 256; b++) {
        uint8_t *p = row + b * bb;
        if (t == SW_TYPE_Q6_K) {
            for (int j = 0; j < 16; j++)
                p[192 + j] = j & 1 ? 0x7F : 0x80;
            s_put_h(p + 208, 0.0005f);
        } else {
            s_put_h(p, 0.001f);
            s_put_h(p + 2, 0.002f);
        }
    }
}

/* rows weight rows of n elements of type t, ws bytes apart: random or extreme. */
static void s_weight_rows(enum sw_type t, uint8_t *w, size_t ws, int64_t n, int rows, int extreme)
{
    for (int o = 0; o < rows; o++) {
        if (extreme)
            s_extreme_row(t, w + o * ws, n);
        else
            s_random_row(t, w + o * ws, n);
    }
}

typedef void (*s_mm_fn)(enum sw_type t, int64_t n, const void *w, size_t w_stride, int64_t o0,
                        int64_t o1, const void *x, size_t x_stride, int nr, float *y,
                        int64_t y_stride);

/* Every SIMD level's mm (sw_matmul_tiled or sw_matmul) of weight type t against
 * the scalar level's one-pair results, bit for bit: rows of n elements, 53
 * weight rows, 40 activation rows of the vec-dot type, the batch sizes nrs
 * over the output ranges below, a y stride wider than the output; random or
 * extreme weights and activations. */
static void s_levels_case(s_mm_fn mm, const char *what, enum sw_type t, int64_t n, int extreme,
                          const int *nrs, size_t nnrs)
{
    const int rows = 53, nx = 40;
    const int ranges[][2] = {{0, 53}, {3, 50}, {16, 32}, {17, 18}, {5, 37}, {31, 53}};
    const enum sw_kernel_level best = sw_quant_best_level();
    const enum sw_type xt = sw_type_vec_dot(t);
    const int64_t ys = rows + 5;
    size_t ws, xs;
    uint8_t *w = s_row_alloc(t, n, rows, &ws);
    uint8_t *xq = s_row_alloc(xt, n, nx, &xs);
    float *xf = malloc(n * sizeof(float)), *ref = malloc(sizeof(float) * rows * nx);
    float *y = malloc(sizeof(float) * ys * nx);
    s_weight_rows(t, w, ws, n, rows, extreme);
    for (int r = 0; r < nx; r++) {
        for (int64_t i = 0; i < n; i++)
            xf[i] = extreme ? ((i + r) % 3 == 0 ? -1.0f : 1.0f)
                            : s_uniform(-2.0f, 2.0f) * (r % 3 ? 1.0f : 30.0f);
        SW_CHECK(sw_quantize_row(xt, xf, xq + r * xs, n) == 0);
    }
    sw_quant_force_scalar(1);
    for (int r = 0; r < nx; r++)
        for (int o = 0; o < rows; o++)
            mm(t, n, w, ws, o, o + 1, xq + r * xs, xs, 1, ref + r * rows, rows);
    for (int lv = SW_KLEVEL_AVX2; lv <= (int)best; lv++) {
        SW_CHECK(sw_quant_force_level((enum sw_kernel_level)lv) == 0);
        int bad = 0;
        for (size_t q = 0; q < nnrs; q++) {
            const int o0 = ranges[q % 6][0], o1 = ranges[q % 6][1];
            for (int64_t i = 0; i < ys * nx; i++)
                y[i] = -12345.0f;
            mm(t, n, w, ws, o0, o1, xq, xs, nrs[q], y, ys);
            for (int r = 0; r < nx; r++)
                for (int o = 0; o < ys; o++) {
                    const int in = r < nrs[q] && o >= o0 && o < o1;
                    const float want = in ? ref[r * rows + o] : -12345.0f;
                    bad += memcmp(&y[r * ys + o], &want, 4) != 0;
                }
        }
        if (bad)
            fprintf(stderr, "%s %s n=%lld%s (%s): %d mismatches\n", what, sw_type_name(t),
                    (long long)n, extreme ? " extreme" : "", sw_cpu_kernels(), bad);
        SW_CHECK_INT(bad, 0);
    }
    sw_quant_force_scalar(0);
    void *bufs[] = {w, xq, xf, ref, y};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
}

/* Each kernel level's sw_matmul_tiled against the scalar level's one-pair
 * results, bit for bit, on shapes that miss every blocking boundary of the
 * SIMD kernels: rows of 1, 3, 5 and 9 super-blocks (the AVX-512 kernel works
 * in slabs of 4), output ranges that start and end inside its panels of 16
 * weight rows and tiles of 32, 8 to 40 activation rows (it takes them 8 at a
 * time; below SW_MMTW_ROWS = 16 the AVX2 kernel runs; the AMX level takes 16
 * at a time from SW_AMX_ROWS = 10 on), a y stride wider than
 * the output, and random as well as extreme weights and activations. */
static void test_tiled_levels(void)
{
    const enum sw_type types[] = {SW_TYPE_Q4_K, SW_TYPE_Q5_K, SW_TYPE_Q6_K};
    const int64_t ns[] = {256, 768, 1280, 2304};
    const int nrs[] = {16, 17, 23, 24, 25, 33, 40, 8, 12};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
            for (int extreme = 0; extreme < 2; extreme++)
                s_levels_case(sw_matmul_tiled, "tiled", types[ti], ns[ni], extreme, nrs,
                              sizeof nrs / sizeof nrs[0]);
    /* Long rows: the AVX2 kernel's tables of activation blocks hold fewer
     * groups of rows per pass (40 blocks: 6 groups of 8 rows) or a row in
     * slices of blocks, each slice's sums continued from y (300 blocks). */
    const int nrs_long[] = {40, 9, 17};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti += 2) {
        s_levels_case(sw_matmul_tiled, "tiled", types[ti], 40 * 256, 0, nrs_long, 3);
        s_levels_case(sw_matmul_tiled, "tiled", types[ti], 300 * 256, 0, nrs_long + 1, 2);
    }
}

/* test_onerow_levels for one weight type t. */
static void s_onerow_type(enum sw_type t, const int64_t *ns, size_t nns, int rows, int nx,
                          const int (*ranges)[2], size_t nranges, enum sw_kernel_level best)
{
    const enum sw_type xt = sw_type_vec_dot(t);
    for (size_t ni = 0; ni < nns; ni++) {
        for (int extreme = 0; extreme < 2; extreme++) {
            const int64_t n = ns[ni];
            size_t ws, xs;
            uint8_t *w = s_row_alloc(t, n, rows, &ws);
            uint8_t *xq = s_row_alloc(xt, n, nx, &xs);
            float *xf = malloc(n * sizeof(float)), *ref = malloc(sizeof(float) * rows * nx);
            float *y = malloc(sizeof(float) * (rows + 2));
            s_weight_rows(t, w, ws, n, rows, extreme);
            for (int r = 0; r < nx; r++) {
                for (int64_t i = 0; i < n; i++)
                    xf[i] = extreme ? (r == 0   ? -1.0f
                                       : r == 1 ? 1.0f
                                                : ((i / 3) % 2 ? -1.0f : 1.0f))
                                    : s_uniform(-2.0f, 2.0f) * (r % 2 ? 1.0f : 30.0f);
                SW_CHECK(sw_quantize_row(xt, xf, xq + r * xs, n) == 0);
            }
            sw_quant_force_scalar(1);
            for (int r = 0; r < nx; r++)
                for (int o = 0; o < rows; o++)
                    sw_vec_dot(t, n, &ref[r * rows + o], w + o * ws, xq + r * xs);
            for (int lv = SW_KLEVEL_AVX2; lv <= (int)best; lv++) {
                SW_CHECK(sw_quant_force_level((enum sw_kernel_level)lv) == 0);
                int bad = 0;
                for (int r = 0; r < nx; r++) {
                    for (size_t q = 0; q < nranges; q++) {
                        const int o0 = ranges[q][0], o1 = ranges[q][1];
                        for (int o = 0; o < rows + 2; o++)
                            y[o] = -12345.0f;
                        sw_matmul(t, n, w, ws, o0, o1, xq + r * xs, xs, 1, y, rows + 2);
                        for (int o = 0; o < rows + 2; o++) {
                            const int in = o >= o0 && o < o1;
                            const float want = in ? ref[r * rows + o] : -12345.0f;
                            bad += memcmp(&y[o], &want, 4) != 0;
                        }
                    }
                    for (int o = 0; o < rows; o++) {
                        float v;
                        sw_vec_dot(t, n, &v, w + o * ws, xq + r * xs);
                        bad += memcmp(&v, &ref[r * rows + o], 4) != 0;
                    }
                }
                if (bad)
                    fprintf(stderr, "one-row %s n=%lld%s (%s): %d mismatches\n", sw_type_name(t),
                            (long long)n, extreme ? " extreme" : "", sw_cpu_kernels(), bad);
                SW_CHECK_INT(bad, 0);
            }
            sw_quant_force_scalar(0);
            free(w);
            free(xq);
            free(xf);
            free(ref);
            free(y);
        }
    }
}

/* Generation's one-row matmul (nr = 1; the AVX-512 level has its own kernels
 * for q4_K, q5_K, q6_K, q4_0, q5_0, q4_1, q5_1 and q8_0, 2 or 4 weight rows at a time) at each
 * kernel level against the scalar level's sw_vec_dot, bit for bit: rows of 8 to 72 blocks (1, 3, 6
 * and 9 super-blocks), output ranges that start and end inside its groups of rows and cross the
 * groups its prefetch reads ahead, random as well as extreme weights and activations (all quants at
 * their largest against -128 and 127: the sums it joins as int16 pairs at their largest; q8_0
 * weights of -128), and sw_vec_dot itself at every level. */
static void test_onerow_levels(void)
{
    const int64_t ns[] = {256, 768, 1536, 2304};
    const int rows = 45, nx = 3;
    const int ranges[][2] = {{0, 45}, {1, 44}, {3, 4}, {2, 9}, {5, 38}, {40, 45}, {6, 8}};
    const enum sw_kernel_level best = sw_quant_best_level();
    const enum sw_type types[] = {SW_TYPE_Q4_K, SW_TYPE_Q5_K, SW_TYPE_Q6_K, SW_TYPE_Q4_0,
                                  SW_TYPE_Q5_0, SW_TYPE_Q4_1, SW_TYPE_Q5_1, SW_TYPE_Q8_0};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        s_onerow_type(types[ti], ns, sizeof ns / sizeof ns[0], rows, nx, ranges,
                      sizeof ranges / sizeof ranges[0], best);
    }
}

/* Batches of activation rows (prompts, verification) of q8_0 and q4_0
 * weights: from SW_MMB_ROWS rows on, the AVX-512 level runs its batch kernels
 * (panels of 16 weight rows, the activation rows 1 to 3 at a time). Every
 * level's sw_matmul against the scalar level's sw_vec_dot, bit for bit: rows
 * of 1, 3, 47 and 48 blocks (the kernel unpacks 2 blocks at a time), output
 * ranges that start and end inside its panels, batch sizes around
 * SW_MMB_ROWS and every remainder of its groups of 3, a y stride wider than
 * the output, random and extreme weights and activations. */
static void test_batch_levels(void)
{
    /* The 32-element types: up to 15 activation rows the AVX-512 level's kernels of
     * quant_mv_avx512.c (a weight block unpacked once for up to 4 activation rows), 16
     * or more its panels (quant_mm_avx512.c; q4_0, q5_0, q8_0), the rest the AVX2
     * level's. */
    const enum sw_type types[] = {SW_TYPE_Q8_0, SW_TYPE_Q4_0, SW_TYPE_Q5_0, SW_TYPE_Q4_1,
                                  SW_TYPE_Q5_1};
    const int64_t ns[] = {32, 96, 1504, 1536};
    const int nrs[] = {SW_MMB_ROWS - 1, SW_MMB_ROWS, 17, 18, 19, 23, 40, 9, 2, 3, 4, 5, 6, 7, 8};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
            for (int extreme = 0; extreme < 2; extreme++)
                s_levels_case(sw_matmul, "batch", types[ti], ns[ni], extreme, nrs,
                              sizeof nrs / sizeof nrs[0]);
    /* The K-quants: up to 8 activation rows the AVX-512 level's kernels of
     * quant_mv_avx512.c (a weight super-block unpacked once for up to 4
     * activation rows: 5 = 3 + 2, 7 = 4 + 3, ...), more the AVX2 level's; odd
     * output ranges leave a weight row alone. */
    const enum sw_type ktypes[] = {SW_TYPE_Q4_K, SW_TYPE_Q5_K, SW_TYPE_Q6_K};
    const int64_t kns[] = {256, 768, 2304};
    const int knrs[] = {2, 3, 4, 5, 6, 7, 8, 9, 1, 17, 5, 3};
    for (size_t ti = 0; ti < sizeof ktypes / sizeof ktypes[0]; ti++)
        for (size_t ni = 0; ni < sizeof kns / sizeof kns[0]; ni++)
            for (int extreme = 0; extreme < 2; extreme++)
                s_levels_case(sw_matmul, "batch", ktypes[ti], kns[ni], extreme, knrs,
                              sizeof knrs / sizeof knrs[0]);
}

/* Start-up dispatch picks the best level the CPU offers: AMX (AMX-TILE and
 * AMX-INT8 over the AVX-512 level, as /proc/cpuinfo lists them; Linux lists
 * them only where it saves the tile state), AVX-512 (F, BW, VL, DQ and VNNI)
 * when it is there, else AVX2 with FMA and F16C; SW_CPU caps it. */
static void test_dispatch(void)
{
    char line[8192];
    int f512 = 0, favx2 = 0, famx = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL) {
        fprintf(stderr, "dispatch: no /proc/cpuinfo, not checked\n");
        return;
    }
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "flags", 5) != 0)
            continue;
        const char *want512[] = {" avx512f ", " avx512bw ", " avx512vl ", " avx512dq ",
                                 " avx512_vnni "};
        const char *want2[] = {" avx2 ", " fma ", " f16c "};
        char *nl = strchr(line, '\n');
        if (nl != NULL)
            strcpy(nl, " ");
        f512 = favx2 = 1;
        for (size_t i = 0; i < sizeof want512 / sizeof want512[0]; i++)
            f512 &= strstr(line, want512[i]) != NULL;
        for (size_t i = 0; i < sizeof want2 / sizeof want2[0]; i++)
            favx2 &= strstr(line, want2[i]) != NULL;
        famx = strstr(line, " amx_tile ") != NULL && strstr(line, " amx_int8 ") != NULL;
        break;
    }
    fclose(f);
    const char *env = getenv("SW_CPU");
    enum sw_kernel_level want = f512 && favx2 && famx ? SW_KLEVEL_AMX
                                : f512 && favx2       ? SW_KLEVEL_AVX512
                                : favx2               ? SW_KLEVEL_AVX2
                                                      : SW_KLEVEL_SCALAR;
    if (env != NULL && strcasecmp(env, "scalar") == 0)
        want = SW_KLEVEL_SCALAR;
    else if (env != NULL && strcasecmp(env, "avx2") == 0 && want > SW_KLEVEL_AVX2)
        want = SW_KLEVEL_AVX2;
    else if (env != NULL && strcasecmp(env, "avx512") == 0 && want > SW_KLEVEL_AVX512)
        want = SW_KLEVEL_AVX512;
    fprintf(stderr, "dispatch: cpuinfo says %s, SW_CPU %s, best level %s\n",
            f512 && favx2 && famx ? "amx"
            : f512 && favx2       ? "avx512"
            : favx2               ? "avx2"
                                  : "scalar",
            env ? env : "unset", sw_cpu_kernels());
    SW_CHECK_INT((int)sw_quant_best_level(), (int)want);
    SW_CHECK_INT((int)sw_quant_level(), (int)want);
    SW_CHECK(sw_quant_force_level((enum sw_kernel_level)(want + 1)) == -1 || want == SW_KLEVEL_AMX);
    SW_CHECK(sw_quant_force_level(SW_KLEVEL_SCALAR) == 0 && !strcmp(sw_cpu_kernels(), "scalar"));
    sw_quant_force_scalar(0);
    SW_CHECK_INT((int)sw_quant_level(), (int)want);
}

int main(void)
{
    fprintf(stderr, "kernels: %s\n", sw_cpu_kernels());
    test_conversions();
    test_dequantize();
    test_quantize_by_hand();
    test_quantize_levels_agree();
    test_vec_dot();
    test_matmul_bit_identical();
    test_matmul_tiled();
    test_tiled_levels();
    test_onerow_levels();
    test_batch_levels();
    test_dispatch();
    test_matmul_long_rows();
    test_shared_math();
    return sw_test_done();
}
