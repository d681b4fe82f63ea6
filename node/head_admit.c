/*
 * head_admit.c - requests on their way to a session: a GenerateRequest is
 * checked and started (tokenized or templated, its drafting chosen, its KV
 * cache taken) when a session slot and the KV memory allow, else waits in a
 * bounded queue (--max-queue, --max-queue-per-client) or is refused as busy
 * with its place; a client at its --max-sessions-per-client waits while
 * others' requests pass. A Cancel drops a waiting request or ends a running
 * one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "head_impl.h"
#include "log.h"

/* The drafting of one request: its DraftParams where set, the node's
 * --draft* defaults otherwise. */
static int s_draft_cfg(const node_t *n, const sw_msg_draft_t *dp, const sw_sampling_t *sp,
                       draft_cfg_t *dc, char *err, size_t err_len)
{
    const node_head_t *h = n->head;
    const node_opts_t *o = &n->o;
    memset(dc, 0, sizeof *dc);
    dc->sampling = *sp;
    dc->mode = h->dmodel ? DRAFT_MODE_MODEL : DRAFT_MODE_NONE;
    if (o->draft_mode && draft_mode_parse(o->draft_mode, &dc->mode) != 0)
        dc->mode = DRAFT_MODE_NONE;
    dc->k = o->draft_k;
    dc->k_max = o->draft_k_max;
    dc->p_min = o->draft_p_min;
    dc->tree = o->draft_tree;
    dc->ahead = o->draft_ahead;
    if (!dp)
        goto trees;
    switch (dp->mode) {
    case SW_DRAFT_NONE:
        dc->mode = DRAFT_MODE_NONE;
        break;
    case SW_DRAFT_MODEL:
        if (!h->dmodel) {
            snprintf(err, err_len, "this head has no draft model (start it with --draft-model)");
            return -1;
        }
        dc->mode = DRAFT_MODE_MODEL;
        break;
    case SW_DRAFT_NGRAM:
        dc->mode = DRAFT_MODE_NGRAM;
        break;
    case SW_DRAFT_MIX:
        if (!h->dmodel) {
            snprintf(err, err_len,
                     "this head has no draft model for --draft mix (start it with "
                     "--draft-model)");
            return -1;
        }
        dc->mode = DRAFT_MODE_MIX;
        break;
    default: // DRAFT_AUTO: the head's default
        break;
    }
    if (dp->n_draft > SW_MAX_DRAFT || !(dp->p_min >= 0 && dp->p_min <= 1)) {
        snprintf(err, err_len, "draft parameters out of range (K %u > %d or p_min %g)", dp->n_draft,
                 SW_MAX_DRAFT, (double)dp->p_min);
        return -1;
    }
    if (dp->n_draft > 0)
        dc->k = (int)dp->n_draft;
    if (dp->p_min > 0)
        dc->p_min = dp->p_min;
    if (dc->mode != DRAFT_MODE_NONE && dc->k == 0 && dp->mode != SW_DRAFT_AUTO)
        dc->k = DRAFT_K_AUTO; // a proposer asked for by name with the head's K off
    if (dp->tree > SW_MAX_DRAFT) {
        snprintf(err, err_len, "a token tree of %u drafts (at most %d)", dp->tree, SW_MAX_DRAFT);
        return -1;
    }
    if (dp->tree > 0)
        dc->tree = (int)dp->tree;
    if (dp->ahead != SW_AHEAD_DEFAULT)
        dc->ahead = dp->ahead == SW_AHEAD_ON;
trees:
    /* This stage runs the tree rows too: a backend without trees gets chains
     * (a later stage without them refuses a tree round, naming itself). */
    if (dc->tree > 1 && !sw_model_trees(n->model))
        dc->tree = 0;
    return 0;
}

static head_sess_t *s_free_slot(node_head_t *h)
{
    head_sess_t *oldest = NULL;
    for (int i = 0; i < h->n_slots; i++) {
        head_sess_t *s = &h->sess[i];
        if (s->state == HEAD_FREE)
            return s;
        if (s->state == HEAD_LINGER && (!oldest || s->t_end < oldest->t_end))
            oldest = s;
    }
    if (oldest) // a finished request's record makes room
        head_forget(h, oldest);
    return oldest;
}

enum { S_STARTED = 0, S_WAIT_MEMORY = 1, S_REFUSED = -1 };

/* A conversation's turns, or the prompt as one user turn, through the
 * model's chat template (net/wire_check.c bounds both). The text (the caller frees
 * it), or NULL with err (*code ERR_INTERNAL when out of memory). */
static char *s_chat_text(const node_t *n, const sw_msg_generate_t *g, int *code, char *err,
                         size_t err_len)
{
    sw_chat_msg_t one = {.role = "user", .content = g->prompt};
    sw_chat_msg_t *turns = &one;
    if (g->n_messages > 0) {
        turns = calloc(g->n_messages, sizeof *turns);
        if (!turns) {
            snprintf(err, err_len, "out of memory");
            *code = SW_ERROR_INTERNAL;
            return NULL;
        }
        for (uint32_t i = 0; i < g->n_messages; i++) {
            sw_msg_turn_t t;
            if (sw_codec_turn_at(g, i, &t) != 0) { /* wire_check.c checked every turn */
                free(turns);
                snprintf(err, err_len, "messages[%u] is unreadable", i);
                return NULL;
            }
            turns[i].role = t.role;
            turns[i].content = t.content;
        }
    }
    char *chat_text = sw_chat_format_alloc(sw_model_gguf(n->model), turns,
                                           g->n_messages > 0 ? (int)g->n_messages : 1, 1);
    if (turns != &one)
        free(turns);
    if (!chat_text)
        snprintf(err, err_len, "the model has no usable chat template");
    return chat_text;
}

/* The positions a session may reach: this head's context, or the route's
 * when a stage on it holds fewer (head_route_t.n_ctx: the head uses the
 * smallest context of its route, so that a request longer than a stage can
 * hold is refused before any work, with the stage named). what: how to say
 * it in an error. */
static int s_ctx(const node_t *n, char *what, size_t len)
{
    const node_head_t *h = n->head;
    if (h->route_ok && h->route.ctx_at > 0 && h->route.n_ctx < n->o.n_ctx) {
        snprintf(what, len,
                 "the %d-position context of stage '%s' (its --ctx, or what its --kv-mib holds; "
                 "the smallest on the route)",
                 h->route.n_ctx, h->route.names[h->route.ctx_at]);
        return h->route.n_ctx;
    }
    snprintf(what, len, "the %d-position context of this head (%s%s)", n->o.n_ctx, n->ctx_from,
             strcmp(n->ctx_from, "--ctx") ? "; --ctx sets it" : "");
    return n->o.n_ctx;
}

/* The request's prompt as tokens: its token ids, or its text (a
 * conversation through the chat template) tokenized; checked against the
 * vocabulary and the context (s_ctx). 0 with *prompt_out (the caller frees
 * it), or -1 with err (*code ERR_INTERNAL when out of memory). */
static int s_prompt(const node_t *n, const sw_msg_generate_t *g, int32_t **prompt_out, int *n_out,
                    int *code, char *err, size_t err_len)
{
    const node_head_t *h = n->head;
    int32_t *prompt = NULL;
    char *chat_text = NULL;
    int n_prompt = 0;
    char ctx_what[256];
    const int ctx = s_ctx(n, ctx_what, sizeof ctx_what);
    if (g->n_prompt_tokens) {
        prompt = malloc(g->n_prompt_tokens * sizeof *prompt);
        if (!prompt)
            goto oom;
        for (uint32_t i = 0; i < g->n_prompt_tokens; i++) {
            if (g->prompt_tokens[i] >= (uint32_t)n->hp->n_vocab) {
                snprintf(err, err_len, "prompt token %u is outside the vocabulary",
                         g->prompt_tokens[i]);
                goto fail;
            }
            prompt[i] = (int32_t)g->prompt_tokens[i];
        }
        n_prompt = (int)g->n_prompt_tokens;
    } else {
        const char *text = g->prompt;
        const int chat = g->chat || g->n_messages > 0;
        if (chat) {
            chat_text = s_chat_text(n, g, code, err, err_len);
            if (!chat_text)
                goto fail;
            text = chat_text;
        }
        /* Stop as soon as the prompt cannot fit: a 2 MiB prompt would otherwise
         * hold the head in the tokenizer for seconds before this is known. */
        const int64_t room = (int64_t)ctx - g->n_predict;
        int trc = room < 1 ? SW_TOK_ERR_TOO_LONG
                           : sw_tokenize_max(h->tok, text, strlen(text), 1, chat, (int)room,
                                             &prompt, &n_prompt);
        if (trc == SW_TOK_ERR_TOO_LONG && room < 1) {
            snprintf(err, err_len,
                     "%u new tokens (max_tokens) leave no room for any prompt in %s: ask for at "
                     "most %d",
                     g->n_predict, ctx_what, ctx > 1 ? ctx - 1 : 0);
            goto fail;
        }
        if (trc == SW_TOK_ERR_TOO_LONG) {
            snprintf(err, err_len, "the prompt (more than %lld tokens) + %u new tokens exceed %s",
                     (long long)room, g->n_predict, ctx_what);
            goto fail;
        }
        if (trc != 0)
            goto oom;
    }
    if (n_prompt < 1) {
        snprintf(err, err_len, "the prompt is empty");
        goto fail;
    }
    if ((int64_t)n_prompt + g->n_predict > ctx) {
        snprintf(err, err_len, "%d prompt + %u new tokens exceed %s", n_prompt, g->n_predict,
                 ctx_what);
        goto fail;
    }
    if (g->n_resume_tokens && g->sampling.temp > 0) {
        /* failover of a sampled request: what a head that died generated goes
         * after the prompt (the context still holds n_prompt + n_predict
         * positions) and the rest is sampled from there; a greedy one replays
         * them as drafts instead (s_forced_propose) */
        int32_t *grown = realloc(prompt, ((size_t)n_prompt + g->n_resume_tokens) * sizeof *grown);
        if (!grown)
            goto oom;
        prompt = grown;
        for (uint32_t i = 0; i < g->n_resume_tokens; i++) {
            if (g->resume_tokens[i] >= (uint32_t)n->hp->n_vocab) {
                snprintf(err, err_len, "resume token %u is outside the vocabulary",
                         g->resume_tokens[i]);
                goto fail;
            }
            prompt[n_prompt++] = (int32_t)g->resume_tokens[i];
        }
    }
    free(chat_text);
    *prompt_out = prompt;
    *n_out = n_prompt;
    return 0;
oom:
    snprintf(err, err_len, "out of memory");
    *code = SW_ERROR_INTERNAL;
fail:
    free(prompt);
    free(chat_text);
    return -1;
}

/* Takes slot s for request g of msg's client: a ROUTE session with a new id. */
static void s_open(node_t *n, head_sess_t *s, const sw_wire_msg_t *msg, const sw_msg_generate_t *g,
                   const sw_sampling_t *sp, double t_arrive)
{
    node_head_t *h = n->head;
    memset(s, 0, sizeof *s);
    s->n = n;
    s->state = HEAD_ROUTE;
    h->n_active++;
    snprintf(s->client, sizeof s->client, "%s", msg->peer);
    snprintf(s->client_key, sizeof s->client_key, "%s", msg->peer_key);
    sw_wire_addr(s->client_addr, s->client, s->client_key);
    snprintf(s->rid, sizeof s->rid, "%s", g->request_id);
    s->t_start = t_arrive;
    s->t_gen = sw_now_ms();
    s->deadline = g->timeout_ms ? t_arrive + g->timeout_ms : 0;
    s->sp = *sp;
    /* failover (codec: fewer resume tokens than n_predict): a sampled request
     * has them in its prompt and generates the rest; a greedy one generates
     * all again, the first n_resume as drafts the tail accepts, and streams
     * only the rest (numbered from n_resume either way) */
    const int sampled = g->sampling.temp > 0;
    s->n_predict = (int)g->n_predict - (sampled ? (int)g->n_resume_tokens : 0);
    s->index_base = g->n_resume_tokens;
    s->n_skip = sampled ? 0 : g->n_resume_tokens;
    s->send_idx = -1;
    s->resend_at = -1;
    head_new_id(s);
    head_sched_open(h, s, g->tenant); /* its flows in the fair queue */
}

/* The session's memory: its KV cache (growing as its rounds use positions,
 * counted in n->kv), round log, detokenizer, streamed tokens and proposer.
 * 0, or -1 when out of memory. */
static int s_alloc(node_t *n, head_sess_t *s)
{
    node_head_t *h = n->head;
    s->kv = sw_kv_new_grow(n->model, s->n_ctx, &n->kv);
    s->rec = node_recover_new(n->o.recover_timeout_ms);
    s->detok = sw_detok_new(h->tok, 0);
    s->toks = malloc(((size_t)s->n_predict + 1) * sizeof *s->toks);
    s->drafter = draft_new(h->dmodel);
    if (!s->kv || !s->rec || !s->detok || !s->toks || !s->drafter)
        return -1;
    if (s->n_skip && !(s->skip = malloc(s->n_skip * sizeof *s->skip)))
        return -1;
    return 0;
}

/*
 * sw_proposer_t of a greedy request taken over from a head that died: the
 * tokens the client holds (s->skip) are proposed as drafts, which the tail
 * accepts as its own argmax, since decode and verification rows compute
 * exactly what the first head computed (docs/architecture.md,
 * "Determinism"); then the session's own proposer.
 */
static int s_forced_propose(void *self, const int32_t *ctx, int n_ctx, int k_max, int guess,
                            sw_proposal_t *out)
{
    head_sess_t *s = self;
    const int at = n_ctx - s->n_prompt; /* generated tokens before these drafts */
    if (at >= (int)s->n_skip)
        return s->proposer.propose(s->proposer.self, ctx, n_ctx, k_max, guess, out);
    out->guess = -1;
    out->tree = 0;
    out->q_used = 0;
    out->kind = 0;
    out->n = 0;
    if (!guess) /* no drafting ahead while catching up */
        for (int i = at; i < (int)s->n_skip && out->n < k_max; i++) {
            out->conf[out->n] = -1;
            out->tokens[out->n++] = s->skip[i];
        }
    out->n_main = out->n;
    return 0;
}

/* The session's drafting (its DraftParams, else the head's) and round logic
 * (logged once the session takes a route: head_log_start). 0, or -1 with err. */
static int s_gen_begin(node_t *n, head_sess_t *s, const sw_msg_generate_t *g,
                       const sw_sampling_t *sp, char *err, size_t err_len)
{
    node_head_t *h = n->head;
    draft_cfg_t dc;
    if (s_draft_cfg(n, g->has_draft ? &g->draft : NULL, sp, &dc, err, err_len) != 0)
        return -1;
    dc.n_ctx = s->n_ctx;
    dc.load = n->o.draft_load ? &h->load : NULL;
    char ns[SW_PREFIX_NS_LEN];
    dc.prefix_ns = head_prefix_ns(s, ns, sizeof ns);
    if (draft_begin(s->drafter, &dc, err, err_len) != 0)
        return -1;
    s->proposer = draft_proposer(s->drafter);
    s->forced = (sw_proposer_t){.propose = s_forced_propose, .self = s};
    const int k = draft_gen_k(s->drafter);
    sw_gen_opts_t go = {
        .k = s->n_skip && k < SW_MAX_DRAFT ? SW_MAX_DRAFT : k,
        .proposer = s->n_skip ? &s->forced : &s->proposer,
        .ahead = dc.ahead,
        .n_predict = s->n_predict,
        .stop_at_eog = 1,
        .on_tokens = head_on_tokens,
        .on_tokens_ctx = s,
        .is_eog = head_is_eog,
        .is_eog_ctx = h->tok,
    };
    s->gen = sw_gen_new(s->prompt, s->n_prompt, &go, err, err_len);
    if (!s->gen)
        return -1;
    return 0;
}

void head_log_start(node_t *n, const head_sess_t *s)
{
    node_head_t *h = n->head;
    const draft_cfg_t *dc = draft_cfg(s->drafter);
    char drafting[96] = "no drafting";
    if (draft_gen_k(s->drafter) > 0)
        snprintf(drafting, sizeof drafting, "draft %s, K %s%d%s%s", draft_mode_name(dc->mode),
                 dc->k == DRAFT_K_AUTO ? "adaptive up to " : "", draft_gen_k(s->drafter),
                 dc->tree > 1 ? ", trees" : "", dc->ahead ? ", ahead" : "");
    /* what the request asked for: a sampled one taken over generates index_base fewer */
    const int n_predict = s->n_predict + (s->sp.temp > 0 ? (int)s->index_base : 0);
    if (s->index_base)
        SW_INFO("request '%s' from %s: taken over from a head that left, after %u tokens", s->rid,
                s->client, s->index_base);
    SW_INFO("request '%s' from %s: %d prompt tokens, %d to generate, %s; %d session(s) "
            "running, %d waiting",
            s->rid, s->client, s->n_prompt, n_predict, drafting, h->n_active, h->q_len);
}

/* A route built from a recent table serves a new session at once; else it
 * waits (ROUTE) for the next table. */
static void s_route_first(node_t *n, head_sess_t *s)
{
    node_head_t *h = n->head;
    const double now = sw_now_ms();
    if (h->route_ms && now - h->route_ms < HEAD_ROUTE_FRESH_MS && h->route_ok) {
        sw_msg_t t;
        const int have = sw_wire_msg_type(&h->table) == SW_MSG_PEER_TABLE &&
                         sw_codec_decode(&h->table, SW_MSG_PEER_TABLE, &t, NULL, 0) == 0;
        head_route_take(n, s, have ? &t.table : NULL);
        s->state = HEAD_RUN;
        h->busy = 1;
        head_log_start(n, s);
    } else {
        head_want_status(h);
    }
}

/* Starts a session for request msg (which stays the caller's): S_STARTED,
 * S_WAIT_MEMORY (the KV cache does not fit now, it will when others end) or
 * S_REFUSED (the client got an Error). */
static int s_start(node_t *n, const sw_wire_msg_t *msg, double t_arrive)
{
    node_head_t *h = n->head;
    sw_msg_t d;
    if (sw_codec_decode(msg, SW_MSG_GENERATE, &d, NULL, 0) != 0)
        return S_REFUSED;
    const sw_msg_generate_t *g = &d.generate;
    char err[512] = "";
    int code = SW_ERROR_BAD_REQUEST;
    int32_t *prompt = NULL;
    int n_prompt = 0;
    head_sess_t *s = NULL;

    /* absent sampling reads as all 0 (greedy): codec.h */
    const sw_sampling_t sp = g->sampling;
    if (sw_sampling_check(&sp) != 0) {
        snprintf(err, sizeof err, "invalid sampling parameters");
        goto fail;
    }
    if (s_prompt(n, g, &prompt, &n_prompt, &code, err, sizeof err) != 0)
        goto fail;
    const int appended = g->sampling.temp > 0 ? (int)g->n_resume_tokens : 0;
    const int n_ctx = n_prompt + (int)g->n_predict - appended;
    const size_t kv_bytes = sw_kv_bytes(n->model, n_ctx);
    if (n->o.kv_bytes > 0 && kv_bytes > (size_t)n->o.kv_bytes) {
        snprintf(err, sizeof err,
                 "%d positions need %.1f MiB of KV cache, more than this head's --kv-mib (%.1f "
                 "MiB)",
                 n_ctx, (double)kv_bytes / (1 << 20), (double)n->o.kv_bytes / (1 << 20));
        goto fail;
    }
    /* It starts when its prompt's cache fits (the cache grows with the rounds,
     * engine/include/kv.h; one that cannot grow later ends with an error that
     * says so): cached prompt prefixes give way first. */
    const size_t prompt_bytes = sw_kv_bytes(n->model, sw_kv_step(n_prompt, n_ctx));
    head_kv_room(n, prompt_bytes);
    if (n->o.kv_bytes > 0 && (size_t)n->kv.used + prompt_bytes > (size_t)n->o.kv_bytes) {
        free(prompt);
        return S_WAIT_MEMORY;
    }

    s = s_free_slot(h);
    if (!s)
        goto oom; // cannot happen: n_slots > max_sessions
    s_open(n, s, msg, g, &sp, t_arrive);
    s->prompt = prompt;
    prompt = NULL;
    s->n_prompt = n_prompt;
    s->n_ctx = n_ctx;
    if (s_alloc(n, s) != 0)
        goto oom;
    for (uint32_t i = 0; i < s->n_skip; i++) {
        if (g->resume_tokens[i] >= (uint32_t)n->hp->n_vocab) {
            snprintf(err, sizeof err, "resume token %u is outside the vocabulary",
                     g->resume_tokens[i]);
            goto fail;
        }
        s->skip[i] = (int32_t)g->resume_tokens[i];
    }
    if (s_gen_begin(n, s, g, &sp, err, sizeof err) != 0)
        goto fail;
    s_route_first(n, s);
    return S_STARTED;
oom:
    snprintf(err, sizeof err, "out of memory");
    code = SW_ERROR_INTERNAL;
fail:
    free(prompt);
    /* A slot taken but no round sent (the draft settings, a resume token, the round logic):
     * the slot goes back quietly, no record kept, and the refusal takes the same per-key log
     * gate and answer budget as one refused before a slot (issue 35, findings 6 and 2), or a
     * key flooding such requests would get a WARN line and an Error for each. */
    if (s)
        head_forget(h, s);
    head_refuse(n, msg, code, g->request_id, 0, err);
    return S_REFUSED;
}

/* Sessions running (or routing) for client (head_who: its key, else its name),
 * and of them for tenant (NULL: not counted). */
static int s_client_running(const node_head_t *h, const char *who, const char *tenant,
                            int *of_tenant)
{
    int k = 0, t = 0;
    for (int i = 0; i < h->n_slots; i++) {
        const head_sess_t *s = &h->sess[i];
        if ((s->state == HEAD_ROUTE || s->state == HEAD_RUN) && !strcmp(head_sess_who(s), who)) {
            k++;
            t += tenant && !strcmp(s->tenant, tenant);
        }
    }
    if (of_tenant)
        *of_tenant = t;
    return k;
}

/* 1 when a request of another client than `who` waits in the queue. */
static int s_other_waiting(const node_t *n, const char *who)
{
    const node_head_t *h = n->head;
    for (int i = 0; i < h->q_len; i++)
        if (strcmp(head_who(&h->queue[(h->q_head + i) % n->o.max_queue].msg), who) != 0)
            return 1;
    return 0;
}

/* 1 when client `who` may start another session now. Below its share
 * (--max-sessions-per-client) always; above it only when no other key's
 * request waits (work-conserving: a key alone may take every session) and
 * the operator did not set the share as a hard cap. */
static int s_client_may_start(const node_t *n, const char *who)
{
    const int quota = n->o.max_sessions_per_client;
    if (quota <= 0 || s_client_running(n->head, who, NULL, NULL) < quota)
        return 1;
    return !n->o.sessions_per_client_hard && !s_other_waiting(n, who);
}

/* The queued request to start next, or -1: of those whose client may start a
 * session now, the one whose client runs the fewest (a fair share between
 * client keys), then whose tenant under that key runs the fewest, the
 * oldest of them. */
static int s_queue_next(const node_t *n)
{
    const node_head_t *h = n->head;
    int best = -1, best_running = 0, best_tenant = 0;
    for (int i = 0; i < h->q_len; i++) {
        const head_wait_t *w = &h->queue[(h->q_head + i) % n->o.max_queue];
        const char *who = head_who(&w->msg);
        if (!s_client_may_start(n, who))
            continue;
        int tenant = 0;
        const int running = s_client_running(h, who, w->g.tenant, &tenant);
        if (best < 0 || running < best_running ||
            (running == best_running && tenant < best_tenant)) {
            best = i;
            best_running = running;
            best_tenant = tenant;
        }
    }
    return best;
}

static head_sess_t *s_park_next(const node_t *n, int *running);

void node_head_request(node_t *n, sw_wire_msg_t *msg)
{
    node_head_t *h = n->head;
    sw_msg_t d;
    if (sw_codec_decode(msg, SW_MSG_GENERATE, &d, NULL, 0) != 0)
        return;
    const sw_msg_generate_t *g = &d.generate;
    if (!h) {
        head_refuse(n, msg, SW_ERROR_BAD_REQUEST, g->request_id, 0,
                    "this node is not a head (its layers do not start at 0)");
        return;
    }
    for (int i = 0; i < h->n_slots; i++) {
        const head_sess_t *s = &h->sess[i];
        if ((s->state == HEAD_ROUTE || s->state == HEAD_RUN || s->state == HEAD_PARKED) &&
            !strcmp(head_sess_who(s), head_who(msg)) && !strcmp(s->rid, g->request_id)) {
            head_refuse(n, msg, SW_ERROR_BAD_REQUEST, g->request_id, 0,
                        "a request with this id is already running");
            return;
        }
    }
    /* The same key asks again for a request that ended here (the head took the
     * client for gone while its link was down, and the client goes on from the
     * tokens it holds): the old record goes, so that a Resume finds the new one
     * and never the old end again. */
    for (int i = 0; i < h->n_slots; i++) {
        head_sess_t *s = &h->sess[i];
        if (s->state == HEAD_LINGER && !strcmp(head_sess_who(s), head_who(msg)) &&
            !strcmp(s->rid, g->request_id))
            head_forget(h, s);
    }
    const double now = sw_now_ms();
    /* Queued requests that may start go first; a client at its session quota waits in the
     * queue while others' requests pass it. */
    int p_running = 0;
    if (h->n_active < n->o.max_sessions && s_queue_next(n) < 0 && !s_park_next(n, &p_running) &&
        s_client_may_start(n, head_who(msg))) {
        if (s_start(n, msg, now) != S_WAIT_MEMORY)
            return;
    }
    int mine = 0;
    for (int i = 0; i < h->q_len; i++)
        mine += !strcmp(head_who(&h->queue[(h->q_head + i) % n->o.max_queue].msg), head_who(msg));
    if (n->o.max_queue_per_client > 0 && mine >= n->o.max_queue_per_client) {
        char text[256];
        snprintf(text, sizeof text,
                 "the head holds %d waiting requests of yours already (its "
                 "--max-queue-per-client): retry when one has started",
                 mine);
        head_refuse(n, msg, SW_ERROR_BUSY, g->request_id, (uint32_t)h->q_len + 1, text);
        return;
    }
    if (h->q_len >= n->o.max_queue) {
        char text[256];
        snprintf(text, sizeof text,
                 "the head is busy: %d requests running and %d waiting (its --max-queue): "
                 "retry later",
                 h->n_active, h->q_len);
        head_refuse(n, msg, SW_ERROR_BUSY, g->request_id, (uint32_t)h->q_len + 1, text);
        return;
    }
    head_wait_t *w = &h->queue[(h->q_head + h->q_len) % n->o.max_queue];
    memset(w, 0, sizeof *w);
    sw_wire_msg_move(&w->msg, msg);
    w->g = *g; /* its views point into the header, which moved with the message */
    w->t_arrive = now;
    h->q_len++;
    char who[SW_WIRE_NAME_MAX + 16];
    sw_log_gated(&h->wait_log, SW_LOG_INFO, head_who_label(&w->msg, who, sizeof who), now,
                 "request '%s' from %s waits (position %d; %d running)", w->g.request_id,
                 w->msg.peer, h->q_len, h->n_active);
}

/* Removes queue entry i (0 = the oldest). */
void head_dequeue(node_t *n, int i)
{
    node_head_t *h = n->head;
    const int Q = n->o.max_queue;
    sw_wire_msg_clear(&h->queue[(h->q_head + i) % Q].msg);
    for (int j = i; j > 0; j--) { // shift the older ones up by one
        head_wait_t *dst = &h->queue[(h->q_head + j) % Q],
                    *src = &h->queue[(h->q_head + j - 1) % Q];
        sw_wire_msg_move(&dst->msg, &src->msg);
        dst->g = src->g;
        dst->t_arrive = src->t_arrive;
        dst->client_missing = src->client_missing;
    }
    h->q_head = (h->q_head + 1) % Q;
    h->q_len--;
}

/* ---- parking: a key's sessions beyond its share give their slot back ------------------- */

/*
 * A key may take every free session while no other key waits (work-conserving);
 * once another key's request waits for a session and the key runs more than its
 * --max-sessions-per-client share, the youngest of its sessions beyond the share is
 * parked: its caches are freed at the head and the stages (SessionClose; their bytes
 * leave each node's KV budget, --kv-mib, for the request that takes the slot), its round
 * log, generation and what it streamed are kept, and the waiting request takes the slot.
 * A parked session goes on when a slot frees, its key may start one (the same order as
 * the queue: the key running the fewest first) and the cache it held fits the head's KV
 * budget again: a new growing cache given those positions at once, a new session id (the
 * stages remember the old one as closed), and recovery replays its rounds from the
 * prefill (recover.h), so the client's stream continues with exactly the tokens it would
 * have had. What it costs: the parked session's rounds computed again, and its time
 * parked (which counts against its deadline).
 */

/* 1 when s may be parked now: running, past its first round, neither recovering nor in the
 * middle of sending a round. */
static int s_parkable(const head_sess_t *s)
{
    return s->state == HEAD_RUN && s->round_no > 0 && !node_recover_failing(s->rec) &&
           s->send_idx < 0;
}

/* The session to give its slot back: of the key running the most sessions beyond its
 * share, its youngest that may be parked; or NULL. */
static head_sess_t *s_park_victim(const node_t *n)
{
    node_head_t *h = n->head;
    const char *key = NULL;
    int most = n->o.max_sessions_per_client;
    for (int i = 0; i < h->n_slots; i++) {
        const head_sess_t *s = &h->sess[i];
        if (!s_parkable(s))
            continue;
        const int running = s_client_running(h, head_sess_who(s), NULL, NULL);
        if (running > most) {
            most = running;
            key = head_sess_who(s);
        }
    }
    head_sess_t *young = NULL;
    for (int i = 0; key && i < h->n_slots; i++) {
        head_sess_t *s = &h->sess[i];
        if (s_parkable(s) && !strcmp(head_sess_who(s), key) && (!young || s->t_gen > young->t_gen))
            young = s;
    }
    return young;
}

/* 1 when a queued request of a key below its share waits for a session slot. */
static int s_share_waits(const node_t *n)
{
    const node_head_t *h = n->head;
    const int quota = n->o.max_sessions_per_client;
    if (quota <= 0 || n->o.sessions_per_client_hard || h->n_active < n->o.max_sessions)
        return 0;
    for (int i = 0; i < h->q_len; i++) {
        const char *who = head_who(&h->queue[(h->q_head + i) % n->o.max_queue].msg);
        if (s_client_running(h, who, NULL, NULL) < quota)
            return 1;
    }
    return 0;
}

/* Parks s (above): its slot and caches go back, the rest stays. */
static void s_park(node_t *n, head_sess_t *s, double now)
{
    node_head_t *h = n->head;
    const int running = s_client_running(h, head_sess_who(s), NULL, NULL);
    head_close_stages(n, s, "parked: its slot went to another key's request");
    s->opened = 0;
    s->park_pos = s->kv ? sw_kv_len(s->kv) : 0;
    sw_kv_free(&s->kv); // its bytes leave n->kv, for the request that takes the slot
    s->send_idx = -1;
    s->state = HEAD_PARKED;
    s->t_parked = now;
    h->n_active--;
    SW_INFO("request '%s' of %s parked after %u tokens: its key ran %d sessions, more than its "
            "share (%d, --max-sessions-per-client), while another key's request waited; it goes "
            "on when a session frees",
            s->rid, s->client, s->n_seen, running, n->o.max_sessions_per_client);
}

/* Resumes parked s: 0, or -1 when the cache it held does not fit now (it
 * stays parked). Its new cache grows (n->kv) and is given at once the
 * positions it held when parked, which its replay fills again: once going
 * on, it does not fail for memory another session took meanwhile. */
static int s_unpark(node_t *n, head_sess_t *s, double now)
{
    node_head_t *h = n->head;
    const int pos = s->park_pos > 0 ? s->park_pos : s->n_prompt;
    const size_t bytes = sw_kv_bytes(n->model, sw_kv_step(pos, s->n_ctx));
    head_kv_room(n, bytes);
    if (n->o.kv_bytes > 0 && (size_t)n->kv.used + bytes > (size_t)n->o.kv_bytes)
        return -1;
    char err[256];
    if (!(s->kv = sw_kv_new_grow(n->model, s->n_ctx, &n->kv)))
        return -1;
    if (sw_kv_reserve(s->kv, pos, err, sizeof err) != 0) {
        SW_DEBUG("request '%s' stays parked: %s", s->rid, err);
        sw_kv_free(&s->kv);
        return -1;
    }
    head_new_id(s); /* the stages remember the old id as closed */
    s->state = HEAD_RUN;
    h->n_active++;
    h->busy = 1;
    SW_INFO("request '%s' of %s goes on after %.1f s parked: its rounds are sent again", s->rid,
            s->client, (now - s->t_parked) / 1e3);
    s->replay_why = "the session was parked for another key's request"; /* head_advance */
    return 0;
}

/* The parked session to resume next: of those whose key may start a session now, the one
 * whose key runs the fewest (its count in *running), the longest parked; or NULL. */
static head_sess_t *s_park_next(const node_t *n, int *running)
{
    node_head_t *h = n->head;
    head_sess_t *best = NULL;
    for (int i = 0; i < h->n_slots; i++) {
        head_sess_t *s = &h->sess[i];
        if (s->state != HEAD_PARKED || !s_client_may_start(n, head_sess_who(s)))
            continue;
        const int r = s_client_running(h, head_sess_who(s), NULL, NULL);
        if (!best || r < *running || (r == *running && s->t_parked < best->t_parked)) {
            best = s;
            *running = r;
        }
    }
    return best;
}

/* Parked sessions past their deadline end; one session of a key above its share is parked
 * when a request of a key below its share waits for a slot. */
static void s_park_step(node_t *n, double now)
{
    node_head_t *h = n->head;
    for (int i = 0; i < h->n_slots; i++) {
        head_sess_t *s = &h->sess[i];
        if (s->state == HEAD_PARKED && s->deadline && now >= s->deadline)
            head_end(n, s, SW_FINISH_DEADLINE, SW_ERROR_DEADLINE,
                     "the request's deadline passed while it was parked for another key's");
        else if (s->state == HEAD_PARKED && now - s->t_told >= HEAD_PROGRESS_MS)
            head_progress(n, s, 0, now); // alive: its client does not ask again (Resume)
    }
    head_sess_t *v = s_share_waits(n) ? s_park_victim(n) : NULL;
    if (v)
        s_park(n, v, now);
}

/* The queue: requests past their deadline get a busy error with their
 * place; parked sessions and the oldest requests start while slots and
 * memory allow, the key running the fewest first. */
void head_queue_step(node_t *n, double now)
{
    node_head_t *h = n->head;
    for (int i = 0; i < h->q_len; i++) {
        head_wait_t *w = &h->queue[(h->q_head + i) % n->o.max_queue];
        const sw_msg_generate_t *g = &w->g;
        if (!g->timeout_ms || now - w->t_arrive < g->timeout_ms) {
            if (now - w->t_told >= HEAD_PROGRESS_MS)
                head_progress_queued(n, w, now); // waiting: its client does not ask again
            continue;
        }
        char text[256];
        snprintf(text, sizeof text,
                 "the head stayed busy: the request waited %.0f s at position %d of the queue "
                 "until its deadline (%d requests running)",
                 (now - w->t_arrive) / 1e3, i + 1, h->n_active);
        /* through the per-key log gate and answer budget: a key can fill its queue with
         * requests of a 1 ms deadline again and again */
        head_refuse(n, &w->msg, SW_ERROR_BUSY, g->request_id, (uint32_t)i + 1, text);
        head_dequeue(n, i--);
    }
    s_park_step(n, now);
    while (h->n_active < n->o.max_sessions) {
        int p_running = 0;
        head_sess_t *p = s_park_next(n, &p_running);
        const int i = s_queue_next(n); // the oldest whose client is under its session quota
        const int q_running =
            i < 0 ? 0
                  : s_client_running(h, head_who(&h->queue[(h->q_head + i) % n->o.max_queue].msg),
                                     NULL, NULL);
        if (p && (i < 0 || p_running <= q_running)) { // a parked session goes on first
            if (s_unpark(n, p, now) != 0)
                break; // its cache does not fit yet
            continue;
        }
        if (i < 0)
            break;
        head_wait_t *w = &h->queue[(h->q_head + i) % n->o.max_queue];
        int rc = s_start(n, &w->msg, w->t_arrive);
        if (rc == S_WAIT_MEMORY)
            break; // it keeps its place until memory frees up
        head_dequeue(n, i);
    }
}

void node_head_cancel(node_t *n, sw_wire_msg_t *msg)
{
    node_head_t *h = n->head;
    sw_msg_t d;
    if (!h || sw_codec_decode(msg, SW_MSG_CANCEL, &d, NULL, 0) != 0)
        return;
    const sw_msg_cancel_t *c = &d.cancel;
    const char *why = c->reason[0] ? c->reason : "no reason given";
    head_sess_t *s = head_find(h, msg, c->request_id, 0);
    if (s) {
        char text[400];
        snprintf(text, sizeof text, "cancelled by the client (%s)", why);
        head_end(n, s, SW_FINISH_CANCELLED, 0, text);
        return;
    }
    for (int i = 0; i < h->q_len; i++) {
        head_wait_t *w = &h->queue[(h->q_head + i) % n->o.max_queue];
        if (strcmp(head_who(&w->msg), head_who(msg)) != 0 ||
            strcmp(w->g.request_id, c->request_id) != 0)
            continue;
        char addr[SW_WIRE_ADDR_MAX + 1], who[SW_WIRE_NAME_MAX + 16];
        sw_log_gated(&h->wait_log, SW_LOG_INFO, head_who_label(msg, who, sizeof who), sw_now_ms(),
                     "request '%s': cancelled by %s while waiting (%s)", c->request_id, msg->peer,
                     why);
        head_final_chunk(n, head_reply_addr(msg, addr), c->request_id, 0, SW_FINISH_CANCELLED);
        head_dequeue(n, i);
        return;
    }
}
