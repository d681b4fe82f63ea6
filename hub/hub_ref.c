/*
 * hub_ref.c - the references that name a hub file: `shardwire pull`'s
 * ORG/NAME[:FILE|:TAG][@REVISION] and --model's hf:ORG/NAME/FILE[@REVISION]
 * (hub.h). Every name is checked before it becomes part of a path or a URL.
 */
#include "hub_impl.h"

#include "log.h"

#include <stdio.h>
#include <string.h>

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
int hub_path_ok(const char *p, const char *extra, size_t max)
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
        !hub_path_ok(ref->revision, S_REV_CHARS, sizeof ref->revision)) {
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
            !hub_path_ok(ref->file, HUB_FILE_CHARS, sizeof ref->file)) {
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
        !hub_path_ok(ref->file, HUB_FILE_CHARS, sizeof ref->file)) {
        sw_errf(err, err_len,
                "'%s' is not hf:ORG/NAME/FILE[@REVISION] (e.g. "
                "hf:Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf)",
                uri);
        return -1;
    }
    return 0;
}
