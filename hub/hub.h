/*
 * hub.h - model files from the Hugging Face hub: `shardwire pull REPO[:FILE]`
 * and `--model hf:ORG/NAME/FILE` wherever a model path is taken.
 *
 * Downloads go into the same cache huggingface_hub uses, so files already
 * fetched by Python tools are found and files fetched here are found by them:
 *
 *   $HF_HUB_CACHE (default $HF_HOME/hub, HF_HOME default ~/.cache/huggingface)
 *     models--ORG--NAME/blobs/ETAG                  the file (sha256 for LFS files)
 *     models--ORG--NAME/blobs/ETAG.incomplete       a download in progress (resumed)
 *     models--ORG--NAME/snapshots/COMMIT/FILE       relative symlink to ../../blobs/ETAG
 *     models--ORG--NAME/refs/REVISION               the commit a branch or tag pointed to
 *     .locks/models--ORG--NAME/ETAG.lock            flock: one download per file at a time
 *
 * The protocol is the hub's: HEAD $HF_ENDPOINT/ORG/NAME/resolve/REV/FILE
 * without following redirects gives X-Repo-Commit, X-Linked-Etag (the LFS
 * file's sha256) or ETag, X-Linked-Size or Content-Length, and a Location
 * (the CDN) to GET with Range: bytes=N- to resume. HF_TOKEN (or the token
 * file $HF_TOKEN_PATH, default $HF_HOME/token) is sent as a bearer token to
 * the hub's own host only. HF_HUB_OFFLINE=1 uses the cache alone; when the
 * hub cannot be reached, a cached snapshot of the revision is used with a
 * warning. Every header and file the hub sends is checked before use (hex
 * commit and etag, bounded sizes); the finished file's size and sha256 must
 * match the hub's metadata or it is deleted.
 *
 * Blocking; progress on stderr as the caller chooses.
 */
#ifndef SW_HUB_H
#define SW_HUB_H

#include <signal.h>
#include <stddef.h>

#define SW_HUB_PREFIX "hf:" /* a --model argument that names a hub file */

typedef struct sw_hub_ref {
    char repo[200];     /* "ORG/NAME" */
    char file[400];     /* path of the file in the repo; "" = the repo's one .gguf */
    char tag[64];       /* when file is "": a quantization tag to pick by ("Q4_K_M"), or "" */
    char revision[128]; /* branch, tag or commit; "main" by default */
} sw_hub_ref_t;

/* `shardwire pull` syntax: ORG/NAME[:FILE|:TAG][@REVISION]. 0 or -1 with a line in err. */
int sw_hub_ref_parse(const char *text, sw_hub_ref_t *ref, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/* --model syntax: hf:ORG/NAME/FILE[@REVISION] (FILE may hold '/'). 0 or -1 with a line. */
int sw_hub_uri_parse(const char *uri, sw_hub_ref_t *ref, char *err, size_t err_len)
    __attribute__((warn_unused_result));

enum sw_hub_progress {
    SW_HUB_QUIET = 0, /* nothing but errors */
    SW_HUB_BAR = 1,   /* a one-line bar redrawn on stderr (a terminal) */
    SW_HUB_LINES = 2, /* a log line every 10 % (logs, notebooks) */
};

typedef struct sw_hub_opts {
    int progress;                /* enum sw_hub_progress */
    volatile sig_atomic_t *stop; /* optional: the download stops (resumable) when set */
} sw_hub_opts_t;

/*
 * Makes ref's file present in the cache (downloading, resuming or just
 * checking the hub's current commit) and writes its snapshot path into path.
 * 0, or -1 with one line in err that says what to do.
 */
int sw_hub_fetch(const sw_hub_ref_t *ref, const sw_hub_opts_t *opts, char *path, size_t path_len,
                 char *err, size_t err_len) __attribute__((warn_unused_result));

/*
 * Like sw_hub_fetch, for a node of layers [begin, end) (end -1 = to the
 * last): the GGUF header and only the tensors those layers need, fetched
 * with HTTP range requests into a partial file (engine/include/partial.h) under
 * models--ORG--NAME/shardwire-partial/COMMIT/layers-A-B/FILE, resumable like
 * a whole download (FILE.incomplete and its .head until it is complete).
 * The whole file when it is cached already or the range is every layer; a
 * cached partial that holds the range. A server without range support is
 * refused with a line. 0 with path, or -1 with err.
 */
int sw_hub_fetch_layers(const sw_hub_ref_t *ref, const sw_hub_opts_t *opts, int begin, int end,
                        char *path, size_t path_len, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/*
 * For a --model argument: "hf:..." is fetched (progress lines on stderr) and
 * its cache path written to path; anything else is copied as is. 0 or -1
 * with a line in err.
 */
int sw_hub_model_arg(const char *arg, volatile sig_atomic_t *stop, char *path, size_t path_len,
                     char *err, size_t err_len) __attribute__((warn_unused_result));
/* The same for a node of layers [begin, end) (sw_hub_fetch_layers); begin < 0 = the whole file. */
int sw_hub_model_arg_layers(const char *arg, int begin, int end, volatile sig_atomic_t *stop,
                            char *path, size_t path_len, char *err, size_t err_len)
    __attribute__((warn_unused_result));

#endif
