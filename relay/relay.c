/*
 * relay.c - the relay's loop (see relay.h).
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
 * ZMQ_SRCFD of its messages). A peer silent for 5 heartbeat intervals is
 * removed and its connection shut down, so that it reconnects and announces
 * again if it ever resumes. libzmq's own timeout stays as a 10-minute backstop.
 */
#include "relay.h"

#include "codec.h"
#include "keys.h"
#include "log.h"
#include "seal.h"
#include "wire.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#define RELAY_ID_MAX 255    /* bytes in a ROUTER routing id */
#define RELAY_BATCH 256     /* messages handled per wakeup before timers run */
#define RELAY_RECHECK_MS 20 /* probe delay after a DISCONNECTED event */
#define RELAY_MON_EP "inproc://sw-relay-monitor"
#define RELAY_ZMTP_BACKSTOP_MS 600000         /* libzmq's own heartbeat timeout */
#define RELAY_ZAP_EP "inproc://zeromq.zap.01" /* fixed by the ZAP spec (RFC 27) */
#define RELAY_ALLOW_CHECK_MS 1000             /* allow-list file change check period */
#define RELAY_PARK_MAX 256                    /* messages held while their destination is full */
#define RELAY_PARK_PER_PAIR 8                 /* of them per (sender, destination) */
#define RELAY_PARK_BYTES (64u << 20)          /* bytes held in all of them */
#define RELAY_PARK_MS 5000                    /* held longer: dropped with ERR_DEST_BUSY */
#define RELAY_REFUSE_LOG_MS 60000             /* refused-handshake log window */
#define RELAY_REFUSE_LOG_LINES 5              /* refusals logged one by one per window */
#define RELAY_HOLD_MAX 1024                   /* client names held for their key after they left */
#define RELAY_NOTE_PER_S 20  /* lines a second about what peers did; the rest are counted */
#define RELAY_CONNS_MAX 8192 /* TCP connections tracked (beyond: shut down at once) */
/* A connection that has not announced may send only this much in one message (an announce, a
 * status query); more shuts it down, so that a key cannot make the relay take 16 MiB frames on
 * connections no limit counts. */
#define RELAY_UNANNOUNCED_MSG_MAX (64u << 10)
#define RELAY_TELL_MS 50 /* a node hears of its dropped control messages this often at most */
/*
 * Traffic classes: what a node sends to other nodes (Forwards, Verdicts,
 * session messages: the pipeline) and what it sends to clients (TokenChunks,
 * resends for a Resume) are paced by separate buckets, so that a node
 * streaming to clients never spends the budget its Forwards need. A client
 * sends only to heads: one class.
 */
#define RELAY_CLASS_NODES 0
#define RELAY_CLASS_CLIENTS 1
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
    double tokens[2];                  /* rate limit buckets (RELAY_CLASS_*): messages it may still
                                          send now */
    int64_t refill_ms;                 /* when the bucket was last refilled */
    uint64_t rate_drops;               /* messages dropped for going over the rate */
    int fd;                       /* its TCP socket (ZMQ_SRCFD, owned by libzmq), -1 = unknown */
    struct sockaddr_storage addr; /* the fd's remote address when learnt (guards fd reuse) */
    socklen_t addr_len;           /* bytes of addr */
    int client;                   /* 1: a client (its key's role; insecure: its announce) */
    int key_bound;                /* what its node key binds: SW_KEY_BOUND_NAME, _ROLE, or 0 */
    double byte_tokens[2];        /* byte-rate buckets: bytes it may still send now */
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

/* One forwarded frame whose release libzmq reports. */
typedef struct relay_frame {
    zmq_msg_t orig;       /* the received frame: its bytes are what is sent */
    size_t size;          /* bytes */
    relay_queue_t *q;     /* its destination's queue */
    atomic_size_t *total; /* the relay's total */
} relay_frame_t;

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
    int64_t note_since;         /* start of the current second of notes (s_note) */
    int note_lines;             /* lines written in it */
    uint64_t note_held;         /* lines left out in it */
    char note_last[256];        /* the last line left out */
    int64_t hold_ms;            /* how long a client's name stays held after it left */
};

/* Counts one more event; 1 when it is the 1st, 2nd, 4th, 8th, ... (a flood cannot flood the
 * log). */
static int s_log_due(uint64_t *count)
{
    ++*count;
    return (*count & (*count - 1)) == 0;
}

static int64_t s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Ends a second of notes: one line for what it left out. */
static void s_note_flush(relay_t *r, int64_t now)
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
static void s_note(relay_t *r, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void s_note(relay_t *r, int level, const char *fmt, ...)
{
    s_note_flush(r, s_now_ms());
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
static const char *s_who_key(const char *user)
{
    static char fp[SW_WIRE_KEY_FP_LEN + 1];
    if (!user || sw_keys_fingerprint(user, fp) != 0)
        return "-";
    return fp;
}

/* ---- connections (relay_conn_t) ------------------------------------------------ */

/* A connection libzmq accepted (monitor event ACCEPTED, fd). */
static void s_conn_accepted(relay_t *r, int fd)
{
    relay_conn_t *c = NULL;
    for (int i = 0; i < RELAY_CONNS_MAX && !c; i++)
        if (r->conns[i].fd < 0)
            c = &r->conns[i];
    if (!c) {
        shutdown(fd, SHUT_RDWR);
        s_note(r, SW_LOG_WARN, "relay: %d connections open: shut a new one down", RELAY_CONNS_MAX);
        return;
    }
    memset(c, 0, sizeof *c);
    c->fd = fd;
    c->since_ms = s_now_ms();
    c->addr_len = sizeof c->addr;
    if (getpeername(fd, (struct sockaddr *)&c->addr, &c->addr_len) != 0 ||
        getnameinfo((struct sockaddr *)&c->addr, c->addr_len, c->ip, sizeof c->ip, NULL, 0,
                    NI_NUMERICHOST) != 0)
        c->ip[0] = 0;
}

/* The connection went (monitor event DISCONNECTED, fd). */
static void s_conn_gone(relay_t *r, int fd)
{
    for (int i = 0; i < RELAY_CONNS_MAX; i++)
        if (r->conns[i].fd == fd)
            r->conns[i].fd = -1;
}

/* 1 when c's socket still is the connection it was accepted as. */
static int s_conn_same(const relay_conn_t *c)
{
    struct sockaddr_storage now;
    socklen_t len = sizeof now;
    return c->addr_len > 0 && getpeername(c->fd, (struct sockaddr *)&now, &len) == 0 &&
           len == c->addr_len && memcmp(&now, &c->addr, len) == 0;
}

static int s_conn_announced(const relay_t *r, const relay_conn_t *c);

/* A key's connections: *open those that are not going, *unannounced of them not announced. */
static void s_conn_count(const relay_t *r, const char *fp, int *open, int *unannounced)
{
    *open = *unannounced = 0;
    for (int i = 0; i < RELAY_CONNS_MAX; i++) {
        const relay_conn_t *c = &r->conns[i];
        if (c->fd < 0 || c->refused || c->shut || strcmp(c->fp, fp) != 0)
            continue;
        ++*open;
        *unannounced += !s_conn_announced(r, c);
    }
}

/*
 * The ZAP handler admitted key z85 for a connection from ip: gives the
 * connection (the oldest from ip without a key yet) its key and checks the
 * key's counts. 0, or -1 (the handshake is refused, for now: ZAP status 300)
 * with the reason in why when the key has SW_RELAY_UNANNOUNCED_PER_KEY
 * connections that have not announced, or max_conns_per_key + that many in
 * all.
 */
static int s_conn_key(relay_t *r, const char *ip, const char *z85, char *why, size_t why_len)
{
    char fp[SW_WIRE_KEY_FP_LEN + 1];
    if (sw_keys_fingerprint(z85, fp) != 0)
        return 0;
    relay_conn_t *c = NULL;
    for (int i = 0; i < RELAY_CONNS_MAX; i++) {
        relay_conn_t *k = &r->conns[i];
        if (k->fd >= 0 && !k->fp[0] && !k->refused && !strcmp(k->ip, ip) &&
            (!c || k->since_ms < c->since_ms))
            c = k;
    }
    if (c)
        snprintf(c->fp, sizeof c->fp, "%s", fp);
    int open = 0, unannounced = 0;
    s_conn_count(r, fp, &open, &unannounced);
    if (!c)
        open++, unannounced++; /* its ACCEPTED event is still on its way */
    if (unannounced <= SW_RELAY_UNANNOUNCED_PER_KEY &&
        open <= r->max_conns_per_key + SW_RELAY_UNANNOUNCED_PER_KEY)
        return 0;
    if (c)
        c->refused = 1;
    r->conn_refusals++;
    snprintf(why, why_len,
             "this key has %d connections open, %d of them not announced (at most %d not "
             "announced, %d in all: the relay's --max-conns-per-key): retry later",
             open, unannounced, SW_RELAY_UNANNOUNCED_PER_KEY,
             r->max_conns_per_key + SW_RELAY_UNANNOUNCED_PER_KEY);
    s_note(r, SW_LOG_WARN, "relay: refused a connection of key %s from %s: %s (%llu so far)", fp,
           ip, why, (unsigned long long)r->conn_refusals);
    return -1;
}

/* Shuts down the connections that did not announce in time, forgets stale entries. */
static void s_conn_sweep(relay_t *r)
{
    const int64_t now = s_now_ms();
    for (int i = 0; i < RELAY_CONNS_MAX; i++) {
        relay_conn_t *c = &r->conns[i];
        if (c->fd < 0)
            continue;
        if (!s_conn_same(c)) { /* closed (its event was lost) and maybe reused */
            c->fd = -1;
            continue;
        }
        if (c->shut || c->refused || now - c->since_ms <= r->announce_ms || s_conn_announced(r, c))
            continue;
        shutdown(c->fd, SHUT_RDWR);
        c->shut = 1;
        s_note(r, SW_LOG_WARN,
               "relay: a connection of key %s from %s did not announce within %d ms: shut down",
               c->fp[0] ? c->fp : "-", c->ip, r->announce_ms);
    }
}

/*
 * A message from a connection that has not announced came on frame's socket
 * (ZMQ_SRCFD) with the key user: the connection's entry takes that key. The
 * ZAP handler can only guess it by address (two handshakes from one address
 * at once may swap their keys); the first message settles it.
 */
static void s_conn_label(relay_t *r, zmq_msg_t *frame, const char *user)
{
    char fp[SW_WIRE_KEY_FP_LEN + 1];
    const int fd = zmq_msg_get(frame, ZMQ_SRCFD);
    if (fd < 0 || !user || sw_keys_fingerprint(user, fp) != 0)
        return;
    for (int i = 0; i < RELAY_CONNS_MAX; i++) {
        relay_conn_t *c = &r->conns[i];
        if (c->fd == fd && strcmp(c->fp, fp) != 0 && s_conn_same(c))
            snprintf(c->fp, sizeof c->fp, "%s", fp);
    }
}

/* Shuts down the connection a received frame came on (ZMQ_SRCFD), when known. */
static void s_conn_shut_frame(relay_t *r, zmq_msg_t *frame)
{
    const int fd = zmq_msg_get(frame, ZMQ_SRCFD);
    for (int i = 0; fd >= 0 && i < RELAY_CONNS_MAX; i++) {
        relay_conn_t *c = &r->conns[i];
        if (c->fd == fd && s_conn_same(c) && !c->shut) {
            shutdown(fd, SHUT_RDWR);
            c->shut = 1;
        }
    }
}

/* ---- allow-list and ZAP -------------------------------------------------------- */

static const sw_allow_entry_t *s_allowed(const relay_t *r, const char *key)
{
    if (!key)
        return NULL;
    for (int i = 0; i < r->n_allow; i++)
        if (strncmp(r->allow[i].key, key, SW_KEY_Z85_LEN) == 0 && strlen(key) == SW_KEY_Z85_LEN)
            return &r->allow[i];
    return NULL;
}

static void s_remove(relay_t *r, struct relay_peer *p, const char *why);
static void s_events(relay_t *r);
static void s_reply_error(relay_t *r, const void *id, size_t id_len, int code, const char *dest,
                          const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static int s_is_node_role(int role)
{
    return role >= SW_ROLE_HEAD && role <= SW_ROLE_FULL;
}

/* 1 when name is base or base-SUFFIX: a client key bound to the name base may announce both
 * (a client adds a random suffix to its name). */
static int s_name_in(const char *base, const char *name)
{
    size_t n = strlen(base);
    return n > 0 && !strncmp(base, name, n) && (name[n] == 0 || name[n] == '-');
}

/*
 * Whether key `user` may announce as `name` with `role` (secure relays): its
 * allow-list entry binds a role and maybe a name, and a name listed for some
 * key is reserved for the keys that list it, even while no peer holds it. 0,
 * or -1 with the reason in why.
 */
static int s_permit(const relay_t *r, const char *user, const char *name, int role, char *why,
                    size_t why_len)
{
    const sw_allow_entry_t *e = s_allowed(r, user);
    if (!e) {
        snprintf(why, why_len, "your key is not on the relay's allow-list");
        return -1;
    }
    if (e->role == SW_ALLOW_NODE && (!s_is_node_role(role) || strcmp(e->name, name) != 0)) {
        snprintf(why, why_len,
                 "this key is the node key of '%s': it may only announce as '%s', as a head, "
                 "middle or tail node",
                 e->name, e->name);
        return -1;
    }
    /* a node key bound to a role too ("KEY head NAME", "KEY stage NAME"): any other node key
     * could otherwise announce a second head of a model and make the clients refuse to
     * choose (issue 21, finding 9) */
    if (e->role == SW_ALLOW_NODE && e->bind == SW_BIND_HEAD && role != SW_ROLE_HEAD &&
        role != SW_ROLE_FULL) {
        snprintf(why, why_len,
                 "the allow-list binds this key to the head role ('KEY head %s'): it may only "
                 "announce as a head (layers from 0)",
                 e->name);
        return -1;
    }
    if (e->role == SW_ALLOW_NODE && e->bind == SW_BIND_STAGE && role != SW_ROLE_MIDDLE &&
        role != SW_ROLE_TAIL) {
        snprintf(why, why_len,
                 "the allow-list binds this key to a stage ('KEY stage %s'): it may only announce "
                 "as a middle or tail node, not as a head",
                 e->name);
        return -1;
    }
    if (e->role == SW_ALLOW_CLIENT && role != SW_ROLE_CLIENT) {
        snprintf(why, why_len,
                 "this is a client key: it cannot announce as a head, middle or tail node (a "
                 "node needs its own key, listed as 'KEY head|stage NAME' in the allow-list)");
        return -1;
    }
    if (e->role == SW_ALLOW_CLIENT && e->name[0] && !s_name_in(e->name, name)) {
        snprintf(why, why_len, "this client key may only announce as '%s' or '%s-...'", e->name,
                 e->name);
        return -1;
    }
    /* A listed name itself is reserved; its suffixed forms are not: a bound
     * client adds 48 random bits to it, a live name is never taken, a dead
     * one is held for its key (--name-hold-s) and the head streams a request
     * only to the key that asked. Reserving the prefix too would refuse every
     * unnamed client key as soon as the list names a client "client" (cluster
     * init's default), as clients announce "client-SUFFIX" by default. */
    if (!e->name[0]) {
        for (int i = 0; i < r->n_allow; i++)
            if (!strcmp(r->allow[i].name, name)) {
                snprintf(why, why_len,
                         "the name '%s' is reserved in the relay's allow-list for another key",
                         name);
                return -1;
            }
    }
    return 0;
}

/* What the peer table says of a peer announced under entry e (NULL: none, insecure):
 * SW_KEY_BOUND_ROLE for a node key bound to its name and role, SW_KEY_BOUND_NAME for one
 * bound to its name only, 0 otherwise. */
static int s_key_bound(const sw_allow_entry_t *e)
{
    if (!e || e->role != SW_ALLOW_NODE)
        return 0;
    return e->bind == SW_BIND_ANY ? SW_KEY_BOUND_NAME : SW_KEY_BOUND_ROLE;
}

static int s_name_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Distinct node names of the allow-list: the table keeps room for them. */
static int s_count_node_names(const relay_t *r)
{
    const char **names = malloc((size_t)(r->n_allow ? r->n_allow : 1) * sizeof *names);
    if (!names)
        return 0;
    int n = 0, distinct = 0;
    for (int i = 0; i < r->n_allow; i++)
        if (r->allow[i].role == SW_ALLOW_NODE)
            names[n++] = r->allow[i].name;
    qsort(names, (size_t)n, sizeof *names, s_name_cmp);
    for (int i = 0; i < n; i++)
        distinct += i == 0 || strcmp(names[i - 1], names[i]) != 0;
    free(names);
    return distinct;
}

/*
 * Re-reads the allow-list when the file changed (or when forced) and drops
 * every peer whose key is no longer on it or may no longer hold its name and
 * role. A file that fails to parse keeps the previous list (with an error
 * line each time the file changes), so a typo cannot open the relay to
 * anyone. 0, or -1 when the first load fails.
 */
static int s_allow_reload(relay_t *r, int force)
{
    struct stat st;
    if (stat(r->allow_path, &st) != 0) {
        if (r->allow)
            SW_ERR("relay: allow-list %s: %s (keeping the %d keys loaded)", r->allow_path,
                   strerror(errno), r->n_allow);
        else
            SW_ERR("relay: allow-list %s: %s", r->allow_path, strerror(errno));
        return r->allow ? 0 : -1;
    }
    if (!force && r->allow && st.st_mtim.tv_sec == r->allow_st.st_mtim.tv_sec &&
        st.st_mtim.tv_nsec == r->allow_st.st_mtim.tv_nsec && st.st_size == r->allow_st.st_size &&
        st.st_ino == r->allow_st.st_ino)
        return 0;
    r->allow_st = st;
    sw_allow_entry_t *list = NULL;
    int n = 0;
    char err[512];
    if (sw_allow_load(r->allow_path, &list, &n, err, sizeof err) != 0) {
        if (r->allow)
            SW_ERR("relay: %s (keeping the %d keys loaded before)", err, r->n_allow);
        else
            SW_ERR("relay: %s", err);
        return r->allow ? 0 : -1;
    }
    int first = r->allow == NULL;
    free(r->allow);
    r->allow = list ? list : calloc(1, sizeof *list); /* non-NULL marks "loaded" */
    r->n_allow = list ? n : 0;
    if (!r->allow)
        return -1;
    int nodes = 0, legacy = 0, legacy_line = 0, unbound = 0, unbound_line = 0;
    for (int i = 0; i < r->n_allow; i++) {
        nodes += r->allow[i].role == SW_ALLOW_NODE;
        if (r->allow[i].legacy && !legacy++)
            legacy_line = r->allow[i].legacy;
        if (r->allow[i].role == SW_ALLOW_NODE && r->allow[i].bind == SW_BIND_ANY && !unbound++)
            unbound_line = r->allow[i].line;
    }
    r->node_names = s_count_node_names(r);
    SW_INFO("relay: allow-list %s: %d keys (%d node, %d client)%s", r->allow_path, r->n_allow,
            nodes, r->n_allow - nodes, first ? "" : " (reloaded)");
    if (legacy)
        SW_WARN("relay: %s: %d line(s) in the old 'KEY [NAME]' form (the first on line %d), read "
                "as 'KEY node NAME' and 'KEY client': write them that way (docs/security.md)",
                r->allow_path, legacy, legacy_line);
    if (unbound)
        SW_WARN("relay: %s: %d node key(s) bound to a name but not to a role (the first on line "
                "%d): each may announce as a head too; write 'KEY head NAME' or 'KEY stage NAME' "
                "(docs/security.md)",
                r->allow_path, unbound, unbound_line);
    for (int i = 0; i < r->n_peers;) {
        relay_peer_t *p = r->peers[i];
        char why[256];
        if (s_permit(r, p->user, p->name, p->ann.a.role, why, sizeof why) != 0) {
            s_note(r, SW_LOG_WARN, "relay: key of %s revoked or changed (%s; key %s): dropping it",
                   p->name, why, p->fp);
            s_reply_error(r, p->id, p->id_len, SW_ERROR_UNAUTHORIZED, NULL,
                          "the relay's allow-list changed: %s", why);
            s_remove(r, p, "key revoked");
            continue;
        }
        const sw_allow_entry_t *e = s_allowed(r, p->user);
        p->key_bound = s_key_bound(e);
        p->client = e->role == SW_ALLOW_CLIENT;
        i++;
    }
    return 0;
}

/* Ends the refused-handshake log window when it is over: one line for what it did not log. */
static void s_refused_flush(relay_t *r, int64_t now)
{
    if (now - r->refused_since_ms < RELAY_REFUSE_LOG_MS)
        return;
    if (r->refused_window > RELAY_REFUSE_LOG_LINES)
        SW_WARN("relay: refused %llu more handshakes in the last %d s (the last from %s); "
                "%llu refused since start",
                (unsigned long long)(r->refused_window - RELAY_REFUSE_LOG_LINES),
                RELAY_REFUSE_LOG_MS / 1000, r->refused_last, (unsigned long long)r->refused);
    r->refused_window = 0;
    r->refused_since_ms = now;
}

/*
 * Logs a refused handshake: the first few of each minute one line each, the
 * rest as one summary line at the end of the minute, so that a stream of
 * refused connections (anyone on the network can cause one) cannot flood the
 * log. addr is the ZAP request's address frame.
 */
static void s_refused_log(relay_t *r, zmq_msg_t *addr, const char *why, const char *key)
{
    char where[64];
    size_t n = zmq_msg_size(addr) < sizeof where - 1 ? zmq_msg_size(addr) : sizeof where - 1;
    memcpy(where, zmq_msg_data(addr), n);
    where[n] = 0;
    for (size_t i = 0; i < n; i++) /* an address is [0-9a-f.:], but keep the log clean */
        if ((unsigned char)where[i] < 0x20 || (unsigned char)where[i] > 0x7e)
            where[i] = '?';
    r->unauthorized++;
    r->refused++;
    s_refused_flush(r, s_now_ms());
    if (++r->refused_window <= RELAY_REFUSE_LOG_LINES) {
        SW_WARN("relay: refused a connection from %s: %s%s%s%s", where, why, key[0] ? " " : "", key,
                r->refused_window == RELAY_REFUSE_LOG_LINES ? " (further refusals this "
                                                              "minute: one summary line)"
                                                            : "");
        return;
    }
    snprintf(r->refused_last, sizeof r->refused_last, "%s%s%s", where, key[0] ? " key " : "", key);
}

/* Sends one ZAP reply (RFC 27): version, request id, status, text, user id, metadata. */
static void s_zap_reply(relay_t *r, zmq_msg_t *reqid, const char *status, const char *text,
                        const char *user)
{
    zmq_send(r->zap, "1.0", 3, ZMQ_SNDMORE);
    zmq_msg_send(reqid, r->zap, ZMQ_SNDMORE);
    zmq_send(r->zap, status, strlen(status), ZMQ_SNDMORE);
    zmq_send(r->zap, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(r->zap, user, strlen(user), ZMQ_SNDMORE);
    zmq_send(r->zap, "", 0, 0);
}

/*
 * Answers every pending ZAP request: a CURVE client whose public key is on
 * the allow-list gets 200 with the Z85 key as its User-Id; anything else 400.
 */
static void s_zap(relay_t *r)
{
    s_events(r); /* the connections being authenticated were accepted before */
    for (;;) {
        zmq_msg_t f[7];
        int n = 0, more = 1;
        for (int i = 0; i < 7; i++)
            zmq_msg_init(&f[i]);
        while (more) {
            zmq_msg_t *dst = &f[n < 7 ? n : 6];
            if (n >= 7) {
                zmq_msg_close(dst);
                zmq_msg_init(dst);
            }
            if (zmq_msg_recv(dst, r->zap, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
                for (int i = 0; i < 7; i++)
                    zmq_msg_close(&f[i]);
                return;
            }
            more = zmq_msg_more(dst);
            n++;
        }
        char key[SW_KEY_Z85_LEN + 1] = "";
        const char *status = "400", *text = "key not on the allow-list";
        if (n != 7 || zmq_msg_size(&f[0]) != 3 || memcmp(zmq_msg_data(&f[0]), "1.0", 3) != 0) {
            status = "500";
            text = "malformed ZAP request";
        } else if (zmq_msg_size(&f[5]) != 5 || memcmp(zmq_msg_data(&f[5]), "CURVE", 5) != 0) {
            text = "only CURVE clients are admitted";
        } else if (zmq_msg_size(&f[6]) == 32 && zmq_z85_encode(key, zmq_msg_data(&f[6]), 32) &&
                   s_allowed(r, key)) {
            status = "200";
            text = "OK";
            char ip[64], why[256];
            size_t il = zmq_msg_size(&f[3]) < sizeof ip - 1 ? zmq_msg_size(&f[3]) : sizeof ip - 1;
            memcpy(ip, zmq_msg_data(&f[3]), il);
            ip[il] = 0;
            if (s_conn_key(r, ip, key, why, sizeof why) != 0) {
                status = "300"; /* temporary: libzmq tells the peer, which redials */
                text = "too many connections of this key";
            }
        }
        if (status[0] == '4' || status[0] == '5')
            s_refused_log(r, &f[3], text, key);
        zmq_msg_t reqid;
        zmq_msg_init(&reqid);
        if (n >= 2)
            zmq_msg_copy(&reqid, &f[1]);
        s_zap_reply(r, &reqid, status, text, status[0] == '2' ? key : "");
        zmq_msg_close(&reqid);
        for (int i = 0; i < 7; i++)
            zmq_msg_close(&f[i]);
    }
}

/*
 * CurveZMQ server: the relay's secret key before bind, the ZAP handler bound
 * before the ROUTER so that no connection is ever accepted without it, and the
 * allow-list. Without keys only loopback endpoints are allowed.
 */
static int s_relay_secure(relay_t *r, const relay_opts_t *o)
{
    char err[512], pub[SW_KEY_Z85_LEN + 1], sec[SW_KEY_Z85_LEN + 1];
    if (o->insecure_loopback) {
        if (!sw_endpoint_is_loopback(o->listen)) {
            SW_ERR("relay: --insecure-loopback only binds loopback endpoints (127.0.0.1, "
                   "localhost, [::1]); %s is not one: use --key and --allow",
                   o->listen);
            return -1;
        }
        if (o->key_file || o->allow_file)
            SW_WARN("relay: --insecure-loopback: ignoring --key / --allow");
        SW_WARN("relay: INSECURE development mode: no authentication, no encryption");
        return 0;
    }
    if (!o->key_file || !o->allow_file) {
        SW_ERR("relay: --key FILE and --allow FILE are required (without an allow-list anyone "
               "could connect); make keys with 'shardwire keygen', or use --insecure-loopback "
               "for a loopback-only test setup");
        return -1;
    }
    if (sw_keys_curve_check(err, sizeof err) != 0 ||
        sw_keys_load_secret(o->key_file, pub, sec, err, sizeof err) != 0) {
        SW_ERR("relay: %s", err);
        return -1;
    }
    if (snprintf(r->allow_path, sizeof r->allow_path, "%s", o->allow_file) >=
        (int)sizeof r->allow_path) {
        SW_ERR("relay: allow-list path too long");
        return -1;
    }
    if (s_allow_reload(r, 1) != 0) {
        sodium_memzero(sec, sizeof sec);
        return -1;
    }
    r->zap = zmq_socket(r->ctx, ZMQ_REP);
    int one = 1, zero = 0;
    int rc = !r->zap || zmq_setsockopt(r->zap, ZMQ_LINGER, &zero, sizeof zero) ||
             zmq_bind(r->zap, RELAY_ZAP_EP) ||
             zmq_setsockopt(r->router, ZMQ_CURVE_SERVER, &one, sizeof one) ||
             zmq_setsockopt(r->router, ZMQ_CURVE_SECRETKEY, sec, SW_KEY_Z85_LEN + 1) ||
             zmq_setsockopt(r->router, ZMQ_ZAP_DOMAIN, "shardwire", 9);
    sodium_memzero(sec, sizeof sec);
    if (rc) {
        SW_ERR("relay: CURVE / ZAP setup: %s", zmq_strerror(errno));
        return -1;
    }
    r->secure = 1;
    r->allow_check_at_ms = s_now_ms() + RELAY_ALLOW_CHECK_MS;
    SW_INFO("relay: CURVE on; relay public key %s", pub);
    return 0;
}

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
    int timeout = RELAY_ZMTP_BACKSTOP_MS; /* liveness is judged by bytes (see the top) */
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
    if (s_relay_secure(r, opts) != 0) {
        relay_destroy(&r);
        return NULL;
    }
    r->reload = opts->reload;
    r->rate = opts->rate > 0 ? opts->rate : SW_RELAY_DEFAULT_RATE;
    r->max_conns_per_key =
        opts->max_conns_per_key > 0 ? opts->max_conns_per_key : SW_RELAY_DEFAULT_CONNS_PER_KEY;
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
    r->start_ms = s_now_ms();
    r->sweep_at_ms = r->start_ms + r->heartbeat_ms;
    return r;
err:
    SW_ERR("relay: socket setup failed: %s", zmq_strerror(errno));
    relay_destroy(&r);
    return NULL;
}

/* Drops one reference to q (the peer's, or a released frame's). */
static void s_queue_unref(relay_queue_t *q)
{
    if (q && atomic_fetch_sub(&q->refs, 1) == 1)
        free(q);
}

static void s_peer_free(relay_peer_t *p)
{
    s_queue_unref(p->q);
    free(p);
}

/* libzmq is done with a tracked frame (I/O thread, or a send that failed). */
static void s_frame_free(void *data, void *hint)
{
    (void)data;
    relay_frame_t *t = hint;
    atomic_fetch_sub(&t->q->bytes, t->size);
    atomic_fetch_sub(t->total, t->size);
    zmq_msg_close(&t->orig);
    s_queue_unref(t->q);
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

void relay_destroy(relay_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    relay_t *r = *self_p;
    for (int i = 0; i < r->n_peers; i++)
        s_peer_free(r->peers[i]);
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

/* ---- peer table ------------------------------------------------------------- */

static relay_peer_t *s_find_id(relay_t *r, const void *id, size_t len)
{
    for (int i = 0; i < r->n_peers; i++)
        if (r->peers[i]->id_len == len && memcmp(r->peers[i]->id, id, len) == 0)
            return r->peers[i];
    return NULL;
}

/* 1 when a peer announced on connection c. */
static int s_conn_announced(const relay_t *r, const relay_conn_t *c)
{
    for (int i = 0; i < r->n_peers; i++)
        if (r->peers[i]->fd == c->fd)
            return 1;
    return 0;
}

static relay_peer_t *s_find_name(relay_t *r, const char *name, size_t len)
{
    for (int i = 0; i < r->n_peers; i++)
        if (strlen(r->peers[i]->name) == len && memcmp(r->peers[i]->name, name, len) == 0)
            return r->peers[i];
    return NULL;
}

/* The live hold of a client name, or NULL. */
static relay_hold_t *s_hold_find(relay_t *r, const char *name, int64_t now)
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

static void s_remove(relay_t *r, struct relay_peer *p, const char *why)
{
    for (int i = 0; i < r->n_peers; i++) {
        if (r->peers[i] == p) {
            s_hold_add(r, p, s_now_ms());
            s_note(r, SW_LOG_INFO, "peer %s left (%s) after %.1f s", p->name, why,
                   (double)(s_now_ms() - p->joined_ms) / 1000.0);
            s_peer_free(p);
            r->peers[i] = r->peers[--r->n_peers];
            return;
        }
    }
}

/* 1 when the connection behind p still exists (probing it), 0 when gone. */
static int s_alive(relay_t *r, relay_peer_t *p)
{
    if (zmq_send(r->router, p->id, p->id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return errno != EHOSTUNREACH; /* EAGAIN: alive, its queue is full */
    if (zmq_send(r->router, "", 0, ZMQ_DONTWAIT) < 0)
        s_note(r, SW_LOG_WARN, "relay: probe body to %s: %s", p->name, zmq_strerror(errno));
    p->alive_ms = s_now_ms();
    return 1;
}

/* Remembers the TCP socket that a message from the peer with routing id
 * `id` came on (once per connection). */
static void s_learn_fd(relay_t *r, const void *id, size_t id_len, zmq_msg_t *frame)
{
    relay_peer_t *p = s_find_id(r, id, id_len);
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

/* Shuts p's TCP connection down when its socket is known and still its own:
 * libzmq sees the close and forgets the routing id (the relay cannot close one
 * ROUTER connection otherwise). */
static void s_shut(relay_peer_t *p)
{
    if (s_silent_ms(p) >= 0)
        shutdown(p->fd, SHUT_RDWR);
}

static void s_sweep(relay_t *r)
{
    s_conn_sweep(r);
    const long limit = (long)SW_RELAY_SILENT_IVLS * r->heartbeat_ms;
    for (int i = 0; i < r->n_peers;) {
        relay_peer_t *p = r->peers[i];
        if (!s_alive(r, p)) {
            s_remove(r, p, "connection closed");
            continue; /* the last one moved into slot i */
        }
        long silent = s_silent_ms(p);
        if (silent > limit) {
            s_note(r, SW_LOG_WARN,
                   "relay: no data from %s (key %s) for %ld ms (limit %ld): dropping its "
                   "connection",
                   p->name, p->fp[0] ? p->fp : "-", silent, limit);
            shutdown(p->fd, SHUT_RDWR); /* libzmq sees the close and forgets the id */
            s_remove(r, p, "heartbeats stopped");
            continue;
        }
        i++;
    }
}

/* ---- replies from the relay itself ------------------------------------------ */

static void s_reply(relay_t *r, const void *id, size_t id_len, const sw_msg_t *msg)
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

static void s_reply_error(relay_t *r, const void *id, size_t id_len, int code, const char *dest,
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
    s_reply(r, id, id_len, &msg);
}

static void s_reply_table(relay_t *r, const void *id, size_t id_len)
{
    int64_t now = s_now_ms();
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
    s_reply(r, id, id_len, &msg);
}

static void s_announce(relay_t *r, const void *id, size_t id_len, relay_peer_t *sender,
                       const char *user, const sw_msg_announce_t *a)
{
    char kfp[SW_WIRE_KEY_FP_LEN + 1] = "";
    if (user)
        (void)sw_keys_fingerprint(user, kfp);
    if (strcmp(a->name, SW_WIRE_RELAY_NAME) == 0) {
        s_reply_error(r, id, id_len, SW_ERROR_NAME_TAKEN, NULL, "the name '%s' is reserved",
                      SW_WIRE_RELAY_NAME);
        return;
    }
    const sw_allow_entry_t *e = r->secure ? s_allowed(r, user) : NULL;
    if (r->secure) { /* role and name must be what the key's allow-list entry permits */
        char why[256];
        if (s_permit(r, user, a->name, a->role, why, sizeof why) != 0) {
            if (s_log_due(&r->refused_announces))
                s_note(r, SW_LOG_WARN,
                       "relay: key %s may not announce as %s (%s): %s (%llu refused announces so "
                       "far)",
                       kfp[0] ? kfp : "?", a->name, sw_wire_role_name(a->role), why,
                       (unsigned long long)r->refused_announces);
            r->unauthorized++;
            s_reply_error(r, id, id_len, SW_ERROR_UNAUTHORIZED, NULL, "%s", why);
            return;
        }
    }
    if (sender) {
        /* a standby auto node takes the role of the range its head assigned
         * (placement); every other peer keeps the role it joined with */
        const sw_msg_announce_t *was = &sender->ann.a;
        const int placed = sw_wire_standby(was->auto_place, was->layer_begin, was->layer_end) &&
                           a->auto_place && a->role != SW_ROLE_CLIENT;
        if (strcmp(sender->name, a->name) != 0 || (sender->ann.a.role != a->role && !placed)) {
            s_reply_error(r, id, id_len, SW_ERROR_BAD_REQUEST, NULL,
                          "this connection is already announced as %s (%s)", sender->name,
                          sw_wire_role_name(sender->ann.a.role));
            return;
        }
        /* a repeated announce: its fields replace the old ones (a validated
         * announce always fits the copy) */
        const int was_standby = sw_wire_standby(was->auto_place, was->layer_begin, was->layer_end);
        if (sw_codec_announce_copy(&sender->ann, a) != 0) {
            s_reply_error(r, id, id_len, SW_ERROR_INTERNAL, NULL, "the announce does not fit");
            return;
        }
        if (was_standby && !sw_wire_standby(a->auto_place, a->layer_begin, a->layer_end))
            s_note(r, SW_LOG_INFO, "peer %s placed: %s, layers [%u, %u) of %u", a->name,
                   sw_wire_role_name((int)a->role), a->layer_begin, a->layer_end, a->n_layers);
    } else {
        const int client = e ? e->role == SW_ALLOW_CLIENT : a->role == SW_ROLE_CLIENT;
        char fp[SW_WIRE_KEY_FP_LEN + 1] = "";
        if (r->secure && sw_keys_fingerprint(user, fp) != 0) {
            s_reply_error(r, id, id_len, SW_ERROR_UNAUTHORIZED, NULL, "no key on this connection");
            return;
        }
        relay_peer_t *holder = s_find_name(r, a->name, strlen(a->name));
        if (holder && client && holder->client && fp[0] && !strcmp(holder->fp, fp)) {
            /* The same client key again: it reconnected before the relay saw its old
             * connection go (a NAT that dropped the mapping, a link that went down). */
            s_shut(holder);
            s_remove(r, holder, "replaced by a new connection of its key");
            holder = NULL;
        }
        if (holder && s_alive(r, holder)) {
            if (s_log_due(&r->refused_announces))
                s_note(r, SW_LOG_WARN,
                       "relay: key %s may not announce as %s: held by a live connection (%llu "
                       "refused announces so far)",
                       fp[0] ? fp : "(none)", a->name, (unsigned long long)r->refused_announces);
            s_reply_error(r, id, id_len, SW_ERROR_NAME_TAKEN, NULL,
                          "the name %s is held by a live peer", a->name);
            return;
        }
        if (holder)
            s_remove(r, holder, "replaced by a new connection");
        const int64_t now = s_now_ms();
        relay_hold_t *hold = s_hold_find(r, a->name, now);
        if (hold && strcmp(hold->fp, fp) != 0) {
            if (s_log_due(&r->refused_announces))
                s_note(r, SW_LOG_WARN,
                       "relay: key %s may not announce as %s: the name is held for the key that "
                       "used it (%llu refused announces so far)",
                       fp[0] ? fp : "(none)", a->name, (unsigned long long)r->refused_announces);
            s_reply_error(r, id, id_len, SW_ERROR_NAME_TAKEN, NULL,
                          "the name %s is held for the key that used it for %.0f s more (its "
                          "requests may still live at a head)",
                          a->name, (double)(hold->until_ms - now) / 1e3);
            return;
        }
        if (hold)
            hold->until_ms = 0; /* its key takes it back */
        if (r->secure) {
            int conns = 0, nodes = 0;
            for (int i = 0; i < r->n_peers; i++) {
                conns += !strcmp(r->peers[i]->user, user);
                nodes += r->peers[i]->key_bound != 0;
            }
            if (conns >= r->max_conns_per_key) {
                if (s_log_due(&r->refused_announces))
                    s_note(r, SW_LOG_WARN,
                           "relay: key %s holds %d connections already: refused '%s' (see "
                           "--max-conns-per-key; %llu refused announces so far)",
                           fp, conns, a->name, (unsigned long long)r->refused_announces);
                s_reply_error(r, id, id_len, SW_ERROR_RELAY_FULL, NULL,
                              "this key holds %d connections to the relay already, its limit "
                              "(the relay's --max-conns-per-key)",
                              conns);
                return;
            }
            /* room stays for every node of the allow-list that is away, so that a
             * crowd of clients cannot lock a restarting node out */
            int reserve = r->node_names - nodes;
            if (reserve > SW_WIRE_MAX_PEERS / 2)
                reserve = SW_WIRE_MAX_PEERS / 2;
            if (client && reserve > 0 && r->n_peers + reserve >= SW_WIRE_MAX_PEERS) {
                s_reply_error(r, id, id_len, SW_ERROR_RELAY_FULL, NULL,
                              "the relay holds %d peers and keeps room for %d node(s) of its "
                              "allow-list: no room for another client now",
                              r->n_peers, reserve);
                return;
            }
        }
        if (r->n_peers == SW_WIRE_MAX_PEERS) {
            s_reply_error(r, id, id_len, SW_ERROR_RELAY_FULL, NULL,
                          "the relay holds %d peers already", SW_WIRE_MAX_PEERS);
            return;
        }
        relay_peer_t *p = calloc(1, sizeof *p);
        relay_queue_t *q = p ? calloc(1, sizeof *q) : NULL;
        if (!q || sw_codec_announce_copy(&p->ann, a) != 0) {
            free(p);
            free(q);
            s_reply_error(r, id, id_len, SW_ERROR_INTERNAL, NULL, "out of memory");
            return;
        }
        atomic_init(&q->bytes, 0);
        atomic_init(&q->refs, 1);
        p->q = q;
        memcpy(p->id, id, id_len);
        p->id_len = id_len;
        if (user)
            snprintf(p->user, sizeof p->user, "%s", user);
        p->name = p->ann.name;
        snprintf(p->fp, sizeof p->fp, "%s", fp);
        sw_wire_addr(p->source, p->name, p->fp);
        p->joined_ms = p->alive_ms = p->msg_ms = p->refill_ms = s_now_ms();
        p->tokens[0] = p->tokens[1] = r->rate;
        p->client = client;
        p->key_bound = s_key_bound(e);
        p->byte_tokens[0] = p->byte_tokens[1] = client && r->secure ? r->client_rate : r->node_rate;
        p->fd = -1;
        r->peers[r->n_peers++] = p;
        if (a->role == SW_ROLE_CLIENT)
            s_note(r, SW_LOG_INFO, "peer %s joined: client (key %s)", a->name,
                   p->fp[0] ? p->fp : "-");
        else
            s_note(r, SW_LOG_INFO,
                   "peer %s joined: %s%s, layers [%u, %u) of %u, backend '%s', %u sessions (key "
                   "%s)",
                   a->name, sw_wire_role_name((int)a->role),
                   p->key_bound == SW_KEY_BOUND_ROLE ? " (key-bound node, name and role)"
                   : p->key_bound                    ? " (key-bound node)"
                                                     : "",
                   a->layer_begin, a->layer_end, a->n_layers, a->backend, a->max_sessions,
                   p->fp[0] ? p->fp : "-");
    }
    const sw_msg_t ack = {
        .type = SW_MSG_ANNOUNCE_ACK,
        .ack = {.name = a->name,
                .heartbeat_ms = (uint32_t)r->heartbeat_ms,
                .max_frame_bytes = SW_WIRE_MAX_FRAME},
    };
    s_reply(r, id, id_len, &ack);
}

/* A message addressed to the relay itself: [id]["relay"][header]. */
static void s_control(relay_t *r, const void *id, size_t id_len, relay_peer_t *sender,
                      const char *user, zmq_msg_t *hdr, int has_payload)
{
    if (sw_seal_is_sealed(zmq_msg_data(hdr), zmq_msg_size(hdr))) {
        s_reply_error(r, id, id_len, SW_ERROR_BAD_REQUEST, NULL,
                      "messages to the relay are not sealed");
        return;
    }
    char err[SW_WIRE_ERR_LEN];
    sw_wire_msg_t m = {0};
    int rc = sw_wire_decode_msg(zmq_msg_data(hdr), zmq_msg_size(hdr), has_payload,
                                has_payload ? 1 : 0, &m, err, sizeof err);
    if (rc == SW_WIRE_EVERSION) {
        s_note(r, SW_LOG_WARN, "relay: refused a peer (key %s): %s", s_who_key(user), err);
        s_reply_error(r, id, id_len, SW_ERROR_VERSION_MISMATCH, NULL, "%s", err);
        return;
    }
    sw_msg_t d;
    const sw_msg_type_t type = sw_wire_msg_type(&m);
    if (rc == SW_WIRE_OK && (type == SW_MSG_ANNOUNCE || type == SW_MSG_STATUS_QUERY))
        rc = sw_codec_decode(&m, type, &d, err, sizeof err);
    if (rc) {
        s_note(r, SW_LOG_WARN, "relay: malformed control message from %s (key %s): %s",
               sender ? sender->name : "an unannounced connection", s_who_key(user), err);
        s_reply_error(r, id, id_len, SW_ERROR_MALFORMED, NULL, "%s", err);
        sw_wire_msg_clear(&m);
        return;
    }
    switch (type) {
    case SW_MSG_ANNOUNCE:
        s_announce(r, id, id_len, sender, user, &d.announce);
        break;
    case SW_MSG_STATUS_QUERY:
        s_reply_table(r, id, id_len);
        break;
    default:
        s_reply_error(r, id, id_len, SW_ERROR_BAD_REQUEST, NULL,
                      "the relay answers announce and status_query, not %s",
                      sw_wire_type_name(type));
        break;
    }
    sw_wire_msg_clear(&m);
}

/* ---- forwarding ------------------------------------------------------------- */

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
        s_parked_for(r, dest, sender->source) >= RELAY_PARK_PER_PAIR)
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
    p->since_ms = s_now_ms();
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
static void s_flush_parked(relay_t *r)
{
    const relay_peer_t *blocked[RELAY_PARK_MAX];
    int n_blocked = 0;
    int64_t now = s_now_ms();
    for (int i = 0; i < r->n_parked;) {
        relay_parked_t *p = &r->parked[i];
        relay_peer_t *to = s_find_name(r, p->dest, strlen(p->dest));
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
                s_remove(r, to, "connection closed");
            s_reply_error(r, p->src_id, p->src_id_len, SW_ERROR_DEST_GONE, p->dest,
                          "%s disconnected; message dropped", p->dest);
            s_unpark(r, i);
            continue;
        }
        if (!is_blocked)
            blocked[n_blocked++] = to;
        if (now - p->since_ms > RELAY_PARK_MS) {
            r->dropped++;
            s_reply_error(r, p->src_id, p->src_id_len, SW_ERROR_DEST_BUSY, p->dest,
                          "%s took no messages for %d ms; message dropped", p->dest, RELAY_PARK_MS);
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
static void s_forward(relay_t *r, relay_peer_t *sender, const char *dname, const char *dkey,
                      zmq_msg_t *f, int n)
{
    relay_peer_t *to = s_find_name(r, dname, strlen(dname));
    if (!to || (dkey[0] && strcmp(to->fp, dkey) != 0)) {
        r->dropped++;
        SW_DEBUG("relay: %s -> %s: unknown destination", sender->name, dname);
        s_reply_error(r, sender->id, sender->id_len, SW_ERROR_UNKNOWN_DEST, dname,
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
        s_reply_error(r, sender->id, sender->id_len, SW_ERROR_UNAUTHORIZED, dname,
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
            s_note(r, SW_LOG_WARN, "relay: %s -> %s: destination gone, dropped", sender->name,
                   dname);
            s_remove(r, to, "connection closed");
            s_reply_error(r, sender->id, sender->id_len, SW_ERROR_DEST_GONE, dname,
                          "%s disconnected; message dropped", dname);
        } else if (over) {
            r->budget_drops++; /* log 1, 2, 4, 8, ... so a flood cannot flood the log */
            size_t held = atomic_load(&to->q->bytes), all = atomic_load(&r->queued);
            if ((r->budget_drops & (r->budget_drops - 1)) == 0)
                s_note(r, SW_LOG_WARN,
                       "relay: %s (key %s) -> %s: %.1f MiB queued for it, %.1f MiB in all "
                       "(budgets %zu and %zu MiB): dropped (%llu so far)",
                       sender->name, sender->fp[0] ? sender->fp : "-", dname, held / 1048576.0,
                       all / 1048576.0, r->queue_max >> 20, r->queue_total_max >> 20,
                       (unsigned long long)r->budget_drops);
            s_reply_error(r, sender->id, sender->id_len, SW_ERROR_DEST_BUSY, dname,
                          "the relay holds %.1f MiB for %s already (%.1f MiB in all; budgets "
                          "--queue-mib %zu, --queue-total-mib %zu): message dropped",
                          held / 1048576.0, dname, all / 1048576.0, r->queue_max >> 20,
                          r->queue_total_max >> 20);
        } else {
            to->busy_drops++; /* log 1, 2, 4, 8, ... so a flood cannot flood the log */
            if ((to->busy_drops & (to->busy_drops - 1)) == 0)
                s_note(r, SW_LOG_WARN,
                       "relay: %s (key %s) -> %s: queue full (%s), dropped (%llu so far to %s)",
                       sender->name, sender->fp[0] ? sender->fp : "-", dname, zmq_strerror(e),
                       (unsigned long long)to->busy_drops, dname);
            s_reply_error(r, sender->id, sender->id_len, SW_ERROR_DEST_BUSY, dname,
                          "queue to %s is full; message dropped", dname);
        }
    }
}

/* Receives and handles one message; -1 when nothing was waiting (or on error). */
static int s_handle_one(relay_t *r)
{
    zmq_msg_t f[4];
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
    const void *id = zmq_msg_data(&f[0]);
    size_t id_len = zmq_msg_size(&f[0]);
    if (id_len == 0 || id_len > RELAY_ID_MAX)
        goto done; /* cannot happen with libzmq-made ids */
    relay_peer_t *sender = s_find_id(r, id, id_len);
    const char *user = NULL;
    if (r->secure) {
        /* The ZAP handler set User-Id to the client's key; it must still be allowed. */
        user = n >= 2 ? zmq_msg_gets(&f[1], "User-Id") : NULL;
        if (!s_allowed(r, user) || (sender && strcmp(sender->user, user) != 0)) {
            r->unauthorized++;
            r->dropped++;
            if ((r->unauthorized & (r->unauthorized - 1)) == 0)
                s_note(r, SW_LOG_WARN,
                       "relay: refused a message from an unknown or revoked key %s (%llu so far)",
                       s_who_key(user), (unsigned long long)r->unauthorized);
            if (sender)
                s_remove(r, sender, "key revoked");
            s_reply_error(r, id, id_len, SW_ERROR_UNAUTHORIZED, NULL,
                          "your key is not on the relay's allow-list (revoked?)");
            goto done;
        }
    }
    if (!sender && n >= 2)
        s_conn_label(r, &f[1], user);
    int64_t now = s_now_ms();
    if (sender) {
        sender->bytes_in += total - id_len;
        sender->msg_ms = sender->alive_ms = now;
    }
    /* who sent it, for a log line (the key's fingerprint is worked out only then) */
#define S_WHO sender ? sender->name : "an unannounced connection", s_who_key(user)
    if (too_many || n < 3) {
        s_note(r, SW_LOG_WARN, "relay: dropped a message of %d frames from %s (key %s)", n - 1,
               S_WHO);
        r->dropped++;
        s_reply_error(r, id, id_len, SW_ERROR_MALFORMED, NULL,
                      "a message is [dest][header] or [dest][header][payload]; got %d frames",
                      n - 1);
        goto done;
    }
    if (!sender && total - id_len > RELAY_UNANNOUNCED_MSG_MAX) {
        /* an announce or a status query is small: a connection that has not announced and
         * sends more is cut off (the next try costs it a handshake, and its key holds few such
         * connections: s_conn_key) */
        r->dropped++;
        s_note(r, SW_LOG_WARN,
               "relay: an unannounced connection of key %s sent a message of %llu bytes (at most "
               "%u before announcing): shut down",
               s_who_key(user), (unsigned long long)(total - id_len), RELAY_UNANNOUNCED_MSG_MAX);
        s_reply_error(r, id, id_len, SW_ERROR_MALFORMED, NULL,
                      "at most %u bytes in a message before the announce",
                      RELAY_UNANNOUNCED_MSG_MAX);
        if (n >= 2)
            s_conn_shut_frame(r, &f[1]);
        goto done;
    }
    if (total - id_len > SW_WIRE_MAX_TOTAL) {
        r->dropped++;
        s_reply_error(r, id, id_len, SW_ERROR_MALFORMED, NULL, "message of %llu bytes exceeds %u",
                      (unsigned long long)(total - id_len), SW_WIRE_MAX_TOTAL);
        goto done;
    }
    if (zmq_msg_size(&f[2]) > SW_WIRE_MAX_HEADER + SW_SEAL_HDR_OVERHEAD ||
        (n == 4 && zmq_msg_size(&f[3]) > SW_WIRE_MAX_PAYLOAD + SW_SEAL_PAYLOAD_OVERHEAD)) {
        r->dropped++;
        s_reply_error(r, id, id_len, SW_ERROR_MALFORMED, NULL,
                      "header (%zu bytes) or payload frame too large", zmq_msg_size(&f[2]));
        goto done;
    }
    char dname[SW_WIRE_NAME_MAX + 1], dkey[SW_WIRE_KEY_FP_LEN + 1];
    if (zmq_msg_size(&f[1]) > SW_WIRE_ADDR_MAX ||
        sw_wire_addr_split(zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), dname, dkey) != 0) {
        s_note(r, SW_LOG_WARN,
               "relay: dropped a message from %s (key %s): bad destination frame (%zu bytes)",
               S_WHO, zmq_msg_size(&f[1]));
        r->dropped++;
        s_reply_error(r, id, id_len, SW_ERROR_MALFORMED, NULL,
                      "destination frame is not 1..%d bytes of [A-Za-z0-9._-] (and maybe @ and "
                      "a key fingerprint)",
                      SW_WIRE_NAME_MAX);
        goto done;
    }
    if (r->secure && sender && sender->client &&
        (n == 4 || total - id_len > SW_RELAY_CLIENT_MSG_MAX)) {
        /* clients send requests, never tensors: the relay keeps no large frame of theirs */
        r->dropped++;
        s_reply_error(r, id, id_len, SW_ERROR_MALFORMED, NULL,
                      "a client's message is [dest][header] of at most %u bytes; got %d frames, "
                      "%llu bytes",
                      SW_RELAY_CLIENT_MSG_MAX, n - 1, (unsigned long long)(total - id_len));
        goto done;
    }
    if (zmq_msg_size(&f[1]) == strlen(SW_WIRE_RELAY_NAME) &&
        memcmp(zmq_msg_data(&f[1]), SW_WIRE_RELAY_NAME, zmq_msg_size(&f[1])) == 0) {
        s_control(r, id, id_len, sender, user, &f[2], n == 4);
        goto done;
    }
    if (!sender) {
        r->dropped++;
        s_reply_error(r, id, id_len, SW_ERROR_NOT_ANNOUNCED, NULL,
                      "announce before sending to peers");
        goto done;
    }
    /* Messages for other peers only: a stage's status queries must not look like rounds it
     * passed on (the head's route check counts those, recover.c). */
    sender->msgs_in++;
    /* Rate limits per sender, in messages and in bytes: one flooding peer cannot fill the
     * queues of the others. Over a limit, messages are dropped; the sender hears about it once
     * per power of two. A byte bucket always holds one whole message of the largest size. */
    const double elapsed_s = (double)(now - sender->refill_ms) / 1000.0;
    sender->refill_ms = now;
    const int client_rate = r->secure && sender->client;
    const double brate = client_rate ? r->client_rate : r->node_rate;
    const double bmax = client_rate ? SW_RELAY_CLIENT_MSG_MAX : SW_WIRE_MAX_TOTAL;
    for (int k = 0; k < 2; k++) {
        sender->tokens[k] += elapsed_s * r->rate;
        if (sender->tokens[k] > r->rate)
            sender->tokens[k] = r->rate;
        sender->byte_tokens[k] += elapsed_s * brate;
        if (sender->byte_tokens[k] > (brate > bmax ? brate : bmax))
            sender->byte_tokens[k] = brate > bmax ? brate : bmax;
    }
    const relay_peer_t *dest_peer = s_find_name(r, dname, strlen(dname));
    const int cls =
        !sender->client && dest_peer && dest_peer->client ? RELAY_CLASS_CLIENTS : RELAY_CLASS_NODES;
    const int over_rate = sender->tokens[cls] < 1.0;
    if (over_rate || sender->byte_tokens[cls] < (double)(total - id_len)) {
        r->dropped++;
        uint64_t *drops = over_rate ? &sender->rate_drops : &sender->byte_drops;
        ++*drops;
        char why[200];
        if (over_rate)
            snprintf(why, sizeof why, "over the relay's rate limit of %d messages/s", r->rate);
        else
            snprintf(why, sizeof why,
                     "over the relay's byte rate of %.0f MiB/s for a %s (--%s-mib-s)",
                     brate / 1048576.0, client_rate ? "client" : "node",
                     client_rate ? "client" : "node");
        if ((*drops & (*drops - 1)) == 0)
            s_note(r, SW_LOG_WARN, "relay: %s (key %s) -> %s: %s: dropped %llu so far",
                   sender->name, sender->fp[0] ? sender->fp : "-", dname, why,
                   (unsigned long long)*drops);
        if (cls == RELAY_CLASS_NODES && !sender->client) {
            /* A node's Forward or Verdict: its sender hears of it at once (the head then
             * recovers the round instead of waiting for its round timeout) */
            if (now - sender->told_ms >= RELAY_TELL_MS) {
                sender->told_ms = now;
                s_reply_error(r, id, id_len, SW_ERROR_DEST_BUSY, dname, "%s; message to %s dropped",
                              why, dname);
            }
        } else if ((*drops & (*drops - 1)) == 0) {
            s_reply_error(r, id, id_len, SW_ERROR_DEST_BUSY, NULL, "%s; message dropped", why);
        }
        goto done;
    }
    sender->byte_tokens[cls] -= (double)(total - id_len);
    sender->tokens[cls] -= 1.0;
    s_forward(r, sender, dname, dkey, f, n);
#undef S_WHO
done:
    if (n >= 2)
        s_learn_fd(r, id, id_len, &f[1]);
    for (int i = 0; i < 4; i++)
        zmq_msg_close(&f[i]);
    return 0;
}

/* Reads every pending monitor event: connections accepted and gone (r->lost set when one
 * went away). */
static void s_events(relay_t *r)
{
    for (;;) {
        zmq_msg_t ev;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, r->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return;
        }
        uint16_t event = 0;
        uint32_t value = 0;
        if (zmq_msg_size(&ev) >= 6) {
            memcpy(&event, zmq_msg_data(&ev), 2);
            memcpy(&value, (const uint8_t *)zmq_msg_data(&ev) + 2, 4);
        }
        int more = zmq_msg_more(&ev);
        zmq_msg_close(&ev);
        while (more) {
            zmq_msg_init(&ev);
            if (zmq_msg_recv(&ev, r->mon, 0) < 0) {
                zmq_msg_close(&ev);
                return;
            }
            more = zmq_msg_more(&ev);
            zmq_msg_close(&ev);
        }
        if (event == ZMQ_EVENT_ACCEPTED) {
            s_conn_accepted(r, (int)value);
        } else if (event == ZMQ_EVENT_DISCONNECTED) {
            s_conn_gone(r, (int)value);
            r->lost = 1;
        }
    }
}

int relay_run(relay_t *r, volatile sig_atomic_t *stop)
{
    SW_INFO("relay listening on %s (heartbeat %d ms)", r->endpoint, r->heartbeat_ms);
    while (!*stop) {
        int64_t now = s_now_ms();
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
        if (r->secure) {
            s_zap(r);
            s_refused_flush(r, s_now_ms());
            int forced = r->reload && *r->reload;
            if (forced)
                *r->reload = 0;
            if (forced || s_now_ms() >= r->allow_check_at_ms) {
                (void)s_allow_reload(r, forced);
                r->allow_check_at_ms = s_now_ms() + RELAY_ALLOW_CHECK_MS;
            }
        }
        s_note_flush(r, s_now_ms());
        s_flush_parked(r); /* what waited goes before what is new */
        for (int i = 0; i < RELAY_BATCH && !*stop; i++)
            if (s_handle_one(r) < 0)
                break;
        s_events(r);
        if (r->lost) {
            r->lost = 0;
            int64_t soon = s_now_ms() + RELAY_RECHECK_MS;
            if (soon < r->sweep_at_ms)
                r->sweep_at_ms = soon;
        }
        if (s_now_ms() >= r->sweep_at_ms) {
            s_sweep(r);
            r->sweep_at_ms = s_now_ms() + r->heartbeat_ms;
        }
    }
    SW_INFO("relay stopping: %llu forwarded, %llu dropped, %d peers",
            (unsigned long long)r->forwarded, (unsigned long long)r->dropped, r->n_peers);
    return 0;
}
