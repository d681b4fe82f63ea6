/*
 * backend.h - the compute layer's public face: opening a backend (the CPU, a
 * GPU, or a group of devices that a model's layers are split over) by name,
 * what it is called, its last error, its free memory, and copies between
 * backends.
 *
 * A backend owns the memory of the weights, the activations and the KV cache
 * of the models loaded on it; users of the engine hold it as an opaque
 * sw_backend_t and hand it to sw_model_load() (model.h). Its buffers
 * (sw_buf_t) are opaque too. How a backend computes (its table of
 * operations, the row control block, the determinism contract) is private to
 * the engine: backend_impl.h.
 *
 * Errors: a failed operation leaves a one-line reason on the backend
 * (sw_backend_error()), which the model hands to its caller; nothing aborts
 * on a failed allocation or a device error during a request.
 *
 * Ownership: sw_backend_new() returns a backend the caller frees with
 * sw_backend_free() after every model, cache and buffer made on it.
 * sw_backend_devices() and sw_backend_primary() return pointers into the
 * backend, valid until it is freed; the strings of desc/name/error too.
 */
#ifndef SW_BACKEND_H
#define SW_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sw_backend sw_backend_t;
typedef struct sw_buf sw_buf_t;

/* Opens a backend by name:
 *   "cpu"            the CPU with n_threads compute threads (0 = one per core)
 *   "cuda", "cuda:N" GPU N (default 0)
 *   "cuda:0,1"       GPUs 0 and 1 as a group: a model loaded on it splits its
 *                    layer range between them; any comma-separated list of
 *                    the names above works ("cuda:0,cpu" keeps the last layers
 *                    on the CPU)
 *   "auto" or NULL   cuda:0 when this build has CUDA and a GPU is visible,
 *                    else cpu; logs one line saying which
 * NULL with one line in err (unknown name, no such GPU, a build without CUDA). */
sw_backend_t *sw_backend_new(const char *name, int n_threads, char *err, size_t err_len)
    __attribute__((warn_unused_result));
/* Accepts NULL and NULLs the caller's pointer; frees a group's members. */
void sw_backend_free(sw_backend_t **self_p);

/* What the backend is, for logs and PeerAnnounce: "cpu", "cuda:0 (...)". */
const char *sw_backend_desc(const sw_backend_t *be);
/* The short name ("cpu", "cuda:0", "cuda:0,1"). */
const char *sw_backend_name(const sw_backend_t *be);
/* The last error of be or of one of its members. */
const char *sw_backend_error(const sw_backend_t *be);
/* 1 when be (or a member of its group) has failed for good: a GPU whose
 * context a fatal error destroyed (an illegal address, a launch failure)
 * fails every later call until the process restarts. Its error says why. */
int sw_backend_failed(const sw_backend_t *be);
/* Free memory where be keeps KV caches: the sum over a group's GPUs of their
 * free device memory, or -1 when the caches live in host memory (any member
 * on the CPU). */
int64_t sw_backend_mem_free(sw_backend_t *be);
/* The first device of a group, or be itself. */
sw_backend_t *sw_backend_primary(sw_backend_t *be);
/* The devices a model on be is split over: be itself, or a group's members. */
int sw_backend_devices(sw_backend_t *be, sw_backend_t ***out);
/* Number of CUDA devices visible to this build (0 without CUDA or GPU). */
int sw_cuda_device_count(void);
/* Measured device-to-device copy bandwidth of GPU dev in GB/s (bytes read
 * plus bytes written per second), the ceiling benchmarks compare with; 0
 * without CUDA or on error. */
double sw_cuda_copy_gbps(int dev);

/* Moves bytes from src on backend a to dst on backend b (the same or
 * another backend): a device-to-device copy when the backends support it,
 * else through host memory. 0 or -1 (error on a or b). */
int sw_backend_copy(sw_backend_t *a, const sw_buf_t *src, size_t src_off, sw_backend_t *b,
                    sw_buf_t *dst, size_t dst_off, size_t bytes)
    __attribute__((warn_unused_result));

#ifdef __cplusplus
}
#endif

#endif
