/*
 * threadpool.c - workers wait on a generation counter; sw_pool_run() bumps it,
 * runs its own share, then waits for the others. Workers spin briefly before
 * sleeping on a condition variable, because decode issues many short jobs
 * (one per matmul) where a sleep/wake per job would dominate.
 */
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

struct sw_pool {
    int n_threads;          // workers + the caller
    pthread_t *threads;     // (n_threads - 1)
    pthread_mutex_t mu;     // guards the condition variables
    pthread_cond_t cv_work; // signalled when gen changes
    pthread_cond_t cv_done; // signalled when pending reaches 0
    atomic_uint gen;        // job generation
    atomic_int pending;     // workers still running the current job
    atomic_int stop;        // 1 = exit
    sw_pool_fn fn;          // current job
    void *ctx;              // current job's argument
};

struct s_worker_arg {
    sw_pool_t *pool;
    int ith;
};

/* Busy-wait iterations before a thread sleeps: about 20-50 us, long enough
 * to catch the next matmul of a decode step, short enough not to steal a
 * core from other processes when the machine is oversubscribed. */
#define S_SPIN 2000

static inline void s_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    sched_yield();
#endif
}

static void *s_worker(void *arg)
{
    struct s_worker_arg *wa = arg;
    sw_pool_t *pool = wa->pool;
    int ith = wa->ith;
    free(wa);
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load(&pool->gen)) == seen && !atomic_load(&pool->stop)) {
            if (++spins < S_SPIN) {
                s_relax();
                continue;
            }
            pthread_mutex_lock(&pool->mu);
            while (atomic_load(&pool->gen) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->cv_work, &pool->mu);
            pthread_mutex_unlock(&pool->mu);
        }
        if (atomic_load(&pool->stop))
            return NULL;
        seen = g;
        pool->fn(pool->ctx, ith, pool->n_threads);
        if (atomic_fetch_sub(&pool->pending, 1) == 1) {
            pthread_mutex_lock(&pool->mu);
            pthread_cond_signal(&pool->cv_done);
            pthread_mutex_unlock(&pool->mu);
        }
    }
}

sw_pool_t *sw_pool_new(int n_threads)
{
    if (n_threads < 1)
        n_threads = 1;
    sw_pool_t *pool = calloc(1, sizeof *pool);
    if (!pool)
        return NULL;
    pool->n_threads = n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv_work, NULL);
    pthread_cond_init(&pool->cv_done, NULL);
    if (n_threads > 1) {
        pool->threads = calloc((size_t)n_threads - 1, sizeof *pool->threads);
        if (!pool->threads)
            goto err;
        for (int i = 1; i < n_threads; i++) {
            struct s_worker_arg *wa = malloc(sizeof *wa);
            if (!wa)
                goto err_started;
            wa->pool = pool;
            wa->ith = i;
            if (pthread_create(&pool->threads[i - 1], NULL, s_worker, wa) != 0) {
                free(wa);
                goto err_started;
            }
            continue;
        err_started:
            pool->n_threads = i; // join only those started
            sw_pool_destroy(&pool);
            return NULL;
        }
    }
    return pool;
err:
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cv_work);
    pthread_cond_destroy(&pool->cv_done);
    free(pool);
    return NULL;
}

void sw_pool_destroy(sw_pool_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    sw_pool_t *pool = *self_p;
    pthread_mutex_lock(&pool->mu);
    atomic_store(&pool->stop, 1);
    pthread_cond_broadcast(&pool->cv_work);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->n_threads - 1; i++)
        pthread_join(pool->threads[i], NULL);
    free(pool->threads);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cv_work);
    pthread_cond_destroy(&pool->cv_done);
    free(pool);
    *self_p = NULL;
}

int sw_pool_size(const sw_pool_t *pool)
{
    return pool->n_threads;
}

void sw_pool_run(sw_pool_t *pool, sw_pool_fn fn, void *ctx)
{
    if (pool->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    atomic_store(&pool->pending, pool->n_threads - 1);
    pthread_mutex_lock(&pool->mu);
    atomic_fetch_add(&pool->gen, 1);
    pthread_cond_broadcast(&pool->cv_work);
    pthread_mutex_unlock(&pool->mu);
    fn(ctx, 0, pool->n_threads);
    int spins = 0;
    while (atomic_load(&pool->pending) > 0) {
        if (++spins < S_SPIN) {
            s_relax();
            continue;
        }
        pthread_mutex_lock(&pool->mu);
        while (atomic_load(&pool->pending) > 0)
            pthread_cond_wait(&pool->cv_done, &pool->mu);
        pthread_mutex_unlock(&pool->mu);
    }
}
