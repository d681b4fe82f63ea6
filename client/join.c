/*
 * join.c - the cluster as the relay's peer table shows it (client.h): the
 * table, which heads are trusted (key-bound, and role-bound where any head is,
 * when keys are used), choosing the head of a model, and waiting until its
 * pipeline is whole.
 */
#include "client_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- peer table ------------------------------------------------------------------------- */

void sw_client_table_clear(sw_client_table_t *t)
{
    free(t->peers);
    memset(t, 0, sizeof *t);
}

static void s_remember(sw_client_t *c, const sw_client_table_t *t);
static int s_is_head(const sw_client_peer_t *p);

int sw_client_relays(sw_client_t *c)
{
    return sw_peer_links(c->peer);
}

int sw_client_relay_info(sw_client_t *c, int i, sw_client_relay_t *out)
{
    sw_peer_link_info_t li;
    memset(out, 0, sizeof *out);
    if (sw_peer_link_info(c->peer, i, &li) != 0)
        return -1;
    snprintf(out->endpoint, sizeof out->endpoint, "%s", li.endpoint);
    out->live = li.live;
    out->current = li.current;
    out->rtt_us = li.rtt_us;
    return 0;
}

int sw_client_status(sw_client_t *c, sw_client_table_t *out, int timeout_ms, char *err,
                     size_t err_len)
{
    return sw_client_status_of(c, -1, out, timeout_ms, err, err_len);
}

int sw_client_status_of(sw_client_t *c, int relay, sw_client_table_t *out, int timeout_ms,
                        char *err, size_t err_len)
{
    memset(out, 0, sizeof *out);
    sw_wire_msg_t t = {0};
    if (sw_peer_status_of(c->peer, relay, &t, timeout_ms) != 0)
        return client_fail(SW_CLIENT_ECONNECT, err, err_len,
                           "the relay did not answer a status query within %d ms", timeout_ms);
    sw_msg_t d;
    if (sw_codec_decode(&t, SW_MSG_PEER_TABLE, &d, NULL, 0) != 0) {
        sw_wire_msg_clear(&t);
        return client_fail(SW_CLIENT_ECONNECT, err, err_len,
                           "the relay's peer table is unreadable");
    }
    const sw_msg_table_t *pt = &d.table;
    out->peers = calloc(pt->n_peers ? pt->n_peers : 1, sizeof *out->peers);
    if (!out->peers) {
        sw_wire_msg_clear(&t);
        return client_fail(SW_CLIENT_ENOMEM, err, err_len, "out of memory");
    }
    for (uint32_t i = 0; i < pt->n_peers; i++) {
        sw_msg_peer_t info;
        if (sw_codec_peer_at(pt, i, &info) != 0)
            continue;
        const sw_msg_peer_t *pi = &info;
        const sw_msg_announce_t *a = &info.announce;
        sw_client_peer_t *p = &out->peers[out->n_peers++];
        snprintf(p->name, sizeof p->name, "%s", a->name);
        p->role = sw_wire_role_name(a->role);
        p->is_node = a->role >= SW_ROLE_HEAD && a->role <= SW_ROLE_FULL;
        p->key_bound = p->is_node && pi->key_bound;
        p->role_bound = p->is_node && pi->key_bound == SW_KEY_BOUND_ROLE;
        p->layer_begin = a->layer_begin;
        p->layer_end = a->layer_end;
        p->n_layers = a->n_layers;
        client_clean(p->model, sizeof p->model, a->model_fingerprint);
        client_clean(p->model_name, sizeof p->model_name, a->model_name);
        client_clean(p->backend, sizeof p->backend, a->backend);
        p->max_sessions = a->max_sessions;
        p->heartbeat_age_ms = pi->heartbeat_age_ms;
        p->idle_ms = pi->idle_ms;
        p->msgs_in = pi->msgs_in;
        p->msgs_out = pi->msgs_out;
        p->auto_place = a->auto_place;
        p->standby = sw_wire_standby(a->auto_place, a->layer_begin, a->layer_end);
        p->mem_mib = a->mem_mib;
        p->us_layer_1 = a->us_layer_1;
        p->us_layer_k = a->us_layer_k;
        p->probe_rows = a->probe_rows;
        p->us_out_1 = a->us_out_1;
        p->us_out_k = a->us_out_k;
        p->rtt_us = a->rtt_us;
        p->kv_kib_layer = a->kv_kib_layer;
        p->n_ctx = a->n_ctx;
        p->kv_mib = a->kv_mib;
        p->kv_full = a->kv_full;
        p->kv_type = a->kv_type == 1 ? "q8_0" : "f16";
        client_clean(p->direct, sizeof p->direct, a->direct);
        p->relay_rtt_us = a->relay_rtt_us;
        p->n_hops = (int)(a->n_direct_hops <= SW_DIRECT_MAX_LINKS ? a->n_direct_hops : 0);
        for (int k = 0; k < p->n_hops; k++) {
            client_clean(p->hops[k].peer, sizeof p->hops[k].peer, a->direct_hops[k].peer);
            p->hops[k].rtt_us = a->direct_hops[k].rtt_us;
        }
    }
    out->need_key = c->secure;
    for (int i = 0; i < out->n_peers && c->secure; i++)
        out->role_heads += out->peers[i].role_bound && s_is_head(&out->peers[i]);
    out->uptime_ms = pt->uptime_ms;
    out->forwarded = pt->msgs_forwarded;
    out->dropped = pt->msgs_dropped;
    sw_wire_msg_clear(&t);
    s_remember(c, out);
    return 0;
}

static int s_is_head(const sw_client_peer_t *p)
{
    return !strcmp(p->role, "head") || !strcmp(p->role, "full");
}

int sw_client_peer_serves(const sw_client_peer_t *p, const char *model)
{
    if (!s_is_head(p))
        return 0;
    if (!model || !model[0])
        return 1;
    return !strcmp(p->model_name, model) ||
           (strlen(model) >= 8 && !strncmp(p->model, model, strlen(model)));
}

/* 1 when p may be sent requests: a head, key-bound where keys are used, and bound to the
 * head role when any head is (then a node key bound to a name only that announces a head,
 * a second head of the model, is not one to choose or fail over to). */
static int s_trusted_head(const sw_client_table_t *t, const sw_client_peer_t *p)
{
    if (!s_is_head(p))
        return 0;
    if (!t->need_key)
        return 1;
    return p->key_bound && (p->role_bound || t->role_heads == 0);
}

int sw_client_trusted_head(const sw_client_table_t *t, const sw_client_peer_t *p)
{
    return s_trusted_head(t, p);
}

/* The head sw_client_find_head chooses, from a table: 0 with its index in *at,
 * or SW_CLIENT_ENOHEAD after a line in err. */
static int s_pick_head(const sw_client_table_t *t, const char *want, const char *model, int *at,
                       char *err, size_t err_len)
{
    int found = -1, n_found = 0, other_model = 0, unbound = 0, unroled = 0;
    char names[160] = "";
    for (int i = 0; i < t->n_peers; i++) {
        const sw_client_peer_t *p = &t->peers[i];
        if (!s_is_head(p) || (want && strcmp(want, p->name) != 0))
            continue;
        if (!s_trusted_head(t, p)) {
            unbound++;
            unroled += p->key_bound;
            continue;
        }
        if (!sw_client_peer_serves(p, model)) {
            other_model++;
            continue;
        }
        size_t used = strlen(names);
        if (n_found < 4 && used < sizeof names - 1)
            snprintf(names + used, sizeof names - used, "%s%s", n_found ? ", " : "", p->name);
        n_found++;
        found = i;
    }
    *at = n_found == 1 ? found : n_found > 1 ? -2 : -1; /* -2: ambiguous, waiting cannot help */
    if (n_found == 1)
        return 0;
    if (n_found > 1)
        return client_fail(
            SW_CLIENT_ENOHEAD, err, err_len,
            "%d heads serve %s%s (%s%s): name the one to use (shardwire run --head NAME; over "
            "the HTTP API the request's \"shardwire\": {\"head\": NAME})",
            n_found, model && model[0] ? "the model " : "requests", model && model[0] ? model : "",
            names, n_found > 4 ? ", ..." : "");
    if (want && unroled)
        return client_fail(
            SW_CLIENT_ENOHEAD, err, err_len,
            "the head '%s' is bound to its name but not to the head role in the relay's "
            "allow-list, while %d other head(s) are ('KEY head NAME'): refusing to send "
            "it requests",
            want, t->role_heads);
    if (want && unbound)
        return client_fail(SW_CLIENT_ENOHEAD, err, err_len,
                           "the head '%s' is not bound to its name by a node key in the relay's "
                           "allow-list ('KEY head %s'): refusing to send it requests",
                           want, want);
    if (want && other_model)
        return client_fail(SW_CLIENT_ENOHEAD, err, err_len,
                           "the head '%s' serves another model than %s", want, model);
    if (want)
        return client_fail(
            SW_CLIENT_ENOHEAD, err, err_len,
            "no head node named '%s' is connected to the relay (shardwire status lists "
            "the peers)",
            want);
    if (other_model)
        return client_fail(SW_CLIENT_ENOHEAD, err, err_len,
                           "no head connected to the relay serves the model %s", model);
    return client_fail(SW_CLIENT_ENOHEAD, err, err_len,
                       "no %shead node (layers starting at 0) is connected to the relay: start one "
                       "with shardwire-node --layers 0:N (shardwire status lists the peers)",
                       t->need_key ? "key-bound " : "");
}

/*
 * 1 when stages of the head's model cover its layers after the head's range
 * to the end, or when waiting cannot help (a peer of another model or an
 * overlapping range sits where the next stage should: the head refuses the
 * request with the exact reason). Else 0 and what is missing in why.
 */
static int s_pipeline_whole(const sw_client_table_t *t, const sw_client_peer_t *h, char *why,
                            size_t why_len)
{
    for (uint32_t at = h->layer_end; at < h->n_layers;) {
        const sw_client_peer_t *next = NULL;
        for (int i = 0; i < t->n_peers && !next; i++) {
            const sw_client_peer_t *p = &t->peers[i];
            if (p->is_node && !s_is_head(p) && p->layer_begin == at && p->layer_end > at &&
                p->n_layers == h->n_layers && !strcmp(p->model, h->model) &&
                (p->key_bound || !t->need_key))
                next = p;
        }
        if (!next) {
            for (int i = 0; i < t->n_peers; i++) {
                const sw_client_peer_t *p = &t->peers[i];
                if (p != h && p->is_node && p->layer_begin <= at && p->layer_end > at)
                    return 1;
            }
            client_fail(0, why, why_len,
                        "gap in the pipeline: no node serving layer %u of %u is connected", at,
                        h->n_layers);
            return 0;
        }
        at = next->layer_end;
    }
    return 1;
}

/* Remembers the trusted heads of table t and their models (for a failover). */
static void s_remember(sw_client_t *c, const sw_client_table_t *t)
{
    c->n_heads = 0;
    for (int i = 0; i < t->n_peers && c->n_heads < CLIENT_HEADS_KNOWN; i++)
        if (s_trusted_head(t, &t->peers[i])) {
            snprintf(c->heads[c->n_heads].name, sizeof c->heads[0].name, "%s", t->peers[i].name);
            snprintf(c->heads[c->n_heads].model, sizeof c->heads[0].model, "%s", t->peers[i].model);
            c->n_heads++;
        }
}

int sw_client_find_head(sw_client_t *c, const char *want, const char *model,
                        char out[SW_CLIENT_NAME_LEN], char *err, size_t err_len)
{
    sw_client_table_t t;
    int rc = sw_client_status(c, &t, CLIENT_STATUS_MS, err, err_len), at = -1;
    if (rc == 0)
        rc = s_pick_head(&t, want, model, &at, err, err_len);
    if (rc == 0)
        snprintf(out, SW_CLIENT_NAME_LEN, "%s", t.peers[at].name);
    sw_client_table_clear(&t);
    return rc;
}

int sw_client_pick_head(const sw_client_table_t *t, const char *want, const char *model,
                        char out[SW_CLIENT_NAME_LEN], char *err, size_t err_len)
{
    int at = -1, rc = s_pick_head(t, want, model, &at, err, err_len);
    if (rc == 0)
        snprintf(out, SW_CLIENT_NAME_LEN, "%s", t->peers[at].name);
    return rc;
}

int sw_client_wait_head(sw_client_t *c, const char *want, const char *model, int timeout_ms,
                        volatile sig_atomic_t *stop, char out[SW_CLIENT_NAME_LEN], char *err,
                        size_t err_len)
{
    const double deadline = timeout_ms < 0 ? -1 : client_now_ms() + timeout_ms;
    for (int attempt = 1;; attempt++) {
        sw_client_table_t t;
        char why[SW_WIRE_MAX_ERROR_TEXT];
        int rc = sw_client_status(c, &t, CLIENT_STATUS_MS, err, err_len), at = -1;
        if (rc != 0)
            return rc;
        rc = s_pick_head(&t, want, model, &at, why, sizeof why);
        int whole = rc == 0 && s_pipeline_whole(&t, &t.peers[at], why, sizeof why);
        if (at >= 0)
            snprintf(out, SW_CLIENT_NAME_LEN, "%s", t.peers[at].name);
        sw_client_table_clear(&t);
        if (whole)
            return 0;
        if (at == -2)
            return client_fail(SW_CLIENT_ENOHEAD, err, err_len, "%s", why);
        double left = deadline < 0 ? 2000 : deadline - client_now_ms();
        double wait = attempt < 4 ? 250 << attempt : 2000;
        if (wait > left)
            wait = left;
        if (stop && *stop)
            return client_fail(SW_CLIENT_ECANCELLED, err, err_len, "interrupted");
        if (wait <= 0 && at >= 0)
            return 0; /* the head says what is missing */
        if (wait <= 0)
            return client_fail(SW_CLIENT_ENOHEAD, err, err_len, "%s", why);
        SW_WARN("client: waiting for the pipeline: %s (attempt %d); asking again in %.1f s", why,
                attempt, wait / 1e3);
        for (double until = client_now_ms() + wait; client_now_ms() < until && !(stop && *stop);)
            nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
    }
}

/* The direct link's round trip between a and b as either announces it; -1 when neither lists
 * the other (the relay carries the hop). */
static long s_direct_rtt(const sw_client_peer_t *a, const sw_client_peer_t *b)
{
    long rtt = -1;
    for (int k = 0; k < a->n_hops; k++)
        if (!strcmp(a->hops[k].peer, b->name))
            rtt = a->hops[k].rtt_us;
    for (int k = 0; k < b->n_hops && rtt <= 0; k++)
        if (!strcmp(b->hops[k].peer, a->name))
            rtt = b->hops[k].rtt_us;
    return rtt;
}

static void s_hop(const sw_client_peer_t *a, const sw_client_peer_t *b, sw_client_hop_t *h)
{
    snprintf(h->from, sizeof h->from, "%s", a->name);
    snprintf(h->to, sizeof h->to, "%s", b->name);
    snprintf(h->model, sizeof h->model, "%s", a->model);
    const long rtt = s_direct_rtt(a, b);
    h->direct = rtt >= 0;
    h->rtt_us = h->direct                            ? (rtt > 0 ? rtt : -1)
                : a->relay_rtt_us && b->relay_rtt_us ? (long)a->relay_rtt_us + b->relay_rtt_us
                                                     : -1;
}

int sw_client_hops(const sw_client_table_t *t, sw_client_hop_t *out, int max)
{
    int n = 0;
    for (int i = 0; i < t->n_peers; i++) {
        const sw_client_peer_t *head = &t->peers[i], *cur = head;
        if (!s_is_head(head) || head->standby || head->layer_begin != 0)
            continue;
        for (int steps = 0; cur->layer_end < cur->n_layers && steps < SW_WIRE_MAX_ROUTE; steps++) {
            const sw_client_peer_t *next = NULL;
            for (int k = 0; k < t->n_peers && !next; k++) {
                const sw_client_peer_t *q = &t->peers[k];
                if (q->is_node && !q->standby && q->layer_begin == cur->layer_end &&
                    q->layer_end > q->layer_begin && !strcmp(q->model, head->model))
                    next = q;
            }
            if (!next)
                break;
            if (n < max)
                s_hop(cur, next, &out[n]);
            n += n < max;
            cur = next;
        }
        if (cur != head && cur->layer_end == cur->n_layers && n < max)
            s_hop(cur, head, &out[n++]); /* the verdicts go back to the head */
    }
    return n;
}
