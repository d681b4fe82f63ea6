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
 * (seed, its first drawing position: kv_keep + its context rows) (decode.h),
 * it gives the same verdicts. The failed round is
 * then sent again and commits what it would have without the fault. The
 * client only ever sees committed tokens, so nothing is lost or sent twice.
 *
 * This module is the session's recovery as a state machine driven by events
 * (a round sent, a verdict, a failure, a route check) that says what to do
 * next; it sends and receives nothing itself. The head's event loop (head.c)
 * feeds it and does the sending, so one session recovering never stops the
 * others. test_recover_loop.c drives it against a simulated pipeline.
 */
#ifndef SW_NODE_RECOVER_H
#define SW_NODE_RECOVER_H

#include <stddef.h>
#include <stdint.h>

#include "codec.h"
#include "decode.h"

/* What the head does next for a session (node_recover_next). */
enum node_rec_act {
    NODE_REC_WAIT = 0,  /* nothing now: a verdict, or the next poll, is awaited */
    NODE_REC_SEND = 1,  /* send logged round *idx (all its chunks) under a new round number */
    NODE_REC_ROUTE = 2, /* the pipeline failed: build the route again from a fresh peer table
                           and answer with node_recover_routed() */
    NODE_REC_FAIL = 3,  /* give up: err says why */
};

/* replayed rounds in flight at most (below SW_RELAY_DEFAULT_HWM, what the relay queues per peer) */
#define NODE_REC_WINDOW 32
#define NODE_REC_POLL_MS 250 /* between route checks while waiting for the pipeline */

typedef struct node_recover node_recover_t;

/* State for one session; timeout_ms bounds how long one recovery waits for
 * the pipeline to be whole again. NULL when out of memory. Free with
 * node_recover_free(). */
node_recover_t *node_recover_new(int timeout_ms) __attribute__((warn_unused_result));
void node_recover_free(node_recover_t **self_p);

/* Logs the session's next round as it will be sent (the prefill first) and
 * makes it the current round: its verdict commits; node_recover_next then
 * asks for it to be sent. 0, or -1 (out of memory, or r does not follow). */
int node_recover_log(node_recover_t *rec, const sw_round_t *r) __attribute__((warn_unused_result));
/* Rounds logged (the current one is the last). */
int node_recover_n_rounds(const node_recover_t *rec);
/* Logged round i exactly as it was sent; its draft distributions go to
 * q_buf (SW_MAX_DRAFT entries) and point into rec. */
void node_recover_get(const node_recover_t *rec, int i, sw_round_t *r, sw_draft_q_t *q_buf);

/* What to do now (deadline_ms: the request's absolute deadline, 0 = none).
 * NODE_REC_SEND fills *idx; NODE_REC_FAIL fills err. */
int node_recover_next(node_recover_t *rec, double now, double deadline_ms, int *idx, char *err,
                      size_t err_len);
/* Logged round idx went out whole, as round number round_no, in chunks Forwards. */
void node_recover_sent(node_recover_t *rec, int idx, uint64_t round_no, int chunks, double now);
/* A verdict for round_no arrived: 1 when it is the current round's (commit
 * it), 0 for a replayed round's (dropped; it opens the replay window) or a
 * stale one (an attempt that failed). */
int node_recover_verdict(node_recover_t *rec, uint64_t round_no, double now);
/* The current attempt failed in a way recovery may fix (a stage left or
 * restarted, the relay restarted, a message was lost, no verdict in time):
 * node_recover_next asks for the route, then for the replay. */
void node_recover_failed(node_recover_t *rec, double now, const char *why);
/* node_recover_failed for a relay link that was lost while the round travelled (the head
 * has others): the stages kept their caches, so once the route is whole again only the
 * current round is sent again (the tail verifies it again exactly: sw_verifier_run), not
 * the whole session. A failure of any other kind before the replay goes out makes it a
 * whole replay again. */
void node_recover_relay_lost(node_recover_t *rec, double now, const char *why);
/* The stages no longer hold the session under its id (it goes on under a new one): the
 * recovery under way replays it whole, even after a lost link (node_recover_relay_lost). */
void node_recover_caches_gone(node_recover_t *rec);
/* The current attempt moves (the tail acknowledged a piece of it): a later failure of the
 * round waits its own timeout for the pipeline, not what was left of an earlier failure's
 * (issue 33: a replay of a long prompt that moved for 14 minutes gave up at its next failure
 * at once, "waiting up to 0 s"). */
void node_recover_progress(node_recover_t *rec, double now);
/* The answer to NODE_REC_ROUTE: ok = 1 when a whole pipeline is back (the
 * rounds before the current one are sent again, then the current one), 0
 * when not yet (why), asked again NODE_REC_POLL_MS later. */
void node_recover_routed(node_recover_t *rec, double now, int ok, const char *why);
/* 1 while the current round was sent and its verdict is awaited. */
int node_recover_waiting(const node_recover_t *rec);
/* 1 while a replay waits for the verdict of its window's last round
 * (NODE_REC_WINDOW replayed rounds unanswered) before it sends more: the
 * head times it out and checks the route as while the current round
 * travels. */
int node_recover_stalled(const node_recover_t *rec);
/* 1 from a replay's start until the current round after it commits. */
int node_recover_replaying(const node_recover_t *rec);
/* 1 between a failure and the route being whole again. */
int node_recover_failing(const node_recover_t *rec);

/* The head's counters of lost links (net/peer.h), read when a round starts to go out and
 * while it travels. */
typedef struct node_recover_links {
    uint64_t losses;  // relay links lost (sw_peer_losses)
    int announces;    // announces on the head's relay connections (sw_peer_announces)
    uint64_t dlosses; // direct links lost (sw_peer_direct_losses)
    int several;      // 1: the head has more than one relay link now (sw_peer_links > 1)
} node_recover_links_t;
/* Logged round idx starts to go out; l: the head's counters now. A lost link counts from
 * here for the current round, and for a replay from its first round on: its rounds go out
 * back to back with no verdict awaited between them, so a link lost between two of them is
 * noticed when the current round travels behind them (it was not: each send of the current
 * round took the counters again). */
void node_recover_links_mark(node_recover_t *rec, int idx, const node_recover_links_t *l);
/* While the attempt's rounds travel (node_recover_waiting or node_recover_stalled): a link
 * lost since the mark fails the attempt. 1: a relay link of several or a direct link
 * (node_recover_relay_lost: the current round alone goes again, unless a replay was under
 * way); 2: the head's one relay connection was renewed (node_recover_failed: what the relay
 * held for the head is gone, the verdict maybe too: a whole replay); 0: none. *why says
 * which. */
int node_recover_links_check(node_recover_t *rec, const node_recover_links_t *l, double now,
                             const char **why);

/* Route liveness beyond names: a stage that was killed and restarted under
 * the same name (or that reconnected after a relay restart) has a new
 * connection, whose relay counters start again from zero. At route build the
 * head records each stage's msgs_out / msgs_in. A later table is implausible
 * for the same connection when a stage was delivered fewer messages than
 * were surely sent to it since: for every stage, the chunks of every round
 * whose verdict came back, and for the first stage after the head also every
 * chunk the head sent (the caller asks for the table after they went) but
 * SW_RELAY_PARK_PER_PAIR the relay may hold. What the stage before a later
 * one sent proves nothing: it may serve other routes, or its chunk may wait
 * at the relay for a slow stage's link (issue 33: that took slow rounds for
 * restarts). Then the round in flight may be lost. A hop that a direct link
 * carries (issue 39) is not counted, and once a direct link into a stage was
 * seen since the baseline its counter proves nothing: a table that shows the
 * link gone says that what it carried may be lost, not that the stage
 * restarted. names[0] is the head (not checked). */
void node_recover_route_baseline(node_recover_t *rec, const sw_msg_table_t *t,
                                 char names[][SW_WIRE_NAME_MAX + 1], int n);
/* Notes the direct links into the stages of names that t shows (the head calls it with
 * every table of its baseline's relay, so that a link up and down between two route checks
 * is seen). */
void node_recover_route_note(node_recover_t *rec, const sw_msg_table_t *t,
                             char names[][SW_WIRE_NAME_MAX + 1], int n);
/* 1 when every stage names[1..n) is in t with a plausible counter; else the
 * stage and the reason in why, and 0 (a stage's connection is new: it or the
 * relay restarted), -1 (a stage is not in t: it left that relay) or 2 (a direct
 * link into a stage, seen since the baseline, is gone, or messages are missing at a
 * stage that may link directly and whose relay connection is the same one (its byte
 * counter did not go back): the round in flight alone goes again, the stages kept
 * their caches; a restarted one says so to it).
 * The caller noted t's direct links first (node_recover_route_note). */
int node_recover_route_check(const node_recover_t *rec, const sw_msg_table_t *t,
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
