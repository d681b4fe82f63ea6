/*
 * test_model.c - properties of the forward pass on the real default model:
 *
 *  - layer split: running [0, a) then [a, L) with f32 hidden states gives
 *    logits bit-identical to the whole model, for a prompt and for decode;
 *  - batch invariance: a row's logits are bit-identical computed alone and
 *    inside batches of every size from 2 to 65;
 *  - the rows that want no logits are dropped after the last layer's
 *    attention (llama.cpp's inp_out_ids): the kept rows' logits are
 *    bit-identical to those of a call that keeps every row (with the same
 *    prompt-window arithmetic), and the dropped rows' K and V are cached;
 *  - truncate and regenerate gives identical logits (O(1) rollback works);
 *  - a backend group ("cpu,cpu": the layer split a node with two GPUs does)
 *    gives logits bit-identical to one backend;
 *  - greedy steps on the backend (the draft loop) equal one-row forwards
 *    followed by the first argmax;
 *  - several sessions in one call: tests/e2e/test_batch.c;
 *  - a range holds only its share of the weights in resident memory;
 *  - bad input (token ids, ranges, context overflow) is refused cleanly.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "model.h"
#include "sw_test.h"

#define T 65

static int32_t s_tokens[T];

static void s_make_tokens(int n_vocab)
{
    uint32_t x = 12345;
    for (int i = 0; i < T; i++) {
        x = x * 1664525u + 1013904223u;
        s_tokens[i] = (int32_t)((x >> 8) % (uint32_t)n_vocab);
    }
}

static sw_model_t *s_load(const char *path, sw_backend_t *be, int a, int b)
{
    char err[256] = "";
    sw_model_t *m = sw_model_load(path, a, b, be, err, sizeof err);
    if (!m)
        fprintf(stderr, "load %d:%d failed: %s\n", a, b, err);
    return m;
}

/* prompt = 1: the rows are a prompt (its window's arithmetic) */
static int s_fwd_p(sw_model_t *m, sw_kv_t *kv, const int32_t *tok, const float *hid, int n,
                   float *out_hidden, float *logits, int n_logits, int prompt)
{
    char err[256] = "";
    sw_forward_t f = {.n = n,
                      .tokens = tok,
                      .hidden = hid,
                      .out_hidden = out_hidden,
                      .logits = logits,
                      .n_logits = n_logits,
                      .prompt = prompt};
    int rc = sw_model_forward(m, kv, &f, err, sizeof err);
    if (rc)
        fprintf(stderr, "forward: %s\n", err);
    return rc;
}

static int s_fwd(sw_model_t *m, sw_kv_t *kv, const int32_t *tok, const float *hid, int n,
                 float *out_hidden, float *logits, int n_logits)
{
    return s_fwd_p(m, kv, tok, hid, n, out_hidden, logits, n_logits, 0);
}

/* The last layer computes only the rows that want logits. ref: the logits of
 * rows [0, T) computed one at a time; got: T rows of scratch. */
static void s_check_drop(sw_model_t *m, sw_kv_t *kv, const float *ref, float *got, int V)
{
    const size_t row = (size_t)V * sizeof(float);
    /* Decode arithmetic: rows [T - b, T) in one call, only the last k want logits. */
    const int bs[] = {2, 9, 40, T}, ks[] = {1, 2, 8};
    int bad = 0;
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++)
        for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) {
            const int b = bs[i], k = ks[j] < b ? ks[j] : b - 1;
            SW_CHECK_INT(sw_kv_truncate(kv, T - b), 0);
            SW_CHECK_INT(s_fwd(m, kv, s_tokens + T - b, NULL, b, NULL, got, k), 0);
            if (memcmp(got, ref + (size_t)(T - k) * V, (size_t)k * row) != 0) {
                fprintf(stderr, "the last %d of %d rows differ from single rows\n", k, b);
                bad++;
            }
        }
    SW_CHECK_INT(bad, 0);
    /* No row wants logits: the last layer's K and V are cached all the same. */
    SW_CHECK_INT(sw_kv_truncate(kv, 0), 0);
    SW_CHECK_INT(s_fwd(m, kv, s_tokens, NULL, 40, NULL, NULL, 0), 0);
    for (int i = 40; i < T; i++)
        SW_CHECK_INT(s_fwd(m, kv, &s_tokens[i], NULL, 1, NULL, got + (size_t)i * V, 1), 0);
    SW_CHECK(memcmp(got + 40 * (size_t)V, ref + 40 * (size_t)V, (size_t)(T - 40) * row) == 0);
    /* Prompt arithmetic: a window's last layer runs its FFN in the order of the
     * rows that want logits (2 or more: batched, 8 or more: tiled), so the
     * call that keeps every row of an n-row prompt (n_logits = n) and one
     * that drops all but the last k (with n and k on the same side of 2 and
     * 8) compute the same values for those k rows. */
    float *all = malloc((size_t)T * row);
    SW_CHECK(all != NULL);
    const int cases[][2] = {{T, 8}, {T, 20}, {40, 9}, {7, 2}, {7, 5}, {4, 3}, {9, 8}};
    bad = 0;
    for (size_t c = 0; all && c < sizeof cases / sizeof cases[0]; c++) {
        const int n = cases[c][0], k = cases[c][1];
        SW_CHECK_INT(sw_kv_truncate(kv, 0), 0);
        SW_CHECK_INT(s_fwd_p(m, kv, s_tokens, NULL, n, NULL, all, n, 1), 0);
        SW_CHECK_INT(sw_kv_truncate(kv, 0), 0);
        SW_CHECK_INT(s_fwd_p(m, kv, s_tokens, NULL, n, NULL, got, k, 1), 0);
        if (memcmp(got, all + (size_t)(n - k) * V, (size_t)k * row) != 0) {
            fprintf(stderr, "prompt of %d rows: the last %d rows' logits differ\n", n, k);
            bad++;
        }
        /* the cache the dropping call left: the next row as after the full call */
        if (n < T) {
            SW_CHECK_INT(s_fwd(m, kv, &s_tokens[n], NULL, 1, NULL, got, 1), 0);
            SW_CHECK_INT(sw_kv_truncate(kv, 0), 0);
            SW_CHECK_INT(s_fwd_p(m, kv, s_tokens, NULL, n, NULL, all, n, 1), 0);
            SW_CHECK_INT(s_fwd(m, kv, &s_tokens[n], NULL, 1, NULL, all, 1), 0);
            bad += memcmp(got, all, row) != 0;
        }
    }
    SW_CHECK_INT(bad, 0);
    free(all);
}

static long s_rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            kb = strtol(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return kb;
}

/* In a child: loads [a, b), prefaults, runs one row, prints RSS growth (KB)
 * and the range's weight bytes through a pipe. */
static void s_measure(const char *path, int a, int b, long *rss_kb, long *weights_kb)
{
    int fd[2];
    *rss_kb = *weights_kb = -1;
    if (pipe(fd))
        return;
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        long before = s_rss_kb();
        sw_backend_t *be = sw_backend_new("cpu", 1, NULL, 0);
        sw_model_t *m = be ? s_load(path, be, a, b) : NULL;
        long res[2] = {-1, -1};
        if (m) {
            sw_model_prefault(m, NULL, NULL);
            sw_kv_t *kv = sw_kv_new(m, 8);
            const sw_hparams_t *hp = sw_model_hparams(m);
            float *h = calloc((size_t)hp->n_embd, sizeof(float));
            float *lg = calloc((size_t)hp->n_vocab, sizeof(float));
            int32_t tok = 1;
            if (kv && h && lg &&
                s_fwd(m, kv, sw_model_is_first(m) ? &tok : NULL, sw_model_is_first(m) ? NULL : h, 1,
                      h, lg, sw_model_is_last(m)) == 0) {
                res[0] = s_rss_kb() - before;
                res[1] = (long)(sw_model_weight_bytes(m) / 1024);
            }
        }
        ssize_t w = write(fd[1], res, sizeof res);
        _exit(w == sizeof res ? 0 : 1);
    }
    close(fd[1]);
    long res[2];
    if (read(fd[0], res, sizeof res) == sizeof res) {
        *rss_kb = res[0];
        *weights_kb = res[1];
    }
    close(fd[0]);
    waitpid(pid, NULL, 0);
}

int main(void)
{
    const char *path = sw_test_model();
    sw_backend_t *be = sw_backend_new("cpu", 2, NULL, 0);
    SW_CHECK(be != NULL);
    sw_model_t *whole = s_load(path, be, 0, -1);
    SW_CHECK(whole != NULL);
    if (!whole)
        return sw_test_done();
    const sw_hparams_t *hp = sw_model_hparams(whole);
    const int L = hp->n_layer, V = hp->n_vocab, E = hp->n_embd;
    s_make_tokens(V);

    /* Reference: one row at a time. */
    float *ref = malloc((size_t)T * V * sizeof(float));
    float *got = malloc((size_t)T * V * sizeof(float));
    float *hid = malloc((size_t)T * E * sizeof(float));
    sw_kv_t *kv = sw_kv_new(whole, 256);
    if (!ref || !got || !hid || !kv) {
        SW_CHECK(!"out of memory");
        return sw_test_done();
    }
    for (int i = 0; i < T; i++)
        SW_CHECK_INT(s_fwd(whole, kv, &s_tokens[i], NULL, 1, NULL, ref + (size_t)i * V, 1), 0);
    SW_CHECK_INT(sw_kv_len(kv), T);

    /* Batch invariance: rows [T - b, T) as one batch after a cached prefix. */
    int bad_b = 0;
    for (int b = 2; b <= T; b++) {
        SW_CHECK_INT(sw_kv_truncate(kv, T - b), 0);
        SW_CHECK_INT(s_fwd(whole, kv, s_tokens + T - b, NULL, b, NULL, got, b), 0);
        if (memcmp(got, ref + (size_t)(T - b) * V, (size_t)b * V * sizeof(float)) != 0) {
            fprintf(stderr, "batch of %d rows differs from single rows\n", b);
            bad_b++;
        }
    }
    SW_CHECK_INT(bad_b, 0);
    s_check_drop(whole, kv, ref, got, V);

    /* Whole prompt from an empty cache (position 0 inside a 65-row batch). */
    SW_CHECK_INT(sw_kv_truncate(kv, 0), 0);
    SW_CHECK_INT(s_fwd(whole, kv, s_tokens, NULL, T, NULL, got, T), 0);
    SW_CHECK(memcmp(got, ref, (size_t)T * V * sizeof(float)) == 0);

    /* Truncate to the middle and regenerate one row at a time. */
    SW_CHECK_INT(sw_kv_truncate(kv, 30), 0);
    for (int i = 30; i < T; i++)
        SW_CHECK_INT(s_fwd(whole, kv, &s_tokens[i], NULL, 1, NULL, got + (size_t)i * V, 1), 0);
    SW_CHECK(memcmp(got + 30 * (size_t)V, ref + 30 * (size_t)V, (size_t)(T - 30) * V * 4) == 0);

    /* Split [0, a) + [a, L) and three stages, f32 hidden states. */
    const int cuts[][2] = {{L / 2, L}, {1, L - 1}, {L - 1, L}};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        int a = cuts[c][0], b2 = cuts[c][1];
        sw_model_t *s0 = s_load(path, be, 0, a);
        sw_model_t *s1 = s_load(path, be, a, b2);
        sw_model_t *s2 = b2 < L ? s_load(path, be, b2, L) : NULL;
        SW_CHECK(s0 && s1 && (b2 == L || s2));
        if (!s0 || !s1 || (b2 < L && !s2))
            break;
        SW_CHECK(sw_model_is_first(s0) && !sw_model_is_last(s0));
        sw_kv_t *k0 = sw_kv_new(s0, 128), *k1 = sw_kv_new(s1, 128);
        sw_kv_t *k2 = s2 ? sw_kv_new(s2, 128) : NULL;
        float *h2 = malloc((size_t)T * E * sizeof(float));
        /* prompt of 40 rows, then 25 single rows */
        int ok = 1;
        for (int i = 0; i < T && ok;) {
            int n = i == 0 ? 40 : 1;
            ok &= s_fwd(s0, k0, s_tokens + i, NULL, n, hid, NULL, 0) == 0;
            if (s2) {
                ok &= s_fwd(s1, k1, NULL, hid, n, h2, NULL, 0) == 0;
                ok &= s_fwd(s2, k2, NULL, h2, n, NULL, got + (size_t)i * V, n) == 0;
            } else {
                ok &= s_fwd(s1, k1, NULL, hid, n, NULL, got + (size_t)i * V, n) == 0;
            }
            i += n;
        }
        SW_CHECK(ok);
        SW_CHECK(memcmp(got, ref, (size_t)T * V * sizeof(float)) == 0);
        free(h2);
        sw_kv_free(&k0);
        sw_kv_free(&k1);
        sw_kv_free(&k2);
        sw_model_free(&s0);
        sw_model_free(&s1);
        sw_model_free(&s2);
    }

    /* The layers split over a group of two backends in one process. */
    char err[256] = "";
    sw_backend_t *grp = sw_backend_new("cpu,cpu", 1, err, sizeof err);
    SW_CHECK(grp != NULL);
    sw_model_t *gm = grp ? s_load(path, grp, 0, -1) : NULL;
    SW_CHECK(gm != NULL);
    if (gm) {
        sw_kv_t *gk = sw_kv_new(gm, 128);
        int ok = gk != NULL;
        for (int i = 0; i < T && ok;) {
            int n = i == 0 ? 40 : 1;
            ok &= s_fwd(gm, gk, s_tokens + i, NULL, n, NULL, got + (size_t)i * V, n) == 0;
            i += n;
        }
        SW_CHECK(ok);
        SW_CHECK(memcmp(got, ref, (size_t)T * V * sizeof(float)) == 0);
        /* The last device drops the rows that want no logits. */
        SW_CHECK_INT(sw_kv_truncate(gk, 0), 0);
        SW_CHECK_INT(s_fwd(gm, gk, s_tokens, NULL, 40, NULL, got, 3), 0);
        SW_CHECK(memcmp(got, ref + 37 * (size_t)V, 3 * (size_t)V * sizeof(float)) == 0);
        /* A stage range on the group: [L/2, L) from the hidden states of [0, L/2). */
        sw_model_t *s0 = s_load(path, be, 0, L / 2), *s1 = s_load(path, grp, L / 2, L);
        sw_kv_t *k0 = s0 ? sw_kv_new(s0, 128) : NULL, *k1 = s1 ? sw_kv_new(s1, 128) : NULL;
        ok = k0 && k1 && s_fwd(s0, k0, s_tokens, NULL, T, hid, NULL, 0) == 0 &&
             s_fwd(s1, k1, NULL, hid, T, NULL, got, T) == 0;
        SW_CHECK(ok);
        SW_CHECK(memcmp(got, ref, (size_t)T * V * sizeof(float)) == 0);
        /* and a last stage that keeps 5 rows of the hidden states it gets */
        ok = k1 && sw_kv_truncate(k1, 0) == 0 && s_fwd(s1, k1, NULL, hid, T, NULL, got, 5) == 0;
        SW_CHECK(ok);
        SW_CHECK(memcmp(got, ref + (size_t)(T - 5) * V, 5 * (size_t)V * sizeof(float)) == 0);
        /* The greedy loop needs the whole model on one device. */
        int32_t ids[4];
        SW_CHECK(sw_model_greedy_steps(gm, gk, 1, 2, ids, NULL, err, sizeof err) != 0);
        SW_CHECK(strstr(err, "one device") != NULL);
        sw_kv_free(&k0);
        sw_kv_free(&k1);
        sw_model_free(&s0);
        sw_model_free(&s1);
        sw_kv_free(&gk);
        sw_model_free(&gm);
    }
    sw_backend_free(&grp);

    /* Greedy steps on the backend against one-row forwards and the first argmax. */
    {
        enum { STEPS = 12, FROM = 20 };
        int32_t ids[STEPS], want[STEPS];
        float prob[STEPS], want_p[STEPS];
        SW_CHECK_INT(sw_kv_truncate(kv, FROM), 0);
        SW_CHECK_INT(
            sw_model_greedy_steps(whole, kv, s_tokens[FROM], STEPS, ids, prob, err, sizeof err), 0);
        SW_CHECK_INT(sw_kv_len(kv), FROM + STEPS);
        SW_CHECK_INT(sw_kv_truncate(kv, FROM), 0);
        int32_t t = s_tokens[FROM];
        for (int i = 0; i < STEPS; i++) {
            SW_CHECK_INT(s_fwd(whole, kv, &t, NULL, 1, NULL, got, 1), 0);
            int best = 0;
            for (int j = 1; j < V; j++)
                if (got[j] > got[best])
                    best = j;
            double sum = 0;
            for (int j = 0; j < V; j++)
                sum += exp((double)(got[j] - got[best]));
            want[i] = t = best;
            want_p[i] = (float)(1.0 / sum);
        }
        SW_CHECK(!memcmp(ids, want, sizeof ids));
        SW_CHECK(!memcmp(prob, want_p, sizeof prob));
        /* Without probabilities, and refused when it does not fit. */
        SW_CHECK_INT(sw_kv_truncate(kv, FROM), 0);
        SW_CHECK_INT(
            sw_model_greedy_steps(whole, kv, s_tokens[FROM], STEPS, ids, NULL, err, sizeof err), 0);
        SW_CHECK(!memcmp(ids, want, sizeof ids));
        SW_CHECK(sw_model_greedy_steps(whole, kv, 1, 65, ids, NULL, err, sizeof err) != 0);
        SW_CHECK(sw_model_greedy_steps(whole, kv, V, 1, ids, NULL, err, sizeof err) != 0);
        SW_CHECK(strstr(err, "outside the vocabulary") != NULL);
        SW_CHECK_INT(sw_kv_len(kv), FROM + STEPS);
    }

    /* Bad input. */
    int32_t badtok = V;
    sw_forward_t f = {.n = 1, .tokens = &badtok, .logits = got, .n_logits = 1};
    int len_before = sw_kv_len(kv);
    SW_CHECK(sw_model_forward(whole, kv, &f, err, sizeof err) != 0);
    SW_CHECK(strstr(err, "outside the vocabulary") != NULL);
    SW_CHECK_INT(sw_kv_len(kv), len_before);
    SW_CHECK(sw_kv_truncate(kv, len_before + 1) != 0);
    sw_kv_t *tiny = sw_kv_new(whole, 4);
    f.tokens = s_tokens;
    f.n = 5;
    SW_CHECK(tiny && sw_model_forward(whole, tiny, &f, err, sizeof err) != 0);
    SW_CHECK(strstr(err, "do not fit") != NULL);
    sw_kv_free(&tiny);
    SW_CHECK(sw_model_load(path, 5, 5, be, err, sizeof err) == NULL);
    SW_CHECK(sw_model_load(path, 0, L + 1, be, err, sizeof err) == NULL);
    SW_CHECK(strstr(err, "invalid") != NULL);

    /* Resident memory per range (fresh processes). */
    long rss_all, w_all, rss_mid, w_mid, rss_tail, w_tail;
    s_measure(path, 0, L, &rss_all, &w_all);
    s_measure(path, 10, 20, &rss_mid, &w_mid);
    s_measure(path, 20, L, &rss_tail, &w_tail);
    printf("resident KB: whole %ld (weights %ld), layers 10:20 %ld (weights %ld), "
           "20:%d %ld (weights %ld)\n",
           rss_all, w_all, rss_mid, w_mid, L, rss_tail, w_tail);
    SW_CHECK(rss_all > 0 && rss_mid > 0 && rss_tail > 0);
    /* A middle third holds about a third of the layer weights, not the file. */
    SW_CHECK(rss_mid < w_mid + 16 * 1024);
    SW_CHECK(rss_mid < rss_all / 2);
    SW_CHECK(rss_all >= w_all * 9 / 10);

    sw_kv_free(&kv);
    sw_model_free(&whole);
    sw_backend_free(&be);
    free(ref);
    free(got);
    free(hid);
    return sw_test_done();
}
