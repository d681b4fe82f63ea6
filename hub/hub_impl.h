/*
 * hub_impl.h - what the files of hub/ share; private to hub/ (never included
 * from another folder: tests/unit/test_layers.py). The API is hub.h.
 *
 * The download client is cut by concern, each file calling only the ones
 * below it (no circle between them, tests/unit/test_layers.py):
 *
 *   hub.c          the API's fetches: the hub's metadata or a cached copy,
 *                  a whole file into the cache, a layer range, --model hf:
 *   hub_partial.c  partial downloads: a layer range's tensors by HTTP range
 *                  requests into a partial GGUF (engine/include/partial.h),
 *                  from a file or across the parts of a split set
 *   hub_set.c      split GGUF sets: the parts' names, metadata and cache
 *   hub_download.c the resumable, sha256-checked download of a whole file,
 *                  and the progress shown while bytes come in
 *   hub_choose.c   which .gguf file of a repository (its listing, or the cache)
 *   hub_http.c     libcurl: handles, the hub's headers and errors, the
 *                  resolve HEAD that gives a file's commit, etag and size
 *   hub_cache.c    the environment (HF_*) and the cache's layout: snapshots,
 *                  blobs, refs, locks
 *   hub_ref.c      the ORG/NAME[:FILE][@REV] and hf: references
 *
 * Everything the hub (or anything pretending to be it) sends is hostile:
 * commits and etags must be lower-case hex of the right length before they
 * become file names, sizes are bounded, a body never grows past the size
 * announced, and JSON listings are bounded and type-checked.
 */
#ifndef SW_HUB_IMPL_H
#define SW_HUB_IMPL_H

#include "hub.h"

#include "sha256.h"

#include <curl/curl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>

#define HUB_MAX_FILE (1ull << 41) /* 2 TiB: larger "sizes" are refused */
#define HUB_ATTEMPTS 5            /* download attempts in one run (each resumes) */
#define HUB_PATH 4096
#define HUB_FILE_CHARS "._-+()[] " /* what a file name in a repository may hold */
#define HUB_MAX_PARTS 1024         /* parts of a split set a pull takes */

typedef struct hub_meta hub_meta_t; /* the hub's metadata for a file (below) */

/* ---- references (hub_ref.c) ---- */

/* 1 when p is components separated by '/', none empty, '.' or '..', of
 * letters, digits and extra, shorter than max. */
int hub_path_ok(const char *p, const char *extra, size_t max);

/* ---- environment and cache layout (hub_cache.c) ---- */

typedef struct hub_env {
    char endpoint[512];      /* hub base URL, no trailing '/' */
    char cache[HUB_PATH];    /* hub cache folder */
    char token[512];         /* bearer token, "" = none */
    int offline;             /* HF_HUB_OFFLINE */
    char repo_dir[HUB_PATH]; /* cache/models--ORG--NAME */
} hub_env_t;

/* snprintf into a path buffer: 0, or -1 when it does not fit (the path is then unusable). */
int hub_pathf(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The environment (HF_ENDPOINT, HF_HOME, HF_TOKEN, ...) for ref into e: 0 or -1 with err. */
int hub_env_load(hub_env_t *e, const sw_hub_ref_t *ref, char *err, size_t err_len);
/* mkdir -p of the folder holding path (up to its last '/'), or of path itself when whole. */
int hub_mkdirs(const char *path, int whole, char *err, size_t err_len);
/* 1 when s is exactly n lower-case hex digits. */
int hub_is_hex(const char *s, size_t n);
/* The commit the cache has for ref->revision (a commit itself, or refs/REV): 0 with commit. */
int hub_cached_commit(const hub_env_t *e, const sw_hub_ref_t *ref, char commit[41]);
/* A cached file for ref (with file set): 0 and its path when the snapshot link resolves. */
int hub_from_cache(const hub_env_t *e, const sw_hub_ref_t *ref, const char *file, char *path,
                   size_t len);
/* Takes the per-file lock (waiting, with one line, while another process downloads). fd or -1. */
int hub_lock(const hub_env_t *e, const char *etag, volatile sig_atomic_t *stop, char *err,
             size_t err_len);
/* snapshots/COMMIT/FILE -> ../../blobs/ETAG (one more ../ per folder in FILE): 0 with path. */
int hub_link(const hub_env_t *e, const hub_meta_t *m, const char *file, char *path, size_t len,
             char *err, size_t err_len);
/* refs/REVISION <- commit (unless the revision is the commit). 0 or -1 with err. */
int hub_write_ref(const hub_env_t *e, const sw_hub_ref_t *ref, const char *commit, char *err,
                  size_t err_len);

/* ---- HTTP (hub_http.c) ---- */

/* The headers of a response that the client reads. */
typedef struct hub_resp {
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
} hub_resp_t;

/* The hub's metadata for a file. */
struct hub_meta {
    char commit[41]; /* the revision's commit */
    char etag[65];   /* sha256 (LFS) or git blob sha1: the blob's name */
    int is_sha256;   /* etag is the file's sha256 */
    long long size;  /* bytes, -1 = unknown */
    char url[2048];  /* where to GET it */
};

/* libcurl's global state, once per process: 0 or -1 with err. */
int hub_curl_init(char *err, size_t err_len);
void hub_resp_reset(hub_resp_t *r);
/* A curl handle for url with the common settings; *hdrs receives the header list to free. */
CURL *hub_curl(const hub_env_t *e, const char *url, hub_resp_t *resp, struct curl_slist **hdrs);
/* curl's progress callback of every download: ud is the stop flag (or NULL); 1 aborts. */
int hub_on_xfer(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un);
/* The message for a failed hub answer. */
void hub_http_error(const hub_resp_t *r, const sw_hub_ref_t *ref, const char *file, char *err,
                    size_t err_len);
/* 1 when a curl failure means the hub is unreachable (a cached copy may do). */
int hub_unreachable(CURLcode cc);
/* Appends path's segments to url, percent-encoded. 0 or -1 (too long). */
int hub_url_path(char *url, size_t len, const char *path);
/* HEAD .../resolve/REV/FILE: 0 with m; 1 when the hub is unreachable (err
 * says why); -1 with err for an answer that settles it. */
int hub_resolve(const hub_env_t *e, const sw_hub_ref_t *ref, const char *file, hub_meta_t *m,
                char *err, size_t err_len);

/* ---- choosing a file (hub_choose.c) ---- */

/* The repository's one .gguf file (matching ref->tag) from its listing on
 * the hub: 0 with file; 1 when the hub is unreachable; -1 with err. */
int hub_choose_online(const hub_env_t *e, const sw_hub_ref_t *ref, char *file, size_t len,
                      char *err, size_t err_len);
/* The same from the cached snapshot (and partial downloads): 0 with file, or -1 with err. */
int hub_choose_cached(const hub_env_t *e, const sw_hub_ref_t *ref, char *file, size_t len,
                      char *err, size_t err_len);

/* ---- download (hub_download.c) ---- */

/* A download in progress: the file, its hash and the progress shown. Partial
 * downloads use it for the progress alone (f NULL). */
typedef struct hub_dl {
    FILE *f;                     /* the .incomplete file */
    sw_sha256_t sha;             /* over every byte in f */
    long long have;              /* bytes in f */
    long long start;             /* bytes in f when this attempt began */
    long long expect;            /* total size, -1 = unknown */
    hub_resp_t resp;             /* headers of the current response */
    int checked;                 /* the response's status was looked at */
    int bad_status;              /* the response is not the file */
    int restart;                 /* the server ignored Range: start over */
    int write_err;               /* a local write failed (errno) */
    int too_big;                 /* more bytes than announced */
    const char *label;           /* file name for progress */
    int progress;                /* enum sw_hub_progress */
    volatile sig_atomic_t *stop; /* stop flag */
    double t0;                   /* start time of this run (s) */
    long long t0_have;           /* bytes at t0 */
    double last_draw;            /* last progress output (s) */
    int last_decile;             /* last 10 % step reported */
} hub_dl_t;

/* Seconds on the monotonic clock. */
double hub_now(void);
/* The progress of d on stderr as d->progress says (final: the last line). */
void hub_draw(hub_dl_t *d, int final);
/* Downloads m into blob (resuming blob.incomplete), size and sha256 checked. 0 or -1 with err. */
int hub_download(const hub_env_t *e, const hub_meta_t *m, const char *label, const char *blob,
                 const sw_hub_opts_t *o, char *err, size_t err_len);

/* ---- partial downloads (hub_partial.c) ---- */

/* A cached copy that will do when the hub cannot be asked: 0 with path (the
 * fetches of hub.c take one: the whole file's, or hub_cached_layers). */
typedef int (*hub_cached_fn)(const hub_env_t *e, const sw_hub_ref_t *ref, const char *file,
                             void *ctx, char *path, size_t len);

/* The layers a partial fetch asks for: the ctx of hub_cached_layers. */
typedef struct hub_range_req {
    int begin, end; /* the layers asked for (end -1 = to the last) */
} hub_range_req_t;

/* The cached partial file of ref's file at commit that holds [begin, end): 0 with path. */
int hub_cached_partial(const hub_env_t *e, const char *commit, const char *file, int begin, int end,
                       char *path, size_t len);
/* hub_cached_fn for a layer range (ctx a hub_range_req_t): the whole cached
 * file, else a partial that holds the range. */
int hub_cached_layers(const hub_env_t *e, const sw_hub_ref_t *ref, const char *file, void *ctx,
                      char *path, size_t len);
/* The partial download of [begin, end) of file (metas[0]), or of the split
 * set of n_parts parts whose part 1 file is (metas[i] part i + 1's), into
 * final, under the lock: 0 with path; 1 when the whole file is wanted
 * instead (every layer); -1 with err. */
int hub_download_partial(const hub_env_t *e, const sw_hub_ref_t *ref, const hub_meta_t *metas,
                         int n_parts, const char *file, int begin, int end, const sw_hub_opts_t *o,
                         const char *final, char *path, size_t path_len, char *err, size_t err_len);

/* ---- split sets (hub_set.c) ---- */

/* The parts of the split set file is a part of (PREFIX-NNNNN-of-MMMMM.gguf,
 * M > 1), or 0 for a file of its own. */
int hub_set_count(const char *file);
/* The repository path of part i (from 0) of file's set: 0, or -1. */
int hub_set_part(const char *file, int i, char *out, size_t len);
/* 0, or -1 with err when file's set has more than HUB_MAX_PARTS parts. */
int hub_set_check(const char *file, char *err, size_t err_len);
/* The hub's metadata of every part of file's set into metas (hub_set_count
 * of them), all at one commit, every size known: 0; 1 when the hub is
 * unreachable; -1 with err naming the part. */
int hub_set_resolve(const hub_env_t *e, const sw_hub_ref_t *ref, const char *file,
                    hub_meta_t *metas, char *err, size_t err_len);
/* Every part of file's set in the cache: 0 with part 1's path. */
int hub_set_from_cache(const hub_env_t *e, const sw_hub_ref_t *ref, const char *file, char *path,
                       size_t len);

#endif
