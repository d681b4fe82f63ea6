/*
 * threadpool.h - a fixed pool of worker threads for parallel-for loops in the
 * compute kernels. The calling thread takes part in the work, so a pool of
 * n threads starts n - 1 workers.
 *
 * One owner: only the thread that created the pool calls sw_pool_run().
 */
#ifndef SW_THREADPOOL_H
#define SW_THREADPOOL_H

typedef struct sw_pool sw_pool_t;

/* fn(ctx, ith, nth): the body run by thread ith of nth. */
typedef void (*sw_pool_fn)(void *ctx, int ith, int nth);

/* Starts a pool of n_threads (>= 1; 1 = run on the caller only). NULL on failure. */
sw_pool_t *sw_pool_new(int n_threads) __attribute__((warn_unused_result));
/* Stops and joins the workers; accepts NULL and NULLs the caller's pointer. */
void sw_pool_destroy(sw_pool_t **self_p);
int sw_pool_size(const sw_pool_t *pool);
/* Runs fn on every thread of the pool and returns when all are done. */
void sw_pool_run(sw_pool_t *pool, sw_pool_fn fn, void *ctx);

#endif
