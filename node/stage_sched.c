/*
 * stage_sched.c - the stage's part of the fair queue (node/sched.h): which
 * of the Forwards waiting in the stage's queue run in the next batch.
 *
 * A session's Forwards run in the order they came (each depends on the
 * cache the one before left), so the candidates are each session's oldest
 * waiting Forward. Their flows: the sender, the key of the node that sent
 * the session (its creator: the head at the first stage, the stage before
 * at a later one), the session's head under it (route[0] of its first
 * Forward, node_session_t.owner, which the route check holds to a key-bound
 * head), the client under that (the id the head put in the Forward,
 * fair_client), the tenant under that, then the session; so the heads share
 * a stage fairly, each head's share is shared between its clients and their
 * tenants, no head grows its share by saying more client ids, and a node
 * that names another's head in its Forwards stays within its own key's
 * share. A Forward of a prompt (the
 * prefill's pieces) runs in a chunk of its own in the engine: it starts a batch or waits.
 *
 * A prefill's later pieces continue its prompt: where the last piece ended
 * (prefill_open, prefill_next, noted by node_stage_timing) says that the
 * next one is evaluated with its windows counted from the prompt's start, as
 * the head evaluated it and as one process would. The tail acknowledges each
 * piece that more follow with a PrefillAck (stage.c), by which the head paces
 * the prompt's pieces.
 */
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "node.h"
#include "sched.h"
#include "stage.h"

int node_stage_busy(const node_t *n)
{
    return n->n_batch > 0;
}

int node_stage_prefill_cont(const node_session_t *s, const sw_msg_forward_t *f)
{
    return s && f->n_draft == 0 && f->kv_keep > 0 && s->prefill_open &&
           f->kv_keep == s->prefill_next && f->start_pos == f->kv_keep;
}

/* The flows of waiting Forward b (decoded as f) in the stage's fair queue. */
static void s_flows(node_t *n, node_fwd_t *b, const sw_msg_forward_t *f)
{
    const node_session_t *s = b->s;
    node_sched_flows(n->sched, (node_sched_name_t){s->by, strnlen(s->by, sizeof s->by)},
                     (node_sched_name_t){s->owner, strnlen(s->owner, sizeof s->owner)},
                     (node_sched_name_t){&f->fair_client, 8},
                     (node_sched_name_t){&f->fair_tenant, 8}, f->session_id, b->flow);
}

int node_stage_pick(node_t *n, int *sel, char *done)
{
    if (!n->sched && !(n->sched = node_sched_new())) {
        /* out of memory: the oldest Forward alone */
        SW_WARN("out of memory for the stage's fair queue: running the oldest forward");
        sel[0] = 0;
        return n->n_batch > 0;
    }
    node_sched_item_t items[NODE_MAX_BATCH];
    int at[NODE_MAX_BATCH], k = 0;
    for (int i = 0; i < n->n_batch; i++) {
        node_fwd_t *b = &n->batch[i];
        sw_msg_t d;
        if (!b->s || sw_codec_decode(&b->msg, SW_MSG_FORWARD, &d, NULL, 0) != 0) {
            done[i] = 1; // its session was freed while it waited
            continue;
        }
        int first = 1;
        for (int j = 0; j < i && first; j++)
            first = n->batch[j].s != b->s || done[j];
        if (!first)
            continue; // the session's earlier Forward runs first
        const sw_msg_forward_t *f = &d.forward;
        s_flows(n, b, f);
        memcpy(items[k].flow, b->flow, sizeof items[k].flow);
        items[k].rows = (int)f->n_rows;
        items[k].alone = f->n_draft == 0 &&
                         (f->kv_keep == 0 || f->prefix_len > 0 || node_stage_prefill_cont(b->s, f));
        at[k++] = i;
    }
    const int cap = n->o.max_batch_rows < n->rows_cap ? n->o.max_batch_rows : n->rows_cap;
    const int m = node_sched_pick(n->sched, items, k, cap, sel);
    if (n->stat_batches % 100 == 0)
        SW_DEBUG("queue: %d forwards (%.1f MiB) of %d sessions waiting", n->n_batch,
                 (double)n->queue_bytes / (1 << 20), k);
    for (int j = 0; j < m; j++)
        sel[j] = at[sel[j]];
    return m;
}

void node_stage_ran(node_t *n, node_fwd_t *const *live, int nl, double ms)
{
    int all = 0;
    for (int i = 0; i < nl; i++) {
        sw_msg_t d;
        if (sw_codec_decode(&live[i]->msg, SW_MSG_FORWARD, &d, NULL, 0) == 0)
            all += (int)d.forward.n_rows;
    }
    for (int i = 0; i < nl && all > 0 && n->sched; i++) {
        sw_msg_t d;
        if (sw_codec_decode(&live[i]->msg, SW_MSG_FORWARD, &d, NULL, 0) != 0)
            continue;
        node_sched_item_t it;
        memcpy(it.flow, live[i]->flow, sizeof it.flow);
        node_sched_charge(n->sched, &it, ms * d.forward.n_rows / all);
    }
}
