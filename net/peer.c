/*
 * peer.c - a peer's DEALER connection to the relay (see peer.h): socket
 * options, announce / re-announce after reconnects, the relay's probes and
 * replies, and a small queue for messages that arrive while sw_peer_status
 * waits for its answer.
 */
#include "peer.h"

#include "log.h"
#include "probe.h"
#include "seal.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define SW_PEER_QUEUE 64                /* messages kept while sw_peer_status waits */
#define SW_PEER_RETRY_MS 1000           /* re-announce interval while refused / unanswered */
#define S_PROBE_MIN_MS 250              /* shortest probe, also for a last attempt */
#define SW_PEER_ZMTP_BACKSTOP_MS 600000 /* libzmq's own heartbeat timeout */
#define SW_PEER_BACKOFF_MIN_MS 250      /* first delay between start-up attempts */
#define SW_PEER_BACKOFF_MAX_MS 5000     /* longest delay between start-up attempts */
#define SW_PEER_PROBE_MS 3000           /* connect / greeting timeout of one probe */
#define SW_PEER_CUTS_FATAL 2            /* handshakes cut while a relay answers: the key is wrong */

struct sw_peer {
    void *ctx;                   /* own ZeroMQ context (one I/O thread) */
    void *sock;                  /* DEALER connected to the relay */
    void *mon;                   /* PAIR receiving sock's monitor events */
    sw_announce_copy_t announce; /* own copy, sent on every (re)announce */
    int announced;               /* 1 once the relay acked on this connection */
    int n_connects;              /* handshakes completed with the relay */
    int64_t announce_at_ms;      /* next time to send the announce; -1 = none due */
    int constructing;            /* 1 while sw_peer_new waits for the first ack */
    int fatal_code;              /* relay refused the first announce with this code */
    int hs_cut; /* handshakes cut (connection closed) since sw_peer_new last looked */
    sw_wire_msg_t queue[SW_PEER_QUEUE]; /* ring of kept messages */
    int q_head;                         /* index of the oldest kept message */
    int q_len;                          /* kept messages */
    int fd;                             /* TCP socket to the relay (owned by libzmq), -1 = none */
    int silent_limit_ms;                /* no data from the relay this long = reconnect */
    int64_t check_at_ms;                /* next silence check */
    sw_wire_crypto_t crypto;            /* end-to-end sealing (crypto.seal NULL = none) */
    int auth_failed;                    /* the relay refused or revoked our key */
    int curve;                          /* 1 = CurveZMQ handshake (keys given) */
    uint64_t drops;                     /* malformed, unsealed, tampered or replayed messages */
    int n_announces;                    /* announces the relay acknowledged */
    int rename_on_taken;                /* sw_peer_opts_t.rename_on_taken */
    int64_t wrong_key_told_ms;          /* when we last told a peer we cannot open its messages */
};

static int64_t s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * CurveZMQ client keys on the DEALER before connect, and the sealer for
 * end-to-end encryption. Without keys the relay must be on loopback.
 */
static int s_peer_secure(sw_peer_t *p, const sw_sec_t *sec, const char *relay,
                         int accept_clear_errors, int skew_ms)
{
    char err[256];
    if (!sec || sec->insecure) {
        if (!sw_endpoint_is_loopback(relay)) {
            SW_ERR("peer %s: no keys given, and the relay %s is not on loopback: refusing an "
                   "unauthenticated, unencrypted connection (see docs/security.md)",
                   p->announce.name, relay);
            return -1;
        }
    } else {
        if (sw_keys_curve_check(err, sizeof err) != 0) {
            SW_ERR("peer %s: %s", p->announce.name, err);
            return -1;
        }
        if (zmq_setsockopt(p->sock, ZMQ_CURVE_SERVERKEY, sec->relay_pub, SW_KEY_Z85_LEN + 1) ||
            zmq_setsockopt(p->sock, ZMQ_CURVE_PUBLICKEY, sec->pub, SW_KEY_Z85_LEN + 1) ||
            zmq_setsockopt(p->sock, ZMQ_CURVE_SECRETKEY, sec->sec, SW_KEY_Z85_LEN + 1)) {
            SW_ERR("peer %s: setting the CURVE keys: %s", p->announce.name, zmq_strerror(errno));
            return -1;
        }
        p->curve = 1;
    }
    if (sec && sec->n_cluster > 0 &&
        !(p->crypto.seal = sw_seal_new(sec->cluster, sec->n_cluster, SW_SEAL_CLUSTER))) {
        SW_ERR("peer %s: cannot set up end-to-end encryption", p->announce.name);
        return -1;
    }
    if (sec && sec->n_access > 0 &&
        !(p->crypto.access = sw_seal_new(sec->access, sec->n_access, SW_SEAL_ACCESS))) {
        SW_ERR("peer %s: cannot set up end-to-end encryption", p->announce.name);
        return -1;
    }
    if (skew_ms) { /* tests: machines whose clocks are apart */
        if (p->crypto.seal)
            sw_seal_set_skew(p->crypto.seal, skew_ms);
        if (p->crypto.access)
            sw_seal_set_skew(p->crypto.access, skew_ms);
    }
    p->crypto.self = p->announce.name;
    p->crypto.accept_clear_errors = accept_clear_errors;
    return 0;
}

static int s_setopt_int(void *sock, int opt, int val, const char *what)
{
    if (zmq_setsockopt(sock, opt, &val, sizeof val) != 0) {
        SW_ERR("peer: setting %s = %d: %s", what, val, zmq_strerror(errno));
        return -1;
    }
    return 0;
}

static void s_send_announce(sw_peer_t *p)
{
    sw_msg_t msg = {.type = SW_MSG_ANNOUNCE, .announce = p->announce.a};
    char err[SW_WIRE_ERR_LEN];
    int rc = sw_codec_send(p->sock, SW_WIRE_RELAY_NAME, &msg, ZMQ_DONTWAIT, NULL, err, sizeof err);
    if (rc == SW_WIRE_ESOCKET && errno == EAGAIN) {
        p->announce_at_ms = s_now_ms() + 10; /* handshake not done yet */
        return;
    }
    if (rc)
        SW_WARN("peer %s: announce: %s", p->announce.name, err);
    p->announce_at_ms = s_now_ms() + SW_PEER_RETRY_MS; /* again unless acked by then */
}

int sw_peer_reannounce(sw_peer_t *p, const sw_msg_announce_t *a)
{
    if (!a->name || strcmp(a->name, p->announce.name) != 0 ||
        sw_codec_announce_copy(&p->announce, a) != 0)
        return -1;
    p->announced = 0; /* s_maybe_announce sends it again until the ack */
    s_send_announce(p);
    return 0;
}

/* Reads every pending monitor event. */
static void s_events(sw_peer_t *p)
{
    for (;;) {
        zmq_msg_t ev;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, p->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return;
        }
        uint16_t event = 0;
        uint32_t value = 0;
        if (zmq_msg_size(&ev) >= 2)
            memcpy(&event, zmq_msg_data(&ev), 2);
        if (zmq_msg_size(&ev) >= 6)
            memcpy(&value, (const uint8_t *)zmq_msg_data(&ev) + 2, 4);
        int more = zmq_msg_more(&ev);
        zmq_msg_close(&ev);
        while (more) { /* the endpoint address frame */
            zmq_msg_init(&ev);
            if (zmq_msg_recv(&ev, p->mon, 0) < 0) {
                zmq_msg_close(&ev);
                return;
            }
            more = zmq_msg_more(&ev);
            zmq_msg_close(&ev);
        }
        if (event == ZMQ_EVENT_CONNECTED) {
            p->fd = (int)value; /* the event's value is the new socket */
        } else if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            if (p->n_connects > 0)
                SW_INFO("peer %s: reconnected to the relay, announcing again", p->announce.name);
            p->n_connects++;
            p->announced = 0;
            p->announce_at_ms = s_now_ms();
        } else if (event == ZMQ_EVENT_DISCONNECTED) {
            if (!p->constructing) /* sw_peer_new says what went wrong itself */
                SW_WARN("peer %s: lost the relay connection", p->announce.name);
            p->announced = 0;
            p->fd = -1;
        } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH && value == 300) {
            /* ZAP status 300: for now (our key holds its share of connections that have not
             * announced yet, or all of them): libzmq redials */
            SW_WARN("peer %s: the relay refused this connection for now (this key has too many "
                    "connections open); retrying",
                    p->announce.name);
        } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
            SW_ERR("peer %s: the relay refused our key (not on its allow-list, or revoked)",
                   p->announce.name);
            p->auth_failed = 1;
        } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
            /* The connection closed during the handshake: the relay refused our
             * keys, or it went away (restart, a forwarder with nothing behind it).
             * sw_peer_new probes to tell which; later on libzmq just redials. */
            if (p->constructing)
                p->hs_cut++;
            else
                SW_WARN("peer %s: the connection to the relay closed during the security "
                        "handshake (relay restarting, or a forwarder with no relay behind it; "
                        "if it persists, check --relay-key); retrying",
                        p->announce.name);
        } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
            SW_ERR("peer %s: security handshake with the relay failed (wrong --relay-key, or "
                   "one side runs --insecure-loopback and the other does not)",
                   p->announce.name);
            if (p->constructing)
                p->auth_failed = 1;
        }
    }
}

/* The relay sends ZMTP PINGs every heartbeat interval, so a live relay is
 * never silent for long; its libzmq timeout is not used because it is only
 * reset by whole frames, and a live relay may spend minutes sending one large
 * frame over a thin link. The kernel says when data last arrived. */
static void s_check_silence(sw_peer_t *p)
{
    int64_t now = s_now_ms();
    if (p->fd < 0 || now < p->check_at_ms)
        return;
    p->check_at_ms = now + p->silent_limit_ms / SW_PEER_SILENT_IVLS;
    struct tcp_info ti;
    socklen_t tl = sizeof ti;
    if (getsockopt(p->fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) != 0)
        return;
    if ((int64_t)ti.tcpi_last_data_recv > p->silent_limit_ms) {
        SW_WARN("peer %s: no data from the relay for %u ms: reconnecting", p->announce.name,
                ti.tcpi_last_data_recv);
        /* libzmq sees the end and redials; SHUT_RD, not SHUT_RDWR: an EPOLLHUP on a
         * connection whose queue to this socket is full aborts libzmq 4.3.4 at its next
         * heartbeat (relay/conn.c, relay_cut) */
        shutdown(p->fd, SHUT_RD);
        p->fd = -1;
    }
}

static void s_maybe_announce(sw_peer_t *p)
{
    if (!p->announced && p->announce_at_ms >= 0 && s_now_ms() >= p->announce_at_ms)
        s_send_announce(p);
}

/* A new random suffix for a name "PREFIX-SUFFIX" (the client library's form):
 * the suffix keeps its length. 0, or -1 when the name has none. The sealing
 * takes the new name at once (crypto.self points at it). */
static int s_rename(sw_peer_t *p)
{
    char *dash = strrchr(p->announce.name, '-');
    size_t n = dash ? strlen(dash + 1) : 0;
    if (!dash || n == 0)
        return -1;
    char old[SW_WIRE_NAME_MAX + 1];
    snprintf(old, sizeof old, "%s", p->announce.name);
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++)
        dash[1 + i] = hex[randombytes_uniform(16)];
    SW_WARN("peer %s: another key holds our name now: announcing as %s", old, p->announce.name);
    return 0;
}

/* Handles relay messages meant for this module; 1 when consumed. */
static int s_internal(sw_peer_t *p, const sw_wire_msg_t *m)
{
    if (strcmp(m->peer, SW_WIRE_RELAY_NAME) != 0)
        return 0;
    sw_msg_t d;
    const sw_msg_type_t type = sw_wire_msg_type(m);
    if ((type != SW_MSG_ANNOUNCE_ACK && type != SW_MSG_ERROR) ||
        sw_codec_decode(m, type, &d, NULL, 0) != 0)
        return 0;
    if (type == SW_MSG_ANNOUNCE_ACK) {
        if (!p->announced) {
            SW_INFO("peer %s: announced to the relay (heartbeat %u ms)", p->announce.name,
                    d.ack.heartbeat_ms);
            p->n_announces++;
        }
        p->announced = 1;
        p->announce_at_ms = -1;
        return 1;
    }
    const int code = d.error.code;
    if (code == SW_ERROR_NAME_TAKEN || code == SW_ERROR_VERSION_MISMATCH ||
        code == SW_ERROR_RELAY_FULL) {
        if (p->constructing && p->fatal_code == 0)
            p->fatal_code = code; /* sw_peer_new gives up; later refusals are retried */
        SW_WARN("peer %s: relay refused the announce (%s): %s", p->announce.name,
                sw_wire_error_code_name(code), d.error.message);
        p->announced = 0;
        p->announce_at_ms = s_now_ms() + SW_PEER_RETRY_MS;
        if (code == SW_ERROR_NAME_TAKEN && !p->constructing && p->rename_on_taken &&
            s_rename(p) == 0)
            p->announce_at_ms = s_now_ms();
        return 1;
    }
    if (code == SW_ERROR_UNAUTHORIZED && d.error.dest[0])
        return 0; /* one message of ours was not allowed to go there: the caller's business */
    if (code == SW_ERROR_UNAUTHORIZED) {
        SW_ERR("peer %s: the relay refused us: %s", p->announce.name, d.error.message);
        p->auth_failed = 1;
        if (p->constructing && p->fatal_code == 0)
            p->fatal_code = code;
        return 1;
    }
    if (code == SW_ERROR_NOT_ANNOUNCED) {
        /* The relay lost us (it restarted, or we reconnected): announce now. The
         * error still goes to the caller: the message it answers was dropped. */
        p->announced = 0;
        p->announce_at_ms = s_now_ms();
    }
    return 0;
}

/* One line per dropped message up to 16, then at 32, 64, ...: a flood cannot flood the log. */
static void s_drop_note(sw_peer_t *p, const char *why)
{
    p->drops++;
    if (p->drops <= 16 || (p->drops & (p->drops - 1)) == 0)
        SW_WARN("peer %s: dropped a message: %s (%llu dropped so far)", p->announce.name, why,
                (unsigned long long)p->drops);
}

/*
 * A peer sent us something sealed that none of our keys opens: most likely a
 * client started with another access key. Tell it in clear (we
 * share no key to seal with), at most once a second, so that it can stop
 * waiting and say what is wrong; clients accept such an Error
 * (accept_clear_errors), nodes do not, so two nodes cannot ping-pong.
 */
static void s_tell_wrong_key(sw_peer_t *p, const char *src)
{
    int64_t now = s_now_ms();
    if (!src[0] || now - p->wrong_key_told_ms < 1000)
        return;
    p->wrong_key_told_ms = now;
    if (sw_wire_send_error(p->sock, src, SW_ERROR_UNAUTHORIZED, 0, NULL, NULL,
                           "cannot open your message: it is sealed with a key this peer does not "
                           "hold (clients: check --access-key; nodes: --cluster-key)",
                           ZMQ_DONTWAIT) != 0)
        SW_DEBUG("peer %s: could not tell %s that its key differs", p->announce.name, src);
}

/*
 * Waits for the next message for the caller: 0 got one, 1 timeout (or, with
 * until_announced, the relay acked), -1 error.
 */
static int s_pump(sw_peer_t *p, sw_wire_msg_t *out, int timeout_ms, int until_announced)
{
    int64_t deadline = timeout_ms < 0 ? -1 : s_now_ms() + timeout_ms;
    for (;;) {
        s_events(p);
        s_check_silence(p);
        s_maybe_announce(p);
        if (p->fatal_code || p->auth_failed)
            return -1;
        if (p->constructing && p->hs_cut)
            return 1; /* sw_peer_new decides what the cut means */
        sw_wire_msg_t m = {0};
        char err[SW_WIRE_ERR_LEN];
        int rc = sw_wire_recv_ex(p->sock, ZMQ_DONTWAIT, &m, &p->crypto, err, sizeof err);
        if (rc == SW_WIRE_OK) {
            if (!s_internal(p, &m)) {
                sw_wire_msg_move(out, &m);
                return 0;
            }
            sw_wire_msg_clear(&m);
            if (until_announced && p->announced)
                return 1;
        } else if (rc == SW_WIRE_EKEY) {
            s_drop_note(p, err);
            s_tell_wrong_key(p, m.peer);
        } else if (rc == SW_WIRE_EMALFORMED || rc == SW_WIRE_EVERSION || rc == SW_WIRE_ESEAL) {
            s_drop_note(p, err);
        }
        if (rc != SW_WIRE_ESOCKET) { /* something was read: go on unless time is up */
            if (deadline >= 0 && s_now_ms() > deadline)
                return 1;
            continue;
        }
        if (errno != EAGAIN && errno != EINTR) {
            SW_ERR("peer %s: receive: %s", p->announce.name, zmq_strerror(errno));
            return -1;
        }
        if (errno == EAGAIN) {
            /* nothing waits: what is read from now on reached us after now (its age is
             * judged then, however long this process computes before it reads it) */
            if (p->crypto.seal)
                sw_seal_arrived(p->crypto.seal);
            if (p->crypto.access)
                sw_seal_arrived(p->crypto.access);
        }
        int64_t now = s_now_ms();
        if (deadline >= 0 && now >= deadline)
            return 1;
        int64_t wait = deadline < 0 ? 1000 : deadline - now;
        if (!p->announced && p->announce_at_ms >= 0 && p->announce_at_ms - now < wait)
            wait = p->announce_at_ms - now > 0 ? p->announce_at_ms - now : 0;
        zmq_pollitem_t items[2] = {{p->sock, 0, ZMQ_POLLIN, 0}, {p->mon, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(items, 2, (long)wait) < 0) {
            if (errno == EINTR)
                return 1; /* a signal: let the caller look at its stop flag */
            SW_ERR("peer %s: poll: %s", p->announce.name, zmq_strerror(errno));
            return -1;
        }
    }
}

/* Sleeps ms in short slices; 1 when *stop was set meanwhile. */
static int s_nap(int64_t ms, volatile sig_atomic_t *stop)
{
    int64_t until = s_now_ms() + ms;
    for (;;) {
        if (stop && *stop)
            return 1;
        int64_t left = until - s_now_ms();
        if (left <= 0)
            return 0;
        poll(NULL, 0, (int)(left < 200 ? left : 200));
    }
}

/* "giving up in 12 s" or "no deadline" for an attempt line. */
static void s_left_text(int64_t deadline, char *buf, size_t len)
{
    if (deadline < 0)
        snprintf(buf, len, "no deadline");
    else
        snprintf(buf, len, "giving up in %.0f s", (deadline - s_now_ms()) / 1e3);
}

/* The mechanism this peer's handshake uses. */
static const char *s_mech(const sw_peer_t *p)
{
    return p->curve ? "CURVE" : "NULL";
}

/* 0 when a relay's greeting names our mechanism (or none was read). */
static int s_mech_check(const sw_peer_t *p, const char *relay, const char *mech)
{
    if (!mech[0] || strcmp(mech, s_mech(p)) == 0)
        return 0;
    if (!strcmp(s_mech(p), "CURVE"))
        SW_ERR("peer %s: the relay at %s runs without keys (--insecure-loopback) but this peer "
               "has keys: start both with keys, or both with --insecure-loopback",
               p->announce.name, relay);
    else
        SW_ERR("peer %s: the relay at %s requires keys (CurveZMQ, mechanism %s) but this peer "
               "runs --insecure-loopback: give it --key, --relay-key and --cluster-key",
               p->announce.name, relay, mech);
    return -1;
}

/*
 * Before the first dial: waits until a relay greets us at the endpoint
 * (probe.h), retrying with a doubling delay and one progress line (sw_log_progress). 0 = dial
 * now, -1 = give up (logged). Endpoints that cannot be probed pass at once.
 */
static int s_wait_reachable(sw_peer_t *p, const char *relay, int64_t deadline,
                            volatile sig_atomic_t *stop, int *attempt)
{
    int64_t backoff = SW_PEER_BACKOFF_MIN_MS;
    sw_probe_rc said = SW_PROBE_OK; /* the reason the progress line gave last */
    for (;;) {
        char mech[SW_PROBE_MECH_MAX + 1], why[256], left[64];
        int64_t now = s_now_ms();
        /* The last attempt still gets a fair probe: one cut to the last
         * millisecond times out and then blames a firewall for a relay that
         * refused every connection. */
        int ms = SW_PEER_PROBE_MS;
        if (deadline >= 0 && deadline - now < ms)
            ms = deadline - now > S_PROBE_MIN_MS ? (int)(deadline - now) : S_PROBE_MIN_MS;
        sw_probe_rc rc = sw_probe_relay(relay, ms, mech, why, sizeof why);
        ++*attempt;
        if (rc == SW_PROBE_OK || rc == SW_PROBE_UNSUPPORTED) {
            if (s_mech_check(p, relay, mech) != 0)
                return -1;
            if (*attempt > 1)
                SW_INFO("peer %s: the relay at %s answers (attempt %d)", p->announce.name, relay,
                        *attempt);
            return 0;
        }
        if (!sw_probe_retryable(rc)) {
            SW_ERR("peer %s: relay %s: %s", p->announce.name, relay, why);
            return -1;
        }
        now = s_now_ms();
        if (deadline >= 0 && now >= deadline) {
            if (rc == SW_PROBE_RESOLVE)
                SW_ERR("peer %s: the relay at %s is not reachable: %s (%d attempts): give the "
                       "relay machine's host name or IP address (tcp://HOST:PORT)",
                       p->announce.name, relay, why, *attempt);
            else
                SW_ERR("peer %s: the relay at %s is not reachable: %s (%d attempts): start it, "
                       "check the address and the firewall, or wait longer (--connect-timeout-s)",
                       p->announce.name, relay, why, *attempt);
            return -1;
        }
        int64_t delay = backoff;
        if (deadline >= 0 && deadline - now < delay)
            delay = deadline - now;
        s_left_text(deadline, left, sizeof left);
        /* One line per wait (updated in place on a terminal), not one per
         * attempt; a log gets a new line only when the reason changes. */
        const int changed = rc != said;
        said = rc;
        sw_log_progress(SW_LOG_WARN, changed,
                        "peer %s: waiting for the relay at %s: %s (attempt %d, %s)",
                        p->announce.name, relay, why, *attempt, left);
        if (s_nap(delay, stop)) {
            SW_ERR("peer %s: interrupted while waiting for the relay", p->announce.name);
            return -1;
        }
        backoff = backoff * 2 > SW_PEER_BACKOFF_MAX_MS ? SW_PEER_BACKOFF_MAX_MS : backoff * 2;
    }
}

/*
 * A handshake was cut while sw_peer_new waited: if a relay with our mechanism
 * still greets us at the endpoint, the relay closed it (it does that when our
 * HELLO is not sealed to its key). *cuts counts that in a row. 0 = keep
 * waiting (libzmq redials), -1 = give up (logged).
 */
static int s_on_cut(sw_peer_t *p, const char *relay, int64_t deadline, int *cuts, int *attempt)
{
    char mech[SW_PROBE_MECH_MAX + 1], why[256], left[64];
    sw_probe_rc rc = sw_probe_relay(relay, SW_PEER_PROBE_MS, mech, why, sizeof why);
    if (rc == SW_PROBE_OK || rc == SW_PROBE_UNSUPPORTED) {
        if (s_mech_check(p, relay, mech) != 0)
            return -1;
        if (++*cuts >= SW_PEER_CUTS_FATAL) {
            SW_ERR("peer %s: the relay at %s closes our security handshake while it answers "
                   "others: its key is not the one given with --relay-key (check relay.pub)",
                   p->announce.name, relay);
            return -1;
        }
        return 0;
    }
    *cuts = 0;
    ++*attempt;
    s_left_text(deadline, left, sizeof left);
    sw_log_progress(SW_LOG_WARN, *attempt == 1,
                    "peer %s: waiting for the relay at %s: %s (attempt %d, %s)", p->announce.name,
                    relay, why, *attempt, left);
    return 0;
}

sw_peer_t *sw_peer_new(const sw_peer_opts_t *opts)
{
    char err[SW_WIRE_ERR_LEN];
    if (!opts || !opts->relay || !opts->announce) {
        SW_ERR("peer: relay endpoint and announce are required");
        return NULL;
    }
    const sw_msg_t probe = {.type = SW_MSG_ANNOUNCE, .announce = *opts->announce};
    if (sw_codec_validate(&probe, err, sizeof err) != SW_WIRE_OK) {
        SW_ERR("peer: invalid announce: %s", err);
        return NULL;
    }
    if (strcmp(opts->announce->name, SW_WIRE_RELAY_NAME) == 0) {
        SW_ERR("peer: the name '%s' is reserved for the relay", SW_WIRE_RELAY_NAME);
        return NULL;
    }
    int hb = opts->heartbeat_ms > 0 ? opts->heartbeat_ms : SW_PEER_DEFAULT_HEARTBEAT_MS;
    int connect_ms = opts->connect_timeout_ms > 0   ? opts->connect_timeout_ms
                     : opts->connect_timeout_ms < 0 ? -1
                                                    : SW_PEER_DEFAULT_CONNECT_MS;
    int64_t deadline = connect_ms < 0 ? -1 : s_now_ms() + connect_ms;
    int attempt = 0, cuts = 0;
    int send_ms = opts->send_timeout_ms > 0 ? opts->send_timeout_ms : 10000;
    char mon_ep[64];

    sw_peer_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->announce_at_ms = 0;
    p->fd = -1;
    p->rename_on_taken = opts->rename_on_taken;
    p->silent_limit_ms = hb > 600000 / SW_PEER_SILENT_IVLS ? 600000 : SW_PEER_SILENT_IVLS * hb;
    if (sw_codec_announce_copy(&p->announce, opts->announce) != 0) {
        SW_ERR("peer: the announce does not fit its copy");
        goto err_quiet;
    }
    p->ctx = zmq_ctx_new();
    if (!p->ctx)
        goto err;
    p->sock = zmq_socket(p->ctx, ZMQ_DEALER);
    if (!p->sock)
        goto err;
    int64_t maxmsg = SW_WIRE_MAX_FRAME;
    if (s_setopt_int(p->sock, ZMQ_LINGER, 500, "ZMQ_LINGER") ||
        s_setopt_int(p->sock, ZMQ_IMMEDIATE, 1, "ZMQ_IMMEDIATE") ||
        s_setopt_int(p->sock, ZMQ_HEARTBEAT_IVL, hb, "ZMQ_HEARTBEAT_IVL") ||
        s_setopt_int(p->sock, ZMQ_HEARTBEAT_TIMEOUT, SW_PEER_ZMTP_BACKSTOP_MS,
                     "ZMQ_HEARTBEAT_TIMEOUT") ||
        s_setopt_int(p->sock, ZMQ_HEARTBEAT_TTL, 0, "ZMQ_HEARTBEAT_TTL") ||
        s_setopt_int(p->sock, ZMQ_RECONNECT_IVL, 100, "ZMQ_RECONNECT_IVL") ||
        s_setopt_int(p->sock, ZMQ_RECONNECT_IVL_MAX, 2000, "ZMQ_RECONNECT_IVL_MAX") ||
        s_setopt_int(p->sock, ZMQ_SNDTIMEO, send_ms, "ZMQ_SNDTIMEO") ||
        s_setopt_int(p->sock, ZMQ_TCP_KEEPALIVE, 1, "ZMQ_TCP_KEEPALIVE"))
        goto err;
    if (zmq_setsockopt(p->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0)
        goto err;
    if (s_peer_secure(p, opts->sec, opts->relay, opts->accept_clear_errors,
                      opts->test_clock_skew_ms) != 0)
        goto err_quiet;
    snprintf(mon_ep, sizeof mon_ep, "inproc://sw-peer-monitor-%p", (void *)p);
    if (zmq_socket_monitor(p->sock, mon_ep,
                           ZMQ_EVENT_CONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                               ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0)
        goto err;
    p->mon = zmq_socket(p->ctx, ZMQ_PAIR);
    if (!p->mon || zmq_connect(p->mon, mon_ep) != 0)
        goto err;
    if (s_wait_reachable(p, opts->relay, deadline, opts->stop, &attempt) != 0)
        goto err_quiet;
    if (zmq_connect(p->sock, opts->relay) != 0) {
        SW_ERR("peer %s: cannot connect to %s: %s", p->announce.name, opts->relay,
               zmq_strerror(errno));
        goto err;
    }

    /* Wait for the ack; anything else that arrives is kept for sw_peer_recv. */
    p->constructing = 1;
    while (!p->announced) {
        if (opts->stop && *opts->stop) {
            SW_ERR("peer %s: interrupted while joining the relay", p->announce.name);
            goto err_quiet;
        }
        int64_t left = deadline < 0 ? 1000 : deadline - s_now_ms();
        if (left <= 0) {
            SW_ERR("peer %s: no answer from the relay at %s within %d ms", p->announce.name,
                   opts->relay, connect_ms);
            goto err_quiet;
        }
        sw_wire_msg_t m = {0};
        int rc = s_pump(p, &m, (int)(left < 1000 ? left : 1000), 1);
        if (rc < 0) {
            if (p->fatal_code)
                SW_ERR("peer %s: the relay at %s refused us (%s)", p->announce.name, opts->relay,
                       sw_wire_error_code_name(p->fatal_code));
            goto err_quiet;
        }
        if (p->hs_cut) {
            p->hs_cut = 0;
            if (s_on_cut(p, opts->relay, deadline, &cuts, &attempt) != 0)
                goto err_quiet;
        }
        if (rc == 0) {
            if (p->q_len < SW_PEER_QUEUE)
                sw_wire_msg_move(&p->queue[(p->q_head + p->q_len++) % SW_PEER_QUEUE], &m);
            else
                sw_wire_msg_clear(&m);
        }
    }
    p->constructing = 0;
    return p;
err:
    if (p->ctx && (!p->sock || !p->mon))
        SW_ERR("peer: socket setup failed: %s", zmq_strerror(errno));
err_quiet:
    sw_peer_destroy(&p);
    return NULL;
}

void sw_peer_destroy(sw_peer_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    sw_peer_t *p = *self_p;
    while (p->q_len > 0) {
        sw_wire_msg_clear(&p->queue[p->q_head]);
        p->q_head = (p->q_head + 1) % SW_PEER_QUEUE;
        p->q_len--;
    }
    if (p->sock) {
        zmq_socket_monitor(p->sock, NULL, 0);
        zmq_close(p->sock);
    }
    if (p->mon) {
        int zero = 0;
        zmq_setsockopt(p->mon, ZMQ_LINGER, &zero, sizeof zero);
        zmq_close(p->mon);
    }
    if (p->ctx)
        zmq_ctx_term(p->ctx);
    sw_seal_destroy(&p->crypto.seal);
    sw_seal_destroy(&p->crypto.access);
    free(p);
    *self_p = NULL;
}

const char *sw_peer_name(const sw_peer_t *peer)
{
    return peer->announce.name;
}

void *sw_peer_socket(sw_peer_t *peer)
{
    return peer->sock;
}

int sw_peer_pending(const sw_peer_t *peer)
{
    return peer->q_len;
}

int sw_peer_send(sw_peer_t *peer, const char *dest, sw_envelope_t *env, const void *payload,
                 size_t payload_len, int has_payload)
{
    /* A reconnect seen now must be followed by the announce before this message. */
    s_events(peer);
    s_maybe_announce(peer);
    char err[SW_WIRE_ERR_LEN];
    if (peer->auth_failed) {
        SW_ERR("peer %s: the relay refused our key; not sending", peer->announce.name);
        return SW_WIRE_ESOCKET;
    }
    int rc = sw_wire_send_ex(peer->sock, dest, env, payload, payload_len, has_payload, 0,
                             &peer->crypto, err, sizeof err);
    if (rc) {
        if (rc == SW_WIRE_ESOCKET && errno == EAGAIN)
            SW_ERR("peer %s: send to %s timed out (relay unreachable or queue full)",
                   peer->announce.name, dest ? dest : "?");
        else
            SW_ERR("peer %s: %s", peer->announce.name, err);
    }
    return rc;
}

int sw_peer_recv(sw_peer_t *peer, sw_wire_msg_t *msg, int timeout_ms)
{
    if (peer->q_len > 0) {
        sw_wire_msg_move(msg, &peer->queue[peer->q_head]);
        peer->q_head = (peer->q_head + 1) % SW_PEER_QUEUE;
        peer->q_len--;
        return 0;
    }
    return s_pump(peer, msg, timeout_ms, 0);
}

int sw_peer_status(sw_peer_t *peer, sw_wire_msg_t *table_msg, int timeout_ms)
{
    const sw_msg_t q = {.type = SW_MSG_STATUS_QUERY};
    if (sw_peer_send_msg(peer, SW_WIRE_RELAY_NAME, &q) != 0)
        return -1;
    int64_t deadline = s_now_ms() + (timeout_ms < 0 ? 0 : timeout_ms);
    for (;;) {
        int64_t left = timeout_ms < 0 ? -1 : deadline - s_now_ms();
        if (timeout_ms >= 0 && left < 0)
            left = 0;
        sw_wire_msg_t m = {0};
        int rc = s_pump(peer, &m, (int)left, 0);
        if (rc != 0)
            return rc;
        if (strcmp(m.peer, SW_WIRE_RELAY_NAME) == 0 && sw_wire_msg_type(&m) == SW_MSG_PEER_TABLE) {
            sw_wire_msg_move(table_msg, &m);
            return 0;
        }
        if (peer->q_len < SW_PEER_QUEUE) {
            sw_wire_msg_move(&peer->queue[(peer->q_head + peer->q_len) % SW_PEER_QUEUE], &m);
            peer->q_len++;
        } else {
            SW_WARN("peer %s: queue full, dropped a %s from %s", peer->announce.name,
                    sw_wire_type_name(sw_wire_msg_type(&m)), m.peer);
            sw_wire_msg_clear(&m);
        }
    }
}

int sw_peer_try_send(sw_peer_t *peer, const char *dest, sw_envelope_t *env)
{
    s_events(peer);
    s_maybe_announce(peer);
    if (peer->auth_failed)
        return SW_WIRE_ESOCKET;
    char err[SW_WIRE_ERR_LEN];
    int rc = sw_wire_send_ex(peer->sock, dest, env, NULL, 0, 0, ZMQ_DONTWAIT, &peer->crypto, err,
                             sizeof err);
    if (rc && !(rc == SW_WIRE_ESOCKET && errno == EAGAIN))
        SW_ERR("peer %s: %s", peer->announce.name, err);
    return rc;
}

int sw_peer_connects(sw_peer_t *peer)
{
    s_events(peer);
    return peer->n_connects;
}

int sw_peer_announces(sw_peer_t *peer)
{
    return peer->n_announces;
}

/* Where sw_peer_send_msg / sw_peer_try_send_msg hand the codec's Envelope. */
typedef struct s_msg_ctx {
    sw_peer_t *peer;
    const char *dest;
    int try_send; /* 1: sw_peer_try_send (no payload) */
} s_msg_ctx_t;

static int s_msg_sink(void *ctx, sw_envelope_t *env, const void *payload, size_t payload_len,
                      int has_payload)
{
    const s_msg_ctx_t *c = ctx;
    if (!c->try_send)
        return sw_peer_send(c->peer, c->dest, env, payload, payload_len, has_payload);
    if (has_payload) {
        SW_ERR("peer %s: a message with a payload cannot be sent without waiting",
               c->peer->announce.name);
        return SW_WIRE_EMALFORMED;
    }
    return sw_peer_try_send(c->peer, c->dest, env);
}

static int s_send_msg(sw_peer_t *peer, const char *dest, const sw_msg_t *msg, int try_send)
{
    char err[SW_WIRE_ERR_LEN] = "";
    s_msg_ctx_t c = {peer, dest, try_send};
    int rc = sw_codec_emit(msg, s_msg_sink, &c, err, sizeof err);
    if (rc && err[0]) /* the codec refused it (the sends log their own failures) */
        SW_ERR("peer %s: %s", peer->announce.name, err);
    return rc;
}

int sw_peer_send_msg(sw_peer_t *peer, const char *dest, const sw_msg_t *msg)
{
    return s_send_msg(peer, dest, msg, 0);
}

int sw_peer_try_send_msg(sw_peer_t *peer, const char *dest, const sw_msg_t *msg)
{
    return s_send_msg(peer, dest, msg, 1);
}
