/*
 * decode.c - the verifier, the local target and the round loop of one
 * generation (see decode.h).
 */
#include "decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"

double sw_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- rounds -------------------------------------------------------------------- */

int sw_verdict_kv_path(const sw_verdict_t *v, int32_t *path)
{
    int moved = 0;
    for (int j = 0; j + 1 < v->n_commit; j++) {
        path[j] = v->path[j] - 1;
        moved |= path[j] != j;
    }
    return moved ? v->n_commit - 1 : 0;
}

int sw_round_check(const sw_round_t *r, char *err, size_t err_len)
{
    if (r->n < 1 || r->n_draft < 0 || r->n_draft > SW_MAX_DRAFT || r->n_draft >= r->n ||
        r->kv_keep < 0) {
        sw_errf(err, err_len, "round: %d rows with %d drafts at %d", r->n, r->n_draft, r->kv_keep);
        return -1;
    }
    for (int i = 0; r->parent && i < r->n_draft; i++)
        if (r->parent[i] < 0 || r->parent[i] > i) {
            sw_errf(err, err_len, "round: draft %d hangs under node %d (allowed 0..%d)", i,
                    r->parent[i], i);
            return -1;
        }
    if (r->n_kv_path < 0 || r->n_kv_path > SW_MAX_DRAFT ||
        (r->n_kv_path &&
         (!r->kv_path || r->kv_path_from < 0 || r->kv_keep > r->kv_path_from + r->n_kv_path))) {
        sw_errf(err, err_len, "round: kept path of %d drafts from %d does not fit kv_keep %d",
                r->n_kv_path, r->kv_path_from, r->kv_keep);
        return -1;
    }
    for (int j = 0; j < r->n_kv_path; j++)
        if (r->kv_path[j] < j || r->kv_path[j] >= SW_MAX_DRAFT ||
            (j && r->kv_path[j] <= r->kv_path[j - 1])) {
            sw_errf(err, err_len, "round: kept path offset %d is %d", j, r->kv_path[j]);
            return -1;
        }
    return 0;
}

/* ---- verifier ------------------------------------------------------------------ */

struct sw_verifier {
    sw_sampler_t *sampler; // owns the RNG and the repetition history
    int n_vocab;           // logits per row
    int n_hist;            // positions already fed to the history
    float *work;           // (2 * n_vocab) scratch for sw_verify
    uint64_t digest;       // running digest of every logits row verified
    uint64_t seed;         // the sampling seed; each round reseeds from (seed, kv_keep)
};

/* The RNG seed of a round that keeps kv_keep positions: a function of the
 * session's seed and the round's position only (splitmix64 finaliser), so a
 * verifier that restarted, had the session replayed and retries the round
 * draws the same numbers as one that never stopped. */
static uint64_t s_round_seed(uint64_t seed, int kv_keep)
{
    uint64_t z = seed ^ ((uint64_t)(uint32_t)kv_keep * 0xbf58476d1ce4e5b9ull);
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A fast 64-bit digest step over one row's bits (not cryptographic: it only
 * tells tests whether two runs computed bit-identical logits). */
static uint64_t s_digest(uint64_t h, const float *row, int n)
{
    const uint64_t k = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &row[i], sizeof b);
        h = (h ^ b) * k;
        h ^= h >> 29;
    }
    return h;
}

sw_verifier_t *sw_verifier_new(const sw_sampling_t *params, int n_vocab)
{
    sw_verifier_t *v = calloc(1, sizeof *v);
    if (!v)
        return NULL;
    v->n_vocab = n_vocab;
    v->seed = params->seed;
    v->sampler = sw_sampler_new(params, n_vocab);
    v->work = malloc(2 * (size_t)n_vocab * sizeof(float));
    if (!v->sampler || !v->work) {
        sw_verifier_free(&v);
        return NULL;
    }
    return v;
}

void sw_verifier_free(sw_verifier_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    sw_verifier_t *v = *self_p;
    sw_sampler_free(&v->sampler);
    free(v->work);
    free(v);
    *self_p = NULL;
}

int sw_verifier_run(sw_verifier_t *v, const sw_round_t *r, const float *logits, sw_verdict_t *out,
                    char *err, size_t err_len)
{
    const int n_ctx_rows = r->n - r->n_draft;
    if (r->n_draft < 0 || r->n_draft > SW_MAX_DRAFT || n_ctx_rows < 1 || r->kv_keep < 0) {
        sw_errf(err, err_len, "verify: bad round (%d rows, %d drafts)", r->n, r->n_draft);
        return -1;
    }
    if (r->kv_keep > v->n_hist) {
        sw_errf(err, err_len, "verify: round keeps %d positions but only %d are known", r->kv_keep,
                v->n_hist);
        return -1;
    }
    /* A round that keeps nothing starts the context again (a new prefill, or
     * a replay after a stage failed): the history restarts with it. */
    if (r->kv_keep == 0) {
        sw_sampler_clear_history(v->sampler);
        v->n_hist = 0;
    }
    /* Context rows at positions the history has not seen yet. The committed
     * token t0 of the previous verdict was fed when it was committed. */
    for (int i = 0; i < n_ctx_rows; i++) {
        if (r->kv_keep + i >= v->n_hist) {
            sw_sampler_accept(v->sampler, r->tokens[i]);
            v->n_hist++;
        }
    }
    /* The round's random numbers depend on (seed, kv_keep) only, not on the
     * rounds before it (see s_round_seed). */
    sw_rng_seed(sw_sampler_rng(v->sampler), s_round_seed(v->seed, r->kv_keep));
    sw_verify_in_t in = {
        .k = r->n_draft,
        .draft = r->tokens + n_ctx_rows,
        .q = r->q,
        .logits = logits,
        .parent = r->parent,
    };
    for (int i = 0; i <= r->n_draft; i++)
        v->digest = s_digest(v->digest, logits + (size_t)i * v->n_vocab, v->n_vocab);
    out->logits_digest = v->digest;
    int n = sw_verify_path(v->sampler, &in, v->work, out->tokens, out->path);
    if (n < 1) {
        sw_errf(err, err_len, "verify: the target's logits or the drafts are invalid");
        return -1;
    }
    out->n_commit = n;
    /* sw_verify fed the committed tokens to the history; the last one sits
     * at the position after the accepted drafts and is known from now on. */
    v->n_hist = r->kv_keep + n_ctx_rows + n;
    return 0;
}

int sw_verifier_feed(sw_verifier_t *v, int kv_keep, const int32_t *tokens, int n, char *err,
                     size_t err_len)
{
    if (kv_keep < 0 || n < 0 || kv_keep > v->n_hist) {
        sw_errf(err, err_len, "verify: chunk at %d does not follow the %d known positions", kv_keep,
                v->n_hist);
        return -1;
    }
    if (kv_keep == 0) { // the context starts again (see sw_verifier_run)
        sw_sampler_clear_history(v->sampler);
        v->n_hist = 0;
    }
    for (int i = 0; i < n; i++) {
        if (kv_keep + i >= v->n_hist) {
            sw_sampler_accept(v->sampler, tokens[i]);
            v->n_hist++;
        }
    }
    return 0;
}

/* ---- local target ----------------------------------------------------------------- */

struct sw_local_target {
    sw_model_t *m;      // not owned
    sw_kv_t *kv;        // owned
    sw_verifier_t *ver; // owned
    float *logits;      // (SW_MAX_DRAFT + 1, n_vocab)
};

static int s_local_round(void *ctx, const sw_round_t *r, sw_verdict_t *out, char *err,
                         size_t err_len)
{
    sw_local_target_t *t = ctx;
    double t0 = sw_now_ms();
    if (sw_kv_truncate(t->kv, r->kv_keep) != 0) {
        sw_errf(err, err_len, "target: kv_keep %d exceeds the %d cached positions", r->kv_keep,
                sw_kv_len(t->kv));
        return -1;
    }
    sw_forward_t f = {.n = r->n,
                      .tokens = r->tokens,
                      .logits = t->logits,
                      .n_logits = r->n_draft + 1,
                      .prompt = r->n_draft == 0};
    if (sw_model_forward(t->m, t->kv, &f, err, err_len) != 0)
        return -1;
    if (sw_verifier_run(t->ver, r, t->logits, out, err, err_len) != 0)
        return -1;
    out->compute_ms = sw_now_ms() - t0;
    return 0;
}

sw_local_target_t *sw_local_target_new(sw_model_t *m, int n_ctx, const sw_sampling_t *params,
                                       char *err, size_t err_len)
{
    if (!sw_model_is_first(m) || !sw_model_is_last(m)) {
        sw_errf(err, err_len, "target: a local target needs every layer of the model");
        return NULL;
    }
    const int n_vocab = sw_model_hparams(m)->n_vocab;
    sw_local_target_t *t = calloc(1, sizeof *t);
    if (!t)
        goto oom;
    t->m = m;
    t->kv = sw_kv_new(m, n_ctx);
    t->ver = sw_verifier_new(params, n_vocab);
    t->logits = malloc((size_t)(SW_MAX_DRAFT + 1) * n_vocab * sizeof(float));
    if (!t->kv || !t->ver || !t->logits)
        goto oom;
    return t;
oom:
    sw_errf(err, err_len, "target: out of memory for a %d-position context", n_ctx);
    sw_local_target_free(&t);
    return NULL;
}

void sw_local_target_free(sw_local_target_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    sw_local_target_t *t = *self_p;
    sw_kv_free(&t->kv);
    sw_verifier_free(&t->ver);
    free(t->logits);
    free(t);
    *self_p = NULL;
}

sw_target_t sw_local_target(sw_local_target_t *t)
{
    sw_target_t tg = {.round = s_local_round, .ctx = t};
    return tg;
}

/* ---- generation, one round at a time ------------------------------------------------- */

struct sw_gen {
    sw_gen_opts_t o; // options (callbacks and their contexts are borrowed)
    int k_max;       // most drafts a round may carry (0 = no speculation)
    int32_t *seq;    // (n_prompt + n_predict + 1) committed sequence: prompt, then output
    int n_prompt;    // prompt tokens
    int n_seq;       // committed positions
    int started;     // 1 once the prefill round was handed out
    int pending;     // 1 while a round is out and its verdict not committed
    int done;        // 1 when the generation is over
    int32_t rows[SW_MAX_DRAFT + 1]; // the current decode round's rows
    sw_draft_q_t q[SW_MAX_DRAFT];   // its draft distributions (they point into the proposer)
    sw_round_t r;                   // the current round
    double t_start;                 // sw_gen_new time
    double t_first;                 // first generated token committed (0 = none yet)
    double t_round;                 // the current round was handed out
    sw_gen_stats_t st;              // totals
};

sw_gen_t *sw_gen_new(const int32_t *prompt, int n_prompt, const sw_gen_opts_t *o, char *err,
                     size_t err_len)
{
    if (n_prompt < 1) {
        sw_errf(err, err_len, "generate: the prompt is empty");
        return NULL;
    }
    if (o->n_predict < 0) {
        sw_errf(err, err_len, "generate: n_predict %d", o->n_predict);
        return NULL;
    }
    sw_gen_t *g = calloc(1, sizeof *g);
    if (g)
        g->seq = malloc(((size_t)n_prompt + (size_t)o->n_predict + 1) * sizeof *g->seq);
    if (!g || !g->seq) {
        free(g);
        sw_errf(err, err_len, "generate: out of memory");
        return NULL;
    }
    g->o = *o;
    g->k_max = o->proposer && o->k > 0 ? (o->k < SW_MAX_DRAFT ? o->k : SW_MAX_DRAFT) : 0;
    memcpy(g->seq, prompt, (size_t)n_prompt * sizeof *g->seq);
    g->n_prompt = g->n_seq = n_prompt;
    g->st.n_prompt = n_prompt;
    g->done = o->n_predict < 1;
    g->t_start = sw_now_ms();
    return g;
}

void sw_gen_free(sw_gen_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free((*self_p)->seq);
    free(*self_p);
    *self_p = NULL;
}

int sw_gen_next(sw_gen_t *g, const sw_round_t **out, char *err, size_t err_len)
{
    *out = NULL;
    if (g->done)
        return 1;
    if (g->pending) {
        *out = &g->r; // asked again before the verdict came: the same round
        return 0;
    }
    if (!g->started) {
        /* Prefill: the whole prompt as one round with no drafts. */
        memset(&g->r, 0, sizeof g->r);
        g->r.n = g->n_prompt;
        g->r.tokens = g->seq;
        g->started = g->pending = 1;
        g->t_round = sw_now_ms();
        *out = &g->r;
        return 0;
    }
    /* The last committed token, then the drafts. */
    g->rows[0] = g->seq[g->n_seq - 1];
    int k = 0, q_used = 0;
    if (g->k_max > 0) {
        int room = g->o.n_predict - g->st.n_gen - 1; // drafts past n_predict are wasted
        int want = g->k_max < room ? g->k_max : room;
        if (want > 0) {
            double td = sw_now_ms();
            sw_proposer_t *p = g->o.proposer;
            k = p->propose(p->self, g->seq, g->n_seq, want, g->rows + 1, g->q, &q_used);
            g->st.draft_ms += sw_now_ms() - td;
            if (k < 0 || k > want) {
                sw_errf(err, err_len, "generate: the draft proposer failed");
                return -1;
            }
        }
    }
    memset(&g->r, 0, sizeof g->r);
    g->r.kv_keep = g->n_seq - 1;
    g->r.n = 1 + k;
    g->r.tokens = g->rows;
    g->r.n_draft = k;
    g->r.q = q_used ? g->q : NULL;
    g->pending = 1;
    g->t_round = sw_now_ms();
    *out = &g->r;
    return 0;
}

int sw_gen_commit(sw_gen_t *g, const sw_verdict_t *v, const int32_t **tokens, int *n_tokens,
                  char *err, size_t err_len)
{
    *tokens = NULL;
    *n_tokens = 0;
    if (!g->pending || g->done) {
        sw_errf(err, err_len, "generate: a verdict without a round");
        return -1;
    }
    if (v->n_commit < 1 || v->n_commit > g->r.n_draft + 1) {
        sw_errf(err, err_len, "generate: a verdict of %d tokens for %d drafts", v->n_commit,
                g->r.n_draft);
        return -1;
    }
    const double now = sw_now_ms();
    g->pending = 0;
    g->st.target_ms += v->compute_ms;
    g->st.logits_digest = v->logits_digest;
    if (g->r.kv_keep == 0 && g->r.n_draft == 0 && g->st.n_gen == 0) {
        g->st.prefill_ms = now - g->t_start;
    } else {
        sw_proposer_t *p = g->o.proposer;
        if (g->k_max > 0 && p->observe)
            p->observe(p->self, g->r.n_draft, v->n_commit - 1, now - g->t_round, v->compute_ms);
        g->st.rounds++;
        g->st.drafted += g->r.n_draft;
        g->st.accepted += v->n_commit - 1;
    }
    /* Commit the verdict, cut at n_predict and at an end-of-generation token. */
    int n = v->n_commit, stop = 0;
    if (g->st.n_gen + n >= g->o.n_predict) {
        n = g->o.n_predict - g->st.n_gen;
        stop = 1;
    }
    for (int i = 0; i < n; i++) {
        if (g->o.stop_at_eog && g->o.is_eog && g->o.is_eog(g->o.is_eog_ctx, v->tokens[i])) {
            n = i + 1;
            stop = 1;
            break;
        }
    }
    int32_t *at = g->seq + g->n_seq;
    memcpy(at, v->tokens, (size_t)n * sizeof *at);
    g->n_seq += n;
    g->st.n_gen += n;
    if (!g->t_first) {
        g->t_first = now;
        g->st.ttft_ms = now - g->t_start;
    }
    if (g->o.on_tokens && g->o.on_tokens(g->o.on_tokens_ctx, at, n) != 0)
        stop = 1;
    if (stop) {
        g->done = 1;
        g->st.decode_ms = sw_now_ms() - g->t_first;
    }
    *tokens = at;
    *n_tokens = n;
    return 0;
}

int sw_gen_done(const sw_gen_t *g)
{
    return g->done;
}

const sw_gen_stats_t *sw_gen_stats(const sw_gen_t *g)
{
    return &g->st;
}

const int32_t *sw_gen_output(const sw_gen_t *g, int *n)
{
    *n = g->st.n_gen;
    return g->seq + g->n_prompt;
}

int sw_generate(sw_target_t *target, const int32_t *prompt, int n_prompt, const sw_gen_opts_t *o,
                int32_t *out_tokens, sw_gen_stats_t *st, char *err, size_t err_len)
{
    memset(st, 0, sizeof *st);
    st->n_prompt = n_prompt;
    sw_gen_t *g = sw_gen_new(prompt, n_prompt, o, err, err_len);
    if (!g)
        return -1;
    int rc = -1;
    for (;;) {
        const sw_round_t *r;
        int more = sw_gen_next(g, &r, err, err_len);
        if (more < 0)
            goto out;
        if (more > 0)
            break;
        sw_verdict_t v;
        const int32_t *tokens;
        int n;
        if (target->round(target->ctx, r, &v, err, err_len) != 0 ||
            sw_gen_commit(g, &v, &tokens, &n, err, err_len) != 0)
            goto out;
    }
    rc = 0;
out:
    *st = *sw_gen_stats(g);
    int n_out;
    const int32_t *gen = sw_gen_output(g, &n_out);
    memcpy(out_tokens, gen, (size_t)n_out * sizeof *out_tokens);
    sw_gen_free(&g);
    return rc;
}
