#!/usr/bin/env python3
"""Which width should hidden states travel at? Runs the greedy fixture prompts
(tests/fixtures/greedy_smollm2.json) through relay + 2 nodes on loopback with
--dtype f32, f16 and bf16, and with --prefill-dtype f16 and bf16 (only a
prompt's rows narrower), and compares each with `shardwire generate` in one
process: tokens identical, logits digest identical, bytes per row; and, from
build/bin/bench_dtype (the same split in one process, the same rounding), the
largest difference of any logit while the two runs' contexts were equal.

    python3 scripts/bench/measure_dtype.py [--n 64] [--model M.gguf]
"""
import argparse, json, os, socket, subprocess, sys, time

here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=64)
ap.add_argument("--model", default=os.path.join(here, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
ap.add_argument("--bin", default=os.path.join(here, "build/bin"))
a = ap.parse_args()
cases = json.load(open(os.path.join(here, "tests/fixtures/greedy_smollm2.json")))["cases"]
info = json.loads(subprocess.check_output([f"{a.bin}/shardwire", "info", "--model", a.model, "--json"]))
L, E = info["n_layers"], info["n_embd"]

def run_json(argv):
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"{argv[1]} failed: {out.stderr.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1])

prompts = [c["prompt"] for c in cases if not c["parse_special"]]
ref = [run_json([f"{a.bin}/shardwire", "generate", "--greedy", "--model", a.model, "-p", p, "-n", str(a.n),
                 "--threads", "1", "--json"]) for p in prompts]
rows = []
modes = (("f32", ["--dtype", "f32"], 4, None), ("f16", ["--dtype", "f16"], 2, ("all", "f16")),
         ("bf16", ["--dtype", "bf16"], 2, ("all", "bf16")),
         ("prefill f16", ["--prefill-dtype", "f16"], 2, ("prefill", "f16")),
         ("prefill bf16", ["--prefill-dtype", "bf16"], 2, ("prefill", "bf16")))
for dtype, flags, width, bench in modes:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    ep = f"tcp://127.0.0.1:{port}"
    procs = [subprocess.Popen([f"{a.bin}/shardwire-relay", "--listen", ep, "--insecure-loopback"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    for name, rng in (("head", f"0:{L // 2}"), ("tail", f"{L // 2}:{L}")):
        procs.append(subprocess.Popen([f"{a.bin}/shardwire-node", "--model", a.model, "--layers", rng,
                                       "--relay", ep, "--name", name, "--threads", "1", *flags,
                                       "--insecure-loopback"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        for _ in range(100):
            st = subprocess.run([f"{a.bin}/shardwire", "status", "--relay", ep, "--json",
                                 "--insecure-loopback"], capture_output=True, text=True)
            if st.returncode == 0 and st.stdout.count('"role":"head"') + st.stdout.count('"role":"tail"') == 2:
                break
            time.sleep(0.2)
        same_tok = same_dig = 0
        first = []
        for p, r in zip(prompts, ref):
            j = run_json([f"{a.bin}/shardwire", "run", "--greedy", "--relay", ep, "-p", p, "-n", str(a.n), "--json",
                          "--insecure-loopback", "--draft", "none"])
            same_tok += j["tokens"] == r["tokens"]
            same_dig += j["logits_digest"] == r["logits_digest"]
            if j["tokens"] != r["tokens"]:
                first.append(next(i for i, (x, y) in enumerate(zip(j["tokens"], r["tokens"])) if x != y))
        worst = 0.0
        if bench:
            out = subprocess.run([f"{a.bin}/bench_dtype", a.model, str(a.n), *bench, *prompts],
                                 capture_output=True, text=True, timeout=1800)
            for line in out.stdout.splitlines():
                if line.startswith("{"):
                    worst = max(worst, json.loads(line)["max_logit_diff"])
        rows.append((dtype, E * width, same_tok, same_dig, first, worst))
    finally:
        for pr in procs:
            pr.terminate()
        for pr in procs:
            pr.wait()
print(f"{len(prompts)} prompts x {a.n} greedy tokens, relay + 2 nodes vs one process")
print("| dtype | bytes per row | tokens equal | logits equal | first divergence (token index) | "
      "largest logit difference |")
print("|---|---|---|---|---|---|")
for d, b, t, g, f, w in rows:
    print(f"| {d} | {b} | {t}/{len(prompts)} | {g}/{len(prompts)} | "
          f"{', '.join(map(str, f)) if f else '-'} | {w:.3g} |")
