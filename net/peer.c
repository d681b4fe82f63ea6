/*
 * peer.c - a peer's DEALER connection to the relay (see peer.h): socket
 * options, announce / re-announce after reconnects, the relay's probes and
 * replies, and a bounded queue for messages that arrive while sw_peer_status
 * waits for its answer.
 */
#include "peer_impl.h"

#include "log.h"
#include "probe.h"
#include "seal.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define s_now_ms link_now_ms

/* The sealer for end-to-end encryption (the CURVE keys are per link: link.c). */
static int s_peer_secure(sw_peer_t *p, const sw_sec_t *sec, int accept_clear_errors, int skew_ms)
{
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

int sw_peer_reannounce(sw_peer_t *p, const sw_msg_announce_t *a)
{
    if (!a->name || strcmp(a->name, p->announce.name) != 0 ||
        sw_codec_announce_copy(&p->announce, a) != 0)
        return -1;
    direct_announce_fields(p); /* the listener and direct links are this module's to say */
    for (int i = 0; i < p->n_links; i++) {
        sw_link_t *l = &p->links[i];
        if (l->dead)
            continue;
        l->announced = 0; /* link_maybe_announce sends it again until the ack */
        link_send_announce(p, l);
    }
    return 0;
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

/* Handles relay messages meant for this module (from l's relay); 1 when consumed. */
static int s_internal(sw_peer_t *p, sw_link_t *l, const sw_wire_msg_t *m)
{
    if (strcmp(m->peer, SW_WIRE_RELAY_NAME) != 0)
        return 0;
    sw_msg_t d;
    const sw_msg_type_t type = sw_wire_msg_type(m);
    if ((type != SW_MSG_ANNOUNCE_ACK && type != SW_MSG_ERROR) ||
        sw_codec_decode(m, type, &d, NULL, 0) != 0)
        return 0;
    if (type == SW_MSG_ANNOUNCE_ACK) {
        if (!l->announced) {
            if (p->n_links > 1)
                SW_INFO("peer %s: announced to the relay %s (heartbeat %u ms)", p->announce.name,
                        l->ep, d.ack.heartbeat_ms);
            else
                SW_INFO("peer %s: announced to the relay (heartbeat %u ms)", p->announce.name,
                        d.ack.heartbeat_ms);
            p->n_announces++;
            l->n_announces++;
        }
        l->announced = 1;
        l->announce_at_ms = -1;
        return 1;
    }
    const int code = d.error.code;
    if (code == SW_ERROR_NAME_TAKEN || code == SW_ERROR_VERSION_MISMATCH ||
        code == SW_ERROR_RELAY_FULL) {
        if (p->constructing && l->fatal_code == 0)
            l->fatal_code = code; /* sw_peer_new gives up on it; later refusals are retried */
        SW_WARN("peer %s: relay %s refused the announce (%s): %s", p->announce.name, l->ep,
                sw_wire_error_code_name(code), d.error.message);
        l->announced = 0;
        l->announce_at_ms = s_now_ms() + SW_PEER_RETRY_MS;
        if (code == SW_ERROR_NAME_TAKEN && !p->constructing && p->rename_on_taken &&
            s_rename(p) == 0)
            for (int i = 0; i < p->n_links; i++) { /* the new name goes to every relay */
                p->links[i].announced = 0;
                p->links[i].announce_at_ms = s_now_ms();
            }
        return 1;
    }
    if (code == SW_ERROR_UNAUTHORIZED && d.error.dest[0])
        return 0; /* one message of ours was not allowed to go there: the caller's business */
    if (code == SW_ERROR_UNAUTHORIZED) {
        SW_ERR("peer %s: the relay %s refused us: %s", p->announce.name, l->ep, d.error.message);
        l->auth_failed = 1;
        if (p->constructing && l->fatal_code == 0)
            l->fatal_code = code;
        return 1;
    }
    if (code == SW_ERROR_NOT_ANNOUNCED) {
        /* The relay lost us (it restarted, or we reconnected): announce now. The
         * error still goes to the caller: the message it answers was dropped. */
        l->announced = 0;
        l->announce_at_ms = s_now_ms();
    }
    return 0;
}

/* One line per dropped message up to 16, then at 32, 64, ...: a flood cannot flood the log. */
static void s_drop_note(sw_peer_t *p, const char *why)
{
    p->drops++;
    if (sw_log_due(p->drops, 16))
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
static void s_tell_wrong_key(sw_peer_t *p, sw_link_t *l, const char *src)
{
    int64_t now = s_now_ms();
    if (!src[0] || now - p->wrong_key_told_ms < 1000)
        return;
    p->wrong_key_told_ms = now;
    if (sw_wire_send_error(l->sock, src, SW_ERROR_UNAUTHORIZED, 0, NULL, NULL,
                           "cannot open your message: it is sealed with a key this peer does not "
                           "hold (clients: check --access-key; nodes: --cluster-key)",
                           ZMQ_DONTWAIT) != 0)
        SW_DEBUG("peer %s: could not tell %s that its key differs", p->announce.name, src);
}

/* A link that refused us for good (our key, or at start-up the name or version) is closed;
 * 1 when no link is left. */
static int s_reap(sw_peer_t *p)
{
    int alive = 0;
    for (int i = 0; i < p->n_links; i++) {
        sw_link_t *l = &p->links[i];
        if (!l->dead && (l->auth_failed || l->fatal_code)) {
            l->dead = 1;
            if (p->n_links > 1 && !p->constructing)
                SW_ERR("peer %s: the relay %s refused us: no message goes by it any more",
                       p->announce.name, l->ep);
            if (p->n_links > 1) /* one relay alone keeps its socket for the caller's lines */
                link_close(l);
        }
        alive += !l->dead;
    }
    return alive == 0;
}

/* The upkeep of every link: events, silence, announces; the direct links, and their
 * announce to every relay when they came up or went (status shows them). */
static void s_upkeep(sw_peer_t *p)
{
    direct_upkeep(p);
    const int64_t now = s_now_ms();
    if (p->announce.a.role != SW_ROLE_CLIENT && now >= p->rtt_refresh_ms) {
        p->direct.changed = p->rtt_refresh_ms > 0; /* not the first time: the announce is new */
        p->rtt_refresh_ms = now + SW_PEER_RTT_REFRESH_MS;
    }
    const int hops = p->direct.changed;
    if (hops)
        direct_announce_fields(p);
    p->direct.changed = 0;
    for (int i = 0; i < p->n_links; i++) {
        sw_link_t *l = &p->links[i];
        if (l->dead)
            continue;
        link_events(p, l);
        link_check_silence(p, l);
        if (hops && l->announced)
            link_send_announce(p, l);
        link_maybe_announce(p, l);
    }
}

/* Reads one message from l without waiting: 0 one for the caller in *out, 1 consumed (or
 * nothing read: *read 0), -1 socket error. */
static int s_read(sw_peer_t *p, sw_link_t *l, sw_wire_msg_t *out, int *read, int *acked)
{
    sw_wire_msg_t m = {0};
    char err[SW_WIRE_ERR_LEN];
    int rc = sw_wire_recv_ex(l->sock, ZMQ_DONTWAIT, &m, &p->crypto, err, sizeof err);
    *read = rc != SW_WIRE_ESOCKET;
    if (rc == SW_WIRE_OK) {
        const int was = l->announced;
        if (!s_internal(p, l, &m)) {
            m.link = (int)(l - p->links);
            sw_wire_msg_move(out, &m);
            return 0;
        }
        sw_wire_msg_clear(&m);
        *acked |= !was && l->announced;
    } else if (rc == SW_WIRE_EKEY) {
        s_drop_note(p, err);
        s_tell_wrong_key(p, l, m.peer);
    } else if (rc == SW_WIRE_EMALFORMED || rc == SW_WIRE_EVERSION || rc == SW_WIRE_ESEAL) {
        s_drop_note(p, err);
    } else if (rc == SW_WIRE_PROBE) {
        /* the relay's liveness probe: read, nothing to deliver (errno says nothing here) */
    } else if (errno != EAGAIN && errno != EINTR) {
        SW_ERR("peer %s: receive from the relay %s: %s", p->announce.name, l->ep,
               zmq_strerror(errno));
        return -1;
    }
    return 1;
}

/*
 * Waits for the next message for the caller from any link: 0 got one, 1
 * timeout (or, with until_announced, a relay acked), -1 error (every link
 * refused us, or a socket broke).
 */
static int s_pump(sw_peer_t *p, sw_wire_msg_t *out, int timeout_ms, int until_announced)
{
    int64_t deadline = timeout_ms < 0 ? -1 : s_now_ms() + timeout_ms;
    int start = 0; /* the link read first: turns, so that no relay starves another */
    for (;;) {
        s_upkeep(p);
        if (s_reap(p))
            return -1;
        for (int i = 0; p->constructing && i < p->n_links; i++)
            if (p->links[i].hs_cut)
                return 1; /* sw_peer_new decides what the cut means */
        int any = 0, acked = 0;
        for (int k = 0; k < p->n_links; k++) {
            sw_link_t *l = &p->links[(start + k) % p->n_links];
            if (l->dead)
                continue;
            int read = 0;
            const int rc = s_read(p, l, out, &read, &acked);
            if (rc <= 0) {
                if (rc == 0)
                    start = (int)(l - p->links) + 1;
                return rc;
            }
            any |= read;
        }
        int dread = 0;
        if (!p->constructing && direct_read(p, out, &dread) == 0)
            return 0;
        any |= dread;
        if (until_announced && acked)
            return 1;
        if (any) { /* something was read: go on unless time is up */
            if (deadline >= 0 && s_now_ms() > deadline)
                return 1;
            continue;
        }
        /* nothing waits: what is read from now on reached us after now (its age is
         * judged then, however long this process computes before it reads it) */
        if (p->crypto.seal)
            sw_seal_arrived(p->crypto.seal);
        if (p->crypto.access)
            sw_seal_arrived(p->crypto.access);
        int64_t now = s_now_ms();
        if (deadline >= 0 && now >= deadline)
            return 1;
        int64_t wait = deadline < 0 ? 1000 : deadline - now;
        zmq_pollitem_t items[2 * SW_PEER_MAX_RELAYS + 3 + 2 * SW_DIRECT_MAX_LINKS];
        int n_items = direct_poll_items(p, items, 3 + 2 * SW_DIRECT_MAX_LINKS);
        for (int i = 0; i < p->n_links; i++) {
            const sw_link_t *l = &p->links[i];
            if (l->dead)
                continue;
            if (!l->announced && l->announce_at_ms >= 0 && l->announce_at_ms - now < wait)
                wait = l->announce_at_ms - now > 0 ? l->announce_at_ms - now : 0;
            if (l->check_at_ms - now < wait && l->fd >= 0)
                wait = l->check_at_ms - now > 0 ? l->check_at_ms - now : 0;
            items[n_items++] = (zmq_pollitem_t){l->sock, 0, ZMQ_POLLIN, 0};
            items[n_items++] = (zmq_pollitem_t){l->mon, 0, ZMQ_POLLIN, 0};
        }
        if (zmq_poll(items, n_items, (long)wait) < 0) {
            if (errno == EINTR)
                return 1; /* a signal: let the caller look at its stop flag */
            SW_ERR("peer %s: poll: %s", p->announce.name, zmq_strerror(errno));
            return -1;
        }
    }
}

/* The ring twice as long (SW_PEER_QUEUE at first), its messages moved in order to its start.
 * -1 when memory is short or it is SW_PEER_QUEUE_MAX long already. */
static int s_queue_grow(sw_peer_t *p)
{
    const int cap = p->q_cap ? p->q_cap * 2 : SW_PEER_QUEUE;
    if (cap > SW_PEER_QUEUE_MAX)
        return -1;
    sw_wire_msg_t *q = calloc((size_t)cap, sizeof *q);
    if (!q)
        return -1;
    for (int i = 0; i < p->q_len; i++)
        sw_wire_msg_move(&q[i], &p->queue[(p->q_head + i) % p->q_cap]);
    free(p->queue);
    p->queue = q;
    p->q_cap = cap;
    p->q_head = 0;
    return 0;
}

/* Keeps m for sw_peer_recv (start-up, sw_peer_status); drops it (a warning: one line each for
 * the first 16, then at 32, 64, ...) beyond SW_PEER_QUEUE_MAX messages or SW_PEER_QUEUE_BYTES. */
static void s_keep(sw_peer_t *p, sw_wire_msg_t *m)
{
    const size_t size = sw_wire_msg_size(m);
    if (p->q_bytes + size <= SW_PEER_QUEUE_BYTES && (p->q_len < p->q_cap || s_queue_grow(p) == 0)) {
        sw_wire_msg_move(&p->queue[(p->q_head + p->q_len++) % p->q_cap], m);
        p->q_bytes += size;
        return;
    }
    p->q_drops++;
    if (sw_log_due(p->q_drops, 16))
        SW_WARN("peer %s: queue full (%d messages, %zu bytes kept while waiting for the relay), "
                "dropped a %s from %s (%llu dropped so far)",
                p->announce.name, p->q_len, p->q_bytes, sw_wire_type_name(sw_wire_msg_type(m)),
                m->peer, (unsigned long long)p->q_drops);
    sw_wire_msg_clear(m);
}

/* The oldest kept message into msg (0), or -1 when none is kept. */
static int s_unkeep(sw_peer_t *p, sw_wire_msg_t *msg)
{
    if (p->q_len == 0)
        return -1;
    sw_wire_msg_t *m = &p->queue[p->q_head];
    const size_t size = sw_wire_msg_size(m);
    p->q_bytes = p->q_bytes >= size ? p->q_bytes - size : 0;
    if (msg)
        sw_wire_msg_move(msg, m);
    else
        sw_wire_msg_clear(m);
    p->q_head = (p->q_head + 1) % p->q_cap;
    p->q_len--;
    return 0;
}

/* The live link with the lowest measured round trip (the kernel's smoothed RTT of its TCP
 * connection), the earlier relay of the list on a tie, other than `avoid` (-1 = none); -1 when
 * none is live. Its round trip into *rtt. */
static int s_best(const sw_peer_t *p, int avoid, long *rtt)
{
    int best = -1;
    long best_rtt = -1;
    for (int i = 0; i < p->n_links; i++) {
        if (i == avoid || !link_live(&p->links[i]))
            continue;
        const long r = link_rtt_us(&p->links[i]);
        if (best < 0 || (r >= 0 && (best_rtt < 0 || r < best_rtt))) {
            best = i;
            best_rtt = r;
        }
    }
    *rtt = best_rtt;
    return best;
}

/*
 * The link messages go by. The rule: the link in use while it stays live
 * (so that the messages of a round keep their order and their relay); when
 * it is lost (or none was chosen yet, or sw_peer_leave left it), the live
 * link with the lowest measured round trip (s_best). None live: the link
 * last used (its sends wait or fail as with one relay).
 */
static int s_pick(sw_peer_t *p)
{
    if (p->cur >= 0 && link_live(&p->links[p->cur]))
        return p->cur;
    long best_rtt = -1;
    const int best = s_best(p, -1, &best_rtt);
    if (best < 0) {
        if (p->cur >= 0)
            return p->cur;
        for (int i = 0; i < p->n_links; i++)
            if (!p->links[i].dead)
                return i;
        return 0;
    }
    if (p->cur != best && p->n_links > 1)
        SW_INFO("peer %s: messages go by the relay %s now (round trip %.1f ms)", p->announce.name,
                p->links[best].ep, best_rtt / 1e3);
    p->cur = best;
    return best;
}

int sw_peer_leave(sw_peer_t *peer, int link, const char *why)
{
    s_upkeep(peer);
    if (peer->n_links < 2 || link < 0 || link != peer->cur)
        return 0;
    long rtt = -1;
    const int best = s_best(peer, link, &rtt);
    if (best < 0)
        return 0;
    SW_WARN("peer %s: leaving the relay %s (%s)", peer->announce.name, peer->links[link].ep, why);
    SW_INFO("peer %s: messages go by the relay %s now (round trip %.1f ms)", peer->announce.name,
            peer->links[best].ep, rtt / 1e3);
    peer->cur = best;
    peer->epoch++; /* what went by the relay left may not arrive: callers count it as lost */
    return 1;
}

/* Handshakes cut at start-up (several relays): a relay that closes them while it answers has
 * another key than the one pinned for it; that link closes (one line, link_on_cut). */
static void s_cuts(sw_peer_t *p, int64_t deadline)
{
    for (int i = 0; i < p->n_links; i++) {
        sw_link_t *l = &p->links[i];
        if (!l->hs_cut || l->dead)
            continue;
        l->hs_cut = 0;
        int attempt = 1;
        if (link_on_cut(p, l->ep, deadline, &l->cuts, &attempt) != 0) {
            l->dead = 1;
            link_close(l);
        }
    }
}

/* Waits (at most until deadline) for the other relays of the list once one acked, so that the
 * first choice sees them all; 0, or -1 when every relay refused us (logged). */
static int s_settle(sw_peer_t *p, int64_t deadline)
{
    const int64_t until = s_now_ms() + SW_PEER_SETTLE_MS;
    for (;;) {
        int waiting = 0;
        for (int i = 0; i < p->n_links; i++)
            waiting += !p->links[i].dead && !p->links[i].announced;
        int64_t now = s_now_ms();
        if (!waiting || now >= until || (deadline >= 0 && now >= deadline))
            return 0;
        sw_wire_msg_t m = {0};
        const int rc = s_pump(p, &m, 100, 1);
        if (rc < 0)
            return -1;
        s_cuts(p, deadline);
        if (rc == 0)
            s_keep(p, &m);
    }
}
/* Checks the options; 0, or -1 after one line. */
static int s_opts_check(const sw_peer_opts_t *opts)
{
    char err[SW_WIRE_ERR_LEN];
    if (!opts || !opts->relay || !opts->relay[0] || !opts->announce) {
        SW_ERR("peer: relay endpoint and announce are required");
        return -1;
    }
    const sw_msg_t probe = {.type = SW_MSG_ANNOUNCE, .announce = *opts->announce};
    if (sw_codec_validate(&probe, err, sizeof err) != SW_WIRE_OK) {
        SW_ERR("peer: invalid announce: %s", err);
        return -1;
    }
    if (strcmp(opts->announce->name, SW_WIRE_RELAY_NAME) == 0) {
        SW_ERR("peer: the name '%s' is reserved for the relay", SW_WIRE_RELAY_NAME);
        return -1;
    }
    const int n = sw_relay_at(opts->relay, 1 << 30, NULL, 0);
    if (n > SW_PEER_MAX_RELAYS) {
        SW_ERR("peer: %d relays given, at most %d (SW_PEER_MAX_RELAYS)", n, SW_PEER_MAX_RELAYS);
        return -1;
    }
    const sw_sec_t *sec = opts->sec;
    if (sec && !sec->insecure && sec->n_relay_pub != n) {
        SW_ERR("peer: %d relays but %d relay keys: one --relay-key per relay, in --relay's order",
               n, sec->n_relay_pub);
        return -1;
    }
    return 0;
}

/* One relay (the behaviour of before several relays): waits until it greets us, dials,
 * and waits for its ack with the lines that say why it does not come. 0 or -1 (logged). */
static int s_join_one(sw_peer_t *p, const sw_peer_opts_t *opts, int64_t deadline, int connect_ms)
{
    sw_link_t *l = &p->links[0];
    int attempt = 0;
    if (link_wait_reachable(p, l->ep, deadline, opts->stop, &attempt) != 0 || link_dial(p, l) != 0)
        return -1;
    while (!l->announced) {
        if (opts->stop && *opts->stop) {
            SW_ERR("peer %s: interrupted while joining the relay", p->announce.name);
            return -1;
        }
        int64_t left = deadline < 0 ? 1000 : deadline - s_now_ms();
        if (left <= 0) {
            SW_ERR("peer %s: no answer from the relay at %s within %d ms", p->announce.name, l->ep,
                   connect_ms);
            return -1;
        }
        sw_wire_msg_t m = {0};
        int rc = s_pump(p, &m, (int)(left < 1000 ? left : 1000), 1);
        if (rc < 0) {
            if (l->fatal_code)
                SW_ERR("peer %s: the relay at %s refused us (%s)", p->announce.name, l->ep,
                       sw_wire_error_code_name(l->fatal_code));
            return -1;
        }
        if (l->hs_cut) {
            l->hs_cut = 0;
            if (link_on_cut(p, l->ep, deadline, &l->cuts, &attempt) != 0)
                return -1;
        }
        if (rc == 0)
            s_keep(p, &m);
    }
    return 0;
}

/* Several relays: one probe of each (a relay that can never work is closed with its line),
 * then every other one is dialled; returns once one acked and the rest had
 * SW_PEER_SETTLE_MS to follow. No relay by the deadline: one line per relay with its reason,
 * then -1. */
static int s_join_many(sw_peer_t *p, const sw_peer_opts_t *opts, int64_t deadline, int connect_ms)
{
    char why[SW_PEER_MAX_RELAYS][256];
    for (int i = 0; i < p->n_links; i++) {
        sw_link_t *l = &p->links[i];
        if (link_probe_once(p, l, why[i], sizeof why[i]) != 0 || link_dial(p, l) != 0) {
            l->dead = 1;
            link_close(l);
        }
    }
    for (;;) {
        if (s_reap(p)) {
            SW_ERR("peer %s: none of the %d relays can be used (the lines above say why)",
                   p->announce.name, p->n_links);
            return -1;
        }
        for (int i = 0; i < p->n_links; i++)
            if (p->links[i].announced)
                return s_settle(p, deadline);
        if (opts->stop && *opts->stop) {
            SW_ERR("peer %s: interrupted while joining the relays", p->announce.name);
            return -1;
        }
        int64_t left = deadline < 0 ? 1000 : deadline - s_now_ms();
        if (left <= 0)
            break;
        sw_wire_msg_t m = {0};
        int rc = s_pump(p, &m, (int)(left < 500 ? left : 500), 1);
        if (rc < 0)
            continue; /* s_reap says */
        s_cuts(p, deadline);
        if (rc == 0)
            s_keep(p, &m);
    }
    for (int i = 0; i < p->n_links; i++) {
        sw_link_t *l = &p->links[i];
        if (l->dead)
            continue;
        char mech[SW_PROBE_MECH_MAX + 1];
        if (sw_probe_relay(l->ep, 1000, mech, why[i], sizeof why[i]) == SW_PROBE_OK)
            snprintf(why[i], sizeof why[i], "it answers but did not take our announce");
        SW_ERR("peer %s: relay %s: %s", p->announce.name, l->ep, why[i]);
    }
    SW_ERR("peer %s: none of the %d relays answered within %d ms: start one, check the "
           "addresses and the firewall, or wait longer (--connect-timeout-s)",
           p->announce.name, p->n_links, connect_ms);
    return -1;
}

sw_peer_t *sw_peer_new(const sw_peer_opts_t *opts)
{
    if (s_opts_check(opts) != 0)
        return NULL;
    int hb = opts->heartbeat_ms > 0 ? opts->heartbeat_ms : SW_PEER_DEFAULT_HEARTBEAT_MS;
    int connect_ms = opts->connect_timeout_ms > 0   ? opts->connect_timeout_ms
                     : opts->connect_timeout_ms < 0 ? -1
                                                    : SW_PEER_DEFAULT_CONNECT_MS;
    int64_t deadline = connect_ms < 0 ? -1 : s_now_ms() + connect_ms;

    sw_peer_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->cur = -1;
    p->hb_ms = hb;
    p->send_ms = opts->send_timeout_ms > 0 ? opts->send_timeout_ms : SW_PEER_DEFAULT_SEND_MS;
    p->rename_on_taken = opts->rename_on_taken;
    p->silent_limit_ms = hb > 600000 / SW_PEER_SILENT_IVLS ? 600000 : SW_PEER_SILENT_IVLS * hb;
    p->n_links = sw_relay_at(opts->relay, 1 << 30, NULL, 0);
    for (int i = 0; i < p->n_links; i++)
        p->links[i].fd = -1;
    if (sw_codec_announce_copy(&p->announce, opts->announce) != 0) {
        SW_ERR("peer: the announce does not fit its copy");
        goto err;
    }
    p->direct.changed = 0;
    p->ctx = zmq_ctx_new();
    if (!p->ctx) {
        SW_ERR("peer: socket setup failed: %s", zmq_strerror(errno));
        goto err;
    }
    if (s_peer_secure(p, opts->sec, opts->accept_clear_errors, opts->test_clock_skew_ms) != 0 ||
        direct_open(p, opts) != 0)
        goto err;
    for (int i = 0; i < p->n_links; i++) {
        char ep[SW_ARGS_ENDPOINT_MAX];
        sw_relay_at(opts->relay, i, ep, sizeof ep);
        const char *pub = opts->sec && !opts->sec->insecure ? opts->sec->relay_pub[i] : NULL;
        if (link_open(p, &p->links[i], ep, pub, opts->sec) != 0)
            goto err;
    }
    /* Wait for the ack(s); anything else that arrives is kept for sw_peer_recv. */
    p->constructing = 1;
    if ((p->n_links == 1 ? s_join_one : s_join_many)(p, opts, deadline, connect_ms) != 0)
        goto err;
    p->constructing = 0;
    (void)s_pick(p);
    return p;
err:
    sw_peer_destroy(&p);
    return NULL;
}

void sw_peer_destroy(sw_peer_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    sw_peer_t *p = *self_p;
    while (s_unkeep(p, NULL) == 0)
        ;
    free(p->queue);
    for (int i = 0; i < p->n_links; i++)
        link_close(&p->links[i]);
    direct_close(p);
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

int sw_peer_poll_items(sw_peer_t *peer, zmq_pollitem_t *items, int max)
{
    int n = 0;
    for (int i = 0; i < peer->n_links && n < max; i++)
        if (!peer->links[i].dead)
            items[n++] = (zmq_pollitem_t){peer->links[i].sock, 0, ZMQ_POLLIN, 0};
    return n + direct_poll_items(peer, items + n, max - n);
}

int sw_peer_pending(const sw_peer_t *peer)
{
    return peer->q_len;
}

/* The link a send goes by: via when it is live, else s_pick's. -1 (logged unless quiet) when
 * every relay refused us. */
static int s_send_link(sw_peer_t *peer, int via, int quiet)
{
    s_upkeep(peer); /* a reconnect seen now must be followed by the announce first */
    if (s_reap(peer)) {
        if (!quiet)
            SW_ERR("peer %s: the relay refused our key; not sending", peer->announce.name);
        return -1;
    }
    if (via >= 0 && via < peer->n_links && link_live(&peer->links[via]))
        return via;
    return s_pick(peer);
}

static int s_send_via(sw_peer_t *peer, int via, const char *dest, sw_envelope_t *env,
                      const void *payload, size_t payload_len, int has_payload)
{
    int rc = direct_send(peer, via, dest, env, payload, payload_len, has_payload);
    if (rc <= 0)
        return rc;
    const int li = s_send_link(peer, via, 0);
    if (li < 0)
        return SW_WIRE_ESOCKET;
    char err[SW_WIRE_ERR_LEN];
    direct_note_relay(peer, dest);
    rc = sw_wire_send_ex(peer->links[li].sock, dest, env, payload, payload_len, has_payload, 0,
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

int sw_peer_send(sw_peer_t *peer, const char *dest, sw_envelope_t *env, const void *payload,
                 size_t payload_len, int has_payload)
{
    return s_send_via(peer, -1, dest, env, payload, payload_len, has_payload);
}

int sw_peer_recv(sw_peer_t *peer, sw_wire_msg_t *msg, int timeout_ms)
{
    if (s_unkeep(peer, msg) == 0)
        return 0;
    return s_pump(peer, msg, timeout_ms, 0);
}

int sw_peer_status_of(sw_peer_t *peer, int link, sw_wire_msg_t *table_msg, int timeout_ms)
{
    const int li = s_send_link(peer, link, 0);
    if (li < 0 || (link >= 0 && li != link))
        return -1; /* that relay is not live now */
    const sw_msg_t q = {.type = SW_MSG_STATUS_QUERY};
    if (sw_peer_send_msg_via(peer, li, SW_WIRE_RELAY_NAME, &q) != 0)
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
        if (m.link == li && strcmp(m.peer, SW_WIRE_RELAY_NAME) == 0 &&
            sw_wire_msg_type(&m) == SW_MSG_PEER_TABLE) {
            sw_wire_msg_move(table_msg, &m);
            return 0;
        }
        s_keep(peer, &m);
    }
}

int sw_peer_status(sw_peer_t *peer, sw_wire_msg_t *table_msg, int timeout_ms)
{
    return sw_peer_status_of(peer, -1, table_msg, timeout_ms);
}

static int s_try_send(sw_peer_t *peer, int via, const char *dest, sw_envelope_t *env)
{
    int rc = direct_send(peer, via, dest, env, NULL, 0, 0);
    if (rc <= 0)
        return rc;
    const int li = s_send_link(peer, via, 1);
    if (li < 0)
        return SW_WIRE_ESOCKET;
    char err[SW_WIRE_ERR_LEN];
    direct_note_relay(peer, dest);
    rc = sw_wire_send_ex(peer->links[li].sock, dest, env, NULL, 0, 0, ZMQ_DONTWAIT, &peer->crypto,
                         err, sizeof err);
    if (rc && !(rc == SW_WIRE_ESOCKET && errno == EAGAIN))
        SW_ERR("peer %s: %s", peer->announce.name, err);
    return rc;
}

int sw_peer_try_send(sw_peer_t *peer, const char *dest, sw_envelope_t *env)
{
    return s_try_send(peer, -1, dest, env);
}

int sw_peer_connects(sw_peer_t *peer)
{
    int n = 0;
    for (int i = 0; i < peer->n_links; i++) {
        if (!peer->links[i].dead)
            link_events(peer, &peer->links[i]);
        n += peer->links[i].n_connects;
    }
    return n;
}

int sw_peer_announces(sw_peer_t *peer)
{
    return peer->n_announces;
}

uint64_t sw_peer_losses(sw_peer_t *peer)
{
    s_upkeep(peer);
    return peer->epoch;
}

int sw_peer_links(const sw_peer_t *peer)
{
    return peer->n_links;
}

int sw_peer_link_info(sw_peer_t *peer, int i, sw_peer_link_info_t *out)
{
    if (i < 0 || i >= peer->n_links)
        return -1;
    const sw_link_t *l = &peer->links[i];
    memset(out, 0, sizeof *out);
    snprintf(out->endpoint, sizeof out->endpoint, "%s", l->ep);
    out->live = link_live(l);
    out->refused = l->dead;
    out->current = peer->cur == i;
    out->rtt_us = link_rtt_us(l);
    out->losses = l->losses;
    return 0;
}

int sw_peer_current_link(sw_peer_t *peer)
{
    const int li = s_send_link(peer, -1, 1);
    return li < 0 ? -1 : li;
}

/* Where sw_peer_send_msg / sw_peer_try_send_msg hand the codec's Envelope. */
typedef struct s_msg_ctx {
    sw_peer_t *peer;
    const char *dest;
    int try_send; /* 1: s_try_send (no payload) */
    int via;      /* the link asked for, -1 = s_pick's */
} s_msg_ctx_t;

static int s_msg_sink(void *ctx, sw_envelope_t *env, const void *payload, size_t payload_len,
                      int has_payload)
{
    const s_msg_ctx_t *c = ctx;
    if (!c->try_send)
        return s_send_via(c->peer, c->via, c->dest, env, payload, payload_len, has_payload);
    if (has_payload) {
        SW_ERR("peer %s: a message with a payload cannot be sent without waiting",
               c->peer->announce.name);
        return SW_WIRE_EMALFORMED;
    }
    return s_try_send(c->peer, c->via, c->dest, env);
}

static int s_send_msg(sw_peer_t *peer, int via, const char *dest, const sw_msg_t *msg, int try_send)
{
    char err[SW_WIRE_ERR_LEN] = "";
    s_msg_ctx_t c = {peer, dest, try_send, via};
    int rc = sw_codec_emit(msg, s_msg_sink, &c, err, sizeof err);
    if (rc && err[0]) /* the codec refused it (the sends log their own failures) */
        SW_ERR("peer %s: %s", peer->announce.name, err);
    return rc;
}

int sw_peer_send_msg(sw_peer_t *peer, const char *dest, const sw_msg_t *msg)
{
    return s_send_msg(peer, -1, dest, msg, 0);
}

int sw_peer_try_send_msg(sw_peer_t *peer, const char *dest, const sw_msg_t *msg)
{
    return s_send_msg(peer, -1, dest, msg, 1);
}

int sw_peer_send_msg_via(sw_peer_t *peer, int link, const char *dest, const sw_msg_t *msg)
{
    return s_send_msg(peer, link, dest, msg, 0);
}

int sw_peer_try_send_msg_via(sw_peer_t *peer, int link, const char *dest, const sw_msg_t *msg)
{
    return s_send_msg(peer, link, dest, msg, 1);
}
