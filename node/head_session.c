/*
 * head_session.c - one session's life on the head, as a state machine driven
 * by the event loop:
 *
 *   ROUTE   admitted (head_admit.c), waiting for a peer table to build its
 *           route (head.c)
 *   RUN     rounds: the round logic of decode.c (sw_gen_t: the prefill, then
 *           the last committed token and the drafts) says what the next round
 *           carries; recover.c's state machine says whether to send it, to
 *           replay the session after a failure, or to wait. A round's rows run
 *           through this stage's layers in the head's batch (one engine call
 *           for every session with rows to send) and go to the next stage as
 *           Forwards; the Verdict commits tokens, which stream to the client
 *           (head_stream.c); a failure sends recover.c into its route wait and
 *           replay, all without stopping the other sessions
 *   LINGER  finished (done, error, Cancel, vanished client, deadline: the
 *           stages get a SessionClose in the same pass); its TokenChunks are
 *           kept a while for a Resume
 *
 * Nothing here waits for a message: the handlers (Verdict, Error) change
 * state; head_advance looks at the timers (deadline, round timeout, route
 * checks) once per pass.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "head_impl.h"
#include "log.h"
#include "placement.h"

#define S_PREFIX_OFF_MS 60000 // after a stage missed a prefix: none asked for this long

/* Frees what a session holds but its record of what it streamed. */
static void s_release(node_head_t *h, head_sess_t *s)
{
    sw_kv_free(&s->kv); // its bytes leave n->kv
    if (s->state == HEAD_ROUTE || s->state == HEAD_RUN)
        h->n_active--;
    sw_gen_free(&s->gen);
    draft_free(&s->drafter);
    sw_verifier_free(&s->ver);
    node_recover_free(&s->rec);
    free(s->spot); // closed by head_close_stages when it ran
    s->spot = NULL;
    sw_detok_free(&s->detok);
    free(s->prompt);
    s->prompt = NULL;
}

void head_forget(node_head_t *h, head_sess_t *s)
{
    s_release(h, s);
    free(s->toks);
    free(s->skip);
    free(s->chunks);
    free(s->text);
    memset(s, 0, sizeof *s);
}

void head_close_stages(node_t *n, head_sess_t *s, const char *why)
{
    head_spot_close(n, s, why);
    if (s->opened)
        head_close_route(n, &s->route, s->id, why, NULL);
}

/* Ends a running (or routing) session: the client gets the final chunk (and
 * an Error first when it failed), the stages a SessionClose; its memory
 * goes back and its chunks stay a while for a Resume. */
void head_end(node_t *n, head_sess_t *s, int finish, int code, const char *why)
{
    node_head_t *h = n->head;
    const char *tail = NULL;
    size_t tl = 0;
    if (s->detok && (finish == SW_FINISH_LENGTH || finish == SW_FINISH_EOS) &&
        sw_detok_flush(s->detok, &tail, &tl) != 0)
        tl = 0;
    if (s->gen && (finish == SW_FINISH_LENGTH || finish == SW_FINISH_EOS)) {
        head_fill_stats(s, sw_gen_stats(s->gen));
        s->stats.n_prefix_reused = (uint32_t)s->prefix_len;
    }
    s->finish = finish;
    if (finish == SW_FINISH_ERROR || finish == SW_FINISH_DEADLINE) {
        s->err_code = code;
        snprintf(s->err, sizeof s->err, "%s", why);
        SW_WARN("request '%s' from %s failed: %s (%s)", s->rid, s->client, why,
                sw_wire_error_code_name(code));
        head_send_error(n, s->client_addr, code, s->rid, s->id, 0, why);
    } else if (finish == SW_FINISH_CANCELLED) {
        SW_INFO("request '%s' from %s ended: %s", s->rid, s->client, why);
    } else {
        const sw_gen_stats_t *gs = sw_gen_stats(s->gen);
        SW_INFO("request '%s' done: %d tokens in %d rounds (%d of %d drafts accepted)", s->rid,
                gs->n_gen, gs->rounds, gs->accepted, gs->drafted);
    }
    if (!s->toks || head_emit(n, s, NULL, 0, tail, tl, finish) != 0)
        head_final_chunk(n, s->client_addr, s->rid, s->index_base + s->n_streamed,
                         finish); // no record to keep
    head_close_stages(n, s,
                      finish == SW_FINISH_CANCELLED  ? "cancelled"
                      : finish == SW_FINISH_ERROR    ? "failed"
                      : finish == SW_FINISH_DEADLINE ? "deadline"
                                                     : "done");
    s_release(h, s);
    s->state = HEAD_LINGER;
    s->t_end = sw_now_ms();
    h->busy = 1; // a slot is free: the queue may move
}

/* Commits a verdict of the current round and moves the session on. */
static void s_commit(node_t *n, head_sess_t *s, sw_verdict_t *v, double now)
{
    /* The round's time is its critical path (the head's and each stage's parts, from the
     * verdict's timing entries) plus the network; what the nodes computed beside it ran
     * overlapped (docs/protocol.md, "Timing"). */
    const double wall = now - s->t_round;
    const double crit =
        (s->route.n == 1 ? s->round_head_ms : s->round_head_crit) + s->round_crit_ms;
    const double net = wall > crit ? wall - crit : 0;
    v->compute_ms = s->round_head_ms + s->round_stage_ms;
    s->head_ms += s->round_head_ms;
    s->stage_ms += s->round_stage_ms;
    s->net_ms += net;
    s->overlap_ms += s->round_head_ms + s->round_stage_ms + net - wall;
    s->round_head_ms = s->round_stage_ms = s->round_head_crit = s->round_crit_ms = 0;
    s->logged = 0;
    char err[256] = "";
    const int32_t *toks;
    int nt;
    if (sw_gen_commit(s->gen, v, &toks, &nt, err, sizeof err) != 0) {
        head_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL, err);
        return;
    }
    if (s->skip_bad[0]) { // a failover that could not give the client's tokens again
        head_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL, s->skip_bad);
        return;
    }
    if (sw_gen_done(s->gen)) {
        int n_out = 0;
        const int32_t *out = sw_gen_output(s->gen, &n_out);
        head_end(n, s,
                 n_out > 0 && sw_tokenizer_is_eog(n->head->tok, out[n_out - 1]) ? SW_FINISH_EOS
                                                                                : SW_FINISH_LENGTH,
                 0, "");
        return;
    }
    n->head->busy = 1;
}

/* A slow round is not a lost one: the timeout and the route check count from the last sign
 * that the round, or the replay's window, moves (docs/fault-tolerance.md, "Slow is not gone"). */
static void s_moves(node_t *n, head_sess_t *s, double now)
{
    s->t_limit = now + n->o.round_timeout_ms;
    s->t_check = now + SW_NODE_ROUTE_CHECK_MS;
}

/* A verdict or PrefillAck of a replayed round (round, not the one sent last): while the
 * replay's window (stalled: as it was before the message) or the current round behind it
 * waits, the replay moves: its round timeout and recovery's give-up clock start again. */
static void s_replayed_moves(node_t *n, head_sess_t *s, uint64_t round, int stalled, double now)
{
    if ((stalled || node_recover_waiting(s->rec)) && node_recover_replaying(s->rec) &&
        round >= s->replay_round0) {
        node_recover_progress(s->rec, now);
        s_moves(n, s, now); // the window's rounds go through: slow is not gone
    }
}

void node_head_verdict(node_t *n, sw_wire_msg_t *msg)
{
    node_head_t *h = n->head;
    sw_msg_t d;
    if (!h || sw_codec_decode(msg, SW_MSG_VERDICT, &d, NULL, 0) != 0)
        return;
    const sw_msg_verdict_t *vd = &d.verdict;
    head_sess_t *s = NULL;
    for (int i = 0; i < h->n_slots && !s; i++)
        if (h->sess[i].state == HEAD_RUN && h->sess[i].id == vd->session_id)
            s = &h->sess[i];
    if (!s) {
        head_spot_verdict(n, msg->peer, vd, sw_now_ms()); // a shadow's (spot checks), or late
        return;                                           // a late verdict of a session that ended
    }
    if (strcmp(msg->peer, s->route.names[s->route.n - 1]) != 0) {
        SW_WARN("ignored a verdict from %s: only the route's tail %s may send one", msg->peer,
                s->route.names[s->route.n - 1]);
        return;
    }
    const double now = sw_now_ms();
    const int stalled = node_recover_stalled(s->rec);
    /* not to commit: a replayed round's, or a failed attempt's */
    if (!node_recover_verdict(s->rec, vd->round, now)) {
        s_replayed_moves(n, s, vd->round, stalled, now);
        return;
    }
    head_proven_add(h, &s->route, now);
    s->refusal_rerouted = 0;
    if (vd->n_tokens < 1 || vd->n_tokens > (uint32_t)s->send_r.n_draft + 1) {
        head_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL,
                 "the tail sent a verdict that does not fit the round");
        return;
    }
    sw_verdict_t v;
    memset(&v, 0, sizeof v);
    v.n_commit = (int)vd->n_tokens;
    v.logits_digest = vd->logits_digest;
    for (uint32_t i = 0; i < vd->n_tokens; i++)
        v.tokens[i] = (int32_t)vd->tokens[i];
    /* A tree round's accepted path (sw_gen_commit checks it against the tree). */
    if (s->send_r.parent && vd->n_tokens > 1 && vd->n_path != vd->n_tokens - 1) {
        head_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL,
                 "the tail sent a tree round's verdict without its path");
        return;
    }
    for (uint32_t i = 0; i < vd->n_path; i++)
        v.path[i] = (int32_t)vd->path[i];
    head_spot_main(n, s, vd, now);
    /* The timing list starts with the head's own entry: count only the later
     * stages here (the head's time is round_head_ms). */
    double later_ms = 0;
    for (uint32_t i = 0; i < vd->n_timing; i++) {
        const double ms = vd->timing[i].compute_us / 1e3, cr = vd->timing[i].critical_us / 1e3;
        if (i == 0 && !strcmp(s->route.names[0], vd->timing[i].name))
            s->round_head_crit = cr; // the head's part, as the chain of chunks carried it
        for (int st = 1; st < s->route.n; st++)
            if (!strcmp(s->route.names[st], vd->timing[i].name)) {
                s->stage_total[st] += ms;
                s->crit_total[st] += cr;
                s->round_stage_ms += ms;
                s->round_crit_ms += cr;
                later_ms += ms;
                /* a decoding round: against what the stage's probe claimed (placement) */
                const int rows =
                    vd->timing[i].batch_rows ? (int)vd->timing[i].batch_rows : s->send_r.n;
                if (s->send_r.kv_keep > 0 && s->send_r.n <= SW_MAX_DRAFT + 1 &&
                    node_place_observe(n, s->route.names[st], rows, ms, now))
                    head_suspect_add(h, s->route.names[st], now);
            }
    }
    /* What the round cost the batches it shared (load-adaptive speculation,
     * drafter/load.h): the last stage says its batch. */
    const sw_msg_timing_t *lt = vd->n_timing ? &vd->timing[vd->n_timing - 1] : NULL;
    const int lrows = lt ? (int)lt->batch_rows : 0, lrounds = lt ? (int)lt->batch_rounds : 0;
    draft_load_verdict(&h->load, (int)vd->n_tokens, later_ms, lrows, lrounds, now);
    draft_observe_batch(s->drafter, s->send_r.n, s->round_head_rows, lrows);
    s_commit(n, s, &v, now);
}

void node_head_prefill_ack(node_t *n, sw_wire_msg_t *msg)
{
    node_head_t *h = n->head;
    sw_msg_t d;
    if (!h || sw_codec_decode(msg, SW_MSG_PREFILL_ACK, &d, NULL, 0) != 0)
        return;
    const sw_msg_prefill_ack_t *a = &d.prefill_ack;
    head_sess_t *s = NULL;
    for (int i = 0; i < h->n_slots && !s; i++)
        if (h->sess[i].state == HEAD_RUN && h->sess[i].id == a->session_id)
            s = &h->sess[i];
    /* only the route's tail speaks for the round in flight (a shadow's or a stale ack: none) */
    if (!s || s->route.n < 2 || strcmp(msg->peer, s->route.names[s->route.n - 1]) != 0) {
        SW_DEBUG("prefill ack of session %016llx round %llu from %s: not its route's tail",
                 (unsigned long long)a->session_id, (unsigned long long)a->round, msg->peer);
        return;
    }
    const double now = sw_now_ms();
    if (a->round != s->send_round) { // the replayed prompt's, or a stale one
        s_replayed_moves(n, s, a->round, node_recover_stalled(s->rec), now);
        return;
    }
    if (s->send_r.kv_keep == 0 && a->done <= (uint32_t)s->n_prompt)
        s->prompt_finished = (int)a->done;
    head_sched_ack(n, s, a->done, now); // the prompt's next pieces may go (head_sched.c)
    node_recover_progress(s->rec, now); // a replay that moves has not failed yet
    SW_DEBUG("prefill ack of session %016llx: %u positions through every stage (%s)",
             (unsigned long long)s->id, a->done,
             node_recover_waiting(s->rec) ? "the round's deadline moves" : "still sending");
    if (node_recover_waiting(s->rec) || node_recover_stalled(s->rec))
        s_moves(n, s, now);
}

int head_leave_relay(node_t *n, int link, const char *why, double now)
{
    char text[240];
    snprintf(text, sizeof text, "%s; other relays are live", why);
    if (!sw_peer_leave(n->peer, link, text))
        return 0;
    node_head_t *h = n->head;
    for (int i = 0; i < h->n_slots; i++) {
        head_sess_t *s = &h->sess[i];
        if (s->state == HEAD_RUN && s->send_idx >= 0 && !node_recover_failing(s->rec))
            node_recover_relay_lost(s->rec, now, "the head left a relay while the round went out");
    }
    return 1;
}

void node_head_error(node_t *n, sw_wire_msg_t *msg)
{
    node_head_t *h = n->head;
    sw_msg_t d;
    if (sw_codec_decode(msg, SW_MSG_ERROR, &d, NULL, 0) != 0)
        return;
    const sw_msg_error_t *e = &d.error;
    const double now = sw_now_ms();
    const char *dest = e->dest;
    const int code = e->code;
    const int from_relay = !strcmp(msg->peer, SW_WIRE_RELAY_NAME);
    const int retry = code == SW_ERROR_UNKNOWN_DEST || code == SW_ERROR_DEST_GONE ||
                      code == SW_ERROR_DEST_BUSY || code == SW_ERROR_NOT_ANNOUNCED ||
                      code == SW_ERROR_UNKNOWN_SESSION;
    if (from_relay && dest[0]) {
        /* A message of ours did not reach dest: a stage of some route, or a client. */
        head_spot_error(n, 0, dest, NULL);
        char why[160];
        snprintf(why, sizeof why, "stage '%s' left the pipeline (the relay cannot reach it)", dest);
        int on_route = 0;
        for (int i = 0; i < h->n_slots; i++)
            on_route |= h->sess[i].state == HEAD_RUN && head_route_has(&h->sess[i].route, dest);
        /* several relays: another may still reach it (the rounds go again by that one) */
        const int left = on_route && head_leave_relay(n, msg->link, why, now);
        for (int i = 0; i < h->n_slots; i++) {
            head_sess_t *s = &h->sess[i];
            if (s->state != HEAD_RUN)
                continue;
            if (!left && head_route_has(&s->route, dest))
                node_recover_failed(s->rec, now, why);
            if (!strcmp(s->client, dest) && !s->client_missing) {
                s->client_missing = now; // judged with the next peer tables
                head_want_status(h);
            }
        }
        return;
    }
    if (!from_relay && e->session_id && head_spot_error(n, e->session_id, NULL, msg->peer)) {
        SW_DEBUG("a shadow session's error from %s: %s", msg->peer, e->message);
        return;
    }
    if (!from_relay && e->session_id) {
        for (int i = 0; i < h->n_slots; i++) {
            head_sess_t *s = &h->sess[i];
            if (s->state != HEAD_RUN || s->id != e->session_id ||
                !head_route_has(&s->route, msg->peer))
                continue;
            if (strstr(e->message, "prompt prefix is not in its prefix cache")) {
                h->prefix_off_until = now + S_PREFIX_OFF_MS; // the replay sends it whole
                SW_INFO("session %016llx: %s; no prefix is asked for for %d s",
                        (unsigned long long)s->id, e->message, S_PREFIX_OFF_MS / 1000);
            }
            /* A stage that refuses the round (ERR_BAD_REQUEST) may have restarted under its
             * name with another model file or range since the peer table the route came from
             * (a new request takes a route up to HEAD_ROUTE_FRESH_MS old): routed again once,
             * from a table asked after the refusal, which passes over such a stage; the same
             * refusal again before a verdict ends the request. */
            const int reroute = code == SW_ERROR_BAD_REQUEST && !s->refusal_rerouted;
            if (retry || reroute) {
                s->refusal_rerouted |= reroute;
                node_recover_failed(s->rec, now, e->message);
            } else {
                head_end(n, s, SW_FINISH_ERROR, code, e->message);
            }
            return;
        }
    }
    SW_DEBUG("error from %s: %s (%s)", msg->peer, e->message, sw_wire_error_code_name(code));
}

/* The head cuts a prompt into Forwards that never cross a prompt window's end
 * (SW_WIRE_MAX_ROWS rows from the prompt's start); a stage evaluates each as
 * part of its window, which is what a single process does only when the two
 * lengths agree. */
_Static_assert(SW_WIRE_MAX_ROWS == SW_MODEL_PROMPT_WINDOW,
               "a prompt Forward must be one engine prompt window");

int head_chunk_rows(const node_t *n, const head_sess_t *s)
{
    const sw_round_t *r = &s->send_r;
    if (s->route.n == 1)
        return r->n - s->send_row; // the head holds every layer: the round at once, as alone
    /* A mixture of experts counts a window's rows per expert, and a GPU's prompt arithmetic
     * depends on the cut: on such a route (route.cut_free 0) windows go whole. A prompt that
     * shares the pipeline goes in the fair queue's pieces (head_sched.c). */
    return node_chunk_rows(s->send_row, r->n - s->send_row, s->send_chunks, (uint32_t)n->hp->n_embd,
                           r->kv_keep == 0 && r->n_draft == 0 && n->hp->n_expert == 0 &&
                               s->route.cut_free,
                           head_sched_rows(n, s));
}

/* Sends one chunk of s's round (its rows just ran through this stage's
 * layers into hidden) to the next stage. 0, -1 when the relay would not take
 * it (recovery may help), or -2 with why filled when the message itself was
 * refused before it went (too large, malformed: sending it again cannot help). */
static int s_forward(node_t *n, head_sess_t *s, const float *hidden, int row0, int rows,
                     double head_ms, char *why, size_t why_len)
{
    const int E = n->hp->n_embd;
    const sw_round_t *r = &s->send_r;
    const int last_chunk = row0 + rows == r->n;
    uint32_t toks[SW_WIRE_MAX_ROWS], drafts[SW_MAX_DRAFT], parents[SW_MAX_DRAFT],
        kv_path[SW_MAX_DRAFT];
    float probs[SW_MAX_DRAFT];
    sw_msg_t msg = {.type = SW_MSG_FORWARD};
    sw_msg_forward_t *f = &msg.forward;
    for (int i = 0; i < rows; i++)
        toks[i] = (uint32_t)r->tokens[row0 + i];
    for (int i = 0; i < r->n_draft; i++) {
        drafts[i] = (uint32_t)r->tokens[r->n - r->n_draft + i];
        parents[i] = r->parent ? (uint32_t)r->parent[i] : 0;
        if (r->q) {
            probs[i] = r->q[i].q_tok;
            f->dists[i] = (sw_msg_dist_t){0, NULL, NULL};
            if (r->q[i].n > 0 && r->q[i].ids)
                f->dists[i] = (sw_msg_dist_t){(uint32_t)r->q[i].n, (const uint32_t *)r->q[i].ids,
                                              r->q[i].vals};
        }
    }
    /* a prefill's hidden states may travel narrower (--prefill-dtype, not bit-exact) */
    const sw_dtype_t dtype = r->kv_keep == 0 && r->n_draft == 0 ? n->o.prefill_dtype : n->o.dtype;
    f->payload = sw_codec_hidden_pack(dtype, hidden, n->wire_buf, (size_t)rows * E);
    f->session_id = s->id;
    f->round = s->send_round;
    f->start_pos = f->kv_keep = (uint32_t)(r->kv_keep + row0);
    f->n_rows = (uint32_t)rows;
    f->n_tokens = (uint32_t)rows;
    f->tokens = toks;
    f->has_sampling = 1;
    f->sampling = s->sp;
    if (last_chunk && r->n_draft) {
        f->n_draft = (uint32_t)r->n_draft;
        f->draft_tokens = drafts;
        if (r->parent)
            f->draft_parents = parents;
        if (r->q) {
            f->draft_probs = probs;
            f->n_dists = (uint32_t)r->n_draft;
        }
    }
    f->dtype = dtype;
    f->hidden = (uint32_t)E;
    f->layer_begin = (uint32_t)sw_model_layer_end(n->model);
    f->n_route = (uint32_t)s->route.n;
    for (int i = 0; i < s->route.n; i++)
        f->route[i] = s->route.names[i];
    f->hop = 1;
    f->reply_to = s->route.names[0];
    f->prefill_more = !last_chunk;
    /* the head's entry: its compute (the last chunk: the round's, every chunk) and its part of
     * the round's critical path, from the round's first row to this chunk */
    f->n_timing = 1;
    f->timing[0] = (sw_msg_timing_t){.name = s->route.names[0],
                                     .compute_us = node_us(last_chunk ? s->round_head_ms : head_ms),
                                     .critical_us = node_us(sw_now_ms() - s->t_round)};
    f->n_ctx = (uint32_t)s->n_ctx;
    f->fair_client = s->flow[2]; // the stages share their compute per key and tenant too
    f->fair_tenant = s->flow[3];
    if (row0 > 0 && row0 == s->prefix_len && r->kv_keep == 0) {
        /* the prompt's first row0 positions come from every stage's prefix cache */
        f->prefix_len = (uint32_t)row0;
        f->prefix_tokens = (const uint32_t *)s->prompt; // token ids, checked at admission
    }
    if (row0 == 0 && r->n_kv_path) { // the previous tree round's path, kept before kv_keep
        for (int j = 0; j < r->n_kv_path; j++)
            kv_path[j] = (uint32_t)r->kv_path[j];
        f->kv_path_from = (uint32_t)r->kv_path_from;
        f->n_kv_path = (uint32_t)r->n_kv_path;
        f->kv_path = kv_path;
    }
    f->payload_len = (size_t)rows * E * sw_wire_dtype_size(f->dtype);
    if (f->payload_len > SW_WIRE_MAX_PAYLOAD) { // head_chunk_rows keeps this from happening
        snprintf(why, why_len,
                 "a forward of %d rows x %d x %zu B = %zu bytes exceeds the payload limit of %u "
                 "bytes (SW_WIRE_MAX_PAYLOAD): not sent",
                 rows, E, sw_wire_dtype_size(f->dtype), f->payload_len, SW_WIRE_MAX_PAYLOAD);
        return -2;
    }
    s->opened = 1;
    const int rc = sw_peer_send_msg(n->peer, s->route.names[1], &msg);
    if (rc == SW_WIRE_EMALFORMED) {
        snprintf(why, why_len,
                 "the round's forward to '%s' was refused before it went (see the "
                 "node's log)",
                 s->route.names[1]);
        return -2;
    }
    if (rc != 0)
        return -1;
    head_spot_sent(n, s, &msg, last_chunk); // and to the shadow routes (spot checks)
    return 0;
}

/* ---- prefix cache (engine/include/prefix.h) ------------------------------------------------ */

void head_kv_room(node_t *n, size_t need)
{
    if (!n->prefix || n->o.kv_bytes <= 0)
        return;
    const size_t cap = (size_t)n->o.kv_bytes, used = (size_t)n->kv.used;
    sw_prefix_evict(n->prefix, used + need < cap ? cap - used - need : 0);
}

/* The namespace of the operator's public prefix (--public-prefix): no
 * tenant's equals it (head_prefix_ns: "tenant:KEY[/TENANT]" with keys, ""
 * or "/TENANT" without). */
#define S_PUBLIC_NS "public:"

int node_head_public_prefix(node_t *n, char *err, size_t err_len)
{
    node_head_t *h = n->head;
    const char *path = n->o.public_prefix;
    if (!path)
        return 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_len, "--public-prefix %s: cannot open it: %s", path, strerror(errno));
        return -1;
    }
    char *text = malloc(HEAD_PUBLIC_PREFIX_MAX + 2);
    const size_t len = text ? fread(text, 1, HEAD_PUBLIC_PREFIX_MAX + 1, f) : 0;
    const int bad = ferror(f);
    fclose(f);
    if (!text || bad || len == 0 || len > HEAD_PUBLIC_PREFIX_MAX) {
        snprintf(err, err_len,
                 !text  ? "--public-prefix %s: out of memory"
                 : bad  ? "--public-prefix %s: cannot read it"
                 : !len ? "--public-prefix %s: the file is empty: write the system prompt "
                          "every tenant may share into it"
                        : "--public-prefix %s: larger than " SW_STR(
                              HEAD_PUBLIC_PREFIX_MAX) " bytes: it is the start of prompts "
                                                      "(a system prompt), not a corpus",
                 path);
        free(text);
        return -1;
    }
    text[len] = 0;
    /* as a plain prompt, and as the system turn of the chat template (the
     * gateway's and `run --chat`'s prompts start so) */
    sw_chat_msg_t sys = {.role = "system", .content = text};
    char *chat = sw_chat_format_alloc(sw_model_gguf(n->model), &sys, 1, 0);
    const char *forms[2] = {text, chat};
    for (int k = 0; k < 2; k++) {
        if (forms[k] && sw_tokenize_max(h->tok, forms[k], strlen(forms[k]), 1, k == 1, n->o.n_ctx,
                                        &h->pub[k], &h->n_pub[k]) != 0) {
            h->pub[k] = NULL;
            h->n_pub[k] = 0;
        }
    }
    free(chat);
    free(text);
    if (h->n_pub[0] < SW_PREFIX_BLOCK && h->n_pub[1] < SW_PREFIX_BLOCK) {
        snprintf(err, err_len,
                 "--public-prefix %s: %d tokens, fewer than one prefix-cache block (%d): nothing "
                 "of it could be shared; leave the flag out or give the whole system prompt",
                 path, h->n_pub[0] > h->n_pub[1] ? h->n_pub[0] : h->n_pub[1], SW_PREFIX_BLOCK);
        return -1;
    }
    SW_INFO("public prefix: %s, %d tokens (%d as the chat template's system turn): every tenant "
            "may reuse it from the prefix cache",
            path, h->n_pub[0], h->n_pub[1]);
    return 0;
}

/* The positions of s's prompt that start like the public prefix (the longer
 * of its two forms), whole prefix-cache blocks only: what may come from, and
 * go to, the public namespace. */
static int s_public_len(const node_head_t *h, const head_sess_t *s)
{
    int best = 0;
    for (int k = 0; k < 2; k++) {
        int c = 0;
        while (c < h->n_pub[k] && c < s->n_prompt && h->pub[k][c] == s->prompt[c])
            c++;
        if (c > best)
            best = c;
    }
    return best / SW_PREFIX_BLOCK * SW_PREFIX_BLOCK;
}

/* The namespace of s's prompts in the head's prefix cache: its tenant (issue
 * 35, finding 3). A prefix is reused only for the client key (the
 * fingerprint the relay authenticated) that sent it,
 * so neither `prefix_reused` nor the time to the first token tells one
 * tenant what another sent. (The stages need no namespace of their own: they
 * restore only the prefix the head asks for, which the head found in the
 * tenant's namespace, and equal tokens give equal KV.) Without keys
 * (--insecure-loopback, development only) only the tenant a request names
 * tells it apart: one namespace for all requests that name none. Only the operator's public prefix
 * (--public-prefix) is shared: its blocks, and only they, are also kept in S_PUBLIC_NS, and a
 * prompt that starts with them reuses them from there (s_prefix_start). The
 * draft model's cache takes the same namespace (draft_cfg_t.prefix_ns). */
const char *head_prefix_ns(const head_sess_t *s, char *out, size_t len)
{
    /* the client key, and under it the tenant it named (the gateway's API key): a tenant shares
     * prefixes only with itself, and a key can name no tenant of another key */
    snprintf(out, len, "%s%s%s%s", s->client_key[0] ? "tenant:" : "", s->client_key,
             s->tenant[0] ? "/" : "", s->tenant);
    return out;
}

/* The prefill is about to be sent (its cache just emptied): on its first
 * attempt, the longest prefix of the prompt this head holds comes from its
 * prefix cache and the rows start after it; the Forward asks every stage to
 * take the same positions from theirs (s_forward). A replay sends the prompt
 * whole, so a stage that lost the prefix (or never held it) costs one
 * replay, never a wrong token. */
static void s_prefix_start(node_t *n, head_sess_t *s, double now)
{
    node_head_t *h = n->head;
    const int first = s->send_round == 1 && s->send_r.kv_keep == 0 && s->send_r.n_draft == 0;
    s->prefix_len = 0;
    /* A spot-checked session sends its whole prompt: its shadow routes'
     * nodes need not hold the prefix (one that does not would drop the check). */
    if (!first || !n->prefix || now < h->prefix_off_until || s->send_r.n != s->n_prompt || s->spot)
        return;
    char err[256] = "", ns[SW_PREFIX_NS_LEN];
    head_prefix_ns(s, ns, sizeof ns);
    const double t0 = sw_now_ms();
    int L = sw_prefix_find(n->prefix, ns, s->prompt, s->n_prompt, s->n_prompt - 1);
    const int pub = s_public_len(h, s);
    if (pub > L) { /* the public blocks reach further than the tenant's own */
        const int P = sw_prefix_find(n->prefix, S_PUBLIC_NS, s->prompt, s->n_prompt,
                                     pub < s->n_prompt - 1 ? pub : s->n_prompt - 1);
        if (P > L) {
            L = P;
            snprintf(ns, sizeof ns, "%s", S_PUBLIC_NS);
        }
    }
    if (!s->route.cut_free) // a GPU stage keeps prefixes of whole windows only (sw_prefix_align)
        L -= L % SW_MODEL_PROMPT_WINDOW;
    if (L > 0 && sw_prefix_restore(n->prefix, ns, s->prompt, L, s->kv, err, sizeof err) == 0) {
        s->prefix_len = L;
        s->send_row = L;
        SW_DEBUG("session %016llx: %d of %d prompt positions from the prefix cache in %.1f ms",
                 (unsigned long long)s->id, L, s->n_prompt, sw_now_ms() - t0);
    } else if (L > 0) {
        SW_WARN("prefix cache: %s", err);
    }
}

/* The prefill's last chunk ran through this stage's layers: the prompt's
 * blocks go into the prefix cache, within what --kv-mib leaves beside the
 * sessions' caches. */
static void s_prefix_store(node_t *n, head_sess_t *s)
{
    if (!n->prefix)
        return;
    const size_t cap = n->o.kv_bytes > 0 ? (size_t)n->o.kv_bytes : 0, used = (size_t)n->kv.used;
    char err[256] = "", ns[SW_PREFIX_NS_LEN];
    if (sw_prefix_store(n->prefix, head_prefix_ns(s, ns, sizeof ns), s->prompt, s->n_prompt, s->kv,
                        cap ? (cap > used ? cap - used : 1) : 0, err, sizeof err) < 0)
        SW_WARN("prefix cache: %s", err);
    const int pub = s_public_len(n->head, s);
    if (pub > 0 && sw_prefix_store(n->prefix, S_PUBLIC_NS, s->prompt, pub, s->kv,
                                   cap ? (cap > used ? cap - used : 1) : 0, err, sizeof err) < 0)
        SW_WARN("prefix cache: %s", err);
}

/* The head's lost-link counters now (recover.h). */
static node_recover_links_t s_links(node_t *n)
{
    return (node_recover_links_t){.losses = sw_peer_losses(n->peer),
                                  .announces = sw_peer_announces(n->peer),
                                  .dlosses = sw_peer_direct_losses(n->peer),
                                  .several = sw_peer_links(n->peer) > 1};
}

/* While a round travels: one of the head's relays was lost (several relays: what went
 * by it is gone, the next messages go by another, and the stages kept their caches, so
 * the round alone goes again), or its one relay connection was renewed (the relay
 * dropped us, e.g. after packets to us were lost for seconds: what it held for us went
 * with it, the Verdict maybe too: replay now rather than after --round-timeout-ms).
 * A loss between a replay's rounds counts too (node_recover_links_mark). 1 when the round
 * failed for that. */
static int s_relay_lost(node_t *n, head_sess_t *s, double now)
{
    const char *why;
    const node_recover_links_t l = s_links(n);
    const int lost = node_recover_links_check(s->rec, &l, now, &why);
    if (lost)
        SW_WARN("session %016llx: %s: %s", (unsigned long long)s->id, why,
                lost == 1 ? "sending it again" : "replaying it");
    return lost != 0;
}

/* Advances one running session: deadline, the next round, what recovery
 * says. Returns 1 when it has rows to send in this pass's batch. */
int head_advance(node_t *n, head_sess_t *s, double now)
{
    node_head_t *h = n->head;
    char err[512] = "";
    if (s->deadline && now >= s->deadline) {
        int unused;
        /* while recovering, node_recover_next's message: it names what recovery waited for */
        if (!node_recover_failing(s->rec) ||
            node_recover_next(s->rec, now, s->deadline, &unused, err, sizeof err) != NODE_REC_FAIL)
            snprintf(err, sizeof err, "the request's deadline passed");
        head_end(n, s, SW_FINISH_DEADLINE, SW_ERROR_DEADLINE, err);
        return 0;
    }
    if (!s->t_told)
        s->t_told = now;
    if (now - s->t_told >= HEAD_PROGRESS_MS)
        head_progress(n, s, 0, now); // the client hears that its request is alive
    if (s->send_idx >= 0 && node_recover_failing(s->rec))
        s->send_idx = -1; // the attempt failed while its rows went out: recovery resends
    if (s->send_idx >= 0) // rows of a round left to send (a prompt's pieces: while few wait)
        return head_sched_may_send(n, s, now);
    if (!s->logged) {
        /* Drafting in bounded pieces: the other sessions' messages are read
         * between two (node_head_timeout says 0 while pieces are left). */
        const int work = sw_gen_work(s->gen, err, sizeof err);
        if (work < 0) {
            head_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL, err);
            return 0;
        }
        if (work > 0) {
            h->busy = 1;
            return 0;
        }
        const sw_round_t *r;
        int more = sw_gen_next(s->gen, &r, err, sizeof err); // drafting happens here
        if (more != 0 || node_recover_log(s->rec, r) != 0) {
            head_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL,
                     more ? err : "cannot log the round (out of memory?)");
            return 0;
        }
        s->logged = 1;
    }
    if (s->spot_fail) { // a node of the route was convicted by a spot check
        s->spot_fail = 0;
        node_recover_failed(s->rec, now, "a spot check convicted a stage of the route");
    }
    if (s->replay_why) { // its stages' caches are gone (it was parked): replay
        node_recover_failed(s->rec, now, s->replay_why);
        s->replay_why = NULL;
    }
    int idx = -1;
    switch (node_recover_next(s->rec, now, s->deadline, &idx, err, sizeof err)) {
    case NODE_REC_SEND:
        node_recover_get(s->rec, idx, &s->send_r, s->send_q);
        if (sw_round_kv(s->kv, &s->send_r, err, sizeof err) != 0) {
            head_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL, err);
            return 0;
        }
        s->send_idx = idx;
        s->send_row = s->send_chunks = 0;
        {
            const node_recover_links_t l = s_links(n); // a lost link counts from here
            node_recover_links_mark(s->rec, idx, &l);
        }
        s->send_round = ++s->round_no;
        if (idx == 0) {
            s->replay_round0 = s->send_round;
            s_prefix_start(n, s, now);
        }
        return 1;
    case NODE_REC_ROUTE:
        s->want_route = 1;
        head_want_status(h);
        return 0;
    case NODE_REC_FAIL:
        head_end(n, s, SW_FINISH_ERROR, SW_ERROR_DEST_GONE, err);
        return 0;
    default:
        break;
    }
    const int travels = node_recover_waiting(s->rec);
    if (travels) {
        /* While the round travels: draft the next one ahead (a piece per pass). */
        const int work = sw_gen_work(s->gen, err, sizeof err);
        if (work < 0) {
            head_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL, err);
            return 0;
        }
        if (work > 0)
            h->busy = 1;
    }
    /* While the round travels, or a replay waits for its window's verdict
     * (the rounds of the window may be lost as the round could be). */
    if (travels || node_recover_stalled(s->rec)) {
        if (now >= s->t_limit) {
            snprintf(err, sizeof err, "no verdict within %d ms (see --round-timeout-ms)",
                     n->o.round_timeout_ms);
            char names[256];
            head_route_text(&s->route, 1, ", ", names, sizeof names);
            for (int i = 1; i < s->route.n; i++)
                head_suspect_add(h, s->route.names[i], now);
            SW_WARN("session %016llx: no verdict within %d ms from the route through %s: "
                    "new routes avoid those stages for %d min where others serve their layers",
                    (unsigned long long)s->id, n->o.round_timeout_ms, names,
                    HEAD_SUSPECT_MS / 60000);
            node_recover_failed(s->rec, now, err);
            h->busy = 1;
        } else if (s_relay_lost(n, s, now)) {
            h->busy = 1;
        } else if (now >= s->t_check) {
            s->want_check = 1; // is every stage still there? (the next table says)
            head_want_status(h);
            s->t_check = now + SW_NODE_ROUTE_CHECK_MS;
        }
    }
    return 0;
}

/* After the batch ran s's next chunk: sends it on (or verifies it, on a
 * route of one stage) and moves the send on. */
static void s_after_chunk(node_t *n, head_sess_t *s, const float *hidden, const float *logits,
                          int rows, double batch_ms, double now)
{
    const int idx = s->send_idx;
    const int current = idx == node_recover_n_rounds(s->rec) - 1;
    const int first = s->send_chunks == 0; // after a cached prefix, send_row starts past 0
    if (current && first)
        s->t_round = now - batch_ms;
    if (current)
        s->round_head_ms += batch_ms;
    if (idx == 0 && s->send_row + rows == s->send_r.n)
        s_prefix_store(n, s);
    if (idx == 0 && s->send_r.kv_keep == 0 && s->send_r.n_draft == 0) {
        s->prompt_through = s->send_row + rows;        // (a replay sends the prompt again from 0)
        if (now - s->t_told >= HEAD_PROGRESS_PIECE_MS) // (a fair piece may take milliseconds)
            head_progress(n, s, 0, now);
    }
    if (s->route.n == 1) {
        /* The head holds every layer: verify here, no message. */
        sw_verdict_t v;
        char err[256] = "";
        s->send_row += rows;
        s->send_idx = -1;
        node_recover_sent(s->rec, idx, s->send_round, 0, now);
        if (sw_verifier_run(s->ver, &s->send_r, logits, &v, err, sizeof err) != 0) {
            head_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL, err);
            return;
        }
        if (node_recover_verdict(s->rec, s->send_round, now)) {
            draft_load_verdict(&n->head->load, v.n_commit, 0, 0, 0, now);
            s_commit(n, s, &v, now);
        }
        return;
    }
    char why[256] = "";
    const int sent = s_forward(n, s, hidden, s->send_row, rows, batch_ms, why, sizeof why);
    if (sent == -2) {
        head_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL, why);
        return;
    }
    if (sent != 0) {
        snprintf(why, sizeof why, "could not send the round to stage '%s'", s->route.names[1]);
        s->send_idx = -1;
        node_recover_failed(s->rec, now, why);
        return;
    }
    s->send_row += rows;
    s->send_chunks++;
    if (s->send_row < s->send_r.n)
        return; // more chunks next pass
    s->send_idx = -1;
    node_recover_sent(s->rec, idx, s->send_round, s->send_chunks, now);
    if (current || node_recover_stalled(s->rec)) { // a verdict is awaited from now
        s->t_sent_all = now;
        s->t_limit = now + n->o.round_timeout_ms;
        s->t_check = now + SW_NODE_ROUTE_CHECK_MS;
    }
    /* the next pass starts drafting ahead while the round travels, or sends the replay's next
     * round (a replay goes out a window at a time, not a round per verdict) */
    n->head->busy = 1;
    /* The prefill keeps the later stages busy for a while: feed the prompt to
     * the draft model meanwhile, off the critical path (once). */
    if (idx == 0 && s->send_round == 1 && !draft_cfg(s->drafter)->ahead &&
        draft_warm(s->drafter, s->send_r.tokens, s->send_r.n) != 0)
        SW_DEBUG("the draft model could not prefill the prompt; it catches up later");
}

/* Runs the next chunk of every ready session (ready[0..n_ready)) through
 * this stage's layers as one batch, then sends each on. */
void head_batch(node_t *n, head_sess_t **ready, int n_ready)
{
    node_head_t *h = n->head;
    const int E = n->hp->n_embd, V = n->hp->n_vocab;
    sw_kv_t *kvs[NODE_MAX_BATCH];
    sw_forward_t fs[NODE_MAX_BATCH];
    head_sess_t *in[NODE_MAX_BATCH];
    int want[NODE_MAX_BATCH], pick[NODE_MAX_BATCH], in_rows[NODE_MAX_BATCH];
    if (n_ready > NODE_MAX_BATCH)
        n_ready = NODE_MAX_BATCH;
    for (int i = 0; i < n_ready; i++) // by bytes, windows and the fair share (node/chunk.c)
        want[i] = head_chunk_rows(n, ready[i]);
    /* which of them run now, fairly between keys (head_sched.c) */
    const int n_pick = head_sched_pick(n, ready, want, n_ready, pick);
    int nb = 0, rows_total = 0, logit_rows = 0;
    for (int j = 0; j < n_pick; j++) {
        head_sess_t *s = ready[pick[j]];
        const sw_round_t *r = &s->send_r;
        const int rows = want[pick[j]];
        const int last = s->send_row + rows == r->n;
        const int want_logits = s->route.n == 1 && last ? r->n_draft + 1 : 0;
        if (nb > 0 && (rows_total + rows > n->o.max_batch_rows || rows_total + rows > n->rows_cap ||
                       logit_rows + want_logits > h->logit_rows))
            continue; // it goes first next pass
        if (s->route.n == 1 && want_logits > h->logit_rows) {
            head_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL, "the round needs more logits rows");
            continue;
        }
        char kerr[256]; /* the cache's next step, alone: a session that cannot grow fails alone */
        if (node_kv_grow(n, s->kv, sw_kv_len(s->kv) + rows, s->id, kerr, sizeof kerr) != 0) {
            head_end(n, s, SW_FINISH_ERROR, SW_ERROR_BUSY, kerr);
            continue;
        }
        sw_forward_t f = {
            .n = rows,
            .tokens = r->tokens + s->send_row,
            .out_hidden = s->route.n > 1 ? h->bout + (size_t)rows_total * E : NULL,
            .logits = want_logits ? h->logits + (size_t)logit_rows * V : NULL,
            .n_logits = want_logits,
            .prompt = r->n_draft == 0,
            /* after a cached prefix or an earlier piece: the prompt's windows from position 0 */
            .prompt_cont = r->kv_keep == 0 && r->n_draft == 0 && s->send_row > 0,
        };
        if (sw_round_parents(r, s->send_row, rows, s->send_tp))
            f.parent = s->send_tp;
        kvs[nb] = s->kv;
        fs[nb] = f;
        in_rows[nb] = rows;
        in[nb++] = s;
        rows_total += s->route.n > 1 ? rows : 0;
        logit_rows += want_logits;
    }
    if (nb == 0)
        return;
    /* A prefill's client hears before the batch how long the head will be busy (its rows at
     * the most a row cost lately; a minute before it knows). */
    int rows_in = 0;
    for (int i = 0; i < nb; i++)
        rows_in += fs[i].n;
    const double busy = h->ms_per_row > 0 ? rows_in * h->ms_per_row : 60000;
    for (int i = 0; i < nb; i++)
        if (in[i]->send_idx == 0 && fs[i].prompt)
            head_progress(n, in[i], busy, sw_now_ms());
    char err[256] = "";
    const double t0 = sw_now_ms();
    const int rc = sw_model_forward_batch(n->model, kvs, fs, nb, err, sizeof err);
    const double batch_ms = sw_now_ms() - t0;
    h->batch_ms_max = batch_ms > 0.95 * h->batch_ms_max ? batch_ms : 0.95 * h->batch_ms_max;
    if (rows_in >= SW_PREFIX_BLOCK) // prompt pieces: the cost of a row where rows share weights
        h->ms_per_row =
            batch_ms / rows_in > 0.95 * h->ms_per_row ? batch_ms / rows_in : 0.95 * h->ms_per_row;
    if (nb > 1)
        SW_DEBUG("head batch: %d sessions, %.1f ms", nb, batch_ms);
    int all_rows = 0;
    for (int i = 0; i < nb; i++)
        all_rows += fs[i].n;
    if (rc == 0) {
        draft_load_head_batch(&h->load, all_rows, batch_ms, t0 + batch_ms);
        head_sched_ran(n, in, in_rows, nb, batch_ms); // each key's share of the time
    }
    for (int i = 0; i < nb; i++)
        in[i]->round_head_rows = all_rows;
    for (int i = 0; i < nb; i++) {
        head_sess_t *s = in[i];
        if (rc != 0) {
            head_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL, err);
            continue;
        }
        s_after_chunk(n, s, fs[i].out_hidden, fs[i].logits, fs[i].n, batch_ms, sw_now_ms());
    }
    if (rc != 0 && sw_backend_failed(n->be) && !n->gpu_failed) { // the head's GPU: ended above
        n->gpu_failed = 1;
        snprintf(n->gpu_err, sizeof n->gpu_err, "%s", err);
    }
}
