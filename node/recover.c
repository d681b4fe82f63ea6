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

#define S_POLL_MS 250 /* between route checks while waiting for the pipeline */

typedef struct s_base {
    char name[SW_WIRE_NAME_MAX + 1]; // stage
    uint64_t msgs_out;               // relay counter when the route was built: messages to it
    uint64_t msgs_in;                // the same: messages from it
} s_base_t;

struct node_recover {
    int32_t *hist;                    // (cap) row tokens by position; [0, kv_keep) committed
    int cap;                          // positions hist can hold
    int n_hist;                       // positions with a row token (the last round's end)
    int timeout_ms;                   // one recovery waits this long for a route
    s_base_t base[SW_WIRE_MAX_ROUTE]; // per stage of the current route
    int n_base;                       // entries in base
    uint64_t done_chunks;             // Forward chunks of rounds answered since the baseline
    uint64_t inflight_chunks;         // chunks sent in the current attempt, not answered yet
    node_recover_stats_t st;          // totals
};

node_recover_t *node_recover_new(int n_ctx, int timeout_ms)
{
    node_recover_t *rec = calloc(1, sizeof *rec);
    if (!rec)
        return NULL;
    rec->cap = n_ctx + SW_WIRE_MAX_ROWS;
    rec->hist = malloc((size_t)rec->cap * sizeof *rec->hist);
    if (!rec->hist) {
        free(rec);
        return NULL;
    }
    rec->timeout_ms = timeout_ms;
    return rec;
}

void node_recover_free(node_recover_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free((*self_p)->hist);
    free(*self_p);
    *self_p = NULL;
}

const node_recover_stats_t *node_recover_stats(const node_recover_t *rec)
{
    return &rec->st;
}

/* ---- route liveness ------------------------------------------------------------------ */

static const Shardwire__PeerInfo *s_find(const Shardwire__PeerTable *t, const char *name)
{
    for (size_t j = 0; j < t->n_peers; j++) {
        const Shardwire__PeerAnnounce *a = t->peers[j]->announce;
        if (a && !strcmp(a->name, name))
            return t->peers[j];
    }
    return NULL;
}

void node_recover_route_baseline(node_recover_t *rec, const Shardwire__PeerTable *t,
                                 char names[][SW_WIRE_NAME_MAX + 1], int n)
{
    rec->n_base = 0;
    rec->done_chunks = rec->inflight_chunks = 0;
    for (int i = 1; i < n && i < SW_WIRE_MAX_ROUTE; i++) {
        const Shardwire__PeerInfo *pi = s_find(t, names[i]);
        s_base_t *b = &rec->base[rec->n_base++];
        snprintf(b->name, sizeof b->name, "%s", names[i]);
        b->msgs_out = pi ? pi->msgs_out : 0;
        b->msgs_in = pi ? pi->msgs_in : 0;
    }
}

int node_recover_route_check(const node_recover_t *rec, const Shardwire__PeerTable *t,
                             char names[][SW_WIRE_NAME_MAX + 1], int n, char *why, size_t why_len)
{
    uint64_t prev_sent = 0; // messages the stage before sent since the baseline
    for (int i = 1; i < n; i++) {
        const Shardwire__PeerInfo *pi = s_find(t, names[i]);
        if (!pi) {
            snprintf(why, why_len, "stage '%s' left the pipeline", names[i]);
            return 0;
        }
        const s_base_t *b = i - 1 < rec->n_base ? &rec->base[i - 1] : NULL;
        if (!b || strcmp(b->name, names[i]) != 0)
            return 1; // no baseline for this route
        /* Everything sent to this stage before our status query went through
         * the relay first: the head's chunks (its connection is FIFO, so the
         * query comes after them), and every message the stage before it sent
         * (each stage passes a Forward on to the next). At least the chunks of
         * the answered rounds reached every stage. */
        uint64_t want = rec->done_chunks;
        if (i == 1)
            want += rec->inflight_chunks;
        else if (prev_sent > want)
            want = prev_sent;
        if (pi->msgs_out < b->msgs_out + want) {
            snprintf(why, why_len,
                     "stage '%s' has a new relay connection (restarted, or the relay did)",
                     names[i]);
            return 0;
        }
        prev_sent = pi->msgs_in >= b->msgs_in ? pi->msgs_in - b->msgs_in : 0;
    }
    return 1;
}

/* ---- the retry loop ------------------------------------------------------------------ */

/* Waits until ops->reroute succeeds, up to give_up_ms / deadline_ms. */
static int s_wait_route(const node_recover_ops_t *ops, double give_up_ms, double deadline_ms,
                        char *err, size_t err_len)
{
    char why[256] = "";
    int logged = 0;
    for (;;) {
        int rc = ops->reroute(ops->ctx, why, sizeof why);
        if (rc == NODE_RECOVER_OK)
            return NODE_RECOVER_OK;
        if (rc == NODE_RECOVER_FATAL) {
            snprintf(err, err_len, "%s", why);
            return NODE_RECOVER_FATAL;
        }
        if (!logged++)
            SW_INFO("recovery: waiting for the pipeline (%s)", why);
        double now = sw_now_ms();
        if (deadline_ms && now >= deadline_ms) {
            snprintf(err, err_len, "the request's deadline passed while recovering (%s)", why);
            return NODE_RECOVER_FATAL;
        }
        if (now >= give_up_ms) {
            snprintf(err, err_len, "%s", why);
            return NODE_RECOVER_RETRY;
        }
        if (ops->idle(ops->ctx, S_POLL_MS, err, err_len) != NODE_RECOVER_OK)
            return NODE_RECOVER_FATAL;
    }
}

int node_recover_round(node_recover_t *rec, const node_recover_ops_t *ops, const sw_round_t *r,
                       double deadline_ms, sw_verdict_t *out, char *err, size_t err_len)
{
    /* The round's rows by position. Its context rows are committed; its
     * drafts are only proposals, but a round keeps kv_keep positions, and
     * every position below it is a context row or an accepted draft of an
     * earlier round (an accepted draft is the committed token), so
     * hist[0, kv_keep) is always the committed sequence. */
    if (r->kv_keep < 0 || r->n - r->n_draft < 1 || r->kv_keep > rec->n_hist ||
        (int64_t)r->kv_keep + r->n > rec->cap) {
        snprintf(err, err_len, "recovery: round at %d with %d rows does not follow %d positions",
                 r->kv_keep, r->n, rec->n_hist);
        return -1;
    }
    memcpy(rec->hist + r->kv_keep, r->tokens, (size_t)r->n * sizeof *rec->hist);
    rec->n_hist = r->kv_keep + r->n;

    double t_fail = 0, give_up = 0, t_sent = sw_now_ms();
    int replay = 0;
    char last[512] = "";
    for (int attempt = 0;; attempt++) {
        int rc = NODE_RECOVER_OK, chunks = 0;
        if (replay && r->kv_keep > 0) {
            sw_round_t rp = {.kv_keep = 0, .n = r->kv_keep, .tokens = rec->hist, .n_draft = 0};
            SW_INFO("recovery: replaying %d committed tokens", r->kv_keep);
            rc = ops->send(ops->ctx, &rp, 1, err, err_len);
            if (rc >= 0) {
                chunks += rc;
                rec->inflight_chunks = (uint64_t)chunks;
                rec->st.replays++;
                rec->st.replayed_rows += r->kv_keep;
                rc = NODE_RECOVER_OK;
            }
        }
        if (rc == NODE_RECOVER_OK) {
            t_sent = attempt ? t_sent : sw_now_ms();
            rc = ops->send(ops->ctx, r, 0, err, err_len);
            if (rc >= 0) {
                chunks += rc;
                rec->inflight_chunks = (uint64_t)chunks;
                rc = ops->wait(ops->ctx, out, err, err_len);
            }
        }
        rec->inflight_chunks = 0;
        if (rc == NODE_RECOVER_OK) {
            rec->done_chunks += (uint64_t)chunks;
            if (t_fail) {
                rec->st.recoveries++;
                rec->st.recover_ms = sw_now_ms() - t_fail;
                rec->st.recover_ms_sum += rec->st.recover_ms;
                SW_INFO("recovery: the round went through again %.0f ms after the failure "
                        "(%d attempt(s))",
                        rec->st.recover_ms, attempt + 1);
            }
            return 0;
        }
        if (rc == NODE_RECOVER_FATAL)
            return -1;
        /* Recoverable: wait for a whole pipeline, then replay and retry. */
        double now = sw_now_ms();
        if (!t_fail) {
            t_fail = now;
            give_up = now + rec->timeout_ms;
            rec->st.detect_ms = now - t_sent;
        }
        snprintf(last, sizeof last, "%s", err);
        SW_WARN("recovery: round at position %d failed after %.0f ms (%s); waiting up to %.0f s "
                "for the pipeline",
                r->kv_keep, now - t_sent, last,
                (give_up - now) / 1e3 > 0 ? (give_up - now) / 1e3 : 0);
        if (now >= give_up) {
            snprintf(err, err_len, "recovery gave up after %d s: %s", rec->timeout_ms / 1000, last);
            return -1;
        }
        rc = s_wait_route(ops, give_up, deadline_ms, err, err_len);
        if (rc == NODE_RECOVER_FATAL)
            return -1;
        if (rc == NODE_RECOVER_RETRY) {
            char why[256];
            snprintf(why, sizeof why, "%s", err);
            snprintf(err, err_len, "recovery gave up after %d s: %s (round failed: %s)",
                     rec->timeout_ms / 1000, why, last);
            return -1;
        }
        replay = 1;
    }
}
