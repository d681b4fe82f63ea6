/*
 * sw_test.h - the tiny harness every test executable uses. A test is a
 * main() that calls SW_CHECK* and returns sw_test_done(). Tests that need a
 * resource that is absent (the model, the shared vocab data) call
 * sw_test_skip(), which exits 77 (CTest's SKIP_RETURN_CODE); a test that can
 * run only some of its parts calls sw_test_skip_part() for each part left out.
 *
 * No skip is silent: both append "test: why" to the file $SW_TEST_SKIP_LOG
 * (scripts/test.sh prints that list after every run), and with
 * SW_TEST_STRICT=1 (set by .ci/run) both are failures instead.
 */
#ifndef SW_TEST_H
#define SW_TEST_H

#include <stdint.h>
#include <stdio.h>

extern int sw_test_failures;
extern int sw_test_checks;

#define SW_CHECK(cond)                                                                             \
    do {                                                                                           \
        sw_test_checks++;                                                                          \
        if (!(cond)) {                                                                             \
            sw_test_failures++;                                                                    \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define SW_CHECK_INT(a, b)                                                                         \
    do {                                                                                           \
        long long sw_a_ = (long long)(a), sw_b_ = (long long)(b);                                  \
        sw_test_checks++;                                                                          \
        if (sw_a_ != sw_b_) {                                                                      \
            sw_test_failures++;                                                                    \
            fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", __FILE__, __LINE__, #a,    \
                    sw_a_, #b, sw_b_);                                                             \
        }                                                                                          \
    } while (0)

#define SW_CHECK_NEAR(a, b, tol)                                                                   \
    do {                                                                                           \
        double sw_a_ = (double)(a), sw_b_ = (double)(b);                                           \
        sw_test_checks++;                                                                          \
        if (!(sw_a_ - sw_b_ <= (tol) && sw_b_ - sw_a_ <= (tol))) {                                 \
            sw_test_failures++;                                                                    \
            fprintf(stderr, "%s:%d: %s = %g, expected %g (tol %g)\n", __FILE__, __LINE__, #a,      \
                    sw_a_, sw_b_, (double)(tol));                                                  \
        }                                                                                          \
    } while (0)

/* Prints a summary line and returns the process exit code (0 or 1). */
int sw_test_done(void);
/* Prints and records why, and exits 77 so that CTest reports the test as
 * skipped; under SW_TEST_STRICT=1 it exits 1 (a failure) instead. */
void sw_test_skip(const char *why) __attribute__((noreturn));
/* Records that one part of the test did not run, and why; the test goes on.
 * Under SW_TEST_STRICT=1 the part counts as a failed check. */
void sw_test_skip_part(const char *why);
/* 1 when SW_TEST_STRICT=1 (CI): a skipped test or part is a failure. */
int sw_test_strict(void);
/* The default model path (SW_TEST_MODEL); skips the test when the file is absent. */
const char *sw_test_model(void);
/* An environment variable, or skip when it is unset or empty. */
const char *sw_test_env(const char *name);
/* Reads a whole file into a malloc'd buffer (NUL-terminated); NULL on error. Caller frees. */
char *sw_test_read_file(const char *path, size_t *len);
/* A copy of the SmolLM2 file model at out with its name in the metadata changed ("Smollm2 135M"
 * -> "Xmollm2 135M"): the same weights, another model file (fingerprint). 0 when written. */
int sw_test_renamed_model(const char *model, const char *out);
/* Waits up to timeout_s for needle to appear in the file at path (a log): 1 when it did, else 0. */
int sw_test_wait_text(const char *path, const char *needle, int timeout_s);
/* Path of a fresh temporary directory inside this test's own folder (see
 * sw_test_log): removed with it. Static buffer, overwritten by the next call. */
const char *sw_test_tmpdir(void);
/* Path of the file `name` in this test process's own folder
 * ($TMPDIR, else /tmp, then swtest.XXXXXX, made on first use; static buffer
 * per call slot 0..7).
 * Never a fixed /tmp path: test runs of several checkouts on one machine must
 * not read or unlink each other's logs. sw_test_done() and a skip remove the
 * folder when every check passed, and print where it is otherwise. */
const char *sw_test_log(const char *name);

/* ---- processes (tests that run the real programs) ---- */
#include <sys/types.h>

/* Path of a program in SW_BIN_DIR (static buffer per call slot 0..7). */
const char *sw_test_bin(const char *name);
/* A TCP port on 127.0.0.1 that was free a moment ago. */
int sw_test_free_port(void);
/* Starts argv[0] with stdout+stderr appended to log_path (or /dev/null when
 * NULL), in its own process group. Returns the pid or -1. */
pid_t sw_test_spawn(char *const argv[], const char *log_path);
/* Starts shardwire-wanem relaying listen (HOST:PORT) to up with ms of delay each way, logging
 * to log_path (sw_test_spawn; in the namespace sw_test_netns set). The pid or -1. */
pid_t sw_test_spawn_wanem(const char *listen, const char *up, int ms, const char *log_path);
/* Processes that sw_test_spawn, sw_test_spawn_io and sw_test_run start from now on run in
 * the network namespace `name` (ip netns: /var/run/netns/NAME); NULL or "": the test's own. */
void sw_test_netns(const char *name);
/* Fills argv (SW_TEST_RUN_ARGC entries) with `shardwire run --greedy --relay ep -p prompt -n
 * n_gen --json --timeout-s timeout_s`, NULL-terminated; the strings stay the caller's. */
#define SW_TEST_RUN_ARGC 14
void sw_test_run_argv(char *argv[SW_TEST_RUN_ARGC], const char *ep, const char *prompt,
                      const char *n_gen, const char *timeout_s);
/* Like sw_test_spawn, with stdout to out_path and stderr to err_path (truncated). */
pid_t sw_test_spawn_io(char *const argv[], const char *out_path, const char *err_path);
/* Waits up to timeout_s for pid to exit: its exit code, 128+signal when a
 * signal ended it, or -1 when it was still running (it is then killed). */
int sw_test_wait(pid_t pid, int timeout_s);
/* The "tokens" array of a JSON object in text (generate / run --json) into
 * ids (up to max): the count, or -1 when there is none. */
int sw_test_json_tokens(const char *text, int32_t *ids, int max);
/* The reference: `shardwire generate --greedy --model model -p prompt -n n_gen
 * --threads 1 --json` into ids: the count, or -1 after a line. */
int sw_test_generate(const char *model, const char *prompt, int n_gen, int32_t *ids, int max);
/* `shardwire generate --greedy --json` of prompt, n_gen tokens, one thread, extra flags after
 * (NULL-terminated, up to 10; NULL = none), within timeout_s: its exit code (sw_test_run), its
 * stdout and stderr into *out and *err (the caller frees them; err may be NULL). */
int sw_test_generate_run(const char *model, const char *prompt, int n_gen, const char *const *extra,
                         int timeout_s, char **out, char **err);
/* Occurrences of needle in the file at path (0 when it cannot be read). */
int sw_test_count_in_file(const char *path, const char *needle);
/* Lines of the file at path that hold both a and b (0 when it cannot be read). */
int sw_test_count_lines(const char *path, const char *a, const char *b);
/* Starts `shardwire run --greedy --relay ep --head head -p prompt -n n_gen
 * --json --timeout-s timeout_s` in the background, stdout into
 * sw_test_log(tag) and stderr into that path + ".err" (the caller sets the
 * client's keys in the environment). The pid. */
pid_t sw_test_run_bg(const char *ep, const char *head, const char *prompt, int n_gen, int timeout_s,
                     const char *tag);
/* Waits up to timeout_s for a sw_test_run_bg run: 1 when it exited 0 with
 * exactly ref's n tokens; otherwise prints its stderr and returns 0. */
int sw_test_run_exact(pid_t pid, const char *tag, const int32_t *ref, int n, int timeout_s);
/* SIGTERM, up to 5 s to exit, then SIGKILL; reaps it. Accepts pid <= 0. */
void sw_test_kill(pid_t pid);
/* Runs argv to completion (killed after timeout_s), capturing stdout into
 * *out and stderr into *err (malloc'd, NUL-terminated, may be NULL to
 * discard). Returns the exit code, 128+signal when killed, -1 on failure. */
int sw_test_run(char *const argv[], int timeout_s, char **out, char **err);
/* `/bin/sh -c cmd` through sw_test_run; on failure prints the command, its
 * exit code and its stderr. Returns the exit code. */
int sw_test_sh(const char *cmd, int timeout_s, char **out);
/* Waits until something accepts TCP connections at endpoint ("tcp://host:port",
 * IPv4 or localhost), up to timeout_s: a spawned relay or proxy is listening.
 * 0 when it is, -1 otherwise. */
int sw_test_wait_listen(const char *endpoint, int timeout_s);
/* Waits until `shardwire status --relay endpoint --json` lists n_peers
 * non-client peers (up to timeout_s). 0 when it did, -1 otherwise. */
int sw_test_wait_peers(const char *endpoint, int n_peers, int timeout_s);

/* ---- a keyed cluster (CURVE, allow-list, sealing), made with the real programs ---- */

/*
 * Makes every key of a test cluster in dir with `shardwire keygen`: relay.key /
 * relay.pub, NAME.key / NAME.pub for each name of the NULL-terminated lists
 * nodes and clients, cluster.key (the nodes'), access.key (the clients' and
 * the heads'), and the relay's allow-list dir/allow.txt (docs/security.md:
 * "KEY node NAME" for each node, "KEY ROLE NAME" for a node given as
 * "ROLE:NAME" (ROLE head or stage: bound to its role too), "KEY client" for
 * each client). 0, or -1 after a line on stderr.
 */
int sw_test_keys(const char *dir, const char *const *nodes, const char *const *clients);
/*
 * Starts shardwire-node NAME holding layers (e.g. "0:15") of the test model
 * with the keys sw_test_keys made in dir (the access key too when the layers
 * start at 0), logging to log; extra is a NULL-terminated list of more
 * arguments (or NULL). The pid, or -1.
 */
pid_t sw_test_node(const char *endpoint, const char *dir, const char *name, const char *layers,
                   const char *log, const char *const *extra);
/* Starts shardwire-relay on endpoint with dir's relay key and allow-list (extra as above). */
pid_t sw_test_relay(const char *endpoint, const char *dir, const char *log,
                    const char *const *extra);
/* Points SW_KEY / SW_RELAY_KEY / SW_ACCESS_KEY at client `who`'s keys in dir (and unsets
 * SW_CLUSTER_KEY), for the `shardwire run` / `status` calls of the test (and
 * sw_test_wait_peers). */
void sw_test_client_env(const char *dir, const char *who);
/* A keyed three-stage cluster of the test model on a free loopback port (ep, 64 bytes): keys
 * in a fresh folder (dir, 256 bytes) for head, mid, mid2, tail and client (the client's in the
 * environment), the relay, tail 20:30, mid 10:20 and head 0:10, all logging to log; pids into
 * pids (relay, tail, mid, head). 0 once the three nodes are in the relay's table. */
int sw_test_keyed_chain(char *dir, char *ep, const char *log, pid_t pids[4]);
/* For tests that bound a process's memory: under AddressSanitizer (the CI's sanitizer build)
 * the processes started after this keep no freed memory in ASan's quarantine (256 MiB by
 * default), which would otherwise count as theirs. Nothing without ASan. */
void sw_test_memory_bounds(void);
/* Starts tests/hub_standin.py (the Hugging Face hub stand-in) serving dir/hub.json, logging to
 * dir/hub.log, and points this process's hub environment at it: HF_ENDPOINT (also written to
 * endpoint, len bytes), HF_HOME = dir/hfhome, the cache, token and offline variables unset.
 * Its pid; skips the test when python3 cannot start it. */
pid_t sw_test_hub(const char *dir, char *endpoint, size_t len);

#endif
