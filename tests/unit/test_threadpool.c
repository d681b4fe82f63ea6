/*
 * test_threadpool.c - every thread runs each job exactly once, jobs do not
 * overlap, and pools of 1..4 threads give the same sums.
 */
#include "sw_test.h"
#include "threadpool.h"

#include <stdatomic.h>

struct job {
    atomic_int calls;
    atomic_llong sum;
    int n;
};

static void s_body(void *ctx, int ith, int nth)
{
    struct job *j = ctx;
    atomic_fetch_add(&j->calls, 1);
    long long local = 0;
    for (int i = ith; i < j->n; i += nth)
        local += i;
    atomic_fetch_add(&j->sum, local);
}

int main(void)
{
    for (int nt = 1; nt <= 4; nt++) {
        sw_pool_t *pool = sw_pool_new(nt);
        SW_CHECK(pool != NULL);
        if (!pool)
            continue;
        SW_CHECK_INT(sw_pool_size(pool), nt);
        for (int rep = 0; rep < 2000; rep++) {
            struct job j = {.n = 1000 + rep};
            atomic_init(&j.calls, 0);
            atomic_init(&j.sum, 0);
            sw_pool_run(pool, s_body, &j);
            long long n = j.n;
            if (atomic_load(&j.calls) != nt || atomic_load(&j.sum) != n * (n - 1) / 2) {
                SW_CHECK_INT(atomic_load(&j.calls), nt);
                SW_CHECK_INT(atomic_load(&j.sum), n * (n - 1) / 2);
                break;
            }
        }
        sw_pool_destroy(&pool);
        SW_CHECK(pool == NULL);
    }
    sw_pool_destroy(NULL);
    return sw_test_done();
}
