/*
 * drafter.c - the combined proposer and its K controller (see drafter.h).
 */
#include "drafter.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ngram.h"

#define S_NGRAM_MAX 3          // longest suffix looked up
#define S_NGRAM_WIDTH 4        // n-gram trees: earlier occurrences followed at most
#define S_PEND 4               // calibration observations waiting for a later proposal
#define S_NODE_MIN_FIXED 0.02  // fixed K: least value of a tree node (expected tokens)
#define S_EXPAND_MIN_FIXED 0.1 // fixed K: least value of a node worth a draft step

enum { S_KIND_NONE = 0, S_KIND_MODEL = 1, S_KIND_NGRAM = 2 };

/* A round's outcome, kept until a proposal for a later position (see s_start). */
typedef struct s_pend {
    int ctx_after;                // committed positions after the round
    int n, n_acc;                 // drafts, accepted
    float q[SW_MAX_DRAFT];        // the draft's probability of each
    int32_t parent[SW_MAX_DRAFT]; // tree layout (a chain: i)
    int32_t path[SW_MAX_DRAFT];   // accepted nodes
} s_pend_t;

struct draft {
    draft_model_t *model; // borrowed, may be NULL
    draft_seq_t *seq;     // this generation's sequence of the model, NULL until needed
    draft_cfg_t cfg;      // this generation's configuration
    draft_ctl_t ctl;      // K, tree and draft-ahead controller
    /* the proposal in progress */
    int running;           // 1: the draft model has steps left
    int ahead_job;         // 1: it drafts ahead (started with guess)
    int mix_check;         // 1: mixed mode, model guess: look up the n-gram once the guess is known
    const int32_t *ctx;    // what it follows (the caller's)
    int n_ctx;             //
    int k;                 // its depth
    sw_proposal_t *out;    // the caller's
    int32_t *buf;          // (cap_buf) ctx and a guessed token, for the n-gram lookup
    int cap_buf;           //
    s_pend_t pend[S_PEND]; // observations not applied yet (oldest first)
    int n_pend;            //
};

draft_t *draft_new(draft_model_t *model)
{
    draft_t *d = calloc(1, sizeof *d);
    if (d)
        d->model = model;
    return d;
}

void draft_free(draft_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    draft_seq_free(&(*self_p)->seq);
    free((*self_p)->buf);
    free(*self_p);
    *self_p = NULL;
}

int draft_mode_parse(const char *s, enum draft_mode *out)
{
    static const struct {
        const char *name;
        enum draft_mode m;
    } t[] = {{"none", DRAFT_MODE_NONE},
             {"model", DRAFT_MODE_MODEL},
             {"ngram", DRAFT_MODE_NGRAM},
             {"mix", DRAFT_MODE_MIX}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(s, t[i].name)) {
            *out = t[i].m;
            return 0;
        }
    return -1;
}

const char *draft_mode_name(enum draft_mode m)
{
    switch (m) {
    case DRAFT_MODE_MODEL:
        return "model";
    case DRAFT_MODE_NGRAM:
        return "ngram";
    case DRAFT_MODE_MIX:
        return "mix";
    default:
        return "none";
    }
}

int draft_begin(draft_t *d, const draft_cfg_t *cfg, char *err, size_t err_len)
{
    if ((cfg->mode == DRAFT_MODE_MODEL || cfg->mode == DRAFT_MODE_MIX) && !d->model) {
        snprintf(err, err_len, "draft mode '%s' needs a draft model (start with --draft-model)",
                 draft_mode_name(cfg->mode));
        return -1;
    }
    if (cfg->k < DRAFT_K_AUTO || cfg->k > SW_MAX_DRAFT || cfg->k_max < 0 ||
        cfg->k_max > SW_MAX_DRAFT || !(cfg->p_min >= 0 && cfg->p_min <= 1)) {
        snprintf(err, err_len, "draft: K %d, K max %d or p_min %g out of range", cfg->k, cfg->k_max,
                 (double)cfg->p_min);
        return -1;
    }
    if (sw_sampling_check(&cfg->sampling) != 0) {
        snprintf(err, err_len, "draft: invalid sampling parameters");
        return -1;
    }
    d->cfg = *cfg;
    d->cfg.prefix_ns = NULL; /* the caller's: copied into the sequence below */
    if (d->cfg.k_max == 0)
        d->cfg.k_max = DRAFT_K_MAX_AUTO;
    if (cfg->n_ctx < 0) {
        snprintf(err, err_len, "draft: context of %d positions", cfg->n_ctx);
        return -1;
    }
    const int uses_model = cfg->mode == DRAFT_MODE_MODEL || cfg->mode == DRAFT_MODE_MIX;
    if (uses_model && d->seq && cfg->n_ctx && draft_seq_capacity(d->seq) < cfg->n_ctx)
        draft_seq_free(&d->seq); /* too small for this generation */
    if (uses_model && !d->seq) {
        d->seq = draft_seq_new(d->model, cfg->n_ctx);
        if (!d->seq) {
            snprintf(err, err_len, "draft: out of memory for the draft model's cache");
            return -1;
        }
    }
    if (d->seq)
        draft_seq_set_prefix_ns(d->seq, cfg->prefix_ns);
    if (d->seq && draft_seq_begin(d->seq, &cfg->sampling) != 0) {
        snprintf(err, err_len, "draft: cannot start the draft sampler");
        return -1;
    }
    if (cfg->tree < 0 || cfg->tree > SW_MAX_DRAFT) {
        snprintf(err, err_len, "draft: a tree of %d drafts (at most %d)", cfg->tree, SW_MAX_DRAFT);
        return -1;
    }
    draft_ctl_init(&d->ctl, cfg->k > 0 ? cfg->k : 0, d->cfg.k_max);
    d->ctl.ahead_on = cfg->ahead;
    d->ctl.load = cfg->load;
    d->ctl.model_drafts = uses_model;
    if (d->model) { // what drafting ahead reached in earlier generations
        const draft_ahead_mem_t *m = draft_model_ahead_mem(d->model);
        d->ctl.arm_rate[0] = m->rate[0];
        d->ctl.arm_rate[1] = m->rate[1];
        if (m->rate[0] > 0 && m->rate[1] > 0) {
            d->ctl.arm_blocks = 1;
            d->ctl.arm = m->rate[1] >= m->rate[0];
        }
    }
    d->running = 0;
    d->n_pend = 0;
    return 0;
}

int draft_gen_k(const draft_t *d)
{
    if (d->cfg.mode == DRAFT_MODE_NONE || d->cfg.k == 0)
        return 0;
    return d->cfg.k > 0 ? d->cfg.k : d->cfg.k_max;
}

int draft_warm(draft_t *d, const int32_t *ctx, int n_ctx)
{
    if (!d->model || draft_gen_k(d) == 0 ||
        (d->cfg.mode != DRAFT_MODE_MODEL && d->cfg.mode != DRAFT_MODE_MIX))
        return 0;
    /* While the head's gate holds plain rounds, the draft model reads the
     * prompt only when drafting resumes (its catch-up, priced by the controller). */
    if (d->cfg.k == DRAFT_K_AUTO && draft_load_arm(d->cfg.load) != DRAFT_ARM_CHOSEN)
        return 0;
    return d->seq ? draft_seq_warm(d->seq, ctx, n_ctx) : 0;
}

void draft_observe_batch(draft_t *d, int own_rows, int head_rows, int later_rows)
{
    draft_ctl_observe_batch(&d->ctl, own_rows, head_rows, later_rows);
}

const draft_cfg_t *draft_cfg(const draft_t *d)
{
    return &d->cfg;
}

const draft_ctl_t *draft_ctl(const draft_t *d)
{
    return &d->ctl;
}

/* ---- proposing -------------------------------------------------------------------- */

static double s_calib(void *ctx, double q)
{
    return draft_ctl_calib(&((draft_t *)ctx)->ctl, q);
}

static double s_node_min(void *ctx, int rows)
{
    draft_t *d = ctx;
    return d->cfg.k > 0 ? S_NODE_MIN_FIXED : draft_ctl_node_min(&d->ctl, rows);
}

/* Applies the observations of rounds that ended before position n: a
 * proposal for position n sees the same calibration whether it is made
 * after the verdict before it or ahead of it, while that round travelled
 * (whose own outcome is then not known yet). */
static void s_apply_pending(draft_t *d, int n)
{
    int kept = 0;
    for (int i = 0; i < d->n_pend; i++) {
        s_pend_t *p = &d->pend[i];
        if (p->ctx_after < n)
            draft_ctl_observe_tree(&d->ctl, p->n, p->q, p->parent, p->path, p->n_acc);
        else if (kept != i)
            d->pend[kept++] = *p;
        else
            kept++;
    }
    d->n_pend = kept;
}

/* ctx[0..n_ctx) and tok in d->buf; NULL when out of memory. */
static const int32_t *s_with(draft_t *d, const int32_t *ctx, int n_ctx, int32_t tok)
{
    if (d->cap_buf < n_ctx + 1) {
        int cap = d->cap_buf ? d->cap_buf : 256;
        while (cap < n_ctx + 1)
            cap *= 2;
        int32_t *b = realloc(d->buf, (size_t)cap * sizeof *b);
        if (!b)
            return NULL;
        d->buf = b;
        d->cap_buf = cap;
    }
    memcpy(d->buf, ctx, (size_t)n_ctx * sizeof *ctx);
    d->buf[n_ctx] = tok;
    return d->buf;
}

/* The n-gram proposal after ctx[0..n_ctx) into out (a tree when trees are
 * on), for a round of mode (the session's, or NGRAM when the head's gate says
 * so); 1 when it found one. */
static int s_ngram(draft_t *d, enum draft_mode mode, const int32_t *ctx, int n_ctx, int k,
                   sw_proposal_t *out)
{
    const int min_n = mode == DRAFT_MODE_MIX ? DRAFT_MIX_MIN_N : 1;
    int match = 0, n;
    if (d->cfg.tree > 1) {
        n = draft_ngram_propose_tree(ctx, n_ctx, S_NGRAM_MAX, min_n, k, S_NGRAM_WIDTH, d->cfg.tree,
                                     out->tokens, out->parent, &match);
        out->tree = n > 0;
        out->n_main = 0;
        while (out->n_main < n && out->parent[out->n_main] == out->n_main)
            out->n_main++;
    } else {
        n = draft_ngram_propose(ctx, n_ctx, S_NGRAM_MAX, min_n, k, out->tokens, &match);
        out->n_main = n;
    }
    out->n = n;
    for (int i = 0; i < n; i++)
        out->conf[i] = -1;
    out->kind = S_KIND_NGRAM;
    return n > 0;
}

/* sw_proposer_t.start (see decode.h). */
static int s_start(void *self, const int32_t *ctx, int n_ctx, int k_max, int guess,
                   sw_proposal_t *out)
{
    draft_t *d = self;
    memset(out, 0, sizeof *out);
    out->guess = -1;
    d->running = d->mix_check = 0;
    d->out = out;
    d->ahead_job = guess;
    s_apply_pending(d, n_ctx + (guess ? 1 : 0));
    /* The head's gate (load.h) may have every session that would use the
     * draft model look up n-grams instead, for now. */
    enum draft_mode mode = d->cfg.mode;
    const int uses_model = mode == DRAFT_MODE_MODEL || mode == DRAFT_MODE_MIX;
    const int gated =
        uses_model && d->cfg.k == DRAFT_K_AUTO && draft_load_arm(d->cfg.load) == DRAFT_ARM_NGRAM;
    if (gated)
        mode = DRAFT_MODE_NGRAM;
    d->ctl.model_drafts = uses_model && !gated;
    /* Drafting ahead pays for the model only: a lookup is instant after the verdict. */
    if (guess && (!d->cfg.ahead || mode == DRAFT_MODE_NGRAM))
        return 0;
    d->ctl.lag = d->seq && mode == DRAFT_MODE_MODEL
                     ? draft_seq_lag(d->seq, ctx, n_ctx) + (guess ? 1 : 0)
                     : 0;
    d->ctl.left = d->cfg.n_ctx > n_ctx ? d->cfg.n_ctx - n_ctx : 0;
    const int k = draft_ctl_next_k(&d->ctl, k_max);
    if (k < 1 || (guess && draft_ctl_ahead_k(&d->ctl, k) < 1))
        return 0;
    d->k = k;
    d->ctx = ctx;
    d->n_ctx = n_ctx;
    int32_t extra = -1;
    if (mode == DRAFT_MODE_NGRAM || mode == DRAFT_MODE_MIX) {
        const double t0 = sw_now_ms();
        const int32_t *c = ctx;
        int nc = n_ctx;
        if (guess) {
            int32_t g;
            int m;
            if (draft_ngram_propose(ctx, n_ctx, S_NGRAM_MAX,
                                    mode == DRAFT_MODE_MIX ? DRAFT_MIX_MIN_N : 1, 1, &g, &m) == 1) {
                if (!(c = s_with(d, ctx, n_ctx, g)))
                    return -1;
                nc = n_ctx + 1;
                extra = out->guess = g; // (guess: not NGRAM mode, which returned above)
            }
        }
        if (!guess || extra >= 0) {
            if (s_ngram(d, mode, c, nc, k, out) || mode == DRAFT_MODE_NGRAM) {
                if (out->n > 0 && !guess)
                    draft_ctl_draft_time(&d->ctl, out->n, sw_now_ms() - t0);
                return 0;
            }
            out->n = 0;
        }
    }
    if (!d->seq) {
        out->guess = -1;
        return 0;
    }
    draft_shape_t sh = {
        .k = k,
        .max_nodes = d->cfg.tree > 1 ? d->cfg.tree : 0,
        .p_min = d->cfg.p_min,
        .guess = guess && extra<0, .extra = extra, .calib = s_calib, .node_min = s_node_min,
                                .expand_min = d->cfg.k> 0
                     ? S_EXPAND_MIN_FIXED
                     : draft_ctl_expand_min(&d->ctl),
        .ctx = d,
    };
    const int32_t g = out->guess;
    d->running = draft_seq_start(d->seq, ctx, n_ctx, &sh, out);
    out->guess = g; // draft_seq_start cleared it; an n-gram guess stays
    out->kind = S_KIND_MODEL;
    d->mix_check = mode == DRAFT_MODE_MIX && sh.guess;
    return 0;
}

/* sw_proposer_t.step. */
static int s_step(void *self)
{
    draft_t *d = self;
    if (!d->running)
        return 0;
    const int32_t g = d->out->guess;
    const int rc = draft_seq_step(d->seq);
    if (rc < 0) {
        d->running = 0;
        return -1;
    }
    if (d->out->guess < 0)
        d->out->guess = g;
    if (d->mix_check && d->out->guess >= 0) {
        /* Mixed mode, drafting ahead with the model's guess: the proposal
         * for ctx + guess must be what it will be after the verdict, which
         * is the n-gram's when the lookup matches there. */
        d->mix_check = 0;
        const int32_t *c = s_with(d, d->ctx, d->n_ctx, d->out->guess);
        sw_proposal_t tmp;
        memset(&tmp, 0, sizeof tmp);
        if (!c) {
            d->running = 0;
            return -1;
        }
        if (s_ngram(d, DRAFT_MODE_MIX, c, d->n_ctx + 1, d->k, &tmp)) {
            tmp.guess = d->out->guess;
            tmp.ms = d->out->ms; // the model's forwards ran all the same
            *d->out = tmp;
            d->running = 0;
            return 0;
        }
    }
    if (rc > 0)
        return 1;
    d->running = 0;
    if (!d->ahead_job && d->out->n > 0) {
        double ms;
        int nt;
        draft_seq_last_cost(d->seq, &ms, &nt);
        draft_ctl_draft_time(&d->ctl, nt, ms);
    }
    return 0;
}

static int s_propose(void *self, const int32_t *ctx, int n_ctx, int k_max, int guess,
                     sw_proposal_t *out)
{
    if (s_start(self, ctx, n_ctx, k_max, guess, out) != 0)
        return -1;
    int rc;
    while ((rc = s_step(self)) > 0)
        ;
    return rc < 0 ? -1 : 0;
}

static void s_observe(void *self, const sw_round_obs_t *o)
{
    draft_t *d = self;
    const sw_proposal_t *p = o->prop;
    /* A lookup the head's gate put in place of the draft model (load.h):
     * its acceptance is not the model's, which the controller estimates. */
    if (p && p->kind == S_KIND_NGRAM && d->cfg.mode == DRAFT_MODE_MODEL)
        return;
    const int n = p ? p->n : 0;
    int depth = n, dep[SW_MAX_DRAFT + 1] = {0};
    if (p && p->tree) {
        depth = 0;
        for (int i = 0; i < n; i++) {
            dep[i + 1] = dep[p->parent[i]] + 1;
            depth = dep[i + 1] > depth ? dep[i + 1] : depth;
        }
    }
    draft_ctl_observe(&d->ctl, n, depth, o->n_accepted, o->round_ms, o->compute_ms);
    if (o->ahead >= 0)
        draft_ctl_observe_ahead(&d->ctl, o->ahead);
    if (p && p->kind == S_KIND_MODEL) { // drafting ahead is the model's only
        draft_ctl_observe_cycle(&d->ctl, o->n_accepted + 1, o->cycle_ms);
        draft_ahead_mem_t *m = draft_model_ahead_mem(d->model);
        m->rate[0] = d->ctl.arm_rate[0];
        m->rate[1] = d->ctl.arm_rate[1];
    }
    if (n < 1 || p->kind != S_KIND_MODEL || o->n_accepted > n)
        return;
    if (d->n_pend == S_PEND) { // cannot happen with one round out at a time; stay bounded
        s_pend_t *old = &d->pend[0];
        draft_ctl_observe_tree(&d->ctl, old->n, old->q, old->parent, old->path, old->n_acc);
        memmove(d->pend, d->pend + 1, (S_PEND - 1) * sizeof *d->pend);
        d->n_pend--;
    }
    s_pend_t *e = &d->pend[d->n_pend++];
    e->ctx_after = o->n_ctx;
    e->n = n;
    e->n_acc = o->n_accepted;
    for (int i = 0; i < n; i++) {
        e->q[i] = p->conf[i] >= 0 ? p->conf[i] : 1.0f;
        e->parent[i] = p->tree ? p->parent[i] : i;
    }
    memcpy(e->path, o->path, (size_t)o->n_accepted * sizeof *o->path);
}

sw_proposer_t draft_proposer(draft_t *d)
{
    sw_proposer_t p = {
        .propose = s_propose, .start = s_start, .step = s_step, .self = d, .observe = s_observe};
    return p;
}
