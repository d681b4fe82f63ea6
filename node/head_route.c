/*
 * head_route.c - the head's view of the cluster through the relay's peer
 * table: the route of stages a session's rounds take (key-bound nodes of
 * this model whose layers follow each other; gaps, overlaps and other
 * models refused with a message naming the peer), the stages suspected of
 * swallowing rounds, clients that left the relay, and the status query that
 * fetches the table.
 *
 * The relay is asked for its table once a second while sessions run or wait
 * (routes for new requests, route checks of late rounds, clients that
 * vanished) and every 2.5 s while idle (so that a new request finds a fresh
 * route), never in the round itself.
 */
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "head_impl.h"
#include "log.h"
#include "prefix.h"

#define S_STATUS_MS 1000       // peer-table period while sessions run or wait
#define S_STATUS_LOST_MS 3000  // a status query unanswered this long is asked again
#define S_CLIENT_GRACE_MS 5000 // a client is only judged gone by a relay up this long
#define S_CLIENT_GONE_MS 1500  // ... and missing from its tables for this long

void head_want_status(node_head_t *h)
{
    h->status_want = 1;
}

int head_route_has(const head_route_t *r, const char *name)
{
    for (int i = 1; i < r->n; i++)
        if (!strcmp(r->names[i], name))
            return 1;
    return 0;
}

const char *head_route_text(const head_route_t *r, int from, const char *sep, char *out, size_t len)
{
    out[0] = 0;
    for (int i = from; i < r->n; i++) {
        const size_t at = strlen(out);
        snprintf(out + at, len - at, "%s%s", i > from ? sep : "", r->names[i]);
    }
    return out;
}

/* 1 when the head must route only to key-bound nodes (a keyed relay binds
 * node keys to names; a loopback relay without keys binds nothing). */
static int s_need_key(const node_t *n)
{
    return n->o.sec && !n->o.sec->insecure;
}

/* A stage of a route whose round got no verdict in time: connected and
 * heartbeating but silent (a compromised member that swallows Forwards looks
 * like the quietest, least busy stage), or merely slow. Which stage of the
 * route it was cannot be told from here, so all of them are remembered. Also
 * an auto node that computes slower than its probe claimed (head_session.c). */
void head_suspect_add(node_head_t *h, const char *name, double now)
{
    sw_expiry_put(h->suspect, HEAD_SUSPECT_MAX, name, now + HEAD_SUSPECT_MS);
}

void head_proven_add(node_head_t *h, const head_route_t *r, double now)
{
    for (int k = 1; k < r->n; k++)
        sw_expiry_put(h->proven, HEAD_PROVEN_MAX, r->names[k], now + HEAD_PROVEN_MS);
}

static int s_proven(const node_head_t *h, const char *name, double now)
{
    return sw_expiry_find(h->proven, HEAD_PROVEN_MAX, name, now) >= 0;
}

static int s_suspect(const node_head_t *h, const char *name, double now)
{
    return sw_expiry_find(h->suspect, HEAD_SUSPECT_MAX, name, now) >= 0;
}

/* How many of this head's sessions (routed, running or parked) go through
 * the stage named name. */
static int s_sessions_through(const node_head_t *h, const char *name)
{
    int k = 0;
    for (int i = 0; i < h->n_slots; i++) {
        const head_sess_t *s = &h->sess[i];
        if (s->state != HEAD_ROUTE && s->state != HEAD_RUN && s->state != HEAD_PARKED)
            continue;
        for (int j = 1; j < s->route.n; j++)
            if (!strcmp(s->route.names[j], name)) {
                k++;
                break;
            }
    }
    return k;
}

/* 1 when a (sa: a suspect, ca: its cost) makes a better next stage than the
 * pick so far b (sb, cb): not a suspect, then reaching furthest, then the
 * lower cost: this head's sessions through it, plus one when it has not
 * delivered this head a verdict lately (issue 35: a silent stand-in is the
 * quietest, and quiet alone must not win, so an unproven stage counts as
 * one session more; a proven stage that carries a session ties with an
 * unproven idle one, so that load still spreads), then quiet longest
 * (idle_ms: the least busy), then by name. */
static int s_better(const sw_msg_peer_t *a, int sa, int ca, const sw_msg_peer_t *b, int sb, int cb)
{
    if (!b)
        return 1;
    if (sa != sb)
        return sa < sb;
    if (a->announce.layer_end != b->announce.layer_end)
        return a->announce.layer_end > b->announce.layer_end;
    if (ca != cb)
        return ca < cb;
    if (a->idle_ms != b->idle_ms)
        return a->idle_ms > b->idle_ms;
    return strcmp(a->announce.name, b->announce.name) < 0;
}

/* Builds head -> ... -> tail from a peer table: from the end of this stage's
 * range, the next stage is a key-bound node (sw_codec_peer_routable) whose
 * range begins there: the one whose range reaches furthest, then the one
 * carrying the fewest of this head's sessions, counting one more for a stage
 * that has not delivered this head a verdict lately (s_better), then the one
 * quiet longest (idle_ms: the least busy), then by name only between exact
 * equals, so that nobody gets picked for the name it chose. Peers that are
 * not key-bound are never routed to (a client key cannot announce as a node
 * at a keyed relay anyway), nor are stages of another model file (a relay
 * may serve several models). Refuses gaps, overlaps and other models with a
 * message naming the peer and the error code a client gets (*code):
 * ERR_MODEL_MISMATCH when only another model file's stage begins where the
 * route needs one, ERR_UNKNOWN_DEST when no
 * connected stage begins where the previous one ends (a gap, or an overlap),
 * ERR_INTERNAL for a route longer than the protocol allows; 0 or -1. With
 * avoid, a suspect stage (s_suspect) is taken only where no other serves. */
static int s_build_route_ex(node_t *n, const sw_msg_table_t *pt, int avoid, head_route_t *r,
                            int *code, char *err, size_t err_len)
{
    const double now = sw_now_ms();
    *code = SW_ERROR_UNKNOWN_DEST;
    memset(r, 0, sizeof *r);
    snprintf(r->names[0], sizeof r->names[0], "%s", sw_peer_name(n->peer));
    r->n = 1;
    r->n_ctx = n->o.n_ctx;
    r->cut_free = sw_prefix_align(n->model) < SW_MODEL_PROMPT_WINDOW;
    const uint32_t L = (uint32_t)n->hp->n_layer;
    const int need_key = s_need_key(n);
    uint32_t at = (uint32_t)sw_model_layer_end(n->model);
    while (at < L) {
        sw_msg_peer_t pick_buf;
        const sw_msg_peer_t *pick = NULL;
        int pick_suspect = 0, pick_cost = 0, unbound = 0, other = 0;
        for (uint32_t i = 0; i < pt->n_peers; i++) {
            sw_msg_peer_t info;
            if (sw_codec_peer_at(pt, i, &info) != 0)
                continue;
            const sw_msg_peer_t *pi = &info;
            const sw_msg_announce_t *a = &info.announce;
            if (a->role != SW_ROLE_MIDDLE && a->role != SW_ROLE_TAIL)
                continue;
            if (a->layer_begin != at)
                continue;
            if (!sw_codec_peer_routable(pi, need_key)) {
                unbound++;
                continue;
            }
            if (strcmp(a->model_fingerprint, n->fingerprint) != 0 || a->n_layers != L) {
                /* another model's stage (a relay may serve several models): named only
                 * when no stage of this model begins here */
                if (!other++)
                    snprintf(err, err_len,
                             "peer '%s' serves layers [%u, %u) of a different model file "
                             "(fingerprint %.12s..., this head has %.12s...): start it with "
                             "the same GGUF",
                             a->name, a->layer_begin, a->layer_end, a->model_fingerprint,
                             n->fingerprint);
                continue;
            }
            /* avoided: a node the spot checks convicted, then a disputed or suspect one */
            int sa = avoid ? head_spot_rank(n->head, a->name, now) : 0;
            if (avoid && !sa)
                sa = s_suspect(n->head, a->name, now);
            const int ca = s_sessions_through(n->head, a->name) + !s_proven(n->head, a->name, now);
            if (s_better(pi, sa, ca, pick, pick_suspect, pick_cost)) {
                pick_buf = info;
                pick = &pick_buf;
                pick_suspect = sa;
                pick_cost = ca;
            }
        }
        if (!pick && other) {
            *code = SW_ERROR_MODEL_MISMATCH;
            return -1;
        }
        if (!pick) {
            for (uint32_t i = 0; i < pt->n_peers; i++) {
                sw_msg_peer_t info;
                if (sw_codec_peer_at(pt, i, &info) != 0)
                    continue;
                const sw_msg_announce_t *a = &info.announce;
                if (a->n_layers == L && !strcmp(a->model_fingerprint, n->fingerprint) &&
                    a->layer_begin < at && a->layer_end > at &&
                    sw_codec_peer_routable(&info, need_key) &&
                    (a->role == SW_ROLE_MIDDLE || a->role == SW_ROLE_TAIL)) {
                    snprintf(err, err_len,
                             "layer ranges overlap: peer '%s' serves [%u, %u) but the stage "
                             "before it ends at layer %u: restart it with --layers %u:%u",
                             a->name, a->layer_begin, a->layer_end, at, at, a->layer_end);
                    return -1;
                }
            }
            snprintf(err, err_len,
                     "gap in the pipeline: no connected%s node serves layer %u (of %u); start "
                     "one with --layers %u:END%s",
                     need_key ? " key-bound" : "", at, L, at,
                     unbound ? " (a peer there is not bound to its name by a node key in the "
                               "relay's allow-list: 'KEY stage NAME')"
                             : "");
            return -1;
        }
        if (r->n == SW_WIRE_MAX_ROUTE) {
            snprintf(err, err_len, "the pipeline has more than %d stages", SW_WIRE_MAX_ROUTE);
            *code = SW_ERROR_INTERNAL;
            return -1;
        }
        if (pick->announce.n_ctx && (int)pick->announce.n_ctx < r->n_ctx) { // 0: not said
            r->n_ctx = (int)pick->announce.n_ctx;
            r->ctx_at = r->n;
        }
        /* a device, alone or in a group ("cpu (...) + cuda:0 (...)"): its cut matters */
        if (strncmp(pick->announce.backend, "cpu", 3) != 0 || strchr(pick->announce.backend, '+'))
            r->cut_free = 0;
        snprintf(r->names[r->n++], sizeof r->names[0], "%s", pick->announce.name);
        at = pick->announce.layer_end;
    }
    return 0;
}

/* s_build_route_ex avoiding suspects, and without that when it finds no
 * whole route (a suspect may be the only stage that closes a gap). */
int head_route_build(node_t *n, const sw_msg_table_t *pt, head_route_t *r, int *code, char *err,
                     size_t err_len)
{
    if (s_build_route_ex(n, pt, 1, r, code, err, err_len) == 0)
        return 0;
    return s_build_route_ex(n, pt, 0, r, code, err, err_len);
}

int head_route_fits(const node_t *n, const head_sess_t *s, char *why, size_t len)
{
    const head_route_t *r = &n->head->route;
    if (s->n_ctx <= r->n_ctx)
        return 1;
    snprintf(why, len,
             "%d positions (prompt + new tokens) exceed the %d-position context of stage '%s' "
             "(its --ctx, or what its --kv-mib holds; the smallest on the route)",
             s->n_ctx, r->n_ctx, r->names[r->ctx_at]);
    return 0;
}

/* s took a new route (s->route) from old: a stage of old that it does not take, still in
 * the table pt, would hold the session's cache until its --idle-timeout-s or an eviction, and
 * a stage it keeps behind another stage than before would refuse that one's Forwards (the
 * session belongs to the peer that opened it, stage.c).
 * A stage refuses the ids it closed last (NODE_CLOSED_IDS, stage_session.c) and a later recovery
 * may route the session through it again, so the session is closed on every stage of old still in
 * pt and goes on under a new id, which the replay after a route change opens again on each stage
 * (parking and spot checks do the same: head_admit.c, head_spot.c). */
void head_close_route(node_t *n, const head_route_t *r, uint64_t id, const char *why,
                      const sw_msg_table_t *pt)
{
    const sw_msg_t sc = {.type = SW_MSG_SESSION_CLOSE,
                         .session_close = {.session_id = id, .reason = why}};
    sw_msg_peer_t info;
    for (int i = 1; i < r->n; i++)
        if ((!pt || sw_codec_peer_find(pt, r->names[i], &info)) &&
            sw_peer_try_send_msg(n->peer, r->names[i], &sc) != 0)
            SW_DEBUG("could not close the session on %s", r->names[i]);
}

/* 1 when a stage of old that r keeps has another stage before it on r: it holds the session
 * for the peer that opened it (its creator, stage.c) and refuses the new one's Forwards. */
static int s_pred_changed(const head_route_t *old, const head_route_t *r)
{
    for (int i = 1; i < old->n; i++)
        for (int j = 1; j < r->n; j++)
            if (!strcmp(r->names[j], old->names[i]) && strcmp(r->names[j - 1], old->names[i - 1]))
                return 1;
    return 0;
}

static void s_leave_route(node_t *n, head_sess_t *s, const head_route_t *old,
                          const sw_msg_table_t *pt)
{
    sw_msg_peer_t info;
    int left = 0;
    for (int i = 1; i < old->n && !left; i++)
        left = !head_route_has(&s->route, old->names[i]) &&
               sw_codec_peer_find(pt, old->names[i], &info);
    const int pred = !left && s_pred_changed(old, &s->route);
    if ((!left && !pred) || !s->opened)
        return;
    head_close_route(n, old, s->id, "the session took another route", pt);
    const uint64_t was = s->id;
    head_new_id(s);
    s->opened = 0;
    node_recover_caches_gone(s->rec); /* the round alone would only meet ERR_UNKNOWN_SESSION */
    SW_INFO("session %016llx %s: closed on the old route, it goes on as %016llx",
            (unsigned long long)was,
            left ? "left a live stage of its route"
                 : "reaches a stage of its route through another stage now",
            (unsigned long long)s->id);
}

/* Gives s the head's current route (a fresh table's) and the counter
 * baseline of that table (recover.h). With the table, the route is chosen
 * again for s alone, so that the sessions this head holds now (not those of
 * when the table came) weigh in s_better; the head's route when that fails. */
void head_route_take(node_t *n, head_sess_t *s, const sw_msg_table_t *pt)
{
    head_route_t r;
    int code;
    char err[256];
    const head_route_t old = s->route;
    s->route.n = 0; /* s does not count against the stages of its own old route */
    if (pt && head_route_build(n, pt, &r, &code, err, sizeof err) == 0)
        s->route = r;
    else
        s->route = n->head->route;
    if (pt) {
        s_leave_route(n, s, &old, pt);
        node_recover_route_baseline(s->rec, pt, s->route.names, s->route.n);
        s->base_link = n->head->table_link;
    }
    if (s->route.n == 1 && !s->ver)
        s->ver = sw_verifier_new(&s->sp, n->hp->n_vocab);
    head_spot_plan(n, s, pt);
}

/* A client that is not in the relay's table (its name with its key), on a relay that has been up
 * long enough for it to announce again after a restart, for
 * S_CLIENT_GONE_MS: gone. *since tracks when it was first missed. */
int head_client_present(const sw_msg_table_t *t, const char *client, const char *key)
{
    sw_msg_peer_t p;
    return sw_codec_peer_find(t, client, &p) && (!key[0] || !strcmp(p.key_fp, key));
}

int head_client_gone(node_head_t *h, const sw_msg_table_t *t, const char *client, const char *key,
                     double *since, double now)
{
    if (head_client_present(t, client, key)) {
        *since = 0;
        return 0;
    }
    if (!*since)
        *since = now;
    if (t->uptime_ms >= S_CLIENT_GRACE_MS && now - *since >= S_CLIENT_GONE_MS)
        return 1;
    /* look again when it would be gone (not before 100 ms: no query storm) */
    double due = *since + S_CLIENT_GONE_MS;
    if (t->uptime_ms < S_CLIENT_GRACE_MS && now + (S_CLIENT_GRACE_MS - (double)t->uptime_ms) > due)
        due = now + (S_CLIENT_GRACE_MS - (double)t->uptime_ms);
    if (due < now + 100)
        due = now + 100;
    if (h->status_next > due)
        h->status_next = due;
    return 0;
}

/* The periodic status query (and the ones sessions asked for). */
void head_status_step(node_t *n, double now)
{
    node_head_t *h = n->head;
    if (h->status_out &&
        (now - h->status_sent > S_STATUS_LOST_MS || sw_peer_losses(n->peer) != h->status_losses))
        h->status_out = 0; // lost (the relay restarted? a relay of several was): ask again
    const int active = h->n_active > 0 || h->q_len > 0;
    if (active && now >= h->status_next)
        h->status_want = 1;
    /* Idle, the route is kept fresh too (a query every HEAD_ROUTE_FRESH_MS / 2),
     * so that a new request's prefill leaves at once instead of waiting one
     * relay round trip for a table. */
    if (!active && now >= h->status_next && now - h->route_ms >= HEAD_ROUTE_FRESH_MS / 2)
        h->status_want = 1;
    if (!h->status_want || h->status_out)
        return;
    const sw_msg_t q = {.type = SW_MSG_STATUS_QUERY};
    if (sw_peer_try_send_msg(n->peer, SW_WIRE_RELAY_NAME, &q) != 0) {
        /* the relay is not reachable now: the periodic query asks again (and
         * the loop does not spin on the wish meanwhile) */
        h->status_want = 0;
        h->status_next = now + NODE_REC_POLL_MS;
        return;
    }
    h->status_out = 1;
    h->status_want = 0;
    h->status_sent = now;
    h->status_losses = sw_peer_losses(n->peer);
    h->status_next = now + (active ? S_STATUS_MS : HEAD_ROUTE_FRESH_MS / 2);
}
