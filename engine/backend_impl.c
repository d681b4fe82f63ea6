/*
 * backend_impl.c - the helpers of backend_impl.h that the registry, the
 * implementations (cpu/, cuda/) and the model code share: recording a
 * backend's error and the rope table. They call nothing of the engine, so
 * every caller depends on this file and this file on none of them.
 */
#include "backend_impl.h"

#include <math.h>
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
    const float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    const int half = n_rot / 2;
    for (int p = 0; p < n_pos; p++) {
        float theta = (float)p;
        float *row = cs + (size_t)p * (size_t)n_rot;
        for (int i = 0; i < half; i++) {
            float t = freq_scale * theta;
            row[2 * i] = cosf(t);
            row[2 * i + 1] = sinf(t);
            theta *= theta_scale;
        }
    }
}
