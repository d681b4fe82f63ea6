/*
 * kv.h - the KV cache of a model's layer range (kv.c): the keys and values
 * of every position a session has filled, on the devices that hold the
 * layers, and the parent and position of each slot, which token trees need.
 * A cache grows with each forward call (model.h) and is cut back with
 * sw_kv_truncate() or, after a tree round, sw_kv_keep().
 *
 * Memory: a cache made by sw_kv_new_grow() holds no position at first and
 * grows in steps (sw_kv_step: SW_KV_BLOCK positions, then about 1.4 times
 * more each step) as its positions are used, up to its context; each step
 * moves what it holds into buffers of the new size (amortised: the copies
 * of a cache's whole life add up to less than 2.5 times its final size,
 * 3.5 when the context cuts its last step short: a geometric series of ratio
 * 1/1.4 after the first blocks),
 * so every layer's K and V stay one contiguous buffer each. A budget shared
 * by several caches (sw_kv_budget_t: a node's --kv-mib) counts the bytes
 * they hold and refuses a step that would pass it, with an error that says
 * so. sw_kv_new() allocates its whole context at once.
 *
 * Ownership: sw_kv_new() and sw_kv_new_grow() return a cache the caller
 * frees with sw_kv_free() before the model it was made for (and before its
 * budget, which stays the caller's).
 */
#ifndef SW_KV_H
#define SW_KV_H

#include <stddef.h>
#include <stdint.h>

typedef struct sw_model sw_model_t; // model.h
typedef struct sw_kv sw_kv_t;

/* Positions of a growing cache's first step; the later steps are 1.5 and 2
 * times the power-of-two multiple of it below them (256, 384, 512, 768,
 * 1024, ...), so caches of every session share a few sizes (recorded GPU
 * graphs are keyed by the size). */
#define SW_KV_BLOCK 256

/* The element type of a model's caches (sw_model_set_kv_type). */
typedef enum sw_kv_type {
    SW_KV_F16 = 0,  // K rows and transposed V in f16 (llama.cpp's default cache)
    SW_KV_Q8_0 = 1, // K and V rows in q8_0 blocks (llama.cpp's -ctk q8_0 -ctv q8_0, which
                    // runs its flash attention): half the memory, not bit-exact with f16
} sw_kv_type_t;

/* "f16" / "q8_0"; NULL for an unknown value. */
const char *sw_kv_type_name(sw_kv_type_t t);
/* The type named s, or -1. */
int sw_kv_type_parse(const char *s);
/* Sets the type of the caches made for m from now on (before the first
 * one): 0, or -1 with err when m's backend or shapes cannot hold it. */
int sw_model_set_kv_type(sw_model_t *m, sw_kv_type_t t, char *err, size_t err_len)
    __attribute__((warn_unused_result));
sw_kv_type_t sw_model_kv_type(const sw_model_t *m);

/* Memory several caches share (a node's --kv-mib), kept by kv.c. */
typedef struct sw_kv_budget {
    int64_t limit; // bytes the caches may hold together; 0 = no limit
    int64_t used;  // bytes they hold now
    /* Optional: frees other memory counted against limit (a node's cached
     * prompt prefixes) so that `need` more bytes fit beside used; called
     * before a step that does not fit is refused. */
    void (*make_room)(void *ctx, int64_t need);
    void *ctx; // make_room's
} sw_kv_budget_t;

/* A cache of n_ctx positions for this model's layers, allocated at once.
 * NULL on failure. */
sw_kv_t *sw_kv_new(sw_model_t *m, int n_ctx) __attribute__((warn_unused_result));
/* A cache that may reach n_ctx positions and allocates them as they are
 * used (sw_kv_step), counting its bytes in budget (NULL: none). NULL when
 * out of memory for its small metadata. */
sw_kv_t *sw_kv_new_grow(sw_model_t *m, int n_ctx, sw_kv_budget_t *budget)
    __attribute__((warn_unused_result));
void sw_kv_free(sw_kv_t **self_p);
/* Bytes a cache of n_ctx positions takes for this model's layers. */
size_t sw_kv_bytes(const sw_model_t *m, int n_ctx);
/* The positions a growing cache of context n_ctx allocates to hold n
 * (n <= n_ctx): the first step of SW_KV_BLOCK, 1.5x or 2x steps above it,
 * never more than n_ctx. */
int sw_kv_step(int n, int n_ctx);
/* Positions filled. */
int sw_kv_len(const sw_kv_t *kv);
/* The positions the cache may reach (its context). */
int sw_kv_capacity(const sw_kv_t *kv);
/* The positions allocated now, and their bytes (K and V of every layer). */
int sw_kv_allocated(const sw_kv_t *kv);
size_t sw_kv_alloc_bytes(const sw_kv_t *kv);
/* Makes room for n positions now (n <= the context): one step of growth if
 * needed, counted in the budget. 0, or -1 with err (the cache unchanged:
 * more than its context, the budget full, or out of device memory). The
 * forward calls do this themselves; a caller that batches several caches
 * reserves each first, so that one that cannot grow fails alone. */
int sw_kv_reserve(sw_kv_t *kv, int n, char *err, size_t err_len)
    __attribute__((warn_unused_result));
/* Keeps the first n positions (n <= len), O(1). 0 or -1. The memory stays
 * allocated (the next rounds reuse it). */
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
