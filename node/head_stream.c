/*
 * head_stream.c - what a client receives of its request: TokenChunks, the
 * final chunk with the request's stats, Errors, and the chunks again on a
 * Resume.
 *
 * Streaming never loses a token: every chunk a session sent is kept (tokens,
 * text, index) until the request ends and S_LINGER_MS (head.c) after; a
 * client that sees a gap, reconnects or hears nothing asks with Resume from
 * the last index it holds and gets the chunks again (it drops duplicates by
 * index). Nothing here waits: a chunk the relay cannot take now is dropped
 * and asked for again. A request is found by its client's key and its id,
 * here for Resume and Cancel alike; the stream goes to "NAME@KEY", so the
 * relay delivers it to that key only.
 *
 * A Resume costs its sender, not the others: it only moves the request's
 * resend cursor; head_resend_step sends the chunks from there at the
 * client key's pace (SW_HEAD_RESEND_CHUNKS_S), HEAD_RESEND_PASS chunks a pass
 * at most, and a request's chunks go again SW_HEAD_RESEND_PER_REQUEST times
 * over at most. So a flood of Resumes never floods the relay with the head's
 * messages (it used to drop the head's Forwards with them).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "head_impl.h"
#include "log.h"

#define HEAD_RESEND_PASS 64 // chunks sent again per pass of the loop, all clients together

void head_send_error(node_t *n, const char *dest, int code, const char *request_id,
                     uint64_t session, uint32_t queue_pos, const char *text)
{
    const sw_msg_t er = {
        .type = SW_MSG_ERROR,
        .error = {.code = (sw_error_code_t)code,
                  .message = text,
                  .session_id = session,
                  .request_id = request_id,
                  .queue_position = queue_pos},
    };
    if (sw_peer_try_send_msg(n->peer, dest, &er) != 0)
        SW_WARN("could not send an error to %s", dest);
}

/* A last chunk with no tokens (done, finish): for requests with no record. */
void head_final_chunk(node_t *n, const char *dest, const char *rid, uint32_t index, int finish)
{
    const sw_msg_t tc = {
        .type = SW_MSG_TOKEN_CHUNK,
        .chunk = {.request_id = rid, .index = index, .done = 1, .finish = (sw_finish_t)finish},
    };
    if (sw_peer_try_send_msg(n->peer, dest, &tc) != 0)
        SW_DEBUG("request '%s': could not send the final chunk to %s", rid, dest);
}

static int s_grow(void **buf, size_t *cap, size_t need, size_t sz)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *p = realloc(*buf, c * sz);
    if (!p)
        return -1;
    *buf = p;
    *cap = c;
    return 0;
}

/* Progress.next_ms: silent at most for the head's next batch (busy_ms, or its longest lately),
 * twice, and its own period: a client does not ask again before that (client/failover.c). */
static uint32_t s_next_ms(const node_head_t *h, double busy_ms)
{
    const double busy = busy_ms > 0 ? busy_ms : h->batch_ms_max;
    double next = 2 * busy + 2 * HEAD_PROGRESS_MS;
    next = next < 3 * HEAD_PROGRESS_MS ? 3 * HEAD_PROGRESS_MS : next;
    return (uint32_t)(next > SW_WIRE_MAX_PROGRESS_MS ? SW_WIRE_MAX_PROGRESS_MS : next);
}

void head_progress(node_t *n, head_sess_t *s, double busy_ms, double now)
{
    const node_head_t *h = n->head;
    const uint32_t next = s_next_ms(h, busy_ms);
    const uint32_t total = (uint32_t)s->n_prompt;
    const uint32_t done = s->prompt_through < s->n_prompt ? (uint32_t)s->prompt_through : total;
    const uint32_t finished = s->prompt_finished < (int)done ? (uint32_t)s->prompt_finished : done;
    const sw_msg_t msg = {.type = SW_MSG_PROGRESS,
                          .progress = {.request_id = s->rid,
                                       .prompt_done = done,
                                       .prompt_total = total,
                                       .generated = s->index_base + s->n_streamed,
                                       .prompt_finished = finished,
                                       .next_ms = next}};
    s->t_told = now;
    if (sw_peer_try_send_msg(n->peer, s->client_addr, &msg) != 0)
        SW_DEBUG("request '%s': a progress report to %s was not sent", s->rid, s->client);
}

void head_progress_queued(node_t *n, head_wait_t *w, double now)
{
    char addr[SW_WIRE_ADDR_MAX + 1];
    const uint32_t done = w->g.n_resume_tokens; // < n_predict <= 1<<24 (wire_check.c)
    const sw_msg_t msg = {.type = SW_MSG_PROGRESS,
                          .progress = {.request_id = w->g.request_id,
                                       .generated = done,
                                       .next_ms = s_next_ms(n->head, 0)}};
    w->t_told = now;
    if (sw_peer_try_send_msg(n->peer, head_reply_addr(&w->msg, addr), &msg) != 0)
        SW_DEBUG("request '%s': a progress report to %s was not sent", w->g.request_id,
                 w->msg.peer);
}

/* Sends chunk c of s (again, for a Resume). */
static void s_send_chunk(node_t *n, head_sess_t *s, const head_chunk_t *c)
{
    sw_msg_t msg = {.type = SW_MSG_TOKEN_CHUNK};
    sw_msg_chunk_t *tc = &msg.chunk;
    tc->request_id = s->rid;
    tc->index = s->index_base + c->index;
    tc->n_tokens = c->n;
    tc->tokens = (const uint32_t *)(s->toks + c->index);
    tc->text = s->text + c->text_at;
    tc->text_len = c->text_len;
    tc->done = c->finish != SW_FINISH_NONE;
    tc->finish = (sw_finish_t)c->finish;
    tc->has_stats = tc->done && s->have_stats;
    if (tc->has_stats)
        tc->stats = s->stats;
    /* Never waits: a chunk the relay cannot take now is lost, and the client
     * asks for it again (Resume). */
    s->t_told = sw_now_ms();
    if (sw_peer_try_send_msg(n->peer, s->client_addr, &msg) != 0)
        SW_DEBUG("request '%s': a chunk to %s was not sent (the client resumes)", s->rid,
                 s->client);
}

/* Records and sends the next chunk: tokens (n_tok of them) with their text,
 * finish NONE until the last. 0 or -1 (out of memory). */
int head_emit(node_t *n, head_sess_t *s, const int32_t *tokens, int n_tok, const char *text,
              size_t len, int finish)
{
    size_t cap_chunks = (size_t)s->cap_chunks;
    size_t cap_toks = (size_t)s->n_predict + 1;
    if (s_grow((void **)&s->chunks, &cap_chunks, (size_t)s->n_chunks + 1, sizeof *s->chunks) ||
        s_grow((void **)&s->text, &s->text_cap, s->text_len + len + 1, 1) ||
        s->n_streamed + (uint32_t)n_tok > cap_toks)
        return -1;
    s->cap_chunks = (int)cap_chunks;
    head_chunk_t *c = &s->chunks[s->n_chunks++];
    c->index = s->n_streamed;
    c->n = (uint32_t)n_tok;
    c->text_at = s->text_len;
    c->text_len = len;
    c->finish = finish;
    if (n_tok)
        memcpy(s->toks + s->n_streamed, tokens, (size_t)n_tok * sizeof *tokens);
    if (len)
        memcpy(s->text + s->text_len, text, len);
    s->text_len += len;
    s->n_streamed += (uint32_t)n_tok;
    s_send_chunk(n, s, c);
    return 0;
}

/* sw_gen_opts_t.on_tokens: the committed tokens of a round, as one chunk. */
int head_on_tokens(void *ctx, const int32_t *tokens, int n_tok)
{
    head_sess_t *s = ctx;
    char text[SW_WIRE_MAX_CHUNK_TEXT];
    size_t len = 0;
    int skipped = 0;
    for (int i = 0; i < n_tok; i++) {
        const char *piece;
        size_t pl;
        if (sw_detok_push(s->detok, tokens[i], &piece, &pl) != 0)
            return 1;
        if (s->n_seen < s->n_skip) { /* failover: the client holds this one */
            if (tokens[i] != s->skip[s->n_seen]) {
                snprintf(s->skip_bad, sizeof s->skip_bad,
                         "taken over after %u tokens, but token %u came out %d, not the %d the "
                         "client holds",
                         s->n_skip, s->n_seen, tokens[i], s->skip[s->n_seen]);
                SW_WARN("request '%s': %s", s->rid, s->skip_bad);
                return 1; // sw_gen_commit stops; the commit ends the request with an Error
            }
            s->n_seen++;
            skipped++;
            continue;
        }
        s->n_seen++;
        if (len + pl <= sizeof text) {
            memcpy(text + len, piece, pl);
            len += pl;
        }
    }
    if (skipped == n_tok)
        return 0;
    return head_emit(s->n, s, tokens + skipped, n_tok - skipped, text, len, SW_FINISH_NONE) != 0;
}

int head_is_eog(void *ctx, int32_t token)
{
    return sw_tokenizer_is_eog((const sw_tokenizer_t *)ctx, token);
}

void head_fill_stats(head_sess_t *s, const sw_gen_stats_t *gs)
{
    sw_msg_stats_t *st = &s->stats;
    memset(st, 0, sizeof *st);
    st->n_prompt = (uint32_t)gs->n_prompt;
    /* a greedy failover generated the client's tokens again (n_skip) */
    st->n_generated = s->index_base - s->n_skip + (uint32_t)gs->n_gen;
    st->n_rounds = (uint32_t)gs->rounds;
    st->n_drafted = (uint32_t)gs->drafted;
    st->n_accepted = (uint32_t)gs->accepted;
    st->prompt_ms = (uint32_t)gs->prefill_ms;
    st->generate_ms = (uint32_t)(gs->prefill_ms + gs->decode_ms);
    st->ttft_ms = (float)(gs->ttft_ms + (s->t_gen - s->t_start));
    st->decode_ms = (float)gs->decode_ms;
    st->draft_ms = (float)gs->draft_ms;
    st->draft_ahead_ms = (float)gs->ahead_ms;
    st->n_ahead_hits = (uint32_t)gs->ahead_hits;
    st->n_ahead_misses = (uint32_t)gs->ahead_misses;
    st->n_tree_rounds = (uint32_t)gs->tree_rounds;
    st->n_kv_moves = (uint32_t)gs->kv_moves;
    st->head_ms = (float)(s->route.n == 1 ? gs->target_ms : s->head_ms);
    st->network_ms = (float)s->net_ms;
    st->overlap_ms = (float)s->overlap_ms;
    for (int i = 1; i < s->route.n; i++) {
        st->stages[i - 1].name = s->route.names[i];
        st->stages[i - 1].compute_us = node_us(s->stage_total[i]);
        st->stages[i - 1].critical_us = node_us(s->crit_total[i]);
    }
    st->n_stages = (uint32_t)(s->route.n > 1 ? s->route.n - 1 : 0);
    st->logits_digest = gs->logits_digest;
    s->have_stats = 1;
}

head_sess_t *head_find(node_head_t *h, const sw_wire_msg_t *msg, const char *rid, int lingering)
{
    for (int i = 0; i < h->n_slots; i++) {
        head_sess_t *s = &h->sess[i];
        if ((s->state == HEAD_ROUTE || s->state == HEAD_RUN || s->state == HEAD_PARKED ||
             (lingering && s->state == HEAD_LINGER)) &&
            !strcmp(head_sess_who(s), head_who(msg)) && !strcmp(s->rid, rid))
            return s;
    }
    return NULL;
}

const char *head_who_label(const sw_wire_msg_t *msg, char *out, size_t len)
{
    snprintf(out, len, "%s %s", msg->peer_key[0] ? "key" : "client", head_who(msg));
    return out;
}

void node_head_resume(node_t *n, sw_wire_msg_t *msg)
{
    node_head_t *h = n->head;
    sw_msg_t d;
    if (!h || sw_codec_decode(msg, SW_MSG_RESUME, &d, NULL, 0) != 0)
        return;
    const sw_msg_resume_t *r = &d.resume;
    head_sess_t *s = head_find(h, msg, r->request_id, 1);
    char addr[SW_WIRE_ADDR_MAX + 1];
    if (!s) {
        for (int i = 0; i < h->q_len; i++) // still waiting: nothing to send yet
            if (!strcmp(head_who(&h->queue[(h->q_head + i) % n->o.max_queue].msg), head_who(msg)) &&
                !strcmp(h->queue[(h->q_head + i) % n->o.max_queue].g.request_id, r->request_id))
                return;
        if (head_answer_take(n, msg, "a Resume for an unknown request"))
            head_send_error(n, head_reply_addr(msg, addr), SW_ERROR_UNKNOWN_SESSION, r->request_id,
                            0, 0,
                            "the head holds no such request (it ended and its record is gone, "
                            "or the head restarted)");
        return;
    }
    if (strcmp(s->client, msg->peer) != 0) {
        /* The same key under another name (it reconnected and renamed itself, its
         * old name being taken): the stream follows the key. The line goes through
         * the key's log gate: two connections of one key taking turns would
         * otherwise write one line per Resume. */
        char who[SW_WIRE_NAME_MAX + 16];
        sw_log_gated(&h->refused_log, SW_LOG_INFO, head_who_label(msg, who, sizeof who),
                     sw_now_ms(), "request '%s': its client %s is now %s (same key)", s->rid,
                     s->client, msg->peer);
        snprintf(s->client, sizeof s->client, "%s", msg->peer);
        sw_wire_addr(s->client_addr, s->client, s->client_key);
        s->client_missing = 0;
    }
    const int budget = SW_HEAD_RESEND_PER_REQUEST * s->n_chunks + 64;
    if (s->resent >= budget) {
        if (s->resent++ == budget) { /* said once; later Resumes get nothing */
            SW_WARN("request '%s': %s asked for it again past its budget (%d chunks sent "
                    "again): refused",
                    s->rid, msg->peer, budget);
            head_send_error(n, s->client_addr, SW_ERROR_BUSY, s->rid, s->id, 0,
                            "this request's chunks were sent again too often (Resume budget "
                            "spent)");
        }
        return;
    }
    /* indices as the client counts them (from index_base after a failover) */
    const uint32_t from = r->from_index > s->index_base ? r->from_index - s->index_base : 0;
    int first = s->n_chunks;
    for (int i = 0; i < s->n_chunks && first == s->n_chunks; i++) {
        const head_chunk_t *c = &s->chunks[i];
        if (c->index + c->n > from || (c->n == 0 && c->index >= from))
            first = i;
    }
    if (s->resend_at < 0 && (s->finish == SW_FINISH_ERROR || s->finish == SW_FINISH_DEADLINE)) {
        head_send_error(n, s->client_addr, s->err_code, s->rid, s->id, 0, s->err);
        s->resent++;
    }
    if (s->resend_at < 0) {
        char who[SW_WIRE_NAME_MAX + 16];
        sw_log_gated(&h->refused_log, SW_LOG_INFO, head_who_label(msg, who, sizeof who),
                     sw_now_ms(),
                     "request '%s': %s resumed from token %u, %d chunk(s) to send again", s->rid,
                     msg->peer, r->from_index, s->n_chunks - first);
    }
    if (first < s->n_chunks) {
        s->resend_at = first;
        h->resend_pending = 1;
    }
}

/* Takes one answer from the budget of client who (a key's fingerprint, else a name): 1, or 0
 * when it is spent. */
static int s_answer_take(node_head_t *h, const char *who, double now)
{
    sw_bucket_t *b = sw_bucket_get(h->answer, h->n_slots, who, SW_HEAD_ANSWERS_S, now);
    if (b->level < 1)
        return 0;
    b->level -= 1;
    return 1;
}

int head_answer_take(node_t *n, const sw_wire_msg_t *msg, const char *what)
{
    node_head_t *h = n->head;
    const double now = sw_now_ms();
    if (s_answer_take(h, head_who(msg), now))
        return 1;
    char who[SW_WIRE_NAME_MAX + 16];
    sw_log_gated(&h->refused_log, SW_LOG_WARN, head_who_label(msg, who, sizeof who), now,
                 "%s from %s not answered: over its key's %d answers a second", what, msg->peer,
                 SW_HEAD_ANSWERS_S);
    return 0;
}

/* Who a refusal concerns: the client as requests are bound to it (who: its key's fingerprint,
 * else its name), its name and the address its Error goes to. */
typedef struct {
    const char *who;  // head_who, head_sess_who
    int keyed;        // 1: who is a key's fingerprint
    const char *peer; // its name
    const char *addr; // "NAME@KEY"
} s_client_t;

/* head_refuse's and head_refuse_session's one way: a gated line, an Error within the budget. */
static void s_refuse(node_t *n, const s_client_t *c, int code, const char *rid, uint32_t queue_pos,
                     const char *text)
{
    char label[SW_WIRE_NAME_MAX + 16];
    const double now = sw_now_ms();
    const int answer = !n->head || s_answer_take(n->head, c->who, now);
    snprintf(label, sizeof label, "%s %s", c->keyed ? "key" : "client", c->who);
    if (n->head)
        sw_log_gated(&n->head->refused_log, SW_LOG_WARN, label, now,
                     "request '%s' from %s refused%s: %s", rid, c->peer,
                     answer ? "" : " (not told: over its key's answers a second)", text);
    else
        SW_DEBUG("request '%s' from %s refused: %s", rid, c->peer, text);
    if (answer)
        head_send_error(n, c->addr, code, rid, 0, queue_pos, text);
}

void head_refuse(node_t *n, const sw_wire_msg_t *msg, int code, const char *rid, uint32_t queue_pos,
                 const char *text)
{
    char addr[SW_WIRE_ADDR_MAX + 1];
    const s_client_t c = {head_who(msg), msg->peer_key[0] != 0, msg->peer,
                          head_reply_addr(msg, addr)};
    s_refuse(n, &c, code, rid, queue_pos, text);
}

void head_refuse_session(node_t *n, head_sess_t *s, int code, const char *text)
{
    const s_client_t c = {head_sess_who(s), s->client_key[0] != 0, s->client, s->client_addr};
    s_refuse(n, &c, code, s->rid, 0, text);
}

void head_resend_step(node_t *n, double now)
{
    node_head_t *h = n->head;
    if (!h->resend_pending)
        return;
    int left = HEAD_RESEND_PASS, pending = 0;
    for (int i = 0; i < h->n_slots; i++) {
        head_sess_t *s = &h->sess[i];
        if (s->state == HEAD_FREE || s->resend_at < 0)
            continue;
        sw_bucket_t *b =
            sw_bucket_get(h->resend, h->n_slots, head_sess_who(s), SW_HEAD_RESEND_CHUNKS_S, now);
        const int budget = SW_HEAD_RESEND_PER_REQUEST * s->n_chunks + 64;
        while (s->resend_at < s->n_chunks && b->level >= 1 && left > 0 && s->resent < budget) {
            s_send_chunk(n, s, &s->chunks[s->resend_at++]);
            b->level -= 1;
            s->resent++;
            left--;
        }
        if (s->resend_at >= s->n_chunks || s->resent >= budget)
            s->resend_at = -1;
        else
            pending = 1;
    }
    h->resend_pending = pending;
}
