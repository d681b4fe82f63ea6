/*
 * draft_model.c - the draft model proposer (see draft_model.h): loading the
 * model and its vocabulary check, sequences and their caches, the catch-up
 * that feeds what a sequence's cache lacks, chain proposals, and the step
 * machine that drives a proposal. Batched forwards are draft_batch.c's,
 * token trees draft_tree.c's (draft_model_impl.h: what they share).
 */
#include "draft_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "draft_model_impl.h"
#include "log.h"

/* Mixed into the target's seed for the draft's RNG: the draft's draws must be
 * independent of the verifier's acceptance tests, which use the seed itself. */
#define S_SEED_MIX 0xd1b54a32d192ed03ull

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
    d->probs = malloc((size_t)d->n_vocab * sizeof *d->probs);
    d->heap_id = malloc(DRAFT_Q_MAX * sizeof *d->heap_id);
    d->heap_val = malloc(DRAFT_Q_MAX * sizeof *d->heap_val);
    if (!d->probs || !d->heap_id || !d->heap_val)
        goto oom;
    d->trees = sw_model_trees(d->m);
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
    free(d->probs);
    free(d->heap_id);
    free(d->heap_val);
    free(d->b_kvs);
    free(d->b_fs);
    sw_prefix_free(&d->prefix);
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
    s->kv = sw_kv_new_grow(dm->m, s->cap, NULL); // grows as the sequence does
    s->cached = malloc((size_t)s->cap * sizeof *s->cached);
    s->q_ids = malloc((size_t)SW_MAX_DRAFT * DRAFT_Q_MAX * sizeof *s->q_ids);
    s->q_vals = malloc((size_t)SW_MAX_DRAFT * DRAFT_Q_MAX * sizeof *s->q_vals);
    s->logits = malloc((size_t)dm->n_vocab * sizeof *s->logits);
    s->tree_logits = malloc((size_t)DRAFT_TREE_WIDTH * dm->n_vocab * sizeof *s->tree_logits);
    sw_sampling_t greedy = sw_sampling_default();
    greedy.temp = 0;
    if (!s->kv || !s->cached || !s->q_ids || !s->q_vals || !s->logits || !s->tree_logits ||
        draft_seq_begin(s, &greedy) != 0)
        draft_seq_free(&s);
    return s;
}

void draft_seq_free(draft_seq_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    draft_seq_t *s = *self_p;
    draft_req_unlink(s);
    sw_sampler_free(&s->s);
    sw_kv_free(&s->kv);
    free(s->cached);
    free(s->q_ids);
    free(s->q_vals);
    free(s->logits);
    free(s->tree_logits);
    free(s);
    *self_p = NULL;
}

int draft_seq_capacity(const draft_seq_t *s)
{
    return s->cap - SW_MAX_DRAFT - 1;
}

int draft_seq_lag(const draft_seq_t *s, const int32_t *ctx, int n_ctx)
{
    const int len = sw_kv_linear(s->kv) < n_ctx ? sw_kv_linear(s->kv) : n_ctx;
    int same = 0;
    while (same < len && s->cached[same] == ctx[same])
        same++;
    return n_ctx - same;
}

void draft_seq_set_prefix_ns(draft_seq_t *s, const char *ns)
{
    snprintf(s->prefix_ns, sizeof s->prefix_ns, "%s", ns ? ns : "");
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
    draft_req_unlink(d);
    d->phase = DRAFT_PHASE_IDLE;
    /* A new request starts from an empty cache: its prompt must be evaluated
     * as one prompt batch, as the target evaluates it, and rows reused from
     * another request's prompt or decode rows would not be. */
    if (sw_kv_truncate(d->kv, 0) != 0)
        return -1;
    return 0;
}

draft_ahead_mem_t *draft_model_ahead_mem(draft_model_t *d)
{
    return &d->ahead;
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

void draft_model_set_load(draft_model_t *dm, draft_load_t *load)
{
    dm->load = load;
}

const sw_prefix_stats_t *draft_model_prefix_stats(const draft_model_t *dm)
{
    return dm->prefix ? sw_prefix_stats(dm->prefix) : NULL;
}

int draft_model_set_prefix(draft_model_t *dm, size_t max_bytes, uint64_t seed)
{
    sw_prefix_free(&dm->prefix);
    dm->prefix_max = max_bytes;
    if (max_bytes == 0)
        return 0;
    dm->prefix = sw_prefix_new(dm->m, 0, seed);
    return dm->prefix ? 0 : -1;
}

/* The n prompt rows tokens[0..n) into an empty cache: the positions the
 * model's prefix cache holds are restored, the rest evaluated as the
 * prompt's continuation (bit for bit what the whole prompt gives), then the
 * prompt's blocks are stored. logits: the last row's into d->logits. 0 or -1. */
static int s_prompt(draft_seq_t *d, const int32_t *tokens, int n, int logits)
{
    draft_model_t *dm = d->dm;
    char err[256] = "";
    int from = 0;
    if (dm->prefix && sw_kv_len(d->kv) == 0 && n >= 2) {
        from = sw_prefix_find(dm->prefix, d->prefix_ns, tokens, n, n - 1);
        if (from > 0 &&
            sw_prefix_restore(dm->prefix, d->prefix_ns, tokens, from, d->kv, err, sizeof err))
            from = 0;
    }
    sw_forward_t p = {.n = n - from,
                      .tokens = tokens + from,
                      .logits = logits ? d->logits : NULL,
                      .n_logits = logits ? 1 : 0,
                      .prompt = 1,
                      .prompt_cont = from > 0};
    if (sw_model_forward(dm->m, d->kv, &p, err, sizeof err) != 0) {
        SW_WARN("draft model: %s", err);
        return -1;
    }
    if (dm->prefix && sw_prefix_store(dm->prefix, d->prefix_ns, tokens, n, d->kv, dm->prefix_max,
                                      err, sizeof err) < 0)
        SW_WARN("draft model: prefix cache: %s", err);
    return 0;
}

/* Appends n tokens to the cache and leaves the last row's logits in d->logits.
 * The first n_prompt of them are prompt rows: they are evaluated together in
 * prompt mode, as the target evaluates a prompt, so that a draft model equal
 * to the target reproduces the target's logits bit for bit. may_post: a few
 * rows without prompt rows become a request (draft_req_post). 0 (done), 1 (posted)
 * or -1. */
static int s_feed(draft_seq_t *d, const int32_t *tokens, int n, int n_prompt, int may_post)
{
    const int len = sw_kv_len(d->kv);
    if (n < 1 || len + n > d->cap)
        return -1;
    if (may_post && n_prompt == 0 && n <= DRAFT_REQ_ROWS) {
        draft_req_t *q = &d->rq;
        memcpy(q->tok, tokens, (size_t)n * sizeof *tokens);
        q->n = n;
        q->tree = 0;
        q->logits = d->logits;
        q->n_logits = 1;
        q->steps = 0;
        memcpy(d->cached + len, tokens, (size_t)n * sizeof *tokens);
        return draft_req_post(d);
    }
    char err[256] = "";
    const int n_prompt_rows = n_prompt < n ? n_prompt : n;
    if (n_prompt_rows == n) {
        if (s_prompt(d, tokens, n, 1) != 0)
            return -1;
        memcpy(d->cached + len, tokens, (size_t)n * sizeof *tokens);
        return 0;
    }
    if (n_prompt_rows > 0) {
        if (s_prompt(d, tokens, n_prompt_rows, 0) != 0)
            return -1;
        memcpy(d->cached + len, tokens, (size_t)n_prompt_rows * sizeof *tokens);
    }
    sw_forward_t f = {.n = n - n_prompt_rows,
                      .tokens = tokens + n_prompt_rows,
                      .logits = d->logits,
                      .n_logits = 1};
    if (sw_model_forward(d->dm->m, d->kv, &f, err, sizeof err) != 0) {
        SW_WARN("draft model: %s", err);
        return -1;
    }
    memcpy(d->cached + len, tokens, (size_t)n * sizeof *tokens);
    return 0;
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

/* The longest prefix of ctx the cache holds as a path from its first slot:
 * the plain part compared in place, then tree slots followed from parent to
 * child (a tree the draft model grew, or the branches it prepared). The tree
 * slots of the match go to slots (*n_slots of them); returns its length. */
static int s_match(const draft_seq_t *d, const int32_t *ctx, int n_ctx, int32_t *slots,
                   int *n_slots)
{
    const int len = sw_kv_len(d->kv), lin = sw_kv_linear(d->kv);
    int m = 0;
    *n_slots = 0;
    while (m < lin && m < n_ctx && d->cached[m] == ctx[m])
        m++;
    if (m < lin || lin == 0)
        return m;
    int prev = lin - 1;
    for (int sl = lin; sl < len && m < n_ctx && *n_slots < SW_MAX_DRAFT; sl++)
        if (sw_kv_parent(d->kv, sl) == prev && d->cached[sl] == ctx[m]) {
            slots[(*n_slots)++] = sl;
            prev = sl;
            m++;
        }
    return m;
}

/* Rolls the cache back to the longest prefix it shares with ctx (a matched
 * tree path becomes plain cache, sw_kv_keep) and feeds the rest (at least
 * the last token, whose logits are needed). all_prompt: when the cache is
 * empty, ctx is all prompt (the warm-up, or a proposal that follows one more
 * token); otherwise ctx is the prompt and the first generated token. Returns
 * the number of tokens fed, or -1. */
static int s_catch_up(draft_seq_t *d, const int32_t *ctx, int n_ctx, int all_prompt, int *posted)
{
    int32_t slots[SW_MAX_DRAFT];
    int n_slots = 0;
    int keep = s_match(d, ctx, n_ctx, slots, &n_slots);
    if (n_slots > 0) {
        const int from = sw_kv_linear(d->kv);
        char err[256] = "";
        if (sw_kv_keep(d->kv, from, slots, n_slots, err, sizeof err) != 0) {
            SW_WARN("draft model: %s", err);
            keep = from;
        } else {
            for (int j = 0; j < n_slots; j++) // ascending, each moves down or stays
                d->cached[from + j] = d->cached[slots[j]];
        }
    }
    if (keep == n_ctx)
        keep = n_ctx - 1;
    const int n_prompt = keep > 0 ? 0 : all_prompt ? n_ctx : n_ctx - 1;
    if (sw_kv_truncate(d->kv, keep) != 0)
        return -1;
    const int rc = s_feed(d, ctx + keep, n_ctx - keep, n_prompt, posted != NULL);
    if (rc < 0)
        return -1;
    if (posted)
        *posted = rc > 0;
    return n_ctx - keep;
}

int draft_seq_warm(draft_seq_t *d, const int32_t *ctx, int n_ctx)
{
    if (n_ctx < 1 || n_ctx > d->cap - 1)
        return -1;
    draft_req_unlink(d);
    d->phase = DRAFT_PHASE_IDLE; // a proposal in progress is dropped
    return s_catch_up(d, ctx, n_ctx, 1, NULL) < 0 ? -1 : 0;
}

int draft_seq_trees(const draft_seq_t *d)
{
    return d->dm->trees;
}

/* The RNG seed of the drafts that follow n positions: a function of the
 * request's seed and the position only, so that drafts prepared ahead equal
 * the drafts made after the verdict (splitmix64 finaliser). */
static uint64_t s_pos_seed(uint64_t seed, int n)
{
    uint64_t z = (seed ^ S_SEED_MIX) ^ ((uint64_t)(uint32_t)n * 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int draft_seq_start(draft_seq_t *d, const int32_t *ctx, int n_ctx, const draft_shape_t *sh,
                    sw_proposal_t *out)
{
    memset(out, 0, sizeof *out);
    out->guess = -1;
    draft_req_unlink(d); // a posted forward of the dropped proposal does not run
    d->phase = DRAFT_PHASE_IDLE;
    d->last_ms = 0;
    d->last_n = 0;
    if (n_ctx < 1 || sh->k < 1 || (sh->extra >= 0 && sh->guess))
        return 0; // nothing to propose: done at once
    d->ctx = ctx;
    d->n_ctx = n_ctx;
    d->sh = *sh;
    if (d->sh.k > SW_MAX_DRAFT)
        d->sh.k = SW_MAX_DRAFT;
    if (d->sh.max_nodes > SW_MAX_DRAFT)
        d->sh.max_nodes = SW_MAX_DRAFT;
    if (!d->dm->trees)
        d->sh.max_nodes = 0; // the draft model's backend runs chains only
    const int fed = sh->guess || sh->extra >= 0;
    d->n_eff = n_ctx + fed;
    if (d->n_eff + d->sh.k + 1 > d->cap) {
        d->sh.k = d->cap - d->n_eff - 1;
        if (d->sh.k < 1)
            return 0;
    }
    d->out = out;
    d->feed = sh->extra;
    d->n = 0;
    d->t0 = sw_now_ms();
    d->phase = DRAFT_PHASE_CATCHUP;
    return 1;
}

/* The repetition history the target uses for the drafts: the last
 * rep_last_n tokens of what they follow. */
static void s_history(draft_seq_t *d)
{
    sw_sampler_clear_history(d->s);
    if (d->params.rep_penalty != 1.0f && d->params.rep_last_n > 0) {
        int from = d->n_ctx - d->params.rep_last_n;
        for (int i = from > 0 ? from : 0; i < d->n_ctx; i++)
            sw_sampler_accept(d->s, d->ctx[i]);
    }
}

/* Ends the proposal: drafting time and count. */
static int s_finish(draft_seq_t *d)
{
    const double t = sw_now_ms();
    d->last_ms = d->catch_n <= 2 ? t - d->t0 : t - d->t_catch;
    d->last_n = d->out->n;
    d->phase = DRAFT_PHASE_DONE;
    return 0;
}

/* Takes the argmax steps of a greedy chain request into the proposal; 1
 * when the chain is complete (k drafts, or the confidence stop). */
static int s_chain_take(draft_seq_t *d)
{
    sw_proposal_t *o = d->out;
    const draft_req_t *q = &d->rq;
    for (int i = 0; i < q->n_out && d->n < d->sh.k; i++) {
        o->tokens[d->n] = q->out[i];
        o->conf[d->n] = q->prob[i];
        if (d->sh.p_min > 0 && q->prob[i] < d->sh.p_min)
            return 1; // the confidence stop
        d->n++;
    }
    return d->n >= d->sh.k;
}

/* Chain steps: greedy without a repetition penalty runs on the backend
 * (sw_model_greedy_steps(), as many steps per call as fit S_SLICE_MS), or,
 * batched with other sequences, one step per flush; the other cases draft
 * one token per step. have: the request posted by the last step ran. */
static int s_chain_step(draft_seq_t *d, int have)
{
    sw_proposal_t *o = d->out;
    const int k = d->sh.k;
    const float p_min = d->sh.p_min;
    const int greedy = !(d->params.temp > 0);
    const int penalty = d->params.rep_penalty != 1.0f && d->params.rep_last_n > 0;
    if (greedy && !penalty) {
        if (have && s_chain_take(d))
            goto done;
        if (d->n == 0) {
            o->tokens[0] = sw_sampler_argmax(d->s, d->logits);
            if (o->tokens[0] < 0)
                return -1;
            o->conf[0] = draft_top_prob(d->logits, d->dm->n_vocab);
            d->n = 1;
            if (k == 1)
                goto done;
            return 1;
        }
        draft_req_t *q = &d->rq;
        q->n = 1;
        q->tok[0] = o->tokens[d->n - 1];
        q->tree = 0;
        q->logits = d->logits;
        q->n_logits = 1;
        q->steps = k - d->n;
        const int rc = draft_req_post(d);
        if (rc != 0)
            return rc; // posted (1) or failed (-1)
        if (s_chain_take(d))
            goto done;
        return 1;
    }
    /* One token: greedy with the penalty, or a draw from the draft's sparse q. */
    {
        const int n = d->n;
        int32_t tok;
        float conf;
        if (greedy) {
            tok = sw_sampler_argmax(d->s, d->logits);
            conf = draft_top_prob(d->logits, d->dm->n_vocab);
        } else {
            if (sw_sampler_probs(d->s, d->logits, d->dm->probs) != 0)
                return -1;
            int32_t *ids = d->q_ids + (size_t)n * DRAFT_Q_MAX;
            float *vals = d->q_vals + (size_t)n * DRAFT_Q_MAX;
            int ns = s_sparse_support(d->dm, ids, vals);
            tok = sw_sampler_sample_probs(d->s, d->dm->probs);
            conf = 0;
            for (int j = 0; j < ns; j++)
                conf = vals[j] > conf ? vals[j] : conf;
            if (tok >= 0) {
                o->q[n].q_tok = d->dm->probs[tok];
                o->q[n].n = ns;
                o->q[n].ids = ids;
                o->q[n].vals = vals;
            }
        }
        if (tok < 0)
            return -1;
        if (n > 0 && conf < p_min)
            goto done;
        o->tokens[n] = tok;
        o->conf[n] = greedy ? conf : o->q[n].q_tok;
        d->n = n + 1;
        sw_sampler_accept(d->s, tok);
        if (d->n == k)
            goto done;
        if (s_feed(d, &o->tokens[n], 1, 0, 1) < 0)
            return -1;
        return 1; // its logits are there by the next step (posted, or run now)
    }
done:
    o->n = d->n;
    o->n_main = d->n;
    o->q_used = !greedy && d->n > 0;
    return s_finish(d);
}

int draft_seq_step(draft_seq_t *d)
{
    const int have = draft_req_taken(d);
    if (have < 0) {
        d->phase = DRAFT_PHASE_IDLE;
        return -1;
    }
    switch (d->phase) {
    case DRAFT_PHASE_CATCHUP: {
        const int fed = d->sh.guess || d->sh.extra >= 0;
        if (!have) {
            int posted = 0;
            const int n = s_catch_up(d, d->ctx, d->n_ctx, fed, &posted);
            if (n < 0) {
                d->phase = DRAFT_PHASE_IDLE;
                return -1;
            }
            d->catch_n = n;
            if (posted)
                return 1;
        }
        d->t_catch = sw_now_ms();
        s_history(d);
        if (d->sh.guess) {
            /* The bonus token of a round whose drafts were all accepted,
             * as the draft model sees it. */
            d->feed = sw_sampler_argmax(d->s, d->logits);
            if (d->feed < 0) {
                d->phase = DRAFT_PHASE_IDLE;
                return -1;
            }
            d->out->guess = d->feed;
        }
        if (d->feed >= 0) {
            sw_sampler_accept(d->s, d->feed);
            d->phase = DRAFT_PHASE_FEED;
            return 1;
        }
        break;
    }
    case DRAFT_PHASE_FEED:
        if (!have) {
            const int rc = s_feed(d, &d->feed, 1, 0, 1);
            if (rc < 0) {
                d->phase = DRAFT_PHASE_IDLE;
                return -1;
            }
            if (rc > 0)
                return 1;
        }
        break;
    case DRAFT_PHASE_CHAIN:
    case DRAFT_PHASE_TREE: {
        int rc = d->phase == DRAFT_PHASE_CHAIN ? s_chain_step(d, have) : draft_tree_step(d, have);
        if (rc == 0 && d->phase == DRAFT_PHASE_TREE)
            rc = s_finish(d); // the tree is written
        if (rc < 0)
            d->phase = DRAFT_PHASE_IDLE;
        return rc;
    }
    default:
        return 0;
    }
    /* Caught up: the logits of the token the drafts follow are there. */
    sw_rng_seed(sw_sampler_rng(d->s), s_pos_seed(d->params.seed, d->n_eff));
    d->n_nodes = 0;
    d->phase = d->sh.max_nodes > 1 ? DRAFT_PHASE_TREE : DRAFT_PHASE_CHAIN;
    return 1;
}

int draft_seq_propose(draft_seq_t *d, const int32_t *ctx, int n_ctx, int k, float p_min,
                      int32_t *out, sw_draft_q_t *q, int *q_used)
{
    *q_used = 0;
    static const draft_shape_t zero;
    draft_shape_t sh = zero;
    sh.k = k;
    sh.p_min = p_min;
    sh.extra = -1;
    sw_proposal_t *p = malloc(sizeof *p);
    if (!p)
        return -1;
    int rc = draft_seq_start(d, ctx, n_ctx, &sh, p);
    while (rc > 0)
        rc = draft_seq_step(d);
    int n = rc < 0 ? -1 : p->n;
    for (int i = 0; i < n; i++) {
        out[i] = p->tokens[i];
        q[i] = p->q[i];
    }
    *q_used = n > 0 && p->q_used;
    free(p);
    return n;
}
