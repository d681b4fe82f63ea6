/*
 * reply.c - what the relay says: replies to peers (an Error, an AnnounceAck,
 * the peer table), sent from the name "relay" without blocking, and its lines
 * about what peers did, at most RELAY_NOTE_PER_S a second so that no peer can
 * flood the log. The bottom of the relay's parts: it calls none of the others.
 */
#include "relay_impl.h"

#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define RELAY_NOTE_PER_S 20 /* lines a second about what peers did; the rest are counted */

/* ---- lines about peers in the log ------------------------------------------- */

/* Counts one more event; 1 when it is the 1st, 2nd, 4th, 8th, ... (a flood cannot flood the
 * log). */
int relay_log_due(uint64_t *count)
{
    ++*count;
    return (*count & (*count - 1)) == 0;
}

/* Ends a second of notes: one line for what it left out. */
void relay_note_flush(relay_t *r, int64_t now)
{
    if (now - r->note_since < 1000)
        return;
    if (r->note_held)
        SW_WARN("relay: %llu more lines about peers in the last %.1f s were left out (at most %d a "
                "second); the last: %s",
                (unsigned long long)r->note_held, (double)(now - r->note_since) / 1e3,
                RELAY_NOTE_PER_S, r->note_last);
    r->note_held = 0;
    r->note_lines = 0;
    r->note_since = now;
}

/*
 * Logs one line about something a peer did (level SW_LOG_WARN or INFO), at
 * most RELAY_NOTE_PER_S a second: what any authenticated connection can make
 * the relay say (a malformed message, a bad destination, an announce of a
 * taken name, joining and leaving) must not flood the log. The lines left out
 * are counted and said in one line when the second is over. Lines about a
 * peer name its key's fingerprint (keys.h), the thing to revoke.
 */
void relay_note(relay_t *r, int level, const char *fmt, ...)
{
    relay_note_flush(r, relay_now_ms());
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (r->note_lines >= RELAY_NOTE_PER_S) {
        r->note_held++;
        snprintf(r->note_last, sizeof r->note_last, "%.255s", line);
        return;
    }
    r->note_lines++;
    sw_log_write((enum sw_log_level)level, "%s", line);
}

/* The fingerprint of Z85 key `user` for a log line (a static buffer: one call per line), or
 * "-" without one. */
const char *relay_who_key(const char *user)
{
    static char fp[SW_WIRE_KEY_FP_LEN + 1];
    if (!user || sw_keys_fingerprint(user, fp) != 0)
        return "-";
    return fp;
}

/* ---- replies from the relay itself ------------------------------------------ */

/* Sends msg to the connection with routing id `id`, from "relay"; a reply that cannot go
 * (the asker gone or flooded) is dropped. */
void relay_reply(relay_t *r, const void *id, size_t id_len, const sw_msg_t *msg)
{
    char err[SW_WIRE_ERR_LEN];
    zmq_msg_t hdr;
    if (sw_codec_encode(msg, &hdr, err, sizeof err) != SW_WIRE_OK) {
        SW_ERR("relay: cannot encode a %s reply: %s", sw_wire_type_name(msg->type), err);
        return;
    }
    if (zmq_send(r->router, id, id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&hdr);
        return; /* the asker is gone or flooded: nothing to tell */
    }
    if (zmq_send(r->router, SW_WIRE_RELAY_NAME, strlen(SW_WIRE_RELAY_NAME), ZMQ_SNDMORE) < 0 ||
        zmq_msg_send(&hdr, r->router, 0) < 0) {
        SW_WARN("relay: reply: %s", zmq_strerror(errno));
        zmq_msg_close(&hdr);
    }
}

/* An Error (code, about dest when not NULL) with a printf-style text to the connection `id`. */
void relay_reply_error(relay_t *r, const void *id, size_t id_len, int code, const char *dest,
                       const char *fmt, ...)
{
    char text[SW_WIRE_MAX_ERROR_TEXT];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    const sw_msg_t msg = {
        .type = SW_MSG_ERROR,
        .error = {.code = (sw_error_code_t)code, .message = text, .dest = dest},
    };
    relay_reply(r, id, id_len, &msg);
}

/* The peer table (a PeerTable with the relay's counters) to the connection `id`. */
void relay_reply_table(relay_t *r, const void *id, size_t id_len)
{
    int64_t now = relay_now_ms();
    sw_msg_peer_t info[SW_WIRE_MAX_PEERS];
    for (int i = 0; i < r->n_peers; i++) {
        const relay_peer_t *p = r->peers[i];
        info[i] = (sw_msg_peer_t){
            .announce = p->ann.a,
            .heartbeat_age_ms = (uint32_t)(now - p->alive_ms),
            .idle_ms = (uint32_t)(now - p->msg_ms),
            .msgs_in = p->msgs_in,
            .msgs_out = p->msgs_out,
            .bytes_in = p->bytes_in,
            .key_bound = p->key_bound,
            .key_fp = p->fp,
        };
    }
    const sw_msg_t msg = {
        .type = SW_MSG_PEER_TABLE,
        .table = {.n_peers = (uint32_t)r->n_peers,
                  .peers = info,
                  .uptime_ms = (uint64_t)(now - r->start_ms),
                  .msgs_forwarded = r->forwarded,
                  .msgs_dropped = r->dropped},
    };
    relay_reply(r, id, id_len, &msg);
}
