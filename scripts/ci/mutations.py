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

Each mutation must make its test fail; the script exits 1 when one does not. The last
line counts them: "GROUP: N of M mutations caught (S s)". SW_MUTATION_JOBS sets the
build's jobs (default 2).
It edits the sources in place and puts them back after each, so run it on a
clean tree; the build directory is rebuilt at the end.
"""
import os
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
     "zmq_z85_encode(key, zmq_msg_data(&f[6]), 32) &&\n                   relay_allowed(r, key)) {",
     "zmq_z85_encode(key, zmq_msg_data(&f[6]), 32)) {",
     "test_security", {}),
    ("a node key announcing another node's name",
     "relay/auth.c",
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
     "relay/auth.c",
     "    if (e->role == SW_ALLOW_NODE && e->bind == SW_BIND_STAGE && role != SW_ROLE_MIDDLE &&",
     "    if (0 && e->role == SW_ALLOW_NODE && e->bind == SW_BIND_STAGE && role != SW_ROLE_MIDDLE &&",
     "test_roles", {}),
    ("a node key bound to the head role announcing as a middle stage",
     "relay/auth.c",
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
    ("recover-moved: a replay that moved keeps its round's first give-up time (issue 33)",
     "node/recover.c",
     "        rec->moved = 1; // the next failure waits a whole timeout",
     "        rec->moved = 0; // the next failure waits a whole timeout",
     "test_recover_loop", {}),
    ("progress: no Progress from the head: the client asks again during a slow prefill (issue 33)",
     "node/head_stream.c",
     "    const node_head_t *h = n->head;\n    /* Silent at most",
     "    const node_head_t *h = n->head;\n    if (h)\n        return;\n    /* Silent at most",
     "test_slow_stage", {}),
    ("fp-7hex: a model named by 7 hex digits of its fingerprint (8 are the minimum)",
     "client/join.c",
     "(strlen(model) >= 8 && !strncmp(p->model, model, strlen(model)));",
     "(strlen(model) >= 7 && !strncmp(p->model, model, strlen(model)));",
     "test_serve_api", {}),
    ("heads-last: several heads serving the model: the last one is taken",
     "client/join.c",
     "    if (n_found == 1)\n        return 0;\n    if (n_found > 1)",
     "    if (n_found >= 1)\n        return 0;\n    if (n_found > 1)",
     "test_serve_api", {}),
    ("head-field: 'shardwire.head' read and ignored",
     "gateway/openai.c",
     "        r->head = json_string_value(v);",
     "        (void)0;",
     "test_serve_api", {}),
    ("retry-after: no Retry-After on 503 busy",
     "gateway/gateway.c",
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
     "    const int over_rate = sender->tokens[cls] < 1.0;",
     "    const int over_rate = 0;",
     "test_relay_budgets", {}),
    ("relay-bytes: the relay's byte rate limits (--node-mib-s, --client-mib-s) never reached",
     "relay/relay.c",
     "    if (over_rate || sender->byte_tokens[cls] < (double)(total - id_len)) {",
     "    if (over_rate) {",
     "test_relay_budgets", {}),
    ("reload-role: a client key announcing as a node (the reload keeps a node whose key became a client key)",
     "relay/auth.c",
     "    if (e->role == SW_ALLOW_CLIENT && role != SW_ROLE_CLIENT) {",
     "    if (0 && e->role == SW_ALLOW_CLIENT && role != SW_ROLE_CLIENT) {",
     "test_reload", {}),
    ("spot-compare: spot checks that never find two copies apart",
     "node/head_spot.c",
     "    if (k == S)\n        return; // all agree",
     "    if (k <= S)\n        return; // all agree",
     "test_spot", {}),
    ("hold-9: the relay's hold of 9 messages per sender and destination (8 documented)",
     "relay/forward.c",
     "#define RELAY_PARK_PER_PAIR 8 ",
     "#define RELAY_PARK_PER_PAIR 9 ",
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
              "-R", "^test_relay_hold$"]}, {}),
    ("fuzz-gguf: the GGUF reader's bound check (s_take) taken out: fuzz_gguf from its seeds, 60 s",
     "engine/gguf.c",
     "    if (n > rd->size - rd->pos)\n        return s_fail(\n            rd, \"%s (%llu bytes at offset",
     "    if (0 && n > rd->size - rd->pos)\n        return s_fail(\n            rd, \"%s (%llu bytes at offset",
     {"targets": [],
      "cmd": ["bash", "scripts/ci/fuzz.sh"]},
     {"SW_FUZZ_ONLY": "fuzz_gguf", "SW_FUZZ_SECONDS": "60"}),
    ("hop-bound: a Forward's hop not bounded by its route, in the decoder (wire_check.c) and at the stage",
     ["net/wire_check.c", "node/stage.c"],
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
     "    randombytes_buf(&s->id, sizeof s->id);\n    s->id |= 1;\n    s->spot->id[0] = s->id;",
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

# the cuda tests run as programs (their environment given here), the others under ctest (the
# test environment tests/CMakeLists.txt sets: the programs and models they start)
GROUPS = {"cuda": (CUDA, "build-emu", "program"), "security": (SECURITY, "build", "ctest"),
          "claims": (CLAIMS, "build", "ctest")}



def run(cmd, env=None, cwd=None):
    e = dict(os.environ)
    if env:
        e.update(env)
    return subprocess.run(cmd, cwd=cwd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in GROUPS:
        print("usage: python3 scripts/ci/mutations.py cuda|security|claims [BUILD_DIR]", file=sys.stderr)
        return 2
    mutations, default_build, how = GROUPS[sys.argv[1]]
    build = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, default_build))
    only = sys.argv[3] if len(sys.argv) > 3 else None  # a part of the names to run
    if not os.path.isfile(os.path.join(build, "CMakeCache.txt")):
        print(f"{build}: not a build directory (bash scripts/build.sh first)", file=sys.stderr)
        return 2
    if sys.argv[1] == "claims":  # the ids docs/testing.md's claims table names, in its order
        import re
        with open(os.path.join(ROOT, "docs", "testing.md")) as f:
            rows = f.read().split("## Claims and the tests that back them", 1)[-1]
        named = list(dict.fromkeys(re.findall(r"`m:([a-z0-9-]+)`", rows)))
        by_id = {m[0].split(":", 1)[0]: m for m in mutations}
        for mid in named:
            if mid not in by_id:
                print(f"SETUP ERROR: docs/testing.md names m:{mid}, which the claims group lacks")
        mutations = [by_id[mid] for mid in named if mid in by_id]
        missed_ids = len(named) - len(mutations)
    else:
        missed_ids = 0
    jobs = os.environ.get("SW_MUTATION_JOBS", "2")
    missed, total, t_start = missed_ids, missed_ids, time.time()
    for name, path, old, new, test, env in mutations:
        if only and only not in name:
            continue
        # several files: path, old and new are lists of the same length, one edit per file
        if isinstance(path, list):
            files = [(p, [(o, n)]) for p, o, n in zip(path, old, new)]
        else:
            files = [(path, list(zip(old, new)) if isinstance(old, list) else [(old, new)])]
        saved, mutated, bad = {}, {}, None  # per file: its text, and with the edits so far
        for p, edits in files:
            full = os.path.join(ROOT, p)
            if full not in saved:
                saved[full] = mutated[full] = open(full).read()
            for o, n in edits:
                if mutated[full].count(o) != 1:
                    bad = p
                    break
                mutated[full] = mutated[full].replace(o, n)
        total += 1
        t_one = time.time()
        if bad is not None:
            print(f"SETUP ERROR: {name}: the text to mutate is not in {bad} exactly once")
            missed += 1
            continue
        for full in mutated:
            open(full, "w").write(mutated[full])
        try:
            if isinstance(test, dict):
                targets, label = test["targets"], " ".join(test["cmd"][:3])
            else:
                # the programs the test starts are rebuilt with it
                targets, label = [test, "shardwire", "shardwire-node", "shardwire-relay"], test
            if targets:
                b = run(["cmake", "--build", build, "-j" + jobs, "--target"] + targets)
                if b.returncode != 0:
                    print(f"caught at build time: {name}")
                    continue
            if isinstance(test, dict):
                t = run([build if a == "BUILD" else a for a in test["cmd"]], env=env, cwd=ROOT)
            elif how == "ctest":
                t = run(["ctest", "-R", f"^{test}$", "--output-on-failure"], env=env, cwd=build)
            else:
                t = run([os.path.join(build, "bin", test)], env=env, cwd=build)
            lines = [l for l in t.stdout.splitlines()
                     if l.startswith("swemu:") or "differ" in l or "check failed" in l or
                     "expected" in l or "tmp_check:" in l or "ERROR: AddressSanitizer" in l]
            if t.returncode != 0:
                why = lines[0] if lines else t.stdout.strip().splitlines()[-1]
                print(f"caught by {label} ({time.time() - t_one:.0f} s): {name}\n    {why[:300]}")
            else:
                print(f"NOT CAUGHT by {label}: {name}")
                missed += 1
        finally:
            for full in saved:
                open(full, "w").write(saved[full])
    run(["cmake", "--build", build, "-j" + jobs])
    print(f"{sys.argv[1]}: {total - missed} of {total} mutations caught "
          f"({time.time() - t_start:.0f} s)")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
