/*
 * peer_impl.h - the inside of a sw_peer_t (peer.h), shared by peer.c (the
 * peer: announce, receive, send, the choice of relay), link.c (one relay
 * link: its socket, monitor events, silence check, start-up probes) and
 * direct.c (direct links, which use link.c's helpers). link.c never calls
 * into peer.c.
 */
#ifndef SW_PEER_IMPL_H
#define SW_PEER_IMPL_H

#include "args.h"
#include "peer.h"
#include "sw_limits.h"

#include <stdint.h>

/* Messages that arrive while sw_peer_status waits for a peer table (or start-up waits for an
 * ack) are kept for sw_peer_recv, in a ring that starts at SW_PEER_QUEUE and doubles as needed:
 * a gateway streaming many generations receives hundreds of token chunks in one round trip to
 * its relay. Bounded in messages and bytes (headers and payloads); one beyond is dropped with a
 * warning. */
#define SW_PEER_QUEUE 64
#define SW_PEER_QUEUE_MAX 16384
#define SW_PEER_QUEUE_BYTES (64u << 20)
#define SW_PEER_RETRY_MS 1000 /* re-announce interval while refused / unanswered */

/* One relay of the list: a DEALER that dials it, and its monitor. */
typedef struct sw_link {
    char ep[SW_ARGS_ENDPOINT_MAX]; /* the relay's endpoint */
    void *sock;                    /* DEALER connected to the relay */
    void *mon;                     /* PAIR receiving sock's monitor events */
    int fd;                        /* TCP socket to the relay (owned by libzmq), -1 = none */
    int announced;                 /* 1 once the relay acked on this connection */
    int n_connects;                /* handshakes completed with this relay */
    int n_announces;               /* announces this relay acknowledged */
    int64_t announce_at_ms;        /* next time to send the announce; -1 = none due */
    int64_t check_at_ms;           /* next silence check */
    int hs_cut;      /* handshakes cut (connection closed) since sw_peer_new last looked */
    int fatal_code;  /* the relay refused the first announce with this code */
    int auth_failed; /* the relay refused or revoked our key */
    int dead;        /* closed for good (refused us, wrong key or mechanism): never used */
    int dialled;     /* zmq_connect done */
    int cuts;        /* handshakes cut in a row while the relay answers (link_on_cut) */
    uint64_t losses; /* times an announced link was lost */
} sw_link_t;

/* One direct link (direct.c): to a node whose listener we dial (a DEALER of ours), or from one
 * that dialled ours (its routing id on our listener's ROUTER). */
typedef struct sw_dlink {
    char name[SW_WIRE_NAME_MAX + 1]; /* the node at the other end; "" = a free slot */
    char fp[SW_KEY_FP_LEN + 1];      /* its key's fingerprint ("" without keys) */
    int dialled;                     /* 1: our DEALER dials its listener; 0: accepted */
    char ep[SW_WIRE_DIRECT_MAX + 1]; /* dialled: its listener's address */
    char key[SW_KEY_Z85_LEN + 1];    /* dialled: the listener's public key ("" without keys) */
    void *sock;                      /* dialled: the DEALER (NULL while waiting to retry) */
    void *mon;                       /* dialled: its monitor */
    uint8_t rid[256];                /* accepted: its routing id on our ROUTER */
    size_t rid_len;
    int fd;                /* its TCP socket (libzmq's), -1 = none known */
    int up;                /* live: handshake done (dialled) / hello seen (accepted) */
    int used;              /* messages to it go by this link (the quiet rule met) */
    int64_t dial_at_ms;    /* dialled: when the current dial began, -1 = none */
    int64_t retry_at_ms;   /* dialled: dial again at this time, -1 = not waiting */
    int64_t relay_sent_ms; /* the last message to it that went by a relay */
    int64_t check_at_ms;   /* next silence check */
    long rtt_us;           /* the round trip measured when it came up, -1 = none */
} sw_dlink_t;

/* The direct paths of a peer (direct.c): its listener (--listen) and its direct links. */
typedef struct sw_direct {
    void *router;                           /* the listener's ROUTER, NULL = no --listen */
    void *rmon;                             /* its monitor */
    void *zap;                              /* the ZAP handler of this peer's context */
    char public_ep[SW_WIRE_DIRECT_MAX + 1]; /* the address announced */
    char pub[SW_KEY_Z85_LEN + 1];           /* own CURVE key pair ("" without keys) */
    char sec[SW_KEY_Z85_LEN + 1];
    sw_allow_entry_t *allow; /* the listener's allow-list (--allow) */
    int n_allow;
    int conn_fd[SW_DIRECT_MAX_CONNS]; /* the listener's open connections, -1 = free */
    sw_dlink_t links[SW_DIRECT_MAX_LINKS];
    int dial_ms;      /* --direct-dial-ms */
    uint64_t losses;  /* live links lost (sw_peer_direct_losses) */
    uint64_t refused; /* connections the listener refused */
    int changed;      /* links came up or went: announce the hops */
} sw_direct_t;

/* Messages that came by a direct link carry this as sw_wire_msg_t.link; sending "via" it means
 * "by the direct link to the destination while it is up". */
#define SW_PEER_VIA_DIRECT 100

struct sw_peer {
    void *ctx;                           /* own ZeroMQ context (one I/O thread for every link) */
    sw_link_t links[SW_PEER_MAX_RELAYS]; /* one per relay, in --relay's order */
    int n_links;                         /* relays given */
    int cur;                             /* the link messages go by (s_pick), -1 = none yet */
    uint64_t epoch;                      /* links lost so far (sw_peer_losses) */
    sw_announce_copy_t announce;         /* own copy, sent on every (re)announce */
    int constructing;                    /* 1 while sw_peer_new waits for the first ack */
    sw_wire_msg_t *queue;                /* ring of kept messages, q_cap long (NULL: none yet) */
    int q_cap;                           /* its length: 0, then SW_PEER_QUEUE, doubled */
    int q_head;                          /* index of the oldest kept message */
    int q_len;                           /* kept messages */
    size_t q_bytes;                      /* their sw_wire_msg_size, summed */
    uint64_t q_drops;                    /* messages dropped for a full queue */
    int hb_ms;                           /* ZMTP heartbeat interval */
    int send_ms;                         /* ZMQ_SNDTIMEO */
    int silent_limit_ms;                 /* no data from a relay this long = reconnect */
    sw_wire_crypto_t crypto;             /* end-to-end sealing (crypto.seal NULL = none) */
    int curve;                           /* 1 = CurveZMQ handshake (keys given) */
    uint64_t drops;                      /* malformed, unsealed, tampered or replayed messages */
    int n_announces;                     /* announces the relays acknowledged, all links */
    int rename_on_taken;                 /* sw_peer_opts_t.rename_on_taken */
    int64_t wrong_key_told_ms;           /* when we last told a peer we cannot open its messages */
    sw_direct_t direct;                  /* direct paths (direct.c) */
    int64_t rtt_refresh_ms;              /* nodes: next announce with fresh round trips */
};

int64_t link_now_ms(void);

/* Opens l (socket options, CURVE keys relay_pub, monitor); it dials later
 * (link_dial). 0, or -1 after one error line. */
int link_open(sw_peer_t *p, sw_link_t *l, const char *ep, const char *relay_pub,
              const sw_sec_t *sec);
int link_dial(sw_peer_t *p, sw_link_t *l);
void link_close(sw_link_t *l);
/* Reads every pending monitor event of l. */
void link_events(sw_peer_t *p, sw_link_t *l);
/* Shuts l's connection down when its relay sent no data for silent_limit_ms. */
void link_check_silence(sw_peer_t *p, sw_link_t *l);
void link_send_announce(sw_peer_t *p, sw_link_t *l);
void link_maybe_announce(sw_peer_t *p, sw_link_t *l);
/* The kernel's smoothed round trip of l's TCP connection in microseconds, -1 = none. */
long link_rtt_us(const sw_link_t *l);
/* The same for a TCP socket fd; and how long no data came in on it, ms (-1 = unknown). */
long link_fd_rtt_us(int fd);
long link_fd_silent_ms(int fd);
/* Reads one pending socket-monitor event from mon without waiting: 1 read, 0 none. */
int link_read_event(void *mon, uint16_t *event, uint32_t *value);
/* zmq_setsockopt of an int: 0, or -1 after one line naming what. */
int link_setopt_int(void *sock, int opt, int val, const char *what);
/* 1 when messages may go by l now (announced on a live connection). */
int link_live(const sw_link_t *l);

/* Start-up (sw_peer_new): see link.c. */
int link_wait_reachable(sw_peer_t *p, const char *relay, int64_t deadline,
                        volatile sig_atomic_t *stop, int *attempt);
int link_on_cut(sw_peer_t *p, const char *relay, int64_t deadline, int *cuts, int *attempt);
/* One probe of l's relay: 0 = dial it (it greets us, or may later), -1 = closed for good
 * (one line said why). why holds the probe's reason when the relay did not greet us. */
int link_probe_once(sw_peer_t *p, sw_link_t *l, char *why, size_t why_len);

/* Direct paths (direct.c; peer.c calls these, direct.c calls link.c only). */
/* Sets up the listener (opts->listen) and what the announce says of it. 0, or -1 logged. */
int direct_open(sw_peer_t *p, const sw_peer_opts_t *opts);
void direct_close(sw_peer_t *p);
/* Monitor events, ZAP requests, dial deadlines and retries, silence. */
void direct_upkeep(sw_peer_t *p);
/* The direct sockets and monitors to poll (POLLIN) into items[0..max): their count. */
int direct_poll_items(sw_peer_t *p, zmq_pollitem_t *items, int max);
/* Reads one message from a direct socket without waiting: 0 one in *out (link
 * SW_PEER_VIA_DIRECT), 1 none for the caller (*read: something was read). */
int direct_read(sw_peer_t *p, sw_wire_msg_t *out, int *read);
/* Sends by the direct link to dest when the rule says so (via: the link asked for): 0 sent,
 * 1 not by a direct link (send by a relay), or a negative sw_wire_rc after one line. */
int direct_send(sw_peer_t *p, int via, const char *dest, sw_envelope_t *env, const void *payload,
                size_t payload_len, int has_payload);
/* A message to dest went by a relay (the quiet rule). */
void direct_note_relay(sw_peer_t *p, const char *dest);
/* The announce's direct fields from the current state (p->announce). */
void direct_announce_fields(sw_peer_t *p);

#endif
