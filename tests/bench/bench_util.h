/*
 * bench_util.h - what the engine benchmarks share (bench_gpu, bench_rows):
 * a monotonic clock, medians, one forward call, timed verification calls and
 * draft steps, model loading with a line on failure.
 */
#ifndef SW_BENCH_UTIL_H
#define SW_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "model.h"

#define BENCH_REPS 5
#define BENCH_TOKENS 1024

static int32_t bench_tok[BENCH_TOKENS]; /* pseudo-random token ids (bench_fill) */

static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static inline int bench_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp);
    return v[n / 2];
}

/* bench_tok gets BENCH_TOKENS ids below n_vocab (the same ones every run). */
static inline void bench_fill(int n_vocab)
{
    uint32_t x = 99;
    for (int i = 0; i < BENCH_TOKENS; i++) {
        x = x * 1664525u + 1013904223u;
        bench_tok[i] = (int32_t)((x >> 8) % (uint32_t)n_vocab);
    }
}

static inline int bench_fwd(sw_model_t *m, sw_kv_t *kv, const int32_t *tok, int n, float *logits,
                            int nl, int prompt)
{
    char err[256];
    sw_forward_t f = {.n = n, .tokens = tok, .logits = logits, .n_logits = nl, .prompt = prompt};
    if (sw_model_forward(m, kv, &f, err, sizeof err) != 0) {
        fprintf(stderr, "bench: %s\n", err);
        return -1;
    }
    return 0;
}

/* Median ms of one verification call of n rows (all logits) after a 64-token prompt, each
 * call idle_ms after the last (0: back to back; a pipeline stage waits a round trip). */
static inline double bench_verify(sw_model_t *m, sw_kv_t *kv, int n, float *logits, int idle_ms)
{
    double t[BENCH_REPS];
    if (sw_kv_truncate(kv, 0) != 0 || bench_fwd(m, kv, bench_tok, 64, logits, 1, 1) != 0)
        return -1;
    for (int r = -1; r < BENCH_REPS; r++) {
        if (sw_kv_truncate(kv, 64) != 0)
            return -1;
        if (idle_ms > 0)
            nanosleep(&(struct timespec){idle_ms / 1000, (long)(idle_ms % 1000) * 1000000L}, NULL);
        double t0 = bench_now();
        if (bench_fwd(m, kv, &bench_tok[64], n, logits, n, 0) != 0)
            return -1;
        if (r >= 0)
            t[r] = bench_now() - t0;
    }
    return bench_median(t, BENCH_REPS);
}

/* Median ms of k (<= 64) greedy draft steps after a 64-token prompt. */
static inline double bench_draft(sw_model_t *d, sw_kv_t *kv, int k, float *logits)
{
    double t[BENCH_REPS];
    int32_t ids[64];
    char err[256];
    if (k < 1 || k > 64 || sw_kv_truncate(kv, 0) != 0 ||
        bench_fwd(d, kv, bench_tok, 64, logits, 1, 1) != 0)
        return -1;
    for (int r = -2; r < BENCH_REPS; r++) { // two warm-ups: a GPU graph is recorded on the second
        if (sw_kv_truncate(kv, 64) != 0)
            return -1;
        double t0 = bench_now();
        if (sw_model_greedy_steps(d, kv, bench_tok[64], k, ids, NULL, err, sizeof err) != 0) {
            fprintf(stderr, "bench: %s\n", err);
            return -1;
        }
        if (r >= 0)
            t[r] = bench_now() - t0;
    }
    return bench_median(t, BENCH_REPS);
}

static inline sw_model_t *bench_load(const char *path, sw_backend_t *be)
{
    char err[256];
    sw_model_t *m = be ? sw_model_load(path, 0, -1, be, err, sizeof err) : NULL;
    if (!m && be)
        fprintf(stderr, "bench: %s on %s: %s\n", path, sw_backend_name(be), err);
    return m;
}

static inline const char *bench_base(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

#endif
