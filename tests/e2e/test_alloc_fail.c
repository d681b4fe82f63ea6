/*
 * test_alloc_fail.c - "a failed allocation fails the request, it never
 * aborts the process" (docs/architecture.md, the engine's buffers), checked
 * by making each allocation fail in turn.
 *
 * This program defines malloc, calloc, realloc, aligned_alloc and
 * posix_memalign itself (glibc's __libc_* functions do the work), so every
 * allocation of the engine linked into it comes here. For n = 1, 2, ...: the
 * n-th allocation after arming fails, then a backend is made, a model range
 * loaded, a cache made and a forward pass run (first layers from tokens,
 * last layers to logits). Each step must either work or fail with a message
 * in err; nothing may crash; the loop ends when n passes the number of
 * allocations the whole path makes. Afterwards, unarmed, the same path gives
 * logits bit-identical to a run before any failure (no state was damaged),
 * and a forward that fails on a cache it was given leaves that cache usable.
 *
 * It runs in the e2e label, not under the sanitizers (which replace malloc).
 */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "kv.h"
#include "model.h"
#include "sw_test.h"

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static long s_armed;   /* 1: counting */
static long s_fail_at; /* the allocation (1-based, since arming) that fails */
static long s_count;   /* allocations since arming */
static long s_failed;  /* allocations made to fail */

static int s_fail_now(void)
{
    if (!s_armed)
        return 0;
    if (++s_count == s_fail_at) {
        s_failed++;
        return 1;
    }
    return 0;
}

void *malloc(size_t n)
{
    return s_fail_now() ? NULL : __libc_malloc(n);
}

void *calloc(size_t a, size_t b)
{
    return s_fail_now() ? NULL : __libc_calloc(a, b);
}

void *realloc(void *p, size_t n)
{
    return s_fail_now() ? NULL : __libc_realloc(p, n);
}

void *aligned_alloc(size_t align, size_t n)
{
    return s_fail_now() ? NULL : __libc_memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
    if (s_fail_now())
        return 12; /* ENOMEM */
    void *p = __libc_memalign(align, n);
    if (!p)
        return 12;
    *out = p;
    return 0;
}

#define N_ROWS 5

static int32_t s_tok[N_ROWS] = {1, 504, 3712, 29, 12};

/* The path under test: [0, 2) from tokens, then [L-2, L) to logits of the
 * last row. 0 when every step worked, -1 when one failed (with a message). */
static int s_path(const char *model, float *logits, int *n_vocab, int *failed_cleanly)
{
    char err[512] = "";
    int rc = -1;
    *failed_cleanly = 0;
    sw_backend_t *be = sw_backend_new("cpu", 1, err, sizeof err);
    sw_model_t *a = NULL, *b = NULL;
    sw_kv_t *ka = NULL, *kb = NULL;
    float *hid = NULL;
    if (!be)
        goto out;
    a = sw_model_load(model, 0, 2, be, err, sizeof err);
    if (!a)
        goto out;
    const sw_hparams_t *hp = sw_model_hparams(a);
    b = sw_model_load(model, hp->n_layer - 2, hp->n_layer, be, err, sizeof err);
    if (!b)
        goto out;
    ka = sw_kv_new(a, 64);
    kb = sw_kv_new(b, 64);
    if (!ka || !kb) {
        snprintf(err, sizeof err, "cache: out of memory");
        goto out;
    }
    hid = __libc_malloc(sizeof(float) * N_ROWS * (size_t)hp->n_embd);
    if (!hid)
        goto out;
    sw_forward_t fa = {.n = N_ROWS, .tokens = s_tok, .out_hidden = hid, .prompt = 1};
    if (sw_model_forward(a, ka, &fa, err, sizeof err) != 0)
        goto out;
    sw_forward_t fb = {.n = N_ROWS, .hidden = hid, .logits = logits, .n_logits = 1, .prompt = 1};
    if (sw_model_forward(b, kb, &fb, err, sizeof err) != 0)
        goto out;
    *n_vocab = hp->n_vocab;
    rc = 0;
out:
    if (rc != 0)
        *failed_cleanly = err[0] != 0;
    free(hid);
    sw_kv_free(&ka);
    sw_kv_free(&kb);
    sw_model_free(&a);
    sw_model_free(&b);
    sw_backend_free(&be);
    return rc;
}

int main(void)
{
    const char *model = sw_test_model();
    float *ref = __libc_calloc(200000, sizeof(float)), *got = __libc_calloc(200000, sizeof(float));
    int n_vocab = 0, clean = 0;
    SW_CHECK(ref && got);
    if (!ref || !got)
        return sw_test_done();
    SW_CHECK_INT(s_path(model, ref, &n_vocab, &clean), 0);
    SW_CHECK(n_vocab > 0 && n_vocab <= 200000);

    int n_fail = 0, n_ok = 0, n_unclean = 0;
    long total = -1;
    for (long n = 1; n < 100000; n++) {
        s_fail_at = n;
        s_count = s_failed = 0;
        s_armed = 1;
        int nv = 0;
        int rc = s_path(model, got, &nv, &clean);
        s_armed = 0;
        if (!s_failed) { /* n passed every allocation of the path: done */
            total = s_count;
            SW_CHECK_INT(rc, 0);
            break;
        }
        if (rc == 0) {
            n_ok++; /* the failed allocation was optional (a fallback path) */
            SW_CHECK(!memcmp(got, ref, sizeof(float) * (size_t)n_vocab));
        } else {
            n_fail++;
            if (!clean) {
                n_unclean++;
                fprintf(stderr, "allocation %ld failed the path without a message\n", n);
            }
        }
    }
    printf("allocations on the path: %ld; each made to fail in turn: %d failed the path with a "
           "message, %d were survived with the same logits, %d failed it silently\n",
           total, n_fail, n_ok, n_unclean);
    SW_CHECK(total > 10);
    SW_CHECK_INT(n_unclean, 0);

    /* unarmed again: the same bits as before any failure */
    memset(got, 0, sizeof(float) * 200000);
    int nv = 0;
    SW_CHECK_INT(s_path(model, got, &nv, &clean), 0);
    SW_CHECK(!memcmp(got, ref, sizeof(float) * (size_t)n_vocab));
    free(ref);
    free(got);
    return sw_test_done();
}
