/*
 * util.c - the small helpers every part of the client library uses: the
 * monotonic clock, an error line into the caller's buffer, a peer's text made
 * safe to print, and random hex for names and request ids.
 */
#include "client_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

double client_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Writes one line into err and returns code. */
int client_fail(int code, char *err, size_t err_len, const char *fmt, ...)
{
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* A peer's text, bounded and without the control characters a terminal acts on (log.h). */
void client_clean(char *dst, size_t dst_len, const char *src)
{
    if (!dst_len)
        return;
    size_t n = src ? strnlen(src, dst_len - 1) : 0;
    memcpy(dst, src ? src : "", n);
    sw_text_clean(dst, dst, n, 0, NULL);
}

void client_random_hex(char *out, size_t n_bytes)
{
    unsigned char rnd[16];
    if (n_bytes > sizeof rnd)
        n_bytes = sizeof rnd;
    randombytes_buf(rnd, n_bytes);
    for (size_t i = 0; i < n_bytes; i++)
        snprintf(out + 2 * i, 3, "%02x", rnd[i]);
}
