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
 * session after a failure, or to wait; this file does the sending and turns
 * messages into events. Per session:
 *
 *   ROUTE   admitted, waiting for a peer table to build its route
 *   RUN     rounds: a round is prepared (drafting happens then), its rows run
 *           through this stage's layers in the head's batch (one engine call
 *           for every session with rows to send) and go to the next stage as
 *           Forwards; the Verdict commits tokens, which stream to the client
 *           as TokenChunks; a failure sends recover.c into its route wait and
 *           replay, all without stopping the other sessions
 *   LINGER  finished: its TokenChunks are kept a while for a Resume
 *
 * Nothing here waits for a message: handlers change state and send; timers
 * (round timeouts, route checks, deadlines, status polls) are looked at in
 * node_head_step(). The relay is asked for its peer table once a second
 * while sessions run (routes for new requests, route checks of late rounds,
 * clients that vanished) and every 2.5 s while idle (so that a new request
 * finds a fresh route), never in the round itself.
 *
 * Streaming never loses a token: every chunk a session sent is kept (tokens,
 * text, index) until the request ends and S_LINGER_MS after; a client that
 * sees a gap, reconnects or hears nothing asks with Resume from the last
 * index it holds and gets the chunks again (it drops duplicates by index).
 *
 * A client's Cancel, a client that left the relay, and a request's deadline
 * end its session at once: the stages get a SessionClose in the same pass.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "chat.h"
#include "drafter.h"
#include "head.h"
#include "log.h"
#include "node.h"
#include "recover.h"
#include "tokenizer.h"

#define S_LINGER_MS 60000      // a finished request's chunks are kept this long for a Resume
#define S_LINGER_MAX 64        // finished requests kept at most (the oldest go first)
#define S_STATUS_MS 1000       // peer-table period while sessions run or wait
#define S_STATUS_LOST_MS 3000  // a status query unanswered this long is asked again
#define S_ROUTE_FRESH_MS 5000  // a route built from a table this recent serves a new request
#define S_CHECK_MS 1000        // while a verdict is late: route checks this often
#define S_CLIENT_GRACE_MS 5000 // a client is only judged gone by a relay up this long
#define S_CLIENT_GONE_MS 1500  // ... and missing from its tables for this long
#define S_RESUME_MS 100        // one request's Resumes served this often at most
#define S_SUSPECT_MAX 16       // stages remembered on routes whose round timed out
#define S_SUSPECT_MS 600000    // ... and avoided this long where another stage can serve

enum s_state { S_FREE = 0, S_ROUTE, S_RUN, S_LINGER };

typedef struct s_route {
    int n; // stages, head included
    char names[SW_WIRE_MAX_ROUTE][SW_WIRE_NAME_MAX + 1];
} s_route_t;

/* One TokenChunk as it was sent, for a Resume. */
typedef struct s_chunk {
    uint32_t index;  // first token (into the session's toks)
    uint32_t n;      // tokens
    size_t text_at;  // its text in the session's text buffer
    size_t text_len; //
    int finish;      // FINISH_* (NONE but for the last chunk)
} s_chunk_t;

typedef struct s_sess {
    int state;                         // S_*
    node_t *n;                         // the node (for callbacks)
    uint64_t id;                       // session id at the stages
    char client[SW_WIRE_NAME_MAX + 1]; // who asked (tokens stream there)
    char rid[SW_WIRE_NAME_MAX + 1];    // its request_id
    double t_start;                    // the request reached the head (ms)
    double t_gen;                      // the session started (ms)
    double deadline;                   // absolute, 0 = none
    sw_sampling_t sp;                  // the verifier's sampling, as sent to the tail
    int32_t *prompt;                   // (n_prompt) tokens
    int n_prompt, n_predict;           //
    int n_ctx;                         // positions the session may reach
    draft_t *drafter;                  // its proposer
    sw_proposer_t proposer;            //
    sw_gen_t *gen;                     // the round logic (decode.h)
    int logged;                        // 1 when the current round is logged in rec
    sw_kv_t *kv;                       // this stage's cache for it
    size_t kv_bytes;                   // its memory
    sw_verifier_t *ver;                // route of one stage: the head verifies itself
    node_recover_t *rec;               // the round log and recovery (recover.h)
    s_route_t route;                   // head .. tail
    int opened;                        // 1 once a Forward went out (stages may hold it)
    uint64_t round_no;                 // last round number used
    int send_idx;                      // logged round being sent, -1 = none
    int send_row;                      // its rows computed and sent so far
    int send_chunks;                   // its Forwards so far
    uint64_t send_round;               // its round number
    sw_round_t send_r;                 // its rows (pointing into rec)
    sw_draft_q_t send_q[SW_MAX_DRAFT]; // and draft distributions
    int32_t send_tp[SW_MAX_DRAFT + 1]; // tree rounds: the slot each row hangs under
    double t_round;                    // the current round's first chunk went out
    double t_limit;                    // no verdict by then: recover
    double t_check;                    // verdict late: route check then
    int want_route;                    // recovery asked for the route
    int want_check;                    // a route check is due with the next table
    double client_missing;             // since when the client seems gone (0 = present)
    sw_detok_t *detok;                 // token -> text
    int32_t *toks;                     // (n_predict) tokens streamed
    uint32_t n_streamed;               //
    s_chunk_t *chunks;                 // (cap_chunks) every chunk sent
    int n_chunks, cap_chunks;          //
    char *text;                        // (text_cap) their text
    size_t text_len, text_cap;         //
    int finish;                        // FINISH_* once the request ended
    int err_code;                      // ERROR / DEADLINE: the Error sent
    char err[SW_WIRE_MAX_ERROR_TEXT];  //
    /* the final chunk's stats */
    sw_msg_stats_t stats;
    int have_stats;                        //
    double t_end;                          // the request ended (ms)
    double t_resume;                       // last Resume served
    double head_ms, stage_ms, net_ms;      // totals over the request
    double stage_total[SW_WIRE_MAX_ROUTE]; // compute per stage (ms)
    double round_head_ms;                  // the current round's compute: head
    double round_stage_ms;                 // and stages
} s_sess_t;

/* A request waiting for a session slot. */
typedef struct s_wait {
    sw_wire_msg_t msg;     // the GenerateRequest
    sw_msg_generate_t g;   // msg decoded (views into it)
    double t_arrive;       // ms
    double client_missing; // since when its client seems gone (0 = present)
} s_wait_t;

struct node_head {
    sw_tokenizer_t *tok;   // from the model's GGUF
    draft_model_t *dmodel; // --draft-model, or NULL
    s_sess_t *sess;        // (n_slots) sessions: running ones and lingering ones
    int n_slots;           // --max-sessions + S_LINGER_MAX
    int n_active;          // sessions in ROUTE or RUN
    size_t kv_used;        // bytes of their caches
    s_wait_t *queue;       // (--max-queue) ring of waiting requests
    int q_head, q_len;     //
    s_route_t route;       // the route built from the last peer table
    int route_ok;          // 1 when that table had a whole pipeline
    int route_code;        // else the error code
    char route_err[512];   // and why
    double route_ms;       // when (0 = never)
    sw_wire_msg_t table;   // that table (its counters are new sessions' route baseline)
    int status_out;        // a status query is unanswered
    double status_sent;    // when it went
    double status_next;    // the next periodic one
    int status_want;       // one is wanted as soon as possible
    float *bout;           // (rows_cap, n_embd) hidden states of the head's batch
    float *logits;         // (logit rows, n_vocab): a route of one stage verifies here
    int logit_rows;        //
    int busy;              // 1 when node_head_step left work for the next pass
    int rr;                // where the next batch starts (round robin)
    struct {
        char name[SW_WIRE_NAME_MAX + 1];
        double until;         // avoided until then (0 = free entry)
    } suspect[S_SUSPECT_MAX]; // stages of routes whose round got no verdict in time
};

/* ---- small helpers ------------------------------------------------------------------------ */

static void s_send_error(node_t *n, const char *dest, int code, const char *request_id,
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

static void s_want_status(node_head_t *h)
{
    h->status_want = 1;
}

static int s_route_has(const s_route_t *r, const char *name)
{
    for (int i = 1; i < r->n; i++)
        if (!strcmp(r->names[i], name))
            return 1;
    return 0;
}

/* A last chunk with no tokens (done, finish): for requests with no record. */
static void s_final_chunk(node_t *n, const char *dest, const char *rid, uint32_t index, int finish)
{
    const sw_msg_t tc = {
        .type = SW_MSG_TOKEN_CHUNK,
        .chunk = {.request_id = rid, .index = index, .done = 1, .finish = (sw_finish_t)finish},
    };
    if (sw_peer_try_send_msg(n->peer, dest, &tc) != 0)
        SW_DEBUG("request '%s': could not send the final chunk to %s", rid, dest);
}

/* ---- life cycle ---------------------------------------------------------------------------- */

int node_head_new(node_t *n, char *err, size_t err_len)
{
    node_head_t *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    h->tok = sw_tokenizer_from_gguf(sw_model_gguf(n->model), err, err_len);
    if (!h->tok)
        goto fail;
    h->n_slots = n->o.max_sessions + S_LINGER_MAX;
    h->sess = calloc((size_t)h->n_slots, sizeof *h->sess);
    h->queue = calloc((size_t)(n->o.max_queue > 0 ? n->o.max_queue : 1), sizeof *h->queue);
    h->bout = malloc((size_t)n->rows_cap * n->hp->n_embd * sizeof(float));
    if (sw_model_is_last(n->model)) {
        /* a node holding every layer verifies itself: logits of every
         * session's last rows in one batch */
        h->logit_rows = n->logit_cap;
        h->logits = malloc((size_t)h->logit_rows * n->hp->n_vocab * sizeof(float));
    }
    if (!h->sess || !h->queue || !h->bout || (sw_model_is_last(n->model) && !h->logits)) {
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
    }
    n->head = h;
    return 0;
fail:
    draft_model_free(&h->dmodel);
    sw_tokenizer_free(&h->tok);
    free(h->sess);
    free(h->queue);
    free(h->bout);
    free(h->logits);
    free(h);
    return -1;
}

/* Frees what a session holds but its record of what it streamed. */
static void s_release(node_head_t *h, s_sess_t *s)
{
    if (s->kv) {
        h->kv_used -= s->kv_bytes;
        sw_kv_free(&s->kv);
    }
    if (s->state == S_ROUTE || s->state == S_RUN)
        h->n_active--;
    sw_gen_free(&s->gen);
    draft_free(&s->drafter);
    sw_verifier_free(&s->ver);
    node_recover_free(&s->rec);
    sw_detok_free(&s->detok);
    free(s->prompt);
    s->prompt = NULL;
}

static void s_forget(node_head_t *h, s_sess_t *s)
{
    s_release(h, s);
    free(s->toks);
    free(s->chunks);
    free(s->text);
    memset(s, 0, sizeof *s);
}

static void s_close_stages(node_t *n, s_sess_t *s, const char *why)
{
    if (s->route.n < 2 || !s->opened)
        return;
    const sw_msg_t sc = {.type = SW_MSG_SESSION_CLOSE,
                         .session_close = {.session_id = s->id, .reason = why}};
    for (int i = 1; i < s->route.n; i++)
        if (sw_peer_try_send_msg(n->peer, s->route.names[i], &sc) != 0)
            SW_DEBUG("could not close the session on %s", s->route.names[i]);
}

void node_head_free(node_t *n)
{
    node_head_t *h = n->head;
    if (!h)
        return;
    for (int i = 0; i < h->n_slots; i++) {
        s_sess_t *s = &h->sess[i];
        if ((s->state == S_ROUTE || s->state == S_RUN) && n->peer) {
            s_send_error(n, s->client, SW_ERROR_INTERNAL, s->rid, s->id, 0,
                         "the head is shutting down");
            s_close_stages(n, s, "head shutting down");
        }
        s_forget(h, s);
    }
    for (int i = 0; i < h->q_len; i++) {
        s_wait_t *w = &h->queue[(h->q_head + i) % n->o.max_queue];
        if (n->peer)
            s_send_error(n, w->msg.peer, SW_ERROR_INTERNAL, w->g.request_id, 0, (uint32_t)(i + 1),
                         "the head is shutting down");
        sw_wire_msg_clear(&w->msg);
    }
    sw_wire_msg_clear(&h->table);
    draft_model_free(&h->dmodel);
    sw_tokenizer_free(&h->tok);
    free(h->sess);
    free(h->queue);
    free(h->bout);
    free(h->logits);
    free(h);
    n->head = NULL;
}

/* ---- streaming -------------------------------------------------------------------------------
 */

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

/* Sends chunk c of s (again, for a Resume). */
static void s_send_chunk(node_t *n, s_sess_t *s, const s_chunk_t *c)
{
    sw_msg_t msg = {.type = SW_MSG_TOKEN_CHUNK};
    sw_msg_chunk_t *tc = &msg.chunk;
    tc->request_id = s->rid;
    tc->index = c->index;
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
    if (sw_peer_try_send_msg(n->peer, s->client, &msg) != 0)
        SW_DEBUG("request '%s': a chunk to %s was not sent (the client resumes)", s->rid,
                 s->client);
}

/* Records and sends the next chunk: tokens (n_tok of them) with their text,
 * finish NONE until the last. 0 or -1 (out of memory). */
static int s_emit(node_t *n, s_sess_t *s, const int32_t *tokens, int n_tok, const char *text,
                  size_t len, int finish)
{
    size_t cap_chunks = (size_t)s->cap_chunks;
    size_t cap_toks = (size_t)s->n_predict + 1;
    if (s_grow((void **)&s->chunks, &cap_chunks, (size_t)s->n_chunks + 1, sizeof *s->chunks) ||
        s_grow((void **)&s->text, &s->text_cap, s->text_len + len + 1, 1) ||
        s->n_streamed + (uint32_t)n_tok > cap_toks)
        return -1;
    s->cap_chunks = (int)cap_chunks;
    s_chunk_t *c = &s->chunks[s->n_chunks++];
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
static int s_on_tokens(void *ctx, const int32_t *tokens, int n_tok)
{
    s_sess_t *s = ctx;
    char text[SW_WIRE_MAX_CHUNK_TEXT];
    size_t len = 0;
    for (int i = 0; i < n_tok; i++) {
        const char *piece;
        size_t pl;
        if (sw_detok_push(s->detok, tokens[i], &piece, &pl) != 0)
            return 1;
        if (len + pl <= sizeof text) {
            memcpy(text + len, piece, pl);
            len += pl;
        }
    }
    return s_emit(s->n, s, tokens, n_tok, text, len, SW_FINISH_NONE) != 0;
}

static int s_is_eog(void *ctx, int32_t token)
{
    return sw_tokenizer_is_eog((const sw_tokenizer_t *)ctx, token);
}

/* ---- ending a request ---------------------------------------------------------------------- */

static void s_fill_stats(s_sess_t *s, const sw_gen_stats_t *gs)
{
    sw_msg_stats_t *st = &s->stats;
    memset(st, 0, sizeof *st);
    st->n_prompt = (uint32_t)gs->n_prompt;
    st->n_generated = (uint32_t)gs->n_gen;
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
    for (int i = 1; i < s->route.n; i++) {
        st->stages[i - 1].name = s->route.names[i];
        st->stages[i - 1].compute_us = (uint32_t)(s->stage_total[i] * 1e3);
    }
    st->n_stages = (uint32_t)(s->route.n > 1 ? s->route.n - 1 : 0);
    st->logits_digest = gs->logits_digest;
    s->have_stats = 1;
}

/* Ends a running (or routing) session: the client gets the final chunk (and
 * an Error first when it failed), the stages a SessionClose; its memory
 * goes back and its chunks stay a while for a Resume. */
static void s_end(node_t *n, s_sess_t *s, int finish, int code, const char *why)
{
    node_head_t *h = n->head;
    const char *tail = NULL;
    size_t tl = 0;
    if (s->detok && (finish == SW_FINISH_LENGTH || finish == SW_FINISH_EOS) &&
        sw_detok_flush(s->detok, &tail, &tl) != 0)
        tl = 0;
    if (s->gen && (finish == SW_FINISH_LENGTH || finish == SW_FINISH_EOS))
        s_fill_stats(s, sw_gen_stats(s->gen));
    s->finish = finish;
    if (finish == SW_FINISH_ERROR || finish == SW_FINISH_DEADLINE) {
        s->err_code = code;
        snprintf(s->err, sizeof s->err, "%s", why);
        SW_WARN("request '%s' from %s failed: %s (%s)", s->rid, s->client, why,
                sw_wire_error_code_name(code));
        s_send_error(n, s->client, code, s->rid, s->id, 0, why);
    } else if (finish == SW_FINISH_CANCELLED) {
        SW_INFO("request '%s' from %s ended: %s", s->rid, s->client, why);
    } else {
        const sw_gen_stats_t *gs = sw_gen_stats(s->gen);
        SW_INFO("request '%s' done: %d tokens in %d rounds (%d of %d drafts accepted)", s->rid,
                gs->n_gen, gs->rounds, gs->accepted, gs->drafted);
    }
    if (!s->toks || s_emit(n, s, NULL, 0, tail, tl, finish) != 0)
        s_final_chunk(n, s->client, s->rid, s->n_streamed, finish); // no record to keep
    s_close_stages(n, s,
                   finish == SW_FINISH_CANCELLED  ? "cancelled"
                   : finish == SW_FINISH_ERROR    ? "failed"
                   : finish == SW_FINISH_DEADLINE ? "deadline"
                                                  : "done");
    s_release(h, s);
    s->state = S_LINGER;
    s->t_end = sw_now_ms();
    h->busy = 1; // a slot is free: the queue may move
}

/* ---- routes ----------------------------------------------------------------------------------
 */

/* 1 when the head must route only to key-bound nodes (a keyed relay binds
 * node keys to names; a loopback relay without keys binds nothing). */
static int s_need_key(const node_t *n)
{
    return n->o.sec && !n->o.sec->insecure;
}

/* A stage of a route whose round got no verdict in time: connected and
 * heartbeating but silent (a compromised member that swallows Forwards looks
 * like the quietest, least busy stage), or merely slow. Which stage of the
 * route it was cannot be told from here, so all of them are remembered. */
static void s_suspect_add(node_head_t *h, const char *name, double now)
{
    int at = 0;
    for (int i = 0; i < S_SUSPECT_MAX; i++) {
        if (!strcmp(h->suspect[i].name, name)) {
            at = i;
            break;
        }
        if (h->suspect[i].until < h->suspect[at].until)
            at = i; // a free entry (0) or the one that expires first
    }
    snprintf(h->suspect[at].name, sizeof h->suspect[at].name, "%s", name);
    h->suspect[at].until = now + S_SUSPECT_MS;
}

static int s_suspect(const node_head_t *h, const char *name, double now)
{
    for (int i = 0; i < S_SUSPECT_MAX; i++)
        if (h->suspect[i].until > now && !strcmp(h->suspect[i].name, name))
            return 1;
    return 0;
}

/* 1 when a (sa: a suspect) makes a better next stage than the pick so far b
 * (sb): not a suspect, then reaching furthest, then quiet longest (idle_ms),
 * then by name. */
static int s_better(const sw_msg_peer_t *a, int sa, const sw_msg_peer_t *b, int sb)
{
    if (!b)
        return 1;
    if (sa != sb)
        return sa < sb;
    if (a->announce.layer_end != b->announce.layer_end)
        return a->announce.layer_end > b->announce.layer_end;
    if (a->idle_ms != b->idle_ms)
        return a->idle_ms > b->idle_ms;
    return strcmp(a->announce.name, b->announce.name) < 0;
}

/* Builds head -> ... -> tail from a peer table: from the end of this stage's
 * range, the next stage is a key-bound node (sw_codec_peer_routable) whose
 * range begins there: the one whose range reaches furthest, then the one
 * quiet longest (idle_ms: the least busy), then by name only between exact
 * equals, so that nobody gets picked for the name it chose. Peers that are
 * not key-bound are never routed to (a client key cannot announce as a node
 * at a keyed relay anyway). Refuses gaps, overlaps and other models with a
 * message naming the peer and the error code a client gets (*code):
 * ERR_MODEL_MISMATCH for another model file, ERR_UNKNOWN_DEST when no
 * connected stage begins where the previous one ends (a gap, or an overlap),
 * ERR_INTERNAL for a route longer than the protocol allows; 0 or -1. With
 * avoid, a suspect stage (s_suspect) is taken only where no other serves. */
static int s_build_route_ex(node_t *n, const sw_msg_table_t *pt, int avoid, s_route_t *r, int *code,
                            char *err, size_t err_len)
{
    const double now = sw_now_ms();
    *code = SW_ERROR_UNKNOWN_DEST;
    memset(r, 0, sizeof *r);
    snprintf(r->names[0], sizeof r->names[0], "%s", sw_peer_name(n->peer));
    r->n = 1;
    const uint32_t L = (uint32_t)n->hp->n_layer;
    const int need_key = s_need_key(n);
    uint32_t at = (uint32_t)sw_model_layer_end(n->model);
    while (at < L) {
        sw_msg_peer_t pick_buf;
        const sw_msg_peer_t *pick = NULL;
        int pick_suspect = 0, unbound = 0;
        for (uint32_t i = 0; i < pt->n_peers; i++) {
            sw_msg_peer_t info;
            if (sw_codec_peer_at(pt, i, &info) != 0)
                continue;
            const sw_msg_peer_t *pi = &info;
            const sw_msg_announce_t *a = &info.announce;
            if (a->role != SW_ROLE_MIDDLE && a->role != SW_ROLE_TAIL)
                continue;
            if (a->layer_begin != at)
                continue;
            if (!sw_codec_peer_routable(pi, need_key)) {
                unbound++;
                continue;
            }
            if (strcmp(a->model_fingerprint, n->fingerprint) != 0 || a->n_layers != L) {
                snprintf(err, err_len,
                         "peer '%s' serves layers [%u, %u) of a different model file "
                         "(fingerprint %.12s..., this head has %.12s...): start it with "
                         "the same GGUF",
                         a->name, a->layer_begin, a->layer_end, a->model_fingerprint,
                         n->fingerprint);
                *code = SW_ERROR_MODEL_MISMATCH;
                return -1;
            }
            const int sa = avoid && s_suspect(n->head, a->name, now);
            if (s_better(pi, sa, pick, pick_suspect)) {
                pick_buf = info;
                pick = &pick_buf;
                pick_suspect = sa;
            }
        }
        if (!pick) {
            for (uint32_t i = 0; i < pt->n_peers; i++) {
                sw_msg_peer_t info;
                if (sw_codec_peer_at(pt, i, &info) != 0)
                    continue;
                const sw_msg_announce_t *a = &info.announce;
                if (a->n_layers == L && a->layer_begin < at && a->layer_end > at &&
                    sw_codec_peer_routable(&info, need_key) &&
                    (a->role == SW_ROLE_MIDDLE || a->role == SW_ROLE_TAIL)) {
                    snprintf(err, err_len,
                             "layer ranges overlap: peer '%s' serves [%u, %u) but the stage "
                             "before it ends at layer %u: restart it with --layers %u:%u",
                             a->name, a->layer_begin, a->layer_end, at, at, a->layer_end);
                    return -1;
                }
            }
            snprintf(err, err_len,
                     "gap in the pipeline: no connected%s node serves layer %u (of %u); start "
                     "one with --layers %u:END%s",
                     need_key ? " key-bound" : "", at, L, at,
                     unbound ? " (a peer there is not bound to its name by a node key in the "
                               "relay's allow-list: 'KEY node NAME')"
                             : "");
            return -1;
        }
        if (r->n == SW_WIRE_MAX_ROUTE) {
            snprintf(err, err_len, "the pipeline has more than %d stages", SW_WIRE_MAX_ROUTE);
            *code = SW_ERROR_INTERNAL;
            return -1;
        }
        snprintf(r->names[r->n++], sizeof r->names[0], "%s", pick->announce.name);
        at = pick->announce.layer_end;
    }
    return 0;
}

/* s_build_route_ex avoiding suspects, and without that when it finds no
 * whole route (a suspect may be the only stage that closes a gap). */
static int s_build_route(node_t *n, const sw_msg_table_t *pt, s_route_t *r, int *code, char *err,
                         size_t err_len)
{
    if (s_build_route_ex(n, pt, 1, r, code, err, err_len) == 0)
        return 0;
    return s_build_route_ex(n, pt, 0, r, code, err, err_len);
}

/* Gives s the head's current route (a fresh table's) and the counter
 * baseline of that table (recover.h). */
static void s_take_route(node_t *n, s_sess_t *s, const sw_msg_table_t *pt)
{
    s->route = n->head->route;
    if (pt)
        node_recover_route_baseline(s->rec, pt, s->route.names, s->route.n);
    if (s->route.n == 1 && !s->ver)
        s->ver = sw_verifier_new(&s->sp, n->hp->n_vocab);
}

/* ---- admission ------------------------------------------------------------------------------ */

/* The drafting of one request: its DraftParams where set, the node's
 * --draft* defaults otherwise. */
static int s_draft_cfg(const node_t *n, const sw_msg_draft_t *dp, const sw_sampling_t *sp,
                       draft_cfg_t *dc, char *err, size_t err_len)
{
    const node_head_t *h = n->head;
    const node_opts_t *o = &n->o;
    memset(dc, 0, sizeof *dc);
    dc->sampling = *sp;
    dc->mode = h->dmodel ? DRAFT_MODE_MODEL : DRAFT_MODE_NONE;
    if (o->draft_mode && draft_mode_parse(o->draft_mode, &dc->mode) != 0)
        dc->mode = DRAFT_MODE_NONE;
    dc->k = o->draft_k;
    dc->k_max = o->draft_k_max;
    dc->p_min = o->draft_p_min;
    dc->tree = o->draft_tree;
    dc->ahead = o->draft_ahead;
    if (!dp)
        goto trees;
    switch (dp->mode) {
    case SW_DRAFT_NONE:
        dc->mode = DRAFT_MODE_NONE;
        break;
    case SW_DRAFT_MODEL:
        if (!h->dmodel) {
            snprintf(err, err_len, "this head has no draft model (start it with --draft-model)");
            return -1;
        }
        dc->mode = DRAFT_MODE_MODEL;
        break;
    case SW_DRAFT_NGRAM:
        dc->mode = DRAFT_MODE_NGRAM;
        break;
    case SW_DRAFT_MIX:
        if (!h->dmodel) {
            snprintf(err, err_len,
                     "this head has no draft model for --draft mix (start it with "
                     "--draft-model)");
            return -1;
        }
        dc->mode = DRAFT_MODE_MIX;
        break;
    default: // DRAFT_AUTO: the head's default
        break;
    }
    if (dp->n_draft > SW_MAX_DRAFT || !(dp->p_min >= 0 && dp->p_min <= 1)) {
        snprintf(err, err_len, "draft parameters out of range (K %u > %d or p_min %g)", dp->n_draft,
                 SW_MAX_DRAFT, (double)dp->p_min);
        return -1;
    }
    if (dp->n_draft > 0)
        dc->k = (int)dp->n_draft;
    if (dp->p_min > 0)
        dc->p_min = dp->p_min;
    if (dc->mode != DRAFT_MODE_NONE && dc->k == 0 && dp->mode != SW_DRAFT_AUTO)
        dc->k = DRAFT_K_AUTO; // a proposer asked for by name with the head's K off
    if (dp->tree > SW_MAX_DRAFT) {
        snprintf(err, err_len, "a token tree of %u drafts (at most %d)", dp->tree, SW_MAX_DRAFT);
        return -1;
    }
    if (dp->tree > 0)
        dc->tree = (int)dp->tree;
    if (dp->ahead != SW_AHEAD_DEFAULT)
        dc->ahead = dp->ahead == SW_AHEAD_ON;
trees:
    /* This stage runs the tree rows too: a backend without trees gets chains
     * (a later stage without them refuses a tree round, naming itself). */
    if (dc->tree > 1 && !sw_model_trees(n->model))
        dc->tree = 0;
    return 0;
}

static s_sess_t *s_free_slot(node_head_t *h)
{
    s_sess_t *oldest = NULL;
    for (int i = 0; i < h->n_slots; i++) {
        s_sess_t *s = &h->sess[i];
        if (s->state == S_FREE)
            return s;
        if (s->state == S_LINGER && (!oldest || s->t_end < oldest->t_end))
            oldest = s;
    }
    if (oldest) // a finished request's record makes room
        s_forget(h, oldest);
    return oldest;
}

enum { S_STARTED = 0, S_WAIT_MEMORY = 1, S_REFUSED = -1 };

/* Starts a session for request msg (which stays the caller's): S_STARTED,
 * S_WAIT_MEMORY (the KV cache does not fit now, it will when others end) or
 * S_REFUSED (the client got an Error). */
static int s_start(node_t *n, const sw_wire_msg_t *msg, double t_arrive)
{
    node_head_t *h = n->head;
    sw_msg_t d;
    if (sw_codec_decode(msg, SW_MSG_GENERATE, &d, NULL, 0) != 0)
        return S_REFUSED;
    const sw_msg_generate_t *g = &d.generate;
    char err[512] = "";
    int code = SW_ERROR_BAD_REQUEST;
    int32_t *prompt = NULL;
    char *chat_text = NULL;
    s_sess_t *s = NULL;

    /* absent sampling reads as all 0 (greedy): codec.h */
    const sw_sampling_t sp = g->sampling;
    if (sw_sampling_check(&sp) != 0) {
        snprintf(err, sizeof err, "invalid sampling parameters");
        goto fail;
    }
    int n_prompt = 0;
    if (g->n_prompt_tokens) {
        prompt = malloc(g->n_prompt_tokens * sizeof *prompt);
        if (!prompt)
            goto oom;
        for (uint32_t i = 0; i < g->n_prompt_tokens; i++) {
            if (g->prompt_tokens[i] >= (uint32_t)n->hp->n_vocab) {
                snprintf(err, sizeof err, "prompt token %u is outside the vocabulary",
                         g->prompt_tokens[i]);
                goto fail;
            }
            prompt[i] = (int32_t)g->prompt_tokens[i];
        }
        n_prompt = (int)g->n_prompt_tokens;
    } else {
        const char *text = g->prompt;
        const int chat = g->chat || g->n_messages > 0;
        if (chat) {
            /* A conversation, or the prompt as one user turn (wire.c bounds both). */
            sw_chat_msg_t one = {.role = "user", .content = text};
            sw_chat_msg_t *turns = &one;
            if (g->n_messages > 0) {
                turns = calloc(g->n_messages, sizeof *turns);
                if (!turns)
                    goto oom;
                for (uint32_t i = 0; i < g->n_messages; i++) {
                    sw_msg_turn_t t;
                    if (sw_codec_turn_at(g, i, &t) != 0) { /* wire.c checked every turn */
                        free(turns);
                        snprintf(err, sizeof err, "messages[%u] is unreadable", i);
                        goto fail;
                    }
                    turns[i].role = t.role;
                    turns[i].content = t.content;
                }
            }
            chat_text = sw_chat_format_alloc(sw_model_gguf(n->model), turns,
                                             g->n_messages > 0 ? (int)g->n_messages : 1, 1);
            if (turns != &one)
                free(turns);
            if (!chat_text) {
                snprintf(err, sizeof err, "the model has no usable chat template");
                goto fail;
            }
            text = chat_text;
        }
        /* Stop as soon as the prompt cannot fit: a 2 MiB prompt would otherwise
         * hold the head in the tokenizer for seconds before this is known. */
        const int64_t room = (int64_t)n->o.n_ctx - g->n_predict;
        int trc = room < 1 ? SW_TOK_ERR_TOO_LONG
                           : sw_tokenize_max(h->tok, text, strlen(text), 1, chat, (int)room,
                                             &prompt, &n_prompt);
        if (trc == SW_TOK_ERR_TOO_LONG) {
            snprintf(err, sizeof err,
                     "the prompt (more than %lld tokens) + %u new tokens exceed the %d-position "
                     "context (node --ctx)",
                     (long long)(room > 0 ? room : 0), g->n_predict, n->o.n_ctx);
            goto fail;
        }
        if (trc != 0)
            goto oom;
    }
    if (n_prompt < 1) {
        snprintf(err, sizeof err, "the prompt is empty");
        goto fail;
    }
    if ((int64_t)n_prompt + g->n_predict > n->o.n_ctx) {
        snprintf(err, sizeof err,
                 "%d prompt + %u new tokens exceed the %d-position context (node --ctx)", n_prompt,
                 g->n_predict, n->o.n_ctx);
        goto fail;
    }
    const int n_ctx = n_prompt + (int)g->n_predict;
    const size_t kv_bytes = sw_kv_bytes(n->model, n_ctx);
    if (n->o.kv_bytes > 0 && kv_bytes > (size_t)n->o.kv_bytes) {
        snprintf(err, sizeof err,
                 "%d positions need %.1f MiB of KV cache, more than this head's --kv-mib (%.1f "
                 "MiB)",
                 n_ctx, (double)kv_bytes / (1 << 20), (double)n->o.kv_bytes / (1 << 20));
        goto fail;
    }
    if (n->o.kv_bytes > 0 && h->kv_used + kv_bytes > (size_t)n->o.kv_bytes) {
        free(prompt);
        free(chat_text);
        return S_WAIT_MEMORY;
    }

    s = s_free_slot(h);
    if (!s)
        goto oom; // cannot happen: n_slots > max_sessions
    memset(s, 0, sizeof *s);
    s->n = n;
    s->state = S_ROUTE;
    h->n_active++;
    snprintf(s->client, sizeof s->client, "%s", msg->peer);
    snprintf(s->rid, sizeof s->rid, "%s", g->request_id);
    s->t_start = t_arrive;
    s->t_gen = sw_now_ms();
    s->deadline = g->timeout_ms ? t_arrive + g->timeout_ms : 0;
    s->sp = sp;
    s->prompt = prompt;
    prompt = NULL;
    s->n_prompt = n_prompt;
    s->n_predict = (int)g->n_predict;
    s->n_ctx = n_ctx;
    s->send_idx = -1;
    randombytes_buf(&s->id, sizeof s->id);
    s->id |= 1;
    s->kv = sw_kv_new(n->model, n_ctx);
    s->kv_bytes = kv_bytes;
    if (s->kv)
        h->kv_used += kv_bytes;
    s->rec = node_recover_new(n->o.recover_timeout_ms);
    s->detok = sw_detok_new(h->tok, 0);
    s->toks = malloc(((size_t)s->n_predict + 1) * sizeof *s->toks);
    s->drafter = draft_new(h->dmodel);
    if (!s->kv || !s->rec || !s->detok || !s->toks || !s->drafter)
        goto oom;
    draft_cfg_t dc;
    if (s_draft_cfg(n, g->has_draft ? &g->draft : NULL, &sp, &dc, err, sizeof err) != 0)
        goto fail;
    dc.n_ctx = n_ctx;
    if (draft_begin(s->drafter, &dc, err, sizeof err) != 0)
        goto fail;
    s->proposer = draft_proposer(s->drafter);
    sw_gen_opts_t go = {
        .k = draft_gen_k(s->drafter),
        .proposer = &s->proposer,
        .ahead = dc.ahead,
        .n_predict = s->n_predict,
        .stop_at_eog = 1,
        .on_tokens = s_on_tokens,
        .on_tokens_ctx = s,
        .is_eog = s_is_eog,
        .is_eog_ctx = h->tok,
    };
    s->gen = sw_gen_new(s->prompt, s->n_prompt, &go, err, sizeof err);
    if (!s->gen)
        goto fail;
    char drafting[96] = "no drafting";
    if (draft_gen_k(s->drafter) > 0)
        snprintf(drafting, sizeof drafting, "draft %s, K %s%d%s%s", draft_mode_name(dc.mode),
                 dc.k == DRAFT_K_AUTO ? "adaptive up to " : "", draft_gen_k(s->drafter),
                 dc.tree > 1 ? ", trees" : "", dc.ahead ? ", ahead" : "");
    SW_INFO("request '%s' from %s: %d prompt tokens, %u to generate, %s; %d session(s) "
            "running, %d waiting",
            s->rid, s->client, n_prompt, g->n_predict, drafting, h->n_active, h->q_len);
    /* A route built from a recent table serves at once; else the next table. */
    const double now = sw_now_ms();
    if (h->route_ms && now - h->route_ms < S_ROUTE_FRESH_MS && h->route_ok) {
        sw_msg_t t;
        const int have = sw_wire_msg_type(&h->table) == SW_MSG_PEER_TABLE &&
                         sw_codec_decode(&h->table, SW_MSG_PEER_TABLE, &t, NULL, 0) == 0;
        s_take_route(n, s, have ? &t.table : NULL);
        s->state = S_RUN;
        h->busy = 1;
    } else {
        s_want_status(h);
    }
    free(chat_text);
    return S_STARTED;
oom:
    snprintf(err, sizeof err, "out of memory");
    code = SW_ERROR_INTERNAL;
fail:
    free(prompt);
    free(chat_text);
    if (s) {
        s_end(n, s, SW_FINISH_ERROR, code, err);
    } else {
        SW_WARN("request '%s' from %s refused: %s", g->request_id, msg->peer, err);
        s_send_error(n, msg->peer, code, g->request_id, 0, 0, err);
    }
    return S_REFUSED;
}

/* Sessions running (or routing) for client. */
static int s_client_running(const node_head_t *h, const char *client)
{
    int k = 0;
    for (int i = 0; i < h->n_slots; i++)
        k += (h->sess[i].state == S_ROUTE || h->sess[i].state == S_RUN) &&
             !strcmp(h->sess[i].client, client);
    return k;
}

/* 1 when client may start another session now (its --max-sessions-per-client). */
static int s_client_may_start(const node_t *n, const char *client)
{
    const int quota = n->o.max_sessions_per_client;
    return quota <= 0 || s_client_running(n->head, client) < quota;
}

/* The oldest queued request whose client may start a session now, or -1. */
static int s_queue_next(const node_t *n)
{
    const node_head_t *h = n->head;
    for (int i = 0; i < h->q_len; i++)
        if (s_client_may_start(n, h->queue[(h->q_head + i) % n->o.max_queue].msg.peer))
            return i;
    return -1;
}

void node_head_request(node_t *n, sw_wire_msg_t *msg)
{
    node_head_t *h = n->head;
    sw_msg_t d;
    if (sw_codec_decode(msg, SW_MSG_GENERATE, &d, NULL, 0) != 0)
        return;
    const sw_msg_generate_t *g = &d.generate;
    if (!h) {
        s_send_error(n, msg->peer, SW_ERROR_BAD_REQUEST, g->request_id, 0, 0,
                     "this node is not a head (its layers do not start at 0)");
        return;
    }
    for (int i = 0; i < h->n_slots; i++) {
        const s_sess_t *s = &h->sess[i];
        if ((s->state == S_ROUTE || s->state == S_RUN) && !strcmp(s->client, msg->peer) &&
            !strcmp(s->rid, g->request_id)) {
            s_send_error(n, msg->peer, SW_ERROR_BAD_REQUEST, g->request_id, 0, 0,
                         "a request with this id is already running");
            return;
        }
    }
    const double now = sw_now_ms();
    /* Queued requests that may start go first; a client at its session quota waits in the
     * queue while others' requests pass it. */
    if (h->n_active < n->o.max_sessions && s_queue_next(n) < 0 &&
        s_client_may_start(n, msg->peer)) {
        if (s_start(n, msg, now) != S_WAIT_MEMORY)
            return;
    }
    int mine = 0;
    for (int i = 0; i < h->q_len; i++)
        mine += !strcmp(h->queue[(h->q_head + i) % n->o.max_queue].msg.peer, msg->peer);
    if (n->o.max_queue_per_client > 0 && mine >= n->o.max_queue_per_client) {
        char text[256];
        snprintf(text, sizeof text,
                 "the head holds %d waiting requests of yours already (its "
                 "--max-queue-per-client): retry when one has started",
                 mine);
        SW_WARN("request '%s' from %s refused: %s", g->request_id, msg->peer, text);
        s_send_error(n, msg->peer, SW_ERROR_BUSY, g->request_id, 0, (uint32_t)h->q_len + 1, text);
        return;
    }
    if (h->q_len >= n->o.max_queue) {
        char text[256];
        snprintf(text, sizeof text,
                 "the head is busy: %d requests running and %d waiting (its --max-queue): "
                 "retry later",
                 h->n_active, h->q_len);
        SW_WARN("request '%s' from %s refused: %s", g->request_id, msg->peer, text);
        s_send_error(n, msg->peer, SW_ERROR_BUSY, g->request_id, 0, (uint32_t)h->q_len + 1, text);
        return;
    }
    s_wait_t *w = &h->queue[(h->q_head + h->q_len) % n->o.max_queue];
    memset(w, 0, sizeof *w);
    sw_wire_msg_move(&w->msg, msg);
    w->g = *g; /* its views point into the header, which moved with the message */
    w->t_arrive = now;
    h->q_len++;
    SW_INFO("request '%s' from %s waits (position %d; %d running)", w->g.request_id, w->msg.peer,
            h->q_len, h->n_active);
}

/* Removes queue entry i (0 = the oldest). */
static void s_dequeue(node_t *n, int i)
{
    node_head_t *h = n->head;
    const int Q = n->o.max_queue;
    sw_wire_msg_clear(&h->queue[(h->q_head + i) % Q].msg);
    for (int j = i; j > 0; j--) { // shift the older ones up by one
        s_wait_t *dst = &h->queue[(h->q_head + j) % Q], *src = &h->queue[(h->q_head + j - 1) % Q];
        sw_wire_msg_move(&dst->msg, &src->msg);
        dst->g = src->g;
        dst->t_arrive = src->t_arrive;
        dst->client_missing = src->client_missing;
    }
    h->q_head = (h->q_head + 1) % Q;
    h->q_len--;
}

/* The queue: requests past their deadline get a busy error with their
 * place; the oldest start while slots and memory allow. */
static void s_queue_step(node_t *n, double now)
{
    node_head_t *h = n->head;
    for (int i = 0; i < h->q_len; i++) {
        s_wait_t *w = &h->queue[(h->q_head + i) % n->o.max_queue];
        const sw_msg_generate_t *g = &w->g;
        if (!g->timeout_ms || now - w->t_arrive < g->timeout_ms)
            continue;
        char text[256];
        snprintf(text, sizeof text,
                 "the head stayed busy: the request waited %.0f s at position %d of the queue "
                 "until its deadline (%d requests running)",
                 (now - w->t_arrive) / 1e3, i + 1, h->n_active);
        SW_WARN("request '%s' from %s: %s", g->request_id, w->msg.peer, text);
        s_send_error(n, w->msg.peer, SW_ERROR_BUSY, g->request_id, 0, (uint32_t)i + 1, text);
        s_dequeue(n, i--);
    }
    while (h->q_len > 0 && h->n_active < n->o.max_sessions) {
        const int i = s_queue_next(n); // the oldest whose client is under its session quota
        if (i < 0)
            break;
        s_wait_t *w = &h->queue[(h->q_head + i) % n->o.max_queue];
        int rc = s_start(n, &w->msg, w->t_arrive);
        if (rc == S_WAIT_MEMORY)
            break; // it keeps its place until memory frees up
        s_dequeue(n, i);
    }
}

/* ---- client messages ------------------------------------------------------------------------ */

static s_sess_t *s_find(node_head_t *h, const char *client, const char *rid, int lingering)
{
    for (int i = 0; i < h->n_slots; i++) {
        s_sess_t *s = &h->sess[i];
        if ((s->state == S_ROUTE || s->state == S_RUN || (lingering && s->state == S_LINGER)) &&
            !strcmp(s->client, client) && !strcmp(s->rid, rid))
            return s;
    }
    return NULL;
}

void node_head_cancel(node_t *n, sw_wire_msg_t *msg)
{
    node_head_t *h = n->head;
    sw_msg_t d;
    if (!h || sw_codec_decode(msg, SW_MSG_CANCEL, &d, NULL, 0) != 0)
        return;
    const sw_msg_cancel_t *c = &d.cancel;
    const char *why = c->reason[0] ? c->reason : "no reason given";
    s_sess_t *s = s_find(h, msg->peer, c->request_id, 0);
    if (s) {
        char text[400];
        snprintf(text, sizeof text, "cancelled by the client (%s)", why);
        s_end(n, s, SW_FINISH_CANCELLED, 0, text);
        return;
    }
    for (int i = 0; i < h->q_len; i++) {
        s_wait_t *w = &h->queue[(h->q_head + i) % n->o.max_queue];
        if (strcmp(w->msg.peer, msg->peer) != 0 || strcmp(w->g.request_id, c->request_id) != 0)
            continue;
        SW_INFO("request '%s': cancelled by %s while waiting (%s)", c->request_id, msg->peer, why);
        s_final_chunk(n, msg->peer, c->request_id, 0, SW_FINISH_CANCELLED);
        s_dequeue(n, i);
        return;
    }
}

void node_head_resume(node_t *n, sw_wire_msg_t *msg)
{
    node_head_t *h = n->head;
    sw_msg_t d;
    if (!h || sw_codec_decode(msg, SW_MSG_RESUME, &d, NULL, 0) != 0)
        return;
    const sw_msg_resume_t *r = &d.resume;
    s_sess_t *s = s_find(h, msg->peer, r->request_id, 1);
    if (!s) {
        for (int i = 0; i < h->q_len; i++) // still waiting: nothing to send yet
            if (!strcmp(h->queue[(h->q_head + i) % n->o.max_queue].msg.peer, msg->peer) &&
                !strcmp(h->queue[(h->q_head + i) % n->o.max_queue].g.request_id, r->request_id))
                return;
        s_send_error(n, msg->peer, SW_ERROR_UNKNOWN_SESSION, r->request_id, 0, 0,
                     "the head holds no such request (it ended more than a minute ago, or the "
                     "head restarted)");
        return;
    }
    const double now = sw_now_ms();
    if (now - s->t_resume < S_RESUME_MS)
        return; // a burst of Resumes: the first one is being answered
    s->t_resume = now;
    int sent = 0;
    if (s->finish == SW_FINISH_ERROR || s->finish == SW_FINISH_DEADLINE)
        s_send_error(n, s->client, s->err_code, s->rid, s->id, 0, s->err);
    for (int i = 0; i < s->n_chunks; i++) {
        const s_chunk_t *c = &s->chunks[i];
        if (c->index + c->n > r->from_index || (c->n == 0 && c->index >= r->from_index)) {
            s_send_chunk(n, s, c);
            sent++;
        }
    }
    SW_INFO("request '%s': %s resumed from token %u, %d chunk(s) sent again", s->rid, msg->peer,
            r->from_index, sent);
}

/* ---- the pipeline ------------------------------------------------------------------------- */

/* Commits a verdict of the current round and moves the session on. */
static void s_commit(node_t *n, s_sess_t *s, sw_verdict_t *v, double now)
{
    const double wall = now - s->t_round;
    v->compute_ms = s->round_head_ms + s->round_stage_ms;
    s->head_ms += s->round_head_ms;
    s->stage_ms += s->round_stage_ms;
    if (wall > v->compute_ms)
        s->net_ms += wall - v->compute_ms;
    s->round_head_ms = s->round_stage_ms = 0;
    s->logged = 0;
    char err[256] = "";
    const int32_t *toks;
    int nt;
    if (sw_gen_commit(s->gen, v, &toks, &nt, err, sizeof err) != 0) {
        s_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL, err);
        return;
    }
    if (sw_gen_done(s->gen)) {
        int n_out = 0;
        const int32_t *out = sw_gen_output(s->gen, &n_out);
        s_end(n, s,
              n_out > 0 && sw_tokenizer_is_eog(n->head->tok, out[n_out - 1]) ? SW_FINISH_EOS
                                                                             : SW_FINISH_LENGTH,
              0, "");
        return;
    }
    n->head->busy = 1;
}

void node_head_verdict(node_t *n, sw_wire_msg_t *msg)
{
    node_head_t *h = n->head;
    sw_msg_t d;
    if (!h || sw_codec_decode(msg, SW_MSG_VERDICT, &d, NULL, 0) != 0)
        return;
    const sw_msg_verdict_t *vd = &d.verdict;
    s_sess_t *s = NULL;
    for (int i = 0; i < h->n_slots && !s; i++)
        if (h->sess[i].state == S_RUN && h->sess[i].id == vd->session_id)
            s = &h->sess[i];
    if (!s)
        return; // a late verdict of a session that ended
    if (strcmp(msg->peer, s->route.names[s->route.n - 1]) != 0) {
        SW_WARN("ignored a verdict from %s: only the route's tail %s may send one", msg->peer,
                s->route.names[s->route.n - 1]);
        return;
    }
    const double now = sw_now_ms();
    if (!node_recover_verdict(s->rec, vd->round, now))
        return; // a replayed round's, or an attempt that failed
    if (vd->n_tokens < 1 || vd->n_tokens > (uint32_t)s->send_r.n_draft + 1) {
        s_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL,
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
        s_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL,
              "the tail sent a tree round's verdict without its path");
        return;
    }
    for (uint32_t i = 0; i < vd->n_path; i++)
        v.path[i] = (int32_t)vd->path[i];
    /* The timing list starts with the head's own entry: count only the later
     * stages here (the head's time is round_head_ms). */
    for (uint32_t i = 0; i < vd->n_timing; i++) {
        double ms = vd->timing[i].compute_us / 1e3;
        for (int st = 1; st < s->route.n; st++)
            if (!strcmp(s->route.names[st], vd->timing[i].name)) {
                s->stage_total[st] += ms;
                s->round_stage_ms += ms;
            }
    }
    s_commit(n, s, &v, now);
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
        char why[160];
        snprintf(why, sizeof why, "stage '%s' left the pipeline (the relay cannot reach it)", dest);
        for (int i = 0; i < h->n_slots; i++) {
            s_sess_t *s = &h->sess[i];
            if (s->state != S_RUN)
                continue;
            if (s_route_has(&s->route, dest))
                node_recover_failed(s->rec, now, why);
            if (!strcmp(s->client, dest) && !s->client_missing) {
                s->client_missing = now; // judged with the next peer tables
                s_want_status(h);
            }
        }
        return;
    }
    if (!from_relay && e->session_id) {
        for (int i = 0; i < h->n_slots; i++) {
            s_sess_t *s = &h->sess[i];
            if (s->state != S_RUN || s->id != e->session_id || !s_route_has(&s->route, msg->peer))
                continue;
            if (retry)
                node_recover_failed(s->rec, now, e->message);
            else
                s_end(n, s, SW_FINISH_ERROR, code, e->message);
            return;
        }
    }
    SW_DEBUG("error from %s: %s (%s)", msg->peer, e->message, sw_wire_error_code_name(code));
}

/* A client that is not in the relay's table, on a relay that has been up
 * long enough for it to announce again after a restart, for
 * S_CLIENT_GONE_MS: gone. *since tracks when it was first missed. */
static int s_client_gone(node_head_t *h, const sw_msg_table_t *t, const char *client, double *since,
                         double now)
{
    sw_msg_peer_t p;
    if (sw_codec_peer_find(t, client, &p)) {
        *since = 0;
        return 0;
    }
    if (!*since)
        *since = now;
    if (t->uptime_ms >= S_CLIENT_GRACE_MS && now - *since >= S_CLIENT_GONE_MS)
        return 1;
    /* look again when it would be gone (not before 100 ms: no query storm) */
    double due = *since + S_CLIENT_GONE_MS;
    if (t->uptime_ms < S_CLIENT_GRACE_MS && now + (S_CLIENT_GRACE_MS - (double)t->uptime_ms) > due)
        due = now + (S_CLIENT_GRACE_MS - (double)t->uptime_ms);
    if (due < now + 100)
        due = now + 100;
    if (h->status_next > due)
        h->status_next = due;
    return 0;
}

void node_head_table(node_t *n, sw_wire_msg_t *msg)
{
    node_head_t *h = n->head;
    sw_msg_t d;
    if (!h || sw_codec_decode(msg, SW_MSG_PEER_TABLE, &d, NULL, 0) != 0)
        return;
    const sw_msg_table_t *pt = &d.table;
    const double now = sw_now_ms();
    h->status_out = 0;
    char err[512] = "";
    int code = 0;
    h->route_ok = s_build_route(n, pt, &h->route, &code, err, sizeof err) == 0;
    h->route_ms = now;
    if (!h->route_ok) {
        snprintf(h->route_err, sizeof h->route_err, "%s", err);
        h->route_code = code;
    }
    for (int i = 0; i < h->n_slots; i++) {
        s_sess_t *s = &h->sess[i];
        if (s->state == S_ROUTE) {
            if (h->route_ok) {
                s_take_route(n, s, pt);
                s->state = S_RUN;
                h->busy = 1;
            } else {
                s_end(n, s, SW_FINISH_ERROR, h->route_code, h->route_err);
            }
            continue;
        }
        if (s->state != S_RUN)
            continue;
        if (s_client_gone(h, pt, s->client, &s->client_missing, now)) {
            s_end(n, s, SW_FINISH_CANCELLED, 0, "the client left the relay");
            continue;
        }
        if (s->want_route) {
            s->want_route = 0;
            if (!h->route_ok) {
                node_recover_routed(s->rec, now, 0, h->route_err);
            } else if (h->route.n < 2 && s->route.n >= 2) {
                s_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL, "the head now holds every layer");
                continue;
            } else if (!sw_codec_peer_find(pt, s->client, &(sw_msg_peer_t){0})) {
                /* After a relay restart the client must have announced again
                 * too, or the next TokenChunk would be dropped. */
                char why[128];
                snprintf(why, sizeof why, "the client '%s' is not connected to the relay",
                         s->client);
                node_recover_routed(s->rec, now, 0, why);
            } else {
                s_take_route(n, s, pt);
                node_recover_routed(s->rec, now, 1, NULL);
                h->busy = 1;
            }
        }
        if (s->want_check) {
            s->want_check = 0;
            char why[160];
            if (node_recover_waiting(s->rec) &&
                !node_recover_route_check(s->rec, pt, s->route.names, s->route.n, why,
                                          sizeof why)) {
                char text[200];
                snprintf(text, sizeof text, "%s during the round", why);
                node_recover_failed(s->rec, now, text);
                h->busy = 1;
            }
        }
    }
    for (int i = 0; i < h->q_len; i++) {
        s_wait_t *w = &h->queue[(h->q_head + i) % n->o.max_queue];
        if (s_client_gone(h, pt, w->msg.peer, &w->client_missing, now)) {
            SW_INFO("request '%s': the client %s left while it waited", w->g.request_id,
                    w->msg.peer);
            s_dequeue(n, i--);
        }
    }
    sw_wire_msg_move(&h->table, msg); // kept: new sessions take their baseline from it
}

/* The head cuts a prompt into Forwards of SW_WIRE_MAX_ROWS rows from its
 * start; a stage evaluates each as one prompt window, which is what a single
 * process does only when the two lengths agree. */
_Static_assert(SW_WIRE_MAX_ROWS == SW_MODEL_PROMPT_WINDOW,
               "a prompt Forward must be one engine prompt window");

/* Sends one chunk of s's round (its rows just ran through this stage's
 * layers into hidden) to the next stage. 0, or -1 when the relay would not
 * take it. */
static int s_forward(node_t *n, s_sess_t *s, const float *hidden, int row0, int rows,
                     double head_ms)
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
    f->payload = sw_codec_hidden_pack(n->o.dtype, hidden, n->wire_buf, (size_t)rows * E);
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
    f->dtype = n->o.dtype;
    f->hidden = (uint32_t)E;
    f->layer_begin = (uint32_t)sw_model_layer_end(n->model);
    f->n_route = (uint32_t)s->route.n;
    for (int i = 0; i < s->route.n; i++)
        f->route[i] = s->route.names[i];
    f->hop = 1;
    f->reply_to = s->route.names[0];
    f->prefill_more = !last_chunk;
    f->n_timing = 1;
    f->timing[0] =
        (sw_msg_timing_t){.name = s->route.names[0], .compute_us = (uint32_t)(head_ms * 1e3)};
    f->n_ctx = (uint32_t)s->n_ctx;
    if (row0 == 0 && r->n_kv_path) { // the previous tree round's path, kept before kv_keep
        for (int j = 0; j < r->n_kv_path; j++)
            kv_path[j] = (uint32_t)r->kv_path[j];
        f->kv_path_from = (uint32_t)r->kv_path_from;
        f->n_kv_path = (uint32_t)r->n_kv_path;
        f->kv_path = kv_path;
    }
    f->payload_len = (size_t)rows * E * sw_wire_dtype_size(f->dtype);
    s->opened = 1;
    return sw_peer_send_msg(n->peer, s->route.names[1], &msg) == 0 ? 0 : -1;
}

/* Advances one running session: deadline, the next round, what recovery
 * says. Returns 1 when it has rows to send in this pass's batch. */
static int s_advance(node_t *n, s_sess_t *s, double now)
{
    node_head_t *h = n->head;
    char err[512] = "";
    if (s->deadline && now >= s->deadline) {
        s_end(n, s, SW_FINISH_DEADLINE, SW_ERROR_DEADLINE,
              node_recover_failing(s->rec) ? "the request's deadline passed while recovering"
                                           : "the request's deadline passed");
        return 0;
    }
    if (s->send_idx >= 0 && node_recover_failing(s->rec))
        s->send_idx = -1; // the attempt failed while its rows went out: recovery resends
    if (s->send_idx >= 0)
        return 1; // rows of a round left to send
    if (!s->logged) {
        /* Drafting in bounded pieces: the other sessions' messages are read
         * between two (node_head_timeout says 0 while pieces are left). */
        const int work = sw_gen_work(s->gen, err, sizeof err);
        if (work < 0) {
            s_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL, err);
            return 0;
        }
        if (work > 0) {
            h->busy = 1;
            return 0;
        }
        const sw_round_t *r;
        int more = sw_gen_next(s->gen, &r, err, sizeof err); // drafting happens here
        if (more != 0 || node_recover_log(s->rec, r) != 0) {
            s_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL,
                  more ? err : "cannot log the round (out of memory?)");
            return 0;
        }
        s->logged = 1;
    }
    int idx = -1;
    switch (node_recover_next(s->rec, now, s->deadline, &idx, err, sizeof err)) {
    case NODE_REC_SEND:
        node_recover_get(s->rec, idx, &s->send_r, s->send_q);
        if (sw_round_kv(s->kv, &s->send_r, err, sizeof err) != 0) {
            s_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL, err);
            return 0;
        }
        s->send_idx = idx;
        s->send_row = s->send_chunks = 0;
        s->send_round = ++s->round_no;
        return 1;
    case NODE_REC_ROUTE:
        s->want_route = 1;
        s_want_status(h);
        return 0;
    case NODE_REC_FAIL:
        s_end(n, s, SW_FINISH_ERROR, SW_ERROR_DEST_GONE, err);
        return 0;
    default:
        break;
    }
    if (node_recover_waiting(s->rec)) {
        /* While the round travels: draft the next one ahead (a piece per pass). */
        const int work = sw_gen_work(s->gen, err, sizeof err);
        if (work < 0) {
            s_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL, err);
            return 0;
        }
        if (work > 0)
            h->busy = 1;
        if (now >= s->t_limit) {
            snprintf(err, sizeof err, "no verdict within %d ms (see --round-timeout-ms)",
                     n->o.round_timeout_ms);
            char names[256] = "";
            for (int i = 1; i < s->route.n; i++) {
                s_suspect_add(h, s->route.names[i], now);
                size_t at = strlen(names);
                snprintf(names + at, sizeof names - at, "%s%s", i > 1 ? ", " : "",
                         s->route.names[i]);
            }
            SW_WARN("session %016llx: no verdict within %d ms from the route through %s: "
                    "new routes avoid those stages for %d min where others serve their layers",
                    (unsigned long long)s->id, n->o.round_timeout_ms, names, S_SUSPECT_MS / 60000);
            node_recover_failed(s->rec, now, err);
            h->busy = 1;
        } else if (now >= s->t_check) {
            s->want_check = 1; // is every stage still there? (the next table says)
            s_want_status(h);
            s->t_check = now + S_CHECK_MS;
        }
    }
    return 0;
}

/* After the batch ran s's next chunk: sends it on (or verifies it, on a
 * route of one stage) and moves the send on. */
static void s_after_chunk(node_t *n, s_sess_t *s, const float *hidden, const float *logits,
                          int rows, double batch_ms, double now)
{
    const int idx = s->send_idx;
    const int current = idx == node_recover_n_rounds(s->rec) - 1;
    const int first = s->send_row == 0;
    if (current && first)
        s->t_round = now - batch_ms;
    if (current)
        s->round_head_ms += batch_ms;
    if (s->route.n == 1) {
        /* The head holds every layer: verify here, no message. */
        sw_verdict_t v;
        char err[256] = "";
        s->send_row += rows;
        s->send_idx = -1;
        node_recover_sent(s->rec, idx, s->send_round, 0, now);
        if (sw_verifier_run(s->ver, &s->send_r, logits, &v, err, sizeof err) != 0) {
            s_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL, err);
            return;
        }
        if (node_recover_verdict(s->rec, s->send_round, now))
            s_commit(n, s, &v, now);
        return;
    }
    if (s_forward(n, s, hidden, s->send_row, rows, batch_ms) != 0) {
        char why[160];
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
    if (current) {
        s->t_limit = now + n->o.round_timeout_ms;
        s->t_check = now + S_CHECK_MS;
        n->head->busy = 1; // the next pass starts drafting ahead while the round travels
    }
    /* The prefill keeps the later stages busy for a while: feed the prompt to
     * the draft model meanwhile, off the critical path (once). */
    if (idx == 0 && s->send_round == 1 && !draft_cfg(s->drafter)->ahead &&
        draft_warm(s->drafter, s->send_r.tokens, s->send_r.n) != 0)
        SW_DEBUG("the draft model could not prefill the prompt; it catches up later");
}

/* Runs the next chunk of every ready session (ready[0..n_ready)) through
 * this stage's layers as one batch, then sends each on. */
static void s_batch(node_t *n, s_sess_t **ready, int n_ready)
{
    node_head_t *h = n->head;
    const int E = n->hp->n_embd, V = n->hp->n_vocab;
    sw_kv_t *kvs[NODE_MAX_BATCH];
    sw_forward_t fs[NODE_MAX_BATCH];
    s_sess_t *in[NODE_MAX_BATCH];
    int nb = 0, rows_total = 0, logit_rows = 0;
    for (int i = 0; i < n_ready && nb < NODE_MAX_BATCH; i++) {
        s_sess_t *s = ready[i];
        const sw_round_t *r = &s->send_r;
        /* Chunks of SW_WIRE_MAX_ROWS go on the wire; a route of one stage runs
         * the whole round at once (as a single process would). */
        int rows = r->n - s->send_row;
        if (s->route.n > 1 && rows > SW_WIRE_MAX_ROWS)
            rows = SW_WIRE_MAX_ROWS;
        const int last = s->send_row + rows == r->n;
        const int want = s->route.n == 1 && last ? r->n_draft + 1 : 0;
        if (nb > 0 && (rows_total + rows > n->o.max_batch_rows || rows_total + rows > n->rows_cap ||
                       logit_rows + want > h->logit_rows))
            break; // the rest go first next pass
        if (s->route.n == 1 && want > h->logit_rows) {
            s_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL, "the round needs more logits rows");
            continue;
        }
        sw_forward_t f = {
            .n = rows,
            .tokens = r->tokens + s->send_row,
            .out_hidden = s->route.n > 1 ? h->bout + (size_t)rows_total * E : NULL,
            .logits = want ? h->logits + (size_t)logit_rows * V : NULL,
            .n_logits = want,
            .prompt = r->n_draft == 0,
        };
        if (sw_round_parents(r, s->send_row, rows, s->send_tp))
            f.parent = s->send_tp;
        kvs[nb] = s->kv;
        fs[nb] = f;
        in[nb++] = s;
        rows_total += s->route.n > 1 ? rows : 0;
        logit_rows += want;
    }
    if (nb == 0)
        return;
    char err[256] = "";
    const double t0 = sw_now_ms();
    const int rc = sw_model_forward_batch(n->model, kvs, fs, nb, err, sizeof err);
    const double batch_ms = sw_now_ms() - t0;
    if (nb > 1)
        SW_DEBUG("head batch: %d sessions, %.1f ms", nb, batch_ms);
    for (int i = 0; i < nb; i++) {
        s_sess_t *s = in[i];
        if (rc != 0) {
            s_end(n, s, SW_FINISH_ERROR, SW_ERROR_INTERNAL, err);
            continue;
        }
        s_after_chunk(n, s, fs[i].out_hidden, fs[i].logits, fs[i].n, batch_ms, sw_now_ms());
    }
}

/* The periodic status query (and the ones sessions asked for). */
static void s_status_step(node_t *n, double now)
{
    node_head_t *h = n->head;
    if (h->status_out && now - h->status_sent > S_STATUS_LOST_MS)
        h->status_out = 0; // lost (the relay restarted?): ask again
    const int active = h->n_active > 0 || h->q_len > 0;
    if (active && now >= h->status_next)
        h->status_want = 1;
    /* Idle, the route is kept fresh too (a query every S_ROUTE_FRESH_MS / 2),
     * so that a new request's prefill leaves at once instead of waiting one
     * relay round trip for a table. */
    if (!active && now >= h->status_next && now - h->route_ms >= S_ROUTE_FRESH_MS / 2)
        h->status_want = 1;
    if (!h->status_want || h->status_out)
        return;
    const sw_msg_t q = {.type = SW_MSG_STATUS_QUERY};
    if (sw_peer_try_send_msg(n->peer, SW_WIRE_RELAY_NAME, &q) != 0) {
        /* the relay is not reachable now: the periodic query asks again (and
         * the loop does not spin on the wish meanwhile) */
        h->status_want = 0;
        h->status_next = now + NODE_REC_POLL_MS;
        return;
    }
    h->status_out = 1;
    h->status_want = 0;
    h->status_sent = now;
    h->status_next = now + (active ? S_STATUS_MS : S_ROUTE_FRESH_MS / 2);
}

void node_head_step(node_t *n)
{
    node_head_t *h = n->head;
    if (!h)
        return;
    const double now = sw_now_ms();
    h->busy = 0;
    s_queue_step(n, now);
    s_sess_t *ready[NODE_MAX_BATCH];
    int n_ready = 0;
    for (int k = 0; k < h->n_slots; k++) {
        s_sess_t *s = &h->sess[(h->rr + k) % h->n_slots];
        if (s->state == S_LINGER && now - s->t_end > S_LINGER_MS)
            s_forget(h, s);
        if (s->state == S_RUN && s_advance(n, s, now) && n_ready < NODE_MAX_BATCH)
            ready[n_ready++] = s;
    }
    h->rr = (h->rr + 1) % h->n_slots;
    if (n_ready > 0)
        s_batch(n, ready, n_ready);
    s_status_step(n, sw_now_ms());
    for (int k = 0; k < h->n_slots && !h->busy; k++)
        h->busy = h->sess[k].state == S_RUN && h->sess[k].send_idx >= 0;
}

int node_head_timeout(const node_t *n)
{
    const node_head_t *h = n->head;
    if (!h)
        return 200;
    if (h->busy || (h->status_want && !h->status_out))
        return 0;
    const double now = sw_now_ms();
    double next = now + 200;
    for (int i = 0; i < h->n_slots; i++) {
        const s_sess_t *s = &h->sess[i];
        if (s->state != S_RUN)
            continue;
        if (s->deadline && s->deadline < next)
            next = s->deadline;
        if (node_recover_waiting(s->rec)) {
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
