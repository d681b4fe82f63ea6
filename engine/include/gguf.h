/*
 * gguf.h - a read-only, memory-mapped GGUF (v2/v3) reader for untrusted files.
 *
 * sw_gguf_open() maps the file and validates the whole header before it
 * returns: every string length, array count, tensor dimension, type, offset
 * and alignment is checked against the file size with overflow-safe 64-bit
 * arithmetic. After a successful open every accessor below is safe: tensor
 * data pointers lie inside the mapping and cover exactly the tensor's bytes.
 * A bad file yields NULL and one error line that says what was wrong.
 *
 * Tensor data are not touched at open time (only the header pages are read),
 * so a node that uses a subset of the tensors only faults in those pages.
 *
 * Split sets (llama.cpp's gguf-split: PREFIX-00001-of-0000N.gguf ... with
 * the keys split.no, split.count and split.tensors.count): sw_gguf_open() on
 * any part opens the whole set as one sw_gguf_t: the first part's metadata,
 * every part's tensors. It reads every part's header (each must be there and
 * of the same set: one line naming the part otherwise) and maps no part
 * until a tensor of it is used (sw_gguf_tensor_data), so a layer range maps
 * only the parts that hold its tensors.
 *
 * Ownership: the sw_gguf_t owns the mapping (the parts' mappings, for a
 * set); every pointer it hands out (strings, arrays, tensor data) lives
 * until sw_gguf_close().
 */
#ifndef SW_GGUF_H
#define SW_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "quant.h"

typedef struct sw_gguf sw_gguf_t;

enum sw_gguf_vtype {
    SW_GGUF_UINT8 = 0,
    SW_GGUF_INT8 = 1,
    SW_GGUF_UINT16 = 2,
    SW_GGUF_INT16 = 3,
    SW_GGUF_UINT32 = 4,
    SW_GGUF_INT32 = 5,
    SW_GGUF_FLOAT32 = 6,
    SW_GGUF_BOOL = 7,
    SW_GGUF_STRING = 8,
    SW_GGUF_ARRAY = 9,
    SW_GGUF_UINT64 = 10,
    SW_GGUF_INT64 = 11,
    SW_GGUF_FLOAT64 = 12,
};

#define SW_GGUF_MAX_DIMS 4

/* A string inside the mapping: NOT NUL-terminated. */
typedef struct sw_gguf_str {
    const char *ptr; // (len) bytes inside the mapping
    uint64_t len;    // byte count
} sw_gguf_str_t;

typedef struct sw_gguf_tensor {
    sw_gguf_str_t name;           // tensor name, e.g. "blk.3.attn_q.weight"
    enum sw_type type;            // element type
    uint32_t n_dims;              // 1..SW_GGUF_MAX_DIMS
    int64_t ne[SW_GGUF_MAX_DIMS]; // elements per dim, ne[0] fastest; unused dims = 1
    uint64_t n_elements;          // product of ne
    uint64_t n_bytes;             // bytes of data (validated against type and ne)
    uint64_t offset;              // file offset of the data (aligned, inside its part's file)
    const void *data;             // inside the mapping, n_bytes long (NULL: header-only open,
                                  // or a split part not mapped yet: sw_gguf_tensor_data)
    int part;                     // the split part holding it (0 in a file of its own)
} sw_gguf_tensor_t;

/* The keys gguf-split writes into every part (u16, u16, i32). */
#define SW_GGUF_SPLIT_NO "split.no"                 /* the part's index, from 0 */
#define SW_GGUF_SPLIT_COUNT "split.count"           /* parts in the set */
#define SW_GGUF_SPLIT_TENSORS "split.tensors.count" /* tensors of all parts */
#define SW_GGUF_SPLIT_MAX 65535                     /* split.count is a u16 */

/* Opens and validates path; a part of a split set opens the whole set (its
 * parts beside it, named as gguf-split names them). Returns NULL and writes
 * a one-line reason into err (err_len bytes, may be 0) on any problem. */
sw_gguf_t *sw_gguf_open(const char *path, char *err, size_t err_len)
    __attribute__((warn_unused_result));
/* Path alone, as it is: a part of a split set stays one part. */
sw_gguf_t *sw_gguf_open_file(const char *path, char *err, size_t err_len)
    __attribute__((warn_unused_result));
/* Same, over a caller-owned buffer (used by the fuzzer and the tests). The
 * buffer must outlive the returned object. */
sw_gguf_t *sw_gguf_open_buffer(const void *buf, size_t len, char *err, size_t err_len)
    __attribute__((warn_unused_result));
/* The header alone: buf holds the first len bytes of a file of file_size
 * bytes (a download's first range). Everything is validated as by
 * sw_gguf_open against file_size; tensor data pointers are NULL unless the
 * tensor lies inside buf (use ->offset). Fails like a truncated file when
 * buf ends inside the header: fetch more and try again. */
sw_gguf_t *sw_gguf_open_header(const void *buf, size_t len, uint64_t file_size, char *err,
                               size_t err_len) __attribute__((warn_unused_result));
/* A split set from the first bytes of each of its n parts (heads[i]: lens[i]
 * bytes of a file of sizes[i] bytes, each holding at least the part's
 * header; names[i] the part's name for messages): checked as sw_gguf_open
 * checks a set on disk. No data can be read from it (the hub plans partial
 * downloads with it). The buffers must outlive it. */
sw_gguf_t *sw_gguf_open_split_headers(const void *const *heads, const size_t *lens,
                                      const uint64_t *sizes, const char *const *names, int n,
                                      char *err, size_t err_len)
    __attribute__((warn_unused_result));
/* Unmaps and frees; accepts NULL and NULLs the caller's pointer. */
void sw_gguf_close(sw_gguf_t **self_p);

/* ---- split sets ---- */
/* 1 and the part's index (from 0) and the set's count when path ends in
 * -NNNNN-of-MMMMM.gguf (1 <= NNNNN <= MMMMM), with *prefix_len the bytes
 * before it; else 0. */
int sw_gguf_split_name(const char *path, int *idx, int *count, size_t *prefix_len);
/* PREFIX-NNNNN-of-MMMMM.gguf for part idx (from 0) of count, from the first
 * prefix_len bytes of prefix: 0, or -1 when it does not fit in len. */
int sw_gguf_split_path(char *out, size_t len, const char *prefix, size_t prefix_len, int idx,
                       int count);
/* Parts of the set g was opened from: 1 for a file of its own. */
int sw_gguf_part_count(const sw_gguf_t *g);
/* Part i's path (NULL for a file of its own or a set of sw_gguf_open_split_headers). */
const char *sw_gguf_part_path(const sw_gguf_t *g, int i);
/* Part i's bytes on disk. */
uint64_t sw_gguf_part_size(const sw_gguf_t *g, int i);
/* Part i's header: its first *len bytes (everything before its tensor data). */
const void *sw_gguf_part_header(const sw_gguf_t *g, int i, uint64_t *len);
/* 1 when part i is mapped (its tensors' data are in memory's reach). */
int sw_gguf_part_mapped(const sw_gguf_t *g, int i);
/* Tensor t's data (n_bytes long), mapping its part on first use: NULL with
 * err when the part cannot be mapped or changed since it was opened, or g
 * has no data (a header-only open). Not for concurrent first use. */
const void *sw_gguf_tensor_data(sw_gguf_t *g, const sw_gguf_tensor_t *t, char *err, size_t err_len)
    __attribute__((warn_unused_result));
/* n bytes of part i from offset off into buf, without mapping the part: 0,
 * or -1 with err. */
int sw_gguf_read(const sw_gguf_t *g, int i, uint64_t off, void *buf, size_t n, char *err,
                 size_t err_len) __attribute__((warn_unused_result));

uint32_t sw_gguf_version(const sw_gguf_t *g);
uint64_t sw_gguf_file_size(const sw_gguf_t *g);
/* The file's bytes (file_size long) and the offset where tensor data start
 * (everything before it is the validated header). */
const void *sw_gguf_bytes(const sw_gguf_t *g);
uint64_t sw_gguf_data_offset(const sw_gguf_t *g);
/* File offset of the first tensor info (the metadata key/values end there;
 * they start at 24, after magic, version and the two counts). */
uint64_t sw_gguf_kv_end(const sw_gguf_t *g);
/* general.alignment (default 32). */
uint64_t sw_gguf_alignment(const sw_gguf_t *g);

/* ---- metadata key/values ---- */
/* Bytes of one value of a scalar type; 0 for strings, arrays and unknown ids. */
uint64_t sw_gguf_vtype_size(enum sw_gguf_vtype t);
int64_t sw_gguf_kv_count(const sw_gguf_t *g);
/* Index of key, or -1. */
int64_t sw_gguf_find_key(const sw_gguf_t *g, const char *key);
sw_gguf_str_t sw_gguf_kv_key(const sw_gguf_t *g, int64_t i);
enum sw_gguf_vtype sw_gguf_kv_type(const sw_gguf_t *g, int64_t i);
/* Where key/value i lies in the file, key to the end of its value: 0 with
 * *off and *len, or -1 for an index outside [0, count). */
int sw_gguf_kv_span(const sw_gguf_t *g, int64_t i, uint64_t *off, uint64_t *len)
    __attribute__((warn_unused_result));

/* Typed getters by key. Each returns 0 and stores the value, or -1 when the key
 * is absent or has an incompatible type (integers of any width convert when the
 * value fits; float32/float64 convert to double). */
int sw_gguf_get_u64(const sw_gguf_t *g, const char *key, uint64_t *out)
    __attribute__((warn_unused_result));
int sw_gguf_get_i64(const sw_gguf_t *g, const char *key, int64_t *out)
    __attribute__((warn_unused_result));
int sw_gguf_get_f64(const sw_gguf_t *g, const char *key, double *out)
    __attribute__((warn_unused_result));
int sw_gguf_get_bool(const sw_gguf_t *g, const char *key, int *out)
    __attribute__((warn_unused_result));
int sw_gguf_get_str(const sw_gguf_t *g, const char *key, sw_gguf_str_t *out)
    __attribute__((warn_unused_result));

/* Arrays. sw_gguf_get_arr returns 0 with the element type and count of the
 * array stored under key, or -1. */
int sw_gguf_get_arr(const sw_gguf_t *g, const char *key, enum sw_gguf_vtype *elem_type,
                    uint64_t *count) __attribute__((warn_unused_result));
/* Element i of a string array (i < count; checked, returns -1 otherwise).
 * O(1): string offsets are indexed at open time. */
int sw_gguf_arr_str(const sw_gguf_t *g, const char *key, uint64_t i, sw_gguf_str_t *out)
    __attribute__((warn_unused_result));
/* Pointer to the raw little-endian elements of a numeric array (i32, f32, ...),
 * inside the mapping, possibly unaligned: read with memcpy. NULL if not numeric. */
const void *sw_gguf_arr_data(const sw_gguf_t *g, const char *key);

/* ---- tensors ---- */
int64_t sw_gguf_tensor_count(const sw_gguf_t *g);
const sw_gguf_tensor_t *sw_gguf_tensor(const sw_gguf_t *g, int64_t i);
/* By name, or NULL. */
const sw_gguf_tensor_t *sw_gguf_find_tensor(const sw_gguf_t *g, const char *name);

/* Compares a gguf string with a C string. */
int sw_gguf_str_eq(sw_gguf_str_t s, const char *cstr);

#endif
