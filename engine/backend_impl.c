/*
 * backend_impl.c - the helpers of backend_impl.h that the registry, the
 * implementations (cpu/, cuda/) and the model code share: recording a
 * backend's error and the rope table. They call nothing of the engine, so
 * every caller depends on this file and this file on none of them.
 */
#include "backend_impl.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

int sw_backend_fail(sw_backend_t *be, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(be->err, sizeof be->err, fmt, ap);
    va_end(ap);
    return -1;
}

void sw_rope_table(float *cs, int n_pos, int n_rot, float freq_base, float freq_scale)
{
    sw_rope_table_ff(cs, n_pos, n_rot, freq_base, freq_scale, NULL);
}

void sw_rope_table_ff(float *cs, int n_pos, int n_rot, float freq_base, float freq_scale,
                      const float *ff)
{
    const float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    const int half = n_rot / 2;
    for (int p = 0; p < n_pos; p++) {
        float theta = (float)p;
        float *row = cs + (size_t)p * (size_t)n_rot;
        for (int i = 0; i < half; i++) {
            /* GGML's rope_yarn(theta / ff, freq_scale): a factor of 1 divides exactly */
            float t = freq_scale * (ff ? theta / ff[i] : theta);
            row[2 * i] = cosf(t);
            row[2 * i + 1] = sinf(t);
            theta *= theta_scale;
        }
    }
}

/* The table GGML's CPU backend fills in ggml_cpu_init: its ggml_gelu_f32 as
 * GCC compiles it there (GNU C, -mfma: the 1 + a x x contracted into one fused
 * multiply-add), glibc's tanhf, each result rounded to f16. Checked against
 * llama.cpp's ggml_table_gelu_f16 (all 65536 entries equal). */
static sw_f16 s_gelu_table[1 << 16];
static pthread_once_t s_gelu_once = PTHREAD_ONCE_INIT;

static void s_gelu_fill(void)
{
    const float coef_a = 0.044715f, sqrt_2_over_pi = 0.79788456080286535587989211986876f;
    for (int i = 0; i < (1 << 16); i++) {
        const float x = sw_f16_to_f32((sw_f16)i);
        const float inner = fmaf(coef_a * x, x, 1.0f);
        const float g = 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * inner));
        s_gelu_table[i] = sw_f32_to_f16(g);
    }
}

const sw_f16 *sw_gelu_f16_table(void)
{
    pthread_once(&s_gelu_once, s_gelu_fill);
    return s_gelu_table;
}
