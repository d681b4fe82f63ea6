/*
 * sched.h - the fair queue of a node's compute, shared by the head (its
 * batch, node/head_session.c) and every stage (the batch of waiting
 * Forwards, node/stage.c): which rounds and prompt pieces run next, so that
 * one client key's long prompts cannot starve another key's requests, and
 * nothing waits while there is work (docs/security.md, "Compute shared per
 * key"; docs/architecture.md, "The scheduler").
 *
 * The rule. Work belongs to flows on five levels (node_sched_flows): the
 * sender (at a stage: the key of the node that sent the session, the one
 * name the relay vouches for; at the head: the head itself), the head under
 * it (at a stage: route[0], which the route check holds to a key-bound head;
 * at the head: itself again), the client key under that (at a stage: the
 * head's opaque id of it, Forward.fair_client), the tenant under that key
 * (an API key of the gateway), the session. So a head that says many client
 * ids shares a stage with the other heads as one, and a node that names
 * another node's head in its Forwards competes within its own sender's
 * share. Each flow counts the milliseconds of compute its work took here
 * (its service: each batch's time shared among the items in it). The next
 * batch starts with the work of the least served sender, of its least served
 * head, of that head's least served client key, of that key's least served
 * tenant, of that tenant's least served session; the decode and verification
 * rounds of
 * other sessions join it while the batch has room (they share the reading of the weights and end no
 * later than they would after it); a prompt piece joins a batch only as its first entry (it runs in
 * a chunk of its own, so it would only delay the rounds before it). A flow that waited while others
 * ran does not bank that time: when it competes again it is lifted to at most NODE_SCHED_CREDIT_MS
 * behind the most served of the flows it competes with (its siblings under
 * the same parent), so a key idle for an hour gets priority for about that
 * much compute, not for an hour. Nothing is reserved: a flow alone takes every batch.
 *
 * Flow ids are keyed hashes (SipHash-2-4 with a secret drawn per scheduler)
 * of their names under their parent's id, so no name a client chooses can
 * be made to share another's flow. The table remembers NODE_SCHED_FLOWS
 * flows (least recently used forgotten; a forgotten flow returns as a new
 * one, lifted like any).
 *
 * Prompt pieces (node_sched_piece_rows): the head cuts a prompt into pieces
 * that each cost about k of its one-row forwards (w_ms): the weights are
 * read once per call, so a piece of that cost spends about 1/k of its time
 * on that read; k is NODE_SCHED_PIECE_ALONE (--prefill-pieces) while the
 * prefill is the only work at the head (a request that arrives meanwhile
 * waits about that long at each stage) and NODE_SCHED_PIECE_SHARED while
 * other sessions run (a round that arrives behind a piece waits about two
 * rounds' time at each stage).
 *
 * One thread; node_sched_new's result is freed by node_sched_free.
 */
#ifndef SW_NODE_SCHED_H
#define SW_NODE_SCHED_H

#include <stddef.h>
#include <stdint.h>

/* The levels of flows, and how many flows the table remembers (all levels). */
#define NODE_SCHED_LEVELS 5
#define NODE_SCHED_FLOWS 1024
/* Compute (ms) a competing flow may be behind its most served sibling. */
#define NODE_SCHED_CREDIT_MS 500
/* Prompt pieces of about this many one-row forwards: alone (--prefill-pieces' default), with
 * other sessions running. */
#define NODE_SCHED_PIECE_ALONE 4
#define NODE_SCHED_PIECE_SHARED 2
/* A prompt's next piece waits this long at most for the tail's acknowledgement of an
 * earlier one (so one that was lost costs no more). */
#define NODE_SCHED_ACK_WAIT_MS 5000
/* A prompt's pieces sent and not yet acknowledged at most: the window covers the route's
 * round trip (issue 33), but the stages' queues hold no more of one prompt than this. */
#define NODE_SCHED_WINDOW_MAX 32

typedef struct node_sched node_sched_t;

/* One piece of work that could run in the next batch. */
typedef struct node_sched_item {
    uint64_t flow[NODE_SCHED_LEVELS]; // its flow at each level (node_sched_flow, nested)
    int rows;                         // rows it runs
    int alone;                        // 1: a prompt piece (a chunk of its own in the engine):
                                      // joins a batch only as its first entry
} node_sched_item_t;

/* A scheduler with a fresh secret; NULL when out of memory. */
node_sched_t *node_sched_new(void) __attribute__((warn_unused_result));
/* Accepts NULL and NULLs the caller's pointer. */
void node_sched_free(node_sched_t **self_p);

/* The id of the flow called name (len bytes) under parent (0: a sender). */
uint64_t node_sched_flow(const node_sched_t *q, uint64_t parent, const void *name, size_t len);

/* A flow's name: len bytes at p. */
typedef struct node_sched_name {
    const void *p;
    size_t len;
} node_sched_name_t;

/* The nested flows of a session's work (out[0..NODE_SCHED_LEVELS)): sender, head under it,
 * client under the head, tenant under the client, then the session id. */
void node_sched_flows(const node_sched_t *q, node_sched_name_t sender, node_sched_name_t head,
                      node_sched_name_t client, node_sched_name_t tenant, uint64_t session,
                      uint64_t *out);

/* The next batch out of items[0..n): writes the indices it takes to sel (n
 * entries of room), fairest first, and returns their count (1 or more when
 * n > 0). The first is always taken whatever its rows; the others only
 * while the rows stay within max_rows, and never an `alone` one. Lifts the
 * competing flows that fell more than NODE_SCHED_CREDIT_MS behind (above). */
int node_sched_pick(node_sched_t *q, const node_sched_item_t *items, int n, int max_rows, int *sel);

/* item ran, its share of the batch's time ms: its flows' service grows by it. */
void node_sched_charge(node_sched_t *q, const node_sched_item_t *item, double ms);

/* The service of a flow (ms; 0 for one not remembered), for tests. */
double node_sched_served(const node_sched_t *q, uint64_t flow);

/* Rows the next piece of a prompt should have: w_ms: the node's one-row
 * forward (0 = not known); the session's previous piece: prev_rows rows in
 * prev_ms (0 = none yet); k: NODE_SCHED_PIECE_*. About (k - 1) one-row
 * forwards' worth of the previous piece's cost per row, at least 1 row; 64
 * for the first piece of a prompt, and for any piece while w_ms or the
 * previous piece is unknown. The piece itself is cut by node/chunk.c
 * (node_chunk_rows: the bytes, the windows, 8 rows at a window's start). */
int node_sched_piece_rows(double w_ms, int prev_rows, double prev_ms, int k);

#endif
