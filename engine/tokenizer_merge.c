/*
 * tokenizer_merge.c - the tokenizer's hash maps (token string -> id, token
 * pair -> merge rank) and its merge loops: byte-level BPE over the words a
 * pre-tokenizer cut, and SentencePiece BPE with byte fallback.
 *
 * The merge loops follow the reference implementations' tie-breaking exactly
 * (lowest rank / highest score first, leftmost on ties), because a different
 * but "equally good" segmentation would change the ids the model sees.
 */
#include <string.h>

#include "tokenizer_impl.h"
#include "unicode.h"

/* ---- string -> id and (left id, right id) -> merge rank maps ------------- */

static uint64_t s_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; // FNV-1a 64
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

int tok_strmap_init(tok_strmap_t *m, size_t n)
{
    uint32_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    m->slot = malloc(cap * sizeof(*m->slot));
    if (!m->slot)
        return -1;
    memset(m->slot, 0xff, cap * sizeof(*m->slot));
    m->cap = cap;
    return 0;
}

void tok_strmap_put(const sw_tokenizer_t *t, tok_strmap_t *m, int32_t id)
{
    size_t n;
    const char *s = tok_text(t, id, &n);
    uint32_t i = (uint32_t)s_hash(s, n) & (m->cap - 1);
    while (m->slot[i] >= 0) {
        size_t n2;
        const char *s2 = tok_text(t, m->slot[i], &n2);
        if (n2 == n && memcmp(s, s2, n) == 0)
            break; // duplicate string: the later id replaces it
        i = (i + 1) & (m->cap - 1);
    }
    m->slot[i] = id;
}

int32_t tok_strmap_get(const sw_tokenizer_t *t, const tok_strmap_t *m, const char *s, size_t n)
{
    if (!m->slot)
        return -1;
    uint32_t i = (uint32_t)s_hash(s, n) & (m->cap - 1);
    while (m->slot[i] >= 0) {
        size_t n2;
        const char *s2 = tok_text(t, m->slot[i], &n2);
        if (n2 == n && memcmp(s, s2, n) == 0)
            return m->slot[i];
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}

uint32_t tok_merge_slot(uint64_t key, uint32_t cap)
{
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32) & (cap - 1);
}

static const tok_merge_t *s_merge_get(const sw_tokenizer_t *t, int32_t a, int32_t b)
{
    if (t->merge_cap == 0 || a < 0 || b < 0)
        return NULL;
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    uint32_t i = tok_merge_slot(key, t->merge_cap);
    while (t->merge[i].key != 0) {
        if (t->merge[i].key == key)
            return &t->merge[i];
        i = (i + 1) & (t->merge_cap - 1);
    }
    return NULL;
}

/* ---- merge loops -------------------------------------------------------- */

typedef struct tok_sym {
    int32_t id;   // BPE: token id of the symbol (-1 if none); SPM: unused
    uint32_t off; // first byte in the word / text
    uint32_t len; // bytes; 0 once merged into its left neighbour
    int32_t prev; // index of the previous live symbol, -1 at the start
    int32_t next; // index of the next live symbol, -1 at the end
} tok_sym_t;

typedef struct tok_heap_ent {
    double key;    // BPE: merge rank; SPM: -score (smaller pops first)
    int32_t left;  // left symbol index (ties: smaller pops first)
    int32_t right; // right symbol index
    int32_t a, b;  // BPE: left/right ids when queued; SPM: a = merged byte length
    int32_t res;   // BPE: id of the merged token
} tok_heap_ent_t;

static int s_heap_less(const tok_heap_ent_t *x, const tok_heap_ent_t *y)
{
    return x->key < y->key || (x->key == y->key && x->left < y->left);
}

static int s_heap_push(tok_work_t *w, const tok_heap_ent_t *e)
{
    if (tok_reserve((void **)&w->heap, &w->cap_heap, w->n_heap + 1, sizeof(*w->heap)) != 0)
        return -1;
    size_t i = w->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!s_heap_less(e, &w->heap[p]))
            break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = *e;
    return 0;
}

static tok_heap_ent_t s_heap_pop(tok_work_t *w)
{
    tok_heap_ent_t top = w->heap[0];
    tok_heap_ent_t last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const tok_heap_ent_t *best = &last;
        if (l < n && s_heap_less(&w->heap[l], best)) {
            m = l;
            best = &w->heap[l];
        }
        if (r < n && s_heap_less(&w->heap[r], best))
            m = r;
        if (m == i)
            break;
        w->heap[i] = w->heap[m];
        i = m;
    }
    if (n > 0)
        w->heap[i] = last;
    return top;
}

static int s_bpe_queue(const sw_tokenizer_t *t, tok_work_t *w, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return 0;
    const tok_merge_t *m = s_merge_get(t, w->sym[left].id, w->sym[right].id);
    if (!m)
        return 0;
    tok_heap_ent_t e = {(double)m->rank, left, right, w->sym[left].id, w->sym[right].id, m->result};
    return s_heap_push(w, &e);
}

/* Byte-level BPE of one pre-tokenized word (raw bytes). */
static int s_bpe_word(const sw_tokenizer_t *t, tok_work_t *w, const char *word, size_t len,
                      tok_ivec_t *out)
{
    if (t->ignore_merges) {
        /* Llama 3: a word that is itself a token is emitted whole. */
        if (tok_reserve((void **)&w->buf, &w->cap_buf, 2 * len + 1, 1) != 0)
            return -1;
        size_t n = 0;
        for (size_t i = 0; i < len; i++)
            n += sw_utf8_encode(t->byte_cp[(unsigned char)word[i]], w->buf + n);
        int32_t id = tok_strmap_get(t, &t->vocab, w->buf, n);
        if (id >= 0)
            return tok_ivec_push(out, id);
    }
    if (tok_reserve((void **)&w->sym, &w->cap_sym, len, sizeof(*w->sym)) != 0)
        return -1;
    for (size_t i = 0; i < len; i++) {
        w->sym[i].id = t->byte_tok[(unsigned char)word[i]];
        w->sym[i].off = (uint32_t)i;
        w->sym[i].len = 1;
        w->sym[i].prev = (int32_t)i - 1;
        w->sym[i].next = i + 1 < len ? (int32_t)i + 1 : -1;
    }
    w->n_heap = 0;
    for (size_t i = 1; i < len; i++)
        if (s_bpe_queue(t, w, (int32_t)i - 1, (int32_t)i) != 0)
            return -1;
    while (w->n_heap > 0) {
        tok_heap_ent_t e = s_heap_pop(w);
        tok_sym_t *l = &w->sym[e.left], *r = &w->sym[e.right];
        /* Stale when either side changed since the pair was queued. */
        if (l->len == 0 || r->len == 0 || l->next != e.right || l->id != e.a || r->id != e.b)
            continue;
        l->id = e.res;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            w->sym[r->next].prev = e.left;
        if (s_bpe_queue(t, w, l->prev, e.left) != 0 || s_bpe_queue(t, w, e.left, l->next) != 0)
            return -1;
    }
    for (int32_t i = 0; i >= 0 && len > 0; i = w->sym[i].next) {
        /* A byte whose alphabet character is missing from the vocabulary has
         * no token; the reference tokenizers drop it too. */
        if (w->sym[i].id >= 0 && tok_ivec_push(out, w->sym[i].id) != 0)
            return -1;
    }
    return 0;
}

int tok_bpe_fragment(const sw_tokenizer_t *t, tok_work_t *w, const char *text, size_t len,
                     size_t max, tok_ivec_t *out)
{
    if (tok_decode(w, text, len) != 0 || tok_pretokenize(w, t->pre) != 0)
        return -1;
    for (size_t s = 0; s < w->n_seg; s++) {
        size_t a = w->seg[2 * s], b = w->seg[2 * s + 1];
        size_t off = w->cpt[a].off;
        size_t end = w->cpt[b - 1].off + w->cpt[b - 1].len;
        if (tok_past_max(t, out, end - off, max))
            return TOK_TOO_LONG;
        if (s_bpe_word(t, w, text + off, end - off, out) != 0)
            return -1;
    }
    return out->n > max ? TOK_TOO_LONG : 0;
}

static int s_spm_queue(const sw_tokenizer_t *t, tok_work_t *w, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return 0;
    const tok_sym_t *l = &w->sym[left], *r = &w->sym[right];
    int32_t id = tok_strmap_get(t, &t->vocab, w->buf + l->off, l->len + r->len);
    if (id < 0)
        return 0;
    tok_heap_ent_t e = {-(double)t->score[id], left, right, (int32_t)(l->len + r->len), 0, id};
    return s_heap_push(w, &e);
}

int tok_spm_fragment(const sw_tokenizer_t *t, tok_work_t *w, const char *text, size_t len,
                     int prefix_space, tok_ivec_t *out)
{
    /* Escape: optional leading space, every ' ' becomes U+2581 (3 bytes). */
    if (tok_reserve((void **)&w->buf, &w->cap_buf, 3 * (len + 1), 1) != 0)
        return -1;
    size_t n = 0;
    for (size_t i = 0; i < len + (prefix_space ? 1 : 0); i++) {
        char ch = prefix_space ? (i == 0 ? ' ' : text[i - 1]) : text[i];
        if (ch == ' ') {
            memcpy(w->buf + n, "\xe2\x96\x81", 3);
            n += 3;
        } else {
            w->buf[n++] = ch;
        }
    }
    if (n == 0)
        return 0;
    if (tok_reserve((void **)&w->sym, &w->cap_sym, n, sizeof(*w->sym)) != 0)
        return -1;
    int32_t n_sym = 0;
    for (size_t i = 0; i < n;) {
        /* Symbols are UTF-8 characters; a bad byte is a symbol of its own. */
        size_t k;
        (void)sw_utf8_decode(w->buf + i, n - i, &k);
        w->sym[n_sym].off = (uint32_t)i;
        w->sym[n_sym].len = (uint32_t)k;
        w->sym[n_sym].prev = n_sym - 1;
        w->sym[n_sym].next = i + k < n ? n_sym + 1 : -1;
        n_sym++;
        i += k;
    }
    w->n_heap = 0;
    for (int32_t i = 1; i < n_sym; i++)
        if (s_spm_queue(t, w, i - 1, i) != 0)
            return -1;
    while (w->n_heap > 0) {
        tok_heap_ent_t e = s_heap_pop(w);
        tok_sym_t *l = &w->sym[e.left], *r = &w->sym[e.right];
        if (l->len == 0 || r->len == 0 || l->next != e.right || l->len + r->len != (uint32_t)e.a)
            continue;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            w->sym[r->next].prev = e.left;
        if (s_spm_queue(t, w, l->prev, e.left) != 0 || s_spm_queue(t, w, e.left, l->next) != 0)
            return -1;
    }
    for (int32_t i = 0; i >= 0; i = w->sym[i].next) {
        const tok_sym_t *s = &w->sym[i];
        int32_t id = tok_strmap_get(t, &t->vocab, w->buf + s->off, s->len);
        if (id >= 0) {
            if (tok_ivec_push(out, id) != 0)
                return -1;
            continue;
        }
        /* Byte fallback: one <0xXX> token per byte, else unk. */
        for (uint32_t j = 0; j < s->len; j++) {
            int32_t b = t->byte_tok[(unsigned char)w->buf[s->off + j]];
            if (b < 0)
                b = t->unk;
            if (b >= 0 && tok_ivec_push(out, b) != 0)
                return -1;
        }
    }
    return 0;
}
