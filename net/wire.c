/*
 * wire.c - framing of shardwire messages (see wire.h and docs/protocol.md):
 * name frames (a peer name and its key), printable names of roles and error
 * codes, sending [name][header][payload]? with end-to-end sealing, receiving
 * one whole multipart message (bounded in frames and bytes, opened and
 * checked against its channel) and the received message's life. What a
 * header frame holds is checked in wire_check.c.
 */
#include "wire.h"

#include "codec_pb.h"
#include "log.h"
#include "seal.h"
#include <stdlib.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Inside the checks: bail out with a message unless cond holds. */
#define CHECK(cond, ...) SW_PB_CHECK("wire", cond, __VA_ARGS__)

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
        "head_leaving",
    };
    if (code < 0 || (size_t)code >= sizeof names / sizeof names[0] || !names[code])
        return "unknown";
    return names[code];
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

int sw_wire_send(void *sock, const char *name, sw_envelope_t *env, const void *payload,
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

/* Sends [rid]? [name][header][payload]? sealed for dname (sw_wire_send_ex, sw_wire_send_direct). */
static int s_send(void *sock, const void *rid, size_t rid_len, const char *name, size_t nlen,
                  const char *dname, sw_envelope_t *env, const void *payload, size_t payload_len,
                  int has_payload, int flags, const sw_wire_crypto_t *crypto, char *err,
                  size_t err_len);

int sw_wire_send_ex(void *sock, const char *name, sw_envelope_t *env, const void *payload,
                    size_t payload_len, int has_payload, int flags, const sw_wire_crypto_t *crypto,
                    char *err, size_t err_len)
{
    size_t nlen = name ? strnlen(name, SW_WIRE_ADDR_MAX + 1) : 0;
    char dname[SW_WIRE_NAME_MAX + 1], dkey[SW_WIRE_KEY_FP_LEN + 1];
    CHECK(nlen <= SW_WIRE_ADDR_MAX && sw_wire_addr_split(name, nlen, dname, dkey) == 0,
          "send: bad peer name");
    return s_send(sock, NULL, 0, name, nlen, dname, env, payload, payload_len, has_payload, flags,
                  crypto, err, err_len);
}

int sw_wire_send_direct(void *sock, const void *rid, size_t rid_len, const char *dest,
                        sw_envelope_t *env, const void *payload, size_t payload_len,
                        int has_payload, int flags, const sw_wire_crypto_t *crypto, char *err,
                        size_t err_len)
{
    const char *self = crypto && crypto->self ? crypto->self : "";
    const size_t slen = strnlen(self, SW_WIRE_NAME_MAX + 1);
    CHECK(dest && sw_wire_name_ok(dest, strnlen(dest, SW_WIRE_NAME_MAX + 1)) &&
              sw_wire_name_ok(self, slen),
          "send: bad peer name");
    return s_send(sock, rid, rid_len, self, slen, dest, env, payload, payload_len, has_payload,
                  flags, crypto, err, err_len);
}

static int s_send(void *sock, const void *rid, size_t rid_len, const char *name, size_t nlen,
                  const char *dname, sw_envelope_t *env, const void *payload, size_t payload_len,
                  int has_payload, int flags, const sw_wire_crypto_t *crypto, char *err,
                  size_t err_len)
{
    CHECK(!has_payload || payload || payload_len == 0, "send: payload pointer missing");
    Shardwire__Envelope *pb = env ? &env->pb : NULL;
    zmq_msg_t hdr;
    int rc = sw_wire_encode(pb, has_payload, payload_len, &hdr, err, err_len);
    if (rc)
        return rc;
    zmq_msg_t sealed_payload;
    int use_sealed_payload = 0;
    if (crypto && (crypto->seal || crypto->access) && !s_is_relay(dname)) {
        zmq_msg_t sealed_hdr;
        sw_seal_t *seal = s_send_seal(crypto, pb);
        if (!seal) {
            zmq_msg_close(&hdr);
            return sw_pb_fail(
                "wire", SW_WIRE_ESEAL, err, err_len,
                "send to %s: a %s travels sealed with the %s key, which this peer does "
                "not hold",
                dname, sw_wire_body_name(pb),
                sw_wire_body_channel(pb) == SW_WIRE_CH_ACCESS ? "access" : "cluster");
        }
        int src = sw_seal_message(seal, crypto->self, dname, zmq_msg_data(&hdr), zmq_msg_size(&hdr),
                                  payload, payload_len, has_payload, &sealed_hdr, &sealed_payload);
        zmq_msg_close(&hdr);
        if (src != SW_SEAL_OK)
            return sw_pb_fail("wire", SW_WIRE_ESEAL, err, err_len, "send to %s: sealing: %s", dname,
                              sw_seal_strerror(src));
        zmq_msg_init(&hdr);
        zmq_msg_move(&hdr, &sealed_hdr);
        use_sealed_payload = has_payload;
    }
    /* The first frame decides: once it is queued, the others go with it. */
    if ((rid ? zmq_send(sock, rid, rid_len, flags | ZMQ_SNDMORE) < 0
             : zmq_send(sock, name, nlen, flags | ZMQ_SNDMORE) < 0) ||
        (rid && zmq_send(sock, name, nlen, ZMQ_SNDMORE) < 0)) {
        int e = errno;
        zmq_msg_close(&hdr);
        if (use_sealed_payload)
            zmq_msg_close(&sealed_payload);
        errno = e;
        return sw_pb_fail("wire", SW_WIRE_ESOCKET, err, err_len, "send to %s: %s", dname,
                          zmq_strerror(e));
    }
    if (zmq_msg_send(&hdr, sock, has_payload ? ZMQ_SNDMORE : 0) < 0) {
        int e = errno;
        zmq_msg_close(&hdr);
        if (use_sealed_payload)
            zmq_msg_close(&sealed_payload);
        errno = e;
        return sw_pb_fail("wire", SW_WIRE_ESOCKET, err, err_len, "send header to %s: %s", dname,
                          zmq_strerror(e));
    }
    if (use_sealed_payload) {
        if (zmq_msg_send(&sealed_payload, sock, 0) < 0) {
            int e = errno;
            zmq_msg_close(&sealed_payload);
            errno = e;
            return sw_pb_fail("wire", SW_WIRE_ESOCKET, err, err_len, "send payload to %s: %s",
                              dname, zmq_strerror(e));
        }
    } else if (has_payload && zmq_send(sock, payload, payload_len, 0) < 0) {
        int e = errno;
        errno = e;
        return sw_pb_fail("wire", SW_WIRE_ESOCKET, err, err_len, "send payload to %s: %s", dname,
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
    return sw_wire_send(sock, name, sw_envelope_of(&env), NULL, 0, 0, flags, NULL, 0);
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

/* The frames of one received message. */
typedef struct s_frames {
    zmq_msg_t f[SW_WIRE_MAX_FRAMES]; /* [name][header][payload]?; all initialised */
    int n;                           /* frames received */
    int too_many;                    /* 1: more than SW_WIRE_MAX_FRAMES came (the rest drained) */
    uint64_t total;                  /* bytes of the frames received */
} s_frames_t;

static void s_frames_close(s_frames_t *fr)
{
    for (int i = 0; i < SW_WIRE_MAX_FRAMES; i++)
        zmq_msg_close(&fr->f[i]);
}

/* Receives every frame of one message into fr: 0, or SW_WIRE_ESOCKET with
 * fr closed and errno kept. */
static int s_recv_frames(void *sock, int flags, s_frames_t *fr)
{
    int more = 1;
    fr->n = 0;
    fr->too_many = 0;
    fr->total = 0;
    for (int i = 0; i < SW_WIRE_MAX_FRAMES; i++)
        zmq_msg_init(&fr->f[i]);
    while (more) {
        if (fr->n == SW_WIRE_MAX_FRAMES) {
            fr->too_many = 1;
            s_drain(sock);
            break;
        }
        if (zmq_msg_recv(&fr->f[fr->n], sock, fr->n == 0 ? flags : 0) < 0) {
            int e = errno;
            s_frames_close(fr);
            errno = e;
            return SW_WIRE_ESOCKET;
        }
        fr->total += zmq_msg_size(&fr->f[fr->n]);
        more = zmq_msg_more(&fr->f[fr->n]);
        fr->n++;
    }
    return SW_WIRE_OK;
}

/* A header (fr's own, or the one opened from it) decoded and validated into *env. */
static int s_decode_header(s_frames_t *fr, const void *header, size_t header_len, int has_payload,
                           Shardwire__Envelope **env, char *err, size_t err_len)
{
    return sw_wire_decode(header, header_len, has_payload,
                          has_payload ? zmq_msg_size(&fr->f[2]) : 0, env, err, err_len);
}

/*
 * A message from name that must be (or is) sealed: opens it with the key of
 * ours its frame names, decodes it and checks its type's channel; with
 * accept_clear_errors, a clear Error passes (channel CLEAR). SW_WIRE_OK with
 * *env and *channel set, or an error after a line in err (and msg->peer set
 * to the sender when no key of ours opens it).
 */
static int s_recv_sealed(s_frames_t *fr, const char *name, const char *key, int sealed,
                         const sw_wire_crypto_t *crypto, sw_wire_msg_t *msg,
                         Shardwire__Envelope **env, int *channel, char *err, size_t err_len)
{
    const int has_payload = fr->n == 3, from_relay = s_is_relay(name);
    const void *hdr = zmq_msg_data(&fr->f[1]);
    const size_t hdr_len = zmq_msg_size(&fr->f[1]), nlen = strlen(name);
    int rc;
    if (!sealed && crypto->accept_clear_errors) {
        /* A peer that cannot open our messages says so in clear (it has
         * no key we share); only an Error is accepted that way. */
        rc = s_decode_header(fr, hdr, hdr_len, has_payload, env, err, err_len);
        if (rc == SW_WIRE_OK && (*env)->body_case == SHARDWIRE__ENVELOPE__BODY_ERROR)
            return SW_WIRE_OK;
        if (*env)
            shardwire__envelope__free_unpacked(*env, NULL);
        *env = NULL;
    }
    if (!sealed)
        return sw_pb_fail("wire", SW_WIRE_ESEAL, err, err_len,
                          "clear message from %s refused: this cluster seals every message", name);
    /* the frame's key id says the channel: a key of ours on it, or none */
    sw_seal_t *seal = NULL;
    if (crypto && !from_relay) {
        if (sw_seal_has_key(crypto->seal, hdr, hdr_len)) {
            seal = crypto->seal;
            *channel = SW_WIRE_CH_CLUSTER;
        } else if (sw_seal_has_key(crypto->access, hdr, hdr_len)) {
            seal = crypto->access;
            *channel = SW_WIRE_CH_ACCESS;
        }
    }
    if (!seal) {
        rc = sw_pb_fail("wire", from_relay ? SW_WIRE_ESEAL : SW_WIRE_EKEY, err, err_len,
                        "sealed message from %s but %s", name,
                        from_relay ? "the relay never seals"
                                   : "it names no key held here (another cluster or access key)");
        if (!from_relay)
            memcpy(msg->peer, name, nlen + 1);
        return rc;
    }
    if (hdr_len > SW_WIRE_MAX_HEADER + SW_SEAL_HDR_OVERHEAD)
        return sw_pb_fail("wire", SW_WIRE_EMALFORMED, err, err_len, "sealed header of %zu bytes",
                          hdr_len);
    uint8_t *plain = NULL;
    size_t plain_len = 0;
    int src = sw_seal_open(seal, name, key, crypto->self, hdr, hdr_len,
                           has_payload ? &fr->f[2] : NULL, &plain, &plain_len);
    if (src != SW_SEAL_OK) {
        rc = sw_pb_fail("wire", src == SW_SEAL_EAUTH ? SW_WIRE_EKEY : SW_WIRE_ESEAL, err, err_len,
                        "sealed message from %s dropped: %s", name, sw_seal_strerror(src));
        if (src == SW_SEAL_EAUTH)
            memcpy(msg->peer, name, nlen + 1);
        return rc;
    }
    rc = s_decode_header(fr, plain, plain_len, has_payload, env, err, err_len);
    free(plain);
    const int want = rc == SW_WIRE_OK ? sw_wire_body_channel(*env) : 0;
    if (want && want != *channel) {
        /* a client (access key) cannot pass off a Forward or a Verdict, nor a
         * node a TokenChunk on the stage channel */
        rc = sw_pb_fail("wire", SW_WIRE_ESEAL, err, err_len,
                        "a %s from %s sealed with the %s key refused: that type travels only "
                        "under the %s key",
                        sw_wire_body_name(*env), name,
                        *channel == SW_WIRE_CH_ACCESS ? "access" : "cluster",
                        want == SW_WIRE_CH_ACCESS ? "access" : "cluster");
        shardwire__envelope__free_unpacked(*env, NULL);
        *env = NULL;
    }
    return rc;
}

/* The frames of a valid message, its header not yet read: 0 with name and
 * key filled, SW_WIRE_PROBE, or SW_WIRE_EMALFORMED after a line in err. */
static int s_check_frames(s_frames_t *fr, char *name, char *key, char *err, size_t err_len)
{
    const size_t nlen = zmq_msg_size(&fr->f[0]);
    if (fr->n == 1 && nlen == 0)
        return SW_WIRE_PROBE;
    if (fr->too_many || fr->n < 2)
        return sw_pb_fail("wire", SW_WIRE_EMALFORMED, err, err_len,
                          "message of %s frames (2..%d expected)", fr->too_many ? "too many" : "1",
                          SW_WIRE_MAX_FRAMES);
    if (fr->total > SW_WIRE_MAX_TOTAL)
        return sw_pb_fail("wire", SW_WIRE_EMALFORMED, err, err_len,
                          "message of %llu bytes exceeds %u", (unsigned long long)fr->total,
                          SW_WIRE_MAX_TOTAL);
    if (nlen > SW_WIRE_ADDR_MAX ||
        sw_wire_addr_split(zmq_msg_data(&fr->f[0]), nlen, name, key) != 0)
        return sw_pb_fail("wire", SW_WIRE_EMALFORMED, err, err_len,
                          "name frame (%zu bytes) is not a peer name", nlen);
    return SW_WIRE_OK;
}

/* The rest of a receive once the frames are checked and the sender (name, key) is known. */
static int s_recv_rest(s_frames_t *fr, const char *name, const char *key, sw_wire_msg_t *msg,
                       const sw_wire_crypto_t *crypto, char *err, size_t err_len);

int sw_wire_recv_ex(void *sock, int flags, sw_wire_msg_t *msg, const sw_wire_crypto_t *crypto,
                    char *err, size_t err_len)
{
    s_frames_t fr;
    if (s_recv_frames(sock, flags, &fr) != SW_WIRE_OK)
        return SW_WIRE_ESOCKET;
    char name[SW_WIRE_NAME_MAX + 1], key[SW_WIRE_KEY_FP_LEN + 1];
    int rc = s_check_frames(&fr, name, key, err, err_len);
    if (rc == SW_WIRE_OK)
        rc = s_recv_rest(&fr, name, key, msg, crypto, err, err_len);
    s_frames_close(&fr);
    return rc;
}

int sw_wire_recv_direct(void *sock, int flags, int router, sw_wire_msg_t *msg,
                        const sw_wire_crypto_t *crypto, sw_wire_who_fn who, void *who_ctx,
                        char *err, size_t err_len)
{
    zmq_msg_t rid;
    zmq_msg_init(&rid);
    if (router && zmq_msg_recv(&rid, sock, flags) < 0) {
        int e = errno;
        zmq_msg_close(&rid);
        errno = e;
        return SW_WIRE_ESOCKET;
    }
    if (router && !zmq_msg_more(&rid)) {
        zmq_msg_close(&rid);
        return sw_pb_fail("wire", SW_WIRE_EMALFORMED, err, err_len, "direct: an empty message");
    }
    s_frames_t fr;
    if (s_recv_frames(sock, router ? 0 : flags, &fr) != SW_WIRE_OK) {
        int e = errno;
        zmq_msg_close(&rid);
        errno = e;
        return SW_WIRE_ESOCKET;
    }
    char name[SW_WIRE_NAME_MAX + 1] = "", key[SW_WIRE_KEY_FP_LEN + 1] = "";
    const size_t nlen = zmq_msg_size(&fr.f[0]);
    int rc;
    if (fr.n == 1) { /* a hello: the dialler's name alone */
        rc = nlen <= SW_WIRE_NAME_MAX && sw_wire_name_ok(zmq_msg_data(&fr.f[0]), nlen)
                 ? SW_WIRE_PROBE
                 : sw_pb_fail("wire", SW_WIRE_EMALFORMED, err, err_len, "direct: a bad hello");
        if (rc == SW_WIRE_PROBE) {
            memcpy(name, zmq_msg_data(&fr.f[0]), nlen);
            name[nlen] = 0;
        }
    } else {
        rc = s_check_frames(&fr, name, key, err, err_len);
        if (rc == SW_WIRE_OK && key[0])
            rc = sw_pb_fail("wire", SW_WIRE_EMALFORMED, err, err_len,
                            "direct: a name frame with a key");
    }
    if ((rc == SW_WIRE_OK || rc == SW_WIRE_PROBE) &&
        who(who_ctx, router ? &rid : NULL, &fr.f[0], name, key) != 0)
        rc = sw_pb_fail("wire", SW_WIRE_EKEY, err, err_len,
                        "direct: a message naming '%s' on a connection that is not its", name);
    if (rc == SW_WIRE_OK)
        rc = s_recv_rest(&fr, name, key, msg, crypto, err, err_len);
    zmq_msg_close(&rid);
    s_frames_close(&fr);
    return rc;
}

static int s_recv_rest(s_frames_t *fr, const char *name, const char *key, sw_wire_msg_t *msg,
                       const sw_wire_crypto_t *crypto, char *err, size_t err_len)
{
    int rc;
    const int has_payload = fr->n == 3;
    const int sealed = sw_seal_is_sealed(zmq_msg_data(&fr->f[1]), zmq_msg_size(&fr->f[1]));
    Shardwire__Envelope *env = NULL;
    int channel = SW_WIRE_CH_CLEAR;
    if (sealed || (crypto && (crypto->seal || crypto->access) && !s_is_relay(name)))
        rc = s_recv_sealed(fr, name, key, sealed, crypto, msg, &env, &channel, err, err_len);
    else
        rc = s_decode_header(fr, zmq_msg_data(&fr->f[1]), zmq_msg_size(&fr->f[1]), has_payload,
                             &env, err, err_len);
    if (rc)
        return rc;
    sw_wire_msg_clear(msg);
    memcpy(msg->peer, name, strlen(name) + 1);
    memcpy(msg->peer_key, key, sizeof msg->peer_key);
    msg->env = sw_envelope_of(env);
    zmq_msg_init(&msg->payload);
    if (has_payload)
        zmq_msg_move(&msg->payload, &fr->f[2]);
    msg->has_payload = has_payload;
    msg->sealed = sealed;
    msg->channel = channel;
    return SW_WIRE_OK;
}

int sw_wire_decode_msg(const void *header, size_t header_len, int has_payload, size_t payload_len,
                       sw_wire_msg_t *msg, char *err, size_t err_len)
{
    sw_wire_msg_clear(msg);
    Shardwire__Envelope *env = NULL;
    int rc = sw_wire_decode(header, header_len, has_payload, payload_len, &env, err, err_len);
    msg->env = sw_envelope_of(env);
    return rc;
}

sw_msg_type_t sw_wire_msg_type(const sw_wire_msg_t *msg)
{
    return msg->env ? sw_wire_body_type(&msg->env->pb) : SW_MSG_NONE;
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

size_t sw_wire_msg_size(const sw_wire_msg_t *msg)
{
    size_t n = msg->env ? shardwire__envelope__get_packed_size(&msg->env->pb) : 0;
    if (msg->has_payload)
        n += zmq_msg_size((zmq_msg_t *)&msg->payload);
    return n;
}

void sw_wire_msg_clear(sw_wire_msg_t *msg)
{
    if (msg->env)
        shardwire__envelope__free_unpacked(&msg->env->pb, NULL);
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
    dst->link = src->link;
    zmq_msg_init(&dst->payload);
    if (src->has_payload) {
        zmq_msg_move(&dst->payload, &src->payload);
        zmq_msg_close(&src->payload);
    }
    memset(src, 0, sizeof *src);
}
