/*
 * partial.h - partial GGUF files: the tensors one layer range needs, cut out
 * of a whole model file (`shardwire pull --layers A:B`, docs/architecture.md).
 *
 * A partial file is an ordinary GGUF (version and alignment of its source):
 * every metadata key/value of the source, byte for byte, then the keys below,
 * then the tensor infos of the kept tensors only, with their data packed in
 * the source's order (offsets rewritten). Kept are the blocks blk.N.* with
 * A <= N < B, every tensor outside the blocks that is not one of the three
 * below (rope_freqs.weight ...), token_embd.weight when A = 0 (the head) or
 * when B = n_layers and the source has no output.weight (tied embeddings),
 * and output_norm.weight and output.weight when B = n_layers (the tail).
 *
 *   shardwire.partial.layer_begin    u32  A
 *   shardwire.partial.layer_end      u32  B
 *   shardwire.partial.source         str  hf:ORG/NAME/FILE@COMMIT (where the rest is)
 *   shardwire.partial.source_size    u64  bytes of the whole file (of all parts of a set)
 *   shardwire.partial.source_sha256  str  the hub's sha256 of the whole file ("" = none,
 *                                         and for a split set)
 *   shardwire.partial.source_tensors u64  tensor count of the whole file
 *   shardwire.partial.fingerprint    str  sw_model_fingerprint of the whole file
 *   shardwire.partial.n_vocab        u32  rows of token_embd.weight (which B > 0 may lack)
 *   shardwire.partial.source_parts   u32  parts of the split set it is cut from (only then)
 *
 * A partial file cut from a split set (gguf.h) is one file: the first part's
 * key/values without the split.* keys, the kept tensors of every part;
 * source names the set's first part.
 *
 * The fingerprint a node announces is the whole file's: the sha256 of its
 * header and first MiB of tensor data; of a split set, the sha256 of every
 * part's header in order and the first MiB of the first part's tensor data
 * (sw_fingerprint_of: for a file of its own the same bytes). The pull
 * computes it from those bytes of the source and stores it, so whole and
 * partial nodes of one model match, and nodes that opened a set from
 * different parts too.
 */
#ifndef SW_PARTIAL_H
#define SW_PARTIAL_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

#define SW_PARTIAL_KEY "shardwire.partial." /* the prefix of every key above */
#define SW_FINGERPRINT_DATA (1u << 20)      /* tensor bytes the fingerprint covers */

/* The whole file (or split set) a partial is cut from. */
typedef struct sw_partial_src {
    const char *source;      /* hf:ORG/NAME/FILE@COMMIT */
    uint64_t size;           /* its bytes (of all its parts) */
    const char *sha256;      /* the hub's sha256 of it, "" = none */
    const char *fingerprint; /* its fingerprint (64 hex) */
} sw_partial_src_t;

/* Bytes of the source copied into the partial. */
typedef struct sw_partial_seg {
    int part;          /* the source's split part holding it (0 for a file of its own) */
    uint64_t src_off;  /* offset in that part's file */
    uint64_t part_off; /* offset in the partial file */
    uint64_t len;      /* bytes (one tensor's data) */
} sw_partial_seg_t;

typedef struct sw_partial_plan {
    uint8_t *header;        /* (header_len) the partial's header, padded: its data start here */
    size_t header_len;      /* bytes */
    sw_partial_seg_t *segs; /* (n_segs) by increasing (part, src_off) and part_off */
    int n_segs;             /* kept tensors */
    uint64_t size;          /* bytes of the partial file */
    uint64_t data_bytes;    /* sum of segs[].len */
} sw_partial_plan_t;

/*
 * The partial file of layers [begin, end) of src (a header-only open of the
 * whole file, sw_gguf_open_header, or of a split set,
 * sw_gguf_open_split_headers): its header and where each kept tensor's
 * bytes come from. 0, or -1 with one line in err (a bad range, a source that
 * is itself partial, no token_embd.weight).
 */
int sw_partial_plan(const sw_gguf_t *src, int begin, int end, const sw_partial_src_t *id,
                    sw_partial_plan_t *plan, char *err, size_t err_len)
    __attribute__((warn_unused_result));
void sw_partial_plan_free(sw_partial_plan_t *plan);

/* What a partial file says about itself. */
typedef struct sw_partial_info {
    int begin, end;       /* the layers it holds */
    int n_vocab;          /* shardwire.partial.n_vocab */
    uint64_t source_size; /* bytes of the whole file */
    int source_parts;     /* parts of the split set it was cut from, 1 for a file */
    char source[512];     /* hf:ORG/NAME/FILE@COMMIT */
    char sha256[65];      /* "" = none */
    char fingerprint[65]; /* the whole file's */
} sw_partial_info_t;

/* 1 and info when g is a partial file, 0 when it is whole, -1 with err when
 * its partial keys are malformed. n_layer is the model's block_count. */
int sw_partial_info(const sw_gguf_t *g, int n_layer, sw_partial_info_t *info, char *err,
                    size_t err_len) __attribute__((warn_unused_result));

/* The model's block_count (general.architecture's): 0 with n_layer, or -1 (with err). */
int sw_partial_layers(const sw_gguf_t *g, int *n_layer) __attribute__((warn_unused_result));
int sw_partial_layers_err(const sw_gguf_t *g, int *n_layer, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/* Bytes of the start of a whole file (of a set's first part) that its
 * fingerprint hashes: the header and sw_fingerprint_data_len bytes of
 * tensor data. */
uint64_t sw_fingerprint_len(const sw_gguf_t *g);
/* Bytes of tensor data (of the first part) the fingerprint hashes: up to
 * SW_FINGERPRINT_DATA. */
uint64_t sw_fingerprint_data_len(const sw_gguf_t *g);

/* The fingerprint of g (a file or a split set, header-only opens too) as 64
 * hex digits: the sha256 of every part's header (sw_gguf_part_header) in
 * order, then data, the first sw_fingerprint_data_len(g) bytes of the
 * (first part's) tensor data. */
void sw_fingerprint_of(const sw_gguf_t *g, const void *data, char out[65]);

#endif
