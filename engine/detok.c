/*
 * detok.c - the streaming detokenizer (tokenizer.h, sw_detok_*): token ids in,
 * text out, holding back the bytes of a UTF-8 character that is not complete
 * yet and SentencePiece's leading space.
 */
#include <string.h>

#include "tokenizer_impl.h"
#include "unicode.h"

struct sw_detok {
    const sw_tokenizer_t *t; // borrowed
    int render_special;      // emit control/unknown token text
    int strip_space;         // SPM: drop one leading space of the next text piece
    unsigned char hold[4];   // start of a UTF-8 sequence still missing bytes
    size_t n_hold;           // bytes in hold (0..3)
    char *out;               // output of the last call
    size_t cap_out;          // allocated bytes of out
};

sw_detok_t *sw_detok_new(const sw_tokenizer_t *t, int render_special)
{
    sw_detok_t *d = calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    d->t = t;
    d->render_special = render_special;
    d->strip_space = t->model == TOK_MODEL_SPM && t->add_space_prefix;
    return d;
}

void sw_detok_free(sw_detok_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free((*self_p)->out);
    free(*self_p);
    *self_p = NULL;
}

/* Whether s[0..n) (n >= 1) is the start of a valid UTF-8 sequence that more
 * bytes could still complete. */
static int s_utf8_incomplete(const unsigned char *s, size_t n)
{
    size_t need = sw_utf8_seq_len(s[0]);
    if (need == 1 || n >= need)
        return 0;
    if (n >= 2) {
        unsigned char lo = 0x80, hi = 0xBF;
        if (s[0] == 0xE0)
            lo = 0xA0;
        else if (s[0] == 0xED)
            hi = 0x9F;
        else if (s[0] == 0xF0)
            lo = 0x90;
        else if (s[0] == 0xF4)
            hi = 0x8F;
        if (s[1] < lo || s[1] > hi)
            return 0;
    }
    for (size_t i = 2; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return 1;
}

/* Appends hold + piece to d->out as valid UTF-8, keeping an incomplete tail in
 * hold unless final. */
static int s_detok_emit(sw_detok_t *d, const char *piece, size_t n, int final, size_t *out_len)
{
    size_t total = d->n_hold + n;
    /* Every input byte yields at most 3 output bytes (U+FFFD). */
    if (total > (SIZE_MAX - 1) / 3 ||
        tok_reserve((void **)&d->out, &d->cap_out, 3 * total + 1, 1) != 0)
        return -1;
    unsigned char *in = malloc(total ? total : 1);
    if (!in)
        return -1;
    memcpy(in, d->hold, d->n_hold);
    if (n)
        memcpy(in + d->n_hold, piece, n);
    d->n_hold = 0;
    size_t o = 0;
    for (size_t i = 0; i < total;) {
        size_t k;
        uint32_t cp = sw_utf8_decode((const char *)in + i, total - i, &k);
        if (cp == SW_UNICODE_REPLACEMENT && k == 1) {
            if (!final && s_utf8_incomplete(in + i, total - i)) {
                memcpy(d->hold, in + i, total - i);
                d->n_hold = total - i;
                break;
            }
            o += sw_utf8_encode(SW_UNICODE_REPLACEMENT, d->out + o);
            i++;
            continue;
        }
        memcpy(d->out + o, in + i, k);
        o += k;
        i += k;
    }
    free(in);
    *out_len = o;
    return 0;
}

int sw_detok_push(sw_detok_t *d, int32_t id, const char **text, size_t *len)
{
    const sw_tokenizer_t *t = d->t;
    *text = "";
    *len = 0;
    if (id < 0 || id >= t->n_vocab)
        return -1;
    int type = t->type[id];
    if (type == SW_TOKEN_CONTROL || type == SW_TOKEN_UNKNOWN) {
        /* A special token ends any pending character first. */
        if (!tok_hidden(t, id, d->render_special)) {
            size_t n = (size_t)(t->piece_off[id + 1] - t->piece_off[id]);
            if (s_detok_emit(d, t->piece + t->piece_off[id], n, 1, len) != 0)
                return -1;
            *text = d->out;
        }
        d->strip_space = t->model == TOK_MODEL_SPM && t->add_space_prefix;
        return 0;
    }
    const char *p = t->piece + t->piece_off[id];
    size_t n = (size_t)(t->piece_off[id + 1] - t->piece_off[id]);
    if (d->strip_space && n > 0) {
        if (p[0] == ' ') {
            p++;
            n--;
        }
        d->strip_space = 0;
    }
    if (s_detok_emit(d, p, n, 0, len) != 0)
        return -1;
    *text = d->out;
    return 0;
}

int sw_detok_flush(sw_detok_t *d, const char **text, size_t *len)
{
    *text = "";
    *len = 0;
    if (s_detok_emit(d, NULL, 0, 1, len) != 0)
        return -1;
    *text = d->out;
    d->strip_space = d->t->model == TOK_MODEL_SPM && d->t->add_space_prefix;
    return 0;
}
