/*
 * hub_download.c - a whole file into the cache: GET with Range: bytes=N- to
 * resume blob.incomplete, retried with backoff, the body never past the size
 * the hub announced, the sha256 (base/sha256.h) checked before the file
 * moves into place; and the progress shown (a bar, or a line per 10 %).
 */
#include "hub_impl.h"

#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double hub_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Hashes the first n bytes of f (resuming) into sha. 0 or -1. */
static int s_hash_existing(FILE *f, long long n, sw_sha256_t *sha)
{
    static unsigned char buf[1 << 20];
    if (fseeko(f, 0, SEEK_SET) != 0)
        return -1;
    while (n > 0) {
        size_t want = n > (long long)sizeof buf ? sizeof buf : (size_t)n;
        size_t got = fread(buf, 1, want, f);
        if (got != want)
            return -1;
        sw_sha256_update(sha, buf, got);
        n -= (long long)got;
    }
    return fseeko(f, 0, SEEK_END);
}

void hub_draw(hub_dl_t *d, int final)
{
    if (d->progress == SW_HUB_QUIET || (d->expect >= 0 && d->expect < (1 << 20)))
        return; /* small files come and go at once */
    double now = hub_now(), dt = now - d->t0;
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
    hub_dl_t *d = ud;
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
    if ((long long)len > (long long)HUB_MAX_FILE - d->have) {
        d->too_big = 1;
        return 0;
    }
    if (fwrite(buf, 1, len, d->f) != len) {
        d->write_err = errno ? errno : EIO;
        return 0;
    }
    sw_sha256_update(&d->sha, buf, len);
    d->have += (long long)len;
    hub_draw(d, 0);
    return len;
}

/* How a part of hub_download ended. */
enum { S_DL_OK = 0, S_DL_KEEP = -1, S_DL_BAD = -2 }; /* KEEP: resumable; BAD: content wrong */

/* Opens part for d, resuming what is there (hashed again; dropped when
 * longer than the file). 0, or -1 with err (d->f NULL). */
static int s_dl_open(hub_dl_t *d, const char *part, char *err, size_t err_len)
{
    d->f = fopen(part, "a+b");
    if (!d->f) {
        sw_errf(err, err_len, "cannot write %s: %s", part, strerror(errno));
        return -1;
    }
    sw_sha256_init(&d->sha);
    struct stat st;
    if (fstat(fileno(d->f), &st) != 0) {
        sw_errf(err, err_len, "%s: %s", part, strerror(errno));
        goto fail;
    }
    d->have = st.st_size;
    if (d->expect >= 0 && d->have > d->expect) { /* longer than the file: useless */
        if (ftruncate(fileno(d->f), 0) != 0) {
            sw_errf(err, err_len, "%s: %s", part, strerror(errno));
            goto fail;
        }
        d->have = 0;
    }
    if (d->have > 0) {
        if (s_hash_existing(d->f, d->have, &d->sha) != 0) {
            sw_errf(err, err_len, "cannot read %s to resume: %s", part, strerror(errno));
            goto fail;
        }
        fprintf(stderr, "pull: %s: resuming at %.1f MB of %.1f MB\n", d->label, d->have / 1e6,
                d->expect / 1e6);
    }
    return 0;
fail:
    fclose(d->f);
    d->f = NULL;
    return -1;
}

/* One GET of the rest of m's file into d (Range: bytes=HAVE- when resuming):
 * curl's code, with d's flags set by s_on_data; -1 when curl cannot start. */
static int s_dl_get(const hub_env_t *e, const hub_meta_t *m, hub_dl_t *d, CURLcode *cc)
{
    d->start = d->have;
    d->checked = d->bad_status = d->restart = d->too_big = d->write_err = 0;
    hub_resp_reset(&d->resp);
    struct curl_slist *hdrs = NULL;
    CURL *c = hub_curl(e, m->url, &d->resp, &hdrs);
    if (!c)
        return -1;
    char range[64];
    if (d->have > 0) {
        snprintf(range, sizeof range, "%lld-", d->have);
        curl_easy_setopt(c, CURLOPT_RANGE, range);
    }
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, d);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, hub_on_xfer);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, (void *)d->stop);
    *cc = curl_easy_perform(c);
    curl_easy_cleanup(c);
    curl_slist_free_all(hdrs);
    return 0;
}

/* The attempts (HUB_ATTEMPTS, each resuming, with a growing wait between)
 * until every byte of m is in d->f: S_DL_OK, or S_DL_KEEP / S_DL_BAD with err. */
static int s_dl_fetch(const hub_env_t *e, const hub_meta_t *m, hub_dl_t *d, const char *part,
                      char *err, size_t err_len)
{
    const char *label = d->label;
    for (int attempt = 1; attempt <= HUB_ATTEMPTS; attempt++) {
        if (d->expect >= 0 && d->have == d->expect)
            break;
        CURLcode cc;
        if (s_dl_get(e, m, d, &cc) != 0) {
            sw_errf(err, err_len, "libcurl cannot start");
            return S_DL_KEEP;
        }
        if (fflush(d->f) != 0 && !d->write_err)
            d->write_err = errno;
        if (d->write_err) {
            sw_errf(err, err_len, "cannot write %s: %s", part, strerror(d->write_err));
            return S_DL_KEEP;
        }
        if (cc == CURLE_ABORTED_BY_CALLBACK) {
            sw_errf(err, err_len, "interrupted at %.1f MB; run again to resume", d->have / 1e6);
            return S_DL_KEEP;
        }
        if (d->too_big) {
            sw_errf(err, err_len, "the server sent more than the %lld bytes the hub announced",
                    d->expect);
            return S_DL_BAD;
        }
        if (d->bad_status) {
            sw_errf(err, err_len, "the download server answered HTTP %ld for %s", d->resp.status,
                    label);
            return S_DL_KEEP;
        }
        if (d->restart) {
            fprintf(stderr, "pull: %s: the server cannot resume; starting over\n", label);
            if (ftruncate(fileno(d->f), 0) != 0 || fseeko(d->f, 0, SEEK_SET) != 0) {
                sw_errf(err, err_len, "%s: %s", part, strerror(errno));
                return S_DL_KEEP;
            }
            sw_sha256_init(&d->sha);
            d->have = 0;
            continue;
        }
        if (cc == CURLE_OK && (d->expect < 0 || d->have == d->expect))
            break;
        const char *why = cc == CURLE_OK ? "the connection ended early" : curl_easy_strerror(cc);
        if (attempt == HUB_ATTEMPTS) {
            sw_errf(err, err_len, "download of %s failed at %.1f MB (%s); run again to resume",
                    label, d->have / 1e6, why);
            return S_DL_KEEP;
        }
        int wait = 1 << (attempt - 1);
        fprintf(stderr,
                "pull: %s: download interrupted at %.1f MB (%s); resuming in %d s (attempt %d "
                "of %d)\n",
                label, d->have / 1e6, why, wait, attempt + 1, HUB_ATTEMPTS);
        for (int i = 0; i < wait * 10 && !(d->stop && *d->stop); i++)
            usleep(100000);
    }
    return S_DL_OK;
}

/* The fetched file's size and sha256 checked, then part moved to blob (d->f
 * closed): S_DL_OK, or S_DL_KEEP / S_DL_BAD with err. */
static int s_dl_finish(const hub_meta_t *m, hub_dl_t *d, const char *part, const char *blob,
                       char *err, size_t err_len)
{
    const char *label = d->label;
    hub_draw(d, 1);
    if (d->expect >= 0 && d->have != d->expect) {
        sw_errf(err, err_len, "%s: got %lld bytes, the hub announced %lld", label, d->have,
                d->expect);
        return S_DL_BAD;
    }
    if (m->is_sha256) {
        uint8_t h[32];
        char hex[65];
        sw_sha256_final(&d->sha, h);
        sw_hex(h, sizeof h, hex);
        if (strcmp(hex, m->etag) != 0) {
            sw_errf(err, err_len,
                    "sha256 mismatch for %s: the hub says %.16s..., the download is %.16s... "
                    "(corrupted on the way; the partial file was removed, run again)",
                    label, m->etag, hex);
            return S_DL_BAD;
        }
    } else {
        fprintf(stderr, "pull: %s: not an LFS file, the hub gives no sha256: size checked only\n",
                label);
    }
    if (fsync(fileno(d->f)) != 0 || fclose(d->f) != 0) {
        d->f = NULL;
        sw_errf(err, err_len, "%s: %s", part, strerror(errno));
        return S_DL_KEEP;
    }
    d->f = NULL;
    if (rename(part, blob) != 0) {
        sw_errf(err, err_len, "cannot move %s into place: %s", part, strerror(errno));
        return S_DL_KEEP;
    }
    return S_DL_OK;
}

/*
 * Downloads m into blob (via blob.incomplete, resuming what is there) and
 * checks size and sha256. 0, or -1 with err (the .incomplete file stays for a
 * later run unless its content was proven wrong).
 */
int hub_download(const hub_env_t *e, const hub_meta_t *m, const char *label, const char *blob,
                 const sw_hub_opts_t *o, char *err, size_t err_len)
{
    char part[HUB_PATH];
    if ((size_t)snprintf(part, sizeof part, "%s.incomplete", blob) >= sizeof part) {
        sw_errf(err, err_len, "the cache path is too long");
        return -1;
    }
    hub_dl_t d = {0};
    d.expect = m->size;
    d.label = label;
    d.progress = o ? o->progress : SW_HUB_QUIET;
    d.stop = o ? o->stop : NULL;
    if (s_dl_open(&d, part, err, err_len) != 0)
        return -1;
    d.t0 = hub_now();
    d.t0_have = d.have;
    int rc = s_dl_fetch(e, m, &d, part, err, err_len);
    if (rc == S_DL_OK)
        rc = s_dl_finish(m, &d, part, blob, err, err_len);
    if (rc == S_DL_BAD)
        unlink(part);
    if (d.f)
        fclose(d.f);
    return rc == S_DL_OK ? 0 : -1;
}
