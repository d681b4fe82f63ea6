/*
 * kv.h - the KV cache of a model's layer range (kv.c): the keys and values
 * of every position a session has filled, on the devices that hold the
 * layers, and the parent and position of each slot, which token trees need.
 * A cache grows with each forward call (model.h) and is cut back with
 * sw_kv_truncate() or, after a tree round, sw_kv_keep().
 *
 * Ownership: sw_kv_new() returns a cache the caller frees with sw_kv_free()
 * before the model it was made for.
 */
#ifndef SW_KV_H
#define SW_KV_H

#include <stddef.h>
#include <stdint.h>

typedef struct sw_model sw_model_t; // model.h
typedef struct sw_kv sw_kv_t;

/* A KV cache of n_ctx positions for this model's layers. NULL on failure. */
sw_kv_t *sw_kv_new(sw_model_t *m, int n_ctx) __attribute__((warn_unused_result));
void sw_kv_free(sw_kv_t **self_p);
/* Bytes a cache of n_ctx positions takes for this model's layers. */
size_t sw_kv_bytes(const sw_model_t *m, int n_ctx);
/* Positions filled. */
int sw_kv_len(const sw_kv_t *kv);
int sw_kv_capacity(const sw_kv_t *kv);
/* Keeps the first n positions (n <= len), O(1). 0 or -1. */
int sw_kv_truncate(sw_kv_t *kv, int n) __attribute__((warn_unused_result));

/* Token trees. Every cache slot has a parent slot (-1 = none) and a position
 * (its parent's + 1, 0 without a parent): a plain sequence is slot s under
 * s - 1 at position s, a tree row sits at the position of its depth. A row
 * attends to its own slot and its ancestors' only. sw_kv_keep() keeps the
 * slots [0, from) and the n slots slots[0..n) (strictly increasing, each
 * >= from and < len, each one's parent < from or kept before it), moved to
 * from, from + 1, ..: the accepted path of a tree round (or a subtree the
 * draft model prepared) becomes ordinary cache, with no recomputation; the
 * cache then holds from + n slots. 0, or -1 with err (nothing changed). */
int sw_kv_keep(sw_kv_t *kv, int from, const int32_t *slots, int n, char *err, size_t err_len)
    __attribute__((warn_unused_result));
/* The position of slot s (< len), or -1. */
int sw_kv_pos(const sw_kv_t *kv, int s);
/* The parent slot of slot s (< len; -1 = none), or -2. */
int sw_kv_parent(const sw_kv_t *kv, int s);
/* The slots [0, n) of the cache that form a plain sequence (no tree part). */
int sw_kv_linear(const sw_kv_t *kv);

/* Prefix reuse (engine/include/prefix.h): the K and V of plain positions as host
 * bytes. Bytes of n positions of every layer of the model's range. */
size_t sw_kv_span_bytes(const sw_model_t *m, int n);
/* Copies positions [from, from + n) (plain, < the cache's length) of every
 * layer into dst (sw_kv_span_bytes(m, n) bytes): per layer the K rows, then
 * the V rows of those n positions. 0, or -1 with err. */
int sw_kv_export(const sw_kv_t *kv, int from, int n, void *dst, char *err, size_t err_len)
    __attribute__((warn_unused_result));
/* Appends n positions exported by sw_kv_export (from a cache of the same
 * model and range) at the end of a plain cache: they become positions
 * [len, len + n) of the plain sequence. 0, or -1 with err (nothing changed
 * when they do not fit). */
int sw_kv_import(sw_kv_t *kv, const void *src, int n, char *err, size_t err_len)
    __attribute__((warn_unused_result));

#endif
