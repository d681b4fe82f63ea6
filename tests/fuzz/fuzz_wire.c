/*
 * fuzz_wire.c - libFuzzer target over the wire decoder (net/wire_check.c,
 * net/wire_check_round.c).
 *
 * Input layout: byte 0 bit 0 = a payload frame is present; bytes 1..4 = its
 * length (little endian); the rest is the header frame. Whatever decodes
 * must validate again, re-encode, and decode to the same bytes; a failure of
 * that property traps.
 *
 * The codec (net/codec.c) must read whatever validated: sw_codec_decode
 * never refuses it, and what it read encodes again into an Envelope that
 * validates (the sampling it reads may differ in bytes: top_p 0 is read as 1).
 *
 * Sealed framing (net/seal.c): with byte 0 bit 1 set, the header bytes go
 * to sw_seal_open as a received sealed frame (with the tail of the input as a
 * sealed payload when bit 0 is set): it must refuse without a crash (nobody
 * can forge the tag). And every Envelope that decodes is sealed, must open to
 * the same bytes, must be refused when one byte (chosen by byte 1) is flipped,
 * and must be refused as a replay when opened twice.
 *
 * Build: clang -fsanitize=fuzzer,address,undefined, linked with swnet (see
 * scripts/ci/fuzz.sh / -DSW_FUZZ=ON).
 */
#include "codec.h"
#include "codec_pb.h"
#include "log.h"
#include "seal.h"
#include "wire.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sw_seal_t *s_tx, *s_rx; /* one cluster key, a sender and a receiver */

/* Feeds hdr (+ a payload cut from its end) to the opener as a received sealed message. */
static void s_open_garbage(const uint8_t *hdr, size_t hdr_len, int has_payload, size_t payload_len)
{
    size_t pl = has_payload ? payload_len % (hdr_len + 1) : 0;
    zmq_msg_t payload;
    zmq_msg_init_size(&payload, pl);
    if (pl)
        memcpy(zmq_msg_data(&payload), hdr + hdr_len - pl, pl);
    uint8_t *plain = NULL;
    size_t plain_len = 0;
    int rc = sw_seal_open(s_rx, "head", NULL, "tail", hdr, hdr_len - pl,
                          has_payload ? &payload : NULL, &plain, &plain_len);
    if (rc == SW_SEAL_OK)
        __builtin_trap(); /* forged without the key */
    if (plain)
        __builtin_trap(); /* a refusal hands nothing out */
    zmq_msg_close(&payload);
}

/* Seals frame, opens it (same bytes), flips byte `at` (refused), opens again (replay). */
static void s_seal_trip(const zmq_msg_t *frame, size_t at)
{
    zmq_msg_t sealed, unused;
    if (sw_seal_message(s_tx, "head", "tail", zmq_msg_data((zmq_msg_t *)frame),
                        zmq_msg_size((zmq_msg_t *)frame), NULL, 0, 0, &sealed, &unused) != 0)
        __builtin_trap();
    uint8_t *copy = malloc(zmq_msg_size(&sealed));
    if (!copy)
        return;
    memcpy(copy, zmq_msg_data(&sealed), zmq_msg_size(&sealed));
    size_t n = zmq_msg_size(&sealed);
    copy[at % n] ^= 0x20;
    uint8_t *plain = NULL;
    size_t plain_len = 0;
    if (sw_seal_open(s_rx, "head", NULL, "tail", copy, n, NULL, &plain, &plain_len) == SW_SEAL_OK)
        __builtin_trap(); /* a flipped byte must not open */
    if (sw_seal_open(s_rx, "head", NULL, "tail", zmq_msg_data(&sealed), n, NULL, &plain,
                     &plain_len) != SW_SEAL_OK ||
        plain_len != zmq_msg_size((zmq_msg_t *)frame) ||
        memcmp(plain, zmq_msg_data((zmq_msg_t *)frame), plain_len) != 0)
        __builtin_trap();
    free(plain);
    plain = NULL;
    if (sw_seal_open(s_rx, "head", NULL, "tail", zmq_msg_data(&sealed), n, NULL, &plain,
                     &plain_len) != SW_SEAL_EREPLAY)
        __builtin_trap();
    free(copy);
    zmq_msg_close(&sealed);
}

/* The original frame's payload shape, for the codec's re-encode. */
typedef struct s_shape {
    int has_payload;
    size_t payload_len;
} s_shape_t;

static int s_validate_sink(void *ctx, sw_envelope_t *env, const void *payload, size_t payload_len,
                           int has_payload)
{
    (void)payload, (void)payload_len, (void)has_payload;
    const s_shape_t *shape = ctx;
    char err[SW_WIRE_ERR_LEN];
    env->pb.version = SW_WIRE_VERSION;
    return sw_wire_validate(&env->pb, shape->has_payload, shape->payload_len, err, sizeof err);
}

/* env validated: the codec reads it, and what it read validates again. */
static void s_codec_trip(Shardwire__Envelope *env, int has_payload, size_t payload_len)
{
    sw_wire_msg_t m = {0};
    m.env = sw_envelope_of(env); /* no payload frame here: the view's tensor pointer stays NULL */
    sw_msg_t d;
    char err[SW_WIRE_ERR_LEN];
    if (sw_codec_decode(&m, SW_MSG_NONE, &d, err, sizeof err) != SW_WIRE_OK)
        __builtin_trap();
    s_shape_t shape = {has_payload, payload_len};
    if (sw_codec_emit(&d, s_validate_sink, &shape, err, sizeof err) != SW_WIRE_OK)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    sw_log_set_level(SW_LOG_ERROR);
    if (!s_tx) {
        uint8_t key[1][SW_CLUSTER_KEY_BYTES];
        memset(key, 0x5a, sizeof key);
        s_tx = sw_seal_new(key, 1, SW_SEAL_CLUSTER);
        s_rx = sw_seal_new(key, 1, SW_SEAL_CLUSTER);
        if (!s_tx || !s_rx)
            __builtin_trap();
    }
    int has_payload = data[0] & 1;
    size_t payload_len =
        (size_t)data[1] | (size_t)data[2] << 8 | (size_t)data[3] << 16 | (size_t)data[4] << 24;
    const uint8_t *hdr = data + 5;
    size_t hdr_len = size - 5;
    char err[SW_WIRE_ERR_LEN];

    (void)sw_wire_name_ok((const char *)hdr, hdr_len < 80 ? hdr_len : 80);
    if (data[0] & 2) {
        s_open_garbage(hdr, hdr_len, has_payload, payload_len);
        return 0;
    }

    Shardwire__Envelope *env = NULL;
    int rc = sw_wire_decode(hdr, hdr_len, has_payload, payload_len, &env, err, sizeof err);
    if (rc != SW_WIRE_OK) {
        if (env != NULL || err[0] == '\0')
            __builtin_trap(); /* a refusal returns nothing and says why */
        return 0;
    }
    (void)sw_wire_body_name(env);
    s_codec_trip(env, has_payload, payload_len);
    zmq_msg_t frame;
    if (sw_wire_encode(env, has_payload, payload_len, &frame, err, sizeof err) != SW_WIRE_OK)
        __builtin_trap(); /* what we accept we must be able to send */
    Shardwire__Envelope *again = NULL;
    if (sw_wire_decode(zmq_msg_data(&frame), zmq_msg_size(&frame), has_payload, payload_len, &again,
                       err, sizeof err) != SW_WIRE_OK)
        __builtin_trap();
    s_seal_trip(&frame, (size_t)data[1] * 7 + data[2]);
    size_t n = shardwire__envelope__get_packed_size(again);
    if (n != zmq_msg_size(&frame))
        __builtin_trap();
    uint8_t *buf = malloc(n ? n : 1);
    if (buf) {
        shardwire__envelope__pack(again, buf);
        if (memcmp(buf, zmq_msg_data(&frame), n) != 0)
            __builtin_trap();
        free(buf);
    }
    zmq_msg_close(&frame);
    shardwire__envelope__free_unpacked(again, NULL);
    shardwire__envelope__free_unpacked(env, NULL);
    return 0;
}
