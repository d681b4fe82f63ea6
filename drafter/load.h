/*
 * load.h - what the sessions of one head cost each other: the measurements
 * behind load-adaptive speculation (adaptive.h uses them).
 *
 * A session's round does not run alone: its rows share the head's batch and
 * every stage's batch with the other sessions' rounds, and its draft steps
 * share the draft model's batched forward (draft_model_flush). A draft row
 * therefore costs twice: it lengthens the session's own round (what the K
 * controller always weighed) and it adds work to batches that other
 * sessions wait for. When the stages are idle between rounds that second
 * cost delays only the rounds in the same batch; when they are busy all the
 * time every ms of work delays everyone. So a session adds a draft row only
 * when the tokens it expects from it pay for both (draft_ctl_next_k):
 *
 *     E(K) - r * T(K) - lambda * W(K)   is largest,
 *
 * r its own best rate (tokens per ms), T(K) its own round time with K drafts,
 * W(K) the work (ms) its K drafts add to the batches (draft_load_work) and
 * lambda the rate of the other sessions that work delays (draft_load_ext):
 * the head's aggregate rate without this session, all of it in the share of
 * time the busiest stage computes (it queues everyone), otherwise the share
 * of the sessions whose rounds ran in the same batches. With one session
 * lambda is 0 and the choice is the one-session controller's. As the stages
 * fill, lambda and the marginal cost of a row grow, and K and the tree
 * shrink to what still pays, down to plain rounds.
 *
 * Measured here (the head feeds it, node/head*.c): the ms of a batch by its
 * rows for the head's layers, for the later stages (their compute of a
 * round, by the rows of the last stage's batch, from the Verdict's
 * StageTiming) and for the draft model's batched step; the tokens all
 * sessions commit; the time each stage computes (the head's batches and
 * draft steps; the later stages' batch compute once per batch); the rounds
 * per batch at the last stage; the sessions running. Moving averages over
 * windows of DRAFT_LOAD_WINDOW_MS, so that the model follows the load.
 *
 * A draft_load_t is a plain value owned by the head, one per head, shared by
 * its sessions' controllers (draft_cfg_t.load); one thread.
 */
#ifndef DRAFT_LOAD_H
#define DRAFT_LOAD_H

#define DRAFT_LOAD_BUCKETS 16     // row counts with a measured cost (see load.c)
#define DRAFT_LOAD_WINDOW_MS 1000 // rates and busy time are taken per window this long

/* The gate: whether drafting pays at all is also measured, not only predicted.
 * The cost model above misses what it cannot see (another process on the same
 * cores, the draft model's catch-up and prefill, a later stage that slows down
 * when the head computes more). So while two or more sessions run, the head
 * alternates between rounds as the controllers choose them (arm 1) and plain
 * rounds for every session (arm 0) and, on a head with a draft model, rounds
 * whose drafts come from the n-gram lookup only (arm 2: no draft model work),
 * measures the tokens each session commits per second of running under each,
 * and keeps the best: each arm is measured for DRAFT_GATE_MEASURE windows
 * after one window to settle, the winner holds DRAFT_GATE_HOLD windows
 * (doubled, up to DRAFT_GATE_HOLD_MAX, while the same arm keeps winning) and
 * is measured again at the end of its hold before the others are tried once
 * more; a measurement ends after one window when its arm is below
 * DRAFT_GATE_CUT of another arm's last rate. An arm that lost by far (below
 * DRAFT_GATE_FAR of the winner's rate) sits out the next cycle, and 2n + 1
 * cycles after each further such loss (n: the last count), up to
 * DRAFT_GATE_SKIP_MAX cycles:
 * at 16 sessions every window of the draft model's arm costs them all. With
 * one session the gate is open: the one-session controller decides alone.
 * Only calm windows measure: a window counts when neither it nor the one
 * before it saw the sessions change by more than one and more than an eighth (sessions that
 * start, end or wait for their prefill: when many requests end and begin
 * together, the rate of the few still decoding says nothing of the arm);
 * a measurement waits for at most DRAFT_GATE_UNCALM_MAX such windows, and
 * a steady window (the sessions changed by at most an eighth) with one
 * session or none on average opens the gate. */
#define DRAFT_GATE_MEASURE 3
#define DRAFT_GATE_HOLD 8
#define DRAFT_GATE_HOLD_MAX 32
#define DRAFT_GATE_ARMS 3
#define DRAFT_GATE_CUT 0.7    // an arm below this share of another's rate after a window: cut short
#define DRAFT_GATE_FAR 0.85   // an arm that lost below this share of the winner's rate: skipped
#define DRAFT_GATE_SKIP_MAX 3 // cycles a far-losing arm sits out at most
#define DRAFT_GATE_UNCALM_MAX 3 // windows a measurement waits for calm ones at most

enum {
    DRAFT_ARM_PLAIN = 0,  // no drafts
    DRAFT_ARM_CHOSEN = 1, // the sessions' own proposers and controllers
    DRAFT_ARM_NGRAM = 2,  // the n-gram lookup for sessions that would use the draft model
};

typedef struct draft_gate {
    int on;                       // 1: the gate is used (node --draft-gate on)
    int n_arms;                   // 2 (plain, chosen) or 3 (and n-gram)
    int arm;                      // DRAFT_ARM_*: what the sessions' rounds do now
    int phase;                    // where the cycle stands (load.c)
    int left;                     // windows left in the phase
    int hold;                     // windows the next hold lasts
    int last_win;                 // the arm that won the last comparison (-1 = none yet)
    unsigned to_try;              // arms still to measure in this cycle (bit per arm)
    unsigned measured;            // arms measured in this cycle (bit per arm)
    int skip[DRAFT_GATE_ARMS];    // cycles each arm sits out after its last far loss
    int wait[DRAFT_GATE_ARMS];    // of them, cycles left to sit out
    double rate[DRAFT_GATE_ARMS]; // tokens per session-ms measured under each arm (0 = not yet)
    double m_tok;                 // the measurement in progress: tokens,
    double m_sess;                // and session-ms
    int m_wait;                   // windows the measurement in progress passed over
    int calm;                     // calm windows in a row (see above)
    int decisions;                // comparisons made (reports: a new one to log)
    /* the last window, for the head's debug log */
    int windows;   // windows seen
    double w_rate; // its tokens per session-ms
    double w_sess; // its mean decoding sessions
    int w_counted; // 1: it counted in a measurement
} draft_gate_t;

/* The ms of a batch by its rows: a moving average per row bucket. */
typedef struct draft_cost {
    double ms[DRAFT_LOAD_BUCKETS];          // ms of a batch of the bucket's rows
    unsigned char seen[DRAFT_LOAD_BUCKETS]; // 1 where measured
} draft_cost_t;

typedef struct draft_load {
    draft_cost_t head;  // the head's layers, by the rows of its batch
    draft_cost_t later; // the later stages' compute of a round, by the last stage's batch rows
    draft_cost_t draft; // one batched step of the draft model, by its rows
    double rate;        // tokens all sessions commit per ms (moving average over windows)
    double busy;        // share of time the busiest stage computes, [0, 1] (moving average)
    double rounds;      // rounds per batch at the last stage (moving average, >= 1)
    double draft_rows;  // rows per batched draft step (moving average)
    int n_active;       // sessions running
    int n_decoding;     // of them past their first token
    /* the current window */
    double w_start;    // its start (ms, 0 = none yet)
    double w_tokens;   // tokens committed in it
    double w_head_ms;  // the head's compute in it (its layers and the draft model)
    double w_later_ms; // the last stage's batch compute in it (each batch once)
    double w_sess_ms;  // sessions running x ms, summed over it
    int w_lo, w_hi;    // the fewest decoding and the most running sessions in it
    double t_last;     // the last event (ms)
    draft_gate_t gate; // whether drafting is allowed at all (see above)
} draft_load_t;

void draft_load_init(draft_load_t *l);
/* The head ran rows of its layers as one batch in ms. */
void draft_load_head_batch(draft_load_t *l, int rows, double ms, double now);
/* The draft model ran one batched step of rows in ms. */
void draft_load_draft_batch(draft_load_t *l, int rows, double ms, double now);
/* A verdict: tokens committed, and the later stages' compute of the round
 * (ms, summed), which ran in the last stage's batch of later_rows rows from
 * later_rounds rounds (0 = not said: the stage did not report its batch). */
void draft_load_verdict(draft_load_t *l, int tokens, double later_ms, int later_rows,
                        int later_rounds, double now);
/* Sessions running now, and of them those past their first token (the
 * gate's rates count these: a session waiting for its prefill commits
 * nothing under any arm, and would only add noise). */
void draft_load_active(draft_load_t *l, int n, int n_decoding);
/* Turns the gate on or off (draft_load_init leaves it off), with n_arms 2
 * (plain, chosen) or 3 (and n-gram: a head with a draft model). */
void draft_load_gate(draft_load_t *l, int on, int n_arms);
/* The gate's arm now (DRAFT_ARM_CHOSEN with no load or no gate). */
int draft_load_arm(const draft_load_t *l);
/* The arm's name: "plain rounds", "drafts as chosen", "n-gram lookups". */
const char *draft_load_arm_name(int arm);
/* 1 when sessions may draft now (the arm is not DRAFT_ARM_PLAIN). */
int draft_load_drafts_allowed(const draft_load_t *l);

/* The rate (tokens per ms) of the other sessions that one ms of extra work
 * in this session's batches delays, given its own rate r_own (0 when alone). */
double draft_load_ext(const draft_load_t *l, double r_own);
/* The work (ms) that `extra` more rows of a round add to the batches, when
 * the round already has `own` rows in the head's batch and the later stages'
 * batches and the other rounds there hold head_others and later_others rows;
 * plus `drafts` more rows of the draft model's batched steps, whose other
 * sessions' rows are draft_others. */
double draft_load_work(const draft_load_t *l, int own, int extra, double head_others,
                       double later_others, int drafts, double draft_others);
/* The ms of a batch of rows by a measured cost table (interpolated between
 * measured buckets, the last slope beyond them; 0 when nothing is measured). */
double draft_cost_ms(const draft_cost_t *c, double rows);

#endif
