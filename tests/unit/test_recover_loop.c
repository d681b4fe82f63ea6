/*
 * test_recover_loop.c - the head's recovery state machine (node/recover.c)
 * driven as the head's event loop drives it (a generation stepped by sw_gen_t
 * with speculative drafts; rounds sent, verdicts, failures and route checks
 * fed as events), against a simulated pipeline that
 * follows the stages' contract: it truncates its cache to kv_keep, appends
 * the rows, refuses a round that keeps more positions than it holds (a
 * restarted stage), and verifies drafts greedily against a "model" whose next
 * token depends on every token in its cache. Faults are injected at chosen
 * points: the stage loses its cache (killed and restarted), during the
 * prefill, mid-generation, twice in a row, and while the replay is sent.
 * The replay sends the logged rounds again as they were (drafts included),
 * so the simulated stage must end with the same cache and verdicts.
 *
 * The end-to-end tests (tests/e2e/test_recover.c, tests/slow/) run real
 * processes but no drafter yet; this one checks what drafts add: accepted
 * drafts become committed positions that a replay must carry, and a replay
 * longer than SW_WIRE_MAX_ROWS goes in several chunks. The output with
 * faults must equal the output without them, token for token.
 *
 * The same again with token trees whose accepted path is never the first
 * branch: the simulated stage keeps the previous round's path (kv_path)
 * before kv_keep, appends the tree rows as slots and verifies by walking the
 * tree, so a replay must send every round's tree and kept path as it was.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../node/recover.c"
#include "sw_test.h"

#define N_CTX 4096

static int s_max_q_seen; /* the most rounds in flight in any run (the window reached?) */
#define V 97

/* The "model": the next token after seq[0..n) depends on all of it. */
static int32_t s_next(const int32_t *seq, int n)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++)
        h = (h ^ (uint64_t)(seq[i] + 1)) * 1099511628211ull;
    return (int32_t)(h % V);
}

static int s_tree_mode; // 1: the proposer drafts trees

typedef struct s_event {
    uint64_t round_no; // the round it answers
    int refused;       // 1: the stage answered ERR_UNKNOWN_SESSION
    sw_verdict_t v;    // the verdict otherwise
} s_event_t;

typedef struct sim {
    int32_t cache[N_CTX];    // the stage's cache (tokens stand for KV rows)
    int len;                 // positions held
    int alive;               // 0 = killed, not back yet
    int down_polls;          // reroute polls until it is back
    int waits, sends;        // waits for the last round sent, sends so far
    const int *kill_at_wait; // kill when the wait call number is listed (0-terminated)
    int kill_at_replay;      // kill 3 rounds into the replay of this number (1-based), 0 = never
    int zero_sends;          // sends that keep nothing (the prefill, and each replay's start)
    int since_zero;          // sends since the last one of those
    int max_chunks;          // most chunks in one send
    s_event_t q[4096];       // verdicts (or refusals) in flight, oldest first
    int q_len;               //
    int max_q;               // most in flight at once
} sim_t;

static int s_listed(const int *list, int v)
{
    for (int i = 0; list && list[i]; i++)
        if (list[i] == v)
            return 1;
    return 0;
}

static void s_kill(sim_t *s)
{
    s->alive = 0;
    s->len = 0;
    s->down_polls = 2;
}

/* The simulated stage takes round r (round number round_no). Returns the
 * chunks sent, or -1 when the stage is gone (the relay would answer that the
 * destination left). A verdict (or a refusal) is queued for s_wait. */
static int s_send(sim_t *s, const sw_round_t *r, uint64_t round_no, char *err, size_t len)
{
    s->sends++;
    if (!s->alive) {
        snprintf(err, len, "stage left");
        return -1;
    }
    if (r->kv_keep == 0) {
        s->zero_sends++;
        s->since_zero = 0;
    } else {
        s->since_zero++;
    }
    if (s->kill_at_replay && s->zero_sends == 1 + s->kill_at_replay && s->since_zero == 3) {
        s_kill(s);
        snprintf(err, len, "stage died during the replay");
        return -1;
    }
    int chunks = (r->n + SW_WIRE_MAX_ROWS - 1) / SW_WIRE_MAX_ROWS;
    if (chunks > s->max_chunks)
        s->max_chunks = chunks;
    s_event_t *e = &s->q[s->q_len++];
    e->round_no = round_no;
    e->refused = 0;
    if (s->q_len > s->max_q)
        s->max_q = s->q_len;
    if (r->kv_keep > s->len) {
        e->refused = 1; // ERR_UNKNOWN_SESSION
        return chunks;
    }
    if (r->n_kv_path) { // the previous tree round's accepted path stays
        if (r->kv_path_from + r->kv_path[r->n_kv_path - 1] >= s->len) {
            e->refused = 1;
            return chunks;
        }
        for (int j = 0; j < r->n_kv_path; j++)
            s->cache[r->kv_path_from + j] = s->cache[r->kv_path_from + r->kv_path[j]];
        s->len = r->kv_path_from + r->n_kv_path;
        if (r->kv_keep > s->len) {
            e->refused = 1;
            return chunks;
        }
    }
    s->len = r->kv_keep;
    for (int i = 0; i < r->n; i++)
        s->cache[s->len++] = r->tokens[i];
    const int n_ctx = r->n - r->n_draft;
    if (r->parent) {
        /* A tree: from the root, follow the child holding the model's token. */
        static int32_t seq[N_CTX];
        int at = r->kv_keep + n_ctx, cur = 0;
        memcpy(seq, s->cache, (size_t)at * sizeof *seq);
        e->v.n_commit = 0;
        for (;;) {
            const int32_t want = s_next(seq, at);
            int child = 0;
            for (int i = 0; i < r->n_draft && !child; i++)
                if (r->parent[i] == cur && r->tokens[n_ctx + i] == want)
                    child = i + 1;
            if (!child) {
                e->v.tokens[e->v.n_commit++] = want;
                break;
            }
            e->v.path[e->v.n_commit] = child;
            e->v.tokens[e->v.n_commit++] = want;
            seq[at++] = want;
            cur = child;
        }
        return chunks;
    }
    /* Verify greedily: draft i is accepted when it is the model's token. */
    int at = r->kv_keep + n_ctx, k = 0;
    e->v.n_commit = 0;
    for (; k < r->n_draft; k++) {
        int32_t want = s_next(s->cache, at + k);
        if (r->tokens[n_ctx + k] != want)
            break;
        e->v.tokens[e->v.n_commit++] = want;
    }
    e->v.tokens[e->v.n_commit++] = s_next(s->cache, at + k);
    return chunks;
}

/* The next event for the head: 1 a verdict (round number in *round_no), 0 a
 * failure (err), -1 nothing queued. */
static int s_wait(sim_t *s, sw_verdict_t *out, uint64_t *round_no, char *err, size_t len)
{
    if (s->q_len == 0)
        return -1;
    /* Waits are counted where the head waits for the round it sent last
     * (the current round, or the last of a replay window), as kill points. */
    if (s->q_len == 1 && s_listed(s->kill_at_wait, ++s->waits)) {
        s_kill(s);
        s->q_len = 0; // what was in flight is lost
        snprintf(err, len, "stage killed");
        return 0;
    }
    s_event_t e = s->q[0];
    memmove(s->q, s->q + 1, (size_t)--s->q_len * sizeof *s->q);
    if (e.refused) {
        snprintf(err, len, "unknown session");
        return 0;
    }
    *out = e.v;
    *round_no = e.round_no;
    return 1;
}

static int s_reroute(sim_t *s)
{
    if (!s->alive && --s->down_polls > 0)
        return 0;
    s->alive = 1;
    return 1;
}

/* Drafts the model's own continuation, spoiled at one position that moves
 * with the context length, so rounds accept 0..k drafts. */
static int s_propose(void *self, const int32_t *ctx, int n_ctx, int k_max, int guess,
                     sw_proposal_t *out)
{
    (void)self;
    memset(out, 0, sizeof *out);
    out->guess = -1;
    if (guess)
        return 0; // no drafting ahead here
    int32_t buf[N_CTX];
    memcpy(buf, ctx, (size_t)n_ctx * sizeof *buf);
    if (s_tree_mode) {
        /* Node 1 a wrong first token; under the root its sibling node 2 holds
         * the right one and starts a chain of right tokens (nodes 3, ..),
         * spoiled at one depth that moves with the context length. */
        const int32_t t = s_next(buf, n_ctx);
        out->tokens[0] = (t + 1) % V;
        out->parent[0] = 0;
        int n = 1;
        const int spoil = n_ctx % (k_max + 1);
        for (int d = 0; d < k_max && n < SW_MAX_DRAFT; d++, n++) {
            out->tokens[n] = s_next(buf, n_ctx + d);
            if (d == spoil && d > 0)
                out->tokens[n] = (out->tokens[n] + 1) % V;
            buf[n_ctx + d] = out->tokens[n];
            out->parent[n] = d == 0 ? 0 : n; // node n + 1 under node n
        }
        out->n = n;
        out->tree = 1;
        out->n_main = 1;
        return 0;
    }
    const int spoil = n_ctx % (k_max + 2);
    for (int i = 0; i < k_max; i++) {
        out->tokens[i] = s_next(buf, n_ctx + i);
        if (i == spoil)
            out->tokens[i] = (out->tokens[i] + 1) % V;
        buf[n_ctx + i] = out->tokens[i];
    }
    out->n = out->n_main = k_max;
    return 0;
}

/* One generation driven as the head's event loop drives a session; returns
 * the number of recoveries. */
static int s_run(int n_prompt, int n_gen, const int *kills, int kill_at_replay, int32_t *out,
                 int *max_chunks)
{
    static sim_t s;
    memset(&s, 0, sizeof s);
    s.alive = 1;
    s.kill_at_wait = kills;
    s.kill_at_replay = kill_at_replay;
    node_recover_t *rec = node_recover_new(60000);
    SW_CHECK(rec != NULL);
    int32_t prompt[N_CTX];
    for (int i = 0; i < n_prompt; i++)
        prompt[i] = (int32_t)((i * 7 + 3) % V);
    sw_proposer_t prop = {.propose = s_propose};
    sw_gen_opts_t o = {.n_predict = n_gen, .k = 4, .proposer = &prop};
    char err[256] = "";
    sw_gen_t *g = sw_gen_new(prompt, n_prompt, &o, err, sizeof err);
    SW_CHECK(g != NULL);
    double now = 1000; // a clock that moves 1 ms per step
    uint64_t round_no = 0;
    int rc = -1, need_round = 1;
    sw_draft_q_t q[SW_MAX_DRAFT];
    for (int step = 0; g && rec && step < 200000; step++, now += 1) {
        if (need_round) {
            const sw_round_t *r;
            int more = sw_gen_next(g, &r, err, sizeof err);
            if (more != 0) {
                rc = more > 0 ? 0 : -1;
                break;
            }
            SW_CHECK_INT(node_recover_log(rec, r), 0);
            need_round = 0;
        }
        int idx;
        switch (node_recover_next(rec, now, 0, &idx, err, sizeof err)) {
        case NODE_REC_SEND: {
            sw_round_t lr;
            node_recover_get(rec, idx, &lr, q);
            int chunks = s_send(&s, &lr, ++round_no, err, sizeof err);
            if (chunks < 0)
                node_recover_failed(rec, now, err);
            else
                node_recover_sent(rec, idx, round_no, chunks, now);
            break;
        }
        case NODE_REC_ROUTE:
            node_recover_routed(rec, now, s_reroute(&s), "gap in the pipeline");
            break;
        case NODE_REC_FAIL:
            fprintf(stderr, "recovery failed: %s\n", err);
            step = 200000;
            break;
        default: {
            sw_verdict_t v;
            uint64_t rn = 0;
            int ev = s_wait(&s, &v, &rn, err, sizeof err);
            if (ev == 0) {
                node_recover_failed(rec, now, err);
            } else if (ev > 0 && node_recover_verdict(rec, rn, now)) {
                const int32_t *toks;
                int nt;
                SW_CHECK_INT(sw_gen_commit(g, &v, &toks, &nt, err, sizeof err), 0);
                need_round = 1;
            }
            break;
        }
        }
    }
    if (rc != 0)
        fprintf(stderr, "generate: %s\n", err);
    SW_CHECK_INT(rc, 0);
    const sw_gen_stats_t *st = g ? sw_gen_stats(g) : NULL;
    SW_CHECK(st && st->n_gen == n_gen);
    int n_out = 0;
    const int32_t *gen = g ? sw_gen_output(g, &n_out) : NULL;
    if (gen)
        memcpy(out, gen, (size_t)n_out * sizeof *out);
    int recs = rec ? node_recover_stats(rec)->recoveries : -1;
    if (max_chunks)
        *max_chunks = s.max_chunks;
    if ((kills || kill_at_replay) && st)
        SW_CHECK(st->accepted > 0); // drafts really were accepted along the way
    if (s_tree_mode && st)
        SW_CHECK(st->tree_rounds > 0 && st->kv_moves > 0); // accepted paths were moved
    /* the replay window held: never more than NODE_REC_WINDOW replayed rounds unanswered, plus
     * the session's last round, which the window does not count (node_recover_sent) */
    SW_CHECK(s.max_q <= NODE_REC_WINDOW + 1);
    if (s.max_q > s_max_q_seen)
        s_max_q_seen = s.max_q;
    sw_gen_free(&g);
    node_recover_free(&rec);
    return recs;
}

/* A table of the route head -> mid -> tail with the relay's counters of mid and tail. */
static sw_msg_table_t s_table(sw_msg_peer_t *p, uint64_t mid_in, uint64_t mid_out, uint64_t tail_in,
                              uint64_t tail_out)
{
    memset(p, 0, 3 * sizeof *p);
    p[0].announce.name = "head";
    p[1].announce.name = "mid";
    p[1].msgs_in = mid_in;
    p[1].msgs_out = mid_out;
    p[2].announce.name = "tail";
    p[2].msgs_in = tail_in;
    p[2].msgs_out = tail_out;
    return (sw_msg_table_t){.n_peers = 3, .peers = p};
}

/* The route check tells a restarted stage from a slow one (issue 33): a
 * middle stage that passes chunks to another route's tail, or whose chunk
 * waits at the relay for a slow tail's link, made a slow round look like a
 * restart ("new relay connection") and cost a replay. */
static void s_test_route_check(void)
{
    char names[3][SW_WIRE_NAME_MAX + 1] = {"head", "mid", "tail"};
    sw_msg_peer_t p[3];
    node_recover_t *rec = node_recover_new(1000);
    SW_CHECK(rec != NULL);
    if (!rec)
        return;
    sw_msg_table_t t = s_table(p, 100, 90, 50, 40);
    node_recover_route_baseline(rec, &t, names, 3);
    /* a prefill of 4 chunks, answered; then a round of one chunk in flight */
    const sw_round_t r = {.n = 2, .tokens = (const int32_t[]){1, 2}};
    SW_CHECK_INT(node_recover_log(rec, &r), 0);
    int idx = -1;
    char err[256] = "";
    SW_CHECK_INT(node_recover_next(rec, 0, 0, &idx, err, sizeof err), NODE_REC_SEND);
    node_recover_sent(rec, idx, 1, 4, 0);
    SW_CHECK_INT(node_recover_verdict(rec, 1, 10), 1);
    const sw_round_t r2 = {.kv_keep = 2, .n = 1, .tokens = (const int32_t[]){3}};
    SW_CHECK_INT(node_recover_log(rec, &r2), 0);
    SW_CHECK_INT(node_recover_next(rec, 20, 0, &idx, err, sizeof err), NODE_REC_SEND);
    node_recover_sent(rec, idx, 2, 1, 20);
    char why[160] = "";
    /* everything delivered: plausible */
    t = s_table(p, 105, 95, 50, 45);
    SW_CHECK_INT(node_recover_route_check(rec, &t, names, 3, why, sizeof why), 1);
    /* the middle stage also fed another route (12 messages more than the tail got), and the
     * round's chunk still waits at the relay for the tail: slow, not restarted */
    t = s_table(p, 117, 95, 50, 44);
    SW_CHECK_INT(node_recover_route_check(rec, &t, names, 3, why, sizeof why), 1);
    if (why[0])
        fprintf(stderr, "route check: %s\n", why);
    /* the tail restarted: its new connection's counter starts again */
    t = s_table(p, 105, 95, 0, 1);
    SW_CHECK_INT(node_recover_route_check(rec, &t, names, 3, why, sizeof why), 0);
    SW_CHECK(strstr(why, "'tail' has a new relay connection") != NULL);
    /* the first stage restarted: the head's in-flight chunk is missing there too */
    t = s_table(p, 0, 3, 50, 45);
    SW_CHECK_INT(node_recover_route_check(rec, &t, names, 3, why, sizeof why), 0);
    SW_CHECK(strstr(why, "'mid' has a new relay connection") != NULL);
    /* a stage gone from the table: -1 (with several relays the head may leave that one) */
    t = s_table(p, 105, 95, 50, 45);
    t.n_peers = 2;
    SW_CHECK_INT(node_recover_route_check(rec, &t, names, 3, why, sizeof why), -1);
    SW_CHECK(strstr(why, "left the pipeline") != NULL);
    node_recover_free(&rec);
}

/* A table as s_table's where mid lists a live direct link to tail (issue 39). */
static sw_msg_table_t s_table_direct(sw_msg_peer_t *p, uint64_t mid_out, uint64_t tail_out)
{
    sw_msg_table_t t = s_table(p, 100, mid_out, 50, tail_out);
    p[1].announce.n_direct_hops = 1;
    p[1].announce.direct_hops[0].peer = "tail";
    return t;
}

/* Logs a round of n tokens after what rec holds and sends it in chunks; answered when
 * round_no is not 0 (the verdict of that round number). */
static void s_round(node_recover_t *rec, int kv_keep, int n, int chunks, uint64_t round_no,
                    int answered)
{
    static const int32_t toks[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    const sw_round_t r = {.kv_keep = kv_keep, .n = n, .tokens = toks};
    int idx = -1;
    char err[256] = "";
    SW_CHECK_INT(node_recover_log(rec, &r), 0);
    SW_CHECK_INT(node_recover_next(rec, 0, 0, &idx, err, sizeof err), NODE_REC_SEND);
    node_recover_sent(rec, idx, round_no, chunks, 0);
    if (answered)
        SW_CHECK_INT(node_recover_verdict(rec, round_no, 10), 1);
}

/* A direct link between two later stages carries chunks the relay never counts: once it is
 * gone, the tail's counter falls short of the answered rounds' chunks. That is a lost link
 * (2: the round in flight alone again), not a restart (0: the whole session replayed), also
 * when the link came up and went between two checks; a first stage's chunks that the relay
 * holds for it (SW_RELAY_PARK_PER_PAIR) are not missing either. */
static void s_test_route_direct(void)
{
    char names[3][SW_WIRE_NAME_MAX + 1] = {"head", "mid", "tail"};
    sw_msg_peer_t p[3];
    char why[160] = "";
    node_recover_t *rec = node_recover_new(1000);
    SW_CHECK(rec != NULL);
    if (!rec)
        return;
    sw_msg_table_t t = s_table_direct(p, 90, 40);
    node_recover_route_baseline(rec, &t, names, 3);
    s_round(rec, 0, 8, 4, 1, 1); /* 4 chunks by the link, answered */
    s_round(rec, 8, 1, 1, 2, 0); /* one in flight */
    t = s_table_direct(p, 95, 40);
    SW_CHECK_INT(node_recover_route_check(rec, &t, names, 3, why, sizeof why), 1);
    t = s_table(p, 105, 95, 50, 40); /* the link gone, the tail the same connection */
    SW_CHECK_INT(node_recover_route_check(rec, &t, names, 3, why, sizeof why), 2);
    SW_CHECK(strstr(why, "the direct link from 'mid' to 'tail' is gone") != NULL);
    /* the same for a link that came up after the baseline and went before the next check */
    t = s_table(p, 100, 90, 50, 40);
    node_recover_route_baseline(rec, &t, names, 3);
    t = s_table_direct(p, 92, 40);
    node_recover_route_note(rec, &t, names, 3);
    t = s_table(p, 105, 95, 50, 40);
    SW_CHECK_INT(node_recover_route_check(rec, &t, names, 3, why, sizeof why), 2);
    /* no direct link: a restarted tail is still one */
    t = s_table(p, 100, 90, 50, 40);
    node_recover_route_baseline(rec, &t, names, 3);
    s_round(rec, 9, 1, 1, 3, 1);
    t = s_table(p, 105, 95, 0, 0);
    SW_CHECK_INT(node_recover_route_check(rec, &t, names, 3, why, sizeof why), 0);
    SW_CHECK(strstr(why, "'tail' has a new relay connection") != NULL);
    /* a link that came up after the baseline and went before any table showed it: the tail
     * listens for direct links, its chunks are missing, and the relay's count of bytes from
     * it did not go back (the same connection): the link is gone (2), not a restart; bytes
     * counted from 0 again are a restart (0) */
    t = s_table(p, 100, 90, 50, 40);
    p[2].announce.direct = "tcp://127.0.0.1:9";
    p[2].bytes_in = 5000;
    node_recover_route_baseline(rec, &t, names, 3);
    s_round(rec, 10, 1, 1, 4, 1);
    t = s_table(p, 105, 95, 50, 40);
    p[2].announce.direct = "tcp://127.0.0.1:9";
    p[2].bytes_in = 5200;
    SW_CHECK_INT(node_recover_route_check(rec, &t, names, 3, why, sizeof why), 2);
    SW_CHECK(strstr(why, "went by a direct link from 'mid' that is gone") != NULL);
    p[2].bytes_in = 300;
    SW_CHECK_INT(node_recover_route_check(rec, &t, names, 3, why, sizeof why), 0);
    SW_CHECK(strstr(why, "'tail' has a new relay connection") != NULL);
    node_recover_free(&rec);

    /* a prefill of 12 chunks in flight to a slow first stage: 7 held at the relay is slow,
     * 9 missing is more than the relay may hold */
    rec = node_recover_new(1000);
    SW_CHECK(rec != NULL);
    if (!rec)
        return;
    t = s_table(p, 100, 90, 50, 40);
    node_recover_route_baseline(rec, &t, names, 3);
    s_round(rec, 0, 12, 12, 1, 0);
    t = s_table(p, 100, 90 + 12 - 7, 50, 40);
    SW_CHECK_INT(node_recover_route_check(rec, &t, names, 3, why, sizeof why), 1);
    t = s_table(p, 100, 90 + 12 - 9, 50, 40);
    SW_CHECK_INT(node_recover_route_check(rec, &t, names, 3, why, sizeof why), 0);
    SW_CHECK(strstr(why, "'mid' has a new relay connection") != NULL);
    node_recover_free(&rec);
}

/* A replay that moves gets a whole timeout again at its next failure (issue 33: a long
 * prompt's replay moved for minutes, failed once more and gave up at once). */
static void s_test_progress(void)
{
    node_recover_t *rec = node_recover_new(60000);
    SW_CHECK(rec != NULL);
    if (!rec)
        return;
    const sw_round_t r = {.n = 2, .tokens = (const int32_t[]){1, 2}};
    SW_CHECK_INT(node_recover_log(rec, &r), 0);
    int idx = -1;
    char err[256] = "";
    SW_CHECK_INT(node_recover_next(rec, 0, 0, &idx, err, sizeof err), NODE_REC_SEND);
    node_recover_sent(rec, idx, 1, 4, 0);
    node_recover_failed(rec, 1000, "a chunk was lost");
    SW_CHECK_INT(node_recover_next(rec, 1000, 0, &idx, err, sizeof err), NODE_REC_ROUTE);
    node_recover_routed(rec, 1000, 1, NULL);
    SW_CHECK_INT(node_recover_next(rec, 1000, 0, &idx, err, sizeof err), NODE_REC_SEND);
    node_recover_sent(rec, idx, 2, 4, 1000);
    node_recover_progress(rec, 500000); /* its pieces are acknowledged for minutes */
    node_recover_failed(rec, 520000, "no verdict within 60000 ms");
    SW_CHECK_INT(node_recover_next(rec, 520000, 0, &idx, err, sizeof err), NODE_REC_ROUTE);
    node_recover_routed(rec, 520000, 0, "stage 'tail' left the pipeline");
    SW_CHECK_INT(node_recover_next(rec, 570000, 0, &idx, err, sizeof err), NODE_REC_ROUTE);
    /* a request deadline passed meanwhile: the error says what recovery waited for (the
     * head ends the session with it, head_advance) */
    SW_CHECK_INT(node_recover_next(rec, 570000, 565000, &idx, err, sizeof err), NODE_REC_FAIL);
    SW_CHECK(strstr(err, "deadline passed while recovering (stage 'tail' left") != NULL);
    /* without progress the timeout counts from the failure: given up 60 s later */
    SW_CHECK_INT(node_recover_next(rec, 580001, 0, &idx, err, sizeof err), NODE_REC_FAIL);
    SW_CHECK(strstr(err, "recovery gave up after 60 s") != NULL);
    node_recover_free(&rec);
}

/* A replay that sent its window waits for the window's verdict: "stalled", not "waiting" (the
 * current round is not out), so the head times it out and checks its route in that state too
 * (head_session.c head_advance; tests/e2e/test_recover.c kills a stage then). A relay lost
 * during the replay replays everything again, not the current round alone: the lost rounds
 * may be the replay's. */
static void s_test_stall(void)
{
    node_recover_t *rec = node_recover_new(60000);
    SW_CHECK(rec != NULL);
    if (!rec)
        return;
    enum { N = NODE_REC_WINDOW + 5 };
    int32_t toks[N + 1];
    for (int i = 0; i <= N; i++)
        toks[i] = i + 1;
    sw_round_t r = {.n = 2, .tokens = toks};
    SW_CHECK_INT(node_recover_log(rec, &r), 0);
    for (int i = 1; i < N; i++) { /* a round a token, each committed */
        r = (sw_round_t){.n = 1, .tokens = toks + i + 1, .kv_keep = i + 1};
        SW_CHECK_INT(node_recover_log(rec, &r), 0);
    }
    int idx = -1;
    char err[256] = "";
    uint64_t round_no = 0;
    SW_CHECK_INT(node_recover_next(rec, 0, 0, &idx, err, sizeof err), NODE_REC_SEND);
    node_recover_sent(rec, idx, ++round_no, 1, 0);
    SW_CHECK(node_recover_waiting(rec) && !node_recover_stalled(rec));
    node_recover_failed(rec, 10, "stage 'tail' left the pipeline");
    SW_CHECK_INT(node_recover_next(rec, 10, 0, &idx, err, sizeof err), NODE_REC_ROUTE);
    node_recover_routed(rec, 10, 1, NULL);
    int sent = 0;
    while (node_recover_next(rec, 20, 0, &idx, err, sizeof err) == NODE_REC_SEND) {
        SW_CHECK(idx == sent && !node_recover_stalled(rec));
        node_recover_sent(rec, idx, ++round_no, 1, 20);
        sent++;
    }
    SW_CHECK_INT(sent, NODE_REC_WINDOW);
    SW_CHECK(node_recover_stalled(rec) && !node_recover_waiting(rec));
    /* a replayed verdict that is not the window's keeps it stalled; the window's opens it */
    SW_CHECK_INT(node_recover_verdict(rec, round_no - 5, 30), 0);
    SW_CHECK(node_recover_stalled(rec));
    SW_CHECK_INT(node_recover_verdict(rec, round_no, 30), 0);
    SW_CHECK(!node_recover_stalled(rec));
    SW_CHECK_INT(node_recover_next(rec, 30, 0, &idx, err, sizeof err), NODE_REC_SEND);
    SW_CHECK_INT(idx, NODE_REC_WINDOW);
    node_recover_sent(rec, idx, ++round_no, 1, 30);
    /* the relay link is lost mid-replay: everything again, from the prefill */
    node_recover_relay_lost(rec, 40, "a relay link was lost while the round travelled");
    SW_CHECK(!node_recover_stalled(rec) && !node_recover_waiting(rec));
    SW_CHECK_INT(node_recover_next(rec, 40, 0, &idx, err, sizeof err), NODE_REC_ROUTE);
    node_recover_routed(rec, 40, 1, NULL);
    SW_CHECK_INT(node_recover_next(rec, 40, 0, &idx, err, sizeof err), NODE_REC_SEND);
    SW_CHECK_INT(idx, 0);
    /* once the current round commits, a lost relay sends the current round alone again */
    for (;;) {
        node_recover_sent(rec, idx, ++round_no, 1, 50);
        if (idx == N - 1)
            break;
        if (node_recover_next(rec, 50, 0, &idx, err, sizeof err) != NODE_REC_SEND) {
            SW_CHECK_INT(node_recover_verdict(rec, round_no, 50), 0); /* the window opens */
            SW_CHECK_INT(node_recover_next(rec, 50, 0, &idx, err, sizeof err), NODE_REC_SEND);
        }
    }
    SW_CHECK_INT(node_recover_verdict(rec, round_no, 60), 1);
    r = (sw_round_t){.n = 1, .tokens = toks + N, .kv_keep = N};
    SW_CHECK_INT(node_recover_log(rec, &r), 0);
    SW_CHECK_INT(node_recover_next(rec, 70, 0, &idx, err, sizeof err), NODE_REC_SEND);
    node_recover_sent(rec, idx, ++round_no, 1, 70);
    node_recover_relay_lost(rec, 80, "a relay link was lost while the round travelled");
    SW_CHECK_INT(node_recover_next(rec, 80, 0, &idx, err, sizeof err), NODE_REC_ROUTE);
    node_recover_routed(rec, 80, 1, NULL);
    SW_CHECK_INT(node_recover_next(rec, 80, 0, &idx, err, sizeof err), NODE_REC_SEND);
    SW_CHECK_INT(idx, N);
    /* a lost relay again, and the new route leaves out a live stage (the session goes on
     * under a new id, head_route.c s_leave_route): the whole session, not the round alone */
    node_recover_sent(rec, idx, ++round_no, 1, 90);
    node_recover_relay_lost(rec, 100, "a relay link was lost while the round travelled");
    SW_CHECK_INT(node_recover_next(rec, 100, 0, &idx, err, sizeof err), NODE_REC_ROUTE);
    node_recover_caches_gone(rec);
    node_recover_routed(rec, 100, 1, NULL);
    SW_CHECK_INT(node_recover_next(rec, 100, 0, &idx, err, sizeof err), NODE_REC_SEND);
    SW_CHECK_INT(idx, 0);
    node_recover_free(&rec);
}

/* Sends the next rounds as head_advance does (the links marked as each starts to go out)
 * until the current one is out; a relay link is lost after the lose_after-th send (0: none). */
static void s_send_all(node_recover_t *rec, node_recover_links_t *l, uint64_t *round_no,
                       int lose_after, double now)
{
    int idx = -1, sent = 0;
    char err[256] = "";
    while (node_recover_next(rec, now, 0, &idx, err, sizeof err) == NODE_REC_SEND) {
        node_recover_links_mark(rec, idx, l);
        node_recover_sent(rec, idx, ++*round_no, 1, now);
        if (++sent == lose_after)
            l->losses++; /* a relay link lost between two sends */
        if (idx == node_recover_n_rounds(rec) - 1)
            break;
    }
}

/* A relay link lost while a replay's rounds go out back to back (no verdict awaited, so
 * the head checks nothing then) fails the attempt once the current round travels behind
 * them, and the whole replay goes again; before, each send of the current round took the
 * counters again and the loss went unseen (found by a slower path, or --round-timeout-ms). */
static void s_test_links(void)
{
    node_recover_t *rec = node_recover_new(60000);
    SW_CHECK(rec != NULL);
    if (!rec)
        return;
    enum { N = 6 };
    int32_t toks[N + 1];
    for (int i = 0; i <= N; i++)
        toks[i] = i + 1;
    sw_round_t r = {.n = 2, .tokens = toks};
    SW_CHECK_INT(node_recover_log(rec, &r), 0);
    for (int i = 1; i < N; i++) {
        r = (sw_round_t){.n = 1, .tokens = toks + i + 1, .kv_keep = i + 1};
        SW_CHECK_INT(node_recover_log(rec, &r), 0);
    }
    node_recover_links_t l = {.several = 1};
    uint64_t round_no = 0;
    const char *why = NULL;
    int idx = -1;
    char err[256] = "";
    s_send_all(rec, &l, &round_no, 0, 0);
    SW_CHECK(node_recover_waiting(rec));
    SW_CHECK_INT(node_recover_links_check(rec, &l, 5, &why), 0);
    node_recover_failed(rec, 10, "stage 'tail' left the pipeline");
    l.losses += 3; /* links lost while it recovers count for nothing: the replay marks again */
    SW_CHECK_INT(node_recover_next(rec, 10, 0, &idx, err, sizeof err), NODE_REC_ROUTE);
    node_recover_routed(rec, 10, 1, NULL);
    s_send_all(rec, &l, &round_no, 2, 20); /* lost after the replay's second round */
    SW_CHECK(node_recover_waiting(rec));
    SW_CHECK_INT(node_recover_links_check(rec, &l, 30, &why), 1);
    SW_CHECK(why && strstr(why, "relay link was lost"));
    SW_CHECK(node_recover_failing(rec));
    SW_CHECK_INT(node_recover_next(rec, 30, 0, &idx, err, sizeof err), NODE_REC_ROUTE);
    node_recover_routed(rec, 30, 1, NULL);
    SW_CHECK_INT(node_recover_next(rec, 30, 0, &idx, err, sizeof err), NODE_REC_SEND);
    SW_CHECK_INT(idx, 0); /* the replay's rounds may be lost: all again */
    s_send_all(rec, &l, &round_no, 0, 40);
    SW_CHECK_INT(node_recover_links_check(rec, &l, 50, &why), 0); /* none lost this time */
    SW_CHECK_INT(node_recover_verdict(rec, round_no, 60), 1);
    /* the next round: a loss before it went out counts for nothing, one after it does */
    r = (sw_round_t){.n = 1, .tokens = toks + N, .kv_keep = N};
    SW_CHECK_INT(node_recover_log(rec, &r), 0);
    l.losses++;
    s_send_all(rec, &l, &round_no, 0, 70);
    SW_CHECK_INT(node_recover_links_check(rec, &l, 80, &why), 0);
    l.dlosses++;
    SW_CHECK_INT(node_recover_links_check(rec, &l, 90, &why), 1);
    SW_CHECK(why && strstr(why, "direct link was lost"));
    node_recover_routed(rec, 90, 1, NULL);
    SW_CHECK_INT(node_recover_next(rec, 90, 0, &idx, err, sizeof err), NODE_REC_SEND);
    SW_CHECK_INT(idx, N); /* the current round alone */
    /* one relay: its connection renewed is a whole replay */
    l.several = 0;
    s_send_all(rec, &l, &round_no, 0, 100);
    l.announces++;
    SW_CHECK_INT(node_recover_links_check(rec, &l, 110, &why), 2);
    node_recover_routed(rec, 110, 1, NULL);
    SW_CHECK_INT(node_recover_next(rec, 110, 0, &idx, err, sizeof err), NODE_REC_SEND);
    SW_CHECK_INT(idx, 0);
    node_recover_free(&rec);
}

int main(void)
{
    s_test_route_check();
    s_test_route_direct();
    s_test_progress();
    s_test_stall();
    s_test_links();
    enum { N_GEN = 300 };
    int32_t ref[N_GEN], got[N_GEN];
    /* The model's own continuation, one token at a time; chains, then trees. */
    for (int run = 0; run < 4; run++) {
        const int n_prompt = run % 2 ? 700 : 40;
        s_tree_mode = run >= 2;
        int32_t seq[N_CTX];
        for (int i = 0; i < n_prompt; i++)
            seq[i] = (int32_t)((i * 7 + 3) % V);
        for (int i = 0; i < N_GEN; i++)
            seq[n_prompt + i] = s_next(seq, n_prompt + i);

        SW_CHECK_INT(s_run(n_prompt, N_GEN, NULL, 0, ref, NULL), 0);
        SW_CHECK(!memcmp(ref, seq + n_prompt, sizeof ref));

        static const int prefill[] = {1, 0};       // the prefill's verdict is lost
        static const int mid[] = {9, 0};           // mid-generation
        static const int twice[] = {9, 10, 0};     // the retry fails again
        static const int later[] = {6, 15, 22, 0}; // three separate failures
        static const int late[] = {45, 0};         // a replay longer than the window
        const struct {
            const int *kills;
            int at_replay;
            int want;
        } cases[] = {
            {prefill, 0, 1}, {mid, 0, 1},  {twice, 0, 1}, {later, 0, 3},
            {mid, 1, 1},     {late, 0, 1}, {late, 1, 1},
        };
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            int max_chunks = 0;
            memset(got, 0, sizeof got);
            int n = s_run(n_prompt, N_GEN, cases[c].kills, cases[c].at_replay, got, &max_chunks);
            SW_CHECK_INT(n, cases[c].want);
            SW_CHECK(!memcmp(got, ref, sizeof ref));
            if (memcmp(got, ref, sizeof ref))
                fprintf(stderr, "prompt %d, case %zu: output differs\n", n_prompt, c);
            if (n_prompt > SW_WIRE_MAX_ROWS)
                SW_CHECK(max_chunks >= 2); // prefill and replays went in chunks
        }
    }
    /* the window was reached, so the bound above was tested (a replay of
     * more than NODE_REC_WINDOW rounds ran) */
    printf("most replayed rounds in flight at once: %d (window %d)\n", s_max_q_seen,
           NODE_REC_WINDOW);
    SW_CHECK(s_max_q_seen >= NODE_REC_WINDOW);
    return sw_test_done();
}
