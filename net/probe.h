/*
 * probe.h - asks a relay endpoint whether a ZeroMQ server really answers
 * there, before a peer dials it with libzmq.
 *
 * libzmq reports a connection that was accepted and then closed during the
 * security handshake the same way whether the relay refused our keys or a TCP
 * forwarder / tunnel (ssh -L, socat, a cloud load balancer, kubectl
 * port-forward) accepted the connection while nothing listened behind it yet.
 * The probe tells them apart: it opens its own TCP connection, sends the start
 * of a ZMTP 3 greeting and reads the server's. A relay always answers with a greeting that
 * names its security mechanism ("CURVE", or "NULL" for --insecure-loopback); a
 * forwarder with no relay behind it closes without a byte. Nothing past the
 * greeting is sent, so the relay sees one connection that ended before its
 * handshake (its ZAP handler is never asked).
 *
 * Blocking, at most timeout_ms for the connect and timeout_ms for the answer.
 */
#ifndef SW_PROBE_H
#define SW_PROBE_H

#include <stddef.h>

#define SW_PROBE_MECH_MAX 20 /* bytes of the mechanism field of a ZMTP greeting */

typedef enum sw_probe_rc {
    SW_PROBE_OK = 0,            /* a ZMTP server greeted us; its mechanism is in mech */
    SW_PROBE_UNSUPPORTED = 1,   /* not a tcp:// endpoint (ipc://, inproc://): not probed */
    SW_PROBE_BAD_ENDPOINT = -1, /* not HOST:PORT: will never work */
    SW_PROBE_RESOLVE = -2,      /* the host name does not resolve (yet) */
    SW_PROBE_CONNECT = -3,      /* TCP connect failed: refused, unreachable, timed out */
    SW_PROBE_CLOSED = -4,       /* accepted, then closed without a greeting (a forwarder) */
    SW_PROBE_SILENT = -5,       /* accepted, no greeting within the timeout */
    SW_PROBE_NOT_ZMTP = -6,     /* something else (not ZeroMQ) answers on the port */
} sw_probe_rc;

/*
 * Probes endpoint ("tcp://HOST:PORT", "tcp://[v6]:PORT", "tcp://SRC;HOST:PORT").
 * On SW_PROBE_OK, mech (SW_PROBE_MECH_MAX + 1 bytes) holds the
 * server's mechanism, "" if it closed before sending it. On any other result
 * err holds a short reason ("connection refused", "host 'relay' does not
 * resolve: ...") for a log line.
 */
sw_probe_rc sw_probe_relay(const char *endpoint, int timeout_ms, char *mech, char *err,
                           size_t err_len) __attribute__((warn_unused_result));

/* 1 when rc is worth retrying later (the relay may come up); 0 otherwise. */
int sw_probe_retryable(sw_probe_rc rc);

#endif
