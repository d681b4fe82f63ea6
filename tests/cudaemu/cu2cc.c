/*
 * cu2cc.c - the build step that lets a C++ compiler read a CUDA source for
 * the emulated runtime (cuda_runtime.h in this folder): it copies IN.cu to
 * OUT.cc and rewrites the only two constructs that are CUDA syntax rather
 * than declarations a header can supply:
 *
 *   name<<<grid, block[, shmem[, stream]]>>>(args)
 *       -> swemu_launch("name", __FILE__, __LINE__, grid, block, shmem, stream, name, args)
 *   extern __shared__ T name[];
 *       -> T *name = (T *)swemu_dyn_shared();
 *   __shared__ T name[N];   (inside a function)
 *       -> static T name[N]; static unsigned long long swemu_gen_name;
 *          swemu_shared_init(&name, sizeof name, &swemu_gen_name, "name");
 *
 * (the last poisons the static array once per block, as shared memory
 * starts undefined on a GPU). Comments, strings and character literals are
 * copied untouched, every newline is kept and the output starts with a
 * #line directive, so compiler messages and __FILE__/__LINE__ point into
 * the .cu file.
 *
 *   swemu-cu2cc IN.cu OUT.cc
 *
 * Exits 1 with one line on stderr for input it does not understand (a
 * launch without its argument list, two names in one __shared__
 * declaration).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct s_buf {
    char *p;
    size_t n, cap;
} s_buf_t;

static const char *s_path;
static int s_line = 1; // line of the input at the current position (messages)

static void s_die(const char *what)
{
    fprintf(stderr, "swemu-cu2cc: %s:%d: %s\n", s_path, s_line, what);
    exit(1);
}

static void s_put(s_buf_t *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (b->n + n + 1 > cap)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            s_die("out of memory");
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void s_puts(s_buf_t *b, const char *s)
{
    s_put(b, s, strlen(s));
}

static int s_ident(int c)
{
    return isalnum(c) || c == '_';
}

/* Length of the comment, string or character literal at s (0 if none). */
static size_t s_skip_lit(const char *s)
{
    if (s[0] == '/' && s[1] == '/') {
        const char *e = strchr(s, '\n');
        return e ? (size_t)(e - s) : strlen(s);
    }
    if (s[0] == '/' && s[1] == '*') {
        const char *e = strstr(s + 2, "*/");
        if (!e)
            s_die("unterminated comment");
        return (size_t)(e + 2 - s);
    }
    if (s[0] == '"' || s[0] == '\'') {
        size_t i = 1;
        while (s[i] && s[i] != s[0]) {
            if (s[i] == '\\' && s[i + 1])
                i++;
            if (s[i] == '\n')
                s_die("newline in a literal");
            i++;
        }
        if (!s[i])
            s_die("unterminated literal");
        return i + 1;
    }
    return 0;
}

static void s_count_lines(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        s_line += s[i] == '\n';
}

/* Splits the launch configuration starting at s (after <<<) at its top-level
 * commas up to >>>; fills part[i] = [start, len) and returns the count. */
static int s_config(const char *s, size_t *end, const char **part, size_t *len)
{
    int n = 0, depth = 0;
    size_t i = 0, start = 0;
    for (;;) {
        size_t lit = s_skip_lit(s + i);
        if (lit) {
            i += lit;
            continue;
        }
        const char c = s[i];
        if (!c)
            s_die("a launch configuration without >>>");
        if (depth == 0 && !strncmp(s + i, ">>>", 3)) {
            if (n == 4)
                s_die("a launch configuration of more than 4 values");
            part[n] = s + start;
            len[n++] = i - start;
            *end = i + 3;
            return n;
        }
        if (c == '(' || c == '[' || c == '{')
            depth++;
        else if (c == ')' || c == ']' || c == '}')
            depth--;
        else if (c == ',' && depth == 0) {
            if (n == 3)
                s_die("a launch configuration of more than 4 values");
            part[n] = s + start;
            len[n++] = i - start;
            start = i + 1;
        }
        i++;
    }
}

/* The kernel name that ends the output: an identifier (with ::) and template
 * arguments <...>; returns where it starts. */
static size_t s_name_start(const s_buf_t *out)
{
    size_t j = out->n;
    while (j > 0 && isspace((unsigned char)out->p[j - 1]))
        j--;
    if (j > 0 && out->p[j - 1] == '>') {
        int depth = 0;
        while (j > 0) {
            const char c = out->p[--j];
            depth += c == '>';
            depth -= c == '<';
            if (depth == 0)
                break;
        }
        if (depth != 0)
            s_die("unbalanced template arguments before <<<");
        while (j > 0 && isspace((unsigned char)out->p[j - 1]))
            j--;
    }
    const size_t e = j;
    while (j > 0 && (s_ident((unsigned char)out->p[j - 1]) || out->p[j - 1] == ':'))
        j--;
    if (j == e)
        s_die("<<< without a kernel name before it");
    return j;
}

/* The last identifier in s[0..n) before a '[' (or the end): its [start, len). */
static int s_decl_name(const char *s, size_t n, size_t *start, size_t *len)
{
    const char *br = memchr(s, '[', n);
    size_t e = br ? (size_t)(br - s) : n;
    while (e > 0 && isspace((unsigned char)s[e - 1]))
        e--;
    size_t b = e;
    while (b > 0 && s_ident((unsigned char)s[b - 1]))
        b--;
    if (b == e)
        return -1;
    *start = b;
    *len = e - b;
    return 0;
}

/* Rewrites a __shared__ declaration; s points after the keyword. Returns the
 * input consumed (through the ';'). */
static size_t s_shared(s_buf_t *out, const char *s, int is_extern, int depth)
{
    const char *semi = strchr(s, ';');
    if (!semi)
        s_die("a __shared__ declaration without ';'");
    const size_t n = (size_t)(semi - s);
    if (memchr(s, ',', n) || memchr(s, '=', n))
        s_die("one name and no initializer per __shared__ declaration, please");
    size_t ns, nl;
    if (s_decl_name(s, n, &ns, &nl) != 0)
        s_die("a __shared__ declaration without a name");
    char name[128];
    if (nl >= sizeof name)
        s_die("a __shared__ name too long");
    memcpy(name, s + ns, nl);
    name[nl] = 0;
    if (is_extern) {
        /* extern __shared__ T name[];  ->  T *name = (T *)swemu_dyn_shared(); */
        char type[256];
        size_t tl = ns;
        while (tl > 0 && isspace((unsigned char)s[tl - 1]))
            tl--;
        size_t tb = 0;
        while (tb < tl && isspace((unsigned char)s[tb]))
            tb++;
        if (tl - tb == 0 || tl - tb >= sizeof type)
            s_die("extern __shared__ needs a type");
        memcpy(type, s + tb, tl - tb);
        type[tl - tb] = 0;
        const char *parts[] = {type, " *", name, " = (", type, " *)swemu_dyn_shared();"};
        for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
            s_puts(out, parts[i]);
    } else {
        s_puts(out, "static");
        s_put(out, s, n);
        s_puts(out, ";");
        if (depth > 0) {
            const char *parts[] = {" static unsigned long long swemu_gen_",
                                   name,
                                   "; swemu_shared_init(&",
                                   name,
                                   ", sizeof ",
                                   name,
                                   ", &swemu_gen_",
                                   name,
                                   ", \"",
                                   name,
                                   "\");"};
            for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
                s_puts(out, parts[i]);
        }
    }
    s_count_lines(s, n + 1);
    return n + 1;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: swemu-cu2cc IN.cu OUT.cc\n");
        return 2;
    }
    s_path = argv[1];
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    s_buf_t in = {0}, out = {0};
    char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
        s_put(&in, chunk, got);
    fclose(f);
    if (!in.p)
        s_put(&in, "", 0);

    char head[1200];
    snprintf(head, sizeof head, "#line 1 \"%s\"\n", argv[1]);
    s_puts(&out, head);
    int depth = 0;
    size_t i = 0;
    while (i < in.n) {
        const char *s = in.p + i;
        const size_t lit = s_skip_lit(s);
        if (lit) {
            s_put(&out, s, lit);
            s_count_lines(s, lit);
            i += lit;
            continue;
        }
        if (!strncmp(s, "<<<", 3)) {
            const size_t ns = s_name_start(&out);
            char name[256];
            size_t nl = 0;
            for (size_t j = ns; j < out.n && nl + 1 < sizeof name; j++)
                if (!isspace((unsigned char)out.p[j]))
                    name[nl++] = out.p[j];
            name[nl] = 0;
            char *kernel = strdup(out.p + ns); // as written (template arguments included)
            if (!kernel)
                s_die("out of memory");
            out.n = ns;
            const char *part[4];
            size_t plen[4], cfg_end;
            const int np = s_config(s + 3, &cfg_end, part, plen);
            if (np < 2)
                s_die("a launch needs at least a grid and a block");
            const char *after = s + 3 + cfg_end;
            size_t k = 0;
            while (isspace((unsigned char)after[k]))
                k++;
            if (after[k] != '(')
                s_die("a launch without its argument list");
            size_t a = k + 1;
            while (isspace((unsigned char)after[a]) && after[a] != '\n')
                a++;
            const int no_args = after[a] == ')';
            s_puts(&out, "swemu_launch(\"");
            s_puts(&out, name);
            s_puts(&out, "\", __FILE__, __LINE__, ");
            for (int p = 0; p < np; p++) {
                if (p)
                    s_puts(&out, ",");
                s_put(&out, part[p], plen[p]);
            }
            for (int p = np; p < 4; p++)
                s_puts(&out, ", 0");
            s_puts(&out, ", ");
            s_puts(&out, kernel);
            free(kernel);
            if (!no_args)
                s_puts(&out, ", ");
            /* Keep the newlines between >>> and the argument list. */
            for (size_t j = 0; j < k; j++)
                if (after[j] == '\n')
                    s_puts(&out, "\n");
            s_count_lines(s, 3 + cfg_end + k + 1);
            i += 3 + cfg_end + k + 1;
            continue;
        }
        if (!strncmp(s, "__shared__", 10) && (i == 0 || !s_ident((unsigned char)s[-1])) &&
            !s_ident((unsigned char)s[10])) {
            /* "extern" just before? */
            size_t j = out.n;
            while (j > 0 && isspace((unsigned char)out.p[j - 1]))
                j--;
            const int is_extern = j >= 6 && !strncmp(out.p + j - 6, "extern", 6) &&
                                  (j == 6 || !s_ident((unsigned char)out.p[j - 7]));
            if (is_extern)
                out.n = j - 6;
            i += 10 + s_shared(&out, s + 10, is_extern, depth);
            continue;
        }
        if (*s == '{')
            depth++;
        else if (*s == '}')
            depth--;
        else if (*s == '\n')
            s_line++;
        s_put(&out, s, 1);
        i++;
    }
    FILE *o = fopen(argv[2], "wb");
    if (!o || fwrite(out.p, 1, out.n, o) != out.n || fclose(o) != 0) {
        perror(argv[2]);
        return 1;
    }
    free(in.p);
    free(out.p);
    return 0;
}
