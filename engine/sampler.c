/*
 * sampler.c - the token sampler: repetition penalty, top-k, top-p, min-p,
 * temperature and the final draw (see sampler.h for the chain and its
 * semantics).
 *
 * Cost per token is O(n_vocab) for a vocabulary of 49k..152k: the penalised
 * copy of the logits, one selection pass for top-k (a heap of k when k is
 * small, else a branch-free quickselect; never a full sort), and for top-p
 * over more than SW_SAMPLER_SORT_MAX candidates a histogram of the mass by
 * distance below the max logit, so only the one bucket where the mass
 * crosses top_p is sorted (top-p over a top-k set just sorts the k).
 * Candidates are ordered by logit descending, then token id ascending: a total
 * order, so every selection and sort gives one well-defined result.
 */
#include "sampler.h"

#include "log.h"
#include "sw_limits.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Top-p sorts its candidates when there are at most this many (after top-k). */
#define SW_SAMPLER_SORT_MAX 1024
/* Otherwise it buckets them by distance below the max logit: this many
 * buckets over this many nats; everything further down shares the last. */
#define SW_SAMPLER_BUCKETS 4096
#define SW_SAMPLER_BUCKET_RANGE 64.0f

struct s_cand {
    float l;    // penalised logit
    int32_t id; // token id
};

struct sw_sampler {
    sw_sampling_t p;     // parameters (validated)
    int32_t n_vocab;     // vocabulary size
    sw_rng_t rng;        // draws and the verifier's acceptance tests
    int32_t *hist;       // (rep_last_n) ring buffer of the latest accepted tokens, or NULL
    int32_t hist_len;    // valid entries in hist, <= rep_last_n
    int32_t hist_pos;    // next write index into hist
    uint32_t *mark;      // (n_vocab) == stamp when the token is penalised this call
    uint32_t stamp;      // current penalty pass (0 = none yet; mark is zeroed on wrap)
    struct s_cand *cand; // (n_vocab) candidates of the current call
    float *probs;        // (n_vocab) distribution scratch for sw_sampler_sample()
    double *bucket_mass; // (SW_SAMPLER_BUCKETS) top-p histogram of exp(logit - max)
};

int sw_sampling_check(const sw_sampling_t *p)
{
    if (!(p->temp >= 0.0f) || isinf(p->temp)) {
        SW_ERR("sampling: temp %g must be finite and >= 0", (double)p->temp);
        return -1;
    }
    if (p->top_k < 0) {
        SW_ERR("sampling: top_k %d must be >= 0 (0 = off)", p->top_k);
        return -1;
    }
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f)) {
        SW_ERR("sampling: top_p %g must be in (0, 1] (1 = off)", (double)p->top_p);
        return -1;
    }
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) {
        SW_ERR("sampling: min_p %g must be in [0, 1] (0 = off)", (double)p->min_p);
        return -1;
    }
    if (!(p->rep_penalty > 0.0f) || isinf(p->rep_penalty)) {
        SW_ERR("sampling: rep_penalty %g must be finite and > 0 (1 = off)", (double)p->rep_penalty);
        return -1;
    }
    if (p->rep_last_n < 0 || p->rep_last_n > SW_SAMPLING_MAX_LAST_N) {
        SW_ERR("sampling: rep_last_n %d must be in [0, %d]", p->rep_last_n, SW_SAMPLING_MAX_LAST_N);
        return -1;
    }
    return 0;
}

sw_sampler_t *sw_sampler_new(const sw_sampling_t *params, int32_t n_vocab)
{
    if (n_vocab < 1) {
        SW_ERR("sampler: n_vocab %d must be >= 1", n_vocab);
        return NULL;
    }
    if (sw_sampling_check(params) != 0)
        return NULL;
    sw_sampler_t *s = calloc(1, sizeof(*s));
    if (!s)
        goto oom;
    s->p = *params;
    s->n_vocab = n_vocab;
    size_t n = (size_t)n_vocab;
    s->mark = calloc(n, sizeof(*s->mark));
    s->cand = malloc(n * sizeof(*s->cand));
    s->probs = malloc(n * sizeof(*s->probs));
    s->bucket_mass = malloc(SW_SAMPLER_BUCKETS * sizeof(*s->bucket_mass));
    if (!s->mark || !s->cand || !s->probs || !s->bucket_mass)
        goto oom;
    if (params->rep_last_n > 0) {
        s->hist = malloc((size_t)params->rep_last_n * sizeof(*s->hist));
        if (!s->hist)
            goto oom;
    }
    sw_sampler_reset(s);
    return s;
oom:
    SW_ERR("sampler: out of memory for a vocabulary of %d", n_vocab);
    sw_sampler_free(&s);
    return NULL;
}

void sw_sampler_free(sw_sampler_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    sw_sampler_t *s = *self_p;
    free(s->hist);
    free(s->mark);
    free(s->cand);
    free(s->probs);
    free(s->bucket_mass);
    free(s);
    *self_p = NULL;
}

void sw_sampler_clear_history(sw_sampler_t *s)
{
    s->hist_len = 0;
    s->hist_pos = 0;
}

void sw_sampler_history_mark(const sw_sampler_t *s, int n, int32_t *buf, sw_sampler_mark_t *m)
{
    const int32_t cap = s->p.rep_last_n;
    m->len = s->hist_len;
    m->pos = s->hist_pos;
    m->n = n < cap ? n : cap;
    for (int32_t i = 0; i < m->n; i++)
        buf[i] = s->hist[(m->pos + i) % cap];
}

void sw_sampler_history_rewind(sw_sampler_t *s, const int32_t *buf, const sw_sampler_mark_t *m)
{
    const int32_t cap = s->p.rep_last_n;
    for (int32_t i = 0; i < m->n; i++)
        s->hist[(m->pos + i) % cap] = buf[i];
    s->hist_len = m->len;
    s->hist_pos = m->pos;
}

int sw_sampler_history_cap(const sw_sampler_t *s)
{
    return s->p.rep_last_n;
}

void sw_sampler_reset(sw_sampler_t *s)
{
    sw_sampler_clear_history(s);
    memset(s->mark, 0, (size_t)s->n_vocab * sizeof(*s->mark));
    s->stamp = 0;
    sw_rng_seed(&s->rng, s->p.seed);
}

void sw_sampler_accept(sw_sampler_t *s, int32_t token)
{
    int32_t cap = s->p.rep_last_n;
    if (cap == 0)
        return;
    s->hist[s->hist_pos] = token;
    s->hist_pos = s->hist_pos + 1 == cap ? 0 : s->hist_pos + 1;
    if (s->hist_len < cap)
        s->hist_len++;
}

const sw_sampling_t *sw_sampler_params(const sw_sampler_t *s)
{
    return &s->p;
}

int32_t sw_sampler_n_vocab(const sw_sampler_t *s)
{
    return s->n_vocab;
}

sw_rng_t *sw_sampler_rng(sw_sampler_t *s)
{
    return &s->rng;
}

/* Marks the distinct in-range tokens of the history with a fresh stamp;
 * returns 0 when no token is to be penalised (penalty off or empty). */
static int s_mark_history(sw_sampler_t *s)
{
    if (s->p.rep_penalty == 1.0f || s->hist_len == 0)
        return 0;
    if (++s->stamp == 0) {
        memset(s->mark, 0, (size_t)s->n_vocab * sizeof(*s->mark));
        s->stamp = 1;
    }
    for (int32_t i = 0; i < s->hist_len; i++) {
        int32_t t = s->hist[i];
        if (t >= 0 && t < s->n_vocab)
            s->mark[t] = s->stamp;
    }
    return 1;
}

static inline float s_penalize(float l, float penalty)
{
    float v = l > 0.0f ? l / penalty : l * penalty;
    /* A penalty < 1 boosts; never let a finite logit become +inf. */
    return v > FLT_MAX ? FLT_MAX : v;
}

static inline int s_bad_logit(float l)
{
    return isnan(l) || l == INFINITY;
}

int32_t sw_sampler_argmax(sw_sampler_t *s, const float *logits)
{
    int penal = s_mark_history(s);
    float best = -INFINITY;
    int32_t best_id = -1;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        float l = logits[i];
        if (s_bad_logit(l)) {
            SW_ERR("sampler: logit %d is %g", i, (double)l);
            return -1;
        }
        if (penal && s->mark[i] == s->stamp)
            l = s_penalize(l, s->p.rep_penalty);
        if (l > best) {
            best = l;
            best_id = i;
        }
    }
    if (best_id < 0)
        SW_ERR("sampler: every logit is -inf");
    return best_id;
}

/* ---- candidate ordering ---------------------------------------------------- */

/* a comes first: larger logit, then smaller id. */
static inline int s_before(const struct s_cand *a, const struct s_cand *b)
{
    /* Bitwise ops: no branch, the partition loop below stays predictable. */
    return (a->l > b->l) | ((a->l == b->l) & (a->id < b->id));
}

static int s_cmp(const void *pa, const void *pb)
{
    const struct s_cand *a = pa, *b = pb;
    if (s_before(a, b))
        return -1;
    return s_before(b, a) ? 1 : 0;
}

static inline void s_swap(struct s_cand *c, size_t i, size_t j)
{
    struct s_cand t = c[i];
    c[i] = c[j];
    c[j] = t;
}

static void s_insertion_sort(struct s_cand *c, size_t lo, size_t hi)
{
    for (size_t i = lo + 1; i < hi; i++) {
        struct s_cand x = c[i];
        size_t j = i;
        while (j > lo && s_before(&x, &c[j - 1])) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = x;
    }
}

/* Lomuto partition of c[lo, hi) (hi - lo >= 3) around the median of three;
 * returns the pivot's final index. */
static size_t s_partition(struct s_cand *c, size_t lo, size_t hi)
{
    size_t mid = lo + (hi - lo) / 2, last = hi - 1;
    if (s_before(&c[mid], &c[lo]))
        s_swap(c, mid, lo);
    if (s_before(&c[last], &c[lo]))
        s_swap(c, last, lo);
    if (s_before(&c[mid], &c[last]))
        s_swap(c, mid, last); /* the median is now at last */
    struct s_cand pv = c[last];
    size_t store = lo;
    for (size_t i = lo; i < last; i++) {
        /* Branch-free Lomuto: always swap, advance the boundary when x comes
         * first. c[store, i) only holds elements not before the pivot. */
        struct s_cand x = c[i];
        c[i] = c[store];
        c[store] = x;
        store += (size_t)s_before(&x, &pv);
    }
    s_swap(c, store, last);
    return store;
}

/* Restores the heap below h[i]: every parent comes after its children in
 * candidate order, so h[0] is the last of the heap. */
static void s_sift(struct s_cand *h, size_t n, size_t i)
{
    for (;;) {
        size_t w = i, l = 2 * i + 1, r = l + 1;
        if (l < n && s_before(&h[w], &h[l]))
            w = l;
        if (r < n && s_before(&h[w], &h[r]))
            w = r;
        if (w == i)
            return;
        s_swap(h, i, w);
        i = w;
    }
}

/* As s_select, for m - lo much smaller than hi - lo: one pass keeping a heap
 * of the best m - lo in c[lo, m). Most elements cost one predictable compare
 * against the heap's last. */
static void s_heap_select(struct s_cand *c, size_t lo, size_t hi, size_t m)
{
    struct s_cand *h = c + lo;
    size_t k = m - lo;
    for (size_t i = k / 2; i-- > 0;)
        s_sift(h, k, i);
    for (size_t j = m; j < hi; j++) {
        if (s_before(&c[j], &h[0])) {
            s_swap(c, j, lo);
            s_sift(h, k, 0);
        }
    }
}

/* Rearranges c[lo, hi) so that c[lo, m) holds its first (m - lo) elements in
 * candidate order (in any order among themselves). Quickselect, expected
 * O(hi - lo); falls back to a full sort if the pivots keep being bad. */
static void s_select(struct s_cand *c, size_t lo, size_t hi, size_t m)
{
    if (lo < m && m < hi && (m - lo) <= (hi - lo) / 16) {
        s_heap_select(c, lo, hi, m);
        return;
    }
    int budget = 16;
    for (size_t n = hi - lo; n > 1; n >>= 1)
        budget += 2;
    while (lo < m && m < hi) {
        if (hi - lo <= 16) {
            s_insertion_sort(c, lo, hi);
            return;
        }
        if (budget-- == 0) {
            qsort(c + lo, hi - lo, sizeof(*c), s_cmp);
            return;
        }
        size_t p = s_partition(c, lo, hi);
        if (p == m || p + 1 == m)
            return;
        if (p < m)
            lo = p + 1;
        else
            hi = p;
    }
}

/* ---- the chain ------------------------------------------------------------- */

/* Fills s->cand with the penalised logits in id order. Returns the largest,
 * or NaN when a logit is NaN or +inf or all are -inf. */
static float s_prepare(sw_sampler_t *s, const float *logits)
{
    int penal = s_mark_history(s);
    float max = -INFINITY;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        float l = logits[i];
        if (s_bad_logit(l)) {
            SW_ERR("sampler: logit %d is %g", i, (double)l);
            return NAN;
        }
        if (penal && s->mark[i] == s->stamp)
            l = s_penalize(l, s->p.rep_penalty);
        s->cand[i].l = l;
        s->cand[i].id = i;
        if (l > max)
            max = l;
    }
    if (max == -INFINITY) {
        SW_ERR("sampler: every logit is -inf");
        return NAN;
    }
    return max;
}

static inline size_t s_bucket(float l, float mx)
{
    float d = (mx - l) * ((float)SW_SAMPLER_BUCKETS / SW_SAMPLER_BUCKET_RANGE);
    return d < (float)(SW_SAMPLER_BUCKETS - 1) ? (size_t)d : SW_SAMPLER_BUCKETS - 1;
}

/* Top-p over many candidates without sorting them: the weights
 * exp(l - max) go into buckets by distance from the max, the buckets are
 * summed best first up to the one where the mass reaches top_p, and only that
 * bucket's candidates are sorted to find the exact cut. Moves the kept set to
 * the front of s->cand and returns its size. */
static size_t s_top_p_hist(sw_sampler_t *s, size_t n, float mx, double top_p)
{
    struct s_cand *c = s->cand;
    double *mass = s->bucket_mass, z = 0.0;
    memset(mass, 0, SW_SAMPLER_BUCKETS * sizeof(*mass));
    for (size_t i = 0; i < n; i++) {
        float w = expf(c[i].l - mx);
        mass[s_bucket(c[i].l, mx)] += w;
        z += w;
    }
    double target = top_p * z, cum = 0.0;
    size_t b = 0;
    while (b < SW_SAMPLER_BUCKETS && cum + mass[b] < target)
        cum += mass[b++];
    if (b == SW_SAMPLER_BUCKETS)
        return n; /* rounding: the whole mass is below target */
    size_t front = 0, mid;
    for (size_t i = 0; i < n; i++) {
        if (s_bucket(c[i].l, mx) < b)
            s_swap(c, i, front++);
    }
    mid = front;
    for (size_t i = front; i < n; i++) {
        if (s_bucket(c[i].l, mx) == b)
            s_swap(c, i, mid++);
    }
    qsort(c + front, mid - front, sizeof(*c), s_cmp);
    for (size_t i = front; i < mid; i++) {
        cum += expf(c[i].l - mx);
        if (cum >= target)
            return i + 1;
    }
    return mid;
}

/* Applies top-p and then min-p to the n candidates of s->cand (max logit
 * mx); moves the kept set to the front and returns its size. */
static size_t s_top_p_min_p(sw_sampler_t *s, size_t n, float mx)
{
    struct s_cand *c = s->cand;
    double top_p = s->p.top_p, min_p = s->p.min_p;
    size_t kept = n;
    if (top_p < 1.0 && n > SW_SAMPLER_SORT_MAX) {
        kept = s_top_p_hist(s, n, mx, top_p);
    } else if (top_p < 1.0) {
        /* Few candidates (after top-k): sort them and walk the prefix. */
        qsort(c, n, sizeof(*c), s_cmp);
        double z = 0.0, cum = 0.0;
        for (size_t i = 0; i < n; i++)
            z += expf(c[i].l - mx);
        for (size_t i = 0; i < n; i++) {
            cum += expf(c[i].l - mx);
            if (cum >= top_p * z) {
                kept = i + 1;
                break;
            }
        }
    }
    if (min_p > 0.0) {
        /* min-p keeps logit >= max + log(min_p) (= prob >= min_p * max prob).
         * Both filters keep a prefix of the sorted order, so min-p after
         * top-p is a compaction that needs no order. The max always stays. */
        double thr = (double)mx + log(min_p);
        size_t k2 = 0;
        for (size_t i = 0; i < kept; i++) {
            if ((double)c[i].l >= thr)
                s_swap(c, i, k2++);
        }
        kept = k2;
    }
    return kept;
}

int sw_sampler_probs(sw_sampler_t *s, const float *logits, float *probs_out)
{
    size_t nv = (size_t)s->n_vocab;
    if (s->p.temp <= 0.0f) {
        int32_t t = sw_sampler_argmax(s, logits);
        if (t < 0)
            return -1;
        memset(probs_out, 0, nv * sizeof(*probs_out));
        probs_out[t] = 1.0f;
        return 0;
    }
    float mx = s_prepare(s, logits);
    if (isnan(mx))
        return -1;
    size_t n = nv;
    if (s->p.top_k > 0 && (size_t)s->p.top_k < n) {
        n = (size_t)s->p.top_k;
        s_select(s->cand, 0, nv, n);
    }
    size_t kept = s_top_p_min_p(s, n, mx);
    /* Temperature last. The max is always kept, so the sum is >= 1. */
    float inv_t = 1.0f / s->p.temp;
    double sum = 0.0;
    memset(probs_out, 0, nv * sizeof(*probs_out));
    for (size_t i = 0; i < kept; i++) {
        float w = expf((s->cand[i].l - mx) * inv_t);
        probs_out[s->cand[i].id] = w;
        sum += w;
    }
    float inv_sum = (float)(1.0 / sum);
    for (size_t i = 0; i < kept; i++)
        probs_out[s->cand[i].id] *= inv_sum;
    return 0;
}

int32_t sw_sampler_sample_probs(sw_sampler_t *s, const float *probs)
{
    double total = 0.0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        float w = probs[i];
        if (!(w >= 0.0f) || isinf(w)) {
            SW_ERR("sampler: probability %d is %g", i, (double)w);
            return -1;
        }
        total += w;
    }
    if (!(total > 0.0)) {
        SW_ERR("sampler: distribution has no mass");
        return -1;
    }
    double u = sw_rng_uniform(&s->rng) * total, cum = 0.0;
    int32_t last = -1;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        if (probs[i] > 0.0f) {
            cum += probs[i];
            last = i;
            if (u < cum)
                return i;
        }
    }
    return last; /* u within rounding of total */
}

int32_t sw_sampler_sample(sw_sampler_t *s, const float *logits)
{
    if (s->p.temp <= 0.0f)
        return sw_sampler_argmax(s, logits);
    if (sw_sampler_probs(s, logits, s->probs) != 0)
        return -1;
    return sw_sampler_sample_probs(s, s->probs);
}
