/*
 * announce.c - messages addressed to the relay itself ([id]["relay"][header],
 * never sealed): the announce, which puts a peer in the table under a name
 * and a role (what its key may announce: auth.c; a name held by a live peer,
 * or held for another key, is refused; the table keeps room for the nodes of
 * the allow-list that are away), a repeated announce that updates it, and the
 * status query, answered with the peer table.
 */
#include "relay_impl.h"

#include "log.h"
#include "seal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * A repeated announce on sender's connection: it keeps its name and role, and
 * its fields replace the old ones. 0 to acknowledge, or -1 after an error
 * reply.
 */
static int s_reannounce(relay_t *r, const void *id, size_t id_len, relay_peer_t *sender,
                        const sw_msg_announce_t *a)
{
    /* a standby auto node takes the role of the range its head assigned
     * (placement); every other peer keeps the role it joined with */
    const sw_msg_announce_t *was = &sender->ann.a;
    const int placed = sw_wire_standby(was->auto_place, was->layer_begin, was->layer_end) &&
                       a->auto_place && a->role != SW_ROLE_CLIENT;
    if (strcmp(sender->name, a->name) != 0 || (sender->ann.a.role != a->role && !placed)) {
        relay_reply_error(r, id, id_len, SW_ERROR_BAD_REQUEST, NULL,
                          "this connection is already announced as %s (%s)", sender->name,
                          sw_wire_role_name(sender->ann.a.role));
        return -1;
    }
    /* a repeated announce: its fields replace the old ones (a validated
     * announce always fits the copy) */
    const int was_standby = sw_wire_standby(was->auto_place, was->layer_begin, was->layer_end);
    if (sw_codec_announce_copy(&sender->ann, a) != 0) {
        relay_reply_error(r, id, id_len, SW_ERROR_INTERNAL, NULL, "the announce does not fit");
        return -1;
    }
    if (was_standby && !sw_wire_standby(a->auto_place, a->layer_begin, a->layer_end))
        relay_note(r, SW_LOG_INFO, "peer %s placed: %s, layers [%u, %u) of %u", a->name,
                   sw_wire_role_name((int)a->role), a->layer_begin, a->layer_end, a->n_layers);
    return 0;
}

/*
 * Claims the name a->name for a new connection of key fp (client: a client's
 * announce): a peer of that name is replaced when it is gone or is the same
 * client key reconnecting; a name held by a live peer, or held for another
 * key, is refused. 0, or -1 after an error reply.
 */
static int s_claim_name(relay_t *r, const void *id, size_t id_len, const char *fp, int client,
                        const sw_msg_announce_t *a)
{
    relay_peer_t *holder = relay_peer_find_name(r, a->name, strlen(a->name));
    if (holder && client && holder->client && fp[0] && !strcmp(holder->fp, fp)) {
        /* The same client key again: it reconnected before the relay saw its old
         * connection go (a NAT that dropped the mapping, a link that went down). */
        relay_peer_shut(r, holder);
        relay_peer_remove(r, holder, "replaced by a new connection of its key");
        holder = NULL;
    }
    if (holder && relay_peer_alive(r, holder)) {
        if (relay_log_due(&r->refused_announces))
            relay_note(r, SW_LOG_WARN,
                       "relay: key %s may not announce as %s: held by a live connection (%llu "
                       "refused announces so far)",
                       fp[0] ? fp : "(none)", a->name, (unsigned long long)r->refused_announces);
        relay_reply_error(r, id, id_len, SW_ERROR_NAME_TAKEN, NULL,
                          "the name %s is held by a live peer", a->name);
        return -1;
    }
    if (holder)
        relay_peer_remove(r, holder, "replaced by a new connection");
    const int64_t now = relay_now_ms();
    relay_hold_t *hold = relay_hold_find(r, a->name, now);
    if (hold && strcmp(hold->fp, fp) != 0) {
        if (relay_log_due(&r->refused_announces))
            relay_note(r, SW_LOG_WARN,
                       "relay: key %s may not announce as %s: the name is held for the key that "
                       "used it (%llu refused announces so far)",
                       fp[0] ? fp : "(none)", a->name, (unsigned long long)r->refused_announces);
        relay_reply_error(r, id, id_len, SW_ERROR_NAME_TAKEN, NULL,
                          "the name %s is held for the key that used it for %.0f s more (its "
                          "requests may still live at a head; the relay's --name-hold-s)",
                          a->name, (double)(hold->until_ms - now) / 1e3);
        return -1;
    }
    if (hold)
        hold->until_ms = 0; /* its key takes it back */
    return 0;
}

/*
 * Room in the table for a new peer of key user (fingerprint fp): a key holds
 * at most max_conns_per_key peers, clients leave room for the allow-list's
 * nodes that are away, and the table holds SW_WIRE_MAX_PEERS. 0, or -1 after
 * an error reply.
 */
static int s_room(relay_t *r, const void *id, size_t id_len, const char *user, const char *fp,
                  int client, const sw_msg_announce_t *a)
{
    if (r->secure) {
        int conns = 0, nodes = 0;
        for (int i = 0; i < r->n_peers; i++) {
            conns += !strcmp(r->peers[i]->user, user);
            nodes += r->peers[i]->key_bound != 0;
        }
        if (conns >= r->max_conns_per_key) {
            if (relay_log_due(&r->refused_announces))
                relay_note(r, SW_LOG_WARN,
                           "relay: key %s holds %d connections already: refused '%s' (see "
                           "--max-conns-per-key; %llu refused announces so far)",
                           fp, conns, a->name, (unsigned long long)r->refused_announces);
            relay_reply_error(r, id, id_len, SW_ERROR_RELAY_FULL, NULL,
                              "this key holds %d connections to the relay already, its limit "
                              "(the relay's --max-conns-per-key)",
                              conns);
            return -1;
        }
        /* room stays for every node of the allow-list that is away, so that a
         * crowd of clients cannot lock a restarting node out */
        int reserve = r->node_names - nodes;
        if (reserve > SW_WIRE_MAX_PEERS / 2)
            reserve = SW_WIRE_MAX_PEERS / 2;
        if (client && reserve > 0 && r->n_peers + reserve >= SW_WIRE_MAX_PEERS) {
            relay_reply_error(r, id, id_len, SW_ERROR_RELAY_FULL, NULL,
                              "the relay holds %d peers and keeps room for %d node(s) of its "
                              "allow-list: no room for another client now",
                              r->n_peers, reserve);
            return -1;
        }
    }
    if (r->n_peers == SW_WIRE_MAX_PEERS) {
        relay_reply_error(r, id, id_len, SW_ERROR_RELAY_FULL, NULL,
                          "the relay holds %d peers already", SW_WIRE_MAX_PEERS);
        return -1;
    }
    return 0;
}

/* Puts a new peer in the table for announce a on connection id (key user, fingerprint fp,
 * allow-list entry e or NULL). 0, or -1 after an error reply. */
static int s_join(relay_t *r, const void *id, size_t id_len, const char *user, const char *fp,
                  int client, const sw_allow_entry_t *e, const sw_msg_announce_t *a)
{
    relay_peer_t *p = calloc(1, sizeof *p);
    relay_queue_t *q = p ? calloc(1, sizeof *q) : NULL;
    if (!q || sw_codec_announce_copy(&p->ann, a) != 0) {
        free(p);
        free(q);
        relay_reply_error(r, id, id_len, SW_ERROR_INTERNAL, NULL, "out of memory");
        return -1;
    }
    atomic_init(&q->bytes, 0);
    atomic_init(&q->refs, 1);
    p->q = q;
    memcpy(p->id, id, id_len);
    p->id_len = id_len;
    if (user)
        snprintf(p->user, sizeof p->user, "%s", user);
    p->name = p->ann.name;
    snprintf(p->fp, sizeof p->fp, "%s", fp);
    sw_wire_addr(p->source, p->name, p->fp);
    p->joined_ms = p->alive_ms = p->msg_ms = p->refill_ms = p->in_refill_ms = relay_now_ms();
    p->tokens = p->in_tokens = r->rate;
    p->client = client;
    p->key_bound = relay_key_bound(e);
    p->byte_tokens = client && r->secure ? r->client_rate : r->node_rate;
    p->in_bytes = r->node_rate;
    p->fd = -1;
    r->peers[r->n_peers++] = p;
    if (a->role == SW_ROLE_CLIENT)
        relay_note(r, SW_LOG_INFO, "peer %s joined: client (key %s)", a->name,
                   p->fp[0] ? p->fp : "-");
    else
        relay_note(r, SW_LOG_INFO,
                   "peer %s joined: %s%s, layers [%u, %u) of %u, backend '%s', %u sessions (key "
                   "%s)",
                   a->name, sw_wire_role_name((int)a->role),
                   p->key_bound == SW_KEY_BOUND_ROLE ? " (key-bound node, name and role)"
                   : p->key_bound                    ? " (key-bound node)"
                                                     : "",
                   a->layer_begin, a->layer_end, a->n_layers, a->backend, a->max_sessions,
                   p->fp[0] ? p->fp : "-");
    return 0;
}

/* An announce from a connection not announced yet: its name, room in the table, the peer.
 * 0, or -1 after an error reply. */
static int s_new_peer(relay_t *r, const void *id, size_t id_len, const char *user,
                      const sw_allow_entry_t *e, const sw_msg_announce_t *a)
{
    const int client = e ? e->role == SW_ALLOW_CLIENT : a->role == SW_ROLE_CLIENT;
    char fp[SW_WIRE_KEY_FP_LEN + 1] = "";
    if (r->secure && sw_keys_fingerprint(user, fp) != 0) {
        relay_reply_error(r, id, id_len, SW_ERROR_UNAUTHORIZED, NULL, "no key on this connection");
        return -1;
    }
    if (s_claim_name(r, id, id_len, fp, client, a) != 0 ||
        s_room(r, id, id_len, user, fp, client, a) != 0)
        return -1;
    return s_join(r, id, id_len, user, fp, client, e, a);
}

/* An announce on connection id (sender: the peer announced on it, or NULL; user: its key),
 * answered with an AnnounceAck or an Error. */
static void s_announce(relay_t *r, const void *id, size_t id_len, relay_peer_t *sender,
                       const char *user, const sw_msg_announce_t *a)
{
    char kfp[SW_WIRE_KEY_FP_LEN + 1] = "";
    if (user)
        (void)sw_keys_fingerprint(user, kfp);
    if (strcmp(a->name, SW_WIRE_RELAY_NAME) == 0) {
        relay_reply_error(r, id, id_len, SW_ERROR_NAME_TAKEN, NULL, "the name '%s' is reserved",
                          SW_WIRE_RELAY_NAME);
        return;
    }
    const sw_allow_entry_t *e = r->secure ? relay_allowed(r, user) : NULL;
    if (r->secure) { /* role and name must be what the key's allow-list entry permits */
        char why[256];
        if (relay_permit(r, user, a->name, a->role, why, sizeof why) != 0) {
            if (relay_log_due(&r->refused_announces))
                relay_note(
                    r, SW_LOG_WARN,
                    "relay: key %s may not announce as %s (%s): %s (%llu refused announces so "
                    "far)",
                    kfp[0] ? kfp : "?", a->name, sw_wire_role_name(a->role), why,
                    (unsigned long long)r->refused_announces);
            r->unauthorized++;
            relay_reply_error(r, id, id_len, SW_ERROR_UNAUTHORIZED, NULL, "%s", why);
            return;
        }
    }
    if (sender ? s_reannounce(r, id, id_len, sender, a) : s_new_peer(r, id, id_len, user, e, a))
        return;
    const sw_msg_t ack = {
        .type = SW_MSG_ANNOUNCE_ACK,
        .ack = {.name = a->name,
                .heartbeat_ms = (uint32_t)r->heartbeat_ms,
                .max_frame_bytes = SW_WIRE_MAX_FRAME},
    };
    relay_reply(r, id, id_len, &ack);
}

/* A message addressed to the relay itself: [id]["relay"][header]. */
void relay_control(relay_t *r, const void *id, size_t id_len, relay_peer_t *sender,
                   const char *user, zmq_msg_t *hdr, int has_payload)
{
    if (sw_seal_is_sealed(zmq_msg_data(hdr), zmq_msg_size(hdr))) {
        relay_reply_error(r, id, id_len, SW_ERROR_BAD_REQUEST, NULL,
                          "messages to the relay are not sealed");
        return;
    }
    char err[SW_WIRE_ERR_LEN];
    sw_wire_msg_t m = {0};
    int rc = sw_wire_decode_msg(zmq_msg_data(hdr), zmq_msg_size(hdr), has_payload,
                                has_payload ? 1 : 0, &m, err, sizeof err);
    if (rc == SW_WIRE_EVERSION) {
        relay_note(r, SW_LOG_WARN, "relay: refused a peer (key %s): %s", relay_who_key(user), err);
        relay_reply_error(r, id, id_len, SW_ERROR_VERSION_MISMATCH, NULL, "%s", err);
        return;
    }
    sw_msg_t d;
    const sw_msg_type_t type = sw_wire_msg_type(&m);
    if (rc == SW_WIRE_OK && (type == SW_MSG_ANNOUNCE || type == SW_MSG_STATUS_QUERY))
        rc = sw_codec_decode(&m, type, &d, err, sizeof err);
    if (rc) {
        relay_note(r, SW_LOG_WARN, "relay: malformed control message from %s (key %s): %s",
                   sender ? sender->name : "an unannounced connection", relay_who_key(user), err);
        relay_reply_error(r, id, id_len, SW_ERROR_MALFORMED, NULL, "%s", err);
        sw_wire_msg_clear(&m);
        return;
    }
    switch (type) {
    case SW_MSG_ANNOUNCE:
        s_announce(r, id, id_len, sender, user, &d.announce);
        break;
    case SW_MSG_STATUS_QUERY:
        relay_reply_table(r, id, id_len);
        break;
    default:
        relay_reply_error(r, id, id_len, SW_ERROR_BAD_REQUEST, NULL,
                          "the relay answers announce and status_query, not %s",
                          sw_wire_type_name(type));
        break;
    }
    sw_wire_msg_clear(&m);
}
