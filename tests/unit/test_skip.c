/*
 * test_skip.c - sw_test_skip() (tests/sw_test.c) does not hide a failure:
 * ctest counts exit code 77 as a skip, so a test whose checks failed before
 * it skipped must exit 1. Forked children of this program, recording no skip
 * in the suite's list: not strict, one fails a check and skips (exit 1) and
 * one skips with none failed (77); strict (SW_TEST_STRICT=1), both exit 1.
 */
#include "sw_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* The exit code of a child that fails `fail` checks and then skips, strict or not. */
static int s_child(int fail, int strict)
{
    fflush(stdout);
    fflush(stderr);
    const pid_t p = fork();
    if (p == 0) {
        setenv("SW_TEST_STRICT", strict ? "1" : "0", 1);
        unsetenv("SW_TEST_SKIP_LOG");
        for (int i = 0; i < fail; i++)
            SW_CHECK(!"a check that fails on purpose (in a child; expected)");
        sw_test_skip("a skip on purpose (in a child; expected)");
        _exit(3); /* not reached */
    }
    int st = 0;
    if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

int main(void)
{
    SW_CHECK_INT(s_child(1, 0), 1);
    SW_CHECK_INT(s_child(0, 0), 77);
    SW_CHECK_INT(s_child(1, 1), 1);
    SW_CHECK_INT(s_child(0, 1), 1);
    return sw_test_done();
}
