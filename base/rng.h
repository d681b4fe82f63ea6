/*
 * rng.h - the deterministic random number generator of the sampler and the
 * speculative verifier: xoshiro256** seeded through splitmix64. It is pure
 * 64-bit integer arithmetic, so one seed gives the same stream on every
 * machine, compiler and optimisation level.
 *
 * The state is a plain value (no allocation); copy it to fork a stream.
 */
#ifndef SW_RNG_H
#define SW_RNG_H

#include <stdint.h>

typedef struct sw_rng {
    uint64_t s[4]; // xoshiro256** state, never all zero
} sw_rng_t;

/* Seeds the state from one 64-bit value (any value, 0 included). */
void sw_rng_seed(sw_rng_t *rng, uint64_t seed);
/* Next 64 random bits. */
uint64_t sw_rng_next(sw_rng_t *rng);
/* Uniform double in [0, 1) with 53 random bits (never 1.0). */
double sw_rng_uniform(sw_rng_t *rng);

#endif
