/*
 * verify.c - the speculative-decoding acceptance rule (see verify.h).
 *
 * Why it is lossless, for one position with target p and draft q: the draft
 * token x ~ q is kept with probability min(1, p(x)/q(x)), so it is emitted
 * with probability min(p(x), q(x)); a rejection happens with probability
 * 1 - sum_x min(p, q) = sum_x max(0, p - q), and the residual draw then emits
 * x with probability max(0, p(x) - q(x)); the two add up to p(x). Each
 * acceptance test uses a fresh uniform u: accept when u * q(x) < p(x).
 */
#include "verify.h"

#include "log.h"
#include "sw_limits.h"

#include <math.h>
#include <stddef.h>

/* q(d) from a full (dense or sparse) q, or -1 when d is not in the support. */
static float s_q_at(const sw_draft_q_t *q, int32_t d)
{
    if (!q->ids)
        return q->vals[d];
    for (int32_t j = 0; j < q->n; j++) {
        if (q->ids[j] == d)
            return q->vals[j];
    }
    return 0.0f;
}

/* Checks one draft distribution against d and the vocabulary; 0 or -1. */
static int s_check_q(const sw_draft_q_t *q, int32_t d, int32_t n_vocab, int32_t pos)
{
    if (!(q->q_tok > 0.0f && q->q_tok <= 1.0f)) {
        SW_ERR("verify: draft %d: q_tok %g is not in (0, 1]", pos, (double)q->q_tok);
        return -1;
    }
    if (q->n == 0) {
        if (q->q_tok != 1.0f) {
            SW_ERR("verify: draft %d: point mass with q_tok %g != 1", pos, (double)q->q_tok);
            return -1;
        }
        return 0;
    }
    if (!q->vals || q->n < 0 || q->n > n_vocab || (!q->ids && q->n != n_vocab)) {
        SW_ERR("verify: draft %d: q has %d entries (vals %s, ids %s) for a vocabulary of %d", pos,
               q->n, q->vals ? "set" : "NULL", q->ids ? "set" : "NULL", n_vocab);
        return -1;
    }
    for (int32_t j = 0; j < q->n; j++) {
        float v = q->vals[j];
        if (!(v >= 0.0f && v <= 1.0f)) {
            SW_ERR("verify: draft %d: q entry %d is %g", pos, j, (double)v);
            return -1;
        }
        if (q->ids && (q->ids[j] < 0 || q->ids[j] >= n_vocab)) {
            SW_ERR("verify: draft %d: q entry %d has token id %d", pos, j, q->ids[j]);
            return -1;
        }
    }
    float qd = s_q_at(q, d);
    if (fabsf(qd - q->q_tok) > SW_DRAFT_Q_TOL) {
        SW_ERR("verify: draft %d: q_tok %g but q(%d) = %g", pos, (double)q->q_tok, d, (double)qd);
        return -1;
    }
    return 0;
}

/* The candidate set of one tree position: the siblings tried so far. */
typedef struct s_cands {
    const sw_draft_q_t *q; // the distribution the siblings were drawn from, NULL = point masses
    int32_t n_removed;     // earlier siblings (rejected), excluded from q_s
    int32_t removed[SW_VERIFY_MAX_TREE]; // their tokens
    double removed_mass;                 // q of those tokens
} s_cands_t;

static int s_removed(const s_cands_t *c, int32_t id)
{
    for (int32_t j = 0; j < c->n_removed; j++)
        if (c->removed[j] == id)
            return 1;
    return 0;
}

/* work = max(0, p - q_s) where q_s is c->q without the removed tokens,
 * renormalised (scale), or the point mass at d when c->q is NULL or a point
 * mass. Returns the residual's mass (double), or -1 on a bad id. */
static double s_residual(int32_t nv, const float *p, int32_t d, const s_cands_t *c, float *work)
{
    const sw_draft_q_t *q = c->q;
    for (int32_t i = 0; i < nv; i++)
        work[i] = p[i];
    const float scale = (float)(1.0 / (1.0 - c->removed_mass));
    if (!q || q->n == 0) {
        work[d] = 0.0f;
    } else if (!q->ids) {
        for (int32_t i = 0; i < nv; i++) {
            if (c->n_removed && s_removed(c, i))
                continue;
            float r = p[i] - (c->n_removed ? q->vals[i] * scale : q->vals[i]);
            work[i] = r > 0.0f ? r : 0.0f;
        }
    } else {
        for (int32_t j = 0; j < q->n; j++) {
            int32_t id = q->ids[j];
            if (id < 0 || id >= nv) {
                SW_ERR("verify: q entry %d has token id %d", j, id);
                return -1;
            }
            if (c->n_removed && s_removed(c, id))
                continue;
            float r = work[id] - (c->n_removed ? q->vals[j] * scale : q->vals[j]);
            work[id] = r > 0.0f ? r : 0.0f;
        }
    }
    double mass = 0.0;
    for (int32_t i = 0; i < nv; i++)
        mass += work[i] > 0.0f ? work[i] : 0.0f;
    return mass;
}

int32_t sw_verify_residual(sw_sampler_t *s, const float *p, int32_t d, const sw_draft_q_t *q,
                           float *work)
{
    int32_t nv = sw_sampler_n_vocab(s);
    if (d < 0 || d >= nv) {
        SW_ERR("verify: draft token %d outside the vocabulary of %d", d, nv);
        return -1;
    }
    s_cands_t c = {.q = q};
    double mass = s_residual(nv, p, d, &c, work);
    if (mass < 0)
        return -1;
    return sw_sampler_sample_probs(s, mass > 0.0 ? work : p);
}

/* The next child of node `node` after child index `after` (0 = from the
 * first), in index order; 0 when there is none. Children of a chain: i + 1. */
static int32_t s_next_child(const sw_verify_in_t *in, int32_t node, int32_t after)
{
    if (!in->parent)
        return after == 0 && node < in->k ? node + 1 : 0;
    for (int32_t c = (after ? after : node) + 1; c <= in->k; c++)
        if (in->parent[c - 1] == node)
            return c;
    return 0;
}

/* Checks the tree shape, sibling tokens and the q of later siblings. */
static int s_check_tree(const sw_verify_in_t *in)
{
    if (in->k > SW_VERIFY_MAX_TREE) {
        SW_ERR("verify: a tree of %d drafts (max %d)", in->k, SW_VERIFY_MAX_TREE);
        return -1;
    }
    for (int32_t i = 0; i < in->k; i++) {
        const int32_t par = in->parent[i];
        if (par < 0 || par > i) {
            SW_ERR("verify: draft %d hangs under node %d (must be in [0, %d])", i, par, i);
            return -1;
        }
        const int32_t first = s_next_child(in, par, 0); // the first sibling (node index)
        for (int32_t c = first; c && c < i + 1; c = s_next_child(in, par, c)) {
            if (in->draft[c - 1] == in->draft[i]) {
                SW_ERR("verify: drafts %d and %d are siblings with the same token %d", c - 1, i,
                       in->draft[i]);
                return -1;
            }
        }
        if (!in->q || first == i + 1)
            continue;
        /* A later sibling: drawn from the first sibling's q (or a point mass). */
        const sw_draft_q_t *q0 = &in->q[first - 1], *qi = &in->q[i];
        if (q0->n == 0 ? qi->q_tok != 1.0f
                       : !(qi->q_tok > 0.0f && qi->q_tok <= 1.0f) ||
                             fabsf(s_q_at(q0, in->draft[i]) - qi->q_tok) > SW_DRAFT_Q_TOL) {
            SW_ERR("verify: draft %d: q_tok %g does not fit its first sibling's q", i,
                   (double)qi->q_tok);
            return -1;
        }
    }
    return 0;
}

static int s_verify_greedy(sw_sampler_t *s, const sw_verify_in_t *in, int32_t *tokens_out,
                           int32_t *path_out)
{
    size_t nv = (size_t)sw_sampler_n_vocab(s);
    for (int32_t node = 0, n = 0;;) {
        int32_t a = sw_sampler_argmax(s, in->logits + (size_t)node * nv);
        if (a < 0)
            return -1;
        tokens_out[n] = a;
        sw_sampler_accept(s, a);
        int32_t c = s_next_child(in, node, 0);
        while (c && in->draft[c - 1] != a)
            c = s_next_child(in, node, c);
        if (!c)
            return n + 1;
        if (path_out)
            path_out[n] = c;
        node = c;
        n++;
    }
}

int sw_verify_path(sw_sampler_t *s, const sw_verify_in_t *in, float *work, int32_t *tokens_out,
                   int32_t *path_out)
{
    int32_t nv = sw_sampler_n_vocab(s);
    if (in->k < 0 || (in->k > 0 && !in->draft) || !in->logits) {
        SW_ERR("verify: bad round (k %d, draft %s, logits %s)", in->k, in->draft ? "set" : "NULL",
               in->logits ? "set" : "NULL");
        return -1;
    }
    /* the parents first (s_next_child below walks them); the rest of the
     * tree's checks need the drafts' q checked */
    for (int32_t i = 0; in->parent && i < in->k; i++)
        if (in->parent[i] < 0 || in->parent[i] > i || in->k > SW_VERIFY_MAX_TREE) {
            SW_ERR("verify: draft %d hangs under node %d (must be in [0, %d]; trees of at "
                   "most %d drafts)",
                   i, in->parent[i], i, SW_VERIFY_MAX_TREE);
            return -1;
        }
    for (int32_t i = 0; i < in->k; i++) {
        if (in->draft[i] < 0 || in->draft[i] >= nv) {
            SW_ERR("verify: draft %d is token %d, outside the vocabulary of %d", i, in->draft[i],
                   nv);
            return -1;
        }
        /* Later siblings of a tree give only q_tok (checked by s_check_tree). */
        int later = in->parent && s_next_child(in, in->parent[i], 0) != i + 1;
        if (in->q && !later && s_check_q(&in->q[i], in->draft[i], nv, i) != 0)
            return -1;
    }
    if (in->parent && s_check_tree(in) != 0)
        return -1;
    if (sw_sampler_params(s)->temp <= 0.0f)
        return s_verify_greedy(s, in, tokens_out, path_out);

    float *p = work, *resid = work + nv;
    sw_rng_t *rng = sw_sampler_rng(s);
    static const sw_draft_q_t point = {.q_tok = 1.0f};
    for (int32_t node = 0, n = 0;;) {
        if (sw_sampler_probs(s, in->logits + (size_t)node * (size_t)nv, p) != 0)
            return -1;
        int32_t t = -1, c = s_next_child(in, node, 0);
        if (!c) {
            t = sw_sampler_sample_probs(s, p); /* bonus token */
        } else {
            /* The candidates of this position, tried in order (verify.h). */
            const sw_draft_q_t *q0 = in->q ? &in->q[c - 1] : &point;
            s_cands_t cands = {.q = q0->n ? q0 : NULL};
            for (; c; c = s_next_child(in, node, c)) {
                const int32_t d = in->draft[c - 1];
                double qd = in->q ? in->q[c - 1].q_tok : 1.0;
                if (cands.q && cands.n_removed)
                    qd /= 1.0 - cands.removed_mass;
                if (sw_rng_uniform(rng) * qd < (double)p[d])
                    break;
                double mass = s_residual(nv, p, d, &cands, resid);
                if (mass < 0)
                    return -1;
                if (!s_next_child(in, node, c)) { // every candidate rejected
                    t = sw_sampler_sample_probs(s, mass > 0.0 ? resid : p);
                    break;
                }
                /* p_{s+1} = norm(max(0, p_s - q_s)); with no mass left (only
                 * rounding allows it) p_s stays. */
                if (mass > 0.0) {
                    const float inv = (float)(1.0 / mass);
                    for (int32_t i = 0; i < nv; i++)
                        p[i] = resid[i] * inv;
                }
                if (cands.q) {
                    cands.removed[cands.n_removed++] = d;
                    cands.removed_mass += in->q[c - 1].q_tok;
                    if (cands.removed_mass > 1.0 - 1e-6)
                        cands.removed_mass = 1.0 - 1e-6; // rounding: q is used up
                }
            }
            if (c && t < 0) { // candidate c accepted
                tokens_out[n] = in->draft[c - 1];
                sw_sampler_accept(s, tokens_out[n]);
                if (path_out)
                    path_out[n] = c;
                node = c;
                n++;
                continue;
            }
        }
        if (t < 0)
            return -1;
        tokens_out[n] = t;
        sw_sampler_accept(s, t);
        return n + 1;
    }
}

int sw_verify(sw_sampler_t *s, const sw_verify_in_t *in, float *work, int32_t *tokens_out)
{
    return sw_verify_path(s, in, work, tokens_out, NULL);
}
