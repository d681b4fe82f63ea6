/*
 * sw_test.h - the tiny harness every test executable uses. A test is a
 * main() that calls SW_CHECK* and returns sw_test_done(). Tests that need a
 * resource that is absent (the model, the shared vocab data) call
 * sw_test_skip(), which exits 77 (CTest's SKIP_RETURN_CODE).
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
/* Prints why and exits 77 so that CTest reports the test as skipped. */
void sw_test_skip(const char *why) __attribute__((noreturn));
/* The default model path (SW_TEST_MODEL); skips the test when the file is absent. */
const char *sw_test_model(void);
/* An environment variable, or skip when it is unset or empty. */
const char *sw_test_env(const char *name);
/* Reads a whole file into a malloc'd buffer (NUL-terminated); NULL on error. Caller frees. */
char *sw_test_read_file(const char *path, size_t *len);
/* Path of a fresh temporary directory (removed by the caller if it cares). */
const char *sw_test_tmpdir(void);

#endif
