/*
 * backend_cpu.h - the CPU backend's entry points: its constructor, which the
 * registry (backend.c) calls for "cpu", and the host pointer of one of its
 * buffers. Private to the engine like backend_impl.h; users open the CPU
 * with sw_backend_new("cpu", ...) (backend.h).
 *
 * Ownership: sw_backend_cpu_new() returns a backend the caller frees with
 * sw_backend_free(). sw_buf_host() returns memory the buffer owns (or the
 * host memory a weight buffer refers to); it is valid until the buffer is
 * freed.
 */
#ifndef SW_BACKEND_CPU_H
#define SW_BACKEND_CPU_H

#include "backend.h"

/* The CPU backend with n_threads compute threads (0 = one per core), what
 * sw_backend_new("cpu") returns; NULL when the threads do not start. */
sw_backend_t *sw_backend_cpu_new(int n_threads) __attribute__((warn_unused_result));
/* The host pointer of a CPU buffer (for the CPU backend's own helpers and tests). */
void *sw_buf_host(sw_buf_t *buf);

#endif
