/*
 * test_reload.c - the relay's allow-list reload (docs/security.md section 4),
 * with real keys, a real relay and two real nodes:
 *
 *  - a file that fails to parse is not applied: the relay logs one error,
 *    keeps the keys it had, and both nodes stay in its table; a file moved
 *    away likewise, with one error line (not one per second) and one line
 *    when it is back;
 *  - SIGHUP re-reads the file at once: a change written in place with the
 *    file's old size, inode and modification time (so that the once-a-second
 *    check cannot see it) takes effect only at the signal;
 *  - a change of a key's name (tail's line now names "tai2") drops the peer
 *    that announced the old name, and a change of its role (tail's key now a
 *    client key) drops it again, like a revoked key; the other node stays.
 *    A node refused this way ends with an error (it does not redial).
 */
#include "keys.h"
#include "sw_fault.h"
#include "sw_test.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char s_dir[256], s_ep[64], s_allow[300];

/* Waits until the peer name is in (want 1) or out of (want 0) the relay's table. */
static int s_wait_peer(const char *name, int want, int timeout_s)
{
    for (int i = 0; i < timeout_s * 10; i++) {
        if (swf_peer(s_ep, name, NULL, NULL) == want)
            return 0;
        usleep(100000);
    }
    return -1;
}

/* Overwrites the allow-list in place with text of its old length, then puts
 * its old modification time back: only a SIGHUP makes the relay read it. */
static int s_write_unseen(const char *text)
{
    struct stat st;
    if (stat(s_allow, &st) != 0 || (size_t)st.st_size != strlen(text))
        return -1;
    int fd = open(s_allow, O_WRONLY);
    if (fd < 0)
        return -1;
    ssize_t w = pwrite(fd, text, strlen(text), 0);
    struct timespec ts[2] = {st.st_atim, st.st_mtim};
    int rc = w == (ssize_t)strlen(text) && futimens(fd, ts) == 0 ? 0 : -1;
    close(fd);
    return rc;
}

/* Replaces the allow-list the documented way: a new file, then mv. */
static void s_replace(const char *text)
{
    char tmp[320];
    snprintf(tmp, sizeof tmp, "%s.new", s_allow);
    FILE *f = fopen(tmp, "w");
    SW_CHECK(f != NULL);
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
    SW_CHECK(rename(tmp, s_allow) == 0);
}

int main(void)
{
    char e[256];
    if (sw_keys_curve_check(e, sizeof e) != 0)
        sw_test_skip(e);
    signal(SIGPIPE, SIG_IGN);
    snprintf(s_dir, sizeof s_dir, "%s", sw_test_tmpdir());
    snprintf(s_ep, sizeof s_ep, "tcp://127.0.0.1:%d", sw_test_free_port());
    snprintf(s_allow, sizeof s_allow, "%s/allow.txt", s_dir);
    const char *nodes[] = {"head", "tail", NULL};
    const char *clients[] = {"client", NULL};
    SW_CHECK_INT(sw_test_keys(s_dir, nodes, clients), 0);
    char *orig = sw_test_read_file(s_allow, NULL);
    SW_CHECK(orig && strstr(orig, " node tail\n"));
    if (!orig || !strstr(orig, " node tail\n"))
        return sw_test_done();

    const char *log = sw_test_log("relay.log"), *nlog = sw_test_log("nodes.log");
    pid_t relay = sw_test_relay(s_ep, s_dir, log, NULL);
    pid_t head = sw_test_node(s_ep, s_dir, "head", "0:15", nlog, NULL);
    pid_t tail = sw_test_node(s_ep, s_dir, "tail", "15:30", nlog, NULL);
    sw_test_client_env(s_dir, "client");
    SW_CHECK_INT(sw_test_wait_peers(s_ep, 2, 60), 0);

    /* 1. a broken file is not applied */
    int errs0 = sw_test_count_in_file(log, "keeping the");
    char *broken = malloc(strlen(orig) + 64);
    sprintf(broken, "%snot-a-key node mallory\n", orig);
    s_replace(broken);
    free(broken);
    SW_CHECK_INT(sw_test_wait_text(log, "keeping the 3 keys loaded before", 10), 1);
    SW_CHECK_INT(sw_test_count_in_file(log, "keeping the"), errs0 + 1);
    usleep(1500000); /* the next checks see the same (broken) file: no more lines */
    SW_CHECK_INT(sw_test_count_in_file(log, "keeping the"), errs0 + 1);
    SW_CHECK_INT(swf_peer(s_ep, "head", NULL, NULL), 1);
    SW_CHECK_INT(swf_peer(s_ep, "tail", NULL, NULL), 1);
    s_replace(orig); /* good again (a reload that changes nothing) */
    SW_CHECK_INT(sw_test_wait_text(log, "(reloaded)", 10), 1);
    SW_CHECK_INT(swf_peer(s_ep, "tail", NULL, NULL), 1);

    /* 1b. the file gone (moved away): one error line, not one a second, and the keys stay */
    char away[320];
    snprintf(away, sizeof away, "%s.away", s_allow);
    SW_CHECK(rename(s_allow, away) == 0);
    SW_CHECK_INT(sw_test_wait_text(log, "No such file or directory (keeping the 3 keys", 10), 1);
    sleep(3); /* three of the relay's file checks */
    SW_CHECK_INT(sw_test_count_in_file(log, "No such file or directory (keeping the 3 keys"), 1);
    SW_CHECK_INT(swf_peer(s_ep, "tail", NULL, NULL), 1);
    SW_CHECK(rename(away, s_allow) == 0);
    SW_CHECK_INT(sw_test_wait_text(log, "allow.txt is back", 10), 1);

    /* 2. a rename written unseen: nothing happens until SIGHUP */
    char *renamed = strdup(orig);
    memcpy(strstr(renamed, " node tail\n"), " node tai2\n", 11);
    int reloads0 = sw_test_count_in_file(log, "(reloaded)");
    SW_CHECK_INT(s_write_unseen(renamed), 0);
    sleep(3); /* three of the relay's file checks */
    SW_CHECK_INT(sw_test_count_in_file(log, "(reloaded)"), reloads0);
    SW_CHECK_INT(swf_peer(s_ep, "tail", NULL, NULL), 1);
    double t0 = swf_now_ms();
    kill(relay, SIGHUP);
    SW_CHECK_INT(s_wait_peer("tail", 0, 5), 0);
    printf("SIGHUP: tail (renamed to tai2 in the allow-list) dropped %.2f s after the signal\n",
           (swf_now_ms() - t0) / 1e3);
    SW_CHECK(sw_test_count_in_file(log, "(reloaded)") > reloads0);
    SW_CHECK(sw_test_count_in_file(log, "key of tail revoked or changed") >= 1);
    SW_CHECK_INT(swf_peer(s_ep, "head", NULL, NULL), 1);
    free(renamed);

    /* 3. tail's key back as a node, then made a client key: out again, head stays */
    int reloads1 = sw_test_count_in_file(log, "(reloaded)");
    s_replace(orig);
    for (int i = 0; i < 100 && sw_test_count_in_file(log, "(reloaded)") == reloads1; i++)
        usleep(100000);
    SW_CHECK(sw_test_count_in_file(log, "(reloaded)") > reloads1);
    int rc = sw_test_wait(tail, 10); /* the refused node ended with an error */
    SW_CHECK(rc > 0 && rc < 128);
    tail = sw_test_node(s_ep, s_dir, "tail", "15:30", nlog, NULL);
    SW_CHECK_INT(s_wait_peer("tail", 1, 60), 0);
    char *role = malloc(strlen(orig) + 8);
    strcpy(role, orig);
    char *line = strstr(role, " node tail\n");
    strcpy(line, " client\n");
    strcat(role, strstr(orig, " node tail\n") + 11);
    s_replace(role);
    free(role);
    SW_CHECK_INT(s_wait_peer("tail", 0, 10), 0);
    sleep(2); /* it stays out: its key may announce only as a client now */
    SW_CHECK_INT(swf_peer(s_ep, "tail", NULL, NULL), 0);
    SW_CHECK_INT(swf_peer(s_ep, "head", NULL, NULL), 1);

    free(orig);
    sw_test_kill(tail);
    sw_test_kill(head);
    sw_test_kill(relay);
    return sw_test_done();
}
