/*
 * backend.c - the backend registry (sw_backend_new by name), groups of
 * devices, the last error and copies between backends: what backend.h
 * offers. It calls the implementations' constructors (cpu/, cuda/); the
 * helpers those share (backend_impl.c) sit in a file of their own, so that
 * no implementation calls back into the registry.
 */
#include "backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_impl.h"
#include "cpu/backend_cpu.h"
#include "log.h"

#ifdef SW_HAVE_CUDA
#include "cuda/backend_cuda.h"
#endif

int sw_cuda_device_count(void)
{
#ifdef SW_HAVE_CUDA
    return sw_cuda_devices();
#else
    return 0;
#endif
}

double sw_cuda_copy_gbps(int dev)
{
#ifdef SW_HAVE_CUDA
    return sw_cuda_measure_copy(dev);
#else
    (void)dev;
    return 0;
#endif
}

const char *sw_backend_error(const sw_backend_t *be)
{
    if (!be)
        return "no backend";
    for (int i = 0; i < be->n_members; i++) // a member that failed for good says it first
        if (be->members[i]->fatal)
            return be->members[i]->err;
    if (be->err[0])
        return be->err;
    for (int i = 0; i < be->n_members; i++)
        if (be->members[i]->err[0])
            return be->members[i]->err;
    return "unknown backend error";
}

int sw_backend_failed(const sw_backend_t *be)
{
    if (!be)
        return 0;
    int dead = be->fatal;
    for (int i = 0; i < be->n_members; i++)
        dead |= be->members[i]->fatal;
    return dead;
}

const char *sw_backend_desc(const sw_backend_t *be)
{
    return be->desc;
}

const char *sw_backend_name(const sw_backend_t *be)
{
    return be->name;
}

int64_t sw_backend_mem_free(sw_backend_t *be)
{
    sw_backend_t **devs;
    const int n = sw_backend_devices(be, &devs);
    int64_t sum = 0;
    for (int i = 0; i < n; i++) {
        if (!devs[i]->ops->mem_free)
            return -1;
        const int64_t f = devs[i]->ops->mem_free(devs[i]);
        if (f < 0)
            return -1;
        sum += f;
    }
    return sum;
}

sw_backend_t *sw_backend_primary(sw_backend_t *be)
{
    return be->n_members > 0 ? be->members[0] : be;
}

int sw_backend_devices(sw_backend_t *be, sw_backend_t ***out)
{
    if (be->n_members > 0) {
        *out = be->members;
        return be->n_members;
    }
    /* A single backend is its own one-element list. */
    be->members[0] = be;
    *out = be->members;
    return 1;
}

void sw_backend_free(sw_backend_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    sw_backend_t *be = *self_p;
    for (int i = 0; i < be->n_members; i++)
        sw_backend_free(&be->members[i]);
    if (be->ops && be->ops->destroy)
        be->ops->destroy(be);
    free(be);
    *self_p = NULL;
}

int sw_backend_copy(sw_backend_t *a, const sw_buf_t *src, size_t src_off, sw_backend_t *b,
                    sw_buf_t *dst, size_t dst_off, size_t bytes)
{
    if (a->ops->transfer && a->ops == b->ops) {
        int rc = a->ops->transfer(a, src, src_off, b, dst, dst_off, bytes);
        if (rc != -2)
            return rc;
    }
    void *tmp = malloc(bytes ? bytes : 1);
    if (!tmp)
        return sw_backend_fail(a, "out of memory for a %zu-byte copy between devices", bytes);
    int rc = a->ops->download(a, tmp, src, src_off, bytes);
    if (rc == 0)
        rc = b->ops->upload(b, dst, dst_off, tmp, bytes);
    free(tmp);
    return rc;
}

/* ---- registry ---------------------------------------------------------------- */

/* One name without commas: "cpu", "cuda", "cuda:N". */
static sw_backend_t *s_open_one(const char *name, size_t len, int n_threads, char *err,
                                size_t err_len)
{
    if (len == 3 && !strncmp(name, "cpu", 3)) {
        sw_backend_t *be = sw_backend_cpu_new(n_threads);
        if (!be)
            sw_errf(err, err_len, "cannot start %d CPU compute threads", n_threads);
        return be;
    }
    if (len >= 4 && !strncmp(name, "cuda", 4) && (len == 4 || name[4] == ':')) {
        int dev = 0;
        if (len == 5) {
            sw_errf(err, err_len, "backend '%.*s': the GPU number after 'cuda:' is missing",
                    (int)len, name);
            return NULL;
        }
        for (size_t i = 5; i < len; i++) {
            if (name[i] < '0' || name[i] > '9' || i >= 8) {
                sw_errf(err, err_len, "backend '%.*s': '%.*s' is not a GPU number (0..999)",
                        (int)len, name, (int)(len - 5), name + 5);
                return NULL;
            }
            dev = dev * 10 + (name[i] - '0');
        }
#ifdef SW_HAVE_CUDA
        return sw_backend_cuda_new(dev, err, err_len);
#else
        (void)dev;
        sw_errf(err, err_len,
                "backend '%.*s': this build has no CUDA backend (rebuild with nvcc on the PATH, "
                "or use --backend cpu)",
                (int)len, name);
        return NULL;
#endif
    }
    sw_errf(err, err_len, "unknown backend '%.*s' (use cpu, cuda, cuda:N or cuda:0,1)", (int)len,
            name);
    return NULL;
}

sw_backend_t *sw_backend_new(const char *name, int n_threads, char *err, size_t err_len)
{
    if (!name || !strcmp(name, "auto") || !name[0]) {
        int n = sw_cuda_device_count();
        sw_backend_t *be = n > 0 ? s_open_one("cuda", 4, n_threads, err, err_len) : NULL;
        if (be) {
            SW_INFO("backend: %s (found %d GPU%s; --backend cpu to use the CPU)", be->desc, n,
                    n == 1 ? "" : "s");
            return be;
        }
        if (n > 0)
            SW_WARN("backend: GPU 0 did not start (%s); using the CPU", err);
        be = sw_backend_cpu_new(n_threads);
        if (!be) {
            sw_errf(err, err_len, "cannot start %d CPU compute threads", n_threads);
            return NULL;
        }
#ifdef SW_HAVE_CUDA
        if (n == 0)
            SW_INFO("backend: %s (no GPU visible to this CUDA build)", be->desc);
#else
        SW_INFO("backend: %s (this build has no CUDA)", be->desc);
#endif
        return be;
    }
    if (!strchr(name, ','))
        return s_open_one(name, strlen(name), n_threads, err, err_len);

    /* A group: "cuda:0,1" (bare numbers repeat the previous kind) or "cuda:0,cpu". */
    sw_backend_t *g = calloc(1, sizeof *g);
    if (!g) {
        sw_errf(err, err_len, "out of memory");
        return NULL;
    }
    char kind[8] = "";
    const char *p = name;
    size_t used = 0;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char one[24];
        if (len == 0 || len >= 16) {
            sw_errf(err, err_len, "backend '%s': empty or too long item in the list", name);
            goto fail;
        }
        if (p[0] >= '0' && p[0] <= '9') {
            if (!kind[0]) {
                sw_errf(err, err_len, "backend '%s': a GPU number needs 'cuda:' first", name);
                goto fail;
            }
            snprintf(one, sizeof one, "%s:%.*s", kind, (int)len, p);
        } else {
            snprintf(one, sizeof one, "%.*s", (int)len, p);
            const char *colon = memchr(p, ':', len);
            snprintf(kind, sizeof kind, "%.*s", (int)(colon ? (size_t)(colon - p) : len), p);
        }
        if (g->n_members == SW_BACKEND_MAX_DEVICES) {
            sw_errf(err, err_len, "backend '%s': more than %d devices", name,
                    SW_BACKEND_MAX_DEVICES);
            goto fail;
        }
        sw_backend_t *m = s_open_one(one, strlen(one), n_threads, err, err_len);
        if (!m)
            goto fail;
        g->members[g->n_members++] = m;
        used += (size_t)snprintf(g->desc + used, used < sizeof g->desc ? sizeof g->desc - used : 0,
                                 "%s%s", g->n_members > 1 ? " + " : "", m->desc);
        if (used >= sizeof g->desc)
            used = sizeof g->desc - 1;
        if (!comma)
            break;
        p = comma + 1;
    }
    snprintf(g->name, sizeof g->name, "%s", name);
    g->max_rows = g->members[0]->max_rows;
    for (int i = 1; i < g->n_members; i++)
        if (g->members[i]->max_rows < g->max_rows)
            g->max_rows = g->members[i]->max_rows;
    return g;
fail:
    sw_backend_free(&g);
    return NULL;
}
