/*
 * fuzz_wire.c - libFuzzer target over the wire decoder (common/wire.c).
 *
 * Input layout: byte 0 bit 0 = a payload frame is present; bytes 1..4 = its
 * length (little endian); the rest is the header frame. Whatever decodes
 * must validate again, re-encode, and decode to the same bytes; a failure of
 * that property traps. Build: clang -fsanitize=fuzzer,address,undefined,
 * linked with swcommon (see scripts/fuzz.sh / -DSW_FUZZ=ON).
 */
#include "log.h"
#include "wire.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    sw_log_set_level(SW_LOG_ERROR);
    int has_payload = data[0] & 1;
    size_t payload_len =
        (size_t)data[1] | (size_t)data[2] << 8 | (size_t)data[3] << 16 | (size_t)data[4] << 24;
    const uint8_t *hdr = data + 5;
    size_t hdr_len = size - 5;
    char err[SW_WIRE_ERR_LEN];

    (void)sw_wire_name_ok((const char *)hdr, hdr_len < 80 ? hdr_len : 80);

    Shardwire__Envelope *env = NULL;
    int rc = sw_wire_decode(hdr, hdr_len, has_payload, payload_len, &env, err, sizeof err);
    if (rc != SW_WIRE_OK) {
        if (env != NULL || err[0] == '\0')
            __builtin_trap(); /* a refusal returns nothing and says why */
        return 0;
    }
    (void)sw_wire_body_name(env);
    zmq_msg_t frame;
    if (sw_wire_encode(env, has_payload, payload_len, &frame, err, sizeof err) != SW_WIRE_OK)
        __builtin_trap(); /* what we accept we must be able to send */
    Shardwire__Envelope *again = NULL;
    if (sw_wire_decode(zmq_msg_data(&frame), zmq_msg_size(&frame), has_payload, payload_len, &again,
                       err, sizeof err) != SW_WIRE_OK)
        __builtin_trap();
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
