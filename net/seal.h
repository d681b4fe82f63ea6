/*
 * seal.h - end-to-end encryption of the messages between cluster members.
 *
 * A peer seals the header frame (the protobuf Envelope) and the payload frame
 * (the tensor) of every message to another peer, so that the relay, which
 * reads only the name frame, sees ciphertext. There are two channels, each
 * with its own keys (keys.h): the cluster channel (stage-to-stage traffic,
 * cluster key, nodes only) and the access channel (client <-> head traffic,
 * access key). The channel is bound into every frame (key id and AAD), so a
 * frame sealed on one channel never opens on the other, even under the same
 * key bytes. Messages
 * to and from the relay itself (announce, ack, status, relay errors) stay in
 * clear. A sealed header frame starts with a zero byte, which no protobuf
 * Envelope can start with (field number 0 does not exist), so anyone can tell
 * the two kinds apart without a key. docs/protocol.md has the byte layout:
 *
 *   header frame  = 00 | 02 | key id (4) | sender session (8) | counter (8) |
 *                   time (8) | nonce (24) | XChaCha20-Poly1305(Envelope) + tag (16)
 *   payload frame = nonce (24) | XChaCha20-Poly1305(tensor) + tag (16)
 *
 * Both are authenticated with AAD = "shardwire-seal-3" | channel ('C' or 'A') |
 * kind ('H' or 'P') | source name | 0 | destination name | 0 | sender session |
 * counter | time | key id, so a frame cannot be moved to another channel, sender,
 * receiver, message or position. The key id is BLAKE2b-128(key, "sw-kid-" |
 * channel)[0..4).
 * The sender session is random per process; the counter grows by one per
 * message; time is the sender's wall clock (ms since 1970). A receiver drops
 * a message whose time is more than SW_SEAL_MAX_AGE_MS from its own clock
 * when the message reached it (sw_seal_arrived), and keeps, per (sender
 * name, sender session), the highest counter seen and which of the 63
 * below it were, dropping anything it has seen or that is 64 or more below
 * the highest (replays). Such a window is given up only when its
 * newest message is too old to be accepted again, or for a newer window of
 * the same sender key (SW_SEAL_SESSIONS_PER_KEY per key); given up while its
 * messages are young enough, it leaves a spent record (its highest counter)
 * until they are not, so its replays stay refused. No volume of sessions
 * reopens a replay: with SW_SEAL_SENDERS_MAX live windows of other keys, or
 * SW_SEAL_SPENT_MAX live spent records, a new session is refused instead.
 *
 * One owner thread (the peer's).
 */
#ifndef SW_SEAL_H
#define SW_SEAL_H

#include "keys.h"

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#define SW_SEAL_MAGIC0 0x00u
#define SW_SEAL_MAGIC1 0x02u /* layout version (1: no time) */
#define SW_SEAL_NONCE 24
#define SW_SEAL_TAG 16
#define SW_SEAL_HDR_PREFIX                                                                         \
    (2 + 4 + 8 + 8 + 8 + SW_SEAL_NONCE)                         /* 54 bytes before the ciphertext  \
                                                                 */
#define SW_SEAL_HDR_OVERHEAD (SW_SEAL_HDR_PREFIX + SW_SEAL_TAG) /* 70 bytes added to a header */
#define SW_SEAL_PAYLOAD_OVERHEAD (SW_SEAL_NONCE + SW_SEAL_TAG)  /* 40 bytes added to a payload */
#define SW_SEAL_SENDERS_MAX 16384    /* (sender, session) replay windows kept at most */
#define SW_SEAL_SESSIONS_PER_KEY 256 /* windows of one sender key (its oldest goes beyond) */
#define SW_SEAL_SPENT_MAX 16384 /* windows given up while live, kept as spent records at most */
#define SW_SEAL_MAX_AGE_MS                                                                         \
    120000                    /* a message older or newer than this (sender's clock) is dropped */
#define SW_SEAL_KEY_FP_MAX 64 /* bytes of a sender key fingerprint kept */
#define SW_SEAL_STR_(x) #x
#define SW_SEAL_STR(x) SW_SEAL_STR_(x)
#define SW_SEAL_CLUSTER 'C' /* channel: stage-to-stage traffic, the cluster key */
#define SW_SEAL_ACCESS 'A'  /* channel: client <-> head traffic, the access key */

enum sw_seal_rc {
    SW_SEAL_OK = 0,
    SW_SEAL_EFORMAT = -1, /* not a sealed frame, or truncated */
    SW_SEAL_EAUTH = -2,   /* no key opens it: tampered, wrong key, wrong sender or receiver */
    SW_SEAL_EREPLAY = -3, /* authentic, but seen before or too old */
    SW_SEAL_ENOMEM = -4,
    SW_SEAL_ESTALE = -5, /* authentic, but its time is more than SW_SEAL_MAX_AGE_MS off */
    SW_SEAL_EBUSY = -6,  /* authentic, a new sender session, and no window free for it */
};

typedef struct sw_seal sw_seal_t;

/* 1 when a header frame of len bytes is sealed (starts with the magic). */
int sw_seal_is_sealed(const void *frame, size_t len);

/*
 * A sealer/opener of one channel (SW_SEAL_CLUSTER or SW_SEAL_ACCESS) holding
 * n (1..2) keys; keys[0] seals, every key opens (key rotation). The keys are
 * copied into guarded memory. NULL on a bad argument or out of memory.
 */
sw_seal_t *sw_seal_new(const uint8_t keys[][SW_CLUSTER_KEY_BYTES], int n, char channel)
    __attribute__((warn_unused_result));

/* Tests: s's clock (what it seals, what it opens against) runs skew_ms ahead. */
void sw_seal_set_skew(sw_seal_t *s, int64_t skew_ms);

/*
 * The receiver's queue was just seen empty: every message opened from now on
 * reached this peer after now, and its age (SW_SEAL_MAX_AGE_MS) is judged at
 * that time, not when it is read. A peer that computes for minutes between
 * two reads (a slow stage's batch) would otherwise drop the messages that
 * waited in its own queue as replays. Replays stay refused: windows are given
 * up by the same time. Until it is first called, ages are judged when a
 * message is read.
 */
void sw_seal_arrived(sw_seal_t *s);

/* 1 when the sealed header frame names one of s's keys (of s's channel). */
int sw_seal_has_key(const sw_seal_t *s, const void *hdr, size_t hdr_len);
void sw_seal_destroy(sw_seal_t **self_p);

/*
 * Seals one message from src to dst: *hdr_out gets the sealed header frame
 * (initialised here) and, when has_payload, *payload_out the sealed payload
 * frame. The caller sends or closes them.
 */
int sw_seal_message(sw_seal_t *s, const char *src, const char *dst, const void *hdr, size_t hdr_len,
                    const void *payload, size_t payload_len, int has_payload, zmq_msg_t *hdr_out,
                    zmq_msg_t *payload_out) __attribute__((warn_unused_result));

/*
 * Opens one message that the relay delivered from src to dst (this peer);
 * src_key is the sender's key fingerprint as the relay authenticated it (the
 * name frame's NAME@FP; NULL or "" when unknown: all such senders share one
 * key's windows). *hdr_plain is a malloc'd copy of the Envelope bytes
 * (caller frees) of *hdr_plain_len bytes; when payload is not NULL it is
 * replaced in place by its plaintext. The replay window moves only when
 * everything authenticated.
 */
int sw_seal_open(sw_seal_t *s, const char *src, const char *src_key, const char *dst,
                 const void *hdr, size_t hdr_len, zmq_msg_t *payload, uint8_t **hdr_plain,
                 size_t *hdr_plain_len) __attribute__((warn_unused_result));

/* Printable reason for an sw_seal_rc. */
const char *sw_seal_strerror(int rc);

#endif
