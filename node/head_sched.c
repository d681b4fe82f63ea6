/*
 * head_sched.c - the head's part of the fair queue (node/sched.h): each
 * session's flows (the head itself, the client key, its tenant under that
 * key, the session), the
 * pieces a prompt is cut into, which of the sessions with rows to send run
 * in this pass's batch and in what order, and what each is charged after.
 *
 * The pieces. A prompt's rows leave the head in pieces of about
 * --prefill-pieces (NODE_SCHED_PIECE_ALONE) one-row forwards of compute
 * while the prefill is the only session (so it loses about a quarter of its
 * speed to reading the weights once per piece, and a request that arrives
 * meanwhile waits about that long at each stage) and about
 * NODE_SCHED_PIECE_SHARED while other sessions run or wait (a round of
 * another session that arrives behind a piece waits about two rounds' time
 * at each stage). The tail acknowledges every piece but the last (a
 * PrefillAck, which also tells the head that a slow round moves); a session
 * has at most route.n pieces unacknowledged, or as many as the head computes
 * in the least time a piece took to be acknowledged (the route's round trip
 * and the stages' work on one piece; NODE_SCHED_WINDOW_MAX at most), so the
 * stages' queues never fill with one prompt's pieces and a round of another
 * session is read and run at once, while the WAN's latency is not paid once
 * per piece. The one-row forward (w_ms) is measured at start and follows
 * the head's one-row batches; the cost of a row, from the session's previous
 * piece. The piece itself is cut by node/chunk.c (head_chunk_rows): never
 * over the bytes a Forward may carry, never past a prompt window's end,
 * NODE_CHUNK_START_ROWS rows or more at a window's start and no larger than
 * the ramp of small first and last pieces, so every stage computes each row
 * as the whole window would (engine/include/model.h: windows counted from
 * the prompt's start). Models whose window arithmetic depends on how it is
 * cut (a mixture of experts counts a window's rows per expert; a GPU's
 * long-prompt path) and routes of one stage take no fair pieces (the ramp
 * alone, or whole windows); neither does --prefill-pieces 0.
 *
 * Calls nothing of the other head files (head_impl.h: the order of calls).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "head_impl.h"
#include "log.h"
#include "sched.h"

#define S_W_PROBES 8      // one-row forwards timed at start at most (the first warms up) ...
#define S_W_PROBE_MS 1000 // ... and for about this long at most

/* Times a one-row forward of the head's layers on a scratch cache: the
 * least of those after a first one (ms: what the weights' reading costs
 * on a quiet machine), or 0 when it failed. */
static double s_probe_w(node_t *n)
{
    node_head_t *h = n->head;
    sw_kv_t *kv = sw_kv_new(n->model, 8);
    if (!kv)
        return 0;
    double best = 0;
    const int32_t tok = 0;
    const double start = sw_now_ms();
    for (int i = 0; i < S_W_PROBES && (i < 2 || sw_now_ms() - start < S_W_PROBE_MS); i++) {
        char err[256] = "";
        const int last = sw_model_is_last(n->model);
        sw_forward_t f = {.n = 1,
                          .tokens = &tok,
                          .out_hidden = last ? NULL : h->bout,
                          .logits = last ? h->logits : NULL,
                          .n_logits = last ? 1 : 0};
        const double t0 = sw_now_ms();
        if (sw_kv_truncate(kv, 0) != 0 || sw_model_forward(n->model, kv, &f, err, sizeof err) != 0)
            break;
        const double ms = sw_now_ms() - t0;
        if (i > 0 && (best == 0 || ms < best))
            best = ms;
    }
    sw_kv_free(&kv);
    return best;
}

int head_sched_init(node_t *n, char *err, size_t err_len)
{
    node_head_t *h = n->head;
    h->sched = node_sched_new();
    if (!h->sched) {
        snprintf(err, err_len, "out of memory for the scheduler");
        return -1;
    }
    /* Pieces only where a window cut into them computes what it computes whole:
     * sw_prefix_align says the smallest cut with the whole window's bits. */
    h->pieces = n->o.prefill_pieces && sw_prefix_align(n->model) < SW_MODEL_PROMPT_WINDOW;
    if (h->pieces)
        h->w_ms = s_probe_w(n);
    if (h->pieces)
        SW_INFO("prompts: in pieces of about %d one-row forwards (%.1f ms each), " SW_STR(
                    NODE_SCHED_PIECE_SHARED) " while other sessions run (routes with a GPU "
                                             "stage: whole windows)",
                n->o.prefill_pieces, h->w_ms);
    else
        SW_INFO("prompts: in chunks sized by bytes, windows of at most " SW_STR(
                    SW_WIRE_MAX_ROWS) " rows%s",
                n->o.prefill_pieces ? " (this model's windows are not cut: a mixture of experts "
                                      "or a GPU)"
                                    : "");
    return 0;
}

void head_sched_free(node_head_t *h)
{
    node_sched_free(&h->sched);
}

void head_sched_open(node_head_t *h, head_sess_t *s, const char *tenant)
{
    snprintf(s->tenant, sizeof s->tenant, "%s", tenant ? tenant : "");
    const char *who = head_sess_who(s);
    /* the head is the one sender and the one head of its own queue */
    const node_sched_name_t self = {"", 0};
    node_sched_flows(h->sched, self, self, (node_sched_name_t){who, strlen(who)},
                     (node_sched_name_t){s->tenant, strlen(s->tenant)}, s->id, s->flow);
    s->piece_rows = 0;
    s->piece_ms = 0;
    s->ack_lat_ms = 0;
}

/* 1 when the rows s sends next are a piece of its prompt (the prefill round). */
static int s_prompt_rows(const head_sess_t *s)
{
    return s->send_r.kv_keep == 0 && s->send_r.n_draft == 0 && s->route.n > 1;
}

int head_sched_rows(const node_t *n, const head_sess_t *s)
{
    const node_head_t *h = n->head;
    if (!h->pieces || !s->route.cut_free || !s_prompt_rows(s))
        return 0;
    const int others = h->n_active > 1 || h->q_len > 0;
    return node_sched_piece_rows(h->w_ms, s->piece_rows, s->piece_ms,
                                 others && n->o.prefill_pieces > NODE_SCHED_PIECE_SHARED
                                     ? NODE_SCHED_PIECE_SHARED
                                     : n->o.prefill_pieces);
}

int head_sched_pick(node_t *n, head_sess_t *const *ready, const int *rows, int n_ready, int *pick)
{
    node_head_t *h = n->head;
    node_sched_item_t items[NODE_MAX_BATCH];
    if (n_ready > NODE_MAX_BATCH)
        n_ready = NODE_MAX_BATCH;
    for (int i = 0; i < n_ready; i++) {
        memcpy(items[i].flow, ready[i]->flow, sizeof items[i].flow);
        items[i].rows = rows[i];
        items[i].alone = s_prompt_rows(ready[i]);
    }
    const int cap = n->o.max_batch_rows < n->rows_cap ? n->o.max_batch_rows : n->rows_cap;
    return node_sched_pick(h->sched, items, n_ready, cap, pick);
}

void head_sched_ran(node_t *n, head_sess_t *const *in, const int *rows, int nb, double ms)
{
    node_head_t *h = n->head;
    int all = 0;
    for (int i = 0; i < nb; i++)
        all += rows[i];
    if (all <= 0)
        return;
    if (all == 1 && h->w_ms > 0 && !s_prompt_rows(in[0])) {
        /* a one-row round: the one-row forward as the load is now (down at once, up slowly:
         * a batch that waited for the CPU says little about the weights' reading) */
        h->w_ms = ms < h->w_ms ? ms : h->w_ms + (ms - h->w_ms) / 16;
    }
    for (int i = 0; i < nb; i++) {
        head_sess_t *s = in[i];
        node_sched_item_t it = {.rows = 0};
        memcpy(it.flow, s->flow, sizeof it.flow);
        node_sched_charge(h->sched, &it, ms * rows[i] / all);
        if (s_prompt_rows(s)) { // what the next piece's size is measured on
            s->piece_rows = rows[i];
            s->piece_ms = ms;
            s->piece_round[s->piece_at] = s->send_round; // in flight until the tail says
            s->piece_end[s->piece_at] = (uint32_t)(s->send_row + rows[i]);
            s->piece_t[s->piece_at] = sw_now_ms();
            s->piece_at = (s->piece_at + 1) % NODE_SCHED_WINDOW_MAX;
            s->t_progress = sw_now_ms();
            SW_DEBUG("session %016llx: a prompt piece of %d rows at %d in %.1f ms (batch of %d, "
                     "%d sessions; one-row forward %.1f ms)",
                     (unsigned long long)s->id, rows[i], s->send_row, ms, nb, h->n_active, h->w_ms);
        }
    }
}

/* A prompt's pieces that may be unacknowledged: route.n (one at each stage), and enough to
 * keep the head busy for the pieces' round trip (issue 33: with two, a prompt over 20 ms links
 * spent three quarters of its time waiting for acknowledgements of pieces of a few ms); the
 * round trip is the least seen, so pieces queued at a slower stage do not widen it. */
static int s_window(const head_sess_t *s)
{
    int w = s->route.n;
    if (s->ack_lat_ms > 0 && s->piece_ms > 0) {
        const double cover = s->ack_lat_ms / s->piece_ms + 1;
        if (cover > w)
            w = cover >= NODE_SCHED_WINDOW_MAX ? NODE_SCHED_WINDOW_MAX : (int)cover;
    }
    return w;
}

int head_sched_may_send(const node_t *n, const head_sess_t *s, double now)
{
    if (!n->head->pieces || !s->route.cut_free || !s_prompt_rows(s) || s->send_chunks == 0)
        return 1;
    const uint32_t acked = s->ack_round == s->send_round ? s->acked : 0;
    int out = 0; // pieces of this round sent and not acknowledged
    for (int i = 0; i < NODE_SCHED_WINDOW_MAX; i++)
        out += s->piece_round[i] == s->send_round && s->piece_end[i] > acked;
    return out < s_window(s) || now - s->t_progress > NODE_SCHED_ACK_WAIT_MS;
}

void head_sched_ack(node_t *n, head_sess_t *s, uint32_t done, double now)
{
    for (int i = 0; i < NODE_SCHED_WINDOW_MAX; i++) // the piece this acknowledges: its round trip
        if (s->piece_round[i] == s->send_round && s->piece_end[i] == done && s->piece_t[i] > 0) {
            const double lat = now - s->piece_t[i];
            if (s->ack_lat_ms <= 0 || lat < s->ack_lat_ms)
                s->ack_lat_ms = lat;
        }
    if (s->ack_round != s->send_round || done > s->acked)
        s->acked = done;
    s->ack_round = s->send_round;
    s->t_progress = now;
    n->head->busy = 1; // its next piece may go
}
