/*
 * forward.c - the transformer's forward pass over a model's layer range
 * (model.h): sw_model_forward, sw_model_forward_batch (the rows of several
 * sessions in one pass) and the greedy draft loop that stays on the
 * backend.
 *
 * A forward call processes its rows in chunks (the backend's max_rows);
 * each op computes rows independently, so the split does not change any
 * value. Per chunk the row control block goes to every device, then each
 * device runs its layers (as a recorded graph where the backend has them)
 * and hands the hidden states to the next.
 */
#include "model.h"

#include <math.h>
#include <stdlib.h>

#include "log.h"
#include "model_impl.h"

#define S_TRY(call)                                                                                \
    do {                                                                                           \
        if ((call) != 0)                                                                           \
            return -1;                                                                             \
    } while (0)

/* A session's rows inside a forward chunk that holds rows of several. */
typedef struct s_piece {
    sw_kv_t *kv; // the session's cache
    int row0;    // its first row in the chunk
    int n;       // its rows
    int slot0;   // the cache slot of its first row
    int tree;    // 1: its rows are token tree rows (visibility records, positions by depth)
} s_piece_t;

/* What one device does for one chunk, recorded as one graph on backends
 * that have them: the embedding lookup (first device of the first stage),
 * its layers, and the final norm (last device of the last stage). A chunk
 * holds the rows of one session (kv), or rows of several (pieces): then
 * everything but attention runs over all rows at once (each row is computed
 * on its own, so a row's result is what it would be alone), and attention
 * runs per session on views of its rows, against that session's cache and
 * control block. */
typedef struct s_step {
    sw_model_t *m;
    sw_kv_t *kv; // the session, when the chunk holds one
    sw_dev_t *d;
    const sw_buf_t *ctl;     // the chunk's control block on d (positions, tokens of every row)
    int n;                   // rows
    int prompt_order;        // attention order and SW_MM_PROMPT
    int tiled;               // SW_MM_TILED for the layers' matmuls
    int tiled_out;           // SW_MM_TILED for the last layer's FFN before the final norm:
                             // llama.cpp runs that FFN on the rows that want logits only,
                             // so only those rows count
    int gemm_out;            // SW_MM_PROMPT for that FFN: 2 of those rows or more
    int logit_row0;          // the first of those rows (a mixture of experts counts them)
    int out_row0;            // rows [0, out_row0) are dropped after the last layer's
                             // attention (final_norm only; llama.cpp's inp_out_ids): their
                             // K and V are cached, nothing after is computed for them
    sw_buf_t *x_out;         // a view of d->x from row out_row0 (out_row0 > 0 and rows left)
    int embed;               // 1: get_rows first
    int final_norm;          // 1: output norm last (into d->xn)
    const s_piece_t *pieces; // (n_pieces) sessions of a shared chunk, NULL = one session (kv)
    int n_pieces;            //
    sw_buf_t *const *views;  // (n_pieces, 4) views of d->q, d->k, d->v, d->att on each piece
    int tree;                // one session's chunk of token tree rows
} s_step_t;

/* Attention of one layer over the chunk's rows: per session when the chunk is shared. */
static int s_attention(const s_step_t *s, int li)
{
    const sw_hparams_t *hp = &s->m->hp;
    sw_dev_t *d = s->d;
    for (int j = 0; j < (s->pieces ? s->n_pieces : 1); j++) {
        sw_kv_t *kv = s->pieces ? s->pieces[j].kv : s->kv;
        sw_buf_t *const *v = s->pieces ? s->views + 4 * j : NULL;
        sw_attn_args_t a = {
            .q = v ? v[0] : d->q,
            .k = v ? v[1] : d->k,
            .v = v ? v[2] : d->v,
            .out = v ? v[3] : d->att,
            .k_cache = kv->k[li],
            .v_cache = kv->v[li],
            .ctl = s->pieces ? d->pctl_v[j] : s->ctl,
            .n = s->pieces ? s->pieces[j].n : s->n,
            .n_ctx = kv->cap,
            .n_head = hp->n_head,
            .n_kv_head = hp->n_kv_head,
            .head_dim = hp->head_dim,
            .scale = hp->q_scale != 0 ? 1.0f : 1.0f / sqrtf((float)hp->head_dim),
            .prompt_order = s->prompt_order,
            .tree = s->pieces ? s->pieces[j].tree : s->tree,
            .swa = s->m->layers[li].swa ? hp->n_swa : 0,
            .kv_q8 = kv->type == SW_KV_Q8_0,
            .out_row0 = s->pieces || li != s->d->l1 - 1 ? 0 : s->out_row0,
        };
        S_TRY(d->be->ops->attention(d->be, &a));
    }
    return 0;
}

/* The feed-forward block of layer li over the n rows of d->xn into d->tmp:
 * gate/up, SwiGLU (GEGLU for Gemma 3), down; or the mixture of experts, which
 * counts rows [count_row0, n) for an expert's tiled order. */
static int s_ffn(const s_step_t *s, int li, int n, int count_row0, int flags)
{
    sw_model_t *m = s->m;
    sw_dev_t *d = s->d;
    sw_backend_t *be = d->be;
    const sw_backend_ops_t *ops = be->ops;
    const sw_hparams_t *hp = &m->hp;
    const sw_layer_t *L = &m->layers[li];
    if (hp->n_expert > 0) {
        sw_moe_args_t a = {.x = d->xn,
                           .router = &L->router,
                           .gate = &L->gate_exps,
                           .up = &L->up_exps,
                           .down = &L->down_exps,
                           .n = n,
                           .n_used = hp->n_expert_used,
                           .prompt = (flags & SW_MM_PROMPT) != 0,
                           .count_row0 = count_row0,
                           .out = d->tmp};
        return ops->moe(be, &a);
    }
    const sw_weight_t *gu[2] = {&L->w_gate, &L->w_up};
    sw_buf_t *gu_out[2] = {d->gate, d->up};
    S_TRY(ops->matmul(be, 2, gu, NULL, d->xn, 0, n, gu_out, flags));
    if (hp->arch == SW_ARCH_GEMMA3)
        S_TRY(ops->geglu(be, d->gate, d->up, (size_t)n * hp->n_ff));
    else
        S_TRY(ops->swiglu(be, d->gate, d->up, (size_t)n * hp->n_ff));
    const sw_weight_t *wd[1] = {&L->w_down};
    return ops->matmul(be, 1, wd, NULL, d->gate, 0, n, &d->tmp, flags);
}

/* x += out, or x += norm(out) where the layer norms its block's output
 * (Gemma 3's post-attention and post-feed-forward norms); n rows of x, out
 * in d->tmp. */
static int s_residual(const s_step_t *s, sw_buf_t *x, int n, const sw_buf_t *post_norm)
{
    sw_dev_t *d = s->d;
    sw_backend_t *be = d->be;
    const sw_hparams_t *hp = &s->m->hp;
    const size_t n_el = (size_t)n * hp->n_embd;
    if (!post_norm)
        return be->ops->add(be, x, d->tmp, n_el);
    S_TRY(be->ops->rmsnorm(be, d->tmp, post_norm, n, hp->n_embd, hp->rms_eps, d->xn));
    return be->ops->add(be, x, d->xn, n_el);
}

/* One layer over the n rows in d->x. */
static int s_layer_forward(const s_step_t *s, int li)
{
    sw_model_t *m = s->m;
    sw_dev_t *d = s->d;
    sw_backend_t *be = d->be;
    const sw_backend_ops_t *ops = be->ops;
    const sw_hparams_t *hp = &m->hp;
    const sw_layer_t *L = &m->layers[li];
    const int n = s->n;

    S_TRY(ops->rmsnorm(be, d->x, L->attn_norm, n, hp->n_embd, hp->rms_eps, d->xn));
    const sw_weight_t *qkv[3] = {&L->wq, &L->wk, &L->wv};
    const sw_buf_t *bias[3] = {L->bq, L->bk, L->bv};
    sw_buf_t *qkv_out[3] = {d->q, d->k, d->v};
    const int mm_flags = s->prompt_order ? SW_MM_PROMPT | (s->tiled ? SW_MM_TILED : 0) : 0;
    S_TRY(ops->matmul(be, 3, qkv, bias, d->xn, 0, n, qkv_out, mm_flags));
    if (L->q_norm) {
        S_TRY(ops->head_norm(be, d->q, n, hp->n_head, hp->head_dim, L->q_norm, hp->rms_eps));
        S_TRY(ops->head_norm(be, d->k, n, hp->n_kv_head, hp->head_dim, L->k_norm, hp->rms_eps));
    }
    const sw_buf_t *rope = L->swa ? d->rope_swa : d->rope;
    S_TRY(ops->rope(be, d->q, s->ctl, n, hp->n_head, hp->head_dim, hp->n_rot, rope, hp->rope_neox));
    S_TRY(ops->rope(be, d->k, s->ctl, n, hp->n_kv_head, hp->head_dim, hp->n_rot, rope,
                    hp->rope_neox));
    if (hp->q_scale != 0)
        S_TRY(ops->scale(be, d->q, (size_t)n * hp->n_head * hp->head_dim, hp->q_scale));
    S_TRY(s_attention(s, li));
    /* From here on the last layer before the final norm computes only the
     * rows [out_row0, n) (every op computes each row on its own, with the
     * flags it had before, so their values do not change). */
    const int last = s->final_norm && li == d->l1 - 1;
    const int r0 = last ? s->out_row0 : 0, nr = n - r0;
    if (nr == 0)
        return 0;
    sw_buf_t *x = r0 > 0 ? s->x_out : d->x;
    const sw_weight_t *wo[1] = {&L->wo};
    S_TRY(ops->matmul(be, 1, wo, NULL, d->att, r0, nr, &d->tmp, mm_flags));
    S_TRY(s_residual(s, x, nr, L->attn_post_norm));

    S_TRY(ops->rmsnorm(be, x, L->ffn_norm, nr, hp->n_embd, hp->rms_eps, d->xn));
    /* llama.cpp runs the last layer's FFN on the rows that want logits only:
     * its batched paths and an expert's tiled order count those rows */
    const int ffn_flags = last && s->prompt_order
                              ? (s->gemm_out ? SW_MM_PROMPT : 0) | (s->tiled_out ? SW_MM_TILED : 0)
                              : mm_flags;
    const int count_row0 = last ? s->logit_row0 - r0 : 0;
    S_TRY(s_ffn(s, li, nr, count_row0 > 0 ? count_row0 : 0, ffn_flags));
    return s_residual(s, x, nr, L->ffn_post_norm);
}

static int s_step_record(void *ctx)
{
    const s_step_t *s = ctx;
    sw_model_t *m = s->m;
    sw_dev_t *d = s->d;
    const sw_backend_ops_t *ops = d->be->ops;
    if (s->embed) {
        S_TRY(ops->get_rows(d->be, &m->tok_embd, s->ctl, s->n, d->x));
        if (m->hp.embd_scale != 0)
            S_TRY(ops->scale(d->be, d->x, (size_t)s->n * m->hp.n_embd, m->hp.embd_scale));
    }
    for (int li = d->l0; li < d->l1; li++)
        S_TRY(s_layer_forward(s, li));
    if (s->final_norm && s->out_row0 < s->n) // the rows the last layer kept
        S_TRY(ops->rmsnorm(d->be, s->out_row0 > 0 ? s->x_out : d->x, m->out_norm,
                           s->n - s->out_row0, m->hp.n_embd, m->hp.rms_eps, d->xn));
    return 0;
}

/* FNV-1a over the words that identify a recorded step. */
static uint64_t s_key(const uint64_t *w, int n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++)
        for (int b = 0; b < 8; b++) {
            h ^= (w[i] >> (8 * b)) & 0xff;
            h *= 0x100000001b3ull;
        }
    return h ? h : 1;
}

/* Decode and verification chunks (up to this many rows, not prompts) are recorded as graphs. */
#define S_GRAPH_MAX_ROWS 65

/* 1 when a chunk's step is recorded as a graph on a backend that has them. */
static int s_recorded(const sw_backend_t *be, int n, int prompt_order, int shared)
{
    return be->ops->graph_run && n <= S_GRAPH_MAX_ROWS && !prompt_order && !shared;
}

static int s_run_step(s_step_t *s, int dev_index)
{
    sw_backend_t *be = s->d->be;
    if (!be->ops->graph_run)
        return s_step_record(s);
    uint64_t key = 0;
    if (s_recorded(be, s->n, s->prompt_order, s->pieces != NULL)) {
        /* The model and the cache's allocated size, not the cache: a backend that
         * records graphs takes each session's caches at replay (backend_impl.h,
         * graph_run); growing caches share a few sizes (sw_kv_step). */
        const uint64_t w[] = {(uint64_t)(uintptr_t)s->m,
                              (uint64_t)s->kv->cap,
                              (uint64_t)dev_index,
                              (uint64_t)s->n,
                              (uint64_t)s->prompt_order,
                              (uint64_t)s->embed,
                              (uint64_t)s->final_norm,
                              (uint64_t)s->tree,
                              0x57e9};
        key = s_key(w, (int)(sizeof w / sizeof w[0]));
    }
    return be->ops->graph_run(be, key, s_step_record, s);
}

/* Writes the visibility record of the row at slot sl to rec (at most cap
 * entries): [lin, m, s_1..s_m], its ancestors from the first one past the
 * plain prefix down to itself. Returns the entries written, or -1 when cap is
 * too small. */
static int s_record(const sw_kv_t *kv, int sl, int32_t *rec, int cap)
{
    int m = 0, x = sl;
    while (x >= kv->lin) { // x >= 0 too: kv->lin >= 0
        if (2 + m >= cap)
            return -1;
        rec[2 + m++] = x;
        x = kv->par[x];
    }
    rec[0] = x + 1; // slots [0, x] are a plain prefix (or none: x = -1)
    rec[1] = m;
    for (int i = 0; i < m / 2; i++) { // root first
        int32_t t = rec[2 + i];
        rec[2 + i] = rec[2 + m - 1 - i];
        rec[2 + m - 1 - i] = t;
    }
    return 2 + m;
}

/* Fills the control block c for the n rows of pieces pc[0..np) (their slots,
 * positions from the cache's metadata, tokens tok[j] or none, and when a
 * piece is tree rows and recs is set, the visibility records of every row).
 * -1 when the records do not fit. */
static int s_fill_ctl(int32_t *c, const s_piece_t *pc, int np, int n, const int32_t *const *tok,
                      int recs)
{
    c[SW_CTL_N] = n;
    c[SW_CTL_SLOT0] = pc[0].slot0;
    int at = SW_CTL_VIS(n) + n; // next free entry of the records area
    for (int j = 0; j < np; j++)
        for (int r = 0; r < pc[j].n; r++) {
            const int row = pc[j].row0 + r, sl = pc[j].slot0 + r;
            c[SW_CTL_POS + row] = pc[j].kv->pos[sl];
            c[SW_CTL_POS + n + row] = tok ? tok[j][r] : 0;
            if (!recs || !pc[j].tree)
                continue;
            c[SW_CTL_VIS(n) + row] = at;
            int w = s_record(pc[j].kv, sl, c + at, SW_CTL_CAP(n) - at);
            if (w < 0)
                return -1;
            at += w;
        }
    return 0;
}

/* Entries of a filled control block to upload. */
static size_t s_ctl_used(const int32_t *c, int n, int tree)
{
    if (!tree)
        return SW_CTL_LEN((size_t)n);
    int32_t end = SW_CTL_VIS(n) + n;
    for (int r = 0; r < n; r++) {
        const int32_t off = c[SW_CTL_VIS(n) + r];
        if (off + 2 + c[off + 1] > end)
            end = off + 2 + c[off + 1];
    }
    return (size_t)end;
}

/* The control block of a chunk to every device: row r of piece j sits at
 * slot pc[j].slot0 + r, at the position the cache's metadata gives it, and
 * carries token tok[j][r] (tok may be NULL). With several pieces, each also
 * gets its own block (its slots, its visibility records) for its attention,
 * in d->pctl; one piece's records go in the chunk's block. */
static int s_put_ctl(sw_model_t *m, const s_piece_t *pc, int np, int n, const int32_t *const *tok,
                     sw_backend_t **bad)
{
    int32_t *c = m->ctl_host;
    const int tree1 = np == 1 && pc[0].tree;
    if (s_fill_ctl(c, pc, np, n, tok, np == 1) != 0) {
        *bad = m->devs[0].be;
        return sw_backend_fail(*bad, "the token tree of a chunk is too deep (%d entries at most)",
                               SW_CTL_TREE_MAX);
    }
    const size_t used = s_ctl_used(c, n, tree1);
    for (int i = 0; i < m->n_dev; i++) {
        sw_dev_t *d = &m->devs[i];
        *bad = d->be;
        if (d->be->ops->upload(d->be, d->ctl, 0, c, used * sizeof *c) != 0)
            return -1;
    }
    if (np < 2)
        return 0;
    const size_t blk = SW_CTL_CAP((size_t)m->batch) * sizeof(int32_t);
    for (int j = 0; j < np; j++) {
        s_piece_t one = pc[j];
        one.row0 = 0;
        const int32_t *tj = tok ? tok[j] : NULL;
        if (s_fill_ctl(c, &one, 1, pc[j].n, tok ? &tj : NULL, 1) != 0) {
            *bad = m->devs[0].be;
            return sw_backend_fail(*bad, "the token tree of a session is too deep");
        }
        const size_t used_j = s_ctl_used(c, pc[j].n, pc[j].tree);
        for (int i = 0; i < m->n_dev; i++) {
            sw_dev_t *d = &m->devs[i];
            *bad = d->be;
            if (d->be->ops->upload(d->be, d->pctl, (size_t)j * blk, c, used_j * sizeof *c) != 0)
                return -1;
        }
    }
    return 0;
}

/* Makes the per-session control blocks of shared chunks on every device
 * (once) and, for this chunk, views of q, k, v and att on each piece's rows
 * (views: (n_dev, np, 4), freed by s_free_views). */
static int s_make_views(sw_model_t *m, const s_piece_t *pc, int np, sw_buf_t **views,
                        sw_backend_t **bad)
{
    const sw_hparams_t *hp = &m->hp;
    const size_t q_row = (size_t)hp->n_head * hp->head_dim * sizeof(float);
    const size_t kv_row = (size_t)hp->n_kv_head * hp->head_dim * sizeof(float);
    const size_t blk = SW_CTL_CAP((size_t)m->batch) * sizeof(int32_t);
    for (int i = 0; i < m->n_dev; i++) {
        sw_dev_t *d = &m->devs[i];
        const sw_backend_ops_t *ops = d->be->ops;
        *bad = d->be;
        if (!d->pctl) {
            d->pctl = ops->buf_alloc(d->be, SW_MODEL_MAX_PIECES * blk);
            for (int j = 0; d->pctl && j < SW_MODEL_MAX_PIECES; j++)
                if (!(d->pctl_v[j] = ops->buf_view(d->be, d->pctl, (size_t)j * blk, blk)))
                    return -1;
            if (!d->pctl)
                return -1;
        }
        for (int j = 0; j < np; j++) {
            sw_buf_t **v = views + ((size_t)i * np + j) * 4;
            const size_t r0 = (size_t)pc[j].row0, n = (size_t)pc[j].n;
            v[0] = ops->buf_view(d->be, d->q, r0 * q_row, n * q_row);
            v[1] = ops->buf_view(d->be, d->k, r0 * kv_row, n * kv_row);
            v[2] = ops->buf_view(d->be, d->v, r0 * kv_row, n * kv_row);
            v[3] = ops->buf_view(d->be, d->att, r0 * q_row, n * q_row);
            if (!v[0] || !v[1] || !v[2] || !v[3])
                return -1;
        }
    }
    return 0;
}

static void s_free_views(sw_model_t *m, int np, sw_buf_t **views)
{
    for (int i = 0; i < m->n_dev; i++)
        for (int j = 0; j < np * 4; j++)
            sw_model_buf_free(m->devs[i].be, &views[(size_t)i * np * 4 + j]);
}

/* The argument checks of one session's rows. */
static int s_check_forward(sw_model_t *m, const sw_kv_t *kv, const sw_forward_t *f, char *err,
                           size_t err_len)
{
    const sw_hparams_t *hp = &m->hp;
    if (!kv || kv->m != m) {
        sw_errf(err, err_len, "model: the KV cache belongs to another model");
        return -1;
    }
    if (f->n < 1 || f->n_logits < 0 || f->n_logits > f->n) {
        sw_errf(err, err_len, "model: bad row count %d (logits %d)", f->n, f->n_logits);
        return -1;
    }
    if ((int64_t)kv->len + f->n > kv->n_ctx) {
        sw_errf(err, err_len, "model: %d rows do not fit the context (%d of %d positions used)",
                f->n, kv->len, kv->n_ctx);
        return -1;
    }
    if (sw_model_is_first(m)) {
        if (!f->tokens) {
            sw_errf(err, err_len, "model: the first stage needs token ids");
            return -1;
        }
        for (int i = 0; i < f->n; i++)
            if (f->tokens[i] < 0 || f->tokens[i] >= hp->n_vocab) {
                sw_errf(err, err_len, "model: token id %d is outside the vocabulary (0..%d)",
                        f->tokens[i], hp->n_vocab - 1);
                return -1;
            }
    } else if (!f->hidden) {
        sw_errf(err, err_len, "model: a later stage needs hidden states");
        return -1;
    }
    if (sw_model_is_last(m) ? (f->n_logits > 0 && !f->logits) : !f->out_hidden) {
        sw_errf(err, err_len, "model: no output buffer");
        return -1;
    }
    if (f->parent) {
        if (f->prompt) {
            sw_errf(err, err_len, "model: token tree rows cannot be a prompt");
            return -1;
        }
        for (int d = 0; d < m->n_dev; d++)
            if (!m->devs[d].be->ops->kv_move) {
                sw_errf(err, err_len, "model: backend %s does not run token trees",
                        m->devs[d].be->name);
                return -1;
            }
        for (int r = 0; r < f->n; r++)
            if (f->parent[r] < -1 || f->parent[r] >= kv->len + r) {
                sw_errf(err, err_len, "model: tree row %d hangs under slot %d (allowed -1..%d)", r,
                        f->parent[r], kv->len + r - 1);
                return -1;
            }
    }
    return 0;
}

/* Writes the parent and position of each of f's rows into kv's metadata
 * (past len: nothing is committed until the call succeeds) and returns 1
 * when they continue the plain sequence, 0 when they are tree rows (or
 * follow one). */
static int s_meta(sw_kv_t *kv, const sw_forward_t *f)
{
    int plain = kv->lin == kv->len;
    for (int r = 0; r < f->n; r++) {
        const int sl = kv->len + r;
        const int32_t p = f->parent ? f->parent[r] : sl - 1;
        kv->par[sl] = p;
        kv->pos[sl] = p < 0 ? 0 : kv->pos[p] + 1;
        plain &= p == sl - 1 && kv->pos[sl] == sl;
    }
    return plain;
}

/* The rows of a forward call, cut into chunks of at most m->batch rows. */
typedef struct s_chunk {
    s_piece_t pc[SW_MODEL_MAX_PIECES]; // sessions in the chunk, in row order
    int seg[SW_MODEL_MAX_PIECES];      // each piece's segment (index into the call's rows)
    int off[SW_MODEL_MAX_PIECES];      // and its first row within that segment
    int np;                            // pieces
    int n;                             // rows
    int prompt_order; // 1: one prompt segment (alone, as a single call would cut it)
    int tiled;        // its window holds 8 rows or more (SW_MM_TILED)
    int tiled_logits; // its window wants 8 rows of logits or more
    int gemm_logits;  // its window wants 2 rows of logits or more (llama.cpp's batched path)
    int out_row0;     // rows the last layer dropped (s_step_t): the final norm's rows start
                      // at this row of the chunk
} s_chunk_t;

/* The rows of the prompt window (SW_MODEL_PROMPT_WINDOW) of segment f that
 * holds row off, and how many of them want logits. base: the position of
 * the segment's first row when it continues a prompt (prompt_cont: windows
 * from position 0, their rows before the call counted), else 0. */
static int s_window_rows(const sw_forward_t *f, int base, int off, int *n_logits)
{
    /* prefix reuse (issue 22): positions, not rows, when the prompt started before the call */
    const int at = base + off, end = base + f->n;
    const int w0 = at / SW_MODEL_PROMPT_WINDOW * SW_MODEL_PROMPT_WINDOW;
    const int w1 = end - w0 < SW_MODEL_PROMPT_WINDOW ? end : w0 + SW_MODEL_PROMPT_WINDOW;
    const int l0 = end - f->n_logits > w0 ? end - f->n_logits : w0;
    *n_logits = w1 > l0 ? w1 - l0 : 0;
    return w1 - w0;
}

/* The position prompt windows of segment f are counted from, relative to
 * its first row (prompt_cont: the cache's length). */
static int s_window_base(const sw_forward_t *f, const sw_kv_t *kv)
{
    return f->prompt && f->prompt_cont ? kv->len : 0;
}

/* Fills ch with the next chunk from (*seg, *off) on and advances them. A
 * prompt window (SW_MODEL_PROMPT_WINDOW) of two rows or more takes its
 * chunks alone, cut at multiples of m->batch from the window's start,
 * exactly as a call of its own would (the prompt path may depend on the
 * window); other rows are packed. */
static void s_next_chunk(sw_model_t *m, sw_kv_t *const *kvs, const sw_forward_t *fs, int n_seg,
                         int *seg, int *off, s_chunk_t *ch)
{
    int wl = 0;
    const int wr = fs[*seg].prompt
                       ? s_window_rows(&fs[*seg], s_window_base(&fs[*seg], kvs[*seg]), *off, &wl)
                       : 0;
    ch->np = ch->n = 0;
    ch->prompt_order = wr >= 2;
    ch->tiled = wr >= 8;
    ch->tiled_logits = ch->prompt_order && wl >= 8;
    ch->gemm_logits = ch->prompt_order && wl >= 2;
    while (*seg < n_seg && ch->n < m->batch && ch->np < SW_MODEL_MAX_PIECES) {
        const sw_forward_t *f = &fs[*seg];
        int wl2 = 0;
        const int base = s_window_base(f, kvs[*seg]);
        const int po = f->prompt && s_window_rows(f, base, *off, &wl2) >= 2;
        if (ch->np > 0 && (po || ch->prompt_order))
            break;
        int c = f->n - *off;
        if (c > m->batch - ch->n)
            c = m->batch - ch->n;
        if (po) { // a chunk never crosses a window's end
            const int w_end =
                ((base + *off) / SW_MODEL_PROMPT_WINDOW + 1) * SW_MODEL_PROMPT_WINDOW - base;
            if (c > w_end - *off)
                c = w_end - *off;
        }
        s_piece_t *p = &ch->pc[ch->np];
        p->kv = kvs[*seg];
        p->row0 = ch->n;
        p->n = c;
        p->slot0 = kvs[*seg]->len + *off;
        p->tree = !kvs[*seg]->fwd_plain;
        ch->seg[ch->np] = *seg;
        ch->off[ch->np++] = *off;
        ch->n += c;
        *off += c;
        if (*off == f->n) {
            (*seg)++;
            *off = 0;
        }
        if (po)
            break;
    }
}

/* The last stage's LM head for the rows of ch whose logits are wanted. One
 * piece: straight from d->xn; several: their normed rows are gathered into
 * d->tmp first so that the LM head reads its weights once for all of them. */
static int s_chunk_logits(sw_model_t *m, const sw_forward_t *fs, const s_chunk_t *ch,
                          sw_backend_t **bad)
{
    const sw_hparams_t *hp = &m->hp;
    sw_dev_t *dl = &m->devs[m->n_dev - 1];
    const sw_backend_ops_t *ops = dl->be->ops;
    const size_t row_bytes = (size_t)hp->n_embd * sizeof(float);
    const size_t logit_bytes = (size_t)hp->n_vocab * sizeof(float);
    const int mm_flags = ch->gemm_logits ? SW_MM_PROMPT | (ch->tiled_logits ? SW_MM_TILED : 0) : 0;
    const sw_weight_t *out[1] = {&m->output};
    *bad = dl->be;
    /* rows wanted: [lo, n) of piece j, lo relative to the piece */
    int lo[SW_MODEL_MAX_PIECES], n_want = 0, only = -1;
    for (int j = 0; j < ch->np; j++) {
        const sw_forward_t *f = &fs[ch->seg[j]];
        lo[j] = f->n - f->n_logits - ch->off[j];
        if (lo[j] < 0)
            lo[j] = 0;
        if (lo[j] < ch->pc[j].n) {
            n_want += ch->pc[j].n - lo[j];
            only = only == -1 ? j : -2;
        }
    }
    if (n_want == 0)
        return 0;
    const sw_buf_t *src = dl->xn;
    int src_row0 = only >= 0 ? ch->pc[only].row0 + lo[only] - ch->out_row0 : 0;
    if (only == -2) {
        if (!m->gather_host && !(m->gather_host = malloc((size_t)m->batch * row_bytes)))
            return -1;
        for (int j = 0, at = 0; j < ch->np; j++) {
            const int nw = ch->pc[j].n - lo[j];
            if (nw <= 0)
                continue;
            if (ops->download(dl->be, m->gather_host + (size_t)at * hp->n_embd, dl->xn,
                              (size_t)(ch->pc[j].row0 + lo[j]) * row_bytes,
                              (size_t)nw * row_bytes) != 0)
                return -1;
            at += nw;
        }
        if (ops->upload(dl->be, dl->tmp, 0, m->gather_host, (size_t)n_want * row_bytes) != 0)
            return -1;
        src = dl->tmp;
    }
    /* LM head over the gathered rows, logit_rows at a time; each row's logits
     * go to its session's output. */
    int j = only >= 0 ? only : 0, jr = lo[j]; // the piece and row the next logits row is
    for (int r0 = 0; r0 < n_want; r0 += m->logit_rows) {
        const int nl = n_want - r0 < m->logit_rows ? n_want - r0 : m->logit_rows;
        if (ops->matmul(dl->be, 1, out, NULL, src, src_row0 + r0, nl, &dl->logits, mm_flags) != 0)
            return -1;
        for (int r = 0; r < nl;) {
            while (jr >= ch->pc[j].n) {
                j++;
                jr = lo[j];
            }
            const sw_forward_t *f = &fs[ch->seg[j]];
            int run = ch->pc[j].n - jr < nl - r ? ch->pc[j].n - jr : nl - r;
            const int at = ch->off[j] + jr - (f->n - f->n_logits); // row of f->logits
            if (ops->download(dl->be, f->logits + (size_t)at * hp->n_vocab, dl->logits,
                              (size_t)r * logit_bytes, (size_t)run * logit_bytes) != 0)
                return -1;
            r += run;
            jr += run;
        }
    }
    return 0;
}

/* The last stage drops the rows of chunk ch before logit_row0 after the
 * last layer's attention, as llama.cpp does with inp_out_ids, when the chunk
 * holds one session and is not a step the backend records as a graph (*x_out, the view of the
 * last device's x on the rows kept, is made per chunk; NULL when no row or
 * every row is dropped). */
static int s_drop_rows(sw_model_t *m, s_chunk_t *ch, int logit_row0, sw_buf_t **x_out,
                       sw_backend_t **bad)
{
    sw_dev_t *dl = &m->devs[m->n_dev - 1];
    const size_t row_bytes = (size_t)m->hp.n_embd * sizeof(float);
    const int n = ch->n;
    ch->out_row0 = sw_model_is_last(m) && ch->np == 1 && !s_recorded(dl->be, n, ch->prompt_order, 0)
                       ? logit_row0
                       : 0;
    if (ch->out_row0 == 0 || ch->out_row0 == n)
        return 0;
    *x_out = dl->be->ops->buf_view(dl->be, dl->x, (size_t)ch->out_row0 * row_bytes,
                                   (size_t)(n - ch->out_row0) * row_bytes);
    if (*x_out)
        return 0;
    *bad = dl->be;
    return sw_backend_fail(dl->be, "model: out of memory for a view of the last layer's rows");
}

int sw_model_forward_batch(sw_model_t *m, sw_kv_t *const *kvs, const sw_forward_t *fs, int n_seg,
                           char *err, size_t err_len)
{
    const sw_hparams_t *hp = &m->hp;
    if (n_seg < 1) {
        sw_errf(err, err_len, "model: a forward call of %d sessions", n_seg);
        return -1;
    }
    for (int s = 0; s < n_seg; s++) {
        if (s_check_forward(m, kvs[s], &fs[s], err, err_len) != 0)
            return -1;
        for (int t = 0; t < s; t++)
            if (kvs[t] == kvs[s]) {
                sw_errf(err, err_len, "model: one cache twice in a forward call");
                return -1;
            }
    }
    /* Growing caches take their next step first (nothing else changes when one cannot). */
    for (int s = 0; s < n_seg; s++)
        if (sw_kv_reserve(kvs[s], kvs[s]->len + fs[s].n, err, err_len) != 0)
            return -1;
    for (int s = 0; s < n_seg; s++)
        kvs[s]->fwd_plain = s_meta(kvs[s], &fs[s]);
    const size_t row_bytes = (size_t)hp->n_embd * sizeof(float);
    sw_dev_t *d0 = &m->devs[0], *dl = &m->devs[m->n_dev - 1];
    s_chunk_t ch;
    sw_buf_t *views[SW_BACKEND_MAX_DEVICES * SW_MODEL_MAX_PIECES * 4] = {0};
    int seg = 0, off = 0;
    while (seg < n_seg) {
        s_next_chunk(m, kvs, fs, n_seg, &seg, &off, &ch);
        const int n = ch.n, shared = ch.np > 1;
        sw_buf_t *x_out = NULL; // the rows of the last layer that are kept (s_drop_rows)
        const int32_t *tok[SW_MODEL_MAX_PIECES];
        for (int j = 0; j < ch.np; j++)
            tok[j] = sw_model_is_first(m) ? fs[ch.seg[j]].tokens + ch.off[j] : NULL;
        sw_backend_t *bad = NULL;
        if ((shared && s_make_views(m, ch.pc, ch.np, views, &bad) != 0) ||
            s_put_ctl(m, ch.pc, ch.np, n, sw_model_is_first(m) ? tok : NULL, &bad) != 0)
            goto fail;
        for (int j = 0; j < ch.np && !sw_model_is_first(m); j++) {
            bad = d0->be;
            if (d0->be->ops->upload(d0->be, d0->x, (size_t)ch.pc[j].row0 * row_bytes,
                                    fs[ch.seg[j]].hidden + (size_t)ch.off[j] * hp->n_embd,
                                    (size_t)ch.pc[j].n * row_bytes) != 0)
                goto fail;
        }
        /* the chunk's first row that wants logits (one piece; else unused) */
        const sw_forward_t *f0 = &fs[ch.seg[0]];
        int logit_row0 = f0->n - f0->n_logits - ch.off[0];
        logit_row0 = logit_row0 < 0 ? 0 : logit_row0 > n ? n : logit_row0;
        if (s_drop_rows(m, &ch, logit_row0, &x_out, &bad) != 0)
            goto fail;
        for (int i = 0; i < m->n_dev; i++) {
            sw_dev_t *d = &m->devs[i];
            s_step_t st = {.m = m,
                           .kv = ch.pc[0].kv,
                           .d = d,
                           .ctl = d->ctl,
                           .n = n,
                           .prompt_order = ch.prompt_order,
                           .tiled = ch.tiled,
                           .tiled_out = ch.tiled_logits,
                           .gemm_out = ch.gemm_logits,
                           .logit_row0 = logit_row0,
                           .out_row0 = d == dl ? ch.out_row0 : 0,
                           .x_out = d == dl ? x_out : NULL,
                           .embed = i == 0 && sw_model_is_first(m),
                           .final_norm = d == dl && sw_model_is_last(m),
                           .pieces = shared ? ch.pc : NULL,
                           .n_pieces = ch.np,
                           .views = shared ? views + (size_t)i * ch.np * 4 : NULL,
                           .tree = ch.pc[0].tree};
            bad = d->be;
            if (s_run_step(&st, i) != 0)
                goto fail;
            if (d != dl && sw_backend_copy(d->be, d->x, 0, m->devs[i + 1].be, m->devs[i + 1].x, 0,
                                           (size_t)n * row_bytes) != 0)
                goto fail;
        }
        sw_model_buf_free(dl->be, &x_out);
        if (shared)
            s_free_views(m, ch.np, views);
        if (sw_model_is_last(m)) {
            if (s_chunk_logits(m, fs, &ch, &bad) != 0)
                goto fail;
            continue;
        }
        for (int j = 0; j < ch.np; j++) {
            bad = dl->be;
            if (dl->be->ops->download(
                    dl->be, fs[ch.seg[j]].out_hidden + (size_t)ch.off[j] * hp->n_embd, dl->x,
                    (size_t)ch.pc[j].row0 * row_bytes, (size_t)ch.pc[j].n * row_bytes) != 0)
                goto fail;
        }
        continue;
    fail:
        sw_model_buf_free(dl->be, &x_out);
        if (shared)
            s_free_views(m, ch.np, views);
        return sw_model_fail(bad ? bad : d0->be, err, err_len);
    }
    for (int i = 0; i < m->n_dev; i++)
        if (m->devs[i].be->ops->sync && m->devs[i].be->ops->sync(m->devs[i].be) != 0)
            return sw_model_fail(m->devs[i].be, err, err_len);
    for (int s = 0; s < n_seg; s++) {
        kvs[s]->len += fs[s].n;
        sw_kv_relin(kvs[s]);
    }
    return 0;
}

int sw_model_forward(sw_model_t *m, sw_kv_t *kv, const sw_forward_t *f, char *err, size_t err_len)
{
    return sw_model_forward_batch(m, &kv, f, 1, err, err_len);
}

/* ---- greedy draft loop ------------------------------------------------------------------- */

typedef struct s_loop {
    sw_model_t *m;
    sw_kv_t *kv;
    int n_steps;
    int want_prob; // 1: the argmax steps also compute the top probability
} s_loop_t;

static int s_loop_record(void *ctx)
{
    const s_loop_t *lp = ctx;
    sw_model_t *m = lp->m;
    sw_dev_t *d = &m->devs[0];
    const sw_backend_ops_t *ops = d->be->ops;
    const sw_weight_t *out[1] = {&m->output};
    for (int i = 0; i < lp->n_steps; i++) {
        s_step_t st = {.m = m,
                       .kv = lp->kv,
                       .d = d,
                       .ctl = d->loop_step[i],
                       .n = 1,
                       .embed = 1,
                       .final_norm = 1};
        S_TRY(s_step_record(&st));
        S_TRY(ops->matmul(d->be, 1, out, NULL, d->xn, 0, 1, &d->logits, 0));
        /* The argmax is the next step's token (SW_CTL_POS + 1 in its block). */
        const int next = i + 1 < lp->n_steps;
        S_TRY(ops->argmax(d->be, d->logits, m->hp.n_vocab, next ? d->loop_ctl : NULL,
                          (size_t)(i + 1) * SW_CTL_LEN(1) + SW_CTL_POS + 1, d->loop_ids,
                          lp->want_prob ? d->loop_prob : NULL, (size_t)i));
    }
    return 0;
}

int sw_model_greedy_steps(sw_model_t *m, sw_kv_t *kv, int32_t tok, int n_steps, int32_t *out,
                          float *prob, char *err, size_t err_len)
{
    const sw_hparams_t *hp = &m->hp;
    if (!kv || kv->m != m || m->n_dev != 1 || !sw_model_is_first(m) || !sw_model_is_last(m)) {
        sw_errf(err, err_len, "model: greedy steps need the whole model on one device");
        return -1;
    }
    if (n_steps < 1 || n_steps > SW_MODEL_LOOP_MAX || (int64_t)kv->len + n_steps > kv->n_ctx) {
        sw_errf(err, err_len, "model: %d greedy steps do not fit (at most %d; %d of %d used)",
                n_steps, SW_MODEL_LOOP_MAX, kv->len, kv->n_ctx);
        return -1;
    }
    if (tok < 0 || tok >= hp->n_vocab) {
        sw_errf(err, err_len, "model: token id %d is outside the vocabulary (0..%d)", tok,
                hp->n_vocab - 1);
        return -1;
    }
    if (kv->lin != kv->len) {
        sw_errf(err, err_len, "model: greedy steps need a cache without a token tree part");
        return -1;
    }
    if (sw_kv_reserve(kv, kv->len + n_steps, err, err_len) != 0)
        return -1;
    sw_dev_t *d = &m->devs[0];
    sw_backend_t *be = d->be;
    int32_t *c = m->ctl_host;
    for (int i = 0; i < n_steps; i++) {
        int32_t *b = c + (size_t)i * SW_CTL_LEN(1);
        b[SW_CTL_N] = 1;
        b[SW_CTL_SLOT0] = kv->len + i;
        b[SW_CTL_POS] = kv->len + i;
        b[SW_CTL_POS + 1] = i == 0 ? tok : 0;
    }
    s_loop_t lp = {.m = m, .kv = kv, .n_steps = n_steps, .want_prob = prob != NULL};
    const uint64_t w[] = {(uint64_t)(uintptr_t)m, (uint64_t)kv->cap, (uint64_t)n_steps,
                          (uint64_t)lp.want_prob, 0x100b};
    if (be->ops->upload(be, d->loop_ctl, 0, c, (size_t)n_steps * SW_CTL_LEN(1) * sizeof *c) != 0 ||
        (be->ops->graph_run ? be->ops->graph_run(be, s_key(w, 5), s_loop_record, &lp)
                            : s_loop_record(&lp)) != 0 ||
        be->ops->download(be, out, d->loop_ids, 0, (size_t)n_steps * sizeof *out) != 0 ||
        (prob &&
         be->ops->download(be, prob, d->loop_prob, 0, (size_t)n_steps * sizeof *prob) != 0) ||
        (be->ops->sync && be->ops->sync(be) != 0))
        return sw_model_fail(be, err, err_len);
    /* A device's argmax gives -1 for NaN or infinite logits (the CPU's fails at once). */
    for (int i = 0; i < n_steps; i++)
        if (out[i] < 0) {
            sw_errf(err, err_len, "model: the logits of greedy step %d of %d are NaN or infinite",
                    i + 1, n_steps);
            return -1;
        }
    for (int i = 0; i < n_steps; i++) {
        kv->par[kv->len + i] = kv->len + i - 1;
        kv->pos[kv->len + i] = kv->len + i;
    }
    kv->len += n_steps;
    kv->lin = kv->len;
    return 0;
}
