/*
 * seal.c - XChaCha20-Poly1305 sealing of peer-to-peer frames and the replay
 * windows (see seal.h for the layout and the rules).
 */
#include "seal.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#define S_AAD_MAX (16 + 2 + 64 + 64 + 8 + 8 + 4) /* label, channel, kind, 2 names + NULs, ids */
#define S_WINDOW 64                              /* counters below the highest still accepted */

typedef struct s_window {
    char sender[64];  /* sender peer name */
    uint64_t session; /* sender's session id */
    uint64_t top;     /* highest counter accepted */
    uint64_t bits;    /* bit i = counter top - i was accepted */
    uint64_t used;    /* LRU stamp */
} s_window_t;

struct sw_seal {
    uint8_t *keys;                          /* (n_keys, 32) in sodium_malloc'd memory */
    int n_keys;                             /* 1..SW_CLUSTER_KEYS_MAX */
    uint8_t key_id[SW_CLUSTER_KEYS_MAX][4]; /* BLAKE2b("sw-kid", key)[0..4) */
    uint64_t session;                       /* own sender session (random) */
    uint64_t counter;                       /* own last message counter */
    s_window_t *win;                        /* (SW_SEAL_SENDERS_MAX) replay windows */
    int n_win;                              /* windows in use */
    uint64_t clock;                         /* LRU clock */
    char channel;                           /* SW_SEAL_CLUSTER or SW_SEAL_ACCESS */
};

static void s_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t s_get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int sw_seal_is_sealed(const void *frame, size_t len)
{
    const uint8_t *b = frame;
    return len >= 2 && b[0] == SW_SEAL_MAGIC0 && b[1] == SW_SEAL_MAGIC1;
}

sw_seal_t *sw_seal_new(const uint8_t keys[][SW_CLUSTER_KEY_BYTES], int n, char channel)
{
    if (n < 1 || n > SW_CLUSTER_KEYS_MAX ||
        (channel != SW_SEAL_CLUSTER && channel != SW_SEAL_ACCESS) || sodium_init() < 0)
        return NULL;
    sw_seal_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->keys = sodium_malloc((size_t)n * SW_CLUSTER_KEY_BYTES);
    s->win = calloc(SW_SEAL_SENDERS_MAX, sizeof *s->win);
    if (!s->keys || !s->win) {
        sw_seal_destroy(&s);
        return NULL;
    }
    s->n_keys = n;
    s->channel = channel;
    const uint8_t label[8] = {'s', 'w', '-', 'k', 'i', 'd', '-', (uint8_t)channel};
    for (int i = 0; i < n; i++) {
        memcpy(s->keys + (size_t)i * SW_CLUSTER_KEY_BYTES, keys[i], SW_CLUSTER_KEY_BYTES);
        uint8_t h[16];
        crypto_generichash(h, sizeof h, keys[i], SW_CLUSTER_KEY_BYTES, label, sizeof label);
        memcpy(s->key_id[i], h, 4);
    }
    sodium_mprotect_readonly(s->keys);
    do
        randombytes_buf(&s->session, sizeof s->session);
    while (s->session == 0);
    return s;
}

void sw_seal_destroy(sw_seal_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    sw_seal_t *s = *self_p;
    if (s->keys)
        sodium_free(s->keys); /* zeroes it */
    free(s->win);
    sodium_memzero(s, sizeof *s);
    free(s);
    *self_p = NULL;
}

/* Builds the AAD; returns its length. */
static size_t s_aad(uint8_t *aad, char channel, char kind, const char *src, const char *dst,
                    uint64_t session, uint64_t counter, const uint8_t key_id[4])
{
    size_t n = 0;
    memcpy(aad, "shardwire-seal-2", 16);
    n = 16;
    aad[n++] = (uint8_t)channel;
    aad[n++] = (uint8_t)kind;
    size_t ls = strnlen(src, 63), ld = strnlen(dst, 63);
    memcpy(aad + n, src, ls);
    n += ls;
    aad[n++] = 0;
    memcpy(aad + n, dst, ld);
    n += ld;
    aad[n++] = 0;
    s_put64(aad + n, session);
    n += 8;
    s_put64(aad + n, counter);
    n += 8;
    memcpy(aad + n, key_id, 4);
    return n + 4;
}

int sw_seal_message(sw_seal_t *s, const char *src, const char *dst, const void *hdr, size_t hdr_len,
                    const void *payload, size_t payload_len, int has_payload, zmq_msg_t *hdr_out,
                    zmq_msg_t *payload_out)
{
    uint8_t aad[S_AAD_MAX];
    const uint8_t *key = s->keys;
    uint64_t counter = ++s->counter;
    if (zmq_msg_init_size(hdr_out, SW_SEAL_HDR_OVERHEAD + hdr_len) != 0)
        return SW_SEAL_ENOMEM;
    uint8_t *h = zmq_msg_data(hdr_out);
    h[0] = SW_SEAL_MAGIC0;
    h[1] = SW_SEAL_MAGIC1;
    memcpy(h + 2, s->key_id[0], 4);
    s_put64(h + 6, s->session);
    s_put64(h + 14, counter);
    uint8_t *nonce = h + 22;
    randombytes_buf(nonce, SW_SEAL_NONCE);
    size_t alen = s_aad(aad, s->channel, 'H', src, dst, s->session, counter, s->key_id[0]);
    unsigned long long clen = 0;
    crypto_aead_xchacha20poly1305_ietf_encrypt(h + SW_SEAL_HDR_PREFIX, &clen, hdr, hdr_len, aad,
                                               alen, NULL, nonce, key);
    if (!has_payload)
        return SW_SEAL_OK;
    if (zmq_msg_init_size(payload_out, SW_SEAL_PAYLOAD_OVERHEAD + payload_len) != 0) {
        zmq_msg_close(hdr_out);
        return SW_SEAL_ENOMEM;
    }
    uint8_t *p = zmq_msg_data(payload_out);
    randombytes_buf(p, SW_SEAL_NONCE);
    alen = s_aad(aad, s->channel, 'P', src, dst, s->session, counter, s->key_id[0]);
    crypto_aead_xchacha20poly1305_ietf_encrypt(p + SW_SEAL_NONCE, &clen, payload, payload_len, aad,
                                               alen, NULL, p, key);
    return SW_SEAL_OK;
}

/* The window of (sender, session), created (LRU-evicting) when absent. */
static s_window_t *s_window(sw_seal_t *s, const char *sender, uint64_t session)
{
    s_window_t *lru = NULL;
    for (int i = 0; i < s->n_win; i++) {
        s_window_t *w = &s->win[i];
        if (w->session == session && strcmp(w->sender, sender) == 0)
            return w;
        if (!lru || w->used < lru->used)
            lru = w;
    }
    s_window_t *w = s->n_win < SW_SEAL_SENDERS_MAX ? &s->win[s->n_win++] : lru;
    memset(w, 0, sizeof *w);
    snprintf(w->sender, sizeof w->sender, "%s", sender);
    w->session = session;
    return w;
}

/* 1 when counter is new for w (does not change w). */
static int s_fresh(const s_window_t *w, uint64_t counter)
{
    if (counter > w->top)
        return 1;
    uint64_t back = w->top - counter;
    if (back >= S_WINDOW)
        return 0;
    return !((w->bits >> back) & 1u);
}

static void s_accept(s_window_t *w, uint64_t counter)
{
    if (counter > w->top) {
        uint64_t shift = counter - w->top;
        w->bits = shift >= S_WINDOW ? 0 : w->bits << shift;
        w->bits |= 1u;
        w->top = counter;
    } else {
        w->bits |= (uint64_t)1 << (w->top - counter);
    }
}

int sw_seal_has_key(const sw_seal_t *s, const void *hdr, size_t hdr_len)
{
    const uint8_t *h = hdr;
    if (!s || !sw_seal_is_sealed(hdr, hdr_len) || hdr_len < SW_SEAL_HDR_OVERHEAD)
        return 0;
    for (int i = 0; i < s->n_keys; i++)
        if (memcmp(h + 2, s->key_id[i], 4) == 0)
            return 1;
    return 0;
}

int sw_seal_open(sw_seal_t *s, const char *src, const char *dst, const void *hdr, size_t hdr_len,
                 zmq_msg_t *payload, uint8_t **hdr_plain, size_t *hdr_plain_len)
{
    *hdr_plain = NULL;
    *hdr_plain_len = 0;
    const uint8_t *h = hdr;
    if (!sw_seal_is_sealed(hdr, hdr_len) || hdr_len < SW_SEAL_HDR_OVERHEAD)
        return SW_SEAL_EFORMAT;
    if (payload && zmq_msg_size(payload) < SW_SEAL_PAYLOAD_OVERHEAD)
        return SW_SEAL_EFORMAT;
    int k = -1;
    for (int i = 0; i < s->n_keys; i++)
        if (memcmp(h + 2, s->key_id[i], 4) == 0)
            k = i;
    if (k < 0)
        return SW_SEAL_EAUTH;
    const uint8_t *key = s->keys + (size_t)k * SW_CLUSTER_KEY_BYTES;
    uint64_t session = s_get64(h + 6), counter = s_get64(h + 14);
    uint8_t aad[S_AAD_MAX];
    size_t plen = hdr_len - SW_SEAL_HDR_OVERHEAD;
    uint8_t *plain = malloc(plen ? plen : 1);
    if (!plain)
        return SW_SEAL_ENOMEM;
    size_t alen = s_aad(aad, s->channel, 'H', src, dst, session, counter, h + 2);
    unsigned long long got = 0;
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(plain, &got, NULL, h + SW_SEAL_HDR_PREFIX,
                                                   hdr_len - SW_SEAL_HDR_PREFIX, aad, alen, h + 22,
                                                   key) != 0) {
        free(plain);
        return SW_SEAL_EAUTH;
    }
    zmq_msg_t clear;
    int have_clear = 0;
    if (payload) {
        size_t cl = zmq_msg_size(payload) - SW_SEAL_PAYLOAD_OVERHEAD;
        const uint8_t *p = zmq_msg_data(payload);
        if (zmq_msg_init_size(&clear, cl) != 0) {
            free(plain);
            return SW_SEAL_ENOMEM;
        }
        have_clear = 1;
        alen = s_aad(aad, s->channel, 'P', src, dst, session, counter, h + 2);
        if (crypto_aead_xchacha20poly1305_ietf_decrypt(
                zmq_msg_data(&clear), &got, NULL, p + SW_SEAL_NONCE,
                zmq_msg_size(payload) - SW_SEAL_NONCE, aad, alen, p, key) != 0) {
            zmq_msg_close(&clear);
            free(plain);
            return SW_SEAL_EAUTH;
        }
    }
    s_window_t *w = s_window(s, src, session);
    w->used = ++s->clock;
    if (!s_fresh(w, counter)) {
        if (have_clear)
            zmq_msg_close(&clear);
        free(plain);
        return SW_SEAL_EREPLAY;
    }
    s_accept(w, counter);
    if (have_clear) {
        zmq_msg_close(payload);
        zmq_msg_init(payload);
        zmq_msg_move(payload, &clear);
    }
    *hdr_plain = plain;
    *hdr_plain_len = plen;
    return SW_SEAL_OK;
}

const char *sw_seal_strerror(int rc)
{
    switch (rc) {
    case SW_SEAL_OK:
        return "ok";
    case SW_SEAL_EFORMAT:
        return "not a well-formed sealed frame";
    case SW_SEAL_EAUTH:
        return "authentication failed (tampered, another cluster key, or another sender/receiver)";
    case SW_SEAL_EREPLAY:
        return "replayed or too old (message counter already seen)";
    case SW_SEAL_ENOMEM:
        return "out of memory";
    default:
        return "unknown";
    }
}
