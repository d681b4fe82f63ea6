/*
 * peer_impl.h - the inside of a sw_peer_t (peer.h), shared by peer.c (the
 * peer: announce, receive, send, the choice of relay) and link.c (one relay
 * link: its socket, monitor events, silence check, start-up probes). link.c
 * never calls into peer.c.
 */
#ifndef SW_PEER_IMPL_H
#define SW_PEER_IMPL_H

#include "args.h"
#include "peer.h"
#include "sw_limits.h"

#include <stdint.h>

#define SW_PEER_QUEUE 64      /* messages kept while sw_peer_status waits */
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

struct sw_peer {
    void *ctx;                           /* own ZeroMQ context (one I/O thread for every link) */
    sw_link_t links[SW_PEER_MAX_RELAYS]; /* one per relay, in --relay's order */
    int n_links;                         /* relays given */
    int cur;                             /* the link messages go by (s_pick), -1 = none yet */
    uint64_t epoch;                      /* links lost so far (sw_peer_losses) */
    sw_announce_copy_t announce;         /* own copy, sent on every (re)announce */
    int constructing;                    /* 1 while sw_peer_new waits for the first ack */
    sw_wire_msg_t queue[SW_PEER_QUEUE];  /* ring of kept messages */
    int q_head;                          /* index of the oldest kept message */
    int q_len;                           /* kept messages */
    int hb_ms;                           /* ZMTP heartbeat interval */
    int send_ms;                         /* ZMQ_SNDTIMEO */
    int silent_limit_ms;                 /* no data from a relay this long = reconnect */
    sw_wire_crypto_t crypto;             /* end-to-end sealing (crypto.seal NULL = none) */
    int curve;                           /* 1 = CurveZMQ handshake (keys given) */
    uint64_t drops;                      /* malformed, unsealed, tampered or replayed messages */
    int n_announces;                     /* announces the relays acknowledged, all links */
    int rename_on_taken;                 /* sw_peer_opts_t.rename_on_taken */
    int64_t wrong_key_told_ms;           /* when we last told a peer we cannot open its messages */
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
/* 1 when messages may go by l now (announced on a live connection). */
int link_live(const sw_link_t *l);

/* Start-up (sw_peer_new): see link.c. */
int link_wait_reachable(sw_peer_t *p, const char *relay, int64_t deadline,
                        volatile sig_atomic_t *stop, int *attempt);
int link_on_cut(sw_peer_t *p, const char *relay, int64_t deadline, int *cuts, int *attempt);
/* One probe of l's relay: 0 = dial it (it greets us, or may later), -1 = closed for good
 * (one line said why). why holds the probe's reason when the relay did not greet us. */
int link_probe_once(sw_peer_t *p, sw_link_t *l, char *why, size_t why_len);

#endif
