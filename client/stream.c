/*
 * stream.c - a request's stream of TokenChunks: in order (a gap asks the head
 * to send again, a chunk held already is dropped), the tokens kept for a
 * failover, the detokenized text held back while it may still become a stop
 * string, and the final chunk with the head's statistics.
 */
#include "client_impl.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int s_text_reserve(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 256;
    while (n < need)
        n *= 2;
    char *t = realloc(*buf, n);
    if (!t)
        return -1;
    *buf = t;
    *cap = n;
    return 0;
}

/*
 * Appends text to r's hold-back buffer and moves what can no longer become
 * a stop string into the event's text. 1 when a stop string was found (the
 * text before it is released, the rest dropped), 0 otherwise, -1 on OOM.
 */
static int s_release(sw_client_t *c, client_req_t *r, const char *text, size_t len, int final,
                     size_t *out_len)
{
    *out_len = 0;
    if (s_text_reserve(&r->text, &r->text_cap, r->text_len + len + 1) != 0)
        return -1;
    if (len)
        memcpy(r->text + r->text_len, text, len);
    r->text_len += len;
    size_t keep = 0, cut = r->text_len;
    int hit = 0;
    for (int i = 0; i < r->n_stop; i++) {
        const char *s = r->stop[i];
        size_t sl = strlen(s);
        /* the earliest full occurrence */
        for (size_t p = 0; p + sl <= r->text_len && p < cut; p++)
            if (!memcmp(r->text + p, s, sl)) {
                cut = p;
                hit = 1;
                break;
            }
    }
    if (!hit && !final) {
        /* the longest tail that is a proper prefix of some stop string stays held */
        for (int i = 0; i < r->n_stop; i++) {
            size_t sl = strlen(r->stop[i]);
            for (size_t k = sl - 1; k > keep; k--)
                if (k <= r->text_len && !memcmp(r->text + r->text_len - k, r->stop[i], k)) {
                    keep = k;
                    break;
                }
        }
        cut = r->text_len - keep;
    }
    if (s_text_reserve(&c->ev_text, &c->ev_text_cap, cut + 1) != 0)
        return -1;
    memcpy(c->ev_text, r->text, cut);
    c->ev_text[cut] = 0;
    *out_len = cut;
    if (hit) {
        r->text_len = 0;
        return 1;
    }
    memmove(r->text, r->text + cut, r->text_len - cut);
    r->text_len -= cut;
    return 0;
}

/* A count from the head, which may be any uint32: kept in [0, INT_MAX]. */
static int s_count(uint32_t n)
{
    return n > INT_MAX ? INT_MAX : (int)n;
}

static void s_copy_stats(sw_client_stats_t *s, const sw_msg_stats_t *st)
{
    s->have_head = 1;
    s->n_prompt = s_count(st->n_prompt);
    s->n_generated = s_count(st->n_generated);
    s->n_rounds = s_count(st->n_rounds);
    s->n_drafted = s_count(st->n_drafted);
    s->n_accepted = s_count(st->n_accepted);
    s->prompt_ms = st->prompt_ms;
    s->decode_ms = st->decode_ms;
    s->head_ttft_ms = st->ttft_ms;
    s->draft_ms = st->draft_ms;
    s->draft_ahead_ms = st->draft_ahead_ms;
    s->n_ahead_hits = s_count(st->n_ahead_hits);
    s->n_ahead_misses = s_count(st->n_ahead_misses);
    s->n_tree_rounds = s_count(st->n_tree_rounds);
    s->n_kv_moves = s_count(st->n_kv_moves);
    s->n_prefix_reused = s_count(st->n_prefix_reused);
    s->head_compute_ms = st->head_ms;
    s->network_ms = st->network_ms;
    s->overlap_ms = st->overlap_ms;
    s->logits_digest = st->logits_digest;
    s->n_stages = 0;
    for (uint32_t i = 0; i < st->n_stages && i < SW_CLIENT_MAX_STAGES; i++) {
        snprintf(s->stages[i].name, sizeof s->stages[i].name, "%s", st->stages[i].name);
        s->stages[i].compute_ms = st->stages[i].compute_us / 1e3;
        s->stages[i].critical_ms = st->stages[i].critical_us / 1e3;
        s->n_stages++;
    }
}

/* One TokenChunk for r. 0 with *ev filled, 1 when it makes no event. */
int client_on_chunk(sw_client_t *c, client_req_t *r, const sw_msg_chunk_t *tc,
                    sw_client_event_t *ev)
{
    const double now = client_now_ms();
    if (tc->n_tokens && tc->index < (uint32_t)r->stats.n_generated)
        return 1; /* a chunk we hold already (the head resent it) */
    memset(ev, 0, sizeof *ev);
    memcpy(ev->id, r->id, sizeof ev->id);
    if (tc->index > (uint32_t)r->stats.n_generated) {
        /* a gap (chunks lost on the way, e.g. with a relay restart): ask the
         * head for the rest, once per CLIENT_RESUME_GAP_MS while later chunks keep
         * coming; this one comes again in order */
        if (!r->resume_at)
            r->resume_at = r->resumed_at + CLIENT_RESUME_GAP_MS > now
                               ? r->resumed_at + CLIENT_RESUME_GAP_MS
                               : now;
        return 1;
    }
    if (tc->n_tokens)
        r->reask_at = 0; /* the request goes on at its head: a later end is this one's */
    if (tc->n_tokens && !r->stats.ttft_ms)
        r->stats.ttft_ms = now - r->t_submit;
    if (r->q.n_predict && (size_t)r->stats.n_generated + tc->n_tokens > r->toks_cap) {
        size_t cap = r->toks_cap ? r->toks_cap : 256;
        while (cap < (size_t)r->stats.n_generated + tc->n_tokens)
            cap *= 2;
        uint32_t *grown = realloc(r->toks, cap * sizeof *grown);
        if (grown) {
            r->toks = grown;
            r->toks_cap = cap;
        } else {
            r->q.n_predict = 0; /* out of memory: no failover for this one */
        }
    }
    for (uint32_t i = 0; i < tc->n_tokens; i++) {
        c->ev_tokens[i] = tc->tokens[i];
        if (r->q.n_predict)
            r->toks[r->stats.n_generated + i] = tc->tokens[i];
    }
    ev->tokens = c->ev_tokens;
    ev->n_tokens = (int)tc->n_tokens;
    r->stats.n_generated += (int)tc->n_tokens;
    size_t n = 0;
    int hit = s_release(c, r, (const char *)tc->text, tc->text_len, tc->done, &n);
    if (hit < 0) {
        client_end_error(c, r, ev, SW_CLIENT_ENOMEM, 0, "out of memory");
        return 0;
    }
    ev->text = c->ev_text;
    ev->text_len = n;
    if (hit) {
        if (!tc->done)
            client_send_cancel(c, r, "a stop string was generated");
        ev->type = SW_CLIENT_EV_DONE;
        ev->finish = SW_CLIENT_FINISH_STOP;
        client_finish(c, r, ev);
        return 0;
    }
    if (!tc->done) {
        ev->type = SW_CLIENT_EV_TOKENS;
        return 0;
    }
    if (tc->finish == SW_FINISH_CANCELLED) {
        /* we did not cancel it (that slot would be free): the head did, e.g. it
         * took us for gone while our link to the relay was down. It is asked
         * again from the tokens we hold (as in a failover: the rest equals the
         * uninterrupted run's); the old end, sent again for our Resumes, may
         * still be on the way when the new request runs. */
        if (r->reask_at && now - r->reask_at < CLIENT_REASK_STALE_MS)
            return 1;
        if (client_reask(c, r, now) == 0)
            return 1;
        client_end_error(c, r, ev, SW_CLIENT_ECANCELLED, 0, "the head '%s' cancelled the request",
                         r->head);
        return 0;
    }
    if (tc->finish == SW_FINISH_ERROR) {
        /* the head sends its Error first; this is the end of a request whose Error was lost */
        client_end_error(c, r, ev, SW_CLIENT_EHEAD, 0,
                         "the head '%s' reports that the request failed", r->head);
        return 0;
    }
    const int got = r->stats.n_generated;
    if (tc->has_stats)
        s_copy_stats(&r->stats, &tc->stats);
    if (tc->has_stats && tc->stats.n_generated != (uint32_t)got) {
        client_end_error(
            c, r, ev, SW_CLIENT_ELOST, 0,
            "received %d of the %u generated tokens (a message was lost on the way; the "
            "relay may have restarted)",
            got, tc->stats.n_generated);
        return 0;
    }
    ev->type = SW_CLIENT_EV_DONE;
    ev->finish = tc->finish == SW_FINISH_EOS        ? SW_CLIENT_FINISH_EOS
                 : tc->finish == SW_FINISH_STOP     ? SW_CLIENT_FINISH_STOP
                 : tc->finish == SW_FINISH_DEADLINE ? SW_CLIENT_FINISH_DEADLINE
                                                    : SW_CLIENT_FINISH_LENGTH;
    client_finish(c, r, ev);
    return 0;
}
