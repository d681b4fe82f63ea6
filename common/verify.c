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

#include <math.h>
#include <stddef.h>

/* Largest accepted |q_tok - q(d)| when the full q is given as well. */
#define SW_VERIFY_Q_TOL 1e-4f

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
    if (fabsf(qd - q->q_tok) > SW_VERIFY_Q_TOL) {
        SW_ERR("verify: draft %d: q_tok %g but q(%d) = %g", pos, (double)q->q_tok, d, (double)qd);
        return -1;
    }
    return 0;
}

int32_t sw_verify_residual(sw_sampler_t *s, const float *p, int32_t d, const sw_draft_q_t *q,
                           float *work)
{
    int32_t nv = sw_sampler_n_vocab(s);
    if (d < 0 || d >= nv) {
        SW_ERR("verify: draft token %d outside the vocabulary of %d", d, nv);
        return -1;
    }
    for (int32_t i = 0; i < nv; i++)
        work[i] = p[i];
    if (!q || q->n == 0) {
        work[d] = 0.0f;
    } else if (!q->ids) {
        for (int32_t i = 0; i < nv; i++) {
            float r = p[i] - q->vals[i];
            work[i] = r > 0.0f ? r : 0.0f;
        }
    } else {
        for (int32_t j = 0; j < q->n; j++) {
            int32_t id = q->ids[j];
            if (id < 0 || id >= nv) {
                SW_ERR("verify: q entry %d has token id %d", j, id);
                return -1;
            }
            float r = work[id] - q->vals[j];
            work[id] = r > 0.0f ? r : 0.0f;
        }
    }
    double mass = 0.0;
    for (int32_t i = 0; i < nv; i++)
        mass += work[i] > 0.0f ? work[i] : 0.0f;
    return sw_sampler_sample_probs(s, mass > 0.0 ? work : p);
}

static int s_verify_greedy(sw_sampler_t *s, const sw_verify_in_t *in, int32_t *tokens_out)
{
    size_t nv = (size_t)sw_sampler_n_vocab(s);
    for (int32_t i = 0; i <= in->k; i++) {
        int32_t a = sw_sampler_argmax(s, in->logits + (size_t)i * nv);
        if (a < 0)
            return -1;
        tokens_out[i] = a;
        sw_sampler_accept(s, a);
        if (i == in->k || a != in->draft[i])
            return i + 1;
    }
    return -1; /* not reached */
}

int sw_verify(sw_sampler_t *s, const sw_verify_in_t *in, float *work, int32_t *tokens_out)
{
    int32_t nv = sw_sampler_n_vocab(s);
    if (in->k < 0 || (in->k > 0 && !in->draft) || !in->logits) {
        SW_ERR("verify: bad round (k %d, draft %s, logits %s)", in->k, in->draft ? "set" : "NULL",
               in->logits ? "set" : "NULL");
        return -1;
    }
    for (int32_t i = 0; i < in->k; i++) {
        if (in->draft[i] < 0 || in->draft[i] >= nv) {
            SW_ERR("verify: draft %d is token %d, outside the vocabulary of %d", i, in->draft[i],
                   nv);
            return -1;
        }
        if (in->q && s_check_q(&in->q[i], in->draft[i], nv, i) != 0)
            return -1;
    }
    if (sw_sampler_params(s)->temp <= 0.0f)
        return s_verify_greedy(s, in, tokens_out);

    float *p = work, *resid = work + nv;
    sw_rng_t *rng = sw_sampler_rng(s);
    for (int32_t i = 0; i <= in->k; i++) {
        if (sw_sampler_probs(s, in->logits + (size_t)i * (size_t)nv, p) != 0)
            return -1;
        int32_t t;
        if (i == in->k) {
            t = sw_sampler_sample_probs(s, p); /* bonus token */
        } else {
            int32_t d = in->draft[i];
            double qd = in->q ? in->q[i].q_tok : 1.0;
            if (sw_rng_uniform(rng) * qd < (double)p[d]) {
                tokens_out[i] = d;
                sw_sampler_accept(s, d);
                continue;
            }
            t = sw_verify_residual(s, p, d, in->q ? &in->q[i] : NULL, resid);
        }
        if (t < 0)
            return -1;
        tokens_out[i] = t;
        sw_sampler_accept(s, t);
        return i + 1;
    }
    return -1; /* not reached */
}
