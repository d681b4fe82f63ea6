/*
 * test_pull.c - `shardwire pull` and `--model hf:...` against a local
 * stand-in of the Hugging Face hub (tests/hub_standin.py: the hub's resolve
 * redirects, X-Repo-Commit, X-Linked-Etag / X-Linked-Size, a CDN on another
 * host name with Range, X-Error-Code), with the real default model.
 *
 *  - the file lands in huggingface_hub's layout (blobs/SHA256, a relative
 *    snapshot symlink, refs/main) under $HF_HOME/hub, or $HF_HUB_CACHE, byte
 *    for byte; a second pull downloads nothing;
 *  - `generate --model hf:ORG/NAME/FILE` gives the tokens of the local path;
 *    HF_HUB_OFFLINE=1 and an unreachable hub use the cache;
 *  - the one .gguf of a repository is chosen; several are listed; a tag
 *    picks one;
 *  - a private repository: refused without a token with a line naming
 *    HF_TOKEN, served with HF_TOKEN or $HF_HOME/token; the token goes to the
 *    hub's host only, never to the CDN;
 *  - a connection cut mid-file is resumed in the same run (Range); an
 *    interrupted pull (SIGINT) is resumed by the next one;
 *  - a corrupted download fails the sha256 check and leaves nothing; a
 *    hostile X-Repo-Commit is refused; two pulls at once download once;
 *  - bad references are usage errors.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sha256.h"
#include "sw_hub.h"
#include "sw_test.h"

#define SMALL (3 << 20) /* bytes of the small stand-in files */

static char s_dir[256];
static char s_endpoint[64];

static const char *s_path(const char *name)
{
    static char buf[8][512];
    static int slot;
    char *p = buf[slot++ & 7];
    snprintf(p, 512, "%s/%s", s_dir, name);
    return p;
}

/* A file of n pseudo-random bytes (a different stream per seed). */
static void s_make_file(const char *path, size_t n, unsigned seed)
{
    FILE *f = fopen(path, "wb");
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; f && i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        fputc((int)(x & 0xff), f);
    }
    if (f)
        fclose(f);
}

static void s_sha_hex(const char *path, char hex[65])
{
    size_t len = 0;
    char *data = sw_test_read_file(path, &len);
    uint8_t h[32];
    sw_sha256(data ? data : "", data ? len : 0, h);
    sw_hex(h, 32, hex);
    free(data);
}

/* `shardwire pull A1 A2` (A2 may be NULL); exit code, stdout (trimmed) and stderr. */
static int s_pull(char **out, char **err, const char *a1, const char *a2)
{
    const char *args[] = {"pull", a1, a2, NULL};
    return swh_cli(out, err, 120, args);
}

/* Lines of the hub's request log containing all of a, b (b may be NULL). */
static int s_log_count(const char *a, const char *b)
{
    char *text = sw_test_read_file(s_path("hub.log"), NULL);
    int n = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n"))
        if (strstr(line, a) && (!b || strstr(line, b)))
            n++;
    free(text);
    return n;
}

static long long s_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

static int s_same_file(const char *a, const char *b)
{
    size_t la = 0, lb = 0;
    char *x = sw_test_read_file(a, &la), *y = sw_test_read_file(b, &lb);
    int same = x && y && la == lb && !memcmp(x, y, la);
    free(x);
    free(y);
    return same;
}

int main(void)
{
    const char *model = sw_test_model();
    snprintf(s_dir, sizeof s_dir, "%s", sw_test_tmpdir());
    s_make_file(s_path("a.bin"), SMALL, 1);
    s_make_file(s_path("b.bin"), SMALL / 2, 2);
    s_make_file(s_path("big.bin"), 4 * SMALL, 3);
    FILE *cf = fopen(s_path("hub.json"), "w");
    if (!cf)
        sw_test_skip("cannot write the hub configuration");
    fprintf(
        cf,
        "{\"repos\": {\n"
        " \"test-org/smol\": {\"files\": {\"smollm2-q4_1.gguf\": \"%s\", \"README.md\": "
        "{\"text\": \"hello\\n\"}}},\n"
        " \"test-org/two\": {\"files\": {\"two.Q4_K_M.gguf\": \"%s\", \"two.Q8_0.gguf\": "
        "\"%s\"}},\n"
        " \"test-org/private\": {\"files\": {\"p.gguf\": \"%s\"}, \"token\": \"sekrit\"},\n"
        " \"test-org/flaky\": {\"files\": {\"flaky.gguf\": \"%s\"}, \"cut_after\": 3000000},\n"
        " \"test-org/stall\": {\"files\": {\"stall.gguf\": \"%s\"}, \"stall_after\": 2000000},\n"
        " \"test-org/corrupt\": {\"files\": {\"c.gguf\": \"%s\"}, \"corrupt\": true},\n"
        " \"test-org/evil\": {\"files\": {\"e.gguf\": \"%s\"}, \"bad_commit\": "
        "\"../../../../evil\"},\n"
        " \"old-org/renamed\": {\"redirect_to\": \"test-org/smol\"}\n"
        "}}\n",
        model, s_path("a.bin"), s_path("b.bin"), s_path("a.bin"), s_path("big.bin"),
        s_path("big.bin"), s_path("a.bin"), s_path("b.bin"));
    fclose(cf);

    pid_t hub = sw_test_hub(s_dir, s_endpoint, sizeof s_endpoint);

    /* 1. the one .gguf of the repository, into $HF_HOME/hub */
    char model_sha[65];
    s_sha_hex(model, model_sha);
    char *out = NULL, *err = NULL;
    SW_CHECK_INT(s_pull(&out, &err, "test-org/smol", NULL), 0);
    char repo_dir[600], want[900], blob[900], link[900];
    snprintf(repo_dir, sizeof repo_dir, "%s/hub/models--test-org--smol", s_path("hfhome"));
    char commit[64] = "";
    {
        char refp[700];
        snprintf(refp, sizeof refp, "%s/refs/main", repo_dir);
        char *c = sw_test_read_file(refp, NULL);
        snprintf(commit, sizeof commit, "%s", c ? c : "");
        free(c);
    }
    SW_CHECK_INT(strlen(commit), 40);
    snprintf(want, sizeof want, "%s/snapshots/%s/smollm2-q4_1.gguf", repo_dir, commit);
    snprintf(blob, sizeof blob, "%s/blobs/%s", repo_dir, model_sha);
    SW_CHECK(out && !strcmp(out, want));
    ssize_t ln = readlink(want, link, sizeof link - 1);
    link[ln > 0 ? ln : 0] = 0;
    SW_CHECK(!strncmp(link, "../../blobs/", 12) && !strcmp(link + 12, model_sha));
    SW_CHECK(s_same_file(blob, model));
    SW_CHECK_INT(s_log_count("\"GET\", \"path\": \"/cdn/test-org/smol/", NULL), 1);
    free(out);
    free(err);

    /* 2. again, named: nothing is downloaded */
    SW_CHECK_INT(s_pull(&out, NULL, "test-org/smol:smollm2-q4_1.gguf", NULL), 0);
    SW_CHECK(out && !strcmp(out, want));
    SW_CHECK_INT(s_log_count("\"GET\", \"path\": \"/cdn/test-org/smol/", NULL), 1);
    free(out);

    /* 3. HF_HUB_CACHE wins over HF_HOME; a small (non-LFS) file and a renamed repo */
    setenv("HF_HUB_CACHE", s_path("cache2"), 1);
    SW_CHECK_INT(s_pull(&out, NULL, "test-org/smol:README.md", NULL), 0);
    SW_CHECK(out && !strncmp(out, s_path("cache2/models--test-org--smol/snapshots/"),
                             strlen(s_path("cache2/models--test-org--smol/snapshots/"))));
    {
        char *t = out ? sw_test_read_file(out, NULL) : NULL;
        SW_CHECK(t && !strcmp(t, "hello\n"));
        free(t);
    }
    free(out);
    SW_CHECK_INT(s_pull(&out, NULL, "old-org/renamed:README.md", NULL), 0);
    SW_CHECK(out && strstr(out, "cache2/models--old-org--renamed/snapshots/"));
    free(out);
    unsetenv("HF_HUB_CACHE");

    /* 4. --model hf:... gives the same tokens as the path */
    int32_t ref[32], got[32];
    const char *prompt = "The capital of France is";
    int n_ref = sw_test_generate(model, prompt, 8, ref, 32);
    int n_got = sw_test_generate("hf:test-org/smol/smollm2-q4_1.gguf", prompt, 8, got, 32);
    SW_CHECK_INT(n_ref, 8);
    SW_CHECK(n_got == n_ref && !memcmp(ref, got, sizeof ref[0] * 8));

    /* 5. offline, and an unreachable hub: the cache */
    setenv("HF_ENDPOINT", "http://127.0.0.1:9", 1);
    SW_CHECK_INT(s_pull(&out, &err, "test-org/smol", NULL), 0);
    SW_CHECK(out && !strcmp(out, want));
    SW_CHECK(err && strstr(err, "using the cached copy"));
    free(out);
    free(err);
    SW_CHECK_INT(s_pull(NULL, &err, "test-org/two", NULL), 1);
    SW_CHECK(err && strstr(err, "cannot reach the hub"));
    free(err);
    setenv("HF_HUB_OFFLINE", "1", 1);
    n_got = sw_test_generate("hf:test-org/smol/smollm2-q4_1.gguf", prompt, 8, got, 32);
    SW_CHECK(n_got == n_ref && !memcmp(ref, got, sizeof ref[0] * 8));
    SW_CHECK_INT(s_pull(NULL, &err, "test-org/two", NULL), 1);
    SW_CHECK(err && strstr(err, "HF_HUB_OFFLINE"));
    free(err);
    unsetenv("HF_HUB_OFFLINE");
    setenv("HF_ENDPOINT", s_endpoint, 1);

    /* 6. several .gguf files: listed; a tag picks one */
    SW_CHECK_INT(s_pull(NULL, &err, "test-org/two", NULL), 1);
    SW_CHECK(err && strstr(err, "two.Q4_K_M.gguf") && strstr(err, "two.Q8_0.gguf"));
    free(err);
    SW_CHECK_INT(s_pull(&out, NULL, "test-org/two:q8_0", NULL), 0);
    SW_CHECK(out && s_same_file(out, s_path("b.bin")));
    free(out);

    /* 7. a private repository and the token */
    SW_CHECK_INT(s_pull(NULL, &err, "test-org/private:p.gguf", NULL), 1);
    SW_CHECK(err && strstr(err, "HF_TOKEN"));
    free(err);
    setenv("HF_TOKEN", "sekrit", 1);
    SW_CHECK_INT(s_pull(&out, NULL, "test-org/private:p.gguf", NULL), 0);
    SW_CHECK(out && s_same_file(out, s_path("a.bin")));
    free(out);
    unsetenv("HF_TOKEN");
    SW_CHECK(s_log_count("/test-org/private/resolve/", "Bearer sekrit") >= 1);
    SW_CHECK_INT(s_log_count("/cdn/test-org/private/", "sekrit"), 0);
    SW_CHECK(s_log_count("/cdn/test-org/private/", "\"auth\": null") >= 1);
    {
        FILE *tf = fopen(s_path("hfhome/token"), "w");
        if (tf) {
            fputs("sekrit\n", tf);
            fclose(tf);
        }
        setenv("HF_HUB_CACHE", s_path("cache3"), 1);
        SW_CHECK_INT(s_pull(&out, NULL, "test-org/private:p.gguf", NULL), 0);
        SW_CHECK(out && s_same_file(out, s_path("a.bin")));
        free(out);
        unsetenv("HF_HUB_CACHE");
        unlink(s_path("hfhome/token"));
    }

    /* 8. a connection cut mid-file: resumed in the same run */
    SW_CHECK_INT(s_pull(&out, &err, "test-org/flaky:flaky.gguf", NULL), 0);
    SW_CHECK(out && s_same_file(out, s_path("big.bin")));
    SW_CHECK(err && strstr(err, "resuming in"));
    SW_CHECK_INT(s_log_count("/cdn/test-org/flaky/", "\"range\": \"bytes=3000000-\""), 1);
    free(out);
    free(err);

    /* 9. interrupted (SIGINT while the server stalls), resumed by the next pull */
    {
        char *pa[] = {(char *)sw_test_bin("shardwire"), "pull", "test-org/stall", NULL};
        pid_t p = sw_test_spawn_io(pa, s_path("stall.out"), s_path("stall.err"));
        char part[900];
        char stall_sha[65];
        s_sha_hex(s_path("big.bin"), stall_sha);
        snprintf(part, sizeof part, "%s/hub/models--test-org--stall/blobs/%s.incomplete",
                 s_path("hfhome"), stall_sha);
        /* stdio may still hold the last few kB when the server stalls */
        for (int i = 0; i < 300 && s_size(part) < 1900000; i++)
            usleep(100000);
        usleep(300000);
        SW_CHECK(s_size(part) >= 1900000);
        kill(p, SIGINT);
        SW_CHECK_INT(sw_test_wait(p, 20), 130);
        SW_CHECK(sw_test_count_in_file(s_path("stall.err"), "run again to resume") == 1);
        SW_CHECK_INT(s_size(part), 2000000);
        SW_CHECK_INT(s_pull(&out, &err, "test-org/stall", NULL), 0);
        SW_CHECK(out && s_same_file(out, s_path("big.bin")));
        SW_CHECK(err && strstr(err, "resuming at 2.0 MB"));
        SW_CHECK_INT(s_log_count("/cdn/test-org/stall/", "\"range\": \"bytes=2000000-\""), 1);
        SW_CHECK_INT(s_size(part), -1);
        free(out);
        free(err);
    }

    /* 10. corrupted on the way: refused, nothing kept */
    {
        SW_CHECK_INT(s_pull(NULL, &err, "test-org/corrupt:c.gguf", NULL), 1);
        SW_CHECK(err && strstr(err, "sha256 mismatch"));
        free(err);
        char a_sha[65], p1[900], p2[920];
        s_sha_hex(s_path("a.bin"), a_sha);
        snprintf(p1, sizeof p1, "%s/hub/models--test-org--corrupt/blobs/%s", s_path("hfhome"),
                 a_sha);
        snprintf(p2, sizeof p2, "%s.incomplete", p1);
        SW_CHECK_INT(s_size(p1), -1);
        SW_CHECK_INT(s_size(p2), -1);
    }

    /* 11. a hostile commit header */
    SW_CHECK_INT(s_pull(NULL, &err, "test-org/evil:e.gguf", NULL), 1);
    SW_CHECK(err && strstr(err, "X-Repo-Commit"));
    free(err);
    SW_CHECK(access(s_path("evil"), F_OK) != 0);

    /* 12. missing things and bad references */
    SW_CHECK_INT(s_pull(NULL, &err, "test-org/smol:nope.gguf", NULL), 1);
    SW_CHECK(err && strstr(err, "has no file 'nope.gguf'"));
    free(err);
    SW_CHECK_INT(s_pull(NULL, &err, "test-org/smol:x.gguf@v9", NULL), 1);
    SW_CHECK(err && strstr(err, "no revision 'v9'"));
    free(err);
    SW_CHECK_INT(s_pull(NULL, NULL, "../etc/passwd", NULL), 2);
    SW_CHECK_INT(s_pull(NULL, NULL, "test-org/smol:../x.gguf", NULL), 2);
    SW_CHECK_INT(s_pull(NULL, NULL, "a/b/c", NULL), 2);
    SW_CHECK_INT(s_pull(NULL, NULL, "test-org/smol", "extra"), 2);
    {
        char *ga[] = {(char *)sw_test_bin("shardwire"),
                      "generate",
                      "--model",
                      "hf:only-org",
                      "-p",
                      "x",
                      NULL};
        char *ge = NULL;
        SW_CHECK_INT(sw_test_run(ga, 30, NULL, &ge), 1);
        SW_CHECK(ge && strstr(ge, "hf:ORG/NAME/FILE"));
        free(ge);
    }

    /* 13. two pulls of one file at once: one download, both get it */
    {
        setenv("HF_HUB_CACHE", s_path("cache4"), 1);
        char *pa[] = {(char *)sw_test_bin("shardwire"), "pull", "test-org/two:Q4_K_M", NULL};
        pid_t p1 = sw_test_spawn_io(pa, s_path("c1.out"), s_path("c1.err"));
        pid_t p2 = sw_test_spawn_io(pa, s_path("c2.out"), s_path("c2.err"));
        SW_CHECK_INT(sw_test_wait(p1, 60), 0);
        SW_CHECK_INT(sw_test_wait(p2, 60), 0);
        char *o1 = sw_test_read_file(s_path("c1.out"), NULL);
        char *o2 = sw_test_read_file(s_path("c2.out"), NULL);
        SW_CHECK(o1 && o2 && !strcmp(o1, o2));
        if (o1) {
            o1[strcspn(o1, "\n")] = 0;
            SW_CHECK(s_same_file(o1, s_path("a.bin")));
        }
        free(o1);
        free(o2);
        SW_CHECK_INT(s_log_count("\"GET\", \"path\": \"/cdn/test-org/two/", NULL), 2);
        unsetenv("HF_HUB_CACHE");
    }

    return swh_done(hub, s_path("hub.stderr"));
}
