/*
 * placement.h - placement on the node (docs/architecture.md, "Placement").
 *
 * An auto node (--layers auto) starts as a standby: it probes its speed on
 * the model's own layers (a middle pair, and the last layer with the LM
 * head, each loaded, timed at 1 and NODE_PROBE_ROWS rows and freed again),
 * joins the relay holding no layers (ROLE_MIDDLE, [0, 0), its probe times,
 * memory and round trip in the announce) and waits for its head's
 * PlanAssign; then it loads that range and announces again as a stage.
 * Before it has a range it holds the backend and the planner's table of
 * layer sizes, no weights: the probe's layers are unmapped again.
 *
 * A head started with --auto-nodes N probes its own layers too and, when its
 * route has a gap (at start, when the auto nodes have no range yet; later,
 * when a stage left), plans the gap over the standby auto nodes (placement/planner.h)
 * and sends each its range; with N, the first plan waits for N standbys.
 */
#ifndef SW_NODE_PLACE_H
#define SW_NODE_PLACE_H

#include "codec.h"
#include "node.h"

#define NODE_PROBE_ROWS 9        // the probe's K+1 rows (K = 8 drafts)
#define NODE_PLACE_LOAD_MS 30000 // a node assigned a range is awaited this long before re-planning
#define NODE_PLACE_BENCH_MS                                                                        \
    600000                        // ... and one that did not take it is left out of plans this long
#define NODE_PLACE_BENCH_MAX 16   // nodes remembered so
#define NODE_PLACE_SLOW_X 8       // a placed node whose stage computes more than this many times
#define NODE_PLACE_SLOW_MIN_MS 20 // ... and this many ms slower than its probe claimed
#define NODE_PLACE_SLOW_ROUNDS 16 // ... in this many of NODE_PLACE_SLOW_WINDOW rounds is benched
#define NODE_PLACE_SLOW_WINDOW 20 // (node_place_observe)

/* The auto node's probe, before it joins: loads and times the probe
 * layers, sets n->fingerprint, n->hp (a copy), the planner's layer sizes.
 * 0, or -1 (logged). */
int node_place_standby(node_t *n);

/* What this auto node's probe claims its range takes for a batch of rows (ms, the
 * head's sum: node_place_observe), or 0 when it is not an auto node serving a range. */
double node_place_claim_ms(const node_t *n, int rows);

/* The head's own probe and planner state (--auto-nodes). 0, or -1 (logged). */
int node_place_head(node_t *n);

/* The placement fields of n's announce (probe, memory, round trip, auto). */
void node_place_announce(const node_t *n, sw_msg_announce_t *an);

/* After joining: measures the round trip to the relay (the mean of 16
 * status queries, each after a 5 ms pause: what a hop of a round meets on
 * the machine as it is loaded). 1 when the caller should announce again with it,
 * 0 otherwise (no placement state, or no answer). */
int node_place_rtt(node_t *n);

/* A PlanAssign arrived: checks that this is a standby auto node, that the
 * sender is the key-bound head of this model in the relay's table now, and
 * that the range fits the model and the node's memory. 1 with
 * n->o.layer_begin / layer_end set (the caller loads them and announces
 * again); 0 when refused (logged, answered with ERR_PLAN_REFUSED) or
 * ignored. */
int node_place_assign(node_t *n, const sw_wire_msg_t *m);

/* The head read a peer table (route_ok: it had a whole pipeline): plans a
 * gap over the standby auto nodes when there is one. */
void node_place_table(node_t *n, const sw_msg_table_t *pt, int route_ok);

/* The head's verdict said that stage `name` computed its part of a round of
 * `rows` rows (its batch's) in compute_ms: for an auto node serving a range,
 * compared with what its probe claimed for those rows. One that is slower
 * than it claimed (NODE_PLACE_SLOW_*) in most rounds of a window is benched
 * (its claims left out of plans for NODE_PLACE_BENCH_MS) and its range
 * counts as a gap, planned again over the standby nodes: 1 then (the head
 * avoids it on routes), else 0. */
int node_place_observe(node_t *n, const char *name, int rows, double compute_ms, double now);

/* Frees the placement state. */
void node_place_free(node_t *n);

#endif
