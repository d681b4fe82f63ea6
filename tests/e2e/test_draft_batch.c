/*
 * test_draft_batch.c - batched drafting (draft_model_set_batching /
 * draft_model_flush, what the head runs for all its sessions) gives every
 * sequence exactly the proposals it gets alone, on the default model as its
 * own draft model:
 *
 *  - seven sequences with different contexts and shapes (greedy chains,
 *    greedy trees, a chain with a repetition penalty, seeded sampled chains
 *    and a sampled tree, chains that first guess the bonus token, and one
 *    that follows an extra token) propose three rounds each, the context
 *    growing between rounds by part of the drafts and a token of its own (so
 *    the catch-up keeps part of the cache, and a tree path the cache holds);
 *  - alone (batching off, one sequence after the other) and batched (every
 *    sequence's step posts its forward, one flush per pass runs them all)
 *    the proposals are equal field by field: drafts, tree parents, the main
 *    path, the guess, the draft's probabilities and the sparse draft
 *    distributions, bit for bit;
 *  - the flushes did batch: some engine call served several sequences, and
 *    there were fewer calls than sequences served;
 *  - a sequence that steps again before a flush still gets its proposal
 *    (it flushes itself), and a new start drops a posted forward.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sw_draft.h"

#define NSEQ 7
#define ROUNDS 3
#define N_CTX 192
#define CTX0 40

typedef struct cfg {
    float temp;    // 0 = greedy
    float penalty; // repetition penalty (1 = none)
    int k;         // depth
    int tree;      // max nodes (0 = chain)
    int guess;     // 1: guess the bonus token first
    int extra;     // 1: follow an extra token
} cfg_t;

static const cfg_t s_cfg[NSEQ] = {
    {0, 1, 8, 0, 0, 0},    {0, 1, 6, 12, 0, 0},   {0.8f, 1, 5, 0, 0, 0}, {0, 1, 6, 0, 1, 0},
    {0, 1.2f, 4, 0, 0, 0}, {0.9f, 1, 4, 8, 0, 0}, {0, 1, 7, 0, 0, 1},
};

static int32_t s_tok(int s, int pos, int n_vocab)
{
    uint32_t x = (uint32_t)(s * 7919 + pos * 104729 + 777);
    x = x * 1664525u + 1013904223u;
    return (int32_t)((x >> 8) % (uint32_t)n_vocab);
}

/* A proposal with its sparse distributions copied out. */
typedef struct rec {
    sw_proposal_t p;
    int32_t ids[SW_MAX_DRAFT][DRAFT_Q_MAX];
    float vals[SW_MAX_DRAFT][DRAFT_Q_MAX];
} rec_t;

static void s_keep(rec_t *r, const sw_proposal_t *p)
{
    r->p = *p;
    for (int i = 0; p->q_used && i < p->n; i++) {
        if (p->q[i].n > 0) {
            memcpy(r->ids[i], p->q[i].ids, (size_t)p->q[i].n * sizeof(int32_t));
            memcpy(r->vals[i], p->q[i].vals, (size_t)p->q[i].n * sizeof(float));
        }
        r->p.q[i].ids = NULL;
        r->p.q[i].vals = NULL;
    }
}

static int s_same(const rec_t *a, const rec_t *b)
{
    const sw_proposal_t *x = &a->p, *y = &b->p;
    if (x->n != y->n || x->tree != y->tree || x->q_used != y->q_used || x->n_main != y->n_main ||
        x->guess != y->guess)
        return 0;
    for (int i = 0; i < x->n; i++) {
        if (x->tokens[i] != y->tokens[i] || memcmp(&x->conf[i], &y->conf[i], sizeof(float)) ||
            (x->tree && x->parent[i] != y->parent[i]))
            return 0;
        if (x->q_used &&
            (x->q[i].n != y->q[i].n || memcmp(&x->q[i].q_tok, &y->q[i].q_tok, sizeof(float)) ||
             memcmp(a->ids[i], b->ids[i], (size_t)x->q[i].n * sizeof(int32_t)) ||
             memcmp(a->vals[i], b->vals[i], (size_t)x->q[i].n * sizeof(float))))
            return 0;
    }
    return 1;
}

typedef struct run {
    draft_seq_t *seq[NSEQ];
    int32_t ctx[NSEQ][N_CTX];
    int n_ctx[NSEQ];
    rec_t rec[ROUNDS][NSEQ];
    sw_proposal_t out[NSEQ];
    double flush_ms; // what the flushes gave the proposals (sw_proposal_t.ms), all rounds
} run_t;

static draft_shape_t s_shape(int s)
{
    const cfg_t *c = &s_cfg[s];
    draft_shape_t sh = {.k = c->k,
                        .max_nodes = c->tree,
                        .guess = c->guess,
                        .extra = c->extra ? 4242 : -1,
                        .expand_min = 0.002};
    return sh;
}

/* The context of round r + 1: the first half of the main path (the guess
 * before it), then a token of the sequence's own. */
static void s_grow(run_t *rn, int s, int round)
{
    const sw_proposal_t *p = &rn->rec[round][s].p;
    int32_t *ctx = rn->ctx[s];
    if (p->guess >= 0)
        ctx[rn->n_ctx[s]++] = p->guess;
    if (s_cfg[s].extra)
        ctx[rn->n_ctx[s]++] = 4242;
    for (int i = 0; i < (p->n_main + 1) / 2; i++)
        ctx[rn->n_ctx[s]++] = p->tokens[i];
    ctx[rn->n_ctx[s]++] = s_tok(s, 1000 + round, 1000);
}

static int s_run(draft_model_t *dm, run_t *rn, int batched)
{
    for (int s = 0; s < NSEQ; s++) {
        rn->seq[s] = draft_seq_new(dm, N_CTX);
        if (!rn->seq[s])
            return -1;
        sw_sampling_t sp = sw_sampling_default();
        sp.temp = s_cfg[s].temp;
        sp.seed = 100 + (uint64_t)s;
        sp.rep_penalty = s_cfg[s].penalty;
        if (draft_seq_begin(rn->seq[s], &sp) != 0)
            return -1;
        rn->n_ctx[s] = CTX0 + 3 * s;
        for (int i = 0; i < rn->n_ctx[s]; i++)
            rn->ctx[s][i] = s_tok(s, i, 1000);
    }
    draft_model_set_batching(dm, batched);
    for (int r = 0; r < ROUNDS; r++) {
        int running[NSEQ];
        for (int s = 0; s < NSEQ; s++) {
            const draft_shape_t sh = s_shape(s);
            running[s] = draft_seq_start(rn->seq[s], rn->ctx[s], rn->n_ctx[s], &sh, &rn->out[s]);
            if (running[s] < 0)
                return -1;
            if (!batched) // alone: each to the end before the next starts
                while (running[s] > 0)
                    if ((running[s] = draft_seq_step(rn->seq[s])) < 0)
                        return -1;
        }
        for (int left = batched; left;) {
            left = 0;
            for (int s = 0; s < NSEQ; s++)
                if (running[s] > 0) {
                    if ((running[s] = draft_seq_step(rn->seq[s])) < 0)
                        return -1;
                    left |= running[s] > 0;
                }
            if (draft_model_flush(dm) < 0)
                return -1;
        }
        for (int s = 0; s < NSEQ; s++) {
            rn->flush_ms += rn->out[s].ms;
            s_keep(&rn->rec[r][s], &rn->out[s]);
            s_grow(rn, s, r);
        }
    }
    draft_model_set_batching(dm, 0);
    return 0;
}

static void s_free(run_t *rn)
{
    for (int s = 0; s < NSEQ; s++)
        draft_seq_free(&rn->seq[s]);
}

int main(void)
{
    sw_gguf_t *g = NULL;
    draft_model_t *dm = sw_test_draft_model(&g, 2, N_CTX);
    if (!dm)
        return sw_test_done();
    run_t *alone = calloc(1, sizeof *alone), *batch = calloc(1, sizeof *batch);
    SW_CHECK_INT(s_run(dm, alone, 0), 0);
    const draft_batch_stats_t st0 = *draft_model_batch_stats(dm);
    SW_CHECK_INT(s_run(dm, batch, 1), 0);
    const draft_batch_stats_t *st = draft_model_batch_stats(dm);
    int trees = 0, sampled = 0, guessed = 0;
    for (int r = 0; r < ROUNDS; r++)
        for (int s = 0; s < NSEQ; s++) {
            const rec_t *a = &alone->rec[r][s], *b = &batch->rec[r][s];
            SW_CHECK(a->p.n > 0);
            SW_CHECK(s_same(a, b));
            if (!s_same(a, b))
                fprintf(stderr, "round %d, sequence %d: %d drafts alone, %d batched\n", r, s,
                        a->p.n, b->p.n);
            trees += a->p.tree;
            sampled += a->p.q_used;
            guessed += a->p.guess >= 0;
        }
    SW_CHECK(trees >= ROUNDS);   // the shapes were exercised
    SW_CHECK(sampled >= ROUNDS); //
    SW_CHECK(guessed >= ROUNDS); //
    const uint64_t calls = st->flushes - st0.flushes, served = st->seqs - st0.seqs;
    fprintf(stderr, "batched: %llu engine calls served %llu sequence steps (%llu rows)\n",
            (unsigned long long)calls, (unsigned long long)served,
            (unsigned long long)(st->rows - st0.rows));
    SW_CHECK(calls > 0 && calls < served);
    /* The flushes' time reaches the proposals they served (sw_proposal_t.ms: the head counts it
     * as the sessions' drafting); alone, every forward runs inside a step, which its caller
     * times, and none is given. Each flush gives its whole time to each sequence it served, so
     * the proposals hold at least the engine calls' time (which the stats count). */
    const double engine_ms = st->ms - st0.ms;
    fprintf(stderr,
            "flush time given to the proposals: %.1f ms batched (engine calls %.1f ms), "
            "%.1f ms alone\n",
            batch->flush_ms, engine_ms, alone->flush_ms);
    SW_CHECK(engine_ms > 0 && batch->flush_ms >= engine_ms);
    SW_CHECK(alone->flush_ms == 0);

    /* Stepping again before a flush runs the posted forward (self-flush); a
     * new start drops a posted one (no flush runs it). */
    {
        draft_seq_t *a = draft_seq_new(dm, N_CTX);
        SW_CHECK(a != NULL);
        sw_sampling_t sp = sw_sampling_default();
        sp.temp = 0;
        SW_CHECK_INT(draft_seq_begin(a, &sp), 0);
        draft_model_set_batching(dm, 1);
        const draft_shape_t sh = s_shape(0);
        sw_proposal_t pa;
        int rc = draft_seq_start(a, alone->ctx[0], CTX0, &sh, &pa), steps = 0;
        while (rc > 0) {
            rc = draft_seq_step(a); // never flushed by the caller
            steps++;
        }
        SW_CHECK_INT(rc, 0);
        SW_CHECK(steps > 2);
        SW_CHECK(pa.n == alone->rec[0][0].p.n &&
                 !memcmp(pa.tokens, alone->rec[0][0].p.tokens, (size_t)pa.n * sizeof(int32_t)));
        int32_t ctx2[N_CTX];
        memcpy(ctx2, alone->ctx[0], CTX0 * sizeof(int32_t));
        ctx2[CTX0] = 17;
        rc = draft_seq_start(a, ctx2, CTX0 + 1, &sh, &pa);
        SW_CHECK_INT(rc, 1);
        SW_CHECK_INT(draft_seq_step(a), 1); // the catch-up of one token: posted
        rc = draft_seq_start(a, alone->ctx[0], CTX0, &sh, &pa);
        SW_CHECK_INT(draft_model_flush(dm), 0); // dropped with the old proposal
        while (rc > 0)
            rc = draft_seq_step(a);
        SW_CHECK_INT(rc, 0);
        SW_CHECK(pa.n == alone->rec[0][0].p.n &&
                 !memcmp(pa.tokens, alone->rec[0][0].p.tokens, (size_t)pa.n * sizeof(int32_t)));
        draft_model_set_batching(dm, 0);
        draft_seq_free(&a);
    }
    s_free(alone);
    s_free(batch);
    free(alone);
    free(batch);
    draft_model_free(&dm);
    sw_gguf_close(&g);
    return sw_test_done();
}
