/*
 * wire.h - message framing and validation for the shardwire protocol.
 *
 * One logical message is one ZeroMQ multipart message:
 *
 *   peer -> relay:  [dest name] [header] [payload]?
 *   relay -> peer:  [src name]  [header] [payload]?
 *   relay -> peer:  []                      (a liveness probe: one empty frame)
 *
 * The name frame is the routing header the relay reads (ASCII, 1..63 bytes of
 * [A-Za-z0-9._-]); the header frame is a protobuf Envelope (proto/shardwire.proto);
 * the optional payload frame holds the raw hidden-state tensor of a Forward,
 * row-major [n_rows, hidden] of the header's dtype. Tensor bytes never go into
 * protobuf bytes. docs/protocol.md is the full description.
 *
 * Every decoded Envelope is validated field by field against the protocol's
 * limits (SW_WIRE_NAME_MAX and SW_WIRE_MAX_*, defined in sw_limits.h with the
 * engine's limits they must match) before a caller sees it; every Envelope is
 * validated the same way before it is sent. Functions that take `char *err, size_t err_len` write
 * one line saying what was wrong there (or log it at warn level when err is NULL).
 *
 * Programs do not read or build Envelopes themselves: codec.h turns a
 * received sw_wire_msg_t into a plain struct and a plain struct into an
 * Envelope sent through sw_wire_send_ex. Here an Envelope is an opaque
 * sw_envelope_t; only the codec files (codec_pb.h) see its protobuf type,
 * and the validation, decode and encode of single Envelopes are declared
 * there.
 *
 * Ownership: a sw_wire_msg_t owns its Envelope and payload until
 * sw_wire_msg_clear(); envelopes the caller builds stay the caller's.
 */
#ifndef SW_WIRE_H
#define SW_WIRE_H

#include "sw_limits.h"

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

/* Envelope.version; any other is refused (3: trees, 4: cancel, 5: tree and
 * draft-ahead requests and stats, 6: key fingerprints in the name frames and
 * PeerInfo.key_fp, 7: placement: PeerAnnounce 11..19, PlanAssign; spot checks' hop
 * digests in Forward and Verdict, SpotQuery / SpotReport; 8: Progress, PrefillAck,
 * StageTiming.critical_us, GenerateStats.overlap_ms, hidden sizes up to 32768; fair shares:
 * Forward.fair_client and fair_tenant, GenerateRequest.tenant; 9: the KV cache's
 * PeerAnnounce 20..23; 10: direct paths, PeerAnnounce 24..27 and DirectHop). */
#define SW_WIRE_VERSION 10u
#define SW_WIRE_KEY_Z85_LEN 40              /* PeerAnnounce.direct_key: a Z85 CURVE public key */
#define SW_WIRE_MAX_MEM_MIB (1u << 24)      /* PeerAnnounce.mem_mib: 16 TiB */
#define SW_WIRE_MAX_PROBE_US 60000000u      /* probe times, rtt_us, plan_us: 60 s */
#define SW_WIRE_MAX_KV_KIB_LAYER (1u << 26) /* PeerAnnounce.kv_kib_layer: 64 GiB a layer */
#define SW_WIRE_MAX_KV_TYPE 1u              /* PeerAnnounce.kv_type: f16 0, q8_0 1 */
/* A standby auto node: started with --layers auto, no range assigned yet ([0, 0)). */
#define sw_wire_standby(auto_place, begin, end) ((auto_place) && (begin) == 0 && (end) == 0)
#define SW_WIRE_RELAY_NAME "relay" /* reserved destination: the relay itself */
#define SW_WIRE_ERR_LEN 256        /* a good size for the err buffers below */

/* Return codes (negative) of the functions below. */
enum sw_wire_rc {
    SW_WIRE_OK = 0,
    SW_WIRE_PROBE = 1,       /* sw_wire_recv: a relay liveness probe, nothing to deliver */
    SW_WIRE_EMALFORMED = -1, /* a frame or field failed validation */
    SW_WIRE_EVERSION = -2,   /* the header's version is not SW_WIRE_VERSION */
    SW_WIRE_ESOCKET = -3,    /* the ZeroMQ call failed; errno says why (EAGAIN, EINTR, ...) */
    SW_WIRE_ESEAL = -4,      /* sealing: malformed, replayed, or clear where sealed is due */
    SW_WIRE_EKEY = -5,       /* sealed, but no key held here for its channel opens it (a
                                different cluster or access key, or tampered): msg->peer names
                                the sender */
};

typedef struct sw_seal sw_seal_t;

/* One protobuf Envelope (the header frame), opaque outside the codec files
 * (codec_pb.h defines it). */
typedef struct sw_envelope sw_envelope_t;

/*
 * End-to-end sealing of one peer's messages (seal.h): with seal or access set,
 * messages to any destination but the relay are sealed on send, and messages
 * from any source but the relay must arrive sealed and are opened on receive.
 * Each message type has its channel (sw_wire_body_channel): stage-to-stage
 * types go on the cluster channel (seal), client <-> head types on the
 * access channel (access), an Error on the access channel when this peer
 * holds an access key (clients, heads) and on the cluster channel otherwise.
 * A message that arrives on the wrong channel for its type (a Forward sealed
 * with the access key) is refused. A NULL crypto (or both NULL) sends and
 * accepts clear messages only.
 */
typedef struct sw_wire_crypto {
    sw_seal_t *seal;         /* cluster keys (nodes); NULL = none */
    sw_seal_t *access;       /* access keys (clients, heads); NULL = none */
    const char *self;        /* this peer's name (the source of what it seals) */
    int accept_clear_errors; /* clients: deliver a clear Error from a peer (sealed = 0):
                                the way a peer without our key says it cannot read us */
} sw_wire_crypto_t;

/* One received message. Zero-initialise before the first sw_wire_recv. */
typedef struct sw_wire_msg {
    char peer[SW_WIRE_NAME_MAX + 1];       /* the name frame: source (from the relay) */
    char peer_key[SW_WIRE_KEY_FP_LEN + 1]; /* the source's key fingerprint as the relay
                                              authenticated it ("NAME@FP"); "" = none given */
    sw_envelope_t *env; /* decoded and validated; owned (read: sw_codec_decode) */
    zmq_msg_t payload;  /* raw tensor frame, valid when has_payload */
    int has_payload;    /* 1 when a payload frame came */
    int sealed;         /* 1 when it arrived sealed (and was opened) */
    int channel;        /* SW_WIRE_CH_*: the channel it was sealed on */
    int link;           /* the relay it came by: its index in the peer's --relay list (peer.h) */
} sw_wire_msg_t;

#define SW_WIRE_CH_CLEAR 0     /* not sealed (the relay's messages, insecure mode) */
#define SW_WIRE_CH_CLUSTER 'C' /* sealed with the cluster key (== SW_SEAL_CLUSTER) */
#define SW_WIRE_CH_ACCESS 'A'  /* sealed with the access key (== SW_SEAL_ACCESS) */

/*
 * The message types of Envelope.body, as the rest of the program names them
 * (codec.h turns each into a plain struct). wire_check.c holds one table of
 * them: each type's body case, name, channel and validator. A body case
 * without a row there is refused as malformed, on send and on receive.
 */
typedef enum sw_msg_type {
    SW_MSG_NONE = 0, /* no body, or one this build does not know */
    SW_MSG_ANNOUNCE,
    SW_MSG_ANNOUNCE_ACK,
    SW_MSG_STATUS_QUERY,
    SW_MSG_PEER_TABLE,
    SW_MSG_SESSION_OPEN,
    SW_MSG_SESSION_CLOSE,
    SW_MSG_FORWARD,
    SW_MSG_VERDICT,
    SW_MSG_GENERATE,
    SW_MSG_TOKEN_CHUNK,
    SW_MSG_ERROR,
    SW_MSG_CANCEL,
    SW_MSG_RESUME,
    SW_MSG_PLAN_ASSIGN,
    SW_MSG_SPOT_QUERY,
    SW_MSG_SPOT_REPORT,
    SW_MSG_PROGRESS,
    SW_MSG_PREFILL_ACK,
    SW_MSG_TYPES /* the number of values above, SW_MSG_NONE included */
} sw_msg_type_t;

/* Printable name of a type ("forward", "verdict", ...; "none"). */
const char *sw_wire_type_name(sw_msg_type_t type);

/* Bytes per element of a payload dtype; 0 for an unknown value. */
size_t sw_wire_dtype_size(int dtype);
const char *sw_wire_error_code_name(int code);
/* "head", "middle", "tail", "full", "client", or "?" for an unknown value. */
const char *sw_wire_role_name(int role);
/* 1 when name (NULL = "") is a valid model name: 0..63 bytes of [A-Za-z0-9._:/-]. */
int sw_wire_model_name_ok(const char *name);
/* 1 when ep is a listener address a node may announce (PeerAnnounce.direct, version 10):
 * "tcp://HOST:PORT", HOST a name, an IPv4 or a bracketed IPv6 address, PORT 1..65535, at most
 * SW_WIRE_DIRECT_MAX bytes. */
int sw_wire_direct_ok(const char *ep);
/* 1 when name[0..len) is a valid peer name (1..63 bytes of [A-Za-z0-9._-]). */
int sw_wire_name_ok(const char *name, size_t len);
/* 1 when fp is a key fingerprint: SW_WIRE_KEY_FP_LEN lower-case hex digits. */
int sw_wire_key_fp_ok(const char *fp, size_t len);
/*
 * A name frame: a peer name, optionally followed by '@' and the fingerprint of
 * the key that holds it ("head", "client-3fa2@0123...cdef"). From the relay,
 * the fingerprint says who sent the message; to the relay, it pins the
 * destination: the message goes only to a peer of that name holding that key.
 * Splits addr[0..len) into name (SW_WIRE_NAME_MAX + 1 bytes) and key
 * (SW_WIRE_KEY_FP_LEN + 1 bytes, "" when absent); 0, or -1 when it is not a
 * valid name frame.
 */
int sw_wire_addr_split(const char *addr, size_t len, char *name, char *key);
/* "NAME@KEY", or NAME when key is NULL or "", into out (SW_WIRE_ADDR_MAX + 1 bytes). */
void sw_wire_addr(char *out, const char *name, const char *key);

/*
 * Sends [name][header][payload]? on sock with zmq flags (0 or ZMQ_DONTWAIT).
 * name is the destination (peer -> relay) or source (relay -> peer). env's
 * version is set and every field validated first (sw_wire_encode); env stays
 * the caller's. The payload is copied into the outgoing frame; payload may be
 * NULL when has_payload is 0. Nothing is sent when validation fails.
 */
int sw_wire_send(void *sock, const char *name, sw_envelope_t *env, const void *payload,
                 size_t payload_len, int has_payload, int flags, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/* sw_wire_send with end-to-end sealing (crypto may be NULL: same as sw_wire_send). */
int sw_wire_send_ex(void *sock, const char *name, sw_envelope_t *env, const void *payload,
                    size_t payload_len, int has_payload, int flags, const sw_wire_crypto_t *crypto,
                    char *err, size_t err_len) __attribute__((warn_unused_result));

/* Sends an Error envelope (convenience for relay and nodes). */
int sw_wire_send_error(void *sock, const char *name, int code, uint64_t session_id,
                       const char *request_id, const char *dest, const char *message, int flags)
    __attribute__((warn_unused_result));

/*
 * Receives one whole multipart message [name][header][payload]? from sock
 * (a DEALER connected to the relay). All its frames are consumed even when it
 * is malformed. Returns SW_WIRE_OK (msg filled; clear it when done),
 * SW_WIRE_PROBE, SW_WIRE_EMALFORMED / SW_WIRE_EVERSION (msg untouched, err
 * filled) or SW_WIRE_ESOCKET (errno set; EAGAIN with ZMQ_DONTWAIT and nothing
 * waiting). msg must be zero-initialised or cleared.
 */
int sw_wire_recv(void *sock, int flags, sw_wire_msg_t *msg, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/*
 * sw_wire_recv with end-to-end sealing (crypto may be NULL). A sealed message
 * that no key held here opens returns SW_WIRE_EKEY with msg->peer set to its
 * sender (and no envelope); one that is malformed or replayed, or a clear one
 * from a peer while crypto->seal is set, returns SW_WIRE_ESEAL; err is filled
 * and all frames are consumed either way.
 */
int sw_wire_recv_ex(void *sock, int flags, sw_wire_msg_t *msg, const sw_wire_crypto_t *crypto,
                    char *err, size_t err_len) __attribute__((warn_unused_result));

/*
 * Direct links between two nodes (net/direct.c, version 10): the same frames as through the
 * relay, but the name frame is the SENDER's own name (crypto->self), and on a ROUTER (the
 * listener's side) a routing id frame rid comes first. The message is sealed for dest as
 * sw_wire_send_ex seals it.
 */
int sw_wire_send_direct(void *sock, const void *rid, size_t rid_len, const char *dest,
                        sw_envelope_t *env, const void *payload, size_t payload_len,
                        int has_payload, int flags, const sw_wire_crypto_t *crypto, char *err,
                        size_t err_len) __attribute__((warn_unused_result));

/* Who is at the other end of a direct connection: rid (NULL on a DEALER) and the name frame
 * (whose properties hold the ZAP User-Id) for a message whose name frame claims name; 0 with
 * key (SW_WIRE_KEY_FP_LEN + 1) set to the authenticated key's fingerprint ("" without keys)
 * when the claim holds, -1 when it does not (the message is dropped). */
typedef int (*sw_wire_who_fn)(void *ctx, zmq_msg_t *rid, zmq_msg_t *name_frame, const char *name,
                              char *key);

/*
 * sw_wire_recv_ex for a direct connection (router: sock is the listener's ROUTER). The sender
 * is who says, never the frame alone. A hello (the name frame alone, sent by a dialler once
 * its handshake completed) returns SW_WIRE_PROBE after who accepted it.
 */
int sw_wire_recv_direct(void *sock, int flags, int router, sw_wire_msg_t *msg,
                        const sw_wire_crypto_t *crypto, sw_wire_who_fn who, void *who_ctx,
                        char *err, size_t err_len) __attribute__((warn_unused_result));

/*
 * Unpacks and validates one header frame (sw_wire_decode, codec_pb.h) into a
 * message that owns the Envelope, for a header frame that did not come
 * through sw_wire_recv (the relay's control messages). msg is cleared first;
 * on success the caller clears it when done. The name frame is not part of
 * it: msg->peer is "".
 */
int sw_wire_decode_msg(const void *header, size_t header_len, int has_payload, size_t payload_len,
                       sw_wire_msg_t *msg, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/* The type of a received message (SW_MSG_NONE when it holds none). */
sw_msg_type_t sw_wire_msg_type(const sw_wire_msg_t *msg);

/* Payload bytes of a received message (NULL, 0 when none). */
const void *sw_wire_msg_payload(sw_wire_msg_t *msg, size_t *len);

/* The bytes a received message holds: its header as packed on the wire (the decoded Envelope is
 * of that order) and its payload; what a bounded queue of messages counts. */
size_t sw_wire_msg_size(const sw_wire_msg_t *msg);

/* Frees the Envelope and the payload; the struct can be reused. Accepts a cleared msg. */
void sw_wire_msg_clear(sw_wire_msg_t *msg);

/* Moves src into dst (whatever dst held is cleared first); src is left cleared. */
void sw_wire_msg_move(sw_wire_msg_t *dst, sw_wire_msg_t *src);

#endif
