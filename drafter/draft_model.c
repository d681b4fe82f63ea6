/*
 * draft_model.c - the draft model proposer (see draft_model.h).
 */
#include "draft_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "decode.h"
#include "log.h"
#include "model.h"
#include "prefix.h"

/* Mixed into the target's seed for the draft's RNG: the draft's draws must be
 * independent of the verifier's acceptance tests, which use the seed itself. */
#define S_SEED_MIX 0xd1b54a32d192ed03ull
#define S_TREE_WIDTH 2                      // nodes expanded per tree step (one draft forward)
#define S_TREE_CHILDREN 3                   // candidates taken from each expanded node
#define S_TREE_NODES (4 * SW_MAX_DRAFT + 1) // nodes a tree proposal may find
#define S_SLICE_MS 30.0                     // drafting per step of a chain, at most about
#define S_REQ_ROWS 8                        // most rows one sequence puts into a batched forward

/* Batched drafting (draft_model_set_batching): a step that needs a forward of
 * the draft model posts it as a request and returns; draft_model_flush runs
 * every posted request of the model's sequences as ONE engine call (each
 * sequence on its own cache: sw_model_forward_batch, whose rows are computed
 * as alone), and the sequence's next step takes the result. Without batching
 * (and when a sequence steps again before a flush) the request runs at once. */
enum { S_REQ_NONE = 0, S_REQ_POSTED, S_REQ_DONE, S_REQ_FAILED };

typedef struct s_req {
    int state;                 // S_REQ_*
    int n;                     // rows, 1..S_REQ_ROWS
    int32_t tok[S_REQ_ROWS];   // (n) their tokens
    int32_t par[S_REQ_ROWS];   // (n) tree rows: the slot each hangs under
    int tree;                  // 1: par is set
    int slot0;                 // the cache length when posted (the first row's slot)
    float *logits;             // (n_logits, n_vocab) the sequence's buffer for the last rows
    int n_logits;              //
    int steps;                 // > 0: a greedy chain step; alone it may run up to this many
                               // steps on the backend (sw_model_greedy_steps)
    int n_out;                 // greedy chain: steps run (argmax after each)
    int32_t out[SW_MAX_DRAFT]; // (n_out) their argmax
    float prob[SW_MAX_DRAFT];  // (n_out) its softmax probability at temperature 1
    struct draft_seq *next;    // the model's list of posted requests
} s_req_t;

struct draft_model {
    char *path;                  // the GGUF path (for messages)
    sw_backend_t *be;            // own backend
    sw_model_t *m;               // all layers
    int cap;                     // default cache positions of a sequence
    int n_vocab;                 // vocabulary size
    float *probs;                // (n_vocab) sampling distribution scratch
    int32_t *heap_id;            // (DRAFT_Q_MAX) top-support selection
    float *heap_val;             // (DRAFT_Q_MAX)
    int trees;                   // 1 when its backend runs token trees
    draft_ahead_mem_t ahead;     // what drafting ahead reached so far (all sessions)
    int batching;                // 1: steps post their forwards (draft_model_flush runs them)
    struct draft_seq *pend;      // posted requests, oldest first
    struct draft_seq *pend_tail; //
    sw_kv_t **b_kvs;             // (b_cap) draft_model_flush's arguments
    sw_forward_t *b_fs;          // (b_cap)
    int b_cap;                   //
    draft_batch_stats_t stats;   // what the flushes did
    draft_load_t *load;          // where the steps' costs go (not owned), or NULL
    sw_prefix_t *prefix;         // prompt prefixes' KV (draft_model_set_prefix), or NULL
    size_t prefix_max;           // its bytes at most
};

/* A tree node of a proposal being built: node 0 is the root (the token the
 * drafts follow), the others candidates found by expanding a node. */
typedef struct s_node {
    int32_t tok;  // its token
    int32_t par;  // its parent node
    float q;      // the draft's probability of tok after its parent
    double value; // estimated probability that the target accepts it (its path's)
    int depth;    // 1 for the root's children
    int slot;     // cache slot once fed (expanded), else -1
    int main;     // 1 on the main path: the draft's top token under a main node (the chain)
} s_node_t;

enum { S_IDLE = 0, S_CATCHUP, S_FEED, S_CHAIN, S_TREE, S_DONE };

struct draft_seq {
    draft_model_t *dm;    // the model (not owned)
    sw_kv_t *kv;          // this sequence's cache; kv_len positions hold cached[0..kv_len)
    int32_t *cached;      // (cap) tokens whose K/V the cache holds
    int cap;              // cache positions
    sw_sampler_t *s;      // the draft's sampler (target's parameters, mixed seed)
    sw_sampling_t params; // the target's sampling parameters
    int32_t *q_ids;       // (SW_MAX_DRAFT, DRAFT_Q_MAX) sparse supports
    float *q_vals;        // (SW_MAX_DRAFT, DRAFT_Q_MAX) their probabilities
    double last_ms;       // last propose: drafting time (ms)
    int last_n;           // last propose: drafts made
    double step_ms;       // moving average of one greedy step (slices the chain loop)
    float *logits;        // (n_vocab) the last fed row's logits (each sequence its own: the
                          // proposals of several sessions advance in turns)
    float *tree_logits;   // (S_TREE_WIDTH, n_vocab) the rows of one tree step
    /* the proposal in progress (draft_seq_start .. draft_seq_step) */
    int phase;                    // S_*
    const int32_t *ctx;           // the sequence it follows (caller's)
    int n_ctx;                    //
    draft_shape_t sh;             // its shape
    sw_proposal_t *out;           // where it goes (caller's)
    int32_t feed;                 // S_FEED: the token fed after ctx (guess or extra)
    int n;                        // drafts so far (chain)
    int n_eff;                    // positions the drafts follow (ctx and the fed token)
    double t0, t_catch;           // start, end of the catch-up (ms)
    int catch_n;                  // tokens the catch-up fed
    s_node_t nodes[S_TREE_NODES]; // tree: nodes found (0 = the root)
    int n_nodes;                  //
    int tree_steps;               // tree: expansion steps done
    int pick[S_TREE_WIDTH];       // tree: the nodes the posted step feeds
    int n_pick;                   //
    s_req_t rq;                   // the forward it posted (batched drafting)
};

static void s_unlink(draft_seq_t *d);

int draft_vocab_check(const sw_gguf_t *draft, const sw_gguf_t *target, char *err, size_t err_len)
{
    static const char key[] = "tokenizer.ggml.tokens";
    enum sw_gguf_vtype td, tt;
    uint64_t nd, nt;
    if (sw_gguf_get_arr(draft, key, &td, &nd) != 0 || td != SW_GGUF_STRING) {
        sw_errf(err, err_len, "the draft model has no %s string array: cannot check its vocabulary",
                key);
        return -1;
    }
    if (sw_gguf_get_arr(target, key, &tt, &nt) != 0 || tt != SW_GGUF_STRING) {
        sw_errf(err, err_len, "the target model has no %s string array", key);
        return -1;
    }
    if (nd != nt) {
        sw_errf(err, err_len,
                "vocabulary mismatch: the draft model has %llu tokens, the target %llu (a draft "
                "model must use the target's tokenizer)",
                (unsigned long long)nd, (unsigned long long)nt);
        return -1;
    }
    for (uint64_t i = 0; i < nd; i++) {
        sw_gguf_str_t a, b;
        if (sw_gguf_arr_str(draft, key, i, &a) != 0 || sw_gguf_arr_str(target, key, i, &b) != 0) {
            sw_errf(err, err_len, "cannot read token %llu of the vocabularies",
                    (unsigned long long)i);
            return -1;
        }
        if (a.len != b.len || memcmp(a.ptr, b.ptr, a.len) != 0) {
            sw_errf(
                err, err_len,
                "vocabulary mismatch: token %llu is '%.*s' in the draft model but '%.*s' in the "
                "target (a draft model must use the target's tokenizer)",
                (unsigned long long)i, (int)(a.len > 40 ? 40 : a.len), a.ptr,
                (int)(b.len > 40 ? 40 : b.len), b.ptr);
            return -1;
        }
    }
    return 0;
}

draft_model_t *draft_model_new(const char *path, const sw_gguf_t *target, const char *backend,
                               int n_threads, int n_ctx, char *err, size_t err_len)
{
    char e2[384] = "";
    sw_gguf_t *g = sw_gguf_open(path, e2, sizeof e2);
    if (!g) {
        sw_errf(err, err_len, "draft model %s: %s", path, e2);
        return NULL;
    }
    int rc = draft_vocab_check(g, target, e2, sizeof e2);
    sw_gguf_close(&g);
    if (rc != 0) {
        sw_errf(err, err_len, "draft model %s: %s", path, e2);
        return NULL;
    }
    draft_model_t *d = calloc(1, sizeof *d);
    if (!d)
        goto oom;
    d->path = strdup(path);
    if (!d->path)
        goto oom;
    d->be = sw_backend_new(backend, n_threads, e2, sizeof e2);
    if (!d->be) {
        sw_errf(err, err_len, "draft model %s: %s", path, e2);
        draft_model_free(&d);
        return NULL;
    }
    d->m = sw_model_load(path, 0, -1, d->be, e2, sizeof e2);
    if (!d->m) {
        sw_errf(err, err_len, "draft model %s: %s", path, e2);
        draft_model_free(&d);
        return NULL;
    }
    sw_model_prefault(d->m, NULL, NULL);
    d->n_vocab = sw_model_hparams(d->m)->n_vocab;
    if ((uint64_t)n_ctx + SW_MAX_DRAFT + 1 > (uint64_t)1 << 24) {
        sw_errf(err, err_len, "draft model: context of %d positions is too large", n_ctx);
        draft_model_free(&d);
        return NULL;
    }
    d->cap = n_ctx + SW_MAX_DRAFT + 1; // drafts run past the committed context
    d->probs = malloc((size_t)d->n_vocab * sizeof *d->probs);
    d->heap_id = malloc(DRAFT_Q_MAX * sizeof *d->heap_id);
    d->heap_val = malloc(DRAFT_Q_MAX * sizeof *d->heap_val);
    if (!d->probs || !d->heap_id || !d->heap_val)
        goto oom;
    d->trees = sw_model_trees(d->m);
    return d;
oom:
    sw_errf(err, err_len, "draft model %s: out of memory", path);
    draft_model_free(&d);
    return NULL;
}

void draft_model_free(draft_model_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    draft_model_t *d = *self_p;
    sw_model_free(&d->m);
    sw_backend_free(&d->be);
    free(d->path);
    free(d->probs);
    free(d->heap_id);
    free(d->heap_val);
    free(d->b_kvs);
    free(d->b_fs);
    sw_prefix_free(&d->prefix);
    free(d);
    *self_p = NULL;
}

draft_seq_t *draft_seq_new(draft_model_t *dm, int n_ctx)
{
    if (n_ctx < 0 || (uint64_t)n_ctx + SW_MAX_DRAFT + 1 > (uint64_t)1 << 24)
        return NULL;
    draft_seq_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->dm = dm;
    s->cap = n_ctx ? n_ctx + SW_MAX_DRAFT + 1 : dm->cap;
    s->kv = sw_kv_new(dm->m, s->cap);
    s->cached = malloc((size_t)s->cap * sizeof *s->cached);
    s->q_ids = malloc((size_t)SW_MAX_DRAFT * DRAFT_Q_MAX * sizeof *s->q_ids);
    s->q_vals = malloc((size_t)SW_MAX_DRAFT * DRAFT_Q_MAX * sizeof *s->q_vals);
    s->logits = malloc((size_t)dm->n_vocab * sizeof *s->logits);
    s->tree_logits = malloc((size_t)S_TREE_WIDTH * dm->n_vocab * sizeof *s->tree_logits);
    sw_sampling_t greedy = sw_sampling_default();
    greedy.temp = 0;
    if (!s->kv || !s->cached || !s->q_ids || !s->q_vals || !s->logits || !s->tree_logits ||
        draft_seq_begin(s, &greedy) != 0)
        draft_seq_free(&s);
    return s;
}

void draft_seq_free(draft_seq_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    draft_seq_t *s = *self_p;
    s_unlink(s);
    sw_sampler_free(&s->s);
    sw_kv_free(&s->kv);
    free(s->cached);
    free(s->q_ids);
    free(s->q_vals);
    free(s->logits);
    free(s->tree_logits);
    free(s);
    *self_p = NULL;
}

int draft_seq_capacity(const draft_seq_t *s)
{
    return s->cap - SW_MAX_DRAFT - 1;
}

int draft_seq_lag(const draft_seq_t *s, const int32_t *ctx, int n_ctx)
{
    const int len = sw_kv_linear(s->kv) < n_ctx ? sw_kv_linear(s->kv) : n_ctx;
    int same = 0;
    while (same < len && s->cached[same] == ctx[same])
        same++;
    return n_ctx - same;
}

int draft_seq_begin(draft_seq_t *d, const sw_sampling_t *params)
{
    sw_sampling_t p = *params;
    p.seed ^= S_SEED_MIX;
    sw_sampler_t *s = sw_sampler_new(&p, d->dm->n_vocab);
    if (!s)
        return -1;
    sw_sampler_free(&d->s);
    d->s = s;
    d->params = *params;
    s_unlink(d);
    d->phase = S_IDLE;
    /* A new request starts from an empty cache: its prompt must be evaluated
     * as one prompt batch, as the target evaluates it, and rows reused from
     * another request's prompt or decode rows would not be. */
    if (sw_kv_truncate(d->kv, 0) != 0)
        return -1;
    return 0;
}

draft_ahead_mem_t *draft_model_ahead_mem(draft_model_t *d)
{
    return &d->ahead;
}

const char *draft_model_path(const draft_model_t *d)
{
    return d->path;
}

const char *draft_model_backend(const draft_model_t *d)
{
    return sw_backend_desc(d->be);
}

void draft_seq_last_cost(const draft_seq_t *d, double *ms, int *n_tokens)
{
    *ms = d->last_ms;
    *n_tokens = d->last_n;
}

/* The largest softmax probability of the logits at temperature 1 (the sum
 * the CPU backend's argmax takes, so a step run here or there agrees). */
static float s_top_prob(const float *l, int n)
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

/* ---- batched drafting --------------------------------------------------------------- */

/* Takes d's posted request out of the model's list (it will not run). */
static void s_unlink(draft_seq_t *d)
{
    draft_model_t *dm = d->dm;
    if (d->rq.state == S_REQ_POSTED) {
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
    d->rq.state = S_REQ_NONE;
}

/* A greedy chain request alone: as many steps on the backend as take about
 * S_SLICE_MS (sw_model_greedy_steps), at most rq.steps. 0 or -1. */
static int s_run_greedy(draft_seq_t *d)
{
    s_req_t *q = &d->rq;
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
        const s_req_t *q = &seqs[i]->rq;
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
        s_req_t *q = &d->rq;
        if (q->steps <= 0)
            continue;
        q->out[0] = sw_sampler_argmax(d->s, q->logits);
        q->prob[0] = s_top_prob(q->logits, dm->n_vocab);
        q->n_out = 1;
        d->cached[q->slot0] = q->tok[0];
        if (q->out[0] < 0) {
            q->state = S_REQ_FAILED;
            rc = -1;
        }
    }
    return rc;
}

int draft_model_flush(draft_model_t *dm)
{
    int n = 0;
    for (draft_seq_t *x = dm->pend; x; x = x->rq.next)
        n++;
    if (n == 0)
        return 0;
    draft_seq_t *one[1], **seqs = n == 1 ? one : malloc((size_t)n * sizeof *seqs);
    if (!seqs) {
        for (draft_seq_t *x = dm->pend; x; x = x->rq.next)
            x->rq.state = S_REQ_FAILED;
        dm->pend = dm->pend_tail = NULL;
        return -1;
    }
    int i = 0;
    for (draft_seq_t *x = dm->pend; x; x = x->rq.next)
        seqs[i++] = x;
    dm->pend = dm->pend_tail = NULL;
    for (i = 0; i < n; i++) {
        seqs[i]->rq.next = NULL;
        seqs[i]->rq.state = S_REQ_DONE;
    }
    int rc;
    if (n == 1 && seqs[0]->rq.steps > 0)
        rc = s_run_greedy(seqs[0]);
    else
        rc = s_run_batch(dm, seqs, n);
    if (rc != 0 && n > 1) { // which one fails: each alone (none of them ran)
        rc = 0;
        for (i = 0; i < n; i++)
            if (seqs[i]->rq.state == S_REQ_DONE && seqs[i]->rq.n_out == 0 &&
                s_run_batch(dm, seqs + i, 1) != 0) {
                seqs[i]->rq.state = S_REQ_FAILED;
                rc = -1;
            }
    } else if (rc != 0) {
        seqs[0]->rq.state = S_REQ_FAILED;
    }
    if (seqs != one)
        free(seqs);
    return rc < 0 ? -1 : n;
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

void draft_model_set_load(draft_model_t *dm, draft_load_t *load)
{
    dm->load = load;
}

int draft_model_set_prefix(draft_model_t *dm, size_t max_bytes, uint64_t seed)
{
    sw_prefix_free(&dm->prefix);
    dm->prefix_max = max_bytes;
    if (max_bytes == 0)
        return 0;
    dm->prefix = sw_prefix_new(dm->m, 0, seed);
    return dm->prefix ? 0 : -1;
}

/* The n prompt rows tokens[0..n) into an empty cache: the positions the
 * model's prefix cache holds are restored, the rest evaluated as the
 * prompt's continuation (bit for bit what the whole prompt gives), then the
 * prompt's blocks are stored. logits: the last row's into d->logits. 0 or -1. */
static int s_prompt(draft_seq_t *d, const int32_t *tokens, int n, int logits)
{
    draft_model_t *dm = d->dm;
    char err[256] = "";
    int from = 0;
    if (dm->prefix && sw_kv_len(d->kv) == 0 && n >= 2) {
        from = sw_prefix_find(dm->prefix, "", tokens, n, n - 1);
        if (from > 0 && sw_prefix_restore(dm->prefix, "", tokens, from, d->kv, err, sizeof err))
            from = 0;
    }
    sw_forward_t p = {.n = n - from,
                      .tokens = tokens + from,
                      .logits = logits ? d->logits : NULL,
                      .n_logits = logits ? 1 : 0,
                      .prompt = 1,
                      .prompt_cont = from > 0};
    if (sw_model_forward(dm->m, d->kv, &p, err, sizeof err) != 0) {
        SW_WARN("draft model: %s", err);
        return -1;
    }
    if (dm->prefix &&
        sw_prefix_store(dm->prefix, "", tokens, n, d->kv, dm->prefix_max, err, sizeof err) < 0)
        SW_WARN("draft model: prefix cache: %s", err);
    return 0;
}

/* Posts d->rq (its fields set): with batching it waits for a flush (1);
 * otherwise it runs now and its result is in d->rq (0); -1 on error. */
static int s_post(draft_seq_t *d)
{
    draft_model_t *dm = d->dm;
    s_req_t *q = &d->rq;
    q->slot0 = sw_kv_len(d->kv);
    q->n_out = 0;
    q->next = NULL;
    if (dm->batching) {
        q->state = S_REQ_POSTED;
        if (dm->pend_tail)
            dm->pend_tail->rq.next = d;
        else
            dm->pend = d;
        dm->pend_tail = d;
        return 1;
    }
    q->state = S_REQ_NONE;
    const int rc = q->steps > 0 ? s_run_greedy(d) : s_run_batch(dm, &d, 1);
    q->state = S_REQ_NONE;
    return rc == 0 ? 0 : -1;
}

/* The result of the request d posted in its last step: 1 (it ran: the
 * result is in d->rq), 0 (none posted), -1 (it failed). One still waiting
 * runs now, with every other request posted. */
static int s_taken(draft_seq_t *d)
{
    if (d->rq.state == S_REQ_POSTED)
        (void)draft_model_flush(d->dm);
    const int st = d->rq.state;
    d->rq.state = S_REQ_NONE;
    return st == S_REQ_DONE ? 1 : st == S_REQ_FAILED ? -1 : 0;
}

/* Appends n tokens to the cache and leaves the last row's logits in d->logits.
 * The first n_prompt of them are prompt rows: they are evaluated together in
 * prompt mode, as the target evaluates a prompt, so that a draft model equal
 * to the target reproduces the target's logits bit for bit. may_post: a few
 * rows without prompt rows become a request (s_post). 0 (done), 1 (posted)
 * or -1. */
static int s_feed(draft_seq_t *d, const int32_t *tokens, int n, int n_prompt, int may_post)
{
    const int len = sw_kv_len(d->kv);
    if (n < 1 || len + n > d->cap)
        return -1;
    if (may_post && n_prompt == 0 && n <= S_REQ_ROWS) {
        s_req_t *q = &d->rq;
        memcpy(q->tok, tokens, (size_t)n * sizeof *tokens);
        q->n = n;
        q->tree = 0;
        q->logits = d->logits;
        q->n_logits = 1;
        q->steps = 0;
        memcpy(d->cached + len, tokens, (size_t)n * sizeof *tokens);
        return s_post(d);
    }
    char err[256] = "";
    const int n_prompt_rows = n_prompt < n ? n_prompt : n;
    if (n_prompt_rows == n) {
        if (s_prompt(d, tokens, n, 1) != 0)
            return -1;
        memcpy(d->cached + len, tokens, (size_t)n * sizeof *tokens);
        return 0;
    }
    if (n_prompt_rows > 0) {
        if (s_prompt(d, tokens, n_prompt_rows, 0) != 0)
            return -1;
        memcpy(d->cached + len, tokens, (size_t)n_prompt_rows * sizeof *tokens);
    }
    sw_forward_t f = {.n = n - n_prompt_rows,
                      .tokens = tokens + n_prompt_rows,
                      .logits = d->logits,
                      .n_logits = 1};
    if (sw_model_forward(d->dm->m, d->kv, &f, err, sizeof err) != 0) {
        SW_WARN("draft model: %s", err);
        return -1;
    }
    memcpy(d->cached + len, tokens, (size_t)n * sizeof *tokens);
    return 0;
}

/* Min-heap on heap_val of at most DRAFT_Q_MAX entries: keeps the largest. */
static void s_heap_sift(float *v, int32_t *id, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && v[l] < v[m])
            m = l;
        if (r < n && v[r] < v[m])
            m = r;
        if (m == i)
            return;
        float tv = v[i];
        v[i] = v[m];
        v[m] = tv;
        int32_t ti = id[i];
        id[i] = id[m];
        id[m] = ti;
        i = m;
    }
}

/* Restricts probs (n_vocab, sums to 1) to its DRAFT_Q_MAX largest entries,
 * renormalised, in place; writes the support to ids/vals (sorted by nothing)
 * and returns its size. */
static int s_sparse_support(draft_model_t *d, int32_t *ids, float *vals)
{
    int n = 0;
    for (int i = 0; i < d->n_vocab; i++) {
        float p = d->probs[i];
        if (!(p > 0))
            continue;
        if (n < DRAFT_Q_MAX) {
            d->heap_val[n] = p;
            d->heap_id[n] = i;
            if (++n == DRAFT_Q_MAX)
                for (int j = n / 2 - 1; j >= 0; j--)
                    s_heap_sift(d->heap_val, d->heap_id, n, j);
        } else if (p > d->heap_val[0]) {
            d->probs[d->heap_id[0]] = 0;
            d->heap_val[0] = p;
            d->heap_id[0] = i;
            s_heap_sift(d->heap_val, d->heap_id, n, 0);
        } else {
            d->probs[i] = 0;
        }
    }
    double sum = 0;
    for (int j = 0; j < n; j++)
        sum += d->heap_val[j];
    for (int j = 0; j < n; j++) {
        ids[j] = d->heap_id[j];
        vals[j] = (float)(d->heap_val[j] / sum);
        d->probs[ids[j]] = vals[j];
    }
    return n;
}

/* The longest prefix of ctx the cache holds as a path from its first slot:
 * the plain part compared in place, then tree slots followed from parent to
 * child (a tree the draft model grew, or the branches it prepared). The tree
 * slots of the match go to slots (*n_slots of them); returns its length. */
static int s_match(const draft_seq_t *d, const int32_t *ctx, int n_ctx, int32_t *slots,
                   int *n_slots)
{
    const int len = sw_kv_len(d->kv), lin = sw_kv_linear(d->kv);
    int m = 0;
    *n_slots = 0;
    while (m < lin && m < n_ctx && d->cached[m] == ctx[m])
        m++;
    if (m < lin || lin == 0)
        return m;
    int prev = lin - 1;
    for (int sl = lin; sl < len && m < n_ctx && *n_slots < SW_MAX_DRAFT; sl++)
        if (sw_kv_parent(d->kv, sl) == prev && d->cached[sl] == ctx[m]) {
            slots[(*n_slots)++] = sl;
            prev = sl;
            m++;
        }
    return m;
}

/* Rolls the cache back to the longest prefix it shares with ctx (a matched
 * tree path becomes plain cache, sw_kv_keep) and feeds the rest (at least
 * the last token, whose logits are needed). all_prompt: when the cache is
 * empty, ctx is all prompt (the warm-up, or a proposal that follows one more
 * token); otherwise ctx is the prompt and the first generated token. Returns
 * the number of tokens fed, or -1. */
static int s_catch_up(draft_seq_t *d, const int32_t *ctx, int n_ctx, int all_prompt, int *posted)
{
    int32_t slots[SW_MAX_DRAFT];
    int n_slots = 0;
    int keep = s_match(d, ctx, n_ctx, slots, &n_slots);
    if (n_slots > 0) {
        const int from = sw_kv_linear(d->kv);
        char err[256] = "";
        if (sw_kv_keep(d->kv, from, slots, n_slots, err, sizeof err) != 0) {
            SW_WARN("draft model: %s", err);
            keep = from;
        } else {
            for (int j = 0; j < n_slots; j++) // ascending, each moves down or stays
                d->cached[from + j] = d->cached[slots[j]];
        }
    }
    if (keep == n_ctx)
        keep = n_ctx - 1;
    const int n_prompt = keep > 0 ? 0 : all_prompt ? n_ctx : n_ctx - 1;
    if (sw_kv_truncate(d->kv, keep) != 0)
        return -1;
    const int rc = s_feed(d, ctx + keep, n_ctx - keep, n_prompt, posted != NULL);
    if (rc < 0)
        return -1;
    if (posted)
        *posted = rc > 0;
    return n_ctx - keep;
}

int draft_seq_warm(draft_seq_t *d, const int32_t *ctx, int n_ctx)
{
    if (n_ctx < 1 || n_ctx > d->cap - 1)
        return -1;
    s_unlink(d);
    d->phase = S_IDLE; // a proposal in progress is dropped
    return s_catch_up(d, ctx, n_ctx, 1, NULL) < 0 ? -1 : 0;
}

int draft_seq_trees(const draft_seq_t *d)
{
    return d->dm->trees;
}

/* The RNG seed of the drafts that follow n positions: a function of the
 * request's seed and the position only, so that drafts prepared ahead equal
 * the drafts made after the verdict (splitmix64 finaliser). */
static uint64_t s_pos_seed(uint64_t seed, int n)
{
    uint64_t z = (seed ^ S_SEED_MIX) ^ ((uint64_t)(uint32_t)n * 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int draft_seq_start(draft_seq_t *d, const int32_t *ctx, int n_ctx, const draft_shape_t *sh,
                    sw_proposal_t *out)
{
    memset(out, 0, sizeof *out);
    out->guess = -1;
    s_unlink(d); // a posted forward of the dropped proposal does not run
    d->phase = S_IDLE;
    d->last_ms = 0;
    d->last_n = 0;
    if (n_ctx < 1 || sh->k < 1 || (sh->extra >= 0 && sh->guess))
        return 0; // nothing to propose: done at once
    d->ctx = ctx;
    d->n_ctx = n_ctx;
    d->sh = *sh;
    if (d->sh.k > SW_MAX_DRAFT)
        d->sh.k = SW_MAX_DRAFT;
    if (d->sh.max_nodes > SW_MAX_DRAFT)
        d->sh.max_nodes = SW_MAX_DRAFT;
    if (!d->dm->trees)
        d->sh.max_nodes = 0; // the draft model's backend runs chains only
    const int fed = sh->guess || sh->extra >= 0;
    d->n_eff = n_ctx + fed;
    if (d->n_eff + d->sh.k + 1 > d->cap) {
        d->sh.k = d->cap - d->n_eff - 1;
        if (d->sh.k < 1)
            return 0;
    }
    d->out = out;
    d->feed = sh->extra;
    d->n = 0;
    d->t0 = sw_now_ms();
    d->phase = S_CATCHUP;
    return 1;
}

/* The repetition history the target uses for the drafts: the last
 * rep_last_n tokens of what they follow. */
static void s_history(draft_seq_t *d)
{
    sw_sampler_clear_history(d->s);
    if (d->params.rep_penalty != 1.0f && d->params.rep_last_n > 0) {
        int from = d->n_ctx - d->params.rep_last_n;
        for (int i = from > 0 ? from : 0; i < d->n_ctx; i++)
            sw_sampler_accept(d->s, d->ctx[i]);
    }
}

/* Ends the proposal: drafting time and count. */
static int s_finish(draft_seq_t *d)
{
    const double t = sw_now_ms();
    d->last_ms = d->catch_n <= 2 ? t - d->t0 : t - d->t_catch;
    d->last_n = d->out->n;
    d->phase = S_DONE;
    return 0;
}

/* Takes the argmax steps of a greedy chain request into the proposal; 1
 * when the chain is complete (k drafts, or the confidence stop). */
static int s_chain_take(draft_seq_t *d)
{
    sw_proposal_t *o = d->out;
    const s_req_t *q = &d->rq;
    for (int i = 0; i < q->n_out && d->n < d->sh.k; i++) {
        o->tokens[d->n] = q->out[i];
        o->conf[d->n] = q->prob[i];
        if (d->sh.p_min > 0 && q->prob[i] < d->sh.p_min)
            return 1; // the confidence stop
        d->n++;
    }
    return d->n >= d->sh.k;
}

/* Chain steps: greedy without a repetition penalty runs on the backend
 * (sw_model_greedy_steps(), as many steps per call as fit S_SLICE_MS), or,
 * batched with other sequences, one step per flush; the other cases draft
 * one token per step. have: the request posted by the last step ran. */
static int s_chain_step(draft_seq_t *d, int have)
{
    sw_proposal_t *o = d->out;
    const int k = d->sh.k;
    const float p_min = d->sh.p_min;
    const int greedy = !(d->params.temp > 0);
    const int penalty = d->params.rep_penalty != 1.0f && d->params.rep_last_n > 0;
    if (greedy && !penalty) {
        if (have && s_chain_take(d))
            goto done;
        if (d->n == 0) {
            o->tokens[0] = sw_sampler_argmax(d->s, d->logits);
            if (o->tokens[0] < 0)
                return -1;
            o->conf[0] = s_top_prob(d->logits, d->dm->n_vocab);
            d->n = 1;
            if (k == 1)
                goto done;
            return 1;
        }
        s_req_t *q = &d->rq;
        q->n = 1;
        q->tok[0] = o->tokens[d->n - 1];
        q->tree = 0;
        q->logits = d->logits;
        q->n_logits = 1;
        q->steps = k - d->n;
        const int rc = s_post(d);
        if (rc != 0)
            return rc; // posted (1) or failed (-1)
        if (s_chain_take(d))
            goto done;
        return 1;
    }
    /* One token: greedy with the penalty, or a draw from the draft's sparse q. */
    {
        const int n = d->n;
        int32_t tok;
        float conf;
        if (greedy) {
            tok = sw_sampler_argmax(d->s, d->logits);
            conf = s_top_prob(d->logits, d->dm->n_vocab);
        } else {
            if (sw_sampler_probs(d->s, d->logits, d->dm->probs) != 0)
                return -1;
            int32_t *ids = d->q_ids + (size_t)n * DRAFT_Q_MAX;
            float *vals = d->q_vals + (size_t)n * DRAFT_Q_MAX;
            int ns = s_sparse_support(d->dm, ids, vals);
            tok = sw_sampler_sample_probs(d->s, d->dm->probs);
            conf = 0;
            for (int j = 0; j < ns; j++)
                conf = vals[j] > conf ? vals[j] : conf;
            if (tok >= 0) {
                o->q[n].q_tok = d->dm->probs[tok];
                o->q[n].n = ns;
                o->q[n].ids = ids;
                o->q[n].vals = vals;
            }
        }
        if (tok < 0)
            return -1;
        if (n > 0 && conf < p_min)
            goto done;
        o->tokens[n] = tok;
        o->conf[n] = greedy ? conf : o->q[n].q_tok;
        d->n = n + 1;
        sw_sampler_accept(d->s, tok);
        if (d->n == k)
            goto done;
        if (s_feed(d, &o->tokens[n], 1, 0, 1) < 0)
            return -1;
        return 1; // its logits are there by the next step (posted, or run now)
    }
done:
    o->n = d->n;
    o->n_main = d->n;
    o->q_used = !greedy && d->n > 0;
    return s_finish(d);
}

/* The largest `m` entries of the softmax of l (n_vocab) at temperature 1:
 * ids (by logit, the lower id first on ties) and probabilities. Returns m. */
static int s_top(const float *l, int n_vocab, int m, int32_t *ids, float *p)
{
    float mx = l[0];
    for (int i = 1; i < n_vocab; i++)
        mx = l[i] > mx ? l[i] : mx;
    double sum = 0;
    for (int i = 0; i < n_vocab; i++)
        sum += exp((double)(l[i] - mx));
    int got = 0;
    for (int i = 0; i < n_vocab; i++) {
        if (!(l[i] == l[i]))
            continue; // NaN never ranks
        if (got == m && !(l[i] > l[ids[m - 1]]))
            continue;
        int at = got < m ? got++ : m - 1;
        while (at > 0 && l[i] > l[ids[at - 1]]) {
            ids[at] = ids[at - 1];
            at--;
        }
        ids[at] = i;
    }
    for (int j = 0; j < got; j++)
        p[j] = (float)(exp((double)(l[ids[j]] - mx)) / sum);
    return got;
}

static double s_calib(const draft_seq_t *d, double q)
{
    return d->sh.calib ? d->sh.calib(d->sh.ctx, q) : q;
}

/* Adds the candidates of node `at` from its logits row. */
static void s_expand(draft_seq_t *d, int at, const float *logits)
{
    int32_t ids[S_TREE_CHILDREN];
    float p[S_TREE_CHILDREN];
    const int m = s_top(logits, d->dm->n_vocab, S_TREE_CHILDREN, ids, p);
    const s_node_t *par = &d->nodes[at];
    for (int j = 0; j < m && d->n_nodes < S_TREE_NODES; j++) {
        s_node_t *c = &d->nodes[d->n_nodes++];
        c->tok = ids[j];
        c->par = at;
        c->q = p[j];
        c->value = (at ? par->value : 1.0) * s_calib(d, p[j]);
        c->depth = par->depth + 1;
        c->slot = -1;
        c->main = j == 0 && (at == 0 || par->main);
    }
}

/* Node indices (not the root) ordered by value, the earlier found first on ties. */
static void s_rank(const draft_seq_t *d, int *order, int *n)
{
    *n = 0;
    for (int i = 1; i < d->n_nodes; i++) {
        int at = (*n)++;
        while (at > 0 && d->nodes[i].value > d->nodes[order[at - 1]].value) {
            order[at] = order[at - 1];
            at--;
        }
        order[at] = i;
    }
}

/* Writes the tree: the best nodes by value whose parents are in it, each
 * worth its row (node_min), at most max_nodes and k deep, in depth-first
 * order with the better child first (so nodes 1..n_main are the best path). */
static int s_tree_emit(draft_seq_t *d)
{
    sw_proposal_t *o = d->out;
    int order[S_TREE_NODES], n_order;
    s_rank(d, order, &n_order);
    unsigned char in[S_TREE_NODES] = {0};
    in[0] = 1;
    int count = 0;
    /* The main path (the chain the K controller chose) always, then the
     * best other nodes that are worth their rows. */
    for (int i = 1; i < d->n_nodes && count < d->sh.max_nodes; i++)
        if (d->nodes[i].main && d->nodes[i].depth <= d->sh.k) {
            in[i] = 1;
            count++;
        }
    for (int r = 0; r < n_order && count < d->sh.max_nodes; r++) {
        const s_node_t *x = &d->nodes[order[r]];
        const double need = d->sh.node_min ? d->sh.node_min(d->sh.ctx, 1 + count) : 0;
        if (in[order[r]] || !in[x->par] || x->depth > d->sh.k || x->value < need)
            continue;
        in[order[r]] = 1;
        count++;
    }
    /* Depth first; a node's children in rank order. */
    int rank_of[S_TREE_NODES];
    for (int r = 0; r < n_order; r++)
        rank_of[order[r]] = r;
    int stack[S_TREE_NODES], sp = 0, idx_of[S_TREE_NODES];
    idx_of[0] = 0;
    stack[sp++] = 0;
    int n = 0;
    while (sp > 0) {
        const int at = stack[--sp];
        if (at) {
            idx_of[at] = n + 1;
            o->tokens[n] = d->nodes[at].tok;
            o->parent[n] = idx_of[d->nodes[at].par];
            o->conf[n] = d->nodes[at].q;
            n++;
        }
        /* children, pushed worst first so the best pops first */
        int kids[S_TREE_NODES], nk = 0;
        for (int i = 1; i < d->n_nodes; i++)
            if (in[i] && d->nodes[i].par == at) {
                int p = nk++;
                while (p > 0 && (d->nodes[i].main || (!d->nodes[kids[p - 1]].main &&
                                                      rank_of[i] < rank_of[kids[p - 1]]))) {
                    kids[p] = kids[p - 1];
                    p--;
                }
                kids[p] = i;
            }
        for (int j = nk - 1; j >= 0; j--)
            stack[sp++] = kids[j];
    }
    o->n = n;
    o->tree = 1;
    o->n_main = 0;
    while (o->n_main < n && o->parent[o->n_main] == o->n_main)
        o->n_main++;
    return s_finish(d);
}

/* Takes the rows of the tree step posted last: their slots, and their
 * candidates from the logits. */
static void s_tree_take(draft_seq_t *d)
{
    for (int j = 0; j < d->n_pick; j++)
        d->nodes[d->pick[j]].slot = d->rq.slot0 + j;
    for (int j = 0; j < d->n_pick; j++)
        s_expand(d, d->pick[j], d->tree_logits + (size_t)j * d->dm->n_vocab);
    d->tree_steps++;
}

/* One tree step: feeds the best nodes worth expanding (up to S_TREE_WIDTH,
 * in one forward call, each under its parent's slot) and adds their
 * candidates; when none is worth it, or after k steps, writes the tree.
 * have: the rows posted by the last step ran (their candidates come first). */
static int s_tree_step(draft_seq_t *d, int have)
{
    if (have)
        s_tree_take(d);
    if (d->n_nodes == 0) { // the root: the token the drafts follow, fed by now
        s_node_t *r = &d->nodes[d->n_nodes++];
        r->tok = d->feed >= 0 ? d->feed : d->ctx[d->n_ctx - 1];
        r->par = -1;
        r->q = 1;
        r->value = 1;
        r->depth = 0;
        r->slot = sw_kv_len(d->kv) - 1;
        s_expand(d, 0, d->logits);
        d->tree_steps = 0;
        return 1;
    }
    int order[S_TREE_NODES], n_order, n_pick = 0;
    int *pick = d->pick;
    s_rank(d, order, &n_order);
    const int len = sw_kv_len(d->kv);
    /* The main path grows by one node per step, as a chain would (the
     * confidence stop ends it); the other row of a step goes to the best
     * other node worth expanding. */
    for (int i = 1; i < d->n_nodes; i++) {
        const s_node_t *x = &d->nodes[i];
        if (x->main && x->slot < 0 && x->depth < d->sh.k && len < d->cap &&
            d->n_nodes + S_TREE_CHILDREN <= S_TREE_NODES &&
            !(d->sh.p_min > 0 && x->q < d->sh.p_min && x->depth > 1))
            pick[n_pick++] = i;
    }
    for (int r = 0; r < n_order && r < d->sh.max_nodes && n_pick < S_TREE_WIDTH; r++) {
        const s_node_t *x = &d->nodes[order[r]];
        if (x->slot < 0 && !x->main && x->depth < d->sh.k && x->value >= d->sh.expand_min &&
            d->nodes[x->par].slot >= 0 && len + n_pick < d->cap &&
            d->n_nodes + S_TREE_CHILDREN <= S_TREE_NODES)
            pick[n_pick++] = order[r];
    }
    d->n_pick = n_pick;
    if (n_pick == 0 || d->tree_steps >= d->sh.k)
        return s_tree_emit(d);
    s_req_t *q = &d->rq;
    for (int j = 0; j < n_pick; j++) {
        q->tok[j] = d->nodes[pick[j]].tok;
        q->par[j] = d->nodes[d->nodes[pick[j]].par].slot;
        d->cached[len + j] = q->tok[j];
    }
    q->n = n_pick;
    q->tree = 1;
    q->logits = d->tree_logits;
    q->n_logits = n_pick;
    q->steps = 0;
    const int rc = s_post(d);
    if (rc != 0)
        return rc; // posted (1) or failed (-1)
    s_tree_take(d);
    return 1;
}

int draft_seq_step(draft_seq_t *d)
{
    const int have = s_taken(d);
    if (have < 0) {
        d->phase = S_IDLE;
        return -1;
    }
    switch (d->phase) {
    case S_CATCHUP: {
        const int fed = d->sh.guess || d->sh.extra >= 0;
        if (!have) {
            int posted = 0;
            const int n = s_catch_up(d, d->ctx, d->n_ctx, fed, &posted);
            if (n < 0) {
                d->phase = S_IDLE;
                return -1;
            }
            d->catch_n = n;
            if (posted)
                return 1;
        }
        d->t_catch = sw_now_ms();
        s_history(d);
        if (d->sh.guess) {
            /* The bonus token of a round whose drafts were all accepted,
             * as the draft model sees it. */
            d->feed = sw_sampler_argmax(d->s, d->logits);
            if (d->feed < 0) {
                d->phase = S_IDLE;
                return -1;
            }
            d->out->guess = d->feed;
        }
        if (d->feed >= 0) {
            sw_sampler_accept(d->s, d->feed);
            d->phase = S_FEED;
            return 1;
        }
        break;
    }
    case S_FEED:
        if (!have) {
            const int rc = s_feed(d, &d->feed, 1, 0, 1);
            if (rc < 0) {
                d->phase = S_IDLE;
                return -1;
            }
            if (rc > 0)
                return 1;
        }
        break;
    case S_CHAIN:
    case S_TREE: {
        const int rc = d->phase == S_CHAIN ? s_chain_step(d, have) : s_tree_step(d, have);
        if (rc < 0)
            d->phase = S_IDLE;
        return rc;
    }
    default:
        return 0;
    }
    /* Caught up: the logits of the token the drafts follow are there. */
    sw_rng_seed(sw_sampler_rng(d->s), s_pos_seed(d->params.seed, d->n_eff));
    d->n_nodes = 0;
    d->phase = d->sh.max_nodes > 1 ? S_TREE : S_CHAIN;
    return 1;
}

int draft_seq_propose(draft_seq_t *d, const int32_t *ctx, int n_ctx, int k, float p_min,
                      int32_t *out, sw_draft_q_t *q, int *q_used)
{
    *q_used = 0;
    static const draft_shape_t zero;
    draft_shape_t sh = zero;
    sh.k = k;
    sh.p_min = p_min;
    sh.extra = -1;
    sw_proposal_t *p = malloc(sizeof *p);
    if (!p)
        return -1;
    int rc = draft_seq_start(d, ctx, n_ctx, &sh, p);
    while (rc > 0)
        rc = draft_seq_step(d);
    int n = rc < 0 ? -1 : p->n;
    for (int i = 0; i < n; i++) {
        out[i] = p->tokens[i];
        q[i] = p->q[i];
    }
    *q_used = n > 0 && p->q_used;
    free(p);
    return n;
}
