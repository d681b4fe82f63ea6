/*
 * sw_test.c - implementation of the test harness in sw_test.h.
 */
#include "sw_test.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int sw_test_failures;
int sw_test_checks;

int sw_test_done(void)
{
    printf("%d checks, %d failed\n", sw_test_checks, sw_test_failures);
    return sw_test_failures ? 1 : 0;
}

void sw_test_skip(const char *why)
{
    printf("SKIP: %s\n", why);
    fflush(stdout);
    exit(77);
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

const char *sw_test_tmpdir(void)
{
    static char dir[64];
    snprintf(dir, sizeof dir, "/tmp/swtest.XXXXXX");
    if (!mkdtemp(dir))
        sw_test_skip("cannot create a temporary directory");
    return dir;
}
