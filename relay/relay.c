/*
 * relay.c - the relay's loop (see relay.h): its options and sockets
 * (relay_new, relay_destroy), the loop itself (relay_run: ZAP requests, the
 * allow-list's reload, held messages, new messages, monitor events, the
 * liveness sweep), and each message's intake: its frames, sizes and key are
 * checked, and the sender's rate limits, before it goes to the relay itself
 * (announce.c) or to another peer (forward.c). relay_impl.h says how the
 * other parts divide the work.
 */
#include "relay_impl.h"

#include "log.h"
#include "seal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RELAY_BATCH 256     /* messages handled per wakeup before timers run */
#define RELAY_RECHECK_MS 20 /* probe delay after a DISCONNECTED event */
#define RELAY_MON_EP "inproc://sw-relay-monitor"
#define RELAY_ZMTP_BACKSTOP_MS 600000 /* libzmq's own heartbeat timeout */
/* A connection that has not announced may send only this much in one message (an announce, a
 * status query); more shuts it down, so that a key cannot make the relay take 16 MiB frames on
 * connections no limit counts. */
#define RELAY_UNANNOUNCED_MSG_MAX (64u << 10)
#define RELAY_TELL_MS 50 /* a node hears of its dropped control messages this often at most */

/* ---- options, sockets ------------------------------------------------------- */

static int s_setopt_int(void *sock, int opt, int val, const char *what)
{
    if (zmq_setsockopt(sock, opt, &val, sizeof val) != 0) {
        SW_ERR("relay: setting %s = %d: %s", what, val, zmq_strerror(errno));
        return -1;
    }
    return 0;
}

relay_t *relay_new(const relay_opts_t *opts)
{
    if (!opts || !opts->listen) {
        SW_ERR("relay: a listen endpoint is required");
        return NULL;
    }
    relay_t *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->heartbeat_ms = opts->heartbeat_ms > 0 ? opts->heartbeat_ms : SW_RELAY_DEFAULT_HEARTBEAT_MS;
    r->handshake_ms = opts->handshake_ms > 0 ? opts->handshake_ms : SW_RELAY_DEFAULT_HANDSHAKE_MS;
    int hwm = opts->hwm > 0 ? opts->hwm : SW_RELAY_DEFAULT_HWM;
    int timeout = RELAY_ZMTP_BACKSTOP_MS; /* liveness is judged by bytes (peers.c) */
    int64_t maxmsg = SW_WIRE_MAX_FRAME;
    size_t len = sizeof r->endpoint;

    r->ctx = zmq_ctx_new();
    if (!r->ctx)
        goto err;
    r->router = zmq_socket(r->ctx, ZMQ_ROUTER);
    if (!r->router)
        goto err;
    if (s_setopt_int(r->router, ZMQ_ROUTER_MANDATORY, 1, "ZMQ_ROUTER_MANDATORY") ||
        s_setopt_int(r->router, ZMQ_LINGER, 0, "ZMQ_LINGER") ||
        s_setopt_int(r->router, ZMQ_SNDHWM, hwm, "ZMQ_SNDHWM") ||
        s_setopt_int(r->router, ZMQ_RCVHWM, hwm, "ZMQ_RCVHWM") ||
        s_setopt_int(r->router, ZMQ_HEARTBEAT_IVL, r->heartbeat_ms, "ZMQ_HEARTBEAT_IVL") ||
        s_setopt_int(r->router, ZMQ_HEARTBEAT_TIMEOUT, timeout, "ZMQ_HEARTBEAT_TIMEOUT") ||
        s_setopt_int(r->router, ZMQ_HEARTBEAT_TTL, 0, "ZMQ_HEARTBEAT_TTL") ||
        s_setopt_int(r->router, ZMQ_TCP_KEEPALIVE, 1, "ZMQ_TCP_KEEPALIVE") ||
        s_setopt_int(r->router, ZMQ_HANDSHAKE_IVL, r->handshake_ms, "ZMQ_HANDSHAKE_IVL"))
        goto err;
    if (zmq_setsockopt(r->router, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0)
        goto err;
    if (relay_auth_setup(r, opts) != 0) {
        relay_destroy(&r);
        return NULL;
    }
    r->reload = opts->reload;
    r->rate = opts->rate > 0 ? opts->rate : SW_RELAY_DEFAULT_RATE;
    r->max_conns_per_key =
        opts->max_conns_per_key > 0 ? opts->max_conns_per_key : SW_RELAY_DEFAULT_CONNS_PER_KEY;
    r->max_conns_per_prefix = opts->max_conns_per_prefix > 0 ? opts->max_conns_per_prefix
                                                             : SW_RELAY_DEFAULT_CONNS_PER_PREFIX;
    r->client_rate =
        (double)(opts->client_mib_s > 0 ? opts->client_mib_s : SW_RELAY_DEFAULT_CLIENT_MIB_S) *
        (1 << 20);
    r->node_rate =
        (double)(opts->node_mib_s > 0 ? opts->node_mib_s : SW_RELAY_DEFAULT_NODE_MIB_S) * (1 << 20);
    r->queue_max = (size_t)(opts->queue_mib > 0 ? opts->queue_mib : SW_RELAY_DEFAULT_QUEUE_MIB)
                   << 20;
    r->queue_total_max = (size_t)(opts->queue_total_mib > 0 ? opts->queue_total_mib
                                                            : SW_RELAY_DEFAULT_QUEUE_TOTAL_MIB)
                         << 20;
    if (r->queue_total_max < r->queue_max)
        r->queue_total_max = r->queue_max;
    atomic_init(&r->queued, 0);
    r->parked = calloc(RELAY_PARK_MAX, sizeof *r->parked);
    r->holds = calloc(RELAY_HOLD_MAX, sizeof *r->holds);
    r->conns = calloc(RELAY_CONNS_MAX, sizeof *r->conns);
    for (int i = 0; r->conns && i < RELAY_CONNS_MAX; i++)
        r->conns[i].fd = -1;
    r->announce_ms = opts->announce_ms > 0 ? opts->announce_ms : SW_RELAY_DEFAULT_ANNOUNCE_MS;
    r->hold_ms = (int64_t)(opts->name_hold_s > 0   ? opts->name_hold_s
                           : opts->name_hold_s < 0 ? 0
                                                   : SW_RELAY_DEFAULT_NAME_HOLD_S) *
                 1000;
    if (!r->parked || !r->holds || !r->conns) {
        relay_destroy(&r);
        return NULL;
    }
    if (zmq_socket_monitor(r->router, RELAY_MON_EP, ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_ACCEPTED) !=
        0)
        goto err;
    r->mon = zmq_socket(r->ctx, ZMQ_PAIR);
    if (!r->mon || zmq_connect(r->mon, RELAY_MON_EP) != 0)
        goto err;
    if (zmq_bind(r->router, opts->listen) != 0) {
        SW_ERR("relay: cannot listen on %s: %s", opts->listen, zmq_strerror(errno));
        relay_destroy(&r);
        return NULL;
    }
    if (zmq_getsockopt(r->router, ZMQ_LAST_ENDPOINT, r->endpoint, &len) != 0)
        goto err;
    r->start_ms = relay_now_ms();
    r->sweep_at_ms = r->start_ms + r->heartbeat_ms;
    return r;
err:
    SW_ERR("relay: socket setup failed: %s", zmq_strerror(errno));
    relay_destroy(&r);
    return NULL;
}

void relay_destroy(relay_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    relay_t *r = *self_p;
    for (int i = 0; i < r->n_peers; i++)
        relay_peer_free(r->peers[i]);
    if (r->router) {
        zmq_socket_monitor(r->router, NULL, 0);
        zmq_close(r->router);
    }
    if (r->mon) {
        int zero = 0;
        zmq_setsockopt(r->mon, ZMQ_LINGER, &zero, sizeof zero);
        zmq_close(r->mon);
    }
    if (r->zap)
        zmq_close(r->zap);
    if (r->ctx)
        zmq_ctx_term(r->ctx);
    for (int i = 0; r->parked && i < r->n_parked; i++) {
        zmq_msg_close(&r->parked[i].hdr);
        zmq_msg_close(&r->parked[i].payload);
    }
    free(r->parked);
    free(r->holds);
    free(r->conns);
    free(r->allow);
    free(r);
    *self_p = NULL;
}

const char *relay_endpoint(const relay_t *relay)
{
    return relay->endpoint;
}

/* ---- one message's intake --------------------------------------------------- */

/*
 * Reads one message into f[4]: frames past the 4th are read and dropped
 * (*too_many = 1); *n_out frames in all, *total_out bytes. 0, or -1 when
 * nothing was waiting (or on error; f is closed then).
 */
static int s_recv(relay_t *r, zmq_msg_t f[4], int *n_out, int *too_many_out, uint64_t *total_out)
{
    int n = 0, more = 1, too_many = 0;
    uint64_t total = 0;
    for (int i = 0; i < 4; i++)
        zmq_msg_init(&f[i]);
    while (more) {
        zmq_msg_t *dst = &f[n < 4 ? n : 3];
        if (n >= 4) { /* keep reading, keep nothing */
            too_many = 1;
            zmq_msg_close(dst);
            zmq_msg_init(dst);
        }
        if (zmq_msg_recv(dst, r->router, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
            for (int i = 0; i < 4; i++)
                zmq_msg_close(&f[i]);
            return -1;
        }
        total += zmq_msg_size(dst);
        more = zmq_msg_more(dst);
        n++;
    }
    *n_out = n;
    *too_many_out = too_many;
    *total_out = total;
    return 0;
}

/* Secure relays: the ZAP handler set the message's User-Id (user) to the client's key; it must
 * still be allowed, and be the key sender announced with. 0, or -1 when the message was refused
 * (its peer removed). */
static int s_key_check(relay_t *r, const void *id, size_t id_len, relay_peer_t *sender,
                       const char *user)
{
    if (!relay_allowed(r, user) || (sender && strcmp(sender->user, user) != 0)) {
        r->unauthorized++;
        r->dropped++;
        if ((r->unauthorized & (r->unauthorized - 1)) == 0)
            relay_note(r, SW_LOG_WARN,
                       "relay: refused a message from an unknown or revoked key %s (%llu so far)",
                       relay_who_key(user), (unsigned long long)r->unauthorized);
        if (sender)
            relay_peer_remove(r, sender, "key revoked");
        relay_reply_error(r, id, id_len, SW_ERROR_UNAUTHORIZED, NULL,
                          "your key is not on the relay's allow-list (revoked?)");
        return -1;
    }
    return 0;
}

/* who sent it, for a log line (the key's fingerprint is worked out only then) */
#define S_WHO sender ? sender->name : "an unannounced connection", relay_who_key(user)

/*
 * Checks a message of n frames f (too_many: more than 4; total bytes, the
 * routing id's id_len of them) from connection id (sender, user: see
 * s_handle_one): frame count, sizes, the destination frame (split into dname
 * and dkey) and what a client may send. 0, or -1 when it was dropped (the
 * sender told why).
 */
static int s_check(relay_t *r, const void *id, size_t id_len, const relay_peer_t *sender,
                   const char *user, zmq_msg_t *f, int n, int too_many, uint64_t total, char *dname,
                   char *dkey)
{
    if (too_many || n < 3) {
        relay_note(r, SW_LOG_WARN, "relay: dropped a message of %d frames from %s (key %s)", n - 1,
                   S_WHO);
        r->dropped++;
        relay_reply_error(r, id, id_len, SW_ERROR_MALFORMED, NULL,
                          "a message is [dest][header] or [dest][header][payload]; got %d frames",
                          n - 1);
        return -1;
    }
    if (!sender && total - id_len > RELAY_UNANNOUNCED_MSG_MAX) {
        /* an announce or a status query is small: a connection that has not announced and
         * sends more is cut off (the next try costs it a handshake, and its key holds few such
         * connections: relay_conn_key) */
        r->dropped++;
        relay_note(
            r, SW_LOG_WARN,
            "relay: an unannounced connection of key %s sent a message of %llu bytes (at most "
            "%u before announcing): shut down",
            relay_who_key(user), (unsigned long long)(total - id_len), RELAY_UNANNOUNCED_MSG_MAX);
        relay_reply_error(r, id, id_len, SW_ERROR_MALFORMED, NULL,
                          "at most %u bytes in a message before the announce",
                          RELAY_UNANNOUNCED_MSG_MAX);
        if (n >= 2)
            relay_conn_shut_frame(r, &f[1]);
        return -1;
    }
    if (total - id_len > SW_WIRE_MAX_TOTAL) {
        r->dropped++;
        relay_reply_error(r, id, id_len, SW_ERROR_MALFORMED, NULL,
                          "message of %llu bytes exceeds %u", (unsigned long long)(total - id_len),
                          SW_WIRE_MAX_TOTAL);
        return -1;
    }
    if (zmq_msg_size(&f[2]) > SW_WIRE_MAX_HEADER + SW_SEAL_HDR_OVERHEAD ||
        (n == 4 && zmq_msg_size(&f[3]) > SW_WIRE_MAX_PAYLOAD + SW_SEAL_PAYLOAD_OVERHEAD)) {
        r->dropped++;
        relay_reply_error(r, id, id_len, SW_ERROR_MALFORMED, NULL,
                          "header (%zu bytes) or payload frame too large", zmq_msg_size(&f[2]));
        return -1;
    }
    if (zmq_msg_size(&f[1]) > SW_WIRE_ADDR_MAX ||
        sw_wire_addr_split(zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), dname, dkey) != 0) {
        relay_note(r, SW_LOG_WARN,
                   "relay: dropped a message from %s (key %s): bad destination frame (%zu bytes)",
                   S_WHO, zmq_msg_size(&f[1]));
        r->dropped++;
        relay_reply_error(r, id, id_len, SW_ERROR_MALFORMED, NULL,
                          "destination frame is not 1..%d bytes of [A-Za-z0-9._-] (and maybe @ and "
                          "a key fingerprint)",
                          SW_WIRE_NAME_MAX);
        return -1;
    }
    if (r->secure && sender && sender->client &&
        (n == 4 || total - id_len > SW_RELAY_CLIENT_MSG_MAX)) {
        /* clients send requests, never tensors: the relay keeps no large frame of theirs */
        r->dropped++;
        relay_reply_error(
            r, id, id_len, SW_ERROR_MALFORMED, NULL,
            "a client's message is [dest][header] of at most %u bytes; got %d frames, "
            "%llu bytes",
            SW_RELAY_CLIENT_MSG_MAX, n - 1, (unsigned long long)(total - id_len));
        return -1;
    }
    return 0;
}
#undef S_WHO

/* Refills a message bucket (rate a second, as many at most) and a byte
 * bucket (brate a second, at most max(brate, bmax)) for the time since *t. */
static void s_refill(double *msgs, double *bytes, int64_t *t, int64_t now, double rate,
                     double brate, double bmax)
{
    const double elapsed_s = (double)(now - *t) / 1000.0;
    *t = now;
    *msgs += elapsed_s * rate;
    if (*msgs > rate)
        *msgs = rate;
    *bytes += elapsed_s * brate;
    if (*bytes > (brate > bmax ? brate : bmax))
        *bytes = brate > bmax ? brate : bmax;
}

/*
 * Rate limits, in messages and in bytes: one flooding peer cannot fill the
 * queues of the others. Takes one message of total - id_len bytes for dname
 * from its bucket (refilled up to now): the sender's, or for a node's message
 * to a client the destination's (relay_impl.h, "Buckets"). 0, or -1 when
 * over a limit (the message is dropped; the sender hears about it once per
 * power of two, a node's pipeline message at once). A byte bucket always
 * holds one whole message of the largest size.
 */
static int s_rate_take(relay_t *r, relay_peer_t *sender, const void *id, size_t id_len,
                       uint64_t total, const char *dname, int64_t now)
{
    const int client_rate = r->secure && sender->client;
    const double brate = client_rate ? r->client_rate : r->node_rate;
    s_refill(&sender->tokens, &sender->byte_tokens, &sender->refill_ms, now, r->rate, brate,
             client_rate ? SW_RELAY_CLIENT_MSG_MAX : SW_WIRE_MAX_TOTAL);
    relay_peer_t *dest_peer = relay_peer_find_name(r, dname, strlen(dname));
    const int to_client = !sender->client && dest_peer && dest_peer->client;
    double *msgs = &sender->tokens, *bytes = &sender->byte_tokens;
    if (to_client) {
        s_refill(&dest_peer->in_tokens, &dest_peer->in_bytes, &dest_peer->in_refill_ms, now,
                 r->rate, r->node_rate, SW_WIRE_MAX_TOTAL);
        msgs = &dest_peer->in_tokens;
        bytes = &dest_peer->in_bytes;
    }
    const int over_rate = *msgs < 1.0;
    if (over_rate || *bytes < (double)(total - id_len)) {
        r->dropped++;
        uint64_t *drops = over_rate ? &sender->rate_drops : &sender->byte_drops;
        ++*drops;
        char why[200];
        if (over_rate)
            snprintf(why, sizeof why, "over the relay's rate limit of %d messages/s%s", r->rate,
                     to_client ? " toward this client" : "");
        else
            snprintf(why, sizeof why,
                     "over the relay's byte rate of %.0f MiB/s for a %s (--%s-mib-s)",
                     brate / 1048576.0, client_rate ? "client" : "node",
                     client_rate ? "client" : "node");
        if ((*drops & (*drops - 1)) == 0)
            relay_note(r, SW_LOG_WARN, "relay: %s (key %s) -> %s: %s: dropped %llu so far",
                       sender->name, sender->fp[0] ? sender->fp : "-", dname, why,
                       (unsigned long long)*drops);
        if (!to_client && !sender->client) {
            /* A node's Forward or Verdict: its sender hears of it at once (the head then
             * recovers the round instead of waiting for its round timeout) */
            if (now - sender->told_ms >= RELAY_TELL_MS) {
                sender->told_ms = now;
                relay_reply_error(r, id, id_len, SW_ERROR_DEST_BUSY, dname,
                                  "%s; message to %s dropped", why, dname);
            }
        } else if ((*drops & (*drops - 1)) == 0) {
            relay_reply_error(r, id, id_len, SW_ERROR_DEST_BUSY, NULL, "%s; message dropped", why);
        }
        return -1;
    }
    *bytes -= (double)(total - id_len);
    *msgs -= 1.0;
    return 0;
}

/* Receives and handles one message; -1 when nothing was waiting (or on error). */
static int s_handle_one(relay_t *r)
{
    zmq_msg_t f[4];
    int n, too_many;
    uint64_t total;
    if (s_recv(r, f, &n, &too_many, &total) != 0)
        return -1;
    const void *id = zmq_msg_data(&f[0]);
    size_t id_len = zmq_msg_size(&f[0]);
    if (id_len == 0 || id_len > RELAY_ID_MAX)
        goto done; /* cannot happen with libzmq-made ids */
    relay_peer_t *sender = relay_peer_find_id(r, id, id_len);
    const char *user = NULL;
    if (r->secure) {
        /* The ZAP handler set User-Id to the client's key; it must still be allowed. */
        user = n >= 2 ? zmq_msg_gets(&f[1], "User-Id") : NULL;
        if (s_key_check(r, id, id_len, sender, user) != 0)
            goto done;
    }
    if (!sender && n >= 2 && relay_conn_was_cut(r, &f[1])) {
        r->dropped++; /* the relay ended that connection (relay_cut): read, not heard */
        goto done;
    }
    if (!sender && n >= 2)
        relay_conn_label(r, &f[1], user);
    int64_t now = relay_now_ms();
    if (sender) {
        sender->bytes_in += total - id_len;
        sender->msg_ms = sender->alive_ms = now;
    }
    char dname[SW_WIRE_NAME_MAX + 1], dkey[SW_WIRE_KEY_FP_LEN + 1];
    if (s_check(r, id, id_len, sender, user, f, n, too_many, total, dname, dkey) != 0)
        goto done;
    if (zmq_msg_size(&f[1]) == strlen(SW_WIRE_RELAY_NAME) &&
        memcmp(zmq_msg_data(&f[1]), SW_WIRE_RELAY_NAME, zmq_msg_size(&f[1])) == 0) {
        relay_control(r, id, id_len, sender, user, &f[2], n == 4);
        goto done;
    }
    if (!sender) {
        r->dropped++;
        relay_reply_error(r, id, id_len, SW_ERROR_NOT_ANNOUNCED, NULL,
                          "announce before sending to peers");
        goto done;
    }
    /* Messages for other peers only: a stage's status queries must not look like rounds it
     * passed on (the head's route check counts those, recover.c). */
    sender->msgs_in++;
    if (s_rate_take(r, sender, id, id_len, total, dname, now) == 0)
        relay_forward(r, sender, dname, dkey, f, n);
done:
    if (n >= 2)
        relay_peer_learn_fd(r, id, id_len, &f[1]);
    for (int i = 0; i < 4; i++)
        zmq_msg_close(&f[i]);
    return 0;
}

/* ---- the loop ----------------------------------------------------------------- */

int relay_run(relay_t *r, volatile sig_atomic_t *stop)
{
    SW_INFO("relay listening on %s (heartbeat %d ms)", r->endpoint, r->heartbeat_ms);
    while (!*stop) {
        int64_t now = relay_now_ms();
        long wait = r->sweep_at_ms > now ? (long)(r->sweep_at_ms - now) : 0;
        if (r->secure && r->allow_check_at_ms - now < wait)
            wait = r->allow_check_at_ms > now ? (long)(r->allow_check_at_ms - now) : 0;
        if (r->n_parked > 0 && wait > 2)
            wait = 2; /* parked messages: look again soon */
        zmq_pollitem_t items[3] = {
            {r->router, 0, ZMQ_POLLIN, 0}, {r->mon, 0, ZMQ_POLLIN, 0}, {r->zap, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(items, r->secure ? 3 : 2, wait) < 0 && errno != EINTR) {
            SW_ERR("relay: poll: %s", zmq_strerror(errno));
            return -1;
        }
        if (r->secure)
            relay_auth_step(r); /* ZAP requests, the allow-list's reload */
        relay_note_flush(r, relay_now_ms());
        relay_flush_parked(r); /* what waited goes before what is new */
        for (int i = 0; i < RELAY_BATCH && !*stop; i++)
            if (s_handle_one(r) < 0)
                break;
        relay_events(r);
        if (r->lost) {
            r->lost = 0;
            int64_t soon = relay_now_ms() + RELAY_RECHECK_MS;
            if (soon < r->sweep_at_ms)
                r->sweep_at_ms = soon;
        }
        if (relay_now_ms() >= r->sweep_at_ms) {
            relay_sweep(r);
            r->sweep_at_ms = relay_now_ms() + r->heartbeat_ms;
        }
    }
    SW_INFO("relay stopping: %llu forwarded, %llu dropped, %d peers",
            (unsigned long long)r->forwarded, (unsigned long long)r->dropped, r->n_peers);
    return 0;
}
