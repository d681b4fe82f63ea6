/*
 * head_impl.h - the head's state and the functions its parts share; private
 * to node/head*.c.
 *
 * The head is cut by concern, each part calling only the ones below it (no
 * circle between them, tests/unit/test_layers.py):
 *
 *   head.c          the head's lifetime, the relay's peer table, the step and
 *                   the loop's timeout: the entry points that touch every part
 *   head_admit.c    requests: the queue, per-client quotas, admission (a
 *                   session's start), busy answers, Cancel
 *   head_session.c  the per-session state machine: rounds, the head's batch,
 *                   the sends, verdicts and errors, the end of a request
 *   head_route.c    routes from the relay's peer table, suspect stages,
 *                   vanished clients, the status query
 *   head_spot.c     spot checks: shadow routes, their digests compared,
 *                   the marks of nodes that disagree
 *   head_stream.c   what a client receives: TokenChunks (kept for Resume),
 *                   the final chunk and its stats, Errors; Resume
 *   head_sched.c    the head's part of the fair queue (sched.h): each
 *                   session's flows, prompt pieces, the batch's order
 *
 * A session's slot (head_sess_t) and everything it points to belong to the
 * head: head_forget frees them all, head_end all but the record of what the
 * client was sent (kept HEAD_LINGER for a Resume).
 */
#ifndef SW_NODE_HEAD_IMPL_H
#define SW_NODE_HEAD_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <sodium.h>

#include "bucket.h"
#include "chunk.h"
#include "codec.h"
#include "decode.h"
#include "drafter.h"
#include "expiry.h"
#include "head.h"
#include "log.h"
#include "node.h"
#include "recover.h"
#include "sched.h"
#include "tokenizer.h"

#define HEAD_ROUTE_FRESH_MS 5000   // a route built from a table this recent serves a new request
#define HEAD_PROGRESS_MS 1000      // a request's client hears from the head this often (queued too)
#define HEAD_PROGRESS_PIECE_MS 250 // ... and after a prompt piece, at most this often
#define HEAD_SUSPECT_MAX 16        // stages remembered on routes whose round timed out
#define HEAD_SUSPECT_MS 600000     // ... and avoided this long where another stage can serve
#define HEAD_PROVEN_MAX 32         // stages remembered on routes that delivered a verdict ...
#define HEAD_PROVEN_MS 600000      // ... for this long: preferred over equals that did not

#define HEAD_SPOT_COPIES 3       // spot checks: a checked session's copies (main + 2 shadows)
#define HEAD_SPOT_RING 64        // rounds whose digests wait for every copy's verdict
#define HEAD_SPOT_BAD_MAX 16     // nodes remembered as disputed or convicted
#define HEAD_SPOT_BAD_MS 3600000 // ... and avoided this long where another serves their layers

enum head_state { HEAD_FREE = 0, HEAD_ROUTE, HEAD_RUN, HEAD_LINGER, HEAD_PARKED };

/* head_spot.c: how much the head trusts a node after its spot checks. */
enum head_spot_rank { HEAD_SPOT_OK = 0, HEAD_SPOT_DISPUTED = 1, HEAD_SPOT_CONVICTED = 2 };

typedef struct head_route {
    int n; // stages, head included
    char names[SW_WIRE_MAX_ROUTE][SW_WIRE_NAME_MAX + 1];
    int n_ctx;    // positions a session may reach on it: the smallest context of its stages
                  // (PeerAnnounce.n_ctx; this head's own when none is smaller)
    int ctx_at;   // the stage that has it (0: the head)
    int cut_free; // 1: every stage, the head too, computes a prompt window's bits however it is
                  // cut (a dense model on CPUs: sw_prefix_align), so the head may send it in
                  // pieces; 0 (a GPU or a mixture of experts on it): windows go whole
} head_route_t;

/* The digests of one round of a spot-checked session, from each copy's verdict. */
typedef struct head_spot_round {
    uint64_t round;                                  // round number (0 = free entry)
    uint32_t have;                                   // bit c: copy c's verdict came (0 = main)
    int n_digests;                                   // per copy: route stages (the tail's is
                                                     // its logits digest)
    uint64_t head_sent;                              // the head's running digest of what it sent
    int has_sent;                                    // 1 when head_sent is this round's
    int done;                                        // 1 once its copies were compared
    uint64_t d[HEAD_SPOT_COPIES][SW_WIRE_MAX_ROUTE]; // (copy, stage) running output digests
} head_spot_round_t;

/* A spot-checked session (docs/security.md): copies of its Forwards go to
 * shadow routes of other nodes serving the same layer ranges. */
typedef struct head_spot {
    int n_copies;                           // 1 + shadows
    uint64_t id[HEAD_SPOT_COPIES];          // the copy's session id at the stages (0: the main
                                            // copy, which is the session's own)
    head_route_t route[HEAD_SPOT_COPIES];   // its route (route[0]: a copy of the session's)
    int live[HEAD_SPOT_COPIES];             // 0: a shadow that failed or diverged (dropped)
    int opened[HEAD_SPOT_COPIES];           // 1 once a Forward went to it
    uint64_t sent_digest;                   // running digest of the payloads the head sent
    uint64_t compared;                      // rounds compared so far
    head_spot_round_t ring[HEAD_SPOT_RING]; // by round % HEAD_SPOT_RING
} head_spot_t;

/* One TokenChunk as it was sent, for a Resume. */
typedef struct head_chunk {
    uint32_t index;  // first token (into the session's toks)
    uint32_t n;      // tokens
    size_t text_at;  // its text in the session's text buffer
    size_t text_len; //
    int finish;      // FINISH_* (NONE but for the last chunk)
} head_chunk_t;

typedef struct head_sess {
    int state;                               // HEAD_*
    node_t *n;                               // the node (for callbacks)
    uint64_t id;                             // session id at the stages
    char client[SW_WIRE_NAME_MAX + 1];       // who asked: its name (tokens stream there)
    char client_key[SW_WIRE_KEY_FP_LEN + 1]; // and its key's fingerprint: who it is ("" = none)
    char client_addr[SW_WIRE_ADDR_MAX + 1];  // "NAME@KEY": the relay delivers only to that key
    char rid[SW_WIRE_NAME_MAX + 1];          // its request_id
    double t_start;                          // the request reached the head (ms)
    double t_gen;                            // the session started (ms)
    double deadline;                         // absolute, 0 = none
    sw_sampling_t sp;                        // the verifier's sampling, as sent to the tail
    int32_t *prompt;                         // (n_prompt) tokens
    int n_prompt, n_predict;                 //
    int n_ctx;                               // positions the session may reach
    draft_t *drafter;                        // its proposer
    sw_proposer_t proposer;                  //
    sw_gen_t *gen;                           // the round logic (decode.h)
    int logged;                              // 1 when the current round is logged in rec
    sw_kv_t *kv;                             // this stage's cache for it
    sw_verifier_t *ver;                      // route of one stage: the head verifies itself
    node_recover_t *rec;                     // the round log and recovery (recover.h)
    head_route_t route;                      // head .. tail
    int opened;                              // 1 once a Forward went out (stages may hold it)
    uint64_t round_no;                       // last round number used
    int send_idx;                            // logged round being sent, -1 = none
    int send_row;                            // its rows computed and sent so far
    int send_chunks;                         // its Forwards so far
    uint64_t send_round;                     // its round number
    uint64_t replay_round0;                  // the round number the last prefill (replayed or
                                             // not) went under: later ones are its replay's
    sw_round_t send_r;                       // its rows (pointing into rec)
    sw_draft_q_t send_q[SW_MAX_DRAFT];       // and draft distributions
    int32_t send_tp[SW_MAX_DRAFT + 1];       // tree rounds: the slot each row hangs under
    double t_round;                          // the current round's first chunk went out
    double t_limit;                          // no verdict by then: recover
    double t_check;                          // verdict late: route check then
    int base_link;  // the relay whose table gave the route check's baseline (counters are per
                    // relay: a table of another one cannot be compared)
    int want_route; // recovery asked for the route
    int want_check; // a route check is due with the next table
    double client_missing;            // since when the client seems gone (0 = present)
    sw_detok_t *detok;                // token -> text
    int32_t *toks;                    // (n_predict) tokens streamed
    uint32_t n_streamed;              //
    uint32_t n_skip;                  // failover, greedy: generated tokens not to
                                      // stream (the client holds them)
    int32_t *skip;                    // (n_skip) those tokens, proposed as drafts
    uint32_t n_seen;                  // generated tokens committed so far
    char skip_bad[160];               // failover: a generated token differed from the client's
                                      // (why; the request then ends with an Error, not done)
    sw_proposer_t forced;             // s_forced_propose (head_admit.c)
    uint32_t index_base;              // failover: tokens the client held before this
                                      // head (GenerateRequest.resume_tokens): chunk
                                      // indices and n_generated count from there
    head_chunk_t *chunks;             // (cap_chunks) every chunk sent
    int n_chunks, cap_chunks;         //
    char *text;                       // (text_cap) their text
    size_t text_len, text_cap;        //
    int finish;                       // FINISH_* once the request ended
    int err_code;                     // ERROR / DEADLINE: the Error sent
    char err[SW_WIRE_MAX_ERROR_TEXT]; //
    /* the final chunk's stats */
    sw_msg_stats_t stats;
    int have_stats;                        //
    double t_end;                          // the request ended (ms)
    int resend_at;                         // next chunk to send again for a Resume, -1 = none
    int resent;                            // chunks sent again so far (the request's budget)
    double head_ms, stage_ms, net_ms;      // totals over the request
    double stage_total[SW_WIRE_MAX_ROUTE]; // compute per stage (ms)
    double round_head_ms;                  // the current round's compute: head
    double round_stage_ms;                 // and stages
    int round_head_rows;                   // rows of the head's batch its last chunk ran in
    int prefix_len;         // prompt positions the prefill's first attempt took from the prefix
                            // caches (0: none, or the prefill was sent again whole)
    int spot_draw;          // spot checks: 0 = not drawn yet, 1 = not checked, 2 = checked
    head_spot_t *spot;      // the checked session's copies, or NULL
    int spot_fail;          // 1: its route held a node the spot checks convicted: replay
    int refusal_rerouted;   // 1: a stage's ERR_BAD_REQUEST was routed again since the last
                            // verdict (a second one ends the request)
    double t_told;          // the head last sent the client something (ms): a Progress after
                            // HEAD_PROGRESS_MS of silence
    int prompt_through;     // prefill rows that went through the head's layers (Progress)
    int prompt_finished;    // ... and through every stage (the tail's PrefillAcks)
    double t_sent_all;      // the current round's last chunk went (ms): a route check needs a
                            // peer table asked for after it
    double round_head_crit; // the head's part of the round's critical path (ms)
    double round_crit_ms;   // and the stages' (the verdict's timing entries)
    double crit_total[SW_WIRE_MAX_ROUTE]; // the request's critical paths per stage (ms)
    double overlap_ms;                    // compute beside another node's (timing)
    /* the fair queue (head_sched.c) */
    char tenant[SW_WIRE_NAME_MAX + 1]; // GenerateRequest.tenant: who it is for under its key
    uint64_t flow[NODE_SCHED_LEVELS];  // its flows: the head (twice), client, tenant, session
    int piece_rows;                    // its last prompt piece: rows (0 = none yet)
    double piece_ms;                   // and the ms of the batch it ran in
    uint64_t piece_round[NODE_SCHED_WINDOW_MAX]; // ring of its last pieces sent: their round,
    uint32_t piece_end[NODE_SCHED_WINDOW_MAX];   // the position each ends at
    double piece_t[NODE_SCHED_WINDOW_MAX];       // and when it went (ms)
    int piece_at;                                // the ring's next entry
    double ack_lat_ms;  // least time from a piece's sending to its acknowledgement (0: none yet)
    uint64_t ack_round; // the round the tail's last acknowledgement was of
    uint32_t acked;     // ... and the prompt positions it had computed
    double t_progress;  // a piece went out or was acknowledged then (ms)
    double t_parked;    // HEAD_PARKED: since when (head_admit.c)
    int park_pos;       // ... and the positions its cache held then
    const char *replay_why; // set: replayed (recovery) for this reason at the
                            // next advance (a parked session going on)
} head_sess_t;

/* A request waiting for a session slot. */
typedef struct head_wait {
    sw_wire_msg_t msg;     // the GenerateRequest
    sw_msg_generate_t g;   // msg decoded (views into it)
    double t_arrive;       // ms
    double client_missing; // since when its client seems gone (0 = present)
    double t_told;         // the head last told its client it waits (a Progress, ms)
} head_wait_t;

struct node_head {
    sw_tokenizer_t *tok;     // from the model's GGUF
    draft_model_t *dmodel;   // --draft-model, or NULL
    head_sess_t *sess;       // (n_slots) sessions: running ones and lingering ones
    int n_slots;             // --max-sessions + S_LINGER_MAX (head.c)
    int n_active;            // sessions in ROUTE or RUN
    head_wait_t *queue;      // (--max-queue) ring of waiting requests
    int q_head, q_len;       //
    head_route_t route;      // the route built from the last peer table
    int ctx_said;            // the route context last logged (node_head_table)
    int route_ok;            // 1 when that table had a whole pipeline
    int route_code;          // else the error code
    char route_err[512];     // and why
    double route_ms;         // when (0 = never)
    int table_link;          // the relay (link index) the last table came from (h->table)
    sw_wire_msg_t table;     // that table (its counters are new sessions' route baseline)
    int status_out;          // a status query is unanswered
    double status_sent;      // when it went
    uint64_t status_losses;  // sw_peer_losses when it went (a lost relay takes its answer)
    double status_next;      // the next periodic one
    int status_want;         // one is wanted as soon as possible
    float *bout;             // (rows_cap, n_embd) hidden states of the head's batch
    float *logits;           // (logit rows, n_vocab): a route of one stage verifies here
    int logit_rows;          //
    int busy;                // 1 when node_head_step left work for the next pass
    int rr;                  // where the next batch starts (round robin)
    int gate_logged;         // the gate's decisions already logged
    int gate_windows;        // and its windows (debug log)
    draft_load_t load;       // what the sessions cost each other (drafter/load.h): the K
                             // controllers of all sessions read it
    int32_t *pub[2];         // --public-prefix as tokens: its text, and its text as the system
    int n_pub[2];            // turn of the chat template (NULL/0 = none; head_session.c)
    double prefix_off_until; // a stage said it did not hold a prefix: none is asked for until
                             // then (ms)
    sw_expiry_t suspect[HEAD_SUSPECT_MAX];   // stages of routes whose round got no verdict in
                                             // time: avoided until then
    sw_expiry_t proven[HEAD_PROVEN_MAX];     // stages of routes that delivered this head a
                                             // verdict: preferred until then
    sw_expiry_t spot_bad[HEAD_SPOT_BAD_MAX]; // nodes whose spot checks failed (head_spot.c):
                                             // avoided until then; rank HEAD_SPOT_DISPUTED or
                                             // HEAD_SPOT_CONVICTED, and with each
    struct {
        uint64_t by;               // who accused it last (head_spot.c: s_accusers)
    } spot_why[HEAD_SPOT_BAD_MAX]; //
    uint64_t spot_sessions;        // sessions checked so far
    uint64_t spot_rounds;          // rounds compared
    uint64_t spot_mismatches;      // rounds whose copies disagreed
    sw_bucket_t *resend;           // (n_slots) Resume budgets (chunks), per client key
    int resend_pending;            // 1 when some session has chunks to send again
    sw_bucket_t *answer;           // (n_slots) budgets for answers that start no work, per
                                   // client key (SW_HEAD_ANSWERS_S; head_answer_take)
    sw_log_gate_t refused_log;     // log lines of refused and resumed requests and unsent
                                   // answers (per client key: a client sets their pace)
    sw_log_gate_t wait_log;        // ... of requests that wait in the queue or are cancelled
                                   // there (a gate of their own: refusals keep their lines)
    node_sched_t *sched;           // the fair queue of the head's batches (head_sched.c)
    int pieces;                    // 1: prompts go in pieces (--prefill-pieces, the model)
    double w_ms;                   // a one-row forward of the head's layers (ms, 0 = unknown)
    double batch_ms_max;           // the longest head batch lately (decays 5 % a batch)
    double ms_per_row;             // and the most a row of one cost (the same way)
};

/* ---- head_stream.c: what a client receives ------------------------------------------------- */

/* An Error to dest (a client) about request_id (queue_pos: its place in the
 * queue, 0 = none); never waits. */
void head_send_error(node_t *n, const char *dest, int code, const char *request_id,
                     uint64_t session, uint32_t queue_pos, const char *text);
/* May the head answer msg, which starts no work (a SpotQuery; a Resume for
 * an id it does not hold; a refused request)? Takes one answer from its
 * sender key's budget (SW_HEAD_ANSWERS_S a second, as many at once): 1, or 0
 * when it is spent (the answer is then not sent; what names it in the
 * head's gated log). */
int head_answer_take(node_t *n, const sw_wire_msg_t *msg, const char *what);
/* Several relays: the relay of index link, the one in use, lost a stage of a route (its
 * connection to that relay was cut, or that relay dropped it) while others are live and may
 * still reach it. The head moves to another (sw_peer_leave, which counts as a lost link): every
 * round waiting for its verdict goes again alone by the new relay (s_relay_lost), and a round
 * still being sent goes again from its first chunk. 1 when it moved, 0 when nothing changed. */
int head_leave_relay(node_t *n, int link, const char *why, double now);
/* Refuses request rid of msg's sender: one line in the head's gated log
 * (refused_log, per key), and an Error (code, queue_pos, text) when its key's
 * answer budget allows (head_answer_take). */
/* "key FP" or "client NAME": who sent msg, the key of its lines in refused_log and wait_log. */
const char *head_who_label(const sw_wire_msg_t *msg, char *out, size_t len);
void head_refuse(node_t *n, const sw_wire_msg_t *msg, int code, const char *rid, uint32_t queue_pos,
                 const char *text);
/* head_refuse for session s, which took a slot but sent no round (it waited for a route that
 * then was broken or too short for it): the same gated line and budgeted Error, keyed on s's
 * client. s stays as it was: the caller frees its slot (head_forget, no record for a Resume). */
void head_refuse_session(node_t *n, head_sess_t *s, int code, const char *text);
/* A last chunk with no tokens (done, finish): for requests with no record. */
void head_final_chunk(node_t *n, const char *dest, const char *rid, uint32_t index, int finish);
/* Records and sends the next chunk: tokens (n_tok of them) with their text,
 * finish NONE until the last. 0 or -1 (out of memory). */
int head_emit(node_t *n, head_sess_t *s, const int32_t *tokens, int n_tok, const char *text,
              size_t len, int finish);
/* A Progress to s's client (docs/protocol.md, "Progress"): where its request
 * is and that the head speaks again within busy_ms plus a margin (busy_ms 0:
 * its longest batch lately). Never waits. */
void head_progress(node_t *n, head_sess_t *s, double busy_ms, double now);
/* A Progress to the client of queued request w (nothing done yet): it waits, and the head
 * speaks again within next_ms, so its client does not ask again meanwhile. Never waits. */
void head_progress_queued(node_t *n, head_wait_t *w, double now);
/* sw_gen_opts_t.on_tokens (ctx: the session): the committed tokens of a
 * round, as one chunk. */
int head_on_tokens(void *ctx, const int32_t *tokens, int n_tok);
/* sw_gen_opts_t.is_eog (ctx: the tokenizer). */
int head_is_eog(void *ctx, int32_t token);
/* Sends again what Resumes asked for, paced: each client key within its own
 * budget (SW_HEAD_RESEND_CHUNKS_S), at most HEAD_RESEND_PASS chunks a pass. */
void head_resend_step(node_t *n, double now);
/* The final chunk's stats of s from its generation's. */
void head_fill_stats(head_sess_t *s, const sw_gen_stats_t *gs);
/* The session of request rid from the client that msg came from (running,
 * or with lingering also a finished one), or NULL. A client is its key (the
 * fingerprint the relay authenticated, msg->peer_key): any connection of
 * that key finds its requests, no other does; without keys, its name. */
head_sess_t *head_find(node_head_t *h, const sw_wire_msg_t *msg, const char *rid, int lingering);
/* Who sent msg, as requests are bound to it: its key's fingerprint, else its name. */
static inline const char *head_who(const sw_wire_msg_t *msg)
{
    return msg->peer_key[0] ? msg->peer_key : msg->peer;
}
/* Who a session belongs to, the same way. */
static inline const char *head_sess_who(const head_sess_t *s)
{
    return s->client_key[0] ? s->client_key : s->client;
}
/* Where to answer msg's sender: "NAME@KEY" (out: SW_WIRE_ADDR_MAX + 1 bytes). */
static inline const char *head_reply_addr(const sw_wire_msg_t *msg, char *out)
{
    sw_wire_addr(out, msg->peer, msg->peer_key);
    return out;
}

/* ---- head_sched.c: the fair queue (sched.h) ------------------------------------------------ */

/* Makes the head's scheduler and measures its one-row forward. 0, or -1 with err. */
int head_sched_init(node_t *n, char *err, size_t err_len);
void head_sched_free(node_head_t *h);
/* A new session's flows (its key, tenant, id; tenant may be NULL = the key's own). */
void head_sched_open(node_head_t *h, head_sess_t *s, const char *tenant);
/* Rows the fair queue gives s's next prompt piece (node_sched_piece_rows; head_chunk_rows cuts
 * it), or 0: s sends no prompt, or prompts go whole (h->pieces 0). */
int head_sched_rows(const node_t *n, const head_sess_t *s);
/* This pass's batch out of ready[0..n_ready), their next chunks rows[]: indices into ready in
 * pick, in the order they run; returns their count. */
int head_sched_pick(node_t *n, head_sess_t *const *ready, const int *rows, int n_ready, int *pick);
/* The batch in[0..nb) ran rows[] each in ms: each session's flows are charged its share. */
void head_sched_ran(node_t *n, head_sess_t *const *in, const int *rows, int nb, double ms);
/* 1 when s, which has rows to send, may run its next chunk now: a prompt's next piece waits
 * while route.n of its pieces are unacknowledged by the tail (at most NODE_SCHED_ACK_WAIT_MS
 * since the last progress). */
int head_sched_may_send(const node_t *n, const head_sess_t *s, double now);
/* The route's tail acknowledged s's prompt up to done (a PrefillAck of the round being sent,
 * now): the window of s's unacknowledged pieces moves on. */
void head_sched_ack(node_t *n, head_sess_t *s, uint32_t done, double now);

/* ---- head_spot.c: spot checks (docs/security.md) ------------------------------------------- */

/* What the spot checks think of node name now (HEAD_SPOT_*). */
int head_spot_rank(const node_head_t *h, const char *name, double now);
/* After s took a route (a new session, or one recovering): draws once whether
 * s is checked (--spot-check) and gives it shadow routes from pt, closing
 * the shadows of its previous route. */
void head_spot_plan(node_t *n, head_sess_t *s, const sw_msg_table_t *pt);
/* The head sent msg (a Forward of s's current send) to its route: the same
 * rows go to every live shadow; last: the round's last chunk. */
void head_spot_sent(node_t *n, head_sess_t *s, const sw_msg_t *msg, int last);
/* A verdict of s's main route for its current round. */
void head_spot_main(node_t *n, head_sess_t *s, const sw_msg_verdict_t *vd, double now);
/* A verdict from peer: 1 when it was a shadow's (handled here), 0 otherwise. */
int head_spot_verdict(node_t *n, const char *peer, const sw_msg_verdict_t *vd, double now);
/* An Error about session_id from peer from (a stage of the shadow's route,
 * or it is ignored), or with dest set (session_id 0, from the relay): dest
 * could not be reached. 1 when it concerned a shadow (dropped), 0 otherwise. */
int head_spot_error(node_t *n, uint64_t session_id, const char *dest, const char *from);
/* SessionClose to s's shadows and frees its spot state. */
void head_spot_close(node_t *n, head_sess_t *s, const char *why);

/* ---- head_route.c: routes, suspects, clients, the status query ----------------------------- */

/* Asks for a status query (a fresh peer table) as soon as possible. */
void head_want_status(node_head_t *h);
/* 1 when name is a stage of r (the head, r->names[0], is not). */
int head_route_has(const head_route_t *r, const char *name);
/* r's names from entry `from` on, joined by sep, into out (for log lines); returns out. */
const char *head_route_text(const head_route_t *r, int from, const char *sep, char *out,
                            size_t len);
/* Remembers name as a stage of a route whose round got no verdict in time, or as an auto node
 * slower than its probe claimed (node_place_observe). */
void head_suspect_add(node_head_t *h, const char *name, double now);
/* Remembers the stages of r (a verdict came through it) as proven: route
 * choice prefers them over equals this head has no verdict from. */
void head_proven_add(node_head_t *h, const head_route_t *r, double now);
/* head -> ... -> tail from a peer table (head_route.c says how); 0, or -1
 * with *code and err. */
int head_route_build(node_t *n, const sw_msg_table_t *pt, head_route_t *r, int *code, char *err,
                     size_t err_len);
/* Gives s the head's current route and pt's counter baseline (pt may be NULL). */
void head_route_take(node_t *n, head_sess_t *s, const sw_msg_table_t *pt);
/* 1 when s's positions fit the head's route (head_route_t.n_ctx: its smallest
 * context); else 0 with why, naming the stage. */
int head_route_fits(const node_t *n, const head_sess_t *s, char *why, size_t len);
/* 1 when the table lists client holding key ("" = any key). */
int head_client_present(const sw_msg_table_t *t, const char *client, const char *key);
/* 1 when client (with its key, "" = any) has been missing from the relay's
 * tables long enough to be gone (*since: when it was first missed, 0 =
 * present). A peer of that name holding another key is not it. */
int head_client_gone(node_head_t *h, const sw_msg_table_t *t, const char *client, const char *key,
                     double *since, double now);
/* The periodic status query (and the ones sessions asked for). */
void head_status_step(node_t *n, double now);

/* ---- head_session.c: the per-session state machine ----------------------------------------- */

/* Frees everything of s, its record of what it streamed too; the slot is free. */
void head_forget(node_head_t *h, head_sess_t *s);
/* A SessionClose to every stage of s's route that may hold it. */
void head_close_stages(node_t *n, head_sess_t *s, const char *why);
/* SessionClose for session id to the stages of r (names[1..n)); with pt, only to those pt
 * shows (head_route.c). */
void head_close_route(node_t *n, const head_route_t *r, uint64_t id, const char *why,
                      const sw_msg_table_t *pt);
/* A fresh id for s (odd, so never 0); the stages refuse the old one once it is closed. */
static inline void head_new_id(head_sess_t *s)
{
    randombytes_buf(&s->id, sizeof s->id);
    s->id |= 1;
}
/* Ends a running (or routing) session with finish (FINISH_*; code and why
 * for an error); it lingers with its chunks for a Resume. */
void head_end(node_t *n, head_sess_t *s, int finish, int code, const char *why);
/* Advances one running session; 1 when it has rows to send in this pass's batch. */
int head_advance(node_t *n, head_sess_t *s, double now);
/* Rows of the next Forward of s's round (send_row on): never past a prompt
 * window's end nor over SW_WIRE_MAX_PAYLOAD at any dtype (sw_wire_prompt_rows),
 * a prefill in small pieces first and last (pipelining) and no larger than the
 * fair queue's (head_sched_rows); the whole round on a route of one stage. */
int head_chunk_rows(const node_t *n, const head_sess_t *s);
/* Runs the next chunk of every ready session through this stage's layers as
 * one batch, then sends each on. */
void head_batch(node_t *n, head_sess_t **ready, int n_ready);
/* The namespace of s's prompts in the head's prefix cache and its draft
 * model's: its tenant (head_session.c). out, filled. */
const char *head_prefix_ns(const head_sess_t *s, char *out, size_t len);
/* Frees cached prompt prefixes until the sessions' caches and need bytes
 * more fit --kv-mib with them (a new session comes first). */
void head_kv_room(node_t *n, size_t need);

/* ---- head_admit.c: requests and the queue -------------------------------------------------- */

/* Removes queue entry i (0 = the oldest). */
void head_dequeue(node_t *n, int i);
/* The queue: deadlines, and the oldest requests start while slots and memory allow. */
void head_queue_step(node_t *n, double now);
/* The INFO line of a session that starts (its prompt, drafting, the load; a takeover's too):
 * written when it takes its first route, so that one refused before any round, its route
 * broken or too short, leaves only the gated line of head_refuse_session. */
void head_log_start(node_t *n, const head_sess_t *s);

#endif
