/*
 * codec_pb.h - the protobuf side of the codec, private to the codec files:
 * wire.c (framing), wire_check.c (the message-type table and validation)
 * with wire_check_field.c (the field checks) and wire_check_round.c (the
 * Forward's and the Verdict's validators),
 * codec.c and codec_encode.c (protobuf <-> the plain structs of codec.h).
 * They are the only product files that name a protobuf-c type; every other
 * file sees the plain structs of codec.h and the opaque sw_envelope_t of
 * wire.h (tests/unit/test_layers.py fails when a protobuf-c type or this
 * header appears anywhere else in the product). Tests include it to craft
 * hostile Envelopes by hand.
 *
 * Ownership is as in wire.h: an Envelope from sw_wire_decode is the caller's
 * (shardwire__envelope__free_unpacked); envelopes the caller builds stay the
 * caller's.
 */
#ifndef SW_CODEC_PB_H
#define SW_CODEC_PB_H

#include "codec.h"
#include "shardwire.pb-c.h"
#include "wire.h"

#include <stddef.h>

/* wire.h's opaque envelope: a protobuf Envelope, its only member. */
struct sw_envelope {
    Shardwire__Envelope pb; /* the message; &env->pb is the protobuf Envelope */
};

/* The handle of a protobuf Envelope (NULL stays NULL): pb is the first member
 * of struct sw_envelope, so the two pointers are one (C11 6.7.2.1); the way
 * back is &env->pb. The one cast between the two. */
static inline sw_envelope_t *sw_envelope_of(Shardwire__Envelope *pb)
{
    return (sw_envelope_t *)pb;
}

/* ---- the message-type table (wire_check.c) ------------------------------------------------- */

/* The type of an Envelope's body (SW_MSG_NONE: none, or not in the table). */
sw_msg_type_t sw_wire_body_type(const Shardwire__Envelope *env);
/* The body case (SHARDWIRE__ENVELOPE__BODY_*) of a type; 0 for none. */
int sw_wire_type_body(sw_msg_type_t type);

/* The channel a message type travels on between peers: SW_WIRE_CH_CLUSTER
 * (Forward, Verdict, SessionOpen/Close, and the relay's own types),
 * SW_WIRE_CH_ACCESS (GenerateRequest, TokenChunk, Cancel, Resume), or 0 for
 * an Error (either). */
int sw_wire_body_channel(const Shardwire__Envelope *env);

/* Printable name of the Envelope's body ("forward", "verdict", ...). */
const char *sw_wire_body_name(const Shardwire__Envelope *env);

/*
 * Checks every field of env against the protocol's limits, including the
 * version and, for a Forward, that the payload (has_payload, payload_len)
 * matches dtype x [n_rows, hidden]. Returns SW_WIRE_OK, SW_WIRE_EVERSION or
 * SW_WIRE_EMALFORMED.
 */
int sw_wire_validate(const Shardwire__Envelope *env, int has_payload, size_t payload_len, char *err,
                     size_t err_len) __attribute__((warn_unused_result));

/*
 * Unpacks and validates one header frame. On success *out is a new Envelope
 * the caller frees with shardwire__envelope__free_unpacked(*out, NULL).
 */
int sw_wire_decode(const void *header, size_t header_len, int has_payload, size_t payload_len,
                   Shardwire__Envelope **out, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/*
 * Sets env->version, validates env and packs it into *frame (initialised here;
 * the caller closes it or sends it).
 */
int sw_wire_encode(Shardwire__Envelope *env, int has_payload, size_t payload_len, zmq_msg_t *frame,
                   char *err, size_t err_len) __attribute__((warn_unused_result));

/* ---- inside the codec files ---------------------------------------------------------------- */

/* Writes one error line into err (or logs it as "who: line" when err is
 * NULL) and returns rc. */
int sw_pb_fail(const char *who, int rc, char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Inside a checker (err and err_len in scope): return SW_WIRE_EMALFORMED
 * after one line (logged as "who: ...") unless cond holds. */
#define SW_PB_CHECK(who, cond, ...)                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return sw_pb_fail(who, SW_WIRE_EMALFORMED, err, err_len, __VA_ARGS__);                 \
    } while (0)

/* An ErrorCode this build knows (proto/shardwire.proto's enum: 0..15, 20, 21): the one rule
 * the validator (wire_check.c) and the decoder (codec.c) both apply. */
#define SW_PB_ERROR_CODE_KNOWN(c)                                                                  \
    (((c) >= SHARDWIRE__ERROR_CODE__ERR_UNSPECIFIED && (c) <= SHARDWIRE__ERROR_CODE__ERR_BUSY) ||  \
     (c) == SHARDWIRE__ERROR_CODE__ERR_PLAN_REFUSED ||                                             \
     (c) == SHARDWIRE__ERROR_CODE__ERR_HEAD_LEAVING)

/* ---- the field checks (wire_check_field.c) ------------------------------------------------- */

/* The checks the message validators of wire_check.c and wire_check_round.c
 * share: each returns SW_WIRE_OK or SW_WIRE_EMALFORMED with one line in err
 * naming `what`. A peer name (empty allowed unless required); a text of at
 * most max bytes; a model fingerprint (64 lower-case hex digits); token ids
 * below SW_WIRE_MAX_TOKEN; sampling parameters (NULL passes); a route of
 * min..SW_WIRE_MAX_ROUTE peer names. */
int sw_pb_check_name(const char *what, const char *name, int required, char *err, size_t err_len);
int sw_pb_check_text(const char *what, const char *s, size_t max, char *err, size_t err_len);
int sw_pb_check_fingerprint(const char *fp, char *err, size_t err_len);
int sw_pb_check_tokens(const char *what, const uint32_t *tok, size_t n, char *err, size_t err_len);
int sw_pb_check_sampling(const Shardwire__SamplingParams *s, char *err, size_t err_len);
int sw_pb_check_route(const char *what, char **route, size_t n, size_t min, char *err,
                      size_t err_len);
/* 1 when v is finite and in [0, max]. */
int sw_pb_upto(float v, float max);
/* strlen(s) up to max + 1 (0 for NULL): more than max means too long. */
size_t sw_pb_strlen_max(const char *s, size_t max);

/* The validators of the round's messages (wire_check_round.c), rows of
 * wire_check.c's message-type table. */
int sw_pb_check_forward(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                        char *err, size_t err_len);
int sw_pb_check_verdict(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                        char *err, size_t err_len);

#endif
