/*
 * test_compose.c - the Docker compose cluster of deploy/docker, run for real
 * with podman (label slow; 3-6 minutes, more the first time a machine makes
 * its base image):
 *
 *  1. scripts/containers.sh installs podman, podman-compose, runc and
 *     docker-compose and makes the Debian base image from the Debian archive
 *     (no registry is reached);
 *  2. the image is built from deploy/docker/Dockerfile (podman build --pull=never);
 *  3. docker-compose validates compose.yaml's cpu and gpu profiles: the GPU
 *     nodes use the CUDA image and reserve an NVIDIA GPU
 *     (deploy.resources.reservations.devices, capabilities [gpu]);
 *  4. podman-compose brings up init (the keys, with `shardwire cluster init`,
 *     into the keys volume), the relay, the head and the tail with the model
 *     from the repo's cache mounted as a volume; the healthchecks pass; the
 *     client service generates, greedily, exactly what `shardwire generate`
 *     gives for the same model and prompt;
 *  5. the relay's process ends: the restart policy brings it back, the nodes
 *     reconnect and a second generation is again identical;
 *  6. everything is torn down (containers, volumes, network).
 */
#include "sw_test.h"

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

/* The tokens of the client service's `run --json`, through the compose file. */
static int s_generate(int32_t *ids, int max)
{
    char args[512], *out = NULL;
    snprintf(args, sizeof args,
             "run --no-deps --rm client run --greedy --json -p '%s' -n %d --connect-timeout-s 120",
             s_prompt, N_GEN);
    int rc = s_compose_cmd(args, 300, &out);
    int n = rc == 0 && out ? sw_test_json_tokens(out, ids, max) : -1;
    if (n < 0)
        fprintf(stderr, "client output: %s\n", out ? out : "(none)");
    free(out);
    return n;
}

static int s_teardown(void)
{
    char cmd[256];
    int rc = s_compose_cmd("down -v", 300, NULL);
    snprintf(cmd, sizeof cmd, "podman network rm -f %s_default >/dev/null 2>&1; true", s_project);
    sw_test_sh(cmd, 60, NULL);
    return rc;
}

int main(void)
{
    const char *model = sw_test_model();
    snprintf(s_src, sizeof s_src, "%s", sw_test_env("SW_SOURCE_DIR"));
    snprintf(s_compose, sizeof s_compose, "%s/deploy/docker/compose.yaml", s_src);
    snprintf(s_project, sizeof s_project, "swtest%d", (int)getpid());

    /* 1. podman and the base image, through the repo's script. */
    char cmd[PATH_MAX * 2], *out = NULL;
    snprintf(cmd, sizeof cmd, "bash %s/scripts/containers.sh", s_src);
    SW_CHECK_INT(sw_test_sh(cmd, 900, &out), 0);
    char *conf = out ? strstr(out, "export CONTAINERS_CONF=") : NULL;
    SW_CHECK(conf != NULL);
    if (!conf)
        return sw_test_done();
    conf += strlen("export CONTAINERS_CONF=");
    conf[strcspn(conf, "\n")] = 0;
    setenv("CONTAINERS_CONF", conf, 1);
    free(out);

    /* The compose file's settings: a test image name, the model from the repo's cache. */
    char mdir[PATH_MAX], mbase[PATH_MAX], mpath[PATH_MAX + 16], tmp[PATH_MAX];
    SW_CHECK(realpath(model, mdir) != NULL);
    snprintf(tmp, sizeof tmp, "%s", mdir);
    snprintf(mbase, sizeof mbase, "%s", basename(tmp));
    snprintf(tmp, sizeof tmp, "%s", mdir);
    snprintf(mdir, sizeof mdir, "%s", dirname(tmp));
    snprintf(mpath, sizeof mpath, "/models/%s", mbase);
    setenv("SW_IMAGE", "localhost/shardwire:test", 1);
    setenv("SW_MODELS_DIR", mdir, 1);
    setenv("SW_MODEL", mpath, 1);
    setenv("SW_THREADS", "1", 1);

    /* 2. the image, from the Dockerfile (Debian's archive is the only network use). */
    snprintf(cmd, sizeof cmd,
             "cd %s && podman build -q --pull=never --build-arg SW_BUILD_JOBS=2 "
             "-f deploy/docker/Dockerfile -t localhost/shardwire:test .",
             s_src);
    SW_CHECK_INT(sw_test_sh(cmd, 1200, NULL), 0);
    SW_CHECK_INT(sw_test_sh("podman run --rm localhost/shardwire:test shardwire --help", 60, &out),
                 0);
    SW_CHECK(out && strstr(out, "cluster"));
    free(out);
    out = NULL;
    /* The runtime image holds the programs and runtime libraries, no compiler. */
    SW_CHECK_INT(sw_test_sh("podman run --rm --entrypoint sh localhost/shardwire:test -c "
                            "'command -v shardwire-relay shardwire-node && ! command -v cc && "
                            "! command -v cmake && [ \"$(id -u)\" = 10001 ]'",
                            60, NULL),
                 0);

    /* 3. both profiles validate; the GPU one reserves NVIDIA GPUs for the nodes. */
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

    /* 4. the cluster, with the keys cluster init writes. */
    int32_t ref[N_GEN], got[N_GEN];
    int n_ref = sw_test_generate(model, s_prompt, N_GEN, ref, N_GEN);
    SW_CHECK_INT(n_ref, N_GEN);

    /* podman-compose 1.0 has no profiles: the cpu profile's services by name. */
    SW_CHECK_INT(s_compose_cmd("up -d --no-build init relay head tail", 300, NULL), 0);
    int n = s_generate(got, N_GEN);
    SW_CHECK_INT(n, n_ref);
    for (int i = 0; i < n && i < n_ref; i++)
        SW_CHECK_INT(got[i], ref[i]);
    /* The healthchecks (podman runs them on demand where no systemd schedules them). */
    const char *svcs[] = {"relay", "head", "tail"};
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "podman healthcheck run %s_%s_1", s_project, svcs[i]);
        SW_CHECK_INT(sw_test_sh(cmd, 60, NULL), 0);
    }
    /* The keys came from the init service into the volume, mode 0600, not from the image. */
    snprintf(cmd, sizeof cmd,
             "podman exec %s_head_1 sh -c 'stat -c %%a /keys/cluster/head/head.key; "
             "grep -c \" node head$\" /keys/cluster/relay/allow.txt'",
             s_project);
    SW_CHECK_INT(sw_test_sh(cmd, 60, &out), 0);
    SW_CHECK(out && strncmp(out, "600\n1\n", 6) == 0);
    free(out);
    out = NULL;

    /* 5. the relay's process ends; restart: unless-stopped brings it back. */
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
    n = s_generate(got, N_GEN);
    SW_CHECK_INT(n, n_ref);
    for (int i = 0; i < n && i < n_ref; i++)
        SW_CHECK_INT(got[i], ref[i]);

    /* 6. down, with the volumes. */
    SW_CHECK_INT(s_teardown(), 0);
    snprintf(cmd, sizeof cmd,
             "test -z \"$(podman ps -aq --filter label=io.podman.compose.project=%s)\" "
             "&& ! podman volume exists %s_keys",
             s_project, s_project);
    SW_CHECK_INT(sw_test_sh(cmd, 60, NULL), 0);
    return sw_test_done();
}
