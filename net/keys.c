/*
 * keys.c - key files, the allow-list parser (roles and names) and the loading
 * of a peer's security settings (see keys.h). Everything read here is outside input: each
 * line is bounded, each key is checked for length and alphabet and decoded
 * before use, and secret files are refused when others could read them.
 */
#include "keys.h"

#include "args.h"
#include "codec.h"
#include "log.h"
#include "sw_limits.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#define S_FILE_MAX (1u << 20) /* bytes read from any key or allow-list file */

/* The key pairs printed in zmq_curve(7) "TEST KEY VALUES" (and in the zguide
 * examples): anybody can have them, so no deployment may use them. */
static const char *const s_test_keys[] = {
    "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID", /* client public */
    "D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs", /* client secret */
    "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7", /* server public */
    "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6", /* server secret */
};

static int s_err(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int s_err(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && err_len)
        vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
    return -1;
}

int sw_keys_curve_check(char *err, size_t err_len)
{
    if (!zmq_has("curve"))
        return s_err(err, err_len,
                     "this libzmq was built without CURVE security (zmq_has(\"curve\") is 0): "
                     "install a libzmq built with libsodium");
    return 0;
}

int sw_keys_is_test_key(const char *z85)
{
    for (size_t i = 0; i < sizeof s_test_keys / sizeof s_test_keys[0]; i++)
        if (z85 && strncmp(z85, s_test_keys[i], SW_KEY_Z85_LEN) == 0)
            return 1;
    return 0;
}

/* 1 when s[0..40) is Z85 text that decodes to 32 bytes (into out when not NULL). */
static int s_z85_ok(const char *s, size_t len, uint8_t out[32])
{
    static const char alphabet[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                   ".-:+=^!/*?&<>()[]{}@%$#";
    if (len != SW_KEY_Z85_LEN)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!s[i] || !strchr(alphabet, s[i]))
            return 0;
    char z[SW_KEY_Z85_LEN + 1];
    uint8_t bin[32];
    memcpy(z, s, SW_KEY_Z85_LEN);
    z[SW_KEY_Z85_LEN] = 0;
    if (!zmq_z85_decode(bin, z))
        return 0;
    if (out)
        memcpy(out, bin, 32);
    sodium_memzero(bin, sizeof bin);
    return 1;
}

/*
 * Reads a whole small file. secret = 1 refuses a file readable or writable by
 * group or others. Returns a NUL-terminated malloc'd buffer (sodium_memzero it
 * before free when it held a secret) or NULL after one line in err.
 */
static char *s_read_file(const char *path, int secret, char *err, size_t err_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        s_err(err, err_len, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        s_err(err, err_len, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    if (secret && (st.st_mode & 077)) {
        s_err(err, err_len,
              "%s: permissions %04o are too open for a secret key (others can read it): "
              "run chmod 600 %s",
              path, (unsigned)(st.st_mode & 0777), path);
        close(fd);
        return NULL;
    }
    if (st.st_size < 0 || (uint64_t)st.st_size > S_FILE_MAX) {
        s_err(err, err_len, "%s: %lld bytes, more than a key file can hold (%u)", path,
              (long long)st.st_size, S_FILE_MAX);
        close(fd);
        return NULL;
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        s_err(err, err_len, "%s: out of memory", path);
        return NULL;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    buf[got] = 0;
    if (memchr(buf, 0, got)) {
        sodium_memzero(buf, got);
        free(buf);
        s_err(err, err_len, "%s: binary data in a text key file", path);
        return NULL;
    }
    return buf;
}

static void s_free_secret(char *buf)
{
    if (buf) {
        sodium_memzero(buf, strlen(buf));
        free(buf);
    }
}

/*
 * The first line of text that is not empty or a '#' comment, with surrounding
 * blanks removed: *start and *len. 0 when there is one.
 */
static int s_first_line(const char *text, const char **start, size_t *len)
{
    const char *p = text;
    while (*p) {
        const char *eol = strchr(p, '\n');
        const char *end = eol ? eol : p + strlen(p);
        const char *a = p, *b = end;
        while (a < b && (*a == ' ' || *a == '\t' || *a == '\r'))
            a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t' || b[-1] == '\r'))
            b--;
        /* Z85 has '#': a 40-character key line starting with it is a key, not a comment. */
        if (a < b && (*a != '#' || s_z85_ok(a, (size_t)(b - a), NULL))) {
            *start = a;
            *len = (size_t)(b - a);
            return 0;
        }
        if (!eol)
            break;
        p = eol + 1;
    }
    return -1;
}

/* Creates path exclusively with mode 0600 (or 0644 when public) and writes text. */
static int s_write_new(const char *path, const char *text, int public_file, char *err,
                       size_t err_len)
{
    int fd =
        open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, public_file ? 0644 : 0600);
    if (fd < 0)
        return s_err(err, err_len, "%s: %s%s", path, strerror(errno),
                     errno == EEXIST ? " (not overwriting an existing key)" : "");
    if (!public_file && fchmod(fd, 0600) != 0) { /* whatever the umask did */
        close(fd);
        unlink(path);
        return s_err(err, err_len, "%s: chmod: %s", path, strerror(errno));
    }
    size_t n = strlen(text), off = 0;
    while (off < n) {
        ssize_t w = write(fd, text + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            close(fd);
            unlink(path);
            return s_err(err, err_len, "%s: write: %s", path, strerror(errno));
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        unlink(path);
        return s_err(err, err_len, "%s: %s", path, strerror(errno));
    }
    return 0;
}

int sw_keys_generate(const char *prefix, char *pub_out, char *err, size_t err_len)
{
    char pub[SW_KEY_Z85_LEN + 1], sec[SW_KEY_Z85_LEN + 1];
    char kpath[4096], ppath[4096], text[256];
    if (sw_keys_curve_check(err, err_len) != 0)
        return -1;
    if (!prefix || !*prefix)
        return s_err(err, err_len, "keygen: an output prefix is required");
    if ((size_t)snprintf(kpath, sizeof kpath, "%s.key", prefix) >= sizeof kpath ||
        (size_t)snprintf(ppath, sizeof ppath, "%s.pub", prefix) >= sizeof ppath)
        return s_err(err, err_len, "keygen: prefix too long");
    do {
        if (zmq_curve_keypair(pub, sec) != 0)
            return s_err(err, err_len, "zmq_curve_keypair: %s", zmq_strerror(errno));
    } while (sw_keys_is_test_key(pub) || sw_keys_is_test_key(sec)); /* never, but cheap */
    snprintf(text, sizeof text,
             "# shardwire CURVE secret key (keep it private: mode 0600)\n"
             "# public key: %s\n%s\n",
             pub, sec);
    int rc = s_write_new(kpath, text, 0, err, err_len);
    sodium_memzero(text, sizeof text);
    sodium_memzero(sec, sizeof sec);
    if (rc != 0)
        return -1;
    snprintf(text, sizeof text, "%s\n", pub);
    if (s_write_new(ppath, text, 1, err, err_len) != 0) {
        unlink(kpath);
        return -1;
    }
    if (pub_out)
        memcpy(pub_out, pub, sizeof pub);
    return 0;
}

/* Writes 32 random bytes as Z85 to a new 0600 file at path, under a comment line. */
static int s_sym_key_generate(const char *path, const char *comment, char *err, size_t err_len)
{
    uint8_t key[SW_CLUSTER_KEY_BYTES];
    char z[SW_KEY_Z85_LEN + 1], text[200];
    if (!path || !*path)
        return s_err(err, err_len, "keygen: a key path is required");
    if (sodium_init() < 0)
        return s_err(err, err_len, "libsodium failed to initialise");
    randombytes_buf(key, sizeof key);
    if (!zmq_z85_encode(z, key, sizeof key)) {
        sodium_memzero(key, sizeof key);
        return s_err(err, err_len, "zmq_z85_encode failed");
    }
    snprintf(text, sizeof text, "# %s\n%s\n", comment, z);
    int rc = s_write_new(path, text, 0, err, err_len);
    sodium_memzero(key, sizeof key);
    sodium_memzero(z, sizeof z);
    sodium_memzero(text, sizeof text);
    return rc;
}

int sw_cluster_key_generate(const char *path, char *err, size_t err_len)
{
    return s_sym_key_generate(path, "shardwire cluster key (nodes only: head, middle, tail)", err,
                              err_len);
}

int sw_access_key_generate(const char *path, char *err, size_t err_len)
{
    return s_sym_key_generate(path, "shardwire access key (clients and heads)", err, err_len);
}

int sw_keys_load_secret(const char *path, char *pub, char *sec, char *err, size_t err_len)
{
    /* keygen writes NAME.key (secret) and NAME.pub: the .pub given here is a
     * mix-up that the permission check would misreport as "too open". */
    size_t plen = strlen(path);
    if (plen > 4 && strcmp(path + plen - 4, ".pub") == 0)
        return s_err(err, err_len,
                     "%s is a public key: give the secret key file (%.*s.key, made next to it by "
                     "'shardwire keygen') with --key; the .pub goes to the relay's allow-list",
                     path, (int)(plen - 4), path);
    char *text = s_read_file(path, 1, err, err_len);
    if (!text)
        return -1;
    const char *line;
    size_t len;
    int rc = -1;
    if (s_first_line(text, &line, &len) != 0 || !s_z85_ok(line, len, NULL)) {
        s_err(err, err_len, "%s: no Z85 secret key (40 characters) in the file", path);
        goto out;
    }
    memcpy(sec, line, SW_KEY_Z85_LEN);
    sec[SW_KEY_Z85_LEN] = 0;
    if (sw_keys_is_test_key(sec)) {
        s_err(err, err_len,
              "%s: this is a published ZeroMQ test key; generate a real one with "
              "'shardwire keygen'",
              path);
        goto out;
    }
    if (zmq_curve_public(pub, sec) != 0) {
        s_err(err, err_len, "%s: cannot derive the public key: %s", path, zmq_strerror(errno));
        goto out;
    }
    if (sw_keys_is_test_key(pub)) {
        s_err(err, err_len, "%s: this is a published ZeroMQ test key", path);
        goto out;
    }
    rc = 0;
out:
    if (rc != 0)
        sodium_memzero(sec, SW_KEY_Z85_LEN + 1);
    s_free_secret(text);
    return rc;
}

int sw_keys_load_public(const char *file_or_z85, char *pub, char *err, size_t err_len)
{
    if (!file_or_z85)
        return s_err(err, err_len, "no public key given");
    size_t n = strlen(file_or_z85);
    if (s_z85_ok(file_or_z85, n, NULL) && access(file_or_z85, F_OK) != 0) {
        memcpy(pub, file_or_z85, SW_KEY_Z85_LEN + 1);
    } else {
        char *text = s_read_file(file_or_z85, 0, err, err_len);
        if (!text)
            return -1;
        const char *line;
        size_t len;
        if (s_first_line(text, &line, &len) != 0 || !s_z85_ok(line, len, NULL)) {
            free(text);
            return s_err(err, err_len, "%s: no Z85 public key (40 characters) in the file",
                         file_or_z85);
        }
        memcpy(pub, line, SW_KEY_Z85_LEN);
        pub[SW_KEY_Z85_LEN] = 0;
        free(text);
    }
    if (sw_keys_is_test_key(pub))
        return s_err(err, err_len, "the public key %s is a published ZeroMQ test key", pub);
    return 0;
}

int sw_cluster_key_load(const char *path, uint8_t key[SW_CLUSTER_KEY_BYTES], char *err,
                        size_t err_len)
{
    char *text = s_read_file(path, 1, err, err_len);
    if (!text)
        return -1;
    const char *line;
    size_t len;
    int rc = 0;
    if (s_first_line(text, &line, &len) != 0 || !s_z85_ok(line, len, key))
        rc = s_err(err, err_len, "%s: no Z85 key (40 characters) in the file", path);
    else if (sodium_is_zero(key, SW_CLUSTER_KEY_BYTES))
        rc = s_err(err, err_len, "%s: the cluster key is all zero", path);
    s_free_secret(text);
    return rc;
}

/* 1 when name is a valid peer name: 1..63 of [A-Za-z0-9._-]. */
static int s_name_ok(const char *name)
{
    size_t nl = strlen(name);
    int ok = nl >= 1 && nl <= 63;
    for (size_t i = 0; ok && i < nl; i++) {
        char c = name[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '.' || c == '_' || c == '-';
    }
    return ok;
}

static int s_entry_cmp(const void *a, const void *b)
{
    const sw_allow_entry_t *x = *(const sw_allow_entry_t *const *)a;
    const sw_allow_entry_t *y = *(const sw_allow_entry_t *const *)b;
    return strcmp(x->key, y->key);
}

/* -1 after a line in err when a key appears on two lines. */
static int s_allow_unique(const char *path, sw_allow_entry_t *e, int n, char *err, size_t err_len)
{
    if (n < 2)
        return 0;
    sw_allow_entry_t **by_key = malloc((size_t)n * sizeof *by_key);
    if (!by_key)
        return s_err(err, err_len, "%s: out of memory", path);
    for (int i = 0; i < n; i++)
        by_key[i] = &e[i];
    qsort(by_key, (size_t)n, sizeof *by_key, s_entry_cmp);
    int rc = 0;
    for (int i = 1; i < n && rc == 0; i++)
        if (!strcmp(by_key[i - 1]->key, by_key[i]->key))
            rc = s_err(err, err_len,
                       "%s: the key %.8s... is listed twice: a key has one role and one name", path,
                       by_key[i]->key);
    free(by_key);
    return rc;
}

_Static_assert(SW_KEY_FP_LEN == SW_WIRE_KEY_FP_LEN, "a fingerprint is what the wire carries");

int sw_keys_fingerprint(const char *z85, char out[SW_KEY_FP_LEN + 1])
{
    uint8_t bin[32], h[SW_KEY_FP_LEN / 2];
    out[0] = 0;
    if (!z85 || strnlen(z85, SW_KEY_Z85_LEN + 1) != SW_KEY_Z85_LEN || !zmq_z85_decode(bin, z85))
        return -1;
    if (crypto_generichash(h, sizeof h, bin, sizeof bin, NULL, 0) != 0)
        return -1;
    for (size_t i = 0; i < sizeof h; i++)
        snprintf(out + 2 * i, 3, "%02x", h[i]);
    return 0;
}

/* The roles a node key's allow-list word gives it (enum sw_allow_bind), -1: not a node word. */
static int s_node_word(const char *w)
{
    if (!strcmp(w, "head"))
        return SW_BIND_HEAD;
    if (!strcmp(w, "stage"))
        return SW_BIND_STAGE;
    return !strcmp(w, "node") ? SW_BIND_ANY : -1;
}

int sw_allow_load(const char *path, sw_allow_entry_t **entries, int *n, char *err, size_t err_len)
{
    *entries = NULL;
    *n = 0;
    char *text = s_read_file(path, 0, err, err_len);
    if (!text)
        return -1;
    sw_allow_entry_t *out = NULL;
    int count = 0, cap = 0, lineno = 0, rc = -1;
    char *save = NULL;
    /* strtok_r would merge empty lines and miscount them: split by hand */
    for (char *line = text; line; line = save) {
        save = strchr(line, '\n');
        if (save)
            *save++ = 0;
        lineno++;
        /* Z85 keys may contain '#': a comment is a token starting with '#' that is not the
         * 40-character key itself, and runs to the end of the line. */
        char *tok[4] = {NULL, NULL, NULL, NULL};
        int nt = 0;
        char *tok_save = NULL;
        for (char *t = strtok_r(line, " \t\r", &tok_save); t && nt < 4;
             t = strtok_r(NULL, " \t\r", &tok_save)) {
            if (t[0] == '#' && (nt > 0 || !s_z85_ok(t, strlen(t), NULL)))
                break;
            tok[nt++] = t;
        }
        if (nt == 0)
            continue;
        const char *key = tok[0];
        if (!s_z85_ok(key, strlen(key), NULL)) {
            s_err(err, err_len, "%s:%d: '%.48s' is not a Z85 public key (40 characters)", path,
                  lineno, key);
            goto out;
        }
        if (sw_keys_is_test_key(key)) {
            s_err(err, err_len, "%s:%d: a published ZeroMQ test key is not allowed", path, lineno);
            goto out;
        }
        int role = SW_ALLOW_CLIENT, bind = SW_BIND_ANY, legacy = 0;
        const char *name = NULL;
        if (nt == 4) {
            s_err(err, err_len,
                  "%s:%d: expected 'KEY head|stage|node NAME' or 'KEY client [NAME]', found more",
                  path, lineno);
            goto out;
        }
        /* "KEY head" and "KEY stage" alone are the old form of a node called so */
        const int node_word = nt == 3 ? s_node_word(tok[1]) : -1;
        if (nt == 2 && !strcmp(tok[1], "node")) {
            s_err(err, err_len, "%s:%d: a node key needs its name: 'KEY head|stage|node NAME'",
                  path, lineno);
            goto out;
        }
        if (node_word >= 0) {
            role = SW_ALLOW_NODE;
            bind = node_word;
            name = tok[2];
        } else if (nt >= 2 && !strcmp(tok[1], "client")) {
            name = nt == 3 ? tok[2] : NULL;
        } else if (nt == 3) {
            s_err(err, err_len,
                  "%s:%d: '%.20s' is not a role: write 'KEY head NAME', 'KEY stage NAME' or "
                  "'KEY client [NAME]'",
                  path, lineno, tok[1]);
            goto out;
        } else {
            legacy = lineno; /* "KEY NAME" = a node called NAME; "KEY" = a client */
            role = nt == 2 ? SW_ALLOW_NODE : SW_ALLOW_CLIENT;
            name = nt == 2 ? tok[1] : NULL;
        }
        if (name && (!s_name_ok(name) || !strcmp(name, "relay"))) {
            s_err(err, err_len,
                  "%s:%d: '%.70s' is not a peer name (1-63 of [A-Za-z0-9._-], not "
                  "'relay')",
                  path, lineno, name);
            goto out;
        }
        if (count == SW_ALLOW_MAX) {
            s_err(err, err_len, "%s: more than %d keys", path, SW_ALLOW_MAX);
            goto out;
        }
        if (count == cap) {
            int ncap = cap ? cap * 2 : 16;
            sw_allow_entry_t *g = realloc(out, (size_t)ncap * sizeof *g);
            if (!g) {
                s_err(err, err_len, "%s: out of memory", path);
                goto out;
            }
            out = g;
            cap = ncap;
        }
        memset(&out[count], 0, sizeof out[count]);
        memcpy(out[count].key, key, SW_KEY_Z85_LEN);
        if (name)
            snprintf(out[count].name, sizeof out[count].name, "%s", name);
        out[count].role = role;
        out[count].bind = bind;
        out[count].line = lineno;
        out[count].legacy = legacy;
        count++;
    }
    if (s_allow_unique(path, out, count, err, err_len) != 0)
        goto out;
    rc = 0;
    *entries = out;
    *n = count;
    out = NULL;
out:
    free(out);
    free(text);
    return rc;
}

static int s_one_is_loopback(const char *ep);

int sw_endpoint_is_loopback(const char *list)
{
    if (!list || !strchr(list, ','))
        return s_one_is_loopback(list);
    const int n = sw_relay_at(list, 1 << 30, NULL, 0);
    for (int i = 0; i < n; i++) {
        char ep[SW_ARGS_ENDPOINT_MAX];
        sw_relay_at(list, i, ep, sizeof ep);
        if (!s_one_is_loopback(ep))
            return 0;
    }
    return n > 0;
}

static int s_one_is_loopback(const char *ep)
{
    if (!ep)
        return 0;
    if (!strncmp(ep, "ipc://", 6) || !strncmp(ep, "inproc://", 9))
        return 1;
    if (strncmp(ep, "tcp://", 6) != 0)
        return 0;
    const char *h = ep + 6;
    if (!strncmp(h, "localhost:", 10) || !strncmp(h, "[::1]:", 6))
        return 1;
    if (strncmp(h, "127.", 4) != 0)
        return 0;
    /* 127.a.b.c: digits and dots up to the port, nothing else (no "127.evil.com"). */
    int dots = 0;
    for (const char *p = h + 4; *p && *p != ':'; p++) {
        if (*p == '.')
            dots++;
        else if (*p < '0' || *p > '9')
            return 0;
    }
    return dots == 2 && strchr(h, ':') != NULL;
}

/* Loads up to two symmetric key files of one kind into keys; *n counts them. */
static int s_sym_keys_load(const char *const files[SW_CLUSTER_KEYS_MAX],
                           uint8_t keys[SW_CLUSTER_KEYS_MAX][SW_CLUSTER_KEY_BYTES], int *n,
                           char *err, size_t err_len)
{
    for (int i = 0; i < SW_CLUSTER_KEYS_MAX; i++) {
        if (!files[i])
            continue;
        if (sw_cluster_key_load(files[i], keys[*n], err, err_len) != 0)
            return -1;
        ++*n;
    }
    return 0;
}

/* The relay keys "K1,K2" (files or Z85), one per relay of the list endpoint, in its order. */
static int s_relay_keys_load(const char *keys, const char *endpoint, sw_sec_t *out, char *err,
                             size_t err_len)
{
    const int n_keys = sw_relay_at(keys, 1 << 30, NULL, 0);
    const int n_relays = endpoint && endpoint[0] ? sw_relay_at(endpoint, 1 << 30, NULL, 0) : 1;
    if (n_keys != n_relays)
        return s_err(err, err_len,
                     "%d relays but %d relay keys: give --relay-key one public key per relay, "
                     "in --relay's order (K1,K2)",
                     n_relays, n_keys);
    if (n_keys > SW_PEER_MAX_RELAYS)
        return s_err(err, err_len, "more than %d relay keys (SW_PEER_MAX_RELAYS)",
                     SW_PEER_MAX_RELAYS);
    for (int i = 0; i < n_keys; i++) {
        char one[SW_ARGS_ENDPOINT_MAX * 4];
        sw_relay_at(keys, i, one, sizeof one);
        if (sw_keys_load_public(one, out->relay_pub[i], err, err_len) != 0)
            return -1;
    }
    out->n_relay_pub = n_keys;
    return 0;
}

int sw_sec_load(const sw_sec_args_t *a, const char *endpoint, sw_sec_t *out, char *err,
                size_t err_len)
{
    memset(out, 0, sizeof *out);
    const char *key_file = a->key_file ? a->key_file : getenv("SW_KEY");
    const char *relay_key = a->relay_key ? a->relay_key : getenv("SW_RELAY_KEY");
    const char *ck[SW_CLUSTER_KEYS_MAX] = {a->cluster_key[0], a->cluster_key[1]};
    const char *ak[SW_CLUSTER_KEYS_MAX] = {a->access_key[0], a->access_key[1]};
    const int client = a->role == SW_SEC_CLIENT, stage = a->role == SW_SEC_STAGE;
    if (client && ck[0])
        return s_err(err, err_len,
                     "clients use --access-key now: the cluster key (--cluster-key) is for the "
                     "nodes only (docs/security.md)");
    if (stage && ak[0])
        return s_err(err, err_len,
                     "only the head (layers from 0) holds the access key: a middle or tail node "
                     "never talks to clients, drop --access-key");
    if (!ck[0] && !client && !a->insecure_loopback)
        ck[0] = getenv("SW_CLUSTER_KEY");
    if (!ak[0] && !stage && !a->insecure_loopback)
        ak[0] = getenv("SW_ACCESS_KEY");
    if (a->insecure_loopback) {
        if (!sw_endpoint_is_loopback(endpoint))
            return s_err(err, err_len,
                         "--insecure-loopback only works with a loopback relay (" SW_LOOPBACK_FORMS
                         "); %s is not one: use keys (see docs/security.md)",
                         endpoint ? endpoint : "(none)");
        out->insecure = 1;
    } else {
        if (sw_keys_curve_check(err, err_len) != 0)
            return -1;
        if (!key_file || !relay_key)
            return s_err(err, err_len,
                         "security keys missing: --key FILE and --relay-key FILE|Z85 are required "
                         "(make them with 'shardwire keygen'), or --insecure-loopback for a "
                         "loopback-only test setup");
        if (client && !ak[0] && !a->e2e_optional)
            return s_err(err, err_len,
                         "the access key is missing: clients need --access-key FILE (or "
                         "SW_ACCESS_KEY)%s; make one with 'shardwire keygen --access-key FILE'",
                         getenv("SW_CLUSTER_KEY") ? "; SW_CLUSTER_KEY is set, but clients no "
                                                    "longer use the cluster key"
                                                  : "");
        if (!client && !ck[0])
            return s_err(err, err_len,
                         "the cluster key is missing: nodes need --cluster-key FILE (or "
                         "SW_CLUSTER_KEY); make one with 'shardwire keygen --cluster-key FILE'");
        if (a->role == SW_SEC_HEAD && !ak[0])
            return s_err(err, err_len,
                         "the access key is missing: a head (layers from 0) talks to clients and "
                         "needs --access-key FILE (or SW_ACCESS_KEY) besides --cluster-key");
        if (s_relay_keys_load(relay_key, endpoint, out, err, err_len) != 0 ||
            sw_keys_load_secret(key_file, out->pub, out->sec, err, err_len) != 0) {
            sw_sec_wipe(out);
            return -1;
        }
    }
    if (s_sym_keys_load(ck, out->cluster, &out->n_cluster, err, err_len) != 0 ||
        s_sym_keys_load(ak, out->access, &out->n_access, err, err_len) != 0) {
        sw_sec_wipe(out);
        return -1;
    }
    for (int i = 0; i < out->n_cluster; i++)
        for (int j = 0; j < out->n_access; j++)
            if (sodium_memcmp(out->cluster[i], out->access[j], SW_CLUSTER_KEY_BYTES) == 0) {
                sw_sec_wipe(out);
                return s_err(err, err_len,
                             "the access key and the cluster key are the same key: make a "
                             "separate access key with 'shardwire keygen --access-key FILE'");
            }
    return 0;
}

int sw_sec_args_opt(sw_sec_args_t *a, int c, const char *arg)
{
    switch (c - SW_SEC_OPT_BASE) {
    case 0:
        a->key_file = arg;
        return 1;
    case 1:
        a->relay_key = arg;
        return 1;
    case 2:
        for (int i = 0; i < SW_CLUSTER_KEYS_MAX; i++) {
            if (!a->cluster_key[i]) {
                a->cluster_key[i] = arg;
                return 1;
            }
        }
        fprintf(stderr, "--cluster-key given more than %d times\n", SW_CLUSTER_KEYS_MAX);
        return -1;
    case 3:
        a->insecure_loopback = 1;
        return 1;
    case 4:
        for (int i = 0; i < SW_CLUSTER_KEYS_MAX; i++) {
            if (!a->access_key[i]) {
                a->access_key[i] = arg;
                return 1;
            }
        }
        fprintf(stderr, "--access-key given more than %d times\n", SW_CLUSTER_KEYS_MAX);
        return -1;
    default:
        return 0;
    }
}

void sw_sec_wipe(sw_sec_t *s)
{
    if (s)
        sodium_memzero(s, sizeof *s);
}
/* wire.h declares it (the announce's check); here beside the other endpoint checks, so that
 * wire_check.c calls it without a circle between the wire files. */
int sw_wire_direct_ok(const char *ep)
{
    const size_t n = (ep ? strnlen(ep, SW_WIRE_DIRECT_MAX + 1) : 0);
    if (n > SW_WIRE_DIRECT_MAX || n < 8 || strncmp(ep, "tcp://", 6) != 0)
        return 0;
    const char *host = ep + 6, *colon = strrchr(host, ':');
    if (!colon || colon == host || !colon[1] || strlen(colon + 1) > 5)
        return 0;
    long port = 0;
    for (const char *c = colon + 1; *c; c++) {
        if (*c < '0' || *c > '9')
            return 0;
        port = port * 10 + (*c - '0');
    }
    if (port < 1 || port > 65535 || colon[1] == '0')
        return 0;
    const int v6 = host[0] == '[';
    if (v6 && colon[-1] != ']')
        return 0;
    for (const char *c = host + v6; c < colon - v6; c++) {
        const int ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                       (*c >= '0' && *c <= '9') || *c == '.' || *c == '-' || (v6 && *c == ':');
        if (!ok)
            return 0;
    }
    return colon - host > 2 * v6;
}

/* ---- what an allow-list lets a key do (the relay, a node's listener) ------------------- */

const sw_allow_entry_t *sw_allow_find(const sw_allow_entry_t *list, int n, const char *key)
{
    if (!key)
        return NULL;
    for (int i = 0; i < n; i++)
        if (strncmp(list[i].key, key, SW_KEY_Z85_LEN) == 0 && strlen(key) == SW_KEY_Z85_LEN)
            return &list[i];
    return NULL;
}

static int s_is_node_role(int role)
{
    return role >= SW_ROLE_HEAD && role <= SW_ROLE_FULL;
}

/* 1 when name is base or base-SUFFIX: a client key bound to the name base may announce both
 * (a client adds a random suffix to its name). */
static int s_name_in(const char *base, const char *name)
{
    size_t n = strlen(base);
    return n > 0 && !strncmp(base, name, n) && (name[n] == 0 || name[n] == '-');
}

/*
 * Whether key `user` may announce as `name` with `role` (secure relays): its
 * allow-list entry binds a role and maybe a name, and a name listed for some
 * key is reserved for the keys that list it, even while no peer holds it. 0,
 * or -1 with the reason in why.
 */
int sw_allow_permit(const sw_allow_entry_t *list, int n, const char *user, const char *name,
                    int role, char *why, size_t why_len)
{
    const sw_allow_entry_t *e = sw_allow_find(list, n, user);
    if (!e) {
        snprintf(why, why_len, "your key is not on the relay's allow-list");
        return -1;
    }
    if (e->role == SW_ALLOW_NODE && (!s_is_node_role(role) || strcmp(e->name, name) != 0)) {
        snprintf(why, why_len,
                 "this key is the node key of '%s': it may only announce as '%s', as a head, "
                 "middle or tail node",
                 e->name, e->name);
        return -1;
    }
    /* a node key bound to a role too ("KEY head NAME", "KEY stage NAME"): any other node key
     * could otherwise announce a second head of a model and make the clients refuse to
     * choose (issue 21, finding 9) */
    if (e->role == SW_ALLOW_NODE && e->bind == SW_BIND_HEAD && role != SW_ROLE_HEAD &&
        role != SW_ROLE_FULL) {
        snprintf(why, why_len,
                 "the allow-list binds this key to the head role ('KEY head %s'): it may only "
                 "announce as a head (layers from 0)",
                 e->name);
        return -1;
    }
    if (e->role == SW_ALLOW_NODE && e->bind == SW_BIND_STAGE && role != SW_ROLE_MIDDLE &&
        role != SW_ROLE_TAIL) {
        snprintf(why, why_len,
                 "the allow-list binds this key to a stage ('KEY stage %s'): it may only announce "
                 "as a middle or tail node, not as a head",
                 e->name);
        return -1;
    }
    if (e->role == SW_ALLOW_CLIENT && role != SW_ROLE_CLIENT) {
        snprintf(why, why_len,
                 "this is a client key: it cannot announce as a head, middle or tail node (a "
                 "node needs its own key, listed as 'KEY head|stage NAME' in the allow-list)");
        return -1;
    }
    if (e->role == SW_ALLOW_CLIENT && e->name[0] && !s_name_in(e->name, name)) {
        snprintf(why, why_len, "this client key may only announce as '%s' or '%s-...'", e->name,
                 e->name);
        return -1;
    }
    /* A listed name itself is reserved; its suffixed forms are not: a bound
     * client adds 48 random bits to it, a live name is never taken, a dead
     * one is held for its key (--name-hold-s) and the head streams a request
     * only to the key that asked. Reserving the prefix too would refuse every
     * unnamed client key as soon as the list names a client "client" (cluster
     * init's default), as clients announce "client-SUFFIX" by default. A
     * name the list gives another key is reserved whatever this key's own
     * name: a client bound to "gate" may announce "gate-SUFFIX", but not a
     * "gate-admin" that the list gives another key. */
    if (strcmp(e->name, name) != 0) {
        for (int i = 0; i < n; i++)
            if (!strcmp(list[i].name, name)) {
                snprintf(why, why_len,
                         "the name '%s' is reserved in the relay's allow-list for another key",
                         name);
                return -1;
            }
    }
    return 0;
}
