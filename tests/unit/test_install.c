/*
 * test_install.c - `cmake --install BUILD --prefix P` into a temporary
 * prefix: P/bin holds shardwire, shardwire-node, shardwire-relay and
 * shardwire-wanem, each of which runs from there (--version prints the
 * configured version, `shardwire keygen` makes a key pair), and
 * P/share/doc/shardwire holds the README and the docs.
 */
#include "sw_test.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int s_exists(const char *dir, const char *name, int exec)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && (!exec || access(path, X_OK) == 0);
}

int main(void)
{
    const char *cmake = sw_test_env("SW_CMAKE");
    const char *build = sw_test_env("SW_BUILD_DIR");
    const char *version = sw_test_env("SW_VERSION");
    char prefix[256], bin[320], doc[320];
    snprintf(prefix, sizeof prefix, "%s/prefix", sw_test_tmpdir());
    snprintf(bin, sizeof bin, "%s/bin", prefix);
    snprintf(doc, sizeof doc, "%s/share/doc/shardwire", prefix);

    char *argv[] = {(char *)cmake, "--install", (char *)build, "--prefix", prefix, NULL};
    char *out = NULL, *err = NULL;
    int rc = sw_test_run(argv, 120, &out, &err);
    SW_CHECK_INT(rc, 0);
    if (rc != 0)
        fprintf(stderr, "cmake --install: %s%s\n", out ? out : "", err ? err : "");
    free(out);
    free(err);

    static const char *const progs[] = {"shardwire", "shardwire-node", "shardwire-relay",
                                        "shardwire-wanem"};
    for (size_t i = 0; i < sizeof progs / sizeof progs[0]; i++) {
        SW_CHECK(s_exists(bin, progs[i], 1));
        char path[512], want[256];
        snprintf(path, sizeof path, "%s/%s", bin, progs[i]);
        snprintf(want, sizeof want, "%s %s\n", progs[i], version);
        char *va[] = {path, "--version", NULL};
        out = NULL;
        SW_CHECK_INT(sw_test_run(va, 30, &out, NULL), 0);
        SW_CHECK(out && !strcmp(out, want));
        printf("%s", out ? out : "(nothing)\n");
        free(out);
    }
    /* the tools for tests and benchmarks stay in the build tree */
    SW_CHECK(!s_exists(bin, "shardwire-mkmodel", 0));
    SW_CHECK(!s_exists(bin, "shardwire-relay-bench", 0));

    /* the installed client does real work outside the build tree */
    char path[512], keys[512];
    snprintf(path, sizeof path, "%s/shardwire", bin);
    snprintf(keys, sizeof keys, "%s/k", prefix);
    char *ka[] = {path, "keygen", "--out", keys, NULL};
    out = NULL;
    SW_CHECK_INT(sw_test_run(ka, 30, &out, NULL), 0);
    SW_CHECK(out && strlen(out) == 41); /* the Z85 public key and a newline */
    free(out);
    SW_CHECK(s_exists(prefix, "k.key", 0) && s_exists(prefix, "k.pub", 0));

    SW_CHECK(s_exists(doc, "README.md", 0));
    SW_CHECK(s_exists(doc, "deploy.md", 0));
    SW_CHECK(s_exists(doc, "security.md", 0));
    SW_CHECK(s_exists(doc, "api.md", 0));
    return sw_test_done();
}
