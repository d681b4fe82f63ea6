/*
 * gguf_impl.h - what the GGUF reader's two files share, private to the
 * engine: the reader's state (struct sw_gguf) and the calls gguf_split.c
 * makes into gguf.c. gguf.c parses one file (or its header); gguf_split.c
 * opens a split set (llama.cpp's gguf-split: PREFIX-00001-of-0000N.gguf ...)
 * as one sw_gguf_t over the parts' headers, mapping a part when a tensor of
 * it is first used. Calls go one way: gguf_split.c -> gguf.c.
 *
 * Ownership: a sw_gguf_t owns its key/value and tensor tables, its mapping
 * (mapped) or heap copy (owns_base), and its parts (their paths, header
 * parses and mappings); sw_gguf_close frees all of it.
 */
#ifndef SW_GGUF_IMPL_H
#define SW_GGUF_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

struct sw_gguf_kv {
    sw_gguf_str_t key;            // key bytes inside the buffer
    enum sw_gguf_vtype type;      // value type
    enum sw_gguf_vtype elem_type; // arrays: element type
    uint64_t count;               // arrays: element count; 1 otherwise
    uint64_t off;                 // file offset of the value (arrays: of element 0)
    uint64_t *str_off;            // (count) string arrays: file offset of each element's
                                  // u64 length; NULL otherwise. Owned.
};

/* Open-addressing hash set of indices into an array of names. */
struct sw_gguf_index {
    uint32_t *slots; // (mask + 1) entry index + 1, 0 = empty
    uint64_t mask;   // slot count - 1 (slot count a power of two)
};

/* One part of a split set. */
struct sw_gguf_part {
    char *path;         // its file; NULL when the set was built from header bytes alone
    sw_gguf_t *hdr;     // its header alone (part 0: NULL, the set's own fields are its header)
    uint64_t size;      // bytes of the file
    uint64_t data_off;  // where its tensor data start
    const uint8_t *map; // (size) the file mapped, NULL until one of its tensors is used
};

struct sw_gguf {
    const uint8_t *base;               // (buf_len) the file's bytes, or its first buf_len bytes
    uint64_t size;                     // file size in bytes
    uint64_t buf_len;                  // bytes at base (size, except for header-only opens)
    uint64_t kv_end;                   // file offset of the first tensor info
    int mapped;                        // 1 when base is our own mmap (unmapped at close)
    int owns_base;                     // 1 when base is a heap copy (freed at close)
    uint32_t version;                  // 2 or 3
    uint64_t alignment;                // general.alignment, power of two
    uint64_t data_off;                 // file offset of the (aligned) data section
    int64_t n_kv;                      // metadata entries
    struct sw_gguf_kv *kv;             // (n_kv)
    int64_t n_tensors;                 // tensor infos (of every part in a split set)
    sw_gguf_tensor_t *tensors;         // (n_tensors)
    struct sw_gguf_index kv_index;     // key -> kv index
    struct sw_gguf_index tensor_index; // name -> tensor index
    int n_parts;                       // a split set's parts (2 or more); 0 for one file
    struct sw_gguf_part *parts;        // (n_parts); parts[0] is this header's file
};

/* Parses the header in buf: len bytes, the whole file (len == size) or its
 * first len bytes of a file of size bytes. NULL with err on a bad header. */
sw_gguf_t *sw_gguf_parse(const uint8_t *buf, uint64_t len, uint64_t size, char *err,
                         size_t err_len);

/* Rebuilds g's name index over its tensor table (after gguf_split.c merged
 * the parts' tables into it): 0; -1 when out of memory; 1 when two tensors
 * share a name, *first and *second their indices. */
int sw_gguf_index_tensors(sw_gguf_t *g, int64_t *first, int64_t *second);

#endif
