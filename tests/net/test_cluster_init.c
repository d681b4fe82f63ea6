/*
 * test_cluster_init.c - `shardwire cluster init` (cli/cluster.c): every file
 * it writes and its mode, the allow-list lines, keys that match across the
 * bundles, no sealing key on the relay, refusal to overwrite, --force, and a
 * clear line for each bad argument. Then a cluster started with the bundles'
 * own scripts (relay/start.sh, head/start.sh, tail/start.sh,
 * client/shardwire.sh) generates what `shardwire generate` does, and the
 * client's api.keys opens its `shardwire.sh serve` (200 with it, 401 without).
 */
#include "keys.h"
#include "sw_test.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char s_dir[1024];

static const char *s_p(const char *rel)
{
    static char buf[8][1200];
    static int slot;
    char *p = buf[slot++ & 7];
    snprintf(p, 1200, "%s/%s", s_dir, rel);
    return p;
}

static int s_mode(const char *rel)
{
    struct stat st;
    return stat(s_p(rel), &st) == 0 ? (int)(st.st_mode & 0777) : -1;
}

static int s_init(const char *extra, char **err)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s cluster init %s", sw_test_bin("shardwire"), extra);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    return sw_test_run(argv, 60, NULL, err);
}

/* The first 40-character line of a file (a key), or "". */
static const char *s_key(const char *rel)
{
    static char buf[4][64];
    static int slot;
    char *o = buf[slot++ & 3];
    o[0] = 0;
    char *t = sw_test_read_file(s_p(rel), NULL);
    for (char *l = t ? strtok(t, "\n") : NULL; l; l = strtok(NULL, "\n"))
        if (l[0] != '#' && strlen(l) == 40) {
            snprintf(o, 64, "%s", l);
            break;
        }
    free(t);
    return o;
}

int main(void)
{
    const char *model = sw_test_model();
    snprintf(s_dir, sizeof s_dir, "%s/keys", sw_test_tmpdir());
    int port = sw_test_free_port();
    char args[2048], *err = NULL;
    snprintf(args, sizeof args, "--relay 127.0.0.1:%d --nodes head,tail --out %s --model %s", port,
             s_dir, model);
    SW_CHECK_INT(s_init(args, NULL), 0);

    const char *files[] = {"README.txt",
                           "allow.txt",
                           "relay.pub",
                           "cluster.key",
                           "access.key",
                           "relay/relay.key",
                           "relay/relay.pub",
                           "relay/allow.txt",
                           "relay/relay.env",
                           "head/head.key",
                           "head/head.pub",
                           "head/relay.pub",
                           "head/cluster.key",
                           "head/access.key",
                           "head/node.env",
                           "head/kaggle-secrets.txt",
                           "tail/tail.key",
                           "tail/cluster.key",
                           "tail/node.env",
                           "head/allow.txt", /* a node's --listen --allow (issue 39) */
                           "tail/allow.txt",
                           "client/client.key",
                           "client/access.key",
                           "client/client.env",
                           "client/kaggle-secrets.txt",
                           "client/api.keys",
                           NULL};
    for (int i = 0; files[i]; i++)
        if (s_mode(files[i]) != 0600) {
            fprintf(stderr, "%s: mode %o\n", files[i], s_mode(files[i]));
            SW_CHECK(0);
        }
    SW_CHECK_INT(s_mode("head/start.sh"), 0700);
    SW_CHECK_INT(s_mode("client/shardwire.sh"), 0700);
    SW_CHECK_INT(s_mode(""), 0700);
    /* Sealing keys: nodes the cluster key, head and client the access key, the relay neither. */
    SW_CHECK_INT(s_mode("tail/access.key"), -1);
    SW_CHECK_INT(s_mode("client/cluster.key"), -1);
    SW_CHECK_INT(s_mode("relay/cluster.key"), -1);
    SW_CHECK_INT(s_mode("relay/access.key"), -1);
    SW_CHECK(strcmp(s_key("cluster.key"), s_key("head/cluster.key")) == 0);
    SW_CHECK(strcmp(s_key("cluster.key"), s_key("tail/cluster.key")) == 0);
    SW_CHECK(strcmp(s_key("access.key"), s_key("client/access.key")) == 0);
    SW_CHECK(strcmp(s_key("access.key"), s_key("cluster.key")) != 0);
    /* The relay's key pair matches the public key every bundle pins. */
    char pub[41], sec[41], e[512];
    SW_CHECK_INT(sw_keys_load_secret(s_p("relay/relay.key"), pub, sec, e, sizeof e), 0);
    SW_CHECK(strcmp(pub, s_key("relay.pub")) == 0 && strcmp(pub, s_key("head/relay.pub")) == 0);
    /* The allow-list: node keys bound to names and roles (issue 21, finding 9), the client key
     * with the client role. */
    char *allow = sw_test_read_file(s_p("relay/allow.txt"), NULL);
    char line[128];
    snprintf(line, sizeof line, "%s head head\n", s_key("head/head.pub"));
    SW_CHECK(allow && strstr(allow, line));
    snprintf(line, sizeof line, "%s stage tail\n", s_key("tail/tail.pub"));
    SW_CHECK(allow && strstr(allow, line));
    snprintf(line, sizeof line, "%s client client\n", s_key("client/client.pub"));
    SW_CHECK(allow && strstr(allow, line));
    free(allow);
    /* The even split of the model's 30 layers, and the env file's values. */
    char *sh = sw_test_read_file(s_p("tail/start.sh"), NULL);
    SW_CHECK(sh && strstr(sh, "layers=${SW_LAYERS:-15:30}"));
    free(sh);
    char *env = sw_test_read_file(s_p("head/node.env"), NULL);
    snprintf(line, sizeof line, "SHARDWIRE_KEY_HEAD='%s'", s_key("head/head.key"));
    SW_CHECK(env && strstr(env, line));
    free(env);

    /* Never over an existing folder without --force; with it, the keys change. */
    char head_pub[64];
    snprintf(head_pub, sizeof head_pub, "%s", s_key("head/head.pub"));
    SW_CHECK_INT(s_init(args, &err), 1);
    SW_CHECK(err && strstr(err, "--force"));
    free(err);
    err = NULL;
    SW_CHECK(strcmp(head_pub, s_key("head/head.pub")) == 0);
    FILE *f = fopen(s_p("mine.txt"), "w");
    if (f)
        fclose(f);
    char forced[2200];
    snprintf(forced, sizeof forced, "%s --force", args);
    SW_CHECK_INT(chmod(s_p(""), 0755), 0); /* opened up since: --force closes them again */
    SW_CHECK_INT(chmod(s_p("head"), 0755), 0);
    SW_CHECK_INT(s_init(forced, NULL), 0);
    SW_CHECK(strcmp(head_pub, s_key("head/head.pub")) != 0);
    SW_CHECK_INT(s_mode(""), 0700);
    SW_CHECK_INT(s_mode("head"), 0700);
    SW_CHECK_INT(s_mode("mine.txt"), 0644 & ~(int)umask(022)); /* left alone */

    /* Bad arguments: one clear line each, nothing written. */
    static const struct {
        const char *args, *says;
    } bad[] = {
        {"--relay nohost --nodes a,b --out X", "expected HOST:PORT"},
        {"--relay h:70000 --nodes a,b --out X", "expected HOST:PORT"},
        {"--relay h:1 --nodes a,a --out X", "given twice"},
        {"--relay h:1 --nodes 'a b' --out X", "is not a name"},
        {"--relay h:1 --nodes a,relay --out X", "'relay'"},
        {"--relay h:1 --nodes a,b --layers 0:3,4:8 --out X", "must start where"},
        {"--relay h:1 --nodes a,b --layers 0:3 --out X", "1 ranges for 2 nodes"},
        {"--relay h:1 --nodes a,b --model /nonexistent.gguf --out X", "/nonexistent.gguf"},
        {"--nodes a,b --out X", "are required"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char a[1400];
        const char *x = strstr(bad[i].args, "--out X");
        snprintf(a, sizeof a, "%.*s--out %s/bad", (int)(x - bad[i].args), bad[i].args,
                 sw_test_tmpdir());
        int rc = s_init(a, &err);
        SW_CHECK(rc == 1 || rc == 2);
        if (!err || !strstr(err, bad[i].says)) {
            fprintf(stderr, "%s: %s\n", bad[i].args, err ? err : "(nothing)");
            SW_CHECK(0);
        }
        free(err);
        err = NULL;
    }
    char bad_dir[1200];
    snprintf(bad_dir, sizeof bad_dir, "%s/bad", sw_test_tmpdir());
    SW_CHECK(access(bad_dir, F_OK) != 0);

    /* A cluster from the bundles' own scripts. */
    char bin[1024], ep[64], *out = NULL;
    snprintf(bin, sizeof bin, "%s", sw_test_env("SW_BIN_DIR"));
    setenv("SHARDWIRE_BIN", bin, 1);
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    char *ar[] = {"/bin/sh", (char *)s_p("relay/start.sh"), NULL};
    char *ah[] = {"/bin/sh", (char *)s_p("head/start.sh"), "--threads", "1", NULL};
    char *at[] = {"/bin/sh", (char *)s_p("tail/start.sh"), "--threads", "1", NULL};
    pid_t relay = sw_test_spawn(ar, sw_test_log("relay.log"));
    pid_t head = sw_test_spawn(ah, sw_test_log("head.log"));
    pid_t tail = sw_test_spawn(at, sw_test_log("tail.log"));
    char *as[] = {"/bin/sh",   (char *)s_p("client/shardwire.sh"),
                  "status",    "--expect",
                  "head,tail", "--connect-timeout-s",
                  "60",        NULL};
    SW_CHECK_INT(sw_test_run(as, 90, NULL, NULL), 0);
    char *arun[] = {"/bin/sh", (char *)s_p("client/shardwire.sh"), "run", "--greedy", "--json",
                    "-p",      "The capital of France is",         "-n",  "16",       NULL};
    SW_CHECK_INT(sw_test_run(arun, 120, &out, NULL), 0);
    int32_t got[16], ref[16];
    int n = out ? sw_test_json_tokens(out, got, 16) : -1;
    int n_ref = sw_test_generate(model, "The capital of France is", 16, ref, 16);
    SW_CHECK_INT(n, n_ref);
    for (int i = 0; i < n && i < n_ref; i++)
        SW_CHECK_INT(got[i], ref[i]);
    free(out);

    /* the client's api.keys is the HTTP API key of its `serve` (compose's serve service) */
    int hport = sw_test_free_port();
    char hlisten[64], hep[80], key_file[512], cmd[2048];
    snprintf(hlisten, sizeof hlisten, "127.0.0.1:%d", hport);
    snprintf(hep, sizeof hep, "tcp://%s", hlisten);
    snprintf(key_file, sizeof key_file, "%s", s_p("client/api.keys"));
    char *asv[] = {"/bin/sh", (char *)s_p("client/shardwire.sh"),
                   "serve",   "--listen",
                   hlisten,   "--api-key-file",
                   key_file,  NULL};
    pid_t serve = sw_test_spawn(asv, sw_test_log("serve.log"));
    SW_CHECK_INT(sw_test_wait_listen(hep, 60), 0);
    snprintf(cmd, sizeof cmd,
             "curl -s -o /dev/null -w '%%{http_code}' -H \"Authorization: Bearer $(grep -v '^#' "
             "'%s')\" http://%s/v1/models; echo; "
             "curl -s -o /dev/null -w '%%{http_code}' http://%s/v1/models",
             key_file, hlisten, hlisten);
    SW_CHECK_INT(sw_test_sh(cmd, 30, &out), 0);
    SW_CHECK(out && !strcmp(out, "200\n401"));
    if (out && strcmp(out, "200\n401"))
        fprintf(stderr, "serve with the bundle's api.keys: %s\n", out);
    free(out);
    sw_test_kill(serve);
    sw_test_kill(head);
    sw_test_kill(tail);
    sw_test_kill(relay);
    return sw_test_done();
}
