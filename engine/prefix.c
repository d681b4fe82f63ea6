/*
 * prefix.c - the cache of prompt prefixes' KV (see prefix.h): a fixed array
 * of blocks, a hash table of chains over it (keyed by the parent block, the
 * namespace and the block's tokens, with a secret seed), a free list, and a
 * table of namespace strings. Eviction scans for the least recently used
 * block nothing hangs under.
 */
#include "prefix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "model_impl.h"

typedef struct s_block {
    uint32_t id;                  // unique while the cache lives (0 = free slot)
    uint32_t parent;              // the block before it (its id), 0 = it starts at position 0
    int parent_at;                // and its slot (valid: a block with children stays)
    int ns;                       // its namespace (index into ns[])
    int children;                 // blocks that hang under it
    uint64_t used;                // last use (the cache's clock)
    int next;                     // next block in its hash chain, -1 = none
    int32_t tok[SW_PREFIX_BLOCK]; // its tokens
    void *kv;                     // (block_bytes) its positions' KV (sw_kv_export's layout)
} s_block_t;

typedef struct s_ns {
    char name[SW_PREFIX_NS_LEN + 1]; // its string ("" is a namespace too)
    uint64_t used;                   // last use, 0 = a free slot
} s_ns_t;

struct sw_prefix {
    sw_model_t *m;      // whose layers (not owned)
    int align;          // a reused length is a multiple of this
    size_t block_bytes; // KV bytes of one block
    s_block_t *blocks;  // (cap)
    int cap;            //
    int *bucket;        // (n_bucket) first block of each chain, -1 = none
    int n_bucket;       // a power of two
    int *free_list;     // (cap) indices of free slots
    int n_free;         //
    uint32_t next_id;   // ids are never reused
    uint64_t clock;     // ticks per use
    uint64_t seed;      // the buckets' secret
    s_ns_t ns[SW_PREFIX_MAX_NS];
    sw_prefix_stats_t st;
};

int sw_prefix_align(const sw_model_t *m)
{
    /* The CPU backend gives the same bits however a prompt's dense layers
     * are chunked (backend_cpu.c takes whole windows only for speed), so a
     * prefix may end on any block there. A mixture-of-experts layer counts
     * a window's rows per expert, and a device backend's long-prompt path
     * depends on its chunks: those prefixes end on a chunk. */
    int unit = SW_PREFIX_BLOCK;
    for (int i = 0; i < m->n_dev; i++)
        if (strcmp(m->devs[i].be->ops->name, "cpu") != 0 || m->hp.n_expert > 0)
            unit = m->batch;
    int a = SW_PREFIX_BLOCK;
    while (a % unit != 0) // both are powers of two in practice; any common multiple works
        a += SW_PREFIX_BLOCK;
    return a;
}

sw_prefix_t *sw_prefix_new(sw_model_t *m, int max_blocks, uint64_t seed)
{
    if (max_blocks <= 0)
        max_blocks = SW_PREFIX_DEFAULT_BLOCKS;
    if (max_blocks > (1 << 20))
        max_blocks = 1 << 20;
    sw_prefix_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->m = m;
    p->align = sw_prefix_align(m);
    p->block_bytes = sw_kv_span_bytes(m, SW_PREFIX_BLOCK);
    p->cap = max_blocks;
    p->n_bucket = 1;
    while (p->n_bucket < 2 * max_blocks)
        p->n_bucket *= 2;
    p->blocks = calloc((size_t)p->cap, sizeof *p->blocks);
    p->bucket = malloc((size_t)p->n_bucket * sizeof *p->bucket);
    p->free_list = malloc((size_t)p->cap * sizeof *p->free_list);
    if (!p->blocks || !p->bucket || !p->free_list) {
        sw_prefix_free(&p);
        return NULL;
    }
    for (int i = 0; i < p->n_bucket; i++)
        p->bucket[i] = -1;
    for (int i = 0; i < p->cap; i++)
        p->free_list[i] = p->cap - 1 - i;
    p->n_free = p->cap;
    p->next_id = 1;
    p->seed = seed ^ 0x6a09e667f3bcc909ull;
    return p;
}

void sw_prefix_free(sw_prefix_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    sw_prefix_t *p = *self_p;
    for (int i = 0; p->blocks && i < p->cap; i++)
        free(p->blocks[i].kv);
    free(p->blocks);
    free(p->bucket);
    free(p->free_list);
    free(p);
    *self_p = NULL;
}

size_t sw_prefix_block_bytes(const sw_prefix_t *p)
{
    return p->block_bytes;
}

size_t sw_prefix_bytes(const sw_prefix_t *p)
{
    return p->st.bytes;
}

const sw_prefix_stats_t *sw_prefix_stats(const sw_prefix_t *p)
{
    return &p->st;
}

/* The bucket of (parent, ns, tokens): a keyed multiply-xorshift mix. */
static int s_hash(const sw_prefix_t *p, uint32_t parent, int ns, const int32_t *tok)
{
    uint64_t h = p->seed ^ ((uint64_t)parent << 20) ^ (uint64_t)ns;
    for (int i = 0; i < SW_PREFIX_BLOCK; i++) {
        h ^= (uint32_t)tok[i];
        h *= 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    h ^= h >> 32;
    return (int)(h & (uint64_t)(p->n_bucket - 1));
}

/* The block under parent holding exactly tok in namespace ns, or -1. */
static int s_lookup(const sw_prefix_t *p, uint32_t parent, int ns, const int32_t *tok)
{
    for (int i = p->bucket[s_hash(p, parent, ns, tok)]; i >= 0; i = p->blocks[i].next) {
        const s_block_t *b = &p->blocks[i];
        if (b->parent == parent && b->ns == ns && !memcmp(b->tok, tok, sizeof b->tok))
            return i;
    }
    return -1;
}

/* The namespace's index, or -1 (make: take a slot, the least recently used
 * one's blocks going first when none is free). */
static void s_drop(sw_prefix_t *p, int i);

static int s_ns(sw_prefix_t *p, const char *name, int make)
{
    if (!name || strlen(name) > SW_PREFIX_NS_LEN)
        return -1;
    int free_at = -1, oldest = 0;
    for (int i = 0; i < SW_PREFIX_MAX_NS; i++) {
        if (p->ns[i].used && !strcmp(p->ns[i].name, name)) {
            p->ns[i].used = ++p->clock;
            return i;
        }
        if (!p->ns[i].used && free_at < 0)
            free_at = i;
        if (p->ns[i].used < p->ns[oldest].used)
            oldest = i;
    }
    if (!make)
        return -1;
    if (free_at < 0) { // the least recently used namespace's blocks go
        free_at = oldest;
        for (int pass = 0; pass < p->cap; pass++) {
            int dropped = 0;
            for (int i = 0; i < p->cap; i++)
                if (p->blocks[i].id && p->blocks[i].ns == free_at && !p->blocks[i].children) {
                    s_drop(p, i);
                    dropped = 1;
                }
            if (!dropped)
                break;
        }
    }
    snprintf(p->ns[free_at].name, sizeof p->ns[free_at].name, "%s", name);
    p->ns[free_at].used = ++p->clock;
    return free_at;
}

/* Frees block i (nothing may hang under it). */
static void s_drop(sw_prefix_t *p, int i)
{
    s_block_t *b = &p->blocks[i];
    int *link = &p->bucket[s_hash(p, b->parent, b->ns, b->tok)];
    while (*link >= 0 && *link != i)
        link = &p->blocks[*link].next;
    if (*link == i)
        *link = b->next;
    if (b->parent)
        p->blocks[b->parent_at].children--;
    free(b->kv);
    memset(b, 0, sizeof *b);
    p->free_list[p->n_free++] = i;
    p->st.blocks--;
    p->st.bytes -= p->block_bytes;
    p->st.evicted++;
}

/* The least recently used block nothing hangs under and not used at or
 * after `keep` (the clock of the store in progress), or -1. */
static int s_victim(const sw_prefix_t *p, uint64_t keep)
{
    int v = -1;
    for (int i = 0; i < p->cap; i++) {
        const s_block_t *b = &p->blocks[i];
        if (b->id && !b->children && b->used < keep && (v < 0 || b->used < p->blocks[v].used))
            v = i;
    }
    return v;
}

size_t sw_prefix_evict(sw_prefix_t *p, size_t max_bytes)
{
    size_t freed = 0;
    while (p->st.bytes > max_bytes) {
        const int v = s_victim(p, UINT64_MAX);
        if (v < 0)
            break;
        s_drop(p, v);
        freed += p->block_bytes;
    }
    return freed;
}

int sw_prefix_find(sw_prefix_t *p, const char *ns, const int32_t *tokens, int n, int max_len)
{
    p->st.lookups++;
    const int k = s_ns(p, ns, 0);
    if (k < 0 || max_len > n)
        max_len = k < 0 ? 0 : n;
    int len = 0, best = 0;
    uint32_t parent = 0;
    while (k >= 0 && len + SW_PREFIX_BLOCK <= max_len) {
        const int i = s_lookup(p, parent, k, tokens + len);
        if (i < 0)
            break;
        p->blocks[i].used = ++p->clock;
        parent = p->blocks[i].id;
        len += SW_PREFIX_BLOCK;
        if (len % p->align == 0)
            best = len;
    }
    if (best > 0)
        p->st.hits++;
    return best;
}

int sw_prefix_restore(sw_prefix_t *p, const char *ns, const int32_t *tokens, int len, sw_kv_t *kv,
                      char *err, size_t err_len)
{
    const int k = s_ns(p, ns, 0);
    if (sw_kv_len(kv) != 0 || len < 0 || len % p->align != 0 || k < 0) {
        sw_errf(err, err_len, "prefix cache: cannot restore %d positions (%s)", len,
                k < 0 ? "namespace not cached" : "not a whole prefix into an empty cache");
        return -1;
    }
    uint32_t parent = 0;
    for (int at = 0; at < len; at += SW_PREFIX_BLOCK) {
        const int i = s_lookup(p, parent, k, tokens + at);
        if (i < 0) {
            sw_errf(err, err_len, "prefix cache: positions [%d, %d) are not cached", at,
                    at + SW_PREFIX_BLOCK);
            goto fail;
        }
        if (sw_kv_import(kv, p->blocks[i].kv, SW_PREFIX_BLOCK, err, err_len) != 0)
            goto fail;
        p->blocks[i].used = ++p->clock;
        parent = p->blocks[i].id;
    }
    p->st.tokens_reused += (uint64_t)len;
    return 0;
fail:
    if (sw_kv_truncate(kv, 0) != 0) // cannot fail: 0 <= len
        return -1;
    return -1;
}

int sw_prefix_store(sw_prefix_t *p, const char *ns, const int32_t *tokens, int n, const sw_kv_t *kv,
                    size_t max_bytes, char *err, size_t err_len)
{
    if (n > sw_kv_linear(kv))
        n = sw_kv_linear(kv);
    if (n < SW_PREFIX_BLOCK)
        return 0;
    const int k = s_ns(p, ns, 1);
    if (k < 0) {
        sw_errf(err, err_len, "prefix cache: a namespace of more than %d bytes", SW_PREFIX_NS_LEN);
        return -1;
    }
    const uint64_t start = p->clock + 1; // blocks used from now on are this prefix's: kept
    int added = 0, parent_at = -1;
    uint32_t parent = 0;
    for (int at = 0; at + SW_PREFIX_BLOCK <= n; at += SW_PREFIX_BLOCK) {
        int i = s_lookup(p, parent, k, tokens + at);
        if (i < 0) {
            /* Room: a free slot within the byte budget, older blocks evicted. */
            while (p->n_free == 0 || (max_bytes && p->st.bytes + p->block_bytes > max_bytes)) {
                const int v = s_victim(p, start);
                if (v < 0)
                    return added; // the rest does not fit
                s_drop(p, v);
            }
            void *buf = malloc(p->block_bytes);
            if (!buf) {
                sw_errf(err, err_len, "prefix cache: out of memory for a block");
                return added;
            }
            if (sw_kv_export(kv, at, SW_PREFIX_BLOCK, buf, err, err_len) != 0) {
                free(buf);
                return -1;
            }
            i = p->free_list[--p->n_free];
            s_block_t *b = &p->blocks[i];
            b->id = p->next_id++;
            if (p->next_id == 0)
                p->next_id = 1;
            b->parent = parent;
            b->ns = k;
            b->children = 0;
            memcpy(b->tok, tokens + at, sizeof b->tok);
            b->kv = buf;
            const int h = s_hash(p, parent, k, b->tok);
            b->next = p->bucket[h];
            p->bucket[h] = i;
            b->parent_at = parent_at;
            if (parent)
                p->blocks[parent_at].children++;
            p->st.blocks++;
            p->st.bytes += p->block_bytes;
            p->st.stored++;
            added++;
        }
        p->blocks[i].used = ++p->clock;
        parent = p->blocks[i].id;
        parent_at = i;
    }
    return added;
}
