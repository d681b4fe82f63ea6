/*
 * test_args.c - the shared command line (base/args.h), in process:
 *  - the endpoint parser takes HOST:PORT and tcp://HOST:PORT alike, and for
 *    each way an endpoint can be wrong says exactly what is wrong;
 *  - the parser over a table of groups stores each group's values, answers
 *    abbreviations, and refuses unknown, ambiguous, value-less and
 *    valued-switch flags with one line naming the flag;
 *  - --greedy is temperature 0 without a repetition penalty, and later flags
 *    override it; the sampling defaults are the documented ones;
 *  - the help lists every option of every group, keys.h's security flags
 *    included (so a flag added to SW_SEC_LONGOPTS must come with its text in
 *    SW_SEC_USAGE).
 */
#include "sw_test.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "keys.h"

/* Runs fn with stderr going to a file; what it wrote into buf. */
static int s_stderr_begin(void)
{
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    int fd = open(sw_test_log("stderr.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, STDERR_FILENO);
    close(fd);
    return saved;
}

static void s_stderr_end(int saved, char *buf, size_t len)
{
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    char *t = sw_test_read_file(sw_test_log("stderr.txt"), NULL);
    snprintf(buf, len, "%s", t ? t : "");
    free(t);
}

/* sw_arg_endpoint on s: 0 or -1, the result in out, its error line in why. */
static int s_ep(const char *s, int listen, char *out, char *why)
{
    int saved = s_stderr_begin();
    int rc = sw_arg_endpoint("prog", "--relay", s, listen, out, SW_ARGS_ENDPOINT_MAX);
    s_stderr_end(saved, why, 512);
    return rc;
}

static void s_check_endpoints(void)
{
    static const struct {
        const char *in;
        int listen;
        const char *out; /* NULL: refused */
        const char *why; /* a piece of the error line */
    } cases[] = {
        {"127.0.0.1:5555", 0, "tcp://127.0.0.1:5555", NULL},
        {"tcp://127.0.0.1:5555", 0, "tcp://127.0.0.1:5555", NULL},
        {"relay.example.com:443", 0, "tcp://relay.example.com:443", NULL},
        {"[::1]:5555", 0, "tcp://[::1]:5555", NULL},
        {"tcp://[2001:db8::7]:5555", 0, "tcp://[2001:db8::7]:5555", NULL},
        {"0.0.0.0:5555", 1, "tcp://0.0.0.0:5555", NULL},
        {"*:5555", 1, "tcp://*:5555", NULL},
        {"127.0.0.1:*", 1, "tcp://127.0.0.1:*", NULL},
        {"127.0.0.1:0", 1, "tcp://127.0.0.1:0", NULL},
        {"ipc:///tmp/sw.sock", 0, "ipc:///tmp/sw.sock", NULL},
        {"", 0, NULL, "is empty"},
        {"127.0.0.1", 0, NULL, "no port"},
        {"tcp://127.0.0.1", 0, NULL, "no port"},
        {"127.0.0.1:", 0, NULL, "no port after the ':'"},
        {":5555", 0, NULL, "no host"},
        {"127.0.0.1:0", 0, NULL, "the port 0 is not in 1..65535"},
        {"127.0.0.1:65536", 0, NULL, "the port 65536 is not in 1..65535"},
        {"127.0.0.1:55x", 0, NULL, "the port '55x' is not a number"},
        {"tcp://host:5555/path", 0, NULL, "is not a number"},
        {"udp://127.0.0.1:5555", 0, NULL, "'udp://' is not a transport"},
        {"http://relay:80", 0, NULL, "'http://' is not a transport"},
        {"::1:5555", 0, NULL, "an IPv6 address needs brackets"},
        {"[::1:5555", 0, NULL, "no closing ']'"},
        {"[::1]5555", 0, NULL, "expected ':' and a port after the ']'"},
        {"*:5555", 0, NULL, "only for a listening address"},
        {"127.0.0.1:*", 0, NULL, "is not a number"},
        {"my host:5555", 0, NULL, "the host holds ' '"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[SW_ARGS_ENDPOINT_MAX] = "", why[512] = "";
        int rc = s_ep(cases[i].in, cases[i].listen, out, why);
        if (cases[i].out) {
            SW_CHECK_INT(rc, 0);
            SW_CHECK(!strcmp(out, cases[i].out));
            SW_CHECK(!why[0]);
        } else {
            SW_CHECK_INT(rc, -1);
            /* one line: the program, the flag, the value, what is wrong, the form */
            int ok = !strncmp(why, "prog: --relay ", 14) && strstr(why, cases[i].why) &&
                     strstr(why, "HOST:PORT or tcp://HOST:PORT") &&
                     strchr(why, '\n') == why + strlen(why) - 1;
            SW_CHECK(ok);
            if (!ok)
                fprintf(stderr, "'%s': got '%s', expected '%s'\n", cases[i].in, why, cases[i].why);
        }
    }
    char why[512];
    SW_CHECK(s_ep("tcp://127.0.0.1", 0, (char[SW_ARGS_ENDPOINT_MAX]){0}, why) == -1);
    printf("e.g. %s", why);
}

static const sw_opt_t s_own[] = {{"name", SW_OPT_OWN, "NAME", "a name"},
                                 {"flag", SW_OPT_OWN + 1, NULL, "a switch"}};

static const sw_opt_group_t s_groups[] = {
    SW_ARGS_GROUP(NULL, s_own), SW_ARGS_GROUP_MODEL, SW_ARGS_GROUP_REQUEST,  SW_ARGS_GROUP_SAMPLING,
    SW_ARGS_GROUP_DRAFT,        SW_ARGS_GROUP_RELAY, SW_ARGS_GROUP_SECURITY,
};

static const sw_args_spec_t s_spec = {
    .prog = "prog cmd",
    .usage = "[options]",
    .groups = s_groups,
    .n_groups = SW_ARGS_COUNT(s_groups),
};

struct s_vals {
    sw_args_model_t m;
    sw_args_request_t rq;
    sw_sampling_t sp;
    sw_args_draft_t d;
    sw_args_relay_t r;
    sw_sec_args_t sec;
    const char *name;
    int flag;
    int first_arg;
};

/* Parses a NULL-terminated argv; what sw_args_next ended with (SW_ARGS_END on
 * success, -100 when a handler refused a value), stderr in err. */
static int s_parse(char **argv, struct s_vals *v, char *err, size_t err_len)
{
    int argc = 0;
    while (argv[argc])
        argc++;
    *v = (struct s_vals){.m = SW_ARGS_MODEL_DEFAULT,
                         .rq = SW_ARGS_REQUEST_DEFAULT,
                         .sp = sw_args_sampling_default(),
                         .d = SW_ARGS_DRAFT_DEFAULT,
                         .r = SW_ARGS_RELAY_DEFAULT};
    int saved = s_stderr_begin();
    sw_args_t a;
    sw_args_init(&a, &s_spec, argc, argv);
    const char *val;
    int c;
    while ((c = sw_args_next(&a, &val)) >= 0) {
        int h = sw_args_model_opt("prog cmd", &v->m, c, val);
        if (!h)
            h = sw_args_request_opt("prog cmd", &v->rq, c, val);
        if (!h)
            h = sw_args_sampling_opt("prog cmd", &v->sp, c, val);
        if (!h)
            h = sw_args_draft_opt("prog cmd", &v->d, c, val);
        if (!h)
            h = sw_args_relay_opt("prog cmd", &v->r, c, val);
        if (!h)
            h = sw_sec_args_opt(&v->sec, c, val);
        if (!h && c == SW_OPT_OWN) {
            v->name = val;
            h = 1;
        }
        if (!h && c == SW_OPT_OWN + 1)
            h = v->flag = 1;
        if (h <= 0) {
            c = -100;
            break;
        }
    }
    v->first_arg = a.first_arg;
    s_stderr_end(saved, err, err_len);
    return c;
}

static void s_check_parser(void)
{
    struct s_vals v;
    char err[8192];
    char *ok[] = {"cmd",
                  "-m",
                  "m.gguf",
                  "-t",
                  "3",
                  "--ctx=4096",
                  "--back",
                  "cuda:1",
                  "-p",
                  "hello",
                  "-n",
                  "7",
                  "--chat",
                  "--greedy",
                  "--temp",
                  "0.5",
                  "--seed",
                  "0x10",
                  "--draft",
                  "mix",
                  "--draft-k",
                  "auto",
                  "--draft-model",
                  "d.gguf",
                  "--relay",
                  "10.0.0.1:5555",
                  "--connect-timeout-s",
                  "0",
                  "--name",
                  "n1",
                  "--flag",
                  "--key",
                  "k.key",
                  "--cluster-key",
                  "c1",
                  "--cluster-key",
                  "c2",
                  "rest",
                  NULL};
    SW_CHECK_INT(s_parse(ok, &v, err, sizeof err), SW_ARGS_END);
    SW_CHECK(!err[0]);
    SW_CHECK(v.m.model && !strcmp(v.m.model, "m.gguf") && v.m.threads == 3 && v.m.n_ctx == 4096);
    SW_CHECK(v.m.backend && !strcmp(v.m.backend, "cuda:1")); /* --back: an abbreviation */
    SW_CHECK(v.rq.prompt && !strcmp(v.rq.prompt, "hello") && v.rq.n_predict == 7 && v.rq.chat);
    /* --greedy then --temp 0.5: the temperature of the later flag, no penalty */
    SW_CHECK(v.sp.temp == 0.5f && v.sp.rep_penalty == 1.0f && v.sp.seed == 16);
    SW_CHECK(v.d.mode && !strcmp(v.d.mode, "mix") && v.d.k == -1 && !strcmp(v.d.model, "d.gguf"));
    SW_CHECK(!strcmp(v.r.relay, "tcp://10.0.0.1:5555") && v.r.connect_s == 0);
    SW_CHECK(v.name && !strcmp(v.name, "n1") && v.flag);
    SW_CHECK(v.sec.key_file && !strcmp(v.sec.key_file, "k.key"));
    SW_CHECK(v.sec.cluster_key[0] && v.sec.cluster_key[1] && !strcmp(v.sec.cluster_key[1], "c2"));
    SW_CHECK(v.first_arg == 37 && !strcmp(ok[v.first_arg], "rest"));

    /* no argument at all: the whole usage on stderr, a usage error */
    char *nothing[] = {"cmd", NULL};
    SW_CHECK_INT(s_parse(nothing, &v, err, sizeof err), SW_ARGS_BAD);
    SW_CHECK(!strncmp(err, "usage: prog cmd [options]\n", 26) && strstr(err, "--greedy"));

    /* the defaults, as args.h documents them */
    char *none[] = {"cmd", "operand", NULL};
    SW_CHECK_INT(s_parse(none, &v, err, sizeof err), SW_ARGS_END);
    SW_CHECK(v.first_arg == 1);
    SW_CHECK(v.sp.temp == 0.8f && v.sp.top_k == 40 && v.sp.top_p == 0.95f && v.sp.min_p == 0.05f &&
             v.sp.rep_penalty == 1.1f && v.sp.rep_last_n == 64 && v.sp.seed == 0x5eed);
    SW_CHECK(v.rq.n_predict == 128 && v.m.n_ctx == 0 /* the model's */ && v.d.k == -1 &&
             v.d.k_max == 16);
    SW_CHECK(!v.d.mode && !v.r.relay[0] && v.r.connect_s == -1);
    char *greedy[] = {"cmd", "--greedy", NULL};
    SW_CHECK_INT(s_parse(greedy, &v, err, sizeof err), SW_ARGS_END);
    SW_CHECK(v.sp.temp == 0 && v.sp.rep_penalty == 1.0f && v.sp.top_k == 40);

    static const struct {
        const char *a1, *a2;
        int rc;
        const char *why;
    } bad[] = {
        {"--nope", NULL, SW_ARGS_BAD, "unknown option '--nope'"},
        {"--nope=3", NULL, SW_ARGS_BAD, "unknown option '--nope'"},
        {"-x", NULL, SW_ARGS_BAD, "unknown option '-x'"},
        {"--dr", NULL, SW_ARGS_BAD,
         "is ambiguous: --draft, --draft-k, --draft-tree, --draft-ahead"},
        {"--relay", NULL, SW_ARGS_BAD, "option '--relay' needs a value"},
        {"-m", NULL, SW_ARGS_BAD, "option '-m' needs a value"},
        {"--chat=yes", NULL, SW_ARGS_BAD, "option '--chat' takes no value"},
        {"--relay", "127.0.0.1", -100, "--relay '127.0.0.1': no port"},
        {"-n", "0", -100, "-n '0' is not an integer in [1, 1048576]"},
        {"-p", "", -100, "the prompt is empty"},
        {"--top-p", "0", -100, "--top-p '0' must be above 0"},
        {"--draft", "fast", -100, "--draft 'fast' must be model, ngram, mix, none or auto"},
        {"--seed", "-1", -100, "--seed '-1' is not an unsigned 64-bit integer"},
        {"--cluster-key", "a", 0, NULL}, /* below: a third one is refused by keys.c */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (!bad[i].why)
            continue;
        char *argv[] = {"cmd", (char *)bad[i].a1, (char *)bad[i].a2, NULL};
        int rc = s_parse(argv, &v, err, sizeof err);
        int good = rc == bad[i].rc && strstr(err, bad[i].why) &&
                   strchr(err, '\n') == err + strlen(err) - 1 && !strncmp(err, "prog cmd", 8) &&
                   (rc != SW_ARGS_BAD || strstr(err, "(see 'prog cmd --help')"));
        SW_CHECK(good);
        if (!good)
            fprintf(stderr, "%s %s: rc %d, said '%s', expected '%s'\n", bad[i].a1,
                    bad[i].a2 ? bad[i].a2 : "", rc, err, bad[i].why);
    }
    char *three[] = {"cmd", "--cluster-key", "a", "--cluster-key", "b", "--cluster-key", "c", NULL};
    SW_CHECK_INT(s_parse(three, &v, err, sizeof err), -100);
    SW_CHECK(err[0] && strchr(err, '\n') == err + strlen(err) - 1);

    /* --help and --version end the parse with SW_ARGS_QUIT (exit 0) */
    int saved = dup(STDOUT_FILENO), fd = open("/dev/null", O_WRONLY);
    fflush(stdout);
    dup2(fd, STDOUT_FILENO);
    char *help[] = {"cmd", "--help", NULL}, *ver[] = {"cmd", "-V", NULL};
    int rh = s_parse(help, &v, err, sizeof err), rv = s_parse(ver, &v, err, sizeof err);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    close(fd);
    SW_CHECK(rh == SW_ARGS_QUIT && rv == SW_ARGS_QUIT);
    SW_CHECK_INT(sw_args_exit(SW_ARGS_QUIT), 0);
    SW_CHECK_INT(sw_args_exit(SW_ARGS_BAD), 2);
}

/* Every option of every group is in the help, with its short name. */
static void s_check_usage(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    SW_CHECK(f != NULL);
    if (!f)
        return;
    sw_args_usage(&s_spec, f);
    fclose(f);
    int n = 0;
    for (int g = 0; g < s_spec.n_groups; g++) {
        const sw_opt_group_t *gr = &s_spec.groups[g];
        for (int i = 0; gr->opts && i < gr->n; i++, n++) {
            char want[96];
            if (gr->opts[i].key < 128)
                snprintf(want, sizeof want, "-%c, --%s", gr->opts[i].key, gr->opts[i].name);
            else
                snprintf(want, sizeof want, "  --%s", gr->opts[i].name);
            SW_CHECK(strstr(text, want) != NULL);
        }
        for (const struct option *r = gr->raw; r && r->name; r++, n++) {
            char want[96];
            snprintf(want, sizeof want, "  --%s ", r->name);
            SW_CHECK(strstr(text, want) != NULL);
            if (!strstr(text, want))
                fprintf(stderr, "SW_SEC_LONGOPTS has --%s, SW_SEC_USAGE does not\n", r->name);
        }
    }
    SW_CHECK(strstr(text, "-h, --help") && strstr(text, "-V, --version"));
    printf("help: %d options in %d groups\n", n, s_spec.n_groups);
    SW_CHECK(n >= SW_OPTS_MODEL_N + SW_OPTS_SAMPLING_N + SW_OPTS_DRAFT_N + 4);
    free(text);
    SW_CHECK(strlen(sw_version()) >= 5);
}

/* --relay A,B (issue 39): lists, repeated flags, the bound, duplicates; the loopback rule and
 * the relay keys hold for every entry. */
static void s_check_relays(void)
{
    char out[SW_ARGS_RELAYS_MAX] = "", why[512], one[SW_ARGS_ENDPOINT_MAX];
    int saved = s_stderr_begin();
    SW_CHECK_INT(sw_arg_relays("prog", "127.0.0.1:5555,tcp://[::1]:5556", out, sizeof out), 0);
    s_stderr_end(saved, why, sizeof why);
    SW_CHECK(!strcmp(out, "tcp://127.0.0.1:5555,tcp://[::1]:5556"));
    SW_CHECK_INT(sw_relay_at(out, 1 << 30, NULL, 0), 2);
    SW_CHECK_INT(sw_relay_at(out, 1, one, sizeof one), 1);
    SW_CHECK(!strcmp(one, "tcp://[::1]:5556"));
    SW_CHECK_INT(sw_endpoint_is_loopback(out), 1);
    saved = s_stderr_begin(); /* a repeated --relay appends */
    SW_CHECK_INT(sw_arg_relays("prog", "203.0.113.5:5555", out, sizeof out), 0);
    s_stderr_end(saved, why, sizeof why);
    SW_CHECK_INT(sw_relay_at(out, 1 << 30, NULL, 0), 3);
    SW_CHECK_INT(sw_endpoint_is_loopback(out), 0); /* one relay is not loopback */
    saved = s_stderr_begin();
    SW_CHECK_INT(sw_arg_relays("prog", "127.0.0.1:5555", out, sizeof out), -1);
    s_stderr_end(saved, why, sizeof why);
    SW_CHECK(strstr(why, "twice") != NULL);
    saved = s_stderr_begin();
    SW_CHECK_INT(sw_arg_relays("prog", "h:7,h:8", out, sizeof out), -1);
    s_stderr_end(saved, why, sizeof why);
    SW_CHECK(strstr(why, "SW_PEER_MAX_RELAYS") != NULL);
    saved = s_stderr_begin();
    out[0] = 0;
    SW_CHECK_INT(sw_arg_relays("prog", "h:7,,h:8", out, sizeof out), -1);
    s_stderr_end(saved, why, sizeof why);
    SW_CHECK(strstr(why, "empty") != NULL);
    /* one key per relay, in order */
    sw_sec_args_t a = {.key_file = "/nonexistent.key",
                       .relay_key = "K1",
                       .role = SW_SEC_CLIENT,
                       .e2e_optional = 1};
    sw_sec_t sec;
    char err[512];
    SW_CHECK_INT(sw_sec_load(&a, "tcp://h:1,tcp://h:2", &sec, err, sizeof err), -1);
    SW_CHECK(strstr(err, "2 relays but 1 relay keys") != NULL);
}

int main(void)
{
    s_check_relays();
    s_check_endpoints();
    s_check_parser();
    s_check_usage();
    return sw_test_done();
}
