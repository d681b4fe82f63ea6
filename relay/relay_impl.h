/*
 * relay_impl.h - the relay's state and the functions its parts share; private
 * to the .c files of relay/ (never included from another folder:
 * tests/unit/test_layers.py).
 *
 * The relay is cut by concern, each part calling only the ones below it (no
 * circle between them, tests/unit/test_layers.py):
 *
 *   relay.c     the loop: options, relay_new / relay_run / relay_destroy, and
 *               each message's intake (frames, sizes, key, rate limits)
 *   announce.c  messages to the relay itself: the announce that puts a peer in
 *               the table, the status query
 *   forward.c   forwarding to other peers: byte budgets per destination, the
 *               messages held while a destination is full
 *   auth.c      the allow-list (load, reload, what a key may announce), the ZAP
 *               handler, the CurveZMQ setup
 *   peers.c     the peer table, client names held for their key, liveness
 *               (probes, silence, the sweep)
 *   conn.c      TCP connections before and after they announce (monitor
 *               events, per-key counts, the announce deadline)
 *   reply.c     what the relay says: replies to peers (errors, acks, the peer
 *               table) and its lines about peers in the log
 *
 * One owner thread: everything here runs on the relay's loop, except the
 * release of forwarded frames (relay_queue_t, libzmq's I/O thread).
 */
#ifndef SW_RELAY_IMPL_H
#define SW_RELAY_IMPL_H

#include "relay.h"

#include "codec.h"
#include "keys.h"
#include "wire.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <zmq.h>

#define RELAY_ID_MAX 255     /* bytes in a ROUTER routing id */
#define RELAY_PARK_MAX 256   /* messages held while their destination is full */
#define RELAY_HOLD_MAX 1024  /* client names held for their key after they left */
#define RELAY_CONNS_MAX 8192 /* TCP connections tracked (beyond: shut down at once) */
/*
 * Buckets: what a peer sends to nodes (a node's Forwards, Verdicts, session
 * messages: the pipeline; a client's requests) is paced per sender
 * (relay_peer_t.tokens); what nodes send to a client (TokenChunks, resends,
 * answers) per destination client (relay_peer_t.in_tokens), so that a node
 * streaming to clients never spends the budget its Forwards need, and what a
 * head answers one client key (however hard it asks) never spends the budget
 * of its replies to another (issue 35, finding 2).
 */
/* A client's message is at most SW_RELAY_CLIENT_MSG_MAX bytes (sw_limits.h): a
 * GenerateRequest of the largest prompt, sealed, and the destination frame;
 * no payload frame. */

typedef struct relay_peer {
    uint8_t id[RELAY_ID_MAX];          /* ROUTER routing id of its connection */
    size_t id_len;                     /* bytes in id */
    sw_announce_copy_t ann;            /* its announce (ann.a), strings its own */
    const char *name;                  /* ann.name */
    int64_t joined_ms;                 /* when it announced (monotonic ms) */
    int64_t alive_ms;                  /* when last known alive (message or probe) */
    int64_t msg_ms;                    /* when its last message came */
    uint64_t msgs_in;                  /* messages received from it */
    uint64_t msgs_out;                 /* messages forwarded to it */
    uint64_t bytes_in;                 /* bytes received from it, all frames */
    uint64_t busy_drops;               /* messages to it dropped because its queue was full */
    char user[SW_KEY_Z85_LEN + 1];     /* authenticated CURVE public key (\"\" when insecure) */
    char fp[SW_WIRE_KEY_FP_LEN + 1];   /* its fingerprint (keys.h), "" when insecure */
    char source[SW_WIRE_ADDR_MAX + 1]; /* the source frame of what it sends: "NAME@FP" or NAME */
    double tokens;                     /* rate bucket: messages it may still send to nodes now */
    int64_t refill_ms;                 /* when its buckets were last refilled */
    uint64_t rate_drops;               /* messages dropped for going over the rate */
    int fd;                       /* its TCP socket (ZMQ_SRCFD, owned by libzmq), -1 = unknown */
    struct sockaddr_storage addr; /* the fd's remote address when learnt (guards fd reuse) */
    socklen_t addr_len;           /* bytes of addr */
    int client;                   /* 1: a client (its key's role; insecure: its announce) */
    int key_bound;                /* what its node key binds: SW_KEY_BOUND_NAME, _ROLE, or 0 */
    double byte_tokens;           /* byte-rate bucket: bytes it may still send to nodes now */
    double in_tokens;             /* a client: messages nodes may still send it now (--rate a
                                     second, a second's worth at once) */
    double in_bytes;              /* ... and bytes (--node-mib-s a second, >= one frame) */
    int64_t in_refill_ms;         /* when in_tokens and in_bytes were last refilled */
    int64_t told_ms;              /* when it was last told of a dropped control message */
    uint64_t byte_drops;          /* messages dropped for going over the byte rate */
    struct relay_queue *q;        /* bytes libzmq still holds for it (shared, see below) */
} relay_peer_t;

/*
 * What libzmq still holds of the frames forwarded to one destination, in
 * bytes: every forwarded header and payload frame is handed to libzmq as a
 * zmq_msg_init_data frame whose free function (run by libzmq's I/O thread
 * once the frame is written out, or dropped with the connection) takes its
 * size off again. So the relay knows its per-destination queues in bytes
 * (libzmq counts only messages) and refuses to queue more than the budget.
 * Shared with the I/O thread: atomics, freed by the last reference.
 */
typedef struct relay_queue {
    atomic_size_t bytes; /* frames handed to libzmq and not released yet */
    atomic_int refs;     /* 1 for the peer (while in the table) + one per frame */
} relay_queue_t;

/*
 * A message whose destination's queue was full, held for a later try. Held
 * messages go out first, in arrival order, as soon as the destination takes
 * messages again; a sender gets few slots, so one that floods a destination
 * loses its excess while the others' messages wait their turn instead of
 * being dropped (fairness that libzmq's per-connection queue cannot give).
 */
typedef struct relay_parked {
    char src[SW_WIRE_ADDR_MAX + 1];    /* sender address (the source frame to write) */
    uint8_t src_id[RELAY_ID_MAX];      /* sender routing id, for an error reply */
    size_t src_id_len;                 /* bytes in src_id */
    char dest[SW_WIRE_NAME_MAX + 1];   /* destination name */
    char dkey[SW_WIRE_KEY_FP_LEN + 1]; /* the key it was pinned to, "" = any */
    zmq_msg_t hdr;                     /* header frame, owned */
    zmq_msg_t payload;                 /* payload frame, owned when has_payload */
    int has_payload;                   /* 1 when payload holds a frame */
    size_t bytes;                      /* header + payload bytes */
    int64_t since_ms;                  /* when it was parked */
} relay_parked_t;

/*
 * One TCP connection the relay accepted (socket monitor: ACCEPTED), until it
 * goes (DISCONNECTED). The ZAP handler gives it the key it authenticated
 * with (matched by the peer's address: ZAP does not say which socket), so
 * that a key's connections count before they announce: a key holds at most
 * SW_RELAY_UNANNOUNCED_PER_KEY connections that have not announced (and
 * max_conns_per_key announced ones), and a connection that has not announced
 * SW_RELAY_DEFAULT_ANNOUNCE_MS after it opened is shut down.
 */
typedef struct relay_conn {
    int fd;                          /* its socket (libzmq's), -1 = free entry */
    struct sockaddr_storage addr;    /* its remote address (guards against fd reuse) */
    socklen_t addr_len;              /* bytes of addr */
    char ip[64];                     /* the address as ZAP names it */
    char fp[SW_WIRE_KEY_FP_LEN + 1]; /* its key's fingerprint, "" until ZAP said */
    int64_t since_ms;                /* when it was accepted */
    int refused;                     /* 1: ZAP refused it (it is going) */
    int shut;                        /* 1: the relay shut it down */
} relay_conn_t;

/*
 * A client name whose connection left, held for the key that used it: the
 * head keeps that client's requests (and their output) a while after it
 * vanished, and another key announcing the name meanwhile must not look
 * like it. Only the same key may take it back until `until_ms`.
 */
typedef struct relay_hold {
    char name[SW_WIRE_NAME_MAX + 1]; /* the name */
    char fp[SW_WIRE_KEY_FP_LEN + 1]; /* the key that held it */
    int64_t until_ms;                /* held until then (monotonic ms); 0 = free entry */
} relay_hold_t;

struct relay {
    void *ctx;          /* ZeroMQ context */
    void *router;       /* the listening ROUTER */
    void *mon;          /* PAIR receiving router's monitor events */
    char endpoint[256]; /* bound endpoint */
    int heartbeat_ms;   /* sweep period */
    int handshake_ms;   /* ZMQ_HANDSHAKE_IVL: a connection's time to authenticate */
    relay_peer_t *peers[SW_WIRE_MAX_PEERS]; /* live peers, n_peers of them */
    int n_peers;
    int64_t start_ms;        /* relay start (monotonic ms) */
    int64_t sweep_at_ms;     /* next liveness sweep */
    uint64_t forwarded;      /* messages forwarded */
    uint64_t dropped;        /* messages not delivered */
    int secure;              /* 1 = CURVE + ZAP + allow-list */
    void *zap;               /* REP bound to RELAY_ZAP_EP (secure only) */
    char allow_path[4096];   /* allow-list file */
    sw_allow_entry_t *allow; /* current allow-list, n_allow entries */
    int n_allow;
    struct stat allow_st;          /* the file's stat when last read (change detection) */
    int allow_errno;               /* why the file could not be found, once said (0: found) */
    int64_t allow_check_at_ms;     /* next change check */
    volatile sig_atomic_t *reload; /* set from outside: re-read now */
    uint64_t unauthorized;         /* messages refused for an unknown or revoked key */
    int rate;                      /* messages/s a peer may send to other peers (bucket size too) */
    relay_parked_t *parked; /* (RELAY_PARK_MAX) held messages, n_parked of them, oldest first */
    int n_parked;
    size_t parked_bytes;        /* bytes held in parked */
    uint64_t refused;           /* handshakes refused by the ZAP handler, in all */
    uint64_t refused_window;    /* of them in the current log window */
    int64_t refused_since_ms;   /* start of the current log window */
    char refused_last[160];     /* the last one not logged: address and key */
    int max_conns_per_key;      /* live peers one key may hold */
    int max_conns_per_prefix;   /* TCP connections kept from one IPv4 /24 or IPv6 /64 */
    uint64_t prefix_refusals;   /* connections shut down for their prefix */
    int node_names;             /* distinct node names in the allow-list (their table room) */
    double client_rate;         /* bytes/s a client peer may send (bucket: max(1 s, a message)) */
    double node_rate;           /* bytes/s a node peer may send (bucket: 1 s of it, >= a frame) */
    size_t queue_max;           /* bytes libzmq may hold for one destination */
    size_t queue_total_max;     /* ... for all of them */
    atomic_size_t queued;       /* bytes libzmq holds for all destinations (relay_frame_t) */
    uint64_t budget_drops;      /* messages dropped for a destination over its byte budget */
    uint64_t refused_announces; /* announces refused for the key's role, name or count */
    relay_hold_t *holds;        /* (RELAY_HOLD_MAX) client names held for their key */
    relay_conn_t *conns;        /* (RELAY_CONNS_MAX) accepted TCP connections */
    int announce_ms;            /* a connection must announce within this of its accept */
    uint64_t conn_refusals;     /* handshakes refused for a key's connection counts */
    int lost;                   /* a DISCONNECTED event came: probe the peers soon */
    int64_t note_since;         /* start of the current second of notes (relay_note) */
    int note_lines;             /* lines written in it */
    uint64_t note_held;         /* lines left out in it */
    char note_last[256];        /* the last line left out */
    int64_t hold_ms;            /* how long a client's name stays held after it left */
};

/* Monotonic milliseconds. */
static inline int64_t relay_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- reply.c: replies to peers, lines about peers ---------------------------------------- */

/* Counts one more event; 1 when it is the 1st, 2nd, 4th, 8th, ... */
int relay_log_due(uint64_t *count);
/* Ends a second of notes when it is over: one line for what it left out. */
void relay_note_flush(relay_t *r, int64_t now);
/* Logs one line about something a peer did (SW_LOG_WARN or INFO), at most
 * RELAY_NOTE_PER_S a second. */
void relay_note(relay_t *r, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The fingerprint of Z85 key user for a log line (a static buffer), or "-". */
const char *relay_who_key(const char *user);
/* Sends msg from "relay" to the connection with routing id `id` (dropped when it cannot go). */
void relay_reply(relay_t *r, const void *id, size_t id_len, const sw_msg_t *msg);
/* An Error (code, about dest when not NULL) with a printf-style text. */
void relay_reply_error(relay_t *r, const void *id, size_t id_len, int code, const char *dest,
                       const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* The peer table. */
void relay_reply_table(relay_t *r, const void *id, size_t id_len);

/* ---- conn.c: TCP connections ------------------------------------------------------------- */

/* Reads every pending monitor event: connections accepted and gone (r->lost set when one went). */
void relay_events(relay_t *r);
/* The ZAP handler admitted key z85 for a connection from ip: 0, or -1 (why says why) when the
 * key has too many connections. */
int relay_conn_key(relay_t *r, const char *ip, const char *z85, char *why, size_t why_len);
/* Shuts down the connections that did not announce in time, forgets stale entries. */
void relay_conn_sweep(relay_t *r);
/* The connection frame came on (not announced yet) takes key user. */
void relay_conn_label(relay_t *r, zmq_msg_t *frame, const char *user);
/* Shuts down the connection a received frame came on, when known. */
void relay_conn_shut_frame(relay_t *r, zmq_msg_t *frame);
/* Ends a connection (libzmq's socket fd) from the relay's thread: SHUT_RD, never SHUT_RDWR
 * (conn.c says why: a libzmq abort); its entry is marked shut. */
void relay_cut(relay_t *r, int fd);
/* 1 when frame came on a connection the relay cut and that is not gone yet. */
int relay_conn_was_cut(const relay_t *r, zmq_msg_t *frame);

/* ---- peers.c: the peer table, held names, liveness --------------------------------------- */

/* Drops one reference to q (the peer's, or a released frame's). */
void relay_queue_unref(relay_queue_t *q);
/* Frees p (out of the table already). */
void relay_peer_free(relay_peer_t *p);
/* The peer on the connection with routing id `id`, or NULL. */
relay_peer_t *relay_peer_find_id(relay_t *r, const void *id, size_t len);
/* The peer called name (len bytes), or NULL. */
relay_peer_t *relay_peer_find_name(relay_t *r, const char *name, size_t len);
/* The live hold of a client name, or NULL. */
relay_hold_t *relay_hold_find(relay_t *r, const char *name, int64_t now);
/* Takes p out of the table (why: for the log line) and frees it. */
void relay_peer_remove(relay_t *r, relay_peer_t *p, const char *why);
/* 1 when the connection behind p still exists (probing it), 0 when gone. */
int relay_peer_alive(relay_t *r, relay_peer_t *p);
/* Remembers the TCP socket that a message from the peer with routing id `id` came on. */
void relay_peer_learn_fd(relay_t *r, const void *id, size_t id_len, zmq_msg_t *frame);
/* Shuts p's TCP connection down when its socket is known and still its own. */
void relay_peer_shut(relay_t *r, relay_peer_t *p);
/* The liveness sweep: connections, then peers gone or silent. */
void relay_sweep(relay_t *r);

/* ---- auth.c: the allow-list, ZAP, CURVE -------------------------------------------------- */

/* The allow-list entry of Z85 key `key`, or NULL. */
const sw_allow_entry_t *relay_allowed(const relay_t *r, const char *key);
/* Whether key user may announce as name with role: 0, or -1 with the reason in why. */
int relay_permit(const relay_t *r, const char *user, const char *name, int role, char *why,
                 size_t why_len);
/* SW_KEY_BOUND_ROLE, SW_KEY_BOUND_NAME or 0 for a peer announced under entry e (or NULL). */
int relay_key_bound(const sw_allow_entry_t *e);
/* CurveZMQ, the ZAP handler and the allow-list (or the insecure mode's checks); 0 or -1. */
int relay_auth_setup(relay_t *r, const relay_opts_t *o);
/* The loop's share (secure relays): ZAP requests, the refusal log, the allow-list's reload. */
void relay_auth_step(relay_t *r);

/* ---- announce.c: messages to the relay itself -------------------------------------------- */

/* A message addressed to the relay itself: [id]["relay"][header]. */
void relay_control(relay_t *r, const void *id, size_t id_len, relay_peer_t *sender,
                   const char *user, zmq_msg_t *hdr, int has_payload);

/* ---- forward.c: forwarding ----------------------------------------------------------------- */

/* Tries every held message, oldest first, keeping each destination's order. */
void relay_flush_parked(relay_t *r);
/* Forwards f (n frames: [id][dest][header][payload]?) from sender to dname (pinned to key
 * dkey when not ""). */
void relay_forward(relay_t *r, relay_peer_t *sender, const char *dname, const char *dkey,
                   zmq_msg_t *f, int n);

#endif
