/*
 * stage_session.c - the sessions a stage holds (stage.h): one KV cache each,
 * that may reach the session's first Forward's n_ctx and grows as its
 * rounds use positions (engine/include/kv.h), its bytes counted against
 * --kv-mib (node_t.kv): a session opens when its first step fits, and a
 * round whose growth does not fit fails that session alone with an error
 * that says so (node_kv_grow). When the stage is full, sessions nobody used for
 * NODE_EVICT_IDLE_MS make room, least recently used first; then the creators'
 * keys share the stage max-min fairly: a key holding at least two sessions
 * fewer than the key holding the most takes that key's least recently used
 * session (issue 21, finding 9: one node key touching every session it holds
 * every 2 s kept them all). A session is
 * freed when its owner closes it (its id is remembered a while, so that a
 * Forward of it still in flight does not open it again), when a round of it
 * fails at this stage (the head replays it from its prefill), and after
 * --idle-timeout-s unused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "node.h"
#include "stage.h"

int node_sessions_held(const node_t *n)
{
    int held = 0;
    for (int i = 0; i < n->o.max_sessions; i++)
        held += n->sessions[i].id != 0;
    return held;
}

/* 1 when the session was closed a moment ago (a Forward of it still in
 * flight must not open it again). */
static int s_recently_closed(const node_t *n, uint64_t id)
{
    for (int i = 0; i < NODE_CLOSED_IDS; i++)
        if (n->closed[i] == id)
            return 1;
    return 0;
}

/* 1 when a Forward of s waits in the next batch (freeing s would drop it unanswered). */
static int s_batched(const node_t *n, const node_session_t *s)
{
    for (int i = 0; i < n->n_batch; i++)
        if (n->batch[i].s == s)
            return 1;
    return 0;
}

/*
 * Max-min fairness between the creators' keys when the stage is full: the
 * key holding the most sessions gives up its least recently used one (none
 * with a Forward waiting) to `by` when `by` holds at least two fewer. So a
 * key below its share of the slots (max_sessions over the keys that want
 * sessions, rounded down) always gets one, and no key is taken below the
 * count of the key it gives to. NULL when no key holds that many more.
 */
static node_session_t *s_fair_victim(const node_t *n, const char *by)
{
    int mine = 0, most = 0;
    const node_session_t *top = NULL; /* a session of the key holding the most */
    for (int i = 0; i < n->o.max_sessions; i++) {
        const node_session_t *s = &n->sessions[i];
        if (!s->id)
            continue;
        int same = 0;
        for (int j = 0; j < n->o.max_sessions; j++)
            same += n->sessions[j].id && !strcmp(n->sessions[j].by, s->by);
        if (!strcmp(s->by, by))
            mine = same;
        else if (same > most) {
            most = same;
            top = s;
        }
    }
    if (!top || mine + 2 > most)
        return NULL;
    node_session_t *lru = NULL;
    for (int i = 0; i < n->o.max_sessions; i++) {
        node_session_t *v = &n->sessions[i];
        if (v->id && !strcmp(v->by, top->by) && !s_batched(n, v) &&
            (!lru || v->last_used_ms < lru->last_used_ms))
            lru = v;
    }
    return lru;
}

const char NODE_WHY_CLOSED[] = "the session was closed";
const char NODE_WHY_CTX[] = "the session needs more positions than this node's context (--ctx, or "
                            "what its --kv-mib holds)";
const char NODE_WHY_KV[] = "the session needs more KV memory than this node's --kv-mib";

node_session_t *node_session_get(node_t *n, uint64_t id, const char *by, int n_ctx, int first,
                                 const char **why)
{
    node_session_t *free_slot = NULL;
    for (int i = 0; i < n->o.max_sessions; i++) {
        node_session_t *s = &n->sessions[i];
        if (s->id == id)
            return s;
        if (!s->id && !free_slot)
            free_slot = s;
    }
    if (!by) {
        *why = "unknown session";
        return NULL;
    }
    if (s_recently_closed(n, id)) {
        *why = NODE_WHY_CLOSED;
        return NULL;
    }
    const int cap = n_ctx > 0 ? n_ctx : n->o.n_ctx;
    if (cap > n->o.n_ctx) {
        *why = NODE_WHY_CTX;
        return NULL;
    }
    if (n->o.kv_bytes > 0 && sw_kv_bytes(n->model, cap) > (size_t)n->o.kv_bytes) {
        *why = NODE_WHY_KV;
        return NULL;
    }
    /* Room for its first step (it grows from there): cached prefixes make
     * room first (they are only worth time), */
    const size_t bytes = sw_kv_bytes(n->model, sw_kv_step(first > 1 ? first : 1, cap));
    node_prefix_room(n, (size_t)n->kv.used, bytes);
    /* then, when full, sessions nobody used for a while (whoever created them), least
     * recently used first, so that a peer that opened sessions and left them idle
     * cannot hold the stage until the idle timeout. */
    const double now = sw_now_ms();
    while (!free_slot ||
           (n->o.kv_bytes > 0 && (size_t)n->kv.used + bytes > (size_t)n->o.kv_bytes)) {
        node_session_t *lru = NULL;
        for (int i = 0; i < n->o.max_sessions; i++) {
            node_session_t *v = &n->sessions[i];
            if (v->id && now - v->last_used_ms >= NODE_EVICT_IDLE_MS &&
                (!lru || v->last_used_ms < lru->last_used_ms))
                lru = v;
        }
        if (lru) {
            SW_INFO("session %016llx of %s unused for %.1f s: freed to make room for a new one",
                    (unsigned long long)lru->id, lru->creator, (now - lru->last_used_ms) / 1e3);
        } else if ((lru = s_fair_victim(n, by)) != NULL) {
            SW_INFO("session %016llx of %s (key %.12s) freed for a session of key %.12s: the "
                    "stage is full and that key held the most sessions (fair share)",
                    (unsigned long long)lru->id, lru->creator, lru->by, by);
        } else {
            break;
        }
        node_session_free(n, lru);
        if (!free_slot)
            free_slot = lru;
    }
    if (!free_slot) {
        *why = "this node holds its maximum number of sessions, all in use (see --max-sessions)";
        return NULL;
    }
    if (n->o.kv_bytes > 0 && (size_t)n->kv.used + bytes > (size_t)n->o.kv_bytes) {
        *why = "this node's KV memory is full (see --kv-mib)";
        return NULL;
    }
    free_slot->kv = sw_kv_new_grow(n->model, cap, &n->kv);
    if (!free_slot->kv) {
        *why = "out of memory for the session's KV cache";
        return NULL;
    }
    free_slot->id = id;
    snprintf(free_slot->by, sizeof free_slot->by, "%s", by);
    free_slot->round = 0;
    free_slot->last_used_ms = sw_now_ms();
    return free_slot;
}

void node_session_close(node_t *n, node_session_t *s)
{
    if (!s || !s->id)
        return;
    n->closed[n->closed_at] = s->id;
    n->closed_at = (n->closed_at + 1) % NODE_CLOSED_IDS;
    node_session_free(n, s);
}

void node_session_free(node_t *n, node_session_t *s)
{
    if (!s || !s->id)
        return;
    SW_DEBUG("session %016llx freed", (unsigned long long)s->id);
    for (int i = 0; i < n->n_batch; i++)
        if (n->batch[i].s == s)
            n->batch[i].s = NULL; // its waiting Forward is dropped
    sw_kv_free(&s->kv);           // its bytes leave n->kv
    sw_verifier_free(&s->ver);
    free(s->prompt);
    memset(s, 0, sizeof *s);
}

void node_sessions_expire(node_t *n, double now_ms)
{
    for (int i = 0; i < n->o.max_sessions; i++) {
        node_session_t *s = &n->sessions[i];
        if (s->id && now_ms - s->last_used_ms > n->o.idle_timeout_ms) {
            SW_INFO("session %016llx idle for %d ms: freeing its cache", (unsigned long long)s->id,
                    n->o.idle_timeout_ms);
            node_session_free(n, s);
        }
    }
}

void node_prefix_room(node_t *n, size_t kv_used, size_t need)
{
    if (!n->prefix || n->o.kv_bytes <= 0)
        return;
    const size_t cap = (size_t)n->o.kv_bytes;
    sw_prefix_evict(n->prefix, kv_used + need < cap ? cap - kv_used - need : 0);
}

int node_kv_grow(node_t *n, sw_kv_t *kv, int need, uint64_t id, char *err, size_t err_len)
{
    const int before = sw_kv_allocated(kv);
    if (sw_kv_reserve(kv, need, err, err_len) != 0)
        return -1;
    if (sw_kv_allocated(kv) != before)
        SW_DEBUG("session %016llx: KV cache %d -> %d positions (%.2f MiB; %.1f of %.1f MiB in "
                 "use, context %d)",
                 (unsigned long long)id, before, sw_kv_allocated(kv),
                 (double)sw_kv_alloc_bytes(kv) / (1 << 20), (double)n->kv.used / (1 << 20),
                 (double)n->kv.limit / (1 << 20), sw_kv_capacity(kv));
    return 0;
}
