/*
 * sw_limits.h - the limits and defaults that more than one layer shares,
 * each defined once: the engine, the wire protocol, the client library and
 * the programs' --help all take them from here.
 *
 * Header only: it declares plain values and types, so including it links
 * nothing.
 */
#ifndef SW_LIMITS_H
#define SW_LIMITS_H

#include <stdint.h>

/* ---- sampling ---------------------------------------------------------------------------- */

/* Sampling parameters (engine/sampler.h applies them; clients send them in a
 * GenerateRequest). sw_sampling_default() gives the documented defaults. */
typedef struct sw_sampling {
    float temp;        // temperature, >= 0; 0 = greedy argmax. Default 0.8
    int top_k;         // keep the k largest logits, >= 0; 0 = off. Default 40
    float top_p;       // keep the smallest prefix with mass >= top_p, (0, 1]; 1 = off. Default 0.95
    float min_p;       // keep tokens with prob >= min_p * max prob, [0, 1]; 0 = off. Default 0.05
    float rep_penalty; // repetition penalty, > 0; 1 = off. Default 1.0
    int rep_last_n;    // tokens of history the penalty looks at, >= 0; 0 = off. Default 64
    uint64_t seed;     // RNG seed; same seed + same inputs = same tokens. Default 0x5eed
} sw_sampling_t;

/* The defaults listed in sw_sampling_t (llama.cpp's defaults, seed 0x5eed). */
static inline sw_sampling_t sw_sampling_default(void)
{
    sw_sampling_t p = {
        .temp = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .rep_penalty = 1.0f,
        .rep_last_n = 64,
        .seed = 0x5eed,
    };
    return p;
}

#endif
