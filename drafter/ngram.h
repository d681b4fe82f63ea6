/*
 * ngram.h - model-free prompt lookup: when the last n tokens of the committed
 * sequence occurred before, propose the tokens that followed that earlier
 * occurrence (the most recent one; past the end of the context the copy
 * continues with its own output, so a repeating pattern keeps repeating). n goes from n_max down to
 * n_min; the first n with a match wins. Deterministic, so its drafts are point masses. Works well
 * on text that repeats its context (code edits, quoting, extraction), costs microseconds and needs
 * no model.
 */
#ifndef DRAFT_NGRAM_H
#define DRAFT_NGRAM_H

#include <stdint.h>

/* Writes up to k_max proposed tokens to out and returns how many (0 when no
 * suffix of length n_min..n_max occurs earlier in ctx[0..n_ctx)). *match_n
 * (may be NULL) receives the matched suffix length (0 = none). */
int draft_ngram_propose(const int32_t *ctx, int n_ctx, int n_max, int n_min, int k_max,
                        int32_t *out, int *match_n);

/* A token tree instead of one chain: the continuations of up to `width`
 * distinct earlier occurrences (the most recent first; the longest suffix
 * length n first, then shorter ones), merged where they agree, as a trie in
 * verify.h's layout: node i + 1 holds out[i] and hangs under node parent[i]
 * (0 = the last token of ctx, so parent[i] <= i), siblings distinct. The
 * first branch is exactly what draft_ngram_propose() proposes with k_max =
 * depth; each later branch adds at most depth / 2 (at least 1) nodes past
 * where it leaves the trie; max_nodes bounds the total. width 1 gives the
 * chain, and width is capped at 64. An occurrence found again at a shorter
 * suffix length is not a new branch. Returns the number of nodes (0 when
 * nothing matches). */
int draft_ngram_propose_tree(const int32_t *ctx, int n_ctx, int n_max, int n_min, int depth,
                             int width, int max_nodes, int32_t *out, int32_t *parent, int *match_n);

#endif
