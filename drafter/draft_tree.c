/*
 * draft_tree.c - token-tree proposals (draft_seq_start with max_nodes > 1):
 * each step feeds the best nodes not yet expanded in one forward call and
 * adds the draft model's top candidates under them; at the end the nodes
 * worth their rows form the tree, depth first with the best child first.
 */
#include "draft_model.h"

#include <math.h>
#include <string.h>

#include "draft_model_impl.h"

#define S_TREE_CHILDREN 3 // candidates taken from each expanded node

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
    const draft_node_t *par = &d->nodes[at];
    for (int j = 0; j < m && d->n_nodes < DRAFT_TREE_NODES; j++) {
        draft_node_t *c = &d->nodes[d->n_nodes++];
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
 * order with the better child first (so nodes 1..n_main are the best path).
 * Returns 0: the proposal is written (draft_seq_step then ends it). */
static int s_tree_emit(draft_seq_t *d)
{
    sw_proposal_t *o = d->out;
    int order[DRAFT_TREE_NODES], n_order;
    s_rank(d, order, &n_order);
    unsigned char in[DRAFT_TREE_NODES] = {0};
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
        const draft_node_t *x = &d->nodes[order[r]];
        const double need = d->sh.node_min ? d->sh.node_min(d->sh.ctx, 1 + count) : 0;
        if (in[order[r]] || !in[x->par] || x->depth > d->sh.k || x->value < need)
            continue;
        in[order[r]] = 1;
        count++;
    }
    /* Depth first; a node's children in rank order. */
    int rank_of[DRAFT_TREE_NODES];
    for (int r = 0; r < n_order; r++)
        rank_of[order[r]] = r;
    int stack[DRAFT_TREE_NODES], sp = 0, idx_of[DRAFT_TREE_NODES];
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
        int kids[DRAFT_TREE_NODES], nk = 0;
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
    return 0;
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

/* One tree step: feeds the best nodes worth expanding (up to DRAFT_TREE_WIDTH,
 * in one forward call, each under its parent's slot) and adds their
 * candidates; when none is worth it, or after k steps, writes the tree
 * (and returns 0).
 * have: the rows posted by the last step ran (their candidates come first). */
int draft_tree_step(draft_seq_t *d, int have)
{
    if (have)
        s_tree_take(d);
    if (d->n_nodes == 0) { // the root: the token the drafts follow, fed by now
        draft_node_t *r = &d->nodes[d->n_nodes++];
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
    int order[DRAFT_TREE_NODES], n_order, n_pick = 0;
    int *pick = d->pick;
    s_rank(d, order, &n_order);
    const int len = sw_kv_len(d->kv);
    /* The main path grows by one node per step, as a chain would (the
     * confidence stop ends it); the other row of a step goes to the best
     * other node worth expanding. */
    for (int i = 1; i < d->n_nodes; i++) {
        const draft_node_t *x = &d->nodes[i];
        if (x->main && x->slot < 0 && x->depth < d->sh.k && len < d->cap &&
            d->n_nodes + S_TREE_CHILDREN <= DRAFT_TREE_NODES &&
            !(d->sh.p_min > 0 && x->q < d->sh.p_min && x->depth > 1))
            pick[n_pick++] = i;
    }
    for (int r = 0; r < n_order && r < d->sh.max_nodes && n_pick < DRAFT_TREE_WIDTH; r++) {
        const draft_node_t *x = &d->nodes[order[r]];
        if (x->slot < 0 && !x->main && x->depth < d->sh.k && x->value >= d->sh.expand_min &&
            d->nodes[x->par].slot >= 0 && len + n_pick < d->cap &&
            d->n_nodes + S_TREE_CHILDREN <= DRAFT_TREE_NODES)
            pick[n_pick++] = order[r];
    }
    d->n_pick = n_pick;
    if (n_pick == 0 || d->tree_steps >= d->sh.k)
        return s_tree_emit(d);
    draft_req_t *q = &d->rq;
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
    const int rc = draft_req_post(d);
    if (rc != 0)
        return rc; // posted (1) or failed (-1)
    s_tree_take(d);
    return 1;
}
