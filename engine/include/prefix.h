/*
 * prefix.h - a cache of the KV of prompt prefixes for one model (its layer
 * range), so that a request whose prompt starts like an earlier one's (a
 * chat client's system prompt, a long shared context) takes those positions
 * from the cache instead of computing them again: the head's layers, every
 * stage's, and the draft model's.
 *
 * Blocks of SW_PREFIX_BLOCK (sw_limits.h) positions, each keyed by the exact
 * tokens of the whole prefix it ends: its own tokens and the block before
 * it (a tree of blocks from position 0), under a namespace string that
 * names what else its KV depends on (a stage: the dtype of its input and the
 * nodes before it on the route; those must have computed the same hidden
 * states). A lookup compares tokens, namespaces and parents, never a hash
 * alone, so a collision never returns another prefix's KV; the hash buckets
 * take a secret seed, so chosen prompts cannot pile into one bucket.
 *
 * Exact. A block's KV is what the engine computed for its positions while a
 * prompt was evaluated from position 0, and the engine computes a prompt row
 * the same whatever follows it, provided (model.h) its window holds 8 rows
 * or more (a block lies inside one window, which then holds at least its 64)
 * and the rows after the prefix are evaluated as the continuation of that
 * prompt (sw_forward_t.prompt_cont: windows counted from position 0) in the
 * chunks the whole prompt would have been cut into: a reused length is a
 * multiple of sw_prefix_align() (on the CPU any block boundary,
 * SW_PREFIX_BLOCK, for a dense model, whose bits do not depend on the
 * chunking; the model's chunk for a mixture of experts or on a GPU, whose
 * prompt paths do). So a prompt evaluated after a restored prefix gives bit for bit
 * the KV and logits of the whole prompt evaluated at once
 * (tests/slow/test_prefix.c).
 *
 * Bounded: at most max_blocks blocks and SW_PREFIX_MAX_NS namespaces; the
 * caller bounds the bytes (sw_prefix_evict: least recently used first, a
 * block before its parent), a node within --kv-mib with its sessions'
 * caches.
 *
 * Ownership: sw_prefix_new() returns a cache the caller frees with
 * sw_prefix_free() before the model; one thread.
 */
#ifndef SW_PREFIX_H
#define SW_PREFIX_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

#define SW_PREFIX_MAX_NS 16   // namespaces held at once (the oldest one makes room)
#define SW_PREFIX_NS_LEN 1100 // bytes of a namespace string (a route of 16 names fits)
#define SW_PREFIX_DEFAULT_BLOCKS 4096

typedef struct sw_prefix sw_prefix_t;

typedef struct sw_prefix_stats {
    uint64_t lookups;       // sw_prefix_find calls
    uint64_t hits;          // of them found a prefix
    uint64_t tokens_reused; // positions restored (sw_prefix_restore)
    uint64_t stored;        // blocks stored
    uint64_t evicted;       // blocks evicted
    int blocks;             // blocks held
    size_t bytes;           // their KV bytes
} sw_prefix_stats_t;

/* A cache for m's layers of at most max_blocks blocks (0 = the default);
 * seed keys its hash buckets (pass a random value). NULL when out of memory. */
sw_prefix_t *sw_prefix_new(sw_model_t *m, int max_blocks, uint64_t seed)
    __attribute__((warn_unused_result));
void sw_prefix_free(sw_prefix_t **self_p);
/* A reused prefix's length is a multiple of this (>= SW_PREFIX_BLOCK). */
int sw_prefix_align(const sw_model_t *m);
/* Bytes of one block's KV. */
size_t sw_prefix_block_bytes(const sw_prefix_t *p);

/* The longest cached prefix of tokens[0..n) in namespace ns that is a
 * multiple of sw_prefix_align() and at most max_len positions (the caller
 * leaves at least one row of the prompt to compute); 0 when none. Counts a
 * lookup, and a hit when > 0. */
int sw_prefix_find(sw_prefix_t *p, const char *ns, const int32_t *tokens, int n, int max_len);
/* Appends positions [0, len) of tokens (a length sw_prefix_find gave) to the
 * empty cache kv, as a plain sequence. 0, or -1 with err when they are not
 * all cached any more (nothing restored then: kv is empty). */
int sw_prefix_restore(sw_prefix_t *p, const char *ns, const int32_t *tokens, int len, sw_kv_t *kv,
                      char *err, size_t err_len) __attribute__((warn_unused_result));
/* Stores the blocks of positions [0, n) of kv, which holds tokens[0..n)
 * evaluated as one prompt from position 0 (in prompt windows), that are not
 * cached yet, in namespace ns, as far as max_bytes allows (the most bytes the
 * cache may hold afterwards; older blocks are evicted for newer ones; 0 =
 * max_blocks only). Only whole blocks inside [0, n). The blocks added, or
 * -1 with err. */
int sw_prefix_store(sw_prefix_t *p, const char *ns, const int32_t *tokens, int n, const sw_kv_t *kv,
                    size_t max_bytes, char *err, size_t err_len);
/* Evicts the least recently used blocks (never one a later block hangs
 * under) until the cache holds at most max_bytes; the bytes freed. */
size_t sw_prefix_evict(sw_prefix_t *p, size_t max_bytes);
/* Bytes held now. */
size_t sw_prefix_bytes(const sw_prefix_t *p);
const sw_prefix_stats_t *sw_prefix_stats(const sw_prefix_t *p);

#endif
