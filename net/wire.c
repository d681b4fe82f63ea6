/*
 * wire.c - framing and validation of shardwire messages (see wire.h and
 * docs/protocol.md). Everything that arrives from a socket is outside input:
 * each count, length and value is bounded here with 64-bit arithmetic before
 * any other module looks at it, and one line says what was wrong.
 */
#include "wire.h"

#include "log.h"
#include "seal.h"
#include <stdlib.h>

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Writes one error line into err (or logs it) and returns rc. */
static int s_fail(int rc, char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int s_fail(int rc, char *err, size_t err_len, const char *fmt, ...)
{
    char line[SW_WIRE_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (err && err_len > 0)
        snprintf(err, err_len, "%s", line);
    else
        SW_WARN("wire: %s", line);
    return rc;
}

/* Inside the validators: bail out with a message unless cond holds. */
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return s_fail(SW_WIRE_EMALFORMED, err, err_len, __VA_ARGS__);                          \
    } while (0)

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

const char *sw_wire_role_name(int role)
{
    switch (role) {
    case SHARDWIRE__ROLE__ROLE_HEAD:
        return "head";
    case SHARDWIRE__ROLE__ROLE_MIDDLE:
        return "middle";
    case SHARDWIRE__ROLE__ROLE_TAIL:
        return "tail";
    case SHARDWIRE__ROLE__ROLE_FULL:
        return "full";
    case SHARDWIRE__ROLE__ROLE_CLIENT:
        return "client";
    default:
        return "?";
    }
}

const char *sw_wire_error_code_name(int code)
{
    static const char *names[] = {
        "unspecified",
        "version_mismatch",
        "malformed",
        "name_taken",
        "not_announced",
        "unknown_dest",
        "dest_busy",
        "dest_gone",
        "relay_full",
        "unknown_session",
        "bad_request",
        "model_mismatch",
        "internal",
        "deadline",
        "unauthorized",
        "busy",
        NULL,
        NULL,
        NULL,
        NULL,
        "plan_refused",
    };
    if (code < 0 || (size_t)code >= sizeof names / sizeof names[0] || !names[code])
        return "unknown";
    return names[code];
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

int sw_wire_addr_split(const char *addr, size_t len, char *name, char *key)
{
    const char *at = addr ? memchr(addr, '@', len) : NULL;
    size_t nlen = at ? (size_t)(at - addr) : len;
    if (!sw_wire_name_ok(addr, nlen))
        return -1;
    if (at && !sw_wire_key_fp_ok(at + 1, len - nlen - 1))
        return -1;
    memcpy(name, addr, nlen);
    name[nlen] = 0;
    key[0] = 0;
    if (at) {
        memcpy(key, at + 1, SW_WIRE_KEY_FP_LEN);
        key[SW_WIRE_KEY_FP_LEN] = 0;
    }
    return 0;
}

void sw_wire_addr(char *out, const char *name, const char *key)
{
    if (key && key[0])
        snprintf(out, SW_WIRE_ADDR_MAX + 1, "%.63s@%.32s", name, key);
    else
        snprintf(out, SW_WIRE_ADDR_MAX + 1, "%.63s", name);
}

/* ---- field validators ------------------------------------------------------ */

static size_t s_strlen_max(const char *s, size_t max)
{
    return s ? strnlen(s, max + 1) : 0;
}

int sw_wire_model_name_ok(const char *name)
{
    size_t n = s_strlen_max(name, SW_WIRE_NAME_MAX);
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

static int s_name(const char *what, const char *name, int required, char *err, size_t err_len)
{
    size_t n = s_strlen_max(name, SW_WIRE_NAME_MAX);
    if (n == 0) {
        CHECK(!required, "%s is empty", what);
        return SW_WIRE_OK;
    }
    CHECK(sw_wire_name_ok(name, n), "%s is not 1..%d bytes of [A-Za-z0-9._-]", what,
          SW_WIRE_NAME_MAX);
    return SW_WIRE_OK;
}

static int s_text(const char *what, const char *s, size_t max, char *err, size_t err_len)
{
    CHECK(s_strlen_max(s, max) <= max, "%s longer than %zu bytes", what, max);
    return SW_WIRE_OK;
}

static int s_fingerprint(const char *fp, char *err, size_t err_len)
{
    size_t n = s_strlen_max(fp, 64);
    CHECK(n == 64, "model_fingerprint must be 64 hex chars (sha256), got %zu", n);
    for (size_t i = 0; i < 64; i++) {
        char c = fp[i];
        CHECK((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'),
              "model_fingerprint has a non lower-case hex char at %zu", i);
    }
    return SW_WIRE_OK;
}

static int s_tokens(const char *what, const uint32_t *tok, size_t n, char *err, size_t err_len)
{
    for (size_t i = 0; i < n; i++)
        CHECK(tok[i] < SW_WIRE_MAX_TOKEN, "%s[%zu] = %u is not a token id (< %u)", what, i, tok[i],
              SW_WIRE_MAX_TOKEN);
    return SW_WIRE_OK;
}

static int s_prob(float p)
{
    return isfinite(p) && p >= 0.0f && p <= 1.0f;
}

static int s_sampling(const Shardwire__SamplingParams *s, char *err, size_t err_len)
{
    if (!s)
        return SW_WIRE_OK;
    CHECK(isfinite(s->temperature) && s->temperature >= 0.0f && s->temperature <= 100.0f,
          "sampling.temperature %g not in [0, 100]", (double)s->temperature);
    CHECK(s->top_k <= (1u << 20), "sampling.top_k %u > %u", s->top_k, 1u << 20);
    CHECK(s_prob(s->top_p), "sampling.top_p %g not in [0, 1]", (double)s->top_p);
    CHECK(isfinite(s->min_p) && s->min_p >= 0.0f && s->min_p < 1.0f,
          "sampling.min_p %g not in [0, 1)", (double)s->min_p);
    CHECK(isfinite(s->repeat_penalty) && s->repeat_penalty >= 0.0f && s->repeat_penalty <= 10.0f,
          "sampling.repeat_penalty %g not in [0, 10]", (double)s->repeat_penalty);
    CHECK(s->repeat_last_n <= SW_WIRE_MAX_POS, "sampling.repeat_last_n %u too large",
          s->repeat_last_n);
    return SW_WIRE_OK;
}

static int s_route(const char *what, char **route, size_t n, size_t min, char *err, size_t err_len)
{
    CHECK(n >= min && n <= SW_WIRE_MAX_ROUTE, "%s has %zu stages (allowed %zu..%d)", what, n, min,
          SW_WIRE_MAX_ROUTE);
    for (size_t i = 0; i < n; i++) {
        int rc = s_name(what, route[i], 1, err, err_len);
        if (rc)
            return rc;
    }
    return SW_WIRE_OK;
}

static int s_timing(Shardwire__StageTiming **t, size_t n, char *err, size_t err_len)
{
    CHECK(n <= SW_WIRE_MAX_ROUTE, "timing has %zu entries (max %d)", n, SW_WIRE_MAX_ROUTE);
    for (size_t i = 0; i < n; i++) {
        CHECK(t[i] != NULL, "timing[%zu] missing", i);
        int rc = s_name("timing.name", t[i]->name, 1, err, err_len);
        if (rc)
            return rc;
        CHECK(t[i]->batch_rows <= SW_WIRE_MAX_BATCH_ROWS &&
                  t[i]->batch_rounds <= SW_WIRE_MAX_BATCH_ROUNDS,
              "timing[%zu]: a batch of %u rows in %u rounds (max %d, %d)", i, t[i]->batch_rows,
              t[i]->batch_rounds, SW_WIRE_MAX_BATCH_ROWS, SW_WIRE_MAX_BATCH_ROUNDS);
    }
    return SW_WIRE_OK;
}

/* The placement fields of an announce (version 7): bounded, a probe's time
 * only with its rows, and none of them on a client. */
static int s_placement(const Shardwire__PeerAnnounce *a, char *err, size_t err_len)
{
    const int client = a->role == SHARDWIRE__ROLE__ROLE_CLIENT;
    CHECK(!client ||
              (!a->auto_place && !a->mem_mib && !a->us_layer_1 && !a->us_layer_k &&
               !a->probe_rows && !a->rtt_us && !a->kv_kib_layer && !a->us_out_1 && !a->us_out_k),
          "a client announces no placement fields");
    CHECK(a->mem_mib <= SW_WIRE_MAX_MEM_MIB, "announce.mem_mib %u > %u", a->mem_mib,
          SW_WIRE_MAX_MEM_MIB);
    CHECK(a->us_layer_1 <= SW_WIRE_MAX_PROBE_US && a->us_layer_k <= SW_WIRE_MAX_PROBE_US &&
              a->us_out_1 <= SW_WIRE_MAX_PROBE_US && a->us_out_k <= SW_WIRE_MAX_PROBE_US &&
              a->rtt_us <= SW_WIRE_MAX_PROBE_US,
          "announce: a probe time over %u us", SW_WIRE_MAX_PROBE_US);
    CHECK(a->probe_rows == 0 || (a->probe_rows >= 2 && a->probe_rows <= SW_WIRE_MAX_ROWS),
          "announce.probe_rows %u not 0 or 2..%d", a->probe_rows, SW_WIRE_MAX_ROWS);
    CHECK(a->probe_rows != 0 || (!a->us_layer_1 && !a->us_layer_k && !a->us_out_1 && !a->us_out_k),
          "announce: probe times without probe_rows");
    CHECK(a->kv_kib_layer <= SW_WIRE_MAX_KV_KIB_LAYER, "announce.kv_kib_layer %u > %u",
          a->kv_kib_layer, SW_WIRE_MAX_KV_KIB_LAYER);
    return SW_WIRE_OK;
}

static int s_announce(const Shardwire__PeerAnnounce *a, char *err, size_t err_len)
{
    CHECK(a != NULL, "announce missing");
    int rc = s_name("announce.name", a->name, 1, err, err_len);
    if (rc)
        return rc;
    CHECK(a->role >= SHARDWIRE__ROLE__ROLE_HEAD && a->role <= SHARDWIRE__ROLE__ROLE_CLIENT,
          "announce.role %d unknown", (int)a->role);
    if ((rc = s_text("announce.backend", a->backend, SW_WIRE_NAME_MAX, err, err_len)))
        return rc;
    for (const char *c = a->backend; c && *c; c++) /* shown in logs and `shardwire status` */
        CHECK(*c >= 0x20 && *c <= 0x7e, "announce.backend has a non-printable byte");
    CHECK(a->max_sessions <= 65536, "announce.max_sessions %u > 65536", a->max_sessions);
    CHECK(sw_wire_model_name_ok(a->model_name), "announce.model_name is not 0..63 bytes of "
                                                "[A-Za-z0-9._:/-]");
    if ((rc = s_placement(a, err, err_len)))
        return rc;
    if (a->role == SHARDWIRE__ROLE__ROLE_CLIENT) {
        CHECK(a->layer_begin == 0 && a->layer_end == 0 && a->n_layers == 0,
              "a client announces no layers");
        size_t n = s_strlen_max(a->model_fingerprint, 64);
        if (n != 0)
            return s_fingerprint(a->model_fingerprint, err, err_len);
        return SW_WIRE_OK;
    }
    if ((rc = s_fingerprint(a->model_fingerprint, err, err_len)))
        return rc;
    CHECK(a->n_layers >= 1 && a->n_layers <= SW_WIRE_MAX_LAYERS,
          "announce.n_layers %u not in 1..%d", a->n_layers, SW_WIRE_MAX_LAYERS);
    CHECK(a->hidden >= 1 && a->hidden <= SW_WIRE_MAX_HIDDEN, "announce.hidden %u not in 1..%d",
          a->hidden, SW_WIRE_MAX_HIDDEN);
    if (sw_wire_standby(a->auto_place, a->layer_begin, a->layer_end)) {
        CHECK(a->role == SHARDWIRE__ROLE__ROLE_MIDDLE, "a standby auto node announces as a middle");
        return SW_WIRE_OK;
    }
    CHECK(a->layer_begin < a->layer_end && a->layer_end <= a->n_layers,
          "announce layer range [%u, %u) not inside [0, %u)", a->layer_begin, a->layer_end,
          a->n_layers);
    int first = a->layer_begin == 0, last = a->layer_end == a->n_layers;
    switch (a->role) {
    case SHARDWIRE__ROLE__ROLE_HEAD:
        CHECK(first && !last, "a head holds [0, e) with e < n_layers");
        break;
    case SHARDWIRE__ROLE__ROLE_MIDDLE:
        CHECK(!first && !last, "a middle stage holds neither the first nor the last layer");
        break;
    case SHARDWIRE__ROLE__ROLE_TAIL:
        CHECK(!first && last, "a tail holds [b, n_layers) with b > 0");
        break;
    default: /* FULL */
        CHECK(first && last, "a full node holds [0, n_layers)");
        break;
    }
    return SW_WIRE_OK;
}

/* The first child (draft index) of draft i's parent, for a valid tree. */
static size_t s_first_child(const uint32_t *parents, size_t i)
{
    size_t c = 0;
    while (parents[c] != parents[i])
        c++;
    return c;
}

/* A tree of k drafts: every parent <= its draft's index, siblings distinct. */
static int s_tree(const uint32_t *parents, size_t k, const uint32_t *tokens, char *err,
                  size_t err_len)
{
    for (size_t i = 0; i < k; i++) {
        CHECK(parents[i] <= i,
              "forward.draft_parents[%zu] = %u (a draft hangs under a node <= %zu)", i, parents[i],
              i);
        for (size_t c = 0; c < i; c++)
            CHECK(parents[c] != parents[i] || tokens[c] != tokens[i],
                  "forward drafts %zu and %zu are siblings with the same token %u", c, i,
                  tokens[i]);
    }
    return SW_WIRE_OK;
}

static int s_forward(const Shardwire__Forward *f, int has_payload, size_t payload_len, char *err,
                     size_t err_len)
{
    int rc;
    CHECK(f != NULL, "forward missing");
    CHECK(f->session_id != 0, "forward.session_id is 0");
    CHECK(f->n_rows >= 1 && f->n_rows <= SW_WIRE_MAX_ROWS, "forward.n_rows %u not in 1..%d",
          f->n_rows, SW_WIRE_MAX_ROWS);
    CHECK((uint64_t)f->start_pos + f->n_rows <= SW_WIRE_MAX_POS,
          "forward rows [%u, %u + %u) pass the position limit %u", f->start_pos, f->start_pos,
          f->n_rows, SW_WIRE_MAX_POS);
    CHECK(f->kv_keep <= f->start_pos, "forward.kv_keep %u > start_pos %u", f->kv_keep,
          f->start_pos);
    CHECK(f->n_tokens == 0 || f->n_tokens == f->n_rows, "forward has %zu tokens for %u rows",
          f->n_tokens, f->n_rows);
    if ((rc = s_tokens("forward.tokens", f->tokens, f->n_tokens, err, err_len)))
        return rc;
    if ((rc = s_sampling(f->sampling, err, err_len)))
        return rc;

    size_t k = f->n_draft_tokens;
    CHECK(k <= SW_WIRE_MAX_DRAFT, "forward has %zu drafts (max %d)", k, SW_WIRE_MAX_DRAFT);
    if (k > 0) {
        CHECK(f->n_rows == k + 1, "forward with %zu drafts must have %zu rows, has %u", k, k + 1,
              f->n_rows);
        CHECK(!f->prefill_more, "a drafting forward cannot be a prefill chunk");
    }
    if ((rc = s_tokens("forward.draft_tokens", f->draft_tokens, k, err, err_len)))
        return rc;
    CHECK(f->n_draft_probs == 0 || f->n_draft_probs == k,
          "forward has %zu draft_probs for %zu drafts", f->n_draft_probs, k);
    for (size_t i = 0; i < f->n_draft_probs; i++)
        CHECK(s_prob(f->draft_probs[i]), "forward.draft_probs[%zu] = %g not in [0, 1]", i,
              (double)f->draft_probs[i]);
    CHECK(f->n_draft_parents == 0 || f->n_draft_parents == k,
          "forward has %zu draft_parents for %zu drafts", f->n_draft_parents, k);
    if ((rc = s_tree(f->draft_parents, f->n_draft_parents, f->draft_tokens, err, err_len)))
        return rc;
    CHECK(f->n_draft_dists == 0 || f->n_draft_dists == k,
          "forward has %zu draft_dists for %zu drafts", f->n_draft_dists, k);
    for (size_t i = 0; i < f->n_draft_dists; i++) {
        const Shardwire__DraftDist *d = f->draft_dists[i];
        CHECK(d != NULL, "forward.draft_dists[%zu] missing", i);
        /* Empty only for a later sibling of a tree: its first sibling's applies. */
        const int later = f->n_draft_parents && s_first_child(f->draft_parents, i) != i;
        CHECK((d->n_tokens >= 1 || later) && d->n_tokens <= SW_WIRE_MAX_DIST &&
                  d->n_probs == d->n_tokens,
              "forward.draft_dists[%zu] has %zu tokens and %zu probs (%d..%d, equal)", i,
              d->n_tokens, d->n_probs, later ? 0 : 1, SW_WIRE_MAX_DIST);
        if ((rc = s_tokens("forward.draft_dists.tokens", d->tokens, d->n_tokens, err, err_len)))
            return rc;
        for (size_t j = 0; j < d->n_probs; j++)
            CHECK(s_prob(d->probs[j]), "forward.draft_dists[%zu].probs[%zu] not in [0, 1]", i, j);
    }
    /* The kept path of the previous tree round. */
    CHECK(f->n_kv_path <= SW_WIRE_MAX_DRAFT, "forward.kv_path has %zu entries (max %d)",
          f->n_kv_path, SW_WIRE_MAX_DRAFT);
    CHECK(f->n_kv_path || f->kv_path_from == 0, "forward.kv_path_from %u without a kv_path",
          f->kv_path_from);
    for (size_t j = 0; j < f->n_kv_path; j++)
        CHECK(f->kv_path[j] >= j && f->kv_path[j] < SW_WIRE_MAX_DRAFT &&
                  (j == 0 || f->kv_path[j] > f->kv_path[j - 1]),
              "forward.kv_path[%zu] = %u (must increase, in [%zu, %d))", j, f->kv_path[j], j,
              SW_WIRE_MAX_DRAFT);
    CHECK(!f->n_kv_path || ((uint64_t)f->kv_path_from + SW_WIRE_MAX_DRAFT <= SW_WIRE_MAX_POS &&
                            f->kv_keep <= (uint64_t)f->kv_path_from + f->n_kv_path),
          "forward keeps %u positions but its kv_path ends at %u + %zu", f->kv_keep,
          f->kv_path_from, f->n_kv_path);

    size_t esize = sw_wire_dtype_size(f->dtype);
    CHECK(esize != 0, "forward.dtype %d unknown", (int)f->dtype);
    if (has_payload) {
        CHECK(f->hidden >= 1 && f->hidden <= SW_WIRE_MAX_HIDDEN, "forward.hidden %u not in 1..%d",
              f->hidden, SW_WIRE_MAX_HIDDEN);
        /* n_rows <= 2^9, hidden <= 2^16, esize <= 4: the product fits 64 bits easily. */
        uint64_t want = (uint64_t)f->n_rows * (uint64_t)f->hidden * (uint64_t)esize;
        CHECK(want <= SW_WIRE_MAX_PAYLOAD, "forward tensor [%u, %u] x %zu B exceeds %u bytes",
              f->n_rows, f->hidden, esize, SW_WIRE_MAX_PAYLOAD);
        CHECK((uint64_t)payload_len == want,
              "forward payload has %zu bytes, [%u, %u] x %zu B needs %llu", payload_len, f->n_rows,
              f->hidden, esize, (unsigned long long)want);
    } else {
        CHECK(f->hidden == 0, "forward.hidden %u set but no payload frame", f->hidden);
        CHECK(f->n_tokens == f->n_rows, "forward without a tensor must carry %u tokens, has %zu",
              f->n_rows, f->n_tokens);
    }
    CHECK(f->layer_begin < SW_WIRE_MAX_LAYERS, "forward.layer_begin %u >= %d", f->layer_begin,
          SW_WIRE_MAX_LAYERS);
    CHECK(f->n_ctx == 0 || (f->n_ctx <= SW_WIRE_MAX_POS && f->n_ctx >= f->start_pos + f->n_rows),
          "forward.n_ctx %u does not hold rows [%u, %u + %u)", f->n_ctx, f->start_pos, f->start_pos,
          f->n_rows);
    /* A prefix from the stages' caches: a new session's prefill that starts
     * after it, in whole blocks, with the prefix's tokens. */
    CHECK(f->prefix_len <= SW_WIRE_MAX_PREFIX && f->prefix_len % SW_PREFIX_BLOCK == 0,
          "forward.prefix_len %u is not a multiple of %d up to %u", f->prefix_len, SW_PREFIX_BLOCK,
          (unsigned)SW_WIRE_MAX_PREFIX);
    CHECK(f->n_prefix_tokens == f->prefix_len, "forward has %zu prefix_tokens for prefix_len %u",
          f->n_prefix_tokens, f->prefix_len);
    CHECK(!f->prefix_len || (f->kv_keep == f->prefix_len && f->start_pos == f->prefix_len &&
                             k == 0 && f->n_kv_path == 0),
          "forward.prefix_len %u with kv_keep %u, start_pos %u, %zu drafts: a prefix starts a "
          "prefill",
          f->prefix_len, f->kv_keep, f->start_pos, k);
    if ((rc =
             s_tokens("forward.prefix_tokens", f->prefix_tokens, f->n_prefix_tokens, err, err_len)))
        return rc;
    if ((rc = s_route("forward.route", f->route, f->n_route, 1, err, err_len)))
        return rc;
    CHECK(f->hop < f->n_route, "forward.hop %u outside a route of %zu stages", f->hop, f->n_route);
    /* spot checks: one running digest per stage passed (the receiver adds its own) */
    CHECK(f->n_hop_digests < SW_WIRE_MAX_ROUTE && f->n_hop_digests <= f->hop,
          "forward has %zu hop_digests at hop %u (at most one per earlier stage, < %d)",
          f->n_hop_digests, f->hop, SW_WIRE_MAX_ROUTE);
    if ((rc = s_name("forward.reply_to", f->reply_to, 1, err, err_len)))
        return rc;
    return s_timing(f->timing, f->n_timing, err, err_len);
}

static int s_verdict(const Shardwire__Verdict *v, char *err, size_t err_len)
{
    CHECK(v != NULL, "verdict missing");
    CHECK(v->session_id != 0, "verdict.session_id is 0");
    CHECK(v->n_accepted <= SW_WIRE_MAX_DRAFT, "verdict.n_accepted %u > %d", v->n_accepted,
          SW_WIRE_MAX_DRAFT);
    CHECK(v->n_tokens == (size_t)v->n_accepted + 1,
          "verdict has %zu tokens, n_accepted %u needs %u", v->n_tokens, v->n_accepted,
          v->n_accepted + 1);
    int rc = s_tokens("verdict.tokens", v->tokens, v->n_tokens, err, err_len);
    if (rc)
        return rc;
    CHECK(v->next_token == v->tokens[v->n_accepted], "verdict.next_token %u != tokens[%u] = %u",
          v->next_token, v->n_accepted, v->tokens[v->n_accepted]);
    CHECK(v->n_path == 0 || v->n_path == v->n_accepted,
          "verdict has %zu path entries for %u drafts", v->n_path, v->n_accepted);
    for (size_t j = 0; j < v->n_path; j++)
        CHECK(v->path[j] >= 1 && v->path[j] <= SW_WIRE_MAX_DRAFT &&
                  (j == 0 || v->path[j] > v->path[j - 1]),
              "verdict.path[%zu] = %u (must increase, in 1..%d)", j, v->path[j], SW_WIRE_MAX_DRAFT);
    CHECK(v->n_hop_digests < SW_WIRE_MAX_ROUTE, "verdict has %zu hop_digests (max %d)",
          v->n_hop_digests, SW_WIRE_MAX_ROUTE - 1);
    return s_timing(v->timing, v->n_timing, err, err_len);
}

static int s_generate(const Shardwire__GenerateRequest *g, char *err, size_t err_len)
{
    int rc;
    CHECK(g != NULL, "generate missing");
    if ((rc = s_name("generate.request_id", g->request_id, 1, err, err_len)))
        return rc;
    size_t plen = s_strlen_max(g->prompt, SW_WIRE_MAX_PROMPT_BYTES);
    CHECK(plen <= SW_WIRE_MAX_PROMPT_BYTES, "generate.prompt longer than %u bytes",
          SW_WIRE_MAX_PROMPT_BYTES);
    CHECK(g->n_prompt_tokens <= SW_WIRE_MAX_PROMPT_TOKENS,
          "generate has %zu prompt tokens (max %u)", g->n_prompt_tokens, SW_WIRE_MAX_PROMPT_TOKENS);
    CHECK(g->n_messages <= SW_WIRE_MAX_MESSAGES, "generate has %zu messages (max %d)",
          g->n_messages, SW_WIRE_MAX_MESSAGES);
    size_t mlen = 0;
    for (size_t i = 0; i < g->n_messages; i++) {
        const Shardwire__ChatMessage *m = g->messages[i];
        CHECK(m != NULL, "generate.messages[%zu] missing", i);
        size_t rl = s_strlen_max(m->role, 17);
        CHECK(rl >= 1 && rl <= 16, "generate.messages[%zu].role not 1..16 bytes", i);
        mlen += s_strlen_max(m->content, SW_WIRE_MAX_PROMPT_BYTES + 1);
        CHECK(mlen <= SW_WIRE_MAX_PROMPT_BYTES, "generate.messages longer than %u bytes",
              SW_WIRE_MAX_PROMPT_BYTES);
    }
    CHECK((plen > 0) + (g->n_prompt_tokens > 0) + (g->n_messages > 0) == 1,
          "generate needs exactly one of prompt, prompt_tokens and messages");
    if ((rc = s_tokens("generate.prompt_tokens", g->prompt_tokens, g->n_prompt_tokens, err,
                       err_len)))
        return rc;
    CHECK(g->n_predict >= 1 && g->n_predict <= SW_WIRE_MAX_POS,
          "generate.n_predict %u not in 1..%u", g->n_predict, SW_WIRE_MAX_POS);
    CHECK(g->n_resume_tokens < g->n_predict,
          "generate has %zu resume tokens, not fewer than n_predict %u", g->n_resume_tokens,
          g->n_predict);
    if ((rc = s_tokens("generate.resume_tokens", g->resume_tokens, g->n_resume_tokens, err,
                       err_len)))
        return rc;
    if ((rc = s_sampling(g->sampling, err, err_len)))
        return rc;
    if (g->draft) {
        CHECK(g->draft->mode >= SHARDWIRE__DRAFT_MODE__DRAFT_AUTO &&
                  g->draft->mode <= SHARDWIRE__DRAFT_MODE__DRAFT_MIX,
              "generate.draft.mode %d unknown", (int)g->draft->mode);
        CHECK(g->draft->n_draft <= SW_WIRE_MAX_DRAFT, "generate.draft.n_draft %u > %d",
              g->draft->n_draft, SW_WIRE_MAX_DRAFT);
        CHECK(s_prob(g->draft->p_min), "generate.draft.p_min not in [0, 1]");
        CHECK(g->draft->tree <= SW_WIRE_MAX_DRAFT, "generate.draft.tree %u > %d", g->draft->tree,
              SW_WIRE_MAX_DRAFT);
        CHECK(g->draft->ahead >= SHARDWIRE__DRAFT_AHEAD__AHEAD_DEFAULT &&
                  g->draft->ahead <= SHARDWIRE__DRAFT_AHEAD__AHEAD_ON,
              "generate.draft.ahead %d unknown", (int)g->draft->ahead);
    }
    CHECK(g->n_stop <= SW_WIRE_MAX_STOP, "generate has %zu stop strings (max %d)", g->n_stop,
          SW_WIRE_MAX_STOP);
    for (size_t i = 0; i < g->n_stop; i++) {
        size_t n = s_strlen_max(g->stop[i], SW_WIRE_MAX_STOP_LEN);
        CHECK(n >= 1 && n <= SW_WIRE_MAX_STOP_LEN, "generate.stop[%zu] not 1..%d bytes", i,
              SW_WIRE_MAX_STOP_LEN);
    }
    return SW_WIRE_OK;
}

static int s_token_chunk(const Shardwire__TokenChunk *c, char *err, size_t err_len)
{
    CHECK(c != NULL, "token_chunk missing");
    int rc = s_name("token_chunk.request_id", c->request_id, 1, err, err_len);
    if (rc)
        return rc;
    CHECK(c->n_tokens <= SW_WIRE_MAX_CHUNK_TOKENS, "token_chunk has %zu tokens (max %d)",
          c->n_tokens, SW_WIRE_MAX_CHUNK_TOKENS);
    if ((rc = s_tokens("token_chunk.tokens", c->tokens, c->n_tokens, err, err_len)))
        return rc;
    CHECK(c->text.len <= SW_WIRE_MAX_CHUNK_TEXT, "token_chunk.text has %zu bytes (max %u)",
          c->text.len, SW_WIRE_MAX_CHUNK_TEXT);
    CHECK(c->finish >= SHARDWIRE__FINISH_REASON__FINISH_NONE &&
              c->finish <= SHARDWIRE__FINISH_REASON__FINISH_CANCELLED,
          "token_chunk.finish %d unknown", (int)c->finish);
    CHECK(c->done == (c->finish != SHARDWIRE__FINISH_REASON__FINISH_NONE),
          "token_chunk.done and finish disagree");
    CHECK((uint64_t)c->index + c->n_tokens <= SW_WIRE_MAX_POS,
          "token_chunk tokens [%u, %u + %zu) pass the position limit", c->index, c->index,
          c->n_tokens);
    if (c->stats) {
        CHECK(c->stats->n_stages <= SW_WIRE_MAX_ROUTE, "token_chunk.stats has %zu stages (max %d)",
              c->stats->n_stages, SW_WIRE_MAX_ROUTE);
        for (size_t i = 0; i < c->stats->n_stages; i++)
            CHECK(c->stats->stages[i] && c->stats->stages[i]->name &&
                      strlen(c->stats->stages[i]->name) <= SW_WIRE_NAME_MAX,
                  "token_chunk.stats stage %zu is malformed", i);
    }
    return SW_WIRE_OK;
}

static int s_error(const Shardwire__Error *e, char *err, size_t err_len)
{
    int rc;
    CHECK(e != NULL, "error missing");
    CHECK((e->code >= SHARDWIRE__ERROR_CODE__ERR_UNSPECIFIED &&
           e->code <= SHARDWIRE__ERROR_CODE__ERR_BUSY) ||
              e->code == SHARDWIRE__ERROR_CODE__ERR_PLAN_REFUSED,
          "error.code %d unknown", (int)e->code);
    CHECK(e->queue_position <= SW_WIRE_MAX_QUEUE, "error.queue_position %u > %d", e->queue_position,
          SW_WIRE_MAX_QUEUE);
    if ((rc = s_text("error.message", e->message, SW_WIRE_MAX_ERROR_TEXT, err, err_len)))
        return rc;
    if ((rc = s_name("error.request_id", e->request_id, 0, err, err_len)))
        return rc;
    return s_name("error.dest", e->dest, 0, err, err_len);
}

static int s_check_plan_assign(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                               char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    const Shardwire__PlanAssign *p = env->plan_assign;
    CHECK(p != NULL, "plan_assign missing");
    int rc = s_fingerprint(p->model_fingerprint, err, err_len);
    if (rc)
        return rc;
    CHECK(p->n_layers >= 2 && p->n_layers <= SW_WIRE_MAX_LAYERS,
          "plan_assign.n_layers %u not in 2..%d", p->n_layers, SW_WIRE_MAX_LAYERS);
    CHECK(p->layer_begin > 0 && p->layer_begin < p->layer_end && p->layer_end <= p->n_layers,
          "plan_assign range [%u, %u) not inside [1, %u)", p->layer_begin, p->layer_end,
          p->n_layers);
    CHECK(p->plan_us <= SW_WIRE_MAX_PROBE_US, "plan_assign.plan_us %u > %u", p->plan_us,
          SW_WIRE_MAX_PROBE_US);
    return SW_WIRE_OK;
}

static int s_check_announce(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                            char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    return s_announce(env->announce, err, err_len);
}

static int s_check_announce_ack(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                                char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    CHECK(env->announce_ack != NULL, "announce_ack missing");
    CHECK(env->announce_ack->heartbeat_ms <= 3600000, "announce_ack.heartbeat_ms too large");
    return s_name("announce_ack.name", env->announce_ack->name, 1, err, err_len);
}

static int s_check_status_query(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                                char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    CHECK(env->status_query != NULL, "status_query missing");
    return SW_WIRE_OK;
}

static int s_check_peer_table(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                              char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    const Shardwire__PeerTable *t = env->peer_table;
    CHECK(t != NULL, "peer_table missing");
    CHECK(t->n_peers <= SW_WIRE_MAX_PEERS, "peer_table has %zu peers (max %d)", t->n_peers,
          SW_WIRE_MAX_PEERS);
    for (size_t i = 0; i < t->n_peers; i++) {
        CHECK(t->peers[i] != NULL, "peer_table.peers[%zu] missing", i);
        int rc = s_announce(t->peers[i]->announce, err, err_len);
        if (rc)
            return rc;
        const char *fp = t->peers[i]->key_fp;
        size_t fl = s_strlen_max(fp, SW_WIRE_KEY_FP_LEN);
        CHECK(fl == 0 || sw_wire_key_fp_ok(fp, fl),
              "peer_table.peers[%zu].key_fp is not %d lower-case hex digits", i,
              SW_WIRE_KEY_FP_LEN);
    }
    return SW_WIRE_OK;
}

static int s_check_session_open(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                                char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    int rc;
    const Shardwire__SessionOpen *o = env->session_open;
    CHECK(o != NULL, "session_open missing");
    CHECK(o->session_id != 0, "session_open.session_id is 0");
    CHECK(o->n_ctx >= 1 && o->n_ctx <= SW_WIRE_MAX_POS, "session_open.n_ctx %u not in 1..%u",
          o->n_ctx, SW_WIRE_MAX_POS);
    if ((rc = s_fingerprint(o->model_fingerprint, err, err_len)))
        return rc;
    if ((rc = s_route("session_open.route", o->route, o->n_route, 1, err, err_len)))
        return rc;
    return s_sampling(o->sampling, err, err_len);
}

static int s_check_session_close(const Shardwire__Envelope *env, int has_payload,
                                 size_t payload_len, char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    CHECK(env->session_close != NULL, "session_close missing");
    CHECK(env->session_close->session_id != 0, "session_close.session_id is 0");
    return s_text("session_close.reason", env->session_close->reason, 256, err, err_len);
}

static int s_check_forward(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                           char *err, size_t err_len)
{
    return s_forward(env->forward, has_payload, payload_len, err, err_len);
}

static int s_check_verdict(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                           char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    return s_verdict(env->verdict, err, err_len);
}

static int s_check_generate(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                            char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    return s_generate(env->generate, err, err_len);
}

static int s_check_token_chunk(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                               char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    return s_token_chunk(env->token_chunk, err, err_len);
}

static int s_check_error(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                         char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    return s_error(env->error, err, err_len);
}

static int s_check_cancel(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                          char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    CHECK(env->cancel != NULL, "cancel missing");
    int rc = s_name("cancel.request_id", env->cancel->request_id, 1, err, err_len);
    if (rc)
        return rc;
    return s_text("cancel.reason", env->cancel->reason, 256, err, err_len);
}

static int s_check_resume(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                          char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    CHECK(env->resume != NULL, "resume missing");
    CHECK(env->resume->from_index <= SW_WIRE_MAX_POS, "resume.from_index %u > %u",
          env->resume->from_index, SW_WIRE_MAX_POS);
    return s_name("resume.request_id", env->resume->request_id, 1, err, err_len);
}

static int s_check_spot_query(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                              char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    CHECK(env->spot_query != NULL, "spot_query missing");
    return SW_WIRE_OK;
}

static int s_check_spot_report(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                               char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    const Shardwire__SpotReport *r = env->spot_report;
    CHECK(r != NULL, "spot_report missing");
    CHECK(r->share >= 0 && r->share <= 1, "spot_report.share %g not in [0, 1]", (double)r->share);
    CHECK(r->n_nodes <= SW_WIRE_MAX_SPOT_NODES, "spot_report has %zu nodes (max %d)", r->n_nodes,
          SW_WIRE_MAX_SPOT_NODES);
    for (size_t i = 0; i < r->n_nodes; i++) {
        CHECK(r->nodes[i] != NULL, "spot_report.nodes[%zu] missing", i);
        CHECK(r->nodes[i]->avoid_s <= SW_WIRE_MAX_SPOT_AVOID_S,
              "spot_report.nodes[%zu].avoid_s %u > %d", i, r->nodes[i]->avoid_s,
              SW_WIRE_MAX_SPOT_AVOID_S);
        int rc = s_name("spot_report.nodes.name", r->nodes[i]->name, 1, err, err_len);
        if (rc)
            return rc;
    }
    return SW_WIRE_OK;
}

/* ---- the message types ------------------------------------------------------ */

typedef int (*s_check_fn)(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                          char *err, size_t err_len);

/*
 * One row per message type, indexed by sw_msg_type_t: its body case in the
 * Envelope, its name, the channel it is sealed on between peers (0: an
 * Error, either), whether a payload frame may follow it, and its validator.
 * A body case no row names is refused as malformed (sw_wire_validate); a
 * type without a row fails the static assertion below.
 */
static const struct s_type {
    int body;         /* SHARDWIRE__ENVELOPE__BODY_* */
    const char *name; /* for logs and errors */
    int channel;      /* SW_WIRE_CH_CLUSTER, SW_WIRE_CH_ACCESS, or 0 (either) */
    int payload;      /* 1: a payload frame may follow (only the Forward's tensor) */
    s_check_fn check; /* every field against the protocol's limits */
} s_types[] = {
    [SW_MSG_ANNOUNCE] = {SHARDWIRE__ENVELOPE__BODY_ANNOUNCE, "announce", SW_WIRE_CH_CLUSTER, 0,
                         s_check_announce},
    [SW_MSG_ANNOUNCE_ACK] = {SHARDWIRE__ENVELOPE__BODY_ANNOUNCE_ACK, "announce_ack",
                             SW_WIRE_CH_CLUSTER, 0, s_check_announce_ack},
    [SW_MSG_STATUS_QUERY] = {SHARDWIRE__ENVELOPE__BODY_STATUS_QUERY, "status_query",
                             SW_WIRE_CH_CLUSTER, 0, s_check_status_query},
    [SW_MSG_PEER_TABLE] = {SHARDWIRE__ENVELOPE__BODY_PEER_TABLE, "peer_table", SW_WIRE_CH_CLUSTER,
                           0, s_check_peer_table},
    [SW_MSG_SESSION_OPEN] = {SHARDWIRE__ENVELOPE__BODY_SESSION_OPEN, "session_open",
                             SW_WIRE_CH_CLUSTER, 0, s_check_session_open},
    [SW_MSG_SESSION_CLOSE] = {SHARDWIRE__ENVELOPE__BODY_SESSION_CLOSE, "session_close",
                              SW_WIRE_CH_CLUSTER, 0, s_check_session_close},
    [SW_MSG_FORWARD] = {SHARDWIRE__ENVELOPE__BODY_FORWARD, "forward", SW_WIRE_CH_CLUSTER, 1,
                        s_check_forward},
    [SW_MSG_VERDICT] = {SHARDWIRE__ENVELOPE__BODY_VERDICT, "verdict", SW_WIRE_CH_CLUSTER, 0,
                        s_check_verdict},
    [SW_MSG_GENERATE] = {SHARDWIRE__ENVELOPE__BODY_GENERATE, "generate", SW_WIRE_CH_ACCESS, 0,
                         s_check_generate},
    [SW_MSG_TOKEN_CHUNK] = {SHARDWIRE__ENVELOPE__BODY_TOKEN_CHUNK, "token_chunk", SW_WIRE_CH_ACCESS,
                            0, s_check_token_chunk},
    [SW_MSG_ERROR] = {SHARDWIRE__ENVELOPE__BODY_ERROR, "error", 0, 0, s_check_error},
    [SW_MSG_CANCEL] = {SHARDWIRE__ENVELOPE__BODY_CANCEL, "cancel", SW_WIRE_CH_ACCESS, 0,
                       s_check_cancel},
    [SW_MSG_RESUME] = {SHARDWIRE__ENVELOPE__BODY_RESUME, "resume", SW_WIRE_CH_ACCESS, 0,
                       s_check_resume},
    [SW_MSG_PLAN_ASSIGN] = {SHARDWIRE__ENVELOPE__BODY_PLAN_ASSIGN, "plan_assign",
                            SW_WIRE_CH_CLUSTER, 0, s_check_plan_assign},
    [SW_MSG_SPOT_QUERY] = {SHARDWIRE__ENVELOPE__BODY_SPOT_QUERY, "spot_query", SW_WIRE_CH_ACCESS, 0,
                           s_check_spot_query},
    [SW_MSG_SPOT_REPORT] = {SHARDWIRE__ENVELOPE__BODY_SPOT_REPORT, "spot_report", SW_WIRE_CH_ACCESS,
                            0, s_check_spot_report},
};
_Static_assert(sizeof s_types / sizeof s_types[0] == SW_MSG_TYPES,
               "wire.c: one row per message type (sw_msg_type_t)");

/* The row of a type, or NULL (SW_MSG_NONE, out of range, or a hole in the table). */
static const struct s_type *s_type_row(sw_msg_type_t type)
{
    if ((int)type <= SW_MSG_NONE || type >= SW_MSG_TYPES || !s_types[type].check)
        return NULL;
    return &s_types[type];
}

sw_msg_type_t sw_wire_body_type(const Shardwire__Envelope *env)
{
    if (!env)
        return SW_MSG_NONE;
    for (int t = SW_MSG_NONE + 1; t < SW_MSG_TYPES; t++)
        if (s_types[t].check && s_types[t].body == (int)env->body_case)
            return (sw_msg_type_t)t;
    return SW_MSG_NONE;
}

int sw_wire_type_body(sw_msg_type_t type)
{
    const struct s_type *row = s_type_row(type);
    return row ? row->body : 0;
}

const char *sw_wire_type_name(sw_msg_type_t type)
{
    const struct s_type *row = s_type_row(type);
    return row ? row->name : "none";
}

const char *sw_wire_body_name(const Shardwire__Envelope *env)
{
    return sw_wire_type_name(sw_wire_body_type(env));
}

int sw_wire_body_channel(const Shardwire__Envelope *env)
{
    const struct s_type *row = s_type_row(sw_wire_body_type(env));
    /* an unknown body never gets this far (validation refuses it first); if
     * it did, the cluster channel is the one that admits the least */
    return row ? row->channel : SW_WIRE_CH_CLUSTER;
}

int sw_wire_validate(const Shardwire__Envelope *env, int has_payload, size_t payload_len, char *err,
                     size_t err_len)
{
    CHECK(env != NULL, "no envelope");
    if (env->version != SW_WIRE_VERSION)
        return s_fail(SW_WIRE_EVERSION, err, err_len, "protocol version %u, this build speaks %u",
                      env->version, SW_WIRE_VERSION);
    const struct s_type *row = s_type_row(sw_wire_body_type(env));
    CHECK(!has_payload || (row && row->payload), "a %s message carries no payload frame",
          sw_wire_body_name(env));
    CHECK(row != NULL, "envelope has no known body (case %d)", (int)env->body_case);
    return row->check(env, has_payload, payload_len, err, err_len);
}

/*
 * Refuses unknown fields anywhere in the tree: peers of one protocol version
 * share one schema, so an unknown field means a broken or hostile sender (and
 * protobuf-c would keep it and write it back out on a re-encode).
 */
static int s_no_unknown(const ProtobufCMessage *m, int depth, char *err, size_t err_len)
{
    CHECK(depth < 8, "message nesting deeper than 8");
    CHECK(m->n_unknown_fields == 0, "%s carries %u unknown field(s)", m->descriptor->short_name,
          m->n_unknown_fields);
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            uint32_t which;
            memcpy(&which, base + f->quantifier_offset, sizeof which);
            if (which != f->id)
                continue;
        }
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n;
            ProtobufCMessage **arr;
            memcpy(&n, base + f->quantifier_offset, sizeof n);
            memcpy(&arr, base + f->offset, sizeof arr);
            for (size_t j = 0; j < n; j++) {
                CHECK(arr[j] != NULL, "%s.%s[%zu] missing", d->short_name, f->name, j);
                int rc = s_no_unknown(arr[j], depth + 1, err, err_len);
                if (rc)
                    return rc;
            }
        } else {
            ProtobufCMessage *sub;
            memcpy(&sub, base + f->offset, sizeof sub);
            if (sub) {
                int rc = s_no_unknown(sub, depth + 1, err, err_len);
                if (rc)
                    return rc;
            }
        }
    }
    return SW_WIRE_OK;
}

/* ---- encode / decode -------------------------------------------------------- */

int sw_wire_decode(const void *header, size_t header_len, int has_payload, size_t payload_len,
                   Shardwire__Envelope **out, char *err, size_t err_len)
{
    *out = NULL;
    CHECK(header_len >= 1 && header_len <= SW_WIRE_MAX_HEADER, "header frame of %zu bytes (1..%u)",
          header_len, SW_WIRE_MAX_HEADER);
    Shardwire__Envelope *env = shardwire__envelope__unpack(NULL, header_len, header);
    CHECK(env != NULL, "header frame (%zu bytes) is not a valid Envelope protobuf", header_len);
    int rc = sw_wire_validate(env, has_payload, payload_len, err, err_len);
    if (rc == SW_WIRE_OK)
        rc = s_no_unknown(&env->base, 0, err, err_len);
    if (rc) {
        shardwire__envelope__free_unpacked(env, NULL);
        return rc;
    }
    *out = env;
    return SW_WIRE_OK;
}

int sw_wire_encode(Shardwire__Envelope *env, int has_payload, size_t payload_len, zmq_msg_t *frame,
                   char *err, size_t err_len)
{
    CHECK(env != NULL, "no envelope to encode");
    env->version = SW_WIRE_VERSION;
    int rc = sw_wire_validate(env, has_payload, payload_len, err, err_len);
    if (rc)
        return rc;
    size_t n = shardwire__envelope__get_packed_size(env);
    CHECK(n <= SW_WIRE_MAX_HEADER, "encoded %s header of %zu bytes exceeds %u",
          sw_wire_body_name(env), n, SW_WIRE_MAX_HEADER);
    if (zmq_msg_init_size(frame, n) != 0)
        return s_fail(SW_WIRE_ESOCKET, err, err_len, "zmq_msg_init_size(%zu): %s", n,
                      zmq_strerror(errno));
    size_t w = shardwire__envelope__pack(env, zmq_msg_data(frame));
    if (w != n) {
        zmq_msg_close(frame);
        CHECK(0, "protobuf pack wrote %zu of %zu bytes", w, n);
    }
    return SW_WIRE_OK;
}

int sw_wire_send(void *sock, const char *name, Shardwire__Envelope *env, const void *payload,
                 size_t payload_len, int has_payload, int flags, char *err, size_t err_len)
{
    return sw_wire_send_ex(sock, name, env, payload, payload_len, has_payload, flags, NULL, err,
                           err_len);
}

static int s_is_relay(const char *name)
{
    return strcmp(name, SW_WIRE_RELAY_NAME) == 0;
}

/* The sealer for env's channel from crypto (NULL when it holds none for it). */
static sw_seal_t *s_send_seal(const sw_wire_crypto_t *crypto, const Shardwire__Envelope *env)
{
    switch (sw_wire_body_channel(env)) {
    case SW_WIRE_CH_ACCESS:
        return crypto->access;
    case SW_WIRE_CH_CLUSTER:
        return crypto->seal;
    default:
        return crypto->access ? crypto->access : crypto->seal;
    }
}

int sw_wire_send_ex(void *sock, const char *name, Shardwire__Envelope *env, const void *payload,
                    size_t payload_len, int has_payload, int flags, const sw_wire_crypto_t *crypto,
                    char *err, size_t err_len)
{
    size_t nlen = s_strlen_max(name, SW_WIRE_ADDR_MAX);
    char dname[SW_WIRE_NAME_MAX + 1], dkey[SW_WIRE_KEY_FP_LEN + 1];
    CHECK(nlen <= SW_WIRE_ADDR_MAX && sw_wire_addr_split(name, nlen, dname, dkey) == 0,
          "send: bad peer name");
    CHECK(!has_payload || payload || payload_len == 0, "send: payload pointer missing");
    zmq_msg_t hdr;
    int rc = sw_wire_encode(env, has_payload, payload_len, &hdr, err, err_len);
    if (rc)
        return rc;
    zmq_msg_t sealed_payload;
    int use_sealed_payload = 0;
    if (crypto && (crypto->seal || crypto->access) && !s_is_relay(dname)) {
        zmq_msg_t sealed_hdr;
        sw_seal_t *seal = s_send_seal(crypto, env);
        if (!seal) {
            zmq_msg_close(&hdr);
            return s_fail(SW_WIRE_ESEAL, err, err_len,
                          "send to %s: a %s travels sealed with the %s key, which this peer does "
                          "not hold",
                          name, sw_wire_body_name(env),
                          sw_wire_body_channel(env) == SW_WIRE_CH_ACCESS ? "access" : "cluster");
        }
        int src = sw_seal_message(seal, crypto->self, dname, zmq_msg_data(&hdr), zmq_msg_size(&hdr),
                                  payload, payload_len, has_payload, &sealed_hdr, &sealed_payload);
        zmq_msg_close(&hdr);
        if (src != SW_SEAL_OK)
            return s_fail(SW_WIRE_ESEAL, err, err_len, "send to %s: sealing: %s", name,
                          sw_seal_strerror(src));
        zmq_msg_init(&hdr);
        zmq_msg_move(&hdr, &sealed_hdr);
        use_sealed_payload = has_payload;
    }
    /* The first frame decides: once it is queued, the others go with it. */
    if (zmq_send(sock, name, nlen, flags | ZMQ_SNDMORE) < 0) {
        int e = errno;
        zmq_msg_close(&hdr);
        if (use_sealed_payload)
            zmq_msg_close(&sealed_payload);
        errno = e;
        return s_fail(SW_WIRE_ESOCKET, err, err_len, "send to %s: %s", name, zmq_strerror(e));
    }
    if (zmq_msg_send(&hdr, sock, has_payload ? ZMQ_SNDMORE : 0) < 0) {
        int e = errno;
        zmq_msg_close(&hdr);
        if (use_sealed_payload)
            zmq_msg_close(&sealed_payload);
        errno = e;
        return s_fail(SW_WIRE_ESOCKET, err, err_len, "send header to %s: %s", name,
                      zmq_strerror(e));
    }
    if (use_sealed_payload) {
        if (zmq_msg_send(&sealed_payload, sock, 0) < 0) {
            int e = errno;
            zmq_msg_close(&sealed_payload);
            errno = e;
            return s_fail(SW_WIRE_ESOCKET, err, err_len, "send payload to %s: %s", name,
                          zmq_strerror(e));
        }
    } else if (has_payload && zmq_send(sock, payload, payload_len, 0) < 0) {
        int e = errno;
        errno = e;
        return s_fail(SW_WIRE_ESOCKET, err, err_len, "send payload to %s: %s", name,
                      zmq_strerror(e));
    }
    return SW_WIRE_OK;
}

int sw_wire_send_error(void *sock, const char *name, int code, uint64_t session_id,
                       const char *request_id, const char *dest, const char *message, int flags)
{
    Shardwire__Error e = SHARDWIRE__ERROR__INIT;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    char text[SW_WIRE_MAX_ERROR_TEXT + 1];
    snprintf(text, sizeof text, "%s", message ? message : "");
    e.code = (Shardwire__ErrorCode)code;
    e.message = text;
    e.session_id = session_id;
    /* Names from outside may be invalid (that may be the error): leave them out then. */
    if (request_id && sw_wire_name_ok(request_id, strnlen(request_id, SW_WIRE_NAME_MAX + 1)))
        e.request_id = (char *)request_id;
    if (dest && sw_wire_name_ok(dest, strnlen(dest, SW_WIRE_NAME_MAX + 1)))
        e.dest = (char *)dest;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_ERROR;
    env.error = &e;
    return sw_wire_send(sock, name, &env, NULL, 0, 0, flags, NULL, 0);
}

/* Receives the rest of a multipart message and throws it away. */
static void s_drain(void *sock)
{
    int more = 1;
    size_t sz = sizeof more;
    while (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz) == 0 && more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, 0) < 0) {
            zmq_msg_close(&m);
            return;
        }
        zmq_msg_close(&m);
    }
}

int sw_wire_recv(void *sock, int flags, sw_wire_msg_t *msg, char *err, size_t err_len)
{
    return sw_wire_recv_ex(sock, flags, msg, NULL, err, err_len);
}

int sw_wire_recv_ex(void *sock, int flags, sw_wire_msg_t *msg, const sw_wire_crypto_t *crypto,
                    char *err, size_t err_len)
{
    zmq_msg_t f[SW_WIRE_MAX_FRAMES];
    int n = 0, more = 1, too_many = 0;
    uint64_t total = 0;
    for (int i = 0; i < SW_WIRE_MAX_FRAMES; i++)
        zmq_msg_init(&f[i]);
    while (more) {
        if (n == SW_WIRE_MAX_FRAMES) {
            too_many = 1;
            s_drain(sock);
            break;
        }
        if (zmq_msg_recv(&f[n], sock, n == 0 ? flags : 0) < 0) {
            int e = errno;
            for (int i = 0; i < SW_WIRE_MAX_FRAMES; i++)
                zmq_msg_close(&f[i]);
            errno = e;
            return SW_WIRE_ESOCKET;
        }
        total += zmq_msg_size(&f[n]);
        more = zmq_msg_more(&f[n]);
        n++;
    }
    int rc;
    char name[SW_WIRE_NAME_MAX + 1], key[SW_WIRE_KEY_FP_LEN + 1];
    size_t nlen = zmq_msg_size(&f[0]);
    if (n == 1 && nlen == 0) {
        rc = SW_WIRE_PROBE;
        goto done;
    }
    if (too_many || n < 2) {
        rc = s_fail(SW_WIRE_EMALFORMED, err, err_len, "message of %s frames (2..%d expected)",
                    too_many ? "too many" : "1", SW_WIRE_MAX_FRAMES);
        goto done;
    }
    if (total > SW_WIRE_MAX_TOTAL) {
        rc = s_fail(SW_WIRE_EMALFORMED, err, err_len, "message of %llu bytes exceeds %u",
                    (unsigned long long)total, SW_WIRE_MAX_TOTAL);
        goto done;
    }
    if (nlen > SW_WIRE_ADDR_MAX || sw_wire_addr_split(zmq_msg_data(&f[0]), nlen, name, key) != 0) {
        rc = s_fail(SW_WIRE_EMALFORMED, err, err_len, "name frame (%zu bytes) is not a peer name",
                    nlen);
        goto done;
    }
    nlen = strlen(name);
    int has_payload = n == 3;
    int sealed = sw_seal_is_sealed(zmq_msg_data(&f[1]), zmq_msg_size(&f[1]));
    const int from_relay = s_is_relay(name);
    Shardwire__Envelope *env = NULL;
    int channel = SW_WIRE_CH_CLEAR;
    if (sealed || (crypto && (crypto->seal || crypto->access) && !from_relay)) {
        if (!sealed && crypto->accept_clear_errors) {
            /* A peer that cannot open our messages says so in clear (it has
             * no key we share); only an Error is accepted that way. */
            rc = sw_wire_decode(zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), has_payload,
                                has_payload ? zmq_msg_size(&f[2]) : 0, &env, err, err_len);
            if (rc == SW_WIRE_OK && env->body_case == SHARDWIRE__ENVELOPE__BODY_ERROR)
                goto deliver;
            if (env)
                shardwire__envelope__free_unpacked(env, NULL);
            env = NULL;
        }
        if (!sealed) {
            rc = s_fail(SW_WIRE_ESEAL, err, err_len,
                        "clear message from %s refused: this cluster seals every message", name);
            goto done;
        }
        /* the frame's key id says the channel: a key of ours on it, or none */
        sw_seal_t *seal = NULL;
        if (crypto && !from_relay) {
            if (sw_seal_has_key(crypto->seal, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]))) {
                seal = crypto->seal;
                channel = SW_WIRE_CH_CLUSTER;
            } else if (sw_seal_has_key(crypto->access, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]))) {
                seal = crypto->access;
                channel = SW_WIRE_CH_ACCESS;
            }
        }
        if (!seal) {
            rc = s_fail(from_relay ? SW_WIRE_ESEAL : SW_WIRE_EKEY, err, err_len,
                        "sealed message from %s but %s", name,
                        from_relay ? "the relay never seals"
                                   : "it names no key held here (another cluster or access key)");
            if (!from_relay)
                memcpy(msg->peer, name, nlen + 1);
            goto done;
        }
        if (zmq_msg_size(&f[1]) > SW_WIRE_MAX_HEADER + SW_SEAL_HDR_OVERHEAD) {
            rc = s_fail(SW_WIRE_EMALFORMED, err, err_len, "sealed header of %zu bytes",
                        zmq_msg_size(&f[1]));
            goto done;
        }
        uint8_t *plain = NULL;
        size_t plain_len = 0;
        int src = sw_seal_open(seal, name, key, crypto->self, zmq_msg_data(&f[1]),
                               zmq_msg_size(&f[1]), has_payload ? &f[2] : NULL, &plain, &plain_len);
        if (src != SW_SEAL_OK) {
            rc = s_fail(src == SW_SEAL_EAUTH ? SW_WIRE_EKEY : SW_WIRE_ESEAL, err, err_len,
                        "sealed message from %s dropped: %s", name, sw_seal_strerror(src));
            if (src == SW_SEAL_EAUTH)
                memcpy(msg->peer, name, nlen + 1);
            goto done;
        }
        rc = sw_wire_decode(plain, plain_len, has_payload, has_payload ? zmq_msg_size(&f[2]) : 0,
                            &env, err, err_len);
        free(plain);
        const int want = rc == SW_WIRE_OK ? sw_wire_body_channel(env) : 0;
        if (want && want != channel) {
            /* a client (access key) cannot pass off a Forward or a Verdict, nor a
             * node a TokenChunk on the stage channel */
            rc = s_fail(SW_WIRE_ESEAL, err, err_len,
                        "a %s from %s sealed with the %s key refused: that type travels only "
                        "under the %s key",
                        sw_wire_body_name(env), name,
                        channel == SW_WIRE_CH_ACCESS ? "access" : "cluster",
                        want == SW_WIRE_CH_ACCESS ? "access" : "cluster");
            shardwire__envelope__free_unpacked(env, NULL);
            env = NULL;
            goto done;
        }
    } else {
        rc = sw_wire_decode(zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), has_payload,
                            has_payload ? zmq_msg_size(&f[2]) : 0, &env, err, err_len);
    }
    if (rc)
        goto done;
deliver:
    sw_wire_msg_clear(msg);
    memcpy(msg->peer, name, nlen + 1);
    memcpy(msg->peer_key, key, sizeof msg->peer_key);
    msg->env = env;
    zmq_msg_init(&msg->payload);
    if (has_payload)
        zmq_msg_move(&msg->payload, &f[2]);
    msg->has_payload = has_payload;
    msg->sealed = sealed;
    msg->channel = channel;
done:
    for (int i = 0; i < SW_WIRE_MAX_FRAMES; i++)
        zmq_msg_close(&f[i]);
    return rc;
}

int sw_wire_decode_msg(const void *header, size_t header_len, int has_payload, size_t payload_len,
                       sw_wire_msg_t *msg, char *err, size_t err_len)
{
    sw_wire_msg_clear(msg);
    return sw_wire_decode(header, header_len, has_payload, payload_len, &msg->env, err, err_len);
}

sw_msg_type_t sw_wire_msg_type(const sw_wire_msg_t *msg)
{
    return sw_wire_body_type(msg->env);
}

const void *sw_wire_msg_payload(sw_wire_msg_t *msg, size_t *len)
{
    if (!msg->has_payload) {
        *len = 0;
        return NULL;
    }
    *len = zmq_msg_size(&msg->payload);
    return zmq_msg_data(&msg->payload);
}

void sw_wire_msg_clear(sw_wire_msg_t *msg)
{
    if (msg->env)
        shardwire__envelope__free_unpacked(msg->env, NULL);
    if (msg->has_payload)
        zmq_msg_close(&msg->payload);
    memset(msg, 0, sizeof *msg);
}

void sw_wire_msg_move(sw_wire_msg_t *dst, sw_wire_msg_t *src)
{
    if (dst == src)
        return;
    sw_wire_msg_clear(dst);
    memcpy(dst->peer, src->peer, sizeof dst->peer);
    memcpy(dst->peer_key, src->peer_key, sizeof dst->peer_key);
    dst->env = src->env;
    dst->has_payload = src->has_payload;
    dst->sealed = src->sealed;
    dst->channel = src->channel;
    zmq_msg_init(&dst->payload);
    if (src->has_payload) {
        zmq_msg_move(&dst->payload, &src->payload);
        zmq_msg_close(&src->payload);
    }
    memset(src, 0, sizeof *src);
}
