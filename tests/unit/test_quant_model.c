/*
 * test_quant_model.c - the quant kernels on real weights: tensors of the
 * SmolLM2-135M Q4_1 model (q4_1 attention/FFN matrices, the q8_0 token
 * embedding that is also the output matrix). sw_matmul must equal sw_vec_dot
 * to the bit at both kernel levels, both levels must agree, and the result
 * must be close to the f32 dot product of the dequantized weights. Skips when
 * the model is absent.
 */
#include "gguf.h"
#include "quant.h"
#include "sw_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t s_rng = 0x2545f4914f6cdd1dull;

static float s_uniform(void)
{
    s_rng ^= s_rng << 13;
    s_rng ^= s_rng >> 7;
    s_rng ^= s_rng << 17;
    return (float)(s_rng >> 40) / 16777216.0f * 2.0f - 1.0f;
}

static void s_check_tensor(const sw_gguf_t *g, const char *name, enum sw_type want, int64_t rows)
{
    const sw_gguf_tensor_t *t = sw_gguf_find_tensor(g, name);
    SW_CHECK(t != NULL);
    if (t == NULL)
        return;
    SW_CHECK_INT(t->type, want);
    const int64_t n = t->ne[0];
    rows = rows < t->ne[1] ? rows : t->ne[1];
    enum sw_type at = sw_type_vec_dot(t->type);
    uint64_t wsz, xsz;
    SW_CHECK(sw_type_row_bytes(t->type, n, &wsz) == 0);
    SW_CHECK(sw_type_row_bytes(at, n, &xsz) == 0);
    const int nr = 5;
    float *xf = malloc(sizeof(float) * n * nr), *wd = malloc(sizeof(float) * n);
    uint8_t *xq = malloc(xsz * nr);
    float *y[2], *ref = malloc(sizeof(float) * rows * nr);
    y[0] = malloc(sizeof(float) * rows * nr);
    y[1] = malloc(sizeof(float) * rows * nr);
    for (int64_t i = 0; i < n * nr; i++)
        xf[i] = s_uniform() * 2.0f;
    for (int r = 0; r < nr; r++)
        SW_CHECK(sw_quantize_row(at, xf + r * n, xq + r * xsz, n) == 0);

    int mismatch = 0, far = 0;
    for (int level = 0; level < 2; level++) {
        sw_quant_force_scalar(level == 0);
        // the matmul in two uneven slices, as two threads would run it
        sw_matmul(t->type, n, t->data, wsz, 0, 7, xq, xsz, nr, y[level], rows);
        sw_matmul(t->type, n, t->data, wsz, 7, rows, xq, xsz, nr, y[level], rows);
        for (int r = 0; r < nr; r++)
            for (int64_t o = 0; o < rows; o++)
                sw_vec_dot(t->type, n, &ref[r * rows + o], (const uint8_t *)t->data + o * wsz,
                           xq + r * xsz);
        mismatch += memcmp(ref, y[level], sizeof(float) * rows * nr) != 0;
    }
    sw_quant_force_scalar(0);
    SW_CHECK_INT(mismatch, 0);
    SW_CHECK(memcmp(y[0], y[1], sizeof(float) * rows * nr) == 0);

    for (int64_t o = 0; o < rows; o++) {
        sw_dequantize_row(t->type, (const uint8_t *)t->data + o * wsz, wd, n);
        for (int r = 0; r < nr; r++) {
            double exact = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                exact += (double)wd[i] * xf[r * n + i];
                mag += fabs((double)wd[i] * xf[r * n + i]);
            }
            far += !(fabs(y[1][r * rows + o] - exact) <= 1e-2 * mag + 1e-6);
        }
    }
    if (far)
        fprintf(stderr, "%s: %d results far from the f32 dot product\n", name, far);
    SW_CHECK_INT(far, 0);
    free(xf);
    free(wd);
    free(xq);
    free(y[0]);
    free(y[1]);
    free(ref);
}

int main(void)
{
    const char *path = sw_test_model();
    char err[256];
    sw_gguf_t *g = sw_gguf_open(path, err, sizeof err);
    if (g == NULL) {
        fprintf(stderr, "cannot open %s: %s\n", path, err);
        return 1;
    }
    s_check_tensor(g, "blk.0.attn_q.weight", SW_TYPE_Q4_1, 576);
    s_check_tensor(g, "blk.0.attn_k.weight", SW_TYPE_Q4_1, 192);
    s_check_tensor(g, "blk.29.ffn_down.weight", SW_TYPE_Q4_1, 576);
    s_check_tensor(g, "token_embd.weight", SW_TYPE_Q8_0, 1000);
    sw_gguf_close(&g);
    return sw_test_done();
}
