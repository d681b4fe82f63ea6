/*
 * test_chat.c - chat prompt rendering against what the models' Jinja chat
 * templates render (expected strings computed with jinja2 by
 * scripts/fixtures/make_tokenizer_fixtures.py):
 *   - SmolLM2's own template read from the GGUF (tests/fixtures/tokenizer/
 *     smollm2_chat.json), including its default system prompt;
 *   - Llama 3, Llama 2 and Qwen2.5 templates (chat_templates.json);
 *   - the families of issue 24 (chat_families.json, made by
 *     scripts/fixtures/make_chat_family_fixtures.py): Qwen3's template (also
 *     Qwen3-MoE's) with reasoning kept or dropped and tool results, Llama 3.1
 *     and 3.2's with their system preamble, Gemma 3's; and a gemma3 GGUF
 *     without a template falling back to Gemma's;
 *   - template detection, buffer sizing and invalid conversations.
 * Also checks that a rendered SmolLM2 prompt tokenizes into control tokens.
 */
#include "chat.h"
#include "gguf.h"
#include "sw_test.h"
#include "tokenizer.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_MSGS 16

/* Fills msgs from a JSON array of {role, content}; returns the count or -1. */
static int json_msgs(json_t *arr, sw_chat_msg_t *msgs)
{
    if (!json_is_array(arr) || json_array_size(arr) > MAX_MSGS)
        return -1;
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *m = json_array_get(arr, i);
        msgs[i].role = json_string_value(json_object_get(m, "role"));
        msgs[i].content = json_string_value(json_object_get(m, "content"));
        if (!msgs[i].role || !msgs[i].content)
            return -1;
    }
    return (int)json_array_size(arr);
}

static json_t *load_fixture(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer/%s", sw_test_env("SW_FIXTURES"), name);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        fprintf(stderr, "%s: %s (line %d)\n", path, jerr.text, jerr.line);
    return root;
}

/* Renders every case of cases with render(), compares with "expected". */
static void check_cases(const char *what, json_t *cases, const sw_gguf_t *g, const char *tmpl)
{
    size_t i;
    json_t *c;
    int n_ok = 0;
    json_array_foreach(cases, i, c)
    {
        sw_chat_msg_t msgs[MAX_MSGS];
        int n = json_msgs(json_object_get(c, "messages"), msgs);
        int gen = json_is_true(json_object_get(c, "add_generation_prompt"));
        const char *want = json_string_value(json_object_get(c, "expected"));
        SW_CHECK(n >= 0 && want);
        if (n < 0 || !want)
            continue;
        char out[4096];
        size_t needed = 0;
        int rc = g ? sw_chat_format(g, msgs, n, gen, out, sizeof out, &needed)
                   : sw_chat_apply(tmpl, strlen(tmpl), msgs, n, gen, out, sizeof out, &needed);
        if (rc == 0 && needed == strlen(want) && strcmp(out, want) == 0) {
            n_ok++;
        } else {
            fprintf(stderr, "%s case %zu: rc %d\n  want: \"%s\"\n  got:  \"%s\"\n", what, i, rc,
                    want, rc == 0 ? out : "");
        }
    }
    printf("%s: %d/%zu prompts equal the template's\n", what, n_ok, json_array_size(cases));
    SW_CHECK(json_array_size(cases) >= 9);
    SW_CHECK_INT(n_ok, json_array_size(cases));
}

static void test_smollm2(const char *model)
{
    char err[256];
    sw_gguf_t *g = sw_gguf_open(model, err, sizeof err);
    SW_CHECK(g != NULL);
    if (!g) {
        fprintf(stderr, "%s: %s\n", model, err);
        return;
    }
    sw_gguf_str_t tmpl;
    SW_CHECK(sw_gguf_get_str(g, "tokenizer.chat_template", &tmpl) == 0);
    SW_CHECK_INT(sw_chat_detect(tmpl.ptr, tmpl.len), SW_CHAT_CHATML);

    json_t *root = load_fixture("smollm2_chat.json");
    SW_CHECK(root != NULL);
    if (root) {
        check_cases("smollm2 template", json_object_get(root, "cases"), g, NULL);
        json_decref(root);
    }

    /* The exact prompt for system + user, and its tokens: the markers must
     * become control tokens (<|im_start|> = 1, <|im_end|> = 2). */
    sw_chat_msg_t msgs[2] = {{"system", "Be brief."}, {"user", "Hi!"}};
    char out[512];
    size_t needed;
    SW_CHECK_INT(sw_chat_format(g, msgs, 2, 1, out, sizeof out, &needed), 0);
    const char *want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
                       "<|im_start|>assistant\n";
    SW_CHECK(strcmp(out, want) == 0);
    sw_tokenizer_t *t = sw_tokenizer_from_gguf(g, err, sizeof err);
    SW_CHECK(t != NULL);
    if (t) {
        int n = 0;
        int32_t *ids = sw_tokenize_alloc(t, out, needed, 1, 1, &n);
        SW_CHECK(ids != NULL && n > 6);
        if (ids && n > 6) {
            SW_CHECK_INT(ids[0], 1);
            /* After the last <|im_start|>: the pieces spell "assistant\n". */
            int last = n - 1;
            while (last > 0 && ids[last] != 1)
                last--;
            char tail[64];
            size_t o = 0;
            for (int i = last + 1; i < n; i++) {
                int k = sw_token_to_piece(t, ids[i], 0, tail + o, sizeof tail - 1 - o);
                o += k > 0 && (size_t)k < sizeof tail - 1 - o ? (size_t)k : 0;
            }
            tail[o] = 0;
            SW_CHECK(strcmp(tail, "assistant\n") == 0);
            int n_start = 0, n_end = 0;
            for (int i = 0; i < n; i++) {
                n_start += ids[i] == 1;
                n_end += ids[i] == 2;
            }
            SW_CHECK_INT(n_start, 3);
            SW_CHECK_INT(n_end, 2);
        }
        free(ids);
        sw_tokenizer_free(&t);
    }

    /* Buffer sizing: too small reports the length; exactly length + 1 fits. */
    char small[16];
    SW_CHECK_INT(sw_chat_format(g, msgs, 2, 1, small, sizeof small, &needed), SW_CHAT_ERR_SMALL);
    SW_CHECK_INT(needed, strlen(want));
    char *fit = malloc(needed + 1);
    SW_CHECK(fit != NULL);
    if (fit) {
        size_t n2;
        SW_CHECK_INT(sw_chat_format(g, msgs, 2, 1, fit, needed + 1, &n2), 0);
        SW_CHECK(n2 == needed && strcmp(fit, want) == 0);
        SW_CHECK_INT(sw_chat_format(g, msgs, 2, 1, fit, needed, &n2), SW_CHAT_ERR_SMALL);
        free(fit);
    }
    SW_CHECK_INT(sw_chat_format(g, msgs, 2, 1, NULL, 0, &needed), SW_CHAT_ERR_SMALL);
    SW_CHECK_INT(needed, strlen(want));
    sw_gguf_close(&g);
}

static void test_other_templates(void)
{
    json_t *root = load_fixture("chat_templates.json");
    SW_CHECK(root != NULL);
    if (!root)
        return;
    static const struct {
        const char *name;
        enum sw_chat_format f;
    } expect[] = {
        {"llama3", SW_CHAT_LLAMA3}, {"llama2", SW_CHAT_LLAMA2}, {"qwen2.5", SW_CHAT_CHATML}};
    json_t *tmpls = json_object_get(root, "templates");
    SW_CHECK_INT(json_array_size(tmpls), 3);
    for (size_t k = 0; k < json_array_size(tmpls) && k < 3; k++) {
        json_t *e = json_array_get(tmpls, k);
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *tmpl = json_string_value(json_object_get(e, "template"));
        SW_CHECK(name && tmpl && strcmp(name, expect[k].name) == 0);
        if (!name || !tmpl)
            continue;
        SW_CHECK_INT(sw_chat_detect(tmpl, strlen(tmpl)), expect[k].f);
        check_cases(name, json_object_get(e, "cases"), NULL, tmpl);
    }
    json_decref(root);
}

static void test_families(void)
{
    json_t *root = load_fixture("chat_families.json");
    SW_CHECK(root != NULL);
    if (!root)
        return;
    static const struct {
        const char *name;
        enum sw_chat_format f;
    } expect[] = {{"qwen3", SW_CHAT_QWEN3},
                  {"llama3.2", SW_CHAT_LLAMA31},
                  {"llama3.1", SW_CHAT_LLAMA31},
                  {"gemma3", SW_CHAT_GEMMA}};
    json_t *tmpls = json_object_get(root, "templates");
    SW_CHECK_INT(json_array_size(tmpls), 4);
    for (size_t k = 0; k < json_array_size(tmpls) && k < 4; k++) {
        json_t *e = json_array_get(tmpls, k);
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *tmpl = json_string_value(json_object_get(e, "template"));
        SW_CHECK(name && tmpl && strcmp(name, expect[k].name) == 0);
        if (!name || !tmpl)
            continue;
        SW_CHECK_INT(sw_chat_detect(tmpl, strlen(tmpl)), expect[k].f);
        check_cases(name, json_object_get(e, "cases"), NULL, tmpl);
    }
    json_decref(root);

    /* Gemma's turns must alternate; a gemma3 GGUF without a template gets
     * Gemma's (the Gemma 3 270M from PyPI has none), any other model none. */
    char out[512];
    size_t needed;
    sw_chat_msg_t twice[2] = {{"user", "a"}, {"user", "b"}};
    SW_CHECK_INT(sw_chat_apply("gemma", 5, twice, 2, 1, out, sizeof out, &needed), SW_CHAT_ERR);
    const char *dir = getenv("SW_MODELS_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/gemma-3-270m-q4_k_m.gguf", dir ? dir : "");
    char err[256];
    sw_gguf_t *g = access(path, R_OK) == 0 ? sw_gguf_open(path, err, sizeof err) : NULL;
    if (!g) {
        sw_test_skip_part("gemma3 fallback: gemma-3-270m-q4_k_m.gguf is absent (run: bash "
                          "scripts/fetch_model.sh gemma3-270m)");
        return;
    }
    sw_gguf_str_t t;
    SW_CHECK(sw_gguf_get_str(g, "tokenizer.chat_template", &t) != 0); // really none
    sw_chat_msg_t msgs[2] = {{"system", "Be brief."}, {"user", " Hi! "}};
    SW_CHECK_INT(sw_chat_format(g, msgs, 2, 1, out, sizeof out, &needed), 0);
    SW_CHECK(strcmp(out, "<start_of_turn>user\nBe brief.\n\nHi!<end_of_turn>\n"
                         "<start_of_turn>model\n") == 0);
    sw_gguf_close(&g);
}

static void test_detect_and_errors(void)
{
    SW_CHECK_INT(sw_chat_detect("chatml", 6), SW_CHAT_CHATML);
    SW_CHECK_INT(sw_chat_detect("llama3", 6), SW_CHAT_LLAMA3);
    SW_CHECK_INT(sw_chat_detect("llama2", 6), SW_CHAT_LLAMA2);
    SW_CHECK_INT(sw_chat_detect("qwen3", 5), SW_CHAT_QWEN3);
    SW_CHECK_INT(sw_chat_detect("llama3.1", 8), SW_CHAT_LLAMA31);
    SW_CHECK_INT(sw_chat_detect("gemma", 5), SW_CHAT_GEMMA);
    SW_CHECK_INT(sw_chat_detect("{{ messages }}", 14), SW_CHAT_UNKNOWN);
    SW_CHECK_INT(sw_chat_detect(NULL, 0), SW_CHAT_UNKNOWN);
    SW_CHECK(strcmp(sw_chat_format_name(SW_CHAT_LLAMA3), "llama3") == 0);
    SW_CHECK(strcmp(sw_chat_format_name(SW_CHAT_UNKNOWN), "unknown") == 0);

    char out[256];
    size_t needed;
    sw_chat_msg_t ok[1] = {{"user", "hi"}};
    /* A family name renders without a template (no default system prompt). */
    SW_CHECK_INT(sw_chat_apply("chatml", 6, ok, 1, 1, out, sizeof out, &needed), 0);
    SW_CHECK(strcmp(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n") == 0);
    SW_CHECK_INT(sw_chat_apply("chatml", 6, ok, 0, 1, out, sizeof out, &needed), 0);
    SW_CHECK(strcmp(out, "<|im_start|>assistant\n") == 0);
    /* Unknown template, bad messages, broken alternation. */
    SW_CHECK_INT(sw_chat_apply("{{ x }}", 7, ok, 1, 1, out, sizeof out, &needed), SW_CHAT_ERR);
    sw_chat_msg_t bad[1] = {{NULL, "x"}};
    SW_CHECK_INT(sw_chat_apply("chatml", 6, bad, 1, 1, out, sizeof out, &needed), SW_CHAT_ERR);
    SW_CHECK_INT(sw_chat_apply("chatml", 6, NULL, 2, 1, out, sizeof out, &needed), SW_CHAT_ERR);
    SW_CHECK_INT(sw_chat_apply("chatml", 6, ok, -1, 1, out, sizeof out, &needed), SW_CHAT_ERR);
    sw_chat_msg_t twice[2] = {{"user", "a"}, {"user", "b"}};
    SW_CHECK_INT(sw_chat_apply("llama2", 6, twice, 2, 1, out, sizeof out, &needed), SW_CHAT_ERR);
    sw_chat_msg_t asst_first[1] = {{"assistant", "a"}};
    SW_CHECK_INT(sw_chat_apply("llama2", 6, asst_first, 1, 1, out, sizeof out, &needed),
                 SW_CHAT_ERR);
    /* A template whose system text is an expression has no default. */
    const char *expr = "{{ '<|im_start|>system\\n' + sys + '<|im_end|>\\n' }}";
    SW_CHECK_INT(sw_chat_apply(expr, strlen(expr), ok, 1, 0, out, sizeof out, &needed), 0);
    SW_CHECK(strcmp(out, "<|im_start|>user\nhi<|im_end|>\n") == 0);
}

int main(void)
{
    test_detect_and_errors();
    test_other_templates();
    test_families();
    const char *model = getenv("SW_TEST_MODEL");
    if (model && model[0] && access(model, R_OK) == 0)
        test_smollm2(model);
    else
        sw_test_skip_part("SmolLM2 template part: the model is absent (run: bash "
                          "scripts/fetch_model.sh)");
    return sw_test_done();
}
