/*
 * test_gateway_errors.c - the gateway names what failed (code audit 22): a
 * failure on the gateway's own side is answered and reported as that, not as
 * the relay's or as a lack of memory.
 *
 * The gateway runs in this process (gw_run on a thread, no API keys, loopback)
 * against a real relay and no nodes. This program defines malloc and zmq_send
 * itself (glibc's __libc_malloc and libzmq's zmq_send do the work), as
 * test_alloc_fail.c does, to make one failure happen when armed:
 *
 *  - no memory for the copy of the peer table (the malloc of its frame in the
 *    HTTP thread, sizeof(sw_client_table_t) + 1 bytes): GET /v1/models is
 *    500 out_of_memory, as a generation's model check answers it (it was 503);
 *    /health stays 503 "down" but says relay_connected true with error_code
 *    out_of_memory, and /v1/cluster relay.connected true with that error_code
 *    (both said the relay was down);
 *  - the request to the dispatcher thread cannot be sent (the HTTP thread's
 *    1-byte "T" frame fails, ETERM): a completion is 503
 *    dispatcher_unavailable, counted under that code in
 *    shardwire_gateway_errors_total (it was 500 out_of_memory);
 *  - the dispatcher's reply is malformed (its "R" frame goes alone, the rest
 *    is dropped): a completion is 502 dispatcher_bad_reply, counted so (it
 *    was 500 out_of_memory);
 *  - the kernel does not count a socket's received bytes (TCP_INFO shorter
 *    than tcpi_bytes_received, as before Linux 4.1; getsockopt is defined
 *    here too): the gateway says so in one line at its start, naming
 *    --idle-timeout-s (it said nothing);
 *  - ZeroMQ cannot open a request's socket to the dispatcher (zmq_socket of a
 *    DEALER fails with EMFILE, its socket limit; defined here too):
 *    /v1/models, /health, /v1/cluster and a completion all name it
 *    dispatcher_unavailable, a completion 503 counted so (the first three
 *    said out_of_memory, a completion was 500 with a null code).
 *
 * Then a head (SmolLM2, every layer) joins the relay, and a generation's
 * messages from the dispatcher fail (zmq_msg_recv is defined here too: it
 * spots an event of a chosen type and arms the failure of its copy's malloc
 * in that thread, or the dispatcher's submit reply is cut or held 16 s):
 *
 *  - no memory for the copy of a completion's last event (EV_DONE): 500
 *    out_of_memory, counted (the request waited until its client left);
 *  - no memory for the copy of a stream's third EV_TOKENS: the stream ends
 *    with an SSE error event out_of_memory and data: [DONE], counted, and
 *    the head logs the generation cancelled (the event was dropped and the
 *    stream went on);
 *  - the submit's reply is malformed (502 dispatcher_bad_reply), or comes
 *    after the 15 s the request waits for it (503 relay_unreachable): the
 *    head logs the generation cancelled, not run to its end (nobody knew it
 *    was submitted).
 *
 * It runs in the e2e label, not under the sanitizers (which replace malloc).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "gateway.h"
#include "sw_test.h"

extern void *__libc_malloc(size_t);

static atomic_int s_fail_table;   /* mallocs of a peer table frame's copy left to fail */
static atomic_int s_fail_ask;     /* "T" frames left to fail */
static atomic_int s_bad_reply;    /* dispatcher replies left to cut */
static atomic_int s_cutting;      /* 1: the frames of the reply being cut are dropped */
static atomic_int s_old_kernel;   /* 1: TCP_INFO ends before tcpi_bytes_received */
static atomic_int s_fail_socket;  /* DEALER sockets left to refuse (EMFILE) */
static atomic_int s_fail_ev;      /* events of type s_fail_ev_type left to lose (their copy) */
static atomic_int s_fail_ev_type; /* SW_CLIENT_EV_TOKENS or DONE */
static atomic_int s_fail_ev_skip; /* events of that type to let through first */
static atomic_int s_slow_reply;   /* dispatcher replies left to hold 16 s */
static atomic_size_t s_fail_any;  /* the next malloc of this size fails, any thread */
static _Thread_local size_t s_fail_size; /* this thread's next malloc of this size fails */
static _Thread_local int s_after_e;      /* this thread's last frame was an event's "E" */

void *malloc(size_t n)
{
    if (n == sizeof(sw_client_table_t) + 1 && atomic_load(&s_fail_table) > 0 &&
        atomic_fetch_sub(&s_fail_table, 1) > 0)
        return NULL;
    size_t any = atomic_load(&s_fail_any);
    if (any && n == any && atomic_compare_exchange_strong(&s_fail_any, &any, 0))
        return NULL;
    if (s_fail_size && n == s_fail_size) {
        s_fail_size = 0;
        return NULL;
    }
    return __libc_malloc(n);
}

typedef void *(*s_socket_fn)(void *, int);

void *zmq_socket(void *ctx, int type)
{
    static s_socket_fn real;
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "zmq_socket");
    if (type == ZMQ_DEALER && atomic_load(&s_fail_socket) > 0 &&
        atomic_fetch_sub(&s_fail_socket, 1) > 0) {
        errno = EMFILE;
        return NULL;
    }
    return real(ctx, type);
}

typedef int (*s_msg_recv_fn)(zmq_msg_t *, void *, int);

/* An event of the dispatcher (dispatch.c: ["E"][struct s_ev, its first member the type][text])
 * of the armed type: the malloc of its struct's copy (its size + 1) fails in this thread. */
int zmq_msg_recv(zmq_msg_t *m, void *s, int flags)
{
    static s_msg_recv_fn real;
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "zmq_msg_recv");
    const int rc = real(m, s, flags);
    if (rc < 0)
        return rc;
    const size_t n = zmq_msg_size(m);
    const char *data = zmq_msg_data(m);
    int type = 0;
    if (s_after_e && n > sizeof type)
        memcpy(&type, data, sizeof type);
    if (type && type == atomic_load(&s_fail_ev_type) && atomic_load(&s_fail_ev) > 0) {
        if (atomic_load(&s_fail_ev_skip) > 0)
            atomic_fetch_sub(&s_fail_ev_skip, 1);
        else if (atomic_fetch_sub(&s_fail_ev, 1) > 0)
            s_fail_size = n + 1;
    }
    s_after_e = n == 1 && data[0] == 'E' && zmq_msg_more(m);
    return rc;
}

typedef int (*s_send_fn)(void *, const void *, size_t, int);

int zmq_send(void *s, const void *buf, size_t len, int flags)
{
    static s_send_fn real;
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "zmq_send");
    if (atomic_load(&s_cutting)) { /* the rest of a cut reply */
        if (!(flags & ZMQ_SNDMORE))
            atomic_store(&s_cutting, 0);
        return (int)len;
    }
    const char c = len == 1 ? *(const char *)buf : 0;
    if (c == 'T' && atomic_load(&s_fail_ask) > 0 && atomic_fetch_sub(&s_fail_ask, 1) > 0) {
        errno = ETERM;
        return -1;
    }
    if (c == 'R' && (flags & ZMQ_SNDMORE) && atomic_load(&s_bad_reply) > 0 &&
        atomic_fetch_sub(&s_bad_reply, 1) > 0) {
        atomic_store(&s_cutting, 1);
        return real(s, buf, len, flags & ~ZMQ_SNDMORE);
    }
    if (c == 'R' && (flags & ZMQ_SNDMORE) && atomic_load(&s_slow_reply) > 0 &&
        atomic_fetch_sub(&s_slow_reply, 1) > 0)
        sleep(16); /* the dispatcher is held past the request's 15 s (S_REPLY_TIMEOUT_MS) */
    return real(s, buf, len, flags);
}

typedef int (*s_getsockopt_fn)(int, int, int, void *, socklen_t *);

int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
    static s_getsockopt_fn real;
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "getsockopt");
    const int rc = real(fd, level, name, val, len);
    const socklen_t old = (socklen_t)offsetof(struct tcp_info, tcpi_bytes_received);
    if (rc == 0 && level == IPPROTO_TCP && name == TCP_INFO && atomic_load(&s_old_kernel) &&
        *len > old)
        *len = old;
    return rc;
}

static int s_port;

static double s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
static volatile sig_atomic_t s_stop;

static void *s_gateway(void *arg)
{
    return (void *)(intptr_t)gw_run(arg, &s_stop);
}

/* One HTTP request (body NULL: GET, else POST): the status (0 = no answer), the body into *resp
 * (malloc'd). */
static int s_http(const char *path, const char *body, char **resp)
{
    *resp = NULL;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {.tv_sec = 40};
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
        connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    char req[512];
    const size_t blen = body ? strlen(body) : 0;
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                     body ? "POST" : "GET", path, blen);
    if (write(fd, req, (size_t)n) != n || (blen && write(fd, body, blen) != (ssize_t)blen)) {
        close(fd);
        return 0;
    }
    size_t cap = 1 << 20, got = 0; /* a whole stream of 1500 tokens */
    char *b = calloc(1, cap + 1);
    ssize_t r;
    while (b && got < cap && (r = read(fd, b + got, cap - got)) > 0)
        got += (size_t)r;
    close(fd);
    int status = 0;
    if (!b || sscanf(b, "HTTP/1.%*d %d", &status) != 1) {
        free(b);
        return 0;
    }
    const char *at = strstr(b, "\r\n\r\n");
    *resp = strdup(at ? at + 4 : "");
    free(b);
    return status;
}

/* The value of shardwire_gateway_errors_total{code="code"} in /metrics (0 when absent). */
static long s_errors(const char *code)
{
    char *m = NULL, key[128];
    SW_CHECK_INT(s_http("/metrics", NULL, &m), 200);
    snprintf(key, sizeof key, "shardwire_gateway_errors_total{code=\"%s\"} ", code);
    const char *at = m ? strstr(m, key) : NULL;
    const long n = at ? atol(at + strlen(key)) : 0;
    free(m);
    return n;
}

/* A completion (the model check asks for the peer table first): status, code in *resp. */
static int s_complete(char **resp)
{
    return s_http("/v1/completions", "{\"model\":\"m\",\"prompt\":\"Hi\",\"max_tokens\":2}", resp);
}

/* Starts the gateway on this thread's relay with the kernel's TCP_INFO cut short; 0 once it
 * answers /health, with its log until then checked for the line about the idle timeout. */
static int s_start(gw_opts_t *o, pthread_t *th)
{
    const char *log = sw_test_log("gateway.log");
    fflush(stderr);
    int saved = dup(2), lf = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (saved < 0 || lf < 0 || dup2(lf, 2) < 0)
        return -1;
    close(lf);
    atomic_store(&s_old_kernel, 1);
    if (pthread_create(th, NULL, s_gateway, o) != 0)
        return -1;
    char *resp = NULL;
    int up = 0;
    for (int i = 0; i < 100 && !up; i++) {
        up = s_http("/health", NULL, &resp) != 0;
        free(resp);
        if (!up)
            usleep(100000);
    }
    atomic_store(&s_old_kernel, 0);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    SW_CHECK(up);
    /* the start said what the kernel's missing count means, once */
    SW_CHECK_INT(sw_test_count_in_file(log, "tcpi_bytes_received"), 1);
    SW_CHECK_INT(sw_test_count_in_file(log, "waits 10 s for its next request"), 1);
    return up ? 0 : -1;
}

/* A chat body whose one message has two text parts of a and b characters: the gateway joins
 * them in a malloc of a + b + 1 bytes (openai.c s_content). */
static char *s_parts_body(int a, int b)
{
    char *body = malloc((size_t)a + (size_t)b + 256);
    if (!body)
        return NULL;
    int n = sprintf(body, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":["
                          "{\"type\":\"text\",\"text\":\"");
    memset(body + n, 'a', (size_t)a);
    n += a;
    n += sprintf(body + n, "\"},{\"type\":\"text\",\"text\":\"");
    memset(body + n, 'b', (size_t)b);
    n += b;
    sprintf(body + n, "\"}]}]}");
    return body;
}

/* Before any node: the gateway's own failures around the peer table and the dispatcher. */
static void s_no_node(void)
{
    char *resp = NULL;

    /* no memory for a chat message's content parts joined: a 500 out_of_memory, counted, not a
     * 400 telling the client its body was wrong */
    char *body = s_parts_body(3001, 2003);
    atomic_store(&s_fail_any, 3001 + 2003 + 1);
    SW_CHECK_INT(s_http("/v1/chat/completions", body, &resp), 500);
    SW_CHECK(resp && strstr(resp, "\"code\":\"out_of_memory\"") &&
             strstr(resp, "messages[0].content"));
    free(resp);
    SW_CHECK_INT((int)atomic_load(&s_fail_any), 0);
    SW_CHECK_INT(s_errors("out_of_memory"), 1);
    SW_CHECK_INT(s_http("/v1/chat/completions", body, &resp), 503); /* as before: no head */
    free(resp);
    free(body);

    /* no memory for the peer table's copy: /v1/models is a 500 out_of_memory */
    atomic_store(&s_fail_table, 1);
    SW_CHECK_INT(s_http("/v1/models", NULL, &resp), 500);
    SW_CHECK(resp && strstr(resp, "\"code\":\"out_of_memory\""));
    free(resp);
    SW_CHECK_INT(s_http("/v1/models", NULL, &resp), 200); /* and then all is well */
    free(resp);

    /* /health and /v1/cluster: the relay is connected, the gateway's memory failed */
    atomic_store(&s_fail_table, 1);
    SW_CHECK_INT(s_http("/health", NULL, &resp), 503);
    SW_CHECK(resp && strstr(resp, "\"relay_connected\":true"));
    SW_CHECK(resp && strstr(resp, "\"error_code\":\"out_of_memory\""));
    SW_CHECK(resp && strstr(resp, "\"status\":\"down\""));
    free(resp);
    SW_CHECK_INT(s_http("/health", NULL, &resp), 503); /* no node: down, the relay up */
    SW_CHECK(resp && strstr(resp, "\"relay_connected\":true") && !strstr(resp, "error_code"));
    free(resp);
    atomic_store(&s_fail_table, 1);
    SW_CHECK_INT(s_http("/v1/cluster", NULL, &resp), 200);
    SW_CHECK(resp && strstr(resp, "\"connected\":true"));
    SW_CHECK(resp && strstr(resp, "\"error_code\":\"out_of_memory\""));
    free(resp);
    SW_CHECK_INT(atomic_load(&s_fail_table), 0); /* each armed failure happened */

    /* the request cannot reach the dispatcher thread: 503 dispatcher_unavailable, counted */
    atomic_store(&s_fail_ask, 1);
    SW_CHECK_INT(s_complete(&resp), 503);
    SW_CHECK(resp && strstr(resp, "\"code\":\"dispatcher_unavailable\""));
    free(resp);
    SW_CHECK_INT(s_errors("dispatcher_unavailable"), 1);

    /* the dispatcher's reply is malformed: 502 dispatcher_bad_reply, counted */
    atomic_store(&s_bad_reply, 1);
    SW_CHECK_INT(s_complete(&resp), 502);
    SW_CHECK(resp && strstr(resp, "\"code\":\"dispatcher_bad_reply\""));
    free(resp);
    SW_CHECK_INT(s_errors("dispatcher_bad_reply"), 1);
    SW_CHECK_INT(s_errors("out_of_memory"), 1);

    /* ZeroMQ cannot open the request's socket (its socket limit): not a lack of memory, and
     * every endpoint names it the same */
    atomic_store(&s_fail_socket, 1);
    SW_CHECK_INT(s_http("/v1/models", NULL, &resp), 503);
    SW_CHECK(resp && strstr(resp, "\"code\":\"dispatcher_unavailable\""));
    free(resp);
    atomic_store(&s_fail_socket, 1);
    SW_CHECK_INT(s_http("/health", NULL, &resp), 503);
    SW_CHECK(resp && strstr(resp, "\"relay_connected\":true"));
    SW_CHECK(resp && strstr(resp, "\"error_code\":\"dispatcher_unavailable\""));
    free(resp);
    atomic_store(&s_fail_socket, 1);
    SW_CHECK_INT(s_http("/v1/cluster", NULL, &resp), 200);
    SW_CHECK(resp && strstr(resp, "\"error_code\":\"dispatcher_unavailable\""));
    free(resp);
    atomic_store(&s_fail_socket, 1);
    SW_CHECK_INT(s_complete(&resp), 503);
    SW_CHECK(resp && strstr(resp, "\"code\":\"dispatcher_unavailable\""));
    free(resp);
    SW_CHECK_INT(atomic_load(&s_fail_socket), 0);
    SW_CHECK_INT(s_errors("dispatcher_unavailable"), 2);
    SW_CHECK_INT(s_errors("out_of_memory"), 1);

    /* and the next request is answered as before: no head */
    SW_CHECK_INT(s_complete(&resp), 503);
    SW_CHECK(resp && strstr(resp, "\"code\":\"no_head\""));
    free(resp);
}

static const char *s_head_log; /* the head's log */

/* Generations the head ran to their end: done, or failed (its deadline, ...). */
static int s_head_finished(void)
{
    return sw_test_count_lines(s_head_log, "request '", "' done: ") +
           sw_test_count_lines(s_head_log, "request '", " failed: ");
}

/* Waits up to timeout_s for the head to end one more generation than the counts before: 1 when
 * it was cancelled, 0 when it ran to its end (done or failed), -1 when neither happened. */
static int s_head_ended(int cancelled, int ended, int timeout_s)
{
    for (int i = 0; i < timeout_s * 10; i++) {
        if (sw_test_count_in_file(s_head_log, "cancelled by the client") > cancelled)
            return 1;
        if (s_head_finished() > ended)
            return 0;
        usleep(100000);
    }
    return -1;
}

/* The head's ended generations so far: cancelled into *cancelled, the others into *ended. */
static void s_head_counts(int *cancelled, int *ended)
{
    *cancelled = sw_test_count_in_file(s_head_log, "cancelled by the client");
    *ended = s_head_finished();
}

/* A head on the relay: a generation's events and its submit's reply lost on the gateway. */
static void s_lost(const char *model)
{
    char body[1024], *resp = NULL;
    int cancelled, ended;
    /* the last event of a completion (EV_DONE) has no memory for its copy: 500, not a wait */
    snprintf(body, sizeof body,
             "{\"model\":\"%s\",\"prompt\":\"Once upon a time\",\"max_tokens\":4,"
             "\"temperature\":0}",
             model);
    SW_CHECK_INT(s_http("/v1/completions", body, &resp), 200); /* the head answers */
    free(resp);
    atomic_store(&s_fail_ev_type, SW_CLIENT_EV_DONE);
    atomic_store(&s_fail_ev_skip, 0);
    atomic_store(&s_fail_ev, 1);
    const double t0 = s_now_ms();
    SW_CHECK_INT(s_http("/v1/completions", body, &resp), 500);
    SW_CHECK(resp && strstr(resp, "\"code\":\"out_of_memory\""));
    free(resp);
    SW_CHECK(s_now_ms() - t0 < 10000);
    SW_CHECK_INT(atomic_load(&s_fail_ev), 0);
    SW_CHECK_INT(s_errors("out_of_memory"), 2);

    /* a stream's third EV_TOKENS: an SSE error event and the end, the generation cancelled */
    snprintf(body, sizeof body,
             "{\"model\":\"%s\",\"prompt\":\"Once upon a time, in a land far away,\","
             "\"max_tokens\":1500,\"temperature\":0,\"stream\":true,"
             "\"shardwire\":{\"timeout_s\":300}}",
             model);
    s_head_counts(&cancelled, &ended);
    atomic_store(&s_fail_ev_type, SW_CLIENT_EV_TOKENS);
    atomic_store(&s_fail_ev_skip, 2);
    atomic_store(&s_fail_ev, 1);
    SW_CHECK_INT(s_http("/v1/completions", body, &resp), 200);
    SW_CHECK(resp && strstr(resp, "data: {\"error\":") &&
             strstr(resp, "\"code\":\"out_of_memory\""));
    SW_CHECK(resp && strstr(resp, "data: [DONE]"));
    free(resp);
    SW_CHECK_INT(atomic_load(&s_fail_ev), 0);
    SW_CHECK_INT(s_errors("out_of_memory"), 3);
    SW_CHECK_INT(s_head_ended(cancelled, ended, 30), 1);

    /* the submit's reply is malformed (the request names its head: no peer table asked): the
     * generation the dispatcher started is cancelled. 6000 tokens one at a time (no drafts,
     * which commit several a round on this repetitive text): it still runs when the slow reply
     * below fails at 16 s unless one thread decodes over 375 tokens/s (SmolLM2-135M: 43 with
     * one thread on the AMD EPYC Zen 3 of 2026-12-07, with other builds running) */
    snprintf(body, sizeof body,
             "{\"model\":\"%s\",\"prompt\":\"Once upon a time, in a land far away,\","
             "\"max_tokens\":6000,\"temperature\":0,"
             "\"shardwire\":{\"head\":\"head\",\"timeout_s\":300,\"draft\":\"none\"}}",
             model);
    s_head_counts(&cancelled, &ended);
    atomic_store(&s_bad_reply, 1);
    SW_CHECK_INT(s_http("/v1/completions", body, &resp), 502);
    SW_CHECK(resp && strstr(resp, "\"code\":\"dispatcher_bad_reply\""));
    free(resp);
    SW_CHECK_INT(s_head_ended(cancelled, ended, 30), 1);

    /* the submit's reply comes after the request stopped waiting (15 s): cancelled too */
    s_head_counts(&cancelled, &ended);
    atomic_store(&s_slow_reply, 1);
    SW_CHECK_INT(s_http("/v1/completions", body, &resp), 503);
    SW_CHECK(resp && strstr(resp, "\"code\":\"relay_unreachable\""));
    free(resp);
    SW_CHECK_INT(s_head_ended(cancelled, ended, 30), 1);

    /* and then all is well */
    snprintf(body, sizeof body,
             "{\"model\":\"%s\",\"prompt\":\"Hi\",\"max_tokens\":4,\"temperature\":0}", model);
    SW_CHECK_INT(s_http("/v1/completions", body, &resp), 200);
    free(resp);
}

int main(void)
{
    char relay[64], listen[64];
    snprintf(relay, sizeof relay, "tcp://127.0.0.1:%d", sw_test_free_port());
    s_port = sw_test_free_port();
    snprintf(listen, sizeof listen, "127.0.0.1:%d", s_port);
    char *ra[] = {(char *)sw_test_bin("shardwire-relay"), "--listen", relay, "--insecure-loopback",
                  NULL};
    pid_t rpid = sw_test_spawn(ra, sw_test_log("relay.log"));
    SW_CHECK(sw_test_wait_listen(relay, 20) == 0);
    gw_opts_t o = {
        .listen = listen,
        .relay = relay,
        .connect_timeout_ms = 20000,
        .no_api_key = 1,
        .max_body = 1 << 20,
        .max_bodies = 16 << 20,
        .max_connections = 64,
        .max_per_ip = 16,
        .max_per_prefix = 16,
        .max_slow = 16,
        .max_inflight = 4,
        .max_inflight_per_key = 4,
        .idle_timeout_s = 30,
        .header_timeout_s = 10,
        .body_timeout_s = 10,
        .defaults = {.max_tokens = 16, .top_p = 1, .repeat_penalty = 1, .timeout_ms = 30000}};
    pthread_t th;
    if (s_start(&o, &th) != 0) {
        sw_test_kill(rpid);
        return sw_test_done();
    }
    s_no_node();

    /* a head with every layer, named "head"; its model's id is its file's name */
    const char *path = sw_test_model();
    char model[256];
    const char *base = strrchr(path, '/');
    snprintf(model, sizeof model, "%s", base ? base + 1 : path);
    char *dot = strstr(model, ".gguf");
    if (dot)
        *dot = 0;
    s_head_log = sw_test_log("head.log");
    char *na[] = {(char *)sw_test_bin("shardwire-node"),
                  "--model",
                  (char *)path,
                  "--layers",
                  "0:end",
                  "--relay",
                  relay,
                  "--name",
                  "head",
                  "--threads",
                  "1",
                  "--insecure-loopback",
                  NULL};
    pid_t npid = sw_test_spawn(na, s_head_log);
    SW_CHECK(sw_test_wait_peers(relay, 1, 60) == 0);
    s_lost(model);

    s_stop = 1;
    void *rc = NULL;
    pthread_join(th, &rc);
    SW_CHECK_INT((int)(intptr_t)rc, 0);
    sw_test_kill(npid);
    sw_test_kill(rpid);
    return sw_test_done();
}
