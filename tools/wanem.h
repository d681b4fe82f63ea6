/*
 * wanem.h - a user-space WAN link emulator. There is no tc/netem on the test
 * and benchmark machines, so WAN conditions are emulated by a TCP proxy placed
 * between a process and the server it dials: every accepted client gets its own
 * upstream connection, and the bytes of each direction are held for a one-way
 * latency (plus optional jitter, never reordering a stream) and then paced to
 * an optional bandwidth cap, like a serialising link after the propagation
 * delay. Closes travel the same path: a FIN reaches the other side after the
 * data queued before it.
 *
 * The proxy is one single-threaded ppoll() loop; wanem_run() returns when the
 * caller's stop flag is set (by a signal handler) and everything is closed by
 * wanem_destroy().
 */
#ifndef SW_WANEM_H
#define SW_WANEM_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct wanem_config {
    struct sockaddr_storage listen_addr;  // where clients connect
    socklen_t listen_len;                 // bytes of listen_addr in use
    struct sockaddr_storage connect_addr; // the real server
    socklen_t connect_len;                // bytes of connect_addr in use
    uint64_t delay_ns;                    // one-way latency added to each direction, ns
    uint64_t jitter_ns;  // jitter amplitude J, ns: each chunk gets a uniform [-J, +J]
    uint64_t rate_kbps;  // link rate per direction and connection, kbit/s; 0 = unlimited
    uint64_t seed;       // seed of the jitter random stream
    uint64_t buffer_max; // queued bytes per direction before reading pauses
};

typedef struct wanem wanem_t;

/*
 * Parses "host:port" or "[v6addr]:port" into *addr (numeric or resolvable
 * host). Returns 0, or -1 with one line in err.
 */
int wanem_parse_addr(const char *text, struct sockaddr_storage *addr, socklen_t *len, char *err,
                     size_t err_size) __attribute__((warn_unused_result));

/* Writes "host:port" of addr into buf. */
void wanem_format_addr(const struct sockaddr *addr, socklen_t len, char *buf, size_t size);

/*
 * Binds and listens on cfg->listen_addr. Returns NULL (after logging one line)
 * on failure. The caller frees with wanem_destroy().
 */
wanem_t *wanem_new(const struct wanem_config *cfg) __attribute__((warn_unused_result));

/* The address actually bound (port 0 in the config becomes the kernel's choice). */
void wanem_bound_addr(const wanem_t *w, char *buf, size_t size);

/*
 * Serves until *stop becomes non-zero. wait_mask is the signal mask used while
 * waiting in ppoll (the caller blocks its stop signals outside the wait, so a
 * signal never slips between checking *stop and sleeping). Returns 0 when
 * stopped, -1 on a fatal error of the loop itself (logged).
 */
int wanem_run(wanem_t *w, const sigset_t *wait_mask, volatile sig_atomic_t *stop)
    __attribute__((warn_unused_result));

/* Number of client connections accepted so far. */
uint64_t wanem_accepted(const wanem_t *w);

/* Closes every connection and the listener, frees *w and sets it to NULL. Accepts NULL. */
void wanem_destroy(wanem_t **w);

#endif
