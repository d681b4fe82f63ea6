/*
 * recover.h - session recovery on the head: when a round of the pipeline
 * fails (a stage was killed, the relay restarted, a message was lost), the
 * head waits for the pipeline to be whole again, rebuilds the route, replays
 * the session's committed tokens to rebuild every downstream cache, and sends
 * the failed round again.
 *
 * The head logs every round of the session as it sent it (rows, drafts and
 * what it said about their distributions). A replay sends those rounds again
 * in order, from the prefill (kv_keep = 0) on, at most 32 unanswered at a
 * time, and drops their verdicts: every stage, restarted or not, truncates
 * and recomputes its cache in exactly the shapes it had (a prompt is batched
 * as a prompt, decode rows as decode rows: the engine reduces attention in a
 * different order for the two), the head recomputes its own layers the same
 * way, and the tail's verifier sees the same rounds again, so its repetition
 * history is rebuilt and, since it draws each round's random numbers from
 * (seed, kv_keep) (decode.h), it gives the same verdicts. The failed round is
 * then sent again and commits what it would have without the fault. The
 * client only ever sees committed tokens, so nothing is lost or sent twice.
 *
 * The pipeline itself (sending rows, waiting for a verdict, building a route)
 * stays in head.c; it is reached through node_recover_ops_t.
 */
#ifndef SW_NODE_RECOVER_H
#define SW_NODE_RECOVER_H

#include <stddef.h>
#include <stdint.h>

#include "decode.h"
#include "wire.h"

/* Results of the ops below. */
#define NODE_RECOVER_OK 0
#define NODE_RECOVER_RETRY (-1) /* failed, but recovery may fix it */
#define NODE_RECOVER_FATAL (-2) /* failed for good (deadline, shutdown, bad input) */

typedef struct node_recover_ops {
    void *ctx; /* the head's pipeline state, passed to every op */
    /* Runs the head's layers on r's rows and sends them down the route as
     * Forwards (SW_WIRE_MAX_ROWS rows per chunk) under a new round number.
     * more = 1 marks every chunk prefill_more (no Verdict comes back).
     * Returns the number of chunks sent, or RETRY / FATAL with err. */
    int (*send)(void *ctx, const sw_round_t *r, int more, char *err, size_t err_len);
    /* Waits for the Verdict of the last round sent: OK, RETRY or FATAL. */
    int (*wait)(void *ctx, sw_verdict_t *out, char *err, size_t err_len);
    /* Builds the route again from the relay's table: OK, RETRY (not whole
     * yet, err says why) or FATAL. */
    int (*reroute)(void *ctx, char *err, size_t err_len);
    /* Serves other messages (queues requests, drops stale ones) for up to
     * ms: OK, or FATAL when the head must stop. */
    int (*idle)(void *ctx, int ms, char *err, size_t err_len);
} node_recover_ops_t;

typedef struct node_recover node_recover_t;

/* State for one session of at most n_ctx positions; timeout_ms bounds how
 * long one recovery waits for the pipeline to be whole again. NULL when out
 * of memory. Free with node_recover_free(). */
node_recover_t *node_recover_new(int n_ctx, int timeout_ms) __attribute__((warn_unused_result));
void node_recover_free(node_recover_t **self_p);

/* Runs one round through ops with recovery: records its context rows as
 * committed, sends it, waits for its verdict, and on a RETRY failure waits
 * (up to the recovery timeout and deadline_ms, an absolute node_now_ms time,
 * 0 = none) for a route, replays and retries, as often as needed. 0, or -1
 * with a one-line reason in err. */
int node_recover_round(node_recover_t *rec, const node_recover_ops_t *ops, const sw_round_t *r,
                       double deadline_ms, sw_verdict_t *out, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/* Route liveness beyond names: a stage that was killed and restarted under
 * the same name (or that reconnected after a relay restart) has a new
 * connection, whose relay counters start again from zero. At route build the
 * head records each stage's msgs_out / msgs_in. A later table is implausible
 * for the same connection when a stage was delivered fewer messages than
 * were surely sent to it since: for the first stage after the head, every
 * chunk the head sent (the head's status query travels behind them); for a
 * later stage, every message the stage before it sent; for all, the chunks
 * of every round whose verdict came back. Then the round in flight may be
 * lost. names[0] is the head (not checked). */
void node_recover_route_baseline(node_recover_t *rec, const Shardwire__PeerTable *t,
                                 char names[][SW_WIRE_NAME_MAX + 1], int n);
/* 1 when every stage names[1..n) is in t with a plausible counter; else 0
 * with the stage and the reason in why. */
int node_recover_route_check(const node_recover_t *rec, const Shardwire__PeerTable *t,
                             char names[][SW_WIRE_NAME_MAX + 1], int n, char *why, size_t why_len);

/* Totals over the request, for logs and tests. */
typedef struct node_recover_stats {
    int recoveries;        // failures recovered from
    int replays;           // replays sent
    int replayed_rounds;   // rounds sent again in all
    double detect_ms;      // last failure: round sent to failure noticed
    double recover_ms;     // last failure: failure noticed to retried round's verdict
    double recover_ms_sum; // all recoveries
} node_recover_stats_t;
const node_recover_stats_t *node_recover_stats(const node_recover_t *rec);

#endif
