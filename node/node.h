/*
 * node.h - the state of one shardwire-node process and the pieces of its
 * event loop (node.c), stage work (stage.c) and session ownership (head.c).
 *
 * A node holds layers [begin, end) of one model. It dials the relay,
 * announces its range and model fingerprint, and then reacts to messages:
 * a Forward runs its layers on the rows and passes the hidden states to the
 * next stage (or, on the last stage, verifies and answers the head with a
 * Verdict); a GenerateRequest (head only) starts a generation that the head
 * drives round by round through the pipeline.
 *
 * Everything runs on one thread, in one loop that never blocks on a single
 * session (node.c): it reads what the relay has, lets the stage run the
 * waiting Forwards as one batch (stage.c), then lets the head advance every
 * session's state (head.c) and run its own layers for all sessions that have
 * a round to send, again as one batch.
 */
#ifndef SW_NODE_H
#define SW_NODE_H

#include <signal.h>
#include <stdint.h>

#include "backend.h"
#include "decode.h"
#include "model.h"
#include "peer.h"
#include "tokenizer.h"

typedef struct node_opts {
    const char *model;       // GGUF path
    int layer_begin;         // first layer held
    int layer_end;           // one past the last layer held (-1 = to the end)
    const char *relay;       // relay endpoint
    const char *name;        // peer name
    const char *model_name;  // name clients ask for (NULL = the file name without .gguf)
    const char *backend;     // compute backend name (sw_backend_new; NULL = auto)
    int threads;             // CPU compute threads (0 = all cores)
    int n_ctx;               // positions per session
    int max_sessions;        // sessions held at once
    int idle_timeout_ms;     // a session unused this long is freed
    int round_timeout_ms;    // head: a round with no verdict after this long is recovered
    int recover_timeout_ms;  // head: how long one recovery waits for the pipeline
    sw_dtype_t dtype;        // hidden-state dtype sent on
    int heartbeat_ms;        // ZMTP heartbeat interval
    int connect_timeout_ms;  // keep trying to reach the relay at start this long (-1 = forever)
    const char *draft_model; // head: draft GGUF (NULL = none)
    const char *draft_mode;  // head: "model", "ngram", "none" or NULL (= model if given)
    int draft_k;             // head: default drafts per round (0 = off, -1 = adaptive)
    int draft_threads;       // head: threads of the draft model
    const char
        *draft_backend;  // head: the draft model's backend (NULL = the first device of backend)
    int draft_k_max;     // head: largest adaptive K (0 = the drafter's default)
    float draft_p_min;   // head: default confidence stop of the draft model, [0, 1]
    int draft_tree;      // head: default token tree size in drafts (0 or 1 = chains)
    int draft_ahead;     // head: 1 = draft ahead while rounds travel by default
    const sw_sec_t *sec; // keys for the relay connection (keys.h); NULL = loopback only
    int max_queue;       // head: requests waiting for a session slot at most
    int max_queue_per_client;    // head: of them from one client at most (0 = no limit)
    int max_sessions_per_client; // head: sessions one client runs at once (0 = no limit)
    int max_batch_rows;          // rows in one batched forward (a larger prefill chunk runs alone)
    int64_t kv_bytes;            // memory for the sessions' KV caches, bytes (0 = no cap)
} node_opts_t;

#define NODE_MAX_BATCH 256      // Forwards (sessions) in one stage batch at most
#define NODE_CLOSED_IDS 256     // recently closed sessions remembered (stale Forwards are dropped)
#define NODE_PENDING_MAX 64     // Forwards waiting at a stage for a peer table to check their route
#define NODE_TABLE_WAIT_MS 3000 // ... for this long at most
#define NODE_TABLE_OLD_MS 30000 // a stage's cached peer table this old is refreshed when used
#define NODE_EVICT_IDLE_MS 5000 // a session unused this long makes room for a new one when full

/* One session's state on a stage. */
typedef struct node_session {
    uint64_t id;         // 0 = free slot
    sw_kv_t *kv;         // this stage's cache
    size_t kv_bytes;     // its memory
    sw_verifier_t *ver;  // last stage only
    double last_used_ms; // for the idle timeout
    uint64_t round;      // last round seen
    char creator[64];    // peer whose Forward created it; only it may send more
    char owner[64];      // route[0] of that Forward (the head): may close it too
} node_session_t;

typedef struct node_head node_head_t;

/* A Forward whose route a stage checks once the relay's peer table comes. */
typedef struct node_pending {
    sw_wire_msg_t msg; // the Forward
    double t_arrive;   // when it arrived (ms)
} node_pending_t;

/* A Forward the stage accepted, waiting for the next batch (stage.c). */
typedef struct node_fwd {
    sw_wire_msg_t msg; // the message (owns the payload)
    node_session_t *s; // its session; NULL when it was closed meanwhile
    int row0;          // its first row in hidden_in / hidden_out
    int logit0;        // its first row in logits (last stage)
    int n_logits;      // logits rows it needs
    double t_arrive;   // when it arrived (ms)
    /* a tree round: the cache slot each of its rows hangs under */
    int32_t par[SW_WIRE_MAX_DRAFT + 1];
} node_fwd_t;

typedef struct node {
    node_opts_t o;                    // options
    sw_backend_t *be;                 // compute backend (one device or a group)
    sw_model_t *model;                // layers [begin, end)
    const sw_hparams_t *hp;           // model hyper-parameters
    char fingerprint[65];             // model identity
    sw_peer_t *peer;                  // relay connection
    node_session_t *sessions;         // (max_sessions)
    size_t kv_used;                   // bytes of the sessions' caches
    uint64_t closed[NODE_CLOSED_IDS]; // ring of recently closed session ids
    int closed_at;                    // next slot of the ring
    int rows_cap;                     // rows of hidden_in / hidden_out: max(--max-batch-rows, 512)
    int logit_cap;                    // rows of logits: max(--max-batch-rows, SW_MAX_DRAFT + 1)
    float *hidden_in;                 // (rows_cap, n_embd) f32, the batch's input
    float *hidden_out;                // (rows_cap, n_embd) f32, its output
    void *wire_buf;                   // (SW_WIRE_MAX_ROWS, n_embd) f32-sized dtype buffer
    float *logits;                    // (logit_cap, n_vocab), last stage
    node_fwd_t *batch;                // (NODE_MAX_BATCH) Forwards waiting for the batch
    int n_batch;                      // entries
    int batch_rows;                   // their rows
    int batch_logits;                 // their logits rows
    uint64_t stat_batches;            // batches run (for logs and tests)
    uint64_t stat_batched;            // Forwards run in them
    int stat_shared_rows;             // most rows in one batch of 2 or more Forwards
    node_head_t *head;                // head state (first stage only)
    sw_wire_msg_t table;              // stages: the relay's last peer table (route checks)
    double table_ms;                  // when it came (0 = never)
    double table_asked_ms;            // a query for it is out since then (0 = none)
    node_pending_t *pending;          // (NODE_PENDING_MAX) Forwards waiting for a table
    int n_pending;                    // entries
    volatile sig_atomic_t *stop;      // set by SIGINT/SIGTERM
} node_t;

int node_run(const node_opts_t *o, volatile sig_atomic_t *stop);

/* stage.c */
/* The session id, or with create a new one with a cache of n_ctx positions
 * (0 = --ctx), counted against --kv-mib; NULL with why. */
node_session_t *node_session_get(node_t *n, uint64_t id, int create, int n_ctx, const char **why);
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
/* Runs the batch through this stage's layers and sends the results on. */
void node_stage_flush(node_t *n);
int node_is_last(const node_t *n);

/* head.c: every handler only changes state and sends; none waits. */
int node_head_new(node_t *n, char *err, size_t err_len);
void node_head_free(node_t *n);
/* A GenerateRequest: starts a session, queues it, or answers busy. */
void node_head_request(node_t *n, sw_wire_msg_t *msg);
/* A client's Cancel: drops its queued request or ends its running one. */
void node_head_cancel(node_t *n, sw_wire_msg_t *msg);
/* A client's Resume: sends its request's chunks again from an index. */
void node_head_resume(node_t *n, sw_wire_msg_t *msg);
/* A Verdict from a route's tail. */
void node_head_verdict(node_t *n, sw_wire_msg_t *msg);
/* An Error from the relay or a stage. */
void node_head_error(node_t *n, sw_wire_msg_t *msg);
/* The relay's PeerTable (the answer to the head's status query). */
void node_head_table(node_t *n, sw_wire_msg_t *msg);
/* Advances every session: timers, the next rounds, the head's layers for all
 * sessions with rows to send (one batch), the sends. */
void node_head_step(node_t *n);
/* How long the loop may wait for a message before node_head_step has work
 * (ms, 0 = at once). */
int node_head_timeout(const node_t *n);

/* Monotonic ms. */
double node_now_ms(void);

#endif
