/*
 * hub_choose.c - which file of a repository `shardwire pull ORG/NAME[:TAG]`
 * means: the one .gguf file (matching the tag) in the hub's listing of the
 * revision, or offline in the cached snapshot and partial downloads. The
 * parts of a split set (PREFIX-NNNNN-of-MMMMM.gguf) count as one file, named
 * by its first part. More than one is an error that lists them.
 */
#include "hub_impl.h"

#include "gguf.h"
#include "log.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define S_MAX_API_BODY (8u << 20) /* bytes of a repo listing */

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

static int s_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* 1 when name is a part other than the first of a split set whose first
 * part is among sorted (n names, sorted with s_cmp): the set counts once,
 * as its first part. */
static int s_later_part(const char *name, const char *const *sorted, int n)
{
    int idx, count;
    size_t plen;
    char first[400];
    if (!sw_gguf_split_name(name, &idx, &count, &plen) || count < 2 || idx == 0 ||
        sw_gguf_split_path(first, sizeof first, name, plen, 0, count) != 0)
        return 0;
    const char *key = first;
    return sorted && bsearch(&key, sorted, (size_t)n, sizeof *sorted, s_cmp) != NULL;
}

/* Picks the one .gguf file (matching ref->tag) from names, a split set's
 * parts counting as its first part; 0 with file, -1 with err. */
static int s_pick(const sw_hub_ref_t *ref, const char *const *names, int n, char *file, size_t len,
                  char *err, size_t err_len)
{
    int found = 0, pick = -1;
    char list[1024] = "";
    const char **sorted = malloc((size_t)(n > 0 ? n : 1) * sizeof *sorted);
    if (sorted) {
        memcpy(sorted, names, (size_t)n * sizeof *sorted);
        qsort(sorted, (size_t)n, sizeof *sorted, s_cmp);
    }
    for (int i = 0; i < n; i++) {
        if (!s_is_gguf(names[i]) || !s_tag_match(names[i], ref->tag) ||
            s_later_part(names[i], sorted, n))
            continue;
        if (found < 8) {
            size_t l = strlen(list);
            const int parts = hub_set_count(names[i]);
            snprintf(list + l, sizeof list - l, "%s%s", l ? ", " : "", names[i]);
            l = strlen(list);
            if (parts > 1)
                snprintf(list + l, sizeof list - l, " (a split set of %d parts)", parts);
        }
        found++;
        pick = i;
    }
    free(sorted);
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
 * Returns like hub_resolve (1 = unreachable). */
int hub_choose_online(const hub_env_t *e, const sw_hub_ref_t *ref, char *file, size_t len,
                      char *err, size_t err_len)
{
    char url[1024];
    snprintf(url, sizeof url, "%s/api/models/%s/revision/", e->endpoint, ref->repo);
    if (hub_url_path(url, sizeof url, ref->revision) != 0) {
        sw_errf(err, err_len, "URL too long");
        return -1;
    }
    hub_resp_t r;
    hub_resp_reset(&r);
    s_body_t b = {0};
    struct curl_slist *hdrs = NULL;
    CURL *c = hub_curl(e, url, &r, &hdrs);
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
        rc = hub_unreachable(cc) ? 1 : -1;
        goto out;
    }
    if (b.overflow) {
        sw_errf(err, err_len, "the hub's file list for %s is larger than %u bytes", ref->repo,
                S_MAX_API_BODY);
        goto out;
    }
    if (r.status >= 400) {
        hub_http_error(&r, ref, "", err, err_len);
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
        if (name && hub_path_ok(name, HUB_FILE_CHARS, 400))
            names[k++] = name;
    }
    rc = s_pick(ref, names, k, file, len, err, err_len);
    free(names);
out:
    json_decref(j);
    free(b.data);
    return rc;
}

/* Adds the names in dir (and, with sub, in its folders, as FOLDER/NAME: a
 * split set's parts often sit in one) not yet in names (n of them, 64 at
 * most); the new count. */
static int s_list_names(const char *dir, int sub, char buf[64][256], const char *names[64], int n)
{
    DIR *d = opendir(dir);
    for (struct dirent *de; d && n < 64 && (de = readdir(d));) {
        size_t l = strlen(de->d_name);
        if (de->d_name[0] == '.' || l >= 128 || strstr(de->d_name, ".incomplete"))
            continue; /* a download in progress (and its .head files) */
        char p[HUB_PATH];
        struct stat st;
        if (sub && hub_pathf(p, sizeof p, "%s/%s", dir, de->d_name) == 0 && stat(p, &st) == 0 &&
            S_ISDIR(st.st_mode)) {
            const int before = n;
            n = s_list_names(p, 0, buf, names, n);
            for (int i = before; i < n; i++) { /* FOLDER/NAME */
                char tmp[256];
                if (snprintf(tmp, sizeof tmp, "%s/%s", de->d_name, buf[i]) < (int)sizeof tmp)
                    memcpy(buf[i], tmp, sizeof tmp);
            }
            continue;
        }
        int dup = 0; /* the same name, or a partial download of a file in a folder */
        for (int i = 0; i < n && !dup; i++) {
            const size_t li = strlen(names[i]);
            dup = !strcmp(names[i], de->d_name) ||
                  (li > l && names[i][li - l - 1] == '/' && !strcmp(names[i] + li - l, de->d_name));
        }
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
int hub_choose_cached(const hub_env_t *e, const sw_hub_ref_t *ref, char *file, size_t len,
                      char *err, size_t err_len)
{
    char commit[41], dir[HUB_PATH];
    if (hub_cached_commit(e, ref, commit) != 0) {
        sw_errf(err, err_len, "%s@%s is not in the cache %s", ref->repo, ref->revision, e->cache);
        return -1;
    }
    if (hub_pathf(dir, sizeof dir, "%s/snapshots/%s", e->repo_dir, commit) != 0) {
        sw_errf(err, err_len, "the cache path is too long");
        return -1;
    }
    char buf[64][256];
    const char *names[64];
    int n = s_list_names(dir, 1, buf, names, 0);
    /* and the files of partial downloads (shardwire-partial/COMMIT/layers-A-B/FILE) */
    if (hub_pathf(dir, sizeof dir, "%s/shardwire-partial/%s", e->repo_dir, commit) == 0) {
        DIR *d = opendir(dir);
        for (struct dirent *de; d && (de = readdir(d));) {
            char sub[HUB_PATH];
            if (!strncmp(de->d_name, "layers-", 7) &&
                hub_pathf(sub, sizeof sub, "%s/%s", dir, de->d_name) == 0)
                n = s_list_names(sub, 0, buf, names, n);
        }
        if (d)
            closedir(d);
    }
    return s_pick(ref, names, n, file, len, err, err_len);
}
