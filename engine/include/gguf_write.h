/*
 * gguf_write.h - the GGUF writer: the fields of a GGUF v2/v3 file appended in
 * order (header, key/values, tensor infos, padding, tensor data), to memory or
 * to a FILE. The one writer of the project: partial downloads build a partial
 * file's header with it in memory (partial.h), shardwire-mkmodel writes its
 * test models with it (tools/mkmodel.c).
 *
 * No call fails midway: a failed write or allocation sets failed, and every
 * later call does nothing, so a caller writes everything and checks failed
 * once at the end. Integers are written little-endian (the host's order: the
 * engine runs on little-endian machines only, as gguf.c assumes).
 *
 * Ownership: the caller opens and closes f; in memory, buf belongs to the
 * caller (free() it, also after a failure).
 */
#ifndef SW_GGUF_WRITE_H
#define SW_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gguf.h"

typedef struct sw_gguf_out {
    FILE *f;      // where the bytes go; NULL: into buf
    uint8_t *buf; // (len) the bytes written, when f is NULL; grown by realloc
    size_t len;   // bytes written so far (to f or buf)
    size_t cap;   // bytes allocated at buf
    int failed;   // a write or an allocation failed: the output is unusable
} sw_gguf_out_t;

/* n raw bytes. */
void sw_gguf_out_bytes(sw_gguf_out_t *o, const void *b, size_t n);
void sw_gguf_out_u32(sw_gguf_out_t *o, uint32_t v);
void sw_gguf_out_u64(sw_gguf_out_t *o, uint64_t v);
/* A GGUF string: its u64 length, then its n bytes (no NUL). */
void sw_gguf_out_str(sw_gguf_out_t *o, const char *s, uint64_t n);

/* The file's first 24 bytes: "GGUF", version, tensor count, key/value count. */
void sw_gguf_out_header(sw_gguf_out_t *o, uint32_t version, uint64_t n_tensors, uint64_t n_kv);

/* One key/value (key NUL-terminated): its key, value type and value. */
void sw_gguf_out_kv_u32(sw_gguf_out_t *o, const char *key, uint32_t v);
void sw_gguf_out_kv_u64(sw_gguf_out_t *o, const char *key, uint64_t v);
void sw_gguf_out_kv_f32(sw_gguf_out_t *o, const char *key, float v);
void sw_gguf_out_kv_str(sw_gguf_out_t *o, const char *key, const char *v);

/* Key/value i of g, re-serialized in its stored type (strings and arrays
 * included). 0, or -1 with failed set when g's value cannot be read back. */
int sw_gguf_out_kv_copy(sw_gguf_out_t *o, const sw_gguf_t *g, int64_t i)
    __attribute__((warn_unused_result));

/*
 * One tensor info: name (name_len bytes), n_dims, ne[0..n_dims), type, and
 * the data offset: *off rounded up to align, which is returned. *off then
 * moves past the tensor's n_bytes, ready for the next one (start it at 0).
 */
uint64_t sw_gguf_out_tensor_info(sw_gguf_out_t *o, const char *name, size_t name_len,
                                 uint32_t n_dims, const int64_t *ne, enum sw_type type,
                                 uint64_t n_bytes, uint64_t align, uint64_t *off);

/* Zero bytes up to the next multiple of align (of len): before the tensor
 * data, and after each tensor's data. */
void sw_gguf_out_pad(sw_gguf_out_t *o, uint64_t align);

#endif
