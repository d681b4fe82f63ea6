/*
 * wire_check_round.c - the validators of one speculation round's messages
 * (see wire_check.c, codec_pb.h and docs/protocol.md, "Forward" and
 * "Verdict"): the Forward (its rows and positions, its drafts with their
 * tree, their draft probabilities and distributions held to the tail's
 * verifier's rule, the previous tree round's kv_path, the payload's size, the
 * prefix, the route and the spot checks' digests) and the Verdict that
 * answers it. The message-type table in wire_check.c names both; the field
 * checks they share (names, tokens, sampling, routes) are wire_check_field.c's.
 * One line says what was wrong.
 */
#include "codec_pb.h"

#include <math.h>

/* Inside the validators: bail out with a message unless cond holds. */
#define CHECK(cond, ...) SW_PB_CHECK("wire", cond, __VA_ARGS__)

static int s_timing(Shardwire__StageTiming **t, size_t n, char *err, size_t err_len)
{
    CHECK(n <= SW_WIRE_MAX_ROUTE, "timing has %zu entries (max %d)", n, SW_WIRE_MAX_ROUTE);
    for (size_t i = 0; i < n; i++) {
        CHECK(t[i] != NULL, "timing[%zu] missing", i);
        int rc = sw_pb_check_name("timing.name", t[i]->name, 1, err, err_len);
        if (rc)
            return rc;
        CHECK(t[i]->batch_rows <= SW_WIRE_MAX_BATCH_ROWS &&
                  t[i]->batch_rounds <= SW_WIRE_MAX_BATCH_ROUNDS,
              "timing[%zu]: a batch of %u rows in %u rounds (max %d, %d)", i, t[i]->batch_rows,
              t[i]->batch_rounds, SW_WIRE_MAX_BATCH_ROWS, SW_WIRE_MAX_BATCH_ROUNDS);
    }
    return SW_WIRE_OK;
}

/* The first child (draft index) of draft i's parent, for a valid tree. */
static size_t s_first_child(const uint32_t *parents, size_t i)
{
    size_t c = 0;
    while (parents[c] != parents[i])
        c++;
    return c;
}

/* A tree of k drafts: every parent <= its draft's index, siblings distinct. */
static int s_tree(const uint32_t *parents, size_t k, const uint32_t *tokens, char *err,
                  size_t err_len)
{
    for (size_t i = 0; i < k; i++) {
        CHECK(parents[i] <= i,
              "forward.draft_parents[%zu] = %u (a draft hangs under a node <= %zu)", i, parents[i],
              i);
        for (size_t c = 0; c < i; c++)
            CHECK(parents[c] != parents[i] || tokens[c] != tokens[i],
                  "forward drafts %zu and %zu are siblings with the same token %u", c, i,
                  tokens[i]);
    }
    return SW_WIRE_OK;
}

/* q(tok) under one sparse draft distribution: its first entry for tok, 0 when
 * tok is not among its tokens (as engine/verify.c reads it). */
static float s_dist_at(const Shardwire__DraftDist *d, uint32_t tok)
{
    for (size_t j = 0; j < d->n_tokens; j++)
        if (d->tokens[j] == tok)
            return d->probs[j];
    return 0.0f;
}

/*
 * The drafts' q held to the rule of the one stage that reads it, the tail's
 * verifier (node/stage.c, engine/verify.c), as far as the wire can decide it
 * (not the vocabulary): draft_dists only with draft_probs; each draft_probs
 * entry in (0, 1]; without draft_dists every draft is a point mass, so every
 * entry is 1; with them each entry is, within SW_DRAFT_Q_TOL, the probability
 * of its draft under the distribution it was drawn from: its own, or for a
 * later sibling of a tree its first sibling's; an empty one makes its draft,
 * and its later siblings, point masses: entry 1 (the verifier's q with n 0;
 * the head sends one for a sampled draft whose q it holds as such). A
 * Forward the tail would refuse is refused at the first hop.
 */
static int s_draft_q(const Shardwire__Forward *f, char *err, size_t err_len)
{
    CHECK(f->n_draft_probs || !f->n_draft_dists, "forward has %zu draft_dists without draft_probs",
          f->n_draft_dists);
    for (size_t i = 0; i < f->n_draft_probs; i++) {
        const float q = f->draft_probs[i];
        CHECK(q > 0.0f && q <= 1.0f, "forward.draft_probs[%zu] = %g not in (0, 1]", i, (double)q);
        if (!f->n_draft_dists) {
            CHECK(q == 1.0f, "forward.draft_probs[%zu] = %g without draft_dists (a point mass: 1)",
                  i, (double)q);
            continue;
        }
        const size_t from = f->n_draft_parents ? s_first_child(f->draft_parents, i) : i;
        const Shardwire__DraftDist *d = f->draft_dists[from];
        /* empty: point masses, the draft's own and, under it, its later siblings' (each
         * proposed outright, as without draft_dists; engine/verify.c s_check_tree) */
        const float at = d->n_tokens ? s_dist_at(d, f->draft_tokens[i]) : 1.0f;
        CHECK(fabsf(at - q) <= SW_DRAFT_Q_TOL,
              "forward.draft_probs[%zu] = %g, but draft_dists[%zu] gives draft %u %g", i, (double)q,
              from, f->draft_tokens[i], (double)at);
    }
    return SW_WIRE_OK;
}

/* The drafts of a Forward with k of them: their tokens, tree, draft_probs and
 * draft_dists (counts 0 or k), and the verifier's rule for their q. */
static int s_drafts(const Shardwire__Forward *f, size_t k, char *err, size_t err_len)
{
    int rc;
    if ((rc = sw_pb_check_tokens("forward.draft_tokens", f->draft_tokens, k, err, err_len)))
        return rc;
    CHECK(f->n_draft_probs == 0 || f->n_draft_probs == k,
          "forward has %zu draft_probs for %zu drafts", f->n_draft_probs, k);
    CHECK(f->n_draft_parents == 0 || f->n_draft_parents == k,
          "forward has %zu draft_parents for %zu drafts", f->n_draft_parents, k);
    if ((rc = s_tree(f->draft_parents, f->n_draft_parents, f->draft_tokens, err, err_len)))
        return rc;
    CHECK(f->n_draft_dists == 0 || f->n_draft_dists == k,
          "forward has %zu draft_dists for %zu drafts", f->n_draft_dists, k);
    for (size_t i = 0; i < f->n_draft_dists; i++) {
        const Shardwire__DraftDist *d = f->draft_dists[i];
        CHECK(d != NULL, "forward.draft_dists[%zu] missing", i);
        /* Empty: a point mass (s_draft_q), or for a later sibling of a tree its first
         * sibling's applies. */
        CHECK(d->n_tokens <= SW_WIRE_MAX_DIST && d->n_probs == d->n_tokens,
              "forward.draft_dists[%zu] has %zu tokens and %zu probs (0..%d, equal)", i,
              d->n_tokens, d->n_probs, SW_WIRE_MAX_DIST);
        if ((rc = sw_pb_check_tokens("forward.draft_dists.tokens", d->tokens, d->n_tokens, err,
                                     err_len)))
            return rc;
        for (size_t j = 0; j < d->n_probs; j++)
            CHECK(sw_pb_upto(d->probs[j], 1.0f),
                  "forward.draft_dists[%zu].probs[%zu] not in [0, 1]", i, j);
    }
    return s_draft_q(f, err, err_len);
}

static int s_forward(const Shardwire__Forward *f, int has_payload, size_t payload_len, char *err,
                     size_t err_len)
{
    int rc;
    CHECK(f != NULL, "forward missing");
    CHECK(f->session_id != 0, "forward.session_id is 0");
    CHECK(f->n_rows >= 1 && f->n_rows <= SW_WIRE_MAX_ROWS, "forward.n_rows %u not in 1..%d",
          f->n_rows, SW_WIRE_MAX_ROWS);
    CHECK((uint64_t)f->start_pos + f->n_rows <= SW_WIRE_MAX_POS,
          "forward rows [%u, %u + %u) pass the position limit %u", f->start_pos, f->start_pos,
          f->n_rows, SW_WIRE_MAX_POS);
    CHECK(f->kv_keep <= f->start_pos, "forward.kv_keep %u > start_pos %u", f->kv_keep,
          f->start_pos);
    CHECK(f->n_tokens == 0 || f->n_tokens == f->n_rows, "forward has %zu tokens for %u rows",
          f->n_tokens, f->n_rows);
    if ((rc = sw_pb_check_tokens("forward.tokens", f->tokens, f->n_tokens, err, err_len)))
        return rc;
    if ((rc = sw_pb_check_sampling(f->sampling, err, err_len)))
        return rc;

    size_t k = f->n_draft_tokens;
    CHECK(k <= SW_WIRE_MAX_DRAFT, "forward has %zu drafts (max %d)", k, SW_WIRE_MAX_DRAFT);
    if (k > 0) {
        CHECK(f->n_rows == k + 1, "forward with %zu drafts must have %zu rows, has %u", k, k + 1,
              f->n_rows);
        CHECK(!f->prefill_more, "a drafting forward cannot be a prefill chunk");
    }
    if ((rc = s_drafts(f, k, err, err_len)))
        return rc;
    /* The kept path of the previous tree round. */
    CHECK(f->n_kv_path <= SW_WIRE_MAX_DRAFT, "forward.kv_path has %zu entries (max %d)",
          f->n_kv_path, SW_WIRE_MAX_DRAFT);
    CHECK(f->n_kv_path || f->kv_path_from == 0, "forward.kv_path_from %u without a kv_path",
          f->kv_path_from);
    for (size_t j = 0; j < f->n_kv_path; j++)
        CHECK(f->kv_path[j] >= j && f->kv_path[j] < SW_WIRE_MAX_DRAFT &&
                  (j == 0 || f->kv_path[j] > f->kv_path[j - 1]),
              "forward.kv_path[%zu] = %u (must increase, in [%zu, %d))", j, f->kv_path[j], j,
              SW_WIRE_MAX_DRAFT);
    CHECK(!f->n_kv_path || ((uint64_t)f->kv_path_from + SW_WIRE_MAX_DRAFT <= SW_WIRE_MAX_POS &&
                            f->kv_keep <= (uint64_t)f->kv_path_from + f->n_kv_path),
          "forward keeps %u positions but its kv_path ends at %u + %zu", f->kv_keep,
          f->kv_path_from, f->n_kv_path);

    size_t esize = sw_wire_dtype_size(f->dtype);
    CHECK(esize != 0, "forward.dtype %d unknown", (int)f->dtype);
    if (has_payload) {
        CHECK(f->hidden >= 1 && f->hidden <= SW_WIRE_MAX_HIDDEN, "forward.hidden %u not in 1..%d",
              f->hidden, SW_WIRE_MAX_HIDDEN);
        /* n_rows <= 2^9, hidden <= 2^15, esize <= 4: the product fits 64 bits easily. */
        uint64_t want = (uint64_t)f->n_rows * (uint64_t)f->hidden * (uint64_t)esize;
        CHECK(want <= SW_WIRE_MAX_PAYLOAD,
              "a forward of %u rows x %u x %zu B = %llu bytes exceeds the payload limit of %u "
              "bytes (SW_WIRE_MAX_PAYLOAD)",
              f->n_rows, f->hidden, esize, (unsigned long long)want, SW_WIRE_MAX_PAYLOAD);
        CHECK((uint64_t)payload_len == want,
              "forward payload has %zu bytes, [%u, %u] x %zu B needs %llu", payload_len, f->n_rows,
              f->hidden, esize, (unsigned long long)want);
    } else {
        CHECK(f->hidden == 0, "forward.hidden %u set but no payload frame", f->hidden);
        CHECK(f->n_tokens == f->n_rows, "forward without a tensor must carry %u tokens, has %zu",
              f->n_rows, f->n_tokens);
    }
    CHECK(f->layer_begin < SW_WIRE_MAX_LAYERS, "forward.layer_begin %u >= %d", f->layer_begin,
          SW_WIRE_MAX_LAYERS);
    CHECK(f->n_ctx == 0 || (f->n_ctx <= SW_WIRE_MAX_POS && f->n_ctx >= f->start_pos + f->n_rows),
          "forward.n_ctx %u does not hold rows [%u, %u + %u)", f->n_ctx, f->start_pos, f->start_pos,
          f->n_rows);
    /* A prefix from the stages' caches: a new session's prefill that starts
     * after it, in whole blocks, with the prefix's tokens. */
    CHECK(f->prefix_len <= SW_WIRE_MAX_PREFIX && f->prefix_len % SW_PREFIX_BLOCK == 0,
          "forward.prefix_len %u is not a multiple of %d up to %u", f->prefix_len, SW_PREFIX_BLOCK,
          (unsigned)SW_WIRE_MAX_PREFIX);
    CHECK(f->n_prefix_tokens == f->prefix_len, "forward has %zu prefix_tokens for prefix_len %u",
          f->n_prefix_tokens, f->prefix_len);
    CHECK(!f->prefix_len || (f->kv_keep == f->prefix_len && f->start_pos == f->prefix_len &&
                             k == 0 && f->n_kv_path == 0),
          "forward.prefix_len %u with kv_keep %u, start_pos %u, %zu drafts: a prefix starts a "
          "prefill",
          f->prefix_len, f->kv_keep, f->start_pos, k);
    if ((rc = sw_pb_check_tokens("forward.prefix_tokens", f->prefix_tokens, f->n_prefix_tokens, err,
                                 err_len)))
        return rc;
    if ((rc = sw_pb_check_route("forward.route", f->route, f->n_route, 1, err, err_len)))
        return rc;
    CHECK(f->hop < f->n_route, "forward.hop %u outside a route of %zu stages", f->hop, f->n_route);
    CHECK(f->hop >= 1, "forward.hop 0: a Forward goes to a stage after the head (hop 1 or more)");
    /* spot checks: one running digest per stage passed (the receiver adds its own) */
    CHECK(f->n_hop_digests < SW_WIRE_MAX_ROUTE && f->n_hop_digests <= f->hop,
          "forward has %zu hop_digests at hop %u (at most one per earlier stage, < %d)",
          f->n_hop_digests, f->hop, SW_WIRE_MAX_ROUTE);
    if ((rc = sw_pb_check_name("forward.reply_to", f->reply_to, 1, err, err_len)))
        return rc;
    return s_timing(f->timing, f->n_timing, err, err_len);
}

static int s_verdict(const Shardwire__Verdict *v, char *err, size_t err_len)
{
    CHECK(v != NULL, "verdict missing");
    CHECK(v->session_id != 0, "verdict.session_id is 0");
    CHECK(v->n_accepted <= SW_WIRE_MAX_DRAFT, "verdict.n_accepted %u > %d", v->n_accepted,
          SW_WIRE_MAX_DRAFT);
    CHECK(v->n_tokens == (size_t)v->n_accepted + 1,
          "verdict has %zu tokens, n_accepted %u needs %u", v->n_tokens, v->n_accepted,
          v->n_accepted + 1);
    int rc = sw_pb_check_tokens("verdict.tokens", v->tokens, v->n_tokens, err, err_len);
    if (rc)
        return rc;
    CHECK(v->next_token == v->tokens[v->n_accepted], "verdict.next_token %u != tokens[%u] = %u",
          v->next_token, v->n_accepted, v->tokens[v->n_accepted]);
    CHECK(v->n_path == 0 || v->n_path == v->n_accepted,
          "verdict has %zu path entries for %u drafts", v->n_path, v->n_accepted);
    for (size_t j = 0; j < v->n_path; j++)
        CHECK(v->path[j] >= 1 && v->path[j] <= SW_WIRE_MAX_DRAFT &&
                  (j == 0 || v->path[j] > v->path[j - 1]),
              "verdict.path[%zu] = %u (must increase, in 1..%d)", j, v->path[j], SW_WIRE_MAX_DRAFT);
    CHECK(v->n_hop_digests < SW_WIRE_MAX_ROUTE, "verdict has %zu hop_digests (max %d)",
          v->n_hop_digests, SW_WIRE_MAX_ROUTE - 1);
    return s_timing(v->timing, v->n_timing, err, err_len);
}

int sw_pb_check_forward(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                        char *err, size_t err_len)
{
    return s_forward(env->forward, has_payload, payload_len, err, err_len);
}

int sw_pb_check_verdict(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                        char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    return s_verdict(env->verdict, err, err_len);
}
