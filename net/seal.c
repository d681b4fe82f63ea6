/*
 * seal.c - XChaCha20-Poly1305 sealing of peer-to-peer frames and the replay
 * windows (see seal.h for the layout and the rules).
 */
#include "seal.h"

#include "sw_limits.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Static_assert(SW_SEAL_PAYLOAD_OVERHEAD == SW_WIRE_SEAL_OVERHEAD &&
                   SW_SEAL_HDR_OVERHEAD == SW_WIRE_SEAL_HDR_OVERHEAD,
               "sw_limits.h sizes frames with the bytes sealing adds");

#define S_AAD_MAX (16 + 2 + 64 + 64 + 8 + 8 + 8 + 4) /* label, channel, kind, names, ids, time */
#define S_WINDOW 64                                  /* counters below the highest still accepted */
#define S_WIN_FIRST 64   /* windows allocated at first; doubled up to SW_SEAL_SENDERS_MAX */
#define S_SPENT_FIRST 64 /* spent records allocated at first; doubled up to SW_SEAL_SPENT_MAX */

/*
 * The replay window of one (sender name, sender session). Its messages carry
 * the sender's clock (time_ms): a window whose newest message is older than
 * SW_SEAL_MAX_AGE_MS can go, since any replay of its messages is refused for
 * age; a younger one goes only for another window of the same sender key
 * (which can only reopen that key's own messages, which it could resend).
 */
typedef struct s_window {
    char sender[64];                  /* sender peer name */
    char key[SW_SEAL_KEY_FP_MAX + 1]; /* its key's fingerprint (as the relay said), "" unknown */
    uint64_t session;                 /* sender's session id */
    uint64_t top;                     /* highest counter accepted */
    uint64_t bits;                    /* bit i = counter top - i was accepted */
    uint64_t used;                    /* LRU stamp */
    int64_t last_ms;                  /* newest time_ms accepted (sender's clock, ms) */
} s_window_t;

/*
 * A window given up for a newer window of the same sender key while its
 * messages could still be accepted for their age: what it had accepted, kept
 * until that age passes, so a replay of them stays refused and its sender,
 * if it sends again, goes on from there.
 */
typedef struct s_spent {
    uint64_t sender;  /* keyed hash of the sender name (s_name_hash) */
    uint64_t session; /* sender's session id */
    uint64_t top;     /* highest counter accepted: this and everything below are refused */
    int64_t last_ms;  /* newest time_ms accepted; INT64_MIN once taken back */
} s_spent_t;

struct sw_seal {
    uint8_t *keys;                               /* (n_keys, 32) in sodium_malloc'd memory */
    int n_keys;                                  /* 1..SW_CLUSTER_KEYS_MAX */
    uint8_t key_id[SW_CLUSTER_KEYS_MAX][4];      /* BLAKE2b(key, keyed "sw-kid-"|channel)[0..4) */
    uint64_t session;                            /* own sender session (random) */
    uint64_t counter;                            /* own last message counter */
    s_window_t *win;                             /* (cap_win) replay windows */
    int n_win;                                   /* windows in use */
    int cap_win;                                 /* windows allocated (<= SW_SEAL_SENDERS_MAX) */
    uint64_t clock;                              /* LRU clock */
    s_spent_t *spent;                            /* (cap_spent) windows given up while live */
    int n_spent;                                 /* records in use */
    int cap_spent;                               /* records allocated (<= SW_SEAL_SPENT_MAX) */
    uint8_t name_key[crypto_shorthash_KEYBYTES]; /* s_name_hash's key (random) */
    int64_t skew_ms;                             /* added to the own clock (tests) */
    int64_t arrived_ms;                          /* sw_seal_arrived's last time (0 = never) */
    char channel;                                /* SW_SEAL_CLUSTER or SW_SEAL_ACCESS */
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
    s->cap_win = S_WIN_FIRST;
    s->win = calloc((size_t)s->cap_win, sizeof *s->win);
    s->cap_spent = S_SPENT_FIRST;
    s->spent = calloc((size_t)s->cap_spent, sizeof *s->spent);
    if (!s->keys || !s->win || !s->spent) {
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
    crypto_shorthash_keygen(s->name_key);
    do
        randombytes_buf(&s->session, sizeof s->session);
    while (s->session == 0);
    return s;
}

/* Wall-clock milliseconds of s's clock. */
static int64_t s_now_ms(const sw_seal_t *s)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + s->skew_ms;
}

void sw_seal_set_skew(sw_seal_t *s, int64_t skew_ms)
{
    s->skew_ms = skew_ms;
}

void sw_seal_arrived(sw_seal_t *s)
{
    const int64_t now = s_now_ms(s);
    if (now > s->arrived_ms)
        s->arrived_ms = now; // never back: a window given up stays given up (see sw_seal_open)
}

void sw_seal_destroy(sw_seal_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    sw_seal_t *s = *self_p;
    if (s->keys)
        sodium_free(s->keys); /* zeroes it */
    free(s->win);
    free(s->spent);
    sodium_memzero(s, sizeof *s);
    free(s);
    *self_p = NULL;
}

/* Builds the AAD; returns its length. */
static size_t s_aad(uint8_t *aad, char channel, char kind, const char *src, const char *dst,
                    uint64_t session, uint64_t counter, int64_t time_ms, const uint8_t key_id[4])
{
    size_t n = 0;
    memcpy(aad, "shardwire-seal-3", 16);
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
    s_put64(aad + n, (uint64_t)time_ms);
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
    const int64_t time_ms = s_now_ms(s);
    if (zmq_msg_init_size(hdr_out, SW_SEAL_HDR_OVERHEAD + hdr_len) != 0)
        return SW_SEAL_ENOMEM;
    uint8_t *h = zmq_msg_data(hdr_out);
    h[0] = SW_SEAL_MAGIC0;
    h[1] = SW_SEAL_MAGIC1;
    memcpy(h + 2, s->key_id[0], 4);
    s_put64(h + 6, s->session);
    s_put64(h + 14, counter);
    s_put64(h + 22, (uint64_t)time_ms);
    uint8_t *nonce = h + 30;
    randombytes_buf(nonce, SW_SEAL_NONCE);
    size_t alen = s_aad(aad, s->channel, 'H', src, dst, s->session, counter, time_ms, s->key_id[0]);
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
    alen = s_aad(aad, s->channel, 'P', src, dst, s->session, counter, time_ms, s->key_id[0]);
    crypto_aead_xchacha20poly1305_ietf_encrypt(p + SW_SEAL_NONCE, &clen, payload, payload_len, aad,
                                               alen, NULL, p, key);
    return SW_SEAL_OK;
}

/* SipHash of the sender name as a window keeps it (63 bytes at most), keyed per process. */
static uint64_t s_name_hash(const sw_seal_t *s, const char *sender)
{
    uint8_t h[crypto_shorthash_BYTES];
    crypto_shorthash(h, (const uint8_t *)sender, strnlen(sender, 63), s->name_key);
    return s_get64(h);
}

/* The spent record of (sender, session) whose messages can still be accepted for age: its
 * index, or -1. */
static int s_spent_find(const sw_seal_t *s, uint64_t sender, uint64_t session, int64_t now)
{
    for (int i = 0; i < s->n_spent; i++) {
        const s_spent_t *r = &s->spent[i];
        if (r->session == session && r->sender == sender && r->last_ms >= now - SW_SEAL_MAX_AGE_MS)
            return i;
    }
    return -1;
}

/* Keeps what live window w accepted before it is given up: 0, or -1 when every record is
 * live and SW_SEAL_SPENT_MAX are kept (w must then stay). */
static int s_spend(sw_seal_t *s, const s_window_t *w, int64_t now)
{
    s_spent_t *r = NULL;
    for (int i = 0; i < s->n_spent && !r; i++)
        if (s->spent[i].last_ms < now - SW_SEAL_MAX_AGE_MS)
            r = &s->spent[i];
    if (!r && s->n_spent == s->cap_spent && s->cap_spent < SW_SEAL_SPENT_MAX) {
        int cap = s->cap_spent * 2 < SW_SEAL_SPENT_MAX ? s->cap_spent * 2 : SW_SEAL_SPENT_MAX;
        s_spent_t *grown = realloc(s->spent, (size_t)cap * sizeof *grown);
        if (grown) {
            s->spent = grown;
            s->cap_spent = cap;
        }
    }
    if (!r && s->n_spent < s->cap_spent)
        r = &s->spent[s->n_spent++];
    if (!r)
        return -1;
    *r = (s_spent_t){s_name_hash(s, w->sender), w->session, w->top, w->last_ms};
    return 0;
}

/*
 * A free or reusable entry for a new window of sender key `key`: the key's
 * own least recently used window when it holds SW_SEAL_SESSIONS_PER_KEY;
 * else a window whose messages are all too old to be accepted again (its
 * newest older than SW_SEAL_MAX_AGE_MS); else a new entry; else, the table
 * full of live windows, the key's own least recently used one. A live window
 * given up leaves a spent record (s_spend). NULL when none can be had.
 */
static s_window_t *s_entry(sw_seal_t *s, const char *key, int64_t now)
{
    s_window_t *stale = NULL, *mine = NULL;
    int n_mine = 0;
    for (int i = 0; i < s->n_win; i++) {
        s_window_t *w = &s->win[i];
        if (w->last_ms < now - SW_SEAL_MAX_AGE_MS && (!stale || w->used < stale->used))
            stale = w;
        if (strcmp(w->key, key) == 0) {
            n_mine++;
            if (!mine || w->used < mine->used)
                mine = w;
        }
    }
    if (n_mine < SW_SEAL_SESSIONS_PER_KEY) {
        if (stale)
            return stale;
        if (s->n_win == s->cap_win && s->cap_win < SW_SEAL_SENDERS_MAX) {
            int cap = s->cap_win * 2 < SW_SEAL_SENDERS_MAX ? s->cap_win * 2 : SW_SEAL_SENDERS_MAX;
            s_window_t *grown = realloc(s->win, (size_t)cap * sizeof *grown);
            if (grown) {
                s->win = grown;
                s->cap_win = cap;
            }
        }
        if (s->n_win < s->cap_win)
            return &s->win[s->n_win++];
    }
    if (!mine || (mine->last_ms >= now - SW_SEAL_MAX_AGE_MS && s_spend(s, mine, now) != 0))
        return NULL;
    return mine;
}

/*
 * The window of (sender, session). For a new one (sender key `key`), an
 * entry from s_entry, set up (*fresh = 1: the first message's counter is
 * new), or, when the session's window was given up while live, set up from
 * its spent record (*fresh = 0: everything up to the record's top is
 * refused). NULL when no entry can be had: the new session is refused.
 */
static s_window_t *s_window(sw_seal_t *s, const char *sender, const char *key, uint64_t session,
                            int64_t now, int *fresh)
{
    *fresh = 0;
    for (int i = 0; i < s->n_win; i++) {
        s_window_t *w = &s->win[i];
        if (w->session == session && strcmp(w->sender, sender) == 0)
            return w;
    }
    const int spent = s_spent_find(s, s_name_hash(s, sender), session, now);
    s_spent_t was = spent >= 0 ? s->spent[spent] : (s_spent_t){0};
    if (spent >= 0)
        s->spent[spent].last_ms = INT64_MIN; /* taken back (before s_entry can spend into it) */
    s_window_t *w = s_entry(s, key, now);
    if (!w) {
        if (spent >= 0)
            s->spent[spent] = was;
        return NULL;
    }
    memset(w, 0, sizeof *w);
    snprintf(w->sender, sizeof w->sender, "%s", sender);
    snprintf(w->key, sizeof w->key, "%s", key);
    w->session = session;
    if (spent >= 0) {
        w->top = was.top;
        w->bits = ~(uint64_t)0;
        w->last_ms = was.last_ms;
    } else {
        *fresh = 1;
    }
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

int sw_seal_open(sw_seal_t *s, const char *src, const char *src_key, const char *dst,
                 const void *hdr, size_t hdr_len, zmq_msg_t *payload, uint8_t **hdr_plain,
                 size_t *hdr_plain_len)
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
    const int64_t time_ms = (int64_t)s_get64(h + 22), now = s_now_ms(s);
    uint8_t aad[S_AAD_MAX];
    size_t plen = hdr_len - SW_SEAL_HDR_OVERHEAD;
    uint8_t *plain = malloc(plen ? plen : 1);
    if (!plain)
        return SW_SEAL_ENOMEM;
    size_t alen = s_aad(aad, s->channel, 'H', src, dst, session, counter, time_ms, h + 2);
    unsigned long long got = 0;
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(plain, &got, NULL, h + SW_SEAL_HDR_PREFIX,
                                                   hdr_len - SW_SEAL_HDR_PREFIX, aad, alen, h + 30,
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
        alen = s_aad(aad, s->channel, 'P', src, dst, session, counter, time_ms, h + 2);
        if (crypto_aead_xchacha20poly1305_ietf_decrypt(
                zmq_msg_data(&clear), &got, NULL, p + SW_SEAL_NONCE,
                zmq_msg_size(payload) - SW_SEAL_NONCE, aad, alen, p, key) != 0) {
            zmq_msg_close(&clear);
            free(plain);
            return SW_SEAL_EAUTH;
        }
    }
    /* A message's age is judged when it reached this peer, not when its owner got round to
     * reading it: whatever is read after the receive queue was last seen empty (arrived_ms)
     * reached us after that, so a message that waited in our own queue while this process
     * computed is not taken for a replay (issue 33: a slow tail dropped a prompt chunk that
     * way, and the next chunk found a hole). The same time gives windows up, so a window is
     * forgotten only once every replay of it is refused for age. */
    const int64_t at = s->arrived_ms && s->arrived_ms < now ? s->arrived_ms : now;
    int rc = SW_SEAL_OK, fresh = 0;
    s_window_t *w = NULL;
    if (time_ms < at - SW_SEAL_MAX_AGE_MS || time_ms > now + SW_SEAL_MAX_AGE_MS)
        rc = SW_SEAL_ESTALE; /* a replay of an old message, or clocks far apart */
    else if (!(w = s_window(s, src, src_key ? src_key : "", session, at, &fresh)))
        rc = SW_SEAL_EBUSY;
    else if (!fresh && !s_fresh(w, counter))
        rc = SW_SEAL_EREPLAY;
    if (rc != SW_SEAL_OK) {
        if (have_clear)
            zmq_msg_close(&clear);
        free(plain);
        return rc;
    }
    w->used = ++s->clock;
    if (time_ms > w->last_ms)
        w->last_ms = time_ms;
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
    case SW_SEAL_ESTALE:
        return "sent more than " SW_SEAL_STR(
            SW_SEAL_MAX_AGE_MS) " ms ago or ahead (a replay, or "
                                "the two machines' clocks are that far apart: run NTP)";
    case SW_SEAL_EBUSY:
        return "a new sender session, but no replay window is free (" SW_SEAL_STR(
            SW_SEAL_SENDERS_MAX) " sessions of other keys, or " SW_SEAL_STR(SW_SEAL_SPENT_MAX) " "
                                                                                               "giv"
                                                                                               "en "
                                                                                               "up "
                                                                                               "for"
                                                                                               " ne"
                                                                                               "wer"
                                                                                               " se"
                                                                                               "ssi"
                                                                                               "ons"
                                                                                               " of"
                                                                                               " th"
                                                                                               "eir"
                                                                                               " ow"
                                                                                               "n "
                                                                                               "key"
                                                                                               ", "
                                                                                               "sen"
                                                                                               "t "
                                                                                               "her"
                                                                                               "e "
                                                                                               "wit"
                                                                                               "hin"
                                                                                               " " SW_SEAL_STR(
                                                                                                   SW_SEAL_MAX_AGE_MS) " ms)";
    default:
        return "unknown";
    }
}
