/*
 * zap.c - reading and answering ZAP requests (zap.h).
 */
#include "zap.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

void *sw_zap_bind(void *ctx, char *err, size_t err_len)
{
    void *zap = zmq_socket(ctx, ZMQ_REP);
    int zero = 0;
    if (!zap || zmq_setsockopt(zap, ZMQ_LINGER, &zero, sizeof zero) || zmq_bind(zap, SW_ZAP_EP)) {
        snprintf(err, err_len, "ZAP handler: %s", zmq_strerror(errno));
        if (zap)
            zmq_close(zap);
        return NULL;
    }
    return zap;
}

int sw_zap_read(void *zap, sw_zap_req_t *req)
{
    zmq_msg_t f[7];
    int n = 0, more = 1;
    for (int i = 0; i < 7; i++)
        zmq_msg_init(&f[i]);
    memset(req, 0, sizeof *req);
    zmq_msg_init(&req->reqid);
    while (more) {
        zmq_msg_t *dst = &f[n < 7 ? n : 6];
        if (n >= 7) { /* more frames than a request has: keep reading, keep none */
            zmq_msg_close(dst);
            zmq_msg_init(dst);
        }
        if (zmq_msg_recv(dst, zap, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
            for (int i = 0; i < 7; i++)
                zmq_msg_close(&f[i]);
            zmq_msg_close(&req->reqid);
            return 0;
        }
        more = zmq_msg_more(dst);
        n++;
    }
    req->well_formed =
        n == 7 && zmq_msg_size(&f[0]) == 3 && memcmp(zmq_msg_data(&f[0]), "1.0", 3) == 0;
    req->curve = req->well_formed && zmq_msg_size(&f[5]) == 5 &&
                 memcmp(zmq_msg_data(&f[5]), "CURVE", 5) == 0;
    if (req->curve && zmq_msg_size(&f[6]) == 32 &&
        !zmq_z85_encode(req->key, zmq_msg_data(&f[6]), 32))
        req->key[0] = 0;
    if (n >= 4) {
        size_t il =
            zmq_msg_size(&f[3]) < sizeof req->addr - 1 ? zmq_msg_size(&f[3]) : sizeof req->addr - 1;
        memcpy(req->addr, zmq_msg_data(&f[3]), il);
        req->addr[il] = 0;
        for (size_t i = 0; i < il; i++) /* an address is [0-9a-f.:], but keep logs clean */
            if ((unsigned char)req->addr[i] < 0x20 || (unsigned char)req->addr[i] > 0x7e)
                req->addr[i] = '?';
    }
    if (n >= 2)
        zmq_msg_copy(&req->reqid, &f[1]);
    for (int i = 0; i < 7; i++)
        zmq_msg_close(&f[i]);
    return 1;
}

void sw_zap_reply(void *zap, sw_zap_req_t *req, const char *status, const char *text,
                  const char *user)
{
    zmq_send(zap, "1.0", 3, ZMQ_SNDMORE);
    zmq_msg_send(&req->reqid, zap, ZMQ_SNDMORE);
    zmq_send(zap, status, strlen(status), ZMQ_SNDMORE);
    zmq_send(zap, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(zap, user, strlen(user), ZMQ_SNDMORE);
    zmq_send(zap, "", 0, 0);
    zmq_msg_close(&req->reqid);
}
