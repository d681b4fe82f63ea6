/*
 * fuzz_keys.c - libFuzzer target for the key-file and allow-list parsers
 * (net/keys.c): the relay reads its allow-list again whenever the file
 * changes, and every process reads key files that a user (or a deployment
 * script) wrote, so their contents are outside input.
 *
 * Input: byte 0 picks the parser (bits 0-1: allow-list, CURVE secret key
 * file, public key given as a file or literally, cluster key file) and the
 * file mode (bit 2: group/others may read, which a secret must refuse); the
 * rest is the file's contents, written to a scratch file that the loaders
 * read through their real entry points (sw_allow_load, sw_keys_load_secret,
 * sw_keys_load_public, sw_cluster_key_load). The same bytes also go through
 * sw_endpoint_is_loopback and sw_keys_is_test_key.
 *
 * Properties: a refusal says why (a non-empty error line) and hands nothing
 * out; an accepted allow-list holds only 40-character Z85 keys that load as
 * public keys, are not the published test keys, and names of 1-63 characters
 * from [A-Za-z0-9._-]; an accepted secret key gives a 40-character public
 * key that loads, and a secret file readable by others is always refused; a
 * cluster key file readable by others is refused.
 */
#include "keys.h"
#include "log.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char s_dir[32];  /* a private folder made at start, removed at exit */
static char s_path[64]; /* the scratch file in it */

static void s_cleanup(void)
{
    unlink(s_path);
    rmdir(s_dir);
}

static int s_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

static void s_write(const uint8_t *p, size_t n, int others_read)
{
    unlink(s_path);
    int fd = open(s_path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        __builtin_trap();
    if (n && write(fd, p, n) != (ssize_t)n)
        __builtin_trap();
    if (fchmod(fd, others_read ? 0644 : 0600) != 0)
        __builtin_trap();
    close(fd);
}

static void s_allow(void)
{
    sw_allow_entry_t *e = (sw_allow_entry_t *)1;
    int n = -1;
    char err[256] = "";
    if (sw_allow_load(s_path, &e, &n, err, sizeof err) != 0) {
        if (e != NULL || n != 0 || !err[0])
            __builtin_trap();
        return;
    }
    if (n < 0 || n > SW_ALLOW_MAX || (n > 0 && !e))
        __builtin_trap();
    for (int i = 0; i < n; i++) {
        char pub[SW_KEY_Z85_LEN + 1];
        char perr[256];
        if (strlen(e[i].key) != SW_KEY_Z85_LEN || sw_keys_is_test_key(e[i].key) ||
            sw_keys_load_public(e[i].key, pub, perr, sizeof perr) != 0 || strcmp(pub, e[i].key) ||
            !s_name_ok(e[i].name))
            __builtin_trap();
    }
    free(e);
}

static void s_secret(int others_read)
{
    char pub[SW_KEY_Z85_LEN + 1] = "", sec[SW_KEY_Z85_LEN + 1] = "";
    char err[256] = "";
    int rc = sw_keys_load_secret(s_path, pub, sec, err, sizeof err);
    if (rc != 0) {
        if (!err[0])
            __builtin_trap();
        return;
    }
    if (others_read)
        __builtin_trap(); /* a secret others can read must be refused */
    char again[SW_KEY_Z85_LEN + 1];
    if (strlen(pub) != SW_KEY_Z85_LEN || strlen(sec) != SW_KEY_Z85_LEN ||
        sw_keys_is_test_key(sec) || sw_keys_load_public(pub, again, err, sizeof err) != 0 ||
        strcmp(again, pub))
        __builtin_trap();
}

static void s_public(const uint8_t *p, size_t n)
{
    char pub[SW_KEY_Z85_LEN + 1] = "";
    char err[256] = "";
    /* literally when the bytes are a 40-character string, else as the scratch file */
    char lit[SW_KEY_Z85_LEN + 1];
    const char *arg = s_path;
    if (n == SW_KEY_Z85_LEN && !memchr(p, 0, n) && p[0] != '/' && p[0] != '.') {
        memcpy(lit, p, n);
        lit[n] = 0;
        arg = lit;
    }
    if (sw_keys_load_public(arg, pub, err, sizeof err) != 0) {
        if (!err[0])
            __builtin_trap();
        return;
    }
    if (strlen(pub) != SW_KEY_Z85_LEN || sw_keys_is_test_key(pub))
        __builtin_trap();
}

static void s_cluster(int others_read)
{
    uint8_t key[SW_CLUSTER_KEY_BYTES];
    char err[256] = "";
    if (sw_cluster_key_load(s_path, key, err, sizeof err) != 0) {
        if (!err[0])
            __builtin_trap();
        return;
    }
    if (others_read)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    sw_log_set_level(SW_LOG_ERROR);
    if (!s_path[0]) {
        snprintf(s_dir, sizeof s_dir, "/tmp/fuzz_keys.XXXXXX");
        if (!mkdtemp(s_dir))
            __builtin_trap();
        snprintf(s_path, sizeof s_path, "%s/file", s_dir);
        atexit(s_cleanup);
    }
    const int which = data[0] & 3, others_read = (data[0] >> 2) & 1;
    const uint8_t *p = data + 1;
    size_t n = size - 1;

    char text[128];
    size_t tn = n < sizeof text - 1 ? n : sizeof text - 1;
    memcpy(text, p, tn);
    text[tn] = 0;
    (void)sw_endpoint_is_loopback(text);
    if (tn >= SW_KEY_Z85_LEN)
        (void)sw_keys_is_test_key(text);

    s_write(p, n, others_read);
    switch (which) {
    case 0:
        s_allow();
        break;
    case 1:
        s_secret(others_read);
        break;
    case 2:
        s_public(p, n);
        break;
    default:
        s_cluster(others_read);
        break;
    }
    return 0;
}
