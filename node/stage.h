/*
 * stage.h - the work of a pipeline stage: the sessions a stage holds, one
 * KV cache each (stage_session.c), and the Forwards of many sessions run
 * through its layers as one batch, then passed on to the next stage or, on
 * the last stage, verified and answered with a Verdict (stage.c).
 *
 * The stage's state lives in the node (node_t, node.h: sessions, batch,
 * pending Forwards, the cached peer table); these types are its parts. The
 * event loop (node.c) calls these functions; the stage calls nothing of the
 * event loop or of the head.
 *
 * Ownership: a message handed to node_stage_forward / node_stage_table stays
 * the caller's, who clears it after, unless the stage keeps it: then it is
 * moved (sw_wire_msg_move) into the batch, the pending list or n->table, and
 * the stage frees it. A session's cache and verifier belong to the stage
 * until node_session_free. The arrays of node_t are the node's (node_run).
 */
#ifndef SW_NODE_STAGE_H
#define SW_NODE_STAGE_H

#include <stdint.h>

#include "codec.h"
#include "decode.h"
#include "model.h"
#include "sched.h"
#include "wire.h"

#define NODE_MAX_BATCH 256 // Forwards (sessions) in one stage batch at most
#define NODE_CLOSED_IDS                                                                            \
    256 // recently closed sessions remembered (their Forwards: ERR_UNKNOWN_SESSION)
#define NODE_PENDING_MAX 64     // Forwards waiting at a stage for a peer table to check their route
#define NODE_TABLE_WAIT_MS 3000 // ... for this long at most
#define NODE_TABLE_OLD_MS 30000 // a stage's cached peer table this old is refreshed when used
#define NODE_EVICT_IDLE_MS 5000 // a session unused this long makes room for a new one when full
#define NODE_QUEUE_BYTES                                                                           \
    (256u << 20) // payload bytes of the Forwards a stage holds waiting; beyond,
                 // it runs a batch before it takes another

typedef struct node node_t; // node.h

/* One session's state on a stage. */
typedef struct node_session {
    uint64_t id;         // 0 = free slot
    sw_kv_t *kv;         // this stage's cache
    sw_verifier_t *ver;  // last stage only
    double last_used_ms; // for the idle timeout
    uint64_t round;      // last round seen
    char creator[64];    // peer whose Forward created it; only it may send more
    char by[64];         // the creator's key fingerprint (its name without keys): the sessions
                         // of one key share the stage fairly with other keys' (stage_session.c)
    char owner[64];      // route[0] of that Forward (the head): may close it too
    int32_t *prompt;     // (prompt_cap) its prompt's tokens while the prefill comes (prefix
                         // cache: stored when it is complete), NULL otherwise
    int n_prompt;        // tokens so far
    int prompt_cap;      //
    uint64_t in_digest;  // running digest of the hidden states received (spot checks:
                         // sw_codec_digest_fold), restarted by a Forward that keeps 0
    /* where its prefill stands and timing (stage_timing.c) */
    int prefill_open;                    // 1: the last chunk said more of the prefill comes
    uint32_t prefill_next;               // ... from this position (a piece there continues the
                                         // prompt: stage_sched.c)
    double round_work_ms;                // the round's earlier chunks' compute here
    double stretch_t0;                   // its current busy stretch here began (ms)
    double last_end;                     // its last chunk was done and sent on (ms)
    uint32_t crit_up[SW_WIRE_MAX_ROUTE]; // (n_crit_up) the stretch's first chunk's critical_us
    uint32_t n_crit_up;                  //   of the nodes before this one
} node_session_t;

/* A Forward whose route a stage checks once the relay's peer table comes. */
typedef struct node_pending {
    sw_wire_msg_t msg; // the Forward
    double t_arrive;   // when it arrived (ms)
} node_pending_t;

/* A Forward the stage accepted, waiting in its queue for a batch (stage.c;
 * stage_sched.c says which run next). */
typedef struct node_fwd {
    sw_wire_msg_t msg;                // the message (owns the payload)
    node_session_t *s;                // its session; NULL when it was closed meanwhile
    size_t bytes;                     // its payload's bytes (counted in node_t.queue_bytes)
    uint64_t flow[NODE_SCHED_LEVELS]; // its flows in the stage's fair queue (stage_sched.c)
    int row0;                         // taken into a batch: its first row in hidden_in / hidden_out
    int logit0;                       // its first row in logits (last stage)
    int n_logits;                     // logits rows it needs
    double t_arrive;                  // when it arrived (ms)
    uint64_t digest;                  // its session's in_digest with its payload folded in
    /* a tree round: the cache slot each of its rows hangs under */
    int32_t par[SW_WIRE_MAX_DRAFT + 1];
} node_fwd_t;

/* The session id, or with `by` (the creator's key fingerprint, or its name
 * without keys; NULL = only look it up) a new one with a cache that may
 * reach n_ctx positions (0 = the node's context) and has room for `first`
 * at once, counted against --kv-mib; NULL with why. When the stage is full,
 * an idle session makes room, else one of the key holding the most sessions
 * when `by` holds at least two fewer (stage_session.c). */
node_session_t *node_session_get(node_t *n, uint64_t id, const char *by, int n_ctx, int first,
                                 const char **why);
/* The reasons node_session_get gives that the caller tells apart (by address):
 * a closed session, and a session that can never fit this stage. */
extern const char NODE_WHY_CLOSED[], NODE_WHY_CTX[], NODE_WHY_KV[];
/* Grows session id's cache kv to hold need positions (a step of
 * engine/include/kv.h, counted in n->kv; cached prefixes give way). 0, or -1
 * with err ("KV cache memory is full: ..."). */
int node_kv_grow(node_t *n, sw_kv_t *kv, int need, uint64_t id, char *err, size_t err_len)
    __attribute__((warn_unused_result));
/* Prefix cache (engine/include/prefix.h): frees cached prefixes, least recently
 * used first, until the sessions' caches (kv_used), need bytes more and the
 * prefixes fit --kv-mib. */
void node_prefix_room(node_t *n, size_t kv_used, size_t need);
/* Frees the session's cache (its waiting Forward is dropped). The head may
 * open it again: after a stage error, an eviction or an idle timeout it
 * replays the session from its prefill under the same id. */
void node_session_free(node_t *n, node_session_t *s);
/* Frees a session its owner closed (SessionClose) and remembers its id for a
 * while, so that a Forward of it still in flight does not open it again. */
void node_session_close(node_t *n, node_session_t *s);
void node_sessions_expire(node_t *n, double now_ms);
int node_sessions_held(const node_t *n);
/* Checks a Forward addressed to this stage (hop >= 1) and takes it into the
 * batch (msg is moved), or answers it with an Error. Its route's neighbours
 * must be key-bound nodes of this model whose layers fit (the relay's peer
 * table says): a Forward naming a peer the cached table does not show waits
 * (moved into n->pending) for a fresh table. */
void node_stage_forward(node_t *n, sw_wire_msg_t *msg);
/* The relay's PeerTable at a stage (not the head): kept, and the waiting
 * Forwards are checked against it (msg is moved). */
void node_stage_table(node_t *n, sw_wire_msg_t *msg);
/* Timers of a stage: waiting Forwards whose table did not come. */
void node_stage_step(node_t *n, double now_ms);
/* The timing entries (SW_WIRE_MAX_ROUTE) a stage sends on for Forward f of
 * session s, which arrived at t_arrive and ran in a batch from t0 to t1 (ms):
 * the entries f carried, their critical parts from the chunk that began this
 * stage's busy stretch, and mine with its compute_us (a prefill's last chunk:
 * the whole round's) and critical_us (stage_timing.c); notes where s's prefill
 * stands (prefill_open, prefill_next: its next piece continues the prompt).
 * Returns the count. */
uint32_t node_stage_timing(node_session_t *s, const sw_msg_forward_t *f,
                           const sw_msg_timing_t *mine, double t_arrive, double t0, double t1,
                           sw_msg_timing_t *out);
/* Runs the next batch of the queue (which Forwards: stage_sched.c) through
 * this stage's layers and sends the results on; the event loop calls it
 * once a pass while node_stage_busy. */
void node_stage_flush(node_t *n);
/* 1 while Forwards wait in the queue. */
int node_stage_busy(const node_t *n);

/* ---- stage_sched.c: the stage's part of the fair queue (sched.h) ---- */

/* The next batch out of the queue: indices into n->batch in sel, in the
 * order they run, one Forward per session (its oldest); entries of sessions
 * freed meanwhile get done[i] = 1. Returns the count. */
int node_stage_pick(node_t *n, int *sel, char *done);
/* The batch live[0..nl) ran in ms: each entry's flows are charged its rows' share. */
void node_stage_ran(node_t *n, node_fwd_t *const *live, int nl, double ms);
/* 1 when f continues the prompt whose earlier piece s ran last (its windows
 * are counted from the prompt's start: engine/include/model.h; where the last
 * piece ended: node_stage_timing). */
int node_stage_prefill_cont(const node_session_t *s, const sw_msg_forward_t *f);
int node_is_last(const node_t *n);

#endif
