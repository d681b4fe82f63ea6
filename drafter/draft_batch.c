/*
 * draft_batch.c - batched drafting (draft_model_set_batching): a step that
 * needs a forward of the draft model posts it as a request and returns;
 * draft_model_flush runs every posted request of the model's sequences as ONE
 * engine call (each sequence on its own cache: sw_model_forward_batch, whose
 * rows are computed as alone), and the sequence's next step takes the result.
 * Without batching (and when a sequence steps again before a flush) the
 * request runs at once.
 */
#include "draft_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "draft_model_impl.h"
#include "log.h"

#define S_SLICE_MS 30.0 // drafting per step of a chain, at most about

/* The largest softmax probability of the logits at temperature 1 (the sum
 * the CPU backend's argmax takes, so a step run here or there agrees). */
float draft_top_prob(const float *l, int n)
{
    float mx = l[0];
    for (int i = 1; i < n; i++)
        if (l[i] > mx)
            mx = l[i];
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += exp((double)(l[i] - mx));
    return (float)(1.0 / sum);
}

/* Takes d's posted request out of the model's list (it will not run). */
void draft_req_unlink(draft_seq_t *d)
{
    draft_model_t *dm = d->dm;
    if (d->rq.state == DRAFT_REQ_POSTED) {
        draft_seq_t *prev = NULL, *x = dm->pend;
        while (x && x != d) {
            prev = x;
            x = x->rq.next;
        }
        if (x) {
            if (prev)
                prev->rq.next = d->rq.next;
            else
                dm->pend = d->rq.next;
            if (dm->pend_tail == d)
                dm->pend_tail = prev;
        }
    }
    d->rq.next = NULL;
    d->rq.state = DRAFT_REQ_NONE;
}

/* A greedy chain request alone: as many steps on the backend as take about
 * S_SLICE_MS (sw_model_greedy_steps), at most rq.steps. 0 or -1. */
static int s_run_greedy(draft_seq_t *d)
{
    draft_req_t *q = &d->rq;
    int steps = d->step_ms > 0 ? (int)(S_SLICE_MS / d->step_ms) : 1;
    if (steps < 1)
        steps = 1;
    if (steps > q->steps)
        steps = q->steps;
    char err[256] = "";
    const double t = sw_now_ms();
    if (sw_model_greedy_steps(d->dm->m, d->kv, q->tok[0], steps, q->out, q->prob, err,
                              sizeof err) != 0) {
        SW_WARN("draft model: %s", err);
        return -1;
    }
    const double now = sw_now_ms(), per = (now - t) / steps;
    d->step_ms = d->step_ms > 0 ? 0.7 * d->step_ms + 0.3 * per : per;
    q->n_out = steps;
    draft_batch_stats_t *st = &d->dm->stats; // steps of one row each
    st->flushes += (uint64_t)steps;
    st->seqs += (uint64_t)steps;
    st->rows += (uint64_t)steps;
    st->ms += now - t;
    st->last_seqs = st->last_rows = 1;
    st->last_ms = per;
    if (d->dm->load)
        for (int i = 0; i < steps; i++)
            draft_load_draft_batch(d->dm->load, 1, per, now);
    /* The cache grew by tok and every argmax but the last. */
    d->cached[q->slot0] = q->tok[0];
    for (int i = 0; i + 1 < steps; i++)
        d->cached[q->slot0 + 1 + i] = q->out[i];
    return 0;
}

/* Runs the requests of seqs[0..n) (one each, distinct caches) as one engine
 * call; a greedy chain request takes the argmax of its row (the first
 * largest logit, as the backend's loop does). 0, or -1 (a failed forward
 * changed no cache). */
static int s_run_batch(draft_model_t *dm, draft_seq_t **seqs, int n)
{
    if (n > dm->b_cap) {
        sw_kv_t **k = realloc(dm->b_kvs, (size_t)n * sizeof *k);
        if (k)
            dm->b_kvs = k;
        sw_forward_t *f = k ? realloc(dm->b_fs, (size_t)n * sizeof *f) : NULL;
        if (!k || !f) {
            SW_WARN("draft model: out of memory for a batch of %d sequences", n);
            return -1;
        }
        dm->b_fs = f;
        dm->b_cap = n;
    }
    int rows = 0;
    for (int i = 0; i < n; i++) {
        const draft_req_t *q = &seqs[i]->rq;
        dm->b_kvs[i] = seqs[i]->kv;
        dm->b_fs[i] = (sw_forward_t){.n = q->n,
                                     .tokens = q->tok,
                                     .logits = q->logits,
                                     .n_logits = q->n_logits,
                                     .parent = q->tree ? q->par : NULL};
        rows += q->n;
    }
    char err[256] = "";
    const double t0 = sw_now_ms();
    if (sw_model_forward_batch(dm->m, dm->b_kvs, dm->b_fs, n, err, sizeof err) != 0) {
        SW_WARN("draft model: %s", err);
        return -1;
    }
    const double ms = sw_now_ms() - t0;
    dm->stats.flushes++;
    dm->stats.seqs += (uint64_t)n;
    dm->stats.rows += (uint64_t)rows;
    dm->stats.ms += ms;
    dm->stats.last_seqs = n;
    dm->stats.last_rows = rows;
    dm->stats.last_ms = ms;
    if (dm->load)
        draft_load_draft_batch(dm->load, rows, ms, t0 + ms);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        draft_seq_t *d = seqs[i];
        draft_req_t *q = &d->rq;
        if (q->steps <= 0)
            continue;
        q->out[0] = sw_sampler_argmax(d->s, q->logits);
        q->prob[0] = draft_top_prob(q->logits, dm->n_vocab);
        q->n_out = 1;
        d->cached[q->slot0] = q->tok[0];
        if (q->out[0] < 0) {
            q->state = DRAFT_REQ_FAILED;
            rc = -1;
        }
    }
    return rc;
}

/* Runs every posted request (draft_model_flush). Its wall time goes to each
 * sequence's proposal (sw_proposal_t.ms), but to caller's, whose step runs
 * this and is timed as a whole by whoever calls the step. */
static int s_flush(draft_model_t *dm, const draft_seq_t *caller)
{
    int n = 0;
    for (draft_seq_t *x = dm->pend; x; x = x->rq.next)
        n++;
    if (n == 0)
        return 0;
    draft_seq_t *one[1], **seqs = n == 1 ? one : malloc((size_t)n * sizeof *seqs);
    if (!seqs) {
        for (draft_seq_t *x = dm->pend; x; x = x->rq.next)
            x->rq.state = DRAFT_REQ_FAILED;
        dm->pend = dm->pend_tail = NULL;
        return -1;
    }
    int i = 0;
    for (draft_seq_t *x = dm->pend; x; x = x->rq.next)
        seqs[i++] = x;
    dm->pend = dm->pend_tail = NULL;
    for (i = 0; i < n; i++) {
        seqs[i]->rq.next = NULL;
        seqs[i]->rq.state = DRAFT_REQ_DONE;
    }
    int rc;
    const double t0 = sw_now_ms();
    if (n == 1 && seqs[0]->rq.steps > 0)
        rc = s_run_greedy(seqs[0]);
    else
        rc = s_run_batch(dm, seqs, n);
    if (rc != 0 && n > 1) { // which one fails: each alone (none of them ran)
        rc = 0;
        for (i = 0; i < n; i++)
            if (seqs[i]->rq.state == DRAFT_REQ_DONE && seqs[i]->rq.n_out == 0 &&
                s_run_batch(dm, seqs + i, 1) != 0) {
                seqs[i]->rq.state = DRAFT_REQ_FAILED;
                rc = -1;
            }
    } else if (rc != 0) {
        seqs[0]->rq.state = DRAFT_REQ_FAILED;
    }
    const double ms = sw_now_ms() - t0;
    for (i = 0; i < n; i++)
        if (seqs[i] != caller && seqs[i]->out)
            seqs[i]->out->ms += ms;
    if (seqs != one)
        free(seqs);
    return rc < 0 ? -1 : n;
}

int draft_model_flush(draft_model_t *dm)
{
    return s_flush(dm, NULL);
}

void draft_model_set_batching(draft_model_t *dm, int on)
{
    if (!on)
        (void)draft_model_flush(dm);
    dm->batching = on != 0;
}

const draft_batch_stats_t *draft_model_batch_stats(const draft_model_t *dm)
{
    return &dm->stats;
}

/* Posts d->rq (its fields set): with batching it waits for a flush (1);
 * otherwise it runs now and its result is in d->rq (0); -1 on error. */
int draft_req_post(draft_seq_t *d)
{
    draft_model_t *dm = d->dm;
    draft_req_t *q = &d->rq;
    q->slot0 = sw_kv_len(d->kv);
    q->n_out = 0;
    q->next = NULL;
    if (dm->batching) {
        q->state = DRAFT_REQ_POSTED;
        if (dm->pend_tail)
            dm->pend_tail->rq.next = d;
        else
            dm->pend = d;
        dm->pend_tail = d;
        return 1;
    }
    q->state = DRAFT_REQ_NONE;
    const int rc = q->steps > 0 ? s_run_greedy(d) : s_run_batch(dm, &d, 1);
    q->state = DRAFT_REQ_NONE;
    return rc == 0 ? 0 : -1;
}

/* The result of the request d posted in its last step: 1 (it ran: the
 * result is in d->rq), 0 (none posted), -1 (it failed). One still waiting
 * runs now, with every other request posted. */
int draft_req_taken(draft_seq_t *d)
{
    if (d->rq.state == DRAFT_REQ_POSTED)
        (void)s_flush(d->dm, d);
    const int st = d->rq.state;
    d->rq.state = DRAFT_REQ_NONE;
    return st == DRAFT_REQ_DONE ? 1 : st == DRAFT_REQ_FAILED ? -1 : 0;
}
