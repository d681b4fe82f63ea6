/*
 * sha256.h - SHA-256 (FIPS 180-4) for the engine's model fingerprint and the
 * hub's check of a download, so that neither needs a crypto library. Not for
 * secrets: it makes no attempt at constant time or at wiping its state (the
 * network code uses libsodium).
 */
#ifndef SW_SHA256_H
#define SW_SHA256_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sw_sha256 {
    uint32_t h[8];    // chaining value
    uint64_t n_bytes; // bytes hashed so far
    uint8_t buf[64];  // pending partial block
    size_t buf_len;   // bytes in buf
} sw_sha256_t;

void sw_sha256_init(sw_sha256_t *s);
void sw_sha256_update(sw_sha256_t *s, const void *data, size_t len);
void sw_sha256_final(sw_sha256_t *s, uint8_t out[32]);
/* One call: out = SHA-256(data). */
void sw_sha256(const void *data, size_t len, uint8_t out[32]);
/* Lower-case hex of n bytes into out (2n + 1 bytes, NUL-terminated). */
void sw_hex(const uint8_t *in, size_t n, char *out);

#ifdef __cplusplus
}
#endif

#endif
