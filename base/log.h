/*
 * log.h - the one logging macro family. Everything goes to stderr so that
 * stdout stays reserved for program output (generated text, JSON).
 *
 * The level comes from SW_LOG_LEVEL (error, warn, info, debug) or
 * sw_log_set_level(); the default is info.
 */
#ifndef SW_LOG_H
#define SW_LOG_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum sw_log_level {
    SW_LOG_ERROR = 0,
    SW_LOG_WARN = 1,
    SW_LOG_INFO = 2,
    SW_LOG_DEBUG = 3,
};

void sw_log_set_level(enum sw_log_level level);
enum sw_log_level sw_log_get_level(void);
/* Sets the tag printed before every line of this process ("relay", "node:a"). */
void sw_log_set_tag(const char *tag);
void sw_log_write(enum sw_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/*
 * A progress line that updates while something is awaited (a relay that does
 * not answer yet): on a terminal each call rewrites the same line (\r, no
 * newline; the next sw_log_write ends it first); elsewhere (a file, a pipe,
 * journald) only the call with first = 1 writes a line, so that a log holds
 * one line per wait, not one per attempt.
 */
void sw_log_progress(enum sw_log_level level, int first, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes one formatted error line into a caller's buffer: the convention of
 * every fallible function that takes (char *err, size_t err_len). err may be
 * NULL or err_len 0 (nothing is written). */
void sw_errf(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/*
 * Copies the text a peer sent (src[0..len), any bytes) into dst for a
 * terminal, leaving out what a terminal would act on: C0 control characters
 * (newline and tab are kept when keep_lines), DEL, and the C1 controls
 * U+0080..U+009F (UTF-8 C2 80..C2 9F). A trailing C2 byte that may start a C1
 * control is not copied: *held is set to 1 so that the caller prepends it to
 * the next piece of a stream (held may be NULL: then it is dropped). dst needs
 * len + 1 bytes (it may be src itself); it is NUL-terminated. Returns the bytes
 * written.
 */
size_t sw_text_clean(char *dst, const char *src, size_t len, int keep_lines, int *held);

#define SW_ERR(...) sw_log_write(SW_LOG_ERROR, __VA_ARGS__)
#define SW_WARN(...) sw_log_write(SW_LOG_WARN, __VA_ARGS__)
#define SW_INFO(...) sw_log_write(SW_LOG_INFO, __VA_ARGS__)
#define SW_DEBUG(...)                                                                              \
    do {                                                                                           \
        if (sw_log_get_level() >= SW_LOG_DEBUG)                                                    \
            sw_log_write(SW_LOG_DEBUG, __VA_ARGS__);                                               \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif
