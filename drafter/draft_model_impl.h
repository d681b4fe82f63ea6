/*
 * draft_model_impl.h - what the draft model proposer's files share, private
 * to them: struct draft_model, struct draft_seq, a forward a step posts
 * (draft_req_t), a node of a token tree (draft_node_t), and the helpers one
 * file calls in another. draft_model.c holds the life cycle of models and
 * sequences, the catch-up and chain proposals and the step machine;
 * draft_batch.c runs the forwards that steps post (batched drafting);
 * draft_tree.c grows token-tree proposals. Users see only draft_model.h.
 *
 * Ownership as in draft_model.h: a draft_model_t owns its backend, model and
 * scratch; a draft_seq_t owns its cache and buffers and borrows the model.
 */
#ifndef DRAFT_MODEL_IMPL_H
#define DRAFT_MODEL_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "decode.h"
#include "draft_model.h"
#include "model.h"
#include "prefix.h"

#define DRAFT_TREE_WIDTH 2                      // nodes expanded per tree step (one draft forward)
#define DRAFT_TREE_NODES (4 * SW_MAX_DRAFT + 1) // nodes a tree proposal may find
#define DRAFT_REQ_ROWS 8 // most rows one sequence puts into a batched forward

/* The state of a sequence's posted forward (draft_batch.c). */
enum { DRAFT_REQ_NONE = 0, DRAFT_REQ_POSTED, DRAFT_REQ_DONE, DRAFT_REQ_FAILED };

typedef struct draft_req {
    int state;                   // DRAFT_REQ_*
    int n;                       // rows, 1..DRAFT_REQ_ROWS
    int32_t tok[DRAFT_REQ_ROWS]; // (n) their tokens
    int32_t par[DRAFT_REQ_ROWS]; // (n) tree rows: the slot each hangs under
    int tree;                    // 1: par is set
    int slot0;                   // the cache length when posted (the first row's slot)
    float *logits;               // (n_logits, n_vocab) the sequence's buffer for the last rows
    int n_logits;                //
    int steps;                   // > 0: a greedy chain step; alone it may run up to this many
                                 // steps on the backend (sw_model_greedy_steps)
    int n_out;                   // greedy chain: steps run (argmax after each)
    int32_t out[SW_MAX_DRAFT];   // (n_out) their argmax
    float prob[SW_MAX_DRAFT];    // (n_out) its softmax probability at temperature 1
    struct draft_seq *next;      // the model's list of posted requests
} draft_req_t;

struct draft_model {
    char *path;                  // the GGUF path (for messages)
    sw_backend_t *be;            // own backend
    sw_model_t *m;               // all layers
    int cap;                     // default cache positions of a sequence
    int n_vocab;                 // vocabulary size
    float *probs;                // (n_vocab) sampling distribution scratch
    int32_t *heap_id;            // (DRAFT_Q_MAX) top-support selection
    float *heap_val;             // (DRAFT_Q_MAX)
    int trees;                   // 1 when its backend runs token trees
    draft_ahead_mem_t ahead;     // what drafting ahead reached so far (all sessions)
    int batching;                // 1: steps post their forwards (draft_model_flush runs them)
    struct draft_seq *pend;      // posted requests, oldest first
    struct draft_seq *pend_tail; //
    sw_kv_t **b_kvs;             // (b_cap) draft_model_flush's arguments
    sw_forward_t *b_fs;          // (b_cap)
    int b_cap;                   //
    draft_batch_stats_t stats;   // what the flushes did
    draft_load_t *load;          // where the steps' costs go (not owned), or NULL
    sw_prefix_t *prefix;         // prompt prefixes' KV (draft_model_set_prefix), or NULL
    size_t prefix_max;           // its bytes at most
};

/* A tree node of a proposal being built: node 0 is the root (the token the
 * drafts follow), the others candidates found by expanding a node. */
typedef struct draft_node {
    int32_t tok;  // its token
    int32_t par;  // its parent node
    float q;      // the draft's probability of tok after its parent
    double value; // estimated probability that the target accepts it (its path's)
    int depth;    // 1 for the root's children
    int slot;     // cache slot once fed (expanded), else -1
    int main;     // 1 on the main path: the draft's top token under a main node (the chain)
} draft_node_t;

/* Where a sequence's proposal stands (draft_seq_start, draft_seq_step). */
enum {
    DRAFT_PHASE_IDLE = 0,
    DRAFT_PHASE_CATCHUP,
    DRAFT_PHASE_FEED,
    DRAFT_PHASE_CHAIN,
    DRAFT_PHASE_TREE,
    DRAFT_PHASE_DONE
};

struct draft_seq {
    draft_model_t *dm;    // the model (not owned)
    sw_kv_t *kv;          // this sequence's cache; kv_len positions hold cached[0..kv_len)
    int32_t *cached;      // (cap) tokens whose K/V the cache holds
    int cap;              // cache positions
    sw_sampler_t *s;      // the draft's sampler (target's parameters, mixed seed)
    sw_sampling_t params; // the target's sampling parameters
    int32_t *q_ids;       // (SW_MAX_DRAFT, DRAFT_Q_MAX) sparse supports
    float *q_vals;        // (SW_MAX_DRAFT, DRAFT_Q_MAX) their probabilities
    double last_ms;       // last propose: drafting time (ms)
    int last_n;           // last propose: drafts made
    double step_ms;       // moving average of one greedy step (slices the chain loop)
    char prefix_ns[SW_PREFIX_NS_LEN]; // its prompts' namespace in the model's prefix cache
    float *logits;      // (n_vocab) the last fed row's logits (each sequence its own: the
                        // proposals of several sessions advance in turns)
    float *tree_logits; // (DRAFT_TREE_WIDTH, n_vocab) the rows of one tree step
    /* the proposal in progress (draft_seq_start .. draft_seq_step) */
    int phase;          // DRAFT_PHASE_*
    const int32_t *ctx; // the sequence it follows (caller's)
    int n_ctx;          //
    draft_shape_t sh;   // its shape
    sw_proposal_t *out; // where it goes (caller's)
    int32_t feed;       // DRAFT_PHASE_FEED: the token fed after ctx (guess or extra)
    int n;              // drafts so far (chain)
    int n_eff;          // positions the drafts follow (ctx and the fed token)
    double t0, t_catch; // start, end of the catch-up (ms)
    int catch_n;        // tokens the catch-up fed
    draft_node_t nodes[DRAFT_TREE_NODES]; // tree: nodes found (0 = the root)
    int n_nodes;                          //
    int tree_steps;                       // tree: expansion steps done
    int pick[DRAFT_TREE_WIDTH];           // tree: the nodes the posted step feeds
    int n_pick;                           //
    draft_req_t rq;                       // the forward it posted (batched drafting)
};

/* ---- draft_batch.c ---- */

/* The largest softmax probability of the logits l (n) at temperature 1. */
float draft_top_prob(const float *l, int n);

/* Takes d's posted request out of the model's list (it will not run). */
void draft_req_unlink(draft_seq_t *d);
/* Posts d->rq (its fields set): with batching it waits for a flush (1);
 * otherwise it runs now and its result is in d->rq (0); -1 on error. */
int draft_req_post(draft_seq_t *d);
/* The result of the request d posted in its last step: 1 (it ran: the
 * result is in d->rq), 0 (none posted), -1 (it failed). One still waiting
 * runs now, with every other request posted. */
int draft_req_taken(draft_seq_t *d);

/* ---- draft_tree.c ---- */

/* One step of a token-tree proposal (phase DRAFT_PHASE_TREE). have: the rows
 * posted by the last step ran. 1 more, 0 done (the tree is written in
 * d->out; the caller ends the proposal), -1 on error. */
int draft_tree_step(draft_seq_t *d, int have);

#endif
