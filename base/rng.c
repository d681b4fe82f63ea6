/*
 * rng.c - xoshiro256** (Blackman and Vigna) with its state filled by
 * splitmix64, as its authors recommend: splitmix64 turns any seed, 0
 * included, into a well-mixed state that is never all zero.
 */
#include "rng.h"

static uint64_t s_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline uint64_t s_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void sw_rng_seed(sw_rng_t *rng, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        rng->s[i] = s_splitmix64(&x);
    /* splitmix64 is a bijection of a counter, four consecutive outputs
     * cannot all be zero, but keep the invariant explicit. */
    if ((rng->s[0] | rng->s[1] | rng->s[2] | rng->s[3]) == 0)
        rng->s[0] = 1;
}

uint64_t sw_rng_next(sw_rng_t *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = s_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = s_rotl(s[3], 45);
    return result;
}

double sw_rng_uniform(sw_rng_t *rng)
{
    return (double)(sw_rng_next(rng) >> 11) * 0x1.0p-53;
}
