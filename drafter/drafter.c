/*
 * drafter.c - the combined proposer and its K controller (see drafter.h).
 */
#include "drafter.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ngram.h"

#define S_NGRAM_MAX 3 // longest suffix looked up

struct draft {
    draft_model_t *model; // borrowed, may be NULL
    draft_seq_t *seq;     // this generation's sequence of the model, NULL until needed
    draft_cfg_t cfg;      // this generation's configuration
    draft_ctl_t ctl;      // K controller
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
    if (d->seq && draft_seq_begin(d->seq, &cfg->sampling) != 0) {
        snprintf(err, err_len, "draft: cannot start the draft sampler");
        return -1;
    }
    draft_ctl_init(&d->ctl, cfg->k > 0 ? cfg->k : 0, d->cfg.k_max);
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
    return d->seq ? draft_seq_warm(d->seq, ctx, n_ctx) : 0;
}

const draft_ctl_t *draft_ctl(const draft_t *d)
{
    return &d->ctl;
}

static int s_propose(void *self, const int32_t *ctx, int n_ctx, int k_max, int32_t *out,
                     sw_draft_q_t *q, int *q_used)
{
    draft_t *d = self;
    *q_used = 0;
    const int k = draft_ctl_next_k(&d->ctl, k_max);
    if (k < 1)
        return 0;
    const enum draft_mode mode = d->cfg.mode;
    if (mode == DRAFT_MODE_NGRAM || mode == DRAFT_MODE_MIX) {
        const double t0 = sw_now_ms();
        int match = 0;
        int n = draft_ngram_propose(ctx, n_ctx, S_NGRAM_MAX,
                                    mode == DRAFT_MODE_MIX ? DRAFT_MIX_MIN_N : 1, k, out, &match);
        if (n > 0 || mode == DRAFT_MODE_NGRAM) {
            if (n > 0)
                draft_ctl_draft_time(&d->ctl, n, sw_now_ms() - t0);
            return n;
        }
    }
    if (!d->seq)
        return 0;
    int n = draft_seq_propose(d->seq, ctx, n_ctx, k, d->cfg.p_min, out, q, q_used);
    if (n > 0) {
        double ms;
        int nt;
        draft_seq_last_cost(d->seq, &ms, &nt);
        draft_ctl_draft_time(&d->ctl, nt, ms);
    }
    return n;
}

static void s_observe(void *self, int n_draft, int n_accepted, double round_ms, double compute_ms)
{
    draft_t *d = self;
    draft_ctl_observe(&d->ctl, n_draft, n_accepted, round_ms, compute_ms);
}

sw_proposer_t draft_proposer(draft_t *d)
{
    sw_proposer_t p = {.propose = s_propose, .self = d, .observe = s_observe};
    return p;
}
