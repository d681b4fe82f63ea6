/*
 * test_pull_layers.c - partial downloads (`shardwire pull --layers A:B`, a
 * node with --model hf:... and its range) against the hub stand-in
 * (tests/hub_standin.py, with Range support as the hub's CDN has it) and the
 * real default model (SmolLM2, 30 layers, tied embeddings):
 *
 *  - a partial pull asks the CDN for about the bytes of the header plus the
 *    tensors the range needs (computed here from the whole file's header),
 *    reports them, and its file announces the whole file's fingerprint;
 *  - a cached partial file that holds the range is used again, offline too;
 *  - the engine refuses a range the partial file does not hold, naming the
 *    pull command that gets it;
 *  - a 2-node cluster whose nodes fetch their own partial files (head 0:15,
 *    tail 15:30) generates greedily exactly what `shardwire generate` gives
 *    on the whole file, both nodes announcing the whole file's fingerprint,
 *    and again when a node with the whole file replaces the tail;
 *  - a pull interrupted (SIGINT while the server stalls) leaves a file the
 *    engine does not load, and the next pull finishes it without fetching
 *    the header or the finished bytes again;
 *  - responses cut short are resumed in the same run; a server that ignores
 *    Range and one whose Content-Range is not what was asked give one line;
 *  - --layers 0:30 (every layer) is the whole, sha256-checked download.
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

#define N_GEN 24

static char s_dir[256];
static char s_endpoint[64];
static const char *s_prompt = "The capital of France is";

static const char *s_path(const char *name)
{
    static char buf[8][512];
    static int slot;
    char *p = buf[slot++ & 7];
    snprintf(p, 512, "%s/%s", s_dir, name);
    return p;
}

static long long s_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* `shardwire ARGS...` (NULL-terminated); exit code, stdout's first line, stderr. */
static int s_cli(char **out, char **err, const char *const *args)
{
    return swh_cli(out, err, 180, args);
}

/* Sum of the body bytes the CDN sent for repo from log line `from` on. */
static long long s_sent(const char *repo, int from, int *lines)
{
    return swh_sent(s_path("hub.log"), repo, from, lines);
}

/* 1 when a log line from `from` on holds both a and b. */
static int s_logged(int from, const char *a, const char *b)
{
    char *text = sw_test_read_file(s_path("hub.log"), NULL);
    int i = 0, found = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n"), i++)
        if (i >= from && strstr(line, a) && (!b || strstr(line, b)))
            found = 1;
    free(text);
    return found;
}

/* Bytes a partial pull of [begin, end) must fetch at least: the whole file's header and the
 * data of every tensor the range needs (computed here, from the file itself). */
static long long s_expected(const char *model, int begin, int end, int n_layer)
{
    char err[256];
    sw_gguf_t *g = sw_gguf_open(model, err, sizeof err);
    if (!g)
        return -1;
    long long sum = (long long)sw_gguf_data_offset(g);
    const int tied = sw_gguf_find_tensor(g, "output.weight") == NULL;
    for (int64_t i = 0; i < sw_gguf_tensor_count(g); i++) {
        const sw_gguf_tensor_t *t = sw_gguf_tensor(g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        int blk = -1, need;
        if (sscanf(name, "blk.%d.", &blk) == 1)
            need = blk >= begin && blk < end;
        else if (!strcmp(name, "token_embd.weight"))
            need = begin == 0 || (end == n_layer && tied);
        else if (!strcmp(name, "output_norm.weight") || !strcmp(name, "output.weight"))
            need = end == n_layer;
        else
            need = 1;
        if (need)
            sum += (long long)t->n_bytes;
    }
    sw_gguf_close(&g);
    return sum;
}

static int s_near(long long got, long long want, double tol)
{
    if (got < want || got > want + (long long)(tol * (double)want)) {
        fprintf(stderr, "fetched %lld bytes, expected %lld (+%.0f%%)\n", got, want, tol * 100);
        return 0;
    }
    return 1;
}

int main(void)
{
    const char *model = sw_test_model();
    signal(SIGPIPE, SIG_IGN);
    snprintf(s_dir, sizeof s_dir, "%s", sw_test_tmpdir());
    FILE *cf = swh_config(s_path("hub.json"));
    fprintf(cf,
            "{\"repos\": {\n"
            " \"test-org/smol\": {\"files\": {\"smol.gguf\": \"%s\"}},\n"
            " \"test-org/stall\": {\"files\": {\"smol.gguf\": \"%s\"}, \"stall_after\": 3000000,"
            " \"stall_min_start\": 10000000},\n"
            " \"test-org/flaky\": {\"files\": {\"smol.gguf\": \"%s\"}, \"cut_after\": 2000000,"
            " \"cuts\": 3},\n"
            " \"test-org/norange\": {\"files\": {\"smol.gguf\": \"%s\"}, \"no_range\": true},\n"
            " \"test-org/badrange\": {\"files\": {\"smol.gguf\": \"%s\"}, \"bad_range\": true}\n"
            "}}\n",
            model, model, model, model, model);
    fclose(cf);
    pid_t hub = sw_test_hub(s_dir, s_endpoint, sizeof s_endpoint);

    char whole_fp[65];
    swh_fingerprint(model, whole_fp);
    SW_CHECK_INT(strlen(whole_fp), 64);
    const long long whole = s_size(model);

    /* 1. the two halves: about the bytes they need, the whole file's fingerprint */
    char head_path[1024] = "", tail_path[1024] = "";
    const char *halves[2][2] = {{"0:15", head_path}, {"15:30", tail_path}};
    for (int h = 0; h < 2; h++) {
        int from = 0;
        s_sent("test-org/smol", 0, &from);
        const char *args[] = {"pull", "test-org/smol", "--layers", halves[h][0], NULL};
        char *out = NULL, *err = NULL;
        SW_CHECK_INT(s_cli(&out, &err, args), 0);
        snprintf((char *)halves[h][1], 1024, "%s", out ? out : "");
        SW_CHECK(strstr(halves[h][1], "/shardwire-partial/") != NULL);
        SW_CHECK(err && strstr(err, "fetched ") && strstr(err, " MiB of 93.8 MiB ("));
        const long long want =
            h == 0 ? s_expected(model, 0, 15, 30) : s_expected(model, 15, 30, 30);
        const long long got = s_sent("test-org/smol", from, NULL);
        SW_CHECK(want > 0 && s_near(got, want, 0.03));
        SW_CHECK(got < whole * 3 / 4);
        fprintf(stderr, "layers %s: fetched %lld of %lld bytes (%.1f%%), needed %lld\n",
                halves[h][0], got, whole, 100.0 * (double)got / (double)whole, want);
        char fp[65];
        swh_fingerprint(halves[h][1], fp);
        SW_CHECK(!strcmp(fp, whole_fp));
        free(out);
        free(err);
    }
    /* again: nothing is fetched */
    {
        int from = 0;
        s_sent("test-org/smol", 0, &from);
        const char *args[] = {"pull", "test-org/smol", "--layers", "16:30", NULL};
        char *out = NULL;
        SW_CHECK_INT(s_cli(&out, NULL, args), 0);
        SW_CHECK(out && !strcmp(out, tail_path)); /* 15:30 holds 16:30 */
        SW_CHECK(!s_logged(from, "/cdn/test-org/smol/", NULL));
        free(out);
        /* offline, and with the hub unreachable: the cached partial file */
        setenv("HF_HUB_OFFLINE", "1", 1);
        SW_CHECK_INT(s_cli(&out, NULL, args), 0);
        SW_CHECK(out && !strcmp(out, tail_path));
        free(out);
        const char *a0[] = {"pull", "test-org/smol", "--layers", "0:20", NULL};
        char *err = NULL;
        SW_CHECK_INT(s_cli(NULL, &err, a0), 1);
        SW_CHECK(err && strstr(err, "HF_HUB_OFFLINE"));
        free(err);
        unsetenv("HF_HUB_OFFLINE");
        setenv("HF_ENDPOINT", "http://127.0.0.1:9", 1);
        SW_CHECK_INT(s_cli(&out, &err, args), 0);
        SW_CHECK(out && !strcmp(out, tail_path));
        SW_CHECK(err && strstr(err, "using the cached copy"));
        free(out);
        free(err);
        setenv("HF_ENDPOINT", s_endpoint, 1);
    }

    /* 2. a range the partial file does not hold: refused, naming the pull that gets it */
    {
        const char *args[] = {"generate", "--model", head_path, "-p", "x", "-n", "1", NULL};
        char *err = NULL;
        SW_CHECK_INT(s_cli(NULL, &err, args), 1);
        SW_CHECK(err && strstr(err, "holds layers 0:15 of the 30-layer model") &&
                 strstr(err, "shardwire pull hf:test-org/smol/smol.gguf@") &&
                 strstr(err, "--layers 0:30"));
        free(err);
    }

    /* 3. a cluster of two nodes that fetch their own partial files */
    {
        char e[256];
        if (sw_keys_curve_check(e, sizeof e) != 0) {
            sw_test_skip_part(e);
        } else {
            int32_t ref[N_GEN + 8];
            SW_CHECK_INT(sw_test_generate(model, s_prompt, N_GEN, ref, N_GEN + 8), N_GEN);
            const char *nodes[] = {"head", "tail", "tail2", NULL};
            swh_cluster_t c = {0};
            swh_partial_cluster(&c, s_dir, nodes, s_path("nodehome"), "hf:test-org/smol/smol.gguf",
                                s_prompt, ref, N_GEN, whole_fp);
            const char *ep = c.ep, *log = c.log;
            pid_t relay = c.relay, head = c.head, tail = c.tail;
            char want[64];
            snprintf(want, sizeof want, "model %.12s...", whole_fp);
            /* a mixed cluster: the partial tail replaced by a node with the whole file */
            sw_test_kill(tail);
            pid_t tail2 = sw_test_node(ep, s_dir, "tail2", "15:30", log, NULL);
            for (int i = 0; i < 600 && sw_test_count_in_file(log, want) < 3; i++)
                usleep(100000);
            SW_CHECK_INT(sw_test_count_in_file(log, want), 3);
            SW_CHECK_INT(sw_test_wait_peers(ep, 2, 60), 0);
            pid_t run = sw_test_run_bg(ep, "head", s_prompt, N_GEN, 120, "run2");
            SW_CHECK(sw_test_run_exact(run, "run2", ref, N_GEN, 150));
            sw_test_kill(tail2);
            sw_test_kill(head);
            sw_test_kill(relay);
            setenv("HF_HOME", s_path("hfhome"), 1);
        }
    }

    /* 4. interrupted while the server stalls; the next pull finishes without refetching */
    {
        char *pa[] = {
            (char *)sw_test_bin("shardwire"), "pull", "test-org/stall", "--layers", "15:30", NULL};
        int from = 0;
        s_sent("test-org/stall", 0, &from);
        pid_t p = sw_test_spawn_io(pa, s_path("stall.out"), s_path("stall.err"));
        char dir[900], part[1000], cmd[1100];
        snprintf(dir, sizeof dir, "%s/hub/models--test-org--stall/shardwire-partial",
                 s_path("hfhome"));
        /* the first tensor request stalls after 3,000,000 bytes (header + 3 MB on disk) */
        part[0] = 0;
        long long last = -1, cur = -1;
        for (int i = 0; i < 300; i++) {
            usleep(100000);
            if (!part[0]) {
                snprintf(cmd, sizeof cmd, "find %s -name '*.gguf.incomplete'", dir);
                char *o = NULL;
                if (sw_test_sh(cmd, 10, &o) == 0 && o && o[0]) {
                    o[strcspn(o, "\n")] = 0;
                    snprintf(part, sizeof part, "%s", o);
                }
                free(o);
                continue;
            }
            cur = s_size(part);
            if (cur > 3000000 && cur == last)
                break;
            last = cur;
        }
        SW_CHECK(part[0] && cur > 3000000);
        kill(p, SIGINT);
        SW_CHECK_INT(sw_test_wait(p, 20), 130);
        SW_CHECK(sw_test_count_in_file(s_path("stall.err"), "run again to resume") == 1);
        const long long kept = s_size(part);
        SW_CHECK(kept > 3000000);
        /* the engine does not take the interrupted file for a complete one */
        {
            const char *args[] = {"info", "--model", part, NULL};
            char *err = NULL;
            SW_CHECK_INT(s_cli(NULL, &err, args), 1);
            SW_CHECK(err && strstr(err, "runs past the end of the file"));
            free(err);
        }
        int mid = 0;
        s_sent("test-org/stall", 0, &mid);
        const char *args[] = {"pull", "test-org/stall", "--layers", "15:30", NULL};
        char *out = NULL, *err = NULL;
        SW_CHECK_INT(s_cli(&out, &err, args), 0);
        SW_CHECK(err && strstr(err, "resuming at"));
        SW_CHECK(!s_logged(mid, "\"range\": \"bytes=0-", NULL)); /* the header: not again */
        const long long again = s_sent("test-org/stall", mid, NULL);
        const long long want = s_expected(model, 15, 30, 30);
        /* the rerun fetched what was missing: the need less what the file held (its header
         * is about as long as the source's, which the need counts) */
        SW_CHECK(llabs(again - (want - kept)) < (want - kept) / 100);
        fprintf(stderr, "resume: the rerun fetched %lld bytes of %lld needed\n", again, want);
        char fp[65];
        swh_fingerprint(out ? out : "", fp);
        SW_CHECK(!strcmp(fp, whole_fp));
        SW_CHECK_INT(s_size(part), -1);
        /* the data are those of the uninterrupted pull of the same range */
        {
            size_t la = 0, lb = 0;
            char *a = out ? sw_test_read_file(out, &la) : NULL;
            char *b = sw_test_read_file(tail_path, &lb);
            SW_CHECK(a && b && la == lb && la > 4096 &&
                     !memcmp(a + la - (la / 2), b + lb - (lb / 2), la / 2));
            free(a);
            free(b);
        }
        free(out);
        free(err);
    }

    /* 5. responses cut short: resumed in the same run */
    {
        const char *args[] = {"pull", "test-org/flaky", "--layers", "0:15", NULL};
        char *out = NULL, *err = NULL;
        SW_CHECK_INT(s_cli(&out, &err, args), 0);
        SW_CHECK(err && strstr(err, "range request cut at byte"));
        char fp[65];
        swh_fingerprint(out ? out : "", fp);
        SW_CHECK(!strcmp(fp, whole_fp));
        free(out);
        free(err);
    }

    /* 6. a server without Range support, and one that answers other bytes: one line each */
    {
        const char *a1[] = {"pull", "test-org/norange", "--layers", "0:15", NULL};
        char *err = NULL;
        SW_CHECK_INT(s_cli(NULL, &err, a1), 1);
        SW_CHECK(err && strstr(err, "ignores HTTP range requests") &&
                 strstr(err, "without --layers"));
        SW_CHECK(err && strchr(err, '\n') == err + strlen(err) - 1);
        free(err);
        const char *a2[] = {"pull", "test-org/badrange", "--layers", "0:15", NULL};
        SW_CHECK_INT(s_cli(NULL, &err, a2), 1);
        SW_CHECK(err && strstr(err, "Content-Range") && strstr(err, "not the bytes asked for"));
        SW_CHECK(err && strchr(err, '\n') == err + strlen(err) - 1);
        free(err);
        const char *a3[] = {"pull", "test-org/smol", "--layers", "7", NULL};
        SW_CHECK_INT(s_cli(NULL, NULL, a3), 2);
        const char *a4[] = {"pull", "test-org/smol", "--layers", "20:40", NULL};
        SW_CHECK_INT(s_cli(NULL, &err, a4), 1);
        SW_CHECK(err && strstr(err, "layer range 20:40 is invalid for a 30-layer model"));
        free(err);
    }

    /* 7. every layer: the whole file, checked against the hub's sha256 */
    {
        setenv("HF_HOME", s_path("wholehome"), 1);
        const char *args[] = {"pull", "test-org/smol", "--layers", "0:30", NULL};
        char *out = NULL, *err = NULL;
        SW_CHECK_INT(s_cli(&out, &err, args), 0);
        SW_CHECK(out && strstr(out, "/snapshots/") && s_size(out) == whole);
        SW_CHECK(err && strstr(err, "the whole model"));
        free(out);
        free(err);
    }

    return swh_done(hub, s_path("hub.stderr"));
}
