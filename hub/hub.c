/*
 * hub.c - model files from the Hugging Face hub into huggingface_hub's cache
 * (see hub.h): reference parsing, the cache layout, the resolve HEAD, the
 * resumable, sha256-checked download (libcurl), and the --model hf: form.
 *
 * Everything the hub (or anything pretending to be it) sends is hostile:
 * commits and etags must be lower-case hex of the right length before they
 * become file names, sizes are bounded, a body never grows past the size
 * announced, and JSON listings are bounded and type-checked.
 */
#include "hub.h"

#include "gguf.h"
#include "log.h"
#include "partial.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define S_MAX_FILE (1ull << 41)   /* 2 TiB: larger "sizes" are refused */
#define S_MAX_API_BODY (8u << 20) /* bytes of a repo listing */
#define S_ATTEMPTS 5              /* download attempts in one run (each resumes) */
#define S_REDIRECTS 5             /* relative redirects followed (renamed repos) */
#define S_DEFAULT_ENDPOINT "https://huggingface.co"
#define S_PATH 4096

/* snprintf into a path buffer: 0, or -1 when it does not fit (the path is then unusable). */
static int s_pathf(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int s_pathf(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* ---- references ------------------------------------------------------------------------- */

static int s_name_ok(const char *s, size_t n, const char *extra)
{
    if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              strchr(extra, c)) ||
            c == 0)
            return 0;
    }
    return 1;
}

/* 'ORG/NAME'. */
static int s_repo_ok(const char *r)
{
    const char *slash = strchr(r, '/');
    return slash && !strchr(slash + 1, '/') && s_name_ok(r, (size_t)(slash - r), "._-") &&
           s_name_ok(slash + 1, strlen(slash + 1), "._-") && strlen(r) < 200;
}

/* Components separated by '/', none empty, '.' or '..'. */
static int s_path_ok(const char *p, const char *extra, size_t max)
{
    if (!*p || strlen(p) >= max)
        return 0;
    for (const char *c = p;;) {
        const char *slash = strchr(c, '/');
        size_t n = slash ? (size_t)(slash - c) : strlen(c);
        if (!s_name_ok(c, n, extra))
            return 0;
        if (!slash)
            return 1;
        c = slash + 1;
    }
}

#define S_FILE_CHARS "._-+()[] "
#define S_REV_CHARS "._-"

static int s_set(char *dst, size_t dst_len, const char *src, size_t n)
{
    if (n >= dst_len)
        return -1;
    memcpy(dst, src, n);
    dst[n] = 0;
    return 0;
}

/* Splits a trailing @REVISION off text (into ref->revision, default main); the rest's length. */
static int s_revision(const char *text, sw_hub_ref_t *ref, size_t *rest, char *err, size_t err_len)
{
    const char *at = strrchr(text, '@');
    snprintf(ref->revision, sizeof ref->revision, "main");
    *rest = strlen(text);
    if (!at)
        return 0;
    if (s_set(ref->revision, sizeof ref->revision, at + 1, strlen(at + 1)) != 0 ||
        !s_path_ok(ref->revision, S_REV_CHARS, sizeof ref->revision)) {
        sw_errf(err, err_len, "'%s' is not a revision (a branch, tag or commit)", at + 1);
        return -1;
    }
    *rest = (size_t)(at - text);
    return 0;
}

int sw_hub_ref_parse(const char *text, sw_hub_ref_t *ref, char *err, size_t err_len)
{
    memset(ref, 0, sizeof *ref);
    size_t n;
    if (!text || s_revision(text, ref, &n, err, err_len) != 0)
        return -1;
    const char *colon = memchr(text, ':', n);
    size_t rl = colon ? (size_t)(colon - text) : n;
    if (s_set(ref->repo, sizeof ref->repo, text, rl) != 0 || !s_repo_ok(ref->repo)) {
        sw_errf(err, err_len,
                "'%.*s' is not a hub repository: expected ORG/NAME (e.g. "
                "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF)",
                (int)(rl < 200 ? rl : 200), text);
        return -1;
    }
    if (!colon)
        return 0;
    const char *f = colon + 1;
    size_t fl = n - rl - 1;
    if (memchr(f, '.', fl) || memchr(f, '/', fl)) {
        if (s_set(ref->file, sizeof ref->file, f, fl) != 0 ||
            !s_path_ok(ref->file, S_FILE_CHARS, sizeof ref->file)) {
            sw_errf(err, err_len, "'%.*s' is not a file name in a repository",
                    (int)(fl < 200 ? fl : 200), f);
            return -1;
        }
    } else if (s_set(ref->tag, sizeof ref->tag, f, fl) != 0 ||
               !s_name_ok(ref->tag, strlen(ref->tag), "._-")) {
        sw_errf(err, err_len, "'%.*s' is neither a file name nor a quantization tag (Q4_K_M)",
                (int)(fl < 200 ? fl : 200), f);
        return -1;
    }
    return 0;
}

int sw_hub_uri_parse(const char *uri, sw_hub_ref_t *ref, char *err, size_t err_len)
{
    memset(ref, 0, sizeof *ref);
    size_t pl = strlen(SW_HUB_PREFIX), n;
    if (!uri || strncmp(uri, SW_HUB_PREFIX, pl) != 0) {
        sw_errf(err, err_len, "'%s' does not start with %s", uri ? uri : "", SW_HUB_PREFIX);
        return -1;
    }
    const char *t = uri + pl;
    if (s_revision(t, ref, &n, err, err_len) != 0)
        return -1;
    const char *s1 = memchr(t, '/', n);
    const char *s2 = s1 ? memchr(s1 + 1, '/', n - (size_t)(s1 + 1 - t)) : NULL;
    if (!s2 || s_set(ref->repo, sizeof ref->repo, t, (size_t)(s2 - t)) != 0 ||
        !s_repo_ok(ref->repo) ||
        s_set(ref->file, sizeof ref->file, s2 + 1, n - (size_t)(s2 + 1 - t)) != 0 ||
        !s_path_ok(ref->file, S_FILE_CHARS, sizeof ref->file)) {
        sw_errf(err, err_len,
                "'%s' is not hf:ORG/NAME/FILE[@REVISION] (e.g. "
                "hf:Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf)",
                uri);
        return -1;
    }
    return 0;
}

/* ---- environment and cache layout ------------------------------------------------------- */

typedef struct s_env {
    char endpoint[512];    /* hub base URL, no trailing '/' */
    char cache[S_PATH];    /* hub cache folder */
    char token[512];       /* bearer token, "" = none */
    int offline;           /* HF_HUB_OFFLINE */
    char repo_dir[S_PATH]; /* cache/models--ORG--NAME */
} s_env_t;

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

static int s_env_load(s_env_t *e, const sw_hub_ref_t *ref, char *err, size_t err_len)
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
    char home[S_PATH];
    const char *hf_home = getenv("HF_HOME"), *xdg = getenv("XDG_CACHE_HOME"),
               *user = getenv("HOME");
    int hr = -1;
    if (hf_home && *hf_home)
        hr = s_pathf(home, sizeof home, "%s", hf_home);
    else if (xdg && *xdg)
        hr = s_pathf(home, sizeof home, "%s/huggingface", xdg);
    else if (user && *user)
        hr = s_pathf(home, sizeof home, "%s/.cache/huggingface", user);
    if (hr != 0) {
        sw_errf(err, err_len, "no usable cache folder: set HF_HOME (or HF_HUB_CACHE)");
        return -1;
    }
    const char *cache = getenv("HF_HUB_CACHE");
    if (!cache || !*cache)
        cache = getenv("HUGGINGFACE_HUB_CACHE"); /* the older name */
    if (s_pathf(e->cache, sizeof e->cache, "%s%s", cache && *cache ? cache : home,
                cache && *cache ? "" : "/hub") != 0) {
        sw_errf(err, err_len, "the cache path is too long");
        return -1;
    }
    const char *tok = getenv("HF_TOKEN");
    if (tok && *tok) {
        snprintf(e->token, sizeof e->token, "%s", tok);
    } else {
        char tpath[S_PATH];
        const char *tp = getenv("HF_TOKEN_PATH");
        if (s_pathf(tpath, sizeof tpath, "%s%s", tp && *tp ? tp : home,
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
static int s_mkdirs(const char *path, int whole, char *err, size_t err_len)
{
    char p[S_PATH];
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

static int s_is_hex(const char *s, size_t n)
{
    if (strlen(s) != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

/* The cached snapshot file of ref at commit, when it exists: 0 with path. */
static int s_snapshot_path(const s_env_t *e, const char *commit, const char *file, char *path,
                           size_t len)
{
    if ((size_t)snprintf(path, len, "%s/snapshots/%s/%s", e->repo_dir, commit, file) >= len)
        return -1;
    return 0;
}

/* The commit the cache has for ref->revision (a commit itself, or refs/REV): 0 with commit. */
static int s_cached_commit(const s_env_t *e, const sw_hub_ref_t *ref, char commit[41])
{
    if (s_is_hex(ref->revision, 40)) {
        memcpy(commit, ref->revision, 41);
        return 0;
    }
    char p[S_PATH], line[128];
    if (s_pathf(p, sizeof p, "%s/refs/%s", e->repo_dir, ref->revision) != 0 ||
        s_read_line(p, line, sizeof line) != 0 || !s_is_hex(line, 40))
        return -1;
    memcpy(commit, line, 41);
    return 0;
}

/* A cached file for ref (with file set): 0 and its path when the snapshot link resolves. */
static int s_from_cache(const s_env_t *e, const sw_hub_ref_t *ref, const char *file, char *path,
                        size_t len)
{
    char commit[41];
    if (s_cached_commit(e, ref, commit) != 0 || s_snapshot_path(e, commit, file, path, len) != 0)
        return -1;
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) ? 0 : -1;
}

/* ---- HTTP ------------------------------------------------------------------------------- */

typedef struct s_resp {
    long status;           /* of the last response */
    char commit[64];       /* X-Repo-Commit */
    char linked_etag[160]; /* X-Linked-Etag */
    char etag[160];        /* ETag */
    long long linked_size; /* X-Linked-Size, -1 = none */
    long long length;      /* Content-Length, -1 = none */
    char location[2048];   /* Location */
    char error_code[64];   /* X-Error-Code */
    char error_msg[256];   /* X-Error-Message */
    long long range_start; /* Content-Range start, -1 = none */
    long long range_end;   /* its last byte, -1 = none */
    long long range_total; /* its total size, -1 = none or '*' */
} s_resp_t;

static void s_resp_reset(s_resp_t *r)
{
    memset(r, 0, sizeof *r);
    r->linked_size = r->length = r->range_start = r->range_end = r->range_total = -1;
}

/* Copies a header value (trimmed, quotes and W/ removed) into out. */
static void s_hval(const char *v, size_t n, char *out, size_t len, int unquote)
{
    while (n && (*v == ' ' || *v == '\t')) {
        v++;
        n--;
    }
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
        n--;
    if (unquote && n >= 2 && v[0] == 'W' && v[1] == '/') {
        v += 2;
        n -= 2;
    }
    if (unquote && n >= 2 && v[0] == '"' && v[n - 1] == '"') {
        v++;
        n -= 2;
    }
    if (n >= len)
        n = len - 1;
    memcpy(out, v, n);
    out[n] = 0;
}

static long long s_num(const char *v, size_t n)
{
    char buf[32];
    s_hval(v, n, buf, sizeof buf, 0);
    char *end;
    errno = 0;
    long long x = strtoll(buf, &end, 10);
    return errno || end == buf || *end || x < 0 ? -1 : x;
}

static size_t s_on_header(char *buf, size_t size, size_t n, void *ud)
{
    s_resp_t *r = ud;
    size_t len = size * n;
    if (len >= 5 && !strncmp(buf, "HTTP/", 5)) { /* a new response (after a redirect) */
        s_resp_t fresh;
        s_resp_reset(&fresh);
        *r = fresh;
        const char *sp = memchr(buf, ' ', len);
        if (sp)
            r->status = strtol(sp + 1, NULL, 10);
        return len;
    }
    const char *colon = memchr(buf, ':', len);
    if (!colon)
        return len;
    size_t kl = (size_t)(colon - buf), vl = len - kl - 1;
    const char *v = colon + 1;
#define S_IS(name) (kl == sizeof(name) - 1 && !strncasecmp(buf, name, kl))
    if (S_IS("x-repo-commit"))
        s_hval(v, vl, r->commit, sizeof r->commit, 0);
    else if (S_IS("x-linked-etag"))
        s_hval(v, vl, r->linked_etag, sizeof r->linked_etag, 1);
    else if (S_IS("etag"))
        s_hval(v, vl, r->etag, sizeof r->etag, 1);
    else if (S_IS("x-linked-size"))
        r->linked_size = s_num(v, vl);
    else if (S_IS("content-length"))
        r->length = s_num(v, vl);
    else if (S_IS("location"))
        s_hval(v, vl, r->location, sizeof r->location, 0);
    else if (S_IS("x-error-code"))
        s_hval(v, vl, r->error_code, sizeof r->error_code, 0);
    else if (S_IS("x-error-message"))
        s_hval(v, vl, r->error_msg, sizeof r->error_msg, 0);
    else if (S_IS("content-range")) {
        char cr[96];
        s_hval(v, vl, cr, sizeof cr, 0);
        long long a, b, t;
        int got = sscanf(cr, "bytes %lld-%lld/%lld", &a, &b, &t);
        if (got >= 1 && a >= 0)
            r->range_start = a;
        if (got == 3 && b >= a && t > b) {
            r->range_end = b;
            r->range_total = t;
        }
    }
#undef S_IS
    return len;
}

/* 1 when url has the same scheme, host and port as the endpoint (the token may go there). */
static int s_same_origin(const char *url, const char *endpoint)
{
    int same = 0;
    CURLU *a = curl_url(), *b = curl_url();
    char *sa = NULL, *sb = NULL, *ha = NULL, *hb = NULL, *pa = NULL, *pb = NULL;
    if (a && b && !curl_url_set(a, CURLUPART_URL, url, 0) &&
        !curl_url_set(b, CURLUPART_URL, endpoint, 0) &&
        !curl_url_get(a, CURLUPART_SCHEME, &sa, 0) && !curl_url_get(b, CURLUPART_SCHEME, &sb, 0) &&
        !curl_url_get(a, CURLUPART_HOST, &ha, 0) && !curl_url_get(b, CURLUPART_HOST, &hb, 0) &&
        !curl_url_get(a, CURLUPART_PORT, &pa, CURLU_DEFAULT_PORT) &&
        !curl_url_get(b, CURLUPART_PORT, &pb, CURLU_DEFAULT_PORT))
        same = !strcasecmp(sa, sb) && !strcasecmp(ha, hb) && !strcmp(pa, pb);
    curl_free(sa);
    curl_free(sb);
    curl_free(ha);
    curl_free(hb);
    curl_free(pa);
    curl_free(pb);
    curl_url_cleanup(a);
    curl_url_cleanup(b);
    return same;
}

/* A curl handle for url with the common settings; *hdrs receives the header list to free. */
static CURL *s_curl(const s_env_t *e, const char *url, s_resp_t *resp, struct curl_slist **hdrs)
{
    CURL *c = curl_easy_init();
    if (!c)
        return NULL;
    *hdrs = NULL;
    if (e->token[0] && s_same_origin(url, e->endpoint)) {
        char auth[600];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", e->token);
        *hdrs = curl_slist_append(*hdrs, auth);
        sodium_memzero(auth, sizeof auth);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hdrs);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "shardwire/0.1 (hf-hub-compatible)");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L); /* stalled for 60 s: give up, resume */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#endif
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, s_on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, resp);
    return c;
}

/* The message for a failed hub answer. */
static void s_http_error(const s_resp_t *r, const sw_hub_ref_t *ref, const char *file, char *err,
                         size_t err_len)
{
    const char *code = r->error_code;
    if (r->status == 401 || r->status == 403 || !strcmp(code, "GatedRepo"))
        sw_errf(err, err_len,
                "the hub refused access to %s (HTTP %ld%s%s): the repository is private or "
                "gated, or does not exist; accept its terms on the hub and set HF_TOKEN (or put "
                "the token in $HF_HOME/token)",
                ref->repo, r->status, code[0] ? ", " : "", code);
    else if (!strcmp(code, "RepoNotFound"))
        sw_errf(err, err_len, "the hub has no repository %s (check the name)", ref->repo);
    else if (!strcmp(code, "RevisionNotFound"))
        sw_errf(err, err_len, "%s has no revision '%s'", ref->repo, ref->revision);
    else if (r->status == 404 || !strcmp(code, "EntryNotFound"))
        sw_errf(err, err_len,
                "%s has no file '%s' at revision %s (shardwire pull %s lists its .gguf files)",
                ref->repo, file, ref->revision, ref->repo);
    else
        sw_errf(err, err_len, "the hub answered HTTP %ld for %s/%s%s%s", r->status, ref->repo, file,
                r->error_msg[0] ? ": " : "", r->error_msg);
}

/* 1 when a curl failure means the hub is unreachable (a cached copy may do). */
static int s_unreachable(CURLcode cc)
{
    return cc == CURLE_COULDNT_RESOLVE_HOST || cc == CURLE_COULDNT_CONNECT ||
           cc == CURLE_OPERATION_TIMEDOUT || cc == CURLE_COULDNT_RESOLVE_PROXY ||
           cc == CURLE_SSL_CONNECT_ERROR || cc == CURLE_GOT_NOTHING || cc == CURLE_RECV_ERROR ||
           cc == CURLE_SEND_ERROR;
}

/* Appends path's segments to url, percent-encoded. */
static int s_url_path(char *url, size_t len, const char *path)
{
    for (const char *c = path; *c;) {
        const char *slash = strchr(c, '/');
        size_t n = slash ? (size_t)(slash - c) : strlen(c);
        char *esc = curl_easy_escape(NULL, c, (int)n);
        if (!esc)
            return -1;
        size_t ul = strlen(url);
        int w = snprintf(url + ul, len - ul, "%s%s", esc, slash ? "/" : "");
        curl_free(esc);
        if (w < 0 || (size_t)w >= len - ul)
            return -1;
        c = slash ? slash + 1 : c + n;
    }
    return 0;
}

/* The hub's metadata for a file. */
typedef struct s_meta {
    char commit[41]; /* the revision's commit */
    char etag[65];   /* sha256 (LFS) or git blob sha1: the blob's name */
    int is_sha256;   /* etag is the file's sha256 */
    long long size;  /* bytes, -1 = unknown */
    char url[2048];  /* where to GET it */
} s_meta_t;

/*
 * HEAD .../resolve/REV/FILE. 0 with meta; 1 when the hub is unreachable (err
 * says why); -1 with err for an answer that settles it (404, 401, bad headers).
 */
static int s_resolve(const s_env_t *e, const sw_hub_ref_t *ref, const char *file, s_meta_t *m,
                     char *err, size_t err_len)
{
    char url[2048];
    snprintf(url, sizeof url, "%s/%s/resolve/", e->endpoint, ref->repo);
    if (s_url_path(url, sizeof url, ref->revision) != 0 || strlen(url) + 1 >= sizeof url) {
        sw_errf(err, err_len, "URL too long");
        return -1;
    }
    strcat(url, "/");
    if (s_url_path(url, sizeof url, file) != 0) {
        sw_errf(err, err_len, "URL too long");
        return -1;
    }
    for (int hop = 0;; hop++) {
        s_resp_t r;
        s_resp_reset(&r);
        struct curl_slist *hdrs = NULL;
        CURL *c = s_curl(e, url, &r, &hdrs);
        if (!c) {
            sw_errf(err, err_len, "libcurl cannot start");
            return -1;
        }
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
        curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
        CURLcode cc = curl_easy_perform(c);
        char *eff = NULL;
        curl_easy_getinfo(c, CURLINFO_EFFECTIVE_URL, &eff);
        char base[2048];
        snprintf(base, sizeof base, "%s", eff ? eff : url);
        curl_easy_cleanup(c);
        curl_slist_free_all(hdrs);
        if (cc != CURLE_OK) {
            sw_errf(err, err_len, "cannot reach the hub at %s: %s", e->endpoint,
                    curl_easy_strerror(cc));
            return s_unreachable(cc) ? 1 : -1;
        }
        if (r.status >= 300 && r.status < 400 && r.location[0] == '/' && !r.commit[0]) {
            /* a relative redirect: the repository was renamed */
            if (hop >= S_REDIRECTS) {
                sw_errf(err, err_len, "too many redirects from the hub");
                return -1;
            }
            int n = snprintf(url, sizeof url, "%s%s", e->endpoint, r.location);
            if (n < 0 || (size_t)n >= sizeof url) {
                sw_errf(err, err_len, "the hub redirected to a location too long to follow");
                return -1;
            }
            continue;
        }
        if (r.status >= 400 || (r.status >= 300 && !r.location[0])) {
            s_http_error(&r, ref, file, err, err_len);
            return -1;
        }
        const char *etag = r.linked_etag[0] ? r.linked_etag : r.etag;
        if (!s_is_hex(r.commit, 40)) {
            sw_errf(err, err_len, "the hub sent no valid X-Repo-Commit for %s/%s", ref->repo, file);
            return -1;
        }
        if (!s_is_hex(etag, 64) && !s_is_hex(etag, 40)) {
            sw_errf(err, err_len, "the hub sent an ETag for %s/%s that is not a hash ('%.70s')",
                    ref->repo, file, etag);
            return -1;
        }
        memcpy(m->commit, r.commit, 41);
        memcpy(m->etag, etag, strlen(etag) + 1); /* 40 or 64 hex digits */
        m->is_sha256 = s_is_hex(etag, 64);
        m->size = r.linked_size >= 0 ? r.linked_size : r.status < 300 ? r.length : -1;
        if (m->size > (long long)S_MAX_FILE) {
            sw_errf(err, err_len, "the hub announces %lld bytes for %s: more than shardwire takes",
                    m->size, file);
            return -1;
        }
        if (r.status >= 300) {
            CURLU *u = curl_url();
            char *abs = NULL;
            int ok = u && !curl_url_set(u, CURLUPART_URL, base, 0) &&
                     !curl_url_set(u, CURLUPART_URL, r.location, 0) &&
                     !curl_url_get(u, CURLUPART_URL, &abs, 0);
            if (ok)
                snprintf(m->url, sizeof m->url, "%s", abs);
            curl_free(abs);
            curl_url_cleanup(u);
            if (!ok) {
                sw_errf(err, err_len, "the hub sent a Location that is not a URL");
                return -1;
            }
        } else {
            snprintf(m->url, sizeof m->url, "%s", url);
        }
        return 0;
    }
}

/* ---- choosing a file from the repository listing ---------------------------------------- */

typedef struct s_body {
    char *data;
    size_t len;
    int overflow;
} s_body_t;

static size_t s_on_body(char *buf, size_t size, size_t n, void *ud)
{
    s_body_t *b = ud;
    size_t len = size * n;
    if (b->len + len > S_MAX_API_BODY) {
        b->overflow = 1;
        return 0;
    }
    char *g = realloc(b->data, b->len + len + 1);
    if (!g)
        return 0;
    memcpy(g + b->len, buf, len);
    b->data = g;
    b->len += len;
    b->data[b->len] = 0;
    return len;
}

static int s_tag_match(const char *name, const char *tag)
{
    if (!tag[0])
        return 1;
    size_t tl = strlen(tag);
    for (const char *p = name; *p; p++)
        if (!strncasecmp(p, tag, tl))
            return 1;
    return 0;
}

static int s_is_gguf(const char *name)
{
    size_t n = strlen(name);
    return n > 5 && !strcasecmp(name + n - 5, ".gguf");
}

/* Picks the one .gguf file (matching ref->tag) from names; 0 with file, -1 with err. */
static int s_pick(const sw_hub_ref_t *ref, const char *const *names, int n, char *file, size_t len,
                  char *err, size_t err_len)
{
    int found = 0, pick = -1;
    char list[1024] = "";
    for (int i = 0; i < n; i++) {
        if (!s_is_gguf(names[i]) || !s_tag_match(names[i], ref->tag))
            continue;
        if (found < 8) {
            size_t l = strlen(list);
            snprintf(list + l, sizeof list - l, "%s%s", l ? ", " : "", names[i]);
        }
        found++;
        pick = i;
    }
    if (found == 1)
        return snprintf(file, len, "%s", names[pick]) < (int)len ? 0 : -1;
    if (found == 0)
        sw_errf(err, err_len, "%s has no .gguf file%s%s", ref->repo,
                ref->tag[0] ? " matching " : "", ref->tag);
    else
        sw_errf(err, err_len, "%s has %d .gguf files%s%s: %s%s; name one: shardwire pull %s:FILE",
                ref->repo, found, ref->tag[0] ? " matching " : "", ref->tag, list,
                found > 8 ? ", ..." : "", ref->repo);
    return -1;
}

/* The repository's file list from GET /api/models/REPO/revision/REV; then s_pick.
 * Returns like s_resolve (1 = unreachable). */
static int s_choose_online(const s_env_t *e, const sw_hub_ref_t *ref, char *file, size_t len,
                           char *err, size_t err_len)
{
    char url[1024];
    snprintf(url, sizeof url, "%s/api/models/%s/revision/", e->endpoint, ref->repo);
    if (s_url_path(url, sizeof url, ref->revision) != 0) {
        sw_errf(err, err_len, "URL too long");
        return -1;
    }
    s_resp_t r;
    s_resp_reset(&r);
    s_body_t b = {0};
    struct curl_slist *hdrs = NULL;
    CURL *c = s_curl(e, url, &r, &hdrs);
    if (!c) {
        sw_errf(err, err_len, "libcurl cannot start");
        return -1;
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    CURLcode cc = curl_easy_perform(c);
    curl_easy_cleanup(c);
    curl_slist_free_all(hdrs);
    int rc = -1;
    json_t *j = NULL;
    if (cc != CURLE_OK && !b.overflow) {
        sw_errf(err, err_len, "cannot reach the hub at %s: %s", e->endpoint,
                curl_easy_strerror(cc));
        rc = s_unreachable(cc) ? 1 : -1;
        goto out;
    }
    if (b.overflow) {
        sw_errf(err, err_len, "the hub's file list for %s is larger than %u bytes", ref->repo,
                S_MAX_API_BODY);
        goto out;
    }
    if (r.status >= 400) {
        s_http_error(&r, ref, "", err, err_len);
        goto out;
    }
    json_error_t je;
    j = b.data ? json_loads(b.data, 0, &je) : NULL;
    json_t *sib = j ? json_object_get(j, "siblings") : NULL;
    if (!json_is_array(sib)) {
        sw_errf(err, err_len, "the hub's file list for %s is not what the hub sends", ref->repo);
        goto out;
    }
    size_t n = json_array_size(sib);
    if (n > 100000)
        n = 100000;
    const char **names = calloc(n ? n : 1, sizeof *names);
    if (!names) {
        sw_errf(err, err_len, "out of memory");
        goto out;
    }
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *name = json_string_value(json_object_get(json_array_get(sib, i), "rfilename"));
        if (name && s_path_ok(name, S_FILE_CHARS, 400))
            names[k++] = name;
    }
    rc = s_pick(ref, names, k, file, len, err, err_len);
    free(names);
out:
    json_decref(j);
    free(b.data);
    return rc;
}

/* Adds the names in dir not yet in names (n of them, 64 at most); the new count. */
static int s_list_names(const char *dir, char buf[64][256], const char *names[64], int n)
{
    DIR *d = opendir(dir);
    for (struct dirent *de; d && n < 64 && (de = readdir(d));) {
        size_t l = strlen(de->d_name);
        if (de->d_name[0] == '.' || l >= 256 ||
            (l > 11 && !strcmp(de->d_name + l - 11, ".incomplete")) ||
            (l > 16 && !strcmp(de->d_name + l - 16, ".incomplete.head")))
            continue;
        int dup = 0;
        for (int i = 0; i < n && !dup; i++)
            dup = !strcmp(names[i], de->d_name);
        if (dup)
            continue;
        snprintf(buf[n], 256, "%s", de->d_name);
        names[n] = buf[n];
        n++;
    }
    if (d)
        closedir(d);
    return n;
}

/* Offline: the .gguf files of the cached snapshot (and of partial downloads). */
static int s_choose_cached(const s_env_t *e, const sw_hub_ref_t *ref, char *file, size_t len,
                           char *err, size_t err_len)
{
    char commit[41], dir[S_PATH];
    if (s_cached_commit(e, ref, commit) != 0) {
        sw_errf(err, err_len, "%s@%s is not in the cache %s", ref->repo, ref->revision, e->cache);
        return -1;
    }
    if (s_pathf(dir, sizeof dir, "%s/snapshots/%s", e->repo_dir, commit) != 0) {
        sw_errf(err, err_len, "the cache path is too long");
        return -1;
    }
    char buf[64][256];
    const char *names[64];
    int n = s_list_names(dir, buf, names, 0);
    /* and the files of partial downloads (shardwire-partial/COMMIT/layers-A-B/FILE) */
    if (s_pathf(dir, sizeof dir, "%s/shardwire-partial/%s", e->repo_dir, commit) == 0) {
        DIR *d = opendir(dir);
        for (struct dirent *de; d && (de = readdir(d));) {
            char sub[S_PATH];
            if (!strncmp(de->d_name, "layers-", 7) &&
                s_pathf(sub, sizeof sub, "%s/%s", dir, de->d_name) == 0)
                n = s_list_names(sub, buf, names, n);
        }
        if (d)
            closedir(d);
    }
    return s_pick(ref, names, n, file, len, err, err_len);
}

/* ---- download --------------------------------------------------------------------------- */

typedef struct s_dl {
    FILE *f;                      /* the .incomplete file */
    crypto_hash_sha256_state sha; /* over every byte in f */
    long long have;               /* bytes in f */
    long long start;              /* bytes in f when this attempt began */
    long long expect;             /* total size, -1 = unknown */
    s_resp_t resp;                /* headers of the current response */
    int checked;                  /* the response's status was looked at */
    int bad_status;               /* the response is not the file */
    int restart;                  /* the server ignored Range: start over */
    int write_err;                /* a local write failed (errno) */
    int too_big;                  /* more bytes than announced */
    const char *label;            /* file name for progress */
    int progress;                 /* enum sw_hub_progress */
    volatile sig_atomic_t *stop;  /* stop flag */
    double t0;                    /* start time of this run (s) */
    long long t0_have;            /* bytes at t0 */
    double last_draw;             /* last progress output (s) */
    int last_decile;              /* last 10 % step reported */
} s_dl_t;

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Hashes the first n bytes of f (resuming) into sha. 0 or -1. */
static int s_hash_existing(FILE *f, long long n, crypto_hash_sha256_state *sha)
{
    static unsigned char buf[1 << 20];
    if (fseeko(f, 0, SEEK_SET) != 0)
        return -1;
    while (n > 0) {
        size_t want = n > (long long)sizeof buf ? sizeof buf : (size_t)n;
        size_t got = fread(buf, 1, want, f);
        if (got != want)
            return -1;
        crypto_hash_sha256_update(sha, buf, got);
        n -= (long long)got;
    }
    return fseeko(f, 0, SEEK_END);
}

static void s_draw(s_dl_t *d, int final)
{
    if (d->progress == SW_HUB_QUIET || (d->expect >= 0 && d->expect < (1 << 20)))
        return; /* small files come and go at once */
    double now = s_now(), dt = now - d->t0;
    double rate = dt > 0.2 ? (d->have - d->t0_have) / dt : 0;
    double mb = d->have / 1e6, tot = d->expect > 0 ? d->expect / 1e6 : 0;
    int pct = d->expect > 0 ? (int)(100.0 * d->have / d->expect) : 0;
    if (d->progress == SW_HUB_BAR) {
        if (!final && now - d->last_draw < 0.1)
            return;
        d->last_draw = now;
        char eta[32] = "";
        if (rate > 0 && d->expect > 0)
            snprintf(eta, sizeof eta, "  ETA %.0f s", (d->expect - d->have) / rate);
        char bar[31];
        int fill = d->expect > 0 ? pct * 30 / 100 : 0;
        for (int i = 0; i < 30; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[30] = 0;
        fprintf(stderr, "\r%.40s [%s] %3d%% %.1f/%.1f MB  %.1f MB/s%s   ", d->label, bar, pct, mb,
                tot, rate / 1e6, final ? "" : eta);
        if (final)
            fprintf(stderr, "\n");
        return;
    }
    int dec = d->expect > 0 ? pct / 10 : (int)(mb / 100);
    if (dec <= d->last_decile && (!final || d->expect > 0))
        return;
    d->last_decile = dec;
    if (d->expect > 0)
        fprintf(stderr, "pull: %s: %d%% (%.1f of %.1f MB, %.1f MB/s)\n", d->label, pct, mb, tot,
                rate / 1e6);
    else
        fprintf(stderr, "pull: %s: %.1f MB (%.1f MB/s)\n", d->label, mb, rate / 1e6);
}

static size_t s_on_data(char *buf, size_t size, size_t n, void *ud)
{
    s_dl_t *d = ud;
    size_t len = size * n;
    if (!d->checked) {
        d->checked = 1;
        if (d->resp.status == 200 && d->start > 0) {
            d->restart = 1; /* the server sent the whole file: start over */
            return 0;
        }
        if (d->resp.status == 206 && d->resp.range_start != d->start) {
            d->restart = 1;
            return 0;
        }
        if (d->resp.status != 200 && d->resp.status != 206) {
            d->bad_status = 1;
            return 0;
        }
    }
    if (d->expect >= 0 && d->have + (long long)len > d->expect) {
        d->too_big = 1;
        return 0;
    }
    if ((long long)len > (long long)S_MAX_FILE - d->have) {
        d->too_big = 1;
        return 0;
    }
    if (fwrite(buf, 1, len, d->f) != len) {
        d->write_err = errno ? errno : EIO;
        return 0;
    }
    crypto_hash_sha256_update(&d->sha, (const unsigned char *)buf, len);
    d->have += (long long)len;
    s_draw(d, 0);
    return len;
}

/* curl's progress callback of every download: ud is the stop flag (or NULL); 1 aborts. */
static int s_on_xfer(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt;
    (void)dn;
    (void)ut;
    (void)un;
    const volatile sig_atomic_t *stop = ud;
    return stop && *stop ? 1 : 0;
}

/*
 * Downloads m into blob (via blob.incomplete, resuming what is there) and
 * checks size and sha256. 0, or -1 with err (the .incomplete file stays for a
 * later run unless its content was proven wrong).
 */
static int s_download(const s_env_t *e, const s_meta_t *m, const char *label, const char *blob,
                      const sw_hub_opts_t *o, char *err, size_t err_len)
{
    char part[S_PATH];
    if ((size_t)snprintf(part, sizeof part, "%s.incomplete", blob) >= sizeof part) {
        sw_errf(err, err_len, "the cache path is too long");
        return -1;
    }
    s_dl_t d = {0};
    d.expect = m->size;
    d.label = label;
    d.progress = o ? o->progress : SW_HUB_QUIET;
    d.stop = o ? o->stop : NULL;
    d.f = fopen(part, "a+b");
    if (!d.f) {
        sw_errf(err, err_len, "cannot write %s: %s", part, strerror(errno));
        return -1;
    }
    crypto_hash_sha256_init(&d.sha);
    struct stat st;
    if (fstat(fileno(d.f), &st) != 0) {
        sw_errf(err, err_len, "%s: %s", part, strerror(errno));
        fclose(d.f);
        return -1;
    }
    d.have = st.st_size;
    if (d.expect >= 0 && d.have > d.expect) { /* longer than the file: useless */
        if (ftruncate(fileno(d.f), 0) != 0) {
            sw_errf(err, err_len, "%s: %s", part, strerror(errno));
            fclose(d.f);
            return -1;
        }
        d.have = 0;
    }
    if (d.have > 0) {
        if (s_hash_existing(d.f, d.have, &d.sha) != 0) {
            sw_errf(err, err_len, "cannot read %s to resume: %s", part, strerror(errno));
            fclose(d.f);
            return -1;
        }
        fprintf(stderr, "pull: %s: resuming at %.1f MB of %.1f MB\n", label, d.have / 1e6,
                d.expect / 1e6);
    }
    d.t0 = s_now();
    d.t0_have = d.have;
    int rc = -1;
    for (int attempt = 1; attempt <= S_ATTEMPTS; attempt++) {
        if (d.expect >= 0 && d.have == d.expect)
            break;
        d.start = d.have;
        d.checked = d.bad_status = d.restart = d.too_big = d.write_err = 0;
        s_resp_reset(&d.resp);
        struct curl_slist *hdrs = NULL;
        CURL *c = s_curl(e, m->url, &d.resp, &hdrs);
        if (!c) {
            sw_errf(err, err_len, "libcurl cannot start");
            goto out;
        }
        char range[64];
        if (d.have > 0) {
            snprintf(range, sizeof range, "%lld-", d.have);
            curl_easy_setopt(c, CURLOPT_RANGE, range);
        }
        curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_on_data);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &d);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, s_on_xfer);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, (void *)d.stop);
        CURLcode cc = curl_easy_perform(c);
        curl_easy_cleanup(c);
        curl_slist_free_all(hdrs);
        if (fflush(d.f) != 0 && !d.write_err)
            d.write_err = errno;
        if (d.write_err) {
            sw_errf(err, err_len, "cannot write %s: %s", part, strerror(d.write_err));
            goto out;
        }
        if (cc == CURLE_ABORTED_BY_CALLBACK) {
            sw_errf(err, err_len, "interrupted at %.1f MB; run again to resume", d.have / 1e6);
            goto out;
        }
        if (d.too_big) {
            sw_errf(err, err_len, "the server sent more than the %lld bytes the hub announced",
                    d.expect);
            goto bad_content;
        }
        if (d.bad_status) {
            sw_errf(err, err_len, "the download server answered HTTP %ld for %s", d.resp.status,
                    label);
            goto out;
        }
        if (d.restart) {
            fprintf(stderr, "pull: %s: the server cannot resume; starting over\n", label);
            if (ftruncate(fileno(d.f), 0) != 0 || fseeko(d.f, 0, SEEK_SET) != 0) {
                sw_errf(err, err_len, "%s: %s", part, strerror(errno));
                goto out;
            }
            crypto_hash_sha256_init(&d.sha);
            d.have = 0;
            continue;
        }
        if (cc == CURLE_OK && (d.expect < 0 || d.have == d.expect))
            break;
        const char *why = cc == CURLE_OK ? "the connection ended early" : curl_easy_strerror(cc);
        if (attempt == S_ATTEMPTS) {
            sw_errf(err, err_len, "download of %s failed at %.1f MB (%s); run again to resume",
                    label, d.have / 1e6, why);
            goto out;
        }
        int wait = 1 << (attempt - 1);
        fprintf(stderr,
                "pull: %s: download interrupted at %.1f MB (%s); resuming in %d s (attempt %d "
                "of %d)\n",
                label, d.have / 1e6, why, wait, attempt + 1, S_ATTEMPTS);
        for (int i = 0; i < wait * 10 && !(d.stop && *d.stop); i++)
            usleep(100000);
    }
    s_draw(&d, 1);
    if (d.expect >= 0 && d.have != d.expect) {
        sw_errf(err, err_len, "%s: got %lld bytes, the hub announced %lld", label, d.have,
                d.expect);
        goto bad_content;
    }
    if (m->is_sha256) {
        unsigned char h[crypto_hash_sha256_BYTES];
        char hex[65];
        crypto_hash_sha256_final(&d.sha, h);
        for (int i = 0; i < 32; i++)
            snprintf(hex + 2 * i, 3, "%02x", h[i]);
        if (strcmp(hex, m->etag) != 0) {
            sw_errf(err, err_len,
                    "sha256 mismatch for %s: the hub says %.16s..., the download is %.16s... "
                    "(corrupted on the way; the partial file was removed, run again)",
                    label, m->etag, hex);
            goto bad_content;
        }
    } else {
        fprintf(stderr, "pull: %s: not an LFS file, the hub gives no sha256: size checked only\n",
                label);
    }
    if (fsync(fileno(d.f)) != 0 || fclose(d.f) != 0) {
        d.f = NULL;
        sw_errf(err, err_len, "%s: %s", part, strerror(errno));
        goto out;
    }
    d.f = NULL;
    if (rename(part, blob) != 0) {
        sw_errf(err, err_len, "cannot move %s into place: %s", part, strerror(errno));
        goto out;
    }
    rc = 0;
    goto out;
bad_content:
    unlink(part);
out:
    if (d.f)
        fclose(d.f);
    return rc;
}

/* ---- fetch ------------------------------------------------------------------------------ */

/* Takes the per-file lock (waiting, with one line, while another process downloads). fd or -1. */
static int s_lock(const s_env_t *e, const char *etag, volatile sig_atomic_t *stop, char *err,
                  size_t err_len)
{
    char p[S_PATH];
    const char *folder = strrchr(e->repo_dir, '/');
    if (s_pathf(p, sizeof p, "%s/.locks%s/%s.lock", e->cache, folder ? folder : "", etag) != 0) {
        sw_errf(err, err_len, "the cache path is too long");
        return -1;
    }
    if (s_mkdirs(p, 0, err, err_len) != 0)
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
static int s_link(const s_env_t *e, const s_meta_t *m, const char *file, char *path, size_t len,
                  char *err, size_t err_len)
{
    if (s_snapshot_path(e, m->commit, file, path, len) != 0) {
        sw_errf(err, err_len, "the cache path is too long");
        return -1;
    }
    if (s_mkdirs(path, 0, err, err_len) != 0)
        return -1;
    char target[S_PATH] = "../../";
    for (const char *c = file; (c = strchr(c, '/')); c++)
        strcat(target, "../");
    strcat(target, "blobs/");
    strcat(target, m->etag);
    char cur[S_PATH];
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
static int s_write_ref(const s_env_t *e, const sw_hub_ref_t *ref, const char *commit, char *err,
                       size_t err_len)
{
    if (!strcmp(ref->revision, commit))
        return 0;
    char p[S_PATH], tmp[S_PATH + 32];
    if (s_pathf(p, sizeof p, "%s/refs/%s", e->repo_dir, ref->revision) != 0 ||
        s_pathf(tmp, sizeof tmp, "%s.%d.tmp", p, (int)getpid()) != 0) {
        sw_errf(err, err_len, "the cache path is too long");
        return -1;
    }
    if (s_mkdirs(p, 0, err, err_len) != 0)
        return -1;
    FILE *f = fopen(tmp, "w");
    if (!f || fputs(commit, f) < 0 || fclose(f) != 0 || rename(tmp, p) != 0) {
        sw_errf(err, err_len, "cannot write %s: %s", p, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

static int s_curl_init(char *err, size_t err_len)
{
    static int curl_ready;
    if (!curl_ready) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0 || sodium_init() < 0) {
            sw_errf(err, err_len, "libcurl or libsodium cannot start");
            return -1;
        }
        curl_ready = 1;
    }
    return 0;
}

/* A cached copy that will do when the hub cannot be asked: 0 with path. */
typedef int (*s_cached_fn)(const s_env_t *e, const sw_hub_ref_t *ref, const char *file, void *ctx,
                           char *path, size_t len);

static int s_cached_whole(const s_env_t *e, const sw_hub_ref_t *ref, const char *file, void *ctx,
                          char *path, size_t len)
{
    (void)ctx;
    return s_from_cache(e, ref, file, path, len);
}

/*
 * The hub's metadata of ref's file (file receives its name): 0 with m; 1
 * when a cached copy (found by cached) was used instead, path set; -1 with err.
 */
static int s_lookup(s_env_t *e, const sw_hub_ref_t *ref, char *file, size_t file_len, s_meta_t *m,
                    s_cached_fn cached, void *ctx, char *path, size_t path_len, char *err,
                    size_t err_len)
{
    if (s_env_load(e, ref, err, err_len) != 0 || s_curl_init(err, err_len) != 0)
        return -1;
    snprintf(file, file_len, "%s", ref->file);
    if (e->offline) {
        char why[512];
        if (!file[0] && s_choose_cached(e, ref, file, file_len, why, sizeof why) != 0) {
            sw_errf(err, err_len, "HF_HUB_OFFLINE is set and %s", why);
            return -1;
        }
        if (cached(e, ref, file, ctx, path, path_len) == 0)
            return 1;
        sw_errf(err, err_len, "%s/%s@%s is not in the cache %s and HF_HUB_OFFLINE is set",
                ref->repo, file, ref->revision, e->cache);
        return -1;
    }
    char why[512];
    int rc = file[0] ? 0 : s_choose_online(e, ref, file, file_len, why, sizeof why);
    memset(m, 0, sizeof *m);
    if (rc == 0)
        rc = s_resolve(e, ref, file, m, why, sizeof why);
    if (rc == 1) { /* unreachable: a cached copy will do */
        if ((file[0] || s_choose_cached(e, ref, file, file_len, err, err_len) == 0) &&
            cached(e, ref, file, ctx, path, path_len) == 0) {
            SW_WARN("%s; using the cached copy of %s/%s@%s", why, ref->repo, file, ref->revision);
            return 1;
        }
        sw_errf(err, err_len, "%s (and %s%s%s is not in the cache %s)", why, ref->repo,
                file[0] ? "/" : "", file, e->cache);
        return -1;
    }
    if (rc != 0) {
        sw_errf(err, err_len, "%s", why);
        return -1;
    }
    return 0;
}

/* The whole file of m into the cache (unless there), linked from its snapshot. */
static int s_fetch_whole(const s_env_t *e, const sw_hub_ref_t *ref, const s_meta_t *m,
                         const char *file, const sw_hub_opts_t *o, char *path, size_t path_len,
                         char *err, size_t err_len)
{
    char blob[S_PATH];
    if ((size_t)snprintf(blob, sizeof blob, "%s/blobs/%s", e->repo_dir, m->etag) >= sizeof blob) {
        sw_errf(err, err_len, "the cache path is too long");
        return -1;
    }
    struct stat st;
    if (stat(blob, &st) != 0 || (m->size >= 0 && st.st_size != m->size)) {
        if (s_mkdirs(blob, 0, err, err_len) != 0)
            return -1;
        int lock = s_lock(e, m->etag, o ? o->stop : NULL, err, err_len);
        if (lock < 0)
            return -1;
        int rc = 0;
        if (stat(blob, &st) != 0 || (m->size >= 0 && st.st_size != m->size)) {
            const char *base = strrchr(file, '/');
            rc = s_download(e, m, base ? base + 1 : file, blob, o, err, err_len);
        }
        close(lock);
        if (rc != 0)
            return -1;
    }
    if (s_link(e, m, file, path, path_len, err, err_len) != 0 ||
        s_write_ref(e, ref, m->commit, err, err_len) != 0)
        return -1;
    return 0;
}

int sw_hub_fetch(const sw_hub_ref_t *ref, const sw_hub_opts_t *o, char *path, size_t path_len,
                 char *err, size_t err_len)
{
    s_env_t e;
    s_meta_t m;
    char file[400];
    int rc = s_lookup(&e, ref, file, sizeof file, &m, s_cached_whole, NULL, path, path_len, err,
                      err_len);
    if (rc != 0)
        return rc > 0 ? 0 : -1;
    return s_fetch_whole(&e, ref, &m, file, o, path, path_len, err, err_len);
}

/* ---- partial downloads: the tensors of a layer range (engine/include/partial.h) ------------------ */

#define S_HEAD_FIRST (1ll << 20) /* bytes of the first header request (doubled as needed) */
#define S_HEAD_MAX (1ll << 30)   /* a larger header is refused */
#define S_RANGE_GAP (1ll << 16)  /* tensors closer than this in the source: one request */

/* Where fetched source bytes go: 0, or an errno. */
typedef int (*s_sink_fn)(void *ctx, long long pos, const uint8_t *b, size_t n);

enum { S_RG_OK, S_RG_NO_RANGES, S_RG_BAD_RANGE, S_RG_STATUS, S_RG_WRITE, S_RG_TOO_MUCH };

/* One range request. */
typedef struct s_rg {
    s_resp_t resp;               /* its headers */
    long long pos;               /* next source byte expected */
    long long to;                /* last source byte asked for */
    long long total;             /* the file's size, which Content-Range must name */
    int checked;                 /* the status was looked at */
    int fail;                    /* S_RG_* */
    int write_err;               /* errno of a failed write */
    s_sink_fn sink;              /* where the bytes go */
    void *ctx;                   /* its state */
    s_dl_t *draw;                /* progress: draw->have counts fetched bytes */
    volatile sig_atomic_t *stop; /* stop flag */
} s_rg_t;

static size_t s_on_range(char *buf, size_t size, size_t n, void *ud)
{
    s_rg_t *g = ud;
    size_t len = size * n;
    if (!g->checked) {
        g->checked = 1;
        if (g->resp.status == 200)
            g->fail = S_RG_NO_RANGES;
        else if (g->resp.status != 206)
            g->fail = S_RG_STATUS;
        else if (g->resp.range_start != g->pos || g->resp.range_end != g->to ||
                 g->resp.range_total != g->total)
            g->fail = S_RG_BAD_RANGE;
        if (g->fail)
            return 0;
    }
    if ((long long)len > g->to + 1 - g->pos) {
        g->fail = S_RG_TOO_MUCH;
        return 0;
    }
    int we = g->sink(g->ctx, g->pos, (const uint8_t *)buf, len);
    if (we) {
        g->write_err = we;
        g->fail = S_RG_WRITE;
        return 0;
    }
    g->pos += (long long)len;
    if (g->draw) {
        g->draw->have += (long long)len;
        s_draw(g->draw, 0);
    }
    return len;
}

/*
 * Source bytes [from, to] of the file at url (total bytes long) into sink,
 * with Range requests whose answers must be 206 with exactly that
 * Content-Range; a response cut short is resumed (S_ATTEMPTS in a row
 * without progress). 0, or -1 with err.
 */
static int s_fetch_range(const s_env_t *e, const char *url, long long from, long long to,
                         long long total, s_sink_fn sink, void *ctx, s_dl_t *draw,
                         volatile sig_atomic_t *stop, const char *label, char *err, size_t err_len)
{
    s_rg_t g = {.pos = from,
                .to = to,
                .total = total,
                .sink = sink,
                .ctx = ctx,
                .draw = draw,
                .stop = stop};
    for (int fails = 0; g.pos <= to;) {
        s_resp_reset(&g.resp);
        g.checked = g.fail = 0;
        struct curl_slist *hdrs = NULL;
        CURL *c = s_curl(e, url, &g.resp, &hdrs);
        if (!c) {
            sw_errf(err, err_len, "libcurl cannot start");
            return -1;
        }
        char range[64];
        snprintf(range, sizeof range, "%lld-%lld", g.pos, to);
        curl_easy_setopt(c, CURLOPT_RANGE, range);
        curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_on_range);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &g);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, s_on_xfer);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, (void *)g.stop);
        const long long before = g.pos;
        CURLcode cc = curl_easy_perform(c);
        curl_easy_cleanup(c);
        curl_slist_free_all(hdrs);
        if (!g.checked && cc == CURLE_OK && g.resp.status != 206)
            g.fail = S_RG_STATUS; /* an answer without a body (416, 404, ...) */
        switch (g.fail) {
        case S_RG_NO_RANGES:
            sw_errf(err, err_len,
                    "the download server ignores HTTP range requests (it answered 'Range: "
                    "bytes=%s' with the whole file): a partial download needs them; pull the "
                    "whole file (without --layers) or use a mirror that serves ranges",
                    range);
            return -1;
        case S_RG_BAD_RANGE:
            sw_errf(err, err_len,
                    "the download server answered 'Range: bytes=%s' of %s with Content-Range "
                    "bytes %lld-%lld/%lld: not the bytes asked for (nothing of it was kept)",
                    range, label, g.resp.range_start, g.resp.range_end, g.resp.range_total);
            return -1;
        case S_RG_STATUS:
            sw_errf(err, err_len, "the download server answered HTTP %ld to a range request for %s",
                    g.resp.status, label);
            return -1;
        case S_RG_WRITE:
            sw_errf(err, err_len, "cannot write the partial file of %s: %s", label,
                    strerror(g.write_err));
            return -1;
        case S_RG_TOO_MUCH:
            sw_errf(err, err_len,
                    "the download server sent more than the bytes asked for ('Range: bytes=%s' "
                    "of %s)",
                    range, label);
            return -1;
        default:
            break;
        }
        if (cc == CURLE_ABORTED_BY_CALLBACK) {
            sw_errf(err, err_len, "interrupted; run again to resume");
            return -1;
        }
        if (g.pos > to)
            break;
        fails = g.pos > before ? 0 : fails + 1;
        const char *why = cc == CURLE_OK ? "the response ended early" : curl_easy_strerror(cc);
        if (fails >= S_ATTEMPTS) {
            sw_errf(err, err_len, "download of %s failed at byte %lld (%s); run again to resume",
                    label, g.pos, why);
            return -1;
        }
        int wait = 1 << (fails > 0 ? fails - 1 : 0);
        fprintf(stderr, "pull: %s: range request cut at byte %lld (%s); resuming in %d s\n", label,
                g.pos, why, wait);
        for (int i = 0; i < wait * 10 && !(stop && *stop); i++)
            usleep(100000);
    }
    return 0;
}

/* The header sink: bytes appended in memory and to the .head file (kept for a resume). */
typedef struct s_head {
    uint8_t *buf; /* (len) the source's first bytes */
    size_t len;   /* bytes */
    size_t cap;   /* allocated */
    int fd;       /* the .head file */
} s_head_t;

static int s_head_sink(void *ud, long long pos, const uint8_t *b, size_t n)
{
    s_head_t *h = ud;
    if ((size_t)pos != h->len)
        return EIO;
    if (h->len + n > h->cap) {
        size_t cap = h->cap ? h->cap : (size_t)S_HEAD_FIRST;
        while (cap < h->len + n)
            cap *= 2;
        uint8_t *g = realloc(h->buf, cap);
        if (!g)
            return ENOMEM;
        h->buf = g;
        h->cap = cap;
    }
    memcpy(h->buf + h->len, b, n);
    h->len += n;
    for (size_t done = 0; done < n;) {
        ssize_t w = write(h->fd, b + done, n - done);
        if (w < 0)
            return errno;
        done += (size_t)w;
    }
    return 0;
}

/* The data sink: source bytes to their places in the partial file. */
typedef struct s_part {
    int fd;                        /* the .incomplete partial file */
    const sw_partial_plan_t *plan; /* where each tensor goes */
    int k;                         /* the segment being written */
    long long have;                /* the file's length: every byte below is final */
} s_part_t;

static int s_pwrite_all(int fd, const void *b, size_t n, long long at)
{
    for (size_t done = 0; done < n;) {
        ssize_t w = pwrite(fd, (const uint8_t *)b + done, n - done, (off_t)(at + (long long)done));
        if (w < 0)
            return errno;
        done += (size_t)w;
    }
    return 0;
}

static int s_part_sink(void *ud, long long pos, const uint8_t *b, size_t n)
{
    static const uint8_t zero[4096];
    s_part_t *p = ud;
    const sw_partial_plan_t *pl = p->plan;
    while (n > 0) {
        while (p->k < pl->n_segs && (uint64_t)pos >= pl->segs[p->k].src_off + pl->segs[p->k].len)
            p->k++;
        if (p->k == pl->n_segs)
            return 0; /* past the last tensor */
        const sw_partial_seg_t *s = &pl->segs[p->k];
        if ((uint64_t)pos < s->src_off) { /* between two tensors of one request */
            uint64_t skip = s->src_off - (uint64_t)pos;
            if (skip > n)
                skip = n;
            pos += (long long)skip;
            b += skip;
            n -= (size_t)skip;
            continue;
        }
        uint64_t in = (uint64_t)pos - s->src_off, take = s->len - in;
        if (take > n)
            take = n;
        long long at = (long long)(s->part_off + in);
        while (p->have < at) { /* the alignment padding before a tensor */
            size_t z = at - p->have > (long long)sizeof zero ? sizeof zero : (size_t)(at - p->have);
            int we = s_pwrite_all(p->fd, zero, z, p->have);
            if (we)
                return we;
            p->have += (long long)z;
        }
        if (at == p->have) {
            int we = s_pwrite_all(p->fd, b, (size_t)take, at);
            if (we)
                return we;
            p->have = at + (long long)take;
        }
        pos += (long long)take;
        b += take;
        n -= (size_t)take;
    }
    return 0;
}

/*
 * The source requests that complete a partial file holding its first have
 * bytes: fetched (ctx set) or only counted. The bytes they ask for, or -1
 * with err.
 */
static long long s_ranges(const s_env_t *e, const s_meta_t *m, s_part_t *ctx, s_dl_t *draw,
                          volatile sig_atomic_t *stop, const char *label, long long have, char *err,
                          size_t err_len)
{
    const sw_partial_plan_t *pl = ctx->plan;
    long long bytes = 0;
    int k = 0;
    while (k < pl->n_segs && (long long)(pl->segs[k].part_off + pl->segs[k].len) <= have)
        k++;
    while (k < pl->n_segs) {
        const sw_partial_seg_t *s = &pl->segs[k];
        if (s->len == 0) {
            k++;
            continue;
        }
        long long from = (long long)s->src_off;
        if (have > (long long)s->part_off)
            from += have - (long long)s->part_off;
        long long to = (long long)(s->src_off + s->len) - 1;
        int j = k + 1;
        for (; j < pl->n_segs && (long long)pl->segs[j].src_off - (to + 1) <= S_RANGE_GAP; j++)
            if (pl->segs[j].len)
                to = (long long)(pl->segs[j].src_off + pl->segs[j].len) - 1;
        bytes += to - from + 1;
        if (ctx->fd >= 0 && s_fetch_range(e, m->url, from, to, m->size, s_part_sink, ctx, draw,
                                          stop, label, err, err_len) != 0)
            return -1;
        k = j;
    }
    return bytes;
}

/* Reads a kept .head file (a resumed pull's header bytes) into h. */
static void s_head_load(s_head_t *h, long long size)
{
    struct stat st;
    if (fstat(h->fd, &st) != 0 || st.st_size <= 0 || st.st_size > S_HEAD_MAX || st.st_size > size)
        return;
    h->buf = malloc((size_t)st.st_size);
    if (!h->buf)
        return;
    h->cap = (size_t)st.st_size;
    while (h->len < h->cap) {
        ssize_t r = pread(h->fd, h->buf + h->len, h->cap - h->len, (off_t)h->len);
        if (r <= 0)
            break;
        h->len += (size_t)r;
    }
    if (h->len != h->cap || lseek(h->fd, 0, SEEK_END) != (off_t)h->len)
        h->len = 0;
}

/*
 * The source's header and the first MiB of its tensor data (what the
 * fingerprint hashes) into h, from the .head file and range requests: the
 * parsed header, or NULL with err.
 */
static sw_gguf_t *s_fetch_head(const s_env_t *e, const s_meta_t *m, s_head_t *h, s_dl_t *draw,
                               volatile sig_atomic_t *stop, const char *label, char *err,
                               size_t err_len)
{
    s_head_load(h, m->size);
    if (h->len == 0 && ftruncate(h->fd, 0) != 0) {
        sw_errf(err, err_len, "cannot write the header of %s: %s", label, strerror(errno));
        return NULL;
    }
    long long want = h->len > 0 ? (long long)h->len : S_HEAD_FIRST;
    char why[512] = "";
    for (;;) {
        if (want > m->size)
            want = m->size;
        if ((long long)h->len < want &&
            s_fetch_range(e, m->url, (long long)h->len, want - 1, m->size, s_head_sink, h, draw,
                          stop, label, err, err_len) != 0)
            return NULL;
        sw_gguf_t *g = sw_gguf_open_header(h->buf, h->len, (uint64_t)m->size, why, sizeof why);
        if (g && (long long)h->len >= (long long)sw_fingerprint_len(g))
            return g;
        if (g) {
            want = (long long)sw_fingerprint_len(g);
            sw_gguf_close(&g);
            continue;
        }
        if ((long long)h->len >= m->size || (long long)h->len >= S_HEAD_MAX) {
            sw_errf(err, err_len, "%s is not a GGUF model file a partial pull can cut: %s", label,
                    why);
            if (ftruncate(h->fd, 0) != 0) { /* proven useless: the next pull starts over */
            }
            return NULL;
        }
        want = 2 * (long long)h->len; /* the header goes on past what was fetched */
    }
}

/* The cached partial file of ref's file at commit that holds [begin, end): 0 with path. */
static int s_cached_partial(const s_env_t *e, const char *commit, const char *file, int begin,
                            int end, char *path, size_t len)
{
    char dir[S_PATH];
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    if (s_pathf(dir, sizeof dir, "%s/shardwire-partial/%s", e->repo_dir, commit) != 0)
        return -1;
    DIR *d = opendir(dir);
    int found = -1;
    for (struct dirent *de; d && found != 0 && (de = readdir(d));) {
        char p[S_PATH], why[256];
        if (strncmp(de->d_name, "layers-", 7) != 0)
            continue;
        if (s_pathf(p, sizeof p, "%s/%s/%s", dir, de->d_name, base) != 0)
            continue;
        sw_gguf_t *g = sw_gguf_open(p, why, sizeof why);
        sw_partial_info_t pi;
        int n_layer = 0;
        if (g && sw_partial_layers(g, &n_layer) == 0 &&
            sw_partial_info(g, n_layer, &pi, why, sizeof why) == 1 && pi.begin <= begin &&
            pi.end >= (end >= 0 ? end : n_layer) && strlen(p) < len) {
            snprintf(path, len, "%s", p);
            found = 0;
        }
        sw_gguf_close(&g);
    }
    if (d)
        closedir(d);
    return found;
}

typedef struct s_range_req {
    int begin, end; /* the layers asked for (end -1 = to the last) */
} s_range_req_t;

/* s_cached_fn for a layer range: the whole cached file, else a partial that holds the range. */
static int s_cached_layers(const s_env_t *e, const sw_hub_ref_t *ref, const char *file, void *ctx,
                           char *path, size_t len)
{
    const s_range_req_t *r = ctx;
    char commit[41];
    if (s_from_cache(e, ref, file, path, len) == 0)
        return 0;
    return s_cached_commit(e, ref, commit) == 0
               ? s_cached_partial(e, commit, file, r->begin, r->end, path, len)
               : -1;
}

static double s_mib(long long b)
{
    return (double)b / (1 << 20);
}

/* The partial download proper, under the lock: 0 with the file at final, or -1 with err. */
static int s_download_partial(const s_env_t *e, const sw_hub_ref_t *ref, const s_meta_t *m,
                              const char *file, int begin, int end, const sw_hub_opts_t *o,
                              const char *final, char *path, size_t path_len, char *err,
                              size_t err_len)
{
    const char *label = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
    volatile sig_atomic_t *stop = o ? o->stop : NULL;
    char part[S_PATH], headp[S_PATH + 8];
    if (s_pathf(part, sizeof part, "%s.incomplete", final) != 0 ||
        s_pathf(headp, sizeof headp, "%s.head", part) != 0) {
        sw_errf(err, err_len, "the cache path is too long");
        return -1;
    }
    s_head_t h = {.fd = open(headp, O_RDWR | O_CREAT | O_CLOEXEC, 0644)};
    s_part_t p = {.fd = -1};
    sw_partial_plan_t plan = {0};
    sw_gguf_t *g = NULL;
    int rc = -1;
    if (h.fd < 0) {
        sw_errf(err, err_len, "cannot write %s: %s", headp, strerror(errno));
        return -1;
    }
    s_dl_t d = {.label = label, .progress = o ? o->progress : SW_HUB_QUIET, .expect = -1};
    d.t0 = s_now();
    g = s_fetch_head(e, m, &h, &d, stop, label, err, err_len);
    const long long head_run = d.have; /* header bytes fetched by this run */
    if (!g)
        goto out;
    int n_layer = 0;
    if (sw_partial_layers(g, &n_layer) != 0) {
        sw_errf(err, err_len, "%s: the header has no usable block_count", label);
        goto out;
    }
    const int last = end < 0 ? n_layer : end;
    if (begin == 0 && last == n_layer) { /* every layer: the whole file */
        fprintf(stderr, "pull: layers 0:%d are the whole model: downloading the whole file\n",
                n_layer);
        rc = 1;
    }
    char fp[65], source[1024];
    sw_fingerprint_bytes(h.buf, sw_fingerprint_len(g), fp);
    snprintf(source, sizeof source, "hf:%s/%s@%s", ref->repo, file, m->commit);
    const sw_partial_src_t id = {.source = source,
                                 .size = (uint64_t)m->size,
                                 .sha256 = m->is_sha256 ? m->etag : "",
                                 .fingerprint = fp};
    if (rc == 1 || sw_partial_plan(g, begin, end, &id, &plan, err, err_len) != 0) {
        unlink(headp); /* the whole file, or a range this model lacks: nothing to resume */
        char dir[S_PATH];
        snprintf(dir, sizeof dir, "%s", final);
        if (strrchr(dir, '/'))
            *strrchr(dir, '/') = 0;
        rmdir(dir);
        goto out;
    }
    p.plan = &plan;
    p.fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    struct stat st;
    if (p.fd < 0 || fstat(p.fd, &st) != 0) {
        sw_errf(err, err_len, "cannot write %s: %s", part, strerror(errno));
        goto out;
    }
    p.have = st.st_size;
    if (p.have > 0) { /* a resume: its header must be this plan's */
        uint8_t *cur = p.have >= (long long)plan.header_len ? malloc(plan.header_len) : NULL;
        int same = cur && pread(p.fd, cur, plan.header_len, 0) == (ssize_t)plan.header_len &&
                   !memcmp(cur, plan.header, plan.header_len) && p.have <= (long long)plan.size;
        free(cur);
        if (!same)
            p.have = 0;
        else
            fprintf(stderr, "pull: %s layers %d:%d: resuming at %.1f MiB of %.1f MiB\n", label,
                    begin, last, s_mib(p.have), s_mib((long long)plan.size));
    }
    if (p.have < (long long)plan.header_len) {
        if (ftruncate(p.fd, 0) != 0 || s_pwrite_all(p.fd, plan.header, plan.header_len, 0) != 0) {
            sw_errf(err, err_len, "cannot write %s: %s", part, strerror(errno));
            goto out;
        }
        p.have = (long long)plan.header_len;
    }
    s_part_t count = {.fd = -1, .plan = &plan};
    const long long need = (long long)h.len + s_ranges(e, m, &count, NULL, NULL, label,
                                                       (long long)plan.header_len, err, err_len);
    const long long left = s_ranges(e, m, &count, NULL, NULL, label, p.have, err, err_len);
    d.expect = need;
    d.have = need - left;
    d.t0 = s_now();
    d.t0_have = d.have;
    d.last_decile = -1;
    if (s_ranges(e, m, &p, &d, stop, label, p.have, err, err_len) < 0)
        goto out;
    s_draw(&d, 1);
    if (ftruncate(p.fd, (off_t)plan.size) != 0 || fsync(p.fd) != 0) {
        sw_errf(err, err_len, "cannot write %s: %s", part, strerror(errno));
        goto out;
    }
    /* what can be checked without the whole file: the result parses as a GGUF, every tensor's
     * size matches its type and shape, and it is the plan's */
    char why[512];
    sw_gguf_t *chk = sw_gguf_open(part, why, sizeof why);
    sw_partial_info_t pi;
    int ok = chk && sw_gguf_tensor_count(chk) == plan.n_segs &&
             sw_partial_info(chk, n_layer, &pi, why, sizeof why) == 1;
    sw_gguf_close(&chk);
    if (!ok) {
        sw_errf(err, err_len, "the partial file of %s does not check: %s (removed; run again)",
                label, why);
        unlink(part);
        goto out;
    }
    if (rename(part, final) != 0) {
        sw_errf(err, err_len, "cannot move %s into place: %s", part, strerror(errno));
        goto out;
    }
    unlink(headp);
    if (!o || o->progress != SW_HUB_QUIET)
        fprintf(stderr,
                "pull: %s layers %d:%d: fetched %.1f MiB of %.1f MiB (%.0f%%), %.1f MiB in this "
                "run; the whole-file sha256 cannot be checked on a part (docs/deploy.md)\n",
                label, begin, last, s_mib(need), s_mib(m->size),
                100.0 * (double)need / (double)m->size, s_mib(head_run + d.have - d.t0_have));
    snprintf(path, path_len, "%s", final);
    rc = 0;
out:
    sw_gguf_close(&g);
    sw_partial_plan_free(&plan);
    free(h.buf);
    close(h.fd);
    if (p.fd >= 0)
        close(p.fd);
    return rc;
}

int sw_hub_fetch_layers(const sw_hub_ref_t *ref, const sw_hub_opts_t *o, int begin, int end,
                        char *path, size_t path_len, char *err, size_t err_len)
{
    s_env_t e;
    s_meta_t m;
    char file[400];
    s_range_req_t req = {begin, end};
    int rc = s_lookup(&e, ref, file, sizeof file, &m, s_cached_layers, &req, path, path_len, err,
                      err_len);
    if (rc != 0)
        return rc > 0 ? 0 : -1;
    char blob[S_PATH];
    struct stat st;
    if (s_pathf(blob, sizeof blob, "%s/blobs/%s", e.repo_dir, m.etag) == 0 &&
        stat(blob, &st) == 0 && st.st_size == m.size) /* the whole file is here */
        return s_fetch_whole(&e, ref, &m, file, o, path, path_len, err, err_len);
    if (s_cached_partial(&e, m.commit, file, begin, end, path, path_len) == 0)
        return s_write_ref(&e, ref, m.commit, err, err_len);
    if (m.size < 0) {
        sw_errf(err, err_len, "the hub announces no size for %s: a partial download needs it",
                file);
        return -1;
    }
    const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
    char final[S_PATH], lockname[128];
    char span[32];
    if (end >= 0)
        snprintf(span, sizeof span, "%d-%d", begin, end);
    else
        snprintf(span, sizeof span, "%d-end", begin);
    if (s_pathf(final, sizeof final, "%s/shardwire-partial/%s/layers-%s/%s", e.repo_dir, m.commit,
                span, base) != 0) {
        sw_errf(err, err_len, "the cache path is too long");
        return -1;
    }
    if (s_mkdirs(final, 0, err, err_len) != 0)
        return -1;
    snprintf(lockname, sizeof lockname, "%s.layers-%s", m.etag, span);
    int lock = s_lock(&e, lockname, o ? o->stop : NULL, err, err_len);
    if (lock < 0)
        return -1;
    if (stat(final, &st) == 0) /* another process finished it while this one waited */
        rc = snprintf(path, path_len, "%s", final) < (int)path_len ? 0 : -1;
    else
        rc = s_download_partial(&e, ref, &m, file, begin, end, o, final, path, path_len, err,
                                err_len);
    close(lock);
    if (rc == 1)
        return s_fetch_whole(&e, ref, &m, file, o, path, path_len, err, err_len);
    return rc == 0 ? s_write_ref(&e, ref, m.commit, err, err_len) : rc;
}

int sw_hub_model_arg(const char *arg, volatile sig_atomic_t *stop, char *path, size_t path_len,
                     char *err, size_t err_len)
{
    return sw_hub_model_arg_layers(arg, -1, -1, stop, path, path_len, err, err_len);
}

int sw_hub_model_arg_layers(const char *arg, int begin, int end, volatile sig_atomic_t *stop,
                            char *path, size_t path_len, char *err, size_t err_len)
{
    if (!arg || strncmp(arg, SW_HUB_PREFIX, strlen(SW_HUB_PREFIX)) != 0) {
        if (!arg || strlen(arg) >= path_len) {
            sw_errf(err, err_len, "model path too long");
            return -1;
        }
        snprintf(path, path_len, "%s", arg);
        return 0;
    }
    sw_hub_ref_t ref;
    if (sw_hub_uri_parse(arg, &ref, err, err_len) != 0)
        return -1;
    sw_hub_opts_t o = {.progress = SW_HUB_LINES, .stop = stop};
    char why[768];
    if ((begin >= 0 ? sw_hub_fetch_layers(&ref, &o, begin, end, path, path_len, why, sizeof why)
                    : sw_hub_fetch(&ref, &o, path, path_len, why, sizeof why)) != 0) {
        sw_errf(err, err_len, "%s: %s", arg, why);
        return -1;
    }
    return 0;
}
