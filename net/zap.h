/*
 * zap.h - the ZAP handler's wire side (RFC 27), shared by the relay (relay/auth.c) and a
 * node's direct-link listener (net/direct.c): binding the context's handler socket, reading
 * one request (its CURVE key and the peer's address, printable), and the reply. What a key
 * may do is the caller's: both check it against an allow-list (keys.h, sw_allow_find).
 */
#ifndef SW_ZAP_H
#define SW_ZAP_H

#include "keys.h"

#include <zmq.h>

#define SW_ZAP_EP "inproc://zeromq.zap.01" /* fixed by the ZAP spec (RFC 27) */

/* One ZAP request. */
typedef struct sw_zap_req {
    zmq_msg_t reqid;              /* the request id, echoed in the reply */
    int well_formed;              /* 0: not a ZAP 1.0 request (answer 500) */
    int curve;                    /* 1: the CURVE mechanism */
    char key[SW_KEY_Z85_LEN + 1]; /* the client's public key (Z85), "" if none */
    char addr[64];                /* the peer's IP address, printable */
} sw_zap_req_t;

/* A REP socket bound to SW_ZAP_EP in ctx (bind it before any CURVE server socket), or NULL
 * after one line in err. */
void *sw_zap_bind(void *ctx, char *err, size_t err_len);

/* Reads one pending request without waiting: 1 read (answer it with sw_zap_reply), 0 none. */
int sw_zap_read(void *zap, sw_zap_req_t *req);

/* Answers req ("200" with user as the User-Id, "300" temporary, "400" refused, "500") and
 * releases it. */
void sw_zap_reply(void *zap, sw_zap_req_t *req, const char *status, const char *text,
                  const char *user);

#endif
