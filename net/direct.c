/*
 * direct.c - direct paths between nodes (peer.h, "Direct paths"; docs/protocol.md section 4):
 * a node's listener (a ROUTER, CurveZMQ server with the node's own key, every dialling key
 * checked by the ZAP handler against the allow-list: node keys only, each under the name the
 * list binds it to) and the direct links (dialled: a DEALER to a neighbour's listener with its
 * announced key pinned; accepted: a routing id on our ROUTER). Frames are the relay's with the
 * sender's own name in the name frame (wire.h, sw_wire_send_direct); the receiver takes the
 * sender from the connection's authentication, never from the frame alone.
 *
 * Bounds: SW_DIRECT_MAX_LINKS links, SW_DIRECT_MAX_CONNS connections on the listener (more are
 * shut at once), SW_DIRECT_HWM messages queued per connection and direction, frames of at most
 * SW_WIRE_MAX_FRAME, a handshake within the dial time; every message is checked as one from
 * the relay is (wire_check.c), and sealed end to end as through the relay.
 */
#include "peer_impl.h"

#include "log.h"
#include "zap.h"

#include <errno.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define DIRECT_BACKSTOP_MS 600000 /* libzmq's own heartbeat timeout (the kernel's says first) */

/* One line for each of the first 8 refusals, then at 16, 32, 64, ...: a stream of refused dials
 * cannot flood the log. */
static void s_refused(sw_peer_t *p, const char *where, const char *why)
{
    sw_direct_t *d = &p->direct;
    d->refused++;
    if (sw_log_due(d->refused, 8))
        SW_WARN("direct: %s: refused a direct link from %s: %s (%llu refused so far)",
                p->announce.name, where, why, (unsigned long long)d->refused);
}

static sw_dlink_t *s_find(sw_direct_t *d, const char *name, int dialled)
{
    for (int i = 0; i < SW_DIRECT_MAX_LINKS; i++)
        if (d->links[i].name[0] && d->links[i].dialled == dialled &&
            !strcmp(d->links[i].name, name))
            return &d->links[i];
    return NULL;
}

static sw_dlink_t *s_free_slot(sw_direct_t *d)
{
    for (int i = 0; i < SW_DIRECT_MAX_LINKS; i++)
        if (!d->links[i].name[0])
            return &d->links[i];
    return NULL;
}

/* The link messages to name go by now: a live one, dialled first; NULL = none. */
static sw_dlink_t *s_live(sw_direct_t *d, const char *name)
{
    sw_dlink_t *l = s_find(d, name, 1);
    if (l && l->up)
        return l;
    l = s_find(d, name, 0);
    return l && l->up ? l : NULL;
}

static void s_close_sock(sw_dlink_t *l)
{
    if (l->sock) {
        zmq_socket_monitor(l->sock, NULL, 0);
        zmq_close(l->sock);
        l->sock = NULL;
    }
    if (l->mon) {
        zmq_close(l->mon);
        l->mon = NULL;
    }
    l->fd = -1;
}

/* l is no longer live: counted as a loss when it was (what was in flight on it may be gone). */
static void s_down(sw_peer_t *p, sw_dlink_t *l, const char *why)
{
    if (l->up) {
        SW_WARN("direct: link to %s lost (%s): its messages go by the relay", l->name, why);
        p->direct.losses++;
        p->direct.changed = 1;
    }
    l->up = 0;
    l->used = 0;
    l->fd = -1;
}

static void s_up(sw_peer_t *p, sw_dlink_t *l)
{
    l->up = 1;
    l->used = 0;
    l->rtt_us = link_fd_rtt_us(l->fd);
    l->check_at_ms = link_now_ms() + p->silent_limit_ms / SW_PEER_SILENT_IVLS;
    p->direct.changed = 1;
    SW_INFO("direct: link to %s (%s) up, round trip %.1f ms", l->name,
            l->dialled ? l->ep : "it dialled us", l->rtt_us < 0 ? 0.0 : l->rtt_us / 1e3);
}

/* Common socket options of both sides: bounded queues and frames, heartbeats, no linger. */
static int s_sockopts(sw_peer_t *p, void *sock)
{
    int64_t maxmsg = SW_WIRE_MAX_FRAME;
    if (link_setopt_int(sock, ZMQ_LINGER, 0, "ZMQ_LINGER") ||
        link_setopt_int(sock, ZMQ_SNDHWM, SW_DIRECT_HWM, "ZMQ_SNDHWM") ||
        link_setopt_int(sock, ZMQ_RCVHWM, SW_DIRECT_HWM, "ZMQ_RCVHWM") ||
        link_setopt_int(sock, ZMQ_HEARTBEAT_IVL, p->hb_ms, "ZMQ_HEARTBEAT_IVL") ||
        link_setopt_int(sock, ZMQ_HEARTBEAT_TIMEOUT, DIRECT_BACKSTOP_MS, "ZMQ_HEARTBEAT_TIMEOUT") ||
        link_setopt_int(sock, ZMQ_HANDSHAKE_IVL, p->direct.dial_ms, "ZMQ_HANDSHAKE_IVL") ||
        link_setopt_int(sock, ZMQ_TCP_KEEPALIVE, 1, "ZMQ_TCP_KEEPALIVE"))
        return -1;
    if (zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0) {
        SW_ERR("direct: ZMQ_MAXMSGSIZE: %s", zmq_strerror(errno));
        return -1;
    }
    return 0;
}

/* A monitor on sock at a fresh inproc address into *mon. 0, or -1 logged. */
static int s_monitor(sw_peer_t *p, void *sock, void *tag, void **mon)
{
    static unsigned seq; /* a slot's socket may be opened again: a new address each time */
    char ep[96];
    snprintf(ep, sizeof ep, "inproc://sw-direct-monitor-%p-%u", tag, ++seq);
    const int events = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                       ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CLOSED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                       ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    *mon = NULL;
    if (zmq_socket_monitor(sock, ep, events) != 0 || !(*mon = zmq_socket(p->ctx, ZMQ_PAIR)) ||
        zmq_connect(*mon, ep) != 0) {
        SW_ERR("direct: socket monitor: %s", zmq_strerror(errno));
        return -1;
    }
    return link_setopt_int(*mon, ZMQ_LINGER, 0, "ZMQ_LINGER");
}

/* Loads --allow into d. 0, or -1 logged. */
static int s_allow(sw_direct_t *d, const char *path)
{
    char err[512];
    sw_allow_entry_t *list = NULL;
    int n = 0;
    if (sw_allow_load(path, &list, &n, err, sizeof err) != 0) {
        SW_ERR("direct: --allow: %s", err);
        return -1;
    }
    d->allow = list;
    d->n_allow = n;
    int nodes = 0;
    for (int i = 0; i < n; i++)
        nodes += list[i].role == SW_ALLOW_NODE;
    SW_INFO("direct: allow-list %s: %d node keys may dial this node's listener", path, nodes);
    return 0;
}

/* The listener: the ZAP handler first (no connection is ever taken without it), then the
 * ROUTER. 0, or -1 logged. */
static int s_listen(sw_peer_t *p, const sw_peer_opts_t *o, const sw_sec_t *sec)
{
    sw_direct_t *d = &p->direct;
    char err[256];
    if (sec && !sec->insecure) {
        if (!o->allow_file) {
            SW_ERR("direct: --listen needs --allow FILE (the relay's allow-list, allow.txt in "
                   "the cluster folder): the listener admits the node keys it lists");
            return -1;
        }
        if (s_allow(d, o->allow_file) != 0)
            return -1;
        if (!(d->zap = sw_zap_bind(p->ctx, err, sizeof err))) {
            SW_ERR("direct: %s", err);
            return -1;
        }
    } else if (!sw_endpoint_is_loopback(o->listen)) {
        SW_ERR("direct: --insecure-loopback only listens on loopback (" SW_LOOPBACK_FORMS
               "); %s is not one: use --key and --allow",
               o->listen);
        return -1;
    }
    d->router = zmq_socket(p->ctx, ZMQ_ROUTER);
    int one = 1;
    if (!d->router || s_sockopts(p, d->router) ||
        link_setopt_int(d->router, ZMQ_ROUTER_MANDATORY, 1, "ZMQ_ROUTER_MANDATORY"))
        return -1;
    if (d->zap && (zmq_setsockopt(d->router, ZMQ_CURVE_SERVER, &one, sizeof one) ||
                   zmq_setsockopt(d->router, ZMQ_CURVE_SECRETKEY, sec->sec, SW_KEY_Z85_LEN + 1) ||
                   zmq_setsockopt(d->router, ZMQ_ZAP_DOMAIN, "shardwire", 9))) {
        SW_ERR("direct: CURVE setup: %s", zmq_strerror(errno));
        return -1;
    }
    if (s_monitor(p, d->router, d, &d->rmon) != 0)
        return -1;
    if (zmq_bind(d->router, o->listen) != 0) {
        SW_ERR("direct: cannot listen on %s: %s (a port another process holds, or an address "
               "that is not this machine's)",
               o->listen, zmq_strerror(errno));
        return -1;
    }
    SW_INFO("direct: listening on %s, announced as %s", o->listen, d->public_ep);
    return 0;
}

int direct_open(sw_peer_t *p, const sw_peer_opts_t *o)
{
    sw_direct_t *d = &p->direct;
    for (int i = 0; i < SW_DIRECT_MAX_CONNS; i++)
        d->conn_fd[i] = -1;
    for (int i = 0; i < SW_DIRECT_MAX_LINKS; i++)
        d->links[i].fd = -1;
    d->dial_ms = o->direct_dial_ms > 0 ? o->direct_dial_ms : SW_DIRECT_DIAL_MS;
    const sw_sec_t *sec = o->sec;
    if (sec && !sec->insecure) {
        memcpy(d->pub, sec->pub, sizeof d->pub);
        memcpy(d->sec, sec->sec, sizeof d->sec);
    }
    if (!o->listen)
        return 0;
    const char *pub_ep = o->listen_public ? o->listen_public : o->listen;
    if (!sw_wire_direct_ok(pub_ep) || !strncmp(pub_ep, "tcp://0.0.0.0:", 14) ||
        !strncmp(pub_ep, "tcp://[::]:", 11)) {
        SW_ERR("direct: %s cannot be announced: give the address the other nodes reach this "
               "one at (--listen-public tcp://HOST:PORT; HOST a name or an address, not '*')",
               pub_ep);
        return -1;
    }
    snprintf(d->public_ep, sizeof d->public_ep, "%s", pub_ep);
    if (s_listen(p, o, sec) != 0)
        return -1;
    direct_announce_fields(p);
    return 0;
}

void direct_close(sw_peer_t *p)
{
    sw_direct_t *d = &p->direct;
    for (int i = 0; i < SW_DIRECT_MAX_LINKS; i++)
        s_close_sock(&d->links[i]);
    if (d->router) {
        zmq_socket_monitor(d->router, NULL, 0);
        zmq_close(d->router);
        d->router = NULL;
    }
    if (d->rmon) {
        zmq_close(d->rmon);
        d->rmon = NULL;
    }
    if (d->zap) {
        zmq_close(d->zap);
        d->zap = NULL;
    }
    free(d->allow);
    d->allow = NULL;
    sodium_memzero(d->sec, sizeof d->sec);
}

void direct_announce_fields(sw_peer_t *p)
{
    sw_direct_t *d = &p->direct;
    sw_announce_copy_t *c = &p->announce;
    snprintf(c->direct, sizeof c->direct, "%s", d->router ? d->public_ep : "");
    snprintf(c->direct_key, sizeof c->direct_key, "%s", d->router ? d->pub : "");
    c->a.direct = c->direct;
    c->a.direct_key = c->direct_key;
    uint32_t n = 0;
    for (int i = 0; i < SW_DIRECT_MAX_LINKS; i++) {
        sw_dlink_t *l = &d->links[i];
        int dup = 0; /* a node linked both ways counts once */
        for (uint32_t k = 0; k < n; k++)
            dup |= !strcmp(c->hop_peer[k], l->name);
        if (!l->name[0] || !l->up || dup)
            continue;
        snprintf(c->hop_peer[n], sizeof c->hop_peer[n], "%s", l->name);
        const long rtt = link_fd_rtt_us(l->fd);
        if (rtt > 0) /* the kernel's current smoothed round trip */
            l->rtt_us = rtt;
        c->a.direct_hops[n].peer = c->hop_peer[n];
        c->a.direct_hops[n].rtt_us = l->rtt_us < 0                            ? 0
                                     : l->rtt_us > (long)SW_WIRE_MAX_PROBE_US ? SW_WIRE_MAX_PROBE_US
                                                                              : (uint32_t)l->rtt_us;
        n++;
    }
    c->a.n_direct_hops = n;
}

/* ---- dialling ---------------------------------------------------------------------------- */

/* Opens l's DEALER and dials its listener. 0, or -1 logged (l then waits to retry). */
static int s_dial(sw_peer_t *p, sw_dlink_t *l)
{
    sw_direct_t *d = &p->direct;
    l->sock = zmq_socket(p->ctx, ZMQ_DEALER);
    if (!l->sock || s_sockopts(p, l->sock) ||
        link_setopt_int(l->sock, ZMQ_IMMEDIATE, 1, "ZMQ_IMMEDIATE") ||
        link_setopt_int(l->sock, ZMQ_RECONNECT_IVL, 200, "ZMQ_RECONNECT_IVL") ||
        link_setopt_int(l->sock, ZMQ_RECONNECT_IVL_MAX, 2000, "ZMQ_RECONNECT_IVL_MAX"))
        goto err;
    if (d->pub[0] && (zmq_setsockopt(l->sock, ZMQ_CURVE_SERVERKEY, l->key, SW_KEY_Z85_LEN + 1) ||
                      zmq_setsockopt(l->sock, ZMQ_CURVE_PUBLICKEY, d->pub, SW_KEY_Z85_LEN + 1) ||
                      zmq_setsockopt(l->sock, ZMQ_CURVE_SECRETKEY, d->sec, SW_KEY_Z85_LEN + 1)))
        goto err;
    if (s_monitor(p, l->sock, l, &l->mon) != 0 || zmq_connect(l->sock, l->ep) != 0)
        goto err;
    l->dial_at_ms = link_now_ms();
    l->retry_at_ms = -1;
    return 0;
err:
    SW_WARN("direct: cannot dial %s at %s: %s; staying on the relay", l->name, l->ep,
            zmq_strerror(errno));
    s_close_sock(l);
    l->retry_at_ms = link_now_ms() + SW_DIRECT_RETRY_MS;
    return -1;
}

int sw_peer_direct_dial(sw_peer_t *p, const char *name, const char *ep, const char *key_z85,
                        const char *key_fp)
{
    sw_direct_t *d = &p->direct;
    const char *key = key_z85 ? key_z85 : "";
    if (!name || !sw_wire_name_ok(name, strnlen(name, SW_WIRE_NAME_MAX + 1)) ||
        !strcmp(name, p->announce.name) || !ep || !sw_wire_direct_ok(ep))
        return -1;
    sw_dlink_t *l = s_find(d, name, 1);
    if (l && !strcmp(l->ep, ep) && !strcmp(l->key, key))
        return 0; /* already dialled (or waiting to retry) */
    /* the key it announced must be the one the relay authenticated for its name */
    char fp[SW_KEY_FP_LEN + 1] = "";
    if (d->pub[0] &&
        (!key[0] || sw_keys_fingerprint(key, fp) != 0 || !key_fp || strcmp(fp, key_fp) != 0)) {
        if (!l) /* said once per name: a table comes every few seconds */
            SW_WARN("direct: %s announces a listener whose key is not the one the relay knows "
                    "for it: not dialling it",
                    name);
        return -1;
    }
    if (!d->pub[0] && !sw_endpoint_is_loopback(ep))
        return -1; /* without keys: loopback only, as with the relay */
    if (l) {       /* it moved, or its key changed: dial anew */
        s_down(p, l, "its listener changed");
        s_close_sock(l);
    } else if (!(l = s_free_slot(d))) {
        return -1;
    }
    memset(l, 0, sizeof *l);
    l->fd = -1;
    l->rtt_us = -1;
    l->dialled = 1;
    snprintf(l->name, sizeof l->name, "%s", name);
    snprintf(l->ep, sizeof l->ep, "%s", ep);
    snprintf(l->key, sizeof l->key, "%s", key);
    snprintf(l->fp, sizeof l->fp, "%s", fp);
    SW_INFO("direct: dialling %s at %s", name, ep);
    return s_dial(p, l);
}

/* A dialled link's handshake is done: it says who we are (a hello) and is live. */
static void s_dialled_up(sw_peer_t *p, sw_dlink_t *l)
{
    const char *self = p->announce.name;
    if (zmq_send(l->sock, self, strlen(self), ZMQ_DONTWAIT) < 0) {
        SW_WARN("direct: hello to %s: %s", l->name, zmq_strerror(errno));
        return;
    }
    s_up(p, l);
}

/* The events of a dialled link's monitor, its dial deadline and retry. */
static void s_dialled_upkeep(sw_peer_t *p, sw_dlink_t *l, int64_t now)
{
    uint16_t ev;
    uint32_t val;
    while (l->mon && link_read_event(l->mon, &ev, &val)) {
        if (ev == ZMQ_EVENT_CONNECTED) {
            l->fd = (int)val;
        } else if (ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            s_dialled_up(p, l);
        } else if (ev == ZMQ_EVENT_DISCONNECTED) {
            s_down(p, l, "the connection closed");
            l->dial_at_ms = now; /* libzmq redials; the deadline holds again */
        } else if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ||
                   ev == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
            SW_WARN("direct: %s's listener at %s refused our key (not on its --allow list?): "
                    "staying on the relay",
                    l->name, l->ep);
            s_close_sock(l);
            l->retry_at_ms = now + SW_DIRECT_RETRY_MS;
            return;
        }
    }
    if (l->sock && !l->up && l->dial_at_ms >= 0 && now - l->dial_at_ms > p->direct.dial_ms) {
        SW_WARN("direct: %s's listener at %s did not answer within %d ms (NAT or firewall?): "
                "staying on the relay, trying again in %d s",
                l->name, l->ep, p->direct.dial_ms, SW_DIRECT_RETRY_MS / 1000);
        s_close_sock(l);
        l->retry_at_ms = now + SW_DIRECT_RETRY_MS;
    }
    if (!l->sock && l->retry_at_ms >= 0 && now >= l->retry_at_ms)
        (void)s_dial(p, l);
}

/* ---- the listener ------------------------------------------------------------------------ */

/* The ZAP handler: a CURVE key the allow-list gives a node name (the room: s_conn_add,
 * s_who_accepted). */
static void s_zap(sw_peer_t *p)
{
    sw_direct_t *d = &p->direct;
    sw_zap_req_t q;
    while (sw_zap_read(d->zap, &q)) {
        const sw_allow_entry_t *e = q.key[0] ? sw_allow_find(d->allow, d->n_allow, q.key) : NULL;
        const char *status = "400", *text = "key not on this node's allow-list";
        if (!q.well_formed || !q.curve) {
            text = "not a CURVE client";
        } else if (e && e->role != SW_ALLOW_NODE) {
            text = "a client key: only the nodes of the cluster dial a node";
        } else if (e && !strcmp(e->name, p->announce.name)) {
            text = "this node's own key";
        } else if (e) {
            status = "200";
            text = "OK";
        }
        if (status[0] != '2')
            s_refused(p, q.addr, text);
        sw_zap_reply(d->zap, &q, status, text, status[0] == '2' ? q.key : "");
    }
}

/* Counts the listener's connections: one past the bound is shut at once. */
static void s_conn_add(sw_peer_t *p, int fd)
{
    sw_direct_t *d = &p->direct;
    for (int i = 0; i < SW_DIRECT_MAX_CONNS; i++) /* forget the ones that are gone */
        if (d->conn_fd[i] == fd || (d->conn_fd[i] >= 0 && link_fd_rtt_us(d->conn_fd[i]) < 0))
            d->conn_fd[i] = -1;
    for (int i = 0; i < SW_DIRECT_MAX_CONNS; i++)
        if (d->conn_fd[i] < 0) {
            d->conn_fd[i] = fd;
            return;
        }
    s_refused(
        p, "a new connection",
        "the listener holds " SW_STR(SW_DIRECT_MAX_CONNS) " connections (SW_DIRECT_MAX_CONNS)");
    shutdown(fd, SHUT_RD); /* not SHUT_RDWR: see relay/conn.c, relay_cut */
}

static void s_conn_gone(sw_peer_t *p, int fd)
{
    sw_direct_t *d = &p->direct;
    for (int i = 0; i < SW_DIRECT_MAX_CONNS; i++)
        if (d->conn_fd[i] == fd)
            d->conn_fd[i] = -1;
    for (int i = 0; i < SW_DIRECT_MAX_LINKS; i++) {
        sw_dlink_t *l = &d->links[i];
        if (l->name[0] && !l->dialled && l->fd == fd) {
            s_down(p, l, "the connection closed");
            memset(l, 0, sizeof *l);
            l->fd = -1;
        }
    }
}

static void s_listener_upkeep(sw_peer_t *p)
{
    sw_direct_t *d = &p->direct;
    if (d->zap)
        s_zap(p);
    uint16_t ev;
    uint32_t val;
    while (d->rmon && link_read_event(d->rmon, &ev, &val)) {
        if (ev == ZMQ_EVENT_ACCEPTED)
            s_conn_add(p, (int)val);
        else if (ev == ZMQ_EVENT_DISCONNECTED || ev == ZMQ_EVENT_CLOSED)
            s_conn_gone(p, (int)val);
    }
}

/* Who dialled us (sw_wire_who_fn for the listener): the key ZAP admitted, bound to the name the
 * frame claims; a new connection takes a free slot (or replaces its own old one). */
static int s_who_accepted(void *ctx, zmq_msg_t *rid, zmq_msg_t *frame, const char *name, char *key)
{
    sw_peer_t *p = ctx;
    sw_direct_t *d = &p->direct;
    key[0] = 0;
    if (d->zap) {
        const char *user = zmq_msg_gets(frame, "User-Id");
        const sw_allow_entry_t *e = user ? sw_allow_find(d->allow, d->n_allow, user) : NULL;
        char why[256];
        const int role = e && e->bind == SW_BIND_HEAD ? SW_ROLE_HEAD : SW_ROLE_MIDDLE;
        if (!e || sw_allow_permit(d->allow, d->n_allow, user, name, role, why, sizeof why) != 0 ||
            sw_keys_fingerprint(user, key) != 0)
            return -1;
    }
    const size_t rl = zmq_msg_size(rid);
    sw_dlink_t *l = s_find(d, name, 0);
    if (l && (l->rid_len != rl || memcmp(l->rid, zmq_msg_data(rid), rl) != 0)) {
        s_down(p, l, "it dialled again"); /* its old connection is gone or going */
        memset(l, 0, sizeof *l);
    } else if (l) {
        return strcmp(l->fp, key) == 0 ? 0 : -1;
    }
    if (!l && !(l = s_free_slot(d))) {
        s_refused(p, name, "no room for another direct link (SW_DIRECT_MAX_LINKS)");
        return -1;
    }
    if (rl > sizeof l->rid)
        return -1;
    memset(l, 0, sizeof *l);
    snprintf(l->name, sizeof l->name, "%s", name);
    snprintf(l->fp, sizeof l->fp, "%s", key);
    memcpy(l->rid, zmq_msg_data(rid), rl);
    l->rid_len = rl;
    l->fd = zmq_msg_get(frame, ZMQ_SRCFD);
    l->rtt_us = -1;
    s_up(p, l);
    return 0;
}

/* Who sent on a dialled link (sw_wire_who_fn): only the node we dialled. */
static int s_who_dialled(void *ctx, zmq_msg_t *rid, zmq_msg_t *frame, const char *name, char *key)
{
    const sw_dlink_t *l = ctx;
    (void)rid, (void)frame;
    snprintf(key, SW_KEY_FP_LEN + 1, "%s", l->fp);
    return strcmp(name, l->name) == 0 ? 0 : -1;
}

/* ---- the loop's share -------------------------------------------------------------------- */

/* A live link whose other end sent nothing (not even a heartbeat) for the silence limit is shut:
 * libzmq redials a dialled one. */
static void s_silence(sw_peer_t *p, sw_dlink_t *l, int64_t now)
{
    if (!l->up || l->fd < 0 || now < l->check_at_ms)
        return;
    l->check_at_ms = now + p->silent_limit_ms / SW_PEER_SILENT_IVLS;
    const long silent = link_fd_silent_ms(l->fd);
    if (silent > p->silent_limit_ms) {
        char why[96];
        snprintf(why, sizeof why, "nothing from it for %ld ms", silent);
        shutdown(l->fd, SHUT_RD); /* not SHUT_RDWR: see relay/conn.c, relay_cut */
        s_down(p, l, why);
        if (l->dialled)
            l->dial_at_ms = now;
    }
}

void direct_upkeep(sw_peer_t *p)
{
    sw_direct_t *d = &p->direct;
    const int64_t now = link_now_ms();
    if (d->router)
        s_listener_upkeep(p);
    for (int i = 0; i < SW_DIRECT_MAX_LINKS; i++) {
        sw_dlink_t *l = &d->links[i];
        if (!l->name[0])
            continue;
        if (l->dialled)
            s_dialled_upkeep(p, l, now);
        s_silence(p, l, now);
    }
}

int direct_poll_items(sw_peer_t *p, zmq_pollitem_t *items, int max)
{
    sw_direct_t *d = &p->direct;
    int n = 0;
    void *socks[3] = {d->router, d->rmon, d->zap};
    for (int i = 0; i < 3 && n < max; i++)
        if (socks[i])
            items[n++] = (zmq_pollitem_t){socks[i], 0, ZMQ_POLLIN, 0};
    for (int i = 0; i < SW_DIRECT_MAX_LINKS && n + 1 < max; i++) {
        const sw_dlink_t *l = &d->links[i];
        if (l->sock) {
            items[n++] = (zmq_pollitem_t){l->sock, 0, ZMQ_POLLIN, 0};
            items[n++] = (zmq_pollitem_t){l->mon, 0, ZMQ_POLLIN, 0};
        }
    }
    return n;
}

/* One message from sock: 0 for the caller, 1 consumed or none (*read says whether one came). */
static int s_read_one(sw_peer_t *p, void *sock, int router, sw_dlink_t *l, sw_wire_msg_t *out,
                      int *read)
{
    sw_wire_msg_t m = {0};
    char err[SW_WIRE_ERR_LEN];
    const int rc = sw_wire_recv_direct(sock, ZMQ_DONTWAIT, router, &m, &p->crypto,
                                       router ? s_who_accepted : s_who_dialled,
                                       router ? (void *)p : (void *)l, err, sizeof err);
    if (rc == SW_WIRE_ESOCKET)
        return 1;
    *read = 1;
    if (rc == SW_WIRE_OK) {
        m.link = SW_PEER_VIA_DIRECT;
        sw_wire_msg_move(out, &m);
        return 0;
    }
    if (rc != SW_WIRE_PROBE) {
        p->drops++;
        if (sw_log_due(p->drops, 16))
            SW_WARN("direct: %s: dropped a message: %s (%llu dropped so far)", p->announce.name,
                    err, (unsigned long long)p->drops);
    }
    return 1;
}

int direct_read(sw_peer_t *p, sw_wire_msg_t *out, int *read)
{
    sw_direct_t *d = &p->direct;
    if (d->router && s_read_one(p, d->router, 1, NULL, out, read) == 0)
        return 0;
    for (int i = 0; i < SW_DIRECT_MAX_LINKS; i++) {
        sw_dlink_t *l = &d->links[i];
        if (l->name[0] && l->dialled && l->sock && s_read_one(p, l->sock, 0, l, out, read) == 0)
            return 0;
    }
    return 1;
}

void direct_note_relay(sw_peer_t *p, const char *dest)
{
    sw_direct_t *d = &p->direct;
    if (!dest)
        return;
    for (int i = 0; i < SW_DIRECT_MAX_LINKS; i++)
        if (d->links[i].name[0] && !strcmp(d->links[i].name, dest)) {
            d->links[i].relay_sent_ms = link_now_ms();
            d->links[i].used = 0;
        }
}

int direct_send(sw_peer_t *p, int via, const char *dest, sw_envelope_t *env, const void *payload,
                size_t payload_len, int has_payload)
{
    sw_direct_t *d = &p->direct;
    if (!dest || (via >= 0 && via < p->n_links && link_live(&p->links[via])))
        return 1; /* a relay was asked for (the path the message answered came by) */
    sw_dlink_t *l = s_live(d, dest);
    if (!l)
        return 1;
    const int64_t now = link_now_ms();
    if (!l->used && via != SW_PEER_VIA_DIRECT && now - l->relay_sent_ms < SW_DIRECT_QUIET_MS)
        return 1; /* something may still travel by the relay: not overtaking it */
    if (!l->used)
        SW_INFO("direct: messages to %s go by the direct link now", dest);
    l->used = 1;
    char err[SW_WIRE_ERR_LEN];
    const int rc = sw_wire_send_direct(l->dialled ? l->sock : d->router, l->dialled ? NULL : l->rid,
                                       l->rid_len, dest, env, payload, payload_len, has_payload,
                                       ZMQ_DONTWAIT, &p->crypto, err, sizeof err);
    if (rc == SW_WIRE_OK)
        return 0;
    if (rc != SW_WIRE_ESOCKET) {
        SW_ERR("direct: %s: %s", p->announce.name, err);
        return rc;
    }
    /* Its queue is full (EAGAIN: this message goes by the relay, and the quiet rule holds
     * again before the next one goes direct), or it is gone (EHOSTUNREACH: the listener's
     * connection closed; the monitor says so for a dialled one). */
    if (errno == EHOSTUNREACH && !l->dialled) {
        s_down(p, l, "its connection closed");
        memset(l, 0, sizeof *l);
        l->fd = -1;
    }
    l->used = 0;
    return 1;
}

uint64_t sw_peer_direct_losses(sw_peer_t *p)
{
    direct_upkeep(p);
    return p->direct.losses;
}

int sw_peer_direct_hops(sw_peer_t *p, sw_msg_direct_hop_t *out, int max)
{
    direct_announce_fields(p);
    int n = 0;
    for (uint32_t i = 0; i < p->announce.a.n_direct_hops && n < max; i++)
        out[n++] = p->announce.a.direct_hops[i];
    return n;
}
