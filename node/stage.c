/*
 * stage.c - the work of a pipeline stage: the Forwards of many sessions run
 * as one batch (the sessions and their caches: stage_session.c).
 *
 * A Forward is first checked against this stage's configuration, its route
 * and its session (node_stage_forward); an accepted one waits in the stage's
 * queue. Once a pass of the event loop, node_stage_flush() takes the next
 * batch out of the queue (stage_sched.c: fairly between the client keys and
 * tenants the Forwards belong to, a prompt piece alone or first), checks
 * what depends on the session's cache (its earlier Forwards have run by
 * then), runs the batch through this stage's layers in ONE call of the
 * engine (each session with its own cache and positions:
 * sw_model_forward_batch), then passes each session's hidden states on to
 * the next stage or, on the last stage, verifies each round and answers its
 * head with a Verdict. While a WAN round trip is in flight a stage would sit
 * idle; many sessions' rounds batched together turn that idle time into
 * throughput, and the engine's batch invariance keeps each session's output
 * exactly what it would be alone.
 *
 * Bounds: one Forward per session per batch (a session's next one runs in a
 * later batch), at most --max-batch-rows rows per batch (a prefill chunk
 * larger than that runs alone), NODE_MAX_BATCH Forwards and NODE_QUEUE_BYTES
 * of payload waiting (beyond, a batch runs before the next is taken), and a
 * session's cache is sized from the Forward's n_ctx and counted against
 * --kv-mib: a session that does not fit is refused with an error that says
 * so, never an out-of-memory crash.
 *
 * Every field of a Forward that this stage relies on is checked against its
 * own configuration before anything changes; a bad message is answered with
 * an Error and otherwise ignored.
 */
#include "stage.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "node.h"
#include "placement.h"

int node_is_last(const node_t *n)
{
    return sw_model_is_last(n->model);
}

/* ---- Forward -------------------------------------------------------------------------- */

static void s_reply_error(node_t *n, const char *dest, int code, uint64_t session, const char *fmt,
                          ...) __attribute__((format(printf, 5, 6)));

static void s_reply_error(node_t *n, const char *dest, int code, uint64_t session, const char *fmt,
                          ...)
{
    char text[SW_WIRE_MAX_ERROR_TEXT];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    SW_WARN("session %016llx: %s", (unsigned long long)session, text);
    const sw_msg_t er = {
        .type = SW_MSG_ERROR,
        .error = {.code = (sw_error_code_t)code, .message = text, .session_id = session},
    };
    if (dest && dest[0] && sw_peer_send_msg_via(n->peer, n->via, dest, &er) != 0)
        SW_WARN("could not send the error to %s", dest);
}

/* The verifier of a session on the last stage, made from the Forward's
 * sampling parameters on its first round (the defaults when it has none);
 * NULL when they are invalid. */
static sw_verifier_t *s_verifier(const node_t *n, const sw_msg_forward_t *f)
{
    sw_sampling_t sp = f->has_sampling ? f->sampling : sw_sampling_default();
    return sw_sampling_check(&sp) == 0 ? sw_verifier_new(&sp, n->hp->n_vocab) : NULL;
}

/* The stage's cached peer table (no peers before the first one came). */
static sw_msg_table_t s_table(const node_t *n)
{
    sw_msg_t d;
    if (sw_wire_msg_type(&n->table) != SW_MSG_PEER_TABLE ||
        sw_codec_decode(&n->table, SW_MSG_PEER_TABLE, &d, NULL, 0) != 0)
        return (sw_msg_table_t){0};
    return d.table;
}

/*
 * The route's neighbours of this stage, in the cached peer table: route[0] a
 * head, the previous hop a node whose layers end where this stage's begin,
 * the next hop (unless this stage is the last) one whose layers begin where
 * they end, all routable (key-bound at a keyed relay) and of this model. 1
 * when they fit, 0 when one does not (why says which), -1 when a name is not
 * in the table.
 */
static int s_route_fits(const node_t *n, const sw_msg_forward_t *f, char *why, size_t why_len)
{
    const sw_msg_table_t table = s_table(n);
    const int need_key = n->o.sec && !n->o.sec->insecure;
    const uint32_t begin = (uint32_t)sw_model_layer_begin(n->model);
    const uint32_t end = (uint32_t)sw_model_layer_end(n->model);
    const struct {
        uint32_t hop;
        const char *what;
    } want[3] = {{0, "head"}, {f->hop - 1, "previous hop"}, {f->hop + 1, "next hop"}};
    for (int i = 0; i < (node_is_last(n) ? 2 : 3); i++) {
        const char *name = f->route[want[i].hop];
        sw_msg_peer_t pi;
        if (!sw_codec_peer_find(&table, name, &pi)) {
            snprintf(why, why_len, "the route's %s '%s' is not connected to the relay",
                     want[i].what, name);
            return -1;
        }
        const sw_msg_announce_t *a = &pi.announce;
        int ok = sw_codec_peer_routable(&pi, need_key);
        if (!ok) {
            snprintf(why, why_len, "the route's %s '%s' is not a %snode", want[i].what, name,
                     need_key ? "key-bound " : "");
            return 0;
        }
        if (strcmp(a->model_fingerprint, n->fingerprint) != 0 ||
            a->n_layers != (uint32_t)n->hp->n_layer) {
            snprintf(why, why_len, "the route's %s '%s' serves another model", want[i].what, name);
            return 0;
        }
        ok = i == 0   ? a->role == SW_ROLE_HEAD && a->layer_begin == 0
             : i == 1 ? a->layer_end == begin
                      : a->layer_begin == end;
        if (!ok) {
            snprintf(why, why_len,
                     "the route's %s '%s' holds layers [%u, %u) (%s), which do not fit this "
                     "stage's [%u, %u)",
                     want[i].what, name, a->layer_begin, a->layer_end, sw_wire_role_name(a->role),
                     begin, end);
            return 0;
        }
    }
    return 1;
}

/* Asks the relay for its peer table unless a query is out (asked again after 1 s). */
static void s_ask_table(node_t *n, double now)
{
    if (n->table_asked_ms && now - n->table_asked_ms < 1000)
        return;
    const sw_msg_t q = {.type = SW_MSG_STATUS_QUERY};
    if (sw_peer_try_send_msg_via(n->peer, n->via, SW_WIRE_RELAY_NAME, &q) == 0)
        n->table_asked_ms = now;
}

static void s_forward(node_t *n, sw_wire_msg_t *msg, double t_arrive);

/* --test-slow-ms, --test-slow-x: a slow computation, the loop blocked after a batch. */
static void s_test_hold(node_t *n)
{
    const double hold_ms =
        n->o.test_slow_ms + n->o.test_slow_x * node_place_claim_ms(n, n->batch_rows);
    const long hold_us = (long)(hold_ms * 1e3);
    const struct timespec ts = {hold_us / 1000000, (hold_us % 1000000) * 1000L};
    nanosleep(&ts, NULL);
    SW_INFO("--test-slow-%s: held the loop %.0f ms more (a batch of %d rows)",
            n->o.test_slow_x > 0 ? "x" : "ms", hold_ms, n->batch_rows);
}

/* The round a Forward describes, as far as the cache is concerned (no
 * tokens): kv_keep, the kept path of the previous tree round and the tree.
 * parents and kv_path (SW_WIRE_MAX_DRAFT each) hold the converted arrays. */
static void s_round_of(const sw_msg_forward_t *f, sw_round_t *r, int32_t *parents, int32_t *kv_path)
{
    memset(r, 0, sizeof *r);
    r->kv_keep = (int)f->kv_keep;
    r->n = (int)f->n_rows;
    r->n_draft = (int)f->n_draft;
    for (uint32_t i = 0; f->draft_parents && i < f->n_draft; i++)
        parents[i] = (int32_t)f->draft_parents[i];
    r->parent = f->draft_parents ? parents : NULL;
    for (uint32_t j = 0; j < f->n_kv_path; j++)
        kv_path[j] = (int32_t)f->kv_path[j];
    r->kv_path_from = (int)f->kv_path_from;
    r->n_kv_path = (int)f->n_kv_path;
    r->kv_path = f->n_kv_path ? kv_path : NULL;
}

void node_stage_forward(node_t *n, sw_wire_msg_t *msg)
{
    s_forward(n, msg, sw_now_ms());
}

void node_stage_table(node_t *n, sw_wire_msg_t *msg)
{
    const double now = sw_now_ms();
    sw_wire_msg_move(&n->table, msg);
    n->table_ms = now;
    n->table_asked_ms = 0;
    const int k = n->n_pending;
    node_pending_t waiting[NODE_PENDING_MAX];
    memcpy(waiting, n->pending, (size_t)k * sizeof *waiting);
    n->n_pending = 0; /* the checks below see a table newer than every one of them */
    for (int i = 0; i < k; i++) {
        s_forward(n, &waiting[i].msg, waiting[i].t_arrive);
        sw_wire_msg_clear(&waiting[i].msg);
    }
}

void node_stage_step(node_t *n, double now)
{
    if (!n->head && !n->table_ms)
        s_ask_table(n, now); /* at start: the first Forward finds a table */
    if (n->n_pending == 0)
        return;
    s_ask_table(n, now); /* a query that was lost */
    for (int i = 0; i < n->n_pending;) {
        node_pending_t *p = &n->pending[i];
        if (now - p->t_arrive < NODE_TABLE_WAIT_MS) {
            i++;
            continue;
        }
        sw_msg_t d;
        const uint64_t sid =
            sw_codec_decode(&p->msg, SW_MSG_FORWARD, &d, NULL, 0) == 0 ? d.forward.session_id : 0;
        s_reply_error(n, p->msg.peer, SW_ERROR_DEST_BUSY, sid,
                      "%s could not check the forward's route: the relay sent no peer table "
                      "within %d ms",
                      sw_peer_name(n->peer), NODE_TABLE_WAIT_MS);
        sw_wire_msg_clear(&p->msg);
        n->pending[i] = n->pending[--n->n_pending];
    }
}

/*
 * The checks of a Forward, in this order, before anything changes: each
 * returns 0 when it may go on and -1 when it was answered with an Error (or,
 * by s_check_route, moved into n->pending to wait for a peer table). Until
 * the route is known to be sound, errors go to the sender the relay names
 * (never to a reply_to that could aim them at a bystander).
 */

/* The message must be meant for this stage and fit it (net/wire_check_round.c has checked
 * the limits and that the payload matches dtype x [n_rows, hidden]), and
 * come from the route's previous hop. */
static int s_check_meant(node_t *n, const sw_wire_msg_t *msg, const sw_msg_forward_t *f)
{
    const int E = n->hp->n_embd;
    const uint64_t sid = f->session_id;
    const char *reply = msg->peer;
    if (sw_model_is_first(n->model)) { /* no stage comes before layer 0 */
        s_reply_error(n, reply, SW_ERROR_BAD_REQUEST, sid, "%s is a head: it takes no forwards",
                      sw_peer_name(n->peer));
        return -1;
    }
    if (f->layer_begin != (uint32_t)sw_model_layer_begin(n->model) || f->hop == 0 ||
        f->hop >= f->n_route || strcmp(f->route[f->hop], sw_peer_name(n->peer)) != 0) {
        s_reply_error(n, reply, SW_ERROR_BAD_REQUEST, sid,
                      "%s holds layers [%d, %d) but got a forward for layer %u at hop %u",
                      sw_peer_name(n->peer), sw_model_layer_begin(n->model),
                      sw_model_layer_end(n->model), f->layer_begin, f->hop);
        return -1;
    }
    /* A middle stage passes the round on to route[hop + 1], which must exist; the
     * last stage must be the route's last entry; the verdict goes to the head. */
    if (node_is_last(n) ? f->hop + 1 != f->n_route : f->hop + 1 >= f->n_route) {
        s_reply_error(n, reply, SW_ERROR_BAD_REQUEST, sid,
                      "%s is %s stage but is entry %u of a %u-stage route", sw_peer_name(n->peer),
                      node_is_last(n) ? "the last" : "not the last", f->hop, f->n_route);
        return -1;
    }
    if (strcmp(f->reply_to, f->route[0]) != 0) {
        s_reply_error(n, reply, SW_ERROR_BAD_REQUEST, sid,
                      "a round's verdict goes to the route's head %s, not to %s", f->route[0],
                      f->reply_to);
        return -1;
    }
    if (f->n_hop_digests != f->hop - 1) {
        s_reply_error(n, reply, SW_ERROR_BAD_REQUEST, sid,
                      "a forward at hop %u must carry %u hop digests, not %u", f->hop, f->hop - 1,
                      f->n_hop_digests);
        return -1;
    }
    if (!msg->has_payload || f->hidden != (uint32_t)E || f->n_tokens != f->n_rows ||
        f->start_pos != f->kv_keep) {
        s_reply_error(n, reply, SW_ERROR_BAD_REQUEST, sid,
                      "forward needs hidden states of width %d, one token per row and "
                      "start_pos == kv_keep",
                      E);
        return -1;
    }
    /* Only the previous hop may drive this stage, and a session belongs to the peer
     * whose Forward created it (the relay vouches for msg->peer's identity). */
    if (strcmp(msg->peer, f->route[f->hop - 1]) != 0) {
        SW_WARN("dropped a forward from %s: the route names %s as the previous hop", msg->peer,
                f->route[f->hop - 1]);
        s_reply_error(n, msg->peer, SW_ERROR_BAD_REQUEST, sid,
                      "%s takes forwards only from the previous hop of the route",
                      sw_peer_name(n->peer));
        return -1;
    }
    return 0;
}

/* The route's neighbours of this stage, against the relay's peer table. */
static int s_check_route(node_t *n, sw_wire_msg_t *msg, const sw_msg_forward_t *f, double t_arrive)
{
    const uint64_t sid = f->session_id;
    const char *reply = msg->peer;
    /* The neighbours the route names must be the nodes whose layers fit: a
     * table that does not show them (a node that just joined) is asked for
     * again once, and the Forward waits for it. */
    char unfit[320];
    const int fits = s_route_fits(n, f, unfit, sizeof unfit);
    if (fits == 1 && sw_now_ms() - n->table_ms > NODE_TABLE_OLD_MS)
        s_ask_table(n, sw_now_ms()); /* stays fresh for later checks */
    if (fits != 1 && n->table_ms < t_arrive) {
        if (n->n_pending == NODE_PENDING_MAX) {
            s_reply_error(n, reply, SW_ERROR_DEST_BUSY, sid,
                          "%s: %d forwards wait for the relay's peer table already",
                          sw_peer_name(n->peer), NODE_PENDING_MAX);
            return -1;
        }
        node_pending_t *p = &n->pending[n->n_pending++];
        memset(p, 0, sizeof *p);
        sw_wire_msg_move(&p->msg, msg);
        p->t_arrive = t_arrive;
        s_ask_table(n, sw_now_ms());
        return -1;
    }
    if (fits != 1) {
        /* a neighbour gone from a table newer than the Forward left (a stage killed while a
         * prompt's chunks travel): the head retries (recovery), as for a relay's; a route
         * that names what does not fit is a bad request */
        s_reply_error(n, reply, fits < 0 ? SW_ERROR_DEST_GONE : SW_ERROR_BAD_REQUEST, sid, "%s: %s",
                      sw_peer_name(n->peer), unfit);
        return -1;
    }
    return 0;
}

/* This stage's backend and buffers must hold the round. */
static int s_check_fits(node_t *n, const sw_wire_msg_t *msg, const sw_msg_forward_t *f)
{
    const int rows = (int)f->n_rows;
    const int n_draft = (int)f->n_draft;
    const uint64_t sid = f->session_id;
    const char *reply = msg->peer;
    if (f->draft_parents && !sw_model_trees(n->model)) {
        s_reply_error(n, reply, SW_ERROR_BAD_REQUEST, sid,
                      "%s runs on %s, which does not run token trees: start the head with "
                      "--draft-tree 0 (or send DraftParams.tree = 1)",
                      sw_peer_name(n->peer), sw_backend_desc(n->be));
        return -1;
    }
    if (rows > n->rows_cap || (node_is_last(n) && n_draft + 1 > n->logit_cap)) {
        s_reply_error(n, reply, SW_ERROR_BAD_REQUEST, sid,
                      "%s: a forward of %d rows does not fit its buffers", sw_peer_name(n->peer),
                      rows);
        return -1;
    }
    return 0;
}

/* The Forward's session at this stage, opened on its first round; NULL when
 * the Forward was answered with an Error. */
static node_session_t *s_session_of(node_t *n, const sw_wire_msg_t *msg, const sw_msg_forward_t *f)
{
    const uint64_t sid = f->session_id;
    const char *reply = f->reply_to; /* the route's head, which handles failed rounds */
    /* A stage opens a session only on its first round (nothing kept): a later
     * round for a session it does not hold means it restarted and lost it. */
    node_session_t *s = node_session_get(n, sid, NULL, 0, 0, &(const char *){""});
    if (!s && f->kv_keep > 0 && !f->prefix_len) {
        s_reply_error(n, reply, SW_ERROR_UNKNOWN_SESSION, sid,
                      "%s: the round keeps %u positions of a session this stage does not hold "
                      "(stage restarted?)",
                      sw_peer_name(n->peer), f->kv_keep);
        return NULL;
    }
    if (!s) {
        const char *why = "";
        s = node_session_get(n, sid, msg->peer_key[0] ? msg->peer_key : msg->peer, (int)f->n_ctx,
                             (int)(f->start_pos + f->n_rows), &why);
        if (!s) {
            /* closed: the head replays or ends it; "needs more": it never fits this
             * stage, a bad request (retrying cannot help); else full for now: busy */
            const int code = why == NODE_WHY_CLOSED                      ? SW_ERROR_UNKNOWN_SESSION
                             : why == NODE_WHY_CTX || why == NODE_WHY_KV ? SW_ERROR_BAD_REQUEST
                                                                         : SW_ERROR_BUSY;
            s_reply_error(n, reply, code, sid,
                          "%s: %s (%d positions; %d sessions, %.1f of %.1f MiB of KV cache in use)",
                          sw_peer_name(n->peer), why, f->n_ctx ? (int)f->n_ctx : n->o.n_ctx,
                          node_sessions_held(n), (double)n->kv.used / (1 << 20),
                          (double)n->o.kv_bytes / (1 << 20));
            return NULL;
        }
    }
    if (!s->creator[0]) {
        snprintf(s->creator, sizeof s->creator, "%s", msg->peer);
        snprintf(s->owner, sizeof s->owner, "%s", f->route[0]);
        SW_DEBUG("session %016llx opened by %s", (unsigned long long)sid, msg->peer);
    } else if (strcmp(s->creator, msg->peer) != 0) {
        SW_WARN("dropped a forward from %s for session %016llx, which belongs to %s", msg->peer,
                (unsigned long long)sid, s->creator);
        s_reply_error(n, msg->peer, SW_ERROR_UNKNOWN_SESSION, sid,
                      "%s: session belongs to another peer", sw_peer_name(n->peer));
        return NULL;
    }
    return s;
}

/* ---- prefix cache (engine/include/prefix.h) ------------------------------------------------ */

/* The namespace of this stage's prefix blocks for f's session: what its KV
 * depends on besides the tokens, the dtype of its input and the nodes before
 * it on the route (they computed that input). 0, or -1 when it does not fit. */
static int s_prefix_ns(const sw_msg_forward_t *f, char *out, size_t len)
{
    size_t at = (size_t)snprintf(out, len, "dtype %d", (int)f->dtype);
    for (uint32_t i = 0; i < f->hop && at < len; i++)
        at += (size_t)snprintf(out + at, len - at, "|%s", f->route[i]);
    return at < len ? 0 : -1;
}

/* Keeps tokens[0..n) as s's prompt from position at. 0 or -1 (out of memory). */
static int s_prompt_set(node_session_t *s, const uint32_t *tokens, int n, int at)
{
    if (at + n > s->prompt_cap) {
        int cap = s->prompt_cap ? s->prompt_cap : 1024;
        while (cap < at + n)
            cap *= 2;
        int32_t *p = realloc(s->prompt, (size_t)cap * sizeof *p);
        if (!p)
            return -1;
        s->prompt = p;
        s->prompt_cap = cap;
    }
    for (int i = 0; i < n; i++)
        s->prompt[at + i] = (int32_t)tokens[i];
    s->n_prompt = at + n;
    return 0;
}

static void s_prompt_drop(node_session_t *s)
{
    free(s->prompt);
    s->prompt = NULL;
    s->n_prompt = s->prompt_cap = 0;
}

/* A Forward that starts after a prefix (prefix_len): the session's cache
 * takes those positions from this stage's prefix cache, and on the last
 * stage the verifier their tokens. 0, or -1 when answered with an Error
 * (the session is freed; the head then sends the whole prompt). */
static int s_prefix_take(node_t *n, node_session_t *s, const sw_msg_forward_t *f)
{
    const int L = (int)f->prefix_len;
    char ns[SW_PREFIX_NS_LEN + 1], err[256] = "";
    const int32_t *toks =
        (const int32_t *)f->prefix_tokens; // token ids < 2^22 (net/wire_check_round.c)
    const double t0 = sw_now_ms();
    int ok = n->prefix && s_prefix_ns(f, ns, sizeof ns) == 0 && sw_kv_truncate(s->kv, 0) == 0 &&
             L < sw_kv_capacity(s->kv) && sw_prefix_find(n->prefix, ns, toks, L, L) == L &&
             sw_prefix_restore(n->prefix, ns, toks, L, s->kv, err, sizeof err) == 0;
    if (ok && node_is_last(n)) {
        if (!s->ver)
            s->ver = s_verifier(n, f);
        ok = s->ver && sw_verifier_feed(s->ver, 0, toks, L, err, sizeof err) == 0;
    }
    if (ok)
        ok = s_prompt_set(s, f->prefix_tokens, L, 0) == 0;
    if (ok)
        SW_DEBUG("session %016llx: %d prompt positions from the prefix cache in %.1f ms",
                 (unsigned long long)f->session_id, L, sw_now_ms() - t0);
    if (!ok) {
        s_reply_error(n, f->reply_to, SW_ERROR_UNKNOWN_SESSION, f->session_id,
                      "%s: the %d-position prompt prefix is not in its prefix cache%s%s",
                      sw_peer_name(n->peer), L, err[0] ? ": " : "", err);
        node_session_free(n, s);
        return -1;
    }
    return 0;
}

/* After the batch ran f for s: the prompt's tokens are kept while its
 * prefill comes (a Forward that keeps 0 positions, or starts after a
 * prefix, opens it; each chunk that follows it adds its rows), and once the
 * last chunk ran the prompt's blocks go into the prefix cache, within what
 * --kv-mib leaves beside the sessions' caches. */
static void s_prompt_track(node_t *n, node_session_t *s, const sw_msg_forward_t *f)
{
    if (!n->prefix || f->n_draft > 0)
        return;
    const int opens = f->kv_keep == 0 && !f->prefix_len;
    if (!opens && (!s->prompt || (int)f->kv_keep != s->n_prompt)) {
        s_prompt_drop(s); // a decode round: no prefill in progress
        return;
    }
    if ((int)f->n_tokens != (int)f->n_rows ||
        s_prompt_set(s, f->tokens, (int)f->n_tokens, opens ? 0 : s->n_prompt) != 0) {
        s_prompt_drop(s);
        return;
    }
    if (f->prefill_more)
        return;
    char ns[SW_PREFIX_NS_LEN + 1], err[256] = "";
    const size_t cap = n->o.kv_bytes > 0 ? (size_t)n->o.kv_bytes : 0;
    const size_t used = (size_t)n->kv.used;
    const size_t room = cap > used ? cap - used : 1; // 1: no room for a block
    if (s_prefix_ns(f, ns, sizeof ns) == 0 &&
        sw_prefix_store(n->prefix, ns, s->prompt, s->n_prompt, s->kv, cap ? room : 0, err,
                        sizeof err) < 0)
        SW_WARN("prefix cache: %s", err);
    s_prompt_drop(s);
}

/* The round must fit the session's cache (and, on the last stage, its
 * verifier): 0, or -1 when answered with an Error (the session is freed:
 * the head replays it). */
static int s_check_round(node_t *n, node_session_t *s, const sw_msg_forward_t *f)
{
    const int rows = (int)f->n_rows, n_draft = (int)f->n_draft;
    const uint64_t sid = f->session_id;
    const char *reply = f->reply_to;
    if ((int)f->kv_keep > sw_kv_len(s->kv)) {
        s_reply_error(n, reply, SW_ERROR_UNKNOWN_SESSION, sid,
                      "%s: the round keeps %u positions but this stage has %d (stage restarted?)",
                      sw_peer_name(n->peer), f->kv_keep, sw_kv_len(s->kv));
        node_session_free(n, s); /* the head replays the session from its prefill */
        return -1;
    }
    if (f->start_pos + (uint32_t)rows > (uint32_t)sw_kv_capacity(s->kv)) {
        s_reply_error(n, reply, SW_ERROR_BAD_REQUEST, sid,
                      "%s: rows [%u, %u) do not fit the session's %d positions",
                      sw_peer_name(n->peer), f->start_pos, f->start_pos + (uint32_t)rows,
                      sw_kv_capacity(s->kv));
        node_session_free(n, s);
        return -1;
    }
    char err[256];
    if (node_kv_grow(n, s->kv, (int)f->start_pos + rows, sid, err, sizeof err) != 0) {
        /* the session cannot grow here now: it fails alone (busy: memory may free later) */
        s_reply_error(n, reply, SW_ERROR_BUSY, sid, "%s: %s (--kv-mib)", sw_peer_name(n->peer),
                      err);
        node_session_free(n, s);
        return -1;
    }
    if (node_is_last(n)) {
        if (!s->ver && !(s->ver = s_verifier(n, f))) {
            s_reply_error(n, reply, SW_ERROR_BAD_REQUEST, sid, "invalid sampling parameters");
            node_session_free(n, s);
            return -1;
        }
        if (n_draft + 1 > rows || (f->prefill_more && n_draft)) {
            s_reply_error(n, reply, SW_ERROR_BAD_REQUEST, sid, "%d drafts in a %d-row forward",
                          n_draft, rows);
            node_session_free(n, s);
            return -1;
        }
        for (int i = 0; i < n_draft; i++)
            if (f->tokens[rows - n_draft + i] != f->draft_tokens[i]) {
                s_reply_error(n, reply, SW_ERROR_BAD_REQUEST, sid,
                              "draft tokens do not match the last rows' tokens");
                node_session_free(n, s);
                return -1;
            }
    }
    return 0;
}

/* Puts waiting Forward b (its message decoded as f) into the batch: its
 * hidden states unpacked into hidden_in after the batch's rows so far. */
static void s_enqueue(node_t *n, node_fwd_t *b, const sw_msg_forward_t *f, int want_logits)
{
    const int E = n->hp->n_embd;
    const int rows = (int)f->n_rows;
    node_session_t *s = b->s;
    b->row0 = n->batch_rows;
    b->logit0 = n->batch_logits;
    b->n_logits = want_logits;
    size_t plen = 0;
    const void *payload = sw_wire_msg_payload(&b->msg, &plen);
    sw_codec_hidden_unpack(f->dtype, payload, n->hidden_in + (size_t)b->row0 * E, (size_t)rows * E);
    /* Spot checks: what the previous stage sent, as received, folded into the
     * session's running digest (a context that starts again restarts it, as
     * the verifier's logits digest does); passed on in hop_digests. */
    if (f->kv_keep == 0 || f->prefix_len)
        s->in_digest = 0;
    s->in_digest = sw_codec_digest_fold(s->in_digest, f->dtype, payload, plen);
    b->digest = s->in_digest;
    n->batch_rows += rows;
    n->batch_logits += want_logits;
}

static void s_forward(node_t *n, sw_wire_msg_t *msg, double t_arrive)
{
    sw_msg_t d; /* views into msg's header, which stays put when msg is moved */
    if (sw_codec_decode(msg, SW_MSG_FORWARD, &d, NULL, 0) != 0)
        return;
    const sw_msg_forward_t *f = &d.forward;
    const uint64_t sid = f->session_id;
    if (s_check_meant(n, msg, f) != 0 || s_check_route(n, msg, f, t_arrive) != 0 ||
        s_check_fits(n, msg, f) != 0)
        return;
    const char *reply = f->reply_to; /* the route's head, which handles failed rounds */
    node_session_t *s = s_session_of(n, msg, f);
    if (!s)
        return;
    /* Into the queue, behind the session's earlier Forwards; a full queue runs
     * a batch first (its Forwards wait in the relay and the socket meanwhile). */
    size_t plen = 0;
    sw_wire_msg_payload(msg, &plen);
    while (n->n_batch > 0 &&
           (n->n_batch == NODE_MAX_BATCH || n->queue_bytes + plen > NODE_QUEUE_BYTES))
        node_stage_flush(n);
    s = node_session_get(n, sid, NULL, 0, 0, &(const char *){""}); /* the flush may have freed it */
    if (!s) {
        s_reply_error(n, reply, SW_ERROR_UNKNOWN_SESSION, sid,
                      "%s: the session failed in the previous batch", sw_peer_name(n->peer));
        return;
    }
    s->last_used_ms = t_arrive;
    node_fwd_t *b = &n->batch[n->n_batch++];
    memset(b, 0, sizeof *b);
    sw_wire_msg_move(&b->msg, msg);
    b->s = s;
    b->t_arrive = t_arrive;
    b->bytes = plen;
    n->queue_bytes += plen;
}

/* After the batch's compute: passes one session's rows on to the next stage
 * (d: its Forward, decoded; changed into the next hop's). */
static void s_pass_on(node_t *n, node_fwd_t *b, sw_msg_t *d, const sw_msg_timing_t *timing,
                      uint32_t n_timing, sw_dtype_t dtype)
{
    sw_msg_forward_t *out = &d->forward;
    n->via = b->msg.link; // on by the relay the Forward came by (its head's choice)
    const int E = n->hp->n_embd, rows = (int)out->n_rows;
    const uint64_t sid = out->session_id;
    const char *reply = out->reply_to;
    memcpy(out->timing, timing, n_timing * sizeof *timing);
    out->n_timing = n_timing;
    out->hop++;
    out->layer_begin = (uint32_t)sw_model_layer_end(n->model);
    out->dtype = dtype;
    out->payload = sw_codec_hidden_pack(out->dtype, n->hidden_out + (size_t)b->row0 * E,
                                        n->wire_buf, (size_t)rows * E);
    out->payload_len = (size_t)rows * E * sw_wire_dtype_size(out->dtype);
    out->hop_digests[out->n_hop_digests++] = b->digest; // < hop <= SW_WIRE_MAX_ROUTE - 1
    n->stat_passed++;
    if (n->o.test_flip_bit > 0 && n->stat_passed % (uint64_t)n->o.test_flip_bit == 0) {
        /* --test-flip-bit: a dishonest node for the spot checks' tests. The
         * payload is this node's own buffer (hidden_out or wire_buf). */
        unsigned char *p = (unsigned char *)(uintptr_t)out->payload;
        p[0] ^= 1; // the lowest mantissa bit of the first value (f32, f16, bf16 alike)
        SW_WARN("--test-flip-bit: flipped a bit of session %016llx round %llu (forward %llu)",
                (unsigned long long)sid, (unsigned long long)out->round,
                (unsigned long long)n->stat_passed);
    }
    if (sw_peer_send_msg_via(n->peer, n->via, out->route[out->hop], d) != 0)
        s_reply_error(n, reply, SW_ERROR_DEST_GONE, sid, "%s could not pass the round on to %s",
                      sw_peer_name(n->peer), out->route[out->hop]);
}

/* After the batch's compute, on the last stage: verifies one session's round
 * (or records a prefill chunk) and answers its head. */
static void s_verify(node_t *n, node_fwd_t *b, const sw_msg_forward_t *f,
                     const sw_msg_timing_t *timing, uint32_t n_timing)
{
    node_session_t *s = b->s;
    n->via = b->msg.link; // answered by the relay the Forward came by (its head's choice)
    const uint64_t sid = f->session_id;
    const int rows = (int)f->n_rows, n_draft = (int)f->n_draft;
    const char *reply = f->reply_to;
    char err[256] = "";
    int32_t toks[SW_WIRE_MAX_ROWS];
    for (int i = 0; i < rows; i++)
        toks[i] = (int32_t)f->tokens[i];
    if (f->prefill_more) {
        if (sw_verifier_feed(s->ver, (int)f->kv_keep, toks, rows, err, sizeof err) != 0) {
            s_reply_error(n, reply, SW_ERROR_BAD_REQUEST, sid, "%s", err);
            node_session_free(n, s);
            return;
        }
        /* the chunk went through every stage: the head sees the round move (slow is not
         * gone), tells its client and sends the prompt's next pieces (head_sched.c paces
         * them by these) */
        const sw_msg_t ack = {.type = SW_MSG_PREFILL_ACK,
                              .prefill_ack = {.session_id = sid,
                                              .round = f->round,
                                              .done = f->kv_keep + (uint32_t)rows}};
        if (sw_peer_try_send_msg_via(n->peer, n->via, reply, &ack) != 0)
            SW_DEBUG("session %016llx: the prefill ack to %s was not sent", (unsigned long long)sid,
                     reply);
        return;
    }
    sw_draft_q_t q[SW_MAX_DRAFT];
    int have_q = f->draft_probs != NULL && n_draft > 0;
    for (int i = 0; have_q && i < n_draft; i++) {
        q[i].q_tok = f->draft_probs[i];
        q[i].n = 0;
        q[i].ids = NULL;
        q[i].vals = NULL;
        if (f->n_dists == (uint32_t)n_draft) {
            const sw_msg_dist_t *d = &f->dists[i];
            q[i].n = (int32_t)d->n;
            q[i].ids = (const int32_t *)d->tokens;
            q[i].vals = d->probs;
        }
    }
    sw_round_t r;
    int32_t parents[SW_WIRE_MAX_DRAFT], kv_path[SW_WIRE_MAX_DRAFT];
    s_round_of(f, &r, parents, kv_path);
    r.tokens = toks;
    r.q = have_q ? q : NULL;
    sw_verdict_t v;
    if (sw_verifier_run(s->ver, &r, n->logits + (size_t)b->logit0 * n->hp->n_vocab, &v, err,
                        sizeof err) != 0) {
        s_reply_error(n, reply, SW_ERROR_BAD_REQUEST, sid, "%s", err);
        node_session_free(n, s); /* a failed verification leaves nothing worth keeping */
        return;
    }
    uint32_t committed[SW_MAX_DRAFT + 1] = {0};
    for (int i = 0; i < v.n_commit; i++)
        committed[i] = (uint32_t)v.tokens[i];
    sw_msg_t vm = {.type = SW_MSG_VERDICT};
    sw_msg_verdict_t *vd = &vm.verdict;
    vd->session_id = sid;
    vd->round = f->round;
    vd->n_accepted = (uint32_t)(v.n_commit - 1);
    vd->n_tokens = (uint32_t)v.n_commit;
    vd->tokens = committed;
    vd->next_token = committed[v.n_commit - 1];
    vd->logits_digest = v.logits_digest;
    uint32_t path[SW_MAX_DRAFT];
    if (r.parent) { // a tree round: which path was accepted
        for (int j = 0; j + 1 < v.n_commit; j++)
            path[j] = (uint32_t)v.path[j];
        vd->n_path = (uint32_t)(v.n_commit - 1);
        vd->path = path;
    }
    memcpy(vd->timing, timing, n_timing * sizeof *timing);
    vd->n_timing = n_timing;
    for (uint32_t i = 0; i < f->n_hop_digests; i++) // hop - 1 of them (s_check_meant)
        vd->hop_digests[i] = f->hop_digests[i];
    vd->hop_digests[f->n_hop_digests] = b->digest;
    vd->n_hop_digests = f->n_hop_digests + 1;
    if (n->o.test_fake_digest > 0 && ++n->stat_verdicts % (uint64_t)n->o.test_fake_digest == 0)
        vd->hop_digests[f->n_hop_digests] ^= 1; // --test-fake-digest: frames the stage before
    if (sw_peer_send_msg_via(n->peer, n->via, reply, &vm) != 0)
        SW_WARN("session %016llx: could not send the verdict to %s", (unsigned long long)sid,
                reply);
}

/* Picked Forward b (decoded as f) goes into the batch once the checks that
 * depend on its session's cache pass (its earlier Forwards have run by now):
 * 1 when taken, 0 when it waits for the next batch (no room for its rows or
 * logits), -1 when it was answered with an Error and goes. */
static int s_take(node_t *n, node_fwd_t *b, const sw_msg_forward_t *f)
{
    const int rows = (int)f->n_rows;
    const int want_logits = node_is_last(n) && !f->prefill_more ? (int)f->n_draft + 1 : 0;
    if (n->n_batch_run > 0 &&
        (n->batch_rows + rows > n->rows_cap || n->batch_logits + want_logits > n->logit_cap))
        return 0;
    if (f->prefix_len && s_prefix_take(n, b->s, f) != 0)
        return -1;
    if (!b->s || s_check_round(n, b->s, f) != 0)
        return -1;
    sw_round_t r;
    int32_t parents[SW_WIRE_MAX_DRAFT], kv_path[SW_WIRE_MAX_DRAFT];
    s_round_of(f, &r, parents, kv_path);
    char kerr[256] = "";
    if (sw_round_kv(b->s->kv, &r, kerr, sizeof kerr) != 0) {
        /* the previous round's path is not in this cache (restarted?): replay */
        s_reply_error(n, f->reply_to, SW_ERROR_UNKNOWN_SESSION, f->session_id, "%s: %s",
                      sw_peer_name(n->peer), kerr);
        node_session_free(n, b->s);
        return -1;
    }
    s_enqueue(n, b, f, want_logits);
    return 1;
}

/* Removes the queue's entries whose done[i] is set (their messages freed),
 * keeping the others in order. */
static void s_queue_drop(node_t *n, const char *done)
{
    int k = 0;
    for (int i = 0; i < n->n_batch; i++) {
        if (done[i]) {
            n->queue_bytes -= n->batch[i].bytes;
            sw_wire_msg_clear(&n->batch[i].msg);
            continue;
        }
        if (k != i) {
            n->batch[k] = n->batch[i];
            memset(&n->batch[i].msg, 0, sizeof n->batch[i].msg); // moved: owned by entry k
        }
        k++;
    }
    n->n_batch = k;
}

/* The GPU failed for good: the Forwards still waiting (not picked for the batch
 * that failed) get the same Error, so that their heads replay them elsewhere at
 * once instead of waiting for a node that leaves. */
static void s_queue_fail(node_t *n, const char *err)
{
    char done[NODE_MAX_BATCH];
    for (int i = 0; i < n->n_batch; i++) {
        node_fwd_t *b = &n->batch[i];
        sw_msg_t d;
        done[i] = 1;
        if (!b->s || sw_codec_decode(&b->msg, SW_MSG_FORWARD, &d, NULL, 0) != 0)
            continue;
        s_reply_error(n, d.forward.reply_to, SW_ERROR_DEST_GONE, d.forward.session_id,
                      "%s: %s (the node leaves)", sw_peer_name(n->peer), err);
        node_session_free(n, b->s);
    }
    s_queue_drop(n, done);
}

void node_stage_flush(node_t *n)
{
    if (n->n_batch == 0)
        return;
    const int E = n->hp->n_embd;
    const int V = n->hp->n_vocab;
    sw_kv_t *kvs[NODE_MAX_BATCH];
    sw_forward_t fs[NODE_MAX_BATCH];
    node_fwd_t *live[NODE_MAX_BATCH];
    int sel[NODE_MAX_BATCH];
    char done[NODE_MAX_BATCH] = {0};
    /* which waiting Forwards run now, fairly between keys (stage_sched.c) */
    const int n_sel = node_stage_pick(n, sel, done);
    int nl = 0;
    n->batch_rows = n->batch_logits = n->n_batch_run = 0;
    for (int j = 0; j < n_sel; j++) {
        node_fwd_t *b = &n->batch[sel[j]];
        sw_msg_t d;
        if (!b->s || sw_codec_decode(&b->msg, SW_MSG_FORWARD, &d, NULL, 0) != 0) {
            done[sel[j]] = 1; // closed while it waited
            continue;
        }
        const sw_msg_forward_t *f = &d.forward;
        const int took = s_take(n, b, f);
        if (took <= 0) {
            done[sel[j]] = took < 0;
            continue;
        }
        done[sel[j]] = 1;
        n->n_batch_run++;
        sw_round_t r;
        int32_t parents[SW_WIRE_MAX_DRAFT], kv_path[SW_WIRE_MAX_DRAFT];
        s_round_of(f, &r, parents, kv_path);
        sw_forward_t fw = {
            .n = (int)f->n_rows,
            .hidden = n->hidden_in + (size_t)b->row0 * E,
            .out_hidden = n->hidden_out + (size_t)b->row0 * E,
            .logits = n->logits ? n->logits + (size_t)b->logit0 * V : NULL,
            .n_logits = b->n_logits,
            .prompt = f->n_draft == 0,
            /* the prompt's windows from position 0: after a prefix, or a later piece */
            .prompt_cont = f->prefix_len > 0 || node_stage_prefill_cont(b->s, f),
        };
        if (sw_round_parents(&r, 0, fw.n, b->par))
            fw.parent = b->par;
        kvs[nl] = b->s->kv;
        fs[nl] = fw;
        live[nl++] = b;
    }
    char err[256] = "";
    const double t0 = sw_now_ms();
    int rc = nl > 0 ? sw_model_forward_batch(n->model, kvs, fs, nl, err, sizeof err) : 0;
    if ((n->o.test_slow_ms > 0 || n->o.test_slow_x > 0) && nl > 0)
        s_test_hold(n);
    const double t1 = sw_now_ms();
    if (nl > 1)
        SW_DEBUG("batch of %d sessions, %d rows: %.1f ms", nl, n->batch_rows, t1 - t0);
    n->stat_batches += nl > 0;
    n->stat_batched += nl;
    int rows_run = 0;
    for (int i = 0; i < nl; i++)
        rows_run += fs[i].n;
    if (nl > 1 && rows_run > n->stat_shared_rows)
        n->stat_shared_rows = rows_run;
    /* A GPU that failed for good: the heads replay these rounds elsewhere
     * (an error they recover from), and this node leaves. */
    const int dead = rc != 0 && sw_backend_failed(n->be);
    if (rc == 0)
        node_stage_ran(n, live, nl, t1 - t0); // each key's share of the time (stage_sched.c)
    for (int i = 0; i < nl; i++) {
        node_fwd_t *b = live[i];
        sw_msg_t d;
        if (!b->s || sw_codec_decode(&b->msg, SW_MSG_FORWARD, &d, NULL, 0) != 0)
            continue; // freed by an earlier entry's failure
        const sw_msg_forward_t *f = &d.forward;
        if (rc != 0) {
            s_reply_error(n, f->reply_to, dead ? SW_ERROR_DEST_GONE : SW_ERROR_BAD_REQUEST,
                          f->session_id, "%s: %s%s", sw_peer_name(n->peer), err,
                          dead ? " (the node leaves)" : "");
            node_session_free(n, b->s); /* its cache is half written */
            continue;
        }
        b->s->round = f->round;
        s_prompt_track(n, b->s, f);
        const sw_msg_timing_t mine = {
            .name = sw_peer_name(n->peer),
            .compute_us = node_us(t1 - t0),
            .queue_us = node_us(t0 - b->t_arrive),
            .batch_rows =
                (uint32_t)(rows_run < SW_WIRE_MAX_BATCH_ROWS ? rows_run : SW_WIRE_MAX_BATCH_ROWS),
            .batch_rounds = (uint32_t)nl,
        };
        sw_msg_timing_t timing[SW_WIRE_MAX_ROUTE];
        node_session_t *s = b->s;
        /* a chunk of a prefill (its first, one after a prefix, one that more follow, or one
         * that continues it): it may travel narrower (--prefill-dtype); prefill_open and
         * prefill_next move on in node_stage_timing */
        const int prefill = f->n_draft == 0 && (f->kv_keep == 0 || f->prefix_len ||
                                                f->prefill_more || node_stage_prefill_cont(s, f));
        const uint32_t nt = node_stage_timing(s, f, &mine, b->t_arrive, t0, t1, timing);
        if (node_is_last(n))
            s_verify(n, b, f, timing, nt);
        else
            s_pass_on(n, b, &d, timing, nt, prefill ? n->o.prefill_dtype : n->o.dtype);
        if (s->id == f->session_id)
            s->last_end = sw_now_ms(); // done with it (and its sending): stage_timing.c
    }
    s_queue_drop(n, done);
    n->via = -1; // (s_pass_on / s_verify set it)
    n->batch_rows = n->batch_logits = n->n_batch_run = 0;
    if (dead && !n->gpu_failed) { /* node.c's loop says it and leaves */
        n->gpu_failed = 1;
        snprintf(n->gpu_err, sizeof n->gpu_err, "%s", err);
        s_queue_fail(n, err);
    }
}
