/*
 * failover.c - keeping a request alive when its head or our link fails:
 * Resume (the head sends again what was lost), re-ask (a head that took us for
 * gone is asked again from the tokens received, a few times), failover (a head
 * of the same model takes over from there), and the watches that find a
 * deadline passed or a head gone.
 */
#include "client_impl.h"

#include <stdio.h>
#include <string.h>

/* r's head ended it as cancelled, which we did not ask for: it took us for
 * gone (the relay dropped us while our link was down). The same head is asked
 * for the rest, from the tokens received (GenerateRequest.resume_tokens), at
 * most CLIENT_REASK_MAX times. 0 when it was asked, -1 when r cannot be resent. */
int client_reask(sw_client_t *c, client_req_t *r, double now)
{
    const uint32_t have = (uint32_t)r->stats.n_generated;
    const int left_ms = (int)(r->deadline - CLIENT_GRACE_MS - now);
    if (!r->q.n_predict || have >= (uint32_t)r->q.n_predict || r->stopped ||
        r->n_reasks >= CLIENT_REASK_MAX || left_ms < 1000)
        return -1;
    if (client_send_generate(c, r->head, &r->q, r->id, left_ms, r->toks, have) != 0)
        return -1;
    SW_WARN("client: request %s: the head '%s' ended it after %u tokens, taking this client for "
            "gone (its link to the relay was down?); asked it again from there",
            r->id, r->head, have);
    r->n_reasks++;
    r->reask_at = now;
    r->last_msg = now;
    r->resume_at = 0;
    return 0;
}

/*
 * Failover: r's head left; a trusted head in t of the same name (restarted)
 * or serving the same model takes r over from the tokens received
 * (GenerateRequest.resume_tokens), so that the output goes on where it
 * stopped (greedy: exactly the uninterrupted output). 0 when one did, -1
 * when none is there (or r cannot be resent).
 */
static int s_failover(sw_client_t *c, client_req_t *r, const sw_client_table_t *t, double now)
{
    const uint32_t have = (uint32_t)r->stats.n_generated;
    if (!r->q.n_predict || have >= (uint32_t)r->q.n_predict || r->stopped)
        return -1;
    const sw_client_peer_t *to = NULL;
    for (int k = 0; k < t->n_peers && !to; k++)
        if (r->leaving != 1 && sw_client_trusted_head(t, &t->peers[k]) &&
            !strcmp(t->peers[k].name, r->head) &&
            (!r->model[0] || !strcmp(t->peers[k].model, r->model)))
            to = &t->peers[k];
    for (int k = 0; k < t->n_peers && !to && r->model[0]; k++)
        if (sw_client_trusted_head(t, &t->peers[k]) && !strcmp(t->peers[k].model, r->model) &&
            (r->leaving != 1 || strcmp(t->peers[k].name, r->head) != 0))
            to = &t->peers[k];
    const int left_ms = (int)(r->deadline - CLIENT_GRACE_MS - now);
    if (!to || left_ms < 1000)
        return -1;
    if (client_send_generate(c, to->name, &r->q, r->id, left_ms, r->toks, have) != 0)
        return -1;
    SW_WARN("client: request %s: the head '%s' left after %u tokens; '%s' takes over from there, "
            "%.1f s after the head was first missed",
            r->id, r->head, have, to->name, (now - r->gone_at) / 1e3);
    snprintf(r->head, sizeof r->head, "%s", to->name);
    r->head_missing = 0;
    r->gone_at = 0;
    r->leaving = 0;
    r->last_msg = now;
    r->resume_at = 0;
    r->stats.n_failovers++;
    return 0;
}

/*
 * The watches: deadlines, and heads that went quiet. 0 with *ev filled for
 * the first request that fails one, 1 when none does.
 */
int client_watch(sw_client_t *c, sw_client_event_t *ev)
{
    const double now = client_now_ms();
    int quiet = 0;
    for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT; i++) {
        client_req_t *r = &c->reqs[i];
        if (!r->id[0])
            continue;
        if (now > r->deadline) {
            client_end_error(c, r, ev, SW_CLIENT_ETIMEOUT, 0,
                             "no answer from the head '%s' within %.0f s", r->head,
                             (r->deadline - r->t_submit - CLIENT_GRACE_MS) / 1e3);
            return 0;
        }
        if (now - r->last_msg > CLIENT_QUIET_MS)
            quiet++;
    }
    if (!quiet)
        return 1;
    sw_client_table_t t;
    if (sw_client_status(c, &t, CLIENT_STATUS_MS, NULL, 0) != 0)
        return 1; /* the relay is slow or restarting: the deadline still holds */
    int failed = -1;
    for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT; i++) {
        client_req_t *r = &c->reqs[i];
        if (!r->id[0] || now - r->last_msg <= CLIENT_QUIET_MS)
            continue;
        int present = 0;
        for (int k = 0; k < t.n_peers && !present; k++)
            present = !strcmp(t.peers[k].name, r->head);
        if (!present && r->leaving == 1)
            r->leaving = 2; /* gone: a head of its name from now on is a restart */
        if ((!present || r->leaving) && !r->gone_at)
            r->gone_at = now; /* the first look that missed it */
        if (present && !r->leaving) {
            r->head_missing = 0;
            r->gone_at = 0;
            r->last_msg = now;
            if (now > r->quiet_until) /* not while it said it is busy (Progress.next_ms) */
                r->resume_at = now;   /* a lost last chunk is sent again */
        } else if (r->leaving || ++r->head_missing >= 2) {
            /* twice in a row, so that a relay restart (the head announces again
             * within a second or so) is not taken for a dead head: another head
             * serving its model (or the same one restarted) takes it over. A
             * head that said it is leaving needs no second look. */
            if (s_failover(c, r, &t, now) == 0)
                continue;
            if (now - r->gone_at < CLIENT_FAILOVER_MS && r->q.n_predict)
                r->last_msg = now - CLIENT_QUIET_MS / 2; /* look again soon */
            else if (failed < 0)
                failed = i;
        } else {
            r->last_msg = now - CLIENT_QUIET_MS / 2; /* check again soon */
        }
    }
    sw_client_table_clear(&t);
    if (failed < 0)
        return 1;
    client_req_t *r = &c->reqs[failed];
    char why[80] = "";
    if (r->q.n_predict)
        snprintf(why, sizeof why, " and no head serving its model came within %d s",
                 CLIENT_FAILOVER_MS / 1000);
    client_end_error(c, r, ev, SW_CLIENT_EHEADGONE, 0, "the head '%s' left during the request%s",
                     r->head, why);
    return 0;
}

/* Asks the heads for what may have been lost: once announced again after a
 * reconnect to the relay (it may have restarted with chunks in flight; we may
 * have a new name, which the head then streams to) for every request, else
 * for requests whose resume_at has come. A Resume that cannot go out now (no
 * connection yet) is tried again half a second later. */
void client_resume(sw_client_t *c, double now)
{
    (void)sw_peer_connects(c->peer); /* reads the connection's events */
    const int announces = sw_peer_announces(c->peer);
    const int reconnected = announces != c->announces;
    c->announces = announces;
    for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT; i++) {
        client_req_t *r = &c->reqs[i];
        if (!r->id[0] || !(reconnected || (r->resume_at && now >= r->resume_at)))
            continue;
        const sw_msg_t rs = {
            .type = SW_MSG_RESUME,
            .resume = {.request_id = r->id, .from_index = (uint32_t)r->stats.n_generated},
        };
        if (sw_peer_try_send_msg(c->peer, r->head, &rs) != 0) {
            r->resume_at = now + 500;
            continue;
        }
        r->resume_at = 0;
        r->resumed_at = now;
        r->stats.n_resumes++;
    }
}
