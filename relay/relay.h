/*
 * relay.h - the shardwire relay: one thread, one ROUTER socket. Peers dial
 * in, announce a name, and send [dest][header][payload]?; the relay forwards
 * the header and payload frames unchanged to the peer called dest as
 * [src][header][payload]?. It decodes only messages addressed to itself
 * (PeerAnnounce, StatusQuery), never tensor payloads. See docs/protocol.md.
 *
 * Security (docs/security.md): the ROUTER is a CurveZMQ server with the
 * relay's secret key, and a ZAP handler (an inproc REP socket served by the
 * same loop) admits only the public keys of the allow-list file. Each
 * message's "User-Id" property (the client's public key, set by the ZAP
 * reply) is checked against the current list. The list binds each key to a
 * role and a name: a node key announces only its own name with a node role
 * (the peer table marks it key_bound), a client key only as a client (and
 * only its name when it has one); a name listed in the file is reserved for
 * its key even while no peer holds it; a key holds at most
 * max_conns_per_key peers, and the table keeps room for the nodes that are
 * away. A client sends only [dest][header] of a request's size, only to
 * key-bound heads, within its byte rate. Every destination has a byte
 * budget for what libzmq holds for it (and all of them one together): over
 * it, messages are held briefly or dropped with ERR_DEST_BUSY. The allow-list is re-read when the
 * file changes (checked every second) and on request (SIGHUP in main.c); peers whose key is gone
 * leave the table at once and every further message of theirs is answered with ERR_UNAUTHORIZED
 * (libzmq cannot close one ROUTER connection by itself, so the TCP link stays until the peer gives
 * up). The insecure mode (no CURVE, no ZAP) binds loopback endpoints only.
 *
 * One owner thread: relay_run() and everything else on the creating thread.
 */
#ifndef SW_RELAY_H
#define SW_RELAY_H

#include <signal.h>

typedef struct relay relay_t;

typedef struct relay_opts {
    /* Each int below: 0 = its SW_RELAY_DEFAULT_* in sw_limits.h. */
    const char *listen;   /* endpoint to bind, "tcp://HOST:PORT" ("tcp://127.0.0.1:*" = any port) */
    int heartbeat_ms;     /* ZMTP heartbeat interval and liveness sweep period */
    int hwm;              /* queued messages per peer and direction */
    const char *key_file; /* relay CURVE secret key file (required unless insecure) */
    const char *allow_file;        /* allow-list of client public keys (required unless insecure) */
    int insecure_loopback;         /* 1 = no CURVE; only loopback listen endpoints */
    volatile sig_atomic_t *reload; /* set (e.g. by SIGHUP) to re-read the allow-list; may be NULL */
    int rate;              /* messages per second one peer may send to other peers (burst = 1 s) */
    int handshake_ms;      /* time a new connection has to finish the CURVE handshake */
    int max_conns_per_key; /* live peers one key may hold at once (keys only) */
    int max_conns_per_prefix; /* TCP connections from one IPv4 /24 or IPv6 /64 (0: default) */
    int queue_mib;            /* bytes libzmq may hold for one destination, MiB */
    int queue_total_mib;      /* ... for all destinations together, MiB */
    int client_mib_s;         /* bytes/s a client key's peer may send, MiB (keys only) */
    int node_mib_s;           /* bytes/s any other peer may send, MiB */
    int name_hold_s;          /* a client's name stays held for its key this long after it left
                                 (keys only; -1 = not at all) */
    int announce_ms;          /* a connection that has not announced this long after it opened is
                                 shut down */
} relay_opts_t;

/* Binds and sets up the relay; NULL after one error line. Free with relay_destroy(). */
relay_t *relay_new(const relay_opts_t *opts) __attribute__((warn_unused_result));

/* The endpoint actually bound (the real port when the listen port was "*"). */
const char *relay_endpoint(const relay_t *relay);

/* Serves until *stop becomes nonzero (set from a signal handler). 0, or -1 on a socket error. */
int relay_run(relay_t *relay, volatile sig_atomic_t *stop) __attribute__((warn_unused_result));

/* Closes everything; accepts NULL and NULLs the caller's pointer. */
void relay_destroy(relay_t **self_p);

#endif
