/*
 * wire_check_field.c - the field checks of shardwire's validators (see
 * codec_pb.h, wire.h and docs/protocol.md): peer, model and key names,
 * dtypes, texts, the model fingerprint, token ids, sampling parameters and
 * routes, each against sw_limits.h, and the one error line (sw_pb_fail) every
 * check of the codec files writes. The message validators of wire_check.c
 * and wire_check_round.c call them; they call nothing of net/.
 */
#include "codec_pb.h"

#include "log.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Inside the checks: bail out with a message unless cond holds. */
#define CHECK(cond, ...) SW_PB_CHECK("wire", cond, __VA_ARGS__)

int sw_pb_fail(const char *who, int rc, char *err, size_t err_len, const char *fmt, ...)
{
    char line[SW_WIRE_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (err && err_len > 0)
        snprintf(err, err_len, "%s", line);
    else
        SW_WARN("%s: %s", who, line);
    return rc;
}

/* ---- field validators ------------------------------------------------------ */

size_t sw_wire_dtype_size(int dtype)
{
    switch (dtype) {
    case SHARDWIRE__DTYPE__DTYPE_F32:
        return 4;
    case SHARDWIRE__DTYPE__DTYPE_F16:
    case SHARDWIRE__DTYPE__DTYPE_BF16:
        return 2;
    default:
        return 0;
    }
}

int sw_wire_name_ok(const char *name, size_t len)
{
    if (!name || len == 0 || len > SW_WIRE_NAME_MAX)
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        if (!ok)
            return 0;
    }
    return 1;
}

int sw_wire_key_fp_ok(const char *fp, size_t len)
{
    if (!fp || len != SW_WIRE_KEY_FP_LEN)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!((fp[i] >= '0' && fp[i] <= '9') || (fp[i] >= 'a' && fp[i] <= 'f')))
            return 0;
    return 1;
}

size_t sw_pb_strlen_max(const char *s, size_t max)
{
    return s ? strnlen(s, max + 1) : 0;
}

int sw_wire_model_name_ok(const char *name)
{
    size_t n = sw_pb_strlen_max(name, SW_WIRE_NAME_MAX);
    if (n > SW_WIRE_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-' || c == ':' || c == '/';
        if (!ok)
            return 0;
    }
    return 1;
}

int sw_pb_check_name(const char *what, const char *name, int required, char *err, size_t err_len)
{
    size_t n = sw_pb_strlen_max(name, SW_WIRE_NAME_MAX);
    if (n == 0) {
        CHECK(!required, "%s is empty", what);
        return SW_WIRE_OK;
    }
    CHECK(sw_wire_name_ok(name, n), "%s is not 1..%d bytes of [A-Za-z0-9._-]", what,
          SW_WIRE_NAME_MAX);
    return SW_WIRE_OK;
}

int sw_pb_check_text(const char *what, const char *s, size_t max, char *err, size_t err_len)
{
    CHECK(sw_pb_strlen_max(s, max) <= max, "%s longer than %zu bytes", what, max);
    return SW_WIRE_OK;
}

int sw_pb_check_fingerprint(const char *fp, char *err, size_t err_len)
{
    size_t n = sw_pb_strlen_max(fp, 64);
    CHECK(n == 64, "model_fingerprint must be 64 hex chars (sha256), got %zu", n);
    for (size_t i = 0; i < 64; i++) {
        char c = fp[i];
        CHECK((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'),
              "model_fingerprint has a non lower-case hex char at %zu", i);
    }
    return SW_WIRE_OK;
}

int sw_pb_check_tokens(const char *what, const uint32_t *tok, size_t n, char *err, size_t err_len)
{
    for (size_t i = 0; i < n; i++)
        CHECK(tok[i] < SW_WIRE_MAX_TOKEN, "%s[%zu] = %u is not a token id (< %u)", what, i, tok[i],
              SW_WIRE_MAX_TOKEN);
    return SW_WIRE_OK;
}

int sw_pb_upto(float v, float max)
{
    return isfinite(v) && v >= 0.0f && v <= max;
}

int sw_pb_check_sampling(const Shardwire__SamplingParams *s, char *err, size_t err_len)
{
    if (!s)
        return SW_WIRE_OK;
    CHECK(sw_pb_upto(s->temperature, SW_SAMPLING_MAX_TEMP),
          "sampling.temperature %g not in [0, %d]", (double)s->temperature, SW_SAMPLING_MAX_TEMP);
    CHECK(s->top_k <= SW_SAMPLING_MAX_TOP_K, "sampling.top_k %u > %d", s->top_k,
          SW_SAMPLING_MAX_TOP_K);
    CHECK(sw_pb_upto(s->top_p, 1.0f), "sampling.top_p %g not in [0, 1]", (double)s->top_p);
    CHECK(isfinite(s->min_p) && s->min_p >= 0.0f && s->min_p < 1.0f,
          "sampling.min_p %g not in [0, 1)", (double)s->min_p);
    CHECK(sw_pb_upto(s->repeat_penalty, SW_SAMPLING_MAX_REP_PENALTY),
          "sampling.repeat_penalty %g not in [0, %d]", (double)s->repeat_penalty,
          SW_SAMPLING_MAX_REP_PENALTY);
    CHECK(s->repeat_last_n <= SW_SAMPLING_MAX_LAST_N, "sampling.repeat_last_n %u > %d",
          s->repeat_last_n, SW_SAMPLING_MAX_LAST_N);
    return SW_WIRE_OK;
}

int sw_pb_check_route(const char *what, char **route, size_t n, size_t min, char *err,
                      size_t err_len)
{
    CHECK(n >= min && n <= SW_WIRE_MAX_ROUTE, "%s has %zu stages (allowed %zu..%d)", what, n, min,
          SW_WIRE_MAX_ROUTE);
    for (size_t i = 0; i < n; i++) {
        int rc = sw_pb_check_name(what, route[i], 1, err, err_len);
        if (rc)
            return rc;
    }
    return SW_WIRE_OK;
}
