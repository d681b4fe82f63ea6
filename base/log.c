/*
 * log.c - leveled logging to stderr, one line per call, written with a single
 * write so that lines from several threads do not interleave.
 */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_int s_level = -1;
static char s_tag[32];
static atomic_int s_progress_open; /* 1 while a terminal's progress line has no newline yet */
static atomic_int s_tty = -1;      /* stderr is a terminal: 1, not: 0, not asked yet: -1 */

static enum sw_log_level s_level_from_env(void)
{
    const char *env = getenv("SW_LOG_LEVEL");
    if (!env)
        return SW_LOG_INFO;
    if (!strcmp(env, "error"))
        return SW_LOG_ERROR;
    if (!strcmp(env, "warn"))
        return SW_LOG_WARN;
    if (!strcmp(env, "debug"))
        return SW_LOG_DEBUG;
    return SW_LOG_INFO;
}

void sw_log_set_level(enum sw_log_level level)
{
    atomic_store(&s_level, (int)level);
}

enum sw_log_level sw_log_get_level(void)
{
    int level = atomic_load(&s_level);
    if (level < 0) {
        level = (int)s_level_from_env();
        atomic_store(&s_level, level);
    }
    return (enum sw_log_level)level;
}

void sw_log_set_tag(const char *tag)
{
    snprintf(s_tag, sizeof s_tag, "%s", tag ? tag : "");
}

/* Formats "shardwire[tag] level: text" into line (sizeof line - 8 bytes at
 * most, room left for the terminal's escapes); returns its length. */
static size_t s_format(char *line, size_t cap, enum sw_log_level level, const char *fmt, va_list ap)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    int n;
    if (s_tag[0])
        n = snprintf(line, cap, "shardwire[%s] %s: ", s_tag, names[level]);
    else
        n = snprintf(line, cap, "shardwire %s: ", names[level]);
    if (n < 0)
        return 0;
    int m = vsnprintf(line + n, cap - (size_t)n, fmt, ap);
    size_t len = (size_t)n + (m > 0 ? (size_t)m : 0);
    return len > cap - 8 ? cap - 8 : len;
}

void sw_log_write(enum sw_log_level level, const char *fmt, ...)
{
    if ((int)level > (int)sw_log_get_level())
        return;
    char line[1024];
    size_t len = 0;
    if (atomic_exchange(&s_progress_open, 0))
        line[len++] = '\n'; /* ends the terminal's progress line */
    va_list ap;
    va_start(ap, fmt);
    len += s_format(line + len, sizeof line - len, level, fmt, ap);
    va_end(ap);
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

void sw_log_progress(enum sw_log_level level, int first, const char *fmt, ...)
{
    if ((int)level > (int)sw_log_get_level())
        return;
    if (atomic_load(&s_tty) < 0)
        atomic_store(&s_tty, isatty(STDERR_FILENO) ? 1 : 0);
    int tty = atomic_load(&s_tty);
    if (!tty && !first)
        return;
    char line[1024];
    size_t len = 0;
    if (tty)
        line[len++] = '\r';
    va_list ap;
    va_start(ap, fmt);
    len += s_format(line + len, sizeof line - len, level, fmt, ap);
    va_end(ap);
    if (tty) {
        memcpy(line + len, "\033[K", 3); /* clears what a longer line left */
        len += 3;
        atomic_store(&s_progress_open, 1);
    } else {
        line[len++] = '\n';
    }
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

void sw_errf(char *err, size_t err_len, const char *fmt, ...)
{
    if (!err || !err_len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

size_t sw_text_clean(char *dst, const char *src, size_t len, int keep_lines, int *held)
{
    const unsigned char *in = (const unsigned char *)src;
    size_t o = 0;
    if (held)
        *held = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = in[i];
        if (c == 0xc2 && i + 1 == len) {
            if (held)
                *held = 1;
            break;
        }
        if (c == 0xc2 && in[i + 1] >= 0x80 && in[i + 1] <= 0x9f) {
            i++; /* a C1 control: CSI, OSC, NEL, ... */
            continue;
        }
        if ((c < 0x20 && !(keep_lines && (c == '\n' || c == '\t'))) || c == 0x7f)
            continue;
        dst[o++] = (char)c;
    }
    dst[o] = 0;
    return o;
}
