/*
 * link.c - one relay link of a peer (peer_impl.h): the DEALER socket and its
 * options, the monitor events (connects, handshakes, losses), the silence
 * check, the announce, and the start-up probes that say why a relay does not
 * answer. peer.c owns the peer and calls these; nothing here calls peer.c.
 */
#include "peer_impl.h"

#include "log.h"
#include "probe.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define S_PROBE_MIN_MS 250              /* shortest probe, also for a last attempt */
#define SW_PEER_ZMTP_BACKSTOP_MS 600000 /* libzmq's own heartbeat timeout */
#define SW_PEER_BACKOFF_MIN_MS 250      /* first delay between start-up attempts */
#define SW_PEER_BACKOFF_MAX_MS 5000     /* longest delay between start-up attempts */
#define SW_PEER_PROBE_MS 3000           /* connect / greeting timeout of one probe */
#define SW_PEER_CUTS_FATAL 2            /* handshakes cut while a relay answers: the key is wrong */
#define S_PROBE_ONE_MS 1000             /* the one probe of each relay of a list at start-up */

int64_t link_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int link_setopt_int(void *sock, int opt, int val, const char *what)
{
    if (zmq_setsockopt(sock, opt, &val, sizeof val) != 0) {
        SW_ERR("peer: setting %s = %d: %s", what, val, zmq_strerror(errno));
        return -1;
    }
    return 0;
}

/* CurveZMQ client keys on l's DEALER before it dials (relay_pub pinned for this
 * relay); without keys the relay must be on loopback. */
static int s_secure(sw_peer_t *p, sw_link_t *l, const char *relay_pub, const sw_sec_t *sec)
{
    char err[256];
    if (!sec || sec->insecure) {
        if (!sw_endpoint_is_loopback(l->ep)) {
            SW_ERR("peer %s: no keys given, and the relay %s is not on loopback: refusing an "
                   "unauthenticated, unencrypted connection (see docs/security.md)",
                   p->announce.name, l->ep);
            return -1;
        }
        return 0;
    }
    if (sw_keys_curve_check(err, sizeof err) != 0) {
        SW_ERR("peer %s: %s", p->announce.name, err);
        return -1;
    }
    if (zmq_setsockopt(l->sock, ZMQ_CURVE_SERVERKEY, relay_pub, SW_KEY_Z85_LEN + 1) ||
        zmq_setsockopt(l->sock, ZMQ_CURVE_PUBLICKEY, sec->pub, SW_KEY_Z85_LEN + 1) ||
        zmq_setsockopt(l->sock, ZMQ_CURVE_SECRETKEY, sec->sec, SW_KEY_Z85_LEN + 1)) {
        SW_ERR("peer %s: setting the CURVE keys: %s", p->announce.name, zmq_strerror(errno));
        return -1;
    }
    p->curve = 1;
    return 0;
}

int link_open(sw_peer_t *p, sw_link_t *l, const char *ep, const char *relay_pub,
              const sw_sec_t *sec)
{
    char mon_ep[64];
    snprintf(l->ep, sizeof l->ep, "%s", ep);
    l->fd = -1;
    l->announce_at_ms = 0;
    l->sock = zmq_socket(p->ctx, ZMQ_DEALER);
    if (!l->sock)
        goto err;
    int64_t maxmsg = SW_WIRE_MAX_FRAME;
    if (link_setopt_int(l->sock, ZMQ_LINGER, 500, "ZMQ_LINGER") ||
        link_setopt_int(l->sock, ZMQ_IMMEDIATE, 1, "ZMQ_IMMEDIATE") ||
        link_setopt_int(l->sock, ZMQ_HEARTBEAT_IVL, p->hb_ms, "ZMQ_HEARTBEAT_IVL") ||
        link_setopt_int(l->sock, ZMQ_HEARTBEAT_TIMEOUT, SW_PEER_ZMTP_BACKSTOP_MS,
                        "ZMQ_HEARTBEAT_TIMEOUT") ||
        link_setopt_int(l->sock, ZMQ_HEARTBEAT_TTL, 0, "ZMQ_HEARTBEAT_TTL") ||
        link_setopt_int(l->sock, ZMQ_RECONNECT_IVL, 100, "ZMQ_RECONNECT_IVL") ||
        link_setopt_int(l->sock, ZMQ_RECONNECT_IVL_MAX, 2000, "ZMQ_RECONNECT_IVL_MAX") ||
        link_setopt_int(l->sock, ZMQ_SNDTIMEO, p->send_ms, "ZMQ_SNDTIMEO") ||
        link_setopt_int(l->sock, ZMQ_TCP_KEEPALIVE, 1, "ZMQ_TCP_KEEPALIVE"))
        return -1;
    if (zmq_setsockopt(l->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0)
        goto err;
    if (s_secure(p, l, relay_pub, sec) != 0)
        return -1;
    snprintf(mon_ep, sizeof mon_ep, "inproc://sw-peer-monitor-%p", (void *)l);
    if (zmq_socket_monitor(l->sock, mon_ep,
                           ZMQ_EVENT_CONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                               ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0)
        goto err;
    l->mon = zmq_socket(p->ctx, ZMQ_PAIR);
    if (!l->mon || zmq_connect(l->mon, mon_ep) != 0)
        goto err;
    return 0;
err:
    SW_ERR("peer: socket setup failed: %s", zmq_strerror(errno));
    return -1;
}

int link_dial(sw_peer_t *p, sw_link_t *l)
{
    if (zmq_connect(l->sock, l->ep) != 0) {
        SW_ERR("peer %s: cannot connect to %s: %s", p->announce.name, l->ep, zmq_strerror(errno));
        return -1;
    }
    l->dialled = 1;
    return 0;
}

void link_close(sw_link_t *l)
{
    if (l->sock) {
        zmq_socket_monitor(l->sock, NULL, 0);
        zmq_close(l->sock);
        l->sock = NULL;
    }
    if (l->mon) {
        int zero = 0;
        zmq_setsockopt(l->mon, ZMQ_LINGER, &zero, sizeof zero);
        zmq_close(l->mon);
        l->mon = NULL;
    }
    l->announced = 0;
    l->fd = -1;
}

void link_send_announce(sw_peer_t *p, sw_link_t *l)
{
    sw_msg_t msg = {.type = SW_MSG_ANNOUNCE, .announce = p->announce.a};
    const long rtt = link_rtt_us(l); /* this link's own (status: a hop's time by this relay) */
    msg.announce.relay_rtt_us = rtt <= 0                           ? 0
                                : rtt > (long)SW_WIRE_MAX_PROBE_US ? SW_WIRE_MAX_PROBE_US
                                                                   : (uint32_t)rtt;
    char err[SW_WIRE_ERR_LEN];
    int rc = sw_codec_send(l->sock, SW_WIRE_RELAY_NAME, &msg, ZMQ_DONTWAIT, NULL, err, sizeof err);
    if (rc == SW_WIRE_ESOCKET && errno == EAGAIN) {
        l->announce_at_ms = link_now_ms() + 10; /* handshake not done yet */
        return;
    }
    if (rc)
        SW_WARN("peer %s: announce: %s", p->announce.name, err);
    l->announce_at_ms = link_now_ms() + SW_PEER_RETRY_MS; /* again unless acked by then */
}

void link_maybe_announce(sw_peer_t *p, sw_link_t *l)
{
    if (!l->dead && !l->announced && l->announce_at_ms >= 0 && link_now_ms() >= l->announce_at_ms)
        link_send_announce(p, l);
}

/* TCP_INFO of fd: its smoothed round trip (us) or, with silent, ms since data last came in;
 * -1 when fd is not a TCP socket. */
static long s_tcp_info(int fd, int silent)
{
    struct tcp_info ti;
    socklen_t tl = sizeof ti;
    if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) != 0)
        return -1;
    return silent ? (long)ti.tcpi_last_data_recv : (long)ti.tcpi_rtt;
}

long link_fd_rtt_us(int fd)
{
    return s_tcp_info(fd, 0);
}

long link_fd_silent_ms(int fd)
{
    return s_tcp_info(fd, 1);
}

long link_rtt_us(const sw_link_t *l)
{
    return link_fd_rtt_us(l->fd);
}

int link_read_event(void *mon, uint16_t *event, uint32_t *value)
{
    zmq_msg_t ev;
    zmq_msg_init(&ev);
    if (zmq_msg_recv(&ev, mon, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&ev);
        return 0;
    }
    *event = 0;
    *value = 0;
    if (zmq_msg_size(&ev) >= 2)
        memcpy(event, zmq_msg_data(&ev), 2);
    if (zmq_msg_size(&ev) >= 6)
        memcpy(value, (const uint8_t *)zmq_msg_data(&ev) + 2, 4);
    int more = zmq_msg_more(&ev);
    zmq_msg_close(&ev);
    while (more) { /* the endpoint address frame */
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, mon, 0) < 0) {
            zmq_msg_close(&ev);
            return 1;
        }
        more = zmq_msg_more(&ev);
        zmq_msg_close(&ev);
    }
    return 1;
}

int link_live(const sw_link_t *l)
{
    return !l->dead && l->announced;
}

/* Reads every pending monitor event. */
void link_events(sw_peer_t *p, sw_link_t *l)
{
    uint16_t event;
    uint32_t value;
    while (link_read_event(l->mon, &event, &value)) {
        if (event == ZMQ_EVENT_CONNECTED) {
            l->fd = (int)value; /* the event's value is the new socket */
        } else if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            if (l->n_connects > 0)
                SW_INFO("peer %s: reconnected to the relay, announcing again", p->announce.name);
            l->n_connects++;
            l->announced = 0;
            l->announce_at_ms = link_now_ms();
        } else if (event == ZMQ_EVENT_DISCONNECTED) {
            if (!p->constructing) /* sw_peer_new says what went wrong itself */
                SW_WARN("peer %s: lost the connection to the relay %s", p->announce.name, l->ep);
            if (l->announced) {
                l->losses++;
                p->epoch++;
            }
            l->announced = 0;
            l->fd = -1;
        } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH && value == 300) {
            /* ZAP status 300: for now (our key holds its share of connections that have not
             * announced yet, or all of them): libzmq redials */
            SW_WARN("peer %s: the relay refused this connection for now (this key has too many "
                    "connections open); retrying",
                    p->announce.name);
        } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
            SW_ERR("peer %s: the relay %s refused our key (not on its allow-list, or revoked)",
                   p->announce.name, l->ep);
            l->auth_failed = 1;
        } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
            /* The connection closed during the handshake: the relay refused our
             * keys, or it went away (restart, a forwarder with nothing behind it).
             * sw_peer_new probes to tell which; later on libzmq just redials. */
            if (p->constructing)
                l->hs_cut++;
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
                l->auth_failed = 1;
        }
    }
}

/* The relay sends ZMTP PINGs every heartbeat interval, so a live relay is
 * never silent for long; its libzmq timeout is not used because it is only
 * reset by whole frames, and a live relay may spend minutes sending one large
 * frame over a thin link. The kernel says when data last arrived. */
void link_check_silence(sw_peer_t *p, sw_link_t *l)
{
    int64_t now = link_now_ms();
    if (l->fd < 0 || now < l->check_at_ms)
        return;
    l->check_at_ms = now + p->silent_limit_ms / SW_PEER_SILENT_IVLS;
    const long silent = link_fd_silent_ms(l->fd);
    if (silent > p->silent_limit_ms) {
        SW_WARN("peer %s: no data from the relay %s for %ld ms: reconnecting", p->announce.name,
                l->ep, silent);
        /* libzmq sees the end and redials; SHUT_RD, not SHUT_RDWR: an EPOLLHUP on a
         * connection whose queue to this socket is full aborts libzmq 4.3.4 at its next
         * heartbeat (relay/conn.c, relay_cut) */
        shutdown(l->fd, SHUT_RD);
        l->fd = -1;
        if (l->announced) { /* lost now: no message goes by it until it is back */
            l->losses++;
            p->epoch++;
        }
        l->announced = 0;
    }
}

/* Sleeps ms in short slices; 1 when *stop was set meanwhile. */
static int s_nap(int64_t ms, volatile sig_atomic_t *stop)
{
    int64_t until = link_now_ms() + ms;
    for (;;) {
        if (stop && *stop)
            return 1;
        int64_t left = until - link_now_ms();
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
        snprintf(buf, len, "giving up in %.0f s", (deadline - link_now_ms()) / 1e3);
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
int link_wait_reachable(sw_peer_t *p, const char *relay, int64_t deadline,
                        volatile sig_atomic_t *stop, int *attempt)
{
    int64_t backoff = SW_PEER_BACKOFF_MIN_MS;
    sw_probe_rc said = SW_PROBE_OK; /* the reason the progress line gave last */
    for (;;) {
        char mech[SW_PROBE_MECH_MAX + 1], why[256], left[64];
        int64_t now = link_now_ms();
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
        now = link_now_ms();
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
int link_on_cut(sw_peer_t *p, const char *relay, int64_t deadline, int *cuts, int *attempt)
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

int link_probe_once(sw_peer_t *p, sw_link_t *l, char *why, size_t why_len)
{
    char mech[SW_PROBE_MECH_MAX + 1];
    why[0] = 0;
    sw_probe_rc rc = sw_probe_relay(l->ep, S_PROBE_ONE_MS, mech, why, why_len);
    if (rc == SW_PROBE_OK || rc == SW_PROBE_UNSUPPORTED) {
        why[0] = 0;
        return s_mech_check(p, l->ep, mech);
    }
    if (!sw_probe_retryable(rc)) {
        SW_ERR("peer %s: relay %s: %s", p->announce.name, l->ep, why);
        return -1;
    }
    return 0; /* not up yet: libzmq dials it until it is */
}
