/*
 * conn.c - the TCP connections the relay accepted (relay_conn_t), from the
 * socket monitor's ACCEPTED event to its DISCONNECTED: the key the ZAP
 * handler gave each, the per-key counts checked at the handshake (at most
 * SW_RELAY_UNANNOUNCED_PER_KEY not announced, max_conns_per_key more
 * announced), and the deadline to announce (announce_ms after the accept,
 * then the connection is shut down). A connection that announced is a peer
 * (peers.c); this file only reads the peer table.
 */
#include "relay_impl.h"

#include "addr.h"
#include "log.h"

#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

/* 1 when the connections open from c's prefix (c included) are over the relay's
 * --max-conns-per-prefix. The relay's own machine (127.0.0.1, ::1) is not
 * limited: what runs there (a local node, a test cluster) holds the relay's
 * keys' machine already. */
static int s_prefix_full(const relay_t *r, const relay_conn_t *c)
{
    if (!strcmp(c->ip, "127.0.0.1") || !strcmp(c->ip, "::1") || !strcmp(c->ip, "::ffff:127.0.0.1"))
        return 0;
    uint8_t mine[SW_ADDR_PREFIX_LEN], other[SW_ADDR_PREFIX_LEN];
    if (sw_addr_prefix((const struct sockaddr *)&c->addr, mine) != 0)
        return 0;
    int open = 0;
    for (int i = 0; i < RELAY_CONNS_MAX; i++) {
        const relay_conn_t *k = &r->conns[i];
        if (k->fd >= 0 && !k->shut &&
            sw_addr_prefix((const struct sockaddr *)&k->addr, other) == 0 &&
            !memcmp(mine, other, sizeof mine))
            open++;
    }
    return open > r->max_conns_per_prefix;
}

/*
 * Ends a connection from the relay's thread: shutdown(SHUT_RD) of libzmq's socket fd. Its I/O
 * thread then reads what the peer had sent, sees the end of the stream, closes the socket and
 * forgets the routing id (a ROUTER has no call to drop one connection). The connection's entry
 * (when it has one) is marked shut: until it is gone it counts for its key (s_conn_count), and
 * what still comes on it is dropped unread (relay_conn_was_cut).
 *
 * Not SHUT_RDWR: that makes epoll report EPOLLHUP whatever libzmq polls for, and libzmq 4.3.4
 * (master too: zeromq/libzmq#4364) aborts the whole relay on it when the connection's queue to
 * the ROUTER was full (--hwm messages the relay's thread has not read yet: a flood, a relay
 * behind under load). The engine, which had stopped reading, takes the EPOLLHUP for an I/O
 * error (`_io_error`), leaves the socket but keeps its timers until the relay's thread drains
 * the queue, and the next ZMTP heartbeat (--heartbeat-ms) writes a PING through it:
 * "Assertion failed: !_io_error (src/stream_engine_base.cpp:331)". SHUT_RD alone raises no
 * EPOLLHUP (only EPOLLIN and EPOLLRDHUP, which a stopped engine does not poll for): the engine
 * sees the end once it reads again. A peer that goes on sending keeps the connection until it
 * pauses.
 */
void relay_cut(relay_t *r, int fd)
{
    shutdown(fd, SHUT_RD);
    for (int i = 0; i < RELAY_CONNS_MAX; i++)
        if (r->conns[i].fd == fd)
            r->conns[i].shut = 1;
}

/* A connection libzmq accepted (monitor event ACCEPTED, fd). */
static void s_conn_accepted(relay_t *r, int fd)
{
    relay_conn_t *c = NULL;
    for (int i = 0; i < RELAY_CONNS_MAX && !c; i++)
        if (r->conns[i].fd < 0)
            c = &r->conns[i];
    if (!c) {
        relay_cut(r, fd);
        relay_note(r, SW_LOG_WARN, "relay: %d connections open: shut a new one down",
                   RELAY_CONNS_MAX);
        return;
    }
    memset(c, 0, sizeof *c);
    c->fd = fd;
    c->since_ms = relay_now_ms();
    c->addr_len = sizeof c->addr;
    if (getpeername(fd, (struct sockaddr *)&c->addr, &c->addr_len) != 0 ||
        getnameinfo((struct sockaddr *)&c->addr, c->addr_len, c->ip, sizeof c->ip, NULL, 0,
                    NI_NUMERICHOST) != 0)
        c->ip[0] = 0;
    if (c->ip[0] && s_prefix_full(r, c)) {
        relay_cut(r, fd);
        r->prefix_refusals++;
        uint8_t p[SW_ADDR_PREFIX_LEN];
        char net[64];
        sw_addr_prefix((const struct sockaddr *)&c->addr, p);
        relay_note(r, SW_LOG_WARN,
                   "relay: %d connections open from %s: shut a new one from %s down "
                   "(--max-conns-per-prefix; %llu so far)",
                   r->max_conns_per_prefix, sw_addr_prefix_str(p, net, sizeof net), c->ip,
                   (unsigned long long)r->prefix_refusals);
    }
}

/* The connection went (monitor event DISCONNECTED, fd). */
static void s_conn_gone(relay_t *r, int fd)
{
    for (int i = 0; i < RELAY_CONNS_MAX; i++)
        if (r->conns[i].fd == fd)
            r->conns[i].fd = -1;
}

/* 1 when c's socket still is the connection it was accepted as. */
static int s_conn_same(const relay_conn_t *c)
{
    struct sockaddr_storage now;
    socklen_t len = sizeof now;
    return c->addr_len > 0 && getpeername(c->fd, (struct sockaddr *)&now, &len) == 0 &&
           len == c->addr_len && memcmp(&now, &c->addr, len) == 0;
}

/* 1 when a peer announced on connection c. */
static int s_conn_announced(const relay_t *r, const relay_conn_t *c)
{
    for (int i = 0; i < r->n_peers; i++)
        if (r->peers[i]->fd == c->fd)
            return 1;
    return 0;
}

/* A key's connections: *open those that are not going (one the relay shut down counts until
 * it is gone: relay_cut), *unannounced of them not announced. */
static void s_conn_count(const relay_t *r, const char *fp, int *open, int *unannounced)
{
    *open = *unannounced = 0;
    for (int i = 0; i < RELAY_CONNS_MAX; i++) {
        const relay_conn_t *c = &r->conns[i];
        if (c->fd < 0 || c->refused || strcmp(c->fp, fp) != 0)
            continue;
        ++*open;
        *unannounced += !s_conn_announced(r, c);
    }
}

/*
 * The ZAP handler admitted key z85 for a connection from ip: gives the
 * connection (the oldest from ip without a key yet) its key and checks the
 * key's counts. 0, or -1 (the handshake is refused, for now: ZAP status 300)
 * with the reason in why when the key has SW_RELAY_UNANNOUNCED_PER_KEY
 * connections that have not announced, or max_conns_per_key + that many in
 * all.
 */
int relay_conn_key(relay_t *r, const char *ip, const char *z85, char *why, size_t why_len)
{
    char fp[SW_WIRE_KEY_FP_LEN + 1];
    if (sw_keys_fingerprint(z85, fp) != 0)
        return 0;
    relay_conn_t *c = NULL;
    for (int i = 0; i < RELAY_CONNS_MAX; i++) {
        relay_conn_t *k = &r->conns[i];
        if (k->fd >= 0 && !k->fp[0] && !k->refused && !strcmp(k->ip, ip) &&
            (!c || k->since_ms < c->since_ms))
            c = k;
    }
    if (c)
        snprintf(c->fp, sizeof c->fp, "%s", fp);
    int open = 0, unannounced = 0;
    s_conn_count(r, fp, &open, &unannounced);
    if (!c)
        open++, unannounced++; /* its ACCEPTED event is still on its way */
    if (unannounced <= SW_RELAY_UNANNOUNCED_PER_KEY &&
        open <= r->max_conns_per_key + SW_RELAY_UNANNOUNCED_PER_KEY)
        return 0;
    if (c)
        c->refused = 1;
    r->conn_refusals++;
    snprintf(why, why_len,
             "this key has %d connections open, %d of them not announced (at most %d not "
             "announced, %d in all: the relay's --max-conns-per-key): retry later",
             open, unannounced, SW_RELAY_UNANNOUNCED_PER_KEY,
             r->max_conns_per_key + SW_RELAY_UNANNOUNCED_PER_KEY);
    relay_note(r, SW_LOG_WARN, "relay: refused a connection of key %s from %s: %s (%llu so far)",
               fp, ip, why, (unsigned long long)r->conn_refusals);
    return -1;
}

/* Shuts down the connections that did not announce in time, forgets stale entries. */
void relay_conn_sweep(relay_t *r)
{
    const int64_t now = relay_now_ms();
    for (int i = 0; i < RELAY_CONNS_MAX; i++) {
        relay_conn_t *c = &r->conns[i];
        if (c->fd < 0)
            continue;
        if (!s_conn_same(c)) { /* closed (its event was lost) and maybe reused */
            c->fd = -1;
            continue;
        }
        if (c->shut || c->refused || now - c->since_ms <= r->announce_ms || s_conn_announced(r, c))
            continue;
        relay_cut(r, c->fd);
        relay_note(r, SW_LOG_WARN,
                   "relay: a connection of key %s from %s did not announce within %d ms: shut down",
                   c->fp[0] ? c->fp : "-", c->ip, r->announce_ms);
    }
}

/*
 * A message from a connection that has not announced came on frame's socket
 * (ZMQ_SRCFD) with the key user: the connection's entry takes that key. The
 * ZAP handler can only guess it by address (two handshakes from one address
 * at once may swap their keys); the first message settles it.
 */
void relay_conn_label(relay_t *r, zmq_msg_t *frame, const char *user)
{
    char fp[SW_WIRE_KEY_FP_LEN + 1];
    const int fd = zmq_msg_get(frame, ZMQ_SRCFD);
    if (fd < 0 || !user || sw_keys_fingerprint(user, fp) != 0)
        return;
    for (int i = 0; i < RELAY_CONNS_MAX; i++) {
        relay_conn_t *c = &r->conns[i];
        if (c->fd == fd && strcmp(c->fp, fp) != 0 && s_conn_same(c))
            snprintf(c->fp, sizeof c->fp, "%s", fp);
    }
}

/* Shuts down the connection a received frame came on (ZMQ_SRCFD), when known. */
void relay_conn_shut_frame(relay_t *r, zmq_msg_t *frame)
{
    const int fd = zmq_msg_get(frame, ZMQ_SRCFD);
    for (int i = 0; fd >= 0 && i < RELAY_CONNS_MAX; i++) {
        relay_conn_t *c = &r->conns[i];
        if (c->fd == fd && s_conn_same(c) && !c->shut) {
            relay_cut(r, fd);
        }
    }
}

/* 1 when a received frame came on a connection the relay cut (ZMQ_SRCFD; relay_cut). */
int relay_conn_was_cut(const relay_t *r, zmq_msg_t *frame)
{
    const int fd = zmq_msg_get(frame, ZMQ_SRCFD);
    for (int i = 0; fd >= 0 && i < RELAY_CONNS_MAX; i++)
        if (r->conns[i].fd == fd && r->conns[i].shut)
            return s_conn_same(&r->conns[i]);
    return 0;
}

/* ---- the socket monitor ---------------------------------------------------------- */

/* Reads every pending monitor event: connections accepted and gone (r->lost set when one
 * went away). */
void relay_events(relay_t *r)
{
    for (;;) {
        zmq_msg_t ev;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, r->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return;
        }
        uint16_t event = 0;
        uint32_t value = 0;
        if (zmq_msg_size(&ev) >= 6) {
            memcpy(&event, zmq_msg_data(&ev), 2);
            memcpy(&value, (const uint8_t *)zmq_msg_data(&ev) + 2, 4);
        }
        int more = zmq_msg_more(&ev);
        zmq_msg_close(&ev);
        while (more) {
            zmq_msg_init(&ev);
            if (zmq_msg_recv(&ev, r->mon, 0) < 0) {
                zmq_msg_close(&ev);
                return;
            }
            more = zmq_msg_more(&ev);
            zmq_msg_close(&ev);
        }
        if (event == ZMQ_EVENT_ACCEPTED) {
            s_conn_accepted(r, (int)value);
        } else if (event == ZMQ_EVENT_DISCONNECTED) {
            s_conn_gone(r, (int)value);
            r->lost = 1;
        }
    }
}
