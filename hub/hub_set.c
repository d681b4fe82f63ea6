/*
 * hub_set.c - split GGUF sets on the hub (engine/include/gguf.h): a file
 * named PREFIX-NNNNN-of-MMMMM.gguf (M > 1) is one part of a set that llama.cpp's
 * gguf-split wrote, and a pull of any part means the whole set: every part's
 * name, the hub's metadata of every part (one commit), and whether every part
 * is in the cache. The downloads themselves are hub.c's (whole parts) and
 * hub_partial.c's (a layer range across the parts).
 */
#include "hub_impl.h"

#include "gguf.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int hub_set_count(const char *file)
{
    int idx, count;
    size_t plen;
    return sw_gguf_split_name(file, &idx, &count, &plen) && count > 1 ? count : 0;
}

int hub_set_part(const char *file, int i, char *out, size_t len)
{
    int idx, count;
    size_t plen;
    if (!sw_gguf_split_name(file, &idx, &count, &plen) || i < 0 || i >= count)
        return -1;
    return sw_gguf_split_path(out, len, file, plen, i, count);
}

int hub_set_check(const char *file, char *err, size_t err_len)
{
    const int n = hub_set_count(file);
    if (n > HUB_MAX_PARTS) {
        sw_errf(err, err_len,
                "%s is a part of a split set of %d parts: more than the %d a pull takes", file, n,
                HUB_MAX_PARTS);
        return -1;
    }
    return 0;
}

int hub_set_resolve(const hub_env_t *e, const sw_hub_ref_t *ref, const char *file,
                    hub_meta_t *metas, char *err, size_t err_len)
{
    const int n = hub_set_count(file);
    for (int i = 0; i < n; i++) {
        char part[400], why[768];
        if (hub_set_part(file, i, part, sizeof part) != 0) {
            sw_errf(err, err_len, "the name of part %d of %s is too long", i + 1, file);
            return -1;
        }
        const int rc = hub_resolve(e, ref, part, &metas[i], why, sizeof why);
        if (rc != 0) {
            sw_errf(err, err_len, "part %d of %d of the split set %s: %s", i + 1, n, file, why);
            return rc;
        }
        if (i > 0 && strcmp(metas[i].commit, metas[0].commit) != 0) {
            sw_errf(err, err_len,
                    "the hub gave part %d of %s at commit %.12s and part 1 at %.12s (the "
                    "repository changed during the pull?): run it again",
                    i + 1, file, metas[i].commit, metas[0].commit);
            return -1;
        }
        if (metas[i].size < 0) {
            sw_errf(err, err_len, "the hub announces no size for %s", part);
            return -1;
        }
    }
    return 0;
}

int hub_set_from_cache(const hub_env_t *e, const sw_hub_ref_t *ref, const char *file, char *path,
                       size_t len)
{
    const int n = hub_set_count(file);
    for (int i = n - 1; i >= 0; i--) { /* ends with part 1's path */
        char part[400];
        if (hub_set_part(file, i, part, sizeof part) != 0 ||
            hub_from_cache(e, ref, part, path, len) != 0)
            return -1;
    }
    return 0;
}
