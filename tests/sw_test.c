/*
 * sw_test.c - implementation of the test harness in sw_test.h.
 */
#include "sw_test.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int sw_test_failures;
int sw_test_checks;

static char s_log_dir[256]; /* sw_test_log's folder, "" until first use */

static int s_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Removes the log folder (and every sw_test_tmpdir inside it). */
static void s_log_dir_remove(void)
{
    if (s_log_dir[0])
        nftw(s_log_dir, s_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    s_log_dir[0] = 0;
}

int sw_test_done(void)
{
    printf("%d checks, %d failed\n", sw_test_checks, sw_test_failures);
    if (s_log_dir[0] && !sw_test_failures)
        s_log_dir_remove();
    else if (s_log_dir[0])
        printf("logs and files of this test (kept because it failed): %s\n", s_log_dir);
    return sw_test_failures ? 1 : 0;
}

/* This process's folder ($TMPDIR or /tmp, then swtest.XXXXXX), made on first use. */
static const char *s_log_root(void)
{
    if (!s_log_dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(s_log_dir, sizeof s_log_dir, "%.200s/swtest.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
        if (!mkdtemp(s_log_dir)) {
            s_log_dir[0] = 0;
            sw_test_skip("cannot create a temporary directory");
        }
    }
    return s_log_dir;
}

const char *sw_test_log(const char *name)
{
    static char paths[8][384];
    static int slot;
    const char *root = s_log_root();
    char *p = paths[slot++ & 7];
    snprintf(p, 384, "%s/%.100s", root, name);
    return p;
}

int sw_test_strict(void)
{
    const char *v = getenv("SW_TEST_STRICT");
    return v && v[0] && strcmp(v, "0") != 0;
}

/* Appends "<program>[ part]: why" to $SW_TEST_SKIP_LOG, one write() per line
 * so that tests running in parallel do not interleave. */
static void s_skip_record(const char *kind, const char *why)
{
    const char *log = getenv("SW_TEST_SKIP_LOG");
    if (!log || !log[0])
        return;
    char line[1024];
    int n = snprintf(line, sizeof line, "%s%s: %s\n", program_invocation_short_name, kind, why);
    if (n <= 0)
        return;
    if (n >= (int)sizeof line) {
        n = (int)sizeof line;
        line[n - 1] = '\n';
    }
    for (char *p = line; p < line + n - 1; p++)
        if (*p == '\n')
            *p = ' ';
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0)
        return;
    ssize_t w = write(fd, line, (size_t)n);
    if (w != n)
        fprintf(stderr, "%s: could not record the skip (%s)\n", log, strerror(errno));
    close(fd);
}

void sw_test_skip(const char *why)
{
    s_skip_record("", why);
    if (sw_test_strict()) {
        printf("FAILED: would skip, and SW_TEST_STRICT=1 forbids skips: %s\n", why);
        if (s_log_dir[0])
            printf("logs and files of this test: %s\n", s_log_dir);
        fflush(stdout);
        exit(1);
    }
    if (sw_test_failures) {
        /* a failure is not hidden by a later skip: ctest counts 77 as skipped */
        printf("FAILED: %d check(s) failed before the test skipped (%s)\n", sw_test_failures, why);
        if (s_log_dir[0])
            printf("logs and files of this test (kept because it failed): %s\n", s_log_dir);
        fflush(stdout);
        exit(1);
    }
    s_log_dir_remove();
    printf("SKIP: %s\n", why);
    fflush(stdout);
    exit(77);
}

void sw_test_skip_part(const char *why)
{
    s_skip_record(" (part)", why);
    if (sw_test_strict()) {
        sw_test_failures++;
        printf("FAILED: part skipped, and SW_TEST_STRICT=1 forbids skips: %s\n", why);
    } else {
        printf("SKIP (part): %s\n", why);
    }
    fflush(stdout);
}

const char *sw_test_env(const char *name)
{
    const char *v = getenv(name);
    if (!v || !v[0]) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s is not set", name);
        sw_test_skip(msg);
    }
    return v;
}

const char *sw_test_model(void)
{
    const char *path = sw_test_env("SW_TEST_MODEL");
    if (access(path, R_OK) != 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "model %s is absent (run: bash scripts/fetch_model.sh)", path);
        sw_test_skip(msg);
    }
    return path;
}

char *sw_test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return NULL;
    }
    long size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return NULL;
    }
    char *buf = malloc((size_t)size + 1);
    if (buf && fread(buf, 1, (size_t)size, f) != (size_t)size) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[size] = 0;
        if (len)
            *len = (size_t)size;
    }
    return buf;
}

int sw_test_renamed_model(const char *model, const char *out)
{
    size_t len = 0;
    char *bytes = sw_test_read_file(model, &len);
    char *at = bytes ? memmem(bytes, len, "Smollm2 135M", 12) : NULL;
    int rc = -1;
    if (at) {
        at[0] = 'X';
        FILE *f = fopen(out, "wb");
        rc = f && fwrite(bytes, 1, len, f) == len ? 0 : -1;
        if (f && fclose(f) != 0)
            rc = -1;
    }
    free(bytes);
    return rc;
}

int sw_test_wait_text(const char *path, const char *needle, int timeout_s)
{
    for (int i = 0; i <= timeout_s * 10; i++) {
        char *t = sw_test_read_file(path, NULL);
        const int found = t && strstr(t, needle);
        free(t);
        if (found)
            return 1;
        usleep(100000);
    }
    return 0;
}

const char *sw_test_tmpdir(void)
{
    static char dir[288];
    snprintf(dir, sizeof dir, "%s/tmp.XXXXXX", s_log_root());
    if (!mkdtemp(dir))
        sw_test_skip("cannot create a temporary directory");
    return dir;
}

/* ---- processes ---- */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

const char *sw_test_bin(const char *name)
{
    static char paths[8][1024];
    static int slot;
    char *p = paths[slot++ & 7];
    snprintf(p, 1024, "%s/%s", sw_test_env("SW_BIN_DIR"), name);
    return p;
}

int sw_test_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* The network namespace the next processes start in ("" = the test's own). */
static char s_netns[64];

void sw_test_netns(const char *name)
{
    snprintf(s_netns, sizeof s_netns, "%s", name ? name : "");
}

/* In a child before execv: enters s_netns (exits 126 when it cannot). */
static void s_enter_netns(void)
{
    char path[128];
    if (!s_netns[0])
        return;
    snprintf(path, sizeof path, "/var/run/netns/%s", s_netns);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0)
        _exit(126);
    close(fd);
}

void sw_test_run_argv(char *argv[SW_TEST_RUN_ARGC], const char *ep, const char *prompt,
                      const char *n_gen, const char *timeout_s)
{
    const char *a[SW_TEST_RUN_ARGC] = {sw_test_bin("shardwire"),
                                       "run",
                                       "--greedy",
                                       "--relay",
                                       ep,
                                       "-p",
                                       prompt,
                                       "-n",
                                       n_gen,
                                       "--json",
                                       "--timeout-s",
                                       timeout_s,
                                       NULL,
                                       NULL};
    for (int i = 0; i < SW_TEST_RUN_ARGC; i++)
        argv[i] = (char *)a[i];
}

pid_t sw_test_spawn_wanem(const char *listen, const char *up, int ms, const char *log_path)
{
    char delay[16];
    snprintf(delay, sizeof delay, "%d", ms);
    char *argv[] = {(char *)sw_test_bin("shardwire-wanem"),
                    "--listen",
                    (char *)listen,
                    "--connect",
                    (char *)up,
                    "--delay-ms",
                    delay,
                    NULL};
    return sw_test_spawn(argv, log_path);
}

pid_t sw_test_spawn(char *const argv[], const char *log_path)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    setpgid(0, 0);
    s_enter_netns();
    int fd = open(log_path ? log_path : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
    }
    execv(argv[0], argv);
    _exit(127);
}

pid_t sw_test_spawn_io(char *const argv[], const char *out_path, const char *err_path)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    setpgid(0, 0);
    s_enter_netns();
    int fo = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int fe = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fo < 0 || fe < 0)
        _exit(127);
    dup2(fo, STDOUT_FILENO);
    dup2(fe, STDERR_FILENO);
    close(fo);
    close(fe);
    execv(argv[0], argv);
    _exit(127);
}

int sw_test_wait(pid_t pid, int timeout_s)
{
    int status = 0;
    for (int i = 0; i < timeout_s * 20 + 1; i++) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
        if (r < 0)
            return -1;
        usleep(50000);
    }
    sw_test_kill(pid);
    return -1;
}

int sw_test_json_tokens(const char *text, int32_t *ids, int max)
{
    /* The output is our own compact JSON: "tokens":[1,2,3]. No JSON library,
     * so that engine-only tests link this file too. */
    const char *p = text ? strstr(text, "\"tokens\":[") : NULL;
    if (!p)
        return -1;
    p += 10;
    int n = 0;
    while (*p && *p != ']') {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p)
            return -1;
        if (n < max)
            ids[n++] = (int32_t)v;
        p = *end == ',' ? end + 1 : end;
    }
    return *p == ']' ? n : -1;
}

int sw_test_generate_run(const char *model, const char *prompt, int n_gen, const char *const *extra,
                         int timeout_s, char **out, char **err)
{
    char n[16];
    snprintf(n, sizeof n, "%d", n_gen);
    char *argv[24] = {(char *)sw_test_bin("shardwire"),
                      "generate",
                      "--greedy",
                      "--model",
                      (char *)model,
                      "-p",
                      (char *)prompt,
                      "-n",
                      n,
                      "--threads",
                      "1",
                      "--json"};
    int k = 12;
    for (int i = 0; extra && extra[i] && k < 22; i++)
        argv[k++] = (char *)extra[i];
    argv[k] = NULL;
    return sw_test_run(argv, timeout_s, out, err);
}

int sw_test_generate(const char *model, const char *prompt, int n_gen, int32_t *ids, int max)
{
    char *out = NULL, *err = NULL;
    int rc = sw_test_generate_run(model, prompt, n_gen, NULL, 300, &out, &err);
    int count = rc == 0 ? sw_test_json_tokens(out, ids, max) : -1;
    if (count < 0)
        fprintf(stderr, "shardwire generate failed (exit %d): %s\n", rc, err ? err : "");
    free(out);
    free(err);
    return count;
}

int sw_test_count_in_file(const char *path, const char *needle)
{
    char *text = sw_test_read_file(path, NULL);
    int n = 0;
    for (const char *p = text; p && (p = strstr(p, needle)); p += strlen(needle))
        n++;
    free(text);
    return n;
}

int sw_test_count_lines(const char *path, const char *a, const char *b)
{
    char *text = sw_test_read_file(path, NULL);
    int n = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        n += strstr(line, a) && strstr(line, b);
    }
    free(text);
    return n;
}

void sw_test_kill(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    for (int i = 0; i < 100; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return;
        usleep(50000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* Appends what fd has to *buf; returns 0 at EOF, 1 when more may come. */
static int s_drain(int fd, char **buf, size_t *len)
{
    char tmp[65536];
    ssize_t n = read(fd, tmp, sizeof tmp);
    if (n <= 0)
        return n < 0 && errno == EINTR ? 1 : 0;
    char *b = realloc(*buf, *len + (size_t)n + 1);
    if (!b)
        return 0;
    memcpy(b + *len, tmp, (size_t)n);
    *len += (size_t)n;
    b[*len] = 0;
    *buf = b;
    return 1;
}

int sw_test_run(char *const argv[], int timeout_s, char **out, char **err)
{
    int po[2], pe[2];
    if (pipe(po) || pipe(pe))
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        s_enter_netns();
        dup2(po[1], STDOUT_FILENO);
        dup2(pe[1], STDERR_FILENO);
        close(po[0]);
        close(pe[0]);
        close(po[1]);
        close(pe[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    char *bo = calloc(1, 1), *be = calloc(1, 1);
    size_t lo = 0, le = 0;
    int open_o = 1, open_e = 1, killed = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (open_o || open_e) {
        struct pollfd fds[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
        poll(fds, 2, 200);
        if (open_o && (fds[0].revents & (POLLIN | POLLHUP)))
            open_o = s_drain(po[0], &bo, &lo);
        if (open_e && (fds[1].revents & (POLLIN | POLLHUP)))
            open_e = s_drain(pe[0], &be, &le);
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (!killed && t.tv_sec - t0.tv_sec > timeout_s) {
            kill(pid, SIGKILL);
            killed = 1;
        }
    }
    close(po[0]);
    close(pe[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (out)
        *out = bo;
    else
        free(bo);
    if (err)
        *err = be;
    else
        free(be);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}

int sw_test_wait_listen(const char *endpoint, int timeout_s)
{
    const char *hp = strstr(endpoint, "://");
    hp = hp ? hp + 3 : endpoint;
    const char *colon = strrchr(hp, ':');
    if (!colon)
        return -1;
    char host[64];
    snprintf(host, sizeof host, "%.*s", (int)(colon - hp), hp);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (!strcmp(host, "localhost") || !strcmp(host, "*"))
        snprintf(host, sizeof host, "127.0.0.1");
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
        return -1;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        int ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
        if (fd >= 0)
            close(fd);
        if (ok)
            return 0;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec > timeout_s)
            return -1;
        usleep(20000);
    }
}

int sw_test_wait_peers(const char *endpoint, int n_peers, int timeout_s)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        char *out = NULL;
        /* Keys from SW_KEY / SW_RELAY_KEY / SW_CLUSTER_KEY when a test set them, else the
         * loopback development mode. */
        char *argv[] = {(char *)sw_test_bin("shardwire"),
                        "status",
                        "--relay",
                        (char *)endpoint,
                        "--json",
                        getenv("SW_RELAY_KEY") ? NULL : "--insecure-loopback",
                        NULL};
        int rc = sw_test_run(argv, 10, &out, NULL);
        int n = 0;
        for (const char *p = out; rc == 0 && p && (p = strstr(p, "\"role\":")); p += 7)
            if (strncmp(p + 7, "\"client\"", 8) != 0)
                n++;
        free(out);
        if (n >= n_peers)
            return 0;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec > timeout_s)
            return -1;
        usleep(200000);
    }
}

/* ---- a keyed cluster ---- */

static const char *s_cpath(const char *dir, const char *name, const char *ext)
{
    static char buf[8][512];
    static int slot;
    char *p = buf[slot++ & 7];
    snprintf(p, 512, "%s/%s%s", dir, name, ext);
    return p;
}

/* The first line of dir/NAME.pub into pub (41 bytes); 0 or -1. */
static int s_pub(const char *dir, const char *name, char *pub)
{
    char *t = sw_test_read_file(s_cpath(dir, name, ".pub"), NULL);
    if (!t)
        return -1;
    t[strcspn(t, "\n")] = 0;
    snprintf(pub, 41, "%s", t);
    free(t);
    return strlen(pub) == 40 ? 0 : -1;
}

static int s_keygen(const char *dir, const char *name)
{
    char *argv[] = {(char *)sw_test_bin("shardwire"), "keygen", "--out",
                    (char *)s_cpath(dir, name, ""), NULL};
    char *err = NULL;
    int rc = sw_test_run(argv, 20, NULL, &err);
    if (rc != 0)
        fprintf(stderr, "keygen %s: %s", name, err ? err : "");
    free(err);
    return rc == 0 ? 0 : -1;
}

int sw_test_keys(const char *dir, const char *const *nodes, const char *const *clients)
{
    char *kc[] = {(char *)sw_test_bin("shardwire"), "keygen", "--cluster-key",
                  (char *)s_cpath(dir, "cluster.key", ""), NULL};
    char *ka[] = {(char *)sw_test_bin("shardwire"), "keygen", "--access-key",
                  (char *)s_cpath(dir, "access.key", ""), NULL};
    if (s_keygen(dir, "relay") != 0 || sw_test_run(kc, 20, NULL, NULL) != 0 ||
        sw_test_run(ka, 20, NULL, NULL) != 0)
        return -1;
    FILE *f = fopen(s_cpath(dir, "allow.txt", ""), "w");
    if (!f)
        return -1;
    fprintf(f, "# test allow-list (docs/security.md)\n");
    int rc = 0;
    for (int pass = 0; pass < 2 && rc == 0; pass++) {
        const char *const *list = pass == 0 ? nodes : clients;
        for (int i = 0; list && list[i] && rc == 0; i++) {
            /* "head:NAME" / "stage:NAME": a node key bound to its role too */
            const char *colon = pass == 0 ? strchr(list[i], ':') : NULL;
            const char *name = colon ? colon + 1 : list[i];
            char pub[41];
            rc = s_keygen(dir, name) != 0 || s_pub(dir, name, pub) != 0 ? -1 : 0;
            if (rc == 0 && pass == 0)
                fprintf(f, "%s %.*s %s\n", pub, colon ? (int)(colon - list[i]) : 4,
                        colon ? list[i] : "node", name);
            else if (rc == 0)
                fprintf(f, "%s client\n", pub);
        }
    }
    fclose(f);
    return rc;
}

pid_t sw_test_node(const char *endpoint, const char *dir, const char *name, const char *layers,
                   const char *log, const char *const *extra)
{
    char *argv[64];
    int n = 0;
    argv[n++] = (char *)sw_test_bin("shardwire-node");
    argv[n++] = "--model";
    argv[n++] = (char *)sw_test_model();
    argv[n++] = "--layers";
    argv[n++] = (char *)layers;
    argv[n++] = "--relay";
    argv[n++] = (char *)endpoint;
    argv[n++] = "--name";
    argv[n++] = (char *)name;
    argv[n++] = "--threads";
    argv[n++] = "1";
    argv[n++] = "--key";
    argv[n++] = (char *)s_cpath(dir, name, ".key");
    argv[n++] = "--relay-key";
    argv[n++] = (char *)s_cpath(dir, "relay", ".pub");
    argv[n++] = "--cluster-key";
    argv[n++] = (char *)s_cpath(dir, "cluster.key", "");
    if (!strncmp(layers, "0:", 2)) { /* a head talks to clients */
        argv[n++] = "--access-key";
        argv[n++] = (char *)s_cpath(dir, "access.key", "");
    }
    for (int i = 0; extra && extra[i] && n < 63; i++)
        argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    return sw_test_spawn(argv, log);
}

pid_t sw_test_relay(const char *endpoint, const char *dir, const char *log,
                    const char *const *extra)
{
    char *argv[32];
    int n = 0;
    argv[n++] = (char *)sw_test_bin("shardwire-relay");
    argv[n++] = "--listen";
    argv[n++] = (char *)endpoint;
    argv[n++] = "--key";
    argv[n++] = (char *)s_cpath(dir, "relay", ".key");
    argv[n++] = "--allow";
    argv[n++] = (char *)s_cpath(dir, "allow.txt", "");
    for (int i = 0; extra && extra[i] && n < 31; i++)
        argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    return sw_test_spawn(argv, log);
}

void sw_test_client_env(const char *dir, const char *who)
{
    setenv("SW_KEY", s_cpath(dir, who, ".key"), 1);
    setenv("SW_RELAY_KEY", s_cpath(dir, "relay", ".pub"), 1);
    setenv("SW_ACCESS_KEY", s_cpath(dir, "access.key", ""), 1);
    unsetenv("SW_CLUSTER_KEY");
}

int sw_test_keyed_chain(char *dir, char *ep, const char *log, pid_t pids[4])
{
    snprintf(dir, 256, "%.250s", sw_test_tmpdir());
    snprintf(ep, 64, "tcp://127.0.0.1:%d", sw_test_free_port());
    const char *nodes[] = {"head", "mid", "mid2", "tail", NULL};
    const char *clients[] = {"client", NULL};
    if (sw_test_keys(dir, nodes, clients) != 0)
        return -1;
    pids[0] = sw_test_relay(ep, dir, log, NULL);
    pids[1] = sw_test_node(ep, dir, "tail", "20:30", log, NULL);
    pids[2] = sw_test_node(ep, dir, "mid", "10:20", log, NULL);
    pids[3] = sw_test_node(ep, dir, "head", "0:10", log, NULL);
    sw_test_client_env(dir, "client");
    return sw_test_wait_peers(ep, 3, 90);
}

int sw_test_sh(const char *cmd, int timeout_s, char **out)
{
    char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
    char *err = NULL;
    int rc = sw_test_run(argv, timeout_s, out, &err);
    if (rc != 0)
        fprintf(stderr, "`%s` exited %d:\n%s\n", cmd, rc, err ? err : "");
    free(err);
    return rc;
}

pid_t sw_test_run_bg(const char *ep, const char *head, const char *prompt, int n_gen, int timeout_s,
                     const char *tag)
{
    char n[16], t[16], out[256], err[300];
    snprintf(n, sizeof n, "%d", n_gen);
    snprintf(t, sizeof t, "%d", timeout_s);
    snprintf(out, sizeof out, "%s", sw_test_log(tag));
    snprintf(err, sizeof err, "%s.err", out);
    char *argv[] = {(char *)sw_test_bin("shardwire"),
                    "run",
                    "--greedy",
                    "--relay",
                    (char *)ep,
                    "--head",
                    (char *)head,
                    "-p",
                    (char *)prompt,
                    "-n",
                    n,
                    "--json",
                    "--timeout-s",
                    t,
                    NULL};
    return sw_test_spawn_io(argv, out, err);
}

int sw_test_run_exact(pid_t pid, const char *tag, const int32_t *ref, int n, int timeout_s)
{
    int rc = sw_test_wait(pid, timeout_s);
    char *out = sw_test_read_file(sw_test_log(tag), NULL);
    int32_t *got = malloc(sizeof(int32_t) * (size_t)(n + 8));
    int k = out && got ? sw_test_json_tokens(out, got, n + 8) : -1;
    int ok = rc == 0 && k == n && !memcmp(got, ref, sizeof(int32_t) * (size_t)n);
    if (!ok) {
        char path[300];
        snprintf(path, sizeof path, "%s.err", sw_test_log(tag));
        char *err = sw_test_read_file(path, NULL);
        fprintf(stderr, "run %s: exit %d, %d tokens: %.2000s\n", tag, rc, k, err ? err : "");
        free(err);
    }
    free(got);
    free(out);
    return ok;
}

pid_t sw_test_hub(const char *dir, char *endpoint, size_t len)
{
    char script[512], config[512], port_file[512], log[512], err[512], home[512];
    snprintf(script, sizeof script, "%s/tests/hub_standin.py", sw_test_env("SW_SOURCE_DIR"));
    snprintf(config, sizeof config, "%s/hub.json", dir);
    snprintf(port_file, sizeof port_file, "%s/hub.port", dir);
    snprintf(log, sizeof log, "%s/hub.log", dir);
    snprintf(err, sizeof err, "%s/hub.stderr", dir);
    snprintf(home, sizeof home, "%s/hfhome", dir);
    char *argv[] = {"/usr/bin/env", "python3", script,  "--config", config,
                    "--port-file",  port_file, "--log", log,        NULL};
    pid_t hub = sw_test_spawn(argv, err);
    for (int i = 0; i < 300 && access(port_file, R_OK) != 0; i++)
        usleep(100000);
    char *port = sw_test_read_file(port_file, NULL);
    if (!port) {
        sw_test_kill(hub);
        sw_test_skip("the hub stand-in (python3) did not start");
    }
    snprintf(endpoint, len, "http://127.0.0.1:%s", port);
    free(port);
    setenv("HF_ENDPOINT", endpoint, 1);
    setenv("HF_HOME", home, 1);
    unsetenv("HF_HUB_CACHE");
    unsetenv("HUGGINGFACE_HUB_CACHE");
    unsetenv("HF_TOKEN");
    unsetenv("HF_TOKEN_PATH");
    unsetenv("HF_HUB_OFFLINE");
    return hub;
}

#if defined(__SANITIZE_ADDRESS__)
#define S_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define S_ASAN 1
#endif
#endif

void sw_test_memory_bounds(void)
{
#ifdef S_ASAN
    const char *cur = getenv("ASAN_OPTIONS");
    char opts[1024];
    snprintf(opts, sizeof opts, "%s%squarantine_size_mb=0:thread_local_quarantine_size_kb=0",
             cur ? cur : "", cur && cur[0] ? ":" : "");
    setenv("ASAN_OPTIONS", opts, 1);
#endif
}
