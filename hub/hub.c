/*
 * hub.c - model files from the Hugging Face hub into huggingface_hub's cache
 * (see hub.h): the fetches of the API. The hub's metadata of a file (or,
 * when the hub cannot be asked, a cached copy), the whole file into the
 * cache and linked from its snapshot, a layer range (hub_partial.c), and the
 * --model hf: form. The parts it calls are listed in hub_impl.h.
 */
#include "hub_impl.h"

#include "gguf.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* hub_cached_fn for the whole file: its cached snapshot (every part of a split set). */
static int s_cached_whole(const hub_env_t *e, const sw_hub_ref_t *ref, const char *file, void *ctx,
                          char *path, size_t len)
{
    (void)ctx;
    return hub_set_count(file) > 1 ? hub_set_from_cache(e, ref, file, path, len)
                                   : hub_from_cache(e, ref, file, path, len);
}

/*
 * The hub's metadata of ref's file (file receives its name): 0 with m; 1
 * when a cached copy (found by cached) was used instead, path set; -1 with err.
 */
static int s_lookup(hub_env_t *e, const sw_hub_ref_t *ref, char *file, size_t file_len,
                    hub_meta_t *m, hub_cached_fn cached, void *ctx, char *path, size_t path_len,
                    char *err, size_t err_len)
{
    if (hub_env_load(e, ref, err, err_len) != 0 || hub_curl_init(err, err_len) != 0)
        return -1;
    snprintf(file, file_len, "%s", ref->file);
    if (e->offline) {
        char why[512];
        if (!file[0] && hub_choose_cached(e, ref, file, file_len, why, sizeof why) != 0) {
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
    int rc = file[0] ? 0 : hub_choose_online(e, ref, file, file_len, why, sizeof why);
    memset(m, 0, sizeof *m);
    if (rc == 0)
        rc = hub_resolve(e, ref, file, m, why, sizeof why);
    if (rc == 1) { /* unreachable: a cached copy will do */
        if ((file[0] || hub_choose_cached(e, ref, file, file_len, err, err_len) == 0) &&
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
static int s_fetch_whole(const hub_env_t *e, const sw_hub_ref_t *ref, const hub_meta_t *m,
                         const char *file, const sw_hub_opts_t *o, char *path, size_t path_len,
                         char *err, size_t err_len)
{
    char blob[HUB_PATH];
    if ((size_t)snprintf(blob, sizeof blob, "%s/blobs/%s", e->repo_dir, m->etag) >= sizeof blob) {
        sw_errf(err, err_len, "the cache path is too long");
        return -1;
    }
    struct stat st;
    if (stat(blob, &st) != 0 || (m->size >= 0 && st.st_size != m->size)) {
        if (hub_mkdirs(blob, 0, err, err_len) != 0)
            return -1;
        int lock = hub_lock(e, m->etag, o ? o->stop : NULL, err, err_len);
        if (lock < 0)
            return -1;
        int rc = 0;
        if (stat(blob, &st) != 0 || (m->size >= 0 && st.st_size != m->size)) {
            const char *base = strrchr(file, '/');
            rc = hub_download(e, m, base ? base + 1 : file, blob, o, err, err_len);
        }
        close(lock);
        if (rc != 0)
            return -1;
    }
    if (hub_link(e, m, file, path, path_len, err, err_len) != 0 ||
        hub_write_ref(e, ref, m->commit, err, err_len) != 0)
        return -1;
    return 0;
}

/* Every part of a split set (metas: the n parts') into the cache, as
 * s_fetch_whole does for a file; path receives part 1's, and the set must
 * open (engine/include/gguf.h). */
static int s_fetch_parts(const hub_env_t *e, const sw_hub_ref_t *ref, const hub_meta_t *metas,
                         int n, const char *file, const sw_hub_opts_t *o, char *path,
                         size_t path_len, char *err, size_t err_len)
{
    long long total = 0;
    for (int i = 0; i < n; i++)
        total += metas[i].size;
    if (!o || o->progress != SW_HUB_QUIET)
        fprintf(stderr, "pull: a split set of %d parts, %.1f MiB\n", n, (double)total / (1 << 20));
    char first[HUB_PATH] = "";
    for (int i = 0; i < n; i++) {
        char part[400], at[HUB_PATH];
        if (hub_set_part(file, i, part, sizeof part) != 0) {
            sw_errf(err, err_len, "the name of part %d of %s is too long", i + 1, file);
            return -1;
        }
        if (s_fetch_whole(e, ref, &metas[i], part, o, at, sizeof at, err, err_len) != 0)
            return -1;
        if (i == 0)
            memcpy(first, at, sizeof first);
    }
    if (snprintf(path, path_len, "%s", first) >= (int)path_len) {
        sw_errf(err, err_len, "the cache path is too long");
        return -1;
    }
    char why[768];
    sw_gguf_t *g = sw_gguf_open(path, why, sizeof why);
    if (!g) {
        sw_errf(err, err_len, "the hub's split set %s does not open: %s", file, why);
        return -1;
    }
    sw_gguf_close(&g);
    return 0;
}

/* The metadata of every part of file's split set (n of them) into *metas
 * (malloc'd, freed by the caller): 0, or -1 with err. */
static int s_set_metas(const hub_env_t *e, const sw_hub_ref_t *ref, const char *file, int n,
                       hub_meta_t **metas, char *err, size_t err_len)
{
    if (hub_set_check(file, err, err_len) != 0)
        return -1;
    *metas = calloc((size_t)n, sizeof **metas);
    if (!*metas) {
        sw_errf(err, err_len, "out of memory");
        return -1;
    }
    return hub_set_resolve(e, ref, file, *metas, err, err_len) == 0 ? 0 : -1;
}

int sw_hub_fetch(const sw_hub_ref_t *ref, const sw_hub_opts_t *o, char *path, size_t path_len,
                 char *err, size_t err_len)
{
    hub_env_t e;
    hub_meta_t m, *metas = NULL;
    char file[400];
    int rc = s_lookup(&e, ref, file, sizeof file, &m, s_cached_whole, NULL, path, path_len, err,
                      err_len);
    if (rc != 0)
        return rc > 0 ? 0 : -1;
    const int n = hub_set_count(file);
    if (n == 0)
        return s_fetch_whole(&e, ref, &m, file, o, path, path_len, err, err_len);
    rc = s_set_metas(&e, ref, file, n, &metas, err, err_len) == 0
             ? s_fetch_parts(&e, ref, metas, n, file, o, path, path_len, err, err_len)
             : -1;
    free(metas);
    return rc;
}

/* 1 when every part (metas, n of them) is in the cache's blobs already. */
static int s_all_cached(const hub_env_t *e, const hub_meta_t *metas, int n)
{
    for (int i = 0; i < n; i++) {
        char blob[HUB_PATH];
        struct stat st;
        if (hub_pathf(blob, sizeof blob, "%s/blobs/%s", e->repo_dir, metas[i].etag) != 0 ||
            stat(blob, &st) != 0 || st.st_size != metas[i].size)
            return 0;
    }
    return 1;
}

/* The whole file, or every part of a split set (n > 0). */
static int s_fetch_all(const hub_env_t *e, const sw_hub_ref_t *ref, const hub_meta_t *metas, int n,
                       const char *file, const sw_hub_opts_t *o, char *path, size_t path_len,
                       char *err, size_t err_len)
{
    return n > 0 ? s_fetch_parts(e, ref, metas, n, file, o, path, path_len, err, err_len)
                 : s_fetch_whole(e, ref, metas, file, o, path, path_len, err, err_len);
}

/* The layers [begin, end) of file (metas: its n parts' metadata, or the
 * file's when n is 0), into a partial file under the lock. */
static int s_fetch_range(const hub_env_t *e, const sw_hub_ref_t *ref, const hub_meta_t *metas,
                         int n, const char *file, int begin, int end, const sw_hub_opts_t *o,
                         char *path, size_t path_len, char *err, size_t err_len)
{
    char first[400];
    if (n > 0 && hub_set_part(file, 0, first, sizeof first) != 0) {
        sw_errf(err, err_len, "the name of part 1 of %s is too long", file);
        return -1;
    }
    const char *name = n > 0 ? first : file;
    if (s_all_cached(e, metas, n > 0 ? n : 1)) /* the whole file (set) is here */
        return s_fetch_all(e, ref, metas, n, file, o, path, path_len, err, err_len);
    if (hub_cached_partial(e, metas[0].commit, name, begin, end, path, path_len) == 0)
        return hub_write_ref(e, ref, metas[0].commit, err, err_len);
    for (int i = 0; i < (n > 0 ? n : 1); i++)
        if (metas[i].size < 0) {
            sw_errf(err, err_len, "the hub announces no size for %s: a partial download needs it",
                    name);
            return -1;
        }
    const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
    char final[HUB_PATH], lockname[128];
    char span[32];
    if (end >= 0)
        snprintf(span, sizeof span, "%d-%d", begin, end);
    else
        snprintf(span, sizeof span, "%d-end", begin);
    if (hub_pathf(final, sizeof final, "%s/shardwire-partial/%s/layers-%s/%s", e->repo_dir,
                  metas[0].commit, span, base) != 0) {
        sw_errf(err, err_len, "the cache path is too long");
        return -1;
    }
    if (hub_mkdirs(final, 0, err, err_len) != 0)
        return -1;
    snprintf(lockname, sizeof lockname, "%s.layers-%s", metas[0].etag, span);
    int lock = hub_lock(e, lockname, o ? o->stop : NULL, err, err_len);
    if (lock < 0)
        return -1;
    struct stat st;
    int rc;
    if (stat(final, &st) == 0) /* another process finished it while this one waited */
        rc = snprintf(path, path_len, "%s", final) < (int)path_len ? 0 : -1;
    else
        rc = hub_download_partial(e, ref, metas, n > 0 ? n : 1, name, begin, end, o, final, path,
                                  path_len, err, err_len);
    close(lock);
    if (rc == 1)
        return s_fetch_all(e, ref, metas, n, file, o, path, path_len, err, err_len);
    return rc == 0 ? hub_write_ref(e, ref, metas[0].commit, err, err_len) : rc;
}

int sw_hub_fetch_layers(const sw_hub_ref_t *ref, const sw_hub_opts_t *o, int begin, int end,
                        char *path, size_t path_len, char *err, size_t err_len)
{
    hub_env_t e;
    hub_meta_t m, *metas = NULL;
    char file[400];
    hub_range_req_t req = {begin, end};
    int rc = s_lookup(&e, ref, file, sizeof file, &m, hub_cached_layers, &req, path, path_len, err,
                      err_len);
    if (rc != 0)
        return rc > 0 ? 0 : -1;
    const int n = hub_set_count(file);
    if (n > 0 && s_set_metas(&e, ref, file, n, &metas, err, err_len) != 0) {
        free(metas);
        return -1;
    }
    rc = s_fetch_range(&e, ref, n > 0 ? metas : &m, n, file, begin, end, o, path, path_len, err,
                       err_len);
    free(metas);
    return rc;
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
