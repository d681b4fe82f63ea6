/*
 * test_recover_loop.c - the head's recovery loop (node/recover.c) driven by
 * sw_generate() with speculative drafts, against a simulated pipeline that
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
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../node/recover.c"
#include "sw_test.h"

#define N_CTX 4096
#define V 97

/* The "model": the next token after seq[0..n) depends on all of it. */
static int32_t s_next(const int32_t *seq, int n)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++)
        h = (h ^ (uint64_t)(seq[i] + 1)) * 1099511628211ull;
    return (int32_t)(h % V);
}

typedef struct sim {
    int32_t cache[N_CTX];    // the stage's cache (tokens stand for KV rows)
    int len;                 // positions held
    int alive;               // 0 = killed, not back yet
    int down_polls;          // reroute polls until it is back
    int refused;             // the last round kept more than the cache held
    sw_verdict_t pending;    // verdict of the last round sent
    int waits, sends;        // calls so far
    const int *kill_at_wait; // kill when the wait call number is listed (0-terminated)
    int kill_at_replay;      // kill 3 rounds into the replay of this number (1-based), 0 = never
    int zero_sends;          // sends that keep nothing (the prefill, and each replay's start)
    int since_zero;          // sends since the last one of those
    int max_chunks;          // most chunks in one send
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

static int s_send(void *ctx, const sw_round_t *r, int more, char *err, size_t len)
{
    sim_t *s = ctx;
    s->sends++;
    if (!s->alive) {
        snprintf(err, len, "stage left");
        return NODE_RECOVER_RETRY;
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
        return NODE_RECOVER_RETRY;
    }
    s->refused = 0;
    if (r->kv_keep > s->len) {
        s->refused = 1; // ERR_UNKNOWN_SESSION
        return 1;
    }
    s->len = r->kv_keep;
    for (int i = 0; i < r->n; i++)
        s->cache[s->len++] = r->tokens[i];
    int chunks = (r->n + SW_WIRE_MAX_ROWS - 1) / SW_WIRE_MAX_ROWS;
    if (chunks > s->max_chunks)
        s->max_chunks = chunks;
    if (more)
        return chunks;
    /* Verify greedily: draft i is accepted when it is the model's token. */
    const int n_ctx = r->n - r->n_draft;
    int at = r->kv_keep + n_ctx, k = 0;
    s->pending.n_commit = 0;
    for (; k < r->n_draft; k++) {
        int32_t want = s_next(s->cache, at + k);
        if (r->tokens[n_ctx + k] != want)
            break;
        s->pending.tokens[s->pending.n_commit++] = want;
    }
    s->pending.tokens[s->pending.n_commit++] = s_next(s->cache, at + k);
    return chunks;
}

static int s_wait(void *ctx, sw_verdict_t *out, char *err, size_t len)
{
    sim_t *s = ctx;
    s->waits++;
    if (s_listed(s->kill_at_wait, s->waits)) {
        s_kill(s);
        snprintf(err, len, "stage killed");
        return NODE_RECOVER_RETRY;
    }
    if (s->refused) {
        snprintf(err, len, "unknown session");
        return NODE_RECOVER_RETRY;
    }
    *out = s->pending;
    return NODE_RECOVER_OK;
}

static int s_reroute(void *ctx, char *err, size_t len)
{
    sim_t *s = ctx;
    if (!s->alive && --s->down_polls > 0) {
        snprintf(err, len, "gap in the pipeline");
        return NODE_RECOVER_RETRY;
    }
    s->alive = 1;
    return NODE_RECOVER_OK;
}

static int s_idle(void *ctx, int ms, char *err, size_t len)
{
    (void)ctx, (void)ms, (void)err, (void)len;
    return NODE_RECOVER_OK;
}

typedef struct wrap {
    node_recover_t *rec;
    node_recover_ops_t ops;
} wrap_t;

static int s_round(void *ctx, const sw_round_t *r, sw_verdict_t *out, char *err, size_t len)
{
    wrap_t *w = ctx;
    return node_recover_round(w->rec, &w->ops, r, 0, out, err, len);
}

/* Drafts the model's own continuation, spoiled at one position that moves
 * with the context length, so rounds accept 0..k drafts. */
static int s_propose(void *self, const int32_t *ctx, int n_ctx, int k_max, int32_t *out,
                     sw_draft_q_t *q, int *q_used)
{
    (void)self, (void)q;
    *q_used = 0;
    int32_t buf[N_CTX];
    memcpy(buf, ctx, (size_t)n_ctx * sizeof *buf);
    const int spoil = n_ctx % (k_max + 2);
    for (int i = 0; i < k_max; i++) {
        out[i] = s_next(buf, n_ctx + i);
        if (i == spoil)
            out[i] = (out[i] + 1) % V;
        buf[n_ctx + i] = out[i];
    }
    return k_max;
}

/* One generation; returns the number of recoveries. */
static int s_run(int n_prompt, int n_gen, const int *kills, int kill_at_replay, int32_t *out,
                 int *max_chunks)
{
    static sim_t s;
    memset(&s, 0, sizeof s);
    s.alive = 1;
    s.kill_at_wait = kills;
    s.kill_at_replay = kill_at_replay;
    wrap_t w = {
        .rec = node_recover_new(N_CTX, 60000),
        .ops = {.ctx = &s, .send = s_send, .wait = s_wait, .reroute = s_reroute, .idle = s_idle}};
    SW_CHECK(w.rec != NULL);
    int32_t prompt[N_CTX];
    for (int i = 0; i < n_prompt; i++)
        prompt[i] = (int32_t)((i * 7 + 3) % V);
    sw_proposer_t prop = {.propose = s_propose};
    sw_gen_opts_t o = {.n_predict = n_gen, .k = 4, .proposer = &prop};
    sw_target_t tg = {.round = s_round, .ctx = &w};
    sw_gen_stats_t st;
    char err[256] = "";
    int rc = sw_generate(&tg, prompt, n_prompt, &o, out, &st, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "generate: %s\n", err);
    SW_CHECK_INT(rc, 0);
    SW_CHECK_INT(st.n_gen, n_gen);
    int rec = w.rec ? node_recover_stats(w.rec)->recoveries : -1;
    if (max_chunks)
        *max_chunks = s.max_chunks;
    if (kills || kill_at_replay)
        SW_CHECK(st.accepted > 0); // drafts really were accepted along the way
    node_recover_free(&w.rec);
    return rec;
}

int main(void)
{
    enum { N_GEN = 120 };
    int32_t ref[N_GEN], got[N_GEN];
    /* The model's own continuation, one token at a time. */
    for (int n_prompt = 40; n_prompt <= 700; n_prompt += 660) {
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
        const struct {
            const int *kills;
            int at_replay;
            int want;
        } cases[] = {
            {prefill, 0, 1}, {mid, 0, 1}, {twice, 0, 1}, {later, 0, 3}, {mid, 1, 1},
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
    return sw_test_done();
}
