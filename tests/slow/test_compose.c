/*
 * test_compose.c - the Docker compose cluster of deploy/docker, run for real
 * with podman (label slow; 5-10 minutes, more the first time a machine makes
 * its base image and builds the image):
 *
 *  1. docs/deploy.md's podman block, as written: the lines between its
 *     "podman-block" markers run in one bash (-e: every line must succeed)
 *     from the repo root: scripts/deploy/containers.sh (podman, podman-compose,
 *     runc, the Debian base image with bookworm-updates and -security, this
 *     shell's CONTAINERS_CONF), the model, the image from the Dockerfile, up
 *     with the client and serve, the client's logs (its generation), status
 *     and runs through `podman exec` into serve (`run --json` clean JSON),
 *     serve's /health on the published port and its API key from the
 *     client bundle, ps, a healthcheck by hand, and compose_down.sh -v
 *     (quiet). Afterwards no container, volume or network of the project is
 *     left;
 *  2. docker-compose validates compose.yaml's cpu and gpu profiles: the GPU
 *     nodes use the CUDA image and reserve an NVIDIA GPU;
 *  3. a second project with the head drafting with SW_DRAFT_MODEL (the model
 *     itself): the keys come from the init service into the volume, mode
 *     0600, with no middle key for a two-stage cluster; the healthchecks
 *     pass; the client's greedy output equals `shardwire generate` and every
 *     draft is accepted; the base image has the three suites;
 *  4. the relay's process ends: the restart policy brings it back, the nodes
 *     reconnect and a second generation is again identical; `podman kill`
 *     on the tail does not restart it (the restart policy acts on a crash
 *     only, as the doc says);
 *  5. everything is torn down (containers, volumes, network) by
 *     scripts/deploy/compose_down.sh, which prints nothing.
 */
#include "sw_test.h"

#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_GEN 24
static const char *s_prompt = "Write a haiku about networks.";

static char s_src[PATH_MAX], s_compose[PATH_MAX + 64], s_project[64];

static int s_compose_cmd(const char *args, int timeout_s, char **out)
{
    char cmd[PATH_MAX * 2];
    snprintf(cmd, sizeof cmd, "podman-compose -p %s -f %s %s", s_project, s_compose, args);
    return sw_test_sh(cmd, timeout_s, out);
}

/* The tokens of `run --json` (and its drafts) with the client's keys, run in the serve
 * container as docs/deploy.md shows: its stdout must be the JSON alone (one object). */
static int s_generate(int32_t *ids, int max, long *drafted, long *accepted)
{
    char cmd[512], *out = NULL;
    snprintf(cmd, sizeof cmd,
             "podman exec %s_serve_1 sh /keys/cluster/client/shardwire.sh run --greedy --json "
             "-p '%s' -n %d --connect-timeout-s 120 2>/dev/null",
             s_project, s_prompt, N_GEN);
    int rc = sw_test_sh(cmd, 300, &out);
    json_error_t je;
    json_t *whole = rc == 0 && out ? json_loads(out, 0, &je) : NULL; /* nothing else on stdout */
    SW_CHECK(whole != NULL);
    json_decref(whole);
    int n = rc == 0 && out ? sw_test_json_tokens(out, ids, max) : -1;
    const char *d = out ? strstr(out, "\"drafted\":") : NULL;
    const char *a = out ? strstr(out, "\"accepted\":") : NULL;
    *drafted = d ? strtol(d + 10, NULL, 10) : -1;
    *accepted = a ? strtol(a + 11, NULL, 10) : -1;
    if (n < 0)
        fprintf(stderr, "client output: %s\n", out ? out : "(none)");
    free(out);
    return n;
}

/* 0 when nothing of project is left: containers, the keys volume, the network. */
static int s_nothing_left(const char *project)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "test -z \"$(podman ps -aq --filter label=io.podman.compose.project=%s)\" "
             "&& ! podman volume exists %s_keys && ! podman network exists %s_default",
             project, project, project);
    return sw_test_sh(cmd, 60, NULL);
}

/* scripts/deploy/compose_down.sh -v: 0 when it succeeded and printed nothing at all. */
static int s_teardown(void)
{
    char cmd[PATH_MAX + 128], *out = NULL;
    snprintf(cmd, sizeof cmd, "bash %s/scripts/deploy/compose_down.sh %s -v 2>&1", s_src,
             s_project);
    int rc = sw_test_sh(cmd, 300, &out);
    if (out && out[0])
        fprintf(stderr, "compose_down.sh said:\n%s\n", out);
    int quiet = out && !out[0];
    free(out);
    return rc == 0 && quiet ? 0 : -1;
}

/* The sh block of docs/deploy.md between the podman-block markers (malloc'd), or NULL. */
static char *s_doc_block(void)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/docs/deploy.md", s_src);
    char *doc = sw_test_read_file(path, NULL);
    char *b = doc ? strstr(doc, "<!-- podman-block") : NULL;
    char *e = b ? strstr(b, "<!-- /podman-block -->") : NULL;
    char *f = b ? strstr(b, "```sh\n") : NULL;
    char *g = f ? strstr(f + 6, "\n```") : NULL;
    char *block = f && g && e && g < e ? strndup(f + 6, (size_t)(g - f - 6) + 1) : NULL;
    free(doc);
    return block;
}

int main(void)
{
    const char *model = sw_test_model();
    snprintf(s_src, sizeof s_src, "%s", sw_test_env("SW_SOURCE_DIR"));
    snprintf(s_compose, sizeof s_compose, "%s/deploy/docker/compose.yaml", s_src);

    /* The compose file's settings: the model from the repo's cache, one thread per node. */
    char mdir[PATH_MAX], mbase[PATH_MAX], mpath[PATH_MAX + 16], tmp[PATH_MAX];
    SW_CHECK(realpath(model, mdir) != NULL);
    snprintf(tmp, sizeof tmp, "%s", mdir);
    snprintf(mbase, sizeof mbase, "%s", basename(tmp));
    snprintf(tmp, sizeof tmp, "%s", mdir);
    snprintf(mdir, sizeof mdir, "%s", dirname(tmp));
    snprintf(mpath, sizeof mpath, "/models/%s", mbase);
    unsetenv("SW_IMAGE");
    unsetenv("SW_DRAFT_MODEL");
    unsetenv("SW_NODES");
    setenv("SW_MODELS_DIR", mdir, 1);
    setenv("SW_MODEL", mpath, 1);
    setenv("SW_THREADS", "1", 1);
    char web_port[16];
    snprintf(web_port, sizeof web_port, "%d", sw_test_free_port());
    setenv("SW_WEB_PORT", web_port, 1); /* serve's page on the host */

    /* 1. the doc's block, as written (its project name from the environment). */
    char *block = s_doc_block();
    SW_CHECK(block != NULL);
    if (!block)
        return sw_test_done();
    char script[PATH_MAX], cmd[PATH_MAX * 3], *out = NULL;
    snprintf(script, sizeof script, "%s", sw_test_log("podman-block.sh"));
    FILE *f = fopen(script, "w");
    SW_CHECK(f != NULL);
    if (!f)
        return sw_test_done();
    fputs(block, f);
    fclose(f);
    free(block);
    char doc_project[64];
    snprintf(doc_project, sizeof doc_project, "swdoc%d", (int)getpid());
    snprintf(cmd, sizeof cmd, "cd %s && COMPOSE_PROJECT_NAME=%s bash -e -x %s 2>&1", s_src,
             doc_project, script);
    int rc = sw_test_sh(cmd, 1700, &out);
    SW_CHECK_INT(rc, 0);
    fprintf(stderr, "%s\n", out ? out : "");
    /* the client's generation in its logs, and the run's (each prints a stats table) */
    SW_CHECK(sw_test_count_in_file(script, "logs -f client") == 1);
    int tables = 0;
    for (const char *p = out; p && (p = strstr(p, "generated tokens")); p++)
        tables++;
    SW_CHECK(tables >= 2);
    SW_CHECK(out && strstr(out, "head: healthy"));
    /* run --json through podman exec is clean JSON; the web page's /health and the API with
     * the bundle's key answer on the published port; the quiet down said nothing */
    SW_CHECK(out && strstr(out, "run --json: clean JSON"));
    SW_CHECK(out && strstr(out, "{\"status\":\"ok\""));
    SW_CHECK(out && strstr(out, "API key: accepted"));
    const char *down = out ? strstr(out, "compose_down.sh") : NULL;
    const char *after = down ? strchr(down, '\n') : NULL; /* its `bash -x` line is the last */
    SW_CHECK(down && (!after || !after[strspn(after, "\n")]));
    SW_CHECK(out && !strstr(out, "no such container"));
    /* status listed both nodes; ps listed the containers */
    SW_CHECK(out && strstr(out, " head ") && strstr(out, " tail "));
    snprintf(tmp, sizeof tmp, "%s_relay_1", doc_project);
    SW_CHECK(out && strstr(out, tmp));
    free(out);
    out = NULL;
    SW_CHECK_INT(s_nothing_left(doc_project), 0);

    /* The test's own podman commands need the block's environment too. */
    snprintf(cmd, sizeof cmd, "bash %s/scripts/deploy/containers.sh", s_src);
    SW_CHECK_INT(sw_test_sh(cmd, 900, &out), 0);
    char *conf = out ? strstr(out, "export CONTAINERS_CONF=") : NULL;
    SW_CHECK(conf != NULL);
    if (!conf)
        return sw_test_done();
    conf += strlen("export CONTAINERS_CONF=");
    conf[strcspn(conf, "\n")] = 0;
    setenv("CONTAINERS_CONF", conf, 1);
    free(out);
    out = NULL;
    /* the base image has the security and updates suites */
    SW_CHECK_INT(sw_test_sh("podman run --rm docker.io/library/debian:bookworm-slim sh -c "
                            "'grep -c \"bookworm-updates main\\|bookworm-security main\" "
                            "/etc/apt/sources.list'",
                            60, &out),
                 0);
    SW_CHECK(out && !strncmp(out, "2\n", 2));
    free(out);
    out = NULL;
    /* The runtime image holds the programs and runtime libraries, no compiler. */
    SW_CHECK_INT(sw_test_sh("podman run --rm shardwire:cpu shardwire --help", 60, &out), 0);
    SW_CHECK(out && strstr(out, "cluster"));
    free(out);
    out = NULL;
    SW_CHECK_INT(sw_test_sh("podman run --rm --entrypoint sh shardwire:cpu -c "
                            "'command -v shardwire-relay shardwire-node && ! command -v cc && "
                            "! command -v cmake && [ \"$(id -u)\" = 10001 ]'",
                            60, NULL),
                 0);

    /* 2. both profiles validate; the GPU one reserves NVIDIA GPUs for the nodes. */
    snprintf(cmd, sizeof cmd, "docker-compose -f %s --profile cpu config -q", s_compose);
    SW_CHECK_INT(sw_test_sh(cmd, 60, NULL), 0);
    snprintf(cmd, sizeof cmd, "docker-compose -f %s --profile gpu config", s_compose);
    SW_CHECK_INT(sw_test_sh(cmd, 60, &out), 0);
    for (int i = 0; i < 2; i++) {
        const char *svc = i == 0 ? "\n  head-gpu:\n" : "\n  tail-gpu:\n";
        const char *s = out ? strstr(out, svc) : NULL;
        const char *e = s ? strstr(s + strlen(svc), "\n  ") : NULL;
        /* the next line at two spaces' indent (another service) ends the block */
        while (e && e[3] == ' ')
            e = strstr(e + 1, "\n  ");
        size_t len = s ? (e ? (size_t)(e - s) : strlen(s)) : 0;
        char *blk = s ? strndup(s, len) : NULL;
        SW_CHECK(blk && strstr(blk, "driver: nvidia"));
        SW_CHECK(blk && strstr(blk, "- gpu"));
        SW_CHECK(blk && strstr(blk, "dockerfile: deploy/docker/Dockerfile.cuda"));
        SW_CHECK(blk && strstr(blk, "CMAKE_CUDA_ARCHITECTURES"));
        SW_CHECK(blk && strstr(blk, "image: shardwire:cuda"));
        free(blk);
    }
    free(out);
    out = NULL;

    /* 3. a cluster whose head drafts with a draft model (the model itself). */
    snprintf(s_project, sizeof s_project, "swtest%d", (int)getpid());
    setenv("SW_DRAFT_MODEL", mpath, 1);
    int32_t ref[N_GEN], got[N_GEN];
    long drafted = 0, accepted = 0;
    int n_ref = sw_test_generate(model, s_prompt, N_GEN, ref, N_GEN);
    SW_CHECK_INT(n_ref, N_GEN);
    SW_CHECK_INT(s_compose_cmd("up -d --no-build init relay head tail serve", 300, NULL), 0);
    int n = s_generate(got, N_GEN, &drafted, &accepted);
    SW_CHECK_INT(n, n_ref);
    for (int i = 0; i < n && i < n_ref; i++)
        SW_CHECK_INT(got[i], ref[i]);
    fprintf(stderr, "compose head with SW_DRAFT_MODEL: %ld of %ld drafts accepted\n", accepted,
            drafted);
    SW_CHECK(drafted > 0 && accepted == drafted);
    /* The healthchecks (podman runs them on demand where no systemd schedules them). */
    const char *svcs[] = {"relay", "head", "tail"};
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "podman healthcheck run %s_%s_1", s_project, svcs[i]);
        SW_CHECK_INT(sw_test_sh(cmd, 60, NULL), 0);
    }
    /* The keys came from the init service into the volume, mode 0600, not from the
     * image; two stages, no middle key. */
    snprintf(cmd, sizeof cmd,
             "podman exec %s_head_1 sh -c 'stat -c %%a /keys/cluster/head/head.key; "
             "grep -c \" head head$\" /keys/cluster/relay/allow.txt; "
             "grep -c \" stage middle$\" /keys/cluster/relay/allow.txt; "
             "test -e /keys/cluster/middle && echo middle || echo no-middle'",
             s_project);
    sw_test_sh(cmd, 60, &out); /* grep -c exits 1 when it counts 0 */
    SW_CHECK(out && strncmp(out, "600\n1\n0\nno-middle\n", 18) == 0);
    free(out);
    out = NULL;

    /* 4. the relay's process ends; restart: unless-stopped brings it back. */
    snprintf(cmd, sizeof cmd, "podman exec %s_relay_1 sh -c 'kill -TERM 1'", s_project);
    sw_test_sh(cmd, 30, NULL);
    int restarted = 0;
    for (int i = 0; i < 60 && !restarted; i++) {
        snprintf(cmd, sizeof cmd,
                 "test \"$(podman inspect -f '{{.RestartCount}} {{.State.Status}}' %s_relay_1)\" "
                 "= '1 running'",
                 s_project);
        char *argv[] = {"/bin/sh", "-c", cmd, NULL};
        restarted = sw_test_run(argv, 30, NULL, NULL) == 0;
        if (!restarted)
            sleep(1);
    }
    SW_CHECK(restarted);
    n = s_generate(got, N_GEN, &drafted, &accepted);
    SW_CHECK_INT(n, n_ref);
    for (int i = 0; i < n && i < n_ref; i++)
        SW_CHECK_INT(got[i], ref[i]);
    /* podman kill counts as stopped by the user: no restart (the doc's caveat) */
    snprintf(cmd, sizeof cmd,
             "podman kill %s_tail_1 >/dev/null && sleep 8 && "
             "podman inspect -f '{{.RestartCount}} {{.State.Status}}' %s_tail_1",
             s_project, s_project);
    SW_CHECK_INT(sw_test_sh(cmd, 60, &out), 0);
    SW_CHECK(out && !strncmp(out, "0 exited", 8));
    free(out);
    out = NULL;

    /* 5. down, with the volumes, and the network. */
    SW_CHECK_INT(s_teardown(), 0);
    SW_CHECK_INT(s_nothing_left(s_project), 0);
    return sw_test_done();
}
