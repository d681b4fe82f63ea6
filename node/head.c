/*
 * head.c - the head node: it owns every request's session and drives them
 * all from the node's one event loop, as a message-driven state machine.
 *
 * A request arrives (GenerateRequest), waits in a bounded queue while
 * --max-sessions sessions run (or while the KV memory is taken), is
 * tokenized, gets a route of stages from the relay's peer table, and then
 * lives through rounds: the round logic of decode.c (sw_gen_t: the prefill,
 * then the last committed token and the drafts) says what the next round
 * carries; recover.c's state machine says whether to send it, to replay the
 * session after a failure, or to wait; the head's files do the sending and
 * turn messages into events. A session is ROUTE (waiting for a route), RUN
 * (rounds), PARKED (its slot lent to another key's request, replayed later)
 * or LINGER (finished, its TokenChunks kept for a Resume):
 * head_session.c. The head's parts and their order: head_impl.h.
 *
 * This file holds the head's lifetime and the entry points that touch every
 * part: the relay's peer table (routes for the sessions waiting for one,
 * recovery's route answers, route checks of late rounds, clients that left
 * while they ran or waited), the step that advances everything once per pass
 * of the loop, and how long the loop may wait. Nothing here waits for a
 * message: handlers change state and send; timers (round timeouts, route
 * checks, deadlines, status polls) are looked at in node_head_step().
 *
 * A client's Cancel, a client that left the relay, and a request's deadline
 * end its session at once: the stages get a SessionClose in the same pass.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "head_impl.h"
#include "log.h"
#include "placement.h"

#define S_LINGER_MS 60000 // a finished request's chunks are kept this long for a Resume
#define S_LINGER_MAX 64   // finished requests kept at most (the oldest go first)

/* Frees h and what it owns (its sessions' records are the caller's to end first). */
static void s_free(node_head_t *h)
{
    head_sched_free(h);
    draft_model_free(&h->dmodel);
    sw_tokenizer_free(&h->tok);
    free(h->sess);
    free(h->queue);
    free(h->bout);
    free(h->logits);
    free(h->pub[0]);
    free(h->pub[1]);
    free(h->resend);
    free(h->answer);
    free(h);
}

int node_head_new(node_t *n, char *err, size_t err_len)
{
    node_head_t *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    draft_load_init(&h->load);
    h->tok = sw_tokenizer_from_gguf(sw_model_gguf(n->model), err, err_len);
    if (!h->tok)
        goto fail;
    h->n_slots = n->o.max_sessions + S_LINGER_MAX;
    h->sess = calloc((size_t)h->n_slots, sizeof *h->sess);
    h->queue = calloc((size_t)(n->o.max_queue > 0 ? n->o.max_queue : 1), sizeof *h->queue);
    h->bout = malloc((size_t)n->rows_cap * n->hp->n_embd * sizeof(float));
    h->resend = calloc((size_t)h->n_slots, sizeof *h->resend);
    h->answer = calloc((size_t)h->n_slots, sizeof *h->answer);
    sw_log_gate_refusals(&h->refused_log, "head: refusals and Resumes");
    sw_log_gate_refusals(&h->wait_log, "head: requests that wait");
    if (sw_model_is_last(n->model)) {
        /* a node holding every layer verifies itself: logits of every
         * session's last rows in one batch */
        h->logit_rows = n->logit_cap;
        h->logits = malloc((size_t)h->logit_rows * n->hp->n_vocab * sizeof(float));
    }
    if (!h->sess || !h->queue || !h->bout || !h->resend || !h->answer ||
        (sw_model_is_last(n->model) && !h->logits)) {
        snprintf(err, err_len, "out of memory for %d sessions", n->o.max_sessions);
        goto fail;
    }
    if (n->o.draft_model) {
        const char *dbe =
            n->o.draft_backend ? n->o.draft_backend : sw_backend_name(sw_backend_primary(n->be));
        h->dmodel = draft_model_new(n->o.draft_model, sw_model_gguf(n->model), dbe,
                                    n->o.draft_threads ? n->o.draft_threads : n->o.threads,
                                    n->o.n_ctx, err, err_len);
        if (!h->dmodel)
            goto fail;
        SW_INFO("draft model %s loaded on %s (vocabulary checked)", n->o.draft_model,
                draft_model_backend(h->dmodel));
        /* The sessions' draft steps of one pass run as one engine call
         * (node_head_step flushes them). */
        draft_model_set_batching(h->dmodel, n->o.draft_batch);
        draft_model_set_load(h->dmodel, &h->load);
        uint64_t seed;
        randombytes_buf(&seed, sizeof seed);
        if (n->o.prefix_cache &&
            draft_model_set_prefix(h->dmodel,
                                   n->o.kv_bytes > 0 ? (size_t)n->o.kv_bytes : (size_t)256 << 20,
                                   seed) != 0) {
            snprintf(err, err_len, "out of memory for the draft model's prefix cache");
            goto fail;
        }
    }
    /* With a draft model the gate also tries n-gram lookups in its place. The sessions
     * follow its arm through the load (s_gen_begin), which --draft-load off withholds:
     * then the gate is off too, instead of measuring and logging arms no session takes. */
    draft_load_gate(&h->load, n->o.draft_gate && n->o.draft_load, h->dmodel ? DRAFT_GATE_ARMS : 2);
    n->head = h;
    if (head_sched_init(n, err, err_len) != 0) {
        n->head = NULL;
        goto fail;
    }
    return 0;
fail:
    s_free(h);
    return -1;
}

void node_head_free(node_t *n)
{
    node_head_t *h = n->head;
    if (!h)
        return;
    for (int i = 0; i < h->n_slots; i++) {
        head_sess_t *s = &h->sess[i];
        if ((s->state == HEAD_ROUTE || s->state == HEAD_RUN || s->state == HEAD_PARKED) &&
            n->peer) {
            head_send_error(n, s->client_addr, SW_ERROR_HEAD_LEAVING, s->rid, s->id, 0,
                            "the head is shutting down");
            head_close_stages(n, s, "head shutting down");
        }
        head_forget(h, s);
    }
    for (int i = 0; i < h->q_len; i++) {
        head_wait_t *w = &h->queue[(h->q_head + i) % n->o.max_queue];
        char addr[SW_WIRE_ADDR_MAX + 1];
        if (n->peer)
            head_send_error(n, head_reply_addr(&w->msg, addr), SW_ERROR_HEAD_LEAVING,
                            w->g.request_id, 0, (uint32_t)(i + 1), "the head is shutting down");
        sw_wire_msg_clear(&w->msg);
    }
    sw_wire_msg_clear(&h->table);
    s_free(h);
    n->head = NULL;
}

/* Session s waited (ROUTE) for the table pt, whose route is now h->route: it takes the route,
 * or is refused before any round (a route too short for it, or none). Such a refusal goes
 * through the per-key log gate and answer budget like one before a slot (issue 35, findings 6
 * and 2), or a key flooding requests while the route is broken would get a WARN line and an
 * Error for each; the slot goes back without a record, as nothing ran. */
static void s_route_waiting(node_t *n, head_sess_t *s, const sw_msg_table_t *pt)
{
    node_head_t *h = n->head;
    char why[320];
    if (h->route_ok && head_route_fits(n, s, why, sizeof why)) {
        head_route_take(n, s, pt);
        s->state = HEAD_RUN;
        h->busy = 1;
        head_log_start(n, s);
        return;
    }
    if (h->route_ok) {
        head_refuse_session(n, s, SW_ERROR_BAD_REQUEST, why); // never fits there
    } else {
        head_refuse_session(n, s, h->route_code, h->route_err);
    }
    head_forget(h, s);
    h->busy = 1; // a slot is free: the queue may move
}

void node_head_table(node_t *n, sw_wire_msg_t *msg)
{
    node_head_t *h = n->head;
    sw_msg_t d;
    if (!h || sw_codec_decode(msg, SW_MSG_PEER_TABLE, &d, NULL, 0) != 0)
        return;
    const sw_msg_table_t *pt = &d.table;
    const double now = sw_now_ms();
    const double asked = h->status_sent; // the query this table answers went then
    h->status_out = 0;
    h->table_link = msg->link;
    char err[512] = "";
    int code = 0;
    h->route_ok = head_route_build(n, pt, &h->route, &code, err, sizeof err) == 0;
    h->route_ms = now;
    if (h->route_ok && h->route.n_ctx != h->ctx_said) {
        /* Contexts disagree: the head uses the smallest on the route, so a request
         * longer than a stage can hold is refused at once, naming that stage. */
        if (h->route.ctx_at > 0)
            SW_WARN("stage '%s' holds sessions of up to %d positions, this head %d: requests "
                    "are limited to %d (the smallest context on the route; give it more "
                    "--kv-mib or a larger --ctx to raise it)",
                    h->route.names[h->route.ctx_at], h->route.n_ctx, n->o.n_ctx, h->route.n_ctx);
        else if (h->ctx_said)
            SW_INFO("the route's stages hold this head's context again: %d positions",
                    h->route.n_ctx);
        h->ctx_said = h->route.n_ctx;
    }
    if (!h->route_ok) {
        snprintf(h->route_err, sizeof h->route_err, "%s", err);
        h->route_code = code;
    }
    node_place_table(n, pt, h->route_ok); /* a gap and standby auto nodes: a plan */
    for (int i = 0; i < h->n_slots; i++) {
        head_sess_t *s = &h->sess[i];
        if (s->state == HEAD_ROUTE) {
            s_route_waiting(n, s, pt);
            continue;
        }
        if (s->state != HEAD_RUN)
            continue;
        if (head_client_gone(h, pt, s->client, s->client_key, &s->client_missing, now)) {
            head_end(n, s, SW_FINISH_CANCELLED, 0, "the client left the relay");
            continue;
        }
        if (s->want_route) {
            s->want_route = 0;
            if (!h->route_ok) {
                node_recover_routed(s->rec, now, 0, h->route_err);
            } else if (h->route.n < 2 && s->route.n >= 2) {
                /* Not reached: the route is the head alone only when its own layers reach
                 * the end, and they are fixed for its process (an auto node refuses another
                 * range once loaded: placement.c), so a session routed through stages never
                 * finds one. Kept as a guard. */
                head_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL,
                         "the head now holds every layer");
                continue;
            } else if (!head_client_present(pt, s->client, s->client_key)) {
                /* After a relay restart the client must have announced again
                 * too, or the next TokenChunk would be dropped. */
                char why[128];
                snprintf(why, sizeof why, "the client '%s' is not connected to the relay",
                         s->client);
                node_recover_routed(s->rec, now, 0, why);
            } else {
                head_route_take(n, s, pt);
                char names[256];
                SW_INFO("session %016llx: recovery: the route is now %s", (unsigned long long)s->id,
                        head_route_text(&s->route, 0, " -> ", names, sizeof names));
                node_recover_routed(s->rec, now, 1, NULL);
                h->busy = 1;
            }
        }
        if (s->base_link == h->table_link)
            node_recover_route_note(s->rec, pt, s->route.names, s->route.n);
        if (s->want_check && s->base_link != h->table_link) {
            s->want_check = 0; // another relay's counters: the head moved relays (a loss,
                               // which head_session.c replays), nothing to compare here
        } else if (s->want_check && asked < s->t_sent_all) {
            head_want_status(h); // asked before the round's last chunk went: it cannot tell
        } else if (s->want_check) {
            s->want_check = 0;
            char why[160];
            const int ok = node_recover_waiting(s->rec) || node_recover_stalled(s->rec)
                               ? node_recover_route_check(s->rec, pt, s->route.names, s->route.n,
                                                          why, sizeof why)
                               : 1;
            if (ok < 0 && head_leave_relay(n, msg->link, why, now)) {
                h->busy = 1; // another relay: the round alone goes again (head_session.c)
            } else if (ok == 2) {
                node_recover_relay_lost(s->rec, now, why); // a later direct link: the round again
                h->busy = 1;
            } else if (ok < 1) {
                char text[200];
                snprintf(text, sizeof text, "%s during the round", why);
                node_recover_failed(s->rec, now, text);
                h->busy = 1;
            }
        }
    }
    for (int i = 0; i < h->q_len; i++) {
        head_wait_t *w = &h->queue[(h->q_head + i) % n->o.max_queue];
        if (head_client_gone(h, pt, w->msg.peer, w->msg.peer_key, &w->client_missing, now)) {
            SW_INFO("request '%s': the client %s left while it waited", w->g.request_id,
                    w->msg.peer);
            head_dequeue(n, i--);
        }
    }
    sw_wire_msg_move(&h->table, msg); // kept: new sessions take their baseline from it
}

void node_head_step(node_t *n)
{
    node_head_t *h = n->head;
    if (!h)
        return;
    const double now = sw_now_ms();
    h->busy = 0;
    head_queue_step(n, now);
    int decoding = 0;
    for (int k = 0; k < h->n_slots; k++)
        decoding += h->sess[k].state == HEAD_RUN && h->sess[k].n_seen > 0;
    draft_load_active(&h->load, h->n_active, decoding);
    const draft_gate_t *g = &h->load.gate;
    if (g->windows != h->gate_windows) {
        h->gate_windows = g->windows;
        SW_DEBUG("draft gate window: %s, %.2f tokens per session-second, %.1f sessions%s",
                 draft_load_arm_name(g->arm), g->w_rate * 1000, g->w_sess,
                 g->w_counted ? " (measured)" : "");
    }
    if (g->decisions != h->gate_logged) { // one line per comparison: every 9 s or more
        h->gate_logged = g->decisions;
        char arms[192] = "";
        for (int a = 0, o = 0; a < g->n_arms && o < (int)sizeof arms; a++)
            o += snprintf(arms + o, sizeof arms - o, "%s%s %.2f%s", a ? ", " : "",
                          draft_load_arm_name(a), g->rate[a] * 1000,
                          g->wait[a] > 0 ? " (far behind: sits out)" : "");
        SW_INFO("draft gate: tokens per session-second: %s; %s for the next %d s", arms,
                draft_load_arm_name(g->arm), g->hold * DRAFT_LOAD_WINDOW_MS / 1000);
    }
    head_sess_t *ready[NODE_MAX_BATCH];
    int n_ready = 0;
    for (int k = 0; k < h->n_slots; k++) {
        head_sess_t *s = &h->sess[(h->rr + k) % h->n_slots];
        if (s->state == HEAD_LINGER && now - s->t_end > S_LINGER_MS)
            head_forget(h, s);
        if (s->state == HEAD_RUN && head_advance(n, s, now) && n_ready < NODE_MAX_BATCH)
            ready[n_ready++] = s;
    }
    h->rr = (h->rr + 1) % h->n_slots;
    if (n_ready > 0)
        head_batch(n, ready, n_ready);
    /* Every session's draft step of this pass in one forward of the draft
     * model (they posted them in head_advance); each takes its result in the
     * next pass. */
    if (h->dmodel && draft_model_flush(h->dmodel) != 0)
        h->busy = 1;
    head_resend_step(n, sw_now_ms());
    head_status_step(n, sw_now_ms());
    sw_log_gate_tick(&h->refused_log, sw_now_ms());
    sw_log_gate_tick(&h->wait_log, sw_now_ms());
    const double end = sw_now_ms();
    for (int k = 0; k < h->n_slots && !h->busy; k++) // chunks to send (not waiting for acks)
        h->busy = h->sess[k].state == HEAD_RUN && h->sess[k].send_idx >= 0 &&
                  head_sched_may_send(n, &h->sess[k], end);
}

int node_head_timeout(const node_t *n)
{
    const node_head_t *h = n->head;
    if (!h)
        return 200;
    if (h->busy || (h->status_want && !h->status_out))
        return 0;
    const double now = sw_now_ms();
    double next = now + (h->resend_pending ? 5 : 200); // paced resends go on soon
    for (int i = 0; i < h->n_slots; i++) {
        const head_sess_t *s = &h->sess[i];
        if (s->state != HEAD_RUN)
            continue;
        if (s->deadline && s->deadline < next)
            next = s->deadline;
        if (node_recover_waiting(s->rec) || node_recover_stalled(s->rec)) {
            if (s->t_check < next)
                next = s->t_check;
            if (s->t_limit < next)
                next = s->t_limit;
        }
    }
    if ((h->n_active > 0 || h->q_len > 0) && h->status_next < next)
        next = h->status_next;
    const double wait = next - now;
    return wait <= 0 ? 0 : wait > 200 ? 200 : (int)wait + 1;
}
