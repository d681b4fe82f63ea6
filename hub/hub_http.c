/*
 * hub_http.c - the hub over libcurl: a handle with the common settings (the
 * bearer token to the hub's own host only), the response headers the client
 * reads, the hub's error answers turned into a line that says what to do, and
 * the resolve HEAD that gives a file's commit, etag, size and download URL.
 */
#include "hub_impl.h"

#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define S_REDIRECTS 5 /* relative redirects followed (renamed repos) */

void hub_resp_reset(hub_resp_t *r)
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
    hub_resp_t *r = ud;
    size_t len = size * n;
    if (len >= 5 && !strncmp(buf, "HTTP/", 5)) { /* a new response (after a redirect) */
        hub_resp_t fresh;
        hub_resp_reset(&fresh);
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
CURL *hub_curl(const hub_env_t *e, const char *url, hub_resp_t *resp, struct curl_slist **hdrs)
{
    CURL *c = curl_easy_init();
    if (!c)
        return NULL;
    *hdrs = NULL;
    if (e->token[0] && s_same_origin(url, e->endpoint)) {
        char auth[600];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", e->token);
        *hdrs = curl_slist_append(*hdrs, auth);
        explicit_bzero(auth, sizeof auth);
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
void hub_http_error(const hub_resp_t *r, const sw_hub_ref_t *ref, const char *file, char *err,
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
int hub_unreachable(CURLcode cc)
{
    return cc == CURLE_COULDNT_RESOLVE_HOST || cc == CURLE_COULDNT_CONNECT ||
           cc == CURLE_OPERATION_TIMEDOUT || cc == CURLE_COULDNT_RESOLVE_PROXY ||
           cc == CURLE_SSL_CONNECT_ERROR || cc == CURLE_GOT_NOTHING || cc == CURLE_RECV_ERROR ||
           cc == CURLE_SEND_ERROR;
}

/* Appends path's segments to url, percent-encoded. */
int hub_url_path(char *url, size_t len, const char *path)
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

/*
 * HEAD .../resolve/REV/FILE. 0 with meta; 1 when the hub is unreachable (err
 * says why); -1 with err for an answer that settles it (404, 401, bad headers).
 */
int hub_resolve(const hub_env_t *e, const sw_hub_ref_t *ref, const char *file, hub_meta_t *m,
                char *err, size_t err_len)
{
    char url[2048];
    snprintf(url, sizeof url, "%s/%s/resolve/", e->endpoint, ref->repo);
    if (hub_url_path(url, sizeof url, ref->revision) != 0 || strlen(url) + 1 >= sizeof url) {
        sw_errf(err, err_len, "URL too long");
        return -1;
    }
    strcat(url, "/");
    if (hub_url_path(url, sizeof url, file) != 0) {
        sw_errf(err, err_len, "URL too long");
        return -1;
    }
    for (int hop = 0;; hop++) {
        hub_resp_t r;
        hub_resp_reset(&r);
        struct curl_slist *hdrs = NULL;
        CURL *c = hub_curl(e, url, &r, &hdrs);
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
            return hub_unreachable(cc) ? 1 : -1;
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
            hub_http_error(&r, ref, file, err, err_len);
            return -1;
        }
        const char *etag = r.linked_etag[0] ? r.linked_etag : r.etag;
        if (!hub_is_hex(r.commit, 40)) {
            sw_errf(err, err_len, "the hub sent no valid X-Repo-Commit for %s/%s", ref->repo, file);
            return -1;
        }
        if (!hub_is_hex(etag, 64) && !hub_is_hex(etag, 40)) {
            sw_errf(err, err_len, "the hub sent an ETag for %s/%s that is not a hash ('%.70s')",
                    ref->repo, file, etag);
            return -1;
        }
        memcpy(m->commit, r.commit, 41);
        memcpy(m->etag, etag, strlen(etag) + 1); /* 40 or 64 hex digits */
        m->is_sha256 = hub_is_hex(etag, 64);
        m->size = r.linked_size >= 0 ? r.linked_size : r.status < 300 ? r.length : -1;
        if (m->size > (long long)HUB_MAX_FILE) {
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

/* curl's progress callback of every download: ud is the stop flag (or NULL); 1 aborts. */
int hub_on_xfer(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt;
    (void)dn;
    (void)ut;
    (void)un;
    const volatile sig_atomic_t *stop = ud;
    return stop && *stop ? 1 : 0;
}

int hub_curl_init(char *err, size_t err_len)
{
    static int curl_ready;
    if (!curl_ready) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
            sw_errf(err, err_len, "libcurl cannot start");
            return -1;
        }
        curl_ready = 1;
    }
    return 0;
}
