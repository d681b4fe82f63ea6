/*
 * draft_model.c - the draft model proposer (see draft_model.h).
 */
#include "draft_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "decode.h"
#include "log.h"
#include "model.h"

/* Mixed into the target's seed for the draft's RNG: the draft's draws must be
 * independent of the verifier's acceptance tests, which use the seed itself. */
#define S_SEED_MIX 0xd1b54a32d192ed03ull

struct draft_model {
    char *path;                    // the GGUF path (for messages)
    sw_backend_t *be;              // own backend
    sw_model_t *m;                 // all layers
    int cap;                       // default cache positions of a sequence
    int n_vocab;                   // vocabulary size
    float *logits;                 // (n_vocab) the last row's logits of the sequence drafting
    float *probs;                  // (n_vocab) sampling distribution scratch
    float loop_prob[SW_MAX_DRAFT]; // top probability of each greedy step on the backend
    int32_t *heap_id;              // (DRAFT_Q_MAX) top-support selection
    float *heap_val;               // (DRAFT_Q_MAX)
};

struct draft_seq {
    draft_model_t *dm;    // the model (not owned)
    sw_kv_t *kv;          // this sequence's cache; kv_len positions hold cached[0..kv_len)
    int32_t *cached;      // (cap) tokens whose K/V the cache holds
    int cap;              // cache positions
    sw_sampler_t *s;      // the draft's sampler (target's parameters, mixed seed)
    sw_sampling_t params; // the target's sampling parameters
    int32_t *q_ids;       // (SW_MAX_DRAFT, DRAFT_Q_MAX) sparse supports
    float *q_vals;        // (SW_MAX_DRAFT, DRAFT_Q_MAX) their probabilities
    double last_ms;       // last propose: drafting time (ms)
    int last_n;           // last propose: drafts made
};

int draft_vocab_check(const sw_gguf_t *draft, const sw_gguf_t *target, char *err, size_t err_len)
{
    static const char key[] = "tokenizer.ggml.tokens";
    enum sw_gguf_vtype td, tt;
    uint64_t nd, nt;
    if (sw_gguf_get_arr(draft, key, &td, &nd) != 0 || td != SW_GGUF_STRING) {
        sw_errf(err, err_len, "the draft model has no %s string array: cannot check its vocabulary",
                key);
        return -1;
    }
    if (sw_gguf_get_arr(target, key, &tt, &nt) != 0 || tt != SW_GGUF_STRING) {
        sw_errf(err, err_len, "the target model has no %s string array", key);
        return -1;
    }
    if (nd != nt) {
        sw_errf(err, err_len,
                "vocabulary mismatch: the draft model has %llu tokens, the target %llu (a draft "
                "model must use the target's tokenizer)",
                (unsigned long long)nd, (unsigned long long)nt);
        return -1;
    }
    for (uint64_t i = 0; i < nd; i++) {
        sw_gguf_str_t a, b;
        if (sw_gguf_arr_str(draft, key, i, &a) != 0 || sw_gguf_arr_str(target, key, i, &b) != 0) {
            sw_errf(err, err_len, "cannot read token %llu of the vocabularies",
                    (unsigned long long)i);
            return -1;
        }
        if (a.len != b.len || memcmp(a.ptr, b.ptr, a.len) != 0) {
            sw_errf(
                err, err_len,
                "vocabulary mismatch: token %llu is '%.*s' in the draft model but '%.*s' in the "
                "target (a draft model must use the target's tokenizer)",
                (unsigned long long)i, (int)(a.len > 40 ? 40 : a.len), a.ptr,
                (int)(b.len > 40 ? 40 : b.len), b.ptr);
            return -1;
        }
    }
    return 0;
}

draft_model_t *draft_model_new(const char *path, const sw_gguf_t *target, const char *backend,
                               int n_threads, int n_ctx, char *err, size_t err_len)
{
    char e2[384] = "";
    sw_gguf_t *g = sw_gguf_open(path, e2, sizeof e2);
    if (!g) {
        sw_errf(err, err_len, "draft model %s: %s", path, e2);
        return NULL;
    }
    int rc = draft_vocab_check(g, target, e2, sizeof e2);
    sw_gguf_close(&g);
    if (rc != 0) {
        sw_errf(err, err_len, "draft model %s: %s", path, e2);
        return NULL;
    }
    draft_model_t *d = calloc(1, sizeof *d);
    if (!d)
        goto oom;
    d->path = strdup(path);
    if (!d->path)
        goto oom;
    d->be = sw_backend_new(backend, n_threads, e2, sizeof e2);
    if (!d->be) {
        sw_errf(err, err_len, "draft model %s: %s", path, e2);
        draft_model_free(&d);
        return NULL;
    }
    d->m = sw_model_load(path, 0, -1, d->be, e2, sizeof e2);
    if (!d->m) {
        sw_errf(err, err_len, "draft model %s: %s", path, e2);
        draft_model_free(&d);
        return NULL;
    }
    sw_model_prefault(d->m, NULL, NULL);
    d->n_vocab = sw_model_hparams(d->m)->n_vocab;
    if ((uint64_t)n_ctx + SW_MAX_DRAFT + 1 > (uint64_t)1 << 24) {
        sw_errf(err, err_len, "draft model: context of %d positions is too large", n_ctx);
        draft_model_free(&d);
        return NULL;
    }
    d->cap = n_ctx + SW_MAX_DRAFT + 1; // drafts run past the committed context
    d->logits = malloc((size_t)d->n_vocab * sizeof *d->logits);
    d->probs = malloc((size_t)d->n_vocab * sizeof *d->probs);
    d->heap_id = malloc(DRAFT_Q_MAX * sizeof *d->heap_id);
    d->heap_val = malloc(DRAFT_Q_MAX * sizeof *d->heap_val);
    if (!d->logits || !d->probs || !d->heap_id || !d->heap_val)
        goto oom;
    return d;
oom:
    sw_errf(err, err_len, "draft model %s: out of memory", path);
    draft_model_free(&d);
    return NULL;
}

void draft_model_free(draft_model_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    draft_model_t *d = *self_p;
    sw_model_free(&d->m);
    sw_backend_free(&d->be);
    free(d->path);
    free(d->logits);
    free(d->probs);
    free(d->heap_id);
    free(d->heap_val);
    free(d);
    *self_p = NULL;
}

draft_seq_t *draft_seq_new(draft_model_t *dm, int n_ctx)
{
    if (n_ctx < 0 || (uint64_t)n_ctx + SW_MAX_DRAFT + 1 > (uint64_t)1 << 24)
        return NULL;
    draft_seq_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->dm = dm;
    s->cap = n_ctx ? n_ctx + SW_MAX_DRAFT + 1 : dm->cap;
    s->kv = sw_kv_new(dm->m, s->cap);
    s->cached = malloc((size_t)s->cap * sizeof *s->cached);
    s->q_ids = malloc((size_t)SW_MAX_DRAFT * DRAFT_Q_MAX * sizeof *s->q_ids);
    s->q_vals = malloc((size_t)SW_MAX_DRAFT * DRAFT_Q_MAX * sizeof *s->q_vals);
    sw_sampling_t greedy = sw_sampling_default();
    greedy.temp = 0;
    if (!s->kv || !s->cached || !s->q_ids || !s->q_vals || draft_seq_begin(s, &greedy) != 0)
        draft_seq_free(&s);
    return s;
}

void draft_seq_free(draft_seq_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    draft_seq_t *s = *self_p;
    sw_sampler_free(&s->s);
    sw_kv_free(&s->kv);
    free(s->cached);
    free(s->q_ids);
    free(s->q_vals);
    free(s);
    *self_p = NULL;
}

int draft_seq_capacity(const draft_seq_t *s)
{
    return s->cap - SW_MAX_DRAFT - 1;
}

int draft_seq_begin(draft_seq_t *d, const sw_sampling_t *params)
{
    sw_sampling_t p = *params;
    p.seed ^= S_SEED_MIX;
    sw_sampler_t *s = sw_sampler_new(&p, d->dm->n_vocab);
    if (!s)
        return -1;
    sw_sampler_free(&d->s);
    d->s = s;
    d->params = *params;
    /* A new request starts from an empty cache: its prompt must be evaluated
     * as one prompt batch, as the target evaluates it, and rows reused from
     * another request's prompt or decode rows would not be. */
    if (sw_kv_truncate(d->kv, 0) != 0)
        return -1;
    return 0;
}

const char *draft_model_path(const draft_model_t *d)
{
    return d->path;
}

const char *draft_model_backend(const draft_model_t *d)
{
    return sw_backend_desc(d->be);
}

void draft_seq_last_cost(const draft_seq_t *d, double *ms, int *n_tokens)
{
    *ms = d->last_ms;
    *n_tokens = d->last_n;
}

/* Appends n tokens to the cache and leaves the last row's logits in d->logits.
 * The first n_prompt of them are prompt rows: they are evaluated together in
 * prompt mode, as the target evaluates a prompt, so that a draft model equal
 * to the target reproduces the target's logits bit for bit. */
static int s_feed(draft_seq_t *d, const int32_t *tokens, int n, int n_prompt)
{
    const int len = sw_kv_len(d->kv);
    if (n < 1 || len + n > d->cap)
        return -1;
    char err[256] = "";
    const int n_prompt_rows = n_prompt < n ? n_prompt : n;
    if (n_prompt_rows == n) {
        sw_forward_t p = {
            .n = n, .tokens = tokens, .logits = d->dm->logits, .n_logits = 1, .prompt = 1};
        if (sw_model_forward(d->dm->m, d->kv, &p, err, sizeof err) != 0) {
            SW_WARN("draft model: %s", err);
            return -1;
        }
        memcpy(d->cached + len, tokens, (size_t)n * sizeof *tokens);
        return 0;
    }
    if (n_prompt_rows > 0) {
        sw_forward_t p = {.n = n_prompt_rows, .tokens = tokens, .prompt = 1};
        if (sw_model_forward(d->dm->m, d->kv, &p, err, sizeof err) != 0) {
            SW_WARN("draft model: %s", err);
            return -1;
        }
        memcpy(d->cached + len, tokens, (size_t)n_prompt_rows * sizeof *tokens);
    }
    sw_forward_t f = {.n = n - n_prompt_rows,
                      .tokens = tokens + n_prompt_rows,
                      .logits = d->dm->logits,
                      .n_logits = 1};
    if (sw_model_forward(d->dm->m, d->kv, &f, err, sizeof err) != 0) {
        SW_WARN("draft model: %s", err);
        return -1;
    }
    memcpy(d->cached + len, tokens, (size_t)n * sizeof *tokens);
    return 0;
}

/* The largest softmax probability of the logits at temperature 1. */
static float s_top_prob(const float *l, int n)
{
    float mx = l[0];
    for (int i = 1; i < n; i++)
        if (l[i] > mx)
            mx = l[i];
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += exp((double)(l[i] - mx));
    return (float)(1.0 / sum);
}

/* Min-heap on heap_val of at most DRAFT_Q_MAX entries: keeps the largest. */
static void s_heap_sift(float *v, int32_t *id, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && v[l] < v[m])
            m = l;
        if (r < n && v[r] < v[m])
            m = r;
        if (m == i)
            return;
        float tv = v[i];
        v[i] = v[m];
        v[m] = tv;
        int32_t ti = id[i];
        id[i] = id[m];
        id[m] = ti;
        i = m;
    }
}

/* Restricts probs (n_vocab, sums to 1) to its DRAFT_Q_MAX largest entries,
 * renormalised, in place; writes the support to ids/vals (sorted by nothing)
 * and returns its size. */
static int s_sparse_support(draft_model_t *d, int32_t *ids, float *vals)
{
    int n = 0;
    for (int i = 0; i < d->n_vocab; i++) {
        float p = d->probs[i];
        if (!(p > 0))
            continue;
        if (n < DRAFT_Q_MAX) {
            d->heap_val[n] = p;
            d->heap_id[n] = i;
            if (++n == DRAFT_Q_MAX)
                for (int j = n / 2 - 1; j >= 0; j--)
                    s_heap_sift(d->heap_val, d->heap_id, n, j);
        } else if (p > d->heap_val[0]) {
            d->probs[d->heap_id[0]] = 0;
            d->heap_val[0] = p;
            d->heap_id[0] = i;
            s_heap_sift(d->heap_val, d->heap_id, n, 0);
        } else {
            d->probs[i] = 0;
        }
    }
    double sum = 0;
    for (int j = 0; j < n; j++)
        sum += d->heap_val[j];
    for (int j = 0; j < n; j++) {
        ids[j] = d->heap_id[j];
        vals[j] = (float)(d->heap_val[j] / sum);
        d->probs[ids[j]] = vals[j];
    }
    return n;
}

/* Rolls the cache back to the longest prefix it shares with ctx and feeds
 * the rest (at least the last token, whose logits are needed). all_prompt:
 * ctx is a prompt (draft_seq_warm); otherwise, when the cache is empty, ctx
 * is the prompt followed by the first generated token. Returns the number of
 * tokens fed, or -1. */
static int s_catch_up(draft_seq_t *d, const int32_t *ctx, int n_ctx, int all_prompt)
{
    int keep = 0;
    const int len = sw_kv_len(d->kv);
    while (keep < len && keep < n_ctx && d->cached[keep] == ctx[keep])
        keep++;
    if (keep == n_ctx)
        keep = n_ctx - 1;
    const int n_prompt = keep > 0 ? 0 : all_prompt ? n_ctx : n_ctx - 1;
    if (sw_kv_truncate(d->kv, keep) != 0 || s_feed(d, ctx + keep, n_ctx - keep, n_prompt) != 0)
        return -1;
    return n_ctx - keep;
}

int draft_seq_warm(draft_seq_t *d, const int32_t *ctx, int n_ctx)
{
    if (n_ctx < 1 || n_ctx > d->cap - 1)
        return -1;
    return s_catch_up(d, ctx, n_ctx, 1) < 0 ? -1 : 0;
}

/* Greedy drafts without a repetition penalty: the first from the logits the
 * catch-up left, the other k - 1 by sw_model_greedy_steps(), which keeps the
 * loop on the backend (one graph on a GPU). The same drafts as the one-by-one
 * loop below, which the confidence stop then cuts the same way. */
static int s_propose_greedy(draft_seq_t *d, int k, float p_min, int32_t *out)
{
    out[0] = sw_sampler_argmax(d->s, d->dm->logits);
    if (out[0] < 0)
        return -1;
    const int len = sw_kv_len(d->kv);
    char err[256] = "";
    if (sw_model_greedy_steps(d->dm->m, d->kv, out[0], k - 1, out + 1,
                              p_min > 0 ? d->dm->loop_prob : NULL, err, sizeof err) != 0) {
        SW_WARN("draft model: %s", err);
        return -1;
    }
    memcpy(d->cached + len, out, (size_t)(k - 1) * sizeof *out);
    for (int n = 1; n < k; n++)
        if (p_min > 0 && d->dm->loop_prob[n - 1] < p_min)
            return n;
    return k;
}

int draft_seq_propose(draft_seq_t *d, const int32_t *ctx, int n_ctx, int k, float p_min,
                      int32_t *out, sw_draft_q_t *q, int *q_used)
{
    *q_used = 0;
    d->last_ms = 0;
    d->last_n = 0;
    if (n_ctx < 1 || k < 1)
        return 0;
    if (k > SW_MAX_DRAFT)
        k = SW_MAX_DRAFT;
    if (n_ctx + k > d->cap) {
        k = d->cap - n_ctx;
        if (k < 1)
            return 0;
    }
    const double t0 = sw_now_ms();
    const int catch_up = s_catch_up(d, ctx, n_ctx, 0);
    if (catch_up < 0)
        return -1;
    const double t1 = sw_now_ms();

    /* The repetition history the target uses: the last rep_last_n tokens. */
    const int greedy = !(d->params.temp > 0);
    sw_sampler_clear_history(d->s);
    if (d->params.rep_penalty != 1.0f && d->params.rep_last_n > 0) {
        int from = n_ctx - d->params.rep_last_n;
        for (int i = from > 0 ? from : 0; i < n_ctx; i++)
            sw_sampler_accept(d->s, ctx[i]);
    }
    int n = 0;
    if (greedy && k > 1 && !(d->params.rep_penalty != 1.0f && d->params.rep_last_n > 0)) {
        n = s_propose_greedy(d, k, p_min, out);
        if (n < 0)
            return -1;
        goto done;
    }
    for (; n < k; n++) {
        int32_t tok;
        float conf;
        if (greedy) {
            tok = sw_sampler_argmax(d->s, d->dm->logits);
            conf = p_min > 0 ? s_top_prob(d->dm->logits, d->dm->n_vocab) : 1.0f;
        } else {
            if (sw_sampler_probs(d->s, d->dm->logits, d->dm->probs) != 0)
                return -1;
            int32_t *ids = d->q_ids + (size_t)n * DRAFT_Q_MAX;
            float *vals = d->q_vals + (size_t)n * DRAFT_Q_MAX;
            int ns = s_sparse_support(d->dm, ids, vals);
            tok = sw_sampler_sample_probs(d->s, d->dm->probs);
            conf = 0;
            for (int j = 0; j < ns; j++)
                conf = vals[j] > conf ? vals[j] : conf;
            if (tok >= 0) {
                q[n].q_tok = d->dm->probs[tok];
                q[n].n = ns;
                q[n].ids = ids;
                q[n].vals = vals;
            }
        }
        if (tok < 0)
            return -1;
        if (n > 0 && conf < p_min)
            break;
        out[n] = tok;
        sw_sampler_accept(d->s, tok);
        if (n + 1 < k && s_feed(d, &out[n], 1, 0) != 0)
            return -1;
    }
done:
    *q_used = !greedy && n > 0;
    const double t2 = sw_now_ms();
    d->last_ms = catch_up <= 2 ? t2 - t0 : t2 - t1;
    d->last_n = n;
    return n;
}
