/*
 * test_serve_keys.c - the API-key rules of `shardwire serve` (docs/api.md,
 * "Limits and safety": mode 0600, one key per line of at least 16
 * characters, `#` comments, no start without keys unless
 * --insecure-no-api-key on a loopback address, never both; a --temp no
 * request's temperature may have is refused).
 *
 * Each bad configuration must end the gateway at once (exit 2, before it
 * listens) with one line naming the problem. A good file with a comment and
 * two keys starts it (with a real relay: a gateway joins the cluster
 * before it listens); each key is let in (GET /v1/models), while a missing
 * key, a key that is only a prefix of one, a key with a character changed,
 * a commented-out key and the comment's text get 401.
 */
#include "sw_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEY1 "k1-0123456789abcdef0123"
#define KEY2 "k2-fedcba9876543210fedc"

static char s_relay[64], s_listen[64], s_curl[32];

/* Writes text to a fresh file of the given mode; its path. */
static const char *s_file(const char *name, const char *text, mode_t mode)
{
    const char *path = sw_test_log(name);
    FILE *f = fopen(path, "w");
    if (!f)
        sw_test_skip("cannot write a key file");
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
    return path;
}

/* Runs serve with a key file (or none, or --insecure-no-api-key on listen), also
 * --insecure-no-api-key when nokey, and flag val when flag; expects it to exit 2
 * with a stderr line that contains want. */
static void s_refused_with(const char *keyfile, const char *listen, int nokey, const char *flag,
                           const char *val, const char *want)
{
    char *argv[20];
    int n = 0;
    argv[n++] = (char *)sw_test_bin("shardwire");
    argv[n++] = "serve";
    argv[n++] = "--relay";
    argv[n++] = s_relay;
    argv[n++] = "--insecure-loopback";
    argv[n++] = "--listen";
    argv[n++] = (char *)(listen ? listen : s_listen);
    if (keyfile) {
        argv[n++] = "--api-key-file";
        argv[n++] = (char *)keyfile;
    }
    if (nokey || (!keyfile && listen))
        argv[n++] = "--insecure-no-api-key";
    if (flag) {
        argv[n++] = (char *)flag;
        argv[n++] = (char *)val;
    }
    argv[n] = NULL;
    char *err = NULL;
    int rc = sw_test_run(argv, 10, NULL, &err);
    int found = err && strstr(err, want) != NULL;
    int lines = 0;
    for (const char *p = err; p && *p; p++)
        lines += *p == '\n';
    if (rc != 2 || !found || lines != 1)
        fprintf(stderr, "serve %s: exit %d (want 2), want one line with '%s', got: %s",
                keyfile ? keyfile : "(no key file)", rc, want, err ? err : "(nothing)\n");
    SW_CHECK_INT(rc, 2);
    SW_CHECK(found);
    SW_CHECK_INT(lines, 1);
    free(err);
}

static void s_refused(const char *keyfile, const char *listen, const char *want)
{
    s_refused_with(keyfile, listen, 0, NULL, NULL, want);
}

/* The HTTP status of GET /v1/models with an optional bearer key. */
static int s_status(const char *key)
{
    char url[128], auth[128];
    snprintf(url, sizeof url, "http://%s/v1/models", s_listen);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", key ? key : "");
    char *argv[] = {s_curl,
                    "-s",
                    "--max-time",
                    "20",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    key ? "-H" : url,
                    key ? auth : NULL,
                    key ? url : NULL,
                    NULL};
    char *out = NULL;
    int rc = sw_test_run(argv, 30, &out, NULL);
    int code = rc == 0 && out ? atoi(out) : -1;
    free(out);
    return code;
}

int main(void)
{
    snprintf(s_curl, sizeof s_curl, "%s",
             access("/usr/bin/curl", X_OK) == 0 ? "/usr/bin/curl" : "/bin/curl");
    if (access(s_curl, X_OK) != 0)
        sw_test_skip("curl is not installed (scripts/deps.sh installs it)");
    snprintf(s_relay, sizeof s_relay, "tcp://127.0.0.1:%d", sw_test_free_port());
    snprintf(s_listen, sizeof s_listen, "127.0.0.1:%d", sw_test_free_port());

    /* the refusals: each names its cause */
    s_refused(NULL, NULL, "--api-key-file FILE is required");
    s_refused(NULL, "0.0.0.0:0", "--insecure-no-api-key only works on a loopback");
    s_refused(sw_test_log("no-such.keys"), NULL, "No such file");
    s_refused(s_file("open.keys", KEY1 "\n", 0644), NULL, "can be read by others (mode 644)");
    s_refused(s_file("group.keys", KEY1 "\n", 0640), NULL, "chmod 600 it");
    s_refused(s_file("short.keys", "# one short key\n0123456789abcde\n", 0600), NULL,
              "line 2: a key is one word of at least 16 characters");
    s_refused(s_file("two-words.keys", KEY1 " " KEY2 "\n", 0600), NULL,
              "line 1: a key is one word");
    s_refused(s_file("empty.keys", "# only comments\n\n   \n", 0600), NULL, "holds no key");
    /* a ZeroMQ transport is no HTTP address (before: its name cut at 6 characters and refused
     * as "must be HOST:PORT", naming what was left of it) */
    s_refused(s_file("ipc.keys", KEY1 "\n", 0600), "inproc://gateway",
              "--listen 'inproc://gateway' is not an HTTP address");
    {
        /* a line past the reader's buffer: before, each 1023-character piece was a key of its
         * own, so the tail of a long key let a request in */
        char lng[2100];
        memset(lng, 'k', 2000);
        memcpy(lng + 2000, "\n", 2);
        s_refused(s_file("long.keys", lng, 0600), NULL, "line 1 is longer than 1022 characters");
    }
    /* both a key file and no keys: before, every request was let in, the file ignored */
    s_refused_with(s_file("both.keys", KEY1 "\n", 0600), NULL, 1, NULL, NULL,
                   "--insecure-no-api-key and --api-key-file contradict each other");
    /* a default temperature no request may have (before: GET /v1/defaults said 5 of [0, 2]) */
    s_refused_with(s_file("temp.keys", KEY1 "\n", 0600), NULL, 0, "--temp", "5",
                   "--temp 5 is above 2");
    enum { MANY = 1100 }; /* over the gateway's 1024 */
    char *many = malloc(MANY * 32);
    SW_CHECK(many != NULL);
    size_t off = 0;
    for (int i = 0; many && i < MANY; i++)
        off += (size_t)snprintf(many + off, 32, "key-number-%04d-abcdefgh\n", i);
    if (many)
        s_refused(s_file("many.keys", many, 0600), NULL, "more than 1024 keys");
    free(many);

    /* a real relay for the gateways that start (it joins the cluster first) */
    char *ra[] = {(char *)sw_test_bin("shardwire-relay"), "--listen", s_relay,
                  "--insecure-loopback", NULL};
    pid_t relay = sw_test_spawn(ra, sw_test_log("relay.log"));
    SW_CHECK_INT(sw_test_wait_listen(s_relay, 30), 0);

    /* a good file: comments, blank lines, spaces around keys */
    const char *good =
        s_file("good.keys", "# the team's keys\n\n  " KEY1 "  \n" KEY2 "\r\n# " KEY1 "x\n", 0600);
    char *argv[] = {(char *)sw_test_bin("shardwire"),
                    "serve",
                    "--relay",
                    s_relay,
                    "--insecure-loopback",
                    "--listen",
                    s_listen,
                    "--api-key-file",
                    (char *)good,
                    NULL};
    pid_t serve = sw_test_spawn(argv, sw_test_log("serve.log"));
    char ep[80];
    snprintf(ep, sizeof ep, "tcp://%s", s_listen);
    SW_CHECK_INT(sw_test_wait_listen(ep, 30), 0);
    SW_CHECK_INT(s_status(NULL), 401);
    SW_CHECK_INT(s_status(KEY1), 200);
    SW_CHECK_INT(s_status(KEY2), 200);
    SW_CHECK_INT(s_status("k1-0123456789abcdef012"), 401);  /* a prefix of KEY1 */
    SW_CHECK_INT(s_status("k1-0123456789abcdef0124"), 401); /* one character changed */
    SW_CHECK_INT(s_status(KEY1 "x"), 401);                  /* the commented-out line */
    SW_CHECK_INT(s_status("# the team's keys"), 401);
    sw_test_kill(serve);
    char *log = sw_test_read_file(sw_test_log("serve.log"), NULL);
    SW_CHECK(log && strstr(log, "API keys required"));
    free(log);

    /* without keys on loopback it starts, and needs no Authorization */
    char *open_argv[] = {(char *)sw_test_bin("shardwire"),
                         "serve",
                         "--relay",
                         s_relay,
                         "--insecure-loopback",
                         "--listen",
                         s_listen,
                         "--insecure-no-api-key",
                         NULL};
    serve = sw_test_spawn(open_argv, sw_test_log("serve-open.log"));
    SW_CHECK_INT(sw_test_wait_listen(ep, 30), 0);
    SW_CHECK_INT(s_status(NULL), 200);
    sw_test_kill(serve);
    sw_test_kill(relay);
    return sw_test_done();
}
