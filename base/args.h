/*
 * args.h - the command line of every shardwire program.
 *
 * A program describes its options as groups (sw_opt_group_t): its own, and
 * the shared ones below, which give the same flag the same short and long
 * name, value range, default and help text everywhere:
 *
 *   model     -m/--model, -b/--backend, -t/--threads, -c/--ctx
 *   request   -p/--prompt, -n/--n-predict, --chat, --json
 *   sampling  --temp, --top-k, --top-p, --min-p, --repeat-penalty,
 *             --repeat-last-n, --seed, --greedy
 *   drafting  --draft, --draft-k, --draft-tree, --draft-ahead, --draft-model,
 *             --draft-k-max, --draft-p-min, --draft-threads, --draft-backend
 *   relay     --relay, --connect-timeout-s
 *   security  keys.h's SW_SEC_LONGOPTS with their SW_SEC_USAGE text, plugged
 *             in as a raw group (SW_ARGS_GROUP_SECURITY)
 *
 * A program that needs only the first options of a group takes them up to
 * a named one (SW_ARGS_SHARED_TO); no option count is written by hand.
 * sw_args_next() walks argv with getopt_long over the program's table and
 * answers -h/--help (every option of every group, from the table itself)
 * and -V/--version itself; an unknown flag, an ambiguous abbreviation, a
 * missing value or a value given to a switch gets one line on stderr that
 * names the flag and points to --help. Each group has a handler
 * (sw_args_*_opt) that takes the flags of its group and checks their values.
 *
 * Numbers and endpoints: sw_arg_int / sw_arg_double / sw_arg_float /
 * sw_arg_u64 / sw_arg_endpoint check a value and, when it is wrong, print one
 * line naming the program, the flag, the value and what is expected.
 *
 * Nothing here allocates; strings handed back point into argv.
 */
#ifndef SW_ARGS_H
#define SW_ARGS_H

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sw_limits.h"

/* ---- checked values ------------------------------------------------------------------- */

/* Integer (decimal, or 0x hex) into *out. 0, or -1 after the error line. */
int sw_arg_int(const char *prog, const char *flag, const char *s, long lo, long hi, int *out)
    __attribute__((warn_unused_result));
/* A layer range A:B (A < B; B may be 'end', stored as -1). 0, or -1 after the error line. */
int sw_arg_layers(const char *prog, const char *flag, const char *s, int *a, int *b)
    __attribute__((warn_unused_result));
/* Unsigned 64-bit integer (decimal, or 0x hex) into *out. 0, or -1 after the error line. */
int sw_arg_u64(const char *prog, const char *flag, const char *s, uint64_t *out)
    __attribute__((warn_unused_result));
/* Floating-point number into *out. 0, or -1 after the error line. */
int sw_arg_double(const char *prog, const char *flag, const char *s, double lo, double hi,
                  double *out) __attribute__((warn_unused_result));
int sw_arg_float(const char *prog, const char *flag, const char *s, double lo, double hi,
                 float *out) __attribute__((warn_unused_result));

#define SW_ARGS_ENDPOINT_MAX 256 /* bytes of a normalised endpoint, NUL included */
/* bytes of a normalised list of relays "tcp://A:1,tcp://B:2" (--relay A,B), NUL included */
#define SW_ARGS_RELAYS_MAX (SW_PEER_MAX_RELAYS * SW_ARGS_ENDPOINT_MAX)

/*
 * The one endpoint parser: HOST:PORT or tcp://HOST:PORT (HOST a name, an IPv4
 * address or a bracketed IPv6 address; PORT 1..65535) into out as
 * "tcp://HOST:PORT" (out_len >= SW_ARGS_ENDPOINT_MAX). With listen = 1 HOST
 * may also be '*' (every interface) and PORT '*' or 0 (any free port).
 * ipc:// and inproc:// endpoints pass unchanged. 0, or -1 after one line that
 * says exactly what is wrong (no port, a port out of range, another scheme,
 * an IPv6 address without brackets, ...).
 */
int sw_arg_endpoint(const char *prog, const char *flag, const char *s, int listen, char *out,
                    size_t out_len) __attribute__((warn_unused_result));

/* ---- option tables ---------------------------------------------------------------------- */

/* One option. A key below 128 is also the short option (-m); program-own
 * keys start at SW_OPT_OWN; the shared groups' keys are SW_OPT_* below. */
typedef struct sw_opt {
    const char *name; /* long name, without "--" */
    int key;          /* what sw_args_next() returns for it */
    const char *arg;  /* the value's name in --help ("PATH"), NULL = a switch */
    const char *help; /* help text; '\n' continues it on the next line */
} sw_opt_t;

typedef struct sw_opt_group {
    const char *title;        /* heading in --help, NULL = the program's own options */
    const sw_opt_t *opts;     /* the options, or NULL for a raw group */
    int n;                    /* how many of opts (all, or the first of a shared table) */
    const struct option *raw; /* a raw group: getopt_long entries ending with {0}, */
    const char *raw_help;     /* described by this text (keys.h's SW_SEC_*) */
} sw_opt_group_t;

typedef struct sw_args_spec {
    const char *prog;             /* "shardwire run": every message starts with it */
    const char *usage;            /* what follows "usage: PROG " */
    const char *about;            /* a paragraph under the usage line, or NULL */
    const sw_opt_group_t *groups; /* the program's option groups, */
    int n_groups;                 /* this many */
    const char *footer;           /* text after the options (environment, notes), or NULL */
} sw_args_spec_t;

enum {
    SW_OPT_OWN = 256, /* the first key of a program's own long-only options */
    SW_OPT_HELP = 'h',
    SW_OPT_VERSION = 'V',
    /* model */
    SW_OPT_MODEL = 'm',
    SW_OPT_BACKEND = 'b',
    SW_OPT_THREADS = 't',
    SW_OPT_CTX = 'c',
    /* request */
    SW_OPT_PROMPT = 'p',
    SW_OPT_NPREDICT = 'n',
    SW_OPT_CHAT = 0x5d00,
    SW_OPT_JSON,
    /* sampling */
    SW_OPT_TEMP = 0x5d10,
    SW_OPT_TOPK,
    SW_OPT_TOPP,
    SW_OPT_MINP,
    SW_OPT_REP,
    SW_OPT_REP_N,
    SW_OPT_SEED,
    SW_OPT_GREEDY,
    /* drafting */
    SW_OPT_DRAFT = 0x5d20,
    SW_OPT_DRAFT_K,
    SW_OPT_DRAFT_MODEL,
    SW_OPT_DRAFT_KMAX,
    SW_OPT_DRAFT_PMIN,
    SW_OPT_DRAFT_THREADS,
    SW_OPT_DRAFT_BACKEND,
    SW_OPT_DRAFT_TREE,
    SW_OPT_DRAFT_AHEAD,
    /* relay connection */
    SW_OPT_RELAY = 0x5d30,
    SW_OPT_CONNECT,
};

/*
 * The shared tables, and the index of each option in its table:
 * SW_OPTS_<GROUP>_<OPTION>, in table order, then SW_OPTS_<GROUP>_N, the
 * table's length (args.c asserts it and initialises each entry by its index).
 */
enum {
    SW_OPTS_MODEL_MODEL,
    SW_OPTS_MODEL_BACKEND,
    SW_OPTS_MODEL_THREADS,
    SW_OPTS_MODEL_CTX,
    SW_OPTS_MODEL_N
};
enum {
    SW_OPTS_REQUEST_PROMPT,
    SW_OPTS_REQUEST_N_PREDICT,
    SW_OPTS_REQUEST_CHAT,
    SW_OPTS_REQUEST_JSON,
    SW_OPTS_REQUEST_N
};
enum {
    SW_OPTS_SAMPLING_TEMP,
    SW_OPTS_SAMPLING_TOP_K,
    SW_OPTS_SAMPLING_TOP_P,
    SW_OPTS_SAMPLING_MIN_P,
    SW_OPTS_SAMPLING_REP,
    SW_OPTS_SAMPLING_REP_LAST_N,
    SW_OPTS_SAMPLING_SEED,
    SW_OPTS_SAMPLING_GREEDY,
    SW_OPTS_SAMPLING_N
};
enum {
    SW_OPTS_DRAFT_MODE,
    SW_OPTS_DRAFT_K,
    SW_OPTS_DRAFT_TREE,
    SW_OPTS_DRAFT_AHEAD,
    SW_OPTS_DRAFT_MODEL,
    SW_OPTS_DRAFT_K_MAX,
    SW_OPTS_DRAFT_P_MIN,
    SW_OPTS_DRAFT_THREADS,
    SW_OPTS_DRAFT_BACKEND,
    SW_OPTS_DRAFT_N
};
enum { SW_OPTS_RELAY_RELAY, SW_OPTS_RELAY_CONNECT, SW_OPTS_RELAY_N };
extern const sw_opt_t sw_opts_model[];    /* SW_OPTS_MODEL_N options */
extern const sw_opt_t sw_opts_request[];  /* SW_OPTS_REQUEST_N */
extern const sw_opt_t sw_opts_sampling[]; /* SW_OPTS_SAMPLING_N */
extern const sw_opt_t sw_opts_draft[];    /* SW_OPTS_DRAFT_N */
extern const sw_opt_t sw_opts_relay[];    /* SW_OPTS_RELAY_N */

/*
 * Group initializers; no option count is written by hand.
 *
 * SW_ARGS_GROUP(title, table): every option of a table whose length the
 * compiler sees (a program's own, defined in its file, no {0} at the end).
 * SW_ARGS_SHARED(title, GROUP): every option of a shared table (GROUP is
 * MODEL, REQUEST, SAMPLING, DRAFT or RELAY); SW_ARGS_GROUP_MODEL and the
 * others below are those with their usual titles.
 * SW_ARGS_SHARED_TO(title, GROUP, LAST): a shared table's options up to and
 * including SW_OPTS_<GROUP>_<LAST>, for a program that takes only the first
 * ones; a name that is not one of the group's does not compile, so the cut
 * stays inside the table.
 */
#define SW_ARGS_COUNT(table_) ((int)(sizeof(table_) / sizeof((table_)[0])))
#define SW_ARGS_GROUP_N_(title_, table_, n_)                                                       \
    {                                                                                              \
        .title = (title_), .opts = (table_), .n = (n_)                                             \
    }
#define SW_ARGS_GROUP(title_, table_) SW_ARGS_GROUP_N_(title_, table_, SW_ARGS_COUNT(table_))
#define SW_ARGS_SHARED(title_, group_)                                                             \
    SW_ARGS_GROUP_N_(title_, SW_ARGS_TABLE_##group_, SW_OPTS_##group_##_N)
#define SW_ARGS_SHARED_TO(title_, group_, last_)                                                   \
    SW_ARGS_GROUP_N_(title_, SW_ARGS_TABLE_##group_, SW_OPTS_##group_##_##last_ + 1)
#define SW_ARGS_TABLE_MODEL sw_opts_model
#define SW_ARGS_TABLE_REQUEST sw_opts_request
#define SW_ARGS_TABLE_SAMPLING sw_opts_sampling
#define SW_ARGS_TABLE_DRAFT sw_opts_draft
#define SW_ARGS_TABLE_RELAY sw_opts_relay
#define SW_ARGS_GROUP_MODEL SW_ARGS_SHARED("model", MODEL)
#define SW_ARGS_GROUP_REQUEST SW_ARGS_SHARED("request", REQUEST)
#define SW_ARGS_GROUP_SAMPLING SW_ARGS_SHARED("sampling", SAMPLING)
#define SW_ARGS_GROUP_DRAFT SW_ARGS_SHARED("speculative decoding", DRAFT)
#define SW_ARGS_GROUP_RELAY SW_ARGS_SHARED("relay", RELAY)
/* keys.h's security flags as a raw group; the file includes keys.h. */
#define SW_ARGS_GROUP_SECURITY                                                                     \
    {                                                                                              \
        .title = "security", .raw = (const struct option[]){SW_SEC_LONGOPTS, {0, 0, 0, 0}},        \
        .raw_help = SW_SEC_USAGE                                                                   \
    }

#define SW_ARGS_MAX 96 /* options of one program, --help and --version included */

/* The parser's state; fill with sw_args_init(). */
typedef struct sw_args {
    const sw_args_spec_t *spec;
    int argc;
    char **argv;
    struct option longs[SW_ARGS_MAX + 1]; /* getopt_long's table */
    char shorts[2 * SW_ARGS_MAX + 2];     /* getopt's short option string */
    int n_longs;                          /* entries of longs */
    int first_arg;                        /* after SW_ARGS_END: argv index of the first operand */
} sw_args_t;

enum {
    SW_ARGS_END = -1,  /* no more options: operands start at first_arg */
    SW_ARGS_QUIT = -2, /* --help or --version was printed: exit 0 */
    SW_ARGS_BAD = -3,  /* one line was printed: exit 2 */
};

/* Builds the tables of spec (which must outlive a). Asserts on a table too big
 * for SW_ARGS_MAX (a programmer error). */
void sw_args_init(sw_args_t *a, const sw_args_spec_t *spec, int argc, char **argv);
/* The next option's key with its value in *val (NULL for a switch), or
 * SW_ARGS_END / SW_ARGS_QUIT / SW_ARGS_BAD. A command line with no argument
 * at all gets the whole usage on stderr and SW_ARGS_BAD (every program needs
 * some). */
int sw_args_next(sw_args_t *a, const char **val);
/* The exit code for what sw_args_next() ended with: 0 for SW_ARGS_QUIT, else 2. */
int sw_args_exit(int rc);
/*
 * After the loop over sw_args_next(), which ended with c: -1 when the options
 * ended well and at most max_operands operands follow (from a->first_arg);
 * otherwise the exit code (0 after --help / --version, 2 after an error line,
 * "unexpected argument" included).
 */
int sw_args_finish(const sw_args_t *a, int c, int max_operands);
/* Prints the whole help of spec (to stdout for --help, stderr for a usage error). */
void sw_args_usage(const sw_args_spec_t *spec, FILE *f);
/* One usage error: "PROG: MESSAGE (see 'PROG --help')" on stderr. Returns SW_ARGS_BAD. */
int sw_args_fail(const sw_args_spec_t *spec, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The version: the project's VERSION from CMake, with `git describe` of the
 * source tree when it was a git checkout at configure time ("0.1.0 (git
 * 1a2b3c4)"). */
const char *sw_version(void);

/* ---- the groups' values and handlers ----------------------------------------------------------
 * Each sw_args_*_opt() takes one option of sw_args_next(): 1 when it was one
 * of the group's (value checked and stored), 0 when it is not, -1 after one
 * error line. */

typedef struct sw_args_model {
    const char *model;   /* -m: GGUF path or hf:ORG/NAME/FILE; NULL = not given */
    const char *backend; /* -b: cpu, cuda, cuda:N, cuda:0,1; NULL = auto */
    int threads;         /* -t: CPU threads, 0 = every core */
    int n_ctx;           /* -c: positions (default SW_ARGS_DEFAULT_CTX: 0 = the model's) */
} sw_args_model_t;
#define SW_ARGS_MODEL_DEFAULT                                                                      \
    {                                                                                              \
        .n_ctx = SW_ARGS_DEFAULT_CTX                                                               \
    }
int sw_args_model_opt(const char *prog, sw_args_model_t *m, int key, const char *val);

typedef struct sw_args_request {
    const char *prompt; /* -p, NULL = not given ("" is refused) */
    int n_predict;      /* -n: tokens to generate, 1 .. SW_REQUEST_MAX_N_PREDICT */
    int chat;           /* --chat */
    int json;           /* --json */
} sw_args_request_t;
#define SW_ARGS_REQUEST_DEFAULT                                                                    \
    {                                                                                              \
        .n_predict = SW_REQUEST_DEFAULT_N_PREDICT                                                  \
    }
int sw_args_request_opt(const char *prog, sw_args_request_t *r, int key, const char *val);

/*
 * The sampling defaults of every client (generate, run, serve): every
 * SW_SAMPLING_* value of sw_limits.h, the repetition penalty included (the
 * engine's sw_sampling_default() has it off; sw_limits.h says why). The seed
 * is fixed: the same request gives the same text every time; --seed picks
 * another. --greedy is plain greedy decoding (temperature 0, no repetition
 * penalty), which is what llama.cpp's reference output is.
 */
sw_sampling_t sw_args_sampling_default(void);
int sw_args_sampling_opt(const char *prog, sw_sampling_t *s, int key, const char *val);

typedef struct sw_args_draft {
    const char *mode;    /* --draft: "model", "ngram", "mix", "none", or NULL = auto */
    int k;               /* --draft-k: > 0 fixed, 0 off, -1 auto (default) */
    const char *model;   /* --draft-model, NULL = none */
    int k_max;           /* --draft-k-max (default SW_DRAFT_DEFAULT_K_MAX) */
    float p_min;         /* --draft-p-min (default 0) */
    int threads;         /* --draft-threads, 0 = as --threads */
    const char *backend; /* --draft-backend, NULL = the first device of --backend */
    int tree;            /* --draft-tree: token trees of at most that many drafts, 0 = chains */
    int ahead;           /* --draft-ahead: 1 on, 0 off, -1 = not given (the program's default) */
} sw_args_draft_t;
#define SW_ARGS_DRAFT_DEFAULT                                                                      \
    {                                                                                              \
        .k = -1, .k_max = SW_DRAFT_DEFAULT_K_MAX, .ahead = -1                                      \
    }
int sw_args_draft_opt(const char *prog, sw_args_draft_t *d, int key, const char *val);
/* Where the model runs in this process (generate, a node): 0, or -1 after the
 * usage error line when --draft model or mix comes without --draft-model. */
int sw_args_draft_check(const sw_args_spec_t *spec, const sw_args_draft_t *d)
    __attribute__((warn_unused_result));

typedef struct sw_args_relay {
    char relay[SW_ARGS_RELAYS_MAX]; /* --relay: up to SW_PEER_MAX_RELAYS endpoints, each normalised
                                       to tcp://HOST:PORT, joined by ','; "" = not given */
    int connect_s; /* --connect-timeout-s, -1 = not given (the program's default) */
} sw_args_relay_t;
#define SW_ARGS_RELAY_DEFAULT                                                                      \
    {                                                                                              \
        .connect_s = -1                                                                            \
    }
int sw_args_relay_opt(const char *prog, sw_args_relay_t *r, int key, const char *val);

/*
 * A list of relays "A,B,..." (--relay; also repeated --relay flags, which
 * append) into out as normalised endpoints joined by ',' (out_len >=
 * SW_ARGS_RELAYS_MAX). 0, or -1 after one line: an empty or bad endpoint, the
 * same relay twice, more than SW_PEER_MAX_RELAYS.
 */
int sw_arg_relays(const char *prog, const char *s, char *out, size_t out_len)
    __attribute__((warn_unused_result));

/* The i-th endpoint of a list sw_arg_relays made (or one endpoint) into out; the count of
 * entries when i is past the end (so sw_relay_at(list, 1 << 30, NULL, 0) counts them). */
int sw_relay_at(const char *list, int i, char *out, size_t out_len);

#endif
