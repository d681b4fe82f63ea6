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
/* Writes one line: the tag, the level, the formatted text (cut at 1 KiB) with
 * every control character escaped (sw_log_escape), so that a string a peer
 * sent (a request id, a Cancel's reason) can neither end the line nor drive
 * the terminal: nothing needs cleaning before it is logged. */
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
/* Copies src[0..len) into dst with C0 controls (newline and tab too), DEL and
 * C1 controls (UTF-8 C2 80..C2 9F) written as "\xNN" per byte. dst needs
 * 4 x len + 1 bytes; NUL-terminated. Returns the bytes written. */
size_t sw_log_escape(char *dst, const char *src, size_t len);

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

/* 1 when the n-th event of a kind (n >= 1) gets a log line: each of the first `first`, then
 * the 2^k-th: a stream of them cannot flood the log, and the lines still count it. */
static inline int sw_log_due(unsigned long long n, unsigned long long first)
{
    return n <= first || (n & (n - 1)) == 0;
}

/*
 * A gate for log lines that a peer can cause at will (a refused request, an
 * answer not sent): per window of window_ms, each key (the peer's key
 * fingerprint, or its name) writes at most per_key lines and all keys
 * together at most per_window; the lines left out are counted per key and
 * written as one summary line per key when the window ends ("what: 7,590
 * more lines for key K in the last 10 s (the last: ...)"), at most
 * SW_LOG_GATE_KEYS + 1 of them. So a flood costs the log at most
 * per_window + SW_LOG_GATE_KEYS + 1 lines a window, and still names who
 * flooded. The gate is plain memory owned by one thread (zero it, then
 * sw_log_gate_init); sw_log_gate_tick writes a window's summaries when no
 * further line comes.
 */
#define SW_LOG_GATE_KEYS 16
typedef struct sw_log_gate {
    char what[64];    // what its lines are about ("refused requests"), in the summaries
    int per_key;      // lines one key writes per window
    int per_window;   // lines all keys write per window
    double window_ms; // the window (ms)
    double t0;        // the current window began (ms; 0 = none open)
    int written;      // lines written in it
    struct {
        char key[72];            // "" = free entry
        unsigned shown;          // lines written for it this window
        unsigned long long held; // lines left out this window
        char last[200];          // the last line left out
    } k[SW_LOG_GATE_KEYS];
    unsigned long long held_other; // left out for keys beyond the table
    unsigned long long held_total; // left out since the start
} sw_log_gate_t;

void sw_log_gate_init(sw_log_gate_t *g, const char *what, int per_key, int per_window,
                      double window_ms);
/* Writes one line about key at level (sw_log_write) when the gate lets it
 * pass at now_ms, else counts it for the window's summary. Returns 1 when it
 * was written. */
int sw_log_gated(sw_log_gate_t *g, enum sw_log_level level, const char *key, double now_ms,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Writes the summaries of a window that ended by now_ms and closes it. */
void sw_log_gate_tick(sw_log_gate_t *g, double now_ms);
/* sw_log_gate_init with the refusals' limits (SW_REFUSED_LOG_*, base/sw_limits.h). */
void sw_log_gate_refusals(sw_log_gate_t *g, const char *what);

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
