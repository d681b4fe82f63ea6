/*
 * forward.c - forwarding [dest][header][payload]? from one peer to another as
 * [src][header][payload]?, the frames unchanged. Each destination has a byte
 * budget for what libzmq holds for it (relay_queue_t: every forwarded frame
 * is tracked until libzmq releases it) and all of them one together; a
 * message for a destination over its budget or with a full queue is held
 * (parked) for a while, a few per sender, and goes out first, in order, when
 * the destination takes messages again, or is dropped with ERR_DEST_BUSY.
 */
#include "relay_impl.h"

#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RELAY_PARK_BYTES (64u << 20) /* bytes held in all (RELAY_PARK_MAX messages at most) */
#define RELAY_PARK_MS 5000           /* held longer: dropped with ERR_DEST_BUSY */

/* One forwarded frame whose release libzmq reports. */
typedef struct relay_frame {
    zmq_msg_t orig;       /* the received frame: its bytes are what is sent */
    size_t size;          /* bytes */
    relay_queue_t *q;     /* its destination's queue */
    atomic_size_t *total; /* the relay's total */
} relay_frame_t;

/* ---- byte budgets per destination --------------------------------------------- */

/* libzmq is done with a tracked frame (I/O thread, or a send that failed). */
static void s_frame_free(void *data, void *hint)
{
    (void)data;
    relay_frame_t *t = hint;
    atomic_fetch_sub(&t->q->bytes, t->size);
    atomic_fetch_sub(t->total, t->size);
    zmq_msg_close(&t->orig);
    relay_queue_unref(t->q);
    free(t);
}

/*
 * Replaces *frame by a frame of the same bytes (no copy) whose release is
 * taken off to's queue and the relay's total. Left as it was when out of
 * memory (then it is sent uncounted).
 */
static void s_track(relay_t *r, relay_peer_t *to, zmq_msg_t *frame)
{
    relay_frame_t *t = malloc(sizeof *t);
    if (!t)
        return;
    zmq_msg_init(&t->orig);
    zmq_msg_move(&t->orig, frame);
    t->size = zmq_msg_size(&t->orig);
    t->q = to->q;
    t->total = &r->queued;
    atomic_fetch_add(&t->q->refs, 1);
    atomic_fetch_add(&t->q->bytes, t->size);
    atomic_fetch_add(&r->queued, t->size);
    if (zmq_msg_init_data(frame, zmq_msg_data(&t->orig), t->size, s_frame_free, t) != 0) {
        atomic_fetch_sub(&t->q->bytes, t->size);
        atomic_fetch_sub(&r->queued, t->size);
        atomic_fetch_sub(&t->q->refs, 1);
        zmq_msg_init(frame);
        zmq_msg_move(frame, &t->orig);
        free(t);
    }
}

/* 1 when queuing bytes more for to would pass its byte budget or the relay's
 * (a message always goes to an empty queue, whatever its size). */
static int s_over_budget(const relay_t *r, const relay_peer_t *to, size_t bytes)
{
    size_t mine = atomic_load(&to->q->bytes), all = atomic_load(&r->queued);
    return mine > 0 && (mine + bytes > r->queue_max || all + bytes > r->queue_total_max);
}

/* ---- sending, and the messages held for a full destination ------------------ */

/*
 * Sends [to's id][src][hdr][payload]? without blocking. 0 when sent (the frames
 * are consumed), else EAGAIN (to's queue is full; nothing consumed) or
 * EHOSTUNREACH (to is gone).
 */
static int s_try_send(relay_t *r, relay_peer_t *to, const char *src, zmq_msg_t *hdr,
                      zmq_msg_t *payload)
{
    if (zmq_send(r->router, to->id, to->id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return errno == EHOSTUNREACH ? EHOSTUNREACH : EAGAIN;
    /* Once the id frame is accepted the rest of the message is queued with it. */
    s_track(r, to, hdr);
    if (payload)
        s_track(r, to, payload);
    if (zmq_send(r->router, src, strlen(src), ZMQ_SNDMORE) < 0 ||
        zmq_msg_send(hdr, r->router, payload ? ZMQ_SNDMORE : 0) < 0 ||
        (payload && zmq_msg_send(payload, r->router, 0) < 0)) {
        SW_ERR("relay: %s -> %s: send failed mid-message: %s", src, to->name, zmq_strerror(errno));
        r->dropped++;
        return 0; /* not retried: part of it went */
    }
    to->msgs_out++;
    r->forwarded++;
    return 0;
}

/* Messages parked for dest (and, when from is not NULL, from that sender). */
static int s_parked_for(const relay_t *r, const char *dest, const char *from)
{
    int n = 0;
    for (int i = 0; i < r->n_parked; i++)
        n += !strcmp(r->parked[i].dest, dest) && (!from || !strcmp(r->parked[i].src, from));
    return n;
}

/* Holds hdr and payload (moved in) for a later try; 0 when there is no room. */
static int s_park(relay_t *r, const relay_peer_t *sender, const char *dest, const char *dkey,
                  zmq_msg_t *hdr, zmq_msg_t *payload)
{
    size_t bytes = zmq_msg_size(hdr) + (payload ? zmq_msg_size(payload) : 0);
    if (r->n_parked == RELAY_PARK_MAX || r->parked_bytes + bytes > RELAY_PARK_BYTES ||
        s_parked_for(r, dest, sender->source) >= SW_RELAY_PARK_PER_PAIR)
        return 0;
    relay_parked_t *p = &r->parked[r->n_parked++];
    memset(p, 0, sizeof *p);
    snprintf(p->src, sizeof p->src, "%s", sender->source);
    memcpy(p->src_id, sender->id, sender->id_len);
    p->src_id_len = sender->id_len;
    snprintf(p->dest, sizeof p->dest, "%s", dest);
    snprintf(p->dkey, sizeof p->dkey, "%s", dkey);
    zmq_msg_init(&p->hdr);
    zmq_msg_move(&p->hdr, hdr);
    zmq_msg_init(&p->payload);
    if (payload) {
        zmq_msg_move(&p->payload, payload);
        p->has_payload = 1;
    }
    p->bytes = bytes;
    p->since_ms = relay_now_ms();
    r->parked_bytes += bytes;
    return 1;
}

/* Closes parked[i] and closes the gap (order kept). */
static void s_unpark(relay_t *r, int i)
{
    relay_parked_t *p = &r->parked[i];
    zmq_msg_close(&p->hdr);
    zmq_msg_close(&p->payload);
    r->parked_bytes -= p->bytes;
    memmove(&r->parked[i], &r->parked[i + 1], (size_t)(r->n_parked - i - 1) * sizeof *p);
    r->n_parked--;
}

/* Tries every parked message, oldest first, keeping each destination's order. */
void relay_flush_parked(relay_t *r)
{
    const relay_peer_t *blocked[RELAY_PARK_MAX];
    int n_blocked = 0;
    int64_t now = relay_now_ms();
    for (int i = 0; i < r->n_parked;) {
        relay_parked_t *p = &r->parked[i];
        relay_peer_t *to = relay_peer_find_name(r, p->dest, strlen(p->dest));
        if (to && p->dkey[0] && strcmp(to->fp, p->dkey) != 0)
            to = NULL; /* pinned to a key that no longer holds the name */
        int is_blocked = 0;
        for (int b = 0; to && b < n_blocked; b++)
            is_blocked |= blocked[b] == to;
        int rc = EHOSTUNREACH;
        if (to && (is_blocked || s_over_budget(r, to, p->bytes)))
            rc = EAGAIN;
        else if (to)
            rc = s_try_send(r, to, p->src, &p->hdr, p->has_payload ? &p->payload : NULL);
        if (rc == 0) {
            s_unpark(r, i); /* sent: closing the consumed frames is harmless */
            continue;
        }
        if (rc == EHOSTUNREACH) {
            r->dropped++;
            if (to)
                relay_peer_remove(r, to, "connection closed");
            relay_reply_error(r, p->src_id, p->src_id_len, SW_ERROR_DEST_GONE, p->dest,
                              "%s disconnected; message dropped", p->dest);
            s_unpark(r, i);
            continue;
        }
        if (!is_blocked)
            blocked[n_blocked++] = to;
        if (now - p->since_ms > RELAY_PARK_MS) {
            r->dropped++;
            relay_reply_error(r, p->src_id, p->src_id_len, SW_ERROR_DEST_BUSY, p->dest,
                              "%s took no messages for %d ms; message dropped", p->dest,
                              RELAY_PARK_MS);
            s_unpark(r, i);
            continue;
        }
        i++;
    }
}

/*
 * Forwards [dest][header][payload]? from sender as [src][header][payload]?
 * (src: the sender's name and key fingerprint). dname is the destination's
 * name; with dkey (not "") the sender pinned it to a key: a peer of that name
 * holding another key is not it (the head sends a client's tokens this way,
 * so that a name taken over by another key gets nothing).
 */
void relay_forward(relay_t *r, relay_peer_t *sender, const char *dname, const char *dkey,
                   zmq_msg_t *f, int n)
{
    relay_peer_t *to = relay_peer_find_name(r, dname, strlen(dname));
    if (!to || (dkey[0] && strcmp(to->fp, dkey) != 0)) {
        r->dropped++;
        SW_DEBUG("relay: %s -> %s: unknown destination", sender->name, dname);
        relay_reply_error(r, sender->id, sender->id_len, SW_ERROR_UNKNOWN_DEST, dname,
                          to ? "no live peer called %s holds the key it was sent to"
                             : "no live peer is called %s",
                          dname);
        return;
    }
    if (r->secure && sender->client &&
        !(to->key_bound && (to->ann.a.role == SW_ROLE_HEAD || to->ann.a.role == SW_ROLE_FULL))) {
        /* a client talks to heads only: not to other clients, not to stages */
        r->dropped++;
        r->unauthorized++;
        SW_DEBUG("relay: client %s -> %s refused: not a key-bound head", sender->name, dname);
        relay_reply_error(r, sender->id, sender->id_len, SW_ERROR_UNAUTHORIZED, dname,
                          "a client may send only to head nodes; %s is not one", dname);
        return;
    }
    /* Messages already waiting for this destination go first; then its byte budget. */
    const size_t bytes = zmq_msg_size(&f[2]) + (n == 4 ? zmq_msg_size(&f[3]) : 0);
    const int over = s_over_budget(r, to, bytes);
    int e = s_parked_for(r, dname, NULL) || over
                ? EAGAIN
                : s_try_send(r, to, sender->source, &f[2], n == 4 ? &f[3] : NULL);
    if (e == EAGAIN && s_park(r, sender, dname, dkey, &f[2], n == 4 ? &f[3] : NULL))
        return;
    if (e != 0) {
        r->dropped++;
        if (e == EHOSTUNREACH) {
            relay_note(r, SW_LOG_WARN, "relay: %s -> %s: destination gone, dropped", sender->name,
                       dname);
            relay_peer_remove(r, to, "connection closed");
            relay_reply_error(r, sender->id, sender->id_len, SW_ERROR_DEST_GONE, dname,
                              "%s disconnected; message dropped", dname);
        } else if (over) {
            r->budget_drops++; /* log 1, 2, 4, 8, ... so a flood cannot flood the log */
            size_t held = atomic_load(&to->q->bytes), all = atomic_load(&r->queued);
            if ((r->budget_drops & (r->budget_drops - 1)) == 0)
                relay_note(r, SW_LOG_WARN,
                           "relay: %s (key %s) -> %s: %.1f MiB queued for it, %.1f MiB in all "
                           "(budgets %zu and %zu MiB): dropped (%llu so far)",
                           sender->name, sender->fp[0] ? sender->fp : "-", dname, held / 1048576.0,
                           all / 1048576.0, r->queue_max >> 20, r->queue_total_max >> 20,
                           (unsigned long long)r->budget_drops);
            relay_reply_error(r, sender->id, sender->id_len, SW_ERROR_DEST_BUSY, dname,
                              "the relay holds %.1f MiB for %s already (%.1f MiB in all; budgets "
                              "--queue-mib %zu, --queue-total-mib %zu): message dropped",
                              held / 1048576.0, dname, all / 1048576.0, r->queue_max >> 20,
                              r->queue_total_max >> 20);
        } else {
            to->busy_drops++; /* log 1, 2, 4, 8, ... so a flood cannot flood the log */
            if ((to->busy_drops & (to->busy_drops - 1)) == 0)
                relay_note(r, SW_LOG_WARN,
                           "relay: %s (key %s) -> %s: queue full (%s), dropped (%llu so far to %s)",
                           sender->name, sender->fp[0] ? sender->fp : "-", dname, zmq_strerror(e),
                           (unsigned long long)to->busy_drops, dname);
            relay_reply_error(r, sender->id, sender->id_len, SW_ERROR_DEST_BUSY, dname,
                              "queue to %s is full; message dropped", dname);
        }
    }
}
