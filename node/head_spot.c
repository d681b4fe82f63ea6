/*
 * head_spot.c - spot checks: the head sends a sampled share of sessions
 * (--spot-check P) also down one or two shadow routes of other nodes that
 * serve the same layer ranges, and compares, round by round, the digests of
 * the hidden states every stage of every copy sent (docs/security.md).
 *
 * The engine is deterministic and batch-invariant, so honest copies agree to
 * the bit. A session is checked whole, from its prefill: a checker can only
 * recompute round r if it holds the session's cache for the positions
 * before, and a shadow fed every round holds exactly that. Each stage folds
 * the payload it received into a running digest (restarted by kv_keep 0, as
 * a replay restarts everything) and adds it to the Forward's hop_digests; the
 * tail adds its own and returns the list in its Verdict, with its logits
 * digest as the tail's own entry. Entry 0 the head checks against what it
 * sent itself.
 *
 * Who lied: at the first stage k where the copies disagree (their inputs,
 * entry k - 1, agreed, in this round and every earlier one), a value that
 * two copies computed on two distinct nodes, neither of them the accused
 * (distinct names: the allow-list binds each key to one name), outvotes the
 * third copy's: that node is convicted (reported, avoided for new routes
 * where another serves its layers). Anything less never convicts (issue 35,
 * finding 5): two copies, or a node that seems to have given two answers to
 * one input (entry k is reported by the stage after it, which may lie about
 * what it received), make the nodes disputed: the stage-k nodes, and where
 * one node served every copy, the stages after it that differ between the
 * copies. New routes prefer a third node for the main route while one
 * serves. An accusation repeated by the same accusers (the other nodes of
 * the compared copies from stage k on) does not restart a node's avoid
 * timer: only new accusers or a higher rank do. Copies that diverged are dropped (their caches
 * differ from then on); a main route that held a convicted node is replayed
 * through another route (recover.c), so the client still gets honest tokens
 * for what follows.
 *
 * Nothing here waits: shadow verdicts are compared when they come; the main
 * route commits as it always does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "head_impl.h"
#include "log.h"

int head_spot_rank(const node_head_t *h, const char *name, double now)
{
    const int at = sw_expiry_find(h->spot_bad, HEAD_SPOT_BAD_MAX, name, now);
    return at < 0 ? HEAD_SPOT_OK : h->spot_bad[at].rank;
}

/* FNV-1a of a name: s_accusers' terms. */
static uint64_t s_name_hash(const char *name)
{
    uint64_t x = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        x = (x ^ *p) * 1099511628211ull;
    return x;
}

/* Who accuses `who` at stage k of the compared copies (nc of them): every
 * node of their routes from stage k on other than who, each counted once, as
 * one order-free 64-bit value. */
static uint64_t s_accusers(const head_spot_t *sp, const int *copies, int nc, int k, int S,
                           const char *who)
{
    const char *seen[HEAD_SPOT_COPIES * SW_WIRE_MAX_ROUTE];
    int n_seen = 0;
    uint64_t by = 0;
    for (int i = 0; i < nc; i++)
        for (int j = k; j < S; j++) {
            const char *name = sp->route[copies[i]].names[j];
            int dup = !strcmp(name, who);
            for (int q = 0; q < n_seen && !dup; q++)
                dup = !strcmp(seen[q], name);
            if (dup)
                continue;
            seen[n_seen++] = name;
            by += s_name_hash(name);
        }
    return by;
}

/* Records name at rank (a conviction is never lowered to a dispute), accused
 * by `by` (s_accusers): its hour starts again only when the rank rises or
 * the accusers differ from the last ones'. */
static void s_mark(node_head_t *h, const char *name, int rank, double now, uint64_t by)
{
    const int at = sw_expiry_slot_ranked(h->spot_bad, HEAD_SPOT_BAD_MAX, name, rank, now);
    if (at < 0) { // every entry a live conviction: the dispute is not remembered
        SW_WARN("spot check: node '%s' disputed but not marked: the head remembers %d "
                "convictions already (HEAD_SPOT_BAD_MAX)",
                name, HEAD_SPOT_BAD_MAX);
        return;
    }
    sw_expiry_t *e = &h->spot_bad[at];
    if (strcmp(e->name, name) != 0 || e->until <= now)
        e->rank = HEAD_SPOT_OK;
    else if (rank <= e->rank && by == h->spot_why[at].by)
        return; // the same accusers again: the timer runs on
    snprintf(e->name, sizeof e->name, "%s", name);
    e->until = now + HEAD_SPOT_BAD_MS;
    if (rank > e->rank)
        e->rank = rank;
    h->spot_why[at].by = by;
}

/* A SessionClose for copy c of s to every stage of its route. */
static void s_close_copy(node_t *n, head_spot_t *sp, int c, const char *why)
{
    if (!sp->opened[c])
        return;
    const sw_msg_t sc = {.type = SW_MSG_SESSION_CLOSE,
                         .session_close = {.session_id = sp->id[c], .reason = why}};
    for (int i = 1; i < sp->route[c].n; i++)
        if (sw_peer_try_send_msg(n->peer, sp->route[c].names[i], &sc) != 0)
            SW_DEBUG("could not close a shadow session on %s", sp->route[c].names[i]);
    sp->opened[c] = 0;
}

static void s_drop(node_t *n, head_sess_t *s, int c, const char *why)
{
    head_spot_t *sp = s->spot;
    if (!sp->live[c])
        return;
    SW_INFO("spot check: session %016llx: shadow %d dropped (%s)", (unsigned long long)s->id, c,
            why);
    s_close_copy(n, sp, c, why);
    sp->live[c] = 0;
}

void head_spot_close(node_t *n, head_sess_t *s, const char *why)
{
    if (!s->spot)
        return;
    SW_INFO("spot check: session %016llx: %llu round(s) compared with %d shadow route(s)",
            (unsigned long long)s->id, (unsigned long long)s->spot->compared,
            s->spot->n_copies - 1);
    for (int c = 1; c < s->spot->n_copies; c++)
        s_close_copy(n, s->spot, c, why);
    free(s->spot);
    s->spot = NULL;
}

/* The announce of name in pt, or NULL. */
static const sw_msg_announce_t *s_announce(const sw_msg_table_t *pt, const char *name,
                                           sw_msg_peer_t *buf)
{
    return sw_codec_peer_find(pt, name, buf) ? &buf->announce : NULL;
}

/* The nodes other than main_name that can stand in for it: key-bound where
 * keys bind, the same model, exactly its layer range, not convicted. Up to
 * max of them into out, drawn uniformly at random (reservoir sampling with
 * the head's own randomness) where more can: no node can count on being a
 * shadow or a referee, say by its name, as colluders would like to; the
 * count. */
static int s_alternatives(node_t *n, const sw_msg_table_t *pt, const sw_msg_announce_t *m,
                          char out[][SW_WIRE_NAME_MAX + 1], int max, double now)
{
    const int need_key = n->o.sec && !n->o.sec->insecure;
    int k = 0;
    uint32_t seen = 0;
    for (uint32_t i = 0; i < pt->n_peers; i++) {
        sw_msg_peer_t info;
        if (sw_codec_peer_at(pt, i, &info) != 0)
            continue;
        const sw_msg_announce_t *a = &info.announce;
        if ((a->role != SW_ROLE_MIDDLE && a->role != SW_ROLE_TAIL) || !strcmp(a->name, m->name) ||
            a->layer_begin != m->layer_begin || a->layer_end != m->layer_end ||
            a->n_layers != m->n_layers || strcmp(a->model_fingerprint, n->fingerprint) != 0 ||
            !sw_codec_peer_routable(&info, need_key) ||
            head_spot_rank(n->head, a->name, now) == HEAD_SPOT_CONVICTED)
            continue;
        seen++;
        const uint32_t at = k < max ? (uint32_t)k++ : randombytes_uniform(seen);
        if (at < (uint32_t)max)
            snprintf(out[at], sizeof out[0], "%s", a->name);
    }
    return k;
}

void head_spot_plan(node_t *n, head_sess_t *s, const sw_msg_table_t *pt)
{
    node_head_t *h = n->head;
    const double now = sw_now_ms();
    head_spot_close(n, s, "the session took another route");
    if (!s->spot_draw) {
        /* An independent draw per session, unpredictable to the nodes: a
         * checked session's Forwards look like any other's. */
        const uint32_t scale = 1000000;
        s->spot_draw =
            n->o.spot_share > 0 && randombytes_uniform(scale) < (uint32_t)(n->o.spot_share * scale)
                ? 2
                : 1;
        if (n->o.spot_share >= 1)
            s->spot_draw = 2;
    }
    if (s->spot_draw != 2 || s->route.n < 2 || !pt)
        return;
    /* Per stage of the route: the nodes that can stand in for it. */
    char alt[SW_WIRE_MAX_ROUTE][HEAD_SPOT_COPIES - 1][SW_WIRE_NAME_MAX + 1];
    int n_alt[SW_WIRE_MAX_ROUTE] = {0}, most = 0;
    for (int k = 1; k < s->route.n; k++) {
        sw_msg_peer_t buf;
        const sw_msg_announce_t *m = s_announce(pt, s->route.names[k], &buf);
        if (!m)
            return; // the table does not show the route: the next plan will
        n_alt[k] = s_alternatives(n, pt, m, alt[k], HEAD_SPOT_COPIES - 1, now);
        if (n_alt[k] > most)
            most = n_alt[k];
    }
    if (most == 0) {
        SW_DEBUG("spot check: session %016llx not checked: no other node serves a range of its "
                 "route",
                 (unsigned long long)s->id);
        return;
    }
    head_spot_t *sp = calloc(1, sizeof *sp);
    if (!sp) {
        SW_WARN("spot check: session %016llx not checked: out of memory",
                (unsigned long long)s->id);
        return;
    }
    /* One shadow, and a second (a referee: three copies outvote a liar) where
     * some stage has two stand-ins. A stage without one is the same node in
     * every copy. */
    sp->n_copies = 1 + most;
    sp->id[0] = s->id;
    sp->route[0] = s->route;
    sp->live[0] = 1;
    char names[512] = "";
    for (int c = 1; c < sp->n_copies; c++) {
        randombytes_buf(&sp->id[c], sizeof sp->id[c]);
        sp->id[c] |= 1;
        sp->route[c] = s->route;
        for (int k = 1; k < s->route.n; k++)
            if (n_alt[k] > 0)
                snprintf(sp->route[c].names[k], sizeof sp->route[c].names[k], "%s",
                         alt[k][(c - 1) < n_alt[k] ? c - 1 : n_alt[k] - 1]);
        sp->live[c] = 1;
        for (int k = 1; k < s->route.n; k++) {
            const size_t at = strlen(names);
            snprintf(names + at, sizeof names - at, "%s%s", k == 1 ? (c > 1 ? " | " : "") : " > ",
                     sp->route[c].names[k]);
        }
    }
    s->spot = sp;
    h->spot_sessions++;
    char main_names[256] = "";
    for (int k = 1; k < s->route.n; k++) {
        const size_t at = strlen(main_names);
        snprintf(main_names + at, sizeof main_names - at, "%s%s", k == 1 ? "" : " > ",
                 s->route.names[k]);
    }
    SW_INFO("spot check: session %016llx (route %s) checked against %d shadow route(s): %s",
            (unsigned long long)s->id, main_names, sp->n_copies - 1, names);
}

void head_spot_sent(node_t *n, head_sess_t *s, const sw_msg_t *msg, int last)
{
    head_spot_t *sp = s->spot;
    if (!sp)
        return;
    const sw_msg_forward_t *f = &msg->forward;
    if (f->kv_keep == 0 || f->prefix_len)
        sp->sent_digest = 0;
    sp->sent_digest = sw_codec_digest_fold(sp->sent_digest, f->dtype, f->payload, f->payload_len);
    if (last) {
        head_spot_round_t *e = &sp->ring[f->round % HEAD_SPOT_RING];
        /* A shadow whose verdict for the round this entry held never came in
         * HEAD_SPOT_RING rounds: a later comparison would blame whatever
         * stage the unseen difference surfaced at, so it is dropped. */
        for (int c = 1; e->round && !e->done && (e->have & 1u) && c < sp->n_copies; c++)
            if (sp->live[c] && !(e->have & 1u << c))
                s_drop(n, s, c, "it fell " SW_STR(HEAD_SPOT_RING) " rounds behind");
        memset(e, 0, sizeof *e);
        e->round = f->round;
        e->head_sent = sp->sent_digest;
        e->has_sent = 1;
    }
    sw_msg_t copy = *msg;
    for (int c = 1; c < sp->n_copies; c++) {
        if (!sp->live[c])
            continue;
        copy.forward.session_id = sp->id[c];
        for (int i = 0; i < sp->route[c].n; i++)
            copy.forward.route[i] = sp->route[c].names[i];
        sp->opened[c] = 1;
        if (sw_peer_send_msg(n->peer, sp->route[c].names[1], &copy) != 0)
            s_drop(n, s, c, "could not send it a round");
    }
}

/* The copy of s whose session id is id, or -1. */
static int s_copy_of(const head_spot_t *sp, uint64_t id)
{
    for (int c = 0; c < sp->n_copies; c++)
        if (sp->id[c] == id)
            return c;
    return -1;
}

/* The main route held a convicted node: head_advance replays the session
 * through a route without it (recover.c) before its next send. */
static void s_replay(node_t *n, head_sess_t *s)
{
    /* The stages after the liar hold the session as its Forwards created it
     * (only the creator, or the head, may drive it), and a stage refuses a
     * closed session's id for good: the head closes it on the whole route
     * and replays under a new id. */
    s->spot->opened[0] = 1;
    s_close_copy(n, s->spot, 0, "a spot check convicted a stage of the route");
    const uint64_t old = s->id;
    head_new_id(s);
    s->spot->id[0] = s->id;
    s->opened = 0; /* no stage holds the new id: the route change closes nothing more */
    SW_INFO("spot check: session %016llx is replayed as %016llx through a route without the "
            "convicted node",
            (unsigned long long)old, (unsigned long long)s->id);
    s->spot_fail = 1;
    n->head->busy = 1;
}

/* One node served every compared copy at stage k and they disagree: the
 * difference may come from what a later stage reported it received, so the
 * later stages that differ between the copies are disputed too. */
static void s_dispute_reporters(node_head_t *h, const head_sess_t *s, const head_spot_round_t *e,
                                const int *copies, int nc, int k, double now)
{
    const head_spot_t *sp = s->spot;
    const int S = s->route.n;
    for (int j = k + 1; j < S; j++)
        for (int i = 0; i < nc; i++) {
            const char *who = sp->route[copies[i]].names[j];
            int same = 1;
            for (int q = 0; q < nc; q++)
                same &= !strcmp(sp->route[copies[q]].names[j], who);
            if (same)
                continue;
            SW_WARN("spot check: stage %d of round %llu of session %016llx: '%s' reported one "
                    "of the copies that disagree: disputed",
                    j, (unsigned long long)e->round, (unsigned long long)s->id, who);
            s_mark(h, who, HEAD_SPOT_DISPUTED, now, s_accusers(sp, copies, nc, k, S, who));
        }
}

/* Compares the copies of round entry e once every live copy reported it. */
static void s_compare(node_t *n, head_sess_t *s, head_spot_round_t *e, double now)
{
    node_head_t *h = n->head;
    head_spot_t *sp = s->spot;
    int copies[HEAD_SPOT_COPIES], nc = 0;
    for (int c = 0; c < sp->n_copies; c++) {
        if (!sp->live[c])
            continue;
        if (!(e->have & (1u << c)))
            return; // wait for it
        copies[nc++] = c;
    }
    if (nc < 2 || !e->has_sent)
        return;
    const int S = s->route.n;
    e->done = 1;
    h->spot_rounds++;
    sp->compared++;
    char what[256];
    /* Entry 0 is what the head sent: a copy whose first stage says otherwise lies about it. */
    for (int i = 0; i < nc; i++) {
        const int c = copies[i];
        if (e->n_digests == S && e->d[c][0] == e->head_sent)
            continue;
        const char *who = sp->route[c].names[1];
        snprintf(what, sizeof what, "misreported what the head sent it in round %llu",
                 (unsigned long long)e->round);
        SW_WARN("spot check: node '%s' %s (session %016llx): convicted; new routes avoid it", who,
                what, (unsigned long long)s->id);
        s_mark(h, who, HEAD_SPOT_CONVICTED, now, 0); // the head's own evidence
        h->spot_mismatches++;
        if (c == 0)
            s_replay(n, s);
        else
            s_drop(n, s, c, "its first stage was convicted");
        return;
    }
    /* The first stage whose copies disagree. */
    int k = 1;
    for (; k < S; k++) {
        int same = 1;
        for (int i = 1; i < nc; i++)
            same &= e->d[copies[i]][k] == e->d[copies[0]][k];
        if (!same)
            break;
    }
    if (k == S)
        return; // all agree
    h->spot_mismatches++;
    char nodes[3 * (SW_WIRE_NAME_MAX + 4)] = "";
    for (int i = 0; i < nc; i++) {
        const size_t at = strlen(nodes);
        snprintf(nodes + at, sizeof nodes - at, "%s'%s'", i ? " vs " : "",
                 sp->route[copies[i]].names[k]);
    }
    /* A value that copies on at least two distinct nodes computed (the majority), if any. */
    int major = -1;
    for (int i = 0; i < nc && major < 0; i++)
        for (int j = i + 1; j < nc; j++)
            if (e->d[copies[i]][k] == e->d[copies[j]][k] &&
                strcmp(sp->route[copies[i]].names[k], sp->route[copies[j]].names[k]) != 0) {
                major = copies[i];
                break;
            }
    int main_bad = 0, one_node = 1;
    for (int i = 1; i < nc; i++)
        one_node &= !strcmp(sp->route[copies[i]].names[k], sp->route[copies[0]].names[k]);
    for (int i = 0; i < nc; i++) {
        const int c = copies[i];
        const char *who = sp->route[c].names[k];
        if (major >= 0 && e->d[c][k] == e->d[major][k])
            continue;
        /* convicted only by two distinct nodes other than itself that agree */
        int witnesses = 0;
        for (int j = 0; j < nc && major >= 0; j++) {
            const char *wn = sp->route[copies[j]].names[k];
            int dup = !strcmp(wn, who) || e->d[copies[j]][k] != e->d[major][k];
            for (int q = 0; q < j && !dup; q++)
                dup = e->d[copies[q]][k] == e->d[major][k] &&
                      !strcmp(sp->route[copies[q]].names[k], wn);
            witnesses += !dup;
        }
        const uint64_t by = s_accusers(sp, copies, nc, k, S, who);
        if (witnesses >= 2) {
            SW_WARN("spot check: node '%s' computed stage %d of round %llu of session %016llx "
                    "differently from the copies of two other nodes, which agree (%s): "
                    "convicted; new routes avoid it",
                    who, k, (unsigned long long)e->round, (unsigned long long)s->id, nodes);
            s_mark(h, who, HEAD_SPOT_CONVICTED, now, by);
        } else {
            SW_WARN("spot check: stage %d of round %llu of session %016llx: %s disagree and no "
                    "third node settles it: '%s' is disputed (routes prefer another node)",
                    k, (unsigned long long)e->round, (unsigned long long)s->id, nodes, who);
            s_mark(h, who, HEAD_SPOT_DISPUTED, now, by);
        }
        if (c == 0)
            main_bad = 1;
        else
            s_drop(n, s, c, "its copy diverged");
    }
    if (one_node && major < 0)
        s_dispute_reporters(h, s, e, copies, nc, k, now);
    if (major < 0) {
        for (int c = 1; c < sp->n_copies; c++)
            s_drop(n, s, c, "the copies diverged");
    } else if (main_bad) {
        /* The client's copy went through a lying node: replay the session
         * through a route without it (the committed tokens stand: they are
         * the drafts the verifier took, checked again by the replay). */
        s_replay(n, s);
    }
}

/* Stores copy c's digests of a round and compares when the round is complete. */
static void s_record(node_t *n, head_sess_t *s, int c, const sw_msg_verdict_t *vd, double now)
{
    head_spot_t *sp = s->spot;
    head_spot_round_t *e = &sp->ring[vd->round % HEAD_SPOT_RING];
    if (e->round != vd->round)
        return; // a round this head no longer waits for (or never sent: ignored)
    const int S = s->route.n;
    if (vd->n_hop_digests + 1 != (uint32_t)S || (e->have & 1u << c))
        return; // not this route's shape (a verdict of a replaced route), or a second verdict
    e->n_digests = S;
    for (uint32_t k = 0; k < vd->n_hop_digests; k++)
        e->d[c][k] = vd->hop_digests[k];
    /* The tail's own output: the logits digest (hop_digests' last entry is its input). */
    e->d[c][S - 1] = vd->logits_digest;
    e->have |= 1u << c;
    s_compare(n, s, e, now);
}

void head_spot_main(node_t *n, head_sess_t *s, const sw_msg_verdict_t *vd, double now)
{
    if (s->spot)
        s_record(n, s, 0, vd, now);
}

int head_spot_verdict(node_t *n, const char *peer, const sw_msg_verdict_t *vd, double now)
{
    node_head_t *h = n->head;
    for (int i = 0; i < h->n_slots; i++) {
        head_sess_t *s = &h->sess[i];
        if (s->state != HEAD_RUN || !s->spot)
            continue;
        const int c = s_copy_of(s->spot, vd->session_id);
        if (c <= 0)
            continue;
        const head_route_t *r = &s->spot->route[c];
        if (s->spot->live[c] && !strcmp(peer, r->names[r->n - 1]))
            s_record(n, s, c, vd, now);
        return 1;
    }
    return 0;
}

int head_spot_error(node_t *n, uint64_t session_id, const char *dest, const char *from)
{
    node_head_t *h = n->head;
    int hit = 0;
    for (int i = 0; i < h->n_slots; i++) {
        head_sess_t *s = &h->sess[i];
        if (s->state != HEAD_RUN || !s->spot)
            continue;
        for (int c = 1; c < s->spot->n_copies; c++) {
            const head_route_t *r = &s->spot->route[c];
            const char *who = dest ? dest : from;
            int on = 0;
            for (int k = 1; k < r->n; k++)
                on |= !strcmp(r->names[k], who);
            if (dest ? on : s->spot->id[c] == session_id) {
                if (!on) // an Error about a shadow from a peer not on its route: ignored
                    return 1;
                s_drop(n, s, c, dest ? "a stage of it left" : "a stage of it answered an error");
                hit = !dest;
            }
        }
    }
    return hit;
}

_Static_assert(HEAD_SPOT_BAD_MAX <= SW_WIRE_MAX_SPOT_NODES,
               "a SpotReport holds every reported node");
_Static_assert(HEAD_SPOT_BAD_MS / 1000 <= SW_WIRE_MAX_SPOT_AVOID_S, "SpotNode.avoid_s bound");

void node_head_spot_query(node_t *n, sw_wire_msg_t *msg)
{
    node_head_t *h = n->head;
    if (!h)
        return; // a stage answers nothing (the relay's table says who the heads are)
    if (!head_answer_take(n, msg, "a spot query"))
        return;
    const double now = sw_now_ms();
    sw_msg_t r = {.type = SW_MSG_SPOT_REPORT};
    sw_msg_spot_report_t *o = &r.spot;
    o->share = (float)n->o.spot_share;
    o->sessions_checked = h->spot_sessions;
    o->rounds_compared = h->spot_rounds;
    o->mismatches = h->spot_mismatches;
    for (int i = 0; i < HEAD_SPOT_BAD_MAX; i++) {
        if (h->spot_bad[i].until <= now)
            continue;
        sw_msg_spot_node_t *nd = &o->nodes[o->n_nodes++];
        nd->name = h->spot_bad[i].name;
        nd->convicted = h->spot_bad[i].rank == HEAD_SPOT_CONVICTED;
        const double left = (h->spot_bad[i].until - now) / 1e3;
        nd->avoid_s = left >= SW_WIRE_MAX_SPOT_AVOID_S ? SW_WIRE_MAX_SPOT_AVOID_S : (uint32_t)left;
    }
    char addr[SW_WIRE_ADDR_MAX + 1];
    if (sw_peer_try_send_msg(n->peer, head_reply_addr(msg, addr), &r) != 0)
        SW_DEBUG("could not answer a spot query from %s", msg->peer);
}
