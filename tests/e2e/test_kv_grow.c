/*
 * test_kv_grow.c - KV caches that grow as their positions are used (kv.h,
 * sw_kv_new_grow), on the real default model (SmolLM2-135M), against a
 * cache allocated whole (sw_kv_new), bit for bit:
 *
 *  - the same calls on both give the same logits (memcmp) while the growing
 *    one steps 384 -> 768 -> 1024 positions: a prompt whose first
 *    window ends past a step, a prompt continued across a step, decode rows
 *    one at a time across a step, a verification-sized chunk of rows
 *    across a step, a token tree across a step with its accepted path kept
 *    (sw_kv_keep), a truncation (kv_keep) that frees nothing;
 *  - sessions of both kinds in one forward_batch call;
 *  - memory before generating is the prompt's, not the context's: a cache
 *    of 32768 positions holds SW_KV_BLOCK positions' bytes after a
 *    100-token prompt;
 *  - a budget shared by caches (a node's --kv-mib): its bytes are what the
 *    caches allocated; a step that does not fit first asks make_room, then
 *    fails with one clear error and leaves the cache as it was; the same
 *    step succeeds once room is made;
 *  - prefix export / import with a growing cache (the prefix cache's path);
 *  - sw_kv_step's ladder.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model.h"
#include "sw_test.h"

#define N_PRE 1024 // the whole cache's positions

static sw_model_t *s_m;
static int s_vocab;
static float *s_la, *s_lb; // logits of the two caches

/* The same forward call on a whole cache (a) and a growing one (b); 1 when
 * both ran and every logits row is the same to the bit. */
static int s_same(sw_kv_t *a, sw_kv_t *b, sw_forward_t f, const char *what)
{
    char err[256] = "";
    sw_forward_t fa = f, fb = f;
    fa.logits = s_la;
    fb.logits = s_lb;
    if (sw_model_forward(s_m, a, &fa, err, sizeof err) != 0 ||
        sw_model_forward(s_m, b, &fb, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", what, err);
        return 0;
    }
    const int same = !memcmp(s_la, s_lb, (size_t)f.n_logits * s_vocab * sizeof(float));
    if (!same)
        fprintf(stderr, "%s: the growing cache's logits differ\n", what);
    return same && sw_kv_len(a) == sw_kv_len(b);
}

static int32_t s_tok(int i)
{
    return (int32_t)((i * 7919 + 13) % (s_vocab - 2)) + 1;
}

static void s_toks(int32_t *t, int at, int n)
{
    for (int i = 0; i < n; i++)
        t[i] = s_tok(at + i);
}

static void s_ladder(void)
{
    SW_CHECK_INT(sw_kv_step(1, 1 << 20), SW_KV_BLOCK);
    SW_CHECK_INT(sw_kv_step(SW_KV_BLOCK, 1 << 20), SW_KV_BLOCK);
    SW_CHECK_INT(sw_kv_step(SW_KV_BLOCK + 1, 1 << 20), 384);
    SW_CHECK_INT(sw_kv_step(385, 1 << 20), 512);
    SW_CHECK_INT(sw_kv_step(513, 1 << 20), 768);
    SW_CHECK_INT(sw_kv_step(769, 1 << 20), 1024);
    SW_CHECK_INT(sw_kv_step(20000, 1 << 20), 24576);
    SW_CHECK_INT(sw_kv_step(20000, 21000), 21000); // never past the context
    SW_CHECK_INT(sw_kv_step(100, 50), 50);
}

/* One session through every kind of call, whole and growing side by side. */
static void s_sequence(void)
{
    sw_kv_budget_t budget = {0};
    sw_kv_t *a = sw_kv_new(s_m, N_PRE), *b = sw_kv_new_grow(s_m, N_PRE, &budget);
    SW_CHECK(a && b);
    if (!a || !b)
        goto out;
    SW_CHECK_INT(sw_kv_allocated(a), N_PRE);
    SW_CHECK_INT(sw_kv_allocated(b), 0);
    SW_CHECK_INT(sw_kv_capacity(b), N_PRE);
    int32_t t[512];

    /* a prompt of 300 (one window, prompt order): 384 positions */
    s_toks(t, 0, 300);
    SW_CHECK(
        s_same(a, b, (sw_forward_t){.n = 300, .tokens = t, .n_logits = 1, .prompt = 1}, "prompt"));
    SW_CHECK_INT(sw_kv_allocated(b), 384);
    SW_CHECK_INT(budget.used, (long long)sw_kv_bytes(s_m, 384));
    SW_CHECK_INT(sw_kv_alloc_bytes(b), (long long)sw_kv_bytes(s_m, 384));

    /* the prompt continued across a step (windows from position 0): 768 */
    s_toks(t, 300, 220);
    SW_CHECK(s_same(
        a, b, (sw_forward_t){.n = 220, .tokens = t, .n_logits = 1, .prompt = 1, .prompt_cont = 1},
        "prompt continued"));
    SW_CHECK_INT(sw_kv_allocated(b), 768);

    /* kv_keep: back to 380, nothing freed */
    SW_CHECK(sw_kv_truncate(a, 380) == 0 && sw_kv_truncate(b, 380) == 0);
    SW_CHECK_INT(sw_kv_allocated(b), 768);
    SW_CHECK_INT(budget.used, (long long)sw_kv_bytes(s_m, 768));

    /* decode rows one at a time, then a 9-row verification chunk */
    for (int i = 0; i < 10; i++) {
        t[0] = s_tok(1000 + i);
        SW_CHECK(s_same(a, b, (sw_forward_t){.n = 1, .tokens = t, .n_logits = 1}, "decode"));
    }
    s_toks(t, 2000, 9);
    SW_CHECK(s_same(a, b, (sw_forward_t){.n = 9, .tokens = t, .n_logits = 9}, "verify"));
    SW_CHECK_INT(sw_kv_len(b), 399);

    /* a token tree after 760 plain positions, across the 768 step */
    s_toks(t, 3000, 361);
    SW_CHECK(s_same(a, b, (sw_forward_t){.n = 361, .tokens = t, .n_logits = 1}, "fill"));
    SW_CHECK_INT(sw_kv_len(b), 760);
    const int32_t par[12] = {759, 760, 761, 762, 760, 764, 765, 766, 767, 768, 769, 760};
    s_toks(t, 4000, 12);
    SW_CHECK(
        s_same(a, b, (sw_forward_t){.n = 12, .tokens = t, .n_logits = 12, .parent = par}, "tree"));
    SW_CHECK_INT(sw_kv_allocated(b), 1024);
    char err[256] = "";
    const int32_t path[5] = {764, 765, 766, 767, 768}; // the second branch under slot 760
    SW_CHECK(sw_kv_keep(a, 761, path, 5, err, sizeof err) == 0);
    SW_CHECK(sw_kv_keep(b, 761, path, 5, err, sizeof err) == 0);
    SW_CHECK_INT(sw_kv_linear(b), 766);
    t[0] = s_tok(5000);
    SW_CHECK(s_same(a, b, (sw_forward_t){.n = 1, .tokens = t, .n_logits = 1}, "after the tree"));

    /* past the context: refused, nothing changed */
    SW_CHECK(sw_kv_reserve(b, N_PRE + 1, err, sizeof err) != 0 && strstr(err, "context"));
    SW_CHECK_INT(sw_kv_allocated(b), 1024);
out:
    sw_kv_free(&a);
    sw_kv_free(&b);
    SW_CHECK_INT(budget.used, 0);
}

/* A growing and a whole cache in one batched call, each equal to alone. */
static void s_batched(void)
{
    char err[256] = "";
    sw_kv_t *a = sw_kv_new(s_m, 600), *b = sw_kv_new_grow(s_m, 600, NULL);
    sw_kv_t *ra = sw_kv_new(s_m, 600), *rb = sw_kv_new(s_m, 600);
    float *l2 = malloc(2 * (size_t)s_vocab * sizeof(float));
    float *l1 = malloc((size_t)s_vocab * sizeof(float));
    SW_CHECK(a && b && ra && rb && l2 && l1);
    if (!a || !b || !ra || !rb || !l2 || !l1)
        goto out;
    int32_t t[300];
    s_toks(t, 7000, 250);
    sw_forward_t p = {.n = 250, .tokens = t, .n_logits = 1, .prompt = 1, .logits = l1};
    SW_CHECK(sw_model_forward(s_m, a, &p, err, sizeof err) == 0);
    SW_CHECK(sw_model_forward(s_m, b, &p, err, sizeof err) == 0);
    SW_CHECK(sw_model_forward(s_m, ra, &p, err, sizeof err) == 0);
    SW_CHECK(sw_model_forward(s_m, rb, &p, err, sizeof err) == 0);
    int32_t ta[8], tb[8];
    s_toks(ta, 8000, 8);
    s_toks(tb, 9000, 8);
    sw_kv_t *kvs[2] = {a, b};
    sw_forward_t fs[2] = {{.n = 8, .tokens = ta, .n_logits = 1, .logits = l2},
                          {.n = 8, .tokens = tb, .n_logits = 1, .logits = l2 + s_vocab}};
    SW_CHECK(sw_model_forward_batch(s_m, kvs, fs, 2, err, sizeof err) == 0);
    SW_CHECK_INT(sw_kv_allocated(b), 384); // 258 positions
    sw_forward_t fa = {.n = 8, .tokens = ta, .n_logits = 1, .logits = l1};
    SW_CHECK(sw_model_forward(s_m, ra, &fa, err, sizeof err) == 0);
    SW_CHECK(!memcmp(l1, l2, (size_t)s_vocab * sizeof(float)));
    sw_forward_t fb = {.n = 8, .tokens = tb, .n_logits = 1, .logits = l1};
    SW_CHECK(sw_model_forward(s_m, rb, &fb, err, sizeof err) == 0);
    SW_CHECK(!memcmp(l1, l2 + s_vocab, (size_t)s_vocab * sizeof(float)));
out:
    free(l1);
    free(l2);
    sw_kv_free(&a);
    sw_kv_free(&b);
    sw_kv_free(&ra);
    sw_kv_free(&rb);
}

/* A 32768-position context holds the prompt's positions only. */
static void s_long_context(void)
{
    char err[256] = "";
    sw_kv_t *kv = sw_kv_new_grow(s_m, 32768, NULL);
    int32_t t[100];
    s_toks(t, 11000, 100);
    sw_forward_t f = {.n = 100, .tokens = t, .n_logits = 1, .prompt = 1, .logits = s_la};
    SW_CHECK(kv && sw_model_forward(s_m, kv, &f, err, sizeof err) == 0);
    if (kv) {
        const size_t got = sw_kv_alloc_bytes(kv), whole = sw_kv_bytes(s_m, 32768);
        printf("32768-position context after a 100-token prompt: %.2f MiB of KV allocated "
               "(the whole context: %.1f MiB)\n",
               (double)got / (1 << 20), (double)whole / (1 << 20));
        SW_CHECK_INT(got, (long long)sw_kv_bytes(s_m, SW_KV_BLOCK));
        SW_CHECK(got * 100 < whole);
    }
    sw_kv_free(&kv);
}

static int s_room_calls;
static sw_kv_t *s_victim; // what make_room frees

static void s_make_room(void *ctx, int64_t need)
{
    (void)need;
    s_room_calls++;
    if (s_victim && ctx) {
        sw_kv_free(&s_victim);
    }
}

/* A budget that one cache fills: the next step fails cleanly, then fits. */
static void s_budget(void)
{
    char err[256] = "";
    sw_kv_budget_t budget = {.limit = (int64_t)sw_kv_bytes(s_m, 384), .make_room = s_make_room};
    sw_kv_t *a = sw_kv_new_grow(s_m, 2048, &budget), *b = sw_kv_new_grow(s_m, 2048, &budget);
    int32_t t[300];
    s_toks(t, 12000, 300);
    sw_forward_t f = {.n = 300, .tokens = t, .n_logits = 1, .prompt = 1, .logits = s_la};
    SW_CHECK(a && b && sw_model_forward(s_m, a, &f, err, sizeof err) == 0);
    SW_CHECK_INT(budget.used, budget.limit);
    /* b cannot take its first step; make_room (which frees nothing: ctx NULL) was asked */
    f.n = 10;
    err[0] = 0;
    SW_CHECK(b && sw_model_forward(s_m, b, &f, err, sizeof err) != 0);
    printf("a full budget: %s\n", err);
    SW_CHECK(strstr(err, "KV cache memory is full") != NULL);
    SW_CHECK_INT(s_room_calls, 1);
    SW_CHECK(b && sw_kv_len(b) == 0 && sw_kv_allocated(b) == 0);
    /* a that cannot grow either: its cache stays as it was and still runs */
    SW_CHECK(sw_kv_reserve(a, 400, err, sizeof err) != 0);
    SW_CHECK_INT(sw_kv_allocated(a), 384);
    SW_CHECK_INT(sw_kv_len(a), 300);
    f.n = 1;
    SW_CHECK(sw_model_forward(s_m, a, &f, err, sizeof err) == 0);
    /* make_room frees a: b's step fits */
    s_victim = a;
    budget.ctx = &budget;
    f.n = 10;
    SW_CHECK(b && sw_model_forward(s_m, b, &f, err, sizeof err) == 0);
    SW_CHECK(s_victim == NULL);
    SW_CHECK_INT(budget.used, (long long)sw_kv_bytes(s_m, SW_KV_BLOCK));
    sw_kv_free(&b);
    SW_CHECK_INT(budget.used, 0);
}

/* Export from a grown cache, import into a new growing one: the same next row. */
static void s_export_import(void)
{
    char err[256] = "";
    sw_kv_t *a = sw_kv_new_grow(s_m, 1024, NULL), *b = sw_kv_new_grow(s_m, 1024, NULL);
    const int n = 320;
    void *span = malloc(sw_kv_span_bytes(s_m, n));
    int32_t t[400];
    s_toks(t, 13000, 400);
    sw_forward_t f = {.n = 400, .tokens = t, .n_logits = 1, .prompt = 1, .logits = s_la};
    SW_CHECK(a && b && span && sw_model_forward(s_m, a, &f, err, sizeof err) == 0);
    SW_CHECK(a && sw_kv_allocated(a) == 512);
    SW_CHECK(span && sw_kv_export(a, 0, n, span, err, sizeof err) == 0);
    SW_CHECK(b && span && sw_kv_import(b, span, n, err, sizeof err) == 0);
    SW_CHECK(b && sw_kv_allocated(b) == 384);
    SW_CHECK(a && sw_kv_truncate(a, n) == 0);
    t[0] = s_tok(14000);
    sw_forward_t one = {.n = 1, .tokens = t, .n_logits = 1, .logits = s_la};
    SW_CHECK(a && sw_model_forward(s_m, a, &one, err, sizeof err) == 0);
    one.logits = s_lb;
    SW_CHECK(b && sw_model_forward(s_m, b, &one, err, sizeof err) == 0);
    SW_CHECK(!memcmp(s_la, s_lb, (size_t)s_vocab * sizeof(float)));
    free(span);
    sw_kv_free(&a);
    sw_kv_free(&b);
}

int main(void)
{
    const char *path = sw_test_model();
    char err[512] = "";
    sw_backend_t *be = sw_backend_new("cpu", 2, err, sizeof err);
    SW_CHECK(be != NULL);
    if (!be)
        return sw_test_done();
    s_m = sw_model_load(path, 0, -1, be, err, sizeof err);
    SW_CHECK(s_m != NULL);
    if (!s_m) {
        fprintf(stderr, "%s\n", err);
        sw_backend_free(&be);
        return sw_test_done();
    }
    s_vocab = sw_model_hparams(s_m)->n_vocab;
    s_la = malloc(16 * (size_t)s_vocab * sizeof(float));
    s_lb = malloc(16 * (size_t)s_vocab * sizeof(float));
    SW_CHECK(s_la && s_lb);
    s_ladder();
    if (s_la && s_lb) {
        s_sequence();
        s_batched();
        s_long_context();
        s_budget();
        s_export_import();
    }
    free(s_la);
    free(s_lb);
    sw_model_free(&s_m);
    sw_backend_free(&be);
    return sw_test_done();
}
