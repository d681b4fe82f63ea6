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
 * Everything runs on one thread; the only blocking wait is the head's wait
 * for a round's Verdict, during which other requests are queued.
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
    int dtype;               // hidden-state dtype sent on (SHARDWIRE__DTYPE__*)
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
    const sw_sec_t *sec; // keys for the relay connection (keys.h); NULL = loopback only
} node_opts_t;

/* One session's state on a stage. */
typedef struct node_session {
    uint64_t id;         // 0 = free slot
    sw_kv_t *kv;         // this stage's cache
    sw_verifier_t *ver;  // last stage only
    double last_used_ms; // for the idle timeout
    uint64_t round;      // last round seen
    char creator[64];    // peer whose Forward created it; only it may send more
    char owner[64];      // route[0] of that Forward (the head): may close it too
} node_session_t;

typedef struct node_head node_head_t;

typedef struct node {
    node_opts_t o;               // options
    sw_backend_t *be;            // compute backend (one device or a group)
    sw_model_t *model;           // layers [begin, end)
    const sw_hparams_t *hp;      // model hyper-parameters
    char fingerprint[65];        // model identity
    sw_peer_t *peer;             // relay connection
    node_session_t *sessions;    // (max_sessions)
    float *hidden_in;            // (SW_WIRE_MAX_ROWS, n_embd) f32
    float *hidden_out;           // (SW_WIRE_MAX_ROWS, n_embd) f32
    void *wire_buf;              // (SW_WIRE_MAX_ROWS, n_embd) f32-sized dtype buffer
    float *logits;               // (SW_MAX_DRAFT + 1, n_vocab), last stage
    node_head_t *head;           // head state (first stage only)
    volatile sig_atomic_t *stop; // set by SIGINT/SIGTERM
} node_t;

int node_run(const node_opts_t *o, volatile sig_atomic_t *stop);

/* stage.c */
node_session_t *node_session_get(node_t *n, uint64_t id, int create, const char **why);
void node_session_free(node_t *n, node_session_t *s);
void node_sessions_expire(node_t *n, double now_ms);
/* Handles a Forward addressed to this stage (hop >= 1). */
void node_stage_forward(node_t *n, sw_wire_msg_t *msg);
/* Hidden states in the wire dtype: src itself for f32, else converted into
 * scratch (n elements of the dtype). The result is what to send. */
const void *node_hidden_pack(int dtype, const float *src, void *scratch, size_t n);
void node_hidden_unpack(int dtype, const void *src, float *dst, size_t n);
int node_is_last(const node_t *n);

/* head.c */
int node_head_new(node_t *n, char *err, size_t err_len);
void node_head_free(node_t *n);
/* Queues or starts a generation request. */
void node_head_request(node_t *n, sw_wire_msg_t *msg);
/* A client's Cancel: drops its queued request or stops its running one. */
void node_head_cancel(node_t *n, sw_wire_msg_t *msg);
/* Runs queued requests, one at a time. */
void node_head_work(node_t *n);

/* Monotonic ms. */
double node_now_ms(void);

#endif
