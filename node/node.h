/*
 * node.h - the state of one shardwire-node process (node_t) and its event
 * loop (node.c, node_run).
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
 * waiting Forwards as one batch (stage.h), then lets the head advance every
 * session's state (head.h) and run its own layers for all sessions that have
 * a round to send, again as one batch.
 *
 * The modules stand in layers: node.c on top calls the stage and the head;
 * they read and change node_t but call nothing of node.c, and each other only
 * where the head grows its own cache with the stage's node_kv_grow.
 * node_t embeds the stage's state (its types in stage.h) and points at the
 * head's (opaque here, head_impl.h). node_run allocates and frees all of it.
 */
#ifndef SW_NODE_H
#define SW_NODE_H

#include <signal.h>
#include <stdint.h>

#include "args.h"
#include "backend.h"
#include "decode.h"
#include "model.h"
#include "peer.h"
#include "prefix.h"
#include "stage.h"

typedef struct node_opts {
    const char *model;        // GGUF path
    int layer_begin;          // first layer held
    int layer_end;            // one past the last layer held (-1 = to the end)
    const char *relay;        // relay endpoint
    const char *name;         // peer name
    const char *model_name;   // name clients ask for (NULL = the file name without .gguf)
    const char *backend;      // compute backend name (sw_backend_new; NULL = auto)
    int threads;              // CPU compute threads (0 = all cores)
    int n_ctx;                // positions a session may reach (0 = the model's trained
                              // context, capped by the KV memory; resolved at load)
    int kv_type;              // sw_kv_type_t of the sessions' caches (--kv-type)
    int max_sessions;         // sessions held at once
    int idle_timeout_ms;      // a session unused this long is freed
    int round_timeout_ms;     // head: a round with no verdict after this long is recovered
    int recover_timeout_ms;   // head: how long one recovery waits for the pipeline
    sw_dtype_t dtype;         // hidden-state dtype sent on
    sw_dtype_t prefill_dtype; // ... in a prefill's Forwards (--prefill-dtype; default: dtype)
    int heartbeat_ms;         // ZMTP heartbeat interval
    char listen[SW_ARGS_ENDPOINT_MAX];        // --listen ("" = none): direct links
    char listen_public[SW_ARGS_ENDPOINT_MAX]; // --listen-public ("" = --listen)
    const char *allow_file;                   // --allow: the listener's allow-list
    int direct_dial_ms;                       // --direct-dial-ms (0 = SW_DIRECT_DIAL_MS)
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
    int max_queue_per_client;     // head: of them from one client at most (0 = no limit)
    int max_sessions_per_client;  // head: sessions one client key runs at once (0 = no limit)
    int sessions_per_client_hard; // head: 1 = that is a hard cap (the flag was given); 0 = it
                                  // applies only while another key's request waits
    int prefill_pieces;           // head: prompts go in pieces of about this many one-row
                                  // forwards while alone (node/head_sched.c); 0 = whole windows
    int max_batch_rows;           // rows in one batched forward (a larger prefill chunk runs alone)
    int64_t kv_bytes;             // memory for the sessions' KV caches, bytes (0 = no cap)
    int prefix_cache;             // 1: keep prompt prefixes' KV for later requests (within
                                  // kv_bytes; engine/include/prefix.h)
    const char *public_prefix;    // head: a file whose text starts prompts every tenant may
                                  // reuse from the prefix cache (NULL = none)
    int draft_load;               // head: 1 = K and trees follow the load (drafter/load.h)
    int draft_gate;               // head: 1 = with several sessions, drafting is kept only while it
                                  // measures faster than plain rounds (drafter/load.h)
    int draft_batch;              // head: 1 = the sessions' draft steps run batched
    int layer_auto;               // 1: --layers auto (a standby until the head assigns a range)
    int mem_mib;                  // placement: memory for weights and KV, MiB (0 = half the
                                  // memory available at start)
    int auto_nodes;               // head: plan for the auto nodes (wait for this many at first;
                                  // 0 = no placement)
    double spot_share;            // head: share of sessions spot-checked, [0, 1] (0 = off)
    int test_flip_bit;            // TESTING ONLY: flip one bit in every Nth hidden-state
                                  // payload passed on (0 = honest)
    int test_slow_ms;             // TESTING ONLY: every stage batch holds the loop this much
    double test_slow_x;           // TESTING ONLY: ... or this many times its probe's claim
                                  // longer, ms (0 = off)
    int test_skew_ms;             // TESTING ONLY: the sealing clock runs this far ahead, ms
    int test_fake_digest;         // TESTING ONLY: a tail that reports a made-up digest of what it
                                  // received in every Nth verdict (0 = honest)
} node_opts_t;

typedef struct node_place node_place_t; // place.h

typedef struct node_head node_head_t; // head.h

typedef struct node {
    node_opts_t o;          // options
    sw_backend_t *be;       // compute backend (one device or a group)
    sw_model_t *model;      // layers [begin, end)
    const sw_hparams_t *hp; // model hyper-parameters
    char fingerprint[65];   // model identity
    sw_peer_t *peer;        // relay connection(s)
    int via; // the relay (link index) the message being handled came by, -1 = none: a stage
             // answers and passes a Forward on by the relay it came by (peer.h)
    node_session_t *sessions;         // (max_sessions)
    sw_kv_budget_t kv;                // the sessions' caches against --kv-mib (kv.h): bytes
                                      // allocated, cached prefixes give way (stage_session.c)
    int kv_full;                      // sessions of n_ctx positions --kv-mib holds at once
    const char *ctx_from;             // why o.n_ctx is what it is ("--ctx", ...; static)
    uint64_t closed[NODE_CLOSED_IDS]; // ring of recently closed session ids
    int closed_at;                    // next slot of the ring
    int rows_cap;                     // rows of hidden_in / hidden_out: max(--max-batch-rows, 512)
    int logit_cap;                    // rows of logits: max(--max-batch-rows, SW_MAX_DRAFT + 1)
    float *hidden_in;                 // (rows_cap, n_embd) f32, the batch's input
    float *hidden_out;                // (rows_cap, n_embd) f32, its output
    void *wire_buf;                   // (SW_WIRE_MAX_ROWS, n_embd) f32-sized dtype buffer
    float *logits;                    // (logit_cap, n_vocab), last stage
    node_fwd_t *batch;                // (NODE_MAX_BATCH) the queue: Forwards waiting for a batch
    int n_batch;                      // entries
    size_t queue_bytes;               // their payloads' bytes (<= NODE_QUEUE_BYTES)
    int n_batch_run;                  // of them, taken into the batch being built
    int batch_rows;                   // its rows
    int batch_logits;                 // its logits rows
    struct node_sched *sched;         // the fair queue of the stage's batches (stage_sched.c)
    uint64_t stat_batches;            // batches run (for logs and tests)
    uint64_t stat_batched;            // Forwards run in them
    int stat_shared_rows;             // most rows in one batch of 2 or more Forwards
    uint64_t stat_passed;             // Forwards passed on (--test-flip-bit counts them)
    uint64_t stat_verdicts;           // verdicts sent (--test-fake-digest counts them)
    node_head_t *head;                // head state (first stage only)
    sw_prefix_t *prefix;              // KV of prompt prefixes computed here (NULL = off), in
                                      // kv_bytes with the sessions' caches
    sw_wire_msg_t table;              // stages: the relay's last peer table (route checks)
    double table_ms;                  // when it came (0 = never)
    double table_asked_ms;            // a query for it is out since then (0 = none)
    node_pending_t *pending;          // (NODE_PENDING_MAX) Forwards waiting for a table
    int n_pending;                    // entries
    node_place_t *place;              // placement (auto node, or a head with --auto-nodes)
    volatile sig_atomic_t *stop;      // set by SIGINT/SIGTERM
    /* The backend failed for good (sw_backend_failed: a GPU's fatal error):
     * the stage or the head sets these after telling the sessions' heads;
     * the event loop (node.c) then says so in one line and the node leaves
     * the relay, so that the head routes around it (a standby takes over). */
    int gpu_failed;    // 1 once it did
    char gpu_err[256]; // the forward's error
} node_t;

/* A duration in ms as the microseconds of a timing field, 0..UINT32_MAX (71 minutes). */
static inline uint32_t node_us(double ms)
{
    return !(ms > 0) ? 0 : ms >= 4294967.295 ? UINT32_MAX : (uint32_t)(ms * 1e3);
}

/* Serves o until *stop is set (SIGINT/SIGTERM) or the relay connection is
 * lost: loads the layer range, joins the relay, runs the event loop. o's
 * strings must outlive the call. 0 on a clean stop, 1 on a failure (logged). */
int node_run(const node_opts_t *o, volatile sig_atomic_t *stop);

#endif
