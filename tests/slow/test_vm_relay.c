/*
 * test_vm_relay.c - the relay on a small VM (label slow, about 3 minutes):
 *
 *  1. scripts/deploy/vm_check.sh: `systemd-analyze verify` passes on
 *     deploy/vm/shardwire-relay.service, its exposure (systemd-analyze
 *     security) is at most 2.0, cloud-init's schema check passes on
 *     deploy/vm/cloud-init.yaml and nft accepts deploy/vm/relay.nft;
 *  1b. scripts/deploy/vm_systemd.sh: the unit under a real systemd (PID 1 of a podman
 *     container set up as cloud-init sets up the VM): the relay starts from
 *     it as the shardwire user with its hardening in force (no capabilities,
 *     NoNewPrivs, seccomp, / read-only, private /tmp, no /home), answers a
 *     head and a tail (a client generates), is restarted by systemd after
 *     SIGKILL (same tokens after), re-reads the allow-list on `systemctl
 *     reload` (SIGHUP) and lets in a client key added the documented way, and
 *     relay.nft loads with nft in the VM's namespace and holds one address
 *     to 16 connections;
 *  2. the relay's footprint for a 2-node cluster under generation load, the
 *     numbers docs/deploy.md states: a real relay with CURVE keys, a head and a
 *     tail of SmolLM2 on loopback, two `shardwire run` clients generating back
 *     to back for LOAD_S seconds; the relay's resident memory (VmRSS, and the
 *     peak VmHWM) from /proc/PID/status and its CPU time (utime + stime) from
 *     /proc/PID/stat. Checks: the peak stays under 64 MiB (a 1 GB VM keeps
 *     more than 900 MB for the system) and the relay uses under half a core.
 */
#include "sw_test.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LOAD_S 40
#define N_GEN 64

static double s_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* /proc/PID/NAME into buf (files of /proc have no size to read by). */
static const char *s_proc(pid_t pid, const char *name, char *buf, size_t cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = 0;
    return n ? buf : NULL;
}

/* VmRSS or VmHWM of pid in kB (-1 when unreadable). */
static long s_status_kb(pid_t pid, const char *field)
{
    char buf[4096];
    const char *t = s_proc(pid, "status", buf, sizeof buf);
    const char *p = t ? strstr(t, field) : NULL;
    return p ? strtol(p + strlen(field), NULL, 10) : -1;
}

/* utime + stime of pid in seconds (-1 when unreadable). */
static double s_cpu_s(pid_t pid)
{
    char buf[1024];
    const char *t = s_proc(pid, "stat", buf, sizeof buf);
    const char *p = t ? strrchr(t, ')') : NULL; /* the name may hold spaces */
    unsigned long long ut = 0, st = 0;
    /* after ") ": state(3) ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
     * utime(14) stime(15) */
    int ok =
        p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2;
    return ok ? (double)(ut + st) / (double)sysconf(_SC_CLK_TCK) : -1;
}

int main(void)
{
    (void)sw_test_model(); /* the nodes hold it; skips when it is absent */
    signal(SIGPIPE, SIG_IGN);

    /* 1. the unit, cloud-init and firewall files, with the real tools. */
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "bash %s/scripts/deploy/vm_check.sh %s", sw_test_env("SW_SOURCE_DIR"),
             sw_test_env("SW_BIN_DIR"));
    char *argv_c[] = {"/bin/sh", "-c", cmd, NULL};
    char *out = NULL, *err = NULL;
    int rc = sw_test_run(argv_c, 600, &out, &err);
    SW_CHECK_INT(rc, 0);
    if (rc != 0)
        fprintf(stderr, "%s\n%s\n", out ? out : "", err ? err : "");
    SW_CHECK(out && strstr(out, "systemd-analyze verify shardwire-relay.service: ok"));
    SW_CHECK(out && strstr(out, "Overall exposure level"));
    SW_CHECK(out && strstr(out, "Valid cloud-config"));
    SW_CHECK(out && strstr(out, "nft -c relay.nft: ok"));
    if (out)
        fputs(out, stdout);
    free(out);
    free(err);

    /* 1b. the unit under a real systemd. */
    snprintf(cmd, sizeof cmd, "bash %s/scripts/deploy/vm_systemd.sh %s %s",
             sw_test_env("SW_SOURCE_DIR"), sw_test_env("SW_BIN_DIR"), sw_test_model());
    out = err = NULL;
    rc = sw_test_run(argv_c, 900, &out, &err);
    SW_CHECK_INT(rc, 0);
    if (rc != 0)
        fprintf(stderr, "%s\n%s\n", out ? out : "", err ? err : "");
    static const char *const lines[] = {
        "vm_systemd: systemd booted as PID 1",
        "vm_systemd: the relay started from the unit",
        "vm_systemd: hardening in force: uid",
        "vm_systemd: the relay answers nodes: head and tail joined, a client generated "
        "\"tokens\":[",
        "vm_systemd: SIGKILL: systemd restarted it (NRestarts 1",
        "vm_systemd: SIGHUP (systemctl reload): the unchanged allow-list was re-read",
        "vm_systemd: a client key added to allow.txt (new file, mv, reload) is let in: ok",
        "vm_systemd: relay.nft loaded with nft in the VM; 16 of 24 connections",
        "vm_systemd: all checks passed",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        int seen = out && strstr(out, lines[i]);
        if (!seen)
            fprintf(stderr, "missing: %s\n", lines[i]);
        SW_CHECK(seen);
    }
    if (out)
        fputs(out, stdout);
    free(out);
    free(err);

    /* 2. a keyed 2-node cluster on loopback, and the relay's footprint under load. */
    const char *dir = sw_test_tmpdir();
    const char *const nodes[] = {"head", "tail", NULL}, *const clients[] = {"client", NULL};
    SW_CHECK_INT(sw_test_keys(dir, nodes, clients), 0);
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", sw_test_free_port());
    pid_t relay = sw_test_relay(ep, dir, sw_test_log("relay.log"), NULL);
    SW_CHECK(relay > 0);
    SW_CHECK_INT(sw_test_wait_listen(ep, 10), 0);
    long rss_start = s_status_kb(relay, "VmRSS:");
    pid_t head = sw_test_node(ep, dir, "head", "0:15", sw_test_log("head.log"), NULL);
    pid_t tail = sw_test_node(ep, dir, "tail", "15:30", sw_test_log("tail.log"), NULL);
    sw_test_client_env(dir, "client");
    SW_CHECK_INT(sw_test_wait_peers(ep, 2, 60), 0);
    usleep(500000);
    long rss_idle = s_status_kb(relay, "VmRSS:");

    double t0 = s_now(), cpu0 = s_cpu_s(relay);
    long rss_max = rss_idle, tokens = 0;
    int runs = 0, failed = 0;
    while (s_now() - t0 < LOAD_S) {
        pid_t cl[2];
        char n[16];
        snprintf(n, sizeof n, "%d", N_GEN);
        for (int i = 0; i < 2; i++) {
            char *argv[] = {(char *)sw_test_bin("shardwire"),
                            "run",
                            "--relay",
                            ep,
                            "-p",
                            i ? "The capital of France is" : "Once upon a time,",
                            "-n",
                            n,
                            "--json",
                            NULL};
            cl[i] = sw_test_spawn_io(argv, sw_test_log(i ? "run1.json" : "run0.json"),
                                     sw_test_log("run.err"));
        }
        for (int i = 0; i < 2; i++) {
            int code = -1, st = 0;
            for (int w = 0; w < 1200 && code < 0; w++) {
                long kb = s_status_kb(relay, "VmRSS:");
                if (kb > rss_max)
                    rss_max = kb;
                if (waitpid(cl[i], &st, WNOHANG) == cl[i])
                    code = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
                else
                    usleep(100000);
            }
            if (code < 0) {
                sw_test_kill(cl[i]);
                failed++;
                continue;
            }
            char *j = sw_test_read_file(sw_test_log(i ? "run1.json" : "run0.json"), NULL);
            int32_t ids[N_GEN];
            int got = j ? sw_test_json_tokens(j, ids, N_GEN) : -1;
            free(j);
            if (code != 0 || got <= 0)
                failed++;
            else
                tokens += got;
            runs++;
        }
    }
    double wall = s_now() - t0, cpu = s_cpu_s(relay) - cpu0;
    long hwm = s_status_kb(relay, "VmHWM:");
    SW_CHECK_INT(failed, 0);
    SW_CHECK(runs >= 4);
    SW_CHECK(rss_start > 0 && rss_idle > 0 && hwm > 0 && cpu0 >= 0);
    SW_CHECK(hwm < 64 * 1024);
    SW_CHECK(cpu / wall < 0.5);
    printf("relay footprint (2 nodes, 2 clients back to back, %.0f s): RSS %.1f MiB at start, "
           "%.1f MiB with 2 nodes, peak %.1f MiB (VmHWM %.1f MiB); CPU %.2f s = %.1f%% of one "
           "core; %ld tokens (%d runs), %.0f us relay CPU per token\n",
           wall, rss_start / 1024.0, rss_idle / 1024.0, rss_max / 1024.0, hwm / 1024.0, cpu,
           100.0 * cpu / wall, tokens, runs, tokens ? cpu * 1e6 / (double)tokens : 0.0);
    sw_test_kill(head);
    sw_test_kill(tail);
    sw_test_kill(relay);
    return sw_test_done();
}
