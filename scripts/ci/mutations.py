#!/usr/bin/env python3
"""Mutations that show a test can fail: each applied to the code in turn, the
test that should catch it built and run, the file restored; prints one line
per mutation (caught or NOT CAUGHT).

  python3 scripts/ci/mutations.py cuda [BUILD_DIR]      # issue 20's list, default build-emu
                                                     # (SW_CUDA=EMU)
  python3 scripts/ci/mutations.py security [BUILD_DIR]  # docs/security.md section 8's
                                                     # last column, default build
  python3 scripts/ci/mutations.py claims [BUILD_DIR]    # docs/testing.md's claims table: the
                                                     # mutations its rows name (`m:ID`)
  python3 scripts/ci/mutations.py GROUP BUILD_DIR TEXT  # only the mutations whose name holds TEXT

A mutation's test is a ctest name, or {"targets": [...], "cmd": [...]}: a
command run from the repository root after those targets of the build
directory are built (scripts/ci/fuzz.sh, scripts/ci/tmp_check.sh; BUILD in the
command is replaced by the build directory).

  python3 scripts/ci/mutations.py claims BUILD_DIR --budget S [--seed TEXT]
      # .ci/run: a window of the list, from an offset the seed picks (CI: the commit), each
      # mutation started only when its estimate fits the S seconds left

Each mutation must make its test fail; the script exits 1 when one does not, when its text
is no longer in its file (checked for every mutation a TEXT selects, also those a budget
leaves out; test_docs checks them all) or
when the mutated code does not build (that would show nothing of the test); a mutation not
caught is printed with the test's last lines of its own (ctest runs it with -V). The last line
counts them: "GROUP: N of M mutations caught (S s; the restored programs rebuilt in R s)",
or with a budget or TEXT "GROUP: caught N of R run (of M named; E setup errors) in S s".
SW_MUTATION_JOBS sets the build's jobs (default 2). A mutation rebuilds only its test and the
three programs tests start.
It edits the sources in place and puts them back after each, so run it on a
clean tree; the programs it rebuilt are rebuilt from the restored sources at the end.
"""
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# (name, file, old text, new text, test, environment); old and new may be
# lists of the same length (several edits of one file, one mutation), and
# file a list of that length too (edit i in file i; a file may repeat).
CUDA = [
    ("an off-by-one in a kernel's indexing (rmsnorm's sum reads one element past the row)",
     "engine/cuda/norm.cu",
     "for (int i = threadIdx.x; i < dim; i += S_THREADS)\n        p += (double)(xr[i] * xr[i]);",
     "for (int i = threadIdx.x; i <= dim; i += S_THREADS)\n        p += (double)(xr[i] * xr[i]);",
     "test_cuda_ops", {}),
    ("a removed __syncthreads in a reduction (norm.cu's tree sum)",
     "engine/cuda/norm.cu",
     "            part[threadIdx.x] += part[threadIdx.x + w];\n        __syncthreads();",
     "            part[threadIdx.x] += part[threadIdx.x + w];",
     "test_cuda_ops", {}),
    ("a missing cudaSetDevice in one op (rope)",
     "engine/cuda/rope.cu",
     "    if (swc_use(be) != 0)\n        return -1;\n    k_rope",
     "    k_rope",
     "test_cuda_ops", {"SW_CUDA_EMU_DEVICES": "2"}),
    ("a kv_move that drops one element (the last of each K row and V column)",
     "engine/cuda/attention.cu",
     "    if (d >= kv_dim)\n        return;\n    for (int i = 0; i < mv.n; i++)",
     "    if (d >= kv_dim - 1)\n        return;\n    for (int i = 0; i < mv.n; i++)",
     "test_cuda_ops", {}),
    ("a wrong block layout for one quantization type (q6_K: lane k reads lane k^1's high bits)",
     "engine/quant_math.h",
     "const uint32_t qh = sw_ld32(w->qh + 32 * h + 4 * k);",
     "const uint32_t qh = sw_ld32(w->qh + 32 * h + 4 * (k ^ 1));",
     "test_cuda_ops", {}),
]

SECURITY = [
    ("the permission check of secret key files (a 0644 key loads)",
     "net/keys.c",
     "if (secret && (st.st_mode & 077)) {",
     "if (0 && secret && (st.st_mode & 077)) {",
     "test_security", {}),
    ("zmq_curve(7)'s published test keys accepted",
     "net/keys.c",
     "        if (z85 && strncmp(z85, s_test_keys[i], SW_KEY_Z85_LEN) == 0)\n            return 1;",
     "        if (z85 && strncmp(z85, s_test_keys[i], SW_KEY_Z85_LEN) == 0)\n            return 0;",
     "test_security", {}),
    ("the relay starting without --allow (and so without a ZAP allow-list)",
     "relay/auth.c",
     ["    if (!o->key_file || !o->allow_file) {", "    if (s_allow_reload(r, 1) != 0) {"],
     ["    if (!o->key_file) {", "    if (o->allow_file && s_allow_reload(r, 1) != 0) {"],
     "test_security", {}),
    ("the ZAP handler admitting any CURVE key",
     "relay/auth.c",
     "        } else if (q.key[0] && relay_allowed(r, q.key)) {",
     "        } else if (q.key[0]) {",
     "test_security", {}),
    ("a node key announcing another node's name",
     "net/keys.c",
     "(!s_is_node_role(role) || strcmp(e->name, name) != 0)) {",
     "(!s_is_node_role(role))) {",
     "test_security", {}),
    ("the allow-list reload keeping peers whose key left the list",
     "relay/auth.c",
     "        if (relay_permit(r, p->user, p->name, p->ann.a.role, why, sizeof why) != 0) {\n"
     "            relay_note(",
     "        if (0 && relay_permit(r, p->user, p->name, p->ann.a.role, why, sizeof why) != 0) {\n"
     "            relay_note(",
     "test_security", {}),
    ("peers sending clear instead of sealed frames",
     "net/wire.c",
     "    if (crypto && (crypto->seal || crypto->access) && !s_is_relay(dname)) {",
     "    if (0 && crypto && (crypto->seal || crypto->access) && !s_is_relay(dname)) {",
     "test_security", {}),
    ("the replay window's counter check",
     "net/seal.c",
     "    else if (!fresh && !s_fresh(w, counter))",
     "    else if (0 && !fresh && !s_fresh(w, counter))",
     "test_security", {}),
    ("a node key bound to a stage announcing as a head (the relay's role check)",
     "net/keys.c",
     "    if (e->role == SW_ALLOW_NODE && e->bind == SW_BIND_STAGE && role != SW_ROLE_MIDDLE &&",
     "    if (0 && e->role == SW_ALLOW_NODE && e->bind == SW_BIND_STAGE && role != SW_ROLE_MIDDLE &&",
     "test_roles", {}),
    ("a node key bound to the head role announcing as a middle stage",
     "net/keys.c",
     "    if (e->role == SW_ALLOW_NODE && e->bind == SW_BIND_HEAD && role != SW_ROLE_HEAD &&",
     "    if (0 && e->role == SW_ALLOW_NODE && e->bind == SW_BIND_HEAD && role != SW_ROLE_HEAD &&",
     "test_roles", {}),
    ("clients choosing among every key-bound head, not only the role-bound ones",
     "client/join.c",
     "    return p->key_bound && (p->role_bound || t->role_heads == 0);",
     "    return p->key_bound;",
     "test_roles", {}),
    ("a full stage never taking a session from the key holding the most (fair share)",
     "node/stage_session.c",
     "        } else if ((lru = s_fair_victim(n, by)) != NULL) {",
     "        } else if (0 && (lru = s_fair_victim(n, by)) != NULL) {",
     "test_fair", {}),
    ("--insecure-loopback taking any address",
     "net/keys.c",
     "    if (strncmp(h, \"127.\", 4) != 0)\n        return 0;",
     "    if (strncmp(h, \"127.\", 4) != 0)\n        return 1;",
     "test_security", {}),
]
# docs/testing.md "Claims and the tests that back them": the rows recorded there.
CLAIMS = [
    ("chunk-bytes: prompt Forwards cut by windows only, not by bytes (issue 33)",
     "node/chunk.c",
     "    const int cap = sw_wire_prompt_rows(hidden);",
     "    const int cap = SW_WIRE_MAX_ROWS + 0 * (int)hidden;",
     "test_chunk", {}),
    ("seal-arrived: a sealed message's age judged when a busy receiver reads it (issue 33)",
     "net/seal.c",
     "    const int64_t at = s->arrived_ms && s->arrived_ms < now ? s->arrived_ms : now;",
     "    const int64_t at = now + 0 * s->arrived_ms;",
     "test_seal", {}),
    ("seal-spent: a window given up while live for newer sessions of its key keeps a spent "
     "record, so its replays stay refused",
     "net/seal.c",
     "    if (!mine || (mine->last_ms >= now - SW_SEAL_MAX_AGE_MS && s_spend(s, mine, now) != 0))",
     "    if (!mine || (0 && s_spend(s, mine, now) != 0))",
     "test_seal", {}),
    ("head-leaving: a head that stops tells its running requests' clients it is leaving, so "
     "they fail over",
     "node/head.c",
     "            head_send_error(n, s->client_addr, SW_ERROR_HEAD_LEAVING, s->rid, s->id, 0,",
     "            head_send_error(n, s->client_addr, SW_ERROR_INTERNAL, s->rid, s->id, 0,",
     "test_failover", {}),
    ("leaving-first-look: a request whose head said it is leaving waits for the second look, "
     "as for a head missing without a word",
     "client/failover.c",
     "        } else if (r->leaving || ++r->head_missing >= 2) {",
     "        } else if (++r->head_missing >= 2) {",
     "test_failover", {}),
    ("mkmodel-order: the synthetic Q4_K_M presets pick the more-bits layers by index, not in "
     "the file's order",
     "tools/mkmodel.c",
     "        i += strcmp(other, me) < 0;",
     "        i = l;",
     {"targets": ["shardwire-mkmodel"],
      "cmd": ["ctest", "--test-dir", "BUILD", "-R", "^test_mkmodel$", "--output-on-failure"],
      "est_s": 10}, {}),
    ("spot-pick: a spot check's shadows are drawn at random among the stand-ins",
     "node/head_spot.c",
     "        const uint32_t at = k < max ? (uint32_t)k++ : randombytes_uniform(seen);",
     "        const uint32_t at = k < max ? (uint32_t)k++ : (uint32_t)max + 0 * seen;",
     "test_spot_pick", {}),
    ("recover-moved: a replay that moved keeps its round's first give-up time (issue 33)",
     "node/recover.c",
     "        rec->moved = 1; // the next failure waits a whole timeout",
     "        rec->moved = 0; // the next failure waits a whole timeout",
     "test_recover_loop", {}),
    ("replay-stall: a replay waiting for its window's verdict neither times out nor checks "
     "its route",
     "node/recover.c",
     "    return !rec->failing && rec->window_round != 0 && rec->next_send >= 0 &&",
     "    return 0 && !rec->failing && rec->window_round != 0 && rec->next_send >= 0 &&",
     "test_recover_loop", {}),
    ("replay-relay-lost: a relay lost mid-replay sends the current round alone again",
     "node/recover.c",
     "    rec->one_round = !was && !rec->replaying;",
     "    rec->one_round = !was;",
     "test_recover_loop", {}),
    ("route-direct-lost: a later direct link's loss taken for a restart (whole replay)",
     "node/recover.c",
     "        if (b->direct) {",
     "        if (0 && b->direct) {",
     "test_recover_loop", {}),
    ("replay-links-mark: a link lost between a replay's sends noticed behind them",
     "node/recover.c",
     "    if (idx == 0 || (idx == rec->n_rounds - 1 && !rec->replaying))",
     "    if (idx == 0 || idx == rec->n_rounds - 1)",
     "test_recover_loop", {}),
    ("caches-gone: a session that goes on under a new id after a lost link sends the round "
     "alone (answered ERR_UNKNOWN_SESSION) before the whole replay",
     "node/recover.c",
     "void node_recover_caches_gone(node_recover_t *rec)\n{\n    rec->one_round = 0;",
     "void node_recover_caches_gone(node_recover_t *rec)\n{\n    (void)rec;",
     "test_recover_loop", {}),
    ("route-leave-close: a live stage left off a recovered session's route gets a SessionClose",
     "node/head_route.c",
     "        s_leave_route(n, s, &old, pt);",
     "        (void)s_leave_route, (void)old;",
     "test_recover", {}),
    ("replay-progress: a replayed verdict not taken for progress while the window waits",
     "node/head_session.c",
     "        s_moves(n, s, now); // the window's rounds go through: slow is not gone",
     "        (void)n, (void)s; // the window's rounds go through: slow is not gone",
     "test_recover", {}),
    ("bucket-newcomer: a name new to a full table of budgets starting with a full bucket",
     "base/bucket.c",
     "        s_refill(b, rate, now); // what the entry holds by now goes to the newcomer",
     "        b->level = rate; // what the entry holds by now goes to the newcomer",
     "test_bucket", {}),
    ("refuse-in-slot: a request refused after it took a session slot (draft settings, a resume "
     "token) ended like a session that ran: an ungated WARN line and an Error each",
     "node/head_admit.c",
     "    if (s)\n        head_forget(h, s);\n    head_refuse(n, msg, code, g->request_id, 0, err);",
     "    if (s)\n        head_end(n, s, SW_FINISH_ERROR, code, err);\n    else\n"
     "        head_refuse(n, msg, code, g->request_id, 0, err);",
     "test_log_abuse", {}),
    ("refuse-no-route: a request whose session waited for a route that came broken, refused "
     "before any round, ended like a session that ran: an ungated WARN line and an Error each",
     "node/head.c",
     "        head_refuse_session(n, s, h->route_code, h->route_err);\n    }\n"
     "    head_forget(h, s);",
     "        head_end(n, s, SW_FINISH_ERROR, h->route_code, h->route_err);\n        return;\n"
     "    }\n    head_forget(h, s);",
     "test_log_abuse", {}),
    ("pred-new-id: a session whose kept stage has a new stage before it keeps its id (the "
     "stage refuses the new predecessor's Forwards; the head waits --round-timeout-ms)",
     "node/head_route.c",
     "    const int pred = !left && s_pred_changed(old, &s->route);",
     "    const int pred = 0 && s_pred_changed(old, &s->route);",
     "test_replace_mid", {}),
    ("deadline-gate: a queued request whose deadline passed answered outside the per-key log "
     "gate and answer budget (requests of a 1 ms deadline write a WARN line and an Error each)",
     "node/head_admit.c",
     "        head_refuse(n, &w->msg, SW_ERROR_BUSY, g->request_id, (uint32_t)i + 1, text);",
     "        char addr[SW_WIRE_ADDR_MAX + 1];\n"
     "        SW_WARN(\"request '%s' from %s: %s\", g->request_id, w->msg.peer, text);\n"
     "        head_send_error(n, head_reply_addr(&w->msg, addr), SW_ERROR_BUSY, g->request_id, 0,\n"
     "                        (uint32_t)i + 1, text);",
     "test_log_abuse", {}),
    ("waits-gate: a request's 'waits' line outside the per-key log gate (a queue-and-cancel "
     "flood writes one line per cycle)",
     "node/head_admit.c",
     "    sw_log_gated(&h->wait_log, SW_LOG_INFO, head_who_label(&w->msg, who, sizeof who), now,\n"
     "                 \"request '%s' from %s waits",
     "    (void)who;\n    SW_INFO(\"request '%s' from %s waits",
     "test_log_abuse", {}),
    ("draft-flush-time: a batched draft forward's time is given to no proposal (draft_ms "
     "misses the head's drafting)",
     "drafter/draft_batch.c",
     "            seqs[i]->out->ms += ms;",
     "            (void)ms;",
     "test_draft_batch", {}),
    ("resume-rename-gate: the head's line for a Resume under another name of the request's "
     "key outside the per-key log gate (two connections of one key taking turns write one "
     "line per Resume)",
     "node/head_stream.c",
     "        sw_log_gated(&h->refused_log, SW_LOG_INFO, head_who_label(msg, who, sizeof who),\n"
     "                     sw_now_ms(), \"request '%s': its client %s is now %s (same key)\", s->rid,\n"
     "                     s->client, msg->peer);",
     "        (void)who;\n"
     "        SW_INFO(\"request '%s': its client %s is now %s (same key)\", s->rid, s->client,\n"
     "                msg->peer);",
     "test_log_abuse", {}),
    ("refusal-reroute: a stage's ERR_BAD_REQUEST ends the request at once (a stage restarted "
     "with another model file under its name ends the next request)",
     "node/head_session.c",
     "const int reroute = code == SW_ERROR_BAD_REQUEST && !s->refusal_rerouted;",
     "const int reroute = 0;",
     "test_restart_model", {}),
    ("route-other-model: another model's stage where the route needs one ends the route "
     "(a relay serving two models)",
     "node/head_route.c",
     "                             n->fingerprint);\n                continue;",
     "                             n->fingerprint);\n                *code = SW_ERROR_MODEL_MISMATCH;\n"
     "                return -1;",
     "test_multi", {}),
    ("sched-sender: a stage's fair queue without the sender's level: a node naming another's "
     "head takes that head's share",
     "node/sched.c",
     "    out[0] = node_sched_flow(q, 0, sender.p, sender.len);",
     "    out[0] = node_sched_flow(q, 0, \"\", 0 * sender.len);",
     "test_sched", {}),
    ("sched-head: a stage's fair queue without the head's level: behind a shared middle stage a "
     "head's client ids each take a share of their own",
     "node/sched.c",
     "    out[1] = node_sched_flow(q, out[0], head.p, head.len);",
     "    out[1] = node_sched_flow(q, out[0], \"\", 0 * head.len);",
     "test_sched", {}),
    ("progress: no Progress from the head: the client asks again during a slow prefill (issue 33)",
     "node/head_stream.c",
     "    const node_head_t *h = n->head;\n    const uint32_t next = s_next_ms(h, busy_ms);",
     "    const node_head_t *h = n->head;\n    if (h)\n        return;\n"
     "    const uint32_t next = s_next_ms(h, busy_ms);",
     "test_slow_stage", {}),
    ("fp-7hex: a model named by 7 hex digits of its fingerprint (8 are the minimum)",
     "client/join.c",
     "(strlen(model) >= 8 && !strncmp(p->model, model, strlen(model)));",
     "(strlen(model) >= 7 && !strncmp(p->model, model, strlen(model)));",
     "test_serve_api", {}),
    ("heads-last: several heads serving the model: the last one is taken",
     "client/join.c",
     "    *at = n_found == 1 ? found : n_found > 1 ? -2 : -1; /* -2: ambiguous, waiting cannot help "
     "*/\n    if (n_found == 1)\n        return 0;",
     "    *at = n_found >= 1 ? found : -1; /* -2: ambiguous, waiting cannot help "
     "*/\n    if (n_found >= 1)\n        return 0;",
     "test_serve_api", {}),
    ("head-field: 'shardwire.head' read and ignored",
     "gateway/openai.c",
     "        r->head = json_string_value(v);",
     "        (void)0;",
     "test_serve_api", {}),
    ("retry-after: no Retry-After on 503 busy",
     "gateway/gateway_endpoints.c",
     "    if (retry_after_s > 0) {",
     "    if (0 && retry_after_s > 0) {",
     "test_serve_api", {}),
    ("relay-unreachable: relay_unreachable reported under another code",
     "client/client.c",
     "        return \"relay_unreachable\";",
     "        return \"head_gone\";",
     "test_serve_api", {}),
    ("unauthorized: a head's clear 'unauthorized' error not taken as a wrong access key",
     "client/request.c",
     "!strcmp(r->head, m->peer) && er->code == SW_ERROR_UNAUTHORIZED) {",
     "!strcmp(r->head, m->peer) && er->code == SW_ERROR_UNAUTHORIZED + 100) {",
     "test_serve", {}),
    ("relay-rate: the relay's message rate limit (--rate) never reached",
     "relay/relay.c",
     "    const int over_rate = *msgs < 1.0;",
     "    const int over_rate = *msgs < 1.0 && 0;",
     "test_relay_budgets", {}),
    ("relay-bytes: the relay's byte rate limits (--node-mib-s, --client-mib-s) never reached",
     "relay/relay.c",
     "    if (over_rate || *bytes < (double)(total - id_len)) {",
     "    if (over_rate) {",
     "test_relay_budgets", {}),
    ("reload-role: a client key announcing as a node (the reload keeps a node whose key became a client key)",
     "net/keys.c",
     "    if (e->role == SW_ALLOW_CLIENT && role != SW_ROLE_CLIENT) {",
     "    if (0 && e->role == SW_ALLOW_CLIENT && role != SW_ROLE_CLIENT) {",
     "test_reload", {}),
    ("spot-compare: spot checks that never find two copies apart",
     "node/head_spot.c",
     "    if (k == S)\n        return; // all agree",
     "    if (k <= S)\n        return; // all agree",
     "test_spot", {}),
    ("hold-9: the relay's hold of 9 messages per sender and destination (8 documented)",
     "base/sw_limits.h",
     "#define SW_RELAY_PARK_PER_PAIR 8 ",
     "#define SW_RELAY_PARK_PER_PAIR 9 ",
     "test_relay_hold", {}),
    ("hold-10s: held messages kept 10 s instead of 5",
     "relay/forward.c",
     "#define RELAY_PARK_MS 5000 ",
     "#define RELAY_PARK_MS 10000 ",
     "test_relay_hold", {}),
    ("hold-none: no hold: a message for a full destination dropped at once",
     "relay/forward.c",
     "    if (r->n_parked == RELAY_PARK_MAX || r->parked_bytes + bytes > RELAY_PARK_BYTES ||",
     "    if (1 || r->n_parked == RELAY_PARK_MAX || r->parked_bytes + bytes > RELAY_PARK_BYTES ||",
     "test_relay_hold", {}),
    ("queue-total: the relay's total byte budget (--queue-total-mib) taken out",
     "relay/forward.c",
     "    return mine > 0 && (mine + bytes > r->queue_max || all + bytes > r->queue_total_max);",
     "    return mine > 0 && (mine + bytes > r->queue_max || (all && 0));",
     "test_relay_memory", {}),
    ("stop-cancel: the client library not cancelling at the head on a stop string",
     "client/stream.c",
     "            client_send_cancel(c, r, \"a stop string was generated\");",
     "            (void)0;",
     "test_serve_api", {}),
    ("tmp-left: a test that leaves its folder in /tmp (sw_test_done keeps it after a pass)",
     "tests/sw_test.c",
     "    if (s_log_dir[0] && !sw_test_failures)\n        s_log_dir_remove();",
     "    if (0 && s_log_dir[0] && !sw_test_failures)\n        s_log_dir_remove();",
     {"targets": ["test_relay_hold"],
      "cmd": ["bash", "scripts/ci/tmp_check.sh", "test_relay_hold", "ctest", "--test-dir", "BUILD",
              "-R", "^test_relay_hold$"], "est_s": 10}, {}),
    ("fuzz-gguf: the GGUF reader's bound check (s_take) taken out: fuzz_gguf from its seeds, 60 s",
     "engine/gguf.c",
     "    if (n > rd->size - rd->pos)\n        return s_fail(\n            rd, \"%s (%llu bytes at offset",
     "    if (0 && n > rd->size - rd->pos)\n        return s_fail(\n            rd, \"%s (%llu bytes at offset",
     {"targets": [],  # fuzz.sh builds build-fuzz/ (minutes when it is not there yet)
      "cmd": ["bash", "scripts/ci/fuzz.sh"], "est_s": 600},
     {"SW_FUZZ_ONLY": "fuzz_gguf", "SW_FUZZ_SECONDS": "60"}),
    ("hop-bound: a Forward's hop not bounded by its route, in the decoder (wire_check_round.c) and at the stage",
     ["net/wire_check_round.c", "node/stage.c"],
     ["    CHECK(f->hop < f->n_route, \"forward.hop %u outside a route of %zu stages\", f->hop, f->n_route);",
      "        f->hop >= f->n_route || strcmp(f->route[f->hop], sw_peer_name(n->peer)) != 0) {"],
     ["    (void)0;",
      "        strcmp(f->route[f->hop], sw_peer_name(n->peer)) != 0) {"],
     "test_garbage", {}),
    ("recover-pause: the head pausing the other sessions while one recovers (failure to the round through again)",
     ["node/recover.h", "node/recover.c", "node/head.c", "node/head.c"],
     ["int node_recover_failing(const node_recover_t *rec);",
      "int node_recover_failing(const node_recover_t *rec)\n{\n    return rec->failing;\n}",
      "    head_sess_t *ready[NODE_MAX_BATCH];\n    int n_ready = 0;\n",
      "        if (s->state == HEAD_RUN && head_advance(n, s, now) && n_ready < NODE_MAX_BATCH)"],
     ["int node_recover_failing(const node_recover_t *rec);\nint node_recover_recovering(const node_recover_t *rec);",
      "int node_recover_failing(const node_recover_t *rec)\n{\n    return rec->failing;\n}\n\n"
      "int node_recover_recovering(const node_recover_t *rec)\n{\n    return rec->t_fail != 0;\n}",
      "    head_sess_t *ready[NODE_MAX_BATCH];\n    int n_ready = 0;\n    int any_rec = 0;\n"
      "    for (int k = 0; k < h->n_slots; k++)\n"
      "        any_rec |= h->sess[k].state == HEAD_RUN && node_recover_recovering(h->sess[k].rec);\n",
      "        if (s->state == HEAD_RUN && (!any_rec || node_recover_recovering(s->rec)) &&\n"
      "            head_advance(n, s, now) && n_ready < NODE_MAX_BATCH)"],
     "test_recover_others", {}),
    ("spot-old-id: a convicted main route replayed under its old session id",
     "node/head_spot.c",
     "    head_new_id(s);\n    s->spot->id[0] = s->id;",
     "    s->spot->id[0] = s->id;",
     "test_spot", {}),
    ("spot-metrics: the gateway's /metrics never shows a head's spot report (the client drops it)",
     "client/spot.c",
     "            s_spot_copy(&c->spot[i].report, r);\n            c->spot[i].fresh = 1;",
     "            s_spot_copy(&c->spot[i].report, r);\n            c->spot[i].fresh = 0;",
     "test_spot", {}),
    ("spot-disputed: a convicted node shown as disputed in the gateway's /metrics",
     "gateway/metrics.c",
     "r->nodes[j].convicted ? \"convicted\" : \"disputed\"",
     "r->nodes[j].convicted ? \"disputed\" : \"disputed\"",
     "test_spot", {}),
    ("split-open: a part of a split set opened as a file of its own",
     "engine/gguf_split.c",
     "    if (s == 0 || (s == 1 && count == 1))",
     "    if (s == 0 || s == 1)",
     "test_gguf_split", {}),
    ("split-map: every part of a split set mapped when one tensor is used",
     "engine/gguf_split.c",
     "    if (s_map_part(g, t->part, err, err_len) != 0)\n        return NULL;",
     "    for (int i = 0; i < g->n_parts; i++)\n"
     "        if (!g->parts[i].map && s_map_part(g, i, err, err_len) != 0)\n"
     "            return NULL;",
     "test_gguf_split", {}),
    ("split-fp: a split set's fingerprint over part 1's header alone",
     "engine/partial.c",
     "    for (int i = 0; i < sw_gguf_part_count(g); i++) {\n        uint64_t len;",
     "    for (int i = 0; i < 1; i++) {\n        uint64_t len;",
     "test_gguf_split", {}),
    ("split-count: a part of a split set of another count taken",
     "engine/gguf_split.c",
     "    if (c != count) {",
     "    if (0) {",
     "test_gguf_split", {}),
    ("pull-part: a pull of a split set fetching only the part named",
     "hub/hub.c",
     "    const int n = hub_set_count(file);\n    if (n == 0)\n        return s_fetch_whole(",
     "    const int n = 0 * hub_set_count(file);\n    if (n == 0)\n        return s_fetch_whole(",
     "test_pull_split", {}),
    ("pull-ranges: a partial pull of a split set asking part 1 for every part's tensors",
     "hub/hub_partial.c",
     "        const hub_meta_t *m = &metas[s->part];",
     "        const hub_meta_t *m = &metas[0];",
     "test_pull_split", {}),
    ("park-kv: a parked session keeping its growing KV cache (issue 33, issue 35)",
     ["node/head_admit.c", "node/head_admit.c"],
     ["    sw_kv_free(&s->kv); // its bytes leave n->kv, for the request that takes the slot\n",
      "    if (!(s->kv = sw_kv_new_grow(n->model, s->n_ctx, &n->kv)))"],
     ["",
      "    if (!s->kv && !(s->kv = sw_kv_new_grow(n->model, s->n_ctx, &n->kv)))"],
     "test_park_kv", {}),
]

# Left out of --budget runs (CI), with why: a mutation its test does not catch every time
# would fail CI by chance. The full run (no --budget) still applies them.
NOT_IN_BUDGET = {
    # none: recover-pause was here (caught 3 of 4) until test_recover_others stopped reading
    # the other client's text after the recovery had ended (docs/testing.md, its row)
}

# the cuda tests run as programs (their environment given here), the others under ctest (the
# test environment tests/CMakeLists.txt sets: the programs and models they start)
GROUPS = {"cuda": (CUDA, "build-emu", "program"), "security": (SECURITY, "build", "ctest"),
          "claims": (CLAIMS, "build", "ctest")}



def run(cmd, env=None, cwd=None, timeout=None):
    """The command's result; with timeout (s), its process group is stopped then (SIGTERM,
    SIGKILL 10 s later) and the result's returncode is 124."""
    e = dict(os.environ)
    if env:
        e.update(env)
    p = subprocess.Popen(cmd, cwd=cwd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        import signal
        os.killpg(p.pid, signal.SIGTERM)
        try:
            out, _ = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
        return subprocess.CompletedProcess(cmd, 124, (out or "") +
                                           f"\ntimed out after {timeout:.0f} s (stopped)")
    return subprocess.CompletedProcess(cmd, p.returncode, out)


def edits_of(path, old, new):
    """[(file, [(old, new), ...]), ...]: one entry per edit of a mutation."""
    if isinstance(path, list):  # several files: one edit per file
        return [(p, [(o, n)]) for p, o, n in zip(path, old, new)]
    return [(path, list(zip(old, new)) if isinstance(old, list) else [(old, new)])]


def apply_text(files):
    """{full path: (its text, the mutated text)}, or the file whose text to mutate is not
    in it exactly once."""
    texts = {}
    for p, edits in files:
        full = os.path.join(ROOT, p)
        if full not in texts:
            t = open(full).read()
            texts[full] = (t, t)
        saved, mutated = texts[full]
        for o, n in edits:
            if mutated.count(o) != 1:
                return p
            mutated = mutated.replace(o, n)
        texts[full] = (saved, mutated)
    return texts


def test_cost(build):
    """A test's seconds in the build's last ctest run (CTestCostData.txt: name, runs, mean)."""
    cost = {}
    try:
        with open(os.path.join(build, "Testing", "Temporary", "CTestCostData.txt")) as f:
            for line in f:
                w = line.split()
                if len(w) == 3:
                    cost[w[0]] = float(w[2])
    except OSError:
        pass
    return cost


def seeded_window(mutations, seed):
    """The list rotated to start at an offset chosen by seed (any text: a commit, a date)."""
    import hashlib
    k = int(hashlib.sha256(seed.encode()).hexdigest(), 16) % len(mutations) if mutations else 0
    return mutations[k:] + mutations[:k], k


def main():
    argv = sys.argv[1:]
    budget, seed = None, None
    for flag in ("--budget", "--seed"):
        if flag in argv:
            i = argv.index(flag)
            if i + 1 >= len(argv):
                print(f"mutations.py: {flag} needs a value", file=sys.stderr)
                return 2
            val = argv[i + 1]
            del argv[i:i + 2]
            if flag == "--budget":
                try:
                    budget = float(val)
                except ValueError:
                    print(f"mutations.py: --budget takes seconds, not '{val}'", file=sys.stderr)
                    return 2
            else:
                seed = val
    if not argv or argv[0] not in GROUPS:
        print("usage: python3 scripts/ci/mutations.py cuda|security|claims [BUILD_DIR [TEXT]] "
              "[--budget SECONDS [--seed TEXT]]", file=sys.stderr)
        return 2
    group = argv[0]
    mutations, default_build, how = GROUPS[group]
    build = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(ROOT, default_build))
    only = argv[2] if len(argv) > 2 else None  # a part of the names to run
    if not os.path.isfile(os.path.join(build, "CMakeCache.txt")):
        print(f"{build}: not a build directory (bash scripts/build.sh first)", file=sys.stderr)
        return 2
    missed_ids = 0
    if group == "claims":  # the ids docs/testing.md's claims table names, in its order
        with open(os.path.join(ROOT, "docs", "testing.md")) as f:
            rows = f.read().split("## Claims and the tests that back them", 1)[-1]
        named = list(dict.fromkeys(re.findall(r"`m:([a-z0-9-]+)`", rows)))
        by_id = {m[0].split(":", 1)[0]: m for m in mutations}
        for mid in named:
            if mid not in by_id:
                print(f"SETUP ERROR: docs/testing.md names m:{mid}, which the claims group lacks")
        mutations = [by_id[mid] for mid in named if mid in by_id]
        missed_ids = len(named) - len(mutations)
    if only:
        mutations = [m for m in mutations if only in m[0]]
    n_named = len(mutations) + missed_ids
    # every mutation's text must still be in its file (cheap: checked for all, also those a
    # budget leaves out, so that a moved text fails at once)
    setup_bad = 0
    runnable = []
    for m in mutations:
        bad = apply_text(edits_of(m[1], m[2], m[3]))
        if isinstance(bad, str):
            print(f"SETUP ERROR: {m[0]}: the text to mutate is not in {bad} exactly once")
            setup_bad += 1
        else:
            runnable.append(m)
    cost = test_cost(build)
    if budget is not None:
        for m in [m for m in runnable if m[0].split(":", 1)[0] in NOT_IN_BUDGET]:
            mid = m[0].split(":", 1)[0]
            print(f"left out under --budget: {mid}: {NOT_IN_BUDGET[mid]}")
            runnable.remove(m)
        runnable, k = seeded_window(runnable, seed or "0")
        print(f"{group}: --budget {budget:g} s, --seed {seed or '0'}: from entry {k + 1} of "
              f"{len(runnable)}, each mutation started when its estimate (its test's last "
              "ctest time + the mean build so far) fits what is left")
    jobs = os.environ.get("SW_MUTATION_JOBS", "2")
    missed, run_n, stopped, t_start = missed_ids + setup_bad, 0, 0, time.time()
    built, t_builds = set(), []
    for name, path, old, new, test, env in runnable:
        t_one = time.time()
        if isinstance(test, dict):
            targets, label, tname = test["targets"], " ".join(test["cmd"][:3]), None
        else:
            # the programs the test starts are rebuilt with it
            targets, label = [test, "shardwire", "shardwire-node", "shardwire-relay"], test
            tname = test
        if budget is not None:
            left = budget - (t_one - t_start)
            est = (cost.get(tname, 60.0) if tname else test.get("est_s", 60.0)) + \
                (sum(t_builds) / len(t_builds) if t_builds else 20.0)
            if est > left:
                continue
        texts = apply_text(edits_of(path, old, new))
        run_n += 1
        for full, (_, mutated) in texts.items():
            open(full, "w").write(mutated)
        try:
            if targets:
                built.update(targets)
                b = run(["cmake", "--build", build, "-j" + jobs, "--target"] + targets)
                t_builds.append(time.time() - t_one)
                if b.returncode != 0:  # says nothing about the test: a broken mutation
                    err = [l for l in b.stdout.splitlines() if "error" in l]
                    print(f"SETUP ERROR: {name}: the mutated code does not build\n    "
                          f"{(err[0] if err else b.stdout.strip()[-300:])[:300]}")
                    missed += 1
                    continue
            t_test = time.time()
            # under a budget a test is stopped at 3x its usual time (at least 120 s): neither
            # caught nor missed then, "stopped" (ctest would have waited up to its TIMEOUT)
            limit = None if budget is None else max(120.0, 3 * cost.get(tname or "", 60.0))
            if isinstance(test, dict):
                t = run([build if a == "BUILD" else a for a in test["cmd"]], env=env, cwd=ROOT,
                        timeout=limit)
            elif how == "ctest":
                # -V: a test that passes shows its own lines too, printed below when it
                # did not catch the mutation (so that a miss says why); the reason lines are a
                # check's own ("check failed", SW_CHECK_INT's ", expected "), not a test's notes
                t = run(["ctest", "-R", f"^{test}$", "--output-on-failure", "-V"], env=env,
                        cwd=build, timeout=limit)
            else:
                t = run([os.path.join(build, "bin", test)], env=env, cwd=build, timeout=limit)
            lines = [l for l in t.stdout.splitlines()
                     if l.startswith("swemu:") or "differ" in l or "check failed" in l or
                     ", expected " in l or "tmp_check:" in l or "ERROR: AddressSanitizer" in l]
            secs = (f"{time.time() - t_one:.0f} s: build {t_test - t_one:.0f}, "
                    f"test {time.time() - t_test:.0f}")
            # a failing test keeps its folder in /tmp (tests/sw_test.c): expected here, so it
            # goes (kept with SW_MUTATION_VERBOSE, to be read)
            if not os.environ.get("SW_MUTATION_VERBOSE"):
                import shutil
                for d in re.findall(r"kept because it failed\): (/tmp/swtest\.\w+)", t.stdout):
                    shutil.rmtree(d, ignore_errors=True)
            if t.returncode == 124 and limit is not None:
                print(f"STOPPED after {limit:.0f} s (neither caught nor missed): {name}")
                stopped += 1
            elif t.returncode != 0:
                why = lines[0] if lines else t.stdout.strip().splitlines()[-1]
                print(f"caught by {label} ({secs}): {name}\n    {why[:300]}")
            else:
                print(f"NOT CAUGHT by {label} ({secs}): {name}")
                # the test's last lines of its own (ctest -V prefixes them "N: ")
                own = [re.sub(r"^\d+: ", "", l) for l in t.stdout.splitlines()
                       if re.match(r"^\d+: (?!Test command|Working Directory|Environment|Test timeout)", l)]
                for l in own[-6:]:
                    print("    " + l[:300])
                missed += 1
            if os.environ.get("SW_MUTATION_VERBOSE"):  # the test's output, to see why
                print("    | " + "\n    | ".join(t.stdout.rstrip().splitlines()[-40:]))
        finally:
            for full, (saved, _) in texts.items():
                open(full, "w").write(saved)
        sys.stdout.flush()
    # the programs rebuilt from the restored sources (the others were never rebuilt)
    t_re = time.time()
    if built:
        run(["cmake", "--build", build, "-j" + jobs, "--target"] + sorted(built))
    t_re = time.time() - t_re
    caught = run_n - stopped - (missed - missed_ids - setup_bad)
    st = f", {stopped} stopped" if stopped else ""
    total = time.time() - t_start
    if budget is None and not only:
        print(f"{group}: {caught} of {n_named} mutations caught ({total:.0f} s; the restored "
              f"programs rebuilt in {t_re:.0f} s)")
    else:
        print(f"{group}: caught {caught} of {run_n} run (of {n_named} named; "
              f"{setup_bad + missed_ids} setup errors{st}) in {total:.0f} s; the restored "
              f"programs rebuilt in {t_re:.0f} s")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
