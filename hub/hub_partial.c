/*
 * hub_partial.c - partial downloads (hub.h's sw_hub_fetch_layers): the GGUF
 * header and the tensors of a layer range fetched with HTTP range requests
 * (each answer's Content-Range checked) into a partial GGUF file
 * (engine/include/partial.h), resumable through FILE.incomplete and its
 * .head; and the cached partial files that hold a range.
 */
#include "hub_impl.h"

#include "gguf.h"
#include "log.h"
#include "partial.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_HEAD_FIRST (1ll << 20) /* bytes of the first header request (doubled as needed) */
#define S_HEAD_PART (1ll << 16)  /* the same for a split set's other parts (headers alone) */
#define S_HEAD_MAX (1ll << 30)   /* a larger header is refused */
#define S_RANGE_GAP (1ll << 16)  /* tensors closer than this in the source: one request */

/* Where fetched source bytes go: 0, or an errno. */
typedef int (*s_sink_fn)(void *ctx, long long pos, const uint8_t *b, size_t n);

enum { S_RG_OK, S_RG_NO_RANGES, S_RG_BAD_RANGE, S_RG_STATUS, S_RG_WRITE, S_RG_TOO_MUCH };

/* One range request. */
typedef struct s_rg {
    hub_resp_t resp;             /* its headers */
    long long pos;               /* next source byte expected */
    long long to;                /* last source byte asked for */
    long long total;             /* the file's size, which Content-Range must name */
    int checked;                 /* the status was looked at */
    int fail;                    /* S_RG_* */
    int write_err;               /* errno of a failed write */
    s_sink_fn sink;              /* where the bytes go */
    void *ctx;                   /* its state */
    hub_dl_t *draw;              /* progress: draw->have counts fetched bytes */
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
        hub_draw(g->draw, 0);
    }
    return len;
}

/*
 * Source bytes [from, to] of the file at url (total bytes long) into sink,
 * with Range requests whose answers must be 206 with exactly that
 * Content-Range; a response cut short is resumed (HUB_ATTEMPTS in a row
 * without progress). 0, or -1 with err.
 */
static int s_fetch_range(const hub_env_t *e, const char *url, long long from, long long to,
                         long long total, s_sink_fn sink, void *ctx, hub_dl_t *draw,
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
        hub_resp_reset(&g.resp);
        g.checked = g.fail = 0;
        struct curl_slist *hdrs = NULL;
        CURL *c = hub_curl(e, url, &g.resp, &hdrs);
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
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, hub_on_xfer);
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
        if (fails >= HUB_ATTEMPTS) {
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
    int part;                      /* the source's split part being fetched (0: a file) */
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
        while (p->k < pl->n_segs &&
               (pl->segs[p->k].part < p->part ||
                (pl->segs[p->k].part == p->part &&
                 (uint64_t)pos >= pl->segs[p->k].src_off + pl->segs[p->k].len)))
            p->k++;
        if (p->k == pl->n_segs || pl->segs[p->k].part != p->part)
            return 0; /* past the part's last tensor */
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
static long long s_ranges(const hub_env_t *e, const hub_meta_t *metas, s_part_t *ctx,
                          hub_dl_t *draw, volatile sig_atomic_t *stop, const char *const *labels,
                          long long have, char *err, size_t err_len)
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
        for (; j < pl->n_segs && pl->segs[j].part == s->part &&
               (long long)pl->segs[j].src_off - (to + 1) <= S_RANGE_GAP;
             j++)
            if (pl->segs[j].len)
                to = (long long)(pl->segs[j].src_off + pl->segs[j].len) - 1;
        bytes += to - from + 1;
        const hub_meta_t *m = &metas[s->part];
        ctx->part = s->part;
        if (ctx->fd >= 0 && s_fetch_range(e, m->url, from, to, m->size, s_part_sink, ctx, draw,
                                          stop, labels[s->part], err, err_len) != 0)
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
 * The source's header and, with data, the first MiB of its tensor data (what
 * the fingerprint hashes; the other parts of a split set give their header
 * alone) into h, from the .head file and range requests: the parsed header,
 * or NULL with err.
 */
static sw_gguf_t *s_fetch_head(const hub_env_t *e, const hub_meta_t *m, s_head_t *h, int data,
                               hub_dl_t *draw, volatile sig_atomic_t *stop, const char *label,
                               char *err, size_t err_len)
{
    s_head_load(h, m->size);
    if (h->len == 0 && ftruncate(h->fd, 0) != 0) {
        sw_errf(err, err_len, "cannot write the header of %s: %s", label, strerror(errno));
        return NULL;
    }
    long long want = h->len > 0 ? (long long)h->len : data ? S_HEAD_FIRST : S_HEAD_PART;
    char why[512] = "";
    for (;;) {
        if (want > m->size)
            want = m->size;
        if ((long long)h->len < want &&
            s_fetch_range(e, m->url, (long long)h->len, want - 1, m->size, s_head_sink, h, draw,
                          stop, label, err, err_len) != 0)
            return NULL;
        sw_gguf_t *g = sw_gguf_open_header(h->buf, h->len, (uint64_t)m->size, why, sizeof why);
        if (g && (!data || (long long)h->len >= (long long)sw_fingerprint_len(g)))
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
int hub_cached_partial(const hub_env_t *e, const char *commit, const char *file, int begin, int end,
                       char *path, size_t len)
{
    char dir[HUB_PATH];
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    if (hub_pathf(dir, sizeof dir, "%s/shardwire-partial/%s", e->repo_dir, commit) != 0)
        return -1;
    DIR *d = opendir(dir);
    int found = -1;
    for (struct dirent *de; d && found != 0 && (de = readdir(d));) {
        char p[HUB_PATH], why[256];
        if (strncmp(de->d_name, "layers-", 7) != 0)
            continue;
        if (hub_pathf(p, sizeof p, "%s/%s/%s", dir, de->d_name, base) != 0)
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

/* hub_cached_fn for a layer range: the whole cached file, else a partial that holds the range. */
int hub_cached_layers(const hub_env_t *e, const sw_hub_ref_t *ref, const char *file, void *ctx,
                      char *path, size_t len)
{
    const hub_range_req_t *r = ctx;
    char commit[41], first[400];
    const int set = hub_set_count(file) > 1;
    if (set ? hub_set_from_cache(e, ref, file, path, len) == 0
            : hub_from_cache(e, ref, file, path, len) == 0)
        return 0;
    if (set && hub_set_part(file, 0, first, sizeof first) != 0)
        return -1;
    return hub_cached_commit(e, ref, commit) == 0
               ? hub_cached_partial(e, commit, set ? first : file, r->begin, r->end, path, len)
               : -1;
}

static double s_mib(long long b)
{
    return (double)b / (1 << 20);
}

/* Opens the .incomplete partial file part for p (p->plan set): a resume
 * keeps what is there when its header is the plan's; otherwise the file
 * starts over with the plan's header. 0, or -1 with err. */
static int s_part_open(s_part_t *p, const char *part, const char *label, int begin, int last,
                       char *err, size_t err_len)
{
    const sw_partial_plan_t *plan = p->plan;
    p->fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    struct stat st;
    if (p->fd < 0 || fstat(p->fd, &st) != 0) {
        sw_errf(err, err_len, "cannot write %s: %s", part, strerror(errno));
        return -1;
    }
    p->have = st.st_size;
    if (p->have > 0) { /* a resume: its header must be this plan's */
        uint8_t *cur = p->have >= (long long)plan->header_len ? malloc(plan->header_len) : NULL;
        int same = cur && pread(p->fd, cur, plan->header_len, 0) == (ssize_t)plan->header_len &&
                   !memcmp(cur, plan->header, plan->header_len) && p->have <= (long long)plan->size;
        free(cur);
        if (!same)
            p->have = 0;
        else
            fprintf(stderr, "pull: %s layers %d:%d: resuming at %.1f MiB of %.1f MiB\n", label,
                    begin, last, s_mib(p->have), s_mib((long long)plan->size));
    }
    if (p->have < (long long)plan->header_len) {
        if (ftruncate(p->fd, 0) != 0 ||
            s_pwrite_all(p->fd, plan->header, plan->header_len, 0) != 0) {
            sw_errf(err, err_len, "cannot write %s: %s", part, strerror(errno));
            return -1;
        }
        p->have = (long long)plan->header_len;
    }
    return 0;
}

/* What can be checked of a finished partial file without the whole file: it
 * parses as a GGUF, every tensor's size matches its type and shape, and it is
 * the plan's. 0, or -1 with err (the file removed). */
static int s_part_check(const char *part, const sw_partial_plan_t *plan, int n_layer,
                        const char *label, char *err, size_t err_len)
{
    char why[512];
    sw_gguf_t *chk = sw_gguf_open(part, why, sizeof why);
    sw_partial_info_t pi;
    int ok = chk && sw_gguf_tensor_count(chk) == plan->n_segs &&
             sw_partial_info(chk, n_layer, &pi, why, sizeof why) == 1;
    sw_gguf_close(&chk);
    if (!ok) {
        sw_errf(err, err_len, "the partial file of %s does not check: %s (removed; run again)",
                label, why);
        unlink(part);
        return -1;
    }
    return 0;
}

/* The source of a partial download: a file, or the parts of a split set. */
typedef struct s_src {
    int n;                   /* parts (1: a file of its own) */
    const hub_meta_t *metas; /* (n) the hub's metadata of each */
    char **names;            /* (n) their paths in the repository */
    const char **labels;     /* (n) their file names, for messages */
    char **headp;            /* (n) their .head files (a resumed pull's header bytes) */
    s_head_t *heads;         /* (n) their first bytes */
    sw_gguf_t **hdrs;        /* (n) their headers */
    sw_gguf_t *set;          /* the set of them (n > 1) */
    const sw_gguf_t *g;      /* what the plan cuts: hdrs[0], or the set */
    long long size;          /* bytes of all parts */
} s_src_t;

static void s_src_free(s_src_t *src)
{
    for (int i = 0; i < src->n; i++) {
        if (src->names)
            free(src->names[i]);
        if (src->headp)
            free(src->headp[i]);
        if (src->heads) {
            free(src->heads[i].buf);
            if (src->heads[i].fd >= 0)
                close(src->heads[i].fd);
        }
        if (src->hdrs)
            sw_gguf_close(&src->hdrs[i]);
    }
    sw_gguf_close(&src->set);
    free(src->names);
    free(src->labels);
    free(src->headp);
    free(src->heads);
    free(src->hdrs);
}

/* The n parts of file (its set's part 1 when n > 1) with their .head files
 * beside part (FILE.incomplete): 0, or -1 with err. */
static int s_src_open(s_src_t *src, const char *file, const hub_meta_t *metas, int n,
                      const char *part, char *err, size_t err_len)
{
    *src = (s_src_t){.n = n, .metas = metas};
    if (n < 1 || n > HUB_MAX_PARTS) {
        sw_errf(err, err_len, "a split set of %d parts", n);
        src->n = 0;
        return -1;
    }
    src->names = calloc((size_t)n, sizeof *src->names);
    src->labels = calloc((size_t)n, sizeof *src->labels);
    src->headp = calloc((size_t)n, sizeof *src->headp);
    src->heads = calloc((size_t)n, sizeof *src->heads);
    src->hdrs = calloc((size_t)n, sizeof *src->hdrs);
    for (int i = 0; src->heads && i < n; i++)
        src->heads[i].fd = -1;
    if (!src->names || !src->labels || !src->headp || !src->heads || !src->hdrs) {
        sw_errf(err, err_len, "out of memory");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        src->names[i] = malloc(400);
        src->headp[i] = malloc(HUB_PATH + 16);
        if (!src->names[i] || !src->headp[i] ||
            (n > 1 ? hub_set_part(file, i, src->names[i], 400)
                   : snprintf(src->names[i], 400, "%s", file) >= 400) ||
            (i == 0 ? hub_pathf(src->headp[i], HUB_PATH + 16, "%s.head", part)
                    : hub_pathf(src->headp[i], HUB_PATH + 16, "%s.head.%05d", part, i + 1))) {
            sw_errf(err, err_len, "the cache path is too long");
            return -1;
        }
        const char *slash = strrchr(src->names[i], '/');
        src->labels[i] = slash ? slash + 1 : src->names[i];
        src->heads[i].fd = open(src->headp[i], O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (src->heads[i].fd < 0) {
            sw_errf(err, err_len, "cannot write %s: %s", src->headp[i], strerror(errno));
            return -1;
        }
        src->size += metas[i].size;
    }
    return 0;
}

/* Every part's header (and the first part's first MiB of data), and the set
 * of them: 0 with src->g, or -1 with err. */
static int s_src_heads(s_src_t *src, const hub_env_t *e, hub_dl_t *d, volatile sig_atomic_t *stop,
                       char *err, size_t err_len)
{
    for (int i = 0; i < src->n; i++)
        if (!(src->hdrs[i] = s_fetch_head(e, &src->metas[i], &src->heads[i], i == 0, d, stop,
                                          src->labels[i], err, err_len)))
            return -1;
    if (src->n == 1) {
        src->g = src->hdrs[0];
        return 0;
    }
    const size_t n = src->n > 1 && src->n <= HUB_MAX_PARTS ? (size_t)src->n : 1;
    const void **bufs = calloc(n, sizeof *bufs);
    size_t *lens = calloc(n, sizeof *lens);
    uint64_t *sizes = calloc(n, sizeof *sizes);
    for (int i = 0; bufs && lens && sizes && i < (int)n; i++) {
        bufs[i] = src->heads[i].buf;
        lens[i] = src->heads[i].len;
        sizes[i] = (uint64_t)src->metas[i].size;
    }
    char why[768] = "out of memory";
    if (bufs && lens && sizes)
        src->set = sw_gguf_open_split_headers(bufs, lens, sizes, (const char *const *)src->names,
                                              (int)n, why, sizeof why);
    free(bufs);
    free(lens);
    free(sizes);
    if (!src->set) {
        sw_errf(err, err_len, "the split set %s cannot be cut: %s", src->names[0], why);
        return -1;
    }
    src->g = src->set;
    return 0;
}

/* A plan refused (a range this model lacks) or not wanted (the whole file):
 * nothing to resume, so the .head files and the empty layers folder go. */
static void s_src_drop(const s_src_t *src, const char *final)
{
    for (int i = 0; i < src->n; i++)
        unlink(src->headp[i]);
    char dir[HUB_PATH];
    snprintf(dir, sizeof dir, "%s", final);
    if (strrchr(dir, '/'))
        *strrchr(dir, '/') = 0;
    rmdir(dir);
}

/* The partial download proper, under the lock: 0 with the file at final; 1
 * when the range is every layer (the caller fetches the whole file); -1 with
 * err. */
int hub_download_partial(const hub_env_t *e, const sw_hub_ref_t *ref, const hub_meta_t *metas,
                         int n_parts, const char *file, int begin, int end, const sw_hub_opts_t *o,
                         const char *final, char *path, size_t path_len, char *err, size_t err_len)
{
    volatile sig_atomic_t *stop = o ? o->stop : NULL;
    char part[HUB_PATH];
    s_src_t src = {0};
    s_part_t p = {.fd = -1};
    sw_partial_plan_t plan = {0};
    int rc = -1;
    if (hub_pathf(part, sizeof part, "%s.incomplete", final) != 0) {
        sw_errf(err, err_len, "the cache path is too long");
        return -1;
    }
    if (s_src_open(&src, file, metas, n_parts, part, err, err_len) != 0)
        goto out;
    const char *label = src.labels[0];
    hub_dl_t d = {.label = label, .progress = o ? o->progress : SW_HUB_QUIET, .expect = -1};
    d.t0 = hub_now();
    const int got_heads = s_src_heads(&src, e, &d, stop, err, err_len);
    const long long head_run = d.have; /* header bytes fetched by this run */
    if (got_heads != 0)
        goto out;
    int n_layer = 0;
    if (sw_partial_layers(src.g, &n_layer) != 0) {
        sw_errf(err, err_len, "%s: the header has no usable block_count", label);
        goto out;
    }
    const int last = end < 0 ? n_layer : end;
    if (begin == 0 && last == n_layer) { /* every layer: the whole file */
        fprintf(stderr, "pull: layers 0:%d are the whole model: downloading the whole %s\n",
                n_layer, n_parts > 1 ? "split set" : "file");
        rc = 1;
    }
    char fp[65], source[1024];
    sw_fingerprint_of(src.g, src.heads[0].buf + sw_gguf_data_offset(src.hdrs[0]), fp);
    snprintf(source, sizeof source, "hf:%s/%s@%s", ref->repo, src.names[0], metas[0].commit);
    const sw_partial_src_t id = {.source = source,
                                 .size = (uint64_t)src.size,
                                 .sha256 = n_parts == 1 && metas[0].is_sha256 ? metas[0].etag : "",
                                 .fingerprint = fp};
    if (rc == 1 || sw_partial_plan(src.g, begin, end, &id, &plan, err, err_len) != 0) {
        s_src_drop(&src, final);
        goto out;
    }
    p.plan = &plan;
    if (s_part_open(&p, part, label, begin, last, err, err_len) != 0)
        goto out;
    s_part_t count = {.fd = -1, .plan = &plan};
    long long need = s_ranges(e, metas, &count, NULL, NULL, src.labels, (long long)plan.header_len,
                              err, err_len);
    for (int i = 0; i < n_parts; i++)
        need += (long long)src.heads[i].len;
    const long long left = s_ranges(e, metas, &count, NULL, NULL, src.labels, p.have, err, err_len);
    d.expect = need;
    d.have = need - left;
    d.t0 = hub_now();
    d.t0_have = d.have;
    d.last_decile = -1;
    if (s_ranges(e, metas, &p, &d, stop, src.labels, p.have, err, err_len) < 0)
        goto out;
    hub_draw(&d, 1);
    if (ftruncate(p.fd, (off_t)plan.size) != 0 || fsync(p.fd) != 0) {
        sw_errf(err, err_len, "cannot write %s: %s", part, strerror(errno));
        goto out;
    }
    if (s_part_check(part, &plan, n_layer, label, err, err_len) != 0)
        goto out;
    if (rename(part, final) != 0) {
        sw_errf(err, err_len, "cannot move %s into place: %s", part, strerror(errno));
        goto out;
    }
    for (int i = 0; i < n_parts; i++)
        unlink(src.headp[i]);
    if (!o || o->progress != SW_HUB_QUIET)
        fprintf(stderr,
                "pull: %s layers %d:%d: fetched %.1f MiB of %.1f MiB%s (%.0f%%), %.1f MiB in this "
                "run; the whole-file sha256 cannot be checked on a part (docs/deploy.md)\n",
                label, begin, last, s_mib(need), s_mib(src.size),
                n_parts > 1 ? " of the split set" : "", 100.0 * (double)need / (double)src.size,
                s_mib(head_run + d.have - d.t0_have));
    snprintf(path, path_len, "%s", final);
    rc = 0;
out:
    s_src_free(&src);
    sw_partial_plan_free(&plan);
    if (p.fd >= 0)
        close(p.fd);
    return rc;
}
