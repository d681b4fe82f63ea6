/*
 * hub_cache.c - the environment (HF_ENDPOINT, HF_HOME, HF_HUB_CACHE,
 * HF_TOKEN, HF_HUB_OFFLINE) and huggingface_hub's cache layout (hub.h):
 * snapshots linked to blobs, the refs of branches and tags, the per-file
 * locks. What the cache holds is read back with the same suspicion as what
 * the hub sends: a ref must name a hex commit.
 */
#include "hub_impl.h"

#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_DEFAULT_ENDPOINT "https://huggingface.co"

/* snprintf into a path buffer: 0, or -1 when it does not fit (the path is then unusable). */
int hub_pathf(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

static int s_truthy(const char *v)
{
    return v && (!strcmp(v, "1") || !strcasecmp(v, "on") || !strcasecmp(v, "yes") ||
                 !strcasecmp(v, "true"));
}

/* The first line of a small file, trimmed, into out; 0 when there was one. */
static int s_read_line(const char *path, char *out, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char *r = fgets(out, (int)len, f);
    fclose(f);
    if (!r)
        return -1;
    out[strcspn(out, "\r\n")] = 0;
    size_t n = strlen(out);
    while (n && (out[n - 1] == ' ' || out[n - 1] == '\t'))
        out[--n] = 0;
    return n ? 0 : -1;
}

int hub_env_load(hub_env_t *e, const sw_hub_ref_t *ref, char *err, size_t err_len)
{
    memset(e, 0, sizeof *e);
    const char *ep = getenv("HF_ENDPOINT");
    snprintf(e->endpoint, sizeof e->endpoint, "%s", ep && *ep ? ep : S_DEFAULT_ENDPOINT);
    size_t el = strlen(e->endpoint);
    while (el && e->endpoint[el - 1] == '/')
        e->endpoint[--el] = 0;
    if (strncmp(e->endpoint, "http://", 7) && strncmp(e->endpoint, "https://", 8)) {
        sw_errf(err, err_len, "HF_ENDPOINT '%s' is not an http(s):// URL", e->endpoint);
        return -1;
    }
    char home[HUB_PATH];
    const char *hf_home = getenv("HF_HOME"), *xdg = getenv("XDG_CACHE_HOME"),
               *user = getenv("HOME");
    int hr = -1;
    if (hf_home && *hf_home)
        hr = hub_pathf(home, sizeof home, "%s", hf_home);
    else if (xdg && *xdg)
        hr = hub_pathf(home, sizeof home, "%s/huggingface", xdg);
    else if (user && *user)
        hr = hub_pathf(home, sizeof home, "%s/.cache/huggingface", user);
    if (hr != 0) {
        sw_errf(err, err_len, "no usable cache folder: set HF_HOME (or HF_HUB_CACHE)");
        return -1;
    }
    const char *cache = getenv("HF_HUB_CACHE");
    if (!cache || !*cache)
        cache = getenv("HUGGINGFACE_HUB_CACHE"); /* the older name */
    if (hub_pathf(e->cache, sizeof e->cache, "%s%s", cache && *cache ? cache : home,
                  cache && *cache ? "" : "/hub") != 0) {
        sw_errf(err, err_len, "the cache path is too long");
        return -1;
    }
    const char *tok = getenv("HF_TOKEN");
    if (tok && *tok) {
        snprintf(e->token, sizeof e->token, "%s", tok);
    } else {
        char tpath[HUB_PATH];
        const char *tp = getenv("HF_TOKEN_PATH");
        if (hub_pathf(tpath, sizeof tpath, "%s%s", tp && *tp ? tp : home,
                      tp && *tp ? "" : "/token") != 0 ||
            s_read_line(tpath, e->token, sizeof e->token) != 0)
            e->token[0] = 0;
    }
    for (const char *c = e->token; *c; c++)
        if ((unsigned char)*c < 0x21 || (unsigned char)*c > 0x7e) {
            sw_errf(err, err_len, "HF_TOKEN holds a character a token cannot have");
            return -1;
        }
    e->offline = s_truthy(getenv("HF_HUB_OFFLINE"));
    char folder[256];
    snprintf(folder, sizeof folder, "models--%s", ref->repo);
    for (char *c = folder; *c; c++)
        if (*c == '/') {
            memmove(c + 2, c + 1, strlen(c + 1) + 1);
            c[0] = c[1] = '-';
        }
    if ((size_t)snprintf(e->repo_dir, sizeof e->repo_dir, "%s/%s", e->cache, folder) >=
        sizeof e->repo_dir) {
        sw_errf(err, err_len, "the cache path is too long");
        return -1;
    }
    return 0;
}

/* mkdir -p of the folder holding path (up to its last '/'), or of path itself when whole. */
int hub_mkdirs(const char *path, int whole, char *err, size_t err_len)
{
    char p[HUB_PATH];
    snprintf(p, sizeof p, "%s", path);
    if (!whole) {
        char *slash = strrchr(p, '/');
        if (!slash)
            return 0;
        *slash = 0;
    }
    for (char *c = p + 1;; c++) {
        if (*c == '/' || !*c) {
            char keep = *c;
            *c = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                sw_errf(err, err_len, "cannot create %s: %s", p, strerror(errno));
                return -1;
            }
            *c = keep;
            if (!keep)
                return 0;
        }
    }
}

int hub_is_hex(const char *s, size_t n)
{
    if (strlen(s) != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

/* The cached snapshot file of ref at commit, when it exists: 0 with path. */
static int s_snapshot_path(const hub_env_t *e, const char *commit, const char *file, char *path,
                           size_t len)
{
    if ((size_t)snprintf(path, len, "%s/snapshots/%s/%s", e->repo_dir, commit, file) >= len)
        return -1;
    return 0;
}

/* The commit the cache has for ref->revision (a commit itself, or refs/REV): 0 with commit. */
int hub_cached_commit(const hub_env_t *e, const sw_hub_ref_t *ref, char commit[41])
{
    if (hub_is_hex(ref->revision, 40)) {
        memcpy(commit, ref->revision, 41);
        return 0;
    }
    char p[HUB_PATH], line[128];
    if (hub_pathf(p, sizeof p, "%s/refs/%s", e->repo_dir, ref->revision) != 0 ||
        s_read_line(p, line, sizeof line) != 0 || !hub_is_hex(line, 40))
        return -1;
    memcpy(commit, line, 41);
    return 0;
}

/* A cached file for ref (with file set): 0 and its path when the snapshot link resolves. */
int hub_from_cache(const hub_env_t *e, const sw_hub_ref_t *ref, const char *file, char *path,
                   size_t len)
{
    char commit[41];
    if (hub_cached_commit(e, ref, commit) != 0 || s_snapshot_path(e, commit, file, path, len) != 0)
        return -1;
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) ? 0 : -1;
}

/* Takes the per-file lock (waiting, with one line, while another process downloads). fd or -1. */
int hub_lock(const hub_env_t *e, const char *etag, volatile sig_atomic_t *stop, char *err,
             size_t err_len)
{
    char p[HUB_PATH];
    const char *folder = strrchr(e->repo_dir, '/');
    if (hub_pathf(p, sizeof p, "%s/.locks%s/%s.lock", e->cache, folder ? folder : "", etag) != 0) {
        sw_errf(err, err_len, "the cache path is too long");
        return -1;
    }
    if (hub_mkdirs(p, 0, err, err_len) != 0)
        return -1;
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        sw_errf(err, err_len, "cannot open the lock %s: %s", p, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
        return fd;
    fprintf(stderr, "pull: another process is downloading this file; waiting for it\n");
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (stop && *stop) {
            close(fd);
            sw_errf(err, err_len, "interrupted");
            return -1;
        }
        usleep(200000);
    }
    return fd;
}

/* snapshots/COMMIT/FILE -> ../../blobs/ETAG (one more ../ per folder in FILE). */
int hub_link(const hub_env_t *e, const hub_meta_t *m, const char *file, char *path, size_t len,
             char *err, size_t err_len)
{
    if (s_snapshot_path(e, m->commit, file, path, len) != 0) {
        sw_errf(err, err_len, "the cache path is too long");
        return -1;
    }
    if (hub_mkdirs(path, 0, err, err_len) != 0)
        return -1;
    char target[HUB_PATH] = "../../";
    for (const char *c = file; (c = strchr(c, '/')); c++)
        strcat(target, "../");
    strcat(target, "blobs/");
    strcat(target, m->etag);
    char cur[HUB_PATH];
    ssize_t n = readlink(path, cur, sizeof cur - 1);
    if (n >= 0) {
        cur[n] = 0;
        if (!strcmp(cur, target))
            return 0;
    }
    unlink(path);
    if (symlink(target, path) != 0) {
        sw_errf(err, err_len, "cannot link %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* refs/REVISION <- commit (unless the revision is the commit). */
int hub_write_ref(const hub_env_t *e, const sw_hub_ref_t *ref, const char *commit, char *err,
                  size_t err_len)
{
    if (!strcmp(ref->revision, commit))
        return 0;
    char p[HUB_PATH], tmp[HUB_PATH + 32];
    if (hub_pathf(p, sizeof p, "%s/refs/%s", e->repo_dir, ref->revision) != 0 ||
        hub_pathf(tmp, sizeof tmp, "%s.%d.tmp", p, (int)getpid()) != 0) {
        sw_errf(err, err_len, "the cache path is too long");
        return -1;
    }
    if (hub_mkdirs(p, 0, err, err_len) != 0)
        return -1;
    FILE *f = fopen(tmp, "w");
    if (!f || fputs(commit, f) < 0 || fclose(f) != 0 || rename(tmp, p) != 0) {
        sw_errf(err, err_len, "cannot write %s: %s", p, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}
