/*
 * test_seal.c - end-to-end sealing (net/seal.c) and the key-file parsers
 * (net/keys.c) without sockets: round trips, every byte of a sealed frame
 * tampered, frames moved to another sender or receiver, replays inside and
 * outside the window, out-of-order delivery, ages judged when a frame reached
 * the receiver, not when it read it (issue 33), key rotation with two keys,
 * allow-list syntax (Z85 keys contain '#'), and the cost of sealing a decode
 * round's hidden states.
 */
#include "keys.h"
#include "seal.h"
#include "sw_test.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Seals hdr (+payload) from src to dst with `from`, opens it at `to`; returns the open rc. */
static int s_trip(sw_seal_t *from, sw_seal_t *to, const char *src, const char *dst,
                  const char *open_src, const char *open_dst, const char *hdr, const void *pl,
                  size_t pl_len, int tamper_at, int tamper_payload_at)
{
    zmq_msg_t h, p;
    if (sw_seal_message(from, src, dst, hdr, strlen(hdr), pl, pl_len, pl != NULL, &h, &p) != 0)
        return 99;
    if (tamper_at >= 0)
        ((uint8_t *)zmq_msg_data(&h))[tamper_at] ^= 0x40;
    if (pl && tamper_payload_at >= 0)
        ((uint8_t *)zmq_msg_data(&p))[tamper_payload_at] ^= 0x01;
    uint8_t *plain = NULL;
    size_t plain_len = 0;
    int rc = sw_seal_open(to, open_src, NULL, open_dst, zmq_msg_data(&h), zmq_msg_size(&h),
                          pl ? &p : NULL, &plain, &plain_len);
    if (rc == SW_SEAL_OK) {
        SW_CHECK_INT(plain_len, strlen(hdr));
        SW_CHECK(memcmp(plain, hdr, plain_len) == 0);
        if (pl) {
            SW_CHECK_INT(zmq_msg_size(&p), pl_len);
            SW_CHECK(memcmp(zmq_msg_data(&p), pl, pl_len) == 0);
        }
    }
    free(plain);
    zmq_msg_close(&h);
    if (pl)
        zmq_msg_close(&p);
    return rc;
}

static void s_test_roundtrip_and_tamper(const uint8_t k[][32])
{
    sw_seal_t *a = sw_seal_new(k, 1, SW_SEAL_CLUSTER), *b = sw_seal_new(k, 1, SW_SEAL_CLUSTER);
    const char *hdr = "an envelope";
    uint8_t pl[300];
    for (size_t i = 0; i < sizeof pl; i++)
        pl[i] = (uint8_t)i;
    SW_CHECK_INT(s_trip(a, b, "head", "tail", "head", "tail", hdr, pl, sizeof pl, -1, -1), 0);
    SW_CHECK_INT(s_trip(a, b, "head", "tail", "head", "tail", hdr, NULL, 0, -1, -1), 0);
    /* every header byte, tampered, is refused (magic -> format, the rest -> auth) */
    int total = SW_SEAL_HDR_OVERHEAD + (int)strlen(hdr), refused = 0;
    for (int i = 0; i < total; i++)
        refused += s_trip(a, b, "head", "tail", "head", "tail", hdr, pl, sizeof pl, i, -1) != 0;
    SW_CHECK_INT(refused, total);
    refused = 0;
    for (int i = 0; i < (int)sizeof pl + SW_SEAL_PAYLOAD_OVERHEAD; i += 7)
        refused += s_trip(a, b, "head", "tail", "head", "tail", hdr, pl, sizeof pl, -1, i) ==
                   SW_SEAL_EAUTH;
    SW_CHECK_INT(refused, ((int)sizeof pl + SW_SEAL_PAYLOAD_OVERHEAD + 6) / 7);
    /* moved to another sender or receiver */
    SW_CHECK_INT(s_trip(a, b, "head", "tail", "mallory", "tail", hdr, pl, sizeof pl, -1, -1),
                 SW_SEAL_EAUTH);
    SW_CHECK_INT(s_trip(a, b, "head", "tail", "head", "mid", hdr, NULL, 0, -1, -1), SW_SEAL_EAUTH);
    /* a clear protobuf is not a sealed frame */
    uint8_t pb[4] = {0x08, 0x01, 0x52, 0x00};
    SW_CHECK(!sw_seal_is_sealed(pb, sizeof pb));
    sw_seal_destroy(&a);
    sw_seal_destroy(&b);
    SW_CHECK(a == NULL);
}

static void s_test_full(const uint8_t k[][32]);

static void s_test_replay(const uint8_t k[][32])
{
    sw_seal_t *a = sw_seal_new(k, 1, SW_SEAL_CLUSTER), *b = sw_seal_new(k, 1, SW_SEAL_CLUSTER);
    enum { N = 100 };
    zmq_msg_t h[N];
    for (int i = 0; i < N; i++) {
        zmq_msg_t p;
        SW_CHECK_INT(sw_seal_message(a, "head", "tail", "x", 1, NULL, 0, 0, &h[i], &p), 0);
    }
    uint8_t *plain;
    size_t pl;
#define OPEN(i)                                                                                    \
    sw_seal_open(b, "head", "alice", "tail", zmq_msg_data(&h[i]), zmq_msg_size(&h[i]), NULL,       \
                 &plain, &pl)
    /* out of order inside the window: fine, once each */
    int order[] = {5, 3, 4, 0, 1, 2, 70, 69, 40};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        SW_CHECK_INT(OPEN(order[i]), SW_SEAL_OK);
        free(plain);
    }
    SW_CHECK_INT(OPEN(3), SW_SEAL_EREPLAY);
    SW_CHECK_INT(OPEN(70), SW_SEAL_EREPLAY);
    SW_CHECK_INT(OPEN(5), SW_SEAL_EREPLAY); /* 70 - 5 >= 64: too old anyway */
    SW_CHECK_INT(OPEN(6), SW_SEAL_EREPLAY); /* never seen, but older than the window */
    SW_CHECK_INT(OPEN(41), SW_SEAL_OK);     /* never seen, inside the window */
    free(plain);
    SW_CHECK_INT(OPEN(99), SW_SEAL_OK);
    free(plain);
    SW_CHECK_INT(OPEN(99), SW_SEAL_EREPLAY);
    /* a restarted sender (new session) starts again from counter 1 */
    sw_seal_t *a2 = sw_seal_new(k, 1, SW_SEAL_CLUSTER);
    zmq_msg_t h2, p2;
    SW_CHECK_INT(sw_seal_message(a2, "head", "tail", "y", 1, NULL, 0, 0, &h2, &p2), 0);
    SW_CHECK_INT(sw_seal_open(b, "head", NULL, "tail", zmq_msg_data(&h2), zmq_msg_size(&h2), NULL,
                              &plain, &pl),
                 SW_SEAL_OK);
    free(plain);
    zmq_msg_close(&h2);
    /* issue 21, finding 8: sessions of another key never flush a window: 1,100 (and then
     * SW_SEAL_SESSIONS_PER_KEY more) fresh sessions of key "mallory", then the replay of an
     * earlier message of "head" (key "alice") is still refused; mallory's own oldest windows
     * went instead */
    for (int i = 0; i < 1100 + SW_SEAL_SESSIONS_PER_KEY; i++) {
        sw_seal_t *x = sw_seal_new(k, 1, SW_SEAL_CLUSTER);
        char name[32];
        snprintf(name, sizeof name, "peer%d", i);
        zmq_msg_t hx, px;
        SW_CHECK(sw_seal_message(x, name, "tail", "z", 1, NULL, 0, 0, &hx, &px) == 0);
        SW_CHECK(sw_seal_open(b, name, "mallory", "tail", zmq_msg_data(&hx), zmq_msg_size(&hx),
                              NULL, &plain, &pl) == SW_SEAL_OK);
        free(plain);
        zmq_msg_close(&hx);
        sw_seal_destroy(&x);
    }
    SW_CHECK_INT(OPEN(99), SW_SEAL_EREPLAY);
    SW_CHECK_INT(OPEN(98), SW_SEAL_OK); /* never seen, inside the window: the window is there */
    free(plain);
    /* a message sealed more than SW_SEAL_MAX_AGE_MS ago (or ahead): refused whatever the
     * windows say (the sender's clock is in the sealed header) */
    sw_seal_t *old = sw_seal_new(k, 1, SW_SEAL_CLUSTER);
    sw_seal_set_skew(old, -SW_SEAL_MAX_AGE_MS - 5000);
    zmq_msg_t ho, po;
    SW_CHECK_INT(sw_seal_message(old, "head", "tail", "o", 1, NULL, 0, 0, &ho, &po), 0);
    SW_CHECK_INT(sw_seal_open(b, "head", NULL, "tail", zmq_msg_data(&ho), zmq_msg_size(&ho), NULL,
                              &plain, &pl),
                 SW_SEAL_ESTALE);
    zmq_msg_close(&ho);
    sw_seal_set_skew(old, SW_SEAL_MAX_AGE_MS + 5000);
    SW_CHECK_INT(sw_seal_message(old, "head", "tail", "o", 1, NULL, 0, 0, &ho, &po), 0);
    SW_CHECK_INT(sw_seal_open(b, "head", NULL, "tail", zmq_msg_data(&ho), zmq_msg_size(&ho), NULL,
                              &plain, &pl),
                 SW_SEAL_ESTALE);
    zmq_msg_close(&ho);
    sw_seal_destroy(&old);
#undef OPEN
    for (int i = 0; i < N; i++)
        zmq_msg_close(&h[i]);
    sw_seal_destroy(&a);
    sw_seal_destroy(&a2);
    sw_seal_destroy(&b);
    s_test_full(k);
}

/* SW_SEAL_SENDERS_MAX live windows of many keys: a new session is refused (not one of them
 * given up); once they are older than SW_SEAL_MAX_AGE_MS, their entries are reused. */
static void s_test_full(const uint8_t k[][32])
{
    sw_seal_t *b = sw_seal_new(k, 1, SW_SEAL_CLUSTER);
    sw_seal_t *x = sw_seal_new(k, 1, SW_SEAL_CLUSTER);
    uint8_t *plain;
    size_t pl;
    int ok = 0;
    zmq_msg_t h0, p0;
    SW_CHECK_INT(sw_seal_message(x, "first", "tail", "z", 1, NULL, 0, 0, &h0, &p0), 0);
    /* distinct (sender name, session) pairs: one sealer, a name each */
    for (int i = 0; i < SW_SEAL_SENDERS_MAX; i++) {
        char name[32], key[32];
        snprintf(name, sizeof name, "p%d", i);
        snprintf(key, sizeof key, "key%d", i / SW_SEAL_SESSIONS_PER_KEY);
        zmq_msg_t hx, px;
        if (sw_seal_message(x, name, "tail", "z", 1, NULL, 0, 0, &hx, &px) != 0)
            continue;
        if (sw_seal_open(b, name, key, "tail", zmq_msg_data(&hx), zmq_msg_size(&hx), NULL, &plain,
                         &pl) == SW_SEAL_OK) {
            ok++;
            free(plain);
        }
        zmq_msg_close(&hx);
    }
    SW_CHECK_INT(ok, SW_SEAL_SENDERS_MAX);
    zmq_msg_t hn, pn;
    SW_CHECK_INT(sw_seal_message(x, "newcomer", "tail", "z", 1, NULL, 0, 0, &hn, &pn), 0);
    SW_CHECK_INT(sw_seal_open(b, "newcomer", "other", "tail", zmq_msg_data(&hn), zmq_msg_size(&hn),
                              NULL, &plain, &pl),
                 SW_SEAL_EBUSY);
    zmq_msg_close(&hn);
    /* later: every window is too old to matter, the newcomer gets one */
    sw_seal_set_skew(b, SW_SEAL_MAX_AGE_MS + 1000);
    sw_seal_set_skew(x, SW_SEAL_MAX_AGE_MS + 1000);
    SW_CHECK_INT(sw_seal_message(x, "newcomer", "tail", "z", 1, NULL, 0, 0, &hn, &pn), 0);
    SW_CHECK_INT(sw_seal_open(b, "newcomer", "other", "tail", zmq_msg_data(&hn), zmq_msg_size(&hn),
                              NULL, &plain, &pl),
                 SW_SEAL_OK);
    free(plain);
    zmq_msg_close(&hn);
    /* and the first message, replayed now, is refused for its age */
    SW_CHECK_INT(sw_seal_open(b, "first", "key0", "tail", zmq_msg_data(&h0), zmq_msg_size(&h0),
                              NULL, &plain, &pl),
                 SW_SEAL_ESTALE);
    zmq_msg_close(&h0);
    sw_seal_destroy(&x);
    sw_seal_destroy(&b);
}

/* Opens frame h (from "head" to "tail") at b: the rc. */
static int s_open_at(sw_seal_t *b, zmq_msg_t *h)
{
    uint8_t *plain = NULL;
    size_t pl = 0;
    const int rc = sw_seal_open(b, "head", "alice", "tail", zmq_msg_data(h), zmq_msg_size(h), NULL,
                                &plain, &pl);
    free(plain);
    return rc;
}

/* A fresh session (its own sealer) of sender `name`, key `key`, sends one message to b: rc. */
static int s_new_session(const uint8_t k[][32], sw_seal_t *b, const char *name, const char *key)
{
    sw_seal_t *x = sw_seal_new(k, 1, SW_SEAL_CLUSTER);
    zmq_msg_t h, p;
    int rc = 99;
    if (x && sw_seal_message(x, name, "tail", "n", 1, NULL, 0, 0, &h, &p) == 0) {
        uint8_t *plain = NULL;
        size_t pl = 0;
        rc = sw_seal_open(b, name, key, "tail", zmq_msg_data(&h), zmq_msg_size(&h), NULL, &plain,
                          &pl);
        free(plain);
        zmq_msg_close(&h);
    }
    sw_seal_destroy(&x);
    return rc;
}

/*
 * A window given up for newer sessions of its own key while its messages are young enough to
 * open (a key that runs more than SW_SEAL_SESSIONS_PER_KEY `shardwire run`s within
 * SW_SEAL_MAX_AGE_MS) does not reopen its replays: a malicious relay replaying them is
 * refused, and the sender itself goes on where it was. The records that remember such
 * windows are bounded (SW_SEAL_SPENT_MAX): beyond, a new session is refused, not a replay let
 * in, until the records are old enough to go.
 */
static void s_test_spent(const uint8_t k[][32])
{
    sw_seal_t *a = sw_seal_new(k, 1, SW_SEAL_CLUSTER), *b = sw_seal_new(k, 1, SW_SEAL_CLUSTER);
    zmq_msg_t h[4], p;
    for (int i = 0; i < 4; i++)
        SW_CHECK_INT(sw_seal_message(a, "head", "tail", "m", 1, NULL, 0, 0, &h[i], &p), 0);
    SW_CHECK_INT(s_open_at(b, &h[0]), SW_SEAL_OK);
    SW_CHECK_INT(s_open_at(b, &h[1]), SW_SEAL_OK);
    /* alice's later sessions (other processes under the same name) push "head"'s window out */
    int ok = 0;
    for (int i = 0; i < SW_SEAL_SESSIONS_PER_KEY + 8; i++)
        ok += s_new_session(k, b, "head", "alice") == SW_SEAL_OK;
    SW_CHECK_INT(ok, SW_SEAL_SESSIONS_PER_KEY + 8);
    SW_CHECK_INT(s_open_at(b, &h[0]), SW_SEAL_EREPLAY); /* the replays stay refused */
    SW_CHECK_INT(s_open_at(b, &h[1]), SW_SEAL_EREPLAY);
    SW_CHECK_INT(s_open_at(b, &h[3]), SW_SEAL_OK); /* the sender goes on */
    SW_CHECK_INT(s_open_at(b, &h[3]), SW_SEAL_EREPLAY);
    /* h[2] was never delivered and lies above the record's top: it opens, once */
    SW_CHECK_INT(s_open_at(b, &h[2]), SW_SEAL_OK);
    SW_CHECK_INT(s_open_at(b, &h[2]), SW_SEAL_EREPLAY);
    for (int i = 0; i < 4; i++)
        zmq_msg_close(&h[i]);
    sw_seal_destroy(&b);

    /* the bound: SW_SEAL_SPENT_MAX windows given up while live, then key "m"'s next session
     * is refused; another key still gets a window; later the records go and "m" gets one */
    b = sw_seal_new(k, 1, SW_SEAL_CLUSTER);
    ok = 0;
    for (int i = 0; i < SW_SEAL_SESSIONS_PER_KEY + SW_SEAL_SPENT_MAX; i++)
        ok += s_new_session(k, b, "m1", "m") == SW_SEAL_OK;
    SW_CHECK_INT(ok, SW_SEAL_SESSIONS_PER_KEY + SW_SEAL_SPENT_MAX);
    SW_CHECK_INT(s_new_session(k, b, "m1", "m"), SW_SEAL_EBUSY);
    SW_CHECK(strstr(sw_seal_strerror(SW_SEAL_EBUSY), "given up") != NULL);
    SW_CHECK_INT(s_new_session(k, b, "n1", "n"), SW_SEAL_OK);
    sw_seal_set_skew(b, SW_SEAL_MAX_AGE_MS + 1000);
    sw_seal_t *late = sw_seal_new(k, 1, SW_SEAL_CLUSTER);
    sw_seal_set_skew(late, SW_SEAL_MAX_AGE_MS + 1000);
    zmq_msg_t hl;
    SW_CHECK_INT(sw_seal_message(late, "m1", "tail", "l", 1, NULL, 0, 0, &hl, &p), 0);
    uint8_t *plain = NULL;
    size_t pl = 0;
    SW_CHECK_INT(
        sw_seal_open(b, "m1", "m", "tail", zmq_msg_data(&hl), zmq_msg_size(&hl), NULL, &plain, &pl),
        SW_SEAL_OK);
    free(plain);
    zmq_msg_close(&hl);
    sw_seal_destroy(&late);
    sw_seal_destroy(&a);
    sw_seal_destroy(&b);
}

/*
 * Ages are judged when a message reached the receiver (issue 33): a frame that waited in the
 * receiver's own queue while it computed for minutes opens, as long as it was younger than
 * SW_SEAL_MAX_AGE_MS when the queue was last seen empty (sw_seal_arrived); one that was
 * already too old then does not, and replays stay refused, also of a window that would have
 * been given up by the reading time.
 */
static void s_test_arrived(const uint8_t k[][32])
{
    sw_seal_t *a = sw_seal_new(k, 1, SW_SEAL_CLUSTER), *b = sw_seal_new(k, 1, SW_SEAL_CLUSTER);
    sw_seal_t *old = sw_seal_new(k, 1, SW_SEAL_CLUSTER);
    zmq_msg_t h[3], p, ho;
    for (int i = 0; i < 3; i++)
        SW_CHECK_INT(sw_seal_message(a, "head", "tail", "chunk", 5, NULL, 0, 0, &h[i], &p), 0);
    SW_CHECK_INT(s_open_at(b, &h[0]), SW_SEAL_OK); /* the first chunk, read at once */
    /* a frame sealed 10 s more than the limit before the queue was seen empty */
    sw_seal_set_skew(old, -SW_SEAL_MAX_AGE_MS - 10000);
    SW_CHECK_INT(sw_seal_message(old, "head", "tail", "o", 1, NULL, 0, 0, &ho, &p), 0);
    sw_seal_arrived(b); /* the queue is empty now; then the receiver computes ... */
    sw_seal_set_skew(b, SW_SEAL_MAX_AGE_MS + 30000); /* ... for 150 s before it reads again */
    SW_CHECK_INT(s_open_at(b, &h[1]), SW_SEAL_OK);   /* it waited in our queue: not a replay */
    SW_CHECK_INT(s_open_at(b, &h[1]), SW_SEAL_EREPLAY);
    SW_CHECK_INT(s_open_at(b, &h[0]), SW_SEAL_EREPLAY); /* the window was not given up */
    SW_CHECK_INT(s_open_at(b, &ho), SW_SEAL_ESTALE);    /* too old when it could have come */
    /* once the queue is seen empty again (150 s later), the same rule as before */
    sw_seal_arrived(b);
    SW_CHECK_INT(s_open_at(b, &h[2]), SW_SEAL_ESTALE);
    for (int i = 0; i < 3; i++)
        zmq_msg_close(&h[i]);
    zmq_msg_close(&ho);
    sw_seal_destroy(&old);
    sw_seal_destroy(&a);
    sw_seal_destroy(&b);
}

static void s_test_rotation(const uint8_t k[][32])
{
    /* k[0] = old, k[1] = new. During the rotation receivers hold both. */
    uint8_t newfirst[2][32], oldonly[1][32], newonly[1][32];
    memcpy(newfirst[0], k[1], 32);
    memcpy(newfirst[1], k[0], 32);
    memcpy(oldonly[0], k[0], 32);
    memcpy(newonly[0], k[1], 32);
    sw_seal_t *old = sw_seal_new(oldonly, 1, SW_SEAL_CLUSTER),
              *rot = sw_seal_new(newfirst, 2, SW_SEAL_CLUSTER),
              *fresh = sw_seal_new(newonly, 1, SW_SEAL_CLUSTER);
    SW_CHECK_INT(s_trip(old, rot, "a", "b", "a", "b", "h", NULL, 0, -1, -1), 0);   /* old -> both */
    SW_CHECK_INT(s_trip(rot, fresh, "a", "b", "a", "b", "h", NULL, 0, -1, -1), 0); /* new -> new */
    SW_CHECK_INT(s_trip(rot, old, "a", "b", "a", "b", "h", NULL, 0, -1, -1), SW_SEAL_EAUTH);
    SW_CHECK_INT(s_trip(old, fresh, "a", "b", "a", "b", "h", NULL, 0, -1, -1), SW_SEAL_EAUTH);
    sw_seal_destroy(&old);
    sw_seal_destroy(&rot);
    sw_seal_destroy(&fresh);
}

static void s_write(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    chmod(path, mode);
}

static void s_test_files(void)
{
    const char *dir = sw_test_tmpdir();
    char path[512], pub[41], sec[41], err[512];
    /* keys whose Z85 text has '#' in it (never first: a Z85 group's first digit is < 83) */
    uint8_t bin[32];
    char z[41];
    memset(bin, 0, sizeof bin);
    int found = 0;
    for (int tries = 0; tries < 100000 && !found; tries++) {
        randombytes_buf(bin, sizeof bin);
        zmq_z85_encode(z, bin, 32);
        found = strchr(z, '#') != NULL;
    }
    SW_CHECK(found);
    snprintf(path, sizeof path, "%s/allow.txt", dir);
    char text[1024];
    snprintf(text, sizeof text,
             "# comment line\n\n   # indented comment\n%s head   # trailing comment\n"
             "%s\t\n",
             z, "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H9]yf7");
    s_write(path, text, 0644);
    sw_allow_entry_t *e = NULL;
    int n = 0;
    SW_CHECK_INT(sw_allow_load(path, &e, &n, err, sizeof err), 0);
    SW_CHECK_INT(n, 2);
    if (n == 2) {
        SW_CHECK(!strcmp(e[0].key, z) && !strcmp(e[0].name, "head"));
        /* "KEY head" alone is the old form of a node called head, bound to no role */
        SW_CHECK(e[0].role == SW_ALLOW_NODE && e[0].bind == SW_BIND_ANY && e[0].legacy == 4);
        SW_CHECK(e[1].name[0] == 0);
    }
    free(e);
    /* node keys bound to a role (issue 21, finding 9): head, stage, and node (name only) */
    {
        char k[3][41];
        for (int i = 0; i < 3; i++) {
            randombytes_buf(bin, sizeof bin);
            zmq_z85_encode(k[i], bin, 32);
            k[i][0] = 'a'; /* never '#' first */
        }
        snprintf(text, sizeof text, "%s head h1\n%s stage tail\n%s node n1\n", k[0], k[1], k[2]);
        s_write(path, text, 0644);
        SW_CHECK_INT(sw_allow_load(path, &e, &n, err, sizeof err), 0);
        SW_CHECK_INT(n, 3);
        if (n == 3) {
            SW_CHECK(e[0].bind == SW_BIND_HEAD && !strcmp(e[0].name, "h1") && e[0].line == 1);
            SW_CHECK(e[1].bind == SW_BIND_STAGE && !strcmp(e[1].name, "tail"));
            SW_CHECK(e[2].bind == SW_BIND_ANY && e[2].role == SW_ALLOW_NODE && !e[2].legacy);
        }
        free(e);
    }
    const char *bad[] = {
        "notakey\n",
        "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H9]yf7 bad/name\n",
        "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H9]yf7 a b\n",
        "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H9]yf7 node\n",
        "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H9]yf7 head h extra\n",
        "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\n", /* the zmq_curve(7) server public key */
        "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H9]yf7 ok\nshort\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s_write(path, bad[i], 0644);
        SW_CHECK(sw_allow_load(path, &e, &n, err, sizeof err) != 0);
        SW_CHECK(e == NULL);
    }
    /* a secret key with '#' in it is still read; 0640 is refused */
    char sz[41];
    for (int tries = 0; tries < 100000; tries++) {
        char p2[41];
        randombytes_buf(bin, sizeof bin);
        zmq_z85_encode(sz, bin, 32);
        if (strchr(sz, '#') && zmq_curve_public(p2, sz) == 0)
            break;
    }
    snprintf(path, sizeof path, "%s/s.key", dir);
    snprintf(text, sizeof text, "# a comment\n%s\n", sz);
    s_write(path, text, 0600);
    SW_CHECK_INT(sw_keys_load_secret(path, pub, sec, err, sizeof err), 0);
    SW_CHECK(!strcmp(sec, sz));
    chmod(path, 0640);
    SW_CHECK(sw_keys_load_secret(path, pub, sec, err, sizeof err) != 0);
    /* generated keys: 0600 secret, matching public, no overwrite */
    char prefix[256], pub2[41];
    snprintf(prefix, sizeof prefix, "%s/gen", dir);
    SW_CHECK_INT(sw_keys_generate(prefix, pub2, err, sizeof err), 0);
    SW_CHECK(sw_keys_generate(prefix, pub2, err, sizeof err) != 0);
    snprintf(path, sizeof path, "%s.key", prefix);
    struct stat st;
    SW_CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    SW_CHECK_INT(sw_keys_load_secret(path, pub, sec, err, sizeof err), 0);
    SW_CHECK(!strcmp(pub, pub2));
    snprintf(path, sizeof path, "%s.pub", prefix);
    SW_CHECK_INT(sw_keys_load_public(path, pub, err, sizeof err), 0);
    SW_CHECK(!strcmp(pub, pub2));
    SW_CHECK_INT(sw_keys_load_public(pub2, pub, err, sizeof err), 0);
    /* cluster keys */
    snprintf(path, sizeof path, "%s/c.key", dir);
    uint8_t ck[32];
    SW_CHECK_INT(sw_cluster_key_generate(path, err, sizeof err), 0);
    SW_CHECK_INT(sw_cluster_key_load(path, ck, err, sizeof err), 0);
    chmod(path, 0644);
    SW_CHECK(sw_cluster_key_load(path, ck, err, sizeof err) != 0);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    SW_CHECK_INT(system(cmd), 0);
}

/* The cost of sealing: one decode round of SmolLM2-135M (5 rows x 576 f16) and a
 * 7B-class prefill chunk (512 rows x 3584 f16). Printed, not asserted. */
static void s_bench(const uint8_t k[][32])
{
    sw_seal_t *a = sw_seal_new(k, 1, SW_SEAL_CLUSTER), *b = sw_seal_new(k, 1, SW_SEAL_CLUSTER);
    size_t sizes[] = {5 * 576 * 2, 65 * 3584 * 2, 512 * 3584 * 2};
    const char *what[] = {"decode round, 5x576 f16", "K=64 round, 65x3584 f16",
                          "prefill chunk, 512x3584 f16"};
    for (int s = 0; s < 3; s++) {
        uint8_t *pl = malloc(sizes[s]);
        memset(pl, 7, sizes[s]);
        int reps = sizes[s] < 100000 ? 2000 : 20;
        double t0 = s_now();
        for (int i = 0; i < reps; i++) {
            zmq_msg_t h, p;
            uint8_t *plain;
            size_t n;
            char hdr[200];
            memset(hdr, 'h', sizeof hdr);
            if (sw_seal_message(a, "head", "tail", hdr, sizeof hdr, pl, sizes[s], 1, &h, &p) != 0)
                break;
            SW_CHECK(sw_seal_open(b, "head", NULL, "tail", zmq_msg_data(&h), zmq_msg_size(&h), &p,
                                  &plain, &n) == SW_SEAL_OK);
            free(plain);
            zmq_msg_close(&h);
            zmq_msg_close(&p);
        }
        double us = (s_now() - t0) / reps * 1e6;
        printf("seal+open %-30s %8zu B: %8.1f us (%.0f MB/s), +%d B\n", what[s], sizes[s], us,
               sizes[s] / us, SW_SEAL_HDR_OVERHEAD + SW_SEAL_PAYLOAD_OVERHEAD);
        free(pl);
    }
    sw_seal_destroy(&a);
    sw_seal_destroy(&b);
}

int main(void)
{
    if (sodium_init() < 0)
        sw_test_skip("libsodium does not initialise");
    uint8_t k[2][32];
    randombytes_buf(k, sizeof k);
    s_test_roundtrip_and_tamper(k);
    s_test_replay(k);
    s_test_spent(k);
    s_test_arrived(k);
    s_test_rotation(k);
    s_test_files();
    s_bench(k);
    return sw_test_done();
}
