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

int sw_round_kv(sw_kv_t *kv, const sw_round_t *r, char *err, size_t err_len)
{
    if (r->n_kv_path > 0) {
        int32_t slots[SW_MAX_DRAFT];
        for (int j = 0; j < r->n_kv_path; j++)
            slots[j] = r->kv_path_from + r->kv_path[j];
        if (sw_kv_keep(kv, r->kv_path_from, slots, r->n_kv_path, err, err_len) != 0)
            return -1;
    }
    if (sw_kv_truncate(kv, r->kv_keep) != 0) {
        sw_errf(err, err_len, "round: kv_keep %d exceeds the %d cached positions", r->kv_keep,
                sw_kv_len(kv));
        return -1;
    }
    return 0;
}

int sw_round_parents(const sw_round_t *r, int row0, int rows, int32_t *out)
{
    if (!r->parent || r->n_draft == 0)
        return 0;
    const int n_ctx_rows = r->n - r->n_draft;
    for (int i = 0; i < rows; i++) {
        const int row = row0 + i;
        out[i] = row < n_ctx_rows ? r->kv_keep + row - 1
                                  : r->kv_keep + n_ctx_rows - 1 + r->parent[row - n_ctx_rows];
    }
    return 1;
}

/* ---- verifier ------------------------------------------------------------------ */

struct sw_verifier {
    sw_sampler_t *sampler; // owns the RNG and the repetition history
    int n_vocab;           // logits per row
    int n_hist;            // positions already fed to the history
    float *work;           // (2 * n_vocab) scratch for sw_verify
    uint64_t digest;       // running digest of every logits row verified since the context
                           // last started (kv_keep == 0)
    uint64_t seed;         // the sampling seed; each round reseeds from it and the
                           // position of its first draw
    /* the state before the last sw_verifier_run, for the same round verified again */
    int last_keep;          // its kv_keep, -1 = none (sw_verifier_feed or a restart since)
    int last_n_hist;        // n_hist before it
    uint64_t last_digest;   // digest before it
    sw_sampler_mark_t mark; // the history before it
    int32_t *mark_buf;      // (sw_sampler_history_cap) entries it overwrote
};

/* The RNG seed of a round whose first draw is for position pos (the round's
 * kv_keep plus its context rows): a function of the session's seed and that
 * position only (splitmix64 finaliser), so a verifier that restarted, had the
 * session replayed and retries the round draws the same numbers as one that
 * never stopped, and a prompt draws the same whether it came whole or in
 * pieces cut by the scheduler's timing (the last piece's kv_keep moves with
 * the cut; the position after the prompt does not). */
static uint64_t s_round_seed(uint64_t seed, int pos)
{
    uint64_t z = seed ^ ((uint64_t)(uint32_t)pos * 0xbf58476d1ce4e5b9ull);
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

/* The context starts again (kv_keep == 0): the repetition history and the
 * logits digest with it. A replay after a fault recomputes every row of the
 * rounds it resends bit for bit, so a tail that survived the fault and
 * verifies them a second time ends with the digest of a run without it. */
static void s_restart(sw_verifier_t *v)
{
    sw_sampler_clear_history(v->sampler);
    v->n_hist = 0;
    v->digest = 0;
    v->last_keep = -1;
}

sw_verifier_t *sw_verifier_new(const sw_sampling_t *params, int n_vocab)
{
    sw_verifier_t *v = calloc(1, sizeof *v);
    if (!v)
        return NULL;
    v->n_vocab = n_vocab;
    v->seed = params->seed;
    v->last_keep = -1;
    v->sampler = sw_sampler_new(params, n_vocab);
    v->work = malloc(2 * (size_t)n_vocab * sizeof(float));
    const int cap = v->sampler ? sw_sampler_history_cap(v->sampler) : 0;
    v->mark_buf = malloc(((size_t)cap + 1) * sizeof(int32_t));
    if (!v->sampler || !v->work || !v->mark_buf) {
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
    free(v->mark_buf);
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
    if (r->kv_keep > 0 && r->kv_keep == v->last_keep) {
        /* The last round again (its verdict went with a lost relay): undo what
         * it did to the history and the digest. A new round always keeps
         * more positions than the one before it. */
        sw_sampler_history_rewind(v->sampler, v->mark_buf, &v->mark);
        v->n_hist = v->last_n_hist;
        v->digest = v->last_digest;
    }
    if (r->kv_keep > v->n_hist) {
        sw_errf(err, err_len, "verify: round keeps %d positions but only %d are known", r->kv_keep,
                v->n_hist);
        return -1;
    }
    /* A round that keeps nothing starts the context again (a new prefill, or
     * a replay after a stage failed): the history and the digest restart with it. */
    if (r->kv_keep == 0)
        s_restart(v);
    v->last_keep = r->kv_keep;
    v->last_n_hist = v->n_hist;
    v->last_digest = v->digest;
    sw_sampler_history_mark(v->sampler, n_ctx_rows + r->n_draft + 1, v->mark_buf, &v->mark);
    /* Context rows at positions the history has not seen yet. The committed
     * token t0 of the previous verdict was fed when it was committed. */
    for (int i = 0; i < n_ctx_rows; i++) {
        if (r->kv_keep + i >= v->n_hist) {
            sw_sampler_accept(v->sampler, r->tokens[i]);
            v->n_hist++;
        }
    }
    /* The round's random numbers depend on the seed and the position of its
     * first draw only, not on the rounds before it or on how the prompt was
     * cut (see s_round_seed). */
    sw_rng_seed(sw_sampler_rng(v->sampler), s_round_seed(v->seed, r->kv_keep + n_ctx_rows));
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
    if (kv_keep == 0) // the context starts again (see sw_verifier_run)
        s_restart(v);
    v->last_keep = -1; // a chunk between: the last round is not the one before any more
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
    /* Nothing to wait for here: the idle work (drafting ahead) runs first,
     * so that one process follows the pipeline's logic. */
    while (r->idle && r->idle(r->idle_ctx) > 0)
        ;
    double t0 = sw_now_ms();
    if (sw_round_check(r, err, err_len) != 0 || sw_round_kv(t->kv, r, err, err_len) != 0)
        return -1;
    int32_t parent[SW_MAX_DRAFT + 1];
    sw_forward_t f = {.n = r->n,
                      .tokens = r->tokens,
                      .logits = t->logits,
                      .n_logits = r->n_draft + 1,
                      .prompt = r->n_draft == 0};
    if (sw_round_parents(r, 0, r->n, parent))
        f.parent = parent;
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
    t->kv = sw_kv_new_grow(m, n_ctx, NULL);
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

/* What the generation's drafting job is for. */
enum {
    S_JOB_NONE = 0, // no job
    S_JOB_NEXT,     // the next round, after the committed sequence
    S_JOB_AHEAD,    // the round after the one that is out, for its likely outcome
    S_JOB_DECLINED, // the proposer declined to draft ahead for the round that is out
};

struct sw_gen {
    sw_gen_opts_t o; // options (callbacks and their contexts are borrowed)
    int k_max;       // deepest drafts a round may carry (0 = no speculation)
    int32_t *seq;    // (n_prompt + n_predict + 1) committed sequence: prompt, then output
    int n_prompt;    // prompt tokens
    int n_seq;       // committed positions
    int started;     // 1 once the prefill round was handed out
    int pending;     // 1 while a round is out and its verdict not committed
    int done;        // 1 when the generation is over
    int32_t rows[SW_MAX_DRAFT + 1]; // the current decode round's rows
    sw_proposal_t prop;             // its drafts; their q entries point into q_ids / q_vals
    int32_t *q_ids;                 // (SW_MAX_DRAFT, SW_PROPOSAL_Q_MAX) copies of sparse q
    float *q_vals;                  // (SW_MAX_DRAFT, SW_PROPOSAL_Q_MAX)
    int32_t kvp[SW_MAX_DRAFT];      // the next round's kept path (offsets), after a tree round
    int n_kvp;                      // its length (0 = nothing moves)
    int kvp_from;                   // its first cache position
    sw_round_t r;                   // the current round
    /* the drafting job (sw_gen_work) */
    int job;               // S_JOB_*
    int job_running;       // 1 while the proposer has steps left
    sw_proposal_t job_out; // what it proposes
    int32_t *pseq;         // (n_prompt + n_predict + SW_MAX_DRAFT + 2) an ahead job's sequence:
                           // the committed one plus the out round's main path
    int n_pseq;            // its length
    int job_ahead;         // 1: the job was started while a round was out
    char job_err[256];     // why the proposer failed in sw_gen_work's idle hook
    int job_failed;        // 1 when it did
    double t_start;        // sw_gen_new time
    double t_first;        // first generated token committed (0 = none yet)
    double t_round;        // the current round was handed out
    double t_commit;       // the last verdict was committed
    sw_gen_stats_t st;     // totals
};

static int s_gen_idle(void *ctx);

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
    const size_t cap = (size_t)n_prompt + (size_t)o->n_predict + 1;
    if (g) {
        g->seq = malloc(cap * sizeof *g->seq);
        g->pseq = malloc((cap + SW_MAX_DRAFT + 1) * sizeof *g->pseq);
        g->q_ids = malloc((size_t)SW_MAX_DRAFT * SW_PROPOSAL_Q_MAX * sizeof *g->q_ids);
        g->q_vals = malloc((size_t)SW_MAX_DRAFT * SW_PROPOSAL_Q_MAX * sizeof *g->q_vals);
    }
    if (!g || !g->seq || !g->pseq || !g->q_ids || !g->q_vals) {
        sw_gen_free(&g);
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
    sw_gen_t *g = *self_p;
    free(g->seq);
    free(g->pseq);
    free(g->q_ids);
    free(g->q_vals);
    free(g);
    *self_p = NULL;
}

/* The most drafts deep a round may carry when n_gen tokens are committed:
 * drafts past n_predict are wasted. */
static int s_want(const sw_gen_t *g, int n_gen)
{
    const int room = g->o.n_predict - n_gen - 1;
    return g->k_max < room ? g->k_max : room;
}

/* Depth of the deepest draft of a proposal, or -1 when it is malformed (a
 * parent out of range, two siblings with one token, q without entries). */
static int s_prop_depth(const sw_proposal_t *p)
{
    if (p->n < 0 || p->n > SW_MAX_DRAFT)
        return -1;
    if (!p->tree)
        return p->n;
    int depth[SW_MAX_DRAFT + 1] = {0}, deepest = 0;
    for (int i = 0; i < p->n; i++) {
        if (p->parent[i] < 0 || p->parent[i] > i)
            return -1;
        for (int c = 0; c < i; c++)
            if (p->parent[c] == p->parent[i] && p->tokens[c] == p->tokens[i])
                return -1;
        depth[i + 1] = depth[p->parent[i]] + 1;
        deepest = depth[i + 1] > deepest ? depth[i + 1] : deepest;
    }
    return deepest;
}

/* Starts the proposer on ctx[0..n_ctx) (guess: ahead, see sw_proposer_t). */
static int s_job_start(sw_gen_t *g, int job, const int32_t *ctx, int n_ctx, int want, int guess,
                       char *err, size_t err_len)
{
    sw_proposer_t *p = g->o.proposer;
    const double t0 = sw_now_ms();
    memset(&g->job_out, 0, sizeof g->job_out);
    g->job_out.guess = -1;
    g->job = job;
    g->job_ahead = g->pending;
    int rc;
    if (p->start && p->step) {
        rc = p->start(p->self, ctx, n_ctx, want, guess, &g->job_out);
        g->job_running = rc == 0;
    } else {
        rc = p->propose(p->self, ctx, n_ctx, want, guess, &g->job_out);
        g->job_running = 0;
    }
    const double ms = sw_now_ms() - t0;
    if (g->job_ahead)
        g->st.ahead_ms += ms;
    else
        g->st.draft_ms += ms;
    if (rc != 0) {
        g->job = S_JOB_NONE;
        sw_errf(err, err_len, "generate: the draft proposer failed");
        return -1;
    }
    return 0;
}

/* One step of the running job; 1 more, 0 done, -1 failed (err). */
static int s_job_step(sw_gen_t *g, char *err, size_t err_len)
{
    if (!g->job_running)
        return 0;
    sw_proposer_t *p = g->o.proposer;
    const double t0 = sw_now_ms();
    const int rc = p->step(p->self);
    /* plus what a batched forward ran for this job since (sw_proposal_t.ms, taken) */
    const double ms = sw_now_ms() - t0 + g->job_out.ms;
    g->job_out.ms = 0;
    if (g->pending)
        g->st.ahead_ms += ms;
    else
        g->st.draft_ms += ms;
    if (rc < 0) {
        g->job = S_JOB_NONE;
        g->job_running = 0;
        sw_errf(err, err_len, "generate: the draft proposer failed");
        return -1;
    }
    g->job_running = rc > 0;
    return g->job_running;
}

/* Starts drafting ahead for the likely outcome of the round that is out:
 * every draft of its main path accepted and the proposer's guess of the
 * bonus token. Nothing when that outcome ends the generation. */
static int s_ahead_start(sw_gen_t *g, char *err, size_t err_len)
{
    const sw_proposal_t *p = &g->prop;
    const int n_main = g->r.n_draft ? p->n_main : 0;
    const int n_gen = g->st.n_gen + n_main + 1; // after the predicted verdict
    const int want = s_want(g, n_gen);
    if (want < 1) {
        g->job = S_JOB_DECLINED;
        return 0;
    }
    memcpy(g->pseq, g->seq, (size_t)g->n_seq * sizeof *g->pseq);
    g->n_pseq = g->n_seq;
    for (int j = 0; j < n_main; j++) {
        const int32_t t = p->tokens[j]; // the main path is nodes 1..n_main
        if (g->o.stop_at_eog && g->o.is_eog && g->o.is_eog(g->o.is_eog_ctx, t)) {
            g->job = S_JOB_DECLINED; // that outcome ends the generation
            return 0;
        }
        g->pseq[g->n_pseq++] = t;
    }
    if (s_job_start(g, S_JOB_AHEAD, g->pseq, g->n_pseq, want, 1, err, err_len) != 0)
        return -1;
    if (!g->job_running && g->job_out.guess < 0)
        g->job = S_JOB_DECLINED;
    return 0;
}

int sw_gen_work(sw_gen_t *g, char *err, size_t err_len)
{
    if (g->done || !g->started || g->k_max == 0)
        return 0;
    if (g->pending) {
        if (!g->o.ahead || g->job == S_JOB_DECLINED)
            return 0;
        if (g->job == S_JOB_NONE) {
            if (s_ahead_start(g, err, err_len) != 0)
                return -1;
            return g->job == S_JOB_AHEAD && g->job_running;
        }
        return s_job_step(g, err, err_len);
    }
    if (g->job == S_JOB_NONE) {
        const int want = s_want(g, g->st.n_gen);
        if (want < 1)
            return 0;
        if (s_job_start(g, S_JOB_NEXT, g->seq, g->n_seq, want, 0, err, err_len) != 0)
            return -1;
        return g->job_running;
    }
    return g->job == S_JOB_NEXT ? s_job_step(g, err, err_len) : 0;
}

static int s_gen_idle(void *ctx)
{
    sw_gen_t *g = ctx;
    if (g->job_failed)
        return 0;
    int rc = sw_gen_work(g, g->job_err, sizeof g->job_err);
    if (rc < 0) {
        g->job_failed = 1;
        return 0;
    }
    return rc;
}

/* Makes the finished job's proposal the current round's drafts: checks it
 * and copies its sparse distributions into g. A tree is cut to the cache
 * slots left: a round's rows take slots [n_seq - 1, n_seq + n), and the
 * caches hold n_prompt + n_predict (a prefix of a tree's nodes is a tree). */
static int s_adopt(sw_gen_t *g, int want, char *err, size_t err_len)
{
    sw_proposal_t *p = &g->prop;
    *p = g->job_out;
    g->job = S_JOB_NONE;
    const int slots = g->n_prompt + g->o.n_predict - g->n_seq;
    if (p->tree && p->n > slots)
        p->n = slots > 0 ? slots : 0;
    const int depth = s_prop_depth(p);
    if (depth < 0 || depth > want || (p->tree && p->q_used)) {
        sw_errf(err, err_len,
                "generate: the draft proposer returned %d drafts %d deep (at most %d)", p->n, depth,
                want);
        return -1;
    }
    if (!p->tree)
        p->n_main = p->n;
    if (p->n_main < 0)
        p->n_main = 0;
    if (p->n_main > p->n)
        p->n_main = p->n;
    for (int j = 1; p->tree && j < p->n_main; j++)
        if (p->parent[j] != j) { // the main path must be nodes 1..n_main
            p->n_main = j;
            break;
        }
    for (int i = 0; p->q_used && i < p->n; i++) {
        sw_draft_q_t *q = &p->q[i];
        if (q->n < 0 || q->n > SW_PROPOSAL_Q_MAX || (q->n && (!q->ids || !q->vals))) {
            sw_errf(err, err_len, "generate: a draft distribution of %d entries", q->n);
            return -1;
        }
        int32_t *ids = g->q_ids + (size_t)i * SW_PROPOSAL_Q_MAX;
        float *vals = g->q_vals + (size_t)i * SW_PROPOSAL_Q_MAX;
        if (q->n) {
            memcpy(ids, q->ids, (size_t)q->n * sizeof *ids);
            memcpy(vals, q->vals, (size_t)q->n * sizeof *vals);
        }
        q->ids = q->n ? ids : NULL;
        q->vals = q->n ? vals : NULL;
    }
    return 0;
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
    if (g->job_failed) {
        g->job_failed = 0;
        sw_errf(err, err_len, "%s", g->job_err);
        return -1;
    }
    if (!g->started) {
        /* Prefill: the whole prompt as one round with no drafts. */
        memset(&g->r, 0, sizeof g->r);
        g->r.n = g->n_prompt;
        g->r.tokens = g->seq;
        g->started = g->pending = 1;
        g->t_round = sw_now_ms();
        if (g->o.ahead && g->k_max > 0) {
            g->r.idle = s_gen_idle;
            g->r.idle_ctx = g;
        }
        *out = &g->r;
        return 0;
    }
    /* The last committed token, then the drafts. */
    g->rows[0] = g->seq[g->n_seq - 1];
    memset(&g->prop, 0, sizeof g->prop);
    const int want = s_want(g, g->st.n_gen);
    if (want > 0) {
        if (g->job != S_JOB_NEXT &&
            s_job_start(g, S_JOB_NEXT, g->seq, g->n_seq, want, 0, err, err_len) != 0)
            return -1;
        int more;
        while ((more = s_job_step(g, err, err_len)) > 0)
            ;
        if (more < 0 || s_adopt(g, want, err, err_len) != 0)
            return -1;
    }
    g->job = S_JOB_NONE;
    const sw_proposal_t *p = &g->prop;
    memcpy(g->rows + 1, p->tokens, (size_t)p->n * sizeof *p->tokens);
    memset(&g->r, 0, sizeof g->r);
    g->r.kv_keep = g->n_seq - 1;
    g->r.n = 1 + p->n;
    g->r.tokens = g->rows;
    g->r.n_draft = p->n;
    g->r.q = p->q_used && p->n ? p->q : NULL;
    g->r.parent = p->tree && p->n ? p->parent : NULL;
    g->r.kv_path_from = g->n_kvp ? g->kvp_from : 0;
    g->r.n_kv_path = g->n_kvp;
    g->r.kv_path = g->n_kvp ? g->kvp : NULL;
    if (g->o.ahead && g->k_max > 0) {
        g->r.idle = s_gen_idle;
        g->r.idle_ctx = g;
    }
    if (g->r.parent)
        g->st.tree_rounds++;
    if (g->n_kvp)
        g->st.kv_moves++;
    g->pending = 1;
    g->t_round = sw_now_ms();
    *out = &g->r;
    return 0;
}

/* Checks a verdict's path against the round's drafts and fills *path with
 * the accepted nodes (a chain's are 1, 2, ..). 0 or -1. */
static int s_check_path(const sw_gen_t *g, const sw_verdict_t *v, int32_t *path)
{
    const sw_proposal_t *p = &g->prop;
    for (int j = 0; j + 1 < v->n_commit; j++) {
        const int32_t node = p->tree ? v->path[j] : j + 1;
        const int32_t up = j ? path[j - 1] : 0;
        if (node < 1 || node > p->n || (p->tree && p->parent[node - 1] != up) ||
            p->tokens[node - 1] != v->tokens[j])
            return -1;
        path[j] = node;
    }
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
    int32_t path[SW_MAX_DRAFT];
    if (v->n_commit < 1 || v->n_commit > g->r.n_draft + 1 || s_check_path(g, v, path) != 0) {
        sw_errf(err, err_len,
                "generate: a verdict of %d tokens that does not fit the round's %d drafts",
                v->n_commit, g->r.n_draft);
        return -1;
    }
    const double now = sw_now_ms();
    const int was_prefill = g->r.kv_keep == 0 && g->r.n_draft == 0 && g->st.n_gen == 0;
    /* Did the outcome drafted ahead happen? Its guess may still be coming. */
    int ahead = -1;
    if (g->job == S_JOB_AHEAD) {
        const int n_main = g->r.n_draft ? g->prop.n_main : 0;
        int hit = v->n_commit == n_main + 1;
        for (int j = 0; hit && j < n_main; j++)
            hit = path[j] == j + 1;
        while (hit && g->job_out.guess < 0 && g->job_running) // the guess decides
            if (s_job_step(g, err, err_len) < 0)
                return -1;
        hit = hit && v->tokens[n_main] == g->job_out.guess;
        /* no guess (and not needed): the proposer declined, or had not guessed yet */
        ahead = g->job_out.guess < 0 && !g->job_running ? -1 : hit;
        if (ahead < 0) {
            g->job = S_JOB_NONE;
        } else if (hit) {
            g->job = S_JOB_NEXT; // pseq + guess is the committed sequence now
            g->st.ahead_hits++;
        } else {
            g->job = S_JOB_NONE; // the proposer drops it when it starts again
            g->st.ahead_misses++;
        }
        if (g->job == S_JOB_NONE) {
            g->job_running = 0;
        }
    } else if (g->job == S_JOB_DECLINED) {
        g->job = S_JOB_NONE;
    }
    g->pending = 0;
    g->st.target_ms += v->compute_ms;
    g->st.logits_digest = v->logits_digest;
    /* The accepted path of a tree round stays in the caches (next round's kv_path). */
    g->n_kvp = 0;
    if (g->r.parent) {
        sw_verdict_t pv = *v;
        memcpy(pv.path, path, (size_t)(v->n_commit - 1) * sizeof *path);
        g->kvp_from = g->r.kv_keep + (g->r.n - g->r.n_draft);
        g->n_kvp = sw_verdict_kv_path(&pv, g->kvp);
    }
    if (!was_prefill) {
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
    if (was_prefill) {
        g->st.prefill_ms = now - g->t_start;
    } else {
        sw_proposer_t *p = g->o.proposer;
        if (g->k_max > 0 && p->observe) {
            sw_round_obs_t obs = {.prop = &g->prop,
                                  .n_accepted = v->n_commit - 1,
                                  .path = path,
                                  .round_ms = now - g->t_round,
                                  .compute_ms = v->compute_ms,
                                  .cycle_ms = now - g->t_commit,
                                  .n_ctx = g->n_seq,
                                  .ahead = ahead};
            p->observe(p->self, &obs);
        }
    }
    g->t_commit = now;
    if (!g->t_first) {
        g->t_first = now;
        g->st.ttft_ms = now - g->t_start;
    }
    if (g->o.on_tokens && g->o.on_tokens(g->o.on_tokens_ctx, at, n) != 0)
        stop = 1;
    if (stop) {
        g->done = 1;
        g->job = S_JOB_NONE;
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
