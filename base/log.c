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

void sw_log_write(enum sw_log_level level, const char *fmt, ...)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    if ((int)level > (int)sw_log_get_level())
        return;
    char line[1024];
    int n;
    if (s_tag[0])
        n = snprintf(line, sizeof line, "shardwire[%s] %s: ", s_tag, names[level]);
    else
        n = snprintf(line, sizeof line, "shardwire %s: ", names[level]);
    if (n < 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m > 0 ? (size_t)m : 0);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
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
