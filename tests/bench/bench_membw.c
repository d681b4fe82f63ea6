/*
 * bench_membw.c - the machine's read bandwidth: T threads each read their
 * slice of one buffer (far larger than the last-level cache) with 32-byte
 * loads and nothing else, as many times as fit the time given; prints the best
 * pass in GB/s (10^9 bytes a second). scripts/bench/bench_engine.py runs it at
 * the thread count of each engine measurement, in the same run, to print the
 * bandwidth bound of generation next to the measured speed. Not a test.
 *
 *   bench_membw [threads [MiB [seconds]]]   (defaults: 1, 1024, 1.0)
 *
 * Output: one line "membw threads T mib M passes P best_gbs G median_gbs G".
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define MAX_THREADS 256
#define MAX_PASSES 64

struct slice {
    const uint8_t *p;
    size_t n;
    pthread_barrier_t *start, *done;
    int passes;
    uint64_t sink;
};

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) static uint64_t s_read_avx2(const uint8_t *p, size_t n)
{
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t v[4];
    _mm256_storeu_si256((__m256i *)v, a0);
    return v[0] + v[1] + v[2] + v[3];
}
#endif

static uint64_t s_read(const uint8_t *p, size_t n)
{
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2"))
        return s_read_avx2(p, n);
#endif
    uint64_t s[4] = {0, 0, 0, 0}, w[4];
    for (size_t i = 0; i + 32 <= n; i += 32) {
        memcpy(w, p + i, sizeof w);
        for (int k = 0; k < 4; k++)
            s[k] += w[k];
    }
    return s[0] + s[1] + s[2] + s[3];
}

static void *s_worker(void *arg)
{
    struct slice *s = arg;
    for (int k = 0; k < s->passes; k++) {
        pthread_barrier_wait(s->start);
        s->sink += s_read(s->p, s->n);
        pthread_barrier_wait(s->done);
    }
    return NULL;
}

static int s_cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const int threads = argc > 1 ? atoi(argv[1]) : 1;
    const long mib = argc > 2 ? atol(argv[2]) : 1024;
    const double seconds = argc > 3 ? atof(argv[3]) : 1.0;
    if (threads < 1 || threads > MAX_THREADS || mib < 64 || mib > (1L << 20) || !(seconds > 0.0)) {
        fprintf(stderr, "bench_membw: usage: bench_membw [threads 1..%d [MiB 64.. [seconds]]]\n",
                MAX_THREADS);
        return 2;
    }
    const size_t bytes = (size_t)mib << 20;
    uint8_t *buf = aligned_alloc(4096, bytes);
    if (buf == NULL) {
        fprintf(stderr, "bench_membw: cannot allocate %ld MiB: give a smaller size\n", mib);
        return 1;
    }
    /* Pseudo-random bytes on every page: the passes then only read, and no two pages are alike
     * (pages of one repeated byte get merged by the kernel's same-page merging, or are the
     * zero page: the reads then come from cache, 77 GB/s "measured" on the 2-vCPU VM). */
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        memcpy(buf + i, &r, 8);
    }
    /* one untimed pass, then the timed ones: as many as fit the time given */
    double t0 = s_now();
    volatile uint64_t sink = s_read(buf, bytes);
    const double once = s_now() - t0;
    int passes = (int)(seconds / (once > 1e-4 ? once : 1e-4));
    passes = passes < 3 ? 3 : passes > MAX_PASSES ? MAX_PASSES : passes;

    pthread_barrier_t start, done;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&done, NULL, (unsigned)threads + 1);
    struct slice sl[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    const size_t per = (bytes / (size_t)threads) & ~(size_t)127;
    for (int t = 0; t < threads; t++) {
        sl[t] = (struct slice){buf + (size_t)t * per, per, &start, &done, passes, 0};
        if (pthread_create(&tid[t], NULL, s_worker, &sl[t]) != 0) {
            fprintf(stderr, "bench_membw: cannot start thread %d of %d\n", t + 1, threads);
            return 1;
        }
    }
    double gbs[MAX_PASSES] = {0};
    for (int k = 0; k < passes; k++) {
        pthread_barrier_wait(&start);
        t0 = s_now();
        pthread_barrier_wait(&done);
        gbs[k] = (double)per * threads / (s_now() - t0) / 1e9;
    }
    for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        sink += sl[t].sink;
    }
    qsort(gbs, (size_t)passes, sizeof gbs[0], s_cmp);
    printf("membw threads %d mib %ld passes %d best_gbs %.2f median_gbs %.2f\n", threads, mib,
           passes, gbs[passes - 1], gbs[passes / 2]);
    free(buf);
    return 0; // (sink is volatile: the reads happen)
}
