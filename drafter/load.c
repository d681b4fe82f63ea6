/*
 * load.c - what the sessions of one head cost each other (see load.h).
 */
#include "load.h"

#include <string.h>

#define S_COST_DECAY 0.8 // per measurement in a row bucket
#define S_WIN_DECAY 0.5  // per window: rates and busy time

/* Lower edges of the row buckets: a batch of R rows counts in the last
 * bucket whose edge is <= R (each keeps its mean rows too). */
static const int s_edge[DRAFT_LOAD_BUCKETS] = {1,  2,  3,  4,  6,  8,   12,  16,
                                               24, 32, 48, 64, 96, 128, 192, 256};

/* A measured point of a cost table: rows, ms. */
typedef struct s_pt {
    double x, y;
} s_pt_t;

static int s_bucket(int rows)
{
    int b = 0;
    while (b + 1 < DRAFT_LOAD_BUCKETS && s_edge[b + 1] <= rows)
        b++;
    return b;
}

static void s_cost_add(draft_cost_t *c, int rows, double ms)
{
    if (rows < 1 || !(ms >= 0))
        return;
    /* Normalised to the bucket's edge by proportion, so that one bucket's
     * mean is a cost at one row count. */
    const int b = s_bucket(rows);
    const double at_edge = ms * s_edge[b] / rows;
    c->ms[b] = c->seen[b] ? c->ms[b] * S_COST_DECAY + at_edge * (1 - S_COST_DECAY) : at_edge;
    c->seen[b] = 1;
}

double draft_cost_ms(const draft_cost_t *c, double rows)
{
    s_pt_t p[DRAFT_LOAD_BUCKETS];
    int n = 0;
    for (int b = 0; b < DRAFT_LOAD_BUCKETS; b++)
        if (c->seen[b])
            p[n++] = (s_pt_t){s_edge[b], c->ms[b]};
    if (n == 0 || !(rows > 0))
        return 0;
    if (rows <= p[0].x) // below every measurement: proportional
        return p[0].y * rows / p[0].x;
    for (int i = 1; i < n; i++)
        if (rows <= p[i].x)
            return p[i - 1].y + (p[i].y - p[i - 1].y) * (rows - p[i - 1].x) / (p[i].x - p[i - 1].x);
    /* beyond: the last slope (never negative), or proportional with one point */
    double slope = n > 1 ? (p[n - 1].y - p[n - 2].y) / (p[n - 1].x - p[n - 2].x) : p[0].y / p[0].x;
    if (slope < 0)
        slope = 0;
    return p[n - 1].y + slope * (rows - p[n - 1].x);
}

void draft_load_init(draft_load_t *l)
{
    memset(l, 0, sizeof *l);
    l->rounds = 1;
    l->gate.arm = DRAFT_ARM_CHOSEN;
    l->gate.n_arms = 2;
    l->gate.hold = DRAFT_GATE_HOLD;
    l->gate.last_win = -1;
}

void draft_load_gate(draft_load_t *l, int on, int n_arms)
{
    l->gate.on = on ? 1 : 0;
    l->gate.n_arms = n_arms == DRAFT_GATE_ARMS ? DRAFT_GATE_ARMS : 2;
    l->gate.arm = DRAFT_ARM_CHOSEN;
}

int draft_load_arm(const draft_load_t *l)
{
    return !l || !l->gate.on ? DRAFT_ARM_CHOSEN : l->gate.arm;
}

const char *draft_load_arm_name(int arm)
{
    return arm == DRAFT_ARM_PLAIN   ? "plain rounds"
           : arm == DRAFT_ARM_NGRAM ? "n-gram lookups"
                                    : "drafts as chosen";
}

int draft_load_drafts_allowed(const draft_load_t *l)
{
    return draft_load_arm(l) != DRAFT_ARM_PLAIN;
}

enum { S_GATE_IDLE, S_GATE_SETTLE, S_GATE_MEASURE, S_GATE_HOLD };

/* The order arms are tried in within a cycle: the controllers' rounds first
 * (alone they win by far at low load, where the load is often over before a
 * cycle ends), then the n-gram lookup (at no cost to the others, usually at
 * least plain's rate: a plain arm measured after it can be cut short). */
static const int s_arm_order[DRAFT_GATE_ARMS] = {DRAFT_ARM_CHOSEN, DRAFT_ARM_NGRAM,
                                                 DRAFT_ARM_PLAIN};

/* Measures arm next, after a window to settle (rounds of the arm before are
 * still in flight in it). */
static void s_gate_try(draft_gate_t *g, int arm)
{
    g->arm = arm;
    g->to_try &= ~(1u << arm);
    g->measured |= 1u << arm;
    g->phase = S_GATE_SETTLE;
    g->left = 1;
}

/* The next arm of the cycle to measure, or the best one to hold when every
 * arm has its measurement of this cycle. */
static void s_gate_next(draft_gate_t *g)
{
    for (int i = 0; i < DRAFT_GATE_ARMS; i++) {
        const int a = s_arm_order[i];
        if (a < g->n_arms && (g->to_try & (1u << a))) {
            s_gate_try(g, a);
            return;
        }
    }
    int win = g->last_win >= 0 ? g->last_win : g->arm; // ties keep the holder
    for (int a = 0; a < g->n_arms; a++)
        if (g->rate[a] > g->rate[win])
            win = a;
    g->hold = win == g->last_win
                  ? (g->hold * 2 < DRAFT_GATE_HOLD_MAX ? g->hold * 2 : DRAFT_GATE_HOLD_MAX)
                  : DRAFT_GATE_HOLD;
    /* An arm measured far behind the winner sits out cycles (load.h). */
    for (int a = 0; a < g->n_arms; a++) {
        if (a == win) {
            g->skip[a] = g->wait[a] = 0;
        } else if (g->measured & (1u << a)) {
            const int far = g->rate[a] < DRAFT_GATE_FAR * g->rate[win];
            const int next = 2 * g->skip[a] + 1;
            g->skip[a] = !far ? 0 : next > DRAFT_GATE_SKIP_MAX ? DRAFT_GATE_SKIP_MAX : next;
            g->wait[a] = g->skip[a];
        }
    }
    g->measured = 0;
    g->last_win = win;
    g->arm = win;
    g->decisions++;
    g->phase = S_GATE_HOLD;
    g->left = g->hold;
    g->m_tok = g->m_sess = 0;
    g->m_wait = 0;
}

/* Every arm but `except` (-1: none) and those sitting out is measured next. */
static void s_gate_cycle(draft_gate_t *g, int except)
{
    g->to_try = ((1u << g->n_arms) - 1) & ~(except >= 0 ? 1u << except : 0u);
    g->measured = except >= 0 ? 1u << except : 0u;
    for (int a = 0; a < g->n_arms; a++)
        if (a != except && g->wait[a] > 0) {
            g->wait[a]--;
            g->to_try &= ~(1u << a);
        }
    s_gate_next(g);
}

/* 1 when the arm being measured already trails another arm's last rate by
 * far (DRAFT_GATE_CUT): its measurement ends early, since every window of a
 * losing arm costs all sessions. */
static int s_gate_losing(const draft_gate_t *g)
{
    if (!(g->m_sess > 0))
        return 0;
    double best = 0;
    for (int a = 0; a < g->n_arms; a++)
        if (a != g->arm && g->rate[a] > best)
            best = g->rate[a];
    return g->m_tok / g->m_sess < DRAFT_GATE_CUT * best;
}

/* One window of the gate (see load.h): tok tokens over sess_ms session-ms in dt ms;
 * steady: the sessions changed by an eighth at most in it. */
static void s_gate_window(draft_gate_t *g, double tok, double sess_ms, double dt, int steady)
{
    if (!g->on)
        return;
    g->windows++;
    g->w_rate = sess_ms > 0 ? tok / sess_ms : 0;
    g->w_sess = dt > 0 ? sess_ms / dt : 0;
    g->w_counted = 0;
    g->calm = steady ? g->calm + 1 : 0;
    /* a window that counts: calm, or the measurement waited long enough */
    const int counts = g->calm >= 2 || g->m_wait >= DRAFT_GATE_UNCALM_MAX;
    if (sess_ms < 1.5 * dt) { // one session or none on average: the gate is open
        if (!steady)          // unless requests end and begin together
            return;
        g->arm = DRAFT_ARM_CHOSEN;
        g->phase = S_GATE_IDLE;
        for (int a = 0; a < DRAFT_GATE_ARMS; a++)
            g->rate[a] = g->skip[a] = g->wait[a] = 0;
        g->hold = DRAFT_GATE_HOLD;
        g->last_win = -1;
        return;
    }
    switch (g->phase) {
    case S_GATE_IDLE: // the load begins: measure every arm, the controllers' rounds first
        s_gate_cycle(g, -1);
        return;
    case S_GATE_SETTLE:
        if (--g->left <= 0) {
            g->phase = S_GATE_MEASURE;
            g->left = DRAFT_GATE_MEASURE;
            g->m_tok = g->m_sess = 0;
            g->m_wait = 0;
        }
        return;
    case S_GATE_HOLD:
        if (g->left <= DRAFT_GATE_MEASURE && counts) { // the hold's last windows measure again
            g->m_tok += tok;
            g->m_sess += sess_ms;
            g->w_counted = 1;
        }
        if (--g->left > 0)
            return;
        if (g->m_sess > 0)
            g->rate[g->arm] = g->m_tok / g->m_sess;
        s_gate_cycle(g, g->arm);
        return;
    case S_GATE_MEASURE:
    default:
        if (!counts) {
            g->m_wait++;
            return;
        }
        g->m_tok += tok;
        g->m_sess += sess_ms;
        g->w_counted = 1;
        if (--g->left > 0 && !s_gate_losing(g))
            return;
        g->rate[g->arm] = g->m_sess > 0 ? g->m_tok / g->m_sess : 0;
        s_gate_next(g);
        return;
    }
}

/* Closes the window when it is over: its rate and busy share into the averages. */
static void s_window(draft_load_t *l, double now)
{
    if (!l->w_start) {
        l->w_start = l->t_last = now;
        l->w_lo = l->n_decoding;
        l->w_hi = l->n_active;
        return;
    }
    if (now > l->t_last) {
        l->w_sess_ms += l->n_decoding * (now - l->t_last);
        l->t_last = now;
    }
    const double dt = now - l->w_start;
    if (dt < DRAFT_LOAD_WINDOW_MS)
        return;
    const int change = l->w_hi - l->w_lo;
    s_gate_window(&l->gate, l->w_tokens, l->w_sess_ms, dt, change <= 1 || change * 8 <= l->w_hi);
    const double rate = l->w_tokens / dt;
    double busy = (l->w_head_ms > l->w_later_ms ? l->w_head_ms : l->w_later_ms) / dt;
    busy = busy > 1 ? 1 : busy;
    l->rate = l->rate * S_WIN_DECAY + rate * (1 - S_WIN_DECAY);
    l->busy = l->busy * S_WIN_DECAY + busy * (1 - S_WIN_DECAY);
    l->w_start = now;
    l->w_tokens = l->w_head_ms = l->w_later_ms = l->w_sess_ms = 0;
    l->w_lo = l->n_decoding;
    l->w_hi = l->n_active;
}

void draft_load_head_batch(draft_load_t *l, int rows, double ms, double now)
{
    s_window(l, now);
    s_cost_add(&l->head, rows, ms);
    l->w_head_ms += ms > 0 ? ms : 0;
}

void draft_load_draft_batch(draft_load_t *l, int rows, double ms, double now)
{
    s_window(l, now);
    s_cost_add(&l->draft, rows, ms);
    l->w_head_ms += ms > 0 ? ms : 0;
    l->draft_rows =
        l->draft_rows > 0 ? l->draft_rows * S_COST_DECAY + rows * (1 - S_COST_DECAY) : rows;
}

void draft_load_verdict(draft_load_t *l, int tokens, double later_ms, int later_rows,
                        int later_rounds, double now)
{
    s_window(l, now);
    l->w_tokens += tokens > 0 ? tokens : 0;
    if (later_rows < 1 || later_rounds < 1 || !(later_ms >= 0))
        return;
    s_cost_add(&l->later, later_rows, later_ms);
    l->w_later_ms += later_ms / later_rounds; // the batch once, over its rounds
    l->rounds = l->rounds * S_COST_DECAY + later_rounds * (1 - S_COST_DECAY);
}

void draft_load_active(draft_load_t *l, int n, int n_decoding)
{
    l->n_active = n;
    l->n_decoding = n_decoding;
    l->w_lo = n_decoding < l->w_lo ? n_decoding : l->w_lo;
    l->w_hi = n > l->w_hi ? n : l->w_hi;
}

double draft_load_ext(const draft_load_t *l, double r_own)
{
    if (!l || l->n_active <= 1)
        return 0;
    const double others = l->rate - (r_own > 0 ? r_own : 0);
    if (!(others > 0))
        return 0;
    double share = (l->rounds - 1) / (l->n_active - 1);
    share = share < 0 ? 0 : share > 1 ? 1 : share;
    return others * (l->busy + (1 - l->busy) * share);
}

double draft_load_work(const draft_load_t *l, int own, int extra, double head_others,
                       double later_others, int drafts, double draft_others)
{
    if (!l || (extra <= 0 && drafts <= 0))
        return 0;
    const double h0 = head_others + own, t0 = later_others + own;
    double w = draft_cost_ms(&l->head, h0 + extra) - draft_cost_ms(&l->head, h0);
    w += draft_cost_ms(&l->later, t0 + extra) - draft_cost_ms(&l->later, t0);
    if (drafts > 0) {
        const double step =
            draft_cost_ms(&l->draft, draft_others + 1) - draft_cost_ms(&l->draft, draft_others);
        w += drafts * (step > 0 ? step : 0);
    }
    return w > 0 ? w : 0;
}
