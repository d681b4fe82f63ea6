/*
 * peer.h - one process's connection to the shardwire relay, or relays.
 *
 * A peer is a ZeroMQ DEALER socket that dials out to the relay (so it works
 * behind NAT), announces its name and role, and then sends and receives
 * framed messages (wire.h) by peer name. What this module handles so that the
 * node and the CLI do not have to:
 *
 * - Several relays (opts.relay "A,B", at most SW_PEER_MAX_RELAYS; one pinned
 *   key per relay in sec->relay_pub): one link (a DEALER and its monitor) to
 *   each, announced on each; everything below holds per link. Messages are
 *   taken from every link (sw_wire_msg_t.link says which) and each one sent
 *   goes by one live relay: the one in use while it stays live; when it is
 *   lost, the live one with the lowest measured round trip (TCP's smoothed
 *   RTT), the earlier of the list on a tie. sw_peer_send_msg_via sends by the
 *   relay a message came by (stages answer a Forward that way, so that a
 *   round stays on the relay its head chose). sw_peer_losses counts the
 *   links lost: a head replays the rounds in flight when it moves. Start-up
 *   returns once one relay acked and the others had SW_PEER_SETTLE_MS; a
 *   relay that refuses us (key, version) is closed with one line naming it
 *   and the others go on.
 *
 * - Liveness: ZMTP heartbeats (ZMQ_HEARTBEAT_IVL) run in libzmq's I/O
 *   thread, so a long prefill on the calling thread cannot starve them; the
 *   relay's liveness probes are swallowed by sw_peer_recv. Both sides judge
 *   the other by bytes, not whole frames (a large frame on a thin link can
 *   take minutes): the relay drops a peer that sent no data for 5 of its
 *   heartbeat intervals, and a peer whose relay sent nothing for 10 of its
 *   own intervals shuts the connection down so that libzmq redials (checked
 *   inside sw_peer_recv / sw_peer_send, from TCP_INFO).
 * - Start-up in any order: sw_peer_new probes the relay endpoint before it
 *   dials (probe.h) and retries with backoff until its deadline, so a node may
 *   start before the relay, or behind a forwarder whose relay is not up yet.
 * - Reconnects: libzmq redials by itself; after a reconnect the relay sees a
 *   new connection, so the peer announces again (on the socket monitor's
 *   HANDSHAKE_SUCCEEDED event, and whenever the relay answers ERR_NOT_ANNOUNCED), and
 *   retries every second while the relay still holds the name for the dead
 *   connection (ERR_NAME_TAKEN).
 * - Relay replies: AnnounceAck is consumed here; every other message,
 *   including relay Errors about undeliverable messages, goes to the caller.
 *
 * - Security (docs/security.md): with opts.sec holding keys, the connection
 *   is CurveZMQ (own key pair, the relay's pinned public key) and every
 *   message to another peer is sealed end to end (seal.h): stage-to-stage
 *   types with the cluster key, client <-> head types with the access key
 *   (wire.h says which type goes where); messages from peers must arrive
 *   sealed, on their type's channel. A sealed message that none of our keys
 *   opens is answered (once a second at most) with a clear
 *   Error{unauthorized}, so that a client holding another access key learns
 *   it at once. Without keys
 *   (opts.sec NULL or sec->insecure) the relay endpoint must be loopback.
 *   A relay that refuses the key (ZAP) or revokes it (ERR_UNAUTHORIZED)
 *   makes sw_peer_new / sw_peer_recv fail.
 *
 * One owner thread: a sw_peer_t is used only by the thread that created it.
 */
#ifndef SW_PEER_H
#define SW_PEER_H

#include "codec.h"
#include "keys.h"
#include "wire.h"

#include <signal.h>

typedef struct sw_peer sw_peer_t;

typedef struct sw_peer_opts {
    const char *relay; /* relay endpoint "tcp://host:port", or several joined by ',' (args.h) */
    const sw_msg_announce_t *announce; /* who this peer is (name required); copied */
    int heartbeat_ms;        /* ZMTP heartbeat interval; 0 = SW_PEER_DEFAULT_HEARTBEAT_MS. The relay
                                is presumed gone after SW_PEER_SILENT_IVLS x this without data from
                                it. */
    int connect_timeout_ms;  /* how long sw_peer_new keeps trying to reach the relay and get its
                                ack; 0 = SW_PEER_DEFAULT_CONNECT_MS, -1 = forever */
    int send_timeout_ms;     /* how long a send may block; 0 = SW_PEER_DEFAULT_SEND_MS */
    const sw_sec_t *sec;     /* keys (copied); NULL = insecure, loopback relay only */
    int accept_clear_errors; /* clients: accept a clear Error from a peer that cannot open
                                our sealed messages (msg.sealed = 0 tells it apart) */
    int rename_on_taken;     /* clients whose name ends in a random "-SUFFIX": when the
                                relay refuses a re-announce because another key holds the
                                name (it took it while we were away, e.g. across a relay
                                restart), take a new suffix and announce again at once; a
                                head binds requests to the key, not the name (Resume) */
    volatile sig_atomic_t *stop; /* optional: sw_peer_new gives up once it is non-zero */
    int test_clock_skew_ms;      /* TESTS ONLY: seal and open as if this machine's clock ran
                                    this far ahead (negative: behind) */
    /* Direct paths (nodes; docs/protocol.md "Direct paths"): NULL = none. */
    const char *listen;        /* "tcp://HOST:PORT" to accept direct links on (--listen) */
    const char *listen_public; /* the address announced for it (NULL = listen) */
    const char *allow_file;    /* the allow-list dialling keys are checked against (--allow);
                                  required with listen unless sec is NULL or insecure */
    int direct_dial_ms;        /* a dial not through its handshake by then keeps the relay
                                  path; 0 = SW_DIRECT_DIAL_MS */
} sw_peer_opts_t;

/*
 * Connects to the relay, announces and waits for the AnnounceAck. A relay that
 * is not up yet (refused, name not resolving, a forwarder that accepts and
 * closes: see probe.h) is retried with a growing delay (0.25 s doubling to
 * 5 s) and one progress line (sw_log_progress: updated in place on a
 * terminal), until connect_timeout_ms. Returns NULL (after one error line)
 * when the time is up, *stop was set, or the relay refuses us for good: our
 * key (not allowed, or the relay's key is not the one pinned), the name, the
 * protocol version. Free with sw_peer_destroy().
 */
sw_peer_t *sw_peer_new(const sw_peer_opts_t *opts) __attribute__((warn_unused_result));

/* Closes the connection; accepts NULL and NULLs the caller's pointer. */
void sw_peer_destroy(sw_peer_t **self_p);

/* Announces again on the live connection with a (the same name): the relay
 * replaces the fields it holds (a standby auto node that loaded the range
 * its head assigned, a node that measured its round trip). Sent at once and
 * again every second until the relay acks. 0, or -1 when a does not fit or
 * names another peer. */
int sw_peer_reannounce(sw_peer_t *peer, const sw_msg_announce_t *a)
    __attribute__((warn_unused_result));

/* The announced name. */
const char *sw_peer_name(const sw_peer_t *peer);

/*
 * Sends env (and an optional raw payload, copied) to the peer called dest, or
 * to SW_WIRE_RELAY_NAME. env is validated first (its version is set here) and
 * stays the caller's. Returns 0 or a negative sw_wire_rc after one error line.
 * The transport under sw_peer_send_msg: programs send plain messages with
 * that; tests call this one to send hand-made (hostile) Envelopes
 * (codec_pb.h's sw_envelope_of).
 */
int sw_peer_send(sw_peer_t *peer, const char *dest, sw_envelope_t *env, const void *payload,
                 size_t payload_len, int has_payload) __attribute__((warn_unused_result));

/*
 * sw_peer_send of a plain message (codec.h): msg, and a Forward's payload, stay
 * the caller's. Returns 0 or a negative sw_wire_rc after one error line.
 */
int sw_peer_send_msg(sw_peer_t *peer, const char *dest, const sw_msg_t *msg)
    __attribute__((warn_unused_result));

/* sw_peer_try_send of a plain message (never one with a payload). */
int sw_peer_try_send_msg(sw_peer_t *peer, const char *dest, const sw_msg_t *msg)
    __attribute__((warn_unused_result));

/*
 * Waits up to timeout_ms (0 = poll, -1 = forever) for the next message for the
 * caller. Returns 0 with *msg filled (the caller clears it with
 * sw_wire_msg_clear), 1 on timeout or when a signal interrupted the wait,
 * -1 on a socket error (the peer is then unusable). Malformed messages are
 * logged and skipped.
 */
int sw_peer_recv(sw_peer_t *peer, sw_wire_msg_t *msg, int timeout_ms)
    __attribute__((warn_unused_result));

/*
 * Asks the relay for its peer table and waits up to timeout_ms for it.
 * Messages for the caller that arrive meanwhile are kept for sw_peer_recv.
 * On success *table_msg holds the PeerTable reply (sw_codec_decode reads
 * it); the caller clears it. Returns 0, 1 on timeout, -1 on error.
 */
int sw_peer_status(sw_peer_t *peer, sw_wire_msg_t *table_msg, int timeout_ms)
    __attribute__((warn_unused_result));

/*
 * The DEALER sockets (one per relay) as zmq_poll items (POLLIN) in items[0..max):
 * their count. For readiness in a caller's own loop only: read through
 * sw_peer_recv (call it with timeout 0 also when sw_peer_pending() > 0,
 * since kept messages do not make a socket readable). Re-announcing after a
 * reconnect happens inside sw_peer_recv / sw_peer_send, so a loop that polls
 * the sockets itself should still call sw_peer_recv at least every second or
 * so. Heartbeats need no calls at all (libzmq's I/O thread answers them).
 */
int sw_peer_poll_items(sw_peer_t *peer, zmq_pollitem_t *items, int max);
int sw_peer_pending(const sw_peer_t *peer);

/* sw_peer_send_msg / sw_peer_try_send_msg by the relay of index link (a received
 * message's .link) while it is live; by the usual choice when it is not (the
 * destination is announced on every relay, so the message is not lost). */
int sw_peer_send_msg_via(sw_peer_t *peer, int link, const char *dest, const sw_msg_t *msg)
    __attribute__((warn_unused_result));
int sw_peer_try_send_msg_via(sw_peer_t *peer, int link, const char *dest, const sw_msg_t *msg)
    __attribute__((warn_unused_result));

/* sw_peer_status asking the relay of index link (-1 = the one messages go by); -1 at once
 * when that relay is not live. */
int sw_peer_status_of(sw_peer_t *peer, int link, sw_wire_msg_t *table_msg, int timeout_ms)
    __attribute__((warn_unused_result));

/* Relay links lost so far (a relay closed, restarted or fell silent while we were announced
 * to it): what was in flight through it may be gone. */
uint64_t sw_peer_losses(sw_peer_t *peer);

/* The relay of index link (the one messages go by) can no longer reach a peer that another relay
 * may still reach (its table lost a stage): messages go by another live relay from now on (the
 * rule of the lost link: the lowest round trip), and what went by it counts as lost
 * (sw_peer_losses grows). 1 when it moved; 0 when link is not the one in use or no other relay
 * is live (nothing changes). */
int sw_peer_leave(sw_peer_t *peer, int link, const char *why);

/* The relays given, and what a status line shows of each. */
int sw_peer_links(const sw_peer_t *peer);
typedef struct sw_peer_link_info {
    char endpoint[256]; /* tcp://HOST:PORT */
    int live;           /* announced on a live connection */
    int refused;        /* closed for good: it refused our key, name or version */
    int current;        /* messages go by it now */
    long rtt_us;        /* the kernel's smoothed round trip of its connection, -1 = none */
    uint64_t losses;    /* times it was lost */
} sw_peer_link_info_t;
int sw_peer_link_info(sw_peer_t *peer, int i, sw_peer_link_info_t *out);
/* The index of the relay messages go by now (-1 when every relay refused us). */
int sw_peer_current_link(sw_peer_t *peer);

/*
 * sw_peer_send that never waits: when the message cannot be queued at once
 * (no connection to the relay right now, or its queue is full) it is dropped
 * and SW_WIRE_ESOCKET returned with errno EAGAIN. For messages whose loss the
 * protocol repairs (status queries are asked again, a client asks for lost
 * TokenChunks with Resume), so that one unreachable destination never stalls
 * an event loop.
 */
int sw_peer_try_send(sw_peer_t *peer, const char *dest, sw_envelope_t *env)
    __attribute__((warn_unused_result));

/* Handshakes completed with the relays so far (1 after sw_peer_new; more after
 * reconnects, e.g. a relay restart: a client then asks for what it may have
 * missed). */
int sw_peer_connects(sw_peer_t *peer);

/* Announces the relay acknowledged so far (1 after sw_peer_new; one more after
 * each reconnect, under a new name when it was renamed): a client asks for what
 * it may have missed once it may send again. */
int sw_peer_announces(sw_peer_t *peer);

/*
 * Direct paths (nodes; direct.c). A node started with opts.listen accepts direct links there
 * (CURVE with its own key; the allow-list's node keys only, each under the name it binds) and
 * announces the address (PeerAnnounce.direct). sw_peer_direct_dial asks for a link to a node
 * that announced one (ep, its key in Z85, and the fingerprint the relay authenticated for its
 * name: the two must agree); from then on messages to that node go by the link while it is
 * up, once none went to it by a relay for SW_DIRECT_QUIET_MS (so that none overtakes an
 * earlier one), and by the relay at once when it fails, never connects within
 * opts.direct_dial_ms (NAT), or is lost. A link carries both directions. 0 (asked, or
 * already there), -1 when it cannot be (logged once: bad fields, a key that does not match,
 * no room).
 */
int sw_peer_direct_dial(sw_peer_t *peer, const char *name, const char *ep, const char *key_z85,
                        const char *key_fp);
/* Live direct links lost so far (what was in flight on them may be gone: a head sends the
 * round again). */
uint64_t sw_peer_direct_losses(sw_peer_t *peer);
/* The live direct links (peer name and measured round trip) into out[0..max): their count. */
int sw_peer_direct_hops(sw_peer_t *peer, sw_msg_direct_hop_t *out, int max);

#endif
