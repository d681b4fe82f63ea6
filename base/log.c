/*
 * log.c - leveled logging to stderr, one line per call, written with a single
 * write so that lines from several threads do not interleave.
 */
#include "log.h"
#include "sw_limits.h"

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

/* The formatted line, escaped (sw_log_escape), into out (4 x 1024 + 1 bytes); its length. */
static size_t s_render(char *out, enum sw_log_level level, const char *fmt, va_list ap)
{
    char line[1024];
    return sw_log_escape(out, line, s_format(line, sizeof line, level, fmt, ap));
}

void sw_log_write(enum sw_log_level level, const char *fmt, ...)
{
    if ((int)level > (int)sw_log_get_level())
        return;
    char out[4 * 1024 + 3];
    size_t o = 0;
    if (atomic_exchange(&s_progress_open, 0))
        out[o++] = '\n'; /* ends the terminal's progress line */
    va_list ap;
    va_start(ap, fmt);
    o += s_render(out + o, level, fmt, ap);
    va_end(ap);
    out[o++] = '\n';
    ssize_t w = write(STDERR_FILENO, out, o);
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
    char out[4 * 1024 + 5];
    size_t o = 0;
    if (tty)
        out[o++] = '\r';
    va_list ap;
    va_start(ap, fmt);
    o += s_render(out + o, level, fmt, ap);
    va_end(ap);
    if (tty) {
        memcpy(out + o, "\033[K", 3); /* clears what a longer line left */
        o += 3;
        atomic_store(&s_progress_open, 1);
    } else {
        out[o++] = '\n';
    }
    ssize_t w = write(STDERR_FILENO, out, o);
    (void)w;
}

size_t sw_log_escape(char *dst, const char *src, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *in = (const unsigned char *)src;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = in[i];
        /* C0 controls, DEL, and both bytes of a C1 control (C2 80..C2 9F) */
        int c1 = c == 0xc2 && i + 1 < len && in[i + 1] >= 0x80 && in[i + 1] <= 0x9f;
        if (c < 0x20 || c == 0x7f || c1) {
            for (int k = 0; k <= c1; k++) {
                dst[o++] = '\\';
                dst[o++] = 'x';
                dst[o++] = hex[in[i + (size_t)k] >> 4];
                dst[o++] = hex[in[i + (size_t)k] & 15];
            }
            i += (size_t)c1;
            continue;
        }
        dst[o++] = (char)c;
    }
    dst[o] = 0;
    return o;
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

void sw_log_gate_init(sw_log_gate_t *g, const char *what, int per_key, int per_window,
                      double window_ms)
{
    memset(g, 0, sizeof *g);
    snprintf(g->what, sizeof g->what, "%s", what);
    g->per_key = per_key;
    g->per_window = per_window;
    g->window_ms = window_ms;
}

void sw_log_gate_refusals(sw_log_gate_t *g, const char *what)
{
    sw_log_gate_init(g, what, SW_REFUSED_LOG_KEY, SW_REFUSED_LOG_ALL, SW_REFUSED_LOG_MS);
}

void sw_log_gate_tick(sw_log_gate_t *g, double now_ms)
{
    if (g->t0 == 0 || now_ms - g->t0 < g->window_ms)
        return;
    const double secs = (now_ms - g->t0) / 1e3;
    for (int i = 0; i < SW_LOG_GATE_KEYS; i++)
        if (g->k[i].held)
            sw_log_write(SW_LOG_WARN,
                         "%s: %llu more lines for %s in the last %.0f s, not written "
                         "one by one (the last: %s)",
                         g->what, g->k[i].held, g->k[i].key, secs, g->k[i].last);
    if (g->held_other)
        sw_log_write(SW_LOG_WARN,
                     "%s: %llu more lines for other keys in the last %.0f s, not written "
                     "(%llu since the start)",
                     g->what, g->held_other, secs, g->held_total);
    memset(g->k, 0, sizeof g->k);
    g->held_other = 0;
    g->written = 0;
    g->t0 = 0;
}

int sw_log_gated(sw_log_gate_t *g, enum sw_log_level level, const char *key, double now_ms,
                 const char *fmt, ...)
{
    if ((int)level > (int)sw_log_get_level())
        return 0;
    sw_log_gate_tick(g, now_ms);
    if (g->t0 == 0)
        g->t0 = now_ms;
    int e = -1;
    for (int i = 0; i < SW_LOG_GATE_KEYS && e < 0; i++)
        if (!strcmp(g->k[i].key, key) || !g->k[i].key[0])
            e = i;
    if (e >= 0 && !g->k[e].key[0])
        snprintf(g->k[e].key, sizeof g->k[e].key, "%s", key);
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    const int pass = g->written < g->per_window && (e < 0 || (int)g->k[e].shown < g->per_key);
    if (pass) {
        g->written++;
        if (e >= 0)
            g->k[e].shown++;
        const int last = e >= 0 && (int)g->k[e].shown == g->per_key;
        sw_log_write(level, "%s%s", line,
                     last ? " (more such lines for this key: one summary line)" : "");
        return 1;
    }
    g->held_total++;
    if (e < 0) {
        g->held_other++;
        return 0;
    }
    g->k[e].held++;
    const size_t n = strnlen(line, sizeof g->k[e].last - 1);
    memcpy(g->k[e].last, line, n);
    g->k[e].last[n] = 0;
    return 0;
}
