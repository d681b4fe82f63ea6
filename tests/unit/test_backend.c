/*
 * test_backend.c - the backend registry, buffers and errors, the rope table
 * and the engine's SHA-256. Linked with the engine library alone (no ZeroMQ,
 * libsodium, protobuf or jansson): it stops linking if the engine ever
 * depends on the network code.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* This test checks the implementations (their operations, buffers, the rope
 * table), so it reads the engine's private headers, as tests/cuda and
 * tests/bench may; every other user has backend.h only. */
#include "backend.h"
#include "backend_impl.h"
#include "cpu/backend_cpu.h"
#include "sha256.h"
#include "sw_test.h"

static void s_hex_of(const void *data, size_t len, char out[65])
{
    uint8_t h[32];
    sw_sha256(data, len, h);
    sw_hex(h, sizeof h, out);
}

static void s_test_sha256(void)
{
    char hex[65];
    s_hex_of("", 0, hex);
    SW_CHECK(!strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    s_hex_of("abc", 3, hex);
    SW_CHECK(!strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    s_hex_of(two, strlen(two), hex);
    SW_CHECK(!strcmp(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
    /* One million 'a' fed in uneven pieces (crosses every block boundary case). */
    char *a = malloc(1000000);
    SW_CHECK(a != NULL);
    if (!a)
        return;
    memset(a, 'a', 1000000);
    sw_sha256_t s;
    sw_sha256_init(&s);
    size_t off = 0, step = 1;
    while (off < 1000000) {
        size_t n = step < 1000000 - off ? step : 1000000 - off;
        sw_sha256_update(&s, a + off, n);
        off += n;
        step = step * 7 % 131 + 1;
    }
    uint8_t h[32];
    sw_sha256_final(&s, h);
    sw_hex(h, sizeof h, hex);
    SW_CHECK(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
    /* 55, 56, 63 and 64 bytes: the padding edge cases agree with one-shot hashing. */
    for (size_t n = 54; n <= 65; n++) {
        char one[65];
        s_hex_of(a, n, one);
        sw_sha256_init(&s);
        sw_sha256_update(&s, a, n / 2);
        sw_sha256_update(&s, a + n / 2, n - n / 2);
        sw_sha256_final(&s, h);
        sw_hex(h, sizeof h, hex);
        SW_CHECK(!strcmp(hex, one));
    }
    free(a);
}

static void s_test_registry(void)
{
    char err[256];
    sw_backend_t *be = sw_backend_new("cpu", 2, err, sizeof err);
    SW_CHECK(be != NULL);
    if (be) {
        SW_CHECK(!strcmp(sw_backend_name(be), "cpu"));
        SW_CHECK(strstr(sw_backend_desc(be), "2 threads") != NULL);
        sw_backend_t **devs;
        SW_CHECK_INT(sw_backend_devices(be, &devs), 1);
        SW_CHECK(devs[0] == be && sw_backend_primary(be) == be);
        SW_CHECK(sw_backend_mem_free(be) == -1); /* KV caches in host memory */
        sw_backend_free(&be);
        SW_CHECK(be == NULL);
    }
    sw_backend_free(&be); /* NULL is fine */

    const char *bad[] = {"gpu", "cuda:", "cuda:x", "cuda:1234", "cpu,", ",cpu", "1,2", "cpux", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (!bad[i][0])
            continue; /* "" means auto */
        err[0] = 0;
        be = sw_backend_new(bad[i], 1, err, sizeof err);
        if (be) {
            fprintf(stderr, "backend '%s' was accepted\n", bad[i]);
            sw_backend_free(&be);
        }
        SW_CHECK(be == NULL);
        SW_CHECK(err[0] != 0);
    }
    err[0] = 0;
    be = sw_backend_new("tpu", 1, err, sizeof err);
    SW_CHECK(be == NULL && strstr(err, "unknown backend 'tpu'") != NULL);

    if (sw_cuda_device_count() == 0) {
        /* No GPU (or no CUDA build): cuda is a clear error and auto is the CPU. */
        err[0] = 0;
        be = sw_backend_new("cuda:0", 1, err, sizeof err);
        SW_CHECK(be == NULL && err[0] != 0);
        printf("cuda without a GPU: %s\n", err);
        /* The advice fits the machine: a build without CUDA says so; a CUDA
         * build on a machine with no NVIDIA driver says that (the runtime's
         * own text, "CUDA driver version is insufficient", points at an update). */
        SW_CHECK(strstr(err, "insufficient") == NULL && strstr(err, "--backend cpu") != NULL);
        if (!strstr(err, "this build has no CUDA backend") &&
            access("/proc/driver/nvidia/version", F_OK) != 0)
            SW_CHECK(strstr(err, "no NVIDIA driver on this machine") != NULL);
        be = sw_backend_new("auto", 1, err, sizeof err);
        SW_CHECK(be != NULL && !strcmp(sw_backend_name(be), "cpu"));
        sw_backend_free(&be);
        be = sw_backend_new(NULL, 1, err, sizeof err);
        SW_CHECK(be != NULL && !strcmp(sw_backend_name(be), "cpu"));
        sw_backend_free(&be);
    }

    /* A group of two CPU backends (how the layer split is tested without GPUs). */
    be = sw_backend_new("cpu,cpu", 1, err, sizeof err);
    SW_CHECK(be != NULL);
    if (be) {
        sw_backend_t **devs;
        SW_CHECK_INT(sw_backend_devices(be, &devs), 2);
        SW_CHECK(devs[0] != devs[1] && sw_backend_primary(be) == devs[0]);
        SW_CHECK(!strcmp(sw_backend_name(be), "cpu,cpu"));
        SW_CHECK(be->ops == NULL && be->max_rows == devs[0]->max_rows);

        /* A copy between two devices goes through the host. */
        sw_backend_t *a = devs[0], *b = devs[1];
        sw_buf_t *x = a->ops->buf_alloc(a, 64), *y = b->ops->buf_alloc(b, 64);
        SW_CHECK(x && y);
        if (x && y) {
            float in[16], out[16] = {0};
            for (int i = 0; i < 16; i++)
                in[i] = (float)i * 0.5f;
            SW_CHECK_INT(a->ops->upload(a, x, 0, in, sizeof in), 0);
            SW_CHECK_INT(sw_backend_copy(a, x, 8, b, y, 0, 32), 0);
            SW_CHECK_INT(b->ops->download(b, out, y, 0, 32), 0);
            SW_CHECK(!memcmp(out, in + 2, 32));
        }
        if (x)
            a->ops->buf_free(a, x);
        if (y)
            b->ops->buf_free(b, y);
        sw_backend_free(&be);
    }
}

static void s_test_buffers(void)
{
    sw_backend_t *be = sw_backend_cpu_new(1);
    SW_CHECK(be != NULL);
    if (!be)
        return;
    const sw_backend_ops_t *o = be->ops;
    sw_buf_t *b = o->buf_alloc(be, 40);
    SW_CHECK(b != NULL);
    if (!b) {
        sw_backend_free(&be);
        return;
    }
    const unsigned char zero[40] = {0};
    SW_CHECK(!memcmp(sw_buf_host(b), zero, 40)); /* zeroed at allocation */
    char junk[64] = {0};
    /* Overruns are errors with a message, not memory corruption. */
    SW_CHECK_INT(o->upload(be, b, 32, junk, 16), -1);
    SW_CHECK(strstr(sw_backend_error(be), "overruns") != NULL);
    be->err[0] = 0;
    SW_CHECK_INT(o->download(be, junk, b, 41, 0), -1);
    SW_CHECK(strstr(sw_backend_error(be), "overruns") != NULL);
    SW_CHECK_INT(o->upload(be, b, 24, junk, 16), 0);
    /* Views share the parent's memory. */
    sw_buf_t *v = o->buf_view(be, b, 8, 16);
    SW_CHECK(v != NULL);
    SW_CHECK(o->buf_view(be, b, 32, 16) == NULL);
    if (v) {
        int32_t w[4] = {1, 2, 3, 4}, r[4] = {0};
        SW_CHECK_INT(o->upload(be, v, 0, w, sizeof w), 0);
        SW_CHECK_INT(o->download(be, r, b, 8, sizeof r), 0);
        SW_CHECK(!memcmp(r, w, sizeof w));
        o->buf_free(be, v);
    }
    /* A weight buffer refers to host memory in place. */
    static const float host[4] = {1, 2, 3, 4};
    sw_buf_t *wb = o->buf_weight(be, host, sizeof host);
    SW_CHECK(wb && sw_buf_host(wb) == (const void *)host);
    o->buf_free(be, wb);
    o->buf_free(be, b);
    sw_backend_free(&be);
}

static void s_test_rope_table(void)
{
    const int n_pos = 40, n_rot = 64;
    float *cs = malloc((size_t)n_pos * n_rot * sizeof *cs);
    SW_CHECK(cs != NULL);
    if (!cs)
        return;
    sw_rope_table(cs, n_pos, n_rot, 10000.0f, 0.5f);
    SW_CHECK(cs[0] == 1.0f && cs[1] == 0.0f); /* position 0: no rotation */
    /* Pair 0 of position p turns by p * freq_scale. */
    SW_CHECK(cs[(size_t)7 * n_rot] == cosf(3.5f) && cs[(size_t)7 * n_rot + 1] == sinf(3.5f));
    /* The last pair turns slowest: about p * 0.5 * 10000^(-62/64). */
    const double want = 39 * 0.5 * pow(10000.0, -62.0 / 64.0);
    SW_CHECK_NEAR(cs[(size_t)39 * n_rot + n_rot - 2], cos(want), 1e-4);
    free(cs);
}

int main(void)
{
    s_test_sha256();
    s_test_registry();
    s_test_buffers();
    s_test_rope_table();
    return sw_test_done();
}
