/*
 * peers.c - the peer table: the peers that announced, their names held for
 * their key after they left, and their liveness.
 *
 * Peers are kept in a small table (at most SW_WIRE_MAX_PEERS) that binds the
 * announced name to the ROUTER routing id of the connection the announce came
 * on; lookups are linear scans, which beat hashing at these sizes.
 *
 * Liveness: libzmq drops a connection whose TCP link closes and forgets its
 * routing id. The relay notices that by probing: with ZMQ_ROUTER_MANDATORY,
 * sending to a forgotten id fails at once with EHOSTUNREACH; to a live one
 * the probe is a single empty frame, which peers ignore. Probes run every
 * heartbeat interval, shortly after each DISCONNECTED event from the socket
 * monitor, and before a name held by another connection is refused.
 *
 * A peer that is alive but stopped (SIGSTOP, a frozen VM) keeps its TCP link:
 * its kernel still acknowledges. libzmq's ZMTP heartbeat timeout would catch
 * it, but that timer is only reset by a whole decoded frame, and a live peer
 * slowly sending one 16 MiB frame over a thin link (minutes at a few Mbit/s)
 * decodes nothing for that long. So the relay judges by bytes instead: it
 * sends ZMTP PINGs every heartbeat interval (answered by the peer's libzmq
 * I/O thread, so a busy compute thread cannot starve them) and, at each
 * sweep, reads the kernel's time since the last data arrived on the peer's
 * connection (TCP_INFO tcpi_last_data_recv, the socket found through the
 * ZMQ_SRCFD of its messages). A peer silent for SW_RELAY_SILENT_IVLS heartbeat intervals is
 * removed and its connection shut down, so that it reconnects and announces
 * again if it ever resumes. libzmq's own timeout stays as a 10-minute backstop.
 */
#include "relay_impl.h"

#include "log.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* ---- the table ---------------------------------------------------------------- */

/* Drops one reference to q (the peer's, or a released frame's). */
void relay_queue_unref(relay_queue_t *q)
{
    if (q && atomic_fetch_sub(&q->refs, 1) == 1)
        free(q);
}

/* Frees p (out of the table already) and drops its reference to its queue. */
void relay_peer_free(relay_peer_t *p)
{
    relay_queue_unref(p->q);
    free(p);
}

/* The peer announced on the connection with routing id `id`, or NULL. */
relay_peer_t *relay_peer_find_id(relay_t *r, const void *id, size_t len)
{
    for (int i = 0; i < r->n_peers; i++)
        if (r->peers[i]->id_len == len && memcmp(r->peers[i]->id, id, len) == 0)
            return r->peers[i];
    return NULL;
}

/* The peer called name (len bytes), or NULL. */
relay_peer_t *relay_peer_find_name(relay_t *r, const char *name, size_t len)
{
    for (int i = 0; i < r->n_peers; i++)
        if (strlen(r->peers[i]->name) == len && memcmp(r->peers[i]->name, name, len) == 0)
            return r->peers[i];
    return NULL;
}

/* ---- names held for their key ----------------------------------------------- */

/* The live hold of a client name, or NULL. */
relay_hold_t *relay_hold_find(relay_t *r, const char *name, int64_t now)
{
    for (int i = 0; r->holds && i < RELAY_HOLD_MAX; i++)
        if (r->holds[i].until_ms > now && !strcmp(r->holds[i].name, name))
            return &r->holds[i];
    return NULL;
}

/*
 * Holds the name of p, a client that left, for its key (r->hold_ms). A key
 * keeps at most max_conns_per_key held names (its oldest goes first), so that
 * one key cycling through names cannot push out the holds of others; a full
 * table drops the hold that ends first.
 */
static void s_hold_add(relay_t *r, const relay_peer_t *p, int64_t now)
{
    if (!r->holds || !p->client || !p->fp[0] || r->hold_ms <= 0)
        return;
    relay_hold_t *slot = NULL, *first = NULL, *mine_first = NULL;
    int mine = 0;
    for (int i = 0; i < RELAY_HOLD_MAX; i++) {
        relay_hold_t *h = &r->holds[i];
        if (h->until_ms <= now || !strcmp(h->name, p->name)) {
            if (!slot || slot->until_ms > now)
                slot = h; /* a free entry, or this name's old one */
            continue;
        }
        if (!first || h->until_ms < first->until_ms)
            first = h;
        if (!strcmp(h->fp, p->fp)) {
            mine++;
            if (!mine_first || h->until_ms < mine_first->until_ms)
                mine_first = h;
        }
    }
    if (mine >= r->max_conns_per_key && mine_first)
        slot = mine_first;
    else if (!slot)
        slot = first;
    snprintf(slot->name, sizeof slot->name, "%s", p->name);
    snprintf(slot->fp, sizeof slot->fp, "%s", p->fp);
    slot->until_ms = now + r->hold_ms;
}

/* Takes p out of the table (its name held when a client), logs why, and frees it. */
void relay_peer_remove(relay_t *r, relay_peer_t *p, const char *why)
{
    for (int i = 0; i < r->n_peers; i++) {
        if (r->peers[i] == p) {
            s_hold_add(r, p, relay_now_ms());
            relay_note(r, SW_LOG_INFO, "peer %s left (%s) after %.1f s", p->name, why,
                       (double)(relay_now_ms() - p->joined_ms) / 1000.0);
            relay_peer_free(p);
            r->peers[i] = r->peers[--r->n_peers];
            return;
        }
    }
}

/* ---- liveness -------------------------------------------------------------- */

/* 1 when the connection behind p still exists (probing it), 0 when gone. */
int relay_peer_alive(relay_t *r, relay_peer_t *p)
{
    if (zmq_send(r->router, p->id, p->id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return errno != EHOSTUNREACH; /* EAGAIN: alive, its queue is full */
    if (zmq_send(r->router, "", 0, ZMQ_DONTWAIT) < 0)
        relay_note(r, SW_LOG_WARN, "relay: probe body to %s: %s", p->name, zmq_strerror(errno));
    p->alive_ms = relay_now_ms();
    return 1;
}

/* Remembers the TCP socket that a message from the peer with routing id
 * `id` came on (once per connection). */
void relay_peer_learn_fd(relay_t *r, const void *id, size_t id_len, zmq_msg_t *frame)
{
    relay_peer_t *p = relay_peer_find_id(r, id, id_len);
    if (!p || p->fd >= 0)
        return;
    int fd = zmq_msg_get(frame, ZMQ_SRCFD);
    if (fd < 0)
        return;
    p->addr_len = sizeof p->addr;
    if (getpeername(fd, (struct sockaddr *)&p->addr, &p->addr_len) != 0)
        return;
    p->fd = fd;
}

/* Milliseconds since data last arrived from p (TCP_INFO), or -1 when the
 * socket is unknown, not TCP, or now belongs to another connection. */
static long s_silent_ms(relay_peer_t *p)
{
    if (p->fd < 0)
        return -1;
    struct sockaddr_storage now;
    socklen_t len = sizeof now;
    if (getpeername(p->fd, (struct sockaddr *)&now, &len) != 0 || len != p->addr_len ||
        memcmp(&now, &p->addr, len) != 0) {
        p->fd = -1; /* closed and maybe reused: the probes judge this peer */
        return -1;
    }
    struct tcp_info ti;
    socklen_t tl = sizeof ti;
    if (getsockopt(p->fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) != 0)
        return -1;
    return (long)ti.tcpi_last_data_recv;
}

/* Shuts p's TCP connection down when its socket is known and still its own
 * (relay_cut): libzmq sees the end and forgets the routing id. */
void relay_peer_shut(relay_t *r, relay_peer_t *p)
{
    if (s_silent_ms(p) >= 0)
        relay_cut(r, p->fd);
}

/* The liveness sweep, every heartbeat interval (and soon after a DISCONNECTED event):
 * connections that did not announce in time, peers gone or silent too long. */
void relay_sweep(relay_t *r)
{
    relay_conn_sweep(r);
    const long limit = (long)SW_RELAY_SILENT_IVLS * r->heartbeat_ms;
    for (int i = 0; i < r->n_peers;) {
        relay_peer_t *p = r->peers[i];
        if (!relay_peer_alive(r, p)) {
            relay_peer_remove(r, p, "connection closed");
            continue; /* the last one moved into slot i */
        }
        long silent = s_silent_ms(p);
        if (silent > limit) {
            relay_note(r, SW_LOG_WARN,
                       "relay: no data from %s (key %s) for %ld ms (limit %ld): dropping its "
                       "connection",
                       p->name, p->fp[0] ? p->fp : "-", silent, limit);
            relay_cut(r, p->fd); /* libzmq sees the end and forgets the id */
            relay_peer_remove(r, p, "heartbeats stopped");
            continue;
        }
        i++;
    }
}
