/*
 * test_cli.c - the command line of every built program and command, run as a
 * user would:
 *  - `--help` and `-h` exit 0 and print the usage on stdout (nothing on
 *    stderr); no line of it is wider than 100 columns;
 *  - `--version` and `-V` exit 0 and print "PROGRAM VERSION", the one version
 *    CMake configured (SW_VERSION);
 *  - no arguments at all: exit 2 with the usage on stderr;
 *  - an unknown flag exits 2 with one line that names the flag and points to
 *    --help; a flag in the help that takes a value, given none, says so (so
 *    every flag the help lists is one the parser knows);
 *  - every flag that README.md and the .md pages of docs/ use on a command line of a
 *    program appears in that program's --help (documentation and programs
 *    agree).
 */
#include "sw_test.h"

#include <ctype.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

struct s_prog {
    const char *bin;  /* file in SW_BIN_DIR */
    const char *cmd;  /* subcommand ("cluster init": two words), or NULL */
    const char *name; /* what --version starts with */
    char *help;       /* its --help output */
};

static struct s_prog s_progs[] = {
    {"shardwire", NULL, "shardwire", NULL},
    {"shardwire", "generate", "shardwire", NULL},
    {"shardwire", "run", "shardwire", NULL},
    {"shardwire", "serve", "shardwire", NULL},
    {"shardwire", "status", "shardwire", NULL},
    {"shardwire", "info", "shardwire", NULL},
    {"shardwire", "keygen", "shardwire", NULL},
    {"shardwire", "pull", "shardwire", NULL},
    {"shardwire", "plan", "shardwire", NULL},
    {"shardwire", "cluster init", "shardwire", NULL},
    {"shardwire-node", NULL, "shardwire-node", NULL},
    {"shardwire-relay", NULL, "shardwire-relay", NULL},
    {"shardwire-wanem", NULL, "shardwire-wanem", NULL},
    {"shardwire-mkmodel", NULL, "shardwire-mkmodel", NULL},
    {"shardwire-mksplit", NULL, "shardwire-mksplit", NULL},
};
#define S_N_PROGS ((int)(sizeof s_progs / sizeof s_progs[0]))

/* Runs the program with up to two arguments; exit code, output in *out / *err. */
static int s_run(const struct s_prog *p, const char *a1, const char *a2, char **out, char **err)
{
    char *argv[6], cmd[32] = "";
    int k = 0;
    argv[k++] = (char *)sw_test_bin(p->bin);
    if (p->cmd) {
        snprintf(cmd, sizeof cmd, "%s", p->cmd);
        char *sp = strchr(cmd, ' ');
        argv[k++] = cmd;
        if (sp) {
            *sp = 0;
            argv[k++] = sp + 1;
        }
    }
    if (a1)
        argv[k++] = (char *)a1;
    if (a2)
        argv[k++] = (char *)a2;
    argv[k] = NULL;
    return sw_test_run(argv, 30, out, err);
}

static const char *s_label(const struct s_prog *p, char *buf, size_t len)
{
    snprintf(buf, len, "%s%s%s", p->bin, p->cmd ? " " : "", p->cmd ? p->cmd : "");
    return buf;
}

/* 1 when help lists --flag (followed by a space, '=', ',' or the line's end). */
static int s_in_help(const char *help, const char *flag)
{
    size_t n = strlen(flag);
    for (const char *at = help; (at = strstr(at, flag)) != NULL; at += n) {
        char before = at == help ? ' ' : at[-1];
        char after = at[n];
        if ((before == ' ' || before == '[') && (after == ' ' || after == '\n' || after == ',' ||
                                                 after == '=' || after == ']' || after == 0))
            return 1;
    }
    return 0;
}

static void s_check_basics(struct s_prog *p)
{
    char label[64], *out = NULL, *err = NULL;
    s_label(p, label, sizeof label);
    const char *version = sw_test_env("SW_VERSION");

    int rc = s_run(p, "--help", NULL, &out, &err);
    SW_CHECK_INT(rc, 0);
    SW_CHECK(out && !strncmp(out, "usage: ", 7));
    SW_CHECK(err && !err[0]);
    for (const char *l = out; l && *l;) {
        size_t n = strcspn(l, "\n");
        if (n > 100)
            fprintf(stderr, "%s --help: a line of %zu columns: %.*s\n", label, n, (int)n, l);
        SW_CHECK(n <= 100);
        l += n + (l[n] == '\n');
    }
    p->help = out;
    free(err);

    out = err = NULL;
    rc = s_run(p, "-h", NULL, &out, &err);
    SW_CHECK_INT(rc, 0);
    SW_CHECK(out && p->help && !strcmp(out, p->help));
    free(out);
    free(err);

    for (int v = 0; v < 2; v++) {
        char want[256];
        snprintf(want, sizeof want, "%s %s\n", p->name, version);
        out = err = NULL;
        rc = s_run(p, v ? "-V" : "--version", NULL, &out, &err);
        SW_CHECK_INT(rc, 0);
        if (!out || strcmp(out, want))
            fprintf(stderr, "%s --version: '%s', expected '%s'\n", label, out ? out : "", want);
        SW_CHECK(out && !strcmp(out, want));
        free(out);
        free(err);
    }

    /* nothing: the usage on stderr, exit 2 */
    out = err = NULL;
    rc = s_run(p, NULL, NULL, &out, &err);
    SW_CHECK_INT(rc, 2);
    SW_CHECK(err && strstr(err, "usage: ") != NULL);
    SW_CHECK(out && !out[0]);
    free(out);
    free(err);

    /* an unknown flag: one line naming it and pointing to --help */
    out = err = NULL;
    rc = s_run(p, "--no-such-flag", NULL, &out, &err);
    SW_CHECK_INT(rc, 2);
    SW_CHECK(err && strstr(err, "'--no-such-flag'") && strstr(err, "--help"));
    SW_CHECK(err && strchr(err, '\n') == err + strlen(err) - 1);
    SW_CHECK(err && !strncmp(err, label, strlen(p->bin)));
    if (err && strchr(err, '\n') != err + strlen(err) - 1)
        fprintf(stderr, "%s --no-such-flag said:\n%s", label, err);
    free(out);
    free(err);
}

/* Every flag the help lists is known to the parser: given alone it is never
 * "unknown"; one that takes a value says it needs one. */
static void s_check_help_flags(const struct s_prog *p)
{
    if (!p->help || (!p->cmd && !strcmp(p->bin, "shardwire")))
        return; /* the top level lists commands, not flags */
    char label[64];
    s_label(p, label, sizeof label);
    int n_flags = 0;
    for (const char *l = p->help; *l;) {
        size_t n = strcspn(l, "\n");
        const char *s = l;
        while (s < l + n && *s == ' ')
            s++;
        if (s > l && s + 3 < l + n && s[0] == '-' && s[1] != '-' && s[2] == ',')
            s += 4; /* "-m, --model" */
        if (s > l && s + 2 < l + n && s[0] == '-' && s[1] == '-' && isalpha((unsigned char)s[2])) {
            char flag[64];
            size_t fl = strcspn(s, " \n");
            snprintf(flag, sizeof flag, "%.*s", (int)(fl < 63 ? fl : 63), s);
            /* a value follows the flag's name on its line: "--model PATH" */
            const char *after = s + fl;
            int takes_value =
                after < l + n && after[0] == ' ' && after[1] != ' ' && after + 1 < l + n;
            if (strcmp(flag, "--help") && strcmp(flag, "--version")) {
                char *out = NULL, *err = NULL;
                int rc = s_run(p, flag, NULL, &out, &err);
                n_flags++;
                SW_CHECK(rc == 2 || rc == 1);
                SW_CHECK(err && !strstr(err, "unknown option"));
                if (takes_value)
                    SW_CHECK(err && strstr(err, "needs a value"));
                if (!err || strstr(err, "unknown option") ||
                    (takes_value && !strstr(err, "needs a value")))
                    fprintf(stderr, "%s %s (value: %d) said: %s", label, flag, takes_value,
                            err ? err : "");
                free(out);
                free(err);
            }
        }
        l += n + (l[n] == '\n');
    }
    printf("%-20s %2d flags in --help, each known to the parser\n", label, n_flags);
    SW_CHECK(n_flags > 0);
}

/* The program a command line in the docs invokes at s, or NULL; *len is the
 * length of the invocation's name (and subcommand). */
static struct s_prog *s_prog_at(const char *line, const char *s, size_t *len)
{
    if (s > line && (isalnum((unsigned char)s[-1]) || s[-1] == '-' || s[-1] == '_'))
        return NULL;
    if (strncmp(s, "shardwire", 9) != 0)
        return NULL;
    const char *e = s + 9;
    const char *bin_end = e;
    while (isalnum((unsigned char)*bin_end) || *bin_end == '-')
        bin_end++;
    size_t bl = (size_t)(bin_end - s);
    for (int i = 0; i < S_N_PROGS; i++) {
        struct s_prog *p = &s_progs[i];
        if (strlen(p->bin) != bl || strncmp(s, p->bin, bl) != 0)
            continue;
        if (!p->cmd) {
            if (strcmp(p->bin, "shardwire") != 0) {
                *len = bl;
                return p;
            }
            continue;
        }
        size_t cl = strlen(p->cmd);
        if (bin_end[0] == ' ' && !strncmp(bin_end + 1, p->cmd, cl) &&
            !isalnum((unsigned char)bin_end[1 + cl]) && bin_end[1 + cl] != '-') {
            *len = bl + 1 + cl;
            return p;
        }
    }
    return NULL;
}

/* Checks the flags of every invocation on one (joined) line of a document. */
static int s_check_doc_line(const char *doc, int line_no, const char *line)
{
    int n = 0;
    for (const char *s = line; *s; s++) {
        size_t len;
        struct s_prog *p = s_prog_at(line, s, &len);
        if (!p || !p->help)
            continue;
        const char *t = s + len;
        for (;;) {
            while (*t == ' ' || *t == '\t')
                t++;
            if (!*t || *t == '`' || *t == '|' || *t == ';' || *t == '&' || *t == '#' || *t == '>' ||
                *t == '<' || *t == ')')
                break;
            size_t tl = strcspn(t, " \t`|;&");
            char tok[96];
            snprintf(tok, sizeof tok, "%.*s", (int)(tl < 95 ? tl : 95), t);
            char *f = tok;
            while (*f == '[' || *f == '(' || *f == '"')
                f++;
            int other = 0;
            for (const char *q = t; q < t + tl && !other; q++) {
                size_t k;
                other = s_prog_at(line, q, &k) != NULL;
            }
            if (other)
                break; /* another program starts */
            if (f[0] == '-' && f[1] == '-' && isalpha((unsigned char)f[2])) {
                f[strcspn(f, "=[]),.:\"'")] = 0;
                n++;
                if (!s_in_help(p->help, f)) {
                    char label[64];
                    fprintf(stderr, "%s:%d: '%s %s' is not in its --help\n", doc, line_no,
                            s_label(p, label, sizeof label), f);
                    SW_CHECK(0);
                }
            }
            t += tl;
        }
    }
    return n;
}

static void s_check_docs(void)
{
    const char *src = sw_test_env("SW_SOURCE_DIR");
    char path[1024];
    int n_flags = 0, n_docs = 0;
    char docs[64][sizeof "docs/" + sizeof((struct dirent *)0)->d_name];
    int nd = 0;
    snprintf(docs[nd++], sizeof docs[0], "README.md");
    snprintf(path, sizeof path, "%.700s/docs", src);
    DIR *d = opendir(path);
    SW_CHECK(d != NULL);
    for (struct dirent *e; d && (e = readdir(d)) != NULL && nd < 64;) {
        size_t l = strlen(e->d_name);
        if (l > 3 && !strcmp(e->d_name + l - 3, ".md"))
            snprintf(docs[nd++], sizeof docs[0], "docs/%s", e->d_name);
    }
    if (d)
        closedir(d);
    for (int i = 0; i < nd; i++) {
        snprintf(path, sizeof path, "%.700s/%.300s", src, docs[i]);
        char *text = sw_test_read_file(path, NULL);
        SW_CHECK(text != NULL);
        if (!text)
            continue;
        n_docs++;
        /* lines, with shell continuations ("\" at the end) joined */
        int line_no = 1;
        for (char *l = text; *l;) {
            int first = line_no;
            char joined[4096];
            size_t jl = 0;
            for (;;) {
                size_t n = strcspn(l, "\n");
                int cont = n > 0 && l[n - 1] == '\\';
                size_t take = cont ? n - 1 : n;
                if (jl + take + 1 < sizeof joined) {
                    memcpy(joined + jl, l, take);
                    jl += take;
                    joined[jl++] = ' ';
                }
                l += n + (l[n] == '\n');
                line_no++;
                if (!cont || !*l)
                    break;
            }
            joined[jl] = 0;
            n_flags += s_check_doc_line(docs[i], first, joined);
        }
        free(text);
    }
    printf("%d documents, %d flags on their command lines checked against the programs' --help\n",
           n_docs, n_flags);
    SW_CHECK(n_docs >= 5 && n_flags >= 50);
}

int main(void)
{
    for (int i = 0; i < S_N_PROGS; i++)
        s_check_basics(&s_progs[i]);
    for (int i = 0; i < S_N_PROGS; i++)
        s_check_help_flags(&s_progs[i]);
    s_check_docs();

    /* the top level: an unknown command and an option before any command */
    char *out = NULL, *err = NULL;
    char *a1[] = {(char *)sw_test_bin("shardwire"), "frobnicate", NULL};
    SW_CHECK_INT(sw_test_run(a1, 30, &out, &err), 2);
    SW_CHECK(err && strstr(err, "'frobnicate'") && strstr(err, "--help"));
    free(out);
    free(err);
    out = err = NULL;
    char *a2[] = {(char *)sw_test_bin("shardwire"), "--relay", NULL};
    SW_CHECK_INT(sw_test_run(a2, 30, &out, &err), 2);
    SW_CHECK(err && strstr(err, "'--relay'") && strstr(err, "--help"));
    free(out);
    free(err);

    /* the relay benchmark runs with no arguments (its defaults), so only
     * --help, --version and an unknown flag are checked */
    const char *version = sw_test_env("SW_VERSION");
    char want[256];
    snprintf(want, sizeof want, "shardwire-relay-bench %s\n", version);
    const char *bargs[][2] = {{"--help", "usage: "}, {"-V", want}, {"--bogus", NULL}};
    for (int i = 0; i < 3; i++) {
        char *b[] = {(char *)sw_test_bin("shardwire-relay-bench"), (char *)bargs[i][0], NULL};
        out = err = NULL;
        const int rc = sw_test_run(b, 30, &out, &err);
        SW_CHECK_INT(rc, bargs[i][1] ? 0 : 2);
        if (bargs[i][1])
            SW_CHECK(out && !strncmp(out, bargs[i][1], strlen(bargs[i][1])));
        else
            SW_CHECK(err && strstr(err, "'--bogus'") && strstr(err, "--help"));
        free(out);
        free(err);
    }

    for (int i = 0; i < S_N_PROGS; i++)
        free(s_progs[i].help);
    return sw_test_done();
}
