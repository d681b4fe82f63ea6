/*
 * recover.c - session recovery on the head (see recover.h): the committed
 * tokens of the session, the retry loop around one round, and the check that
 * tells a restarted stage from one that is merely slow.
 */
#include "recover.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

typedef struct s_base {
    char name[SW_WIRE_NAME_MAX + 1]; // stage
    uint64_t msgs_out;               // relay counter when the route was built: messages to it
    uint64_t msgs_in;                // the same: messages from it
    uint64_t bytes_in;               // the same: bytes from it (all it sent the relay)
    int direct;                      // 1: a direct link into it was seen since (the relay's
                                     // counters miss what that link carried)
} s_base_t;

/* One round as it was sent: its rows and what went on the wire about its
 * drafts, so that a replay sends exactly the same Forwards. */
typedef struct s_logged {
    int kv_keep;      // positions kept
    int n, n_draft;   // rows, drafts among them
    size_t tok;       // first row token in the token pool (rows, then a tree's parents, then
                      // the kept path)
    int tree;         // 1: n_draft parents follow the rows in the token pool
    int kv_path_from; // the kept path of the previous tree round
    int n_kv_path;    // its length (its offsets follow the parents)
    size_t q;         // first draft's entry in the q pool, or SIZE_MAX = point masses
} s_logged_t;

typedef struct s_q {
    float q_tok; // q_i(d_i)
    int32_t n;   // sparse entries (0 = none sent)
    size_t at;   // first entry in the id / value pools
} s_q_t;

struct node_recover {
    s_logged_t *rounds;               // (cap_rounds) the session's rounds in order
    int n_rounds, cap_rounds;         // logged / allocated
    int32_t *toks;                    // (cap_toks) row tokens of every logged round
    size_t n_toks, cap_toks;          // used / allocated
    s_q_t *qs;                        // (cap_qs) draft distributions of every logged round
    size_t n_qs, cap_qs;              // used / allocated
    int32_t *q_ids;                   // (cap_qv) sparse support ids
    float *q_vals;                    // (cap_qv) sparse probabilities
    size_t n_qv, cap_qv;              // used / allocated
    int timeout_ms;                   // one recovery waits this long for a route
    s_base_t base[SW_WIRE_MAX_ROUTE]; // per stage of the current route
    int n_base;                       // entries in base
    uint64_t done_chunks;             // Forward chunks of rounds answered since the baseline
    uint64_t inflight_chunks;         // chunks sent in the current attempt, not answered yet
    node_recover_stats_t st;          // totals
    node_recover_links_t links;       // the head's lost-link counters at the mark (links_mark)
    /* sequencing of the current round (the last logged one) */
    int next_send;         // logged round to send next, -1 = none
    uint64_t cur_round_no; // round number of the current round's last send (0 = not out)
    uint64_t window_round; // replayed round whose verdict opens the window again (0 = open)
    int unanswered;        // replayed rounds sent since the window last opened
    int failing;           // 1 between a failure and a whole route
    double next_poll;      // failing: when to ask for the route again
    double t_sent;         // the current round was first sent
    double t_fail;         // its first failure (0 = none)
    double give_up;        // the round's first failure (or one after progress) + timeout
    int attempts;          // sends of the current round
    int route_logged;      // "waiting for the pipeline" logged for this failure
    int moved;             // the attempt after a failure moved (node_recover_progress)
    int one_round;         // failing because a relay was lost: replay the current round only
    int replaying;         // a replay went out and the current round has not committed since
    char why[256];         // the current round's last failure
    char route_why[256];   // why the route is not whole yet
};

/* Grows *buf (elements of size sz) to hold need elements; 0 or -1. */
static int s_grow(void **buf, size_t *cap, size_t need, size_t sz)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need) {
        if (c > SIZE_MAX / 2 / sz)
            return -1;
        c *= 2;
    }
    void *p = realloc(*buf, c * sz);
    if (!p)
        return -1;
    *buf = p;
    *cap = c;
    return 0;
}

node_recover_t *node_recover_new(int timeout_ms)
{
    node_recover_t *rec = calloc(1, sizeof *rec);
    if (!rec)
        return NULL;
    rec->timeout_ms = timeout_ms;
    rec->next_send = -1;
    return rec;
}

void node_recover_free(node_recover_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    node_recover_t *rec = *self_p;
    free(rec->rounds);
    free(rec->toks);
    free(rec->qs);
    free(rec->q_ids);
    free(rec->q_vals);
    free(rec);
    *self_p = NULL;
}

const node_recover_stats_t *node_recover_stats(const node_recover_t *rec)
{
    return &rec->st;
}

/* ---- route liveness ------------------------------------------------------------------ */

/* 1 when the table shows a live direct link between a and b (either lists the other in its
 * announce's direct_hops): what goes between them does not pass the relay's counters. */
static int s_direct_between(const sw_msg_table_t *t, const char *a, const char *b)
{
    for (int k = 0; k < 2; k++) {
        sw_msg_peer_t info;
        if (!sw_codec_peer_find(t, k ? b : a, &info))
            continue;
        for (uint32_t j = 0; j < info.announce.n_direct_hops; j++)
            if (!strcmp(info.announce.direct_hops[j].peer, k ? a : b))
                return 1;
    }
    return 0;
}

/* 1 when a direct link between a and b may exist: one of them listens for direct links (its
 * announce's `direct`), whether or not a table showed the link. */
static int s_direct_possible(const sw_msg_table_t *t, const char *a, const char *b)
{
    for (int k = 0; k < 2; k++) {
        sw_msg_peer_t info;
        if (sw_codec_peer_find(t, k ? b : a, &info) && info.announce.direct &&
            info.announce.direct[0])
            return 1;
    }
    return 0;
}

void node_recover_route_baseline(node_recover_t *rec, const sw_msg_table_t *t,
                                 char names[][SW_WIRE_NAME_MAX + 1], int n)
{
    rec->n_base = 0;
    rec->done_chunks = rec->inflight_chunks = 0;
    for (int i = 1; i < n && i < SW_WIRE_MAX_ROUTE; i++) {
        sw_msg_peer_t info;
        const sw_msg_peer_t *pi = sw_codec_peer_find(t, names[i], &info) ? &info : NULL;
        s_base_t *b = &rec->base[rec->n_base++];
        snprintf(b->name, sizeof b->name, "%s", names[i]);
        b->msgs_out = pi ? pi->msgs_out : 0;
        b->msgs_in = pi ? pi->msgs_in : 0;
        b->bytes_in = pi ? pi->bytes_in : 0;
        b->direct = s_direct_between(t, names[i - 1], names[i]);
    }
}

void node_recover_route_note(node_recover_t *rec, const sw_msg_table_t *t,
                             char names[][SW_WIRE_NAME_MAX + 1], int n)
{
    for (int i = 1; i < n && i - 1 < rec->n_base; i++) {
        s_base_t *b = &rec->base[i - 1];
        if (!b->direct && !strcmp(b->name, names[i]) && s_direct_between(t, names[i - 1], names[i]))
            b->direct = 1;
    }
}

int node_recover_route_check(const node_recover_t *rec, const sw_msg_table_t *t,
                             char names[][SW_WIRE_NAME_MAX + 1], int n, char *why, size_t why_len)
{
    for (int i = 1; i < n; i++) {
        sw_msg_peer_t info;
        const sw_msg_peer_t *pi = sw_codec_peer_find(t, names[i], &info) ? &info : NULL;
        if (!pi) {
            snprintf(why, why_len, "stage '%s' left the pipeline", names[i]);
            return -1;
        }
        const s_base_t *b = i - 1 < rec->n_base ? &rec->base[i - 1] : NULL;
        if (!b || strcmp(b->name, names[i]) != 0)
            return 1; // no baseline for this route
        /* A stage reached by a direct link (issue 39) is not counted by the relay; the head
         * sees the loss of its own links (sw_peer_direct_losses), not of one between two later
         * stages: once such a link is gone, the counter falls short by what it carried, which
         * proves no restart, and what it held may be lost. A stage that restarted answers the
         * round sent again with ERR_UNKNOWN_SESSION. */
        if (s_direct_between(t, names[i - 1], names[i]))
            continue;
        if (b->direct) {
            snprintf(why, why_len, "the direct link from '%s' to '%s' is gone", names[i - 1],
                     names[i]);
            return 2;
        }
        /* At least the chunks of the answered rounds reached every stage, and
         * the head's chunks of the round in flight reached the first (its
         * connection is FIFO and the caller asked for this table after they
         * went), but for SW_RELAY_PARK_PER_PAIR that the relay may hold for a
         * slow first stage (not counted until they go). Nothing is inferred
         * from what the stage before sent: it may serve other routes (other
         * tails, shadow routes of spot checks), and a chunk it passed on may
         * wait at the relay while a slow stage drains its link; a stage that
         * really restarted answers the next chunk with ERR_UNKNOWN_SESSION. */
        uint64_t want = rec->done_chunks;
        if (i == 1 && rec->inflight_chunks > SW_RELAY_PARK_PER_PAIR)
            want += rec->inflight_chunks - SW_RELAY_PARK_PER_PAIR;
        if (pi->msgs_out < b->msgs_out + want) {
            /* Between two stages that may link directly, a link that came up after the
             * baseline's table and went before a table showed it carried the missing chunks:
             * with the relay's count of bytes from the stage not below the baseline's (a new
             * connection counts from 0), the connection is the same one, and what the link
             * held goes again (a stage that did restart answers it ERR_UNKNOWN_SESSION). */
            if (s_direct_possible(t, names[i - 1], names[i]) && pi->bytes_in >= b->bytes_in) {
                snprintf(why, why_len,
                         "messages to '%s' went by a direct link from '%s' that is gone", names[i],
                         names[i - 1]);
                return 2;
            }
            snprintf(why, why_len,
                     "stage '%s' has a new relay connection (restarted, or the relay did)",
                     names[i]);
            return 0;
        }
    }
    return 1;
}

/* ---- the round log ------------------------------------------------------------------ */

/* Appends r to the log; 0 or -1 (out of memory, or r does not follow). */
static int s_log(node_recover_t *rec, const sw_round_t *r)
{
    if (r->n < 1 || r->n_draft < 0 || r->n_draft >= r->n || r->kv_keep < 0)
        return -1;
    if (rec->n_rounds > 0) {
        const s_logged_t *prev = &rec->rounds[rec->n_rounds - 1];
        if (r->kv_keep > prev->kv_keep + prev->n)
            return -1; // keeps positions nobody wrote
    } else if (r->kv_keep != 0) {
        return -1;
    }
    if (sw_round_check(r, NULL, 0) != 0)
        return -1;
    const int tree = r->parent && r->n_draft > 0;
    const size_t n_ints = (size_t)r->n + (tree ? (size_t)r->n_draft : 0) + (size_t)r->n_kv_path;
    size_t n_rounds = (size_t)rec->n_rounds, cap_rounds = (size_t)rec->cap_rounds;
    if (s_grow((void **)&rec->rounds, &cap_rounds, n_rounds + 1, sizeof *rec->rounds) ||
        s_grow((void **)&rec->toks, &rec->cap_toks, rec->n_toks + n_ints, sizeof(int32_t)))
        return -1;
    rec->cap_rounds = (int)cap_rounds;
    s_logged_t *l = &rec->rounds[rec->n_rounds];
    l->kv_keep = r->kv_keep;
    l->n = r->n;
    l->n_draft = r->n_draft;
    l->tok = rec->n_toks;
    l->tree = tree;
    l->kv_path_from = r->kv_path_from;
    l->n_kv_path = r->n_kv_path;
    l->q = SIZE_MAX;
    int32_t *at = rec->toks + rec->n_toks;
    memcpy(at, r->tokens, (size_t)r->n * sizeof(int32_t));
    at += r->n;
    if (tree) {
        memcpy(at, r->parent, (size_t)r->n_draft * sizeof(int32_t));
        at += r->n_draft;
    }
    if (r->n_kv_path)
        memcpy(at, r->kv_path, (size_t)r->n_kv_path * sizeof(int32_t));
    if (r->q && r->n_draft > 0) {
        size_t nv = 0;
        for (int i = 0; i < r->n_draft; i++)
            if (r->q[i].n > 0 && r->q[i].ids)
                nv += (size_t)r->q[i].n;
        if (s_grow((void **)&rec->qs, &rec->cap_qs, rec->n_qs + (size_t)r->n_draft,
                   sizeof *rec->qs))
            return -1;
        size_t cap_vals = rec->cap_qv;
        if (s_grow((void **)&rec->q_ids, &rec->cap_qv, rec->n_qv + nv, sizeof(int32_t)) ||
            s_grow((void **)&rec->q_vals, &cap_vals, rec->n_qv + nv, sizeof(float)))
            return -1;
        if (cap_vals != rec->cap_qv)
            return -1; // both pools grow in step
        l->q = rec->n_qs;
        for (int i = 0; i < r->n_draft; i++) {
            s_q_t *q = &rec->qs[rec->n_qs++];
            q->q_tok = r->q[i].q_tok;
            q->n = r->q[i].n > 0 && r->q[i].ids ? r->q[i].n : 0;
            q->at = rec->n_qv;
            if (q->n) {
                memcpy(rec->q_ids + rec->n_qv, r->q[i].ids, (size_t)q->n * sizeof(int32_t));
                memcpy(rec->q_vals + rec->n_qv, r->q[i].vals, (size_t)q->n * sizeof(float));
                rec->n_qv += (size_t)q->n;
            }
        }
    }
    rec->n_toks += n_ints;
    rec->n_rounds++;
    return 0;
}

int node_recover_log(node_recover_t *rec, const sw_round_t *r)
{
    /* Every round is logged as it is sent: a replay sends the same Forwards
     * again in the same order, so that every stage computes its cache in
     * exactly the same shapes (prompt rows batched as a prompt, decode rows
     * as decode rows) and the tail's verifier sees the same rounds. */
    if (s_log(rec, r) != 0)
        return -1;
    rec->next_send = rec->n_rounds - 1;
    rec->cur_round_no = rec->window_round = 0;
    rec->unanswered = rec->failing = rec->attempts = 0;
    rec->t_sent = rec->t_fail = 0;
    rec->moved = 0;
    rec->why[0] = rec->route_why[0] = 0;
    return 0;
}

int node_recover_n_rounds(const node_recover_t *rec)
{
    return rec->n_rounds;
}

void node_recover_get(const node_recover_t *rec, int i, sw_round_t *r, sw_draft_q_t *q)
{
    const s_logged_t *l = &rec->rounds[i];
    if (l->q != SIZE_MAX)
        for (int d = 0; d < l->n_draft; d++) {
            const s_q_t *sq = &rec->qs[l->q + (size_t)d];
            q[d].q_tok = sq->q_tok;
            q[d].n = sq->n;
            q[d].ids = sq->n ? rec->q_ids + sq->at : NULL;
            q[d].vals = sq->n ? rec->q_vals + sq->at : NULL;
        }
    memset(r, 0, sizeof *r);
    r->kv_keep = l->kv_keep;
    r->n = l->n;
    r->tokens = rec->toks + l->tok;
    r->n_draft = l->n_draft;
    r->q = l->q != SIZE_MAX ? q : NULL;
    const int32_t *extra = rec->toks + l->tok + l->n;
    r->parent = l->tree ? extra : NULL;
    r->kv_path_from = l->kv_path_from;
    r->n_kv_path = l->n_kv_path;
    r->kv_path = l->n_kv_path ? extra + (l->tree ? l->n_draft : 0) : NULL;
}

/* ---- sequencing ---------------------------------------------------------------------- */

int node_recover_next(node_recover_t *rec, double now, double deadline_ms, int *idx, char *err,
                      size_t err_len)
{
    *idx = -1;
    if (rec->failing) {
        const char *why = rec->route_why[0] ? rec->route_why : rec->why;
        if (deadline_ms && now >= deadline_ms) {
            snprintf(err, err_len, "the request's deadline passed while recovering (%s)", why);
            return NODE_REC_FAIL;
        }
        if (now >= rec->give_up) {
            if (rec->route_why[0])
                snprintf(err, err_len, "recovery gave up after %d s: %s (round failed: %s)",
                         rec->timeout_ms / 1000, rec->route_why, rec->why);
            else
                snprintf(err, err_len, "recovery gave up after %d s: %s", rec->timeout_ms / 1000,
                         rec->why);
            return NODE_REC_FAIL;
        }
        if (now < rec->next_poll)
            return NODE_REC_WAIT;
        rec->next_poll = now + NODE_REC_POLL_MS; // asked again then unless answered
        return NODE_REC_ROUTE;
    }
    const int cur = rec->n_rounds - 1;
    if (rec->next_send < 0 || (rec->next_send < cur && rec->window_round))
        return NODE_REC_WAIT;
    *idx = rec->next_send;
    return NODE_REC_SEND;
}

void node_recover_sent(node_recover_t *rec, int idx, uint64_t round_no, int chunks, double now)
{
    if (rec->failing)
        return; // an attempt that failed while it went out
    rec->inflight_chunks += (uint64_t)chunks;
    if (idx == rec->n_rounds - 1) {
        rec->cur_round_no = round_no;
        rec->next_send = -1;
        if (!rec->attempts++)
            rec->t_sent = now;
        return;
    }
    rec->st.replayed_rounds++;
    rec->next_send = idx + 1;
    if (++rec->unanswered == NODE_REC_WINDOW)
        rec->window_round = round_no;
}

int node_recover_verdict(node_recover_t *rec, uint64_t round_no, double now)
{
    if (rec->failing || !round_no)
        return 0;
    if (round_no == rec->window_round) {
        rec->window_round = 0;
        rec->unanswered = 0;
        return 0;
    }
    if (round_no != rec->cur_round_no)
        return 0;
    rec->cur_round_no = 0;
    rec->replaying = 0;
    rec->done_chunks += rec->inflight_chunks;
    rec->inflight_chunks = 0;
    if (rec->t_fail) {
        rec->st.recoveries++;
        rec->st.recover_ms = now - rec->t_fail;
        rec->st.recover_ms_sum += rec->st.recover_ms;
        SW_INFO("recovery: the round went through again %.0f ms after the failure "
                "(%d attempt(s))",
                rec->st.recover_ms, rec->attempts);
        rec->t_fail = 0;
    }
    return 1;
}

void node_recover_failed(node_recover_t *rec, double now, const char *why)
{
    rec->one_round = 0; // any failure but a lost relay may have taken a stage's cache
    if (rec->failing)
        return; // already recovering: later reports of the same failure add nothing
    const int cur = rec->n_rounds - 1;
    const int first = !rec->t_fail;
    if (first) {
        rec->t_fail = now;
        rec->st.detect_ms = rec->t_sent ? now - rec->t_sent : 0;
    }
    if (first || rec->moved) // the round's first failure, or one after the replay moved
        rec->give_up = now + rec->timeout_ms;
    rec->moved = 0;
    snprintf(rec->why, sizeof rec->why, "%s", why);
    rec->route_why[0] = 0;
    const double left = (rec->give_up - now) / 1e3;
    SW_WARN("recovery: round at position %d failed after %.0f ms (%s); waiting up to %.0f s for "
            "the pipeline",
            cur >= 0 ? rec->rounds[cur].kv_keep : 0, rec->t_sent ? now - rec->t_sent : 0, why,
            left > 0 ? left : 0);
    rec->failing = 1;
    rec->route_logged = 0;
    rec->next_poll = now; // ask for the route at once
    rec->next_send = -1;
    rec->cur_round_no = rec->window_round = 0;
    rec->unanswered = 0;
    rec->inflight_chunks = 0;
}

void node_recover_relay_lost(node_recover_t *rec, double now, const char *why)
{
    const int was = rec->failing;
    node_recover_failed(rec, now, why);
    /* the current round alone again, unless a replay's rounds may have been lost with it */
    rec->one_round = !was && !rec->replaying;
}

void node_recover_caches_gone(node_recover_t *rec)
{
    rec->one_round = 0;
}

void node_recover_progress(node_recover_t *rec, double now)
{
    (void)now;
    if (!rec->failing && rec->t_fail)
        rec->moved = 1; // the next failure waits a whole timeout
}

void node_recover_routed(node_recover_t *rec, double now, int ok, const char *why)
{
    if (!rec->failing)
        return;
    if (!ok) {
        snprintf(rec->route_why, sizeof rec->route_why, "%s", why ? why : "");
        if (!rec->route_logged++)
            SW_INFO("recovery: waiting for the pipeline (%s)", rec->route_why);
        rec->next_poll = now + NODE_REC_POLL_MS;
        return;
    }
    rec->failing = 0;
    const int cur = rec->n_rounds - 1;
    if (cur > 0 && rec->one_round) {
        SW_INFO("recovery: sending the round at position %d again (the stages kept their "
                "caches)",
                rec->rounds[cur].kv_keep);
        rec->st.replays++;
        rec->next_send = cur;
    } else if (cur > 0) {
        SW_INFO("recovery: replaying %d rounds (%d positions)", cur, rec->rounds[cur].kv_keep);
        rec->st.replays++;
        rec->next_send = 0;
        rec->replaying = 1;
    } else {
        rec->next_send = cur; // a failed prefill is simply sent again
    }
}

int node_recover_waiting(const node_recover_t *rec)
{
    return !rec->failing && rec->cur_round_no != 0;
}

int node_recover_stalled(const node_recover_t *rec)
{
    return !rec->failing && rec->window_round != 0 && rec->next_send >= 0 &&
           rec->next_send < rec->n_rounds - 1;
}

int node_recover_replaying(const node_recover_t *rec)
{
    return rec->replaying;
}

int node_recover_failing(const node_recover_t *rec)
{
    return rec->failing;
}

/* ---- lost links ---------------------------------------------------------------------- */

void node_recover_links_mark(node_recover_t *rec, int idx, const node_recover_links_t *l)
{
    if (idx == 0 || (idx == rec->n_rounds - 1 && !rec->replaying))
        rec->links = *l;
}

int node_recover_links_check(node_recover_t *rec, const node_recover_links_t *l, double now,
                             const char **why)
{
    const node_recover_links_t was = rec->links;
    *why = NULL;
    if (l->dlosses != was.dlosses) /* a direct link: the next messages go by the relay */
        *why = "a direct link was lost while the round travelled";
    else if (l->several && l->losses != was.losses)
        *why = "a relay link was lost while the round travelled";
    if (*why) {
        rec->links = *l;
        node_recover_relay_lost(rec, now, *why);
        return 1;
    }
    if (l->several || l->announces == was.announces)
        return 0;
    *why = "the head's relay connection was renewed while the round travelled";
    rec->links.announces = l->announces;
    node_recover_failed(rec, now, *why);
    return 2;
}
