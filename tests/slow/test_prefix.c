/*
 * test_prefix.c - the prefix cache (engine/include/prefix.h) is exact: a prompt
 * whose first positions are restored from the cache and whose other rows are
 * evaluated as the prompt's continuation (sw_forward_t.prompt_cont) gives bit
 * for bit the KV of every position, the logits of its last row and the
 * greedy tokens after it that the whole prompt evaluated at once gives, on
 * the default model (SmolLM2, Q4_1) and on a K-quant model (Qwen2.5-Coder
 * 0.5B Q4_K_M, whose prompt windows of 8 rows or more take the tiled matmul
 * order), for prefixes that end inside a prompt window, on a window's end,
 * before a window of 1 row, of 3 rows (the batched attention order without
 * the tiled one) and of 8 rows, and after two windows; cached by a prompt
 * that went on differently (longer, or shorter than the new one);
 *
 * and that it is a cache that cannot be fooled: a block matches only its
 * exact tokens after its exact parent in its namespace (a prompt that
 * differs in one token of the second block reuses the first block only;
 * another namespace reuses nothing; the empty namespace is one too), a
 * reused length is a whole number of blocks at most the limit asked, the
 * byte budget evicts the least recently used blocks (never one another
 * hangs under) and a restore of blocks evicted meanwhile fails and leaves the
 * cache empty; through a 2-stage split (a stage fed hidden states) the same
 * holds per stage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model.h"
#include "prefix.h"
#include "sw_test.h"

#define MAX_P 1200
#define N_DECODE 4

static int32_t s_tok(int seed, int pos, int n_vocab)
{
    uint32_t x = (uint32_t)(seed * 7919 + pos * 104729 + 4242);
    x = x * 1664525u + 1013904223u;
    x ^= x >> 13;
    return (int32_t)(x % (uint32_t)n_vocab);
}

typedef struct ref {
    float *logits;         // (n_vocab) the last prompt row's
    void *kv;              // the KV of positions [0, P)
    int32_t out[N_DECODE]; // greedy tokens after the prompt
} ref_t;

static int32_t s_argmax(const float *l, int n)
{
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b])
            b = i;
    return b;
}

/* Evaluates tok[from..P) into kv (holding [0, from) already) as a prompt,
 * continued when from > 0, then N_DECODE greedy steps; fills r. 0 or -1. */
static int s_eval(sw_model_t *m, sw_kv_t *kv, const int32_t *tok, int from, int P, ref_t *r)
{
    const int V = sw_model_hparams(m)->n_vocab;
    char err[256] = "";
    sw_forward_t f = {.n = P - from,
                      .tokens = tok + from,
                      .logits = r->logits,
                      .n_logits = 1,
                      .prompt = 1,
                      .prompt_cont = from > 0};
    if (sw_model_forward(m, kv, &f, err, sizeof err) != 0) {
        fprintf(stderr, "forward: %s\n", err);
        return -1;
    }
    if (sw_kv_export(kv, 0, P, r->kv, err, sizeof err) != 0) {
        fprintf(stderr, "export: %s\n", err);
        return -1;
    }
    float *l = malloc((size_t)V * sizeof *l);
    memcpy(l, r->logits, (size_t)V * sizeof *l);
    for (int i = 0; i < N_DECODE; i++) {
        r->out[i] = s_argmax(l, V);
        sw_forward_t d = {.n = 1, .tokens = &r->out[i], .logits = l, .n_logits = 1, .prompt = 1};
        if (sw_model_forward(m, kv, &d, err, sizeof err) != 0) {
            free(l);
            return -1;
        }
    }
    free(l);
    return 0;
}

static ref_t s_ref_new(const sw_model_t *m, int P)
{
    ref_t r = {.logits = malloc((size_t)sw_model_hparams(m)->n_vocab * sizeof(float)),
               .kv = malloc(sw_kv_span_bytes(m, P))};
    return r;
}

static void s_ref_free(ref_t *r)
{
    free(r->logits);
    free(r->kv);
}

/* One case: a prompt of `cached` tokens goes into the cache, then a prompt
 * of P tokens sharing its first `shared` tokens is evaluated with the cached
 * prefix (its rows as the prompt's continuation); compared with P evaluated
 * whole. Returns the reused length. */
static int s_case(sw_model_t *m, sw_prefix_t *pc, int seed, int cached, int shared, int P,
                  int want_len)
{
    const int V = sw_model_hparams(m)->n_vocab;
    char err[256] = "";
    int32_t *a = malloc(MAX_P * sizeof *a), *b = malloc(MAX_P * sizeof *b);
    for (int i = 0; i < MAX_P; i++) {
        a[i] = s_tok(seed, i, V);
        b[i] = i < shared ? a[i] : s_tok(seed + 1000, i, V);
    }
    /* the earlier request: evaluated whole, stored */
    sw_kv_t *kv = sw_kv_new(m, MAX_P + N_DECODE);
    ref_t ra = s_ref_new(m, cached);
    SW_CHECK_INT(s_eval(m, kv, a, 0, cached, &ra), 0);
    SW_CHECK(sw_prefix_store(pc, "ns", a, cached, kv, 0, err, sizeof err) >= 0);
    sw_kv_free(&kv);
    s_ref_free(&ra);
    /* the reference: the new prompt evaluated whole, nothing cached */
    kv = sw_kv_new(m, MAX_P + N_DECODE);
    ref_t want = s_ref_new(m, P);
    SW_CHECK_INT(s_eval(m, kv, b, 0, P, &want), 0);
    sw_kv_free(&kv);
    /* with the cache */
    const int len = sw_prefix_find(pc, "ns", b, P, P - 1);
    SW_CHECK_INT(len, want_len);
    kv = sw_kv_new(m, MAX_P + N_DECODE);
    SW_CHECK_INT(sw_prefix_restore(pc, "ns", b, len, kv, err, sizeof err), 0);
    SW_CHECK_INT(sw_kv_len(kv), len);
    ref_t got = s_ref_new(m, P);
    SW_CHECK_INT(s_eval(m, kv, b, len, P, &got), 0);
    const int same_kv = !memcmp(got.kv, want.kv, sw_kv_span_bytes(m, P));
    const int same_logits = !memcmp(got.logits, want.logits, (size_t)V * sizeof(float));
    const int same_out = !memcmp(got.out, want.out, sizeof got.out);
    SW_CHECK(same_kv);
    SW_CHECK(same_logits);
    SW_CHECK(same_out);
    fprintf(stderr,
            "  cached %4d, shared %4d, prompt %4d: reused %4d, KV %s, logits %s, tokens %s\n",
            cached, shared, P, len, same_kv ? "equal" : "DIFFER", same_logits ? "equal" : "DIFFER",
            same_out ? "equal" : "DIFFER");
    sw_kv_free(&kv);
    s_ref_free(&want);
    s_ref_free(&got);
    free(a);
    free(b);
    return len;
}

static void s_model_cases(const char *path, int kquant)
{
    char err[256] = "";
    sw_backend_t *be = sw_backend_new("cpu", 2, err, sizeof err);
    sw_model_t *m = be ? sw_model_load(path, 0, -1, be, err, sizeof err) : NULL;
    SW_CHECK(m != NULL);
    if (!m) {
        fprintf(stderr, "%s: %s\n", path, err);
        sw_backend_free(&be);
        return;
    }
    fprintf(stderr, "%s:\n", path);
    sw_prefix_t *pc = sw_prefix_new(m, 0, 12345);
    SW_CHECK_INT(sw_prefix_align(m), SW_PREFIX_BLOCK); // the CPU's chunks are 64 rows
    /* the prefix ends inside window 0, the new rows cross into window 1 of
     * 3 rows (batched attention order, not the tiled matmul) */
    s_case(m, pc, 2, 460, 460, 515, 448);
    /* on the window's end, then a window of one row (the decode order) */
    s_case(m, pc, 3, 530, 530, 513, 512);
    if (!kquant) {
        /* inside window 0; a prompt that went on longer cached it */
        s_case(m, pc, 1, 300, 100, 140, 64);
        /* a window of 8 rows after the prefix */
        s_case(m, pc, 2, 460, 460, 520, 448);
        /* cached by a shorter prompt; the new one runs past two windows */
        s_case(m, pc, 4, 200, 200, 1100, 192);
        /* after two windows, then the next one's rows */
        s_case(m, pc, 5, 1060, 1040, 1070, 1024);
    }
    const sw_prefix_stats_t *st = sw_prefix_stats(pc);
    SW_CHECK(st->hits >= 2 && st->tokens_reused >= 448 + 512);
    SW_CHECK_INT(st->bytes, (size_t)st->blocks * sw_prefix_block_bytes(pc));
    sw_prefix_free(&pc);
    sw_model_free(&m);
    sw_backend_free(&be);
}

/* Keys, namespaces, limits, the budget, a restore after eviction. */
static void s_cache_rules(const char *path)
{
    char err[256] = "";
    sw_backend_t *be = sw_backend_new("cpu", 2, err, sizeof err);
    sw_model_t *m = be ? sw_model_load(path, 0, 4, be, err, sizeof err) : NULL;
    SW_CHECK(m != NULL);
    if (!m) {
        sw_backend_free(&be);
        return;
    }
    const int V = sw_model_hparams(m)->n_vocab, B = SW_PREFIX_BLOCK;
    sw_prefix_t *pc = sw_prefix_new(m, 8, 99);
    int32_t a[8 * SW_PREFIX_BLOCK], b[8 * SW_PREFIX_BLOCK];
    for (int i = 0; i < 8 * B; i++)
        a[i] = b[i] = s_tok(7, i, V);
    b[B + 5] = (a[B + 5] + 1) % V; // differs in the second block
    sw_kv_t *kv = sw_kv_new(m, 8 * B);
    sw_forward_t f = {.n = 4 * B, .tokens = a, .prompt = 1};
    /* a middle stage would get hidden states; [0, 4) is the first: tokens */
    float *out = malloc((size_t)4 * B * sw_model_hparams(m)->n_embd * sizeof(float));
    f.out_hidden = out;
    SW_CHECK_INT(sw_model_forward(m, kv, &f, err, sizeof err), 0);
    SW_CHECK_INT(sw_prefix_store(pc, "x", a, 4 * B + 10, kv, 0, err, sizeof err), 4);
    SW_CHECK_INT(sw_prefix_store(pc, "x", a, 4 * B, kv, 0, err, sizeof err), 0); // held
    SW_CHECK_INT(sw_prefix_find(pc, "x", a, 4 * B + 1, 4 * B), 4 * B);
    SW_CHECK_INT(sw_prefix_find(pc, "x", a, 4 * B + 1, 4 * B - 1), 3 * B); // the limit
    SW_CHECK_INT(sw_prefix_find(pc, "x", b, 4 * B + 1, 4 * B), B);         // one token off
    SW_CHECK_INT(sw_prefix_find(pc, "y", a, 4 * B + 1, 4 * B), 0);         // namespace
    SW_CHECK_INT(sw_prefix_find(pc, "x", a, B - 1, B - 1), 0);             // too short
    /* the budget: room for 2 blocks; the least recently used leaves go */
    const size_t bb = sw_prefix_block_bytes(pc);
    SW_CHECK_INT(sw_prefix_evict(pc, 2 * bb), 2 * bb);
    SW_CHECK_INT(sw_prefix_bytes(pc), 2 * bb);
    SW_CHECK_INT(sw_prefix_find(pc, "x", a, 4 * B + 1, 4 * B), 2 * B); // blocks 0, 1 stay
    /* a restore of blocks gone fails and leaves the cache empty */
    sw_kv_t *kv2 = sw_kv_new(m, 8 * B);
    SW_CHECK(sw_prefix_restore(pc, "x", a, 3 * B, kv2, err, sizeof err) != 0);
    SW_CHECK_INT(sw_kv_len(kv2), 0);
    SW_CHECK_INT(sw_prefix_restore(pc, "x", a, 2 * B, kv2, err, sizeof err), 0);
    SW_CHECK_INT(sw_kv_len(kv2), 2 * B);
    /* a store within a budget of 3 blocks keeps what it needs and evicts others */
    SW_CHECK_INT(sw_prefix_store(pc, "x", a, 4 * B, kv, 3 * bb, err, sizeof err), 1);
    SW_CHECK(sw_prefix_bytes(pc) <= 3 * bb);
    /* the block count bound (8): the least recently used leaves make room */
    SW_CHECK_INT(sw_prefix_store(pc, "z", b, 4 * B, kv, 0, err, sizeof err), 4);
    SW_CHECK_INT(sw_prefix_stats(pc)->blocks, 7);
    SW_CHECK_INT(sw_prefix_store(pc, "w", a, 4 * B, kv, 0, err, sizeof err), 4);
    SW_CHECK_INT(sw_prefix_stats(pc)->blocks, 8);
    SW_CHECK_INT(sw_prefix_find(pc, "w", a, 4 * B + 1, 4 * B), 4 * B);
    /* the empty namespace (the head's, the draft model's) is one like any other */
    sw_prefix_t *pe = sw_prefix_new(m, 8, 5);
    SW_CHECK_INT(sw_prefix_store(pe, "", a, 2 * B, kv, 0, err, sizeof err), 2);
    SW_CHECK_INT(sw_prefix_find(pe, "", a, 2 * B + 1, 2 * B), 2 * B);
    SW_CHECK_INT(sw_prefix_find(pe, "x", a, 2 * B + 1, 2 * B), 0);
    SW_CHECK_INT(sw_prefix_store(pe, "", a, 2 * B, kv, 0, err, sizeof err), 0); // held
    sw_prefix_free(&pe);
    free(out);
    sw_kv_free(&kv);
    sw_kv_free(&kv2);
    sw_prefix_free(&pc);
    sw_model_free(&m);
    sw_backend_free(&be);
}

/* Two stages, each with its own cache: the second gets hidden states. */
static void s_split(const char *path)
{
    char err[256] = "";
    sw_backend_t *be = sw_backend_new("cpu", 2, err, sizeof err);
    sw_model_t *m0 = be ? sw_model_load(path, 0, 12, be, err, sizeof err) : NULL;
    sw_model_t *m1 = be ? sw_model_load(path, 12, -1, be, err, sizeof err) : NULL;
    SW_CHECK(m0 && m1);
    if (!m0 || !m1) {
        sw_model_free(&m0);
        sw_model_free(&m1);
        sw_backend_free(&be);
        return;
    }
    const int V = sw_model_hparams(m0)->n_vocab, E = sw_model_hparams(m0)->n_embd;
    const int A = 600, P = 650, S = 580; // cached prompt, new prompt, shared
    int32_t *a = malloc(A * sizeof *a), *b = malloc(P * sizeof *b);
    for (int i = 0; i < A; i++)
        a[i] = s_tok(11, i, V);
    for (int i = 0; i < P; i++)
        b[i] = i < S ? a[i] : s_tok(12, i, V);
    float *hid = malloc((size_t)P * E * sizeof *hid);
    float *lw = malloc((size_t)V * sizeof *lw), *lg = malloc((size_t)V * sizeof *lg);
    sw_prefix_t *p0 = sw_prefix_new(m0, 0, 1), *p1 = sw_prefix_new(m1, 0, 2);
    /* the earlier request through both stages, each storing its blocks */
    sw_kv_t *k0 = sw_kv_new(m0, P), *k1 = sw_kv_new(m1, P);
    sw_forward_t f0 = {.n = A, .tokens = a, .out_hidden = hid, .prompt = 1};
    sw_forward_t f1 = {.n = A, .hidden = hid, .logits = lw, .n_logits = 1, .prompt = 1};
    SW_CHECK_INT(sw_model_forward(m0, k0, &f0, err, sizeof err), 0);
    SW_CHECK_INT(sw_model_forward(m1, k1, &f1, err, sizeof err), 0);
    SW_CHECK(sw_prefix_store(p0, "head", a, A, k0, 0, err, sizeof err) > 0);
    SW_CHECK(sw_prefix_store(p1, "f32|head", a, A, k1, 0, err, sizeof err) > 0);
    sw_kv_free(&k0);
    sw_kv_free(&k1);
    /* the new prompt whole */
    k0 = sw_kv_new(m0, P);
    k1 = sw_kv_new(m1, P);
    f0 = (sw_forward_t){.n = P, .tokens = b, .out_hidden = hid, .prompt = 1};
    f1 = (sw_forward_t){.n = P, .hidden = hid, .logits = lw, .n_logits = 1, .prompt = 1};
    SW_CHECK_INT(sw_model_forward(m0, k0, &f0, err, sizeof err), 0);
    SW_CHECK_INT(sw_model_forward(m1, k1, &f1, err, sizeof err), 0);
    sw_kv_free(&k0);
    sw_kv_free(&k1);
    /* with each stage's cache */
    const int L = sw_prefix_find(p0, "head", b, P, P - 1);
    SW_CHECK_INT(L, 576);
    SW_CHECK_INT(sw_prefix_find(p1, "f32|head", b, P, P - 1), L);
    k0 = sw_kv_new(m0, P);
    k1 = sw_kv_new(m1, P);
    SW_CHECK_INT(sw_prefix_restore(p0, "head", b, L, k0, err, sizeof err), 0);
    SW_CHECK_INT(sw_prefix_restore(p1, "f32|head", b, L, k1, err, sizeof err), 0);
    f0 = (sw_forward_t){
        .n = P - L, .tokens = b + L, .out_hidden = hid, .prompt = 1, .prompt_cont = 1};
    f1 = (sw_forward_t){
        .n = P - L, .hidden = hid, .logits = lg, .n_logits = 1, .prompt = 1, .prompt_cont = 1};
    SW_CHECK_INT(sw_model_forward(m0, k0, &f0, err, sizeof err), 0);
    SW_CHECK_INT(sw_model_forward(m1, k1, &f1, err, sizeof err), 0);
    SW_CHECK(!memcmp(lg, lw, (size_t)V * sizeof *lg));
    fprintf(stderr, "  2 stages: reused %d of %d, logits %s\n", L, P,
            memcmp(lg, lw, (size_t)V * sizeof *lg) ? "DIFFER" : "equal");
    sw_kv_free(&k0);
    sw_kv_free(&k1);
    sw_prefix_free(&p0);
    sw_prefix_free(&p1);
    sw_model_free(&m0);
    sw_model_free(&m1);
    sw_backend_free(&be);
    free(a);
    free(b);
    free(hid);
    free(lw);
    free(lg);
}

int main(void)
{
    const char *path = sw_test_model();
    s_cache_rules(path);
    s_model_cases(path, 0);
    s_split(path);
    const char *dir = getenv("SW_MODELS_DIR");
    char q[1024];
    snprintf(q, sizeof q, "%s/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf", dir ? dir : "models");
    FILE *fq = fopen(q, "rb");
    if (fq) {
        fclose(fq);
        s_model_cases(q, 1);
    } else {
        sw_test_skip_part("Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf is not in SW_MODELS_DIR");
    }
    return sw_test_done();
}
