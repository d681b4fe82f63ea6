/*
 * test_batch.c - one forward call over the rows of several sessions
 * (sw_model_forward_batch, what a stage serving many users runs) on the real
 * default model:
 *
 *  - sessions with prompts of different lengths (1 to 150 rows: one chunk,
 *    several chunks) and then rounds of 1 to 17 decode/verification rows, run
 *    as one call per stage, give hidden states and logits bit-identical to
 *    each session run alone, through a 3-stage split ([0, a), [a, b), [b, L))
 *    and through the whole model;
 *  - more sessions than share one chunk (70 single-row sessions) are cut
 *    into several chunks with the same result;
 *  - a call naming one cache twice, or with a row that does not fit, is
 *    refused and leaves every cache as it was.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model.h"
#include "sw_test.h"

#define NS 6      // sessions of the split test
#define ROUNDS 5  // decode rounds after the prompt
#define N_CTX 256 // positions per session
#define MAX_ROWS 150

static const int s_prompt_len[NS] = {1, 7, 150, 3, 64, 65};
static const int s_round_rows[ROUNDS][NS] = {{1, 1, 1, 1, 1, 1},
                                             {5, 1, 17, 2, 1, 9},
                                             {1, 9, 1, 17, 3, 1},
                                             {2, 2, 2, 2, 2, 2},
                                             {17, 1, 4, 1, 8, 1}};

static int32_t s_tok(int s, int pos, int n_vocab)
{
    uint32_t x = (uint32_t)(s * 7919 + pos * 104729 + 12345);
    x = x * 1664525u + 1013904223u;
    return (int32_t)((x >> 8) % (uint32_t)n_vocab);
}

static sw_model_t *s_load(const char *path, sw_backend_t *be, int a, int b)
{
    char err[256] = "";
    sw_model_t *m = sw_model_load(path, a, b, be, err, sizeof err);
    if (!m)
        fprintf(stderr, "load %d:%d failed: %s\n", a, b, err);
    return m;
}

typedef struct sess {
    sw_kv_t *kv[3]; // per stage
    int len;        // positions so far
} sess_t;

/* One step of every session through the stages: alone (batched = 0) or in
 * one call per stage (batched = 1). rows[s] rows of session s; logits of all
 * of them into logits[s]. */
static int s_step(sw_model_t **st, int n_st, sess_t *ss, int ns, const int *rows, int prompt,
                  int n_vocab, int n_embd, float **hid_a, float **hid_b, float **logits,
                  int batched)
{
    char err[256] = "";
    int32_t *tok[NS * 12];
    sw_forward_t f[NS * 12];
    sw_kv_t *kv[NS * 12];
    for (int s = 0; s < ns; s++) {
        tok[s] = malloc((size_t)rows[s] * sizeof(int32_t));
        for (int r = 0; r < rows[s]; r++)
            tok[s][r] = s_tok(s, ss[s].len + r, n_vocab);
    }
    int rc = 0;
    for (int k = 0; k < n_st && rc == 0; k++) {
        const int last = k == n_st - 1;
        for (int s = 0; s < ns; s++) {
            sw_forward_t fw = {.n = rows[s],
                               .tokens = k == 0 ? tok[s] : NULL,
                               .hidden = k == 0 ? NULL : (k % 2 ? hid_a[s] : hid_b[s]),
                               .out_hidden = last ? NULL : (k % 2 ? hid_b[s] : hid_a[s]),
                               .logits = last ? logits[s] : NULL,
                               .n_logits = last ? rows[s] : 0,
                               .prompt = prompt};
            f[s] = fw;
            kv[s] = ss[s].kv[k];
            if (!batched && sw_model_forward(st[k], kv[s], &f[s], err, sizeof err) != 0) {
                fprintf(stderr, "forward: %s\n", err);
                rc = -1;
            }
        }
        if (batched && sw_model_forward_batch(st[k], kv, f, ns, err, sizeof err) != 0) {
            fprintf(stderr, "batched forward: %s\n", err);
            rc = -1;
        }
    }
    (void)n_embd;
    for (int s = 0; s < ns; s++) {
        ss[s].len += rows[s];
        free(tok[s]);
    }
    return rc;
}

/* Runs the prompts and rounds of NS sessions alone and batched through the
 * stages st[0..n_st); 1 when every logit matches bit for bit. */
static int s_compare(sw_model_t **st, int n_st, int n_vocab, int n_embd)
{
    sess_t alone[NS], batch[NS];
    float *hid_a[NS], *hid_b[NS], *la[NS], *lb[NS];
    int ok = 1;
    for (int s = 0; s < NS; s++) {
        alone[s].len = batch[s].len = 0;
        for (int k = 0; k < n_st; k++) {
            alone[s].kv[k] = sw_kv_new(st[k], N_CTX);
            batch[s].kv[k] = sw_kv_new(st[k], N_CTX);
            ok &= alone[s].kv[k] && batch[s].kv[k];
        }
        hid_a[s] = malloc((size_t)MAX_ROWS * n_embd * sizeof(float));
        hid_b[s] = malloc((size_t)MAX_ROWS * n_embd * sizeof(float));
        la[s] = malloc((size_t)MAX_ROWS * n_vocab * sizeof(float));
        lb[s] = malloc((size_t)MAX_ROWS * n_vocab * sizeof(float));
        ok &= hid_a[s] && hid_b[s] && la[s] && lb[s];
    }
    for (int step = 0; ok && step <= ROUNDS; step++) {
        const int *rows = step == 0 ? s_prompt_len : s_round_rows[step - 1];
        ok &=
            s_step(st, n_st, alone, NS, rows, step == 0, n_vocab, n_embd, hid_a, hid_b, la, 0) == 0;
        ok &=
            s_step(st, n_st, batch, NS, rows, step == 0, n_vocab, n_embd, hid_a, hid_b, lb, 1) == 0;
        for (int s = 0; s < NS && ok; s++) {
            if (memcmp(la[s], lb[s], (size_t)rows[s] * n_vocab * sizeof(float)) != 0) {
                fprintf(stderr, "%d stage(s), step %d, session %d (%d rows): logits differ\n", n_st,
                        step, s, rows[s]);
                ok = 0;
            }
            for (int k = 0; k < n_st; k++)
                ok &= sw_kv_len(alone[s].kv[k]) == sw_kv_len(batch[s].kv[k]);
        }
    }
    for (int s = 0; s < NS; s++) {
        for (int k = 0; k < n_st; k++) {
            sw_kv_free(&alone[s].kv[k]);
            sw_kv_free(&batch[s].kv[k]);
        }
        free(hid_a[s]);
        free(hid_b[s]);
        free(la[s]);
        free(lb[s]);
    }
    return ok;
}

int main(void)
{
    const char *path = sw_test_model();
    sw_backend_t *be = sw_backend_new("cpu", 2, NULL, 0);
    SW_CHECK(be != NULL);
    sw_model_t *whole = be ? s_load(path, be, 0, -1) : NULL;
    SW_CHECK(whole != NULL);
    if (!whole)
        return sw_test_done();
    const sw_hparams_t *hp = sw_model_hparams(whole);
    const int L = hp->n_layer, V = hp->n_vocab, E = hp->n_embd;

    /* the whole model, then three stages */
    SW_CHECK(s_compare(&whole, 1, V, E));
    sw_model_t *st[3] = {s_load(path, be, 0, L / 3), s_load(path, be, L / 3, 2 * L / 3),
                         s_load(path, be, 2 * L / 3, L)};
    SW_CHECK(st[0] && st[1] && st[2]);
    if (st[0] && st[1] && st[2])
        SW_CHECK(s_compare(st, 3, V, E));

    /* 70 single-row sessions: more than one chunk holds */
    enum { MANY = 70 };
    sw_kv_t *ka[MANY], *kb[MANY];
    sw_forward_t f[MANY];
    int32_t tok[MANY];
    float *la = malloc((size_t)MANY * V * sizeof(float));
    float *lb = malloc((size_t)MANY * V * sizeof(float));
    char err[256] = "";
    int ok = la && lb;
    for (int s = 0; s < MANY; s++) {
        ka[s] = sw_kv_new(whole, 8);
        kb[s] = sw_kv_new(whole, 8);
        ok &= ka[s] && kb[s];
    }
    for (int pos = 0; ok && pos < 3; pos++) {
        for (int s = 0; s < MANY; s++) {
            tok[s] = s_tok(s, pos, V);
            sw_forward_t fw = {
                .n = 1, .tokens = &tok[s], .logits = la + (size_t)s * V, .n_logits = 1};
            ok &= sw_model_forward(whole, ka[s], &fw, err, sizeof err) == 0;
            fw.logits = lb + (size_t)s * V;
            f[s] = fw;
        }
        ok &= sw_model_forward_batch(whole, kb, f, MANY, err, sizeof err) == 0;
        ok &= memcmp(la, lb, (size_t)MANY * V * sizeof(float)) == 0;
    }
    SW_CHECK(ok);

    /* refusals leave the caches alone */
    sw_kv_t *twice[2] = {kb[0], kb[0]};
    sw_forward_t f2[2] = {f[0], f[1]};
    f2[1].logits = lb + V;
    SW_CHECK(sw_model_forward_batch(whole, twice, f2, 2, err, sizeof err) != 0);
    SW_CHECK(strstr(err, "twice") != NULL);
    sw_kv_t *full = sw_kv_new(whole, 3); /* holds 3 positions: after 3 rows it is full */
    sw_kv_t *pair[2] = {kb[1], full};
    int32_t three[3] = {1, 2, 3};
    sw_forward_t fill = {.n = 3, .tokens = three, .logits = la, .n_logits = 1};
    SW_CHECK(full && sw_model_forward(whole, full, &fill, err, sizeof err) == 0);
    const int len1 = sw_kv_len(kb[1]);
    SW_CHECK(sw_model_forward_batch(whole, pair, f2, 2, err, sizeof err) != 0);
    SW_CHECK(strstr(err, "do not fit") != NULL);
    SW_CHECK_INT(sw_kv_len(kb[1]), len1);
    SW_CHECK_INT(sw_kv_len(full), 3);
    sw_kv_free(&full);

    for (int s = 0; s < MANY; s++) {
        sw_kv_free(&ka[s]);
        sw_kv_free(&kb[s]);
    }
    free(la);
    free(lb);
    for (int k = 0; k < 3; k++)
        sw_model_free(&st[k]);
    sw_model_free(&whole);
    sw_backend_free(&be);
    return sw_test_done();
}
