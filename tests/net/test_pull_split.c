/*
 * test_pull_split.c - split GGUF sets from the hub stand-in
 * (tests/hub_standin.py), as the hub's GGUF repositories ship big models:
 * the default model as the 3 parts of the split_models fixture
 * (llama.cpp gguf-split's layout) in a folder of the repository, beside
 * another quantization of its own.
 *
 *  - `shardwire pull REPO:TAG` takes the set as one file (the listing of an
 *    untagged pull names it with its part count), downloads every part
 *    (each checked against the hub's sha256) and prints part 1's path; the
 *    set opens and generates the unsplit file's tokens;
 *  - a pull naming part 2 is the same set (nothing fetched again); offline
 *    too; `--model hf:.../PART-00003-of-00003.gguf` generates from it;
 *  - `--layers A:B` fetches about each part's header and the tensors of the
 *    range across the parts, into one partial file that holds the set's bytes
 *    and announces the set's fingerprint; --layers 0:30 is the whole set;
 *  - a 2-node cluster whose nodes pull their own partial files of the set
 *    (--model hf:... naming a part, --layers) gives `shardwire generate`'s
 *    tokens on the unsplit file;
 *  - a part missing on the hub, a part of another set (same count, other
 *    tensors) and a part of a set of another count: one line each, naming
 *    the part, whole and with --layers.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"
#include "keys.h"
#include "sw_hub.h"
#include "sw_test.h"

#define N_GEN 16

static char s_dir[256]; /* this test's folder: the stand-in's configuration and log */
static char s_endpoint[64];
static const char *s_prompt = "The capital of France is";

static int s_cli(char **out, char **err, const char *const *args)
{
    return swh_cli(out, err, 300, args);
}

static long long s_sent(const char *repo, int from, int *lines)
{
    return swh_sent(sw_test_log("hub.log"), repo, from, lines);
}

/* Bytes a partial pull of [begin, end) from the set must fetch at least: every
 * part's header and the data of the tensors the range needs. */
static long long s_expected(const char *part, int begin, int end)
{
    char err[512];
    sw_gguf_t *g = sw_gguf_open(part, err, sizeof err);
    if (!g)
        return -1;
    long long sum = 0;
    for (int i = 0; i < sw_gguf_part_count(g); i++) {
        uint64_t len;
        sw_gguf_part_header(g, i, &len);
        sum += (long long)len;
    }
    for (int64_t i = 0; i < sw_gguf_tensor_count(g); i++) {
        const sw_gguf_tensor_t *t = sw_gguf_tensor(g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        int blk = -1;
        const int need = sscanf(name, "blk.%d.", &blk) == 1   ? blk >= begin && blk < end
                         : !strcmp(name, "token_embd.weight") ? begin == 0 || end == 30
                                                              : end == 30;
        if (need)
            sum += (long long)t->n_bytes;
    }
    sw_gguf_close(&g);
    return sum;
}

/* 1 when every tensor of the partial file at path holds the set's bytes. */
static int s_same_data(const char *path, const char *set_part)
{
    char err[512];
    sw_gguf_t *p = sw_gguf_open(path, err, sizeof err),
              *s = sw_gguf_open(set_part, err, sizeof err);
    int same = p && s && sw_gguf_tensor_count(p) > 0;
    for (int64_t i = 0; same && i < sw_gguf_tensor_count(p); i++) {
        const sw_gguf_tensor_t *a = sw_gguf_tensor(p, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)a->name.len, a->name.ptr);
        const sw_gguf_tensor_t *b = sw_gguf_find_tensor(s, name);
        const void *d = b ? sw_gguf_tensor_data(s, b, err, sizeof err) : NULL;
        same = d && b->n_bytes == a->n_bytes && !memcmp(a->data, d, (size_t)a->n_bytes);
        if (!same)
            fprintf(stderr, "tensor %s differs from the set's\n", name);
    }
    sw_gguf_close(&p);
    sw_gguf_close(&s);
    return same;
}

/* 1 when err (progress lines, then the error) ends in one error line holding
 * a and b (b may be NULL). */
static int s_line(const char *err, const char *a, const char *b)
{
    const char *line = err ? strstr(err, "shardwire pull: ") : NULL;
    const int ok = line && strchr(line, '\n') == err + strlen(err) - 1 && strstr(line, a) &&
                   (!b || strstr(line, b));
    if (!ok)
        fprintf(stderr, "error: %s", err ? err : "(none)\n");
    return ok;
}

static void s_write_config(const char *fx, const char *whole)
{
    char p[3][600], h2[600], nf3[600];
    for (int i = 0; i < 3; i++)
        snprintf(p[i], sizeof p[i], "%s/smol-%05d-of-00003.gguf", fx, i + 1);
    snprintf(h2, sizeof h2, "%s/smol100-00002-of-00003.gguf", fx);
    snprintf(nf3, sizeof nf3, "%s/smolnf-00003-of-00004.gguf", fx);
    FILE *cf = swh_config(sw_test_log("hub.json"));
    fprintf(cf,
            "{\"repos\": {\n"
            " \"test-org/smol-split\": {\"files\": {\"README.md\": {\"text\": \"a model\"},\n"
            "   \"smol-Q8_0.gguf\": \"%s\",\n"
            "   \"Q4_1/smol-Q4_1-00001-of-00003.gguf\": \"%s\",\n"
            "   \"Q4_1/smol-Q4_1-00002-of-00003.gguf\": \"%s\",\n"
            "   \"Q4_1/smol-Q4_1-00003-of-00003.gguf\": \"%s\"}},\n"
            " \"test-org/missing\": {\"files\": {\"smol-Q4_1-00001-of-00003.gguf\": \"%s\",\n"
            "   \"smol-Q4_1-00003-of-00003.gguf\": \"%s\"}},\n"
            " \"test-org/mixed\": {\"files\": {\"smol-Q4_1-00001-of-00003.gguf\": \"%s\",\n"
            "   \"smol-Q4_1-00002-of-00003.gguf\": \"%s\", \"smol-Q4_1-00003-of-00003.gguf\": "
            "\"%s\"}},\n"
            " \"test-org/count\": {\"files\": {\"smol-Q4_1-00001-of-00003.gguf\": \"%s\",\n"
            "   \"smol-Q4_1-00002-of-00003.gguf\": \"%s\", \"smol-Q4_1-00003-of-00003.gguf\": "
            "\"%s\"}}\n"
            "}}\n",
            whole, p[0], p[1], p[2], p[0], p[2], p[0], h2, p[2], p[0], p[1], nf3);
    fclose(cf);
}

/* The broken sets: one line naming the part, whole and with --layers. */
static void s_check_broken(void)
{
    static const struct {
        const char *repo, *a, *b;
    } cases[] = {
        {"test-org/missing", "part 2 of 3 of the split set", "smol-Q4_1-00002-of-00003.gguf"},
        {"test-org/mixed", "is in both", "a part of another split set"},
        {"test-org/count", "smol-Q4_1-00003-of-00003.gguf' is part 3 of a set of 4",
         "another split set"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char ref[200];
        snprintf(ref, sizeof ref, "%s:smol-Q4_1-00001-of-00003.gguf", cases[i].repo);
        const char *whole[] = {"pull", ref, NULL};
        const char *layers[] = {"pull", ref, "--layers", "15:30", NULL};
        char *err = NULL;
        setenv("HF_HOME", sw_test_log("brokenhome"), 1);
        SW_CHECK_INT(s_cli(NULL, &err, whole), 1);
        SW_CHECK(s_line(err, cases[i].a, cases[i].b));
        free(err);
        setenv("HF_HOME", sw_test_log("brokenlayers"), 1); /* no part cached: the partial pull */
        SW_CHECK_INT(s_cli(NULL, &err, layers), 1);
        SW_CHECK(s_line(err, cases[i].a, cases[i].b));
        free(err);
    }
    setenv("HF_HOME", sw_test_log("hfhome"), 1);
}

static void s_check_cluster(const char *whole, const char *set_fp)
{
    char e[256];
    if (sw_keys_curve_check(e, sizeof e) != 0) {
        sw_test_skip_part(e);
        return;
    }
    int32_t ref[N_GEN + 8];
    SW_CHECK_INT(sw_test_generate(whole, s_prompt, N_GEN, ref, N_GEN + 8), N_GEN);
    const char *nodes[] = {"head", "tail", NULL};
    swh_cluster_t c = {0};
    swh_partial_cluster(&c, s_dir, nodes, sw_test_log("nodehome"),
                        "hf:test-org/smol-split/Q4_1/smol-Q4_1-00002-of-00003.gguf", s_prompt, ref,
                        N_GEN, set_fp);
    sw_test_kill(c.tail);
    sw_test_kill(c.head);
    sw_test_kill(c.relay);
    setenv("HF_HOME", sw_test_log("hfhome"), 1);
}

int main(void)
{
    const char *whole = sw_test_model();
    const char *fx = getenv("SW_SPLIT_DIR");
    char probe[600];
    snprintf(probe, sizeof probe, "%s/smol-00001-of-00003.gguf", fx ? fx : "");
    if (!fx || access(probe, R_OK) != 0)
        sw_test_skip("the split_models fixture is absent (scripts/ci/split_models.sh)");
    signal(SIGPIPE, SIG_IGN);
    snprintf(s_dir, sizeof s_dir, "%s", sw_test_log("hub.json"));
    *strrchr(s_dir, '/') = 0;
    s_write_config(fx, whole);
    pid_t hub = sw_test_hub(s_dir, s_endpoint, sizeof s_endpoint);
    char set_fp[65];
    swh_fingerprint(probe, set_fp);
    SW_CHECK_INT(strlen(set_fp), 64);

    /* 1. untagged: two choices, the set named once; tagged: every part */
    {
        const char *a0[] = {"pull", "test-org/smol-split", NULL};
        char *err = NULL;
        SW_CHECK_INT(s_cli(NULL, &err, a0), 1);
        SW_CHECK(s_line(err, "has 2 .gguf files",
                        "Q4_1/smol-Q4_1-00001-of-00003.gguf (a split set of 3 parts)"));
        free(err);
        const char *a1[] = {"pull", "test-org/smol-split:Q4_1", NULL};
        char *out = NULL;
        SW_CHECK_INT(s_cli(&out, &err, a1), 0);
        SW_CHECK(out && strstr(out, "/snapshots/") &&
                 strstr(out, "/Q4_1/smol-Q4_1-00001-of-00003.gguf"));
        SW_CHECK(err && strstr(err, "a split set of 3 parts"));
        const long long got = s_sent("test-org/smol-split", 0, NULL);
        long long total = 0;
        for (int i = 1; i <= 3; i++) {
            char p[600];
            struct stat st;
            snprintf(p, sizeof p, "%s/smol-%05d-of-00003.gguf", fx, i);
            total += stat(p, &st) == 0 ? (long long)st.st_size : 0;
        }
        SW_CHECK_INT(got, total);
        char fp[65];
        swh_fingerprint(out ? out : "", fp);
        SW_CHECK(!strcmp(fp, set_fp));
        int32_t ref[N_GEN + 8], ids[N_GEN + 8];
        SW_CHECK_INT(sw_test_generate(whole, s_prompt, N_GEN, ref, N_GEN + 8), N_GEN);
        SW_CHECK_INT(sw_test_generate(out ? out : "", s_prompt, N_GEN, ids, N_GEN + 8), N_GEN);
        SW_CHECK(!memcmp(ids, ref, N_GEN * sizeof *ids));
        /* part 2 by name: the same set, nothing fetched again; offline too */
        int from = 0;
        s_sent("test-org/smol-split", 0, &from);
        const char *a2[] = {"pull", "test-org/smol-split:Q4_1/smol-Q4_1-00002-of-00003.gguf", NULL};
        char *out2 = NULL;
        SW_CHECK_INT(s_cli(&out2, NULL, a2), 0);
        SW_CHECK(out && out2 && !strcmp(out, out2));
        SW_CHECK(s_sent("test-org/smol-split", from, NULL) == 0);
        free(out2);
        setenv("HF_HUB_OFFLINE", "1", 1);
        SW_CHECK_INT(s_cli(&out2, NULL, a1), 0);
        SW_CHECK(out && out2 && !strcmp(out, out2));
        unsetenv("HF_HUB_OFFLINE");
        free(out2);
        /* --model hf: naming the last part */
        SW_CHECK_INT(sw_test_generate("hf:test-org/smol-split/Q4_1/smol-Q4_1-00003-of-00003.gguf",
                                      s_prompt, N_GEN, ids, N_GEN + 8),
                     N_GEN);
        SW_CHECK(!memcmp(ids, ref, N_GEN * sizeof *ids));
        free(out);
        free(err);
    }

    /* 2. --layers across the parts: about the bytes needed, the set's fingerprint */
    setenv("HF_HOME", sw_test_log("layershome"), 1);
    const char *halves[2] = {"0:15", "15:30"};
    for (int h = 0; h < 2; h++) {
        int from = 0;
        s_sent("test-org/smol-split", 0, &from);
        const char *args[] = {"pull", "test-org/smol-split:Q4_1", "--layers", halves[h], NULL};
        char *out = NULL, *err = NULL;
        SW_CHECK_INT(s_cli(&out, &err, args), 0);
        SW_CHECK(out && strstr(out, "/shardwire-partial/") &&
                 strstr(out, "/smol-Q4_1-00001-of-00003.gguf"));
        SW_CHECK(err && strstr(err, " MiB of 93.8 MiB of the split set ("));
        const long long want = h == 0 ? s_expected(probe, 0, 15) : s_expected(probe, 15, 30);
        const long long got = s_sent("test-org/smol-split", from, NULL);
        SW_CHECK(want > 0 && got >= want && got <= want + want * 3 / 100);
        fprintf(stderr, "layers %s of the set: fetched %lld bytes, needed %lld\n", halves[h], got,
                want);
        char fp[65];
        swh_fingerprint(out ? out : "", fp);
        SW_CHECK(!strcmp(fp, set_fp));
        SW_CHECK(s_same_data(out ? out : "", probe));
        free(out);
        free(err);
    }
    {
        const char *args[] = {"pull", "test-org/smol-split:Q4_1", "--layers", "0:30", NULL};
        char *out = NULL, *err = NULL;
        SW_CHECK_INT(s_cli(&out, &err, args), 0);
        SW_CHECK(out && strstr(out, "/snapshots/") && strstr(out, "-00001-of-00003.gguf"));
        SW_CHECK(err && strstr(err, "the whole split set"));
        free(out);
        free(err);
    }
    setenv("HF_HOME", sw_test_log("hfhome"), 1);

    /* 3. a cluster of two nodes that pull their partial files of the set */
    s_check_cluster(whole, set_fp);

    /* 4. broken sets on the hub */
    s_check_broken();

    return swh_done(hub, sw_test_log("hub.stderr"));
}
