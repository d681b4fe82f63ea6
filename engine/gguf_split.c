/*
 * gguf_split.c - split GGUF sets as one sw_gguf_t (gguf.h), and the opening
 * of a path that may be a part of one.
 *
 * llama.cpp's gguf-split writes a model as PREFIX-00001-of-0000N.gguf ...
 * PREFIX-0000N-of-0000N.gguf: the first part holds every metadata key/value,
 * each part the keys split.no (u16, its index from 0), split.count (u16, N)
 * and split.tensors.count (i32, the tensors of all parts), and a run of the
 * tensors (its own tensor infos, offsets relative to its own data section).
 *
 * A set opens from any part: its name gives the prefix and the others'
 * names. Every part's header is read (the file mapped, parsed, the header
 * copied to the heap and the mapping dropped), checked against the first
 * part (index, count, tensor count; no tensor twice; all tensors there), and
 * the tensor tables merged into the first part's sw_gguf_t, each tensor
 * knowing its part. A part is mapped again when a tensor of it is first used
 * (sw_gguf_tensor_data), after checking that its size and header are still
 * those read at open.
 */
#include "gguf.h"
#include "gguf_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

#define S_SUFFIX_LEN 20 /* "-NNNNN-of-MMMMM.gguf" */

int sw_gguf_split_name(const char *path, int *idx, int *count, size_t *prefix_len)
{
    const size_t n = strlen(path);
    if (n <= S_SUFFIX_LEN)
        return 0;
    const char *s = path + n - S_SUFFIX_LEN;
    int no = 0, of = 0;
    if (s[0] != '-' || memcmp(s + 6, "-of-", 4) != 0 || memcmp(s + 15, ".gguf", 5) != 0)
        return 0;
    for (int i = 0; i < 5; i++) {
        if (s[1 + i] < '0' || s[1 + i] > '9' || s[10 + i] < '0' || s[10 + i] > '9')
            return 0;
        no = no * 10 + (s[1 + i] - '0');
        of = of * 10 + (s[10 + i] - '0');
    }
    if (no < 1 || no > of || of > SW_GGUF_SPLIT_MAX)
        return 0;
    *idx = no - 1;
    *count = of;
    *prefix_len = n - S_SUFFIX_LEN;
    return 1;
}

int sw_gguf_split_path(char *out, size_t len, const char *prefix, size_t prefix_len, int idx,
                       int count)
{
    const int w =
        snprintf(out, len, "%.*s-%05d-of-%05d.gguf", (int)prefix_len, prefix, idx + 1, count);
    return w >= 0 && (size_t)w < len ? 0 : -1;
}

/*
 * The split keys of g (name: the part's name for messages): 0 when g has
 * none, 1 with them, -1 with err when they are malformed.
 */
static int s_split_keys(const sw_gguf_t *g, const char *name, int *no, int *count, int64_t *nt,
                        char *err, size_t err_len)
{
    uint64_t c, n;
    int64_t t;
    if (sw_gguf_find_key(g, SW_GGUF_SPLIT_COUNT) < 0)
        return 0;
    if (sw_gguf_get_u64(g, SW_GGUF_SPLIT_COUNT, &c) != 0 || c < 1 || c > SW_GGUF_SPLIT_MAX ||
        sw_gguf_get_u64(g, SW_GGUF_SPLIT_NO, &n) != 0 || n >= c ||
        sw_gguf_get_i64(g, SW_GGUF_SPLIT_TENSORS, &t) != 0 || t < 0) {
        sw_errf(err, err_len,
                "gguf: '%s': the keys " SW_GGUF_SPLIT_COUNT ", " SW_GGUF_SPLIT_NO
                " and " SW_GGUF_SPLIT_TENSORS " of a split part are missing or out of range",
                name);
        return -1;
    }
    *count = (int)c;
    *no = (int)n;
    *nt = t;
    return 1;
}

/* A header-only parse of the first len bytes of head (a file of size bytes),
 * owning a heap copy of them: NULL with err. */
static sw_gguf_t *s_header_copy(const void *head, uint64_t len, uint64_t size, char *err,
                                size_t err_len)
{
    uint8_t *copy = malloc(len ? (size_t)len : 1);
    if (!copy) {
        sw_errf(err, err_len, "gguf: out of memory for a header of %llu bytes",
                (unsigned long long)len);
        return NULL;
    }
    memcpy(copy, head, (size_t)len);
    sw_gguf_t *h = sw_gguf_parse(copy, len, size, err, err_len);
    if (!h) {
        free(copy);
        return NULL;
    }
    h->owns_base = 1;
    for (int64_t i = 0; i < h->n_tensors; i++)
        h->tensors[i].data = NULL;
    return h;
}

/* Bytes of g's header: everything before its data section (the file's
 * length when it ends first, a file without tensors). */
static uint64_t s_header_len(const sw_gguf_t *g)
{
    return g->data_off < g->size ? g->data_off : g->size;
}

/* The header of the part at path, read from its mapping and kept as a heap
 * copy (the mapping is dropped): NULL with err. */
static sw_gguf_t *s_part_header(const char *path, char *err, size_t err_len)
{
    sw_gguf_t *f = sw_gguf_open_file(path, err, err_len);
    if (!f)
        return NULL;
    sw_gguf_t *h = s_header_copy(f->base, s_header_len(f), f->size, err, err_len);
    sw_gguf_close(&f);
    return h;
}

/* Checks part i (h, named name) against the first part's split keys. 0, or -1 with err. */
static int s_check_part(const sw_gguf_t *h, const char *name, int i, int count, int64_t nt,
                        const char *first, char *err, size_t err_len)
{
    int no, c;
    int64_t t;
    const int s = s_split_keys(h, name, &no, &c, &t, err, err_len);
    if (s < 0)
        return -1;
    if (s == 0) {
        sw_errf(err, err_len,
                "gguf: '%s' has no " SW_GGUF_SPLIT_COUNT ": it is no part of the split set of "
                "'%s' (a file of its own under a part's name?)",
                name, first);
        return -1;
    }
    if (c != count) {
        sw_errf(err, err_len,
                "gguf: '%s' is part %d of a set of %d, but '%s' is of a set of %d: it belongs to "
                "another split set",
                name, no + 1, c, first, count);
        return -1;
    }
    if (no != i) {
        sw_errf(err, err_len,
                "gguf: '%s' holds part %d of its set (" SW_GGUF_SPLIT_NO " %d), not part %d as "
                "its name says: it belongs to another split set",
                name, no + 1, no, i + 1);
        return -1;
    }
    if (t != nt) {
        sw_errf(err, err_len,
                "gguf: '%s' is of a set of %lld tensors, but '%s' is of a set of %lld: it "
                "belongs to another split set",
                name, (long long)t, first, (long long)nt);
        return -1;
    }
    return 0;
}

/*
 * Makes g (the first part's header, with parts[] filled: hdr of every other
 * part) the set: every part's tensors in one table, each knowing its part,
 * indexed by name. 0, or -1 with err.
 */
static int s_merge(sw_gguf_t *g, const char *const *names, int64_t nt, char *err, size_t err_len)
{
    int64_t total = g->n_tensors;
    for (int i = 1; i < g->n_parts; i++)
        total += g->parts[i].hdr->n_tensors;
    sw_gguf_tensor_t *all = calloc(total ? (size_t)total : 1, sizeof *all);
    if (!all) {
        sw_errf(err, err_len, "gguf: out of memory for %lld tensors", (long long)total);
        return -1;
    }
    int64_t k = 0;
    for (int i = 0; i < g->n_parts; i++) {
        const sw_gguf_t *h = i == 0 ? g : g->parts[i].hdr;
        for (int64_t j = 0; j < h->n_tensors; j++) {
            all[k] = h->tensors[j];
            all[k].part = i;
            all[k].data = NULL;
            k++;
        }
    }
    free(g->tensors);
    g->tensors = all;
    g->n_tensors = total;
    int64_t a = 0, b = 0;
    const int rc = sw_gguf_index_tensors(g, &a, &b);
    if (rc == 1) {
        const sw_gguf_tensor_t *t = &g->tensors[a];
        sw_errf(err, err_len,
                "gguf: tensor '%.*s' is in both '%s' and '%s': a part of another split set",
                (int)(t->name.len < 80 ? t->name.len : 80), t->name.ptr, names[t->part],
                names[g->tensors[b].part]);
        return -1;
    }
    if (rc != 0) {
        sw_errf(err, err_len, "gguf: out of memory for %lld tensors", (long long)total);
        return -1;
    }
    if (total != nt) {
        sw_errf(
            err, err_len,
            "gguf: the %d parts of '%s' hold %lld tensors, not the %lld of " SW_GGUF_SPLIT_TENSORS
            ": a part of another split set among them, or one cut short",
            g->n_parts, names[0], (long long)total, (long long)nt);
        return -1;
    }
    return 0;
}

/* The set of n parts whose headers are hdrs[] (taken over, also on failure),
 * named names[] (paths when on disk, else NULL). */
static sw_gguf_t *s_assemble(sw_gguf_t **hdrs, const char *const *names, int on_disk, int n,
                             char *err, size_t err_len)
{
    sw_gguf_t *g = hdrs[0];
    hdrs[0] = NULL;
    int no, count;
    int64_t nt;
    struct sw_gguf_part *parts = calloc((size_t)n, sizeof *parts);
    if (!parts) {
        sw_errf(err, err_len, "gguf: out of memory");
        goto fail;
    }
    g->parts = parts;
    g->n_parts = n;
    for (int i = 0; i < n; i++) {
        sw_gguf_t *h = i == 0 ? g : hdrs[i];
        parts[i].hdr = i == 0 ? NULL : h;
        hdrs[i] = NULL;
        parts[i].size = h->size;
        parts[i].data_off = h->data_off;
        if (on_disk && !(parts[i].path = strdup(names[i]))) {
            sw_errf(err, err_len, "gguf: out of memory");
            goto fail;
        }
    }
    const int s = s_split_keys(g, names[0], &no, &count, &nt, err, err_len);
    if (s < 0)
        goto fail;
    if (s == 0 || count != n || no != 0) {
        sw_errf(err, err_len, "gguf: '%s' is not part 1 of a split set of %d", names[0], n);
        goto fail;
    }
    for (int i = 1; i < n; i++)
        if (s_check_part(parts[i].hdr, names[i], i, n, nt, names[0], err, err_len) != 0)
            goto fail;
    if (s_merge(g, names, nt, err, err_len) != 0)
        goto fail;
    return g;
fail:
    for (int i = 0; i < n; i++)
        sw_gguf_close(&hdrs[i]);
    sw_gguf_close(&g);
    return NULL;
}

/* The split set whose part idx of count is at path. */
static sw_gguf_t *s_open_set(const char *path, int idx, int count, char *err, size_t err_len)
{
    int name_idx, name_count;
    size_t plen;
    if (!sw_gguf_split_name(path, &name_idx, &name_count, &plen) || name_idx != idx ||
        name_count != count) {
        sw_errf(err, err_len,
                "gguf: '%s' is part %d of a split set of %d, but its name does not end in "
                "-%05d-of-%05d.gguf, by which its other parts are found: name the parts as "
                "llama.cpp's gguf-split does",
                path, idx + 1, count, idx + 1, count);
        return NULL;
    }
    sw_gguf_t **hdrs = calloc((size_t)count, sizeof *hdrs);
    char **names = calloc((size_t)count, sizeof *names);
    sw_gguf_t *g = NULL;
    const size_t len = plen + S_SUFFIX_LEN + 1;
    for (int i = 0; hdrs && names && i < count; i++) {
        char why[768];
        if (!(names[i] = malloc(len)) || sw_gguf_split_path(names[i], len, path, plen, i, count)) {
            sw_errf(err, err_len, "gguf: out of memory");
            goto out;
        }
        if (access(names[i], F_OK) != 0 && errno == ENOENT) {
            sw_errf(err, err_len,
                    "gguf: part %d of %d of the split set is missing: '%s' (every part must sit "
                    "beside the others, named as gguf-split names them)",
                    i + 1, count, names[i]);
            goto out;
        }
        if (!(hdrs[i] = s_part_header(names[i], why, sizeof why))) {
            sw_errf(err, err_len, "gguf: part %d of %d of a split set, '%s': %s", i + 1, count,
                    names[i], strncmp(why, "gguf: ", 6) ? why : why + 6);
            goto out;
        }
    }
    if (!hdrs || !names) {
        sw_errf(err, err_len, "gguf: out of memory");
        goto out;
    }
    g = s_assemble(hdrs, (const char *const *)names, 1, count, err, err_len);
out:
    for (int i = 0; i < count; i++) {
        if (hdrs)
            sw_gguf_close(&hdrs[i]);
        if (names)
            free(names[i]);
    }
    free(hdrs);
    free(names);
    return g;
}

sw_gguf_t *sw_gguf_open(const char *path, char *err, size_t err_len)
{
    sw_gguf_t *g = sw_gguf_open_file(path, err, err_len);
    int no, count;
    int64_t nt;
    const int s = g ? s_split_keys(g, path, &no, &count, &nt, err, err_len) : -1;
    if (s == 0 || (s == 1 && count == 1))
        return g;      /* a file of its own (a "set" of one part holds everything) */
    sw_gguf_close(&g); /* the set maps its parts as their tensors are used */
    return s == 1 ? s_open_set(path, no, count, err, err_len) : NULL;
}

sw_gguf_t *sw_gguf_open_split_headers(const void *const *heads, const size_t *lens,
                                      const uint64_t *sizes, const char *const *names, int n,
                                      char *err, size_t err_len)
{
    if (n < 2 || n > SW_GGUF_SPLIT_MAX) {
        sw_errf(err, err_len, "gguf: a split set of %d parts", n);
        return NULL;
    }
    sw_gguf_t **hdrs = calloc((size_t)n, sizeof *hdrs);
    if (!hdrs) {
        sw_errf(err, err_len, "gguf: out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        char why[512];
        sw_gguf_t *f = sw_gguf_parse(heads[i], lens[i], sizes[i], why, sizeof why);
        hdrs[i] = f ? s_header_copy(heads[i], s_header_len(f), sizes[i], why, sizeof why) : NULL;
        sw_gguf_close(&f);
        if (!hdrs[i]) {
            sw_errf(err, err_len, "gguf: part '%s': %s", names[i], why);
            for (int j = 0; j < i; j++)
                sw_gguf_close(&hdrs[j]);
            free(hdrs);
            return NULL;
        }
    }
    sw_gguf_t *g = s_assemble(hdrs, names, 0, n, err, err_len);
    free(hdrs);
    return g;
}

int sw_gguf_part_count(const sw_gguf_t *g)
{
    return g->n_parts > 0 ? g->n_parts : 1;
}

const char *sw_gguf_part_path(const sw_gguf_t *g, int i)
{
    return i >= 0 && i < g->n_parts ? g->parts[i].path : NULL;
}

uint64_t sw_gguf_part_size(const sw_gguf_t *g, int i)
{
    if (g->n_parts == 0)
        return i == 0 ? g->size : 0;
    return i >= 0 && i < g->n_parts ? g->parts[i].size : 0;
}

const void *sw_gguf_part_header(const sw_gguf_t *g, int i, uint64_t *len)
{
    const sw_gguf_t *h = i == 0 ? g : i > 0 && i < g->n_parts ? g->parts[i].hdr : NULL;
    *len = h ? s_header_len(h) : 0;
    return h ? h->base : NULL;
}

int sw_gguf_part_mapped(const sw_gguf_t *g, int i)
{
    if (g->n_parts == 0)
        return i == 0 && g->mapped;
    return i >= 0 && i < g->n_parts && g->parts[i].map != NULL;
}

/* Maps part i of the set g, checking that its file is still the one read at
 * open (size and header), and points its tensors into the mapping. */
static int s_map_part(sw_gguf_t *g, int i, char *err, size_t err_len)
{
    struct sw_gguf_part *p = &g->parts[i];
    uint64_t hlen;
    const void *head = sw_gguf_part_header(g, i, &hlen);
    if (!p->path) {
        sw_errf(err, err_len, "gguf: part %d of this split set is not on disk", i + 1);
        return -1;
    }
    int fd = open(p->path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        sw_errf(err, err_len, "gguf: cannot open '%s': %s", p->path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if ((uint64_t)st.st_size != p->size) {
        sw_errf(err, err_len, "gguf: '%s' changed since it was opened (%llu bytes, now %lld)",
                p->path, (unsigned long long)p->size, (long long)st.st_size);
        close(fd);
        return -1;
    }
    void *map = mmap(NULL, (size_t)p->size, PROT_READ, MAP_PRIVATE, fd, 0);
    const int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        sw_errf(err, err_len, "gguf: cannot map '%s' (%llu bytes): %s", p->path,
                (unsigned long long)p->size, strerror(map_errno));
        return -1;
    }
    if (memcmp(map, head, (size_t)hlen) != 0) {
        munmap(map, (size_t)p->size);
        sw_errf(err, err_len, "gguf: '%s' changed since it was opened (its header differs)",
                p->path);
        return -1;
    }
    p->map = map;
    for (int64_t j = 0; j < g->n_tensors; j++)
        if (g->tensors[j].part == i)
            g->tensors[j].data = p->map + g->tensors[j].offset;
    return 0;
}

const void *sw_gguf_tensor_data(sw_gguf_t *g, const sw_gguf_tensor_t *t, char *err, size_t err_len)
{
    if (t->data)
        return t->data;
    if (g->n_parts == 0 || t->part < 0 || t->part >= g->n_parts) {
        sw_errf(err, err_len, "gguf: tensor '%.*s' has no data here (a header-only open)",
                (int)(t->name.len < 80 ? t->name.len : 80), t->name.ptr);
        return NULL;
    }
    if (s_map_part(g, t->part, err, err_len) != 0)
        return NULL;
    return g->parts[t->part].map + t->offset;
}

int sw_gguf_read(const sw_gguf_t *g, int i, uint64_t off, void *buf, size_t n, char *err,
                 size_t err_len)
{
    const uint64_t size = sw_gguf_part_size(g, i);
    if (off > size || n > size - off) {
        sw_errf(err, err_len, "gguf: bytes [%llu, +%zu) lie outside part %d",
                (unsigned long long)off, n, i + 1);
        return -1;
    }
    if (g->n_parts == 0 || g->parts[i].map) {
        const uint8_t *base = g->n_parts == 0 ? g->base : g->parts[i].map;
        const uint64_t have = g->n_parts == 0 ? g->buf_len : size;
        if (off + n > have) {
            sw_errf(err, err_len, "gguf: bytes [%llu, +%zu) are not in memory (a header-only open)",
                    (unsigned long long)off, n);
            return -1;
        }
        memcpy(buf, base + off, n);
        return 0;
    }
    const char *path = g->parts[i].path;
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    size_t done = 0;
    while (fd >= 0 && done < n) {
        const ssize_t r = pread(fd, (uint8_t *)buf + done, n - done, (off_t)(off + done));
        if (r <= 0)
            break;
        done += (size_t)r;
    }
    const int e = errno;
    if (fd >= 0)
        close(fd);
    if (done != n) {
        sw_errf(err, err_len, "gguf: cannot read '%s': %s", path ? path : "(no file)",
                fd < 0 || done == 0 ? strerror(e) : "it is shorter than when it was opened");
        return -1;
    }
    return 0;
}
