/*
 * test_speculative.c - speculative decoding in one process, on the real
 * default model (SmolLM2-135M), through the C API (sw_local_target +
 * drafter/ + sw_generate):
 *
 *  - greedy output with speculation is token-for-token the output without
 *    it on the prompts of tests/fixtures/greedy_smollm2.json (the first six;
 *    built-in prompts when the file is absent), for K in {1, 2, 4, 8, 16, 32}
 *    and each proposer: the n-gram lookup,
 *    the draft model (the same GGUF drafting for itself: legal, same
 *    vocabulary, and every draft is accepted), the draft model with every
 *    third draft corrupted (rejections every round, so the draft cache is
 *    rolled back by its longest-common-prefix rule), the confidence stop
 *    (p_min 0.9; and 0.99999 without a repetition penalty: still one draft a
 *    round) and the adaptive K;
 *  - the stats agree with the rounds (accepted <= drafted, tokens per round);
 *  - sampling (temp 0.8) with a fixed seed and K is deterministic: two runs
 *    give the same tokens, and the draft model path reports sparse q's;
 *  - token trees and drafting ahead (first three prompts): the draft model's
 *    trees with and without drafting ahead, corrupted drafts (guesses made
 *    ahead miss and are dropped), swapped branches (the accepted path is
 *    not the first branch, so the next round's kv_path moves it), n-gram
 *    tries, a chain drafted ahead and the adaptive shape: the tokens without
 *    speculation;
 *  - sampling with a tree (and with a chain) gives the same tokens and
 *    logits with and without drafting ahead (drafts do not depend on timing);
 *  - sessions drafting in turn from one draft model (each its own draft_t
 *    and sequence, stepped as the head does: drafting in pieces, one piece
 *    per session in turn, and drafting ahead left unfinished when verdicts
 *    come; trees for two of them) each give exactly the output of running
 *    alone, greedy and sampled;
 *  - a draft model with another vocabulary is refused before any weight is
 *    read (tokenizer-only GGUFs written by the test: fewer tokens, one token
 *    changed; and gpt-2's from the shared vocab data when present).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "decode.h"
#include "drafter.h"
#include "model.h"
#include "ngram.h"
#include "sw_test.h"
#include "tokenizer.h"

#define N_GEN 16
#define N_CTX 256

/* Used when tests/fixtures/greedy_smollm2.json is absent. */
static const char *s_builtin[] = {
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "List the days of the week: Monday, Tuesday,",
    "Once upon a time, in a small village by the sea, there lived",
};

#define MAX_PROMPTS 6 // time budget: the first six fixture prompts
#define MAX_PROMPT_TOK 256
static int32_t s_ptok[MAX_PROMPTS][MAX_PROMPT_TOK];
static int s_plen[MAX_PROMPTS];
static int s_n_prompts;

static sw_model_t *s_model;
static sw_tokenizer_t *s_tok;

/* A proposer that corrupts every third draft of the one it wraps, or (swap)
 * swaps the tokens of the first two children of a tree's root, so that the
 * target's token sits on the second branch. */
typedef struct s_noisy {
    sw_proposer_t inner;
    int n_vocab;
    int count;
    int swap;
} s_noisy_t;

static int s_noisy_propose(void *self, const int32_t *ctx, int n_ctx, int k_max, int guess,
                           sw_proposal_t *out)
{
    s_noisy_t *p = self;
    if (p->inner.propose(p->inner.self, ctx, n_ctx, k_max, guess, out) != 0)
        return -1;
    for (int i = 1; p->swap && out->tree && i < out->n; i++)
        if (out->parent[i] == 0) {
            const int32_t t = out->tokens[0];
            out->tokens[0] = out->tokens[i];
            out->tokens[i] = t;
            break;
        }
    for (int i = 0; !p->swap && i < out->n; i++) {
        if (++p->count % 3 != 0)
            continue;
        const int32_t t = (out->tokens[i] + 1) % p->n_vocab;
        int clash = 0; // a tree's siblings must stay distinct
        for (int j = 0; out->tree && j < out->n; j++)
            clash |= j != i && out->parent[j] == out->parent[i] && out->tokens[j] == t;
        if (!clash)
            out->tokens[i] = t;
    }
    return 0;
}

static void s_noisy_observe(void *self, const sw_round_obs_t *o)
{
    s_noisy_t *p = self;
    if (p->inner.observe)
        p->inner.observe(p->inner.self, o);
}

static int s_ahead; // sw_gen_opts_t.ahead of the runs below

/* One generation; returns the number of tokens or -1. */
static int s_run(const int32_t *prompt, int n_prompt, const sw_sampling_t *sp, sw_proposer_t *prop,
                 int k, int32_t *out, sw_gen_stats_t *gs)
{
    char err[256] = "";
    sw_local_target_t *lt = sw_local_target_new(s_model, N_CTX, sp, err, sizeof err);
    if (!lt) {
        fprintf(stderr, "target: %s\n", err);
        return -1;
    }
    sw_target_t t = sw_local_target(lt);
    sw_gen_opts_t go = {.n_predict = N_GEN, .k = k, .proposer = prop, .ahead = s_ahead};
    int rc = sw_generate(&t, prompt, n_prompt, &go, out, gs, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "generate: %s\n", err);
    sw_local_target_free(&lt);
    return rc == 0 ? gs->n_gen : -1;
}

static int s_same(const int32_t *a, int na, const int32_t *b, int nb, const char *what, int prompt,
                  int k)
{
    int same = na == nb && !memcmp(a, b, (size_t)na * sizeof *a);
    if (!same) {
        fprintf(stderr, "prompt %d, %s, K %d: tokens differ (%d vs %d):", prompt, what, k, na, nb);
        for (int i = 0; i < nb; i++)
            fprintf(stderr, " %d/%d", i < na ? a[i] : -1, b[i]);
        fprintf(stderr, "\n");
    }
    return same;
}

static void s_test_greedy(draft_model_t *dm)
{
    static const int ks[6] = {1, 2, 4, 8, 16, 32};
    sw_sampling_t sp = sw_sampling_default();
    sp.temp = 0;
    draft_t *d = draft_new(dm);
    SW_CHECK(d != NULL);
    const int n_vocab = sw_model_hparams(s_model)->n_vocab;
    int total_drafted = 0, total_rejected_rounds = 0;
    for (int pi = 0; pi < s_n_prompts; pi++) {
        const int32_t *prompt = s_ptok[pi];
        const int n_prompt = s_plen[pi];
        int32_t base[N_GEN], out[N_GEN];
        sw_gen_stats_t gs;
        int nb = s_run(prompt, n_prompt, &sp, NULL, 0, base, &gs);
        SW_CHECK_INT(nb, N_GEN);
        SW_CHECK_INT(gs.rounds, N_GEN - 1);
        for (int mode = 0; mode < 3; mode++) {
            for (int ki = 0; ki < 6; ki++) {
                /* Time budget, every K still covered over the prompts: the
                 * n-gram with three K per prompt, the draft model with two,
                 * the noisy draft model with one. */
                int use = mode == 0   ? ki % 2 == pi % 2
                          : mode == 1 ? ki == pi % 6 || ki == (pi + 3) % 6
                                      : ki == (pi + 1) % 6;
                if (!use)
                    continue;
                draft_cfg_t dc = {.mode = mode == 0 ? DRAFT_MODE_NGRAM : DRAFT_MODE_MODEL,
                                  .k = ks[ki],
                                  .sampling = sp};
                char err[256] = "";
                SW_CHECK(draft_begin(d, &dc, err, sizeof err) == 0);
                sw_proposer_t p = draft_proposer(d);
                s_noisy_t noisy = {.inner = p, .n_vocab = n_vocab};
                sw_proposer_t np = {
                    .propose = s_noisy_propose, .self = &noisy, .observe = s_noisy_observe};
                const char *what = mode == 0 ? "ngram" : mode == 1 ? "model" : "noisy model";
                int n =
                    s_run(prompt, n_prompt, &sp, mode == 2 ? &np : &p, draft_gen_k(d), out, &gs);
                SW_CHECK(s_same(out, n, base, nb, what, pi, ks[ki]));
                SW_CHECK(gs.accepted <= gs.drafted);
                SW_CHECK(gs.n_gen <= gs.rounds + 1 + gs.accepted);
                total_drafted += gs.drafted;
                if (mode == 1 && ks[ki] >= 4) // self-drafting: every draft is accepted
                    SW_CHECK_INT(gs.accepted, gs.drafted);
                if (mode == 1)
                    SW_CHECK(gs.rounds < N_GEN - 1);
                if (getenv("SW_DEBUG_SPEC"))
                    fprintf(stderr, "%s K %d: %d/%d accepted in %d rounds\n", what, ks[ki],
                            gs.accepted, gs.drafted, gs.rounds);
                if (mode == 2 && gs.accepted < gs.drafted)
                    total_rejected_rounds++;
            }
        }
        /* Confidence stop: drafting ends early where the draft hesitates. */
        if (pi == 0) {
            draft_cfg_t pc = {.mode = DRAFT_MODE_MODEL, .k = 8, .p_min = 0.9f, .sampling = sp};
            char perr[256] = "";
            SW_CHECK(draft_begin(d, &pc, perr, sizeof perr) == 0);
            sw_proposer_t pp = draft_proposer(d);
            int n = s_run(prompt, n_prompt, &sp, &pp, draft_gen_k(d), out, &gs);
            SW_CHECK(s_same(out, n, base, nb, "model, p_min 0.9", pi, 8));
            SW_CHECK(gs.drafted >= gs.rounds - 1);    // >= 1 per round (the last may lack room)
            SW_CHECK(gs.drafted < 8 * gs.rounds - 8); // and often fewer than K
            /* the same without a repetition penalty (the backend's greedy chain, s_chain_step:
             * its first draft comes from the round's own logits, never stopped) and a stop that
             * nearly every later draft fails: one draft a round */
            sw_sampling_t g1 = sp;
            g1.rep_penalty = 1.0f;
            int32_t base1[N_GEN];
            const int nb1 = s_run(prompt, n_prompt, &g1, NULL, 0, base1, &gs);
            pc.p_min = 0.99999f;
            pc.sampling = g1;
            SW_CHECK(draft_begin(d, &pc, perr, sizeof perr) == 0);
            pp = draft_proposer(d);
            n = s_run(prompt, n_prompt, &g1, &pp, draft_gen_k(d), out, &gs);
            SW_CHECK(s_same(out, n, base1, nb1, "model, no penalty, p_min 0.99999", pi, 8));
            printf("p_min 0.99999, no penalty: %d drafts in %d rounds\n", gs.drafted, gs.rounds);
            SW_CHECK(gs.drafted >= gs.rounds - 1);
            SW_CHECK(gs.drafted < 2 * gs.rounds); // the stop held the later drafts back
        }
        /* Adaptive K, draft model and n-gram mixed. */
        draft_cfg_t dc = {.mode = DRAFT_MODE_MIX, .k = DRAFT_K_AUTO, .k_max = 32, .sampling = sp};
        char err[256] = "";
        SW_CHECK(draft_begin(d, &dc, err, sizeof err) == 0);
        sw_proposer_t p = draft_proposer(d);
        int n = s_run(prompt, n_prompt, &sp, &p, draft_gen_k(d), out, &gs);
        SW_CHECK(s_same(out, n, base, nb, "adaptive mix", pi, -1));
        SW_CHECK(gs.drafted > 0);
        SW_CHECK(draft_ctl(d)->n_obs > 0);
    }
    SW_CHECK(total_drafted > 0);
    SW_CHECK(total_rejected_rounds > 0); // the corrupted drafts were really rejected
    draft_free(&d);
}

static void s_test_sampling(draft_model_t *dm)
{
    sw_sampling_t sp = sw_sampling_default();
    sp.temp = 0.8f;
    sp.seed = 42;
    const int32_t *prompt = s_ptok[0];
    const int n_prompt = s_plen[0];
    draft_t *d = draft_new(dm);
    int32_t a[N_GEN], b[N_GEN];
    sw_gen_stats_t ga = {0}, gb = {0};
    int na = -1, nb = -2;
    for (int rep = 0; rep < 2 && d; rep++) {
        draft_cfg_t dc = {.mode = DRAFT_MODE_MODEL, .k = 4, .sampling = sp};
        char err[256] = "";
        SW_CHECK(draft_begin(d, &dc, err, sizeof err) == 0);
        sw_proposer_t p = draft_proposer(d);
        if (rep == 0)
            na = s_run(prompt, n_prompt, &sp, &p, draft_gen_k(d), a, &ga);
        else
            nb = s_run(prompt, n_prompt, &sp, &p, draft_gen_k(d), b, &gb);
    }
    SW_CHECK(s_same(a, na, b, nb, "sampling twice", 0, 4));
    SW_CHECK_INT(ga.logits_digest, gb.logits_digest);
    SW_CHECK(ga.drafted > 0);

    /* The draft's q is a real distribution: sparse, sums to 1, holds q(d). */
    draft_seq_t *seq = draft_seq_new(dm, 0);
    SW_CHECK(seq && draft_seq_begin(seq, &sp) == 0);
    int32_t out[8];
    sw_draft_q_t q[8];
    int q_used = 0;
    int n = seq ? draft_seq_propose(seq, prompt, n_prompt, 8, 0, out, q, &q_used) : -1;
    SW_CHECK_INT(n, 8);
    SW_CHECK_INT(q_used, 1);
    for (int i = 0; i < n && q_used; i++) {
        SW_CHECK(q[i].n >= 1 && q[i].n <= DRAFT_Q_MAX && q[i].n <= sp.top_k);
        double sum = 0, at = -1;
        for (int j = 0; j < q[i].n; j++) {
            sum += q[i].vals[j];
            if (q[i].ids[j] == out[i])
                at = q[i].vals[j];
        }
        SW_CHECK_NEAR(sum, 1.0, 1e-4);
        SW_CHECK_NEAR(at, q[i].q_tok, 1e-7);
    }
    draft_seq_free(&seq);
    draft_free(&d);
}

/* Token trees and drafting ahead, greedy: the draft model's trees (with and
 * without drafting ahead), the same with every third draft corrupted (the
 * guesses made ahead then miss), with the root's first two branches swapped
 * (the accepted path leaves the first branch: the next round's kv_path moves
 * it), n-gram tries, a chain drafted ahead and the adaptive shape in mixed
 * mode: always the tokens without speculation. */
static void s_test_trees(draft_model_t *dm)
{
    sw_sampling_t sp = sw_sampling_default();
    sp.temp = 0;
    draft_t *d = draft_new(dm);
    SW_CHECK(d != NULL);
    const int n_vocab = sw_model_hparams(s_model)->n_vocab;
    static const struct {
        enum draft_mode mode;
        int k, tree, ahead, noisy;
        const char *what;
    } cfgs[] = {
        {DRAFT_MODE_MODEL, 4, 8, 0, 0, "model tree"},
        {DRAFT_MODE_MODEL, 4, 8, 1, 0, "model tree, ahead"},
        {DRAFT_MODE_MODEL, 6, 12, 1, 1, "noisy model tree, ahead"},
        {DRAFT_MODE_MODEL, 5, 0, 1, 1, "noisy model chain, ahead"},
        {DRAFT_MODE_MODEL, 4, 10, 1, 2, "swapped model tree, ahead"},
        {DRAFT_MODE_NGRAM, 4, 12, 0, 0, "ngram tree"},
        {DRAFT_MODE_MIX, DRAFT_K_AUTO, 16, 1, 0, "mix, adaptive tree, ahead"},
    };
    int trees = 0, moves = 0, hits = 0, misses = 0;
    for (int pi = 0; pi < s_n_prompts && pi < 3 && d; pi++) { // time budget: three prompts
        int32_t base[N_GEN], out[N_GEN];
        sw_gen_stats_t gs;
        s_ahead = 0;
        int nb = s_run(s_ptok[pi], s_plen[pi], &sp, NULL, 0, base, &gs);
        SW_CHECK_INT(nb, N_GEN);
        for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
            draft_cfg_t dc = {.mode = cfgs[c].mode,
                              .k = cfgs[c].k,
                              .k_max = 16,
                              .tree = cfgs[c].tree,
                              .ahead = cfgs[c].ahead,
                              .sampling = sp};
            char err[256] = "";
            SW_CHECK(draft_begin(d, &dc, err, sizeof err) == 0);
            sw_proposer_t p = draft_proposer(d);
            s_noisy_t noisy = {.inner = p, .n_vocab = n_vocab, .swap = cfgs[c].noisy == 2};
            sw_proposer_t np = {
                .propose = s_noisy_propose, .self = &noisy, .observe = s_noisy_observe};
            s_ahead = cfgs[c].ahead;
            int n = s_run(s_ptok[pi], s_plen[pi], &sp, cfgs[c].noisy ? &np : &p, draft_gen_k(d),
                          out, &gs);
            SW_CHECK(s_same(out, n, base, nb, cfgs[c].what, pi, cfgs[c].k));
            SW_CHECK(gs.accepted <= gs.drafted);
            if (cfgs[c].tree > 1 && cfgs[c].mode == DRAFT_MODE_MODEL)
                SW_CHECK(gs.tree_rounds > 0);
            if (!cfgs[c].ahead)
                SW_CHECK_INT(gs.ahead_hits + gs.ahead_misses, 0);
            trees += gs.tree_rounds;
            moves += gs.kv_moves;
            hits += gs.ahead_hits;
            misses += gs.ahead_misses;
            if (getenv("SW_DEBUG_SPEC"))
                fprintf(stderr,
                        "%s: %d/%d accepted in %d rounds, %d trees, %d moves, %d/%d ahead\n",
                        cfgs[c].what, gs.accepted, gs.drafted, gs.rounds, gs.tree_rounds,
                        gs.kv_moves, gs.ahead_hits, gs.ahead_hits + gs.ahead_misses);
        }
    }
    s_ahead = 0;
    SW_CHECK(trees > 0);
    SW_CHECK(moves > 0);  // accepted paths off the first branch were kept by kv_path
    SW_CHECK(hits > 0);   // rounds left with the drafts prepared ahead
    SW_CHECK(misses > 0); // and wrong guesses were dropped
    draft_free(&d);
}

/* Sampling with trees and drafting ahead: for one seed, K and tree the
 * tokens and logits are the same with and without drafting ahead (drafts do
 * not depend on when they were made), and two runs agree. */
static void s_test_tree_sampling(draft_model_t *dm)
{
    draft_t *d = draft_new(dm);
    SW_CHECK(d != NULL);
    for (int pi = 0; pi < 2 && d; pi++) {
        sw_sampling_t sp = sw_sampling_default();
        sp.temp = 0.8f;
        sp.seed = 42 + (uint64_t)pi;
        int32_t out[3][N_GEN];
        int n[3];
        sw_gen_stats_t gs[3];
        for (int rep = 0; rep < 3; rep++) {
            draft_cfg_t dc = {.mode = DRAFT_MODE_MODEL,
                              .k = 4,
                              .tree = pi == 0 ? 8 : 0,
                              .ahead = rep > 0,
                              .sampling = sp};
            char err[256] = "";
            SW_CHECK(draft_begin(d, &dc, err, sizeof err) == 0);
            sw_proposer_t p = draft_proposer(d);
            s_ahead = rep > 0;
            n[rep] = s_run(s_ptok[pi], s_plen[pi], &sp, &p, draft_gen_k(d), out[rep], &gs[rep]);
        }
        s_ahead = 0;
        SW_CHECK(s_same(out[1], n[1], out[0], n[0], "sampling, ahead vs not", pi, 4));
        SW_CHECK(s_same(out[2], n[2], out[1], n[1], "sampling, ahead twice", pi, 4));
        SW_CHECK_INT(gs[1].logits_digest, gs[0].logits_digest);
        SW_CHECK(gs[1].ahead_hits + gs[1].ahead_misses > 0);
        if (pi == 0)
            SW_CHECK(gs[0].tree_rounds > 0);
    }
    draft_free(&d);
}

/* Several sessions drafting in turn from one draft model (as the head runs
 * them): each generation is stepped one round at a time (sw_gen_t), the
 * sessions interleaved round by round, each with its own draft_t (its own
 * draft cache and random stream) and its own target. Every session's output
 * equals the same request run alone: greedy and sampled, with the model
 * drafting. */
static void s_test_interleaved(draft_model_t *dm)
{
    enum { NS = 3 };
    sw_sampling_t sp[NS];
    int32_t alone[NS][N_GEN], got[NS][N_GEN];
    int n_alone[NS];
    draft_t *d[NS];
    sw_local_target_t *lt[NS];
    sw_gen_t *g[NS];
    sw_proposer_t prop[NS];
    char err[256] = "";
    for (int i = 0; i < NS; i++) {
        sp[i] = sw_sampling_default();
        sp[i].temp = i == 0 ? 0.0f : 0.7f + 0.1f * (float)i;
        sp[i].seed = 100 + (uint64_t)i;
        d[i] = draft_new(dm);
        /* trees for two of them, and every one drafts ahead */
        draft_cfg_t dc = {.mode = DRAFT_MODE_MODEL,
                          .k = 3 + i,
                          .tree = i < 2 ? 6 + 2 * i : 0,
                          .ahead = 1,
                          .sampling = sp[i]};
        SW_CHECK(d[i] && draft_begin(d[i], &dc, err, sizeof err) == 0);
        prop[i] = draft_proposer(d[i]);
        sw_gen_stats_t gs;
        s_ahead = 1;
        n_alone[i] =
            s_run(s_ptok[i], s_plen[i], &sp[i], &prop[i], draft_gen_k(d[i]), alone[i], &gs);
        s_ahead = 0;
        SW_CHECK(n_alone[i] > 0);
        /* again, now interleaved: a fresh generation per session */
        SW_CHECK(draft_begin(d[i], &dc, err, sizeof err) == 0);
        lt[i] = sw_local_target_new(s_model, N_CTX, &sp[i], err, sizeof err);
        sw_gen_opts_t go = {
            .n_predict = N_GEN, .k = draft_gen_k(d[i]), .proposer = &prop[i], .ahead = 1};
        g[i] = sw_gen_new(s_ptok[i], s_plen[i], &go, err, sizeof err);
        SW_CHECK(lt[i] && g[i]);
    }
    /* As the head runs them: drafting in pieces, one piece per session in
     * turn (their proposals advance through the one draft model between
     * each other's), the next rounds once the pieces are done; then a few
     * pieces of drafting ahead each while the rounds are "out" (some left
     * unfinished when the verdicts come), then the verdicts. */
    int live = NS, rounds = 0, ahead = 0;
    while (live > 0 && rounds++ < 10 * N_GEN) {
        for (int more = 1; more;) {
            more = 0;
            for (int i = 0; i < NS; i++) {
                int w = g[i] && !sw_gen_done(g[i]) ? sw_gen_work(g[i], err, sizeof err) : 0;
                SW_CHECK(w >= 0);
                more |= w > 0;
            }
        }
        const sw_round_t *r[NS] = {0};
        live = 0;
        for (int i = 0; i < NS; i++)
            if (g[i] && lt[i] && sw_gen_next(g[i], &r[i], err, sizeof err) == 0)
                live++;
        for (int piece = 0; piece < 1 + rounds % 4; piece++)
            for (int i = 0; i < NS; i++)
                if (r[i])
                    SW_CHECK(sw_gen_work(g[i], err, sizeof err) >= 0);
        for (int i = 0; i < NS; i++) {
            if (!r[i])
                continue;
            sw_round_t rr = *r[i];
            rr.idle = NULL; // what is not drafted ahead by now is not
            sw_target_t t = sw_local_target(lt[i]);
            sw_verdict_t v;
            const int32_t *toks;
            int nt;
            SW_CHECK(t.round(t.ctx, &rr, &v, err, sizeof err) == 0 &&
                     sw_gen_commit(g[i], &v, &toks, &nt, err, sizeof err) == 0);
        }
    }
    for (int i = 0; i < NS; i++) {
        int n = 0;
        const int32_t *out = g[i] ? sw_gen_output(g[i], &n) : NULL;
        if (out)
            memcpy(got[i], out, (size_t)n * sizeof *out);
        SW_CHECK(g[i] && sw_gen_done(g[i]));
        SW_CHECK(s_same(got[i], n, alone[i], n_alone[i], "interleaved", i, 3 + i));
        SW_CHECK(g[i] && sw_gen_stats(g[i])->drafted > 0);
        ahead += g[i] ? sw_gen_stats(g[i])->ahead_hits : 0;
        sw_gen_free(&g[i]);
        sw_local_target_free(&lt[i]);
        draft_free(&d[i]);
    }
    SW_CHECK(ahead > 0);
}

/* Writes a tokenizer-only GGUF v3 (no tensors) whose token list is the
 * target's first n_tokens tokens, with token `changed` (if >= 0) replaced. */
static int s_write_vocab_gguf(const char *path, int n_tokens, int changed)
{
    const sw_gguf_t *g = sw_model_gguf(s_model);
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    uint32_t u32;
    uint64_t u64;
    fwrite("GGUF", 1, 4, f);
    u32 = 3;
    fwrite(&u32, 4, 1, f);
    u64 = 0; // tensors
    fwrite(&u64, 8, 1, f);
    u64 = 2; // key/values
    fwrite(&u64, 8, 1, f);
    const char *k1 = "general.architecture", *v1 = "llama";
    u64 = strlen(k1);
    fwrite(&u64, 8, 1, f);
    fwrite(k1, 1, strlen(k1), f);
    u32 = SW_GGUF_STRING;
    fwrite(&u32, 4, 1, f);
    u64 = strlen(v1);
    fwrite(&u64, 8, 1, f);
    fwrite(v1, 1, strlen(v1), f);
    const char *k2 = "tokenizer.ggml.tokens";
    u64 = strlen(k2);
    fwrite(&u64, 8, 1, f);
    fwrite(k2, 1, strlen(k2), f);
    u32 = SW_GGUF_ARRAY;
    fwrite(&u32, 4, 1, f);
    u32 = SW_GGUF_STRING;
    fwrite(&u32, 4, 1, f);
    u64 = (uint64_t)n_tokens;
    fwrite(&u64, 8, 1, f);
    for (int i = 0; i < n_tokens; i++) {
        sw_gguf_str_t t = {0};
        if (sw_gguf_arr_str(g, k2, (uint64_t)i, &t) != 0)
            break;
        const char *ptr = i == changed ? "<not-in-the-target>" : t.ptr;
        u64 = i == changed ? strlen(ptr) : t.len;
        fwrite(&u64, 8, 1, f);
        fwrite(ptr, 1, u64, f);
    }
    long pos = ftell(f);
    while (pos++ % 32)
        fputc(0, f);
    return fclose(f) == 0 ? 0 : -1;
}

static void s_expect_refused(const char *path, const char *why)
{
    char err[512] = "";
    draft_model_t *dm =
        draft_model_new(path, sw_model_gguf(s_model), "cpu", 1, 64, err, sizeof err);
    SW_CHECK(dm == NULL);
    SW_CHECK(strstr(err, why) != NULL);
    fprintf(stderr, "refused as expected: %s\n", err);
    draft_model_free(&dm);
}

static void s_test_vocab_mismatch(void)
{
    const int n_vocab = sw_model_hparams(s_model)->n_vocab;
    char path[1024];
    /* Tokenizer-only files: no weights, so the check must come first. */
    snprintf(path, sizeof path, "%s/vocab_short.gguf", sw_test_tmpdir());
    SW_CHECK(s_write_vocab_gguf(path, 1000, -1) == 0);
    s_expect_refused(path, "vocabulary mismatch: the draft model has 1000 tokens");
    snprintf(path, sizeof path, "%s/vocab_changed.gguf", sw_test_tmpdir());
    SW_CHECK(s_write_vocab_gguf(path, n_vocab, 4321) == 0);
    s_expect_refused(path, "vocabulary mismatch: token 4321");
    /* The same vocabulary passes the check (and then fails for lack of weights). */
    snprintf(path, sizeof path, "%s/vocab_same.gguf", sw_test_tmpdir());
    SW_CHECK(s_write_vocab_gguf(path, n_vocab, -1) == 0);
    char err[512] = "";
    draft_model_t *dm =
        draft_model_new(path, sw_model_gguf(s_model), "cpu", 1, 64, err, sizeof err);
    SW_CHECK(dm == NULL && strstr(err, "vocabulary") == NULL);
    draft_model_free(&dm);

    /* A real tokenizer of another family (gpt-2), when the shared data has it
     * and this reader opens it. */
    const char *dir = getenv("SW_TEST_VOCAB_DIR");
    snprintf(path, sizeof path, "%s/ggml-vocab-gpt-2.gguf", dir ? dir : "");
    sw_gguf_t *g = dir ? sw_gguf_open(path, err, sizeof err) : NULL;
    if (!g) {
        char why[sizeof path + sizeof err + 64];
        snprintf(why, sizeof why, "gpt-2 vocabulary refusal: %s not usable (%s)", path, err);
        sw_test_skip_part(why);
        return;
    }
    sw_gguf_close(&g);
    s_expect_refused(path, "vocabulary mismatch");
}

/* The prompts: the fixture's token ids (tests/fixtures/greedy_smollm2.json,
 * the prompts of the llama.cpp parity test) or, without it, our own. */
static void s_load_prompts(void)
{
    const char *dir = getenv("SW_FIXTURES");
    char path[1024];
    snprintf(path, sizeof path, "%s/greedy_smollm2.json", dir ? dir : "tests/fixtures");
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    json_t *cases = doc ? json_object_get(doc, "cases") : NULL;
    for (size_t c = 0; c < json_array_size(cases) && s_n_prompts < MAX_PROMPTS; c++) {
        json_t *pt = json_object_get(json_array_get(cases, c), "prompt_tokens");
        const size_t n = json_array_size(pt);
        if (n < 1 || n > MAX_PROMPT_TOK)
            continue;
        for (size_t i = 0; i < n; i++)
            s_ptok[s_n_prompts][i] = (int32_t)json_integer_value(json_array_get(pt, i));
        s_plen[s_n_prompts++] = (int)n;
    }
    json_decref(doc);
    if (s_n_prompts > 0) {
        fprintf(stderr, "prompts: the first %d of %s\n", s_n_prompts, path);
        return;
    }
    fprintf(stderr, "note: %s unusable: built-in prompts\n", path);
    for (size_t i = 0; i < sizeof s_builtin / sizeof s_builtin[0]; i++) {
        int n = 0;
        int32_t *t = sw_tokenize_alloc(s_tok, s_builtin[i], strlen(s_builtin[i]), 1, 0, &n);
        if (t && n >= 1 && n <= MAX_PROMPT_TOK) {
            memcpy(s_ptok[s_n_prompts], t, (size_t)n * sizeof *t);
            s_plen[s_n_prompts++] = n;
        }
        free(t);
    }
}

static void s_test_ngram(void)
{
    const int32_t ctx[] = {5, 6, 7, 8, 9, 5, 6, 7};
    int32_t out[6];
    int m = 0;
    int n = draft_ngram_propose(ctx, 8, 3, 1, 6, out, &m);
    SW_CHECK_INT(n, 6);
    SW_CHECK_INT(m, 3);
    const int32_t want[] = {8, 9, 5, 6, 7, 8}; // continues the cycle with its own output
    SW_CHECK(!memcmp(out, want, sizeof want));
    const int32_t none[] = {1, 2, 3, 4};
    SW_CHECK_INT(draft_ngram_propose(none, 4, 3, 1, 4, out, &m), 0);
    SW_CHECK_INT(m, 0);
}

int main(void)
{
    const char *path = sw_test_model();
    char err[512] = "";
    sw_backend_t *be = sw_backend_new("cpu", 1, NULL, 0);
    s_model = be ? sw_model_load(path, 0, -1, be, err, sizeof err) : NULL;
    SW_CHECK(s_model != NULL);
    if (!s_model) {
        fprintf(stderr, "%s\n", err);
        return sw_test_done();
    }
    s_tok = sw_tokenizer_from_gguf(sw_model_gguf(s_model), err, sizeof err);
    SW_CHECK(s_tok != NULL);
    draft_model_t *dm =
        draft_model_new(path, sw_model_gguf(s_model), "cpu", 1, N_CTX, err, sizeof err);
    SW_CHECK(dm != NULL);
    s_test_ngram();
    s_test_vocab_mismatch();
    if (s_tok)
        s_load_prompts();
    SW_CHECK(s_n_prompts >= 4);
    if (s_tok && dm && s_n_prompts > 0) {
        s_test_greedy(dm);
        s_test_sampling(dm);
        s_test_trees(dm);
        s_test_tree_sampling(dm);
        s_test_interleaved(dm);
    }
    draft_model_free(&dm);
    sw_tokenizer_free(&s_tok);
    sw_model_free(&s_model);
    sw_backend_free(&be);
    return sw_test_done();
}
