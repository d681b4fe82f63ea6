/*
 * cluster_files.c - the file and key helpers of `shardwire cluster init`
 * (cluster_impl.h): bounded text, files written exclusively into the fresh
 * folder and tracked for the move (or the clean-up), key pairs and sealing
 * keys.
 */
#include "cluster_impl.h"

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

int cl_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

int cl_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "shardwire cluster init: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return -1;
}

/* snprintf into buf that fails (-1) instead of truncating. */
int cl_fmt(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

int cl_fmt(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
    return w < 0 || (size_t)w >= cap ? -1 : 0;
}

/* Appends printf text to a bounded buffer; sets *ovf on overflow. */
void cl_cat(char *buf, size_t cap, int *ovf, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

void cl_cat(char *buf, size_t cap, int *ovf, const char *fmt, ...)
{
    size_t n = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + n, cap - n, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= cap - n)
        *ovf = 1;
}

/* s quoted for sh: '...' with each ' written as '\''. */
const char *cl_shq(const char *s)
{
    static char buf[4][PATH_MAX * 4 + 3];
    static int slot;
    char *o = buf[slot++ & 3], *p = o;
    *p++ = '\'';
    for (; *s && p < o + sizeof buf[0] - 6; s++) {
        if (*s == '\'') {
            memcpy(p, "'\\''", 4);
            p += 4;
        } else
            *p++ = *s;
    }
    *p++ = '\'';
    *p = 0;
    return o;
}

const char *cl_path(const s_init_t *in, const char *rel)
{
    static char buf[4][PATH_MAX];
    static int slot;
    char *p = buf[slot++ & 3];
    if (cl_fmt(p, PATH_MAX, "%s/%s", in->tmp, rel) != 0)
        p[0] = 0; /* fails at open() with ENOENT; paths are bounded before */
    return p;
}

int cl_track(s_init_t *in, const char *rel)
{
    if (in->n_files == S_FILES_MAX)
        return cl_fail("too many files");
    in->files[in->n_files] = strdup(rel);
    if (!in->files[in->n_files])
        return cl_fail("out of memory");
    in->n_files++;
    return 0;
}

/* Makes tmp/rel a folder (0700). */
int cl_mkdir(s_init_t *in, const char *rel)
{
    if (mkdir(cl_path(in, rel), 0700) != 0)
        return cl_fail("%s: %s", cl_path(in, rel), strerror(errno));
    return 0;
}

/* Writes text to tmp/rel, created exclusively with mode (0600 or 0700). */
int cl_write(s_init_t *in, const char *rel, const char *text, mode_t mode)
{
    const char *path = cl_path(in, rel);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0)
        return cl_fail("%s: %s", path, strerror(errno));
    int rc = fchmod(fd, mode);
    size_t n = strlen(text), off = 0;
    while (rc == 0 && off < n) {
        ssize_t w = write(fd, text + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            rc = -1;
        else
            off += (size_t)w;
    }
    if (rc == 0)
        rc = fsync(fd);
    if (close(fd) != 0)
        rc = -1;
    if (rc != 0) {
        int e = errno;
        unlink(path);
        return cl_fail("%s: %s", path, strerror(e));
    }
    return cl_track(in, rel);
}

/* A CURVE pair as tmp/dir/name.key + .pub (0600); pub and sec (Z85) out. */
int cl_keypair(s_init_t *in, const char *dir, const char *name, char *pub, char *sec)
{
    char rel[256], err[512];
    cl_fmt(rel, sizeof rel, "%s/%s", dir, name);
    if (sw_keys_generate(cl_path(in, rel), pub, err, sizeof err) != 0)
        return cl_fail("%s", err);
    char k[300], p[300];
    cl_fmt(k, sizeof k, "%s.key", rel);
    cl_fmt(p, sizeof p, "%s.pub", rel);
    if (cl_track(in, k) != 0 || cl_track(in, p) != 0)
        return -1;
    if (chmod(cl_path(in, p), 0600) != 0)
        return cl_fail("%s: %s", cl_path(in, p), strerror(errno));
    char pub2[SW_KEY_Z85_LEN + 1];
    if (sw_keys_load_secret(cl_path(in, k), pub2, sec, err, sizeof err) != 0)
        return cl_fail("%s", err);
    return strcmp(pub, pub2) == 0 ? 0 : cl_fail("%s: the key read back differs", k);
}

/* A sealing key (32 random bytes, Z85) in tmp/rel, made by gen (the cluster
 * or the access key's generator); its Z85 text out. */
int cl_sealing_key(s_init_t *in, const char *rel, int (*gen)(const char *, char *, size_t),
                   char *z85)
{
    char err[512];
    uint8_t key[SW_CLUSTER_KEY_BYTES];
    if (gen(cl_path(in, rel), err, sizeof err) != 0 || cl_track(in, rel) != 0 ||
        sw_cluster_key_load(cl_path(in, rel), key, err, sizeof err) != 0)
        return cl_fail("%s", err);
    char *ok = zmq_z85_encode(z85, key, sizeof key);
    sodium_memzero(key, sizeof key);
    return ok ? 0 : cl_fail("Z85 encoding failed");
}

/* Copies the text of tmp/from into tmp/to (0600). */
int cl_copy(s_init_t *in, const char *from, const char *to)
{
    FILE *f = fopen(cl_path(in, from), "r");
    if (!f)
        return cl_fail("%s: %s", cl_path(in, from), strerror(errno));
    char text[S_TEXT_MAX];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    int rc = cl_write(in, to, text, 0600);
    sodium_memzero(text, sizeof text);
    return rc;
}
